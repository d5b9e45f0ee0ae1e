"""Train / validation / test splits, and the paper's split reproduced exactly."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import shared_file

from bernmf.data.datasets import SHAPES
from bernmf.data.split import Split, paper_split, random_split


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_paper_split_reproduces_the_reference_files(name):
    reference = np.loadtxt(
        shared_file("reference", f"{name}_split_seed12345.csv"), delimiter=","
    ).astype(int)
    split = paper_split(SHAPES[name])
    assert reference.shape == SHAPES[name]
    np.testing.assert_array_equal(split.codes(), reference)


def test_paper_split_leaves_the_global_random_state_alone():
    np.random.seed(7)  # noqa: NPY002 - the legacy global state is what is checked
    expected = np.random.uniform(size=3)  # noqa: NPY002
    np.random.seed(7)  # noqa: NPY002
    paper_split((20, 30))
    np.testing.assert_array_equal(np.random.uniform(size=3), expected)  # noqa: NPY002


def test_masks_are_disjoint_and_cover_everything():
    split = random_split((37, 23), (0.6, 0.25, 0.15), seed=3)
    stacked = np.stack(split).astype(int)
    np.testing.assert_array_equal(stacked.sum(axis=0), 1)
    size = 37 * 23
    assert split.train.sum() == round(0.6 * size)
    assert split.validation.sum() == round(0.25 * size)
    np.testing.assert_array_equal(Split.from_codes(split.codes()).test, split.test)


def test_seed_decides_the_split():
    a, b, c = (random_split((30, 30), seed=s) for s in (1, 1, 2))
    np.testing.assert_array_equal(a.train, b.train)
    assert (a.train != c.train).any()


@pytest.mark.parametrize(
    ("shape", "fractions"),
    [((0, 3), (0.7, 0.15, 0.15)), ((3, 3, 3), (0.7, 0.15, 0.15)), ((5, 5), (0.5, 0.5, 0.5))],
)
def test_bad_arguments(shape, fractions):
    with pytest.raises(ValueError):
        random_split(shape, fractions)


def test_from_codes_rejects_unknown_codes():
    with pytest.raises(ValueError, match="0, 1 or 2"):
        Split.from_codes(np.array([[0, 3]]))
