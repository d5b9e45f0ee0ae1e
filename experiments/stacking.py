"""Stacking across engines: MM grid, logistic SVD and a baseline, on the paper's split.

For each dataset (the paper's split: 70% train, 15% validation, 15% test) and each of
``--sets`` seed sets, this study fits

* ``mm``: R seeds at every (rank, alpha, beta) of a grid (gamma = 1; :data:`GRIDS`),
  each rank in one compiled call (:func:`bernmf.inference.mm.run_many`, the fits of
  ``bernmf.fit(Y, "mm", ...)``); seed set j uses seeds ``j R, ..., j R + R - 1``;
* ``logsvd`` at K in {2, 4, 8, 16} (deterministic: fitted once, a member of every set);
* ``logpca`` at ``--logpca-ranks`` (none by default; deterministic, like logsvd): on animals
  K in {2, 4, 8} took 0.36 of the weight and moved one seed set's setting-means stack from
  0.3967 to 0.3932; its N x N eigensolves make it slow on wide data (paleo: 144 s a fit);
* ``vb`` (CVB0) at ``--vb-ranks`` x gamma in {1, 1/K}, alpha = beta = 1, seed j (none by
  default: it got weight 0 in every seed set of every dataset once mm was in, and took
  1440 of paleo's 1544 seconds per set);

and stacks them with the public API, ``bernmf.stack(fits, Y, validation=...)``, which
adds the smoothed column-frequency baseline. Methods (every weight and choice on the
validation entries only; the test entries score the result):

* ``stacked: setting means``: ``bernmf.stack``'s default (``seeds="mean"``): each MM
  setting's R seeds share one weight (the stack of the settings' uniform mixtures, as
  ``bernmf.fit(..., restarts=R, combine="mean")`` makes them), with logsvd, logpca and vb:
  R times fewer weights fitted to the validation entries;
* ``stacked: setting means, refit``: the same weights, every member of positive weight
  fitted again on the training and validation entries (``bernmf.stack(..., refit=True)``);
  its ``validation`` column is NaN (those entries are then training data);
* ``stacked: all engines``: every member above, each MM seed its own weight
  (``seeds="stack"``);
* ``stacked: mm grid``: the MM members only, a weight per seed (the modes study's
  "grid-stacked R");
* ``best single``: the one member of lowest validation perplexity.

``seconds`` is the sum of the members' run times (without compilation; with the
refit, the refits' too) plus the stacking's. Outputs in ``--out`` (default
``results/stacking``): ``results.csv`` (every method and seed set: test and validation
perplexity, seconds, the smallest test-entry probability of the method's predictive),
``weights.csv`` (weight per engine and rank of ``stacked: setting means`` and ``stacked:
all engines``), ``summary.csv`` (mean and sd over seed sets) and
``stacking.png`` (test perplexity against seconds). The CSVs are written after every
seed set, so an interrupted run keeps what it measured. ``weights.csv`` has a column
``stack`` naming the stacked method.

Run: ``.venv/bin/python experiments/stacking.py --data-dir ../shared/data [--quick]``;
``--ranks``, ``--seeds-per-set`` and ``--logsvd-ranks`` make it lighter, ``--vb-ranks``
heavier.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import bernmf
from bernmf.data import datasets
from bernmf.data.observed import as_observed
from bernmf.data.split import paper_split
from bernmf.fitting.stack import members_table
from bernmf.inference import mm

sys.path.insert(0, str(Path(__file__).parent))  # the modes study beside this script
from modes import GRIDS as MODES_GRIDS

SEEDS = {"animals": 10, "paleo": 4, "lastfm": 4}
"""Seeds per setting and seed set, per dataset."""
GRIDS = {
    name: {
        "ranks": grid["ranks"],
        "priors": grid["priors"],
        "R": SEEDS[name],
        "dtype": grid["dtype"],
    }
    for name, grid in MODES_GRIDS.items()
}
"""Per dataset: the modes study's MM grid and float type, and the seeds per setting (R)."""

QUICK = {"animals": {"ranks": (4, 8), "priors": ((1.5, 1.5), (1, 3)), "R": 2, "dtype": "float64"}}
LOGSVD_RANKS = (2, 4, 8, 16)
LOGPCA_RANKS = ()
VB_RANKS = ()


def log(message: str) -> None:
    print(message, flush=True)


def mm_pool(Y, split, grid: dict, seeds: int) -> dict[tuple, bernmf.Fit]:
    """MM fits ``{(rank, alpha, beta, seed): Fit}``, seeds 0 .. seeds - 1, one call per rank;
    each records its float type as :func:`bernmf.fit` records options (``record.plan``),
    which a refit (``bernmf.stack(..., refit=True)``) runs with."""
    data = as_observed(Y, split.train)
    pool = {}
    for rank in grid["ranks"]:
        settings = [(a, b, s) for a, b in grid["priors"] for s in range(seeds)]
        priors = [bernmf.Prior(a, b, 1.0).broadcast(rank) for a, b, _ in settings]
        batch = mm.run_many(data, rank, priors, [s for *_, s in settings], dtype=grid["dtype"])
        log(f"  mm rank {rank}: {len(settings)} fits, {batch.run_seconds:.1f} s run")
        for i, (a, b, s) in enumerate(settings):
            timings = {"compile": 0.0, "run": float(batch.seconds[i])}
            fit = batch.fit(i, priors[i], s, timings=timings)
            run = {"options": {"dtype": grid["dtype"]}}
            record = dataclasses.replace(fit.record, plan=run)
            pool[(rank, a, b, s)] = dataclasses.replace(fit, record=record)
    return pool


def engine_fits(Y, split, engine: str, rank: int, seed: int, prior=None) -> bernmf.Fit:
    fit = bernmf.fit(Y, engine, rank, mask=split.train, seed=seed, prior=prior)
    return fit


def scored(name: str, result: bernmf.Fit, Y, split, stack_seconds: float = 0.0) -> dict:
    """Test and validation perplexity (NaN for a refitted stack: the validation entries are
    its training data), seconds (the members' and refits' runs and the stacking's), the
    stacking's seconds alone, and the smallest test-entry probability."""
    rows, columns, y = as_observed(Y, split.test, warn_empty=False).entries()
    p = result.probs_at(rows, columns)
    refitted = (
        result.mixture is not None
        and result.mixture.stacking is not None
        and (result.mixture.stacking.refit)
    )
    return {
        "method": name,
        "test": result.perplexity(Y, split.test),
        "validation": np.nan if refitted else result.perplexity(Y, split.validation),
        "seconds": float(result.timings.get("run", 0.0)) + stack_seconds,
        "stack_seconds": stack_seconds,
        "min_test_probability": float(np.min(np.where(y == 1, p, 1 - p))),
    }


def run_dataset(name: str, grid: dict, args, out: Path, results: list, weights: list) -> None:
    Y = datasets.load(name, args.data_dir).to_numpy(dtype=float)
    split = paper_split(Y.shape)
    R, sets = grid["R"], args.sets
    log(f"{name} {Y.shape}: mm {len(grid['ranks'])} ranks x {len(grid['priors'])} priors x "
        f"{R} seeds per set, {sets} sets")  # fmt: skip
    begin = time.perf_counter()
    pool = mm_pool(Y, split, grid, R * sets)
    logsvd = [engine_fits(Y, split, "logsvd", k, 0) for k in args.logsvd_ranks]
    log(f"  logsvd: {sum(f.timings['run'] for f in logsvd):.1f} s run")
    logpca = [engine_fits(Y, split, "logpca", k, 0) for k in args.logpca_ranks]
    if logpca:
        log(f"  logpca: {sum(f.timings['run'] for f in logpca):.1f} s run")
    logistic = logsvd + logpca  # deterministic: members of every set
    for j in range(sets):
        mm_fits = [f for (k, a, b, s), f in pool.items() if j * R <= s < (j + 1) * R]
        vb = [
            engine_fits(Y, split, "vb", k, j, bernmf.Prior(1.0, 1.0, gamma))
            for k in args.vb_ranks
            for gamma in (1.0, 1.0 / k)
        ]
        if vb:
            log(f"  set {j}: vb {sum(f.timings['run'] for f in vb):.1f} s run")
        found = []
        everything = mm_fits + logistic + vb
        for method, members, seeds, refit in (
            ("stacked: setting means", everything, "mean", False),
            ("stacked: setting means, refit", everything, "mean", args.refit),
            ("stacked: all engines", everything, "stack", False),
            ("stacked: mm grid", mm_fits, "stack", False),
        ):
            if method.endswith("refit") and not refit:
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("error", bernmf.ZeroProbabilityWarning)
                stacked = bernmf.stack(
                    members, Y, validation=split.validation, mask=split.train, seeds=seeds,
                    refit=refit,
                )  # fmt: skip
                found.append(scored(method, stacked, Y, split, stacked.mixture.stacking.seconds))
            if refit:
                log(f"  set {j}: refit {stacked.mixture.stacking.refit_seconds:.1f} s")
            if method in ("stacked: setting means", "stacked: all engines"):
                table = members_table(stacked)
                by = table.groupby(["engine", "rank"], as_index=False)["weight"].sum()
                weights.append(by.assign(dataset=name, set=j, stack=method))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", bernmf.ZeroProbabilityWarning)  # flat-prior members
            chosen = min(everything, key=lambda f: f.perplexity(Y, split.validation))
            row = scored("best single", chosen, Y, split)
        found.append({**row, "method": f"best single ({chosen.engine} K={chosen.rank})"})
        for row in found:
            results.append({"dataset": name, "set": j, **row})
        log(
            "  " + ", ".join(f"{r['method']} {r['test']:.4f} ({r['seconds']:.0f} s)" for r in found)
        )
        write(results, weights, out)
    log(f"  {name}: {time.perf_counter() - begin:.0f} s")


def summarize(results: pd.DataFrame) -> pd.DataFrame:
    method = results["method"].str.replace(r" \(.*\)$", "", regex=True)
    grouped = results.assign(method=method).groupby(["dataset", "method"], sort=False)
    return grouped.agg(
        test_mean=("test", "mean"),
        test_sd=("test", "std"),
        validation_mean=("validation", "mean"),
        seconds_mean=("seconds", "mean"),
        stack_seconds_mean=("stack_seconds", "mean"),
        min_test_probability=("min_test_probability", "min"),
        sets=("test", "size"),
    ).reset_index()


def write(results: list, weights: list, out: Path) -> pd.DataFrame:
    out.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame(results)
    table.to_csv(out / "results.csv", index=False)
    summary = summarize(table)
    summary.to_csv(out / "summary.csv", index=False)
    if weights:
        pd.concat(weights, ignore_index=True).to_csv(out / "weights.csv", index=False)
    figure(summary, out / "stacking.png")
    return summary


def figure(summary: pd.DataFrame, path: Path) -> None:
    """Test perplexity against seconds, one panel per dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(summary["dataset"]))
    fig, axes = plt.subplots(1, len(names), figsize=(4.8 * len(names), 4), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        for _, row in summary[summary["dataset"] == name].iterrows():
            ax.errorbar(
                row["seconds_mean"], row["test_mean"], yerr=row["test_sd"], marker="o",
                capsize=3, label=row["method"],
            )  # fmt: skip
        ax.set(title=name, xscale="log", xlabel="seconds (members' runs)", ylabel="test perplexity")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="animals, tiny grid, 2 sets")
    parser.add_argument("--datasets", default="animals,paleo,lastfm")
    parser.add_argument("--data-dir", default=None, help="folder of <name>.csv or .rda")
    parser.add_argument("--sets", type=int, default=5, help="seed sets")
    parser.add_argument("--ranks", help="mm ranks, e.g. 4,8,16 (default: the grid's)")
    parser.add_argument("--seeds-per-set", type=int, help="mm seeds per setting and set (R)")
    parser.add_argument("--logsvd-ranks", default=",".join(map(str, LOGSVD_RANKS)))
    parser.add_argument("--logpca-ranks", default=",".join(map(str, LOGPCA_RANKS)))
    parser.add_argument("--vb-ranks", default=",".join(map(str, VB_RANKS)))
    parser.add_argument(
        "--no-refit", dest="refit", action="store_false",
        help="leave out 'stacked: setting means, refit' (the weighted members fitted again)",
    )  # fmt: skip
    parser.add_argument("--out", default="results/stacking")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message=".*distinct modes", category=UserWarning)
    grids = GRIDS
    if args.quick:
        grids, args.sets, args.datasets = QUICK, 2, "animals"
    for grid in grids.values():
        if args.ranks:
            grid["ranks"] = tuple(int(k) for k in args.ranks.split(","))
        if args.seeds_per_set:
            grid["R"] = args.seeds_per_set
    args.logsvd_ranks = [int(k) for k in args.logsvd_ranks.split(",") if k]
    args.logpca_ranks = [int(k) for k in args.logpca_ranks.split(",") if k]
    args.vb_ranks = [int(k) for k in args.vb_ranks.split(",") if k]
    begin = time.perf_counter()
    results, weights, out = [], [], Path(args.out)
    for name in args.datasets.split(","):
        run_dataset(name, grids[name], args, out, results, weights)
    summary = write(results, weights, out)
    with pd.option_context("display.width", 160):
        log(summary.to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    log(f"total {time.perf_counter() - begin:.0f} s; results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
