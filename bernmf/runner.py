"""The one runner of settings x seeds: members fitted, scored on validation entries.

:func:`members` fits every (setting, seed) pair of one engine on the training entries
and scores each member on the validation entries through :meth:`bernmf.Fit.probs_at`
(:func:`bernmf.ensemble.validation_lpd`: no M x N array per fit, NaN never scored), so
every runner's validation score equals ``fit.perplexity(Y, validation)``. An engine
that takes its prior as data (``mm``, ``em``: :attr:`Engine.run_settings`) fits all
pairs of a rank in one compiled call; a sampler's members are its chains. :func:`run`
runs a :class:`bernmf.plan.Plan`: :func:`bernmf.fit` is ``run(plan(...))``, and
``restarts``, :func:`bernmf.tune.grid`, :func:`bernmf.compare` and the report go
through it.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from typing import NamedTuple

from bernmf._progress import working_on
from bernmf.data import Observed
from bernmf.ensemble import combine_members, run_members, validation_lpd
from bernmf.inference import Engine
from bernmf.models.spec import Prior, ZeroProbabilityWarning
from bernmf.plan import Plan
from bernmf.results import BLOCK_ENTRIES, Fit


class Member(NamedTuple):
    """One fit of a setting x seeds run.

    Attributes
    ----------
    rank : int
    prior : Prior or None
        The setting's prior, broadcast to (rank,).
    fit : Fit
    validation_perplexity : float or None
        ``fit.perplexity`` on the validation entries (None without them).
    """

    rank: int
    prior: Prior | None
    fit: Fit
    validation_perplexity: float | None


def members(
    engine: Engine,
    data: Observed,
    rank: int,
    priors: Sequence[Prior | None],
    seeds: Sequence[int],
    options: dict,
    held_out: Observed | None = None,
    **batching,
) -> list[Member]:
    """Every (prior, seed) pair of one rank fitted, priors outermost, and scored.

    Parameters
    ----------
    engine : Engine
    data : Observed
        The training entries.
    rank : int
    priors : sequence of Prior or None
        The settings (each checked and broadcast by :meth:`Engine.prior_for`).
    seeds : sequence of int
        The same seeds for every prior (a sampler's: consecutive, one per chain).
    options : dict
        Every option of the engine (:meth:`Engine.with_defaults`).
    held_out : Observed, optional
        The validation entries that score every member.
    **batching
        For an engine with :attr:`Engine.run_settings`: ``batch_size``, ``workers``,
        ``progress``, ``label``, ``stream`` (:func:`bernmf.inference.mm.run_many`).

    Returns
    -------
    list of Member
        ``len(priors) * len(seeds)`` members.
    """
    priors = [engine.prior_for(p, rank) for p in priors]
    pairs = [(p, int(s)) for p in priors for s in seeds]
    if engine.run_settings is not None:
        fits = engine.run_settings(
            data, rank, [p for p, _ in pairs], [s for _, s in pairs], **options, **batching
        )
    else:
        fits = [f for p in priors for f in run_members(engine, data, rank, p, seeds, options)]
    scores = [None] * len(fits)
    if held_out is not None:
        scores = (-validation_lpd(fits, held_out).mean(axis=0)).tolist()
    return [
        Member(rank, prior, fit, score)
        for (prior, _), fit, score in zip(pairs, fits, scores, strict=True)
    ]


def run(request: Plan) -> Fit:
    """The :class:`Fit` of ``request``: one run, or its members combined; with its record.

    Returns
    -------
    Fit
        As :func:`bernmf.fit` documents, ``extras["run"]`` from :meth:`Plan.record`.
    """
    engine, data = request.engine, request.data
    count = len(request.seeds)
    working_on(f"{engine.name} K={request.rank}" + (f", {count} restarts" if count > 1 else ""))
    if not request.ensemble:
        seed = request.seeds[0]
        result = engine.run(
            data, request.rank, request.prior, seed, request.init, **request.options
        )
    else:
        fitted = members(
            engine, data, request.rank, [request.prior], request.seeds, request.options
        )
        result = combine_members(
            [m.fit for m in fitted], request.combine, data, request.held_out,
            score=engine.score, stacklevel=4,
        )  # fmt: skip
    warn_certain(result, data)
    return dataclasses.replace(
        result,
        extras={**result.extras, "run": request.record()},
        row_labels=data.row_labels,
        col_labels=data.col_labels,
        observed=data,
    )


def warn_certain(result: Fit, data: Observed) -> None:
    """A :class:`~bernmf.models.spec.ZeroProbabilityWarning` when ``probs`` is exactly 0 or 1
    at entries outside the training mask: a held-out entry there of the other outcome
    would score inf. ``probs`` is read a block of rows at a time."""
    M, N = result.shape
    step = M if result.stored_probs is not None else max(1, BLOCK_ENTRIES // N)
    certain = 0
    for a in range(0, M, step):
        p = result.probs_rows(a, a + step)
        certain += int(((p == 0) | (p == 1))[~data.mask[a : a + step]].sum())
    if certain:
        warnings.warn(
            f"P(Y=1) is exactly 0 or 1 at {certain} of {int((~data.mask).sum())} entries outside "
            "the training mask: a held-out entry there of the other outcome scores inf "
            f"(bernmf.perplexity). For {result.engine!r}: H at 0 or 1 (a flat prior) or a "
            "saturated logistic; a prior with alpha, beta > 1 (e.g. Prior(1.2, 1.2)) keeps H "
            "inside (0, 1), and bernmf.stack adds a baseline member that never gives 0 or 1",
            ZeroProbabilityWarning,
            stacklevel=4,  # warn_certain, run, bernmf.fit, its caller
        )
