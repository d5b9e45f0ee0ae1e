"""Iterations, MM sweeps and seconds to tolerance, with and without SQUAREM acceleration.

On each dataset's paper split (train entries observed), at the rank and validation-tuned
prior below (the best alpha, beta of that rank in ``experiments/paper.py``'s grid, whose
gamma is 1: so is this prior's, as when docs/speed.md's table was measured), and for a few
seeds, ``bernmf.fit(Y, "mm", K, ...)`` runs

* ``plain``: ``accelerate=False``, to the default stop (relative change < 1e-5);
* ``accelerated``: ``accelerate=True``, to the same stopping rule (between accelerated
  iterations, each of which is three MM sweeps);
* ``to plain's stop``: ``accelerate=True`` with ``tol=0`` and just enough accelerated
  iterations to reach the objective at which plain MM stopped (the first accelerated
  iterate at or below it, found from the accelerated trace), timed on its own.

The target of the issue is ``plain iterations / accelerated iterations to plain's stop
>= 3``; the ratio of MM sweeps (each accelerated iteration costs three, plus one sweep
at the start) and of seconds are printed beside it, with the final objective and the
test perplexity of both stops. Run times exclude compilation. Outputs, in ``--out``
(default ``results/benchmarks``): ``accelerate.csv`` (one row per fit) and
``accelerate.png`` (objective above the best value found, against seconds, for the
first seed; the seconds of a trace's points are the run time shared evenly among the
sweeps).

Run: ``.venv/bin/python benchmarks/accelerate.py [--seeds 3] [--quick]``
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

import bernmf
from bernmf.data import datasets
from bernmf.data.split import paper_split

CASES = {  # dataset: (rank, alpha, beta) tuned on validation at that rank
    "animals": (4, 1.2, 1.8),
    "paleo": (8, 1.2, 2.8),
    "lastfm": (16, 1.8, 3.0),
}
MAX_ITER = 20000


def fits_for(Y, split, rank, prior, seed):
    """The three fits of one (dataset, seed), as rows, and the two traces with seconds."""
    options = {"mask": split.train, "prior": prior, "seed": seed, "max_iter": MAX_ITER}
    plain = bernmf.fit(Y, "mm", rank, accelerate=False, **options)
    fast = bernmf.fit(Y, "mm", rank, accelerate=True, **options)
    target = plain.trace[-1]
    reached = np.flatnonzero(fast.trace <= target)
    if reached.size:
        steps = max(int(reached[0]), 1)
        to_target = bernmf.fit(
            Y, "mm", rank, accelerate=True, tol=0, **options | {"max_iter": steps}
        )
        fits = {"plain": plain, "accelerated": fast, "to plain's stop": to_target}
    else:  # not reached before the accelerated stop: reported as missing
        fits = {"plain": plain, "accelerated": fast}
    rows = [
        {
            "method": method,
            "iterations": fit.n_iter,
            "sweeps": fit.record.sweeps,
            "seconds": fit.timings["run"],
            "converged": fit.converged,
            "objective": fit.trace[-1],
            "test_perplexity": fit.perplexity(Y, split.test),
        }
        for method, fit in fits.items()
    ]
    curves = {
        "plain": (np.arange(plain.n_iter + 1) / plain.n_iter * plain.timings["run"], plain.trace),
        "accelerated": (
            (1 + 3 * np.arange(fast.n_iter + 1)) / fast.record.sweeps * fast.timings["run"],
            fast.trace,
        ),
    }
    return rows, curves


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Per dataset, means over seeds, and the plain / accelerated ratios."""
    wide = table.pivot_table(
        index=["dataset", "rank", "seed"],
        columns="method",
        values=["iterations", "sweeps", "seconds", "test_perplexity"],
    )
    reach = "to plain's stop"
    ratios = pd.DataFrame(
        {
            "plain_iterations": wide["iterations", "plain"],
            "accel_iterations_to_plain_stop": wide["iterations", reach],
            "iterations_ratio": wide["iterations", "plain"] / wide["iterations", reach],
            "sweeps_ratio": wide["sweeps", "plain"] / wide["sweeps", reach],
            "seconds_ratio": wide["seconds", "plain"] / wide["seconds", reach],
            "accel_iterations_to_tol": wide["iterations", "accelerated"],
            "seconds_ratio_to_tol": wide["seconds", "plain"] / wide["seconds", "accelerated"],
            "test_perplexity_plain": wide["test_perplexity", "plain"],
            "test_perplexity_accel": wide["test_perplexity", "accelerated"],
        }
    )
    return ratios.groupby(["dataset", "rank"], sort=False).mean().reset_index()


def figure(curves: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(4.4 * len(curves), 3.6), squeeze=False)
    for ax, (label, by_method) in zip(axes[0], curves.items(), strict=True):
        best = min(trace.min() for _, trace in by_method.values())
        for method, (seconds, trace) in by_method.items():
            gap = trace - best
            keep = gap > 0
            ax.plot(seconds[keep], gap[keep], label=method)
        ax.set(yscale="log", xlabel="seconds (run)", ylabel="objective - best found", title=label)
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0, 1, ... per dataset")
    parser.add_argument("--out", type=Path, default=Path("results/benchmarks"))
    parser.add_argument("--quick", action="store_true", help="animals, one seed")
    args = parser.parse_args(argv)
    names = ["animals"] if args.quick else args.datasets
    seeds = range(1 if args.quick else args.seeds)
    rows, curves = [], {}
    for name in names:
        rank, alpha, beta = CASES[name]
        Y = datasets.load(name, data_dir=args.data_dir)
        split = paper_split(Y.shape)
        prior = bernmf.Prior(alpha, beta, 1.0)
        bernmf.fit(Y, "mm", rank, mask=split.train, max_iter=MAX_ITER, accelerate=False, tol=1)
        bernmf.fit(Y, "mm", rank, mask=split.train, max_iter=MAX_ITER, tol=1)  # compile both
        for seed in seeds:
            begin = time.perf_counter()
            found, traces = fits_for(Y, split, rank, prior, seed)
            rows += [{"dataset": name, "rank": rank, "alpha": alpha, "beta": beta, "seed": seed}
                     | row for row in found]  # fmt: skip
            if seed == seeds[0]:
                curves[f"{name}, K = {rank}, seed {seed}"] = traces
            print(f"{name} seed {seed}: {time.perf_counter() - begin:.1f} s", flush=True)
    table = pd.DataFrame(rows)
    summary = summarize(table)
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "accelerate.csv", index=False)
    figure(curves, args.out / "accelerate.png")
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(table.round(4).to_string(index=False))
        print("\nmeans over seeds (ratios are plain / accelerated)")
        print(summary.round(3).to_string(index=False))
    print(f"\noutputs in {args.out}")
    return summary


if __name__ == "__main__":
    main()
