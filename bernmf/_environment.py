"""bernmf's environment variables, each read by :func:`read` with what it accepts.

A value that cannot be used is one ValueError that names the variable, what it accepts
and the value given, wherever it is read: ``BERNMF_CACHE_DIR`` and
``BERNMF_COMPILE_CACHE`` (:mod:`bernmf._cache`), ``BERNMF_MEMORY_LIMIT``
(:mod:`bernmf.data.memory`), ``BERNMF_COORDINATOR``, ``BERNMF_NUM_PROCESSES`` and
``BERNMF_PROCESS_ID`` (:mod:`bernmf.cli.launch`). Folders are read by :func:`folder`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

FOLDER = "a folder (absolute, relative to the working folder, or ~/...)"
"""What a variable that names a folder accepts, in words (:func:`folder`)."""

try:
    _WORKING = os.getcwd()
except OSError:  # a working folder that was removed: relative folders are then refused
    _WORKING = None


def read[T](
    variable: str,
    parse: Callable[[str], T],
    accepts: str,
    environ: Mapping[str, str] = os.environ,
) -> T | None:
    """The value of the environment variable ``variable``, or None when it is not set.

    Parameters
    ----------
    variable : str
        Its name, e.g. ``"BERNMF_MEMORY_LIMIT"``.
    parse : callable
        From the variable's text, without the white space around it (possibly empty),
        to its value; raises ValueError for a text it does not accept, with the reason
        as its message, if there is more to say than ``accepts``.
    accepts : str
        What the variable accepts, in words: ``"a whole number of bytes >= 1 (such
        as 16e9)"``.
    environ : mapping, optional
        The environment (``os.environ``).

    Returns
    -------
    object or None
        What ``parse`` made of the text.

    Raises
    ------
    ValueError
        ``"<variable> must be <accepts>, got <text>"``, and ``parse``'s reason.
    """
    text = environ.get(variable)
    if text is None:
        return None
    try:
        return parse(text.strip())
    except ValueError as error:
        reason = f": {error}" if str(error) else ""
        raise ValueError(f"{variable} must be {accepts}, got {text!r}{reason}") from None


def folder(text: str) -> Path | None:
    """The folder ``text`` names (:data:`FOLDER`), for :func:`read`; None if ``text`` is empty.

    ``~`` and ``~user`` are expanded; a relative folder is one of the working folder at
    ``import bernmf``, whatever folder the process changes to later.

    Raises
    ------
    ValueError
        ``~user`` of no known user (or ``~`` without a home), or a relative folder when
        the working folder at import was removed.
    """
    if not text:
        return None
    try:
        path = Path(text).expanduser()
    except RuntimeError:  # pathlib: "Could not determine home directory."
        raise ValueError(f"{Path(text).parts[0]!r} is no known user's home folder") from None
    if path.is_absolute():
        return path
    if _WORKING is None:
        raise ValueError("it is relative, and the working folder at import is gone")
    return Path(_WORKING, path)
