"""SQUAREM acceleration of the MM fixed-point map, with a monotone safeguard.

One MM sweep is a map ``F: (W, H) -> (W', H')`` that never increases the objective
``f``. SQUAREM (Varadhan & Roland 2008, step length S3) extrapolates along two sweeps::

    x1 = F(x0),  x2 = F(x1),  r = x1 - x0,  v = x2 - x1 - r
    a  = clip(||r|| / ||v||, 1, a_max)           (S3, with a >= 1)
    x' = x0 + 2 a r + a^2 v                      (a = 1 gives x2)

and this module adds the safeguards that keep MM's guarantees:

* **constraints**: x' is projected so that each entry moves at most half-way from x2
  towards the boundary (``H' in [H2 / 2, (1 + H2) / 2]``, ``W' >= W2 / 2``), and the
  rows of W are renormalized onto the simplex; entries that MM keeps positive stay
  positive (MM's multiplicative updates could never leave an exact 0);
* **stabilization**: one more sweep, ``x3 = F(x')``;
* **monotonicity**: x3 is taken only if ``f(x') <= f(x0)``, which implies
  ``f(x3) <= f(x0)`` since F never increases f; otherwise the plain MM point x2
  (``f(x2) <= f(x1) <= f(x0)``) is taken. The objective therefore never increases
  from one accelerated iteration to the next, exactly as for plain MM.

The largest step ``a_max`` starts at 1 and is multiplied by 4 whenever the step reaches
it, and divided by 4 (down to 1) when a step at it is rejected (the step-length
control of the SQUAREM reference implementation).

Each accelerated iteration costs three evaluations of F. The function ``sweep``
given to :func:`solve` returns ``(f(x), F(x))`` together, as MM computes the
objective of x from the same predictions its next sweep needs; so f(x') and f(x0) come
with the sweeps and the iteration needs no extra objective evaluation. f(x1) is never
used, so the sweep from x1 is told to skip it (``evaluate`` False).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from bernmf.inference._loop import Solution, noting, relative_change
from bernmf.models.spec import Factors

STEP_FACTOR = 4.0
"""``a_max`` is multiplied (divided) by this after a step at it is taken (rejected)."""

EVALUATIONS_PER_ITERATION = 3
"""Sweeps per accelerated iteration; the solver makes one more, at its start."""

FixedPointMap = Callable[..., tuple[jax.Array, Factors]]
"""``(x, evaluate=True) -> (f(x), F(x))``: the objective at x and one MM sweep from x; where
the boolean array ``evaluate`` is False, f(x) is not used and may be skipped (any value)."""


def _norm2(tree) -> jax.Array:
    return sum(jnp.sum(jnp.square(x)) for x in jax.tree.leaves(tree))


def extrapolate(
    x0: Factors, x1: Factors, x2: Factors, max_step, norm2: Callable = _norm2
) -> tuple[Factors, jax.Array]:
    """The projected SQUAREM point from three successive iterates, and its step length a.

    Parameters
    ----------
    x0, x1, x2 : Factors
        ``x1 = F(x0)``, ``x2 = F(x1)``; W of shape (M, K) with rows on the simplex, H of
        shape (K, N) in [0, 1].
    max_step : scalar
        Upper bound of the step length a (>= 1).
    norm2 : callable, optional
        Squared norm of a difference of factors (default: the sum of squares of all
        entries; the sharded and padded MM problems give one that leaves out padding
        rows and adds up over devices).

    Returns
    -------
    point : same type as x2
        Feasible: W >= 0 with rows summing to one, 0 <= H <= 1.
    step : scalar
        The step length a in [1, max_step] (a = 1 gives x2 exactly).
    """
    r = jax.tree.map(jnp.subtract, x1, x0)
    v = jax.tree.map(lambda a, b, c: a - 2 * b + c, x2, x1, x0)
    r2, v2 = norm2(r), norm2(v)
    raw = jnp.sqrt(r2 / jnp.where(v2 > 0, v2, 1))
    step = jnp.clip(jnp.where(v2 > 0, raw, 1), 1, max_step)
    W, H = (a + 2 * step * b + step**2 * c for a, b, c in zip(x0, r, v, strict=True))
    H = jnp.clip(H, x2.H / 2, (1 + x2.H) / 2)
    W = jnp.maximum(W, x2.W / 2)
    total = W.sum(axis=1, keepdims=True)
    W = jnp.where(total > 0, W / jnp.where(total > 0, total, 1), x2.W)
    # a = 1 is x2 up to rounding; return x2 itself so the plain path is exact
    plain = step == 1
    return type(x2)(jnp.where(plain, x2.W, W), jnp.where(plain, x2.H, H)), step


class Extrapolation(NamedTuple):
    """Where an accelerated iteration stands (``accepted`` counts the extrapolated
    points taken; the other iterations took x2)."""

    t: jax.Array  # accelerated iterations done; -1 before the first sweep
    stage: jax.Array  # which sweep comes next: 0 of x1, 1 of the point, 2 of x_{t+1}
    inp: Factors  # the input of the next sweep
    x: Factors  # current point x0, objective `value`
    value: jax.Array
    x1: Factors  # F(x0)
    x2: Factors  # F(x1)
    step: jax.Array  # step length of the current extrapolation
    max_step: jax.Array
    change: jax.Array
    accepted: jax.Array
    trace: jax.Array


def _select(condition, a, b):
    return jax.tree.map(lambda u, v: jnp.where(condition, u, v), a, b)


def solve(
    init: Factors,
    sweep: FixedPointMap,
    tol,
    *,
    max_iter: int,
    norm2: Callable = _norm2,
    limit=None,
    change: Callable = relative_change,
) -> Solution:
    """Iterate accelerated MM from ``init`` until the relative change of f is < tol.

    The loop body makes one sweep and moves through the three stages of an
    accelerated iteration (a sweep from x1, from the extrapolated point, from the
    chosen point), so the compiled program holds the sweep once; that is why it is not
    :func:`bernmf.inference._loop.iterate_until`, whose body would hold three sweeps.

    Parameters
    ----------
    init : Factors
        Feasible starting factors.
    sweep : callable
        ``sweep(x, evaluate=True) -> (f(x), F(x))``: the objective of x and one MM
        sweep from x (:data:`FixedPointMap`); ``evaluate`` is a boolean array, False
        for the sweep from x1, whose objective is not used. Any JAX function; it is
        traced inside a ``lax.while_loop`` (and may be vmapped).
    tol : scalar
        Stop when ``|f_prev - f| / |f_prev| < tol`` between accelerated iterations; 0
        runs exactly ``max_iter`` of them.
    max_iter : int
        Limit of accelerated iterations (static: it sets the trace's length).
    norm2 : callable, optional
        Squared norm used for the step length; see :func:`extrapolate`.
    limit : int array, optional
        A limit of accelerated iterations below ``max_iter``, known only at run time
        (the first sweep, which evaluates f at ``init``, is made even when it is 0).
    change : callable, default :func:`bernmf.inference._loop.relative_change`
        ``(previous f, f) -> scalar``, the change compared with ``tol``.

    Returns
    -------
    Solution
        Of :func:`bernmf.inference._loop.iterate_until`'s kind: ``state`` is the last
        :class:`Extrapolation`, whose ``x`` holds the last factors whose objective is known
        (the last entry of the trace); ``n_iter`` counts accelerated iterations
        (``1 + 3 * n_iter`` sweeps were evaluated).
    """
    # one trace of the sweep serves its output type, the cost estimate of the progress
    # notes and the loop body (jit's cache), where each would otherwise trace it anew
    sweep = jax.jit(sweep)
    evaluate = jnp.asarray(True)  # of the type the loop passes, for jit's cache
    dtype = jax.eval_shape(sweep, init, evaluate)[0].dtype  # of the objective
    start = Extrapolation(
        t=jnp.asarray(-1),
        stage=jnp.asarray(2, jnp.int32),  # strongly typed: `evaluate` below is then bool[]
        inp=init,
        x=init,
        value=jnp.asarray(jnp.inf, dtype),
        x1=init,
        x2=init,
        step=jnp.asarray(1.0, init.W.dtype),
        max_step=jnp.asarray(1.0, init.W.dtype),
        change=jnp.asarray(jnp.inf, dtype),
        accepted=jnp.asarray(0),
        trace=jnp.full(max_iter + 1, jnp.nan, dtype),
    )

    noted = noting(sweep, init, evaluate)

    limit = max_iter if limit is None else limit

    def keep_going(state: Extrapolation):
        return (state.t < limit) & (state.change >= tol)

    def iterate(state: Extrapolation) -> Extrapolation:
        first, second, third = state.stage == 0, state.stage == 1, state.stage == 2
        value, out = sweep(state.inp, ~first)
        # stage 0: out = x2; extrapolate
        x2 = _select(first, out, state.x2)
        point, step = extrapolate(state.x, state.x1, x2, state.max_step, norm2)
        # stage 1: value = f(point), out = F(point); keep it if f(point) <= f(x0)
        take = value <= state.value  # False for NaN
        following = _select(take, out, x2)
        at_max = state.step >= state.max_step
        grown = jnp.where(
            take, state.max_step * STEP_FACTOR, jnp.maximum(1, state.max_step / STEP_FACTOR)
        )
        max_step = jnp.where(second & at_max, grown, state.max_step)
        accepted = state.accepted + (second & take & (state.step > 1))
        # stage 2: value = f(x_{t+1}), out = F(x_{t+1}); record, test, start again
        measured = jnp.where(state.t < 0, jnp.inf, change(state.value, value))
        t = jnp.where(third, state.t + 1, state.t)
        if noted is not None:  # static: notes for progress lines, every few iterations
            noted(t, value, third)
        inp = _select(first, point, _select(second, following, out))
        return Extrapolation(
            t=t,
            stage=(state.stage + 1) % 3,
            inp=inp,
            x=_select(third, state.inp, state.x),
            value=jnp.where(third, value, state.value),
            x1=_select(third, out, state.x1),
            x2=x2,
            step=jnp.where(first, step, state.step),
            max_step=max_step,
            change=jnp.where(third, measured, state.change),
            accepted=accepted,
            trace=state.trace.at[jnp.where(third, t, max_iter + 1)].set(value, mode="drop"),
        )

    end = jax.lax.while_loop(keep_going, iterate, start)
    return Solution(end, end.trace, end.t, end.change)
