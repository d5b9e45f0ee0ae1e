"""Did the chains mix? R-hat of WH within each mode, across all chains and nested.

Chains of this model's posterior started at different MAP solutions (``nuts``' default
start) often stay in different modes: the R-hat of all chains then measures the starts,
not the sampler. :func:`mode_rhat` makes the modes explicit: given the mode of each chain
(from its start, or :func:`bernmf.fitting.modes.chain_modes`), it gives the rank R-hat of
every entry of ``W @ H`` among the chains of each mode, among all chains, and the nested
R-hat with the modes as superchains (Margossian et al. 2024), all in numpy, a tile of WH
at a time (:mod:`bernmf.posterior.convergence`). :func:`mixed` is the one rule that says
whether an R-hat array is mixed: at least :data:`MIXED_SHARE` of the entries at R-hat <=
:data:`~bernmf.posterior.draws.RHAT_WARN`. :func:`chain_moments` gives each chain's mean
and variance of WH, from which :func:`~bernmf.fitting.modes.chain_modes` tells the modes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from bernmf.posterior.calibration import BLOCK_VALUES
from bernmf.posterior.convergence import CHUNK_VALUES
from bernmf.posterior.draws import RHAT_WARN, _components_first, _wh_rhat, check_threads

if TYPE_CHECKING:
    import pandas as pd

MIXED_SHARE = 0.99
"""Chains are mixed when at least this share of the WH entries has R-hat <= 1.01."""


def mixed(rhat, *, threshold: float = RHAT_WARN, share: float = MIXED_SHARE) -> bool:
    """Whether at least ``share`` of the entries of ``rhat`` are at most ``threshold``.

    NaN (an R-hat that could not be computed: one chain, too few draws) counts as not
    mixed, so an all-NaN array is never "mixed".
    """
    rhat = np.asarray(rhat, float)
    if rhat.size == 0:
        raise ValueError("rhat is empty")
    return bool(np.mean(rhat <= threshold) >= share)


@dataclass(frozen=True)
class ModeRhat:
    """Result of :func:`mode_rhat`: R-hat of WH within modes, across them and nested.

    Attributes
    ----------
    groups : ndarray of int, shape (C,)
        The mode of each chain, labels 0 .. G - 1.
    within : ndarray of shape (G, M, N)
        Rank R-hat of WH among the chains of each mode; NaN for a mode of one chain.
    across : ndarray of shape (M, N)
        Rank R-hat of WH among all chains.
    nested : ndarray of shape (M, N) or None
        Nested R-hat of WH with the modes as superchains; None with one mode, or modes
        of different numbers of chains (nested R-hat is defined for equal ones).
    """

    groups: np.ndarray
    within: np.ndarray
    across: np.ndarray
    nested: np.ndarray | None

    @property
    def mixed_within(self) -> bool:
        """Every mode's chains mixed (:func:`mixed`); False when a mode has one chain."""
        return all(mixed(rhat) for rhat in self.within)

    @property
    def mixed_across(self) -> bool:
        """All chains mixed together (:func:`mixed` of :attr:`across`): one posterior."""
        return mixed(self.across)

    def table(self) -> pd.DataFrame:
        """One row per mode, then ``"all"`` and ``"nested"``: ``chains``, ``rhat_max``,
        ``share_rhat_le_1.01`` and ``mixed``."""
        import pandas as pd  # on first use: it loads in 0.5 s

        rows = {
            f"mode {g}": (int(np.sum(self.groups == g)), rhat) for g, rhat in enumerate(self.within)
        }
        rows["all"] = (self.groups.size, self.across)
        if self.nested is not None:
            rows["nested"] = (self.groups.size, self.nested)
        return pd.DataFrame(
            {
                "chains": [chains for chains, _ in rows.values()],
                "rhat_max": [np.max(rhat) for _, rhat in rows.values()],
                f"share_rhat_le_{RHAT_WARN:g}": [
                    np.mean(rhat <= RHAT_WARN) for _, rhat in rows.values()
                ],
                "mixed": [mixed(rhat) for _, rhat in rows.values()],
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

    What :func:`bernmf.fitting.modes.chain_modes` compares: WH is identifiable, and its
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


def mode_rhat(
    W_draws,
    H_draws,
    groups,
    *,
    max_block_values: int = CHUNK_VALUES,
    threads: int | None = None,
) -> ModeRhat:
    """R-hat of every entry of ``W @ H`` within each mode, across all chains, and nested.

    WH is identifiable (the components need no alignment); its draws are formed a tile
    at a time (:func:`bernmf.posterior.draws.rhat_and_ess`), never all at once.

    Parameters
    ----------
    W_draws : array of shape (C, S, M, K)
    H_draws : array of shape (C, S, K, N)
    groups : int array of shape (C,)
        The mode of each chain (any integer labels; relabelled 0 .. G - 1 in order of
        first appearance).
    max_block_values, threads
        As :func:`bernmf.posterior.draws.diagnostics` takes them.

    Returns
    -------
    ModeRhat

    Raises
    ------
    ValueError
        Draws that are not of matching shapes (C, S, M, K) and (C, S, K, N), fewer than
        2 chains or 4 draws, or ``groups`` not one integer label per chain.
    """
    W_draws, H_draws = _checked(W_draws, H_draws)
    C = W_draws.shape[0]
    groups = np.asarray(groups)
    if groups.shape != (C,) or groups.dtype.kind not in "iu":
        raise ValueError(f"groups must be {C} integer labels, one per chain, got {groups!r}")
    _, first, groups = np.unique(groups, return_index=True, return_inverse=True)
    groups = np.argsort(np.argsort(first))[groups]  # labels in order of first appearance
    threads = check_threads(threads)

    def rhat(chains, nested=None):
        H_wide = _components_first(H_draws[chains], 2)
        return _wh_rhat(W_draws[chains], H_wide, max_block_values, threads, nested)

    M, N = W_draws.shape[2], H_draws.shape[3]
    within = np.stack(
        [
            rhat(members) if members.size > 1 else np.full((M, N), np.nan)
            for members in (np.flatnonzero(groups == g) for g in range(first.size))
        ]
    )
    sizes = np.bincount(groups)
    equal = sizes.size > 1 and sizes.min() == sizes.max()
    every = np.arange(C)
    return ModeRhat(groups, within, rhat(every), rhat(every, groups) if equal else None)
