"""The compiled iterate-until-converged loop shared by the engines that trace an objective."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp


def iterate_until(update: Callable, value: Callable, start, first_value, tol, *, max_iter: int):
    """Run ``state = update(state)`` until the relative change of ``value(state)`` is < tol.

    Parameters
    ----------
    update : callable
        ``state -> state``, one iteration (any pytree of arrays).
    value : callable
        ``state -> scalar``, the traced quantity (an objective, an ELBO, ...).
    start : pytree
        The initial state; ``first_value`` is ``value(start)``.
    first_value : scalar array
    tol : scalar
        Stop when ``|v_prev - v| / |v_prev| < tol``; 0 runs exactly ``max_iter`` iterations.
    max_iter : int
        Iteration limit (static: it sets the trace's length).

    Returns
    -------
    n_iter, state, value, trace, rel_change
        ``trace`` has shape (max_iter + 1,): ``first_value`` first, NaN after ``n_iter``.
    """
    trace = jnp.full(max_iter + 1, jnp.nan, first_value.dtype).at[0].set(first_value)
    inf = jnp.asarray(jnp.inf, first_value.dtype)

    def keep_going(carry):
        i, _, _, _, rel_change = carry
        return (i < max_iter) & (rel_change >= tol)

    def body(carry):
        i, state, previous, trace, _ = carry
        state = update(state)
        current = value(state)
        scale = jnp.maximum(jnp.abs(previous), jnp.finfo(current.dtype).tiny)
        rel_change = jnp.abs(previous - current) / scale
        return i + 1, state, current, trace.at[i + 1].set(current), rel_change

    return jax.lax.while_loop(keep_going, body, (jnp.asarray(0), start, first_value, trace, inf))
