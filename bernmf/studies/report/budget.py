"""The budget of ``bernmf report``: what each engine runs so that the report fits in it.

:func:`plans` estimates every engine on every dataset up front, before the first fit
that counts: :func:`floor` (from the operations a fit needs) leaves out, without a probe,
an engine that cannot fit; :func:`probe` times the others by probe fits. Each engine's
:class:`EngineSchedule` (its tuning ranks, seeds, draws and ensemble) is costed by
:func:`plan_seconds`; while the estimates add up to more than the budget left, the most
expensive plan is shortened by one step (:func:`shortened`: fewer seeds, the shared rank
only, fewer draws, one seed, no ensemble) or, at its shortest and over a fair share of the
budget, left out (never ``mm``) (:func:`_within`); a line says each.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from dataclasses import dataclass

import numpy as np

from bernmf._progress import say
from bernmf.api import fit
from bernmf.fitting.stack import stack
from bernmf.inference import get_engine
from bernmf.models.spec import ZeroProbabilityWarning
from bernmf.studies.report.contents import Settings

__all__ = [
    "DEFAULT_BUDGET", "FLOPS", "PROBES", "QUICK_BUDGET", "EngineSchedule", "Probe", "estimate",
    "floor", "plan_seconds", "plans", "probe", "scoring_seconds", "shortened",
    "stack_members", "stack_seconds", "stacking_probe",
]  # fmt: skip

DEFAULT_BUDGET = 600.0
"""Seconds a report aims at by default (``bernmf report --budget``): about what every engine
tuned and scored on a matrix of half a million entries takes on a 2-core machine, once
the slowest are shortened."""

QUICK_BUDGET = 120.0
"""Seconds ``quick=True`` aims at by default, per dataset: its plans at their shortest
already, engines that do not fit are left out (``mm`` never)."""

PROBES = {
    "gibbs": (
        {"num_warmup": 2, "num_samples": 2}, {"num_warmup": 10, "num_samples": 10},
        ("num_warmup", "num_samples"),
    ),
    "nuts": (
        {"num_warmup": 2, "num_samples": 2, "num_chains": 1},
        {"num_warmup": 10, "num_samples": 5, "num_chains": 1},
        ("num_warmup", "num_samples"),
    ),
    "svi": ({"steps": 2, "num_draws": 2}, {"steps": 50, "num_draws": 2}, ("steps",)),
}  # fmt: skip
"""Per sampler: the options of a short probe fit and of a longer one, and the options whose
sum is a full fit's draws (or steps). The longer one's draws are those of a full fit in
kind: ``nuts``'s trees deepen as its warmup adapts the step size (on a 150 x 5429 matrix,
about 8 leapfrog steps per draw in a probe of 2 + 2 draws, 47-63 after 50 warmup draws).
``nuts`` probes one chain (its chains run one after the other on a CPU)."""
KEPT = {"svi": ("num_draws", 50)}
"""Per engine whose draws are made once its steps are done (svi, from its guide): the option
that counts them and the draws of a probe that differs from the short one in them alone;
their seconds are counted apart from the steps' (1000 draws of a 150 x 5429 matrix take
about as long as 300 steps)."""
STOP_AT_ONCE = ({"tol": 1e300}, None, ("max_iter",))
"""The other engines probe with a tolerance that stops them after one iteration (``tol`` is
no part of their compiled program, so the fits that follow reuse the probe's) and count
``max_iter``."""

FEWEST_DRAWS = {
    "gibbs": {"num_warmup": 50, "num_samples": 50},
    "nuts": {"num_warmup": 50, "num_samples": 50},
    "svi": {"steps": 300},
}
"""The draws (or steps) that shortening halves the samplers' options down to (``--quick``'s)."""

FLOPS = 1e10
"""Floating-point operations per second that no machine here beats, for :func:`floor`."""

SLACK = 1.5
"""The seconds per member of a stack of four probe fits times this are those of a member of
the report's stacks."""

MEASURED_SHARE = 0.04
"""The share of the budget that the fits of a convergent engine that measure how soon it
converges may take (:func:`probe`)."""

MEASURED_ITERATIONS = 20
"""Iterations under which such a fit is not worth making (its engine is costed at
``max_iter``)."""


def floor(engine: str, shape: tuple[int, int], rank: int, options: dict, fits: int) -> float:
    """Seconds that ``fits`` fits of ``engine`` cannot take less than, from their operations.

    Per iteration (or draw): ``logpca`` a pass over the entries per component (M N K: its
    leading eigenvectors are refined, not an N x N eigenproblem solved), for each
    ``m_grid`` candidate and the refit; ``logsvd`` an SVD (M N min(M, N)); ``nuts`` a
    gradient of 10 operations per entry and component (a draw takes one leapfrog step at
    least; :func:`probe` measures how many); the others a pass over the entries per
    component (M N K). At :data:`FLOPS`, so that an engine whose floor is over budget is
    left out without probing it.
    """
    M, N = shape
    defaults = {**get_engine(engine).options, **options}
    _, _, full = PROBES.get(engine, STOP_AT_ONCE)
    iterations = sum(float(defaults.get(key, 0) or 0) for key in full)
    per_iteration = {
        "logpca": float(M) * N * rank * (len(defaults.get("m_grid") or ()) + 1),
        "logsvd": float(M) * N * min(M, N),
        "nuts": 10.0 * M * N * rank,
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
        Seconds per iteration (or draw, or step; ``nuts``: per draw of one chain).
    measured : float or None
        Seconds of one full fit with the probed options (its compilation aside), when
        :func:`probe` made one that converged.
    stacking : float
        Seconds per member of a stack on the dataset (:func:`stacking_probe`).
    fixed : float
        Seconds of a fit besides its iterations (starting, the call).
    per_kept : float
        Seconds per draw made after the steps (:data:`KEPT`).
    scoring : float
        Seconds of scoring a test fit as the report does (:func:`plans`' ``measure`` and
        the test perplexity).
    """

    engine: str
    compile: float
    per_iteration: float
    measured: float | None = None
    stacking: float = 0.0
    fixed: float = 0.0
    per_kept: float = 0.0
    scoring: float = 0.0

    def fit_seconds(self, options: dict) -> float:
        """Seconds of one full fit with ``options`` at the probed rank, its compilation
        aside: the measured fit's, else :attr:`fixed`, the iterations (``max_iter``, the
        draws of each chain that runs after another) times :attr:`per_iteration` (an upper
        bound for engines that stop when converged) and the draws of :data:`KEPT` times
        :attr:`per_kept`."""
        if self.measured is not None:
            return self.measured
        chains = _chains_in_turn(self.engine, options)
        kept = 0.0
        if self.engine in KEPT:
            kept = float({**get_engine(self.engine).options, **options}[KEPT[self.engine][0]])
        return (
            self.fixed
            + chains * iterations(self.engine, options) * self.per_iteration
            + kept * self.per_kept
        )


def iterations(engine: str, options: dict) -> float:
    """The iterations (or draws, or steps) of a full fit of ``engine`` with ``options``."""
    _, _, full = PROBES.get(engine, STOP_AT_ONCE)
    defaults = {**get_engine(engine).options, **options}
    return sum(float(defaults.get(key, 0) or 0) for key in full)


def _chains_in_turn(engine: str, options: dict) -> int:
    """How many times one chain's draws a ``nuts`` fit with ``options`` runs (its chains
    one after the other: ``"sequential"``, a CPU's default); 1 for the other engines."""
    if engine != "nuts":
        return 1
    from bernmf.inference.nuts import default_chain_method

    chains = int({**get_engine(engine).options, **options}["num_chains"])
    method = options.get("chain_method") or default_chain_method(chains)
    return chains if method == "sequential" else 1


def probe(Y, split, engine: str, rank: int, options: dict, allowance: float = 0.0) -> Probe:
    """Time ``engine`` at ``rank`` with ``options`` on the training entries by probe fits.

    Each probe fit is timed from call to return, its compilation aside, so that its
    seconds hold what a fit of the report holds (starting, drawing). A first probe fit
    gives the compile time. The samplers (:data:`PROBES`) are probed again, compiled, with
    a few draws, and with more (a program of its own): the difference of the two times
    over the difference of their draws is the seconds per draw (the longer probe's
    ``nuts`` trees as deep as a fit's, after some warmup: measured, not assumed), the rest
    the seconds of the call; the longer probe is left out when the shorter one says it
    would take more than ``allowance`` seconds. The others are fitted twice more by the
    same compiled program, stopped after one iteration and after a few (a loose
    tolerance), so that the difference of the two times is the time of the iterations
    between them; then fits with their tolerance, stopped after the iterations that
    ``allowance`` seconds allow (at least :data:`MEASURED_ITERATIONS`, else none; the
    first of them at least that many while the rate of the first few iterations, a rough
    one, says they take at most four times ``allowance``), are timed: the first that converged
    is the fit's time (``measured``: a fit that converges early is not costed at
    ``max_iter``); one that did not converge gives the seconds per iteration (over many
    iterations, nearer a fit's than the first few), and the next fit the iterations that
    the rest of ``allowance`` allows.
    """
    short, longer, _ = PROBES.get(engine, STOP_AT_ONCE)
    quiet = {"progress": False} if "progress" in get_engine(engine).options else {}

    def probed(extra, trial=short):
        """The fit, and its seconds from call to return without its compilation."""
        begin = time.perf_counter()
        with warnings.catch_warnings():  # a probe times the engine: the real fits warn
            warnings.simplefilter("ignore", ZeroProbabilityWarning)
            made = fit(Y, engine, rank, mask=split.train, **{**options, **quiet, **trial, **extra})
        return made, time.perf_counter() - begin - float(made.timings.get("compile", 0.0))

    first, _ = probed({})
    compile_seconds = float(first.timings.get("compile", 0.0))
    if longer is not None:  # again, compiled: the first call's time holds more than draws
        _, seconds = probed({})
        units = iterations(engine, short)
        per_draw, fixed, per_kept = seconds / units, 0.0, 0.0
        if (iterations(engine, longer) - units) * per_draw <= allowance:
            _, more = probed({}, trial=longer)
            per_draw = more / iterations(engine, longer)  # the difference lost in the noise
            if more > seconds + units * per_draw:
                per_draw = (more - seconds) / (iterations(engine, longer) - units)
                fixed = max(seconds - units * per_draw, 0.0)
        if engine in KEPT:
            key, draws = KEPT[engine]
            _, drawn = probed({key: draws})
            per_kept = max(drawn - seconds, 0.0) / (draws - short[key])
        return Probe(engine, compile_seconds, per_draw, fixed=fixed, per_kept=per_kept)
    (once, seconds), (more, more_seconds) = probed({}), probed({"tol": 1e-2})  # 1, then a few
    run = more_seconds - seconds
    if more.n_iter > once.n_iter and run > 0:
        per_iteration = run / (more.n_iter - once.n_iter)
    else:  # too fast to tell the iterations from the call: the call's time, per iteration
        per_iteration = more_seconds / max(more.n_iter, 1)
    limit, left, cap, fixed = iterations(engine, options), allowance, 0, 0.0
    least = min(MEASURED_ITERATIONS, int(limit))
    while per_iteration > 0:  # a cap above limit (a budget of 1e308 s) caps nothing
        last, cap = cap, int(min(left / per_iteration, limit))
        if not last and least * per_iteration <= 4 * left:  # the first few: a rough rate
            cap = max(cap, least)
        if cap < least or cap <= last:
            break
        full, spent = probed({"max_iter": cap} if cap < limit else {}, trial={})
        if full.converged:
            return Probe(engine, compile_seconds, per_iteration, spent)
        left -= spent  # the iterations after the first, apart from the call (``once``'s)
        per_iteration = max(spent - seconds, 0.0) / max(full.n_iter - once.n_iter, 1)
        fixed = max(seconds - once.n_iter * per_iteration, 0.0)
        if cap >= limit or full.n_iter < cap:  # stopped otherwise: no fit to measure
            break
    return Probe(engine, compile_seconds, per_iteration, fixed=fixed)


def estimate(
    Y, split, engine: str, rank: int, options: dict, fits: int, allowance: float = math.inf
) -> float:
    """Seconds that ``fits`` fits of ``engine`` with ``options`` would take on Y, from probes
    (:func:`probe`, given ``allowance`` seconds: by default a convergent engine's measuring
    fit runs to its end): the compile time plus ``fits`` times a full fit's seconds."""
    measured = probe(Y, split, engine, rank, options, allowance)
    return float(measured.compile + fits * measured.fit_seconds(options))


@dataclass(frozen=True)
class EngineSchedule:
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
        What shortening changed, in words ("2 seeds", "K = 4 only", "625 of 5000 steps",
        ...).
    asked : dict, optional
        The engine options before shortening (None: ``options``).
    probe : Probe, optional
        What its probe fits measured (None: not probed).
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
    asked: dict | None = None
    probe: Probe | None = None

    @property
    def draws(self) -> str:
        """The samplers' draws (svi's steps) shortening left, of those asked, in words
        ("625 of 5000 steps", "50 of 1000 warmup + 50 of 1000 samples"); "" when none
        were cut."""
        fewest = FEWEST_DRAWS.get(self.engine, {})
        defaults = get_engine(self.engine).options
        now = {key: int({**defaults, **self.options}[key]) for key in fewest}
        given = self.options if self.asked is None else self.asked
        asked = {key: int({**defaults, **given}[key]) for key in fewest}
        if now == asked:
            return ""
        return " + ".join(f"{now[key]} of {asked[key]} {key.replace('num_', '')}" for key in fewest)


def fit_units(
    plan: EngineSchedule, shared_rank: int, chosen: tuple[int, bool] | None = None
) -> float:
    """The fits of ``plan``, each counted as its rank over the shared rank (the time of a
    fit grows about linearly with its rank): the tuning fits of every rank (mm: every
    prior too), the test fits of each seed at the largest rank it may choose and again at
    the shared rank (not when one rank and the default prior make them the same), and the
    members of the ensemble of each seed (``seeds + restarts - 1``, shared). Once the
    tuning has chosen, ``chosen`` says the rank of the test fits and whether the shared
    ones were made apart."""
    tuned_is_shared = len(plan.ranks) == 1 and plan.ranks[0] == shared_rank and plan.engine != "mm"
    top, seeds = max(plan.ranks) / shared_rank, len(plan.seeds)
    if chosen is not None:
        top, tuned_is_shared = chosen[0] / shared_rank, not chosen[1]
    units = seeds * top + (0 if tuned_is_shared else seeds)
    if plan.engine == "mm":
        units += len(plan.priors) ** 2 * sum(plan.ranks) / shared_rank
    elif len(plan.ranks) > 1:
        units += sum(plan.ranks) / shared_rank
    if plan.restarts:
        units += (seeds + plan.restarts - 1) * top
    return units


def stack_members(plan: EngineSchedule, shared_rank: int) -> float:
    """The members that ``plan``'s fits add to the stacks of all its seeds: its tuning fits
    and its test fits of the seed (tuned, shared, ensemble) in each seed's stack of all
    engines, and for ``mm`` again in its stack of the mm grid."""
    tuned_is_shared = len(plan.ranks) == 1 and plan.ranks[0] == shared_rank and plan.engine != "mm"
    tuning = len(plan.priors) ** 2 * len(plan.ranks) if plan.engine == "mm" else len(plan.ranks)
    tuning = 0 if len(plan.ranks) == 1 and plan.engine != "mm" else tuning
    per_seed = tuning + 1 + (not tuned_is_shared) + bool(plan.restarts)
    return len(plan.seeds) * per_seed * (2 if plan.engine == "mm" else 1)


def plan_seconds(
    plan: EngineSchedule, measured: Probe, shared_rank: int, chosen: tuple[int, bool] | None = None
) -> float:
    """Seconds of ``plan``: a compilation per rank, :func:`fit_units` full fits (``chosen``
    as there), the scoring of its test fits (:attr:`Probe.scoring`), and its share of the
    stacks (:func:`stack_seconds`)."""
    compiles = len({*plan.ranks, shared_rank}) * measured.compile
    fits = fit_units(plan, shared_rank, chosen) * measured.fit_seconds(plan.options)
    apart = not (
        len(plan.ranks) == 1 and plan.ranks[0] == shared_rank and plan.engine != "mm"
        if chosen is None
        else not chosen[1]
    )
    scoring = len(plan.seeds) * (1 + apart) * measured.scoring  # each test fit, scored
    return compiles + fits + scoring + stack_seconds(plan, measured, shared_rank)


def stack_seconds(plan: EngineSchedule, measured: Probe, shared_rank: int) -> float:
    """``plan``'s share of the stacks: :func:`stack_members` at :attr:`Probe.stacking`,
    times :data:`SLACK`."""
    return SLACK * stack_members(plan, shared_rank) * measured.stacking


def scoring_seconds(Y, split, engine: str, rank: int, options: dict, measure=None) -> float:
    """Seconds of scoring one test fit of ``engine`` as the report does: its test perplexity,
    and ``measure(fit)`` (for a sampler, the ESS of its draws), timed on a short probe fit
    (few draws: for a sampler, less than a fit's)."""
    short, _, _ = PROBES.get(engine, STOP_AT_ONCE)
    quiet = {"progress": False} if "progress" in get_engine(engine).options else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ZeroProbabilityWarning)
        made = fit(Y, engine, rank, mask=split.train, **{**options, **quiet, **short})
        begin = time.perf_counter()
        made.perplexity(Y, split.test)
        if measure is not None:
            measure(made)
    return time.perf_counter() - begin


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


def shortened(plan: EngineSchedule, shared_rank: int, quick: bool = False) -> EngineSchedule | None:
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
        asked = plan.options if plan.asked is None else plan.asked
        fewer = dataclasses.replace(plan, options={**plan.options, **halved}, asked=asked)
        return _changed(fewer, fewer.draws)
    if len(plan.seeds) > 1:
        return _changed(plan, "1 seed", seeds=plan.seeds[:1])
    if plan.restarts:
        return _changed(plan, "no ensemble", restarts=0)
    return None


def _changed(plan: EngineSchedule, words: str, **fields) -> EngineSchedule:
    """``plan`` with ``fields`` changed and ``words`` said (the same kind of change said once)."""
    kind = words.split()[-1]  # "seeds", "only", "samples", "steps", "seed", "ensemble"
    changes = tuple(c for c in plan.changes if c.split()[-1] != kind)
    return dataclasses.replace(plan, changes=(*changes, words), **fields)


def plans(data, splits, settings: Settings, measure=None) -> tuple[dict, list[tuple], list[tuple]]:
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
    measure : callable, optional
        What the report measures of each test fit besides its test perplexity
        (``measure(fit) -> dict``): timed with it on a probe fit (:func:`scoring_seconds`).

    Returns
    -------
    plans : dict of dataset name to list of EngineSchedule
        The engines kept, in the order of ``settings.engines``.
    left_out : list of (dataset, engine, estimate)
        The engines left out, with the seconds of their shortest plan.
    planned : list of (dataset, engine, estimate, seconds, stacks, changes)
        Every engine's seconds in full and as planned (NaN: left out), the share of the
        stacks in those (NaN: left out), and what changed ("; "-separated).
    """
    begin = time.perf_counter()
    quick, shared, budget = settings.quick, settings.shared_rank, settings.budget
    plan_of, probes = {}, {}
    for name, Y in data.items():
        say(settings.progress, f"report on {name}: probing a stack")
        stacking = stacking_probe(Y, splits[name], shared)
        for engine in settings.engines:
            full = EngineSchedule(
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
            probed = probe(Y, splits[name], engine, shared, full.options, MEASURED_SHARE * budget)
            probes[name, engine] = dataclasses.replace(
                probed, stacking=stacking,
                scoring=scoring_seconds(Y, splits[name], engine, shared, full.options, measure),
            )  # fmt: skip
            seconds = plan_seconds(full, probes[name, engine], shared)
            plan_of[name, engine] = dataclasses.replace(
                full, estimate=seconds, seconds=seconds, probe=probes[name, engine]
            )
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
        (n, e, p.estimate, np.nan, np.nan, "; ".join(p.changes))
        if (n, e) in out
        else (
            n, e, p.estimate, p.seconds, stack_seconds(p, probes[n, e], shared),
            "; ".join(p.changes),
        )
        for (n, e), p in plan_of.items()
    ]  # fmt: skip
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
    while kept and sum(plan_of[k].seconds for k in kept) > budget:  # (probes may spend it all)
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
