"""Seconds per MM sweep and peak memory per process of fits across 1, 2 and 4 processes.

Each configuration starts P local processes (``jax.distributed.initialize`` on CPU
with gloo collectives, one XLA host device and one thread each, each pinned to a
core where the machine has enough), each simulating only its own block of rows
(bool, from the model, seeded by the process index) and calling
``bernmf.fit(Y_local, "mm", 16, distributed=True, accelerate=False, tol=0)`` with 1
and with 1 + ``--iterations`` sweeps (each twice, the faster counted); the
difference of the run times over ``--iterations`` is the time per sweep
(compilation excluded). Peak memory is ``ru_maxrss`` of each process (JAX runtime,
its block, W), the largest over the processes reported, and that above the runtime's
(one process of 10 rows); the ratios are to one process at the same scaling.

* weak scaling: ``--rows-per-process`` rows x ``--cols`` columns per process
  (default 10,000 x 1,000 = 1e7 entries), P = 1, 2, 4;
* strong scaling: a fixed ``--total-rows`` x ``--cols`` matrix (default 20,000 x
  1,000 = 2e7 entries) split over P = 1, 2, 4.

Run: ``python benchmarks/distributed.py [--quick] [--out results/benchmarks]``;
writes ``distributed.csv`` and ``distributed.png`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's bernmf, also when run as a script
RANK = 16
PROCESSES = (1, 2, 4)


def worker(port: int, count: int, index: int, rows: int, cols: int, iterations: int) -> None:
    """One process: join, simulate its block, time the sweeps, print a JSON line."""
    import resource

    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"localhost:{port}", num_processes=count, process_id=index)
    import numpy as np

    import bernmf
    from bernmf.data.files.readers import rows_of

    start, stop = rows_of(index, count, rows)
    rng = np.random.default_rng(index)
    H = np.random.default_rng(10**6).beta(0.3, 3.0, size=(RANK, cols))
    W = rng.dirichlet(np.ones(RANK), size=stop - start)
    Y = rng.random((stop - start, cols)) < W @ H
    del W
    seconds, compile_seconds = {}, 0.0
    for sweeps in (1, 1 + iterations):
        seconds[sweeps] = float("inf")
        for _ in range(2):
            fit = bernmf.fit(
                Y, "mm", RANK, max_iter=sweeps, tol=0, accelerate=False, distributed=True
            )
            compile_seconds += fit.timings["compile"]
            seconds[sweeps] = min(seconds[sweeps], fit.timings["run"])
    per_sweep = (seconds[1 + iterations] - seconds[1]) / iterations
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"index": index, "s per sweep": per_sweep, "peak RSS MB": peak_mb}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_point(count: int, rows: int, cols: int, iterations: int, timeout: float = 900) -> dict:
    """Start ``count`` worker processes; the slowest sweep time and largest peak memory."""
    port, cores = free_port(), os.cpu_count() or 1
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env["XLA_FLAGS"] = (
        "--xla_force_host_platform_device_count=1 --xla_cpu_multi_thread_eigen=false "
        "intra_op_parallelism_threads=1"
    )
    processes = []
    for i in range(count):
        command = [sys.executable, __file__, "--worker", str(port), str(count), str(i)]
        command += [str(rows), str(cols), str(iterations)]
        pin = (lambda core=i % cores: os.sched_setaffinity(0, {core})) if cores > 1 else None
        processes.append(
            subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True, preexec_fn=pin)
        )
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in processes):
        if any(p.poll() not in (None, 0) for p in processes) or time.monotonic() > deadline:
            for p in processes:
                if p.poll() is None:
                    p.kill()
            raise RuntimeError(f"a worker failed or timed out ({count} processes, {rows} rows)")
        time.sleep(0.2)
    lines = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in processes]
    return {
        "processes": count,
        "rows": rows,
        "cols": cols,
        "entries per process": rows * cols // count,
        "s per sweep": max(line["s per sweep"] for line in lines),
        "peak RSS MB": max(line["peak RSS MB"] for line in lines),
    }


def plot(table, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for scaling, rows in table.groupby("scaling"):
        axes[0].plot(rows["processes"], rows["s per sweep"], "o-", label=scaling)
        axes[1].plot(rows["processes"], rows["peak RSS MB"], "o-", label=scaling)
    axes[0].set(xlabel="processes", ylabel="seconds per sweep", xticks=PROCESSES)
    axes[1].set(xlabel="processes", ylabel="peak RSS per process (MB)", xticks=PROCESSES)
    axes[0].legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=6, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    parser.add_argument("--rows-per-process", type=int, default=10_000)
    parser.add_argument("--total-rows", type=int, default=20_000)
    parser.add_argument("--cols", type=int, default=1000)
    parser.add_argument("--iterations", type=int, default=4, help="sweeps timed per point")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "benchmarks")
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    import pandas as pd

    if args.quick:
        args.rows_per_process, args.total_rows, args.cols = 200, 400, 50
    runtime = run_point(1, 10, args.cols, 1)["peak RSS MB"]  # JAX and bernmf, almost no data
    points = []
    for count in PROCESSES:
        weak = run_point(count, args.rows_per_process * count, args.cols, args.iterations)
        points.append({"scaling": "weak", **weak})
        strong = run_point(count, args.total_rows, args.cols, args.iterations)
        points.append({"scaling": "strong", **strong})
        print(f"{count} processes done", file=sys.stderr)
    table = pd.DataFrame(points).sort_values(["scaling", "processes"])
    table["MB above runtime"] = table["peak RSS MB"] - runtime
    one = table[table["processes"] == 1].set_index("scaling")
    for column, name in (("s per sweep", "time ratio"), ("MB above runtime", "memory ratio")):
        table[name] = table[column] / table["scaling"].map(one[column])
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "distributed.csv", index=False)
    plot(table, args.out / "distributed.png")
    print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))


if __name__ == "__main__":
    main()
