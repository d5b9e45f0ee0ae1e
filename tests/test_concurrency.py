"""Two writers, one output: exactly one wins, the other gets a clear error, nothing is lost.

The race is made certain, not left to chance: both writers are held just before
publishing (a barrier for threads, a file for processes) until both are there.
The command line runs in threads; processes run the writer alone (``Fit.save`` and a
results folder), as the command's start-up (JAX) would make them slow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import bernmf
from bernmf import _interrupt, _output
from bernmf.cli.parser import main
from bernmf.results.fit import Record

ROOT = Path(__file__).parents[1]  # the checkout, for the processes' PYTHONPATH
FIT_FILES = {"W.csv", "H.csv", "trace.csv", "summary.json", "fit.npz", "factors.png", "trace.png"}
FIT_FILES |= {"top_columns.csv", "top_rows.csv"}


@pytest.fixture(scope="module")
def data_csv(tmp_path_factory):
    Y, _, _ = bernmf.simulate(2, 12, 8, 2)
    path = tmp_path_factory.mktemp("data") / "data.csv"
    pd.DataFrame(Y).to_csv(path)
    return path


def hold_before_publishing(monkeypatch, folders: bool) -> None:
    """Make two threads both reach the publishing of a folder (or a file) before either does.

    The interrupt path's lock (:func:`bernmf._interrupt.exclusive`) serializes the publishing
    of one process's threads; two processes race as these threads then do, so the lock is
    lifted here to make that race."""
    monkeypatch.setattr(_interrupt, "_lock", contextlib.nullcontext())
    barrier = threading.Barrier(2, timeout=120)
    publish = _output._publish

    def held(temporary, path):
        if temporary.is_dir() == folders:
            barrier.wait()
        publish(temporary, path)

    monkeypatch.setattr(_output, "_publish", held)


def in_threads(function, arguments) -> list:
    """``function(argument)`` in one thread per argument: each result or exception."""
    results = [None] * len(arguments)

    def run(i):
        try:
            results[i] = function(arguments[i])
        except Exception as error:
            results[i] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(arguments))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return results


def assert_complete_fit_folder(out: Path, seed: int) -> None:
    """The folder holds one run's results, all of them, consistent with each other."""
    assert {p.name for p in out.iterdir()} == FIT_FILES
    assert json.loads((out / "summary.json").read_text())["seed"] == seed
    fit = bernmf.load(out / "fit.npz")
    assert fit.seed == seed
    np.testing.assert_allclose(pd.read_csv(out / "W.csv", index_col=0).to_numpy(), fit.W)


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_two_threads_saving_one_fit_path(tmp_path, monkeypatch):
    Y, _, _ = bernmf.simulate(0, 10, 6, 2)
    fit = bernmf.fit(Y, "mm", 2, max_iter=3)
    fits = [dataclasses.replace(fit, record=Record(seed, fit.timings)) for seed in (1, 2)]
    path = tmp_path / "fit.npz"
    hold_before_publishing(monkeypatch, folders=False)
    results = in_threads(lambda f: f.save(path), fits)
    errors = [r for r in results if isinstance(r, Exception)]
    assert len(errors) == 1 and isinstance(errors[0], FileExistsError), results
    assert f"{path} appeared" in str(errors[0])
    winner = results.index(path)
    assert bernmf.load(path).seed == fits[winner].seed
    assert [p.name for p in tmp_path.iterdir()] == ["fit.npz"]


@pytest.mark.slow
def test_two_threads_running_the_cli_into_one_folder(data_csv, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    hold_before_publishing(monkeypatch, folders=True)
    base = ["fit", str(data_csv), "--rank", "2", "--max-iter", "5", "--tol", "0", "--quiet"]
    base += ["--out", str(out)]
    codes = in_threads(lambda seed: main([*base, "--seed", str(seed)]), [1, 2])
    assert sorted(codes) == [0, 1]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"bernmf: error: {out} appeared" in err
    assert_complete_fit_folder(out, seed=[1, 2][codes.index(0)])
    assert hidden(tmp_path) == []


SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    import numpy as np
    from bernmf import _output
    from bernmf.results.fit import Fit, Record

    kind, go, target, seed = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
    publish = _output._publish

    def held(temporary, path):  # results complete: wait until the parent says go
        if path == target:
            Path(f"{go}.{os.getpid()}").touch()
            while not go.exists():
                time.sleep(0.01)
        publish(temporary, path)

    _output._publish = held
    half = np.full((2, 3), 0.5)
    fit = Fit("mm", 1, None, np.ones((2, 1)), half[:1], np.zeros(2), True, Record(seed, {}))
    try:
        if kind == "file":
            fit.save(target)
        else:
            with _output.atomic_output(_output.check_output(target, False), folder=True) as out:
                fit.save(out / "fit.npz")
                (out / "seed.txt").write_text(str(seed))
    except FileExistsError as error:
        sys.exit(f"error: {error}")
    """
)


@pytest.mark.multiprocess
@pytest.mark.parametrize("kind", ["folder", "file"])
def test_two_processes_writing_one_output(tmp_path, kind):
    results, go = tmp_path / "results", tmp_path / "go"
    results.mkdir()
    target = results / ("out" if kind == "folder" else "fit.npz")
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT, kind, str(go), str(target), str(seed)],
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
        )
        for seed in (1, 2)
    ]
    waited = 0.0
    while len(list(tmp_path.glob("go.*"))) < 2 and waited < 120:
        assert all(p.poll() is None for p in processes), "a writer ended before publishing"
        time.sleep(0.05)
        waited += 0.05
    go.touch()
    errors = [p.communicate(timeout=120)[1] for p in processes]
    codes = [p.returncode for p in processes]
    assert sorted(codes) == [0, 1], errors
    assert (
        errors[codes.index(1)] == f"error: {target} appeared while the results were written; "
        "it was left untouched and these results were not saved\n"
    )
    seed = [1, 2][codes.index(0)]
    saved = target / "fit.npz" if kind == "folder" else target
    assert bernmf.load(saved).seed == seed
    if kind == "folder":
        assert (target / "seed.txt").read_text() == str(seed)
    assert [p.name for p in results.iterdir()] == [target.name]  # and nothing hidden
