"""Reading a data matrix or a mask from a file: CSV, Parquet or ``.npz``.

The command line reads its DATA, ``--mask`` and ``--split`` files here. Saved fits
are read by :mod:`bernmf.io`; the paper's datasets by :mod:`bernmf.datasets`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bernmf import datasets
from bernmf.data import aligned
from bernmf.split import SPLIT_CODES, Split

__all__ = ["read_codes", "read_mask", "read_matrix"]


def read_matrix(path, values=(0, 1)) -> pd.DataFrame | np.ndarray:
    """Read a matrix from a file.

    Parameters
    ----------
    path : str or Path
        CSV (with or without a header line and a column of row names, empty cells
        missing; see :func:`bernmf.datasets.read_csv` for how the layout is told),
        Parquet (``.parquet``, ``.pq``) or ``.npz`` (the array ``Y``, or its only array).
    values : tuple of int, default (0, 1)
        The values a CSV cell may hold (other formats are checked by their user).

    Returns
    -------
    DataFrame or ndarray of shape (M, N)

    Raises
    ------
    FileNotFoundError, ValueError
        For a missing file, another suffix, or an ``.npz`` without a single or ``Y`` array.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no data file {path}")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return datasets.read_csv(path, values)
    if suffix in (".parquet", ".pq"):
        return pd.read_parquet(path)
    if suffix == ".npz":
        with np.load(path, allow_pickle=False) as arrays:
            names = list(arrays.keys())
            if "Y" in names:
                return arrays["Y"]
            if len(names) == 1:
                return arrays[names[0]]
        raise ValueError(f"{path}: an .npz file must hold an array named 'Y', found {names}")
    raise ValueError(f"{path}: DATA must be .csv, .parquet or .npz, got {suffix or 'no suffix'!r}")


def read_mask(path, shape) -> pd.DataFrame | np.ndarray:
    """Read a mask in any :func:`read_matrix` format: 1/True = observed (training), 0 = not.

    Returns a bool DataFrame with the file's labels (which :func:`bernmf.fit` aligns
    to a labelled DATA's, see :func:`bernmf.data.as_observed`) or a bool array, of
    ``shape``; ValueError for another shape or values other than 0/1.
    """
    values = read_matrix(path)
    array = values.to_numpy() if isinstance(values, pd.DataFrame) else np.asarray(values)
    if array.shape != tuple(shape):
        raise ValueError(f"mask {path} has shape {array.shape} but DATA has shape {shape}")
    if array.dtype != bool and not np.isin(array, (0, 1)).all():
        raise ValueError(f"mask {path} must hold only 0/1 (or True/False)")
    if isinstance(values, pd.DataFrame):
        return values.astype(bool)
    return array.astype(bool)


def read_codes(path, Y) -> Split:
    """Read a split, one code per entry (2 = train, 1 = validation, 0 = test), for Y.

    Any :func:`read_matrix` format; a CSV like the paper's split files (no header,
    no row names) or with labels, which are aligned to a labelled Y's as a mask's
    are (:func:`bernmf.data.aligned`).

    Raises
    ------
    ValueError
        Codes other than 0, 1, 2 (missing included), another shape than Y's, or
        labels that differ from Y's.
    """
    codes = read_matrix(path, values=SPLIT_CODES)
    if np.shape(codes) != np.shape(Y):
        raise ValueError(
            f"the split {path} has shape {np.shape(codes)} but DATA has shape {np.shape(Y)}"
        )
    codes = aligned(codes, Y)
    return Split.from_codes(codes.to_numpy() if isinstance(codes, pd.DataFrame) else codes)
