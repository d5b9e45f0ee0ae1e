"""Fit.probs without an M x N array kept: computed from W and H, or the members, on demand."""

from __future__ import annotations

import dataclasses
import tracemalloc
import warnings

import numpy as np
import pytest

import bernmf
from bernmf.models.spec import perplexity, probability
from bernmf.results import fit as results
from bernmf.results.fit import Record


@pytest.fixture(scope="module")
def problem():
    Y, _, _ = bernmf.simulate(3, 60, 25, 3)
    mask = np.random.default_rng(3).random(Y.shape) < 0.7
    return Y, mask


def test_a_point_estimate_keeps_no_probs_and_computes_them_from_W_and_H(problem):
    Y, mask = problem
    fit = bernmf.fit(Y, "mm", 3, mask=mask, max_iter=30)
    assert fit.stored_probs is None
    np.testing.assert_array_equal(fit.probs, probability(fit.W, fit.H))
    np.testing.assert_array_equal(fit.probs_rows(7, 19), fit.probs[7:19])
    assert fit.shape == Y.shape == fit.probs.shape
    assert fit.perplexity(Y, ~mask) == perplexity(Y, fit.probs, ~mask)


@pytest.mark.slow
def test_an_ensemble_mixes_its_members_on_demand(problem):
    Y, mask = problem
    with pytest.warns(UserWarning, match="distinct modes"):
        flat = bernmf.Prior.flat()  # its short fits end in distinct modes
        fit = bernmf.fit(Y, "mm", 3, mask=mask, prior=flat, restarts=3, combine="mean", max_iter=30)
    assert fit.stored_probs is None and all(m.stored_probs is None for m in fit.members)
    expected = sum(m.probs for m in fit.members) / 3
    np.testing.assert_allclose(fit.probs, expected, rtol=1e-15, atol=0)
    np.testing.assert_allclose(fit.probs_rows(50, 60), expected[50:], rtol=1e-15, atol=0)


def test_perplexity_by_blocks_of_rows_equals_the_whole(problem, monkeypatch):
    Y, mask = problem
    fit = bernmf.fit(Y, "mm", 3, mask=mask, max_iter=30)
    whole = perplexity(Y, fit.probs, ~mask)
    monkeypatch.setattr(results, "BLOCK_ENTRIES", 7 * Y.shape[1])  # 9 blocks, the last short
    assert fit.perplexity(Y, ~mask) == pytest.approx(whole, rel=1e-14)
    with pytest.raises(ValueError, match="no entry of Y is observed"):
        fit.perplexity(Y, np.zeros(Y.shape, bool))


def test_perplexity_of_a_large_fit_makes_no_m_by_n_array_of_floats(monkeypatch):
    M, N, K = 3000, 1000, 4  # 3e6 entries: 24 MB per float64 array
    monkeypatch.setattr(results, "BLOCK_ENTRIES", 2**18)  # blocks of 262 rows
    rng = np.random.default_rng(0)
    W = rng.dirichlet(np.ones(K), size=M)
    H = rng.random((K, N))
    Y = rng.random((M, N)) < W @ H
    fit = bernmf.Fit("mm", K, None, W, H, np.zeros(1), True, Record(0, {}))
    tracemalloc.start()
    try:
        value = fit.perplexity(Y)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert value == pytest.approx(perplexity(Y.astype(float), probability(W, H)), rel=1e-13)
    assert peak < M * N * 8  # bool copies of Y (3 x 3 MB) and one block of floats (5 x 2 MB)


@pytest.mark.slow
def test_stored_probs_are_kept_and_saved(problem, tmp_path):
    Y, mask = problem
    fit = bernmf.fit(Y, "vb", 3, mask=mask, max_iter=20)
    assert fit.stored_probs is None  # vb's predictive is the product of its means
    logistic = bernmf.fit(Y, "logsvd", 2, mask=mask, max_iter=20)
    assert logistic.stored_probs is not None
    loaded = bernmf.load(logistic.save(tmp_path / "logsvd.npz"))
    np.testing.assert_array_equal(loaded.probs, logistic.probs)
    mm = bernmf.fit(Y, "mm", 3, mask=mask, restarts=2, combine="mean", max_iter=20)
    path = mm.save(tmp_path / "mm.npz")
    with np.load(path) as archive:
        assert not any("probs" in name for name in archive.files)  # nothing to store
    again = bernmf.load(path)
    assert again.stored_probs is None
    np.testing.assert_array_equal(again.probs, mm.probs)


@pytest.mark.parametrize("kind", ["single", "ensemble", "stored"])
@pytest.mark.filterwarnings("ignore:the 3 members reached")
def test_probs_at_entries_equal_probs_there_block_by_block(problem, monkeypatch, kind):
    Y, mask = problem
    if kind == "stored":
        fit = bernmf.fit(Y, "logsvd", 2, mask=mask, max_iter=20)
    else:
        restarts = 3 if kind == "ensemble" else 1
        fit = bernmf.fit(Y, "mm", 3, mask=mask, restarts=restarts, combine="mean", max_iter=30)
    rows, columns = np.nonzero(~mask)
    monkeypatch.setattr(results, "BLOCK_ENTRIES", 4 * Y.shape[1])  # blocks of 4 rows
    np.testing.assert_array_equal(fit.probs_at(rows, columns), fit.probs[rows, columns])
    assert fit.probs_at(rows[:0], columns[:0]).shape == (0,)


def test_probs_at_a_few_entries_of_a_large_fit_makes_no_m_by_n_array(monkeypatch):
    M, N, K = 3000, 1000, 4
    monkeypatch.setattr(results, "BLOCK_ENTRIES", 2**18)
    rng = np.random.default_rng(1)
    fit = bernmf.Fit("mm", K, None, rng.dirichlet(np.ones(K), M), rng.random((K, N)),
                     np.zeros(1), True, Record(0, {}))  # fmt: skip
    rows, columns = np.nonzero(rng.random((M, N)) < 0.01)
    tracemalloc.start()
    try:
        p = fit.probs_at(rows, columns)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(p, probability(fit.W, fit.H)[rows, columns])
    assert peak < M * N * 8 / 4  # W @ H and its clip of 262 rows (2 x 2.1 MB), not 24 MB


def test_a_warning_deep_in_bernmf_points_at_the_line_that_called_it():
    """bernmf._warnings: Fit.perplexity's warning, three frames down, names this line."""
    fit = bernmf.Fit(
        "mm", 1, None, np.ones((2, 1)), np.array([[0.0, 1.0]]), np.zeros(1), True, Record(0, {})
    )
    with pytest.warns(bernmf.ZeroProbabilityWarning, match="probability 0") as caught:
        assert fit.perplexity(np.array([[1.0, 1.0], [0.0, 1.0]])) == np.inf
    assert [w.filename for w in caught] == [__file__]


def test_a_fit_is_a_record_of_typed_parts(problem):
    """Issue 35: at most 12 fields; what was read from extras keys is typed parts."""
    Y, mask = problem
    assert len(dataclasses.fields(bernmf.Fit)) <= 12
    with warnings.catch_warnings():  # the members' modes, if they differ: not the point here
        warnings.simplefilter("ignore", UserWarning)
        fit = bernmf.fit(Y, "mm", 3, mask=mask, restarts=3, combine="mean", max_iter=30)
    mixture = fit.mixture
    assert set(fit.extras) == set(mixture.members[0].extras)  # the engine's own, only
    assert fit.members == mixture.members and mixture.rule == "mean"
    assert mixture.weights == (1 / 3,) * 3 and mixture.stacking is None
    chosen = fit.members[mixture.chosen]
    assert chosen.objective == min(m.objective for m in fit.members)
    assert (fit.W is chosen.W) and fit.seed == chosen.seed == fit.record.seed
    assert fit.n_iter == fit.trace.size - 1 == chosen.n_iter
    assert fit.record.plan["seeds"] == [0, 1, 2] and fit.observed is fit.record.observed
    assert fit.timings["run"] == pytest.approx(sum(m.timings["run"] for m in fit.members))
    assert fit.posterior is None and fit.draws == {} and fit.sample_stats == {}


def test_a_stack_shows_the_factors_of_its_member_of_largest_weight():
    """A stack has no factors of its own: W, H, rank, prior, trace and seed are its chosen
    member's, and its probs the mixture (not W @ H)."""
    Y, _, _ = bernmf.simulate(2, 50, 30, 3, bernmf.Prior(0.3, 0.3, 0.3))  # clear structure
    mask = np.random.default_rng(2).random(Y.shape) < 0.7
    options = {"mask": mask, "max_iter": 50}
    fits = [bernmf.fit(Y, "mm", 2, prior=bernmf.Prior(1.2, 1.2), **options),
            bernmf.fit(Y, "logsvd", 2, **options)]  # fmt: skip
    stacked = bernmf.stack(fits, Y, validation=~mask)
    mixture = stacked.mixture
    assert sorted(mixture.weights)[-2] > 0.01  # two members mixed
    top = stacked.members[mixture.chosen]
    assert mixture.chosen == int(np.argmax(mixture.weights)) and mixture.rule == "stack"
    assert stacked.engine == "stack" and stacked.mixture.stacking.seeds == "mean"
    for name in ("W", "H", "rank", "prior", "trace", "seed"):
        assert getattr(stacked, name) is getattr(top, name), name
    mixed = sum(w * m.probs for w, m in zip(mixture.weights, stacked.members, strict=True))
    np.testing.assert_allclose(stacked.probs, mixed, rtol=1e-15, atol=0)
    assert not np.allclose(stacked.probs, probability(stacked.W, stacked.H))
