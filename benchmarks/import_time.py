"""Time ``import bernmf`` against ``import jax``, in fresh processes.

Each repetition starts one Python process per statement, alternating them so that a
change of the machine's load hits all alike, and times the import inside the process
(interpreter start-up left out). Prints the median of each and the ratio of bernmf's
to jax's, the one library it cannot start without; the target is at most 1.2.
bernmf loads pandas and scipy.sparse (shown beside, as jax's are) when an input or a
function needs them, and NumPyro, ArviZ, matplotlib and scikit-learn when an engine
or function does.

Usage: ``python benchmarks/import_time.py [--repeat 7]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

STATEMENTS = {
    "bernmf": "import bernmf",
    "jax": "import jax",
    "jax, pandas, scipy.sparse": "import jax, pandas, scipy.sparse",
}
TIMER = "import time; t = time.perf_counter(); {}; print(time.perf_counter() - t)"


def import_seconds(statement: str) -> float:
    """Seconds ``statement`` takes in a fresh interpreter."""
    command = [sys.executable, "-c", TIMER.format(statement)]
    return float(subprocess.run(command, capture_output=True, text=True, check=True).stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="processes per statement (7)")
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {name: [] for name in STATEMENTS}
    for _ in range(args.repeat):
        for name, statement in STATEMENTS.items():
            times[name].append(import_seconds(statement))
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, values in times.items():
        shown = " ".join(f"{v:.2f}" for v in values)
        print(f"import {name:<26} median {medians[name]:.3f} s   ({shown})")
    ratio = medians["bernmf"] / medians["jax"]
    print(f"ratio {ratio:.2f} (target <= 1.2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
