"""Shared fixtures: the paper's data and split from ../shared (never copied into the repo)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

SHARED = Path(os.environ.get("BERNMF_SHARED_DIR", Path(__file__).parents[1].parent / "shared"))


def shared_file(*parts: str) -> Path:
    """Path of a file under ../shared; in CI a missing file fails, elsewhere it skips."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        message = f"{path} not found (set BERNMF_SHARED_DIR to the shared folder)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def animals() -> pd.DataFrame:
    """The animals data, 50 x 85, with labels."""
    return pd.read_csv(shared_file("data", "animals.csv"), index_col=0)


@pytest.fixture(scope="session")
def animals_split() -> np.ndarray:
    """The paper's split of animals: 2 = train, 1 = validation, 0 = test."""
    return np.loadtxt(shared_file("reference", "animals_split_seed12345.csv"), delimiter=",")
