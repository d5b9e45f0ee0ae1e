"""GPU figures for docs/speed.md, each beside the same call on the same machine's CPUs.

One prepared run on a machine with a GPU (nothing in bernmf depends on one). In one
process, every case runs on the GPU (JAX's default device there) and on the host's
CPUs (``devices=jax.devices("cpu")`` for MM, ``jax.default_device`` for NUTS), the
first call of each compiling and the second one timed (``timings["run"]``):

* ``sweep``: plain MM sweeps (``accelerate=False``, ``tol=0``) on lastfm's paper
  split at K = 16, float64 and float32, milliseconds per sweep;
* ``large``: plain sweeps on a simulated 5000 x 5000 matrix with 0.1% ones, K = 8;
* ``ensemble``: 100 MM members of lastfm at K = 8 in one compiled call (200 sweeps
  each, ``combine="mean"``), seconds for the whole ensemble;
* ``nuts``: NUTS on animals at K = 4, 2 chains of 300 + 300 draws, median bulk ESS
  of WH per second of sampling (:func:`bernmf.diagnostics`).

Writes ``OUT/device.csv`` and ``OUT/device.md`` (the table for docs/speed.md) and
prints them. ``--small`` shrinks every case, to check the script on a CPU-only machine.

Run: ``python benchmarks/device.py --data-dir DIR --out OUT [--small]``
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import warnings
from pathlib import Path

import jax
import numpy as np
import pandas as pd

import bernmf
from bernmf.data import datasets
from bernmf.data.split import paper_split


def timed_fit(Y, engine, rank, **options):
    """Fit twice (compile, then run) and return the second fit."""
    bernmf.fit(Y, engine, rank, **options)
    return bernmf.fit(Y, engine, rank, **options)


def mm_cases(lastfm, small: bool):
    """Rows of the MM cases: (case, dtype, work, device kind) -> seconds, per unit."""
    train = paper_split(lastfm.shape).train
    sweeps = 20 if small else 200
    size = 300 if small else 5000
    rng = np.random.default_rng(0)
    large = (rng.random((size, size)) < 0.001).astype(float)
    kinds = {"gpu": None, "cpu": jax.devices("cpu")}
    if not any(d.platform == "gpu" for d in jax.devices()):
        kinds = {"cpu": jax.devices("cpu")}
    rows = []
    for kind, devices in kinds.items():
        plain = {"accelerate": False, "tol": 0.0, "devices": devices}
        for dtype in ("float64", "float32"):
            fit = timed_fit(lastfm, "mm", 16, mask=train, max_iter=sweeps, dtype=dtype, **plain)
            rows.append(("sweep lastfm K=16", dtype, kind, fit.timings["run"] / sweeps * 1e3, "ms"))
            print(rows[-1], flush=True)
            fit = timed_fit(large, "mm", 8, max_iter=sweeps // 4, dtype=dtype, **plain)
            seconds = fit.timings["run"] / (sweeps // 4) * 1e3
            rows.append((f"sweep {size}x{size} 0.1% K=8", dtype, kind, seconds, "ms"))
            print(rows[-1], flush=True)
        members = 10 if small else 100
        fit = timed_fit(
            lastfm, "mm", 8, mask=train, max_iter=sweeps, restarts=members, combine="mean", **plain
        )
        name = f"{members} members x {sweeps} sweeps, lastfm K=8"
        rows.append((name, "float64", kind, fit.timings["run"], "s"))
        print(rows[-1], flush=True)
    return rows


def nuts_case(animals, small: bool):
    """Median bulk ESS of WH per second of sampling, on each device kind."""
    train = paper_split(animals.shape).train
    draws = 50 if small else 300
    options = {"mask": train, "num_chains": 2, "num_warmup": draws, "num_samples": draws}
    rows = []
    kinds = ["gpu", "cpu"] if any(d.platform == "gpu" for d in jax.devices()) else ["cpu"]
    for kind in kinds:
        with jax.default_device(jax.devices(kind)[0]):
            fit = timed_fit(animals, "nuts", 4, chain_method="vectorized", **options)
        report = bernmf.diagnostics(fit, warn=False)
        per_second = float(report.table.loc["WH", "ess_bulk_per_second"])
        name = f"nuts animals K=4, 2 x ({draws} + {draws})"
        rows.append((name, "float64", kind, fit.timings["run"], "s"))
        rows.append(("nuts: median bulk ESS of WH per s", "float64", kind, per_second, "1/s"))
        print(rows[-2:], flush=True)
    return rows


def markdown(table: pd.DataFrame) -> str:
    """``table`` as a markdown table, numbers to 3 significant digits."""
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    for row in table.itertuples(index=False):
        cells = [f"{v:.3g}" if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True, help="folder with lastfm.csv, animals.csv")
    parser.add_argument("--out", required=True, help="folder for device.csv and device.md")
    parser.add_argument("--small", action="store_true", help="tiny cases, to check the script")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message=".*distinct modes")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gpu = [d for d in jax.devices() if d.platform == "gpu"]
    header = (
        f"jax {jax.__version__}, {gpu[0].device_kind if gpu else 'no GPU'}, "
        f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
        f"{time.strftime('%Y-%m-%d')}"
    )
    print(header, flush=True)
    load = {name: datasets.load(name, args.data_dir).to_numpy() for name in ("lastfm", "animals")}
    rows = mm_cases(load["lastfm"], args.small) + nuts_case(load["animals"], args.small)
    table = pd.DataFrame(rows, columns=["case", "dtype", "device", "value", "unit"])
    wide = table.pivot_table(
        index=["case", "dtype", "unit"], columns="device", values="value", sort=False
    ).reset_index()
    if "gpu" in wide:
        wide["gpu speed-up"] = wide["cpu"] / wide["gpu"]
        per_second = wide["unit"] == "1/s"
        wide.loc[per_second, "gpu speed-up"] = 1 / wide.loc[per_second, "gpu speed-up"]
    table.to_csv(out / "device.csv", index=False)
    text = f"{header}\n\n{markdown(wide)}\n"
    (out / "device.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
