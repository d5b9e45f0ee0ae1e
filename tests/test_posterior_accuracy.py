"""Accuracy against a reference posterior (bernmf.posterior.accuracy), the reference
posteriors (bernmf.studies.reproduce.reference) and the posterior-accuracy study's smoke run."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from bernmf.posterior.accuracy import (
    accuracy,
    draw_permutations,
    kl_predictive,
    mean_error_sd,
    moments,
    relabel,
    sd_ratio,
    wh_moments,
)
from bernmf.studies.reproduce import posterior_accuracy, reference
from bernmf.studies.reproduce.reference import Case
from bernmf.studies.runner.study import Simulation

RNG = np.random.default_rng(0)


def _draws(C=2, S=50, M=6, N=5, K=3, rng=RNG):
    W = rng.dirichlet(np.ones(K), size=(C, S, M))
    H = rng.beta(2.0, 3.0, size=(C, S, K, N))
    return W, H


def test_wh_moments_are_those_of_the_products():
    W, H = _draws()
    products = np.matmul(W, H).reshape(-1, 6, 5)
    mean, sd = wh_moments(W, H, block=7)  # blocks that do not divide the draws
    np.testing.assert_allclose(mean, products.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(sd, products.std(axis=0), rtol=1e-9)


def test_numbers_against_direct_formulas():
    """Shifted means, scaled sds and Bernoulli KL, each computed by hand."""
    reference_mean = RNG.uniform(0.2, 0.8, (4, 7))
    reference_sd = RNG.uniform(0.01, 0.05, (4, 7))
    assert mean_error_sd(reference_mean + 0.3 * reference_sd, reference_mean, reference_sd) == (
        pytest.approx(0.3)
    )
    assert sd_ratio(2 * reference_sd, reference_sd) == pytest.approx(2.0)
    assert sd_ratio(np.zeros((4, 7)), reference_sd) == 0.0  # a point mass
    q = np.clip(reference_mean + 0.05, 0, 1)
    by_hand = reference_mean * np.log(reference_mean / q) + (1 - reference_mean) * np.log(
        (1 - reference_mean) / (1 - q)
    )
    assert kl_predictive(q, reference_mean) == pytest.approx(by_hand.mean())
    assert kl_predictive(reference_mean, reference_mean) == 0.0
    edge = reference_mean.copy()
    edge[0, 0] = 0.0  # probability 0 of a one the reference expects: inf, not a clip
    assert kl_predictive(edge, reference_mean) == np.inf


def test_draws_of_the_reference_itself_score_as_accurate_up_to_monte_carlo_error():
    """Independent draws of the same distribution: error about sqrt(1/S) sd, ratio about 1;
    chains with permuted components are matched back (W and H numbers unchanged)."""
    W, H = _draws(C=2, S=2000)
    truth = moments(W, H)
    W2, H2 = _draws(C=2, S=2000, rng=np.random.default_rng(1))
    permutation = [2, 0, 1]
    W2, H2 = W2[..., permutation], H2[:, :, permutation]
    made = accuracy(moments(W2, H2, truth["H_mean"]), truth)
    # two independent means of 4000 draws each: differences of sd sqrt(2 / 4000)
    assert made["mean_error_sd"] < 4 * np.sqrt(2 / 4000)
    assert made["sd_ratio"] == pytest.approx(1, abs=0.03)
    assert made["H_mean_error_sd"] < 4 * np.sqrt(2 / 4000)
    assert made["W_sd_ratio"] == pytest.approx(1, abs=0.03)
    narrow = accuracy(moments(W2[:, :100], H2[:, :100], truth["H_mean"]), truth)
    assert narrow["mean_error_sd"] > made["mean_error_sd"]  # fewer draws: more error


def test_draw_permutations_are_the_best_of_every_permutation():
    """Against brute force over the K! permutations, draw by draw."""
    import itertools

    H = RNG.random((2, 5, 4, 6))
    reference = RNG.random((4, 6))
    found = draw_permutations(H, reference)
    for c, s in itertools.product(range(2), range(5)):
        costs = {p: ((reference - H[c, s][list(p)]) ** 2).sum()
                 for p in itertools.permutations(range(4))}  # fmt: skip
        assert tuple(found[c, s]) == min(costs, key=costs.get)


def test_labels_switched_within_chains_are_undone_draw_by_draw():
    """Draws of well-separated components, each draw's labels shuffled (a sampler that
    switches labels within its chains): relabelled, their mean H is the components' own (up
    to one permutation of all), where the mean of the shuffled draws mixes them; WH, which
    no labelling changes, is untouched."""
    K, N = 3, 8
    truth = np.array([np.full(N, 0.1), np.full(N, 0.5), np.full(N, 0.9)])
    H = np.clip(truth + RNG.normal(0, 0.03, (2, 200, K, N)), 0, 1)
    W = RNG.dirichlet(np.ones(K) * 5, size=(2, 200, 7))
    shuffles = np.stack([RNG.permutation(K) for _ in range(400)]).reshape(2, 200, K)
    W_shuffled = np.take_along_axis(W, shuffles[:, :, None, :], axis=3)
    H_shuffled = np.take_along_axis(H, shuffles[..., None], axis=2)
    assert np.ptp(H_shuffled.mean(axis=(0, 1)).mean(axis=1)) < 0.1  # mixed by the shuffles
    W_back, H_back = relabel(W_shuffled, H_shuffled)
    means = H_back.mean(axis=(0, 1))
    order = np.argsort(means.mean(axis=1))
    np.testing.assert_allclose(means[order], truth, atol=0.01)
    np.testing.assert_allclose(np.matmul(W_back, H_back), np.matmul(W, H), atol=1e-12)
    made = moments(W_shuffled, H_shuffled)
    np.testing.assert_allclose(np.sort(made["H_sd"].mean(axis=1)), 0.03, atol=0.005)


def test_a_normal_with_half_the_sd_is_found_too_narrow():
    """sd_ratio of a distribution of half the sd is 0.5 (a test that fails if the ratio is
    inverted or unsquared)."""
    reference_sd = np.full((3, 3), 0.1)
    draws = norm.rvs(0.5, 0.05, size=(20000, 3, 3), random_state=2)
    assert sd_ratio(draws.std(axis=0), reference_sd) == pytest.approx(0.5, rel=0.02)


TINY = Case(
    "tiny-12x10-K2", Simulation(12, 10, 2), 2, (1.0, 1.0, 1.0),
    chains=4, warmup=300, samples=600, thinning=2,
)  # fmt: skip


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BERNMF_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_a_reference_is_built_checked_stored_and_loaded(cache):
    made = reference.reference(TINY, progress=False)
    assert made.passed
    info = json.loads((cache / "reference" / TINY.name / "info.json").read_text())
    assert info["checks"]["rhat_max"] <= reference.RHAT_MAX
    assert info["checks"]["ess_bulk_min"] >= reference.ESS_MIN
    assert info["case"]["chains"] == 4 and info["sweeps_per_chain"] == TINY.sweeps
    C, S, M, K = made.W.shape
    assert (C, M, K) == (4, 12, 2) and C * S <= reference.KEPT_DRAWS
    np.testing.assert_allclose(made.W.sum(axis=-1), 1, atol=1e-5)
    # the summaries are those of the draws (the stored ones are thinned: Monte Carlo close)
    mean, _ = wh_moments(made.W, made.H)
    np.testing.assert_allclose(made.summary["WH_mean"], mean, atol=0.02)
    again = reference.reference(TINY, progress=False)  # from the cache: the same arrays
    np.testing.assert_array_equal(again.W, made.W)
    assert again.info == made.info


def test_a_reference_that_fails_its_checks_is_refused(cache):
    short = Case("short", Simulation(12, 10, 2), 2, (1.0, 1.0, 1.0), chains=2, warmup=0,
                 samples=8, thinning=1)  # fmt: skip
    with pytest.raises(ValueError, match="failed its checks"):
        reference.reference(short, progress=False)
    assert not reference.load(short, short.key(*short.matrix()[:2])).passed


def test_the_key_follows_the_data_and_the_case():
    Y, train, _ = TINY.matrix()
    other = Y.copy()
    other[0, 0] = 1 - other[0, 0]
    keys = {TINY.key(Y, train), TINY.key(other, train), TINY.key(Y, ~train)}
    keys.add(Case(**{**TINY.__dict__, "prior": (2.0, 1.0, 1.0)}).key(Y, train))
    assert len(keys) == 4


@pytest.mark.slow
def test_the_quick_study_writes_its_tables(cache, tmp_path):
    out = tmp_path / "out"
    argv = ["--quick", "--out", str(out), "--quiet", "--families", "gibbs", "mm"]
    assert posterior_accuracy.main(argv) == 0
    table = pd.read_csv(out / "accuracy.csv")
    assert list(table.columns[:6]) == posterior_accuracy.FIRST
    assert set(table["engine"]) == {"gibbs", "mm"}
    assert set(table.loc[table["engine"] == "gibbs", "scale"]) == {1, 2}
    mm = table[table["engine"] == "mm"].iloc[0]
    assert mm["sd_ratio"] == 0.0  # a point mass
    gibbs = table[table["engine"] == "gibbs"]
    assert (gibbs["sd_ratio"].between(0.85, 1.15)).all()  # Gibbs against a Gibbs reference
    for name in ("summary.csv", "references.csv", "accuracy.png", "evaluations.png"):
        assert (out / name).exists()


def test_rhat_and_ess_of_every_wh_entry_are_those_of_the_diagnostics():
    """wh_rhat_and_ess (every entry, a few rows at a time) against rhat_and_ess with its ESS
    sample covering every entry."""
    from bernmf.posterior.draws import rhat_and_ess, wh_rhat_and_ess

    W, H = _draws(C=3, S=40, M=6, N=5)
    rhat, ess = wh_rhat_and_ess(W, H, rows_per_block=4)  # blocks that do not divide M
    expected_rhat, expected_ess, _ = rhat_and_ess(W, H, ess_entries=30)
    np.testing.assert_allclose(rhat, expected_rhat["WH"], rtol=1e-12)
    np.testing.assert_allclose(ess, expected_ess["WH"], rtol=1e-12)
