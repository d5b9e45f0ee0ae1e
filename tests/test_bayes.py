"""The Bayesian engines (nuts, svi), the NumPyro model, the ArviZ export and diagnostics.

Tiny data and short chains: these check correctness against the spec and plain
numpy, not the quality of long runs (that is ``bernmf reproduce posterior_vs_map``).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import warnings

import arviz_stats
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from numpyro.infer.util import log_density

import bernmf
from bernmf.data.observed import as_observed
from bernmf.inference import _compile, mm, nuts
from bernmf.models import numpyro_model, unconstrained
from bernmf.models.spec import log_joint, log_likelihood, masked_log_likelihood_terms
from bernmf.results.fit import Posterior, Record

M, N, K = 24, 18, 2


@pytest.fixture(scope="module")
def simulated():
    """A labelled DataFrame drawn from the model, its truth and a train mask (80%)."""
    Y, W, H = bernmf.simulate(3, M, N, K)
    rng = np.random.default_rng(0)
    train = rng.random(Y.shape) < 0.8
    frame = pd.DataFrame(Y, index=[f"r{i}" for i in range(M)], columns=[f"c{j}" for j in range(N)])
    return frame, W, H, train


@pytest.fixture(scope="module")
def nuts_fit(simulated):
    """2 short chains under a Beta(0.5, 0.5) prior (below 1: the MM start uses a flat prior)."""
    frame, _, _, train = simulated
    return bernmf.fit(
        frame,
        "nuts",
        rank=K,
        mask=train,
        prior=bernmf.Prior(0.5, 0.5, 1.0),
        num_chains=2,
        num_warmup=150,
        num_samples=100,
        chain_method="sequential",
        progress=False,
    )


def test_model_log_density_is_the_spec_log_joint():
    Y, W, H = bernmf.simulate(1, 9, 7, 3)
    mask = np.random.default_rng(2).random(Y.shape) < 0.6
    data = as_observed(Y, mask)
    prior = bernmf.Prior(0.5, [0.7, 1.3, 2.0], 0.8).broadcast(3)
    with jax.enable_x64(True):
        args = numpyro_model.model_args(data.Y, data.mask, prior, jnp.float64)
        value, _ = log_density(numpyro_model.model, args, {}, {"W": W, "H": H})
    expected = log_joint(data.Y, data.mask, W, H, prior, normalized=True)
    assert float(value) == pytest.approx(expected, rel=0, abs=1e-8)
    # the unobserved entries do not enter: changing them changes nothing
    flipped = as_observed(np.where(mask, Y, 1 - Y), mask)
    with jax.enable_x64(True):
        again, _ = log_density(
            numpyro_model.model,
            numpyro_model.model_args(flipped.Y, flipped.mask, prior, jnp.float64),
            {},
            {"W": W, "H": H},
        )
    assert float(again) == pytest.approx(float(value), abs=1e-10)


def test_written_out_gradient_equals_automatic_differentiation_of_the_spec():
    Y, W, H = bernmf.simulate(4, 11, 9, 3)
    mask = np.random.default_rng(5).random(Y.shape) < 0.7
    H[0, :3] = [0.0, 1.0, 1e-300]  # exact zeros and ones: terms clipped inside the log
    with jax.enable_x64(True):
        Y_, mask_, W_, H_ = jnp.asarray(Y), jnp.asarray(mask), jnp.asarray(W), jnp.asarray(H)
        ours = jax.value_and_grad(numpyro_model.log_likelihood, argnums=(2, 3))(Y_, mask_, W_, H_)
        spec = jax.value_and_grad(log_likelihood, argnums=(2, 3))(Y_, mask_, W_, H_)
    assert float(ours[0]) == pytest.approx(float(spec[0]), rel=1e-12)
    for got, expected in zip(ours[1], spec[1], strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.slow
def test_nuts_fit_holds_draws_statistics_and_consistent_summaries(nuts_fit, simulated):
    frame, _, _, train = simulated
    fit = nuts_fit
    C, S = 2, 100
    assert fit.draws["W"].shape == (C, S, M, K) and fit.draws["H"].shape == (C, S, K, N)
    assert np.allclose(fit.draws["W"].sum(axis=-1), 1)
    assert ((fit.draws["H"] > 0) & (fit.draws["H"] < 1)).all()
    for name in ("diverging", "energy", "n_steps", "tree_depth", "step_size", "lp"):
        assert fit.sample_stats[name].shape == (C, S), name
    # probs is the posterior mean of WH (computed here draw by draw)
    products = np.einsum("csmk,cskn->csmn", fit.draws["W"], fit.draws["H"])
    np.testing.assert_allclose(fit.probs, products.mean(axis=(0, 1)), rtol=1e-12)
    # lp is the spec's log-joint of each draw; trace its chain mean, negated
    c, s = 1, 37
    data = as_observed(frame, train)
    lp = log_joint(data.Y, data.mask, fit.draws["W"][c, s], fit.draws["H"][c, s], fit.prior)
    assert fit.sample_stats["lp"][c, s] == pytest.approx(lp, rel=1e-10)
    np.testing.assert_allclose(fit.trace[1:], -fit.sample_stats["lp"].mean(axis=0))
    np.testing.assert_allclose(fit.trace, -fit.posterior.log_joint.mean(axis=0))  # the start
    assert fit.n_iter == S and fit.extras["divergences"] == fit.sample_stats["diverging"].sum()
    assert fit.extras["chain_method"] == "sequential"
    # W, H are the means of the aligned draws
    aligned = bernmf.align_components(fit)
    np.testing.assert_allclose(fit.H, aligned.draws["H"].mean(axis=(0, 1)))
    np.testing.assert_allclose(fit.W, aligned.draws["W"].mean(axis=(0, 1)))


@pytest.mark.slow
def test_nuts_predicts_held_out_entries_of_simulated_data_near_the_truth(nuts_fit, simulated):
    frame, W, H, train = simulated
    test = ~train
    truth = bernmf.perplexity(frame.to_numpy(), W @ H, test)
    assert nuts_fit.perplexity(frame, test) < truth + 0.06
    assert nuts_fit.perplexity(frame, test) < np.log(2)


@pytest.mark.slow
def test_to_arviz_groups_dims_labels_and_pointwise_log_likelihood(nuts_fit, simulated):
    frame, _, _, train = simulated
    tree = nuts_fit.to_arviz(wh=True)
    posterior = tree["posterior"]
    assert posterior["W"].dims == ("chain", "draw", "row", "component")
    assert posterior["H"].dims == ("chain", "draw", "component", "column")
    assert posterior["WH"].dims == ("chain", "draw", "row", "column")
    assert list(posterior["row"].values) == list(frame.index)
    assert list(posterior["column"].values) == list(frame.columns)
    np.testing.assert_allclose(posterior["WH"].mean(("chain", "draw")), nuts_fit.probs)
    assert set(tree["sample_stats"].data_vars) >= {"diverging", "energy", "step_size", "tree_depth"}
    observed = tree["observed_data"]["Y"].values
    assert np.isnan(observed[~train]).all()
    np.testing.assert_array_equal(observed[train], frame.to_numpy()[train])
    pointwise = tree["log_likelihood"]["Y"]
    assert pointwise.dims == ("chain", "draw", "observation")
    assert pointwise.shape == (2, 100, int(train.sum()))
    # one draw, by plain numpy: the observed entries in row-major order
    c, s = 0, 11
    Wd, Hd = nuts_fit.draws["W"][c, s], nuts_fit.draws["H"][c, s]
    p = (Wd @ Hd)[train]
    y = frame.to_numpy()[train]
    np.testing.assert_allclose(pointwise.values[c, s], y * np.log(p) + (1 - y) * np.log(1 - p))
    assert pointwise.values[c, s].sum() == pytest.approx(
        log_likelihood(frame.to_numpy(), train, Wd, Hd)
    )
    rows, columns = np.nonzero(train)
    assert pointwise["observed_row"].values[5] == frame.index[rows[5]]
    assert pointwise["observed_column"].values[5] == frame.columns[columns[5]]
    with pytest.warns(UserWarning):  # short chains: some Pareto k are high
        loo = arviz_stats.loo(tree)
    assert np.isfinite(loo.elpd) and loo.elpd < 0


def _fake_fit(W_draws, H_draws, sample_stats=None, observed=None):
    """A Fit with given draws (the form any Bayesian engine fills)."""
    S, m, k = W_draws.shape[1:]
    return bernmf.Fit(
        engine="fake",
        rank=k,
        prior=None,
        W=W_draws.mean(axis=(0, 1)),
        H=H_draws.mean(axis=(0, 1)),
        stored_probs=np.zeros((m, H_draws.shape[-1])),
        trace=np.zeros(S + 1),
        converged=True,
        record=Record(0, {"compile": 0.0, "run": 2.0}, observed=observed),
        posterior=Posterior({"W": W_draws, "H": H_draws}, sample_stats or {}),
    )


def _iid_draws(rng, chains=3, draws=1000, m=6, k=3, n=5):
    """Draws scattered around one well-separated (W, H): components clearly identifiable."""
    H_center = np.linspace(0.1, 0.9, k)[:, None] * np.ones((k, n))
    W = rng.dirichlet(np.full(k, 20.0), size=(chains, draws, m))
    H = np.clip(H_center + 0.02 * rng.standard_normal((chains, draws, k, n)), 0.01, 0.99)
    return W, H


def test_align_components_undoes_a_known_permutation_of_each_chain():
    rng = np.random.default_rng(0)
    W, H = _iid_draws(rng)
    permutations = np.array([[0, 1, 2], [2, 0, 1], [1, 2, 0]])
    W_switched = np.stack([W[c][..., p] for c, p in enumerate(permutations)])
    H_switched = np.stack([H[c][:, p, :] for c, p in enumerate(permutations)])
    aligned = bernmf.align_components(_fake_fit(W_switched, H_switched), reference=H[0].mean(0))
    np.testing.assert_array_equal(aligned.draws["W"], W)
    np.testing.assert_array_equal(aligned.draws["H"], H)
    assert aligned.posterior.permutations.shape == (3, 3)
    np.testing.assert_allclose(  # WH unchanged draw by draw
        np.einsum("csmk,cskn->csmn", aligned.draws["W"], aligned.draws["H"]),
        np.einsum("csmk,cskn->csmn", W_switched, H_switched),
    )


def test_diagnostics_on_mixed_and_on_separated_chains():
    rng = np.random.default_rng(1)
    W, H = _iid_draws(rng)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # iid draws, no divergences: no warning
        good = bernmf.diagnostics(_fake_fit(W, H))
    assert set(good.table.index) == {"WH", "W", "H"}
    assert good.rhat["WH"].shape == (6, 5) and good.ess_bulk["H"].shape == (3, 5)
    assert good.table.loc["WH", "rhat_max"] < 1.05
    assert good.table.loc["WH", "ess_bulk_median"] > 300
    # independent check of R-hat and ESS against arviz_stats on the raw array
    WH = np.einsum("csmk,cskn->csmn", W, H)
    np.testing.assert_allclose(
        good.rhat["WH"], arviz_stats.rhat(WH, chain_axis=0, draw_axis=1), rtol=1e-12
    )
    np.testing.assert_allclose(
        good.ess_bulk["H"], arviz_stats.ess(H, chain_axis=0, draw_axis=1), rtol=1e-12
    )
    shifted = H.copy()
    shifted[1] = np.clip(shifted[1] + 0.2, 0.01, 0.99)  # chain 1 elsewhere
    with pytest.warns(UserWarning, match="may not have converged"):
        bad = bernmf.diagnostics(_fake_fit(W, shifted))
    assert bad.table.loc["WH", "rhat_max"] > 1.1
    diverging = np.zeros((3, 1000), bool)
    diverging[0, 4] = True
    with pytest.warns(UserWarning, match="1 divergent"):
        counted = bernmf.diagnostics(_fake_fit(W, H, sample_stats={"diverging": diverging}))
    assert counted.divergences == 1


def test_svi_autodelta_reaches_the_mm_objective(simulated):
    """AutoDelta is a MAP on the constrained space: same objective as mm (within 0.5%)."""
    frame, _, _, mask = simulated
    Y = frame.to_numpy()
    prior = bernmf.Prior(1.2, 1.5, 1.1)
    best_mm = min(
        bernmf.fit(Y, "mm", rank=2, mask=mask, prior=prior, seed=s, tol=1e-9).objective
        for s in range(3)
    )
    delta = bernmf.fit(
        Y, "svi", rank=2, mask=mask, prior=prior, guide="AutoDelta", steps=4000,
        learning_rate=0.05, num_draws=2, progress=False,
    )  # fmt: skip
    objective = -log_joint(np.where(mask, Y, 0), mask, delta.W, delta.H, delta.prior)
    assert objective == pytest.approx(best_mm, rel=5e-3)
    assert objective >= best_mm - 1e-6 * abs(best_mm)  # a MAP cannot beat the best mode much


def test_svi_autonormal_elbo_decreases_and_draws_summarize(simulated):
    frame, W, H, train = simulated
    options = {"rank": K, "mask": train, "steps": 1500, "learning_rate": 0.02, "progress": False}
    fit = bernmf.fit(frame, "svi", num_draws=200, **options)
    assert fit.trace.shape == (1501,) and fit.n_iter == 1500
    assert fit.trace[-150:].mean() < fit.trace[:150].mean()
    assert fit.draws["W"].shape == (1, 200, M, K) and fit.draws["H"].shape == (1, 200, K, N)
    assert fit.extras["guide"] == "AutoNormal"
    products = np.einsum("csmk,cskn->csmn", fit.draws["W"], fit.draws["H"])
    np.testing.assert_allclose(fit.probs, products.mean(axis=(0, 1)), rtol=1e-12)
    assert fit.timings["compile"] > 0 and fit.timings["run"] > 0
    truth = bernmf.perplexity(frame.to_numpy(), W @ H, ~train)
    assert fit.perplexity(frame, ~train) < truth + 0.08
    assert fit.to_arviz(log_likelihood=False)["posterior"]["W"].shape == (1, 200, M, K)

    # another prior and seed reuse the compiled programs, and give what fresh ones give
    size = _compile.cache_size()
    other = {"prior": bernmf.Prior(2.0, 1.5, 0.7), "seed": 1, "num_draws": 200}
    reused = bernmf.fit(frame, "svi", **other, **options)
    assert reused.timings["compile"] == 0.0 and _compile.cache_size() == size
    _compile._CACHE.clear()
    fresh = bernmf.fit(frame, "svi", **other, **options)
    assert fresh.timings["compile"] > 0
    np.testing.assert_array_equal(reused.trace, fresh.trace)
    np.testing.assert_array_equal(reused.draws["H"], fresh.draws["H"])


@pytest.mark.parametrize(
    ("engine", "options", "message"),
    [
        ("nuts", {"num_chains": 0}, "num_chains"),
        ("nuts", {"target_accept_prob": 1.5}, "target_accept_prob"),
        ("nuts", {"start": "median"}, "start"),
        ("nuts", {"chain_method": "threads"}, "chain_method"),
        ("svi", {"guide": "AutoIAF"}, "guide"),
        ("svi", {"optimizer": "sgd"}, "optimizer"),
        ("svi", {"steps": 0}, "steps"),
        ("svi", {"lr_decay": 0.0}, "lr_decay"),
    ],
)
def test_bad_options_are_clear_errors(engine, options, message):
    Y, _, _ = bernmf.simulate(0, 5, 4, 2)
    with pytest.raises(ValueError, match=message):
        bernmf.fit(Y, engine, rank=2, **options)


def test_priors_below_one_are_allowed_and_mm_starts_from_a_flat_enough_prior():
    prior = bernmf.Prior(0.5, 2.0, 0.3).broadcast(2)
    nuts.check_prior(prior)
    start = nuts.mm_start_prior(prior)
    np.testing.assert_array_equal(start.alpha, [1.0, 1.0])
    np.testing.assert_array_equal(start.beta, [2.0, 2.0])
    np.testing.assert_array_equal(start.gamma, [1.0, 1.0])


def test_chain_starts_from_the_prior_or_a_given_init_are_inside_the_support():
    Y, W, H = bernmf.simulate(4, 7, 6, 3)
    data = as_observed(Y)
    prior = bernmf.Prior(0.5, 0.5, 0.5).broadcast(3)
    W0, H0 = nuts.initial_factors(data, 3, prior, 0, None, "prior", num_chains=2)
    assert W0.shape == (2, 7, 3) and H0.shape == (2, 3, 6)
    assert not np.allclose(W0[0], W0[1])  # chains start apart
    np.testing.assert_allclose(W0.sum(axis=-1), 1)
    assert ((W0 > 0).all()) and ((H0 > 0) & (H0 < 1)).all()
    W1, H1 = nuts.initial_factors(data, 3, prior, 0, (W, H), "mm", num_chains=2)
    np.testing.assert_array_equal(W1[0], W1[1])
    np.testing.assert_allclose(H1[0], np.clip(H, 1e-3, 1 - 1e-3))


@pytest.mark.slow
def test_the_mm_starts_of_the_chains_run_in_one_batched_call(monkeypatch):
    # issue 23: nuts ran its MM starts one fit at a time
    Y, _, _ = bernmf.simulate(4, 12, 8, 2)
    data = as_observed(Y)
    prior = bernmf.Prior(0.5, 2.0).broadcast(2)
    calls = []
    run_members = mm.run_members
    monkeypatch.setattr(
        mm, "run_members", lambda *a, **o: calls.append(a[3]) or run_members(*a, **o)
    )
    W0, H0 = nuts.initial_factors(data, 2, prior, 5, None, "mm", num_chains=3)
    assert calls == [[5, 6, 7]]
    for chain, seed in enumerate((5, 6, 7)):
        alone = bernmf.fit(Y, "mm", 2, prior=nuts.mm_start_prior(prior), seed=seed)
        W, H = unconstrained.interior(alone.W[None], alone.H[None])
        np.testing.assert_allclose(W0[chain], W[0], atol=1e-8)
        np.testing.assert_allclose(H0[chain], H[0], atol=1e-8)


def test_chains_run_in_parallel_only_with_a_device_per_chain(monkeypatch):
    monkeypatch.setattr(jax, "local_device_count", lambda: 1)
    assert nuts.default_chain_method(2) == "sequential"
    monkeypatch.setattr(jax, "local_device_count", lambda: 4)
    assert nuts.default_chain_method(2) == "parallel"


def test_interior_start_has_a_finite_unconstrained_image():
    W = np.array([[1.0, 0.0, 0.0], [0.2, 0.3, 0.5]])
    H = np.array([[0.0, 1.0], [0.5, 1.0], [0.2, 0.0]])
    W_in, H_in = unconstrained.interior(W, H)
    np.testing.assert_allclose(W_in.sum(axis=1), 1)
    with jax.enable_x64(True):
        image = (
            unconstrained.from_simplex(jnp.asarray(W_in)),
            unconstrained.from_unit(jnp.asarray(H_in)),
        )
    assert all(np.isfinite(np.asarray(v)).all() for v in image)


def test_masked_terms_are_what_the_log_likelihood_group_sums():
    """The ArviZ pointwise terms reuse the spec's masked terms (a guard against drift)."""
    Y, W, H = bernmf.simulate(2, 5, 4, 2)
    mask = np.ones(Y.shape, bool)
    fit = _fake_fit(W[None, None], H[None, None], observed=as_observed(Y, mask))
    tree = dataclasses.replace(fit).to_arviz()
    expected = masked_log_likelihood_terms(Y, mask, W @ H, W @ (1 - H)).ravel()
    np.testing.assert_allclose(tree["log_likelihood"]["Y"].values[0, 0], expected)


def test_rank_rhat_is_arviz_rhat_with_ties_and_an_odd_number_of_draws():
    from bernmf.posterior.draws import rank_rhat

    rng = np.random.default_rng(5)
    x = rng.random((3, 101, 4, 5))
    x[1] += 0.1 * rng.random((101, 4, 5))
    x[:, 10:20] = x[:, 9:10]  # repeated draws (a sampler that stays put) make ties
    np.testing.assert_allclose(
        rank_rhat(x), arviz_stats.rhat(x, chain_axis=0, draw_axis=1), rtol=1e-12
    )
    assert np.isnan(rank_rhat(x[:1])).all()  # one chain: undefined, as in arviz


@pytest.mark.slow
def test_svi_and_nuts_fit_in_concurrent_threads():
    """NumPyro's effect handlers are one global stack: without bernmf's lock two threads
    tracing the model saw each other's sites. Each thread's fits equal the same fits
    made alone."""
    Y, _, _ = bernmf.simulate(0, 8, 6, 2)
    runs = [
        ("svi", 0, {"steps": 20, "num_draws": 5, "progress": False}),
        ("svi", 1, {"steps": 20, "num_draws": 5, "progress": False}),
        ("nuts", 2, {"num_warmup": 5, "num_samples": 5, "num_chains": 1, "progress": False}),
    ]
    with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
        futures = [pool.submit(bernmf.fit, Y, e, 2, seed=s, **o) for e, s, o in runs]
        together = [f.result() for f in futures]
    for (engine, seed, options), result in zip(runs, together, strict=True):
        alone = bernmf.fit(Y, engine, 2, seed=seed, **options)
        np.testing.assert_allclose(result.W, alone.W, rtol=1e-12)
