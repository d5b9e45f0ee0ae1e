"""Where mixed precision pays: compile + run of MM's float64 and ``dtype="auto"`` fits, by size.

``dtype="auto"`` (float32 sweeps polished in float64: "mixed" below) makes sweeps of up to
half the cost of ``dtype="float64"``'s, but its program holds two loops, so it compiles
longer, and its path (so its iterations to the stop, and where it stops) differs. This
script times both for the default fit otherwise (``bernmf.fit(Y, "mm", K, dtype=...)``,
flat prior, tol 1e-5), in one process pinned to one core (``single_core.pin``), on
simulated matrices of growing size and on the three data sets' paper splits (train
entries observed), in CPU seconds of this process (the machine is shared; wall seconds
mean little):

* ``compile cold``: the first fit of that program (seed 1), with an empty persistent
  compilation cache, less its run;
* ``compile warm``: the fit again after clearing the in-memory caches
  (``jax.clear_caches``), so its program is traced, lowered and loaded from the
  persistent cache, as in a second process, less its run;
* ``run``: the mean over ``--seeds`` fits (seeds 1, 2, ...) of the compiled program.

For each case it prints the total (compile + run) of each precision, cold and warm, their
ratio (mixed / float64 < 1: mixed wins) and ``M * N * K`` (the work of a sweep). The
objectives are compared too, seed by seed: the mixed fit's relative difference from the
float64 fit's (mean and largest), beside the same for float64 fits from starts about 1e-7
apart (the same random start rounded to float32: "control") and the spread (standard
deviation / mean) of the float64 fits' objectives over the seeds.

Run: ``.venv/bin/python benchmarks/mm_auto.py [--data-dir ../shared/data] [--quick]``
"""

from __future__ import annotations

import single_core

single_core.pin()

import argparse  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

os.environ["BERNMF_COMPILE_CACHE"] = tempfile.mkdtemp(prefix="mm_auto_cache_")

import jax  # noqa: E402
import numpy as np  # noqa: E402

import bernmf  # noqa: E402
from bernmf.data import datasets  # noqa: E402
from bernmf.data.split import paper_split  # noqa: E402
from bernmf.inference import _compile  # noqa: E402
from bernmf.inference.mm import random_init  # noqa: E402
from bernmf.models.spec import ZeroProbabilityWarning  # noqa: E402

SIMULATED = [(300, 100, 8), (1226, 285, 8), (1226, 285, 16), (2000, 1000, 8), (3000, 2000, 8)]
DATASETS = [("animals", 4), ("paleo", 8), ("lastfm", 8), ("lastfm", 16)]


def cpu_seconds(function) -> tuple[float, object]:
    begin = time.process_time()
    result = function()
    return time.process_time() - begin, result


def forget_compiled() -> None:
    """Drop every compiled program held in memory (the persistent cache stays)."""
    jax.clear_caches()
    _compile._CACHE.clear()


def time_precision(Y, mask, K, dtype, seeds) -> dict:
    """CPU seconds of the default fit at ``dtype``: its compile, cold and warm, and its run
    (mean over ``seeds``); its iterations and objectives (one per seed)."""

    def fit(seed):
        return bernmf.fit(Y, "mm", K, mask=mask, seed=seed, dtype=dtype)

    cold, _ = cpu_seconds(lambda: fit(seeds[0]))
    forget_compiled()
    warm, _ = cpu_seconds(lambda: fit(seeds[0]))
    runs = [cpu_seconds(lambda s=s: fit(s)) for s in seeds]  # the first: the run alone
    run = float(np.mean([seconds for seconds, _ in runs]))
    return {
        "compile cold": cold - runs[0][0],
        "compile warm": warm - runs[0][0],
        "run": run,
        "iterations": float(np.mean([f.n_iter for _, f in runs])),
        "objectives": np.array([f.objective for _, f in runs]),
    }


def perturbed_start(M, N, K, seed) -> tuple[np.ndarray, np.ndarray]:
    """The fit's random start at ``seed`` rounded to float32, W back on the simplex."""
    with jax.enable_x64(True):
        W, H = (np.asarray(a) for a in random_init(jax.random.key(seed), M, N, K, np.float64))
    W, H = W.astype(np.float32).astype(float), H.astype(np.float32).astype(float)
    return W / W.sum(axis=1, keepdims=True), H


def case(label, Y, mask, K, seeds) -> dict:
    M, N = Y.shape
    row = {"case": label, "size": M * N * K}
    for dtype, option in (("float64", "float64"), ("mixed", "auto")):
        row[dtype] = time_precision(Y, mask, K, option, seeds)
    control = np.array(
        [
            bernmf.fit(Y, "mm", K, mask=mask, init=perturbed_start(M, N, K, s)).objective
            for s in seeds
        ]
    )
    reference = row["float64"]["objectives"]
    for name, objectives in (("mixed", row["mixed"]["objectives"]), ("control", control)):
        difference = (objectives - reference) / np.abs(reference)
        row[f"{name} mean"], row[f"{name} max"] = difference.mean(), np.abs(difference).max()
    row["spread"] = reference.std() / abs(reference.mean())
    for cache in ("cold", "warm"):
        total = {d: row[d][f"compile {cache}"] + row[d]["run"] for d in ("float64", "mixed")}
        row[f"ratio {cache}"] = total["mixed"] / total["float64"]
    return row


def cases(data_dir, quick: bool):
    for M, N, K in SIMULATED[:3] if quick else SIMULATED:
        Y, _, _ = bernmf.simulate(0, M, N, K, bernmf.Prior(0.3, 3.0, 0.5))
        yield f"simulated {M}x{N} K={K}", np.asarray(Y), None, K
    if data_dir is not None:
        for name, K in DATASETS:
            Y = datasets.load(name, data_dir=data_dir, download=False).to_numpy()
            yield f"{name} K={K}", Y, paper_split(Y.shape).train, K


def show(row: dict) -> None:
    parts = []
    for dtype in ("float64", "mixed"):
        r = row[dtype]
        parts.append(
            f"{dtype}: run {r['run']:6.2f} ({r['iterations']:5.1f} it.), compile cold "
            f"{r['compile cold']:5.2f} / warm {r['compile warm']:4.2f}"
        )
    print(
        f"{row['case']:<28} MNK {row['size']:9.2e} | {' | '.join(parts)} | mixed / float64 "
        f"total: cold {row['ratio cold']:.2f}, warm {row['ratio warm']:.2f} | objective vs "
        f"float64, mean (max |.|): mixed {row['mixed mean']:+.1e} ({row['mixed max']:.1e}), "
        f"control {row['control mean']:+.1e} ({row['control max']:.1e}); seeds' spread "
        f"{row['spread']:.1e}",
        flush=True,
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None, help="folder with the data sets' CSVs")
    parser.add_argument("--quick", action="store_true", help="the three smallest sizes only")
    parser.add_argument("--seeds", type=int, default=3, help="fits per precision (seeds 1..)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", ZeroProbabilityWarning)  # flat prior: H at 0 or 1
    print(single_core.describe())
    print(f"load average {os.getloadavg()}; CPU seconds of this process")
    rows = []
    for c in cases(args.data_dir, args.quick):
        rows.append(case(*c, range(1, args.seeds + 1)))
        show(rows[-1])
    for cache in ("cold", "warm"):
        wins = [r["size"] for r in rows if r[f"ratio {cache}"] < 1]
        losses = [r["size"] for r in rows if r[f"ratio {cache}"] >= 1]
        print(f"{cache} cache: mixed wins at MNK {sorted(wins)}, loses at {sorted(losses)}")
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
