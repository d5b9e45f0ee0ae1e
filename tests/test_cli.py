"""The ``bernmf`` command line."""

from __future__ import annotations

import pytest

from bernmf.cli import main


def test_demo_prints_the_table(capsys):
    assert main(["demo", "--rows", "40", "--cols", "30", "--ranks", "2", "3"]) == 0
    out = capsys.readouterr().out
    header = "engine  rank  iterations  train objective  held-out perplexity  seconds"
    assert header in out
    assert out.count("\n    em ") == 2 and out.count("\n    mm ") == 2
    assert "true W @ H: held-out perplexity" in out


def test_bad_arguments_exit_with_a_message(capsys):
    assert main(["demo", "--rows", "10", "--cols", "8", "--ranks", "0"]) == 1
    assert "bernmf: error: rank must be >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["nonsense"])
    assert usage.value.code == 2
