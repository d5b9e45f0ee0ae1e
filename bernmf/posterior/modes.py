"""How many distinct modes the members of a multi-start fit, or a sampler's chains, reached.

Fits from different seeds (members) of a non-convex objective may stop at different
local optima. Two members are in the same mode when their objectives agree within
a relative tolerance AND their H agree once their components are matched (the
components are only defined up to a permutation, see
:func:`bernmf.posterior.draws.component_permutations`).

Chains started at different MAP solutions may stay in different modes:
:func:`chain_modes` groups them by their mean WH, measured in Monte Carlo standard errors
(what each chain's ESS leaves of its posterior sd), and :func:`mode_prediction` never
averages chains in distinct modes (:data:`~bernmf.posterior.mixing.STATUSES`): it then
mixes them by chain stacking (:func:`bernmf.posterior.stacking_weights.chain_stacking`) and says so.
Chains of one mode, whether mixed or of low ESS, are averaged.

Members and chains are compared differently because they are different things. A member
is a point: members of one mode converge to the same W and H (to about 1e-3), so an
absolute tolerance on H, with the objective, tells them apart. A chain's mean H is not a
point of its mode: H can be poorly identified where WH is not (on animals at K = 8 and
Beta(0.1, 0.1), 4 NUTS chains of 500 draws: within-chain sd of H 0.35, aligned H at R-hat
<= 1.01 on 44% of its entries, mean H 0.06 to 0.09 RMS apart, while 99.95% of WH's
entries had R-hat <= 1.01). Chains are therefore compared on WH, the identifiable
quantity, in units of the Monte Carlo error of its chain means, which no point fit has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from bernmf import _warnings
from bernmf.posterior.draws import component_permutations, mean_probability
from bernmf.posterior.lpd import scored_entries
from bernmf.posterior.mixing import (
    DISTINCT_MODES,
    MIXED_SHARE,
    ModeRhat,
    chain_ess,
    chain_moments,
    mode_rhat,
)
from bernmf.posterior.stacking_weights import chain_stacking, check_draws

if TYPE_CHECKING:
    import pandas as pd

OBJECTIVE_RTOL = 1e-4
"""Objectives of one mode agree to this relative tolerance: MM stops when the relative
change of an iteration is below its ``tol`` (1e-5), which leaves members of one mode a
few 1e-5 apart; distinct modes can still be closer, hence the test on H as well."""

H_TOL = 0.05
"""Members of one mode have H within this root-mean-square difference (H is a
probability: 0.05 is 5 points on average). Converged members of one mode agree to
about 1e-3; distinct modes differ in whole components. RMS rather than the maximum,
which a single poorly determined entry (a column with few observed ones) can swing."""

MC_TOL = 8.0
"""Two chains are in one mode when at least :data:`~bernmf.posterior.mixing.MIXED_SHARE`
(99%) of the entries of their mean WH differ by at most this many Monte Carlo standard
errors of the difference (:func:`chain_distances`). Chains of one distribution differ by
Monte Carlo error alone: 2.58 standard errors at the 99th percentile of a normal, and more
where an entry's ESS is below the chain's median. Measured (4 chains, 99th percentiles
of every pair): iid normal draws 2.6 to 2.7; NUTS on simulated 200 x 100 (K = 4, flat
prior, one mode) 2.6 to 3.4 with chains of 250 + 250 draws (fits of seeds 0 to 4, whose
chains share seeds 0 to 7), 3.1 to 6.2 on the posterior-vs-MAP study's split of it (2
starts of 2 chains, median ESS 129 to 182 a chain), 2.9 to 3.7 with 500 + 500; Gibbs
there 3.8 to 6.0 with chains of 1,000 + 1,000 sweeps (a chain's median ESS 100, 1% of its
entries at 7 to 10), 2.8 to 3.6 with 2,500 + 2,500 (one mode). Chains that stay apart:
Gibbs on paleo (K = 16, Beta(0.1, 0.1), 1,000 + 1,000 sweeps, median ESS 260 to 300 a
chain) 12 to 18 between three groups, 4.0 within the fourth. 8 lies between the largest
distance measured within one mode (6.2) and the least between modes (12). In posterior
sds, 8 standard errors are 8 sqrt(1 / e_i + 1 / e_j): 1.1 sds at ESS 100, 0.5 at 500
(where an ESS-blind rule took 1 sd)."""

GAP_PER_ENTRY = 1e-3
"""Members disagree strongly when the best objectives of the best and the worst modes
differ by more than this many nats per observed entry: the objective per observed
entry is the training perplexity (mean negative log-likelihood) plus the prior's share,
so the seed then moves the perplexity in its third decimal."""


@dataclass(frozen=True)
class Modes:
    """Result of :func:`count_modes`.

    Attributes
    ----------
    labels : ndarray of int, shape (R,)
        The mode of each member; mode 0 has the best (lowest) objective.
    count : int
        Number of distinct modes.
    objectives : ndarray of shape (count,)
        The best objective reached in each mode, increasing.
    distance : ndarray of shape (R, R)
        Root-mean-square difference of the members' H after matching components.
    table : DataFrame
        One row per mode: ``members`` (list of member indices), ``size``,
        ``best_objective`` and ``spread`` (largest minus smallest objective in it).
    disagree : bool
        More than one mode and a gap between the best objectives of the best and the
        worst mode above ``gap_per_entry`` nats per observed entry.
    gap_per_entry : float
        That gap divided by the number of observed entries (0 with one mode).
    """

    labels: np.ndarray
    count: int
    objectives: np.ndarray
    distance: np.ndarray
    table: pd.DataFrame
    disagree: bool
    gap_per_entry: float


def h_distances(H) -> np.ndarray:
    """RMS difference of every pair of members' H, components matched pair by pair.

    Parameters
    ----------
    H : array of shape (R, K, N)

    Returns
    -------
    ndarray of shape (R, R)
        Symmetric, zero on the diagonal; member j's rows of H are permuted to best
        match member i's (Hungarian matching on squared distance).
    """
    H = np.asarray(H, float)
    R = H.shape[0]
    distance = np.zeros((R, R))
    for i in range(R):
        for j in range(i + 1, R):
            permutation = component_permutations(H[j][None, None], reference=H[i])[0]
            distance[i, j] = distance[j, i] = np.sqrt(np.mean((H[i] - H[j][permutation]) ** 2))
    return distance


def count_modes(
    H,
    objectives,
    n_observed: int,
    *,
    objective_rtol: float = OBJECTIVE_RTOL,
    h_tol: float = H_TOL,
    gap_per_entry: float = GAP_PER_ENTRY,
    warn: bool = False,
) -> Modes:
    """Group the members of a multi-start fit into distinct modes.

    Members are taken from the best objective to the worst; each joins the first
    mode whose best member it matches (objectives within ``objective_rtol``
    relative AND H within ``h_tol`` RMS after matching components), or starts a
    new one. Comparing with each mode's best member, not with any member, keeps a
    chain of small steps from merging distant modes.

    Parameters
    ----------
    H : array of shape (R, K, N)
        The H of each of R members (e.g. ``fit.H`` of fits from different seeds).
    objectives : array of shape (R,)
        Their objectives (lower is better, e.g. ``fit.objective``).
    n_observed : int
        Observed (training) entries of the data, to put objective gaps per entry.
    objective_rtol, h_tol, gap_per_entry : float
        See :data:`OBJECTIVE_RTOL`, :data:`H_TOL` and :data:`GAP_PER_ENTRY`.
    warn : bool, default False
        Warn (UserWarning) when the members disagree strongly (``disagree``).

    Returns
    -------
    Modes
    """
    H = np.asarray(H, float)
    objectives = np.asarray(objectives, float)
    if H.ndim != 3:
        raise ValueError(f"H must have shape (members, K, N), got {H.shape}")
    if objectives.shape != H.shape[:1]:
        raise ValueError(
            f"objectives must have one value per member, shape {H.shape[:1]}, "
            f"got {objectives.shape}"
        )
    if not np.isfinite(objectives).all():
        raise ValueError("objectives must be finite")
    if int(n_observed) < 1:
        raise ValueError(f"n_observed must be a positive count, got {n_observed}")
    distance = h_distances(H)
    labels = np.full(H.shape[0], -1)
    leaders: list[int] = []
    for member in np.argsort(objectives, kind="stable"):
        for mode, leader in enumerate(leaders):
            scale = max(abs(objectives[leader]), abs(objectives[member]))
            close = abs(objectives[member] - objectives[leader]) <= objective_rtol * scale
            if close and distance[member, leader] < h_tol:
                labels[member] = mode
                break
        else:
            labels[member] = len(leaders)
            leaders.append(member)
    best = objectives[leaders]
    import pandas as pd  # on first use: it loads in 0.5 s

    table = pd.DataFrame(
        {
            "members": [np.flatnonzero(labels == mode).tolist() for mode in range(len(leaders))],
            "size": np.bincount(labels, minlength=len(leaders)),
            "best_objective": best,
            "spread": [np.ptp(objectives[labels == mode]) for mode in range(len(leaders))],
        },
        index=pd.RangeIndex(len(leaders), name="mode"),
    )
    gap = float(best[-1] - best[0]) / int(n_observed)
    disagree = len(leaders) > 1 and gap > gap_per_entry
    if warn and disagree:
        _warnings.warn(
            f"the members reached {len(leaders)} distinct modes whose best objectives differ "
            f"by {gap:.2g} nats per observed entry (more than {gap_per_entry:g}): the result "
            "depends on the seed; use more restarts or keep the best member"
        )
    return Modes(
        labels=labels,
        count=len(leaders),
        objectives=best,
        distance=distance,
        table=table,
        disagree=disagree,
        gap_per_entry=gap,
    )


def chain_distances(W_draws, H_draws, ess=None) -> np.ndarray:
    """How far apart the chains' mean WH are, in Monte Carlo standard errors.

    For chains i and j, each entry's difference of means divided by its Monte Carlo
    standard error, ``|m_i - m_j| / sqrt(v_i / e_i + v_j / e_j)`` (``m``, ``v``: the chain's
    mean and variance of the entry, :func:`~bernmf.posterior.mixing.chain_moments`; ``e``:
    its bulk ESS of WH, :func:`~bernmf.posterior.mixing.chain_ess`); the distance is the
    :data:`~bernmf.posterior.mixing.MIXED_SHARE` quantile of that over the entries (the
    smallest value that at least 99% of them do not exceed), so a difference confined to
    1% of WH still counts and one entry does not. Chains of one distribution are about
    2.6 apart (:data:`MC_TOL`).

    Parameters
    ----------
    W_draws : array of shape (C, S, M, K)
    H_draws : array of shape (C, S, K, N)
    ess : array of shape (C,), optional
        Each chain's bulk ESS of WH; default :func:`~bernmf.posterior.mixing.chain_ess`.

    Returns
    -------
    ndarray of shape (C, C)
        Symmetric, zero on the diagonal. An entry with no spread in either chain counts
        as 0 when the means agree and as infinitely far otherwise.

    Raises
    ------
    ValueError
        As :func:`~bernmf.posterior.mixing.chain_moments`.
    """
    means, variances = chain_moments(W_draws, H_draws)
    ess = chain_ess(W_draws, H_draws) if ess is None else np.asarray(ess, float)
    C = means.shape[0]
    distance = np.zeros((C, C))
    for i in range(C):
        for j in range(i + 1, C):
            gap = np.abs(means[i] - means[j])
            error = np.sqrt(variances[i] / ess[i] + variances[j] / ess[j])
            errors = np.divide(gap, error, out=np.where(gap > 0, np.inf, 0.0), where=error > 0)
            quantile = np.quantile(errors, MIXED_SHARE, method="inverted_cdf")
            distance[i, j] = distance[j, i] = quantile
    return distance


def chain_modes(W_draws, H_draws, ess=None, *, mc_tol: float = MC_TOL) -> np.ndarray:
    """The mode of each chain of a posterior, from the chains' mean WH.

    Chains are taken in order; each joins the first mode whose first chain is within
    ``mc_tol`` of its own (:func:`chain_distances`: 99% of the entries of their mean WH
    within ``mc_tol`` Monte Carlo standard errors), or starts a new one. Comparing with
    each mode's first chain, as :func:`count_modes` compares with each mode's best member,
    keeps a chain of small steps from merging distant modes.

    Parameters
    ----------
    W_draws : array of shape (C, S, M, K)
    H_draws : array of shape (C, S, K, N)
    ess : array of shape (C,), optional
        As :func:`chain_distances`.
    mc_tol : float, default :data:`MC_TOL`

    Returns
    -------
    ndarray of int, shape (C,)
        Labels 0 .. G - 1, in order of first appearance.

    Raises
    ------
    ValueError
        As :func:`~bernmf.posterior.mixing.chain_moments`.
    """
    distance = chain_distances(W_draws, H_draws, ess)
    labels = np.full(distance.shape[0], -1)
    leaders: list[int] = []
    for chain in range(distance.shape[0]):
        near = [mode for mode, leader in enumerate(leaders) if distance[chain, leader] <= mc_tol]
        labels[chain] = near[0] if near else len(leaders)
        if not near:
            leaders.append(chain)
    return labels


class ModePrediction(NamedTuple):
    """Result of :func:`mode_prediction`.

    Attributes
    ----------
    probs : ndarray of shape (M, N)
        The posterior predictive P(Y=1): the mean over all draws when the chains sit in
        one mode, else the chains' means mixed with chain-stacking weights.
    rule : {"mean", "chain stacking"}
        Which of the two.
    weights : ndarray of shape (C,)
        The weight of each chain (uniform for ``"mean"``).
    rhat : ModeRhat
        R-hat of WH within the modes, across all chains and nested over the start
        groups; the chains' ESS.
    """

    probs: np.ndarray
    rule: str
    weights: np.ndarray
    rhat: ModeRhat

    @property
    def status(self) -> str:
        """``"mixed"``, ``"low ESS"`` or ``"distinct modes"`` (:attr:`ModeRhat.status`)."""
        return self.rhat.status


def mode_prediction(
    Y,
    mask,
    W_draws,
    H_draws,
    modes=None,
    *,
    starts=None,
    validation=None,
    threads: int | None = None,
) -> ModePrediction:
    """The posterior predictive of chains that may sit in different modes, never averaged
    silently across modes.

    Unless the chains sit in distinct modes (:attr:`ModeRhat.status`: each chain's ESS
    adequate, R-hat of WH above what that ESS explains, the chains' mean WH in several
    modes), they sample one posterior, mixed or with too few effective draws, and the
    prediction is the mean over all draws. In distinct modes each chain is its own
    approximate posterior and they are mixed by chain stacking (Yao, Vehtari & Gelman
    2022): :func:`~bernmf.posterior.stacking_weights.chain_stacking` on the ``validation`` entries,
    or on each chain's PSIS-LOO of the training entries without them.

    Parameters
    ----------
    Y : array of shape (M, N)
        Binary data; NaN is missing.
    mask : bool array of shape (M, N)
        The training entries of the draws.
    W_draws : array of shape (C, S, M, K)
    H_draws : array of shape (C, S, K, N)
    modes : int array of shape (C,), optional
        The mode of each chain; default :func:`chain_modes`, which puts chains whose mean
        WH differ by Monte Carlo error in one mode (see :data:`MC_TOL`).
    starts : int array of shape (C,), optional
        The start group of each chain (a sampler's ``chains_per_start``): the superchains
        of the nested R-hat.
    validation : bool array of shape (M, N), optional
        Held-out entries for the chain-stacking weights.
    threads : int, optional
        Threads of the R-hat of WH.

    Returns
    -------
    ModePrediction

    Raises
    ------
    ValueError
        Draws whose shapes do not match each other and Y, invalid Y or mask, fewer than
        2 chains or 4 draws, ``modes`` or ``starts`` not one label per chain; and as
        :func:`~bernmf.posterior.stacking_weights.chain_stacking` when the chains are stacked.
    """
    W_draws, H_draws = check_draws(W_draws, H_draws, np.shape(Y))
    scored_entries(Y, mask, "mode_prediction mask")  # Y and mask checked, even if unused
    ess = chain_ess(W_draws, H_draws)
    modes = chain_modes(W_draws, H_draws, ess) if modes is None else modes
    rhat = mode_rhat(W_draws, H_draws, modes, starts=starts, ess=ess, threads=threads)
    C = W_draws.shape[0]
    if rhat.status != DISTINCT_MODES:
        return ModePrediction(mean_probability(W_draws, H_draws), "mean", np.full(C, 1 / C), rhat)
    weights = chain_stacking(Y, mask, W_draws, H_draws, validation=validation).weights
    probs = sum(
        w * mean_probability(W_draws[c : c + 1], H_draws[c : c + 1])
        for c, w in enumerate(weights)
        if w > 0
    )
    return ModePrediction(probs, "chain stacking", weights, rhat)
