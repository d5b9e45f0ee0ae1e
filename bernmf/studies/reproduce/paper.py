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
(see :mod:`bernmf.studies.reproduce.published`): held-out entries as zeros in the H update, W
divided by N, and a stop at the first sweep that lowers the objective per observed entry
by less than 1e-5. ``--quick`` is a smoke run (animals, tiny grid, two restarts).

The protocol is a configuration of the study runner (:func:`configuration`,
:mod:`bernmf.studies.runner`): each method's setting chosen once on the validation entries
of its seed-0 fits, then each restart a seed set of one fit of that setting.

Outputs, in ``--out`` (default ``results/paper``) under ``corrected/`` or
``as_published/``: ``fits.csv`` (every fit), ``summary.csv`` (mean and sd of the test
perplexity, seconds, iterations and MM sweeps per fit, chosen hyperparameters),
``study.csv`` (the study runner's table: a row per restart and method, with CPU seconds),
``fig1_validation.png``, ``fig2_test.png``, ``fig3_lastfm_H.png`` (H of the NBMF-MM
restart of best validation perplexity); and, once both variants have run,
``comparison.csv`` in ``--out``.

Run: ``bernmf reproduce paper [--as-published] [--quick]``, or
``.venv/bin/python experiments/paper.py [--as-published] [--quick]`` from a checkout.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bernmf.data.files.csv_table import write_csv
from bernmf.inference import available
from bernmf.studies.reproduce import published
from bernmf.studies.runner import registry, running
from bernmf.studies.runner.running import log
from bernmf.studies.runner.study import CHOICE, FIT_COLUMNS, Grid, Method, Study, StudyResult

RANKS = (2, 4, 8, 16)
PRIOR_VALUES = np.linspace(1, 3, 11)
DATASETS = ("animals", "paleo", "lastfm")
TEST_SEEDS = tuple(range(1000, 1010))
VALIDATION_SEED = 0


def configuration(args, names, ranks, values, restarts) -> Study:
    """The protocol as a :class:`~bernmf.studies.runner.study.Study`: each method's setting chosen
    once on validation (seed 0, ``--grid-dtype``), then ``restarts`` test fits of it."""
    options = {"max_iter": args.max_iter, "tol": args.tol, "dtype": args.dtype}
    batching = {}
    if not args.as_published:
        options["accelerate"] = args.accelerate
        batching = {"workers": args.workers, "progress": not args.quiet, "stream": sys.stdout}
    engine = published.ENGINE.name if args.as_published else "mm"
    nbmf = {"options": options, "choosing_options": {"dtype": args.grid_dtype}}
    priors = tuple((float(a), float(b), 1.0) for a in values for b in values)
    grids = [
        Grid(engine, ranks, ((1.0, 1.0, 1.0),), **nbmf, batching=batching, name="NBMF-EM"),
        Grid(engine, ranks, priors, **nbmf, batching=batching, name="NBMF-MM"),
    ]
    if args.use_logsvd:
        logsvd = {"max_iter": args.max_iter, "svd": args.logsvd_svd}
        grids.append(Grid("logsvd", ranks, options=logsvd, deterministic=True))
    return Study(
        "paper", tuple(grids), tuple(Method(g.label, "single", (g.label,)) for g in grids),
        datasets=tuple(names), seed_sets=restarts, first_seed=TEST_SEEDS[0],
        choose_seed=VALIDATION_SEED, data_dir=args.data_dir,
    )  # fmt: skip


def paper_fits(result: StudyResult) -> pd.DataFrame:
    """Every fit of the protocol: the validation grids, then the test fits (a deterministic
    method's chosen fit once), per dataset and method, with the paper's columns."""
    choice = result.fits.rename(columns={"grid": "method", "validation_perplexity": "perplexity"})
    choice = choice[choice["stage"] == CHOICE].assign(stage="validation")
    test = result.table.rename(columns={"test_perplexity": "perplexity"}).assign(stage="test")
    once = test["method"].isin(["logsvd"]) & (test["seed_set"] > 0)
    test = test[~once]
    columns = ["dataset", "method", "stage", *FIT_COLUMNS, "perplexity"]
    parts = []
    for (name, method), rows in choice.groupby(["dataset", "method"], sort=False):
        at = test[(test["dataset"] == name) & (test["method"] == method)]
        parts += [rows[columns], at[columns]]
    return pd.concat(parts, ignore_index=True)


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


def figure_validation(fits: pd.DataFrame, path: Path, title: str) -> None:
    """NBMF-MM's validation perplexity over alpha x beta at its chosen rank, per dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grids = fits[(fits["method"] == "NBMF-MM") & (fits["stage"] == "validation")]
    names = list(dict.fromkeys(grids["dataset"]))
    fig, axes = plt.subplots(1, len(names), figsize=(4.6 * len(names), 4.0), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        grid = grids[grids["dataset"] == name]
        best = grid.loc[grid["perplexity"].idxmin()]
        rank = best["rank"]
        table = grid[grid["rank"] == rank]
        heat = table.pivot_table(index="alpha", columns="beta", values="perplexity")
        values = heat.to_numpy()
        # overfitted corners (beta = 1) would take the whole colour scale: saturate them
        high = min(values.max(), values.min() + 3 * (np.median(values) - values.min()) + 1e-6)
        image = ax.imshow(
            values, origin="lower", cmap="viridis_r", aspect="auto", vmin=values.min(), vmax=high
        )
        ax.set_xticks(range(heat.shape[1]), [f"{b:.1f}" for b in heat.columns], rotation=90)
        ax.set_yticks(range(heat.shape[0]), [f"{a:.1f}" for a in heat.index])
        i = list(heat.index).index(best["alpha"])
        j = list(heat.columns).index(best["beta"])
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

    from bernmf import plot

    test = fits[fits["stage"] == "test"]
    names = list(dict.fromkeys(test["dataset"]))
    fig, axes = plt.subplots(1, len(names), figsize=(4.0 * len(names), 3.8), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):  # EM's overfitting drawn off the axis
        plot.perplexity_boxplot(test[test["dataset"] == name], by="method", ax=ax)
        ax.set(title=name, xlabel="", ylabel="test perplexity (nats)")
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


def folder(out, as_published: bool) -> Path:
    """Where a run writes: ``out``/corrected or ``out``/as_published."""
    return Path(out) / ("as_published" if as_published else "corrected")


def main(argv=None) -> int:
    parser = registry.parser(__doc__, "results/paper")
    parser.add_argument("--as-published", action="store_true", help="the published defects")
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
    args = parser.parse_args(argv)
    begin = time.perf_counter()

    variant = "as_published" if args.as_published else "correct"
    out = folder(args.out, args.as_published)
    names = args.datasets or (["animals"] if args.quick else list(DATASETS))
    ranks, values = (RANKS[:2], PRIOR_VALUES[::5]) if args.quick else (RANKS, PRIOR_VALUES)
    restarts = 2 if args.quick and args.restarts == len(TEST_SEEDS) else args.restarts
    args.use_logsvd = "logsvd" in available() and not args.no_logsvd and not args.as_published
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
    result = running.run(configuration(args, names, ranks, values, restarts))
    fits = paper_fits(result)
    for (name, method), rows in result.table.groupby(["dataset", "method"], sort=False):
        test = rows["test_perplexity"].to_numpy()
        spread = f" ± {test.std(ddof=1):.4f}" if len(test) > 1 and np.isfinite(test).all() else ""
        log(f"{name} {method}: {rows['chosen'].iloc[0]}; test perplexity {test.mean():.4f}{spread}")

    out.mkdir(parents=True, exist_ok=True)
    write_csv(fits, out / "fits.csv", index=False)
    write_csv(result.table, out / "study.csv", index=False)
    summary = summarize(fits)
    write_csv(summary, out / "summary.csv", index=False)
    label = "as published (defects reproduced)" if args.as_published else "corrected"
    figure_validation(fits, out / "fig1_validation.png", f"NBMF-MM validation, {label}")
    figure_test(fits, out / "fig2_test.png", f"Test perplexity over restarts, {label}")
    if "lastfm" in names:
        mm = result.table[
            (result.table["dataset"] == "lastfm") & (result.table["method"] == "NBMF-MM")
        ]
        j = int(mm.loc[mm["validation_perplexity"].idxmin(), "seed_set"])  # on validation
        logsvd = result.result_of(dataset="lastfm", method="logsvd", R=1, seed_set=0)
        chosen = result.result_of(dataset="lastfm", method="NBMF-MM", R=1, seed_set=j)
        figure_lastfm_H(chosen, logsvd, out / "fig3_lastfm_H.png")
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
    log(f"\noutputs in {out}")
    log(f"wall time: {time.perf_counter() - begin:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
