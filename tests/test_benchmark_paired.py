"""``benchmarks/paired.py``: the interval over matrices the benchmarks print."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

PATH = Path(__file__).parents[1] / "benchmarks" / "paired.py"


def paired():
    spec = importlib.util.spec_from_file_location("paired_benchmark", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("n", [2, 3, 8])
def test_paired_interval_is_scipys_one_sample_t_interval(n):
    d = np.random.default_rng(n).normal(0.01, 0.02, n)
    mean, low, high = paired().paired_interval(d)
    reference = stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
    assert mean == pytest.approx(d.mean())
    assert (low, high) == pytest.approx((reference.low, reference.high))


def test_line_names_the_mean_interval_and_each_matrix():
    made = paired().line("a - b", [0.1, 0.3, 0.2], 3)
    assert made.startswith("a - b: +0.2 [")
    assert "over 3 matrices; per matrix +0.1, +0.3, +0.2" in made
