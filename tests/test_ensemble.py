"""Ensembles (``bernmf.fit(..., restarts=R, combine=...)``): what only they have.

The contract suite (tests/test_engines.py) checks a stacked ensemble of every engine:
mixture, weights, mask invariance. Here: the mixture rules against hand computations,
chain members against the pooled sampler, and the errors.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import bernmf
from bernmf.data.observed import as_observed
from bernmf.fitting.ensemble import combine_members
from bernmf.inference import registry

M, N, K = 120, 80, 3
TRUTH = bernmf.Prior(0.3, 0.3, 0.5)
Y, _, _ = bernmf.simulate(3, M, N, K, TRUTH)
PRIOR = bernmf.Prior(1.5, 1.5)
rng = np.random.default_rng(0)
codes = rng.choice(3, size=(M, N), p=[0.15, 0.15, 0.7])
TRAIN, VALIDATION, TEST = codes == 2, codes == 1, codes == 0
OPTIONS = {"max_iter": 200, "tol": 1e-6, "prior": PRIOR}


@pytest.fixture(scope="module")
def members() -> list[bernmf.Fit]:
    """Four mm fits of the training entries, seeds 0-3, as an ensemble's members."""
    return list(bernmf.fit(Y, "mm", K, mask=TRAIN, restarts=4, combine="mean", **OPTIONS).members)


def nll(probs, entries) -> float:
    """Mean negative log-likelihood of Y's ``entries`` under ``probs``, by hand."""
    y, p = Y[entries], probs[entries]
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def test_members_are_the_single_fits_of_their_seeds(members):
    for member in members[::3]:
        single = bernmf.fit(Y, "mm", K, mask=TRAIN, seed=member.seed, **OPTIONS)
        np.testing.assert_allclose(member.probs, single.probs, rtol=0, atol=1e-10)
        assert member.n_iter == single.n_iter


def test_mean_is_the_uniform_mixture_and_scores_it(members):
    result = bernmf.fit(Y, "mm", K, mask=TRAIN, restarts=4, combine="mean", **OPTIONS)
    mixture = np.mean([m.probs for m in members], axis=0)
    np.testing.assert_allclose(result.probs, mixture, rtol=0, atol=1e-12)
    assert np.isclose(result.perplexity(Y, TEST), nll(mixture, TEST), rtol=1e-12)
    assert result.mixture.weights == (0.25,) * 4


def test_best_is_the_member_of_lowest_objective(members):
    result = bernmf.fit(Y, "mm", K, mask=TRAIN, restarts=4, **OPTIONS)
    objectives = [m.objective for m in members]
    chosen = members[int(np.argmin(objectives))]
    np.testing.assert_array_equal(result.probs, chosen.probs)
    np.testing.assert_array_equal(result.W, chosen.W)
    assert result.seed == chosen.seed and result.mixture.table()["objective"] == objectives


def test_stacking_gives_a_bad_member_almost_no_weight(members):
    """The true probabilities against those of another draw of the model: the truth wins.

    (The weight of a bad member is not exactly 0 on finite data: mixing in any less
    confident predictive tempers the good one a little, which the validation entries
    reward; hence a bound of 0.05 rather than 0.)
    """
    _, W, H = bernmf.simulate(3, M, N, K, TRUTH)
    _, W_other, H_other = bernmf.simulate(99, M, N, K, TRUTH)
    good = dataclasses.replace(members[0], stored_probs=np.clip(W @ H, 1e-9, 1 - 1e-9))
    bad = dataclasses.replace(members[1], stored_probs=np.clip(W_other @ H_other, 1e-9, 1 - 1e-9))
    observed, validation = as_observed(Y, TRAIN), as_observed(Y, VALIDATION)
    result = combine_members([bad, good], "stack", observed, validation)
    weights = np.asarray(result.mixture.weights)
    assert weights[0] < 0.05 and np.isclose(weights.sum(), 1)
    best = min([bad, good], key=lambda m: m.objective)
    assert result.seed == best.seed  # W, H and seed: the member of best objective
    uniform = (good.probs + bad.probs) / 2
    assert nll(result.probs, VALIDATION) < nll(uniform, VALIDATION) - 0.05


@pytest.mark.slow
def test_the_chains_of_a_sampler_are_its_members():
    """gibbs with restarts=2 and "mean": two one-chain members whose mixture is the pooled fit."""
    options = {"num_warmup": 10, "num_samples": 8, "progress": False}
    pooled = bernmf.fit(Y, "gibbs", K, mask=TRAIN, num_chains=2, seed=5, **options)
    result = bernmf.fit(Y, "gibbs", K, mask=TRAIN, restarts=2, combine="mean", seed=5, **options)
    assert [m.draws["W"].shape[0] for m in result.members] == [1, 1]
    assert [m.seed for m in result.members] == [5, 6]
    np.testing.assert_allclose(result.probs, pooled.probs, rtol=1e-12)
    np.testing.assert_array_equal(result.draws["H"], pooled.draws["H"])
    # the ensemble's posterior pools every chain's log joint and means, as its draws
    np.testing.assert_array_equal(result.posterior.log_joint, pooled.posterior.log_joint)
    np.testing.assert_array_equal(result.posterior.chain_means.H, pooled.posterior.chain_means.H)
    lp = pooled.sample_stats["lp"]
    assert result.mixture.table()["objective"] == pytest.approx(list(-lp[:, -1]))
    # a member is scored over its kept draws, not its last one
    assert result.mixture.scores == pytest.approx(list(-lp.mean(axis=1)))
    # its objective has the sign of the fit alone (minus the log joint), issue 23
    alone = bernmf.fit(Y, "gibbs", K, mask=TRAIN, seed=6, **options)
    assert result.members[1].objective == pytest.approx(alone.objective)
    assert pooled.objective == pytest.approx(-pooled.posterior.log_joint[:, -1].mean())
    assert pooled.converged is None and result.converged is None


SMALL_TRAIN, SMALL_VALIDATION = TRAIN[:30, :20], VALIDATION[:30, :20]


@pytest.mark.slow
@pytest.mark.parametrize(
    "engine, options",
    [
        ("gibbs", {"num_warmup": 5, "num_samples": 5, "num_chains": 3, "progress": False}),
        ("nuts", {"num_warmup": 5, "num_samples": 5, "progress": False}),  # default 2 chains
    ],
)
@pytest.mark.parametrize(
    "ensemble", [{"combine": "mean"}, {"combine": "mean", "validation": SMALL_VALIDATION}]
)
def test_an_ensemble_without_restarts_has_a_member_per_chain(engine, options, ensemble):
    # issue 23: combine= alone ran 1 chain while the record said more
    chains = options.get("num_chains", bernmf.inference.get_engine(engine).options["num_chains"])
    result = bernmf.fit(Y[:30, :20], engine, 2, mask=SMALL_TRAIN, seed=4, **options, **ensemble)
    assert len(result.members) == chains
    assert [m.seed for m in result.members] == list(range(4, 4 + chains))
    assert result.record.plan["options"]["num_chains"] == chains
    assert result.record.plan["seeds"] == list(range(4, 4 + chains))


SAMPLER = {"num_warmup": 5, "num_samples": 5, "progress": False}


@pytest.mark.parametrize(
    "engine, options",
    [
        ("nuts", SAMPLER),  # its default 2 chains
        ("gibbs", {**SAMPLER, "num_chains": 2}),
        ("gibbs", {**SAMPLER, "restarts": 2}),
        ("mm", {"max_iter": 30}),
        ("mm", {"restarts": 3, "max_iter": 30}),
        ("mm", {"restarts": 3, "combine": "mean", "max_iter": 30}),
    ],
)
def test_validation_changes_what_is_scored_never_the_fit(engine, options):
    """Issue 35: nuts with validation= returned one chain's draws (its record said 2 chains)."""
    train, held_out = SMALL_TRAIN, SMALL_VALIDATION
    alone = bernmf.fit(Y[:30, :20], engine, 2, mask=train, seed=4, **options)
    scored = bernmf.fit(Y[:30, :20], engine, 2, mask=train, seed=4, validation=held_out, **options)
    for name in ("W", "H", "probs", "trace"):
        np.testing.assert_array_equal(getattr(scored, name), getattr(alone, name), err_msg=name)
    assert scored.draws.keys() == alone.draws.keys()
    for name, draws in alone.draws.items():
        np.testing.assert_array_equal(scored.draws[name], draws, err_msg=name)
    assert scored.record.plan["options"] == alone.record.plan["options"]
    if alone.draws and not alone.members:  # as many chains as the record says
        assert len(scored.draws["W"]) == scored.record.plan["options"]["num_chains"]


def test_initial_factors_with_validation_alone_are_a_single_fit():
    """No ensemble without restarts or combine: init is taken, validation scores nothing."""
    init = (np.full((M, K), 1 / K), np.full((K, N), 0.5))
    alone = bernmf.fit(Y, "mm", K, mask=TRAIN, init=init, max_iter=5)
    scored = bernmf.fit(Y, "mm", K, mask=TRAIN, init=init, validation=VALIDATION, max_iter=5)
    np.testing.assert_array_equal(scored.W, alone.W)
    assert scored.mixture is None and scored.record.plan["init"] == "given"


@pytest.fixture
def never_run(monkeypatch):
    """Every engine's run and run_members replaced by a failure: input must be refused first."""

    def run(*args, **options):
        raise AssertionError("the engine ran: the input should have been refused first")

    for name in bernmf.engines():
        engine = registry.get_engine(name)
        replaced = engine._replace(run=run, run_members=run if engine.run_members else None)
        monkeypatch.setitem(registry._ENGINES, name, replaced)


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"restarts": 0}, "restarts must be an integer in \\[1, 10000\\]"),
        ({"restarts": 2.5}, "restarts must be an integer in \\[1, 10000\\]"),
        ({"restarts": 2, "combine": "median"}, "combine must be one of"),
        ({"restarts": 2, "combine": "stack"}, "give validation="),
        ({"restarts": 2, "validation": TRAIN}, "must not be training entries"),
        ({"restarts": 2, "validation": np.zeros((M, N), bool)}, "validation selects no"),
        ({"restarts": 2, "validation": VALIDATION[:, :5]}, "shape"),
        ({"restarts": 2, "init": (np.full((M, K), 1 / K), np.full((K, N), 0.5))}, "init"),
    ],
)
def test_bad_ensembles_fail_before_running(arguments, message, never_run):
    with pytest.raises(ValueError, match=message):
        bernmf.fit(Y, "mm", K, mask=TRAIN, **arguments)


def test_num_chains_other_than_restarts_is_refused(never_run):
    with pytest.raises(ValueError, match="leave num_chains out"):
        bernmf.fit(Y, "nuts", K, mask=TRAIN, restarts=3, num_chains=2)


def test_an_ensemble_saves_and_loads_with_its_members(members, tmp_path):
    result = bernmf.fit(Y, "mm", K, mask=TRAIN, restarts=4, combine="mean", **OPTIONS)
    loaded = bernmf.load(result.save(tmp_path / "ensemble.npz"))
    np.testing.assert_array_equal(loaded.probs, result.probs)
    assert loaded.mixture.table() == result.mixture.table()
    for part in ("weights", "rule", "scores", "modes", "validation_perplexity", "stacking"):
        assert getattr(loaded.mixture, part) == getattr(result.mixture, part), part
    assert len(loaded.members) == 4
    for saved, back in zip(result.members, loaded.members, strict=True):
        for name in ("W", "H", "probs", "trace"):
            np.testing.assert_array_equal(getattr(back, name), getattr(saved, name))
        assert (back.seed, back.n_iter, back.converged) == (
            saved.seed,
            saved.n_iter,
            saved.converged,
        )


def test_members_in_distant_modes_warn_at_the_caller():
    """Short fits from three seeds end in three modes: a warning names them, at this file."""
    small, _, _ = bernmf.simulate(1, 30, 20, 3, bernmf.Prior(0.3, 0.3))
    with pytest.warns(UserWarning, match="3 distinct modes") as caught:
        result = bernmf.fit(small, "mm", 3, prior=bernmf.Prior(1.2, 1, 1), restarts=3, max_iter=40)
    assert caught[0].filename == __file__
    assert sorted(set(result.mixture.modes)) == [0, 1, 2]


@pytest.mark.slow
def test_chain_stacking_without_validation_keeps_the_arviz_export():
    """gibbs chains stacked by their PSIS-LOO on the training entries; the pooled draws export."""
    options = {"num_warmup": 10, "num_samples": 30, "progress": False}
    result = bernmf.fit(Y[:30, :20], "gibbs", K, restarts=2, combine="stack", **options)
    weights = np.asarray(result.mixture.weights)
    assert weights.shape == (2,) and np.isclose(weights.sum(), 1) and (weights >= 0).all()
    mixture = weights[0] * result.members[0].probs + weights[1] * result.members[1].probs
    np.testing.assert_allclose(result.probs, mixture, rtol=0, atol=1e-12)
    tree = result.to_arviz()
    assert tree.posterior.sizes["chain"] == 2 and tree.posterior.sizes["draw"] == 30


@pytest.mark.slow
def test_a_column_without_observed_entries_warns_at_the_caller():
    """The warning of the request (bernmf.fitting.plan) points at the code that called fit."""
    small, _, _ = bernmf.simulate(1, 20, 10, 2)
    mask = np.ones(small.shape, bool)
    mask[:, 0] = False
    for ensemble in ({}, {"restarts": 2, "combine": "mean"}):
        with pytest.warns(UserWarning, match="no observed entry") as caught:
            bernmf.fit(small, "mm", 2, mask=mask, max_iter=5, **ensemble)
        assert caught[0].filename == __file__
