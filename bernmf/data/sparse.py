"""The structure of a scipy.sparse matrix, checked before scipy reads it.

scipy trusts a matrix's arrays: a CSR matrix whose ``indptr`` was changed after it was
built (one entry set to 10**6) makes its conversions read and write outside their
arrays, and the process crashes (a segfault, a corrupted heap). So every sparse input
is checked here first, with the same checks whether its arrays come from a file
(:mod:`bernmf.data.files.npz`, the fields of ``scipy.sparse.save_npz``) or from memory
(:func:`checked_coo`, for :mod:`bernmf.data.observed`): pointers nondecreasing from 0 to
the number of entries, indices within the shape, every array of the length and dtype
its layout needs, and M x N within the memory limit (a fit holds the entries
densely). numpy only: a matrix in memory, of any layout, has its entries computed
here from its checked arrays, and scipy is given only those (no scipy conversion of a
matrix runs before its arrays are checked).
"""

from __future__ import annotations

import numpy as np

from bernmf.data.memory import check_bytes

__all__ = ["check_dense_size", "checked_coo", "checked_indices", "checked_pointers"]


def checked_indices(array: np.ndarray, bound: int, field: str) -> np.ndarray:
    """``array`` (integers, shape (n,)) after checking it is in [0, bound): itself when
    signed (no copy: an index array is as long as the entries), else as int64."""
    if array.dtype.kind == "u":
        array = array.astype(np.int64)  # an unsigned index past int64 becomes negative: refused
    if array.size and (array.min() < 0 or array.max() >= bound):
        bad = array[(array < 0) | (array >= bound)][0]
        raise ValueError(f"field {field!r} holds {bad}, outside [0, {bound})")
    return array


def checked_pointers(indptr: np.ndarray, count: int, first: bool, last: bool) -> np.ndarray:
    """Pointers (integers, shape (n,)) as int64, nondecreasing in [0, count]; 0 at the
    ``first``, count at the ``last`` (``count``: the entries of ``data``)."""
    indptr = indptr.astype(np.int64)
    bad = indptr.size and (indptr.min() < 0 or indptr.max() > count or (np.diff(indptr) < 0).any())
    if bad or (first and indptr[0] != 0) or (last and indptr[-1] != count):
        raise ValueError(
            f"field 'indptr' must be nondecreasing from 0 to {count} (the entries of 'data')"
        )
    return indptr


def check_dense_size(M: int, N: int, what: str) -> None:
    """Raise ValueError if M x N entries, held densely by a fit (1 byte each), exceed the limit."""
    check_bytes(M * N, f"{what} ({M}, {N}), held densely by a fit (1 byte an entry)")


def _field(matrix, name: str, length: int | None = None, kinds: str = "iu") -> np.ndarray:
    """The array ``matrix.<name>``, checked by :func:`_array`."""
    return _array(getattr(matrix, name), name, length, kinds)


def _array(value, name: str, length: int | None = None, kinds: str = "iu") -> np.ndarray:
    """``value`` as an array, checked: 1-D, of ``length`` (if given), of dtype ``kinds``."""
    array = np.asarray(value)
    if array.ndim != 1 or array.dtype.kind not in kinds or length not in (None, len(array)):
        want = "integers" if kinds == "iu" else "numbers"
        size = f"{length} " if length is not None else ""
        raise ValueError(
            f"field {name!r} must be {size}{want} in one dimension, got {array.dtype} {array.shape}"
        )
    return array


def _compressed(matrix, M: int, N: int, by_rows: bool) -> tuple[np.ndarray, ...]:
    """A CSR (``by_rows``) or CSC matrix's entries: ``indptr`` and ``indices`` checked."""
    major, minor = (M, N) if by_rows else (N, M)
    data = _field(matrix, "data", kinds="biuf")
    indices = _field(matrix, "indices", len(data))
    indptr = checked_pointers(_field(matrix, "indptr", major + 1), len(data), True, True)
    indices = checked_indices(indices, minor, "indices").astype(_index_type(M, N))
    majors = np.repeat(np.arange(major, dtype=indices.dtype), np.diff(indptr))
    return (data.copy(), majors, indices) if by_rows else (data.copy(), indices, majors)


def _index_type(M: int, N: int) -> type:
    """The integers that index an M x N matrix, as small as they may be (as scipy's)."""
    return np.int32 if max(M, N) < 2**31 else np.int64


def _blocks(matrix, M: int, N: int) -> tuple[np.ndarray, ...]:
    """A BSR matrix's entries: blocks of R x C dividing the shape, pointers and indices
    over blocks checked."""
    data = np.asarray(matrix.data)
    if data.ndim != 3 or data.dtype.kind not in "biuf":
        raise ValueError(f"field 'data' must be blocks of numbers, got {data.dtype} {data.shape}")
    count, R, C = data.shape
    if R < 1 or C < 1 or M % R or N % C:
        raise ValueError(f"blocks of {R} x {C} do not divide the shape ({M}, {N})")
    indptr = checked_pointers(_field(matrix, "indptr", M // R + 1), count, True, True)
    indices = checked_indices(_field(matrix, "indices", count), N // C, "indices")
    first_rows = R * np.repeat(np.arange(M // R), np.diff(indptr))
    rows = first_rows[:, None, None] + np.arange(R)[None, :, None]  # (count, R, 1)
    columns = C * indices[:, None, None] + np.arange(C)[None, None, :]  # (count, 1, C)
    rows, columns = np.broadcast_arrays(rows, columns)
    return data.reshape(-1).copy(), rows.reshape(-1), columns.reshape(-1)


def _coordinates(matrix, M: int, N: int) -> tuple[np.ndarray, ...]:
    """A COO matrix's entries: ``coords``, two arrays of indices as long as ``data``."""
    data = _field(matrix, "data", kinds="biuf")
    coords = tuple(matrix.coords)
    if len(coords) != 2:
        raise ValueError(f"field 'coords' must hold 2 arrays, got {len(coords)}")
    rows, columns = (
        checked_indices(_array(index, name, len(data)), bound, name).astype(_index_type(M, N))
        for name, index, bound in zip(("row", "col"), coords, (M, N), strict=True)
    )
    return data.copy(), rows, columns


def _lists(matrix, M: int, N: int) -> tuple[np.ndarray, ...]:
    """A LIL matrix's entries: one list of columns and one of values per row, of equal
    lengths, holding integers and numbers."""
    rows, data = np.asarray(matrix.rows), np.asarray(matrix.data)
    if rows.shape != (M,) or data.shape != (M,) or rows.dtype.kind != "O":
        raise ValueError(f"fields 'rows' and 'data' must be {M} lists, got {rows.shape}")
    for i, (columns, values) in enumerate(zip(rows, data, strict=True)):
        lists = isinstance(columns, list) and isinstance(values, list)
        if not lists or len(columns) != len(values):
            raise ValueError(f"row {i}'s lists of columns and of values differ in length")
    columns = [c for row in rows for c in row]
    if not all(_is_integer(c) for c in columns):
        raise ValueError("field 'rows' must hold lists of integer column indices")
    values = _numbers([v for row in data for v in row], "data")
    columns = checked_indices(np.array(columns, dtype=np.int64), N, "rows")
    return values, np.repeat(np.arange(M), [len(row) for row in rows]), columns


def _keys(matrix, M: int, N: int) -> tuple[np.ndarray, ...]:
    """A DOK matrix's entries: keys of 2 integer indices within the shape, number values."""
    items = list(matrix.items())
    if not all(isinstance(key, tuple) and len(key) == 2 for key, _ in items):
        raise ValueError("its keys must be (row, column) pairs")
    if not all(_is_integer(i) and _is_integer(j) for (i, j), _ in items):
        raise ValueError("its keys must be pairs of integers")
    values = _numbers([value for _, value in items], "values")
    keys = np.array([key for key, _ in items], dtype=np.int64).reshape(-1, 2)
    return values, checked_indices(keys[:, 0], M, "row"), checked_indices(keys[:, 1], N, "col")


def _diagonals(matrix, M: int, N: int) -> tuple[np.ndarray, ...]:
    """A DIA matrix's entries not 0: one row of ``data`` per entry of ``offsets``, distinct.

    ``data[k, j]`` is the entry (j - offsets[k], j), as scipy reads it; an offset outside
    (-M, N) holds no entry (offsets are clipped to [-M, N] before any arithmetic).
    """
    data = np.asarray(matrix.data)
    if data.ndim != 2 or data.dtype.kind not in "biuf":
        got = f"{data.dtype} {data.shape}"
        raise ValueError(f"field 'data' must be numbers in 2 dimensions, got {got}")
    offsets = _field(matrix, "offsets", len(data))
    if len(np.unique(offsets)) != len(offsets):
        raise ValueError("field 'offsets' must hold distinct diagonals")
    if offsets.dtype.kind == "u":  # past int64 it would wrap to a negative offset
        offsets = np.minimum(offsets, N)
    offsets = np.clip(offsets.astype(np.int64), -M, N)
    values = data[:, :N]
    columns = np.arange(values.shape[1])
    inside = (columns >= np.maximum(offsets, 0)[:, None]) & (columns < (M + offsets)[:, None])
    diagonal, column = np.nonzero(inside & (values != 0))  # scipy leaves the zeros out too
    return values[diagonal, column], column - offsets[diagonal], column


def _is_integer(value) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def _numbers(values: list, field: str) -> np.ndarray:
    """``values`` (Python or numpy scalars) as float64, after checking they are numbers."""
    if not all(isinstance(v, int | float | np.integer | np.floating | np.bool_) for v in values):
        raise ValueError(f"field {field!r} must hold numbers")
    return np.array(values, dtype=float)


_ENTRIES = {
    "csr": lambda matrix, M, N: _compressed(matrix, M, N, by_rows=True),
    "csc": lambda matrix, M, N: _compressed(matrix, M, N, by_rows=False),
    "bsr": _blocks,
    "coo": _coordinates,
    "lil": _lists,
    "dok": _keys,
    "dia": _diagonals,
}
"""Each layout's stored entries ``(values, rows, columns)``, read with numpy from its
own arrays after checking them."""


def checked_coo(matrix, what: str):
    """The stored entries of a scipy.sparse matrix as a new ``coo_array``, checked first.

    scipy is given only arrays checked here: each layout's own arrays are checked and
    its entries computed with numpy (no conversion of scipy's, whose C code trusts the
    arrays: a DIA matrix whose ``offsets`` no longer match its ``data`` corrupted the
    heap in ``dia_tocsr``). CSR and CSC as a ``save_npz`` file's fields are (``indptr``
    from 0 to the entries, nondecreasing, of M + 1 or N + 1 integers; ``indices`` as
    many integers as ``data``, within the shape), BSR likewise over its blocks, COO's
    ``coords``, LIL's lists, DOK's keys, DIA's ``offsets`` (one per row of ``data``,
    distinct). Values must be numbers; which numbers is the caller's check.

    Parameters
    ----------
    matrix : scipy.sparse matrix or array of shape (M, N), any layout
    what : str
        The argument, for the messages (``"Y"``, ``"mask"``).

    Returns
    -------
    scipy.sparse.coo_array of shape (M, N)
        Sharing no array with ``matrix``; a DIA matrix's zeros are left out.

    Raises
    ------
    ValueError
        A shape that is not 2 integers >= 0 or over the memory limit held densely,
        an unknown layout or an inconsistent array; the message names ``what``, the
        layout and the field.
    """
    from scipy.sparse import coo_array

    layout = str(getattr(matrix, "format", "?"))
    shape = tuple(matrix.shape)
    if len(shape) != 2 or not all(isinstance(n, int | np.integer) and n >= 0 for n in shape):
        raise ValueError(f"{what} must have a shape of 2 integers >= 0, got {shape}")
    M, N = (int(n) for n in shape)
    check_dense_size(M, N, f"{what} of shape")
    if layout not in _ENTRIES:
        raise ValueError(f"{what}, a sparse {layout} matrix: not one of {sorted(_ENTRIES)}")
    try:
        values, rows, columns = _ENTRIES[layout](matrix, M, N)
    except (ValueError, TypeError, IndexError, OverflowError) as error:
        raise ValueError(f"{what}, a sparse {layout} matrix: {error}") from None
    entries = coo_array((values, (rows, columns)), shape=(M, N))
    entries.has_canonical_format = _in_order(rows, columns)  # then nothing to sort or sum
    return entries


def _in_order(rows: np.ndarray, columns: np.ndarray) -> bool:
    """Whether the entries are sorted by row, then column, with no two at one place (a
    CSR matrix's usually are): scipy's canonical COO, whose duplicates need no summing."""
    if len(rows) < 2:
        return True
    later_row = rows[1:] > rows[:-1]
    return bool((later_row | ((rows[1:] == rows[:-1]) & (columns[1:] > columns[:-1]))).all())
