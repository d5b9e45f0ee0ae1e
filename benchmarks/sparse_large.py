"""A large sparse binary matrix, default MM fit: seconds, peak memory, iterations, objective.

Each fit runs in a fresh subprocess (its peak resident memory,
``resource.getrusage(RUSAGE_SELF).ru_maxrss``, is its own: JAX runtime, Y, the fit):
the process simulates a fully observed M x N bool Y with about ``--density`` ones
(W ~ Dirichlet(1), H ~ Beta(0.05, 0.05 (1 - d) / d), so that E[Y] = d; drawn in row
chunks), then calls ``bernmf.fit(Y, "mm", K, seed=0, **options)`` with the default
options and with each ``--compare`` option set (e.g. ``dtype=float64``, the default
fit until 2026-11), and reports the fit's wall seconds (compile included), its CPU
seconds (all threads; on a loaded machine they show what the fit itself took), its
timings, accelerated iterations, MM sweeps, layout, final objective and peak RSS.
Each figure is printed beside its anchor: issue 26 asks for a 5000 x 5000 matrix with
0.1% ones at K = 8 in at most 3 minutes and 800 MB, at the objective of the fit
before (``--compare dtype=float64``, run in the same call).

Heavy at the full size (minutes per fit): develop with ``--size 2000``.

Run: ``python benchmarks/sparse_large.py [--size 5000] [--density 0.001] [--rank 8]
[--compare dtype=float64]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's bernmf, also when run as a script

import fresh_process  # noqa: E402

TARGET_SECONDS, TARGET_MB = 180, 800


def simulate_sparse(seed: int, M: int, N: int, K: int, density: float, chunk_rows: int = 1024):
    """Y ~ Bernoulli(W @ H) as bool with E[Y] = density: W ~ Dirichlet(1), H ~ Beta.

    Returns Y (M, N) bool and the truth, W (M, K) and H (K, N).
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    H = rng.beta(0.05, 0.05 * (1 - density) / density, size=(K, N))
    Y, W = np.empty((M, N), bool), np.empty((M, K))
    for start in range(0, M, chunk_rows):
        stop = min(start + chunk_rows, M)
        W[start:stop] = rng.dirichlet(np.ones(K), size=stop - start)
        Y[start:stop] = rng.random((stop - start, N)) < W[start:stop] @ H
    return Y, W, H


def measure(size: int, density: float, rank: int, options: dict) -> dict:
    """One fit in this process: its figures and the process's peak memory."""
    import resource

    import bernmf

    Y = simulate_sparse(0, size, size, rank, density)[0]
    begin, cpu = time.perf_counter(), time.process_time()
    fit = bernmf.fit(Y, "mm", rank, seed=0, **options)
    seconds, cpu = time.perf_counter() - begin, time.process_time() - cpu
    return {
        "options": " ".join(f"{k}={v}" for k, v in options.items()) or "default",
        "ones %": 100 * Y.mean(),
        "seconds": seconds,
        "CPU s": cpu,
        "compile s": fit.timings["compile"],
        "run s": fit.timings["run"],
        "iterations": fit.n_iter,
        "float32 iterations": fit.extras.get("float32_iterations", 0),
        "sweeps": fit.record.sweeps,
        "layout": fit.extras["layout"],
        "block rows": fit.extras["block_rows"],
        "converged": fit.converged,
        "objective": fit.objective,
        "peak RSS MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_point(size: int, density: float, rank: int, options: dict) -> dict:
    """:func:`measure` in a fresh Python process."""
    point = {"size": size, "density": density, "rank": rank, "options": options}
    return fresh_process.run_point(__file__, point)


def parse_option(text: str) -> tuple[str, object]:
    """``name=value`` with the value read as JSON when it parses (numbers, null), else text."""
    name, _, value = text.partition("=")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--point", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, default=5000, help="M = N")
    parser.add_argument("--density", type=float, default=0.001, help="expected share of ones")
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument(
        "--compare", nargs="*", default=[], help="option sets to fit too, e.g. dtype=float64"
    )
    args = parser.parse_args()
    if args.point:
        print(json.dumps(measure(**json.loads(args.point))))
        return
    import pandas as pd

    print(f"load average {os.getloadavg()}; cores {sorted(os.sched_getaffinity(0))}")
    sets = [{}] + [dict([parse_option(t) for t in c.split(",")]) for c in args.compare]
    rows = []
    for options in sets:
        rows.append(run_point(args.size, args.density, args.rank, options))
        print(json.dumps(rows[-1]), flush=True)
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(table.to_string(index=False, float_format="%.6g"))
    default = rows[0]
    print(
        f"default fit, {args.size} x {args.size}, K = {args.rank}: {default['seconds']:.0f} s "
        f"[target <= {TARGET_SECONDS} s at 5000 x 5000], peak {default['peak RSS MB']:.0f} MB "
        f"[target <= {TARGET_MB} MB]"
    )
    for row in rows[1:]:
        relative = (default["objective"] - row["objective"]) / abs(row["objective"])
        print(
            f"  against {row['options']}: time ratio {row['seconds'] / default['seconds']:.2f}, "
            f"objective {default['objective']:.6g} vs {row['objective']:.6g} "
            f"(relative difference {relative:+.2e}; tol 1e-5)"
        )
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
