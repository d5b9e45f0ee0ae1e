"""Modes made explicit: nested R-hat against arviz_stats, R-hat of WH within and across
modes (bernmf.posterior.mixing), chains grouped by mode and the prediction that never
averages chains that did not mix (bernmf.fitting.modes)."""

from __future__ import annotations

import arviz_stats
import numpy as np
import pytest

import bernmf
from bernmf.fitting.modes import (
    H_TOL,
    SD_TOL,
    chain_distances,
    chain_modes,
    h_distances,
    mode_prediction,
)
from bernmf.fitting.stacking import chain_stacking
from bernmf.posterior.convergence import nested_rank_rhat_rows
from bernmf.posterior.draws import mean_probability, rank_rhat
from bernmf.posterior.mixing import MIXED_SHARE, chain_moments, mixed, mode_rhat

M, N, K, S = 6, 5, 2, 1000


@pytest.mark.parametrize(
    ("chains", "draws", "groups"),
    [(4, 20, [0, 0, 1, 1]), (6, 21, [2, 0, 1, 2, 0, 1]), (4, 8, [0, 1, 0, 1]), (2, 10, [0, 1])],
)
def test_nested_rhat_is_arviz_stats(chains, draws, groups):
    rng = np.random.default_rng(chains * draws)
    x = rng.normal(size=(6, chains, draws))
    x[1, :2] += 1.0  # superchains apart
    x[2] = np.round(x[2])  # ties
    x[3, 0] = np.exp(x[3, 0])  # a heavy tail in one chain
    expected = [arviz_stats.rhat_nested(row, superchain_ids=np.array(groups)) for row in x]
    np.testing.assert_allclose(nested_rank_rhat_rows(x, np.array(groups)), expected, rtol=1e-12)


def test_nested_rhat_refuses_superchains_it_does_not_define():
    x = np.zeros((1, 3, 10))
    with pytest.raises(ValueError, match="equal numbers"):
        nested_rank_rhat_rows(x, np.array([0, 0, 1]))
    with pytest.raises(ValueError, match="two superchains"):
        nested_rank_rhat_rows(x, np.array([0, 0, 0]))
    with pytest.raises(ValueError, match="integer labels"):
        nested_rank_rhat_rows(x, np.array([0.0, 1.0, 2.0]))


def _two_modes(chain_truths, seed=0, noise=0.03):
    """Draws (C, S, M, K) and (C, S, K, N): chain c scatters about truth chain_truths[c]
    (0 or 1) with independent noise each draw, so chains of one truth mix and chains of
    different truths do not. Truth 1 is truth 0 with its components swapped in H and its
    H changed."""
    rng = np.random.default_rng(seed)
    W = rng.uniform(0.2, 0.8, (M, K))
    H = [rng.uniform(0.1, 0.9, (K, N)), rng.uniform(0.1, 0.9, (K, N))[::-1]]
    W_draws = np.stack(
        [np.clip(W + noise * rng.standard_normal((S, M, K)), 0, 1) for _ in chain_truths]
    )
    H_draws = np.stack(
        [np.clip(H[t] + noise * rng.standard_normal((S, K, N)), 0, 1) for t in chain_truths]
    )
    return W_draws / W_draws.sum(axis=3, keepdims=True), H_draws, (W, H)


def test_rhat_within_modes_is_that_of_their_chains_and_across_is_high():
    W_draws, H_draws, _ = _two_modes([0, 1, 0, 1])
    result = mode_rhat(W_draws, H_draws, [5, 3, 5, 3])  # relabelled in order: 0, 1
    np.testing.assert_array_equal(result.groups, [0, 1, 0, 1])
    WH = np.einsum("csmk,cskn->csmn", W_draws, H_draws)
    for g, chains in enumerate(([0, 2], [1, 3])):
        np.testing.assert_allclose(result.within[g], rank_rhat(WH[chains]), rtol=1e-12)
    np.testing.assert_allclose(result.across, rank_rhat(WH), rtol=1e-12)
    entries = WH.reshape(4, S, -1).transpose(2, 0, 1)
    nested = [arviz_stats.rhat_nested(e, superchain_ids=np.array([0, 1, 0, 1])) for e in entries]
    np.testing.assert_allclose(result.nested.ravel(), nested, rtol=1e-12)
    assert result.mixed_within and not result.mixed_across
    table = result.table()
    assert list(table.index) == ["mode 0", "mode 1", "all", "nested"]
    assert table["mixed"].tolist() == [True, True, False, False]
    assert table.loc["all", "rhat_max"] > 1.5


def test_nested_rhat_only_for_modes_of_equal_size_and_one_chain_is_not_mixed():
    W_draws, H_draws, _ = _two_modes([0, 0, 1])
    result = mode_rhat(W_draws, H_draws, [0, 0, 1])
    assert result.nested is None
    assert np.isnan(result.within[1]).all() and not result.mixed_within
    assert "nested" not in result.table().index
    with pytest.raises(ValueError, match="2 chains"):
        mode_rhat(W_draws[:1], H_draws[:1], [0])
    with pytest.raises(ValueError, match="integer labels"):
        mode_rhat(W_draws, H_draws, [0, 1])


def test_mixed_needs_the_share_and_counts_nan_as_not_mixed():
    rhat = np.full(200, 1.001)
    assert mixed(rhat)
    rhat[:2] = 1.2  # 99% at or below 1.01
    assert mixed(rhat)
    rhat[2] = np.nan
    assert not mixed(rhat)
    assert not mixed(np.full(3, np.nan))


def test_chains_are_grouped_by_their_mean_wh_whatever_the_component_order():
    W_draws, H_draws, _ = _two_modes([1, 0, 0, 1])
    W_draws[2], H_draws[2] = W_draws[2][..., ::-1], H_draws[2][:, ::-1]  # one WH: one mode
    np.testing.assert_array_equal(chain_modes(W_draws, H_draws), [0, 1, 1, 0])
    distance = chain_distances(W_draws, H_draws)
    np.testing.assert_allclose(distance, distance.T)
    assert distance[0, 3] < 0.5 < SD_TOL < distance[0, 1]


def _ridge(chains, seed=0):
    """Draws of one posterior whose H is poorly identified: every draw's WH is that of the
    same truth (K = 2) plus noise, but each chain sits at its own point t_c of a ridge of
    (W, H) with the same WH: H[1] <- H[1] + t (H[0] - H[1]), W[:, 1] <- W[:, 1] / (1 - t)
    and W[:, 0] the rest (t below every row's W[:, 0], so W stays on the simplex). So
    the chains mix in WH while their mean H differ by more than :data:`H_TOL`."""
    rng = np.random.default_rng(seed)
    w = rng.uniform(0.5, 0.9, M)
    H = rng.uniform(0.1, 0.9, (K, N))
    H[0] = 1 - H[1]  # rows of H far apart: a step along the ridge moves H a lot
    W_draws, H_draws = [], []
    for t in np.linspace(0, 0.45, chains):
        w_draws = np.clip(w + 0.03 * rng.standard_normal((S, M)), 0.5, 0.95)
        h_draws = np.clip(H + 0.03 * rng.standard_normal((S, K, N)), 0, 1)
        second = (1 - w_draws) / (1 - t)
        W_draws.append(np.stack([1 - second, second], axis=-1))
        h_draws[:, 1] += t * (h_draws[:, 0] - h_draws[:, 1])
        H_draws.append(h_draws)
    return np.stack(W_draws), np.stack(H_draws)


def test_chains_that_mixed_are_one_mode_though_their_mean_h_differ():
    """The study's defect: 4 NUTS chains that mixed (R-hat of WH <= 1.01) counted as 4
    modes because their mean H were more than H_TOL apart along a ridge of equal WH."""
    W_draws, H_draws = _ridge(4)
    WH = np.einsum("csmk,cskn->csmn", W_draws, H_draws)
    assert mixed(rank_rhat(WH))
    assert h_distances(H_draws.mean(axis=1))[0, -1] > 2 * H_TOL
    np.testing.assert_array_equal(chain_modes(W_draws, H_draws), [0, 0, 0, 0])
    assert chain_distances(W_draws, H_draws).max() < 0.5
    Y = (np.random.default_rng(3).random((M, N)) < WH[0, 0]).astype(float)
    result = mode_prediction(Y, np.ones((M, N), bool), W_draws, H_draws)
    assert (result.rule, result.status) == ("mean", "mixed")
    assert list(result.rhat.table().index) == ["mode 0", "all"]


@pytest.mark.slow
def test_nuts_chains_that_mixed_are_one_mode():
    """Real NUTS on data simulated from the model (30 x 20, K = 3, Beta(0.3, 0.3)): the
    2 chains mix in WH, while their mean H are about 0.1 RMS apart (2 modes by H_TOL)."""
    prior = bernmf.Prior(0.3, 0.3, 1.0)
    Y = bernmf.simulate(0, 30, 20, 3, prior)[0]
    fit = bernmf.fit(Y, "nuts", 3, prior=prior, num_chains=2, num_warmup=1000, num_samples=1000)
    W_draws, H_draws = fit.draws["W"], fit.draws["H"]
    assert h_distances(H_draws.mean(axis=1))[0, 1] > H_TOL
    np.testing.assert_array_equal(chain_modes(W_draws, H_draws), [0, 0])
    result = mode_prediction(Y, np.ones(Y.shape, bool), W_draws, H_draws)
    assert (result.rule, result.status) == ("mean", "mixed")
    assert list(result.rhat.table().index) == ["mode 0", "all"]


def test_chain_distance_is_the_99th_percentile_of_mean_differences_in_posterior_sds():
    """With K = 1, WH is H: chains of one normal posterior (sd 0.05), chain 1 moved by two
    sds on some entries: on 3 of 200 (1.5%) it is another mode, on 1 (0.5%) the same."""
    rng = np.random.default_rng(4)
    entries = 200
    W_draws = np.ones((2, S, 1, 1))
    H_draws = 0.5 + 0.05 * rng.standard_normal((2, S, 1, entries))
    means, variances = chain_moments(W_draws, H_draws, max_block_values=3 * entries)
    np.testing.assert_allclose(means[:, 0], H_draws[:, :, 0].mean(axis=1))
    np.testing.assert_allclose(variances[:, 0], H_draws[:, :, 0].var(axis=1))
    z = np.abs(np.diff(means, axis=0)[0]) / np.sqrt(variances.mean(axis=0))
    distance = chain_distances(W_draws, H_draws)[0, 1]
    assert distance == pytest.approx(np.quantile(z, MIXED_SHARE, method="inverted_cdf"))
    assert distance < 0.5
    for moved, apart in ((3, True), (1, False)):
        shifted = H_draws.copy()
        shifted[1, :, 0, :moved] += 0.1
        assert (chain_distances(W_draws, shifted)[0, 1] > SD_TOL) == apart
        np.testing.assert_array_equal(chain_modes(W_draws, shifted), [0, int(apart)])


def test_chain_distances_check_the_draws():
    W_draws, H_draws, _ = _two_modes([0, 1])
    with pytest.raises(ValueError, match="shapes"):
        chain_distances(W_draws[..., :1], H_draws)
    with pytest.raises(ValueError, match="2 chains"):
        chain_modes(W_draws[:1], H_draws[:1])


def test_a_prediction_averages_mixed_chains_and_stacks_the_others():
    W_draws, H_draws, (W, H) = _two_modes([0, 0, 1, 1])
    rng = np.random.default_rng(1)
    Y = (rng.random((M, N)) < W @ H[0]).astype(float)
    mask = rng.random((M, N)) < 0.6
    validation = ~mask
    one = mode_prediction(Y, mask, W_draws[:2], H_draws[:2], validation=validation)
    assert (one.rule, one.status) == ("mean", "mixed")
    np.testing.assert_allclose(one.probs, mean_probability(W_draws[:2], H_draws[:2]))
    two = mode_prediction(Y, mask, W_draws, H_draws, validation=validation)
    assert (two.rule, two.status) == ("chain stacking", "mixed within modes")
    np.testing.assert_array_equal(two.rhat.groups, [0, 0, 1, 1])
    weights = chain_stacking(Y, mask, W_draws, H_draws, validation=validation).weights
    np.testing.assert_allclose(two.weights, weights)
    expected = sum(
        w * mean_probability(W_draws[c : c + 1], H_draws[c : c + 1]) for c, w in enumerate(weights)
    )
    np.testing.assert_allclose(two.probs, expected)
    assert not np.allclose(two.probs, mean_probability(W_draws, H_draws))


def test_chains_that_do_not_mix_within_a_mode_are_stacked_and_say_so():
    """Chains 0 and 1 in one mode (by mean H) but one drifting: within the mode R-hat is
    high, the status "did not mix"; without validation entries, PSIS-LOO weights."""
    W_draws, H_draws, (W, H) = _two_modes([0, 0, 1, 1])
    H_draws[1] = np.clip(H_draws[1] + np.linspace(-0.04, 0.04, S)[:, None, None], 0, 1)
    rng = np.random.default_rng(2)
    Y = (rng.random((M, N)) < W @ H[0]).astype(float)
    mask = np.ones((M, N), bool)
    result = mode_prediction(Y, mask, W_draws, H_draws)
    np.testing.assert_array_equal(result.rhat.groups, [0, 0, 1, 1])
    assert (result.rule, result.status) == ("chain stacking", "did not mix")
    assert not mixed(result.rhat.within[0]) and mixed(result.rhat.within[1])
    np.testing.assert_allclose(result.weights, chain_stacking(Y, mask, W_draws, H_draws).weights)


def test_a_prediction_checks_its_data_before_anything_runs():
    W_draws, H_draws, _ = _two_modes([0, 0])
    Y, mask = np.zeros((M, N)), np.ones((M, N), bool)
    with pytest.raises(ValueError, match="do not match"):
        mode_prediction(Y[:, :-1], mask[:, :-1], W_draws, H_draws)
    with pytest.raises(ValueError, match="mode_prediction mask"):
        mode_prediction(Y + 2, mask, W_draws, H_draws)
