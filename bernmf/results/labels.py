"""The label codec: a pandas Index <-> a JSON value, exactly, or a clear refusal.

Saved fits keep the row and column labels of a DataFrame input in their JSON
metadata. :func:`encode_index` gives a structure of dicts, lists, strings, numbers,
booleans and None (NaN and infinities as Python's :mod:`json` writes them);
:func:`decode_index` rebuilds an Index equal to the original in class, dtype,
values and names:

* ``{"range": [start, stop, step], "name": N}`` for a RangeIndex;
* ``{"levels": [flat, ...], "names": [N, ...]}`` for a MultiIndex (each level's
  values, one flat index per level);
* ``{"values": [...], "dtype": "...", "name": N}`` for any other Index: the values
  as numbers of a numpy dtype, as int64 ticks of a datetime / timedelta dtype (with
  its time zone and frequency), or one by one (:func:`encode_label`) for strings and objects.

Labels and names may be None, bool, int, float, str, numpy scalars, Timestamps and
tuples of these. Anything else, or an Index that would not come back identical, is
refused with a ValueError at encoding, so a fit that saves also loads.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

_NUMPY_KINDS = "biuf"  # numpy dtypes saved as numbers: bool, int, uint, float
_SCALAR_KINDS = "biufU"  # numpy scalars saved as labels: those and str
_TICK_KINDS = "mM"  # timedelta64, datetime64: saved as int64 ticks


def encode_label(value):
    """One label or index name as JSON: tagged dicts for tuples, numpy scalars, Timestamps."""
    if isinstance(value, np.generic):
        if value.dtype.kind not in _SCALAR_KINDS:
            raise ValueError(f"cannot save the label {value!r} of numpy type {value.dtype}")
        return {"numpy": value.dtype.str, "value": value.item()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, tuple):
        return {"tuple": [encode_label(v) for v in value]}
    if isinstance(value, pd.Timestamp):
        return {"timestamp": value.isoformat(), "tz": None if value.tz is None else str(value.tz)}
    raise ValueError(
        f"cannot save the label {value!r} of type {type(value).__name__} (labels may be "
        "strings, numbers, booleans, None, Timestamps or tuples of these)"
    )


def decode_label(value):
    """Inverse of :func:`encode_label`; ValueError on anything it did not write."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        if value.keys() == {"tuple"} and isinstance(value["tuple"], list):
            return tuple(decode_label(v) for v in value["tuple"])
        if value.keys() == {"numpy", "value"} and isinstance(value["numpy"], str):
            dtype = np.dtype(value["numpy"])
            if dtype.kind in _SCALAR_KINDS and isinstance(value["value"], bool | int | float | str):
                return dtype.type(value["value"])
        if value.keys() == {"timestamp", "tz"} and isinstance(value["timestamp"], str):
            stamp = pd.Timestamp(value["timestamp"])
            return stamp if value["tz"] is None else stamp.tz_convert(value["tz"])
    raise ValueError(f"not a saved label: {value!r:.80}")


def _encode_flat(index: pd.Index) -> dict:
    dtype = index.dtype
    if isinstance(dtype, np.dtype) and dtype.kind in _NUMPY_KINDS:
        values = index.to_numpy().tolist()
    elif dtype.kind in _TICK_KINDS:  # numpy datetime64 / timedelta64, or with a time zone
        values = index.asi8.tolist()
    else:
        values = [encode_label(v) for v in index]
    value = {"values": values, "dtype": str(dtype), "name": encode_label(index.name)}
    if getattr(index, "freq", None) is not None:  # of a date_range or timedelta_range
        value["freq"] = index.freqstr
    return value


def _decode_flat(value: dict) -> pd.Index:
    dtype = pd.api.types.pandas_dtype(value["dtype"])
    values, name = value["values"], decode_label(value["name"])
    if not isinstance(values, list):
        raise ValueError("index values are not a list")
    if isinstance(dtype, np.dtype) and dtype.kind in _NUMPY_KINDS:
        return pd.Index(np.array(values, dtype=dtype), name=name)
    if dtype.kind in _TICK_KINDS:
        base = dtype if isinstance(dtype, np.dtype) else dtype.base  # without time zone
        index = pd.Index(np.array(values, dtype=np.int64).view(base), name=name)
        tz = getattr(dtype, "tz", None)
        index = index if tz is None else index.tz_localize("UTC").tz_convert(tz)
        return type(index)(index, freq=value.get("freq"))  # ValueError if it does not fit
    labels = [decode_label(v) for v in values]
    return pd.Index(labels, dtype=dtype, name=name, tupleize_cols=False)


def _decode(value) -> pd.Index:
    if not isinstance(value, dict):
        raise ValueError(f"not a saved index: {value!r:.80}")
    if value.keys() == {"range", "name"}:
        bounds = value["range"]
        if not (
            isinstance(bounds, list) and len(bounds) == 3 and all(type(v) is int for v in bounds)
        ):
            raise ValueError(f"a saved RangeIndex needs [start, stop, step], got {bounds!r:.80}")
        return pd.RangeIndex(*bounds, name=decode_label(value["name"]))
    if value.keys() == {"levels", "names"}:
        levels = [_decode_flat(level) for level in value["levels"]]
        names = [decode_label(name) for name in value["names"]]
        if not levels or len(names) != len(levels):
            raise ValueError("a saved MultiIndex needs as many names as levels, at least one")
        return pd.MultiIndex.from_arrays(levels, names=names)
    if value.keys() in ({"values", "dtype", "name"}, {"values", "dtype", "name", "freq"}):
        return _decode_flat(value)
    raise ValueError(f"not a saved index: keys {sorted(value)}")


def _levels(index: pd.MultiIndex) -> list[pd.Index]:
    """The levels' values by position (``get_level_values(0)`` means the level *named* 0)."""
    by_position = index.set_names(list(range(index.nlevels)))
    return [by_position.get_level_values(i).rename(n) for i, n in enumerate(index.names)]


def _identical(a: pd.Index, b: pd.Index) -> bool:
    """Same class, dtype, names and values (NaN equal to NaN), level by level."""
    if type(a) is not type(b) or a.dtype != b.dtype or list(a.names) != list(b.names):
        return False
    if getattr(a, "freq", None) != getattr(b, "freq", None):
        return False
    if isinstance(a, pd.MultiIndex):
        return a.nlevels == b.nlevels and all(map(_identical, _levels(a), _levels(b)))
    return a.equals(b)


def encode_index(index: pd.Index | None):
    """``index`` (or None) as a JSON value that :func:`decode_index` turns back into it.

    Raises
    ------
    ValueError
        If a label, a name or the dtype cannot be saved, or the Index would not come
        back identical (for example a categorical or nullable-integer Index).
    """
    if index is None:
        return None
    if isinstance(index, pd.RangeIndex):
        value = {"range": [index.start, index.stop, index.step], "name": encode_label(index.name)}
    elif isinstance(index, pd.MultiIndex):
        levels = [_encode_flat(level) for level in _levels(index)]
        value = {"levels": levels, "names": [encode_label(name) for name in index.names]}
    else:
        value = _encode_flat(index)
    try:
        identical = _identical(_decode(value), index)
    except (TypeError, ValueError):
        identical = False
    if not identical:
        raise ValueError(
            f"cannot save the labels {index!r:.120}: they would not load back identical "
            f"(dtype {index.dtype}); convert them to strings or numbers"
        )
    return value


def decode_index(value) -> pd.Index | None:
    """The Index (or None) that :func:`encode_index` encoded; ValueError if malformed."""
    if value is None:
        return None
    try:
        return _decode(value)
    except (TypeError, KeyError, IndexError, AttributeError, OverflowError) as error:
        raise ValueError(f"malformed saved labels: {error}") from None
