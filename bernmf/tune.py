"""Hyperparameter search on validation: engines x rank (x alpha x beta x restarts).

Every engine goes through the one runner of settings x seeds
(:func:`bernmf.fitting.runner.fit_settings`), as the default search's ladder does
(:mod:`bernmf.fitting.search`): an engine that takes its prior as data (``mm``) fits every
(alpha, beta, seed) of one rank in a single compiled call (mm's
:func:`~bernmf.inference.mm.run_many`: the fits of ``bernmf.fit(Y, "mm", ...)`` mapped over
priors and seeds, one after the other on a CPU, vmapped on an accelerator), so a fit of the
grid equals ``bernmf.fit(Y, "mm", rank, mask=mask, prior=Prior(alpha, beta, gamma),
seed=seed)`` to rounding; an engine without a prior (``em``, ``logsvd``, ``logpca``) is
fitted once per rank and seed. The grid is one :func:`bernmf.fitting.grids.fit_grids`
call: a best rank, alpha or beta at the edge of the grid is said, and with ``extend`` the
grid grows in that direction while the validation perplexity improves.

Examples
--------
>>> import bernmf, bernmf.tune
>>> from bernmf.data.split import random_split
>>> Y, _, _ = bernmf.simulate(0, 60, 40, 3)
>>> split = random_split(Y.shape, seed=0)
>>> result = bernmf.tune.grid(Y, [2, 3], [1.0, 1.5], [1.0, 1.5], mask=split.train,
...                           validation=split.validation, progress=False)
>>> sorted(result.best)
['alpha', 'beta', 'engine', 'rank', 'seed', 'validation_perplexity']
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pandas as pd

from bernmf._progress import working_on
from bernmf.data.arguments import check_count, check_rank
from bernmf.data.memory import check_fit_bytes
from bernmf.data.observed import Observed, as_training
from bernmf.fitting.ensemble import MAX_RESTARTS, combine_members
from bernmf.fitting.grids import (
    EngineGrid,
    comparable,
    engine_options,
    fit_grids,
    grid_priors,
)
from bernmf.fitting.plan import check_arguments, plan
from bernmf.fitting.runner import Scored, mean_perplexity
from bernmf.fitting.search import check_engines
from bernmf.fitting.stack import stack_on
from bernmf.inference import Engine
from bernmf.models.spec import Prior
from bernmf.results.fit import Fit

__all__ = ["EXTENSIONS", "PRIOR_GRID", "Tuning", "grid"]

COLUMNS = [
    "engine",
    "rank",
    "alpha",
    "beta",
    "gamma",
    "seed",
    "iterations",
    "sweeps",
    "converged",
    "seconds",
    "validation_perplexity",
]

MAX_EXTEND = 30
"""The most ranks ``extend`` may add: 30 doublings pass any matrix's min(M, N)."""

TIMINGS = ("run", "compile")
"""The keys of :attr:`Tuning.timings`' values."""

PRIOR_GRID = (1.2, 1.5, 2.0, 3.0)
"""The alphas, and the betas, that ``bernmf tune`` tries by default (for the engines that
take a prior): from the default prior's 1.2 up. Not 1: at alpha = 1 (or beta = 1) H reaches 0
(or 1), and the tuned mm on animals chose alpha = 1 and scored inf on test; from 1.2 it
scored 0.4119 there, and 0.1018 on paleo against 0.1105 from 1 (the paper's split,
2026-11-27)."""

EXTENSIONS = 2
"""Ranks (and alphas, and betas) that ``bernmf tune`` adds at most, per engine, beyond the edge
of its grid where the best one lies (``--extend``); :func:`grid`'s default is 0, so that a
study's grid stays the one it names."""


@dataclass(frozen=True)
class Tuning:
    """Result of :func:`grid`.

    Attributes
    ----------
    table : DataFrame
        One row per fit: engine, rank, alpha, beta, gamma (NaN for an engine without a
        prior), seed, iterations, sweeps (passes over the data: mm's and em's, whose
        accelerated steps count 3; the iterations of the other engines), converged,
        seconds, validation_perplexity.
    best : dict
        The row with the lowest validation perplexity (engine, rank, alpha, beta, seed,
        validation_perplexity; alpha and beta None for an engine without a prior); with
        ``combine`` "mean" or "best", the setting whose ensemble has the lowest (the seed
        of its best member, its ensemble's validation_perplexity).
    best_fit : Fit
        That fit, as the grid made it (with ``combine`` "mean" or "best": that setting's
        ensemble of its members, :func:`bernmf.fitting.ensemble.combine_members`, as
        ``bernmf.fit(..., restarts=R, combine=...)`` combines them); ``bernmf tune`` saves it.
    timings : dict
        Per rank: ``{"compile": s, "run": s}``, summed over the engines.
    ensembles : DataFrame or None
        With ``combine`` "mean" or "best": one row per (engine, rank, alpha, beta): gamma,
        members and the validation perplexity of the ensemble of its ``restarts`` fits.
    members : list of bernmf.fitting.runner.Scored
        Every fit (a row of ``table``, in its order) with its setting and validation
        perplexity (:func:`bernmf.fitting.runner.fit_settings`), e.g. to stack them.
    stacked : Fit or None
        With ``combine="stack"``: :func:`bernmf.stack` of every fit of the grid (the
        members of every engine, setting and rank, a setting's seeds sharing one weight)
        and the baseline, weighted on the validation entries.
    notes : list of str
        What was said about the grid's edges: a best rank at the largest (or smallest)
        rank of an engine's grid, the ranks added beyond it and why the extension stopped.
    options : dict
        Each engine's options, by name, as its fits were made (e.g. to fit the best
        setting again with :func:`bernmf.fit`).
    """

    table: pd.DataFrame
    best: dict
    best_fit: Fit
    timings: dict = field(default_factory=dict)
    ensembles: pd.DataFrame | None = None
    members: list[Scored] = field(default_factory=list, repr=False)
    stacked: Fit | None = None
    notes: list[str] = field(default_factory=list)
    options: dict = field(default_factory=dict)

    def mean_over_seeds(self) -> pd.DataFrame:
        """Validation perplexity averaged over restarts, per (engine, rank, alpha, beta)."""
        keys = ["engine", "rank", "alpha", "beta"]
        return (
            self.table.groupby(keys, as_index=False, dropna=False)["validation_perplexity"]
            .mean()
            .sort_values("validation_perplexity", ignore_index=True)
        )


def _values(name: str, values) -> list[float]:
    array = np.atleast_1d(np.asarray(values, dtype=float))
    if array.ndim != 1 or not array.size:
        raise ValueError(f"{name} must be a non-empty list of numbers")
    return array.tolist()


def _engine_options(chosen: Sequence[Engine], options: dict) -> dict[str, dict]:
    """Each engine's options: those of ``options`` it declares, its defaults for the others
    (:func:`bernmf.fitting.grids.engine_options`); TypeError for an option none declares."""
    declared = {key for engine in chosen for key in engine.options}
    unknown = sorted(set(options) - declared)
    if unknown:
        names = ", ".join(engine.name for engine in chosen)
        raise TypeError(
            f"the engines tuned ({names}) do not take option(s) {unknown}; "
            f"their options: {sorted(declared)}"
        )
    return {e.name: engine_options(e, {k: v for k, v in options.items() if k in e.options})
            for e in chosen}  # fmt: skip


def grid(
    Y,
    ranks: Sequence[int],
    alphas=None,
    betas=None,
    *,
    mask,
    validation,
    engines: Sequence[str] = ("mm",),
    gamma: float | None = None,
    restarts: int = 1,
    combine: str | None = None,
    refit: bool = False,
    seed: int = 0,
    extend: int = 0,
    batch_size: int | None = None,
    workers: int = 1,
    progress: bool = True,
    stream=None,
    **options,
) -> Tuning:
    """Fit engines x rank (x alpha x beta) x restarts and score each fit on validation entries.

    Parameters
    ----------
    Y : array-like or DataFrame of shape (M, N)
        Binary data; NaN is missing.
    ranks : sequence of int
    alphas, betas : sequences of float >= 1, optional
        The Beta prior of H of the engines that take a prior; every pair is fitted.
        Default: the default prior's (:class:`bernmf.Prior`); with none of alphas, betas
        and gamma given, each engine fits its own default prior (a sampler's differs
        from mm's). Refused when no engine tuned takes a prior.
    mask : bool array of shape (M, N)
        Training entries (observed by the fits).
    validation : bool array of shape (M, N)
        Entries scored by the mean negative log-likelihood (perplexity), as
        :meth:`bernmf.Fit.perplexity` scores them: entries where Y is NaN are not.
    engines : sequence of str, default ("mm",)
        The engines tuned, in order.
    gamma : float, optional
        Dirichlet parameter of the rows of W, the same for every fit of an engine that
        takes a prior (default: the default prior's).
    restarts : int, default 1
        Random initializations per setting, with seeds ``seed, seed + 1, ...``; the
        same seeds for every (alpha, beta), so settings are compared on equal footing
        (a sampler's: one chain each).
    combine : {"mean", "best", "stack"}, optional
        ``"mean"``, ``"best"``: also score, and choose the setting by, the ensemble of
        each setting's ``restarts`` fits (:mod:`bernmf.fitting.ensemble`): the uniform mixture
        of their probabilities, or the fit of lowest :meth:`Engine.score`. ``"stack"``: stack
        every fit of the grid on the validation entries (:func:`bernmf.stack` with its
        default ``seeds="mean"``: a setting's ``restarts`` fits share one weight;
        :attr:`Tuning.stacked`; its validation perplexity is that of the entries its
        weights were fitted on, so score it on test entries); ``best`` stays the
        single fit of lowest validation perplexity.
    refit : bool, default False
        With ``combine="stack"``: fit the stack's members of positive weight again on
        the training and validation entries, with this grid's options
        (:func:`bernmf.stack`'s ``refit``).
    extend : int, default 0
        When an engine's best rank is the largest of its grid (below min(M, N)), or the
        smallest (above 1), fit up to this many ranks beyond it, each twice (or half)
        the last, while each improves that engine's best validation perplexity; the same
        for a best alpha or beta at the edge of two or more values (at the best rank: the
        largest doubled, the smallest moved halfway to 1, where H would reach 0 and 1). With
        0 (or a grid of one value), an edge is only said (:attr:`Tuning.notes`).
        ``bernmf tune`` extends by :data:`EXTENSIONS`
        (:func:`bernmf.fitting.grids.rank_edges`, :func:`~bernmf.fitting.grids.prior_edges`).
    batch_size, workers
        See :func:`bernmf.inference.mm.run_many`.
    progress : bool, default True
        Print a line per engine and rank, progress lines during long ranks and the
        notes on the grid's edges, to ``stream``.
    **options
        Engine options (``max_iter``, ``tol``, ``dtype``, ...) but ``restarts``: each goes
        to every engine tuned that declares it, the others keep their defaults.

    Returns
    -------
    Tuning

    Raises
    ------
    ValueError, TypeError
        Before any fit: unknown engines, alphas or betas with no engine that takes a
        prior, an option no engine tuned takes, and what :func:`bernmf.fit` refuses.
    """
    request = _request(
        Y, ranks, alphas, betas, mask=mask, validation=validation, engines=engines,
        gamma=gamma, restarts=restarts, combine=combine, refit=refit, seed=seed,
        extend=extend, options=options,
    )  # fmt: skip  # every argument checked before compiling
    batching = {"batch_size": batch_size, "workers": workers, "progress": progress}
    grids = [dataclasses.replace(g, batching=batching) for g in request.grids]
    seeds = [seed + r for r in range(restarts)]
    swept = fit_grids(grids, request.data, request.held_out, seeds, options=request.options,
                      extend=extend, progress=progress, stream=stream or sys.stderr)  # fmt: skip
    table, ensembles, timings = _tables(swept.settings, combine, restarts)
    scored = table if ensembles is None else ensembles
    best = int(scored["validation_perplexity"].fillna(np.inf).idxmin())  # the first of least
    first = scored.loc[best]
    chosen_row = {
        "engine": str(first["engine"]),
        "rank": int(first["rank"]),
        "alpha": None if pd.isna(first["alpha"]) else float(first["alpha"]),
        "beta": None if pd.isna(first["beta"]) else float(first["beta"]),
        "seed": int(first["seed"]),
        "validation_perplexity": float(first["validation_perplexity"]),
    }
    everyone = [m for setting in swept.settings for m in setting.members]
    best_fit = _best_fit(swept.settings, best, request, combine if ensembles is not None else None)
    stacked = None
    if combine == "stack":
        fits = [m.fit for m in everyone]
        working_on(f"stacking {len(fits)} fits" + ", then refitting" * refit)
        options = request.options if refit else None
        stacked = stack_on(fits, request.data, request.held_out, refit=refit, options=options)
    return Tuning(
        table,
        chosen_row,
        best_fit,
        timings,
        ensembles,
        everyone,
        stacked,
        swept.notes,
        request.options,
    )


def _best_fit(settings, best: int, request: _Request, combine: str | None) -> Fit:
    """The fit of row ``best`` of the table (``combine`` None), or the ensemble of setting
    ``best`` combined as ``bernmf.fit(..., restarts=R, combine=combine)`` combines its
    members; recorded as that call's (:meth:`~bernmf.fitting.plan.Plan.recorded`: its
    request, training data and labels)."""
    if combine is None:
        setting, member = [(s, m) for s in settings for m in s.members][best]
        fit, first, ensemble = member.fit, member.fit.seed, {}
    else:
        setting = settings[best]
        members = [m.fit for m in setting.members]
        fit = combine_members(
            members, combine, request.data, request.held_out, score=setting.engine.score
        )
        first, ensemble = members[0].seed, {"restarts": len(members), "combine": combine}
    made = plan(
        request.data, None, setting.engine.name, setting.rank, prior=setting.prior, seed=first,
        options=request.options[setting.grid.label], **ensemble,
    )  # fmt: skip
    return made.recorded(fit)


class _Request(NamedTuple):
    """:func:`grid`'s arguments, checked: the training data, the held-out entries, the
    engines' grids and options."""

    data: Observed
    held_out: Observed
    grids: list[EngineGrid]
    options: dict[str, dict]


def _request(
    Y, ranks, alphas, betas, *, mask, validation, engines, gamma, restarts, combine, refit, seed,
    extend, options,
) -> _Request:  # fmt: skip
    """Check :func:`grid`'s arguments (what :func:`bernmf.fit` refuses, and the grid's own)
    and make the engines' grids, before any fit."""
    ranks = [check_rank(k) for k in np.atleast_1d(ranks).tolist()]
    if not ranks:
        raise ValueError(f"ranks must be a non-empty list of ranks, got {ranks}")
    chosen = check_engines(engines)
    names = ", ".join(engine.name for engine in chosen)
    given = [name for name, values in (("alphas", alphas), ("betas", betas)) if values is not None]
    if given and not any(engine.takes_prior for engine in chosen):
        raise ValueError(
            f"{' and '.join(given)} set a Beta prior, but {names} take no prior: leave "
            "them out, or tune an engine that takes one (mm)"
        )
    alphas = _values("alphas", Prior().alpha if alphas is None else alphas)
    betas = _values("betas", Prior().beta if betas is None else betas)
    check_count("restarts", restarts, most=MAX_RESTARTS)
    check_count("extend", extend, least=0, most=MAX_EXTEND)
    if combine not in (None, "mean", "best", "stack"):
        raise ValueError(f"combine must be None, 'mean', 'best' or 'stack', got {combine!r}")
    if refit and combine != "stack":
        raise ValueError(f"refit=True refits a stack: give combine='stack' (got {combine!r})")
    chosen_options = _engine_options(chosen, options)
    data, held_out = as_training(Y, mask, np.asarray(validation, bool))  # Y checked once
    own = not given and gamma is None  # each engine its own default prior
    gamma = Prior().gamma if gamma is None else gamma
    settings = [Prior(a, b, gamma) for a in alphas for b in betas]
    top = min(max(ranks) * 2**extend, max(min(data.shape), max(ranks)))  # its largest rank
    priors = None if own else tuple(settings)
    grids = [EngineGrid(e.name, tuple(ranks), priors if e.takes_prior else None) for e in chosen]
    for engine, one in zip(chosen, grids, strict=True):
        for rank in ranks:  # each setting's fits checked as bernmf.fit checks them
            check_arguments(engine.name, rank, None, seed, chosen_options[engine.name],
                            data.shape, restarts=restarts)  # fmt: skip
            grid_priors(one, engine, rank)  # and the grid's priors at that rank
        count = len(grid_priors(one, engine, 1)) * restarts
        what = f"{count} fits of {'alphas x betas x ' * engine.takes_prior}restarts={restarts}"
        check_fit_bytes(chosen_options[engine.name], count, data.shape, top, what)
    return _Request(data, held_out, grids, chosen_options)


def _tables(settings, combine: str | None, restarts: int):
    """The fits' table, the ensembles' (None without ``combine`` "mean" or "best", else a
    row per setting, in order) and the timings per rank."""
    rows, ensembles, timings = [], [], {}
    single = combine in (None, "stack")  # best: the single fit of lowest validation perplexity
    for setting in settings:
        engine, rank, fitted = setting.engine, setting.rank, setting.members
        spent = timings.setdefault(rank, dict.fromkeys(TIMINGS, 0.0))
        for key in TIMINGS:
            spent[key] += float(sum(m.fit.timings.get(key, 0.0) for m in fitted))
        alpha, beta = _prior_values(setting.prior)
        prior_gamma = np.nan if setting.prior is None else float(setting.prior.gamma[0])
        for m in fitted:
            fit, score = m.fit, m.validation_perplexity
            sweeps = fit.n_iter if fit.record.sweeps is None else fit.record.sweeps
            rows.append(
                (
                    engine.name, rank, alpha, beta, prior_gamma, fit.seed, fit.n_iter, sweeps,
                    fit.converged, fit.timings["run"], score,
                )
            )  # fmt: skip
        if single:
            continue
        picked = min(fitted, key=lambda m: comparable(engine.score(m.fit)))
        member = picked.fit
        if combine == "mean":  # the members' held-out log scores, as fit_settings gave them
            score = mean_perplexity(fitted)
        else:
            score = float(picked.validation_perplexity)
        ensembles.append((engine.name, rank, alpha, beta, prior_gamma, restarts, member.seed,
                          score))  # fmt: skip
    table = pd.DataFrame(rows, columns=COLUMNS)
    ensemble_columns = ["engine", "rank", "alpha", "beta", "gamma", "members", "seed"]
    ensemble_table = (
        None
        if single
        else pd.DataFrame(ensembles, columns=[*ensemble_columns, "validation_perplexity"])
    )
    return table, ensemble_table, timings


def _prior_values(prior: Prior | None) -> tuple[float, float]:
    """(alpha, beta) of a broadcast prior; NaN for none."""
    if prior is None:
        return np.nan, np.nan
    return float(prior.alpha[0]), float(prior.beta[0])
