"""Many MM fits in one compiled call, and the validation grid search."""

from __future__ import annotations

import io

import numpy as np
import pytest

import bernmf
from bernmf import _progress, tune
from bernmf.data.observed import as_observed
from bernmf.data.split import random_split
from bernmf.fitting import runner
from bernmf.inference import get_engine, mm
from bernmf.inference._compile import cache_size


def small_problem(seed=0, M=30, N=20, K=3, empty_row=False):
    Y, _, _ = bernmf.simulate(seed, M, N, K)
    split = random_split(Y.shape, seed=seed)
    train = split.train.copy()
    if empty_row:
        train[0] = False
    return np.asarray(Y, float), split._replace(train=train)


def test_held_out_values_never_matter_to_a_batch():
    Y, split = small_problem(3)
    flipped = np.where(split.train, Y, 1 - Y)  # change every held-out entry
    H = [
        mm.run_many(as_observed(v, split.train), 3, [bernmf.Prior(1.5, 1.5)], [0],
                    max_iter=50, tol=0.0).H[0]
        for v in (Y, flipped)
    ]  # fmt: skip
    np.testing.assert_array_equal(H[0], H[1])


@pytest.mark.slow
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


@pytest.mark.slow
@pytest.mark.parametrize("combine", ["mean", "best"])
def test_grid_scores_each_settings_ensemble_as_bernmf_fit_builds_it(combine):
    Y, split = small_problem(4, M=40, N=30)
    common = {"mask": split.train, "max_iter": 200, "tol": 1e-6}
    result = tune.grid(
        Y, [2, 3], [1.0, 2.0], [1.5], validation=split.validation, restarts=3, seed=2,
        combine=combine, progress=False, **common,
    )  # fmt: skip
    ensembles = result.ensembles
    assert len(ensembles) == 4 and (ensembles["members"] == 3).all()
    top = ensembles.loc[ensembles["validation_perplexity"].idxmin()]
    assert result.best["validation_perplexity"] == top["validation_perplexity"]
    for row in ensembles.itertuples():
        prior = bernmf.Prior(row.alpha, row.beta)
        ensemble = bernmf.fit(
            Y, "mm", row.rank, prior=prior, seed=2, restarts=3, combine=combine, **common
        )
        score = ensemble.perplexity(Y, split.validation)
        assert np.isclose(row.validation_perplexity, score, rtol=1e-9)
        assert row.seed == ensemble.seed  # the member of lowest objective


@pytest.mark.slow
def test_vmapped_batches_give_the_same_fits_and_nothing_recompiles():
    Y, split = small_problem(6)
    data = as_observed(Y, split.train)
    priors = [bernmf.Prior(a, b) for a in (1.0, 2.0) for b in (1.0, 2.5)]
    one_by_one = mm.run_many(data, 2, priors, [0, 1, 2, 3], max_iter=200, batch_size=1)
    vmapped = mm.run_many(data, 2, priors, [0, 1, 2, 3], max_iter=200, batch_size=4)
    np.testing.assert_array_equal(one_by_one.n_iter, vmapped.n_iter)
    np.testing.assert_allclose(one_by_one.W, vmapped.W, atol=1e-10)
    before = cache_size()
    again = mm.run_many(data, 2, priors[::-1], [3, 2, 1, 0], max_iter=200, batch_size=4)
    assert cache_size() == before and again.compile_seconds == 0.0
    np.testing.assert_allclose(again.W[::-1], vmapped.W, atol=1e-12)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*no observed entry:UserWarning")
@pytest.mark.parametrize("engine", ["mm", "vb"])
def test_the_runner_gives_fits_like_bernmf_fit_scored_as_fit_perplexity(engine):
    Y, split = small_problem(7)
    Y[np.random.default_rng(7).random(Y.shape) < 0.2] = np.nan
    chosen = get_engine(engine)
    options = chosen.with_defaults({"max_iter": 300})
    data, held_out = as_observed(Y, split.train), as_observed(Y, split.validation)
    priors = [bernmf.Prior(1.2, 1.8), bernmf.Prior(1.5, 1.5)]
    checked = [chosen.prior_for(p, 2) for p in priors]  # as bernmf.fit's plan checks them
    fitted = runner.fit_settings(chosen, data, 2, checked, [3, 5], options, held_out)
    assert [(m.fit.seed, float(m.prior.alpha[0])) for m in fitted] == [
        (3, 1.2), (5, 1.2), (3, 1.5), (5, 1.5)
    ]  # fmt: skip
    single = bernmf.fit(Y, engine, 2, mask=split.train, prior=priors[0], seed=5, max_iter=300)
    np.testing.assert_allclose(fitted[1].fit.W, single.W, atol=1e-10)
    np.testing.assert_allclose(fitted[1].fit.trace, single.trace, rtol=1e-10)
    for m in fitted:
        assert m.validation_perplexity == pytest.approx(
            m.fit.perplexity(Y, split.validation), rel=1e-12
        )


def test_progress_lines_on_long_grids(monkeypatch):
    monkeypatch.setattr(_progress, "EVERY", 0.0)
    Y, split = small_problem(8)
    stream = io.StringIO()
    data = as_observed(Y, split.train)
    priors = [bernmf.Prior()] * 3
    mm.run_many(
        data, 2, priors, [0, 1, 2], max_iter=20, progress=True, label="rank 2", stream=stream
    )
    lines = stream.getvalue().splitlines()
    assert [line.split(",")[0].strip() for line in lines] == [
        "rank 2: 1/3 fits",
        "rank 2: 2/3 fits",
    ]
    quiet = io.StringIO()
    mm.run_many(data, 2, priors, [0, 1, 2], max_iter=20, stream=quiet)
    assert quiet.getvalue() == ""


def test_bad_arguments():
    Y, split = small_problem(9)
    with pytest.raises(ValueError, match="training"):
        tune.grid(Y, [2], mask=split.train, validation=split.train)
    with pytest.raises(ValueError, match="prior alpha"):
        tune.grid(Y, [2], [0.5], mask=split.train, validation=split.validation)
    with pytest.raises(TypeError, match="does not take option"):
        tune.grid(Y, [2], mask=split.train, validation=split.validation, variant="other")
    with pytest.raises(TypeError, match="rank"):
        tune.grid(Y, [2.5], mask=split.train, validation=split.validation)


@pytest.mark.slow
def test_grid_scores_validation_as_fit_perplexity_with_nan_in_y():
    # issue 23: the grid scored validation entries whose Y is NaN as zeros
    Y, _, _ = bernmf.simulate(0, 60, 40, 3)
    Y = np.asarray(Y, float)
    Y[np.random.default_rng(0).random(Y.shape) < 0.3] = np.nan
    split = random_split(Y.shape, seed=0)
    common = {"mask": split.train, "max_iter": 100}
    result = tune.grid(
        Y, [3], [1.2], [1.5], validation=split.validation, restarts=2, combine="mean",
        progress=False, **common,
    )  # fmt: skip
    for row in result.table.itertuples():
        single = bernmf.fit(Y, "mm", 3, prior=bernmf.Prior(1.2, 1.5), seed=row.seed, **common)
        score = single.perplexity(Y, split.validation)
        assert row.validation_perplexity == pytest.approx(score, rel=1e-9)
    ensemble = bernmf.fit(
        Y, "mm", 3, prior=bernmf.Prior(1.2, 1.5), restarts=2, combine="mean", **common
    )
    assert result.ensembles["validation_perplexity"].iloc[0] == pytest.approx(
        ensemble.perplexity(Y, split.validation), rel=1e-9
    )
