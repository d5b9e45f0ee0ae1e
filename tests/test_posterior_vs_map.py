"""The posterior-vs-MAP study's configuration (bernmf.studies.posterior_vs_map): its prior
grids. Its quick run end to end is in test_study.py."""

from __future__ import annotations

import pytest

from bernmf.studies.posterior_vs_map import (
    BAYES_VALUES,
    NUTS_VALUES,
    configurations,
    parse,
)


def _dataset_priors(argv) -> dict:
    """Each family's priors in the datasets' study that ``argv`` configures."""
    datasets = configurations(parse([*argv, "--skip-simulated", "--datasets", "animals"]))[-1]
    return {grid.label: set(grid.priors) for grid in datasets.grids}


def test_the_bayesian_grids_reach_below_the_former_edge():
    """Every Bayesian family chose 0.1, the former grid's smallest value, on animals: the
    grids now go to 0.02 (nuts to 0.05, where its tuning fits become slow), every pair."""
    assert min(BAYES_VALUES) == 0.02 and min(NUTS_VALUES) == 0.05
    priors = _dataset_priors([])
    assert set(priors) == {"mm", "nuts", "svi_normal", "svi_lowrank", "gibbs", "vb"}
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
        if family != "mm":
            assert grid == {(a, b, 1.0) for a, b in pairs}, family
