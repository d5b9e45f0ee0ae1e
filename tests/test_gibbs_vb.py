"""Tests of the ``gibbs`` and ``vb`` engines against enumeration, invariants and known truth."""

from __future__ import annotations

import itertools
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from scipy import special, stats

import bernmf
from bernmf.inference import _augmented, gibbs
from bernmf.models.spec import Prior
from bernmf.posterior.calibration import interval_coverage

TINY_Y = np.array([[1, 0, 1], [1, 1, 0], [0, 0, 1]], dtype=float)


def exact_posterior(Y, mask, K, alpha, beta, gamma):
    """p(Z | Y) over every assignment of the observed entries, by enumeration.

    The collapsed joint, written from the Dirichlet-multinomial and Beta-Bernoulli
    integrals: prod_m G(K g)/G(K g + n_m) prod_k G(g + L_mk)/G(g) times
    prod_kn B(a + A_kn, b + B_kn) / B(a, b).
    """
    cells = list(zip(*np.nonzero(mask), strict=True))
    M, N = Y.shape
    log_joint = []
    assignments = list(itertools.product(range(K), repeat=len(cells)))
    for z in assignments:
        L = np.zeros((M, K))
        ones = np.zeros((K, N))
        zeros = np.zeros((K, N))
        for (m, n), k in zip(cells, z, strict=True):
            L[m, k] += 1
            (ones if Y[m, n] == 1 else zeros)[k, n] += 1
        value = np.sum(special.gammaln(K * gamma) - special.gammaln(K * gamma + L.sum(1)))
        value += np.sum(special.gammaln(gamma + L) - special.gammaln(gamma))
        value += np.sum(special.betaln(alpha + ones, beta + zeros) - special.betaln(alpha, beta))
        log_joint.append(value)
    log_joint = np.array(log_joint)
    return cells, assignments, np.exp(log_joint - special.logsumexp(log_joint))


def gibbs_states(Y, mask, K, prior, n_sweeps, thinning, seed):
    """Z (natural layout) after every ``thinning`` sweeps of one chain, shape (S, M, N)."""
    M, N = Y.shape
    diagonals = gibbs.Diagonals.of_shape(M, N)
    with jax.enable_x64(True):
        data = gibbs.GibbsData(
            jnp.asarray(diagonals.gather(Y), jnp.float32),
            jnp.asarray(diagonals.gather(mask), jnp.float32),
        )
        key_init, key = jax.random.split(jax.random.key(seed))
        state = gibbs.initial_state(key_init, data, diagonals, K)
        prior32 = _augmented.prior_arrays(prior.broadcast(K), jnp.float32)
        one_sweep = partial(gibbs.sweep, rows_rotate=diagonals.rows_rotate)

        @jax.jit
        def chain(state):
            def thinned(state, key):
                for k in jax.random.split(key, thinning):
                    state = one_sweep(state, data, prior32, k)
                return state, state.z

            return jax.lax.scan(thinned, state, jax.random.split(key, n_sweeps // thinning))

        last, z = chain(state)
    return np.stack([diagonals.scatter(np.asarray(s)) for s in z]), last


@pytest.mark.slow
@pytest.mark.parametrize(
    ("shape", "n_sweeps"), [((3, 3), 80_000), ((2, 3), 16_000), ((3, 2), 16_000)]
)
def test_gibbs_stationary_distribution_matches_enumeration(shape, n_sweeps):
    """Z's frequencies over a long chain against p(Z | Y) (M = N, M < N and M > N layouts)."""
    M, N = shape
    Y = TINY_Y[:M, :N]
    mask = np.ones(shape, bool)
    mask[1, 0] = False
    K, prior = 2, Prior(alpha=0.8, beta=1.3, gamma=0.5)
    cells, assignments, probability = exact_posterior(Y, mask, K, 0.8, 1.3, 0.5)
    z, _ = gibbs_states(Y, mask, K, prior, n_sweeps=n_sweeps, thinning=2, seed=1)
    index = {a: i for i, a in enumerate(assignments)}
    observed = np.bincount(
        [index[tuple(s[m, n] for m, n in cells)] for s in z], minlength=len(assignments)
    )
    expected = probability * len(z)
    assert expected.min() > 5  # every state is visited often enough for the chi-square test
    _, p_value = stats.chisquare(observed, expected)
    assert p_value > 1e-3, p_value
    # the test has power: a slightly different prior is rejected
    _, _, wrong = exact_posterior(Y, mask, K, 0.8, 1.3, 1.0)
    assert stats.chisquare(observed, wrong * len(z))[1] < 1e-6


def test_gibbs_counts_match_state():
    Y = TINY_Y
    mask = np.ones((3, 3), bool)
    mask[1, 0] = False
    z, last = gibbs_states(Y, mask, 2, Prior(), n_sweeps=5, thinning=1, seed=0)
    onehot = np.eye(2)[z[-1]].transpose(2, 0, 1) * mask
    L, A, T = (np.asarray(c) for c in last.counts)
    np.testing.assert_array_equal(L, onehot.sum(2))
    np.testing.assert_array_equal(A, (onehot * Y).sum(1))
    np.testing.assert_array_equal(T, onehot.sum(1))


def beta_moment_errors(draws, a, b):
    """Errors of the draws' means and variances against those of Beta(a, b), in units of
    their Monte Carlo sd; ``draws`` (S, ...) with ``a``, ``b`` broadcasting to (...).

    The variance is estimated around the exact mean, so its sd is ``sqrt((mu4 - var^2) /
    S)`` with mu4 the exact fourth central moment.
    """
    S = draws.shape[0]
    a, b = np.broadcast_arrays(np.asarray(a, float), np.asarray(b, float))
    raw = [stats.beta.moment(n, a, b) for n in range(1, 5)]
    mean = raw[0]
    variance = raw[1] - mean**2
    mu4 = raw[3] - 4 * mean * raw[2] + 6 * mean**2 * raw[1] - 3 * mean**4
    mean_error = (draws.mean(0) - mean) / np.sqrt(variance / S)
    variance_error = (((draws - mean) ** 2).mean(0) - variance) / np.sqrt((mu4 - variance**2) / S)
    return mean_error, variance_error


def dirichlet_marginals(concentration):
    """The Beta parameters of each coordinate of Dirichlet(concentration) (..., K)."""
    concentration = np.asarray(concentration, float)
    return concentration, concentration.sum(-1, keepdims=True) - concentration


GIBBS_COUNTS = _augmented.Counts(
    L=np.array([[3.0, 0, 1, 7], [0, 0, 5, 2], [1, 0, 0, 4]]),  # row 1 has no observed entry
    A=np.array([[2.0, 0, 1, 0, 4], [0, 0, 3, 1, 0], [1, 0, 0, 2, 2]]),
    T=np.array([[2.0, 0, 4, 1, 5], [3, 0, 3, 1, 0], [1, 0, 2, 2, 6]]),  # column 1 neither
)
"""Counts of K = 3 components on 4 rows and 5 columns, with an empty row and column."""


@pytest.mark.parametrize(
    "prior",
    [
        Prior(alpha=[0.5, 2.0, 1.0], beta=[1.0, 0.3, 4.0], gamma=[0.2, 1.5, 3.0]),
        Prior(alpha=0.01, beta=0.01, gamma=1e-3 / 3),  # tiny: the log-space draws
    ],
    ids=["moderate", "tiny"],
)
def test_conditional_draws_have_the_dirichlet_and_beta_moments(prior):
    """Draws given fixed counts against the exact means and variances of W | counts ~
    Dirichlet(gamma + L.T) (each coordinate a Beta) and H | counts ~ Beta(alpha + A, beta
    + B), within 5 Monte Carlo sds; the conditional means (a variance of 0) fail it."""
    S = 20_000
    counts = _augmented.Counts(*(np.broadcast_to(c, (S, *c.shape)) for c in GIBBS_COUNTS))
    prior = prior.broadcast(3)
    W, H = _augmented.conditional_draws(counts, prior, np.random.default_rng(0))
    assert W.shape == (S, 4, 3) and H.shape == (S, 3, 5)
    assert np.all(np.isfinite(W)) and np.all(np.isfinite(H))
    np.testing.assert_allclose(W.sum(-1), 1)
    assert np.all(W >= 0) and np.all((H >= 0) & (H <= 1))
    L, A, T = GIBBS_COUNTS
    concentration = prior.gamma + L.T
    for draws, (a, b) in [
        (W, dirichlet_marginals(concentration)),
        (H, (prior.alpha[:, None] + A, prior.beta[:, None] + T - A)),
    ]:
        mean_error, variance_error = beta_moment_errors(draws, a, b)
        assert np.abs(mean_error).max() < 5, mean_error
        assert np.abs(variance_error).max() < 5, variance_error
    W_mean, H_mean = _augmented.posterior_means(GIBBS_COUNTS, prior)
    np.testing.assert_allclose(W_mean, concentration / concentration.sum(1, keepdims=True))
    np.testing.assert_allclose(
        H_mean, (prior.alpha[:, None] + A) / (prior.alpha[:, None] + prior.beta[:, None] + T)
    )


@pytest.mark.slow
def test_gibbs_chain_c_is_the_one_chain_fit_of_seed_plus_c(simulated):
    """Sweeps and conditional draws of chain c depend on seed + c alone (inference/chains.py
    relies on it): chain 1 of seed 3 is the fit of seed 4, draws included."""
    Y, mask, _, _ = simulated
    options = {"num_warmup": 5, "num_samples": 4, "progress": False}
    pair = bernmf.fit(Y, "gibbs", rank=3, mask=mask, seed=3, num_chains=2, **options)
    alone = bernmf.fit(Y, "gibbs", rank=3, mask=mask, seed=4, **options)
    for name in ("W", "H"):
        np.testing.assert_array_equal(pair.draws[name][1], alone.draws[name][0], err_msg=name)
    for name in ("W", "H", "probs"):  # the Rao-Blackwellized means
        np.testing.assert_array_equal(
            getattr(pair.posterior.chain_means, name)[1],
            getattr(alone.posterior.chain_means, name)[0],
            err_msg=name,
        )
    np.testing.assert_allclose(pair.sample_stats["lp"][1], alone.sample_stats["lp"][0])
    np.testing.assert_allclose(alone.probs, alone.posterior.chain_means.probs[0])
    np.testing.assert_allclose(alone.W, alone.posterior.chain_means.W[0])


def test_gibbs_draws_with_tiny_priors_and_empty_rows_are_finite(simulated):
    """gamma = 1e-3 / K and Beta(0.01, 0.01), a row and a column without an observed entry:
    every draw of W on the simplex and of H in [0, 1], no NaN."""
    Y, mask, _, _ = simulated
    mask = mask.copy()
    mask[4], mask[:, 7] = False, False
    prior = Prior(alpha=0.01, beta=0.01, gamma=1e-3 / 3)
    with pytest.warns(UserWarning, match="1 row.* and 1 column.* no observed entry"):
        fit = bernmf.fit(
            Y, "gibbs", rank=3, mask=mask, prior=prior, num_warmup=5, num_samples=4, progress=False
        )
    W, H = fit.draws["W"], fit.draws["H"]
    assert np.all(np.isfinite(W)) and np.all(np.isfinite(H))
    np.testing.assert_allclose(W.sum(-1), 1)
    assert np.all(W >= 0) and np.all((H >= 0) & (H <= 1))
    assert np.all(np.isfinite(fit.probs)) and np.all(np.isfinite(fit.W))


@pytest.mark.slow
def test_gibbs_intervals_cover_the_truth():
    """90% central intervals of WH from gibbs's draws hold 85% to 95% of the true WH on a
    simulated 100 x 60, K = 6 matrix (flat prior, 70% of the entries for training).

    The conditional means E[W | Z], E[H | Z] in place of the draws (before issue 46)
    covered 0.789: too narrow.
    """
    Y, W, H = bernmf.simulate(0, 100, 60, 6)
    mask = np.random.default_rng(0).random(Y.shape) < 0.7
    fit = bernmf.fit(Y, "gibbs", rank=6, mask=mask, prior=Prior.flat(), progress=False)
    coverage = interval_coverage(W @ H, fit.draws["W"], fit.draws["H"], levels=(0.9,))
    assert 0.85 <= coverage.shares[0] <= 0.95, coverage


# ---------------------------------------------------------------------------- vb

VB_ITER = 200  # one iteration limit for all vb tests: one compiled program per variant


def numpy_elbo(Y, mask, a, a1, b1, alpha, beta, gamma):
    """The mean-field ELBO term by term, with phi optimal for q(W) = Dir(a), q(H) = Beta(a1, b1)."""
    E_log_w = special.digamma(a) - special.digamma(a.sum(1, keepdims=True))
    E_log_h = special.digamma(a1) - special.digamma(a1 + b1)
    E_log_1mh = special.digamma(b1) - special.digamma(a1 + b1)
    # s[m, n, k] = E ln w_mk + y E ln h_kn + (1 - y) E ln(1 - h_kn)
    s = E_log_w[:, None, :] + np.where(Y[:, :, None] == 1, E_log_h.T[None], E_log_1mh.T[None])
    phi = np.exp(s - special.logsumexp(s, axis=2, keepdims=True))
    O = mask[:, :, None]
    expected_log_lik_z = np.sum(O * phi * s)  # E[log p(Y | Z, H) + log p(Z | W)]
    entropy_z = -np.sum(O * special.xlogy(phi, phi))
    K = a.shape[1]
    gammas = np.full(K, gamma)
    M = a.shape[0]
    E_log_p_w = M * (special.gammaln(gammas.sum()) - special.gammaln(gammas).sum()) + np.sum(
        (gamma - 1) * E_log_w
    )
    E_log_p_h = np.sum(
        -special.betaln(alpha, beta) + (alpha - 1) * E_log_h + (beta - 1) * E_log_1mh
    )
    entropy_w = sum(stats.dirichlet(row).entropy() for row in a)
    entropy_h = np.sum(stats.beta(a1, b1).entropy())
    return expected_log_lik_z + entropy_z + E_log_p_w + E_log_p_h + entropy_w + entropy_h


@pytest.fixture(scope="module")
def simulated():
    """A 150 x 60 matrix from the model with K = 3, 20% of its entries missing."""
    Y, W, H = bernmf.simulate(3, 150, 60, 3, Prior(alpha=0.3, beta=0.3, gamma=0.5))
    mask = np.random.default_rng(0).random(Y.shape) > 0.2
    return Y, mask, W, H


@pytest.mark.slow
def test_meanfield_elbo_never_decreases_and_matches_numpy(simulated):
    Y, mask, _, _ = simulated
    prior = Prior(alpha=0.9, beta=1.2, gamma=0.4)
    fit = bernmf.fit(
        Y, "vb", rank=3, mask=mask, prior=prior, variant="meanfield", max_iter=VB_ITER, tol=0
    )
    assert fit.n_iter == VB_ITER and fit.trace.shape == (VB_ITER + 1,)
    assert np.all(np.diff(fit.trace) >= -1e-9 * np.abs(fit.trace[1:]))
    assert fit.trace[-1] > fit.trace[0] + 100
    reference = numpy_elbo(
        Y,
        mask,
        fit.extras["q_W_dirichlet"],
        fit.extras["q_H_beta_a"],
        fit.extras["q_H_beta_b"],
        0.9,
        1.2,
        0.4,
    )
    np.testing.assert_allclose(fit.trace[-1], reference, rtol=1e-10)


def numpy_cvb0_update(Y, mask, q, alpha, beta, gamma):
    """One synchronous CVB0 update, entry by entry; q of shape (M, N, K)."""
    q = q * mask[:, :, None]
    L, ones, total = q.sum(1), (q * Y[:, :, None]).sum(0), q.sum(0)
    new = np.zeros_like(q)
    for m, n in zip(*np.nonzero(mask), strict=True):
        own = q[m, n]
        counts = ones[n] - own * Y[m, n] if Y[m, n] == 1 else total[n] - ones[n] - own
        prior_term = alpha if Y[m, n] == 1 else beta
        weights = (gamma + L[m] - own) * (prior_term + counts) / (alpha + beta + total[n] - own)
        new[m, n] = weights / weights.sum()
    return new


def test_cvb0_update_matches_numpy(simulated):
    from bernmf.inference import vb

    Y, mask, _, _ = simulated
    rng = np.random.default_rng(1)
    q = rng.dirichlet(np.ones(3), size=Y.shape)  # (M, N, K)
    expected = numpy_cvb0_update(Y, mask, q, 0.9, 1.2, 0.4)
    with jax.enable_x64(True):
        data = vb.VBData.of(Y * mask, mask, jnp.float64)
        prior = _augmented.prior_arrays(Prior(0.9, 1.2, 0.4).broadcast(3), jnp.float64)
        q_nkm = jnp.asarray(np.transpose(q * mask[:, :, None], (1, 2, 0)))
        new, counts = vb.cvb0_update(q_nkm, vb.soft_counts(q_nkm, data), data, prior)
    np.testing.assert_allclose(np.transpose(np.asarray(new), (2, 0, 1)), expected, atol=1e-12)
    np.testing.assert_allclose(np.asarray(counts.L), expected.sum(1).T, atol=1e-10)


# ---------------------------------------------------------------------------- both engines

ENGINES = [
    ("gibbs", {"num_warmup": 100, "num_samples": 50, "progress": False}),
    ("vb", {"variant": "cvb0", "max_iter": VB_ITER}),
    ("vb", {"variant": "meanfield", "max_iter": VB_ITER}),
]


def test_meanfield_entries_outside_the_mask_change_nothing(simulated):
    """gibbs and vb's default variant (cvb0) are checked in test_engines.py."""
    Y, mask, _, _ = simulated
    options = {"variant": "meanfield", "max_iter": VB_ITER, "seed": 2}
    flipped = np.where(mask, Y, 1 - Y)
    with_nan = np.where(mask, Y, np.nan)
    fits = [bernmf.fit(y, "vb", rank=3, mask=mask, **options) for y in (Y, flipped)]
    fits.append(bernmf.fit(with_nan, "vb", rank=3, **options))
    for other in fits[1:]:
        np.testing.assert_array_equal(fits[0].probs, other.probs)
        np.testing.assert_array_equal(fits[0].trace, other.trace)


@pytest.mark.slow
def test_gibbs_result_shapes_and_ranges(simulated):
    Y, mask, _, _ = simulated
    fit = bernmf.fit(
        Y,
        "gibbs",
        rank=3,
        mask=mask,
        num_warmup=5,
        num_samples=4,
        thinning=2,
        num_chains=2,
        progress=False,
    )
    M, N = Y.shape
    assert fit.draws["W"].shape == (2, 4, M, 3) and fit.draws["H"].shape == (2, 4, 3, N)
    assert fit.draws["W"].dtype == np.float64
    np.testing.assert_allclose(fit.draws["W"].sum(-1), 1)
    assert np.all((fit.draws["H"] > 0) & (fit.draws["H"] < 1))
    assert fit.sample_stats["lp"].shape == (2, 4)
    assert fit.trace.shape == (5 + 8 + 1,) and fit.n_iter == 13
    assert fit.posterior.log_joint.shape == (2, 14)
    np.testing.assert_allclose(fit.trace, -fit.posterior.log_joint.mean(axis=0))
    np.testing.assert_array_equal(fit.sample_stats["lp"], fit.posterior.log_joint[:, 7::2])
    # probs, W and H: the Rao-Blackwellized means, not the draws' (tested on fixed counts below)
    assert fit.posterior.chain_means.probs.shape == (2, M, N)
    assert fit.posterior.chain_means.W.shape == (2, M, 3) and fit.posterior.chain_means.H.shape == (
        2,
        3,
        N,
    )
    np.testing.assert_allclose(fit.probs, fit.posterior.chain_means.probs.mean(0))
    np.testing.assert_allclose(fit.H, fit.posterior.chain_means.H.mean(0))
    np.testing.assert_allclose(fit.W.sum(1), 1)
    assert not np.allclose(fit.W, fit.draws["W"].mean((0, 1)))
    np.testing.assert_allclose(fit.prior.gamma, 1 / 3)  # the default prior: gamma = 1/K
    assert not np.array_equal(fit.draws["W"][0], fit.draws["W"][1])  # chains differ


@pytest.mark.parametrize("variant", ["cvb0", "meanfield"])
def test_vb_result_ranges_and_stopping(simulated, variant):
    Y, mask, _, _ = simulated
    fit = bernmf.fit(Y, "vb", rank=3, mask=mask, variant=variant, max_iter=VB_ITER, tol=1e-5)
    assert fit.converged and fit.n_iter < VB_ITER and fit.trace.shape == (fit.n_iter + 1,)
    np.testing.assert_allclose(fit.W.sum(1), 1)
    assert np.all((fit.H > 0) & (fit.H < 1))
    assert np.all((fit.probs > 0) & (fit.probs < 1))
    assert fit.extras["q_W_dirichlet"].shape == (150, 3)
    np.testing.assert_allclose(
        fit.W, fit.extras["q_W_dirichlet"] / fit.extras["q_W_dirichlet"].sum(1, keepdims=True)
    )
    assert fit.draws["W"].shape == (1, 250, 150, 3) and fit.draws["H"].shape == (1, 250, 3, 60)
    assert fit.sample_stats == {}


@pytest.mark.parametrize("variant", ["cvb0", "meanfield"])
def test_vb_draws_have_the_moments_of_q(simulated, variant):
    """W's draws against Dirichlet(q_W_dirichlet) (each coordinate a Beta), H's against
    Beta(q_H_beta_a, q_H_beta_b): means (so also ``fit.W``, ``fit.H``) and variances within
    5 Monte Carlo sds; another seed gives other draws."""
    Y, mask, _, _ = simulated
    options = {"variant": variant, "max_iter": VB_ITER, "num_draws": 2000}
    fit = bernmf.fit(Y, "vb", rank=3, mask=mask, **options)
    W, H = fit.draws["W"][0], fit.draws["H"][0]
    assert W.shape == (2000, 150, 3) and H.shape == (2000, 3, 60)
    for draws, (a, b) in [
        (W, dirichlet_marginals(fit.extras["q_W_dirichlet"])),
        (H, (fit.extras["q_H_beta_a"], fit.extras["q_H_beta_b"])),
    ]:
        mean_error, variance_error = beta_moment_errors(draws, a, b)
        assert np.abs(mean_error).max() < 5, mean_error
        assert np.abs(variance_error).max() < 5, variance_error
    np.testing.assert_allclose(W.mean(0), fit.W, atol=0.02)
    np.testing.assert_allclose(H.mean(0), fit.H, atol=0.02)
    other = bernmf.fit(Y, "vb", rank=3, mask=mask, seed=1, **options)
    assert not np.array_equal(other.draws["W"], fit.draws["W"])


def test_vb_members_are_chain_stacked_without_validation(simulated):
    """bayesian=True: combine="stack" without validation entries weighs the members by
    the PSIS-LOO of their draws, which the ensemble pools as one chain per member."""
    Y, mask, _, _ = simulated
    options = {"max_iter": VB_ITER, "num_draws": 50}
    result = bernmf.fit(Y, "vb", rank=3, mask=mask, restarts=2, combine="stack", **options)
    weights = np.asarray(result.mixture.weights)
    assert weights.shape == (2,) and np.all(weights >= 0) and np.isclose(weights.sum(), 1)
    assert result.draws["W"].shape == (2, 50, 150, 3)
    members = result.members
    mixture = weights[0] * members[0].probs + weights[1] * members[1].probs
    np.testing.assert_allclose(result.probs, mixture)


@pytest.mark.parametrize("variant", ["cvb0", "meanfield"])
def test_vb_draws_with_tiny_priors_and_empty_rows_are_finite(simulated, variant):
    """gamma = 1e-3 / K and Beta(0.01, 0.01), a row and a column without an observed entry:
    every draw of W on the simplex and of H in [0, 1], no NaN."""
    Y, mask, _, _ = simulated
    mask = mask.copy()
    mask[4], mask[:, 7] = False, False
    prior = Prior(alpha=0.01, beta=0.01, gamma=1e-3 / 3)
    with pytest.warns(UserWarning, match="1 row.* and 1 column.* no observed entry"):
        fit = bernmf.fit(Y, "vb", rank=3, mask=mask, prior=prior, variant=variant, max_iter=VB_ITER)
    W, H = fit.draws["W"], fit.draws["H"]
    assert np.all(np.isfinite(W)) and np.all(np.isfinite(H))
    np.testing.assert_allclose(W.sum(-1), 1)
    assert np.all(W >= 0) and np.all((H >= 0) & (H <= 1))


@pytest.mark.slow
@pytest.mark.parametrize(("engine", "options"), ENGINES)
def test_known_truth_on_simulated_data(engine, options):
    """On data from the model, the predictions of held-out entries approach the truth's."""
    Y, W, H = bernmf.simulate(5, 200, 80, 3, Prior(alpha=0.3, beta=0.3, gamma=0.5))
    mask = np.random.default_rng(5).random(Y.shape) > 0.2
    options = {
        **options,
        **({"num_warmup": 100, "num_samples": 50} if engine == "gibbs" else {"max_iter": 300}),
    }
    fit = bernmf.fit(Y, engine, rank=3, mask=mask, seed=0, **options)
    truth = W @ H
    held_out = ~mask
    error = np.abs(fit.probs - truth)[held_out].mean()
    baseline = np.abs(Y[mask].mean() - truth)[held_out].mean()
    assert error < 0.35 * baseline, (error, baseline)
    assert fit.perplexity(Y, held_out) < bernmf.perplexity(Y, truth, held_out) + 0.03


def test_invalid_options_are_rejected_before_compiling(simulated):
    Y, mask, _, _ = simulated
    with pytest.raises(ValueError, match="num_samples"):
        bernmf.fit(Y, "gibbs", rank=2, num_samples=0)
    with pytest.raises(ValueError, match="thinning"):
        bernmf.fit(Y, "gibbs", rank=2, thinning=1.5)
    with pytest.raises(ValueError, match="variant"):
        bernmf.fit(Y, "vb", rank=2, variant="ep")
    with pytest.raises(ValueError, match="max_iter"):
        bernmf.fit(Y, "vb", rank=2, max_iter=0)
    with pytest.raises(ValueError, match="num_draws"):
        bernmf.fit(Y, "vb", rank=2, num_draws=0)
    with pytest.raises(ValueError, match="init"):
        bernmf.fit(Y, "vb", rank=2, init=(np.ones((150, 2)) / 2, np.ones((2, 60)) / 2))
    with pytest.raises(ValueError, match="positive"):
        bernmf.fit(Y, "gibbs", rank=2, prior=Prior(gamma=0.0))
    # gamma below 1 is allowed
    fit = bernmf.fit(Y, "vb", rank=3, mask=mask, prior=Prior(gamma=0.05), max_iter=VB_ITER)
    np.testing.assert_allclose(fit.prior.gamma, 0.05)


@pytest.mark.slow
def test_lumbreras_reference_quick(tmp_path, capsys):
    """Smoke run of experiments/lumbreras_reference.py --quick."""
    import importlib.util
    from pathlib import Path

    from helpers import shared_file

    data_dir = shared_file("data", "animals.csv").parent
    script = Path(__file__).parents[1] / "experiments" / "lumbreras_reference.py"
    spec = importlib.util.spec_from_file_location("lumbreras_reference", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    argv = ["--quick", "--quiet", "--data-dir", str(data_dir), "--out", str(tmp_path)]
    assert module.main(argv) == 0
    assert "wall time" in capsys.readouterr().out
    for name in ("fits.csv", "summary.csv", "test_perplexity.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    fits = pd.read_csv(tmp_path / "fits.csv")
    assert set(fits["method"]) == {"gibbs", "cvb0", "meanfield"} and len(fits) == 3
    assert fits["test_perplexity"].between(0.3, 0.7).all()
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert {"r_low", "r_high", "within_r_range_pm_0.005"} <= set(summary.columns)
