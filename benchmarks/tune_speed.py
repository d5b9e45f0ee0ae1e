"""Seconds for an alpha x beta grid and for restarts: Python loops of ``bernmf.fit`` against
one compiled call.

On each dataset's paper split, at one rank, the same grid of MM fits (same priors,
seeds, tolerance, float64; SQUAREM-accelerated unless ``--no-accelerate``) is run three
ways:

* ``loop``: ``bernmf.fit(Y, "mm", K, mask=train, prior=..., seed=...)`` for each point
  (the engine's compiled program is reused after the first fit; its compile time is
  left out);
* ``tune, one by one``: :func:`bernmf.inference.mm.run_many` with ``batch_size=1`` (one compiled
  call; the fits run one after the other inside it: the CPU default);
* ``tune, vmapped``: the same call with the whole grid vmapped (``batch_size`` = grid
  size: the accelerator default).

and ``--restarts`` fits of one prior (the grid's middle point) from seeds 0, 1, ... two
ways: ``restarts, loop`` (``bernmf.fit(..., seed=s)`` for each seed, keeping the lowest
objective) and ``bernmf.fit(..., restarts=R)`` (one compiled call; same best fit).

Compile times are printed apart. Run:
``.venv/bin/python benchmarks/tune_speed.py [--datasets animals paleo] [--rank 4] [--grid 3]
[--restarts 10] [--no-accelerate]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

import bernmf
from bernmf.data import datasets
from bernmf.data.observed import as_observed
from bernmf.data.split import paper_split
from bernmf.inference import mm


def restart_rows(name, Y, rank, prior, restarts, common) -> list[tuple]:
    """A loop of ``restarts`` single fits keeping the best, and ``fit(..., restarts=R)``."""
    begin = time.perf_counter()
    loop = [bernmf.fit(Y, "mm", rank, prior=prior, seed=s, **common) for s in range(restarts)]
    loop_seconds = time.perf_counter() - begin
    best = min(loop, key=lambda f: f.trace[-1])
    bernmf.fit(Y, "mm", rank, prior=prior, restarts=restarts, tol=1, **common)  # compile
    batched = bernmf.fit(Y, "mm", rank, prior=prior, restarts=restarts, **common)
    assert batched.seed == best.seed, (batched.seed, best.seed)  # the same best fit
    iterations = sum(f.n_iter for f in loop)
    assert sum(batched.mixture.table()["n_iter"]) == iterations
    return [
        (name, "restarts", "loop of bernmf.fit", restarts, iterations, 0.0, loop_seconds),
        (
            name,
            "restarts",
            f"fit(restarts={restarts})",
            restarts,
            iterations,
            batched.timings["compile"],
            batched.timings["run"],
        ),
    ]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--datasets", nargs="+", default=["animals", "paleo"])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--rank", type=int, default=4)
    parser.add_argument("--grid", type=int, default=3, help="values of alpha (and of beta)")
    parser.add_argument("--restarts", type=int, default=10, help="seeds of the restarts rows")
    parser.add_argument("--no-accelerate", dest="accelerate", action="store_false")
    parser.add_argument("--out", default=None, help="CSV file for the table")
    args = parser.parse_args(argv)
    accelerate = {"accelerate": args.accelerate}
    values = np.linspace(1, 3, args.grid)
    settings = [(a, b) for a in values for b in values]
    rows = []
    for name in args.datasets:
        Y = datasets.load(name, data_dir=args.data_dir)
        split = paper_split(Y.shape)
        priors = [bernmf.Prior(a, b, 1.0) for a, b in settings]  # gamma of the documented runs
        seeds = list(range(len(settings)))
        common = {"mask": split.train, **accelerate}
        bernmf.fit(Y, "mm", args.rank, tol=1, **common)  # compile the engine
        begin = time.perf_counter()
        fits = [
            bernmf.fit(Y, "mm", args.rank, prior=p, seed=s, **common)
            for p, s in zip(priors, seeds, strict=True)
        ]
        loop = time.perf_counter() - begin
        iterations = sum(f.n_iter for f in fits)
        rows.append((name, "grid", "loop of bernmf.fit", len(fits), iterations, 0.0, loop))
        data = as_observed(Y, split.train)
        for label, batch_size in (("tune, one by one", 1), ("tune, vmapped", len(settings))):
            batch = mm.run_many(data, args.rank, priors, seeds, batch_size=batch_size, **accelerate)
            rows.append(
                (
                    name,
                    "grid",
                    label,
                    len(seeds),
                    int(batch.n_iter.sum()),
                    batch.compile_seconds,
                    batch.run_seconds,
                )
            )
            # the same fits: same iterations as the loop
            assert int(batch.n_iter.sum()) == iterations, (label, batch.n_iter, iterations)
        rows += restart_rows(name, Y, args.rank, priors[len(priors) // 2], args.restarts, common)
    table = pd.DataFrame(
        rows,
        columns=["dataset", "comparison", "method", "fits", "iterations", "compile_s", "run_s"],
    )
    loops = table["run_s"].where(table["method"] == "loop of bernmf.fit")
    loop_seconds = loops.groupby([table["dataset"], table["comparison"]]).transform("max")
    table["speedup_vs_loop"] = loop_seconds / table["run_s"]
    table["ms_per_iteration"] = 1000 * table["run_s"] / table["iterations"]
    print(
        f"rank {args.rank}, {len(settings)} (alpha, beta) points, {args.restarts} restarts, "
        f"tol 1e-5, float64, {'accelerated' if args.accelerate else 'plain'} MM"
    )
    print(table.round(3).to_string(index=False))
    if args.out:
        table.to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
