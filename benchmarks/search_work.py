"""The default search's work model against CPU seconds: what one sweep of mm or logsvd costs.

The default search (:func:`bernmf.fitting.search.search`) chooses its steps by *work*, not by
the clock: a fit's work is ``seconds * M * N * (sweeps * (K + offset) * layout + setup + gram
* min(M, N))`` (:data:`bernmf.fitting.search.WORK`), the same on any load. This measures
those constants: for each engine, shape and rank it fits the training entries (85% of a
simulated matrix) as the search does (:func:`bernmf.fitting.runner.fit_settings`,
``tol=0``) at two iteration counts, takes the CPU seconds per sweep from their difference
and the setup (what a fit does once: its start, layout and scoring) from the rest. A line
per case: CPU ms per sweep and the model's, setup CPU ms and the model's, and the ratio of
the longer fit's CPU seconds to its work; then each engine's median and range of that
ratio. CPU seconds include every thread of this process; on a loaded machine they vary by
about 20% from run to run (logsvd's, whose start is one large eigendecomposition, by more).

Run: ``python benchmarks/search_work.py [--ranks 2 8 32]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import bernmf
from bernmf.data.observed import as_observed
from bernmf.fitting.grids import engine_options
from bernmf.fitting.runner import fit_settings
from bernmf.fitting.search import HOLDOUT, WORK, _holdout, sweeps, work
from bernmf.inference import get_engine

SHAPES = ((300, 200, 0.3), (1000, 1000, 0.05), (2000, 2000, 0.002), (3000, 3000, 0.001))
"""(M, N, density of ones): small and dense, medium (the dense layout), large and sparse
(the sparse layout of the ones)."""

ITERATIONS = (5, 65)
"""The two iteration counts whose difference is timed."""


def measure(engine: str, M: int, N: int, density: float, rank: int) -> dict:
    """CPU seconds per sweep of ``engine`` at ``rank`` on a simulated M x N matrix."""
    rng = np.random.default_rng(0)
    Y = (rng.random((M, N)) < density).astype(float)
    data = as_observed(Y, None)
    held = _holdout(data, HOLDOUT, 0)
    train, held_out = as_observed(Y, data.mask & ~held), as_observed(Y, held)
    chosen = get_engine(engine)
    prior = [chosen.prior_for(None, rank)]
    cpu, swept, fits = [], [], []
    for iterations in ITERATIONS:
        options = engine_options(chosen, {"max_iter": iterations, "tol": 0.0})
        fit_settings(chosen, train, rank, prior, [1], options)  # compiled, untimed
        begin = time.process_time()
        fits.append(fit_settings(chosen, train, rank, prior, [0], options, held_out)[0].fit)
        cpu.append(time.process_time() - begin)
        swept.append(sweeps(fits[-1]))
    per_sweep = (cpu[1] - cpu[0]) / (swept[1] - swept[0])
    model = (work(fits[1]) - work(fits[0])) / (swept[1] - swept[0])  # its layout's
    return {"engine": engine, "M": M, "N": N, "rank": rank, "cpu_ms": 1e3 * per_sweep,
            "model_ms": 1e3 * model, "setup_ms": 1e3 * (cpu[0] - swept[0] * per_sweep),
            "model_setup_ms": 1e3 * (work(fits[0]) - swept[0] * model),
            "ratio": cpu[1] / work(fits[1])}  # fmt: skip


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 8, 32])
    parser.add_argument("--engines", nargs="+", default=list(WORK))
    args = parser.parse_args(argv)
    bernmf.fit  # noqa: B018 (engines registered)
    rows = []
    for engine in args.engines:
        for M, N, density in SHAPES:
            for rank in args.ranks:
                rows.append(measure(engine, M, N, density, rank))
                print({k: round(v, 3) if isinstance(v, float) else v for k, v in rows[-1].items()},
                      flush=True)  # fmt: skip
    for engine in args.engines:
        ratios = [r["ratio"] for r in rows if r["engine"] == engine]
        print(f"{engine}: CPU seconds / work of the longer fits: median {np.median(ratios):.2f}, "
              f"from {min(ratios):.2f} to {max(ratios):.2f} (WORK: {WORK[engine]})")  # fmt: skip


if __name__ == "__main__":
    main()
