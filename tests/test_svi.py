"""svi's guides, ELBO and optimizer (plain JAX) against NumPyro's, and its one program.

NumPyro is the reference: its autoguides on :func:`bernmf.models.numpyro_model.model`,
its ``Trace_ELBO`` and its optimizers. To get the same draw, NumPyro's guide is given
bernmf's standard normal noise: a ``substitute_fn`` replaces each sample site's draw by
the reparametrized value NumPyro would compute from that noise (``loc + noise * scale``,
through the site's own distribution and transform), so the gradient still flows through
NumPyro's parameters, Jacobians and densities. Tiny shapes, float64.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro import handlers, optim
from numpyro.distributions import constraints
from numpyro.distributions.transforms import biject_to
from numpyro.infer import Trace_ELBO, autoguide, init_to_value

import bernmf
from bernmf.inference import _compile, _guides, svi
from bernmf.models import numpyro_model, unconstrained
from bernmf.models.spec import log_joint, log_prior_constant
from bernmf.posterior import draws as posterior

M, N, K = 5, 4, 3
SHAPES = ((M, K - 1), (K, N))


@pytest.mark.parametrize("array", [np.asarray, jnp.asarray])
def test_bijections_are_numpyros(array):
    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        x, h = rng.normal(0, 3, (6, K - 1)), rng.normal(0, 3, (6, N))
        simplex, unit = biject_to(constraints.simplex), biject_to(constraints.unit_interval)
        y = unconstrained.to_simplex(array(x))
        np.testing.assert_allclose(y, simplex(jnp.asarray(x)), rtol=1e-14)
        np.testing.assert_allclose(unconstrained.from_simplex(y), x, rtol=1e-10)
        np.testing.assert_allclose(unconstrained.to_unit(array(h)), unit(jnp.asarray(h)))
        np.testing.assert_allclose(unconstrained.from_unit(array(unit(h))), h, rtol=1e-10)
        np.testing.assert_allclose(
            unconstrained.simplex_log_jacobian(jnp.asarray(x), jnp.asarray(y)),
            simplex.log_abs_det_jacobian(jnp.asarray(x), jnp.asarray(y)),
            rtol=1e-13,
        )
        np.testing.assert_allclose(
            unconstrained.unit_log_jacobian(jnp.asarray(h)),
            unit.log_abs_det_jacobian(jnp.asarray(h), unit(h)),
            rtol=1e-13,
        )


def _problem():
    """Data with missing entries, an asymmetric prior and a start (float64)."""
    Y, _, _ = bernmf.simulate(4, M, N, K)
    rng = np.random.default_rng(1)
    mask = rng.random((M, N)) < 0.8
    prior = bernmf.Prior([1.2, 0.7, 2.0], 1.5, [0.9, 1.1, 1.3]).broadcast(K)
    start = {site: rng.uniform(-2, 2, shape) for site, shape in zip("WH", SHAPES, strict=True)}
    return Y, mask, prior, start


def _numpyro_guide(name: str, start: dict):
    """A fresh NumPyro autoguide started at ``start`` (set up by its first call: made
    inside each compiled function, its set-up is traced there, not run op by op)."""
    values = {
        "W": biject_to(constraints.simplex)(start["W"]),
        "H": biject_to(constraints.unit_interval)(start["H"]),
    }
    init = init_to_value(values=values)
    if name == "AutoLowRankMultivariateNormal":
        return autoguide.AutoLowRankMultivariateNormal(numpyro_model.model, init_loc_fn=init)
    return getattr(autoguide, name)(numpyro_model.model, init_loc_fn=init)


def _given_noise(guide: str, noise):
    """A ``substitute_fn`` drawing each of NumPyro's guide sites from ``noise`` (1-D) in
    bernmf's layout: H's then W's coordinates (AutoNormal), or the factor's R numbers
    then the diagonal's D (the low-rank guide's latent site)."""

    drawn = ("_auto_latent",) if guide == "AutoLowRankMultivariateNormal" else ("W", "H")

    def draw(site):
        if site["type"] != "sample" or site["name"] not in drawn:
            return None
        fn = site["fn"]
        if site["name"] == "_auto_latent":
            rank = fn.cov_factor.shape[-1]
            return fn.loc + fn.cov_factor @ noise[:rank] + jnp.sqrt(fn.cov_diag) * noise[rank:]
        size = int(np.prod(SHAPES[1]))
        part = noise[size:] if site["name"] == "W" else noise[:size]
        normal = fn.base_dist.base_dist
        return fn.transforms[0](normal.loc + part.reshape(normal.loc.shape) * normal.scale)

    return draw


@pytest.mark.slow
@pytest.mark.parametrize("guide", _guides.GUIDES)
def test_elbo_and_its_gradient_are_numpyros(guide):
    Y, mask, prior, start = _problem()
    params = _guides.initial_params(guide, start, None)
    rng = np.random.default_rng(2)  # away from the start: every parameter matters
    moved = {n: v + rng.normal(0, 0.3, v.shape) for n, v in params.items()}
    noise = rng.normal(size=(2, _guides.noise_width(guide, params)))
    names = []

    def theirs(u, row):
        """NumPyro's initial parameters, and its loss and gradient at ``u`` given ``row``
        (in one compiled function: the guide's set-up is traced, not run op by op)."""
        reference = _numpyro_guide(guide, start)
        trace = handlers.trace(handlers.seed(reference, 0)).get_trace(*args)  # sets it up
        sites = {n: s for n, s in trace.items() if s["type"] == "param"}
        names.extend(sites)
        constraint = {n: s["kwargs"].get("constraint", constraints.real) for n, s in sites.items()}
        conditioned = (  # AutoDelta draws nothing
            reference
            if guide == "AutoDelta"
            else handlers.substitute(reference, substitute_fn=_given_noise(guide, row))
        )

        def loss(u):
            constrained = {n: biject_to(constraint[n])(value) for n, value in u.items()}
            key = jax.random.PRNGKey(0)  # unused: every draw is given
            return Trace_ELBO().loss(key, constrained, numpyro_model.model, conditioned, *args)

        return {n: s["value"] for n, s in sites.items()}, jax.value_and_grad(loss)(u)

    with jax.enable_x64(True):
        args = numpyro_model.model_args(Y * mask, mask, prior, jnp.float64)
        ours_args = (*args, jnp.asarray(log_prior_constant(*prior, M, N)))
        initial, (expected, expected_grad) = jax.jit(theirs)(moved, noise[0])
        value, grad = jax.jit(
            jax.value_and_grad(lambda u, row: _guides.loss(guide, u, row[None], ours_args))
        )(moved, noise[0])
        both, *singles = jax.jit(
            lambda u, n: [_guides.loss(guide, u, rows, ours_args) for rows in (n, n[:1], n[1:])]
        )(moved, noise)

    assert list(params) == names  # NumPyro's names, in NumPyro's order
    shown = _guides.constrained(guide, params)
    for name, start_value in initial.items():
        np.testing.assert_allclose(shown[name], start_value, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(value, expected, rtol=1e-12)
    for name in params:
        np.testing.assert_allclose(grad[name], expected_grad[name], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(both, np.mean(singles), rtol=1e-14)  # particles: the mean


@pytest.mark.parametrize("name", svi.OPTIMIZERS)
def test_adam_steps_are_numpyros(name):
    settings = {"learning_rate": 0.05, "lr_decay": 0.2, "steps": 7, "clip_norm": 0.5}
    rng = np.random.default_rng(3)
    shapes = {"a": (3, 2), "b": (4,)}
    with jax.enable_x64(True):
        params = {n: jnp.asarray(rng.normal(size=s)) for n, s in shapes.items()}

        def schedule(i):
            decay = settings["lr_decay"] ** (i / max(settings["steps"] - 1, 1))
            return settings["learning_rate"] * decay

        if name == "clipped_adam":
            reference = optim.ClippedAdam(step_size=schedule, clip_norm=settings["clip_norm"])
        else:
            reference = optim.Adam(step_size=schedule)
        expected = reference.init(params)
        zeros = {n: jnp.zeros(s) for n, s in shapes.items()}
        ours = svi.AdamState(params, zeros, zeros, jnp.asarray(0, jnp.int32))
        arrays = svi.Schedule(*(jnp.asarray(float(v)) for v in settings.values()))
        for _ in range(3):  # past the first step: the bias corrections and decay move
            grads = {n: jnp.asarray(rng.normal(0, 2, s)) for n, s in shapes.items()}
            expected = reference.update(grads, expected)
            ours = svi.adam(ours, grads, arrays, name == "clipped_adam")
            for n in shapes:
                np.testing.assert_allclose(
                    ours.params[n], reference.get_params(expected)[n], rtol=1e-14
                )
        assert int(ours.step) == int(expected[0]) == 3


def test_one_program_for_any_steps_and_chunks_change_nothing():
    """The steps' program takes their number: a 2-step probe and a longer fit share it;
    the same fit in 20 progress chunks gives the same losses and draws."""
    Y, _, _ = bernmf.simulate(5, 7, 6, 2)
    options = {"num_draws": 3, "learning_rate": 0.05}
    bernmf.fit(Y, "svi", 2, steps=2, progress=False, **options)
    size = _compile.cache_size()
    whole = bernmf.fit(Y, "svi", 2, steps=45, lr_decay=0.5, progress=False, **options)
    assert whole.timings["compile"] == 0.0 and _compile.cache_size() == size
    chunked = bernmf.fit(Y, "svi", 2, steps=45, lr_decay=0.5, progress=True, **options)
    assert whole.trace.shape == (46,) and np.isfinite(whole.trace).all()
    np.testing.assert_array_equal(chunked.trace, whole.trace)
    np.testing.assert_array_equal(chunked.draws["W"], whole.draws["W"])
    assert whole.extras["final_loss"] == whole.trace[-1]


def test_autonormal_fits_rank_one():
    """W is all ones at rank 1: its coordinates are empty, H alone is fitted."""
    Y, _, _ = bernmf.simulate(6, 7, 6, 1)
    fit = bernmf.fit(Y, "svi", 1, steps=30, num_draws=4, progress=False)
    np.testing.assert_array_equal(fit.draws["W"], 1.0)
    assert fit.extras["params"]["W_auto_loc"].shape == (7, 0)
    assert np.isfinite(fit.trace).all() and fit.trace[-1] < fit.trace[0]


def test_log_joint_of_small_draws_in_numpy_equals_the_compiled_loop(monkeypatch):
    """svi's draws are few and small: their log-joint is computed in numpy, not compiled."""
    rng = np.random.default_rng(7)
    Y, _, _ = bernmf.simulate(7, M, N, K)
    mask = rng.random((M, N)) < 0.7
    W_draws = rng.dirichlet(np.ones(K), (2, 3, M))
    H_draws = rng.uniform(0.05, 0.95, (2, 3, K, N))
    prior = bernmf.Prior(1.3, 0.8, 1.1).broadcast(K)
    in_numpy = posterior.log_joint_draws(Y, mask, W_draws, H_draws, prior)
    monkeypatch.setattr(posterior, "NUMPY_ENTRIES", 0)
    compiled = posterior.log_joint_draws(Y, mask, W_draws, H_draws, prior)
    np.testing.assert_allclose(in_numpy, compiled, rtol=1e-12)
    expected = log_joint(Y, mask, W_draws[1, 2], H_draws[1, 2], prior)
    assert in_numpy.shape == (2, 3) and in_numpy[1, 2] == pytest.approx(expected, rel=1e-14)
