"""The compiled iterate-until-converged loop shared by the engines that trace an objective."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp


class Solution(NamedTuple):
    """The end of :func:`iterate_until`.

    Attributes
    ----------
    state : pytree
        The last state (an engine's own iteration state).
    trace : array of shape (max_iter + 1,)
        The traced value at the start and after each iteration; NaN after ``n_iter``.
    n_iter : int array
        Iterations made.
    change : array
        The value's change in the last iteration, as the loop measured it (relative by
        default); inf before the first iteration, and before ``min_iter``.
    """

    state: Any
    trace: jax.Array
    n_iter: jax.Array
    change: jax.Array


def relative_change(previous, current):
    """``|previous - current| / |previous|``, the scale at least the smallest normal float."""
    scale = jnp.maximum(jnp.abs(previous), jnp.finfo(current.dtype).tiny)
    return jnp.abs(previous - current) / scale


def iterate_until(
    update: Callable,
    value: Callable,
    start,
    tol,
    *,
    max_iter: int,
    first_value=None,
    change: Callable = relative_change,
    min_iter: int = 1,
) -> Solution:
    """Run ``state = update(state)`` until the change of ``value(state)`` is < tol.

    Parameters
    ----------
    update : callable
        ``state -> state``, one iteration (any pytree of arrays).
    value : callable
        ``state -> scalar``, the traced quantity (an objective, an ELBO, ...).
    start : pytree
        The initial state.
    tol : scalar
        Stop when ``change(v_prev, v) < tol``, by default ``|v_prev - v| / |v_prev| < tol``;
        0 then runs exactly ``max_iter`` iterations.
    max_iter : int
        Iteration limit (static: it sets the trace's length).
    first_value : scalar array, optional
        ``value(start)`` when the caller has it already.
    change : callable, default :func:`relative_change`
        ``(previous value, value) -> scalar``, the change compared with ``tol``; the
        loop goes on while it is ``>= tol`` (so a NaN change stops it).
    min_iter : int, default 1
        The first iteration whose change counts (the change is inf before it; static).

    Returns
    -------
    Solution
    """
    first_value = value(start) if first_value is None else first_value
    trace = jnp.full(max_iter + 1, jnp.nan, first_value.dtype).at[0].set(first_value)
    inf = jnp.asarray(jnp.inf, first_value.dtype)

    def keep_going(carry):
        i, _, _, _, latest = carry
        return (i < max_iter) & (latest >= tol)

    def body(carry):
        i, state, previous, trace, _ = carry
        state = update(state)
        current = value(state)
        measured = change(previous, current)
        if min_iter > 1:  # static: callers without a minimum trace the same program
            measured = jnp.where(i + 1 >= min_iter, measured, inf)
        return i + 1, state, current, trace.at[i + 1].set(current), measured

    carry = (jnp.asarray(0), start, first_value, trace, inf)
    n_iter, state, _, trace, latest = jax.lax.while_loop(keep_going, body, carry)
    return Solution(state, trace, n_iter, latest)
