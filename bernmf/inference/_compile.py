"""Ahead-of-time compilation with a cache, so compile and run times are measured apart.

Every program is traced with ``jax.default_matmul_precision("highest")``: on GPUs, JAX
otherwise runs float32 matrix products in TF32 (about three significant digits), which
is enough to make a float32 MM objective rise (seen on an H200); on CPUs it changes
nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable

import jax

_CACHE: dict[Hashable, jax.stages.Compiled] = {}


def compiled(key: Hashable, function: Callable, *args, **static) -> tuple[Callable, float]:
    """Return ``(compiled_function, compile_seconds)`` for ``function`` at these arguments.

    Parameters
    ----------
    key : hashable
        Identifies the program; together with the arguments' shapes and dtypes,
        and the static keyword arguments, it is the cache key.
    function : callable
        A pure JAX function of ``args``.
    *args : arrays
        Example arguments (only their shapes and dtypes matter).
    **static
        Arguments that shape the program (bound with ``functools.partial``-like
        closure and part of the key).

    Returns
    -------
    compiled_function : callable
        Takes the same positional arguments as ``function``.
    compile_seconds : float
        0.0 when the compiled program came from the cache.
    """
    signature = tuple((tuple(a.shape), str(a.dtype)) for a in jax.tree.leaves(args))
    cache_key = (key, signature, tuple(sorted(static.items())), jax.config.jax_enable_x64)
    if cache_key in _CACHE:
        return _CACHE[cache_key], 0.0
    start = time.perf_counter()
    with jax.default_matmul_precision("highest"):
        lowered = jax.jit(lambda *a: function(*a, **static)).lower(*args)
        program = lowered.compile()
    seconds = time.perf_counter() - start
    _CACHE[cache_key] = program
    return program, seconds


def cache_size() -> int:
    """Number of compiled programs held (tests use it to check that nothing recompiles)."""
    return len(_CACHE)
