"""The comparison as users read it: every engine, tuned on validation, scored on test.

:func:`run` fits each engine on each dataset's training entries (the paper's split),
chooses its rank (and, for ``mm``, its Beta prior) on the validation entries only,
then scores several seeds on the test entries, at that tuned setting and at one rank
shared by all engines; ensembles (:func:`bernmf.fit` with ``restarts``) are rows of
their own, and so are the stacks of the fits already made (``"stacked: all engines"``,
``"stacked: mm grid"``: :func:`bernmf.stack` on the validation entries, per seed).
:func:`write` (:mod:`bernmf.studies.report.page`) turns the result into a tidy CSV, a Pareto
plot of test perplexity against seconds and a self-contained HTML page (``bernmf report``);
the ``quick`` budget is :mod:`bernmf.studies.report.budget`.
"""

from __future__ import annotations

import os
import platform
import time
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from bernmf import tune
from bernmf.data.observed import as_observed, is_sparse
from bernmf.data.sparse import checked_coo
from bernmf.data.split import paper_split
from bernmf.fitting import runner
from bernmf.fitting.ensemble import MODES_WARNING
from bernmf.fitting.plan import check_arguments, plan
from bernmf.fitting.stack import members_table
from bernmf.inference import available, get_engine
from bernmf.models import Prior
from bernmf.posterior.draws import diagnostics
from bernmf.results.loading import versions
from bernmf.studies.compare import (
    STACKED_ALL,
    STACKED_MM,
    _nonempty_list,
    compare,
    describe_prior,
    fit_row,
    lightened,
    stacked_rows,
)
from bernmf.studies.report.budget import estimate, floor, within_budget
from bernmf.studies.report.page import findings, leaderboard, write

__all__ = [
    "QUICK_OPTIONS", "Report", "describe_data", "environment", "estimate", "findings", "floor",
    "leaderboard", "run", "write",
]  # fmt: skip

COLUMNS = (
    "dataset", "engine", "setting", "rank", "prior", "seed", "perplexity", "seconds",
    "compile_seconds", "iterations", "ess_per_second",
)  # fmt: skip
"""The columns of :attr:`Report.fits`, in order."""

QUICK_OPTIONS = {
    "mm": {"max_iter": 200},
    "em": {"max_iter": 200},
    "vb": {"max_iter": 100},
    "logsvd": {"max_iter": 200},
    "logpca": {"max_iter": 200, "m_grid": (2.0, 4.0, 8.0)},
    "gibbs": {"num_warmup": 50, "num_samples": 50, "progress": False},
    "nuts": {"num_warmup": 50, "num_samples": 50, "progress": False},
    "svi": {"steps": 300, "num_draws": 100, "progress": False},
}
"""Engine options of ``quick=True``: few iterations or draws, so a report takes about a minute."""

QUIET = {"gibbs": {"progress": False}, "nuts": {"progress": False}, "svi": {"progress": False}}


@dataclass(frozen=True)
class Report:
    """The result of :func:`run`.

    Attributes
    ----------
    fits : DataFrame
        One row per test fit, the columns :data:`COLUMNS`: ``setting`` is
        ``"tuned"`` (rank, and mm's prior, chosen on validation), ``"shared K=k"``,
        ``"ensemble"`` (R restarts combined, at the tuned setting) or ``"stacked"``
        (engine ``"stacked: all engines"``: every fit of that seed and the tuning fits;
        ``"stacked: mm grid"``: the mm ones; rank 0, prior ``"mixed"``, seconds the
        sum of the members');
        ``perplexity`` is on the test entries (nats per entry), ``seconds`` the run
        time without compilation, ``iterations`` the iterations or draws, and
        ``ess_per_second`` the median bulk ESS of WH per second (samplers; NaN else).
    environment : dict
        :func:`environment` at the time of the run.
    data : DataFrame
        One row per dataset (:func:`describe_data`): ``dataset``, ``rows``, ``columns``,
        ``missing`` (fraction of entries), ``density`` (fraction of ones among the
        observed entries).
    chosen : DataFrame
        One row per dataset and engine: the ``rank`` and ``prior`` chosen on the
        validation entries, the ``grid`` of ranks chosen from, and ``edge``: "top" or
        "bottom" when the chosen rank is the largest or smallest of a grid of several
        (a larger or smaller one may do better), else "".
    seconds : float
        The run's wall-clock time.
    left_out : DataFrame
        ``dataset``, ``engine``, ``estimate`` (seconds) of the engines that ``quick``
        left out for being over its budget (:data:`bernmf.studies.report.budget.QUICK_BUDGET`).
    weights : DataFrame or None
        The stacking weight per ``dataset``, ``seed``, ``stack`` (the row's engine),
        member ``engine`` and ``rank`` (summed over the member fits of that engine and
        rank) of the ``"stacked"`` rows.
    """

    fits: pd.DataFrame
    environment: dict
    data: pd.DataFrame = field(default_factory=pd.DataFrame)
    chosen: pd.DataFrame = field(default_factory=pd.DataFrame)
    seconds: float = float("nan")
    left_out: pd.DataFrame = field(default_factory=pd.DataFrame)
    weights: pd.DataFrame | None = None


def describe_data(name: str, Y) -> dict:
    """``dataset``, ``rows``, ``columns``, ``missing`` fraction and ``density`` of ones."""
    values = checked_coo(Y, name).toarray() if is_sparse(Y) else np.asarray(Y, dtype=float)
    observed = ~np.isnan(values)
    M, N = values.shape
    return {
        "dataset": name,
        "rows": M,
        "columns": N,
        "missing": float(1 - observed.mean()),
        "density": float(np.nansum(values) / max(observed.sum(), 1)),
    }


def run(
    data: Mapping[str, object],
    engines: Iterable[str] | None = None,
    *,
    ranks: Iterable[int] = (2, 4, 8),
    shared_rank: int = 4,
    priors: Iterable[float] = (1.0, 1.5, 2.0),
    seeds: Iterable[int] = range(3),
    ensembles: Iterable[str] = ("mm",),
    restarts: int = 4,
    combine: str = "stack",
    quick: bool = False,
    progress: bool = True,
) -> Report:
    """Tune every engine on validation entries, then score seeds on test entries.

    Parameters
    ----------
    data : dict of name to array-like of shape (M, N)
        The datasets (binary, NaN missing); each gets the paper's split
        (:func:`bernmf.data.split.paper_split`: 70% train, 15% validation, 15% test).
    engines : list of str, optional
        Default: every engine of :func:`bernmf.engines`.
    ranks : list of int, default (2, 4, 8)
        The ranks each engine chooses from on validation (``quick``: the shared rank).
    shared_rank : int, default 4
        The rank at which every engine is also scored, with its default prior.
    priors : list of float, default (1, 1.5, 2)
        mm's alpha and beta grid (every pair; ``quick``: 1.2 only).
    seeds : list of int, default range(3)
        Seeds of the test fits of each setting.
    ensembles : list of str, default ("mm",)
        Engines (among ``engines``) also scored as an ensemble of ``restarts``
        members at their tuned setting, combined by ``combine`` with the
        validation entries.
    quick : bool, default False
        :data:`QUICK_OPTIONS`, one rank, two seeds, two restarts: about a minute on animals.
        Each engine is first timed by a probe (:func:`bernmf.studies.report.budget.estimate`);
        ``mm`` and the cheapest others within
        :data:`bernmf.studies.report.budget.QUICK_BUDGET` are kept, the others left out
        (``left_out``), and said so.
    progress : bool, default True
        Progress bars of the tuning and test fits.

    Returns
    -------
    Report

    Raises
    ------
    TypeError, ValueError
        An unknown engine, an ensemble engine not compared, empty lists, a bad rank.
    """
    engines = _nonempty_list("engines", available() if engines is None else engines, "['mm']")
    ranks = _nonempty_list("ranks", ranks, "[2, 4, 8]")
    seeds = _nonempty_list("seeds", seeds, "range(3)")
    ensembles = [e for e in ensembles if e in engines] if ensembles else []
    if not data:
        raise ValueError("data is empty; give at least one dataset")
    for name in engines:
        get_engine(name)  # ValueError listing the known engines
    ranks = [shared_rank] if quick else sorted(set(ranks))
    priors = [1.2] if quick else list(priors)
    seeds = list(seeds)[:2] if quick else list(seeds)
    restarts = 2 if quick else restarts
    if ensembles and (isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 2):
        raise ValueError(f"restarts must be an integer >= 2 for ensembles, got {restarts!r}")
    options = {e: dict((QUICK_OPTIONS if quick else QUIET).get(e, {})) for e in engines}
    for engine in engines:  # every rank, seed and option checked before the first fit
        for rank in {*ranks, shared_rank}:
            for seed in seeds:
                for shape in {np.shape(Y) for Y in data.values()}:
                    check_arguments(engine, rank, None, seed, options[engine], shape)
    tables, chosen, weights, begin = [], [], [], time.perf_counter()
    left_out = []
    for name, Y in data.items():
        split = paper_split(np.shape(Y))
        common = {"train": split.train, "test": split.test, "progress": progress, "keep": True}
        made = {}  # every fit of this dataset by id: (seed, or None for all seeds, fit)
        kept = engines
        if quick:
            kept, dropped = within_budget(
                name, Y, split, engines, shared_rank, seeds, ensembles, restarts, options, progress
            )  # fmt: skip
            left_out += dropped
        for engine in kept:
            rank, prior, tuning = _tuned(Y, split, engine, ranks, priors, options[engine], progress)
            made.update({id(f): (None, f) for f in tuning})
            edge = "" if len(ranks) < 2 else {max(ranks): "top", min(ranks): "bottom"}.get(rank, "")
            grid = ",".join(str(r) for r in ranks)
            chosen.append((name, engine, rank, describe_prior(prior), grid, edge))
            measured = compare(
                Y, [engine], [rank], seeds, priors={engine: prior},
                options={engine: options[engine]}, measure=_ess_per_second, **common,
            )  # fmt: skip
            tables.append(measured.fits.assign(dataset=name, setting="tuned"))
            shared = measured
            if rank != shared_rank or prior is not None:
                shared = compare(
                    Y, [engine], [shared_rank], seeds, options={engine: options[engine]},
                    measure=_ess_per_second, **common,
                )  # fmt: skip
            tables.append(shared.fits.assign(dataset=name, setting=f"shared K={shared_rank}"))
            for comparison in (measured, shared):
                pairs = zip(comparison.fits["seed"], comparison.results, strict=True)
                made.update({id(f): (int(s), f) for s, f in pairs})
            if engine in ensembles:
                rows = _ensemble_rows(
                    Y, split, engine, rank, prior, seeds, restarts, combine, options[engine]
                )
                made.update({id(f): (s, f) for s, (_, f) in zip(seeds, rows, strict=True)})
                tables.append(
                    pd.DataFrame([r for r, _ in rows]).assign(dataset=name, setting="ensemble")
                )
        stacked, used = _stacked(Y, split, list(made.values()), seeds)
        tables += [table.assign(dataset=name) for table in stacked]
        weights += [table.assign(dataset=name) for table in used]
    fits = pd.concat(tables, ignore_index=True)
    if "ess_per_second" not in fits:
        fits["ess_per_second"] = np.nan
    return Report(
        fits=fits[list(COLUMNS)],
        environment=environment(),
        data=pd.DataFrame([describe_data(name, Y) for name, Y in data.items()]),
        chosen=pd.DataFrame(chosen, columns=["dataset", "engine", "rank", "prior", "grid", "edge"]),
        seconds=time.perf_counter() - begin,
        left_out=pd.DataFrame(left_out, columns=["dataset", "engine", "estimate"]),
        weights=pd.concat(weights, ignore_index=True) if weights else None,
    )


def _stacked(Y, split, made, seeds) -> tuple[list[pd.DataFrame], list[pd.DataFrame]]:
    """Rows ``"stacked: all engines"`` and ``"stacked: mm grid"`` per seed, and their weights.

    The members of seed s are the fits already made with seed s and the tuning fits
    (the mm grid, the other engines' ranks, seed 0); weights on validation entries.
    """
    test = as_observed(Y, split.test, warn_empty=False)
    rows, weights = [], []
    for seed in seeds:
        chosen = [f for s, f in made if s is None or s == seed]
        groups = {STACKED_ALL: chosen, STACKED_MM: [f for f in chosen if f.engine == "mm"]}
        for row, result in stacked_rows(Y, groups, split.train, split.validation, test, seed):
            rows.append(pd.DataFrame([row]).assign(setting="stacked"))
            table = members_table(result).groupby(["engine", "rank"], as_index=False)["weight"]
            weights.append(table.sum().assign(seed=seed, stack=row["engine"]))
    return rows, weights


def _tuned(Y, split, engine, ranks, priors, options, progress) -> tuple:
    """The rank (and mm's prior) of lowest validation perplexity, from seed 0's fits,
    and those fits (without draws)."""
    if engine == "mm":
        grid = tune.grid(
            Y, ranks, priors, priors, mask=split.train, validation=split.validation,
            progress=progress, **options,
        )  # fmt: skip
        best, fits = grid.best, [m.fit for m in grid.members]
        return int(best["rank"]), Prior(best["alpha"], best["beta"]), fits
    if len(ranks) == 1:
        return ranks[0], None, []
    comparison = compare(
        Y, [engine], ranks, [0], train=split.train, test=split.validation,
        options={engine: options}, progress=progress, keep=True,
    )  # fmt: skip
    table = comparison.summary
    return int(table.loc[table["perplexity"].idxmin(), "rank"]), None, list(comparison.results)


def _ess_per_second(result) -> dict:
    """Median bulk ESS of WH per second of run time, for fits with posterior draws."""
    if not result.draws:
        return {"ess_per_second": np.nan}
    table = diagnostics(result, warn=False, ess_entries=200).table
    return {"ess_per_second": float(table.loc["WH", "ess_bulk_per_second"])}


def _ensemble_rows(Y, split, engine, rank, prior, seeds, restarts, combine, options) -> list:
    """The row and the fit (without draws) of the ensemble of ``restarts`` members from
    each seed, combined on the validation entries and scored on the test ones: every
    member fitted once (:func:`bernmf.fitting.runner.runs`)."""
    request = plan(
        Y, engine, rank, mask=split.train, prior=prior, seed=seeds[0], restarts=restarts,
        combine=combine, validation=split.validation, options=options,
    )  # fmt: skip
    test = as_observed(Y, split.test, warn_empty=False)
    with warnings.catch_warnings():  # distinct modes are why the report has ensembles
        warnings.filterwarnings("ignore", MODES_WARNING, UserWarning)
        fitted = runner.runs(request, seeds, test)
    rows = []
    for seed, member in zip(seeds, fitted, strict=True):
        row = fit_row(f"{engine} ensemble", rank, seed, member) | {"ess_per_second": np.nan}
        rows.append((row, lightened(member.fit)))
    return rows


def environment() -> dict:
    """Versions, CPU model and count, and the thread settings the timings ran under."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if "model name" in line)
    except (OSError, StopIteration):
        pass
    threads = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "XLA_FLAGS")
    return {
        **versions(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        **{name: os.environ.get(name, "unset") for name in threads},
    }
