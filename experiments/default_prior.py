"""Which prior should ``mm`` use by default? A grid of priors on the paper's three datasets.

A flat prior (alpha = beta = 1) makes mm's MAP maximum likelihood: it puts entries of H
at exactly 0 or 1, so held-out entries of the other outcome score ``inf``. This study fits
``mm`` with its default options (the fit of ``bernmf fit DATA --rank K``) on the paper's
split of each dataset (70% train, 15% validation, 15% test), at every rank of
:data:`RANKS`, every symmetric Beta prior on H of :data:`BETAS` (alpha = beta) and every
Dirichlet parameter of W of :data:`GAMMAS`, from :data:`SEEDS` seeds, each rank in one
compiled call (:func:`bernmf.inference.mm.run_many`), and scores every fit on the
validation and on the test entries (exact logs: an outcome of probability 0 is ``inf``).

For each dataset and rank it reports, per prior, the mean perplexity over seeds and its
excess over the best prior of that dataset and rank (percent), and per prior the mean and
the worst of those excesses over every dataset and rank, on the validation entries (what
chooses) and on the test entries (whether the choice holds on unseen entries), sorted by
the mean validation excess. A prior that gives any entry probability 0 has excess inf.

Outputs in ``--out`` (default ``results/default_prior``): ``fits.csv`` (every fit:
validation and test perplexity, scored entries at probability 0, entries outside the
training mask at P(Y=1) exactly 0 or 1, iterations, seconds), ``summary.csv`` (mean over
seeds per dataset, rank and prior, with the excesses), ``priors.csv`` (per prior: mean and
worst excess) and ``default_prior.png`` (test perplexity against alpha = beta at gamma =
:data:`SHOWN_GAMMA`, a panel per dataset, a line per rank; and the mean validation excess
of every prior).

Run: ``.venv/bin/python experiments/default_prior.py [--quick] [--data-dir ../shared/data]``;
``--fits results/default_prior/fits.csv`` summarizes and plots fits already made.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

import bernmf
from bernmf.data import datasets
from bernmf.data.observed import as_observed
from bernmf.data.split import paper_split
from bernmf.inference import mm
from bernmf.posterior.lpd import bernoulli_lpd

RANKS = (2, 4, 8, 16)
BETAS = (1.0, 1.05, 1.1, 1.2, 1.5, 2.0)
"""alpha = beta of the Beta prior on H; 1 is flat (maximum likelihood, as em)."""
GAMMAS = (1.0, 1.1, 1.2, 1.5)
SEEDS = (0, 1, 2)
SHOWN_GAMMA = 1.2
"""The gamma of the plot's test perplexity panels (the default's)."""
QUICK = {"datasets": ("animals",), "ranks": (2, 4), "betas": (1.0, 1.2), "seeds": (0,)}


def log(message: str) -> None:
    print(message, flush=True)


def score(Y, mask, probs) -> tuple[float, int]:
    """Perplexity of ``probs`` (M, N) on the entries of ``mask``, and how many are at 0."""
    lpd = bernoulli_lpd(Y, mask, probs[None])[:, 0]
    return float(-lpd.mean()), int(np.isneginf(lpd).sum())


def fit_dataset(name: str, Y: np.ndarray, ranks, betas, gammas, seeds) -> list[dict]:
    """Every (rank, prior, seed) of one dataset, fitted on the paper's train entries."""
    split = paper_split(Y.shape)
    data = as_observed(Y, split.train)
    priors = [(b, g) for b in betas for g in gammas]
    rows = []
    for rank in ranks:
        settings = [(b, g, s) for b, g in priors for s in seeds]
        begin = time.process_time()
        batch = mm.run_many(
            data, rank, [bernmf.Prior(b, b, g) for b, g, _ in settings], [s for *_, s in settings]
        )
        for i, (b, g, s) in enumerate(settings):
            probs = batch.probs(i)
            validation, validation_zeros = score(Y, split.validation, probs)
            test, test_zeros = score(Y, split.test, probs)
            rows.append(
                {
                    "dataset": name, "rank": rank, "alpha_beta": b, "gamma": g, "seed": s,
                    "validation": validation, "test": test,
                    "validation_zeros": validation_zeros, "test_zeros": test_zeros,
                    "certain": int(np.sum(((probs == 0) | (probs == 1)) & ~split.train)),
                    "iterations": int(batch.n_iter[i]), "seconds": float(batch.seconds[i]),
                }
            )  # fmt: skip
        done = pd.DataFrame(rows[-len(settings) :])
        mean = done.groupby(["alpha_beta", "gamma"])["test"].mean()
        best = mean.idxmin()
        log(
            f"  {name} K={rank}: {len(settings)} fits, {time.process_time() - begin:.0f} CPU s; "
            f"flat test {mean.loc[(1.0, 1.0)]:.4f}, best test {mean.min():.4f} at "
            f"alpha = beta = {best[0]:g}, gamma = {best[1]:g}"
        )
    return rows


def summarize(fits: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds per (dataset, rank, prior), and the excess (%) over that cell's best."""
    keys = ["dataset", "rank", "alpha_beta", "gamma"]
    table = fits.groupby(keys, as_index=False).agg(
        validation=("validation", "mean"),
        test=("test", "mean"),
        test_zeros=("test_zeros", "sum"),
        certain=("certain", "mean"),
    )
    for column in ("validation", "test"):
        best = table.groupby(["dataset", "rank"])[column].transform("min")
        table[f"{column}_excess_%"] = 100 * (table[column] / best - 1)
    return table


def by_prior(summary: pd.DataFrame) -> pd.DataFrame:
    """Per prior: the mean and worst excess (%) over datasets and ranks, on validation and
    on test, and the test entries at probability 0; smallest mean validation excess first."""
    table = summary.groupby(["alpha_beta", "gamma"], as_index=False).agg(
        mean_validation_excess=("validation_excess_%", "mean"),
        worst_validation_excess=("validation_excess_%", "max"),
        mean_test_excess=("test_excess_%", "mean"),
        worst_test_excess=("test_excess_%", "max"),
        test_zeros=("test_zeros", "sum"),
    )
    return table.sort_values(["mean_validation_excess", "worst_validation_excess"])


def plot(summary: pd.DataFrame, priors: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(summary["dataset"]))
    figure, axes = plt.subplots(1, len(names) + 1, figsize=(4.2 * (len(names) + 1), 3.8))
    for axis, name in zip(axes, names, strict=False):
        part = summary[(summary["dataset"] == name) & (summary["gamma"] == SHOWN_GAMMA)]
        for rank, line in part.groupby("rank"):
            finite = line[np.isfinite(line["test"])]
            axis.plot(finite["alpha_beta"], finite["test"], marker="o", label=f"K = {rank}")
        axis.set(title=f"{name}, gamma = {SHOWN_GAMMA:g}", xlabel="alpha = beta")
        axis.set_ylabel("test perplexity (nats; inf not drawn)")
        axis.legend(fontsize=7)
    grid = priors.pivot(index="alpha_beta", columns="gamma", values="mean_validation_excess")
    shown = np.where(np.isfinite(grid), grid, np.nan)
    image = axes[-1].imshow(shown, cmap="viridis_r", aspect="auto", origin="lower")
    for (i, j), value in np.ndenumerate(grid.to_numpy()):
        text, color = (f"{value:.1f}", "w") if np.isfinite(value) else ("inf", "k")
        axes[-1].text(j, i, text, ha="center", va="center", fontsize=7, color=color)
    axes[-1].set_xticks(range(grid.shape[1]), [f"{g:g}" for g in grid.columns])
    axes[-1].set_yticks(range(grid.shape[0]), [f"{a:g}" for a in grid.index])
    axes[-1].set(xlabel="gamma", ylabel="alpha = beta", title="mean validation excess (%)")
    figure.colorbar(image, ax=axes[-1])
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None, help="folder with the datasets' CSVs")
    parser.add_argument("--out", default="results/default_prior", help="output folder")
    parser.add_argument("--quick", action="store_true", help="animals, 2 ranks, 2 priors")
    parser.add_argument("--fits", help="a fits.csv of an earlier run: summarize it, fit nothing")
    args = parser.parse_args()
    grid = {"datasets": tuple(datasets.DATASETS), "ranks": RANKS, "betas": BETAS, "seeds": SEEDS}
    grid |= QUICK if args.quick else {}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.process_time()
    if args.fits is not None:
        fits = pd.read_csv(args.fits)
    else:
        rows = []
        for name in grid["datasets"]:
            Y = datasets.load(name, data_dir=args.data_dir, download=False).to_numpy(float)
            log(f"{name}: {Y.shape[0]} x {Y.shape[1]}")
            rows += fit_dataset(name, Y, grid["ranks"], grid["betas"], GAMMAS, grid["seeds"])
        fits = pd.DataFrame(rows)
        fits.to_csv(out / "fits.csv", index=False)
    summary = summarize(fits)
    summary.to_csv(out / "summary.csv", index=False)
    priors = by_prior(summary)
    priors.to_csv(out / "priors.csv", index=False)
    plot(summary, priors, out / "default_prior.png")
    with pd.option_context("display.width", 160, "display.max_rows", 200):
        log(summary.to_string(index=False, float_format=lambda x: f"{x:.4f}"))
        log(priors.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    log(f"{len(fits)} fits in {time.process_time() - start:.0f} CPU s; outputs in {out}")


if __name__ == "__main__":
    main()
