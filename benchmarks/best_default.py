"""The best model by default on a paper dataset: ``bernmf.fit(Y)`` with the test entries hidden.

Loads DATASET (animals, paleo or lastfm) from ``--data-dir`` (default ``../shared/data``),
hides the paper split's test entries (NaN), runs ``bernmf.fit(Y)`` without a rank (the
search, within ``--budget`` seconds of work) and prints its test perplexity, wall and CPU seconds.

Run: ``.venv/bin/python benchmarks/best_default.py paleo [--budget 60]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import bernmf
from bernmf.data import datasets
from bernmf.data.split import paper_split


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", choices=["animals", "paleo", "lastfm"])
    parser.add_argument("--budget", type=float, default=60.0)
    parser.add_argument("--data-dir", default="../shared/data")
    args = parser.parse_args()
    Y = datasets.load(args.dataset, args.data_dir).to_numpy(float)
    split = paper_split(Y.shape)
    hidden = np.where(split.test, np.nan, Y)
    cpu, wall = time.process_time(), time.perf_counter()
    result = bernmf.fit(hidden, budget=args.budget)
    print(
        f"{args.dataset}: test perplexity {result.perplexity(Y, split.test):.4f}, "
        f"{time.perf_counter() - wall:.1f} s wall, {time.process_time() - cpu:.1f} CPU s"
    )


if __name__ == "__main__":
    main()
