"""Engines logsvd and logpca: agreement with R logisticPCA, monotonicity, their results.

The contract every engine keeps (the mask, seeds, options, priors, labels, saving) is
checked in test_engines.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from helpers import examples, shared_file
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import expit

import bernmf
from bernmf.data.observed import as_observed
from bernmf.inference import logpca, logsvd
from bernmf.inference._logistic import (
    LogisticData,
    Operator,
    _orthonormal_complement,
    leading_eigenvectors,
)
from bernmf.inference.logpca import transform
from bernmf.inference.logsvd import _exact_factors, _gram_factors

# --- agreement with R logisticPCA 0.2.9000 on animals (train entries observed) ---------------


def r_trace(name: str) -> np.ndarray:
    return pd.read_csv(shared_file("reference", name))["mean_nll"].to_numpy()


def r_matrix(name: str) -> np.ndarray:
    return pd.read_csv(shared_file("reference", name)).to_numpy(dtype=float)


@pytest.fixture(scope="module")
def train(animals, animals_split):
    return animals, animals_split == 2


@pytest.fixture(scope="module", params=[2, 4])
def logsvd_fit(request, train):
    """R's iterates: svd="exact" (the default, "subspace", is tested against R below)."""
    Y, mask = train
    return request.param, bernmf.fit(Y, "logsvd", rank=request.param, mask=mask, svd="exact")


@pytest.fixture(scope="module", params=[2, 4])
def logpca_fit(request, train):
    Y, mask = train
    return request.param, bernmf.fit(Y, "logpca", rank=request.param, mask=mask, m=4)


def test_logsvd_matches_r(logsvd_fit):
    k, fit = logsvd_fit
    trace = r_trace(f"logsvd_animals_k{k}_trace.csv")
    assert fit.n_iter == len(trace) - 1
    assert fit.trace.shape == trace.shape
    np.testing.assert_allclose(fit.trace, trace, rtol=0, atol=1e-8)
    probs = r_matrix(f"logsvd_animals_k{k}_probs.csv")
    assert np.abs(fit.probs - probs).max() < 1e-6
    mu = r_matrix(f"logsvd_animals_k{k}_mu.csv")[:, 0]
    np.testing.assert_allclose(fit.extras["mu"], mu, rtol=0, atol=1e-6)
    assert fit.converged


def test_logsvd_default_subspace_reaches_rs_fixed_point(train):
    """The default svd="subspace" takes other iterates than R but stops where R does: the
    same iterations, final loss and probabilities (animals, K = 2)."""
    Y, mask = train
    fit = bernmf.fit(Y, "logsvd", rank=2, mask=mask)
    assert logsvd.OPTIONS["svd"] == "subspace"
    trace = r_trace("logsvd_animals_k2_trace.csv")
    assert fit.n_iter == len(trace) - 1
    assert fit.trace[-1] == pytest.approx(trace[-1], rel=1e-4)
    assert not np.allclose(fit.trace, trace, rtol=0, atol=1e-8)  # not R's iterates
    assert np.abs(fit.probs - r_matrix("logsvd_animals_k2_probs.csv")).max() < 0.01
    assert np.all(np.diff(fit.trace) <= 0)  # monotone


@pytest.mark.slow
def test_logpca_matches_r(logpca_fit):
    k, fit = logpca_fit
    trace = r_trace(f"logpca_animals_k{k}_m4_trace.csv")
    assert fit.n_iter == len(trace) - 1
    np.testing.assert_allclose(fit.trace, trace, rtol=0, atol=1e-8)
    probs = r_matrix(f"logpca_animals_k{k}_m4_probs.csv")
    assert np.abs(fit.probs - probs).max() < 1e-6
    assert fit.extras["m"] == 4.0


def test_logsvd_factors_give_the_natural_parameters(logsvd_fit):
    k, fit = logsvd_fit
    assert fit.W.shape == (50, k) and fit.H.shape == (k, 85)
    np.testing.assert_allclose(fit.H @ fit.H.T, np.eye(k), atol=1e-10)
    theta = fit.extras["mu"] + fit.W @ fit.H
    np.testing.assert_allclose(expit(theta), fit.probs, rtol=0, atol=1e-14)
    assert fit.prior is None and fit.engine == "logsvd"


@pytest.mark.slow
def test_logpca_factors_and_transform(logpca_fit, train):
    k, fit = logpca_fit
    Y, mask = train
    U = fit.extras["U"]
    np.testing.assert_allclose(U.T @ U, np.eye(k), atol=1e-10)
    np.testing.assert_allclose(fit.H, U.T)
    theta = fit.extras["mu"] + fit.W @ fit.H
    np.testing.assert_allclose(expit(theta), fit.probs, rtol=0, atol=1e-14)
    # projecting the training rows, with the training mask, gives back the fit
    projection = transform(fit, Y, mask)
    np.testing.assert_allclose(projection.scores, fit.W, atol=1e-10)
    np.testing.assert_allclose(projection.probs, fit.probs, atol=1e-12)
    # new rows are scored row by row, without refitting: a subset gives the same rows
    rows = slice(5, 12)
    part = transform(fit, Y.to_numpy()[rows], mask[rows])
    np.testing.assert_allclose(part.probs, projection.probs[rows], atol=1e-12)
    # NaN is missing, like mask=False
    Y_nan = Y.to_numpy(dtype=float).copy()
    Y_nan[~mask] = np.nan
    np.testing.assert_allclose(transform(fit, Y_nan).probs, projection.probs, atol=1e-12)
    with pytest.raises(ValueError, match="columns"):
        transform(fit, Y.to_numpy()[:, :10])


def test_transform_needs_a_logpca_fit(logsvd_fit, train):
    Y, mask = train
    with pytest.raises(ValueError, match="logpca"):
        transform(logsvd_fit[1], Y, mask)


# --- the loss never increases (random data and masks, few shapes so programs are reused) -----
# The hypothesis tests are derandomized: each run draws the same examples, so CI is never
# flaky; the properties themselves were checked on 5000 random examples each.

SHAPE, RANK, MAX_ITER = (12, 9), 2, 40


def random_problem(seed: int, observed: float):
    rng = np.random.default_rng(seed)
    Y = (rng.random(SHAPE) < rng.random(SHAPE[1])).astype(float)
    mask = rng.random(SHAPE) < observed
    mask[0, 0] = True
    return Y, mask


def assert_non_increasing(trace):
    assert np.all(np.isfinite(trace))
    assert np.all(np.diff(trace) <= 1e-12), np.diff(trace).max()


@pytest.mark.filterwarnings("ignore:.*no observed entry")
@settings(max_examples=examples(20), deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**32 - 1),
    observed=st.floats(0.3, 1.0),
    svd=st.sampled_from(["exact", "subspace"]),
)
def test_logsvd_loss_never_increases(seed, observed, svd):
    # a majorization-minimization algorithm, missing entries included (Z = Theta there
    # majorizes them by (Theta_new - Theta)^2): exact steps minimize the majorizer, and
    # subspace steps decrease it because their span contains the previous loadings
    Y, mask = random_problem(seed, observed)
    fit = bernmf.fit(Y, "logsvd", rank=RANK, mask=mask, max_iter=MAX_ITER, svd=svd, tol=0.0)
    assert_non_increasing(fit.trace)
    assert fit.n_iter == len(fit.trace) - 1 <= MAX_ITER


@settings(max_examples=examples(20), deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), m=st.floats(0.5, 12.0))
def test_logpca_loss_never_increases_without_missing_entries(seed, m):
    # without missing entries eta = m q does not depend on mu, so the updates of mu and
    # of U each minimize the majorizer (the next test shows why missing entries differ)
    Y, _ = random_problem(seed, 1.0)
    fit = bernmf.fit(Y, "logpca", rank=RANK, m=m, max_iter=MAX_ITER, tol=0.0)
    assert_non_increasing(fit.trace)


@pytest.mark.filterwarnings("ignore:.*no observed entry")
@settings(max_examples=examples(20), deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), observed=st.floats(0.3, 1.0), m=st.floats(0.5, 12.0))
def test_logpca_with_missing_entries_keeps_no_final_increase(seed, observed, m):
    # R's update of mu holds eta fixed although eta depends on mu at missing entries, so
    # with missing entries a step can raise the loss (see the next test): monotonicity
    # is NOT a property here. What holds is the stopping rule's: from iteration 5 on,
    # any step that fails to decrease the loss by tol ends the run, and a final rise
    # above 1e-10 is reverted. So the kept last step is either a decrease of at least
    # tol or a change of at most 1e-10 (steps before iteration 5 may rise; with
    # n_iter < 5 there is nothing to check).
    Y, mask = random_problem(seed, observed)
    fit = bernmf.fit(Y, "logpca", rank=RANK, mask=mask, m=m, max_iter=MAX_ITER, tol=1e-5)
    assert np.all(np.isfinite(fit.trace))
    if fit.n_iter >= 5:
        assert fit.trace[-1] - fit.trace[-2] <= 1e-10, (fit.n_iter, np.diff(fit.trace))


def test_logpca_with_missing_entries_is_not_monotone():
    # documents a property of R's algorithm, which the engine reproduces: found by the
    # hypothesis search above (the first step raises the loss by about 1e-3)
    Y, mask = random_problem(152, 0.40625)
    fit = bernmf.fit(Y, "logpca", rank=RANK, mask=mask, m=6.0, max_iter=MAX_ITER, tol=0.0)
    assert fit.trace[1] - fit.trace[0] > 1e-4
    assert np.all(np.diff(fit.trace[1:]) < 0)


# --- the exact truncated SVD -----------------------------------------------------------------


@pytest.mark.parametrize("shape", [(40, 15), (15, 40)])
@pytest.mark.parametrize("start", ["near", "random", "fallback"])
def test_exact_factors_are_the_truncated_svd(shape, start, monkeypatch):
    # both Gram orientations; refinement from a good or a random start, or none at all
    # (the Gram fallback): always the rank-3 truncated SVD, B orthonormal
    if start == "fallback":
        monkeypatch.setattr(logsvd, "MAX_REFINEMENTS", 0)
    rng = np.random.default_rng(5)
    X = rng.standard_normal(shape) @ np.diag(0.7 ** np.arange(shape[1]))
    X -= X.mean(axis=0)
    u, d, vt = np.linalg.svd(X, full_matrices=False)
    best = (u[:, :3] * d[:3]) @ vt[:3]
    B0 = vt[:3].T + (1e-3 if start == "near" else 10.0) * rng.standard_normal((shape[1], 3))
    with jax.enable_x64(True):
        centred = jnp.asarray(X)
        B0 = jnp.linalg.qr(jnp.asarray(B0))[0]
        for A, B in (_gram_factors(centred, 3), _exact_factors(centred, B0)):
            A, B = np.asarray(A), np.asarray(B)
            np.testing.assert_allclose(A @ B.T, best, rtol=0, atol=1e-12 * d[0])
            np.testing.assert_allclose(B.T @ B, np.eye(3), atol=1e-12)


# --- the leading eigenvectors, warm-started (logpca's T, logsvd's Gram) ----------------------


def symmetric(values, seed=0):
    """A symmetric matrix with these eigenvalues, and its eigenvectors (columns, same order)."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((len(values), len(values))))
    return (Q * values) @ Q.T, Q


def dense(G) -> Operator:
    """G as an Operator with F = I and S = G."""
    G = jnp.asarray(G)
    return Operator(lambda V: V, lambda V: G @ V, lambda V, W: V.T @ G @ W)


def subspace_distance(U, V):
    """||U U^T - V V^T||_2: the sine of the largest angle between span(U) and span(V)."""
    return np.linalg.norm(U @ U.T - V @ V.T, 2)


@pytest.mark.parametrize("start", ["near", "random"])
def test_leading_eigenvectors_of_an_indefinite_matrix(start):
    # largest algebraic eigenvalues, though the spectrum's negative end is larger in
    # magnitude; and their products
    values = np.concatenate([[50.0, 40, 30], np.linspace(20, -100, 37)])
    G, Q = symmetric(values)
    rng = np.random.default_rng(1)
    U0 = Q[:, :3] + (1e-3 if start == "near" else 10.0) * rng.standard_normal((40, 3))
    with jax.enable_x64(True):
        found = leading_eigenvectors(
            dense(G),
            jnp.linalg.qr(jnp.asarray(U0))[0],
            depth=3,
            restarts=50,
            tol=1e-10,
            floor=0.0,
            min_gap=1e-4,
        )
    U = np.asarray(found.vectors)
    assert bool(found.converged)
    assert subspace_distance(U, Q[:, :3]) < 1e-9
    np.testing.assert_allclose(U.T @ U, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(np.asarray(found.values)[:3], values[:3], rtol=1e-12)
    np.testing.assert_allclose(found.products, G @ U, atol=1e-11)
    np.testing.assert_array_equal(found.factor, U)


@pytest.mark.parametrize("gap", [0.0, 1e-7])
def test_leading_eigenvectors_give_up_on_a_degenerate_gap(gap):
    # lambda_K = lambda_K+1 (or nearly): the leading subspace is not defined (or not to
    # rounding level), so the result is flagged and the caller solves exactly
    values = np.concatenate([[50.0, 40, 30, 30 - 30 * gap], np.linspace(20, -100, 36)])
    G, Q = symmetric(values)
    with jax.enable_x64(True):
        found = leading_eigenvectors(
            dense(G),
            jnp.linalg.qr(jnp.asarray(Q[:, :3] + 1e-3 * Q[:, 3:6]))[0],
            depth=3,
            restarts=50,
            tol=1e-10,
            floor=0.0,
            min_gap=1e-4,
        )
    assert not bool(found.converged)


DECOMPOSITIONS = {"qr", "householder_product", "eigh", "svd", "cholesky", "lu", "triangular_solve"}


def decomposed_shapes(jaxpr) -> list[tuple[int, ...]]:
    """The operands' shapes of the matrix decompositions in a jaxpr, inner jaxprs included."""
    shapes = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in DECOMPOSITIONS:
            shapes += [var.aval.shape for var in eqn.invars]
        for param in eqn.params.values():
            for inner in param if isinstance(param, tuple | list) else [param]:
                inner = getattr(inner, "jaxpr", inner)
                if hasattr(inner, "eqns"):
                    shapes += decomposed_shapes(inner)
    return shapes


@pytest.mark.parametrize(("depth", "restarts"), [(1, 1), (1, 25), (3, 20)])
def test_leading_eigenvectors_decompose_only_the_small_projections(depth, restarts):
    # no QR (or other decomposition) of an N-row basis, only of (depth + 1) K square
    # matrices: on CPU jax decomposes with scipy's OpenBLAS LAPACK, whose threads made the
    # Householder QR of an N x 2K basis cost a logsvd step on paleo (N = 902) 15 to 25
    # times more CPU at K = 6 and 8 than at K = 4
    N, K = 120, 8
    G, Q = symmetric(np.linspace(50, -10, N))
    with jax.enable_x64(True):
        jaxpr = jax.make_jaxpr(
            lambda U: leading_eigenvectors(
                dense(G), U, depth=depth, restarts=restarts, tol=1e-10, floor=0.0, min_gap=1e-4
            )
        )(jnp.asarray(Q[:, :K]))
    shapes = decomposed_shapes(jaxpr.jaxpr)
    assert shapes and max(max(shape) for shape in shapes) <= (depth + 1) * K


@pytest.mark.parametrize("case", ["random", "nearly in the basis", "dependent"])
def test_orthonormal_complement(case):
    # orthonormal columns orthogonal to the basis, spanning V's part outside it; where V
    # is in span(basis) to rounding level (a converged Krylov block) they span its rounding
    # errors, still orthonormal; a direction of V that repeats another gives a zero column
    rng = np.random.default_rng(3)
    basis = np.linalg.qr(rng.standard_normal((50, 4)))[0]
    V = rng.standard_normal((50, 4))
    if case == "nearly in the basis":
        V = basis @ rng.standard_normal((4, 4)) + 1e-13 * V
    if case == "dependent":
        V[:, 3] = V[:, 0] + V[:, 1]
    with jax.enable_x64(True):
        found = np.asarray(_orthonormal_complement(jnp.asarray(V), jnp.asarray(basis)))
    kept = 3 if case == "dependent" else 4
    norms = np.linalg.norm(found, axis=0)
    np.testing.assert_allclose(np.sort(norms), [0.0] * (4 - kept) + [1.0] * kept, atol=1e-14)
    np.testing.assert_allclose(found.T @ found, np.diag(norms**2), atol=1e-14)
    np.testing.assert_allclose(basis.T @ found, 0.0, atol=1e-14)
    if case != "nearly in the basis":  # the span of [basis, V] is that of [basis, found]
        rest = V - basis @ (basis.T @ V)
        np.testing.assert_allclose(found @ (found.T @ rest), rest, atol=1e-13)


def logpca_eigenvectors(Z, eta, mu, U, exact):
    with jax.enable_x64(True):
        args = (jnp.asarray(x, jnp.float64) for x in (Z, eta, mu, U))
        return tuple(map(np.asarray, logpca._leading_eigenvectors(*args, exact=exact)))


def test_logpca_eigenvectors_match_the_full_decomposition():
    # T applied without being formed, on Z, eta, mu of a rank-3 signal plus noise (as data
    # give), from the signal's singular vectors: the same leading subspace and scores
    # (eta - mu) U as R's full eigendecomposition of T, though not bit for bit (so the
    # warm path, not the fallback, ran)
    rng = np.random.default_rng(2)
    signal = (rng.standard_normal((30, 3)) * [6.0, 5, 4]) @ rng.standard_normal((3, 20))
    A = signal + rng.standard_normal((30, 20))
    mu = rng.random(20)
    eta, Z = A + mu, A + mu + rng.standard_normal((30, 20))
    start = np.linalg.svd(A)[2][:3].T
    exact, exact_scores = logpca_eigenvectors(Z, eta, mu, start, exact=True)
    warm, warm_scores = logpca_eigenvectors(Z, eta, mu, start, exact=False)
    assert subspace_distance(warm, exact) < 1e-12
    np.testing.assert_allclose(warm_scores @ warm.T, exact_scores @ exact.T, atol=1e-10)
    np.testing.assert_allclose(warm_scores, (eta - mu) @ warm, atol=1e-12)
    assert not np.array_equal(warm @ warm.T, exact @ exact.T)


def test_logpca_eigenvectors_fall_back_when_the_kth_eigenvalue_is_tied():
    # with mu = 0 and eta = I, T = Z + Z^T - I; Z chosen so that T has lambda_3 = lambda_4:
    # the exact solver's result, bit for bit, whatever the start
    values = np.concatenate([[50.0, 40, 30, 30], np.linspace(20, -100, 36)])
    T, Q = symmetric(values)
    Z, eta, mu = (T + np.eye(40)) / 2, np.eye(40), np.zeros(40)
    start = np.linalg.qr(Q[:, :3] + 1e-3 * Q[:, 3:6])[0]
    exact = logpca_eigenvectors(Z, eta, mu, start, exact=True)
    warm = logpca_eigenvectors(Z, eta, mu, start, exact=False)
    for a, b in zip(warm, exact, strict=True):
        np.testing.assert_array_equal(a, b)


def test_logpca_fit_reaches_the_exact_solvers_fixed_point():
    # whole fits with missing entries: the warm-started eigensolver stops at the same
    # iteration as R's full decomposition, at the same loss and probabilities
    rng = np.random.default_rng(4)
    Y = (rng.random((40, 60)) < rng.random(60)).astype(float)
    mask = rng.random((40, 60)) < 0.85
    with jax.enable_x64(True):
        layout = LogisticData.of(as_observed(Y, mask))
        m, tol = jnp.asarray(4.0), jnp.asarray(1e-5)
        ends = [
            logpca.solve(layout, m, tol, rank=4, max_iter=200, exact=exact)
            for exact in (True, False)
        ]
    (exact, warm) = ends
    assert int(warm.n_iter) == int(exact.n_iter) > 5
    n = int(exact.n_iter)
    np.testing.assert_allclose(warm.trace[: n + 1], exact.trace[: n + 1], rtol=1e-10)
    np.testing.assert_allclose(warm.state.theta, exact.state.theta, atol=1e-7)


# --- the results -----------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["logsvd", "logpca"])
def test_fit_result(engine):
    """probs strictly inside (0, 1), mu per column, the trace the mean NLL of the fit
    (shapes, ranges and the rest of the contract: test_engines.py)."""
    Y, mask = random_problem(3, 0.8)
    fit = bernmf.fit(Y, engine, rank=RANK, mask=mask, max_iter=MAX_ITER)
    assert np.all((fit.probs > 0) & (fit.probs < 1))
    assert fit.extras["mu"].shape == (SHAPE[1],)
    # the trace is the mean negative log-likelihood of the observed entries
    assert fit.trace[-1] == pytest.approx(fit.perplexity(Y, mask), abs=1e-12)


def test_logpca_chooses_m_by_validation():
    Y, mask = random_problem(11, 0.9)
    grid = (1.0, 3.0, 6.0)
    fit = bernmf.fit(Y, "logpca", rank=RANK, mask=mask, m=None, m_grid=grid, max_iter=MAX_ITER)
    scores = fit.extras["m_scores"]
    assert set(scores) == set(grid)
    assert fit.extras["m"] == min(grid, key=scores.get)
    assert {"select_m_compile", "select_m_run", "compile", "run"} <= set(fit.timings)
    again = bernmf.fit(Y, "logpca", rank=RANK, mask=mask, m=None, m_grid=grid, max_iter=MAX_ITER)
    assert again.extras["m_scores"] == scores  # the split depends on the seed only


@pytest.mark.parametrize(
    ("engine", "options", "error", "match"),
    [
        ("logsvd", {"max_iter": 0}, ValueError, "max_iter"),
        ("logsvd", {"max_iter": 2.5}, ValueError, "max_iter"),
        ("logsvd", {"tol": -1.0}, ValueError, "tol"),
        ("logsvd", {"tol": float("nan")}, ValueError, "tol"),
        ("logsvd", {"svd": "randomized"}, ValueError, "svd"),
        ("logsvd", {"rank": 10}, ValueError, "rank"),
        ("logsvd", {"init": (np.zeros((12, 2)), np.zeros((2, 9)))}, ValueError, "init"),
        ("logpca", {"m": 0}, ValueError, "m must"),
        ("logpca", {"m": -2.0}, ValueError, "m must"),
        ("logpca", {"m": "4"}, TypeError, "m must be a number"),
        ("logpca", {"m": None, "m_grid": ()}, ValueError, "m_grid"),
        ("logpca", {"m": None, "m_grid": (2.0, -1.0)}, ValueError, "m_grid"),
        ("logpca", {"m": None, "validation_fraction": 1.5}, ValueError, "validation_fraction"),
    ],
)
def test_bad_options_are_errors(engine, options, error, match):
    Y, _ = random_problem(0, 1.0)
    options = {"rank": RANK, **options}
    with pytest.raises(error, match=match):
        bernmf.fit(Y, engine, **options)
