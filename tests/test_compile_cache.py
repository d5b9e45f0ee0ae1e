"""The persistent compilation cache: where it goes, how it is turned off, and that a
second process fitting the same shapes loads the programs instead of compiling them.

Each process runs in a fresh interpreter with its own temporary cache folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bernmf import _cache

FIT = """
import json, jax
events = {{}}
jax.monitoring.register_event_listener(
    lambda name, **kw: events.__setitem__(name, events.get(name, 0) + 1)
)
import numpy as np, bernmf
print(jax.config.jax_compilation_cache_dir)
Y = (np.random.default_rng(0).random((40, 30)) < 0.3).astype(float)
fit = bernmf.fit(Y, {engine!r}, 3, seed=1, **{options!r})
print(json.dumps({{"compile": fit.timings["compile"],
                  "hits": events.get("/jax/compilation_cache/cache_hits", 0),
                  "misses": events.get("/jax/compilation_cache/cache_misses", 0)}}))
"""


def run_fit(environment: dict, engine: str = "mm", **options) -> tuple[str, dict]:
    """(JAX's cache folder, {compile, hits, misses}) of a fit in a fresh interpreter."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BERNMF_", "JAX_"))}
    env |= environment
    script = FIT.format(engine=engine, options=options)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env
    ).stdout.splitlines()
    return out[-2], json.loads(out[-1])


def cached_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("engine", "options"),
    [("mm", {}), ("svi", {"steps": 20, "num_draws": 5, "progress": False})],
)
def test_a_second_process_loads_every_program_from_the_cache(tmp_path, engine, options):
    """Every program, svi's ELBO included (NumPyro's Trace_ELBO traced its sites in the
    order of a set of names, which changes with each process's string hashing)."""
    environment = {"BERNMF_COMPILE_CACHE": str(tmp_path / "programs")}
    folder, first = run_fit(environment, engine, **options)
    assert Path(folder) == tmp_path / "programs"
    assert first["misses"] > 0 and first["hits"] == 0
    assert cached_files(tmp_path / "programs")
    _, second = run_fit(environment, engine, **options)
    assert second["misses"] == 0 and second["hits"] == first["misses"]
    # how much faster that is: benchmarks/first_call.py (a timing, not a test)


@pytest.mark.slow
def test_the_cache_goes_under_bernmf_cache_dir_by_default(tmp_path):
    folder, first = run_fit({"BERNMF_CACHE_DIR": str(tmp_path)})
    assert Path(folder) == tmp_path / "jax"
    assert first["misses"] > 0 and cached_files(tmp_path / "jax")


@pytest.mark.slow
@pytest.mark.parametrize("value", ["off", "OFF", "0", ""])
def test_off_writes_nothing(tmp_path, value):
    environment = {"BERNMF_CACHE_DIR": str(tmp_path), "BERNMF_COMPILE_CACHE": value}
    folder, first = run_fit(environment)
    assert folder == "None"
    assert first["misses"] == first["hits"] == 0
    assert not cached_files(tmp_path)


@pytest.mark.slow
def test_a_folder_given_to_jax_is_kept(tmp_path):
    environment = {
        "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "mine"),
        "BERNMF_COMPILE_CACHE": str(tmp_path / "bernmf"),
    }
    folder, _ = run_fit(environment)
    assert Path(folder) == tmp_path / "mine"
    assert not (tmp_path / "bernmf").exists()


def test_compile_cache_dir_reads_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("BERNMF_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("BERNMF_COMPILE_CACHE")
    assert _cache.compile_cache_dir() == tmp_path / "jax"
    monkeypatch.setenv("BERNMF_COMPILE_CACHE", str(tmp_path / "elsewhere"))
    assert _cache.compile_cache_dir() == tmp_path / "elsewhere"
    for value in ("off", "False", " no ", "none", ""):
        monkeypatch.setenv("BERNMF_COMPILE_CACHE", value)
        assert _cache.compile_cache_dir() is None
    monkeypatch.delenv("BERNMF_CACHE_DIR")
    monkeypatch.delenv("BERNMF_COMPILE_CACHE")
    assert _cache.compile_cache_dir().parts[-2:] == ("bernmf", "jax")


@pytest.mark.parametrize("value", ["1", "true", "Yes", " on "])
def test_on_means_the_default_folder(tmp_path, monkeypatch, value):
    """It made a folder named "1" (or "true" ...) in the working folder."""
    monkeypatch.chdir(tmp_path)
    folder, first = run_fit(
        {"BERNMF_CACHE_DIR": str(tmp_path / "cache"), "BERNMF_COMPILE_CACHE": value}
    )
    assert Path(folder) == tmp_path / "cache" / "jax"
    assert first["misses"] > 0 and sorted(os.listdir(tmp_path)) == ["cache"]


CHANGE_FOLDER = """
import os, sys
import bernmf, bernmf._cache
os.chdir(sys.argv[1])
print(bernmf._cache.compile_cache_dir(), bernmf._cache.user_cache_dir())
"""


def test_relative_folders_are_those_of_the_working_folder_at_import(tmp_path):
    """They followed a later os.chdir."""
    (tmp_path / "elsewhere").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BERNMF_", "JAX_"))}
    env |= {"BERNMF_CACHE_DIR": "cache", "BERNMF_COMPILE_CACHE": "programs"}
    out = subprocess.run(
        [sys.executable, "-c", CHANGE_FOLDER, str(tmp_path / "elsewhere")],
        capture_output=True, text=True, check=True, env=env, cwd=tmp_path,
    ).stdout.split()  # fmt: skip
    assert out == [str(tmp_path / "programs"), str(tmp_path / "cache")]


@pytest.fixture
def unwritable(tmp_path):
    """A cache folder that cannot be written, even by root (chattr +i), or skip."""
    folder = tmp_path / "programs"
    folder.mkdir()
    folder.chmod(0o555)
    if os.access(folder, os.W_OK):
        if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode:
            folder.chmod(0o755)
            pytest.skip("no folder that this user cannot write to")
        yield folder
        subprocess.run(["chattr", "-i", str(folder)], check=True)
    else:
        yield folder
    folder.chmod(0o755)


def test_a_folder_that_cannot_be_written_is_one_warning_line(unwritable, small_csv):
    """A CLI fit wrote 14 lines, one per program JAX could not save."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BERNMF_", "JAX_"))}
    env |= {"BERNMF_COMPILE_CACHE": str(unwritable)}
    out = unwritable.parent / "out"
    done = subprocess.run(
        [sys.executable, "-m", "bernmf", "fit", str(small_csv), "--rank", "2", "--out", str(out)],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if "warning" in line]
    assert warned == [
        f"bernmf: warning: the compilation cache {unwritable} cannot be written: programs are "
        "loaded from it, but new ones are compiled again by every process"
    ]


def test_a_damaged_entry_is_written_again(tmp_path):
    """JAX never replaces an entry: a damaged one made every later process warn and
    compile again."""
    environment = {"BERNMF_COMPILE_CACHE": str(tmp_path)}
    run_fit(environment)
    for entry in cached_files(tmp_path):
        if entry.name.endswith("-cache"):
            entry.write_bytes(entry.read_bytes()[:100])  # as a process killed while writing
    _, second = run_fit(environment)
    assert second["misses"] > 0
    _, third = run_fit(environment)
    assert third["misses"] == 0 and third["hits"] == second["misses"] + second["hits"]


def refusal(folder, reason: str) -> str:
    return (
        f"the compilation cache {folder} is off: {reason}; set BERNMF_COMPILE_CACHE to a "
        "folder that only you can write to, or to off"
    )


def as_root(folder: Path, uid: int = -1, gid: int = -1) -> None:
    """chown ``folder`` (a link itself) to another user or group, or skip unless root."""
    if os.name == "nt" or os.geteuid() != 0:
        pytest.skip("only root gives a folder to another user or group")
    os.lchown(folder, uid, gid)


NOBODY = 65534
"""The uid and gid of nobody and nogroup: neither the user's own nor root's."""


def folder_777(tmp_path):
    (tmp_path / "programs").mkdir(mode=0o777)
    (tmp_path / "programs").chmod(0o777)  # whatever the umask
    return "programs", "it can be written by others (drwxrwxrwx)"


def folder_of_another_user(tmp_path):
    (tmp_path / "programs").mkdir(mode=0o700)
    as_root(tmp_path / "programs", uid=NOBODY)
    return "programs", f"it belongs to another user (uid {NOBODY})"


def folder_of_a_group(tmp_path):
    (tmp_path / "programs").mkdir()
    as_root(tmp_path / "programs", gid=NOBODY)
    (tmp_path / "programs").chmod(0o770)
    return "programs", f"it can be written by its group (gid {NOBODY}) (drwxrwx---)"


def inside_a_folder_others_can_write(tmp_path):
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared").chmod(0o777)
    return "shared/programs", (
        f"{tmp_path / 'shared'} (above it) can be written by others (drwxrwxrwx), without "
        "the sticky bit, so it could be replaced"
    )


def through_a_link_of_another_user(tmp_path):
    (tmp_path / "mine").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "mine")
    as_root(tmp_path / "link", uid=NOBODY)
    return "link", f"it belongs to another user (uid {NOBODY})"


def a_file(tmp_path):
    (tmp_path / "programs").write_text("")
    return "programs", "it is not a folder"


@pytest.mark.parametrize(
    "made",
    [
        folder_777,
        folder_of_another_user,
        folder_of_a_group,
        inside_a_folder_others_can_write,
        through_a_link_of_another_user,
        a_file,
    ],
)
def test_a_folder_that_cannot_be_used_is_refused(tmp_path, monkeypatch, made):
    """Compiled programs are run without checks: a folder that others can write to, or
    could replace, was used silently; a file was left off silently."""
    name, reason = made(tmp_path)
    monkeypatch.setenv("BERNMF_COMPILE_CACHE", str(tmp_path / name))
    assert _cache.usable_compile_cache_dir() == (None, refusal(tmp_path / name, reason))


def test_a_folder_of_yours_is_trusted(tmp_path, monkeypatch):
    """Made with mode 0o700, also inside a folder that others can write with the sticky
    bit (as /tmp): they cannot rename what is yours there."""
    (tmp_path / "sticky").mkdir()
    (tmp_path / "sticky").chmod(0o1777)
    for folder in (tmp_path / "new" / "programs", tmp_path / "sticky" / "programs"):
        monkeypatch.setenv("BERNMF_COMPILE_CACHE", str(folder))
        assert _cache.usable_compile_cache_dir() == (folder, None)
        assert folder.stat().st_mode & 0o777 == 0o700


FOLDER = "a folder (absolute, relative to the working folder, or ~/...)"


@pytest.mark.parametrize(
    ("variable", "value", "accepts"),
    [
        ("BERNMF_CACHE_DIR", "~nouser", FOLDER),
        ("BERNMF_COMPILE_CACHE", "~nouser/x", f"off (0, false, no, none or empty), on (1, "
         f"true, yes) or {FOLDER}"),
    ],
)  # fmt: skip
def test_a_variable_that_cannot_be_used_turns_the_cache_off(monkeypatch, variable, value, accepts):
    monkeypatch.delenv("BERNMF_COMPILE_CACHE", raising=False)
    monkeypatch.setenv(variable, value)
    reason = "'~nouser' is no known user's home folder"
    message = f"the compilation cache is off: {variable} must be {accepts}, got {value!r}: {reason}"
    assert _cache.usable_compile_cache_dir() == (None, message)
    with pytest.raises(ValueError, match=f"^{variable} must be"):
        _cache.compile_cache_dir()


PROGRAMS = """
import json, sys, warnings
warnings.simplefilter("always")  # each warning, however often it comes
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import bernmf, jax, jax.numpy as jnp
    for k in range(3):  # three programs
        jax.jit(lambda x: x * k)(jnp.arange(3.0)).block_until_ready()
print(json.dumps([jax.config.jax_compilation_cache_dir, [str(w.message) for w in caught]]))
"""


def compile_three(environment: dict, **options) -> tuple:
    """(JAX's cache folder, the warnings) of a fresh interpreter compiling three programs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BERNMF_", "JAX_"))}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAMS], capture_output=True, text=True, env=env | environment,
        **options,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return tuple(json.loads(done.stdout))


def test_import_with_a_variable_that_cannot_be_used_is_one_warning_once():
    """BERNMF_CACHE_DIR='~nouser' ended import bernmf in a traceback (from expanduser)."""
    folder, told = compile_three({"BERNMF_CACHE_DIR": "~nouser"})
    assert folder is None and len(told) == 1
    assert told[0].startswith("the compilation cache is off: BERNMF_CACHE_DIR must be a folder")


def test_help_with_a_variable_that_cannot_be_used():
    """bernmf --help ended in the same traceback; it compiles nothing, and says nothing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BERNMF_", "JAX_"))}
    env["BERNMF_COMPILE_CACHE"] = "~nouser/x"
    done = subprocess.run(
        [sys.executable, "-m", "bernmf", "--help"], capture_output=True, text=True, env=env
    )
    assert (done.returncode, done.stderr) == (0, "") and "usage: bernmf" in done.stdout


def bound_by_modes():
    """A ``preexec_fn`` that makes root's child obey file modes (it drops
    CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH), None for another user; or skip."""
    if os.geteuid() != 0:
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def drop() -> None:
        for capability in (1, 2):
            if libc.prctl(24, capability, 0, 0, 0):  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")

    try:
        subprocess.run(["true"], preexec_fn=drop, check=True)
    except (OSError, subprocess.SubprocessError):
        pytest.skip("root, and its capabilities cannot be dropped")
    return drop


@pytest.mark.skipif(os.name == "nt", reason="POSIX modes")
def test_a_folder_that_cannot_be_read_is_one_warning_once(tmp_path):
    """Mode 000: a fit wrote 8 lines, JAX's own for each program it could not read."""
    folder = tmp_path / "programs"
    folder.mkdir(mode=0o700)
    folder.chmod(0)
    try:
        found, told = compile_three(
            {"BERNMF_COMPILE_CACHE": str(folder)}, preexec_fn=bound_by_modes()
        )
    finally:
        folder.chmod(0o700)
    assert (found, told) == (None, [refusal(folder, "it cannot be read")])
