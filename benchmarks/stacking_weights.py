"""Speed of :func:`bernmf.posterior.stacking_weights.stacking_weights` over many
near-duplicate members.

A grid study stacks about 1000 members on tens of thousands of validation entries
(lastfm: 52k entries; R = 10 seeds x 100 settings): members of one setting nearly
coincide, which is what makes a solver over all members slow. This builds such an lpd
matrix (``--settings`` settings x ``--seeds`` seeds, each a noisy copy of a truth's
logits, ``--entries`` entries) and times, in one process, the solver on all members at
once (:func:`bernmf.posterior.stacking_weights._solve`, the path before the working set) and
:func:`stacking_weights`, printing both objectives and the ratio of seconds.

Run: ``OMP_NUM_THREADS=1 taskset -c 1 .venv/bin/python benchmarks/stacking_weights.py``.
"""

from __future__ import annotations

import argparse
import os
import time

for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(name, "1")

import numpy as np  # noqa: E402

from bernmf.posterior.stacking_weights import _solve, _weight_matrix, stacking_weights  # noqa: E402


def members(settings: int, seeds: int, entries: int, seed: int = 0) -> np.ndarray:
    """lpd of shape (entries, settings * seeds): near-duplicates within a setting."""
    rng = np.random.default_rng(seed)
    logit = rng.normal(0, 2, entries)
    y = rng.random(entries) < 1 / (1 + np.exp(-logit))
    lpd = np.empty((entries, settings * seeds))
    for s in range(settings):
        setting = logit + rng.normal(0, 1.0, entries) * rng.uniform(0.3, 1.5)
        for r in range(seeds):
            theta = setting + rng.normal(0, 0.3, entries)
            lpd[:, s * seeds + r] = -np.logaddexp(0, np.where(y, -theta, theta))
    return lpd


def objective(lpd: np.ndarray, weights: np.ndarray) -> float:
    """Mean log score of the mixture, nats per entry."""
    top = lpd.max(axis=1)
    return float(np.mean(np.log(np.exp(lpd - top[:, None]) @ weights) + top))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--entries", type=int, default=20_000)
    args = parser.parse_args()
    lpd = members(args.settings, args.seeds, args.entries)
    print(f"lpd {lpd.shape}, load average {os.getloadavg()[0]:.2f}")
    begin = time.perf_counter()
    fast = stacking_weights(lpd)
    fast_seconds = time.perf_counter() - begin
    begin = time.perf_counter()
    P, _ = _weight_matrix(lpd)
    v = _solve(np.ascontiguousarray(P.T), np.full(P.shape[1], 1.0 / P.shape[1]), 1e-10, 1000)
    slow = v / v.sum()
    slow_seconds = time.perf_counter() - begin
    print(f"all members:  {slow_seconds:7.2f} s, objective {objective(lpd, slow):.9f}")
    print(f"working set:  {fast_seconds:7.2f} s, objective {objective(lpd, fast):.9f}")
    print(f"speed-up {slow_seconds / fast_seconds:.1f}x; members with weight: "
          f"{(fast > 0).sum()} and {(slow > 0).sum()}")  # fmt: skip


if __name__ == "__main__":
    main()
