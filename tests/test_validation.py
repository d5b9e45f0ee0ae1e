"""Bad input gets a clear error before anything is compiled; good input of every kind works."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from helpers import count_reads
from scipy import sparse

import bernmf
import bernmf.data.split
from bernmf.data.observed import as_observed
from bernmf.inference._compile import cache_size

Y = (np.random.default_rng(0).random((6, 5)) < 0.5).astype(float)
MEMORY = r"fit \(restarts=600, max_iter=1000000\) would need 4.8 GB, more than the memory limit"


@pytest.mark.parametrize(
    ("data", "kwargs", "error", "message"),
    [
        (Y * 2, {}, ValueError, "only 0, 1 or NaN"),
        (np.where(Y == 1, 0.5, 0), {}, ValueError, r"e.g. \[0.5\]"),
        (np.full((3, 3), "a"), {}, TypeError, "must be numeric"),
        (Y.astype(complex), {}, TypeError, "must be numeric"),
        (np.array([[1, None], [0, 1]], dtype=object), {}, TypeError, "must be numeric"),
        (Y[0], {}, ValueError, "must be 2-D"),
        (Y[None], {}, ValueError, "must be 2-D"),
        (np.zeros((0, 4)), {}, ValueError, "empty"),
        (np.where(Y == 1, np.inf, 0), {}, ValueError, "inf"),
        (Y, {"mask": np.ones((5, 6), bool)}, ValueError, r"mask has shape \(5, 6\)"),
        (Y, {"mask": np.full(Y.shape, 2)}, TypeError, "mask must be boolean"),
        (Y, {"mask": np.zeros(Y.shape, bool)}, ValueError, "no entry of Y is observed"),
        (np.full((2, 2), np.nan), {}, ValueError, "no entry of Y is observed"),
        (Y, {"rank": 0}, ValueError, "rank must be >= 1"),
        (Y, {"rank": 2.5}, TypeError, "rank must be an integer"),
        (Y, {"rank": "3"}, TypeError, "rank must be an integer"),
        (Y, {"rank": True}, TypeError, "rank must be an integer"),
        (Y, {"rank": None, "restarts": 3}, ValueError, "restarts sets up one fit: give rank="),
        (Y, {"prior": bernmf.Prior(alpha=[1.0, 2.0, 3.0])}, ValueError, "length rank=2"),
        (Y, {"prior": bernmf.Prior(beta=np.ones((2, 2)))}, ValueError, "length rank=2"),
        (Y, {"prior": bernmf.Prior(alpha=0.5)}, ValueError, "'mm' needs prior alpha >= 1"),
        (Y, {"prior": bernmf.Prior(gamma=[1.0, 0.9])}, ValueError, "prior gamma >= 1"),
        (Y, {"prior": (1.0, 1.0, 1.0)}, TypeError, "must be a bernmf.Prior"),
        (Y, {"engine": "nmf"}, ValueError, "unknown engine 'nmf'; known engines: .*em.*mm"),
        (Y, {"max_iter": 0}, ValueError, "max_iter must be an integer in \\[1, 1000000\\]"),
        (Y, {"tol": -1.0}, ValueError, "tol must be"),
        (Y, {"dtype": "float16"}, ValueError, "dtype must be one of"),
        (Y, {"seed": -1}, ValueError, "seed must be"),
        (Y, {"seed": 2**32}, ValueError, r"seed must be in \[0, 2\*\*32 - 1\]"),
        (Y, {"seed": 2**32 - 2, "restarts": 3}, ValueError, r"seed, \.\.\., seed \+ 2"),
        (Y, {"max_iter": 10**9}, ValueError, "max_iter must be an integer in"),  # no 8 GB trace
        (Y, {"rank": 10**9}, ValueError, r"rank must be <= max\(M, N\) = 6"),
        (Y, {"init": (np.ones((6, 3)) / 3, np.ones((3, 5)))}, ValueError, "init must have W"),
        (Y, {"init": (np.ones((6, 2)), np.full((2, 5), 0.5))}, ValueError, "rows summing to 1"),
        (Y, {"init": (np.ones((6, 2)) / 2, np.full((2, 5), 1.5))}, ValueError, r"\[0, 1\]"),
        (Y, {"validation": np.zeros(Y.shape, bool)}, ValueError, "validation selects no obs"),
        (Y, {"validation": np.ones((5, 6), bool)}, ValueError, r"validation has shape \(5, 6"),
        (Y, {"validation": np.full(Y.shape, 2)}, TypeError, "validation must be boolean"),
        (Y, {"restarts": 2.5}, ValueError, "restarts must be an integer"),
        (Y, {"restarts": 600, "combine": "mean", "max_iter": 10**6}, ValueError, MEMORY),
    ],
)
def test_bad_input_is_a_clear_error_before_compilation(data, kwargs, error, message):
    kwargs = {"engine": "mm", "rank": 2, **kwargs}
    before = cache_size()
    with pytest.raises(error, match=message):
        bernmf.fit(data, kwargs.pop("engine"), kwargs.pop("rank"), **kwargs)
    assert cache_size() == before


def test_input_is_not_modified_and_frames_hold_the_factors():
    """The caller's DataFrame and mask stay as they were; the frames hold the factors
    (that their labels come back is checked for every engine in test_engines.py)."""
    frame = pd.DataFrame(
        np.where(np.arange(30).reshape(6, 5) % 7 == 0, np.nan, Y),
        index=[f"animal{i}" for i in range(6)],
        columns=[f"trait{j}" for j in range(5)],
    )
    mask = np.ones(Y.shape, bool)
    mask[0, 1] = False
    frame_copy, mask_copy = frame.copy(), mask.copy()
    result = bernmf.fit(frame, "mm", 2, mask=mask)
    pd.testing.assert_frame_equal(frame, frame_copy)
    np.testing.assert_array_equal(mask, mask_copy)
    assert result.frames.W.shape == (6, 2) and result.frames.probs.shape == (6, 5)
    np.testing.assert_array_equal(result.frames.H.to_numpy(), result.H)


def test_every_input_kind_gives_the_same_fit():
    reference = bernmf.fit(Y, "mm", 2)
    for data in (
        Y.astype(bool),
        Y.astype(np.int8),
        Y.tolist(),
        sparse.csr_matrix(Y),
        pd.DataFrame(Y).astype("Int64"),
        Y.astype(np.float32),
    ):
        np.testing.assert_array_equal(bernmf.fit(data, "mm", 2).W, reference.W)
    integer_mask = bernmf.fit(Y, "mm", 2, mask=np.ones(Y.shape, int))
    np.testing.assert_array_equal(integer_mask.W, reference.W)


def test_a_labelled_mask_is_aligned_to_the_labels_of_y():
    frame = pd.DataFrame(Y, index=[f"r{i}" for i in range(6)], columns=list("abcde"))
    mask = np.ones(Y.shape, bool)
    mask[0, :2] = False
    labelled = pd.DataFrame(mask, index=frame.index, columns=frame.columns)
    reference = bernmf.fit(frame, "mm", 2, mask=mask)
    shuffled = labelled.iloc[::-1, [4, 2, 0, 1, 3]]
    for given in (shuffled, pd.DataFrame(mask)):  # default labels: by position
        result = bernmf.fit(frame, "mm", 2, mask=given)
        np.testing.assert_array_equal(result.observed.mask, mask)
        np.testing.assert_array_equal(result.W, reference.W)
    by_position = bernmf.fit(Y, "mm", 2, mask=shuffled)  # unlabelled Y: by position
    np.testing.assert_array_equal(by_position.observed.mask, shuffled.to_numpy())
    with pytest.raises(ValueError, match=r"row labels differ.*\['r0'\].*\['x'\]"):
        bernmf.fit(frame, "mm", 2, mask=labelled.rename(index={"r0": "x"}))
    with pytest.raises(ValueError, match="column labels differ"):
        bernmf.fit(frame, "mm", 2, mask=labelled.drop(columns="e").assign(f=True))


def test_the_mask_of_a_masked_array_is_missing():
    hidden = np.zeros(Y.shape, bool)
    hidden[1, 2] = hidden[4, 0] = True
    garbage = np.where(hidden, 7.0, Y)  # masked values are never looked at
    result = bernmf.fit(np.ma.MaskedArray(garbage, hidden), "mm", 2)
    np.testing.assert_array_equal(result.observed.mask, ~hidden)
    np.testing.assert_array_equal(result.W, bernmf.fit(np.where(hidden, np.nan, Y), "mm", 2).W)


def test_nan_means_missing_and_combines_with_the_mask():
    with_nan = Y.copy()
    with_nan[1, 2] = np.nan
    mask = np.ones(Y.shape, bool)
    mask[3, 4] = False
    both = mask.copy()
    both[1, 2] = False
    a = bernmf.fit(with_nan, "mm", 2, mask=mask)
    b = bernmf.fit(Y, "mm", 2, mask=both)
    np.testing.assert_array_equal(a.W, b.W)


def test_a_row_without_observed_entries_warns_once():
    mask = np.ones(Y.shape, bool)
    mask[2] = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = bernmf.fit(Y, "mm", 2, mask=mask)
    assert len(caught) == 1 and "1 row(s) and 0 column(s)" in str(caught[0].message)
    assert np.all(np.isfinite(result.probs))


def test_perplexity_of_the_fit_checks_its_input():
    result = bernmf.fit(Y, "mm", 2)
    with pytest.raises(ValueError, match="shape"):
        result.perplexity(Y[:, :3])
    with pytest.raises(ValueError, match="only 0, 1 or NaN"):
        result.perplexity(Y * 3)


@pytest.mark.parametrize(
    ("engine", "options", "counts"),
    [
        ("nuts", {"num_chains": 4, "num_samples": 10**5}, "num_chains=4"),
        ("gibbs", {"num_samples": 10**5, "restarts": 4}, "restarts=4, num_warmup=250"),
        ("svi", {"num_draws": 10**5, "restarts": 4}, "steps=5000, num_draws=100000"),
        ("mm", {"max_iter": 10**5, "restarts": 100}, "restarts=100, max_iter=100000"),
    ],
)
def test_traces_and_draws_beyond_the_memory_budget_are_refused_before_compiling(
    monkeypatch, engine, options, counts
):
    """Every preallocation (restarts x iterations, chains x draws x factors) is bounded."""
    monkeypatch.setenv("BERNMF_MEMORY_LIMIT", "5e7")  # 50 MB; each needs 64 to 80 MB
    before = cache_size()
    with pytest.raises(ValueError, match=rf"{counts}.*\) would need [678]\d.\d MB, more than"):
        bernmf.fit(Y, engine, 2, **options)
    assert cache_size() == before


def test_tune_grid_checks_restarts_and_validation_before_any_fit(monkeypatch):
    from bernmf import tune
    from bernmf.inference import mm

    monkeypatch.setattr(mm, "run_many", lambda *a, **k: pytest.fail("a fit ran"))
    validation = np.eye(*Y.shape, dtype=bool)
    train = ~validation
    for restarts in (2.5, "2", True, 0):
        with pytest.raises(ValueError, match=f"restarts must be an integer .*got {restarts!r}"):
            tune.grid(Y, [2], mask=train, validation=validation, restarts=restarts)
    missing = np.where(validation, np.nan, Y)
    for data, given in ((Y, np.zeros(Y.shape, bool)), (missing, validation)):
        with pytest.raises(ValueError, match="validation selects no observed entry of Y"):
            tune.grid(data, [2], mask=train, validation=given, progress=False)
    with pytest.raises(ValueError, match=r"600 fits of alphas x betas x restarts=2, max_iter="):
        tune.grid(Y, [2], mask=train, validation=validation, restarts=2, max_iter=10**6,
                  alphas=np.linspace(1, 2, 300))  # fmt: skip


@pytest.mark.parametrize(("missing", "part"), [(1, "validation"), (0, "test")])
def test_a_split_file_without_validation_or_test_entries_is_refused_first(
    tmp_path, capsys, missing, part
):
    from bernmf.cli.parser import main

    np.savetxt(tmp_path / "y.csv", Y, fmt="%d", delimiter=",")
    codes = bernmf.data.split.random_split(Y.shape, seed=0).codes()
    codes[codes == missing] = 2
    np.savetxt(tmp_path / "split.csv", codes, fmt="%d", delimiter=",")
    argv = ["tune", str(tmp_path / "y.csv"), "--split", str(tmp_path / "split.csv")]
    assert main([*argv, "--ranks", "2", "--out", str(tmp_path / "out")]) == 1
    error = capsys.readouterr().err
    assert f"the split {tmp_path / 'split.csv'} has no {part} entry (code {missing})" in error
    assert "rank 2" not in error  # no fit ran


def test_an_observed_matrix_is_restricted_as_its_data_would_be(monkeypatch):
    """as_observed of an Observed gives what as_observed of its data gives, the masks
    checked and aligned by label, without reading Y's values again."""
    from bernmf.data import observed as module

    rng = np.random.default_rng(0)
    values = rng.integers(0, 2, (6, 5)).astype(float)
    values[0, 1] = np.nan
    frame = pd.DataFrame(values, index=list("abcdef"), columns=list("vwxyz"))
    mask = pd.DataFrame(rng.random((6, 5)) < 0.6, index=list("fedcba"), columns=list("vwxyz"))
    for Y, given in ((values, mask.to_numpy()), (frame, mask)):
        data = as_observed(Y, warn_empty=False)
        expected = as_observed(Y, given, warn_empty=False)
        monkeypatch.setattr(module, "_dense_ones_and_missing", None)  # Y is not read again
        got = as_observed(data, given, warn_empty=False)
        monkeypatch.undo()
        np.testing.assert_array_equal(got.mask, expected.mask)
        np.testing.assert_array_equal(got.ones, expected.ones)
        assert got.row_labels is data.row_labels and got.col_labels is data.col_labels
    with pytest.raises(ValueError, match="validation has shape"):
        as_observed(data, np.ones((2, 2), bool), mask_name="validation")
    with pytest.raises(ValueError, match="validation selects no observed entry"):
        as_observed(data, np.zeros((6, 5), bool), mask_name="validation")


ENTRY_POINTS = ("fit", "compare", "tune.grid", "stack", "bernmf fit", "bernmf tune")


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_each_entry_point_reads_the_values_of_y_once(entry, tmp_path, monkeypatch):
    """A user's matrix is checked once where it enters; what follows selects from the
    checked data (an Observed) and does not read Y's values again."""
    from bernmf import tune
    from bernmf.cli.parser import main

    data, _, _ = bernmf.simulate(0, 40, 30, 3)
    split = bernmf.data.split.random_split(data.shape, seed=0)
    parts = {"mask": split.train, "validation": split.validation}
    path = tmp_path / "y.csv"
    np.savetxt(path, data, fmt="%d", delimiter=",")
    command = [str(path), "--max-iter", "20", "--quiet", "--out", str(tmp_path / "out")]
    fits = [bernmf.fit(data, "mm", k, mask=split.train, max_iter=20) for k in (2, 3)]
    calls = {
        "fit": lambda: bernmf.fit(data, "mm", 2, **parts, max_iter=20),
        "compare": lambda: bernmf.compare(
            data,
            ["mm", "em"],
            [2, 3],
            seeds=[0],
            train=split.train,
            test=split.test,
            validation=split.validation,
            options={"mm": {"max_iter": 20}},
            progress=False,
        ),
        "tune.grid": lambda: tune.grid(
            data, [2, 3], **parts, combine="stack", max_iter=20, progress=False
        ),
        "stack": lambda: bernmf.stack(fits, data, **parts),
        "bernmf fit": lambda: main(["fit", *command, "--rank", "2"]),
        "bernmf tune": lambda: main(["tune", *command, "--ranks", "2"]),
    }
    reads = count_reads(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fits' own (few iterations), not this test's
        made = calls[entry]()
    assert made == 0 if entry.startswith("bernmf ") else made is not None
    assert reads == ["Y"]
