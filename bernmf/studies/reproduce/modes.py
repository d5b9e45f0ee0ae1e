"""Many modes: single MAP fits against ensembles of them, on the paper's split.

The posterior of this model has many modes, and MM fits from different seeds land in
different ones. For each dataset (the paper's split: 70% train, 15% validation, 15%
test) this study fits a pool of MM fits, a number of seeds at every setting of a rank x
(alpha, beta) grid (gamma = 1; :data:`GRIDS`), each rank in one compiled call, and
compares, for R members per setting (:mod:`bernmf.studies.runner`'s rules):

* ``single``: the member of lowest validation perplexity (at R = 1, the paper protocol);
* ``best of R``: per setting the member of lowest objective, the setting chosen on
  validation;
* ``uniform R``: per setting the uniform mixture of its R members, chosen on validation;
* ``stacked R``: the R members of the setting ``uniform R`` chose and the smoothed column
  frequency, stacked (:func:`bernmf.stack`);
* ``grid-stacked R``: the R members of *every* setting (and the column frequency), a
  stacking weight each: ranks and priors mixed, the weights choosing among them;
* ``vb R`` and ``gibbs R`` (on animals, R = 3): per setting of their own small grid
  (:data:`BAYES`: gamma in {1, 1/K}) the stack of the variational engine's 3 seeds or of
  the Gibbs sampler's 3 chains, the setting chosen by the stack's validation perplexity.

Every choice and every weight uses the validation entries only; the test entries score
the result. Each R is repeated ``--repetitions`` times with other seeds: the disjoint
blocks ``pool[j R : (j + 1) R]`` while the pool has room, else random R-subsets of the
pool. Members run in float64 on animals and float32 on paleo and lastfm (``--dtype``
overrides), where float32 halves the time and moves a fit's validation perplexity by
about 1e-3 (lastfm, K = 8: 0.1510 against 0.1514; K = 32: 0.1535 against 0.1546).

Outputs in ``--out`` (default ``results/modes``): ``results.csv`` (the study's table:
every method, R and repetition; written after every repetition), ``weights.csv`` (weight
per engine and rank of every stack), ``summary.csv`` (mean and sd over repetitions),
``modes.png`` (test perplexity against R, and against CPU seconds).

Run: ``bernmf reproduce modes [--quick] [--datasets animals ...]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from bernmf.studies.runner import registry
from bernmf.studies.runner.study import Grid, Method, Study

ANIMALS_PRIORS = tuple((a, b) for a in (1, 1.5, 2, 2.5, 3) for b in (1, 1.5, 2, 2.5, 3))
CORNERS = ((1, 1), (1, 3), (3, 1), (3, 3))
GRIDS = {
    "animals": {"ranks": (4, 8, 16, 32), "priors": ANIMALS_PRIORS, "pool": 50, "dtype": "float64"},
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
the fits (float32 halves the time of the larger two)."""

QUICK = {
    "animals": {"ranks": (4, 8), "priors": ((1.5, 1.5), (1.5, 3)), "pool": 6, "dtype": "float64"}
}

BAYES = {
    "datasets": ("animals",),
    "members": 3,
    "ranks": {"full": 8, "quick": 4},
    "alpha_beta": (1.5, 3.0),
    "options": {"vb": {}, "gibbs": {"num_warmup": 200, "num_samples": 100, "progress": False}},
}
"""The Bayesian ensembles: on animals only (their samplers cost minutes per repetition on
the larger two), 3 members, one rank, gamma in {1, 1/K} (the model's and the engines'
default)."""

MAP_METHODS = (
    Method("single", "single", ("mm",)),
    Method("best of R", "best", ("mm",)),
    Method("uniform R", "mean", ("mm",)),
    Method("stacked R", "stack chosen", ("mm",)),
    Method("grid-stacked R", "stack members", ("mm",)),
)


def configuration(name: str, grid: dict, args, quick: bool) -> Study:
    """The study of one dataset: the mm grid, and the Bayesian engines where they run."""
    priors = tuple((float(a), float(b), 1.0) for a, b in grid["priors"])
    options = {"dtype": args.dtype or grid["dtype"]}
    grids, methods = [Grid("mm", grid["ranks"], priors, options)], list(MAP_METHODS)
    if name in BAYES["datasets"] and args.bayes:
        rank = BAYES["ranks"]["quick" if quick else "full"]
        alpha, beta = BAYES["alpha_beta"]
        gammas = ((alpha, beta, 1.0), (alpha, beta, 1.0 / rank))
        for engine, engine_options in BAYES["options"].items():
            grids.append(Grid(engine, (rank,), gammas, engine_options, members=BAYES["members"]))
            methods.append(
                Method(f"{engine} R", "stack setting", (engine,), at=(BAYES["members"],))
            )
    return Study(
        "modes", tuple(grids), tuple(methods), datasets=(name,), members=tuple(args.restarts),
        seed_sets=args.repetitions, pool=args.pool or grid["pool"], data_dir=args.data_dir,
    )  # fmt: skip


def figure(summary: pd.DataFrame, path: Path) -> None:
    """Test perplexity against R (top) and against CPU seconds (bottom), a column per dataset."""
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
            axes[1, column].plot(rows["cpu_seconds_mean"], rows["test_mean"], marker="o")
        axes[0, column].set(title=name, xscale="log", xlabel="members R", ylabel="test perplexity")
        axes[1, column].set(
            xscale="log", xlabel="CPU seconds (fits of the method)", ylabel="test perplexity"
        )
        for ax in axes[:, column]:
            ax.grid(alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=9)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = registry.parser(__doc__, "results/modes")
    parser.add_argument("--restarts", default="1,3,10,30", help="the R compared")
    parser.add_argument("--pool", type=int, help="seeds per setting (default: the grid's)")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--no-bayes", dest="bayes", action="store_false", help="no vb, gibbs")
    parser.add_argument("--dtype", choices=("float32", "float64"), help="default: the grid's")
    args = parser.parse_args(argv)
    args.restarts = [int(r) for r in args.restarts.split(",")]
    names = args.datasets or (list(QUICK) if args.quick else list(GRIDS))
    grids = {name: GRIDS[name] for name in names}
    if args.quick:  # the quick grid on every dataset asked for
        grids, args.restarts, args.repetitions = dict.fromkeys(names, QUICK["animals"]), [1, 3], 2
    configurations = [configuration(name, grids[name], args, args.quick) for name in names]
    registry.run_into(configurations, args, figure, "modes.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
