"""The budget of ``bernmf report --quick``: which engines fit in it, from probe fits.

:func:`within_budget` keeps ``mm`` and the other engines cheapest first while their
estimated seconds add up to at most :data:`QUICK_BUDGET`; :func:`floor` (from the
operations a fit needs) leaves out, without a probe, an engine that cannot fit, and
:func:`estimate` times the others by probe fits.
"""

from __future__ import annotations

import numpy as np

from bernmf._progress import say
from bernmf.api import fit
from bernmf.inference import get_engine

__all__ = ["FLOPS", "PROBES", "QUICK_BUDGET", "estimate", "floor", "within_budget"]

QUICK_BUDGET = 120.0
"""Seconds ``quick=True`` aims at per dataset: ``mm``, then the other engines cheapest
first while their estimates (:func:`estimate`) add up to at most this; the others are
left out, and said so."""

PROBES = {
    "gibbs": ({"num_warmup": 2, "num_samples": 2}, 4, ("num_warmup", "num_samples")),
    "nuts": ({"num_warmup": 2, "num_samples": 2}, 4, ("num_warmup", "num_samples")),
    "svi": ({"steps": 2, "num_draws": 2}, 2, ("steps",)),
}
"""Per engine: the options of a probe fit, its iterations (or draws), and the options whose
sum is a full fit's. The other engines probe with a tolerance that stops them after one
iteration (``tol`` is no part of their compiled program, so the fits that follow reuse the
probe's) and count ``max_iter``."""
STOP_AT_ONCE = ({"tol": 1e300}, None, ("max_iter",))

FLOPS = 1e10
"""Floating-point operations per second that no machine here beats, for :func:`floor`."""


def floor(engine: str, shape: tuple[int, int], rank: int, options: dict, fits: int) -> float:
    """Seconds that ``fits`` fits of ``engine`` cannot take less than, from their operations.

    Per iteration (or draw): ``logpca`` a pass over the entries per component (M N K: its
    leading eigenvectors are refined, not an N x N eigenproblem solved), for each
    ``m_grid`` candidate and the refit; ``logsvd`` an SVD (M N min(M, N)); ``nuts``
    gradients of 10 operations per entry and component, a quarter of
    ``2**max_tree_depth`` of them per draw (an assumption, not a bound: short warmups
    leave the step size small and the trees deep); the others a pass over the entries
    per component (M N K). At :data:`FLOPS`, so that an engine whose floor is over
    budget is left out without probing it.
    """
    M, N = shape
    defaults = {**get_engine(engine).options, **options}
    _, _, full = PROBES.get(engine, STOP_AT_ONCE)
    iterations = sum(float(defaults.get(key, 0) or 0) for key in full)
    per_iteration = {
        "logpca": float(M) * N * rank * (len(defaults.get("m_grid") or ()) + 1),
        "logsvd": float(M) * N * min(M, N),
        "nuts": 10.0 * M * N * rank * 2 ** int(defaults.get("max_tree_depth", 10)) / 4,
    }.get(engine, float(M) * N * rank)
    return fits * iterations * per_iteration / FLOPS


def estimate(Y, split, engine: str, rank: int, options: dict, fits: int) -> float:
    """Seconds that ``fits`` fits of ``engine`` with ``options`` would take on Y, from probes.

    A probe fit on the training entries gives the compile time. The engines of
    :data:`PROBES` (samplers) probe with a few draws, their run time per draw counted.
    The others are fitted twice more by the same compiled program, stopped after one
    iteration and after a few (a loose tolerance), so that the difference of the two
    run times is the time of the iterations between them, without the fixed cost of a
    call. The estimate is the compile time plus ``fits`` times that per iteration times
    a full fit's iterations (``max_iter``: an upper bound for the engines that stop when
    converged).
    """
    probe, units, full = PROBES.get(engine, STOP_AT_ONCE)
    chosen = get_engine(engine)
    quiet = {"progress": False} if "progress" in chosen.options else {}

    def probed(extra):
        return fit(Y, engine, rank, mask=split.train, **{**options, **quiet, **probe, **extra})

    first = probed({})
    compile_seconds = float(first.timings.get("compile", 0.0))
    per_unit = first.timings.get("run", 0.0) / max(units or first.n_iter, 1)
    if units is None:  # one iteration, then a few: the difference is the iterations' time
        once, more = probed({}), probed({"tol": 1e-2})
        run = more.timings.get("run", 0.0) - once.timings.get("run", 0.0)
        if more.n_iter > once.n_iter and run > 0:
            per_unit = run / (more.n_iter - once.n_iter)
        else:  # too fast to tell the iterations from the call: the call's time, per iteration
            per_unit = more.timings.get("run", 0.0) / max(more.n_iter, 1)
    defaults = {**chosen.options, **options}
    iterations = sum(float(defaults.get(key, 0) or 0) for key in full)
    return float(compile_seconds + fits * iterations * per_unit)


def within_budget(name, Y, split, engines, rank, seeds, ensembles, restarts, options, progress):
    """The engines kept within :data:`QUICK_BUDGET`, and the others as ``(dataset, engine,
    estimate)``; lines saying both when ``progress``.

    ``mm`` (the package's engine) is always kept; the others are added cheapest first
    while the estimates (:func:`estimate`) add up to at most the budget. An engine whose
    :func:`floor` alone is over the budget is not probed.
    """
    seconds = {}
    for engine in engines:
        fits = len(seeds) + (engine == "mm") + restarts * len(seeds) * (engine in ensembles)
        seconds[engine] = floor(engine, np.shape(Y), rank, options[engine], fits)
        if seconds[engine] <= QUICK_BUDGET:  # else left out without a probe
            seconds[engine] = estimate(Y, split, engine, rank, options[engine], fits)
    chosen, total = set(), 0.0
    for engine in sorted(engines, key=lambda e: (e != "mm", seconds[e])):
        if engine == "mm" or total + seconds[engine] <= QUICK_BUDGET:
            chosen.add(engine)
            total += seconds[engine]
    kept = [e for e in engines if e in chosen]
    dropped = [(name, e, seconds[e]) for e in engines if e not in chosen]
    estimates = ", ".join(f"{e} {seconds[e]:.0f} s" for e in kept)
    say(progress, f"report --quick on {name}: estimated {total:.0f} s ({estimates})")
    for _, engine, guess in dropped:
        say(
            progress,
            f"report --quick on {name}: leaving out {engine}, estimated {guess:.0f} s, over "
            f"the quick budget of {QUICK_BUDGET:.0f} s; run it without --quick, or name the "
            "engines with --engines",
        )
    return kept, dropped
