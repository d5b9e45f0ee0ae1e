"""Limits enforced where the work is sized, and messages that name the problem (issue 48,
the fourth hostile round): ranks against the shape, counts of seeds, flags a mode does not
use, and the entries a split or a hold-out leaves."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import bernmf
import bernmf.tune
from bernmf._output import atomic_output, check_output
from bernmf.cli.parser import main
from bernmf.data import datasets
from bernmf.data.files.csv_table import write_csv
from bernmf.data.split import paper_split
from bernmf.fitting.search import search
from bernmf.studies import compare as comparison
from bernmf.studies.report import budget
from bernmf.studies.report import run as report
from bernmf.studies.reproduce import paper


@pytest.fixture(scope="module")
def Y():
    return bernmf.simulate(0, 12, 8, 2)[0]


@pytest.fixture(scope="module")
def halves(Y):
    """Two disjoint halves of Y's entries, a checkerboard, each meeting every row and column."""
    rows, columns = np.indices(Y.shape)
    black = (rows + columns) % 2 == 0
    return black, ~black


def refuse_to_fit(*args, **kwargs):
    raise AssertionError("a fit started before the arguments were checked")


def test_tune_grid_checks_ranks_against_the_shape_before_fitting(Y, halves, monkeypatch):
    """Rank 200000 on 300 x 300 ended in RESOURCE_EXHAUSTED (8.6 GB) after compiling."""
    monkeypatch.setattr(bernmf.tune, "fit_grids", refuse_to_fit)
    train, validation = halves
    with pytest.raises(ValueError, match=r"rank must be <= max\(M, N\) = 12 .* got 200000"):
        bernmf.tune.grid(Y, [2, 200000], mask=train, validation=validation, progress=False)


@pytest.mark.parametrize("seeds", [range(10**8), list(range(10_001))])
def test_compare_refuses_more_seeds_than_it_could_fit(Y, halves, seeds, monkeypatch):
    """range(10**8) was checked seed by seed (minutes) and would have fitted for years."""
    monkeypatch.setattr(comparison, "check_arguments", refuse_to_fit)
    train, test = halves
    with pytest.raises(ValueError, match="seeds holds more than 10,000 values"):
        bernmf.compare(Y, ["mm"], [2], seeds=seeds, train=train, test=test, progress=False)


def test_compare_checks_each_setting_once_and_each_seed(Y, halves, monkeypatch):
    calls = []
    monkeypatch.setattr(comparison, "check_arguments", lambda *a, **k: calls.append(a[:2]))
    monkeypatch.setattr("bernmf.studies.runner.running.run", refuse_to_fit)
    train, test = halves
    with pytest.raises(AssertionError, match="a fit started"):
        bernmf.compare(Y, ["mm", "em"], [2, 3], seeds=range(500), train=train, test=test)
    assert sorted(calls) == [("em", 2), ("em", 3), ("mm", 2), ("mm", 3)]
    with pytest.raises(ValueError, match=r"seed must be in \[0, 2\*\*32 - 1\], got -1"):
        bernmf.compare(Y, ["mm"], [2], seeds=[0, -1], train=train, test=test)


def test_compare_takes_an_engine_named_twice_once(Y, halves):
    """compare --engines mm,mm said "grids must be a non-empty set of labels"."""
    train, test = halves
    made = bernmf.compare(
        Y, ["mm", "mm"], [2, 2], seeds=[0, 0], train=train, test=test, progress=False,
        options={"mm": {"max_iter": 5}},
    )  # fmt: skip
    assert made.summary[["engine", "rank", "fits"]].values.tolist() == [["mm", 2, 1]]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"seeds": range(10**8)}, "seeds holds more than 10,000 values"),
        ({"quick": True, "ranks": [-1]}, "rank must be >= 1, got -1"),
        ({"quick": True, "restarts": 0}, r"restarts must be an integer in \[2, 10000\], got 0"),
        ({"ensembles": ["bogus"]}, "unknown engine 'bogus'"),
        ({"ensembles": ["em"]}, r"ensembles \['em'\] are not among the engines compared"),
    ],
    ids=["seeds", "quick-rank", "quick-restarts", "unknown-ensemble", "ensemble-not-compared"],
)
def test_report_checks_every_argument_quick_or_not(Y, arguments, message, monkeypatch):
    """--quick accepted --ranks -1 and --restarts 0, and --ensembles bogus was dropped."""
    monkeypatch.setattr(budget, "probe", refuse_to_fit)
    with pytest.raises(ValueError, match=message):
        report.run({"tiny": Y}, ["mm"], progress=False, **arguments)


def test_a_budget_of_1e308_seconds_caps_nothing(Y):
    """report --budget 1e308: "cannot convert float infinity to integer"."""
    measured = budget.probe(Y, paper_split(Y.shape), "mm", 2, {}, allowance=1e308)
    assert measured.per_iteration > 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["compare", "--seed", "-1"], "argument --seed: expected an integer in [0, 2**32 - 1]"),
        (["compare", "--seeds", "100000000"], "argument --seeds: expected an integer in [1, "),
        (["report", "--seeds", "0"], "argument --seeds: expected an integer >= 1"),
        (["tune", "--seed", "2**40"], "argument --seed: expected an integer in [0, 2**32 - 1]"),
    ],
)
def test_the_command_line_names_the_flag_of_a_bad_count(capsys, argv, message):
    with pytest.raises(SystemExit) as usage:
        main([*argv, "--out", "never"])
    assert usage.value.code == 2
    assert message in capsys.readouterr().err


def test_report_quick_refuses_the_flags_it_does_not_use(capsys, tmp_path):
    data = tmp_path / "y.csv"
    pd.DataFrame(np.eye(4, dtype=int)).to_csv(data)
    argv = ["report", str(data), "--quick", "--ranks", "3", "--restarts", "5"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "--ranks and --restarts are not used with --quick" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("validation-all", "validation holds 96 of the 96 observed entries"),
        ("validation-outside", "validation holds 0 of the 48 observed entries"),
        ("one-entry", "the search needs at least 2 observed entries of Y, got 1"),
    ],
)
def test_the_search_says_which_entries_are_missing(Y, halves, case, message):
    """Each said "no entry of Y is observed", though Y had observed entries."""
    top, bottom = halves
    arguments = {
        "validation-all": (Y, {"validation": np.ones(Y.shape, bool)}),
        "validation-outside": (Y, {"mask": top, "validation": bottom}),
        "one-entry": (np.array([[1.0, np.nan], [np.nan, np.nan]]), {}),
    }
    data, given = arguments[case]
    with pytest.raises(ValueError, match=message):
        search(data, progress=False, **given)


@pytest.mark.filterwarnings("ignore:6 row.s. and 0 column.s. of Y have no observed entry")
@pytest.mark.parametrize("part", ["train", "test"])
def test_a_split_part_on_missing_entries_is_named(Y, part):
    top = np.zeros(Y.shape, bool)
    top[:6] = True
    bottom = ~top
    data = Y.copy()
    data[6:] = np.nan
    masks = {"train": bottom, "test": top} if part == "train" else {"train": top, "test": bottom}
    with pytest.raises(ValueError, match=f"the split's {part} selects no observed entry of Y"):
        bernmf.compare(data, ["mm"], [2], seeds=[0], progress=False, **masks)


def test_a_value_near_one_is_shown_as_it_is():
    """A long double 1 + 1e-19 was refused "e.g. [1.0]"."""
    Y = np.ones((3, 3), dtype=np.longdouble)
    Y[0, 0] += np.longdouble(1e-19)
    if Y[0, 0] == 1:
        pytest.skip("this platform's long double is a double")
    with pytest.raises(ValueError, match=r"e\.g\. \[1\.0000000000000000001\]"):
        bernmf.fit(Y, "mm", 1)


def test_the_paper_figure_of_infinite_scores_warns_nothing(tmp_path):
    """reproduce paper --quick printed numpy's "invalid value encountered in subtract"."""
    fits = pd.DataFrame(
        {
            "stage": "test",
            "dataset": "animals",
            "method": ["NBMF-EM"] * 2 + ["NBMF-MM"] * 2,
            "perplexity": [np.inf, np.inf, 0.47, 0.46],
        }
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        paper.figure_test(fits, tmp_path / "test.png", "test")
    assert (tmp_path / "test.png").stat().st_size > 0


def test_a_warning_about_a_file_being_written_names_where_it_will_be(tmp_path):
    """The formula-cell warning named the temporary folder, not the file written."""
    out = tmp_path / "results"
    frame = pd.DataFrame({"a": [1]}, index=["=cmd"])
    with pytest.warns(UserWarning, match=r"^\S*results/W\.csv: 1 text cell") as caught:
        with atomic_output(check_output(out, False), folder=True) as folder:
            write_csv(frame, folder / "W.csv")
    assert str(folder) not in str(caught[0].message)
    assert (out / "W.csv").exists()


def test_tune_names_a_split_file_without_training_entries(capsys, tmp_path):
    """It said "no entry of Y is observed" of a split file with no code 2."""
    data, codes = tmp_path / "y.csv", tmp_path / "codes.csv"
    pd.DataFrame(np.eye(6, dtype=int)).to_csv(data)
    np.savetxt(
        codes, np.repeat([[1], [0]], 3, axis=0) * np.ones((1, 6), int), fmt="%d", delimiter=","
    )
    argv = ["tune", str(data), "--split", str(codes), "--ranks", "2", "--out", str(tmp_path / "o")]
    assert main(argv) == 1
    assert f"the split {codes} has no train entry (code 2)" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_a_data_folder_given_must_be_a_folder(tmp_path, monkeypatch, kind):
    """--data-dir /nonexistent fell back to the cache or a download, silently."""
    given = tmp_path / "nowhere"
    if kind == "file":
        given.write_text("x")
    problem = "does not exist" if kind == "missing" else "is not a folder"
    monkeypatch.setattr(datasets, "fetch", refuse_to_fit)
    with pytest.raises(ValueError, match=f"the data folder {given} .data_dir .* {problem}"):
        datasets.load("animals", data_dir=given)
    monkeypatch.setenv("BERNMF_DATA_DIR", str(given))
    with pytest.raises(ValueError, match=f"BERNMF_DATA_DIR='{given}'. {problem}"):
        datasets.load("animals")


def test_an_unusable_data_variable_is_named(monkeypatch):
    monkeypatch.setenv("BERNMF_DATA_DIR", "~nouser-of-bernmf/data")
    with pytest.raises(ValueError, match="BERNMF_DATA_DIR must be a folder"):
        datasets.load("animals")


def test_data_dir_without_a_dataset_is_refused(capsys, tmp_path):
    data = tmp_path / "y.csv"
    pd.DataFrame(np.eye(4, dtype=int)).to_csv(data)
    argv = ["compare", str(data), "--data-dir", str(tmp_path), "--out", str(tmp_path / "o")]
    assert main(argv) == 1
    assert "--data-dir is where --dataset's file is found" in capsys.readouterr().err
