"""The label codec: every supported Index comes back identical through JSON; others refused."""

from __future__ import annotations

import datetime
import json

import numpy as np
import pandas as pd
import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from bernmf.results.labels import decode_index, encode_index

NAMES = st.one_of(
    st.none(),
    st.text(max_size=4),
    st.integers(-(10**6), 10**6),
    st.builds(np.int32, st.integers(-100, 100)),
    st.tuples(st.text(max_size=3), st.integers(0, 9)),
)
INTEGER_TYPES = [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64]
ZONES = [
    None,
    "UTC",
    "Europe/Paris",
    "America/New_York",
    datetime.timezone(-datetime.timedelta(hours=3)),
]


def integers_of(kind):
    info = np.iinfo(kind)
    return st.integers(int(info.min), int(info.max)).map(kind)


def stamps(n):
    moments = st.datetimes(datetime.datetime(1700, 1, 1), datetime.datetime(2200, 1, 1))
    return st.tuples(st.lists(moments, min_size=n, max_size=n), st.sampled_from(ZONES)).map(
        lambda v: (
            pd.DatetimeIndex(v[0])
            if v[1] is None
            else pd.DatetimeIndex(v[0]).tz_localize("UTC").tz_convert(v[1])
        )
    )


def flat(n):
    """Strategies for flat indexes of length n, one per kind of label."""
    objects = st.one_of(
        st.text(max_size=3),
        st.integers(-100, 100),
        st.booleans(),
        st.none(),
        integers_of(np.int16),
        st.tuples(st.integers(0, 3), st.text(max_size=2)),
        st.builds(pd.Timestamp, st.integers(0, 10**18)),
    )
    return st.one_of(
        st.lists(st.text(max_size=6), min_size=n, max_size=n).map(pd.Index),
        st.sampled_from(INTEGER_TYPES).flatmap(
            lambda kind: st.lists(integers_of(kind), min_size=n, max_size=n).map(
                lambda v: pd.Index(np.array(v, dtype=kind))
            )
        ),
        st.lists(st.floats(), min_size=n, max_size=n).map(lambda v: pd.Index(np.array(v))),
        st.lists(st.booleans(), min_size=n, max_size=n).map(lambda v: pd.Index(v, dtype=bool)),
        stamps(n),
        st.lists(st.integers(-(10**15), 10**15), min_size=n, max_size=n).map(pd.to_timedelta),
        st.tuples(st.sampled_from(["D", "h", "2min", "ME"]), st.sampled_from(ZONES)).map(
            lambda v: pd.date_range("2024-01-31", periods=n, freq=v[0], tz=v[1])
        ),
        st.lists(objects, min_size=n, max_size=n).map(
            lambda v: pd.Index(v, dtype=object, tupleize_cols=False)
        ),
    )


@st.composite
def indexes(draw):
    n = draw(st.integers(0, 5))
    kind = draw(st.sampled_from(["range", "flat", "multi"]))
    if kind == "range":
        start, step = draw(st.integers(-5, 5)), draw(st.sampled_from([1, 2, -1]))
        return pd.RangeIndex(start, start + step * n, step, name=draw(NAMES))
    if kind == "flat":
        return draw(flat(n)).rename(draw(NAMES))
    levels = draw(st.lists(flat(n), min_size=1, max_size=3))
    names = draw(st.lists(NAMES, min_size=len(levels), max_size=len(levels)))
    return pd.MultiIndex.from_arrays(levels, names=names)


def through_json(index):
    return decode_index(json.loads(json.dumps(encode_index(index))))


def assert_identical(loaded, index):
    pd.testing.assert_index_equal(loaded, index, exact=True, check_names=True, check_freq=True)
    assert type(loaded) is type(index) and loaded.dtype == index.dtype
    assert list(loaded.names) == list(index.names)
    assert [type(n) for n in loaded.names] == [type(n) for n in index.names]
    if isinstance(index, pd.MultiIndex):
        for i in range(index.nlevels):
            assert loaded.get_level_values(i).dtype == index.get_level_values(i).dtype
    elif index.dtype == object:
        assert [type(v) for v in loaded] == [type(v) for v in index]


@settings(max_examples=examples(300), deadline=None)
@given(indexes())
def test_every_supported_index_round_trips_through_json(index):
    assert_identical(through_json(index), index)


@pytest.mark.parametrize(
    "index",
    [
        pd.Index(["a", "b"], name=("tuple", 1)),
        pd.MultiIndex.from_tuples([("a", 1), ("b", 2)], names=["x", None]),
        pd.date_range("2024-03-30", periods=3, freq="D", tz="Europe/Paris", name="day"),
        pd.Index([np.int64(3), "x", pd.Timestamp("2020-01-01", tz="UTC")], dtype=object),
        pd.Index([1, 2], dtype=np.uint64, name=np.int64(7)),
        None,
    ],
    ids=["tuple-name", "multi", "datetime-tz", "objects", "numpy-name", "none"],
)
def test_the_labels_the_probe_lost(index):
    loaded = through_json(index)
    if index is None:
        assert loaded is None
    else:
        assert_identical(loaded, index)


@pytest.mark.parametrize(
    "index",
    [
        pd.Index([object(), object()]),
        pd.Index([1.5j, 2j]),
        pd.period_range("2020", periods=2, freq="M"),
        pd.Index([1, None], dtype="Int64"),
    ],
    ids=["objects", "complex", "periods", "nullable"],
)
def test_what_cannot_come_back_identical_is_refused(index):
    with pytest.raises(ValueError, match="cannot save the label"):
        encode_index(index)


@pytest.mark.parametrize(
    "value",
    [
        [1, 2],
        {"range": [0, "5", 1], "name": None},
        {"values": [1], "dtype": "no-such-dtype", "name": None},
        {"values": "abc", "dtype": "int64", "name": None},
        {"levels": [], "names": []},
        {"values": ["x"], "dtype": "object", "name": {"tuple": 3}},
        {"values": [1], "dtype": "datetime64[ns, Not/AZone]", "name": None},
        {"values": [10**30], "dtype": "int64", "name": None},
        {"values": [0, 5], "dtype": "datetime64[ns]", "name": None, "freq": "D"},
    ],
)
def test_malformed_saved_labels_are_a_value_error(value):
    with pytest.raises(ValueError):
        decode_index(value)
