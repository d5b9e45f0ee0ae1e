"""The atomic writer: what it publishes, what it never replaces, its modes, its cleanup."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

import bernmf
from bernmf import _output
from bernmf._output import Target, atomic_output, check_output


def leftovers(folder):
    """Hidden temporary or set-aside entries the writer may have left."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def write_folder(target, text="new"):
    with atomic_output(target, folder=True) as folder:
        (folder / "result.txt").write_text(text)


def test_a_new_folder_is_published_complete(tmp_path):
    out = tmp_path / "out"
    write_folder(check_output(out, force=False))
    assert (out / "result.txt").read_text() == "new"
    assert leftovers(tmp_path) == []


def test_a_folder_that_appears_during_the_run_is_never_replaced(tmp_path):
    out = tmp_path / "out"
    target = check_output(out, force=False)
    with pytest.raises(FileExistsError, match=f"{out} appeared"):
        with atomic_output(target, folder=True) as folder:
            (folder / "result.txt").write_text("new")
            out.mkdir()  # someone else's, meanwhile
            (out / "theirs.txt").write_text("theirs")
    assert [p.name for p in out.iterdir()] == ["theirs.txt"]
    assert leftovers(tmp_path) == []


def test_force_replaces_the_folder_seen_at_the_start(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    write_folder(check_output(out, force=True))
    assert [p.name for p in out.iterdir()] == ["result.txt"]
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("change", ["made again", "added to", "made"])
def test_force_keeps_a_folder_put_there_or_changed_during_the_run(tmp_path, change):
    out = tmp_path / "out"
    if change != "made":
        out.mkdir()
    target = check_output(out, force=True)
    with pytest.raises(FileExistsError, match="only what existed at the start"):
        with atomic_output(target, folder=True) as folder:
            (folder / "result.txt").write_text("new")
            if change == "made again":
                out.rmdir()
            out.mkdir(exist_ok=change == "added to")
            (out / "theirs.txt").write_text("theirs")
    assert [p.name for p in out.iterdir()] == ["theirs.txt"]
    assert leftovers(tmp_path) == []


def test_force_never_deletes_the_current_folder_or_an_input(tmp_path, monkeypatch):
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "data.csv").write_text("1\n")
    with pytest.raises(ValueError, match="contains the input"):
        check_output(out, force=True, keep=[out / "data.csv"])
    monkeypatch.chdir(out / "sub")
    for path in (".", "..", out):
        with pytest.raises(ValueError, match="current folder"):
            check_output(path, force=True)
    with pytest.raises(FileExistsError, match="use --force"):
        check_output(".", force=False)
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="not a folder"):
        check_output(tmp_path / "file", force=True)


@pytest.mark.parametrize("folder", [True, False])
def test_an_interruption_leaves_nothing(tmp_path, folder):
    path = tmp_path / ("out" if folder else "fit.npz")
    with pytest.raises(KeyboardInterrupt):
        with atomic_output(Target(path), folder=folder) as temporary:
            (temporary / "part.txt" if folder else temporary).write_text("half")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_files_and_folders_get_the_usual_modes_under_the_umask(tmp_path):
    """0o666 and 0o777 less the umask, not tempfile's 0o600 and 0o700."""
    Y, _, _ = bernmf.simulate(0, 6, 5, 2)
    fit = bernmf.fit(Y, "mm", 2, max_iter=3)
    previous = os.umask(0o027)
    try:
        target = check_output(tmp_path / "out", force=False)
        with atomic_output(target, folder=True) as folder:
            fit.save(folder / "fit.npz")
        fit.save(tmp_path / "fit.npz")
    finally:
        os.umask(previous)
    modes = {
        p.relative_to(tmp_path).as_posix(): stat.S_IMODE(p.stat().st_mode)
        for p in [tmp_path / "out", tmp_path / "out" / "fit.npz", tmp_path / "fit.npz"]
    }
    assert modes == {"out": 0o750, "out/fit.npz": 0o640, "fit.npz": 0o640}
    np.testing.assert_array_equal(bernmf.load(tmp_path / "fit.npz").W, fit.W)


def test_an_interrupted_force_puts_the_old_folder_back(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    publish = _output._publish

    def interrupted(temporary, path):
        if temporary.name.endswith(".tmp"):  # the new results, not the old folder put back
            raise KeyboardInterrupt
        publish(temporary, path)

    monkeypatch.setattr(_output, "_publish", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_folder(check_output(out, force=True))
    assert [p.name for p in out.iterdir()] == ["old.txt"]
    assert leftovers(tmp_path) == []


def test_missing_folders_above_the_target_are_made_and_removed_if_nothing_is_published(tmp_path):
    out = tmp_path / "a" / "b" / "out"
    write_folder(check_output(out, force=False))
    assert (out / "result.txt").read_text() == "new"
    with pytest.raises(KeyboardInterrupt):
        with atomic_output(check_output(tmp_path / "c" / "d" / "out", force=False), folder=True):
            raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


def test_an_out_that_cannot_be_written_is_refused_before_the_work(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=f"cannot write {tmp_path}/file/out: .* not a folder"):
        check_output(tmp_path / "file" / "out", force=False)
    with pytest.raises(
        ValueError, match=r"the name 'aaaa.*…' is 256 bytes long, more than the 255"
    ):
        check_output(tmp_path / ("a" * 256), force=False)
    with pytest.raises(ValueError, match="is 256 bytes"):
        check_output(tmp_path / ("a" * 256) / "out", force=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


@pytest.fixture
def read_only(tmp_path):
    """A folder that cannot be written, even by root (chattr +i), or skip."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    probe = folder / "probe"
    try:
        probe.mkdir()
    except PermissionError:
        yield folder
        folder.chmod(0o755)
        return
    probe.rmdir()
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        folder.chmod(0o755)
        pytest.skip("no folder that this user cannot write to")
    yield folder
    subprocess.run(["chattr", "-i", str(folder)], check=True)
    folder.chmod(0o755)


def test_an_out_in_a_read_only_folder_is_refused_naming_it(read_only):
    for out in (read_only / "out", read_only / "sub" / "out"):
        with pytest.raises(PermissionError, match=f"cannot write {out} in {read_only}"):
            check_output(out, force=False)


def test_a_250_byte_name_gets_a_temporary_name_that_fits(tmp_path):
    """Its temporary name (the name and 36 more bytes) was too long for the file system,
    which failed after the whole run."""
    out = tmp_path / ("é" * 125)  # 250 bytes
    target = check_output(out, force=False)
    with atomic_output(target, folder=True) as folder:
        assert len(os.fsencode(folder.name)) <= 255
        (folder / "result.txt").write_text("new")
    assert (out / "result.txt").read_text() == "new"
    assert leftovers(tmp_path) == []


def test_errors_inside_the_temporary_folder_name_the_results_path(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(FileNotFoundError) as error:
        with atomic_output(check_output(out, force=False), folder=True) as folder:
            (folder / "missing" / "result.txt").write_text("new")
    assert error.value.filename == str(out / "missing" / "result.txt")
    assert list(tmp_path.iterdir()) == []


KILLED = """
import os, sys, time
from pathlib import Path
from bernmf import _output
target = _output.check_output(Path(sys.argv[1]), force=sys.argv[2] == "force")
if sys.argv[2] == "force":  # killed between setting the old folder aside and publishing
    _output._publish = lambda temporary, path: time.sleep(60)
with _output.atomic_output(target, folder=True) as folder:
    (folder / "result.txt").write_text("half")
    print("writing", flush=True)
    if sys.argv[2] != "force":
        time.sleep(60)
"""


def killed_while_writing(out, force: bool) -> None:
    """Run a writer into ``out`` and SIGKILL it while it writes (or publishes, ``force``)."""
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(out), "force" if force else "new"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        if force:
            deadline = time.monotonic() + 60
            while not any(name.endswith(".old") for name in os.listdir(out.parent)):
                assert time.monotonic() < deadline and writer.poll() is None
                time.sleep(0.01)
        else:
            assert writer.stdout.readline() == "writing\n"
    finally:
        writer.kill()
        writer.wait()


def test_the_next_run_removes_what_a_killed_writer_left(tmp_path):
    out = tmp_path / "out"
    killed_while_writing(out, force=False)
    (left,) = leftovers(tmp_path)
    assert left.startswith(".out.") and left.endswith(".tmp")
    with pytest.warns(UserWarning, match=f"removed {tmp_path / left}, left by a killed"):
        write_folder(check_output(tmp_path / "other", force=False))
    assert leftovers(tmp_path) == [] and sorted(os.listdir(tmp_path)) == ["other"]


def test_the_next_run_puts_back_a_folder_that_a_killed_force_set_aside(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    killed_while_writing(out, force=True)
    assert not out.exists() and len(leftovers(tmp_path)) == 2  # .tmp and .old
    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("always")
        with pytest.raises(FileExistsError, match="use --force"):
            check_output(out, force=False)
    messages = sorted(str(w.message) for w in told)
    assert [m.split(" ")[0] for m in messages] == ["put", "removed"]
    assert messages[0].startswith(f"put {out} back: a bernmf process killed while replacing it")
    assert (out / "old.txt").read_text() == "old" and leftovers(tmp_path) == []


def test_a_set_aside_folder_whose_place_was_taken_is_reported_and_kept(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    killed_while_writing(out, force=True)
    out.mkdir()  # someone else's, since
    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("always")
        check_output(tmp_path / "other", force=False)
    (aside,) = leftovers(tmp_path)
    reported = [str(w.message) for w in told if "set aside" in str(w.message)]
    assert reported == [
        f"{tmp_path / aside} is a folder that a bernmf process killed while replacing {out} "
        "(--force) had set aside: the former results; remove it if they are not needed"
    ]
    assert (tmp_path / aside / "old.txt").read_text() == "old"


def test_only_the_writers_names_of_gone_processes_are_cleaned(tmp_path):
    host = _output._host()
    kept = [
        f".out.{host}-{os.getpid()}-{'0' * 12}.tmp",  # a live process: this one
        f".out.{'f' * 6 if host != 'f' * 6 else 'e' * 6}-1-{'0' * 12}.tmp",  # another machine
        ".out.0123456789ab.tmp",  # no process named
        "out.tmp",
    ]
    for name in kept:
        (tmp_path / name).mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_output(tmp_path / "new", force=False)
    assert sorted(os.listdir(tmp_path)) == sorted(kept)
