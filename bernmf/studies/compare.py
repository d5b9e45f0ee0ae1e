"""Engines x ranks x seeds on one split: held-out perplexity, seconds, iterations.

:func:`compare` (``bernmf.compare``) fits every combination on the training entries
and scores the held-out ones, the seeds of each engine and rank through the one runner
(:func:`bernmf.fitting.runner.runs`: mm's and em's in one compiled call). The commands
``bernmf compare`` and ``bernmf demo`` build their tables with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from bernmf._progress import Progress
from bernmf.data.observed import as_observed
from bernmf.fitting import runner
from bernmf.fitting.ensemble import check_combine
from bernmf.fitting.grids import EngineGrid, fit_grids
from bernmf.fitting.plan import check_arguments, held_out_entries, plan
from bernmf.fitting.stack import stack
from bernmf.inference import get_engine
from bernmf.models import Prior
from bernmf.models.spec import describe_prior
from bernmf.results.fit import Fit

if TYPE_CHECKING:
    import pandas as pd

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
        diagnostics), computed while the fit is in memory; fits are not kept.
    progress : bool, default True
        Show the fits on ``stream`` (default stderr): a bar on a terminal, else one
        line per fit with its engine, rank, seed, perplexity and seconds
        (:class:`bernmf._progress.Progress`). The engines' own progress (gibbs
        sweeps, svi steps, nuts) is off unless ``options`` turns it on.
    stream : file-like, optional
        Where progress goes.
    validation : bool array of shape (M, N), optional
        Held-out entries outside ``train`` and ``test``: each seed then also gets the
        rows ``"stacked: all engines"`` (:func:`bernmf.stack` of every fit of that
        seed, weighted on these entries) and, with mm and another engine,
        ``"stacked: mm grid"`` (its mm fits), from the fits already made: rank 0 and
        prior ``"mixed"``, ``seconds`` the sum of the members' (:func:`stacked_rows`).
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
        for rank in ranks:
            for seed in seeds:
                check_arguments(
                    engine, rank, priors.get(engine), seed, options.get(engine, {}), np.shape(Y),
                    restarts=restarts,
                )  # fmt: skip
    train, scored = _split(Y, train, test)

    runs = [(e, k, s) for e in engines for k in ranks for s in seeds]
    if validation is not None:
        held_out_entries(Y, as_observed(Y, train), validation)  # disjoint from train, not empty
        if (np.asarray(validation, bool) & scored.mask).any():
            raise ValueError("validation and test entries overlap; they must be disjoint")
    rows, kept = [], []
    with Progress("compare", len(runs), enabled=progress, stream=stream) as shown:

        def fitter(engine, data, rank, given, seeds, swept_options, scored, **batching):
            """A fit per seed as :func:`bernmf.fit` makes it, each a row (and a bar step)."""
            name = engine.name
            quiet = {"progress": False} if "progress" in engine.options else {}
            ensemble = ensembles.get(name, {})
            request = plan(
                Y, name, rank, mask=train, prior=priors.get(name), seed=seeds[0], **ensemble,
                validation=validation if ensemble else None,
                options={**quiet, **options.get(name, {})},
            )  # fmt: skip
            made = runner.runs(request, seeds, scored)
            for seed, member in zip(seeds, made, strict=True):
                result = member.fit
                row = fit_row(name, rank, seed, member) | {"converged": result.converged}
                rows.append(row | (measure(result) if measure is not None else {}))
                if keep or validation is not None:
                    kept.append(lightened(result))
                seconds = np.nansum([result.timings.get(k, np.nan) for k in ("compile", "run")])
                shown.update(
                    result=f"{name} K={rank} seed {seed}: perplexity "
                    f"{rows[-1]['perplexity']:.4f}, {result.n_iter} iterations, {seconds:.1f} s"
                )
            return made

        grids = [EngineGrid(e, tuple(ranks)) for e in engines]  # priors and options: the fitter's
        fit_grids(grids, as_observed(Y, train, warn_empty=False), scored, seeds, fitter=fitter,
              extend=None, progress=False)  # fmt: skip
    for seed in seeds if validation is not None else ():
        chosen = [f for f, row in zip(kept, rows, strict=False) if row["seed"] == seed]
        groups = {STACKED_ALL: chosen, STACKED_MM: [f for f in chosen if f.engine == "mm"]}
        rows += [row for row, _ in stacked_rows(Y, groups, train, validation, scored, seed)]
    import pandas as pd  # on first use: it loads in 0.5 s

    fits = pd.DataFrame(rows)
    summary = summarize(fits, ["engine", "rank", "prior"])
    return Comparison(fits=fits, summary=summary, results=tuple(kept))


STACKED_ALL = "stacked: all engines"
STACKED_MM = "stacked: mm grid"
"""The ``engine`` of the rows of :func:`stacked_rows`."""


def fit_row(engine: str, rank: int, seed: int, member: runner.Scored) -> dict:
    """A table row of one scored fit: engine, rank, prior, seed, perplexity, times, iterations."""
    result = member.fit
    return {
        "engine": engine,
        "rank": rank,
        "prior": describe_prior(result.prior),
        "seed": seed,
        "perplexity": member.validation_perplexity,
        "seconds": result.timings.get("run", np.nan),
        "compile_seconds": result.timings.get("compile", np.nan),
        "iterations": result.n_iter,
    }


def lightened(result: Fit) -> Fit:
    """``result`` without posterior draws and sampler statistics (its members' too)."""
    mixture = result.mixture
    if mixture is not None:
        mixture = dataclasses.replace(mixture, members=tuple(lightened(m) for m in mixture.members))
    return dataclasses.replace(result, posterior=None, mixture=mixture)


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
                "perplexity": result.perplexity(test.Y, test.mask),
                "seconds": result.timings.get("run", np.nan),
                "compile_seconds": result.timings.get("compile", np.nan),
                "iterations": 0,
                "converged": result.converged,
            },
            result,
        )
        rows.append(row)
    return rows


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
    return fits.groupby(keys, sort=False).agg(**columns).reset_index()


def nonempty_list(name: str, values, example: str) -> list:
    """``values`` as a list; TypeError when it is a string or not iterable, ValueError when
    empty, the message naming the argument ``name`` and showing ``example``."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a list, e.g. {example}; got {values!r}")
    values = list(values)
    if not values:
        raise ValueError(f"{name} is empty; give at least one, e.g. {example}")
    return values


def _split(Y, train, test):
    """Check the masks; return ``train`` and Y with its test entries (an ``Observed``)."""
    shape = np.shape(Y)
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
    return masks["train"], as_observed(Y, masks["test"], warn_empty=False)
