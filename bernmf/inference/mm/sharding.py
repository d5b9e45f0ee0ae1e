"""MM fits placed on devices: the solver sharded over rows, and the starts it runs from."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from bernmf.inference._loop import Solution
from bernmf.inference.mm import layout as layouts
from bernmf.inference.mm.kernel import Polished, normalized, random_init, solve
from bernmf.models.spec import Factors


def solver(devices, gather: bool = True):
    """:func:`solve`, or :func:`solve` under ``shard_map`` over the rows on ``devices``.

    Each device runs the same while loop on its rows of Y, the mask and W, with H
    replicated; the sums over rows (H step, objective) are ``lax.psum``-ed over
    the mesh axis, so every device takes the same decisions. The returned W is
    gathered onto every device, or with ``gather=False`` left sharded over the rows
    (across processes, each reads back only its own rows).
    """
    if devices is None:
        return solve
    rows, replicated = PartitionSpec(layouts.ROWS), PartitionSpec()

    def solve_sharded(init, data, prior, tol, *, max_iter, accelerate, mixed=False):
        state = Polished(rows, replicated, replicated) if mixed else Factors(rows, replicated)
        solution = jax.shard_map(
            functools.partial(solve, max_iter=max_iter, accelerate=accelerate, mixed=mixed),
            mesh=layouts.mesh(devices),
            in_specs=(Factors(rows, replicated), rows, replicated, replicated),
            out_specs=Solution(state, *[replicated] * 3),
        )(init, data, prior, tol)
        if not gather:
            return solution
        W = jax.lax.with_sharding_constraint(solution.state.W, layouts.replicated(devices))
        return solution._replace(state=solution.state._replace(W=W))

    return solve_sharded


def padded(factors: Factors, rows: int) -> Factors:
    """W padded to ``rows`` rows, uniform on the simplex (the padding rows are unobserved)."""
    W = factors.W
    padding = jnp.full((rows - W.shape[0], W.shape[1]), 1 / W.shape[1], W.dtype)
    return Factors(jnp.concatenate([W, padding]), factors.H)


def solve_from(init, prior, data, tol, *, devices, **options):
    """One fit from ``init`` (W of the real rows, padded here); ``options`` of :func:`solve`."""
    init = padded(init, data.y_zero.shape[0])
    return solver(devices)(init, data, prior, tol, **options)


def solve_from_seed(seed, prior, data, tol, *, M, K, **options):
    """One fit from the random initialization of ``seed`` (:func:`random_init`)."""
    init = random_init(jax.random.key(seed), M, data.y_zero.shape[1], K, prior.alpha.dtype)
    return solve_from(init, prior, data, tol, **options)


def solve_from_draws(draws, prior, data, tol, **options):
    """One fit from :func:`random_init`'s uniform draws made on the host
    (:func:`bernmf.inference.mm.starts.uniform_draws`): the same fit as
    :func:`solve_from_seed`'s, from a program without a random generator."""
    return solve_from(normalized(draws), prior, data, tol, **options)
