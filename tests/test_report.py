"""``bernmf report`` (bernmf.studies.report): tuned on validation, scored on test, as HTML."""

from __future__ import annotations

import base64
import types

import numpy as np
import pandas as pd
import pytest

import bernmf
from bernmf.cli.parser import main
from bernmf.inference import get_engine
from bernmf.studies.report import budget as quick
from bernmf.studies.report import run as report


@pytest.fixture(scope="module")
def small():
    Y, _, _ = bernmf.simulate(0, 40, 30, 3, bernmf.Prior(0.3, 0.6, 0.5))
    return np.asarray(Y, float)


@pytest.fixture(scope="module")
def result(small):
    return report.run(
        {"small": small}, ["mm", "em"], ranks=(2, 3), shared_rank=3, priors=(1.0, 1.5),
        seeds=range(2), restarts=2, progress=False,
    )  # fmt: skip


@pytest.mark.slow
def test_one_row_per_test_fit_with_the_documented_columns(result):
    fits = result.fits
    assert tuple(fits.columns) == report.COLUMNS
    # mm and em: tuned and shared rows, two seeds each; mm's ensemble: two more
    counts = fits.groupby(["engine", "setting"]).size().to_dict()
    assert counts == {
        ("em", "shared K=3"): 2, ("em", "tuned"): 2, ("mm", "shared K=3"): 2,
        ("mm", "tuned"): 2, ("mm ensemble", "ensemble"): 2,
        ("stacked: all engines", "stacked"): 2, ("stacked: mm grid", "stacked"): 2,
    }  # fmt: skip
    assert (fits["perplexity"] > 0).all() and (fits["seconds"] > 0).all()
    tuned = fits[(fits["engine"] == "mm") & (fits["setting"] == "tuned")]
    assert tuned["perplexity"].between(0.3, 0.8).all()  # em overfits here; tuned mm does not
    assert tuned["rank"].iloc[0] in (2, 3) and tuned["prior"].iloc[0] != "none"
    assert fits["ess_per_second"].isna().all()  # no sampler here
    assert result.environment["cpus"] >= 1 and "jax" in result.environment


@pytest.mark.slow
def test_stacked_rows_are_built_from_the_fits_made_and_weighted_on_validation(result, tmp_path):
    fits, weights = result.fits, result.weights
    stacked = fits[fits["setting"] == "stacked"]
    assert np.isfinite(stacked["perplexity"]).all()  # the baseline member: never probability 0
    assert set(weights["stack"]) == {"stacked: all engines", "stacked: mm grid"}
    totals = weights.groupby(["seed", "stack"])["weight"].sum()
    np.testing.assert_allclose(totals, 1.0)
    mm_only = weights[weights["stack"] == "stacked: mm grid"]
    assert set(mm_only["engine"]) <= {"mm", "baseline"}
    # the stacks' seconds add up their members': at least the test fits of their seed
    for seed in (0, 1):
        made = fits[(fits["seed"] == seed) & (fits["setting"] != "stacked")]
        everything = stacked[(stacked["seed"] == seed) & (stacked["engine"].str.contains("all"))]
        mine = made.drop_duplicates(["engine", "rank", "prior", "perplexity"])["seconds"].sum()
        assert everything["seconds"].iloc[0] >= mine
    paths = report.write(result, tmp_path)
    page = paths["report.html"].read_text()
    assert "Stacking weight per engine and rank" in page and "stacked: all engines" in page
    assert pd.read_csv(paths["weights.csv"])["weight"].between(0, 1).all()


@pytest.mark.slow
def test_tuning_uses_the_validation_entries_not_the_test_ones(small, monkeypatch):
    # the rank chosen by em is the one of lowest validation perplexity (compare's
    # summary on split.validation), whatever the test entries say
    seen = []
    original = report.compare

    def spy(Y, engines, ranks, seeds, *, train, test, **kwargs):
        seen.append(test)
        return original(Y, engines, ranks, seeds, train=train, test=test, **kwargs)

    monkeypatch.setattr(report, "compare", spy)
    report.run({"small": small}, ["em"], ranks=(2, 3), seeds=[0], ensembles=(), progress=False)
    split = bernmf.data.split.paper_split(small.shape)
    assert np.array_equal(seen[0], split.validation)
    assert all(np.array_equal(mask, split.test) for mask in seen[1:])


@pytest.mark.slow
def test_leaderboard_is_sorted_within_each_dataset(result):
    board = report.leaderboard(result.fits)
    assert (board["fits"] == 2).all()
    assert {"stacked: all engines", "stacked: mm grid"} <= set(board["engine"])
    assert board["perplexity"].is_monotonic_increasing
    assert {"perplexity_sd", "compile_seconds", "iterations", "ess_per_second"} <= set(board)


@pytest.mark.slow
def test_written_html_stands_alone_with_table_and_image(result, tmp_path):
    paths = report.write(result, tmp_path)
    page = paths["report.html"].read_text()
    assert "<table" in page and "mm ensemble" in page and "Environment" in page
    encoded = page.split("data:image/png;base64,")[1].split('"')[0]
    assert base64.b64decode(encoded) == paths["pareto.png"].read_bytes()
    fits = pd.read_csv(paths["fits.csv"])
    assert tuple(fits.columns) == report.COLUMNS and len(fits) == 14  # 4 of them stacked


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"engines": ["mm", "nope"]}, r"unknown engine .nope."),
        ({"engines": ["em"], "shared_rank": 0}, "rank"),
        ({"engines": ["em"], "seeds": []}, "seeds is empty"),
        ({"engines": ["mm"], "restarts": 1}, "restarts must be an integer >= 2"),
    ],
)
def test_bad_arguments_fail_before_any_fit(small, monkeypatch, kwargs, message):
    monkeypatch.setattr(report, "compare", None)  # any fit would fail with a TypeError
    with pytest.raises(ValueError, match=message):
        report.run({"small": small}, progress=False, **kwargs)


@pytest.mark.slow
def test_report_command_on_a_data_file(small, tmp_path, capsys):
    path = tmp_path / "small.csv"
    pd.DataFrame(small).to_csv(path)
    out = tmp_path / "report"
    argv = ["report", str(path), "--engines", "mm,em", "--quick", "--json", "--out", str(out)]
    assert main(argv) == 0
    for name in ("report.html", "fits.csv", "leaderboard.csv", "pareto.png", "environment.json"):
        assert (out / name).stat().st_size > 0, name
    assert "small" in capsys.readouterr().out


def test_ensembles_in_the_report_do_not_warn_about_their_modes(small, monkeypatch):
    import warnings

    from bernmf.fitting import runner

    real = runner.combine_members

    def combine_with_modes(*args, **kwargs):  # as it warns when the members' modes differ
        message = "the 2 members reached 2 distinct modes, 0.01 nats apart"
        warnings.warn(message, UserWarning, stacklevel=2)
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "combine_members", combine_with_modes)
    split = bernmf.data.split.paper_split(small.shape)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = report._ensemble_rows(small, split, "mm", 2, None, [0], 2, "mean", {})
    assert np.isfinite(rows[0][0]["perplexity"])
    assert not [w for w in caught if "distinct modes" in str(w.message)]


@pytest.mark.slow
def test_the_report_says_what_it_found(result, small, tmp_path):
    data = result.data.set_index("dataset").loc["small"]
    assert (data["rows"], data["columns"]) == small.shape
    assert data["missing"] == pytest.approx(np.isnan(small).mean())
    assert data["density"] == pytest.approx(np.nanmean(small))
    chosen = result.chosen.set_index("engine")
    assert set(chosen.index) == {"mm", "em"} and (chosen["grid"] == "2,3").all()
    for engine, row in chosen.iterrows():
        assert row["edge"] == {2: "bottom", 3: "top"}[row["rank"]], engine
    assert result.seconds > 0
    said = report.findings(result)["small"]
    board = report.leaderboard(result.fits)
    best = board.iloc[0]
    assert said[0].startswith(f"Data: 40 x 30, 0.0% of entries missing, {data['density']:.2%}")
    assert said[1].startswith(f"Winner: {best['engine']} ({best['setting']}")
    assert " ahead of " in said[1] and " nats" in said[1]
    assert any("at the top of the grid" in line or "at the bottom" in line for line in said)
    page = report.write(result, tmp_path)["report.html"].read_text()
    assert "Winner: " in page and "Total run time: " in page


def test_identical_fits_are_one_row():
    fits = pd.DataFrame(
        {"dataset": "d", "engine": ["em", "em", "mm", "mm", "em", "em"],
         "setting": ["tuned", "tuned", "shared K=4", "shared K=4", "shared K=4", "shared K=4"],
         "rank": 4, "prior": "none", "seed": [0, 1] * 3,
         "perplexity": [0.5, 0.6, 0.5, 0.6, 0.5, 0.6], "seconds": 1.0, "compile_seconds": 0.0,
         "iterations": 10, "ess_per_second": np.nan}
    )  # fmt: skip
    board = report.leaderboard(fits)
    assert len(board) == 1
    assert board.iloc[0]["engine"] == "em = mm"
    assert board.iloc[0]["setting"] == "tuned = shared K=4" and board.iloc[0]["fits"] == 2
    other = fits.assign(perplexity=fits["perplexity"] + np.repeat([0, 0, 0.1], 2))
    assert len(report.leaderboard(other)) == 2  # differing fits stay apart
    ruled_out = fits.assign(perplexity=np.inf)  # inf says nothing of being the same fits
    assert len(report.leaderboard(ruled_out)) == 3


def test_quick_leaves_out_the_engines_over_its_budget_and_says_so(small, monkeypatch, capsys):
    seconds = {"mm": 200.0, "em": 500.0, "vb": 60.0, "logsvd": 30.0}  # mm is always kept
    monkeypatch.setattr(quick, "estimate", lambda Y, split, engine, *a: seconds[engine])
    engines = ["mm", "em", "vb", "logsvd"]
    result = report.run({"small": small}, engines, quick=True, progress=True)
    # the two stacks of mm's fits alone are the same stack: one row
    assert set(result.fits["engine"]) == {"mm", "mm ensemble", "stacked: all engines"}
    assert result.left_out.to_dict("records") == [
        {"dataset": "small", "engine": e, "estimate": seconds[e]} for e in ("em", "vb", "logsvd")
    ]
    err = capsys.readouterr().err
    assert "report --quick on small: estimated 200 s (mm 200 s)" in err
    assert "leaving out em, estimated 500 s" in err
    seconds["mm"] = 40.0  # now logsvd (30 s) fits, and then vb (60 s) would not
    result = report.run({"small": small}, engines, quick=True, progress=False)
    assert set(result.fits["engine"]) == {
        "mm", "mm ensemble", "logsvd", "stacked: all engines", "stacked: mm grid"
    }  # fmt: skip
    assert any("em was left out" in line for line in report.findings(result)["small"])


def probes(monkeypatch, timed):
    """Make the budget's probe fits return ``timed``'s ``(compile, run, iterations)`` in
    turn, as a fit measured by a fake clock would; returns the options of each call."""
    calls, timed = [], list(timed)

    def probe(Y, engine, rank, **options):
        calls.append(options)
        compile_seconds, run, n_iter = timed.pop(0)
        timings = {"compile": compile_seconds, "run": run}
        return types.SimpleNamespace(timings=timings, n_iter=n_iter)

    monkeypatch.setattr(quick, "fit", probe)
    return calls


def test_the_estimate_is_compile_plus_fits_times_the_probes_seconds_per_iteration(
    small, monkeypatch
):
    """A probe compiles; one stopped after an iteration and one after a few time the
    iterations between them (without a call's fixed cost), times max_iter per fit."""
    split = bernmf.data.split.paper_split(small.shape)
    calls = probes(monkeypatch, [(2.0, 0.5, 1), (0.0, 0.25, 1), (0.0, 1.25, 11)])
    seconds = quick.estimate(small, split, "em", 3, {"max_iter": 300}, 4)
    assert seconds == pytest.approx(2.0 + 4 * 300 * (1.25 - 0.25) / (11 - 1), rel=1e-12)
    assert [c["tol"] for c in calls] == [1e300, 1e300, 1e-2]  # once, once, a few
    assert all(c["max_iter"] == 300 and c["mask"] is split.train for c in calls)
    # iterations too fast to tell from the call: the few iterations' call, per iteration
    probes(monkeypatch, [(2.0, 0.5, 1), (0.0, 0.25, 1), (0.0, 0.2, 11)])
    seconds = quick.estimate(small, split, "em", 3, {}, 4)  # em's default max_iter
    max_iter = get_engine("em").options["max_iter"]
    assert seconds == pytest.approx(2.0 + 4 * max_iter * 0.2 / 11, rel=1e-12)


def test_the_estimate_of_a_sampler_counts_its_probe_draws(small, monkeypatch):
    split = bernmf.data.split.paper_split(small.shape)
    calls = probes(monkeypatch, [(3.0, 0.8, 0)])  # one probe: 2 + 2 draws
    seconds = quick.estimate(small, split, "gibbs", 3, {"num_samples": 100}, 2)
    warmup = get_engine("gibbs").options["num_warmup"]
    assert seconds == pytest.approx(3.0 + 2 * (warmup + 100) * 0.8 / 4, rel=1e-12)
    assert calls == [
        {"mask": split.train, "num_samples": 2, "num_warmup": 2, "progress": False}
    ]  # fmt: skip


def test_the_probes_stop_after_one_iteration_then_a_few_on_one_program(small, monkeypatch):
    """What the estimate's formula assumes of the real probes (their seconds are timed by
    benchmarks/report_estimate.py)."""
    made, real = [], quick.fit

    def spy(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(quick, "fit", spy)
    split = bernmf.data.split.paper_split(small.shape)
    quick.estimate(small, split, "em", 3, {"max_iter": 300}, 1)
    _, once, more = made
    assert once.n_iter == 1 < more.n_iter < 300
    assert once.timings["compile"] == more.timings["compile"] == 0.0  # the probe's program


def test_the_ensembles_of_the_seeds_share_their_members(small, monkeypatch):
    """The ensemble rows of seeds 0 and 1 (members 0, 1 and 1, 2) fit members 0, 1, 2
    once, in one runner call, and equal bernmf.fit's ensembles scored on test."""
    from bernmf.fitting import runner

    calls = []
    real = runner.fit_settings

    def spy(engine, data, rank, priors, seeds, options, held_out=None, **batching):
        calls.append(list(seeds))
        return real(engine, data, rank, priors, seeds, options, held_out, **batching)

    monkeypatch.setattr(runner, "fit_settings", spy)
    split = bernmf.data.split.paper_split(small.shape)
    options = {"max_iter": 50}
    rows = report._ensemble_rows(small, split, "mm", 2, None, [0, 1], 2, "mean", options)
    assert calls == [[0, 1, 2]]
    monkeypatch.undo()
    for seed, (row, made) in zip((0, 1), rows, strict=True):
        direct = bernmf.fit(
            small, "mm", 2, mask=split.train, seed=seed, restarts=2, combine="mean",
            validation=split.validation, **options,
        )  # fmt: skip
        assert row["perplexity"] == pytest.approx(direct.perplexity(small, split.test), rel=1e-12)
        assert [m.seed for m in made.members] == [seed, seed + 1]
        assert made.extras["run"]["seeds"] == direct.extras["run"]["seeds"]
