"""Engine ``mm``'s entry points: option checks, one fit (:func:`run`), many fits in one
compiled call (:func:`run_many`, :func:`run_members`) and the engine's registration.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import jax
import numpy as np

from bernmf.data.arguments import (
    DTYPES,
    check_count,
    check_flag,
    check_init,
    check_seed,
    check_stopping,
)
from bernmf.data.observed import Observed
from bernmf.inference._compile import compiled
from bernmf.inference.mm import _batch, starts
from bernmf.inference.mm import layout as layouts
from bernmf.inference.mm.batch import Batch
from bernmf.inference.mm.layout import Problem
from bernmf.inference.mm.sharding import solve_from, solve_from_draws, solve_from_seed
from bernmf.inference.registry import Engine, register
from bernmf.models.spec import Factors, Prior
from bernmf.results.fit import Fit


def check_prior(prior: Prior) -> None:
    """MM's monotonicity guarantee needs alpha, beta, gamma >= 1."""
    for name, value in prior._asdict().items():
        if np.any(np.asarray(value) < 1):
            raise ValueError(
                f"engine 'mm' needs prior {name} >= 1 (its majorization requires it), "
                f"got {np.asarray(value).tolist()}; use a Bayesian engine for priors below 1"
            )


PRECISIONS = ("auto", *DTYPES)
"""Values of the ``dtype`` option: ``"auto"`` is float32 sweeps polished in float64."""


def check_options(options: dict) -> None:
    """Raise TypeError or ValueError for an option of :func:`run` outside its range."""
    check_stopping(options["max_iter"], options["tol"])
    if not isinstance(options["dtype"], str) or options["dtype"] not in PRECISIONS:
        raise ValueError(f"dtype must be one of {PRECISIONS}, got {options['dtype']!r}")
    check_flag("accelerate", options["accelerate"])
    layouts.check_block_rows(options["block_rows"])
    devices = layouts.check_devices(options["devices"])
    layouts.check_layout(options["layout"], devices)


def precision(dtype: str, accelerate: bool) -> tuple[type, bool]:
    """The float type of the factors and whether the fit is mixed, for a checked ``dtype``.

    ``"auto"`` keeps float64 factors and, with ``accelerate``, iterates in float32
    first (``mixed``: :func:`bernmf.inference.mm.kernel.polish`); plain sweeps, MM's
    reference iteration, stay in float64.
    """
    if dtype == "auto":
        return np.float64, bool(accelerate)
    return DTYPES[dtype], False


def _prepare(data: Observed, *, max_iter, tol, dtype, accelerate, layout, block_rows, devices):
    """The float type, layout choice and :data:`~bernmf.inference.mm.layout.Problem` of a fit
    with checked options."""
    devices = layouts.check_devices(devices)
    float_type = precision(dtype, accelerate)[0]
    itemsize = np.dtype(float_type).itemsize
    choice = layouts.choose(data, layout, block_rows, devices, itemsize)
    return float_type, choice, layouts.make_data(data, float_type, choice)


def _bytes_per_fit(problem: Problem, rank: int, float_type, max_iter: int) -> int:
    """Bytes of one fit's outputs: W and H, and the trace (in float64)."""
    M, N = problem.y_zero.shape
    return (M * rank + rank * N) * np.dtype(float_type).itemsize + 8 * (max_iter + 2)


def _static(choice: layouts.Choice, max_iter, accelerate, dtype) -> dict:
    static = {"max_iter": int(max_iter), "accelerate": bool(accelerate)}
    return static | {"mixed": precision(dtype, accelerate)[1], "devices": choice.devices}


def _extras(choice: layouts.Choice) -> dict:
    n_devices = 1 if choice.devices is None else len(choice.devices)
    sparse = "sparse" if choice.sparse else "dense"
    return {"layout": sparse, "block_rows": choice.block_rows, "devices": n_devices}


def run_many(
    data: Observed,
    rank: int,
    priors: Sequence[Prior],
    seeds: Sequence[int],
    *,
    batch_size: int | None = None,
    workers: int = 1,
    progress: bool = False,
    label: str = "fits",
    stream=None,
    **options,
) -> Batch:
    """One MM fit per (prior, seed) pair, from random starts, in one compiled call.

    Each fit equals ``bernmf.fit(Y, "mm", rank, prior=prior, seed=seed, ...)`` with
    the same options (to rounding); the fits run as described in
    :mod:`bernmf.inference.mm._batch`.

    Parameters
    ----------
    data : Observed
    rank : int
    priors : sequence of Prior
        One per fit, each broadcast to shape (rank,) and checked (:func:`check_prior`)
        here; :func:`run_settings` takes them checked.
    seeds : sequence of int
        One per fit.
    batch_size : int, optional
        Fits vmapped together; default: all on an accelerator, 1 on a CPU.
    workers : int, default 1
        With ``batch_size=1``: threads sharing the fits.
    progress : bool, default False
        Print "label: done/total fits" lines to ``stream`` during long calls.
    **options
        The options of :func:`run`, with the same defaults.

    Returns
    -------
    Batch
    """
    options = ENGINE.with_defaults(options)
    if len(priors) != len(seeds) or not len(seeds):
        raise ValueError("give one seed per prior, and at least one of each")
    for s in seeds:
        check_seed(s)
    broadcast = [ENGINE.prior_for(p, rank) for p in priors]
    batching = {"batch_size": batch_size, "workers": workers, "progress": progress}
    return _run_checked(
        data, rank, broadcast, seeds, options, label=label, stream=stream, **batching
    )


def _run_checked(
    data: Observed,
    rank: int,
    priors: Sequence[Prior],
    seeds: Sequence[int],
    options: dict,
    *,
    batch_size: int | None = None,
    workers: int = 1,
    progress: bool = False,
    label: str = "fits",
    stream=None,
) -> Batch:
    """:func:`run_many` of checked, broadcast priors, checked seeds and every option."""
    size = len(seeds)
    batch_size = _batch.default_batch_size(size) if batch_size is None else batch_size
    check_count("batch_size", batch_size)
    check_count("workers", workers)
    with jax.enable_x64(True):
        float_type, choice, problem = _prepare(data, **options)
        prior_arrays = Prior(*(np.stack(v).astype(float_type) for v in zip(*priors, strict=True)))
        tol_array = layouts.place(
            np.asarray(options["tol"], float_type), layouts.replicated(choice.devices)
        )
        solution, compile_seconds, run_seconds = _batch.run_many(
            ("mm.run_many", choice.block_rows, choice.sparse),
            solve_from_seed,
            seeds,
            prior_arrays,
            (problem, tol_array),
            batch_size=int(batch_size),
            workers=int(workers),
            progress=progress,
            label=label,
            stream=stream,
            bytes_per_fit=_bytes_per_fit(problem, rank, float_type, options["max_iter"]),
            M=data.shape[0],
            K=rank,
            **_static(choice, options["max_iter"], options["accelerate"], options["dtype"]),
        )
    return Batch.of(
        solution,
        data.shape[0],
        options["tol"],
        options["accelerate"],
        compile_seconds,
        run_seconds,
        _extras(choice),
    )


OPTIONS = {
    "max_iter": 2000,
    "tol": 1e-5,
    "dtype": "float64",
    "accelerate": True,
    "layout": "auto",
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
    layout: str,
    block_rows: int | str | None,
    devices,
) -> Fit:
    """Fit by MM; see :func:`bernmf.fit` for the arguments. Returns a :class:`Fit`.

    Parameters
    ----------
    max_iter : int, default 2000
    tol : float, default 1e-5
        Stop when the relative change of the objective is below it.
    dtype : {"float64", "float32", "auto"}, default "float64"
        The float type of the sweeps. ``"auto"``: results in float64; accelerated
        fits iterate in float32 until its objective stops improving by more than
        ``max(tol, 1e-6)`` (relative) and then in float64 from that point until the
        stopping rule holds (``extras["float32_iterations"]`` counts the first
        phase). On a CPU it runs in about half the time of a float64 fit, compiles
        in about twice the time, and stops at an objective a few 1e-4 (relative)
        away, either way; plain fits (``accelerate=False``) run in float64.
    accelerate : bool, default True
        Iterate SQUAREM-accelerated sweeps: ``n_iter``, ``max_iter`` and the trace
        then count accelerated iterations (three MM sweeps each) and
        ``record.sweeps`` counts the sweeps. False: plain MM sweeps.
    layout : {"auto", "dense", "sparse"}, default "auto"
        How the observed ones enter the sums (:mod:`bernmf.inference.mm.layout`):
        ``"sparse"`` only at the ones (gathers and segment sums), ``"dense"`` on
        whole arrays, ``"auto"`` sparse when few of the observed entries are ones
        and the rows are not sharded over devices. The result is the same up to
        floating-point rounding.
    block_rows : int, "auto" or None, default "auto"
        None: the sweep works on whole (M, N) arrays. An int B: it goes over
        blocks of B rows, so that the memory beyond Y and the mask is O((M + N) K
        + B N); M is padded to a multiple of B with unobserved rows. ``"auto"``:
        blocks once the temporaries outgrow the CPU's cache or
        :data:`~bernmf.inference.mm.layout.AUTO_BLOCK_BYTES`
        (:func:`~bernmf.inference.mm.layout.choose_block_rows`). The result is the
        same up to floating-point rounding (about 1e-13 in float64).
    devices : list of jax.Device, optional
        Shard the rows of Y, the mask and W over these devices and replicate H
        (``shard_map`` over a one-axis mesh; the sums over rows are ``lax.psum``
        reductions). M is padded to a multiple of the device count with
        unobserved rows. On a machine with several GPUs pass
        ``devices=jax.devices()``; across several hosts, call
        ``jax.distributed.initialize()`` first in every process (each with the
        same data) and pass ``devices=jax.devices()``; every process gets the
        whole result.
    """
    options = {"max_iter": max_iter, "tol": tol, "dtype": dtype, "accelerate": accelerate}
    options |= {"layout": layout, "block_rows": block_rows, "devices": devices}
    M, N = data.shape
    given = None if init is None else check_init(init, M, N, rank)
    with jax.enable_x64(True):
        float_type, choice, problem = _prepare(data, **options)
        replicated = layouts.replicated(choice.devices)
        prior_arrays = Prior(*(layouts.place(np.asarray(v, float_type), replicated) for v in prior))
        tol_array = layouts.place(np.asarray(tol, float_type), replicated)
        static = _static(choice, max_iter, accelerate, dtype)
        if given is None and starts.available():  # the start drawn here: no generator to lower
            draws = starts.uniform_draws(seed, M, N, rank, float_type)
            start = Factors(*(layouts.place(a, replicated) for a in draws))
            function = solve_from_draws
        elif given is None:  # one fit alone: a program without run_many's loop over fits
            start, function = np.asarray(seed, np.uint32), solve_from_seed
            static |= {"M": M, "K": rank}
        else:
            start = Factors(*(layouts.place(a.astype(float_type), replicated) for a in given))
            function = solve_from
        args = (start, prior_arrays, problem, tol_array)
        program, compile_seconds = compiled(
            (function.__name__, choice.block_rows, choice.sparse), function, *args, **static
        )
        begin = time.perf_counter()
        solution = jax.block_until_ready(program(*args))
        run_seconds = time.perf_counter() - begin
    stacked = jax.tree.map(lambda x: np.asarray(x)[None], solution)
    batch = Batch.of(stacked, M, tol, accelerate, compile_seconds, run_seconds, _extras(choice))
    return batch.fit(0, prior, seed)


def run_settings(
    data: Observed,
    rank: int,
    priors: Sequence[Prior],
    seeds: Sequence[int],
    *,
    batch_size: int | None = None,
    workers: int = 1,
    progress: bool = False,
    label: str = "fits",
    stream=None,
    **options,
) -> list[Fit]:
    """The fits of the (prior, seed) pairs in one compiled call, as :func:`run` gives them.

    The request is checked (:func:`bernmf.fitting.plan.plan`): ``priors`` broadcast to
    (rank,) and checked (:meth:`~bernmf.inference.registry.Engine.prior_for`), the seeds
    checked and ``options`` every option of :func:`run`; the batching arguments are
    :func:`run_many`'s. Each fit's timings are its share of the call's run time
    (:attr:`Batch.seconds`), the compile time counted on the first.
    """
    batching = {"batch_size": batch_size, "workers": workers, "progress": progress}
    batch = _run_checked(data, rank, priors, seeds, options, label=label, stream=stream, **batching)
    fits = []
    for i, (prior, seed) in enumerate(zip(priors, seeds, strict=True)):
        compile_seconds = batch.compile_seconds if i == 0 else 0.0
        timings = {"compile": compile_seconds, "run": float(batch.seconds[i])}
        fits.append(batch.fit(i, prior, int(seed), timings=timings))
    return fits


def run_members(
    data: Observed, rank: int, prior: Prior, seeds: Sequence[int], **options
) -> list[Fit]:
    """The fits of ``seeds`` at ``prior`` in one compiled call (:func:`run_settings`)."""
    return run_settings(data, rank, [prior] * len(seeds), seeds, **options)


ENGINE = register(
    Engine(
        name="mm",
        run=run,
        options=OPTIONS,
        default_prior=Prior(),
        check_prior=check_prior,
        run_members=run_members,
        run_settings=run_settings,
        check_options=check_options,
        trace="the negative log posterior of the observed entries (-log_joint)",
    )
)
