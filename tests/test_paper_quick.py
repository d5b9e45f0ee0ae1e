"""The paper's experiment: its published iteration (defects included), and smoke runs of
bernmf.studies.reproduce.paper --quick in both variants and of
bernmf.studies.reproduce.stacking --quick."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from helpers import shared_file

import bernmf
from bernmf.data.observed import as_observed
from bernmf.data.split import random_split
from bernmf.studies.reproduce import paper, published, stacking


def small_problem(seed):
    Y, _, _ = bernmf.simulate(seed, 30, 20, 3)
    return np.asarray(Y, float), random_split(Y.shape, seed=seed)


def numpy_published_sweep(Y, O, W, H, alpha, beta):
    """One sweep of the published code, written from its description (held-out as zeros in
    the H update, W divided by N) in plain numpy; P(Y=0) is 1 - W @ H."""
    Y1 = O * Y
    P = W @ H
    C = H * (W.T @ (Y1 / P)) + (alpha - 1)
    D = (1 - H) * (W.T @ ((1 - Y1) / (1 - P))) + (beta - 1)
    H = C / (C + D)
    P = W @ H
    S = W * ((Y1 / P) @ H.T + (O * (1 - Y) / (1 - P)) @ (1 - H).T)
    return S / Y.shape[1], H


def test_published_sweep_matches_its_description_and_its_defects():
    Y, split = small_problem(2)
    O = split.train.astype(float)
    rng = np.random.default_rng(0)
    W = rng.uniform(0.1, 1, (30, 3))
    W /= W.sum(1, keepdims=True)
    H = rng.uniform(0.1, 0.9, (3, 20))
    with jax.enable_x64(True):
        data = published.make_data(as_observed(Y, split.train), jnp.float64)
        prior = bernmf.Prior(*(jnp.full(3, v) for v in (1.4, 2.0, 1.0)))
        _, W_new, H_new = published.sweep(data, jnp.asarray(W), jnp.asarray(H), prior)
    W_ref, H_ref = numpy_published_sweep(Y, O, W, H, 1.4, 2.0)
    np.testing.assert_allclose(H_new, H_ref, rtol=1e-10)
    np.testing.assert_allclose(W_new, W_ref, rtol=1e-10)
    # defect 2: rows of W sum to (observed entries of the row) / N, not to one
    np.testing.assert_allclose(np.asarray(W_new).sum(1), O.sum(1) / 20, rtol=1e-10)


def test_the_published_code_counts_held_out_entries_as_zeros():
    # their values are never read (both codes), but the published H step takes them as
    # zeros: from the same start, its fit differs from the masked MM's
    Y, split = small_problem(3)
    flipped = np.where(split.train, Y, 1 - Y)  # change every held-out entry
    prior, options = bernmf.Prior(1.5, 1.5), {"max_iter": 50, "tol": -1.0}  # 50 sweeps
    H = [published.fits(as_observed(v, split.train), 3, [prior], [0], **options)[1][0]
         for v in (Y, flipped)]  # fmt: skip
    np.testing.assert_array_equal(H[0], H[1])
    masked = bernmf.fit(Y, "mm", 3, mask=split.train, prior=prior, seed=0, max_iter=50, tol=0,
                        accelerate=False)  # fmt: skip
    assert np.abs(H[0] - masked.H).max() > 1e-2


def test_the_published_loop_stops_on_an_absolute_decrease_per_entry():
    Y, split = small_problem(4)
    outputs = published.fits(as_observed(Y, split.train), 3, [bernmf.Prior()], [0], tol=1e-5)
    traces, n_iter = outputs[2], outputs[3]
    trace = traces[0, : n_iter[0] + 1]
    changes = -np.diff(trace)[1:]  # the first sweep is never compared (published loop)
    assert changes[-1] < 1e-5 and (changes[:-1] >= 1e-5).all()
    assert trace[-1] < 1  # per observed entry, not a sum


@pytest.mark.slow
def test_quick_protocol_corrected_and_as_published(tmp_path, capsys):
    data_dir = shared_file("data", "animals.csv").parent
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


@pytest.mark.slow
def test_quick_stacking_study(tmp_path, capsys):
    """bernmf.studies.reproduce.stacking --quick: every method, two seed sets, never
    probability 0."""
    data_dir = shared_file("data", "animals.csv").parent
    assert stacking.main(["--quick", "--data-dir", str(data_dir), "--out", str(tmp_path)]) == 0
    results = pd.read_csv(tmp_path / "results.csv")
    stacked = {"stacked: setting means", "stacked: all engines", "stacked: mm grid"}
    stacked.add("stacked: setting means, refit")
    assert stacked < set(results["method"]) and results.groupby("method").size().min() >= 1
    assert (results["min_test_probability"] > 0).all()  # no test entry at probability 0
    summary = pd.read_csv(tmp_path / "summary.csv").set_index("method")
    # stacking everything is at least as good on validation as any part of it, and as
    # its setting means (each a mixture of its members)
    assert summary.loc["stacked: all engines", "validation_mean"] <= (
        summary["validation_mean"].min() + 3e-6  # optimal to 1e-6 nats, baseline floor 1e-6
    )
    weights = pd.read_csv(tmp_path / "weights.csv")
    np.testing.assert_allclose(weights.groupby(["seed_set", "method"])["weight"].sum(), 1.0)
    assert set(weights["method"]) == stacked
    assert (tmp_path / "stacking.png").stat().st_size > 0 and "total" in capsys.readouterr().out
