"""Milliseconds per MM iteration: bernmf's compiled loop against plain numpy, on one core.

Everything runs in this process, pinned to one CPU core with one BLAS / XLA thread, on
the same simulated data (and on the real lastfm with ``--data-dir``); the table gives
ms per iteration and the ratios. Three numpy iterations are timed, all in float64:

* ``numpy``: the update of DESIGN.md written directly (H step, W step and the
  objective that the stopping rule needs, each iteration);
* ``published``: the iteration of the paper's published numpy code, written again
  here from its update equations, defects included (held-out entries count as zeros
  in the H step, W divided by N, ``1 - W @ H``, ``eps`` added inside every ratio and
  log, the loss recomputed each iteration): seven matrix products per iteration.

bernmf runs plain sweeps (``accelerate=False``), so one iteration is one sweep on
every side, in float64 (the default) and in float32. With ``--data-dir`` the script
then times, on lastfm's paper split at K = 16, numpy's plain MM to its stop (relative
change < 1e-5) against bernmf's accelerated MM to the same objective, from the same
starts (:func:`to_plain_stop`, in float64 and with the default ``dtype="auto"``;
``benchmarks/accelerate.py`` compares bernmf's plain and accelerated MM on all three
datasets). ``--tolerance-only`` runs that comparison alone.

Run: ``.venv/bin/python benchmarks/mm_speed.py [--iterations 100] [--data-dir ../shared/data]
[--tolerance-seeds 3] [--out results/mm_speed]``
"""

from __future__ import annotations

import single_core

single_core.pin()

import argparse  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import bernmf  # noqa: E402
from bernmf.data import datasets  # noqa: E402
from bernmf.data.split import paper_split  # noqa: E402

CASES = [(1226, 285, 4), (1226, 285, 8), (1226, 285, 16), (3000, 3000, 16)]
PRIOR = bernmf.Prior(alpha=1.2, beta=1.5, gamma=1.0)
TOLERANCE_PRIOR = bernmf.Prior(alpha=1.8, beta=3.0, gamma=1.0)  # accelerate.py's, at K = 16
TOLERANCE_MAX_ITER = 20_000


def numpy_iteration(Y1, Y0, n_obs, W, H, alpha, beta, gamma):
    """One MM iteration and its objective, in plain numpy (float64)."""
    K = W.shape[1]
    Yh, Yh0 = W @ H, W @ (1 - H)
    C = H * (W.T @ (Y1 / Yh)) + (alpha - 1)
    D = (1 - H) * (W.T @ (Y0 / Yh0)) + (beta - 1)
    H = C / (C + D)
    Yh, Yh0 = W @ H, W @ (1 - H)
    S = W * ((Y1 / Yh) @ H.T + (Y0 / Yh0) @ (1 - H).T)
    W = (S + gamma - 1) / (n_obs[:, None] + K * (gamma - 1))
    return W, H, numpy_objective(Y1, Y0, W, H, alpha, beta, gamma)


def numpy_objective(Y1, Y0, W, H, alpha, beta, gamma):
    """The MM objective (negative log-posterior, unnormalized) in plain numpy."""
    Yh, Yh0 = W @ H, W @ (1 - H)
    return -(
        np.sum(Y1 * np.log(Yh) + Y0 * np.log(Yh0))
        + np.sum((alpha - 1) * np.log(H) + (beta - 1) * np.log1p(-H))
        + np.sum((gamma - 1) * np.log(W))
    )


def published_iteration(Y1, mask, n_total, W, H, alpha, beta, eps=1e-8):
    """One iteration of the paper's published code and its loss, in plain numpy."""
    N = H.shape[1]
    P = W @ H
    C = H * (W.T @ (Y1 / (P + eps))) + (alpha - 1)
    D = (1 - H) * (W.T @ ((1 - Y1) / (1 - P + eps))) + (beta - 1)
    H = C / (C + D)
    P = W @ H
    Y0 = (1 - Y1) * mask
    W = W * ((Y1 / (P + eps)) @ H.T + (Y0 / (1 - P + eps)) @ (1 - H).T) / N
    P = W @ H
    log_lik = Y1 * np.log(P + eps) + (1 - Y1) * np.log(1 - P + eps)
    log_prior = (alpha - 1) * np.log(H + eps) + (beta - 1) * np.log(1 - H + eps)
    loss = -(np.sum(mask * log_lik) + np.sum(log_prior)) / n_total
    return W, H, loss


def time_numpy(Y, mask, K, iterations, *, published=False):
    rng = np.random.default_rng(0)
    W = rng.random((Y.shape[0], K))
    W /= W.sum(axis=1, keepdims=True)
    H = rng.random((K, Y.shape[1]))
    Y1, Y0, n_obs = Y * mask, (1 - Y) * mask, mask.sum(axis=1).astype(float)
    weights = mask.astype(float)
    start = time.perf_counter()
    for _ in range(iterations):
        if published:
            W, H, _ = published_iteration(Y1, weights, n_obs.sum(), W, H, PRIOR.alpha, PRIOR.beta)
        else:
            W, H, _ = numpy_iteration(Y1, Y0, n_obs, W, H, *PRIOR)
    return (time.perf_counter() - start) / iterations


def time_bernmf(Y, mask, K, iterations, dtype="float64"):
    result = bernmf.fit(
        Y,
        "mm",
        K,
        mask=mask,
        prior=PRIOR,
        max_iter=iterations,
        tol=0,
        seed=1,
        accelerate=False,
        dtype=dtype,
    )
    assert result.n_iter == iterations
    return result.timings["run"] / iterations


TIMERS = {
    "bernmf float64": time_bernmf,
    "bernmf float32": lambda Y, mask, K, n: time_bernmf(Y, mask, K, n, dtype="float32"),
    "numpy": time_numpy,
    "published": lambda Y, mask, K, n: time_numpy(Y, mask, K, n, published=True),
}
RATIOS = {
    "numpy / bernmf float64": ("numpy", "bernmf float64"),
    "published / bernmf float64": ("published", "bernmf float64"),
    "published / bernmf float32": ("published", "bernmf float32"),
}


def numpy_to_stop(Y1, Y0, n_obs, W, H, prior, tol, max_iter):
    """numpy's plain MM from (W, H) until the objective's relative change is < tol (bernmf's
    stopping rule) or ``max_iter`` iterations: ``(objective, iterations)``."""
    alpha, beta, gamma = prior
    previous, iterations = numpy_objective(Y1, Y0, W, H, alpha, beta, gamma), 0
    while iterations < max_iter:
        W, H, value = numpy_iteration(Y1, Y0, n_obs, W, H, alpha, beta, gamma)
        iterations += 1
        if abs(previous - value) / abs(previous) < tol:
            break
        previous = value
    return value, iterations


def best_cpu(runs: dict, repeats: int) -> dict:
    """The least CPU seconds of each of ``runs`` (name: callable) over ``repeats`` rounds,
    the runs interleaved so that all see the same machine load."""
    best = dict.fromkeys(runs, np.inf)
    for _ in range(repeats):
        for name, run in runs.items():
            begin = time.process_time()
            run()
            best[name] = min(best[name], time.process_time() - begin)
    return best


NUMPY_CHUNK = 100
"""numpy iterations per round of the best-of timing (:func:`to_plain_stop`)."""


def to_plain_stop(Y, train, K, prior, seed, tol=1e-5, repeats=3):
    """Seconds to the objective at which plain MM stops: numpy's plain loop, bernmf accelerated.

    All start from the same random factors. numpy iterates :func:`numpy_iteration`
    until the relative change of the objective is below ``tol`` (bernmf's stopping
    rule); bernmf's accelerated MM then runs just enough iterations to reach that
    objective (found from a longer run's trace), timed on its own (wall and CPU seconds,
    the second run of that program: compilation excluded): in float64
    (``dtype="float64"``, the default until 2026-11) and with the default
    ``dtype="auto"`` (float32 iterations, float64 once float32 stalls). The default fit
    (``auto``, to its own stop) is timed too, with its final objective. bernmf's plain
    MM from the same start is run too: it should stop after as many iterations as
    numpy's (the same iterates, to rounding).

    Each of those timings is one run, and on a shared machine a burst of load in one of
    them moves the ratio by 2x. So the ratios are also given from CPU times taken as the
    best of ``repeats`` interleaved rounds ("best CPU ratio"): each round times
    :data:`NUMPY_CHUNK` numpy iterations from the same start (numpy's time to its stop is
    its iterations times the best time per iteration; an iteration costs the same all
    along) and each of bernmf's runs again.
    """
    M, N = Y.shape
    rng = np.random.default_rng(seed)
    W, H = rng.random((M, K)), rng.random((K, N))
    W /= W.sum(axis=1, keepdims=True)
    init = (W, H)
    floats = tuple(float(value) for value in prior)
    Y1, Y0 = Y * train, (1 - Y) * train
    n_obs = train.sum(axis=1).astype(float)
    begin, cpu = time.perf_counter(), time.process_time()
    value, iterations = numpy_to_stop(Y1, Y0, n_obs, W, H, floats, tol, TOLERANCE_MAX_ITER)
    numpy_seconds, numpy_cpu = time.perf_counter() - begin, time.process_time() - cpu
    options = {"mask": train, "prior": prior, "init": init}
    plain = bernmf.fit(Y, "mm", K, accelerate=False, max_iter=TOLERANCE_MAX_ITER, **options)
    row = {"seed": seed, "numpy plain iterations": iterations}
    row |= {"bernmf plain iterations": plain.n_iter, "numpy objective": value}
    runs = {"numpy": lambda: numpy_to_stop(Y1, Y0, n_obs, *init, floats, -1.0, NUMPY_CHUNK)}
    for dtype in ("float64", "auto"):
        longer = bernmf.fit(Y, "mm", K, tol=0, max_iter=500, dtype=dtype, **options)
        steps = max(int(np.flatnonzero(longer.trace <= value)[0]), 1)
        fixed = {"tol": 0, "max_iter": steps, "dtype": dtype, **options}
        bernmf.fit(Y, "mm", K, **fixed)  # compiles
        cpu = time.process_time()
        fast = bernmf.fit(Y, "mm", K, **fixed)
        row |= {f"{dtype} iterations": fast.n_iter, f"{dtype} s": fast.timings["run"]}
        row[f"{dtype} CPU s"] = time.process_time() - cpu
        runs[dtype] = lambda fixed=fixed: bernmf.fit(Y, "mm", K, **fixed)
    bernmf.fit(Y, "mm", K, **options)  # compiles
    cpu = time.process_time()
    default = bernmf.fit(Y, "mm", K, **options)
    row["default fit s"] = default.timings["run"]
    row["default fit CPU s"] = time.process_time() - cpu
    runs["default fit"] = lambda: bernmf.fit(Y, "mm", K, **options)
    row |= {"default objective": default.objective, "numpy s": numpy_seconds}
    row["numpy CPU s"] = numpy_cpu
    for name in TO_STOP:
        row[f"numpy s / {name} s"] = numpy_seconds / row[f"{name} s"]
        row[f"CPU ratio {name}"] = numpy_cpu / row[f"{name} CPU s"]
    best = best_cpu(runs, repeats)
    row["numpy best CPU s"] = best["numpy"] * iterations / NUMPY_CHUNK
    for name in TO_STOP:
        row[f"{name} best CPU s"] = best[name]
        row[f"best CPU ratio {name}"] = row["numpy best CPU s"] / best[name]
    return row


TO_STOP = ("float64", "auto", "default fit")
"""bernmf's timings to numpy's stop: float64 and auto to its objective, the default fit to
its own stop (at a lower objective)."""


def tolerance_study(data_dir, seeds, out: Path) -> None:
    """:func:`to_plain_stop` on lastfm's paper split, K = 16; prints, writes CSV and PNG."""
    Y = datasets.load("lastfm", data_dir=data_dir, download=False).to_numpy().astype(float)
    train = paper_split(Y.shape).train
    table = pd.DataFrame([to_plain_stop(Y, train, 16, TOLERANCE_PRIOR, s) for s in seeds])
    print("\nTo the objective where plain MM stops (tol 1e-5), lastfm K = 16, paper split:")
    print(table.to_string(index=False, float_format="%.4g"))
    ratios = {
        c: table[c].min() for c in table if c.startswith(("numpy s /", "CPU ratio", "best CPU"))
    }
    print("lowest ratio over seeds: " + ", ".join(f"{k} {v:.1f}" for k, v in ratios.items()))
    print(f"  [target: auto >= 30; load average {os.getloadavg()}; CPU s: this process's]")
    table.to_csv(out / "mm_to_tolerance.csv", index=False)
    figure, axis = plt.subplots(figsize=(5, 3.2))
    x = np.arange(len(table))
    for i, (column, label) in enumerate(
        [("numpy s", "numpy, plain MM"), ("float64 s", "bernmf float64"), ("auto s", "bernmf auto")]
    ):
        axis.bar(x + 0.27 * (i - 1), table[column], 0.27, label=label)
    axis.set(xticks=x, xticklabels=[f"seed {s}" for s in table["seed"]], yscale="log")
    axis.set(ylabel="seconds to plain MM's stop (1 core)", title="lastfm, K = 16")
    axis.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(out / "mm_to_tolerance.png", dpi=120)


def cases(data_dir):
    """``(label, Y, mask, K)``: simulated data, then the real lastfm when data_dir is given."""
    mask_rng = np.random.default_rng(0)
    for M, N, K in CASES:
        Y, _, _ = bernmf.simulate(0, M, N, K, bernmf.Prior(0.3, 3.0, 0.5))
        yield f"simulated {M}x{N}", Y, mask_rng.random(Y.shape) < 0.85, K
    if data_dir is not None:
        Y = datasets.load("lastfm", data_dir=data_dir, download=False).to_numpy()
        yield "lastfm 1226x285", Y, mask_rng.random(Y.shape) < 0.85, 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5, help="best of this many timings")
    parser.add_argument("--data-dir", default=None, help="folder with lastfm.csv: time it too")
    parser.add_argument("--out", type=Path, default=Path("results/mm_speed"))
    parser.add_argument(
        "--tolerance-seeds",
        type=int,
        default=3,
        help="with --data-dir: starts for the time to plain MM's stop on lastfm (0: skip)",
    )
    parser.add_argument("--tolerance-only", action="store_true", help="skip the per-sweep table")
    args = parser.parse_args()
    print(single_core.describe())
    if args.tolerance_only:
        args.out.mkdir(parents=True, exist_ok=True)
        tolerance_study(args.data_dir, range(args.tolerance_seeds), args.out)
        return
    rows = []
    for label, Y, mask, K in cases(args.data_dir):
        iterations = max(5, args.iterations * 350_000 // Y.size)
        for dtype in ("float64", "float32"):
            time_bernmf(Y, mask, K, iterations, dtype)  # compile once
        best = dict.fromkeys(TIMERS, np.inf)
        for _ in range(args.repeats):  # interleaved, so all see the same machine load
            for name, timer in TIMERS.items():
                best[name] = min(best[name], timer(Y, mask, K, iterations))
        row = {"data": label, "K": K, "iterations timed": iterations}
        row |= {f"{name} ms/iter": 1e3 * seconds for name, seconds in best.items()}
        row |= {ratio: best[top] / best[bottom] for ratio, (top, bottom) in RATIOS.items()}
        rows.append(row)
        print(pd.DataFrame(rows[-1:]).to_string(index=False, float_format="%.2f"), flush=True)
    table = pd.DataFrame(rows)
    print("\n" + table.to_string(index=False, float_format="%.2f"))
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "mm_speed.csv", index=False)
    figure, axis = plt.subplots(figsize=(7.5, 3.8))
    x = np.arange(len(table))
    width = 0.8 / len(TIMERS)
    for i, name in enumerate(TIMERS):
        axis.bar(x + (i - 1.5) * width, table[f"{name} ms/iter"], width, label=name)
    labels = [f"{r.data}\nK={r.K}".replace(" ", "\n", 1) for r in table.itertuples()]
    axis.set(xticks=x, xticklabels=labels, ylabel="ms per MM iteration (1 core)", yscale="log")
    axis.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(args.out / "mm_speed.png", dpi=120)
    print(f"wrote {args.out / 'mm_speed.csv'} and {args.out / 'mm_speed.png'}")
    if args.data_dir is not None and args.tolerance_seeds > 0:
        tolerance_study(args.data_dir, range(args.tolerance_seeds), args.out)
        print(f"wrote {args.out / 'mm_to_tolerance.csv'} and {args.out / 'mm_to_tolerance.png'}")


if __name__ == "__main__":
    main()
