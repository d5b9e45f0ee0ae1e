"""Seconds of svi's first call in a fresh process, its set-up and finish compiled
unoptimized (``run_once``) or optimized as before, on a cold and on a warm cache.

A simulated 100 x 60 matrix, K = 4, 500 steps (issue 26: at most 5 s in all). Each point
is a fresh process (``fresh_process.run_point``), pinned like this one (one core, one
BLAS / XLA thread): ``before`` sets ``_compile.UNOPTIMIZED`` to None (every program
optimized, as before the change), ``after`` leaves it. Cold: the compilation cache off;
warm: a temporary cache filled by one process of the same mode, then the measured one.
Printed per point: the process's CPU seconds from its start (import included), the fit's
``timings`` and its final loss; then after / before ratios. ``--turns`` alternates the
modes that many times (CPU seconds, median), as on a loaded machine wall time is noise.

Run: ``.venv/bin/python benchmarks/svi_first_call.py [--turns 2]``
"""

from __future__ import annotations

import single_core

single_core.pin()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import fresh_process  # noqa: E402
import numpy as np  # noqa: E402


def point(mode: str) -> dict:
    """The measurement inside the fresh process."""
    import warnings

    import bernmf
    from bernmf.inference import _compile

    if mode == "before":
        _compile.UNOPTIMIZED = None
    warnings.filterwarnings("ignore", category=UserWarning)
    Y, _, _ = bernmf.simulate(0, 100, 60, 4)
    fit = bernmf.fit(Y, "svi", 4, steps=500, progress=False)
    return {
        "cpu_s": time.process_time(),
        "compile_s": fit.timings["compile"],
        "run_s": fit.timings["run"],
        "loss": fit.extras["final_loss"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--point", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.point:
        print(json.dumps(point(json.loads(args.point))))
        return
    print(single_core.describe())
    print(f"load average {os.getloadavg()}")
    results = {}
    for _ in range(args.turns):
        for mode in ("before", "after"):
            cold = fresh_process.run_point(__file__, mode, BERNMF_COMPILE_CACHE="off")
            with tempfile.TemporaryDirectory() as cache:
                fresh_process.run_point(__file__, mode, BERNMF_COMPILE_CACHE=cache)
                warm = fresh_process.run_point(__file__, mode, BERNMF_COMPILE_CACHE=cache)
            for cache_state, measured in (("cold", cold), ("warm", warm)):
                results.setdefault((mode, cache_state), []).append(measured)
                print(mode, cache_state, {k: round(v, 4) for k, v in measured.items()}, flush=True)
    for cache_state in ("cold", "warm"):
        before, after = (
            np.median([r["cpu_s"] for r in results[(mode, cache_state)]])
            for mode in ("before", "after")
        )
        print(f"{cache_state} cache: process CPU s before {before:.2f}, after {after:.2f}, "
              f"after / before {after / before:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
