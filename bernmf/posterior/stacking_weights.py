"""Stacking weights for ensembles of point fits and of MCMC chains.

This model's posterior is strongly multimodal: restarts of a MAP solver and NUTS or
Gibbs chains settle in different modes. Rather than keep the best member, or average
them all, stacking picks the mixture of the members' predictive distributions that
predicts held-out data best (Yao, Vehtari, Simpson & Gelman 2018, "Using stacking to
average Bayesian predictive distributions"); for chains that do not mix, each chain's
leave-one-out predictions play the part of the held-out data (Yao, Vehtari & Gelman
2022, "Stacking for non-mixing Bayesian computations: the curse and blessing of
multimodal posteriors").

The pieces: :func:`bernmf.posterior.lpd.bernoulli_lpd` scores members given as
probability matrices, :func:`stacking_weights` finds the weights (on the simplex,
maximizing the mixture's held-out log score), :func:`~bernmf.posterior.lpd.mixture_lpd`
scores the mixture, and :func:`chain_stacking` does all of it for the chains of a
posterior (their PSIS-LOO: :mod:`bernmf.posterior.psis`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bernmf._warnings import warn
from bernmf.models.spec import warn_zero_probability
from bernmf.posterior.lpd import check_lpd, scored_entries
from bernmf.posterior.psis import (
    PARETO_K_THRESHOLD,
    PSIS_CHUNK,
    PSIS_MIN_DRAWS,
    psis_loo_chunks,
    psis_tail_length,
)

__all__ = ["GAP", "ChainStacking", "chain_stacking", "check_draws", "stacking_weights"]


GAP = 1e-6
"""Nats per entry within which :func:`stacking_weights` certifies its weights optimal."""


RESTARTS = 10
"""L-BFGS-B runs :func:`stacking_weights` chains before giving up on :data:`GAP`."""


WORKING_SET = 32
"""Members :func:`stacking_weights` starts from, and adds at most per round."""


def _weight_matrix(lpd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``P = exp(lpd - max_r lpd)`` (n, R) of the entries not all ``-inf``, and each
    member's mean lpd over those entries (R,)."""
    lpd = lpd[np.isfinite(lpd).any(axis=1)]
    if lpd.shape[0] == 0:
        raise ValueError("every member gives every entry probability 0: no weights fit")
    P = lpd - lpd.max(axis=1, keepdims=True)
    return np.exp(P, out=P), lpd.mean(axis=0)


def _twins(P: np.ndarray) -> np.ndarray:
    """For each member (column of P), the first member exactly equal to it (R,)."""
    sums = P.sum(axis=0)  # equal columns have equal sums: compare only those
    twin = np.arange(P.shape[1])
    order = np.argsort(sums, kind="stable")  # a group of equal sums in increasing index
    for group in np.split(order, np.flatnonzero(np.diff(sums[order]) != 0) + 1):
        for i, r in enumerate(group[1:], 1):
            for earlier in group[:i]:
                if twin[earlier] == earlier and np.array_equal(P[:, r], P[:, earlier]):
                    twin[r] = earlier
                    break
    return twin


def _ratios(P: np.ndarray, density: np.ndarray) -> np.ndarray:
    """``mean_i P[i, r] / density[i]`` of each member r of P (n, R).

    With ``density = P_S w + 1e-16 / n`` the mixture of weights ``w`` (summing to 1)
    of some members S: at the optimum over S, 1 on its support and at most 1
    elsewhere in S; the log of the largest over any members bounds how far ``w`` is
    from optimal over them and S (nats per entry).
    """
    return (1.0 / density) @ P / P.shape[0]


CHECK_EVERY = 5
"""L-BFGS-B iterations between the optimality checks of :func:`_solve`."""


def _solve(Q: np.ndarray, v: np.ndarray, tol: float, max_iter: int) -> np.ndarray:
    """Minimize ``-mean_i log((Q.T v)[i]) + sum(v)`` over ``v >= 0`` from ``v`` (k,); Q (k, n).

    L-BFGS-B, stopped as soon as the bound of :func:`_ratios` (checked every
    :data:`CHECK_EVERY` iterations) certifies ``v / sum(v)`` within :data:`GAP`, and
    run again from where it stopped (at most :data:`RESTARTS` times) until it does;
    warns if it never does. The (k, n) layout makes both products read contiguous rows.
    """
    from scipy.optimize import minimize  # on first use: it loads in 0.1 s

    n = Q.shape[1]
    floor = 1e-16 / n

    def objective(v):
        density = Q.T @ v + floor
        return -np.mean(np.log(density)) + v.sum(), 1.0 - (Q @ (1.0 / density)) / n

    def gap(v) -> float:
        return float(np.log(np.max(Q @ (1.0 / (Q.T @ (v / v.sum()) + floor)) / n)))

    iteration = 0

    def certified(intermediate_result) -> None:
        nonlocal iteration
        iteration += 1
        if iteration % CHECK_EVERY == 0 and gap(intermediate_result.x) <= GAP:
            raise StopIteration

    for _ in range(RESTARTS):  # L-BFGS-B can stop early on near-duplicate members: go on
        result = minimize(
            objective,
            v,
            jac=True,
            method="L-BFGS-B",
            bounds=[(0.0, None)] * Q.shape[0],
            options={"ftol": 0.0, "gtol": tol, "maxiter": max_iter},
            callback=certified,
        )
        v = result.x
        if gap(v) <= GAP:
            return v
    warn(
        f"stacking weights may be {gap(v):.2g} nats per entry from optimal "
        f"({result.message}); raise max_iter",
        RuntimeWarning,
    )
    return v


def stacking_weights(lpd, *, tol: float = 1e-10, max_iter: int = 1000) -> np.ndarray:
    """Weights on the simplex that maximize the log score of the mixture of members.

    Maximizes ``sum_i log sum_r w_r exp(lpd[i, r])`` over ``w >= 0, sum(w) = 1``.

    ``arviz_stats.compare(..., method="stacking")`` solves this problem but needs one
    ELPDData (or DataTree) per member and keeps the solver inline, and its objective
    (``exp(lpd)`` with SLSQP at default tolerances) underflows to ``log(0)`` when
    every member's lpd of an entry is below about -745. Here each row is shifted by its
    maximum before exponentiating, ``P = exp(lpd - max_r lpd)``, and the equivalent
    bound-constrained problem

        minimize  -mean_i log(sum_r v_r P[i, r]) + sum_r v_r   over v >= 0

    (whose minimizer has ``sum(v) = 1``: scaling v by t changes the objective by
    ``-log t + (t - 1) sum(v)``) is solved by L-BFGS-B, so that weights are exactly
    0 or positive. L-BFGS-B can stop far from the optimum when members nearly coincide
    (seen on lastfm: 0.005 nats per entry off after 3 iterations), so it is run again from
    where it stopped until the bound below certifies the weights within :data:`GAP`.

    Few members get weight (tens of a grid's thousand), so the problem is solved on a
    working set (column generation): first the :data:`WORKING_SET` members of best
    log score, then, while some member ``r`` outside it has
    ``mean_i P[i, r] / (P w)[i] > exp(GAP)`` (at the optimum no member's ratio
    exceeds 1), up to :data:`WORKING_SET` of those
    members of largest ratio are added and the problem solved again from the last
    weights. Each round costs one product with all members; the solver only ever sees
    the working set. Over 1000 near-duplicate members (100 settings x 10 seeds) on
    50000 entries this took 19 s against 100 s for L-BFGS-B over all of them, to the
    same objective within :data:`GAP` (``benchmarks/stacking_weights.py``, one core,
    load average 7). Members that are exactly equal are solved as one and share its
    weight evenly.

    An entry to which every weighted member gives density 0 would make the objective
    infinite; ``1e-16 / n`` is added inside the log so that the solver never sees inf.
    At the optimum each mixture density is at least ``1 / n`` of its row maximum, so
    this changes the solution by less than rounding.

    Parameters
    ----------
    lpd : array of shape (n, R)
        Log predictive density of n held-out entries under each of R members;
        ``-inf`` where a member gives an entry probability 0. Entries that every
        member gives probability 0 do not depend on the weights and are left out.
    tol : float, default 1e-10
        Bound on the projected gradient at which L-BFGS-B stops.
    max_iter : int, default 1000
        Most L-BFGS-B iterations.

    Returns
    -------
    ndarray of shape (R,)
        Non-negative, summing to 1. Identical members split their total weight
        evenly (the objective is flat along their split).

    Raises
    ------
    ValueError
        If lpd is not a non-empty 2-D array, holds NaN or +inf, or every member
        gives every entry probability 0.

    Warns
    -----
    RuntimeWarning
        If the solution is more than 1e-6 nats per entry from optimal, by the bound
        ``log max_r mean_i(P[i, r] / (P w)[i])`` on the gap.
    """
    lpd = check_lpd(lpd)
    if not np.isfinite(tol) or tol <= 0:
        raise ValueError(f"tol must be a positive number, got {tol!r}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int | np.integer) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}")
    P, score = _weight_matrix(lpd)
    R = P.shape[1]
    if R == 1:
        return np.ones(1)
    twin = _twins(P)  # equal members are solved as one
    distinct = np.flatnonzero(twin == np.arange(R))
    P, score = P[:, distinct], score[distinct]
    working = np.sort(np.argsort(-score, kind="stable")[:WORKING_SET])
    v = np.full(working.size, 1.0 / working.size)
    while True:
        Q = np.ascontiguousarray(P[:, working].T)
        v = _solve(Q, v, tol, max_iter)
        ratios = _ratios(P, Q.T @ (v / v.sum()) + 1e-16 / P.shape[0])
        ratios[working] = 0.0
        outside = np.flatnonzero(ratios > np.exp(GAP))
        if outside.size == 0:
            break
        added = outside[np.argsort(-ratios[outside], kind="stable")[:WORKING_SET]]
        working, order = np.unique(np.concatenate([working, added]), return_index=True)
        v = np.concatenate([v, np.zeros(added.size)])[order]
    weights = np.zeros(distinct.size)
    weights[working] = v / v.sum()
    position = np.searchsorted(distinct, twin)  # each member's distinct one
    return weights[position] / np.bincount(position)[position]


class ChainStacking(NamedTuple):
    """Stacking of the chains of a posterior, from :func:`chain_stacking`.

    Attributes
    ----------
    weights : ndarray of shape (C,)
        Stacking weights of the chains, non-negative, summing to 1.
    elpd : ndarray of shape (C,)
        Each chain's expected log predictive density: the sum of ``lpd`` over entries.
    lpd : ndarray of shape (n, C)
        Each chain's log predictive density of each scored entry (PSIS-LOO, or of the
        held-out entries), in the row-major order of the scored entries.
    pareto_k : ndarray of shape (n, C) or None
        PSIS Pareto k of each entry and chain (NaN where lpd is ``-inf``); None for
        held-out scoring.
    share_k_high : ndarray of shape (C,)
        Share of the entries with Pareto k above
        :data:`bernmf.posterior.psis.PARETO_K_THRESHOLD`, whose
        PSIS-LOO estimate is unreliable; NaN for held-out scoring.
    """

    weights: np.ndarray
    elpd: np.ndarray
    lpd: np.ndarray
    pareto_k: np.ndarray | None
    share_k_high: np.ndarray


def check_draws(W_draws, H_draws, shape) -> tuple[np.ndarray, np.ndarray]:
    """Return the draws as float arrays after checking their shapes against Y's."""
    W_draws, H_draws = np.asarray(W_draws, dtype=float), np.asarray(H_draws, dtype=float)
    if W_draws.ndim != 4 or H_draws.ndim != 4:
        raise ValueError(
            "W_draws and H_draws must have shapes (C, S, M, K) and (C, S, K, N), got "
            f"{W_draws.shape} and {H_draws.shape}"
        )
    C, S, M, K = W_draws.shape
    if H_draws.shape[:3] != (C, S, K) or (M, H_draws.shape[3]) != tuple(shape):
        raise ValueError(
            f"draws of shapes {W_draws.shape} and {H_draws.shape} do not match each other "
            f"and Y of shape {tuple(shape)}"
        )
    return W_draws, H_draws


@functools.partial(jax.jit, static_argnames="held_out")
def _likelihood(W, H, H_zero, rows, columns, y, *, held_out: bool):
    """Likelihood of entries under each draw of a chain: (E, S), or the log of its mean.

    ``W`` (M, K, S), ``H`` and ``H_zero = 1 - H`` (K, N, S): a chain's draws, draws last
    (contiguous); ``rows``, ``columns``, ``y`` (E,): entries, 0/1 values. P(Y=1) is
    ``W @ H``, P(Y=0) ``W @ (1 - H)``, not clipped; with ``held_out``, (E,).
    """
    W_at = W[rows]  # (E, K, S)
    likelihood = 0.0
    for k in range(W.shape[1]):
        likelihood += W_at[:, k] * jnp.where(y[:, None] == 1, H[k, columns], H_zero[k, columns])
    return jnp.log(likelihood.mean(axis=1)) if held_out else likelihood


def chain_stacking(
    Y,
    mask,
    W_draws,
    H_draws,
    *,
    validation=None,
    r_eff: float = 1.0,
    max_block_values: int = 10_000_000,
) -> ChainStacking:
    """Stacking weights of the chains of a posterior that sit in different modes.

    Each chain is treated as its own approximate posterior (Yao, Vehtari & Gelman
    2022). Its predictive density of each observed entry is estimated by PSIS-LOO
    on that chain's draws alone (:func:`bernmf.posterior.psis.psis_loo`: the same numbers as
    ``arviz_stats.loo`` on a DataTree holding that one chain); the
    pointwise log-likelihood of entry i under draw s is ``y log(WH) + (1 - y)
    log(W(1 - H))``. Given ``validation``, the chains are scored on those held-out
    entries instead, by the plain log-mean-exp over draws. The weights come from
    :func:`stacking_weights` on the (entries, chains) matrix.

    Nothing is clipped: an entry whose outcome some draw of a chain gives probability 0
    has leave-one-out density 0 under that chain (the importance weights are 1 /
    likelihood): lpd ``-inf``, pareto_k NaN, and a
    :class:`~bernmf.models.spec.ZeroProbabilityWarning` names the entries (held out:
    ``-inf`` when every draw gives 0).

    The likelihoods are computed one chain and one chunk of entries at a time (at most
    ``max_block_values`` products, :data:`bernmf.posterior.psis.PSIS_CHUNK` entries), so the
    (C, S, n) array is never held (2.8e5 entries x 1000 draws on lastfm); PSIS takes
    the logarithms of each entry's tail only and fits the tails of a chunk's entries at
    once (:func:`bernmf.posterior.psis.psis_loo_chunks`; ``arviz_stats`` fits one entry at a time
    in Python, about half a millisecond per entry and chain with 1000 draws).

    Parameters
    ----------
    Y : array of shape (M, N)
        Binary data; NaN marks a missing entry.
    mask : bool array of shape (M, N)
        True where the entry is observed (the training entries the draws saw).
    W_draws : array of shape (C, S, M, K)
    H_draws : array of shape (C, S, K, N)
    validation : bool array of shape (M, N), optional
        Held-out entries to score the chains on; must not overlap ``mask``.
    r_eff : float, default 1.0
        Relative efficiency of each chain's draws passed to PSIS (it sets the
        length of the smoothed tail); 1 is what ``arviz_stats.loo`` uses for one chain.
    max_block_values : int, default 10_000_000
        Memory bound of the chunked computation: entries x draws x components.

    Returns
    -------
    ChainStacking

    Raises
    ------
    ValueError
        On inconsistent shapes, invalid Y or masks, a validation mask that
        overlaps ``mask`` or selects nothing, fewer than
        :data:`bernmf.posterior.psis.PSIS_MIN_DRAWS`
        draws per chain for PSIS-LOO, or when PSIS fails for an entry whose
        largest log-likelihood values are all equal (a chain whose draws are all
        the same).
    """
    W_draws, H_draws = check_draws(W_draws, H_draws, np.shape(Y))
    if not np.isfinite(r_eff) or r_eff <= 0:
        raise ValueError(f"r_eff must be a positive number, got {r_eff!r}")
    if (
        isinstance(max_block_values, bool)
        or not isinstance(max_block_values, int | np.integer)
        or max_block_values < 1
    ):
        raise ValueError(f"max_block_values must be a positive integer, got {max_block_values!r}")
    rows, columns, y = _entries(Y, mask, validation)
    C, S = W_draws.shape[:2]
    held_out = validation is not None
    if not held_out and S < PSIS_MIN_DRAWS:
        raise ValueError(
            f"PSIS-LOO needs at least {PSIS_MIN_DRAWS} draws per chain, got {S}; "
            "score the chains on held-out entries instead (validation=...)"
        )
    chunk = min(PSIS_CHUNK, max(1, max_block_values // (S * W_draws.shape[3])))
    lpd, pareto_k = np.empty((y.size, C)), np.full((y.size, C), np.nan)
    zero = np.zeros((y.size, C), bool)
    with jax.enable_x64(True):
        for c in range(C):
            draws = [jnp.asarray(np.moveaxis(d, 0, -1)) for d in (W_draws[c], H_draws[c])]
            draws.append(1 - draws[1])  # (M, K, S), (K, N, S), 1 - H: draws last
            entries = (rows, columns, y)
            try:
                _chain_lpd(draws, entries, chunk, psis_tail_length(S, r_eff), held_out,
                           out=(lpd[:, c], pareto_k[:, c], zero[:, c]))  # fmt: skip
            except ValueError as error:  # e.g. a chain whose draws are all the same
                raise ValueError(f"PSIS-LOO of chain {c} failed: {error}") from None
    lpd[zero], pareto_k[zero] = -np.inf, np.nan
    ruled_out = np.flatnonzero(zero.any(axis=1))  # by some draw (PSIS), every draw (held out)
    named = ", ".join(f"({rows[e]}, {columns[e]})" for e in ruled_out[:5])
    chains = ", ".join(str(c) for c in np.flatnonzero(zero.any(axis=0)))
    what = f"chain_stacking, chain(s) {chains}, entries (row, column) {named}"
    warn_zero_probability(ruled_out.size, y.size, what + (" ..." if ruled_out.size > 5 else ""))
    pareto_k = None if held_out else pareto_k
    share = (
        np.full(C, np.nan) if pareto_k is None else np.mean(pareto_k > PARETO_K_THRESHOLD, axis=0)
    )
    return ChainStacking(stacking_weights(lpd), lpd.sum(axis=0), lpd, pareto_k, share)


def _entries(Y, mask, validation) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows, columns and 0/1 values of the entries :func:`chain_stacking` scores: those of
    ``mask``, or of ``validation``, which must not overlap them."""
    train_rows, train_columns, train_y = scored_entries(Y, mask, "chain_stacking mask")
    if validation is None:
        return train_rows, train_columns, train_y
    rows, columns, y = scored_entries(Y, validation, "chain_stacking validation")
    train = np.zeros(np.shape(Y), bool)
    train[train_rows, train_columns] = True
    if train[rows, columns].any():
        raise ValueError("validation entries must be held out: they overlap mask")
    return rows, columns, y


def _chain_lpd(draws, entries, chunk: int, tail: int, held_out: bool, *, out) -> None:
    """One chain's log predictive density of each entry (PSIS-LOO, or of held-out entries),
    its Pareto k (PSIS only) and whether some draw (PSIS) or every draw (held out) gives the
    entry's outcome probability 0, written into ``out`` = (lpd, pareto_k, zero), each (n,),
    ``chunk`` entries at a time (the last chunk padded by repeating its last entry)."""
    rows, columns, y = entries
    lpd, pareto_k, zero = out
    fill = np.minimum(np.arange(-(-y.size // chunk) * chunk), y.size - 1)  # repeats at the end
    for lo in range(0, y.size, chunk):
        part, done = fill[lo : lo + chunk], slice(lo, min(lo + chunk, y.size))
        scores = _likelihood(*draws, rows[part], columns[part], y[part], held_out=held_out)
        scores = np.asarray(scores)[: done.stop - lo]
        if held_out:
            lpd[done], zero[done] = scores, np.isneginf(scores)
            continue
        zero[done] = ~(scores.min(axis=1) > 0)
        scores = np.where(zero[done, None], 1.0, scores)  # scored -inf below
        lpd[done], pareto_k[done] = psis_loo_chunks(
            scores, tail, probabilities=True, checked=~zero[done]
        )
