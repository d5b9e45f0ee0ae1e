"""How the MM engine lays out the data and computes its likelihood statistics.

Every MM sweep needs three statistics of the observed entries at factors (W, H),
with ``Y1 = O * Y`` and ``Y0 = O * (1 - Y)``:

* the H step's sums ``W.T @ (Y1 / WH)`` and ``W.T @ (Y0 / W(1-H))``, each (K, N);
* the W step's ``S = W * ((Y1 / WH) @ H.T + (Y0 / W(1-H)) @ (1 - H).T)``, (M, K);
* the log-likelihood ``sum(Y1 log WH + Y0 log W(1-H))``.

They can be computed four ways, and :class:`Data` records which (its static fields):

* **dense**: on whole (M, N) arrays;
* **sparse ones**: ``Y1 / WH`` only at the observed ones (a gather and a segment sum),
  few in most binary tables; only ``W(1-H)`` is dense;
* **row blocks** (``block_rows``): over blocks of B rows (``lax.scan``, ``lax.map``), so
  the temporaries are (B, N);
* **device shards** (``axis_name``): the rows split over devices under
  ``shard_map``, the sums over rows ``psum``-ed (with dense or blocked rows).

:func:`choose` picks the layout from the data's size, density and platform, :func:`make_data`
builds it. The MM updates (:mod:`bernmf.inference.mm`) use only :func:`state_at`, :func:`h_sums`,
:func:`w_statistic`, :func:`log_likelihood` and :func:`row_total`: one code for every layout.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from bernmf.data import Observed
from bernmf.models.spec import masked_log_likelihood_sum

ROWS = "rows"
"""Name of the mesh axis that the rows of Y, the mask and W are sharded over."""

LAYOUTS = ("auto", "dense", "sparse")
"""Values of the ``layout`` option: how the observed ones are handled."""


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["y_zero", "n_obs", "y_one", "mask", "real_row", "one_rows", "one_cols", "by_col"],
    meta_fields=["block_rows", "axis_name"],
)
@dataclasses.dataclass(frozen=True)
class Data:
    """The observed data as the MM updates use them, in one layout.

    Attributes
    ----------
    y_zero : bool array of shape (M, N)
        ``O * (1 - Y)``.
    n_obs : array of shape (M,)
        ``O.sum(1)`` in the factors' float dtype.
    y_one, mask : bool arrays of shape (M, N), or None
        ``O * Y`` and ``O`` (dense and blocked layouts; None with sparse ones).
    real_row : bool array of shape (M,) or None
        False for the rows added to pad M to a multiple of the block size or of
        the device count (they have no observed entry); None without padding.
    one_rows, one_cols, by_col : int32 arrays of shape (L,), or None
        Sparse ones: the row and column of each observed one (row-major order)
        and the permutation that sorts them by column; None otherwise.
    block_rows : int or None
        Static. An int B: the statistics go over blocks of B rows (M per device
        is a multiple of B).
    axis_name : str or None
        Static. Inside ``shard_map`` over the rows, the mesh axis to ``psum`` row
        sums over; None on one device.
    """

    y_zero: jax.Array
    n_obs: jax.Array
    y_one: jax.Array | None = None
    mask: jax.Array | None = None
    real_row: jax.Array | None = None
    one_rows: jax.Array | None = None
    one_cols: jax.Array | None = None
    by_col: jax.Array | None = None
    block_rows: int | None = None
    axis_name: str | None = None

    @property
    def sparse(self) -> bool:
        """Whether the observed ones are handled sparsely."""
        return self.one_rows is not None


class State(NamedTuple):
    """Factors with what the objective and the next H step need of them, computed once.

    ``p_one`` is ``W @ H`` ((M, N); with sparse ones only at the ones, (L,)) and
    ``p_zero`` is ``W @ (1 - H)``, (M, N). With row blocks these would be (M, N), so
    they are None and one pass over the blocks gives instead the log-likelihood of
    this device's rows (``log_lik``) and the H step's sums over all rows (``sums``).
    """

    W: jax.Array
    H: jax.Array
    p_one: jax.Array | None = None
    p_zero: jax.Array | None = None
    log_lik: jax.Array | None = None
    sums: tuple[jax.Array, jax.Array] | None = None


def predict(W, H) -> tuple[jax.Array, jax.Array]:
    """Return ``(W @ H, W @ (1 - H))``: P(Y=1) and P(Y=0), each of shape (M, N)."""
    return W @ H, W @ (1 - H)


def _ones_at(data: Data, W, H):
    """``W @ H`` at the observed ones (L,), and the rows of W and columns of H there."""
    W_at, H_at = W[data.one_rows], H.T[data.one_cols]
    return jnp.sum(W_at * H_at, axis=1), W_at, H_at


def state_at(data: Data, W, H) -> State:
    """The :class:`State` at ``(W, H)``: its predictions, or one pass over the row blocks."""
    if data.block_rows is not None:
        p_one = _ones_at(data, W, H)[0] if data.sparse else None
        return State(W, H, p_one, *_blocked_pass(data, W, H, p_one)[1:])
    if data.sparse:
        return State(W, H, _ones_at(data, W, H)[0], W @ (1 - H))
    return State(W, H, *predict(W, H))


def _inverse(indicator, p):
    """``indicator / p`` (0 where the indicator is False), with p kept above 0."""
    return jnp.where(indicator, 1 / jnp.maximum(p, jnp.finfo(p.dtype).tiny), 0.0)


def _rows_sums(y_one, y_zero, W_rows, p_one, p_zero):
    """``(W.T @ (Y1 / WH), W.T @ (Y0 / W(1-H)))`` over the given dense rows, each (K, N)."""
    return W_rows.T @ _inverse(y_one, p_one), W_rows.T @ _inverse(y_zero, p_zero)


def _blocks(data: Data, *row_arrays):
    """Each (M, ...) array as (M / B, B, ...): the leading axis is scanned over."""
    B = data.block_rows
    return tuple(a.reshape(a.shape[0] // B, B, *a.shape[1:]) for a in row_arrays)


def row_total(data: Data, value):
    """Add up per-device sums over rows (a no-op on one device)."""
    if data.axis_name is None:
        return value
    return jax.lax.psum(value, data.axis_name)


def _blocked_pass(data: Data, W, H, p_one=None):
    """One pass over the row blocks at ``(W, H)``: ``(None, None, log_lik, sums)`` of
    :class:`State`. With sparse ones (``p_one`` at them) the blocks hold only the
    zeros' terms; the ones' are added from their gathers."""

    def add_block(totals, block):
        y_one, y_zero, mask, W_block = block
        p_one, p_zero = predict(W_block, H)
        one, zero = _rows_sums(y_one, y_zero, W_block, p_one, p_zero)
        log_lik = masked_log_likelihood_sum(y_one, mask, p_one, p_zero)
        return (totals[0] + log_lik, totals[1] + one, totals[2] + zero), None

    def add_zeros(totals, block):
        y_zero, W_block = block
        p_zero = W_block @ (1 - H)
        zero = W_block.T @ _inverse(y_zero, p_zero)
        log_lik = masked_log_likelihood_sum(y_zero, y_zero, p_zero, p_zero)
        return (totals[0] + log_lik, totals[1], totals[2] + zero), None

    zeros = (jnp.zeros((), H.dtype), jnp.zeros_like(H), jnp.zeros_like(H))
    if data.axis_name is not None:  # the sums differ between devices until the psum
        zeros = jax.lax.pcast(zeros, data.axis_name, to="varying")
    if data.sparse:
        (log_lik, one, zero), _ = jax.lax.scan(add_zeros, zeros, _blocks(data, data.y_zero, W))
        log_lik = log_lik + _log_ones(p_one)
        one = _ones_h_sum(data, W, p_one, H.shape[1])
    else:
        blocks = _blocks(data, data.y_one, data.y_zero, data.mask, W)
        (log_lik, one, zero), _ = jax.lax.scan(add_block, zeros, blocks)
    return (None, None, log_lik, row_total(data, (one, zero)))


def _ones_h_sum(data: Data, W, p_one, N: int):
    """``W.T @ (Y1 / WH)`` (K, N) from the sparse ones, ``p_one`` = WH at them."""
    values = (W[data.one_rows] * _inverse(True, p_one)[:, None])[data.by_col]
    columns = data.one_cols[data.by_col]
    return jax.ops.segment_sum(values, columns, num_segments=N, indices_are_sorted=True).T


def _log_ones(p_one):
    """``sum(log WH)`` at the sparse ones (``p_one``), kept above 0."""
    return jnp.sum(jnp.log(jnp.maximum(p_one, jnp.finfo(p_one.dtype).tiny)))


def h_sums(data: Data, state: State):
    """``(W.T @ (Y1 / WH), W.T @ (Y0 / W(1-H)))``, each (K, N), summed over all rows."""
    if data.block_rows is not None:
        return state.sums
    if data.sparse:
        one = _ones_h_sum(data, state.W, state.p_one, state.H.shape[1])
        return one, state.W.T @ _inverse(data.y_zero, state.p_zero)
    sums = _rows_sums(data.y_one, data.y_zero, state.W, state.p_one, state.p_zero)
    return row_total(data, sums)


def w_statistic(data: Data, state: State):
    """``S = W * ((Y1 / WH) @ H.T + (Y0 / W(1-H)) @ (1 - H).T)``, shape (M, K)."""
    W, H = state.W, state.H

    def rows_S(y_one, y_zero, W_rows, p_one, p_zero):
        from_ones = _inverse(y_one, p_one) @ H.T
        return W_rows * (from_ones + _inverse(y_zero, p_zero) @ (1 - H).T)

    if data.sparse:
        H_at = H.T[data.one_cols]
        values = H_at * _inverse(True, state.p_one)[:, None]
        M = W.shape[0]
        from_ones = jax.ops.segment_sum(
            values, data.one_rows, num_segments=M, indices_are_sorted=True
        )
        if data.block_rows is None:
            return W * (from_ones + _inverse(data.y_zero, state.p_zero) @ (1 - H).T)

        def block_zeros(block):  # the zeros' part of S / W over a block of rows
            y_zero, W_block = block
            return _inverse(y_zero, W_block @ (1 - H)) @ (1 - H).T

        from_zeros = jax.lax.map(block_zeros, _blocks(data, data.y_zero, W))
        return W * (from_ones + from_zeros.reshape(W.shape))
    if data.block_rows is None:
        return rows_S(data.y_one, data.y_zero, W, state.p_one, state.p_zero)

    def block_S(block):
        y_one, y_zero, W_block = block
        return rows_S(y_one, y_zero, W_block, *predict(W_block, H))

    S = jax.lax.map(block_S, _blocks(data, data.y_one, data.y_zero, W))
    return S.reshape(W.shape)


def log_likelihood(data: Data, state: State):
    """Log-likelihood of the observed entries of this device's rows."""
    if data.block_rows is not None:
        return state.log_lik
    if data.sparse:
        # over the observed zeros: both probabilities given are P(Y=0)
        zeros = masked_log_likelihood_sum(data.y_zero, data.y_zero, state.p_zero, state.p_zero)
        return zeros + _log_ones(state.p_one)
    return masked_log_likelihood_sum(data.y_one, data.mask, state.p_one, state.p_zero)


# ------------------------------------------------------------------------ choosing


AUTO_BLOCK_BYTES = 2**29
"""Memory that ``block_rows="auto"`` lets a sweep's (rows, N) float temporaries use (512 MiB)."""
CPU_CACHE_BYTES = 2**25
"""On a CPU, ``"auto"`` goes over blocks once the temporaries outgrow this (32 MiB):
past the last-level cache, blocks of rows that stay in it are faster (measured in
``benchmarks/scaling.py``; see the README)."""
CPU_BLOCK_BYTES_PER_CORE = 2**23
"""The temporaries of one block when ``"auto"`` blocks for the cache: 8 MiB per core
(each product and elementwise pass of a block is split over the cores)."""
LIVE_TEMPORARIES = 8
"""Float (rows, N) arrays alive at once in an unblocked sweep (predictions, ratios, products)."""
SPARSE_DENSITY = 0.045
"""``layout="auto"`` handles the ones sparsely when at most this fraction of the observed
entries are ones (on one device): below it sparse ones are the faster sweep on a CPU
core, above it dense (``benchmarks/layout.py``, whole rows; figures in the README)."""


def check_block_rows(block_rows) -> None:
    """Raise unless ``block_rows`` is None, ``"auto"`` or an integer >= 1."""
    if block_rows is None or (isinstance(block_rows, str) and block_rows == "auto"):
        return
    if isinstance(block_rows, bool) or not isinstance(block_rows, int | np.integer):
        raise TypeError(f"block_rows must be None, 'auto' or an integer >= 1, got {block_rows!r}")
    if block_rows < 1:
        raise ValueError(f"block_rows must be >= 1, got {block_rows}")


def check_layout(layout, block_rows, devices) -> None:
    """Raise unless ``layout`` is one of :data:`LAYOUTS`, and sparse ones are on one device."""
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if layout == "sparse" and devices is not None:
        raise ValueError("layout='sparse' runs on one device: leave out devices")


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


def cpu_cores() -> int:
    """The CPU cores this process may run on (all of the machine's where that is unknown)."""
    if hasattr(os, "sched_getaffinity"):  # Linux
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class Choice(NamedTuple):
    """A resolved layout: rows per block (None: whole rows), sparse ones, devices."""

    block_rows: int | None
    sparse: bool
    devices: tuple | None


def choose(data: Observed, layout: str, block_rows, devices, itemsize: int) -> Choice:
    """Resolve validated ``layout``, ``block_rows`` and ``devices`` options for ``data``.

    Row blocks follow :func:`choose_block_rows` on the platform of ``devices`` (or
    JAX's default). ``layout="auto"`` takes sparse ones on one device (whole rows or
    row blocks) when at most :data:`SPARSE_DENSITY` of the observed entries are ones.
    """
    M, N = data.shape
    n_devices = 1 if devices is None else len(devices)
    platform = jax.default_backend() if devices is None else devices[0].platform
    block = choose_block_rows(block_rows, M, N, n_devices, itemsize, platform, cpu_cores())
    if layout == "sparse":
        return Choice(block, True, None)
    sparse = False
    if layout == "auto" and devices is None:
        sparse = bool(data.ones.sum() <= SPARSE_DENSITY * data.mask.sum())
    return Choice(block, sparse, devices)


# ------------------------------------------------------------------------ building


def padded_rows(M: int, block_rows: int | None, n_devices: int) -> int:
    """M rounded up so that each of ``n_devices`` gets a whole number of row blocks."""
    per_device = -(-M // n_devices)
    if block_rows is not None:
        per_device = -(-per_device // block_rows) * block_rows
    return per_device * n_devices


DENSE = Choice(None, False, None)
"""Whole rows, dense, on the default device."""


def make_data(data: Observed, dtype, choice: Choice = DENSE) -> Data:
    """The :class:`Data` of validated data in the chosen layout, with n_obs in ``dtype``.

    M is padded with unobserved rows to :func:`padded_rows`; with devices, the
    row arrays are sharded over them (mesh axis :data:`ROWS`).
    """
    M = data.shape[0]
    n_devices = 1 if choice.devices is None else len(choice.devices)
    padding = padded_rows(M, choice.block_rows, n_devices) - M
    arrays = row_arrays(data, dtype, padding)
    if not padding:
        arrays["real_row"] = None
    if choice.sparse:
        rows, cols = np.nonzero(arrays["y_one"])
        arrays |= {"y_one": None, "mask": None}
        arrays |= {"one_rows": rows.astype(np.int32), "one_cols": cols.astype(np.int32)}
        arrays["by_col"] = np.argsort(cols, kind="stable").astype(np.int32)
    sharding = None if choice.devices is None else rows_sharding(choice.devices)
    placed = {name: place(a, sharding) for name, a in arrays.items() if a is not None}
    axis_name = None if choice.devices is None else ROWS
    return Data(**placed, block_rows=choice.block_rows, axis_name=axis_name)


def row_arrays(data: Observed, dtype, padding: int) -> dict[str, np.ndarray]:
    """The dense row arrays of :class:`Data` (numpy), with ``padding`` unobserved rows appended.

    ``y_one``, ``y_zero``, ``mask`` (M + padding, N) bool, ``n_obs`` (M + padding,) in
    ``dtype`` and ``real_row`` (M + padding,) bool, False on the padding.
    """
    mask = pad_rows(data.mask, padding)
    y_one = pad_rows(data.ones, padding)
    return {
        "y_one": y_one,
        "y_zero": mask & ~y_one,
        "mask": mask,
        "n_obs": mask.sum(axis=1).astype(dtype),
        "real_row": pad_rows(np.ones(data.shape[0], bool), padding),
    }


def pad_rows(array: np.ndarray, padding: int, value=False) -> np.ndarray:
    """``array`` with ``padding`` rows of ``value`` appended (no copy when padding is 0)."""
    if padding == 0:
        return array
    fill = np.full((padding, *array.shape[1:]), value, array.dtype)
    return np.concatenate([array, fill])


def mesh(devices) -> Mesh:
    """A one-axis mesh (:data:`ROWS`) over ``devices``."""
    return Mesh(np.asarray(devices, dtype=object), (ROWS,))


def rows_sharding(devices) -> NamedSharding:
    """Rows split over ``devices``."""
    return NamedSharding(mesh(devices), PartitionSpec(ROWS))


def replicated(devices) -> NamedSharding | None:
    """The same array on every one of ``devices`` (None: the default device)."""
    return None if devices is None else NamedSharding(mesh(devices), PartitionSpec())


def place(array, sharding: NamedSharding | None) -> jax.Array:
    """``array`` on the default device, or laid out by ``sharding``.

    Each process builds only the shards of its own devices, so this also works
    when the mesh spans several hosts (every process holds the same ``array``).
    """
    if sharding is None:
        return jnp.asarray(array)
    array = np.asarray(array)
    return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])
