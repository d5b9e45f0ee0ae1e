"""Stacking weights: against brute-force grids, known truth, and arviz_stats' PSIS-LOO."""

from __future__ import annotations

import itertools
import warnings

import arviz_base
import arviz_stats
import jax
import numpy as np
import pytest
import scipy.optimize

import bernmf
from bernmf.models import ZeroProbabilityWarning, simulate
from bernmf.posterior import stacking_weights as stacking
from bernmf.posterior.arviz import pointwise_log_likelihood
from bernmf.posterior.lpd import bernoulli_lpd, mixture_lpd
from bernmf.posterior.psis import _mean_log1p, psis_loo
from bernmf.posterior.stacking_weights import chain_stacking, stacking_weights


@pytest.fixture(scope="module")
def truth():
    """Y (40 x 30) simulated from W (40 x 3) and H (3 x 30) with H kept off 0 and 1."""
    Y, W, H = simulate(0, 40, 30, 3)
    H = np.clip(H, 0.05, 0.95)
    Y = (np.random.default_rng(1).random(Y.shape) < W @ H).astype(float)
    return Y, W, H


def score(lpd, weights):
    return mixture_lpd(lpd, weights).sum()


def grid_argmax(lpd):
    """Weights maximizing the log score over a simplex grid, refined to steps of 2.5e-4."""
    R = lpd.shape[1]
    density = np.exp(lpd)
    best, step, radius = np.full(R, 1 / R), 0.01, 1.0
    for _ in range(3):
        axes = [np.arange(-radius, radius + step / 2, step) + b for b in best[:-1]]
        points = np.array(list(itertools.product(*axes)))
        points = np.column_stack([points, 1 - points.sum(axis=1)])
        points = points[(points >= -1e-12).all(axis=1)].clip(0)
        with np.errstate(divide="ignore"):
            scores = np.log(density @ points.T).sum(axis=0)
        best = points[np.argmax(scores)]
        radius, step = 2 * step, step / 5
    return best


def members_lpd(truth, *probs):
    Y, _, _ = truth
    return bernoulli_lpd(Y, np.ones(Y.shape, bool), np.stack(probs))


def test_a_coin_flip_and_a_shuffled_member_get_almost_no_weight(truth):
    Y, W, H = truth
    good = W @ H
    shuffled = np.random.default_rng(2).permutation(good.ravel()).reshape(good.shape)
    lpd = members_lpd(truth, np.full(Y.shape, 0.5), good, shuffled)
    weights = stacking_weights(lpd)
    assert weights.shape == (3,)
    assert np.all(weights >= 0) and weights.sum() == pytest.approx(1, abs=1e-12)
    assert weights[0] < 0.01 and weights[2] < 0.01


def test_identical_members_share_the_weight_of_one(truth):
    _, W, H = truth
    lpd = members_lpd(truth, W @ H, np.clip(W @ H + 0.15, 0, 1), W @ H)
    alone = stacking_weights(lpd[:, :2])
    weights = stacking_weights(lpd)
    assert weights[0] + weights[2] == pytest.approx(alone[0], abs=1e-6)
    assert weights[0] == pytest.approx(weights[2], abs=1e-9)
    moved = weights + np.array([0.5, 0, -0.5]) * min(weights[0], weights[2])
    assert score(lpd, moved) == pytest.approx(score(lpd, weights), rel=1e-12)


@pytest.mark.parametrize("members", [2, 3])
def test_weights_match_a_brute_force_grid(members):
    # each member predicts its own third of the entries best: the optimum is interior
    rng = np.random.default_rng(members)
    n = 300
    y = rng.random(n) < 0.4
    group = np.arange(n) % 3
    probs = np.empty((n, members))
    for r in range(members):
        sharp = np.where(y, 0.85, 0.15)
        probs[:, r] = np.where(group == r, sharp, rng.uniform(0.2, 0.8, n))
    lpd = np.where(y[:, None], np.log(probs), np.log1p(-probs))
    weights = stacking_weights(lpd)
    reference = grid_argmax(lpd)
    assert np.all(reference > 0.05)
    np.testing.assert_allclose(weights, reference, atol=1e-3)
    assert score(lpd, weights) >= score(lpd, reference) - 1e-9


def test_stacked_score_beats_the_best_member_and_the_uniform_mixture(truth):
    Y, W, H = truth
    rng = np.random.default_rng(3)
    noisy = [np.clip(W @ H + rng.normal(0, s, Y.shape), 0.01, 0.99) for s in (0.05, 0.1, 0.2)]
    lpd = members_lpd(truth, *noisy, np.full(Y.shape, Y.mean()))
    stacked = score(lpd, stacking_weights(lpd))
    assert stacked >= lpd.sum(axis=0).max() - 1e-9
    assert stacked >= score(lpd, np.full(4, 0.25)) - 1e-9


def test_probability_zero_entries_are_handled_exactly():
    rng = np.random.default_rng(4)
    good = np.log(rng.uniform(0.5, 0.9, 500))
    bad = np.log(rng.uniform(0.1, 0.9, 500))
    good[3:6] = -np.inf  # the better member gives three entries probability 0
    bad[:3] = -np.inf
    lpd = np.column_stack([good, bad])
    weights = stacking_weights(lpd)
    np.testing.assert_allclose(weights, grid_argmax(lpd), atol=1e-3)
    assert 0 < weights[1] < 0.05
    # an entry that no member can explain does not move the weights
    both = np.vstack([lpd, [-np.inf, -np.inf]])
    np.testing.assert_allclose(stacking_weights(both), weights, atol=1e-9)
    assert mixture_lpd(both, weights)[-1] == -np.inf
    # a member with weight 0 may give probability 0 without making the mixture -inf
    assert np.isfinite(mixture_lpd(lpd, [1.0, 0.0])[:3]).all()
    with pytest.raises(ValueError, match="every member gives every entry probability 0"):
        stacking_weights(np.full((3, 2), -np.inf))


def test_weights_are_deterministic_and_shift_invariant():
    lpd = np.log(np.random.default_rng(5).uniform(0.05, 1, (200, 6)))
    weights = stacking_weights(lpd)
    np.testing.assert_array_equal(stacking_weights(lpd), weights)
    # adding a constant to an entry's lpd under every member changes nothing
    shifted = lpd - 800.0 * np.arange(200)[:, None]
    np.testing.assert_allclose(stacking_weights(shifted), weights, atol=1e-7)
    assert stacking_weights(lpd[:, :1]).tolist() == [1.0]


@pytest.mark.parametrize(
    ("lpd", "error", "match"),
    [
        (np.zeros(3), ValueError, "shape"),
        (np.zeros((0, 2)), ValueError, "shape"),
        (np.array([[0.0, np.nan]]), ValueError, "NaN"),
        (np.array([[0.0, np.inf]]), ValueError, r"\+inf"),
        (np.array([["a", "b"]]), TypeError, "real"),
    ],
)
def test_bad_lpd_is_rejected(lpd, error, match):
    with pytest.raises(error, match=match):
        stacking_weights(lpd)


def test_mixture_lpd_is_the_log_of_the_weighted_density():
    lpd = np.log(np.random.default_rng(6).uniform(0.05, 1, (50, 3)))
    weights = np.array([0.2, 0.0, 0.8])
    np.testing.assert_allclose(mixture_lpd(lpd, weights), np.log(np.exp(lpd) @ weights))
    for bad in ([0.5, 0.5], [0.5, 0.6, -0.1], [0.5, 0.4, 0.0]):
        with pytest.raises(ValueError, match="weights"):
            mixture_lpd(lpd, bad)


def test_bernoulli_lpd_scores_the_selected_entries_of_each_member(truth):
    Y, W, H = truth
    Y = Y.copy()
    Y[0, 0] = np.nan  # missing: never scored, even where mask is True
    mask = np.random.default_rng(7).random(Y.shape) < 0.3
    mask[0, 0] = True
    probs = np.stack([W @ H, np.full(Y.shape, 0.3)])
    lpd = bernoulli_lpd(Y, mask, probs)
    rows, columns = np.nonzero(mask & ~np.isnan(Y))
    y = Y[rows, columns][:, None]
    p = probs[:, rows, columns].T
    np.testing.assert_allclose(lpd, y * np.log(p) + (1 - y) * np.log1p(-p))
    with pytest.raises(ValueError, match="members, M, N"):
        bernoulli_lpd(Y, mask, W @ H)
    with pytest.raises(ValueError, match="outside"):
        bernoulli_lpd(Y, mask, probs * 2)
    with pytest.raises(ValueError, match="no entry"):
        bernoulli_lpd(Y, np.zeros(Y.shape, bool), probs)


def chain_draws(rng, W, H, draws=60, concentration=300.0):
    """Draws concentrated around (W, H): Dirichlet rows of W, Beta entries of H."""
    W_draws = rng.gamma(concentration * W + 1e-3, size=(draws, *W.shape))
    W_draws /= W_draws.sum(axis=-1, keepdims=True)
    H_draws = rng.beta(concentration * H, concentration * (1 - H), size=(draws, *H.shape))
    return W_draws, H_draws


def posterior(rng, truth, *modes):
    """Stacked (C, S, M, K) and (C, S, K, N) draws, one chain around each (W, H) mode."""
    chains = [chain_draws(rng, W, H) for W, H in modes]
    return np.stack([c[0] for c in chains]), np.stack([c[1] for c in chains])


def test_chain_stacking_weights_chains_by_their_predictive_quality(truth):
    Y, W, H = truth
    rng = np.random.default_rng(8)
    mask = rng.random(Y.shape) < 0.8
    wrong = (W, H[:, rng.permutation(H.shape[1])])  # a mode that predicts columns badly
    W_draws, H_draws = posterior(rng, truth, (W, H), wrong)
    result = chain_stacking(Y, mask, W_draws, H_draws)
    assert result.weights[0] > 0.95
    assert result.elpd[0] > result.elpd[1]
    assert result.lpd.shape == result.pareto_k.shape == (mask.sum(), 2)
    assert np.all((result.share_k_high >= 0) & (result.share_k_high <= 1))
    # scoring on held-out entries instead agrees on which chain is better
    held_out = chain_stacking(Y, mask, W_draws, H_draws, validation=~mask)
    assert held_out.weights[0] > 0.95 and held_out.pareto_k is None
    assert np.isnan(held_out.share_k_high).all()


def test_equally_good_modes_get_about_half_each(truth):
    Y, W, H = truth
    rng = np.random.default_rng(9)
    mask = rng.random(Y.shape) < 0.5
    # label switching: the same mode with its components permuted predicts the same
    order = [2, 0, 1]
    W_draws, H_draws = posterior(rng, truth, (W, H))
    switched = (np.concatenate([W_draws, W_draws[..., order]]),)
    switched += (np.concatenate([H_draws, H_draws[:, :, order]]),)
    np.testing.assert_allclose(chain_stacking(Y, mask, *switched).weights, 0.5, atol=1e-6)
    # two modes, each right about a different half of the rows: both are needed
    half = np.arange(Y.shape[0]) < Y.shape[0] // 2
    worse = np.roll(W, 1, axis=1)
    top, bottom = np.where(half[:, None], W, worse), np.where(half[:, None], worse, W)
    W_draws, H_draws = posterior(rng, truth, (top, H), (bottom, H))
    result = chain_stacking(Y, mask, W_draws, H_draws)
    np.testing.assert_allclose(result.weights, 0.5, atol=0.1)
    stacked = mixture_lpd(result.lpd, result.weights).sum()
    assert stacked > result.elpd.max() + 4


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto")
def test_chain_psis_loo_matches_arviz_loo_on_that_chains_datatree(truth):
    Y, W, H = truth
    rng = np.random.default_rng(10)
    mask = rng.random(Y.shape) < 0.5
    W_draws, H_draws = posterior(rng, truth, (W, H), (np.roll(W, 1, axis=1), H))
    result = chain_stacking(Y, mask, W_draws, H_draws, max_block_values=1000)
    for c in range(2):
        terms = pointwise_log_likelihood(Y, mask, W_draws[c : c + 1], H_draws[c : c + 1])
        tree = arviz_base.from_dict(
            {"posterior": {"H": H_draws[c : c + 1]}, "log_likelihood": {"Y": terms}}
        )
        loo = arviz_stats.loo(tree, pointwise=True)
        np.testing.assert_allclose(result.lpd[:, c], loo.elpd_i.values, rtol=0, atol=1e-8)
        np.testing.assert_allclose(result.pareto_k[:, c], loo.pareto_k.values, atol=1e-8)
        assert result.elpd[c] == pytest.approx(loo.elpd, abs=1e-8)
    # held-out scoring is the log of the posterior-mean probability of each entry
    held_out = chain_stacking(Y, mask, W_draws, H_draws, validation=~mask)
    terms = pointwise_log_likelihood(Y, ~mask, W_draws, H_draws)
    expected = np.log(np.exp(terms).mean(axis=1)).T
    np.testing.assert_allclose(held_out.lpd, expected, rtol=1e-12)


def test_chain_stacking_rejects_bad_input(truth):
    Y, W, H = truth
    mask = np.ones(Y.shape, bool)
    W_draws, H_draws = posterior(np.random.default_rng(11), truth, (W, H))
    with pytest.raises(ValueError, match="overlap"):
        chain_stacking(Y, mask, W_draws, H_draws, validation=mask)
    with pytest.raises(ValueError, match="do not match"):
        chain_stacking(Y, mask, W_draws, H_draws[..., :-1])
    with pytest.raises(ValueError, match=r"\(C, S, M, K\)"):
        chain_stacking(Y, mask, W_draws[0], H_draws[0])
    with pytest.raises(ValueError, match="r_eff"):
        chain_stacking(Y, mask, W_draws, H_draws, r_eff=0)
    with pytest.raises(ValueError, match="0, 1 or NaN"):
        chain_stacking(Y * 2, mask, W_draws, H_draws)
    with pytest.raises(ValueError, match="at least 25 draws"):
        chain_stacking(Y, mask, W_draws[:, :20], H_draws[:, :20])
    train = np.arange(Y.size).reshape(Y.shape) % 5 > 0
    one_draw = chain_stacking(Y, train, W_draws[:, :1], H_draws[:, :1], validation=~train)
    assert one_draw.weights.tolist() == [1.0]
    stuck = (np.repeat(W_draws[:, :1], 30, axis=1), np.repeat(H_draws[:, :1], 30, axis=1))
    with pytest.raises(ValueError, match="PSIS-LOO of chain 0 failed"):
        chain_stacking(Y, mask, *stuck)


def test_weights_are_polished_when_l_bfgs_b_stops_early(monkeypatch):
    """L-BFGS-B stopping at its start (as it did on near-duplicate lastfm members) is rerun
    from there until the optimality bound holds; the weights then match an unhindered run."""
    rng = np.random.default_rng(3)
    lpd = np.log(rng.uniform(0.05, 0.95, size=(400, 5)))
    expected = stacking_weights(lpd)
    real, calls = scipy.optimize.minimize, []

    def stops_at_once_first(objective, start, **kwargs):
        calls.append(start)
        if len(calls) == 1:
            return real(objective, start, **{**kwargs, "options": {"maxiter": 1}})
        return real(objective, start, **kwargs)

    monkeypatch.setattr(scipy.optimize, "minimize", stops_at_once_first)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "may be ... from optimal" warning
        weights = stacking_weights(lpd)
    assert len(calls) == 2
    np.testing.assert_allclose(weights, expected, atol=1e-4)


@pytest.mark.slow
def test_working_set_reaches_the_objective_of_solving_over_all_members():
    """40 settings x 5 near-duplicate seeds (a grid's members): column generation from
    WORKING_SET members gives the objective of L-BFGS-B over all 200 (the path before),
    and no member outside its support could raise it (the optimality condition)."""
    rng = np.random.default_rng(4)
    n = 1500
    logit = rng.normal(0, 2, n)
    y = rng.random(n) < 1 / (1 + np.exp(-logit))
    settings = [logit + rng.normal(0, 1, n) * rng.uniform(0.3, 1.5) for _ in range(40)]
    theta = np.column_stack([s + rng.normal(0, 0.3, n) for s in settings for _ in range(5)])
    lpd = -np.logaddexp(0, np.where(y[:, None], -theta, theta))
    assert lpd.shape[1] > 4 * stacking.WORKING_SET
    weights = stacking_weights(lpd)
    P, _ = stacking._weight_matrix(lpd)
    every = stacking._solve(np.ascontiguousarray(P.T), np.full(200, 1 / 200), 1e-10, 1000)
    assert score(lpd, weights) / n == pytest.approx(score(lpd, every / every.sum()) / n, abs=1e-6)
    ratios = stacking._ratios(P, P @ weights + 1e-16 / n)
    assert np.log(ratios.max()) <= stacking.GAP
    assert 1 < np.count_nonzero(weights) < 200


def arviz_psis_loo(log_lik, r_eff):
    """arviz_stats' PSIS-LOO of each row of (E, S), one entry at a time."""
    from arviz_stats.base import array_stats

    elpd, k, _ = array_stats.loo(log_lik[:, None, :], chain_axis=-2, draw_axis=-1, r_eff=r_eff)
    return elpd, k


@pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto")
@pytest.mark.parametrize(("draws", "r_eff"), [(1000, 1.0), (400, 0.3), (100, 1.0), (25, 1.0)])
def test_psis_loo_equals_arviz_on_light_heavy_and_degenerate_tails(draws, r_eff):
    """Entries with light and heavy tails (k from below 0 to above 1), ties, and tails too
    flat to fit (k NaN), against arviz_stats entry by entry, to 1e-8."""
    rng = np.random.default_rng(draws)
    scale = np.repeat([0.01, 0.3, 1.0, 3.0, 10.0], 8)[:, None]
    log_lik = np.concatenate(
        [
            -scale * rng.standard_normal((40, draws)) ** 2,  # light to very heavy tails
            np.log(rng.beta(0.2, 1.0, (8, draws))),  # likelihood near 0 for some draws
            np.round(rng.normal(-1, 0.5, (8, draws)), 1),  # many ties
            np.where(np.arange(draws) < [[1], [2]], -2.0, -1.0),  # tails mostly flat: k NaN
        ]
    )
    elpd, k = psis_loo(log_lik, r_eff)
    expected_elpd, expected_k = arviz_psis_loo(log_lik, r_eff)
    if draws >= 100:  # with 25 draws the tail has 5 values and arviz never fits it: k NaN
        assert np.isnan(k).any() and (k[np.isfinite(k)] > 1).any() and (k < 0.3).any()
    np.testing.assert_allclose(elpd, expected_elpd, rtol=0, atol=1e-8)
    np.testing.assert_allclose(k, expected_k, rtol=0, atol=1e-8)


def test_psis_loo_rejects_what_arviz_rejects():
    flat = np.zeros((3, 100))
    flat[1] = np.linspace(-1, 0, 100)
    with pytest.raises(ValueError, match="All tail values are the same"):
        psis_loo(flat)
    with pytest.raises(ValueError, match="draws >= 25"):
        psis_loo(np.zeros((3, 24)))
    with pytest.raises(ValueError, match="finite"):
        psis_loo(np.full((3, 30), -np.inf))


def test_chain_stacking_scores_zero_probability_as_minus_inf_and_names_the_entries(truth):
    """A draw that rules an observed outcome out (H exactly 0) gives that entry's
    leave-one-out density 0: lpd -inf, k NaN, a warning naming it; nothing is clipped."""
    Y, W, H = truth
    rng = np.random.default_rng(12)
    W_draws, H_draws = posterior(rng, truth, (W, H), (W, H))
    row = int(np.flatnonzero(Y[:, 0] == 1)[0])
    H_draws[1, 3, :, 0] = 0.0  # chain 1, draw 3: P(Y=1) = 0 in column 0
    mask = np.ones(Y.shape, bool)
    with pytest.warns(
        ZeroProbabilityWarning, match=rf"chain\(s\) 1, entries \(row, column\) \({row}, 0\)"
    ):
        result = chain_stacking(Y, mask, W_draws, H_draws)
    entries = np.flatnonzero(Y[:, 0] == 1) * Y.shape[1]  # row-major: entry (r, 0) is r * N
    assert np.isneginf(result.lpd[entries, 1]).all() and np.isnan(result.pareto_k[entries, 1]).all()
    assert np.isfinite(result.lpd[:, 0]).all() and np.isneginf(result.elpd[1])
    assert result.weights[0] == pytest.approx(1.0)
    # held out: -inf only where every draw gives 0
    H_draws[1, :, :, 0] = 0.0
    train = rng.random(Y.shape) < 0.5
    with pytest.warns(ZeroProbabilityWarning, match=r"chain\(s\) 1, entries"):
        held_out = chain_stacking(Y, train, W_draws, H_draws, validation=~train)
    rows, columns = np.nonzero(~train)
    expected = (columns == 0) & (Y[rows, columns] == 1)
    np.testing.assert_array_equal(np.isneginf(held_out.lpd[:, 1]), expected)


@pytest.mark.parametrize("span", [1e3, 1e30, 1e300])
def test_grouped_pareto_profile_equals_term_by_term_log1p(span):
    """The profile likelihood's logarithms taken GROUP terms at a time equal log1p term by
    term (both signs of b, terms near -1 and large); spans beyond the normal numbers are
    flagged for the exact sum."""
    rng = np.random.default_rng(13)
    x = np.sort(np.exp(rng.uniform(0, np.log(span), (50, 37))), axis=1) / span
    below_one = 0.999999 / x[:, -1:] * rng.random((50, 19))  # terms 1 - b x in (1e-6, 1)
    b = np.concatenate([-rng.exponential(1 / x[:, :1], (50, 20)), below_one], axis=1)
    b[0, 0] = 1.5 / x[0, -1]  # a term 1 - b x below 0: NaN, as log1p
    with jax.enable_x64(True):
        fast, inexact = (np.asarray(a) for a in _mean_log1p(b, x, exact=False))
        exact = np.asarray(_mean_log1p(b, x, exact=True)[0])
    assert bool(inexact) == (span > 1e38)
    if not inexact:
        np.testing.assert_allclose(fast, exact, rtol=1e-13, atol=0)
        assert np.isnan(fast[0, 0]) and np.isnan(exact[0, 0])


def test_pointwise_log_likelihood_gives_minus_inf_at_zero_probability_and_names_entries(truth):
    Y, W, H = truth
    mask = np.ones(Y.shape, bool)
    W_draws, H_draws = W[None, None].copy(), H[None, None].copy()
    W_draws[0, 0, 3] = [1.0, 0.0, 0.0]  # row 3 takes component 0 alone
    H_draws[0, 0, 0, 7] = 1.0 - Y[3, 7]  # which rules out the observed Y[3, 7]
    with pytest.warns(bernmf.ZeroProbabilityWarning, match=r"\(3, 7\).*1 of 1200 "):
        terms = pointwise_log_likelihood(Y, mask, W_draws, H_draws)
    at = np.ravel_multi_index((3, 7), Y.shape)
    assert np.isneginf(terms[0, 0, at])  # not log(tiny) = -708.4
    p = W_draws[0, 0] @ H_draws[0, 0]
    expected = np.where(Y == 1, np.log(p), np.log1p(-p)).ravel()
    others = np.arange(Y.size) != at
    np.testing.assert_allclose(terms[0, 0, others], expected[others], rtol=1e-10)
