"""Arguments and environment variables refused with the words of the problem (issue 37):
the argument or variable named, before any fit."""

from __future__ import annotations

import pytest

from bernmf.data.budget import memory_budget


@pytest.mark.parametrize("value", ["0.5", "1.5", "0", "-3", "inf", "nan", "lots"])
def test_a_memory_budget_that_is_not_a_whole_number_of_bytes_is_refused(monkeypatch, value):
    """0.5 was accepted, cut to 0, and refused every fit with 'a memory budget of 0 bytes'."""
    monkeypatch.setenv("BERNMF_MEMORY_BUDGET", value)
    with pytest.raises(ValueError, match="BERNMF_MEMORY_BUDGET must be a whole number of bytes"):
        memory_budget()


@pytest.mark.parametrize(("value", "budget"), [("1", 1), ("1e8", 10**8), (" 16e9 ", 16 * 10**9)])
def test_a_memory_budget_in_bytes_is_read(monkeypatch, value, budget):
    monkeypatch.setenv("BERNMF_MEMORY_BUDGET", value)
    assert memory_budget() == budget
