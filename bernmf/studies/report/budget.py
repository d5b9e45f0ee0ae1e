"""The budget of ``bernmf report``: what each engine runs so that the report fits in it.

:func:`plans` estimates every engine on every dataset up front, before the first fit
that counts: :func:`floor` (from the operations a fit needs) leaves out, without a probe,
an engine that cannot fit; :func:`probe` times the others by probe fits. Each engine's
:class:`EnginePlan` (its tuning ranks, seeds, draws and ensemble) is costed by
:func:`plan_seconds`; while the estimates add up to more than the budget left, the most
expensive plan is shortened by one step (:func:`shortened`: fewer seeds, the shared rank
only, fewer draws, one seed, no ensemble) or, at its shortest and over a fair share of the
budget, left out (never ``mm``) (:func:`_within`); a line says each.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from dataclasses import dataclass

import numpy as np

from bernmf._progress import say
from bernmf.api import fit
from bernmf.fitting.stack import stack
from bernmf.inference import get_engine
from bernmf.models.spec import ZeroProbabilityWarning
from bernmf.studies.report.record import Settings

__all__ = [
    "DEFAULT_BUDGET", "FLOPS", "PROBES", "QUICK_BUDGET", "EnginePlan", "Probe", "estimate",
    "floor", "plan_seconds", "plans", "probe", "shortened", "stack_members", "stacking_probe",
]  # fmt: skip

DEFAULT_BUDGET = 600.0
"""Seconds a report aims at by default (``bernmf report --budget``): about what every engine
tuned and scored on a matrix of half a million entries takes on a 2-core machine, once
the slowest are shortened."""

QUICK_BUDGET = 120.0
"""Seconds ``quick=True`` aims at by default, per dataset: its plans at their shortest
already, engines that do not fit are left out (``mm`` never)."""

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

FEWEST_DRAWS = {
    "gibbs": {"num_warmup": 50, "num_samples": 50},
    "nuts": {"num_warmup": 50, "num_samples": 50},
    "svi": {"steps": 300},
}
"""The draws (or steps) that shortening halves the samplers' options down to (``--quick``'s)."""

FLOPS = 1e10
"""Floating-point operations per second that no machine here beats, for :func:`floor`."""

SLACK = 1.5
"""A converged probe fit's seconds times this are the seconds of a fit of the plan: other
seeds and larger ranks may need more iterations."""

MEASURED_SHARE = 0.02
"""The share of the budget that one fit of a convergent engine, stopped at the iterations it
allows, may take to measure how soon the engine converges (:func:`probe`)."""

MEASURED_ITERATIONS = 20
"""Iterations under which that fit is not worth making (its engine is costed at ``max_iter``)."""


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


@dataclass(frozen=True)
class Probe:
    """What probe fits of one engine at one rank measured.

    Attributes
    ----------
    engine : str
    compile : float
        Seconds of compilation (once per shape and rank).
    per_iteration : float
        Run seconds per iteration (or draw, or step).
    measured : float or None
        Run seconds of one full fit with the probed options, when :func:`probe` made one.
    stacking : float
        Seconds per member of a stack on the dataset (:func:`stacking_probe`).
    """

    engine: str
    compile: float
    per_iteration: float
    measured: float | None = None
    stacking: float = 0.0

    def fit_seconds(self, options: dict) -> float:
        """Run seconds of one full fit with ``options`` at the probed rank: the measured
        fit's times :data:`SLACK`, else the iterations (``max_iter``, the draws) times
        :attr:`per_iteration` (an upper bound for engines that stop when converged)."""
        if self.measured is not None:
            return SLACK * self.measured
        return iterations(self.engine, options) * self.per_iteration


def iterations(engine: str, options: dict) -> float:
    """The iterations (or draws, or steps) of a full fit of ``engine`` with ``options``."""
    _, _, full = PROBES.get(engine, STOP_AT_ONCE)
    defaults = {**get_engine(engine).options, **options}
    return sum(float(defaults.get(key, 0) or 0) for key in full)


def probe(Y, split, engine: str, rank: int, options: dict, allowance: float = 0.0) -> Probe:
    """Time ``engine`` at ``rank`` with ``options`` on the training entries by probe fits.

    A probe fit gives the compile time. The engines of :data:`PROBES` (samplers) probe
    with a few draws, again once compiled, their run time per draw counted (for ``nuts``
    times :func:`_deeper`). The others are fitted twice more
    by the same compiled program, stopped after one iteration and after a few (a loose
    tolerance), so that the difference of the two run times is the time of the
    iterations between them, without the fixed cost of a call; then one fit with their
    tolerance, stopped after the iterations that ``allowance`` seconds allow (at least
    :data:`MEASURED_ITERATIONS`, else none), is timed when it converged (``measured``): a
    fit that converges early is not costed at ``max_iter``.
    """
    trial, units, _ = PROBES.get(engine, STOP_AT_ONCE)
    quiet = {"progress": False} if "progress" in get_engine(engine).options else {}

    def probed(extra, trial=trial):
        with warnings.catch_warnings():  # a probe times the engine: the real fits warn
            warnings.simplefilter("ignore", ZeroProbabilityWarning)
            return fit(Y, engine, rank, mask=split.train, **{**options, **quiet, **trial, **extra})

    first = probed({})
    compile_seconds = float(first.timings.get("compile", 0.0))
    if units is not None:  # again, compiled: the first call's run time holds more than draws
        again = probed({})
        per_iteration = again.timings.get("run", 0.0) / units * _deeper(again, options)
        return Probe(engine, compile_seconds, per_iteration)
    once, more = probed({}), probed({"tol": 1e-2})  # one iteration, then a few
    run = more.timings.get("run", 0.0) - once.timings.get("run", 0.0)
    if more.n_iter > once.n_iter and run > 0:
        per_iteration = run / (more.n_iter - once.n_iter)
    else:  # too fast to tell the iterations from the call: the call's time, per iteration
        per_iteration = more.timings.get("run", 0.0) / max(more.n_iter, 1)
    limit = iterations(engine, options)  # a cap above it (a budget of 1e308 s) caps nothing
    cap = int(min(allowance / per_iteration, limit)) if per_iteration > 0 else 0
    if cap < MEASURED_ITERATIONS:
        return Probe(engine, compile_seconds, per_iteration)
    capped = {"max_iter": cap} if cap < limit else {}
    full = probed(capped, trial={})
    measured = float(full.timings.get("run", 0.0)) if full.converged else None
    return Probe(engine, compile_seconds, per_iteration, measured)


def _deeper(probed, options: dict) -> float:
    """How many times a draw of a full ``nuts`` fit costs one of its probe: a probe's few
    warmup draws have shallow trees, a full fit's a quarter of ``2**max_tree_depth``
    leapfrog steps (as :func:`floor` assumes); 1 for other engines."""
    steps = probed.sample_stats.get("n_steps")
    if steps is None or "max_tree_depth" not in get_engine(probed.engine).options:
        return 1.0
    depth = int({**get_engine(probed.engine).options, **options}["max_tree_depth"])
    return max(1.0, 2**depth / 4 / max(float(np.mean(steps)), 1.0))


def estimate(Y, split, engine: str, rank: int, options: dict, fits: int) -> float:
    """Seconds that ``fits`` fits of ``engine`` with ``options`` would take on Y, from probes
    (:func:`probe`): the compile time plus ``fits`` times a full fit's run time."""
    measured = probe(Y, split, engine, rank, options)
    return float(measured.compile + fits * measured.fit_seconds(options))


@dataclass(frozen=True)
class EnginePlan:
    """What one engine runs on one dataset, and its estimated seconds.

    Attributes
    ----------
    engine : str
    ranks : list of int
        The ranks it chooses from on validation (one: nothing to choose).
    priors : list of float
        mm's alpha and beta grid.
    seeds : list of int
        Seeds of its test fits.
    restarts : int
        Members of its ensemble; 0 for none.
    options : dict
        Its engine options.
    estimate : float
        Seconds of its plan before any shortening.
    seconds : float
        Seconds of this plan (:func:`plan_seconds`).
    changes : tuple of str
        What shortening changed, in words ("2 seeds", "K = 4 only", ...).
    """

    engine: str
    ranks: list[int]
    priors: list[float]
    seeds: list[int]
    restarts: int
    options: dict
    estimate: float = float("nan")
    seconds: float = float("nan")
    changes: tuple[str, ...] = ()


def fit_units(plan: EnginePlan, shared_rank: int) -> float:
    """The fits of ``plan``, each counted as its rank over the shared rank (the time of a
    fit grows about linearly with its rank): the tuning fits of every rank (mm: every
    prior too), the test fits of each seed at the largest rank it may choose and again at
    the shared rank (not when one rank and the default prior make them the same), and the
    members of the ensemble of each seed (``seeds + restarts - 1``, shared)."""
    top, seeds = max(plan.ranks) / shared_rank, len(plan.seeds)
    tuned_is_shared = len(plan.ranks) == 1 and plan.ranks[0] == shared_rank and plan.engine != "mm"
    units = seeds * top + (0 if tuned_is_shared else seeds)
    if plan.engine == "mm":
        units += len(plan.priors) ** 2 * sum(plan.ranks) / shared_rank
    elif len(plan.ranks) > 1:
        units += sum(plan.ranks) / shared_rank
    if plan.restarts:
        units += (seeds + plan.restarts - 1) * top
    return units


def stack_members(plan: EnginePlan, shared_rank: int) -> float:
    """The members that ``plan``'s fits add to the stacks of all its seeds: its tuning fits
    and its test fits of the seed (tuned, shared, ensemble) in each seed's stack of all
    engines, and for ``mm`` again in its stack of the mm grid."""
    tuned_is_shared = len(plan.ranks) == 1 and plan.ranks[0] == shared_rank and plan.engine != "mm"
    tuning = len(plan.priors) ** 2 * len(plan.ranks) if plan.engine == "mm" else len(plan.ranks)
    tuning = 0 if len(plan.ranks) == 1 and plan.engine != "mm" else tuning
    per_seed = tuning + 1 + (not tuned_is_shared) + bool(plan.restarts)
    return len(plan.seeds) * per_seed * (2 if plan.engine == "mm" else 1)


def plan_seconds(plan: EnginePlan, measured: Probe, shared_rank: int) -> float:
    """Seconds of ``plan``: a compilation per rank, :func:`fit_units` full fits, and its
    share of the stacks (:func:`stack_members` at :attr:`Probe.stacking`, times
    :data:`SLACK`)."""
    compiles = len({*plan.ranks, shared_rank}) * measured.compile
    stacks = SLACK * stack_members(plan, shared_rank) * measured.stacking
    return compiles + fit_units(plan, shared_rank) * measured.fit_seconds(plan.options) + stacks


def stacking_probe(Y, split, rank: int, members: int = 4) -> float:
    """Seconds per member of a stack on Y's validation entries: :func:`bernmf.stack` of
    ``members`` mm fits stopped after one iteration (as mm's probe), timed. A stack of
    tens of members takes about that many times this (the weights' optimization grows
    with the members)."""
    trial, _, _ = STOP_AT_ONCE
    fits = [fit(Y, "mm", rank, mask=split.train, seed=seed, **trial) for seed in range(members)]
    begin = time.perf_counter()
    stack(fits, Y, validation=split.validation, mask=split.train)
    return (time.perf_counter() - begin) / members


def shortened(plan: EnginePlan, shared_rank: int, quick: bool = False) -> EnginePlan | None:
    """``plan`` shortened by one step, or None at its shortest (``quick``: at once).

    The steps, in order: 2 seeds; the shared rank only (no tuning of the rank); the
    samplers' draws (or svi's steps) halved, down to :data:`FEWEST_DRAWS`; 1 seed; no
    ensemble.
    """
    if quick:
        return None
    if len(plan.seeds) > 2:
        return _changed(plan, "2 seeds", seeds=plan.seeds[:2])
    if len(plan.ranks) > 1:
        return _changed(plan, f"K = {shared_rank} only", ranks=[shared_rank])
    fewest = FEWEST_DRAWS.get(plan.engine, {})
    current = {key: int({**get_engine(plan.engine).options, **plan.options}[key]) for key in fewest}
    if any(current[key] > fewest[key] for key in fewest):
        halved = {key: max(fewest[key], current[key] // 2) for key in fewest}
        words = " + ".join(f"{value} {key.replace('num_', '')}" for key, value in halved.items())
        return _changed(plan, words, options={**plan.options, **halved})
    if len(plan.seeds) > 1:
        return _changed(plan, "1 seed", seeds=plan.seeds[:1])
    if plan.restarts:
        return _changed(plan, "no ensemble", restarts=0)
    return None


def _changed(plan: EnginePlan, words: str, **fields) -> EnginePlan:
    """``plan`` with ``fields`` changed and ``words`` said (the same kind of change said once)."""
    kind = words.split()[-1]  # "seeds", "only", "samples", "steps", "seed", "ensemble"
    changes = tuple(c for c in plan.changes if c.split()[-1] != kind)
    return dataclasses.replace(plan, changes=(*changes, words), **fields)


def plans(data, splits, settings: Settings) -> tuple[dict, list[tuple], list[tuple]]:
    """Every engine's plan on every dataset, within the budget, estimated up front.

    Each engine starts from the whole of ``settings`` (its tuning ranks, seeds, draws and
    ensemble), is probed at the shared rank on each dataset (:func:`probe`; unless the
    :func:`floor` of one fit of its shortest plan is over the budget: then it is left out
    without a probe), and is costed (:func:`plan_seconds`). Then, while the estimates add
    up to more than the budget left after probing, plans are :func:`shortened` or left out
    (:func:`_within`: never ``mm``); with ``quick`` the plans are at their shortest
    already. Lines say the estimates, what was shortened and what was left out.

    Parameters
    ----------
    data : dict of name to array-like of shape (M, N)
    splits : dict of name to Split
    settings : Settings
        Its ``budget`` is the seconds of the whole report.

    Returns
    -------
    plans : dict of dataset name to list of EnginePlan
        The engines kept, in the order of ``settings.engines``.
    left_out : list of (dataset, engine, estimate)
        The engines left out, with the seconds of their shortest plan.
    planned : list of (dataset, engine, estimate, seconds, changes)
        Every engine's seconds in full and as planned (NaN: left out), and what changed
        ("; "-separated).
    """
    begin = time.perf_counter()
    quick, shared, budget = settings.quick, settings.shared_rank, settings.budget
    plan_of, probes = {}, {}
    for name, Y in data.items():
        say(settings.progress, f"report on {name}: probing a stack")
        stacking = stacking_probe(Y, splits[name], shared)
        for engine in settings.engines:
            full = EnginePlan(
                engine, list(settings.ranks), list(settings.priors), list(settings.seeds),
                settings.restarts if engine in settings.ensembles else 0,
                dict(settings.options[engine]),
            )  # fmt: skip
            shortest = full
            while (shorter := shortened(shortest, shared, quick)) is not None:
                shortest = shorter
            least = floor(engine, np.shape(Y), shared, shortest.options, 1)
            if least > budget and engine != "mm":  # not worth a probe
                plan_of[name, engine] = dataclasses.replace(full, estimate=least, seconds=least)
                continue
            say(settings.progress, f"report on {name}: probing {engine} at K = {shared}")
            probes[name, engine] = dataclasses.replace(
                probe(Y, splits[name], engine, shared, full.options, MEASURED_SHARE * budget),
                stacking=stacking,
            )
            seconds = plan_seconds(full, probes[name, engine], shared)
            plan_of[name, engine] = dataclasses.replace(full, estimate=seconds, seconds=seconds)
    out = {key for key in plan_of if key not in probes}
    left = budget - (time.perf_counter() - begin)
    out |= _within(plan_of, probes, [k for k in plan_of if k not in out], left, shared, quick)
    kept = {
        name: [plan_of[name, e] for e in settings.engines if (name, e) not in out]
        for name in data
    }  # fmt: skip
    left_out = [
        (n, e, plan_of[n, e].seconds) for n in data for e in settings.engines if (n, e) in out
    ]
    planned = [
        (n, e, p.estimate, np.nan if (n, e) in out else p.seconds, "; ".join(p.changes))
        for (n, e), p in plan_of.items()
    ]
    _say(settings.progress, kept, left_out, budget, quick)
    return kept, left_out, planned


def _within(
    plan_of: dict, probes: dict, keys: list, budget: float, shared: int, quick: bool
) -> set:
    """Shorten the plans of ``keys`` in ``plan_of`` (in place) until their seconds add up to
    at most ``budget``; returns the keys left out (never ``mm``'s).

    While over: the most expensive plan is shortened by one step; at its shortest, it is
    left out when it takes more than a fair share of the budget (the budget over the plans
    kept), else the most expensive plan that can be shortened is; when none can be, the
    most expensive is left out. So one slow engine does not squeeze all the others to
    their shortest, and an engine is left out only for taking more than its share.
    """

    def shorter(key) -> bool:
        plan = shortened(plan_of[key], shared, quick)
        if plan is None:
            return False
        plan_of[key] = dataclasses.replace(plan, seconds=plan_seconds(plan, probes[key], shared))
        return True

    kept, out = list(keys), set()
    while sum(plan_of[k].seconds for k in kept) > budget:
        order = sorted(kept, key=lambda k: -plan_of[k].seconds)
        first = order[0]
        if shorter(first):
            continue
        fair = budget / len(kept)
        if first[1] != "mm" and plan_of[first].seconds > fair:
            kept.remove(first)
            out.add(first)
            continue
        if any(shorter(key) for key in order[1:]):
            continue
        others = [key for key in order if key[1] != "mm"]
        if not others:  # mm alone, at its shortest, is over the budget
            break
        kept.remove(others[0])
        out.add(others[0])
    return out


def _say(progress: bool, kept: dict, left_out: list, budget: float, quick: bool) -> None:
    """The lines of :func:`plans`: per dataset the estimates, the plans shortened, and the
    engines left out."""
    name_of_budget = f"the {'quick ' if quick else ''}budget of {budget:.0f} s"
    for name, mine in kept.items():
        total = sum(p.seconds for p in mine)
        each = ", ".join(f"{p.engine} {p.seconds:.0f} s" for p in mine)
        say(progress, f"report on {name}: estimated {total:.0f} s ({each})")
        for p in mine:
            if p.changes:
                say(
                    progress,
                    f"report on {name}: {p.engine} shortened to fit {name_of_budget}: "
                    f"{', '.join(p.changes)} (estimated {p.estimate:.0f} s in full)",
                )
    advice = "run it without --quick" if quick else "give a larger --budget"
    for name, engine, seconds in left_out:
        say(
            progress,
            f"report on {name}: leaving out {engine}, estimated {seconds:.0f} s at its shortest, "
            f"so that the engines kept ({sum(p.seconds for p in kept[name]):.0f} s) fit "
            f"{name_of_budget}; {advice}, or name the engines with --engines",
        )
