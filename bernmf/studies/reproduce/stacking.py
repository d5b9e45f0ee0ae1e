"""Stacking across engines: MM grid, logistic SVD and a baseline, on the paper's split.

For each dataset (the paper's split: 70% train, 15% validation, 15% test) and each of
``--sets`` seed sets, this study fits

* ``mm``: R seeds at every (rank, alpha, beta) of the modes study's grid (gamma = 1;
  :data:`bernmf.studies.reproduce.modes.GRIDS`), each rank in one compiled call; seed set j uses
  seeds ``j R, ..., j R + R - 1`` (R: :data:`SEEDS`);
* ``logsvd`` at K in {2, 4, 8, 16} (deterministic: fitted once, a member of every set);
* ``logpca`` at ``--logpca-ranks`` (none by default; deterministic, like logsvd): on animals
  K in {2, 4, 8} took 0.36 of the weight and moved one seed set's setting-means stack from
  0.3967 to 0.3932; its N x N eigensolves make it slow on wide data (paleo: 144 s a fit);
* ``vb`` (CVB0) at ``--vb-ranks`` x gamma in {1, 1/K}, alpha = beta = 1, one seed per set
  (none by default: it got weight 0 in every seed set of every dataset once mm was in, and
  took 1440 of paleo's 1544 seconds per set);

and stacks them with :func:`bernmf.stack`, which adds the smoothed column-frequency
baseline. Methods (:mod:`bernmf.studies.runner`'s rules; every weight and choice on the
validation entries only, the test entries score the result):

* ``stacked: setting means``: ``bernmf.stack``'s default (``seeds="mean"``): each MM
  setting's R seeds share one weight, with logsvd, logpca and vb;
* ``stacked: setting means, refit``: the same weights, every member of positive weight
  fitted again on the training and validation entries (``bernmf.stack(..., refit=True)``);
  its validation perplexity is NaN (those entries are then training data);
* ``stacked: all engines``: every member above, each MM seed its own weight;
* ``stacked: mm grid``: the MM members only, a weight per seed (the modes study's
  "grid-stacked R");
* ``best single``: the one member of lowest validation perplexity.

Outputs in ``--out`` (default ``results/stacking``): ``results.csv`` (the study's table,
with the smallest test-entry probability of each method's predictive; written after every
seed set), ``weights.csv`` (weight per engine and rank of every stack), ``summary.csv``
(mean and sd over seed sets) and ``stacking.png`` (test perplexity against CPU seconds).

Run: ``bernmf reproduce stacking [--quick]``; ``--ranks``, ``--seeds-per-set`` and
``--logsvd-ranks`` make it lighter, ``--vb-ranks`` heavier.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from bernmf.studies.reproduce.modes import GRIDS as MODES_GRIDS
from bernmf.studies.runner import registry
from bernmf.studies.runner.study import Grid, Method, Study

SEEDS = {"animals": 10, "paleo": 4, "lastfm": 4}
"""Seeds per setting and seed set, per dataset."""
QUICK = {"ranks": (4, 8), "priors": ((1.5, 1.5), (1, 3)), "R": 2, "dtype": "float64"}
LOGSVD_RANKS = (2, 4, 8, 16)
LOGPCA_RANKS = ()
VB_RANKS = ()

METHODS = (
    Method("stacked: setting means", "stack"),
    Method("stacked: setting means, refit", "stack+refit"),
    Method("stacked: all engines", "stack members"),
    Method("stacked: mm grid", "stack members", ("mm",)),
    Method("best single", "single"),
)


def configuration(name: str, args) -> Study:
    """The study of one dataset."""
    if args.quick:
        grid = QUICK
    else:
        grid = {**MODES_GRIDS[name], "R": SEEDS[name]}
    ranks = args.ranks or grid["ranks"]
    R = args.seeds_per_set or grid["R"]
    mm_options = {"dtype": grid["dtype"]}
    priors = tuple((float(a), float(b), 1.0) for a, b in grid["priors"])
    grids = [Grid("mm", tuple(ranks), priors, mm_options)]
    for engine, engine_ranks in (("logsvd", args.logsvd_ranks), ("logpca", args.logpca_ranks)):
        if engine_ranks:
            grids.append(Grid(engine, tuple(engine_ranks), deterministic=True))
    for k in args.vb_ranks:
        flat = ((1.0, 1.0, 1.0), (1.0, 1.0, 1.0 / k))
        grids.append(Grid("vb", (k,), flat, members=1, name=f"vb K={k}"))
    methods = METHODS if args.refit else tuple(m for m in METHODS if m.rule != "stack+refit")
    return Study(
        "stacking", tuple(grids), methods, datasets=(name,), members=(R,), seed_sets=args.sets,
        metrics=("min_test_probability",), data_dir=args.data_dir,
    )  # fmt: skip


def figure(summary: pd.DataFrame, path: Path) -> None:
    """Test perplexity against CPU seconds, one panel per dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(summary["dataset"]))
    fig, axes = plt.subplots(1, len(names), figsize=(4.8 * len(names), 4), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        for _, row in summary[summary["dataset"] == name].iterrows():
            ax.errorbar(
                row["cpu_seconds_mean"], row["test_mean"], yerr=row["test_sd"], marker="o",
                capsize=3, label=row["method"],
            )  # fmt: skip
        ax.set(title=name, xscale="log", xlabel="CPU seconds", ylabel="test perplexity")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def ranks(text: str) -> list[int]:
    return [int(k) for k in text.split(",") if k]


def main(argv=None) -> int:
    parser = registry.parser(__doc__, "results/stacking")
    parser.add_argument("--sets", type=int, default=5, help="seed sets")
    parser.add_argument("--ranks", type=ranks, help="mm ranks, e.g. 4,8,16 (default: the grid's)")
    parser.add_argument("--seeds-per-set", type=int, help="mm seeds per setting and set (R)")
    parser.add_argument("--logsvd-ranks", type=ranks, default=list(LOGSVD_RANKS))
    parser.add_argument("--logpca-ranks", type=ranks, default=list(LOGPCA_RANKS))
    parser.add_argument("--vb-ranks", type=ranks, default=list(VB_RANKS))
    parser.add_argument(
        "--no-refit", dest="refit", action="store_false",
        help="leave out 'stacked: setting means, refit' (the weighted members fitted again)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.quick:
        args.sets = 2
    names = args.datasets or (["animals"] if args.quick else list(SEEDS))
    configurations = [configuration(name, args) for name in names]
    registry.run_into(configurations, args, figure, "stacking.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
