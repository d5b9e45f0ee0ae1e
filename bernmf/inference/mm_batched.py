"""The MM algorithm of :mod:`bernmf.inference.mm`, restructured for batches of fits.

:func:`solve` computes the same iterates as :func:`bernmf.inference.mm.solve` (same
updates, same objective, same stopping rule, to rounding) with less work per sweep,
and is meant to be ``jax.vmap``-ed over priors and initializations, so that a whole
hyperparameter grid is one compiled program (see :mod:`bernmf.tune`):

* the ones of Y are few (3-4% on the paper's datasets), so ``Y1 / (W @ H)`` and its
  products with W and H are computed only at the observed ones (a gather and a
  segment sum); only ``W @ (1 - H)`` and ``Y0 / (W @ (1 - H))`` are dense;
* the objective of the current factors is computed from the dense
  ``W @ (1 - H)`` that the H update needs anyway, so each sweep reads it once.

``sweep_as_published`` is the sweep of the paper's published code, defects included
(for :mod:`experiments.paper` ``--as-published``): held-out entries count as zeros in
the H update, W is divided by the number of columns N instead of each row's number
of observed entries (so its rows no longer sum to one and P(Y=0) is ``1 - W @ H``),
and the stopping rule is an absolute decrease of 1e-5 of the objective per observed
entry. The correct engine, :mod:`bernmf.inference.mm`, is not affected by it.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bernmf.inference import accelerate as squarem
from bernmf.inference.mm import Factors
from bernmf.models.spec import Prior, log_prior, masked_log_likelihood_sum

VARIANTS = ("correct", "as_published")


class SparseProblem(NamedTuple):
    """The data of one fit: dense zeros, sparse ones.

    Attributes
    ----------
    y_zero : (M, N) float
        ``O * (1 - Y)``: 1 at the observed zeros.
    y_zero_published : (M, N) float
        ``1 - O * Y``: what the published code's H update uses (held-out entries as
        zeros).
    rows, cols : (L,) int32
        Positions of the observed ones, in row-major order.
    by_col : (L,) int32
        Permutation that sorts the ones by column.
    n_obs : (M,) float
        Observed entries per row.
    n_total : scalar float
        Observed entries in all.
    """

    y_zero: jax.Array
    y_zero_published: jax.Array
    rows: jax.Array
    cols: jax.Array
    by_col: jax.Array
    n_obs: jax.Array
    n_total: jax.Array


def make_problem(Y: np.ndarray, mask: np.ndarray, dtype) -> SparseProblem:
    """Build a :class:`SparseProblem` from validated data (Y is 0 where not observed)."""
    mask = np.asarray(mask, bool)
    ones = mask & (np.asarray(Y) == 1)
    rows, cols = np.nonzero(ones)
    return SparseProblem(
        y_zero=jnp.asarray(mask & ~ones, dtype),
        y_zero_published=jnp.asarray(~ones, dtype),
        rows=jnp.asarray(rows, jnp.int32),
        cols=jnp.asarray(cols, jnp.int32),
        by_col=jnp.asarray(np.argsort(cols, kind="stable"), jnp.int32),
        n_obs=jnp.asarray(mask.sum(axis=1), dtype),
        n_total=jnp.asarray(mask.sum(), dtype),
    )


def _safe(x):
    return jnp.maximum(x, jnp.finfo(x.dtype).tiny)


def _ones_terms(problem: SparseProblem, W, H):
    """``(W @ H)`` at the observed ones, and the rows of W and columns of H there."""
    W_at = W[problem.rows]  # (L, K)
    H_at = H.T[problem.cols]  # (L, K)
    return jnp.sum(W_at * H_at, axis=1), W_at, H_at


def _sum_by_col(problem: SparseProblem, values, N: int):
    """Sum rows of ``values`` (L, K) by the column of each one: shape (N, K)."""
    return jax.ops.segment_sum(
        values[problem.by_col],
        problem.cols[problem.by_col],
        num_segments=N,
        indices_are_sorted=True,
    )


def _sum_by_row(problem: SparseProblem, values, M: int):
    """Sum rows of ``values`` (L, K) by the row of each one: shape (M, K)."""
    return jax.ops.segment_sum(values, problem.rows, num_segments=M, indices_are_sorted=True)


def _p_zero(W, H, published: bool):
    # The correct MM keeps rows of W on the simplex, so P(Y=0) = W @ (1 - H), which is
    # accurate near 1. The published W update does not, so there P(Y=0) = 1 - W @ H.
    return 1 - W @ H if published else W @ (1 - H)


def accumulator(dtype):
    """The dtype sums of the objective are taken in: float64 when available.

    With float32 factors the terms are computed in float32 but summed in float64, so
    the stopping rule sees changes of the objective well below float32's precision.
    """
    return jnp.promote_types(dtype, jnp.float64 if jax.config.jax_enable_x64 else dtype)


def _sweep(problem: SparseProblem, W, H, prior: Prior, published: bool):
    """Objective of (W, H), then one sweep: H given W, then W given the new H."""
    M, N = problem.y_zero.shape
    acc = accumulator(W.dtype)
    # H half, and the objective of (W, H) from the same dense P(Y=0)
    p_zero = _safe(_p_zero(W, H, published))
    p_one_at, W_at, _ = _ones_terms(problem, W, H)
    p_one_at = _safe(p_one_at)
    # sum of log P(Y=0) over the observed zeros: there both probabilities given are P(Y=0)
    at_zeros = problem.y_zero == 1
    log_lik_zeros = masked_log_likelihood_sum(at_zeros, at_zeros, p_zero, p_zero)
    log_lik = log_lik_zeros.astype(acc) + jnp.sum(jnp.log(p_one_at).astype(acc))
    value = -(log_lik + log_prior(W.astype(acc), H.astype(acc), prior))
    y_zero_h = problem.y_zero_published if published else problem.y_zero
    from_ones = _sum_by_col(problem, W_at / p_one_at[:, None], N).T  # W.T @ (Y1 / WH)
    from_zeros = W.T @ (y_zero_h / p_zero)
    C = H * from_ones + (prior.alpha - 1)[:, None]
    D = (1 - H) * from_zeros + (prior.beta - 1)[:, None]
    total = C + D
    H_new = jnp.where(total > 0, C / jnp.where(total > 0, total, 1), H)
    # W half, with the new H
    p_zero = _safe(_p_zero(W, H_new, published))
    p_one_at, _, H_at = _ones_terms(problem, W, H_new)
    from_ones = _sum_by_row(problem, H_at / _safe(p_one_at)[:, None], M)  # (Y1 / WH) @ H.T
    from_zeros = (problem.y_zero / p_zero) @ (1 - H_new).T
    S = W * (from_ones + from_zeros)
    count = jnp.full_like(problem.n_obs, N) if published else problem.n_obs
    denominator = (count + jnp.sum(prior.gamma - 1))[:, None]
    W_new = jnp.where(
        denominator > 0, (S + (prior.gamma - 1)) / jnp.where(denominator > 0, denominator, 1), W
    )
    if published:
        value = value / problem.n_total.astype(acc)
    return value, W_new, H_new


def sweep_correct(problem: SparseProblem, W, H, prior: Prior):
    """Return ``(objective(W, H), W_next, H_next)`` for the correct, masked MM sweep."""
    return _sweep(problem, W, H, prior, published=False)


def sweep_as_published(problem: SparseProblem, W, H, prior: Prior):
    """The published code's sweep, defects included; objective per observed entry."""
    return _sweep(problem, W, H, prior, published=True)


class Solution(NamedTuple):
    W: jax.Array
    H: jax.Array
    trace: jax.Array  # (max_iter + 1,), NaN after n_iter
    n_iter: jax.Array
    converged: jax.Array
    sweeps: jax.Array  # sweeps evaluated (3 per accelerated iteration, plus one)


def solve(
    init: Factors,
    problem: SparseProblem,
    prior: Prior,
    tol,
    *,
    max_iter: int,
    variant: str = "correct",
    accelerate: bool = False,
) -> Solution:
    """Iterate the sweep from ``init``; vmappable over ``init`` and ``prior``.

    ``variant="correct"`` stops, like :func:`bernmf.inference.mm.solve`, when the
    relative change of the objective is below ``tol``; ``"as_published"`` stops at the
    first sweep after the first that lowers the objective per observed entry by less
    than ``tol`` (absolute, rises included; the published code uses 1e-5). Either way
    at most ``max_iter`` sweeps are made.

    ``accelerate=True`` (correct variant only) iterates the SQUAREM-accelerated sweeps
    of :mod:`bernmf.inference.accelerate`, as ``bernmf.fit(..., accelerate=True)``
    does; ``max_iter``, ``n_iter`` and the trace then count accelerated iterations.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if accelerate:
        if variant != "correct":
            raise ValueError(
                "accelerate=True needs variant='correct' (the published sweep "
                "does not decrease its objective, so it cannot be safeguarded)"
            )
        return _solve_accelerated(init, problem, prior, tol, max_iter=max_iter)
    sweep = sweep_as_published if variant == "as_published" else sweep_correct
    dtype = accumulator(init.W.dtype)  # of the objective
    inf = jnp.asarray(jnp.inf, dtype)
    trace = jnp.full(max_iter + 1, jnp.nan, dtype)

    # The body evaluates the objective of `following` (sweep t + 1) and computes the
    # sweep after it, so `current` is always the last evaluated factors.
    def keep_going(carry):
        t, _, _, _, change, _ = carry
        return (t < max_iter) & (change >= tol)

    def iterate(carry):
        t, _, following, previous, _, trace = carry
        value, W, H = sweep(problem, following.W, following.H, prior)
        if variant == "as_published":
            # the published loop never evaluates the initial factors: its first loss,
            # after one sweep, is compared with +inf, so the earliest stop is at sweep 2
            change = jnp.where(t + 1 < 2, inf, previous - value)
        else:
            scale = jnp.maximum(jnp.abs(previous), jnp.finfo(dtype).tiny)
            change = jnp.where(jnp.isinf(previous), inf, jnp.abs(previous - value) / scale)
        return t + 1, following, Factors(W, H), value, change, trace.at[t + 1].set(value)

    t, current, _, _, change, trace = jax.lax.while_loop(
        keep_going, iterate, (jnp.asarray(-1), init, init, inf, inf, trace)
    )
    return Solution(current.W, current.H, trace, t, change < tol, t + 1)


def _solve_accelerated(init: Factors, problem: SparseProblem, prior: Prior, tol, *, max_iter):
    def sweep(factors: Factors):
        value, W, H = sweep_correct(problem, factors.W, factors.H, prior)
        return value, Factors(W, H)

    solution = squarem.solve(init, sweep, tol, max_iter=max_iter)
    sweeps = 1 + squarem.EVALUATIONS_PER_ITERATION * solution.n_iter
    return Solution(
        solution.W, solution.H, solution.trace, solution.n_iter, solution.change < tol, sweeps
    )
