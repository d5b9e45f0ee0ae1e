"""Validation and conversion of user input, done once, before any compilation."""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import sparse


class Observed(NamedTuple):
    """A validated binary matrix and its mask of observed entries.

    Attributes
    ----------
    Y : ndarray of shape (M, N), float64
        Values 0.0 and 1.0; 0.0 wherever the entry is not observed.
    mask : ndarray of shape (M, N), bool
        True where the entry is observed (given by the user's mask and not NaN).
    row_labels, col_labels : pandas.Index or None
        Labels of a DataFrame input.
    """

    Y: np.ndarray
    mask: np.ndarray
    row_labels: pd.Index | None
    col_labels: pd.Index | None

    @property
    def shape(self) -> tuple[int, int]:
        return self.Y.shape


def _numeric_values(Y, what: str) -> np.ndarray:
    """Return a float64 copy of a numpy array, DataFrame or scipy.sparse matrix."""
    if isinstance(Y, pd.DataFrame):
        bad = [c for c, t in Y.dtypes.items() if not pd.api.types.is_numeric_dtype(t)]
        if bad:
            raise TypeError(f"{what} must be numeric; non-numeric columns: {bad[:5]}")
        return Y.to_numpy(dtype=float, na_value=np.nan)
    if sparse.issparse(Y):
        if Y.dtype.kind not in "biuf":
            raise TypeError(f"{what} must be numeric, got sparse dtype {Y.dtype}")
        return Y.toarray().astype(float)
    array = np.asarray(Y)
    if array.dtype.kind not in "biuf":
        raise TypeError(f"{what} must be numeric (bool, int or float), got dtype {array.dtype}")
    return array.astype(float)


def _labels(Y):
    if isinstance(Y, pd.DataFrame):
        return Y.index.copy(), Y.columns.copy()
    return None, None


def as_observed(Y, mask=None) -> Observed:
    """Validate a binary matrix and its mask.

    Parameters
    ----------
    Y : array-like, pandas.DataFrame or scipy.sparse matrix of shape (M, N)
        Values 0 and 1; NaN means "missing" (not observed).
    mask : array-like of shape (M, N) with boolean values, optional
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
        factors are then set by the prior, or kept).
    """
    values = _numeric_values(Y, "Y")
    if values.ndim != 2:
        raise ValueError(f"Y must be 2-D (rows x columns), got {values.ndim} dimension(s)")
    if values.size == 0:
        raise ValueError(f"Y is empty (shape {values.shape})")
    if np.isinf(values).any():
        raise ValueError(f"Y contains inf at {int(np.isinf(values).sum())} entries")
    is_nan = np.isnan(values)
    bad = ~is_nan & (values != 0) & (values != 1)
    if bad.any():
        examples = np.unique(values[bad])[:5].tolist()
        raise ValueError(
            f"Y must hold only 0, 1 or NaN (missing); found {int(bad.sum())} other values, "
            f"e.g. {examples}"
        )
    observed = ~is_nan
    if mask is not None:
        observed &= _boolean_mask(mask, values.shape)
    if not observed.any():
        raise ValueError("no entry of Y is observed (the mask and the NaNs of Y leave nothing)")
    empty_rows = int((~observed.any(axis=1)).sum())
    empty_cols = int((~observed.any(axis=0)).sum())
    if empty_rows or empty_cols:
        warnings.warn(
            f"{empty_rows} row(s) and {empty_cols} column(s) of Y have no observed entry; "
            "their factors are determined by the prior (or kept at their initial value)",
            UserWarning,
            stacklevel=3,
        )
    row_labels, col_labels = _labels(Y)
    return Observed(np.where(observed, values, 0.0), observed, row_labels, col_labels)


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


def check_stopping(max_iter, tol) -> None:
    """Raise ValueError unless ``max_iter`` is an integer >= 1 and ``tol`` a finite number >= 0."""
    if not isinstance(max_iter, int | np.integer) or isinstance(max_iter, bool) or max_iter < 1:
        raise ValueError(f"max_iter must be an integer >= 1, got {max_iter!r}")
    if isinstance(tol, bool) or not isinstance(tol, int | float | np.integer | np.floating):
        raise ValueError(f"tol must be a number, got {tol!r}")
    if not np.isfinite(tol) or tol < 0:
        raise ValueError(f"tol must be a finite number >= 0, got {tol!r}")
