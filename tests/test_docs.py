"""Code blocks of the docs run as they are written, each in a fresh interpreter (as a reader's
session starts: after a plain ``import bernmf``, nothing else imported)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import run_python

ROOT = Path(__file__).parents[1]

PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)
"""A fenced ``python`` code block of a Markdown file; group 1 is its code."""


def python_block(path: str, containing: str) -> str:
    """The one ``python`` code block of the Markdown file ``path`` (from the repository's
    root) whose code contains ``containing``."""
    found = [code for code in PYTHON_BLOCK.findall((ROOT / path).read_text()) if containing in code]
    assert len(found) == 1, f"{len(found)} python blocks of {path} contain {containing!r}"
    return found[0]


@pytest.mark.slow  # a fresh interpreter each, over 2 s
@pytest.mark.parametrize(
    "path, containing",
    [
        ("docs/usage.md", "bernmf.tune.grid("),  # was: AttributeError, and `split` undefined
        ("docs/usage.md", "arviz.plot_trace("),  # was: 2,080 subplots asked, over ArviZ's 40
    ],
)
def test_a_documented_example_runs(path, containing):
    run_python(python_block(path, containing))
