"""Ctrl-C in the ``bernmf`` command (:mod:`bernmf._interrupt`): SIGINT at start-up, inside a
compiled fit and while the results are written ends the command with exit code 130 within
5 s, one line on stderr, nothing published and nothing left behind.

Each case runs the command in its own process and sends SIGINT once the process's output
(or its temporary folder) shows where it is; every wait is bounded. The writer is also
interrupted just after each of its file system calls, in turn, and a command just after
each step around the publication of its results, to the end of its process (no timing
involved).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(os.name == "nt", reason="POSIX signals")


def command(*arguments, options=()) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, *options, "-m", "bernmf", *map(str, arguments)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def interrupt(process: subprocess.Popen, lines: list[str]) -> list[str]:
    """SIGINT to ``process``: its stderr lines after ``lines``, once it ended (a process
    still running 60 s later fails the test: a hang, not a slow machine)."""
    process.send_signal(signal.SIGINT)
    try:
        _, rest = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail("the command went on for 60 s after SIGINT")
    return lines + rest.splitlines()


def read_until(process: subprocess.Popen, found, seconds: float = 120) -> list[str]:
    """The stderr lines of ``process`` up to the first for which ``found(line)`` holds."""
    lines, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if found(line):
            return lines
    process.kill()
    pytest.fail(f"never found what was waited for; stderr: {lines[-5:]}")


def assert_interrupted(process, lines, folder: Path):
    assert process.returncode == 130, lines
    assert lines[-1] == "bernmf: interrupted" and lines.count("bernmf: interrupted") == 1
    assert not any("Traceback" in line or "Exception ignored" in line for line in lines)
    assert list(folder.iterdir()) == []


def test_at_start_up(small_csv, tmp_path):
    """During the imports (about a second, which printed 20 lines of traceback)."""
    folder = tmp_path / "results"
    folder.mkdir()
    process = command(
        "fit", small_csv, "--rank", 2, "--out", folder / "out", options=("-X", "importtime")
    )
    lines = read_until(process, lambda line: "bernmf._interrupt" in line)  # installed
    lines = interrupt(process, lines)
    lines = [line for line in lines if not line.startswith("import time:")]
    assert_interrupted(process, lines, folder)


def test_inside_a_compiled_fit(small_csv, tmp_path):
    """In a fit's compiled loop, where the main thread cannot take the signal (it waited
    for the fit to end: 58 s on a 5069 x 5069 matrix). The heartbeat's line, after 10 s
    without output, shows the loop's iterations."""
    folder = tmp_path / "results"
    folder.mkdir()
    process = command(
        "fit", small_csv, "--rank", 2, "--max-iter", 1_000_000, "--tol", 0, "--out", folder / "out"
    )
    lines = read_until(process, lambda line: "iteration" in line)
    lines = interrupt(process, lines)
    assert_interrupted(process, lines, folder)


@pytest.mark.parametrize("force", [False, True])
def test_while_the_results_are_written(small_csv, tmp_path, force):
    """Once the temporary folder appears; with --force the old folder stays as it was."""
    folder = tmp_path / "results"
    (folder / "out").mkdir(parents=True)
    (folder / "out" / "old.txt").write_text("old")
    options = ["--force"] if force else []
    out = folder / ("out" if force else "new")
    process = command("fit", small_csv, "--rank", 2, "--max-iter", 5, *options, "--out", out)
    deadline = time.monotonic() + 120
    while not any(p.suffix == ".tmp" for p in folder.iterdir()):
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.002)
    lines = interrupt(process, [])
    (folder / "out" / "old.txt").unlink()  # the folder that was there, as it was
    (folder / "out").rmdir()
    assert_interrupted(process, lines, folder)


STEPS = """
import json, os, signal, sys
from pathlib import Path
from bernmf import _interrupt, _output

calls, at = [], [0]  # the file system calls of the writer; SIGINT just after call at[0]


def step(name, call):
    def run(*arguments, **keywords):
        try:
            return call(*arguments, **keywords)
        finally:
            calls.append(name)
            if len(calls) == at[0]:
                os.kill(os.getpid(), signal.SIGINT)

    return run


def write(folder, force):  # as bernmf fit --out does, in a child process
    _interrupt.install()
    _interrupt.start()
    out = folder / "out" if force else folder / "made" / "out"  # "made": a missing parent
    try:
        target = _output.check_output(out, force)
        with _output.atomic_output(target, folder=True) as temporary:
            (temporary / "figures").mkdir()
            (temporary / "W.csv").write_text("new")
        code = 0
    except KeyboardInterrupt:
        code = _interrupt.outcome(_interrupt.INTERRUPTED, interrupted=True)
    folder.with_suffix(".calls").write_text(" ".join(calls))
    os._exit(_interrupt.outcome(code))


for name in ("mkdir", "rmdir", "rename", "link", "unlink", "replace", "open"):
    setattr(os, name, step(name, getattr(os, name)))
root = Path(sys.argv[1])
for force in (True, False):
    k, steps = 0, 1
    while k <= steps:  # k = 0: not interrupted, to count the steps
        folder = root / f"{'replace' if force else 'new'}-{k}"
        (folder / "out").mkdir(parents=True)
        (folder / "out" / "old.txt").write_text("old")
        if not force:
            (folder / "out" / "old.txt").unlink()
            (folder / "out").rmdir()
        pid = os.fork()
        if pid == 0:
            os.dup2(os.open(folder.with_suffix(".err"), os.O_WRONLY | os.O_CREAT), 2)
            calls.clear()
            at[0] = k
            write(folder, force)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        if k == 0:
            steps = len(folder.with_suffix(".calls").read_text().split())
            names = folder.with_suffix(".calls").read_text().split()
        entries = sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))
        stderr = folder.with_suffix(".err").read_text()
        step_name = names[k - 1] if k else None
        print(json.dumps(dict(force=force, at=k, call=step_name, code=code, entries=entries,
                              stderr=stderr)), flush=True)
        k += 1
"""


def test_at_every_step_of_writing_the_results(tmp_path):
    """SIGINT just after each file system call of the start check and the writer (the
    probe of the start check, made and removed, was left behind if the signal came
    between the two; a missing parent folder was left if it came as it was made): exit
    130 with the line and nothing left, or exit 0 with the new results complete; with
    --force, the old folder as it was, or replaced. Each case in a child process."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", STEPS, str(tmp_path)], capture_output=True, text=True,
        env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    cases = [json.loads(line) for line in done.stdout.splitlines()]
    new = ["{out}", "{out}/W.csv", "{out}/figures"]
    for case in cases:
        out = "out" if case["force"] else "made/out"
        if case["code"] == 0:
            expected = [*(["made"] if not case["force"] else []), *(p.format(out=out) for p in new)]
            assert (case["entries"], case["stderr"]) == (expected, ""), case
        else:
            old = ["out", "out/old.txt"] if case["force"] else []
            assert case["code"] == 130 and case["stderr"] == "bernmf: interrupted\n", case
            assert case["entries"] == old, case
    interrupted = [case["call"] for case in cases if case["code"] == 130]
    assert len(cases) > 15 and len(interrupted) > 5, [case["call"] for case in cases]


PUBLISHING = """
import atexit, gc, json, os, signal, sys, types
from pathlib import Path
import bernmf.cli.parser as parser
from bernmf import _interrupt, _output
from bernmf.cli.commands import say

steps, at = [], [0]  # the steps of the command; SIGINT just after step at[0]


def step(name):
    steps.append(name)
    if len(steps) == at[0]:
        os.kill(os.getpid(), signal.SIGINT)


def stepping(name, call):
    def run(*arguments, **keywords):
        try:
            return call(*arguments, **keywords)
        finally:
            step(name)

    return run


def fit(args):  # bernmf fit --out without its fit: check, write, publish, say
    target = _output.check_output(args.out, args.force)
    with _output.atomic_output(target, folder=True) as folder:
        (folder / "W.csv").write_text("new")
        step("written")
    say(args, f"results in {args.out}")
    step("said")
    return 0


class Exiting:  # deleted as Python's shutdown clears the modules, after restoring SIGINT
    def __del__(self, kill=os.kill, pid=os.getpid, interrupt=signal.SIGINT):
        kill(pid(), interrupt)


parser.fit_command = fit
parser.build_parser()  # its imports, once
for name in ("mkdir", "rmdir", "rename", "link", "unlink", "replace"):
    setattr(os, name, stepping(name, getattr(os, name)))
root, force = Path(sys.argv[1]), sys.argv[2] == "force"
k, count = 0, 1
while k <= count + 1:  # 0: not interrupted, to count the steps; count + 1: as it exits
    folder = root / f"{'replace' if force else 'new'}-{k}"
    (folder / "out").mkdir(parents=True)
    (folder / "out" / "old.txt").write_text("old")
    if not force:
        (folder / "out" / "old.txt").unlink()
        (folder / "out").rmdir()
    sys.stdout.flush()
    gc.freeze()  # the child's shutdown then leaves the parent's objects alone: 0.5 -> 0.1 s
    pid = os.fork()
    if pid == 0:  # the command's process, from its main to its exit
        for stream, suffix in ((1, ".out"), (2, ".err")):
            os.dup2(os.open(folder.with_suffix(suffix), os.O_WRONLY | os.O_CREAT), stream)
        steps.clear()
        at[0] = k
        atexit.register(lambda: folder.with_suffix(".steps").write_text(" ".join(steps)))
        atexit.register(step, "atexit")
        if k == count + 1:  # as the process exits, once Python restored SIGINT's action
            sys.modules["exiting"] = types.ModuleType("exiting")
            sys.modules["exiting"].hook = Exiting()
        _interrupt.install()
        argv = ["fit", "y.csv", "--rank", "2", "--out", str(folder / "out")]
        code = parser.main(argv + ["--force"] * force)
        step("returned")
        sys.exit(code)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    names = folder.with_suffix(".steps").read_text().split() if k == 0 else names
    count = len(names) if k == 0 else count
    entries = sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))
    out, err = (folder.with_suffix(suffix).read_text() for suffix in (".out", ".err"))
    after = names[k - 1] if 0 < k <= count else "exit" if k else None
    print(json.dumps(dict(after=after, code=code, entries=entries, stdout=out, stderr=err,
                          out=str(folder / "out"),
                          published=k == 0 or k > names.index("written") + 1)))
    k += 1
"""


@pytest.mark.parametrize("force", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_at_every_step_around_publication(tmp_path, force):
    """SIGINT just after each step of a command that publishes its folder, from its start
    check to the end of its process: before the folder is published, exit 130 with the
    line and nothing left; from the step that publishes it on, exit 0 with the results,
    however late: once Python's shutdown had restored SIGINT's default action, the signal
    itself ended the process (6 of 8 Ctrl-C 50-150 ms after --out appeared). Each case in
    a child process that runs the command's main and exits as the command does."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", PUBLISHING, str(tmp_path), "force" * force],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    cases = [json.loads(line) for line in done.stdout.splitlines()]
    for case in cases:
        if case["published"]:  # the new results, said, the old folder gone
            assert (case["code"], case["entries"]) == (0, ["out", "out/W.csv"]), case
            assert (case["stdout"], case["stderr"]) == (f"results in {case['out']}\n", ""), case
        else:
            old = ["out", "out/old.txt"] if force else []
            assert (case["code"], case["entries"], case["stdout"]) == (130, old, ""), case
            assert case["stderr"] == "bernmf: interrupted\n", case
    afters = [case["after"] for case in cases]
    assert {"written", "rename", "said", "returned", "atexit", "exit"} <= set(afters), afters


ESCAPED = """
import os, signal
from bernmf import _interrupt
_interrupt.install()
_interrupt.start()
try:
    raise ValueError("an error of the command")
except Exception:  # where bernmf.cli.parser.main reports it, outside its try
    os.kill(os.getpid(), signal.SIGINT)
    print("bernmf: error: an error of the command")
"""


def test_an_interrupt_that_escapes_the_command_ends_it_as_interrupted():
    """SIGINT as ``main`` reports an error (or returns) raised KeyboardInterrupt outside
    its handlers: a traceback of 12 lines, and the process killed by the signal."""
    done = subprocess.run([sys.executable, "-c", ESCAPED], capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (130, "bernmf: interrupted\n")


SWALLOWED = """
import gc, os, signal, time
from bernmf import _interrupt
_interrupt.install()
_interrupt.start()
sent = []

def callback(phase, info):  # where JAX's own callback was when SIGINT came
    if not sent:
        sent.append(os.kill(os.getpid(), signal.SIGINT))
        time.sleep(0.01)

gc.callbacks.append(callback)
try:
    gc.collect()
    time.sleep(1)
    print("went on")
except KeyboardInterrupt:
    print("raised")
"""


def test_an_interrupt_swallowed_in_a_gc_callback_is_raised_again():
    """Python only reports ("Exception ignored in ...") a KeyboardInterrupt raised in a
    callback of the garbage collector: report --quick went on and published its folder
    in 8 of 17 tries."""
    script = textwrap.dedent(SWALLOWED)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stdout.split() == ["raised"] and done.stderr == ""
