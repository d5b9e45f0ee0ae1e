"""Which Dirichlet gamma should the default search's ``mm`` priors carry?

``bernmf.fitting.search.MM_PRIORS`` holds the Beta priors of H that the stacking study
weighted most, a grid made at gamma = 1; they were written as ``Prior(alpha, beta)`` minutes
before ``Prior``'s default gamma became 1.2, so they have carried gamma = 1.2 since. This
runs the default search (:func:`bernmf.fit` without a rank) on the paper's split of each
dataset, its test entries hidden, once with the priors at gamma = 1 and once at 1.2, and
scores each stack on the test entries. The search spends a budget of work (the same steps
on any load since issue 47); the steps each run fitted are counted beside its score.

Outputs ``--out/search_gamma.csv`` (dataset, gamma, test perplexity, fits, seconds).

Run: ``.venv/bin/python experiments/search_gamma.py --data-dir ../shared/data``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bernmf.data import datasets
from bernmf.data.split import paper_split
from bernmf.fitting import search
from bernmf.models import Prior

GAMMAS = (1.0, 1.2)
"""The Dirichlet parameters of W compared (the studies' grid, ``Prior``'s default)."""


def run(name: str, data_dir, gamma: float, budget: float) -> dict:
    """The default search on ``name`` with mm's priors at ``gamma``, scored on test."""
    Y = datasets.load(name, data_dir=data_dir).to_numpy(dtype=float)
    split = paper_split(Y.shape)
    hidden = np.where(split.test, np.nan, Y)
    original = search.MM_PRIORS
    search.MM_PRIORS = tuple(Prior(p.alpha, p.beta, gamma) for p in original)
    try:
        begin = time.process_time()
        fit = search.search(hidden, budget=budget, seed=0, progress=False)
        cpu = time.process_time() - begin
    finally:
        search.MM_PRIORS = original
    record = fit.record.search
    return {
        "dataset": name,
        "gamma": gamma,
        "test_perplexity": fit.perplexity(Y, split.test),
        "held_out_stack": search.held_out_scores(fit)["stack"],
        "fits": sum(step["fits"] for step in record["fitted"]),
        "cpu_seconds": cpu,
        "seconds": record["seconds"],
    }


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--datasets", nargs="+", default=list(datasets.DATASETS))
    parser.add_argument("--budget", type=float, default=search.BUDGET)
    parser.add_argument("--out", default="results/search_gamma")
    args = parser.parse_args(argv)
    rows = []
    for name in args.datasets:
        for gamma in GAMMAS:
            rows.append(run(name, args.data_dir, gamma, args.budget))
            print({k: round(v, 4) if isinstance(v, float) else v for k, v in rows[-1].items()})
    table = pd.DataFrame(rows)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    table.to_csv(Path(args.out) / "search_gamma.csv", index=False)
    return table


if __name__ == "__main__":
    main()
