"""The NUTS target on lastfm: K = 8, 2 chains x (1000 warmup + 1000 draws).

Fits engine ``nuts`` on the training entries of the paper's split and reports the
distribution of R-hat(WH) (the target: <= 1.01 for at least 99% of the entries,
<= 1.05 for all), divergences, seconds, ESS per second (bulk, median over entries)
and the test perplexity. The chains run in parallel on ``--chains`` CPU devices
(this script calls ``numpyro.set_host_device_count`` before JAX starts).

Outputs in ``--out`` (default ``results/nuts_lastfm``): ``summary.csv`` (one row),
``diagnostics.csv`` (the table of :func:`bernmf.diagnostics`) and ``rhat.png``
(histogram of R-hat(WH)). ``--quick`` is a smoke run (animals, short chains).

Run: ``python experiments/nuts_lastfm.py [--data-dir DIR] [--quick] [--dtype float32]``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--out", type=Path, default=Path("results/nuts_lastfm"))
    parser.add_argument("--dataset", default="lastfm")
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--alpha", type=float, default=1.6, help="default: MM's tuned prior")
    parser.add_argument("--beta", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=1.0)
    parser.add_argument("--max-tree-depth", type=int, default=10)
    parser.add_argument(
        "--target-accept",
        type=float,
        default=0.65,
        help="NUTS target_accept_prob (NumPyro's default 0.8 takes trees twice as deep here)",
    )
    parser.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    parser.add_argument("--start", default="mm", choices=("mm", "prior"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--quick", action="store_true", help="animals, K=2, 100 + 100 draws")
    args = parser.parse_args(argv)
    if args.quick:
        args.dataset, args.rank, args.warmup, args.samples = "animals", 2, 100, 100
    return args


def main(argv=None) -> None:
    args = parse(argv)
    import numpyro

    numpyro.set_host_device_count(args.chains)  # before JAX starts: one CPU device per chain

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    import bernmf
    from bernmf.data import datasets
    from bernmf.data.split import paper_split

    data = datasets.load(args.dataset, data_dir=args.data_dir)
    split = paper_split(data.shape)
    prior = bernmf.Prior(args.alpha, args.beta, args.gamma)
    print(
        f"nuts on {args.dataset} {data.shape}, K={args.rank}, {args.chains} chains x "
        f"({args.warmup} warmup + {args.samples} draws), prior {tuple(prior)}, {args.dtype}",
        flush=True,
    )
    begin = time.perf_counter()
    fit = bernmf.fit(
        data,
        "nuts",
        rank=args.rank,
        mask=split.train,
        prior=prior,
        seed=args.seed,
        num_chains=args.chains,
        num_warmup=args.warmup,
        num_samples=args.samples,
        max_tree_depth=args.max_tree_depth,
        target_accept_prob=args.target_accept,
        start=args.start,
        dtype=args.dtype,
        progress=not args.no_progress,
    )
    total = time.perf_counter() - begin
    diagnostics = bernmf.diagnostics(fit, warn=False)
    rhat = diagnostics.rhat["WH"].ravel()
    summary = {
        "dataset": args.dataset,
        "rank": args.rank,
        "chains": args.chains,
        "warmup": args.warmup,
        "samples": args.samples,
        "dtype": args.dtype,
        "target_accept_prob": args.target_accept,
        "chain_method": fit.extras["chain_method"],
        "seconds_sampling": fit.timings["run"],
        "seconds_mm_start": fit.timings["start"],
        "seconds_total": total,
        "divergences": diagnostics.divergences,
        "rhat_wh_share_le_1.01": float(np.mean(rhat <= 1.01)),
        "rhat_wh_share_le_1.05": float(np.mean(rhat <= 1.05)),
        "rhat_wh_max": float(rhat.max()),
        "ess_bulk_wh_median": diagnostics.table.loc["WH", "ess_bulk_median"],
        "ess_bulk_wh_min": diagnostics.table.loc["WH", "ess_bulk_min"],
        "ess_tail_wh_min": diagnostics.table.loc["WH", "ess_tail_min"],
        "ess_bulk_per_second_wh": diagnostics.table.loc["WH", "ess_bulk_per_second"],
        "mean_tree_depth": float(np.mean(fit.sample_stats["tree_depth"])),
        "step_size": float(np.mean(fit.sample_stats["step_size"][:, -1])),
        "test_perplexity": fit.perplexity(data, split.test),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([summary]).to_csv(args.out / "summary.csv", index=False)
    diagnostics.table.to_csv(args.out / "diagnostics.csv")
    figure, axis = plt.subplots(figsize=(5, 3.2))
    axis.hist(rhat, bins=60, color="tab:blue")
    axis.axvline(1.01, color="black", linestyle="--", linewidth=1)
    axis.set_xlabel("R-hat of (WH)_mn")
    axis.set_ylabel("entries")
    axis.set_title(f"NUTS, {args.dataset}, K={args.rank}")
    figure.tight_layout()
    figure.savefig(args.out / "rhat.png", dpi=120)
    print(diagnostics.table.round(4).to_string())
    for key, value in summary.items():
        print(f"{key:>26}: {value}")
    print(f"wrote {args.out}/summary.csv, diagnostics.csv, rhat.png", file=sys.stderr)


if __name__ == "__main__":
    main()
