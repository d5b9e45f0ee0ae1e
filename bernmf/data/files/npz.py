"""The ``.npz`` files of the readers, untrusted: a dense array, or a scipy.sparse matrix.

:func:`sparse_layout` checks the fields of a ``scipy.sparse.save_npz`` file (their
headers, lengths and dtypes, and the shape against the memory limit) before any
index is read, and :func:`npz_rows` reads rows of either kind, every index checked
before scipy sees it (by :mod:`bernmf.data.sparse`, which checks matrices in memory
too). Used by :mod:`bernmf.data.files.readers`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy import sparse

from bernmf.data.files.archive import Archive
from bernmf.data.sparse import check_dense_size, checked_indices, checked_pointers

__all__ = ["NAMES", "SPARSE_FIELDS", "dense_member", "npz_rows", "sparse_layout"]


def dense_member(archive: Archive) -> str:
    """The member of an ``.npz`` that holds the matrix: ``Y.npy`` or its only ``.npy``."""
    arrays = [name for name in archive.names if name.endswith(".npy")]
    if "Y.npy" in arrays:
        return "Y.npy"
    if len(arrays) == 1 and len(archive.names) == 1:
        return arrays[0]
    found = [name.removesuffix(".npy") for name in archive.names]
    raise ValueError(f"an .npz file must hold an array named 'Y', found {found}")


SPARSE_FIELDS = {"csr": ("indptr", "indices"), "csc": ("indptr", "indices"), "coo": ("row", "col")}
"""The index fields of each layout that ``scipy.sparse.save_npz`` writes, read here."""


def sparse_layout(archive: Archive) -> tuple[str, tuple[int, int]] | None:
    """``(layout, (M, N))`` of a ``scipy.sparse.save_npz`` file, its fields checked; None if dense.

    Every field's header is checked against the others (lengths, integer index
    dtypes, numeric data) and M x N against the memory limit (a fit holds the
    entries densely), before any index is read.
    """
    if not {"format.npy", "shape.npy", "data.npy"} <= set(archive.names):
        return None
    layout = archive.read_array("format.npy")
    if layout.shape != () or layout.dtype.kind not in "SU":
        raise ValueError(f"field 'format' must be a string, got {layout.dtype} {layout.shape}")
    layout = layout.item()
    layout = layout.decode("ascii", "replace") if isinstance(layout, bytes) else layout
    if layout not in SPARSE_FIELDS:
        raise ValueError(
            f"field 'format' must be one of {sorted(SPARSE_FIELDS)}, got {layout!r:.20}"
        )
    shape = archive.header("shape.npy")
    if shape.shape != (2,) or shape.dtype.kind not in "iu":
        raise ValueError("field 'shape' must be 2 integers (rows, columns)")
    M, N = (int(n) for n in archive.read_array("shape.npy"))
    if M < 0 or N < 0:
        raise ValueError(f"field 'shape' must be 2 integers >= 0, got {(M, N)}")
    check_dense_size(M, N, "its field 'shape'")
    data = archive.header("data.npy")
    if len(data.shape) != 1 or data.dtype.kind not in "biuf":
        raise ValueError(f"field 'data' must be 1-D numbers, got {data.dtype} {data.shape}")
    pointers = {"csr": M + 1, "csc": N + 1}.get(layout)
    for field in SPARSE_FIELDS[layout]:
        if f"{field}.npy" not in archive.names:
            raise ValueError(f"a {layout} matrix needs the field {field!r}")
        header = archive.header(f"{field}.npy")
        length = pointers if field == "indptr" else data.shape[0]
        if header.shape != (length,) or header.dtype.kind not in "iu":
            raise ValueError(
                f"field {field!r} must be {length} integers, got {header.dtype} {header.shape}"
            )
    return layout, (M, N)


def _sparse_rows(archive: Archive, layout: str, shape, start: int, stop: int):
    """Rows ``start:stop`` of a checked sparse layout (:func:`sparse_layout`): a csr_array.

    CSR reads only the rows' pointers, indices and data; CSC and COO read the whole
    matrix. Every index is checked against the shape before scipy sees it.
    """
    (M, N), count = shape, archive.header("data.npy").shape[0]
    stop = min(stop, M)
    start = min(start, stop)
    if layout == "csr":
        indptr = archive.read_array("indptr.npy", start, stop + 1)
        indptr = checked_pointers(indptr, count, start == 0, stop == M)
        first, last = int(indptr[0]), int(indptr[-1])
        data = archive.read_array("data.npy", first, last)
        indices = checked_indices(archive.read_array("indices.npy", first, last), N, "indices")
        return sparse.csr_array((data, indices, indptr - first), shape=(stop - start, N))
    data = archive.read_array("data.npy")
    if layout == "csc":
        indptr = checked_pointers(archive.read_array("indptr.npy"), count, True, True)
        indices = checked_indices(archive.read_array("indices.npy"), M, "indices")
        matrix = sparse.csc_array((data, indices, indptr), shape=(M, N))
    else:
        row = checked_indices(archive.read_array("row.npy"), M, "row")
        col = checked_indices(archive.read_array("col.npy"), N, "col")
        matrix = sparse.coo_array((data, (row, col)), shape=(M, N))
    return sparse.csr_array(matrix)[start:stop]


NAMES = ("row_names", "col_names")
"""Optional arrays of an ``.npz`` beside its matrix: the names of its rows (M unicode
strings) and of its columns (N)."""


def _names(archive: Archive, shape: tuple, start: int, stop: int | None) -> list:
    """The row names ``start:stop`` and the column names of ``shape``, None where absent.

    Each is checked before it is read: a 1-D array of unicode strings (no objects),
    one per row or column of a 2-D matrix.
    """
    names = []
    for field, length in zip(NAMES, shape[:2], strict=False):
        if f"{field}.npy" not in archive.names:
            names.append(None)
            continue
        header = archive.header(f"{field}.npy")
        if len(shape) != 2 or header.shape != (length,) or header.dtype.kind != "U":
            raise ValueError(
                f"field {field!r} must be {length} unicode strings (one per "
                f"{field.split('_')[0]} of a 2-D matrix of shape {shape}), got "
                f"{header.dtype} {header.shape}"
            )
        part = (start, stop) if field == "row_names" else (0, None)
        names.append(archive.read_array(f"{field}.npy", *part).astype(object))
    return names


def npz_rows(path: Path, start: int, stop: int | None):
    """Rows of an ``.npz``: of ``Y`` or its only array, or of a scipy.sparse matrix.

    With its arrays ``row_names`` or ``col_names`` (:data:`NAMES`), a DataFrame
    labelled with them: of the array, or sparse columns of the matrix (which
    :func:`bernmf.data.observed.as_observed` reads as a sparse matrix). Otherwise the
    ndarray, or a csr_array.
    """
    with Archive(path) as archive:
        layout = sparse_layout(archive)
        if layout is not None:
            rows = _sparse_rows(archive, *layout, start, np.inf if stop is None else stop)
            shape = layout[1]
        else:
            member = dense_member(archive)
            rows = archive.read_array(member, start, stop)
            shape = archive.header(member).shape
        index, columns = _names(archive, shape, start, stop)
    if index is None and columns is None:
        return rows
    if index is None:
        index = pd.RangeIndex(start, start + rows.shape[0])
    if sparse.issparse(rows):
        return pd.DataFrame.sparse.from_spmatrix(rows, index=index, columns=columns)
    return pd.DataFrame(rows, index=index, columns=columns, copy=False)
