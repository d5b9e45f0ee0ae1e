"""The stacking problem: weights on the simplex that maximize a mixture's held-out log score.

:func:`stacking_weights` solves it for the log predictive densities of any members (point
fits scored on validation entries, or chains' PSIS-LOO: :mod:`bernmf.fitting.stacking`), and
:func:`mixture_lpd` scores the mixture.
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ["GAP", "check_lpd", "mixture_lpd", "stacking_weights"]


def check_lpd(lpd) -> np.ndarray:
    """Return ``lpd`` as a float64 (n, R) array; ValueError/TypeError naming the problem."""
    lpd = np.asarray(lpd)
    if lpd.dtype.kind not in "iuf":
        raise TypeError(f"lpd must be a real array, got dtype {lpd.dtype}")
    if lpd.ndim != 2 or 0 in lpd.shape:
        raise ValueError(f"lpd must have shape (entries, members), both >= 1; got {lpd.shape}")
    lpd = lpd.astype(float, copy=False)
    if np.isnan(lpd).any() or np.isposinf(lpd).any():
        raise ValueError("lpd holds NaN or +inf; a log density is finite or -inf")
    return lpd


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
    warnings.warn(
        f"stacking weights may be {gap(v):.2g} nats per entry from optimal "
        f"({result.message}); raise max_iter",
        RuntimeWarning,
        stacklevel=3,
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


def mixture_lpd(lpd, weights) -> np.ndarray:
    """Log density of each entry under the mixture of members with the given weights.

    Parameters
    ----------
    lpd : array of shape (n, R)
        Log predictive densities, as in :func:`stacking_weights`.
    weights : array of shape (R,)
        Non-negative, summing to 1 (to 1e-8).

    Returns
    -------
    ndarray of shape (n,)
        ``log sum_r weights[r] exp(lpd[:, r])``; ``-inf`` where every member with
        positive weight gives the entry probability 0.
    """
    lpd = check_lpd(lpd)
    weights = np.asarray(weights, dtype=float)
    if weights.shape != (lpd.shape[1],):
        raise ValueError(f"weights must have shape ({lpd.shape[1]},), got {weights.shape}")
    if not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise ValueError("weights must be finite and non-negative")
    if abs(weights.sum() - 1) > 1e-8:
        raise ValueError(f"weights must sum to 1, got {weights.sum()!r}")
    from scipy.special import logsumexp  # scipy.special loads on first use (0.2 s)

    used = weights > 0
    with np.errstate(divide="ignore"):
        return logsumexp(lpd[:, used], b=weights[used], axis=1)
