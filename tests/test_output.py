"""The atomic writer: what it publishes, what it never replaces, its modes, its cleanup."""

from __future__ import annotations

import os
import stat

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
