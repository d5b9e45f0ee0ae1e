"""The engines: their target against NumPyro's, their draws against an exact posterior,
their Fit's shapes, their option checks and their entry points."""

from __future__ import annotations

from importlib.metadata import entry_points

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from bernmf_blackjax import CHEES, MCLMC, _split, _target

from bernmf.data.observed import as_observed
from bernmf.engine_api import log_density, log_prior_constant
from bernmf.models import numpyro_model
from bernmf.models.spec import Prior

SMALL = {"num_chains": 2, "num_warmup": 30, "num_samples": 20}


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    W = rng.dirichlet(np.ones(2), size=12)
    H = rng.beta(1, 1, size=(2, 9))
    return as_observed((rng.random((12, 9)) < W @ H).astype(float))


def test_log_density_is_minus_numpyro_potential(data):
    """With the prior's constant, the target is minus NumPyro's potential (what nuts samples)."""
    prior = Prior(0.5, 2.0, 0.7).broadcast(3)
    M, N = data.shape
    rng = np.random.default_rng(1)
    params = {"W": rng.normal(size=(M, 2)), "H": rng.normal(size=(3, N))}
    with jax.enable_x64(True):
        args = numpyro_model.model_args(data.Y, data.mask, prior, jnp.float64)
        params = jax.tree.map(jnp.asarray, params)
        potential = numpyro_model.potential_energy(params, args)
        constant = log_prior_constant(*args[2], M, N)
        value = log_density(params, *args, constant=constant)
        flat = jnp.concatenate([params["W"].ravel(), params["H"].ravel()])
        assert _split(flat, (M, 3, N))["H"].shape == (3, N)
        unnormalized = _target(args)(flat)
    np.testing.assert_allclose(value, -potential, rtol=1e-12)
    np.testing.assert_allclose(unnormalized + constant, -potential, rtol=1e-12)


@pytest.mark.parametrize(
    ("engine", "options"),
    [
        (CHEES, {"num_warmup": 300, "num_samples": 1000}),
        (MCLMC, {"num_warmup": 1000, "num_samples": 10000, "thinning": 10}),
    ],
)
def test_draws_of_the_prior_when_nothing_is_observed(engine, options):
    """Without observed entries the posterior is the prior: H ~ Beta(2, 3), W ~ Dirichlet(1.5)."""
    data = as_observed(
        np.zeros((3, 4)), np.zeros((3, 4), bool), require_entries=False, warn_empty=False
    )
    prior = Prior(2.0, 3.0, 1.5)
    fit = engine.fit(data, 2, prior, seed=3, num_chains=4, start="prior", **options)
    H, W = fit.draws["H"], fit.draws["W"]
    # 4 chains x 1000 draws of (2 x 4) H entries and (3 x 2) W entries, each pooled over
    # its exchangeable entries; the bounds are 5 standard errors at an ESS of 1000
    np.testing.assert_allclose(H.mean(), 2 / 5, atol=5 * 0.2 / np.sqrt(1000 * 8))
    np.testing.assert_allclose(H.var(), 6 / (25 * 6), rtol=0.1)
    np.testing.assert_allclose(W.mean(), 1 / 2, atol=5 * 0.25 / np.sqrt(1000 * 6))
    np.testing.assert_allclose(W.var(), 1.5 * 1.5 / (9 * 4), rtol=0.1)


@pytest.mark.parametrize("engine", [CHEES, MCLMC])
def test_fit_shapes_and_statistics(data, engine):
    fit = engine.fit(data, 3, Prior(0.5, 0.5, 1.0), seed=0, thinning=2, **SMALL)
    M, N = data.shape
    assert fit.engine == engine.name
    assert fit.draws["W"].shape == (2, 10, M, 3) and fit.draws["H"].shape == (2, 10, 3, N)
    np.testing.assert_allclose(fit.draws["W"].sum(-1), 1.0)
    assert ((fit.draws["H"] > 0) & (fit.draws["H"] < 1)).all()
    for name in ("acceptance_rate", "n_steps", "diverging", "step_size", "lp"):
        assert fit.sample_stats[name].shape == (2, 10), name
    assert (fit.sample_stats["n_steps"] >= 2).all()  # two transitions a kept draw
    assert np.isfinite(fit.sample_stats["lp"]).all()
    assert fit.posterior.log_joint.shape == (2, 11) and fit.trace.shape == (11,)
    assert fit.posterior.chains_per_start == 2
    assert fit.probs.shape == (M, N) and fit.converged is None
    again = engine.fit(data, 3, Prior(0.5, 0.5, 1.0), seed=0, thinning=2, **SMALL)
    assert again.timings["compile"] == 0.0  # the compiled program reused
    np.testing.assert_array_equal(again.draws["H"], fit.draws["H"])  # one seed, one fit


@pytest.mark.parametrize(
    ("engine", "options", "error", "words"),
    [
        (CHEES, {"num_chains": 1}, ValueError, "num_chains"),
        (MCLMC, {"num_chains": 0}, ValueError, "num_chains"),
        (MCLMC, {"num_integration_steps": 1.0}, ValueError, "num_integration_steps"),
        (MCLMC, {"learning_rate": 0.1}, TypeError, "does not take"),
        (CHEES, {"thinning": 600}, ValueError, "thinning"),
        (CHEES, {"start": "map"}, ValueError, "start must be one of"),
        (CHEES, {"target_accept_prob": 1.0}, ValueError, "target_accept_prob"),
        (CHEES, {"chains_per_start": 5}, ValueError, "chains_per_start"),
        (CHEES, {"learning_rate": "fast"}, TypeError, "learning_rate"),
        (CHEES, {"step_size": 0.1}, TypeError, "does not take"),
    ],
)
def test_bad_options_are_named(engine, options, error, words):
    with pytest.raises(error, match=words):
        engine.with_defaults(options)


@pytest.mark.parametrize("engine", [CHEES, MCLMC])
def test_entry_point_names_the_engine(engine):
    (point,) = entry_points(group="bernmf.engines", name=engine.name)
    assert point.load() is engine
