"""The engine contract, checked for every registered engine.

Every test takes the fixture ``name``, parametrized over :func:`bernmf.engines` (read
at import), so a new engine is tested by registering it. The checks are those of
:func:`bernmf.testing.check_engine` (:data:`bernmf.testing.CHECKS`), one test each, on
one :class:`bernmf.testing.EngineCase` per engine, whose fits (with the engine's
:data:`bernmf.testing.SMALL_OPTIONS`, on one small simulated data set) are made once per
process and shared by the tests. All fits have the same shapes, so each engine compiles
once; ``name`` is module-scoped, so pytest orders the tests engine by engine and
pytest-xdist hands each worker runs of one engine's tests. What only bernmf's own engines
promise (their programs compiled once, through :mod:`bernmf.inference._compile`; how an
engine's ``**options`` are forwarded) is tested here only.

The per-engine tests (references against numpy, R or exact enumeration, engine
invariants, bad options and data) stay in the engines' own test files.
"""

from __future__ import annotations

import functools
import inspect

import pytest

import bernmf
from bernmf import testing
from bernmf.inference import _compile, get_engine

ENGINES = bernmf.engines()

FORWARDS = {"em": "mm"}
"""Engines whose ``run`` takes ``**options`` and hands them to another engine's."""


@functools.cache
def case(engine: str) -> testing.EngineCase:
    """The contract's case of ``engine``: its fits made once per process."""
    return testing.EngineCase(engine)


@pytest.fixture(scope="module", params=ENGINES)
def name(request) -> str:
    """Each registered engine's name (module-scoped: tests run engine by engine)."""
    return request.param


def test_the_lists_name_registered_engines():
    """SMALL_OPTIONS, DETERMINISTIC and FORWARDS name no engine that is not registered."""
    named = set(testing.SMALL_OPTIONS) | set(FORWARDS) | testing.DETERMINISTIC
    assert named <= set(ENGINES)


@pytest.mark.parametrize("check", list(testing.CHECKS))
def test_contract(name, check):
    """Each check of :func:`bernmf.testing.check_engine` (its docstring says what)."""
    testing.CHECKS[check](case(name))


def test_refused_input_compiles_nothing(name):
    """An unknown option and bad priors are refused before anything compiles."""
    size = _compile.cache_size()
    testing.check_unknown_option(case(name))
    testing.check_priors(case(name))
    assert _compile.cache_size() == size


def test_a_second_call_with_the_same_shapes_compiles_nothing(name, monkeypatch):
    """From an empty cache the first fit compiles through bernmf.inference._compile; a
    second one on other data of the same shapes, with another seed, compiles nothing."""
    monkeypatch.setattr(_compile, "_CACHE", {})
    first = case(name).fit()
    size = _compile.cache_size()
    assert size > 0 and first.timings["compile"] > 0
    second = case(name).fit("changed", seed=1)
    assert _compile.cache_size() == size
    assert second.timings["compile"] == 0.0


def test_an_engine_that_forwards_its_options_declares_its_targets(name):
    """A ``run`` that takes ``**options`` (which :func:`bernmf.testing.check_run_signature`
    does not check further) hands them to the engine of FORWARDS, whose options it declares."""
    parameters = inspect.signature(get_engine(name).run).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        assert name in FORWARDS, f"{name}.run takes **options: add where they go to FORWARDS"
        assert dict(get_engine(name).options) == dict(get_engine(FORWARDS[name]).options)


def test_every_engine_is_listed_and_found_by_name():
    """bernmf.engines() is sorted and each name gives the engine registered under it."""
    assert ENGINES == sorted(ENGINES) and len(set(ENGINES)) == len(ENGINES)
    for name in ENGINES:
        assert get_engine(name).name == name
    with pytest.raises(ValueError, match="unknown engine"):
        get_engine("no-such-engine")
