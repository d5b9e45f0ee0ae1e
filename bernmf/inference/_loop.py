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
        Relative change of the value in the last iteration (inf before the first).
    """

    state: Any
    trace: jax.Array
    n_iter: jax.Array
    change: jax.Array


def iterate_until(
    update: Callable, value: Callable, start, tol, *, max_iter: int, first_value=None
) -> Solution:
    """Run ``state = update(state)`` until the relative change of ``value(state)`` is < tol.

    Parameters
    ----------
    update : callable
        ``state -> state``, one iteration (any pytree of arrays).
    value : callable
        ``state -> scalar``, the traced quantity (an objective, an ELBO, ...).
    start : pytree
        The initial state.
    tol : scalar
        Stop when ``|v_prev - v| / |v_prev| < tol``; 0 runs exactly ``max_iter`` iterations.
    max_iter : int
        Iteration limit (static: it sets the trace's length).
    first_value : scalar array, optional
        ``value(start)`` when the caller has it already.

    Returns
    -------
    Solution
    """
    first_value = value(start) if first_value is None else first_value
    trace = jnp.full(max_iter + 1, jnp.nan, first_value.dtype).at[0].set(first_value)
    inf = jnp.asarray(jnp.inf, first_value.dtype)

    def keep_going(carry):
        i, _, _, _, change = carry
        return (i < max_iter) & (change >= tol)

    def body(carry):
        i, state, previous, trace, _ = carry
        state = update(state)
        current = value(state)
        scale = jnp.maximum(jnp.abs(previous), jnp.finfo(current.dtype).tiny)
        change = jnp.abs(previous - current) / scale
        return i + 1, state, current, trace.at[i + 1].set(current), change

    carry = (jnp.asarray(0), start, first_value, trace, inf)
    n_iter, state, _, trace, change = jax.lax.while_loop(keep_going, body, carry)
    return Solution(state, trace, n_iter, change)
