"""Milliseconds per logistic SVD iteration: bernmf's ``logsvd`` against plain numpy and R, one core.

Everything runs in this process, pinned to one CPU core with one BLAS / XLA thread, on
the real paleo (253 x 902) and lastfm (1226 x 285) matrices with the paper's training
mask (:func:`bernmf.data.split.paper_split`), K = 4. One iteration is the whole step of R's
``logisticSVD``: working matrix, main effects, rank-K SVD of the centred working
matrix, new natural parameters and the loss that the stopping rule needs.

bernmf runs a whole fit with R's settings (``tol=1e-5``, ``max_iter=2000``) from R's
start; its time per iteration is the compiled run's time divided by its iterations
(the one-off initial decomposition included), as R's per-iteration figures are. The
exact mode's cost depends on the data (it refines the previous loadings until they
are the exact leading singular vectors), hence the real data. ``subspace`` is the
cheaper, inexact block Krylov step; its own number of iterations is reported.

The numpy column is the same exact step written directly with a full thin LAPACK SVD
(as R with ``partial_decomp=FALSE``), whose cost does not depend on the iterate: the
mean over its first ``NUMPY_ITERATIONS`` iterations. R's times are the issue's (21 ms
paleo, 29 ms lastfm, on the issue's machine), not measured here.

The datasets come from ``bernmf.data.datasets.load`` (``--data-dir``, default
``BERNMF_DATA_DIR`` or else ``../shared/data`` next to the repository when it exists).

Run: ``.venv/bin/python benchmarks/logistic_speed.py [--out results/logistic_speed.csv]``
"""

from __future__ import annotations

import single_core

single_core.pin()

import argparse  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import bernmf  # noqa: E402
import bernmf.data.datasets  # noqa: E402
from bernmf.data.observed import as_observed  # noqa: E402
from bernmf.data.split import paper_split  # noqa: E402
from bernmf.inference import logsvd  # noqa: E402
from bernmf.inference._logistic import LogisticData  # noqa: E402

CASES = ("paleo", "lastfm")
R_MS = {"paleo": 21.0, "lastfm": 29.0}  # the measurements of R logisticSVD
RANK = 4
NUMPY_ITERATIONS = 10
REPEATS = 3
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def numpy_svd(centred, rank):
    u, d, vt = np.linalg.svd(centred, full_matrices=False)
    return u[:, :rank] * d[:rank], vt[:rank].T


def numpy_step(q, mask, n_obs, theta):
    """One exact logistic SVD iteration and its loss in plain numpy (float64)."""
    Z = theta + 4 * q * (1 - 1 / (1 + np.exp(-q * theta)))
    mu = Z.mean(axis=0)
    A, B = numpy_svd(Z - mu, RANK)
    theta = mu + A @ B.T
    loss = np.sum(np.where(mask, np.logaddexp(0, -q * theta), 0)) / n_obs
    return theta, loss


def time_numpy(q, mask):
    """Seconds per exact numpy iteration, from R's start."""
    four_q = 4 * q
    mu = four_q.mean(axis=0)
    A, B = numpy_svd(four_q - mu, RANK)
    theta = mu + A @ B.T
    n_obs = mask.sum()
    start = time.perf_counter()
    for _ in range(NUMPY_ITERATIONS):
        theta, _ = numpy_step(q, mask, n_obs, theta)
    return (time.perf_counter() - start) / NUMPY_ITERATIONS


def compile_bernmf(data, svd):
    with jax.enable_x64(True):
        layout = LogisticData.of(data)
        tol = jnp.asarray(1e-5)
        program = (
            jax.jit(lambda d, t: logsvd.solve(d, t, rank=RANK, max_iter=2000, svd=svd))
            .lower(layout, tol)
            .compile()
        )
    return program, layout, tol


def time_bernmf(program, layout, tol):
    """(seconds per iteration, iterations, final loss) of one whole compiled fit."""
    with jax.enable_x64(True):
        begin = time.perf_counter()
        solution = jax.block_until_ready(program(layout, tol))
        seconds = time.perf_counter() - begin
    n_iter = int(solution.n_iter)
    return seconds / n_iter, n_iter, float(solution.trace[n_iter])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/logistic_speed.csv")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    data_dir = args.data_dir or os.environ.get("BERNMF_DATA_DIR")
    if data_dir is None and SHARED_DATA.is_dir():
        data_dir = SHARED_DATA
    rows = []
    for name in CASES:
        Y = bernmf.data.datasets.load(name, data_dir)
        data = as_observed(Y, paper_split(Y.shape).train)
        M, N = data.shape
        q = np.where(data.mask, 2 * data.Y - 1, 0.0)
        programs = {svd: compile_bernmf(data, svd) for svd in logsvd.SVD_MODES}
        numpy_s, bernmf_s = [], {svd: [] for svd in programs}
        for _ in range(REPEATS):  # interleaved, best of each: the machine is shared
            numpy_s.append(time_numpy(q, data.mask))
            for svd, compiled_program in programs.items():
                per_iteration, n_iter, loss = time_bernmf(*compiled_program)
                bernmf_s[svd].append(per_iteration)
                result = {"n_iter": n_iter, "loss": loss}
                bernmf_s[svd + "_result"] = result
        for svd in programs:
            seconds = min(bernmf_s[svd])
            rows.append(
                {
                    "data": f"{name} ({M}x{N})",
                    "K": RANK,
                    "svd": svd,
                    "n_iter": bernmf_s[svd + "_result"]["n_iter"],
                    "final_loss": bernmf_s[svd + "_result"]["loss"],
                    "bernmf_ms": 1e3 * seconds,
                    "numpy_exact_ms": 1e3 * min(numpy_s),
                    "numpy/bernmf": min(numpy_s) / seconds,
                    "R_ms (issue)": R_MS[name],
                    "R/bernmf": R_MS[name] / (1e3 * seconds),
                }
            )
            print(pd.DataFrame(rows[-1:]).to_string(index=False, float_format="%.4g"), flush=True)
    table = pd.DataFrame(rows)
    print()
    print(single_core.describe())
    print("ms per iteration (loss included), whole fits")
    print(table.to_string(index=False, float_format="%.4g"))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out, index=False)
    print(f"written to {out}")


if __name__ == "__main__":
    main()
