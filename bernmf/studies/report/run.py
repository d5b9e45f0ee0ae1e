"""The comparison as users read it: every engine, tuned on validation, scored on test.

:func:`run` fits each engine on each dataset's training entries (the paper's split),
chooses its rank (and, for ``mm``, its Beta prior) on the validation entries only (its grid
a study of one seed scored on them: :func:`_tuning`), then scores several seeds on the test
entries, at that tuned setting and at one rank shared by all engines (:func:`bernmf.compare`,
a study too); ensembles (:func:`bernmf.compare` with ``restarts``) are rows of their own, and
so are the stacks of the fits already made (``"stacked: all engines"``, ``"stacked: mm
grid"``: :func:`bernmf.stack` on the validation entries, per seed). Every fit goes through
the one study runner, :func:`bernmf.studies.runner.running.run`.
The steps of a dataset are functions over records (:class:`Settings` in, :class:`Tuned`,
:class:`Rows` and :class:`Made` out), assembled into a
:class:`~bernmf.studies.report.contents.Report`; :func:`write`
(:mod:`bernmf.studies.report.page`) turns it into a tidy CSV, a Pareto plot of test perplexity
against seconds and a self-contained HTML page (``bernmf report``); what each engine runs
within the budget is :mod:`bernmf.studies.report.budget`'s.
"""

from __future__ import annotations

import io
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bernmf._progress import say, working_on
from bernmf.data.arguments import check_count, check_rank, check_seed
from bernmf.data.observed import Observed, as_observed
from bernmf.data.split import Split, paper_split
from bernmf.fitting.ensemble import MAX_RESTARTS, MODES_WARNING, validation_lpd
from bernmf.fitting.plan import check_arguments
from bernmf.fitting.stack import members_table, stack
from bernmf.inference import available, get_engine
from bernmf.models import Prior
from bernmf.results.diagnostics import diagnostics
from bernmf.results.fit import Fit
from bernmf.results.loading import versions
from bernmf.studies.compare import (
    STACKED_ALL,
    STACKED_MM,
    compare,
    describe_prior,
    nonempty_list,
)
from bernmf.studies.report.budget import (
    DEFAULT_BUDGET,
    QUICK_BUDGET,
    EngineSchedule,
    estimate,
    floor,
    plan_seconds,
    plans,
    stack_seconds,
    stacking_seconds,
    timed,
    tuning_fit_seconds,
)
from bernmf.studies.report.contents import COLUMNS, Report, Settings, Winner
from bernmf.studies.report.page import findings, leaderboard, winner_file, write
from bernmf.studies.runner import running
from bernmf.studies.runner.study import Grid, Matrix, Method, Study

__all__ = [
    "COLUMNS", "QUICK_OPTIONS", "Report", "checked", "describe_data", "environment", "estimate",
    "findings", "floor", "leaderboard", "run", "winner_file", "write",
]  # fmt: skip
"""``Report``, ``COLUMNS`` (:mod:`bernmf.studies.report.contents`), ``findings``, ``leaderboard``,
``winner_file``, ``write`` (:mod:`bernmf.studies.report.page`), ``estimate`` and ``floor``
(:mod:`bernmf.studies.report.budget`) are here too, where ``bernmf.report`` had them."""

QUICK_OPTIONS = {
    "mm": {"max_iter": 200},
    "em": {"max_iter": 200},
    "vb": {"max_iter": 100},
    "logsvd": {"max_iter": 200},
    "logpca": {"max_iter": 200, "m_grid": (2.0, 4.0, 8.0)},
    "gibbs": {"num_warmup": 50, "num_samples": 50, "progress": False},
    "nuts": {"num_warmup": 50, "num_samples": 50, "progress": False},
    "svi": {"steps": 300, "num_draws": 100, "progress": False},
}
"""Engine options of ``quick=True``: few iterations or draws, so a report takes about a minute."""

QUIET = {"gibbs": {"progress": False}, "nuts": {"progress": False}, "svi": {"progress": False}}


def describe_data(name: str, data: Observed) -> dict:
    """``dataset``, ``rows``, ``columns``, ``missing`` fraction and ``density`` of ones of
    ``data`` (every observed entry of a dataset, :func:`checked`)."""
    M, N = data.shape
    return {
        "dataset": name,
        "rows": M,
        "columns": N,
        "missing": float(1 - data.mask.mean()),
        "density": float(data.ones.sum() / max(data.mask.sum(), 1)),
    }


def checked(data: Mapping[str, object]) -> dict[str, Observed]:
    """Each dataset's Y checked once (:func:`bernmf.data.observed.as_observed`): every step
    of the report selects its entries from it. A ValueError names the dataset."""
    made = {}
    for name, Y in data.items():
        try:
            made[name] = as_observed(Y, warn_empty=False)
        except ValueError as error:
            raise ValueError(f"dataset {name!r}: {error}") from error
    return made


ENSEMBLES = ("mm",)
"""The engines :func:`run` also scores as ensembles by default, those it compares."""


def run(
    data: Mapping[str, object],
    engines: Iterable[str] | None = None,
    *,
    ranks: Iterable[int] = (2, 4, 8),
    shared_rank: int = 4,
    priors: Iterable[float] = (1.2, 1.5, 2.0),
    seeds: Iterable[int] = range(3),
    ensembles: Iterable[str] | None = None,
    restarts: int = 4,
    combine: str = "stack",
    quick: bool = False,
    budget: float | None = None,
    progress: bool = True,
    clock: Callable[[], float] = time.perf_counter,
) -> Report:
    """Tune every engine on validation entries, then score seeds on test entries.

    First every engine is estimated on every dataset, and its plan shortened or left out
    to fit the budget (:func:`bernmf.studies.report.budget.plans`); then each dataset goes
    through the steps :func:`_tune`, :func:`_seeds` (at the tuned and the shared settings)
    and :func:`_ensemble` engine by engine (one whose plan no longer fits in the time left
    is left out), then :func:`_stacks` and :func:`_entries` (each row's test entries), each
    step said in a line as it starts; the rows of every dataset make the :class:`Report`.

    Parameters
    ----------
    data : dict of name to array-like of shape (M, N)
        The datasets (binary, NaN missing); each gets the paper's split
        (:func:`bernmf.data.split.paper_split`: 70% train, 15% validation, 15% test).
    engines : list of str, optional
        Default: every engine of :func:`bernmf.engines`.
    ranks : list of int, default (2, 4, 8)
        The ranks each engine chooses from on validation (``quick``: the shared rank).
    shared_rank : int, default 4
        The rank at which every engine is also scored, with its default prior.
    priors : list of float, default (1.2, 1.5, 2)
        mm's alpha and beta grid (every pair; ``quick``: 1.2 only). Not 1: there H reaches
        0 and 1 (on a simulated 374 x 1799 vote-like matrix mm chose alpha = beta = 1 and
        scored inf on test).
    seeds : list of int, default range(3)
        Seeds of the test fits of each setting.
    ensembles : list of str, optional
        Engines (among ``engines``) also scored as an ensemble of ``restarts``
        members at their tuned setting, combined by ``combine`` with the
        validation entries. Default: those of :data:`ENSEMBLES` among ``engines``.
    quick : bool, default False
        :data:`QUICK_OPTIONS`, one rank, two seeds, two restarts: about a minute on animals;
        ``mm`` and the cheapest others within
        :data:`bernmf.studies.report.budget.QUICK_BUDGET` per dataset are kept, the others
        left out (``left_out``), and said so.
    budget : float, optional
        Seconds the whole report aims at (default
        :data:`bernmf.studies.report.budget.DEFAULT_BUDGET`, 600; ``quick``: 120 per
        dataset). Every engine is timed by probe fits first; the plans over budget are
        shortened (fewer seeds, the shared rank only, fewer draws, one seed, no ensemble)
        or left out, the most expensive first, and said so (:attr:`Report.plans`).
    progress : bool, default True
        Progress bars of the tuning and test fits.
    clock : callable, default time.perf_counter
        The clock of the budget, of the probes and of the seconds measured
        (:attr:`Report.plans`): wall-clock by default; ``time.process_time`` counts the CPU
        seconds of this process instead, which a busy machine changes less
        (``benchmarks/report_estimate.py``).

    Returns
    -------
    Report

    Raises
    ------
    TypeError, ValueError
        An unknown engine, an ensemble engine not compared, empty lists, a bad rank.
    """
    settings = _settings(
        data, engines, ranks, shared_rank, priors, seeds, ensembles, restarts, combine, quick,
        budget, progress, clock,
    )  # fmt: skip
    begin = clock()
    data = checked(data)
    splits = {name: paper_split(Y.shape) for name, Y in data.items()}
    kept, left_out, planned = plans(data, splits, settings, _ess_per_second)
    deadline = begin + settings.budget
    made = [
        _dataset(name, Y, splits[name], kept[name], settings, deadline)
        for name, Y in data.items()
    ]  # fmt: skip
    left_out += [row for one in made for row in one.left_out]
    weights = [table for one in made for table in one.weights]
    entries = {
        (name, *key): values for name, one in zip(data, made, strict=True)
        for key, values in one.entries.items()
    }  # fmt: skip
    return Report(
        fits=_fits_table([table for one in made for table in one.rows]),
        environment={**environment(), "clock": getattr(clock, "__name__", str(clock))},
        data=pd.DataFrame([describe_data(name, Y) for name, Y in data.items()]),
        chosen=pd.DataFrame(
            [row for one in made for row in one.chosen],
            columns=["dataset", "engine", "rank", "prior", "grid", "edge", "finite"],
        ),
        seconds=clock() - begin,
        left_out=pd.DataFrame(left_out, columns=["dataset", "engine", "estimate"]),
        weights=pd.concat(weights, ignore_index=True) if weights else None,
        entries=entries,
        plans=_plans_table(planned, dict(zip(data, made, strict=True))),
        budget=settings.budget,
        winners={name: one.winner for name, one in zip(data, made, strict=True) if one.winner},
    )


def _plans_table(planned: list[tuple], made: Mapping[str, Made]) -> pd.DataFrame:
    """:attr:`Report.plans`: the plans (``planned`` of
    :func:`bernmf.studies.report.budget.plans`) with the seconds estimated for each
    engine's steps as they ran and the seconds they took, and a row ``"stacks"`` per
    dataset."""
    table = pd.DataFrame(
        planned, columns=["dataset", "engine", "estimate", "seconds", "stacks", "changes"]
    )
    stacks = [
        {
            "dataset": name, "engine": "stacks", "estimate": np.nan,
            "seconds": mine["stacks"].sum(), "stacks": mine["stacks"].sum(), "changes": "",
        }
        for name, mine in table.groupby("dataset", sort=False)
    ]  # fmt: skip
    table = pd.concat([table, pd.DataFrame(stacks)], ignore_index=True)
    keys = list(zip(table["dataset"], table["engine"], strict=True))
    return table.assign(
        estimated=[made[d].estimated.get(e, np.nan) for d, e in keys],
        measured=[made[d].measured.get(e, np.nan) for d, e in keys],
    )


def _settings(
    data,
    engines,
    ranks,
    shared_rank,
    priors,
    seeds,
    ensembles,
    restarts,
    combine,
    quick,
    budget,
    progress,
    clock,
) -> Settings:
    """Check every argument (each engine at each rank and seed) before the first fit."""
    engines = nonempty_list("engines", available() if engines is None else engines, "['mm']")
    ranks = nonempty_list("ranks", ranks, "[2, 4, 8]")
    seeds = nonempty_list("seeds", seeds, "range(3)")
    if ensembles is None:
        ensembles = [name for name in ENSEMBLES if name in engines]
    ensembles = list(dict.fromkeys(ensembles))
    if not data:
        raise ValueError("data is empty; give at least one dataset")
    for name in engines + ensembles:
        get_engine(name)  # ValueError listing the known engines
    apart = [name for name in ensembles if name not in engines]
    if apart:
        raise ValueError(f"ensembles {apart} are not among the engines compared {engines}")
    for rank in ranks:  # each checked, though quick fits the shared rank only
        check_rank(rank)
    if ensembles:  # checked, though quick takes 2
        check_count("restarts", restarts, least=2, most=MAX_RESTARTS)
    restarts = 2 if quick else restarts
    if budget is not None and (
        isinstance(budget, bool) or not isinstance(budget, int | float) or not budget > 0
    ):
        raise ValueError(f"budget must be a number of seconds > 0, got {budget!r}")
    settings = Settings(
        engines=engines,
        ranks=[shared_rank] if quick else sorted(set(ranks)),
        shared_rank=shared_rank,
        priors=[1.2] if quick else list(priors),
        seeds=seeds[:2] if quick else seeds,
        ensembles=ensembles,
        restarts=restarts,
        combine=combine,
        options={e: dict((QUICK_OPTIONS if quick else QUIET).get(e, {})) for e in engines},
        quick=quick,
        progress=progress,
        budget=float(QUICK_BUDGET * len(data) if quick else DEFAULT_BUDGET)
        if budget is None
        else float(budget),
        clock=clock,
    )
    shapes = {np.shape(Y) for Y in data.values()}
    for engine in engines:  # once per setting, then each seed
        for rank in {*settings.ranks, shared_rank}:
            for shape in shapes:
                check_arguments(engine, rank, None, seeds[0], settings.options[engine], shape)
    for seed in seeds:
        check_seed(seed)
    return settings


@dataclass(frozen=True)
class Tuned:
    """One engine's setting chosen on the validation entries (:func:`_tune`).

    Attributes
    ----------
    engine : str
    rank : int
    prior : Prior or None
        mm's chosen prior; None (the engine's default) for the others.
    grid : list of int
        The ranks chosen from.
    fits : tuple of Fit
        The fits that chose it (seed 0, without draws): members of every seed's stacks.
    finite : list of int
        The ranks of the grid with a finite validation perplexity (the others give some
        validation entry probability 0). None of them: nothing was chosen, ``rank`` is
        the shared one and ``prior`` the default.
    """

    engine: str
    rank: int
    prior: Prior | None
    grid: list[int]
    fits: tuple[Fit, ...]
    finite: list[int]

    def chosen(self, dataset: str) -> tuple:
        """The row of :attr:`Report.chosen`: the rank flagged at a grid's edge when the
        validation scores of at least two ranks compare (finite)."""
        edge = ""
        if len(self.finite) > 1:
            edge = {max(self.grid): "top", min(self.grid): "bottom"}.get(self.rank, "")
        grid, finite = (",".join(str(r) for r in ranks) for ranks in (self.grid, self.finite))
        prior = describe_prior(self.prior)
        return (dataset, self.engine, self.rank, prior, grid, edge, finite)

    @property
    def chose(self) -> bool:
        """Whether the validation entries chose among settings (several ranks, or mm's
        priors, at least one of them of finite validation perplexity)."""
        return len(self.fits) > 1 and bool(self.finite)


@dataclass(frozen=True)
class Rows:
    """Test rows of one step, of one engine and setting, and their fits (without draws),
    one per row and in its order; ``made`` is False when the fits were made before
    under another setting (the shared one when it is the tuned one)."""

    table: pd.DataFrame
    fits: tuple[Fit, ...]
    made: bool = True

    def of_seed(self, seed: int) -> list[Fit]:
        """The fits of the rows of ``seed`` that these rows made."""
        if not self.made:
            return []
        return [f for s, f in zip(self.table["seed"], self.fits, strict=True) if s == seed]

    @property
    def key(self) -> tuple[str, str]:
        """The rows' ``(engine, setting)``."""
        return (str(self.table["engine"].iloc[0]), str(self.table["setting"].iloc[0]))


@dataclass(frozen=True)
class Made:
    """One dataset's part of the :class:`Report`, as its steps made it: test ``rows``
    (tables of :data:`COLUMNS` without ``dataset``), ``chosen``, ``weights`` and
    ``left_out`` rows (engines whose plan no longer fitted in the time left), the
    ``entries`` of :attr:`Report.entries` by (engine, setting), the ``measured`` seconds
    of each engine's steps (tuning, seeds, ensembles) and of the stacks (``"stacks"``),
    the seconds ``estimated`` for each engine's steps as they ran (:func:`_estimated`)
    and for the stacks (each of the members it stacked:
    :func:`bernmf.studies.report.budget.stacking_seconds`), and the
    ``winner`` (None when no row scores finitely)."""

    rows: list[pd.DataFrame]
    chosen: list[tuple]
    weights: list[pd.DataFrame]
    left_out: list[tuple]
    entries: dict[tuple[str, str], np.ndarray]
    measured: dict[str, float]
    estimated: dict[str, float]
    winner: Winner | None


def _dataset(name: str, Y, split, planned, settings: Settings, deadline: float) -> Made:
    """The steps of one dataset, engine by engine with the plans the budget kept: tune, seeds,
    ensembles; then the stacks and the test entries. An engine (not ``mm``) whose plan's
    seconds no longer fit before ``deadline`` (a time on ``settings.clock``: the estimates
    of those before it were short) is left out, and said so. Once an engine's tuning fits
    have run, its later steps are estimated from their seconds (:func:`_estimated`)."""
    tuned, rows, kept, left_out, measured, estimated = [], [], [], [], {}, {}
    clock = settings.clock
    for plan in planned:
        left = deadline - clock()
        if plan.engine != "mm" and plan.seconds > left:
            say(
                settings.progress,
                f"report on {name}: leaving out {plan.engine}: {max(left, 0):.0f} s left of the "
                f"budget, its plan needs {plan.seconds:.0f} s",
            )
            left_out.append((name, plan.engine, plan.seconds))
            continue
        begin = clock()
        one, tuning, _ = timed(
            lambda plan=plan: _tune(name, Y, split, plan, settings),
            lambda one: sum(float(f.timings.get("compile", 0.0)) for f in one.fits), clock,
        )  # fmt: skip
        engine_rows = _seeds(name, Y, split, one, plan, settings)
        apart = sum(r.made for r in engine_rows) > 1  # the shared fits made apart
        if plan.restarts:
            engine_rows.append(_ensemble(name, Y, split, one, plan, settings))
        measured[plan.engine] = clock() - begin
        estimated[plan.engine] = _estimated(
            plan, (one.rank, apart), settings.shared_rank, one.fits, tuning
        )
        tuned.append(one)
        rows.append(engine_rows)
        kept.append(plan)
    seeds = sorted({seed for plan in kept for seed in plan.seeds})
    say(settings.progress, f"report on {name}: stacking the fits of each seed")
    working_on(f"stacking the fits of {name}")  # the heartbeat's line, not the last fit's
    begin = clock()
    stacked, weights = _stacks(Y, split, tuned, rows, seeds)
    measured["stacks"] = clock() - begin
    probed = [plan.probe for plan in kept if plan.probe is not None]
    estimated["stacks"] = (
        sum(stacking_seconds(probed[0], len(r.fits[0].members)) for r in stacked)
        if probed
        else np.nan
    )
    every = [r for engine_rows in rows for r in engine_rows] + stacked
    return Made(
        rows=[r.table.assign(dataset=name) for r in every],
        chosen=[one.chosen(name) for one in tuned],
        weights=[table.assign(dataset=name) for table in weights],
        left_out=left_out,
        entries=_entries(Y, split, every),
        measured=measured,
        estimated=estimated,
        winner=_winner(every),
    )


def _estimated(
    plan: EngineSchedule, chosen: tuple[int, bool], shared_rank: int, fits, tuning: float
) -> float:
    """The seconds estimated for ``plan``'s steps as they ran, without its share of the
    stacks (:func:`bernmf.studies.report.budget.plan_seconds`): its tuning from its probes;
    its test fits at the rank ``chosen`` on validation, the shared ones made apart or not,
    from its tuning ``fits`` (which took ``tuning`` seconds, their compilation aside:
    re-planned once they exist,
    :func:`bernmf.studies.report.budget.tuning_fit_seconds`) at the ranks they hold, from
    its probes at the others; NaN when it was not probed."""
    if plan.probe is None:
        return np.nan
    tuned = tuning_fit_seconds(fits, tuning) if fits else None
    seconds = plan_seconds(plan, plan.probe, shared_rank, chosen, tuned)
    return seconds - stack_seconds(plan, plan.probe, shared_rank)


def _winner(rows: list[Rows]) -> Winner | None:
    """The fit of the first seed of the (engine, setting) of least mean test perplexity
    over its seeds (the first row of the leaderboard), or None when none scores finitely."""
    groups: dict[tuple[str, str], list[Rows]] = {}
    for r in rows:  # a stacked row's seeds are Rows of their own
        groups.setdefault(r.key, []).append(r)
    means = {
        key: float(pd.concat([r.table for r in mine])["perplexity"].mean())
        for key, mine in groups.items()
    }  # fmt: skip
    finite = {key: mean for key, mean in means.items() if np.isfinite(mean)}
    if not finite:
        return None
    engine, setting = min(finite, key=finite.__getitem__)
    first = groups[engine, setting][0]
    return Winner(engine, setting, int(first.table["seed"].iloc[0]), first.fits[0])


def _tune(name: str, Y, split, plan: EngineSchedule, settings: Settings) -> Tuned:
    """The rank (and mm's prior) of lowest validation perplexity, from seed 0's fits
    (:func:`_tuning`); the shared rank and the default prior when every validation
    perplexity is inf."""
    engine, ranks, progress = plan.engine, plan.ranks, settings.progress
    if engine != "mm" and len(ranks) == 1:
        return Tuned(engine, ranks[0], None, ranks, (), ranks)
    grid = ",".join(str(rank) for rank in ranks)
    what = f"{engine} on K = {grid}" + (f", alpha, beta in {plan.priors}" if engine == "mm" else "")
    say(progress, f"report on {name}: tuning {what} (plan: {plan.seconds:.0f} s in all)")
    scores, fits = _tuning(name, Y, split, plan, progress)
    best = scores.loc[scores["perplexity"].fillna(np.inf).idxmin()]
    rank = int(best["rank"])
    prior = Prior(best["alpha"], best["beta"]) if engine == "mm" else None
    finite = sorted({int(r) for r in scores.loc[np.isfinite(scores["perplexity"]), "rank"]})
    if not finite:  # nothing to choose from
        return Tuned(engine, settings.shared_rank, None, ranks, fits, [])
    return Tuned(engine, rank, prior, ranks, fits, finite)


def _tuning(
    name: str, Y, split, plan: EngineSchedule, progress: bool
) -> tuple[pd.DataFrame, tuple]:
    """The validation perplexity (``rank``, ``alpha``, ``beta``, ``perplexity``) of every
    setting of the engine's grid (mm: its alpha x beta pairs at gamma 1.2; the others their
    default prior) at seed 0, and its fits without draws: a study of one seed, its matrix's
    held-out entries the validation ones (rule ``each``: nothing chosen there), fitted as
    ``bernmf tune`` fits them (mm's priors in one call a rank; a sampler one chain)."""
    engine = plan.engine
    gamma = Prior().gamma
    priors = tuple((a, b, gamma) for a in plan.priors for b in plan.priors)
    held_out = Split(split.train, np.zeros_like(split.train), split.validation)
    tuning = Study(
        f"tuning {engine}",
        (Grid(engine, tuple(plan.ranks), priors if engine == "mm" else None, plan.options),),
        (Method("tuning", "each"),), matrices=(Matrix(name, Y, held_out),), seeds=(0,),
        keep_draws=False,
    )  # fmt: skip
    made = running.run(tuning, stream=sys.stderr if progress else io.StringIO())
    table = made.table.rename(columns={"test_perplexity": "perplexity"})
    fits = tuple(made.results[i] for i in range(len(table)))
    return table[["rank", "alpha", "beta", "perplexity"]], fits


def _seeds(
    name: str, Y, split, tuned: Tuned, plan: EngineSchedule, settings: Settings
) -> list[Rows]:
    """The test fits of every seed at the tuned setting and at the shared rank with the
    engine's default prior (the same fits, not made again, when the two coincide: only the
    shared rows when nothing was chosen on validation). A setting not chosen on validation
    is ``K=k``, not ``tuned``; each says the draws (svi's steps) that the budget left, when
    it cut them (:attr:`EngineSchedule.draws`)."""
    engine, shared_rank = tuned.engine, settings.shared_rank
    common = {
        "train": split.train, "test": split.test, "progress": settings.progress, "keep": True,
        "options": {engine: plan.options}, "measure": _ess_per_second,
    }  # fmt: skip
    seeds = f"{len(plan.seeds)} seed{'s' * (len(plan.seeds) > 1)}"
    shared_setting = _setting(f"shared K={shared_rank}", plan)
    tuned_setting = _setting("tuned" if tuned.chose else f"K={tuned.rank}", plan)
    say(settings.progress, f"report on {name}: {engine} at K = {tuned.rank}, {seeds}")
    at = compare(Y, [engine], [tuned.rank], plan.seeds, priors={engine: tuned.prior}, **common)
    if tuned.rank == shared_rank and _default_prior(engine, tuned.prior, shared_rank):
        if not tuned.chose:
            return [Rows(at.fits.assign(setting=shared_setting), at.results)]
        tuned_rows = Rows(at.fits.assign(setting=tuned_setting), at.results)
        return [tuned_rows, Rows(at.fits.assign(setting=shared_setting), at.results, False)]
    rows = [Rows(at.fits.assign(setting=tuned_setting), at.results)]
    say(settings.progress, f"report on {name}: {engine} at the shared K = {shared_rank}, {seeds}")
    shared = compare(Y, [engine], [shared_rank], plan.seeds, **common)
    return [*rows, Rows(shared.fits.assign(setting=shared_setting), shared.results)]


def _setting(name: str, plan: EngineSchedule) -> str:
    """The setting of a row of ``plan``'s fits: ``name``, and the draws (svi's steps) the
    budget left when it cut them ("shared K=4, 625 of 5000 steps")."""
    return f"{name}, {plan.draws}" if plan.draws else name


def _default_prior(engine: str, prior: Prior | None, rank: int) -> bool:
    """Whether ``prior`` is the engine's default at ``rank`` (None, or the same values: mm's
    grid of the report holds Beta(1.2, 1.2), its default)."""
    if prior is None:
        return True
    default = get_engine(engine).prior_for(None, rank)
    given = get_engine(engine).prior_for(prior, rank)
    return default is not None and all(
        np.array_equal(a, b) for a, b in zip(default, given, strict=True)
    )


def _ensemble(name: str, Y, split, tuned: Tuned, plan: EngineSchedule, settings: Settings) -> Rows:
    """The ensemble of ``plan.restarts`` members from each seed at the tuned setting,
    combined on the validation entries and scored on the test ones (:func:`bernmf.compare`
    with ``restarts``: every member fitted once, through the one grid loop)."""
    engine, seeds = tuned.engine, plan.seeds
    say(
        settings.progress,
        f"report on {name}: {engine} ensembles of {plan.restarts} at K = {tuned.rank}, "
        f"{len(seeds)} seed{'s' * (len(seeds) > 1)}",
    )
    ensemble = {"restarts": plan.restarts, "combine": settings.combine}
    with warnings.catch_warnings():  # distinct modes are why the report has ensembles
        warnings.filterwarnings("ignore", MODES_WARNING, UserWarning)
        made = compare(
            Y, [engine], [tuned.rank], seeds, train=split.train, test=split.test,
            priors={engine: tuned.prior}, options={engine: {**plan.options, **ensemble}},
            validation=split.validation, progress=settings.progress, keep=True,
        )  # fmt: skip
    table = made.fits[made.fits["engine"] == engine]  # a seed's one fit is stacked with none
    table = table.assign(engine=f"{engine} ensemble", ess_per_second=np.nan)
    return Rows(table.assign(setting=_setting("ensemble", plan)), made.results)


def _stacks(Y, split, tuned: list[Tuned], rows: list[list[Rows]], seeds) -> tuple[list, list]:
    """:class:`Rows` ``"stacked: all engines"`` and ``"stacked: mm grid"`` per seed (each
    with its stack), and their weights.

    The members of seed s are the tuning fits (the mm grid, the other engines' ranks,
    seed 0) and the test fits made with seed s, engine by engine; weights on the
    validation entries.
    """
    test = as_observed(Y, split.test, warn_empty=False)
    stacks, weights = [], []
    for seed in seeds:
        members = [
            f
            for one, engine_rows in zip(tuned, rows, strict=True)
            for f in [*one.fits, *(f for r in engine_rows for f in r.of_seed(seed))]
        ]
        groups = {STACKED_ALL: members, STACKED_MM: [f for f in members if f.engine == "mm"]}
        for row, result in stacked_rows(Y, groups, split.train, split.validation, test, seed):
            stacks.append(Rows(pd.DataFrame([row]).assign(setting="stacked"), (result,)))
            table = members_table(result).groupby(["engine", "rank"], as_index=False)["weight"]
            weights.append(table.sum().assign(seed=seed, stack=row["engine"]))
    return stacks, weights


def stacked_rows(
    Y, groups: Mapping[str, list[Fit]], train, validation, test, seed
) -> list[tuple[dict, Fit]]:
    """A row per group of fits, with their :func:`bernmf.stack` on ``validation``, scored on test.

    A group of fewer than two fits, or of the same fits as a group before it, is
    skipped. ``rank`` is 0 and ``prior`` ``"mixed"``; ``seconds`` and
    ``compile_seconds`` are the sums of the members'.

    Parameters
    ----------
    Y : array-like of shape (M, N)
    groups : dict of row name to list of Fit
    train, validation : bool arrays of shape (M, N)
    test : Observed
        The scored entries.
    seed : int
        The ``seed`` of the rows.

    Returns
    -------
    list of (dict, Fit)
        The row (the columns of :attr:`Comparison.fits`) and the stack.
    """
    rows, seen = [], set()
    for name, members in groups.items():
        identity = tuple(id(m) for m in members)
        if len(members) < 2 or identity in seen:
            continue
        seen.add(identity)
        result = stack(members, Y, validation=validation, mask=train)
        row = (
            {
                "engine": name,
                "rank": 0,
                "prior": "mixed",
                "seed": seed,
                "perplexity": result.perplexity(test),
                "seconds": result.timings.get("run", np.nan),
                "compile_seconds": result.timings.get("compile", np.nan),
                "iterations": 0,
                "converged": result.converged,
            },
            result,
        )
        rows.append(row)
    return rows


def _fits_table(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """The rows of every step, the columns :data:`COLUMNS` (``ess_per_second`` NaN where no
    step measured it)."""
    fits = pd.concat(tables, ignore_index=True)
    if "ess_per_second" not in fits:
        fits["ess_per_second"] = np.nan
    return fits[list(COLUMNS)]


def _entries(Y, split, rows: list[Rows]) -> dict[tuple[str, str], np.ndarray]:
    """``log P(Y=y)`` of each test entry (row-major) under the fits of each (engine, setting),
    mean over its seeds: :attr:`Report.entries` (-mean is the row's mean test perplexity)."""
    test = as_observed(Y, split.test, warn_empty=False)
    columns: dict[tuple[str, str], list[np.ndarray]] = {}
    for r in rows:
        columns.setdefault(r.key, []).append(validation_lpd(r.fits, test))
    return {key: np.hstack(parts).mean(axis=1) for key, parts in columns.items()}


def _ess_per_second(result) -> dict:
    """Median bulk ESS of WH per second of run time, for fits with posterior draws."""
    if not result.draws:
        return {"ess_per_second": np.nan}
    table = diagnostics(result, warn=False, ess_entries=200).table
    return {"ess_per_second": float(table.loc["WH", "ess_bulk_per_second"])}


def environment() -> dict:
    """Versions, CPU model and count, and the thread settings the timings ran under."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if "model name" in line)
    except (OSError, StopIteration):
        pass
    threads = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "XLA_FLAGS")
    return {
        **versions(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        **{name: os.environ.get(name, "unset") for name in threads},
    }
