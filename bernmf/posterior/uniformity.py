"""Uniformity of ranks: the kernels of simulation-based calibration (SBC), on arrays.

SBC (Talts et al. 2018) draws parameters from the prior and data from them, fits the
posterior, and ranks the true value of a quantity among L posterior draws: when the
draws come from the exact posterior (and are independent) the rank is uniform on 0..L,
whatever the model. :func:`ranks` ranks, breaking ties (a point mass's L equal draws)
uniformly at random so that the null stays exact; :func:`pit_values` turns ranks into
PIT values ``(rank + U) / (L + 1)``, U uniform on [0, 1), exactly uniform on (0, 1)
under the null.

Uniformity of n PIT values is judged as Säilynoja, Bürkner & Vehtari (2022): at the
points z_j = j / n (j = 1..n-1) the ECDF count is Binomial(n, z_j) under the null;
:func:`tail_statistic` is the smallest two-sided binomial tail probability over the
points, :func:`ecdf_band` the ECDF difference (ECDF - z) with the simultaneous band that
holds the whole ECDF of a uniform sample with probability ``prob`` (as ArviZ's
``arviz_stats.ecdf_utils.ecdf_pit`` makes it, from ArviZ's functions: the pointwise band
at a simulated quantile of the same statistic, made once per n), and
:func:`uniformity_pvalue` the share of uniform samples (simulated once per n) whose
statistic is at most the observed one: p < 1 - prob exactly when the ECDF leaves the
band, up to the noise of the two simulations (tests/test_uniformity.py).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from scipy import stats

SIMULATIONS = 100_000
"""Uniform samples simulated for the null distribution of :func:`tail_statistic`: p-values
down to 1e-5, so that one below 0.001 survives a Bonferroni correction for 10 tests."""

BAND_SIMULATIONS = 1000
"""Uniform samples ArviZ simulates for the band of :func:`ecdf_band`."""

CHUNK = 10_000
"""Uniform samples simulated at once for the null distribution."""


def _check_rng(rng) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    return rng


def ranks(truth, draws, rng: np.random.Generator) -> np.ndarray:
    """The rank of each true value among its L draws, ties broken uniformly at random.

    Parameters
    ----------
    truth : array of shape (Q,)
        The true value of each of Q quantities.
    draws : array of shape (L, Q)
        L posterior draws of each quantity.
    rng : numpy.random.Generator
        Breaks ties: with t draws equal to the truth, the rank is the number of draws
        below it plus an integer uniform on 0..t.

    Returns
    -------
    ndarray of int, shape (Q,)
        In 0..L; uniform there when the truth is a draw from the distribution of the
        draws, also for a distribution with atoms.

    Raises
    ------
    ValueError
        Shapes that do not match, no draws, or a value that is not a number (NaN).
    """
    rng = _check_rng(rng)
    truth, draws = np.asarray(truth, float), np.asarray(draws, float)
    if truth.ndim != 1 or draws.ndim != 2 or draws.shape[1] != truth.shape[0]:
        raise ValueError(
            f"ranks: truth must have shape (Q,) and draws (L, Q), got {truth.shape} and "
            f"{draws.shape}"
        )
    if draws.shape[0] == 0:
        raise ValueError("ranks: no draws to rank among")
    if np.isnan(truth).any() or np.isnan(draws).any():
        raise ValueError("ranks: the truth or the draws hold NaN, which has no rank")
    below = (draws < truth).sum(axis=0)
    ties = (draws == truth).sum(axis=0)
    return below + rng.integers(0, ties + 1)


def pit_values(rank, draws: int, rng: np.random.Generator) -> np.ndarray:
    """Randomized PIT values ``(rank + U) / (L + 1)`` of ranks among L draws.

    Parameters
    ----------
    rank : array of int, shape (n,)
        Ranks in 0..L.
    draws : int
        L.
    rng : numpy.random.Generator
        Draws U, uniform on [0, 1).

    Returns
    -------
    ndarray of shape (n,)
        In [0, 1); uniform on it exactly when the ranks are uniform on 0..L.
    """
    rng = _check_rng(rng)
    rank = np.asarray(rank)
    if isinstance(draws, bool) or not isinstance(draws, int | np.integer) or draws < 1:
        raise ValueError(f"pit_values: draws must be an integer >= 1, got {draws!r}")
    if rank.ndim != 1 or not np.issubdtype(rank.dtype, np.integer):
        raise ValueError(
            f"pit_values: ranks must be integers of shape (n,), got {rank.dtype} {rank.shape}"
        )
    if ((rank < 0) | (rank > draws)).any():
        raise ValueError(f"pit_values: ranks must lie in 0..{draws}")
    return (rank + rng.random(rank.shape)) / (draws + 1)


def _check_pit(pit) -> np.ndarray:
    pit = np.asarray(pit, float)
    if pit.ndim != 1 or pit.size < 2:
        raise ValueError(f"PIT values must have shape (n,) with n >= 2, got {pit.shape}")
    if not ((pit >= 0) & (pit <= 1)).all():
        raise ValueError("PIT values must lie in [0, 1]")
    return pit


@functools.lru_cache(maxsize=16)
def _tails(n: int) -> np.ndarray:
    """Two-sided binomial tail probabilities, shape (n - 1, n + 1): entry [j - 1, k] is
    ``min(1, 2 min(P(X <= k), P(X >= k)))`` for X ~ Binomial(n, j / n)."""
    points = np.arange(1, n)[:, None] / n
    counts = np.arange(n + 1)[None, :]
    lower = stats.binom.cdf(counts, n, points)
    upper = stats.binom.sf(counts - 1, n, points)
    return np.minimum(1.0, 2 * np.minimum(lower, upper))


def _counts(pit: np.ndarray) -> np.ndarray:
    """The ECDF counts of n values at the points j / n, j = 1..n-1: shape (n - 1,)."""
    n = pit.size
    return np.searchsorted(np.sort(pit), np.arange(1, n) / n, side="right")


def _statistics(counts: np.ndarray, tails: np.ndarray) -> np.ndarray:
    """The statistic of ECDF counts (..., n - 1) at the points j / n."""
    return tails[np.arange(tails.shape[0]), counts].min(axis=-1)


def tail_statistic(pit) -> float:
    """The smallest two-sided binomial tail probability of the ECDF of ``pit`` over z_j = j / n.

    Parameters
    ----------
    pit : array of shape (n,)
        Values in [0, 1], n >= 2.

    Returns
    -------
    float
        ``min over j of min(1, 2 min(P(X <= k_j), P(X >= k_j)))``, X ~ Binomial(n, z_j),
        k_j the number of values <= z_j: small when the ECDF strays from the diagonal.
        ArviZ's ``gamma`` of a simulated sample is 1 minus this.
    """
    pit = _check_pit(pit)
    return float(_statistics(_counts(pit), _tails(pit.size)))


@functools.lru_cache(maxsize=16)
def null_statistics(n: int, simulations: int = SIMULATIONS, seed: int = 0) -> np.ndarray:
    """:func:`tail_statistic` of ``simulations`` uniform samples of size n, sorted.

    Computed once per (n, simulations, seed) in a process. A value in the bin [b / n,
    (b + 1) / n) is <= z_j exactly when b < j, so each sample's ECDF counts are the
    cumulative sums of its bin counts.
    """
    rng = np.random.default_rng(seed)
    tails = _tails(n)
    found = []
    for start in range(0, simulations, CHUNK):
        size = min(CHUNK, simulations - start)
        bins = (rng.random((size, n)) * n).astype(np.int64) + n * np.arange(size)[:, None]
        counts = np.bincount(bins.ravel(), minlength=size * n).reshape(size, n)
        found.append(_statistics(np.cumsum(counts, axis=1)[:, :-1], tails))
    return np.sort(np.concatenate(found))


def uniformity_pvalue(pit, simulations: int = SIMULATIONS, seed: int = 0) -> float:
    """The p-value of uniformity of ``pit``: the share of uniform samples as far from it.

    Parameters
    ----------
    pit : array of shape (n,)
        PIT values (:func:`pit_values`), n >= 2.
    simulations : int, default :data:`SIMULATIONS`
        Uniform samples of the null distribution (:func:`null_statistics`).
    seed : int, default 0
        Seed of those samples.

    Returns
    -------
    float
        ``(1 + #{simulated statistic <= observed}) / (simulations + 1)``: uniform (up to
        the discreteness of the statistic) when ``pit`` is a uniform sample, and at least
        ``1 / (simulations + 1)``.
    """
    if isinstance(simulations, bool) or not isinstance(simulations, int) or simulations < 1:
        raise ValueError(f"simulations must be an integer >= 1, got {simulations!r}")
    observed = tail_statistic(pit)
    null = null_statistics(np.size(pit), simulations, seed)
    return (1 + np.searchsorted(null, observed, side="right")) / (simulations + 1)


class Band(NamedTuple):
    """The ECDF difference of n PIT values and its simultaneous band (:func:`ecdf_band`).

    Attributes
    ----------
    points : ndarray of shape (n + 1,)
        0, 1/n, ..., 1.
    difference : ndarray of shape (n + 1,)
        ECDF at the points minus the points.
    lower, upper : ndarray of shape (n + 1,)
        The band, minus the points: a uniform sample's difference lies inside at every
        point with probability ``prob``.
    """

    points: np.ndarray
    difference: np.ndarray
    lower: np.ndarray
    upper: np.ndarray


@functools.lru_cache(maxsize=16)
def _band(n: int, prob: float, simulations: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The band's lower and upper ECDF at 0, 1/n, ..., 1, as ArviZ's ``ecdf_pit`` makes it:
    the pointwise binomial band at the level whose simultaneous coverage is ``prob``."""
    from arviz_stats.ecdf_utils import get_pointwise_confidence_band, simulate_confidence_bands

    points = np.arange(1, n) / n
    rng = np.random.default_rng(seed)
    level = simulate_confidence_bands(n, 1, points, prob, simulations, rng)
    lower, upper = get_pointwise_confidence_band(level, n, points)
    return np.concatenate([[0.0], lower, [1.0]]), np.concatenate([[0.0], upper, [1.0]])


def ecdf_band(pit, prob: float = 0.95, simulations: int = BAND_SIMULATIONS, seed: int = 0) -> Band:
    """The ECDF difference of ``pit`` and its simultaneous ``prob`` band (ArviZ's).

    Parameters
    ----------
    pit : array of shape (n,)
        PIT values, n >= 2.
    prob : float, default 0.95
        The band's simultaneous level.
    simulations : int, default :data:`BAND_SIMULATIONS`
        Uniform samples ArviZ simulates for the band.
    seed : int, default 0
        Seed of those samples: the band depends on n and the seed only, and is made
        once per process.

    Returns
    -------
    Band
    """
    pit = _check_pit(pit)
    if not 0 < prob < 1:
        raise ValueError(f"prob must lie in (0, 1), got {prob!r}")
    n = pit.size
    points = np.arange(n + 1) / n
    ecdf = np.concatenate([[0.0], _counts(pit) / n, [1.0]])  # ArviZ's ends: the band's
    lower, upper = _band(n, float(prob), simulations, seed)
    return Band(points, ecdf - points, lower - points, upper - points)
