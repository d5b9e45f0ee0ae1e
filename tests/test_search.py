"""The best model by default: bernmf.fit(Y) without a rank, and bernmf fit DATA without --rank."""

from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd
import pytest
from helpers import zero_probability_problem

import bernmf
from bernmf.cli.parser import main
from bernmf.data.split import random_split
from bernmf.fitting import search as search_module
from bernmf.fitting.grids import Budget
from bernmf.fitting.search import search
from bernmf.fitting.search_plan import read_search_plan
from bernmf.fitting.stack import members_table


@pytest.fixture
def small(monkeypatch):
    """A small simulated matrix with a test split, and a search cut to two ranks and one
    round of mm's priors and seeds (the ladder and the rounds are what the budget would cut)."""
    monkeypatch.setattr(search_module, "RANKS", (2, 4))
    monkeypatch.setattr(search_module, "MM_ROUNDS", 1)
    Y, _, _ = bernmf.simulate(1, 40, 30, 3, bernmf.Prior(0.5, 0.5, 0.5))
    split = random_split(Y.shape, (0.85, 0.0, 0.15), seed=1)
    observed = Y.copy()
    observed[split.test] = np.nan
    return Y, observed, split


def test_a_fit_without_a_rank_is_a_refit_stack_of_the_searched_engines(small):
    Y, observed, split = small
    result = search(observed, budget=600, progress=False)
    record = result.record.search
    table = members_table(result)
    assert result.engine == "stack" and result.mixture.stacking.refit
    assert set(table["engine"]) == {"mm", "logsvd", "baseline"}
    fitted = {(f["engine"], f["rank"], f["round"]) for f in record["fitted"]}
    assert fitted == {("mm", 2, 0), ("mm", 4, 0), ("logsvd", 2, 0), ("logsvd", 4, 0)} | {
        ("mm", 2, 1),
        ("mm", 4, 1),
    }
    assert record["left_out"] == []
    # mm: its default prior at each rank, then every prior of the grid with new seeds
    mm = table[table["engine"] == "mm"]
    assert len(mm) == 2 * (1 + len(search_module.MM_PRIORS) * search_module.MM_SEEDS)
    assert sorted(set(mm["seed"])) == [0, 1, 2]
    assert record["held_out_entries"] == round(0.15 * np.isfinite(observed).sum())
    score = result.perplexity(Y, split.test)
    assert np.isfinite(score) and score < np.log(2)  # better than a coin, never inf
    # the members of positive weight were fitted again on every observed entry
    assert result.observed.mask.sum() == np.isfinite(observed).sum()
    # what it says: the held-out scores and the member whose factors it shows
    said = "\n".join(search_module.summary(result))
    held = search_module.held_out_scores(result)
    assert f"the stack {held['stack']:.4f}" in said
    assert f"{held['best_member']['perplexity']:.4f}" in said
    shown = result.members[result.mixture.chosen]
    assert f"factors shown (W, H): {shown.engine} K={shown.rank}" in said


def test_bernmf_fit_without_a_rank_searches(small):
    _, observed, _ = small
    direct = search(observed, budget=600, progress=False)
    through_fit = bernmf.fit(observed, budget=600)
    np.testing.assert_array_equal(through_fit.probs, direct.probs)
    assert members_table(through_fit)["engine"].tolist() == members_table(direct)["engine"].tolist()


def test_a_given_validation_is_what_the_stack_is_weighed_on(small):
    Y, observed, _ = small
    validation = np.isfinite(observed) & (np.random.default_rng(3).random(Y.shape) < 0.2)
    result = search(observed, ["logsvd"], validation=validation, budget=600, progress=False)
    assert result.record.search["held_out_entries"] == validation.sum()
    assert set(members_table(result)["engine"]) == {"logsvd", "baseline"}


def test_steps_over_the_budget_are_left_out_and_said_so(small, monkeypatch, capsys):
    _, observed, _ = small
    # every estimate after an engine's probe is a day: only the probes run
    monkeypatch.setattr(Budget, "estimate", lambda *args, **kwargs: 86400.0)
    result = search(observed, budget=600)
    record = result.record.search
    assert {(f["engine"], f["rank"]) for f in record["fitted"]} == {("mm", 2), ("logsvd", 2)}
    assert {(o["engine"], o["rank"]) for o in record["left_out"]} == {("mm", 4), ("logsvd", 4)}
    err = capsys.readouterr().err
    assert "left out mm K=4 (about 86400 s of work, over the budget)" in err
    assert "left out for time: mm K=4, logsvd K=4" in err


@pytest.mark.parametrize(
    "given, named",
    [
        ({"prior": bernmf.Prior(1.2, 1.2)}, "prior"),
        ({"restarts": 3}, "restarts"),
        ({"combine": "mean"}, "combine"),
        ({"max_iter": 10}, "max_iter"),
        ({"accelerate": False}, "accelerate"),
    ],
)
def test_arguments_of_one_fit_without_a_rank_are_refused(small, given, named):
    _, observed, _ = small
    with pytest.raises(ValueError, match=f"{named} sets up one fit: give rank="):
        bernmf.fit(observed, **given)


def test_a_budget_with_a_rank_is_refused(small):
    _, observed, _ = small
    with pytest.raises(ValueError, match="leave out rank=2 to search"):
        bernmf.fit(observed, "mm", 2, budget=10)


@pytest.mark.parametrize("budget", [0, -1, float("nan"), float("inf")])
def test_a_budget_must_be_a_positive_number(small, budget):
    _, observed, _ = small
    with pytest.raises(ValueError, match="budget must be a finite number"):
        search(observed, budget=budget, progress=False)


def test_a_validation_of_another_shape_is_a_clear_error(small):
    _, observed, _ = small
    with pytest.raises(ValueError, match=r"validation has shape \(3, 3\)"):
        search(observed, validation=np.ones((3, 3), bool), progress=False)


def test_unknown_engines_fail_before_any_fit(small):
    _, observed, _ = small
    with pytest.raises(ValueError, match="nope"):
        search(observed, ["mm", "nope"], progress=False)
    with pytest.raises(ValueError, match="engines is empty"):
        search(observed, [], progress=False)


def test_bernmf_fit_without_rank_writes_the_stack(small, tmp_path, capsys):
    _, observed, _ = small
    data = tmp_path / "y.csv"
    pd.DataFrame(observed).to_csv(data)
    out = tmp_path / "out"
    assert main(["fit", str(data), "--out", str(out), "--budget", "600", "--json"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["engine"] == "stack" and summary["search"]["left_out"] == []
    members = pd.read_csv(out / "members.csv")
    assert {"engine", "rank", "weight"} <= set(members.columns)
    assert members["weight"].sum() == pytest.approx(1.0)
    fit = bernmf.load(out / "fit.npz")
    assert fit.engine == "stack"
    # the factors are the model's, named; the held-out scores; P(Y=1) of every entry
    factors = summary["factors"]
    assert factors["engine"] not in ("logsvd", "logpca", "baseline")
    assert factors["engine"] == fit.members[fit.mixture.chosen].engine
    W = pd.read_csv(out / "W.csv", index_col=0).to_numpy()
    np.testing.assert_allclose(W.sum(axis=1), 1, atol=1e-6)
    held = summary["held_out"]
    assert held["entries"] == summary["search"]["held_out_entries"]
    assert held["stack"] == fit.mixture.stacking.validation_perplexity
    assert held["best_member"]["perplexity"] == min(members["validation_perplexity"])
    probs = pd.read_csv(out / "probs.csv", index_col=0)
    assert probs.shape == observed.shape
    np.testing.assert_allclose(probs.to_numpy(), fit.probs, rtol=1e-5)  # NaN entries too


def test_flags_of_one_fit_without_rank_are_a_clear_error(small, tmp_path, capsys):
    _, observed, _ = small
    data = tmp_path / "y.csv"
    pd.DataFrame(observed).to_csv(data)
    code = main(["fit", str(data), "--out", str(tmp_path / "o"), "--alpha", "1.2", "--tol", "0"])
    assert code != 0
    err = capsys.readouterr().err
    assert "--alpha, --tol set up one fit: give --rank too" in err
    assert not (tmp_path / "o").exists()


def test_an_inf_validation_perplexity_is_inf_on_screen_and_in_summary_json(
    tmp_path, monkeypatch, capsys
):
    Y, split = zero_probability_problem()
    monkeypatch.setattr(search_module, "RANKS", (2,))
    pd.DataFrame(Y).to_csv(tmp_path / "y.csv")
    np.savez(tmp_path / "validation.npz", Y=split.validation)
    argv = ["fit", str(tmp_path / "y.csv"), "--engine", "em", "--budget", "600"]
    argv += ["--validation", str(tmp_path / "validation.npz"), "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    err = capsys.readouterr().err
    text = (tmp_path / "out" / "summary.json").read_text()
    assert "em K=2: 1 fit in" in err and "best validation perplexity inf" in err
    assert json.loads(text)["search"]["fitted"][0]["validation_perplexity"] == "inf"
    assert "1797693" not in err + text


def _same_members(first, second) -> None:
    """Two searches' stacks hold the same members, bit for bit, with the same weights."""
    assert first.mixture.weights == second.mixture.weights
    assert len(first.members) == len(second.members)
    for one, other in zip(first.members, second.members, strict=True):
        assert (one.engine, one.rank, one.seed) == (other.engine, other.rank, other.seed)
        np.testing.assert_array_equal(one.W, other.W)
        np.testing.assert_array_equal(one.H, other.H)
    np.testing.assert_array_equal(first.probs, second.probs)


def test_a_search_plan_replays_the_same_members(small, tmp_path):
    _, observed, _ = small
    first = search(observed, budget=600, progress=False)
    plan = first.record.search["plan"]
    assert [(s["engine"], s["rank"]) for s in plan["steps"]][:4] == [
        ("mm", 2), ("logsvd", 2), ("mm", 4), ("logsvd", 4)
    ]  # fmt: skip
    assert plan["steps"][-1]["seeds"] == [1, 2] and len(plan["steps"][-1]["priors"]) == 4
    path = tmp_path / "search_plan.json"
    path.write_text(json.dumps(plan))  # as the command writes it
    again = bernmf.fit(observed, search_plan=path)
    assert again.record.search["replayed"]
    assert again.record.search["plan"] == plan
    _same_members(first, again)


def test_the_steps_are_chosen_by_work_not_by_the_clock(small, monkeypatch):
    _, observed, _ = small
    # a budget that leaves out a step of the 6 (mm's round at K = 4) and caps the fits
    first = search(observed, budget=0.01, progress=False)
    record = first.record.search
    assert 4 < len(record["plan"]["steps"]) < 6 and record["plan"]["steps"][0]["options"]
    real = time.perf_counter
    monkeypatch.setattr(time, "perf_counter", lambda: 1000.0 * real())  # a machine 1000 x busier
    second = search(observed, budget=0.01, progress=False)
    assert second.record.search["plan"] == record["plan"]
    assert second.record.search["left_out"] == record["left_out"]
    _same_members(first, second)


def test_large_fits_are_capped_to_a_share_of_the_budget():
    mm, logsvd = (bernmf.inference.get_engine(name) for name in ("mm", "logsvd"))
    assert search_module.iteration_cap(mm, (40, 30), 2, 60.0) == {}  # the default fits
    cap = search_module.iteration_cap(mm, (5000, 5000), 2, 60.0)["max_iter"]
    model = search_module.WORK["mm"]

    def work(iterations: int) -> float:
        return search_module._work(model, (5000, 5000), 2, iterations * model.sweeps_per_iteration)

    share = search_module.PROBE_SHARE * 60.0
    assert search_module.LEAST_ITERATIONS <= cap and work(cap) <= share < work(cap + 1)
    # logsvd's start (an eigendecomposition of the 5000 x 5000 Gram matrix) is over it
    assert search_module.least_work(logsvd, (5000, 5000), 2) > share


def test_an_engine_whose_least_fit_is_over_its_share_is_left_out(small, monkeypatch, capsys):
    _, observed, _ = small
    slow = search_module.WORK["logsvd"]._replace(gram=1e9)  # a start of days
    monkeypatch.setitem(search_module.WORK, "logsvd", slow)
    record = search(observed, budget=600).record.search
    assert {f["engine"] for f in record["fitted"]} == {"mm"}
    assert record["left_out"][0] | {"reason": ""} == {
        "grid": "logsvd", "engine": "logsvd", "rank": 2, "reason": ""
    }  # fmt: skip
    assert "left out logsvd (about " in capsys.readouterr().err


def _broken(plan: dict, change) -> dict:
    plan = json.loads(json.dumps(plan))
    change(plan)
    return plan


@pytest.fixture
def made(small, monkeypatch):
    """A search's plan on the small data (one rank, no rounds)."""
    _, observed, _ = small
    monkeypatch.setattr(search_module, "RANKS", (2,))
    return observed, search(observed, ["mm"], budget=600, progress=False).record.search["plan"]


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda p: p.update(format="x"), "format is 'x', not 'bernmf search plan 1'"),
        (lambda p: p.pop("steps"), r"the plan lacks \['steps'\]"),
        (lambda p: p.update(steps=[]), "steps must be a non-empty list"),
        (lambda p: p["steps"][0].update(rank=0), r"steps\[0\].rank: rank must be an integer in"),
        (lambda p: p["steps"][0].update(rank=31), r"steps\[0\].rank: .* in \[1, 30\]"),
        (lambda p: p["steps"][0].update(engine="em"), "'em' is not one of the plan's engines"),
        (
            lambda p: p["steps"][0].update(options={"max_iters": 5}),
            r"steps\[0\].options: .*max_iters",
        ),
        (lambda p: p["steps"][0].update(priors=[[0.5, 1, 1]]), r"steps\[0\].priors: "),
        (lambda p: p["steps"][0].update(priors=[[1.5, 1]]), r"each is \[alpha, beta, gamma\]"),
        (lambda p: p["steps"][0].update(seeds=[-1]), r"steps\[0\].seeds: seed must be in"),
        (lambda p: p["data"].update(shape=[3]), r"data.shape must be \[M, N\]"),
        (lambda p: p.update(held_out="maybe"), "held_out must be one of"),
    ],
)
def test_a_malformed_search_plan_is_named_before_any_fit(made, monkeypatch, change, message):
    observed, plan = made
    monkeypatch.setattr(search_module, "fit_grids", lambda *a, **k: pytest.fail("fitted"))
    with pytest.raises(ValueError, match=f"^search plan search_plan: .*{message}"):
        search(observed, search_plan=_broken(plan, change), progress=False)


def test_a_search_plan_of_other_data_or_arguments_is_refused_before_any_fit(made, monkeypatch):
    observed, plan = made
    monkeypatch.setattr(search_module, "fit_grids", lambda *a, **k: pytest.fail("fitted"))
    flipped = np.where(observed == 0, 1.0, observed)  # the same entries observed
    cases = [
        ((observed[:-1],), {}, "made on a 40 x 30 matrix, this one is 39 x 30"),
        ((flipped,), {}, "made on other data: the values of its training entries differ"),
        ((np.where(np.isfinite(observed), observed, 0.0),), {}, "made on other data: it had"),
        ((observed,), {"seed": 1}, "seed 1 with a search plan made with seed 0: give seed 0"),
        ((observed,), {"budget": 10.0}, "budget=10.0 with a search plan"),
        ((observed, ["logsvd"]), {}, r"engines \['logsvd'\] with a search plan of engines"),
        ((observed,), {"validation": np.isfinite(observed) & (observed == 1)}, "were drawn"),
    ]
    for args, given, message in cases:
        with pytest.raises(ValueError, match=message):
            search(*args, search_plan=plan, progress=False, **given)


def test_a_search_plan_file_that_is_not_json_is_named(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match=f"search plan {path} is not JSON"):
        read_search_plan(path)
    with pytest.raises(ValueError, match="no such file"):
        read_search_plan(tmp_path / "none.json")


def test_bernmf_fit_plan_replays_the_search_plan_file(small, tmp_path, capsys):
    _, observed, _ = small
    data = tmp_path / "y.csv"
    pd.DataFrame(observed).to_csv(data)
    first, again = tmp_path / "first", tmp_path / "again"
    assert main(["fit", str(data), "--out", str(first), "--budget", "600", "--json"]) == 0
    plan = first / "search_plan.json"
    assert json.loads(plan.read_text()) == json.loads((first / "summary.json").read_text())[
        "search"]["plan"]  # fmt: skip
    assert main(["fit", str(data), "--plan", str(plan), "--out", str(again), "--json"]) == 0
    assert json.loads((again / "summary.json").read_text())["search"]["replayed"]
    made, replayed = (pd.read_csv(out / "members.csv").drop(columns="seconds") for out in
                      (first, again))  # fmt: skip
    pd.testing.assert_frame_equal(made, replayed)
    assert (first / "probs.csv").read_bytes() == (again / "probs.csv").read_bytes()
    capsys.readouterr()
    argv = ["fit", str(data), "--plan", str(plan), "--rank", "2", "--out", str(tmp_path / "o")]
    assert main(argv) != 0
    assert "--plan replays a search: leave out --rank" in capsys.readouterr().err
