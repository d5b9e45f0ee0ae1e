"""Where bernmf keeps files between processes, and JAX's persistent compilation cache.

Compiling a fit's program takes seconds; JAX can keep compiled programs on disk, so a
later process that fits the same shapes with the same options loads the program
instead (a fraction of a second). :func:`enable_compile_cache` points JAX's own cache
at ``<cache>/jax`` when bernmf is imported:

- ``BERNMF_CACHE_DIR`` moves the whole cache (downloaded data sets and compiled
  programs); by default it is the platform's user cache (``~/.cache/bernmf`` on
  Linux, ``$XDG_CACHE_HOME/bernmf`` when that is set).
- ``BERNMF_COMPILE_CACHE`` set to ``off`` (or ``0``, ``false``, ``no``, or empty)
  turns the compilation cache off, ``on`` (or ``1``, ``true``, ``yes``) leaves it on
  in its default folder; set to a folder, it moves only the compiled programs there.
- A relative folder is one of the working folder at ``import bernmf``, whatever
  folder the process changes to later (:func:`bernmf._environment.folder`).
- A folder already given to JAX (``JAX_COMPILATION_CACHE_DIR`` or
  ``jax.config.update("jax_compilation_cache_dir", ...)`` before ``import bernmf``)
  is left as it is.

A compiled program is loaded and run without checks, so the folder must be writable
by you alone (the default one is created with mode 0o700): one that belongs to another
user, or that a group (other than your own private group) or others can write to, is
refused, and so is one inside a folder that belongs to another user or that others can
write to without the sticky bit (they could put another folder in its place); root
is trusted (:func:`usable_compile_cache_dir`). The cache is then off, said by one
warning, as it is when the folder cannot be made or read, or when a variable cannot be
used (a ValueError that names it, elsewhere). A folder that can be read but not
written still serves the programs it holds; the new ones are compiled by every
process, said by one warning at the first of them (instead of one per program). Each
warning comes once per process, at the first program compiled: not at import, where
the command line could not yet write it as its one line (and ``bernmf --help``
compiles nothing). An entry that cannot be read (a process killed while writing it)
is removed once it failed, so that the program is saved again: JAX never replaces an
entry.
"""

from __future__ import annotations

import contextlib
import os
import stat
import warnings
from pathlib import Path

from bernmf._environment import FOLDER, folder, read
from bernmf._warnings import warn

CACHE_VARIABLE = "BERNMF_CACHE_DIR"
"""Environment variable that moves bernmf's cache folder."""

COMPILE_VARIABLE = "BERNMF_COMPILE_CACHE"
"""Environment variable that turns the compilation cache off ("off") or moves it."""

OFF = frozenset({"", "0", "off", "false", "no", "none"})
"""Values of :data:`COMPILE_VARIABLE` (case-insensitive) that turn the cache off."""
ON = frozenset({"1", "on", "true", "yes"})
"""Values of :data:`COMPILE_VARIABLE` (case-insensitive) that keep it in its default folder."""
COMPILE_ACCEPTS = f"off (0, false, no, none or empty), on (1, true, yes) or {FOLDER}"
"""What :data:`COMPILE_VARIABLE` accepts, in words."""

COMPILED = "/jax/core/compile/backend_compile_duration"
"""JAX's event of a program compiled or loaded from the cache (``jax._src.dispatch``)."""
MISSED = "/jax/compilation_cache/cache_misses"
"""JAX's event of a program missing from the cache, compiled and then saved."""


def user_cache_dir() -> Path:
    """bernmf's cache folder: ``$BERNMF_CACHE_DIR`` or the platform's user cache.

    Raises
    ------
    ValueError
        :data:`CACHE_VARIABLE` cannot be used; the message names it.
    """
    configured = read(CACHE_VARIABLE, folder, FOLDER)
    if configured is not None:
        return configured
    import platformdirs

    return Path(platformdirs.user_cache_dir("bernmf"))


def _programs(text: str) -> Path | bool:
    """:data:`COMPILE_VARIABLE`'s text: False (off), True (the default folder) or a folder."""
    if text.lower() in OFF:
        return False
    return True if text.lower() in ON else folder(text)


def compile_cache_dir() -> Path | None:
    """The folder of compiled programs, or None when :data:`COMPILE_VARIABLE` turns it off.

    Raises
    ------
    ValueError
        :data:`COMPILE_VARIABLE` or :data:`CACHE_VARIABLE` cannot be used; the message
        names it.
    """
    setting = read(COMPILE_VARIABLE, _programs, COMPILE_ACCEPTS)
    if setting is False:
        return None
    return setting if isinstance(setting, Path) else user_cache_dir() / "jax"


def _private_group(gid: int) -> bool:
    """Whether ``gid`` is this user's own group: their primary group, named as they are,
    with no other member (a user private group, as ``umask 002`` systems give each user)."""
    import grp
    import pwd

    try:
        user, group = pwd.getpwuid(os.geteuid()), grp.getgrgid(gid)
    except KeyError:
        return False
    mine = gid == user.pw_gid and group.gr_name == user.pw_name
    return mine and set(group.gr_mem) <= {user.pw_name}


def _untrusted(folder: Path) -> str | None:
    """Why others than this user (and root) could put programs into ``folder``, or None.

    ``folder`` (as given, and its real path) must be writable by no one else, and each
    folder above them writable by no one else unless sticky (else ``folder`` could be
    replaced); each of them, links included, must belong to this user or root.
    """
    if os.name == "nt":  # no owners and modes to read
        return None
    me, real = os.geteuid(), folder.resolve()
    for path in dict.fromkeys([folder, *folder.parents, real, *real.parents]):
        where = "it" if path in (folder, real) else f"{path} (above it)"
        try:
            status = os.lstat(path)
        except OSError as error:
            return f"{where} cannot be checked ({error.strerror})"
        if status.st_uid not in (me, 0):
            return f"{where} belongs to another user (uid {status.st_uid})"
        mode = status.st_mode
        if stat.S_ISLNK(mode):
            continue
        if mode & 0o002:
            writers = "others"
        elif mode & 0o020 and not _private_group(status.st_gid):
            writers = f"its group (gid {status.st_gid})"
        else:
            continue
        if where == "it":
            return f"it can be written by {writers} ({stat.filemode(mode)})"
        if not mode & stat.S_ISVTX:
            return (
                f"{where} can be written by {writers} ({stat.filemode(mode)}), without the "
                "sticky bit, so it could be replaced"
            )
    return None


def _unusable(folder: Path) -> str | None:
    """Why the folder of compiled programs ``folder`` cannot be used, once made; or None."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        if os.path.exists(folder):
            return "it is not a folder"
        return f"it cannot be made ({error.strerror})"
    if reason := _untrusted(folder):
        return reason
    return None if os.access(folder, os.R_OK | os.X_OK) else "it cannot be read"


def usable_compile_cache_dir() -> tuple[Path | None, str | None]:
    """The folder of compiled programs, made, if it can be used; else why not.

    Returns
    -------
    (Path, None)
        A folder that this user can read and that no one else but root can write to.
    (None, str)
        The cache is off, and the warning that says why: a variable that cannot be
        used, or a folder that cannot be made or read, or that others could write to
        (see the module).
    (None, None)
        :data:`COMPILE_VARIABLE` turns the cache off.
    """
    try:
        programs = compile_cache_dir()
    except ValueError as error:
        return None, f"the compilation cache is off: {error}"
    if programs is None:
        return None, None
    if reason := _unusable(programs):
        return None, (
            f"the compilation cache {programs} is off: {reason}; set {COMPILE_VARIABLE} to "
            "a folder that only you can write to, or to off"
        )
    return programs, None


def _writable(folder: Path) -> bool:
    """Whether a file can be made in ``folder`` (made and removed: as root, or on a
    read-only or immutable file system, the permission bits do not tell)."""
    probe = folder / f".bernmf-probe-{os.getpid()}"
    try:
        probe.touch()
    except OSError:
        return False
    with contextlib.suppress(OSError):
        probe.unlink()
    return True


def _warn_at_first(event: str, message: str) -> None:
    """Warn ``message`` once, at the first JAX ``event`` of this process (:data:`COMPILED`
    or :data:`MISSED`), in place of JAX's own warnings, one per program."""
    import jax

    told = []

    def listen(name: str, *args, **kwargs) -> None:
        if name == event and not told:
            told.append(name)
            warn(message, RuntimeWarning)

    jax.monitoring.register_event_listener(listen)
    jax.monitoring.register_event_duration_secs_listener(listen)


def _remove_damaged_entries(folder: Path) -> None:
    """Remove a cache entry that JAX fails to read, so that it saves the program again.

    JAX warns, compiles, and keeps the damaged entry (it never replaces one). Its
    reader, ``jax._src.compilation_cache.get_executable_and_time(cache_key, ...)``,
    is wrapped; an entry is the file ``<folder>/<cache_key>-cache`` (and its
    ``-atime``). Left as it is if that reader is not there.
    """
    from jax._src import compilation_cache

    original = getattr(compilation_cache, "get_executable_and_time", None)
    if original is None or getattr(original, "removes_damaged", False):
        return

    def get_executable_and_time(cache_key, *args, **kwargs):
        try:
            return original(cache_key, *args, **kwargs)
        except Exception:
            for suffix in ("-cache", "-atime"):
                with contextlib.suppress(OSError, TypeError):
                    (folder / f"{cache_key}{suffix}").unlink(missing_ok=True)
            raise

    get_executable_and_time.removes_damaged = True
    compilation_cache.get_executable_and_time = get_executable_and_time


def enable_compile_cache() -> Path | None:
    """Point JAX's persistent compilation cache at :func:`usable_compile_cache_dir`.

    Every program is cached, however fast it compiled (JAX's default keeps only
    those that took a second or more). Leaves a folder already configured in JAX
    alone; a folder that cannot be used leaves the cache off, and one that cannot be
    written is read, each with one warning (see the module).

    Returns
    -------
    Path or None
        The folder JAX caches compiled programs in, or None when the cache is off.
    """
    import jax

    configured = jax.config.jax_compilation_cache_dir
    if configured:
        return Path(configured)
    programs, problem = usable_compile_cache_dir()
    if problem is not None:
        _warn_at_first(COMPILED, problem)
    if programs is None:
        return None
    if not _writable(programs):
        warnings.filterwarnings("ignore", "Error writing persistent compilation cache entry")
        _warn_at_first(
            MISSED,
            f"the compilation cache {programs} cannot be written: programs are loaded from "
            "it, but new ones are compiled again by every process",
        )
    _remove_damaged_entries(programs)
    jax.config.update("jax_compilation_cache_dir", str(programs))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return programs
