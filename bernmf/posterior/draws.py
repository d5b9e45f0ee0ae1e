"""Posterior draws as arrays: summaries, component alignment, R-hat and ESS.

Everything here takes draws ``W_draws`` of shape (C, S, M, K) and ``H_draws`` of shape
(C, S, K, N) (C chains of S draws), whichever engine made them; a fit's draws are
aligned and diagnosed by :mod:`bernmf.results.diagnostics`.

The components of the model are not identified: permuting them (columns of W and
rows of H together) leaves ``W @ H`` and the posterior unchanged, so different
chains may settle on different orderings (label switching). ``W @ H`` is always
identifiable; W and H are compared across chains only after
:func:`component_permutations` and :func:`permute_draws`.
"""

from __future__ import annotations

import functools
import math
import os
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np

from bernmf.models.spec import Prior, log_joint, probability
from bernmf.posterior.convergence import (
    CHUNK_VALUES,
    Workspace,
    ess_rows,
    nested_rank_rhat_rows,
    rank_rhat_rows,
)

RHAT_WARN = 1.01
"""R-hat of WH above which :func:`bernmf.diagnostics` warns."""


def mean_probability(W_draws, H_draws) -> np.ndarray:
    """Posterior mean of ``W @ H`` over all chains and draws, without storing every product.

    Parameters
    ----------
    W_draws : array of shape (C, S, M, K)
    H_draws : array of shape (C, S, K, N)

    Returns
    -------
    ndarray of shape (M, N)
        ``mean over (c, s) of W[c, s] @ H[c, s]``, computed as one product of
        (M, C*S*K) by (C*S*K, N) (divided by C*S beforehand), clipped to [0, 1] as
        :func:`bernmf.models.spec.probability` does.
    """
    C, S, M, K = W_draws.shape
    N = H_draws.shape[-1]
    W_wide = np.moveaxis(np.asarray(W_draws, float) / (C * S), 2, 0).reshape(M, C * S * K)
    return probability(W_wide, np.asarray(H_draws).reshape(C * S * K, N))


@functools.partial(jax.jit, static_argnums=0)
def _mapped(function, flat, *args):
    return jax.lax.map(lambda factors: function(factors, *args), flat)


def map_draws(function, W_draws, H_draws, *args) -> np.ndarray:
    """``function((W, H), *args)`` of every draw, one draw at a time in one compiled loop.

    W_draws (C, S, M, K) and H_draws (C, S, K, N) are flattened to C * S draws; the
    result has shape (C * S, ...). ``function`` is a module-level function, so that
    the compiled loop is kept (per shapes) for the next call. Call it inside
    ``jax.enable_x64(True)`` for float64.
    """
    C, S = W_draws.shape[:2]
    flat = (
        jnp.asarray(W_draws).reshape(C * S, *W_draws.shape[2:]),
        jnp.asarray(H_draws).reshape(C * S, *H_draws.shape[2:]),
    )
    return np.asarray(_mapped(function, flat, *args), float)


def _log_joint_of(factors, Y, mask, prior):
    return log_joint(Y, mask, factors[0], factors[1], prior)


NUMPY_ENTRIES = 2**24
"""Up to this many entries in all draws together (C S M N), :func:`log_joint_draws`
computes in numpy, one draw at a time: sooner than compiling its loop (measured in
docs/speed.md, svi's first call)."""


def log_joint_draws(Y, mask, W_draws, H_draws, prior: Prior) -> np.ndarray:
    """Unnormalized log-joint (minus the ``mm`` objective) of every draw.

    Parameters
    ----------
    Y, mask : arrays of shape (M, N)
        The training data and its mask.
    W_draws : array of shape (C, S, M, K)
    H_draws : array of shape (C, S, K, N)
    prior : Prior

    Returns
    -------
    ndarray of shape (C, S)
    """
    C, S = W_draws.shape[:2]
    if C * S * np.size(Y) <= NUMPY_ENTRIES:
        W_flat, H_flat = (np.reshape(x, (C * S, *x.shape[2:])) for x in (W_draws, H_draws))
        Y, mask = np.asarray(Y, float), np.asarray(mask, bool)
        values = [log_joint(Y, mask, W, H, prior) for W, H in zip(W_flat, H_flat, strict=True)]
        return np.asarray(values, float).reshape(C, S)
    with jax.enable_x64(True):
        prior_arrays = Prior(*(jnp.asarray(v) for v in prior))
        Y, mask = jnp.asarray(Y), jnp.asarray(mask)
        return map_draws(_log_joint_of, W_draws, H_draws, Y, mask, prior_arrays).reshape(C, S)


def component_permutations(H_draws, reference=None) -> np.ndarray:
    """For each chain, the permutation of components whose mean H best matches a reference.

    Parameters
    ----------
    H_draws : array of shape (C, S, K, N)
    reference : array of shape (K, N), optional
        Default: the posterior mean of H in chain 0.

    Returns
    -------
    ndarray of int, shape (C, K)
        ``perm[c]``: chain c's component ``perm[c][k]`` is the reference's component
        k (Hungarian matching of the chain-mean rows of H on squared distance).
    """
    H_draws = np.asarray(H_draws)
    chain_means = H_draws.mean(axis=1)
    reference = chain_means[0] if reference is None else np.asarray(reference, float)
    if reference.shape != chain_means.shape[1:]:
        raise ValueError(
            f"reference must have the shape of H, {chain_means.shape[1:]}, got {reference.shape}"
        )
    from scipy.optimize import linear_sum_assignment  # on first use: it loads in 0.1 s

    permutations = []
    for chain_mean in chain_means:
        cost = ((reference[:, None, :] - chain_mean[None, :, :]) ** 2).sum(axis=-1)
        _, columns = linear_sum_assignment(cost)
        permutations.append(columns)
    return np.asarray(permutations)


def permute_draws(W_draws, H_draws, permutations) -> tuple[np.ndarray, np.ndarray]:
    """Apply per-chain permutations (shape (C, K)) to the components of the draws."""
    W_draws, H_draws = np.asarray(W_draws), np.asarray(H_draws)
    W_aligned = np.stack([w[..., p] for w, p in zip(W_draws, permutations, strict=True)])
    H_aligned = np.stack([h[:, p, :] for h, p in zip(H_draws, permutations, strict=True)])
    return W_aligned, H_aligned


def rank_rhat(x) -> np.ndarray:
    """Rank-normalized split R-hat (Vehtari et al. 2021), vectorized over entries.

    The same numbers as ``arviz_stats.rhat(x, chain_axis=0, draw_axis=1)``, which
    loops over entries in Python (milliseconds each: too slow for the 350,000
    entries of WH on lastfm); see :mod:`bernmf.posterior.convergence`.

    Parameters
    ----------
    x : array of shape (C, S, ...)

    Returns
    -------
    ndarray of shape x.shape[2:]
        ``max(bulk, tail)`` R-hat; NaN with fewer than 2 chains or 4 draws.
    """
    x = np.asarray(x, float)
    return rank_rhat_rows(_entries_first(x)).reshape(x.shape[2:])


def _entries_first(x: np.ndarray) -> np.ndarray:
    """(C, S, ...) draws -> (E, C, S), each entry's draws contiguous."""
    C, S = x.shape[:2]
    return np.ascontiguousarray(np.moveaxis(x.reshape(C, S, -1), 2, 0))


def _components_first(draws: np.ndarray, axis: int) -> np.ndarray:
    """W (C, S, M, K) with axis 3 or H (C, S, K, N) with axis 2 -> (K, rows, C * S).

    A contiguous copy: as a view its draws are strided, and the products over them
    (:func:`_sum_of_products`) read one number per cache line (docs/ensembles.md).
    """
    C, S = draws.shape[:2]
    moved = np.moveaxis(draws, (axis, 0, 1), (0, -2, -1))
    return np.ascontiguousarray(moved.reshape(draws.shape[axis], -1, C * S))


def _sum_of_products(a: np.ndarray, b: np.ndarray, out=None) -> np.ndarray:
    """``sum over k of a[k] * b[k]`` by plain multiplies and adds in order k = 0, 1, ...

    No BLAS and no fused multiply-add, so the bits do not depend on the library or
    the machine (here they are those of the former ``np.einsum``). That matters:
    R-hat is rank-based and moves by a few 1e-6 when WH changes in its last bit
    (near ties of the folded draws). ``out``: two arrays of the result's shape, for
    the sum (returned) and for each product (fresh ones by default).
    """
    if out is None:
        shape = np.broadcast_shapes(a.shape[1:], b.shape[1:])
        out = (np.empty(shape), np.empty(shape))
    total, product = out
    np.multiply(a[0], b[0], out=total)
    for k in range(1, len(a)):
        total += np.multiply(a[k], b[k], out=product)
    return total


def rhat_and_ess(
    W_draws,
    H_draws,
    *,
    ess_entries: int = 1000,
    seed: int = 0,
    max_block_values: int = CHUNK_VALUES,
    threads: int | None = None,
) -> tuple[dict, dict, dict]:
    """R-hat of every entry of WH, W and H, and bulk/tail ESS of some: the arrays of
    :func:`bernmf.diagnostics`, from (aligned) draws.

    R-hat: :func:`rank_rhat`; WH's a tile at a time on ``threads`` threads
    (:func:`_wh_rhat`), so its draws are never all in memory. ESS (bulk and tail, the
    numbers of ``arviz_stats.ess``): of at most ``ess_entries`` entries of each quantity
    drawn at random by ``seed`` (:func:`_sampled_ess`), NaN elsewhere.

    Parameters
    ----------
    W_draws : array of shape (C, S, M, K)
    H_draws : array of shape (C, S, K, N)
        Components aligned across chains (:func:`bernmf.align_components`) for W's and H's numbers.
    ess_entries, seed, max_block_values, threads
        As :func:`bernmf.diagnostics` takes them.

    Returns
    -------
    rhat, ess_bulk, ess_tail : dict of str to ndarray
        Keys ``"WH"``, ``"W"``, ``"H"``; shapes (M, N), (M, K), (K, N). R-hat is NaN with
        fewer than 2 chains.

    Raises
    ------
    ValueError
        ``threads`` under 1.
    """
    threads = check_threads(threads)
    W_draws, H_draws = np.asarray(W_draws, float), np.asarray(H_draws, float)
    H_wide = _components_first(H_draws, 2)  # (K, N, C * S): WH's products read it
    rhat = {
        "WH": _wh_rhat(W_draws, H_wide, max_block_values, threads),
        "W": rank_rhat(W_draws),
        "H": rank_rhat(H_draws),
    }
    ess_bulk, ess_tail = _sampled_ess(W_draws, H_draws, H_wide, ess_entries, seed)
    return rhat, ess_bulk, ess_tail


def wh_rhat_and_ess(W_draws, H_draws, *, rows_per_block: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Rank R-hat and bulk ESS of every entry of W @ H, shape (M, N) each.

    R-hat a tile at a time (:func:`rhat_and_ess`'s kernel); bulk ESS (the number of
    ``arviz_stats.ess``) of every entry, ``rows_per_block`` rows of WH at a time, where
    :func:`rhat_and_ess` samples some entries: a reference posterior is checked on all of
    them (:mod:`bernmf.studies.reproduce.reference`).

    Parameters
    ----------
    W_draws : array of shape (C, S, M, K)
    H_draws : array of shape (C, S, K, N)
    rows_per_block : int
        Rows of WH whose (C * S) products are held at once.

    Returns
    -------
    rhat, ess_bulk : ndarray of shape (M, N)
    """
    W_draws, H_draws = np.asarray(W_draws, float), np.asarray(H_draws, float)
    C, S, M = W_draws.shape[:3]
    N = H_draws.shape[3]
    H_wide = _components_first(H_draws, 2)  # (K, N, C * S)
    rhat = _wh_rhat(W_draws, H_wide, 2**22, check_threads(None))
    ess = np.empty((M, N))
    for first in range(0, M, rows_per_block):
        rows = slice(first, first + rows_per_block)
        W_strip = _components_first(W_draws[:, :, rows], 3)  # (K, r, C * S)
        tile = _sum_of_products(W_strip[:, :, None], H_wide[:, None])  # (r, N, C * S)
        ess[rows] = ess_rows(tile.reshape(-1, C, S), "bulk").reshape(-1, N)
    return rhat, ess


def check_threads(threads: int | None) -> int:
    """The threads of WH's R-hat: ``threads``, by default the CPUs this process may use;
    ValueError under 1."""
    if threads is None:
        threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    return threads


def _wh_rhat(W_draws, H_wide, max_block_values: int, threads: int, groups=None) -> np.ndarray:
    """R-hat of every entry of WH (M, N) from W (C, S, M, K) and H as (K, N, C * S)
    (:func:`_components_first`), a tile of rows x columns at a time; with ``groups``
    (C,), the nested R-hat of those superchains (:func:`nested_rank_rhat_rows`).

    A tile holds about ``max_block_values`` numbers (at least one entry's draws), so that
    small tiles stay in cache and reuse the memory of the last; thread t takes every
    ``threads``-th strip of rows.
    """
    C, S, M = W_draws.shape[:3]
    N = H_wide.shape[1]
    wh = np.empty((M, N))
    tile_entries = max(1, max_block_values // (C * S))
    tile_columns = min(N, max(1, math.isqrt(tile_entries)))
    tile_rows = min(M, max(1, tile_entries // tile_columns))

    def strips(thread: int) -> None:
        """R-hat of every ``threads``-th strip of rows of WH, a tile of columns at a time."""
        work = Workspace(tile_rows * tile_columns, 2 * C * (S // 2))
        buffers = np.empty((2, tile_rows * tile_columns * C * S))
        for start in range(thread * tile_rows, M, threads * tile_rows):
            rows = slice(start, start + tile_rows)
            W_strip = _components_first(W_draws[:, :, rows], 3)  # (K, r, C * S)
            for first in range(0, N, tile_columns):
                columns = slice(first, first + tile_columns)
                shape = (W_strip.shape[1], min(tile_columns, N - first), C * S)
                out = [buffer[: math.prod(shape)].reshape(shape) for buffer in buffers]
                tile = _sum_of_products(W_strip[:, :, None], H_wide[:, None, columns], out)
                if groups is None:
                    rhat = rank_rhat_rows(tile.reshape(-1, C, S), workspace=work)
                else:
                    rhat = nested_rank_rhat_rows(tile.reshape(-1, C, S), groups)
                wh[rows, columns] = rhat.reshape(shape[:2])

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(strips, range(threads)))
    return wh


def wh_entries(W_draws, H_wide, rows, columns) -> np.ndarray:
    """The draws of some entries of WH, each entry's contiguous: shape (E, C, S).

    ``W_draws`` (C, S, M, K), ``H_wide`` the H draws as (K, N, C * S)
    (:func:`_components_first`); ``rows`` and ``columns`` (E,) the entries' indices.
    """
    C, S = W_draws.shape[:2]
    W_wide = _components_first(W_draws[:, :, rows], 3)
    return _sum_of_products(W_wide, H_wide[:, columns]).reshape(-1, C, S)


def _sampled_ess(W_draws, H_draws, H_wide, ess_entries: int, seed: int) -> tuple[dict, dict]:
    """Bulk and tail ESS of at most ``ess_entries`` entries of WH, W and H each, drawn at
    random by ``seed`` (in that order, from one generator); NaN for the other entries.
    ``H_wide``: H_draws as (K, N, C * S)."""
    C, S, M = W_draws.shape[:3]
    N = H_draws.shape[-1]
    rng = np.random.default_rng(seed)
    ess_bulk, ess_tail = {}, {}
    for quantity, shape in (("WH", (M, N)), ("W", W_draws.shape[2:]), ("H", H_draws.shape[2:])):
        size = int(np.prod(shape))
        chosen = np.sort(rng.choice(size, min(size, ess_entries), replace=False))
        if quantity == "WH":
            picked = wh_entries(W_draws, H_wide, *np.unravel_index(chosen, shape))
        else:
            draws = W_draws if quantity == "W" else H_draws
            picked = _entries_first(draws.reshape(C, S, size)[..., chosen])
        for store, method in ((ess_bulk, "bulk"), (ess_tail, "tail")):
            values = np.full(size, np.nan)
            values[chosen] = ess_rows(picked, method)
            store[quantity] = values.reshape(shape)
    return ess_bulk, ess_tail
