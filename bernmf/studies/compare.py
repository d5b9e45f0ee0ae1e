"""Engines x ranks x seeds on one split: held-out perplexity, seconds, iterations.

:func:`compare` (``bernmf.compare``) fits every combination on the training entries
and scores the held-out ones. It is a configuration of the one study runner
(:func:`bernmf.studies.runner.running.run`): the user's matrix and masks as its data, a grid per
engine whose members are fits as :func:`bernmf.fit` makes them (the seeds of each engine
and rank in one runner call, mm's and em's compiled once), a row per fit (rule ``each``)
and, with validation entries, the stacks of each seed's fits. The commands ``bernmf
compare`` and ``bernmf demo`` build their tables with it.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from bernmf._progress import Progress
from bernmf.data.arguments import check_seed
from bernmf.data.observed import as_observed, as_training
from bernmf.data.split import Split
from bernmf.fitting.ensemble import check_combine
from bernmf.fitting.plan import check_arguments
from bernmf.inference import get_engine
from bernmf.models import Prior
from bernmf.models.spec import describe_prior
from bernmf.results.fit import Fit

if TYPE_CHECKING:  # loaded on first use: pandas takes 0.5 s
    import pandas as pd

    from bernmf.studies.runner.study import Study, StudyResult

__all__ = ["Comparison", "compare", "describe_prior", "nonempty_list", "summarize"]

ENSEMBLE_KEYS = ("restarts", "combine")
"""Keys of an engine's ``options`` that :func:`compare` hands to :func:`bernmf.fitting.plan.plan`
as its ensemble arguments (as :func:`bernmf.fit` takes them) rather than as engine options."""


@dataclass(frozen=True)
class Comparison:
    """The tables of :func:`compare`.

    Attributes
    ----------
    fits : DataFrame
        One row per fit, engines outermost, then ranks, then seeds: ``engine``,
        ``rank``, ``prior`` (:func:`describe_prior` of the prior used), ``seed``,
        ``perplexity`` (held-out, nats per entry), ``seconds`` (run, without
        compilation), ``compile_seconds``, ``iterations``, ``converged``, then the
        columns of ``measure``.
    summary : DataFrame
        One row per (engine, rank, prior): ``perplexity`` (mean over seeds),
        ``perplexity_sd``, ``seconds`` (mean), ``compile_seconds`` (max: only the
        first fit of a shape compiles), ``iterations`` (mean) and ``fits`` (count).
    results : tuple of Fit
        With ``keep=True`` or ``validation``: the fits, in the order of ``fits``'
        rows (without their posterior draws).
    """

    fits: pd.DataFrame
    summary: pd.DataFrame
    results: tuple[Fit, ...] = ()


def compare(
    Y,
    engines: Iterable[str],
    ranks: Iterable[int],
    seeds: Iterable[int] = range(3),
    *,
    train,
    test,
    priors: Mapping[str, Prior | None] | None = None,
    options: Mapping[str, Mapping] | None = None,
    measure: Callable[[Fit], Mapping] | None = None,
    progress: bool = True,
    stream=None,
    validation=None,
    keep: bool = False,
) -> Comparison:
    """Fit every engine x rank x seed on ``train`` and score each fit on ``test``.

    Every argument is checked before the first fit, so a typo in the last engine's
    options does not cost the fits before it.

    Parameters
    ----------
    Y : array-like, DataFrame or scipy.sparse matrix of shape (M, N)
        Binary data, NaN missing (as for :func:`bernmf.fit`).
    engines : list of str
        Names from :func:`bernmf.engines`.
    ranks : list of int
        Numbers of components K >= 1.
    seeds : list of int, default range(3)
        Initialization seeds; each (engine, rank) is fitted once per seed.
    train, test : bool arrays of shape (M, N)
        The entries to fit on and the disjoint entries to score (test entries, or
        validation entries when choosing a setting).
    priors : dict of engine name to Prior, optional
        The prior of an engine; engines left out (or mapped to None) get their
        default (None for an engine without a prior, such as ``em``).
    options : dict of engine name to dict, optional
        Engine options passed to :func:`bernmf.fit`, e.g. ``{"mm": {"max_iter": 500}}``;
        ``restarts`` and ``combine`` make each fit an ensemble of that many members from
        seeds ``seed, seed + 1, ...`` (:mod:`bernmf.fitting.ensemble`; ``"stack"`` weighs
        them on ``validation``).
    measure : callable, optional
        ``measure(fit) -> dict`` of more columns for a fit's row (e.g. sampler
        diagnostics), from the fit with its draws.
    progress : bool, default True
        Show the fits on ``stream`` (default stderr): a bar on a terminal, else one
        line per fit with its engine, rank, seed, perplexity (validation perplexity
        with ``validation``) and seconds
        (:class:`bernmf._progress.Progress`). The engines' own progress (gibbs
        sweeps, svi steps, nuts) is off unless ``options`` turns it on.
    stream : file-like, optional
        Where progress goes.
    validation : bool array of shape (M, N), optional
        Held-out entries outside ``train`` and ``test``: each seed then also gets the
        rows ``"stacked: all engines"`` (:func:`bernmf.stack` of every fit of that
        seed, weighted on these entries) and, with mm and another engine,
        ``"stacked: mm grid"`` (its mm fits), from the fits already made: rank 0 and
        prior ``"mixed"``, ``seconds`` the sum of the members'. The fits are kept.
    keep : bool, default False
        Keep the fits (:attr:`Comparison.results`).

    Returns
    -------
    Comparison
        ``fits`` (one row per fit) and ``summary`` (one row per engine, rank, prior).

    Raises
    ------
    TypeError, ValueError
        Unknown engines (the message lists the known ones), options or priors for
        engines not compared, empty lists, masks of another shape, overlapping or
        empty masks, or any argument :func:`bernmf.fit` would refuse.

    Examples
    --------
    >>> import bernmf
    >>> from bernmf.data.split import random_split
    >>> Y, _, _ = bernmf.simulate(0, 60, 40, 3)
    >>> split = random_split(Y.shape, (0.8, 0.0, 0.2), seed=0)
    >>> result = bernmf.compare(Y, ["mm", "em"], [2, 3], seeds=[0, 1],
    ...                         train=split.train, test=split.test, progress=False)
    >>> result.summary[["engine", "rank", "fits"]].values.tolist()
    [['mm', 2, 2], ['mm', 3, 2], ['em', 2, 2], ['em', 3, 2]]
    """
    engines = nonempty_list("engines", engines, "['mm', 'em']")
    ranks = nonempty_list("ranks", ranks, "[2, 4, 8]")
    seeds = nonempty_list("seeds", seeds, "range(3)")
    for name in engines:
        get_engine(name)  # ValueError listing the known engines
    priors, options = dict(priors or {}), {e: dict(o) for e, o in (options or {}).items()}
    for what, given in (("priors", priors), ("options", options)):
        unknown = sorted(set(given) - set(engines))
        if unknown:
            raise ValueError(f"{what} name engine(s) {unknown} that are not compared: {engines}")
    ensembles = {e: {k: o.pop(k) for k in ENSEMBLE_KEYS if k in o} for e, o in options.items()}
    for engine in engines:
        chosen = ensembles.get(engine, {})
        restarts = chosen.get("restarts", 1)
        combine = chosen.get("combine", "best")
        check_combine(get_engine(engine), restarts, combine, validation is not None)
        for rank in ranks:  # once per setting: the seeds are checked below
            check_arguments(
                engine, rank, priors.get(engine), seeds[0], options.get(engine, {}), np.shape(Y),
                restarts=restarts,
            )  # fmt: skip
        for seed in seeds:
            check_seed(seed, restarts)
    observed = as_observed(Y, warn_empty=False)  # checked once: the study selects from it
    train, test = _split(observed.shape, train, test)
    held_out = np.zeros(observed.shape, bool)
    if validation is not None:
        held_out = as_training(observed, train, validation)[1].mask
        if (held_out & test).any():
            raise ValueError("validation and test entries overlap; they must be disjoint")
    study = _study(observed, Split(train, held_out, test), engines, ranks, seeds, priors,
                   options, ensembles)  # fmt: skip
    with Progress("compare", len(engines) * len(ranks) * len(seeds), enabled=progress,
                  stream=stream) as shown:  # fmt: skip
        measured = {}  # (engine, rank, seed) -> measure's columns, from the fit with its draws

        def watch(setting):
            """A line (and a bar step) per fit of a setting, its seeds in order."""
            scored = "validation perplexity" if validation is not None else "perplexity"
            for seed, member in zip(seeds, setting.members, strict=True):
                result = member.fit
                if measure is not None:
                    measured[(result.engine, setting.rank, seed)] = measure(result)
                seconds = np.nansum([result.timings.get(k, np.nan) for k in ("compile", "run")])
                shown.update(
                    result=f"{result.engine} K={setting.rank} seed {seed}: {scored} "
                    f"{member.validation_perplexity:.4f}, {result.n_iter} iterations, "
                    f"{seconds:.1f} s"
                )

        from bernmf.studies.runner.running import run  # on first use, with pandas

        made = run(study, stream=io.StringIO(), watch=watch)  # the bar says what runs
    rows, kept = _rows(made, seeds, measured)
    import pandas as pd

    fits = pd.DataFrame(rows)
    summary = summarize(fits, ["engine", "rank", "prior"])
    kept = kept if keep or validation is not None else ()
    return Comparison(fits=fits, summary=summary, results=kept)


def _study(Y, split, engines, ranks, seeds, priors, options, ensembles) -> Study:
    """The study ``compare`` runs: a grid per engine, every fit made as :func:`bernmf.fit`
    makes it from each seed (a seed set each), a row per fit; with validation entries, the
    stacks of each seed's fits. Fits are kept without their draws once measured."""
    from bernmf.studies.runner.study import Grid, Matrix, Method, Study

    grids = tuple(
        Grid(e, tuple(ranks), priors=None if priors.get(e) is None else (priors[e],),
             options=options.get(e, {}), as_fit=ensembles.get(e, {}))
        for e in engines
    )  # fmt: skip
    methods = [Method(FITS, "each")]
    if split.validation.any() and len(engines) * len(ranks) > 1:
        methods.append(Method(STACKED_ALL, "stack"))
        if "mm" in engines and len(engines) > 1 and len(ranks) > 1:
            methods.append(Method(STACKED_MM, "stack", grids=("mm",)))
    return Study(
        "compare", grids, tuple(methods), matrices=(Matrix("Y", Y, split),),
        seeds=tuple(seeds), seed_sets=len(seeds), keep_draws=False,
    )  # fmt: skip


def _rows(made: StudyResult, seeds, measured) -> tuple[list[dict], tuple[Fit, ...]]:
    """The rows of :attr:`Comparison.fits` from the study's table (each fit's with its
    ``measured`` columns), and the fits of its rows (without draws), in their order:
    engines, ranks, seeds; then the stacks, seed by seed."""
    table = made.table
    each = np.flatnonzero(table["rule"] == "each").reshape(len(seeds), -1).T.ravel()
    rows, kept = [], []
    for i in each:  # a seed set's rows are the same settings in the same order
        row, result = table.iloc[i], made.results[i]
        rank, seed = int(row["rank"]), seeds[row["seed_set"]]
        rows.append(
            _row(result.engine, rank, describe_prior(result.prior), seed, row, result.n_iter)
            | measured.get((result.engine, rank, seed), {})
        )
        kept.append(result)
    for _, row in table[table["rule"] == "stack"].iterrows():
        rows.append(_row(row["method"], 0, "mixed", seeds[row["seed_set"]], row, 0))
    return rows, tuple(kept)


FITS = "fits"
"""The method of the study's rows of single fits (rule ``each``)."""


STACKED_ALL = "stacked: all engines"
STACKED_MM = "stacked: mm grid"
"""The ``engine`` of the stacked rows (:func:`compare`'s, the report's)."""


def _row(engine: str, rank: int, prior: str, seed: int, row, iterations: int) -> dict:
    """A row of :attr:`Comparison.fits` from the study's ``row`` of one fit or stack."""
    return {
        "engine": engine,
        "rank": rank,
        "prior": prior,
        "seed": int(seed),
        "perplexity": float(row["test_perplexity"]),
        "seconds": float(row["seconds"]),
        "compile_seconds": float(row["compile_seconds"]),
        "iterations": int(iterations),
        "converged": row["converged"],
    }


def summarize(fits: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per group of ``keys``: perplexity mean and sd, seconds (mean), compile
    seconds (max), iterations (mean), ``ess_per_second`` (mean, when ``fits`` has it) and
    the number of fits, in the order the groups first appear."""
    columns = {
        "perplexity": ("perplexity", "mean"),
        "perplexity_sd": ("perplexity", "std"),
        "seconds": ("seconds", "mean"),
        "compile_seconds": ("compile_seconds", "max"),
        "iterations": ("iterations", "mean"),
    }
    if "ess_per_second" in fits:
        columns["ess_per_second"] = ("ess_per_second", "mean")
    columns["fits"] = ("perplexity", "size")
    with np.errstate(invalid="ignore"):  # the sd of inf scores is NaN; their warning said why
        return fits.groupby(keys, sort=False).agg(**columns).reset_index()


MAX_VALUES = 10_000
"""The most engines, ranks or seeds a comparison takes: each is a fit (times the others),
and a longer list is refused before it is even read out (``range(10**8)`` included)."""


def nonempty_list(name: str, values, example: str) -> list:
    """``values`` as a list without repeats (the first kept), of 1 to :data:`MAX_VALUES`
    values; TypeError when it is a string or not iterable, ValueError when empty or
    longer, the message naming the argument ``name`` and showing ``example``."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a list, e.g. {example}; got {values!r}")
    values = list(itertools.islice(values, MAX_VALUES + 1))
    if not values:
        raise ValueError(f"{name} is empty; give at least one, e.g. {example}")
    if len(values) > MAX_VALUES:
        raise ValueError(f"{name} holds more than {MAX_VALUES:,} values, e.g. {example}")
    return list(dict.fromkeys(values))


def _split(shape: tuple[int, int], train, test):
    """``train`` and ``test`` checked: bool masks of Y's ``shape``, not empty, disjoint."""
    masks = {}
    for name, mask in (("train", train), ("test", test)):
        mask = np.asarray(mask)
        if mask.dtype != bool:
            raise TypeError(f"{name} must be a bool array (True = use), got dtype {mask.dtype}")
        if mask.shape != shape:
            raise ValueError(f"{name} has shape {mask.shape} but Y has shape {shape}")
        if not mask.any():
            raise ValueError(f"{name} selects no entry")
        masks[name] = mask
    shared = int((masks["train"] & masks["test"]).sum())
    if shared:
        raise ValueError(f"train and test share {shared} entries; they must be disjoint")
    # rows without a test entry are ordinary here: nothing is fitted on them
    return masks["train"], masks["test"]
