"""How near ``bernmf report``'s estimate of each engine's steps is to the time they took.

``bernmf.studies.report.budget`` estimates every engine's steps by probe fits before the
first fit, and its later steps (seeds, ensembles) again from its tuning fits once they have
run; ``tests/test_report.py`` checks those formulas with a fake clock. Here the report runs
on a simulated 150 x 5429 matrix shaped like the UN roll calls
(``bernmf.simulate(0, 150, 5429, 4, Prior(0.15, 0.25, 0.2))``, 30% of its entries missing
at random; ``--rows`` and ``--columns`` for a smaller one of the same kind), every engine
within ``--budget`` seconds, timed in CPU seconds of this process (``clock=
time.process_time``) and pinned to one core with one thread per library, so that the other
work of a shared machine changes the ratios little. It prints the page's table of seconds
per engine (planned, estimated, measured, and measured / estimated: the report aims at
1.5x either way), the engines left out, and the load average before and after.

Run: ``nice -n 5 .venv/bin/python benchmarks/report_estimate.py [--budget 600]
[--engines mm em ...] [--rows 150 --columns 5429]`` (about 10 CPU minutes at the default
budget; on a busy machine, its wall-clock time is that over the share of a core it gets).
"""

from __future__ import annotations

import single_core

single_core.pin()

import argparse  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import bernmf  # noqa: E402
from bernmf.studies.report import page  # noqa: E402
from bernmf.studies.report import run as report  # noqa: E402


def votes(rows: int, columns: int) -> np.ndarray:
    """The simulated vote-like matrix: K = 4, Prior(0.15, 0.25, 0.2), 30% missing."""
    Y, _, _ = bernmf.simulate(0, rows, columns, 4, bernmf.Prior(0.15, 0.25, 0.2))
    Y = np.asarray(Y, float)
    Y[np.random.default_rng(0).random(Y.shape) < 0.3] = np.nan
    return Y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=600.0, help="CPU seconds")
    parser.add_argument("--engines", nargs="+", default=None, help="default: every engine")
    parser.add_argument("--rows", type=int, default=150)
    parser.add_argument("--columns", type=int, default=5429)
    args = parser.parse_args()
    print(single_core.describe())
    print(f"load average before {os.getloadavg()}", flush=True)
    warnings.simplefilter("ignore")  # H at 0 or 1, few draws: not what is timed
    Y = votes(args.rows, args.columns)
    begin = time.perf_counter()
    result = report.run({"votes": Y}, args.engines, budget=args.budget, clock=time.process_time)
    wall = time.perf_counter() - begin
    print(f"load average after {os.getloadavg()}")
    print(f"{result.seconds:.0f} CPU s ({wall:.0f} s wall) of a budget of {args.budget:.0f}")
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(page.times_table(result, "votes").round(2).to_string(index=False))
        if len(result.left_out):
            print("left out:", result.left_out.round(0).to_string(index=False))


if __name__ == "__main__":
    main()
