"""Seconds of chain stacking (PSIS-LOO of every entry and chain) at lastfm's size.

Draws of the shape of a 2-chain NUTS fit of lastfm (1226 x 285, K = 8, 1000 draws per
chain; synthetic, autocorrelated, as ``benchmarks/diagnostics_speed.py``), 80% of the
entries observed. ``bernmf.posterior.stacking_weights.chain_stacking`` (no validation:
PSIS-LOO) is timed whole, twice (the first call compiles, unless the persistent
compilation cache holds its programs); ``arviz_stats``' entry-by-entry ``loo`` is timed on the first
``--arviz-entries`` entries of each chain and scaled to all of them (it is linear in the
entries), and the two are checked equal on those entries. ``--baseline DIR`` times
``chain_stacking`` of another checkout (e.g. the commit before a change) in a process
of its own, pinned the same way, for a before / after ratio in one run.

One core, one BLAS / XLA thread (``single_core.pin``). Prints each figure beside its
anchor: the target (30 s) and the former implementation.

Run: ``.venv/bin/python benchmarks/stacking_speed.py [--arviz-entries 2000] [--baseline DIR]``
"""

from __future__ import annotations

import single_core

single_core.pin()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from bernmf.posterior.arviz import pointwise_log_likelihood  # noqa: E402
from bernmf.posterior.stacking_weights import chain_stacking  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_convergence import synthetic_factor_draws  # noqa: E402

TARGET_SECONDS = 30.0


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=1226)
    parser.add_argument("--columns", type=int, default=285)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--arviz-entries", type=int, default=2000)
    parser.add_argument("--baseline", type=Path, help="another checkout to time the same way")
    parser.add_argument("--time-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    print(single_core.describe())
    rng = np.random.default_rng(0)
    C, S, M, N, K = args.chains, args.draws, args.rows, args.columns, args.rank
    W, H = synthetic_factor_draws(rng, C=C, S=S, M=M, K=K, N=N)
    Y = (rng.random((M, N)) < W[0, 0] @ H[0, 0]).astype(float)
    mask = rng.random((M, N)) < 0.8
    n = int(mask.sum())
    print(f"draws: {C} chains x {S}, {M} x {N}, K = {K}; {n} observed entries")

    begin, cpu = time.perf_counter(), time.process_time()
    result = chain_stacking(Y, mask, W, H)
    seconds, first_cpu = time.perf_counter() - begin, time.process_time() - cpu
    begin, cpu = time.perf_counter(), time.process_time()
    chain_stacking(Y, mask, W, H)
    again, again_cpu = time.perf_counter() - begin, time.process_time() - cpu
    if args.time_only:
        print(json.dumps({"cpu": again_cpu, "wall": again}))
        return
    if args.baseline is not None:
        env = dict(os.environ, PYTHONPATH=str(args.baseline.resolve()))
        command = [sys.executable, __file__, "--time-only", *(argv or sys.argv[1:])]
        command = [a for a in command if a != "--baseline" and a != str(args.baseline)]
        out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        base = json.loads(out.stdout.splitlines()[-1])

    from arviz_stats.base import array_stats

    rows, columns = np.nonzero(mask)
    few = np.zeros_like(mask)
    few[rows[: args.arviz_entries], columns[: args.arviz_entries]] = True
    arviz_seconds, gap = 0.0, 0.0
    for c in range(C):
        terms = pointwise_log_likelihood(Y, few, W[c : c + 1], H[c : c + 1])[0].T
        begin = time.process_time()
        elpd, k, _ = array_stats.loo(terms[:, None, :], chain_axis=-2, draw_axis=-1)
        arviz_seconds += time.process_time() - begin
        gap = max(gap, np.max(np.abs(elpd - result.lpd[: args.arviz_entries, c])))
        gap = max(gap, np.nanmax(np.abs(k - result.pareto_k[: args.arviz_entries, c])))
    arviz_all = arviz_seconds * n / args.arviz_entries
    print(f"load average {os.getloadavg()}; CPU seconds are the figures (wall depends on load)")
    print(f"chain_stacking, first call (compile included): {first_cpu:.1f} s CPU, "
          f"{seconds:.1f} s wall   [target <= {TARGET_SECONDS:.0f} s]")  # fmt: skip
    print(f"chain_stacking, second call: {again_cpu:.1f} s CPU, {again:.1f} s wall   "
          f"[target <= {TARGET_SECONDS:.0f} s]")  # fmt: skip
    print(f"arviz_stats loo entry by entry: {arviz_seconds:.1f} s CPU on "
          f"{args.arviz_entries} entries x {C} chains -> {arviz_all:.0f} s for {n}   "
          f"[ratio arviz / new: {arviz_all / again_cpu:.0f}x]")  # fmt: skip
    if args.baseline is not None:
        print(f"baseline {args.baseline}: {base['cpu']:.1f} s CPU, {base['wall']:.1f} s wall   "
              f"[ratio baseline / new (CPU): {base['cpu'] / again_cpu:.1f}x]")  # fmt: skip
    print(f"largest difference from arviz_stats (elpd, k): {gap:.1e}   [asked <= 1e-8]")
    print(f"weights {np.round(result.weights, 3)}, share of k > 0.7 {result.share_k_high}")


if __name__ == "__main__":
    main()
