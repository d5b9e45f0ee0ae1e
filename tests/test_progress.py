"""Progress fits where it is printed: a bar on a terminal, whole plain lines elsewhere."""

from __future__ import annotations

import functools
import io
import threading
import time

import jax.numpy as jnp
import numpy as np
import pytest

import bernmf
from bernmf import _progress as progress
from bernmf._progress import Heartbeat, Progress, is_terminal, note, working_on
from bernmf.cli import parser as cli
from bernmf.inference import _loop
from bernmf.inference.mm import _batch


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_plain_lines_in_a_file_and_a_bar_on_a_terminal():
    plain, terminal = io.StringIO(), Terminal()
    for stream in (plain, terminal):
        with Progress("fits", 3, stream=stream) as shown:
            for i in range(3):
                shown.update(result=f"fit {i}: perplexity 0.5")
            shown.close("done")
    assert not is_terminal(plain) and is_terminal(terminal)
    lines = plain.getvalue().splitlines()
    assert lines[0] == "fits 1/3: fit 0: perplexity 0.5"
    assert lines[-1].startswith("fits: 3 fits in ") and lines[-1].endswith(", done")
    assert "\r" not in plain.getvalue() and "\x1b" not in plain.getvalue()
    assert "\r" in terminal.getvalue() and "3/3" in terminal.getvalue()


def test_disabled_progress_writes_nothing():
    for stream in (io.StringIO(), Terminal()):
        with Progress("fits", 2, enabled=False, stream=stream) as shown:
            shown.update(result="x")
            shown.close("y")
        assert stream.getvalue() == ""


@pytest.mark.slow
def test_cli_compare_in_a_pipe_writes_one_line_per_fit_and_no_carriage_return(tmp_path, capsys):
    argv = ["compare", "--rows", "30", "--cols", "20", "--ranks", "2", "--seeds", "2"]
    argv += ["--option", "mm.max_iter=50", "--option", "em.max_iter=50"]
    assert cli.main([*argv, "--out", str(tmp_path / "a")]) == 0
    captured = capsys.readouterr()
    for text in (captured.out, captured.err):
        assert "\r" not in text and "\x1b" not in text
    lines = [line for line in captured.err.splitlines() if line.startswith("compare ")]
    assert [line.split(":")[0] for line in lines] == [f"compare {i}/4" for i in (1, 2, 3, 4)]
    assert "mm K=2 seed 0: perplexity" in lines[0] and lines[0].endswith(" s")
    assert cli.main([*argv, "--quiet", "--out", str(tmp_path / "b")]) == 0
    assert capsys.readouterr() == ("", "")


def test_threads_running_many_fits_at_once_each_count_their_own(monkeypatch):
    # issue 23: the reporters were one global stack, so a thread counted the other's fits
    made, counted = [], {}

    class Recorder:
        def __init__(self, label, total, **_):
            self.label = label
            counted[label] = 0
            made.append(label)

        def update(self, count=1):
            deadline = time.monotonic() + 30
            while len(made) < 2 and time.monotonic() < deadline:  # both calls under way
                time.sleep(0.01)
            time.sleep(0.05)
            counted[self.label] += count

        def close(self):
            pass

    monkeypatch.setattr(_batch, "Progress", Recorder)

    def fit_one(seed, prior, scale):
        return jnp.sum(prior) * scale + seed

    def many(label, size):
        _batch.run_many(
            ("test.threads",), fit_one, list(range(size)), np.ones((size, 2)),
            (jnp.asarray(1.0),), batch_size=1, bytes_per_fit=8, label=label,
        )  # fmt: skip

    threads = [threading.Thread(target=many, args=(f"call {n}", n)) for n in (3, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert counted == {"call 3": 3, "call 5": 5}


class Clock:
    """A fake clock that a test moves by hand."""

    def __init__(self):
        self.seconds = 0.0

    def __call__(self) -> float:
        return self.seconds


def test_heartbeat_writes_what_runs_after_every_silent_interval_off_a_terminal():
    stream, clock = io.StringIO(), Clock()
    with Heartbeat("bernmf fit", stream=stream, every=10, clock=clock) as beat:
        beat.thread.join(0)  # the thread runs; the test drives beat() with the fake clock
        working_on("mm K=8")
        clock.seconds = 9.0
        assert not beat.beat()
        clock.seconds = 10.5
        note(np.array([120, 130]), np.array([1523.4, 1500.0]))  # a vmapped batch: furthest
        assert beat.beat()
        progress.say(True, "a line of its own", stream)  # another line: the wait starts again
        clock.seconds = 15.0
        assert not beat.beat()
        clock.seconds = 24.0
        assert not beat.beat()
        clock.seconds = 25.5
        assert beat.beat()
    lines = stream.getvalue().splitlines()
    assert lines[0] == "bernmf fit: 10 s; mm K=8: iteration 130, objective 1500"
    assert lines[1] == "a line of its own"
    assert lines[2].startswith("bernmf fit: 26 s; mm K=8: iteration 130")
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()


def test_heartbeat_thread_writes_lines_with_a_short_interval():
    stream = io.StringIO()
    working_on(None)
    with Heartbeat("bernmf fit", stream=stream, every=0.05):
        time.sleep(0.5)
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 2 and all(line.startswith("bernmf fit: ") for line in lines)
    with Heartbeat("bernmf fit", stream=stream, every=0.05, enabled=False) as quiet:
        assert quiet.thread is None


@pytest.mark.slow
def test_a_compiled_fit_notes_its_iterations(monkeypatch):
    monkeypatch.setattr(_loop, "NOTE_SECONDS", 0.0)  # a note every iteration (a new shape)
    Y, _, _ = bernmf.simulate(0, 31, 19, 2)
    for engine in ("mm", "vb"):
        working_on(None)
        result = bernmf.fit(Y, engine, 2, max_iter=40, tol=0)
        assert progress.now() == f"{engine} K=2: iteration 40, objective {result.objective:.6g}"


def test_a_short_fit_makes_no_note(monkeypatch):
    """A note (a host callback) costs more than a small fit's iterations: none is made."""
    notes = []
    monkeypatch.setattr(_loop, "note", lambda i, value: notes.append(int(i)))
    Y, _, _ = bernmf.simulate(0, 29, 17, 2)  # a shape of its own: compiled with the patch
    for accelerate in (False, True):
        bernmf.fit(Y, "mm", 2, max_iter=30, tol=0, accelerate=accelerate)
    assert notes == []


@pytest.mark.slow
def test_cli_fit_writes_progress_lines_to_stderr_off_a_terminal(tmp_path, capsys, monkeypatch):
    """A long fit (made long by a slow sweep) writes heartbeat lines; stdout has none."""
    Y, _, _ = bernmf.simulate(0, 33, 21, 2)  # a shape of its own: compiled with the patch
    np.savez(tmp_path / "y.npz", Y=Y)
    original = progress.note

    def slow(i, value):  # every note takes a while: the fit runs about a second
        time.sleep(0.03)
        original(i, value)

    monkeypatch.setattr(progress, "note", slow)
    monkeypatch.setattr(_loop, "note", slow)
    monkeypatch.setattr(_loop, "NOTE_SECONDS", 0.0)  # a note every iteration
    monkeypatch.setattr(cli, "Heartbeat", functools.partial(progress.Heartbeat, every=0.2))
    argv = ["fit", str(tmp_path / "y.npz"), "--rank", "2", "--engine", "vb", "--tol", "0"]
    assert cli.main([*argv, "--max-iter", "40", "--out", str(tmp_path / "f")]) == 0
    captured = capsys.readouterr()
    beats = [line for line in captured.err.splitlines() if line.startswith("bernmf fit: ")]
    assert len(beats) >= 2 and any("; vb K=2: iteration " in line for line in beats)
    assert captured.err.splitlines()[0].startswith("fitting vb with rank 2 to ")
    assert "fitting" not in captured.out and "bernmf fit: " not in captured.out
    assert "\r" not in captured.err


def test_cli_warns_in_one_line_without_a_source_path(tmp_path, capsys):
    Y, _, _ = bernmf.simulate(0, 30, 20, 2)
    np.savez(tmp_path / "y.npz", Y=Y)
    argv = ["fit", str(tmp_path / "y.npz"), "--rank", "2", "--tol", "1e-12", "--max-iter", "5"]
    assert cli.main([*argv, "--out", str(tmp_path / "f")]) == 0
    captured = capsys.readouterr()
    warned = [line for line in captured.err.splitlines() if "warning" in line]
    assert warned == [
        "bernmf: warning: mm stopped at max_iter=5 iterations without converging (tol 1e-12); "
        "the factors may still change: raise --max-iter, or see the objective in trace.png"
    ]
    for text in (captured.out, captured.err):
        assert ".py" not in text and "Warning:" not in text
