"""Writing results so that nothing the user had is lost: JSON values and atomic writers.

One writer, :func:`atomic_output`, serves both :meth:`bernmf.Fit.save` (a file) and
the command line (a results folder). Results are written to a new temporary name
next to the target (``.<name>.<host>-<pid>-<random>.tmp``, the name cut to fit the
file system's 255 bytes) and published only when complete, and only if the command
was not interrupted (:mod:`bernmf._interrupt`):

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
and they are removed when writing fails or is interrupted; missing folders above the
target are made (and removed again if nothing is published). A process killed while
writing (SIGKILL) leaves its temporary behind, and a folder it had set aside as
``.<name>.<host>-<pid>-<random>.old``: the start check of the next command writing
into the same folder (:func:`check_output`) removes the first and puts the second back
(or, when its place was taken, says where it is), once the process that made them is
gone (:func:`clean_leftovers`). Errors name the user's path, not a temporary one.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import secrets
import shutil
import socket
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from bernmf import _interrupt as interrupt
from bernmf._warnings import warn

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
    except OSError as error:
        if error.errno in (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG):
            return None  # nothing there, nor can be (check_writable says why)
        raise
    return stat.st_dev, stat.st_ino, stat.st_mtime_ns


def check_output(out, force: bool, *, keep=()) -> Target:
    """The start check of a results folder, before any work.

    Also removes, or puts back, what a killed writer left next to ``out``
    (:func:`clean_leftovers`).

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
        If ``force`` would delete the current folder or an input file, or ``out``
        cannot be written (:func:`check_writable`).
    OSError
        If the folder that would hold ``out`` cannot be written (PermissionError, ...).
    """
    out = Path(out)
    if os.path.isdir(out.parent):
        clean_leftovers(out.parent)
    replaces = _identity(out)
    if replaces is None:
        check_writable(out)
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
    check_writable(out)
    return Target(out, force, replaces)


def check_writable(path) -> None:
    """That a file or folder can be written at ``path``, before any work.

    The folders missing above it would be made when it is written; the first one that
    exists must be a folder this process can write to, and every name that would be
    made must fit the file system (255 bytes; the writer's temporary names are cut to
    fit). Checked by making and removing a temporary folder there, in one step that
    Ctrl-C does not cut in two (:func:`bernmf._interrupt.exclusive`).

    Raises
    ------
    ValueError
        A name too long, or a file where a folder should be; the message names ``path``.
    OSError
        The folder cannot be written (PermissionError, a read-only file system ...),
        with a message that names ``path``.
    """
    path = Path(path)
    folder, names = path.absolute().parent, [path.name]
    while not os.path.lexists(folder) and folder != folder.parent:
        folder, names = folder.parent, [*names, folder.name]
    if not folder.is_dir():
        raise ValueError(f"cannot write {path}: {folder} is not a folder")
    limit = _name_max(folder)
    for name in names:
        size = len(os.fsencode(name))
        if size > limit:
            shown = repr(name if len(name) <= 40 else name[:39] + "…")
            raise ValueError(
                f"cannot write {path}: the name {shown} is {size} bytes long, more than "
                f"the {limit} a file name may have there"
            )
    probe = _sibling(folder / names[-1], "tmp")
    with interrupt.exclusive():  # Ctrl-C between the two would leave the probe behind
        try:
            os.mkdir(probe, 0o700)
        except OSError as error:
            raise type(error)(
                error.errno, f"cannot write {path} in {folder}: {error.strerror}"
            ) from None
        os.rmdir(probe)


def _name_max(folder: Path) -> int:
    """The longest file name, in bytes, that ``folder``'s file system takes (255)."""
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):  # Windows has no pathconf
        return 255


@cache
def _host() -> str:
    """Six hex digits of this machine's name: a writer's names say where it ran."""
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:6]


LEFTOVER = re.compile(
    r"\.(?P<name>.+)\.(?P<host>[0-9a-f]{6})-(?P<pid>[0-9]+)-[0-9a-f]{12}\.(?P<kind>tmp|old)",
    re.DOTALL,
)
"""The names of the writer's temporary output (``tmp``) and set-aside folders (``old``)."""


def _sibling(path: Path, kind: str) -> Path:
    """A new name ``.<name>.<host>-<pid>-<random>.<kind>`` next to ``path``: the name is cut
    so that the whole fits the file system's limit (:data:`LEFTOVER` reads it back)."""
    suffix = f".{_host()}-{os.getpid()}-{secrets.token_hex(6)}.{kind}"
    existing = next(p for p in (path.parent, *path.parent.parents) if p.is_dir() or p == p.parent)
    room = _name_max(existing) - len(suffix) - 1
    name = path.name
    while len(os.fsencode(name)) > room:
        name = name[:-1]
    return path.with_name(f".{name}{suffix}")


def _alive(pid: int) -> bool:
    """Whether the process ``pid`` of this machine may still run (True when unsure)."""
    if os.name == "nt":  # os.kill would end it there
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # e.g. another user's process
        return True
    return True


def clean_leftovers(folder) -> None:
    """Remove, or put back, what a writer killed on this machine left in ``folder``.

    Only the writer's own names (:data:`LEFTOVER`) of a process that is gone: a
    temporary output is removed; a folder set aside by ``--force`` is put back at its
    name if that is free, and otherwise (or when its name was cut to fit) left where
    it is, with a warning that says where it is. Each is told in a warning.
    """
    folder = Path(folder)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return
    for name in names:
        match = LEFTOVER.fullmatch(name)
        if not match or match["host"] != _host() or _alive(int(match["pid"])):
            continue
        path, target = folder / name, folder / match["name"]
        if match["kind"] == "tmp":
            interrupt.remove(path)
            warn(f"removed {path}, left by a killed bernmf process")
            continue
        cut = len(os.fsencode(name)) >= _name_max(folder) - 3  # the name may have been cut
        if not cut and path.is_dir() and not path.is_symlink():
            try:
                _publish(path, target)
                warn(
                    f"put {target} back: a bernmf process killed while replacing it (--force) "
                    f"had set it aside as {name}"
                )
                continue
            except OSError:
                pass
        warn(
            f"{path} is a folder that a bernmf process killed while replacing {target} "
            "(--force) had set aside: the former results; remove it if they are not needed"
        )


def _made_folders(folder: Path) -> list[Path]:
    """Make ``folder`` and the folders missing above it; those made, outermost first.

    Each is registered for removal (if still empty) should the command be interrupted.
    """
    missing = []
    while not os.path.lexists(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    made = []
    with interrupt.exclusive():  # each folder made is registered before Ctrl-C can stop us
        for path in reversed(missing):
            try:
                os.mkdir(path, 0o777)
            except FileExistsError:  # made meanwhile by someone else: not ours to remove
                continue
            except OSError as error:
                _remove_empty(made)
                raise type(error)(error.errno, f"cannot make {path}: {error.strerror}") from None
            interrupt.register(path, tree=False)
            made.append(path)
    return made


def _remove_empty(folders: list[Path]) -> None:
    """Remove the ``folders`` (outermost first) that are still empty, innermost first."""
    for path in reversed(folders):
        with suppress(OSError):
            os.rmdir(path)
        interrupt.unregister(path)


def _temporary(path: Path, folder: bool) -> Path:
    """A new empty file or folder (:func:`_sibling`) next to ``path`` (umask applies),
    registered for removal should the command be interrupted; none once it was (an
    interrupt that came while it was made removes it)."""
    temporary = None
    try:
        with interrupt.exclusive():
            while True:
                name = _sibling(path, "tmp")
                try:
                    if folder:
                        os.mkdir(name, 0o777)
                    else:
                        os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
                except FileExistsError:  # a name taken by chance: draw another
                    continue
                except OSError as error:
                    raise type(error)(
                        error.errno, f"cannot write {path}: {error.strerror}"
                    ) from None
                temporary = name
                interrupt.register(temporary)
                break
    except KeyboardInterrupt:  # raised once the step ended: the caller never sees it
        if temporary is not None:
            interrupt.remove(temporary)
            interrupt.unregister(temporary)
        raise
    return temporary


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
    aside = _sibling(path, "old")
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


def _named(error: OSError, temporary: Path, path: Path) -> OSError:
    """``error`` about a file in ``temporary``, naming it as it will be under ``path``."""
    name = str(error.filename or "")
    if not name.startswith(str(temporary)):
        return error
    renamed = str(path) + name[len(str(temporary)) :]
    return type(error)(error.errno, error.strerror or str(error), renamed)


@contextmanager
def _warnings_named(temporary: Path, path: Path) -> Iterator[None]:
    """Warnings raised while ``temporary`` is written name it as ``path``, where it will be
    (a CSV's formula cells: "results/W.csv", not the temporary folder's name)."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            yield
    finally:
        for shown in caught:
            message = shown.message
            if str(temporary) in str(message):
                message = str(message).replace(str(temporary), str(path))
            warnings.warn_explicit(message, shown.category, shown.filename, shown.lineno)


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
    KeyboardInterrupt
        If the command was interrupted (:mod:`bernmf._interrupt`): nothing is published.
    OSError
        Writing failed; the message names the path under ``target.path``, as the
        warnings raised meanwhile do.
    """
    path = target.path
    made = _made_folders(path.parent)
    try:
        temporary = _temporary(path, folder)
    except BaseException:
        _remove_empty(made)
        raise
    done = False
    try:
        try:
            with _warnings_named(temporary, path):
                yield temporary
        except OSError as error:
            named = _named(error, temporary, path)
            if named is error:
                raise
            raise named from error
        with interrupt.exclusive():  # published only if not interrupted, and never cut
            if not target.force:
                _publish(temporary, path)
            elif folder:
                _replace_folder(temporary, target)
            else:
                os.replace(temporary, path)
            done = True
            if folder:  # a command's results (files, e.g. Fit.save's, may be parts of them)
                interrupt.published()
    finally:
        interrupt.remove(temporary)
        interrupt.unregister(temporary)
        if done:
            for made_folder in made:
                interrupt.unregister(made_folder)
        else:
            _remove_empty(made)
