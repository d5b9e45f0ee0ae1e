"""``bernmf report`` (bernmf.studies.report): tuned on validation, scored on test, as HTML."""

from __future__ import annotations

import base64
import dataclasses
import types
import warnings

import numpy as np
import pandas as pd
import pytest
from helpers import count_reads

import bernmf
from bernmf import plot
from bernmf.cli.parser import main
from bernmf.inference import get_engine
from bernmf.studies.report import budget as quick
from bernmf.studies.report import page
from bernmf.studies.report import run as report
from bernmf.studies.report.contents import Report


@pytest.fixture(scope="module")
def small():
    Y, _, _ = bernmf.simulate(0, 40, 30, 3, bernmf.Prior(0.3, 0.6, 0.5))
    return np.asarray(Y, float)


@pytest.fixture(scope="module")
def counted(small):
    """The report of ``small`` and the names under which Y's values were read."""
    with pytest.MonkeyPatch.context() as patch:
        reads = count_reads(patch)
        made = report.run(
            {"small": small}, ["mm", "em"], ranks=(2, 3), shared_rank=3, priors=(1.0, 1.5),
            seeds=range(2), restarts=2, progress=False,
        )  # fmt: skip
    return made, reads


@pytest.fixture(scope="module")
def result(counted):
    return counted[0]


@pytest.mark.slow
def test_a_dataset_is_checked_once_for_the_whole_report(counted):
    """Every probe, tuning grid, comparison, stack and score selects from the checked data
    (it read Y's values 33 times at ea4e788: ``benchmarks/y_reads.py``)."""
    assert counted[1] == ["Y"]


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
    # the rank chosen by em is the one of lowest validation perplexity (its tuning study
    # scores its grid on split.validation), whatever the test entries say; the seeds are
    # scored on test
    tuned, tested = [], []
    run, compare = report.running.run, report.compare

    def run_spy(made, **kwargs):  # the tuning's study, and compare's
        if "tuning" in made.name:
            tuned.append(made.matrices[0].split)
        return run(made, **kwargs)

    def compare_spy(*args, test, **kwargs):
        tested.append(test)
        return compare(*args, test=test, **kwargs)

    monkeypatch.setattr(report.running, "run", run_spy)
    monkeypatch.setattr(report, "compare", compare_spy)
    result = report.run(
        {"small": small}, ["em"], ranks=(2, 3), seeds=[0], ensembles=(), progress=False
    )
    split = bernmf.data.split.paper_split(small.shape)
    assert len(tuned) == 1 and np.array_equal(tuned[0].train, split.train)
    assert np.array_equal(tuned[0].test, split.validation) and not tuned[0].validation.any()
    assert tested and all(np.array_equal(mask, split.test) for mask in tested)
    scores = {k: bernmf.fit(small, "em", k, mask=split.train).perplexity(small, split.validation)
              for k in (2, 3)}  # fmt: skip
    assert result.chosen["rank"].item() == min(scores, key=scores.get)


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
        ({"engines": ["mm"], "restarts": 1}, r"restarts must be an integer in \[2, 10000\]"),
        ({"engines": ["mm"], "budget": 0}, "budget must be a number of seconds > 0"),
        ({"engines": ["mm"], "budget": "600"}, "budget must be a number of seconds > 0"),
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


def ensemble_of(seeds, options=None) -> tuple:
    """The plan and settings of mm ensembles of 2 members combined by "mean", one per seed."""
    settings = report.Settings(
        engines=["mm"], ranks=[2], shared_rank=2, priors=[1.0], seeds=seeds, ensembles=["mm"],
        restarts=2, combine="mean", options={"mm": options or {}}, quick=False, progress=False,
        budget=600.0,
    )  # fmt: skip
    return quick.EngineSchedule("mm", [2], [1.0], seeds, 2, options or {}), settings


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
        rows = report._ensemble(
            "small", small, split, report.Tuned("mm", 2, None, [2], (), [2]), *ensemble_of([0])
        )
    assert np.isfinite(rows.table["perplexity"].iloc[0])
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
    ruled_out = fits.assign(perplexity=np.inf)  # inf alone says nothing of being the same fits
    assert len(report.leaderboard(ruled_out)) == 3
    # the test entries' log-probabilities do: the same, -inf at the same entries, one row
    values = np.log(np.linspace(0.2, 0.9, 50))
    values[[3, 17]] = -np.inf
    keys = [("d", "em", "tuned"), ("d", "mm", "shared K=4"), ("d", "em", "shared K=4")]
    entries = dict.fromkeys(keys, values)
    board = report.leaderboard(ruled_out, entries)
    assert len(board) == 1 and board.iloc[0]["engine"] == "em = mm"
    moved = values.copy()
    moved[5] = -np.inf  # a fit ruling out one more entry is another fit
    assert len(report.leaderboard(ruled_out, {**entries, keys[1]: moved})) == 2


def test_a_tuned_prior_equal_to_the_default_fits_the_shared_setting_once(small, monkeypatch):
    """mm's grid holds its default, Beta(1.2, 1.2): at the shared rank, its test fits are the
    shared setting's, made once (only a tuned prior of None was seen as the default); a grid
    of one setting chose nothing, so its row is the shared one alone, not "tuned"."""
    calls = []
    real = report.compare

    def spy(*args, **kwargs):
        calls.append(kwargs.get("options"))
        return real(*args, **kwargs)

    monkeypatch.setattr(report, "compare", spy)
    result = report.run(
        {"small": small}, ["mm"], ranks=(3,), shared_rank=3, priors=(1.2,), seeds=[0],
        ensembles=(), progress=False,
    )  # fmt: skip
    assert len(calls) == 1
    rows = result.fits[result.fits["engine"] == "mm"]
    assert list(rows["setting"]) == ["shared K=3"]
    assert rows["prior"].iloc[0] == "Beta(1.2, 1.2) Dirichlet(1.2)"
    board = report.leaderboard(result.fits, result.entries)
    assert not board["setting"].str.contains("tuned").any()


def test_margins_are_in_nats_with_a_paired_bootstrap_sd_not_the_seeds():
    """Two deterministic rows (sd 0 over seeds): the margin's sd comes from the test entries."""
    rng = np.random.default_rng(0)
    n = 4000
    first = np.log(rng.uniform(0.3, 0.9, n))
    second = first - rng.exponential(0.02, n) * rng.choice([1, -0.5], n)
    fits = pd.DataFrame(
        {"dataset": "d", "engine": ["logsvd"] * 2 + ["vb"] * 2, "setting": "tuned", "rank": 4,
         "prior": "none", "seed": [0, 1] * 2,
         "perplexity": [-first.mean()] * 2 + [-second.mean()] * 2, "seconds": 1.0,
         "compile_seconds": 0.0, "iterations": 10, "ess_per_second": np.nan}
    )  # fmt: skip
    entries = {("d", "logsvd", "tuned"): first, ("d", "vb", "tuned"): second}
    board = report.leaderboard(fits, entries)
    assert board["engine"].tolist() == ["logsvd", "vb"] and (board["perplexity_sd"] == 0).all()
    gap, sd = board.iloc[1][["behind", "behind_sd"]]
    assert gap == pytest.approx(first.mean() - second.mean(), rel=1e-12)
    paired = np.std(first - second, ddof=1) / np.sqrt(n)  # the bootstrap estimates this
    assert 0.8 * paired < sd < 1.2 * paired and board.iloc[0]["behind_sd"] == 0
    assert report.leaderboard(fits, entries).equals(board)  # seeded: the same sd again
    said = report.findings(Report(fits=fits, environment={}, entries=entries))["d"]
    assert f"by {gap:.3g} nats ± {sd:.2g} (sd over 200 paired bootstrap resamples" in said[0]
    assert "sd of the seeds" not in " ".join(said)


def _em_report_scored(small, monkeypatch, rescore):
    """The report of em at ranks 2, 3, 5 on ``small``, its tuning's validation
    perplexities replaced by ``rescore(table)`` (columns rank and perplexity)."""
    real = report._tuning

    def rescored(*args, **kwargs):
        scores, fits = real(*args, **kwargs)
        return scores.assign(perplexity=rescore(scores)), fits

    monkeypatch.setattr(report, "_tuning", rescored)
    return report.run(
        {"small": small}, ["em"], ranks=(2, 3, 5), shared_rank=3, seeds=[0], ensembles=(),
        progress=False,
    )  # fmt: skip


def test_no_advice_is_drawn_from_inf_validation_scores(small, monkeypatch):
    """Every em rank rules a validation entry out: nothing chosen, no edge, no advice."""
    result = _em_report_scored(small, monkeypatch, lambda summary: np.inf)
    chosen = result.chosen.iloc[0]
    assert (chosen["rank"], chosen["edge"], chosen["finite"]) == (3, "", "")
    said = " ".join(report.findings(result)["small"])
    assert "none was chosen; it ran at the shared K = 3" in said
    assert "may do better" not in said and "chose K" not in said


def test_no_edge_is_flagged_when_one_rank_alone_scores_finitely(small, monkeypatch):
    """K = 2 alone is finite: it is chosen, but "a smaller rank may do better" would rest
    on the inf scores of 3 and 5."""

    def only_rank_2(summary):
        return summary["perplexity"].where(summary["rank"] == 2, np.inf)

    result = _em_report_scored(small, monkeypatch, only_rank_2)
    chosen = result.chosen.iloc[0]
    assert (chosen["rank"], chosen["edge"], chosen["finite"]) == (2, "", "2")
    said = " ".join(report.findings(result)["small"])
    assert "em chose K = 2 of 2,3,5 on validation, the only rank whose validation" in said
    assert "may do better" not in said


def test_the_pareto_numbers_never_overlap_and_the_legend_is_outside_the_axes():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    # close pairs (mm tuned / mm ensemble, vb / logsvd), a tie and two off the scale
    board = pd.DataFrame(
        {"dataset": "d",
         "engine": ["mm", "mm ensemble", "vb", "logsvd", "gibbs", "nuts", "svi", "em", "logpca"],
         "setting": ["tuned", "ensemble"] + ["tuned"] * 7,
         "seconds": [0.010, 0.011, 0.03, 0.031, 0.03, 2.0, 0.3, 0.01, 0.5],
         "perplexity": [0.4500, 0.4502, 0.46, 0.4601, 0.46, 0.47, 0.50, 2.0, np.inf]}
    )  # fmt: skip
    fig = plot.pareto(board)
    ax = fig.axes[0]
    numbers = [t for t in ax.texts if t.get_text().isdigit()]
    assert sorted(int(t.get_text()) for t in numbers) == list(range(1, 10))
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in numbers]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    frame = ax.get_window_extent(renderer)
    legend = ax.get_legend().get_window_extent(renderer)
    assert legend.x0 > frame.x1  # right of the axes, covering no point
    assert all(frame.contains(*box.get_points().mean(axis=0)) for box in boxes)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[0] == "1  mm tuned: 0.45" and labels[1] == "2  mm ensemble: 0.4502"
    # off-scale points keep their engine's colour, in the axes and in the legend
    import matplotlib.colors

    (arrows,) = [c for c in ax.collections if c.get_label().startswith("_")]  # no engine's
    colours = {tuple(c) for c in arrows.get_facecolor()}
    assert colours == {matplotlib.colors.to_rgba(plot.engine_color(e)) for e in ("em", "logpca")}
    handles = dict(zip(labels, ax.get_legend().legend_handles, strict=True))
    assert handles["8  em tuned: 2 (off scale)"].get_color() == plot.engine_color("em")
    # inf alone (no other point far off) is off the scale too, drawn and numbered
    fig = plot.pareto(board[board["engine"] != "em"])
    ax = fig.axes[0]
    assert sorted(int(t.get_text()) for t in ax.texts) == list(range(1, 9))
    assert ax.get_legend().get_texts()[-1].get_text() == "8  logpca tuned: inf (off scale)"


def test_the_weights_table_shows_the_positive_weights_and_sums_the_rest():
    weights = pd.DataFrame(
        {"dataset": "d", "seed": 0, "stack": "stacked: all engines",
         "engine": ["mm", "mm", "vb", "em", "logsvd", "baseline"], "rank": [2, 4, 4, 4, 4, 1],
         "weight": [0.0, 0.7, 1e-6, 0.0, 0.3 - 1e-6, 0.0]}
    )  # fmt: skip
    table = page.stacking_weights_table(weights)
    assert table["engine"].tolist() == ["mm", "logsvd", "4 others, each under 0.0005"]
    assert table["weight"].tolist() == pytest.approx([0.7, 0.3 - 1e-6, 1e-6])


def priced(monkeypatch, seconds: dict):
    """Make a fit of engine e cost ``seconds[e]`` at the shared rank (in proportion to its
    rank), with no probe fit, no scoring and no stacks."""
    monkeypatch.setattr(
        quick, "probe", lambda Y, split, engine, *a: quick.Probe(engine, 0.0, 0.0, seconds[engine])
    )
    monkeypatch.setattr(quick, "scoring_seconds", lambda *a: 0.0)
    monkeypatch.setattr(quick, "stacking_probe", lambda *a: (0.0, 1))


def test_quick_leaves_out_the_engines_over_its_budget_and_says_so(small, monkeypatch, capsys):
    # fit units of quick's plans: mm 8 (its prior, 2 seeds, 2 shared, ensemble of 3), others 2
    seconds = {"mm": 25.0, "em": 250.0, "vb": 30.0, "logsvd": 15.0}  # mm is always kept
    priced(monkeypatch, seconds)
    engines = ["mm", "em", "vb", "logsvd"]
    result = report.run({"small": small}, engines, quick=True, progress=True)
    # the two stacks of mm's fits alone are the same stack: one row
    assert set(result.fits["engine"]) == {"mm", "mm ensemble", "stacked: all engines"}
    assert result.left_out.to_dict("records") == [
        {"dataset": "small", "engine": e, "estimate": 2 * seconds[e]}
        for e in ("em", "vb", "logsvd")
    ]
    err = capsys.readouterr().err
    assert "report on small: estimated 200 s (mm 200 s)" in err
    assert "report on small: leaving out em, estimated 500 s at its shortest, so that" in err
    assert "fit the quick budget of" in err
    seconds["mm"] = 5.0  # now logsvd (30 s) fits, and then vb (60 s) would not
    result = report.run({"small": small}, engines, quick=True, progress=False)
    assert set(result.fits["engine"]) == {
        "mm", "mm ensemble", "logsvd", "stacked: all engines", "stacked: mm grid"
    }  # fmt: skip
    assert any("em was left out" in line for line in report.findings(result)["small"])


def test_plans_over_the_budget_are_shortened_the_most_expensive_first(small, monkeypatch, capsys):
    """em (15 s a fit) over a budget of 80 s: 2 seeds (it has 2), then its shared rank only.
    Every engine is estimated before the first fit of the report, and each step is said."""
    seconds = {"mm": 0.5, "em": 15.0}
    priced(monkeypatch, seconds)
    result = report.run(
        {"small": small}, ["mm", "em"], ranks=(2, 3), shared_rank=3, priors=(1.0,),
        seeds=range(2), ensembles=(), budget=80, progress=True,
    )  # fmt: skip
    plans = result.plans.set_index("engine")
    # em: 2 seeds at rank 3, 2 at the shared rank 3, tuning at 2 and 3: 5.67 units of 15 s
    assert plans.loc["em", "estimate"] == pytest.approx(15 * (2 + 2 + 5 / 3))
    assert plans.loc["em", "changes"] == "K = 3 only" and plans.loc["em", "seconds"] == 30
    assert plans.loc["mm", "changes"] == "" and result.budget == 80
    chosen = result.chosen.set_index("engine")
    assert chosen.loc["em", "grid"] == "3" and chosen.loc["mm", "grid"] == "2,3"
    em = result.fits[result.fits["engine"] == "em"]  # not tuned: the shared rows alone
    assert set(em["rank"]) == {3} and list(em["setting"]) == ["shared K=3"] * 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    first_fit = min(i for i, line in enumerate(lines) if ": tuning " in line)
    assert max(i for i, line in enumerate(lines) if ": probing " in line) < first_fit
    assert "report on small: em shortened to fit the budget of 80 s: K = 3 only" in err
    assert "report on small: tuning mm on K = 2,3, alpha, beta in [1.0]" in err
    assert "report on small: em at K = 3, 2 seeds" in err
    said = report.findings(result)["small"]
    assert any(
        line.startswith("em was shortened to fit the budget of 80 s: K = 3 only") for line in said
    )


def test_a_slow_engine_is_left_out_rather_than_squeezing_the_others():
    """vb takes more than a fair share even at its shortest: out, and em and logsvd keep
    more than their shortest; the most expensive is shortened first; mm is never left out."""

    def plan(engine, per_fit):
        full = quick.EngineSchedule(engine, [2, 3], [1.0], [0, 1], 0, {})
        probe = quick.Probe(engine, 0.0, 0.0, per_fit)  # fit_seconds: per_fit
        seconds = quick.plan_seconds(full, probe, 3)
        return dataclasses.replace(full, estimate=seconds, seconds=seconds), probe

    costs = {"mm": 1.0, "em": 15.0, "logsvd": 14.0, "vb": 100.0}
    made = {("d", e): plan(e, c) for e, c in costs.items()}
    plans, probes = {k: v[0] for k, v in made.items()}, {k: v[1] for k, v in made.items()}
    # full: em 85 s, logsvd 79.3 s, mm 5.7 s; at its shortest (1 seed, K = 3) vb is 100 s
    out = quick._within(plans, probes, list(plans), 120.0, 3, False)
    assert out == {("d", "vb")} and plans["d", "mm"].changes == ()
    assert plans["d", "em"].changes == ("K = 3 only",) and plans["d", "em"].seconds == 30
    assert plans["d", "logsvd"].changes == ()  # 30 + 79.3 + 5.7 s: within the budget
    plans = {k: v[0] for k, v in made.items()}
    out = quick._within(plans, probes, list(plans), 20.0, 3, False)  # room for one of them
    assert out == {("d", "vb"), ("d", "em")} and plans["d", "logsvd"].seconds == 14
    assert quick._within(plans, probes, [("d", "mm")], 0.1, 3, False) == set()  # never mm


def test_a_plan_pays_for_its_members_of_the_stacks():
    mm = quick.EngineSchedule("mm", [2, 4, 8], [1.0, 1.5, 2.0], [0, 1, 2], 4, {})
    em = quick.EngineSchedule("em", [2, 4, 8], [1.0], [0, 1, 2], 0, {})
    # per seed: mm's 27 tuning fits, tuned, shared, ensemble, in two stacks; em's 3, 2
    assert quick.stack_members(mm, 4) == 3 * 30 * 2 and quick.stack_members(em, 4) == 3 * 5
    assert quick.stack_members(dataclasses.replace(em, ranks=[4]), 4) == 3  # tuned = shared
    probe = quick.Probe("em", 0.0, 0.0, 0.0, stacking=0.5, stacked=9, stack_size=9)
    assert quick.plan_seconds(em, probe, 4) == pytest.approx(15 * 0.5)
    # in stacks of 36 members, each costs (36 / 9) ** STACK_GROWTH times the probe's
    probe = dataclasses.replace(probe, stack_size=36)
    assert quick.stack_seconds(em, probe, 4) == pytest.approx(15 * 0.5 * 4**quick.STACK_GROWTH)
    assert quick.stacking_seconds(probe, 36) == pytest.approx(36 * 0.5 * 4**quick.STACK_GROWTH)


def test_once_tuned_the_later_steps_are_costed_by_the_tuning_fits():
    """mm's tuning fits (K = 2, 4 at two priors) took 8 s on the report's clock besides
    compiling, shared in proportion to their run seconds, the mean per rank. Its test
    fits at the chosen K = 4 (2 seeds, their 2 shared ones apart, an ensemble of 3 from
    each seed: 4 members) cost those of K = 4; its tuning stays the probe's."""

    def fitted(rank, run):
        return types.SimpleNamespace(rank=rank, timings={"run": run})

    fits = [fitted(2, 1.0), fitted(2, 1.0), fitted(4, 1.0), fitted(4, 5.0)]
    tuned = quick.tuning_fit_seconds(fits, 8.0)
    assert tuned == pytest.approx({2: 1.0, 4: 3.0})  # 8 s over 8 run seconds
    mm = quick.EngineSchedule("mm", [2, 4], [1.2, 1.5], [0, 1], 3, {})
    probe = quick.Probe("mm", 0.5, 0.0, 0.4, tuning=2.0, scoring=0.1)
    expected = (
        2 * 0.5  # a compilation per rank
        + 2.0 * (2 + 4) / 4  # the tuning of each rank, from the probe of K = 4's
        + 2 * 3.0 + 2 * 3.0 + 4 * 3.0  # tuned, shared, ensemble members: K = 4's fits
        + 2 * 2 * 0.1  # each test fit scored
    )  # fmt: skip
    assert quick.plan_seconds(mm, probe, 4, (4, True), tuned) == pytest.approx(expected)
    # the probe's alone: 0.4 s a fit at K = 4, tuning 4 priors at 0.4 s, the rest as above
    assert quick.plan_seconds(mm, dataclasses.replace(probe, tuning=None), 4, (4, True)) == (
        pytest.approx(1.0 + 4 * 0.4 * 6 / 4 + 8 * 0.4 + 0.4)
    )
    # nuts's tuning fits run one chain, its test fits two, one after the other
    nuts = quick.EngineSchedule("nuts", [2, 4], [1.0], [0], 0, {"num_chains": 2})
    probe = quick.Probe("nuts", 0.0, 0.1, fixed=1.0)  # a chain of 2000 draws: 200 s
    assert quick.plan_seconds(nuts, probe, 4, (2, True), {2: 50.0}) == pytest.approx(
        (1.0 + 200) * (2 + 4) / 4  # tuning: one chain at each rank
        + 2 * 50.0  # K = 2 from its tuning fit, two chains
        + (1.0 + 2 * 200)  # the shared K = 4, not tuned there: the probe's
    )


def test_a_compilation_is_counted_on_the_clock_that_times_the_call(monkeypatch):
    """A call of 4 s wall-clock, 1 s of it compiling (as the fit times it), took 2 CPU
    seconds: 0.5 of them compiling, 1.5 the rest; on the wall clock, 1 s and 3 s."""
    wall, cpu = iter([10.0, 14.0]), iter([0.0, 2.0])
    monkeypatch.setattr(quick, "time", types.SimpleNamespace(perf_counter=lambda: next(wall)))
    compiled = lambda made: made["compile"]  # noqa: E731
    made, seconds, compiling = quick.timed(lambda: {"compile": 1.0}, compiled, lambda: next(cpu))
    assert (seconds, compiling) == pytest.approx((1.5, 0.5)) and made == {"compile": 1.0}
    ticks = iter([0.0, 0.0, 4.0, 4.0])  # one clock: begin, begin, end, end
    monkeypatch.setattr(quick, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))
    _, seconds, compiling = quick.timed(lambda: {"compile": 1.0}, compiled, lambda: next(ticks))
    assert (seconds, compiling) == pytest.approx((3.0, 1.0))


def test_mm_is_probed_as_it_is_tuned_and_the_stack_by_its_fits(small, monkeypatch):
    """mm's tuning probe fits every prior pair in one call, timed on the report's clock
    without its compilation; its converged fits are the stacking probe's members."""
    from bernmf.fitting import runner

    split = bernmf.data.split.paper_split(small.shape)
    clock, calls = [0.0], []

    def settings_fitted(engine, data, rank, priors, seeds, options, held_out=None, **batching):
        calls.append((rank, len(priors), list(seeds), held_out is not None))
        clock[0] += 7.0
        return runner.fit_settings(engine, data, rank, priors, seeds, options, held_out)

    monkeypatch.setattr(quick, "fit_settings", settings_fitted)
    monkeypatch.setattr(quick, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    seconds, fits = quick.tuning_probe(small, split, "mm", 3, {}, [1.2, 2.0], lambda: clock[0])
    compiled = sum(f.timings["compile"] for f in fits)  # the first fit's, when not cached
    assert seconds == pytest.approx(7.0 - compiled) and calls == [(3, 4, [0], True)]
    assert len(fits) == 4
    ticks = iter([0.0, 0.8])
    assert quick.stacking_probe(small, split, 3, fits, lambda: next(ticks)) == (
        pytest.approx(0.2),
        4,
    )


def test_an_engine_whose_plan_no_longer_fits_the_time_left_is_left_out(small, capsys):
    """The estimates before it were short: em's plan needs 30 s, the deadline is past; mm
    (never left out) runs."""
    import time

    mm, settings = ensemble_of([0])
    em = quick.EngineSchedule("em", [2], [1.0], [0], 0, {}, estimate=30.0, seconds=30.0)
    split = bernmf.data.split.paper_split(small.shape)
    settings = dataclasses.replace(settings, progress=True)
    made = report._dataset("small", small, split, [mm, em], settings, time.perf_counter() - 1)
    assert made.left_out == [("small", "em", 30.0)]
    assert [row[1] for row in made.chosen] == ["mm"]
    assert "report on small: leaving out em: 0 s left of the budget, its plan needs 30 s" in (
        capsys.readouterr().err
    )


def test_an_engine_hopeless_by_its_operations_is_left_out_without_a_probe(monkeypatch):
    probed = []
    monkeypatch.setattr(quick, "probe", lambda Y, split, engine, *a: probed.append(engine))
    Y = np.zeros((400, 3000))  # nuts: a leapfrog step at least over 1.2 million entries a draw
    Y[::2] = 1
    split = bernmf.data.split.paper_split(Y.shape)
    settings = report.Settings(
        engines=["nuts"], ranks=[2], shared_rank=2, priors=[1.0], seeds=[0], ensembles=[],
        restarts=2, combine="stack", options={"nuts": {}}, quick=False, progress=False,
        budget=0.2,
    )  # fmt: skip
    kept, left_out, planned = quick.plans({"wide": Y}, {"wide": split}, settings)
    assert kept == {"wide": []} and probed == []
    assert left_out[0][:2] == ("wide", "nuts") and left_out[0][2] > 0.2
    assert np.isnan(planned[0][3])  # no seconds planned


def probes(monkeypatch, timed):
    """Make the budget's probe fits take ``timed``'s ``(compile, run, iterations,
    converged)`` seconds in turn on a fake clock; returns the options of each call, and
    the clock."""
    calls, timed, clock = [], list(timed), [0.0]

    def probe(Y, engine, rank, **options):
        calls.append(options)
        compile_seconds, run, n_iter, converged = timed.pop(0)
        clock[0] += compile_seconds + run
        timings = {"compile": compile_seconds, "run": run}
        return types.SimpleNamespace(
            engine=engine, timings=timings, n_iter=n_iter, converged=converged, sample_stats={}
        )

    monkeypatch.setattr(quick, "fit", probe)
    monkeypatch.setattr(quick, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    return calls, lambda: clock[0]


def test_the_estimate_is_compile_plus_fits_times_the_probes_seconds_per_iteration(
    small, monkeypatch
):
    """A probe compiles; one stopped after an iteration and one after a few time the
    iterations between them (without a call's fixed cost), times max_iter per fit."""
    split = bernmf.data.split.paper_split(small.shape)
    timed = [(2.0, 0.5, 1, False), (0.0, 0.25, 1, False), (0.0, 1.25, 11, False)]
    calls, clock = probes(monkeypatch, timed)
    seconds = quick.estimate(small, split, "em", 3, {"max_iter": 300}, 4, 0.0, clock)
    assert seconds == pytest.approx(2.0 + 4 * 300 * (1.25 - 0.25) / (11 - 1), rel=1e-12)
    assert [c["tol"] for c in calls] == [1e300, 1e300, 1e-2]  # once, once, a few
    assert all(c["max_iter"] == 300 and c["mask"] is split.train for c in calls)
    # iterations too fast to tell from the call: the few iterations' call, per iteration
    _, clock = probes(
        monkeypatch, [(2.0, 0.5, 1, False), (0.0, 0.25, 1, False), (0.0, 0.2, 11, False)]
    )
    seconds = quick.estimate(small, split, "em", 3, {}, 4, 0.0, clock)  # em's max_iter
    max_iter = get_engine("em").options["max_iter"]
    assert seconds == pytest.approx(2.0 + 4 * max_iter * 0.2 / 11, rel=1e-12)


def test_a_convergent_engine_is_costed_by_a_fit_that_converged(small, monkeypatch):
    """The first few iterations (0.1 s each) say 100 fit in 10 s; stopped there unconverged,
    the fit says 0.02 s each, so the next fit may run all 300, and converges in 1 s: a fit
    costs 1 s, not 300 iterations at either rate."""
    split = bernmf.data.split.paper_split(small.shape)
    timed = [(2.0, 0.5, 1, False), (0.0, 0.25, 1, False), (0.0, 1.25, 11, False)]
    calls, clock = probes(monkeypatch, [*timed, (0.0, 2.0, 100, False), (0.0, 1.0, 50, True)])
    probed = quick.probe(small, split, "em", 3, {"max_iter": 300}, 10.0, clock)
    assert probed.measured == pytest.approx(1.0) and probed.compile == 2.0
    assert probed.fit_seconds({"max_iter": 300}) == pytest.approx(1.0)
    assert [c.get("tol") for c in calls[3:]] == [None, None]  # the engine's own tolerance
    assert [c["max_iter"] for c in calls[3:]] == [100, 300]
    # never converged: the seconds per iteration of the longest fit, up to max_iter
    _, clock = probes(monkeypatch, [*timed, (0.0, 2.0, 100, False), (0.0, 6.0, 300, False)])
    probed = quick.probe(small, split, "em", 3, {"max_iter": 300}, 10.0, clock)
    per_iteration = (6.0 - 0.25) / 299  # after the first, apart from the call's 0.25 s
    assert probed.measured is None and probed.per_iteration == pytest.approx(per_iteration)
    max_iter = get_engine("em").options["max_iter"]
    assert probed.fit_seconds({}) == pytest.approx(0.25 + (max_iter - 1) * per_iteration)


def test_the_estimate_of_a_sampler_counts_its_probe_draws(small, monkeypatch):
    split = bernmf.data.split.paper_split(small.shape)
    # a probe of 2 + 2 draws compiles; again, compiled, and one of 10 + 10 draws: 0.075 s a
    # draw (their difference over 16 draws) and 0.1 s besides the draws
    timed = [(3.0, 0.8, 0, None), (0.0, 0.4, 0, None), (1.0, 1.6, 0, None)]
    calls, clock = probes(monkeypatch, timed)
    seconds = quick.estimate(small, split, "gibbs", 3, {"num_samples": 100}, 2, clock=clock)
    warmup = get_engine("gibbs").options["num_warmup"]
    assert seconds == pytest.approx(3.0 + 2 * (0.1 + (warmup + 100) * 0.075), rel=1e-12)
    probe = {"mask": split.train, "num_samples": 2, "num_warmup": 2, "progress": False}
    assert calls == [probe, probe, {**probe, "num_samples": 10, "num_warmup": 10}]
    # nuts's chains run one after the other: its probes run one, its fits two; the short
    # probe's draws (a leapfrog step each) are not a fit's: the call's seconds, and every
    # draw of the longer probe (25 + 5) at (3.4 - 0.4) / 30 s
    calls, clock = probes(monkeypatch, [*timed[:2], (1.0, 3.4, 0, None)])
    probed = quick.probe(small, split, "nuts", 3, {}, 60.0, clock)
    assert [c["num_chains"] for c in calls] == [1, 1, 1]
    assert probed.per_iteration == pytest.approx(0.1) and probed.fixed == pytest.approx(0.4)
    assert probed.fit_seconds({"num_warmup": 50, "num_samples": 50}) == pytest.approx(20.4)
    # a longer probe over the allowance is not made: the short probe's seconds per draw
    _, clock = probes(monkeypatch, timed[:2])
    assert quick.probe(small, split, "gibbs", 3, {}, 0.1, clock).per_iteration == (
        pytest.approx(0.1)
    )


def test_the_probes_stop_after_one_iteration_then_a_few_on_one_program(small, monkeypatch):
    """What the estimate's formula assumes of the real probes (their seconds are timed by
    benchmarks/report_estimate.py)."""
    made, real = [], quick.fit

    def spy(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(quick, "fit", spy)
    split = bernmf.data.split.paper_split(small.shape)
    quick.estimate(small, split, "em", 3, {"max_iter": 300}, 1, allowance=0.0)
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
    tuned = report.Tuned("mm", 2, None, [2], (), [2])
    rows = report._ensemble("small", small, split, tuned, *ensemble_of([0, 1], options))
    assert calls == [[0, 1, 2]]
    monkeypatch.undo()
    for seed, row, made in zip((0, 1), rows.table.to_dict("records"), rows.fits, strict=True):
        direct = bernmf.fit(
            small, "mm", 2, mask=split.train, seed=seed, restarts=2, combine="mean",
            validation=split.validation, **options,
        )  # fmt: skip
        assert row["perplexity"] == pytest.approx(direct.perplexity(small, split.test), rel=1e-12)
        assert [m.seed for m in made.members] == [seed, seed + 1]
        assert made.record.plan["seeds"] == direct.record.plan["seeds"]


def test_the_default_mm_grid_keeps_h_inside_zero_and_one():
    """At alpha = 1 or beta = 1 (the flat prior's) H reaches 0 or 1: on a simulated vote-like
    matrix the report's mm chose alpha = beta = 1 from (1, 1.5, 2) and scored inf on test."""
    import inspect

    priors = inspect.signature(report.run).parameters["priors"].default
    assert min(priors) > 1


def test_a_probe_times_the_engine_and_leaves_warnings_to_the_real_fits():
    Y, _, _ = bernmf.simulate(1, 60, 80, 4, bernmf.Prior(0.05, 0.05, 0.05))  # vote-like
    split = bernmf.data.split.paper_split(Y.shape)
    with pytest.warns(bernmf.models.spec.ZeroProbabilityWarning):  # em gives H 0 and 1 here
        bernmf.fit(Y, "em", 4, mask=split.train)
    with warnings.catch_warnings():
        warnings.simplefilter("error", bernmf.models.spec.ZeroProbabilityWarning)
        probed = quick.probe(Y, split, "em", 4, {}, allowance=60.0)
    assert probed.compile >= 0 and probed.per_iteration > 0


@pytest.mark.slow
def test_a_sampler_is_tuned_on_validation_with_its_own_progress_off(small, capsys):
    """Its options say progress=False (the report's), which tune.grid also sets: it was
    given twice, and the report stopped at the first sampler it tuned."""
    result = report.run({"small": small}, ["vb", "gibbs"], ranks=(2, 3), seeds=[0],
                        ensembles=(), budget=600)  # fmt: skip
    chosen = result.chosen.set_index("engine")
    assert set(chosen.index) == {"vb", "gibbs"} and set(chosen["rank"]) <= {2, 3}
    assert "gibbs K=3" in capsys.readouterr().err  # the tuning's lines, not the sampler's bar


def test_a_shortened_plan_says_its_draws_of_those_asked_and_so_do_its_rows():
    svi = quick.EngineSchedule("svi", [4], [1.0], [0], 0, {})
    while "steps" not in " ".join(svi.changes):
        svi = quick.shortened(svi, 4)
    assert svi.changes[-1] == svi.draws == "2500 of 5000 steps"
    svi = quick.shortened(svi, 4)  # halved again: said once, of the steps asked
    assert svi.changes == ("1250 of 5000 steps",) and svi.options["steps"] == 1250
    assert report._setting("shared K=4", svi) == "shared K=4, 1250 of 5000 steps"
    nuts = quick.EngineSchedule("nuts", [4], [1.0], [0], 0, {"num_warmup": 200, "num_samples": 100})
    nuts = quick.shortened(nuts, 4)
    assert nuts.draws == "100 of 200 warmup + 50 of 100 samples"
    assert report._setting("tuned", quick.EngineSchedule("vb", [4], [1.0], [0], 0, {})) == "tuned"


def test_the_report_saves_its_winning_fit_and_the_page_names_it(small, tmp_path):
    result = report.run(
        {"small": small}, ["mm", "em"], ranks=(3,), shared_rank=3, priors=(1.2,), seeds=[0, 1],
        ensembles=(), progress=False,
    )  # fmt: skip
    board = report.leaderboard(result.fits, result.entries)
    best = board.iloc[0]
    won = result.winners["small"]
    assert (won.engine, won.setting, won.seed) == (best["engine"].split(" = ")[0],
                                                   best["setting"].split(" = ")[0], 0)  # fmt: skip
    paths = report.write(result, tmp_path)
    assert paths["winner-small.npz"] == tmp_path / "winner-small.npz"
    loaded = bernmf.load(tmp_path / "winner-small.npz")
    split = bernmf.data.split.paper_split(small.shape)
    assert loaded.engine == won.fit.engine and loaded.rank == won.fit.rank
    np.testing.assert_array_equal(loaded.W, won.fit.W)
    np.testing.assert_array_equal(loaded.probs, won.fit.probs)
    seed0 = result.fits[
        (result.fits["engine"] == won.engine) & (result.fits["setting"] == won.setting)
    ].iloc[0]  # fmt: skip
    assert loaded.perplexity(small, split.test) == pytest.approx(seed0["perplexity"], rel=1e-12)
    page = paths["report.html"].read_text()
    assert "winner-small.npz" in page and "bernmf.load" in page
    assert page.count("Seconds per engine") == 2  # the explanation and the table's title


def test_an_engines_estimate_and_measured_seconds_are_on_its_page():
    """A tiny run of gibbs (its draws' seconds, not a call's, make its time): the seconds its
    probes estimate for its steps and those they took, side by side on the page. No test
    asserts a time: how near they are is measured by hand on a 150 x 5429 matrix
    (docs/report.md). Compiled by a first run."""
    Y, _, _ = bernmf.simulate(0, 100, 300, 3, bernmf.Prior(0.3, 0.6, 0.5))
    arguments = {"ranks": (3,), "shared_rank": 3, "seeds": [0], "progress": False}
    report.run({"tiny": Y}, ["gibbs"], **arguments)
    result = report.run({"tiny": Y}, ["gibbs"], **arguments)
    plans = result.plans.set_index("engine")
    assert list(plans.index) == ["gibbs", "stacks"]
    ratio = plans.loc["gibbs", "measured"] / plans.loc["gibbs", "estimated"]
    assert np.isfinite(ratio) and ratio > 0, plans
    times = page.times_table(result, "tiny").set_index("engine")
    assert times.loc["gibbs", "measured / estimated"] == pytest.approx(ratio)
    assert times.loc["gibbs", "plan"] == "as asked"
