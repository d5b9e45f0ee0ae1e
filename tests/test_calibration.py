"""Calibration (ECE, reliability bins) and interval coverage (bernmf.posterior.calibration),
against plain numpy written from the definitions and on simulated predictions."""

from __future__ import annotations

import numpy as np
import pytest

from bernmf.posterior.calibration import NO_INTERVAL, ece_floor, interval_coverage, reliability


def _reference_ece(y, p, bins):
    """ECE from the definition: a loop over the equal-width bins [b / bins, (b + 1) / bins)."""
    total = 0.0
    for b in range(bins):
        upper = (b + 1) / bins
        chosen = (p >= b / bins) & ((p < upper) if b < bins - 1 else (p <= 1))
        if chosen.any():
            total += chosen.sum() * abs(p[chosen].mean() - y[chosen].mean())
    return total / y.size


def test_ece_and_bins_match_the_definition():
    rng = np.random.default_rng(0)
    probs = rng.random((30, 20)) ** 2
    probs[0, :3] = (0.0, 1.0, 0.5)  # the edges: 1 in the last bin
    Y = (rng.random(probs.shape) < probs).astype(float)
    Y[1, 1] = np.nan  # missing: never scored
    mask = rng.random(probs.shape) < 0.5
    mask[0, :3] = True
    scored = mask & ~np.isnan(Y)
    for bins in (1, 7, 10):
        result = reliability(Y, probs, mask, bins=bins)
        assert result.entries == scored.sum()
        assert result.ece == pytest.approx(_reference_ece(Y[scored], probs[scored], bins))
        assert result.table["count"].sum() == scored.sum()
        for _, row in result.table.iterrows():
            b = int(row["bin"])
            upper = (b + 1) / bins
            p = probs[scored]
            chosen = (p >= b / bins) & ((p < upper) if b < bins - 1 else (p <= 1))
            assert row["count"] == chosen.sum()
            assert row["predicted"] == pytest.approx(p[chosen].mean())
            assert row["observed"] == pytest.approx(Y[scored][chosen].mean())


def test_calibrated_predictions_have_ece_near_zero_and_miscalibrated_do_not():
    rng = np.random.default_rng(1)
    probs = rng.random((400, 250))
    Y = (rng.random(probs.shape) < probs).astype(float)
    mask = np.ones(probs.shape, bool)
    calibrated = reliability(Y, probs, mask)
    assert calibrated.ece < 0.01  # noise of 10 bins of 10,000 entries: about 0.003
    np.testing.assert_allclose(
        calibrated.table["observed"], calibrated.table["predicted"], atol=0.02
    )
    overconfident = np.clip(0.5 + 1.6 * (probs - 0.5), 0, 1)
    assert reliability(Y, overconfident, mask).ece > 0.05  # 0.094 here


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda Y, p, m: (Y, p[:, :-1], m), "shape"),
        (lambda Y, p, m: (Y, np.where(m, 1.5, p), m), "outside"),
        (lambda Y, p, m: (Y, np.where(m, np.nan, p), m), "outside"),
        (lambda Y, p, m: (Y + 2, p, m), "Y"),
        (lambda Y, p, m: (Y, p, np.zeros_like(m)), "no entry"),
    ],
)
def test_reliability_refuses_bad_input(change, message):
    Y = np.eye(4)
    probs = np.full((4, 4), 0.3)
    mask = np.ones((4, 4), bool)
    with pytest.raises(ValueError, match=message):
        reliability(*change(Y, probs, mask))
    with pytest.raises(ValueError, match="bins"):
        reliability(Y, probs, mask, bins=0)


def _reference_coverage(truth, W_draws, H_draws, level):
    products = np.einsum("csmk,cskn->csmn", W_draws, H_draws).reshape(-1, *truth.shape)
    low, high = np.quantile(products, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return np.mean((truth >= low) & (truth <= high))


def test_coverage_matches_numpy_whatever_the_tiles():
    rng = np.random.default_rng(2)
    W_draws, H_draws = rng.random((2, 15, 9, 3)), rng.random((2, 15, 3, 7))
    truth = rng.random((9, 7)) * 3
    expected = [_reference_coverage(truth, W_draws, H_draws, level) for level in (0.5, 0.9)]
    assert 0 < expected[0] < expected[1] < 1
    for block in (1, 30, 31, 100, 10**6):  # one entry per tile, part of a row, whole rows
        result = interval_coverage(truth, W_draws, H_draws, max_block_values=block)
        np.testing.assert_allclose(result.shares, expected)
    assert list(result.row()) == ["coverage_50", "coverage_90"]


def test_chain_weights_give_the_quantiles_of_the_mixture():
    """Weights 2/3 and 1/3: the quantiles of the draws of chain 0 taken twice and chain 1
    once (numpy's inverted_cdf); a chain of weight 0 does not count."""
    rng = np.random.default_rng(4)
    W_draws, H_draws = rng.random((3, 30, 6, 2)), rng.random((3, 30, 2, 5))
    H_draws[1] += 0.5  # chain 1 elsewhere
    truth = rng.random((6, 5)) * 2
    products = np.einsum("csmk,cskn->csmn", W_draws, H_draws)
    repeated = np.concatenate([products[0], products[0], products[1]])
    expected = []
    for level in (0.5, 0.9):
        low, high = np.quantile(
            repeated, [(1 - level) / 2, (1 + level) / 2], axis=0, method="inverted_cdf"
        )
        expected.append(np.mean((truth >= low) & (truth <= high)))
    for block in (1, 100, 10**6):
        result = interval_coverage(
            truth, W_draws, H_draws, chain_weights=[2 / 3, 1 / 3, 0.0], max_block_values=block
        )
        np.testing.assert_allclose(result.shares, expected)
    pooled = interval_coverage(truth, W_draws, H_draws)
    assert not np.allclose(pooled.shares, expected)
    with pytest.raises(ValueError, match="chain_weights"):
        interval_coverage(truth, W_draws, H_draws, chain_weights=[0.5, 0.6, -0.1])


def test_a_truth_drawn_like_the_draws_is_covered_at_the_level():
    """Truths exchangeable with the draws: each entry is inside with probability about
    the level (entries of one truth share its rows of W and columns of H, so the mean
    is over 40 truths)."""
    rng = np.random.default_rng(3)
    W_all, H_all = rng.beta(2, 2, (440, 30, 2)), rng.beta(1, 3, (440, 2, 20))
    draws = W_all[None, 40:], H_all[None, 40:]
    truths = W_all[:40] @ H_all[:40]
    shares = [interval_coverage(truth, *draws).shares for truth in truths]
    np.testing.assert_allclose(np.mean(shares, axis=0), [0.5, 0.9], atol=0.03)
    biased = interval_coverage(truths[0] + 1.0, *draws)  # WH is in [0, 2] here
    assert (biased.shares < 0.1).all()


def test_a_point_fit_has_no_interval():
    result = interval_coverage(np.full((3, 2), 0.5))
    assert result.shares is None
    assert result.row() == {"coverage_50": NO_INTERVAL, "coverage_90": NO_INTERVAL}


def test_coverage_refuses_bad_input():
    W, H, truth = np.ones((1, 2, 3, 2)) / 2, np.ones((1, 2, 2, 4)) / 2, np.full((3, 4), 0.5)
    with pytest.raises(ValueError, match="both"):
        interval_coverage(truth, W)
    with pytest.raises(ValueError, match="do not match"):
        interval_coverage(truth[:, :3], W, H)
    with pytest.raises(ValueError, match="levels"):
        interval_coverage(truth, W, H, levels=(0.5, 1.0))
    with pytest.raises(ValueError, match="finite"):
        interval_coverage(np.where(truth > 0, np.nan, truth), W, H)
    with pytest.raises(ValueError, match="max_block_values"):
        interval_coverage(truth, W, H, max_block_values=0)


def test_the_ece_floor_is_the_ece_of_outcomes_drawn_from_the_predictions():
    """Against reliability() of outcomes drawn afresh from the same predictions (an
    independent simulation): the same mean, within Monte Carlo error; it shrinks with more
    entries, as 1 / sqrt(n) would have it."""
    rng = np.random.default_rng(4)
    probs = rng.random((60, 40))
    mask = rng.random((60, 40)) < 0.3
    floor = ece_floor(probs, mask, draws=400)
    drawn = [
        reliability((rng.random(probs.shape) < probs).astype(float), probs, mask).ece
        for _ in range(400)
    ]
    # two means of 400 draws each: their difference has sd sqrt(2) sd / 20
    assert floor == pytest.approx(np.mean(drawn), abs=4 * np.sqrt(2) * np.std(drawn) / 20)
    assert ece_floor(probs, np.ones_like(mask)) < 0.7 * floor  # 3.3 times the entries
    with pytest.raises(ValueError, match="no scored entry"):
        ece_floor(probs, np.zeros_like(mask))
