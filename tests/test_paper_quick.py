"""Smoke run of the paper's experiment (experiments/paper.py --quick), both variants."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
from conftest import shared_file

SCRIPT = Path(__file__).parents[1] / "experiments" / "paper.py"


def load_script():
    spec = importlib.util.spec_from_file_location("paper_experiment", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_protocol_corrected_and_as_published(tmp_path, capsys):
    data_dir = shared_file("data", "animals.csv").parent
    paper = load_script()
    common = ["--quick", "--data-dir", str(data_dir), "--out", str(tmp_path), "--quiet"]
    common.append("--no-logsvd")  # the logsvd engine has its own tests
    assert paper.main(common) == 0
    assert paper.main([*common, "--as-published"]) == 0
    output = capsys.readouterr().out
    assert "wall time" in output

    for variant in ("corrected", "as_published"):
        folder = tmp_path / variant
        for name in ("fits.csv", "summary.csv", "fig1_validation.png", "fig2_test.png"):
            assert (folder / name).stat().st_size > 0, name
        fits = pd.read_csv(folder / "fits.csv")
        assert {
            "dataset",
            "method",
            "stage",
            "rank",
            "alpha",
            "beta",
            "seed",
            "iterations",
            "seconds",
            "perplexity",
        } <= set(fits.columns)
        test = fits[(fits["stage"] == "test") & (fits["method"] == "NBMF-MM")]
        assert len(test) == 2 and test["perplexity"].between(0.3, 0.7).all()
        validation = fits[(fits["stage"] == "validation") & (fits["method"] == "NBMF-MM")]
        assert len(validation) == 2 * 3 * 3  # K in {2, 4} x alpha x beta
    comparison = pd.read_csv(tmp_path / "comparison.csv")
    mm = comparison.set_index("method").loc["NBMF-MM"]
    # the published defects cost accuracy on held-out entries
    assert mm["test_perplexity_as_published"] > mm["test_perplexity_corrected"]
