"""Ensembles: R fits of one model from different starts, combined into one predictive.

The posterior of this model has many modes, and fits from different seeds (or the
chains of a sampler) settle in different ones. :func:`bernmf.fit` with
``restarts=R`` runs R members (:mod:`bernmf.inference.chains`) and combines them:

- ``"best"``: the member of best score (:meth:`~bernmf.inference.registry.Engine.score`:
  the final trace value, lowest or highest by the trace's direction; for a sampler the
  mean log joint of its kept draws);
- ``"mean"``: the uniform mixture of the members' predictive probabilities;
- ``"stack"``: the mixture weighted by stacking (Yao, Vehtari, Simpson & Gelman
  2018) of the members' log predictive densities, on the ``validation`` entries, or
  for posterior draws without them, on each member's PSIS-LOO (chain stacking, Yao,
  Vehtari & Gelman 2022); see :mod:`bernmf.posterior.stacking_weights`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from bernmf._warnings import warn
from bernmf.data.observed import Observed
from bernmf.inference import Engine
from bernmf.posterior.lpd import entries_lpd
from bernmf.posterior.modes import count_modes
from bernmf.posterior.stacking_weights import chain_stacking, stacking_weights
from bernmf.results.fit import ChainMeans, Fit, Mixture, Posterior

COMBINES = ("best", "mean", "stack")
"""The ways :func:`bernmf.fit` combines the members of an ensemble."""

MODES_WARNING = r"the \d+ members reached \d+ distinct modes"
"""The start of the UserWarning :func:`combine_members` gives when the members' modes differ."""

MAX_RESTARTS = 10_000
"""Largest ``restarts``: members each keep their factors, trace and probabilities."""


def check_combine(
    engine: Engine, restarts, combine, validation_given: bool, init_given: bool = False
) -> int:
    """Check ``restarts`` and ``combine`` before anything runs; return R.

    Raises
    ------
    ValueError
        R not an integer in [1, :data:`MAX_RESTARTS`], an unknown ``combine``,
        ``"stack"`` without validation entries for an engine without posterior draws,
        or an ensemble (R > 1 or ``combine`` other than ``"best"``) with initial
        factors: its members start from their seeds.
    """
    bad = isinstance(restarts, bool) or not isinstance(restarts, int | np.integer)
    if bad or not 1 <= restarts <= MAX_RESTARTS:
        raise ValueError(f"restarts must be an integer in [1, {MAX_RESTARTS}], got {restarts!r}")
    if combine not in COMBINES:
        raise ValueError(f"combine must be one of {COMBINES}, got {combine!r}")
    if combine == "stack" and not validation_given and not engine.bayesian:
        raise ValueError(
            f"combine='stack' weights the members of engine {engine.name!r} by their log "
            "predictive density on held-out entries: give validation= (a bool mask of "
            "observed entries outside the training mask)"
        )
    if init_given and (restarts > 1 or combine != "best"):
        raise ValueError(
            "an ensemble (restarts or combine) starts its members from random "
            "initializations: do not give init"
        )
    return int(restarts)


def validation_lpd(members: Sequence[Fit], validation: Observed) -> np.ndarray:
    """``log P(Y=y)`` of each member at the validation entries, shape (n, R).

    Through :meth:`Fit.probs_at`, at those entries only (no M x N array per member);
    ``-lpd.mean(axis=0)`` is each member's ``perplexity`` on them.
    """
    rows, columns, y = validation.entries()
    return np.column_stack([entries_lpd(y, m.probs_at(rows, columns)) for m in members])


def _scores(members: Sequence[Fit], score: Callable[[Fit], float]) -> np.ndarray:
    """``score`` of each member, lower is better; ValueError if one is not finite."""
    scores = np.array([score(m) for m in members], float)
    if not np.isfinite(scores).all():
        raise ValueError(f"an ensemble member ended with a non-finite score: {scores}")
    return scores


def final_objective(fit: Fit) -> float:
    """The last value of ``fit.trace``: the score of members whose trace falls."""
    return fit.objective


def _weights(combine: str, best: int, R: int, lpd, observed: Observed, draws) -> np.ndarray:
    """The weights (R,) of R members, on the simplex; ``draws`` are their pooled draws."""
    if combine == "best":
        return np.eye(R)[best]
    if combine == "mean":
        return np.full(R, 1.0 / R)
    if lpd is not None:
        return stacking_weights(lpd)
    return chain_stacking(observed, observed.mask, draws["W"], draws["H"]).weights  # checked


def _pooled(members: Sequence[Fit], field: str) -> dict:
    """The members' draws or sample statistics, concatenated along the chain axis."""
    keys = getattr(members[0], field).keys()
    return {k: np.concatenate([np.asarray(getattr(m, field)[k]) for m in members]) for k in keys}


def _pooled_posterior(members: Sequence[Fit], draws: dict) -> Posterior:
    """The members' posteriors as one: draws, sample statistics, log joints and chain means
    concatenated along the chain axis (those every member has), the chosen start groups."""
    parts = [m.posterior for m in members]
    log_joints = [p.log_joint for p in parts]
    means = [p.chain_means for p in parts]
    return Posterior(
        draws,
        _pooled(members, "sample_stats"),
        log_joint=None if any(x is None for x in log_joints) else np.concatenate(log_joints),
        chains_per_start=parts[0].chains_per_start,
        chain_means=None
        if any(x is None for x in means)
        else ChainMeans(*(np.concatenate(x) for x in zip(*means, strict=True))),
    )


def combine_members(
    members: Sequence[Fit],
    combine: str,
    observed: Observed,
    validation: Observed | None = None,
    *,
    score: Callable[[Fit], float] = final_objective,
    gather=None,
) -> Fit:
    """One :class:`Fit` of the members, their predictive probabilities mixed by ``combine``.

    Parameters
    ----------
    members : sequence of Fit
        Fits of one model on the same data (R >= 1), e.g. from different seeds.
    combine : {"best", "mean", "stack"}
        See the module docstring.
    observed : Observed
        The training data of the members.
    validation : Observed, optional
        Held-out entries (its mask) of Y, used by ``"stack"`` and scored for every
        member and the mixture.
    score : callable, default :func:`final_objective`
        ``score(member) -> float``, lower is better: the members' engine's
        :meth:`~bernmf.inference.registry.Engine.score`. It chooses ``"best"``
        and separates the modes.
    gather : callable, optional
        For members that hold some rows of the data only (a fit across processes,
        :mod:`bernmf.fitting.multiprocess`): maps an array of this part's scored entries,
        (n, R), to that of all parts, (n_all, R), in the same order in every part,
        so that the weights, modes and validation scores are those of all rows.

    Returns
    -------
    Fit
        ``probs`` is the mixture ``sum_r weights[r] * members[r].probs``, computed
        on demand from the members (so :meth:`Fit.perplexity` scores the mixture);
        W, H, trace, n_iter, seed and extras are the best member's
        (:attr:`~bernmf.results.fit.Mixture.chosen`); ``converged`` is True when every
        member converged (None when the members' is None); ``timings`` add up the
        members'; ``draws`` pool the members' chains, except for ``"best"``;
        ``mixture`` (:class:`~bernmf.results.fit.Mixture`) holds the members, their
        ``weights``, the ``combine`` rule, their ``scores``, the mode each reached
        (:func:`bernmf.posterior.modes.count_modes`; a UserWarning when they disagree
        strongly) and, with validation entries, each member's ``validation_perplexity``.
    """
    members = list(members)
    scores = _scores(members, score)
    best = int(np.argmin(scores))
    lpd = None
    gather = gather or (lambda part: part)
    if validation is not None:  # at the validation entries only, no M x N array per member
        lpd = gather(validation_lpd(members, validation))
    draws = _pooled(members, "draws")
    weights = _weights(combine, best, len(members), lpd, observed, draws)
    H = np.stack([m.H for m in members])
    entries = int(gather(np.array([[observed.mask.sum()]])).sum())
    modes = count_modes(H, scores, entries)
    if modes.disagree:
        warn(
            f"the {len(members)} members reached {modes.count} distinct modes, "
            f"{modes.gap_per_entry:.2g} nats apart per observed entry at worst: one fit "
            "depends on its seed, and "
            "combine='mean' or 'stack' averages over the modes"
        )
    mixture = Mixture(
        members=tuple(members),
        weights=tuple(weights.tolist()),
        rule=combine,
        scores=tuple(scores.tolist()),
        modes=tuple(modes.labels.tolist()),
        validation_perplexity=None if lpd is None else tuple((-lpd.mean(axis=0)).tolist()),
    )
    chosen = members[best]
    pooled = combine != "best" and bool(chosen.draws)
    timings = {k: float(sum(m.timings.get(k, 0.0) for m in members)) for k in chosen.timings}
    return dataclasses.replace(
        chosen,
        stored_probs=None,  # the members' mixture, computed on demand (Fit.probs_rows)
        converged=None
        if any(m.converged is None for m in members)
        else all(m.converged for m in members),
        record=dataclasses.replace(chosen.record, timings=timings),
        posterior=_pooled_posterior(members, draws) if pooled else chosen.posterior,
        mixture=mixture,
    )
