"""Reading a user's binary table from a CSV file, with or without names: :func:`read_csv`;
and writing bernmf's CSV outputs: :func:`write_csv`.

The layout (a header line, a column of row names) is told from the first lines, the
file parsed once by pandas' C parser, and read again cell by cell only to explain a
refusal. :func:`binary_frame` checks the cells of any table (the ``.rda`` files of
:mod:`bernmf.data.datasets` too). ``bernmf.data.datasets.read_csv`` is this :func:`read_csv`.
"""

from __future__ import annotations

import contextlib
import csv
import itertools

import numpy as np
import pandas as pd

from bernmf._warnings import warn
from bernmf.data.files import streams

__all__ = [
    "COMPRESSIONS", "FORMULA_STARTS", "HEAD_ROWS", "MISSING", "binary_frame", "read_csv",
    "write_csv",
]  # fmt: skip

COMPRESSIONS = streams.COMPRESSIONS
"""Suffixes of the compressed files that :func:`read_csv` reads (see :mod:`.streams`)."""


def binary_frame(frame: pd.DataFrame, source: str, values=(0, 1), layout: str = "") -> pd.DataFrame:
    """Check that ``frame`` holds only ``values`` and NaN; int64 without NaN, float64 with.

    ``layout`` (how the file was read) is added to the message of an error.
    """
    allowed = ", ".join(str(v) for v in values)
    cells = frame.to_numpy()
    numbers = _numbers(cells)
    non_numeric = np.isnan(numbers) & ~pd.isna(cells)
    if non_numeric.any():
        examples = pd.unique(cells[non_numeric])[:5].tolist()
        raise ValueError(f"{source}: cells must be {allowed} or empty; found {examples}{layout}")
    bad = ~np.isnan(numbers) & ~np.isin(numbers, values)
    if bad.any():
        examples = np.unique(numbers[bad])[:5].tolist()
        raise ValueError(f"{source}: cells must be {allowed} or empty; found {examples}{layout}")
    dtype = float if np.isnan(numbers).any() else np.int64
    return pd.DataFrame(numbers.astype(dtype), index=frame.index, columns=frame.columns)


def _numbers(cells: np.ndarray) -> np.ndarray:
    """``cells`` (any objects, NaN or None when missing) as floats, NaN where not a number.

    Cells of a numeric dtype are cast, without a Python object a cell."""
    if cells.dtype.kind in "biuf":
        return cells.astype(float)
    flat = pd.Series(np.ravel(cells), dtype=object)
    return pd.to_numeric(flat, errors="coerce").to_numpy(float).reshape(np.shape(cells))


def _layout(first_line, first_column, values, source: str) -> tuple[bool, bool]:
    """Whether the first line of a CSV is a header, and whether its first column holds row
    names; the rule of :func:`read_csv`, from those cells as strings (the first column
    from the first line down: the corner cell is in both)."""
    line, column = np.asarray(first_line, object), np.asarray(first_column, object)
    kinds = []
    for cells in (line, column):
        empty = np.isin(cells, MISSING)
        numbers = _numbers(np.where(empty, None, cells))
        text = ~empty & np.isnan(numbers)
        kinds.append((empty, text, ~empty & ~text, ~empty & ~np.isin(numbers, values)))
    (empty, text_line, number_line, other_line), (_, text_column, number_column, other_column) = (
        kinds
    )
    if line.size == 1:  # one column: data, under a header if it starts with text
        return bool(text_line[0]), False
    corner = bool(empty[0] and (other_line[1:].any() or other_column[1:].any()))
    header = corner or bool(text_line[1:].any())
    names = corner or bool(text_column[int(header) :].any())
    for found, where, text, number in (
        (header, "first line", text_line[1:], number_line[1:]),
        (names, "first column", text_column[int(header) :], number_column[int(header) :]),
    ):
        if found and not corner and text.any() and number.any():
            raise ValueError(
                f"{source}: the {where} mixes names and numbers, so it is neither names nor "
                "data; give every name, or none (see bernmf.data.datasets.read_csv)"
            )
    return header, names


def _head(path) -> tuple[list[str], list[str], int]:
    """The first line's cells, the first column's first :data:`HEAD_ROWS` cells, and the
    most cells of those lines, read without parsing the rest of the lines."""
    first_column, first_line, width = _first_column(path, HEAD_ROWS)
    if not first_column:
        raise ValueError(f"{path}: the file is empty")
    return first_line, first_column, width


def _first_column(path, rows: int | None = None) -> tuple[list[str], list[str], int]:
    """The first cell of each line (of the first ``rows``), the first line's cells, and
    the most cells of a line (counting its commas, a quoted one too).

    Only a line whose first cell is quoted is parsed in full (by :mod:`csv`).
    """
    with _opened(path) as handle:
        lines = itertools.islice(handle, rows)
        first = next(lines, None)
        if first is None:
            return [], [], 0
        first_line = next(csv.reader([first]), [""])
        column, width = [first_line[0] if first_line else ""], first.count(",") + 1
        for line in lines:
            cell = line.split(",", 1)[0].rstrip("\r\n")
            column.append(next(csv.reader([line]))[0] if cell.startswith('"') else cell)
            width = max(width, line.count(",") + 1)
    return column, first_line, width


@contextlib.contextmanager
def _opened(path, cost: int = streams.PARSE_COST, binary: bool = False, reserve: int = 0):
    """A path opened by the bounded reader (:func:`~bernmf.data.files.streams.open_text`:
    decompressed by its suffix, at most ``(memory_limit() - reserve) / cost`` bytes of
    text), or a file given, from its start."""
    if hasattr(path, "read"):
        if hasattr(path, "seek"):
            path.seek(0)
        yield path
    else:
        with (streams.open_bytes if binary else streams.open_text)(path, cost, reserve) as handle:
            yield handle


MISSING = ("", "NA")
"""The spellings of a missing cell in a CSV: an empty cell and ``NA`` (R's ``write.csv``)."""

HEAD_ROWS = 64
"""Lines of a CSV from which :func:`read_csv` tells its layout before the whole read."""


def read_csv(path, values=(0, 1)) -> pd.DataFrame:
    """Read a user's binary table from a CSV file, with or without names.

    Cells are 0 or 1 (or ``values``); an empty cell or ``NA`` (:data:`MISSING`, and
    no other spelling: ``null`` or ``NaN`` is refused) is a missing value and
    becomes NaN, which every engine treats as not observed. Names are never missing:
    a row or column named ``NA`` keeps its name. The file may be compressed
    (:data:`COMPRESSIONS`: ``data.csv.gz``). The layout is detected, with a cell
    counted as *text* when it is not missing and not a number:

    * the first line is a header of column names when one of its cells after the
      first is text;
    * the first column holds row names when one of its cells below the header (all
      of them without a header) is text;
    * both, when the first cell is empty and the rest of the first line or of the
      first column holds anything but empty cells and ``values`` (the layout that R's
      ``write.csv`` and pandas' ``to_csv`` write, numbered names included).

    So numbers are never names unless the first cell is empty: a first line or column
    of numbers other than ``values`` (years as column names, say) is read as data and
    refused, the message saying how the file was read; one that mixes text and numbers
    (a name missing, or a stray word in the data) is refused; a first line or column of
    names that are all 0 or 1 cannot be told from data and is read as data. A file of
    one column is data, under a header when its first cell is text. Names are
    kept as strings; an axis without names gets pandas' default labels 0, 1, ...,
    which a mask aligns by position (:func:`bernmf.data.observed.as_observed`).

    The layout is told from the first :data:`HEAD_ROWS` lines; the whole file is then
    parsed once as numbers by pandas' C parser and checked, so that reading costs
    about what ``pandas.read_csv`` does (``benchmarks/csv_read.py``). A file that
    fails there (text in the data, a name far down the first column) is read again
    cell by cell as text, for the rule above and a message that names the cells.

    Parameters
    ----------
    path : str, path-like or text file
    values : tuple of int, default (0, 1)
        The values a cell may hold (``(0, 1, 2)`` for split codes).

    Returns
    -------
    pandas.DataFrame
        int64 when nothing is missing, float64 with NaN otherwise.

    Raises
    ------
    ValueError
        If a cell of the data is anything other than ``values`` or missing, or the
        file has no data cell; if the file is damaged (compressed data, UTF-8), or its
        text, columns or a line would take more than the memory limit to read (the
        path is read by :mod:`~bernmf.data.files.streams`, which bounds them), the
        message naming the file and the limit.
    """
    with streams.untrusted(path):
        try:
            return _read_numbers(path, values)
        except streams.FileRefused:
            raise
        except ValueError as error:  # text in the data, or a layout the first lines did not show
            refusal = error
        try:
            return _read_cells(path, values)
        except streams.OverBudget as error:
            detail = str(error).removeprefix(f"{path}: ")
            raise ValueError(f"{refusal} (its cells are not named: {detail})") from None


def _text(path) -> np.ndarray:
    """Cells of a CSV as an object array of strings, none missing (empty cells are ``""``)."""
    reserve = streams.column_reserve(path, _first_column(path, 1)[2], streams.CELLS_COLUMN_COST)
    with _opened(path, streams.CELLS_COST, binary=True, reserve=reserve) as source:
        cells = pd.read_csv(source, header=None, dtype=object, na_filter=False, encoding="utf-8")
    return cells.to_numpy(object)


def _describe(header: bool, names: bool) -> str:
    return (
        f" (read with {'a' if header else 'no'} header line and "
        f"{'' if names else 'no '}row names; see bernmf.data.datasets.read_csv)"
    )


def _read_numbers(path, values) -> pd.DataFrame:
    """:func:`read_csv` by one numeric parse after a layout told from the first lines.

    ValueError if the file is not numbers in that layout, or a cell is not a value.
    """
    first_line, first_column, width = _head(path)
    header, names = _layout(first_line, first_column, values, str(path))
    reserve = streams.column_reserve(path, width, streams.PARSE_COLUMN_COST)
    with _opened(path, binary=True, reserve=reserve) as source:
        frame = pd.read_csv(
            source,
            header=None,
            skiprows=int(header),
            index_col=0 if names else None,
            keep_default_na=False,
            na_values=list(MISSING),
            encoding="utf-8",
            engine="c",
        )  # fmt: skip  (dtypes inferred as pandas.read_csv does: the fastest; names apart)
    if frame.size == 0 or frame.shape[1] != len(first_line) - int(names):
        raise ValueError(f"{path}: no data cell, or lines of different lengths")
    kinds = {dtype.kind for dtype in frame.dtypes.unique()}
    if not kinds <= set("biuf"):
        raise ValueError(f"{path}: a cell is not a number")
    length = len(frame)
    array = frame.to_numpy(np.int64 if kinds <= set("iu") else np.float64)  # no NaN: integers
    del frame  # one (M, N) array from here on
    allowed = np.isnan(array) if array.dtype.kind == "f" else np.zeros(array.shape, bool)
    missing = bool(allowed.any())
    for value in values:
        allowed |= array == value
    if not allowed.all():
        raise ValueError(f"{path}: a cell is not among {values}")
    del allowed
    index = pd.RangeIndex(length)
    if names:  # as written: "007" and "NA" are names, not numbers or missing
        index = np.asarray(_first_column(path)[0][int(header) :], object)
        if len(index) != length:
            raise ValueError(f"{path}: a line break inside a name")
    columns = np.asarray(first_line[int(names) :], object) if header else None
    data = array if array.dtype.kind == "i" or missing else array.astype(np.int64)
    return pd.DataFrame(data, index=index, columns=columns, copy=False)


def _read_cells(path, values) -> pd.DataFrame:
    """:func:`read_csv` cell by cell as text: slower, and every refusal explained."""
    raw = _text(path)  # everything as text, so that names such as "1" or "007" stay strings
    header, names = _layout(raw[0], raw[:, 0], values, str(path))
    cells = raw[int(header) :, int(names) :]
    if cells.size == 0:
        raise ValueError(f"{path}: no data cell (header {header}, row names {names})")
    frame = pd.DataFrame(
        np.where(np.isin(cells, MISSING), None, cells),
        index=raw[int(header) :, 0] if names else None,
        columns=raw[0, int(names) :] if header else None,
    )
    return binary_frame(frame, str(path), values, _describe(header, names))


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""The first characters that make a spreadsheet run a cell as a formula (OWASP's "CSV
injection"): ``=cmd|' /C calc'!A0`` in a label would run a command."""


def write_csv(
    frame: pd.DataFrame, path, *, index: bool = True, header: bool = True, float_format=None
) -> None:
    """Write ``frame`` to ``path`` as CSV: the one writer of bernmf's CSV outputs.

    Every text cell (labels, names, the header) is written as it is and quoted, as R's
    ``write.csv`` writes text: so pandas (``pd.read_csv``) and R read it back exactly, and
    no cell starts with one of :data:`FORMULA_STARTS` outside quotes, which importers
    that keep quoted fields as text (LibreOffice's "format quoted field as text") read
    as text. Excel and Google Sheets run a quoted formula too when they open a CSV
    directly; a text cell that would be one (it starts with one of
    :data:`FORMULA_STARTS` and is not a number such as ``-1``) is not rewritten, which
    would change the labels that pandas reads back, but warned about (once per file,
    with their count and one of them): open such a file through the spreadsheet's
    import, its columns as text.

    Parameters
    ----------
    frame : pandas.DataFrame
    path : str, path-like or text stream
        A stream takes the rows of a table written in blocks (``header`` on the first).
    index : bool, default True
        Write the row labels as the first column.
    header : bool, default True
        Write the column labels as the first line.
    float_format : str, optional
        As pandas' (``"%.6g"``: six significant digits), default every digit.
    """
    formulas = _formula_cells(frame, index)
    if len(formulas):
        warn(
            f"{path.name if hasattr(path, 'write') else path}: {len(formulas)} text cell(s) "
            f"start with =, +, -, @, a tab or a carriage return, e.g. {formulas[0]!r:.60}; they "
            "are written as they are, quoted, but Excel and Google Sheets may run them as "
            "formulas: import the file with its columns as text"
        )
    frame.to_csv(
        path, index=index, header=header, quoting=csv.QUOTE_NONNUMERIC, float_format=float_format
    )


def _formula_cells(frame: pd.DataFrame, index: bool) -> list[str]:
    """The text cells of ``frame`` (its labels too) that a spreadsheet would run as formulas."""
    texts = [frame.columns, *([frame.index] if index else [])]
    texts += [column for _, column in frame.items() if not pd.api.types.is_numeric_dtype(column)]
    found = []
    for cells in texts:
        cells = [p for c in cells for p in (c if isinstance(c, tuple) else (c,))]  # MultiIndex
        cells = pd.Series([cell for cell in cells if isinstance(cell, str)], dtype=object)
        starts = cells[cells.str.startswith(FORMULA_STARTS)]
        found += starts[pd.to_numeric(starts, errors="coerce").isna()].tolist()
    return found
