"""The engine contract, checked for every registered engine.

Every test takes the fixture ``name``, parametrized over :func:`bernmf.engines` (read
at import), so a new engine is tested by registering it. The engines run with the
small options of :data:`FAST_OPTIONS` (an engine missing from it runs with its
defaults) on one small simulated data set; the fits are made once per process
(:func:`fitted`) and shared by the tests. All fits have the same shapes, so each
engine compiles once; ``name`` is module-scoped, so pytest orders the tests engine by
engine and pytest-xdist hands each worker runs of one engine's tests.

The per-engine tests (references against numpy, R or exact enumeration, engine
invariants, bad options and data) stay in the engines' own test files.
"""

from __future__ import annotations

import functools
import inspect

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from helpers import assert_same

import bernmf
from bernmf.inference import _compile, get_engine, registry

ENGINES = bernmf.engines()

FAST_OPTIONS = {
    "gibbs": {"num_warmup": 20, "num_samples": 10, "num_chains": 2, "progress": False},
    "nuts": {"num_warmup": 20, "num_samples": 10, "num_chains": 2, "progress": False},
    "svi": {"steps": 100, "num_draws": 10, "progress": False},
}
"""Options that keep each engine fast on the data below; mm, em, vb, logsvd and logpca
(m fixed at its default 4, so no grid) run with their defaults."""

FORWARDS = {"em": "mm"}
"""Engines whose ``run`` takes ``**options`` and hands them to another engine's."""

SEED_IS_RECORDED_ONLY = {"logsvd", "logpca"}
"""Engines started deterministically (R's SVD start; logpca with m fixed): their ``run``
documents the seed as recorded only, so another seed gives the same fit."""

M, N, K = 30, 20, 3
_Y, _, _ = bernmf.simulate(0, M, N, K)
ROWS = pd.Index([f"row{i}" for i in range(M)], name="animal")
COLUMNS = pd.Index([f"trait{j}" for j in range(N)], name="trait")
MASK = np.random.default_rng(1).random((M, N)) < 0.8
"""The training entries; the others are held out and must never matter."""

_CHANGED = np.where(MASK, _Y, 1 - _Y)  # every held-out entry flipped ...
_CHANGED[~MASK & (np.add.outer(np.arange(M), np.arange(N)) % 2 == 0)] = np.nan  # ... or NaN
DATA = {
    "base": pd.DataFrame(_Y, index=ROWS, columns=COLUMNS),
    "changed": pd.DataFrame(_CHANGED, index=ROWS, columns=COLUMNS),
}
"""The labelled data, and the same with every held-out entry changed (to NaN or flipped)."""


def fit(engine: str, data: str = "base", seed: int = 0) -> bernmf.Fit:
    """A new fit of ``engine`` on ``DATA[data]`` with the mask."""
    options = FAST_OPTIONS.get(engine, {})
    return bernmf.fit(DATA[data], engine, K, mask=MASK, seed=seed, **options)


@functools.cache
def fitted(engine: str, case: str = "base") -> bernmf.Fit:
    """The fit of ``engine`` in ``case``, made once per process.

    ``"base"``: ``fit(engine)``; ``"again"``: the same once more; ``"changed"``: on the
    changed data; ``"seed"``: with seed 1.
    """
    if case == "seed":
        return fit(engine, seed=1)
    return fit(engine, "changed" if case == "changed" else "base")


@pytest.fixture(scope="module", params=ENGINES)
def name(request) -> str:
    """Each registered engine's name (module-scoped: tests run engine by engine)."""
    return request.param


def assert_same_fit(a: bernmf.Fit, b: bernmf.Fit):
    """W, H, probs, trace and draws bit for bit."""
    for name in ("W", "H", "probs", "trace"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert list(a.draws) == list(b.draws)
    for name in a.draws:
        np.testing.assert_array_equal(a.draws[name], b.draws[name], err_msg=f"draws {name}")


def on_simplex(W) -> bool:
    """Every row of W non-negative and summing to 1."""
    return bool(np.all(W >= 0) and np.allclose(W.sum(axis=-1), 1, rtol=0, atol=1e-6))


def in_unit_interval(H) -> bool:
    """Every entry in [0, 1]."""
    return bool(np.all((H >= 0) & (H <= 1)))


@pytest.fixture
def never_run(monkeypatch):
    """Replace every engine's ``run`` by one that fails the test if it is called."""
    calls = []

    def run(*args, **options):
        calls.append(options)
        raise AssertionError("the engine ran: the input should have been refused first")

    for name in ENGINES:
        monkeypatch.setitem(registry._ENGINES, name, get_engine(name)._replace(run=run))
    return calls


def test_fast_options_are_for_registered_engines():
    """FAST_OPTIONS and the other lists name no engine that is not registered."""
    named = set(FAST_OPTIONS) | set(FORWARDS) | SEED_IS_RECORDED_ONLY
    assert named <= set(ENGINES)


def test_shapes_and_ranges(name):
    """W (M, K), H (K, N), probs (M, N) finite in [0, 1]; a finite trace; the fit's record."""
    engine, result = get_engine(name), fitted(name)
    assert result.W.shape == (M, K) and result.H.shape == (K, N) and result.probs.shape == (M, N)
    for array in (result.W, result.H, result.probs, result.trace):
        assert np.all(np.isfinite(array))
    assert in_unit_interval(result.probs)
    assert result.trace.ndim == 1 and result.trace.size >= 1
    assert isinstance(result.n_iter, int) and result.n_iter >= 1
    if engine.converges:  # a stopping rule or a check of the trace
        assert isinstance(result.converged, bool)
    else:  # a sampler: it has no meaning
        assert result.converged is None
    assert isinstance(engine.trace, str) and engine.trace
    assert {"compile", "run"} <= set(result.timings)
    assert (result.engine, result.rank, result.seed) == (name, K, 0)
    if engine.takes_prior:  # the default prior, broadcast to (K,)
        expected = engine.default_prior.broadcast(K)
        for got, value in zip(result.prior, expected, strict=True):
            np.testing.assert_array_equal(got, value)
    else:
        assert result.prior is None


def test_trace_has_the_initial_value_and_one_per_iteration(name):
    """``trace`` is one value at the start and one per iteration: ``n_iter`` is its length
    less one (a property of :class:`bernmf.Fit`, no field of its own)."""
    result = fitted(name)
    assert result.trace.ndim == 1 and result.trace.size >= 2
    assert isinstance(result.n_iter, int) and result.n_iter == result.trace.size - 1


def test_an_ensemble_member_is_scored_and_traced_as_the_fit_of_its_seed(name):
    """A member's seed reproduces it; its trace and score are those of that fit alone."""
    engine = get_engine(name)
    members = stacked(name).members
    for member in members:
        alone = fit(name, seed=member.seed) if engine.seed_count is None else bernmf.fit(
            DATA["base"], name, K, mask=MASK, seed=member.seed,
            **{**FAST_OPTIONS.get(name, {}), engine.seed_count: 1},
        )  # fmt: skip
        np.testing.assert_allclose(member.trace, alone.trace, rtol=1e-6)
        np.testing.assert_allclose(member.W, alone.W, atol=1e-6)
        assert engine.score(member) == pytest.approx(engine.score(alone), rel=1e-6)
    scores = stacked(name).mixture.scores
    assert scores == tuple(engine.score(m) for m in members)
    if engine.scores == "draws":  # over the kept draws, not the last one
        assert scores[0] == pytest.approx(-np.mean(members[0].sample_stats["lp"]))


def test_declared_probabilities_match_the_factors(name):
    """probabilities=True: W rows on the simplex and H in [0, 1]; False: they are not."""
    result = fitted(name)
    are_probabilities = on_simplex(result.W) and in_unit_interval(result.H)
    assert are_probabilities == get_engine(name).probabilities


def test_declared_bayesian_matches_the_draws(name):
    """bayesian=True: draws W (C, S, M, K), H (C, S, K, N) in range; otherwise none."""
    engine, result = get_engine(name), fitted(name)
    if not engine.bayesian:
        assert result.draws == {} and result.sample_stats == {}
        return
    assert set(result.draws) == {"W", "H"}
    W, H = result.draws["W"], result.draws["H"]
    C, S = W.shape[:2]
    options = {**engine.options, **FAST_OPTIONS.get(name, {})}
    if "num_chains" in options:
        assert C == options["num_chains"] and S == options["num_samples"]
    else:  # one chain of draws from an approximation (svi, vb)
        assert C == 1 and S == options["num_draws"]
    assert W.shape == (C, S, M, K) and H.shape == (C, S, K, N) and C * S > 1
    assert np.all(np.isfinite(W)) and np.all(np.isfinite(H))
    if engine.probabilities:
        assert on_simplex(W) and in_unit_interval(H)
    for stat, values in result.sample_stats.items():
        assert np.shape(values) == (C, S), stat


def test_entries_outside_the_mask_change_nothing(name):
    """Held-out entries flipped or NaN give the same fit bit for bit (every engine is
    deterministic given its seed, so no tolerance is needed)."""
    assert_same_fit(fitted(name), fitted(name, "changed"))


def test_same_seed_same_fit_and_another_seed_another(name):
    """The same seed gives the same fit bit for bit; another seed another fit, except for
    the engines of SEED_IS_RECORDED_ONLY, where it gives the same fit with its seed."""
    base, other = fitted(name), fitted(name, "seed")
    assert_same_fit(base, fitted(name, "again"))
    assert other.seed == 1
    if name in SEED_IS_RECORDED_ONLY:
        assert_same_fit(base, other)
    else:
        assert not np.array_equal(base.W, other.W)
        assert not np.array_equal(base.probs, other.probs)


def test_a_second_call_with_the_same_shapes_compiles_nothing(name, monkeypatch):
    """From an empty cache the first fit compiles through bernmf.inference._compile; a
    second one on other data of the same shapes, with another seed, compiles nothing."""
    monkeypatch.setattr(_compile, "_CACHE", {})
    first = fit(name)
    size = _compile.cache_size()
    assert size > 0 and first.timings["compile"] > 0
    second = fit(name, "changed", seed=1)
    assert _compile.cache_size() == size
    assert second.timings["compile"] == 0.0


def test_an_unknown_option_is_a_type_error_listing_the_options(name, never_run):
    """The message names the unknown option and every option the engine takes."""
    with pytest.raises(TypeError, match=r"does not take option\(s\) \['max_iters'\]") as error:
        bernmf.fit(DATA["base"], name, K, max_iters=5)
    for option in get_engine(name).options:
        assert repr(option) in str(error.value), option
    assert never_run == []


BAD_PRIORS = [
    pytest.param(bernmf.Prior(alpha=-1.0), "must be positive", id="negative"),
    pytest.param(bernmf.Prior(beta=np.nan), "must be finite", id="nan"),
    pytest.param(bernmf.Prior(gamma=[1.0, 2.0]), "length rank=3", id="length"),
]


@pytest.mark.parametrize(("prior", "message"), BAD_PRIORS)
def test_a_bad_prior_fails_before_compiling(name, prior, message, never_run):
    """A ValueError before the engine runs and before anything compiles; an engine that
    takes no prior refuses any prior (a good one too) saying so."""
    size = _compile.cache_size()
    if get_engine(name).takes_prior:
        with pytest.raises(ValueError, match=message):
            bernmf.fit(DATA["base"], name, K, prior=prior)
    else:
        for given in (prior, bernmf.Prior()):
            with pytest.raises(ValueError, match=f"'{name}' .*takes no prior"):
                bernmf.fit(DATA["base"], name, K, prior=given)
    assert never_run == [] and _compile.cache_size() == size


def test_dataframe_labels_come_back(name):
    """The frames of a fit to a labelled DataFrame carry its row and column labels."""
    frames = fitted(name).frames
    pd.testing.assert_index_equal(frames.W.index, ROWS, exact=True)
    pd.testing.assert_index_equal(frames.H.columns, COLUMNS, exact=True)
    pd.testing.assert_index_equal(frames.probs.index, ROWS, exact=True)
    pd.testing.assert_index_equal(frames.probs.columns, COLUMNS, exact=True)


def test_save_and_load_give_the_same_fit(name, tmp_path):
    """Every field comes back: arrays bit for bit, prior, labels, draws, extras, data."""
    result = fitted(name)
    loaded = bernmf.load(result.save(tmp_path / "f.npz"))
    assert_same(result, loaded)
    assert loaded.engine == name


def test_to_arviz(name):
    """Bayesian engines: a DataTree whose posterior holds the draws of W and H with their
    chain and draw dims; the others: a ValueError saying the fit has no draws."""
    result = fitted(name)
    if not get_engine(name).bayesian:
        with pytest.raises(ValueError, match="no posterior draws"):
            result.to_arviz()
        return
    tree = result.to_arviz()
    assert isinstance(tree, xr.DataTree)
    posterior = tree["posterior"]
    C, S = result.draws["W"].shape[:2]
    assert posterior["W"].dims == ("chain", "draw", "row", "component")
    assert posterior["H"].dims == ("chain", "draw", "component", "column")
    assert dict(posterior.sizes) == {"chain": C, "draw": S, "row": M, "column": N, "component": K}
    np.testing.assert_array_equal(posterior["W"].values, result.draws["W"])
    np.testing.assert_array_equal(posterior["H"].values, result.draws["H"])


def test_declared_options_are_the_keyword_only_parameters_of_run(name):
    """``options`` names exactly run's keyword-only parameters (run has no other
    defaults); an engine whose run takes ``**options`` declares its target's options."""
    engine = get_engine(name)
    parameters = list(inspect.signature(engine.run).parameters.values())
    positional = [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert positional == ["data", "rank", "prior", "seed", "init"]
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        assert name in FORWARDS, f"{name}.run takes **options: add where they go to FORWARDS"
        assert dict(engine.options) == dict(get_engine(FORWARDS[name]).options)
        return
    keyword_only = {p.name: p.default for p in parameters if p.kind is p.KEYWORD_ONLY}
    assert set(keyword_only) == set(engine.options)
    assert all(default is inspect.Parameter.empty for default in keyword_only.values())


def test_every_engine_is_listed_and_found_by_name():
    """bernmf.engines() is sorted and each name gives the engine registered under it."""
    assert ENGINES == sorted(ENGINES) and len(set(ENGINES)) == len(ENGINES)
    for name in ENGINES:
        assert get_engine(name).name == name
    with pytest.raises(ValueError, match="unknown engine"):
        get_engine("no-such-engine")


VALIDATION = ~MASK & (np.add.outer(np.arange(M), np.arange(N)) % 2 == 1)
"""Held-out entries that weight the members of a stacked ensemble; observed in both data."""


@functools.cache
def stacked(engine: str, data: str = "base") -> bernmf.Fit:
    """An ensemble of two members of ``engine``, stacked on :data:`VALIDATION`."""
    options = FAST_OPTIONS.get(engine, {})
    return bernmf.fit(
        DATA[data], engine, K, mask=MASK, restarts=2, combine="stack", validation=VALIDATION,
        **options,
    )  # fmt: skip


def test_an_ensemble_mixes_its_members_by_their_weights(name):
    """Two members; weights on the simplex; probs the weighted mixture of theirs, in [0, 1]."""
    result = stacked(name)
    weights = np.asarray(result.mixture.weights)
    assert len(result.members) == 2 and weights.shape == (2,)
    assert np.all(weights >= 0) and np.isclose(weights.sum(), 1)
    mixture = sum(w * m.probs for w, m in zip(weights, result.members, strict=True))
    np.testing.assert_allclose(result.probs, mixture, rtol=0, atol=1e-12)
    assert in_unit_interval(result.probs)
    y, p = _Y[VALIDATION], mixture[VALIDATION]
    with np.errstate(divide="ignore"):  # exact, as perplexity: probability 0 scores inf
        by_hand = -np.mean(np.log(np.where(y == 1, p, 1 - p)))
    assert np.isclose(result.perplexity(DATA["base"], VALIDATION), by_hand, rtol=1e-12)
    # the weights maximize the mixture's log score on the entries they were fitted on
    members = [m.perplexity(DATA["base"], VALIDATION) for m in result.members]
    assert by_hand <= min(members) + 1e-9


def test_an_ensemble_ignores_entries_outside_the_mask_and_validation(name):
    """Changing Y where neither the mask nor the validation entries look changes nothing."""
    changed = DATA["changed"].to_numpy().copy()
    changed[VALIDATION] = _Y[VALIDATION]
    data = pd.DataFrame(changed, index=ROWS, columns=COLUMNS)
    options = FAST_OPTIONS.get(name, {})
    other = bernmf.fit(
        data, name, K, mask=MASK, restarts=2, combine="stack", validation=VALIDATION, **options
    )
    assert_same_fit(stacked(name), other)
    assert stacked(name).mixture.weights == other.mixture.weights
