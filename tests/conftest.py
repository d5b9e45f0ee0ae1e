"""Shared fixtures (the paper's data and split from ../shared, never copied into the repo)
and the compile cache of a test run.

Compiled programs are cached in a temporary folder removed at the end of the run, not in
the user's cache, unless ``BERNMF_COMPILE_CACHE`` is set.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

if "BERNMF_COMPILE_CACHE" not in os.environ:  # hermetic: compiled programs of this run only
    _COMPILE_CACHE = tempfile.mkdtemp(prefix="bernmf-test-compile-cache-")
    os.environ["BERNMF_COMPILE_CACHE"] = _COMPILE_CACHE  # subprocesses and xdist workers share it
    atexit.register(shutil.rmtree, _COMPILE_CACHE, ignore_errors=True)

# bernmf (imported by helpers) reads BERNMF_COMPILE_CACHE when imported: set above
import numpy as np
import pandas as pd
import pytest
from helpers import shared_file


@pytest.fixture(scope="session")
def animals() -> pd.DataFrame:
    """The animals data, 50 x 85, with labels."""
    return pd.read_csv(shared_file("data", "animals.csv"), index_col=0)


@pytest.fixture(scope="session")
def animals_split() -> np.ndarray:
    """The paper's split of animals: 2 = train, 1 = validation, 0 = test."""
    return np.loadtxt(shared_file("reference", "animals_split_seed12345.csv"), delimiter=",")
