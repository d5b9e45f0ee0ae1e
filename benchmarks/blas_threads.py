"""BLAS limited to one thread during a fit, under load: ``logsvd`` on lastfm at K = 8, 16, 32.

A fit's LAPACK calls (JAX's ``eigh`` on CPU calls scipy's OpenBLAS) wake one BLAS thread per
core when the matrix is large enough; those threads spin while they wait, and on a loaded
machine that CPU is taken from the fit. :func:`bernmf.fitting.runner.one_blas_thread`
limits BLAS to one thread while the runner fits. Here the same engine call
(``Engine.fit`` of ``logsvd`` on lastfm's training entries, the paper's split) runs with
BLAS as numpy and scipy start it (``default``: one thread per core) and through
``one_blas_thread`` (``pinned``), the two interleaved (default first in the first, third,
... repeat, pinned first in the others), while a child process spins a busy loop on another
core. Each rank is compiled by a first fit, not timed. Printed per rank: the medians of
process CPU seconds (every thread of this process: the spinning ones count) and of wall
seconds, the ratios default / pinned, and the iteration counts of its fits (a single number
when every fit of both arms took as many). The process is not pinned to a core: the BLAS
threads' spinning is what is measured.

Run: ``.venv/bin/python benchmarks/blas_threads.py [--ranks 8 16 32] [--repeats 3]
[--data-dir ../shared/data]``

Measured 2026-11-28 on the shared 2-core VM, ``--data-dir ../shared/data``, default ranks
and repeats (medians of 3 fits per arm), twice: 23:12 to 23:19 UTC (other jobs: load average
3.9 at the start, 10.4 at the end; before the iterations were printed) and 23:21 to 23:32
(load 7.5, then 8.3):

    rank  CPU default CPU pinned ratio   wall default wall pinned ratio
    K=8          1.46       0.76  1.91           4.88        2.61  1.87
    K=16        15.65       2.32  6.74          43.21        4.05 10.66
    K=32        25.61       1.66 15.41          97.72        2.63 37.10

    rank  CPU default CPU pinned ratio   wall default wall pinned ratio   iterations
    K=8          1.05       0.84  1.25           3.13        1.64  1.92   [355]
    K=16        15.96       2.33  6.85          39.21        2.93 13.36   [921]
    K=32        23.13       1.71 13.56          66.03        4.09 16.12   [465]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time

import bernmf.data.datasets
from bernmf.data.observed import as_observed
from bernmf.data.split import paper_split
from bernmf.fitting.runner import one_blas_thread
from bernmf.inference import get_engine


def spin() -> None:
    """A busy loop: the load on the other core."""
    while True:
        pass


def timed(call, *args) -> tuple[float, float, int]:
    """(process CPU seconds, wall seconds, iterations) of the fit ``call(*args)``."""
    cpu, wall = time.process_time(), time.perf_counter()
    fit = call(*args)
    return time.process_time() - cpu, time.perf_counter() - wall, fit.n_iter


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", nargs="+", type=int, default=[8, 16, 32])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    Y = bernmf.data.datasets.load("lastfm", args.data_dir).to_numpy(dtype=float)
    train = as_observed(Y, paper_split(Y.shape).train)
    engine = get_engine("logsvd")
    arms = {"default": engine.fit, "pinned": one_blas_thread(engine.fit)}
    busy = multiprocessing.Process(target=spin, daemon=True)
    busy.start()
    try:
        from threadpoolctl import threadpool_info

        print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()}, a busy loop beside")
        print(f"rank  {'CPU default':>11s} {'CPU pinned':>10s} {'ratio':>5s}   ", end="")
        print(f"{'wall default':>12s} {'wall pinned':>11s} {'ratio':>5s}   iterations")
        for rank in args.ranks:
            engine.fit(train, rank)  # compiles
            seconds = {arm: [] for arm in arms}
            for repeat in range(args.repeats):
                for arm in arms if repeat % 2 == 0 else reversed(arms):
                    seconds[arm].append(timed(arms[arm], train, rank))
            cpu = {arm: statistics.median(s[0] for s in seconds[arm]) for arm in arms}
            wall = {arm: statistics.median(s[1] for s in seconds[arm]) for arm in arms}
            iterations = sorted({s[2] for arm in arms for s in seconds[arm]})
            print(
                f"K={rank:<3d} {cpu['default']:11.2f} {cpu['pinned']:10.2f} "
                f"{cpu['default'] / cpu['pinned']:5.2f}   {wall['default']:12.2f} "
                f"{wall['pinned']:11.2f} {wall['default'] / wall['pinned']:5.2f}   {iterations}",
                flush=True,
            )
        blas = [(i["internal_api"], i["filepath"].rsplit("/", 1)[-1]) for i in threadpool_info()]
        print(f"BLAS libraries loaded: {blas}; load average after {os.getloadavg()}")
    finally:
        busy.terminate()


if __name__ == "__main__":
    main()
