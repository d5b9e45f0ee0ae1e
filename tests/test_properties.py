"""Property-based checks of bernmf.fit (every engine) and of the CLI readers.

Every generated input either gives a finite, constrained fit (rows of W on the simplex
within 1e-6, 0 <= H <= 1, 0 <= probs <= 1 for the mean-parametrized engines; finite
factors and probabilities in [0, 1] for all) or a ValueError / TypeError whose message
names the problem, raised before anything is compiled: JAX reports every compilation
to ``jax.monitoring`` (events ``/jax/core/compile/...``), which are counted here.

Most cases take the validation path (milliseconds each); the fits that run are tiny
(few shapes, so compiled programs are reused; a few iterations each).
"""

from __future__ import annotations

import math
import warnings

import jax
import numpy as np
import pandas as pd
import pytest
from helpers import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bernmf
from bernmf.data.files import readers
from bernmf.inference import get_engine, nuts

ENGINES = bernmf.engines()

TINY = {
    "mm": {"max_iter": 3, "layout": "dense"},
    "em": {"max_iter": 3, "layout": "dense"},
    "vb": {"max_iter": 3},
    "logsvd": {"max_iter": 3},
    "logpca": {"max_iter": 3},
    "gibbs": {"num_warmup": 2, "num_samples": 2, "progress": False},
    "nuts": {"num_warmup": 2, "num_samples": 2, "num_chains": 1, "progress": False},
    "svi": {"steps": 3, "num_draws": 2, "progress": False},
}
"""Valid options that keep each fit to a few iterations (mm's layout fixed, so that the
share of ones does not choose between two programs)."""

COMPILES: list[str] = []


def _record(name: str, *_, **__) -> None:
    if name.startswith("/jax/core/compile/"):
        COMPILES.append(name)


jax.monitoring.register_event_duration_secs_listener(_record)

Y = np.array([[1, 0, 1], [0, 1, 1], [1, 1, 0], [0, 0, 1]], dtype=float)
"""The data of the validation cases, (4, 3)."""


def cases(count: int) -> settings:
    """Hypothesis settings: ``count`` reproducible examples, without deadline (the first
    fits of a shape compile)."""
    return settings(
        max_examples=examples(count),
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )


def fit_or_refuse(words, Y, engine, rank, **kwargs):
    """``bernmf.fit``; a TypeError / ValueError must name one of ``words`` and come
    before any compilation. Returns the fit, or None when refused."""
    before = len(COMPILES)
    try:
        return bernmf.fit(Y, engine, rank, **kwargs)
    except (TypeError, ValueError) as error:
        assert len(COMPILES) == before, f"compiled before refusing: {error}"
        assert any(word in str(error) for word in words), f"{words} not in: {error}"
        return None


def assert_constrained(result, engine: str) -> None:
    assert np.isfinite(result.W).all() and np.isfinite(result.H).all()
    assert np.isfinite(result.probs).all()
    assert (result.probs >= 0).all() and (result.probs <= 1).all()
    if get_engine(engine).probabilities:
        assert (result.W >= 0).all()
        np.testing.assert_allclose(result.W.sum(axis=1), 1, atol=1e-6)
        assert (result.H >= 0).all() and (result.H <= 1).all()


# ------------------------------------------------------------------ refused inputs

BAD_CELLS = [2.0, -1.0, 0.5, np.inf, -np.inf]


@st.composite
def bad_data(draw):
    """A Y (and mask) that no engine accepts, and the words its error names."""
    kind = draw(st.sampled_from(["value", "shape", "dtype", "nothing", "mask", "labels"]))
    if kind == "value":
        data = Y.copy()
        data.flat[draw(st.integers(0, Y.size - 1))] = draw(st.sampled_from(BAD_CELLS))
        return {"Y": data}, ["only 0, 1", "inf"]
    if kind == "shape":
        shape = draw(st.sampled_from([(0, 3), (4, 0), (0, 0), (3,), (2, 2, 2), ()]))
        return {"Y": np.zeros(shape)}, ["empty", "2-D"]
    if kind == "dtype":
        data = draw(
            st.sampled_from(
                [Y.astype(str), Y.astype(complex), Y.astype(object), np.full(Y.shape, None)]
            )
        )
        return {"Y": data}, ["numeric"]
    if kind == "nothing":
        mask = np.zeros(Y.shape, bool)
        return {"Y": np.full(Y.shape, np.nan) if draw(st.booleans()) else Y, "mask": mask}, [
            "no entry"
        ]
    if kind == "mask":
        mask = draw(
            st.sampled_from(
                [
                    np.ones((3, 4), bool),
                    np.ones((4, 3, 1), bool),
                    np.full(Y.shape, 0.5),
                    np.full(Y.shape, 2),
                    Y.astype(str),
                    np.ones(4, bool),
                ]
            )
        )
        return {"Y": Y, "mask": mask}, ["mask"]
    frame = pd.DataFrame(Y, index=list("abcd"), columns=list("xyz"))
    other = draw(st.sampled_from([list("abce"), list("abca"), [0, 1, 2, 4]]))
    return {"Y": frame, "mask": pd.DataFrame(np.ones(Y.shape, bool), index=other)}, ["labels"]


@st.composite
def bad_argument(draw, engine: str):
    """One argument of ``bernmf.fit`` that ``engine`` refuses, and the words naming it."""
    kind = draw(st.sampled_from(["data", "rank", "prior", "seed", "option", "unknown"]))
    if kind == "data":
        return draw(bad_data())
    if kind == "rank":
        rank = draw(st.sampled_from([0, -1, 1.5, "2", None, True, np.float64(2), 10**9, 2**70]))
        return {"rank": rank}, ["rank"]
    if kind == "prior":
        value = draw(
            st.sampled_from([0.0, -1.0, math.nan, math.inf, -math.inf, 1e-40, 1e40, "a", [1.0] * 3])
        )
        if engine == "mm" and draw(st.booleans()):
            value = draw(st.floats(0.01, 0.99))  # mm needs >= 1
        name = draw(st.sampled_from(["alpha", "beta", "gamma"]))
        return {"prior": bernmf.Prior(**{name: value})}, ["prior"]
    if kind == "seed":
        counted = get_engine(engine).seed_count
        if counted and draw(st.booleans()):  # the last of the consecutive seeds overflows
            return {"seed": 2**32 - 1, counted: 2}, ["seed"]
        seed = draw(st.sampled_from([-1, 2**32, 2**64, 1.5, "0", None, True, math.nan]))
        return {"seed": seed}, ["seed"]
    if kind == "option":
        name = draw(st.sampled_from(sorted(get_engine(engine).options)))
        value = draw(st.sampled_from(["x", math.nan, -1, -math.inf, 1j, [], {}]))
        return {name: value}, [name]
    return {draw(st.sampled_from(["max_iters", "seeds", "K", "chains"])): 1}, ["option"]


@cases(400)
@given(data=st.data(), engine=st.sampled_from(ENGINES))
def test_bad_input_is_refused_before_compiling_naming_the_problem(data, engine):
    override, words = data.draw(bad_argument(engine))
    kwargs = {"rank": 2, **TINY[engine], **override}
    data_given = kwargs.pop("Y", Y)
    assert fit_or_refuse(words, data_given, engine, kwargs.pop("rank"), **kwargs) is None


# ------------------------------------------------------------------ fits that run

EXTREME = [1e-30, 1e-8, 0.3, 1.0, 2.5, 1e8, 1e30]


@st.composite
def fitted_input(draw, engine: str):
    """Tiny data of a few shapes (NaN, bools, a mask), a prior and a seed."""
    shape, rank = draw(st.sampled_from([((4, 3), 2), ((1, 3), 1), ((3, 1), 1)]))
    cells = draw(st.lists(st.sampled_from([0.0, 1.0, np.nan]), min_size=6, max_size=6))
    data = np.resize(np.array(cells), shape)
    if draw(st.booleans()):
        data = np.nan_to_num(data).astype(bool)
    mask = draw(st.one_of(st.none(), st.just(np.resize([True, False], shape))))
    prior = None
    if get_engine(engine).takes_prior and draw(st.booleans()):
        low, high = (1.0, np.inf) if engine == "mm" else (0, np.inf)
        if engine == "nuts":
            low, high = nuts.PRIOR_RANGE
        values = [v for v in EXTREME if low <= v <= high]
        prior = bernmf.Prior(*(draw(st.sampled_from(values)) for _ in range(3)))
    seed = draw(st.sampled_from([0, 1, 2**31, 2**32 - 1]))
    return data, rank, {"mask": mask, "prior": prior, "seed": seed}


CHEAP = [engine for engine in ENGINES if engine != "nuts"]
"""nuts compiles a new potential on every call (seconds): it has its own few cases."""


WHY_REFUSED = ["no entry", "rank <="]
"""The only reasons to refuse these inputs: nothing observed, logsvd's and logpca's rank
<= min(M, N)."""


def fit_quietly(engine, data, rank, kwargs, options):
    """:func:`fit_or_refuse` without the warning about rows or columns with no observed
    entry; refused only for one of :data:`WHY_REFUSED`."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "\\d+ row\\(s\\) and", UserWarning)
        return fit_or_refuse(WHY_REFUSED, data, engine, rank, **kwargs, **options)


@cases(80)
@given(data=st.data(), engine=st.sampled_from(CHEAP))
def test_fits_are_finite_and_constrained(data, engine):
    Y_given, rank, kwargs = data.draw(fitted_input(engine))
    result = fit_quietly(engine, Y_given, rank, kwargs, TINY[engine])
    if result is not None:
        assert_constrained(result, engine)


@cases(2)
@given(
    data=st.data(),
    target=st.floats(0.05, 0.95),
    depth=st.integers(1, 3),
    dense=st.booleans(),
    dtype=st.sampled_from(["float64", "float32"]),
)
def test_nuts_fits_are_finite_and_constrained(data, target, depth, dense, dtype):
    Y_given, rank, kwargs = data.draw(fitted_input("nuts"))
    options = {**TINY["nuts"], "target_accept_prob": target, "max_tree_depth": depth}
    options |= {"dense_mass": dense, "dtype": dtype}
    result = fit_quietly("nuts", np.nan_to_num(Y_given), rank, {**kwargs, "mask": None}, options)
    assert_constrained(result, "nuts")


# ------------------------------------------------------------------ CLI readers

NAMES = st.text("abcdefghij xyz_-", min_size=1, max_size=5).map(lambda s: "n" + s.strip())


@st.composite
def csv_file(draw):
    """A binary table written in one of the four layouts, and its cells."""
    M, N = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    cells = np.array(
        draw(st.lists(st.sampled_from(["0", "1", ""]), min_size=M * N, max_size=M * N))
    )
    cells = cells.reshape(M, N)
    if N == 1:  # a missing cell of a one-column CSV is a blank line, which CSV readers skip
        cells[cells == ""] = "0"
    header, names = draw(st.booleans()), draw(st.booleans())
    columns = draw(st.lists(NAMES, min_size=N, max_size=N, unique=True)) if header else None
    index = draw(st.lists(NAMES, min_size=M, max_size=M, unique=True)) if names else None
    lines = [",".join(([""] if names else []) + columns)] if header else []
    for m in range(M):
        lines.append(",".join(([index[m]] if names else []) + list(cells[m])))
    return "\n".join(lines) + "\n", cells, index, columns


@cases(150)
@given(table=csv_file(), bad=st.one_of(st.none(), st.sampled_from(["2", "x", "0.5", "-1", "inf"])))
def test_the_reader_gets_every_layout_right_or_refuses(tmp_path_factory, table, bad):
    """A well-formed file is read exactly; a bad cell inside the data (neither in the
    first line nor in the first column, where it could be a name) is refused."""
    text, cells, index, columns = table
    M, N = cells.shape
    if bad is not None and min(M, N) >= 2:
        lines = text.splitlines()
        lines[-1] = lines[-1][: lines[-1].rfind(",") + 1] + bad
        text = "\n".join(lines) + "\n"
    else:
        bad = None
    path = tmp_path_factory.mktemp("csv") / "table.csv"
    path.write_text(text, encoding="utf-8")
    if bad is not None:
        with pytest.raises(ValueError, match="cells must be 0, 1 or empty"):
            readers.read_matrix(path)
        return
    frame = readers.read_matrix(path)
    values = np.array([[np.nan if c == "" else float(c) for c in row] for row in cells])
    np.testing.assert_array_equal(frame.to_numpy(dtype=float), values)
    assert frame.index.tolist() == (index or list(range(M)))
    assert frame.columns.tolist() == (columns or list(range(N)))
