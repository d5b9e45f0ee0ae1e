"""The compiled iterate-until-converged loop shared by the engines that trace an objective."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax._src.interpreters.batching import BatchTracer

from bernmf._progress import note

NOTE_SECONDS = 1.0
"""Estimated work between two progress notes of a loop (:func:`noting`), in seconds."""
ELEMENT_SECONDS = 1e-9
"""Estimated seconds per element an iteration computes (optimistic: notes come no rarer)."""


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


def _inner(param) -> list:
    """The jaxprs in one parameter of an equation (a loop's body, a cond's branches)."""
    params = param if isinstance(param, tuple) else (param,)
    found = [getattr(p, "jaxpr", p) for p in params]
    return [j for j in found if hasattr(j, "eqns")]


def _elements(jaxpr) -> float:
    """Elements the equations of ``jaxpr`` produce, those of loops and branches included."""
    total = 0.0
    for eqn in jaxpr.eqns:
        total += sum(math.prod(getattr(v.aval, "shape", ())) for v in eqn.outvars)
        inner = [_elements(j) for p in eqn.params.values() for j in _inner(p)]
        total += max(inner, default=0.0) * eqn.params.get("length", 1)
    return total


def noting(update: Callable, *args) -> Callable | None:
    """``noted(i, value, when=True)`` for a loop of ``update(*args)``, or None.

    ``noted`` calls :func:`bernmf._progress.note` when ``when`` and ``i`` is a positive
    multiple of ``k``: a fit shorter than ``k`` iterations makes no host callback.

    The progress lines of the command line (:class:`bernmf._progress.Heartbeat`)
    say which iteration a compiled fit has reached; a host callback per iteration
    would cost more than a small iteration, so ``k`` is a power of two that spaces
    the notes by about :data:`NOTE_SECONDS` of estimated work (the elements one
    ``update`` computes, at :data:`ELEMENT_SECONDS` each). None (no notes) for a
    loop under ``vmap``, where every fit of a batch would call back at each iteration.
    """
    if any(isinstance(x, BatchTracer) for x in jax.tree.leaves(args)):
        return None
    seconds = max(_elements(jax.make_jaxpr(update)(*args).jaxpr) * ELEMENT_SECONDS, 1e-12)
    every = 1 << max(0, min(30, math.ceil(math.log2(max(NOTE_SECONDS / seconds, 1)))))

    def noted(i, value, when=True) -> None:
        due = when & (i > 0) & (i % every == 0)
        jax.lax.cond(due, lambda: jax.debug.callback(note, i, value), lambda: None)

    return noted


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

    Notes
    -----
    Every few iterations (:func:`noting`) the loop hands its count and value to
    :func:`bernmf._progress.note`, which the progress lines of long fits report.
    """
    first_value = value(start) if first_value is None else first_value
    update = jax.jit(update)  # traced once for the progress notes' estimate and the body
    noted = noting(update, start)
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
        if noted is not None:  # static
            noted(i + 1, current)
        return i + 1, state, current, trace.at[i + 1].set(current), measured

    carry = (jnp.asarray(0), start, first_value, trace, inf)
    n_iter, state, _, trace, latest = jax.lax.while_loop(keep_going, body, carry)
    return Solution(state, trace, n_iter, latest)
