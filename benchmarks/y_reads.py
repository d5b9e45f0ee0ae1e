"""How often each entry point reads the values of a user's Y, and the CPU seconds it spends
reading them: ``as_observed``'s check of Y's values (``_dense_ones_and_missing``) wrapped
with a counter, on a simulated matrix with 10% of its entries missing.

Run in a checkout (``PYTHONPATH`` at it) to compare two:
``.venv/bin/python benchmarks/y_reads.py [--rows 40 --cols 30]``.

Measured 2026-11-29 on the 2-core VM at 40 x 30 (reads; ea4e788 -> cc5ab51): bernmf.fit
with a rank 1 -> 1, without (the search) 1 -> 1, compare with validation entries 6 -> 1,
tune.grid 1 -> 1, bernmf.stack 1 -> 1, ``bernmf fit`` 2 -> 1 (with and without --rank),
``bernmf tune`` 2 -> 1, a report of mm and em 33 -> 1. ``tests/test_validation.py`` and
``tests/test_report.py`` hold the counts at 1.
"""

from __future__ import annotations

import argparse
import pathlib
import tempfile
import time
import warnings

import numpy as np
import pandas as pd

import bernmf
from bernmf import tune
from bernmf.cli.parser import main
from bernmf.data import observed
from bernmf.data.split import random_split
from bernmf.studies.report import run as report


def counted(reads: list[float]):
    """``_dense_ones_and_missing`` appending the CPU seconds of each call to ``reads``."""
    read = observed._dense_ones_and_missing

    def wrapper(*args):
        begin = time.process_time()
        made = read(*args)
        reads.append(time.process_time() - begin)
        return made

    return wrapper


def calls(Y, split, folder: pathlib.Path) -> dict:
    """Each entry point, called on ``Y``: name -> call."""
    path = folder / "y.csv"
    pd.DataFrame(Y).to_csv(path, index=False, header=False, na_rep="NA")
    parts = {"mask": split.train, "validation": split.validation}
    fits = [bernmf.fit(Y, "mm", k, mask=split.train) for k in (2, 3)]
    command = [str(path), "--quiet"]
    return {
        "bernmf.fit rank": lambda: bernmf.fit(Y, "mm", 2, **parts),
        "bernmf.fit search": lambda: bernmf.fit(Y, mask=split.train, budget=2, progress=False),
        "compare": lambda: bernmf.compare(
            Y,
            ["mm", "em"],
            [2, 3],
            seeds=[0, 1],
            train=split.train,
            test=split.test,
            validation=split.validation,
            progress=False,
        ),
        "tune.grid": lambda: tune.grid(Y, [2, 3], **parts, combine="stack", progress=False),
        "bernmf.stack": lambda: bernmf.stack(fits, Y, **parts),
        "bernmf fit --rank": lambda: main(
            ["fit", *command, "--rank", "2", "--out", str(folder / "a")]
        ),
        "bernmf fit": lambda: main(["fit", *command, "--budget", "2", "--out", str(folder / "b")]),
        "bernmf tune": lambda: main(["tune", *command, "--ranks", "2", "--out", str(folder / "c")]),
        "report": lambda: report.run(
            {"Y": Y},
            ["mm", "em"],
            ranks=(2, 3),
            shared_rank=3,
            priors=(1.0, 1.5),
            seeds=range(2),
            restarts=2,
            progress=False,
        ),
    }


def main_(rows: int, cols: int) -> None:
    warnings.simplefilter("ignore")
    Y, _, _ = bernmf.simulate(0, rows, cols, 3, bernmf.Prior(0.3, 0.6, 0.5))
    Y = np.asarray(Y, float)
    Y[np.random.default_rng(1).random(Y.shape) < 0.1] = np.nan
    split = random_split(Y.shape, seed=0)
    reads: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        made = calls(Y, split, pathlib.Path(folder))
        observed._dense_ones_and_missing = counted(reads)
        print(f"{rows} x {cols}: entry point, reads of Y's values, CPU s reading them")
        for name, call in made.items():
            reads.clear()
            call()
            print(f"  {name:20} {len(reads):3d}  {sum(reads):.4f}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=40)
    parser.add_argument("--cols", type=int, default=30)
    main_(**vars(parser.parse_args()))
