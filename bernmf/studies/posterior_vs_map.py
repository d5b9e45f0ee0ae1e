"""The posterior-vs-MAP study: every engine family at matched CPU budgets, single and ensembled.

A configuration of the study runner (:mod:`bernmf.studies.study`). Families (a
:class:`~bernmf.studies.study.Grid` each) and what a budget b scales (``--budgets``, e.g.
1 2 4; the grids' ``budgets`` and ``scaled``):

- ``mm``: the MAP; one fit (``mm``: the ``first`` rule, at the first budget only), the mean
  of ``--restarts`` x b seeds (``mm mean``) and the stack of those seeds on the validation
  entries (``mm stack``: :func:`bernmf.stack`, a weight per seed and the column-frequency
  baseline, no refit);
- ``em``: the prior-free MAP (EM) at mm's rank; the mean (``em mean``) and the stack
  (``em stack``) of ``--restarts`` x b seeds, as mm's;
- ``nuts``: ``--chains`` chains (each started at the ``mm`` fit of its own seed: distinct
  modes) of b x ``--warmup`` + b x ``--samples`` draws, trees of depth at most
  ``--max-tree-depth`` (:data:`MAX_TREE_DEPTH`);
- ``svi_normal``, ``svi_lowrank``: b x ``--svi-steps`` steps (AutoNormal, low-rank guide);
- ``gibbs``: ``--chains`` chains of b x ``--gibbs-samples`` warmup and kept sweeps;
- ``vb``: the mean of b restarts of collapsed VB (CVB0).

Chains that may sit in different modes are never averaged silently: ``nuts`` and
``gibbs`` rows use the runner's ``chains`` rule
(:func:`bernmf.fitting.modes.mode_prediction`): the chains are grouped by mode (their mean
WH, within one posterior sd on 99% of its entries: chains that mixed are one mode), the
R-hat of WH is computed within each mode, across all chains and nested (modes as
superchains); the row is the mean over all draws when at least 99% of the WH entries have
R-hat <= 1.01 across the chains, else the chains mixed by chain stacking on the
validation entries, and it says which (``mixing``, ``rule``).

Every row: test perplexity, validation perplexity, CPU seconds of the process (the
members' fits, their choice and the prediction; compilation excluded: each call of the
fitting runner is made once untimed first, unless ``--no-warmup``), expected calibration
error and reliability bins of the test predictions (the runner's ``ece`` metric) and, on
simulated data, the coverage of the true WH by central 50% and 90% posterior intervals
(``coverage``: of the chains' mixture with their stacking weights when they did not mix;
"no interval" for fits without draws: mm, vb). Parts:

1. **Simulated data with known truth** (``--shape``, default :data:`SHAPES`: 200 x 100,
   K = 4 and 100 x 60, K = 6; W and H drawn from the flat prior; 70% train, 10%
   validation, 20% test; at :data:`SIMULATED_SIZES`: budgets 1 and 2): every Bayesian
   family with the true prior, ``mm`` with its prior chosen on validation at seed 0 and
   the true rank, as on the datasets (the MAP under the flat prior puts entries of W and
   H on 0 or 1).
2. **animals, paleo, lastfm on the paper's split**: ``mm``'s rank and prior chosen on
   validation at seed 0 (ranks 2, 4, 8, 16 x alpha, beta in {1, 1.2, 1.5, 2, 3}, gamma
   = 1); each Bayesian engine at mm's rank (``rank_from``) with its own prior (alpha,
   beta in ``--bayes-values``, default {0.02, 0.1, 0.3, 1}, ``nuts`` {0.05, 0.1, 0.3, 1}:
   :data:`BAYES_VALUES`, :data:`NUTS_VALUES`; gamma = 1) chosen on validation at seed 0
   and the first budget (a sampler: on one chain); then every family at every
   budget over ``--seeds`` seed sets (seed set s: the s-th block of each family's seeds).
   ``--large`` datasets (default :data:`LARGE`: paleo, lastfm) are fitted at
   :data:`LARGE_SIZES` (budget 1, fewer draws, sweeps and steps, shallower NUTS trees, a
   low-rank guide of rank 16, two prior pairs a grid): at the default sizes NUTS alone
   would take hours there. docs/posterior-vs-map.md gives the whole study's cost.

Outputs in ``--out`` (default ``results/posterior_vs_map``): ``rows.csv`` (every row and
seed set), ``summary.csv`` (mean and sd over seed sets per dataset, row and budget, and
whether the row is on the Pareto front of CPU seconds and test perplexity),
``reliability.csv`` (the bins of every row), ``tuning.csv`` (every fit of a choice),
``perplexity_vs_cpu.png`` (test perplexity against CPU seconds per family and dataset),
``reliability.png`` (each dataset's rows at its largest budget, seed set 0),
``coverage.png`` (simulated) and ``table.csv`` (the runner's table, written after every
seed set: what a stopped run keeps). ``--quick`` is a smoke run (24 x 18 simulated data,
K = 2; animals at rank 2 with one Bayesian prior; budgets 1 and 2; one seed set; short
chains; no low-rank guide).

Run: ``bernmf reproduce posterior_vs_map [--quick] [--datasets animals ...]``, or
``python -m bernmf.studies.posterior_vs_map`` for every option.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bernmf.data.files.csv_table import write_csv
from bernmf.plot import pareto_front
from bernmf.studies import study
from bernmf.studies.study import CHOICE, Grid, Method, Simulation, Study

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
"""The MAP families: ``--restarts`` seeds a setting, rows of their mean and their stack
(:func:`row_methods`); mm's own prior grid, none for em."""
RULES = {"nuts": "chains", "gibbs": "chains", "vb": "mean"}
"""Each other family's row rule (:data:`bernmf.studies.study.RULES`); the rest: ``single``."""
BAYES_VALUES = (0.02, 0.1, 0.3, 1.0)
"""alpha and beta of the Bayesian families' prior grids on the datasets (every pair, gamma
= 1), but ``nuts``'s (:data:`NUTS_VALUES`). Measured on animals (paper split, K = 8, the
families' tuning fits, validation perplexity, mean of 2 seeds): with {0.1, 0.3, 1} every
family chose 0.1, the edge; below it ``vb`` went from 0.4049 (0.1, 0.1) to 0.3938 (0.02,
0.02), ``gibbs`` 0.4436 to 0.4173, ``svi`` 0.4894 to 0.4849 (0.02, 0.05), and at 0.005 and
0.01 none improved beyond the spread of its 2 seeds (vb 0.3929 to 0.3962, gibbs 0.4223
to 0.4529, svi 0.4845 to 0.4853). 0.05 found nothing that 0.02 or 0.1 did not (vb 0.3938,
svi 0.4849)."""
NUTS_VALUES = (0.05, 0.1, 0.3, 1.0)
"""``nuts``'s grid: measured as :data:`BAYES_VALUES`, its best pair was (0.05, 0.1),
0.4289 against 0.4357 at (0.1, 0.1); every pair with a 0.02 was worse (0.4317 to 0.5117)
and slow: a 0.02, or a beta of 0.05, costs 20 to 38 CPU s per tuning fit (one chain of 250
+ 250 draws) against 11 to 13 at (0.05, 0.1) and (0.05, 0.3), 7.5 at (0.1, 0.1), 2.5 at
(0.3, 0.3)."""
MM_VALUES = (1.0, 1.2, 1.5, 2.0, 3.0)
RANKS = (2, 4, 8, 16)
DATASETS = ("animals", "paleo", "lastfm")
SHAPES = ((200, 100, 4), (100, 60, 6))
"""M, N and K of the simulated data: data that pins a few components, and fewer entries
for more parameters (where a posterior has more to add)."""
LARGE = ("paleo", "lastfm")
"""The datasets fitted at :data:`LARGE_SIZES`: at mm's rank there (16), NUTS at the default
sizes costs 30 to 40 minutes of CPU per budget unit of 4 chains (docs/posterior-vs-map.md,
"Sizes")."""
LARGE_SIZES = {
    "budgets": (1,), "warmup": 50, "samples": 50, "max_tree_depth": 5, "gibbs_samples": 125,
    "svi_lowrank_steps": 500, "guide_rank": 16, "prior_values": 2,
}  # fmt: skip
"""What :data:`LARGE` datasets fit, over the study's options: budget 1, NUTS chains of 50 +
50 draws of at most 31 leapfrog steps, Gibbs chains of 125 + 125 sweeps, the low-rank
guide of rank 16 for 500 steps, and each Bayesian prior grid's two smallest pairs alpha =
beta. In the run at 2 seed sets and budgets 1 and 2 (250 Gibbs sweeps per unit, 4 values
a grid), doubling the budget moved no Bayesian row but the SVI ones by more than 0.0010,
and every family chose one of its two smallest values (docs/posterior-vs-map.md)."""
SIMULATED_SIZES = {"budgets": (1, 2)}
"""What simulated data fits, over the study's options: budgets 1 and 2. In the run at
budgets 1, 2 and 4 (5 seed sets), no row moved from budget 2 to 4 by more than 0.0014,
about one sd over the seed sets of the row that moved most (mm stack on 100 x 60, worse)."""
MAX_TREE_DEPTH = 8
"""NUTS's ``max_tree_depth`` in the study. At ``nuts``'s chosen prior on animals,
Beta(0.05, 0.05) at K = 8, every draw of one chain of 250 + 250 reached the limit at
depths 10, 8 and 7 (1,023, 255 and 127 leapfrog steps): 36.0, 9.2 and 7.5 CPU s, with
validation perplexities 0.4414, 0.4360 and 0.4370."""
TOP = 1.25
"""The test perplexity axis of a panel ends at this multiple of its best row's."""
COLUMNS = 3
"""Panels per row of a figure (one a dataset or simulation)."""
KEYS = ["dataset", "family", "row", "budget"]
"""The rows of the summary."""


def parse(argv):
    """The options: :func:`bernmf.studies.study.parser`'s and the study's sizes."""
    parser = study.parser(__doc__, "results/posterior_vs_map")
    parser.add_argument("--families", nargs="*", choices=list(FAMILIES), default=None)
    parser.add_argument("--budgets", nargs="*", type=int, default=[1, 2, 4])
    parser.add_argument(
        "--shape", nargs=3, type=int, action="append", metavar=("M", "N", "K"),
        help="of simulated data (repeat for several; default "
        f"{' and '.join(' '.join(map(str, shape)) for shape in SHAPES)})",
    )  # fmt: skip
    parser.add_argument(
        "--bayes-values", nargs="+", type=float, default=None,
        help="alpha and beta values of every Bayesian family's prior grid on the datasets "
        f"(default {' '.join(map(str, BAYES_VALUES))}; nuts {' '.join(map(str, NUTS_VALUES))})",
    )  # fmt: skip
    parser.add_argument("--seeds", type=int, default=5, help="seed sets per row")
    parser.add_argument("--restarts", type=int, default=4, help="mm seeds at budget 1")
    parser.add_argument("--chains", type=int, default=4, help="nuts and gibbs chains")
    parser.add_argument("--warmup", type=int, default=250, help="nuts warmup at budget 1")
    parser.add_argument("--samples", type=int, default=250, help="nuts draws at budget 1")
    parser.add_argument("--gibbs-samples", type=int, default=250, help="at budget 1")
    parser.add_argument("--svi-steps", type=int, default=1250, help="at budget 1")
    parser.add_argument(
        "--large", nargs="*", default=list(LARGE), choices=list(DATASETS),
        help="datasets fitted at the large sizes (LARGE_SIZES)",
    )  # fmt: skip
    parser.add_argument(
        "--dtype", default="float64", choices=("float64", "float32"), help="of nuts and svi"
    )
    parser.add_argument("--target-accept", type=float, default=0.8, help="NUTS target_accept_prob")
    parser.add_argument(
        "--max-tree-depth", type=int, default=MAX_TREE_DEPTH,
        help="NUTS max_tree_depth (caps cost per draw)",
    )  # fmt: skip
    parser.add_argument("--workers", type=int, default=2, help="threads of the mm grid")
    parser.add_argument(
        "--no-warmup",
        action="store_true",
        help="no untimed first call of each fit: CPU seconds then include compiling",
    )
    parser.add_argument("--skip-simulated", action="store_true")
    parser.add_argument("--skip-datasets", action="store_true")
    parser.add_argument(
        "--figures-only", action="store_true",
        help="draw the figures again from summary.csv and reliability.csv in --out; fit nothing",
    )  # fmt: skip
    args = parser.parse_args(argv)
    args.shapes = [tuple(shape) for shape in args.shape or SHAPES]
    args.ranks, args.mm_values = RANKS, MM_VALUES
    args.svi_lowrank_steps = args.guide_rank = None  # the low-rank guide as svi's
    args.bayes_priors = {}  # Bayesian family -> its (alpha, beta) pairs on the datasets
    for family, (engine, _) in FAMILIES.items():
        if family in MAP_FAMILIES:
            continue
        values = sorted(args.bayes_values or (NUTS_VALUES if engine == "nuts" else BAYES_VALUES))
        args.bayes_priors[family] = list(itertools.product(values, values))
    args.families = args.families or list(FAMILIES)
    if args.quick:
        args.shapes = [(24, 18, 2)]
        args.datasets = args.datasets or ["animals"]
        args.seeds, args.budgets, args.restarts, args.chains = 1, [1, 2], 2, 2
        args.warmup, args.samples, args.gibbs_samples, args.svi_steps = 30, 30, 30, 200
        args.ranks, args.mm_values = (2,), (1.0, 1.5)
        args.bayes_priors = {family: [(0.5, 0.5)] for family in args.bayes_priors}
        args.families = [f for f in args.families if f != "svi_lowrank"]
    if not args.budgets or min(args.budgets) < 1:
        parser.error("--budgets must be positive integers")
    args.budgets = tuple(sorted(set(args.budgets)))
    args.datasets = [] if args.skip_datasets else (args.datasets or list(DATASETS))
    return args


def family_grid(family: str, ranks, priors, args, rank_from=None) -> Grid:
    """The grid of one family: its engine's options at budget 1 and what a budget scales."""
    engine, options = FAMILIES[family]
    options, members, scaled = dict(options), 1, ()
    if family in (*MAP_FAMILIES, "vb"):
        members, scaled = 1 if family == "vb" else args.restarts, ("members",)
    elif engine == "nuts":
        options |= {"num_warmup": args.warmup, "num_samples": args.samples}
        options |= {"target_accept_prob": args.target_accept}
        options["max_tree_depth"] = args.max_tree_depth
        members, scaled = args.chains, ("num_warmup", "num_samples")
    elif engine == "svi":
        options["steps"], scaled = args.svi_steps, ("steps",)
        if family == "svi_lowrank":
            options["steps"] = args.svi_lowrank_steps or args.svi_steps
            if args.guide_rank is not None:
                options["guide_rank"] = args.guide_rank
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
        engine, tuple(ranks), None if priors is None else tuple(priors), options,
        batching=batching, members=members,
        name=family, budgets=args.budgets, scaled=scaled, rank_from=rank_from,
    )  # fmt: skip


def sized(args, sizes: dict):
    """The options of a part of the study: ``args`` with ``sizes`` over them
    (:data:`SIMULATED_SIZES`, :data:`LARGE_SIZES`): its budgets those of ``--budgets``
    among the sizes' (else the first), and with ``prior_values`` v, each Bayesian prior
    grid cut to its v smallest pairs alpha = beta."""
    sizes = dict(sizes)
    sizes["budgets"] = tuple(b for b in args.budgets if b in sizes["budgets"]) or args.budgets[:1]
    values = sizes.pop("prior_values", None)
    part = argparse.Namespace(**{**vars(args), **sizes})
    if values is not None:
        part.bayes_priors = {
            family: [(a, b) for a, b in pairs if a == b][:values]
            for family, pairs in args.bayes_priors.items()
        }
    return part


def row_methods(args) -> tuple[Method, ...]:
    """The rows: ``mm`` (one fit, first budget), ``mm mean``, ``mm stack``, ``em mean``,
    ``em stack``, and each other family by its rule (:data:`RULES`)."""
    made = []
    for family in args.families:
        if family == "mm":
            made.append(Method("mm", "first", ("mm",), budgets=args.budgets[:1]))
        if family in MAP_FAMILIES:
            made += [
                Method(f"{family} mean", "mean", (family,)),
                Method(f"{family} stack", "stack chosen", (family,)),
            ]
        else:
            made.append(Method(family, RULES.get(family, "single"), (family,)))
    return tuple(made)


def _study(args, grids, **data) -> Study:
    """A part of the study: its grids and data, the rows and metrics of every part."""
    return Study(
        "posterior_vs_map", grids, row_methods(args), seed_sets=args.seeds,
        warmup=not args.no_warmup, metrics=("ece", "coverage", "mixing"), choose_seed=0,
        **data,
    )  # fmt: skip


def configurations(args) -> list[Study]:
    """Part 1 (a study per simulated shape: the Bayesian engines with the true prior, mm's
    chosen on validation) and part 2 (the datasets, every prior chosen on validation; the
    :data:`LARGE` ones at their sizes)."""
    mm_priors = [(a, b, 1.0) for a, b in itertools.product(args.mm_values, repeat=2)]

    def priors(family: str, part, simulated: bool):
        if family in MAP_FAMILIES:
            return mm_priors if family == "mm" else None
        return (
            ((1.0, 1.0, 1.0),) if simulated else [(a, b, 1.0) for a, b in part.bayes_priors[family]]
        )

    made = []
    part = sized(args, SIMULATED_SIZES)
    for M, N, K in [] if args.skip_simulated else args.shapes:
        grids = tuple(family_grid(f, (K,), priors(f, part, True), part) for f in part.families)
        made.append(
            _study(
                part, grids, simulations=(Simulation(M, N, K),), split="random",
                fractions=(0.7, 0.1, 0.2),
            )
        )  # fmt: skip
    for large in (False, True):
        names = tuple(d for d in args.datasets if (d in args.large) == large)
        if not names:
            continue
        part = sized(args, LARGE_SIZES) if large else args
        rank_from = "mm" if "mm" in part.families else None
        grids = tuple(
            family_grid(
                f, part.ranks, priors(f, part, False), part, None if f == "mm" else rank_from
            )
            for f in part.families
        )
        made.append(_study(part, grids, datasets=names, data_dir=args.data_dir))
    return made


def rows_of(result: study.StudyResult, methods: tuple[Method, ...]) -> pd.DataFrame:
    """The runner's table as the study's rows: family, row, budget, seed (the seed set),
    the chains' rule (``rule``) and the metrics."""
    table = result.table
    family = {m.name: m.grids[0] for m in methods}
    rows = table.drop(columns=["seed", "rule", "study"]).rename(
        columns={"seed_set": "seed", "method": "row", "chain_rule": "rule"}
    )
    rows.insert(1, "family", rows["row"].map(family))
    return rows.assign(dataset=short_names(rows["dataset"]))


def short_names(names: pd.Series) -> pd.Series:
    """The dataset column with each simulation's name as ``simulated MxN K=k``."""
    return names.str.replace(
        r"^simulated-(\d+x\d+)-K(\d+)-seed\d+$", r"simulated \1 K=\2", regex=True
    )


def summarize(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean and sd over seed sets per dataset, row and budget, and the Pareto front of CPU
    seconds against test perplexity within each dataset."""
    numbers = [
        c for c in rows.columns if c not in [*KEYS, "seed", "R"] and rows[c].dtype.kind in "fi"
    ]
    grouped = rows.groupby(KEYS, sort=False)
    summary = grouped[numbers].mean().reset_index()
    summary["test_perplexity_sd"] = grouped["test_perplexity"].std().to_numpy()
    for column in ("coverage_50", "coverage_90", "mixing", "rule"):
        if column in rows and column not in summary:  # a mean, or the first seed set's text
            summary[column] = grouped[column].agg(_mean_or_text).to_numpy()
    pareto = np.zeros(len(summary), bool)
    for _, group in summary.groupby("dataset", sort=False):
        pareto[group.index] = pareto_front(group["cpu_seconds"], group["test_perplexity"])
    return summary.assign(pareto=pareto)


def _mean_or_text(values: pd.Series):
    """The mean of a column's numbers, or its first value when it holds none (text, NaN)."""
    numbers = pd.to_numeric(values, errors="coerce")
    return numbers.mean() if numbers.notna().any() else values.iloc[0]


def tuning_of(fits: pd.DataFrame) -> pd.DataFrame:
    """Every fit of a choice (at seed 0): dataset, family, rank, prior, validation
    perplexity and whether it was chosen (the least per dataset and family)."""
    choices = fits[fits["stage"] == CHOICE] if "stage" in fits else fits.iloc[:0]
    table = choices[["dataset", "grid", "rank", "alpha", "beta", "validation_perplexity"]]
    table = table.rename(columns={"grid": "engine"}).reset_index(drop=True)
    table = table.assign(dataset=short_names(table["dataset"]))
    least = table.groupby(["dataset", "engine"])["validation_perplexity"].transform("min")
    return table.assign(chosen=table["validation_perplexity"] == least)


def figures(summary: pd.DataFrame, bins: pd.DataFrame, out: Path) -> None:
    """The three PNGs, legends outside the axes, a colour per row in all of them; the
    reliability diagrams of seed 0 at each dataset's largest budget (``mm``, one fit, at
    the first), each labelled with its own ECE."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    names = list(dict.fromkeys(summary["dataset"]))
    colour = {row: f"C{i % 10}" for i, row in enumerate(dict.fromkeys(summary["row"]))}
    figure, axes = _panels(plt, len(names), 4, 3.6, 1.6)
    for axis, name in zip(axes, names, strict=True):
        for label, rows in summary[summary["dataset"] == name].groupby("row", sort=False):
            axis.errorbar(
                rows["cpu_seconds"], rows["test_perplexity"],
                yerr=rows["test_perplexity_sd"].fillna(0), marker="o", markersize=4, label=label,
                color=colour[label],
            )  # fmt: skip
        subtitle = axis_top(summary[summary["dataset"] == name], axis)
        axis.set_title(f"{name}{subtitle}", fontsize=9 if subtitle else None)
        front = summary[(summary["dataset"] == name) & summary["pareto"]]
        axis.scatter(front["cpu_seconds"], front["test_perplexity"], s=120, facecolors="none",
                     edgecolors="black", label="Pareto front")  # fmt: skip
        axis.set_xscale("log")
        axis.xaxis.set_major_locator(LogLocator(subs=(1.0, 3.0)))  # labelled under a decade too
        axis.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        axis.xaxis.set_minor_formatter(NullFormatter())
        axis.tick_params(axis="x", labelsize=8)
        axis.set_xlabel("CPU seconds per fit (log scale)")
        axis.set_ylabel("test perplexity (nats per entry)")
    legend = {}  # label -> handle, over the panels: one legend for the figure
    for axis in axes:
        for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    figure.legend(legend.values(), legend.keys(), loc="outside right upper", fontsize=8)
    figure.savefig(out / "perplexity_vs_cpu.png", dpi=110)
    plt.close(figure)

    first = bins["seed"] == 0
    largest = bins.groupby("dataset")["budget"].transform("max")
    shown = bins[first & (bins["budget"] == largest) & (bins["row"] != "mm")]
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
        axis.set_title(f"{name}, budget {table['budget'].max()}, seed 0")
        axis.set_aspect("equal")
        axis.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=2)
    figure.savefig(out / "reliability.png", dpi=110, bbox_inches="tight")  # the legends below
    plt.close(figure)

    if "coverage_90" not in summary:
        return
    covered = summary[pd.to_numeric(summary["coverage_90"], errors="coerce").notna()]
    simulations = list(dict.fromkeys(covered["dataset"]))
    if not simulations:
        return
    figure, axes = _panels(plt, len(simulations), 6, 3.6, 1.6)
    for axis, name in zip(axes, simulations, strict=True):
        rows = covered[covered["dataset"] == name]
        labels = [f"{r} b{b}" for r, b in zip(rows["row"], rows["budget"], strict=True)]
        x = range(len(rows))
        for offset, level in ((-0.2, 50), (0.2, 90)):
            values = rows[f"coverage_{level}"].astype(float)
            axis.bar([i + offset for i in x], values, width=0.4, color=f"C{level // 90}",
                     label=f"{level}% interval")  # fmt: skip
            axis.axhline(level / 100, color="gray", linestyle=":", linewidth=1,
                         label="nominal levels" if level == 90 else None)  # fmt: skip
        axis.set_xticks(list(x), labels, rotation=30, fontsize=8)
        axis.set_xlabel("row and budget (b), mean over seeds")
        axis.set_ylabel("share of true WH entries\ninside the interval")
        axis.set_ylim(0, 1)
        axis.set_title(name)
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, fontsize=8, loc="outside right upper")
    figure.savefig(out / "coverage.png", dpi=110)
    plt.close(figure)


def axis_top(rows: pd.DataFrame, axis) -> str:
    """Cut a panel's test perplexity axis at :data:`TOP` times its best row's where a row
    lies above, and say which rows the panel leaves out: above the cut (their least value
    there) or inf (a test entry given probability 0: no point to draw)."""
    perplexity = rows["test_perplexity"]
    top = TOP * perplexity.min()
    said = []
    for label, values in perplexity.groupby(rows["row"], sort=False):
        if np.isinf(values).any():
            said.append(f"{label} inf")
        elif (values > top).any():
            said.append(f"{label} {values[values > top].min():.3f}")
    if (np.isfinite(perplexity) & (perplexity > top)).any():
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


def main(argv=None) -> int:
    """Run the study (:func:`configurations`) and write its tables and figures in ``--out``."""
    args = parse(argv)
    if args.figures_only:  # a redraw (after a plotting fix, or of a finished run)
        out = Path(args.out)
        figures(pd.read_csv(out / "summary.csv"), pd.read_csv(out / "reliability.csv"), out)
        study.log(f"drew the figures of {out}")
        return 0
    import numpyro

    # one CPU device per chain of a seed set (fitted in one call), if JAX has not started yet
    numpyro.set_host_device_count(args.chains)

    begin = time.process_time()
    made = configurations(args)
    if not made:
        study.log("nothing to run")
        return 0
    out = Path(args.out)
    result = study.run(made, out=out / "table.csv", stream=study.progress(args))
    out.mkdir(parents=True, exist_ok=True)
    rows = rows_of(result, made[0].methods)
    bins = result.reliability.rename(columns={"method": "row", "seed_set": "seed"})
    bins = bins.assign(dataset=short_names(bins["dataset"]))
    summary = summarize(rows)
    write_csv(rows, out / "rows.csv", index=False)
    write_csv(bins, out / "reliability.csv", index=False)
    write_csv(summary, out / "summary.csv", index=False)
    tuning = tuning_of(result.fits)
    if not tuning.empty:
        write_csv(tuning, out / "tuning.csv", index=False)
    shown = [
        "dataset", "row", "budget", "test_perplexity", "ece", "cpu_seconds", "pareto",
        *[c for c in ("coverage_50", "coverage_90", "mixing", "rule") if c in summary],
    ]  # fmt: skip
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        study.log(summary[shown].round(4).to_string(index=False))
    figures(summary, bins, out)
    study.log(f"total {time.process_time() - begin:.0f} CPU s; results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
