"""Seconds for an alpha x beta grid: a Python loop of ``bernmf.fit`` against ``bernmf.tune``.

On each dataset's paper split, at one rank, the same grid of MM fits (same priors,
seeds, tolerance, float64) is run three ways:

* ``loop``: ``bernmf.fit(Y, "mm", K, mask=train, prior=..., seed=...)`` for each point
  (the engine's compiled program is reused after the first fit; its compile time is
  left out);
* ``tune, one by one``: :func:`bernmf.tune.fit_batch` with ``batch_size=1`` (one compiled
  call; the fits run one after the other inside it: the CPU default);
* ``tune, vmapped``: the same call with the whole grid vmapped (``batch_size`` = grid
  size: the accelerator default).

Compile times are printed apart. Run:
``.venv/bin/python benchmarks/tune_speed.py [--datasets animals paleo] [--rank 4] [--grid 3]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

import bernmf
from bernmf import datasets, tune
from bernmf.data import as_observed
from bernmf.split import paper_split


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--datasets", nargs="+", default=["animals", "paleo"])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--rank", type=int, default=4)
    parser.add_argument("--grid", type=int, default=3, help="values of alpha (and of beta)")
    parser.add_argument("--out", default=None, help="CSV file for the table")
    args = parser.parse_args(argv)
    values = np.linspace(1, 3, args.grid)
    settings = [(a, b) for a in values for b in values]
    rows = []
    for name in args.datasets:
        Y = datasets.load(name, data_dir=args.data_dir)
        split = paper_split(Y.shape)
        priors = [bernmf.Prior(a, b) for a, b in settings]
        seeds = list(range(len(settings)))
        bernmf.fit(Y, "mm", args.rank, mask=split.train, max_iter=2)  # compile the engine
        begin = time.perf_counter()
        fits = [
            bernmf.fit(Y, "mm", args.rank, mask=split.train, prior=p, seed=s)
            for p, s in zip(priors, seeds, strict=True)
        ]
        loop = time.perf_counter() - begin
        sweeps = sum(f.n_iter for f in fits)
        rows.append((name, "loop of bernmf.fit", len(fits), sweeps, 0.0, loop))
        data = as_observed(Y, split.train)
        for label, batch_size in (("tune, one by one", 1), ("tune, vmapped", len(settings))):
            batch = tune.fit_batch(data, args.rank, priors, seeds, batch_size=batch_size)
            rows.append(
                (
                    name,
                    label,
                    len(seeds),
                    int(batch.n_iter.sum()),
                    batch.compile_seconds,
                    batch.run_seconds,
                )
            )
            # the same fits: same sweeps as the loop
            assert int(batch.n_iter.sum()) == sweeps, (label, batch.n_iter, sweeps)
    table = pd.DataFrame(
        rows, columns=["dataset", "method", "fits", "sweeps", "compile_s", "run_s"]
    )
    loop_seconds = table.groupby("dataset")["run_s"].transform("first")
    table["speedup_vs_loop"] = loop_seconds / table["run_s"]
    table["ms_per_sweep"] = 1000 * table["run_s"] / table["sweeps"]
    print(f"rank {args.rank}, {len(settings)} (alpha, beta) points, tol 1e-5, float64")
    print(table.round(3).to_string(index=False))
    if args.out:
        table.to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
