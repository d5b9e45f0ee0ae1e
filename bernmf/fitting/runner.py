"""The one runner of settings x seeds: members fitted, scored on validation entries.

:func:`fit_settings` fits every (setting, seed) pair of one engine on the training entries
and scores each member on the validation entries through :meth:`bernmf.Fit.probs_at`
(:func:`bernmf.fitting.ensemble.validation_lpd`: no M x N array per fit, NaN never scored), so
every runner's validation score equals ``fit.perplexity(Y, validation)``. An engine
that takes its prior as data (``mm``, ``em``: :attr:`Engine.run_settings`) fits all
pairs of a rank in one compiled call; a sampler's members are its chains. :func:`run`
runs a :class:`bernmf.fitting.plan.Plan`: :func:`bernmf.fit` is
``run(plan(*as_training(Y, mask, validation), ...))``, and ``restarts`` and
:func:`bernmf.tune.grid` go through :func:`fit_settings`;
:func:`runs` gives a plan's fit from each of several seeds, sharing their members
(the report's ensembles); :func:`planned` makes those fits the members of a grid (a study's
``as_fit`` grids: :func:`bernmf.compare`).

Every fit runs with BLAS limited to one thread (:func:`one_blas_thread`).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from bernmf._progress import working_on
from bernmf._warnings import warn
from bernmf.data.arguments import check_seed
from bernmf.data.observed import Observed
from bernmf.fitting.ensemble import combine_members, validation_lpd
from bernmf.fitting.plan import Plan, plan
from bernmf.inference import Engine
from bernmf.models.spec import Prior, ZeroProbabilityWarning, warn_zero_probability
from bernmf.posterior.lpd import mixture_lpd
from bernmf.results.fit import BLOCK_ENTRIES, Fit


class Scored(NamedTuple):
    """One fit of a settings x seeds run, with its setting and validation score.

    Attributes
    ----------
    rank : int
    prior : Prior or None
        The setting's prior, broadcast to (rank,).
    fit : Fit
    validation_perplexity : float or None
        ``fit.perplexity`` on the validation entries (None without them).
    lpd : ndarray of shape (validation entries,), optional
        The log score of each validation entry (row-major), whose mean is minus
        ``validation_perplexity``.
    cpu_seconds : float
        The CPU seconds of its fit, where a sweep measured them (else NaN).
    """

    rank: int
    prior: Prior | None
    fit: Fit
    validation_perplexity: float | None
    lpd: np.ndarray | None = None
    cpu_seconds: float = float("nan")


def mean_perplexity(members: Sequence[Scored]) -> float:
    """Validation perplexity of the uniform mixture of ``members`` (from their ``lpd``)."""
    lpd = np.column_stack([m.lpd for m in members])
    return float(-np.mean(mixture_lpd(lpd, np.full(len(members), 1 / len(members)))))


class _OneBlasThread:
    """BLAS limited to one thread while any fit runs (a ``with`` block): the first of
    concurrent or nested fits sets the limit, the last restores the limit before it, so that
    fits in several threads neither lift it under one another nor leave it behind.

    OpenBLAS built on pthreads (numpy's and scipy's wheels) has one limit for the process,
    and threadpoolctl 3.8 lets only the thread that set it first change it; the first and
    the last fit may run in different threads, so each change is made with no thread
    holding it before or after (``OpenBLASController.clear_controlling_thread``).
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._fits = 0
        self._limiter = None

    def __enter__(self) -> None:
        with self._lock:
            if self._fits == 0:
                _release_openblas()
                self._limiter = _blas_controller().limit(limits=1, user_api="blas")
                _release_openblas()
            self._fits += 1

    def __exit__(self, *exception) -> None:
        with self._lock:
            self._fits -= 1
            if self._fits == 0:
                _release_openblas()
                self._limiter.restore_original_limits()
                _release_openblas()


@functools.cache
def _blas_controller():
    """threadpoolctl's controller of the BLAS libraries loaded, made once (by the first fit):
    finding them takes about 1 ms, a tenth of a small fit, a limit through it 0.01 ms.
    scipy.linalg is loaded first, so that its OpenBLAS, which JAX's LAPACK calls on the CPU
    use, is among them."""
    import scipy.linalg  # noqa: F401
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _release_openblas() -> None:
    """No thread holds OpenBLAS's limit in threadpoolctl (a threadpoolctl without the rule:
    nothing to do)."""
    from threadpoolctl import OpenBLASController

    release = getattr(OpenBLASController, "clear_controlling_thread", None)
    if release is not None:
        release(force=True)


_ONE_BLAS_THREAD = _OneBlasThread()


def one_blas_thread(function: Callable) -> Callable:
    """``function`` run with BLAS limited to one thread (threadpoolctl), the limit before
    restored once no fit runs.

    A fit's LAPACK calls (JAX's ``eigh`` and ``svd`` on CPU call scipy's OpenBLAS; numpy's
    and scipy's own) would otherwise wake a BLAS thread per core, which spin while they
    wait for work: on a loaded machine they burn CPU that the fit's own thread and XLA's
    threads need (``benchmarks/blas_threads.py``). The limit holds for the whole process
    while any fit runs.
    """

    @functools.wraps(function)
    def pinned(*args, **kwargs):
        with _ONE_BLAS_THREAD:
            return function(*args, **kwargs)

    return pinned


@one_blas_thread
def fit_settings(
    engine: Engine,
    data: Observed,
    rank: int,
    priors: Sequence[Prior | None],
    seeds: Sequence[int],
    options: dict,
    held_out: Observed | None = None,
    **batching,
) -> list[Scored]:
    """Every (prior, seed) pair of one rank fitted, priors outermost, and scored.

    Parameters
    ----------
    engine : Engine
    data : Observed
        The training entries.
    rank : int
    priors : sequence of Prior or None
        The settings, each checked and broadcast to (rank,) by :meth:`Engine.prior_for`
        (as :func:`bernmf.fitting.plan.plan` does): not checked again here.
    seeds : sequence of int
        The same seeds for every prior, checked (a sampler's: consecutive, one per
        chain of ``options``: :meth:`bernmf.fitting.plan.Plan.at`).
    options : dict
        Every option of the engine (:meth:`Engine.with_defaults`).
    held_out : Observed, optional
        The validation entries that score every member.
    **batching
        For an engine with :attr:`Engine.run_settings`: ``batch_size``, ``workers``,
        ``progress``, ``label``, ``stream`` (:func:`bernmf.inference.mm.run_many`).

    Returns
    -------
    list of Scored
        ``len(priors) * len(seeds)`` members.
    """
    pairs = [(p, int(s)) for p in priors for s in seeds]
    if engine.run_settings is not None:
        fits = engine.run_settings(
            data, rank, [p for p, _ in pairs], [s for _, s in pairs], **options, **batching
        )
    elif engine.run_members is not None:
        seeds = [int(s) for s in seeds]
        fits = [f for p in priors for f in engine.run_members(data, rank, p, seeds, **options)]
    else:
        fits = [engine.run(data, rank, p, s, None, **options) for p, s in pairs]
    if held_out is None:
        return [Scored(rank, prior, fit, None) for (prior, _), fit in zip(pairs, fits, strict=True)]
    lpd = validation_lpd(fits, held_out)
    scores = (-lpd.mean(axis=0)).tolist()
    return [
        Scored(rank, prior, fit, score, lpd[:, i])
        for i, ((prior, _), fit, score) in enumerate(zip(pairs, fits, scores, strict=True))
    ]


def run(request: Plan) -> Fit:
    """The :class:`Fit` of ``request``: one run, or its members combined; with its record.

    Warns (:func:`warn_certain`) when the fit gives P(Y=1) exactly 0 or 1 at an entry
    outside the training mask.

    Returns
    -------
    Fit
        As :func:`bernmf.fit` documents, its record from :meth:`Plan.recorded`.
    """
    result = _fitted(request)
    warn_certain(result, request.data)
    return result


@one_blas_thread
def _fitted(request: Plan) -> Fit:
    """:func:`run`'s fit, before its check."""
    engine, data = request.engine, request.data
    count = len(request.seeds)
    working_on(f"{engine.name} K={request.rank}" + (f", {count} restarts" if count > 1 else ""))
    if not request.ensemble:
        seed = request.seeds[0]
        result = engine.run(
            data, request.rank, request.prior, seed, request.init, **request.options
        )
    else:
        fitted = fit_settings(
            engine, data, request.rank, [request.prior], request.seeds, request.options
        )
        result = _combined([m.fit for m in fitted], request)
    return _finished(result, request)


def runs(request: Plan, seeds: Sequence[int], scored: Observed, warn: bool = True) -> list[Scored]:
    """:func:`run` of ``request`` from each seed of ``seeds``, scored on ``scored``.

    A fit that gives a scored entry's outcome probability 0 (its score inf) warns
    (:func:`scored_lpd`; ``warn=False``: not); its P(Y=1) of exactly 0 or 1 elsewhere does
    not (:func:`warn_certain`): the scores say what matters.

    The fit of seed s is that of ``request`` with its members' seeds starting at s
    (``s, ..., s + R - 1`` for R restarts): every member of every seed is fitted once, in
    one :func:`fit_settings` call (one compiled call for mm and em), and the ensembles share
    the members they have in common. A sampler's fit that is several chains without
    being an ensemble (its members would be chains of one run) is :func:`run` per seed.

    Parameters
    ----------
    request : Plan
        Its ``seeds[0]`` is ignored; its number of seeds is R.
    seeds : sequence of int
        Each checked as ``bernmf.fit``'s ``seed`` with R members.
    scored : Observed
        The entries that score each fit (e.g. test entries): ``fit.perplexity`` on
        them, through :meth:`Fit.probs_at` (no M x N array per fit).

    Returns
    -------
    list of Scored
        One per seed, in order: the fit as :func:`run` gives it, and its score.
    """
    count = len(request.seeds)
    chains = request.engine.seed_count is not None
    for seed in seeds:
        check_seed(seed, max(count, request.options[request.engine.seed_count] if chains else 1))
    at = [request.at(range(s, s + count)) for s in seeds]
    if chains and not request.ensemble:
        fits = [_fitted(one) for one in at]
    else:
        shared = request.at(sorted({s for one in at for s in one.seeds}))
        working_on(f"{request.engine.name} K={request.rank}, {len(shared.seeds)} fits")
        made = fit_settings(
            request.engine, request.data, request.rank, [request.prior], shared.seeds,
            shared.options,
        )  # fmt: skip
        by_seed = {seed: m.fit for seed, m in zip(shared.seeds, made, strict=True)}
        fits = []
        for one in at:
            group = [by_seed[s] for s in one.seeds]
            result = _combined(group, one) if one.ensemble else group[0]
            fits.append(_finished(result, one))
    lpd = scored_lpd(fits, scored, seeds if warn else None)
    scores = -lpd.mean(axis=0)
    return [
        Scored(request.rank, request.prior, fit, float(score), lpd[:, i])
        for i, (fit, score) in enumerate(zip(fits, scores, strict=True))
    ]


def scored_lpd(fits: Sequence[Fit], scored: Observed, seeds: Sequence[int] | None) -> np.ndarray:
    """``log P(Y=y)`` of each fit at the ``scored`` entries, shape (n, fits)
    (:func:`bernmf.fitting.ensemble.validation_lpd`); with ``seeds``, a fit that gives one
    of them probability 0 warns (:func:`~bernmf.models.spec.warn_zero_probability`), named
    by its engine, rank and seed."""
    lpd = validation_lpd(fits, scored)
    for seed, result, terms in zip(seeds, fits, lpd.T, strict=True) if seeds is not None else ():
        what = f"perplexity of {result.engine} K={result.rank} seed {seed}"
        zeros = int(np.isneginf(terms).sum())
        warn_zero_probability(zeros, terms.size, what, result.engine, result.prior)
    return lpd


def planned(held_out: Observed | None, ensemble: Mapping) -> Callable[..., list[Scored]]:
    """A fitter for :func:`bernmf.fitting.grids.fit_grids` whose member of seed s is the fit
    ``bernmf.fit(Y, engine, rank, mask=mask, prior=..., seed=s, **ensemble, **options)``
    makes: :func:`runs` of its :func:`bernmf.fitting.plan.plan` per prior, priors outermost.

    Parameters
    ----------
    held_out : Observed or None
        The validation entries an ensemble of ``combine="stack"`` is weighted on (None:
        none).
    ensemble : mapping
        ``restarts`` and ``combine``, as :func:`bernmf.fit` takes them ({}: a single fit).

    The members are scored on the fitter's held-out entries; a score of inf warns only
    without ``held_out`` (the fitter's held-out entries are then the ones reported; with
    it, the caller scores the test entries and says so).
    """

    def fitter(engine, data, rank, priors, seeds, options, scored, **batching):
        """As :func:`fit_settings` is called; ``data`` is the training entries."""
        made = []
        for prior in priors:
            request = plan(
                data, held_out if ensemble else None, engine.name, rank, prior=prior,
                seed=seeds[0], **ensemble, options=options,
            )  # fmt: skip
            made += runs(request, seeds, scored, warn=held_out is None)
        return made

    return fitter


def _combined(fits: list[Fit], request: Plan) -> Fit:
    """The members of ``request`` combined (:func:`bernmf.fitting.ensemble.combine_members`)."""
    return combine_members(
        fits, request.combine, request.data, request.held_out, score=request.engine.score
    )


def _finished(result: Fit, request: Plan) -> Fit:
    """``result`` with the record of ``request`` (:meth:`Plan.recorded`)."""
    return request.recorded(result)


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
        fact = (
            f"{result.engine}: P(Y=1) is exactly 0 or 1 at {certain} of {int((~data.mask).sum())} "
            "entries outside the training mask, where the other outcome would score inf"
        )
        warn(ZeroProbabilityWarning.of(fact, result.engine, result.prior))
