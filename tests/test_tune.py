"""Many MM fits in one compiled call, and the validation grid search."""

from __future__ import annotations

import io
import json
import threading

import numpy as np
import pandas as pd
import pytest
from helpers import shared_file, zero_probability_problem

import bernmf
from bernmf import _progress, tune
from bernmf.data.observed import as_observed
from bernmf.data.split import random_split
from bernmf.fitting import grids, runner
from bernmf.inference import get_engine, mm, registry
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
    assert "mm K=3: 12 fits" in stream.getvalue()
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


def test_every_fit_of_the_runner_runs_with_one_blas_thread_then_restores_the_limit(monkeypatch):
    """A fit's LAPACK calls would wake a BLAS thread per core (benchmarks/blas_threads.py):
    the runner's single fits, ensembles and grids run with one, and the limit before comes
    back after, also when the fit fails."""
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads() -> set[int]:
        return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}

    seen = []

    def run(*args, **options):
        seen.append(blas_threads())
        raise RuntimeError("seen")

    engine = get_engine("logsvd")  # no run_settings nor run_members: every fit is a run
    monkeypatch.setitem(registry._ENGINES, "logsvd", engine._replace(run=run))
    Y, split = small_problem()
    parts = {"mask": split.train, "validation": split.validation}
    with threadpool_limits(limits=2, user_api="blas"):
        for call in (
            lambda: bernmf.fit(Y, "logsvd", 2, mask=split.train),
            lambda: bernmf.fit(Y, "logsvd", 2, restarts=2, **parts),
            lambda: tune.grid(Y, [2], engines=["logsvd"], **parts),
        ):
            with pytest.raises(RuntimeError, match="seen"):
                call()
        after = blas_threads()
    assert seen == [{1}] * 3
    assert after == {2}


def test_fits_in_two_threads_keep_one_blas_thread_until_the_last_one_ends(monkeypatch):
    """Thread A's fit ends while thread B's runs: B still sees one BLAS thread, and the limit
    before both comes back after B's."""
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads() -> set[int]:
        return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}

    b_runs, a_ended, seen = threading.Event(), threading.Event(), {}

    def run(data, rank, prior, seed, init, **options):
        if seed == 0:  # thread A: ends once B's fit runs
            assert b_runs.wait(30)
        else:  # thread B: looks once A's fit has ended
            b_runs.set()
            assert a_ended.wait(30)
        seen[seed] = blas_threads()
        raise RuntimeError("seen")

    engine = get_engine("logsvd")
    monkeypatch.setitem(registry._ENGINES, "logsvd", engine._replace(run=run))
    Y, split = small_problem()

    def fit(seed: int) -> None:
        with pytest.raises(RuntimeError, match="seen"):
            bernmf.fit(Y, "logsvd", 2, mask=split.train, seed=seed)
        if seed == 0:
            a_ended.set()

    with threadpool_limits(limits=2, user_api="blas"):
        threads = [threading.Thread(target=fit, args=(seed,)) for seed in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        after = blas_threads()
    assert seen == {0: {1}, 1: {1}}
    assert after == {2}


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
    with pytest.raises(TypeError, match=r"\(mm\) do not take option\(s\) \['variant'\]"):
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


@pytest.mark.parametrize("combine", [None, "mean"])
def test_best_fit_is_what_the_grid_scored_recorded_as_bernmf_fit_records_it(combine):
    Y, split = small_problem(5)
    common = {"mask": split.train, "max_iter": 50}
    tuned = tune.grid(
        Y, [2, 3], [1.2, 2.0], [1.5], validation=split.validation, restarts=2, combine=combine,
        progress=False, **common,
    )  # fmt: skip
    best, result = tuned.best, tuned.best_fit
    assert result.perplexity(Y, split.validation) == pytest.approx(best["validation_perplexity"])
    members = {"seed": best["seed"]} if combine is None else {"restarts": 2, "combine": combine}
    prior = bernmf.Prior(best["alpha"], best["beta"])
    same = bernmf.fit(Y, best["engine"], best["rank"], prior=prior, **members, **common)
    assert result.record.plan == same.record.plan  # engine, rank, prior, seeds, options, data
    assert result.row_labels is same.row_labels is None
    np.testing.assert_allclose(result.probs, same.probs, rtol=1e-6, atol=1e-9)
    assert (result.mixture is None) == (combine is None)


def labelled_csv(path, seed=1, M=30, N=20, K=3):
    """A labelled M x N CSV simulated at rank K, and its frame."""
    Y, _, _ = bernmf.simulate(seed, M, N, K, bernmf.Prior(0.3, 0.3))
    frame = pd.DataFrame(Y, [f"r{i}" for i in range(M)], [f"c{j}" for j in range(N)])
    frame.to_csv(path)
    return frame


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::bernmf.models.spec.ZeroProbabilityWarning")
def test_engines_other_than_mm_are_tuned_over_their_ranks_as_bernmf_fit_fits_them():
    Y, split = small_problem(11)
    result = tune.grid(
        Y, [2, 3], [1.2], [1.2, 2.0], mask=split.train, validation=split.validation,
        engines=["mm", "logsvd", "em"], progress=False, max_iter=200,
    )  # fmt: skip
    table = result.table
    counts = table.groupby("engine", sort=False).size().to_dict()
    assert counts == {"mm": 4, "logsvd": 2, "em": 2}  # mm: ranks x betas; the others: ranks
    assert table.loc[table["engine"] != "mm", ["alpha", "beta", "gamma"]].isna().all().all()
    for row in table[table["engine"] != "mm"].itertuples():
        single = bernmf.fit(Y, row.engine, row.rank, mask=split.train, max_iter=200)
        assert row.validation_perplexity == pytest.approx(
            single.perplexity(Y, split.validation), rel=1e-9
        )
    first = table.loc[table["validation_perplexity"].idxmin()]
    assert (result.best["engine"], result.best["rank"]) == (first["engine"], first["rank"])
    assert result.options["logsvd"]["max_iter"] == 200 and "variant" not in result.options["em"]


@pytest.mark.slow
def test_a_best_rank_at_the_top_of_the_grid_is_said_and_extended():
    Y, _, _ = bernmf.simulate(3, 120, 80, 8, bernmf.Prior(0.1, 0.1, 0.1))  # rank 8: above 2
    split = random_split(Y.shape, seed=3)
    common = {"mask": split.train, "validation": split.validation, "max_iter": 300}
    said = tune.grid(Y, [1, 2], progress=False, **common)
    assert set(said.table["rank"]) == {1, 2}
    assert said.notes == [
        "mm: the best rank K=2 is the largest of the grid; larger ranks may do better "
        "(extend the grid)"
    ]
    stream = io.StringIO()
    extended = tune.grid(Y, [1, 2], extend=3, stream=stream, **common)
    scores = extended.table.groupby("rank")["validation_perplexity"].min()
    assert scores.index.tolist() == [1, 2, 4, 8, 16]  # 4 and 8 improved, 16 did not
    assert scores.idxmin() == extended.best["rank"] == 8
    assert extended.notes[:2] == [
        "mm: the best rank K=2 is the largest of the grid; fitting K=4",
        "mm: K=4 improved on K=2; fitting K=8",
    ]
    assert extended.notes[-1].startswith("mm: K=16 did not improve on K=8")
    assert extended.notes[0] in stream.getvalue()
    bounded = tune.grid(Y, [1, 2], extend=1, progress=False, **common)
    assert set(bounded.table["rank"]) == {1, 2, 4}
    assert bounded.notes[-1] == "mm: K=4 is the best and still at the edge after 1 added rank: " \
        "give larger ranks"  # fmt: skip


def test_a_best_rank_inside_the_grid_or_one_rank_is_no_edge():
    from bernmf.fitting.grids import rank_edges as _edges

    fitted = []
    assert _edges("mm", {2: 0.5, 4: 0.4, 8: 0.45}, 50, 2, fitted.append, False, None) == []
    assert _edges("mm", {4: 0.4}, 50, 2, fitted.append, False, None) == []
    assert _edges("mm", {2: np.inf, 4: np.inf}, 50, 2, fitted.append, False, None) == []
    lines = _edges("em", {2: 0.3, 4: 0.4}, 50, 3, lambda k: {1: 0.35}[k], False, None)
    assert lines[-1] == "em: K=1 did not improve on K=2 (0.3500 against 0.3000); the best rank "\
        "stays K=2"  # fmt: skip
    assert _edges("mm", {4: 0.5, 8: 0.4}, 8, 2, fitted.append, False, None) == []  # at min(M, N)
    assert not fitted


def test_a_best_alpha_or_beta_at_the_edge_of_its_grid_is_said_and_extended():
    from bernmf.fitting.grids import prior_edges

    def said(which, value, values, extend=0, fit=None):
        return prior_edges("mm", which, value, 4, 0.4, values, 1.0, extend, fit, False, None)

    assert said("alpha", 3.0, [1.2, 2.0, 3.0]) == [
        "mm: the best alpha=3 (K=4) is the largest of the grid's; larger values may do better"
    ]
    assert said("beta", 1.5, [1.5, 2.0]) == [
        "mm: the best beta=1.5 (K=4) is the smallest of the grid's; smaller values above 1 may "
        "do better"
    ]
    assert said("alpha", 1.0, [1.0, 1.5]) == []  # no advice at the flat prior's 1
    assert said("beta", 2.0, [1.5, 2.0, 3.0]) == []  # inside
    tried = []

    def fit(value):
        tried.append(value)
        return {6.0: 0.35, 12.0: 0.36}[value]

    lines = said("alpha", 3.0, [1.2, 3.0], extend=3, fit=fit)
    assert tried == [6.0, 12.0]  # doubled while it improved
    assert lines[-1] == (
        "mm: alpha=12 did not improve on alpha=6 (0.3600 against 0.3500); it stays 6"
    )
    tried.clear()
    lines = said("beta", 1.2, [1.2, 2.0], extend=1, fit=lambda v: tried.append(v) or 0.3)
    assert tried == [pytest.approx(1.1)]  # halfway to 1, where H would reach 0 and 1
    assert lines[-1] == "mm: beta=1.1 is the best and still at the edge after 1 added value"


def test_progress_names_the_phase_that_runs_stacking_included(monkeypatch):
    Y, split = small_problem(12)
    seen = []

    def watched(function):
        def call(*args, **kwargs):
            seen.append(_progress._NOW["label"])  # what the heartbeat would repeat now
            return function(*args, **kwargs)

        return call

    monkeypatch.setattr(grids, "fit_settings", watched(grids.fit_settings))
    monkeypatch.setattr(tune, "stack_on", watched(tune.stack_on))
    tune.grid(
        Y, [2, 3], mask=split.train, validation=split.validation, engines=["mm", "logsvd"],
        combine="stack", refit=True, progress=False, max_iter=50,
    )  # fmt: skip
    assert seen == [
        "mm K=2, 1 fit", "mm K=3, 1 fit", "logsvd K=2, 1 fit", "logsvd K=3, 1 fit",
        "stacking 4 fits, then refitting",
    ]  # fmt: skip


def test_unknown_engines_options_and_priors_without_a_taker_fail_before_any_fit(monkeypatch):
    monkeypatch.setattr(runner, "fit_settings", lambda *a, **k: pytest.fail("a fit ran"))
    monkeypatch.setattr(grids, "fit_settings", lambda *a, **k: pytest.fail("a fit ran"))
    Y, split = small_problem(13)
    common = {"mask": split.train, "validation": split.validation}
    with pytest.raises(ValueError, match="unknown engine 'nope'"):
        tune.grid(Y, [2], engines=["mm", "nope"], **common)
    with pytest.raises(ValueError, match="alphas set a Beta prior, but logsvd, em take no prior"):
        tune.grid(Y, [2], [1.5], engines=["logsvd", "em"], **common)
    with pytest.raises(TypeError, match=r"\(mm, logsvd\) do not take option\(s\) \['steps'\]"):
        tune.grid(Y, [2], engines=["mm", "logsvd"], steps=3, **common)
    for extend in (-1, 10**9, 1.5):
        with pytest.raises(ValueError, match=r"extend must be an integer in \[0, 30\]"):
            tune.grid(Y, [2], extend=extend, **common)


def test_the_command_refuses_unknown_engines_and_priors_without_a_taker(tmp_path, capsys):
    from bernmf.cli.parser import main

    path = tmp_path / "d.csv"
    labelled_csv(path)
    argv = ["tune", str(path), "--out", str(tmp_path / "o")]
    assert main([*argv, "--engines", "mm,nope"]) == 1
    assert "unknown engine 'nope'" in capsys.readouterr().err
    assert main([*argv, "--engines", "logsvd", "--alphas", "1.5"]) == 1
    assert "--alphas set a Beta prior, but logsvd take no prior" in (capsys.readouterr().err)
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_the_split_saved_beside_the_results_is_read_back_by_split(tmp_path, capsys):
    from bernmf.cli.parser import main
    from bernmf.data.files.readers import read_codes

    path = tmp_path / "d.csv"
    frame = labelled_csv(path)
    argv = ["tune", str(path), "--engines", "mm,logsvd", "--ranks", "2,3", "--alphas", "1.2"]
    argv += ["--betas", "1.2", "--max-iter", "100"]
    assert main([*argv, "--seed", "5", "--json", "--out", str(tmp_path / "first")]) == 0
    summary = json.loads(capsys.readouterr().out)
    saved = tmp_path / "first" / "split.csv"
    assert summary["split_file"] == str(saved)
    drawn = random_split(frame.shape, seed=5)
    read = read_codes(saved, frame)
    for part in ("train", "validation", "test"):
        np.testing.assert_array_equal(getattr(read, part), getattr(drawn, part))
    again = [*argv, "--split", str(saved), "--seed", "5", "--json"]
    assert main([*again, "--out", str(tmp_path / "again")]) == 0
    repeated = json.loads(capsys.readouterr().out)
    assert repeated["split"] == f"codes from {saved}"
    assert repeated["best"] == summary["best"]
    shuffled = frame.sample(frac=1.0, random_state=0)  # the codes follow the labels
    np.testing.assert_array_equal(
        read_codes(saved, shuffled).train, drawn.train[[frame.index.get_loc(r) for r in
                                                        shuffled.index]]
    )  # fmt: skip


def test_codes_of_an_unlabelled_matrix_are_written_as_the_papers_split_files(tmp_path):
    from bernmf.cli.study_commands import write_codes
    from bernmf.data.files.readers import read_codes

    Y, split = small_problem(14)
    write_codes(split, Y, tmp_path / "split.csv")
    assert (tmp_path / "split.csv").read_text().splitlines()[0].count(",") == Y.shape[1] - 1
    np.testing.assert_array_equal(read_codes(tmp_path / "split.csv", Y).codes(), split.codes())


@pytest.mark.slow
def test_the_commands_default_priors_keep_test_entries_finite(tmp_path, capsys):
    """From alpha = 1 (the flat prior's) the tuned mm on animals chose alpha = 1 at K = 4,
    and scored inf on test: the default grid starts at the default prior's 1.2."""
    from bernmf.cli.parser import main

    folder = shared_file("data", "animals.csv").parent
    argv = ["tune", "--dataset", "animals", "--data-dir", str(folder), "--ranks", "2,4"]
    assert main([*argv, "--extend", "0", "--json", "--out", str(tmp_path / "o")]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    assert best["alpha"] >= 1.2 and best["beta"] >= 1.2
    assert np.isfinite(best["test_perplexity"])


def test_an_engine_tuned_without_a_prior_grid_fits_its_own_default_prior():
    Y, split = small_problem(14)
    common = {"mask": split.train, "validation": split.validation, "progress": False}
    own = tune.grid(Y, [2], engines=["vb", "mm"], max_iter=20, **common).table
    vb, mm = own[own["engine"] == "vb"].iloc[0], own[own["engine"] == "mm"].iloc[0]
    assert (vb["alpha"], vb["beta"], vb["gamma"]) == (1.0, 1.0, 0.5)  # vb's: Dirichlet(1/K)
    assert (mm["alpha"], mm["beta"], mm["gamma"]) == (1.2, 1.2, 1.2)  # bernmf.Prior()
    given = tune.grid(Y, [2], [1.5], engines=["vb"], max_iter=20, **common).table.iloc[0]
    assert (given["alpha"], given["beta"], given["gamma"]) == (1.5, 1.2, 1.2)


def test_an_inf_validation_perplexity_is_inf_in_the_lines_and_summary_json(tmp_path, capsys):
    from bernmf.cli.parser import main
    from bernmf.cli.study_commands import write_codes

    Y, split = zero_probability_problem()
    pd.DataFrame(Y).to_csv(tmp_path / "y.csv")
    write_codes(split, Y, tmp_path / "split.csv")
    argv = ["tune", str(tmp_path / "y.csv"), "--engines", "em", "--ranks", "2"]
    argv += ["--split", str(tmp_path / "split.csv"), "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    err = capsys.readouterr().err
    text = (tmp_path / "out" / "summary.json").read_text()
    assert "em K=2: 1 fit in" in err and "best validation perplexity inf" in err
    assert json.loads(text)["best"]["validation_perplexity"] == "inf"
    assert "1797693" not in err + text
    tuned = tune.grid(Y, [2], engines=["em"], mask=split.train, validation=split.validation)
    assert tuned.best_fit.H.shape == (2, Y.shape[1])  # the first fit of least score: inf
