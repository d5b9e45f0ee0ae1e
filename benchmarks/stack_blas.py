"""BLAS limited to one thread while :func:`bernmf.stack` works, under load: a stack of lastfm fits.

Finding the stacking weights takes many small matrix products, and OpenBLAS wakes one thread
per core for them; on a loaded machine those threads spin. Since 3f55818 the stack's work
(``bernmf.fitting.stack._stacked``: the members' log densities, the weights) runs through
:func:`bernmf.fitting.runner.one_blas_thread`. Here the same work runs so (``pinned``) and
through the undecorated function (``_stacked.__wrapped__``: ``default``, BLAS as numpy and
scipy start it), interleaved, while a child process spins a busy loop
(``blas_threads.spin``). The members: ``mm`` at K = 2, 4, 8 x 3 seeds and ``logsvd`` at
K = 2, 4, fitted on lastfm's training entries (the paper's split) and weighted on its
validation entries, with the baseline. Printed: the medians of process CPU seconds and of
wall seconds per arm, and the ratios default / pinned.

Run: ``.venv/bin/python benchmarks/stack_blas.py [--repeats 5] [--data-dir ../shared/data]``

Measured 2026-11-29 03:50 UTC on the 2-core VM otherwise quiet (load average 0.9), defaults:
a stack of 11 fits and the baseline, CPU s 0.261 default against 0.072 pinned (3.63), wall s
0.174 against 0.051 (3.42).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from blas_threads import spin

import bernmf
from bernmf.data import datasets
from bernmf.data.observed import as_training
from bernmf.data.split import paper_split
from bernmf.fitting import stack


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--data-dir", default="../shared/data")
    args = parser.parse_args(argv)
    Y = datasets.load("lastfm", args.data_dir).to_numpy(float)
    split = paper_split(Y.shape)
    data, held_out = as_training(Y, split.train, split.validation)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fits = [
            bernmf.fit(Y, "mm", k, mask=split.train, seed=s) for k in (2, 4, 8) for s in range(3)
        ]
        fits += [bernmf.fit(Y, "logsvd", k, mask=split.train) for k in (2, 4)]
    _, members, recorded = stack._checked(fits, True, "mean", False, None)
    arms = {"default": stack._stacked.__wrapped__, "pinned": stack._stacked}
    busy = multiprocessing.Process(target=spin, daemon=True)
    busy.start()
    try:
        print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()}, a busy loop beside")
        seconds = {arm: [] for arm in arms}
        for repeat in range(args.repeats):
            for arm in arms if repeat % 2 == 0 else reversed(arms):
                cpu, wall = time.process_time(), time.perf_counter()
                arms[arm](list(members), list(recorded), data, held_out, True, "mean", False, None)
                seconds[arm].append((time.process_time() - cpu, time.perf_counter() - wall))
        cpu = {arm: statistics.median(s[0] for s in seconds[arm]) for arm in arms}
        wall = {arm: statistics.median(s[1] for s in seconds[arm]) for arm in arms}
        print(f"a stack of {len(members)} fits and the baseline, medians of {args.repeats}:")
        print(f"  CPU s: default {cpu['default']:.3f}, pinned {cpu['pinned']:.3f}, ratio "
              f"{cpu['default'] / cpu['pinned']:.2f}")  # fmt: skip
        print(f"  wall s: default {wall['default']:.3f}, pinned {wall['pinned']:.3f}, ratio "
              f"{wall['default'] / wall['pinned']:.2f}")  # fmt: skip
        print(f"load average after {os.getloadavg()}")
    finally:
        busy.terminate()


if __name__ == "__main__":
    main()
