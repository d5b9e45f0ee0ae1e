"""A fit's arguments other than the data, checked before anything is compiled: the rank
(and that it fits the data's shape), counts, real numbers, stopping rules, seeds, float
types, flags and a given start. The data themselves are :mod:`bernmf.data.observed`'s."""

from __future__ import annotations

import numpy as np


def check_rank(rank) -> int:
    """Return ``rank`` as an int after checking that it is an integer >= 1."""
    if rank is None:
        raise TypeError("rank is required: the number of components K, an integer >= 1")
    if isinstance(rank, bool) or not isinstance(rank, int | np.integer):
        raise TypeError(f"rank must be an integer, got {type(rank).__name__} {rank!r}")
    if rank < 1:
        raise ValueError(f"rank must be >= 1, got {rank}")
    return int(rank)


def check_count(name: str, value, least: int = 1, most: int | None = None) -> None:
    """Raise ValueError unless ``value`` is an integer (not a bool) in [least, most]."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | np.integer)
        or value < least
        or (most is not None and value > most)
    ):
        bound = f">= {least}" if most is None else f"in [{least}, {most}]"
        raise ValueError(f"{name} must be an integer {bound}, got {value!r}")


def check_real(
    name: str, value, low: float = -np.inf, high: float = np.inf, *, closed: str = "both"
) -> None:
    """Raise unless ``value`` is a finite real number (not a bool) between ``low`` and ``high``.

    ``closed`` says which ends belong to the range: ``"both"``, ``"left"``,
    ``"right"`` or ``"neither"``. TypeError for a value that is no number,
    ValueError for NaN, an infinity or a number outside the range.
    """
    if isinstance(value, bool | np.bool_) or not isinstance(
        value, int | float | np.integer | np.floating
    ):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    above = value >= low if closed in ("both", "left") else value > low
    below = value <= high if closed in ("both", "right") else value < high
    if not (np.isfinite(value) and above and below):
        left = "[" if closed in ("both", "left") else "("
        right = "]" if closed in ("both", "right") else ")"
        raise ValueError(
            f"{name} must be a finite number in {left}{low}, {high}{right}, got {value!r}"
        )


MAX_ITER = 10**6
"""Largest ``max_iter`` and other counts of iterations, sweeps or draws (svi ``steps``,
nuts and gibbs ``num_warmup``, ``num_samples``, ``thinning``): the traces hold one value
per iteration, preallocated (8 MB per fit at this bound), so a larger limit would
allocate gigabytes for fits that stop after a few iterations."""


def check_stopping(max_iter, tol) -> None:
    """Raise ValueError unless ``max_iter`` is an integer in [1, :data:`MAX_ITER`] and
    ``tol`` a finite number >= 0."""
    check_count("max_iter", max_iter, most=MAX_ITER)
    check_real("tol", tol, 0.0)


SEED_LIMIT = 2**32
"""Seeds are 32-bit (JAX keys, the uint32 seeds of batched MM fits): each seed a fit
uses must be below this bound, or distinct seeds would give the same fit."""


def check_seed(seed, count: int = 1) -> None:
    """Raise unless ``seed`` is an integer with ``0 <= seed`` and ``seed + count - 1 <
    SEED_LIMIT`` (a fit using ``count`` consecutive seeds)."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise TypeError(f"seed must be an integer, got {type(seed).__name__} {seed!r}")
    if seed < 0 or int(seed) + count - 1 >= SEED_LIMIT:
        used = "" if count == 1 else f" (this fit uses seeds seed, ..., seed + {count - 1})"
        raise ValueError(f"seed must be in [0, 2**32 - {count}]{used}, got {seed!r}")


DTYPES = {"float64": np.float64, "float32": np.float32}
"""The float dtypes an engine's ``dtype`` option names."""


def check_dtype(dtype: str) -> None:
    """Raise ValueError unless ``dtype`` is one of :data:`DTYPES`."""
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")


def check_flag(name: str, value) -> None:
    """Raise TypeError unless ``value`` is a bool."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be True or False, got {value!r}")


def check_rank_fits(rank: int, shape: tuple[int, int]) -> None:
    """Raise ValueError unless ``rank <= max(M, N)``.

    K = M components already express every probability matrix (W = I, H = P), so more
    than max(M, N) only costs memory (W and H grow with K).
    """
    if len(shape) == 2 and rank > max(shape):
        raise ValueError(
            f"rank must be <= max(M, N) = {max(shape)} for Y of shape {shape}, got {rank}"
        )


def check_init(init, M: int, N: int, K: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate user-given initial factors; return ``(W, H)`` as float64 arrays.

    W must be (M, K), nonnegative with rows summing to one (renormalized exactly
    here), and H (K, N) in [0, 1].
    """
    if len(init) != 2:
        raise ValueError("init must be a pair (W, H)")
    W, H = (np.array(a, dtype=float) for a in init)
    if W.shape != (M, K) or H.shape != (K, N):
        raise ValueError(
            f"init must have W of shape {(M, K)} and H of shape {(K, N)}, "
            f"got {W.shape} and {H.shape}"
        )
    if not (np.isfinite(W).all() and np.isfinite(H).all()):
        raise ValueError("init W and H must be finite")
    if (W < 0).any() or not np.allclose(W.sum(axis=1), 1, atol=1e-6):
        raise ValueError("init W must be nonnegative with rows summing to 1")
    if (H < 0).any() or (H > 1).any():
        raise ValueError("init H must lie in [0, 1]")
    return W / W.sum(axis=1, keepdims=True), H
