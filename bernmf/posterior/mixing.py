"""Did the chains mix? R-hat of WH within each mode, across all chains and nested, judged
at the chains' ESS.

Chains of this model's posterior started at different MAP solutions (``nuts``' default
start) may stay in different modes, or may be one mode sampled too briefly: R-hat above
1.01 says either. :func:`mode_rhat` tells them apart. Given the mode of each chain
(:func:`bernmf.posterior.modes.chain_modes`), it gives the rank R-hat of every entry of
``W @ H`` among the chains of each mode and among all chains, each chain's bulk ESS of WH
(:func:`chain_ess`), and the nested R-hat with the chains' start groups as superchains
(Margossian et al. 2024), all in numpy, a tile of WH at a time
(:mod:`bernmf.posterior.convergence`). Its :attr:`ModeRhat.status` is one of
:data:`STATUSES`:

- ``"mixed"``: every chain has a bulk ESS of at least :data:`ESS_MIN`, and at least
  :data:`MIXED_SHARE` of the WH entries have R-hat <= :func:`rhat_bound`, what chains of
  one distribution at that ESS reach;
- ``"distinct modes"``: every chain's ESS is adequate, R-hat is above that bound, and the
  chains' mean WH fall in several modes, apart by more than their Monte Carlo error
  explains: each chain sampled something well, and they disagree;
- ``"low ESS"``: the rest: a chain too short to tell (ESS under :data:`ESS_MIN`), or chains
  of one mode whose R-hat is above the bound at their median ESS (entries of lower ESS).

:func:`chain_moments` gives each chain's mean and variance of WH, from which
:func:`~bernmf.posterior.modes.chain_modes` tells the modes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from bernmf.posterior.calibration import BLOCK_VALUES
from bernmf.posterior.convergence import CHUNK_VALUES, ess_rows, rank_rhat_rows
from bernmf.posterior.draws import (
    RHAT_WARN,
    _components_first,
    _wh_rhat,
    check_threads,
    wh_entries,
)

if TYPE_CHECKING:
    import pandas as pd

MIXED, LOW_ESS, DISTINCT_MODES = "mixed", "low ESS", "distinct modes"
STATUSES = (MIXED, LOW_ESS, DISTINCT_MODES)
"""What :attr:`ModeRhat.status` says of a sampler's chains (the module docstring)."""

MIXED_SHARE = 0.99
"""Chains are mixed when at least this share of the WH entries has R-hat <= the bound."""

ESS_MIN = 100
"""The least bulk ESS of WH per chain (median over the entries) at which chains are judged:
Vehtari et al. (2021) ask for a bulk ESS above 400 over 4 chains, 100 a chain, before
R-hat and ESS are to be trusted. Below it the status is ``"low ESS"``: 4 iid chains of 50
draws per entry give R-hat <= 1.01 on 69% of the entries by chance alone, of 100 draws on
90%, of 250 on 99.8% (20,000 entries of iid normal draws), and an ESS estimated
from fewer draws than that is itself unreliable."""

ESS_ENTRIES = 1000
"""WH entries, drawn at random, whose per-chain bulk ESS :func:`chain_ess` takes the median of."""

REFERENCE_QUANTILE = 0.999
""":func:`rhat_bound`: the quantile of the reference chains' R-hat that the chains' own
R-hat must not exceed on :data:`MIXED_SHARE` of the entries. The 99.9th percentile, not
the 99th, leaves room for the spread of a share over correlated WH entries: 4 iid chains
of 100, 250 and 1,000 draws had their 99th percentile of R-hat at 1.0196, 1.0077 and
1.0019, their 99.9th at 1.0271, 1.0106 and 1.0028; distinct modes put R-hat at 1.2 and
above on whole components (chains one posterior sd apart: about sqrt(1 + 1/2))."""

REFERENCE_ENTRIES = 4000
"""Entries of the reference chains of :func:`rhat_bound`. At 4 chains of 100 draws (ESS 100),
250 (ESS 150), 500 (ESS 300) and 1,000 (ESS 100), its 99.9th percentile has an sd of 0.0005
to 0.001 over 5 seeds and lies 0.0005 to 0.003 below that of 16,000 entries, for 0.1 to 0.4
CPU s a bound (0.2 to 1.9 at 16,000)."""


def mixed(rhat, *, threshold: float = RHAT_WARN, share: float = MIXED_SHARE) -> bool:
    """Whether at least ``share`` of the entries of ``rhat`` are at most ``threshold``.

    NaN (an R-hat that could not be computed: one chain, too few draws) counts as not
    mixed, so an all-NaN array is never "mixed".
    """
    rhat = np.asarray(rhat, float)
    if rhat.size == 0:
        raise ValueError("rhat is empty")
    return bool(np.mean(rhat <= threshold) >= share)


def rhat_bound(chains: int, draws: int, ess: float) -> float:
    """The largest R-hat of WH that chains of one distribution at bulk ESS ``ess`` explain.

    ``max(1.01, q)``, with q the :data:`REFERENCE_QUANTILE` quantile of the rank R-hat of
    :data:`REFERENCE_ENTRIES` entries of ``chains`` reference chains of ``draws`` draws
    whose bulk ESS per chain is ``ess``: stationary AR(1) chains of standard normal
    draws with autocorrelation ``rho = (draws - ess) / (draws + ess)`` (ESS ``draws (1 -
    rho) / (1 + rho)``; iid for ``ess = draws``, antithetic above), seed 0. The bound is
    set by the ESS, little by the draws: at 4 chains and ESS 50 and 100, 1.059 to 1.069 and
    1.028 to 1.035 for 100 to 2,000 draws, at ESS 200 1.014 to 1.017 for 250 to 2,000.
    Vehtari et al. (2021)'s 1.01 stays the floor: an R-hat at or below it is mixed at any
    ESS.

    Parameters
    ----------
    chains : int
        At least 2.
    draws : int
        Per chain, at least 4.
    ess : float
        Bulk ESS per chain, positive: cut to two significant digits (146 to 140, so that
        bounds are made once for many calls, each at most 7% more lenient) and to at most
        ``draws * log10(draws)`` (the most that ``arviz_stats``' ESS gives a chain).

    Returns
    -------
    float
    """
    if chains < 2 or draws < 4 or not ess > 0:
        raise ValueError(
            f"rhat_bound needs 2 chains of 4 draws and a positive ESS, got {chains} chains of "
            f"{draws} draws at ESS {ess}"
        )
    ess = min(ess, max(draws, draws * np.log10(draws)))
    unit = 10 ** max(0, int(np.floor(np.log10(ess))) - 1)
    return max(RHAT_WARN, _reference_rhat(int(chains), int(draws), max(1, int(ess // unit) * unit)))


@functools.lru_cache(maxsize=64)
def _reference_rhat(chains: int, draws: int, ess: int) -> float:
    """The :data:`REFERENCE_QUANTILE` quantile of the R-hat of :func:`rhat_bound`'s chains."""
    rho = (draws - ess) / (draws + ess)
    shape = (REFERENCE_ENTRIES, chains)
    x = np.random.default_rng(0).standard_normal((draws, *shape), dtype=np.float32)
    x[1:] *= np.sqrt(1 - rho**2)  # the first draw from the stationary distribution
    for t in range(1, draws):  # a step for all chains at once: faster than scipy's lfilter
        x[t] += rho * x[t - 1]
    return float(np.quantile(rank_rhat_rows(np.moveaxis(x, 0, -1)), REFERENCE_QUANTILE))


@dataclass(frozen=True)
class ModeRhat:
    """Result of :func:`mode_rhat`: R-hat of WH within modes, across them and nested.

    Attributes
    ----------
    modes : ndarray of int, shape (C,)
        The mode of each chain, labels 0 .. G - 1.
    starts : ndarray of int, shape (C,), or None
        The start group of each chain (the superchains of :attr:`nested`), as given.
    ess : ndarray of shape (C,)
        Each chain's bulk ESS of WH, the median over entries (:func:`chain_ess`).
    draws : int
        Draws per chain (S).
    within : ndarray of shape (G, M, N)
        Rank R-hat of WH among the chains of each mode; NaN for a mode of one chain.
    across : ndarray of shape (M, N)
        Rank R-hat of WH among all chains.
    nested : ndarray of shape (M, N) or None
        Nested R-hat of WH with the start groups as superchains; None without ``starts``,
        with one start group, with groups of one chain, or of different numbers of
        chains (nested R-hat is defined for equal ones).
    """

    modes: np.ndarray
    starts: np.ndarray | None
    ess: np.ndarray
    draws: int
    within: np.ndarray
    across: np.ndarray
    nested: np.ndarray | None

    def bound(self, chains) -> float:
        """:func:`rhat_bound` of some chains (indices): their number, :attr:`draws` and the
        least of their ESS; NaN for fewer than 2."""
        chains = np.atleast_1d(chains)
        if chains.size < 2:
            return np.nan
        return rhat_bound(chains.size, self.draws, float(np.min(self.ess[chains])))

    @property
    def mixed_across(self) -> bool:
        """All chains mixed: each of ESS >= :data:`ESS_MIN`, and R-hat of WH across them
        within :meth:`bound` on :data:`MIXED_SHARE` of the entries."""
        every = np.arange(self.modes.size)
        return bool(self.ess.min() >= ESS_MIN) and mixed(self.across, threshold=self.bound(every))

    @property
    def status(self) -> str:
        """``"mixed"``, ``"distinct modes"`` or ``"low ESS"`` (the module docstring)."""
        if self.mixed_across:
            return MIXED
        if self.ess.min() >= ESS_MIN and self.within.shape[0] > 1:
            return DISTINCT_MODES
        return LOW_ESS

    def table(self) -> pd.DataFrame:
        """One row per mode, then ``"all"`` and ``"nested"`` (over the start groups):
        ``chains``, ``ess_bulk_chain_min`` (the least of their ESS), ``rhat_max``,
        ``share_rhat_le_1.01``, ``rhat_bound`` (:meth:`bound`; NaN for nested R-hat, which
        has no reference) and ``share_rhat_le_bound``; R-hat and its shares NaN for a mode
        of one chain."""
        import pandas as pd  # on first use: it loads in 0.5 s

        every = np.arange(self.modes.size)
        rows = {
            f"mode {g}": (np.flatnonzero(self.modes == g), r) for g, r in enumerate(self.within)
        }
        rows["all"] = (every, self.across)
        if self.nested is not None:
            rows["nested"] = (every, self.nested)
        bounds = [np.nan if n == "nested" else self.bound(c) for n, (c, _) in rows.items()]
        return pd.DataFrame(
            {
                "chains": [chains.size for chains, _ in rows.values()],
                "ess_bulk_chain_min": [self.ess[chains].min() for chains, _ in rows.values()],
                "rhat_max": [np.max(rhat) for _, rhat in rows.values()],
                f"share_rhat_le_{RHAT_WARN:g}": [
                    np.mean(rhat <= RHAT_WARN) if chains.size > 1 else np.nan
                    for chains, rhat in rows.values()
                ],
                "rhat_bound": bounds,
                "share_rhat_le_bound": [
                    np.nan if np.isnan(bound) else np.mean(rhat <= bound)
                    for (_, rhat), bound in zip(rows.values(), bounds, strict=True)
                ],
            },
            index=pd.Index(list(rows), name="chains_of"),
        )


def _checked(W_draws, H_draws) -> tuple[np.ndarray, np.ndarray]:
    """The draws as float arrays; ValueError unless their shapes are (C, S, M, K) and
    (C, S, K, N) with at least 2 chains of 4 draws."""
    W_draws, H_draws = np.asarray(W_draws, float), np.asarray(H_draws, float)
    shapes_match = W_draws.ndim == H_draws.ndim == 4 and H_draws.shape[:3] == (
        *W_draws.shape[:2],
        W_draws.shape[3],
    )
    if not shapes_match:
        raise ValueError(
            "W_draws and H_draws must have shapes (C, S, M, K) and (C, S, K, N), got "
            f"{W_draws.shape} and {H_draws.shape}"
        )
    C, S = W_draws.shape[:2]
    if C < 2 or S < 4:
        raise ValueError(f"the draws must hold at least 2 chains of 4 draws, got {C} of {S}")
    return W_draws, H_draws


def chain_moments(
    W_draws, H_draws, *, max_block_values: int = BLOCK_VALUES
) -> tuple[np.ndarray, np.ndarray]:
    """Each chain's mean and variance of every entry of ``W @ H`` over its draws.

    What :func:`bernmf.posterior.modes.chain_modes` compares: WH is identifiable, and its
    within-chain variance is the posterior's width that a distance between chains is
    measured in. The products are formed for a block of draws at a time (at most about
    ``max_block_values`` numbers, at least one draw; blocks of many draws make fewer, larger
    products: about 1.5 times faster than blocks of 2**18 numbers at lastfm's size) and
    merged by Chan et al.'s pairwise update, so the (C, S, M, N) array is never held.

    Parameters
    ----------
    W_draws : array of shape (C, S, M, K)
    H_draws : array of shape (C, S, K, N)
    max_block_values : int, default :data:`~bernmf.posterior.calibration.BLOCK_VALUES`

    Returns
    -------
    means, variances : ndarray of shape (C, M, N)
        Over the S draws of each chain (variances with divisor S).

    Raises
    ------
    ValueError
        As :func:`mode_rhat`.
    """
    W_draws, H_draws = _checked(W_draws, H_draws)
    C, S, M = W_draws.shape[:3]
    N = H_draws.shape[3]
    block = max(1, max_block_values // (M * N))
    means, squares = np.zeros((2, C, M, N))  # squares: sums of squared deviations
    for c in range(C):
        for first in range(0, S, block):
            products = np.matmul(
                W_draws[c, first : first + block], H_draws[c, first : first + block]
            )
            n, mean = len(products), products.mean(axis=0)
            delta = mean - means[c]
            means[c] += delta * n / (first + n)
            squares[c] += ((products - mean) ** 2).sum(axis=0) + delta**2 * first * n / (first + n)
    return means, squares / S


def chain_ess(W_draws, H_draws, *, entries: int = ESS_ENTRIES, seed: int = 0) -> np.ndarray:
    """Each chain's bulk ESS of WH: the median over ``entries`` entries drawn at random.

    A chain's bulk ESS is that of its draws alone (``arviz_stats.ess`` of one chain, split
    in halves, so that a chain drifting within itself has a low one): how many independent
    draws its mean is worth, what its Monte Carlo error is measured by.

    Parameters
    ----------
    W_draws : array of shape (C, S, M, K)
    H_draws : array of shape (C, S, K, N)
    entries : int, default :data:`ESS_ENTRIES`
        At most this many entries of WH (all of them when there are fewer), drawn by
        ``seed``.

    Returns
    -------
    ndarray of shape (C,)

    Raises
    ------
    ValueError
        As :func:`mode_rhat`.
    """
    W_draws, H_draws = _checked(W_draws, H_draws)
    M, N = W_draws.shape[2], H_draws.shape[3]
    chosen = np.random.default_rng(seed).choice(M * N, min(M * N, entries), replace=False)
    rows, columns = np.unravel_index(np.sort(chosen), (M, N))
    picked = wh_entries(W_draws, _components_first(H_draws, 2), rows, columns)  # (E, C, S)
    return np.array(
        [np.median(ess_rows(picked[:, c : c + 1], "bulk")) for c in range(picked.shape[1])]
    )


def _labels(groups, C: int, name: str) -> np.ndarray:
    """``groups`` relabelled 0 .. G - 1 in order of first appearance; ValueError unless they
    are C integer labels."""
    groups = np.asarray(groups)
    if groups.shape != (C,) or groups.dtype.kind not in "iu":
        raise ValueError(f"{name} must be {C} integer labels, one per chain, got {groups!r}")
    _, first, groups = np.unique(groups, return_index=True, return_inverse=True)
    return np.argsort(np.argsort(first))[groups]


def mode_rhat(
    W_draws,
    H_draws,
    modes,
    *,
    starts=None,
    ess=None,
    max_block_values: int = CHUNK_VALUES,
    threads: int | None = None,
) -> ModeRhat:
    """R-hat of every entry of ``W @ H`` within each mode, across all chains, and nested
    over the start groups; each chain's ESS.

    WH is identifiable (the components need no alignment); its draws are formed a tile
    at a time (:func:`bernmf.posterior.draws.rhat_and_ess`), never all at once. Nested
    R-hat takes the chains that shared a start as superchains (the samplers'
    ``chains_per_start``), not the modes they reached: superchains made from where the
    chains went would make it agree with itself.

    Parameters
    ----------
    W_draws : array of shape (C, S, M, K)
    H_draws : array of shape (C, S, K, N)
    modes : int array of shape (C,)
        The mode of each chain (any integer labels; relabelled 0 .. G - 1 in order of
        first appearance), e.g. :func:`bernmf.posterior.modes.chain_modes`.
    starts : int array of shape (C,), optional
        The start group of each chain (chains of one label shared their start).
    ess : array of shape (C,), optional
        Each chain's bulk ESS of WH; default :func:`chain_ess`.
    max_block_values, threads
        As :func:`bernmf.posterior.draws.diagnostics` takes them.

    Returns
    -------
    ModeRhat

    Raises
    ------
    ValueError
        Draws that are not of matching shapes (C, S, M, K) and (C, S, K, N), fewer than
        2 chains or 4 draws, or ``modes`` or ``starts`` not one integer label per chain.
    """
    W_draws, H_draws = _checked(W_draws, H_draws)
    C, S = W_draws.shape[:2]
    modes = _labels(modes, C, "modes")
    starts = None if starts is None else _labels(starts, C, "starts")
    ess = chain_ess(W_draws, H_draws) if ess is None else np.asarray(ess, float)
    threads = check_threads(threads)

    def rhat(chains, nested=None):
        H_wide = _components_first(H_draws[chains], 2)
        return _wh_rhat(W_draws[chains], H_wide, max_block_values, threads, nested)

    M, N = W_draws.shape[2], H_draws.shape[3]
    every = np.arange(C)
    across = rhat(every)
    within = np.stack(
        [
            across if members.size == C else rhat(members) if members.size > 1
            else np.full((M, N), np.nan)
            for members in (np.flatnonzero(modes == g) for g in range(modes.max() + 1))
        ]
    )  # fmt: skip
    nested = None
    if starts is not None:
        sizes = np.bincount(starts)
        if sizes.size > 1 and sizes.min() == sizes.max() > 1:
            nested = rhat(every, starts)
    return ModeRhat(modes, starts, ess, S, within, across, nested)
