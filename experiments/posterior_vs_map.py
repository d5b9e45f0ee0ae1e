"""The posterior-vs-MAP study: every engine family at matched CPU budgets, single and ensembled.

Families and what a budget b scales (``--budgets``, e.g. 1 2 4):

- ``mm``: the MAP; one fit (``mm``, at the first budget only), the mean of ``--restarts``
  x b seeds (``mm mean``: ``bernmf.fit(..., restarts=R, combine="mean")``) and the stack
  of those seeds on the validation entries (``mm stack``: :func:`bernmf.stack`, a weight
  per seed and the column-frequency baseline, no refit);
- ``nuts``: ``--chains`` chains (each started at the ``mm`` fit of its own seed: distinct
  modes) of b x ``--warmup`` + b x ``--samples`` draws;
- ``svi_normal``, ``svi_lowrank``: b x ``--svi-steps`` steps (AutoNormal, low-rank guide);
- ``gibbs``: ``--chains`` chains of b x ``--gibbs-samples`` warmup and kept sweeps;
- ``vb``: the mean of b restarts of collapsed VB (CVB0).

Chains that may sit in different modes are never averaged silently: for ``nuts`` and
``gibbs`` the prediction is :func:`bernmf.fitting.modes.mode_prediction`: the chains are
grouped by mode (their mean H), the R-hat of WH is computed within each mode, across all
chains and nested (modes as superchains); the row is the mean over all draws when at
least 99% of the WH entries have R-hat <= 1.01 across the chains, else the chains mixed
by chain stacking on the validation entries, and it says which (``mixing``, ``rule``).

Every row: test perplexity, validation perplexity, CPU seconds of the process (fit and
prediction, all threads; the machine's other load does not count; compilation excluded: an
untimed run of each family and budget comes first, unless ``--no-warmup``),
expected calibration error and reliability bins of the test predictions
(:func:`bernmf.posterior.calibration.reliability`) and, on simulated data, the coverage of
the true WH by central 50% and 90% posterior intervals
(:func:`bernmf.posterior.calibration.interval_coverage`, of the chains' mixture with their
stacking weights when they did not mix; "no interval" for fits without draws: mm, vb). Parts:

1. **Simulated data with known truth** (``--shape``, default 200 x 100, K = 4; W and H
   drawn from the flat prior; 70% train, 10% validation, 20% test): every Bayesian family
   with the true prior, ``mm`` with its prior tuned on validation at the true rank.
2. **animals, paleo, lastfm on the paper's split**: ``mm``'s rank and prior tuned as in
   the paper (:func:`bernmf.tune.grid`); each Bayesian engine at mm's rank with its own
   prior (alpha, beta in ``--bayes-values``, default {0.1, 0.3, 1}, gamma = 1) chosen on
   validation at the first budget; then every family at every budget over ``--seeds``
   seeds.

Outputs in ``--out`` (default ``results/posterior_vs_map``): ``rows.csv`` (every row and
seed), ``summary.csv`` (mean and sd over seeds per dataset, row and budget, and whether
the row is on the Pareto front of CPU seconds and test perplexity), ``reliability.csv``
(the bins of every row), ``tuning.csv``, ``perplexity_vs_cpu.png`` (test perplexity
against CPU seconds per family and dataset), ``reliability.png`` (each dataset's rows at
the largest budget, seed 0) and ``coverage.png`` (simulated). ``--quick`` is a smoke run
(24 x 18 simulated data; animals at rank 2 with one prior; budgets 1 and 2; one seed;
short chains; no low-rank guide).

Run: ``python experiments/posterior_vs_map.py [--data-dir DIR] [--quick]``
(NUTS chains run in parallel: this script calls ``numpyro.set_host_device_count``
before JAX starts).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

FAMILIES = {
    "mm": ("mm", {}),
    "nuts": ("nuts", {}),
    "svi_normal": ("svi", {"guide": "AutoNormal"}),
    "svi_lowrank": ("svi", {"guide": "AutoLowRankMultivariateNormal"}),
    "gibbs": ("gibbs", {}),
    "vb": ("vb", {}),
}
CHAINED = ("nuts", "gibbs")
"""Families whose chains may sit in different modes: predicted by ``mode_prediction``."""
BAYES_VALUES = (0.1, 0.3, 1.0)
MM_VALUES = (1.0, 1.2, 1.5, 2.0, 3.0)
RANKS = (2, 4, 8, 16)
DATASETS = ("animals", "paleo", "lastfm")
SEED_SPACING = 1000
"""Seed set s fits with seed 1000 s: its members and chains (seeds 1000 s + r) are disjoint
from those of the other seed sets."""


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--out", type=Path, default=Path("results/posterior_vs_map"))
    parser.add_argument("--datasets", nargs="*", default=None)
    parser.add_argument("--families", nargs="*", choices=list(FAMILIES), default=None)
    parser.add_argument("--budgets", nargs="*", type=int, default=[1, 2, 4])
    parser.add_argument(
        "--shape", nargs=3, type=int, default=[200, 100, 4], metavar=("M", "N", "K"),
        help="of the simulated data",
    )  # fmt: skip
    parser.add_argument(
        "--bayes-values", nargs="+", type=float, default=list(BAYES_VALUES),
        help="alpha and beta values of the Bayesian engines' prior grid on the datasets",
    )  # fmt: skip
    parser.add_argument("--seeds", type=int, default=3, help="seed sets per row")
    parser.add_argument("--restarts", type=int, default=4, help="mm seeds at budget 1")
    parser.add_argument("--chains", type=int, default=4, help="nuts and gibbs chains")
    parser.add_argument("--warmup", type=int, default=250, help="nuts warmup at budget 1")
    parser.add_argument("--samples", type=int, default=250, help="nuts draws at budget 1")
    parser.add_argument("--gibbs-samples", type=int, default=250, help="at budget 1")
    parser.add_argument("--svi-steps", type=int, default=1250, help="at budget 1")
    parser.add_argument(
        "--dtype", default="float64", choices=("float64", "float32"), help="of nuts and svi"
    )
    parser.add_argument("--target-accept", type=float, default=0.8, help="NUTS target_accept_prob")
    parser.add_argument(
        "--max-tree-depth", type=int, default=10, help="NUTS max_tree_depth (caps cost per draw)"
    )
    parser.add_argument("--workers", type=int, default=2, help="threads of the mm grid")
    parser.add_argument(
        "--no-warmup",
        action="store_true",
        help="no untimed first run of each family and budget: CPU seconds then include "
        "compiling (nuts compiles again for each number of draws)",
    )
    parser.add_argument("--skip-simulated", action="store_true")
    parser.add_argument("--skip-datasets", action="store_true")
    parser.add_argument(
        "--figures-only", action="store_true",
        help="draw the figures again from summary.csv and reliability.csv in --out; fit nothing",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--quiet", action="store_true", help="no progress lines from the engines")
    args = parser.parse_args(argv)
    args.shape = tuple(args.shape)
    args.ranks, args.mm_values = RANKS, MM_VALUES
    args.bayes_priors = list(itertools.product(args.bayes_values, args.bayes_values))
    args.families = args.families or list(FAMILIES)
    if args.quick:
        args.shape = (24, 18, 2)
        args.datasets = args.datasets or ["animals"]
        args.seeds, args.budgets, args.restarts, args.chains = 1, [1, 2], 2, 2
        args.warmup, args.samples, args.gibbs_samples, args.svi_steps = 30, 30, 30, 200
        args.ranks, args.mm_values = (2,), (1.0, 1.5)
        args.bayes_priors = [(0.5, 0.5)]
        args.families = [f for f in args.families if f != "svi_lowrank"]
    if not args.budgets or min(args.budgets) < 1:
        raise SystemExit("--budgets must be positive integers")
    args.budgets = sorted(set(args.budgets))
    args.datasets = [] if args.skip_datasets else (args.datasets or list(DATASETS))
    return args


def log(message: str) -> None:
    print(message, flush=True)


def family_options(family: str, budget: int, args) -> tuple[str, dict, int, str]:
    """``(engine, options, restarts, combine)`` of one family at budget ``budget``."""
    engine, options = FAMILIES[family]
    options = dict(options)
    restarts, combine = 1, "best"
    if family == "mm":
        restarts, combine = args.restarts * budget, "mean"
    elif family == "vb":
        restarts, combine = budget, "mean"
    elif engine == "nuts":
        options.update(
            num_chains=args.chains,
            num_warmup=args.warmup * budget,
            num_samples=args.samples * budget,
            target_accept_prob=args.target_accept,
            max_tree_depth=args.max_tree_depth,
        )
    elif engine == "svi":
        options.update(steps=args.svi_steps * budget)
    elif engine == "gibbs":
        n = args.gibbs_samples * budget
        options.update(num_chains=args.chains, num_warmup=n, num_samples=n)
    if engine in ("nuts", "svi", "gibbs"):
        options.update(progress=not args.quiet)
    if engine in ("nuts", "svi"):
        options.update(dtype=args.dtype)
    return engine, options, restarts, combine


def predictions(Y, split, family: str, budget: int, rank, prior, seed, args):
    """The rows of one family at one budget and seed: a list of ``(row, probs, draws, CPU
    seconds, extra columns)``; ``draws``: the keyword arguments of
    :func:`~bernmf.posterior.calibration.interval_coverage` (W and H draws and the chains'
    weights when chain-stacked), empty for a fit without draws."""
    import numpy as np

    import bernmf
    from bernmf.fitting.modes import mode_prediction

    engine, options, restarts, combine = family_options(family, budget, args)
    rows = []
    if family == "mm" and budget == args.budgets[0]:
        begin = time.process_time()
        single = bernmf.fit(Y, "mm", rank=rank, mask=split.train, prior=prior, seed=seed)
        rows.append(("mm", single.probs, {}, time.process_time() - begin, {}))
    begin = time.process_time()
    fit = bernmf.fit(
        Y, engine, rank=rank, mask=split.train, prior=prior, seed=seed,
        restarts=restarts, combine=combine, **options,
    )  # fmt: skip
    seconds = time.process_time() - begin
    draws = {"W_draws": fit.draws["W"], "H_draws": fit.draws["H"]} if fit.draws else {}
    if family == "mm":
        rows.append(("mm mean", fit.probs, {}, seconds, {"members": restarts}))
        begin = time.process_time()
        stacked = bernmf.stack([fit], Y, validation=split.validation, seeds="stack")
        rows.append(("mm stack", stacked.probs, {}, seconds + time.process_time() - begin, {}))
        return rows
    if family not in CHAINED:
        return [(family, fit.probs, draws, seconds, {})]
    begin = time.process_time()
    mode = mode_prediction(
        Y, split.train, fit.draws["W"], fit.draws["H"], validation=split.validation
    )
    seconds += time.process_time() - begin
    table = mode.rhat.table()
    modes = table.index.str.startswith("mode ")
    diverging = fit.sample_stats.get("diverging")
    extra = {
        "mixing": mode.status,
        "rule": mode.rule,
        "modes": int(modes.sum()),
        "share_rhat_within_min": table.loc[modes, "share_rhat_le_1.01"].min(),
        "share_rhat_across": table.loc["all", "share_rhat_le_1.01"],
        "rhat_nested_max": table.loc["nested", "rhat_max"] if "nested" in table.index else np.nan,
        "divergences": 0 if diverging is None else int(np.asarray(diverging).sum()),
    }
    if mode.rule == "chain stacking":
        draws["chain_weights"] = mode.weights
    return [(family, mode.probs, draws, seconds, extra)]


def score_rows(name, Y, split, rank, priors, args, truth=None):
    """Every family at every budget and seed on one split. Returns (rows, reliability bins)."""
    import numpy as np
    import pandas as pd

    import bernmf
    from bernmf.posterior.calibration import interval_coverage, reliability

    rows, bins = [], []
    for family, budget, seed in itertools.product(args.families, args.budgets, range(args.seeds)):
        prior = priors[FAMILIES[family][0]]
        if seed == 0 and not args.no_warmup:  # compile untimed, with a seed of no row
            predictions(Y, split, family, budget, rank, prior, SEED_SPACING * args.seeds, args)
        for label, probs, draws, seconds, extra in predictions(
            Y, split, family, budget, rank, prior, SEED_SPACING * seed, args
        ):
            diagram = reliability(Y, probs, split.test)
            row = {
                "dataset": name,
                "family": family,
                "row": label,
                "budget": budget,
                "seed": seed,
                "rank": rank,
                "alpha": float(np.mean(prior.alpha)),
                "beta": float(np.mean(prior.beta)),
                "test_perplexity": bernmf.perplexity(Y, probs, split.test),
                "validation_perplexity": bernmf.perplexity(Y, probs, split.validation),
                "ece": diagram.ece,
                "cpu_seconds": seconds,
                **extra,
            }
            if truth is not None:
                row.update(interval_coverage(truth, **draws).row())
            rows.append(row)
            keys = {k: row[k] for k in ("dataset", "row", "budget", "seed")}
            bins.append(diagram.table.assign(**keys))
            log(
                f"  {label} budget {budget} seed {seed}: test {row['test_perplexity']:.4f}, "
                f"ECE {row['ece']:.3f}, {seconds:.1f} CPU s"
                + (f", {extra['mixing']} ({extra['rule']})" if "mixing" in extra else "")
            )
    return rows, pd.concat(bins, ignore_index=True)


def simulated_study(args):
    """Part 1: the Bayesian engines with the true (flat) prior; ``mm`` with its prior tuned
    on validation at the true rank, as on the datasets (the MAP under the flat prior puts
    entries of W and H on 0 or 1). Returns (rows, reliability bins, tuning rows)."""
    import bernmf
    from bernmf.data.split import random_split

    M, N, K = args.shape
    prior = bernmf.Prior(1.0, 1.0, 1.0)
    Y, W, H = bernmf.simulate(0, M, N, K, prior)
    split = random_split(Y.shape, (0.7, 0.1, 0.2), seed=0)
    truth = W @ H
    log(
        f"== simulated {M} x {N}, K={K}, flat prior; truth's test perplexity "
        f"{bernmf.perplexity(Y, truth, split.test):.4f}"
    )
    priors = dict.fromkeys((FAMILIES[f][0] for f in args.families), prior)
    _, priors["mm"], tuning_row = tune_mm("simulated", Y, split, (K,), args)
    rows, bins = score_rows("simulated", Y, split, K, priors, args, truth=truth)
    return rows, bins, [tuning_row]


def tune_mm(name, data, split, ranks, args):
    """mm's rank (among ``ranks``) and prior by :func:`bernmf.tune.grid` on validation.
    Returns (rank, prior, tuning row)."""
    import bernmf
    from bernmf import tune

    begin = time.perf_counter()
    tuning = tune.grid(
        data, ranks, args.mm_values, args.mm_values, mask=split.train,
        validation=split.validation, gamma=1.0, workers=args.workers, progress=not args.quiet,
    )  # fmt: skip
    rank, best = tuning.best["rank"], tuning.best
    log(
        f"  mm tuned on validation: K={rank}, alpha={best['alpha']:g}, beta={best['beta']:g}, "
        f"{time.perf_counter() - begin:.0f} s"
    )
    row = {
        "dataset": name, "engine": "mm", "rank": rank, "alpha": best["alpha"],
        "beta": best["beta"], "validation_perplexity": best["validation_perplexity"],
        "chosen": True,
    }  # fmt: skip
    return rank, bernmf.Prior(best["alpha"], best["beta"], 1.0), row


def tune_priors(name, data, split, args):
    """mm's rank and prior by :func:`bernmf.tune.grid`, each Bayesian engine's prior on
    validation at the first budget (by ``fit.probs``: for nuts and gibbs the mean of the
    chains, mixed or not). Returns (rank, priors by engine, tuning rows)."""
    import bernmf

    rank, mm_prior, tuning_row = tune_mm(name, data, split, args.ranks, args)
    priors, tuning_rows = {"mm": mm_prior}, [tuning_row]
    engines = dict.fromkeys(FAMILIES[f][0] for f in args.families if f != "mm")
    for engine in engines:
        family = next(f for f in args.families if FAMILIES[f][0] == engine)
        _, options, restarts, combine = family_options(family, args.budgets[0], args)
        scores = {}
        for alpha, beta in args.bayes_priors:
            prior = bernmf.Prior(alpha, beta, 1.0)
            if len(args.bayes_priors) > 1:
                fit = bernmf.fit(
                    data, engine, rank=rank, mask=split.train, prior=prior, restarts=restarts,
                    combine=combine, **options,
                )  # fmt: skip
                score = scores[alpha, beta] = fit.perplexity(data, split.validation)
                log(f"  {engine} alpha={alpha:g} beta={beta:g}: validation {score:.4f}")
            else:
                scores[alpha, beta] = float("nan")
        chosen = min(scores, key=lambda key: (scores[key], key))
        priors[engine] = bernmf.Prior(*chosen, 1.0)
        tuning_rows += [
            {"dataset": name, "engine": engine, "rank": rank, "alpha": a, "beta": b,
             "validation_perplexity": score, "chosen": (a, b) == chosen}
            for (a, b), score in scores.items()
        ]  # fmt: skip
    return rank, priors, tuning_rows


def dataset_study(name, args):
    """Part 2 for one dataset. Returns (rows, reliability bins, tuning rows)."""
    import numpy as np

    from bernmf.data import datasets
    from bernmf.data.split import paper_split

    data = datasets.load(name, data_dir=args.data_dir)
    split = paper_split(data.shape)
    log(f"== {name} {data.shape}")
    rank, priors, tuning_rows = tune_priors(name, data, split, args)
    rows, bins = score_rows(name, np.asarray(data, float), split, rank, priors, args)
    return rows, bins, tuning_rows


def _mean_or_text(values):
    """The mean of a column's numbers, or its first value when it holds none (text, NaN)."""
    import pandas as pd

    numbers = pd.to_numeric(values, errors="coerce")
    return numbers.mean() if numbers.notna().any() else values.iloc[0]


def summarize(rows):
    """Mean and sd over seeds per dataset, row and budget, and the Pareto front of CPU
    seconds against test perplexity within each dataset."""
    import numpy as np

    keys = ["dataset", "family", "row", "budget"]
    numbers = [c for c in rows.columns if c not in [*keys, "seed"] and rows[c].dtype.kind in "fi"]
    summary = rows.groupby(keys, sort=False)[numbers].mean().reset_index()
    summary["test_perplexity_sd"] = (
        rows.groupby(keys, sort=False)["test_perplexity"].std().to_numpy()
    )
    for column in ("coverage_50", "coverage_90", "mixing", "rule"):
        if column in rows and column not in summary:  # a mean, or the first seed's text
            summary[column] = rows.groupby(keys, sort=False)[column].agg(_mean_or_text).to_numpy()
    pareto = np.zeros(len(summary), bool)
    for _, group in summary.groupby("dataset", sort=False):
        cpu, score = group["cpu_seconds"].to_numpy(), group["test_perplexity"].to_numpy()
        for i, index in enumerate(group.index):
            dominated = (
                (cpu <= cpu[i]) & (score <= score[i]) & ((cpu < cpu[i]) | (score < score[i]))
            )
            pareto[index] = not dominated.any()
    return summary.assign(pareto=pareto)


def figures(summary, bins, out: Path) -> None:
    """The three PNGs, legends outside the axes; the reliability diagrams of seed 0 at the
    largest budget (``mm``, one fit, at the first), each labelled with its own ECE."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    names = list(dict.fromkeys(summary["dataset"]))
    figure, axes = plt.subplots(
        1, len(names), figsize=(4 * len(names) + 1.6, 3.6), squeeze=False, layout="constrained"
    )
    for axis, name in zip(axes[0], names, strict=True):
        for label, rows in summary[summary["dataset"] == name].groupby("row", sort=False):
            axis.errorbar(
                rows["cpu_seconds"], rows["test_perplexity"],
                yerr=rows["test_perplexity_sd"].fillna(0), marker="o", markersize=4, label=label,
            )  # fmt: skip
        front = summary[(summary["dataset"] == name) & summary["pareto"]]
        axis.scatter(front["cpu_seconds"], front["test_perplexity"], s=120, facecolors="none",
                     edgecolors="black", label="Pareto front")  # fmt: skip
        axis.set_xscale("log")
        axis.set_xlabel("CPU seconds per fit (log scale)")
        axis.set_ylabel("test perplexity (nats per entry)")
        axis.set_title(name)
    legend = {}  # label -> handle, over the panels: one legend for the figure
    for axis in axes[0]:
        for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    figure.legend(legend.values(), legend.keys(), loc="outside right upper", fontsize=8)
    figure.savefig(out / "perplexity_vs_cpu.png", dpi=110)
    plt.close(figure)

    first = bins["seed"] == 0
    shown = bins[first & (bins["budget"] == bins["budget"].max()) & (bins["row"] != "mm")]
    shown = pd.concat([shown, bins[first & (bins["row"] == "mm")]])
    figure, axes = plt.subplots(
        1, len(names), figsize=(4.2 * len(names), 5.4), squeeze=False, layout="constrained"
    )
    for axis, name in zip(axes[0], names, strict=True):
        axis.plot([0, 1], [0, 1], color="gray", linestyle=":", linewidth=1)
        for label, table in shown[shown["dataset"] == name].groupby("row", sort=False):
            ece = (table["count"] * (table["predicted"] - table["observed"]).abs()).sum()
            axis.plot(table["predicted"], table["observed"], marker="o", markersize=3,
                      label=f"{label} (ECE {ece / table['count'].sum():.3f})")  # fmt: skip
        axis.set_xlabel("predicted P(Y=1), test entries")
        axis.set_ylabel("observed frequency of Y=1")
        axis.set_title(f"{name}, budget {shown['budget'].max()}, seed 0")
        axis.set_aspect("equal")
        axis.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=2)
    figure.savefig(out / "reliability.png", dpi=110)
    plt.close(figure)

    simulated = summary[summary["dataset"] == "simulated"]
    if "coverage_90" in simulated:
        covered = simulated[pd.to_numeric(simulated["coverage_90"], errors="coerce").notna()]
        figure, axis = plt.subplots(figsize=(7, 3.6), layout="constrained")
        labels = [f"{r} b{b}" for r, b in zip(covered["row"], covered["budget"], strict=True)]
        x = range(len(covered))
        for offset, level in ((-0.2, 50), (0.2, 90)):
            values = covered[f"coverage_{level}"].astype(float)
            axis.bar([i + offset for i in x], values, width=0.4, label=f"{level}% interval")
            axis.axhline(level / 100, color="gray", linestyle=":", linewidth=1,
                         label="nominal levels" if level == 90 else None)  # fmt: skip
        axis.set_xticks(list(x), labels, rotation=30, fontsize=8)
        axis.set_xlabel("row and budget (b), mean over seeds")
        axis.set_ylabel("share of true WH entries\ninside the interval")
        axis.set_ylim(0, 1)
        figure.legend(fontsize=8, loc="outside right upper")
        figure.savefig(out / "coverage.png", dpi=110)
        plt.close(figure)


def main(argv=None) -> int:
    args = parse(argv)
    if args.figures_only:
        import pandas as pd

        summary = pd.read_csv(args.out / "summary.csv")
        figures(summary, pd.read_csv(args.out / "reliability.csv"), args.out)
        log(f"drew the figures of {args.out}")
        return 0
    import numpyro

    numpyro.set_host_device_count(args.chains)  # before JAX starts: one CPU device per chain

    import pandas as pd

    start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    rows, bins, tuning_rows = [], [], []
    if not args.skip_simulated:
        part, part_bins, tuned = simulated_study(args)
        rows += part
        bins.append(part_bins)
        tuning_rows += tuned
    for name in args.datasets:
        part, part_bins, tuned = dataset_study(name, args)
        rows += part
        bins.append(part_bins)
        tuning_rows += tuned
    if not rows:
        log("nothing to run")
        return 0
    rows = pd.DataFrame(rows)
    bins = pd.concat(bins, ignore_index=True)
    summary = summarize(rows)
    rows.to_csv(args.out / "rows.csv", index=False)
    bins.to_csv(args.out / "reliability.csv", index=False)
    summary.to_csv(args.out / "summary.csv", index=False)
    if tuning_rows:
        pd.DataFrame(tuning_rows).to_csv(args.out / "tuning.csv", index=False)
    shown = [
        "dataset", "row", "budget", "test_perplexity", "ece", "cpu_seconds", "pareto",
        *[c for c in ("coverage_50", "coverage_90", "mixing", "rule") if c in summary],
    ]  # fmt: skip
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        log(summary[shown].round(4).to_string(index=False))
    figures(summary, bins, args.out)
    log(f"wall time {time.perf_counter() - start:.0f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
