"""Where a NUTS fit's time goes, and ESS per second under its main options, on one core.

On a simulated 100 x 60 matrix at K = 4 (the posterior has 640 parameters), 2 chains
(sequential: one CPU device), each variant is fitted four times in this process:
``W + S`` draws twice (the second call is the figure: it reuses the first one's
compiled sampler), then ``1 + 1`` draws twice: the second of those is the fixed part of
a call's ``timings["run"]``, and the rest of a call over its draws is the cost of one draw.
The table gives that split, the leapfrog steps per draw (tree
depth), ms per leapfrog step and the median bulk ESS of WH per second of the call.

Variants: the default (float64, diagonal mass matrix, max_tree_depth 10), float32,
max_tree_depth 6, target_accept_prob 0.9 and a dense mass matrix (last: the slowest).

Run: ``.venv/bin/python benchmarks/nuts_speed.py [--warmup 100] [--samples 100]``
"""

from __future__ import annotations

import single_core

single_core.pin()

import argparse  # noqa: E402
import warnings  # noqa: E402

import pandas as pd  # noqa: E402

import bernmf  # noqa: E402

VARIANTS = {
    "default (float64, diagonal mass)": {},
    "float32": {"dtype": "float32"},
    "max_tree_depth 6": {"max_tree_depth": 6},
    "target_accept_prob 0.9": {"target_accept_prob": 0.9},
    "dense mass matrix": {"dense_mass": True},
}


def measure(Y, warmup: int, samples: int, options: dict) -> dict:
    """One variant's row: call seconds, its split, steps, ESS per second."""

    def call(warmup, samples):
        return bernmf.fit(
            Y, "nuts", 4, num_chains=2, num_warmup=warmup, num_samples=samples, progress=False,
            **options,
        )  # fmt: skip

    call(warmup, samples)
    fit = call(warmup, samples)
    call(1, 1)
    fixed = call(1, 1).timings["run"]
    per_draw = (fit.timings["run"] - fixed) / (2 * (warmup + samples))
    steps = fit.sample_stats["n_steps"]
    ess = float(bernmf.diagnostics(fit, warn=False).table.loc["WH", "ess_bulk_median"])
    seconds = fit.timings["run"]
    return {
        "call s": seconds,
        "fixed s": fixed,
        "ms per draw": per_draw * 1e3,
        "steps per draw": float(steps.mean()),
        "ms per step": per_draw * 1e3 / float(steps.mean()),
        "divergences": int(fit.sample_stats["diverging"].sum()),
        "ESS(WH) median": ess,
        "ESS per s": ess / seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--samples", type=int, default=100)
    args = parser.parse_args()
    print(single_core.describe())
    warnings.filterwarnings("ignore", category=UserWarning)
    Y, _, _ = bernmf.simulate(0, 100, 60, 4)
    rows = {}
    for name, options in VARIANTS.items():
        rows[name] = measure(Y, args.warmup, args.samples, options)
        print(name, {k: round(v, 3) for k, v in rows[name].items()}, flush=True)
    table = pd.DataFrame(rows).T
    base = table.iloc[0]["ESS per s"]
    table["ESS per s / default"] = table["ESS per s"] / base
    print(table.to_string(float_format="{:.3g}".format))


if __name__ == "__main__":
    main()
