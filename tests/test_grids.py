"""The one loop over grids: order, budget and edges (bernmf.fitting.grids)."""

from __future__ import annotations

import io

import numpy as np
import pytest

import bernmf
from bernmf.data.observed import as_observed
from bernmf.data.split import random_split
from bernmf.fitting import grids
from bernmf.fitting.grids import Budget, EngineGrid


@pytest.fixture(scope="module")
def data():
    Y, _, _ = bernmf.simulate(5, 40, 30, 3)
    split = random_split(Y.shape, seed=5)
    return Y, as_observed(Y, split.train), as_observed(Y, split.validation, warn_empty=False)


def test_a_ladder_goes_rank_by_rank_and_each_member_is_fit_perplexity(data):
    Y, train, held_out = data
    ladder = [EngineGrid("mm", (2, 3), options={"max_iter": 50}), EngineGrid("em", (2, 3))]
    made = grids.fit_grids(ladder, train, held_out, [0, 1], order="rank", progress=False)
    assert [(s["engine"], s["rank"]) for s in made.steps] == [
        ("mm", 2), ("em", 2), ("mm", 3), ("em", 3),
    ]  # fmt: skip
    for setting in made.settings:
        assert len(setting.members) == 2
        for member in setting.members:
            assert member.validation_perplexity == pytest.approx(
                member.fit.perplexity(Y, held_out.mask), rel=1e-9
            )
            assert member.cpu_seconds >= 0 and -member.lpd.mean() == pytest.approx(
                member.validation_perplexity
            )


def test_a_spent_budget_leaves_the_rest_out_and_says_so(data):
    _, train, held_out = data
    stream = io.StringIO()
    spent = Budget(0.0, unit="CPU s")
    made = grids.fit_grids([EngineGrid("mm", (2, 3))], train, held_out, [0], budget=spent,
                       stream=stream)  # fmt: skip
    assert made.settings == [] and made.left_out[0]["rank"] == 2 and len(made.left_out) == 1
    assert "left out mm K=2 (the budget of 0 CPU s is spent)" in stream.getvalue()


def test_an_estimate_over_the_budget_refuses_a_step_but_never_a_probe():
    budget = Budget(10.0, estimating=True, reserve=0.5)
    assert budget.refusal("mm", 64, 100) is None  # no step of mm yet: its probe
    budget.last["mm"] = (1.0, 2.0, 2)  # compile 1 s, 2 s a fit at K = 2
    budget.compiled.add(("mm", 2))
    assert budget.estimate("mm", 2, 1) == 2.0  # compiled: run seconds only
    assert budget.estimate("mm", 4, 1) == 1.0 + 4.0  # a new rank compiles; cost linear in K
    assert budget.refusal("mm", 2, 2) is None  # 4 s + half of it reserved for refits
    assert budget.refusal("mm", 4, 2) == "about 9 s, over the budget"


def test_a_budget_of_work_counts_the_fits_work_and_never_the_clock():
    readings = iter([0.0, 1e9, 2e9])  # a racing clock: read at the start only
    budget = Budget(10.0, clock=lambda: next(readings), reserve=0.5, estimating=True,
                    work=lambda f: 2.0, unit="s of work")  # fmt: skip
    budget.measured("mm", 2, [object()] * 2)  # two fits, 2 s of work each
    assert budget.spent() == 4.0 and budget.estimate("mm", 4, 1) == 4.0  # linear in K
    assert budget.refusal("mm", 2, 1) is None  # 4 + 2 + half of 6 <= 10
    assert budget.refusal("mm", 4, 1) == "about 4 s of work, over the budget"


def test_a_best_prior_at_the_grid_edge_is_extended_at_its_rank(data):
    _, train, held_out = data
    grid = EngineGrid("mm", (3,), ((1.2, 1.2, 1.0), (1.5, 1.2, 1.0)), {"max_iter": 100})
    made = grids.fit_grids([grid], train, held_out, [0], extend=1, progress=False)
    alphas = [float(s.prior.alpha[0]) for s in made.settings]
    best = min([1.2, 1.5], key=lambda a: grids._best_score(made.settings[alphas.index(a)]))
    extended = 2 * 1.5 if best == 1.5 else 1.1
    assert alphas[:2] == [1.2, 1.5] and pytest.approx(extended) in alphas[2:]
    assert any(f"fitting alpha={extended:g}" in line for line in made.notes)
    assert np.isfinite([grids._best_score(s) for s in made.settings]).all()
