"""A study as data: a :class:`Study` names its data (the paper's datasets, a
:class:`Simulation` or a :class:`Matrix`), its split, its engines each with a :class:`Grid`
of ranks, priors and options, its seed sets (R members per setting, repeated ``seed_sets``
times), the :class:`Method` rows to score (a single fit, the best or the mean of a setting's
members, stacks, a refitted stack, :data:`RULES`), extra metrics (:data:`METRICS`) and a CPU
budget; every one checked when made. :func:`bernmf.studies.runner.running.run` runs it.

The paper's protocol, the modes, stacking, posterior-vs-MAP, SBC and accuracy studies
(:mod:`bernmf.studies.reproduce`), :func:`bernmf.compare` (a :class:`Matrix` of the user's, a
row per fit) and the report's tuning (a grid scored on the validation entries) are
configurations of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pandas as pd

from bernmf.data import datasets
from bernmf.data.arguments import check_rank
from bernmf.data.observed import Observed
from bernmf.data.split import Split
from bernmf.fitting.grids import EngineGrid, as_prior
from bernmf.inference import Engine, get_engine
from bernmf.models import Prior
from bernmf.models.simulate import simulate
from bernmf.results.fit import Fit
from bernmf.studies.reproduce import published

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
  weight (``seeds="mean"``); ``stack members``: a weight per member (``seeds="each"``);
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
    Y : array-like, DataFrame, scipy.sparse matrix or Observed of shape (M, N)
        Binary data, NaN missing (an :class:`~bernmf.data.observed.Observed`: checked
        already, as :func:`bernmf.compare` checks its Y).
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
    scales : tuple of int
        The compute scales b at which the grid is fitted: one more axis of the study
        (the table's ``scale``).
    scaled : tuple of str
        What a scale b multiplies: integer options (``num_samples``, ``steps``, ...)
        and ``"members"`` (the members per setting). A grid whose options are not scaled
        is fitted once, at its largest scale's members, and each scale takes the
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
    scales: tuple[int, ...] = (1,)
    scaled: tuple[str, ...] = ()
    rank_from: str | None = None
    as_fit: Mapping | None = None


@dataclass(frozen=True)
class Method:
    """A row of the study's table: ``rule`` (:data:`RULES`) over the members of ``grids``.

    ``grids`` are :attr:`Grid.label` values; None: every grid. ``at``: the R (the study's
    ``members``) at which it is scored; None: every R. ``scales``: the scales
    (:attr:`Grid.scales`) at which it is scored; None: every scale of its grids."""

    name: str
    rule: str
    grids: tuple[str, ...] | None = None
    at: tuple[int, ...] | None = None
    scales: tuple[int, ...] | None = None


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
        (with ``choosing_options``, at the grid's first scale; a sampler's on one chain),
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
            count = members_at(grid, self.pool_size, max(grid.scales))
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
        seed_set and scale.
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


def _check_matrix(study: Study, matrix: Matrix) -> None:
    """ValueError unless ``matrix``'s split has Y's shape, and one without validation entries
    is in a study that chooses nothing (rule ``each`` only, no ``choose_seed``)."""
    shape = matrix.Y.shape if isinstance(matrix.Y, Observed) else np.shape(matrix.Y)
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
    options, scales or scaled options."""
    engine = engine_of(grid.engine)
    if not grid.ranks:
        raise ValueError(f"grid {grid.label!r}: ranks is empty")
    ranks = [check_rank(k) for k in grid.ranks]
    for prior in grid.priors or ():
        if len(prior) != 3:
            raise ValueError(f"grid {grid.label!r}: a prior is (alpha, beta, gamma), got {prior}")
        for k in ranks:
            engine.prior_for(as_prior(prior), k)
    if not grid.scales or any(not isinstance(b, int) or b < 1 for b in grid.scales):
        raise ValueError(f"grid {grid.label!r}: scales must be integers >= 1, got {grid.scales}")
    for b in grid.scales:
        engine.with_defaults({**scaled_options(grid, b), **grid.choosing_options})
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


def scaled_options(grid: Grid, scale: int) -> dict:
    """The grid's options with each of its scaled options multiplied by ``scale``."""
    defaults = engine_of(grid.engine).with_defaults(dict(grid.options))
    scaled = {}
    for name in set(grid.scaled) - {"members"}:
        value = defaults.get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"grid {grid.label!r}: scaled {name!r} is not an integer option")
        scaled[name] = value * scale
    return {**grid.options, **scaled}


def members_at(grid: Grid, R: int, scale: int) -> int:
    """Members per setting of ``grid`` in a seed set of R at ``scale``."""
    return (grid.members or R) * (scale if "members" in grid.scaled else 1)
