"""How close each engine's posterior comes to a reference posterior, against its cost.

For each :data:`CASES` case (the posterior-vs-MAP study's simulated shapes at their true
priors, and animals at K = 8 and Beta(0.1, 0.1)), the reference posterior of its training entries
(:mod:`bernmf.studies.reproduce.reference`: long Gibbs chains, R-hat <= 1.01 and bulk ESS >= 400 on
every WH entry, cached), then every family of :data:`FAMILIES` at every scale b of
``--scales`` and ``--seeds`` seeds, with the case's prior:

- ``nuts``: 4 chains of b x (250 warmup + 250 draws), trees of depth <= 8 (the
  posterior-vs-MAP study's); ``gibbs``: 4 chains of b x (250 + 250) sweeps; ``svi_normal``
  and ``svi_lowrank``: b x 1250 steps, 1000 draws from the guide; these scale with b;
- ``vb`` (CVB0) and ``vb_meanfield``: one run to convergence, draws from q; ``mm``: the MAP
  at the prior clipped to >= 1 (mm's range), a point mass; these are fitted once (b = 1).

Each fit is scored against the reference (:func:`bernmf.posterior.accuracy.accuracy`): the
error of its posterior mean of WH in reference sds (``mean_error_sd``), the ratio of its sds
(``sd_ratio``), the KL of its predictive to the reference's (``kl_predictive``), and the same
first two on W and H after matching components. Costs: ``cpu_seconds`` (the fit's process CPU
time, compiling excluded: the first call of each family and scale is made twice, the second
timed), ``compile_seconds`` (of that first call), and ``evaluations``: passes over the data
(a NUTS leapfrog step, a Gibbs sweep, an SVI step per particle, a VB or MM iteration; NUTS's
warmup steps estimated from its kept draws' mean steps, as NumPyro does not return them).

A fit is *accurate* (:data:`TOLERANCE`) when its ``mean_error_sd`` is at most 0.2 and its
``sd_ratio`` within [0.9, 1.1]: the reference's own Monte Carlo error is below 0.05 sd (bulk
ESS >= 400).

Outputs in ``--out`` (default ``results/posterior_accuracy``): ``accuracy.csv`` (columns
``engine, scale, cpu_seconds, mean_error_sd, sd_ratio, kl_predictive`` first, then case,
seed, family options and the other numbers), ``summary.csv`` (means over seeds per case,
engine and scale, with ``accurate``), ``references.csv`` (each reference's checks and cost),
``accuracy.png`` (the three numbers against CPU seconds, a panel per case) and
``evaluations.png`` (against passes over the data). ``--quick``: a 30 x 20 case at K = 3,
scales 1 and 2, one seed, short chains.

Run: ``bernmf reproduce posterior_accuracy [--quick]``, or ``python -m
bernmf.studies.reproduce.posterior_accuracy`` for every option.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bernmf.api import fit as fit_engine
from bernmf.data.files.csv_table import write_csv
from bernmf.models.spec import Prior
from bernmf.plot import log_ticks, save_png
from bernmf.posterior.accuracy import accuracy, moments
from bernmf.studies.reproduce.reference import Case, reference
from bernmf.studies.runner import registry, running
from bernmf.studies.runner.study import Simulation

CASES = (
    Case("simulated-200x100-K4", Simulation(200, 100, 4), 4, (1.0, 1.0, 1.0), warmup=5000,
         samples=3000, thinning=30, confirm=1000),
    Case("simulated-100x60-K6", Simulation(100, 60, 6), 6, (1.0, 1.0, 1.0), confirm=1000),
    Case("simulated-100x60-K6-prior0.3", Simulation(100, 60, 6, prior=(0.3, 0.3, 0.3)), 6,
         (0.3, 0.3, 0.3), confirm=1000),
    Case("animals-K8", "animals", 8, (0.1, 0.1, 1.0), split="paper", confirm=1000),
)  # fmt: skip
"""The cases: the posterior-vs-MAP study's simulated shapes and priors (matrix seed 0, its
split of 70% training entries, the true prior), and animals at that study's rank with
Beta(0.1, 0.1)."""
QUICK_CASE = Case(
    "simulated-30x20-K3", Simulation(30, 20, 3), 3, (1.0, 1.0, 1.0),
    chains=4, warmup=1000, samples=1000, thinning=5,
)  # fmt: skip
"""The case of ``--quick``: a small simulation whose reference takes seconds."""

FAMILIES = {
    "nuts": ("nuts", {"num_chains": 4, "num_warmup": 250, "num_samples": 250,
                      "max_tree_depth": 8}),
    "gibbs": ("gibbs", {"num_chains": 4, "num_warmup": 250, "num_samples": 250}),
    "svi_normal": ("svi", {"guide": "AutoNormal", "steps": 1250}),
    "svi_lowrank": ("svi", {"guide": "AutoLowRankMultivariateNormal", "steps": 1250}),
    "vb": ("vb", {"variant": "cvb0"}),
    "vb_meanfield": ("vb", {"variant": "meanfield"}),
    "mm": ("mm", {}),
}  # fmt: skip
"""Each family's engine and options at scale 1."""
SCALED = {"nuts": ("num_warmup", "num_samples"), "gibbs": ("num_warmup", "num_samples"),
          "svi_normal": ("steps",), "svi_lowrank": ("steps",)}  # fmt: skip
"""What a scale b multiplies; the other families are fitted once."""
QUICK_SIZES = {
    "nuts": {"num_warmup": 100, "num_samples": 100},
    "gibbs": {"num_warmup": 100, "num_samples": 100},
    "svi_normal": {"steps": 500},
    "svi_lowrank": {"steps": 500},
}
"""The options of ``--quick`` at scale 1, over :data:`FAMILIES`'."""
SEED_STEP = 1000
"""Seeds of a family's fits are 0, 1000, 2000, ...: a sampler's chain c of seed s is the
one-chain fit of seed s + c, so consecutive seeds would share chains."""
TOLERANCE = {"mean_error_sd": 0.2, "sd_ratio": (0.9, 1.1)}
"""A fit is accurate when both hold (module docstring)."""
FIRST = ["engine", "scale", "cpu_seconds", "mean_error_sd", "sd_ratio", "kl_predictive"]
"""The first columns of ``accuracy.csv``, in this order: scripts may rely on them."""


def parse(argv):
    """The options: :func:`bernmf.studies.runner.registry.parser`'s, the families, scales
    and seeds."""
    parser = registry.parser(__doc__, "results/posterior_accuracy")
    parser.add_argument("--families", nargs="+", choices=list(FAMILIES), default=list(FAMILIES))
    parser.add_argument("--cases", nargs="+", choices=[c.name for c in CASES], default=None)
    # --budgets: the name of the runs of before 2026-11-29
    parser.add_argument("--scales", "--budgets", nargs="+", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--seeds", type=int, default=3, help="seeds per family and scale")
    parser.add_argument(
        "--figures-only", action="store_true",
        help="draw the figures again from summary.csv in --out; fit nothing",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if min(args.scales) < 1 or args.seeds < 1:
        parser.error("--scales and --seeds must be positive integers")
    args.cases = [c for c in CASES if args.cases is None or c.name in args.cases]
    args.sizes = {}
    if args.quick:
        args.cases, args.scales, args.seeds, args.sizes = [QUICK_CASE], [1, 2], 1, QUICK_SIZES
    args.scales = sorted(set(args.scales))
    return args


def options_at(family: str, scale: int, sizes=None) -> dict:
    """The engine options of a family at ``scale`` (its :data:`SCALED` options times b)."""
    options = {**FAMILIES[family][1], **(sizes or {}).get(family, {})}
    for name in SCALED.get(family, ()):
        options[name] *= scale
    if FAMILIES[family][0] in ("nuts", "svi", "gibbs"):
        options["progress"] = False
    return options


def prior_of(family: str, case: Case) -> Prior:
    """The case's prior; mm's clipped to >= 1, the range of its MAP."""
    values = case.prior if family != "mm" else tuple(max(v, 1.0) for v in case.prior)
    return Prior(*values)


def evaluations(family: str, fit, options: dict) -> float:
    """Passes over the data a fit made (module docstring)."""
    engine = FAMILIES[family][0]
    if engine == "nuts":
        steps = np.asarray(fit.sample_stats["n_steps"], float)
        total = options["num_warmup"] + options["num_samples"]
        return float(steps.mean() * total * steps.shape[0])
    if engine == "gibbs":
        return float(options["num_chains"] * (options["num_warmup"] + options["num_samples"]))
    if engine == "svi":
        return float(options["steps"] * options.get("num_particles", 1))
    return float(fit.n_iter)


def timed_fit(Y, train, case: Case, family: str, options: dict, seed: int, called: set):
    """The fit of a family at a seed, its process CPU seconds and the seconds its first call
    spent compiling: the first call of each ``(family, options)`` is made twice, the second
    timed, so that no compiling (of the sampler or of any helper) is counted."""
    engine = FAMILIES[family][0]
    arguments = dict(rank=case.rank, mask=train, prior=prior_of(family, case), seed=int(seed))
    key = (family, tuple(sorted(options.items())))
    compile_seconds = 0.0
    if key not in called:
        called.add(key)
        compile_seconds = float(fit_engine(Y, engine, **arguments, **options).timings["compile"])
    begin = time.process_time()
    made = fit_engine(Y, engine, **arguments, **options)
    return made, time.process_time() - begin, compile_seconds


def scored(fit, reference_moments: dict) -> dict:
    """The accuracy numbers of a fit (a point mass without draws) against the reference's."""
    if fit.draws:
        W, H = np.asarray(fit.draws["W"]), np.asarray(fit.draws["H"])
    else:
        W, H = np.asarray(fit.W)[None, None], np.asarray(fit.H)[None, None]
    approximate = moments(W, H, reference_moments["H_mean"])
    return accuracy(approximate, reference_moments, probs=fit.probs)


def run_case(case: Case, args, stream) -> tuple[list[dict], dict]:
    """The rows of one case and its reference's row."""
    begin = time.process_time()
    made = reference(case, args.data_dir, progress=not args.quiet)
    checks = made.info["checks"]
    reference_row = {
        "case": case.name, "chains": case.chains, "sweeps_per_chain": case.sweeps,
        "rhat_max": checks["rhat_max"], "ess_bulk_min": checks["ess_bulk_min"],
        "ess_bulk_median": checks["ess_bulk_median"], "passed": checks["passed"],
        "cpu_seconds": made.info["cpu_seconds"], "seconds": made.info["seconds"],
        "loaded_cpu_seconds": time.process_time() - begin,
    }  # fmt: skip
    running.log(
        f"{case.name}: reference of {case.chains} chains x {case.sweeps} sweeps, R-hat max "
        f"{checks['rhat_max']:.4f}, bulk ESS min {checks['ess_bulk_min']:.0f}",
        stream,
    )
    Y, train, _ = case.matrix(args.data_dir)
    rows, called = [], set()
    for family in args.families:
        scales = args.scales if family in SCALED else args.scales[:1]
        for scale in scales:
            options = options_at(family, scale, args.sizes)
            for seed in SEED_STEP * np.arange(args.seeds):
                fit, cpu, compile_seconds = timed_fit(Y, train, case, family, options, seed, called)
                numbers = scored(fit, made.summary)
                rows.append(
                    {
                        "engine": family, "scale": scale, "cpu_seconds": cpu, **numbers,
                        "case": case.name, "seed": int(seed), "compile_seconds": compile_seconds,
                        "evaluations": evaluations(family, fit, options),
                        "options": " ".join(f"{k}={v}" for k, v in options.items()
                                            if k != "progress"),
                    }
                )  # fmt: skip
            line = pd.DataFrame(rows[-args.seeds :])[FIRST[2:]].mean()
            running.log(
                f"  {family} b{scale}: " + ", ".join(f"{k} {v:.4g}" for k, v in line.items()),
                stream,
            )
    return rows, reference_row


def summarize(rows: pd.DataFrame) -> pd.DataFrame:
    """Means over seeds per case, engine and scale, and whether the mean fit is accurate."""
    numbers = [c for c in rows.columns if rows[c].dtype.kind in "fi" and c not in ("seed",)]
    numbers = [c for c in numbers if c != "scale"]
    summary = rows.groupby(["case", "engine", "scale"], sort=False)[numbers].mean()
    summary = summary.reset_index()
    low, high = TOLERANCE["sd_ratio"]
    accurate = (summary["mean_error_sd"] <= TOLERANCE["mean_error_sd"]) & summary[
        "sd_ratio"
    ].between(low, high)
    return summary.assign(seeds=rows.groupby(["case", "engine", "scale"]).size().to_numpy(),
                          accurate=accurate)  # fmt: skip


def figure(summary: pd.DataFrame, x: str, path: Path) -> None:
    """mean_error_sd, sd_ratio and kl_predictive (rows) against ``x`` (log scale), a column
    per case, a colour per engine, the tolerance shaded; each axis says what it leaves off
    (inf; 0 on the log axes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(dict.fromkeys(summary["case"]))
    colour = {e: f"C{i}" for i, e in enumerate(dict.fromkeys(summary["engine"]))}
    metrics = {
        "mean_error_sd": "error of the mean of WH\n(reference sds, RMS)",
        "sd_ratio": "sd / reference sd of WH\n(geometric mean)",
        "kl_predictive": "KL of the predictive\nto the reference's (nats)",
    }
    figure, axes = plt.subplots(
        len(metrics), len(cases), figsize=(4.2 * len(cases) + 1.6, 9), squeeze=False,
        layout="constrained",
    )  # fmt: skip
    for column, case in enumerate(cases):
        rows = summary[summary["case"] == case]
        for row, (metric, label) in enumerate(metrics.items()):
            axis = axes[row, column]
            left = []
            for engine, points in rows.groupby("engine", sort=False):
                values = points[metric].to_numpy(float)
                shown = np.isfinite(values) & ((values > 0) | (metric == "sd_ratio"))
                if not shown.all():
                    left.append(engine)
                axis.plot(points[x][shown], values[shown], marker="o", color=colour[engine],
                          label=engine)  # fmt: skip
            if metric == "sd_ratio":
                axis.axhspan(*TOLERANCE["sd_ratio"], color="gray", alpha=0.15)
            if metric == "mean_error_sd":
                axis.axhline(TOLERANCE["mean_error_sd"], color="gray", linestyle=":")
            axis.set_xscale("log")
            log_ticks(axis, "x")
            if metric != "sd_ratio":  # ratios near 1 read best on a linear axis
                axis.set_yscale("log")
            axis.set_ylabel(label)
            axis.set_xlabel("CPU seconds per fit" if x == "cpu_seconds" else "passes over the data")
            title = case if row == 0 else ""
            if left:
                title += ("\n" if title else "") + f"(off the axis: {', '.join(left)})"
            axis.set_title(title, fontsize=9)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside right upper", fontsize=8)
    save_png(figure, path)


def main(argv=None) -> int:
    """Run the study (module docstring) and write its tables and figures in ``--out``."""
    args = parse(argv)
    out = Path(args.out)
    if args.figures_only:  # a redraw (after a plotting fix, or of a finished run)
        summary = pd.read_csv(out / "summary.csv").rename(columns={"budget": "scale"})
        figure(summary, "cpu_seconds", out / "accuracy.png")
        figure(summary, "evaluations", out / "evaluations.png")
        return 0
    stream = registry.progress(args)
    begin = time.process_time()
    rows, references = [], []
    for case in args.cases:
        found, reference_row = run_case(case, args, stream)
        rows += found
        references.append(reference_row)
    out.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame(rows)
    write_csv(table, out / "accuracy.csv", index=False)
    summary = summarize(table)
    write_csv(summary, out / "summary.csv", index=False)
    write_csv(pd.DataFrame(references), out / "references.csv", index=False)
    figure(summary, "cpu_seconds", out / "accuracy.png")
    figure(summary, "evaluations", out / "evaluations.png")
    shown = ["case", *FIRST, "accurate"]
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        running.log(summary[shown].round(4).to_string(index=False), stream)
    running.log(f"total {time.process_time() - begin:.0f} CPU s; results in {out}", stream)
    return 0


if __name__ == "__main__":
    sys.exit(main())
