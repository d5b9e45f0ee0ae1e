"""How the MM engine lays out the data: the layout chosen, built and placed on devices.

The layouts and their statistics are :mod:`bernmf.inference.mm.layout_kinds` (re-exported
here: :data:`Problem` :class:`Dense`, :class:`SparseOnes`, :class:`RowBlocks`,
:class:`SparseRowBlocks`, and
:func:`state_at`, :func:`h_sums`, :func:`w_statistic`, :func:`log_likelihood`,
:func:`row_total`). :func:`choose` picks the layout from the data's size, density and
platform (row blocks when the temporaries outgrow the cache or a memory limit; device
shards when ``devices`` are given), :func:`make_data` builds it.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from bernmf.data.observed import Observed
from bernmf.inference.mm.layout_kinds import (
    BlockTotals,
    Dense,
    Evaluated,
    OnesBlockTotals,
    OnesPredictions,
    Predictions,
    Problem,
    RowBlocks,
    SparseOnes,
    SparseRowBlocks,
    h_sums,
    log_likelihood,
    predict,
    row_total,
    state_at,
    w_statistic,
)

__all__ = [
    "AUTO_BLOCK_BYTES", "CPU_BLOCK_BYTES_PER_CORE", "CPU_CACHE_BYTES", "DENSE", "LAYOUTS",
    "LIVE_TEMPORARIES", "ROWS", "SPARSE_DENSITY", "BlockTotals", "Choice", "Dense", "Evaluated",
    "OnesBlockTotals", "OnesPredictions", "Predictions", "Problem", "RowBlocks", "SparseOnes",
    "SparseRowBlocks", "check_block_rows",
    "check_devices", "check_layout", "choose", "choose_block_rows", "cpu_cores", "h_sums",
    "log_likelihood", "make_data", "mesh", "pad_rows", "padded_rows", "place", "predict",
    "problem_of", "replicated", "row_arrays", "row_total", "rows_sharding", "state_at",
    "w_statistic",
]  # fmt: skip

ROWS = "rows"
"""Name of the mesh axis that the rows of Y, the mask and W are sharded over."""

LAYOUTS = ("auto", "dense", "sparse")
"""Values of the ``layout`` option: how the observed ones are handled."""


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


def check_layout(layout, devices) -> None:
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
    sparse = layout == "auto" and devices is None and sparse_ones(data)
    return Choice(block, sparse, devices)


def sparse_ones(data: Observed) -> bool:
    """Whether ``layout="auto"`` on one device gathers the ones of ``data`` (sparse): at most
    :data:`SPARSE_DENSITY` of its observed entries are ones."""
    return bool(data.ones.sum() <= SPARSE_DENSITY * data.mask.sum())


# ------------------------------------------------------------------------ building


def padded_rows(M: int, block_rows: int | None, n_devices: int) -> int:
    """M rounded up so that each of ``n_devices`` gets a whole number of row blocks."""
    per_device = -(-M // n_devices)
    if block_rows is not None:
        per_device = -(-per_device // block_rows) * block_rows
    return per_device * n_devices


DENSE = Choice(None, False, None)
"""Whole rows, dense, on the default device."""


def make_data(data: Observed, dtype, choice: Choice = DENSE) -> Problem:
    """The :data:`Problem` of validated data in the chosen layout, with n_obs in ``dtype``.

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
        ones = {"one_rows": rows.astype(np.int32), "one_cols": cols.astype(np.int32)}
        ones["by_col"] = np.argsort(cols, kind="stable").astype(np.int32)
        kept = {"y_zero": arrays["y_zero"], "n_obs": arrays["n_obs"], **ones}
        placed = {name: place(a, None) for name, a in kept.items()}
        if choice.block_rows is None:
            return SparseOnes(**placed)
        real_row = arrays["real_row"]
        real_row = None if real_row is None else place(real_row, None)
        return SparseRowBlocks(**placed, block_rows=choice.block_rows, real_row=real_row)
    sharding = None if choice.devices is None else rows_sharding(choice.devices)
    placed = {name: place(a, sharding) for name, a in arrays.items() if a is not None}
    axis_name = None if choice.devices is None else ROWS
    return problem_of(placed, choice.block_rows, axis_name)


def problem_of(arrays: dict, block_rows: int | None, axis_name: str | None) -> Dense | RowBlocks:
    """:class:`RowBlocks` of :func:`row_arrays` (placed) with ``block_rows``, else
    :class:`Dense`."""
    if block_rows is None:
        return Dense(**arrays, axis_name=axis_name)
    return RowBlocks(**arrays, block_rows=block_rows, axis_name=axis_name)


def row_arrays(data: Observed, dtype, padding: int) -> dict[str, np.ndarray]:
    """The dense row arrays of :class:`Dense` (numpy), with ``padding`` unobserved rows appended.

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
