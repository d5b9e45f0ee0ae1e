"""The posterior-vs-MAP study (bernmf.studies.reproduce.posterior_vs_map): its units and grids, the
paired differences against the best MAP row, and that no test label decides anything in
the whole study (samplers, chosen priors, chain rules, stacks and mixtures). Its quick run
end to end is in test_study.py."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pandas as pd
import pytest

from bernmf.data.split import random_split
from bernmf.posterior.mixing import DISTINCT_MODES, ModeRhat
from bernmf.studies.reproduce.posterior_vs_map import (
    MAP_FAMILIES,
    MAX_TREE_DEPTH,
    SHAPES,
    TOP,
    axis_top,
    configurations,
    paired_differences,
    parse,
    short_names,
)
from bernmf.studies.runner import running
from bernmf.studies.runner.running import load_data
from bernmf.studies.runner.study import MIXING_COLUMNS, Matrix, Simulation


def test_a_study_per_unit_each_matrix_and_split_its_own():
    """20 matrices per simulated shape and prior (two flat, one concentrated), each with its
    own split (matrix and split seed s), then 10 random splits of animals; only each shape's
    first unit warms up; the Bayesian families fit the prior the matrices are drawn from."""
    made = configurations(parse(["--data-dir", "unused"]))
    simulated = [s for s in made if s.simulations]
    assert len(simulated) == 20 * len(SHAPES) == 60
    assert {shape[3] for shape in SHAPES} == {(1.0, 1.0, 1.0), (0.3, 0.3, 0.3)}
    for (M, N, K, prior), first in zip(SHAPES, range(0, 60, 20), strict=True):
        part = simulated[first : first + 20]
        assert [s.simulations[0].seed for s in part] == list(range(20))
        assert [s.split_seed for s in part] == list(range(20))
        assert {(s.simulations[0].rows, s.simulations[0].cols) for s in part} == {(M, N)}
        assert {s.simulations[0].prior for s in part} == {prior}
        assert [s.warmup for s in part] == [True] + [False] * 19
        assert {g.ranks for s in part for g in s.grids} == {(K,)}
        assert {g.priors for s in part for g in s.grids if g.label == "nuts"} == {(prior,)}
    animals = [s for s in made if s.datasets]
    assert [s.split_seed for s in animals] == list(range(10))
    assert {s.datasets for s in animals} == {("animals",)} and {s.split for s in made} == {"random"}
    assert {g.ranks for s in animals for g in s.grids} == {(8,)}


def test_the_grids_their_priors_and_budgets():
    """mm chooses its prior, em has none, the Bayesian families fit the truth's flat prior on
    simulated data and Beta(0.1, 0.1) on the datasets; the MAP ensembles' scales run to
    512 seeds, the samplers' to 2; nuts and gibbs run 2 starts of 2 chains."""
    made = configurations(parse(["--data-dir", "unused"]))
    for unit, prior in ((made[0], (1.0, 1.0, 1.0)), (made[-1], (0.1, 0.1, 1.0))):
        grids = {g.label: g for g in unit.grids}
        assert set(grids) == {"mm", "em", "nuts", "svi_normal", "svi_lowrank", "gibbs", "vb"}
        assert len(grids["mm"].priors) == 25 and grids["em"].priors is None
        for family in ("nuts", "svi_normal", "svi_lowrank", "gibbs", "vb"):
            assert grids[family].priors == (prior,), family
            assert grids[family].scales == (1, 2), family
        for family in MAP_FAMILIES:
            assert grids[family].scales[-1] * grids[family].members == 512
            assert grids[family].scaled == ("members",)
        assert grids["nuts"].options["max_tree_depth"] == MAX_TREE_DEPTH
        assert grids["nuts"].options["chains_per_start"] == 2 and grids["nuts"].members == 4
        assert set(unit.metrics) == {"ece", "coverage", "mixing", "kl_truth"}


def test_quick_is_small():
    made = configurations(parse(["--quick", "--data-dir", "unused"]))
    assert len(made) == 4  # 2 matrices of 24 x 18 (flat), 2 splits of animals
    assert {g.label for g in made[0].grids} == {"mm", "em", "nuts", "svi_normal", "gibbs", "vb"}
    assert {g.scales for g in made[0].grids if g.label in MAP_FAMILIES} == {(1, 2, 4)}


def test_simulated_datasets_are_named_by_shape_rank_and_prior():
    flat, concentrated = Simulation(200, 100, 4, seed=3), Simulation(100, 60, 6, 0, (0.3, 0.3, 1.0))
    assert flat.name == "simulated-200x100-K4-seed3"
    assert concentrated.name == "simulated-100x60-K6-prior0.3,0.3,1.0-seed0"
    names = pd.Series([flat.name, concentrated.name, "animals"])
    assert list(short_names(names)) == [
        "simulated 200x100 K=4", "simulated 100x60 K=6 prior 0.3,0.3,1.0", "animals"
    ]  # fmt: skip
    # the prior is that of the draws: H of Beta(0.3, 0.3) sits near 0 and 1
    H = concentrated.draw()[2]
    assert np.mean((H < 0.1) | (H > 0.9)) > 0.4 > np.mean(flat.draw()[2] < 0.1) + 0.2


@pytest.mark.parametrize(
    "shape", [["10", "5"], ["10", "5", "2.5"], ["10", "5", "2", "1", "0", "1"]]
)
def test_a_shape_is_three_integers_and_an_optional_positive_prior(shape, capsys):
    with pytest.raises(SystemExit):
        parse(["--shape", *shape])
    assert "--shape" in capsys.readouterr().err
    assert parse(["--shape", "10", "5", "2"]).shapes == [(10, 5, 2, (1.0, 1.0, 1.0))]


def _rows(scores: dict) -> pd.DataFrame:
    """A rows table of one dataset: {(row, family, scale): [score per unit]}."""
    return pd.DataFrame(
        [
            {"dataset": "d", "unit": u, "row": row, "family": family, "scale": b, "score": s}
            for (row, family, b), values in scores.items()
            for u, s in enumerate(values)
        ]
    )


def test_paired_differences_against_the_best_map_row():
    """The best MAP row is the MAP row of least mean; a row's difference is paired by unit
    (a shift common to every unit has a zero-width interval), and its interval is that of the
    bootstrap of the units, checked against a resampling written out here."""
    rng = np.random.default_rng(1)
    units = rng.normal(0.6, 0.05, 30)  # each unit's difficulty, shared by every row
    rows = _rows(
        {
            ("mm stack", "mm", 1): units + 0.01,
            ("em stack", "em", 1): units + 0.02,
            ("nuts", "nuts", 1): units - 0.003 + rng.normal(0, 0.004, 30),
            ("svi", "svi", 1): units + 0.01,
        }
    )
    table = paired_differences(rows, draws=4000, seed=3).set_index("row")
    assert set(table["best_map"]) == {"mm stack b1"}
    assert table.loc["mm stack", ["diff_mean", "diff_low", "diff_high"]].tolist() == [0, 0, 0]
    assert table.loc["svi", "diff_mean"] == pytest.approx(0.0)
    assert table.loc["svi", "diff_high"] - table.loc["svi", "diff_low"] < 1e-12  # paired
    nuts = table.loc["nuts"]
    diffs = rows[rows["row"] == "nuts"]["score"].to_numpy() - (units + 0.01)
    assert nuts["diff_mean"] == pytest.approx(diffs.mean())
    means = diffs[np.random.default_rng(7).integers(0, 30, (20000, 30))].mean(axis=1)
    assert nuts["diff_low"] == pytest.approx(np.percentile(means, 2.5), abs=5e-4)
    assert nuts["diff_high"] == pytest.approx(np.percentile(means, 97.5), abs=5e-4)
    assert nuts["diff_high"] < 0  # clearly better than the best MAP row, on every resample


def test_a_datasets_intervals_do_not_depend_on_the_others():
    """Each dataset resamples with its own generator: a part run apart, or beside another
    part, gets the same intervals (a shared generator moved every later part's)."""
    rng = np.random.default_rng(2)
    scores = {
        ("mm stack", "mm", 1): rng.normal(0.5, 0.05, 12),
        ("nuts", "nuts", 1): rng.normal(0.49, 0.05, 12),
    }
    alone = paired_differences(_rows(scores), draws=200)
    other = _rows({key: values + 0.1 for key, values in scores.items()}).assign(dataset="c")
    beside = paired_differences(pd.concat([other, _rows(scores)]), draws=200)
    assert beside[beside["dataset"] == "d"].reset_index(drop=True).equals(alone)


def test_an_infinite_map_row_is_never_the_best_and_stays_infinite():
    rows = _rows({("em mean", "em", 1): [np.inf, 0.5], ("mm stack", "mm", 1): [0.4, 0.5]})
    table = paired_differences(rows, draws=100).set_index("row")
    assert table.loc["em mean", "best_map"] == "mm stack b1"
    assert table.loc["em mean", "diff_mean"] == np.inf
    assert table.loc["em mean", "diff_high"] == np.inf  # not NaN from inf - inf


def test_a_panel_cuts_its_axis_and_names_the_rows_left_off():
    """Rows above TOP times the best row's, and rows with an inf, are named in the
    panel's subtitle; the axis ends at the cut only when a finite row lies above it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = pd.DataFrame(
        {"row": ["mm stack", "em mean", "svi_lowrank", "svi_lowrank"],
         "score": [0.10, np.inf, 0.30, 0.20]}
    )  # fmt: skip
    figure, axis = plt.subplots()
    said = axis_top(rows, axis)
    assert "em mean inf" in said and "svi_lowrank 0.2" in said and "mm stack" not in said
    assert axis.get_ylim()[1] == pytest.approx(TOP * 0.10)
    figure2, axis2 = plt.subplots()
    axis2.plot([0, 1], [0.10, 0.11])
    assert axis_top(rows.iloc[:2], axis2) == "\n(off the axis: em mean inf)"
    assert axis2.get_ylim()[1] < TOP * 0.10  # nothing finite above: the axis as drawn
    plt.close(figure)
    plt.close(figure2)


DECIDED = ["dataset", "method", "scale", "validation_perplexity", "chosen", "weights",
           "rank", "alpha", "beta", "gamma", *MIXING_COLUMNS]  # fmt: skip
"""What the validation entries decide in a row: nothing here may read a test label."""


@pytest.mark.slow
@pytest.mark.parametrize("stacked", [False, True], ids=["as-mixed", "chains-stacked"])
def test_no_test_label_decides_anything_in_the_whole_study(stacked, monkeypatch):
    """The quick configuration's samplers (chains rule: the mean, or chain stacking on the
    validation entries, forced here as if every unit's chains sat in distinct modes), mm's
    prior choice, the MAP means and stacks, on a simulated unit: with every test label
    flipped, every choice, weight, validation score and mixing column is the same, and the
    test scores are not."""
    if stacked:
        monkeypatch.setattr(ModeRhat, "status", property(lambda self: DISTINCT_MODES))
    args = parse(["--quick", "--skip-datasets", "--matrices", "1", "--quiet"])
    unit = configurations(args)[0]
    Y = np.asarray(load_data(unit.simulations[0]), float)
    split = random_split(Y.shape, unit.fractions, seed=unit.split_seed)
    flipped = np.where(split.test, 1 - Y, Y)
    tables = []
    for data in (Y, flipped):
        made = dataclasses.replace(
            unit, simulations=(), matrices=(Matrix("unit", data, split),), warmup=False
        )
        tables.append(running.run(made, stream=io.StringIO()).table)
    original, changed = tables
    assert {"chains", "mean", "stack chosen", "first"} <= set(original["rule"])
    chained = original[original["rule"] == "chains"]
    assert set(chained["chain_rule"]) == {"chain stacking" if stacked else "mean"}
    pd.testing.assert_frame_equal(original[DECIDED], changed[DECIDED])
    assert (original["test_perplexity"] != changed["test_perplexity"]).all()
