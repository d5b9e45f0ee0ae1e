"""Seconds of ``bernmf.diagnostics`` against its former implementation, at lastfm's size.

Synthetic draws of the shape of the NUTS lastfm fit (``experiments/nuts_lastfm.py``:
2 chains x 1000 draws, lastfm 1226 x 285, K = 8): rows of W on the simplex and H in
(0, 1), autocorrelated along the draws (AR(1) logits, lag-1 correlation 0.7). The
former implementation (``reference_*`` in ``tests/test_convergence.py``) takes minutes,
so its R-hat of WH is timed on the first ``--old-rows`` rows of W and scaled to all
rows (it is linear in the rows); its R-hat of W and H and its ESS are timed whole. The
new one is timed whole, with ``--threads`` threads, and its values are checked against
the former ones on the rows both computed (R-hat) and on the chosen entries (ESS).

BLAS runs one thread (set before numpy loads); the CPUs, threads and load are printed.
Wall and CPU seconds are both reported: on a shared machine wall time depends on load.

Writes ``summary.csv`` (one row: the seconds, ratios and differences) in ``--out``.
With ``--profile``, the new one runs once more on one thread under ``cProfile`` (CPU
clock) and the functions taking the most of its own CPU time are printed and written
to ``profile.csv``: where the time goes (the sorts, the normal scores, the products
forming WH, the FFTs of ESS, ...).

Run: ``.venv/bin/python benchmarks/diagnostics_speed.py [--old-rows 12] [--threads 2]
[--profile] [--out results/diagnostics_speed]``
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"

import argparse  # noqa: E402
import cProfile  # noqa: E402
import pstats  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import bernmf  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_convergence import (  # noqa: E402
    _fit_with_draws,
    reference_ess_arrays,
    reference_rank_rhat,
    reference_wh_rhat,
    synthetic_factor_draws,
)


def timed(function, *args, **kwargs):
    """(result, wall seconds, CPU seconds of this process)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def profile(fit, top: int = 12) -> pd.DataFrame:
    """CPU seconds of the functions taking the most of their own time in one diagnostics run."""
    profiler = cProfile.Profile(time.process_time)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        profiler.runcall(bernmf.diagnostics, fit, threads=1)
    stats = pstats.Stats(profiler).stats  # (file, line, name) -> (calls, _, own, cumulative, _)
    table = pd.DataFrame(
        [
            {"function": f"{Path(file).name}:{name}", "calls": calls, "own_cpu_s": own}
            for (file, _, name), (_, calls, own, _, _) in stats.items()
        ]
    )
    table["share"] = table["own_cpu_s"] / table["own_cpu_s"].sum()
    return table.sort_values("own_cpu_s", ascending=False).head(top)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=1226)
    parser.add_argument("--columns", type=int, default=285)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--old-rows", type=int, default=12)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("results/diagnostics_speed"))
    args = parser.parse_args(argv)
    from threadpoolctl import threadpool_info

    blas = [(i["internal_api"], i["num_threads"]) for i in threadpool_info()]
    print(
        f"CPUs {sorted(os.sched_getaffinity(0))}, BLAS {blas}, diagnostics threads "
        f"{args.threads}, load average {os.getloadavg()}"
    )
    rng = np.random.default_rng(0)
    C, S, M, N, K = args.chains, args.draws, args.rows, args.columns, args.rank
    W, H = synthetic_factor_draws(rng, C=C, S=S, M=M, K=K, N=N)
    fit = _fit_with_draws(W, H)
    print(f"draws: {C} chains x {S}, W {M} x {K}, H {K} x {N}: {M * N} entries of WH")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        new, new_wall, new_cpu = timed(bernmf.diagnostics, fit, threads=args.threads)
    print(f"new: {new_wall:.1f} s wall, {new_cpu:.1f} s CPU")

    aligned = bernmf.align_components(fit)
    W_aligned, H_aligned = aligned.draws["W"], aligned.draws["H"]
    rows = slice(0, args.old_rows)
    old_wh, wh_wall, wh_cpu = timed(reference_wh_rhat, W_aligned, H_aligned, rows)
    old_w, w_wall, w_cpu = timed(reference_rank_rhat, W_aligned)
    old_h, h_wall, h_cpu = timed(reference_rank_rhat, H_aligned)
    (bulk, tail), ess_wall, ess_cpu = timed(reference_ess_arrays, W_aligned, H_aligned)
    scale = M / args.old_rows
    old_wall = wh_wall * scale + w_wall + h_wall + ess_wall
    old_cpu = wh_cpu * scale + w_cpu + h_cpu + ess_cpu
    print(
        f"old: R-hat of WH {wh_wall:.1f} s wall on {args.old_rows} rows of W -> "
        f"{wh_wall * scale:.0f} s for {M}; R-hat of W and H {w_wall + h_wall:.1f} s; "
        f"ESS {ess_wall:.1f} s"
    )
    print(f"old (extrapolated): {old_wall:.0f} s wall, {old_cpu:.0f} s CPU")
    print(f"ratio old / new: {old_wall / new_wall:.1f} (wall), {old_cpu / new_cpu:.1f} (CPU)")

    rhat_gap = max(
        np.max(np.abs(new.rhat["WH"][rows] - old_wh)),
        np.max(np.abs(new.rhat["W"] - old_w)),
        np.max(np.abs(new.rhat["H"] - old_h)),
    )
    ess_gap = max(
        np.nanmax(np.abs(new_ess[q] / old_ess[q] - 1))
        for new_ess, old_ess in ((new.ess_bulk, bulk), (new.ess_tail, tail))
        for q in ("WH", "W", "H")
    )
    print(f"largest difference new - old: R-hat {rhat_gap:.1e}, relative ESS {ess_gap:.1e}")
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {
        "entries": M * N,
        "threads": args.threads,
        "load_average": os.getloadavg()[0],
        "new_wall_s": new_wall,
        "new_cpu_s": new_cpu,
        "old_wall_s": old_wall,
        "old_cpu_s": old_cpu,
        "ratio_wall": old_wall / new_wall,
        "ratio_cpu": old_cpu / new_cpu,
        "max_rhat_difference": rhat_gap,
        "max_relative_ess_difference": ess_gap,
    }
    pd.DataFrame([summary]).to_csv(args.out / "summary.csv", index=False)
    if args.profile:
        table = profile(fit)
        print(f"profile (one thread, own CPU seconds):\n{table.to_string(index=False)}")
        table.to_csv(args.out / "profile.csv", index=False)


if __name__ == "__main__":
    main()
