"""MM's random starts drawn on the host, bit for bit those of the compiled
:func:`~bernmf.inference.mm.kernel.random_init`.

A compiled fit that draws its start (``jax.random.uniform``) lowers JAX's threefry hash
each time it is lowered, by tracing its Python implementation: about 0.1 s of CPU, a
third of what a warm persistent cache still costs a second process
(docs/speed.md). :func:`uniform_draws` computes the same draws in numpy, so that
:func:`bernmf.inference.mm.run` hands them to a program without a random generator.
It follows JAX's default generator (threefry2x32, ``jax_threefry_partitionable``);
:func:`available` says whether JAX is configured so.
"""

from __future__ import annotations

import jax
import numpy as np

ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
"""The rotations of threefry2x32's rounds, alternating by groups of four."""


def available() -> bool:
    """Whether JAX's configured generator is the one :func:`uniform_draws` reproduces."""
    impl = jax.config.jax_default_prng_impl
    return impl == "threefry2x32" and bool(jax.config.jax_threefry_partitionable)


def threefry2x32(key: tuple, x1: np.ndarray, x2: np.ndarray) -> list[np.ndarray]:
    """The threefry2x32 hash (20 rounds) of the counters ``(x1, x2)`` under ``key``; uint32."""
    k1, k2 = (np.uint32(k) for k in key)
    ks = (k1, k2, k1 ^ k2 ^ np.uint32(0x1BD11BDA))
    with np.errstate(over="ignore"):
        x = [x1 + ks[0], x2 + ks[1]]
        for i in range(5):
            for r in ROTATIONS[i % 2]:
                x[0] = x[0] + x[1]
                x[1] = (x[1] << np.uint32(r)) | (x[1] >> np.uint32(32 - r))
                x[1] = x[0] ^ x[1]
            x = [x[0] + ks[(i + 1) % 3], x[1] + ks[(i + 2) % 3] + np.uint32(i + 1)]
    return x


def _bits(key: tuple, shape: tuple[int, ...], width: int) -> np.ndarray:
    """``jax.random.bits`` of ``width`` (32 or 64) bits: the hash of each entry's index."""
    index = np.arange(int(np.prod(shape)), dtype=np.uint64)
    high, low = (index >> np.uint64(32)).astype(np.uint32), index.astype(np.uint32)
    first, second = threefry2x32(key, high, low)
    if width == 32:
        return (first ^ second).reshape(shape)
    return ((first.astype(np.uint64) << np.uint64(32)) | second).reshape(shape)


def _uniform(key: tuple, shape: tuple[int, ...], dtype) -> np.ndarray:
    """``jax.random.uniform(key, shape, dtype, minval=eps, maxval=1)``."""
    info = np.finfo(dtype)
    width = info.bits
    unsigned = np.dtype(f"uint{width}")
    mantissa = _bits(key, shape, width) >> unsigned.type(width - info.nmant)
    floats = (mantissa | np.array(1.0, dtype).view(unsigned)).view(dtype) - dtype(1)
    low, high = dtype(info.eps), dtype(1)
    return np.maximum(low, floats * (high - low) + low)


def uniform_draws(seed: int, M: int, N: int, K: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """The uniform W (M, K) and H (K, N) that :func:`~bernmf.inference.mm.kernel.random_init`
    draws from ``jax.random.key(seed)``, before it normalizes the rows of W."""
    dtype = np.dtype(dtype).type
    counters = np.zeros(2, np.uint32), np.arange(2, dtype=np.uint32)
    first, second = threefry2x32((0, seed), *counters)  # jax.random.split(key(seed))
    key_w, key_h = (first[0], second[0]), (first[1], second[1])
    return _uniform(key_w, (M, K), dtype), _uniform(key_h, (K, N), dtype)
