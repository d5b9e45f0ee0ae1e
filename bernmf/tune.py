"""Hyperparameter search for the MM engine: rank x alpha x beta (x restarts) on validation.

The prior is data, not structure, so every (alpha, beta, seed) of one rank runs in a
single compiled program (:func:`bernmf.fitting.runner.fit_settings`, through mm's
:func:`~bernmf.inference.mm.run_many`: the fits of
``bernmf.fit(Y, "mm", ...)`` mapped over priors and seeds, one after the other on a
CPU, vmapped on an accelerator); a fit of the grid equals ``bernmf.fit(Y, "mm", rank,
mask=mask, prior=Prior(alpha, beta, gamma), seed=seed)`` to rounding.

Examples
--------
>>> import bernmf, bernmf.tune
>>> from bernmf.data.split import random_split
>>> Y, _, _ = bernmf.simulate(0, 60, 40, 3)
>>> split = random_split(Y.shape, seed=0)
>>> result = bernmf.tune.grid(Y, [2, 3], [1.0, 1.5], [1.0, 1.5], mask=split.train,
...                           validation=split.validation, progress=False)
>>> sorted(result.best)
['alpha', 'beta', 'rank', 'seed', 'validation_perplexity']
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from bernmf._progress import say, working_on
from bernmf.data.budget import check_fit_bytes
from bernmf.data.observed import as_observed, check_count, check_rank, check_seed
from bernmf.fitting.ensemble import MAX_RESTARTS
from bernmf.fitting.plan import held_out_entries
from bernmf.fitting.runner import Scored, fit_settings
from bernmf.fitting.stack import stack
from bernmf.fitting.stacking import entries_lpd
from bernmf.inference import get_engine
from bernmf.models.spec import Prior
from bernmf.results.fit import Fit

__all__ = ["Tuning", "grid"]

COLUMNS = [
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


@dataclass(frozen=True)
class Tuning:
    """Result of :func:`grid`.

    Attributes
    ----------
    table : DataFrame
        One row per fit: rank, alpha, beta, gamma, seed, iterations, converged,
        seconds, validation_perplexity.
    best : dict
        The row with the lowest validation perplexity (rank, alpha, beta, seed,
        validation_perplexity); with ``combine``, the setting whose ensemble has
        the lowest (rank, alpha, beta, seed of its best member, its ensemble's
        validation_perplexity).
    best_factors : (W, H)
        The factors of that fit (with ``combine``: of that ensemble's member of
        lowest objective).
    timings : dict
        Per rank: ``{"compile": s, "run": s}``.
    ensembles : DataFrame or None
        With ``combine`` "mean" or "best": one row per (rank, alpha, beta): gamma,
        members and the validation perplexity of the ensemble of its ``restarts`` fits.
    members : list of bernmf.fitting.runner.Scored
        Every fit (a row of ``table``, in its order) with its setting and validation
        perplexity (:func:`bernmf.fitting.runner.fit_settings`), e.g. to stack them.
    stacked : Fit or None
        With ``combine="stack"``: :func:`bernmf.stack` of every fit of the grid (the
        members of every setting and rank, a setting's seeds sharing one weight) and
        the baseline, weighted on the validation entries.
    """

    table: pd.DataFrame
    best: dict
    best_factors: tuple[np.ndarray, np.ndarray]
    timings: dict = field(default_factory=dict)
    ensembles: pd.DataFrame | None = None
    members: list[Scored] = field(default_factory=list, repr=False)
    stacked: Fit | None = None

    def mean_over_seeds(self) -> pd.DataFrame:
        """Validation perplexity averaged over restarts, per (rank, alpha, beta)."""
        return (
            self.table.groupby(["rank", "alpha", "beta"], as_index=False)["validation_perplexity"]
            .mean()
            .sort_values("validation_perplexity", ignore_index=True)
        )


def _values(name: str, values) -> list[float]:
    array = np.atleast_1d(np.asarray(values, dtype=float))
    if array.ndim != 1 or not array.size:
        raise ValueError(f"{name} must be a non-empty list of numbers")
    return array.tolist()


def grid(
    Y,
    ranks: Sequence[int],
    alphas=(Prior().alpha,),
    betas=(Prior().beta,),
    *,
    mask,
    validation,
    gamma: float = Prior().gamma,
    restarts: int = 1,
    combine: str | None = None,
    refit: bool = False,
    seed: int = 0,
    batch_size: int | None = None,
    workers: int = 1,
    progress: bool = True,
    stream=None,
    **options,
) -> Tuning:
    """Fit MM over rank x alpha x beta x restarts and score each fit on validation entries.

    Parameters
    ----------
    Y : array-like or DataFrame of shape (M, N)
        Binary data; NaN is missing.
    ranks : sequence of int
    alphas, betas : sequences of float >= 1, default mm's default prior's
        The Beta prior of H; every pair is fitted.
    mask : bool array of shape (M, N)
        Training entries (observed by the fits).
    validation : bool array of shape (M, N)
        Entries scored by the mean negative log-likelihood (perplexity), as
        :meth:`bernmf.Fit.perplexity` scores them: entries where Y is NaN are not.
    gamma : float, default mm's default prior's
        Dirichlet parameter of the rows of W, the same for every fit.
    restarts : int, default 1
        Random initializations per setting, with seeds ``seed, seed + 1, ...``; the
        same seeds for every (alpha, beta), so settings are compared on equal footing.
    combine : {"mean", "best", "stack"}, optional
        ``"mean"``, ``"best"``: also score, and choose the setting by, the ensemble of
        each setting's ``restarts`` fits (:mod:`bernmf.fitting.ensemble`): the uniform mixture
        of their probabilities, or the fit of lowest objective. ``"stack"``: stack
        every fit of the grid on the validation entries (:func:`bernmf.stack` with its
        default ``seeds="mean"``: a setting's ``restarts`` fits share one weight;
        :attr:`Tuning.stacked`; its validation perplexity is that of the entries its
        weights were fitted on, so score it on test entries); ``best`` stays the
        single fit of lowest validation perplexity.
    refit : bool, default False
        With ``combine="stack"``: fit the stack's members of positive weight again on
        the training and validation entries, with this grid's options
        (:func:`bernmf.stack`'s ``refit``).
    batch_size, workers
        See :func:`bernmf.inference.mm.run_many`.
    progress : bool, default True
        Print a line per rank, and progress lines during long ranks, to ``stream``.
    **options
        Options of the ``mm`` engine (``max_iter``, ``tol``, ``dtype``,
        ``accelerate``, ...) but ``restarts``, with its defaults.

    Returns
    -------
    Tuning
    """
    ranks = [check_rank(k) for k in np.atleast_1d(ranks).tolist()]
    if not ranks:
        raise ValueError(f"ranks must be a non-empty list of ranks, got {ranks}")
    alphas, betas = _values("alphas", alphas), _values("betas", betas)
    check_count("restarts", restarts, most=MAX_RESTARTS)
    if combine not in (None, "mean", "best", "stack"):
        raise ValueError(f"combine must be None, 'mean', 'best' or 'stack', got {combine!r}")
    if refit and combine != "stack":
        raise ValueError(f"refit=True refits a stack: give combine='stack' (got {combine!r})")
    engine = get_engine("mm")
    options = engine.with_defaults(options)  # every option checked before compiling
    data = as_observed(Y, mask)
    held_out = held_out_entries(Y, data, np.asarray(validation, bool))
    rows_at, columns_at, y = held_out.entries()
    stream = stream or sys.stderr
    check_seed(seed, restarts)
    settings = [Prior(a, b, gamma) for a in alphas for b in betas]
    priors = {k: [engine.prior_for(p, k) for p in settings] for k in ranks}  # checked, (K,)
    seeds = [seed + r for r in range(restarts)]
    batching = {"batch_size": batch_size, "workers": workers, "progress": progress}
    fits = f"{len(settings) * restarts} fits of alphas x betas x restarts={restarts}"
    check_fit_bytes(options, len(settings) * restarts, data.shape, max(ranks), fits)
    rows, ensembles, timings, everyone = [], [], {}, []
    single = combine in (None, "stack")  # best: the single fit of lowest validation perplexity
    best_score, best_factors = np.inf, None
    for rank in ranks:
        label = f"rank {rank}"
        working_on(f"mm K={rank}, {len(settings) * restarts} fits")
        fitted = fit_settings(
            engine, data, rank, priors[rank], seeds, options, held_out,
            label=label, stream=stream, **batching,
        )  # fmt: skip
        everyone += fitted
        timings[rank] = {
            key: float(sum(m.fit.timings[key] for m in fitted)) for key in ("compile", "run")
        }
        for m in fitted:
            fit, score = m.fit, m.validation_perplexity
            alpha, beta = float(m.prior.alpha[0]), float(m.prior.beta[0])
            rows.append(
                (
                    rank, alpha, beta, gamma, fit.seed, fit.n_iter, fit.extras["sweeps"],
                    fit.converged, fit.timings["run"], score,
                )
            )  # fmt: skip
            if single and score < best_score:
                best_score, best_factors = score, (fit.W, fit.H)
        for start in range(0, len(fitted), restarts) if not single else ():
            group = [m.fit for m in fitted[start : start + restarts]]
            chosen = min(group, key=lambda f: np.nan_to_num(f.objective, nan=np.inf))
            mixed = np.mean([f.probs_at(rows_at, columns_at) for f in group], axis=0)
            picked = chosen.probs_at(rows_at, columns_at)
            score = float(-entries_lpd(y, mixed if combine == "mean" else picked).mean())
            prior = fitted[start].prior
            setting = (rank, float(prior.alpha[0]), float(prior.beta[0]), gamma, restarts)
            ensembles.append((*setting, chosen.seed, score))
            if score < best_score:
                best_score, best_factors = score, (chosen.W, chosen.H)
        if progress:
            done = pd.DataFrame(rows[-len(fitted) :], columns=COLUMNS)
            top = done.loc[done["validation_perplexity"].idxmin()]
            say(
                True,
                f"{label}: {len(fitted)} fits in {timings[rank]['run']:.1f} s "
                f"(compile {timings[rank]['compile']:.1f} s), {int(done['sweeps'].sum())} "
                f"sweeps; best validation perplexity {top['validation_perplexity']:.4f} at "
                f"alpha={top['alpha']:g}, beta={top['beta']:g}",
                stream,
            )
    table = pd.DataFrame(rows, columns=COLUMNS)
    ensemble_columns = ["rank", "alpha", "beta", "gamma", "members", "seed"]
    ensemble_table = (
        None
        if single
        else pd.DataFrame(ensembles, columns=[*ensemble_columns, "validation_perplexity"])
    )
    scored = table if single else ensemble_table
    top = scored.loc[scored["validation_perplexity"].idxmin()]
    best = {
        "rank": int(top["rank"]),
        "alpha": float(top["alpha"]),
        "beta": float(top["beta"]),
        "seed": int(top["seed"]),
        "validation_perplexity": float(top["validation_perplexity"]),
    }
    stacked = None
    if combine == "stack":
        fits = [m.fit for m in everyone]
        refits = {"refit": refit, "options": {"mm": options}} if refit else {}
        stacked = stack(fits, Y, validation=validation, mask=mask, **refits)
    return Tuning(table, best, best_factors, timings, ensemble_table, everyone, stacked)
