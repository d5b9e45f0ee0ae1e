"""The one loop over engines x ranks x priors x seeds: grids fitted rank by rank, every member
scored on held-out entries, within a budget, and a grid extended past the edge where its best
setting lies.

Every loop over engines and settings in bernmf is :func:`fit_grids`, with other grids, budgets
and outputs: the default search (:mod:`bernmf.fitting.search`: a ladder of ranks within
seconds, then rounds of priors and seeds), :func:`bernmf.tune.grid` (a grid, its edges
extended), the report (through tune and compare) and the study runner
(:func:`bernmf.studies.runner.running.run`, whose ``Grid`` is an :class:`EngineGrid` with
the studies' axes, and whose configurations include :func:`bernmf.compare`). A step is one
grid at one rank: :func:`bernmf.fitting.runner.fit_settings` of its priors x seeds (one
compiled call for mm and em), each member scored on the held-out entries with its CPU seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from bernmf._progress import say, working_on
from bernmf.data.observed import Observed
from bernmf.fitting.runner import Scored, fit_settings
from bernmf.inference import Engine, get_engine
from bernmf.models.spec import Prior

__all__ = [
    "Budget",
    "EngineGrid",
    "GridFits",
    "Setting",
    "as_prior",
    "engine_options",
    "fit_grids",
]

WARMUP_SEED = 1_000_000
"""With ``warmup``, the untimed first call of each step fits seeds from here on."""
WARMUP_TOL = 1.0
"""The tolerance of a batched engine's untimed call (mm, em): a relative change below 1
stops it after its first iterations; its program, compiled for the timed calls, is the
same (``tol`` is an argument of it, not a constant)."""


@dataclass(frozen=True)
class EngineGrid:
    """One engine's settings: ranks x priors, with its options.

    Attributes
    ----------
    engine : str
        A registered engine (the studies add the published code's).
    ranks : tuple of int
    priors : tuple of (alpha, beta, gamma) or Prior, optional
        None: the engine's default prior (or none, for an engine without one).
    options : mapping
        Engine options (:meth:`Engine.with_defaults` fills the others).
    batching : mapping
        For an engine that fits a rank's settings in one call (``workers``, ``progress``,
        ``batch_size``: :func:`bernmf.inference.mm.run_many`).
    name : str, optional
        Its label in lines and tables (default: the engine's name).
    """

    engine: str
    ranks: tuple[int, ...]
    priors: tuple | None = None
    options: Mapping = field(default_factory=dict)
    batching: Mapping = field(default_factory=dict)
    name: str | None = None

    @property
    def label(self) -> str:
        """The grid's name in lines and tables."""
        return self.name or self.engine


class Setting(NamedTuple):
    """One (rank, prior) of a grid and its members, one per seed (priors as given), the
    studies' compute scale of its options, and the seconds its step spent compiling (the
    most any of its fits, its warm-up's included, reported: one program per step)."""

    grid: EngineGrid
    engine: Engine
    rank: int
    prior: Prior | None
    members: list[Scored]
    scale: int | None = None
    compile_seconds: float = 0.0


@dataclass
class Budget:
    """Seconds a :func:`fit_grids` call may take, on ``clock``, and the estimates of its next steps.

    A step is left out when the seconds are spent (``share`` of them), or, with
    ``estimating``, when the seconds its engine's last step took per fit, scaled by fit count
    and rank (about linear in K) and with the compile seconds again at a new rank, would end
    past them, counting ``reserve`` times the run seconds of every step so far and of it (what
    refits of them may cost later). An engine's first step is its probe: fitted unless the
    seconds are spent. With ``work``, the seconds are those of each fit's work (a function of
    the fit: its sweeps, shape and rank) rather than of the clock, compiling counted as none:
    every choice is then the same on any machine and load.

    Attributes
    ----------
    seconds : float, optional
        None: no bound.
    clock : callable
        ``time.perf_counter`` (wall seconds) or ``time.process_time`` (CPU seconds).
    share, reserve : float
    estimating : bool
    unit : str
        How its seconds are named in lines ("s", "CPU s").
    work : callable, optional
        ``work(fit) -> seconds`` of a fit made; None: the clock's.
    """

    seconds: float | None = None
    clock: Callable[[], float] = time.perf_counter
    share: float = 1.0
    reserve: float = 0.0
    estimating: bool = False
    unit: str = "s"
    work: Callable | None = None
    begin: float = field(default=None)
    last: dict = field(default_factory=dict)  # engine -> (compile s, run s per fit, rank)
    compiled: set = field(default_factory=set)  # (engine, rank) fitted so far
    run: float = 0.0  # run seconds of every fit so far

    def __post_init__(self):
        if self.begin is None:
            self.begin = self.clock()

    def spent(self) -> float:
        """Seconds since the budget began; with ``work``, the work of every fit so far."""
        return self.run if self.work is not None else self.clock() - self.begin

    def estimate(self, engine: str, rank: int, fits: int) -> float:
        """Seconds for ``fits`` fits of ``engine`` at ``rank`` (0 before its first step)."""
        if engine not in self.last:
            return 0.0
        compile_, per_fit, at_rank = self.last[engine]
        new_rank = (engine, rank) not in self.compiled
        return compile_ * new_rank + per_fit * fits * max(rank / at_rank, 1.0)

    def exhausted(self) -> str | None:
        """Why nothing more fits once ``share`` of the seconds is spent; None before."""
        if self.seconds is None or self.spent() <= self.share * self.seconds:
            return None
        return f"the budget of {self.seconds:g} {self.unit} is spent"

    def refusal(self, engine: str, rank: int, fits: int) -> str | None:
        """Why a step of ``fits`` fits of ``engine`` at ``rank`` is left out; None: it fits."""
        spent = self.exhausted()
        if spent is not None or self.seconds is None:
            return spent
        if not self.estimating or engine not in self.last:
            return None
        estimate = self.estimate(engine, rank, fits)
        limit = self.share * self.seconds
        if self.spent() + estimate + self.reserve * (self.run + estimate) > limit:
            return f"about {estimate:.0f} {self.unit}, over the budget"
        return None

    def measured(self, engine: str, rank: int, fits) -> None:
        """Record a step's compile and run seconds (its fits' timings, or their ``work``)."""
        if self.work is not None:
            compile_, run = 0.0, sum(self.work(f) for f in fits)
        else:
            compile_ = sum(f.timings.get("compile", 0.0) for f in fits)
            run = sum(f.timings.get("run", 0.0) for f in fits)
        self.last[engine] = (compile_, run / max(len(fits), 1), rank)
        self.compiled.add((engine, rank))
        self.run += run


@dataclass
class GridFits:
    """What :func:`fit_grids` made.

    Attributes
    ----------
    settings : list of Setting
        In the order fitted.
    steps : list of dict
        One per step fitted: grid, engine, rank, fits, seconds (wall), cpu_seconds,
        validation_perplexity (the step's best).
    left_out : list of dict
        One per step left out: grid, engine, rank, reason.
    notes : list of str
        What was said of the grids' edges.
    """

    settings: list[Setting] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    left_out: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def engine_options(engine: Engine, given: Mapping | None = None) -> dict:
    """The engine's options, ``given`` or its defaults, but for its own progress bar (the grid's
    says what runs) and a sampler's chains (one a member: each seed is one), unless ``given``
    names them."""
    quiet = {"progress": False} if "progress" in engine.options else {}
    chains = {engine.seed_count: 1} if engine.seed_count is not None else {}
    return engine.with_defaults({**quiet, **chains, **(given or {})})


def grid_priors(grid: EngineGrid, engine: Engine, rank: int) -> list[Prior | None]:
    """The grid's priors at ``rank``, checked and broadcast (:meth:`Engine.prior_for`)."""
    given = [None] if grid.priors is None else [as_prior(p) for p in grid.priors]
    return [engine.prior_for(p, rank) for p in given]


def as_prior(value) -> Prior:
    """A grid's prior as a :class:`Prior`: one given as a Prior is kept as it is (an engine's
    default may rescale gamma by the rank: ``gibbs``'s and ``vb``'s 1/K); a tuple is
    ``(alpha, beta, gamma)``."""
    return value if isinstance(value, Prior) else Prior(*value)


def fit_grids(
    grids: Sequence[EngineGrid],
    train: Observed,
    held_out: Observed,
    seeds: Sequence[int],
    *,
    options: Mapping[str, dict] | None = None,
    budget: Budget | None = None,
    order: str = "grid",
    extend: int = 0,
    warmup: int = 0,
    engines: Mapping[str, Engine] | None = None,
    progress: bool = True,
    stream=None,
    into: GridFits | None = None,
    fitter: Callable[..., list[Scored]] | None = None,
) -> GridFits:
    """Fit every grid's ranks x priors x seeds on ``train``; score each member on ``held_out``.

    Parameters
    ----------
    grids : sequence of EngineGrid
    train, held_out : Observed
        The training entries and the disjoint entries that score every member.
    seeds : sequence of int
        The seeds of every setting (a sampler's: one chain each, fitted as one run).
    options : dict of grid label to dict, optional
        Every option of a grid's fits; default :func:`engine_options` of its ``options``.
    budget : Budget, optional
        A step it refuses is left out, said so, and its grid's higher ranks too.
    order : {"grid", "rank"}
        Grid by grid, or rank by rank across the grids (a ladder: every engine's cheap ranks
        first).
    extend : int or None, default 0
        Where a grid's best setting lies at the edge of two or more ranks (or priors), fit up
        to this many more beyond it (the rank doubled or halved; alpha or beta doubled, or
        halfway to the engine's lower limit) while each improves the grid's best score. With
        0, an edge is only said; with None, not even said (a search's ladder has no edge).
    warmup : int, default 0
        With W > 0, a step's seeds are fitted in W calls after an untimed call at other seeds
        (:data:`WARMUP_SEED` on): CPU seconds then exclude compiling.
    engines : dict of engine name to Engine, optional
        Engines not in the registry (the published code's).
    progress : bool, default True
        A line per step, per left-out step and per edge on ``stream`` (default stderr).
    into : GridFits, optional
        Add to it (a later round of the same search) rather than to a new one.
    fitter : callable, optional
        How a step's members are made, called as :func:`bernmf.fitting.runner.fit_settings`
        (the default: a member per prior and seed, a sampler's seeds its chains);
        :func:`bernmf.fitting.runner.planned` gives a fit per seed as :func:`bernmf.fit`
        makes it (a study's ``as_fit`` grids, :func:`bernmf.compare`'s).

    Returns
    -------
    GridFits
    """
    made = into if into is not None else GridFits()
    if order not in ("grid", "rank"):
        raise ValueError(f"order must be 'grid' or 'rank', got {order!r}")
    resolved = {g.label: (engines or {}).get(g.engine) or get_engine(g.engine) for g in grids}
    chosen = {
        g.label: dict((options or {}).get(g.label) or engine_options(resolved[g.label], g.options))
        for g in grids
    }
    stopped: set[str] = set()

    def step(grid: EngineGrid, rank: int, priors=None) -> list[Setting] | None:
        engine = resolved[grid.label]
        priors = grid_priors(grid, engine, rank) if priors is None else priors
        count = len(priors) * len(seeds)
        reason = budget.refusal(engine.name, rank, count) if budget is not None else None
        if reason is not None:
            made.left_out.append(
                {"grid": grid.label, "engine": engine.name, "rank": rank, "reason": reason}
            )
            say(progress, f"  left out {grid.label} K={rank} ({reason})", stream)
            return None
        found = _step(grid, engine, train, held_out, rank, priors, seeds, chosen[grid.label],
                      warmup, budget, made, progress, stream, fitter or fit_settings)  # fmt: skip
        made.settings += found
        return found

    if order == "rank":
        for rank in sorted({k for g in grids for k in g.ranks}):
            for grid in grids:
                if rank not in grid.ranks or grid.label in stopped:
                    continue
                if step(grid, rank) is None:
                    stopped.add(grid.label)
    else:
        for grid in grids:
            for rank in grid.ranks:
                if step(grid, rank) is None:
                    stopped.add(grid.label)
                    break
    for grid in grids if extend is not None else ():
        if grid.label not in stopped:
            made.notes += _edges(grid, resolved[grid.label], made, step, extend, progress, stream)
    return made


def _scores(made: GridFits, label: str) -> dict[int, float]:
    """Rank -> the best validation perplexity of grid ``label``'s settings so far."""
    scores: dict[int, float] = {}
    for s in made.settings:
        if s.grid.label == label:
            scores[s.rank] = min(scores.get(s.rank, np.inf), _best_score(s))
    return scores


def _step(grid, engine, train, held_out, rank, priors, seeds, options, warmup, budget, made,
          progress, stream, fitter) -> list[Setting]:  # fmt: skip
    """One grid at one rank: its priors x seeds fitted (in ``warmup`` timed calls after an
    untimed one: of every prior for a batched engine's, else of the first), scored, timed;
    a line said."""
    count = len(priors) * len(seeds)
    label = f"{grid.label} K={rank}"
    working_on(f"{label}, {count} fit{'s' * (count > 1)}")
    begin = time.perf_counter()
    size = max(1, len(seeds) // warmup) if warmup else len(seeds)
    batching = dict(grid.batching)
    if batching.get("progress"):  # the engine's own lines, named as the step's
        batching |= {"label": label, "stream": stream}
    step = (fitter, engine, train, held_out, rank, priors)
    warmed = []
    if warmup:  # a batched call's program holds every prior; the others' compile once a rank
        warm, warm_options = priors[:1], options
        if engine.run_settings is not None:  # every prior, stopped at once (tol is an argument)
            warm, warm_options = priors, {**options, "tol": WARMUP_TOL}
        seeded = [WARMUP_SEED + s for s in seeds[:size]]
        warmed = _timed(fitter, engine, train, held_out, rank, warm, seeded, warm_options, batching)
    calls = [
        _timed(*step, seeds[k : k + size], options, batching) for k in range(0, len(seeds), size)
    ]
    compiled = max(m.fit.timings.get("compile", 0.0) for call in [warmed, *calls] for m in call)
    seconds = time.perf_counter() - begin
    found = []
    for i, prior in enumerate(priors):  # priors outermost in every call
        members = []
        for call in calls:
            per = len(call) // len(priors)
            members += call[i * per : (i + 1) * per]
        found.append(Setting(grid, engine, rank, prior, members, compile_seconds=compiled))
    fits = [m.fit for s in found for m in s.members]
    if budget is not None:
        budget.measured(engine.name, rank, fits)
    best = min(found, key=_best_score)
    cpu = sum(m.cpu_seconds for s in found for m in s.members)
    made.steps.append(
        {"grid": grid.label, "engine": engine.name, "rank": rank, "fits": count,
         "seconds": seconds, "cpu_seconds": cpu, "validation_perplexity": _best_score(best)}
    )  # fmt: skip
    at = "" if best.prior is None or grid.priors is None else f" at {_describe(best.prior)}"
    say(
        progress,
        f"  {label}: {count} fit{'s' * (count > 1)} in {seconds:.1f} s ({cpu:.1f} CPU s, "
        f"compile {compiled:.1f} s); best validation perplexity {_best_score(best):.4f}{at}",
        stream,
    )
    return found


def _timed(fitter, engine, train, held_out, rank, priors, seeds, options, batching):
    """One ``fitter`` call (list of :class:`Scored`), each member with the call's CPU seconds
    shared in proportion to the members' run seconds."""
    if engine.seed_count is not None and fitter is fit_settings:  # one chain per seed
        options = {**options, engine.seed_count: len(seeds)}
    begin = time.process_time()
    made = fitter(engine, train, rank, priors, seeds, options, held_out, **batching)
    cpu = time.process_time() - begin
    run = np.array([m.fit.timings.get("run", 0.0) for m in made], float)
    share = run / run.sum() if run.sum() > 0 else np.full(len(made), 1 / len(made))
    return [m._replace(cpu_seconds=float(c)) for m, c in zip(made, cpu * share, strict=True)]


def _best_score(setting: Setting) -> float:
    """The lowest validation perplexity of a setting's members (NaN as inf)."""
    return min(comparable(m.validation_perplexity) for m in setting.members)


def comparable(value) -> float:
    """A validation perplexity to compare: NaN and None as inf, inf kept (not the largest
    float, which lines and JSON would show as a 309-digit number)."""
    return np.inf if value is None or np.isnan(value) else float(value)


def _describe(prior: Prior) -> str:
    return f"alpha={float(prior.alpha[0]):g}, beta={float(prior.beta[0]):g}"


def _edges(grid, engine, made: GridFits, step, extend, progress, stream) -> list[str]:
    """Say where a grid's best rank, alpha or beta lies at an edge of two or more values, and
    fit up to ``extend`` more beyond it while each improves (:func:`rank_edges`,
    :func:`prior_edges`)."""
    own = [s for s in made.settings if s.grid.label == grid.label]
    if not own:
        return []
    scores = _scores(made, grid.label)

    def fit_rank(rank: int) -> float:
        found = step(grid, rank)
        return np.inf if found is None else min(_best_score(s) for s in found)

    limit = min(own[0].members[0].fit.shape)
    lines = rank_edges(grid.label, scores, limit, extend, fit_rank, progress, stream)
    if grid.priors is None or not engine.takes_prior:
        return lines
    given = [as_prior(p) for p in grid.priors]
    for which in ("alpha", "beta"):  # each from the best setting so far
        best = min((s for s in made.settings if s.grid.label == grid.label), key=_best_score)
        if not np.isfinite(_best_score(best)) or best.prior is None:
            return lines
        values = [float(np.ravel(getattr(p, which))[0]) for p in given]
        at = {n: float(getattr(best.prior, n)[0]) for n in ("alpha", "beta", "gamma")}

        def fit_prior(value: float, which=which, at=at, rank=best.rank) -> float:
            try:
                prior = engine.prior_for(Prior(**{**at, which: value}), rank)
            except ValueError:  # outside the engine's range
                return np.inf
            found = step(grid, rank, [prior])
            return np.inf if found is None else _best_score(found[0])

        floor = 1.0 if _map_engine(engine) else 0.0
        lines += prior_edges(grid.label, which, at[which], best.rank, _best_score(best), values,
                             floor, extend, fit_prior, progress, stream)  # fmt: skip
    return lines


def rank_edges(
    name, scores: dict, limit: int, extend: int, fit_rank, progress, stream
) -> list[str]:
    """Say where an engine's best rank lies at an edge of its grid of two or more ranks,
    and fit up to ``extend`` ranks beyond it (doubling, or halving, the last) while each
    improves the best score; ``scores`` (rank -> best validation perplexity) grows with
    them, ``fit_rank(rank) -> score`` fits one. Returns the lines said."""
    lines = []
    best = min(scores, key=scores.get)
    largest = best == max(scores) and best < limit
    smallest = best == min(scores) and best > 1
    if len(scores) < 2 or not (largest or smallest) or not np.isfinite(scores[best]):
        return lines  # no edge, or no advice from inf scores
    edge = "largest" if largest else "smallest"

    def tell(line: str) -> None:
        lines.append(line)
        say(progress, line, stream)

    if not extend:
        more = "larger" if largest else "smaller"
        tell(f"{name}: the best rank K={best} is the {edge} of the grid; {more} ranks may do "
             "better (extend the grid)")  # fmt: skip
        return lines
    previous = None
    for _ in range(extend):
        new = min(2 * best, limit) if largest else max(1, best // 2)
        was = f"the best rank K={best} is the {edge} of the grid" if previous is None else (
            f"K={best} improved on K={previous}"
        )  # fmt: skip
        tell(f"{name}: {was}; fitting K={new}")
        scores[new] = fit_rank(new)
        if not scores[new] < scores[best]:
            tell(f"{name}: K={new} did not improve on K={best} ({scores[new]:.4f} against "
                 f"{scores[best]:.4f}); the best rank stays K={best}")  # fmt: skip
            return lines
        previous, best = best, new
        if best in (1, limit):
            tell(f"{name}: K={best} is the best, at the end of the ranks (min(M, N) = {limit})"
                 if best == limit else f"{name}: K=1 is the best, the smallest rank")  # fmt: skip
            return lines
    tell(f"{name}: K={best} is the best and still at the edge after {extend} added rank"
         f"{'s' * (extend > 1)}: give {'larger' if largest else 'smaller'} ranks")  # fmt: skip
    return lines


def prior_edges(name, which, value, rank, score, values, floor, extend, fit_prior, progress,
                stream) -> list[str]:  # fmt: skip
    """Say where the best ``which`` (alpha or beta) ``value`` at ``rank`` is the largest of two
    or more ``values``, or the smallest above ``floor`` (1 for a MAP engine, whose H reaches 0
    and 1 at 1; 0 for the others), and fit up to ``extend`` more values beyond it (doubled, or
    halfway to ``floor``) while each improves ``score``; ``fit_prior(value) -> score``.
    Returns the lines said."""
    lines: list[str] = []
    if len(set(values)) < 2 or not np.isfinite(score):
        return lines
    largest = value >= max(values)
    if not (largest or (value <= min(values) and value > floor)):
        return lines
    edge = "largest" if largest else "smallest"

    def tell(line: str) -> None:
        lines.append(line)
        say(progress, line, stream)

    if not extend:
        more = "larger values" if largest else f"smaller values above {floor:g}"
        tell(f"{name}: the best {which}={value:g} (K={rank}) is the {edge} of the grid's; "
             f"{more} may do better")  # fmt: skip
        return lines
    for _ in range(extend):
        new = 2 * value if largest else (value + floor) / 2
        tell(f"{name}: the best {which}={value:g} (K={rank}) is the {edge} tried; "
             f"fitting {which}={new:g}")  # fmt: skip
        new_score = fit_prior(new)
        if not new_score < score:
            tell(f"{name}: {which}={new:g} did not improve on {which}={value:g} "
                 f"({new_score:.4f} against {score:.4f}); it stays {value:g}")  # fmt: skip
            return lines
        value, score = new, new_score
    tell(f"{name}: {which}={value:g} is the best and still at the edge after {extend} added "
         f"value{'s' * (extend > 1)}")  # fmt: skip
    return lines


def _map_engine(engine: Engine) -> bool:
    """Whether the engine's prior must keep alpha, beta >= 1 (a MAP: ``Prior(0.5, 0.5)``
    refused)."""
    try:
        engine.prior_for(Prior(0.5, 0.5), 1)
    except ValueError:
        return True
    return False
