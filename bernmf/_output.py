"""Writing results so that nothing the user had is lost: JSON values and atomic writers.

One writer, :func:`atomic_output`, serves both :meth:`bernmf.Fit.save` (a file) and
the command line (a results folder). Results are written to a new temporary name
next to the target (``.<name>.<random>.tmp``) and published only when complete:

* exclusively by default: a file is published with ``os.link`` and a folder by
  claiming the target with ``os.mkdir`` and renaming the temporary folder onto that
  empty claim (a POSIX rename replaces an empty folder; on Windows a plain rename,
  which never replaces anything); both fail with :class:`FileExistsError` if anything
  is at the target, so of two writers exactly one wins and nothing that appeared
  meanwhile is replaced;
* when replacing, a file with ``os.replace``; a folder only if it is the one that was
  there at the start check, its entries unchanged (:class:`Target`): it is renamed
  aside, the new folder is published exclusively, and only then is the old one
  deleted.

Temporary files and folders are created with ``os.open`` / ``os.mkdir`` and the usual
modes 0o666 / 0o777, so the user's umask applies (``tempfile`` would give 0600 / 0700),
and they are removed when writing fails or is interrupted.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import numpy as np

NON_FINITE = {math.inf: "inf", -math.inf: "-inf"}
"""The strings by which :func:`to_json` writes the floats that JSON has no number for
(NaN is ``"nan"``): standard JSON holds them, and ``float(text)`` reads them back."""


def to_json(value) -> object:
    """Numpy scalars and arrays as plain JSON values; NaN and infinities as the strings
    ``"nan"``, ``"inf"`` and ``"-inf"`` (:data:`NON_FINITE`), never null: JSON has no
    number for them, and null would read as "no value" (an inf perplexity is a value)."""
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_json(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return NON_FINITE.get(value, "nan")
    return value


def write_json(path: Path, value) -> None:
    """Write ``value`` (see :func:`to_json`) to ``path`` as indented JSON."""
    path.write_text(json.dumps(to_json(value), indent=2) + "\n")


@dataclass(frozen=True)
class Target:
    """Where results go, and what (if anything) they may replace.

    Attributes
    ----------
    path : Path
        The file or folder to write.
    force : bool
        The user allowed replacing (``--force`` / ``overwrite=True``): a file is then
        replaced whatever it is, a folder only if it is ``replaces``.
    replaces : tuple of (int, int, int) or None
        ``(st_dev, st_ino, st_mtime_ns)`` of the folder at ``path`` at the start
        check, None if there was none: a folder made there later, or whose entries
        changed since, is not the one the user allowed to be replaced.
    """

    path: Path
    force: bool = False
    replaces: tuple[int, int, int] | None = None


def _identity(path: Path) -> tuple[int, int, int] | None:
    """What is at ``path`` (links not followed): device, inode, modification time; or None.

    The time tells apart a folder deleted and made again (inode numbers are reused)
    and one whose entries changed; renaming a folder within its parent keeps it.
    """
    try:
        stat = os.lstat(path)
    except FileNotFoundError:
        return None
    return stat.st_dev, stat.st_ino, stat.st_mtime_ns


def check_output(out, force: bool, *, keep=()) -> Target:
    """The start check of a results folder, before any work.

    Parameters
    ----------
    out : str or Path
        The results folder.
    force : bool
        Allow replacing the folder that is at ``out`` now (and only that one).
    keep : iterable of paths, optional
        Input files that ``--force`` must never delete (they must not be inside ``out``).

    Returns
    -------
    Target
        To pass to :func:`atomic_output` once the results are computed: with
        ``force``, it replaces the folder at ``out`` only if that folder is still the
        one seen now; anything else that appears there during the run is kept.

    Raises
    ------
    FileExistsError
        If ``out`` exists and ``force`` is False, or exists and is not a folder.
    ValueError
        If ``force`` would delete the current folder or an input file.
    """
    out = Path(out)
    replaces = _identity(out)
    if replaces is None:
        return Target(out, force)
    if not force:
        raise FileExistsError(f"{out} exists; use --force to replace it")
    if not out.is_dir() or out.is_symlink():
        raise FileExistsError(f"{out} exists and is not a folder; it is never replaced")
    refuse = f"refusing to replace {out} with --force: it"
    if Path.cwd().resolve().is_relative_to(out.resolve()):
        raise ValueError(f"{refuse} is or contains the current folder")
    for path in keep:
        if path is not None and Path(path).resolve().is_relative_to(out.resolve()):
            raise ValueError(f"{refuse} contains the input {path}")
    return Target(out, force, replaces)


def _temporary(path: Path, folder: bool) -> Path:
    """A new empty file or folder ``.<name>.<random>.tmp`` next to ``path`` (umask applies)."""
    while True:
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            if folder:
                os.mkdir(temporary, 0o777)
            else:
                os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return temporary
        except FileExistsError:  # a name taken by chance: draw another
            continue


def _publish(temporary: Path, path: Path) -> None:
    """Move ``temporary`` to ``path``; FileExistsError, and no change, if ``path`` exists."""
    try:
        if temporary.is_dir() and os.name == "nt":
            os.rename(temporary, path)  # Windows' rename fails if anything is at path
        elif temporary.is_dir():
            os.mkdir(path)  # the claim: exactly one writer creates it
            try:
                os.rename(temporary, path)  # onto our own empty claim (POSIX)
            except BaseException:
                with suppress(OSError):
                    os.rmdir(path)  # only if still empty: never someone else's content
                raise
        else:
            os.link(temporary, path)
            os.unlink(temporary)
    except FileExistsError:
        raise FileExistsError(
            f"{path} appeared while the results were written; it was left untouched "
            "and these results were not saved"
        ) from None


def _replace_folder(temporary: Path, target: Target) -> None:
    """Publish the folder ``temporary`` in place of the folder ``target.replaces`` names.

    That folder is renamed aside, checked, and deleted only once the new one is in
    place; on any failure (or Ctrl-C) it is put back.
    """
    path = target.path
    aside = path.with_name(f".{path.name}.{secrets.token_hex(6)}.old")
    try:
        os.rename(path, aside)
    except FileNotFoundError:  # removed meanwhile: nothing to replace
        _publish(temporary, path)
        return
    try:
        if _identity(aside) != target.replaces:
            raise FileExistsError(
                f"{path} was created or changed while the results were written; --force "
                "replaces only what existed at the start, so these results were not saved"
            )
        _publish(temporary, path)
    except BaseException as error:
        try:
            _publish(aside, path)  # put back what was there
        except FileExistsError:
            raise FileExistsError(f"{error}; what was at {path} is now {aside}") from None
        raise
    shutil.rmtree(aside, ignore_errors=True)


@contextmanager
def atomic_output(target: Target, *, folder: bool) -> Iterator[Path]:
    """Yield a new temporary file or folder next to ``target.path``; publish it when complete.

    Parameters
    ----------
    target : Target
        Where to publish, and what may be replaced (see :func:`check_output`).
    folder : bool
        Write a folder (the command line's results) or a file (a saved fit).

    Yields
    ------
    Path
        The temporary file (empty) or folder (empty) to write.

    Raises
    ------
    FileExistsError
        If something that may not be replaced is at ``target.path`` when publishing;
        the temporary is removed and what is at the target is left as it is.
    """
    path = target.path
    temporary = _temporary(path, folder)
    try:
        yield temporary
        if not target.force:
            _publish(temporary, path)
        elif folder:
            _replace_folder(temporary, target)
        else:
            os.replace(temporary, path)
    finally:
        if folder:
            shutil.rmtree(temporary, ignore_errors=True)
        else:
            temporary.unlink(missing_ok=True)
