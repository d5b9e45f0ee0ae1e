"""bernmf.compare: the engines x ranks x seeds table on small simulated data."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import bernmf
from bernmf.data.split import random_split
from bernmf.fitting import runner

OPTIONS = {"mm": {"max_iter": 30}, "em": {"max_iter": 30}}


@pytest.fixture(scope="module")
def data():
    """Y (30 x 20, rank 2) with NaN in one cell, and a 60/20/20 split."""
    Y, _, _ = bernmf.simulate(1, 30, 20, 2)
    Y = Y.astype(float)
    Y[0, 0] = np.nan
    return Y, random_split(Y.shape, (0.6, 0.2, 0.2), seed=4)


@pytest.fixture(scope="module")
def result(data):
    Y, split = data
    return bernmf.compare(
        Y,
        ["mm", "em"],
        [2, 3],
        seeds=[0, 5],
        train=split.train,
        test=split.test,
        priors={"mm": bernmf.Prior(1.2, 1.5)},
        options=OPTIONS,
        progress=False,
    )


@pytest.mark.slow
def test_tables_have_one_row_per_fit_and_per_setting(result):
    fits, summary = result.fits, result.summary
    assert list(fits.columns) == [
        "engine",
        "rank",
        "prior",
        "seed",
        "perplexity",
        "seconds",
        "compile_seconds",
        "iterations",
        "converged",
    ]
    assert fits[["engine", "rank", "seed"]].values.tolist() == [
        [e, k, s] for e in ("mm", "em") for k in (2, 3) for s in (0, 5)
    ]
    assert set(fits.loc[fits["engine"] == "mm", "prior"]) == {"Beta(1.2, 1.5) Dirichlet(1.2)"}
    assert set(fits.loc[fits["engine"] == "em", "prior"]) == {"none"}
    assert (fits["iterations"] <= 30).all()
    assert summary[["engine", "rank", "fits"]].values.tolist() == [
        ["mm", 2, 2],
        ["mm", 3, 2],
        ["em", 2, 2],
        ["em", 3, 2],
    ]
    first = fits.iloc[:2]
    assert summary.loc[0, "perplexity"] == pytest.approx(first["perplexity"].mean())
    assert summary.loc[0, "perplexity_sd"] == pytest.approx(first["perplexity"].std())
    with pytest.raises(AttributeError):
        result.fits = None  # frozen


@pytest.mark.slow
def test_perplexity_is_that_of_the_same_direct_fit(data, result):
    Y, split = data
    for engine, prior in (("mm", bernmf.Prior(1.2, 1.5)), ("em", None)):
        direct = bernmf.fit(Y, engine, 3, mask=split.train, prior=prior, seed=5, **OPTIONS[engine])
        row = result.fits.query("engine == @engine and rank == 3 and seed == 5").iloc[0]
        assert row["perplexity"] == pytest.approx(direct.perplexity(Y, split.test), rel=1e-12)
        assert row["iterations"] == direct.n_iter


def test_measure_reads_the_draws_that_the_kept_fits_no_longer_hold(data):
    """compare holds each fit without its draws once measured (its study's keep_draws=False)."""
    Y, split = data
    result = bernmf.compare(
        Y, ["gibbs"], [2], [0, 1], train=split.train, test=split.test, keep=True,
        options={"gibbs": {"num_warmup": 10, "num_samples": 10, "progress": False}},
        measure=lambda fit: {"draws": fit.draws["W"].shape[-3]}, progress=False,
    )  # fmt: skip
    assert result.fits["draws"].tolist() == [10, 10]
    assert [len(fit.draws) for fit in result.results] == [0, 0]


def test_a_prior_whose_gamma_the_rank_divides_keeps_it_at_every_rank(data):
    """vb's default gamma is 1/K: a prior built from it (as the CLI's --alpha builds it) was
    fitted at gamma 1 by the first Study-based compare."""
    from bernmf.inference import get_engine

    Y, split = data
    prior = get_engine("vb").prior_from(1.5, 1.5)
    result = bernmf.compare(
        Y, ["vb"], [2, 4], [0], train=split.train, test=split.test, priors={"vb": prior},
        options={"vb": {"max_iter": 30}}, progress=False,
    )  # fmt: skip
    assert result.fits["prior"].tolist() == [
        "Beta(1.5, 1.5) Dirichlet(0.5)", "Beta(1.5, 1.5) Dirichlet(0.25)"
    ]  # fmt: skip
    for rank, perplexity in zip(result.fits["rank"], result.fits["perplexity"], strict=True):
        direct = bernmf.fit(Y, "vb", rank, mask=split.train, prior=prior, max_iter=30)
        assert perplexity == pytest.approx(direct.perplexity(Y, split.test), rel=1e-9)


def test_measure_adds_columns(data):
    Y, split = data
    result = bernmf.compare(
        Y,
        ["em"],
        [2],
        [0],
        train=split.train,
        test=split.validation,
        options={"em": OPTIONS["em"]},
        measure=lambda fit: {"validation_objective": fit.objective},
        progress=False,
    )
    assert result.fits.columns[-1] == "validation_objective"
    assert np.isfinite(result.fits["validation_objective"]).all()


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"engines": ["mm", "nope"]}, ValueError, "unknown engine 'nope'; known engines: "),
        ({"engines": "mm"}, TypeError, "engines must be a list"),
        ({"ranks": []}, ValueError, "ranks is empty"),
        ({"seeds": []}, ValueError, "seeds is empty"),
        ({"ranks": [2, 0]}, ValueError, "rank must be >= 1"),
        ({"seeds": [-1]}, ValueError, "seed must be in"),
        ({"options": {"vb": {}}}, ValueError, r"options name engine\(s\) \['vb'\]"),
        ({"options": {"em": {"maxiter": 3}}}, TypeError, "does not take option"),
        ({"priors": {"em": bernmf.Prior(2.0, 2.0)}}, ValueError, "'em' .* takes no prior"),
        ({"priors": {"gibbs": None}}, ValueError, r"priors name engine\(s\) \['gibbs'\]"),
        ({"test": "train"}, ValueError, "train and test share"),
        ({"test": "wide"}, ValueError, r"test has shape \(30, 21\)"),
        ({"train": "ints"}, TypeError, "train must be a bool array"),
        ({"test": "none"}, ValueError, "test selects no entry"),
    ],
)
def test_bad_arguments_fail_before_any_fit(data, monkeypatch, change, error, message):
    Y, split = data
    masks = {
        "train": split.train,
        "wide": np.ones((30, 21), bool),
        "ints": split.train.astype(int),
        "none": np.zeros(Y.shape, bool),
    }
    arguments = {"engines": ["mm", "em"], "ranks": [2], "seeds": [0], "options": {}}
    arguments |= {"train": split.train, "test": split.test}
    arguments |= {k: masks.get(v, v) if k in ("train", "test") else v for k, v in change.items()}

    def no_fit(*args, **kwargs):
        raise AssertionError("fitted before the arguments were checked")

    monkeypatch.setattr(runner, "runs", no_fit)
    monkeypatch.setattr(runner, "fit_settings", no_fit)
    with pytest.raises(error, match=message):
        bernmf.compare(Y, progress=False, **arguments)


def test_the_module_stays_a_module():
    assert importlib.import_module("bernmf.studies.compare").compare is bernmf.compare
    assert "compare" in bernmf.__all__


@pytest.mark.slow
def test_an_engine_compared_as_an_ensemble():
    """options restarts and combine make each fit the ensemble bernmf.fit builds."""
    Y, _, _ = bernmf.simulate(4, 40, 30, 3)
    split = random_split(Y.shape, (0.8, 0.0, 0.2), seed=1)
    options = {"mm": {"restarts": 3, "combine": "mean", "max_iter": 100}}
    result = bernmf.compare(
        Y, ["mm"], [3], seeds=[5], train=split.train, test=split.test, options=options,
        progress=False,
    )  # fmt: skip
    ensemble = bernmf.fit(
        Y, "mm", 3, mask=split.train, seed=5, restarts=3, combine="mean", max_iter=100
    )
    assert np.isclose(result.fits["perplexity"][0], ensemble.perplexity(Y, split.test))
    assert options["mm"]["restarts"] == 3  # the caller's dict is left as it was
    with pytest.raises(ValueError, match="give validation="):
        bernmf.compare(
            Y, ["mm"], [3], train=split.train, test=split.test,
            options={"mm": {"restarts": 2, "combine": "stack"}}, progress=False,
        )  # fmt: skip
    # with validation entries the members are stacked on them, as bernmf.fit stacks them
    held = random_split(Y.shape, (0.6, 0.2, 0.2), seed=2)
    stacked = bernmf.compare(
        Y, ["mm"], [3], seeds=[5], train=held.train, test=held.test, validation=held.validation,
        options={"mm": {"restarts": 2, "combine": "stack", "max_iter": 100}}, progress=False,
    )  # fmt: skip
    direct = bernmf.fit(Y, "mm", 3, mask=held.train, seed=5, restarts=2, combine="stack",
                        validation=held.validation, max_iter=100)  # fmt: skip
    assert stacked.fits["perplexity"][0] == pytest.approx(direct.perplexity(Y, held.test))


def test_the_seeds_of_an_engine_and_rank_are_one_runner_call(data, monkeypatch):
    """compare runs each engine and rank's seeds as one bernmf.fitting.runner.fit_settings call and
    scores them at the test entries only (Fit.probs_at), never on M x N probabilities."""
    from bernmf.fitting import runner
    from bernmf.results.fit import Fit

    Y, split = data
    calls = []
    real = runner.fit_settings

    def spy(engine, data, rank, priors, seeds, options, held_out=None, **batching):
        calls.append((engine.name, rank, list(seeds)))
        return real(engine, data, rank, priors, seeds, options, held_out, **batching)

    def no_matrix(*args, **kwargs):
        raise AssertionError("scored with an M x N array")

    monkeypatch.setattr(runner, "fit_settings", spy)
    monkeypatch.setattr(Fit, "perplexity", no_matrix)
    result = bernmf.compare(
        Y, ["mm", "em"], [2, 3], seeds=[0, 5], train=split.train, test=split.test,
        options=OPTIONS, progress=False,
    )  # fmt: skip
    assert calls == [(e, k, [0, 5]) for e in ("mm", "em") for k in (2, 3)]
    monkeypatch.undo()
    for engine, rank, seed, perplexity, iterations in result.fits[
        ["engine", "rank", "seed", "perplexity", "iterations"]
    ].values:
        direct = bernmf.fit(Y, engine, rank, mask=split.train, seed=seed, **OPTIONS[engine])
        assert perplexity == pytest.approx(direct.perplexity(Y, split.test), rel=1e-12)
        assert iterations == direct.n_iter
