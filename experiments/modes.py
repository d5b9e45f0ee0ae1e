"""Many modes: single MAP fits against ensembles of them, on the paper's split.

The posterior of this model has many modes, and MM fits from different seeds land in
different ones. For each dataset (the paper's split: 70% train, 15% validation, 15%
test) this study fits a pool of MM fits, a number of seeds at every setting of a rank x (alpha,
beta) grid (gamma = 1; :data:`GRIDS`), each rank in one compiled call, and compares,
for R members per setting (an R larger than the pool is skipped):

* ``single``: the paper protocol, one fit per setting, the setting of lowest
  validation perplexity (R = 1 only);
* ``best of R``: per setting the fit of lowest objective, the setting chosen on
  validation;
* ``uniform R``: per setting the uniform mixture of the R fits, chosen on validation;
* ``stacked R``: the R fits of the setting ``uniform R`` chose, weighted by stacking
  on the validation entries (:func:`bernmf.fitting.stacking.stacking_weights`), with the
  smoothed column frequency as one more member (as :func:`bernmf.stack` adds it);
* ``grid-stacked R``: the R fits of *every* setting (and the column frequency),
  weighted by stacking on the validation entries: ranks and priors mixed, the weights
  choosing among them;
* ``vb R`` and ``gibbs R`` (``--bayes``, on animals): ``bernmf.fit(..., restarts=R,
  combine="stack", validation=...)`` of the variational engine (R seeds) and of the
  Gibbs sampler (R chains) at the rank and (alpha, beta) ``uniform R`` chose, with the
  Dirichlet gamma in {1, 1/K} chosen on validation.

Every choice and every weight uses the validation entries only; the test entries
score the result. Each R is repeated ``--repetitions`` times with other seeds: the
disjoint blocks ``pool[j R : (j + 1) R]`` while the pool has room, else random
R-subsets of the pool (overlapping sets, noted in the CSV's ``disjoint`` column).
Members run in float64 on animals and float32 on paleo and lastfm (``--dtype``
overrides), where float32 halves the time and moves a fit's validation perplexity by
about 1e-3 (lastfm, K = 8: 0.1510 against 0.1514; K = 32: 0.1535 against 0.1546).

Outputs in ``--out`` (default ``results/modes``): ``results.csv`` (every method, R and
repetition: test and validation perplexity, seconds), ``summary.csv`` (mean and sd
over repetitions), ``modes.png`` (test perplexity against R, and against seconds).

Run: ``.venv/bin/python experiments/modes.py [--quick] [--datasets animals,...]``
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

import bernmf
from bernmf.data import datasets
from bernmf.data.observed import as_observed
from bernmf.data.split import paper_split
from bernmf.fitting.stack import baseline
from bernmf.fitting.stacking import bernoulli_lpd, mixture_lpd, stacking_weights
from bernmf.inference import mm

ANIMALS_PRIORS = tuple((a, b) for a in (1, 1.5, 2, 2.5, 3) for b in (1, 1.5, 2, 2.5, 3))
CORNERS = ((1, 1), (1, 3), (3, 1), (3, 3))
GRIDS = {
    "animals": {
        "ranks": (4, 8, 16, 32),
        "priors": ANIMALS_PRIORS,
        "pool": 50,
        "dtype": "float64",
        "bayes": True,
    },
    "paleo": {
        "ranks": (4, 8, 16, 32),
        "priors": (*CORNERS, (2, 2), (1.2, 2.4)),
        "pool": 12,
        "dtype": "float32",
    },
    "lastfm": {
        "ranks": (4, 8, 16, 32),
        "priors": (*CORNERS, (1.6, 1), (1.8, 3)),
        "pool": 12,
        "dtype": "float32",
    },
}
"""Per dataset: the rank x (alpha, beta) grid, the seeds per setting, the float type of
the fits (float32 halves the time of the larger two), and whether the Bayesian
ensembles run (their samplers cost minutes per repetition on the larger two)."""

QUICK = {
    "animals": {
        "ranks": (4, 8),
        "priors": ((1.5, 1.5), (1.5, 3)),
        "pool": 6,
        "dtype": "float64",
        "bayes": True,
    }
}


def log(message: str) -> None:
    print(message, flush=True)


class Pool(NamedTuple):
    """The MM fits of one dataset: per setting (rank, alpha, beta), ``pool`` seeds.

    ``validation`` and ``test`` hold each fit's log density of every validation and
    test entry, shape (settings, pool, entries); ``objective`` and ``seconds`` have
    shape (settings, pool); ``baseline`` the log densities (1, validation entries) and
    (1, test entries) of the smoothed column frequency (:func:`bernmf.fitting.stack.baseline`).
    """

    settings: list[tuple[int, float, float]]
    validation: np.ndarray
    test: np.ndarray
    objective: np.ndarray
    seconds: np.ndarray
    baseline: tuple[np.ndarray, np.ndarray]


def fit_pool(Y, split, grid: dict, pool: int, dtype: str) -> Pool:
    """``pool`` fits at every setting of ``grid``, one :func:`mm.run_many` call per rank."""
    data = as_observed(Y, split.train)
    settings, val, test, objective, seconds = [], [], [], [], []
    for rank in grid["ranks"]:
        priors = [bernmf.Prior(a, b, 1.0) for a, b in grid["priors"] for _ in range(pool)]
        seeds = [s for _ in grid["priors"] for s in range(pool)]
        begin = time.perf_counter()
        batch = mm.run_many(data, rank, priors, seeds, dtype=dtype)
        log(
            f"  rank {rank}: {len(seeds)} fits in {time.perf_counter() - begin:.1f} s "
            f"(compile {batch.compile_seconds:.1f} s)"
        )
        for i, (a, b) in enumerate(grid["priors"]):
            rows = range(i * pool, (i + 1) * pool)
            settings.append((rank, a, b))
            probs = np.stack([batch.probs(r) for r in rows])
            val.append(bernoulli_lpd(Y, split.validation, probs).T)
            test.append(bernoulli_lpd(Y, split.test, probs).T)
            objective.append(batch.objective[list(rows)])
            seconds.append(batch.seconds[list(rows)])
    frequency = baseline(Y, split.train).probs[None]
    return Pool(
        settings,
        np.asarray(val, np.float32),
        np.asarray(test, np.float32),
        np.asarray(objective),
        np.asarray(seconds),
        tuple(bernoulli_lpd(Y, m, frequency).T for m in (split.validation, split.test)),
    )


def seed_sets(pool: int, R: int, repetitions: int) -> tuple[list[np.ndarray], bool]:
    """``repetitions`` sets of R seed indices: disjoint blocks if they fit, else random."""
    if R * repetitions <= pool:
        return [np.arange(j * R, (j + 1) * R) for j in range(repetitions)], True
    rng = np.random.default_rng(R)
    return [np.sort(rng.choice(pool, R, replace=False)) for _ in range(repetitions)], False


def perplexity_of(lpd: np.ndarray, weights: np.ndarray) -> float:
    """Mean negative log density of the mixture of members (lpd (members, entries))."""
    return float(-mixture_lpd(lpd.T.astype(float), weights).mean())


def map_methods(pool: Pool, R: int, chosen: np.ndarray) -> list[dict]:
    """The MAP methods for the members ``chosen`` (indices into the pool) of each setting."""
    val, test = pool.validation[:, chosen], pool.test[:, chosen]  # (settings, R, entries)
    seconds = pool.seconds[:, chosen]
    uniform = np.full(R, 1 / R)
    rows = []

    def pick(scores, method, weights_of, members_of):
        s = int(np.argmin(scores))
        rows.append(
            {
                "method": method,
                "setting": pool.settings[s],
                "validation": float(scores[s]),
                "test": perplexity_of(members_of(test, s), weights_of(s)),
                "seconds": float(seconds.sum()),
            }
        )
        return s

    if R == 1:
        pick([perplexity_of(v, [1.0]) for v in val], "single", lambda s: [1.0], lambda x, s: x[s])
    best = np.argmin(pool.objective[:, chosen], axis=1)
    pick(
        [perplexity_of(v[b : b + 1], [1.0]) for v, b in zip(val, best, strict=True)],
        "best of R",
        lambda s: [1.0],
        lambda x, s: x[s, best[s] : best[s] + 1],
    )
    s = pick(
        [perplexity_of(v, uniform) for v in val], "uniform R", lambda s: uniform, lambda x, s: x[s]
    )
    # the stacks get the baseline member too, as bernmf.stack adds it: never probability 0
    base_val, base_test = pool.baseline
    begin = time.perf_counter()
    members = np.concatenate([val[s], base_val])
    weights = stacking_weights(members.T.astype(float))
    rows.append(
        {
            "method": "stacked R",
            "setting": pool.settings[s],
            "validation": perplexity_of(members, weights),
            "test": perplexity_of(np.concatenate([test[s], base_test]), weights),
            "seconds": float(seconds.sum() + time.perf_counter() - begin),
        }
    )
    begin = time.perf_counter()
    everything = np.concatenate([val.reshape(-1, val.shape[-1]), base_val])
    weights = stacking_weights(everything.T.astype(float))
    rows.append(
        {
            "method": "grid-stacked R",
            "setting": f"{int((weights > 1e-3).sum())} members of {len(weights)}",
            "validation": perplexity_of(everything, weights),
            "test": perplexity_of(
                np.concatenate([test.reshape(-1, test.shape[-1]), base_test]), weights
            ),
            "seconds": float(seconds.sum() + time.perf_counter() - begin),
        }
    )
    return rows


BAYES_OPTIONS = {
    "vb": {},
    "gibbs": {"num_warmup": 200, "num_samples": 100, "progress": False},
}


def bayes_methods(Y, split, setting, R: int, seed: int) -> list[dict]:
    """vb (R seeds) and gibbs (R chains) stacked on validation, gamma in {1, 1/K}."""
    rank, alpha, beta = setting
    rows = []
    for engine, options in BAYES_OPTIONS.items():
        candidates = []
        for gamma in (1.0, 1.0 / rank):
            begin = time.perf_counter()
            result = bernmf.fit(
                Y, engine, rank, mask=split.train, prior=bernmf.Prior(alpha, beta, gamma),
                seed=seed, restarts=R, combine="stack", validation=split.validation, **options,
            )  # fmt: skip
            seconds = time.perf_counter() - begin
            validation = result.perplexity(Y, split.validation)
            candidates.append((validation, gamma, result, seconds))
        validation, gamma, result, _ = min(candidates, key=lambda c: c[0])
        rows.append(
            {
                "method": f"{engine} R",
                "setting": (rank, alpha, beta, round(gamma, 4)),
                "validation": validation,
                "test": result.perplexity(Y, split.test),
                "seconds": float(sum(c[3] for c in candidates)),
            }
        )
    return rows


def run_dataset(name: str, args, grid: dict) -> pd.DataFrame:
    """Every method, R and repetition on one dataset."""
    Y = datasets.load(name, args.data_dir).to_numpy(dtype=float)
    split = paper_split(Y.shape)
    begin = time.perf_counter()
    size = args.pool or grid["pool"]
    settings = len(grid["ranks"]) * len(grid["priors"])
    log(f"{name} {Y.shape}: {settings} settings x {size} seeds")
    pool = fit_pool(Y, split, grid, size, args.dtype or grid["dtype"])
    rows = []
    for R in args.restarts:
        if R > size:
            log(f"  R = {R}: skipped, more than the {size} seeds of the pool")
            continue
        sets, disjoint = seed_sets(size, R, args.repetitions)
        for j, chosen in enumerate(sets):
            found = map_methods(pool, R, chosen)
            if grid.get("bayes") and R in args.bayes:
                uniform = next(r for r in found if r["method"] == "uniform R")
                found += bayes_methods(Y, split, uniform["setting"], R, seed=1000 * j)
            for row in found:
                rows.append({"dataset": name, "R": R, "repetition": j, "disjoint": disjoint, **row})
        done = pd.DataFrame([r for r in rows if r["R"] == R])
        means = done.groupby("method", sort=False)["test"].mean()
        log(f"  R = {R}: " + ", ".join(f"{m} {v:.4f}" for m, v in means.items()))
    log(f"  {name}: {time.perf_counter() - begin:.0f} s")
    return pd.DataFrame(rows)


def summarize(results: pd.DataFrame) -> pd.DataFrame:
    """Mean and sd of test and validation perplexity and seconds per dataset, method, R."""
    grouped = results.groupby(["dataset", "method", "R"], sort=False)
    summary = grouped.agg(
        test_mean=("test", "mean"),
        test_sd=("test", "std"),
        validation_mean=("validation", "mean"),
        seconds_mean=("seconds", "mean"),
        repetitions=("test", "size"),
        disjoint=("disjoint", "all"),
    )
    return summary.reset_index()


def figure(summary: pd.DataFrame, path: Path) -> None:
    """Test perplexity against R (top) and against seconds (bottom), one column per dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(summary["dataset"]))
    fig, axes = plt.subplots(2, len(names), figsize=(4.6 * len(names), 7.2), squeeze=False)
    for column, name in enumerate(names):
        subset = summary[summary["dataset"] == name]
        for method, rows in subset.groupby("method", sort=False):
            rows = rows.sort_values("R")
            axes[0, column].errorbar(
                rows["R"], rows["test_mean"], yerr=rows["test_sd"], marker="o", capsize=3,
                label=method,
            )  # fmt: skip
            axes[1, column].plot(rows["seconds_mean"], rows["test_mean"], marker="o", label=method)
        axes[0, column].set(title=name, xscale="log", xlabel="members R", ylabel="test perplexity")
        axes[1, column].set(
            xscale="log", xlabel="seconds (fits of the method)", ylabel="test perplexity"
        )
        for ax in axes[:, column]:
            ax.grid(alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="animals, tiny grid, R 1 and 3")
    parser.add_argument("--datasets", default="animals,paleo,lastfm")
    parser.add_argument("--data-dir", default=None, help="folder of <name>.csv or .rda")
    parser.add_argument("--restarts", default="1,3,10,30", help="the R compared")
    parser.add_argument("--pool", type=int, help="seeds per setting (default: the grid's)")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--bayes", default="3", help="R of the vb and gibbs ensembles ('' none)")
    parser.add_argument("--dtype", choices=("float32", "float64"), help="default: the grid's")
    parser.add_argument("--out", default="results/modes")
    args = parser.parse_args(argv)
    # members in distinct modes are what this study is about: no warning per ensemble
    warnings.filterwarnings("ignore", message=".*distinct modes", category=UserWarning)
    args.restarts = [int(r) for r in args.restarts.split(",")]
    args.bayes = [int(r) for r in args.bayes.split(",") if r]
    grids = GRIDS
    if args.quick:
        grids, args.restarts, args.repetitions = QUICK, [1, 3], 2
        args.datasets = "animals"
    begin = time.perf_counter()
    results = pd.concat(
        [run_dataset(name, args, grids[name]) for name in args.datasets.split(",")],
        ignore_index=True,
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results.to_csv(out / "results.csv", index=False)
    summary = summarize(results)
    summary.to_csv(out / "summary.csv", index=False)
    figure(summary, out / "modes.png")
    with pd.option_context("display.width", 160):
        log(summary.to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    log(f"total {time.perf_counter() - begin:.0f} s; results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
