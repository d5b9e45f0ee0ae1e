"""Where bernmf keeps files between processes, and JAX's persistent compilation cache.

Compiling a fit's program takes seconds; JAX can keep compiled programs on disk, so a
later process that fits the same shapes with the same options loads the program
instead (a fraction of a second). :func:`enable_compile_cache` points JAX's own cache
at ``<cache>/jax`` when bernmf is imported:

- ``BERNMF_CACHE_DIR`` moves the whole cache (downloaded data sets and compiled
  programs); by default it is the platform's user cache (``~/.cache/bernmf`` on
  Linux, ``$XDG_CACHE_HOME/bernmf`` when that is set).
- ``BERNMF_COMPILE_CACHE`` set to ``off`` (or ``0``, ``false``, ``no``, or empty)
  turns the compilation cache off; set to a folder, it moves only the compiled
  programs there.
- A folder already given to JAX (``JAX_COMPILATION_CACHE_DIR`` or
  ``jax.config.update("jax_compilation_cache_dir", ...)`` before ``import bernmf``)
  is left as it is.

A compiled program is loaded and run without checks, so the folder must be writable
by you alone (the default one is created with mode 0o700).
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_VARIABLE = "BERNMF_CACHE_DIR"
"""Environment variable that moves bernmf's cache folder."""

COMPILE_VARIABLE = "BERNMF_COMPILE_CACHE"
"""Environment variable that turns the compilation cache off ("off") or moves it."""

OFF = frozenset({"", "0", "off", "false", "no", "none"})
"""Values of :data:`COMPILE_VARIABLE` (case-insensitive) that turn the cache off."""


def user_cache_dir() -> Path:
    """bernmf's cache folder: ``$BERNMF_CACHE_DIR`` or the platform's user cache."""
    configured = os.environ.get(CACHE_VARIABLE)
    if configured:
        return Path(configured).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("bernmf"))


def compile_cache_dir() -> Path | None:
    """The folder of compiled programs, or None when :data:`COMPILE_VARIABLE` turns it off."""
    configured = os.environ.get(COMPILE_VARIABLE)
    if configured is None:
        return user_cache_dir() / "jax"
    if configured.strip().lower() in OFF:
        return None
    return Path(configured).expanduser()


def enable_compile_cache() -> Path | None:
    """Point JAX's persistent compilation cache at :func:`compile_cache_dir`.

    Every program is cached, however fast it compiled (JAX's default keeps only
    those that took a second or more). Leaves a folder already configured in JAX
    alone, and the cache off when the folder cannot be created.

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
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return folder
