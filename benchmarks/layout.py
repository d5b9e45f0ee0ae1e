"""Dense against sparse ones: MM seconds per sweep by density of ones, one process.

The MM sweep computes its sums either on whole (M, N) arrays or with the observed
ones gathered (``layout="dense"`` / ``"sparse"``, :mod:`bernmf.inference.mm.layout`).
This script times both on the same data, interleaved, for several densities of ones
at lastfm's shape (and a larger one), K = 16, float64, plain sweeps, on one pinned
core (``single_core.pin``); the ratio sets ``layout.SPARSE_DENSITY``, the density below which
``layout="auto"`` takes sparse ones.

Run: ``.venv/bin/python benchmarks/layout.py [--quick] [--out results/layout.csv]``
"""

from __future__ import annotations

import single_core

single_core.pin()

import argparse  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import bernmf  # noqa: E402
from bernmf.inference.mm import layout  # noqa: E402

SHAPES = ((1226, 285), (3000, 1000))
DENSITIES = (0.005, 0.01, 0.02, 0.04, 0.08, 0.16)


def seconds_per_sweep(Y, name: str, rank: int, sweeps: int) -> float:
    """Run time of ``sweeps`` plain sweeps, divided by them (the program compiled first)."""
    options = {"layout": name, "block_rows": None, "accelerate": False, "tol": 0}
    bernmf.fit(Y, "mm", rank, max_iter=sweeps, **options)  # compile
    fit = bernmf.fit(Y, "mm", rank, max_iter=sweeps, **options)
    return fit.timings["run"] / sweeps


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--sweeps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one small shape, two densities")
    parser.add_argument("--out", default=None, help="CSV file for the table")
    args = parser.parse_args(argv)
    shapes, densities = (SHAPES[:1], DENSITIES[1::3]) if args.quick else (SHAPES, DENSITIES)
    rng = np.random.default_rng(0)
    rows = []
    for M, N in shapes:
        for density in densities:
            Y = (rng.random((M, N)) < density).astype(np.int8)
            best = {"dense": np.inf, "sparse": np.inf}
            for _ in range(args.repeats):  # interleaved, best of the repeats
                for name in best:
                    best[name] = min(best[name], seconds_per_sweep(Y, name, args.rank, args.sweeps))
            rows.append((M, N, density, 1e3 * best["dense"], 1e3 * best["sparse"]))
            print(f"{M} x {N}, density {density}: dense {rows[-1][3]:.2f} ms, "
                  f"sparse {rows[-1][4]:.2f} ms", flush=True)  # fmt: skip
    table = pd.DataFrame(rows, columns=["M", "N", "density", "dense_ms", "sparse_ms"])
    table["dense/sparse"] = table["dense_ms"] / table["sparse_ms"]
    print(f"K = {args.rank}, float64, plain sweeps; {single_core.describe()}")
    print(f"layout.SPARSE_DENSITY = {layout.SPARSE_DENSITY}")
    print(table.round(3).to_string(index=False))
    if args.out:
        table.to_csv(args.out, index=False)
    return table


if __name__ == "__main__":
    main()
