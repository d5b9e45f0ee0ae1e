"""The default search on a large sparse matrix: its time against its budget, its held-out
perplexity against single ``mm`` fits.

A 5000 x 5000 matrix with about 0.1% ones (as the nips co-authorship data) is simulated,
either from the model (``--kind model``: W ~ Dirichlet(1), H ~ Beta(0.05, 0.05 (1 - d) / d),
K = 8; ``benchmarks/sparse_large.py``'s) or as sparse blocks (``--kind blocks``: 8 groups of
rows and of columns, ones at ``--inside`` within a row group's own column group and at
``--outside`` elsewhere, about 0.1% in all); a random 15% of its entries is hidden (NaN) as the
test entries. Then ``bernmf.fit(Y_hidden)`` (the default search, ``--budget`` seconds of
work) and ``bernmf.fit(Y_hidden, "mm", K)`` at each of ``--ranks`` (default options) are
fitted one after the other in this process, each timed in CPU seconds (every thread) and wall
seconds, and scored on the test entries. The last line says whether the search held 1.5 x
its budget (in CPU seconds) and came within 2% of the best single fit.

Run: ``python benchmarks/search_large.py [--kind blocks] [--size 5000] [--budget 60]``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sparse_large import simulate_sparse

import bernmf
from bernmf.fitting import search


def blocks(seed: int, size: int, inside: float, outside: float, groups: int = 8) -> np.ndarray:
    """A size x size bool matrix of ``groups`` row and column groups: P(1) is ``inside``
    where a row's group is the column's, ``outside`` elsewhere."""
    rng = np.random.default_rng(seed)
    rows, columns = rng.integers(groups, size=size), rng.integers(groups, size=size)
    p = np.where(rows[:, None] == columns[None, :], inside, outside)
    return rng.random((size, size)) < p


def timed(what: str, make, Y, test) -> dict:
    """``make()`` timed (CPU and wall seconds) and scored on the test entries."""
    cpu, wall = time.process_time(), time.perf_counter()
    fit = make()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    row = {"fit": what, "cpu_seconds": cpu, "wall_seconds": wall,
           "test_perplexity": fit.perplexity(Y, test)}  # fmt: skip
    print(f"{what}: test perplexity {row['test_perplexity']:.6f}, {row['cpu_seconds']:.0f} CPU s, "
          f"{row['wall_seconds']:.0f} s", flush=True)  # fmt: skip
    return row | {"fit_object": fit}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=("model", "blocks"), default="model")
    parser.add_argument("--size", type=int, default=5000)
    parser.add_argument("--density", type=float, default=0.001)
    parser.add_argument("--inside", type=float, default=0.007)
    parser.add_argument("--outside", type=float, default=0.0002)
    parser.add_argument("--budget", type=float, default=search.BUDGET)
    parser.add_argument("--ranks", type=int, nargs="*", default=[2, 4, 8])
    args = parser.parse_args(argv)
    if args.kind == "model":
        Y = simulate_sparse(0, args.size, args.size, 8, args.density).astype(float)
    else:
        Y = blocks(0, args.size, args.inside, args.outside).astype(float)
    test = np.random.default_rng(1).random(Y.shape) < 0.15
    hidden = np.where(test, np.nan, Y)
    print(f"{args.kind}: {args.size} x {args.size}, {Y.mean():.4%} ones, {test.sum()} test "
          "entries", flush=True)  # fmt: skip
    found = timed("default", lambda: bernmf.fit(hidden, budget=args.budget), Y, test)
    record = found["fit_object"].extras["search"]
    print(
        f"  work {record['work_seconds']:.1f} s; fitted "
        + ", ".join(f"{s['engine']} K={s['rank']} x{s['fits']}" for s in record["fitted"])
        + "; left out "
        + ", ".join(f"{o['engine']} K={o['rank']}" for o in record["left_out"])
    )
    singles = [timed(f"mm K={k}", lambda k=k: bernmf.fit(hidden, "mm", k), Y, test)
               for k in args.ranks]  # fmt: skip
    if not singles:  # --ranks with none: the default alone
        return
    best = min(singles, key=lambda r: r["test_perplexity"])
    ratio = found["test_perplexity"] / best["test_perplexity"]
    held = found["cpu_seconds"] <= 1.5 * args.budget
    print(f"default / best single ({best['fit']}): {ratio:.4f} (target <= 1.02); default "
          f"{found['cpu_seconds']:.0f} CPU s against 1.5 x {args.budget:g} = "
          f"{1.5 * args.budget:g} ({'held' if held else 'NOT held'})")  # fmt: skip


if __name__ == "__main__":
    main()
