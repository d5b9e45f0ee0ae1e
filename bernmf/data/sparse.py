"""The structure of a scipy.sparse matrix, checked before scipy reads it.

scipy trusts a matrix's arrays: a CSR matrix whose ``indptr`` was changed after it was
built (one entry set to 10**6) makes its conversions read and write outside their
arrays, and the process crashes (a segfault, a corrupted heap). So every sparse input
is checked here first, with the same checks whether its arrays come from a file
(:mod:`bernmf.data.files.npz`, the fields of ``scipy.sparse.save_npz``) or from memory
(:func:`checked_coo`, for :mod:`bernmf.data.observed`): pointers nondecreasing from 0 to
the number of entries, indices within the shape, every array of the length and dtype
its layout needs, and M x N within the memory budget (a fit holds the entries
densely). numpy only: scipy is imported when a matrix is converted.
"""

from __future__ import annotations

import numpy as np

from bernmf.data.budget import check_bytes

__all__ = ["check_dense_size", "checked_coo", "checked_indices", "checked_pointers"]


def checked_indices(array: np.ndarray, bound: int, field: str) -> np.ndarray:
    """``array`` (integers, shape (n,)) as int64 after checking it is in [0, bound)."""
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
    """Raise ValueError if M x N entries, held densely by a fit (1 byte each), exceed the budget."""
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


def _check_compressed(matrix, major: int, minor: int) -> None:
    """A CSR (major = rows) or CSC (major = columns) matrix's ``indptr`` and ``indices``."""
    data = _field(matrix, "data", kinds="biuf")
    indices = _field(matrix, "indices", len(data))
    checked_pointers(_field(matrix, "indptr", major + 1), len(data), True, True)
    checked_indices(indices, minor, "indices")


def _check_blocks(matrix, M: int, N: int) -> None:
    """A BSR matrix: blocks of R x C dividing the shape, pointers and indices over blocks."""
    data = np.asarray(matrix.data)
    if data.ndim != 3 or data.dtype.kind not in "biuf":
        raise ValueError(f"field 'data' must be blocks of numbers, got {data.dtype} {data.shape}")
    count, R, C = data.shape
    if R < 1 or C < 1 or M % R or N % C:
        raise ValueError(f"blocks of {R} x {C} do not divide the shape ({M}, {N})")
    checked_pointers(_field(matrix, "indptr", M // R + 1), count, True, True)
    checked_indices(_field(matrix, "indices", count), N // C, "indices")


def _check_lists(matrix, M: int) -> None:
    """A LIL matrix: one list of columns and one of values per row, of equal lengths."""
    rows, values = np.asarray(matrix.rows), np.asarray(matrix.data)
    if rows.shape != (M,) or values.shape != (M,) or rows.dtype.kind != "O":
        raise ValueError(f"fields 'rows' and 'data' must be {M} lists, got {rows.shape}")
    for i, (columns, data) in enumerate(zip(rows, values, strict=True)):
        if not (isinstance(columns, list) and isinstance(data, list)) or len(columns) != len(data):
            raise ValueError(f"row {i}'s lists of columns and of values differ in length")


def checked_coo(matrix, what: str):
    """The stored entries of a scipy.sparse matrix as a new ``coo_array``, checked first.

    Each layout's own arrays are checked before scipy converts it: CSR and CSC as a
    ``save_npz`` file's fields are (``indptr`` from 0 to the entries, nondecreasing,
    of M + 1 or N + 1 integers; ``indices`` as many integers as ``data``, within the
    shape), BSR likewise over its blocks, COO's ``coords``, LIL's lists; DOK and DIA,
    which scipy converts with numpy, after conversion. The coordinates of the result
    are checked against the shape in every case.

    Parameters
    ----------
    matrix : scipy.sparse matrix or array of shape (M, N), any layout
    what : str
        The argument, for the messages (``"Y"``, ``"mask"``).

    Returns
    -------
    scipy.sparse.coo_array of shape (M, N)

    Raises
    ------
    ValueError
        A shape that is not 2 integers >= 0 or over the memory budget held densely,
        or an inconsistent array; the message names ``what``, the layout and the field.
    """
    from scipy.sparse import coo_array

    layout = str(getattr(matrix, "format", "?"))
    shape = tuple(matrix.shape)
    if len(shape) != 2 or not all(isinstance(n, int | np.integer) and n >= 0 for n in shape):
        raise ValueError(f"{what} must have a shape of 2 integers >= 0, got {shape}")
    M, N = (int(n) for n in shape)
    check_dense_size(M, N, f"{what} of shape")
    try:
        if layout in ("csr", "csc"):
            _check_compressed(matrix, *((M, N) if layout == "csr" else (N, M)))
        elif layout == "bsr":
            _check_blocks(matrix, M, N)
        elif layout == "coo":
            count = len(_field(matrix, "data", kinds="biuf"))
            coords = tuple(matrix.coords)
            if len(coords) != 2:
                raise ValueError(f"field 'coords' must hold 2 arrays, got {len(coords)}")
            for name, index, bound in zip(("row", "col"), coords, (M, N), strict=True):
                checked_indices(_array(index, name, count), bound, name)
        if layout == "lil":  # built here: scipy's conversion of lists is C code, unchecked
            _check_lists(matrix, M)
            rows = np.repeat(np.arange(M), [len(columns) for columns in matrix.rows])
            columns = [c for row in matrix.rows for c in row]
            values = [v for row in matrix.data for v in row]
            if not all(
                isinstance(c, int | np.integer) and not isinstance(c, bool) for c in columns
            ):
                raise ValueError("field 'rows' must hold lists of integer column indices")
            if not all(isinstance(v, int | float | np.number) for v in values):
                raise ValueError("field 'data' must hold lists of numbers")
            columns = checked_indices(np.array(columns, dtype=np.int64), N, "rows")
            stored = coo_array((np.array(values, dtype=float), (rows, columns)), shape=(M, N))
        else:
            stored = coo_array(matrix, copy=True)
        count = len(_field(stored, "data", kinds="biuf"))
        for name, index, bound in zip(("row", "col"), stored.coords, (M, N), strict=True):
            checked_indices(_array(index, name, count), bound, name)
    except (ValueError, TypeError, IndexError, OverflowError) as error:
        raise ValueError(f"{what}, a sparse {layout} matrix: {error}") from None
    return stored
