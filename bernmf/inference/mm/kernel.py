"""The MM sweep, its objective and the loop that iterates it (Magron & Févotte 2022).

One sweep updates H given W, then W given H, with the mask handled exactly: held-out
entries are neither ones nor zeros, and each row of W is normalized by its number of
observed entries. With ``O`` the mask, ``Y1 = O * Y`` and ``Y0 = O * (1 - Y)``::

    C = H * (W.T @ (Y1 / (W @ H)))           + (alpha - 1)
    D = (1 - H) * (W.T @ (Y0 / (W @ (1 - H)))) + (beta - 1)
    H = C / (C + D)
    S = W * ((Y1 / (W @ H)) @ H.T + (Y0 / (W @ (1 - H))) @ (1 - H).T)
    W = (S + gamma - 1) / sum_k(S + gamma - 1)

The denominator of W equals ``n_obs + sum(gamma - 1)`` in exact arithmetic; it is
computed as the row sum so that W stays on the simplex when the predictions reach 0
or 1 in floating point (H at exactly 1 under a huge alpha, say, where an observed
zero's term is 0 / 0 and left out). Entries where ``C + D = 0`` (a column with no
observed entry under a flat prior) and rows where the denominator is 0 (a row with no
observed entry and gamma = 1, by the exact count n_obs) keep their value. The
objective, ``-log_joint``, never increases when alpha, beta and gamma are all >= 1.

The sums and the log-likelihood come from :mod:`bernmf.inference.mm.layout`, which
computes them on whole arrays, with the ones handled sparsely, over blocks of rows or
over rows sharded across devices; the updates here are written once for all of them.
By default (``accelerate=True``) :func:`solve` iterates SQUAREM extrapolations of
these sweeps (:mod:`bernmf.inference.mm.squarem`), safeguarded so that the constraints
hold and the objective still never increases. Restarts and grids of priors map
:func:`solve` over seeds and priors in one compiled call (:func:`run_many`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from bernmf.inference._loop import Solution, iterate_until, relative_change
from bernmf.inference.mm import layout as layouts
from bernmf.inference.mm import squarem
from bernmf.inference.mm.layout import Evaluated, Problem
from bernmf.models.spec import Factors, Prior, log_prior


def random_init(key, M: int, N: int, K: int, dtype) -> Factors:
    """W with uniform entries normalized to rows summing to one; H uniform on (0, 1)."""
    key_w, key_h = jax.random.split(key)
    W = jax.random.uniform(key_w, (M, K), dtype, minval=jnp.finfo(dtype).eps)
    H = jax.random.uniform(key_h, (K, N), dtype, minval=jnp.finfo(dtype).eps, maxval=1)
    return normalized(Factors(W, H))


def normalized(draws: Factors) -> Factors:
    """The start of uniform draws: the rows of W (M, K) scaled to sum to one, H (K, N) kept."""
    return Factors(draws.W / draws.W.sum(axis=1, keepdims=True), draws.H)


def update_H(data: Problem, state: Evaluated, prior: Prior) -> Evaluated:
    """The H half of one MM sweep; returns the state at the new H."""
    W, H = state.W, state.H
    sum_one, sum_zero = layouts.h_sums(data, state)
    C = H * sum_one + (prior.alpha - 1)[:, None]
    D = (1 - H) * sum_zero + (prior.beta - 1)[:, None]
    total = C + D
    H = jnp.where(total > 0, C / jnp.where(total > 0, total, 1), H)
    # With row blocks, update_W reads none of this state's pass, so XLA drops it (checked
    # in the compiled program: two passes over the blocks per plain sweep, not three).
    return layouts.state_at(data, W, H)


def update_W(data: Problem, state: Evaluated, prior: Prior) -> Evaluated:
    """The W half of one MM sweep (row by row); returns the state at the new W."""
    W, H = state.W, state.H
    numerator = layouts.w_statistic(data, state) + (prior.gamma - 1)
    moves = (data.n_obs + jnp.sum(prior.gamma - 1) > 0)[:, None]  # exact: counts and prior
    denominator = numerator.sum(axis=1, keepdims=True)  # n_obs + sum(gamma - 1), to rounding
    W = jnp.where(moves, numerator / jnp.where(moves, denominator, 1), W)
    return layouts.state_at(data, W, H)


def step(data: Problem, state: Evaluated, prior: Prior) -> Evaluated:
    """One MM sweep: H given W, then W given the new H."""
    return update_W(data, update_H(data, state, prior), prior)


def accumulator(dtype):
    """The dtype the objective is summed in: float64 when JAX has it.

    With float32 factors the stopping rule then sees changes of the objective well
    below float32's precision.
    """
    return jnp.promote_types(dtype, jnp.float64 if jax.config.jax_enable_x64 else dtype)


def _log_prior(data: Problem, W, H, prior: Prior):
    """:func:`log_prior` of the real rows of W and of H (once, however many devices)."""
    if data.real_row is not None:
        W = jnp.where(data.real_row[:, None], W, 1.0)  # log 1 = 0: padding adds nothing
    if data.axis_name is None:
        return log_prior(W, H, prior)
    no_columns, no_rows = jnp.ones((H.shape[0], 0), H.dtype), jnp.ones((0, W.shape[1]), W.dtype)
    return layouts.row_total(data, log_prior(W, no_columns, prior)) + log_prior(no_rows, H, prior)


def objective(data: Problem, state: Evaluated, prior: Prior) -> jax.Array:
    """Negative log-posterior (unnormalized) of the observed entries: what MM minimizes."""
    acc = accumulator(state.W.dtype)
    log_lik = layouts.row_total(data, layouts.log_likelihood(data, state)).astype(acc)
    return -(log_lik + _log_prior(data, state.W.astype(acc), state.H.astype(acc), prior))


def _squared_norm(data: Problem, factors: Factors) -> jax.Array:
    """``||W||^2 + ||H||^2`` over the real rows of W on all devices (the SQUAREM step length)."""
    W = factors.W
    if data.real_row is not None:
        W = jnp.where(data.real_row[:, None], W, 0.0)
    return layouts.row_total(data, jnp.sum(W**2)) + jnp.sum(factors.H**2)


ROUGH_TOL = 1e-6
"""The float32 phase of a mixed-precision fit (:func:`solve`) ends once the relative change
of its objective is below ``max(tol, ROUGH_TOL)``: about ten float32 rounding units,
where float32 sweeps stop making progress that float32 can measure."""


class Polished(NamedTuple):
    """The factors a mixed-precision fit ends at, and its iterations in float32."""

    W: jax.Array
    H: jax.Array
    rough_iterations: jax.Array


def solve(
    init: Factors,
    data: Problem,
    prior: Prior,
    tol,
    *,
    max_iter: int,
    accelerate: bool = False,
    mixed: bool = False,
) -> Solution:
    """Iterate :func:`step` from ``init`` until the relative change of the objective is < tol.

    Parameters
    ----------
    init : Factors
        W (M, K) and H (K, N), feasible.
    data : Problem
    prior : Prior
        Arrays of shape (K,), in the factors' dtype.
    tol : scalar
        Stop when ``|f_prev - f| / |f_prev| < tol``; 0 runs exactly ``max_iter`` iterations.
    max_iter : int
        Iteration limit (static: it sets the trace's length).
    accelerate : bool, default False
        Iterate SQUAREM-accelerated sweeps (:mod:`bernmf.inference.mm.squarem`)
        instead: an iteration is then three sweeps (:func:`sweeps`), and the trace
        holds the objective after each accelerated iteration.
    mixed : bool, default False
        With ``accelerate`` and float64 factors: iterate in float32 first, until the
        relative change of the objective is below ``max(tol, ROUGH_TOL)`` or the
        objective rises (float32 can take it no further), then in float64 from there
        until the change is below ``tol`` (:func:`polish`).

    Returns
    -------
    Solution
        ``state`` is the last :class:`Factors` (:class:`Polished` when ``mixed``).
    """
    if mixed:
        return polish(init, data, prior, tol, max_iter=max_iter)
    if accelerate:
        return _accelerated(init, data, prior, tol, max_iter=max_iter)
    end = iterate_until(
        lambda state: step(data, state, prior),
        lambda state: objective(data, state, prior),
        layouts.state_at(data, *init),
        tol,
        max_iter=max_iter,
    )
    return end._replace(state=Factors(end.state.W, end.state.H))


def _accelerated(init: Factors, data: Problem, prior: Prior, tol, **options) -> Solution:
    """:func:`squarem.solve` over MM sweeps; ``options`` are its keyword arguments."""

    def sweep(factors: Factors, evaluate=True):
        current = layouts.state_at(data, *factors)
        skipped = jnp.asarray(jnp.nan, accumulator(factors.W.dtype))
        value = jax.lax.cond(
            evaluate, lambda state: objective(data, state, prior), lambda _: skipped, current
        )
        # the objective first, then the sweep: left to itself, XLA schedules the H step's
        # (M, N) ratios while the objective's operands are still live, 5 such arrays at
        # once instead of 3, and every (M, N) operation runs ~1.4x slower (docs/speed.md)
        value, current = jax.lax.optimization_barrier((value, current))
        following = step(data, current, prior)
        return value, Factors(following.W, following.H)

    norm2 = functools.partial(_squared_norm, data)
    end = squarem.solve(init, sweep, tol, norm2=norm2, **options)
    return end._replace(state=end.state.x)


def _rough_change(previous, current):
    """The relative change, or 0 (stop) when the objective rose: float32 is at its floor."""
    return jnp.where(current > previous, 0.0, relative_change(previous, current))


def polish(init: Factors, data: Problem, prior: Prior, tol, *, max_iter: int) -> Solution:
    """Accelerated MM in float32, then in float64 from where float32 stops.

    A float32 sweep costs about half a float64 one on a CPU (fewer bytes moved, twice the
    SIMD width), and float32 measures the objective's relative change down to about
    1e-7. The float32 phase runs until the change is below ``max(tol, ROUGH_TOL)`` or
    the objective rises; its point, cast to float64, starts a float64 phase that runs
    until the change is below ``tol``, within the ``max_iter`` accelerated iterations
    left. The float64 phase's objective never increases (as for a float64 fit), and
    the fit ends where a float64 fit's stopping rule holds.

    Parameters
    ----------
    init : Factors
        Feasible float64 factors.
    data, prior, tol, max_iter
        As for :func:`solve`.

    Returns
    -------
    Solution
        ``state`` is :class:`Polished`; ``trace`` holds the float32 phase's objective
        (its terms computed in float32, summed in float64) up to its last point, whose
        entry is the exact float64 objective there, then the float64 phase's.
    """
    low = jnp.float32
    rough_data = dataclasses.replace(data, n_obs=data.n_obs.astype(low))
    rough_prior = Prior(*(p.astype(low) for p in prior))
    rough = _accelerated(
        Factors(init.W.astype(low), init.H.astype(low)),
        rough_data,
        rough_prior,
        jnp.maximum(tol, ROUGH_TOL),
        max_iter=max_iter,
        change=_rough_change,
    )
    W, H = (x.astype(init.W.dtype) for x in rough.state)
    total = W.sum(axis=1, keepdims=True)  # back on the simplex in float64 (W P0 <= 1)
    start = Factors(jnp.where(total > 0, W / jnp.where(total > 0, total, 1), W), H)
    fine = _accelerated(start, data, prior, tol, max_iter=max_iter, limit=max_iter - rough.n_iter)
    index = jnp.arange(max_iter + 1)
    shifted = fine.trace[jnp.maximum(index - rough.n_iter, 0)]
    trace = jnp.where(index < rough.n_iter, rough.trace, shifted)
    state = Polished(fine.state.W, fine.state.H, rough.n_iter)
    return Solution(state, trace, rough.n_iter + fine.n_iter, fine.change)


def sweeps(n_iter, accelerate: bool, mixed: bool = False):
    """MM sweeps evaluated in ``n_iter`` iterations (3 per accelerated one, plus one per phase)."""
    if not accelerate:
        return n_iter
    return 1 + int(mixed) + squarem.EVALUATIONS_PER_ITERATION * n_iter
