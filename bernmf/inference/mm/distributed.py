"""Engines ``mm`` and ``em`` across processes, each holding only its own rows of Y.

After ``jax.distributed.initialize(...)``, every process calls :func:`run` with its
block of rows (blocks in ``jax.process_index()`` order, of any sizes). Each block is
padded with unobserved rows to the largest one (and to whole row blocks of its local
devices), the padded blocks become global arrays over a mesh of all processes'
devices (:func:`jax.make_array_from_process_local_data`), and the sharded solver of
:mod:`bernmf.inference.mm` runs on them: the sums over rows are ``psum``-ed across
processes, so H, the objective trace, ``n_iter`` and ``converged`` are the same in
every process, while each process reads back only its own rows of W.

The random start is that of a single-process fit of the stacked rows
(:func:`bernmf.inference.mm.random_init` of all M rows, of which each process keeps
its own), so the result equals that fit to rounding. That start costs O(M K) memory
in each process while it is drawn; everything else per row is the process's own.
"""

from __future__ import annotations

import hashlib
import time

import jax
import numpy as np
from jax.experimental import multihost_utils

from bernmf.data.arguments import check_init, check_rank_fits
from bernmf.data.observed import Observed
from bernmf.inference import mm
from bernmf.inference._compile import compiled
from bernmf.inference._loop import Solution
from bernmf.inference.mm import layout as layouts
from bernmf.inference.mm.sharding import padded, solver
from bernmf.models.spec import Factors, Prior
from bernmf.results.fit import Fit


def process_devices() -> tuple:
    """Every process's devices, by process index then id: process p holds the p-th rows."""
    return tuple(sorted(jax.devices(), key=lambda d: (d.process_index, d.id)))


def digest(*values) -> list[int]:
    """Four int64 words of the sha256 of ``repr(values)``: compared across processes."""
    words = hashlib.sha256(repr(values).encode()).digest()[:32]
    return np.frombuffer(words, np.int64).tolist()


def agree(failure: Exception | None, values: list[int]) -> np.ndarray:
    """Gather each process's small integer ``values`` after its own checks: (P, len) array.

    Every process calls it once, whether its checks passed (``failure`` None) or not,
    so that no process is left waiting in a later collective: the failing processes
    raise their own error, the others a ValueError naming the processes that failed.
    """
    row = np.asarray([failure is not None, *values], np.int64)
    with jax.enable_x64(True):
        table = np.asarray(multihost_utils.process_allgather(row)).reshape(-1, len(row))
    if failure is not None:
        raise failure
    failed = np.flatnonzero(table[:, 0]).tolist()
    if failed:
        raise ValueError(f"processes {failed} failed their checks (see their errors)")
    return table[:, 1:]


def check_same(table: np.ndarray, names: list[str]) -> None:
    """Raise ValueError naming the first column of ``table`` that differs between processes."""
    for j, name in enumerate(names):
        if (table[:, j] != table[0, j]).any():
            raise ValueError(
                f"every process must call with the same {name}; got {table[:, j].tolist()} "
                "(by process index)"
            )


def _global(array: np.ndarray, sharding, rows: int) -> jax.Array:
    """Process-local rows as one global array of ``rows`` rows (this process's block)."""
    return jax.make_array_from_process_local_data(sharding, array, (rows, *array.shape[1:]))


def _local_rows(array: jax.Array) -> np.ndarray:
    """This process's rows of a row-sharded global array, in order."""
    shards = sorted(array.addressable_shards, key=lambda s: s.index[0].start or 0)
    return np.concatenate([np.asarray(s.data) for s in shards])


def _local(array: jax.Array) -> np.ndarray:
    """A replicated global array as numpy (its copy on this process's first device)."""
    return np.asarray(array.addressable_data(0))


def _random_start(seed: int, M: int, N: int, K: int, dtype, first: int, count: int) -> Factors:
    """Rows ``first:first + count`` of W and all of H of the single-process random start."""
    with jax.default_device(jax.local_devices()[0]):  # this process's own computation
        W, H = jax.jit(mm.random_init, static_argnums=(1, 2, 3, 4))(
            jax.random.key(seed), M, N, K, dtype
        )
    return Factors(np.asarray(W[first : first + count]), np.asarray(H))


def _solve_global(init, prior, data, tol, *, devices, **options):
    return solver(devices, gather=False)(init, data, prior, tol, **options)


def gather_rows(part: np.ndarray) -> np.ndarray:
    """Every process's ``part`` (n_p, ...), concatenated in process order: (sum n_p, ...).

    The parts may differ in their first dimension only; each process gets the whole.
    """
    part = np.asarray(part)
    counts = agree(None, [part.shape[0]])[:, 0]
    padded = np.zeros((int(counts.max()), *part.shape[1:]), part.dtype)
    padded[: part.shape[0]] = part
    with jax.enable_x64(True):
        table = np.asarray(multihost_utils.process_allgather(padded))
    return np.concatenate([rows[:count] for rows, count in zip(table, counts, strict=True)])


def run(
    data: Observed,
    rank: int,
    prior: Prior,
    seeds,
    init,
    options: dict,
    *,
    failure: Exception | None = None,
    key=(),
) -> list[Fit]:
    """MM on this process's rows, the sums over rows taken across all processes.

    Parameters
    ----------
    data : Observed
        This process's rows, (M_p, N); N the same in every process.
    rank, prior, init
        As :func:`bernmf.inference.mm.run`; ``init`` is this process's rows of W,
        (M_p, K), and H, (K, N), the same H in every process.
    seeds : sequence of int
        One fit from each (one program, run once per seed); with ``init``, one seed.
    options : dict
        Every option of :func:`bernmf.inference.mm.run` (checked; empty with a
        ``failure``); ``layout`` dense (``"auto"`` or ``"dense"``) and ``devices``
        None: the rows go over :func:`process_devices`.
    failure : Exception, optional
        An error of this process's own checks, raised (in every process) once the
        processes have compared their arguments (:func:`agree`).
    key : tuple
        Everything else every process must agree on (engine, options), compared by digest.

    Returns
    -------
    list of Fit
        One per seed: W and ``probs`` of this process's rows, (M_p, K) and (M_p,
        N); H, the trace, ``n_iter`` and ``converged`` global (the same in every
        process). ``extras`` adds ``processes`` and ``first_row`` (this block's
        first global row).

    Raises
    ------
    ValueError
        In every process: a process's ``failure``, arguments that differ between
        processes, or a rank above max(M, N) of all rows.
    """
    if failure is None and (options["devices"] is not None or options["layout"] == "sparse"):
        failure = ValueError(
            "distributed fits shard the rows over every process's devices, densely: "
            "leave out devices and layout='sparse'"
        )
    M, N = data.shape if failure is None else (0, 0)
    given = None
    if failure is None and init is not None:
        try:
            given = check_init(init, M, N, rank)
        except (TypeError, ValueError) as error:
            failure = error
    local_devices = jax.local_devices()
    agreed = [0] * 9  # what a process that failed its checks sends
    if failure is None:
        origin = "random" if given is None else digest(given[1].tobytes())
        agreed = [N, rank, len(local_devices), layouts.cpu_cores(), M]
        agreed += digest(key, list(seeds), origin, [np.asarray(v).tolist() for v in prior])
    table = agree(failure, agreed)
    check_same(table[:, :3], ["N (columns)", "rank", "local device count"])
    check_same(table[:, 5:], ["engine, options, prior, seeds and init H"])
    sizes = table[:, 4]
    check_rank_fits(rank, (int(sizes.sum()), N))  # the same decision in every process
    dtype, max_iter, tol = options["dtype"], options["max_iter"], options["tol"]
    accelerate = options["accelerate"]
    float_type, mixed = mm.precision(dtype, accelerate)
    itemsize = np.dtype(float_type).itemsize
    block = layouts.choose_block_rows(
        options["block_rows"], int(sizes.max()), N, len(local_devices), itemsize,
        local_devices[0].platform, int(table[:, 3].min()),
    )  # fmt: skip
    per_process = layouts.padded_rows(int(sizes.max()), block, len(local_devices))
    padding = per_process - M
    first = int(sizes[: jax.process_index()].sum())
    devices = process_devices()
    total_rows = per_process * len(sizes)
    rows, replicated = layouts.rows_sharding(devices), layouts.replicated(devices)
    with jax.enable_x64(True):
        arrays = layouts.row_arrays(data, float_type, padding)
        problem = layouts.problem_of(
            {name: _global(a, rows, total_rows) for name, a in arrays.items()},
            block,
            layouts.ROWS,
        )
        prior_arrays = Prior(*(layouts.place(np.asarray(v, float_type), replicated) for v in prior))
        tol_array = layouts.place(np.asarray(tol, float_type), replicated)
        static = {"max_iter": int(max_iter), "accelerate": bool(accelerate), "mixed": mixed}
        static["devices"] = devices
        extras = {"layout": "dense", "block_rows": block, "devices": len(devices)}
        extras |= {"processes": len(sizes), "first_row": first}
        fits = []
        for seed in seeds:
            if given is None:
                start = _random_start(seed, int(sizes.sum()), N, rank, float_type, first, M)
            else:
                start = Factors(*(a.astype(float_type) for a in given))
            W = np.asarray(padded(start, per_process).W)
            init_global = Factors(_global(W, rows, total_rows), layouts.place(start.H, replicated))
            args = (init_global, prior_arrays, problem, tol_array)
            program, compile_seconds = compiled(
                ("distributed", block), _solve_global, *args, **static
            )
            begin = time.perf_counter()
            solution = jax.block_until_ready(program(*args))
            run_seconds = time.perf_counter() - begin
            state = jax.tree.map(_local, solution.state._replace(W=None))
            state = state._replace(W=_local_rows(solution.state.W)[:M])
            local = Solution(state, *(_local(x) for x in solution[1:]))
            stacked = jax.tree.map(lambda x: np.asarray(x)[None], local)
            batch = mm.Batch.of(stacked, M, tol, accelerate, compile_seconds, run_seconds, extras)
            fits.append(batch.fit(0, prior, int(seed)))
    return fits
