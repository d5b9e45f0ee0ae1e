"""The matrix-completion experiment of Magron & Févotte (2022), corrected or as published.

For each dataset (animals, paleo, lastfm) and the paper's split (70% train, 15%
validation, 15% test, seed 12345):

* NBMF-EM: K in {2, 4, 8, 16}, chosen on validation perplexity;
* NBMF-MM: K in {2, 4, 8, 16} x alpha, beta in linspace(1, 3, 11), chosen on validation;
* logistic SVD (engine ``logsvd``, when installed): K in {2, 4, 8, 16} on validation;
* then 10 random initializations at the chosen setting, fitted on the training entries
  and scored on the test entries (logistic SVD has a deterministic start: one fit).

NBMF-EM and NBMF-MM use SQUAREM-accelerated MM (``--no-accelerate``: plain sweeps).
``--as-published`` runs NBMF-EM and NBMF-MM with the three defects of the published code
(see :mod:`bernmf.studies.published`): held-out entries as zeros in the H update, W
divided by N, and a stop at the first sweep that lowers the objective per observed entry
by less than 1e-5. ``--quick`` is a smoke run (animals, tiny grid, two restarts).

Outputs, in ``--out`` (default ``results/paper``) under ``corrected/`` or
``as_published/``: ``fits.csv`` (every fit), ``summary.csv`` (mean and sd of the test
perplexity, seconds, iterations and MM sweeps per fit, chosen hyperparameters),
``fig1_validation.png``, ``fig2_test.png``, ``fig3_lastfm_H.png``; and, once both
variants have run, ``comparison.csv`` in ``--out``.

Run: ``bernmf reproduce paper [--as-published] [--quick]``, or
``.venv/bin/python experiments/paper.py [--as-published] [--quick]`` from a checkout.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bernmf import api, tune
from bernmf.data import datasets
from bernmf.data.files.csv_table import write_csv
from bernmf.data.observed import as_observed
from bernmf.data.split import paper_split
from bernmf.fitting.runner import fit_settings
from bernmf.inference import available, get_engine
from bernmf.models import Prior
from bernmf.studies import published

RANKS = (2, 4, 8, 16)
PRIOR_VALUES = np.linspace(1, 3, 11)
DATASETS = ("animals", "paleo", "lastfm")
TEST_SEEDS = tuple(range(1000, 1010))
VALIDATION_SEED = 0


def log(message: str) -> None:
    print(message, flush=True)


def nbmf_method(data, split, name, method, ranks, alphas, betas, args, variant):
    """Tune on validation, then restarts on test. Returns (rows, tuning, test fits)."""
    observed = as_observed(data, split.train)
    if variant == "as_published":
        options = {"max_iter": args.max_iter, "tol": args.tol}
        tuning = published.grid(
            data, ranks, alphas, betas, mask=split.train, validation=split.validation,
            seed=VALIDATION_SEED, dtype=args.grid_dtype, **options,
        )  # fmt: skip
    else:
        options = {"max_iter": args.max_iter, "tol": args.tol, "workers": args.workers}
        options["accelerate"] = args.accelerate
        tuning = tune.grid(
            data, ranks, alphas, betas, mask=split.train, validation=split.validation,
            gamma=1.0, seed=VALIDATION_SEED, dtype=args.grid_dtype, progress=not args.quiet,
            stream=sys.stdout, **options,
        )  # fmt: skip
    rows = tuning.table.assign(dataset=name, method=method, stage="validation")
    rows = rows.rename(columns={"validation_perplexity": "perplexity"})
    best = tuning.best
    prior = Prior(best["alpha"], best["beta"], 1.0)  # the paper's gamma
    if variant == "as_published":
        outputs = published.fits(
            observed, best["rank"], [prior] * len(args.seeds), args.seeds, dtype=args.dtype,
            **options,
        )  # fmt: skip
        fits = published.to_fits(observed, best["rank"], prior, args.seeds, outputs)
    else:
        engine = get_engine("mm")
        engine_options = {k: v for k, v in options.items() if k != "workers"}
        checked = engine.with_defaults({**engine_options, "dtype": args.dtype})
        checked_prior = engine.prior_for(prior, best["rank"])
        fitted = fit_settings(
            engine, observed, best["rank"], [checked_prior], args.seeds, checked,
            workers=args.workers,
        )  # fmt: skip
        fits = [m.fit for m in fitted]
    test = pd.DataFrame(
        {
            "rank": best["rank"],
            "alpha": best["alpha"],
            "beta": best["beta"],
            "gamma": 1.0,
            "seed": [f.seed for f in fits],
            "iterations": [f.n_iter for f in fits],
            "sweeps": [f.extras["sweeps"] for f in fits],
            "converged": [f.converged for f in fits],
            "seconds": [f.timings["run"] for f in fits],
            "perplexity": [f.perplexity(data, split.test) for f in fits],
        }
    ).assign(dataset=name, method=method, stage="test")
    log(
        f"{name} {method}: K={best['rank']} alpha={best['alpha']:g} beta={best['beta']:g} "
        f"(validation {best['validation_perplexity']:.4f}); test perplexity "
        f"{test['perplexity'].mean():.4f} ± {test['perplexity'].std():.4f}"
    )
    return pd.concat([rows, test], ignore_index=True), tuning, fits


def logsvd_method(data, split, name, ranks, args):
    """Logistic SVD: K on validation, then one test fit (its start is deterministic)."""
    rows, fits = [], {}
    for rank in ranks:
        fit = api.fit(
            data, "logsvd", rank, mask=split.train, max_iter=args.max_iter, svd=args.logsvd_svd
        )
        fits[rank] = fit
        rows.append(
            {
                "rank": rank,
                "seed": 0,
                "iterations": fit.n_iter,
                "converged": fit.converged,
                "seconds": fit.timings["run"],
                "perplexity": fit.perplexity(data, split.validation),
                "stage": "validation",
            }
        )
    table = pd.DataFrame(rows)
    best = int(table.loc[table["perplexity"].idxmin(), "rank"])
    fit = fits[best]
    test = {**table.loc[table["rank"] == best].iloc[0].to_dict(), "stage": "test"}
    test["perplexity"] = fit.perplexity(data, split.test)
    table = pd.concat([table, pd.DataFrame([test])], ignore_index=True)
    log(f"{name} logsvd: K={best}; test perplexity {test['perplexity']:.4f}")
    return table.assign(dataset=name, method="logsvd"), fit


def summarize(fits: pd.DataFrame) -> pd.DataFrame:
    test = fits[fits["stage"] == "test"]
    summary = (
        test.groupby(["dataset", "method"], sort=False)
        .agg(
            rank=("rank", "first"),
            alpha=("alpha", "first"),
            beta=("beta", "first"),
            fits=("perplexity", "size"),
            test_perplexity=("perplexity", "mean"),
            test_perplexity_sd=("perplexity", "std"),
            seconds_per_fit=("seconds", "mean"),
            iterations=("iterations", "mean"),
            sweeps=("sweeps", "mean"),
        )
        .reset_index()
    )
    return summary


def figure_validation(tunings: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tunings), figsize=(4.6 * len(tunings), 4.0), squeeze=False)
    for ax, (name, tuning) in zip(axes[0], tunings.items(), strict=True):
        rank = tuning.best["rank"]
        table = tuning.table[tuning.table["rank"] == rank]
        heat = table.pivot_table(index="alpha", columns="beta", values="validation_perplexity")
        values = heat.to_numpy()
        # overfitted corners (beta = 1) would take the whole colour scale: saturate them
        high = min(values.max(), values.min() + 3 * (np.median(values) - values.min()) + 1e-6)
        image = ax.imshow(
            values, origin="lower", cmap="viridis_r", aspect="auto", vmin=values.min(), vmax=high
        )
        ax.set_xticks(range(heat.shape[1]), [f"{b:.1f}" for b in heat.columns], rotation=90)
        ax.set_yticks(range(heat.shape[0]), [f"{a:.1f}" for a in heat.index])
        i = list(heat.index).index(tuning.best["alpha"])
        j = list(heat.columns).index(tuning.best["beta"])
        ax.plot(j, i, marker="*", color="red", markersize=12)
        ax.set(
            xlabel="beta",
            ylabel="alpha",
            title=f"{name}, K = {rank}: best {values.min():.4f}",
        )
        fig.colorbar(image, ax=ax, label="validation perplexity", extend="max")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def figure_test(fits: pd.DataFrame, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    test = fits[fits["stage"] == "test"]
    names = list(dict.fromkeys(test["dataset"]))
    fig, axes = plt.subplots(1, len(names), figsize=(4.0 * len(names), 3.8), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        subset = test[test["dataset"] == name]
        methods = list(dict.fromkeys(subset["method"]))
        values = [subset.loc[subset["method"] == m, "perplexity"].to_numpy() for m in methods]
        ax.boxplot(values)
        ax.set_xticks(range(1, len(methods) + 1), methods)
        if max(map(np.max, values)) > 3 * min(map(np.min, values)):
            ax.set_yscale("log")  # EM's overfitting would flatten the others
            ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%.2f"))
            ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%.2f"))
        ax.set(title=name, ylabel="test perplexity (nats)")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def figure_lastfm_H(nbmf_fit, logsvd_fit, path: Path, n_artists: int = 40) -> None:
    """H of NBMF (K x N, in [0, 1]) next to logistic SVD's loadings, for popular artists."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    H = nbmf_fit.frames.H  # components x artists
    # a readable subset: the artists with the largest weight in some component, grouped
    # by that component
    strongest = H.max(axis=0).sort_values(ascending=False).index[:n_artists]
    order = H[strongest].idxmax(axis=0).map(list(H.index).index).sort_values(kind="stable")
    artists = list(order.index)
    panels = [("NBMF-MM: H (probabilities)", H[artists].T, "viridis", (0, 1))]
    if logsvd_fit is not None:
        B = logsvd_fit.frames.H  # components x artists (loadings)
        limit = float(np.abs(B[artists].to_numpy()).max())
        panels.append(("logistic SVD: loadings", B[artists].T, "RdBu_r", (-limit, limit)))
    fig, axes = plt.subplots(
        1, len(panels), figsize=(3.2 + 2.4 * len(panels), 0.22 * n_artists + 1.5), squeeze=False
    )
    for ax, (label, frame, cmap, (low, high)) in zip(axes[0], panels, strict=True):
        image = ax.imshow(frame.to_numpy(), cmap=cmap, vmin=low, vmax=high, aspect="auto")
        ax.set_yticks(range(len(artists)), artists, fontsize=7)
        ax.set_xticks(range(frame.shape[1]), range(1, frame.shape[1] + 1), fontsize=7)
        ax.set(xlabel="component", title=label)
        fig.colorbar(image, ax=ax, shrink=0.6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def compare(out: Path) -> pd.DataFrame | None:
    """Side-by-side test perplexity of both variants, once both have run."""
    paths = {v: out / v / "summary.csv" for v in ("corrected", "as_published")}
    if not all(p.exists() for p in paths.values()):
        return None
    frames = {v: pd.read_csv(p) for v, p in paths.items()}
    keys = ["dataset", "method"]
    columns = ["test_perplexity", "test_perplexity_sd", "rank", "alpha", "beta", "iterations"]
    merged = frames["corrected"][keys + columns].merge(
        frames["as_published"][keys + columns],
        on=keys,
        how="outer",
        suffixes=("_corrected", "_as_published"),
    )
    write_csv(merged, out / "comparison.csv", index=False)
    return merged


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--as-published", action="store_true", help="the published defects")
    parser.add_argument("--quick", action="store_true", help="animals, tiny grid, 2 restarts")
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=None)
    parser.add_argument("--data-dir", default=None, help="folder with <name>.csv or .rda")
    parser.add_argument("--out", default="results/paper", type=Path)
    parser.add_argument("--restarts", type=int, default=len(TEST_SEEDS))
    parser.add_argument("--max-iter", type=int, default=2000)
    parser.add_argument("--tol", type=float, default=1e-5)
    parser.add_argument(
        "--dtype", choices=("float64", "float32"), default="float64", help="of the test fits"
    )
    parser.add_argument(
        "--grid-dtype",
        choices=("float64", "float32"),
        default="float32",
        help="of the validation grids (the objective is summed in float64 either way)",
    )
    parser.add_argument(
        "--workers", type=int, default=min(2, os.cpu_count() or 1), help="threads for the fits"
    )
    parser.add_argument(
        "--no-accelerate",
        dest="accelerate",
        action="store_false",
        help="plain MM sweeps (default: SQUAREM-accelerated MM, except --as-published)",
    )
    parser.add_argument("--no-logsvd", action="store_true", help="skip logistic SVD")
    parser.add_argument(
        "--logsvd-svd",
        choices=("exact", "subspace"),
        default="subspace",
        help="logsvd's SVD step: 'exact' as R (slow), 'subspace' (same fixed points, fast)",
    )
    parser.add_argument("--quiet", action="store_true", help="no per-rank progress lines")
    args = parser.parse_args(argv)
    begin = time.perf_counter()

    variant = "as_published" if args.as_published else "correct"
    folder = args.out / ("as_published" if args.as_published else "corrected")
    names = args.datasets or (["animals"] if args.quick else list(DATASETS))
    ranks, values = (RANKS[:2], PRIOR_VALUES[::5]) if args.quick else (RANKS, PRIOR_VALUES)
    restarts = 2 if args.quick and args.restarts == len(TEST_SEEDS) else args.restarts
    args.seeds = (
        TEST_SEEDS[:restarts] if restarts <= len(TEST_SEEDS) else range(1000, 1000 + restarts)
    )
    use_logsvd = "logsvd" in available() and not args.no_logsvd and not args.as_published
    if "logsvd" not in available():
        log("note: engine 'logsvd' is not available in this bernmf; logistic SVD is skipped")
    elif args.as_published:
        log("note: logistic SVD has no published defects; it is run in the corrected variant only")
    log(
        f"protocol ({variant}): datasets {names}; K {list(ranks)}; alpha, beta in "
        f"{np.round(values, 2).tolist()}; {restarts} test restarts; "
        f"grids in {args.grid_dtype}, test fits in {args.dtype}; {args.workers} worker(s); "
        f"MM {'plain' if args.accelerate is False or args.as_published else 'accelerated'}"
    )

    all_fits, tunings, h_fits = [], {}, {}
    for name in names:
        start = time.perf_counter()
        data = datasets.load(name, data_dir=args.data_dir)
        split = paper_split(data.shape)
        log(f"== {name} {data.shape}")
        rows, _, _ = nbmf_method(data, split, name, "NBMF-EM", ranks, [1.0], [1.0], args, variant)
        all_fits.append(rows)
        rows, tuning, fits = nbmf_method(
            data, split, name, "NBMF-MM", ranks, values, values, args, variant
        )
        all_fits.append(rows)
        tunings[name] = tuning
        best_fit = min(fits, key=lambda f: f.perplexity(data, split.test))
        logsvd_fit = None
        if use_logsvd:
            rows, logsvd_fit = logsvd_method(data, split, name, ranks, args)
            all_fits.append(rows)
        h_fits[name] = (best_fit, logsvd_fit)
        log(f"{name} done in {time.perf_counter() - start:.0f} s")

    folder.mkdir(parents=True, exist_ok=True)
    fits = pd.concat(all_fits, ignore_index=True)
    first = ["dataset", "method", "stage"]
    fits = fits[first + [c for c in fits.columns if c not in first]]
    write_csv(fits, folder / "fits.csv", index=False)
    summary = summarize(fits)
    write_csv(summary, folder / "summary.csv", index=False)
    label = "as published (defects reproduced)" if args.as_published else "corrected"
    figure_validation(tunings, folder / "fig1_validation.png", f"NBMF-MM validation, {label}")
    figure_test(fits, folder / "fig2_test.png", f"Test perplexity over restarts, {label}")
    if "lastfm" in h_fits:
        figure_lastfm_H(*h_fits["lastfm"], folder / "fig3_lastfm_H.png")
    comparison = compare(args.out)

    with pd.option_context("display.width", 160, "display.max_columns", 20):
        log(f"\n{label}: test perplexity (mean ± sd over restarts)")
        log(summary.round(4).to_string(index=False))
        if comparison is not None:
            log("\ncorrected vs as published")
            shown = [
                "dataset",
                "method",
                "test_perplexity_corrected",
                "test_perplexity_as_published",
            ]
            log(comparison[shown].round(4).to_string(index=False))
    log(f"\noutputs in {folder}")
    log(f"wall time: {time.perf_counter() - begin:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
