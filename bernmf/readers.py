"""Reading a data matrix or a mask from a file: CSV, Parquet or ``.npz``.

The command line reads its DATA, ``--mask`` and ``--split`` files here. Saved fits
are read by :mod:`bernmf.io`; the paper's datasets by :mod:`bernmf.datasets`.
"""

from __future__ import annotations

import io
import itertools
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import sparse

from bernmf import datasets
from bernmf.data import aligned
from bernmf.split import SPLIT_CODES, Split

__all__ = ["count_rows", "read_codes", "read_mask", "read_matrix", "read_rows", "rows_of"]


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


def rows_of(process_index: int, process_count: int, M: int) -> tuple[int, int]:
    """The rows ``[start, stop)`` of process ``process_index`` of ``process_count``.

    Balanced blocks in process order: the first ``M % process_count`` processes get
    one row more than the others.
    """
    if not 0 <= process_index < process_count:
        raise ValueError(f"process_index must be in [0, {process_count}), got {process_index}")
    base, extra = divmod(M, process_count)
    start = process_index * base + min(process_index, extra)
    return start, start + base + (process_index < extra)


def _npy_header(file) -> tuple[tuple, bool, np.dtype]:
    """``(shape, fortran_order, dtype)`` of an open ``.npy`` file, left after its header."""
    version = np.lib.format.read_magic(file)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(file)
    return np.lib.format.read_array_header_2_0(file)


def count_rows(path) -> int:
    """The rows M of a :func:`read_rows` file, read from its header where it has one.

    ``.npy`` and ``.npz`` (dense or scipy.sparse) from their headers; CSV by counting
    its lines; Parquet by reading the table.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return int(np.load(path, mmap_mode="r").shape[0])
    if suffix == ".npz":
        with zipfile.ZipFile(path) as archive:
            names = [n.removesuffix(".npy") for n in archive.namelist()]
            if {"format", "shape", "indptr"} <= set(names):
                return int(np.load(path)["shape"][0])
            name = "Y" if "Y" in names else names[0]
            with archive.open(name + ".npy") as member:
                return int(_npy_header(member)[0][0])
    if suffix == ".csv":
        with open(path, encoding="utf-8") as lines:
            return sum(1 for _ in lines) - len(_csv_header(path))
    return len(read_rows(path, 0, np.iinfo(np.int64).max))


def _npz_member_rows(archive: zipfile.ZipFile, name: str, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of array ``name`` of an ``.npz``, reading only their bytes.

    The member is seeked into (cheap when stored, as ``np.savez`` writes; a compressed
    member is decompressed up to the rows, without holding what comes before).
    """
    with archive.open(name + ".npy") as member:
        shape, fortran, dtype = _npy_header(member)
        if fortran or dtype.hasobject:
            raise ValueError(f"{name} must be a C-ordered array of numbers to read rows of it")
        stop = min(stop, shape[0])
        row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        member.seek(member.tell() + start * row_bytes)
        count = max(stop - start, 0)
        buffer = member.read(count * row_bytes)
    return np.frombuffer(buffer, dtype).reshape(count, *shape[1:])


def _npz_rows(path: Path, start: int, stop: int):
    """Rows of an ``.npz``: of ``Y`` or its only array, or of a scipy.sparse matrix."""
    with zipfile.ZipFile(path) as archive:
        names = [n.removesuffix(".npy") for n in archive.namelist()]
        if {"format", "shape", "indptr"} <= set(names):  # scipy.sparse.save_npz
            layout = np.load(path)["format"].item()
            layout = layout.decode() if isinstance(layout, bytes) else layout
            if layout != "csr":  # other layouts: the whole matrix, then its rows
                return sparse.csr_array(sparse.load_npz(path))[start:stop]
            M, N = np.load(path)["shape"]
            indptr = _npz_member_rows(archive, "indptr", start, min(stop, M) + 1)
            first, last = int(indptr[0]), int(indptr[-1])
            data = _npz_member_rows(archive, "data", first, last)
            indices = _npz_member_rows(archive, "indices", first, last)
            return sparse.csr_array((data, indices, indptr - first), shape=(len(indptr) - 1, N))
        name = "Y" if "Y" in names else names[0] if len(names) == 1 else None
        if name is None:
            raise ValueError(f"{path}: an .npz file must hold an array named 'Y', found {names}")
        return _npz_member_rows(archive, name, start, stop)


def _csv_header(path: Path) -> list[str]:
    """[header line] of the CSV, or [] without one (as :func:`datasets.read_csv` reads it)."""
    with open(path, encoding="utf-8") as lines:
        head = list(itertools.islice(lines, 2))
    header = len(head) == 2 and len(datasets.read_csv(io.StringIO("".join(head)))) == 1
    return head[:1] if header else []


def _csv_rows(path: Path, start: int, stop: int) -> pd.DataFrame:
    """Rows of a CSV (after its header line, if any), read line by line."""
    header = _csv_header(path)
    with open(path, encoding="utf-8") as lines:
        kept = list(itertools.islice(lines, len(header) + start, len(header) + stop))
    if not kept:
        raise ValueError(f"{path}: no rows in [{start}, {stop})")
    return datasets.read_csv(io.StringIO("".join(header + kept)))


def read_rows(path, start: int, stop: int):
    """Rows ``start:stop`` of a :func:`read_matrix` file, without reading the others.

    For one process's block of a fit across processes (:func:`rows_of`,
    ``bernmf.fit(..., distributed=True)``).

    Parameters
    ----------
    path : str or Path
        ``.npy`` (memory-mapped), ``.npz`` (``Y`` or its only array: only the rows'
        bytes are read; or a ``scipy.sparse.save_npz`` matrix: a CSR one by its row
        pointers, the other layouts by loading the whole matrix), CSV (the lines
        are skipped, the header kept) or Parquet (the whole table is read, then cut).
    start, stop : int
        ``0 <= start <= stop``; ``stop`` past the end stops at the end.

    Returns
    -------
    ndarray, scipy.sparse.csr_array or DataFrame of shape (stop - start, N)
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no data file {path}")
    if not 0 <= start <= stop:
        raise ValueError(f"rows must satisfy 0 <= start <= stop, got {start}, {stop}")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return np.array(np.load(path, mmap_mode="r")[start:stop])
    if suffix == ".npz":
        return _npz_rows(path, start, stop)
    if suffix == ".csv":
        return _csv_rows(path, start, stop)
    if suffix in (".parquet", ".pq"):
        return pd.read_parquet(path).iloc[start:stop]
    raise ValueError(f"{path}: DATA must be .csv, .parquet, .npz or .npy, got {suffix!r}")
