"""Milliseconds per Gibbs sweep and per VB iteration on lastfm, K = 10, one pinned core.

The engines ``gibbs`` and ``vb`` (variants ``cvb0`` and ``meanfield``) run on lastfm
(1226 x 285) with the training entries of the paper's split observed, alpha = beta = 1,
gamma = 1/K, the settings of the Rcpp reference of Lumbreras et al. (2020). Each is
compiled once, then timed ``--repeats`` times, interleaved, keeping the best (the machine
is shared); the time is the engine's run time (compilation excluded) divided by the
sweeps or iterations. The table gives the ratio of the Rcpp figures of issue 5 (66 ms per
Gibbs sweep and 32 ms per CVB0 iteration on a 2-core machine) to bernmf's.

Run: ``.venv/bin/python benchmarks/bayes_speed.py [--sweeps 100] [--out results/bayes_speed]``
"""

from __future__ import annotations

import single_core

single_core.pin()

import argparse  # noqa: E402
import os  # noqa: E402
from pathlib import Path  # noqa: E402

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import bernmf  # noqa: E402
from bernmf import datasets  # noqa: E402
from bernmf.split import paper_split  # noqa: E402

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
RANK = 10
RCPP_MS = {"gibbs": 66.0, "cvb0": 32.0}
"""ms per Gibbs sweep and per CVB0 iteration of the R/Rcpp code (issue 5)."""


def time_engine(Y, mask, name: str, n: int) -> float:
    """Milliseconds per sweep (gibbs) or iteration (vb variants), compilation excluded."""
    if name == "gibbs":
        options = {"num_warmup": 0, "num_samples": n, "progress": False}
        fit = bernmf.fit(Y, "gibbs", rank=RANK, mask=mask, **options)
    else:
        fit = bernmf.fit(Y, "vb", rank=RANK, mask=mask, variant=name, max_iter=n, tol=0)
    assert fit.n_iter == n
    return 1000 * fit.timings["run"] / n


def figure(table: pd.DataFrame, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    x = np.arange(len(table))
    ax.bar(x - 0.2, table["bernmf_ms"], 0.4, label="bernmf (JAX, 1 core)")
    rcpp = table["rcpp_ms"].fillna(0)
    ax.bar(x + 0.2, rcpp, 0.4, label="R/Rcpp (issue 5)")
    ax.set_xticks(x, table["method"])
    ax.set_ylabel("ms per sweep / iteration")
    ax.set_title(f"lastfm 1226 x 285, K = {RANK}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweeps", type=int, default=100, help="sweeps / iterations per run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--out", type=Path, default=Path("results/bayes_speed"))
    args = parser.parse_args(argv)
    data_dir = args.data_dir or os.environ.get("BERNMF_DATA_DIR")
    if data_dir is None and SHARED_DATA.is_dir():
        data_dir = SHARED_DATA
    Y = datasets.load("lastfm", data_dir).to_numpy(float)
    mask = paper_split(Y.shape).train

    methods = ("gibbs", "cvb0", "meanfield")
    for name in methods:  # compile once
        time_engine(Y, mask, name, args.sweeps)
    best = {name: np.inf for name in methods}
    for _ in range(args.repeats):  # interleaved, best of each: the machine is shared
        for name in methods:
            best[name] = min(best[name], time_engine(Y, mask, name, args.sweeps))
    table = pd.DataFrame(
        {
            "method": list(methods),
            "bernmf_ms": [best[name] for name in methods],
            "rcpp_ms": [RCPP_MS.get(name, np.nan) for name in methods],
        }
    )
    table["speedup_vs_rcpp"] = table["rcpp_ms"] / table["bernmf_ms"]
    table["target_ms"] = table["rcpp_ms"] / 5
    print(single_core.describe())
    print(f"lastfm, K = {RANK}, {args.sweeps} sweeps / iterations, best of {args.repeats}")
    print(table.to_string(index=False, float_format="%.4g"))
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "bayes_speed.csv", index=False)
    figure(table, args.out / "bayes_speed.png")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
