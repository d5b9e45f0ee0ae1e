"""A repeated NUTS fit: the reused compiled sampler against NumPyro's MCMC, on one core.

On a simulated 100 x 60 matrix at K = 4 (640 parameters), 2 chains x (W + S) draws,
sequential, default options: engine nuts (``nuts.sample_chain``, compiled once per shape
and options) against what it ran before (NumPyro's ``MCMC`` on a jitted potential holding
the data, which traces and lowers its sampler on every fit: ``numpyro_mcmc_fields`` in
``tests/test_nuts.py``), from the same MM starts with the same keys. The draws agree to
rounding at first, but rounding differs between the two programs and NUTS trajectories
amplify it, so over hundreds of draws the chains part: both are valid chains, and the ESS
of each is computed. Each side is warmed by one call, then timed ``--repeats`` times,
alternating, on data of the same shapes (other seeds): the sampler's seconds (new:
``timings`` compile + run; old: ``MCMC.run``) and the median bulk ESS of WH per second of
them. Ratios are old / new (seconds) and new / old (ESS per second).

Run: ``.venv/bin/python benchmarks/nuts_reuse.py [--warmup 100] [--samples 100]``
"""

from __future__ import annotations

import single_core

single_core.pin()

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import bernmf  # noqa: E402
from bernmf.data.observed import as_observed  # noqa: E402
from bernmf.inference import nuts  # noqa: E402
from bernmf.models import unconstrained  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_nuts import numpyro_mcmc_fields  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(single_core.describe())
    print(f"load average {os.getloadavg()}")
    warnings.filterwarnings("ignore", category=UserWarning)
    options = {"num_warmup": args.warmup, "num_samples": args.samples}

    def new(seed):
        Y, _, _ = bernmf.simulate(seed, 100, 60, 4)
        fit = bernmf.fit(Y, "nuts", 4, seed=seed, chain_method="sequential", progress=False,
                         **options)  # fmt: skip
        return fit, fit.timings["compile"] + fit.timings["run"]

    def old(seed):
        Y, _, _ = bernmf.simulate(seed, 100, 60, 4)
        data, prior = as_observed(Y), bernmf.Prior().broadcast(4)
        W0, H0 = nuts.initial_factors(data, 4, prior, seed, None, "mm", num_chains=2)
        begin = time.perf_counter()
        fields = numpyro_mcmc_fields(
            data, prior, W0, H0, seed, thinning=1, chain_method="sequential", **options
        )
        seconds = time.perf_counter() - begin
        z = {name: np.asarray(value) for name, value in fields["z"].items()}
        return {"W": unconstrained.to_simplex(z["W"]), "H": unconstrained.to_unit(z["H"])}, seconds

    def ess(fit) -> float:
        return float(bernmf.diagnostics(fit, warn=False).table.loc["WH", "ess_bulk_median"])

    fit, _ = new(0)
    draws, _ = old(0)
    print(f"largest |W draw new - old|, first draw: "
          f"{np.max(np.abs(fit.draws['W'][:, 0] - draws['W'][:, 0])):.1e}, "
          f"all: {np.max(np.abs(fit.draws['W'] - draws['W'])):.1e}")  # fmt: skip
    rows = []
    for seed in range(1, args.repeats + 1):
        fit, new_seconds = new(seed)
        draws, old_seconds = old(seed)
        former = dataclasses.replace(fit, posterior=dataclasses.replace(fit.posterior, draws=draws))
        new_ess, old_ess = ess(fit), ess(former)
        rows.append((new_seconds, old_seconds, new_ess / new_seconds, old_ess / old_seconds))
        print(f"seed {seed}: seconds new {new_seconds:.2f}, old {old_seconds:.2f}; "
              f"median bulk ESS(WH) new {new_ess:.0f}, old {old_ess:.0f}", flush=True)  # fmt: skip
    new_s, old_s, new_rate, old_rate = np.median(rows, axis=0)
    print(f"median of {args.repeats}: sampler seconds new {new_s:.2f}, old {old_s:.2f}, "
          f"old / new {old_s / new_s:.2f}; ESS(WH) per s new {new_rate:.1f}, "
          f"old {old_rate:.1f}, new / old {new_rate / old_rate:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
