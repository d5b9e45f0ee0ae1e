"""Engine ``mm``: MAP estimation by majorization-minimization (Magron & Févotte 2022).

One sweep updates H given W, then W given H, with the mask handled exactly: held-out
entries are neither ones nor zeros, and each row of W is normalized by its number of
observed entries. With ``O`` the mask, ``Y1 = O * Y`` and ``Y0 = O * (1 - Y)``::

    C = H * (W.T @ (Y1 / (W @ H)))           + (alpha - 1)
    D = (1 - H) * (W.T @ (Y0 / (W @ (1 - H)))) + (beta - 1)
    H = C / (C + D)
    S = W * ((Y1 / (W @ H)) @ H.T + (Y0 / (W @ (1 - H))) @ (1 - H).T)
    W = (S + gamma - 1) / (n_obs + sum(gamma - 1))

Entries where ``C + D = 0`` (a column with no observed entry under a flat prior) and
rows where the denominator is 0 (a row with no observed entry and gamma = 1) keep
their value. The objective, ``-log_joint``, never increases when alpha, beta and
gamma are all >= 1.

The H step and the objective sum over rows and the W step is row by row, so the
same sweep runs over blocks of rows (``block_rows``: memory O((M + N) K + B N)
beyond Y) and over rows sharded across devices (``devices``: ``shard_map`` with
the row sums ``psum``-ed); see :func:`run`.

By default (``accelerate=True``) :func:`run` iterates SQUAREM extrapolations of these
sweeps (:mod:`bernmf.inference.accelerate`), safeguarded so that the constraints hold
and the objective still never increases.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from bernmf.data import Observed, check_count, check_stopping
from bernmf.inference import accelerate as squarem
from bernmf.inference._compile import compiled
from bernmf.inference._loop import iterate_until
from bernmf.inference.registry import Engine, register
from bernmf.models.spec import Prior, log_prior, masked_log_likelihood_sum
from bernmf.results import Fit

DTYPES = {"float64": jnp.float64, "float32": jnp.float32}


class Factors(NamedTuple):
    """W of shape (M, K), rows on the simplex; H of shape (K, N), entries in [0, 1]."""

    W: jax.Array
    H: jax.Array


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["y_one", "y_zero", "mask", "n_obs", "real_row"],
    meta_fields=["block_rows", "axis_name"],
)
@dataclasses.dataclass(frozen=True)
class Problem:
    """The data as the update equations use them.

    Attributes
    ----------
    y_one, y_zero, mask : bool arrays of shape (M, N)
        ``O * Y``, ``O * (1 - Y)`` and ``O``.
    n_obs : array of shape (M,)
        ``O.sum(1)`` in the factors' float dtype.
    real_row : bool array of shape (M,) or None
        False for the rows added to pad M to a multiple of the block size or of
        the device count (they have no observed entry and are left out of the
        objective); None when there is no padding.
    block_rows : int or None
        Static. None: every sweep works on whole (M, N) arrays. An int B: the
        sweep goes over blocks of B rows with ``lax.scan`` / ``lax.map``, so its
        temporaries are (B, N) and the predictions ``W @ H`` are not kept (see
        :class:`Sweep`); M (per device) must be a multiple of B.
    axis_name : str or None
        Static. Inside ``shard_map`` over the rows, the mesh axis to sum the
        row sums over (``lax.psum``); None on one device.
    """

    y_one: jax.Array
    y_zero: jax.Array
    mask: jax.Array
    n_obs: jax.Array
    real_row: jax.Array | None = None
    block_rows: int | None = None
    axis_name: str | None = None


class Sweep(NamedTuple):
    """Factors with what the objective and the next H step need of them, computed once.

    Unblocked: the predictions ``p_one = W @ H`` and ``p_zero = W @ (1 - H)``, (M, N).
    Blocked (see :class:`Problem`), these would be (M, N), so they are None; one pass
    over the blocks computes instead, block by block, the log-likelihood of this
    device's rows (``log_lik``, a scalar) and the H step's sums over all rows
    (``h_sums``: ``W.T @ (O*Y / WH)`` and ``W.T @ (O*(1-Y) / W(1-H))``, each (K, N)).
    """

    W: jax.Array
    H: jax.Array
    p_one: jax.Array | None = None
    p_zero: jax.Array | None = None
    log_lik: jax.Array | None = None
    h_sums: tuple[jax.Array, jax.Array] | None = None


def predict(W, H) -> tuple[jax.Array, jax.Array]:
    """Return ``(W @ H, W @ (1 - H))``: P(Y=1) and P(Y=0), each of shape (M, N)."""
    return W @ H, W @ (1 - H)


def make_sweep(problem: Problem, W, H) -> Sweep:
    """The :class:`Sweep` at ``(W, H)``: its predictions, or (blocked) one pass over the blocks."""
    if problem.block_rows is None:
        return Sweep(W, H, *predict(W, H))
    log_lik, h_sums = _blocked_pass(problem, W, H)
    return Sweep(W, H, log_lik=log_lik, h_sums=h_sums)


def _ratios(y_one, y_zero, p_one, p_zero):
    """``O*Y / (W @ H)`` and ``O*(1-Y) / (W @ (1-H))``, of the shape of ``y_one``."""
    tiny = jnp.finfo(p_one.dtype).tiny
    return (
        jnp.where(y_one, 1 / jnp.maximum(p_one, tiny), 0.0),
        jnp.where(y_zero, 1 / jnp.maximum(p_zero, tiny), 0.0),
    )


def _blocks(problem: Problem, *row_arrays):
    """Each (M, ...) array as (M / B, B, ...): the leading axis is scanned over."""
    B = problem.block_rows
    return tuple(a.reshape(a.shape[0] // B, B, *a.shape[1:]) for a in row_arrays)


def _total_over_devices(problem: Problem, value):
    """Add up per-device sums over rows (a no-op on one device)."""
    if problem.axis_name is None:
        return value
    return jax.lax.psum(value, problem.axis_name)


def _rows_h_sums(y_one, y_zero, W_rows, p_one, p_zero):
    """``(W.T @ (O*Y / WH), W.T @ (O*(1-Y) / W(1-H)))`` over the given rows, each (K, N)."""
    r_one, r_zero = _ratios(y_one, y_zero, p_one, p_zero)
    return W_rows.T @ r_one, W_rows.T @ r_zero


def _blocked_pass(problem: Problem, W, H):
    """One pass over the row blocks at ``(W, H)``: ``(log_lik, h_sums)`` of :class:`Sweep`."""

    def add_block(totals, block):
        y_one, y_zero, mask, W_block = block
        p_one, p_zero = predict(W_block, H)
        one, zero = _rows_h_sums(y_one, y_zero, W_block, p_one, p_zero)
        log_lik = masked_log_likelihood_sum(y_one, mask, p_one, p_zero)
        return (totals[0] + log_lik, totals[1] + one, totals[2] + zero), None

    zeros = (jnp.zeros((), H.dtype), jnp.zeros_like(H), jnp.zeros_like(H))
    if problem.axis_name is not None:  # the sums differ between devices until the psum
        zeros = jax.lax.pcast(zeros, problem.axis_name, to="varying")
    blocks = _blocks(problem, problem.y_one, problem.y_zero, problem.mask, W)
    (log_lik, one, zero), _ = jax.lax.scan(add_block, zeros, blocks)
    return log_lik, _total_over_devices(problem, (one, zero))


def _h_statistics(problem: Problem, sweep: Sweep):
    """``(W.T @ (O*Y / WH), W.T @ (O*(1-Y) / W(1-H)))``, each (K, N), summed over all rows."""
    if problem.block_rows is not None:
        return sweep.h_sums
    sums = _rows_h_sums(problem.y_one, problem.y_zero, sweep.W, sweep.p_one, sweep.p_zero)
    return _total_over_devices(problem, sums)


def _w_statistics(problem: Problem, sweep: Sweep):
    """``S = W * ((O*Y / WH) @ H.T + (O*(1-Y) / W(1-H)) @ (1 - H).T)``, shape (M, K)."""
    W, H = sweep.W, sweep.H

    def rows_S(y_one, y_zero, W_rows, p_one, p_zero):
        r_one, r_zero = _ratios(y_one, y_zero, p_one, p_zero)
        return W_rows * (r_one @ H.T + r_zero @ (1 - H).T)

    if problem.block_rows is None:
        return rows_S(problem.y_one, problem.y_zero, W, sweep.p_one, sweep.p_zero)

    def block_S(block):
        y_one, y_zero, W_block = block
        return rows_S(y_one, y_zero, W_block, *predict(W_block, H))

    S = jax.lax.map(block_S, _blocks(problem, problem.y_one, problem.y_zero, W))
    return S.reshape(W.shape)


def update_H(problem: Problem, sweep: Sweep, prior: Prior) -> Sweep:
    """The H half of one MM sweep; returns the sweep with H and predictions updated."""
    W, H = sweep.W, sweep.H
    sum_one, sum_zero = _h_statistics(problem, sweep)
    C = H * sum_one + (prior.alpha - 1)[:, None]
    D = (1 - H) * sum_zero + (prior.beta - 1)[:, None]
    total = C + D
    H = jnp.where(total > 0, C / jnp.where(total > 0, total, 1), H)
    # Blocked, :func:`update_W` reads none of this sweep's pass, so XLA drops it (checked
    # in the compiled program: two passes over the blocks per plain sweep, not three).
    return make_sweep(problem, W, H)


def update_W(problem: Problem, sweep: Sweep, prior: Prior) -> Sweep:
    """The W half of one MM sweep (row by row); returns the sweep with W and predictions updated."""
    W, H = sweep.W, sweep.H
    S = _w_statistics(problem, sweep)
    denominator = (problem.n_obs + jnp.sum(prior.gamma - 1))[:, None]
    W = jnp.where(
        denominator > 0, (S + (prior.gamma - 1)) / jnp.where(denominator > 0, denominator, 1), W
    )
    return make_sweep(problem, W, H)


def step(problem: Problem, sweep: Sweep, prior: Prior) -> Sweep:
    """One MM sweep: H given W, then W given the new H."""
    return update_W(problem, update_H(problem, sweep, prior), prior)


def _log_likelihood(problem: Problem, sweep: Sweep):
    """Log-likelihood of the observed entries of this device's rows."""
    if problem.block_rows is not None:
        return sweep.log_lik
    return masked_log_likelihood_sum(problem.y_one, problem.mask, sweep.p_one, sweep.p_zero)


def _log_prior(problem: Problem, sweep: Sweep, prior: Prior):
    """:func:`log_prior` of the real rows of W and of H (once, however many devices)."""
    W, H = sweep.W, sweep.H
    if problem.real_row is not None:
        W = jnp.where(problem.real_row[:, None], W, 1.0)  # log 1 = 0: padding adds nothing
    if problem.axis_name is None:
        return log_prior(W, H, prior)
    no_columns, no_rows = jnp.ones((H.shape[0], 0), H.dtype), jnp.ones((0, W.shape[1]), W.dtype)
    w_part = _total_over_devices(problem, log_prior(W, no_columns, prior))
    return w_part + log_prior(no_rows, H, prior)


def objective(problem: Problem, sweep: Sweep, prior: Prior) -> jax.Array:
    """Negative log-posterior (unnormalized) of the observed entries: what MM minimizes."""
    log_lik = _total_over_devices(problem, _log_likelihood(problem, sweep))
    return -(log_lik + _log_prior(problem, sweep, prior))


ROWS = "rows"
"""Name of the mesh axis that the rows of Y, the mask and W are sharded over."""


def padded_rows(M: int, block_rows: int | None, n_devices: int) -> int:
    """M rounded up so that each of ``n_devices`` gets a whole number of row blocks."""
    per_device = -(-M // n_devices)
    if block_rows is not None:
        per_device = -(-per_device // block_rows) * block_rows
    return per_device * n_devices


def make_problem(data: Observed, dtype, *, block_rows: int | None = None, devices=None) -> Problem:
    """The :class:`Problem` of validated data, with n_obs in ``dtype``.

    Parameters
    ----------
    data : Observed
    dtype : jnp.float64 or jnp.float32
    block_rows : int, optional
        Rows per block (see :class:`Problem`); None for the unblocked sweep.
    devices : sequence of jax.Device, optional
        Shard the rows over these devices (mesh axis :data:`ROWS`); None keeps
        everything on the default device.

    Returns
    -------
    Problem
        M is padded with unobserved rows to :func:`padded_rows`.
    """
    M = data.shape[0]
    n_devices = 1 if devices is None else len(devices)
    padding = padded_rows(M, block_rows, n_devices) - M
    mask = _pad_rows(data.mask, padding)
    y_one = _pad_rows(data.ones, padding)
    arrays = {
        "y_one": y_one,
        "y_zero": mask & ~y_one,
        "mask": mask,
        "n_obs": mask.sum(axis=1).astype(dtype),
        "real_row": _pad_rows(np.ones(M, bool), padding) if padding else None,
    }
    sharding = None if devices is None else NamedSharding(_mesh(devices), PartitionSpec(ROWS))
    placed = {name: _place(a, sharding) for name, a in arrays.items() if a is not None}
    return Problem(
        **placed,
        block_rows=block_rows,
        axis_name=None if devices is None else ROWS,
    )


def _pad_rows(array: np.ndarray, padding: int, value=False) -> np.ndarray:
    """``array`` with ``padding`` rows of ``value`` appended (no copy when padding is 0)."""
    if padding == 0:
        return array
    fill = np.full((padding, *array.shape[1:]), value, array.dtype)
    return np.concatenate([array, fill])


def _mesh(devices) -> Mesh:
    return Mesh(np.asarray(devices, dtype=object), (ROWS,))


def _place(array, sharding: NamedSharding | None) -> jax.Array:
    """``array`` on the default device, or laid out by ``sharding``.

    Each process builds only the shards of its own devices, so this also works
    when the mesh spans several hosts (every process holds the same ``array``).
    """
    if sharding is None:
        return jnp.asarray(array)
    array = np.asarray(array)
    return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])


def random_init(key, M: int, N: int, K: int, dtype) -> Factors:
    """W with uniform entries normalized to rows summing to one; H uniform on (0, 1)."""
    key_w, key_h = jax.random.split(key)
    W = jax.random.uniform(key_w, (M, K), dtype, minval=jnp.finfo(dtype).eps)
    H = jax.random.uniform(key_h, (K, N), dtype, minval=jnp.finfo(dtype).eps, maxval=1)
    return Factors(W / W.sum(axis=1, keepdims=True), H)


class Solution(NamedTuple):
    W: jax.Array
    H: jax.Array
    trace: jax.Array  # (max_iter + 1,), NaN after n_iter
    n_iter: jax.Array
    rel_change: jax.Array
    sweeps: jax.Array  # MM sweeps evaluated (3 per accelerated iteration, plus one)


def solve(
    init: Factors,
    problem: Problem,
    prior: Prior,
    tol,
    *,
    max_iter: int,
    accelerate: bool = False,
) -> Solution:
    """Iterate :func:`step` from ``init`` until the relative change of the objective is < tol.

    Parameters
    ----------
    init : Factors
    problem : Problem
    prior : Prior
        Arrays of shape (K,), in the factors' dtype.
    tol : scalar
        Stop when ``|f_prev - f| / |f_prev| < tol``; 0 runs exactly ``max_iter`` sweeps.
    max_iter : int
        Iteration limit (static: it sets the trace's length).
    accelerate : bool, default False
        Iterate SQUAREM-accelerated sweeps (:mod:`bernmf.inference.accelerate`)
        instead: an iteration is then three sweeps, and the trace holds the objective
        after each accelerated iteration.

    Returns
    -------
    Solution
    """
    if accelerate:
        return _solve_accelerated(init, problem, prior, tol, max_iter=max_iter)
    end = iterate_until(
        lambda current: step(problem, current, prior),
        lambda current: objective(problem, current, prior),
        make_sweep(problem, init.W, init.H),
        tol,
        max_iter=max_iter,
    )
    return Solution(end.state.W, end.state.H, end.trace, end.n_iter, end.change, end.n_iter)


def _squared_norm(problem: Problem, factors: Factors) -> jax.Array:
    """``||W||^2 + ||H||^2`` over the real rows of W on all devices (the SQUAREM step length)."""
    W = factors.W
    if problem.real_row is not None:
        W = jnp.where(problem.real_row[:, None], W, 0.0)
    return _total_over_devices(problem, jnp.sum(W**2)) + jnp.sum(factors.H**2)


def _solve_accelerated(init: Factors, problem: Problem, prior: Prior, tol, *, max_iter: int):
    def sweep(factors: Factors):
        current = make_sweep(problem, factors.W, factors.H)
        following = step(problem, current, prior)
        return objective(problem, current, prior), Factors(following.W, following.H)

    norm2 = functools.partial(_squared_norm, problem)
    solution = squarem.solve(init, sweep, tol, max_iter=max_iter, norm2=norm2)
    sweeps = 1 + squarem.EVALUATIONS_PER_ITERATION * solution.n_iter
    return Solution(
        solution.W, solution.H, solution.trace, solution.n_iter, solution.change, sweeps
    )


def check_dtype(dtype: str) -> None:
    """Raise ValueError unless ``dtype`` is one of :data:`DTYPES`."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")


def check_flag(name: str, value) -> None:
    """Raise TypeError unless ``value`` is a bool."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be True or False, got {value!r}")


def check_restarts(restarts, init) -> None:
    """``restarts`` must be an integer >= 1, and 1 when ``init`` is given."""
    check_count("restarts", restarts)
    if restarts > 1 and init is not None:
        raise ValueError("restarts > 1 needs random initializations: do not give init")


def check_prior(prior: Prior) -> None:
    """MM's monotonicity guarantee needs alpha, beta, gamma >= 1."""
    for name, value in prior._asdict().items():
        if np.any(np.asarray(value) < 1):
            raise ValueError(
                f"engine 'mm' needs prior {name} >= 1 (its majorization requires it), "
                f"got {np.asarray(value).tolist()}; use a Bayesian engine for priors below 1"
            )


def check_init(init, M: int, N: int, K: int) -> Factors:
    """Validate user-given initial factors; return them as float64 numpy arrays."""
    if len(init) != 2:
        raise ValueError("init must be a pair (W, H)")
    W, H = (np.array(a, dtype=float) for a in init)
    if W.shape != (M, K) or H.shape != (K, N):
        raise ValueError(
            f"init must have W of shape {(M, K)} and H of shape {(K, N)}, "
            f"got {W.shape} and {H.shape}"
        )
    if not (np.isfinite(W).all() and np.isfinite(H).all()):
        raise ValueError("init W and H must be finite")
    if (W < 0).any() or not np.allclose(W.sum(axis=1), 1, atol=1e-6):
        raise ValueError("init W must be nonnegative with rows summing to 1")
    if (H < 0).any() or (H > 1).any():
        raise ValueError("init H must lie in [0, 1]")
    return Factors(W / W.sum(axis=1, keepdims=True), H)


AUTO_BLOCK_BYTES = 2**29
"""Memory that ``block_rows="auto"`` lets a sweep's (rows, N) float temporaries use (512 MiB)."""
CPU_CACHE_BYTES = 2**25
"""On a CPU, ``"auto"`` goes over blocks once the temporaries outgrow this (32 MiB).

A sweep reads and writes its (rows, N) temporaries several times; past the size of
the last-level cache each pass goes to main memory, and blocks of rows that stay in
the cache are faster: 1.4-1.5x per sweep on 2000 x 1000 and 3000 x 3000 (K = 16,
float64, one core of an AMD EPYC with 32 MiB of L3), the same speed at 1000 x 500;
with two cores, 1.2x on the same two and the same speed at 1000 x 1000.
"""
CPU_BLOCK_BYTES_PER_CORE = 2**23
"""The temporaries of one block when ``"auto"`` blocks for the cache: 8 MiB per core.

Each matrix product and elementwise pass of a block is split over the cores, so more
cores need larger blocks to stay efficient (measured best on one and two cores).
"""
LIVE_TEMPORARIES = 8
"""Float (rows, N) arrays alive at once in an unblocked sweep (predictions, ratios, products)."""


def check_block_rows(block_rows) -> None:
    """Raise unless ``block_rows`` is None, ``"auto"`` or an integer >= 1."""
    if block_rows is None or (isinstance(block_rows, str) and block_rows == "auto"):
        return
    if isinstance(block_rows, bool) or not isinstance(block_rows, int | np.integer):
        raise TypeError(f"block_rows must be None, 'auto' or an integer >= 1, got {block_rows!r}")
    if block_rows < 1:
        raise ValueError(f"block_rows must be >= 1, got {block_rows}")


def choose_block_rows(
    block_rows, M: int, N: int, n_devices: int, itemsize: int, platform="cpu", cores=1
) -> int | None:
    """The rows per block that a validated ``block_rows`` option means for this problem.

    ``"auto"`` keeps the unblocked sweep when its temporaries (``LIVE_TEMPORARIES``
    float arrays of each device's rows x N) fit in :data:`AUTO_BLOCK_BYTES` and, on a
    CPU (``platform="cpu"``), in :data:`CPU_CACHE_BYTES`. Otherwise it takes the
    largest blocks whose temporaries fit in the smaller of the budgets exceeded
    (for the cache, :data:`CPU_BLOCK_BYTES_PER_CORE` times ``cores``, the CPU cores
    this process may run on), evened out so that padding is less than one block. An
    integer larger than the rows of a device is reduced to them.
    """
    rows_per_device = -(-M // n_devices)
    if block_rows is None:
        return None
    if block_rows == "auto":
        row_bytes = LIVE_TEMPORARIES * N * itemsize
        budget = AUTO_BLOCK_BYTES
        if platform == "cpu" and rows_per_device * row_bytes > CPU_CACHE_BYTES:
            budget = min(budget, CPU_BLOCK_BYTES_PER_CORE * cores)
        fitting = budget // row_bytes
        if fitting >= rows_per_device:
            return None
        n_blocks = -(-rows_per_device // max(1, fitting))
        return -(-rows_per_device // n_blocks)
    return min(int(block_rows), rows_per_device)


def _cpu_cores() -> int:
    """The CPU cores this process may run on (all of the machine's where that is unknown)."""
    if hasattr(os, "sched_getaffinity"):  # Linux
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def check_devices(devices) -> tuple | None:
    """Return ``devices`` as a tuple of distinct JAX devices of one platform (or None).

    Raises
    ------
    TypeError
        Not a sequence, or an element that is not a ``jax.Device``.
    ValueError
        Empty, with duplicates, or mixing platforms (e.g. CPU and GPU).
    """
    if devices is None:
        return None
    if isinstance(devices, jax.Device):
        raise TypeError("devices must be a list of jax devices, got one device; use [device]")
    if isinstance(devices, str) or not isinstance(devices, list | tuple):
        raise TypeError(
            f"devices must be a list of jax devices (e.g. jax.devices()), got {devices!r}"
        )
    if not devices:
        raise ValueError("devices is empty: give at least one jax device, e.g. jax.devices()")
    not_devices = [d for d in devices if not isinstance(d, jax.Device)]
    if not_devices:
        raise TypeError(
            f"devices must be jax devices (from jax.devices()), got {not_devices[:3]!r}"
        )
    if len(set(devices)) != len(devices):
        raise ValueError(f"devices has duplicates: {list(devices)}")
    platforms = sorted({d.platform for d in devices})
    if len(platforms) > 1:
        raise ValueError(f"devices must all be of one platform, got {platforms}")
    return tuple(devices)


def _solver(devices):
    """:func:`solve`, or :func:`solve` under ``shard_map`` over the rows on ``devices``.

    Each device runs the same while loop on its rows of Y, the mask and W, with H
    replicated; the sums over rows (H step, objective) are ``lax.psum``-ed over
    the mesh axis, so every device takes the same decisions. The returned W is
    gathered onto every device.
    """
    if devices is None:
        return solve
    mesh = _mesh(devices)
    rows, replicated = PartitionSpec(ROWS), PartitionSpec()

    def solve_sharded(init, problem, prior, tol, *, max_iter, accelerate):
        solution = jax.shard_map(
            functools.partial(solve, max_iter=max_iter, accelerate=accelerate),
            mesh=mesh,
            in_specs=(Factors(rows, replicated), rows, replicated, replicated),
            out_specs=Solution(rows, *[replicated] * 5),
        )(init, problem, prior, tol)
        W = jax.lax.with_sharding_constraint(solution.W, NamedSharding(mesh, replicated))
        return solution._replace(W=W)

    return solve_sharded


OPTIONS = {
    "max_iter": 2000,
    "tol": 1e-5,
    "dtype": "float64",
    "accelerate": True,
    "restarts": 1,
    "block_rows": "auto",
    "devices": None,
}
"""The options of :func:`run`, with their defaults."""


def run(
    data: Observed,
    rank: int,
    prior: Prior,
    seed: int,
    init=None,
    *,
    max_iter: int,
    tol: float,
    dtype: str,
    accelerate: bool,
    restarts: int,
    block_rows: int | str | None,
    devices,
) -> Fit:
    """Fit by MM; see :func:`bernmf.fit` for the arguments. Returns a :class:`Fit`.

    Parameters
    ----------
    accelerate : bool, default True
        Iterate SQUAREM-accelerated sweeps: ``n_iter``, ``max_iter`` and the trace
        then count accelerated iterations (three MM sweeps each) and
        ``extras["sweeps"]`` counts the sweeps. False: plain MM sweeps.
    restarts : int, default 1
        R > 1 runs the fits from seeds ``seed, ..., seed + R - 1`` in one compiled
        call (:func:`bernmf.tune.best_of`; one device, unblocked) and returns the one
        of lowest objective.
    block_rows : int, "auto" or None, default "auto"
        None: the sweep works on whole (M, N) arrays. An int B: it goes over
        blocks of B rows, so that the memory beyond Y and the mask is O((M + N) K
        + B N); M is padded to a multiple of B with unobserved rows. ``"auto"``:
        unblocked while the temporaries fit in :data:`AUTO_BLOCK_BYTES` and, on a
        CPU, in :data:`CPU_CACHE_BYTES` (past the cache, blocks that stay in it are
        faster), else blocks that fit (:func:`choose_block_rows`). The result is
        the same up to floating-point rounding (about 1e-13 in float64).
    devices : list of jax.Device, optional
        Shard the rows of Y, the mask and W over these devices and replicate H
        (``shard_map`` over a one-axis :class:`jax.sharding.Mesh`; the H step's
        and the objective's sums over rows are ``lax.psum`` reductions). M is
        padded to a multiple of the device count with unobserved rows. Default:
        one device, no sharding. On a machine with several GPUs pass
        ``devices=jax.devices()``; across several hosts, call
        ``jax.distributed.initialize()`` first in every process (each with the
        same data) and pass ``devices=jax.devices()`` (all hosts' devices); every
        process gets the whole result.
    """
    check_stopping(max_iter, tol)
    check_dtype(dtype)
    check_flag("accelerate", accelerate)
    check_restarts(restarts, init)
    check_block_rows(block_rows)
    devices = check_devices(devices)
    if restarts > 1:
        if block_rows not in (None, "auto") or devices is not None:
            raise ValueError(
                "restarts > 1 runs on one device, unblocked: leave out block_rows and devices"
            )
        from bernmf import tune  # tune builds on this module

        seeds = range(seed, seed + restarts)
        options = {"max_iter": max_iter, "tol": tol, "dtype": dtype, "accelerate": accelerate}
        return tune.best_of(data, rank, prior, seeds, **options)
    M, N = data.shape
    given = None if init is None else check_init(init, M, N, rank)
    with jax.enable_x64(True):
        float_type = DTYPES[dtype]
        n_devices = 1 if devices is None else len(devices)
        itemsize = jnp.dtype(float_type).itemsize
        platform = jax.default_backend() if devices is None else devices[0].platform
        block = choose_block_rows(block_rows, M, N, n_devices, itemsize, platform, _cpu_cores())
        if given is None:
            start = random_init(jax.random.key(seed), M, N, rank, float_type)
        else:
            start = Factors(*(jnp.asarray(a, float_type) for a in given))
        problem = make_problem(data, float_type, block_rows=block, devices=devices)
        start = _place_factors(start, problem.mask.shape[0], devices)
        replicated = None if devices is None else NamedSharding(_mesh(devices), PartitionSpec())
        prior_arrays = Prior(*(_place(np.asarray(v, float_type), replicated) for v in prior))
        tol_array = _place(np.asarray(tol, float_type), replicated)
        args = (start, problem, prior_arrays, tol_array)
        device_ids = None if devices is None else tuple(d.id for d in devices)
        program, compile_seconds = compiled(
            ("mm.solve", block, device_ids),
            _solver(devices),
            *args,
            max_iter=int(max_iter),
            accelerate=bool(accelerate),
        )
        begin = time.perf_counter()
        solution = jax.block_until_ready(program(*args))
        run_seconds = time.perf_counter() - begin
        W, H = np.asarray(solution.W, float)[:M], np.asarray(solution.H, float)
        n_iter = int(solution.n_iter)
        return Fit(
            engine="mm",
            rank=rank,
            prior=prior,
            W=W,
            H=H,
            probs=W @ H,
            trace=np.asarray(solution.trace[: n_iter + 1], float),
            n_iter=n_iter,
            converged=bool(solution.rel_change < tol),
            timings={"compile": compile_seconds, "run": run_seconds},
            seed=seed,
            extras={
                "accelerate": bool(accelerate),
                "sweeps": int(solution.sweeps),
                "block_rows": block,
                "devices": n_devices,
            },
        )


def _place_factors(factors: Factors, rows: int, devices) -> Factors:
    """W padded to ``rows`` rows (uniform on the simplex) and placed by rows; H replicated."""
    W = np.asarray(factors.W)
    K = W.shape[1]
    W = _pad_rows(W, rows - W.shape[0], value=1 / K)
    if devices is None:
        return Factors(jnp.asarray(W), factors.H)
    mesh = _mesh(devices)
    return Factors(
        _place(W, NamedSharding(mesh, PartitionSpec(ROWS))),
        _place(np.asarray(factors.H), NamedSharding(mesh, PartitionSpec())),
    )


ENGINE = register(
    Engine(name="mm", run=run, options=OPTIONS, default_prior=Prior(), check_prior=check_prior)
)
