"""Same-process A/B of this checkout against an older one: a plain sweep, an accelerated
fit, a 3 x 3 grid, and the first fit's compile time.

The old package is copied from a git revision into a temporary folder as ``bernmf_old``
(its absolute imports renamed), so both run in one process on one pinned core, their
runs interleaved, and only ratios are compared (this machine is shared and noisy).
Each case reports the median over ``--repeats`` turns (each the fastest of ``--best-of``
calls) of new / old seconds of process CPU time of the whole call (the first call of each
compiles and is not counted), so that other processes' load does not count; and the
first fit's compile seconds, both compiled with the persistent compilation cache off.

Run: ``.venv/bin/python benchmarks/ab.py [--old 76436b8] [--repeats 7] [--old-tree DIR]``
(``--old-tree``: a folder holding the old ``bernmf/``, where git history is absent.)
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from single_core import describe, pin

ROOT = Path(__file__).parents[1]


def old_package(revision: str, folder: Path, tree: Path | None = None) -> str:
    """``bernmf`` of ``revision`` (or the copy in ``tree``) in ``folder`` as ``bernmf_old``."""
    if tree is None:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", revision, "bernmf"],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    else:  # a machine without the repository's history (the GPU machine)
        shutil.copytree(tree / "bernmf", folder / "bernmf")
    (folder / "bernmf").rename(folder / "bernmf_old")
    for path in (folder / "bernmf_old").rglob("*.py"):
        text = path.read_text()
        text = text.replace("from bernmf.", "from bernmf_old.").replace(
            "from bernmf import", "from bernmf_old import"
        )
        text = text.replace("import bernmf.", "import bernmf_old.")
        path.write_text(text)
    sys.path.insert(0, str(folder))
    return "bernmf_old"


def cases(package):
    """The timed calls of one package: name -> function returning CPU seconds; the compile."""
    bernmf = importlib.import_module(package)
    tune = importlib.import_module(f"{package}.tune")
    split = importlib.import_module(f"{package}.data.split")
    Y, _, _ = bernmf.simulate(0, 300, 150, 4)
    parts = split.random_split(Y.shape, seed=0)
    common = {"mask": parts.train, "tol": 0.0}

    def cpu_seconds(call):
        def timed():
            begin = time.process_time()
            call()
            return time.process_time() - begin

        return timed

    def sweep():
        bernmf.fit(Y, "mm", 4, accelerate=False, max_iter=300, **common)

    def accelerated():
        bernmf.fit(Y, "mm", 4, max_iter=100, **common)

    def grid():
        tune.grid(
            Y, [4], [1.0, 1.5, 2.0], [1.0, 1.5, 2.0], validation=parts.validation,
            progress=False, max_iter=100, **common,
        )  # fmt: skip

    def first_compile():
        return bernmf.fit(Y[:, :149], "mm", 3, max_iter=5, mask=parts.train[:, :149]).timings[
            "compile"
        ]

    timed = {"plain sweep": sweep, "accelerated fit": accelerated, "3x3 grid": grid}
    return {name: cpu_seconds(call) for name, call in timed.items()}, first_compile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default="76436b8", help="git revision to compare against")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--best-of", type=int, default=3, help="calls per turn, fastest kept")
    parser.add_argument("--old-tree", type=Path, help="a folder holding the old bernmf/ instead")
    args = parser.parse_args()
    pin()
    # Both compile cold: with the new package's persistent cache on, the old one (which
    # has none) would read programs the new one wrote, or the reverse.
    os.environ["BERNMF_COMPILE_CACHE"] = "off"
    import numpy as np

    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory() as folder:
        old = old_package(args.old, Path(folder), args.old_tree)
        both = {"old": cases(old), "new": cases("bernmf")}
        print(describe())
        compiles = {name: pair[1]() for name, pair in both.items()}
        seconds = {name: {case: [] for case in both[name][0]} for name in both}
        for name in both:  # the first call of each compiles
            for call in both[name][0].values():
                call()
        for repeat in range(args.repeats):  # each case old and new back to back, in turns
            for case in seconds["old"]:
                for name in ("old", "new") if repeat % 2 == 0 else ("new", "old"):
                    call = both[name][0][case]
                    seconds[name][case].append(min(call() for _ in range(args.best_of)))
        for case in seconds["old"]:
            old_s, new_s = (np.median(seconds[n][case]) for n in ("old", "new"))
            print(f"{case:16s} old {old_s:.4f} s  new {new_s:.4f} s  new/old {new_s / old_s:.3f}")
        ratio = compiles["new"] / compiles["old"]
        print(
            f"first-fit compile old {compiles['old']:.2f} s  new {compiles['new']:.2f} s  "
            f"new/old {ratio:.3f}"
        )


if __name__ == "__main__":
    main()
