"""bernmf's own store of traced programs (:mod:`bernmf.inference._programs`): what may
key a program, and that a program found there is compiled without tracing anything."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bernmf
from bernmf.inference import _compile, _loop, _programs, squarem
from bernmf.models.spec import Prior


@pytest.fixture
def store(tmp_path, monkeypatch):
    """An empty store in a folder of this test, and an empty in-process cache."""
    monkeypatch.setattr(_programs, "folder", lambda: tmp_path)
    monkeypatch.setattr(_compile, "_CACHE", {})
    return tmp_path


def local_function(x):
    return x


@pytest.mark.parametrize(
    "value",
    [
        lambda x: x,
        functools.partial(local_function, 1.0),
        local_function,
        object(),
        {"guide": local_function},
        np.sum.__call__,
    ],
    ids=["lambda", "partial of a test function", "test function", "object", "in a dict", "method"],
)
def test_what_no_version_pins_has_no_description(value):
    """Code from outside bernmf, jax, numpy and numpyro could change under the same name."""
    with pytest.raises(_programs.Unkeyable):
        _programs.describe(value)


def test_a_closure_has_no_description():
    power = 3

    def closure(x):
        return x**power

    with pytest.raises(_programs.Unkeyable, match="closure"):
        _programs.describe(closure)


def test_descriptions_follow_values():
    describe = _programs.describe
    assert describe(squarem.solve) == "function:bernmf.inference.squarem.solve"
    assert describe(np.arange(3.0)) == describe(np.arange(3.0))
    assert describe(np.arange(3.0)) != describe(np.arange(3.0) + 1e-12)
    assert describe(np.arange(3.0)) != describe(np.arange(3))
    assert describe(Prior(1.5)) != describe(Prior(1.5, 2.0))
    assert describe({"a": 1, "b": 2.0}) == describe({"b": 2.0, "a": 1})
    assert describe((1, 2)) != describe([1, 2]) and describe(1) != describe(1.0)
    assert describe(functools.partial(squarem.solve, tol=1e-5)) != describe(
        functools.partial(squarem.solve, tol=1e-6)
    )


def test_a_program_found_in_the_store_is_loaded_without_tracing(store, monkeypatch):
    """A second process (here: the in-process cache emptied) compiles the stored program
    without tracing its function (which would call jnp.square)."""
    calls = []
    square = jnp.square
    monkeypatch.setattr(jnp, "square", lambda x: calls.append(1) or square(x))
    x = (jnp.linspace(0.0, 1.0, 7), jnp.ones((2, 3)))
    program, _ = _compile.compiled("test norm", squarem._norm2, x)
    assert calls and [p.suffix for p in store.iterdir()] == [_programs.SUFFIX]
    monkeypatch.setattr(_compile, "_CACHE", {})
    calls.clear()
    loaded, seconds = _compile.compiled("test norm", squarem._norm2, x)
    assert not calls and loaded is not program and seconds > 0
    assert float(loaded(x)) == float(program(x)) == pytest.approx(6 + np.sum(x[0] ** 2))


def test_a_stored_program_computes_what_a_traced_one_does(store, monkeypatch):
    """The same fit with the store and without it (bit for bit)."""
    Y = (np.random.default_rng(0).random((6, 5)) < 0.5).astype(float)
    stored = bernmf.fit(Y, "mm", 2, max_iter=3)
    assert [p.suffix for p in store.iterdir()] == [_programs.SUFFIX]
    monkeypatch.setattr(_compile, "_CACHE", {})
    monkeypatch.setattr(_programs, "folder", lambda: None)
    traced = bernmf.fit(Y, "mm", 2, max_iter=3)
    np.testing.assert_array_equal(stored.W, traced.W)
    np.testing.assert_array_equal(stored.trace, traced.trace)


def test_other_shapes_options_or_sources_are_other_programs(store, monkeypatch):
    x = (jnp.ones(3),)
    key = functools.partial(_programs.key, "test", squarem._norm2, run_once=False)
    base = key(x, {})
    assert base == key((jnp.zeros(3),), {})  # values of arguments are not part of it
    others = [key((jnp.ones(4),), {}), key((jnp.ones(3, jnp.int32),), {}), key((1.0,), {})]
    others += [key(x, {"tol": 1e-5}), key(x, {"tol": 1e-6}), key([jnp.ones(3)], {})]
    others.append(_programs.key("test", squarem._norm2, x, {}, run_once=True))
    monkeypatch.setattr(_programs, "source_hash", lambda: "edited")
    others.append(key(x, {}))
    assert None not in others and len({base, *others}) == len(others) + 1


def test_a_program_of_a_test_function_stays_out(store):
    x = (jnp.ones(3),)
    _compile.compiled("test local", local_function, *x)
    assert _programs.key("test local", local_function, x, {}, False) is None
    assert list(store.iterdir()) == []


def test_an_unreadable_file_is_compiled_again_and_replaced(store):
    x = (jnp.ones(3),)
    with jax.default_matmul_precision("highest"):  # as _compile.compiled keys it
        key = _programs.key("test norm", squarem._norm2, (x,), {}, False)
    (store / (key + _programs.SUFFIX)).write_bytes(b"not a program")
    program, _ = _compile.compiled("test norm", squarem._norm2, x)
    assert float(program(x)) == 3.0
    assert _programs.load(key) is not None


def test_a_program_with_host_callbacks_is_marked_and_not_retried(store, monkeypatch):
    """MM's loop reports progress through a host callback (here one every iteration):
    JAX cannot export it, so the program is traced in each process."""
    monkeypatch.setattr(_loop, "NOTE_SECONDS", 0.0)
    Y = (np.random.default_rng(0).random((6, 5)) < 0.5).astype(float)
    fit = bernmf.fit(Y, "mm", 2, max_iter=3)
    assert [p.suffix for p in store.iterdir()] == [_programs.SKIP_SUFFIX]
    assert np.isfinite(fit.trace).all()


def test_a_program_with_lapack_calls_stays_with_jaxs_cache(store):
    """LAPACK's pointers are set up by lowering its operations: a stored ``eigh``
    compiled from its exported module could call into nothing."""
    _compile.compiled("test eigh", jnp.linalg.eigh, jnp.eye(3))
    assert [p.suffix for p in store.iterdir()] == [_programs.SKIP_SUFFIX]


def test_a_loop_too_short_for_a_note_has_no_callback():
    """Notes come every ``k`` iterations (about a second of work): a loop of fewer
    iterations compiles none, so its program can be stored (the test above)."""
    update, x = jnp.sin, jnp.ones(1000)
    assert _loop.noting(update, x, max_iter=10) is None
    assert _loop.noting(update, x, max_iter=10**9) is not None
