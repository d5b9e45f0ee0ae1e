"""Engine nuts: one compiled sampler per shape and options, with NumPyro's own draws."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.distributions import constraints
from numpyro.distributions.transforms import biject_to

import bernmf
from bernmf.data.observed import as_observed
from bernmf.inference import _compile, nuts
from bernmf.models import numpyro_model, unconstrained


def numpyro_mcmc_fields(data, prior, W0, H0, seed: int, dtype: str = "float64", **options):
    """The unconstrained draws and statistics of NumPyro's ``MCMC`` from (W0, H0) (C, ...).

    What engine nuts ran before it compiled its own sampler (commit 2484d0e): NUTS on
    the jitted potential with the data in its closure, chain c with the key of seed + c.
    ``options``: num_warmup, num_samples, thinning, chain_method (and NUTS's options).
    """
    from numpyro.infer import MCMC, NUTS

    num_chains = W0.shape[0]
    run = {name: options.pop(name) for name in ("num_warmup", "num_samples", "thinning")}
    chain_method = options.pop("chain_method", "sequential")
    with jax.enable_x64(dtype == "float64"):
        float_type = jnp.float64 if dtype == "float64" else jnp.float32
        args = numpyro_model.model_args(data.Y, data.mask, prior, float_type)
        init_params = {  # nuts' start, as nuts computes it
            "W": unconstrained.from_simplex(jnp.asarray(W0, float_type)),
            "H": unconstrained.from_unit(jnp.asarray(H0, float_type)),
        }
        if num_chains == 1:
            init_params = {name: value[0] for name, value in init_params.items()}
        potential = jax.jit(functools.partial(numpyro_model.potential_energy, args=args))
        sampler = MCMC(
            NUTS(potential_fn=potential, **options),
            num_chains=num_chains,
            chain_method=chain_method,
            progress_bar=False,
            **run,
        )
        keys = jnp.stack([jax.random.PRNGKey(seed + c) for c in range(num_chains)])
        with numpyro_model.TRACING:
            sampler.run(
                keys[0] if num_chains == 1 else keys,
                init_params=init_params,
                extra_fields=nuts.EXTRA_FIELDS,
            )
        fields = sampler.get_extra_fields(group_by_chain=True)
        fields["z"] = sampler.get_samples(group_by_chain=True)
        return jax.tree.map(np.asarray, fields)


@pytest.mark.slow
def test_a_fit_has_numpyros_draws_and_a_second_fit_of_its_shapes_traces_nothing(monkeypatch):
    """Same draws as NumPyro's MCMC for the same keys and start (float64: to rounding);
    another fit on other data of the same shapes, another seed, neither traces the
    potential nor compiles: it runs the compiled sampler.

    The shapes and options of tests/test_engines.py's nuts fits, so that a run of the
    suite compiles that program once (then loads it from the persistent cache).
    """
    monkeypatch.setattr(_compile, "_CACHE", {})
    traced = []
    potential = numpyro_model.potential_energy
    monkeypatch.setattr(
        numpyro_model, "potential_energy", lambda *a, **k: traced.append(1) or potential(*a, **k)
    )
    options = {"num_warmup": 20, "num_samples": 10, "chain_method": "sequential"}
    Y, _, _ = bernmf.simulate(0, 30, 20, 3)
    first = bernmf.fit(Y, "nuts", 3, seed=3, progress=False, **options)
    assert traced and first.timings["compile"] > 0
    data = as_observed(Y)
    W0, H0 = nuts.initial_factors(data, 3, first.prior, 3, None, "mm", num_chains=2)
    reference = numpyro_mcmc_fields(data, first.prior, W0, H0, seed=3, thinning=1, **options)
    with jax.enable_x64(True):
        simplex, unit = biject_to(constraints.simplex), biject_to(constraints.unit_interval)
        W, H = np.asarray(simplex(reference["z"]["W"])), np.asarray(unit(reference["z"]["H"]))
    assert first.draws["W"].shape == W.shape == (2, 10, 30, 3)
    np.testing.assert_allclose(first.draws["W"], W, atol=1e-8)
    np.testing.assert_allclose(first.draws["H"], H, atol=1e-8)
    np.testing.assert_array_equal(first.sample_stats["n_steps"], reference["num_steps"])
    np.testing.assert_allclose(
        first.sample_stats["step_size"], reference["adapt_state.step_size"], rtol=1e-8
    )

    traced.clear()
    Y_other, _, _ = bernmf.simulate(5, 30, 20, 3)
    second = bernmf.fit(Y_other, "nuts", 3, seed=9, progress=False, **options)
    assert not traced and second.timings["compile"] == 0.0
    assert not np.allclose(second.draws["W"], first.draws["W"])
