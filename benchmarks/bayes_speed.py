"""Milliseconds per Gibbs sweep and per VB iteration on lastfm, K = 10, one pinned core.

The engines ``gibbs`` and ``vb`` (variants ``cvb0`` and ``meanfield``) run on lastfm
(1226 x 285) with the training entries of the paper's split observed, alpha = beta = 1,
gamma = 1/K, the settings of the Rcpp reference of Lumbreras et al. (2020). Each is
compiled once, then timed ``--repeats`` times, interleaved, keeping the best (the machine
is shared); the time is the engine's run time (compilation excluded) divided by the
sweeps or iterations. When ``Rscript`` and the R/Rcpp package of Lumbreras et al.
(``rMMLEDirBer``, github.com/alumbreras/NBMF) are installed, the same sweeps of its
``Gibbs_DirBer`` and ``VB_DirBer`` (CVB0) are timed on the same entries, best of
``--repeats``, and the table gives R / bernmf; otherwise it prints "R not measured".

Run: ``.venv/bin/python benchmarks/bayes_speed.py [--sweeps 100] [--out results/bayes_speed]``
"""

from __future__ import annotations

import single_core

single_core.pin()

import argparse  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import bernmf  # noqa: E402
from bernmf.data import datasets  # noqa: E402
from bernmf.data.split import paper_split  # noqa: E402

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
RANK = 10
R_PACKAGE = "rMMLEDirBer"
R_DRIVER = """
args <- commandArgs(trailingOnly = TRUE)
suppressMessages(library(rMMLEDirBer))
V <- as.matrix(read.csv(args[1], header = FALSE))
K <- as.integer(args[2]); n <- as.integer(args[3])
set.seed(0)
Z <- matrix(NA_integer_, nrow(V), ncol(V))
Z[!is.na(V)] <- sample(K, sum(!is.na(V)), replace = TRUE)
elapsed <- system.time(if (args[4] == "gibbs") {
  Gibbs_DirBer(V, Z, K = K, alpha = 1, beta = 1, gamma = 1 / K, iter = n, burnin = 0.5)
} else {
  VB_DirBer(V, Z, K, alpha = 1, beta = 1, gamma = 1 / K, iter = n)
})[["elapsed"]]
cat(1000 * elapsed / n, "\\n")
"""
"""Times ``n`` sweeps of the R/Rcpp Gibbs sampler or CVB0 on the non-NA entries of a CSV."""


def r_available() -> bool:
    """Whether ``Rscript`` runs and has the R/Rcpp reference package installed."""
    if shutil.which("Rscript") is None:
        return False
    check = f"quit(status = !requireNamespace('{R_PACKAGE}', quietly = TRUE))"
    return subprocess.run(["Rscript", "-e", check], capture_output=True).returncode == 0


def time_r(path: Path, name: str, n: int) -> float:
    """Milliseconds per sweep (gibbs) or CVB0 iteration of the R/Rcpp code, one core."""
    with tempfile.NamedTemporaryFile("w", suffix=".R", delete=False) as script:
        script.write(R_DRIVER)
    command = ["Rscript", script.name, str(path), str(RANK), str(n), name]
    try:
        output = subprocess.run(command, capture_output=True, text=True, check=True)
    finally:
        os.unlink(script.name)
    return float(output.stdout.split()[-1])


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
    if table["rcpp_ms"].notna().any():
        ax.bar(x + 0.2, table["rcpp_ms"].fillna(0), 0.4, label="R/Rcpp (measured)")
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
    rcpp = {name: np.nan for name in methods}
    if r_available():
        with tempfile.TemporaryDirectory() as folder:  # training entries, NA elsewhere
            path = Path(folder) / "lastfm_train.csv"
            pd.DataFrame(np.where(mask, Y, np.nan)).to_csv(path, header=False, index=False)
            for _ in range(args.repeats):
                for name in ("gibbs", "cvb0"):
                    rcpp[name] = np.fmin(rcpp[name], time_r(path, name, args.sweeps))
    table = pd.DataFrame(
        {
            "method": list(methods),
            "bernmf_ms": [best[name] for name in methods],
            "rcpp_ms": [rcpp[name] for name in methods],
        }
    )
    table["speedup_vs_rcpp"] = table["rcpp_ms"] / table["bernmf_ms"]
    print(single_core.describe())
    if table["rcpp_ms"].isna().all():
        print(f"R not measured (needs Rscript and the R package {R_PACKAGE})")
    print(f"lastfm, K = {RANK}, {args.sweeps} sweeps / iterations, best of {args.repeats}")
    print(table.to_string(index=False, float_format="%.4g"))
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "bayes_speed.csv", index=False)
    figure(table, args.out / "bayes_speed.png")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
