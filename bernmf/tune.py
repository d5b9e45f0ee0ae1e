"""Hyperparameter search for the MM engine: rank x alpha x beta (x restarts) on validation.

The prior is data, not structure, so every (alpha, beta, seed) of one rank runs in a
single compiled program: the fits are mapped over with :func:`jax.lax.map`, vmapped in
batches of ``batch_size``. On an accelerator the default vmaps the whole grid at once.
On a CPU the default is ``batch_size=1`` (one fit after the other inside the
compiled program): XLA's CPU backend runs the batched matrix products of a vmapped
fit several times slower than the same products one by one, and a vmapped
``while_loop`` runs every fit of a batch until the slowest has converged.

Each fit is :func:`bernmf.inference.mm_batched.solve`, the MM iterations of
``bernmf.fit(Y, "mm", ...)`` with the ones of Y handled sparsely; a fit of the grid
equals ``bernmf.fit(Y, "mm", rank, mask=mask, prior=Prior(alpha, beta, gamma),
seed=seed)`` to rounding.

Examples
--------
>>> import bernmf, bernmf.tune
>>> from bernmf.split import random_split
>>> Y, _, _ = bernmf.simulate(0, 60, 40, 3)
>>> split = random_split(Y.shape, seed=0)
>>> result = bernmf.tune.grid(Y, [2, 3], [1.0, 1.5], [1.0, 1.5], mask=split.train,
...                           validation=split.validation, progress=False)
>>> sorted(result.best)
['alpha', 'beta', 'rank', 'seed', 'validation_perplexity']
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from bernmf.data import Observed, as_observed, check_rank, check_stopping
from bernmf.inference import mm
from bernmf.inference import mm_batched as batched
from bernmf.inference._compile import compiled
from bernmf.models.spec import Prior, perplexity
from bernmf.results import Fit

__all__ = ["Batch", "Tuning", "best_of", "fit_batch", "grid", "restarts"]

COLUMNS = [
    "rank",
    "alpha",
    "beta",
    "gamma",
    "seed",
    "iterations",
    "sweeps",
    "converged",
    "seconds",
    "validation_perplexity",
]


@dataclass(frozen=True)
class Batch:
    """The fits of one compiled call, stacked along the first axis.

    Attributes
    ----------
    W : (G, M, K) ndarray
    H : (G, K, N) ndarray
    n_iter : (G,) int ndarray
        Iterations (accelerated iterations with ``accelerate=True``).
    sweeps : (G,) int ndarray
        MM sweeps evaluated.
    converged : (G,) bool ndarray
    objective : (G,) ndarray
        Final objective (per observed entry for the ``as_published`` variant).
    traces : (G, max_iter + 1) ndarray
        Objective after each sweep, NaN after ``n_iter``.
    seconds : (G,) ndarray
        Each fit's share of the call's run time, in proportion to its iterations.
    compile_seconds, run_seconds : float
        Of the whole call (compile is 0 when the program was cached).
    """

    W: np.ndarray
    H: np.ndarray
    n_iter: np.ndarray
    sweeps: np.ndarray
    converged: np.ndarray
    objective: np.ndarray
    traces: np.ndarray
    seconds: np.ndarray
    compile_seconds: float
    run_seconds: float

    def probs(self, index: int) -> np.ndarray:
        """P(Y=1) = W @ H of fit ``index``."""
        return self.W[index] @ self.H[index]


# Progress is reported from inside the compiled program through one module-level
# function, so the cached programs never hold on to a caller's reporter.
_REPORTER: list[Callable[[int], None]] = []


def _report_done(count) -> None:
    if _REPORTER:
        _REPORTER[-1](int(np.size(count)))


PROGRESS_EVERY = 10.0
"""Seconds between two progress lines of a long call."""


class _Progress:
    """Prints "label: done/total fits, elapsed" at most every :data:`PROGRESS_EVERY` s."""

    def __init__(self, label: str, total: int, stream):
        self.label, self.total, self.stream = label, total, stream
        self.done = 0
        self.start = self.last = time.perf_counter()

    def __call__(self, count: int) -> None:
        self.done += count
        now = time.perf_counter()
        if now - self.last >= PROGRESS_EVERY and self.done < self.total:
            self.last = now
            print(
                f"  {self.label}: {self.done}/{self.total} fits, {now - self.start:.0f} s",
                file=self.stream,
                flush=True,
            )


def _default_batch_size(size: int) -> int:
    return 1 if jax.default_backend() == "cpu" else size


MIN_CAPACITY = 128
"""A one-by-one program is compiled for at least this many fits and told how many to
run, so that grids, restarts and single fits of one rank share one compiled program."""


def _capacity(size: int) -> int:
    return max(MIN_CAPACITY, 1 << (size - 1).bit_length())


def _solve_one(seed, prior, problem, tol, *, M, N, K, max_iter, variant, accelerate):
    dtype = prior.alpha.dtype
    init = mm.random_init(jax.random.key(seed), M, N, K, dtype)
    solution = batched.solve(
        init, problem, prior, tol, max_iter=max_iter, variant=variant, accelerate=accelerate
    )
    jax.debug.callback(_report_done, seed)
    return solution


def _solve_mapped(seeds, priors, problem, tol, *, batch_size, **static):
    """All fits, vmapped in batches of ``batch_size``."""
    return jax.lax.map(
        lambda args: _solve_one(args[0], args[1], problem, tol, **static),
        (seeds, priors),
        batch_size=batch_size,
    )


def _solve_sequential(seeds, priors, count, problem, tol, **static):
    """The first ``count`` fits one after the other (the arrays may be longer)."""
    first = _solve_one(seeds[0], jax.tree.map(lambda x: x[0], priors), problem, tol, **static)
    outputs = jax.tree.map(
        lambda x: jnp.zeros((seeds.shape[0], *x.shape), x.dtype).at[0].set(x), first
    )

    def body(i, outputs):
        prior = jax.tree.map(lambda x: x[i], priors)
        solution = _solve_one(seeds[i], prior, problem, tol, **static)
        return jax.tree.map(lambda o, x: o.at[i].set(x), outputs, solution)

    return jax.lax.fori_loop(1, count, body, outputs)


def fit_batch(
    data: Observed,
    rank: int,
    priors: Sequence[Prior],
    seeds: Sequence[int],
    *,
    max_iter: int = 2000,
    tol: float = 1e-5,
    dtype: str = "float64",
    variant: str = "correct",
    accelerate: bool | None = None,
    batch_size: int | None = None,
    workers: int = 1,
    progress: str | None = None,
    stream=None,
) -> Batch:
    """Run one MM fit per (prior, seed) pair in a single compiled call.

    Parameters
    ----------
    data : Observed
        From :func:`bernmf.data.as_observed` (Y and the training mask).
    rank : int
    priors : sequence of Prior
        One per fit; each hyperparameter a scalar or of length ``rank``.
    seeds : sequence of int
        One per fit: the seed of ``bernmf.fit``'s random initialization.
    max_iter, tol, dtype
        As for ``bernmf.fit(..., engine="mm")``. For ``variant="as_published"``,
        ``tol`` is the absolute decrease of the objective per observed entry.
    variant : {"correct", "as_published"}
        See :mod:`bernmf.inference.mm_batched`.
    accelerate : bool, optional
        SQUAREM-accelerated MM, as ``bernmf.fit(..., accelerate=True)`` (correct
        variant only); ``max_iter`` then counts accelerated iterations. Default: on
        for the correct variant, off for ``as_published``.
    batch_size : int, optional
        How many fits are vmapped together; default: all on an accelerator, 1 on CPU.
    workers : int, default 1
        With ``batch_size=1``: how many threads share the fits (each runs the same
        compiled program on its part), to use several CPU cores.
    progress : str, optional
        A label; if given, progress lines are printed to ``stream`` (default stderr).

    Returns
    -------
    Batch
    """
    rank = check_rank(rank)
    if len(priors) != len(seeds) or not len(seeds):
        raise ValueError("give one seed per prior, and at least one of each")
    if variant not in batched.VARIANTS:
        raise ValueError(f"variant must be one of {batched.VARIANTS}, got {variant!r}")
    if accelerate is None:
        accelerate = variant == "correct"
    mm.check_flag("accelerate", accelerate)
    if accelerate and variant != "correct":
        raise ValueError("accelerate=True needs variant='correct'")
    mm.check_dtype(dtype)
    check_stopping(max_iter, tol)
    broadcast = [p.broadcast(rank) for p in priors]
    for prior in broadcast:
        mm.check_prior(prior)
    size = len(seeds)
    batch_size = _default_batch_size(size) if batch_size is None else int(batch_size)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    M, N = data.shape
    static = {"M": M, "N": N, "K": rank, "max_iter": int(max_iter), "variant": variant}
    static["accelerate"] = bool(accelerate)
    with jax.enable_x64(True):
        float_type = mm.DTYPES[dtype]
        problem = batched.make_problem(data.Y, data.mask, float_type)
        tol_array = jnp.asarray(tol, float_type)
        seed_array = np.asarray(seeds, dtype=np.uint32)
        prior_arrays = [np.stack(v).astype(float_type) for v in zip(*broadcast, strict=True)]
        if batch_size > 1:
            args = (jnp.asarray(seed_array), Prior(*map(jnp.asarray, prior_arrays)))
            args = (*args, problem, tol_array)
            program, compile_seconds = compiled(
                "tune.mapped", _solve_mapped, *args, batch_size=min(batch_size, size), **static
            )
            calls = [args]
        else:
            # one program per rank and capacity, run on `workers` slices of the fits
            parts = np.array_split(np.arange(size), max(1, min(int(workers), size)))
            capacity = _capacity(max(len(p) for p in parts))
            calls = []
            for part in parts:
                padded = np.resize(part, capacity)  # repeats; only len(part) are run
                calls.append(
                    (
                        jnp.asarray(seed_array[padded]),
                        Prior(*(jnp.asarray(v[padded]) for v in prior_arrays)),
                        jnp.asarray(len(part)),
                        problem,
                        tol_array,
                    )
                )
            program, compile_seconds = compiled(
                "tune.sequential", _solve_sequential, *calls[0], **static
            )
        reporter = _Progress(progress, size, stream or sys.stderr) if progress else None
        _REPORTER.append(reporter or (lambda count: None))
        try:
            begin = time.perf_counter()
            if len(calls) == 1:
                outputs = [jax.block_until_ready(program(*calls[0]))]
            else:
                with ThreadPoolExecutor(len(calls)) as pool:
                    outputs = list(
                        pool.map(lambda call: jax.block_until_ready(program(*call)), calls)
                    )
            run_seconds = time.perf_counter() - begin
        finally:
            _REPORTER.pop()
        if batch_size == 1:
            outputs = [_first(out, len(part)) for out, part in zip(outputs, parts, strict=True)]
        solution = jax.tree.map(lambda *x: np.concatenate(x), *map(_first, outputs))
        n_iter = np.asarray(solution.n_iter)
        traces = np.asarray(solution.trace, float)  # (size, max_iter + 1)
        last = traces[np.arange(size), n_iter]
        sweeps = np.asarray(solution.sweeps)
        share = sweeps / max(sweeps.sum(), 1)
        return Batch(
            W=np.asarray(solution.W, float),
            H=np.asarray(solution.H, float),
            n_iter=n_iter,
            sweeps=sweeps,
            converged=np.asarray(solution.converged),
            objective=last,
            traces=traces,
            seconds=run_seconds * share,
            compile_seconds=compile_seconds,
            run_seconds=run_seconds,
        )


def _first(tree, count: int | None = None):
    """The arrays of ``tree`` as numpy arrays, cut to their first ``count`` entries."""
    return jax.tree.map(lambda x: np.asarray(x)[:count], tree)


@dataclass(frozen=True)
class Tuning:
    """Result of :func:`grid`.

    Attributes
    ----------
    table : DataFrame
        One row per fit: rank, alpha, beta, gamma, seed, iterations, converged,
        seconds, validation_perplexity.
    best : dict
        The row with the lowest validation perplexity (rank, alpha, beta, seed,
        validation_perplexity).
    best_factors : (W, H)
        The factors of that fit.
    timings : dict
        Per rank: ``{"compile": s, "run": s}``.
    """

    table: pd.DataFrame
    best: dict
    best_factors: tuple[np.ndarray, np.ndarray]
    timings: dict = field(default_factory=dict)

    def mean_over_seeds(self) -> pd.DataFrame:
        """Validation perplexity averaged over restarts, per (rank, alpha, beta)."""
        return (
            self.table.groupby(["rank", "alpha", "beta"], as_index=False)["validation_perplexity"]
            .mean()
            .sort_values("validation_perplexity", ignore_index=True)
        )


def _values(name: str, values) -> list[float]:
    array = np.atleast_1d(np.asarray(values, dtype=float))
    if array.ndim != 1 or not array.size:
        raise ValueError(f"{name} must be a non-empty list of numbers")
    return array.tolist()


def grid(
    Y,
    ranks: Sequence[int],
    alphas=(1.0,),
    betas=(1.0,),
    *,
    mask,
    validation,
    gamma: float = 1.0,
    restarts: int = 1,
    seed: int = 0,
    max_iter: int = 2000,
    tol: float = 1e-5,
    dtype: str = "float64",
    variant: str = "correct",
    accelerate: bool | None = None,
    batch_size: int | None = None,
    workers: int = 1,
    progress: bool = True,
    stream=None,
) -> Tuning:
    """Fit MM over rank x alpha x beta x restarts and score each fit on validation entries.

    Parameters
    ----------
    Y : array-like or DataFrame of shape (M, N)
        Binary data; NaN is missing.
    ranks : sequence of int
    alphas, betas : sequences of float >= 1
        The Beta prior of H; every pair is fitted.
    mask : bool array of shape (M, N)
        Training entries (observed by the fits).
    validation : bool array of shape (M, N)
        Entries scored by the mean negative log-likelihood (perplexity).
    gamma : float, default 1
        Dirichlet parameter of the rows of W, the same for every fit.
    restarts : int, default 1
        Random initializations per setting, with seeds ``seed, seed + 1, ...``; the
        same seeds for every (alpha, beta), so settings are compared on equal footing.
    max_iter, tol, dtype, variant, accelerate, batch_size, workers
        See :func:`fit_batch`.
    progress : bool, default True
        Print a line per rank, and progress lines during long ranks, to ``stream``.

    Returns
    -------
    Tuning
    """
    ranks = [check_rank(k) for k in np.atleast_1d(ranks).tolist()]
    alphas, betas = _values("alphas", alphas), _values("betas", betas)
    if restarts < 1:
        raise ValueError(f"restarts must be >= 1, got {restarts}")
    data = as_observed(Y, mask)
    values = as_observed(Y).Y
    validation = np.asarray(validation, bool)
    if validation.shape != data.shape:
        raise ValueError(f"validation has shape {validation.shape} but Y has {data.shape}")
    if (validation & data.mask).any():
        raise ValueError("validation entries must not be training entries (mask)")
    stream = stream or sys.stderr
    settings = [(a, b, seed + r) for a in alphas for b in betas for r in range(restarts)]
    rows, timings = [], {}
    best_score, best_factors = np.inf, None
    for rank in ranks:
        label = f"rank {rank}" + (" (as published)" if variant == "as_published" else "")
        result = fit_batch(
            data,
            rank,
            [Prior(a, b, gamma) for a, b, _ in settings],
            [s for _, _, s in settings],
            max_iter=max_iter,
            tol=tol,
            dtype=dtype,
            variant=variant,
            accelerate=accelerate,
            batch_size=batch_size,
            workers=workers,
            progress=label if progress else None,
            stream=stream,
        )
        timings[rank] = {"compile": result.compile_seconds, "run": result.run_seconds}
        for i, (a, b, s) in enumerate(settings):
            score = perplexity(values, result.probs(i), validation)
            rows.append(
                (
                    rank,
                    a,
                    b,
                    gamma,
                    s,
                    int(result.n_iter[i]),
                    int(result.sweeps[i]),
                    bool(result.converged[i]),
                    float(result.seconds[i]),
                    score,
                )
            )
            if score < best_score:
                best_score, best_factors = score, (result.W[i], result.H[i])
        if progress:
            done = pd.DataFrame(rows[-len(settings) :], columns=COLUMNS)
            top = done.loc[done["validation_perplexity"].idxmin()]
            print(
                f"{label}: {len(settings)} fits in {result.run_seconds:.1f} s "
                f"(compile {result.compile_seconds:.1f} s), {int(done['sweeps'].sum())} "
                f"sweeps; best validation perplexity {top['validation_perplexity']:.4f} at "
                f"alpha={top['alpha']:g}, beta={top['beta']:g}",
                file=stream,
                flush=True,
            )
    table = pd.DataFrame(rows, columns=COLUMNS)
    top = table.loc[table["validation_perplexity"].idxmin()]
    best = {
        "rank": int(top["rank"]),
        "alpha": float(top["alpha"]),
        "beta": float(top["beta"]),
        "seed": int(top["seed"]),
        "validation_perplexity": float(top["validation_perplexity"]),
    }
    return Tuning(table=table, best=best, best_factors=best_factors, timings=timings)


def restarts(
    Y,
    rank: int,
    prior: Prior | None = None,
    seeds: Sequence[int] = tuple(range(10)),
    *,
    mask,
    engine_name: str | None = None,
    **options,
) -> list[Fit]:
    """Fit the same model from several random initializations in one compiled call.

    Parameters
    ----------
    Y : array-like or DataFrame
    rank : int
    prior : Prior, optional
        Default ``Prior()`` (flat: the EM algorithm).
    seeds : sequence of int
    mask : bool array
        Training entries.
    engine_name : str, optional
        The ``engine`` recorded on each :class:`~bernmf.results.Fit`; default "mm"
        (or "mm-as-published").
    **options
        ``max_iter``, ``tol``, ``dtype``, ``variant``, ``accelerate``, ``batch_size``,
        ``workers``, ``progress``.

    Returns
    -------
    list of Fit
        One per seed, as ``bernmf.fit`` would give (compile time on the first).
    """
    prior = (prior or Prior()).broadcast(check_rank(rank))
    data = as_observed(Y, mask)
    seeds = [int(s) for s in seeds]
    result = fit_batch(data, rank, [prior] * len(seeds), seeds, **options)
    name = engine_name or ("mm-as-published" if options.get("variant") == "as_published" else "mm")
    fits = []
    for i, s in enumerate(seeds):
        fits.append(
            Fit(
                engine=name,
                rank=rank,
                prior=prior,
                W=result.W[i],
                H=result.H[i],
                probs=result.probs(i),
                trace=result.traces[i, : result.n_iter[i] + 1],
                n_iter=int(result.n_iter[i]),
                converged=bool(result.converged[i]),
                timings={
                    "compile": result.compile_seconds if i == 0 else 0.0,
                    "run": float(result.seconds[i]),
                },
                seed=s,
                extras={"sweeps": int(result.sweeps[i])},
                row_labels=data.row_labels,
                col_labels=data.col_labels,
            )
        )
    return fits


def best_of(data: Observed, rank: int, prior: Prior, seeds: Sequence[int], **options) -> Fit:
    """The fit of lowest final objective among one MM fit per seed, in one compiled call.

    This is ``bernmf.fit(..., restarts=R)`` for the ``mm`` engine: the seeds' fits are
    those of ``bernmf.fit(..., seed=s)`` (to rounding), run by :func:`fit_batch`
    (one after the other inside one compiled program on a CPU, vmapped on an
    accelerator).

    Parameters
    ----------
    data : Observed
    rank : int
    prior : Prior
        Of arrays of shape (rank,).
    seeds : sequence of int
    **options
        ``max_iter``, ``tol``, ``dtype``, ``accelerate`` (see :func:`fit_batch`).

    Returns
    -------
    Fit
        The best fit, with ``seed`` its seed, ``timings`` those of the whole call and
        ``extras["restarts"]`` = ``{"seeds", "objectives", "n_iter", "converged"}``
        (lists over all restarts, in the order of ``seeds``).
    """
    seeds = [int(s) for s in seeds]
    result = fit_batch(data, rank, [prior] * len(seeds), seeds, **options)
    best = int(np.argmin(np.where(np.isnan(result.objective), np.inf, result.objective)))
    W, H = result.W[best], result.H[best]
    return Fit(
        engine="mm",
        rank=rank,
        prior=prior,
        W=W,
        H=H,
        probs=W @ H,
        trace=result.traces[best, : result.n_iter[best] + 1],
        n_iter=int(result.n_iter[best]),
        converged=bool(result.converged[best]),
        timings={"compile": result.compile_seconds, "run": result.run_seconds},
        seed=seeds[best],
        extras={
            "accelerate": bool(options.get("accelerate", True)),
            "sweeps": int(result.sweeps[best]),
            "restarts": {
                "seeds": seeds,
                "objectives": result.objective.tolist(),
                "n_iter": result.n_iter.tolist(),
                "converged": result.converged.tolist(),
            },
        },
    )
