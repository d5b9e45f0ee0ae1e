"""Milliseconds per logistic SVD iteration: bernmf's ``logsvd`` against plain numpy, on one core.

Both run in this process, pinned to one CPU core with one BLAS / XLA thread, on the same
simulated binary matrices of the sizes of paleo (253 x 902) and lastfm (1226 x 285), K = 4,
70% of the entries observed. One iteration is the whole step of R's ``logisticSVD``:
working matrix, main effects, rank-K SVD of the centred working matrix, new natural
parameters and the loss that the stopping rule needs. The numpy version is that step
written directly; ``exact`` uses a full thin SVD (as R with ``partial_decomp=FALSE``),
``subspace`` the warm-started block Krylov step of :mod:`bernmf.inference.logsvd`.

bernmf's time per iteration is the difference between compiled runs of ``n_long`` and
``n_short`` iterations (the loop with its stopping test, tol = -inf so it never stops),
divided by ``n_long - n_short``; this removes the initial SVD and the call overhead.
R's times are the issue's (21 ms paleo, 29 ms lastfm on the issue's machine), not
measured here.

Run: ``.venv/bin/python benchmarks/logistic_speed.py [--out results/logistic_speed.csv]``
"""

from __future__ import annotations

import os

os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[variable] = "1"
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "")
    + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
)

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import bernmf  # noqa: E402
from bernmf.data import as_observed  # noqa: E402
from bernmf.inference import logsvd  # noqa: E402
from bernmf.inference._logistic import make_problem  # noqa: E402

CASES = {"paleo": (253, 902), "lastfm": (1226, 285)}
R_MS = {"paleo": 21.0, "lastfm": 29.0}  # the measurements of R logisticSVD
RANK = 4
ITERATIONS = {"exact": (3, 13), "subspace": (20, 220)}  # (n_short, n_long)


def numpy_svd(centred, rank):
    u, d, vt = np.linalg.svd(centred, full_matrices=False)
    return u[:, :rank] * d[:rank], vt[:rank].T


def numpy_subspace(centred, B):
    rank = B.shape[1]
    basis, _ = np.linalg.qr(np.concatenate([B, centred.T @ (centred @ B)], axis=1))
    u, d, wt = np.linalg.svd(centred @ basis, full_matrices=False)
    return u[:, :rank] * d[:rank], basis @ wt[:rank].T


def numpy_step(q, mask, n_obs, theta, B, svd):
    """One logistic SVD iteration and its loss in plain numpy (float64)."""
    Z = theta + 4 * q * (1 - 1 / (1 + np.exp(-q * theta)))
    mu = Z.mean(axis=0)
    centred = Z - mu
    A, B = numpy_svd(centred, B.shape[1]) if svd == "exact" else numpy_subspace(centred, B)
    theta = mu + A @ B.T
    loss = np.sum(np.where(mask, np.logaddexp(0, -q * theta), 0)) / n_obs
    return theta, B, loss


def numpy_start(q, rank):
    four_q = 4 * q
    mu = four_q.mean(axis=0)
    A, B = numpy_svd(four_q - mu, rank)
    return mu + A @ B.T, B


def time_numpy(q, mask, svd, iterations):
    theta, B = numpy_start(q, RANK)
    n_obs = mask.sum()
    start = time.perf_counter()
    for _ in range(iterations):
        theta, B, _ = numpy_step(q, mask, n_obs, theta, B, svd)
    return (time.perf_counter() - start) / iterations


def time_bernmf(data, svd, n_short, n_long, repeats=3):
    """Seconds per iteration of the compiled loop (best of ``repeats`` differences)."""
    with jax.enable_x64(True):
        problem = make_problem(data)
        tol = jnp.asarray(-np.inf)
        programs = {
            n: jax.jit(lambda p, t, n=n: logsvd.solve(p, t, rank=RANK, max_iter=n, svd=svd))
            .lower(problem, tol)
            .compile()
            for n in (n_short, n_long)
        }
        seconds = {n: [] for n in programs}
        for _ in range(repeats):
            for n, program in programs.items():
                begin = time.perf_counter()
                solution = jax.block_until_ready(program(problem, tol))
                seconds[n].append(time.perf_counter() - begin)
                assert int(solution.n_iter) in (n, n - 1)
    return (min(seconds[n_long]) - min(seconds[n_short])) / (n_long - n_short)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/logistic_speed.csv")
    args = parser.parse_args()
    rows = []
    for name, (M, N) in CASES.items():
        Y, _, _ = bernmf.simulate(0, M, N, RANK)
        mask = np.random.default_rng(1).random((M, N)) < 0.7
        data = as_observed(Y, mask)
        q = np.where(data.mask, 2 * data.Y - 1, 0.0)
        for svd, (n_short, n_long) in ITERATIONS.items():
            numpy_s = time_numpy(q, data.mask, svd, n_long - n_short)
            bernmf_s = time_bernmf(data, svd, n_short, n_long)
            rows.append(
                {
                    "data": f"{name} ({M}x{N})",
                    "K": RANK,
                    "svd": svd,
                    "numpy_ms": 1e3 * numpy_s,
                    "bernmf_ms": 1e3 * bernmf_s,
                    "numpy/bernmf": numpy_s / bernmf_s,
                    "R_ms (issue)": R_MS[name],
                    "R/bernmf": R_MS[name] / (1e3 * bernmf_s),
                }
            )
            print(pd.DataFrame(rows[-1:]).to_string(index=False, float_format="%.2f"), flush=True)
    table = pd.DataFrame(rows)
    print()
    print("one core, one BLAS/XLA thread; ms per iteration (loss included)")
    print(table.to_string(index=False, float_format="%.2f"))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out, index=False)
    print(f"written to {out}")


if __name__ == "__main__":
    main()
