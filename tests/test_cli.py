"""The ``bernmf`` command line: every command, its outputs, errors and exit codes."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import bernmf
import bernmf.data.split
from bernmf import plot
from bernmf.cli import commands
from bernmf.cli import parser as cli
from bernmf.cli.parser import main
from bernmf.data.observed import bits_sha256
from bernmf.studies.reproduce import paper


@pytest.mark.slow
def test_demo_prints_the_table(capsys):
    assert main(["demo", "--rows", "40", "--cols", "30", "--ranks", "2", "3"]) == 0
    out = capsys.readouterr().out
    header = "engine  rank  iterations  train objective  held-out perplexity  seconds"
    assert header in out
    assert out.count("\n    em ") == 2 and out.count("\n    mm ") == 2
    assert "true W @ H: held-out perplexity" in out


def test_bad_arguments_exit_with_a_message(capsys):
    assert main(["demo", "--rows", "10", "--cols", "8", "--ranks", "0"]) == 1
    assert "bernmf: error: rank must be >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["nonsense"])
    assert usage.value.code == 2


def test_a_warning_raised_alike_by_many_fits_is_written_once(monkeypatch, capsys):
    """As report --quick's fits, each under its own filters (which undo Python's
    once-per-place rule): the same text once, another text once."""

    def command(args):
        for text in ("P(Y=1) is exactly 0", "P(Y=1) is exactly 0", "other", "P(Y=1) is exactly 0"):
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "unrelated", UserWarning)
                warnings.warn(text, bernmf.ZeroProbabilityWarning, stacklevel=1)
        return 0

    monkeypatch.setattr(cli, "demo", command)
    assert main(["demo"]) == 0
    err = capsys.readouterr().err
    assert err.count("bernmf: warning: P(Y=1) is exactly 0\n") == 1
    assert err.count("bernmf: warning: other\n") == 1


@pytest.fixture(scope="module")
def data_csv(tmp_path_factory):
    """A 30 x 20 labelled CSV with one empty (missing) cell, and its matrix."""
    Y, _, _ = bernmf.simulate(1, 30, 20, 3, bernmf.Prior(0.3, 0.3))
    Y[0, 0] = np.nan
    frame = pd.DataFrame(
        Y, index=[f"r{i}" for i in range(30)], columns=[f"c{j}" for j in range(20)]
    )
    path = tmp_path_factory.mktemp("data") / "data.csv"
    frame.to_csv(path, na_rep="")
    return path, frame


@pytest.mark.parametrize("command", ["fit", "compare", "tune", "reproduce", "demo"])
def test_every_command_has_help_with_an_example(command, capsys):
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    assert "example" in capsys.readouterr().out


@pytest.mark.slow
def test_fit_writes_labelled_results_that_load_back(data_csv, tmp_path, capsys):
    path, frame = data_csv
    out = tmp_path / "fit"
    mask = tmp_path / "mask.npz"
    keep = np.ones(frame.shape, bool)
    keep[:, :5] = False
    np.savez(mask, Y=keep)
    argv = ["fit", str(path), "--rank", "3", "--alpha", "1.2", "--mask", str(mask), "--json"]
    assert main([*argv, "--max-iter", "40", "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["observed_entries"] == 30 * 15 - 0  # the missing cell is in a masked column
    assert summary["options"] == {"max_iter": 40} and summary["n_iter"] <= 40
    assert {p.name for p in out.iterdir()} == {
        "W.csv",
        "H.csv",
        "top_columns.csv",
        "top_rows.csv",
        "trace.csv",
        "summary.json",
        "fit.npz",
        "factors.png",
        "trace.png",
    }
    W = pd.read_csv(out / "W.csv", index_col=0)
    assert list(W.index) == list(frame.index)
    saved = bernmf.load(out / "fit.npz")
    np.testing.assert_allclose(W.to_numpy(), saved.W)
    np.testing.assert_array_equal(saved.observed.mask, keep & frame.notna().to_numpy())
    assert list(pd.read_csv(out / "H.csv", index_col=0).columns) == list(frame.columns)
    run = json.loads((out / "summary.json").read_text())["run"]
    assert run["options"]["max_iter"] == 40 and run["options"]["tol"] == 1e-5  # a default
    assert run["seeds"] == [0] and run["data"]["mask_sha256"] == bits_sha256(saved.observed.mask)
    top = pd.read_csv(out / "top_columns.csv")
    assert list(top.columns) == ["component", "rank", "column", "H", "lift"] and len(top) == 3 * 10
    assert set(top["column"]) <= set(frame.columns)
    rows = pd.read_csv(out / "top_rows.csv")
    assert list(rows.columns) == ["component", "rank", "row", "W"] and len(rows) == 3 * 10
    first = rows[rows["component"] == "component_0"]
    np.testing.assert_allclose(first["W"], np.sort(saved.W[:, 0])[::-1][:10])

    assert main([*argv, "--out", str(out)]) == 1  # never overwritten without --force
    assert "exists; use --force" in capsys.readouterr().err
    assert main([*argv, "--seed", "5", "--out", str(out), "--force"]) == 0
    assert bernmf.load(out / "fit.npz").seed == 5
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_fit_shows_the_top_columns_of_each_component(data_csv, tmp_path, capsys):
    path, _frame = data_csv
    argv = ["fit", str(path), "--rank", "2", "--max-iter", "30", "--out", str(tmp_path / "f")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    lines = [line.strip() for line in out.splitlines() if line.strip().startswith("component_")]
    top = pd.read_csv(tmp_path / "f" / "top_columns.csv")
    assert len(lines) == 4  # the top columns, then the top rows, of each component
    first = top[top["component"] == "component_0"].head(5)
    named = ", ".join(f"{c} {h:.2f}" for c, h in zip(first["column"], first["H"], strict=True))
    assert lines[0] == f"component_0: {named}, ..."


def test_fit_warns_of_empty_and_duplicate_components_and_lists_them(
    data_csv, tmp_path, capsys, monkeypatch
):
    """Components flagged as empty or duplicates are warned of and listed in summary.json;
    a fit without any says nothing of them (the fits made here, the command's fit replaced)."""
    path, frame = data_csv
    fit = bernmf.fit(frame, "mm", 2, max_iter=30)
    assert fit.duplicate_components() == [] and fit.empty_components() == []

    def split(share):  # the last component split in two of the same H
        W = np.column_stack([fit.W[:, 0], fit.W[:, 1] * (1 - share), fit.W[:, 1] * share])
        return dataclasses.replace(fit, rank=3, W=W, H=np.vstack([fit.H, fit.H[1]]))

    cases = {  # name: (fit, empty, duplicates, warning)
        "plain": (fit, [], [], None),
        "duplicate": (
            split(0.5), [], [["component_1", "component_2"]],
            "1 pair(s) of the 3 components shown (component_1 and component_2) have nearly "
            "the same H",
        ),
        "empty": (
            split(0.5 / fit.W[:, 1].sum()), ["component_2"], [],
            "1 of the 3 components shown (component_2) hold less than one row in all",
        ),
    }  # fmt: skip
    for name, (result, empty, duplicates, warning) in cases.items():
        monkeypatch.setattr(commands, "fit", lambda *args, result=result, **options: result)
        argv = ["fit", str(path), "--rank", str(result.rank), "--out", str(tmp_path / name)]
        assert main(argv) == 0
        err = capsys.readouterr().err
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        assert summary["empty_components"] == empty
        assert summary["duplicate_components"] == duplicates
        if warning is None:
            assert "components shown" not in err
        else:
            assert f"bernmf: warning: {warning}" in err and err.count("components shown") == 1


def test_row_groups_reach_the_factor_plot_by_the_rows_labels_as_written(
    data_csv, tmp_path, monkeypatch
):
    """--row-groups: each row's group, by its name in DATA (its position without names),
    for factors.png, the groups in the file's order; rows left out are ungrouped."""
    path, frame = data_csv
    drawn = {}
    factors = plot.factors

    def spy(result, **options):
        drawn["groups"] = options["row_groups"]
        return factors(result, **options)

    monkeypatch.setattr(plot, "factors", spy)
    unnamed = tmp_path / "unnamed.npz"
    np.savez(unnamed, Y=np.nan_to_num(frame.to_numpy()))
    for data, rows, Y in [(path, frame.index, frame), (unnamed, range(30), np.load(unnamed)["Y"])]:
        fit = bernmf.fit(Y, "mm", 2, max_iter=30)
        monkeypatch.setattr(commands, "fit", lambda *args, fit=fit, **options: fit)
        groups = tmp_path / "groups.csv"
        lines = [f"{rows[m]},{'b' if m % 2 else 'a'}" for m in range(29, 9, -1)]  # 0-9 out
        groups.write_text("row,group\n" + "\n".join(lines) + "\n")
        out = tmp_path / f"out-{data.stem}"
        argv = ["fit", str(data), "--rank", "2", "--row-groups", str(groups), "--out", str(out)]
        assert main([*argv, "--quiet"]) == 0
        assert drawn["groups"] == {rows[m]: "b" if m % 2 else "a" for m in range(10, 30)}
        assert list(dict.fromkeys(drawn["groups"].values())) == ["b", "a"]  # the file's order
        assert (out / "factors.png").stat().st_size > 1000


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("row,group\nr0,a\nx,b\n", r"--row-groups \S+ names 1 label\(s\) that are no row's: \['x"),
        ("r0,a\nr1,b\n", r"\S+groups.csv: the file names the row 'r0': it starts with a header"),
        ("row,group\nr0,a,b\n", r"\S+groups.csv: line 2 has 3 cell\(s\)"),
        ("row,group\nr0,a\nr0,b\n", r"--row-groups \S+ gives the rows \['r0'\] a group more"),
    ],
)  # fmt: skip
def test_row_groups_that_do_not_fit_data_are_an_error_before_any_fit(
    data_csv, tmp_path, capsys, monkeypatch, text, message
):
    path, _ = data_csv
    groups = tmp_path / "groups.csv"
    groups.write_text(text)

    def no_fit(*args, **options):
        raise AssertionError("fitted")

    monkeypatch.setattr(commands, "fit", no_fit)
    for rank in (["--rank", "2"], []):  # one fit, or a search
        argv = ["fit", str(path), *rank, "--row-groups", str(groups), "--out", str(tmp_path / "o")]
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert re.match(f"bernmf: error: {message}", err) and err.count("\n") == 1, err
        assert not (tmp_path / "o").exists()
    argv = ["fit", str(path), "--rank", "2", "--row-groups", str(groups), "--distributed"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "--row-groups colours factors.png, which --distributed does not draw" in err


@pytest.mark.slow
def test_fit_of_a_stacked_ensemble_lists_its_members(data_csv, tmp_path, capsys):
    path, frame = data_csv
    keep = np.ones(frame.shape, bool)
    keep[:, :5] = False
    held_out = ~keep
    held_out[0, 0] = False  # the missing cell
    np.savez(tmp_path / "mask.npz", Y=keep)
    np.savez(tmp_path / "validation.npz", Y=held_out)
    out = tmp_path / "ensemble"
    # beta > 1 too: the held-out columns have no training entry, and a flat beta would put
    # their H at exactly 1, so that a held-out 0 scores inf (no longer a clipped number)
    argv = ["fit", str(path), "--rank", "3", "--alpha", "1.2", "--beta", "1.2", "--json"]
    argv += ["--mask", str(tmp_path / "mask.npz"), "--validation", str(tmp_path / "validation.npz")]
    argv += ["--max-iter", "40"]
    assert main([*argv, "--restarts", "3", "--combine", "stack", "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    members = pd.read_csv(out / "members.csv")
    assert list(members["seed"]) == [0, 1, 2] and np.isclose(members["weight"].sum(), 1)
    assert summary["ensemble"]["members"] == 3
    assert summary["ensemble"]["modes"] == members["mode"].nunique()
    saved = bernmf.load(out / "fit.npz")
    assert np.isclose(summary["validation_perplexity"], saved.perplexity(frame, held_out))


def test_errors_are_one_line_and_debug_shows_the_traceback(data_csv, tmp_path, capsys):
    path, _ = data_csv
    argv = ["fit", str(path), "--rank", "2", "--engine", "nope", "--out", str(tmp_path / "x")]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("bernmf: error: unknown engine 'nope'") and err.count("\n") == 1
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="unknown engine"):
        main([*argv, "--debug"])
    with pytest.raises(SystemExit) as usage:
        main(["compare", "--ranks", "two", "--out", str(tmp_path / "y")])
    assert usage.value.code == 2


@pytest.mark.slow
def test_compare_on_simulated_data_offline(tmp_path, capsys):
    out = tmp_path / "compare"
    argv = ["compare", "--rows", "40", "--cols", "30", "--ranks", "2,3", "--seeds", "2"]
    assert main([*argv, "--option", "mm.max_iter=300", "--json", "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    table = pd.read_csv(out / "summary.csv")
    assert table[["engine", "rank"]].values.tolist() == [["mm", 2], ["mm", 3], ["em", 2], ["em", 3]]
    assert (table["fits"] == 2).all() and table["perplexity"].between(0.2, 3).all()
    assert summary["options"] == {"mm": {"max_iter": 300}}
    fits = pd.read_csv(out / "fits.csv")
    assert (fits.loc[fits["engine"] == "mm", "iterations"] <= 300).all()
    assert (fits.loc[fits["engine"] == "em", "prior"] == "none").all()
    assert (out / "perplexity.png").stat().st_size > 1000


@pytest.mark.slow
def test_tune_with_a_split_file(data_csv, tmp_path, capsys):
    path, frame = data_csv
    codes = bernmf.data.split.random_split(frame.shape, seed=3).codes()
    np.savez(tmp_path / "split.npz", Y=codes)
    out = tmp_path / "tune"
    argv = ["tune", str(path), "--split", str(tmp_path / "split.npz"), "--ranks", "2,3"]
    argv += ["--extend", "0"]  # the grid as given
    assert main([*argv, "--alphas", "1,2", "--betas", "1.5", "--quiet", "--out", str(out)]) == 0
    assert capsys.readouterr().out == ""
    grid = pd.read_csv(out / "grid.csv")
    assert len(grid) == 4
    best = json.loads((out / "summary.json").read_text())["best"]
    top = grid.loc[grid["validation_perplexity"].idxmin()]
    assert (best["rank"], best["alpha"]) == (top["rank"], top["alpha"])
    assert bernmf.load(out / "best_fit.npz").rank == best["rank"]

    argv += ["--alphas", "1,2", "--betas", "1.5", "--restarts", "2", "--combine", "mean"]
    assert main([*argv, "--quiet", "--out", str(tmp_path / "ensembles")]) == 0
    ensembles = pd.read_csv(tmp_path / "ensembles" / "ensembles.csv")
    assert len(ensembles) == 4 and (ensembles["members"] == 2).all()
    assert len(bernmf.load(tmp_path / "ensembles" / "best_fit.npz").members) == 2


def test_reproduce_refuses_an_existing_results_folder(tmp_path, capsys):
    (tmp_path / "corrected").mkdir()
    assert main(["reproduce", "paper", "--quick", "--out", str(tmp_path)]) == 1
    assert "use --force" in capsys.readouterr().err


def test_demo_json_is_machine_readable(capsys):
    assert main(["demo", "--rows", "20", "--cols", "12", "--ranks", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [f["engine"] for f in result["fits"]] == ["em", "mm"]
    assert 0 < result["true_perplexity"] < 1


def test_reproduce_runs_the_paper_script_with_the_options(tmp_path, monkeypatch, capsys):
    """The command hands its options to bernmf.studies.reproduce.paper.main (here a stand-in that
    records them; tests/test_paper_quick.py runs the real one)."""

    def stand_in(argv):
        out = Path(argv[argv.index("--out") + 1]) / "as_published"
        out.mkdir(parents=True)
        (out / "summary.csv").write_text("dataset,test_perplexity\nanimals,0.5\n")
        (out / "argv.json").write_text(json.dumps(argv))
        print("progress that --json keeps off stdout")
        return 0

    monkeypatch.setattr(paper, "main", stand_in)
    out = tmp_path / "results"
    argv = ["reproduce", "paper", "--as-published", "--quick", "--data-dir", "d", "--json"]
    assert main([*argv, "--out", str(out)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["summary"] == [{"dataset": "animals", "test_perplexity": 0.5}]
    passed = json.loads((out / "as_published" / "argv.json").read_text())
    assert passed == ["--out", str(out), "--as-published", "--quick", "--quiet", "--data-dir", "d"]


def test_ctrl_c_exits_130_in_one_line_and_leaves_nothing(data_csv, tmp_path, monkeypatch, capsys):
    path, _ = data_csv

    def interrupted(*args, **kwargs):  # Ctrl-C while the results are being written
        raise KeyboardInterrupt

    monkeypatch.setattr(plot, "traces", interrupted)
    out = tmp_path / "fit"
    assert main(["fit", str(path), "--rank", "2", "--max-iter", "5", "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == "bernmf: interrupted" and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_force_never_deletes_the_current_folder_or_the_data(
    data_csv, tmp_path, monkeypatch, capsys
):
    path, _ = data_csv
    argv = ["fit", str(path), "--rank", "2", "--force", "--out"]
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "."]) == 1
    assert "current folder" in capsys.readouterr().err
    assert main([*argv, str(path.parent)]) == 1
    assert f"contains the input {path}" in capsys.readouterr().err
    assert path.is_file() and list(tmp_path.iterdir()) == []


def test_a_labelled_mask_csv_is_aligned_to_the_data(data_csv, tmp_path, capsys):
    """A mask CSV with the rows of DATA in another order fits the same entries; one with
    other row names is refused, naming them."""
    path, frame = data_csv
    keep = pd.DataFrame(np.ones(frame.shape, int), index=frame.index, columns=frame.columns)
    keep.iloc[:4, :] = 0
    keep.iloc[::-1].to_csv(tmp_path / "mask.csv")
    out = tmp_path / "fit"
    argv = ["fit", str(path), "--rank", "2", "--mask", str(tmp_path / "mask.csv"), "--quiet"]
    assert main([*argv, "--max-iter", "5", "--out", str(out)]) == 0
    saved = bernmf.load(out / "fit.npz")
    expected = keep.to_numpy().astype(bool) & frame.notna().to_numpy()
    np.testing.assert_array_equal(saved.observed.mask, expected)
    keep.rename(index={"r3": "stranger"}).to_csv(tmp_path / "other.csv")
    argv[5] = str(tmp_path / "other.csv")
    assert main([*argv, "--out", str(tmp_path / "again")]) == 1
    assert "['r3']" in capsys.readouterr().err


def test_tune_with_a_codes_csv_like_the_papers(data_csv, tmp_path, capsys):
    """The paper's split files hold codes 2/1/0, no header and no row names."""
    path, frame = data_csv
    codes = bernmf.data.split.random_split(frame.shape, seed=3).codes()
    np.savetxt(tmp_path / "codes.csv", codes, fmt="%d", delimiter=",")
    out = tmp_path / "tune"
    argv = ["tune", str(path), "--split", str(tmp_path / "codes.csv"), "--ranks", "2"]
    assert main([*argv, "--alphas", "1", "--betas", "1", "--json", "--out", str(out)]) == 0
    assert "codes from" in json.loads(capsys.readouterr().out)["split"]
    best = bernmf.load(out / "best_fit.npz")
    np.testing.assert_array_equal(best.observed.mask, (codes == 2) & frame.notna().to_numpy())
    np.savetxt(tmp_path / "bad.csv", codes[:, :-1], fmt="%d", delimiter=",")
    argv[3] = str(tmp_path / "bad.csv")
    assert main([*argv, "--out", str(tmp_path / "again")]) == 1
    assert "has shape (30, 19) but DATA has shape (30, 20)" in capsys.readouterr().err


def test_compare_refuses_zero_seeds(capsys):
    with pytest.raises(SystemExit) as usage:
        main(["compare", "--seeds", "0", "--out", "unused"])
    assert usage.value.code == 2
    assert "--seeds: expected an integer >= 1, got '0'" in capsys.readouterr().err


def test_a_large_mostly_zero_csv_gets_the_hint_to_store_it_sparse(tmp_path, capsys):
    import argparse
    import gzip

    Y = np.zeros((1000, 1000), dtype=int)
    Y[np.arange(1000), np.arange(1000)] = 1  # 0.1% ones
    path = tmp_path / "graph.csv.gz"
    with gzip.open(path, "wt") as file:
        file.write("\n".join(",".join(map(str, row)) for row in Y) + "\n")
    args = argparse.Namespace(quiet=False, json=False)
    assert np.array_equal(commands.read_data(args, path).to_numpy(), Y)
    captured = capsys.readouterr()
    assert "is 0.10% ones: stored sparse (scipy.sparse.save_npz" in captured.err
    assert captured.out == ""
    Y[:, :50] = 1
    pd.DataFrame(Y).to_csv(tmp_path / "dense.csv", index=False, header=False)
    capsys.readouterr()
    commands.read_data(args, tmp_path / "dense.csv")
    assert capsys.readouterr().err == ""


TUNE_ENGINES = {"engines": ("mm", "em")}

REPORT_DEFAULTS = {"shared_rank": 5, "seeds": range(2)}
REPORT_READ = {"seeds": 2}


@pytest.mark.parametrize(
    ("function", "command", "changed", "read"),
    [
        (bernmf.api.fit, ["fit", "d.csv", "--rank", "2", "--out", "o"], {"seed": 7}, {"seed": 7}),
        (bernmf.api.fit, ["fit", "d.csv", "--rank", "2", "--out", "o"], {"restarts": 3}, {}),
        (bernmf.api.fit, ["fit", "d.csv", "--rank", "2", "--out", "o"], {"combine": "mean"}, {}),
        (bernmf.api.fit, ["fit", "d.csv", "--rank", "2", "--out", "o"], {"engine": "em"}, {}),
        (bernmf.tune.grid, ["tune", "--out", "o"], {"gamma": 0.5, "restarts": 2, "seed": 4}, {}),
        (bernmf.tune.grid, ["tune", "--out", "o"], TUNE_ENGINES, {"engines": ["mm", "em"]}),
        (bernmf.compare, ["compare", "--out", "o"], {"seeds": range(5)}, {"seeds": 5}),
        (bernmf.studies.report.run.run, ["report", "--out", "o"], REPORT_DEFAULTS, REPORT_READ),
    ],
)
def test_the_commands_take_their_defaults_from_the_functions_they_call(
    function, command, changed, read, monkeypatch
):
    """No default written twice: a command's default (and its help) is the one the
    function it calls declares, read from that function's signature."""
    from bernmf.cli.parser import build_parser

    code = function.__code__
    positional = code.co_varnames[: code.co_argcount]
    defaults = list(function.__defaults__)
    named = positional[len(positional) - len(defaults) :]
    defaults = [changed.get(name, value) for name, value in zip(named, defaults, strict=True)]
    keywords = {k: v for k, v in changed.items() if k not in positional}
    monkeypatch.setattr(function, "__defaults__", tuple(defaults))
    monkeypatch.setattr(function, "__kwdefaults__", {**function.__kwdefaults__, **keywords})
    args = vars(build_parser().parse_args(command))
    for name, value in changed.items():
        assert args[name] == read.get(name, value), name


def test_an_out_that_cannot_be_written_fails_before_the_work(data_csv, tmp_path, capsys):
    """It failed after the whole run, naming the internal temporary path."""
    path, _ = data_csv
    (tmp_path / "file").write_text("x")
    for out, message in [
        (tmp_path / "file" / "out", f"cannot write {tmp_path}/file/out: {tmp_path}/file is not"),
        (tmp_path / ("a" * 256), "is 256 bytes long, more than the 255"),
    ]:
        assert main(["fit", str(path), "--rank", "2", "--out", str(out)]) == 1
        err = capsys.readouterr().err
        assert message in err and "fitting" not in err and ".tmp" not in err
    out = tmp_path / "new" / "folders" / "out"  # made when the results are written
    assert main(["fit", str(path), "--rank", "2", "--max-iter", "5", "--out", str(out)]) == 0
    assert (out / "fit.npz").is_file()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--coordinator", "127.0.0.1"], "--coordinator must be host:port"),
        (["--coordinator", "127.0.0.1:http"], "--coordinator must be host:port"),
        (["--coordinator", ":1234"], "--coordinator must be host:port"),
        (["--coordinator", "h:1234", "--num-processes", "two"], "--num-processes must be an"),
        (["--coordinator", "h:1234", "--process-id", "first"], "--process-id must be an"),
    ],
)
def test_distributed_arguments_are_refused_in_their_words(
    data_csv, tmp_path, capsys, options, message
):
    """--coordinator without a port said "list index out of range"."""
    path, _ = data_csv
    given = {"--num-processes": "2", "--process-id": "0"}
    for flag, value in zip(options[::2], options[1::2], strict=True):
        given[flag] = value
    argv = ["fit", str(path), "--rank", "2", "--distributed", "--out", str(tmp_path / "out")]
    assert main(argv + [item for pair in given.items() for item in pair]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"bernmf: error: {message}") and err.count("\n") == 1


def strict_json(text: str):
    """``json.loads`` that refuses JSON's non-standard NaN and Infinity."""

    def refuse(name):
        raise ValueError(f"not standard JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_fit_warns_in_flags_and_writes_an_inf_perplexity_as_a_string(tmp_path, capsys):
    """Column 0 all zeros in training: alpha = 1 puts its H at exactly 0, and its held-out
    ones score inf. Each warning is one line whose advice is flags, never Python; the inf
    validation perplexity is the string "inf" in standard JSON. The default prior warns of
    nothing."""
    Y = (np.random.default_rng(0).random((30, 12)) < 0.5).astype(float)
    Y[:25, 0], Y[25:, 0] = 0.0, 1.0
    keep = np.ones(Y.shape, bool)
    keep[25:, :6] = False
    pd.DataFrame(Y).to_csv(tmp_path / "data.csv")
    np.savez(tmp_path / "mask.npz", Y=keep)
    np.savez(tmp_path / "validation.npz", Y=~keep)
    argv = ["fit", str(tmp_path / "data.csv"), "--rank", "2", "--json"]
    argv += ["--mask", str(tmp_path / "mask.npz"), "--validation", str(tmp_path / "validation.npz")]
    assert main([*argv, "--alpha", "1", "--beta", "1.2", "--out", str(tmp_path / "flat")]) == 0
    out, err = capsys.readouterr()
    assert strict_json(out)["validation_perplexity"] == "inf"
    saved = strict_json((tmp_path / "flat" / "summary.json").read_text())
    assert saved["validation_perplexity"] == "inf"
    warned = err.splitlines()
    assert len(warned) == 2  # the certain predictions, the validation perplexity
    assert all(line.startswith("bernmf: warning: ") for line in warned)
    assert all(line.endswith("; --alpha 1.2 --beta 1.2 keeps H inside (0, 1)") for line in warned)
    assert main([*argv, "--out", str(tmp_path / "default")]) == 0
    out, err = capsys.readouterr()
    assert err == "" and np.isfinite(strict_json(out)["validation_perplexity"])


@pytest.mark.parametrize(
    ("command", "advice"),
    [
        ("fit", "; --alpha 1.2 --beta 1.2 keeps H inside (0, 1)"),
        ("tune", "; --alphas 1.2 --betas 1.2 keeps H inside (0, 1)"),
        ("report", " entries"),  # report chooses its priors: the fact alone
        ("demo", " entries"),  # demo's --alpha is the simulation's
    ],
)
def test_a_warning_advises_in_the_flags_of_its_command(command, advice, capsys):
    from bernmf.cli.parser import warning_printer
    from bernmf.models.spec import Prior, ZeroProbabilityWarning

    warning = ZeroProbabilityWarning.of("P(Y=1) is 0 at 3 held-out entries", "mm", Prior.flat())
    warning_printer(command)(warning, ZeroProbabilityWarning, "x.py", 1)
    assert capsys.readouterr().err.rstrip("\n").endswith(advice)
    em = ZeroProbabilityWarning.of("P(Y=1) is 0 at 3 held-out entries", "em", None)
    warning_printer(command)(em, ZeroProbabilityWarning, "x.py", 1)
    expected = {"fit": "--engine mm", "tune": "--engines mm"}.get(command, "entries")
    assert expected in capsys.readouterr().err


def test_json_writes_every_number_and_none_as_null():
    """NaN and infinities as strings that float() reads back; None (no value) as null."""
    from bernmf._output import to_json

    values = {"inf": np.inf, "minus": -np.float32("inf"), "nan": float("nan"), "none": None}
    written = json.dumps(to_json({**values, "list": [1.5, np.array([np.inf, 2.0])]}))
    read = strict_json(written)
    assert read == {
        "inf": "inf", "minus": "-inf", "nan": "nan", "none": None, "list": [1.5, ["inf", 2.0]]
    }  # fmt: skip
    assert float(read["minus"]) == -np.inf and np.isnan(float(read["nan"]))


def test_report_passes_its_functions_defaults_for_the_flags_left_out(tmp_path, monkeypatch):
    """--ranks and --restarts parse to None when left out (--quick refuses them given): the
    command passes the defaults that report.run declares; --ensembles left out is None,
    report.run's own default (its ENSEMBLES among the engines)."""
    seen, real = {}, bernmf.studies.report.run.run

    @functools.wraps(real)  # its signature, so its declared defaults, are the real one's
    def run(data, engines=None, **kwargs):
        seen.update(kwargs)
        raise RuntimeError("stopped before fitting")

    monkeypatch.setattr(bernmf.studies.report.run, "run", run)
    data = tmp_path / "y.csv"
    pd.DataFrame(np.eye(4, dtype=int)).to_csv(data)
    assert main(["report", str(data), "--out", str(tmp_path / "o")]) == 1
    declared = inspect.signature(real).parameters
    assert seen["ranks"] == declared["ranks"].default
    assert seen["restarts"] == declared["restarts"].default
    assert seen["ensembles"] is None
