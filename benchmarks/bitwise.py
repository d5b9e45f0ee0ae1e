"""Fifteen fits (every engine, ensembles, stacks, the default search) whose W, H, trace,
probs and draws a refactoring must keep bit for bit: ``python benchmarks/bitwise.py OUT.npz``
in each checkout (``PYTHONPATH`` at it), then ``python benchmarks/bitwise.py --compare A.npz
B.npz`` names the arrays that differ. Issue 49's moves: 4e475b2 against 3acff2a, 66 arrays,
none differ; its checks of Y once (the search added): 0e211c6 against the change, 70 arrays,
none differ; Y checked once by the CLI, compare and the report (their scores added,
:func:`scores`, run by this script at ea4e788 too): ea4e788 against the change, 76 arrays,
none differ.
"""

import sys

import numpy as np

import bernmf
from bernmf.data.split import random_split


def compare(a_path, b_path) -> None:
    """Print the names of the arrays of two outputs that differ (dtype, shape or bits)."""
    a, b = np.load(a_path), np.load(b_path)
    if sorted(a) != sorted(b):
        raise SystemExit(f"other arrays: {sorted(set(a) ^ set(b))}")
    same = lambda k: a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k], equal_nan=True)  # noqa: E731
    print(f"{len(a)} arrays; different: {[k for k in a if not same(k)]}")


def scores(Y, split) -> dict:
    """The scores of compare, a report and ``bernmf fit`` / ``tune`` (their CLI summaries) on
    Y with a tenth of its entries missing: what a change to where Y is checked must keep."""
    import json
    import tempfile
    import warnings
    from pathlib import Path

    import pandas as pd

    from bernmf.cli.parser import main
    from bernmf.studies.report import run as report

    Y = np.where(np.random.default_rng(1).random(Y.shape) < 0.1, np.nan, Y)
    parts = {"train": split.train, "test": split.test, "validation": split.validation}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        made = bernmf.compare(Y, ["mm", "em"], [2, 3], seeds=[0, 1], progress=False, **parts)
        ran = report.run({"Y": Y}, ["mm", "em"], ranks=(2, 3), shared_rank=3, priors=(1.0, 1.5),
                         seeds=range(2), restarts=2, progress=False)  # fmt: skip
        with tempfile.TemporaryDirectory() as folder:
            folder = Path(folder)
            pd.DataFrame(Y).to_csv(folder / "y.csv", index=False, header=False, na_rep="NA")
            for name, mask in (("m", ~split.validation), ("v", split.validation)):
                np.savetxt(folder / f"{name}.csv", mask.astype(int), fmt="%d", delimiter=",")
            data = [str(folder / "y.csv"), "--quiet"]
            main(["fit", *data, "--rank", "2", "--mask", str(folder / "m.csv"), "--validation",
                  str(folder / "v.csv"), "--out", str(folder / "a")])  # fmt: skip
            main(["fit", *data, "--budget", "3", "--out", str(folder / "b")])
            main(["tune", *data, "--ranks", "2", "--out", str(folder / "c")])
            read = [json.loads((folder / f"{o}/summary.json").read_text()) for o in "abc"]
    return {
        "compare/perplexity": made.fits["perplexity"].to_numpy(float),
        "report/perplexity": ran.fits["perplexity"].to_numpy(float),
        "report/data": ran.data[["missing", "density"]].to_numpy(float),
        "cli/fit": np.array([read[0]["train_perplexity"], read[0]["validation_perplexity"]]),
        "cli/search": np.array([read[1]["train_perplexity"]]),
        "cli/tune": np.array([read[2]["best"]["test_perplexity"]]),
    }


if sys.argv[1] == "--compare":
    compare(*sys.argv[2:4])
    raise SystemExit

Y, _, _ = bernmf.simulate(3, 40, 30, 3, bernmf.Prior(0.6, 0.6))
split = random_split(Y.shape, seed=1)
tr, va = split.train, split.validation
quiet = {"progress": False}
chains = {"num_warmup": 20, "num_samples": 10, **quiet}
fits = {
    "mm": bernmf.fit(Y, "mm", 3, mask=tr, seed=2),
    "mm_sparse": bernmf.fit(Y, "mm", 3, mask=tr, seed=2, layout="sparse"),
    "mm_mean": bernmf.fit(Y, "mm", 3, mask=tr, seed=2, restarts=3, combine="mean"),
    "mm_stack": bernmf.fit(Y, "mm", 3, mask=tr, seed=2, restarts=3, combine="stack", validation=va),
    "em": bernmf.fit(Y, "em", 3, mask=tr, seed=2),
    "logsvd": bernmf.fit(Y, "logsvd", 3, mask=tr, seed=2),
    "logpca": bernmf.fit(Y, "logpca", 3, mask=tr, seed=2),
    "nuts": bernmf.fit(
        Y, "nuts", 3, mask=tr, seed=2, num_warmup=20, num_samples=10, num_chains=2, **quiet
    ),
    "gibbs": bernmf.fit(
        Y, "gibbs", 3, mask=tr, seed=2, num_warmup=20, num_samples=10, num_chains=2, **quiet
    ),
    "gibbs_chains": bernmf.fit(
        Y,
        "gibbs",
        3,
        mask=tr,
        seed=2,
        num_warmup=20,
        num_samples=10,
        restarts=2,
        combine="mean",
        **quiet,
    ),
    "vb": bernmf.fit(Y, "vb", 3, mask=tr, seed=2),
    "svi": bernmf.fit(Y, "svi", 3, mask=tr, seed=2, steps=200, **quiet),
}
fits["stack"] = bernmf.stack([fits["mm"], fits["logsvd"], fits["em"]], Y, validation=va, mask=tr)
fits["stack_refit"] = bernmf.stack(
    [fits["mm"], fits["logsvd"]], Y, validation=va, mask=tr, refit=True
)
fits["search"] = bernmf.fit(Y, mask=tr, budget=3, **quiet)  # the default: a stack, refit
arrays = {}
for name, f in fits.items():
    for field in ("W", "H", "trace", "probs"):
        arrays[f"{name}/{field}"] = np.asarray(getattr(f, field))
    for k, v in f.draws.items():
        arrays[f"{name}/draws/{k}"] = np.asarray(v)
arrays.update(scores(Y, split))
np.savez(sys.argv[1], **arrays)
print(len(arrays), "arrays")
