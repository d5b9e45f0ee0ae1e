"""What several test modules share: the shared data folder, exact equality of saved fits,
random MM problems, Hypothesis example counts and a counter of the reads of Y.

Test modules import from here (and from ``untrusted_files`` for hostile files), never from
one another (``tests/test_suite.py`` checks it).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st

import bernmf
from bernmf.data.split import Split
from bernmf.testing import assert_same  # noqa: F401 (shared with the test modules)

SHARED = Path(os.environ.get("BERNMF_SHARED_DIR", Path(__file__).parents[1].parent / "shared"))
"""The paper's data and R references (``BERNMF_SHARED_DIR``, else ``../shared``)."""


def shared_file(*parts: str) -> Path:
    """Path of a file under :data:`SHARED`; in CI a missing file fails, elsewhere it skips."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        message = f"{path} not found (set BERNMF_SHARED_DIR to the shared folder)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


CI_EXAMPLES = 100
"""``max_examples`` of the ``ci`` Hypothesis profile (``tests/conftest.py``), Hypothesis's own."""


def examples(count: int) -> int:
    """Hypothesis examples of a property that runs ``count`` in CI, under the loaded profile.

    ``count`` scaled by the profile's ``max_examples`` against :data:`CI_EXAMPLES`,
    rounded up: ``count`` under ``ci``, a tenth under ``fast``. Read when a test module
    is imported, after pytest has loaded the profile.
    """
    return math.ceil(count * settings.default.max_examples / CI_EXAMPLES)


def run_python(script: str) -> str:
    """The standard output of ``script`` run by a fresh interpreter; its standard error is
    the failure's message when it fails."""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def random_problem(seed, M, N, K, density=0.4, observed=0.7):
    """``(Y, O, W, H)``: random binary Y (M, N), mask O, and a start W (M, K), H (K, N)
    inside the constraints."""
    rng = np.random.default_rng(seed)
    Y = (rng.random((M, N)) < density).astype(float)
    O = rng.random((M, N)) < observed
    W = rng.random((M, K)) + 0.05
    return Y, O, W / W.sum(axis=1, keepdims=True), rng.random((K, N)) * 0.9 + 0.05


def zero_probability_problem() -> tuple[np.ndarray, Split]:
    """``(Y, split)``: a random binary 20 x 15 Y whose column 0 holds one 1, a validation
    entry: ``em`` (no prior) fits that column's H at exactly 0, so the entry has probability 0
    and the validation perplexity is inf."""
    rng = np.random.default_rng(0)
    Y = (rng.random((20, 15)) < 0.4).astype(float)
    Y[:, 0] = 0
    Y[3, 0] = 1
    codes = rng.choice([0, 1, 2], size=Y.shape, p=[0.15, 0.15, 0.7])  # test, validation, train
    codes[3, 0] = 1
    return Y, Split.from_codes(codes)


@st.composite
def mm_cases(draw):
    """``(Y, O, K, prior, seed)``: small MM problems with their edges (all-zero and all-one
    rows, empty rows and columns, per-component priors)."""
    # few sizes, so that examples share compiled programs; 1 and 7 are the edges
    M, N = draw(st.sampled_from([1, 2, 3, 7])), draw(st.sampled_from([1, 2, 3, 7]))
    K = draw(st.sampled_from([k for k in (1, 2, 5) if k <= max(M, N)]))  # fit refuses more
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    Y = (rng.random((M, N)) < draw(st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]))).astype(float)
    if M > 1 and draw(st.booleans()):
        Y[0] = draw(st.sampled_from([0.0, 1.0]))  # an all-zero or all-one row
    O = rng.random((M, N)) < draw(st.sampled_from([0.3, 0.7, 1.0]))
    if draw(st.booleans()):
        O[rng.integers(M)] = False  # an empty row
    if draw(st.booleans()):
        O[:, rng.integers(N)] = False  # an empty column
    O[rng.integers(M), rng.integers(N)] = True  # at least one observed entry
    per_component = draw(st.booleans())
    size = K if per_component else None
    prior = bernmf.Prior(
        *(1 + rng.exponential(0.5, size) * draw(st.sampled_from([0, 1])) for _ in range(3))
    )
    return Y, O, K, prior, seed


def count_reads(patch: pytest.MonkeyPatch) -> list[str]:
    """The names under which Y's values are read (``as_observed``'s check of them), appended
    to the list returned while ``patch`` holds: an entry point that checks Y once reads
    ``["Y"]``."""
    from bernmf.data import observed

    reads: list[str] = []
    read = observed._dense_ones_and_missing
    patch.setattr(observed, "_dense_ones_and_missing", lambda *a: reads.append(a[1]) or read(*a))
    return reads
