"""ESS of WH per CPU second: ``blackjax_chees`` and ``blackjax_mclmc`` against bernmf's
``nuts`` and ``gibbs``.

Each fit of a dataset at rank K and the prior Beta(alpha, beta), Dirichlet(gamma), all C
chains from one start (the ``mm`` fit of the seed) so that every engine samples one mode
from the same place; seeds outer, engines inner (interleaved, for a machine shared with
other work). Each engine first fits once at seed ``--compile-seed`` with the same options,
so that the timed fits reuse its compiled program (that fit's CPU seconds, compiling
included, are the row's ``first_fit_cpu_seconds``; ``compile_seconds`` is the timed fit's
own, 0 when it compiled nothing). With ``--no-first-fit`` there is none, and the first
timed fit of each engine compiles: its ``compile_seconds`` (wall) are part of its
``cpu_seconds``. A row per timed fit: CPU seconds of the process
(``time.process_time``, all threads) around ``Engine.fit``, and :func:`bernmf.diagnostics`'s
WH row (bulk ESS median and min over 1000 entries, R-hat max), and the leapfrog steps per
kept draw of the HMC samplers, appended to ``--out``.

With ``--accuracy CASE`` (a case of ``bernmf reproduce posterior_accuracy``, e.g.
``simulated-30x20-K3``, its ``--quick`` case), the engines fit the case's training entries
instead, and each row adds the accuracy against its reference posterior (built by long
Gibbs chains and cached on first use): the error of the posterior mean of WH in reference
sds, the sd ratio, the predictive KL, and the same of W and H
(:func:`bernmf.studies.reproduce.posterior_accuracy.scored`).

Run from the repository root with the package installed (see README.md)::

    python examples/bernmf-blackjax/benchmark.py --dataset animals --seeds 0 1 --out rows.csv
    python examples/bernmf-blackjax/benchmark.py --accuracy simulated-30x20-K3 --out acc.csv
    python examples/bernmf-blackjax/benchmark.py --table rows.csv   # means over seeds
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import numpy as np
import pandas as pd
from bernmf_blackjax import CHEES, MCLMC

import bernmf
from bernmf.data.observed import as_observed
from bernmf.inference.registry import get_engine
from bernmf.models.spec import Prior
from bernmf.studies.reproduce import posterior_accuracy, reference

FIELDS = (
    "dataset", "M", "N", "rank", "engine", "seed", "chains", "warmup", "samples",
    "cpu_seconds", "compile_seconds", "first_fit_cpu_seconds", "ess_bulk_median",
    "ess_bulk_min", "rhat_max",
    "ess_bulk_median_per_cpu_s", "ess_bulk_min_per_cpu_s", "divergences", "steps_per_draw",
    "mean_error_sd", "sd_ratio", "kl_predictive", "W_mean_error_sd", "W_sd_ratio",
    "H_mean_error_sd", "H_sd_ratio",
)  # fmt: skip
CASES = {case.name: case for case in (*posterior_accuracy.CASES, posterior_accuracy.QUICK_CASE)}


def engine_options(name: str, chains: int, warmup: int, samples: int, thinning: int) -> dict:
    """The options of each engine: C chains from one start, ``warmup`` + ``samples``."""
    common = {
        "num_chains": chains, "num_warmup": warmup, "num_samples": samples, "thinning": thinning
    }  # fmt: skip
    if name in ("nuts", "gibbs"):
        return {**common, "chains_per_start": chains, "progress": False}
    return common


SUMMARY = (
    "cpu_seconds", "steps_per_draw", "ess_bulk_median", "ess_bulk_min", "rhat_max",
    "ess_bulk_median_per_cpu_s", "ess_bulk_min_per_cpu_s", "mean_error_sd", "sd_ratio",
)  # fmt: skip


def table(rows: pd.DataFrame) -> str:
    """Markdown of the rows' means over seeds, per dataset, engine, chains and lengths."""
    keys = ["dataset", "engine", "chains", "warmup", "samples"]
    groups = rows.groupby(keys, sort=False)
    means = groups[[c for c in SUMMARY if c in rows and rows[c].notna().any()]].mean()
    means.insert(0, "seeds", groups.size())
    header = [*keys, *means.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key, values in means.iterrows():
        cells = [*map(str, key), *(f"{v:.4g}" if pd.notna(v) else "" for v in values)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--dataset", help="a CSV file or a name in --data-dir")
    where.add_argument("--accuracy", choices=sorted(CASES), help="a reference posterior's case")
    where.add_argument("--table", type=Path, help="print the markdown table of a results CSV")
    parser.add_argument("--data-dir", default="/work/shared/data")
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--prior", type=float, nargs=3, default=(0.1, 0.1, 1.0))
    parser.add_argument("--engines", nargs="+", default=["nuts", "blackjax_chees", "gibbs"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--compile-seed", type=int, default=100)
    parser.add_argument(
        "--no-first-fit", action="store_true",
        help="no untimed first fit: the first timed fit's CPU seconds include compiling",
    )  # fmt: skip
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument(
        "--length", nargs=3, action="append", metavar=("ENGINE", "WARMUP", "SAMPLES"),
        help="warmup and samples of an engine (default 250 250; gibbs 1000 1000)",
    )  # fmt: skip
    parser.add_argument(
        "--thin", nargs=2, action="append", metavar=("ENGINE", "THINNING"),
        help="keep every THINNING-th draw of an engine (default 1)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, help="the CSV the rows are appended to")
    args = parser.parse_args(argv)
    if args.table:
        print(table(pd.read_csv(args.table)))
        return
    if args.out is None:
        parser.error("--out is needed to fit")

    summary = None
    if args.accuracy:  # the case's training entries, rank and prior
        case = CASES[args.accuracy]
        summary = reference.reference(case, args.data_dir).summary
        Y, train, _ = case.matrix(args.data_dir)
        label, data = case.name, as_observed(np.nan_to_num(Y), train)
        args.rank, prior = case.rank, Prior(*case.prior)
    else:
        path = Path(args.dataset)
        if not path.exists():
            path = Path(args.data_dir) / f"{args.dataset}.csv"
        label, data = path.stem, as_observed(pd.read_csv(path, index_col=0).to_numpy(float))
        prior = Prior(*args.prior)
    lengths = {"gibbs": (1000, 1000)}
    lengths.update({e: (int(w), int(s)) for e, w, s in args.length or []})
    thinning = {e: int(t) for e, t in args.thin or []}
    ours = {engine.name: engine for engine in (CHEES, MCLMC)}
    engines = {name: ours.get(name) or get_engine(name) for name in args.engines}
    options = {
        name: engine_options(
            name, args.chains, *lengths.get(name, (250, 250)), thinning.get(name, 1)
        )
        for name in engines
    }
    first_cpu = {}
    for name, engine in engines.items():
        if args.no_first_fit:
            continue
        begin = time.process_time()
        engine.fit(data, args.rank, prior, seed=args.compile_seed, **options[name])
        first_cpu[name] = time.process_time() - begin
        print(f"{label} {name}: first fit {first_cpu[name]:.1f} CPU s", flush=True)
    new = not args.out.exists()
    with args.out.open("a", newline="") as file:
        writer = csv.DictWriter(file, FIELDS)
        if new:
            writer.writeheader()
        for seed in args.seeds:
            for name, engine in engines.items():
                begin = time.process_time()
                fit = engine.fit(data, args.rank, prior, seed=seed, **options[name])
                cpu = time.process_time() - begin
                wh = bernmf.diagnostics(fit, warn=False).table.loc["WH"]
                row = {
                    "dataset": label, "M": data.shape[0], "N": data.shape[1],
                    "rank": args.rank, "engine": name, "seed": seed, "chains": args.chains,
                    "warmup": options[name]["num_warmup"],
                    "samples": options[name]["num_samples"],
                    "cpu_seconds": round(cpu, 2),
                    "compile_seconds": round(fit.timings["compile"], 2),
                    "first_fit_cpu_seconds": round(first_cpu.get(name, np.nan), 2),
                    "ess_bulk_median": round(wh["ess_bulk_median"], 1),
                    "ess_bulk_min": round(wh["ess_bulk_min"], 1),
                    "rhat_max": round(wh["rhat_max"], 4),
                    "ess_bulk_median_per_cpu_s": round(wh["ess_bulk_median"] / cpu, 3),
                    "ess_bulk_min_per_cpu_s": round(wh["ess_bulk_min"] / cpu, 3),
                    "divergences": int(np.sum(fit.sample_stats.get("diverging", 0))),
                    "steps_per_draw": round(np.mean(fit.sample_stats.get("n_steps", np.nan)), 1),
                }  # fmt: skip
                if summary is not None:
                    row.update(posterior_accuracy.scored(fit, summary))
                writer.writerow(row)
                file.flush()
                print(row, flush=True)


if __name__ == "__main__":
    main()
