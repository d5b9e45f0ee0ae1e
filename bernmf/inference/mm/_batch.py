"""Many fits of one solver in one compiled call: mapped, batched, or shared by threads.

:func:`run_many` runs ``fit_one(seed, prior, *shared)`` for a list of (seed, prior)
pairs. With ``batch_size > 1`` the fits are mapped over with :func:`jax.lax.map`,
vmapped in batches of that size (the default on an accelerator). With
``batch_size = 1`` (the default on a CPU) they run one after the other inside the
compiled program: XLA's CPU backend runs the batched matrix products of a vmapped
fit several times slower than the same products one by one, and a vmapped
``while_loop`` runs every fit of a batch until the slowest has converged. Then
``workers`` threads may share the fits, each running the same compiled program on
its part, to use several CPU cores.
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np

from bernmf._progress import Progress
from bernmf.inference._compile import compiled

MIN_CAPACITY = 128
"""A one-by-one program is compiled for at least this many fits and told how many to
run, so that grids and restarts of one shape share one compiled program (while their
outputs fit in :data:`CAPACITY_BYTES`)."""
CAPACITY_BYTES = 2**26
"""Memory that the unused output slots of a one-by-one program may take (64 MiB)."""

# Progress is reported from inside the compiled program through one module-level
# function, so the cached programs never hold on to a caller's reporter: each call of
# run_many registers its reporter under a number that its program receives as an
# argument, so that calls running at once in several threads each count their own fits.
_REPORTERS: dict[int, Callable[[int], None]] = {}
_NUMBERS = itertools.count(1)
_LOCK = threading.Lock()


def _report_done(number, count) -> None:
    with _LOCK:
        reporter = _REPORTERS.get(int(np.ravel(number)[0]))
    if reporter is not None:
        reporter(int(np.size(count)))


def default_batch_size(size: int) -> int:
    """All fits vmapped together on an accelerator; one by one on a CPU."""
    return 1 if jax.default_backend() == "cpu" else size


def _capacity(size: int, bytes_per_fit: int) -> int:
    """Fits a one-by-one program is compiled for: a power of two >= ``size``."""
    least = min(MIN_CAPACITY, max(1, CAPACITY_BYTES // max(1, bytes_per_fit)))
    return 1 << (max(size, least) - 1).bit_length()


def _reported(fit_one: Callable, number) -> Callable:
    """``fit_one`` that tells the reporter registered under ``number`` when it is done."""

    def fit_and_report(seed, prior, *shared, **static):
        solution = fit_one(seed, prior, *shared, **static)
        jax.debug.callback(_report_done, number, seed)
        return solution

    return fit_and_report


def _mapped(seeds, priors, number, *shared, fit_one, batch_size, **static):
    """All fits, vmapped in batches of ``batch_size``."""
    fit = _reported(fit_one, number)
    return jax.lax.map(
        lambda args: fit(args[0], args[1], *shared, **static),
        (seeds, priors),
        batch_size=batch_size,
    )


def _sequential(seeds, priors, count, number, *shared, fit_one, **static):
    """The first ``count`` fits one after the other (the arrays may be longer)."""
    fit = functools.partial(_reported(fit_one, number), **static)
    shapes = jax.eval_shape(fit, seeds[0], jax.tree.map(lambda x: x[0], priors), *shared)
    outputs = jax.tree.map(lambda x: jnp.zeros((seeds.shape[0], *x.shape), x.dtype), shapes)

    def body(i, outputs):
        solution = fit(seeds[i], jax.tree.map(lambda x: x[i], priors), *shared)
        return jax.tree.map(lambda o, x: o.at[i].set(x), outputs, solution)

    return jax.lax.fori_loop(0, count, body, outputs)


def run_many(
    key: Hashable,
    fit_one: Callable,
    seeds: Sequence[int],
    priors,
    shared: tuple,
    *,
    batch_size: int,
    bytes_per_fit: int,
    workers: int = 1,
    progress: bool = False,
    label: str = "fits",
    stream=None,
    **static,
):
    """Run ``fit_one(seed, prior, *shared, **static)`` for every (seed, prior) pair.

    Parameters
    ----------
    key : hashable
        Names the program in the compile cache (with the shapes and ``static``).
    fit_one : callable
        A pure JAX function returning a pytree of arrays (one fit).
    seeds : sequence of int
        One per fit.
    priors : pytree of numpy arrays
        Each leaf with one entry per fit along its first axis.
    shared : tuple of arrays or pytrees
        The same for every fit (the data, the tolerance).
    batch_size : int
        Fits vmapped together; 1 runs them one after the other.
    bytes_per_fit : int
        Size of one fit's outputs (bounds the capacity of a one-by-one program).
    workers : int, default 1
        With ``batch_size=1``: threads sharing the fits.
    progress : bool, default False
        Show the fits done on ``stream`` (default stderr): a bar on a terminal,
        else a "label: done/total fits" line every :data:`bernmf._progress.EVERY`
        seconds (:class:`bernmf._progress.Progress`).
    **static
        Arguments that shape the program.

    Returns
    -------
    outputs : pytree of numpy arrays
        ``fit_one``'s outputs stacked along a first axis, in the order of ``seeds``.
    compile_seconds, run_seconds : float
    """
    size = len(seeds)
    seed_array = np.asarray(seeds, dtype=np.uint32)
    number = next(_NUMBERS)
    reporter_number = jnp.asarray(number, jnp.int32)
    if batch_size > 1:
        call = (
            jnp.asarray(seed_array), jax.tree.map(jnp.asarray, priors), reporter_number, *shared
        )  # fmt: skip
        program, compile_seconds = compiled(
            (key, "mapped"),
            _mapped,
            *call,
            fit_one=fit_one,
            batch_size=min(batch_size, size),
            **static,
        )
        parts, calls = [np.arange(size)], [call]
    else:
        # one program per shape and capacity, run on `workers` slices of the fits
        parts = np.array_split(np.arange(size), max(1, min(int(workers), size)))
        capacity = _capacity(max(len(p) for p in parts), bytes_per_fit)
        calls = []
        for part in parts:
            padded = np.resize(part, capacity)  # repeats; only len(part) are run
            chosen = jax.tree.map(lambda v, padded=padded: jnp.asarray(v[padded]), priors)
            count = jnp.asarray(len(part))
            calls.append((jnp.asarray(seed_array[padded]), chosen, count, reporter_number, *shared))
        program, compile_seconds = compiled(
            (key, "sequential"), _sequential, *calls[0], fit_one=fit_one, **static
        )
    reporter = Progress(label, size, enabled=progress, stream=stream)
    with _LOCK:
        _REPORTERS[number] = reporter.update
    try:
        begin = time.perf_counter()
        with ThreadPoolExecutor(len(calls)) as pool:
            outputs = list(pool.map(lambda call: jax.block_until_ready(program(*call)), calls))
        run_seconds = time.perf_counter() - begin
    finally:
        with _LOCK:
            del _REPORTERS[number]
        reporter.close()
    counts = [len(part) for part in parts]
    cut = [_first(out, n) for out, n in zip(outputs, counts, strict=True)]
    return jax.tree.map(lambda *x: np.concatenate(x), *cut), compile_seconds, run_seconds


def _first(tree, count: int):
    """The arrays of ``tree`` as numpy arrays, cut to their first ``count`` entries."""
    return jax.tree.map(lambda x: np.asarray(x)[:count], tree)
