"""Shared fixtures (the paper's data and split from ../shared, never copied into the repo),
the compile cache of a test run, and the Hypothesis profiles.

Compiled programs are cached in a temporary folder removed at the end of the run, not in
the user's cache, unless ``BERNMF_COMPILE_CACHE`` names a folder (``make test-fast`` keeps
one between runs).

Hypothesis profiles, chosen by ``BERNMF_HYPOTHESIS_PROFILE`` or ``--hypothesis-profile``:
``ci`` (the default: Hypothesis's own CI settings, derandomized, each property with its
count) and ``fast`` (a tenth of each count, :func:`helpers.examples`; ``make test-fast``).
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
from helpers import CI_EXAMPLES, shared_file
from hypothesis import settings

PROFILE_VARIABLE = "BERNMF_HYPOTHESIS_PROFILE"
"""Environment variable naming the Hypothesis profile (``--hypothesis-profile`` wins)."""

settings.register_profile("ci", settings.get_profile("ci"), max_examples=CI_EXAMPLES)
settings.register_profile("fast", settings.get_profile("ci"), max_examples=CI_EXAMPLES // 10)
settings.load_profile(os.environ.get(PROFILE_VARIABLE) or "ci")


@pytest.fixture(scope="session")
def animals() -> pd.DataFrame:
    """The animals data, 50 x 85, with labels."""
    return pd.read_csv(shared_file("data", "animals.csv"), index_col=0)


@pytest.fixture(scope="session")
def animals_split() -> np.ndarray:
    """The paper's split of animals: 2 = train, 1 = validation, 0 = test."""
    return np.loadtxt(shared_file("reference", "animals_split_seed12345.csv"), delimiter=",")


@pytest.fixture(scope="session")
def small_csv(tmp_path_factory):
    """A CSV file of a random 30 x 20 binary matrix, with row and column labels: a small
    DATA for tests that run the ``bernmf`` command in a subprocess."""
    Y = (np.random.default_rng(0).random((30, 20)) < 0.3).astype(int)
    path = tmp_path_factory.mktemp("data") / "y.csv"
    pd.DataFrame(Y).to_csv(path)
    return path
