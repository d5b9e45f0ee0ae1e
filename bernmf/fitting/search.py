"""The best model by default: engines, ranks and priors searched within a time budget, the
fits stacked on held-out entries and refit on every observed entry.

:func:`search` is what ``bernmf.fit(Y)`` (no rank) and ``bernmf fit DATA`` (no ``--rank``)
run. It holds out a share of the observed entries (:data:`HOLDOUT`), fits a ladder of ranks
(:data:`RANKS`) of each engine at its default prior, one fit a rank, estimating each next
step from the work the last one of that engine did (the lowest rank is each engine's probe,
fitted unless :func:`least_work` puts it over :data:`PROBE_SHARE` of the budget) and leaving
out what would overrun the budget's share for the fits and their refits
(:data:`FITTING_SHARE`, :data:`REFIT_SHARE`); then, while work is left, rounds of ``mm``
fits at its best ranks (:data:`BEST_RANKS`) over a few Beta priors (:data:`MM_PRIORS`) and
new seeds, in one compiled call per rank.

The budget counts **work**, not the clock: a fit's work is the CPU seconds its sweeps
take on one core of the machine measured (:data:`WORK`, :func:`work`), a function of its
sweeps, shape and rank only, so the same data and seed make the same steps on any load;
each fit's iterations are capped so that one fit of the lowest rank does at most
:data:`PROBE_SHARE` of the budget's work (:func:`iteration_cap`). What was fitted is
recorded as a search plan (:mod:`bernmf.fitting.search_plan`), which ``search_plan=``
replays step by step.

:func:`bernmf.stack` mixes every fit on the held-out entries (a setting's seeds share one
weight) and fits the members of positive weight again on every observed entry
(``refit=True``): the stacking study (``bernmf reproduce stacking``) found this the best
predictor on the paper's data, 2-3 times better than a default single fit on vote matrices.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from bernmf._progress import say, working_on
from bernmf.data.arguments import check_real, check_seed
from bernmf.data.observed import Observed, as_observed
from bernmf.fitting.grids import Budget, EngineGrid, GridFits, as_prior, fit_grids
from bernmf.fitting.plan import data_digests
from bernmf.fitting.search_plan import FORMAT, PLAN_FILE, check_plan_data, check_search_plan
from bernmf.fitting.stack import BASELINE, members_table, stack_on
from bernmf.inference import Engine, available, get_engine
from bernmf.inference.mm.layout import sparse_ones
from bernmf.models.spec import Prior
from bernmf.results.fit import Fit

__all__ = ["BUDGET", "ENGINES", "HOLDOUT", "MM_PRIORS", "RANKS", "WORK", "search", "work"]

BUDGET = 60.0
"""Seconds of work (:func:`work`) that :func:`search` aims to finish in, by default."""

HOLDOUT = 0.15
"""Share of the observed entries held out to stack the fits on (as the paper's 15%)."""

FITTING_SHARE = 0.9
"""Share of the budget for the search's fits and their refits; the rest is for stacking."""

REFIT_SHARE = 0.5
"""The refits' seconds, as a share of the search's fits' run seconds, that a step reserves:
the members of positive weight are fitted again on every observed entry (about a fifth
more entries), and in the stacking study about half the fits' run time had weight."""

RANKS = (2, 4, 8, 16, 32, 64)
"""The ranks tried, in order, up to min(M, N)."""

ENGINES = ("mm", "logsvd")
"""The engines searched by default, at each rank in this order: in the stacking study the
Bayesian engines and logpca got little or no weight beside these, at many times their
cost."""

MM_PRIORS = tuple(Prior(a, b, 1.0) for a, b in ((1.5, 1.5), (1.0, 3.0), (2.0, 2.0), (3.0, 3.0)))
"""mm's Beta priors of H, with gamma = 1: the settings of the modes study's grid (gamma = 1)
that the stacking study weighted most on the paper's three datasets. (Written as
``Prior(a, b)`` just before ``Prior``'s default gamma became 1.2, they had carried 1.2
since; ``experiments/search_gamma.py`` compares the two.)"""

MM_SEEDS = 2
"""mm's seeds per prior and rank in a round; each later round adds as many."""

MM_ROUNDS = 4
"""At most this many rounds of mm's priors and seeds after the ladder (8 seeds per setting;
more add fits to stack more than they add to the stack's score)."""

ROUND = "mm, round "
"""The grid name of a round of mm's priors and seeds, before its number."""

BEST_RANKS = 3
"""mm's ranks of best held-out perplexity on the ladder that the rounds of priors and seeds
go to."""


PROBE_SHARE = 0.1
"""Most of the budget's work that one fit at the lowest rank may do: its engine's
``max_iter`` is capped to the iterations that fit in it (:func:`iteration_cap`)."""

LEAST_ITERATIONS = 10
"""The cap of :data:`PROBE_SHARE` never goes below this many iterations."""


class Work(NamedTuple):
    """What an engine's fit of an M x N matrix at rank K costs, in CPU seconds on one core:
    ``seconds * M * N * (sweeps * (K + offset) * layout + setup + gram * min(M, N))``, an
    iteration being ``sweeps_per_iteration`` sweeps; ``layout`` is ``sparse`` for a fit in
    the sparse layout of the ones (as ``layout="auto"`` chooses it for the fit's training
    data: :func:`bernmf.inference.mm.layout.sparse_ones`), else 1; ``gram``: a start from the
    Gram matrix of the smaller side, as logsvd's."""

    seconds: float
    offset: float
    setup: float
    gram: float
    sweeps_per_iteration: int
    sparse: float = 1.0


WORK = {
    "mm": Work(2e-10, 20.0, 200.0, 0.0, 3, sparse=0.5),
    "logsvd": Work(1e-9, 2.0, 0.0, 1.0, 1),
}
"""The work of the engines searched by default, measured on this project's 2-core
machine (``benchmarks/search_work.py``, and the searches of paleo and lastfm): an engine
not here is planned by the run seconds its fits take, which vary with the machine's load.
Before a fit its layout is not known: the estimates of a cap take the dense one's."""


def sweeps(fit: Fit) -> int:
    """The sweeps a fit made: ``record.sweeps`` (``mm``'s), else its iterations."""
    return int(fit.n_iter if fit.record.sweeps is None else fit.record.sweeps)


def work(fit: Fit, sparse: bool | None = None) -> float:
    """A fit's work: the CPU seconds its engine's :data:`WORK` model gives for its sweeps,
    shape, rank and layout (the same on any load); for an engine without a model, its run
    seconds. ``sparse``: whether ``layout="auto"`` gathers the ones of its training data
    (:func:`~bernmf.inference.mm.layout.sparse_ones`, found from ``fit.observed`` when None
    and the model's layouts differ; a search finds it once for all its fits)."""
    model = WORK.get(fit.engine)
    if model is None:
        return float(fit.timings.get("run", 0.0))
    if sparse is None and model.sparse != 1.0:
        sparse = fit.observed is not None and sparse_ones(fit.observed)
    return _work(model, fit.shape, fit.rank, sweeps(fit) * (model.sparse if sparse else 1.0))


def _work(model: Work, shape: tuple[int, int], rank: int, sweeps: float) -> float:
    """The work of a fit of ``sweeps`` sweeps (of the dense layout's cost) (:class:`Work`)."""
    M, N = shape
    units = sweeps * (rank + model.offset) + model.setup + model.gram * min(M, N)
    return model.seconds * M * N * units


def least_work(engine: Engine, shape: tuple[int, int], rank: int) -> float:
    """The work of a fit of ``engine`` at ``rank`` of :data:`LEAST_ITERATIONS` iterations
    (0 for an engine without :data:`WORK`): an engine whose lowest rank is over
    :data:`PROBE_SHARE` of the budget is left out (as logsvd on 5000 x 5000, whose start
    alone, an eigendecomposition of the 5000 x 5000 Gram matrix, takes minutes)."""
    model = WORK.get(engine.name)
    if model is None:
        return 0.0
    return _work(model, shape, rank, LEAST_ITERATIONS * model.sweeps_per_iteration)


def iteration_cap(engine: Engine, shape: tuple[int, int], rank: int, budget: float) -> dict:
    """The options that cap ``engine``'s iterations at ``rank`` to :data:`PROBE_SHARE` of
    ``budget`` (seconds of work), at least :data:`LEAST_ITERATIONS`: ``{"max_iter": n}``,
    or ``{}`` where half the engine's default ``max_iter`` fits (its fits seldom run
    longer, and a cap compiles programs of its own) or it has no :data:`WORK`."""
    model = WORK.get(engine.name)
    if model is None or "max_iter" not in engine.options:
        return {}
    start = _work(model, shape, rank, 0)
    iteration = _work(model, shape, rank, model.sweeps_per_iteration) - start
    cap = max(LEAST_ITERATIONS, int((PROBE_SHARE * budget - start) / iteration))
    return {"max_iter": cap} if cap < engine.options["max_iter"] // 2 else {}


def _holdout(data: Observed, share: float, seed: int) -> np.ndarray:
    """A random ``share`` of the observed entries (at least one), as a bool mask (M, N)."""
    rows, columns, _ = data.entries()
    rng = np.random.default_rng(seed)
    count = min(max(1, round(share * rows.size)), rows.size - 1)
    chosen = rng.choice(rows.size, size=count, replace=False)
    held = np.zeros(data.shape, dtype=bool)
    held[rows[chosen], columns[chosen]] = True
    return held


def check_engines(engines) -> tuple[Engine, ...]:
    """The engines named (a name or a sequence of names; default :data:`ENGINES`), each once,
    in order; ValueError for an empty list or an unknown name (listing the known ones)."""
    names = ENGINES if engines is None else engines
    if isinstance(names, str):
        names = [names]
    names = list(dict.fromkeys(names))
    if not names:
        raise ValueError(f"engines is empty: give some of {', '.join(available())}")
    return tuple(get_engine(name) for name in names)


def search(
    Y,
    engines: Sequence[str] | None = None,
    *,
    mask=None,
    validation=None,
    budget: float | None = None,
    seed: int = 0,
    search_plan: dict | None = None,
    progress: bool = True,
    stream=None,
) -> Fit:
    """The best model of Y the budget allows: a stack of engines x ranks x priors, refit.

    Parameters
    ----------
    Y : array-like, DataFrame or scipy.sparse matrix of shape (M, N)
        Values 0 and 1; NaN is missing.
    engines : sequence of str, optional
        The engines to search (default :data:`ENGINES`), in the order given; each gets
        the ranks :data:`RANKS` up to min(M, N), ``mm`` the priors :data:`MM_PRIORS`
        and the other engines their default prior.
    mask : bool array of shape (M, N), optional
        True where Y is observed (combined with its NaNs), as :func:`bernmf.fit`'s.
    validation : bool array of shape (M, N), optional
        The observed entries to stack on; default a random :data:`HOLDOUT` of them.
    budget : float, optional
        Seconds of work (:func:`work`) to aim for, default :data:`BUDGET`: a step whose
        estimate, with the refits reserved, would take the fits past
        :data:`FITTING_SHARE` of it is left out (and said so).
    seed : int, default 0
        Seed of the held-out entries and of the first fits.
    search_plan : dict, optional
        A search plan (``fit.record.search["plan"]`` of an earlier search, or
        :func:`bernmf.fitting.search_plan.read_search_plan` of its file): its steps are
        fitted, and no others, making the same members bit for bit on the same data
        (checked by digest), seed and validation; ``engines`` and ``budget`` are then
        the plan's.
    progress : bool, default True
        Lines to ``stream`` (default stderr): what runs, what was left out, what was
        chosen.

    Returns
    -------
    Fit
        A :func:`bernmf.stack` (``refit=True``) whose ``record.search`` records the
        budget, the work and wall seconds taken, the held-out entries, the steps fitted
        (``"fitted"``: engine, rank, fits, seconds, best validation perplexity), those
        left out (``"left_out"``, each with its reason) and the search plan
        (``"plan"``, :mod:`bernmf.fitting.search_plan`).

    Raises
    ------
    ValueError
        Bad arguments, or a search plan that is malformed, was made on other data, or
        is given with other engines, a budget or another seed; before anything is fitted.
    """
    if search_plan is not None:
        check_search_plan(search_plan)
        _check_replay(search_plan, engines, budget, seed)
        engines, budget = search_plan["engines"], search_plan["budget"]
    budget = BUDGET if budget is None else budget
    check_real("budget", budget, 0.0, closed="neither")
    check_seed(seed, 1 + MM_SEEDS * MM_ROUNDS)
    chosen = check_engines(engines)
    Y = as_observed(Y, warn_empty=False)  # checked once: the masks below select from it
    data = Y.restricted(mask, warn_empty=False)
    observed = int(data.mask.sum())
    if validation is None:
        if observed < 2:
            raise ValueError(
                f"the search needs at least 2 observed entries of Y, got {observed}: it holds "
                f"{HOLDOUT:.0%} of them out (at least one) to stack on and fits on the others"
            )
        held = _holdout(data, HOLDOUT, seed)
    else:
        given = Y.restricted(validation, warn_empty=False, mask_name="validation")
        held = given.mask & data.mask  # its shape and values checked, as any mask's
        if not held.any() or held.sum() == observed:
            raise ValueError(
                f"validation holds {int(held.sum())} of the {observed} observed entries of Y "
                "(and of mask): the search stacks on those and fits on the others, so it "
                "needs some of each"
            )
    train = data.restricted(~held, warn_empty=False)
    held_out = data.restricted(held, warn_empty=False)
    digests = data_digests(train, held_out)
    if search_plan is not None:
        check_plan_data(search_plan, digests, validation is not None)
    begin = time.perf_counter()
    worked = functools.partial(work, sparse=sparse_ones(train))  # every fit's training data
    if search_plan is None:
        swept, steps, left_out = _climb(chosen, train, held_out, budget, seed, worked, progress,
                                        stream)  # fmt: skip
    else:
        steps, left_out = search_plan["steps"], []
        say(progress, f"bernmf: replaying a search plan of {len(steps)} steps", stream)
        swept = _replay(steps, train, held_out, progress, stream)
    fits = [m.fit for s in swept.settings for m in s.members]
    if not fits:
        raise ValueError(
            f"no fit of {', '.join(e.name for e in chosen)} fits in a budget of {budget:g} s"
        )
    working_on(f"stacking {len(fits)} fits")
    options = {step["engine"]: step["options"] for step in steps}  # the refits' caps
    stacking = time.perf_counter()
    result = stack_on(fits, train, held_out, refit=True, options=options)
    stacking = time.perf_counter() - stacking
    plan = {
        "format": FORMAT, "seed": int(seed), "engines": [e.name for e in chosen],
        "budget": float(budget), "held_out": "drawn" if validation is None else "given",
        "data": digests, "steps": steps,
    }  # fmt: skip
    record = {
        "budget": budget,
        "work_seconds": sum(worked(f) for f in fits),
        "seconds": time.perf_counter() - begin,
        "stack_seconds": stacking,
        "held_out_entries": int(held.sum()),
        "replayed": search_plan is not None,
        "by_time": [e.name for e in chosen if e.name not in WORK],
        "fitted": [{**s, "round": _round_of(s["grid"])} for s in swept.steps],
        "left_out": left_out,
        "plan": plan,
    }
    result = dataclasses.replace(result, record=dataclasses.replace(result.record, search=record))
    for line in summary(result):
        say(progress, line, stream)
    return result


def _check_replay(search_plan: dict, engines, budget, seed) -> None:
    """A replay's arguments: no budget, the plan's engines (or none) and seed."""
    if budget is not None:
        raise ValueError(
            f"budget={budget!r} with a search plan: the plan fixes the fits (its budget was "
            f"{search_plan['budget']:g}); give one or the other"
        )
    if engines is not None:
        names = [engines] if isinstance(engines, str) else list(engines)
        if names != search_plan["engines"]:
            raise ValueError(
                f"engines {names} with a search plan of engines {search_plan['engines']}: "
                "leave out the engines (the plan's are searched)"
            )
    if seed != search_plan["seed"]:
        raise ValueError(
            f"seed {seed!r} with a search plan made with seed {search_plan['seed']}: give "
            f"seed {search_plan['seed']} (its held-out entries and fits were drawn from it)"
        )


def _climb(chosen, train: Observed, held_out: Observed, budget: float, seed: int, worked,
           progress, stream) -> tuple[GridFits, list[dict], list[dict]]:  # fmt: skip
    """The ladder, then the rounds of mm's priors and seeds, within ``budget`` seconds of
    work (``worked(fit)``, :func:`work`): what was fitted, its plan's steps and the
    ladder's steps left out."""
    M, N = train.shape
    ranks = [k for k in RANKS if k <= min(M, N)] or [1]
    least = {e.name: least_work(e, (M, N), ranks[0]) for e in chosen}
    kept = [e for e in chosen if least[e.name] <= PROBE_SHARE * budget]
    kept = kept or [min(chosen, key=lambda e: least[e.name])]  # always a fit
    left_out = [
        {"grid": e.name, "engine": e.name, "rank": ranks[0],
         "reason": f"about {least[e.name]:.0f} s of work at its least {LEAST_ITERATIONS} "
         f"iterations, over {PROBE_SHARE:.0%} of the budget"}
        for e in chosen if e not in kept
    ]  # fmt: skip
    for out in left_out:
        say(progress, f"  left out {out['engine']} ({out['reason']})", stream)
    caps = {e.name: iteration_cap(e, (M, N), ranks[0], budget) for e in kept}
    by_time = [e.name for e in kept if e.name not in WORK]
    say(
        progress,
        f"bernmf: searching {', '.join(e.name for e in chosen)} at ranks "
        f"{', '.join(map(str, ranks))} within {budget:g} s of work; {held_out.mask.sum()} of "
        f"the {train.mask.sum() + held_out.mask.sum()} observed entries held out to stack on"
        + "".join(f"; {name} at most {c['max_iter']} iterations a fit" for name, c in
                  caps.items() if c)
        + (f"; {', '.join(by_time)} planned by their seconds, which vary with the "
           "machine's load (a search plan replays them)" if by_time else ""),
        stream,
    )  # fmt: skip
    clock = Budget(budget, share=FITTING_SHARE, reserve=REFIT_SHARE, estimating=True,
                   work=worked, unit="s of work")  # fmt: skip
    common = {"budget": clock, "extend": None, "progress": progress, "stream": stream}
    ladder = [EngineGrid(e.name, tuple(ranks), options=caps[e.name]) for e in kept]
    swept = fit_grids(ladder, train, held_out, [seed], order="rank", **common)
    steps = _plan_steps(swept, 0, ladder, [seed])
    left_out += swept.left_out  # the ladder's; the rounds' are said, not listed
    mm = [s for s in swept.steps if s["engine"] == "mm"]
    best_ranks = [s["rank"] for s in sorted(mm, key=lambda s: s["validation_perplexity"])]
    for round_ in range(1, MM_ROUNDS + 1 if mm else 0):  # each round's lines named so
        grid = EngineGrid("mm", tuple(best_ranks[:BEST_RANKS]), MM_PRIORS, caps["mm"],
                          name=f"{ROUND}{round_}")  # fmt: skip
        before, made = len(swept.left_out), len(swept.steps)
        fit_grids([grid], train, held_out, _seeds(seed, round_), into=swept, **common)
        steps += _plan_steps(swept, made, [grid], _seeds(seed, round_))
        if len(swept.left_out) > before:
            break
    return swept, steps, left_out


def _round_of(label: str) -> int:
    """The round of a grid named ``label``: 0 for the ladder's."""
    return int(label.removeprefix(ROUND)) if label.startswith(ROUND) else 0


def _plan_steps(swept: GridFits, first: int, grids, seeds) -> list[dict]:
    """The plan's steps of ``swept.steps[first:]``, fitted from ``grids`` at ``seeds``."""
    by_label = {g.label: g for g in grids}
    steps = []
    for step in swept.steps[first:]:
        grid = by_label[step["grid"]]
        priors = None if grid.priors is None else [
            [float(v) for v in as_prior(p)] for p in grid.priors
        ]  # fmt: skip
        steps.append({"grid": grid.label, "engine": grid.engine, "rank": step["rank"],
                      "priors": priors, "seeds": [int(s) for s in seeds],
                      "options": dict(grid.options)})  # fmt: skip
    return steps


def _replay(steps: list[dict], train: Observed, held_out: Observed, progress, stream) -> GridFits:
    """The fits of a search plan's ``steps``, each as the search fitted it."""
    swept = GridFits()
    for step in steps:
        priors = None if step["priors"] is None else tuple(tuple(p) for p in step["priors"])
        grid = EngineGrid(step["engine"], (step["rank"],), priors, step["options"],
                          name=step["grid"])  # fmt: skip
        fit_grids([grid], train, held_out, step["seeds"], into=swept, extend=None,
                  progress=progress, stream=stream)  # fmt: skip
    return swept


def _seeds(seed: int, round_: int) -> list[int]:
    """The seeds of round ``round_``: ``seed`` in round 0, then :data:`MM_SEEDS` new ones a
    round."""
    if round_ == 0:
        return [seed]
    first = seed + 1 + (round_ - 1) * MM_SEEDS
    return list(range(first, first + MM_SEEDS))


def held_out_scores(result: Fit) -> dict:
    """A :func:`search`'s perplexities on the entries it held out: the stack's (its weights
    were fitted on them, so it flatters the stack) and its best member's (fitted without
    them), each member as it was before the refit.

    Returns
    -------
    dict
        ``entries``, ``stack``, ``best_member`` (``engine``, ``rank``, ``perplexity``).
    """
    mixture = result.mixture
    scores = np.asarray(mixture.validation_perplexity)
    best = int(np.argmin(scores))
    return {
        "entries": result.record.search["held_out_entries"],
        "stack": mixture.stacking.validation_perplexity,
        "best_member": {
            "engine": mixture.members[best].engine,
            "rank": int(mixture.members[best].rank),
            "perplexity": float(scores[best]),
        },
    }


def summary(result: Fit) -> list[str]:
    """What a :func:`search` chose, in a few lines: the weight of each engine and rank, what
    was left out and the time taken."""
    record = result.record.search
    members = members_table(result)
    fitted = members["engine"] != BASELINE
    table = members[members["weight"] > 0]
    positive = int((table["engine"] != BASELINE).sum())
    replayed = "replayed from a search plan; " if record["replayed"] else ""
    lines = [
        f"bernmf: a stack of {int(fitted.sum())} fits and the column baseline, {replayed}the "
        f"{positive} fits of positive weight refit on every observed entry, in "
        f"{record['seconds']:.0f} s; its fits {record['work_seconds']:.2g} s of work (budget "
        f"{record['budget']:g} s); weights:"
    ]
    for engine, part in table.groupby("engine", sort=False):
        ranks = part.groupby("rank")["weight"].sum()
        listed = ", ".join(f"K={k} {w:.2f}" for k, w in ranks.items() if w >= 0.005)
        lines.append(f"  {engine} {part['weight'].sum():.2f}" + (f" ({listed})" * bool(listed)))
    if record["left_out"]:
        listed = ", ".join(f"{o['engine']} K={o['rank']}" for o in record["left_out"])
        lines.append(f"  left out for time: {listed} (a larger budget fits them)")
    lines.append(
        "  the steps were chosen by their work, the same on any load"
        if not record["by_time"]
        else f"  {', '.join(record['by_time'])}'s steps were chosen by the seconds they took, "
        "which vary with the machine's load"
    )
    lines[-1] += f"; {PLAN_FILE} (--plan) or record.search['plan'] replays them"
    scores = held_out_scores(result)
    best = scores["best_member"]
    lines.append(
        f"  held-out perplexity ({scores['entries']} entries, before the refit): the stack "
        f"{scores['stack']:.4f} (its weights were fitted on them), the best single fit "
        f"{best['engine']} K={best['rank']} {best['perplexity']:.4f}"
    )
    shown = result.mixture.chosen
    row = members.iloc[shown]
    setting = members[["engine", "rank", "prior"]].eq(row[["engine", "rank", "prior"]]).all(axis=1)
    shared = (
        f" of its setting's {members.loc[setting, 'weight'].sum():.2f}, shared by its "
        f"{int(setting.sum())} seeds" if setting.sum() > 1 else ""
    )  # fmt: skip
    lines.append(
        f"  factors shown (W, H): {row['engine']} K={result.rank} {row['prior']} seed "
        f"{row['seed']}, weight {row['weight']:.2f}{shared}: the member of largest weight "
        "whose factors are probabilities"
    )
    return lines
