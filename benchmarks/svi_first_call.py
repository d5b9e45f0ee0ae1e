"""Seconds of svi's first call in a fresh process, this checkout against a baseline commit
(by default bc28562, svi through NumPyro's SVI), on a cold and on a warm cache.

A simulated 100 x 60 matrix, K = 4, 500 steps (issue 26: at most 5 s in all). Each point
is a fresh process (``fresh_process.run_point``), pinned like this one (one core, one
BLAS / XLA thread), importing bernmf from this checkout (``after``) or from the baseline
commit unpacked in a temporary folder (``before``, ``git archive``). Cold: the
compilation cache off; warm: a temporary cache filled by one process of the same mode,
then the measured one. Printed per point: the process's CPU seconds from its start to
the end of the first fit (import included), the fit's ``timings``, its final loss, and
the steady state: CPU milliseconds per step of a second 2000-step fit (the whole fit over
2000; 10 draws), after a first one compiled its programs. Then after / before
ratios. ``--turns`` alternates the modes that many times (CPU seconds, median), as on a
loaded machine wall time is noise.

Run: ``.venv/bin/python benchmarks/svi_first_call.py [--turns 2] [--baseline bc28562]``
"""

from __future__ import annotations

import single_core

single_core.pin()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import fresh_process  # noqa: E402
import numpy as np  # noqa: E402

STEADY_STEPS = 2000


def point(_: str) -> dict:
    """The measurement inside the fresh process (bernmf from its PYTHONPATH)."""
    import warnings

    import bernmf

    warnings.filterwarnings("ignore", category=UserWarning)
    Y, _, _ = bernmf.simulate(0, 100, 60, 4)
    fit = bernmf.fit(Y, "svi", 4, steps=500, seed=0, progress=False)
    cpu = time.process_time()
    steady = {"steps": STEADY_STEPS, "num_draws": 10, "progress": False}
    bernmf.fit(Y, "svi", 4, seed=1, **steady)
    begin = time.process_time()
    bernmf.fit(Y, "svi", 4, seed=2, **steady)
    steady_cpu = time.process_time() - begin
    return {
        "cpu_s": cpu,
        "compile_s": fit.timings["compile"],
        "run_s": fit.timings["run"],
        "loss": fit.extras["final_loss"],
        "ms_per_step": 1e3 * steady_cpu / STEADY_STEPS,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--baseline", default="bc28562", help="commit to compare against")
    parser.add_argument("--point", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.point:
        print(json.dumps(point(json.loads(args.point))))
        return
    print(single_core.describe())
    print(f"load average {os.getloadavg()}; baseline {args.baseline}")
    results = {}
    with tempfile.TemporaryDirectory() as baseline:
        archive = subprocess.run(
            ["git", "-C", str(fresh_process.ROOT), "archive", args.baseline],
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", baseline], input=archive, check=True)
        trees = {"before": baseline, "after": str(fresh_process.ROOT)}
        for _ in range(args.turns):
            for mode, tree in trees.items():

                def measure(cache: str, tree=tree) -> dict:
                    return fresh_process.run_point(
                        __file__, "", PYTHONPATH=tree, BERNMF_COMPILE_CACHE=cache
                    )

                cold = measure("off")
                with tempfile.TemporaryDirectory() as cache:
                    measure(cache)
                    warm = measure(cache)
                for cache_state, measured in (("cold", cold), ("warm", warm)):
                    results.setdefault((mode, cache_state), []).append(measured)
                    shown = {k: round(v, 4) for k, v in measured.items()}
                    print(mode, cache_state, shown, flush=True)
    for cache_state in ("cold", "warm"):
        before, after = (
            np.median([r["cpu_s"] for r in results[(mode, cache_state)]])
            for mode in ("before", "after")
        )
        print(f"{cache_state} cache: process CPU s before {before:.2f}, after {after:.2f}, "
              f"after / before {after / before:.3f}")  # fmt: skip
    before, after = (
        np.median([r["ms_per_step"] for key, rs in results.items() if key[0] == mode for r in rs])
        for mode in ("before", "after")
    )
    print(f"steady state: ms per step before {before:.3f}, after {after:.3f}, "
          f"after / before {after / before:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
