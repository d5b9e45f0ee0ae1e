"""Validation and conversion of user input, done once, before any compilation."""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from bernmf._warnings import warn
from bernmf.data.sparse import checked_coo

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True, eq=False)
class Observed:
    """A validated binary matrix and its mask of observed entries, stored compactly.

    The data are kept as two boolean matrices (one byte per entry), so that a large
    matrix is never held as float64; :attr:`Y` gives the float64 view for the engines
    that want it.

    Attributes
    ----------
    ones : ndarray of shape (M, N), bool
        True where the entry is observed and equal to 1. (A 0/1 numeric array is
        accepted when constructing and converted to bool.)
    mask : ndarray of shape (M, N), bool
        True where the entry is observed (given by the user's mask and not NaN).
    row_labels, col_labels : pandas.Index or None
        Labels of a DataFrame input.
    """

    ones: np.ndarray
    mask: np.ndarray
    row_labels: pd.Index | None = None
    col_labels: pd.Index | None = None

    def __post_init__(self):
        ones = np.asarray(self.ones)
        if ones.dtype != bool:
            object.__setattr__(self, "ones", (ones == 1) & self.mask)

    @property
    def Y(self) -> np.ndarray:
        """Float64 array of shape (M, N): 1.0 and 0.0, and 0.0 wherever not observed.

        A new array on each access (8 bytes per entry): engines that work on the
        compact data use :attr:`ones` and :attr:`mask` instead.
        """
        return self.ones.astype(float)

    @property
    def shape(self) -> tuple[int, int]:
        return self.ones.shape

    def entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows, columns and 0.0/1.0 values of the observed entries, each (n,), row-major."""
        rows, columns = np.nonzero(self.mask)
        return rows, columns, self.ones[rows, columns].astype(float)

    def restricted(
        self, mask=None, *, warn_empty: bool = True, require_entries: bool = True,
        mask_name: str = "mask",
    ) -> Observed:  # fmt: skip
        """These observed entries where ``mask`` is True (all of them for None): what
        :func:`as_observed` gives of the data these were made from, without checking Y's
        values again (only the mask's shape, values and labels)."""
        labels = None if self.row_labels is None else (self.row_labels, self.col_labels)
        return _selected(
            self.ones.copy(), self.mask.copy(), labels, mask, warn_empty=warn_empty,
            require_entries=require_entries, mask_name=mask_name,
        )  # fmt: skip

    def union(self, other: Observed) -> Observed:
        """These entries and ``other``'s, both of the same checked Y (e.g. the training and
        the validation entries that a stack's refit uses), with these labels."""
        return Observed(
            self.ones | other.ones, self.mask | other.mask, self.row_labels, self.col_labels
        )

    def digests(self) -> dict[str, str]:
        """SHA-256 of the mask and of the observed ones, as :func:`bits_sha256` gives them.

        Two fits made on the same entries of the same data have equal digests, so a
        saved fit names its training split (and data) without storing them.
        """
        return {"mask_sha256": bits_sha256(self.mask), "ones_sha256": bits_sha256(self.ones)}


def bits_sha256(bits) -> str:
    """Hex SHA-256 of a bool array of shape (M, N): its shape, then its bits packed row-major.

    ``hashlib.sha256(b"M,N;" + numpy.packbits(bits, axis=None).tobytes())``: reproducible
    from the array with numpy alone, and the same for equal arrays of any memory layout.
    """
    bits = np.asarray(bits, dtype=bool)
    header = ",".join(map(str, bits.shape)).encode() + b";"
    return hashlib.sha256(header + np.packbits(bits, axis=None).tobytes()).hexdigest()


def _check_numeric_dtype(dtype, what: str, kind: str = "") -> None:
    if dtype.kind not in "biuf":
        raise TypeError(f"{what} must be numeric (bool, int or float), got {kind}dtype {dtype}")


def _check_values(values: np.ndarray, what: str) -> np.ndarray:
    """Check that ``values`` (any shape) holds only 0, 1 and NaN; return where it is NaN."""
    if values.dtype.kind == "b":
        return np.zeros(values.shape, bool)
    if values.dtype.kind == "f" and np.isinf(values).any():
        raise ValueError(f"{what} contains inf at {int(np.isinf(values).sum())} entries")
    is_nan = np.isnan(values) if values.dtype.kind == "f" else np.zeros(values.shape, bool)
    bad = (values != 0) & (values != 1)
    bad &= ~is_nan
    if bad.any():
        examples = ", ".join(str(v) for v in np.unique(values[bad])[:5])
        raise ValueError(
            f"{what} must hold only 0, 1 or NaN (missing); found {int(bad.sum())} other "
            f"values, e.g. [{examples}]"  # in their own dtype: 1 + 1e-19 is not "1.0"
        )
    return is_nan


def is_dataframe(value) -> bool:
    """Whether ``value`` is a DataFrame, without importing pandas (which loads in 0.5 s)."""
    pandas = sys.modules.get("pandas")  # no instance without its class's module loaded
    return pandas is not None and isinstance(value, pandas.DataFrame)


def is_sparse(value) -> bool:
    """Whether ``value`` is a scipy.sparse matrix or array, without importing scipy."""
    sparse = sys.modules.get("scipy.sparse")
    return sparse is not None and sparse.issparse(value)


def _is_sparse_frame(value) -> bool:
    """Whether ``value`` is a DataFrame of sparse columns whose entries not stored are 0."""
    if not is_dataframe(value) or value.shape[1] == 0:
        return False
    from pandas import SparseDtype

    return all(isinstance(t, SparseDtype) and t.fill_value == 0 for t in value.dtypes)


def _check_shape(shape: tuple[int, ...], what: str) -> None:
    if len(shape) != 2:
        raise ValueError(f"{what} must be 2-D (rows x columns), got {len(shape)} dimension(s)")
    if shape[0] * shape[1] == 0:
        raise ValueError(f"{what} is empty (shape {shape})")


def _dense_ones_and_missing(Y, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Validate a dense array or DataFrame; return bool ``(Y == 1, Y is NaN)``.

    Bool and integer input is checked and compared in its own dtype (never
    converted to float), so a large bool / int8 matrix costs a few bytes per entry.
    """
    if isinstance(Y, np.ma.MaskedArray):
        values, hidden = _unmasked(Y, what)
        ones, is_nan = _dense_ones_and_missing(values, what)
        return ones & ~hidden, is_nan | hidden
    if is_dataframe(Y):
        from pandas.api.types import is_numeric_dtype

        bad = [c for c, t in Y.dtypes.items() if not is_numeric_dtype(t)]
        if bad:
            raise TypeError(f"{what} must be numeric; non-numeric columns: {bad[:5]}")
        values = Y.to_numpy(dtype=float, na_value=np.nan)
    else:
        values = np.asarray(Y)
        _check_numeric_dtype(values.dtype, what)
    _check_shape(values.shape, what)
    is_nan = _check_values(values, what)
    return (values == 1) if values.dtype != bool else values.copy(), is_nan


def _unmasked(Y: np.ma.MaskedArray, what: str) -> tuple[np.ndarray, np.ndarray]:
    """The data of a masked array with its masked entries set to 0, and its mask.

    The masked entries' values are never looked at (they may be anything), and the
    mask counts as missing, as NaN does.
    """
    _check_numeric_dtype(Y.dtype, what)
    hidden = np.ma.getmaskarray(Y)
    return np.where(hidden, np.zeros((), Y.dtype), np.ma.getdata(Y)), hidden


def _sparse_ones_and_missing(Y, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Validate a scipy.sparse matrix; return dense bool ``(Y == 1, Y is NaN)``.

    Its structure is checked before scipy converts it (:func:`bernmf.data.sparse.checked_coo`:
    an inconsistent ``indptr`` would crash the process). Only the stored entries are
    checked and converted; entries not stored are observed zeros. Duplicate stored
    entries are summed, as ``toarray`` does.
    """
    _check_numeric_dtype(Y.dtype, what, kind="sparse ")
    _check_shape(Y.shape, what)
    stored = checked_coo(Y, what)
    stored.sum_duplicates()
    is_nan_stored = _check_values(stored.data, what)
    ones = np.zeros(stored.shape, bool)
    is_one = stored.data == 1
    ones[stored.row[is_one], stored.col[is_one]] = True
    is_nan = np.zeros(stored.shape, bool)
    is_nan[stored.row[is_nan_stored], stored.col[is_nan_stored]] = True
    return ones, is_nan


def as_observed(
    Y, mask=None, *, warn_empty: bool = True, require_entries: bool = True, mask_name: str = "mask"
) -> Observed:
    """Validate a binary matrix and its mask.

    Parameters
    ----------
    Y : array-like, pandas.DataFrame or scipy.sparse matrix of shape (M, N)
        Values 0 and 1; NaN means "missing" (not observed). Bool and integer
        arrays (e.g. int8) are validated without conversion to float. The masked
        entries of a ``numpy.ma.MaskedArray`` are missing, as NaN. For a
        scipy.sparse matrix (CSR, CSC, COO, ...), the stored entries must be 1
        (or 0, or NaN for missing) and every entry that is not stored is an
        observed 0; express other missing entries with ``mask``. A DataFrame of
        sparse columns whose entries not stored are 0 is read as such a matrix.
    mask : array-like, DataFrame or scipy.sparse matrix of shape (M, N), boolean, optional
        True where the entry is observed (for example the training entries).
        Combined with the NaNs of Y. Default: every non-NaN entry. A DataFrame mask
        of a DataFrame Y is aligned to Y's labels (same labels, any order); an axis
        where the mask has pandas' default labels 0, 1, ..., and every other mask
        or Y, is taken by position.

    Returns
    -------
    Observed

    Raises
    ------
    TypeError
        Non-numeric Y, or a mask that is not boolean-valued.
    ValueError
        Y not 2-D, empty, with inf or values other than 0/1/NaN; a mask of
        another shape or with other labels than Y; no observed entry at all.

    Warns
    -----
    UserWarning
        Once, if some rows or columns have no observed entry (allowed: their
        factors are then set by the prior, or kept), unless ``warn_empty`` is
        False (entries held out for scoring, where that is expected).

    With ``require_entries=False`` (one process's block of rows, checked with the
    others' by :mod:`bernmf.fitting.multiprocess`) no observed entry is not an error.
    ``mask_name`` is the argument the errors about the mask name (``"validation"``
    for held-out entries). Y may be an :class:`Observed` already: its entries where ``mask``
    is True are given (:meth:`Observed.restricted`), its values not checked again.
    """
    if isinstance(Y, Observed):  # checked once, where it entered
        return Y.restricted(
            mask, warn_empty=warn_empty, require_entries=require_entries, mask_name=mask_name
        )
    if is_sparse(Y):
        ones, is_nan = _sparse_ones_and_missing(Y, "Y")
    elif _is_sparse_frame(Y):  # as an .npz of a sparse matrix with names is read
        ones, is_nan = _sparse_ones_and_missing(Y.sparse.to_coo(), "Y")
    else:
        ones, is_nan = _dense_ones_and_missing(Y, "Y")
    observed = ~is_nan
    del is_nan
    labels = (Y.index.copy(), Y.columns.copy()) if is_dataframe(Y) else None
    return _selected(
        ones, observed, labels, mask, warn_empty=warn_empty, require_entries=require_entries,
        mask_name=mask_name,
    )  # fmt: skip


def _selected(
    ones, observed, labels, mask, *, warn_empty: bool, require_entries: bool, mask_name: str
) -> Observed:
    """The :class:`Observed` of ``ones`` and ``observed`` (bool (M, N), the caller's own:
    changed in place) where ``mask`` is True, aligned to Y's ``labels`` (rows, columns; None
    unlabelled); what :func:`as_observed` and :meth:`Observed.restricted` end with."""
    if mask is not None:
        observed &= _boolean_mask(aligned(mask, labels, mask_name), observed.shape, mask_name)
    if require_entries and not observed.any():
        raise ValueError(NO_ENTRY if mask_name == "mask" else f"{mask_name} {NO_SELECTED}")
    if warn_empty:
        warn_empty_lines(observed.any(axis=1), observed.any(axis=0))
    ones &= observed
    return Observed(ones, observed, *(labels or (None, None)))


def as_training(
    Y, mask=None, validation=None, *, require_entries: bool = True, warn_empty: bool = True
) -> tuple[Observed, Observed | None]:
    """Y checked once, as its training entries (``mask``) and its validation entries.

    What :func:`bernmf.fit` and the other entry points check of their data: Y's values once
    (:func:`as_observed`; Y may be an :class:`Observed` already), then each mask selects from
    it (:meth:`Observed.restricted`). ``warn_empty``: warn of training rows and columns
    without an entry (False for one process's rows of a fit across processes, whose
    caller warns of all); ``require_entries`` as :func:`as_observed`'s.

    Returns
    -------
    (Observed, Observed or None)
        The training entries, and the validation entries (None without ``validation``).

    Raises
    ------
    TypeError, ValueError
        As :func:`as_observed`, and :func:`validation_entries`.
    """
    if validation is None:
        data = as_observed(Y, mask, warn_empty=warn_empty, require_entries=require_entries)
        return data, None
    observed = as_observed(Y, warn_empty=False, require_entries=require_entries)
    data = observed.restricted(mask, warn_empty=warn_empty, require_entries=require_entries)
    return data, validation_entries(observed, data, validation, require_entries)


def validation_entries(
    observed: Observed, data: Observed, validation, require_entries: bool = True
) -> Observed:
    """The entries of ``observed`` (every checked entry of Y) that ``validation`` selects,
    checked against the training entries ``data``; ``require_entries`` as
    :func:`as_observed`'s.

    Raises
    ------
    ValueError
        A mask of the wrong shape, one that overlaps the training entries, or one
        without an observed entry.
    """
    held_out = observed.restricted(
        validation, warn_empty=False, require_entries=require_entries, mask_name="validation"
    )
    overlap = int((held_out.mask & data.mask).sum())
    if overlap:
        raise ValueError(
            "validation entries must not be training entries: validation and mask overlap "
            f"in {overlap} entries"
        )
    return held_out


NO_ENTRY = "no entry of Y is observed (the mask and the NaNs of Y leave nothing)"
NO_SELECTED = "selects no observed entry of Y (none of its True entries is 0 or 1 in Y)"
"""What is said of a mask other than the training mask (``validation``) that selects none."""


def warn_empty_lines(rows_seen, columns_seen) -> None:
    """Warn once if a row or column has no observed entry (bool arrays (M,), (N,)).

    Allowed (their factors are then set by the prior, or kept), but often a mistake.
    """
    empty_rows, empty_cols = int((~rows_seen).sum()), int((~columns_seen).sum())
    if empty_rows or empty_cols:
        warn(
            f"{empty_rows} row(s) and {empty_cols} column(s) of Y have no observed entry; "
            "their factors are determined by the prior (or kept at their initial value)"
        )


def _is_default(labels: pd.Index) -> bool:
    """Whether ``labels`` are pandas' default 0, 1, ..., n - 1 of an unlabelled axis."""
    from pandas import RangeIndex

    return isinstance(labels, RangeIndex) and labels.start == 0 and labels.step == 1


def aligned(mask, labels: tuple[pd.Index, pd.Index] | None, name: str = "mask"):
    """``mask`` with its rows and columns in the order of Y's ``labels`` (rows, columns;
    None for an unlabelled Y), or as it was.

    A DataFrame mask is aligned to a labelled Y axis by axis: an axis where the
    mask has pandas' default labels (0, 1, ..., as ``pd.DataFrame(array)`` gives) is
    taken by position; on any other axis the mask must have the same set of labels
    as Y, in any order. Any other mask, or any mask of an unlabelled Y, is taken by
    position.

    Raises
    ------
    ValueError
        The mask's labels on an aligned axis differ from Y's; the message names some.
    """
    if not is_dataframe(mask) or labels is None:
        return mask
    for axis, axis_name in ((0, "row"), (1, "column")):
        ours, theirs = mask.axes[axis], labels[axis]
        if _is_default(ours) or ours.equals(theirs):
            continue
        if ours.has_duplicates or theirs.has_duplicates or set(ours) != set(theirs):
            missing = [str(x) for x in theirs.difference(ours)[:5]]
            extra = [str(x) for x in ours.difference(theirs)[:5]]
            raise ValueError(
                f"the {name}'s {axis_name} labels differ from Y's (they must be the same set, "
                f"in any order, and unique): Y's not in the {name} {missing}, the {name}'s not "
                f"in Y {extra}; pass {name}.to_numpy() to apply it by position"
            )
        mask = mask.reindex(theirs, axis=axis)
    return mask


def _boolean_mask(mask, shape, name: str = "mask") -> np.ndarray:
    """Return a bool copy of ``mask`` after checking its shape and values."""
    if is_dataframe(mask):
        mask = mask.to_numpy()
    elif is_sparse(mask):
        if tuple(mask.shape) != shape:
            raise ValueError(f"{name} has shape {tuple(mask.shape)} but Y has shape {shape}")
        mask = checked_coo(mask, name).toarray()
    mask = np.asarray(mask)
    if mask.shape != shape:
        raise ValueError(f"{name} has shape {mask.shape} but Y has shape {shape}")
    if mask.dtype == bool:
        return mask.copy()
    if mask.dtype.kind in "iuf" and np.isin(mask, (0, 1)).all():
        return mask.astype(bool)
    raise TypeError(
        f"{name} must be boolean (True = observed), got dtype {mask.dtype} with values other "
        "than 0 and 1"
    )
