"""The default against an expert on matrices the defaults were not chosen on.

Each matrix gets a 70/15/15 random split of its entries (seed 0); the test entries are
hidden from both sides:

- **default**: ``bernmf.fit(Y)`` with the test entries NaN (the search, 60 s of work);
- **expert**: what one reaches with the API: :func:`bernmf.tune.grid` of mm over ranks
  2, 4, 8, 16 x alpha, beta in {1.2, 2} x 4 seeds and of logsvd at the same ranks, on the
  training entries, then :func:`bernmf.stack` of every fit on the validation entries,
  refit on training + validation.

Prints, per matrix, both test perplexities, their ratio (default / expert) and the CPU
seconds of each. The matrices: animals, paleo and lastfm transposed (the paper's data,
from ``--data-dir``), data simulated from the model (300 x 120, K = 6), a logistic
rank-3 matrix (250 x 400) and a two-block network (200 x 200).

Run: ``.venv/bin/python benchmarks/unseen.py [--data-dir ../shared/data] [--only NAME ...]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import bernmf
from bernmf import tune
from bernmf.data import datasets
from bernmf.data.split import random_split

RANKS = (2, 4, 8, 16)
PRIOR_VALUES = (1.2, 2.0)
SEEDS = 4


def matrices(data_dir: str) -> dict[str, np.ndarray]:
    """The six matrices, by name, as float arrays of 0 and 1."""
    rng = np.random.default_rng(0)
    U, V = rng.normal(size=(250, 3)), rng.normal(size=(400, 3))
    logistic = rng.random((250, 400)) < 1 / (1 + np.exp(-(U @ V.T)))
    blocks = np.repeat([0, 1], 100)
    chance = np.where(blocks[:, None] == blocks[None, :], 0.3, 0.05)
    network = rng.random((200, 200)) < chance
    simulated = np.asarray(bernmf.simulate(0, 300, 120, 6)[0], float)
    found = {
        f"{name} transposed": datasets.load(name, data_dir).to_numpy(float).T
        for name in ("animals", "paleo", "lastfm")
    }
    found |= {
        "simulated from the model, K = 6,": simulated,
        "logistic rank 3,": logistic.astype(float),
        "two-block network,": network.astype(float),
    }
    return found


def expert(Y, split) -> bernmf.Fit:
    """The expert's stack: an mm grid and logsvd tuned on training entries, stacked, refit."""
    common = {"mask": split.train, "validation": split.validation, "progress": False}
    mm = tune.grid(Y, RANKS, PRIOR_VALUES, PRIOR_VALUES, restarts=SEEDS, **common)
    logsvd = tune.grid(Y, RANKS, engines=["logsvd"], **common)
    fits = [m.fit for m in (*mm.members, *logsvd.members)]
    return bernmf.stack(
        fits, Y, validation=split.validation, mask=split.train, refit=True,
        options={**mm.options, **logsvd.options},
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--only", nargs="*", default=None, help="names starting with these")
    args = parser.parse_args()
    print("| matrix | default | expert | default / expert | default CPU s | expert CPU s |")
    print("|---|---|---|---|---|---|")
    for name, Y in matrices(args.data_dir).items():
        if args.only and not any(name.startswith(o) for o in args.only):
            continue
        split = random_split(Y.shape, (0.7, 0.15, 0.15), seed=0)
        begin = time.process_time()
        default = bernmf.fit(np.where(split.test, np.nan, Y))
        default_cpu, begin = time.process_time() - begin, time.process_time()
        stacked = expert(Y, split)
        expert_cpu = time.process_time() - begin
        ours, theirs = default.perplexity(Y, split.test), stacked.perplexity(Y, split.test)
        print(
            f"| {name} {Y.shape[0]} x {Y.shape[1]} | {ours:.4f} | {theirs:.4f} | "
            f"{ours / theirs:.3f} | {default_cpu:.0f} | {expert_cpu:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
