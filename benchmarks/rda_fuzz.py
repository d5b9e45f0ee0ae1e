"""The fuzz of R data files at scale: crashes and peak memory under an address-space limit.

Runs ``--workers`` processes of :mod:`tests.rda_files`, each reading ``--files`` generated
``.rda`` files with :func:`bernmf.data.datasets.read_rda` (valid matrices; ALTREP objects
of any class, length and state; lists nested up to 3000 deep; declared lengths past the
bytes; wide strings; hundreds of thousands of objects; functions and environments; what
is not a matrix; matrices near the budget; random objects; damaged files; wrong starts;
every compression), under ``BERNMF_MEMORY_LIMIT=--budget`` and an address-space limit
(``resource.setrlimit(RLIMIT_AS)``, ``--limit`` bytes: the imports take about 650 MB of
it). Prints one line: the files, those read and refused, the failures (an error other
than a ValueError naming the file), the crashes (a worker that did not end with status 0)
and the most resident memory one read took above what its process held before
(``VmHWM``, reset before each read), against the budget. Issue 48's target: at least
1000 files, no failure or crash, the peak within the budget.

Usage: ``python benchmarks/rda_fuzz.py [--files 520] [--workers 2] [--seed 10]
[--budget 2e7] [--limit 1.5e9]``
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=520, help="files a worker reads (520)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (2)")
    parser.add_argument("--seed", type=int, default=10, help="the first worker's seed (10)")
    parser.add_argument("--budget", default="2e7", help="BERNMF_MEMORY_LIMIT (2e7)")
    parser.add_argument("--limit", type=float, default=1.5e9, help="RLIMIT_AS, bytes (1.5e9)")
    args = parser.parse_args(argv)
    limit = int(args.limit)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "OMP_NUM_THREADS": "1",
           "BERNMF_MEMORY_LIMIT": args.budget}  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        workers = []
        for seed in range(args.seed, args.seed + args.workers):
            (Path(folder) / str(seed)).mkdir()
            command = [sys.executable, "-m", "tests.rda_files", str(seed), str(args.files)]
            workers.append(subprocess.Popen(
                [*command, str(Path(folder) / str(seed))], cwd=ROOT, env=env, text=True,
                stdout=subprocess.PIPE,
                preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
            ))  # fmt: skip
        files = read = failures = crashes = peak = 0
        peak_file = ""
        for worker in workers:
            lines = worker.communicate()[0].splitlines()
            files += sum(line.startswith("file ") for line in lines)
            for line in lines:
                if line.startswith("{"):
                    failures += 1
                    print(line)
                elif line.startswith("read "):
                    read += int(line.split()[1])
                elif line.startswith("peak ") and int(line.split()[1]) > peak:
                    peak, peak_file = int(line.split()[1]), line.split()[2]
            if worker.returncode != 0:
                crashes += 1
                print(f"worker ended with {worker.returncode} at {lines[-1:]}")
    budget = float(args.budget)
    print(
        f"{files} files: {read} read, {files - read - failures} refused naming the file, "
        f"{failures} failures, {crashes} crashes; peak {peak / 1e6:.1f} MB ({peak_file}) "
        f"{'within' if peak <= budget else 'OVER'} the budget of {budget / 1e6:.1f} MB; "
        f"RLIMIT_AS {limit / 1e9:.1f} GB"
    )
    return int(bool(failures or crashes or peak > budget))


if __name__ == "__main__":
    sys.exit(main())
