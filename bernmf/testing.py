"""The engine contract as checks, for any engine: :func:`check_engine`.

What ``tests/test_engines.py`` checks of every built-in engine, in the package, so that an
engine of one's own (:func:`bernmf.register_engine`, or a plugin of the entry-point group
``bernmf.engines``) is checked the same way, as scikit-learn's ``check_estimator`` checks
an estimator::

    from bernmf.testing import check_engine

    check_engine(ENGINE, {"num_samples": 10})  # raises EngineCheckError listing failures

Each check (:data:`CHECKS`) reads an :class:`EngineCase`: the engine, the small options
it runs with, one small simulated data set (:data:`M` x :data:`N`, rank :data:`K`, a
mask of training entries and a labelled DataFrame) and the fits it needs, each made once
per case and shared by the checks. A check raises AssertionError saying what failed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import tempfile
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bernmf.api import fit
from bernmf.inference.registry import Engine, check_declaration, get_engine, replaced
from bernmf.models.simulate import simulate
from bernmf.models.spec import Prior
from bernmf.results.fit import Fit
from bernmf.results.loading import load

M, N, K = 30, 20, 3
"""The shape and rank of the checks' data: each engine compiles for these shapes once."""

SMALL_OPTIONS = {
    "gibbs": {"num_warmup": 20, "num_samples": 10, "num_chains": 2, "progress": False},
    "nuts": {"num_warmup": 20, "num_samples": 10, "num_chains": 2, "progress": False},
    "svi": {"steps": 100, "num_draws": 10, "progress": False},
}
"""The options the built-in engines are checked with when none are given (the others run
with their defaults: mm, em, vb, logsvd and logpca converge on the checks' data in a
fraction of a second)."""

DETERMINISTIC = frozenset({"logsvd", "logpca"})
"""The built-in engines started deterministically (R's SVD start; logpca with m fixed):
their ``run`` documents the seed as recorded only, so another seed gives the same fit."""

MESSAGE_LENGTH = 400
"""Characters of a failure's message that :class:`EngineCheckError` keeps."""

FLOAT_TOLERANCE = 1e-6
"""Tolerance of W on the simplex and of a member's refit (float32 engines round)."""


class EngineCheckError(AssertionError):
    """Raised by :func:`check_engine`: one line per failed check, ``name: what failed``.

    Attributes
    ----------
    failures : dict
        The failed checks' names and messages.
    """

    def __init__(self, engine: str, failures: Mapping[str, str]):
        self.failures = dict(failures)
        lines = [f"  {name}: {message}" for name, message in self.failures.items()]
        count = len(self.failures)
        super().__init__(
            f"engine {engine!r} failed {count} check(s) of the contract:\n" + "\n".join(lines)
        )


def expect(condition, message: str) -> None:
    """Raise AssertionError with ``message`` unless ``condition`` (kept under ``python -O``,
    unlike ``assert``)."""
    if not condition:
        raise AssertionError(message)


def on_simplex(W) -> bool:
    """Every row of W (..., K) non-negative and summing to 1."""
    W = np.asarray(W)
    return bool(np.all(W >= 0) and np.allclose(W.sum(axis=-1), 1, rtol=0, atol=FLOAT_TOLERANCE))


def in_unit_interval(H) -> bool:
    """Every entry in [0, 1]."""
    H = np.asarray(H)
    return bool(np.all((H >= 0) & (H <= 1)))


def assert_same(saved, loaded, where: str = "fit") -> None:
    """Recursive equality: arrays bit for bit with dtype, indexes with dtype and name,
    dataclasses field by field, named tuples (a Prior, an Observed) by type and field.

    Raises
    ------
    AssertionError
        Naming the first part that differs (``fit.record.timings['run']``, ...).
    """
    if dataclasses.is_dataclass(saved):
        for field in dataclasses.fields(saved):
            name = field.name
            assert_same(getattr(saved, name), getattr(loaded, name), f"{where}.{name}")
    elif isinstance(saved, pd.Index):
        expect(isinstance(loaded, pd.Index), where)
        pd.testing.assert_index_equal(saved, loaded, exact=True, obj=where)
        expect(saved.name == loaded.name, where)
    elif isinstance(saved, tuple) and hasattr(saved, "_fields"):  # Prior, Observed
        expect(type(saved) is type(loaded), where)
        for name in saved._fields:
            assert_same(getattr(saved, name), getattr(loaded, name), f"{where}.{name}")
    elif isinstance(saved, np.ndarray | np.generic):
        expect(type(saved) is type(loaded), where)
        expect(saved.dtype == loaded.dtype and saved.shape == loaded.shape, where)
        np.testing.assert_array_equal(saved, loaded, err_msg=where, strict=True)
    elif isinstance(saved, dict):
        expect(isinstance(loaded, dict) and list(saved) == list(loaded), where)
        for key in saved:
            assert_same(saved[key], loaded[key], f"{where}[{key!r}]")
    elif isinstance(saved, list | tuple):
        expect(type(saved) is type(loaded) and len(saved) == len(loaded), where)
        for i, (a, b) in enumerate(zip(saved, loaded, strict=True)):
            assert_same(a, b, f"{where}[{i}]")
    elif isinstance(saved, float) and np.isnan(saved):  # e.g. nuts' timings["compile"]
        expect(type(loaded) is float and np.isnan(loaded), f"{where}: {saved} != {loaded}")
    else:
        expect(type(saved) is type(loaded) and saved == loaded, f"{where}: {saved} != {loaded}")


def assert_same_fit(a: Fit, b: Fit) -> None:
    """W, H, probs, trace and draws bit for bit."""
    for name in ("W", "H", "probs", "trace"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    expect(list(a.draws) == list(b.draws), f"draws {list(a.draws)} != {list(b.draws)}")
    for name in a.draws:
        np.testing.assert_array_equal(a.draws[name], b.draws[name], err_msg=f"draws {name}")


@functools.cache
def _data() -> dict[str, Any]:
    """The checks' data, made once: Y simulated from the model, the training mask, the
    validation entries and the labelled DataFrames (:class:`EngineCase`)."""
    Y = simulate(0, M, N, K)[0]
    rows = pd.Index([f"row{i}" for i in range(M)], name="animal")
    columns = pd.Index([f"trait{j}" for j in range(N)], name="trait")
    mask = np.random.default_rng(1).random((M, N)) < 0.8
    odd = np.add.outer(np.arange(M), np.arange(N)) % 2 == 1
    changed = np.where(mask, Y, 1 - Y)  # every held-out entry flipped ...
    changed[~mask & ~odd] = np.nan  # ... or NaN
    validation = ~mask & odd
    stacking = changed.copy()
    stacking[validation] = Y[validation]
    zeros = np.where(mask, Y, 0.0)
    frames = {
        name: pd.DataFrame(values, index=rows, columns=columns)
        for name, values in (
            ("base", Y),
            ("changed", changed),
            ("stacking", stacking),
            ("zeros", zeros),
        )
    }
    return {
        "Y": Y,
        "rows": rows,
        "columns": columns,
        "mask": mask,
        "validation": validation,
        "frames": frames,
    }


FITS = {
    "base": ("base", 0, True),
    "again": ("base", 0, True),
    "changed": ("changed", 0, True),
    "seed": ("base", 1, True),
    "zeros": ("zeros", 0, False),
}
"""Each fit of :meth:`EngineCase.fitted`: its data, seed, and whether the mask is given."""


class EngineCase:
    """An engine checked with ``options`` on the checks' data, its fits made once each.

    Parameters
    ----------
    engine : Engine or str
        An engine, or the name of a registered one.
    options : mapping, optional
        Options every fit of the checks passes (small ones keep the checks fast); by
        default a built-in engine's :data:`SMALL_OPTIONS`, else none.
    deterministic : bool, optional
        The engine's fit does not depend on its seed (it records it only): another seed
        must then give the same fit, rather than another. By default True for the
        built-in engines of :data:`DETERMINISTIC`, else False.

    Attributes
    ----------
    Y : ndarray of shape (M, N)
        Simulated from the model at rank :data:`K` (seed 0).
    mask : bool ndarray of shape (M, N)
        The training entries (80 %); the others must never matter.
    validation : bool ndarray of shape (M, N)
        Held-out entries that weigh an ensemble's members (``combine="stack"``).
    rows, columns : pandas.Index
        The labels of the data's DataFrames.
    """

    def __init__(self, engine: Engine | str, options=None, *, deterministic: bool | None = None):
        self.engine = get_engine(engine) if isinstance(engine, str) else engine
        self.options = dict(SMALL_OPTIONS.get(self.engine.name, {}) if options is None else options)
        if deterministic is None:
            deterministic = self.engine.name in DETERMINISTIC
        self.deterministic = bool(deterministic)
        data = _data()
        self.Y, self.mask, self.validation = data["Y"], data["mask"], data["validation"]
        self.rows, self.columns, self._frames = data["rows"], data["columns"], data["frames"]
        self._fits: dict[str | tuple, Fit] = {}

    @property
    def name(self) -> str:
        """The engine's name, under which it is fitted."""
        return self.engine.name

    def registered(self):
        """A context in which the engine is registered under its name (see
        :func:`bernmf.inference.registry.replaced`)."""
        return replaced(self.engine)

    def frame(self, data: str = "base") -> pd.DataFrame:
        """The labelled data: ``"base"``; ``"changed"``: every held-out entry flipped or NaN;
        ``"stacking"``: as ``"changed"`` but the validation entries those of ``"base"``;
        ``"zeros"``: every held-out entry 0."""
        return self._frames[data]

    def fit(self, data: str = "base", seed: int = 0, *, masked: bool = True, **options) -> Fit:
        """A new fit of the engine to :meth:`frame` ``(data)`` with the mask (without it,
        every entry that is not NaN observed) and the case's options (``options`` added)."""
        mask = self.mask if masked else None
        with self.registered():
            return fit(
                self.frame(data), self.name, K, mask=mask, seed=seed, **{**self.options, **options}
            )

    def fitted(self, case: str = "base") -> Fit:
        """The fit of ``case`` (:data:`FITS`), made once: ``"base"`` (:meth:`fit`),
        ``"again"`` (the same once more), ``"changed"`` (on the changed data), ``"seed"``
        (seed 1), ``"zeros"`` (every held-out entry observed, as 0)."""
        if case not in self._fits:
            data, seed, masked = FITS[case]
            self._fits[case] = self.fit(data, seed, masked=masked)
        return self._fits[case]

    def stacked(self, data: str = "base") -> Fit:
        """An ensemble of two members stacked on :attr:`validation`, made once per data."""
        key = ("stacked", data)
        if key not in self._fits:
            with self.registered():
                self._fits[key] = fit(
                    self.frame(data),
                    self.name,
                    K,
                    mask=self.mask,
                    restarts=2,
                    combine="stack",
                    validation=self.validation,
                    **self.options,
                )
        return self._fits[key]

    @contextlib.contextmanager
    def refusing(self):
        """A context in which the engine fails if anything runs it; yields the list of the
        options of the runs attempted (empty when the input was refused first)."""
        calls = []

        def run(*args, **options):
            calls.append(options)
            raise AssertionError("the engine ran: the input should have been refused first")

        runs = {"run": run}
        runs |= {
            name: run
            for name in ("run_members", "run_settings")
            if getattr(self.engine, name) is not None
        }
        with replaced(self.engine._replace(**runs)):
            yield calls


def check_shapes_and_ranges(case: EngineCase) -> None:
    """W (M, K), H (K, N), probs (M, N) finite, probs in [0, 1]; ``converged`` a bool for an
    engine that converges, else None; timings of compile and run; engine, rank and seed;
    the default prior broadcast to (K,), or None for an engine without one."""
    engine, result = case.engine, case.fitted()
    shapes = (np.shape(result.W), np.shape(result.H), np.shape(result.probs))
    expect(
        shapes == ((M, K), (K, N), (M, N)),
        f"W, H, probs of shapes {shapes}, not {((M, K), (K, N), (M, N))}",
    )
    for name in ("W", "H", "probs", "trace"):
        expect(np.all(np.isfinite(getattr(result, name))), f"{name} is not finite")
    expect(in_unit_interval(result.probs), "probs outside [0, 1]")
    if engine.converges:
        expect(
            isinstance(result.converged, bool),
            "converged is not a bool "
            f"(the engine declares converges=True), got {result.converged!r}",
        )
    else:
        expect(result.converged is None, "converged is not None (converges=False)")
    expect(isinstance(engine.trace, str) and engine.trace, "the engine's trace is not described")
    expect(
        {"compile", "run"} <= set(result.timings),
        f"timings {dict(result.timings)} lack 'compile' or 'run'",
    )
    got = (result.engine, result.rank, result.seed)
    expect(got == (case.name, K, 0), f"engine, rank, seed {got} != {(case.name, K, 0)}")
    if engine.takes_prior:
        expected = engine.default_prior.broadcast(K)
        expect(result.prior is not None, "prior None for an engine that takes one")
        for got, value in zip(result.prior, expected, strict=True):
            np.testing.assert_array_equal(got, value, err_msg="prior")
    else:
        expect(result.prior is None, "a prior for an engine that takes none")


def check_trace(case: EngineCase) -> None:
    """The trace is one value at the start and one per iteration (``n_iter`` its length less
    one, at least 1); an engine that converges ends better than it starts, in its declared
    direction (:attr:`~bernmf.Engine.maximizes`)."""
    engine, trace = case.engine, np.asarray(case.fitted().trace)
    expect(trace.ndim == 1 and trace.size >= 2, f"trace of shape {trace.shape}, not (n_iter + 1,)")
    n_iter = case.fitted().n_iter
    expect(isinstance(n_iter, int) and n_iter == trace.size - 1, "n_iter != trace.size - 1")
    if engine.converges:
        better = trace[-1] >= trace[0] if engine.maximizes else trace[-1] <= trace[0]
        way = "rise" if engine.maximizes else "fall"
        expect(
            better,
            f"the trace does not {way} (maximizes={engine.maximizes}): from "
            f"{trace[0]:.6g} to {trace[-1]:.6g}",
        )


def check_declared_probabilities(case: EngineCase) -> None:
    """probabilities=True: W's rows on the simplex and H in [0, 1]; False: not both."""
    result = case.fitted()
    are = on_simplex(result.W) and in_unit_interval(result.H)
    expect(
        are == case.engine.probabilities,
        f"the engine declares probabilities={case.engine.probabilities}, but W's rows "
        f"{'are' if on_simplex(result.W) else 'are not'} on the simplex and H "
        f"{'is' if in_unit_interval(result.H) else 'is not'} in [0, 1]",
    )


def check_draws(case: EngineCase) -> None:
    """bayesian=True: draws W (C, S, M, K) and H (C, S, K, N), finite, in range when the
    factors are probabilities, C = option ``num_chains`` (1 without it), S = ``num_samples``
    // ``thinning`` or ``num_draws`` when declared, each sampler statistic (C, S); otherwise
    no draws and no statistics."""
    engine, result = case.engine, case.fitted()
    if not engine.bayesian:
        expect(
            result.draws == {} and result.sample_stats == {},
            "draws or sample_stats from an engine that declares bayesian=False",
        )
        return
    expect(set(result.draws) == {"W", "H"}, f"draws {sorted(result.draws)}, not ['H', 'W']")
    W, H = (np.asarray(result.draws[x]) for x in "WH")
    expect(W.ndim == 4, f"W draws of shape {W.shape}, not (C, S, M, K)")
    C, S = W.shape[:2]
    expect(
        W.shape == (C, S, M, K) and H.shape == (C, S, K, N),
        f"draws W {W.shape}, H {H.shape}, not {(C, S, M, K)}, {(C, S, K, N)}",
    )
    expect(C * S > 1, "a single draw")
    options = {**engine.options, **case.options}
    chains = options.get("num_chains", 1)
    expect(C == chains, f"{C} chains, not num_chains={chains}")
    if "num_samples" in options:
        expected = options["num_samples"] // options.get("thinning", 1)
        expect(S == expected, f"{S} draws a chain, not num_samples // thinning = {expected}")
    elif "num_draws" in options:
        expect(S == options["num_draws"], f"{S} draws, not num_draws={options['num_draws']}")
    expect(np.all(np.isfinite(W)) and np.all(np.isfinite(H)), "draws not finite")
    if engine.probabilities:
        expect(on_simplex(W) and in_unit_interval(H), "draws outside the simplex or [0, 1]")
    for stat, values in result.sample_stats.items():
        expect(np.shape(values) == (C, S), f"sample_stats[{stat!r}] of shape {np.shape(values)}")


def check_mask(case: EngineCase) -> None:
    """Held-out entries (outside the mask) flipped or NaN give the same fit bit for bit; the
    same entries observed as 0 give another fit (an engine that read a missing entry as a
    0 would give the same)."""
    assert_same_fit(case.fitted(), case.fitted("changed"))
    base, zeros = case.fitted(), case.fitted("zeros")
    expect(
        not np.array_equal(base.probs, zeros.probs),
        "the held-out entries observed as 0 give the same fit: the mask is ignored",
    )


def check_seeds(case: EngineCase) -> None:
    """The same seed gives the same fit bit for bit; another seed another fit (a
    deterministic case: the same fit, with its seed)."""
    base, other = case.fitted(), case.fitted("seed")
    assert_same_fit(base, case.fitted("again"))
    expect(other.seed == 1, f"the fit of seed 1 records seed {other.seed}")
    if case.deterministic:
        assert_same_fit(base, other)
    else:
        expect(not np.array_equal(base.W, other.W), "seeds 0 and 1 give the same W")
        expect(not np.array_equal(base.probs, other.probs), "seeds 0 and 1 give the same probs")


def check_unknown_option(case: EngineCase) -> None:
    """An unknown option is a TypeError naming it and every option the engine takes, before
    the engine runs."""
    with case.refusing() as calls:
        try:
            fit(case.frame(), case.name, K, max_iters=5)
        except TypeError as error:
            message = str(error)
        else:
            raise AssertionError("an unknown option 'max_iters' was accepted")
    expect("does not take option(s) ['max_iters']" in message, f"message {message!r}")
    for option in case.engine.options:
        expect(repr(option) in message, f"the message does not list option {option!r}")
    expect(calls == [], "the engine ran")


BAD_PRIORS = (
    (Prior(alpha=-1.0), "must be positive"),
    (Prior(beta=np.nan), "must be finite"),
    (Prior(gamma=[1.0, 2.0]), f"length rank={K}"),
)
"""Priors every engine refuses, and what the message says."""


def check_priors(case: EngineCase) -> None:
    """A bad prior (negative, NaN, of the wrong length) is a ValueError before the engine
    runs; an engine that takes no prior refuses any prior, a good one too, saying so."""
    with case.refusing() as calls:
        for prior, message in BAD_PRIORS:
            given = [prior] if case.engine.takes_prior else [prior, Prior()]
            expected = message if case.engine.takes_prior else "takes no prior"
            for one in given:
                try:
                    fit(case.frame(), case.name, K, prior=one)
                except ValueError as error:
                    expect(
                        expected in str(error),
                        f"prior {one}: message {str(error)!r} does not say {expected!r}",
                    )
                else:
                    raise AssertionError(f"prior {one} was accepted")
    expect(calls == [], "the engine ran")


def check_labels(case: EngineCase) -> None:
    """The frames of a fit to a labelled DataFrame carry its row and column labels."""
    frames = case.fitted().frames
    for got, expected, where in (
        (frames.W.index, case.rows, "W's rows"),
        (frames.H.columns, case.columns, "H's columns"),
        (frames.probs.index, case.rows, "probs' rows"),
        (frames.probs.columns, case.columns, "probs' columns"),
    ):
        pd.testing.assert_index_equal(got, expected, exact=True, obj=where)


def check_save_and_load(case: EngineCase) -> None:
    """Every field comes back from a file: arrays bit for bit, prior, labels, draws, extras,
    data."""
    result = case.fitted()
    with tempfile.TemporaryDirectory() as folder, case.registered():
        loaded = load(result.save(Path(folder) / "fit.npz"))
    assert_same(result, loaded)


def check_arviz(case: EngineCase) -> None:
    """Bayesian engines: an ArviZ DataTree whose posterior holds the draws with their chain
    and draw dims; the others: a ValueError saying the fit has no draws."""
    result = case.fitted()
    if not case.engine.bayesian:
        try:
            result.to_arviz()
        except ValueError as error:
            expect("no posterior draws" in str(error), f"message {str(error)!r}")
            return
        raise AssertionError("to_arviz of a fit without draws did not fail")
    posterior = result.to_arviz()["posterior"]
    C, S = np.shape(result.draws["W"])[:2]
    expect(posterior["W"].dims == ("chain", "draw", "row", "component"), "W's dims")
    expect(posterior["H"].dims == ("chain", "draw", "component", "column"), "H's dims")
    sizes = {"chain": C, "draw": S, "row": M, "column": N, "component": K}
    expect(dict(posterior.sizes) == sizes, f"sizes {dict(posterior.sizes)} != {sizes}")
    np.testing.assert_array_equal(posterior["W"].values, result.draws["W"])
    np.testing.assert_array_equal(posterior["H"].values, result.draws["H"])


def check_run_signature(case: EngineCase) -> None:
    """``run(data, rank, prior, seed, init, *, <options>)``: the declared options are exactly
    run's keyword-only parameters, without defaults (those are the declaration's); a
    ``run`` that takes ``**options`` (it forwards them) is not checked further."""
    parameters = list(inspect.signature(case.engine.run).parameters.values())
    positional = [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
    expected = ["data", "rank", "prior", "seed", "init"]
    expect(positional == expected, f"run's positional parameters {positional} != {expected}")
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return
    keyword_only = {p.name: p.default for p in parameters if p.kind is p.KEYWORD_ONLY}
    expect(
        set(keyword_only) == set(case.engine.options),
        f"run's keyword-only parameters {sorted(keyword_only)} != the declared options "
        f"{sorted(case.engine.options)}",
    )
    defaults = sorted(k for k, v in keyword_only.items() if v is not inspect.Parameter.empty)
    expect(not defaults, f"run's keyword-only parameters {defaults} have defaults")


def check_ensemble_members(case: EngineCase) -> None:
    """An ensemble's member is the fit of its seed (its trace, W and score; a sampler's
    chain, the one-chain fit of its seed), and its score is the engine's score of it."""
    engine, members = case.engine, case.stacked().members
    for member in members:
        options = {} if engine.seed_count is None else {engine.seed_count: 1}
        alone = case.fit(seed=member.seed, **options)
        np.testing.assert_allclose(
            member.trace,
            alone.trace,
            rtol=FLOAT_TOLERANCE,
            err_msg=f"trace of the member of seed {member.seed}",
        )
        np.testing.assert_allclose(
            member.W,
            alone.W,
            atol=FLOAT_TOLERANCE,
            err_msg=f"W of the member of seed {member.seed}",
        )
        a, b = engine.score(member), engine.score(alone)
        expect(np.isclose(a, b, rtol=FLOAT_TOLERANCE, atol=0), f"score {a} != {b}")
    scores = case.stacked().mixture.scores
    expect(scores == tuple(engine.score(m) for m in members), "the members' scores")
    if engine.scores == "draws":  # over the kept draws, not the last one
        lp = -np.mean(members[0].sample_stats["lp"])
        expect(np.isclose(scores[0], lp, rtol=FLOAT_TOLERANCE), "score is not -mean(lp)")


def check_ensemble_mixture(case: EngineCase) -> None:
    """Two members; weights on the simplex; probs their weighted mixture, in [0, 1]; the
    weights score at least as well as any member on the validation entries."""
    result = case.stacked()
    weights = np.asarray(result.mixture.weights)
    expect(len(result.members) == 2 and weights.shape == (2,), "not two members and weights")
    expect(np.all(weights >= 0) and np.isclose(weights.sum(), 1), f"weights {weights}")
    mixture = sum(w * m.probs for w, m in zip(weights, result.members, strict=True))
    np.testing.assert_allclose(result.probs, mixture, rtol=0, atol=1e-12, err_msg="probs")
    expect(in_unit_interval(result.probs), "probs outside [0, 1]")
    y, p = case.Y[case.validation], mixture[case.validation]
    with np.errstate(divide="ignore"):  # exact, as perplexity: probability 0 scores inf
        by_hand = -np.mean(np.log(np.where(y == 1, p, 1 - p)))
    got = result.perplexity(case.frame(), case.validation)
    expect(np.isclose(got, by_hand, rtol=1e-12), f"perplexity {got} != {by_hand} by hand")
    members = [m.perplexity(case.frame(), case.validation) for m in result.members]
    expect(by_hand <= min(members) + 1e-9, f"mixture {by_hand} worse than members {members}")


def check_ensemble_mask(case: EngineCase) -> None:
    """Changing Y where neither the mask nor the validation entries look changes nothing."""
    base, other = case.stacked(), case.stacked("stacking")
    assert_same_fit(base, other)
    expect(base.mixture.weights == other.mixture.weights, "the weights differ")


CHECKS: dict[str, Callable[[EngineCase], None]] = {
    "shapes_and_ranges": check_shapes_and_ranges,
    "trace": check_trace,
    "declared_probabilities": check_declared_probabilities,
    "draws": check_draws,
    "mask_and_nan": check_mask,
    "seeds": check_seeds,
    "unknown_option": check_unknown_option,
    "priors": check_priors,
    "labels": check_labels,
    "save_and_load": check_save_and_load,
    "arviz": check_arviz,
    "run_signature": check_run_signature,
    "ensemble_members": check_ensemble_members,
    "ensemble_mixture": check_ensemble_mixture,
    "ensemble_mask": check_ensemble_mask,
}
"""Every check of the contract, by name, in the order :func:`check_engine` runs them."""


def check_engine(
    engine: Engine | str,
    options: Mapping[str, Any] | None = None,
    *,
    deterministic: bool | None = None,
) -> None:
    """Check ``engine`` against the contract that bernmf's own engines pass: every check of
    :data:`CHECKS` on small simulated data, its failures collected.

    The engine need not be registered: it is, under its name, while the checks run (and
    whatever was registered under that name is restored after). The warnings of its fits
    (of a tiny data set's held-out entries, of distinct modes) are not shown.

    Parameters
    ----------
    engine : Engine or str
        An engine, or the name of a registered one.
    options : mapping, optional
        Options passed to every fit (small iteration counts keep the checks fast, e.g.
        ``{"num_warmup": 20, "num_samples": 10, "num_chains": 2}``); by default a built-in
        engine's :data:`SMALL_OPTIONS`, else none.
    deterministic : bool, optional
        The engine's fit does not depend on its seed (it only records it); by default
        True for the built-in engines of :data:`DETERMINISTIC`, else False.

    Raises
    ------
    EngineCheckError
        Listing every failed check by name with what failed (an AssertionError).
    TypeError, ValueError
        ``engine`` is not an :class:`Engine` with a name, or names no registered engine.
    """
    case = EngineCase(engine, options, deterministic=deterministic)
    check_declaration(case.engine)
    failures = {}
    for name, check in CHECKS.items():
        try:
            with warnings.catch_warnings():  # the engine's on tiny data, not the contract's
                warnings.simplefilter("ignore")
                check(case)
        except Exception as error:  # a check that fails, or an engine that raises
            text = " ".join(str(error).split())[:MESSAGE_LENGTH] or type(error).__name__
            failures[name] = (
                text if isinstance(error, AssertionError) else (f"{type(error).__name__}: {text}")
            )
    if failures:
        raise EngineCheckError(case.name, failures)
