"""What a report is: :class:`Settings`, the arguments of :func:`bernmf.studies.report.run.run`
as its steps and its time budget read them, and :class:`Report`, what it fills and
:mod:`bernmf.studies.report.page` reads, with the columns of its fits."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from bernmf.results.fit import Fit

__all__ = ["COLUMNS", "Report", "Settings", "Winner"]

COLUMNS = (
    "dataset", "engine", "setting", "rank", "prior", "seed", "perplexity", "seconds",
    "compile_seconds", "iterations", "ess_per_second",
)  # fmt: skip
"""The columns of :attr:`Report.fits`, in order."""


@dataclass(frozen=True)
class Report:
    """The result of :func:`bernmf.studies.report.run.run`.

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
        :func:`bernmf.studies.report.run.environment` at the time of the run, and
        ``clock``, the name of the clock of its seconds (``perf_counter``: wall-clock,
        ``process_time``: CPU seconds).
    data : DataFrame
        One row per dataset (:func:`bernmf.studies.report.run.describe_data`): ``dataset``,
        ``rows``, ``columns``, ``missing`` (fraction of entries), ``density`` (fraction of
        ones among the observed entries).
    chosen : DataFrame
        One row per dataset and engine: the ``rank`` and ``prior`` chosen on the
        validation entries, the ``grid`` of ranks chosen from, ``edge``: "top" or
        "bottom" when the chosen rank is the largest or smallest of a grid of several
        (a larger or smaller one may do better; only when two ranks or more have a finite
        validation perplexity), else "", and ``finite``: the ranks whose validation
        perplexity is finite ("": none, nothing was chosen and the engine ran at the
        shared rank with its default prior).
    seconds : float
        The run's time on its clock (wall-clock unless ``environment["clock"]`` says
        ``process_time``).
    left_out : DataFrame
        ``dataset``, ``engine``, ``estimate`` (seconds, at its shortest) of the engines left
        out for being over the budget (:func:`bernmf.studies.report.budget.plans`).
    weights : DataFrame or None
        The stacking weight per ``dataset``, ``seed``, ``stack`` (the row's engine),
        member ``engine`` and ``rank`` (summed over the member fits of that engine and
        rank) of the ``"stacked"`` rows.
    entries : dict of (dataset, engine, setting) to ndarray of shape (n,)
        ``log P(Y=y)`` of each of the dataset's n test entries (row-major), mean over the
        fits of the row's seeds (``-mean`` is the row's mean perplexity; ``-inf`` where a
        fit gives the outcome probability 0): the margins between rows
        (:func:`bernmf.studies.report.page.leaderboard`) and which rows are the same fits.
    plans : DataFrame
        One row per dataset and engine: ``estimate`` (seconds of its whole plan, estimated
        up front), ``seconds`` (of its plan as run, its share of the stacks included; NaN:
        left out), ``stacks`` (that share), ``changes`` (what the budget shortened,
        "; "-separated; "" for nothing), ``estimated`` (the seconds estimated for its
        steps as they ran, without the stacks: its tuning by its probes, its seeds and
        ensembles at the rank chosen by its tuning fits once they existed) and
        ``measured`` (the seconds they took; NaN: not run); and one row per dataset of
        engine ``"stacks"``: ``seconds`` and ``stacks`` the shares of the engines,
        ``estimated`` the members stacked at the probe's seconds per member,
        ``measured`` the seconds the stacks took. Seconds on the report's clock
        (``environment["clock"]``).
    budget : float
        The seconds the report aimed at.
    winners : dict of dataset to Winner
        The fit of the first row of each dataset's leaderboard (none where no row scores
        finitely), which :func:`bernmf.studies.report.page.write` saves.
    """

    fits: pd.DataFrame
    environment: dict
    data: pd.DataFrame = field(default_factory=pd.DataFrame)
    chosen: pd.DataFrame = field(default_factory=pd.DataFrame)
    seconds: float = float("nan")
    left_out: pd.DataFrame = field(default_factory=pd.DataFrame)
    weights: pd.DataFrame | None = None
    entries: Mapping[tuple[str, str, str], np.ndarray] = field(default_factory=dict)
    plans: pd.DataFrame = field(default_factory=pd.DataFrame)
    budget: float = float("nan")
    winners: Mapping[str, Winner] = field(default_factory=dict)


@dataclass(frozen=True)
class Winner:
    """The winning fit of a dataset: its leaderboard row's ``engine`` and ``setting``, and
    the ``fit`` of its first ``seed`` (without draws, as the report keeps its fits)."""

    engine: str
    setting: str
    seed: int
    fit: Fit


@dataclass(frozen=True)
class Settings:
    """The arguments of :func:`bernmf.studies.report.run.run`, checked once, as its steps
    and :func:`bernmf.studies.report.budget.plans` read them.

    ``ranks``, ``priors``, ``seeds`` and ``restarts`` are those of ``quick`` when it is set;
    ``options`` holds each engine's options; ``budget`` is the report's seconds, on
    ``clock`` (``time.perf_counter``: wall-clock; ``time.process_time``: CPU seconds of
    the process), which times the probes and the steps too.
    """

    engines: list[str]
    ranks: list[int]
    shared_rank: int
    priors: list[float]
    seeds: list[int]
    ensembles: list[str]
    restarts: int
    combine: str
    options: dict[str, dict]
    quick: bool
    progress: bool
    budget: float
    clock: Callable[[], float] = time.perf_counter
