"""``logpca``'s eigensolver: R's full eigendecomposition per step against the warm-started one.

Each step of projection logistic PCA needs the K leading eigenvectors of an N x N
symmetric matrix T. R (and bernmf before issue 36) decomposes T fully at every step; bernmf
now refines the previous step's vectors by block Krylov restarts with products ``T V``
(:func:`bernmf.inference.logpca._leading_eigenvectors`), falling back on the full
decomposition where the gap at K is too small. Both are ``logpca.solve`` (``exact=True``
the old path), compiled once each, then whole fits from R's start with the default
stopping rule (``tol=1e-5``, ``m=4``), the two paths interleaved (their order alternating)
for ``--repeats`` turns in this process, pinned to one core with one BLAS / XLA thread
(``single_core.pin``, recorded in the output). Times are process CPU seconds, so that
other processes' load does not count; the ratio old / new is given per turn.

Cases, at ``--rank`` (default 8):

- ``votes``: a simulated 374 x 1799 binary matrix shaped like a parliament's roll calls
  (``bernmf.simulate`` with K = 5 sparse profiles, Prior(0.15, 0.25, 0.2): density about
  0.37), 10% of its entries missing at random;
- ``paleo``: the paper's 253 x 902 matrix, its training entries observed
  (:func:`bernmf.data.split.paper_split`), from ``--data-dir`` (default
  ``$BERNMF_SHARED_DIR/data``, else ``BERNMF_DATA_DIR``).

Printed per case: iterations and final loss (mean NLL per observed entry) of each path,
their relative difference, the largest difference of the probabilities, and the CPU
seconds with the ratios; a CSV with one row per case goes to ``--out``.

Run: ``.venv/bin/python benchmarks/logpca_speed.py [--cases votes paleo] [--repeats 3]``
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
from bernmf.inference import logpca  # noqa: E402
from bernmf.inference._logistic import LogisticData  # noqa: E402

PATHS = {"exact": True, "warm": False}
"""The two eigensolvers: ``exact`` (R's, the old path) and ``warm`` (the default)."""


def votes(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A simulated 374 x 1799 roll-call-like matrix and its mask (10% missing)."""
    M, N = 374, 1799
    Y, _, _ = bernmf.simulate(seed, M, N, 5, bernmf.Prior(0.15, 0.25, 0.2))
    mask = np.random.default_rng(seed + 1).random((M, N)) >= 0.1
    return Y, mask


def paleo(data_dir) -> tuple[np.ndarray, np.ndarray]:
    """The paper's paleo matrix and its training mask."""
    Y = bernmf.data.datasets.load("paleo", data_dir, download=False).to_numpy(dtype=float)
    return Y, paper_split(Y.shape).train


def compile_paths(layout, m, tol, rank: int, max_iter: int) -> dict:
    """The compiled ``logpca.solve`` of each path."""
    programs = {}
    for name, exact in PATHS.items():
        function = jax.jit(
            lambda d, m, t, exact=exact: logpca.solve(
                d, m, t, rank=rank, max_iter=max_iter, exact=exact
            )
        )
        programs[name] = function.lower(layout, m, tol).compile()
    return programs


def run(program, layout, m, tol) -> tuple[float, dict]:
    """(CPU seconds, result) of one whole fit."""
    begin = time.process_time()
    solution = jax.block_until_ready(program(layout, m, tol))
    seconds = time.process_time() - begin
    n_iter = int(solution.n_iter)
    return seconds, {
        "n_iter": n_iter,
        "loss": float(solution.trace[n_iter]),
        "theta": np.asarray(solution.state.theta),
    }


def measure(name: str, Y, mask, rank: int, repeats: int, max_iter: int) -> dict:
    """Interleaved whole fits of both paths on one case; one summary row."""
    data = as_observed(Y, mask)
    with jax.enable_x64(True):
        layout = LogisticData.of(data)
        m, tol = jnp.asarray(4.0), jnp.asarray(1e-5)
        programs = compile_paths(layout, m, tol, rank, max_iter)
        seconds = {path: [] for path in PATHS}
        results = {}
        for turn in range(repeats):
            order = list(PATHS) if turn % 2 == 0 else list(PATHS)[::-1]
            for path in order:
                cpu, results[path] = run(programs[path], layout, m, tol)
                seconds[path].append(cpu)
            ratio = seconds["exact"][-1] / seconds["warm"][-1]
            print(
                f"{name} turn {turn}: exact {seconds['exact'][-1]:.2f} s, "
                f"warm {seconds['warm'][-1]:.2f} s CPU, ratio {ratio:.1f}",
                flush=True,
            )
    old, new = results["exact"], results["warm"]
    ratios = np.array(seconds["exact"]) / np.array(seconds["warm"])
    probs_gap = np.abs(1 / (1 + np.exp(-old["theta"])) - 1 / (1 + np.exp(-new["theta"]))).max()
    return {
        "case": f"{name} ({data.shape[0]}x{data.shape[1]})",
        "K": rank,
        "density": float(Y[mask].mean()),
        "observed": float(mask.mean()),
        "n_iter exact": old["n_iter"],
        "n_iter warm": new["n_iter"],
        "loss exact": old["loss"],
        "loss warm": new["loss"],
        "loss rel. diff": abs(new["loss"] - old["loss"]) / abs(old["loss"]),
        "max probs diff": probs_gap,
        "CPU s exact": float(np.median(seconds["exact"])),
        "CPU s warm": float(np.median(seconds["warm"])),
        "ratio median": float(np.median(ratios)),
        "ratio min": float(ratios.min()),
        "ratio max": float(ratios.max()),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cases", nargs="+", choices=["votes", "paleo"], default=["votes", "paleo"]
    )
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-iter", type=int, default=2000)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--out", default="results/logpca_speed.csv")
    args = parser.parse_args(argv)
    data_dir = args.data_dir
    if data_dir is None and "BERNMF_SHARED_DIR" in os.environ:
        data_dir = Path(os.environ["BERNMF_SHARED_DIR"]) / "data"
    print(single_core.describe())
    print(f"load average {os.getloadavg()}")
    rows = []
    for name in args.cases:
        Y, mask = votes() if name == "votes" else paleo(data_dir)
        rows.append(measure(name, Y, mask, args.rank, args.repeats, args.max_iter))
    table = pd.DataFrame(rows)
    print(table.set_index("case").T.to_string(float_format=lambda x: f"{x:.4g}"))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out, index=False)
    print(f"written to {out}")


if __name__ == "__main__":
    main()
