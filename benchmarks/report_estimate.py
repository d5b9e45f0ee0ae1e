"""How near ``bernmf report --quick``'s estimate of a fit is to the fit's measured time.

``bernmf.studies.report.budget.estimate`` times probe fits (one compiles, then one stopped
after an iteration and one after a few) and extrapolates to ``max_iter`` iterations
(``tests/test_report.py`` checks that formula with a fake clock). Here, per engine, on a
simulated 300 x 200 matrix at K = 4 with ``max_iter=300, tol=0`` (exactly 300
iterations): the estimate of one fit's run time (the estimate of 10 fits less that of
none, over 10: the compile time cancels), the median run time of ``--repeats`` real fits,
and their ratio (measured / estimated; the report needs it within a factor of a few).
Pinned to one core, so that the ratio does not depend on the other work of the machine.

Run: ``.venv/bin/python benchmarks/report_estimate.py [--engines em mm vb] [--repeats 3]``
"""

from __future__ import annotations

import single_core

single_core.pin()

import argparse  # noqa: E402
import os  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

import bernmf  # noqa: E402
from bernmf.data.split import paper_split  # noqa: E402
from bernmf.studies.report.budget import estimate  # noqa: E402

OPTIONS = {"max_iter": 300, "tol": 0.0}
"""Exactly 300 iterations per fit."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", nargs="+", default=["em", "mm", "vb"])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(single_core.describe())
    print(f"load average {os.getloadavg()}")
    warnings.simplefilter("ignore")  # H at 0 or 1 (a flat prior): not what is timed
    Y, _, _ = bernmf.simulate(1, 300, 200, 4, bernmf.Prior(0.3, 0.6, 0.5))
    split = paper_split(Y.shape)
    print(f"{'engine':>7} {'estimated s':>12} {'measured s':>11} {'measured / estimated':>21}")
    for engine in args.engines:
        estimate(Y, split, engine, 4, OPTIONS, 1)  # compiles
        compiled = estimate(Y, split, engine, 4, OPTIONS, 0)
        per_fit = (estimate(Y, split, engine, 4, OPTIONS, 10) - compiled) / 10
        spent = np.median(
            [
                bernmf.fit(Y, engine, 4, mask=split.train, **OPTIONS).timings["run"]
                for _ in range(args.repeats)
            ]
        )
        print(f"{engine:>7} {per_fit:12.4f} {spent:11.4f} {spent / per_fit:21.2f}")


if __name__ == "__main__":
    main()
