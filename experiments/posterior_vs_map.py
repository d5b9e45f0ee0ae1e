"""The posterior-vs-MAP study: NUTS and SVI against the MM MAP, on one model spec.

1. **Simulated data with known truth** (200 x 100, K = 4, W and H drawn from the flat
   prior, Y ~ Bernoulli(WH), 20% of the entries held out). Engines ``mm`` (MAP),
   ``nuts``, ``svi`` with the AutoNormal and the low-rank guide, all with the true
   prior. Reported: held-out perplexity next to the truth's own, the reliability
   diagram and expected calibration error (ECE, 10 equal-width bins) of the held-out
   predictions, the coverage of the central 50% and 90% posterior intervals of the
   true WH entries, and the seconds of each fit.
2. **animals, paleo, lastfm on the paper's split**: ``mm`` tuned as in the paper
   (rank and alpha, beta on validation, :func:`bernmf.tune.grid`); each Bayesian
   engine at mm's rank with its own prior tuned on validation (alpha, beta in
   {0.1, 0.3, 1}, gamma = 1: the best prior differs by engine, and priors below 1
   are where the Bayesian engines gain), with shorter runs for the tuning
   (``--tune-warmup``, ``--tune-samples``, ``--tune-svi-steps``); then the test
   perplexity over ``--seeds`` seeds of full-length runs (mean and sd), seconds, and
   for NUTS the bulk ESS per second of WH (median over entries), divergences and max
   R-hat(WH).

Outputs in ``--out`` (default ``results/posterior_vs_map``): ``simulated.csv``,
``reliability.csv``, ``tuning.csv``, ``datasets.csv`` (every test fit), ``summary.csv``
(mean and sd per dataset and engine), ``reliability.png``, ``coverage.png`` and
``perplexity_vs_seconds.png``. ``--quick`` is a smoke run (24 x 18 simulated data with
mm and the AutoNormal guide; animals only, with mm and nuts; one prior for the Bayesian
engines, one seed, short chains). Seconds include compilation: wall times of
:func:`bernmf.fit` in ``simulated.csv`` and the tuning lines, compile + run seconds of
``Fit.timings`` in ``datasets.csv`` (the test fits, run by :func:`bernmf.compare`).

Run: ``python experiments/posterior_vs_map.py [--data-dir DIR] [--quick]``
(NUTS chains run in parallel: this script calls ``numpyro.set_host_device_count``
before JAX starts).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from functools import partial
from pathlib import Path

ENGINES = {
    "mm": ("mm", {}),
    "nuts": ("nuts", {}),
    "svi_normal": ("svi", {"guide": "AutoNormal"}),
    "svi_lowrank": ("svi", {"guide": "AutoLowRankMultivariateNormal"}),
}
BAYES_VALUES = (0.1, 0.3, 1.0)
MM_VALUES = (1.0, 1.2, 1.5, 2.0, 3.0)
RANKS = (2, 4, 8, 16)
DATASETS = ("animals", "paleo", "lastfm")
BINS = 10


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--out", type=Path, default=Path("results/posterior_vs_map"))
    parser.add_argument("--datasets", nargs="*", default=None)
    parser.add_argument("--seeds", type=int, default=3, help="test fits per engine")
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--svi-steps", type=int, default=5000)
    parser.add_argument(
        "--dtype", default="float64", choices=("float64", "float32"), help="of nuts and svi"
    )
    parser.add_argument("--target-accept", type=float, default=0.8, help="NUTS target_accept_prob")
    parser.add_argument(
        "--max-tree-depth", type=int, default=10, help="NUTS max_tree_depth (caps cost per draw)"
    )
    parser.add_argument("--workers", type=int, default=2, help="threads of the mm grid")
    parser.add_argument("--tune-warmup", type=int, default=300, help="NUTS warmup when tuning")
    parser.add_argument("--tune-samples", type=int, default=300, help="NUTS draws when tuning")
    parser.add_argument("--tune-svi-steps", type=int, default=2000, help="SVI steps when tuning")
    parser.add_argument(
        "--dataset-engines",
        nargs="*",
        choices=list(ENGINES)[1:],
        default=None,
        help="Bayesian engines of part 2 (default: all; the low-rank guide is slow on big data)",
    )
    parser.add_argument("--skip-simulated", action="store_true")
    parser.add_argument("--skip-datasets", action="store_true")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--quiet", action="store_true", help="no progress lines from the engines")
    args = parser.parse_args(argv)
    args.shape = (200, 100, 4)
    args.ranks, args.mm_values = RANKS, MM_VALUES
    args.bayes_priors = list(itertools.product(BAYES_VALUES, BAYES_VALUES))
    args.simulated_engines, args.ess_entries = list(ENGINES), 300
    args.dataset_engines = args.dataset_engines or list(ENGINES)[1:]
    if args.quick:
        args.shape = (24, 18, 2)
        args.datasets = args.datasets or ["animals"]
        args.seeds = 1
        args.warmup, args.samples, args.svi_steps = 60, 60, 400
        args.tune_warmup, args.tune_samples, args.tune_svi_steps = 60, 60, 400
        args.ranks, args.mm_values = (2,), (1.0, 1.5)
        args.bayes_priors = [(0.5, 0.5)]
        args.simulated_engines = ["mm", "svi_normal"]  # nuts runs on animals
        args.ess_entries = 30
        args.dataset_engines = ["nuts"]  # svi runs on the simulated data
    args.datasets = [] if args.skip_datasets else (args.datasets or list(DATASETS))
    return args


def log(message: str) -> None:
    print(message, flush=True)


def engine_options(name: str, args, tuning: bool = False) -> tuple[str, dict]:
    """The bernmf engine and its options for one of :data:`ENGINES` (shorter when tuning)."""
    engine, options = ENGINES[name]
    options = dict(options)
    if engine == "nuts":
        options.update(
            num_chains=args.chains,
            num_warmup=args.tune_warmup if tuning else args.warmup,
            num_samples=args.tune_samples if tuning else args.samples,
            target_accept_prob=args.target_accept,
            max_tree_depth=args.max_tree_depth,
        )
    if engine == "svi":
        options.update(steps=args.tune_svi_steps if tuning else args.svi_steps)
    if engine != "mm":
        options.update(progress=not args.quiet, dtype=args.dtype)
    return engine, options


def timed_fit(Y, name, rank, mask, prior, seed, args, tuning: bool = False):
    """``bernmf.fit`` with the options of engine ``name``; returns (fit, wall seconds)."""
    import bernmf

    engine, options = engine_options(name, args, tuning)
    begin = time.perf_counter()
    fit = bernmf.fit(Y, engine, rank=rank, mask=mask, prior=prior, seed=seed, **options)
    return fit, time.perf_counter() - begin


def reliability(Y, probs, mask, bins: int = BINS):
    """Reliability diagram of the selected entries: table per bin and the ECE."""
    import numpy as np
    import pandas as pd

    y, p = Y[mask], probs[mask]
    which = np.minimum((p * bins).astype(int), bins - 1)
    rows = []
    for b in range(bins):
        chosen = which == b
        if chosen.any():
            rows.append((b, chosen.sum(), p[chosen].mean(), y[chosen].mean()))
    table = pd.DataFrame(rows, columns=["bin", "count", "predicted", "observed"])
    ece = float((table["count"] * (table["predicted"] - table["observed"]).abs()).sum() / y.size)
    return table, ece


def coverage(fit, truth, levels=(0.5, 0.9), block_rows: int = 25) -> dict:
    """Share of the true WH entries inside the central posterior intervals of WH."""
    import numpy as np

    if not fit.draws:
        return {f"coverage_{int(level * 100)}": np.nan for level in levels}
    W_draws = fit.draws["W"].reshape(-1, *fit.draws["W"].shape[2:])
    H_draws = fit.draws["H"].reshape(-1, *fit.draws["H"].shape[2:])
    inside = {level: 0 for level in levels}
    for start in range(0, truth.shape[0], block_rows):
        rows = slice(start, start + block_rows)
        products = np.einsum("smk,skn->smn", W_draws[:, rows], H_draws)
        for level in levels:
            low, high = np.quantile(products, [(1 - level) / 2, (1 + level) / 2], axis=0)
            inside[level] += int(((truth[rows] >= low) & (truth[rows] <= high)).sum())
    return {f"coverage_{int(level * 100)}": inside[level] / truth.size for level in levels}


def simulated_study(args):
    """Part 1. Returns (table, reliability table)."""
    import numpy as np
    import pandas as pd

    import bernmf

    M, N, K = args.shape
    prior = bernmf.Prior(1.0, 1.0, 1.0)
    Y, W, H = bernmf.simulate(0, M, N, K, prior)
    held_out = np.random.default_rng(0).random(Y.shape) < 0.2
    truth = W @ H
    truth_perplexity = bernmf.perplexity(Y, truth, held_out)
    rows, diagrams = [], []
    log(
        f"== simulated {M} x {N}, K={K}, flat prior; truth's held-out perplexity "
        f"{truth_perplexity:.4f}"
    )
    for name in args.simulated_engines:
        fit, seconds = timed_fit(Y, name, K, ~held_out, prior, 0, args)
        table, ece = reliability(Y, fit.probs, held_out)
        diagrams.append(table.assign(engine=name))
        row = {
            "engine": name,
            "test_perplexity": bernmf.perplexity(Y, fit.probs, held_out),
            "truth_perplexity": truth_perplexity,
            "ece": ece,
            **coverage(fit, truth),
            "seconds": seconds,
        }
        rows.append(row)
        log(
            "  "
            + ", ".join(
                f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()
            )
        )
    return pd.DataFrame(rows), pd.concat(diagrams, ignore_index=True)


def nuts_statistics(fit, ess_entries: int) -> dict:
    """ESS per second of sampling (bulk, median over sampled WH entries), divergences,
    max R-hat(WH): the ``measure`` of :func:`bernmf.compare` for nuts."""
    import bernmf

    diagnostics = bernmf.diagnostics(fit, warn=False, ess_entries=ess_entries)
    return {
        "ess_per_second": diagnostics.table.loc["WH", "ess_bulk_median"] / fit.timings["run"],
        "divergences": diagnostics.divergences,
        "rhat_wh_max": diagnostics.table.loc["WH", "rhat_max"],
        "rhat_wh_share_le_1.01": diagnostics.table.loc["WH", "share_rhat_le_1.01"],
    }


def dataset_study(name, args):
    """Part 2 for one dataset. Returns (test fits as a DataFrame, tuning rows)."""
    import pandas as pd

    import bernmf
    from bernmf import tune
    from bernmf.data import datasets
    from bernmf.data.split import paper_split

    data = datasets.load(name, data_dir=args.data_dir)
    split = paper_split(data.shape)
    log(f"== {name} {data.shape}")
    begin = time.perf_counter()
    tuning = tune.grid(
        data,
        args.ranks,
        args.mm_values,
        args.mm_values,
        mask=split.train,
        validation=split.validation,
        gamma=1.0,  # as the fits below
        workers=args.workers,
        progress=not args.quiet,
    )
    rank = tuning.best["rank"]
    log(
        f"  mm tuned on validation: K={rank}, alpha={tuning.best['alpha']:g}, "
        f"beta={tuning.best['beta']:g}, {time.perf_counter() - begin:.0f} s"
    )
    chosen = {"mm": (tuning.best["alpha"], tuning.best["beta"])}
    tuning_rows = [
        {
            "dataset": name,
            "engine": "mm",
            "rank": rank,
            "alpha": a,
            "beta": b,
            "validation_perplexity": tuning.best["validation_perplexity"],
            "chosen": True,
        }
        for a, b in [chosen["mm"]]
    ]
    for engine in args.dataset_engines:
        best = None
        for alpha, beta in args.bayes_priors:
            fit, seconds = timed_fit(
                data, engine, rank, split.train, bernmf.Prior(alpha, beta, 1.0), 0, args, True
            )
            score = fit.perplexity(data, split.validation)
            log(
                f"  {engine} alpha={alpha:g} beta={beta:g}: validation {score:.4f}, {seconds:.0f} s"
            )
            tuning_rows.append(
                {
                    "dataset": name,
                    "engine": engine,
                    "rank": rank,
                    "alpha": alpha,
                    "beta": beta,
                    "validation_perplexity": score,
                    "chosen": False,
                }
            )
            if best is None or score < best[0]:
                best = (score, (alpha, beta))
        chosen[engine] = best[1]
        for row in tuning_rows:
            if row["engine"] == engine and (row["alpha"], row["beta"]) == best[1]:
                row["chosen"] = True
    tables = []
    for label, (alpha, beta) in chosen.items():
        engine, options = engine_options(label, args)
        fits = bernmf.compare(
            data,
            [engine],
            [rank],
            range(args.seeds),
            train=split.train,
            test=split.test,
            priors={engine: bernmf.Prior(alpha, beta, 1.0)},
            options={engine: options},
            measure=partial(nuts_statistics, ess_entries=args.ess_entries)
            if engine == "nuts"
            else None,
            progress=not args.quiet,
        ).fits
        seconds = fits["seconds"] + fits["compile_seconds"].fillna(0.0)  # nuts: run has it
        table = (
            fits.drop(columns=["prior", "compile_seconds", "iterations", "converged"])
            .rename(columns={"perplexity": "test_perplexity"})
            .assign(dataset=name, engine=label, alpha=alpha, beta=beta, seconds=seconds)
        )
        for seed, score, took in zip(table["seed"], table["test_perplexity"], seconds, strict=True):
            log(f"  test {label} seed {seed}: {score:.4f} ({took:.0f} s)")
        first = ["dataset", "engine", "rank", "alpha", "beta", "seed", "test_perplexity"]
        tables.append(table[first + [c for c in table.columns if c not in first]])
    return pd.concat(tables, ignore_index=True), tuning_rows


def figures(simulated, diagrams, summary, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    if simulated is not None:
        figure, axis = plt.subplots(figsize=(4.5, 4.5))
        axis.plot([0, 1], [0, 1], color="gray", linestyle=":", linewidth=1)
        for engine, table in diagrams.groupby("engine", sort=False):
            ece = simulated.set_index("engine").loc[engine, "ece"]
            axis.plot(
                table["predicted"], table["observed"], marker="o", label=f"{engine} (ECE {ece:.3f})"
            )
        axis.set_xlabel("predicted P(Y=1), held-out entries")
        axis.set_ylabel("observed frequency")
        axis.set_title("Reliability, simulated data")
        axis.legend(fontsize=8)
        figure.tight_layout()
        figure.savefig(out / "reliability.png", dpi=120)
        plt.close(figure)

        figure, axis = plt.subplots(figsize=(5.5, 3.5))
        bayes = simulated[simulated["engine"] != "mm"]
        x = np.arange(len(bayes))
        for offset, level in ((-0.2, 50), (0.2, 90)):
            axis.bar(x + offset, bayes[f"coverage_{level}"], width=0.4, label=f"{level}% interval")
            axis.axhline(level / 100, color="gray", linestyle=":", linewidth=1)
        axis.set_xticks(x, bayes["engine"])
        axis.set_ylabel("coverage of the true WH")
        axis.set_ylim(0, 1)
        axis.legend(fontsize=8)
        figure.tight_layout()
        figure.savefig(out / "coverage.png", dpi=120)
        plt.close(figure)

    if summary is not None and len(summary):
        names = list(dict.fromkeys(summary["dataset"]))
        figure, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.5), squeeze=False)
        for axis, name in zip(axes[0], names, strict=True):
            for _, row in summary[summary["dataset"] == name].iterrows():
                axis.errorbar(
                    row["seconds_mean"],
                    row["test_perplexity_mean"],
                    yerr=row["test_perplexity_sd"],
                    marker="o",
                    label=row["engine"],
                )
            axis.set_xscale("log")
            axis.set_xlabel("seconds per fit")
            axis.set_ylabel("test perplexity")
            axis.set_title(name)
            axis.legend(fontsize=8)
        figure.tight_layout()
        figure.savefig(out / "perplexity_vs_seconds.png", dpi=120)
        plt.close(figure)


def main(argv=None) -> int:
    args = parse(argv)
    import numpyro

    numpyro.set_host_device_count(args.chains)  # before JAX starts: one CPU device per chain

    import pandas as pd

    start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    simulated = diagrams = None
    if not args.skip_simulated:
        simulated, diagrams = simulated_study(args)
        simulated.to_csv(args.out / "simulated.csv", index=False)
        diagrams.to_csv(args.out / "reliability.csv", index=False)
        log(simulated.round(4).to_string(index=False))
    tables, tuning_rows = [], []
    for name in args.datasets:
        table, tuned = dataset_study(name, args)
        tables.append(table)
        tuning_rows += tuned
    summary = None
    if tables:
        fits = pd.concat(tables, ignore_index=True)
        fits.to_csv(args.out / "datasets.csv", index=False)
        pd.DataFrame(tuning_rows).to_csv(args.out / "tuning.csv", index=False)
        summary = (
            fits.groupby(["dataset", "engine"], sort=False)
            .agg(
                rank=("rank", "first"),
                alpha=("alpha", "first"),
                beta=("beta", "first"),
                test_perplexity_mean=("test_perplexity", "mean"),
                test_perplexity_sd=("test_perplexity", "std"),
                seconds_mean=("seconds", "mean"),
            )
            .reset_index()
        )
        if "ess_per_second" in fits:
            nuts_stats = fits.groupby(["dataset", "engine"], sort=False)[
                ["ess_per_second", "divergences", "rhat_wh_max"]
            ].mean()
            summary = summary.merge(nuts_stats.reset_index(), on=["dataset", "engine"], how="left")
        summary.to_csv(args.out / "summary.csv", index=False)
        log(summary.round(4).to_string(index=False))
    figures(simulated, diagrams, summary, args.out)
    log(f"wall time {time.perf_counter() - start:.0f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
