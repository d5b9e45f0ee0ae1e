"""CPU seconds of one call of each Bayesian engine on a dataset at one rank.

What the posterior-vs-MAP study's sizes rest on (``LARGE_SIZES`` in
:mod:`bernmf.studies.reproduce.posterior_vs_map`): per engine and setting, one ``bernmf.fit`` on
the paper split's training entries, twice; the second call's CPU and wall seconds (the
first compiles). NUTS is one chain at three tree depths, Gibbs one chain, SVI with the
AutoNormal guide and the low-rank guide at numpyro's default rank and at rank 16; the
Bayesian prior is Beta(0.1, 0.1) with gamma = 1, mm's Beta(1.2, 1.2) for reference.

Run: ``.venv/bin/python benchmarks/sampler_costs.py lastfm [--rank 16]
[--data-dir ../shared/data]``; threads as the machine gives them (print their count).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import bernmf
from bernmf.data import datasets
from bernmf.data.split import paper_split
from bernmf.inference import get_engine
from bernmf.models import Prior

LOW_RANK = "AutoLowRankMultivariateNormal"
CASES = (
    ("nuts depth 10, 1 x (20 + 20)", "nuts",
     {"num_chains": 1, "num_warmup": 20, "num_samples": 20, "max_tree_depth": 10}),
    ("nuts depth 6, 1 x (50 + 50)", "nuts",
     {"num_chains": 1, "num_warmup": 50, "num_samples": 50, "max_tree_depth": 6}),
    ("nuts depth 4, 1 x (50 + 50)", "nuts",
     {"num_chains": 1, "num_warmup": 50, "num_samples": 50, "max_tree_depth": 4}),
    ("gibbs 1 x (50 + 50)", "gibbs", {"num_chains": 1, "num_warmup": 50, "num_samples": 50}),
    ("svi AutoNormal, 250 steps", "svi", {"steps": 250}),
    ("svi low-rank, 100 steps", "svi", {"steps": 100, "guide": LOW_RANK}),
    ("svi low-rank 16, 100 steps", "svi", {"steps": 100, "guide": LOW_RANK, "guide_rank": 16}),
    ("vb, one run", "vb", {}),
    ("mm, one fit", "mm", {}),
)  # fmt: skip
"""(label, engine, options) of each timed call."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", choices=datasets.DATASETS)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--data-dir", default="../shared/data")
    args = parser.parse_args()
    Y = np.asarray(datasets.load(args.dataset, data_dir=args.data_dir), float)
    train = np.where(paper_split(Y.shape).train, Y, np.nan)
    print(f"{args.dataset} {Y.shape}, K = {args.rank}, {os.cpu_count()} CPUs", flush=True)
    for label, engine, options in CASES:
        prior = Prior(1.2, 1.2, 1.0) if engine == "mm" else Prior(0.1, 0.1, 1.0)
        if "progress" in get_engine(engine).options:
            options = {**options, "progress": False}
        for seed in range(2):  # the second call is timed: the first compiles
            cpu, wall = time.process_time(), time.perf_counter()
            bernmf.fit(train, rank=args.rank, engine=engine, prior=prior, seed=seed, **options)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        print(f"{label:30s} {cpu:7.1f} CPU s {wall:7.1f} wall s", flush=True)


if __name__ == "__main__":
    main()
