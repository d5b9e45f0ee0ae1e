"""The budget of ``bernmf report``: what each engine runs so that the report fits in it.

:func:`plans` estimates every engine on every dataset up front, before the first fit
that counts: :func:`floor` (from the operations a fit needs) leaves out, without a probe,
an engine that cannot fit; :func:`probe` times the others by probe fits. Each engine's
:class:`EngineSchedule` (its tuning ranks, seeds, draws and ensemble) is costed by
:func:`plan_seconds`; while the estimates add up to more than the budget left, the most
expensive plan is shortened by one step (:func:`shortened`: fewer seeds, the shared rank
only, fewer draws, one seed, no ensemble) or, at its shortest and over a fair share of the
budget, left out (never ``mm``) (:func:`_within`); a line says each. Once an engine's tuning
fits have run, its later steps are costed from their seconds (:func:`tuning_fit_seconds`).
Every time is on the report's clock (``Settings.clock``: wall-clock, or CPU seconds).
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from bernmf._progress import say
from bernmf.api import fit
from bernmf.data.observed import as_observed
from bernmf.fitting.runner import fit_settings
from bernmf.fitting.stack import stack
from bernmf.inference import get_engine
from bernmf.models import Prior
from bernmf.models.spec import ZeroProbabilityWarning
from bernmf.studies.report.contents import Settings

__all__ = [
    "DEFAULT_BUDGET", "FLOPS", "PROBES", "QUICK_BUDGET", "EngineSchedule", "Probe", "estimate",
    "floor", "plan_seconds", "plans", "probe", "scoring_seconds", "seed_members", "shortened",
    "stack_members", "stack_seconds", "stacking_probe", "stacking_seconds", "timed",
    "tuning_fit_seconds", "tuning_probe",
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
        {"num_warmup": 25, "num_samples": 5, "num_chains": 1},
        ("num_warmup", "num_samples"),
    ),
    "svi": ({"steps": 2, "num_draws": 2}, {"steps": 50, "num_draws": 2}, ("steps",)),
}  # fmt: skip
"""Per sampler: the options of a short probe fit and of a longer one, and the options whose
sum is a full fit's draws (or steps). The longer one's draws are those of a full fit in
kind: ``nuts``'s step size is adapted by a warmup of 25 draws about as by a fit's (on a
150 x 5429 matrix, its kept draws then take 15-31 leapfrog steps, those of a 50 + 50 fit
31-63; after a warmup of 10, 127; in a probe of 2 + 2 draws, 1). ``nuts`` probes one chain
(its chains run one after the other on a CPU)."""
DEEPENING = ("nuts",)
"""Samplers whose short probe's draws are cheaper than a fit's (``nuts``'s take a leapfrog
step each): their seconds per draw are the longer probe's over all its draws, the short
probe's seconds those of the call. On a 150 x 5429 matrix (CPU seconds, one chain): 2 + 2
draws 0.4 s, 25 + 5 draws 29-30 s, a fit of 50 + 50 draws 72-91 s: this costs that fit at
1.0-1.4 times what it took. A probe of 10 + 5 draws (19-21 s: its kept draws the deepest)
had costed it at 1.5-1.7 times, and at 2.0-2.3 counting the 11 draws between the probes
alone, with the rest the call's."""
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

STACK_GROWTH = 0.5
"""A member of a stack of n members costs the probe stack's seconds per member times
(n / its members) to this power (:func:`stacking_seconds`). Measured in CPU seconds on one
core, 150 x 5429 vote matrix: stacks of mm's grid alone grow about linearly (9 fits 0.06 s,
27 fits 0.22 s), stacks of converged fits of five engines about as n**1.8 (9: 0.06 s, 18:
0.19 s, 42: 1.0 s), the report's stacks hold both (about 30 mm fits of about 50); at 0.5
their 4.4 s were estimated 4.2 s, at 0 (linear) 1.9 s."""

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
        Seconds per member of a stack on the dataset (:func:`stacking_probe`) of
        :attr:`stacked` members.
    stacked : int
        The members of that stack.
    stack_size : float
        The members of each seed's stack of all engines in the report, its plans in full
        (:func:`plans`): the size :func:`stack_seconds` costs a member at.
    tuning : float or None
        Seconds of the tuning fits of one rank at the probed rank, made as the report makes
        them (``mm``: its grid of priors in one call; :func:`tuning_probe`); None: not
        timed (the fits of the priors at :meth:`fit_seconds` each).
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
    stacked: int = 1
    stack_size: float = 1.0
    tuning: float | None = None
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


def probe(
    Y, split, engine: str, rank: int, options: dict, allowance: float = 0.0,
    clock: Callable[[], float] = time.perf_counter,
) -> Probe:  # fmt: skip
    """Time ``engine`` at ``rank`` with ``options`` on the training entries by probe fits.

    Each probe fit is timed on ``clock`` from call to return, its compilation aside
    (:func:`timed`), so that its seconds hold what a fit of the report holds (starting,
    drawing). A first probe fit gives the compile time. The samplers (:data:`PROBES`) are
    probed again, compiled, with a few draws, and with more (a program of its own): the
    difference of the two times over the difference of their draws is the seconds per
    draw, the rest the seconds of the call (:data:`DEEPENING`: the longer probe's seconds
    over all its draws, its trees deeper than the short one's: measured, not assumed); the
    longer probe is left out when the shorter one says it would take more than
    ``allowance`` seconds. The others are fitted twice more by the
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
        """The fit, its seconds from call to return without its compilation, and those."""
        given = {**options, **quiet, **trial, **extra}
        with warnings.catch_warnings():  # a probe times the engine: the real fits warn
            warnings.simplefilter("ignore", ZeroProbabilityWarning)
            return timed(
                lambda: fit(Y, engine, rank, mask=split.train, **given),
                lambda made: float(made.timings.get("compile", 0.0)),
                clock,
            )

    _, _, compile_seconds = probed({})
    if longer is not None:  # again, compiled: the first call's time holds more than draws
        _, seconds, _ = probed({})
        units = iterations(engine, short)
        per_draw, fixed, per_kept = seconds / units, 0.0, 0.0
        if (iterations(engine, longer) - units) * per_draw <= allowance:
            _, more, _ = probed({}, trial=longer)
            per_draw = more / iterations(engine, longer)  # the difference lost in the noise
            if engine in DEEPENING:
                per_draw = max(more - seconds, 0.0) / iterations(engine, longer)
                fixed = seconds
            elif more > seconds + units * per_draw:
                per_draw = (more - seconds) / (iterations(engine, longer) - units)
                fixed = max(seconds - units * per_draw, 0.0)
        if engine in KEPT:
            key, draws = KEPT[engine]
            _, drawn, _ = probed({key: draws})
            per_kept = max(drawn - seconds, 0.0) / (draws - short[key])
        return Probe(engine, compile_seconds, per_draw, fixed=fixed, per_kept=per_kept)
    (once, seconds, _), (more, more_seconds, _) = probed({}), probed({"tol": 1e-2})  # 1, a few
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
        full, spent, _ = probed({"max_iter": cap} if cap < limit else {}, trial={})
        if full.converged:
            return Probe(engine, compile_seconds, per_iteration, spent)
        left -= spent  # the iterations after the first, apart from the call (``once``'s)
        per_iteration = max(spent - seconds, 0.0) / max(full.n_iter - once.n_iter, 1)
        fixed = max(seconds - once.n_iter * per_iteration, 0.0)
        if cap >= limit or full.n_iter < cap:  # stopped otherwise: no fit to measure
            break
    return Probe(engine, compile_seconds, per_iteration, fixed=fixed)


def timed(call: Callable, compiled: Callable, clock: Callable[[], float]) -> tuple:
    """``call()`` timed on ``clock``: its result, its seconds without its compilation, and
    those of its compilation. ``compiled(result)`` gives the compilation's wall-clock
    seconds (as a fit times them), counted on ``clock`` at the call's rate of its seconds
    per wall-clock second (on the wall clock, as they are; on ``time.process_time``, the
    CPU seconds of the call in that share)."""
    begin, wall = clock(), time.perf_counter()
    made = call()
    seconds, wall = clock() - begin, time.perf_counter() - wall
    share = min(compiled(made) / wall, 1.0) if wall > 0 else 0.0
    return made, seconds * (1.0 - share), seconds * share


def estimate(
    Y, split, engine: str, rank: int, options: dict, fits: int, allowance: float = math.inf,
    clock: Callable[[], float] = time.perf_counter,
) -> float:  # fmt: skip
    """Seconds that ``fits`` fits of ``engine`` with ``options`` would take on Y, from probes
    (:func:`probe`, given ``allowance`` seconds: by default a convergent engine's measuring
    fit runs to its end, on ``clock``): the compile time plus ``fits`` times a full fit's
    seconds."""
    measured = probe(Y, split, engine, rank, options, allowance, clock)
    return float(measured.compile + fits * measured.fit_seconds(options))


def tuning_probe(
    Y, split, engine: str, rank: int, options: dict, priors: list[float],
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[float, list]:  # fmt: skip
    """Seconds on ``clock`` of ``engine``'s tuning fits at ``rank`` as the report makes them
    (:func:`bernmf.studies.report.run._tuning`): ``mm`` at every (alpha, beta) pair of
    ``priors``, in one call (:func:`bernmf.fitting.runner.fit_settings`, seed 0), each scored
    on the validation entries. Its fits run one after the other on a CPU, each until it
    converges: at priors far from the default one they take more iterations (on a
    150 x 5429 matrix at K = 4, 18 to 39) than the probe's fit at the default. Returns the
    seconds (their compilation aside) and the fits."""
    made = get_engine(engine)
    settings = [made.prior_for(Prior(a, b), rank) for a in priors for b in priors]
    train = as_observed(Y, split.train)
    held_out = as_observed(Y, split.validation, warn_empty=False)
    quiet = {"progress": False} if "progress" in made.options else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ZeroProbabilityWarning)
        fitted, seconds, _ = timed(
            lambda: fit_settings(
                made, train, rank, settings, [0], made.with_defaults({**options, **quiet}), held_out
            ),
            lambda fitted: sum(float(m.fit.timings.get("compile", 0.0)) for m in fitted),
            clock,
        )
    return seconds, [m.fit for m in fitted]


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


def _tuned_is_shared(
    plan: EngineSchedule, shared_rank: int, chosen: tuple[int, bool] | None = None
) -> bool:
    """Whether ``plan``'s test fits at the tuned setting are its shared ones (one rank, the
    shared one, no prior tuned); once the tuning has chosen, ``chosen`` (the rank of the
    test fits, whether the shared ones were made apart) says it."""
    if chosen is not None:
        return not chosen[1]
    return len(plan.ranks) == 1 and plan.ranks[0] == shared_rank and plan.engine != "mm"


def tuning_seconds(plan: EngineSchedule, measured: Probe, shared_rank: int) -> float:
    """Seconds of ``plan``'s tuning fits: at each rank of its grid, those of the probed rank
    (:attr:`Probe.tuning`, else its settings' fits of one chain at :meth:`Probe.fit_seconds`
    each: ``mm``'s alpha x beta pairs, one fit for the others) in proportion to the rank;
    none when it tunes nothing (one rank, no prior tuned)."""
    if plan.engine != "mm" and len(plan.ranks) == 1:
        return 0.0
    one_rank = measured.tuning
    if one_rank is None:
        chain = {"num_chains": 1} if "num_chains" in get_engine(plan.engine).options else {}
        settings = len(plan.priors) ** 2 if plan.engine == "mm" else 1
        one_rank = settings * measured.fit_seconds({**plan.options, **chain})
    return one_rank * sum(plan.ranks) / shared_rank


def later_seconds(
    plan: EngineSchedule,
    measured: Probe,
    shared_rank: int,
    chosen: tuple[int, bool] | None = None,
    tuned: Mapping[int, float] | None = None,
) -> float:
    """Seconds of ``plan``'s steps after its tuning, its test fits: those of each seed at
    the largest rank it may choose and again at the shared rank (not when they are the same
    fits), and the members of the ensemble of each seed (``seeds + restarts - 1``, shared).
    Once the tuning has chosen, ``chosen`` says the rank of the test fits and whether the
    shared ones were made apart.

    A fit costs :meth:`Probe.fit_seconds` in proportion to its rank (the time of a fit
    grows about linearly with it), or, at a rank of ``tuned`` (:func:`tuning_fit_seconds`
    of the engine's tuning fits, one chain each), their seconds times the chains that run
    one after the other.
    """
    chains = _chains_in_turn(plan.engine, plan.options)

    def one(rank: int) -> float:
        if tuned is not None and rank in tuned:
            return chains * tuned[rank]
        return rank / shared_rank * measured.fit_seconds(plan.options)

    top, seeds = max(plan.ranks) if chosen is None else chosen[0], len(plan.seeds)
    shared = 0 if _tuned_is_shared(plan, shared_rank, chosen) else seeds * one(shared_rank)
    ensemble = (seeds + plan.restarts - 1) * one(top) if plan.restarts else 0.0
    return seeds * one(top) + shared + ensemble


def tuning_fit_seconds(fits, seconds: float) -> dict[int, float]:
    """Seconds of a fit at each rank of ``fits`` (an engine's tuning fits, which took
    ``seconds`` on the report's clock, their compilation aside: :func:`timed`): those
    shared among them in proportion to their run seconds (so a fit holds its part of the
    scoring too), the mean per rank (``mm``: over its priors). What :func:`later_seconds`
    costs the engine's later steps by."""
    ranks = np.array([f.rank for f in fits])
    run = np.array([float(f.timings.get("run", 0.0)) for f in fits])
    share = seconds * (run / run.sum() if run.sum() > 0 else np.full(len(fits), 1 / len(fits)))
    return {int(rank): float(share[ranks == rank].mean()) for rank in np.unique(ranks)}


def seed_members(plan: EngineSchedule, shared_rank: int) -> int:
    """The members that ``plan``'s fits add to each seed's stack of all engines: its tuning
    fits (``mm``: every prior at every rank; the others' ranks, when several) and its test
    fits of the seed (tuned, shared when made apart, the ensemble)."""
    if plan.engine == "mm":
        tuning = len(plan.priors) ** 2 * len(plan.ranks)
    else:
        tuning = len(plan.ranks) if len(plan.ranks) > 1 else 0
    return tuning + 1 + (not _tuned_is_shared(plan, shared_rank)) + bool(plan.restarts)


def stack_members(plan: EngineSchedule, shared_rank: int) -> float:
    """The members that ``plan``'s fits add to the stacks of all its seeds: those of each
    seed's stack of all engines (:func:`seed_members`), and for ``mm`` again in its stack
    of the mm grid."""
    return len(plan.seeds) * seed_members(plan, shared_rank) * (2 if plan.engine == "mm" else 1)


def plan_seconds(
    plan: EngineSchedule,
    measured: Probe,
    shared_rank: int,
    chosen: tuple[int, bool] | None = None,
    tuned: Mapping[int, float] | None = None,
) -> float:
    """Seconds of ``plan``: a compilation per rank, its tuning (:func:`tuning_seconds`), its
    test fits (:func:`later_seconds`, ``chosen`` and ``tuned`` as there), the scoring of its
    test fits (:attr:`Probe.scoring`), and its share of the stacks (:func:`stack_seconds`)."""
    compiles = len({*plan.ranks, shared_rank}) * measured.compile
    apart = not _tuned_is_shared(plan, shared_rank, chosen)
    scoring = len(plan.seeds) * (1 + apart) * measured.scoring  # each test fit, scored
    return (
        compiles
        + tuning_seconds(plan, measured, shared_rank)
        + later_seconds(plan, measured, shared_rank, chosen, tuned)
        + scoring
        + stack_seconds(plan, measured, shared_rank)
    )


def stack_seconds(plan: EngineSchedule, measured: Probe, shared_rank: int) -> float:
    """``plan``'s share of the stacks: :func:`stack_members` at the seconds per member of a
    stack of :attr:`Probe.stack_size` members (:func:`stacking_seconds`)."""
    size = measured.stack_size
    return stack_members(plan, shared_rank) * stacking_seconds(measured, size) / size


def stacking_seconds(measured: Probe, members: float) -> float:
    """Seconds of a stack of ``members`` members: :attr:`Probe.stacking` a member, times
    (members over :attr:`Probe.stacked`) to the power :data:`STACK_GROWTH`."""
    return members * measured.stacking * (members / measured.stacked) ** STACK_GROWTH


def scoring_seconds(
    Y, split, engine: str, rank: int, options: dict, measure=None,
    clock: Callable[[], float] = time.perf_counter,
) -> float:  # fmt: skip
    """Seconds of scoring one test fit of ``engine`` as the report does: its test perplexity,
    and ``measure(fit)`` (for a sampler, the ESS of its draws), timed on ``clock`` on a
    short probe fit (few draws: for a sampler, less than a fit's)."""
    short, _, _ = PROBES.get(engine, STOP_AT_ONCE)
    quiet = {"progress": False} if "progress" in get_engine(engine).options else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ZeroProbabilityWarning)
        made = fit(Y, engine, rank, mask=split.train, **{**options, **quiet, **short})
        begin = clock()
        made.perplexity(Y, split.test)
        if measure is not None:
            measure(made)
    return clock() - begin


def stacking_probe(
    Y, split, rank: int, fits=(), clock: Callable[[], float] = time.perf_counter
) -> tuple[float, int]:
    """Seconds per member on ``clock`` of a stack on Y's validation entries, and its
    members: :func:`bernmf.stack` of ``fits`` (converged fits: :func:`tuning_probe`'s), or,
    without them, of four ``mm`` fits stopped after one iteration (as mm's probe), timed.
    The weights of converged fits take longer to find (on a 150 x 5429 matrix, unpinned,
    0.07-0.22 CPU seconds a member for stacks of 4 to 48 converged ``mm`` fits, 0.03-0.08
    for fits of one iteration), and of more fits longer a member (:data:`STACK_GROWTH`)."""
    if len(fits) < 2:
        trial, _, _ = STOP_AT_ONCE
        fits = [fit(Y, "mm", rank, mask=split.train, seed=seed, **trial) for seed in range(4)]
    begin = clock()
    stack(list(fits), Y, validation=split.validation, mask=split.train)
    return (clock() - begin) / len(fits), len(fits)


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
    without a probe; ``mm`` also as it is tuned, :func:`tuning_probe`, whose fits then
    time a stack, :func:`stacking_probe`), and is costed (:func:`plan_seconds`), every
    time on ``settings.clock``. Then, while the estimates add
    up to more than the budget left after probing, plans are :func:`shortened` or left out
    (:func:`_within`: never ``mm``); with ``quick`` the plans are at their shortest
    already. Lines say the estimates, what was shortened and what was left out.

    Parameters
    ----------
    data : dict of name to Observed of shape (M, N)
        Each dataset checked once (:func:`bernmf.studies.report.run.checked`).
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
    clock = settings.clock
    begin = clock()
    quick, shared, budget = settings.quick, settings.shared_rank, settings.budget
    plan_of, probes = {}, {}
    for name, Y in data.items():
        converged = ()  # mm's tuning probe's fits, for the stacking probe
        for engine in settings.engines:
            full = EngineSchedule(
                engine, list(settings.ranks), list(settings.priors), list(settings.seeds),
                settings.restarts if engine in settings.ensembles else 0,
                dict(settings.options[engine]),
            )  # fmt: skip
            shortest = full
            while (shorter := shortened(shortest, shared, quick)) is not None:
                shortest = shorter
            least = floor(engine, Y.shape, shared, shortest.options, 1)
            if least > budget and engine != "mm":  # not worth a probe
                plan_of[name, engine] = dataclasses.replace(full, estimate=least, seconds=least)
                continue
            say(settings.progress, f"report on {name}: probing {engine} at K = {shared}")
            allowance = MEASURED_SHARE * budget
            probed = probe(Y, splits[name], engine, shared, full.options, allowance, clock)
            if engine == "mm" and len(full.priors) > 1:  # its tuning: a fit per prior
                settings_seconds = len(full.priors) ** 2 * probed.fit_seconds(full.options)
                if settings_seconds <= allowance:
                    say(settings.progress, f"report on {name}: probing mm's tuning at K = {shared}")
                    tuning, converged = tuning_probe(
                        Y, splits[name], engine, shared, full.options, full.priors, clock
                    )
                    probed = dataclasses.replace(probed, tuning=tuning)
            scoring = scoring_seconds(Y, splits[name], engine, shared, full.options, measure, clock)
            probes[name, engine] = dataclasses.replace(probed, scoring=scoring)
            plan_of[name, engine] = full
        say(settings.progress, f"report on {name}: probing a stack")
        stacking, stacked = stacking_probe(Y, splits[name], shared, converged, clock)
        mine = [key for key in probes if key[0] == name]
        size = 1 + sum(seed_members(plan_of[key], shared) for key in mine)  # + the baseline
        for key in mine:
            probes[key] = dataclasses.replace(
                probes[key], stacking=stacking, stacked=stacked, stack_size=size
            )
            seconds = plan_seconds(plan_of[key], probes[key], shared)
            plan_of[key] = dataclasses.replace(
                plan_of[key], estimate=seconds, seconds=seconds, probe=probes[key]
            )
    out = {key for key in plan_of if key not in probes}
    left = budget - (clock() - begin)
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
