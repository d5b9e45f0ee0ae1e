"""The study runner: a tiny study on simulated data, its table, its choices made on
validation only, and ``bernmf reproduce <study> --quick``."""

from __future__ import annotations

import dataclasses
import io
import warnings

import numpy as np
import pandas as pd
import pytest
from helpers import shared_file

import bernmf
from bernmf.cli.parser import main
from bernmf.data.split import Split, random_split
from bernmf.fitting import grids
from bernmf.posterior.mixing import STATUSES
from bernmf.studies.runner import running
from bernmf.studies.runner.study import Grid, Matrix, Method, Simulation, Study

TINY = Study(
    "tiny",
    grids=(
        Grid("mm", (2, 3), ((1.5, 1.5, 1.0), (2.0, 3.0, 1.0)), {"max_iter": 50}),
        Grid("em", (2,), options={"max_iter": 50}),
    ),
    methods=(
        Method("single", "single"),
        Method("mm best", "best", ("mm",)),
        Method("mm mean", "mean", ("mm",)),
        Method("stack", "stack"),
        Method("stack members", "stack members"),
        Method("refit", "stack+refit"),
        Method("mm stack chosen", "stack chosen", ("mm",)),
        Method("em setting", "stack setting", ("em",)),
    ),
    simulations=(Simulation(30, 20, 3),),
    split="random",
    members=(1, 2),
    seed_sets=2,
    metrics=("min_test_probability",),
)
"""Two engines, two seed sets of R = 1 and 2 members, every rule."""

CHOICES = ["validation_perplexity", "chosen", "rank", "alpha", "beta", "seed", "weights"]
"""The columns that the validation entries decide."""


BUDGETED = Study(
    "scaled_study",
    grids=(
        Grid("mm", (2,), ((1.5, 1.5, 1.0),), {"max_iter": 50}, members=2, scales=(1, 2),
             scaled=("members",)),
        Grid("gibbs", (2,), ((1.0, 1.0, 1.0),), {"num_warmup": 10, "num_samples": 10,
             "progress": False}, members=2, scales=(1, 2), scaled=("num_warmup", "num_samples")),
    ),
    methods=(
        Method("mm", "first", ("mm",), scales=(1,)),
        Method("mm mean", "mean", ("mm",)),
        Method("gibbs", "chains", ("gibbs",)),
    ),
    simulations=(Simulation(20, 15, 2),),
    split="random",
    fractions=(0.7, 0.1, 0.2),
    metrics=("ece", "coverage", "mixing"),
)  # fmt: skip
"""Scales scaling mm's members and Gibbs's sweeps, the first and chains rules, and the
calibration, coverage and mixing metrics."""

UNSPLIT = Split(np.ones((4, 3), bool), np.zeros((4, 3), bool), np.zeros((4, 3), bool))
"""A split of a 4 x 3 matrix without validation entries."""


@pytest.fixture(scope="module")
def tiny():
    return running.run(TINY)


@pytest.fixture(scope="module")
def scaled_study():
    return running.run(BUDGETED)


def test_a_budget_scales_members_and_options(scaled_study):
    table, fits = scaled_study.table, scaled_study.fits
    assert list(zip(table["scale"], table["method"], strict=True)) == [
        (1, "mm"), (1, "mm mean"), (1, "gibbs"), (2, "mm mean"), (2, "gibbs"),
    ]  # fmt: skip
    # mm's 4 seeds fitted once (its options are those of every scale), the first 2 at b = 1
    mm = fits[fits["grid"] == "mm"]
    assert sorted(mm["seed"]) == [0, 1, 2, 3]
    first = table[table["method"] == "mm"]
    assert first["seed"].item() == 0  # the seed set's first seed, not the best of two
    mean = table[table["method"] == "mm mean"]
    assert first["cpu_seconds"].item() < mean["cpu_seconds"].iloc[0]  # one fit of the two
    # Gibbs fitted at each scale, twice the sweeps (warmup and kept) at b = 2
    gibbs = fits[fits["grid"] == "gibbs"]
    assert len(gibbs) == 4 and sorted(set(gibbs["iterations"])) == [20, 40]


def test_warmup_compiles_what_the_timed_calls_run(monkeypatch):
    """With warmup, each timed call fits as many seeds as the untimed one before it (one
    seed set's share): a sampler's program depends on its chain count, mm's on its batch."""
    calls, fit_settings = [], grids.fit_settings

    def recorded(engine, data, rank, priors, seeds, *more, **batching):
        calls.append((engine.name, len(priors), list(seeds)))
        return fit_settings(engine, data, rank, priors, seeds, *more, **batching)

    monkeypatch.setattr(grids, "fit_settings", recorded)
    running.run(dataclasses.replace(BUDGETED, seed_sets=2, warmup=True), stream=io.StringIO())
    mm = [seeds for engine, _, seeds in calls if engine == "mm"]
    assert mm == [[1_000_000, 1_000_001, 1_000_002, 1_000_003], [0, 1, 2, 3], [4, 5, 6, 7]]
    gibbs = [seeds for engine, _, seeds in calls if engine == "gibbs"]
    assert gibbs == [[1_000_000, 1_000_001], [0, 1], [2, 3]] * 2  # at scales 1 and 2


def test_warmup_of_a_prior_grid_compiles_once_per_program(monkeypatch):
    """Choosing among priors, the untimed call fits every prior for mm (its batch holds
    them), stopped after its first iterations, and one for a sampler (a program per rank,
    the prior an argument): the timed calls then compile nothing."""
    calls, iterations, fit_settings = [], [], grids.fit_settings

    def recorded(engine, data, rank, priors, seeds, *more, **batching):
        made = fit_settings(engine, data, rank, priors, seeds, *more, **batching)
        compiled = sum(m.fit.timings.get("compile", 0.0) for m in made)
        calls.append((engine.name, len(priors), seeds[0] >= grids.WARMUP_SEED, compiled))
        iterations.append(max(m.fit.n_iter for m in made) if engine.name == "mm" else None)
        return made

    monkeypatch.setattr(grids, "fit_settings", recorded)
    priors = ((1.5, 1.5, 1.0), (2.0, 3.0, 1.0))
    choosing = Study(
        "choosing",
        grids=(
            Grid("mm", (2,), priors, {"max_iter": 50}, members=2),
            Grid("gibbs", (2,), priors, {"num_warmup": 10, "num_samples": 10,
                 "progress": False}, members=2),
        ),
        methods=(Method("gibbs", "chains", ("gibbs",)),),
        simulations=(Simulation(20, 15, 2),), split="random", fractions=(0.7, 0.1, 0.2),
        choose_seed=0, warmup=True,
    )  # fmt: skip
    running.run(choosing, stream=io.StringIO())
    warm = [(engine, count) for engine, count, warming, _ in calls if warming]
    assert warm == [("mm", 2), ("gibbs", 1), ("mm", 1), ("gibbs", 1)]  # choices, then members
    timed = [(engine, count) for engine, count, warming, _ in calls if not warming]
    assert timed == [("mm", 2), ("gibbs", 2), ("mm", 1), ("gibbs", 1)]
    assert all(compiled == 0 for engine, _, warming, compiled in calls if not warming)
    mm = [(n, call[2]) for n, call in zip(iterations, calls, strict=True) if call[0] == "mm"]
    assert max(n for n, warming in mm if warming) <= 3  # stopped at WARMUP_TOL
    assert min(n for n, warming in mm if not warming) > 3


def test_the_chains_rule_and_metrics(scaled_study):
    table = scaled_study.table.set_index(["method", "scale"])
    chains = table.loc["gibbs"]
    assert chains["mixing"].isin(STATUSES).all()
    assert chains["chain_rule"].isin(["mean", "chain stacking"]).all()
    assert chains["modes"].ge(1).all() and chains["share_rhat_le_bound"].between(0, 1).all()
    assert chains["rhat_bound"].ge(1.01).all() and chains["ess_bulk_chain_min"].gt(0).all()
    assert chains["coverage_90"].astype(float).between(0, 1).all()
    assert (chains["coverage_90"].astype(float) >= chains["coverage_50"].astype(float)).all()
    assert (table.loc["mm mean", "coverage_90"] == "no interval").all()
    assert table.loc["mm mean", "mixing"].isna().all()
    assert table["ece"].between(0, 1).all()
    bins = scaled_study.reliability
    test = running.split_of(BUDGETED, (20, 15)).test
    counts = bins.groupby(["method", "scale"])["count"].sum()
    assert len(counts) == len(table) and (counts == test.sum()).all()
    assert chains["rhat_nested_max"].isna().all()  # each chain its own start


@pytest.mark.slow
def test_the_chains_rule_reports_nested_rhat_over_start_groups():
    """4 Gibbs chains, 2 a start (chains_per_start, read from the fits): the row has a
    nested R-hat, which chains each of its own start (above) do not."""
    grid = Grid("gibbs", (2,), ((1.0, 1.0, 1.0),), {"num_warmup": 10, "num_samples": 10,
                "chains_per_start": 2, "progress": False}, members=4)  # fmt: skip
    paired = dataclasses.replace(
        BUDGETED, grids=(grid,), methods=(Method("gibbs", "chains"),), metrics=("mixing",)
    )
    row = running.run(paired, stream=io.StringIO()).table.iloc[0]
    assert row["rhat_nested_max"] >= 1.0 and row["mixing"] in STATUSES


def test_the_table_has_a_row_per_dataset_seed_set_and_method(tiny):
    table = tiny.table
    assert len(table) == 2 * 2 * len(TINY.methods)  # R in {1, 2} x 2 seed sets x methods
    counts = table.groupby(["R", "seed_set"]).size()
    assert (counts == len(TINY.methods)).all()
    assert set(table["dataset"]) == {"simulated-30x20-K3-seed0"}
    assert np.isfinite(table["test_perplexity"]).all() and (table["cpu_seconds"] > 0).all()
    refit = table["rule"] == "stack+refit"
    assert table.loc[refit, "validation_perplexity"].isna().all()
    assert np.isfinite(table.loc[~refit, "validation_perplexity"]).all()
    stacks = table["rule"].str.startswith("stack")
    assert table.loc[stacks, "weights"].str.contains("baseline").all()
    assert (table["min_test_probability"] > 0).all()
    # R = 2: each seed set has its own seeds, the mm mean mixes two members
    means = table[(table["method"] == "mm mean") & (table["R"] == 2)]
    assert means["seed"].isna().all() and means["chosen"].str.startswith("mm K=").all()
    # the fits table: mm 2 ranks x 2 priors x 4 seeds (the pool of 2 x 2), em 4 seeds
    assert len(tiny.fits) == 2 * 2 * 4 + 4
    np.testing.assert_allclose(
        tiny.weights.groupby(["R", "seed_set", "method"])["weight"].sum(), 1.0
    )


def test_the_single_fit_is_the_member_of_least_validation_perplexity(tiny):
    table, fits = tiny.table, tiny.fits
    row = table[(table["method"] == "single") & (table["R"] == 1) & (table["seed_set"] == 0)]
    seed0 = fits[fits["seed"] == 0]  # seed set 0 of R = 1: seed 0 of every setting
    assert row["validation_perplexity"].item() == seed0["validation_perplexity"].min()


def test_changing_test_entries_changes_no_choice(tiny, monkeypatch):
    Y = running.load_data(TINY.simulations[0])
    test = running.split_of(TINY, Y.shape).test
    flipped = np.where(test, 1 - Y, Y)
    monkeypatch.setattr(running, "load_data", lambda data, data_dir: flipped)
    other = running.run(TINY)
    pd.testing.assert_frame_equal(other.table[CHOICES], tiny.table[CHOICES])
    assert (other.table["test_perplexity"] != tiny.table["test_perplexity"]).all()


def test_a_spent_budget_starts_no_fit_and_no_seed_set(capsys):
    spent = running.run(Study(**{**TINY.__dict__, "budget": 0.0}))
    assert spent.table.empty and spent.fits.empty
    assert "left out mm K=2 (the budget of 0 CPU s is spent)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "change, message",
    [
        ({"methods": (Method("x", "median"),)}, "rule must be one of"),
        ({"methods": (Method("x", "single", ("vb",)),)}, "no grid"),
        ({"grids": (Grid("nope", (2,)),)}, "nope"),
        ({"grids": (Grid("mm", (0,)),)}, "rank must be >= 1"),
        ({"grids": (Grid("mm", (2,), options={"max_iterations": 5}),)}, "max_iterations"),
        ({"grids": (Grid("logsvd", (2,), ((1.0, 1.0, 1.0),)),)}, "prior"),
        ({"grids": (Grid("mm", (2,), ((1.0, 1.0),)),)}, "alpha, beta, gamma"),
        ({"datasets": ("animal",)}, "unknown datasets"),
        (
            {
                "grids": (Grid("mm-as-published", (2,)),),
                "methods": (Method("refit", "stack+refit"),),
            },
            "not refitted",
        ),
        ({"pool": 1, "members": (2,)}, "pool 1"),
        ({"metrics": ("auc",)}, "metrics"),
        ({"grids": (Grid("mm", (2,), scales=(0,)),)}, "scales must be integers"),
        ({"grids": (Grid("mm", (2,), scaled=("steps",)),)}, "'steps'"),
        ({"grids": (Grid("mm", (2,), scaled=("tol",)),)}, "not an integer option"),
        ({"methods": (Method("x", "chains"),)}, "needs a sampler"),
        (
            {"grids": (Grid("gibbs", (2,), members=1),), "methods": (Method("x", "chains"),)},
            "needs >= 2 chains",
        ),
        (
            {"grids": (Grid("mm", (2,)), Grid("vb", (2,), rank_from="mm"))},
            "rank_from needs choose_seed",
        ),
        ({"matrices": (Matrix("m", np.zeros((4, 3)), UNSPLIT),)}, "no validation entries"),
        ({"matrices": (Matrix("m", np.zeros((4, 2)), UNSPLIT),)}, r"train has shape \(4, 3\)"),
        ({"grids": (Grid("mm", (2,), as_fit={"restart": 2}),)}, "as_fit takes restarts"),
        ({"grids": (Grid("mm-as-published", (2,), as_fit={}),)}, "of a registered engine"),
        ({"seeds": (5,), "members": (2,)}, "more members than seeds"),
        ({"keep_draws": False, "metrics": ("coverage",)}, r"\['coverage'\] read draws"),
    ],
)
def test_a_bad_study_is_refused_before_anything_runs(change, message):
    grids = {"grids": (Grid("mm", (2,)),)} if "grids" not in change else {}
    fields = {**TINY.__dict__, "methods": (Method("single", "single"),), **grids, **change}
    with pytest.raises((ValueError, TypeError), match=message):
        Study(**fields)


def test_a_matrix_of_fits_as_bernmf_fit_makes_them():
    """A user's matrix without validation entries: rule ``each`` gives a row per fit, each
    the fit ``bernmf.fit`` makes from its seed (gibbs with its two chains), scored on the
    test entries; ``watch`` sees every step's settings."""
    Y, _, _ = bernmf.simulate(2, 30, 20, 2)
    split = random_split(Y.shape, (0.8, 0.0, 0.2), seed=3)
    options = {"mm": {"max_iter": 40}, "gibbs": {"num_warmup": 10, "num_samples": 10,
                                                 "num_chains": 2}}  # fmt: skip
    seen = []
    made = running.run(
        Study(
            "fits", grids=(Grid("mm", (2, 3), options=options["mm"], as_fit={}),
                           Grid("gibbs", (2,), options=options["gibbs"], as_fit={})),
            methods=(Method("fits", "each"),), matrices=(Matrix("m", Y, split),),
            seeds=(4, 9), seed_sets=2,
        ),
        stream=io.StringIO(), watch=seen.append,
    )  # fmt: skip
    table = made.table
    expected = [(e, k, s) for s in (4, 9) for e, k in (("mm", 2), ("mm", 3), ("gibbs", 2))]
    assert [(e, k) for e, k, _ in expected[:3]] == [(s.grid.engine, s.rank) for s in seen]
    assert [len(s.members) for s in seen] == [2, 2, 2]
    assert table["validation_perplexity"].isna().all()
    for i, (engine, rank, seed) in enumerate(expected):
        direct = bernmf.fit(Y, engine, rank, mask=split.train, seed=seed, **options[engine])
        row = table.iloc[i]
        assert (row["rank"], row["seed"], row["rule"]) == (rank, seed, "each")
        assert row["test_perplexity"] == pytest.approx(direct.perplexity(Y, split.test), rel=1e-9)
        fit = made.result_of(method="fits", seed_set=i // 3, chosen=row["chosen"])
        assert (fit.engine, fit.n_iter) == (engine, direct.n_iter)


def test_a_grid_prior_whose_gamma_the_rank_divides_keeps_it_at_every_rank():
    """A Prior given to a grid is kept as it is: vb's default rescales gamma by the rank."""
    from bernmf.inference import get_engine

    prior = get_engine("vb").prior_from(1.5, 1.5)
    scaled = Study(
        "scaled", (Grid("vb", (2, 4), (prior,), {"max_iter": 20}),), (Method("single", "single"),),
        simulations=(Simulation(20, 15, 2),), split="random",
    )  # fmt: skip
    fits = running.run(scaled, stream=io.StringIO()).fits
    assert fits[["rank", "gamma"]].values.tolist() == [[2, 0.5], [4, 0.25]]


def test_a_row_scored_inf_says_so_in_the_table_without_warning():
    """The flat prior puts H at 0 on a column of zeros in training whose test entries are
    ones: the single fit's row is inf, a finding of the study rather than a warning (20
    of them in a run of posterior_vs_map, one a seed set of em's means)."""
    rng = np.random.default_rng(0)
    Y = (rng.random((30, 12)) < 0.5).astype(float)
    Y[:, 0], Y[25:, 0] = 0.0, 1.0
    train = np.ones(Y.shape, bool)
    train[25:, :6] = False
    validation = np.zeros(Y.shape, bool)
    validation[25:27, 1:6] = True  # column 0's held-out ones are all test entries
    split = Split(train, validation, ~train & ~validation)
    flat = Study(
        "flat", (Grid("mm", (2,), ((1.0, 1.0, 1.0),), {"max_iter": 50}),),
        (Method("single", "single"),), matrices=(Matrix("ruled out", Y, split),),
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error", bernmf.ZeroProbabilityWarning)
        made = running.run(flat, stream=io.StringIO())
    assert made.table["test_perplexity"].tolist() == [np.inf]


@pytest.mark.slow
def test_reproduce_modes_quick(tmp_path, capsys):
    data_dir = shared_file("data", "animals.csv").parent
    out = tmp_path / "modes"
    argv = ["reproduce", "modes", "--quick", "--data-dir", str(data_dir), "--out", str(out)]
    assert main([*argv, "--quiet"]) == 0
    results = pd.read_csv(out / "results.csv")
    methods = {"single", "best of R", "uniform R", "stacked R", "grid-stacked R", "vb R", "gibbs R"}
    assert set(results["method"]) == methods
    assert results.groupby(["method", "R"]).size().eq(2).all()
    assert results["test_perplexity"].between(0.3, 0.7).all()
    summary = pd.read_csv(out / "summary.csv").set_index(["method", "R"])
    # stacking over the grid uses every member: on validation it is at least as good
    validation = summary["validation_mean"]
    assert validation["grid-stacked R", 3] <= validation["uniform R", 3] + 1e-9
    assert (out / "modes.png").stat().st_size > 0
    assert main([*argv, "--as-published"]) == 1
    assert "--as-published is the paper's" in capsys.readouterr().err


@pytest.mark.slow
def test_reproduce_posterior_vs_map_quick(tmp_path):
    """Every family on 2 simulated matrices and 2 splits of animals: its tables, figures,
    primary scores, paired intervals and chain rules."""
    data_dir = shared_file("data", "animals.csv").parent
    argv = ["reproduce", "posterior_vs_map", "--quick", "--quiet", "--data-dir", str(data_dir)]
    assert main([*argv, "--out", str(tmp_path / "pvm")]) == 0
    out = tmp_path / "pvm"
    figures = ("reliability.png", "coverage.png", "score_vs_cpu.png", "differences.png")
    for name in ("rows.csv", "table.csv", "reliability.csv", "tuning.csv", "summary.csv", *figures):
        assert (out / name).stat().st_size > 0, name
    summary = pd.read_csv(out / "summary.csv")
    families = {"mm", "em", "nuts", "svi_normal", "gibbs", "vb"}  # --quick: no low-rank guide
    for dataset, primary in (("simulated 24x18 K=2", "kl_truth"), ("animals", "test_perplexity")):
        rows = summary[summary["dataset"] == dataset]
        assert set(rows["family"]) == families and set(rows["primary"]) == {primary}
        assert set(rows["scale"]) == {1, 2, 4}  # the MAP ensembles' scales run further
        assert set(rows.loc[~rows["family"].isin(["mm", "em"]), "scale"]) == {1, 2}
        assert (rows["units"] == 2).all()
        assert rows["score"].equals(rows[primary])
        best = rows[rows["diff_mean"] == 0]
        assert set(best["family"]) <= {"mm", "em"} and len(set(rows["best_map"])) == 1
        finite = np.isfinite(rows["diff_mean"])
        assert (rows.loc[finite, "diff_low"] <= rows.loc[finite, "diff_mean"] + 1e-12).all()
        assert ((rows["ece"] >= 0) & (rows["ece"] < 1) & (rows["ece_floor"] > 0)).all()
        assert (rows["cpu_seconds"] > 0).all() and (rows["tuning_seconds"] >= 0).all()
        chained = rows[rows["family"].isin(["nuts", "gibbs"])]
        for mixing, rule in zip(chained["mixing"], chained["rule"], strict=True):
            # counted over the units: chain stacking exactly where the chains sat in modes
            assert ("distinct modes" in mixing) == ("chain stacking" in rule), (mixing, rule)
    tuning = pd.read_csv(out / "tuning.csv")  # mm's prior chosen among 4 in each unit
    assert (
        tuning.groupby(["dataset", "unit"])["chosen"].agg(["size", "sum"]).eq([4, 1]).all(axis=None)
    )
    simulated = summary[summary["dataset"] == "simulated 24x18 K=2"].set_index(["row", "scale"])
    assert simulated.loc[("mm mean", 1), "coverage_90"] == "no interval"
    assert 0 < float(simulated.loc[("nuts", 1), "coverage_90"]) <= 1
    assert 0 < float(simulated.loc[("vb", 1), "coverage_90"]) <= 1  # vb's draws from q
    rows = pd.read_csv(out / "rows.csv")
    assert set(rows["unit"]) == {0, 1}
    assert rows.groupby(["dataset", "row", "scale"]).size().eq(2).all()


def test_posterior_vs_map_reliability_diagram_of_what_it_draws(tmp_path, monkeypatch):
    """Each reliability curve is labelled with its own ECE (unit 0), not the mean over units,
    at the samplers' largest scale (mm: its one fit); drawn by ``--figures-only`` from the
    CSVs a run writes, a row one colour in every figure."""
    import matplotlib.pyplot as plt

    from bernmf.studies.reproduce.posterior_vs_map import main

    close = plt.close
    monkeypatch.setattr(plt, "close", lambda figure: None)  # keep the figures to read them
    before = set(plt.get_fignums())
    bins = pd.DataFrame(
        [{"dataset": "d", "scale": scale, "sampler_scale": 2, "row": row, "unit": unit,
          "bin": b, "count": 10, "predicted": 0.1 + 0.5 * b,
          "observed": 0.1 + 0.5 * b + (0.1 if unit == 0 else 0.3) + 0.05 * (scale == 1)}
         for row, scale in (("mm", 1), ("nuts", 1), ("nuts", 2)) for unit in (0, 1)
         for b in (0, 1)]
    )  # fmt: skip
    summary = pd.DataFrame(
        [{"dataset": "d", "family": row, "row": row, "scale": scale, "cpu_seconds": scale,
          "score": 0.5, "score_sd": 0.01, "units": 2, "primary": "test_perplexity",
          "best_map": "mm b1", "diff_mean": 0.0, "diff_low": -0.01, "diff_high": 0.01,
          "pareto": True} for row, scale in (("mm", 1), ("nuts", 1), ("nuts", 2))]
    )  # fmt: skip
    summary.to_csv(tmp_path / "summary.csv", index=False)
    bins.to_csv(tmp_path / "reliability.csv", index=False)
    assert main(["--figures-only", "--out", str(tmp_path)]) == 0
    for name in ("score_vs_cpu.png", "differences.png", "reliability.png"):
        assert (tmp_path / name).stat().st_size > 0
    made = [plt.figure(number) for number in sorted(set(plt.get_fignums()) - before)]
    diagram = next(f for f in made if f.axes[0].get_title().startswith("d, scale 2"))
    labels = [text.get_text() for text in diagram.axes[0].get_legend().get_texts()]
    assert labels == ["nuts (ECE 0.100)", "mm (ECE 0.150)"]
    curves = [line for line in diagram.axes[0].get_lines() if line.get_label() in labels]
    assert [len(line.get_xdata()) for line in curves] == [2, 2]
    scores = next(f for f in made if f.axes[0].get_xlabel().startswith("CPU seconds"))
    drawn = {c.get_label(): c.lines[0].get_color() for c in scores.axes[0].containers}
    assert [line.get_color() for line in curves] == [drawn["nuts"], drawn["mm"]]
    assert drawn["nuts"] != drawn["mm"]
    for figure in made:
        close(figure)
