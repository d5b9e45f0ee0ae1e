"""Hyperparameter search for the MM engine: rank x alpha x beta (x restarts) on validation.

The prior is data, not structure, so every (alpha, beta, seed) of one rank runs in a
single compiled program (:func:`bernmf.inference.mm.run_many`: the fits of
``bernmf.fit(Y, "mm", ...)`` mapped over priors and seeds, one after the other on a
CPU, vmapped on an accelerator); a fit of the grid equals ``bernmf.fit(Y, "mm", rank,
mask=mask, prior=Prior(alpha, beta, gamma), seed=seed)`` to rounding.

Examples
--------
>>> import bernmf, bernmf.tune
>>> from bernmf.split import random_split
>>> Y, _, _ = bernmf.simulate(0, 60, 40, 3)
>>> split = random_split(Y.shape, seed=0)
>>> result = bernmf.tune.grid(Y, [2, 3], [1.0, 1.5], [1.0, 1.5], mask=split.train,
...                           validation=split.validation, progress=False)
>>> sorted(result.best)
['alpha', 'beta', 'rank', 'seed', 'validation_perplexity']
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from bernmf._progress import say
from bernmf.data import as_observed, check_rank
from bernmf.inference import mm
from bernmf.models.spec import Prior, perplexity
from bernmf.results import Fit
from bernmf.stacked import stack

__all__ = ["Tuning", "grid", "restarts"]

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
    stacked : Fit or None
        With ``combine="stack"``: :func:`bernmf.stack` of every fit of the grid (the
        members of every setting and rank) and the baseline, weighted on the
        validation entries.
    """

    table: pd.DataFrame
    best: dict
    best_factors: tuple[np.ndarray, np.ndarray]
    timings: dict = field(default_factory=dict)
    ensembles: pd.DataFrame | None = None
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
    alphas=(1.0,),
    betas=(1.0,),
    *,
    mask,
    validation,
    gamma: float = 1.0,
    restarts: int = 1,
    combine: str | None = None,
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
    alphas, betas : sequences of float >= 1
        The Beta prior of H; every pair is fitted.
    mask : bool array of shape (M, N)
        Training entries (observed by the fits).
    validation : bool array of shape (M, N)
        Entries scored by the mean negative log-likelihood (perplexity).
    gamma : float, default 1
        Dirichlet parameter of the rows of W, the same for every fit.
    restarts : int, default 1
        Random initializations per setting, with seeds ``seed, seed + 1, ...``; the
        same seeds for every (alpha, beta), so settings are compared on equal footing.
    combine : {"mean", "best", "stack"}, optional
        ``"mean"``, ``"best"``: also score, and choose the setting by, the ensemble of
        each setting's ``restarts`` fits (:mod:`bernmf.ensemble`): the uniform mixture
        of their probabilities, or the fit of lowest objective. ``"stack"``: stack
        every fit of the grid on the validation entries (:func:`bernmf.stack`,
        :attr:`Tuning.stacked`; its validation perplexity is that of the entries its
        weights were fitted on, so score it on test entries); ``best`` stays the
        single fit of lowest validation perplexity.
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
    alphas, betas = _values("alphas", alphas), _values("betas", betas)
    if restarts < 1:
        raise ValueError(f"restarts must be >= 1, got {restarts}")
    if combine not in (None, "mean", "best", "stack"):
        raise ValueError(f"combine must be None, 'mean', 'best' or 'stack', got {combine!r}")
    data = as_observed(Y, mask)
    values = as_observed(Y).Y
    validation = np.asarray(validation, bool)
    if validation.shape != data.shape:
        raise ValueError(f"validation has shape {validation.shape} but Y has {data.shape}")
    if (validation & data.mask).any():
        raise ValueError("validation entries must not be training entries (mask)")
    stream = stream or sys.stderr
    settings = [(a, b, seed + r) for a in alphas for b in betas for r in range(restarts)]
    rows, ensembles, timings, grid_fits = [], [], {}, []
    single = combine in (None, "stack")  # best: the single fit of lowest validation perplexity
    best_score, best_factors = np.inf, None
    for rank in ranks:
        label = f"rank {rank}"
        result = mm.run_many(
            data,
            rank,
            [Prior(a, b, gamma) for a, b, _ in settings],
            [s for _, _, s in settings],
            batch_size=batch_size,
            workers=workers,
            progress=progress,
            label=label,
            stream=stream,
            **options,
        )
        timings[rank] = {"compile": result.compile_seconds, "run": result.run_seconds}
        for i, (a, b, s) in enumerate(settings):
            score = perplexity(values, result.probs(i), validation)
            rows.append(
                (
                    rank,
                    a,
                    b,
                    gamma,
                    s,
                    int(result.n_iter[i]),
                    int(result.sweeps[i]),
                    bool(result.converged[i]),
                    float(result.seconds[i]),
                    score,
                )
            )
            if single and score < best_score:
                best_score, best_factors = score, (result.W[i], result.H[i])
            if combine == "stack":
                run = {"compile": 0.0, "run": float(result.seconds[i])}
                grid_fits.append(result.fit(i, Prior(a, b, gamma), s, timings=run))
        for start in range(0, len(settings), restarts) if not single else ():
            members = range(start, start + restarts)
            chosen = min(members, key=lambda i: np.nan_to_num(result.objective[i], nan=np.inf))
            probs = (
                np.mean([result.probs(i) for i in members], axis=0)
                if combine == "mean"
                else result.probs(chosen)
            )
            score = perplexity(values, probs, validation)
            a, b, s = settings[chosen]
            ensembles.append((rank, a, b, gamma, restarts, s, score))
            if score < best_score:
                best_score, best_factors = score, (result.W[chosen], result.H[chosen])
        if progress:
            done = pd.DataFrame(rows[-len(settings) :], columns=COLUMNS)
            top = done.loc[done["validation_perplexity"].idxmin()]
            say(
                True,
                f"{label}: {len(settings)} fits in {result.run_seconds:.1f} s "
                f"(compile {result.compile_seconds:.1f} s), {int(done['sweeps'].sum())} "
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
    stacked = stack(grid_fits, Y, validation=validation, mask=mask) if grid_fits else None
    return Tuning(table, best, best_factors, timings, ensemble_table, stacked)


def restarts(
    Y,
    rank: int,
    prior: Prior | None = None,
    seeds: Sequence[int] = tuple(range(10)),
    *,
    mask,
    **options,
) -> list[Fit]:
    """Fit the same model from several random initializations in one compiled call.

    Parameters
    ----------
    Y : array-like or DataFrame
    rank : int
    prior : Prior, optional
        Default ``Prior()`` (flat: the EM algorithm).
    seeds : sequence of int
    mask : bool array
        Training entries.
    **options
        Options of :func:`bernmf.inference.mm.run_many` (``batch_size``,
        ``workers``, ``progress``) and of the ``mm`` engine (``max_iter``, ``tol``,
        ``dtype``, ``accelerate``, ...).

    Returns
    -------
    list of Fit
        One per seed, as ``bernmf.fit`` would give (compile time on the first).
    """
    prior = (prior or Prior()).broadcast(check_rank(rank))
    data = as_observed(Y, mask)
    fits = mm.run_members(data, rank, prior, [int(s) for s in seeds], **options)
    labels = {"row_labels": data.row_labels, "col_labels": data.col_labels}
    return [dataclasses.replace(fit, **labels) for fit in fits]
