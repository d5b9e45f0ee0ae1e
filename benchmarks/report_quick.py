"""Seconds of ``bernmf report --quick`` (animals), twice in a row on one compilation cache.

Each run is a fresh process (``python -m bernmf report --quick``), pinned like this one
(``single_core.pin``: one core, one BLAS / XLA thread), on a temporary, initially empty
compilation cache folder (``BERNMF_COMPILE_CACHE``) that the second run finds warm: the
second run is the figure of issue 26 (at most 15 s on a warm cache). Wall and CPU
seconds (user + system of the child, from ``resource``) are printed for each run; on a
loaded machine CPU seconds are the comparable figure. ``--baseline DIR`` runs the same
pair with another checkout (e.g. the commit before a change), on a cache of its own, so
that before and after compare in one run.

Run: ``.venv/bin/python benchmarks/report_quick.py [--baseline DIR] [--data-dir DIR]``
"""

from __future__ import annotations

import single_core

single_core.pin()

import argparse  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 15.0


def run(tree: Path, cache: str, out: str, data_dir: str | None) -> tuple[float, float]:
    """(wall, CPU) seconds of one ``bernmf report --quick`` process from checkout ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree), BERNMF_COMPILE_CACHE=cache)
    if data_dir:
        env["BERNMF_DATA_DIR"] = data_dir
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    begin = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "bernmf", "report", "--quick", "--out", out, "--force"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    wall = time.perf_counter() - begin
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def pair(label: str, tree: Path, data_dir: str | None) -> tuple[float, float]:
    """Both runs of one checkout on a fresh cache; returns the second's (wall, CPU)."""
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as out:
        first = run(tree, cache, out, data_dir)
        second = run(tree, cache, out, data_dir)
    print(f"{label}: first run {first[0]:.1f} s wall, {first[1]:.1f} s CPU (empty cache); "
          f"second {second[0]:.1f} s wall, {second[1]:.1f} s CPU (warm)")  # fmt: skip
    return second


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another checkout to time the same way")
    parser.add_argument("--data-dir", default=None, help="BERNMF_DATA_DIR for the runs")
    args = parser.parse_args(argv)
    print(single_core.describe())
    print(f"load average {os.getloadavg()}")
    wall, cpu = pair("this checkout", ROOT, args.data_dir)
    print(f"warm run: {wall:.1f} s wall, {cpu:.1f} s CPU   [target <= {TARGET_SECONDS:.0f} s]")
    if args.baseline is not None:
        base_wall, base_cpu = pair(f"baseline {args.baseline}", args.baseline, args.data_dir)
        print(f"warm run, baseline / this: {base_wall / wall:.2f}x wall, "
              f"{base_cpu / cpu:.2f}x CPU")  # fmt: skip
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
