"""The model spec: log densities against scipy, perplexity, simulation, numpy/JAX agreement."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import bernmf
from bernmf.models import log_joint, log_likelihood, log_prior, perplexity, simulate
from bernmf.models.spec import masked_log_likelihood_sum, masked_log_likelihood_terms


@pytest.fixture
def problem():
    rng = np.random.default_rng(0)
    W = rng.dirichlet(np.ones(3), size=7)
    H = rng.beta(2.0, 3.0, size=(3, 9))
    Y = (rng.random((7, 9)) < W @ H).astype(float)
    mask = rng.random((7, 9)) < 0.6
    prior = bernmf.Prior(alpha=np.array([1.5, 2.0, 0.7]), beta=2.5, gamma=0.8)
    return Y, mask, W, H, prior


def test_log_likelihood_is_the_masked_bernoulli_sum(problem):
    Y, mask, W, H, _ = problem
    expected = stats.bernoulli(W @ H).logpmf(Y)[mask].sum()
    assert log_likelihood(Y, mask, W, H) == pytest.approx(expected, rel=1e-12)
    Y_nan = np.where(mask, Y, np.nan)
    assert log_likelihood(Y_nan, mask, W, H) == pytest.approx(expected, rel=1e-12)


def test_normalized_log_prior_equals_scipy_densities(problem):
    _, _, W, H, prior = problem
    alpha = np.broadcast_to(prior.alpha, (3,))[:, None]
    expected = stats.beta(alpha, prior.beta).logpdf(H).sum()
    expected += sum(stats.dirichlet(np.full(3, prior.gamma)).logpdf(w) for w in W)
    assert log_prior(W, H, prior, normalized=True) == pytest.approx(expected, rel=1e-12)
    kernel = np.sum((alpha - 1) * np.log(H) + (prior.beta - 1) * np.log1p(-H))
    kernel += np.sum((prior.gamma - 1) * np.log(W))
    assert log_prior(W, H, prior) == pytest.approx(kernel, rel=1e-12)


def test_numpy_and_jax_give_the_same_log_joint(problem):
    Y, mask, W, H, prior = problem
    with jax.enable_x64(True):
        in_jax = log_joint(*(jnp.asarray(a) for a in (Y, mask, W, H)), prior, normalized=True)
        assert isinstance(in_jax, jax.Array)
        assert float(in_jax) == pytest.approx(log_joint(Y, mask, W, H, prior, normalized=True))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("smallest", [1e-3, 1e-30, 1e-200, 0.0])
def test_log_likelihood_sum_in_jax_equals_the_sum_of_its_terms(dtype, smallest):
    # 37 rows: not a multiple of the groups of rows multiplied together. The smallest
    # probabilities put products below the normal range (float32 from 1e-30, float64
    # from 1e-200 and at 0), where every entry must go through its own log instead.
    rng = np.random.default_rng(1)
    p_one = rng.uniform(0.05, 0.95, size=(37, 11))
    p_one[rng.random(p_one.shape) < 0.2] = smallest
    Y = (rng.random(p_one.shape) < 0.5).astype(float)
    mask = rng.random(p_one.shape) < 0.8
    with jax.enable_x64(True):
        args = [jnp.asarray(a) for a in (Y, mask)]
        args += [jnp.asarray(a, dtype) for a in (p_one, 1 - p_one)]
        fast = float(jax.jit(masked_log_likelihood_sum)(*args))
        plain = float(jnp.sum(masked_log_likelihood_terms(*args)))
    assert np.isfinite(fast)
    assert fast == pytest.approx(plain, rel=1e-14 if dtype == "float64" else 1e-5)


def test_log_joint_is_minus_the_mm_objective(problem):
    Y, mask, _, _, _ = problem
    prior = bernmf.Prior(1.3, 1.8, 1.2)
    result = bernmf.fit(Y, "mm", 3, mask=mask, prior=prior, max_iter=20, tol=0)
    value = log_joint(Y, mask, result.W, result.H, prior.broadcast(3))
    assert -value == pytest.approx(result.objective, rel=1e-12)


def test_perplexity_is_the_mean_negative_log_likelihood_in_nats():
    Y = np.array([[1.0, 0.0], [np.nan, 1.0]])
    probs = np.array([[0.5, 0.5], [0.9, 0.25]])
    assert perplexity(Y, probs, np.array([[True, True], [False, False]])) == pytest.approx(
        np.log(2)
    )
    expected = -(np.log(0.5) + np.log(0.5) + np.log(0.25)) / 3  # the NaN entry is never scored
    assert perplexity(Y, probs) == pytest.approx(expected)
    with pytest.warns(bernmf.ZeroProbabilityWarning, match="1 of 1 scored entries"):
        assert perplexity(np.array([[1.0]]), np.array([[0.0]])) == np.inf  # not clipped
    with pytest.raises(ValueError, match="no entry is selected"):
        perplexity(Y, probs, np.zeros((2, 2), bool))
    with pytest.raises(ValueError, match="shape"):
        perplexity(Y, probs[:1])


def test_simulate_draws_from_the_model():
    prior = bernmf.Prior(alpha=[0.5, 2.0], beta=[2.0, 0.5], gamma=1.0)
    Y, W, H = simulate(jax.random.key(1), 2000, 300, 2, prior)
    assert Y.shape == (2000, 300) and W.shape == (2000, 2) and H.shape == (2, 300)
    assert set(np.unique(Y)) <= {0.0, 1.0}
    np.testing.assert_allclose(W.sum(axis=1), 1, atol=1e-12)
    np.testing.assert_allclose(H.mean(axis=1), [0.2, 0.8], atol=0.03)  # Beta means
    assert abs(Y.mean() - (W @ H).mean()) < 0.005
    np.testing.assert_array_equal(simulate(3, 5, 4, 2)[0], simulate(3, 5, 4, 2)[0])
    with pytest.raises(ValueError, match="K must be a positive integer"):
        simulate(0, 5, 4, 0)


def test_the_default_prior_is_inside_and_the_flat_one_is_by_name():
    """``Prior()`` (mm's default) has alpha, beta > 1, which keeps H inside (0, 1); the flat
    prior is ``Prior.flat()``, still the one ``simulate`` draws from by default."""
    default, flat = bernmf.Prior(), bernmf.Prior.flat()
    assert min(default.alpha, default.beta) > 1 and flat == (1.0, 1.0, 1.0)
    assert bernmf.inference.get_engine("mm").default_prior == default
    for got, expected in zip(simulate(3, 5, 4, 2), simulate(3, 5, 4, 2, flat), strict=True):
        np.testing.assert_array_equal(got, expected)
