"""A repeated NUTS fit: the reused compiled sampler against NumPyro's MCMC, on one core.

On a simulated 100 x 60 matrix at K = 4 (640 parameters), 2 chains x (W + S) draws,
sequential, default options: engine nuts (``nuts.sample_chain``, compiled once per shape
and options) against what it ran before (NumPyro's ``MCMC`` on a jitted potential holding
the data, which traces and lowers its sampler on every fit: ``numpyro_mcmc_fields`` in
``tests/test_nuts.py``), from the same MM starts with the same keys, so the draws are the
same (the largest difference is printed) and so is the ESS. Each side is warmed by one
call, then timed ``--repeats`` times, alternating, on data of the same shapes (other
seeds): the sampler's seconds (new: ``timings`` compile + run; old: ``MCMC.run``) and the
median bulk ESS of WH per second of them. Ratios are old / new.

Run: ``.venv/bin/python benchmarks/nuts_reuse.py [--warmup 100] [--samples 100]``
"""

from __future__ import annotations

import single_core

single_core.pin()

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

import bernmf  # noqa: E402
from bernmf.data import as_observed  # noqa: E402
from bernmf.inference import nuts  # noqa: E402
from bernmf.models import numpyro_model  # noqa: E402

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
        with jax.enable_x64(True):
            return np.asarray(numpyro_model.to_constrained(fields["z"])[0]), seconds

    fit, _ = new(0)
    W_old, _ = old(0)
    print(f"largest |W draw new - old|: {np.max(np.abs(fit.draws['W'] - W_old)):.1e}")
    times = {"new": [], "old": []}
    ess = []
    for seed in range(1, args.repeats + 1):
        fit, seconds = new(seed)
        times["new"].append(seconds)
        ess.append(float(bernmf.diagnostics(fit, warn=False).table.loc["WH", "ess_bulk_median"]))
        times["old"].append(old(seed)[1])
        print(f"seed {seed}: new {times['new'][-1]:.2f} s, old {times['old'][-1]:.2f} s",
              flush=True)  # fmt: skip
    new_s, old_s, ess_median = np.median(times["new"]), np.median(times["old"]), np.median(ess)
    print(f"sampler seconds (median of {args.repeats}): new {new_s:.2f}, old {old_s:.2f}, "
          f"old / new {old_s / new_s:.2f}")  # fmt: skip
    print(f"median bulk ESS(WH) {ess_median:.0f}: ESS per s new {ess_median / new_s:.1f}, "
          f"old {ess_median / old_s:.1f}, new / old {old_s / new_s:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
