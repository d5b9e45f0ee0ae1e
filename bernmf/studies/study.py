"""The one study runner: a study is data, and :func:`run` runs it through the fitting runner.

A :class:`Study` names its data (the paper's datasets, a :class:`Simulation` or a
:class:`Matrix`), its split, its engines each with a :class:`Grid` of ranks, priors and
options, its seed sets
(R members per setting, repeated ``seed_sets`` times), the :class:`Method` rows to
score (a single fit, the best or the mean of a setting's members, stacks, a refitted
stack), extra metrics and a CPU budget. :func:`run` fits every grid's settings x seeds
with :func:`bernmf.fitting.runner.fit_settings` (one compiled call per rank for mm and
em), scores each member once on the validation entries, makes every choice (setting,
member, weights) on them, and scores only each method's result on the test entries:
the test entries never decide anything. Stacks are :func:`bernmf.stack`, ensembles
:func:`bernmf.fitting.ensemble.combine_members`.

The paper's protocol (:mod:`bernmf.studies.paper`), the modes study
(:mod:`bernmf.studies.modes`), the stacking study (:mod:`bernmf.studies.stacking`), the
posterior-vs-MAP study (:mod:`bernmf.studies.posterior_vs_map`), :func:`bernmf.compare`
(a :class:`Matrix` of the user's, a row per fit) and the report's tuning (a grid scored on
the validation entries) are configurations of it; ``bernmf reproduce <study>`` runs any
study of :data:`STUDIES`.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import io
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from bernmf.data import datasets
from bernmf.data.files.csv_table import write_csv
from bernmf.data.observed import as_observed, check_rank
from bernmf.data.split import Split, paper_split, random_split
from bernmf.fitting.ensemble import MODES_WARNING, combine_members
from bernmf.fitting.grids import Budget, EngineGrid, Setting, as_prior, fit_grids
from bernmf.fitting.plan import held_out_entries
from bernmf.fitting.runner import Scored, mean_perplexity, planned, scored_lpd
from bernmf.fitting.stack import members_table, stack
from bernmf.inference import Engine, get_engine
from bernmf.models import Prior
from bernmf.models.simulate import simulate
from bernmf.models.spec import ZeroProbabilityWarning
from bernmf.posterior.accuracy import kl_predictive
from bernmf.posterior.calibration import ece_floor, interval_coverage, reliability
from bernmf.posterior.lpd import mixture_lpd
from bernmf.posterior.modes import mode_prediction
from bernmf.results.fit import Fit
from bernmf.studies import published

STUDIES = {
    "paper": "bernmf.studies.paper",
    "modes": "bernmf.studies.modes",
    "stacking": "bernmf.studies.stacking",
    "posterior_vs_map": "bernmf.studies.posterior_vs_map",
    "sbc": "bernmf.studies.sbc",
    "posterior_accuracy": "bernmf.studies.posterior_accuracy",
}
"""The studies ``bernmf reproduce`` runs: name -> module with ``main(argv) -> int`` (the
options of :func:`parser`, and its own), writing ``summary.csv`` among its results in
``--out``, or where its ``folder(out, as_published) -> Path`` says."""

RULES = (
    "each", "single", "first", "best", "mean", "chains", "stack chosen", "stack setting", "stack",
    "stack members", "stack+refit",
)  # fmt: skip
"""How a :class:`Method` makes its result from the members of its grids, all on validation:

- ``each``: no choice, a row per member of every setting (``bernmf.compare``'s table);
- ``single``: the member of lowest validation perplexity;
- ``first``: per setting the member of the seed set's first seed (one fit, as
  ``bernmf.fit(..., seed=s)`` makes it), the setting chosen on validation;
- ``best``: per setting the member of best engine score (:meth:`Engine.score`, its
  objective), the setting chosen on validation;
- ``mean``: per setting the uniform mixture of its members, chosen on validation;
- ``chains``: per setting a sampler's chains (its members) by
  :func:`bernmf.posterior.modes.mode_prediction`: the mean of all draws when they sit in
  one mode (mixed, or of low ESS), the chains mixed by chain stacking on the validation
  entries when they sit in distinct modes (never averaged silently), the setting chosen
  on validation;
- ``stack chosen``: the members of the setting ``mean`` chooses, stacked with
  :func:`bernmf.stack` (a weight each);
- ``stack setting``: per setting :func:`bernmf.stack` of its members (a weight each),
  the setting chosen by the stack's validation perplexity;
- ``stack``: :func:`bernmf.stack` of every member, the seeds of a setting sharing a
  weight (``seeds="mean"``); ``stack members``: a weight per member (``seeds="stack"``);
  ``stack+refit``: ``stack`` with its members of positive weight refitted on the
  training and validation entries (its validation perplexity is NaN).
"""

METRICS = ("min_test_probability", "ece", "coverage", "mixing", "kl_truth")
"""Extra columns a study may ask for:

- ``min_test_probability``: the smallest probability the result gives a test entry's
  outcome (0 would score inf);
- ``ece``: the expected calibration error of the test predictions, their reliability
  bins in :attr:`StudyResult.reliability` (:func:`bernmf.posterior.calibration.reliability`),
  and ``ece_floor``, the mean ECE that the same predictions score when they are right (the
  outcomes drawn from them: :func:`bernmf.posterior.calibration.ece_floor`), below which
  two ECEs cannot be told apart;
- ``kl_truth``: on a :class:`Simulation`, the mean over the test entries of KL(Bernoulli(true
  WH) || Bernoulli(the result's P(Y=1))), the excess log loss over the truth's without the
  noise of the test outcomes (:func:`bernmf.posterior.accuracy.kl_predictive`);
- ``coverage``: on a :class:`Simulation`, the share of the true WH entries inside the
  result's central 50% and 90% posterior intervals (``coverage_50``, ``coverage_90``;
  "no interval" for a result without draws;
  :func:`bernmf.posterior.calibration.interval_coverage`, the chains weighted as the
  result mixes them);
- ``mixing``: for the ``chains`` rule, how the chains mixed (:data:`MIXING_COLUMNS`).
"""

MIXING_COLUMNS = (
    "mixing", "chain_rule", "chain_weights", "modes", "ess_bulk_chain_min", "rhat_bound",
    "share_rhat_le_bound", "share_rhat_le_1.01", "rhat_nested_max", "divergences",
)  # fmt: skip
"""The ``mixing`` metric's columns (:class:`bernmf.posterior.mixing.ModeRhat`): the status
(``mixed``, ``low ESS`` or ``distinct modes``), the rule (``mean`` or ``chain
stacking``) and the chains' weights (3 decimals, space-separated), the chains' modes
(:func:`bernmf.posterior.modes.chain_modes`), each chain's bulk ESS of WH (median over its
entries) at the least chain, the R-hat bound at that ESS
(:func:`bernmf.posterior.mixing.rhat_bound`), the share of WH entries at R-hat <= that
bound and at R-hat <= 1.01 across all chains, the largest nested R-hat with the chains'
start groups as superchains (NaN with one chain per start) and NUTS's divergent
transitions."""

FIT_COLUMNS = [
    "rank", "alpha", "beta", "gamma", "seed", "iterations", "sweeps", "converged", "seconds",
    "compile_seconds",
]  # fmt: skip
"""The columns that describe one fit, in the tables of :func:`run` (``seconds`` run, without
compiling)."""

CHOICE, MEMBER = "choice", "member"
"""The stages of the fits table: fitted at ``choose_seed`` to choose a setting, or a member."""


@dataclass(frozen=True)
class Simulation:
    """Data simulated from the model (:func:`bernmf.simulate`).

    Attributes
    ----------
    rows, cols, rank : int
        M, N and K of the simulated Y (M, N).
    seed : int
    prior : tuple of float
        (alpha, beta, gamma) that W and H are drawn from; default the flat prior.
    """

    rows: int
    cols: int
    rank: int
    seed: int = 0
    prior: tuple[float, float, float] = (1.0, 1.0, 1.0)

    @property
    def name(self) -> str:
        """The simulation's name in the tables, as a dataset's: its prior named unless flat
        (``simulated-100x60-K6-prior0.3,0.3,0.3-seed0``)."""
        prior = "" if self.prior == (1.0, 1.0, 1.0) else "-prior" + ",".join(map(str, self.prior))
        return f"simulated-{self.rows}x{self.cols}-K{self.rank}{prior}-seed{self.seed}"

    def draw(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Y, W and H (:func:`bernmf.simulate` at the seed, shape and prior)."""
        return simulate(self.seed, self.rows, self.cols, self.rank, Prior(*self.prior))


@dataclass(frozen=True, eq=False)
class Matrix:
    """A user's matrix and its split, as a study's data (``bernmf.compare``'s).

    Attributes
    ----------
    name : str
        Its name in the tables.
    Y : array-like, DataFrame or scipy.sparse matrix of shape (M, N)
        Binary data, NaN missing.
    split : Split
        Its training, validation and test entries. Without validation entries the
        members are scored on the test entries, and the study's methods must be of rule
        ``each`` (nothing is chosen).
    """

    name: str
    Y: object
    split: Split


@dataclass(frozen=True)
class Grid(EngineGrid):
    """One engine's settings (:class:`bernmf.fitting.grids.EngineGrid`: engine, ranks, priors,
    options, batching, name) with the studies' axes.

    The engine may also be ``"mm-as-published"`` (:data:`published.ENGINE`); a sampler's
    ``num_chains`` is set to the number of seeds.

    Attributes
    ----------
    choosing_options : mapping
        Over ``options`` for the fits at the study's ``choose_seed`` (e.g. float32 grids).
    deterministic : bool
        The fit does not depend on its seed (logsvd, logpca): fitted once, seed 0, a member
        of every seed set.
    members : int, optional
        Members per setting in every seed set, whatever the study's R (default: R, from
        the study's pool); its pool is ``members * seed_sets`` seeds.
    budgets : tuple of int
        The compute budgets b at which the grid is fitted: one more axis of the study
        (the table's ``budget``).
    scaled : tuple of str
        What a budget b multiplies: integer options (``num_samples``, ``steps``, ...)
        and ``"members"`` (the members per setting). A grid whose options are not scaled
        is fitted once, at its largest budget's members, and each budget takes the
        first of them.
    rank_from : str, optional
        The label of an earlier grid whose rank chosen at the study's ``choose_seed``
        this grid fits (its own ``ranks`` then only check its priors), e.g. a sampler
        at the MAP's tuned rank with its own prior tuned.
    as_fit : mapping, optional
        Each member is the fit ``bernmf.fit(Y, engine, rank, seed=s, **as_fit, ...)``
        makes from its seed s, through :func:`bernmf.fitting.runner.planned` (``as_fit``:
        ``restarts`` and ``combine``; {} for a single fit; a sampler's fit has its
        ``num_chains``). None: the runner's members, a sampler's seeds its chains.
    """

    choosing_options: Mapping = field(default_factory=dict)
    deterministic: bool = False
    members: int | None = None
    budgets: tuple[int, ...] = (1,)
    scaled: tuple[str, ...] = ()
    rank_from: str | None = None
    as_fit: Mapping | None = None


@dataclass(frozen=True)
class Method:
    """A row of the study's table: ``rule`` (:data:`RULES`) over the members of ``grids``.

    ``grids`` are :attr:`Grid.label` values; None: every grid. ``at``: the R (the study's
    ``members``) at which it is scored; None: every R. ``budgets``: the budgets
    (:attr:`Grid.budgets`) at which it is scored; None: every budget of its grids."""

    name: str
    rule: str
    grids: tuple[str, ...] | None = None
    at: tuple[int, ...] | None = None
    budgets: tuple[int, ...] | None = None


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
    matrices : tuple of Matrix
        Users' matrices, each with its own split.
    split : {"paper", "random"}
        The paper's split (70/15/15, seed 12345) or a random one of seed ``split_seed``
        in ``fractions`` (train, validation, test).
    members : tuple of int
        The R compared: members per setting in a seed set.
    seed_sets : int
        Repetitions of each R with other seeds: disjoint blocks ``pool[j R:(j + 1) R]``
        while the pool has room, else random R-subsets of it.
    pool : int, optional
        Seeds fitted per setting, ``first_seed`` on (default ``max(members) * seed_sets``).
    first_seed : int
    seeds : tuple of int, optional
        The pool's seeds, in order, instead of ``first_seed`` on.
    choose_seed : int, optional
        The paper's protocol: each grid's setting is chosen once, on the fits of this seed
        (with ``choosing_options``, at the grid's first budget; a sampler's on one chain),
        and the seed sets fit the chosen setting only; a grid of one setting fits no
        choice.
    metrics : tuple of str
        Extra columns (:data:`METRICS`).
    budget : float, optional
        CPU seconds per dataset: once they are spent, no grid's next rank is fitted and no
        seed set is scored (each skip said in a progress line).
    warmup : bool
        The seeds fitted in calls of the fitting runner of one seed set's share each,
        after an untimed such call at seeds from :data:`bernmf.fitting.grids.WARMUP_SEED`:
        CPU seconds then exclude compiling.
    keep_draws : bool
        False: each member is kept without its posterior draws (:meth:`Fit.lightened`)
        once its step is scored and watched, so a study of many sampler fits holds their
        predictions only; refused with a rule or metric that reads draws (``chains``,
        ``coverage``).
    data_dir : str, optional
    """

    name: str
    grids: tuple[Grid, ...]
    methods: tuple[Method, ...]
    datasets: tuple[str, ...] = ()
    simulations: tuple[Simulation, ...] = ()
    matrices: tuple[Matrix, ...] = ()
    split: str = "paper"
    split_seed: int = 0
    fractions: tuple[float, float, float] = (0.7, 0.15, 0.15)
    members: tuple[int, ...] = (1,)
    seed_sets: int = 1
    pool: int | None = None
    first_seed: int = 0
    seeds: tuple[int, ...] | None = None
    choose_seed: int | None = None
    metrics: tuple[str, ...] = ()
    budget: float | None = None
    warmup: bool = False
    keep_draws: bool = True
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
        if not self.methods or not (self.datasets or self.simulations or self.matrices):
            raise ValueError(
                f"study {self.name!r}: give methods and datasets, simulations or matrices"
            )
        for matrix in self.matrices:
            _check_matrix(self, matrix)
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
        for i, grid in enumerate(self.grids):  # every grid checked here, before any data is read
            check_grid(grid)
            if grid.rank_from is not None and (
                self.choose_seed is None or grid.rank_from not in labels[:i]
            ):
                raise ValueError(
                    f"grid {grid.label!r}: rank_from needs choose_seed and an earlier grid, "
                    f"got {grid.rank_from!r}"
                )
        for method in self.methods:
            engines = {
                g.engine for g in self.grids if method.grids is None or g.label in method.grids
            }
            if method.rule == "stack+refit" and published.ENGINE.name in engines:
                raise ValueError(f"method {method.name!r}: the published code is not refitted")
            if method.rule == "chains":
                _check_chains(self, method)
        used = {m.rule for m in self.methods} | set(self.metrics)
        reading = sorted(used & {"chains", "coverage"})  # what reads the members' draws
        if reading and not self.keep_draws:
            raise ValueError(f"study {self.name!r}: {reading} read draws; give keep_draws=True")
        for grid in self.grids if self.seeds is not None else ():
            count = _members_at(grid, self.pool_size, max(grid.budgets))
            if count * (self.seed_sets if grid.members else 1) > len(self.seeds):
                raise ValueError(f"grid {grid.label!r}: more members than seeds {self.seeds}")

    @property
    def pool_size(self) -> int:
        """Seeds fitted per setting of a grid without its own ``members``."""
        return self.pool or max(self.members) * self.seed_sets

    def pool_seeds(self, count: int) -> list[int]:
        """The first ``count`` seeds of the pool."""
        if self.seeds is not None:
            return [int(s) for s in self.seeds[:count]]
        return list(range(self.first_seed, self.first_seed + count))


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
        The position of a row of rule ``single`` or ``each`` in ``table`` -> its Fit
        (:meth:`result_of`).
    reliability : DataFrame, optional
        With the ``ece`` metric: the reliability bins of every row's test predictions
        (:func:`bernmf.posterior.calibration.reliability`), with its dataset, method, R,
        seed_set and budget.
    """

    table: pd.DataFrame
    fits: pd.DataFrame
    weights: pd.DataFrame
    results: dict
    reliability: pd.DataFrame | None = None

    def result_of(self, **columns) -> Fit | None:
        """The Fit of the one row of rule ``single`` or ``each`` whose ``columns`` have these
        values (e.g. ``dataset="lastfm", method="logsvd", R=1, seed_set=0``); None if none."""
        matching = np.ones(len(self.table), bool)
        for name, value in columns.items():
            matching &= (self.table[name] == value).to_numpy()
        kept = [self.results[i] for i in np.flatnonzero(matching) if i in self.results]
        if len(kept) > 1:
            raise ValueError(f"{len(kept)} rows have {columns}")
        return kept[0] if kept else None


class _Data(NamedTuple):
    """One dataset of a study: its name, Y, split, training entries, the held-out ones that
    score every member (the validation entries; a :class:`Matrix`'s test entries when it
    has no validation entries) and the test entries, as the engines read them, its truth (a
    simulation's W @ H, else None) and the seed of its random split (NaN: the paper's split,
    or a :class:`Matrix`'s own)."""

    name: str
    Y: object
    split: Split
    train: object
    held_out: object
    test: object
    truth: np.ndarray | None
    split_seed: float = np.nan


def _check_matrix(study: Study, matrix: Matrix) -> None:
    """ValueError unless ``matrix``'s split has Y's shape, and one without validation entries
    is in a study that chooses nothing (rule ``each`` only, no ``choose_seed``)."""
    shape = np.shape(matrix.Y)
    for name, mask in zip(Split._fields, matrix.split, strict=True):
        if np.shape(mask) != shape:
            raise ValueError(
                f"matrix {matrix.name!r}: {name} has shape {np.shape(mask)} but Y {shape}"
            )
    choosing = study.choose_seed is not None or any(m.rule != "each" for m in study.methods)
    if choosing and not np.asarray(matrix.split.validation).any():
        raise ValueError(
            f"matrix {matrix.name!r} has no validation entries: a study of it chooses nothing "
            "(rule 'each' only, no choose_seed)"
        )


def _check_chains(study: Study, method: Method) -> None:
    """ValueError unless each grid of a ``chains`` method is a sampler's of >= 2 chains."""
    for grid in study.grids:
        if method.grids is not None and grid.label not in method.grids:
            continue
        if engine_of(grid.engine).seed_count != "num_chains":
            raise ValueError(f"method {method.name!r}: rule 'chains' needs a sampler's grid")
        if (grid.members or min(study.members)) < 2:
            raise ValueError(f"method {method.name!r}: rule 'chains' needs >= 2 chains")


def check_grid(grid: Grid) -> None:
    """ValueError or TypeError naming what is wrong in ``grid``: its engine, ranks, priors,
    options, budgets or scaled options."""
    engine = engine_of(grid.engine)
    if not grid.ranks:
        raise ValueError(f"grid {grid.label!r}: ranks is empty")
    ranks = [check_rank(k) for k in grid.ranks]
    for prior in grid.priors or ():
        if len(prior) != 3:
            raise ValueError(f"grid {grid.label!r}: a prior is (alpha, beta, gamma), got {prior}")
        for k in ranks:
            engine.prior_for(as_prior(prior), k)
    if not grid.budgets or any(not isinstance(b, int) or b < 1 for b in grid.budgets):
        raise ValueError(f"grid {grid.label!r}: budgets must be integers >= 1, got {grid.budgets}")
    for b in grid.budgets:
        engine.with_defaults({**_scaled(grid, b), **grid.choosing_options})
    if grid.members is not None and grid.members < 1:
        raise ValueError(f"grid {grid.label!r}: members must be >= 1, got {grid.members}")
    if grid.as_fit is not None:
        unknown = set(grid.as_fit) - {"restarts", "combine"}
        if unknown or engine is published.ENGINE:
            raise ValueError(
                f"grid {grid.label!r}: as_fit takes restarts and combine of a registered "
                f"engine, got {dict(grid.as_fit)} for {grid.engine!r}"
            )


def engine_of(name: str) -> Engine:
    """The engine named ``name``: registered, or the published code's."""
    return published.ENGINE if name == published.ENGINE.name else get_engine(name)


def log(message: str, stream=None) -> None:
    """A progress line on ``stream`` (default stdout), flushed."""
    print(message, file=stream or sys.stdout, flush=True)


def load_data(name, data_dir=None):
    """Y (DataFrame or array) of a dataset name, a :class:`Simulation` or a :class:`Matrix`."""
    if isinstance(name, Matrix):
        return name.Y
    if isinstance(name, Simulation):
        return name.draw()[0]
    return datasets.load(name, data_dir=data_dir)


def truth_of(data) -> np.ndarray | None:
    """The true P(Y=1) = W @ H (M, N) of a :class:`Simulation`; None for a dataset."""
    if not isinstance(data, Simulation):
        return None
    _, W, H = data.draw()
    return np.asarray(W) @ np.asarray(H)


def split_of(study: Study, shape, data=None) -> Split:
    """The study's split of a matrix of ``shape`` (a :class:`Matrix`'s own for ``data``)."""
    if isinstance(data, Matrix):
        return data.split
    if study.split == "paper":
        return paper_split(shape)
    return random_split(shape, study.fractions, seed=study.split_seed)


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
        **_timings(fit),
    }


def _timings(fit: Fit) -> dict:
    """``converged``, ``seconds`` (run) and ``compile_seconds`` of a fit (a mixture's: of its
    members, their seconds summed)."""
    return {
        "converged": fit.converged,
        "seconds": float(fit.timings.get("run", np.nan)),
        "compile_seconds": float(fit.timings.get("compile", np.nan)),
    }


def _options(grid: Grid, engine: Engine, seeds: int, choosing: bool, budget: int = 1) -> dict:
    """Every option of the grid's fits of ``seeds`` seeds (a sampler's: as many chains) at
    ``budget``; an :attr:`Grid.as_fit` grid's: those given, as ``bernmf.fit`` takes them (the
    engine's own progress off)."""
    options = {**_scaled(grid, budget), **(grid.choosing_options if choosing else {})}
    if grid.as_fit is not None:
        return {"progress": False, **options} if "progress" in engine.options else options
    if engine.seed_count is not None:
        options[engine.seed_count] = seeds
    return engine.with_defaults(options)


def _scaled(grid: Grid, budget: int) -> dict:
    """The grid's options with each of its scaled options multiplied by ``budget``."""
    defaults = engine_of(grid.engine).with_defaults(dict(grid.options))
    scaled = {}
    for name in set(grid.scaled) - {"members"}:
        value = defaults.get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"grid {grid.label!r}: scaled {name!r} is not an integer option")
        scaled[name] = value * budget
    return {**grid.options, **scaled}


def _members_at(grid: Grid, R: int, budget: int) -> int:
    """Members per setting of ``grid`` in a seed set of R at ``budget``."""
    return (grid.members or R) * (budget if "members" in grid.scaled else 1)


def _over(clock: Budget, what: str, stream) -> bool:
    """Whether the study's CPU budget is spent; if so, says that ``what`` is skipped."""
    reason = clock.exhausted()
    if reason is not None:
        log(f"  {what}: skipped, {reason}", stream)
    return reason is not None


class _Fitting(NamedTuple):
    """How a study fits one dataset: its data, the stream of its lines, the runner calls of
    a warm-up (0: none), what is called with each step's settings (None: nothing) and
    whether members keep their draws (:attr:`Study.keep_draws`)."""

    on: _Data
    stream: object
    warmup: int
    watch: Callable[[Setting], None] | None
    keep_draws: bool


def _fitted_settings(grid, engine, settings, seeds, options, fitting, clock) -> list[Setting]:
    """The (rank, prior) ``settings`` of one grid fitted at ``seeds``
    (:func:`bernmf.fitting.grids.fit_grids`, a rank per call) until the budget is spent; an
    :attr:`Grid.as_fit` grid's members made by :func:`bernmf.fitting.runner.planned`."""
    on = fitting.on
    ranks = tuple(dict.fromkeys(k for k, _ in settings))
    priors = None  # the engine's default
    if grid.priors is not None:  # one rank's: as chosen; several (the whole grid): as given
        priors = tuple(p for _, p in settings) if len(ranks) == 1 else grid.priors
    fitter = None
    if grid.as_fit is not None:
        validation = on.split.validation if on.split.validation.any() else None
        fitter = planned(on.Y, on.split.train, validation, grid.as_fit)
    swept = fit_grids(
        [dataclasses.replace(grid, ranks=ranks, priors=priors)], on.train, on.held_out, seeds,
        options={grid.label: options}, budget=clock, warmup=fitting.warmup, extend=None,
        engines={grid.engine: engine}, stream=fitting.stream or sys.stdout, fitter=fitter,
    )  # fmt: skip
    for setting in swept.settings if fitting.watch is not None else ():
        fitting.watch(setting)
    if fitting.keep_draws:
        return swept.settings
    return [
        s._replace(members=[m._replace(fit=m.fit.lightened()) for m in s.members])
        for s in swept.settings
    ]


class _Choice(NamedTuple):
    """What a grid fits once its setting is chosen: its (rank, prior) settings and the
    CPU seconds of the choice; ``fitted``: a deterministic grid's chosen fit itself."""

    grid: Grid
    settings: list
    cpu: float = 0.0
    fitted: list | None = None


def _choose(study, grid, fitting, clock, fit_rows, chosen) -> _Choice | None:
    """The settings of one grid: with ``choose_seed``, the setting of least validation
    perplexity at that seed (at the first budget; nothing fitted when there is one
    setting). ``chosen`` maps the labels of the grids done to their chosen rank (for
    :attr:`Grid.rank_from`); this grid's is added. None when the CPU budget is spent."""
    engine = engine_of(grid.engine)
    priors = [None] if grid.priors is None else [as_prior(p) for p in grid.priors]
    ranks = grid.ranks
    if grid.rank_from is not None:
        if grid.rank_from not in chosen:  # its grid was skipped by the CPU budget
            return None
        ranks = (chosen[grid.rank_from],)
    settings = [(k, engine.prior_for(p, k)) for k in ranks for p in priors]
    if study.choose_seed is None or len(settings) == 1:
        chosen[grid.label] = settings[0][0]
        return _Choice(grid, settings)
    seed = 0 if grid.deterministic else study.choose_seed
    options = _options(grid, engine, 1, choosing=True, budget=grid.budgets[0])
    choice = _fitted_settings(grid, engine, settings, [seed], options, fitting, clock)
    fit_rows += [_fits_row(fitting.on, s, s.members[0], CHOICE) for s in choice]
    if not choice:
        return None
    best = min(choice, key=lambda s: _perplexity(s.members[0].lpd))
    chosen[grid.label] = best.rank
    cpu = sum(s.members[0].cpu_seconds for s in choice)
    # a deterministic grid's chosen fit is the one each seed set would make
    return _Choice(grid, [(best.rank, best.prior)], cpu, [best] if grid.deterministic else None)


def _shared(grid: Grid) -> bool:
    """Whether the grid's options are those of every budget (fitted once, at the largest)."""
    return set(grid.scaled) <= {"members"}


def _fit_at(study, choice: _Choice, budget, fitting, clock, fit_rows) -> list[Setting]:
    """The chosen settings of one grid fitted at ``budget``, each with its pool of members
    (a shared grid's: at its largest budget, for every budget). The choice's CPU seconds are
    not among the members': a row says them apart (``tuning_seconds``)."""
    grid = choice.grid
    if choice.fitted is not None:
        return choice.fitted
    engine = engine_of(grid.engine)
    count = _members_at(grid, study.pool_size, budget)
    count = count * study.seed_sets if grid.members else count
    seeds = [0] if grid.deterministic else study.pool_seeds(count)
    options = _options(grid, engine, len(seeds), choosing=False, budget=budget)
    made = _fitted_settings(grid, engine, choice.settings, seeds, options, fitting, clock)
    made = [s._replace(budget=None if _shared(grid) else budget) for s in made]
    fit_rows += [_fits_row(fitting.on, s, m, MEMBER) for s in made for m in s.members]
    return made


def _fits_row(on: _Data, setting: Setting, member: Scored, stage: str) -> dict:
    """The row of one fit in :attr:`StudyResult.fits`."""
    return {
        "dataset": on.name,
        "split_seed": on.split_seed,
        "grid": setting.grid.label,
        "engine": setting.engine.name,
        "stage": stage,
        "budget": np.nan if setting.budget is None else setting.budget,
        **fit_row(member.fit, setting.prior),
        "cpu_seconds": member.cpu_seconds,
        "validation_perplexity": float(-member.lpd.mean()),
    }


def _perplexity(lpd: np.ndarray) -> float:
    """Validation perplexity of a mixture's or member's log densities (entries, [members])."""
    return float(-np.mean(lpd))


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
        s, ms = min(chosen, key=lambda x: mean_perplexity(x[1]))
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
        return result, mean_perplexity(ms), s
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


def _chains(chosen, Y, split, train, held_out):
    """``(result, validation perplexity, setting, mixing columns)`` of the ``chains`` rule:
    per setting its chains by :func:`mode_prediction` (nested R-hat over the start groups
    of the sampler's ``chains_per_start``), as a mixture of its members with the
    prediction's chain weights (rule ``"mean"`` in one mode, else ``"stack"``)."""
    made = []
    for s, ms in chosen:
        fits = [m.fit for m in ms]
        W, H = (np.concatenate([f.draws[name] for f in fits]) for name in ("W", "H"))
        starts = np.arange(len(fits)) // fits[0].extras.get("chains_per_start", 1)
        mode = mode_prediction(Y, split.train, W, H, starts=starts, validation=split.validation)
        lpd = np.column_stack([m.lpd for m in ms])
        made.append((s, fits, mode, _perplexity(mixture_lpd(lpd, mode.weights))))
    s, fits, mode, validation = min(made, key=lambda x: x[3])
    with warnings.catch_warnings():  # the modes are what mode_prediction weighs
        warnings.filterwarnings("ignore", message=MODES_WARNING)
        result = combine_members(fits, "mean", train, held_out, score=s.engine.score)
    rule = "mean" if mode.rule == "mean" else "stack"
    mixture = dataclasses.replace(result.mixture, weights=tuple(mode.weights.tolist()), rule=rule)
    table = mode.rhat.table()
    diverging = [f.sample_stats.get("diverging") for f in fits]
    every = ["ess_bulk_chain_min", "rhat_bound", "share_rhat_le_bound", "share_rhat_le_1.01"]
    columns = {
        "mixing": mode.status,
        "chain_rule": mode.rule,
        "chain_weights": " ".join(f"{w:.3f}" for w in mode.weights),
        "modes": int(table.index.str.startswith("mode ").sum()),
        **table.loc["all", every].to_dict(),
        "rhat_nested_max": table.loc["nested", "rhat_max"] if "nested" in table.index else np.nan,
        "divergences": sum(0 if d is None else int(np.asarray(d).sum()) for d in diverging),
    }
    return dataclasses.replace(result, mixture=mixture), validation, s, columns


def _coverage(result: Fit, truth) -> dict:
    """``coverage_50`` and ``coverage_90`` of the true WH by the result's draws, its chains
    weighted as its mixture weighs them (no interval for a result without draws)."""
    if not result.draws:
        return interval_coverage(truth).row()
    W, H = result.draws["W"], result.draws["H"]
    mixture = result.mixture
    weights = None
    if mixture is not None and mixture.rule != "best" and len(mixture.weights) == len(W):
        weights = np.asarray(mixture.weights)
    return interval_coverage(truth, W, H, chain_weights=weights).row()


def _describe(setting: Setting | None) -> str:
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


def _rows(study, on: _Data, R, j, budget, method, settings, tuning: dict) -> list[tuple]:
    """The rows of one method at one seed set (one, but a row per member for ``each``): each
    ``(row, result, weights, reliability bins)``, its result chosen on validation and
    scored on test; its costs apart (:func:`_costs`)."""
    Y, split, train, held_out = on.Y, on.split, on.train, on.held_out
    chosen = [(s, ms) for s, ms in settings if method.grids is None or s.grid.label in method.grids]
    made = (study, on, R, j, budget, method, _costs(chosen, tuning))
    if method.rule == "each":
        return _each(made, chosen, on)
    if method.rule == "first":  # "single" among the first members: the others not fitted
        chosen = [(s, ms[:1]) for s, ms in chosen]
    begin = time.process_time()
    mixing = {}
    if method.rule == "chains":
        result, validation, setting, mixing = _chains(chosen, Y, split, train, held_out)
    else:
        rule = "single" if method.rule == "first" else method.rule
        result, validation, setting = _result(rule, chosen, Y, split, train, held_out)
    combining = time.process_time() - begin
    cpu = sum(m.cpu_seconds for _, ms in chosen for m in ms) + combining
    return [_scored(*made, result, validation, setting, cpu, mixing=mixing)]


def _costs(chosen, tuning: dict) -> dict:
    """The costs of a row kept apart from its ``cpu_seconds`` (the CPU of the fits it is made
    of): ``tuning_seconds``, the CPU seconds of its grids' choices (each fitted once for every
    seed set and budget), and ``compile_seconds``, the most any of its settings' steps spent
    compiling (:attr:`bernmf.fitting.grids.Setting.compile_seconds`: a program is compiled
    once per shape and options, then reused)."""
    labels = {s.grid.label for s, _ in chosen}
    return {
        "tuning_seconds": float(sum(tuning.get(label, 0.0) for label in labels)),
        "compile_seconds": max((s.compile_seconds for s, _ in chosen), default=0.0),
    }


def _each(made: tuple, chosen, on: _Data) -> list[tuple]:
    """The rows of rule ``each``: one per member of every setting, scored on the test entries
    as :func:`bernmf.fitting.runner.runs` scores them (a score of inf said, fit by fit);
    without validation entries the members' own scores are those."""
    pairs = [(s, m) for s, ms in chosen for m in ms]
    if on.held_out is on.test:
        scores = [(np.nan, m.validation_perplexity) for _, m in pairs]
    else:
        fits = [m.fit for _, m in pairs]
        tests = -scored_lpd(fits, on.test, [f.seed for f in fits]).mean(axis=0)
        scores = [(_perplexity(m.lpd), t) for (_, m), t in zip(pairs, tests, strict=True)]
    return [
        _scored(*made, m.fit, validation, s, m.cpu_seconds, test=float(test))
        for (s, m), (validation, test) in zip(pairs, scores, strict=True)
    ]


def _scored(study, on: _Data, R, j, budget, method, costs, result, validation, setting, cpu, *,
            mixing=None, test=None) -> tuple:  # fmt: skip
    """``(row, result, weights, reliability bins)`` of one result: scored on the test entries
    (``test``: that score, already made), with the study's metrics and its ``costs``
    (:func:`_costs`; rule ``each``: a fit's own compile seconds). A score of inf is a
    finding of the study, in its row and line, and is not warned (as a fit's is:
    :func:`_each`)."""
    Y, split = on.Y, on.split
    if test is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ZeroProbabilityWarning)
            test = result.perplexity(Y, split.test)
    row = {
        "study": study.name, "dataset": on.name, "R": R, "seed_set": j, "budget": budget,
        "disjoint": R * study.seed_sets <= study.pool_size, "method": method.name,
        "rule": method.rule, "validation_perplexity": validation,
        "test_perplexity": test,
        "cpu_seconds": cpu, "chosen": _describe(setting),
        "split_seed": on.split_seed,
    }  # fmt: skip
    fit = method.rule == "each" or result.mixture is None  # one fit, not a choice's mixture
    fit_columns = fit_row(result, setting.prior if setting else None) if fit else _timings(result)
    row |= {c: fit_columns.get(c, np.nan) for c in FIT_COLUMNS}
    row |= {k: v for k, v in costs.items() if method.rule != "each" or k != "compile_seconds"}
    if setting is not None:
        row |= {"rank": setting.rank, **_prior_values(setting.prior)}
    weights = _weights(result)
    by_engine = None if weights is None else weights.groupby("engine", sort=False)["weight"].sum()
    row["weights"] = (
        "" if by_engine is None else "; ".join(f"{e} {w:.3f}" for e, w in by_engine.items())
    )
    if "min_test_probability" in study.metrics:
        row["min_test_probability"] = _min_probability(result, Y, split)
    bins = None
    if "ece" in study.metrics:
        diagram = reliability(np.asarray(Y, float), result.probs, split.test)
        row["ece"], bins = diagram.ece, diagram.table
        row["ece_floor"] = ece_floor(result.probs, split.test & ~np.isnan(np.asarray(Y, float)))
    if "kl_truth" in study.metrics and on.truth is not None:
        test = np.asarray(split.test, bool)
        row["kl_truth"] = kl_predictive(result.probs[test], on.truth[test])
    if "mixing" in study.metrics:
        row |= {c: (mixing or {}).get(c, np.nan) for c in MIXING_COLUMNS}
    if "coverage" in study.metrics and on.truth is not None:
        row |= _coverage(result, on.truth)
    return row, result, weights, bins


def run(
    studies: Study | Sequence[Study],
    out: Path | None = None,
    stream=None,
    watch: Callable[[Setting], None] | None = None,
) -> StudyResult:
    """Run studies: every fit through the fitting runner, every choice on validation.

    Parameters
    ----------
    studies : Study or sequence of Study
    out : Path, optional
        The CSV file the table so far is written to after every seed set.
    stream : file, optional
        Progress lines (default stdout).
    watch : callable, optional
        Called with every setting fitted, its members scored, as each grid step ends (a
        progress bar's hook).

    Returns
    -------
    StudyResult
        Its ``table`` has one row per dataset x R x seed set x budget x method: study,
        dataset, R, seed_set, budget, method, rule, validation_perplexity,
        test_perplexity, cpu_seconds (the CPU seconds of every fit the method chose
        among and of its combining, compiling excluded with ``warmup``), chosen (the
        setting), :data:`FIT_COLUMNS` (of a single fit; rank and prior of a chosen
        setting; a mixture's converged and seconds), tuning_seconds and compile_seconds
        (apart: :func:`_costs`), split_seed (of a random split), weights (per engine, of a
        stack) and the study's metrics; rule ``each`` gives a row per fit.
    """
    studies = [studies] if isinstance(studies, Study) else list(studies)
    rows, fit_rows, weights, results, bins = [], [], [], {}, []
    for study in studies:
        for data in (*study.datasets, *study.simulations, *study.matrices):
            for found in _run_dataset(study, data, fit_rows, stream, watch):
                for row, result, weight, table in found:
                    if row["rule"] in ("single", "each"):
                        results[len(rows)] = result
                    rows.append(row)
                    keys = {k: row[k] for k in ("dataset", "split_seed", "R", "seed_set", "method")}
                    if weight is not None:
                        weights.append(weight.assign(**keys))
                    if table is not None:
                        bins.append(table.assign(**keys, budget=row["budget"]))
                if out is not None:
                    Path(out).parent.mkdir(parents=True, exist_ok=True)
                    write_csv(pd.DataFrame(rows), Path(out), index=False)
    return StudyResult(
        pd.DataFrame(rows),
        pd.DataFrame(fit_rows),
        pd.concat(weights, ignore_index=True) if weights else pd.DataFrame(),
        results,
        pd.concat(bins, ignore_index=True) if bins else None,
    )


def _run_dataset(study: Study, data, fit_rows: list, stream, watch):
    """Yield, budget by budget and seed set by seed set, the ``(row, result, weights,
    reliability bins)`` of every method on one dataset; its fits appended to ``fit_rows``.
    Each grid's setting is chosen first; a grid whose options a budget scales is fitted
    at one budget at a time."""
    name = data if isinstance(data, str) else data.name
    Y = load_data(data, study.data_dir)
    split = split_of(study, np.shape(Y), data)
    train = as_observed(Y, split.train, mask_name="the split's train")
    test = as_observed(Y, split.test, warn_empty=False, mask_name="the split's test")
    held_out = test  # a Matrix without validation entries: nothing is chosen (Study checks it)
    if split.validation.any():
        held_out = held_out_entries(Y, train, split.validation)
    random = study.split == "random" and not isinstance(data, Matrix)
    seed = study.split_seed if random else np.nan
    on = _Data(name, Y, split, train, held_out, test, truth_of(data), seed)
    clock = Budget(study.budget, clock=time.process_time, unit="CPU s")
    log(f"{study.name}: {name} {np.shape(Y)}", stream)
    chosen = {}
    fitting = _Fitting(on, stream, study.seed_sets if study.warmup else 0, watch, study.keep_draws)
    choices = [_choose(study, g, fitting, clock, fit_rows, chosen) for g in study.grids]
    choices = [c for c in choices if c is not None]
    tuning = {c.grid.label: c.cpu for c in choices}
    shared = [
        s
        for c in choices
        if _shared(c.grid)
        for s in _fit_at(study, c, max(c.grid.budgets), fitting, clock, fit_rows)
    ]
    for budget in sorted({b for grid in study.grids for b in grid.budgets}):
        pools = shared + [  # a budget's fits at a time: only they hold their draws
            s
            for c in choices
            if not _shared(c.grid) and budget in c.grid.budgets
            for s in _fit_at(study, c, budget, fitting, clock, fit_rows)
        ]
        for R in study.members:
            for j in range(study.seed_sets):
                if not _over(clock, f"R={R} set {j}", stream):
                    yield _seed_set(study, pools, on, R, j, budget, stream, tuning)


def _seed_set(study, pools, on: _Data, R, j, budget, stream, tuning: dict) -> list:
    """The rows of every method at seed set j of R members and ``budget``; ``tuning``: the
    CPU seconds of each grid's choice (by label)."""
    settings = []
    for s in pools:
        if budget not in s.grid.budgets or s.budget not in (None, budget):
            continue
        if s.grid.deterministic:
            settings.append((s, s.members))
            continue
        r = _members_at(s.grid, R, budget)
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
        if method.budgets is not None and budget not in method.budgets:
            continue
        found += _rows(study, on, R, j, budget, method, settings, tuning)
    at = "" if budget == 1 else f" budget {budget}"
    log(f"  R={R} set {j}{at}: " + ", ".join(_said(found)), stream)
    return found


def _said(found: list) -> list[str]:
    """A method's test perplexity, as a seed set's line says it (rule ``each``: its fits'
    count and best)."""
    scores: dict[str, list[float]] = {}
    for row, *_ in found:
        scores.setdefault(row["method"], []).append(row["test_perplexity"])
    return [
        f"{name} {values[0]:.4f}" if len(values) == 1 else
        f"{name} {len(values)} fits, best {min(values):.4f}"
        for name, values in scores.items()
    ]  # fmt: skip


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Mean and sd over seed sets of test and validation perplexity and CPU seconds, per
    dataset, method, R and budget; the least ``min_test_probability`` and the mean ``ece``."""
    grouped = table.groupby(["dataset", "method", "R", "budget"], sort=False)
    extra = {"min_test_probability": "min", "ece": "mean"}
    return grouped.agg(
        test_mean=("test_perplexity", "mean"),
        test_sd=("test_perplexity", "std"),
        validation_mean=("validation_perplexity", "mean"),
        cpu_seconds_mean=("cpu_seconds", "mean"),
        seed_sets=("test_perplexity", "size"),
        **{m: (m, how) for m, how in extra.items() if m in table},
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
