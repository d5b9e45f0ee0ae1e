"""Seconds of a process's first fit: without a compilation cache, with an empty one, and
with the cache the previous process filled (the persistent compilation cache).

Each figure comes from a fresh Python process, run one after another in this one and
pinned like it (``single_core.pin``: one core, one BLAS / XLA thread), so that the
processes compare in one run. Cases:

* ``mm``: ``bernmf.fit(Y, "mm", 8)`` on a simulated 1226 x 285 matrix (lastfm's shape);
* ``mm-auto``: the same with ``dtype="auto"`` (two loops, float32 then float64);
* ``svi``: ``bernmf.fit(Y, "svi", 4, steps=500)`` on a simulated 100 x 60 matrix.

For each: the first call's wall and CPU seconds (``import bernmf`` excluded; on a
loaded machine CPU seconds compare better), its ``timings`` (compile, run, wall seconds)
and its compile in CPU seconds (the first call's less those of the same fit again), in
three processes: cache off, an empty cache folder, and the folder the previous process
filled. ``--baseline DIR`` adds processes running the checkout in DIR (e.g. the commit
before a change: ``git worktree add``) with the cache off and with a warm cache of its
own, so that a change is measured against its base in the same run. Each figure is
printed beside its anchor: the targets of issue 26 (MM compile with a warm cache
<= 0.3 s and <= 1/5 of a cold one; svi first call <= 5 s).

Run: ``.venv/bin/python benchmarks/first_call.py [--baseline ../main] [--cases mm svi]``
"""

from __future__ import annotations

import single_core

single_core.pin()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

CASES = {
    "mm": ((1226, 285, 8), "mm", 8, {}),
    "mm-auto": ((1226, 285, 8), "mm", 8, {"dtype": "auto"}),
    "svi": ((100, 60, 4), "svi", 4, {"steps": 500, "progress": False}),
}

SCRIPT = """
import json, time
begin = time.perf_counter()
import bernmf, numpy as np
imported = time.perf_counter() - begin
Y = np.asarray(bernmf.simulate(0, *{shape!r})[0])
begin, cpu = time.perf_counter(), time.process_time()
fit = bernmf.fit(Y, {engine!r}, {rank!r}, **{options!r})
wall, cpu = time.perf_counter() - begin, time.process_time() - cpu
again = time.process_time()
bernmf.fit(Y, {engine!r}, {rank!r}, **{options!r})  # compiled: the run alone
compile_cpu = cpu - (time.process_time() - again)
print(json.dumps({{"import": imported, "first_call": wall, "cpu": cpu,
                  "compile_cpu": compile_cpu, **fit.timings}}))
"""


def run(case: str, tree: Path, cache: str) -> dict:
    """The figures of one fresh process running ``case`` from the checkout ``tree``."""
    shape, engine, rank, options = CASES[case]
    script = SCRIPT.format(shape=shape, engine=engine, rank=rank, options=options)
    env = dict(os.environ, PYTHONPATH=str(tree), BERNMF_COMPILE_CACHE=cache)
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.splitlines()[-1])


def line(label: str, figures: dict) -> str:
    return (
        f"  {label:<28} first call {figures['first_call']:6.2f} s, CPU {figures['cpu']:6.2f} s "
        f"(compile {figures['compile']:5.2f} s, run {figures['run']:5.2f} s; compile CPU "
        f"{figures['compile_cpu']:5.2f} s)"
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--baseline", type=Path, help="another checkout, run with the cache off and warm"
    )
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    args = parser.parse_args(argv)
    print(single_core.describe())
    print(f"load average {os.getloadavg()}")
    for case in args.cases:
        print(f"{case}:")
        if args.baseline is not None:
            base = run(case, args.baseline, "off")
            print(line(f"baseline {args.baseline.name}", base))
            with tempfile.TemporaryDirectory() as folder:
                run(case, args.baseline, folder)
                base_warm = run(case, args.baseline, folder)
            print(line("baseline, warm cache", base_warm))
        off = run(case, ROOT, "off")
        print(line("cache off", off))
        with tempfile.TemporaryDirectory() as folder:
            cold = run(case, ROOT, folder)
            warm = run(case, ROOT, folder)
        print(line("empty cache (1st process)", cold))
        print(line("warm cache (2nd process)", warm))
        ratio = warm["compile"] / cold["compile"]
        ratio_cpu = warm["compile_cpu"] / cold["compile_cpu"]
        if case.startswith("mm"):
            print(
                f"  compile warm {warm['compile']:.2f} s, CPU {warm['compile_cpu']:.2f} s "
                f"[target <= 0.3 s], warm / cold {ratio:.2f}, CPU {ratio_cpu:.2f} [target <= 0.2]"
            )
        if case == "svi":
            print(
                f"  first call: cache off {off['first_call']:.1f} s, warm cache "
                f"{warm['first_call']:.1f} s [target <= 5 s]"
                + (
                    f"; baseline: cache off {base['first_call']:.1f} s, warm cache "
                    f"{base_warm['first_call']:.1f} s (CPU {base_warm['cpu']:.2f} s against "
                    f"{warm['cpu']:.2f} s)"
                    if args.baseline
                    else ""
                )
            )


if __name__ == "__main__":
    main()
