"""Every fenced code block of README.md and docs/*.md runs as it is written, or says why not.

- A ``python`` block runs with the page's other ``python`` blocks, in their order, in one
  fresh interpreter (a reader's session: after a plain ``import bernmf``, nothing else
  imported); a block after ``<!-- new session -->`` starts a fresh one (e.g. one that sets
  ``numpyro.set_host_device_count`` before JAX starts). An error names the page and its line.
- A ``sh``, ``bash`` or ``console`` block is ``bernmf`` commands, one a line (``\\``
  continues a line, ``#`` starts a comment): each is parsed by the command's parser, and run,
  in order, unless :data:`PARSED_ONLY` says why not (a study of minutes that its own test runs
  in small).
- A block after ``<!-- not run: REASON -->`` (a listing, a command for another machine, a
  record of a past run) is not run; :data:`NOT_RUN` lists them, so that a new block is run
  unless it is marked and listed here too.

Blocks run in a temporary folder that holds the files they name (``animals.csv``,
``Y.csv``, ``train.npz``, ``val.npz``, ``data.csv``: the paper's animals data, 50 x 85, and
its paper split; ``graph.csv.gz``: animals transposed), with ``BERNMF_DATA_DIR`` the shared
data folder. Runs too long for CI are made smaller by :data:`SMALLER`: replacements of the
blocks' text, each of which must match exactly once.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import pytest
from helpers import run_python, shared_file

from bernmf.cli.parser import build_parser, main
from bernmf.data.split import paper_split

ROOT = Path(__file__).parents[1]

PAGES = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))
"""The Markdown files whose blocks run: the README and the documentation site's pages."""

FENCE = re.compile(r"^( *)```(\S*)\n(.*?)^\1```$", re.DOTALL | re.MULTILINE)
"""A fenced code block, indented or not: group 2 is its language, group 3 its code."""

MARK = re.compile(r"<!-- (not run: .+|new session) -->\s*$")
"""The comment on the line before a block that says it is not run, or starts a session."""

SHELLS = ("sh", "bash", "console")

NOT_RUN = {
    "README.md": ["setup", "setup"],
    "docs/index.md": ["setup"],
    "docs/engines.md": ["one process on each of 4 hosts"],
    "docs/engines-api.md": ["a signature", "another package's pyproject.toml"],
    "docs/posterior-accuracy.md": ["a record of a 36-minute run at an older commit"],
    "docs/posterior-vs-map.md": [
        "a record of a 46-minute run at an older commit",
        "a record of a 40-minute run at an older commit",
    ],
}
"""The reasons of the blocks marked ``<!-- not run: REASON -->``, per page, in order."""

PARSED_ONLY = {
    "bernmf report": "minutes; tests/test_report.py runs report --quick",
    "bernmf reproduce": "a study of minutes to hours; tests/test_paper_quick.py, "
    "test_study.py and the studies' own tests run their --quick configurations",
}
"""Commands (by their start) that are parsed, not run, and why."""

SMALLER = {
    "README.md": [
        ("fit = bernmf.fit(Y)", "fit = bernmf.fit(Y, budget=5)"),  # the default: 60 s
        ("budget=300", "budget=5"),
        ("fit animals.csv --out", "fit animals.csv --budget 5 --out"),  # 60 s
    ],
    "docs/data.md": [('datasets.load("lastfm")', 'datasets.load("animals")')],
    "docs/engines-api.md": [("num_samples=300", "num_samples=50")],
    "docs/engines.md": [
        ("num_warmup=1000,", "num_warmup=50,"),
        ("num_samples=1000,", "num_samples=50,"),
    ],
    "docs/sbc.md": [
        ("replicates=200", "replicates=2"),
        ("draws=100", "draws=10"),
        ('"num_warmup": 500, "num_samples": 500', '"num_warmup": 20, "num_samples": 20'),
    ],
}
"""Per page, (text, replacement) pairs that make its blocks' data or runs small for CI."""


class Block(NamedTuple):
    """A fenced code block: its page, the line of its opening fence, language, code, mark."""

    page: str
    line: int
    language: str
    code: str
    mark: str | None  # "not run: ...", "new session" or None


def blocks(page: str) -> list[Block]:
    """The fenced code blocks of ``page`` (a path from the repository's root), in order."""
    text = (ROOT / page).read_text()
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.search(before)
        code = "".join(line[len(match[1]) :] + "\n" for line in match[3].splitlines())
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(page, line, match[2], code, mark and mark[1]))
    return found


def smaller(block: Block) -> str:
    """A block's code with the replacements of :data:`SMALLER` that occur in it."""
    code = block.code
    for text, replacement in SMALLER.get(block.page, ()):
        code = code.replace(text, replacement)
    return code


def commands(block: Block) -> list[list[str]]:
    """The ``bernmf`` commands of a shell block, as argument lists (without ``bernmf``)."""
    lines = block.code.replace("\\\n", " ").splitlines()
    made = []
    for number, line in enumerate(lines, block.line + 1):
        words = shlex.split(line, comments=True)
        if not words:
            continue
        assert words[0] == "bernmf", (
            f"{block.page}:{number}: {line!r} is not a bernmf command: run one, or mark the "
            "block <!-- not run: reason --> and list it in NOT_RUN"
        )
        made.append(words[1:])
    return made


def sessions(page: str) -> list[list[Block]]:
    """The ``python`` blocks of ``page`` that run, grouped by the interpreter they run in."""
    grouped: list[list[Block]] = []
    for block in blocks(page):
        if block.language != "python" or (block.mark or "").startswith("not run"):
            continue
        if not grouped or block.mark == "new session":
            grouped.append([])
        grouped[-1].append(block)
    return grouped


def test_every_block_is_run_or_marked_and_listed():
    reasons, unknown = {}, []
    for page in PAGES:
        for block in blocks(page):
            if (block.mark or "").startswith("not run: "):
                reasons.setdefault(page, []).append(block.mark.removeprefix("not run: "))
            elif block.language not in ("python", *SHELLS):
                unknown.append(f"{page}:{block.line} ({block.language or 'no language'})")
            elif block.language in SHELLS:
                assert commands(block), f"{page}:{block.line}: a shell block without a command"
    assert not unknown, f"blocks neither run nor marked <!-- not run: reason -->: {unknown}"
    assert reasons == NOT_RUN


def test_every_replacement_that_makes_a_run_smaller_matches_once():
    for page, replacements in SMALLER.items():
        code = "".join(b.code for b in blocks(page) if not (b.mark or "").startswith("not run"))
        for text, _ in replacements:
            assert code.count(text) == 1, f"{page}: {text!r} should occur once in its blocks"


def test_every_documented_command_parses(capsys):
    parser = build_parser()
    for page in PAGES:
        for block in blocks(page):
            if block.language in SHELLS and not block.mark:
                for argv in commands(block):
                    try:
                        parser.parse_args(argv)
                    except SystemExit:
                        error = capsys.readouterr().err
                        pytest.fail(f"{page}:{block.line}: bernmf {shlex.join(argv)}: {error}")


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A temporary working folder holding the data files the blocks name."""
    animals = shared_file("data", "animals.csv")
    shutil.copy(animals, tmp_path / "animals.csv")
    shutil.copy(animals, tmp_path / "data.csv")
    shutil.copy(animals, tmp_path / "Y.csv")
    frame = pd.read_csv(animals, index_col=0)
    frame.T.to_csv(tmp_path / "graph.csv.gz")  # another shape: a block that overwrote Y fails
    split = paper_split(frame.shape)
    np.savez(tmp_path / "train.npz", split.train)
    np.savez(tmp_path / "val.npz", split.validation)
    monkeypatch.setenv("BERNMF_DATA_DIR", str(animals.parent))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.chdir(tmp_path)
    return tmp_path


SESSION = """
import os
os.chdir({folder!r})
namespace = {{"__name__": "__main__"}}
for page, line, code in {blocks!r}:
    exec(compile("\\n" * line + code, page, "exec"), namespace)
"""
"""A session: each block compiled under its page's name and lines, so an error names them."""


@pytest.mark.slow  # a fresh interpreter and fits, over 2 s
@pytest.mark.parametrize(
    "page, index", [(page, i) for page in PAGES for i, _ in enumerate(sessions(page))]
)
def test_the_python_blocks_of_a_page_run(page, index, folder):
    session = sessions(page)[index]
    code = [(b.page, b.line, smaller(b)) for b in session]
    run_python(SESSION.format(folder=str(folder), blocks=code))


@pytest.mark.slow  # fits of animals, a few seconds a command
@pytest.mark.parametrize(
    "page",
    [page for page in PAGES if any(b.language in SHELLS and not b.mark for b in blocks(page))],
)
def test_the_commands_of_a_page_run(page, folder, capsys):
    for block in blocks(page):
        if block.language not in SHELLS or block.mark:
            continue
        for argv in commands(block):
            line = shlex.join(["bernmf", *argv])
            if any(line.startswith(start) for start in PARSED_ONLY):
                continue
            argv = shlex.split(smaller(block._replace(code=line)))[1:]
            assert main(argv) == 0, f"{page}:{block.line}: {line}: {capsys.readouterr().err}"
