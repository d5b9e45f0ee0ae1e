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
  folder the process changes to later.
- A folder already given to JAX (``JAX_COMPILATION_CACHE_DIR`` or
  ``jax.config.update("jax_compilation_cache_dir", ...)`` before ``import bernmf``)
  is left as it is.

A folder that exists but cannot be written still serves the programs it holds; the
new ones are compiled by every process, said by one warning at the first of them
(instead of one per program). An entry that cannot be read (a process killed while
writing it) is removed once it failed, so that the program is saved again: JAX
never replaces an entry.

A compiled program is loaded and run without checks, so the folder must be writable
by you alone (the default one is created with mode 0o700).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from pathlib import Path

from bernmf._warnings import warn

CACHE_VARIABLE = "BERNMF_CACHE_DIR"
"""Environment variable that moves bernmf's cache folder."""

COMPILE_VARIABLE = "BERNMF_COMPILE_CACHE"
"""Environment variable that turns the compilation cache off ("off") or moves it."""

OFF = frozenset({"", "0", "off", "false", "no", "none"})
"""Values of :data:`COMPILE_VARIABLE` (case-insensitive) that turn the cache off."""
ON = frozenset({"1", "on", "true", "yes"})
"""Values of :data:`COMPILE_VARIABLE` (case-insensitive) that keep it in its default folder."""

try:
    _WORKING = os.getcwd()
except OSError:  # a working folder that was removed: relative folders are then refused
    _WORKING = None


def _absolute(configured: str, variable: str) -> Path:
    """The folder a variable names: ``~`` expanded, relative to the working folder at import."""
    path = Path(configured).expanduser()
    if path.is_absolute():
        return path
    if _WORKING is None:
        raise ValueError(f"{variable}={configured!r} is relative to a working folder that is gone")
    return Path(_WORKING, path)


def user_cache_dir() -> Path:
    """bernmf's cache folder: ``$BERNMF_CACHE_DIR`` or the platform's user cache."""
    configured = os.environ.get(CACHE_VARIABLE)
    if configured:
        return _absolute(configured, CACHE_VARIABLE)
    import platformdirs

    return Path(platformdirs.user_cache_dir("bernmf"))


def compile_cache_dir() -> Path | None:
    """The folder of compiled programs, or None when :data:`COMPILE_VARIABLE` turns it off."""
    configured = os.environ.get(COMPILE_VARIABLE)
    if configured is None or configured.strip().lower() in ON:
        return user_cache_dir() / "jax"
    if configured.strip().lower() in OFF:
        return None
    return _absolute(configured, COMPILE_VARIABLE)


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


def _warn_once_when_compiling(folder: Path) -> None:
    """For a folder that cannot be written: one warning at the first program JAX would
    save, instead of JAX's own, one per program."""
    import jax

    told = []
    message = (
        f"the compilation cache {folder} cannot be written: programs are loaded from it, "
        "but new ones are compiled again by every process"
    )

    def listen(event: str, **kwargs) -> None:
        if event == "/jax/compilation_cache/cache_misses" and not told:
            told.append(event)
            warn(message, RuntimeWarning)

    warnings.filterwarnings("ignore", "Error writing persistent compilation cache entry")
    jax.monitoring.register_event_listener(listen)


def _remove_damaged_entries(folder: Path) -> None:
    """Remove a cache entry that JAX fails to read, so that it saves the program again.

    JAX warns, compiles, and keeps the damaged entry (it never replaces one). Its
    reader, ``jax._src.compilation_cache.get_executable_and_time(cache_key, ...)``,
    is wrapped; an entry is the file ``<folder>/<cache_key>-cache`` (and its
    ``-atime``). Left as it is if that reader is not there.
    """
    from jax._src import compilation_cache

    read = getattr(compilation_cache, "get_executable_and_time", None)
    if read is None or getattr(read, "removes_damaged", False):
        return

    def get_executable_and_time(cache_key, *args, **kwargs):
        try:
            return read(cache_key, *args, **kwargs)
        except Exception:
            for suffix in ("-cache", "-atime"):
                with contextlib.suppress(OSError, TypeError):
                    (folder / f"{cache_key}{suffix}").unlink(missing_ok=True)
            raise

    get_executable_and_time.removes_damaged = True
    compilation_cache.get_executable_and_time = get_executable_and_time


def enable_compile_cache() -> Path | None:
    """Point JAX's persistent compilation cache at :func:`compile_cache_dir`.

    Every program is cached, however fast it compiled (JAX's default keeps only
    those that took a second or more). Leaves a folder already configured in JAX
    alone, and the cache off when the folder cannot be created; one that cannot be
    written is read, with one warning (see the module).

    Returns
    -------
    Path or None
        The folder JAX caches compiled programs in, or None when the cache is off.
    """
    import jax

    configured = jax.config.jax_compilation_cache_dir
    if configured:
        return Path(configured)
    folder = compile_cache_dir()
    if folder is None:
        return None
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:  # a read-only home, say: compile every time, without a warning per program
        return None
    if not _writable(folder):
        _warn_once_when_compiling(folder)
    _remove_damaged_entries(folder)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return folder
