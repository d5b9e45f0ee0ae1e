"""Progress fits where it is printed: a bar on a terminal, whole plain lines elsewhere."""

from __future__ import annotations

import io
import threading
import time

import jax.numpy as jnp
import numpy as np

from bernmf import cli
from bernmf._progress import Progress, is_terminal
from bernmf.inference import _batch


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
