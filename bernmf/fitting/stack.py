"""One predictive from fits of any engines: :func:`stack` (``bernmf.stack``).

The best predictor of a comparison is rarely one engine at one setting: fits of
different ranks, priors, seeds and model families settle in different modes and make
different errors. :func:`stack` takes any fits made on the same training entries (an
ensemble counts as its members), and mixes their predictive probabilities with the
stacking weights (Yao, Vehtari, Simpson & Gelman 2018) that predict the validation
entries best (:func:`bernmf.posterior.stacking_weights.stacking_weights`). A
column-frequency member shrunk toward the overall frequency (:func:`baseline`), which gives
every entry a probability strictly inside (0, 1), is added unless asked not to, so the
mixture never rules an outcome out. By
default the seeds of one setting share one weight (``seeds="mean"``); ``refit=True``
fits the members of positive weight again on the training and validation entries once
the weights are chosen.

Examples
--------
>>> import bernmf
>>> from bernmf.data.split import random_split
>>> Y, _, _ = bernmf.simulate(0, 60, 40, 3)
>>> split = random_split(Y.shape, seed=0)
>>> fits = [bernmf.fit(Y, e, 3, mask=split.train) for e in ("mm", "logsvd")]
>>> stacked = bernmf.stack(fits, Y, validation=split.validation)
>>> list(bernmf.fitting.stack.members_table(stacked)["engine"])
['mm', 'logsvd', 'baseline']
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from bernmf.data.observed import Observed, as_observed, validation_entries
from bernmf.fitting.runner import fit_settings, one_blas_thread
from bernmf.inference import available, get_engine
from bernmf.posterior.lpd import entries_lpd, mixture_lpd
from bernmf.posterior.stacking_weights import stacking_weights
from bernmf.results.fit import Fit, Mixture, Record, Stacking

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["BASELINE", "BASELINE_FLOOR", "STACK", "baseline", "members_table", "stack"]

BASELINE = "baseline"
"""Engine name of the :func:`baseline` member."""

BASELINE_FLOOR = 1e-6
"""Least weight of the :func:`baseline` member of a :func:`stack`: the stacking weights give
it 0 where no validation entry needs it, and a test entry that every other member rules
out would then score inf. The floor costs at most ``-log(1 - 1e-6)``, about 1e-6 nats, per
entry."""

STACK = "stack"
"""Engine name of a :func:`stack`; its :class:`~bernmf.results.fit.Mixture` has
:class:`~bernmf.results.fit.Stacking`."""

TABLE_COLUMNS = ("engine", "rank", "prior", "seed", "weight", "validation_perplexity", "seconds")
"""The columns of :func:`members_table`."""


def baseline(Y, mask) -> Fit:
    """The column frequencies shrunk toward the overall frequency, by empirical Bayes.

    P(Y=1) of column n is ``(ones_n + c m) / (observed_n + c)``: the posterior mean of the
    column's probability under the Beta(c m, c (1 - m)) prior that makes the columns' training
    entries most likely (:func:`column_prior`, beta-binomial). Where the columns differ (a
    trait matrix) c is small and each column keeps its own frequency; where they are alike (a
    sparse network, every column at 0.1%) c is large and every column gets nearly the overall
    frequency, which Laplace's ``(ones_n + 1) / (observed_n + 2)`` (this member before
    2026-11-29) overestimated by 1 / observed_n. Every probability is strictly inside (0, 1),
    so this member never rules an outcome out.

    Parameters
    ----------
    Y : array-like, DataFrame or scipy.sparse matrix of shape (M, N)
        Binary data; NaN is missing.
    mask : bool array of shape (M, N)
        The training entries.

    Returns
    -------
    Fit
        Engine ``"baseline"``, rank 1: ``W`` ones of shape (M, 1), ``H`` the
        column probabilities (1, N); ``trace`` the negative log-likelihood of the
        training entries (one value); ``observed`` the training data.
    """
    begin = time.perf_counter()
    data = as_observed(Y, mask, warn_empty=False)
    return _baseline(data, time.perf_counter() - begin)


PRIOR_STRENGTH = (2.0, 1e8)
"""The least and largest c of :func:`column_prior`: at least Laplace's 2 pseudo-entries (so a
column of few entries is never taken at its bare frequency), at most a prior that makes every
column the overall frequency."""


def column_prior(ones: np.ndarray, count: np.ndarray) -> tuple[float, float]:
    """The mean m and strength c of the Beta(c m, c (1 - m)) prior of the columns' P(Y=1)
    that maximizes the beta-binomial likelihood of their ones (N,) among their observed
    entries (N,): empirical Bayes over columns.

    c is bounded by :data:`PRIOR_STRENGTH`, and m to [1 / (T + 2), 1 - 1 / (T + 2)] for T
    observed entries in all (Laplace's estimate of an all-0 or all-1 matrix's frequency).
    """
    from scipy.optimize import minimize  # on first use (0.2 s)
    from scipy.special import digamma, expit, gammaln, logit

    ones, count = np.asarray(ones, float), np.asarray(count, float)
    total = count.sum()
    edge = 1.0 / (total + 2.0)

    def nll(x):  # and its gradient in (logit m, log c)
        m, c = expit(x[0]), np.exp(x[1])
        a, b = c * m, c * (1.0 - m)
        terms = gammaln(ones + a) - gammaln(a) + gammaln(count - ones + b) - gammaln(b)
        value = -float(np.sum(terms + gammaln(c) - gammaln(count + c)))
        da = np.sum(digamma(ones + a) - digamma(a))
        db = np.sum(digamma(count - ones + b) - digamma(b))
        dc = np.sum(digamma(c) - digamma(count + c))
        return value, -np.array([c * (da - db) * m * (1 - m), (m * da + (1 - m) * db + dc) * c])

    start = [logit((ones.sum() + 1.0) / (total + 2.0)), np.log(2.0)]  # Laplace's, inside
    bounds = [(logit(edge), logit(1 - edge)), tuple(np.log(PRIOR_STRENGTH))]
    options = {"ftol": 1e-15, "gtol": 1e-12, "maxiter": 1000}  # c is far out on a flat ridge
    found = minimize(nll, start, jac=True, method="L-BFGS-B", bounds=bounds, options=options)
    return float(expit(found.x[0])), float(np.exp(found.x[1]))


def _baseline(data: Observed, seconds: float = 0.0) -> Fit:
    begin = time.perf_counter()
    ones, count = data.ones.sum(axis=0), data.mask.sum(axis=0)
    m, c = column_prior(ones, count)
    p = (ones + c * m) / (count + c)
    nll = -float(ones @ np.log(p) + (count - ones) @ np.log1p(-p))
    timings = {"compile": 0.0, "run": seconds + time.perf_counter() - begin}
    return Fit(
        engine=BASELINE,
        rank=1,
        prior=None,
        W=np.ones((data.shape[0], 1)),
        H=p[None, :],
        trace=np.array([nll]),
        converged=True,
        record=Record(0, timings, None, data, data.row_labels, data.col_labels),
    )


def _unpacked(fits, unpack: bool = True) -> tuple[list[Fit], list[Fit], list[dict | None]]:
    """The fits as given (each a :class:`Fit`), the members to stack (with ``unpack`` the
    ensembles' members, recursively, else the fits themselves) and each member's engine
    options as :func:`bernmf.fit` recorded them (``record.plan``, of the member or of
    the ensemble it came from; None where neither has a request recorded)."""
    if isinstance(fits, Fit) or not isinstance(fits, Iterable):
        raise TypeError(f"fits must be a list of bernmf.Fit, got {type(fits).__name__}")
    fits = list(fits)
    if not fits:
        raise ValueError("fits is empty: give at least one bernmf.Fit")
    for i, one in enumerate(fits):
        if not isinstance(one, Fit):
            raise TypeError(f"fits[{i}] is a {type(one).__name__}, not a bernmf.Fit")

    def members(one: Fit, options: dict | None) -> list[tuple[Fit, dict | None]]:
        if one.record.plan is not None:
            options = one.record.plan.get("options", options)
        if not (unpack and one.members):
            return [(one, options)]
        return [pair for member in one.members for pair in members(member, options)]

    pairs = [pair for one in fits for pair in members(one, None)]
    return fits, [m for m, _ in pairs], [options for _, options in pairs]


def _training(fits: list[Fit], Y: Observed, mask) -> Observed:
    """The training data every fit was made on (of Y, every observed entry); ValueError
    naming the first fit that differs."""
    shape = Y.shape
    for i, one in enumerate(fits):
        if one.shape != shape:
            raise ValueError(
                f"fits[{i}] ({one.engine}, K={one.rank}) has shape {one.shape} but Y has "
                f"shape {shape}: stack fits of this Y only"
            )
    if mask is not None:
        data = Y.restricted(mask, warn_empty=False)
        source = "mask"
    else:
        known = [i for i, one in enumerate(fits) if one.observed is not None]
        if not known:
            raise ValueError(
                "no fit records its training entries (fits of bernmf.fit do): give mask="
            )
        data, source = fits[known[0]].observed, f"fits[{known[0]}]"
        if not np.array_equal(data.ones, Y.restricted(data.mask, warn_empty=False).ones):
            raise ValueError(f"{source} was fitted on other data than Y (its training entries)")
    for i, one in enumerate(fits):
        if one.observed is None:
            if mask is None:
                raise ValueError(
                    f"fits[{i}] ({one.engine}, K={one.rank}) does not record its training "
                    "entries: give mask= (the training mask of every fit)"
                )
            continue
        differ = int((one.observed.mask != data.mask).sum())
        if differ:
            raise ValueError(
                f"fits[{i}] ({one.engine}, K={one.rank}) was fitted on other training "
                f"entries than {source}: {differ} entries differ; stack fits of one split"
            )
        differ = int((one.observed.ones != data.ones).sum())
        if differ:
            raise ValueError(
                f"fits[{i}] ({one.engine}, K={one.rank}) was fitted on other data than "
                f"{source}: {differ} training entries differ"
            )
    return data


SEEDS = ("mean", "each")
"""The values of :func:`stack`'s ``seeds``."""


def _prior_key(prior) -> tuple | None:
    """A hashable key of a prior's values (None for none)."""
    return None if prior is None else tuple(np.asarray(v, float).tobytes() for v in prior)


def _settings(members: list[Fit]) -> np.ndarray:
    """The setting of each member, numbered in order of first appearance: members of one
    engine, rank and prior (differing in seed) share one; a fit with members of its own
    (kept whole by ``unpack=False``) is a setting of its own."""
    numbers: dict[tuple, int] = {}
    settings = []
    for m in members:
        key = (m.engine, int(m.rank), _prior_key(m.prior), id(m) if m.members else None)
        settings.append(numbers.setdefault(key, len(numbers)))
    return np.array(settings)


def _setting_weights(lpd: np.ndarray, settings: np.ndarray) -> np.ndarray:
    """Stacking weights of the settings' uniform mixtures, each split evenly between the
    setting's members: weights of shape (R,) for ``lpd`` of shape (n, R)."""
    count = np.bincount(settings)
    if count.size == settings.size:  # every member a setting of its own
        return stacking_weights(lpd)
    means = np.column_stack(
        [mixture_lpd(lpd[:, settings == g], np.full(n, 1.0 / n)) for g, n in enumerate(count)]
    )
    return stacking_weights(means)[settings] / count[settings]


def _refit_options(one: Fit, recorded: dict | None, given: Mapping | None) -> tuple:
    """(engine, options) of the refit of member ``one``: its recorded options (else the
    engine's defaults) with ``given[engine]`` over them, checked by the engine."""
    engine = get_engine(one.engine)
    return engine, engine.with_defaults({**(recorded or {}), **(given or {}).get(one.engine, {})})


def _check_refit_options(options, members: list[Fit], recorded: list[dict | None]) -> None:
    """The refits' ``options`` (:func:`stack`'s), before anything is fitted: a mapping of
    engine names of the stack to mappings, every member's options accepted by its engine
    (members of weight 0 too, whose weights are not known yet)."""
    if not isinstance(options, Mapping) or not all(
        isinstance(o, Mapping) for o in options.values()
    ):
        raise TypeError(
            "options must map engine names to dicts of options, e.g. {'mm': {'max_iter': "
            f"500}}}}, got {type(options).__name__} {options!r:.60}"
        )
    engines = sorted({m.engine for m in members} - {BASELINE})
    unknown = sorted(set(options) - set(engines))
    if unknown:
        raise ValueError(
            f"options name engine(s) {unknown} that no fit of the stack has; its engines: {engines}"
        )
    for one, options_of in zip(members, recorded, strict=True):
        if one.engine != BASELINE:
            _refit_options(one, options_of, options)


def _refitted(
    members: list[Fit],
    options: list[dict | None],
    weights: np.ndarray,
    data: Observed,
    given: Mapping[str, Mapping] | None = None,
) -> list[Fit]:
    """``members`` with each one of positive weight fitted again on ``data``: the same engine,
    rank, prior, seed and recorded options (else the engine's defaults), ``given[engine]``
    over them; a sampler's chain as a one-chain run of its seed. The members of one setting
    run in one call (:func:`bernmf.fitting.runner.fit_settings`: one compiled call for ``mm``)."""
    out = list(members)
    settings: dict[tuple, tuple] = {}
    for i, (one, weight) in enumerate(zip(members, weights, strict=True)):
        if weight <= 0:
            continue
        if one.engine == BASELINE:
            out[i] = _baseline(data)
            continue
        engine, chosen = _refit_options(one, options[i], given)
        if engine.seed_count is not None:
            chosen[engine.seed_count] = 1
        setting = json.dumps(chosen, sort_keys=True, default=repr)
        prior = engine.prior_for(one.prior, one.rank)  # a refit's request, checked as fit's
        key = (one.engine, one.rank, _prior_key(prior), setting)
        if engine.seed_count is not None:
            key += (i,)  # a chain of its own
        settings.setdefault(key, (engine, one.rank, prior, chosen, []))[-1].append(i)
    for engine, rank, prior, chosen, indices in settings.values():
        seeds = sorted({int(members[i].seed) for i in indices})
        fitted = fit_settings(engine, data, rank, [prior], seeds, chosen)
        by_seed = {seed: m.fit for seed, m in zip(seeds, fitted, strict=True)}
        for i in indices:
            out[i] = by_seed[int(members[i].seed)]
    return out


def _shown(members: list[Fit], weights: np.ndarray) -> int:
    """The member whose factors a stack shows: of largest weight among those of an engine
    whose factors are probabilities (not a logistic engine's natural parameters, not the
    baseline's column frequencies), else of largest weight (the first of equals)."""
    known = set(available())
    model = [m.engine in known and get_engine(m.engine).probabilities for m in members]
    if not any(model):
        return int(np.argmax(weights))
    return int(np.argmax(np.where(model, weights, -np.inf)))


def stack(
    fits,
    Y,
    *,
    validation,
    mask=None,
    baseline: bool = True,
    unpack: bool = True,
    seeds: str = "mean",
    refit: bool = False,
    options: Mapping[str, Mapping] | None = None,
) -> Fit:
    """Stack fits of any engines, ranks and priors on the validation entries.

    Parameters
    ----------
    fits : list of Fit
        Fits of Y made on the same training entries (of any engine, rank, prior or
        seed); an ensemble or a stack counts as its members (see ``unpack``).
    Y : array-like, DataFrame or scipy.sparse matrix of shape (M, N)
        The data the fits were made on; NaN is missing.
    validation : bool array of shape (M, N)
        Held-out entries (outside the training entries) on which the weights are
        fitted; the test entries must not be among them.
    mask : bool array of shape (M, N), optional
        The training entries of the fits. Default: those the fits record (every fit
        of :func:`bernmf.fit` does); needed for fits that do not (e.g. of
        :func:`bernmf.inference.mm.run_many`).
    baseline : bool, default True
        Add the smoothed column frequency (:func:`baseline`) as a member, with a weight
        of at least :data:`BASELINE_FLOOR`, so the mixture gives every entry a
        probability strictly inside (0, 1).
    unpack : bool, default True
        Stack the members of ensembles and stacks; False stacks each fit as given,
        an ensemble as its mixture: for example the mean of each setting's seeds
        (``bernmf.fit(..., restarts=R, combine="mean")``), which fits R times fewer
        weights to the validation entries. On animals' 637 validation entries the
        1000 seeds of a grid (with logsvd) overfit them; their 100 setting means less
        so (test perplexity 0.3961 ± 0.0011 against 0.3992 ± 0.0053 over 5 seed sets,
        ``bernmf reproduce stacking``).
    seeds : {"mean", "each"}, default "mean"
        ``"mean"``: the members of one setting (engine, rank and prior), which differ
        only in seed, share one weight, split evenly between them: the stack of the
        settings' uniform mixtures (as ``bernmf.fit(..., restarts=R, combine="mean")``
        makes them), with R times fewer weights to fit to the validation entries. In
        the stacking study (``bernmf reproduce stacking``, 5 seed sets) it was as good
        and more stable than a weight per seed: animals 0.3940 ± 0.0012 against
        0.3925 ± 0.0050 (637 validation entries, which 1000 seeds' weights overfit),
        paleo and lastfm equal to 1e-4, and its stacking 2.5-3 times faster.
        ``"each"``: a weight per member (named ``"stack"`` before 2026-11-29).
    refit : bool, default False
        Once the weights are fitted, fit every member of positive weight again on the
        training *and* validation entries (same engine, rank, prior, seed and the
        options :func:`bernmf.fit` recorded, else the engine's defaults; a sampler's
        chain as a one-chain run of its seed; the baseline on those entries too) and
        mix the refitted members with the same weights: every choice is made on the
        validation entries, then the predictor uses them as data, as a tuned model
        is refitted on all its data. The test entries are never used. Members of
        weight 0 are kept as they are (``probs`` skips them). Refused for a fit kept
        whole by ``unpack=False`` that has members of its own. In the stacking study
        (``bernmf reproduce stacking``, 5 seed sets) it moved the test perplexity of
        the setting means' stack from 0.3940 to 0.3756 (animals), 0.0852 to 0.0824
        (paleo) and 0.1352 to 0.1323 (lastfm).
    options : dict of engine name to dict, optional
        With ``refit``: engine options of the refits, over those the fits recorded,
        e.g. ``{"mm": {"max_iter": 500}}`` for fits that record none (of
        :func:`bernmf.tune.grid` or :func:`bernmf.inference.mm.run_many`).

    Returns
    -------
    Fit
        Engine ``"stack"``: ``probs`` is ``sum_r w_r members[r].probs``, computed on
        demand from the members (no M x N array per member), and
        :meth:`Fit.perplexity` scores it. Its ``mixture``
        (:class:`~bernmf.results.fit.Mixture`) holds the ``members`` (the stacked
        fits, then the baseline), their ``weights``, rule ``"stack"``, each member's
        ``validation_perplexity`` before any refit and ``stacking``
        (:class:`~bernmf.results.fit.Stacking`: the mixture's validation
        perplexity, the stacking's ``seconds``, ``seeds``, ``refit``, the refits'
        ``refit_seconds`` and each member's own seconds); :func:`members_table`
        lists them. A stack has no factors of its own: W, H, rank, prior, trace and
        seed are those of the member of largest weight among those whose factors are
        probabilities (the model's: not a logistic engine's, nor the baseline's; the
        member of largest weight when there is none),
        :attr:`~bernmf.results.fit.Stacking.shown`. ``timings`` add up the members'
        (and the refits'); ``observed`` is the training data, with ``refit`` the
        training and validation entries.

    Raises
    ------
    TypeError
        ``fits`` not a list of Fit.
    ValueError
        No fit, fits of another shape than Y or made on other training entries or
        data (named), no validation entries, or ones that overlap the training
        entries or select none, ``seeds`` not one of :data:`SEEDS`, ``refit`` with a
        fit of members kept whole, ``options`` without ``refit``, for an engine that
        no fit has, or that an engine refuses (for any member, of any weight); all
        before anything is computed.
    """
    if validation is None:
        raise ValueError(
            "validation is None: bernmf.stack fits its weights on held-out entries; give "
            "validation=, a bool mask of shape (M, N) outside the training entries"
        )
    given, members, recorded = _checked(fits, unpack, seeds, refit, options)
    observed = as_observed(Y, warn_empty=False)  # checked here once: the masks select from it
    data = _training(given, observed, mask)
    held_out = validation_entries(observed, data, validation)
    return _stacked(members, recorded, data, held_out, baseline, seeds, refit, options)


def stack_on(
    fits, data: Observed, held_out: Observed, *, refit: bool = False,
    options: Mapping[str, Mapping] | None = None,
) -> Fit:  # fmt: skip
    """:func:`stack` of fits made on ``data`` (the training entries, checked where Y
    entered) and weighted on ``held_out``, with the default ``baseline``, ``unpack`` and
    ``seeds``: the stack of the search and of :func:`bernmf.tune.grid`, which hold their
    data checked already."""
    _, members, recorded = _checked(fits, True, "mean", refit, options)
    return _stacked(members, recorded, data, held_out, True, "mean", refit, options)


def _checked(fits, unpack: bool, seeds: str, refit: bool, options) -> tuple:
    """:func:`_unpacked` of ``fits``, once :func:`stack`'s other arguments are checked."""
    if seeds not in SEEDS:
        raise ValueError(f"seeds must be 'mean' or 'each', got {seeds!r}")
    given, members, recorded = _unpacked(fits, unpack)
    whole = [i for i, one in enumerate(members) if one.members]
    if options is not None and not refit:
        raise ValueError("options are the refits' engine options: give refit=True with them")
    if refit and whole:
        raise ValueError(
            f"refit=True refits single fits, but member {whole[0]} ({members[whole[0]].engine}, "
            f"K={members[whole[0]].rank}) has members of its own (unpack=False): stack with "
            "unpack=True (seeds='mean' gives each setting one weight)"
        )
    if options is not None:
        _check_refit_options(options, members, recorded)
    return given, members, recorded


@one_blas_thread  # the weights' optimization would wake a spinning BLAS thread per core
def _stacked(
    members: list[Fit], recorded: list[dict | None], data: Observed, held_out: Observed,
    baseline: bool, seeds: str, refit: bool, options,
) -> Fit:  # fmt: skip
    """The stack of ``members`` (each with its ``recorded`` options) fitted on ``data``,
    weighted on ``held_out`` and with ``refit`` fitted again on both: :func:`stack`'s work."""
    begin = time.perf_counter()
    if baseline:
        members.append(_baseline(data))
        recorded.append(None)
    rows, columns, y = held_out.entries()
    lpd = np.column_stack([entries_lpd(y, m.probs_at(rows, columns)) for m in members])
    settings = _settings(members) if seeds == "mean" else np.arange(len(members))
    weights = _setting_weights(lpd, settings)
    if baseline:  # never 0: the stack then gives every entry a probability inside (0, 1)
        weights = (1 - BASELINE_FLOOR) * weights
        weights[-1] += BASELINE_FLOOR
    with np.errstate(divide="ignore"):
        mixture = -float(np.mean(mixture_lpd(lpd, weights)))
    seconds = time.perf_counter() - begin
    used, refit_seconds = members, None
    if refit:
        begin = time.perf_counter()
        data = data.union(held_out)
        used = _refitted(members, recorded, weights, data, options)
        refit_seconds = time.perf_counter() - begin
    stacking = Stacking(
        mixture, seconds, seeds, refit, refit_seconds,
        tuple(float(m.timings.get("run", np.nan)) for m in members), _shown(members, weights),
    )  # fmt: skip
    parts = Mixture(
        tuple(used), tuple(weights.tolist()), STACK,
        validation_perplexity=tuple((-lpd.mean(axis=0)).tolist()), stacking=stacking,
    )  # fmt: skip
    top = used[parts.chosen]
    costs = members + [new for old, new in zip(members, used, strict=True) if new is not old]
    keys = dict.fromkeys(k for m in costs for k in m.timings)
    timings = {k: float(sum(m.timings.get(k, 0.0) for m in costs)) for k in keys}
    return Fit(
        engine=STACK,
        rank=top.rank,
        prior=top.prior,
        W=top.W,
        H=top.H,
        trace=top.trace,
        converged=all(m.converged for m in used),
        record=Record(top.seed, timings, None, data, data.row_labels, data.col_labels),
        mixture=parts,
    )


def members_table(fit: Fit) -> pd.DataFrame | None:
    """The members of a :func:`stack` or an ensemble: one row each
    (:meth:`~bernmf.results.fit.Mixture.table`); None for a single fit.

    A stack's columns are :data:`TABLE_COLUMNS`: ``prior`` as
    :func:`bernmf.models.spec.describe_prior` writes it, ``weight`` the stacking weight,
    ``validation_perplexity`` the member's (inf where it gives a validation entry
    probability 0), ``seconds`` its run time. An ensemble's: seed, objective, n_iter,
    converged, weight, mode and, with validation entries, validation_perplexity.
    """
    if fit.mixture is None:
        return None
    import pandas as pd  # on first use: it loads in 0.5 s

    stacked = fit.mixture.stacking is not None
    return pd.DataFrame(fit.mixture.table(), columns=list(TABLE_COLUMNS) if stacked else None)
