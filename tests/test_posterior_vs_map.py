"""The posterior-vs-MAP study's configuration (bernmf.studies.posterior_vs_map): its prior
grids, simulated shapes and the large datasets' sizes. Its quick run end to end is in
test_study.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bernmf.studies.posterior_vs_map import (
    BAYES_VALUES,
    LARGE,
    LARGE_SIZES,
    MAX_TREE_DEPTH,
    NUTS_VALUES,
    SHAPES,
    SIMULATED_SIZES,
    TOP,
    axis_top,
    configurations,
    parse,
    short_names,
)


def _dataset_priors(argv) -> dict:
    """Each family's priors in the datasets' study that ``argv`` configures."""
    datasets = configurations(parse([*argv, "--skip-simulated", "--datasets", "animals"]))[-1]
    return {grid.label: set(grid.priors or ()) for grid in datasets.grids}


def test_the_bayesian_grids_reach_below_the_former_edge():
    """Every Bayesian family chose 0.1, the former grid's smallest value, on animals: the
    grids now go to 0.02 (nuts to 0.05, where its tuning fits become slow), every pair."""
    assert min(BAYES_VALUES) == 0.02 and min(NUTS_VALUES) == 0.05
    priors = _dataset_priors([])
    assert set(priors) == {"mm", "em", "nuts", "svi_normal", "svi_lowrank", "gibbs", "vb"}
    assert priors["em"] == set()  # prior-free
    for family in ("svi_normal", "svi_lowrank", "gibbs", "vb"):
        assert priors[family] == {(a, b, 1.0) for a in BAYES_VALUES for b in BAYES_VALUES}
    assert priors["nuts"] == {(a, b, 1.0) for a in NUTS_VALUES for b in NUTS_VALUES}
    assert min(alpha for alpha, _, _ in priors["mm"]) == 1.0  # mm's own grid, unchanged


@pytest.mark.parametrize(
    ("argv", "pairs"),
    [(["--bayes-values", "0.3", "1"], {(0.3, 0.3), (0.3, 1.0), (1.0, 0.3), (1.0, 1.0)}),
     (["--quick"], {(0.5, 0.5)})],
)  # fmt: skip
def test_given_values_and_quick_set_every_bayesian_grid(argv, pairs):
    priors = _dataset_priors(argv)
    for family, grid in priors.items():
        if family not in ("mm", "em"):
            assert grid == {(a, b, 1.0) for a, b in pairs}, family


def test_large_datasets_get_their_sizes_and_the_others_the_defaults():
    """paleo and lastfm (LARGE) are fitted at LARGE_SIZES, animals at the options; two
    simulated shapes by default, a study each at its true rank and SIMULATED_SIZES; five
    seed sets in every part."""
    made = configurations(parse(["--data-dir", "unused"]))
    simulated = [s for s in made if s.simulations]
    assert [(s.simulations[0].rows, s.simulations[0].cols) for s in simulated] == [
        shape[:2] for shape in SHAPES
    ]
    assert [s.grids[0].ranks for s in simulated] == [(shape[2],) for shape in SHAPES]
    assert {g.budgets for s in simulated for g in s.grids} == {SIMULATED_SIZES["budgets"]}
    small, large = [s for s in made if s.datasets]
    assert small.datasets == ("animals",) and large.datasets == LARGE
    assert {s.seed_sets for s in made} == {5}
    grids, small_grids = {g.label: g for g in large.grids}, {g.label: g for g in small.grids}
    assert small_grids["nuts"].budgets == (1, 2, 4)
    assert small_grids["nuts"].options["max_tree_depth"] == MAX_TREE_DEPTH
    for family in ("nuts", "gibbs"):  # 4 chains: 2 starts of 2, nested R-hat's superchains
        assert small_grids[family].options["chains_per_start"] == 2
    assert grids["nuts"].budgets == LARGE_SIZES["budgets"]
    assert grids["nuts"].options["max_tree_depth"] == LARGE_SIZES["max_tree_depth"]
    assert grids["nuts"].options["num_samples"] == LARGE_SIZES["samples"]
    assert grids["gibbs"].options["num_samples"] == LARGE_SIZES["gibbs_samples"]
    assert grids["svi_lowrank"].options["guide_rank"] == LARGE_SIZES["guide_rank"]
    assert "guide_rank" not in small_grids["svi_lowrank"].options
    assert grids["nuts"].priors == ((0.05, 0.05, 1.0), (0.1, 0.1, 1.0))  # the two smallest
    for family in ("svi_normal", "gibbs", "vb"):
        assert grids[family].priors == ((0.02, 0.02, 1.0), (0.1, 0.1, 1.0)), family
    assert grids["em"].priors is None and grids["em"].rank_from == "mm"
    assert grids["em"].members == small_grids["mm"].members
    assert len(grids["mm"].priors) == len({g.label: g for g in small.grids}["mm"].priors)
    # --large moves a dataset between the parts; --budgets cuts the large budgets too
    made = configurations(parse(["--skip-simulated", "--large", "--budgets", "1"]))
    assert [s.datasets for s in made] == [("animals", "paleo", "lastfm")]
    made = configurations(parse(["--skip-simulated", "--budgets", "4"]))
    assert made[-1].grids[0].budgets == (4,)


def test_simulated_datasets_are_named_by_shape_and_rank():
    names = pd.Series(["simulated-200x100-K4-seed0", "animals"])
    assert list(short_names(names)) == ["simulated 200x100 K=4", "animals"]


def test_a_panel_cuts_its_axis_and_names_the_rows_left_off():
    """Rows above TOP times the best row's, and rows with an inf, are named in the
    panel's subtitle; the axis ends at the cut only when a finite row lies above it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = pd.DataFrame(
        {
            "row": ["mm stack", "em mean", "svi_lowrank", "svi_lowrank"],
            "test_perplexity": [0.10, np.inf, 0.30, 0.20],
            "test_perplexity_sd": [0.001, np.nan, 0.01, 0.01],
        }
    )
    figure, axis = plt.subplots()
    said = axis_top(rows, axis)
    assert "em mean inf" in said and "svi_lowrank 0.200" in said and "mm stack" not in said
    assert axis.get_ylim()[1] == pytest.approx(TOP * 0.10)
    figure2, axis2 = plt.subplots()
    axis2.plot([0, 1], [0.10, 0.11])
    assert axis_top(rows.iloc[:2], axis2) == "\n(off the axis: em mean inf)"
    assert axis2.get_ylim()[1] < TOP * 0.10  # nothing finite above: the axis as drawn
    plt.close(figure)
    plt.close(figure2)
