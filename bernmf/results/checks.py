"""Checks of what a saved fit's file says (:func:`bernmf.results.loading.load`): typed
metadata fields, array headers before their data are read, and the values of a fit and of
its members.

Every failure is a ValueError naming the field or array and the problem.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from bernmf.results.fit import Fit


def field(info: Mapping, key: str, kind: type, where: str = ""):
    """``info[key]``, which must be of type ``kind`` (a bool is not an int here)."""
    value = info.get(key) if isinstance(info, Mapping) else None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise ValueError(f"{where}{key!r} should be {kind.__name__}, got {value!r:.60}")
    return value


def optional_field(info: Mapping, key: str, kind: type, where: str = ""):
    """``info[key]`` of type ``kind``, or None (e.g. a sampler's ``converged``)."""
    if isinstance(info, Mapping) and info.get(key) is None:
        return None
    return field(info, key, kind, where)


def checked_array(arrays: Mapping, name: str, shape: tuple, kinds: str = "f") -> np.ndarray:
    """``arrays[name]``, which must have ``shape`` (None: any size there) and a dtype kind."""
    if name not in arrays:
        raise ValueError(f"the array {name!r} is missing")
    header = arrays.header(name)  # checked before the data are decompressed
    expected = tuple(m if n is None else n for n, m in zip(shape, header.shape, strict=False))
    if header.shape != expected or len(header.shape) != len(shape):
        raise ValueError(f"{name} has shape {header.shape}, expected {shape}")
    if header.dtype.kind not in kinds:
        raise ValueError(f"{name} has dtype {header.dtype}")
    return arrays[name]


FACTOR_TOLERANCE = 1e-4
"""How far from 1 a row of W may sum (float32 fits round), and the weights of an ensemble."""
ROUNDING = 1e-6
"""How far above 1 a probability or an entry of H may be (an unclipped W @ H rounds)."""


def check_values(fit: Fit, what: str = "") -> None:
    """A fit's (or member's) values: finite factors, probabilities in [0, 1], a trace.

    When its probabilities follow from W and H (none stored), W's rows must be on the
    simplex and H in [0, 1], as every engine gives them; the logistic engines' factors
    are natural parameters, whose probabilities are stored.
    """
    if not fit.trace.size:
        raise ValueError(f"{what}trace is empty: a fit has at least its final objective")
    for name in ("W", "H"):
        if not np.isfinite(getattr(fit, name)).all():
            raise ValueError(f"{what}{name} has values that are not finite")
    probs = fit.stored_probs
    if probs is not None and not ((probs >= 0) & (probs <= 1 + ROUNDING)).all():
        raise ValueError(f"{what}probs has values outside [0, 1]")
    if probs is None and not fit.members:
        sums = fit.W.sum(axis=1)
        if (fit.W < 0).any() or (np.abs(sums - 1) > FACTOR_TOLERANCE).any():
            raise ValueError(f"{what}W has rows that are not on the simplex (>= 0, sum 1)")
        if not ((fit.H >= 0) & (fit.H <= 1 + ROUNDING)).all():
            raise ValueError(f"{what}H has values outside [0, 1]")


def check_fit(fit: Fit, what: str = "") -> None:
    """:func:`check_values` of a fit and of every member, recursively (``member 2: ...``).

    A mixture's probabilities are its members': one member's NaN or probability of 3
    would make the mixture's NaN or above 1.
    """
    check_values(fit, what)
    for r, member in enumerate(fit.members):
        check_fit(member, f"{what}member {r}: ")


def number_list(info: Mapping, key: str, count: int, where: str = "", optional: bool = False):
    """``info[key]``: a list of ``count`` numbers (one per member), as a tuple; None when
    ``optional`` and absent."""
    value = info.get(key) if isinstance(info, Mapping) else None
    if value is None and optional:
        return None
    plain = isinstance(value, list) and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value
    )
    if not plain or len(value) != count:
        raise ValueError(
            f"{where}{key!r} should be {count} numbers, one per member, got {value!r:.60}"
        )
    return tuple(value)


def check_weights(weights) -> None:
    """A mixture's weights (numbers, :func:`number_list`): finite, >= 0, summing to 1."""
    array = np.asarray(weights, float)
    if not np.isfinite(array).all() or (array < 0).any() or abs(array.sum() - 1) > FACTOR_TOLERANCE:
        raise ValueError(
            f"the mixture's weights should be on the simplex (>= 0, sum 1), got {weights!r:.60}"
        )
