"""bernmf's CSV outputs: labels kept exactly, quoted, and a warning for would-be formulas."""

from __future__ import annotations

import csv
import io
import re
import warnings

import numpy as np
import pandas as pd
import pytest

from bernmf.cli.parser import main
from bernmf.data import datasets
from bernmf.data.files.csv_table import write_csv

HOSTILE = ["=cmd|' /C calc'!A0", "+SUM(A1:A9)", "-M-", "@user", "\tTab", "=1+1", "plain"]
"""Labels that start a formula in a spreadsheet (and a plain one)."""
UNQUOTED_FORMULA = re.compile(r"(^|,)([=+@\t]|-(?![\d.]))")
"""A cell that starts a formula outside quotes (a number such as -0.5 is no formula)."""


def unquoted_formulas(text: str) -> list[str]:
    return [line for line in text.splitlines() if UNQUOTED_FORMULA.search(line)]


def test_labels_that_start_formulas_are_quoted_and_read_back_exactly_by_pandas(tmp_path):
    frame = pd.DataFrame(
        {"weight": np.linspace(-1, 1, 7), "name": HOSTILE[::-1], "count": range(7)},
        index=pd.Index(HOSTILE, name="label"),
    )
    frame.loc["plain", "weight"] = np.nan
    path = tmp_path / "out.csv"
    with pytest.warns(UserWarning, match=r"out.csv: 12 text cell\(s\) start with =, \+, -, @"):
        write_csv(frame, path)
    text = path.read_text()
    assert not unquoted_formulas(text), text
    assert "\"=cmd|' /C calc'!A0\"" in text and ",-1.0," in text  # numbers stay numbers
    back = pd.read_csv(path, index_col=0, keep_default_na=False, na_values=[""])
    pd.testing.assert_frame_equal(back, frame, check_dtype=False)
    assert list(back.index) == HOSTILE and list(back["name"]) == HOSTILE[::-1]


def test_the_check_sees_an_unquoted_formula():
    # the test above cannot pass by finding nothing
    plain = pd.DataFrame({"a": [1]}, index=["=1+1"]).to_csv()
    assert unquoted_formulas(plain) == ["=1+1,1"]
    assert not unquoted_formulas('"=1+1",-0.5,1e-3\n')


def test_a_binary_table_with_such_labels_reads_back_through_bernmf(tmp_path):
    Y = (np.random.default_rng(0).random((7, 7)) < 0.5).astype(np.int64)
    frame = pd.DataFrame(Y, index=HOSTILE, columns=HOSTILE[::-1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        write_csv(frame, tmp_path / "y.csv")
    back = datasets.read_csv(tmp_path / "y.csv")
    pd.testing.assert_frame_equal(back, frame, check_index_type=False, check_column_type=False)


def test_numbers_and_plain_text_give_no_warning(tmp_path):
    frame = pd.DataFrame({"x": [-1.5, 2.0]}, index=["-1", "+44"])  # numbers, as text too
    frame["engine"] = ["mm", "em"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        write_csv(frame, tmp_path / "y.csv")
    rows = list(csv.reader(io.StringIO((tmp_path / "y.csv").read_text())))
    assert rows == [["", "x", "engine"], ["-1", "-1.5", "mm"], ["+44", "2.0", "em"]]


def test_fit_outputs_keep_hostile_labels_quoted(tmp_path, capsys):
    rng = np.random.default_rng(1)
    names = [*HOSTILE, *(f"r{i}" for i in range(13))]
    frame = pd.DataFrame((rng.random((20, 7)) < 0.4).astype(int), index=names, columns=HOSTILE)
    pd.DataFrame(frame).to_csv(tmp_path / "data.csv")
    out = tmp_path / "fit"
    argv = ["fit", str(tmp_path / "data.csv"), "--rank", "2", "--max-iter", "5", "--quiet"]
    assert main([*argv, "--out", str(out)]) == 0
    assert "text cell(s) start with =, +, -, @" in capsys.readouterr().err
    for name in ("W.csv", "H.csv", "top_columns.csv"):
        assert not unquoted_formulas((out / name).read_text()), name
    assert list(pd.read_csv(out / "W.csv", index_col=0).index) == names
    assert list(pd.read_csv(out / "H.csv", index_col=0).columns) == HOSTILE
    assert set(pd.read_csv(out / "top_columns.csv")["column"]) <= set(HOSTILE)
