"""The posterior-vs-MAP study: every engine family on the truth, over many matrices and
splits, paired against the best MAP row, at matched CPU.

A configuration of the study runner (:mod:`bernmf.studies.runner`), one
:class:`~bernmf.studies.runner.study.Study` per *unit*: a matrix simulated from the model with its
own random split (``--matrices`` per shape and prior, matrix and split seed s = 0, 1, ...),
or a random split of a dataset (``--splits`` per dataset, split seed s). Every choice (mm's
prior, the stacking and chain weights) is made on the unit's validation entries.

Families (a :class:`~bernmf.studies.runner.study.Grid` each) and what a scale b scales:

- ``mm``: the MAP, its alpha, beta chosen on validation at seed 0 (:data:`MM_VALUES`, gamma
  = 1); rows ``mm`` (one fit), ``mm mean`` (the mean of ``--restarts`` x b seeds) and ``mm
  stack`` (their stack on the validation entries, a weight per seed and the column-frequency
  baseline); ``em``: the prior-free MAP, rows ``em mean`` and ``em stack`` as mm's. Their
  scales run to ``--map-scales``' largest (default 128: 512 seeds), so that the MAP
  ensembles reach the samplers' CPU: matched compute is read off the curves of score
  against CPU seconds, where every family crosses the same range.
- ``nuts``: ``--chains`` chains (2 starts of chains / 2 each: the superchains of nested
  R-hat) of b x ``--warmup`` + b x ``--samples`` draws, trees of depth <= ``--max-tree-depth``;
  ``gibbs``: the same chains of b x ``--gibbs-samples`` + b x ``--gibbs-samples`` sweeps; their
  rows by the runner's ``chains`` rule (the mean of all draws unless the chains sit in
  distinct modes: :func:`bernmf.posterior.modes.mode_prediction`); ``svi_normal``,
  ``svi_lowrank``: b x ``--svi-steps`` steps; ``vb``: the mean of b restarts of CVB0. Their
  scales are ``--sampler-scales`` (default 1 and 2).

The Bayesian families fit the true prior on simulated data (:data:`SHAPES`: two flat, one
concentrated) and Beta(``--bayes-prior``) (default Beta(0.1, 0.1), gamma = 1: the prior of
the animals reference posterior, :mod:`bernmf.studies.reproduce.posterior_accuracy`) on
the datasets; every family fits the true rank on simulated data and ``--rank`` (default 8) on the
datasets.

Scores of every row (:func:`bernmf.studies.runner.running.run`'s columns): ``kl_truth`` on simulated
data, the mean over the test entries of KL(Bernoulli(true WH) || Bernoulli(predicted)), the
primary score there (the excess log loss, free of the test outcomes' noise); test perplexity
(the primary score on the datasets); ECE and its noise floor ``ece_floor``; coverage of the
true WH by 50% and 90% intervals; the chains' mixing; ``cpu_seconds`` (the row's fits and
their combining, compiling excluded by an untimed first call at the first unit of each shape),
``tuning_seconds`` (mm's prior choice) and ``compile_seconds`` apart.

Outputs in ``--out`` (default ``results/posterior_vs_map``): ``rows.csv`` (every unit, row
and scale), ``summary.csv`` (per dataset, row and scale: means over units, the units,
``score`` and its sd, the paired difference to the best MAP row ``best_map`` with its 95%
bootstrap interval over units ``diff_low``, ``diff_high``, ``kl_truth``, ``compile_seconds``
(the most of any unit: a shape's programs are compiled once), ``tuning_seconds``, the Pareto
front of CPU against score, mixing counts), ``reliability.csv``, ``tuning.csv``,
``table.csv`` (the runner's table, written as units end), ``score_vs_cpu.png``,
``differences.png``, ``reliability.png`` and ``coverage.png``. ``--quick`` is a smoke run (2
matrices of 24 x 18 at K = 2, 2 splits of animals at K = 2, short chains, no low-rank guide,
MAP scales 1, 2 and 4).

Run: ``bernmf reproduce posterior_vs_map [--quick] [--data-dir DIR]``, or ``python -m
bernmf.studies.reproduce.posterior_vs_map`` for every option.
"""

from __future__ import annotations

import itertools
import sys
import textwrap
import time
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from bernmf.data.files.csv_table import write_csv
from bernmf.plot import log_ticks, pareto_front, save_png
from bernmf.studies.runner import registry, running, study
from bernmf.studies.runner.study import CHOICE, Grid, Method, Simulation, Study

FAMILIES = {
    "mm": ("mm", {}),
    "em": ("em", {}),
    "nuts": ("nuts", {}),
    "svi_normal": ("svi", {"guide": "AutoNormal"}),
    "svi_lowrank": ("svi", {"guide": "AutoLowRankMultivariateNormal"}),
    "gibbs": ("gibbs", {}),
    "vb": ("vb", {}),
}
MAP_FAMILIES = ("mm", "em")
"""The MAP families: ``--restarts`` x b seeds a setting, rows of their mean and their stack
(:func:`row_methods`); mm's own prior grid, none for em."""
RULES = {"nuts": "chains", "gibbs": "chains", "vb": "mean"}
"""Each other family's row rule (:data:`bernmf.studies.runner.study.RULES`); the rest:
``single``."""
MM_VALUES = (1.0, 1.2, 1.5, 2.0, 3.0)
"""mm's alpha and beta values, every pair chosen among on validation (gamma = 1)."""
FLAT = (1.0, 1.0, 1.0)
SHAPES = ((200, 100, 4, FLAT), (100, 60, 6, FLAT), (100, 60, 6, (0.3, 0.3, 0.3)))
"""M, N, K and the prior (alpha, beta, gamma) of the simulated data: data that pins a few
components, fewer entries for more parameters (where a posterior has more to add), and the
same with W and H drawn from a concentrated prior (H near 0 or 1, rows of W near a
vertex: sparse, interpretable parts)."""
SIMULATED_FRACTIONS = (0.7, 0.1, 0.2)
DATASET_FRACTIONS = (0.7, 0.15, 0.15)
"""Training, validation and test shares of the random splits (the datasets': the paper's)."""
MAX_TREE_DEPTH = 8
"""NUTS's ``max_tree_depth`` in the study (docs/posterior-vs-map.md, the earlier run)."""
PRIMARY = {"simulated": "kl_truth", "dataset": "test_perplexity"}
"""The primary score of a unit: the KL from the truth where it is known, else test perplexity."""
BOOTSTRAP = 2000
"""Resamples of the units in the paired bootstrap intervals."""
COLUMNS = 3
"""Panels per row of a figure (one a dataset or simulated shape)."""
KEYS = ["dataset", "row", "scale"]
"""The rows of the summary."""


def parse(argv):
    """The options: :func:`bernmf.studies.runner.registry.parser`'s and the study's sizes."""
    parser = registry.parser(__doc__, "results/posterior_vs_map")
    parser.add_argument("--families", nargs="*", choices=list(FAMILIES), default=None)
    shapes = "; ".join(" ".join(f"{v:g}" for v in (*s[:3], *s[3])) for s in SHAPES)
    parser.add_argument(
        "--shape", nargs="+", type=float, action="append", metavar="V",
        help="M N K of simulated data, then optionally the ALPHA BETA GAMMA it is drawn from "
        f"(flat by default; repeat for several; default {shapes})",
    )  # fmt: skip
    parser.add_argument("--matrices", type=int, default=20, help="simulated matrices a shape")
    parser.add_argument("--splits", type=int, default=10, help="random splits a dataset")
    parser.add_argument("--rank", type=int, default=8, help="of every family on the datasets")
    parser.add_argument(
        "--bayes-prior", nargs=2, type=float, default=[0.1, 0.1], metavar=("ALPHA", "BETA"),
        help="the Bayesian families' Beta prior on the datasets (gamma = 1)",
    )  # fmt: skip
    # --sampler-budgets and --map-budgets: the names of the runs of before 2026-11-29
    parser.add_argument("--sampler-scales", "--sampler-budgets", nargs="+", type=int,
                        default=[1, 2])  # fmt: skip
    parser.add_argument(
        "--map-scales", "--map-budgets", nargs="+", type=int,
        default=[1, 2, 4, 8, 16, 32, 64, 128],
        help="scales of mm and em: --restarts x b seeds",
    )  # fmt: skip
    parser.add_argument("--restarts", type=int, default=4, help="mm and em seeds at scale 1")
    parser.add_argument("--chains", type=int, default=4, help="nuts and gibbs chains")
    parser.add_argument("--warmup", type=int, default=250, help="nuts warmup at scale 1")
    parser.add_argument("--samples", type=int, default=250, help="nuts draws at scale 1")
    parser.add_argument("--gibbs-samples", type=int, default=250, help="at scale 1")
    parser.add_argument("--svi-steps", type=int, default=1250, help="at scale 1")
    parser.add_argument(
        "--dtype", default="float64", choices=("float64", "float32"), help="of nuts and svi"
    )
    parser.add_argument("--target-accept", type=float, default=0.8, help="NUTS target_accept_prob")
    parser.add_argument(
        "--max-tree-depth", type=int, default=MAX_TREE_DEPTH,
        help="NUTS max_tree_depth (caps cost per draw)",
    )  # fmt: skip
    parser.add_argument("--workers", type=int, default=2, help="threads of the mm grid")
    parser.add_argument("--bootstrap", type=int, default=BOOTSTRAP, help="resamples of units")
    parser.add_argument(
        "--no-warmup",
        action="store_true",
        help="no untimed first call of each fit: CPU seconds then include compiling",
    )
    parser.add_argument("--skip-simulated", action="store_true")
    parser.add_argument("--skip-datasets", action="store_true")
    parser.add_argument(
        "--figures-only", action="store_true",
        help="the summary again from rows.csv (if there) and the figures from it and "
        "reliability.csv in --out; fit nothing",
    )  # fmt: skip
    args = parser.parse_args(argv)
    args.shapes = SHAPES if args.shape is None else [_shape(parser, v) for v in args.shape]
    args.mm_values = MM_VALUES
    args.families = args.families or list(FAMILIES)
    if args.quick:
        args.shapes, args.matrices, args.splits, args.rank = [(24, 18, 2, FLAT)], 2, 2, 2
        args.datasets = args.datasets or ["animals"]
        args.sampler_scales, args.map_scales, args.restarts, args.chains = [1, 2], [1, 2, 4], 2, 2
        args.warmup, args.samples, args.gibbs_samples, args.svi_steps = 30, 30, 30, 200
        args.mm_values, args.bayes_prior = (1.0, 1.5), [0.5, 0.5]
        args.families = [f for f in args.families if f != "svi_lowrank"]
    counts = [args.matrices, args.splits, args.rank, args.restarts, args.chains, args.bootstrap]
    scales = [*args.sampler_scales, *args.map_scales]
    if min(counts) < 1 or min(scales) < 1:
        parser.error("counts and scales must be positive integers")
    args.sampler_scales = tuple(sorted(set(args.sampler_scales)))
    args.map_scales = tuple(sorted(set(args.map_scales)))
    args.datasets = [] if args.skip_datasets else (args.datasets or ["animals"])
    return args


def _shape(parser, values: list[float]) -> tuple:
    """``--shape``'s M, N, K (integers >= 1) and prior (three positive numbers; flat if
    none); the parser's error otherwise."""
    if len(values) not in (3, 6) or any(v != int(v) or v < 1 for v in values[:3]):
        parser.error(f"--shape takes M N K (integers >= 1) and optionally ALPHA BETA GAMMA, "
                     f"got {values}")  # fmt: skip
    if any(not v > 0 for v in values[3:]):
        parser.error(f"--shape's prior must be positive, got {values[3:]}")
    return (*map(int, values[:3]), tuple(values[3:]) or FLAT)


def family_grid(family: str, rank: int, priors, args) -> Grid:
    """The grid of one family at ``rank``: its engine's options at scale 1, its scales and
    what a scale scales."""
    engine, options = FAMILIES[family]
    options, members, scaled, scales = dict(options), 1, (), args.sampler_scales
    if family in MAP_FAMILIES:
        members, scaled, scales = args.restarts, ("members",), args.map_scales
    elif family == "vb":
        scaled = ("members",)
    elif engine == "nuts":
        options |= {"num_warmup": args.warmup, "num_samples": args.samples}
        options |= {"target_accept_prob": args.target_accept}
        options["max_tree_depth"] = args.max_tree_depth
        members, scaled = args.chains, ("num_warmup", "num_samples")
    elif engine == "svi":
        options["steps"], scaled = args.svi_steps, ("steps",)
    elif engine == "gibbs":
        options |= {"num_warmup": args.gibbs_samples, "num_samples": args.gibbs_samples}
        members, scaled = args.chains, ("num_warmup", "num_samples")
    if engine in ("nuts", "gibbs"):  # two start groups, the superchains of nested R-hat
        options["chains_per_start"] = max(1, args.chains // 2)
    if engine in ("nuts", "svi", "gibbs"):
        options["progress"] = not args.quiet
    if engine in ("nuts", "svi"):
        options["dtype"] = args.dtype
    batching = {"workers": args.workers, "progress": False} if family in MAP_FAMILIES else {}
    return Grid(
        engine, (rank,), None if priors is None else tuple(priors), options,
        batching=batching, members=members, name=family, scales=tuple(scales), scaled=scaled,
    )  # fmt: skip


def row_methods(args) -> tuple[Method, ...]:
    """The rows: ``mm`` (one fit, first scale), ``mm mean``, ``mm stack``, ``em mean``,
    ``em stack``, and each other family by its rule (:data:`RULES`)."""
    made = []
    for family in args.families:
        if family == "mm":
            made.append(Method("mm", "first", ("mm",), scales=args.map_scales[:1]))
        if family in MAP_FAMILIES:
            made += [
                Method(f"{family} mean", "mean", (family,)),
                Method(f"{family} stack", "stack chosen", (family,)),
            ]
        else:
            made.append(Method(family, RULES.get(family, "single"), (family,)))
    return tuple(made)


def configurations(args) -> list[Study]:
    """A study per unit: each simulated matrix with its split (the Bayesian families at the
    true prior and rank), then each split of each dataset (every family at ``--rank``,
    the Bayesian ones at ``--bayes-prior``); mm's prior chosen on validation in every unit.
    Only each shape's first unit makes the untimed first calls: the programs it compiles
    serve the others."""
    mm_priors = [(a, b, 1.0) for a, b in itertools.product(args.mm_values, repeat=2)]
    bayes = ((*args.bayes_prior, 1.0),)

    def grids(rank: int, prior) -> tuple[Grid, ...]:
        chosen = {"mm": mm_priors, "em": None}
        return tuple(family_grid(f, rank, chosen.get(f, prior), args) for f in args.families)

    common = {
        "methods": row_methods(args), "metrics": ("ece", "coverage", "mixing", "kl_truth"),
        "choose_seed": 0, "split": "random",
    }  # fmt: skip
    made = []
    for M, N, K, prior in [] if args.skip_simulated else args.shapes:
        for s in range(args.matrices):
            made.append(
                Study(
                    "posterior_vs_map", grids(K, (prior,)),
                    simulations=(Simulation(M, N, K, seed=s, prior=prior),), split_seed=s,
                    fractions=SIMULATED_FRACTIONS, warmup=s == 0 and not args.no_warmup,
                    **common,
                )
            )  # fmt: skip
    for name in args.datasets:
        for s in range(args.splits):
            made.append(
                Study(
                    "posterior_vs_map", grids(args.rank, bayes), datasets=(name,),
                    data_dir=args.data_dir, split_seed=s, fractions=DATASET_FRACTIONS,
                    warmup=s == 0 and not args.no_warmup, **common,
                )
            )  # fmt: skip
    return made


def rows_of(result: study.StudyResult, methods: tuple[Method, ...]) -> pd.DataFrame:
    """The runner's table as the study's rows: dataset (a simulated shape's name without its
    seed), unit (the matrix and split seed), family, row, scale, the chains' rule
    (``rule``), the metrics and ``score``, the unit's primary score (:data:`PRIMARY`)."""
    table = result.table
    family = {m.name: m.grids[0] for m in methods}
    rows = table.drop(columns=["seed", "rule", "study", "seed_set", "R"]).rename(
        columns={"method": "row", "chain_rule": "rule", "split_seed": "unit"}
    )
    rows.insert(1, "family", rows["row"].map(family))
    simulated = rows["dataset"].str.startswith("simulated-")
    score = rows["test_perplexity"].copy()
    if "kl_truth" in rows:
        score[simulated] = rows.loc[simulated, "kl_truth"]
    rows = rows.assign(dataset=short_names(rows["dataset"]), unit=rows["unit"].astype(int))
    return rows.assign(score=score, primary=np.where(simulated, *PRIMARY.values()))


def short_names(names: pd.Series) -> pd.Series:
    """The dataset column with each simulation's name as ``simulated MxN K=k`` (and its prior
    unless flat: ``simulated MxN K=k prior a,b,g``), the seed left out."""
    named = names.str.replace(
        r"^simulated-(\d+x\d+)-K(\d+)-prior([^-]+)-seed\d+$", r"simulated \1 K=\2 prior \3",
        regex=True,
    )  # fmt: skip
    return named.str.replace(
        r"^simulated-(\d+x\d+)-K(\d+)-seed\d+$", r"simulated \1 K=\2", regex=True
    )


def paired_differences(rows: pd.DataFrame, draws: int = BOOTSTRAP, seed: int = 0) -> pd.DataFrame:
    """Per dataset, row and scale: the mean over units of its score minus the best MAP row's
    on the same unit, and the 95% percentile interval of that mean over ``draws`` resamples
    of the units (paired: the same resampled units for both rows).

    The best MAP row is the row and scale of a MAP family (:data:`MAP_FAMILIES`) of least
    mean score. Units where either score is missing are left out of that pair. Each
    dataset resamples with its own generator (``seed`` and its name), so that its
    intervals do not depend on the other datasets of the run.

    Returns
    -------
    DataFrame
        dataset, row, scale, best_map, diff_mean, diff_low, diff_high.
    """
    made = []
    for dataset, group in rows.groupby("dataset", sort=False):
        rng = np.random.default_rng([seed, zlib.crc32(str(dataset).encode())])
        scores = group.pivot(index="unit", columns=["row", "scale"], values="score")
        maps = group.loc[group["family"].isin(MAP_FAMILIES), ["row", "scale"]].drop_duplicates()
        means = scores.mean()
        best = min(map(tuple, maps.to_numpy()), key=lambda key: means[key])
        diffs = scores.sub(scores[best], axis=0).to_numpy()  # (units, settings)
        picks = rng.integers(0, len(scores), (draws, len(scores)))
        with np.errstate(invalid="ignore"):  # inf - inf where both rows are inf on a unit
            resampled = np.nanmean(diffs[picks], axis=1)  # (draws, settings)
            # the nearest order statistics: an inf mean (a row inf on some unit) stays inf
            low, high = np.nanpercentile(resampled, [2.5, 97.5], axis=0, method="nearest")
        for i, (row, scale) in enumerate(scores.columns):
            made.append(
                {
                    "dataset": dataset, "row": row, "scale": scale,
                    "best_map": f"{best[0]} b{best[1]}", "diff_mean": np.nanmean(diffs[:, i]),
                    "diff_low": low[i], "diff_high": high[i],
                }
            )  # fmt: skip
    return pd.DataFrame(made)


def summarize(rows: pd.DataFrame, draws: int = BOOTSTRAP) -> pd.DataFrame:
    """Means over units per dataset, row and scale; the units; the score's sd; the paired
    differences to the best MAP row (:func:`paired_differences`); compile seconds as the most
    of any unit; the mixing statuses counted; the Pareto front of CPU seconds and score."""
    numbers = [c for c in rows.columns if c not in [*KEYS, "unit"] and rows[c].dtype.kind in "fi"]
    grouped = rows.groupby(KEYS, sort=False)
    summary = grouped[numbers].mean()
    summary["units"] = grouped.size()
    summary["score_sd"] = grouped["score"].std()
    summary["compile_seconds"] = grouped["compile_seconds"].max()
    for column in ("family", "primary"):
        summary[column] = grouped[column].first()
    for column in ("coverage_50", "coverage_90"):
        if column in rows and column not in numbers:  # "no interval" for fits without draws
            summary[column] = grouped[column].agg(_mean_or_text)
    for column in ("mixing", "rule"):
        if column in rows:
            summary[column] = grouped[column].agg(_counted)
    summary = summary.reset_index()
    summary = summary.merge(paired_differences(rows, draws), on=KEYS, how="left")
    pareto = np.zeros(len(summary), bool)
    for _, group in summary.groupby("dataset", sort=False):
        pareto[group.index] = pareto_front(group["cpu_seconds"], group["score"])
    return summary.assign(pareto=pareto)


def _mean_or_text(values: pd.Series):
    """The mean of a column's numbers, or its first value when it holds none (text, NaN)."""
    numbers = pd.to_numeric(values, errors="coerce")
    return numbers.mean() if numbers.notna().any() else values.iloc[0]


def _counted(values: pd.Series) -> str:
    """A text column's values counted over the units, e.g. ``low ESS 18, mixed 2`` ("" when
    it holds none)."""
    counts = values.dropna().value_counts()
    return ", ".join(f"{value} {count}" for value, count in counts.items())


def tuning_of(fits: pd.DataFrame) -> pd.DataFrame:
    """Every fit of a choice (at seed 0): dataset, unit, family, rank, prior, validation
    perplexity and whether it was chosen (the least per dataset, unit and family)."""
    choices = fits[fits["stage"] == CHOICE] if "stage" in fits else fits.iloc[:0]
    table = choices[["dataset", "unit", "grid", "rank", "alpha", "beta", "validation_perplexity"]]
    table = table.rename(columns={"grid": "engine"}).reset_index(drop=True)
    table = table.assign(dataset=short_names(table["dataset"]))
    keys = ["dataset", "unit", "engine"]
    least = table.groupby(keys)["validation_perplexity"].transform("min")
    return table.assign(chosen=table["validation_perplexity"] == least)


def figures(summary: pd.DataFrame, bins: pd.DataFrame, out: Path) -> None:
    """The four PNGs, legends outside the axes, a colour per row in all of them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(summary["dataset"]))
    colour = {row: f"C{i % 10}" for i, row in enumerate(dict.fromkeys(summary["row"]))}
    _score_figure(plt, summary, names, colour, out / "score_vs_cpu.png")
    _differences_figure(plt, summary, names, colour, out / "differences.png")
    _reliability_figure(plt, bins, names, colour, out / "reliability.png")
    _coverage_figure(plt, summary, out / "coverage.png")


def _score_figure(plt, summary, names, colour, path) -> None:
    """Each dataset's score (mean over units, bars: sd / sqrt(units)) against CPU seconds,
    every row's scales joined: the MAP ensembles' curves run to the samplers' CPU."""
    figure, axes = _panels(plt, len(names), 4.4, 3.8, 1.6)
    for axis, name in zip(axes, names, strict=True):
        panel = summary[summary["dataset"] == name]
        for label, rows in panel.groupby("row", sort=False):
            error = (rows["score_sd"] / np.sqrt(rows["units"])).fillna(0)
            axis.errorbar(rows["cpu_seconds"], rows["score"], yerr=error, marker="o",
                          markersize=3, label=label, color=colour[label])  # fmt: skip
        subtitle = axis_top(panel, axis)
        axis.set_title(f"{name} ({int(panel['units'].max())} units){subtitle}", fontsize=9)
        axis.set_xscale("log")
        log_ticks(axis, "x")
        axis.tick_params(axis="x", labelsize=8)
        axis.set_xlabel("CPU seconds per fit (log scale)")
        primary = panel["primary"].iloc[0]
        axis.set_ylabel(
            "KL from the true WH, test entries (nats)"
            if primary == "kl_truth"
            else "test perplexity (nats per entry)"
        )
    _legend(figure, axes)
    save_png(figure, path)


def _differences_figure(plt, summary, names, colour, path) -> None:
    """Each row's paired difference to the best MAP row with its 95% bootstrap interval, a
    panel per dataset, a row's scales together (rows with an infinite difference are named,
    not drawn)."""
    figure, axes = _panels(plt, len(names), 5.2, 7.0)
    for axis, name in zip(axes, names, strict=True):
        panel = summary[summary["dataset"] == name]
        order = {row: i for i, row in enumerate(dict.fromkeys(panel["row"]))}
        panel = (
            panel.sort_values(["scale"])
            .sort_values("row", key=lambda r: r.map(order), kind="stable")
            .reset_index(drop=True)
        )
        finite = np.isfinite(panel[["diff_mean", "diff_low", "diff_high"]]).all(axis=1)
        shown = panel[finite].reset_index(drop=True)
        y = np.arange(len(shown))[::-1]
        for i, row in shown.iterrows():
            axis.errorbar(row["diff_mean"], y[i],
                          xerr=[[row["diff_mean"] - row["diff_low"]],
                                [row["diff_high"] - row["diff_mean"]]],
                          marker="o", markersize=3, color=colour[row["row"]])  # fmt: skip
        axis.axvline(0, color="gray", linestyle=":")
        axis.set_yticks(y, [f"{r} b{b}" for r, b in zip(shown["row"], shown["scale"],
                                                        strict=True)], fontsize=7)  # fmt: skip
        axis.set_xlabel(f"{panel['primary'].iloc[0]} minus {panel['best_map'].iloc[0]}'s")
        left = panel.loc[~finite, "row"].unique()
        title = name + (f"\n(inf, not drawn: {', '.join(left)})" if len(left) else "")
        axis.set_title(title, fontsize=9)
    save_png(figure, path)


def _reliability_figure(plt, bins, names, colour, path) -> None:
    """Reliability diagrams of unit 0 at the largest scale of the samplers' (``mm``: its
    one fit), each curve labelled with its own ECE."""
    first = bins["unit"] == 0
    shown = bins[first & (bins["scale"] == bins["sampler_scale"]) & (bins["row"] != "mm")]
    shown = pd.concat([shown, bins[first & (bins["row"] == "mm")]])
    figure, axes = _panels(plt, len(names), 4.2, 5.4)
    for axis, name in zip(axes, names, strict=True):
        axis.plot([0, 1], [0, 1], color="gray", linestyle=":", linewidth=1)
        table = shown[shown["dataset"] == name]
        for label, curve in table.groupby("row", sort=False):
            ece = (curve["count"] * (curve["predicted"] - curve["observed"]).abs()).sum()
            ece /= curve["count"].sum()
            axis.plot(curve["predicted"], curve["observed"], marker="o", markersize=3,
                      color=colour.get(label), label=f"{label} (ECE {ece:.3f})")  # fmt: skip
        axis.set_xlabel("predicted P(Y=1), test entries")
        axis.set_ylabel("observed frequency of Y=1")
        axis.set_title(f"{name}, scale {table['sampler_scale'].max()}, unit 0")
        axis.set_aspect("equal")
        axis.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=2)
    save_png(figure, path, bbox_inches="tight")  # the legends below


def _coverage_figure(plt, summary, path) -> None:
    """Coverage of the true WH by 50% and 90% intervals, rows with draws, mean over units."""
    if "coverage_90" not in summary:
        return
    covered = summary[pd.to_numeric(summary["coverage_90"], errors="coerce").notna()]
    simulations = list(dict.fromkeys(covered["dataset"]))
    if not simulations:
        return
    figure, axes = _panels(plt, len(simulations), 6, 3.6, 1.6)
    for axis, name in zip(axes, simulations, strict=True):
        rows = covered[covered["dataset"] == name]
        labels = [f"{r} b{b}" for r, b in zip(rows["row"], rows["scale"], strict=True)]
        x = range(len(rows))
        for offset, level in ((-0.2, 50), (0.2, 90)):
            values = rows[f"coverage_{level}"].astype(float)
            axis.bar([i + offset for i in x], values, width=0.4, color=f"C{level // 90}",
                     label=f"{level}% interval")  # fmt: skip
            axis.axhline(level / 100, color="gray", linestyle=":", linewidth=1,
                         label="nominal levels" if level == 90 else None)  # fmt: skip
        axis.set_xticks(list(x), labels, rotation=30, fontsize=8)
        axis.set_xlabel("row and scale (b), mean over units")
        axis.set_ylabel("share of true WH entries\ninside the interval")
        axis.set_ylim(0, 1)
        axis.set_title(name)
    _legend(figure, axes[:1])
    save_png(figure, path)


def _legend(figure, axes) -> None:
    """One legend for the figure, right of its panels, each label once."""
    legend = {}
    for axis in axes:
        for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    figure.legend(legend.values(), legend.keys(), loc="outside right upper", fontsize=8)


TOP = 1.25
"""A panel's score axis ends at this multiple of its best row's score."""


def axis_top(rows: pd.DataFrame, axis) -> str:
    """Cut a panel's score axis at :data:`TOP` times its best row's where a row lies above,
    and say which rows the panel leaves out: above the cut (their least value there) or inf
    (a test entry given probability 0: no point to draw)."""
    score = rows["score"]
    top = TOP * score.min()
    said = []
    for label, values in score.groupby(rows["row"], sort=False):
        if np.isinf(values).any():
            said.append(f"{label} inf")
        elif (values > top).any():
            said.append(f"{label} {values[values > top].min():.3g}")
    if (np.isfinite(score) & (score > top)).any():
        axis.set_ylim(top=top)
    return "\n" + textwrap.fill(f"(off the axis: {', '.join(said)})", 48) if said else ""


def _panels(plt, count: int, width: float, height: float, legend: float = 0.0):
    """A figure of ``count`` panels of ``width`` x ``height`` inches, at most :data:`COLUMNS`
    a row (and ``legend`` inches beside them), and its ``count`` axes in reading order."""
    columns = min(count, COLUMNS)
    rows = -(-count // columns)
    figure, axes = plt.subplots(
        rows, columns, figsize=(width * columns + legend, height * rows), squeeze=False,
        layout="constrained",
    )  # fmt: skip
    axes = list(axes.ravel())
    for spare in axes[count:]:
        spare.remove()
    return figure, axes[:count]


def read_table(path) -> pd.DataFrame:
    """A table the study wrote; its ``budget`` columns, as runs of before 2026-11-29 named
    the compute scale, renamed ``scale``."""
    table = pd.read_csv(path)
    return table.rename(columns={"budget": "scale", "sampler_budget": "sampler_scale"})


def main(argv=None) -> int:
    """Run the study (:func:`configurations`) and write its tables and figures in ``--out``."""
    args = parse(argv)
    out = Path(args.out)
    if args.figures_only:  # a redraw (after a fix of the summary or the figures)
        if (out / "rows.csv").exists():
            write_csv(summarize(read_table(out / "rows.csv"), args.bootstrap),
                      out / "summary.csv", index=False)  # fmt: skip
        figures(read_table(out / "summary.csv"), read_table(out / "reliability.csv"), out)
        running.log(f"drew the figures of {out}")
        return 0
    import numpyro

    # one CPU device per chain of a unit (fitted in one call), if JAX has not started yet
    numpyro.set_host_device_count(args.chains)

    begin = time.process_time()
    made = configurations(args)
    if not made:
        running.log("nothing to run")
        return 0
    result = running.run(made, out=out / "table.csv", stream=registry.progress(args))
    out.mkdir(parents=True, exist_ok=True)
    rows = rows_of(result, made[0].methods)
    bins = result.reliability.rename(columns={"method": "row", "split_seed": "unit"})
    bins = bins.drop(columns=["R", "seed_set"]).assign(
        dataset=short_names(bins["dataset"]), sampler_scale=max(args.sampler_scales)
    )
    summary = summarize(rows, args.bootstrap)
    write_csv(rows, out / "rows.csv", index=False)
    write_csv(bins, out / "reliability.csv", index=False)
    write_csv(summary, out / "summary.csv", index=False)
    tuning = tuning_of(result.fits.rename(columns={"split_seed": "unit"}))
    if not tuning.empty:
        write_csv(tuning, out / "tuning.csv", index=False)
    shown = [
        "dataset", "row", "scale", "units", "score", "diff_low", "diff_high", "test_perplexity",
        "ece", "cpu_seconds", "pareto",
        *[c for c in ("coverage_90", "mixing") if c in summary],
    ]  # fmt: skip
    with pd.option_context("display.width", 220, "display.max_columns", 20):
        running.log(summary[shown].round(4).to_string(index=False))
    figures(summary, bins, out)
    running.log(f"total {time.process_time() - begin:.0f} CPU s; results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
