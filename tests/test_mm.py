"""The mm and em engines against plain-numpy references and their invariants."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers import examples, mm_cases, random_problem
from hypothesis import HealthCheck, given, settings

import bernmf
from bernmf.inference._compile import cache_size


def numpy_mm_step(Y, O, W, H, alpha, beta, gamma):
    """One MM sweep written from the equations in DESIGN.md, in plain numpy."""
    K = W.shape[1]
    alpha, beta = np.broadcast_to(alpha, (K,))[:, None], np.broadcast_to(beta, (K,))[:, None]
    gamma = np.broadcast_to(gamma, (K,))
    Yh, Yh0 = W @ H, W @ (1 - H)
    C = H * (W.T @ (O * Y / Yh)) + (alpha - 1)
    D = (1 - H) * (W.T @ (O * (1 - Y) / Yh0)) + (beta - 1)
    H = np.where(C + D > 0, C / np.where(C + D > 0, C + D, 1), H)
    Yh, Yh0 = W @ H, W @ (1 - H)
    S = W * ((O * Y / Yh) @ H.T + (O * (1 - Y) / Yh0) @ (1 - H).T)
    denominator = O.sum(axis=1)[:, None] + np.sum(gamma - 1)
    W = np.where(denominator > 0, (S + gamma - 1) / np.where(denominator > 0, denominator, 1), W)
    return W, H


def numpy_objective(Y, O, W, H, alpha, beta, gamma):
    """The MM objective (negative unnormalized log-posterior) in plain numpy."""
    K = W.shape[1]
    alpha, beta = np.broadcast_to(alpha, (K,))[:, None], np.broadcast_to(beta, (K,))[:, None]
    with np.errstate(divide="ignore"):
        log_lik = np.sum(O * np.where(Y == 1, np.log(W @ H), np.log(W @ (1 - H))))
        log_prior = np.sum((alpha - 1) * np.log(H) + (beta - 1) * np.log(1 - H))
        log_prior += np.sum((np.broadcast_to(gamma, (K,)) - 1) * np.log(W))
    return -(log_lik + log_prior)


def numpy_em_ecm(Y, O, W, H, n_iter):
    """EM for the aspect Bernoulli model (Bingham et al. 2009) through explicit responsibilities.

    q[m, n, k] = P(z_mn = k | y_mn) is recomputed before each M-step (H, then W),
    which is the order in which MM updates them.
    """
    for _ in range(n_iter):
        for block in ("H", "W"):
            on = np.where(Y[:, :, None] == 1, H.T[None], 1 - H.T[None]) * W[:, None, :]
            q = O[:, :, None] * on / on.sum(axis=2, keepdims=True)
            if block == "H":
                H = (q * Y[:, :, None]).sum(axis=0).T / q.sum(axis=0).T
            else:
                W = q.sum(axis=1) / O.sum(axis=1, keepdims=True)
    return W, H


def test_mm_matches_numpy_reference_for_50_iterations():
    Y, O, W0, H0 = random_problem(0, 30, 20, 4)
    O[3] = False  # an empty row (gamma > 1: W goes to the prior mode)
    alpha, beta, gamma = np.array([1.0, 1.3, 2.0, 1.1]), np.array([1.5, 1.0, 1.2, 3.0]), 1.4
    prior = bernmf.Prior(alpha, beta, gamma)
    with pytest.warns(UserWarning, match="1 row"):
        result = bernmf.fit(
            Y, "mm", 4, mask=O, prior=prior, init=(W0, H0), max_iter=50, tol=0, accelerate=False
        )
    W, H = W0, H0
    expected_trace = [numpy_objective(Y, O, W, H, alpha, beta, gamma)]
    for _ in range(50):
        W, H = numpy_mm_step(Y, O, W, H, alpha, beta, gamma)
        expected_trace.append(numpy_objective(Y, O, W, H, alpha, beta, gamma))
    assert result.n_iter == 50 and not result.converged
    np.testing.assert_allclose(result.trace, expected_trace, rtol=1e-10)
    np.testing.assert_allclose(result.W, W, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(result.H, H, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(result.W[3], 1 / 4, rtol=1e-12)


def test_em_is_mm_at_the_flat_prior_and_equals_responsibility_em():
    Y, O, W0, H0 = random_problem(1, 25, 15, 3)
    plain = {"init": (W0, H0), "max_iter": 50, "tol": 0, "accelerate": False}
    em = bernmf.fit(Y, "em", 3, mask=O, **plain)
    mm_flat = bernmf.fit(Y, "mm", 3, mask=O, prior=bernmf.Prior.flat(), **plain)
    np.testing.assert_array_equal(em.W, mm_flat.W)
    np.testing.assert_array_equal(em.trace, mm_flat.trace)
    W, H = numpy_em_ecm(Y, O, W0, H0, 50)
    np.testing.assert_allclose(em.W, W, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(em.H, H, rtol=1e-10, atol=1e-14)
    assert em.engine == "em" and em.prior is None


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mm_cases())
def test_objective_never_increases(case):
    Y, O, K, prior, seed = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = bernmf.fit(
            Y, "mm", K, mask=O, prior=prior, seed=seed % 1000, max_iter=30, tol=0, accelerate=False
        )
    trace = result.trace
    assert np.all(np.isfinite(trace))
    assert np.all(np.diff(trace) <= 1e-10 * np.maximum(1.0, np.abs(trace[:-1])))
    assert np.allclose(result.W.sum(axis=1), 1, atol=1e-12)
    assert np.all((result.H >= 0) & (result.H <= 1))


@pytest.mark.slow
def test_constraints_hold_after_2000_iterations_on_a_paleo_sized_problem():
    Y, _, _ = bernmf.simulate(3, 253, 902, 8, bernmf.Prior(0.2, 2.0, 0.5))
    result = bernmf.fit(
        Y, "mm", 8, prior=bernmf.Prior(1.1, 1.5), max_iter=2000, tol=0, accelerate=False
    )
    assert result.n_iter == 2000
    np.testing.assert_allclose(result.W.sum(axis=1), 1, atol=1e-12, rtol=0)
    assert result.W.min() >= 0 and result.H.min() >= 0 and result.H.max() <= 1


@pytest.mark.parametrize(
    "layout", [{"layout": "dense"}, {"layout": "sparse"}, {"block_rows": 7, "layout": "dense"}]
)
def test_entries_outside_the_mask_change_nothing_in_every_layout(layout):
    # the contract suite checks the default layout; the others read the data otherwise
    Y, O, _, _ = random_problem(2, 40, 30, 3)
    flipped = np.where(O, Y, 1 - Y)
    with_nan = np.where(O, Y, np.nan)
    options = {"prior": bernmf.Prior(1.2, 1.5), **layout}
    fits = [bernmf.fit(y, "mm", 3, mask=O, **options) for y in (Y, flipped)]
    fits.append(bernmf.fit(with_nan, "mm", 3, **options))
    for other in fits[1:]:
        np.testing.assert_array_equal(other.W, fits[0].W)
        np.testing.assert_array_equal(other.H, fits[0].H)
        np.testing.assert_array_equal(other.trace, fits[0].trace)


def test_another_prior_or_other_data_of_the_same_shape_compile_nothing():
    Y, O, _, _ = random_problem(4, 33, 21, 3)
    bernmf.fit(Y, "mm", 3, mask=O, seed=7)
    size = cache_size()
    other = bernmf.fit(1 - Y, "mm", 3, mask=~O, seed=8, prior=bernmf.Prior(2.0, 1.5))
    assert cache_size() == size and other.timings["compile"] == 0.0


def test_float32_runs_stay_finite_and_close_to_float64():
    Y, _, _ = bernmf.simulate(5, 120, 80, 4, bernmf.Prior(0.5, 1.0, 1.0))
    _, _, W0, H0 = random_problem(5, 120, 80, 4)
    options = {"prior": bernmf.Prior(1.2, 1.2), "init": (W0, H0), "max_iter": 100, "tol": 0}
    options["accelerate"] = False  # the same sweeps (accelerated: test_squarem.py)
    single = bernmf.fit(Y, "mm", 4, dtype="float32", **options)
    double = bernmf.fit(Y, "mm", 4, **options)
    assert np.all(np.isfinite(single.trace)) and np.all(np.isfinite(single.W))
    assert np.all(np.diff(single.trace) <= 1e-5 * np.abs(single.trace[:-1]))
    np.testing.assert_allclose(single.trace, double.trace, rtol=1e-4)
    np.testing.assert_allclose(single.probs, double.probs, atol=1e-3)


def test_stopping_rule_and_convergence_flag():
    Y, _, _ = bernmf.simulate(6, 60, 40, 3)
    result = bernmf.fit(Y, "mm", 3, tol=1e-5, dtype="float64")  # one phase (auto: two)
    assert result.converged and result.n_iter < 2000
    last, before = result.trace[-1], result.trace[-2]
    assert abs(before - last) / abs(before) < 1e-5
    assert np.all(np.abs(np.diff(result.trace[:-1])) / np.abs(result.trace[:-2]) >= 1e-5)
    assert len(result.trace) == result.n_iter + 1


def test_empty_rows_and_columns_do_not_produce_nan():
    Y, O, W0, H0 = random_problem(7, 12, 10, 3)
    O[2], O[:, 5] = False, False
    with pytest.warns(UserWarning, match=r"1 row\(s\) and 1 column\(s\)") as caught:
        flat = bernmf.fit(
            Y, "mm", 3, mask=O, prior=bernmf.Prior.flat(), init=(W0, H0), max_iter=100
        )
    assert len(caught) == 1
    np.testing.assert_allclose(flat.W[2], W0[2])  # kept under the flat prior
    np.testing.assert_allclose(flat.H[:, 5], H0[:, 5])
    with pytest.warns(UserWarning):
        mode = bernmf.fit(Y, "mm", 3, mask=O, prior=bernmf.Prior(3.0, 2.0, 2.0), max_iter=100)
    np.testing.assert_allclose(mode.W[2], 1 / 3)
    np.testing.assert_allclose(mode.H[:, 5], (3 - 1) / (3 + 2 - 2))
    assert np.all(np.isfinite(flat.probs)) and np.all(np.isfinite(mode.probs))


@pytest.mark.slow
def test_mm_recovers_simulated_truth():
    truth_prior = bernmf.Prior(0.3, 0.6, 0.5)
    Y, W, H = bernmf.simulate(8, 600, 300, 3, truth_prior)
    train = np.random.default_rng(8).random(Y.shape) >= 0.2
    fitted = bernmf.fit(Y, "mm", 3, mask=train, prior=bernmf.Prior(1.1, 1.1))
    oracle = bernmf.perplexity(Y, W @ H, ~train)
    assert fitted.perplexity(Y, ~train) < oracle + 0.01
    assert fitted.perplexity(Y, ~train) < bernmf.fit(Y, "mm", 1, mask=train).perplexity(Y, ~train)
    # the probabilities, which are identifiable, are recovered
    assert np.sqrt(np.mean((fitted.probs - W @ H) ** 2)) < 0.06


def test_animals_heldout_perplexity_on_the_papers_split(animals, animals_split):
    train, test = animals_split == 2, animals_split == 0
    prior = bernmf.Prior(alpha=1.2, beta=2.0)
    scores = [
        bernmf.fit(animals, "mm", 4, mask=train, prior=prior, seed=seed).perplexity(animals, test)
        for seed in range(10)
    ]
    assert 0.43 <= np.median(scores) <= 0.47
    assert max(scores) < 0.50


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_starts_drawn_on_the_host_are_the_compiled_draws_bit_for_bit(dtype):
    # a single fit draws its start in numpy (mm.starts: no generator for XLA to lower);
    # batches draw it in their program (kernel.random_init): the same bits either way
    import jax

    from bernmf.inference.mm import kernel, starts
    from bernmf.models.spec import Factors

    with jax.enable_x64(True):
        for seed, (M, N, K) in [(0, (3, 2, 1)), (7, (13, 11, 4)), (2**32 - 1, (40, 9, 3))]:
            draws = starts.uniform_draws(seed, M, N, K, dtype)
            assert all(d.dtype == dtype for d in draws)
            host = jax.jit(kernel.normalized)(Factors(*draws))
            compiled = jax.jit(kernel.random_init, static_argnums=(1, 2, 3, 4))(
                jax.random.key(np.uint32(seed)), M, N, K, dtype
            )
            for a, b in zip(host, compiled, strict=True):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_fit_is_the_same_with_its_start_drawn_in_the_program(monkeypatch):
    # where JAX's generator is not the one mm.starts reproduces, the program draws it
    from bernmf.inference.mm import starts

    Y, O, _, _ = random_problem(5, 10, 8, 2)
    options = {"mask": O, "seed": 11, "max_iter": 5, "tol": 0, "accelerate": False}
    host = bernmf.fit(Y, "mm", 2, **options)
    monkeypatch.setattr(starts, "available", lambda: False)
    drawn = bernmf.fit(Y, "mm", 2, **options)
    np.testing.assert_array_equal(host.W, drawn.W)
    np.testing.assert_array_equal(host.H, drawn.H)
