"""What one MM sweep costs inside the accelerated loop against plain MM's, on one core.

On lastfm's paper split at K = 16 (``--data-dir``), in both layouts of the observed ones,
the compiled programs of ``bernmf.inference.mm.kernel.solve`` run from the same start
with ``tol=0``: plain MM (``accelerate=False``, ``--sweeps`` sweeps) and accelerated MM
(``accelerate=True``, a third as many iterations, three sweeps each plus one). For each
the table gives CPU milliseconds per sweep (best of ``--repeats`` interleaved runs of
this pinned process), the ratio accelerated / plain, and the bytes of temporaries XLA
assigned to the program (``memory_analysis``), in (M, N) float64 arrays. Compilation is
not timed. The ratio is measured in one process, so it holds under machine load; the
milliseconds do not.

Run: ``.venv/bin/python benchmarks/mm_sweep_cost.py --data-dir ../shared/data``
(``PYTHONPATH`` set to another checkout measures that revision's kernel the same way).
"""

from __future__ import annotations

import single_core

single_core.pin()

import argparse  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from bernmf.data import datasets  # noqa: E402
from bernmf.data.observed import as_observed  # noqa: E402
from bernmf.data.split import paper_split  # noqa: E402
from bernmf.inference.mm import kernel  # noqa: E402
from bernmf.inference.mm import layout as layouts  # noqa: E402
from bernmf.models.spec import Factors, Prior  # noqa: E402

RANK = 16
PRIOR = (1.8, 3.0, 1.0)  # benchmarks/accelerate.py's lastfm prior at K = 16


def programs(observed, sparse: bool, sweeps: int, init: Factors, prior: Prior) -> dict:
    """``{name: (compiled program, its arguments, its sweeps)}``, plain and accelerated MM."""
    data = layouts.make_data(observed, np.float64, layouts.Choice(None, sparse, None))
    solve = jax.jit(kernel.solve, static_argnames=("max_iter", "accelerate"))
    made = {}
    runs = [("plain", False, sweeps), ("accelerated", True, sweeps // 3)]
    for name, accelerate, iterations in runs:
        args = (init, data, prior, 0.0)
        lowered = solve.lower(*args, max_iter=iterations, accelerate=accelerate)
        count = kernel.sweeps(iterations, accelerate)
        made[name] = (lowered.compile(), args, count)
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True, help="folder with lastfm.csv")
    parser.add_argument("--sweeps", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    print(single_core.describe())
    print(f"bernmf from {os.path.dirname(kernel.__file__)}")
    jax.config.update("jax_enable_x64", True)
    Y = datasets.load("lastfm", data_dir=args.data_dir, download=False).to_numpy()
    train = paper_split(Y.shape).train
    observed = as_observed(Y.astype(float), mask=train)
    rng = np.random.default_rng(2)
    W, H = rng.random((Y.shape[0], RANK)), rng.random((RANK, Y.shape[1]))
    init = Factors(jnp.asarray(W / W.sum(axis=1, keepdims=True)), jnp.asarray(H))
    prior = Prior(*(jnp.full(RANK, value, jnp.float64) for value in PRIOR))
    table = {
        layout: programs(observed, layout == "sparse", args.sweeps, init, prior)
        for layout in ("dense", "sparse")
    }
    best = {(layout, name): np.inf for layout, made in table.items() for name in made}
    for _ in range(args.repeats):  # interleaved, so all see the same machine load
        for (layout, name), seconds in best.items():
            program, arguments, count = table[layout][name]
            begin = time.process_time()
            jax.block_until_ready(program(*arguments))
            best[layout, name] = min(seconds, (time.process_time() - begin) / count)
    array_bytes = Y.size * 8
    rows = []
    for layout, made in table.items():
        row = {"layout": layout}
        for name, (program, _, _) in made.items():
            row[f"{name} ms/sweep"] = 1e3 * best[layout, name]
            temporaries = program.memory_analysis().temp_size_in_bytes
            row[f"{name} temporaries, (M, N) arrays"] = temporaries / array_bytes
        row["accelerated / plain per sweep"] = best[layout, "accelerated"] / best[layout, "plain"]
        rows.append(row)
    print(pd.DataFrame(rows).to_string(index=False, float_format="%.2f"))
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
