"""Modes made explicit: nested R-hat against arviz_stats and over start groups, R-hat of WH
within and across modes judged at the chains' ESS (bernmf.posterior.mixing), chains grouped
by mode, the prediction that never averages chains in distinct modes (bernmf.posterior.modes),
and the samplers' start groups (chains_per_start)."""

from __future__ import annotations

import arviz_stats
import numpy as np
import pytest

import bernmf
from bernmf.data.observed import as_observed
from bernmf.inference import nuts
from bernmf.posterior.convergence import ess_rows, nested_rank_rhat_rows
from bernmf.posterior.draws import mean_probability, rank_rhat
from bernmf.posterior.mixing import (
    ESS_MIN,
    MIXED_SHARE,
    chain_ess,
    chain_moments,
    mixed,
    mode_rhat,
    rhat_bound,
)
from bernmf.posterior.modes import (
    H_TOL,
    MC_TOL,
    chain_distances,
    chain_modes,
    h_distances,
    mode_prediction,
)
from bernmf.posterior.stacking_weights import chain_stacking

M, N, K, S = 6, 5, 2, 400


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


def test_rhat_within_modes_is_that_of_their_chains_and_nested_is_over_the_starts():
    """Chains 0, 2 in one mode and 1, 3 in another, started in groups {0, 1} and {2, 3}:
    nested R-hat takes the start groups as superchains (arviz_stats' with those ids), not
    the modes, which would make it agree with where the chains went."""
    W_draws, H_draws, _ = _two_modes([0, 1, 0, 1])
    result = mode_rhat(W_draws, H_draws, [5, 3, 5, 3], starts=[7, 7, 2, 2])  # relabelled
    np.testing.assert_array_equal(result.modes, [0, 1, 0, 1])
    np.testing.assert_array_equal(result.starts, [0, 0, 1, 1])
    WH = np.einsum("csmk,cskn->csmn", W_draws, H_draws)
    for g, chains in enumerate(([0, 2], [1, 3])):
        np.testing.assert_allclose(result.within[g], rank_rhat(WH[chains]), rtol=1e-12)
    np.testing.assert_allclose(result.across, rank_rhat(WH), rtol=1e-12)
    entries = WH.reshape(4, S, -1).transpose(2, 0, 1)
    by_start = [arviz_stats.rhat_nested(e, superchain_ids=np.array([0, 0, 1, 1])) for e in entries]
    np.testing.assert_allclose(result.nested.ravel(), by_start, rtol=1e-12)
    by_mode = mode_rhat(W_draws, H_draws, [0, 1, 0, 1], starts=[0, 1, 0, 1]).nested
    assert np.median(by_mode) > 1.5 > 1.1 > np.median(result.nested)  # each superchain: both
    assert result.status == "distinct modes" and not result.mixed_across
    table = result.table()
    assert list(table.index) == ["mode 0", "mode 1", "all", "nested"]
    assert (table.loc[["mode 0", "mode 1"], "share_rhat_le_bound"] >= MIXED_SHARE).all()
    assert table.loc["all", "share_rhat_le_bound"] < 0.5 < 1.5 < table.loc["all", "rhat_max"]
    least = [result.ess[[0, 2]].min(), result.ess[[1, 3]].min(), result.ess.min()]
    np.testing.assert_array_equal(table["ess_bulk_chain_min"].iloc[:3], least)
    assert np.isnan(table.loc["nested", "rhat_bound"])


def test_nested_rhat_only_over_equal_start_groups_of_several_chains():
    W_draws, H_draws, _ = _two_modes([0, 0, 1])
    result = mode_rhat(W_draws, H_draws, [0, 0, 1], starts=[0, 0, 1])
    assert result.nested is None and "nested" not in result.table().index
    assert np.isnan(result.within[1]).all()
    assert result.table().loc["mode 1", ["rhat_max", "share_rhat_le_bound"]].isna().all()
    W_draws, H_draws, _ = _two_modes([0, 0, 1, 1])
    for starts in (None, [0, 1, 2, 3], [0, 0, 0, 0]):  # none, of one chain each, one group
        assert mode_rhat(W_draws, H_draws, [0, 0, 1, 1], starts=starts).nested is None
    with pytest.raises(ValueError, match="2 chains"):
        mode_rhat(W_draws[:1], H_draws[:1], [0])
    with pytest.raises(ValueError, match="modes must be 4 integer labels"):
        mode_rhat(W_draws, H_draws, [0, 1])
    with pytest.raises(ValueError, match="starts must be 4 integer labels"):
        mode_rhat(W_draws, H_draws, [0, 0, 1, 1], starts=[0.0, 0.0, 1.0, 1.0])


def test_mixed_needs_the_share_and_counts_nan_as_not_mixed():
    rhat = np.full(200, 1.001)
    assert mixed(rhat)
    rhat[:2] = 1.2  # 99% at or below 1.01
    assert mixed(rhat)
    rhat[2] = np.nan
    assert not mixed(rhat)
    assert not mixed(np.full(3, np.nan))


def _normal_chains(draws, means, entries=1000, seed=0):
    """Draws with K = 1, so that WH is H: chain c of ``draws`` iid normal draws per entry,
    sd 0.05, about 0.5 + ``means[c]`` sds; W all ones."""
    rng = np.random.default_rng(seed)
    C = len(means)
    H_draws = 0.5 + 0.05 * (
        rng.standard_normal((C, draws, 1, entries)) + np.c_[means][:, :, None, None]
    )
    return np.ones((C, draws, 1, 1)), H_draws


@pytest.mark.parametrize(
    ("draws", "statuses"), [(50, {"low ESS"}), (100, {"mixed", "low ESS"}), (400, {"mixed"})]
)
def test_iid_chains_are_mixed_or_of_low_ess_never_distinct_modes(draws, statuses):
    """The reviewer's case: 4 chains of 100 iid draws have R-hat <= 1.01 on only about 90%
    of the entries, which the fixed rule called "did not mix". At 50 draws a chain is too
    short (ESS under 100), at 400 mixed; whatever the length, one mode, averaged."""
    W_draws, H_draws = _normal_chains(draws, [0, 0, 0, 0], seed=draws)
    result = mode_prediction(np.zeros((1, 1000)), np.ones((1, 1000), bool), W_draws, H_draws)
    assert result.status in statuses and result.rule == "mean"
    np.testing.assert_array_equal(result.rhat.modes, [0, 0, 0, 0])
    table = result.rhat.table()
    if draws == 100:  # the fixed rule's failure, and what the bound at that ESS allows
        assert (
            table.loc["all", "share_rhat_le_1.01"]
            < MIXED_SHARE
            <= table.loc["all", "share_rhat_le_bound"]
        )
    np.testing.assert_allclose(result.rhat.ess, draws, rtol=0.1)


@pytest.mark.parametrize(("draws", "status"), [(400, "distinct modes"), (40, "low ESS")])
def test_chains_apart_are_distinct_modes_only_at_an_adequate_ess(draws, status):
    """2 + 2 chains whose means are 3 sds apart on every entry: at 400 draws each chain
    sampled its mode well and they disagree (chain stacking); at 40 they are too short to
    tell (the mean of all draws), though the modes are told apart either way."""
    W_draws, H_draws = _normal_chains(draws, [0, 0, 3, 3], entries=100)
    Y = (np.random.default_rng(1).random((1, 100)) < 0.5).astype(float)
    result = mode_prediction(Y, np.ones((1, 100), bool), W_draws, H_draws)
    np.testing.assert_array_equal(result.rhat.modes, [0, 0, 1, 1])
    assert result.status == status
    assert result.rule == ("chain stacking" if status == "distinct modes" else "mean")
    assert (result.rhat.ess < ESS_MIN).all() == (draws < ESS_MIN)


def test_the_rhat_bound_is_what_chains_of_that_ess_reach():
    """Fresh iid chains (not the bound's own seed) stay within the bound of their ESS on
    99.5% of their entries; AR(1) chains of rho = (S - e) / (S + e) have a bulk ESS of
    about e; the bound falls with the ESS to the floor 1.01, and rises with fewer chains."""
    rng = np.random.default_rng(11)
    for draws in (100, 250):
        rhat = rank_rhat(rng.standard_normal((4, draws, 3000)))
        assert np.mean(rhat <= rhat_bound(4, draws, draws)) >= 0.995
    draws, ess = 250, 50
    rho = (draws - ess) / (draws + ess)
    x = np.empty((2000, 1, draws))
    x[..., 0] = rng.standard_normal((2000, 1))
    for t in range(1, draws):
        x[..., t] = rho * x[..., t - 1] + np.sqrt(1 - rho**2) * rng.standard_normal((2000, 1))
    assert np.median(ess_rows(x, "bulk")) == pytest.approx(ess, rel=0.15)
    bounds = [rhat_bound(4, draws, e) for e in (25, 50, 100, draws)]
    assert bounds == sorted(bounds, reverse=True) and bounds[-1] > 1.01
    assert rhat_bound(4, 400, 400) == 1.01  # iid chains of 400: 99.9% of R-hat under 1.01
    assert rhat_bound(2, 100, 100) > rhat_bound(4, 100, 100)  # fewer chains: noisier
    with pytest.raises(ValueError, match="positive ESS"):
        rhat_bound(4, 100, 0.0)


def test_chain_ess_is_the_median_of_each_chains_own_bulk_ess():
    """arviz_stats' bulk ESS of each chain alone, every entry of a 6 x 5 WH (fewer than
    ``entries``); a chain that drifts within itself has a low one."""
    W_draws, H_draws, _ = _two_modes([0, 0])
    H_draws[1] = np.clip(H_draws[1] + np.linspace(-0.04, 0.04, S)[:, None, None], 0, 1)
    WH = np.einsum("csmk,cskn->csmn", W_draws, H_draws).reshape(2, S, -1)
    expected = [
        np.median([arviz_stats.ess(WH[c : c + 1, :, e]) for e in range(M * N)]) for c in (0, 1)
    ]
    np.testing.assert_allclose(chain_ess(W_draws, H_draws), expected, rtol=1e-10)
    assert expected[1] < ESS_MIN < expected[0]
    assert chain_ess(W_draws, H_draws, entries=7).shape == (2,)


def test_chains_are_grouped_by_their_mean_wh_whatever_the_component_order():
    W_draws, H_draws, _ = _two_modes([1, 0, 0, 1])
    W_draws[2], H_draws[2] = W_draws[2][..., ::-1], H_draws[2][:, ::-1]  # one WH: one mode
    np.testing.assert_array_equal(chain_modes(W_draws, H_draws), [0, 1, 1, 0])
    distance = chain_distances(W_draws, H_draws)
    np.testing.assert_allclose(distance, distance.T)
    assert distance[0, 3] < 4 < MC_TOL < distance[0, 1]


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
    assert chain_distances(W_draws, H_draws).max() < 4
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


def test_chain_distance_is_the_99th_percentile_of_mean_differences_in_standard_errors():
    """With K = 1, WH is H: chains of one normal posterior (sd 0.05, iid draws: ESS S),
    chain 1 moved by two sds (45 standard errors) on some entries: on 3 of 200 (1.5%) it
    is another mode, on 1 (0.5%) the same."""
    entries = 200
    W_draws, H_draws = _normal_chains(S, [0, 0], entries=entries, seed=4)
    means, variances = chain_moments(W_draws, H_draws, max_block_values=3 * entries)
    np.testing.assert_allclose(means[:, 0], H_draws[:, :, 0].mean(axis=1))
    np.testing.assert_allclose(variances[:, 0], H_draws[:, :, 0].var(axis=1))
    ess = np.array([S, S / 2])
    z = np.abs(np.diff(means, axis=0)[0]) / np.sqrt(variances[0] / S + variances[1] / (S / 2))
    distance = chain_distances(W_draws, H_draws, ess)[0, 1]
    assert distance == pytest.approx(np.quantile(z, MIXED_SHARE, method="inverted_cdf"))
    assert chain_distances(W_draws, H_draws)[0, 1] < 4 < MC_TOL  # ESS of about S each
    for moved, apart in ((3, True), (1, False)):
        shifted = H_draws.copy()
        shifted[1, :, 0, :moved] += 0.1
        assert (chain_distances(W_draws, shifted, [S, S])[0, 1] > MC_TOL) == apart
        np.testing.assert_array_equal(chain_modes(W_draws, shifted, [S, S]), [0, int(apart)])


def test_chain_distances_check_the_draws():
    W_draws, H_draws, _ = _two_modes([0, 1])
    with pytest.raises(ValueError, match="shapes"):
        chain_distances(W_draws[..., :1], H_draws)
    with pytest.raises(ValueError, match="2 chains"):
        chain_modes(W_draws[:1], H_draws[:1])


def test_a_prediction_averages_mixed_chains_and_stacks_distinct_modes():
    W_draws, H_draws, (W, H) = _two_modes([0, 0, 1, 1])
    rng = np.random.default_rng(1)
    Y = (rng.random((M, N)) < W @ H[0]).astype(float)
    mask = rng.random((M, N)) < 0.6
    validation = ~mask
    one = mode_prediction(Y, mask, W_draws[:2], H_draws[:2], validation=validation)
    assert (one.rule, one.status) == ("mean", "mixed")
    np.testing.assert_allclose(one.probs, mean_probability(W_draws[:2], H_draws[:2]))
    two = mode_prediction(Y, mask, W_draws, H_draws, validation=validation)
    assert (two.rule, two.status) == ("chain stacking", "distinct modes")
    np.testing.assert_array_equal(two.rhat.modes, [0, 0, 1, 1])
    weights = chain_stacking(Y, mask, W_draws, H_draws, validation=validation).weights
    np.testing.assert_allclose(two.weights, weights)
    expected = sum(
        w * mean_probability(W_draws[c : c + 1], H_draws[c : c + 1]) for c, w in enumerate(weights)
    )
    np.testing.assert_allclose(two.probs, expected)
    assert not np.allclose(two.probs, mean_probability(W_draws, H_draws))


def test_a_chain_that_drifts_is_low_ess_and_the_chains_are_averaged():
    """Chains 0, 1 in one mode and 2, 3 in another, but chain 1 drifting within itself: its
    ESS is under ESS_MIN, so it has not sampled its mode well; the status is "low ESS" and
    the prediction the mean of all draws, though the chains' means are told apart."""
    W_draws, H_draws, (W, H) = _two_modes([0, 0, 1, 1])
    H_draws[1] = np.clip(H_draws[1] + np.linspace(-0.04, 0.04, S)[:, None, None], 0, 1)
    rng = np.random.default_rng(2)
    Y = (rng.random((M, N)) < W @ H[0]).astype(float)
    result = mode_prediction(Y, np.ones((M, N), bool), W_draws, H_draws)
    np.testing.assert_array_equal(result.rhat.modes, [0, 0, 1, 1])
    assert (result.rule, result.status) == ("mean", "low ESS")
    assert result.rhat.ess[1] < ESS_MIN < result.rhat.ess[[0, 2, 3]].min()
    np.testing.assert_allclose(result.probs, mean_probability(W_draws, H_draws))


def test_a_prediction_checks_its_data_before_anything_runs():
    W_draws, H_draws, _ = _two_modes([0, 0])
    Y, mask = np.zeros((M, N)), np.ones((M, N), bool)
    with pytest.raises(ValueError, match="do not match"):
        mode_prediction(Y[:, :-1], mask[:, :-1], W_draws, H_draws)
    with pytest.raises(ValueError, match="mode_prediction mask"):
        mode_prediction(Y + 2, mask, W_draws, H_draws)


def test_chains_per_start_shares_the_start_of_each_groups_first_chain():
    """nuts' starts: with the default 1, chain c starts where the one-chain fit of seed + c
    starts (inference/chains.py relies on it); with 2, chains 0 and 1 start at chain 0's
    start and chains 2 and 3 at chain 2's, itself the start of seed + 2."""
    Y, _, _ = bernmf.simulate(4, 7, 6, 3)
    data = as_observed(Y)
    prior = bernmf.Prior(0.5, 0.5, 0.5).broadcast(3)
    alone = [nuts.initial_factors(data, 3, prior, 5 + c, None, "prior", 1) for c in range(4)]
    each = nuts.initial_factors(data, 3, prior, 5, None, "prior", 4)
    paired = nuts.initial_factors(data, 3, prior, 5, None, "prior", 4, chains_per_start=2)
    for c in range(4):
        for i in (0, 1):  # W, H
            np.testing.assert_array_equal(each[i][c], alone[c][i][0])
            np.testing.assert_array_equal(paired[i][c], alone[2 * (c // 2)][i][0])
    assert not np.allclose(paired[0][1], each[0][1])
    for engine in ("nuts", "gibbs"):
        with pytest.raises(ValueError, match="chains_per_start"):
            bernmf.fit(Y, engine, 2, chains_per_start=0)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["nuts", "gibbs"])
def test_chains_of_one_start_begin_at_one_point_and_sample_with_their_own_keys(engine):
    """4 chains in 2 start groups: the log joint at the start is shared within a group and
    differs between groups; the chains of a group then differ (their own keys). With the
    default, nuts' chain 1 of seed 3 is the one-chain fit of seed 4 (gibbs': tested in
    test_gibbs_vb.py)."""
    Y, _, _ = bernmf.simulate(4, 12, 8, 2)
    options = {"num_warmup": 10, "num_samples": 6, "progress": False}
    fit = bernmf.fit(Y, engine, 2, seed=3, num_chains=4, chains_per_start=2, **options)
    start = fit.posterior.log_joint[:, 0]
    assert start[0] == start[1] != start[2] == start[3]
    assert fit.posterior.chains_per_start == 2
    assert not np.allclose(fit.draws["H"][0], fit.draws["H"][1])
    if engine == "nuts":
        pair = bernmf.fit(Y, engine, 2, seed=3, num_chains=2, **options)
        one = bernmf.fit(Y, engine, 2, seed=4, num_chains=1, **options)
        np.testing.assert_array_equal(pair.draws["H"][1], one.draws["H"][0])
        assert pair.posterior.chains_per_start == 1
