"""Milliseconds per MM iteration: bernmf's compiled loop against plain numpy, on one core.

Both run in this process, pinned to one CPU core with one BLAS / XLA thread, on the
same simulated data; the table gives ms per iteration and the ratio numpy / bernmf.
The numpy version is the update of DESIGN.md written directly (H step, W step and the
objective that the stopping rule needs, each iteration); bernmf runs plain sweeps
(``accelerate=False``), so one iteration is one sweep on both sides
(``benchmarks/accelerate.py`` measures what acceleration saves).

Run: ``.venv/bin/python benchmarks/mm_speed.py [--iterations 200] [--out results/mm_speed]``
"""

from __future__ import annotations

import single_core

single_core.pin()

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import bernmf  # noqa: E402

CASES = [(1226, 285, 4), (1226, 285, 8), (1226, 285, 16), (3000, 3000, 16)]
PRIOR = bernmf.Prior(alpha=1.2, beta=1.5, gamma=1.0)


def numpy_iteration(Y1, Y0, n_obs, W, H, alpha, beta, gamma):
    """One MM iteration and its objective, in plain numpy (float64)."""
    K = W.shape[1]
    Yh, Yh0 = W @ H, W @ (1 - H)
    C = H * (W.T @ (Y1 / Yh)) + (alpha - 1)
    D = (1 - H) * (W.T @ (Y0 / Yh0)) + (beta - 1)
    H = C / (C + D)
    Yh, Yh0 = W @ H, W @ (1 - H)
    S = W * ((Y1 / Yh) @ H.T + (Y0 / Yh0) @ (1 - H).T)
    W = (S + gamma - 1) / (n_obs[:, None] + K * (gamma - 1))
    Yh, Yh0 = W @ H, W @ (1 - H)
    objective = -(
        np.sum(Y1 * np.log(Yh) + Y0 * np.log(Yh0))
        + np.sum((alpha - 1) * np.log(H) + (beta - 1) * np.log1p(-H))
        + np.sum((gamma - 1) * np.log(W))
    )
    return W, H, objective


def time_numpy(Y, mask, K, iterations):
    rng = np.random.default_rng(0)
    W = rng.random((Y.shape[0], K))
    W /= W.sum(axis=1, keepdims=True)
    H = rng.random((K, Y.shape[1]))
    Y1, Y0, n_obs = Y * mask, (1 - Y) * mask, mask.sum(axis=1).astype(float)
    start = time.perf_counter()
    for _ in range(iterations):
        W, H, _ = numpy_iteration(Y1, Y0, n_obs, W, H, *PRIOR)
    return (time.perf_counter() - start) / iterations


def time_bernmf(Y, mask, K, iterations):
    result = bernmf.fit(
        Y, "mm", K, mask=mask, prior=PRIOR, max_iter=iterations, tol=0, seed=1, accelerate=False
    )
    assert result.n_iter == iterations
    return result.timings["run"] / iterations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5, help="best of this many timings")
    parser.add_argument("--out", type=Path, default=Path("results/mm_speed"))
    args = parser.parse_args()
    print(single_core.describe())
    rows = []
    for M, N, K in CASES:
        Y, _, _ = bernmf.simulate(0, M, N, K, bernmf.Prior(0.3, 3.0, 0.5))
        mask = np.random.default_rng(0).random(Y.shape) < 0.85
        iterations = max(5, args.iterations * 350_000 // (M * N))
        time_bernmf(Y, mask, K, iterations)  # compile once
        ours, theirs = np.inf, np.inf
        for _ in range(args.repeats):  # interleaved, so both see the same machine load
            ours = min(ours, time_bernmf(Y, mask, K, iterations))
            theirs = min(theirs, time_numpy(Y, mask, K, iterations))
        rows.append(
            {
                "M": M,
                "N": N,
                "K": K,
                "iterations timed": iterations,
                "bernmf ms/iter": 1e3 * ours,
                "numpy ms/iter": 1e3 * theirs,
                "speed-up (numpy / bernmf)": theirs / ours,
            }
        )
        print(pd.DataFrame(rows[-1:]).to_string(index=False, float_format="%.2f"), flush=True)
    table = pd.DataFrame(rows)
    print("\n" + table.to_string(index=False, float_format="%.2f"))
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "mm_speed.csv", index=False)
    labels = [f"{r.M}x{r.N}\nK={r.K}" for r in table.itertuples()]
    figure, axis = plt.subplots(figsize=(6, 3.5))
    x = np.arange(len(table))
    axis.bar(x - 0.2, table["numpy ms/iter"], 0.4, label="numpy")
    axis.bar(x + 0.2, table["bernmf ms/iter"], 0.4, label="bernmf (jax)")
    axis.set(xticks=x, xticklabels=labels, ylabel="ms per MM iteration (1 core)", yscale="log")
    axis.legend()
    figure.tight_layout()
    figure.savefig(args.out / "mm_speed.png", dpi=120)
    print(f"wrote {args.out / 'mm_speed.csv'} and {args.out / 'mm_speed.png'}")


if __name__ == "__main__":
    main()
