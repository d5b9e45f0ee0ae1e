"""The batched MM solver and the validation grid search."""

from __future__ import annotations

import io
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bernmf
from bernmf import tune
from bernmf.data import as_observed
from bernmf.inference import mm
from bernmf.inference import mm_batched as batched
from bernmf.inference._compile import cache_size
from bernmf.split import random_split


def small_problem(seed=0, M=30, N=20, K=3, empty_row=False):
    Y, _, _ = bernmf.simulate(seed, M, N, K)
    split = random_split(Y.shape, seed=seed)
    train = split.train.copy()
    if empty_row:
        train[0] = False
    return np.asarray(Y, float), split._replace(train=train)


def numpy_published_sweep(Y, O, W, H, alpha, beta):
    """One sweep of the published code, written from its description (held-out as zeros in
    the H update, W divided by N) in plain numpy; P(Y=0) is 1 - W @ H."""
    Y1 = O * Y
    P = W @ H
    C = H * (W.T @ (Y1 / P)) + (alpha - 1)
    D = (1 - H) * (W.T @ ((1 - Y1) / (1 - P))) + (beta - 1)
    H = C / (C + D)
    P = W @ H
    S = W * ((Y1 / P) @ H.T + (O * (1 - Y) / (1 - P)) @ (1 - H).T)
    return S / Y.shape[1], H


@pytest.mark.parametrize(
    ("prior", "empty_row"), [((1.0, 1.0, 1.0), False), ((1.5, 2.5, 1.2), True)]
)
def test_batched_solver_equals_the_mm_engine(prior, empty_row):
    Y, split = small_problem(1, empty_row=empty_row)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the empty row
        data = as_observed(Y, split.train)
    M, N, K = *Y.shape, 3
    with jax.enable_x64(True):
        init = mm.random_init(jax.random.key(4), M, N, K, jnp.float64)
        arrays = bernmf.Prior(*(jnp.full(K, v) for v in prior))
        reference = mm.solve(
            init,
            mm.Problem(
                jnp.asarray(data.Y * data.mask),
                jnp.asarray((1 - data.Y) * data.mask),
                jnp.asarray(data.mask),
                jnp.asarray(data.mask.sum(1), jnp.float64),
            ),
            arrays,
            1e-6,
            max_iter=300,
        )
        problem = batched.make_problem(data.Y, data.mask, jnp.float64)
        ours = batched.solve(init, problem, arrays, 1e-6, max_iter=300)
    assert int(ours.n_iter) == int(reference.n_iter)
    np.testing.assert_allclose(ours.W, reference.W, atol=1e-10)
    np.testing.assert_allclose(ours.H, reference.H, atol=1e-10)
    np.testing.assert_allclose(ours.trace, reference.trace, rtol=1e-10)
    assert bool(ours.converged) == (float(reference.rel_change) < 1e-6)


def test_published_sweep_matches_its_description_and_its_defects():
    Y, split = small_problem(2)
    O = split.train.astype(float)
    data = as_observed(Y, split.train)
    rng = np.random.default_rng(0)
    W = rng.uniform(0.1, 1, (30, 3))
    W /= W.sum(1, keepdims=True)
    H = rng.uniform(0.1, 0.9, (3, 20))
    prior = bernmf.Prior(*(np.full(3, v) for v in (1.4, 2.0, 1.0)))
    with jax.enable_x64(True):
        problem = batched.make_problem(data.Y, data.mask, jnp.float64)
        arrays = bernmf.Prior(*(jnp.asarray(v) for v in prior))
        _, W_new, H_new = batched.sweep_as_published(
            problem, jnp.asarray(W), jnp.asarray(H), arrays
        )
        _, W_ok, _ = batched.sweep_correct(problem, jnp.asarray(W), jnp.asarray(H), arrays)
    W_ref, H_ref = numpy_published_sweep(Y, O, W, H, 1.4, 2.0)
    np.testing.assert_allclose(H_new, H_ref, rtol=1e-10)
    np.testing.assert_allclose(W_new, W_ref, rtol=1e-10)
    # defect 2: rows of W sum to (observed entries of the row) / N, not to one
    np.testing.assert_allclose(np.asarray(W_new).sum(1), O.sum(1) / 20, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(W_ok).sum(1), 1, rtol=1e-12)


def test_held_out_values_never_matter_but_the_published_code_counts_them_as_zeros():
    Y, split = small_problem(3)
    flipped = np.where(split.train, Y, 1 - Y)  # change every held-out entry
    results = {}
    for variant in batched.VARIANTS:
        for name, values in (("Y", Y), ("flipped", flipped)):
            batch = tune.fit_batch(
                as_observed(values, split.train),
                3,
                [bernmf.Prior(1.5, 1.5)],
                [0],
                max_iter=50,
                tol=0.0,
                variant=variant,
            )
            results[variant, name] = batch.H[0]
    for variant in batched.VARIANTS:
        np.testing.assert_array_equal(results[variant, "Y"], results[variant, "flipped"])
    assert np.abs(results["as_published", "Y"] - results["correct", "Y"]).max() > 1e-2


def test_as_published_stops_on_an_absolute_decrease_per_entry():
    Y, split = small_problem(4)
    batch = tune.fit_batch(
        as_observed(Y, split.train),
        3,
        [bernmf.Prior()],
        [0],
        max_iter=2000,
        tol=1e-5,
        variant="as_published",
    )
    trace = batch.traces[0, : batch.n_iter[0] + 1]
    decreases = -np.diff(trace)[1:]  # the first sweep is never compared (published loop)
    assert decreases[-1] < 1e-5 and (decreases[:-1] >= 1e-5).all()
    assert trace[-1] < 1  # per observed entry, not a sum


def test_grid_rows_equal_single_fits_and_table_is_tidy():
    Y, split = small_problem(5)
    stream = io.StringIO()
    result = tune.grid(
        Y,
        [2, 3],
        [1.0, 2.0],
        [1.0, 1.5, 3.0],
        mask=split.train,
        validation=split.validation,
        restarts=2,
        seed=7,
        max_iter=300,
        stream=stream,
    )
    table = result.table
    assert list(table.columns) == tune.COLUMNS
    assert len(table) == 2 * 2 * 3 * 2
    assert set(table["seed"]) == {7, 8}
    assert (table["iterations"] >= 1).all() and (table["seconds"] >= 0).all()
    best = table.loc[table["validation_perplexity"].idxmin()]
    assert result.best["validation_perplexity"] == best["validation_perplexity"]
    assert "rank 3: 12 fits" in stream.getvalue()
    row = table.query("rank == 3 and alpha == 2.0 and beta == 1.5 and seed == 8").iloc[0]
    single = bernmf.fit(
        Y, "mm", 3, mask=split.train, prior=bernmf.Prior(2.0, 1.5), seed=8, max_iter=300
    )
    assert single.n_iter == row["iterations"]
    assert single.perplexity(Y, split.validation) == pytest.approx(
        row["validation_perplexity"], rel=1e-9
    )
    assert len(result.mean_over_seeds()) == 2 * 2 * 3


def test_vmapped_batches_give_the_same_fits_and_nothing_recompiles():
    Y, split = small_problem(6)
    data = as_observed(Y, split.train)
    priors = [bernmf.Prior(a, b) for a in (1.0, 2.0) for b in (1.0, 2.5)]
    one_by_one = tune.fit_batch(data, 2, priors, [0, 1, 2, 3], max_iter=200, batch_size=1)
    vmapped = tune.fit_batch(data, 2, priors, [0, 1, 2, 3], max_iter=200, batch_size=4)
    np.testing.assert_array_equal(one_by_one.n_iter, vmapped.n_iter)
    np.testing.assert_allclose(one_by_one.W, vmapped.W, atol=1e-10)
    before = cache_size()
    again = tune.fit_batch(data, 2, priors[::-1], [3, 2, 1, 0], max_iter=200, batch_size=4)
    assert cache_size() == before and again.compile_seconds == 0.0
    np.testing.assert_allclose(again.W[::-1], vmapped.W, atol=1e-12)


@pytest.mark.filterwarnings("ignore:.*no observed entry:UserWarning")
def test_restarts_give_fits_like_bernmf_fit():
    Y, split = small_problem(7)
    fits = tune.restarts(Y, 2, bernmf.Prior(1.2, 1.8), [3, 5], mask=split.train, max_iter=300)
    single = bernmf.fit(
        Y, "mm", 2, mask=split.train, prior=bernmf.Prior(1.2, 1.8), seed=5, max_iter=300
    )
    assert [f.seed for f in fits] == [3, 5]
    np.testing.assert_allclose(fits[1].W, single.W, atol=1e-10)
    np.testing.assert_allclose(fits[1].trace, single.trace, rtol=1e-10)
    assert fits[1].perplexity(Y, split.test) == pytest.approx(single.perplexity(Y, split.test))


def test_progress_lines_on_long_grids(monkeypatch):
    monkeypatch.setattr(tune, "PROGRESS_EVERY", 0.0)
    Y, split = small_problem(8)
    stream = io.StringIO()
    data = as_observed(Y, split.train)
    priors = [bernmf.Prior()] * 3
    tune.fit_batch(data, 2, priors, [0, 1, 2], max_iter=20, progress="rank 2", stream=stream)
    lines = stream.getvalue().splitlines()
    assert [line.split(",")[0].strip() for line in lines] == [
        "rank 2: 1/3 fits",
        "rank 2: 2/3 fits",
    ]
    quiet = io.StringIO()
    tune.fit_batch(data, 2, priors, [0, 1, 2], max_iter=20, stream=quiet)
    assert quiet.getvalue() == ""


def test_bad_arguments():
    Y, split = small_problem(9)
    with pytest.raises(ValueError, match="training"):
        tune.grid(Y, [2], mask=split.train, validation=split.train)
    with pytest.raises(ValueError, match="prior alpha"):
        tune.grid(Y, [2], [0.5], mask=split.train, validation=split.validation)
    with pytest.raises(ValueError, match="variant"):
        tune.grid(Y, [2], mask=split.train, validation=split.validation, variant="other")
    with pytest.raises(TypeError, match="rank"):
        tune.grid(Y, [2.5], mask=split.train, validation=split.validation)
