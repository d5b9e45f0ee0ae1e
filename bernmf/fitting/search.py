"""The best model by default: engines, ranks and priors searched within a time budget, the
fits stacked on held-out entries and refit on every observed entry.

:func:`search` is what ``bernmf.fit(Y)`` (no rank) and ``bernmf fit DATA`` (no ``--rank``)
run. It holds out a share of the observed entries (:data:`HOLDOUT`), fits a ladder of ranks
(:data:`RANKS`) of each engine at its default prior, one fit a rank, estimating each next
step from the time the last one of that engine took (the lowest rank is each engine's probe,
always fitted) and leaving out what would overrun the budget's share for the fits and their
refits (:data:`FITTING_SHARE`, :data:`REFIT_SHARE`); then, while time is left, rounds of
``mm`` fits at its best ranks (:data:`BEST_RANKS`) over a few Beta priors
(:data:`MM_PRIORS`) and new seeds, in one compiled call per rank.
:func:`bernmf.stack` mixes every fit on the held-out entries (a setting's seeds share one
weight) and fits the members of positive weight again on every observed entry
(``refit=True``): the stacking study (``bernmf reproduce stacking``) found this the best
predictor on the paper's data, 2-3 times better than a default single fit on vote matrices.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import numpy as np

from bernmf._progress import say, working_on
from bernmf.data.observed import Observed, as_observed, check_real, check_seed
from bernmf.fitting.grids import Budget, EngineGrid, fit_grids
from bernmf.fitting.stack import members_table, stack
from bernmf.inference import Engine, available, get_engine
from bernmf.models.spec import Prior
from bernmf.results.fit import Fit

__all__ = ["BUDGET", "ENGINES", "HOLDOUT", "MM_PRIORS", "RANKS", "search"]

BUDGET = 60.0
"""Seconds that :func:`search` aims to finish in, by default."""

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

BEST_RANKS = 3
"""mm's ranks of best held-out perplexity on the ladder that the rounds of priors and seeds
go to."""


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
    budget: float = BUDGET,
    seed: int = 0,
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
    budget : float, default :data:`BUDGET`
        Seconds to aim for: a step whose estimate, with the refits reserved, would take
        the fits past :data:`FITTING_SHARE` of it is left out (and said so).
    seed : int, default 0
        Seed of the held-out entries and of the first fits.
    progress : bool, default True
        Lines to ``stream`` (default stderr): what runs, what was left out, what was
        chosen.

    Returns
    -------
    Fit
        A :func:`bernmf.stack` (``refit=True``) whose ``record.search`` records the
        budget, the seconds taken, the held-out entries, the steps fitted
        (``"fitted"``: engine, rank, fits, seconds, best validation perplexity) and
        those left out (``"left_out"``, each with its reason).
    """
    check_real("budget", budget, 0.0, closed="neither")
    check_seed(seed, 1 + MM_SEEDS * MM_ROUNDS)
    chosen = check_engines(engines)
    data = as_observed(Y, mask, warn_empty=False)
    observed = int(data.mask.sum())
    if validation is None:
        if observed < 2:
            raise ValueError(
                f"the search needs at least 2 observed entries of Y, got {observed}: it holds "
                f"{HOLDOUT:.0%} of them out (at least one) to stack on and fits on the others"
            )
        held = _holdout(data, HOLDOUT, seed)
    else:
        given = as_observed(Y, validation, warn_empty=False, mask_name="validation")
        held = given.mask & data.mask  # its shape and values checked, as any mask's
        if not held.any() or held.sum() == observed:
            raise ValueError(
                f"validation holds {int(held.sum())} of the {observed} observed entries of Y "
                "(and of mask): the search stacks on those and fits on the others, so it "
                "needs some of each"
            )
    train = as_observed(Y, data.mask & ~held, warn_empty=False)
    held_out = as_observed(Y, held, warn_empty=False)
    M, N = data.shape
    ranks = [k for k in RANKS if k <= min(M, N)] or [1]
    say(
        progress,
        f"bernmf: searching {', '.join(e.name for e in chosen)} at ranks "
        f"{', '.join(map(str, ranks))} within {budget:g} s; {held.sum()} of the "
        f"{data.mask.sum()} observed entries held out to stack on",
        stream,
    )
    clock = Budget(budget, share=FITTING_SHARE, reserve=REFIT_SHARE, estimating=True)
    common = {"budget": clock, "extend": None, "progress": progress, "stream": stream}
    ladder = [EngineGrid(e.name, tuple(ranks)) for e in chosen]
    swept = fit_grids(ladder, train, held_out, [seed], order="rank", **common)
    left_out = list(swept.left_out)  # the ladder's; the rounds' are said, not listed
    mm = [s for s in swept.steps if s["engine"] == "mm"]
    best_ranks = [s["rank"] for s in sorted(mm, key=lambda s: s["validation_perplexity"])]
    rounds = {f"mm, round {r}": r for r in range(1, MM_ROUNDS + 1 if mm else 0)}
    for name, round_ in rounds.items():  # each round's lines named so
        grid = EngineGrid("mm", tuple(best_ranks[:BEST_RANKS]), MM_PRIORS, name=name)
        before = len(swept.left_out)
        fit_grids([grid], train, held_out, _seeds(seed, round_), into=swept, **common)
        if len(swept.left_out) > before:
            break
    fits = [m.fit for s in swept.settings for m in s.members]
    if not fits:
        raise ValueError(
            f"no fit of {', '.join(e.name for e in chosen)} fits in a budget of {budget:g} s"
        )
    working_on(f"stacking {len(fits)} fits")
    begin = time.perf_counter()
    result = stack(fits, Y, validation=held, mask=train.mask, refit=True)
    stacking = time.perf_counter() - begin
    record = {
        "budget": budget,
        "seconds": clock.spent(),
        "stack_seconds": stacking,
        "held_out_entries": int(held.sum()),
        "fitted": [{**s, "round": rounds.get(s["grid"], 0)} for s in swept.steps],
        "left_out": left_out,
    }
    result = dataclasses.replace(result, record=dataclasses.replace(result.record, search=record))
    for line in summary(result):
        say(progress, line, stream)
    return result


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
    table = members_table(result)
    table = table[table["weight"] > 0]
    lines = [
        f"bernmf: a stack of {len(table)} fits, refit on every observed entry, in "
        f"{record['seconds']:.0f} s (budget {record['budget']:g} s); weights:"
    ]
    for engine, part in table.groupby("engine", sort=False):
        ranks = part.groupby("rank")["weight"].sum()
        listed = ", ".join(f"K={k} {w:.2f}" for k, w in ranks.items() if w >= 0.005)
        lines.append(f"  {engine} {part['weight'].sum():.2f}" + (f" ({listed})" * bool(listed)))
    if record["left_out"]:
        listed = ", ".join(f"{o['engine']} K={o['rank']}" for o in record["left_out"])
        lines.append(f"  left out for time: {listed} (a larger budget fits them)")
    scores = held_out_scores(result)
    best = scores["best_member"]
    lines.append(
        f"  held-out perplexity ({scores['entries']} entries, before the refit): the stack "
        f"{scores['stack']:.4f} (its weights were fitted on them), the best single fit "
        f"{best['engine']} K={best['rank']} {best['perplexity']:.4f}"
    )
    shown = result.mixture.chosen
    lines.append(
        f"  factors shown (W, H): {result.members[shown].engine} K={result.rank}, weight "
        f"{result.mixture.weights[shown]:.2f}, the member of largest weight whose factors "
        "are probabilities"
    )
    return lines
