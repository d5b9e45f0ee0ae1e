"""Validation and conversion of user input, done once, before any compilation."""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import sparse


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
        examples = np.unique(values[bad]).astype(float)[:5].tolist()
        raise ValueError(
            f"{what} must hold only 0, 1 or NaN (missing); found {int(bad.sum())} other "
            f"values, e.g. {examples}"
        )
    return is_nan


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
    if isinstance(Y, pd.DataFrame):
        bad = [c for c, t in Y.dtypes.items() if not pd.api.types.is_numeric_dtype(t)]
        if bad:
            raise TypeError(f"{what} must be numeric; non-numeric columns: {bad[:5]}")
        values = Y.to_numpy(dtype=float, na_value=np.nan)
    else:
        values = np.asarray(Y)
        _check_numeric_dtype(values.dtype, what)
    _check_shape(values.shape, what)
    is_nan = _check_values(values, what)
    return (values == 1) if values.dtype != bool else values.copy(), is_nan


def _sparse_ones_and_missing(Y, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Validate a scipy.sparse matrix; return dense bool ``(Y == 1, Y is NaN)``.

    Only the stored entries are checked and converted; entries not stored are
    observed zeros. Duplicate stored entries are summed, as ``toarray`` does.
    """
    _check_numeric_dtype(Y.dtype, what, kind="sparse ")
    _check_shape(Y.shape, what)
    stored = sparse.coo_array(Y, copy=True)
    stored.sum_duplicates()
    is_nan_stored = _check_values(stored.data, what)
    ones = np.zeros(stored.shape, bool)
    is_one = stored.data == 1
    ones[stored.row[is_one], stored.col[is_one]] = True
    is_nan = np.zeros(stored.shape, bool)
    is_nan[stored.row[is_nan_stored], stored.col[is_nan_stored]] = True
    return ones, is_nan


def _labels(Y):
    if isinstance(Y, pd.DataFrame):
        return Y.index.copy(), Y.columns.copy()
    return None, None


def as_observed(Y, mask=None, *, warn_empty: bool = True) -> Observed:
    """Validate a binary matrix and its mask.

    Parameters
    ----------
    Y : array-like, pandas.DataFrame or scipy.sparse matrix of shape (M, N)
        Values 0 and 1; NaN means "missing" (not observed). Bool and integer
        arrays (e.g. int8) are validated without conversion to float. For a
        scipy.sparse matrix (CSR, CSC, COO, ...), the stored entries must be 1
        (or 0, or NaN for missing) and every entry that is not stored is an
        observed 0; express other missing entries with ``mask``.
    mask : array-like or scipy.sparse matrix of shape (M, N) with boolean values, optional
        True where the entry is observed (for example the training entries).
        Combined with the NaNs of Y. Default: every non-NaN entry.

    Returns
    -------
    Observed

    Raises
    ------
    TypeError
        Non-numeric Y, or a mask that is not boolean-valued.
    ValueError
        Y not 2-D, empty, with inf or values other than 0/1/NaN; a mask of
        another shape; no observed entry at all.

    Warns
    -----
    UserWarning
        Once, if some rows or columns have no observed entry (allowed: their
        factors are then set by the prior, or kept), unless ``warn_empty`` is
        False (entries held out for scoring, where that is expected).
    """
    if sparse.issparse(Y):
        ones, is_nan = _sparse_ones_and_missing(Y, "Y")
    else:
        ones, is_nan = _dense_ones_and_missing(Y, "Y")
    observed = ~is_nan
    del is_nan
    if mask is not None:
        observed &= _boolean_mask(mask, ones.shape)
    if not observed.any():
        raise ValueError("no entry of Y is observed (the mask and the NaNs of Y leave nothing)")
    empty_rows = int((~observed.any(axis=1)).sum())
    empty_cols = int((~observed.any(axis=0)).sum())
    if warn_empty and (empty_rows or empty_cols):
        warnings.warn(
            f"{empty_rows} row(s) and {empty_cols} column(s) of Y have no observed entry; "
            "their factors are determined by the prior (or kept at their initial value)",
            UserWarning,
            stacklevel=3,
        )
    ones &= observed
    row_labels, col_labels = _labels(Y)
    return Observed(ones, observed, row_labels, col_labels)


def _boolean_mask(mask, shape) -> np.ndarray:
    """Return a bool copy of ``mask`` after checking its shape and values."""
    if isinstance(mask, pd.DataFrame):
        mask = mask.to_numpy()
    elif sparse.issparse(mask):
        mask = mask.toarray()
    mask = np.asarray(mask)
    if mask.shape != shape:
        raise ValueError(f"mask has shape {mask.shape} but Y has shape {shape}")
    if mask.dtype == bool:
        return mask.copy()
    if mask.dtype.kind in "iuf" and np.isin(mask, (0, 1)).all():
        return mask.astype(bool)
    raise TypeError(
        f"mask must be boolean (True = observed), got dtype {mask.dtype} with values other "
        "than 0 and 1"
    )


def check_rank(rank) -> int:
    """Return ``rank`` as an int after checking that it is an integer >= 1."""
    if rank is None:
        raise TypeError("rank is required: the number of components K, an integer >= 1")
    if isinstance(rank, bool) or not isinstance(rank, int | np.integer):
        raise TypeError(f"rank must be an integer, got {type(rank).__name__} {rank!r}")
    if rank < 1:
        raise ValueError(f"rank must be >= 1, got {rank}")
    return int(rank)


def check_count(name: str, value, least: int = 1) -> None:
    """Raise ValueError unless ``value`` is an integer (not a bool) >= ``least``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")


def check_stopping(max_iter, tol) -> None:
    """Raise ValueError unless ``max_iter`` is an integer >= 1 and ``tol`` a finite number >= 0."""
    check_count("max_iter", max_iter)
    if isinstance(tol, bool) or not isinstance(tol, int | float | np.integer | np.floating):
        raise ValueError(f"tol must be a number, got {tol!r}")
    if not np.isfinite(tol) or tol < 0:
        raise ValueError(f"tol must be a finite number >= 0, got {tol!r}")


DTYPES = {"float64": np.float64, "float32": np.float32}
"""The float dtypes an engine's ``dtype`` option names."""


def check_dtype(dtype: str) -> None:
    """Raise ValueError unless ``dtype`` is one of :data:`DTYPES`."""
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")


def check_flag(name: str, value) -> None:
    """Raise TypeError unless ``value`` is a bool."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be True or False, got {value!r}")


def check_init(init, M: int, N: int, K: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate user-given initial factors; return ``(W, H)`` as float64 arrays.

    W must be (M, K), nonnegative with rows summing to one (renormalized exactly
    here), and H (K, N) in [0, 1].
    """
    if len(init) != 2:
        raise ValueError("init must be a pair (W, H)")
    W, H = (np.array(a, dtype=float) for a in init)
    if W.shape != (M, K) or H.shape != (K, N):
        raise ValueError(
            f"init must have W of shape {(M, K)} and H of shape {(K, N)}, "
            f"got {W.shape} and {H.shape}"
        )
    if not (np.isfinite(W).all() and np.isfinite(H).all()):
        raise ValueError("init W and H must be finite")
    if (W < 0).any() or not np.allclose(W.sum(axis=1), 1, atol=1e-6):
        raise ValueError("init W must be nonnegative with rows summing to 1")
    if (H < 0).any() or (H > 1).any():
        raise ValueError("init H must lie in [0, 1]")
    return W / W.sum(axis=1, keepdims=True), H
