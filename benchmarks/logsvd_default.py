"""Which ``svd`` mode ``logsvd`` should default to: seconds and perplexity of both, one core.

Each of the paper's datasets (animals 50 x 85, paleo 253 x 902, lastfm 1226 x 285) is
fitted on its training entries (:func:`bernmf.data.split.paper_split`) with ``logsvd`` at
each ``--ranks`` rank, default stopping rule (R's ``tol``, ``max_iter``), once with
``svd="exact"`` (R's iterates) and once with ``svd="subspace"`` (one warm-started block
Krylov step per iteration). Printed per fit: run seconds (compilation excluded; each
program is compiled by a first fit, not timed), iterations, the final training loss
and the validation and test perplexity (nats per entry), then the ratio of the run
times, exact / subspace, and the largest perplexity difference. Everything in this
process, pinned to one core with one BLAS / XLA thread (``single_core.pin``).

Run: ``.venv/bin/python benchmarks/logsvd_default.py [--ranks 2 4 8] [--datasets ...]``
"""

from __future__ import annotations

import single_core

single_core.pin()

import argparse  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

import bernmf  # noqa: E402
import bernmf.data.datasets  # noqa: E402
from bernmf.data.split import paper_split  # noqa: E402

MODES = ("exact", "subspace")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["animals", "paleo", "lastfm"])
    parser.add_argument("--ranks", nargs="+", type=int, default=[2, 4, 8])
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    print(single_core.describe())
    print(f"load average {os.getloadavg()}")
    totals = dict.fromkeys(MODES, 0.0)
    worst = 0.0
    for name in args.datasets:
        Y = bernmf.data.datasets.load(name, args.data_dir).to_numpy(dtype=float)
        split = paper_split(Y.shape)
        for rank in args.ranks:
            results = {}
            for mode in MODES:
                bernmf.fit(Y, "logsvd", rank, mask=split.train, svd=mode, tol=1e300)  # compiles
                begin = time.process_time()
                fit = bernmf.fit(Y, "logsvd", rank, mask=split.train, svd=mode)
                cpu = time.process_time() - begin
                results[mode] = fit
                totals[mode] += fit.timings["run"]
                print(
                    f"{name:8s} K={rank} {mode:9s} run {fit.timings['run']:7.2f} s "
                    f"(CPU {cpu:7.2f} s), {fit.n_iter:5d} iterations, loss {fit.trace[-1]:.8f}, "
                    f"validation {fit.perplexity(Y, split.validation):.6f}, "
                    f"test {fit.perplexity(Y, split.test):.6f}, converged {fit.converged}"
                )
            gap = abs(
                results["exact"].perplexity(Y, split.test)
                - results["subspace"].perplexity(Y, split.test)
            )
            worst = max(worst, gap)
            ratio = results["exact"].timings["run"] / results["subspace"].timings["run"]
            print(f"{'':8s} K={rank} exact / subspace run time {ratio:.2f}x, test gap {gap:.2e}")
    print(
        f"all fits: exact {totals['exact']:.1f} s, subspace {totals['subspace']:.1f} s "
        f"({totals['exact'] / totals['subspace']:.2f}x); largest test perplexity gap {worst:.2e}"
    )


if __name__ == "__main__":
    main()
