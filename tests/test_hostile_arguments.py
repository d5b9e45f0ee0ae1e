"""Arguments and environment variables refused with the words of the problem (issue 37):
the argument or variable named, before any fit."""

from __future__ import annotations

import warnings

import pytest

import bernmf
import bernmf.fitting.stack
import bernmf.tune
from bernmf.data.memory import memory_limit
from bernmf.data.split import random_split


@pytest.mark.parametrize("value", ["0.5", "1.5", "0", "-3", "inf", "nan", "lots"])
def test_a_memory_budget_that_is_not_a_whole_number_of_bytes_is_refused(monkeypatch, value):
    """0.5 was accepted, cut to 0, and refused every fit with 'a memory limit of 0 bytes'."""
    monkeypatch.setenv("BERNMF_MEMORY_LIMIT", value)
    with pytest.raises(ValueError, match="BERNMF_MEMORY_LIMIT must be a whole number of bytes"):
        memory_limit()


@pytest.mark.parametrize(("value", "budget"), [("1", 1), ("1e8", 10**8), (" 16e9 ", 16 * 10**9)])
def test_a_memory_budget_in_bytes_is_read(monkeypatch, value, budget):
    monkeypatch.setenv("BERNMF_MEMORY_LIMIT", value)
    assert memory_limit() == budget


@pytest.fixture(scope="module")
def fits():
    """mm and logsvd fits of one split, and the split."""
    Y, _, _ = bernmf.simulate(0, 30, 20, 2)
    split = random_split(Y.shape, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bernmf.ZeroProbabilityWarning)  # mm's flat prior
        made = [bernmf.fit(Y, e, 2, mask=split.train, max_iter=20) for e in ("mm", "logsvd")]
    return Y, split, made


def test_stack_without_validation_entries_says_so(fits):
    """It said the validation and the mask "overlap in 420 entries"."""
    Y, _, made = fits
    with pytest.raises(ValueError, match=r"validation is None: bernmf\.stack fits its weights on"):
        bernmf.stack(made, Y, validation=None)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"nust": {"num_samples": 5}}, ValueError, r"engine\(s\) \['nust'\] that no fit"),
        ({"mm": {"max_iter": -5}}, ValueError, "max_iter"),
        ({"logsvd": {"max_iter": 0}}, ValueError, "max_iter"),
        ({"mm": {"speed": 2}}, TypeError, r"does not take option\(s\) \['speed'\]"),
        ([1], TypeError, r"options must map engine names to dicts of .*, got list \[1\]"),
        ({"mm": 3}, TypeError, "options must map engine names to dicts of options"),
    ],
    ids=["typo", "mm-negative", "logsvd-zero", "unknown-option", "list", "not-a-dict"],
)
def test_refit_options_are_all_checked_before_anything_is_fitted(
    fits, monkeypatch, options, error, message
):
    """A typo of an engine was ignored, and options of members of weight 0 never checked
    (max_iter=-5 passed); options=[1] raised AttributeError."""
    Y, split, made = fits
    refits = []
    monkeypatch.setattr(bernmf.fitting.stack, "fit_settings", lambda *a, **k: refits.append(a))
    with pytest.raises(error, match=message):
        bernmf.stack(made, Y, validation=split.validation, refit=True, options=options)
    assert refits == []


def test_the_typo_message_lists_the_engines_of_the_stack(fits):
    Y, split, made = fits
    with pytest.raises(
        ValueError, match=r"no fit of the stack has; its engines: \['logsvd', 'mm'\]"
    ):
        bernmf.stack(made, Y, validation=split.validation, refit=True, options={"nuts": {}})


def test_tune_grid_without_ranks_says_so():
    """It said "max() iterable argument is empty"."""
    Y, _, _ = bernmf.simulate(0, 30, 20, 2)
    split = random_split(Y.shape, seed=0)
    with pytest.raises(ValueError, match=r"ranks must be a non-empty list of ranks, got \[\]"):
        bernmf.tune.grid(Y, [], mask=split.train, validation=split.validation)
