"""Collapsed Gibbs and CVB0 against the R/Rcpp reference runs of Lumbreras et al. (2020).

The reference protocol of issue 5: each dataset (animals, paleo, lastfm) with the paper's
split (seed 12345), the training entries observed, K = 10, alpha = beta = 1, gamma = 1/K;
``gibbs`` with 500 sweeps of which 250 are burn-in, ``vb`` CVB0 with 500 iterations (and,
for comparison, mean-field VB with 500 iterations, which has no R reference); 3 seeds;
the test perplexity (mean negative log-likelihood of the test entries, nats) against the
range of the R runs, which bernmf must match within 0.005.

Outputs in ``--out`` (default ``results/lumbreras``): ``fits.csv`` (one row per fit),
``summary.csv`` (per dataset and method: min, mean, max over seeds, the R range and
whether every seed is within it +- 0.005) and ``test_perplexity.png``. ``--quick`` is a
smoke run (animals, 40 sweeps / iterations, one seed).

Run: ``.venv/bin/python experiments/lumbreras_reference.py [--quick]``
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import bernmf
from bernmf.data import datasets
from bernmf.data.split import paper_split

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
DATASETS = ("animals", "paleo", "lastfm")
METHODS = ("gibbs", "cvb0", "meanfield")
RANK = 10
SEEDS = (0, 1, 2)
TOLERANCE = 0.005
R_RANGES = {
    ("animals", "gibbs"): (0.460, 0.467),
    ("animals", "cvb0"): (0.459, 0.459),
    ("paleo", "gibbs"): (0.125, 0.131),
    ("paleo", "cvb0"): (0.127, 0.127),
    ("lastfm", "gibbs"): (0.151, 0.153),
    ("lastfm", "cvb0"): (0.147, 0.149),
}
"""Test perplexity of the R/Rcpp runs over 3 seeds (issue 5)."""


def fit_one(Y, train, method: str, seed: int, iterations: int):
    """One fit with the reference settings (the engines' default prior is gamma = 1/K)."""
    if method == "gibbs":
        half = iterations // 2
        options = {"num_warmup": half, "num_samples": iterations - half, "progress": False}
        return bernmf.fit(Y, "gibbs", rank=RANK, mask=train, seed=seed, **options)
    return bernmf.fit(
        Y, "vb", rank=RANK, mask=train, seed=seed, variant=method, max_iter=iterations, tol=0
    )


def summarize(fits: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (dataset, method), group in fits.groupby(["dataset", "method"], sort=False):
        low, high = R_RANGES.get((dataset, method), (np.nan, np.nan))
        values = group["test_perplexity"]
        within = values.between(low - TOLERANCE, high + TOLERANCE).all() if low == low else None
        rows.append(
            {
                "dataset": dataset,
                "method": method,
                "seeds": len(group),
                "min": values.min(),
                "mean": values.mean(),
                "max": values.max(),
                "r_low": low,
                "r_high": high,
                "within_r_range_pm_0.005": within,
                "seconds_per_fit": group["seconds"].mean(),
            }
        )
    return pd.DataFrame(rows)


def figure(fits: pd.DataFrame, path: Path) -> None:
    names = list(dict.fromkeys(fits["dataset"]))
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.4), squeeze=False)
    for ax, dataset in zip(axes[0], names, strict=True):
        subset = fits[fits["dataset"] == dataset]
        for i, method in enumerate(METHODS):
            low, high = R_RANGES.get((dataset, method), (np.nan, np.nan))
            if low == low:
                ax.fill_between(
                    [i - 0.3, i + 0.3], low - TOLERANCE, high + TOLERANCE, color="0.85", lw=0
                )
                ax.fill_between([i - 0.3, i + 0.3], low, max(high, low + 1e-4), color="0.55")
            values = subset.loc[subset["method"] == method, "test_perplexity"]
            ax.plot(np.full(len(values), i), values, "o", color="C0", ms=5)
        ax.set_xticks(range(len(METHODS)), METHODS)
        ax.set_title(dataset)
        ax.set_ylabel("test perplexity (nats)")
    axes[0][0].plot([], [], "s", color="0.55", label="R range")
    axes[0][0].plot([], [], "s", color="0.85", label="R range +- 0.005")
    axes[0][0].plot([], [], "o", color="C0", label="bernmf (one per seed)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"K = {RANK}, alpha = beta = 1, gamma = 1/K, paper split")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="animals, 40 iterations, 1 seed")
    parser.add_argument("--data-dir", default=None, help="folder with <name>.csv or .rda")
    parser.add_argument("--out", type=Path, default=Path("results/lumbreras"))
    parser.add_argument("--quiet", action="store_true", help="no line per fit")
    args = parser.parse_args(argv)
    data_dir = args.data_dir or os.environ.get("BERNMF_DATA_DIR")
    if data_dir is None and SHARED_DATA.is_dir():
        data_dir = SHARED_DATA
    names, iterations, seeds = (
        (("animals",), 40, SEEDS[:1]) if args.quick else (DATASETS, 500, SEEDS)
    )

    rows = []
    start = time.perf_counter()
    for dataset in names:
        Y = datasets.load(dataset, data_dir).to_numpy(float)
        split = paper_split(Y.shape)
        for method in METHODS:
            for seed in seeds:
                fit = fit_one(Y, split.train, method, seed, iterations)
                rows.append(
                    {
                        "dataset": dataset,
                        "method": method,
                        "seed": seed,
                        "iterations": fit.n_iter,
                        "seconds": fit.timings["compile"] + fit.timings["run"],
                        "train_perplexity": fit.perplexity(Y, split.train),
                        "test_perplexity": fit.perplexity(Y, split.test),
                    }
                )
                if not args.quiet:
                    print(pd.DataFrame(rows[-1:]).to_string(index=False, header=False), flush=True)
    fits = pd.DataFrame(rows)
    summary = summarize(fits)
    args.out.mkdir(parents=True, exist_ok=True)
    fits.to_csv(args.out / "fits.csv", index=False)
    summary.to_csv(args.out / "summary.csv", index=False)
    figure(fits, args.out / "test_perplexity.png")
    print(summary.to_string(index=False, float_format="%.4f"))
    print(f"wall time {time.perf_counter() - start:.0f} s; written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
