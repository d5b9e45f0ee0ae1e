"""The kernels of simulation-based calibration (bernmf.posterior.uniformity): ranks with ties,
PIT values, the uniformity p-value and the ECDF band, against ArviZ's band and simulation
(the conjugate normal model, whose exact posterior is known)."""

from __future__ import annotations

import numpy as np
import pytest
from arviz_stats.ecdf_utils import ecdf_pit, simulate_confidence_bands
from scipy import stats

from bernmf.posterior.uniformity import (
    ecdf_band,
    null_statistics,
    pit_values,
    ranks,
    tail_statistic,
    uniformity_pvalue,
)


def test_a_rank_counts_the_draws_below_and_spreads_ties_evenly():
    """Truth 0.5 among (0.1, 0.5, 0.5, 0.9): rank 1, 2 or 3, each a third of the time; a
    point mass equal to the truth: every rank 0..L alike."""
    rng = np.random.default_rng(0)
    draws = np.array([[0.1, 1.0], [0.5, 1.0], [0.5, 1.0], [0.9, 1.0]])
    found = np.array([ranks([0.5, 1.0], draws, rng) for _ in range(6000)])
    assert set(found[:, 0]) == {1, 2, 3}
    assert stats.chisquare(np.bincount(found[:, 0])[1:]).pvalue > 0.001
    assert set(found[:, 1]) == {0, 1, 2, 3, 4}
    assert stats.chisquare(np.bincount(found[:, 1])).pvalue > 0.001
    assert ranks([2.0, -1.0], draws, rng).tolist() == [4, 0]


@pytest.mark.parametrize(
    ("truth", "draws", "message"),
    [([0.0], np.zeros((3, 2)), "shape"), ([0.0], np.zeros((0, 1)), "no draws"),
     ([np.nan], np.zeros((3, 1)), "NaN"), ([0.0], np.full((3, 1), np.nan), "NaN")],
)  # fmt: skip
def test_ranks_refuse_what_has_no_rank(truth, draws, message):
    with pytest.raises(ValueError, match=message):
        ranks(truth, draws, np.random.default_rng(0))


def test_pit_values_refuse_ranks_outside_zero_to_l():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"0\.\.10"):
        pit_values(np.array([0, 11]), 10, rng)
    with pytest.raises(ValueError, match="integers"):
        pit_values(np.array([0.5]), 10, rng)
    with pytest.raises(ValueError, match="PIT values"):
        uniformity_pvalue([0.5])


def _normal_ranks(replicates: int, draws: int, sd_factor: float, seed: int) -> np.ndarray:
    """SBC of theta ~ N(0, 1), y ~ N(theta, 1), whose posterior is N(y / 2, 1 / 2): the
    ranks of the true theta among draws of that posterior with its sd times ``sd_factor``
    (0: the posterior mean, a point mass)."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=replicates)
    y = theta + rng.normal(size=replicates)
    posterior = y[None, :] / 2 + sd_factor * np.sqrt(0.5) * rng.normal(size=(draws, replicates))
    return ranks(theta, posterior, rng)


def _pvalue(rank, draws: int, seed: int = 0) -> float:
    return uniformity_pvalue(pit_values(rank, draws, np.random.default_rng(seed)))


def test_the_exact_posterior_passes_and_a_narrow_or_point_one_fails():
    """200 replicates of 100 draws: the exact posterior is not rejected, draws with half its
    sd and the posterior mean (every rank 0 or L) are, at p < 0.001."""
    exact = _normal_ranks(200, 100, 1.0, seed=1)
    assert _pvalue(exact, 100) > 0.01
    assert _pvalue(_normal_ranks(200, 100, 0.5, seed=1), 100) < 0.001
    point = _normal_ranks(200, 100, 0.0, seed=1)
    assert set(point) <= {0, 100}
    assert _pvalue(point, 100) < 0.001


def test_pvalues_of_uniform_ranks_are_uniform():
    """300 samples of 60 uniform ranks among 20 draws: the p-values pass a KS test of
    uniformity, and about 5% fall below 0.05."""
    rng = np.random.default_rng(2)
    pvalues = np.array(
        [uniformity_pvalue(pit_values(rng.integers(0, 21, 60), 20, rng), 5000) for _ in range(300)]
    )
    assert stats.kstest(pvalues, "uniform").pvalue > 0.001
    assert 0.02 <= (pvalues < 0.05).mean() <= 0.09


def test_the_ecdf_and_band_are_arvizs():
    pit = np.random.default_rng(6).beta(1.2, 1.0, 50)
    band = ecdf_band(pit, 0.9, 500, seed=7)
    points, ecdf, lower, upper = ecdf_pit(pit, 0.9, 500, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(band.points, points)
    np.testing.assert_array_equal(band.difference, ecdf - points)
    np.testing.assert_array_equal(band.lower, lower - points)
    np.testing.assert_array_equal(band.upper, upper - points)


def test_the_band_holds_95_percent_of_uniform_ecdfs():
    rng = np.random.default_rng(3)
    inside = []
    for _ in range(400):
        band = ecdf_band(rng.random(80))
        inside.append(((band.difference >= band.lower) & (band.difference <= band.upper)).all())
    assert 0.92 <= np.mean(inside) <= 0.98


def test_the_band_is_that_of_the_pvalues_statistic():
    """ArviZ's simulated pointwise level of the 95% band is 1 minus the 5% quantile of the
    statistic's null distribution; a sample's p-value is below 0.05 when its ECDF leaves
    ArviZ's band (up to the two simulations' noise)."""
    n = 80
    arviz = simulate_confidence_bands(n, 1, np.arange(1, n) / n, 0.95, 4000,
                                      np.random.default_rng(4))  # fmt: skip
    null = null_statistics(n, 20_000)
    assert np.quantile(1 - null, 0.93) <= arviz <= np.quantile(1 - null, 0.97)
    rng = np.random.default_rng(5)
    agree = []
    for shape in np.repeat([1.0, 1.3, 0.75], 100):
        pit = rng.beta(shape, shape, n)
        band = ecdf_band(pit)
        outside = ((band.difference < band.lower) | (band.difference > band.upper)).any()
        agree.append(outside == (uniformity_pvalue(pit) < 0.05))
    assert np.mean(agree) >= 0.95
    assert tail_statistic(np.linspace(0.005, 0.995, n)) == 1.0  # an ECDF on the diagonal
