"""The one study runner: a study is data, and :func:`run` runs it through the fitting runner.

A :class:`Study` names its data (the paper's datasets or a :class:`Simulation`), its
split, its engines each with a :class:`Grid` of ranks, priors and options, its seed sets
(R members per setting, repeated ``seed_sets`` times), the :class:`Method` rows to
score (a single fit, the best or the mean of a setting's members, stacks, a refitted
stack), extra metrics and a CPU budget. :func:`run` fits every grid's settings x seeds
with :func:`bernmf.fitting.runner.fit_settings` (one compiled call per rank for mm and
em), scores each member once on the validation entries, makes every choice (setting,
member, weights) on them, and scores only each method's result on the test entries:
the test entries never decide anything. Stacks are :func:`bernmf.stack`, ensembles
:func:`bernmf.fitting.ensemble.combine_members`.

The paper's protocol (:mod:`bernmf.studies.paper`), the modes study
(:mod:`bernmf.studies.modes`) and the stacking study (:mod:`bernmf.studies.stacking`) are
configurations of it; ``bernmf reproduce <study>`` runs any study of :data:`STUDIES`.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import io
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from bernmf.data import datasets
from bernmf.data.files.csv_table import write_csv
from bernmf.data.observed import as_observed, check_rank
from bernmf.data.split import Split, paper_split, random_split
from bernmf.fitting.ensemble import MODES_WARNING, combine_members, validation_lpd
from bernmf.fitting.plan import held_out_entries
from bernmf.fitting.runner import fit_settings
from bernmf.fitting.stack import members_table, stack
from bernmf.fitting.stacking import mixture_lpd
from bernmf.inference import Engine, get_engine
from bernmf.models import Prior
from bernmf.models.simulate import simulate
from bernmf.results.fit import Fit
from bernmf.studies import published

STUDIES = {
    "paper": "bernmf.studies.paper",
    "modes": "bernmf.studies.modes",
    "stacking": "bernmf.studies.stacking",
}
"""The studies ``bernmf reproduce`` runs: name -> module with ``main(argv) -> int`` (the
options of :func:`parser`, and its own), writing ``summary.csv`` among its results in
``--out``, or where its ``folder(out, as_published) -> Path`` says."""

RULES = (
    "single", "best", "mean", "stack chosen", "stack setting", "stack", "stack members",
    "stack+refit",
)  # fmt: skip
"""How a :class:`Method` makes its result from the members of its grids, all on validation:

- ``single``: the member of lowest validation perplexity;
- ``best``: per setting the member of best engine score (:meth:`Engine.score`, its
  objective), the setting chosen on validation;
- ``mean``: per setting the uniform mixture of its members, chosen on validation;
- ``stack chosen``: the members of the setting ``mean`` chooses, stacked with
  :func:`bernmf.stack` (a weight each);
- ``stack setting``: per setting :func:`bernmf.stack` of its members (a weight each),
  the setting chosen by the stack's validation perplexity;
- ``stack``: :func:`bernmf.stack` of every member, the seeds of a setting sharing a
  weight (``seeds="mean"``); ``stack members``: a weight per member (``seeds="stack"``);
  ``stack+refit``: ``stack`` with its members of positive weight refitted on the
  training and validation entries (its validation perplexity is NaN).
"""

METRICS = ("min_test_probability",)
"""Extra columns a study may ask for: the smallest probability the result gives a test
entry's outcome (0 would score inf)."""

FIT_COLUMNS = [
    "rank", "alpha", "beta", "gamma", "seed", "iterations", "sweeps", "converged", "seconds",
]  # fmt: skip
"""The columns that describe one fit, in the tables of :func:`run`."""

CHOICE, MEMBER = "choice", "member"
"""The stages of the fits table: fitted at ``choose_seed`` to choose a setting, or a member."""


@dataclass(frozen=True)
class Simulation:
    """Data simulated from the model (:func:`bernmf.simulate`, its flat prior).

    Attributes
    ----------
    rows, cols, rank : int
        M, N and K of the simulated Y (M, N).
    seed : int
    """

    rows: int
    cols: int
    rank: int
    seed: int = 0

    @property
    def name(self) -> str:
        """The simulation's name in the tables, as a dataset's."""
        return f"simulated-{self.rows}x{self.cols}-K{self.rank}-seed{self.seed}"


@dataclass(frozen=True)
class Grid:
    """One engine's settings: ranks x priors, with its options.

    Attributes
    ----------
    engine : str
        A registered engine, or ``"mm-as-published"`` (:data:`published.ENGINE`).
    ranks : tuple of int
    priors : tuple of (alpha, beta, gamma), optional
        None: the engine's default prior (or none, for an engine without one).
    options : mapping
        Engine options (:meth:`Engine.with_defaults`); a sampler's ``num_chains`` is set
        to the number of seeds.
    choosing_options : mapping
        Over ``options`` for the fits at the study's ``choose_seed`` (e.g. float32 grids).
    batching : mapping
        For an engine that fits its settings in one call (``workers``, ``progress``, ...).
    deterministic : bool
        The fit does not depend on its seed (logsvd, logpca): fitted once, seed 0, a member
        of every seed set.
    members : int, optional
        Members per setting in every seed set, whatever the study's R (default: R, from
        the study's pool); its pool is ``members * seed_sets`` seeds.
    name : str, optional
        The label methods use (default: the engine's name).
    """

    engine: str
    ranks: tuple[int, ...]
    priors: tuple[tuple[float, float, float], ...] | None = None
    options: Mapping = field(default_factory=dict)
    choosing_options: Mapping = field(default_factory=dict)
    batching: Mapping = field(default_factory=dict)
    deterministic: bool = False
    members: int | None = None
    name: str | None = None

    @property
    def label(self) -> str:
        """The grid's name in the methods and tables."""
        return self.name or self.engine


@dataclass(frozen=True)
class Method:
    """A row of the study's table: ``rule`` (:data:`RULES`) over the members of ``grids``.

    ``grids`` are :attr:`Grid.label` values; None: every grid. ``at``: the R (the study's
    ``members``) at which it is scored; None: every R."""

    name: str
    rule: str
    grids: tuple[str, ...] | None = None
    at: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Study:
    """Engines x settings x seed sets on a split: what is fitted, chosen and scored.

    Attributes
    ----------
    name : str
    grids : tuple of Grid
    methods : tuple of Method
    datasets : tuple of str
        The paper's datasets (:func:`bernmf.data.datasets.load`, from ``data_dir``).
    simulations : tuple of Simulation
    split : {"paper", "random"}
        The paper's split (70/15/15, seed 12345) or a random one of seed ``split_seed``.
    members : tuple of int
        The R compared: members per setting in a seed set.
    seed_sets : int
        Repetitions of each R with other seeds: disjoint blocks ``pool[j R:(j + 1) R]``
        while the pool has room, else random R-subsets of it.
    pool : int, optional
        Seeds fitted per setting, ``first_seed`` on (default ``max(members) * seed_sets``).
    first_seed : int
    choose_seed : int, optional
        The paper's protocol: each grid's setting is chosen once, on the fits of this seed
        (with ``choosing_options``), and the seed sets fit the chosen setting only.
    metrics : tuple of str
        Extra columns (:data:`METRICS`).
    budget : float, optional
        CPU seconds per dataset: once they are spent, no grid's next rank is fitted and no
        seed set is scored (each skip said in a progress line).
    data_dir : str, optional
    """

    name: str
    grids: tuple[Grid, ...]
    methods: tuple[Method, ...]
    datasets: tuple[str, ...] = ()
    simulations: tuple[Simulation, ...] = ()
    split: str = "paper"
    split_seed: int = 0
    members: tuple[int, ...] = (1,)
    seed_sets: int = 1
    pool: int | None = None
    first_seed: int = 0
    choose_seed: int | None = None
    metrics: tuple[str, ...] = ()
    budget: float | None = None
    data_dir: str | None = None

    def __post_init__(self):
        """Every field checked before any data is read: ValueError or TypeError naming it."""
        labels = [g.label for g in self.grids]
        if not labels or len(set(labels)) != len(labels):
            raise ValueError(f"study {self.name!r}: grids must be a non-empty set of labels")
        for method in self.methods:
            if method.rule not in RULES:
                raise ValueError(f"method {method.name!r}: rule must be one of {RULES}")
            unknown = set(method.grids or ()) - set(labels)
            if unknown:
                raise ValueError(f"method {method.name!r}: no grid {sorted(unknown)}")
        if not self.methods or not (self.datasets or self.simulations):
            raise ValueError(f"study {self.name!r}: give methods and datasets or simulations")
        if self.split not in ("paper", "random"):
            raise ValueError(f"study {self.name!r}: split must be 'paper' or 'random'")
        if not self.members or min(self.members) < 1 or self.seed_sets < 1:
            raise ValueError(f"study {self.name!r}: members and seed_sets must be >= 1")
        if self.pool is not None and self.pool < max(self.members):
            raise ValueError(f"study {self.name!r}: pool {self.pool} < members {self.members}")
        if set(self.metrics) - set(METRICS):
            raise ValueError(f"study {self.name!r}: metrics must be among {METRICS}")
        unknown = set(self.datasets) - set(datasets.DATASETS)
        if unknown:
            raise ValueError(f"study {self.name!r}: unknown datasets {sorted(unknown)}")
        for grid in self.grids:  # every grid checked here, before any data is read
            check_grid(grid)
        for method in self.methods:
            engines = {
                g.engine for g in self.grids if method.grids is None or g.label in method.grids
            }
            if method.rule == "stack+refit" and published.ENGINE.name in engines:
                raise ValueError(f"method {method.name!r}: the published code is not refitted")

    @property
    def pool_size(self) -> int:
        """Seeds fitted per setting of a grid without its own ``members``."""
        return self.pool or max(self.members) * self.seed_sets


class StudyResult(NamedTuple):
    """What :func:`run` returns.

    Attributes
    ----------
    table : DataFrame
        One row per dataset x R x seed set x method (:func:`run`).
    fits : DataFrame
        One row per fit made: dataset, grid, engine, stage (:data:`CHOICE` or
        :data:`MEMBER`), :data:`FIT_COLUMNS`, cpu_seconds, validation_perplexity.
    weights : DataFrame
        Per stack row: the weight of each engine and rank.
    results : dict
        ``(dataset, method, R, seed_set) -> Fit`` of the ``single`` rows.
    """

    table: pd.DataFrame
    fits: pd.DataFrame
    weights: pd.DataFrame
    results: dict


class _Member(NamedTuple):
    fit: Fit
    lpd: np.ndarray  # (validation entries,)
    cpu: float


class _Setting(NamedTuple):
    grid: Grid
    engine: Engine
    rank: int
    prior: Prior | None
    members: list[_Member]  # one per pool seed (one for a deterministic grid)


def check_grid(grid: Grid) -> None:
    """ValueError or TypeError naming what is wrong in ``grid``: its engine, ranks, priors
    or options."""
    engine = engine_of(grid.engine)
    if not grid.ranks:
        raise ValueError(f"grid {grid.label!r}: ranks is empty")
    ranks = [check_rank(k) for k in grid.ranks]
    for prior in grid.priors or ():
        if len(prior) != 3:
            raise ValueError(f"grid {grid.label!r}: a prior is (alpha, beta, gamma), got {prior}")
        for k in ranks:
            engine.prior_for(Prior(*prior), k)
    engine.with_defaults({**grid.options, **grid.choosing_options})
    if grid.members is not None and grid.members < 1:
        raise ValueError(f"grid {grid.label!r}: members must be >= 1, got {grid.members}")


def engine_of(name: str) -> Engine:
    """The engine named ``name``: registered, or the published code's."""
    return published.ENGINE if name == published.ENGINE.name else get_engine(name)


def log(message: str, stream=None) -> None:
    """A progress line on ``stream`` (default stdout), flushed."""
    print(message, file=stream or sys.stdout, flush=True)


def load_data(name, data_dir=None):
    """Y (DataFrame or array) of a dataset name or a :class:`Simulation`."""
    if isinstance(name, Simulation):
        return simulate(name.seed, name.rows, name.cols, name.rank)[0]
    return datasets.load(name, data_dir=data_dir)


def split_of(study: Study, shape) -> Split:
    """The study's split of a matrix of ``shape``."""
    return (
        paper_split(shape) if study.split == "paper" else random_split(shape, seed=study.split_seed)
    )


def seed_sets(pool: int, R: int, sets: int) -> list[np.ndarray]:
    """``sets`` sets of R indices into the pool: disjoint blocks if they fit, else random."""
    if R * sets <= pool:
        return [np.arange(j * R, (j + 1) * R) for j in range(sets)]
    rng = np.random.default_rng(R)
    return [np.sort(rng.choice(pool, R, replace=False)) for _ in range(sets)]


def _prior_values(prior: Prior | None) -> dict:
    """alpha, beta and gamma of a prior broadcast to (rank,) (its first component; NaN
    without a prior)."""
    names = ("alpha", "beta", "gamma")
    if prior is None:
        return dict.fromkeys(names, np.nan)
    return {n: float(np.asarray(getattr(prior, n)).ravel()[0]) for n in names}


def fit_row(fit: Fit, prior: Prior | None) -> dict:
    """The :data:`FIT_COLUMNS` of one fit."""
    return {
        "rank": fit.rank,
        **_prior_values(prior),
        "seed": fit.seed,
        "iterations": fit.n_iter,
        "sweeps": fit.extras.get("sweeps", np.nan),
        "converged": fit.converged,
        "seconds": float(fit.timings.get("run", np.nan)),
    }


def _fitted(grid, engine, train, held_out, rank, priors, seeds, options, stream):
    """fit_settings of one rank, each member scored on validation, with its CPU seconds
    (the call's, shared in proportion to the members' run times)."""
    begin = time.process_time()
    made = fit_settings(engine, train, rank, priors, seeds, options, **grid.batching)
    cpu = time.process_time() - begin
    fits = [m.fit for m in made]
    lpd = validation_lpd(fits, held_out)
    run = np.array([f.timings.get("run", 0.0) for f in fits], float)
    share = run / run.sum() if run.sum() > 0 else np.full(len(fits), 1 / len(fits))
    scores = -lpd.mean(axis=0)
    log(
        f"  {grid.label} K={rank}: {len(fits)} fits, {cpu:.1f} CPU s; best validation "
        f"perplexity {np.min(scores):.4f}",
        stream,
    )
    return [_Member(f, lpd[:, i], cpu * share[i]) for i, f in enumerate(fits)]


def _options(grid: Grid, engine: Engine, seeds: int, choosing: bool) -> dict:
    """Every option of the grid's fits of ``seeds`` seeds (a sampler's: as many chains)."""
    options = {**grid.options, **(grid.choosing_options if choosing else {})}
    if engine.seed_count is not None:
        options[engine.seed_count] = seeds
    return engine.with_defaults(options)


class _Budget(NamedTuple):
    """The CPU seconds a dataset may take (:attr:`Study.budget`), from ``begin``."""

    begin: float
    budget: float | None

    def over(self, what: str, stream) -> bool:
        """Whether the budget is spent; if so, says that ``what`` is skipped."""
        spent = time.process_time() - self.begin
        if self.budget is None or spent <= self.budget:
            return False
        log(f"  {what}: skipped, the budget of {self.budget:g} CPU s is spent", stream)
        return True


def _fitted_settings(grid, engine, settings, seeds, options, data, clock) -> list[_Setting]:
    """The (rank, prior) ``settings`` of one grid fitted at ``seeds``, a rank per call, until
    the budget is spent. ``data`` is ``(train, held_out, stream)``."""
    train, held_out, stream = data
    found = []
    for rank in dict.fromkeys(k for k, _ in settings):
        if clock.over(f"{grid.label} K={rank}", stream):
            break
        at = [p for k, p in settings if k == rank]
        made = _fitted(grid, engine, train, held_out, rank, at, seeds, options, stream)
        for i, prior in enumerate(at):
            members = made[i * len(seeds) : (i + 1) * len(seeds)]
            found.append(_Setting(grid, engine, rank, prior, members))
    return found


def _grid_settings(study, grid, data, clock, fit_rows, dataset) -> list[_Setting]:
    """The settings of one grid, each with its pool of members; with ``choose_seed``, the
    setting of least validation perplexity at that seed only, its choice's CPU seconds
    shared among its members."""
    engine = engine_of(grid.engine)
    priors = [None] if grid.priors is None else [Prior(*p) for p in grid.priors]
    settings = [(k, engine.prior_for(p, k)) for k in grid.ranks for p in priors]
    count = grid.members * study.seed_sets if grid.members else study.pool_size
    seeds = range(study.first_seed, study.first_seed + count)
    seeds = [0] if grid.deterministic else list(seeds)
    choice_cpu = 0.0
    if study.choose_seed is not None:
        seed = 0 if grid.deterministic else study.choose_seed
        options = _options(grid, engine, 1, choosing=True)
        choice = _fitted_settings(grid, engine, settings, [seed], options, data, clock)
        fit_rows += [_fits_row(dataset, s, s.members[0], CHOICE) for s in choice]
        if not choice:
            return []
        best = min(choice, key=lambda s: _perplexity(s.members[0].lpd))
        if grid.deterministic:  # the chosen fit is the one each seed set would make
            return [best]
        settings, choice_cpu = [(best.rank, best.prior)], sum(s.members[0].cpu for s in choice)
    options = _options(grid, engine, len(seeds), choosing=False)
    found = _fitted_settings(grid, engine, settings, seeds, options, data, clock)
    fit_rows += [_fits_row(dataset, s, m, MEMBER) for s in found for m in s.members]
    extra = choice_cpu / len(seeds)
    return [s._replace(members=[m._replace(cpu=m.cpu + extra) for m in s.members]) for s in found]


def _fits_row(dataset, setting: _Setting, member: _Member, stage: str) -> dict:
    """The row of one fit in :attr:`StudyResult.fits`."""
    return {
        "dataset": dataset,
        "grid": setting.grid.label,
        "engine": setting.engine.name,
        "stage": stage,
        **fit_row(member.fit, setting.prior),
        "cpu_seconds": member.cpu,
        "validation_perplexity": float(-member.lpd.mean()),
    }


def _perplexity(lpd: np.ndarray) -> float:
    """Validation perplexity of a mixture's or member's log densities (entries, [members])."""
    return float(-np.mean(lpd))


def _mean_perplexity(members: list[_Member]) -> float:
    """Validation perplexity of the uniform mixture of ``members``."""
    lpd = np.column_stack([m.lpd for m in members])
    return _perplexity(mixture_lpd(lpd, np.full(len(members), 1 / len(members))))


def _result(rule, chosen, Y, split, train, held_out):
    """``(result Fit, validation perplexity, chosen setting or None)`` of one method."""
    everyone = [m for s, members in chosen for m in members]
    if rule == "single":
        s, m = min(((s, m) for s, ms in chosen for m in ms), key=lambda x: _perplexity(x[1].lpd))
        return m.fit, _perplexity(m.lpd), s
    if rule == "best":
        picked = [(s, min(ms, key=lambda m: s.engine.score(m.fit))) for s, ms in chosen]
        s, m = min(picked, key=lambda x: _perplexity(x[1].lpd))
        return m.fit, _perplexity(m.lpd), s
    common = {"validation": split.validation, "mask": split.train}
    if rule in ("mean", "stack chosen"):
        s, ms = min(chosen, key=lambda x: _mean_perplexity(x[1]))
        if rule == "stack chosen":
            result = stack([m.fit for m in ms], Y, seeds="stack", **common)
            return result, result.mixture.stacking.validation_perplexity, s
        if len(ms) == 1:
            return ms[0].fit, _perplexity(ms[0].lpd), s
        with warnings.catch_warnings():  # members in distinct modes are what a study measures
            warnings.filterwarnings("ignore", message=MODES_WARNING)
            result = combine_members(
                [m.fit for m in ms], "mean", train, held_out, score=s.engine.score
            )
        return result, _mean_perplexity(ms), s
    if rule == "stack setting":
        stacks = [(s, stack([m.fit for m in ms], Y, seeds="stack", **common)) for s, ms in chosen]
        s, result = min(stacks, key=lambda x: x[1].mixture.stacking.validation_perplexity)
        return result, result.mixture.stacking.validation_perplexity, s
    fits = [m.fit for m in everyone]
    if rule == "stack+refit":
        options = {s.engine.name: dict(s.grid.options) for s, _ in chosen}
        result = stack(fits, Y, refit=True, options=options, **common)
        return result, np.nan, None
    seeds = "mean" if rule == "stack" else "stack"
    result = stack(fits, Y, seeds=seeds, **common)
    return result, result.mixture.stacking.validation_perplexity, None


def _describe(setting: _Setting | None) -> str:
    """The table's ``chosen``: grid, rank and prior of a setting ("" for a stack)."""
    if setting is None:
        return ""
    values = _prior_values(setting.prior)
    prior = "" if setting.prior is None else " alpha={alpha:g} beta={beta:g} gamma={gamma:.4g}"
    return f"{setting.grid.label} K={setting.rank}" + prior.format(**values)


def _weights(result: Fit) -> pd.DataFrame | None:
    """A stack's weights summed per engine and rank (None for any other fit)."""
    if result.mixture is None or result.mixture.stacking is None:
        return None
    return members_table(result).groupby(["engine", "rank"], as_index=False)["weight"].sum()


def _min_probability(result: Fit, Y, split) -> float:
    """The smallest probability ``result`` gives a test entry's outcome."""
    rows, columns, y = as_observed(Y, split.test, warn_empty=False).entries()
    p = result.probs_at(rows, columns)
    return float(np.min(np.where(y == 1, p, 1 - p)))


def _row(study, dataset, R, j, method, settings, Y, split, train, held_out):
    """The row of one method at one seed set: its result chosen on validation, scored on test."""
    chosen = [(s, ms) for s, ms in settings if method.grids is None or s.grid.label in method.grids]
    begin = time.process_time()
    result, validation, setting = _result(method.rule, chosen, Y, split, train, held_out)
    combining = time.process_time() - begin
    cpu = sum(m.cpu for _, ms in chosen for m in ms) + combining
    row = {
        "study": study.name, "dataset": dataset, "R": R, "seed_set": j,
        "disjoint": R * study.seed_sets <= study.pool_size, "method": method.name,
        "rule": method.rule, "validation_perplexity": validation,
        "test_perplexity": result.perplexity(Y, split.test), "cpu_seconds": cpu,
        "chosen": _describe(setting),
    }  # fmt: skip
    single = result.mixture is None  # a member, not a mixture of members
    fit_columns = fit_row(result, setting.prior if setting else None) if single else {}
    row |= {c: fit_columns.get(c, np.nan) for c in FIT_COLUMNS}
    if setting is not None:
        row |= {"rank": setting.rank, **_prior_values(setting.prior)}
    weights = _weights(result)
    by_engine = None if weights is None else weights.groupby("engine", sort=False)["weight"].sum()
    row["weights"] = (
        "" if by_engine is None else "; ".join(f"{e} {w:.3f}" for e, w in by_engine.items())
    )
    if "min_test_probability" in study.metrics:
        row["min_test_probability"] = _min_probability(result, Y, split)
    return row, result, weights


def run(studies: Study | Sequence[Study], out: Path | None = None, stream=None) -> StudyResult:
    """Run studies: every fit through the fitting runner, every choice on validation.

    Parameters
    ----------
    studies : Study or sequence of Study
    out : Path, optional
        The CSV file the table so far is written to after every seed set.
    stream : file, optional
        Progress lines (default stdout).

    Returns
    -------
    StudyResult
        Its ``table`` has one row per dataset x R x seed set x method: study, dataset,
        R, seed_set, method, rule, validation_perplexity, test_perplexity, cpu_seconds
        (the CPU seconds of every fit the method chose among, the choice's fits with
        ``choose_seed``, and its combining), chosen (the setting), :data:`FIT_COLUMNS`
        (of a single fit; rank and prior of a chosen setting), weights (per engine, of
        a stack) and the study's metrics.
    """
    studies = [studies] if isinstance(studies, Study) else list(studies)
    rows, fit_rows, weights, results = [], [], [], {}
    for study in studies:
        for data in (*study.datasets, *study.simulations):
            for found in _run_dataset(study, data, fit_rows, stream):
                for row, result, weight in found:
                    rows.append(row)
                    keys = {k: row[k] for k in ("dataset", "R", "seed_set", "method")}
                    if weight is not None:
                        weights.append(weight.assign(**keys))
                    if row["rule"] == "single":
                        results[tuple(keys.values())] = result
                if out is not None:
                    Path(out).parent.mkdir(parents=True, exist_ok=True)
                    write_csv(pd.DataFrame(rows), Path(out), index=False)
    return StudyResult(
        pd.DataFrame(rows),
        pd.DataFrame(fit_rows),
        pd.concat(weights, ignore_index=True) if weights else pd.DataFrame(),
        results,
    )


def _run_dataset(study: Study, data, fit_rows: list, stream):
    """Yield, seed set by seed set, the ``(row, result, weights)`` of every method on one
    dataset; its fits appended to ``fit_rows``."""
    name = data.name if isinstance(data, Simulation) else data
    Y = load_data(data, study.data_dir)
    split = split_of(study, np.shape(Y))
    train = as_observed(Y, split.train)
    held_out = held_out_entries(Y, train, split.validation)
    clock = _Budget(time.process_time(), study.budget)
    log(f"{study.name}: {name} {np.shape(Y)}", stream)
    pools = []
    for grid in study.grids:
        pools += _grid_settings(study, grid, (train, held_out, stream), clock, fit_rows, name)
    for R in study.members:
        for j in range(study.seed_sets):
            if not clock.over(f"R={R} set {j}", stream):
                yield _seed_set(study, pools, name, R, j, Y, split, train, held_out, stream)


def _seed_set(study, pools, name, R, j, Y, split, train, held_out, stream) -> list:
    """The rows of every method at seed set j of R members."""
    settings = []
    for s in pools:
        if s.grid.deterministic:
            settings.append((s, s.members))
            continue
        r = s.grid.members or R
        if r > len(s.members):
            continue
        chosen = seed_sets(len(s.members), r, study.seed_sets)
        settings.append((s, [s.members[i] for i in chosen[j]]))
    found = []
    for method in study.methods:
        if not any(method.grids is None or s.grid.label in method.grids for s, _ in settings):
            continue
        if method.at is not None and R not in method.at:
            continue
        found.append(_row(study, name, R, j, method, settings, Y, split, train, held_out))
    log(
        f"  R={R} set {j}: "
        + ", ".join(f"{r['method']} {r['test_perplexity']:.4f}" for r, _, _ in found),
        stream,
    )
    return found


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Mean and sd over seed sets of test and validation perplexity and CPU seconds, per
    dataset, method and R."""
    grouped = table.groupby(["dataset", "method", "R"], sort=False)
    return grouped.agg(
        test_mean=("test_perplexity", "mean"),
        test_sd=("test_perplexity", "std"),
        validation_mean=("validation_perplexity", "mean"),
        cpu_seconds_mean=("cpu_seconds", "mean"),
        seed_sets=("test_perplexity", "size"),
        **{m: (m, "min") for m in METRICS if m in table},
    ).reset_index()


def run_into(studies, args, figure, png: str) -> StudyResult:
    """:func:`run` into ``args.out``: ``results.csv`` (the table, after every seed set),
    ``weights.csv`` (of the stacks, if any), ``summary.csv`` (:func:`summarize`) and the
    ``figure(summary, path)`` of the summary in ``png``; the summary printed."""
    begin = time.process_time()
    out = Path(args.out)
    result = run(studies, out / "results.csv", progress(args))
    if not result.weights.empty:
        write_csv(result.weights, out / "weights.csv", index=False)
    summary = summarize(result.table)
    write_csv(summary, out / "summary.csv", index=False)
    figure(summary, out / png)
    with pd.option_context("display.width", 160):
        log(summary.to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    log(f"total {time.process_time() - begin:.0f} CPU s; results in {out}")
    return result


def parser(doc: str, out: str) -> argparse.ArgumentParser:
    """The options every study's ``main`` takes: --quick, --datasets, --data-dir, --out."""
    made = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    made.add_argument("--quick", action="store_true", help="a smoke run (animals, tiny grid)")
    made.add_argument("--datasets", nargs="+", choices=datasets.DATASETS, default=None)
    made.add_argument("--data-dir", default=None, help="folder with <name>.csv or .rda")
    made.add_argument("--out", default=out, type=Path)
    made.add_argument("--quiet", action="store_true", help="no progress lines")
    return made


def progress(args):
    """The stream of a study's progress lines: stdout, or nowhere with ``--quiet``."""
    return io.StringIO() if args.quiet else sys.stdout


def module(name: str):
    """The module of a registered study (:data:`STUDIES`)."""
    if name not in STUDIES:
        raise ValueError(f"unknown study {name!r}; the studies: {sorted(STUDIES)}")
    return importlib.import_module(STUDIES[name])


def with_data(study: Study, names, data_dir) -> Study:
    """``study`` on the datasets ``names`` (None: its own) read from ``data_dir``."""
    names = study.datasets if names is None else tuple(names)
    return dataclasses.replace(study, datasets=names, data_dir=data_dir)
