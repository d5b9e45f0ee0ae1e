"""Time and peak memory of ``bernmf.data.datasets.read_csv`` against ``pandas.read_csv``.

Writes binary CSVs of the shapes a user met (issue 27) with row and column names
(as ``pandas.to_csv`` writes them): 374 x 1799 with 16% missing cells (a vote
matrix), 5069 x 5069 at 0.09% ones (a citation graph), 784 x 60000 at 19% ones
(MNIST's pixels by images; ``--rows`` shrinks its 60000 columns on a busy machine).
Each reader runs in a fresh process, alternating, so that load hits both alike;
the process reports the read's seconds and its peak resident memory above what it
held after the imports (``VmHWM``). Prints the medians and the ratios bernmf /
pandas; the target is at most 2 for both. Thread counts are pinned to 1.

Usage: ``python benchmarks/csv_read.py [--repeat 3] [--wide 60000] [--folder DIR]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

READERS = {
    "pandas": "pandas.read_csv(path, index_col=0)",
    "bernmf": "bernmf.data.datasets.read_csv(path)",
}
CHILD = """
import sys, time
import pandas, bernmf.data.datasets
def peak():
    with open("/proc/self/status") as status:
        return next(int(l.split()[1]) for l in status if l.startswith("VmHWM")) * 1024
def rss():
    with open("/proc/self/status") as status:
        return next(int(l.split()[1]) for l in status if l.startswith("VmRSS")) * 1024
path = sys.argv[1]
before = rss()
start = time.perf_counter()
frame = {reader}
seconds = time.perf_counter() - start
assert frame.shape == ({rows}, {cols}), frame.shape
print(seconds, peak() - before)
"""
PINNED = {v: "1" for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


def write_csv(path: Path, M: int, N: int, density: float, missing: float, seed: int) -> None:
    """A labelled binary CSV, as ``pandas.to_csv`` writes it (empty cells missing), fast."""
    rng = np.random.default_rng(seed)
    header = "," + ",".join(f"c{j}" for j in range(N)) + "\n"
    with open(path, "w") as file:
        file.write(header)
        for start in range(0, M, 256):
            block = (rng.random((min(256, M - start), N)) < density).astype(np.int8)
            cells = np.where(block == 1, "1", "0").astype(object)
            cells[rng.random(block.shape) < missing] = ""
            lines = [
                f"r{start + i}," + ",".join(row) + "\n" for i, row in enumerate(cells.tolist())
            ]
            file.writelines(lines)


def measure(reader: str, path: Path, shape: tuple[int, int]) -> tuple[float, int]:
    """Seconds and peak bytes of one read, in a fresh process."""
    code = CHILD.format(reader=READERS[reader], rows=shape[0], cols=shape[1])
    env = {**os.environ, **PINNED}
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env
    )
    if done.returncode:
        raise RuntimeError(done.stderr)
    seconds, peak = done.stdout.split()
    return float(seconds), int(peak)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="reads per reader and file (3)")
    parser.add_argument("--wide", type=int, default=60000, help="columns of the MNIST-like file")
    parser.add_argument("--folder", default=None, help="where the CSVs go (a temporary folder)")
    parser.add_argument("--only", type=int, nargs="*", help="the files to read, by number (all)")
    args = parser.parse_args(argv)
    shapes = {
        "votes 374 x 1799, 16% missing": (374, 1799, 0.3, 0.16),
        "graph 5069 x 5069, 0.09% ones": (5069, 5069, 0.0009, 0.0),
        f"pixels 784 x {args.wide}, 19% ones": (784, args.wide, 0.19, 0.0),
    }
    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        print(f"{'file':<34} {'pandas s':>9} {'bernmf s':>9} {'ratio':>6} "
              f"{'pandas MB':>10} {'bernmf MB':>10} {'ratio':>6}")  # fmt: skip
        for i, (name, (M, N, density, missing)) in enumerate(shapes.items()):
            if args.only and i not in args.only:
                continue
            path = Path(folder) / f"data{i}.csv"
            write_csv(path, M, N, density, missing, seed=i)
            runs: dict[str, list[tuple[float, int]]] = {r: [] for r in READERS}
            for _ in range(args.repeat):
                for reader in READERS:
                    runs[reader].append(measure(reader, path, (M, N)))
            seconds = {r: statistics.median(s for s, _ in runs[r]) for r in READERS}
            peak = {r: statistics.median(b for _, b in runs[r]) / 2**20 for r in READERS}
            print(
                f"{name:<34} {seconds['pandas']:>9.2f} {seconds['bernmf']:>9.2f} "
                f"{seconds['bernmf'] / seconds['pandas']:>6.2f} {peak['pandas']:>10.0f} "
                f"{peak['bernmf']:>10.0f} {peak['bernmf'] / peak['pandas']:>6.2f}",
                flush=True,
            )
            path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
