"""The comparison as users read it: every engine, tuned on validation, scored on test.

:func:`run` fits each engine on each dataset's training entries (the paper's split),
chooses its rank (and, for ``mm``, its Beta prior) on the validation entries only,
then scores several seeds on the test entries, at that tuned setting and at one rank
shared by all engines; ensembles (:func:`bernmf.fit` with ``restarts``) are rows of
their own, and so are the stacks of the fits already made (``"stacked: all engines"``,
``"stacked: mm grid"``: :func:`bernmf.stack` on the validation entries, per seed).
:func:`write` turns the result into a tidy CSV, a Pareto plot of test perplexity
against seconds and a self-contained HTML page (``bernmf report``).
"""

from __future__ import annotations

import base64
import html
import os
import platform
import time
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bernmf import tune
from bernmf._progress import say
from bernmf.api import fit
from bernmf.comparison import (
    STACKED_ALL,
    STACKED_MM,
    _nonempty_list,
    compare,
    describe_prior,
    lightened,
    stacked_rows,
    summarize,
)
from bernmf.data import as_observed
from bernmf.ensemble import MODES_WARNING
from bernmf.inference import available, get_engine
from bernmf.io import versions
from bernmf.models import Prior
from bernmf.plan import check_arguments
from bernmf.posterior import diagnostics
from bernmf.split import paper_split
from bernmf.stacked import members_table

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

QUICK_BUDGET = 120.0
"""Seconds ``quick=True`` aims at per dataset: ``mm``, then the other engines cheapest
first while their estimates (:func:`estimate`) add up to at most this; the others are
left out, and said so."""

PROBES = {
    "gibbs": ({"num_warmup": 2, "num_samples": 2}, 4, ("num_warmup", "num_samples")),
    "nuts": ({"num_warmup": 2, "num_samples": 2}, 4, ("num_warmup", "num_samples")),
    "svi": ({"steps": 2, "num_draws": 2}, 2, ("steps",)),
}
"""Per engine: the options of a probe fit, its iterations (or draws), and the options whose
sum is a full fit's. The other engines probe with a tolerance that stops them after one
iteration (``tol`` is no part of their compiled program, so the fits that follow reuse the
probe's) and count ``max_iter``."""
STOP_AT_ONCE = ({"tol": 1e300}, None, ("max_iter",))

FLOPS = 1e10
"""Floating-point operations per second that no machine here beats, for :func:`floor`."""


def floor(engine: str, shape: tuple[int, int], rank: int, options: dict, fits: int) -> float:
    """Seconds that ``fits`` fits of ``engine`` cannot take less than, from their operations.

    Per iteration (or draw): ``logpca`` an N x N symmetric eigensolve (N^3), for each
    ``m_grid`` candidate and the refit; ``logsvd`` an SVD (M N min(M, N)); ``nuts``
    gradients of 10 operations per entry and component, a quarter of
    ``2**max_tree_depth`` of them per draw (an assumption, not a bound: short warmups
    leave the step size small and the trees deep); the others a pass over the entries
    per component (M N K). At :data:`FLOPS`, so that an engine whose floor is over
    budget is left out without probing it.
    """
    M, N = shape
    defaults = {**get_engine(engine).options, **options}
    _, _, full = PROBES.get(engine, STOP_AT_ONCE)
    iterations = sum(float(defaults.get(key, 0) or 0) for key in full)
    per_iteration = {
        "logpca": float(N) ** 3 * (len(defaults.get("m_grid") or ()) + 1),
        "logsvd": float(M) * N * min(M, N),
        "nuts": 10.0 * M * N * rank * 2 ** int(defaults.get("max_tree_depth", 10)) / 4,
    }.get(engine, float(M) * N * rank)
    return fits * iterations * per_iteration / FLOPS


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
        left out for being over its budget (:data:`QUICK_BUDGET`).
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
    values = Y.toarray() if hasattr(Y, "toarray") else np.asarray(Y, dtype=float)
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
        (:func:`bernmf.split.paper_split`: 70% train, 15% validation, 15% test).
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
        Each engine is first timed by a probe (:func:`estimate`); ``mm`` and the
        cheapest others within :data:`QUICK_BUDGET` are kept, the others left out
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
            kept, dropped = _within_budget(
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
                rows = [
                    _ensemble_row(Y, split, engine, rank, prior, seed, restarts, combine, options)
                    for seed in seeds
                ]
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


def estimate(Y, split, engine: str, rank: int, options: dict, fits: int) -> float:
    """Seconds that ``fits`` fits of ``engine`` with ``options`` would take on Y, from probes.

    A probe fit on the training entries gives the compile time. The engines of
    :data:`PROBES` (samplers) probe with a few draws, their run time per draw counted.
    The others are fitted twice more by the same compiled program, stopped after one
    iteration and after a few (a loose tolerance), so that the difference of the two
    run times is the time of the iterations between them, without the fixed cost of a
    call. The estimate is the compile time plus ``fits`` times that per iteration times
    a full fit's iterations (``max_iter``: an upper bound for the engines that stop when
    converged).
    """
    probe, units, full = PROBES.get(engine, STOP_AT_ONCE)
    chosen = get_engine(engine)
    quiet = {"progress": False} if "progress" in chosen.options else {}

    def probed(extra):
        return fit(Y, engine, rank, mask=split.train, **{**options, **quiet, **probe, **extra})

    first = probed({})
    compile_seconds = float(np.nan_to_num(first.timings.get("compile", 0.0)))  # nuts: NaN
    per_unit = first.timings.get("run", 0.0) / max(units or first.n_iter, 1)
    if units is None:  # one iteration, then a few: the difference is the iterations' time
        once, more = probed({}), probed({"tol": 1e-2})
        run = more.timings.get("run", 0.0) - once.timings.get("run", 0.0)
        if more.n_iter > once.n_iter and run > 0:
            per_unit = run / (more.n_iter - once.n_iter)
        else:  # too fast to tell the iterations from the call: the call's time, per iteration
            per_unit = more.timings.get("run", 0.0) / max(more.n_iter, 1)
    defaults = {**chosen.options, **options}
    iterations = sum(float(defaults.get(key, 0) or 0) for key in full)
    return float(compile_seconds + fits * iterations * per_unit)


def _within_budget(name, Y, split, engines, rank, seeds, ensembles, restarts, options, progress):
    """The engines kept within :data:`QUICK_BUDGET`, and the others as ``(dataset, engine,
    estimate)``; lines saying both when ``progress``.

    ``mm`` (the package's engine) is always kept; the others are added cheapest first
    while the estimates (:func:`estimate`) add up to at most the budget. An engine whose
    :func:`floor` alone is over the budget is not probed.
    """
    seconds = {}
    for engine in engines:
        fits = len(seeds) + (engine == "mm") + restarts * len(seeds) * (engine in ensembles)
        seconds[engine] = floor(engine, np.shape(Y), rank, options[engine], fits)
        if seconds[engine] <= QUICK_BUDGET:  # else left out without a probe
            seconds[engine] = estimate(Y, split, engine, rank, options[engine], fits)
    chosen, total = set(), 0.0
    for engine in sorted(engines, key=lambda e: (e != "mm", seconds[e])):
        if engine == "mm" or total + seconds[engine] <= QUICK_BUDGET:
            chosen.add(engine)
            total += seconds[engine]
    kept = [e for e in engines if e in chosen]
    dropped = [(name, e, seconds[e]) for e in engines if e not in chosen]
    estimates = ", ".join(f"{e} {seconds[e]:.0f} s" for e in kept)
    say(progress, f"report --quick on {name}: estimated {total:.0f} s ({estimates})")
    for _, engine, guess in dropped:
        say(
            progress,
            f"report --quick on {name}: leaving out {engine}, estimated {guess:.0f} s, over "
            f"the quick budget of {QUICK_BUDGET:.0f} s; run it without --quick, or name the "
            "engines with --engines",
        )
    return kept, dropped


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


def _ensemble_row(Y, split, engine, rank, prior, seed, restarts, combine, options) -> tuple:
    with warnings.catch_warnings():  # distinct modes are why the report has ensembles
        warnings.filterwarnings("ignore", MODES_WARNING, UserWarning)
        result = fit(
            Y, engine, rank, mask=split.train, prior=prior, seed=seed, restarts=restarts,
            combine=combine, validation=split.validation, **options[engine],
        )  # fmt: skip
    row = {
        "engine": f"{engine} ensemble",
        "rank": rank,
        "prior": describe_prior(result.prior),
        "seed": seed,
        "perplexity": result.perplexity(Y, split.test),
        "seconds": result.timings.get("run", np.nan),
        "compile_seconds": result.timings.get("compile", np.nan),
        "iterations": result.n_iter,
        "ess_per_second": np.nan,
    }
    return row, lightened(result)


def leaderboard(fits: pd.DataFrame) -> pd.DataFrame:
    """One row per (dataset, engine, setting), best test perplexity first in each dataset.

    Parameters
    ----------
    fits : DataFrame
        :attr:`Report.fits` (or any table with its columns).

    Returns
    -------
    DataFrame
        ``dataset``, ``engine``, ``setting``, ``rank``, ``prior``, ``perplexity``
        (mean over seeds), ``perplexity_sd``, ``seconds`` (mean), ``compile_seconds``
        (max), ``iterations`` (mean), ``ess_per_second`` (mean), ``fits``.
    """
    fits = _merged(fits)
    table = summarize(fits, ["dataset", "engine", "setting", "rank", "prior"])
    order = pd.Categorical(table["dataset"], categories=list(dict.fromkeys(fits["dataset"])))
    return table.assign(_order=order).sort_values(["_order", "perplexity"]).drop(columns="_order")


def _merged(fits: pd.DataFrame) -> pd.DataFrame:
    """``fits`` with the groups (engine, setting) that are the same fits made once: the
    same dataset, rank and test perplexities seed by seed (em tuned at the shared rank is
    em shared; mm at its flat default prior is em). One group is kept, its ``engine`` and
    ``setting`` naming all of them (``"em = mm"``, ``"tuned = shared K=4"``)."""
    keys = ["dataset", "engine", "setting"]
    groups = list(fits.groupby(keys, sort=False))
    signature = {
        key: (key[0], tuple(group["rank"]), tuple(np.round(group["perplexity"].to_numpy(), 10)))
        for key, group in groups
    }
    kept, names = {}, {}
    for key, _ in groups:
        first = kept.setdefault(signature[key], key)
        names.setdefault(first, []).append(key)
    rows = []
    for first, same in names.items():
        group = fits[(fits[keys] == pd.Series(first, index=keys)).all(axis=1)]
        engines = " = ".join(dict.fromkeys(k[1] for k in same))
        settings = " = ".join(dict.fromkeys(k[2] for k in same))
        rows.append(group.assign(engine=engines, setting=settings))
    return pd.concat(rows, ignore_index=True)


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


def write(report: Report, folder) -> dict[str, Path]:
    """Write ``fits.csv``, ``leaderboard.csv``, ``pareto.png`` and ``report.html`` to ``folder``
    (and ``weights.csv``, the stacking weights, when the report has stacked rows).

    The HTML page stands alone: the plot is embedded as base64 PNG.

    Returns
    -------
    dict of str to Path
        The files written, by name.
    """
    from bernmf import plot  # matplotlib loads when a figure is drawn, not with the CLI

    folder = Path(folder)
    board = leaderboard(report.fits)
    paths = {name: folder / name for name in ("fits.csv", "leaderboard.csv", "pareto.png")}
    report.fits.to_csv(paths["fits.csv"], index=False)
    board.to_csv(paths["leaderboard.csv"], index=False)
    plot.pareto(board, path=paths["pareto.png"])
    if report.weights is not None and not report.weights.empty:
        paths["weights.csv"] = folder / "weights.csv"
        report.weights.to_csv(paths["weights.csv"], index=False)
    paths["report.html"] = folder / "report.html"
    paths["report.html"].write_text(_html(board, report, paths["pareto.png"]))
    return paths


def findings(report: Report, board: pd.DataFrame | None = None) -> dict[str, list[str]]:
    """What the report found, as sentences per dataset: the data, the winner and its margin
    over the best other engine, the settings chosen on validation (flagged at a grid's
    edge), and engines whose seeds all gave the same fit."""
    board = leaderboard(report.fits) if board is None else board
    said: dict[str, list[str]] = {}
    for dataset, table in board.groupby("dataset", sort=False):
        lines = said.setdefault(str(dataset), [])
        data = report.data[report.data["dataset"] == dataset] if len(report.data) else []
        for row in getattr(data, "itertuples", lambda: [])():
            lines.append(
                f"Data: {row.rows} x {row.columns}, {row.missing:.1%} of entries missing, "
                f"{row.density:.2%} of the observed entries are ones."
            )
        table = table.dropna(subset=["perplexity"]).sort_values("perplexity")
        if len(table):
            best = table.iloc[0]
            others = table[table["engine"].map(lambda e: e.split()[0]) != best["engine"].split()[0]]
            margin = ""
            if len(others):
                runner = others.iloc[0]
                gap = runner["perplexity"] - best["perplexity"]
                sd = np.nanmax([best["perplexity_sd"], runner["perplexity_sd"], 0.0])
                margin = (
                    f", ahead of {runner['engine']} ({runner['setting']}, "
                    f"{runner['perplexity']:.4g}) by {gap:.3g} nats"
                    + (f" ({gap / sd:.1f} sd of the seeds)" if sd > 0 else "")
                )
            lines.append(
                f"Winner: {best['engine']} ({best['setting']}, K = {best['rank']}) with test "
                f"perplexity {best['perplexity']:.4g}{margin}."
            )
        chosen = report.chosen[report.chosen["dataset"] == dataset] if len(report.chosen) else []
        for row in getattr(chosen, "itertuples", lambda: [])():
            flag = {
                "top": " — at the top of the grid: a larger rank may do better",
                "bottom": " — at the bottom of the grid: a smaller rank may do better",
            }.get(row.edge, "")
            prior = "" if row.prior == "none" else f", prior {row.prior}"
            if "," not in row.grid:  # one rank: nothing chosen
                lines.append(f"{row.engine} ran at K = {row.rank} (one rank tried){prior}.")
            else:
                lines.append(
                    f"{row.engine} chose K = {row.rank} of {row.grid}{prior} on validation{flag}."
                )
        out = report.left_out
        for row in (out[out["dataset"] == dataset] if len(out) else out).itertuples():
            lines.append(
                f"{row.engine} was left out: estimated {row.estimate:.0f} s, over the --quick "
                "budget."
            )
        same = table[(table["fits"] > 1) & (table["perplexity_sd"] == 0)]
        for engine in dict.fromkeys(same["engine"]):
            lines.append(
                f"{engine}: every seed gave the same fit (sd 0): its seeds change nothing."
            )
    return said


def stacking_weights_table(weights: pd.DataFrame | None) -> pd.DataFrame | None:
    """Mean stacking weight over seeds per dataset, stacked row, member engine and rank."""
    if weights is None or weights.empty:
        return None
    keys = ["dataset", "stack", "engine", "rank"]
    seeds = weights.groupby(["dataset", "stack"])["seed"].transform("nunique")
    table = weights.assign(weight=weights["weight"] / seeds).groupby(keys, sort=False)["weight"]
    return table.sum().reset_index()


def _html(board: pd.DataFrame, report: Report, png: Path) -> str:
    from bernmf import plot

    env = report.environment
    image = base64.b64encode(png.read_bytes()).decode("ascii")
    shown = board.drop(columns="dataset").rename(columns={"perplexity": "test perplexity"})
    said = findings(report, board)
    weights = stacking_weights_table(report.weights)
    sections = []
    for dataset, table in shown.groupby(board["dataset"], sort=False):
        front = plot.pareto_front(table["seconds"].to_numpy(), table["test perplexity"].to_numpy())
        table = table.assign(pareto=np.where(front, "yes", ""))
        found = "".join(f"<li>{html.escape(line)}</li>" for line in said.get(str(dataset), []))
        sections.append(
            f"<h2>{html.escape(str(dataset))}</h2>\n<ul>{found}</ul>\n"
            + table.to_html(index=False, float_format=lambda x: f"{x:.4g}", na_rep="", border=0)
        )
        if weights is not None and (weights["dataset"] == dataset).any():
            mine = weights[weights["dataset"] == dataset].drop(columns="dataset")
            sections.append(
                "<h3>Stacking weight per engine and rank (mean over seeds)</h3>\n"
                + mine.to_html(index=False, float_format=lambda x: f"{x:.3f}", border=0)
            )
    runtime = (
        f"<p>Total run time: {report.seconds:.0f} s.</p>" if np.isfinite(report.seconds) else ""
    )
    rows = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in env.items()
    )
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>bernmf report</title>
<style>body{{font-family:sans-serif;max-width:70em;margin:auto}}
table{{border-collapse:collapse}}td,th{{padding:2px 8px;text-align:right}}
tr:nth-child(even){{background:#f3f3f3}}</style></head><body>
<h1>bernmf report</h1>
{runtime}
<p>Test perplexity (mean negative log-likelihood per test entry, nats; lower is better) on
the paper's split, mean and sd over seeds. Settings: <em>tuned</em> (rank, and mm's prior,
chosen on the validation entries), <em>shared K</em> (every engine at one rank, default
prior), <em>ensemble</em> (restarts combined on validation), <em>stacked</em> (every fit of a
seed already made, of all engines or of mm only, tuning fits included, stacked on the validation
entries with a smoothed column-frequency member; seconds: the sum of the members'; rank 0 and
prior "mixed"). Seconds: run time per fit
without compilation; iterations: iterations or draws; ESS/s: median bulk ESS of WH per
second (samplers). <em>pareto</em>: no other row is both faster and better. Rows that are
the same fits are one row: <em>em = mm</em> (mm at its flat default prior is em),
<em>tuned = shared K=4</em> (the rank chosen was the shared one). A compile time of 0 means
the program compiled for an earlier fit of the same shape was reused.</p>
<h2>Test perplexity against seconds</h2>
<img alt="Pareto plot" src="data:image/png;base64,{image}">
{"".join(sections)}
<h2>Environment</h2><table>{rows}</table>
</body></html>
"""
