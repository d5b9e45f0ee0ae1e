"""Seconds per MM iteration and peak memory as Y grows, and rows sharded over 4 host devices.

Each point runs in a fresh subprocess, so that its peak resident memory
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``) is its own: the process simulates a
binary Y of M x N entries from the model (bool, drawn in row chunks; fully observed),
then calls ``bernmf.fit(Y, "mm", rank=16, block_rows="auto", max_iter=..., tol=0,
accelerate=False)`` (an iteration is one plain MM sweep)
with 1 and with 1 + ``--iterations`` iterations (each twice, the faster run
counted) and reports the difference of their run times per iteration (compilation
excluded; the 1-iteration run, which also evaluates the objective twice, is reported
too) and the peak memory of the whole process (JAX runtime, Y, validation, the Fit
with its M x N ``probs`` included).

The sharding comparison runs each of two processes with
``XLA_FLAGS=--xla_force_host_platform_device_count=4``: ``devices=None`` against
``devices=jax.devices()`` (4 CPU devices sharing this machine's cores).

Run: ``python benchmarks/scaling.py [--quick] [--max-entries 1e8] [--out results/benchmarks]``
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

N_COLUMNS = 1000
SIZES = [(100, N_COLUMNS), (1000, N_COLUMNS), (10_000, N_COLUMNS), (100_000, N_COLUMNS)]
QUICK_SIZES = [(400, 25)]
SHARDING_SIZE = (20_000, N_COLUMNS)
QUICK_SHARDING_SIZE = (41, 25)
RANK = 16
QUICK_RANK = 3


def simulate_bool(seed: int, M: int, N: int, K: int, chunk_rows: int = 4096):
    """Y ~ Bernoulli(W @ H) with W ~ Dirichlet(1), H ~ Beta(0.3, 3), as bool, in row chunks."""
    import numpy as np

    rng = np.random.default_rng(seed)
    H = rng.beta(0.3, 3.0, size=(K, N))
    Y = np.empty((M, N), bool)
    for start in range(0, M, chunk_rows):
        W = rng.dirichlet(np.ones(K), size=min(chunk_rows, M - start))
        Y[start : start + len(W)] = rng.random((len(W), N)) < W @ H
    return Y


def measure(M: int, N: int, K: int, iterations: int, sharded: bool) -> dict:
    """One point, in this process: fit timings and the process's peak memory."""
    import resource

    import jax

    import bernmf

    Y = simulate_bool(0, M, N, K)
    devices = jax.devices() if sharded else None
    run_seconds, compile_seconds = {}, 0.0
    for n_iter in (1, 1 + iterations):
        run_seconds[n_iter] = float("inf")
        for _ in range(2):  # best of two runs (the first also compiles, timed apart)
            result = bernmf.fit(
                Y,
                "mm",
                K,
                max_iter=n_iter,
                tol=0,
                block_rows="auto",
                devices=devices,
                seed=1,
                accelerate=False,  # an iteration is one MM sweep
            )
            compile_seconds += result.timings["compile"]
            run_seconds[n_iter] = min(run_seconds[n_iter], result.timings["run"])
            extras = result.extras
            del result  # its M x N probs
    seconds = (run_seconds[1 + iterations] - run_seconds[1]) / iterations
    return {
        "M": M,
        "N": N,
        "entries": M * N,
        "K": K,
        "devices": extras["devices"],
        "block_rows": extras["block_rows"] or "unblocked",
        "s per iteration": seconds,
        "1-iteration run s": run_seconds[1],
        "compile s": compile_seconds,
        "peak RSS MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "Y bool MB": Y.nbytes / 2**20,
        "cores": len(os.sched_getaffinity(0)),
    }


def run_point(M, N, K, iterations, sharded=False, host_devices=None) -> dict:
    """:func:`measure` in a fresh Python process; returns its result."""
    flags = {}
    if host_devices:
        flags["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={host_devices}"
    point = {"M": M, "N": N, "K": K, "iterations": iterations, "sharded": sharded}
    return fresh_process.run_point(__file__, point, **flags)


def plot(scaling, sharding, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (speed, memory, shards) = plt.subplots(1, 3, figsize=(12, 3.6))
    speed.loglog(scaling["entries"], scaling["s per iteration"], "o-")
    speed.set(xlabel="entries M x N", ylabel="s per MM iteration", title=f"K = {scaling.K[0]}")
    memory.loglog(scaling["entries"], scaling["peak RSS MB"] / 1024, "o-", label="peak RSS")
    memory.loglog(scaling["entries"], scaling["Y bool MB"] / 1024, "s--", label="Y (bool)")
    memory.axhline(4, color="gray", linestyle=":", label="4 GB")
    memory.set(xlabel="entries M x N", ylabel="GB", title="peak resident memory")
    memory.legend()
    labels = [f"{d} device(s)" for d in sharding["devices"]]
    shards.bar(labels, sharding["s per iteration"])
    M, N = sharding.M[0], sharding.N[0]
    shards.set(ylabel="s per MM iteration", title=f"{M} x {N}, 4 host devices")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--point", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    parser.add_argument("--max-entries", type=float, default=1e8, help="largest M x N to run")
    parser.add_argument("--iterations", type=int, default=4, help="iterations timed per point")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "benchmarks")
    args = parser.parse_args()
    if args.point:
        print(json.dumps(measure(**json.loads(args.point))))
        return
    import pandas as pd

    sizes, sharding_size, K = SIZES, SHARDING_SIZE, RANK
    if args.quick:
        sizes, sharding_size, K = QUICK_SIZES, QUICK_SHARDING_SIZE, QUICK_RANK
    rows = []
    for M, N in sizes:
        if M * N > args.max_entries:
            continue
        begin = time.perf_counter()
        rows.append(run_point(M, N, K, args.iterations))
        print(
            f"{M} x {N}: {rows[-1]['s per iteration']:.4f} s/iter, "
            f"peak {rows[-1]['peak RSS MB']:.0f} MB ({time.perf_counter() - begin:.0f} s)",
            flush=True,
        )
    scaling = pd.DataFrame(rows)
    sharding = pd.DataFrame(
        [run_point(*sharding_size, K, args.iterations, sharded, 4) for sharded in (False, True)]
    )
    print("\nScaling (block_rows='auto', fully observed):")
    print(scaling.to_string(index=False, float_format="%.4g"))
    print("\nRows sharded over 4 host devices (XLA_FLAGS device count 4) vs one device:")
    print(sharding.to_string(index=False, float_format="%.4g"))
    args.out.mkdir(parents=True, exist_ok=True)
    scaling.to_csv(args.out / "scaling.csv", index=False)
    sharding.to_csv(args.out / "sharding.csv", index=False)
    plot(scaling, sharding, args.out / "scaling.png")
    print(f"wrote scaling.csv, sharding.csv and scaling.png in {args.out}")


if __name__ == "__main__":
    main()
