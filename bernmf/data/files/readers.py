"""Reading a data matrix or a mask from a file: CSV, Parquet or ``.npz``.

The command line reads its DATA, ``--mask``, ``--split`` and ``--row-groups`` files here. Saved fits
are read by :mod:`bernmf.results.loading`; the paper's datasets by :mod:`bernmf.data.datasets`.
"""

from __future__ import annotations

import csv
import io
import itertools
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import sparse

from bernmf.data import datasets
from bernmf.data.files.archive import Archive, read_data, read_header
from bernmf.data.files.csv_table import MISSING
from bernmf.data.files.npz import dense_member, npz_rows, sparse_layout
from bernmf.data.files.streams import PARSE_COLUMN_COST, column_reserve, open_text, untrusted
from bernmf.data.memory import check_bytes
from bernmf.data.observed import aligned, is_dataframe
from bernmf.data.split import SPLIT_CODES, Split

__all__ = [
    "count_rows", "read_codes", "read_groups", "read_mask", "read_matrix", "read_rows",
    "rows_of",
]  # fmt: skip


def _format(path: Path) -> str:
    """The format suffix of ``path``, lower case: ``".csv"`` also for ``data.csv.gz``."""
    suffixes = [s.lower() for s in path.suffixes[-2:]]
    if len(suffixes) == 2 and suffixes[0] == ".csv" and suffixes[1] in datasets.COMPRESSIONS:
        return ".csv"
    return path.suffix.lower()


def _compressed(path: Path) -> bool:
    return path.suffix.lower() in datasets.COMPRESSIONS


def read_matrix(path, values=(0, 1)) -> pd.DataFrame | np.ndarray | sparse.csr_array:
    """Read a matrix from a file.

    Parameters
    ----------
    path : str or Path
        CSV (with or without a header line and a column of row names, empty cells
        missing; see :func:`bernmf.data.datasets.read_csv` for how the layout is told),
        also compressed (``.csv.gz``, ``.csv.bz2``, ``.csv.xz``, ``.csv.zip``,
        ``.csv.zst``); Parquet (``.parquet``, ``.pq``; read with pyarrow, the index
        pandas wrote kept) or ``.npz`` (the array ``Y``, or its only array; or a
        scipy.sparse CSR, CSC or COO matrix of ``scipy.sparse.save_npz``, the ones of a
        mostly-zero matrix, read as a ``csr_array``). The file is untrusted: its
        structure (headers, sparse indices against the shape, declared sizes against
        its size and the memory limit) is checked before anything is converted or
        allocated.
    values : tuple of int, default (0, 1)
        The values a CSV cell may hold (other formats are checked by their user).

    Returns
    -------
    DataFrame, ndarray or scipy.sparse.csr_array of shape (M, N)

    Raises
    ------
    FileNotFoundError, ValueError
        For a missing file, another suffix, an ``.npz`` without a single or ``Y``
        array, or a malformed file (the message names the file and the field).
    ImportError
        For a Parquet file without pyarrow installed.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no data file {path}")
    suffix = _format(path)
    with untrusted(path):
        if suffix == ".csv":
            return datasets.read_csv(path, values)
        if suffix in (".parquet", ".pq"):
            return _parquet_rows(path, 0, None)
        if suffix == ".npz":
            return npz_rows(path, 0, None)
    raise ValueError(
        f"{path}: DATA must be .csv (or .csv.gz, .csv.bz2, .csv.xz, .csv.zip, .csv.zst), "
        f".parquet or .npz, got {''.join(path.suffixes) or 'no suffix'!r}"
    )


def _dense(values):
    """A sparse matrix as an ndarray (its size was bounded when read); anything else as is."""
    return values.toarray() if sparse.issparse(values) else values


def read_mask(path, shape) -> pd.DataFrame | np.ndarray:
    """Read a mask in any :func:`read_matrix` format: 1/True = observed (training), 0 = not.

    Returns a bool DataFrame with the file's labels (which :func:`bernmf.fit` aligns
    to a labelled DATA's, see :func:`bernmf.data.observed.as_observed`) or a bool array, of
    ``shape``; ValueError for another shape or values other than 0/1.
    """
    values = _dense(read_matrix(path))
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
    are (:func:`bernmf.data.observed.aligned`).

    Raises
    ------
    ValueError
        Codes other than 0, 1, 2 (missing included), another shape than Y's, or
        labels that differ from Y's.
    """
    codes = _dense(read_matrix(path, values=SPLIT_CODES))
    if np.shape(codes) != np.shape(Y):
        raise ValueError(
            f"the split {path} has shape {np.shape(codes)} but DATA has shape {np.shape(Y)}"
        )
    codes = aligned(codes, (Y.index, Y.columns) if is_dataframe(Y) else None, f"split {path}")
    try:
        return Split.from_codes(codes.to_numpy() if isinstance(codes, pd.DataFrame) else codes)
    except ValueError as error:
        raise ValueError(f"the split {path}: {error}") from None


def read_groups(path, rows) -> pd.Series:
    """Read a CSV of row label -> group (``bernmf fit --row-groups``): a header line, then a
    line of two cells per row, its label as DATA's file writes it and its group.

    Cells are read as written (``"007"`` stays ``"007"``); an empty group cell or ``NA``
    (a missing cell, as in DATA) leaves its row without a group; blank lines are skipped.
    The file may be compressed (``.csv.gz``, ...) and is read within the memory limit.

    Parameters
    ----------
    path : str or Path
    rows : collection of str
        DATA's row labels as written: a first line that names one is refused, as a file
        without its header line (whose row would otherwise go unseen).

    Returns
    -------
    pandas.Series of object
        Indexed by the labels (named as the header's first cell), the groups as values
        (None for none; named as its second cell), in the file's order.

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    ValueError
        A line of other than two cells (naming it), a first line that names a row, no
        line after the header; a damaged file. The message names the file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no row groups file {path}")
    with untrusted(path), open_text(path) as text:
        reader = csv.reader(text)
        lines = [(reader.line_num, cells) for cells in reader if cells]
    wrong = next(((n, cells) for n, cells in lines if len(cells) != 2), None)
    if wrong is not None:
        raise ValueError(
            f"{path}: line {wrong[0]} has {len(wrong[1])} cell(s); a row groups file has two "
            "a line: a row's label and its group"
        )
    if not lines or lines[0][1][0] in set(rows):
        named = f"names the row {lines[0][1][0]!r}" if lines else "is empty"
        raise ValueError(
            f"{path}: the file {named}: it starts with a header line (such as row,group), "
            "then a line per row"
        )
    if len(lines) == 1:
        raise ValueError(f"{path}: no line after the header line")
    (label, group), body = lines[0][1], [cells for _, cells in lines[1:]]
    return pd.Series(
        [None if cells[1] in MISSING else cells[1] for cells in body],
        index=pd.Index([cells[0] for cells in body], dtype=object, name=label),
        dtype=object,
        name=group,
    )


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


def count_rows(path) -> int:
    """The rows M of a :func:`read_rows` file, read from its header where it has one.

    ``.npy`` and ``.npz`` (dense or scipy.sparse) from their headers; CSV by counting
    its lines (a compressed CSV by reading it); Parquet from its metadata.

    Raises
    ------
    FileNotFoundError, ValueError
        A missing file; a malformed one (the message names the file and the field).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no data file {path}")
    if _compressed(path) and _format(path) == ".csv":
        return len(read_matrix(path))
    suffix = path.suffix.lower()
    with untrusted(path):
        if suffix == ".npy":
            with open(path, "rb") as file:
                return _leading(read_header(file, path.stat().st_size).shape, "the array")
        if suffix == ".npz":
            with Archive(path) as archive:
                layout = sparse_layout(archive)
                if layout is not None:
                    return layout[1][0]
                return _leading(archive.header(dense_member(archive)).shape, "the array")
        if suffix == ".csv":
            with open_text(path, cost=None) as lines:  # one line at a time
                return sum(1 for _ in lines) - len(_csv_header(path)[0])
        if suffix in (".parquet", ".pq"):
            with _parquet_file(path) as file:
                return file.metadata.num_rows
    return len(read_rows(path, 0, np.iinfo(np.int64).max))


def _leading(shape: tuple, what: str) -> int:
    """The first dimension of ``shape``; ValueError for a 0-d array."""
    if not shape:
        raise ValueError(f"{what} is 0-dimensional: it has no rows")
    return shape[0]


def _csv_header(path: Path) -> tuple[list[str], int]:
    """[header line] of the CSV, or [] without one (as :func:`datasets.read_csv` reads it),
    and the most cells of its first two lines (counting their commas)."""
    with open_text(path, cost=None) as lines:  # two lines, each within a line's bound
        head = list(itertools.islice(lines, 2))
    header = len(head) == 2 and len(datasets.read_csv(io.StringIO("".join(head)))) == 1
    return head[:1] if header else [], max((line.count(",") + 1 for line in head), default=0)


def _csv_rows(path: Path, start: int, stop: int) -> pd.DataFrame:
    """Rows of a CSV (after its header line, if any), read line by line; a compressed
    CSV is read whole. Rows without names are labelled ``start, start + 1, ...``."""
    if _compressed(path):
        rows = read_matrix(path).iloc[start:stop]
        if rows.empty:
            raise ValueError(f"{path}: no rows in [{start}, {stop})")
        return rows
    header, width = _csv_header(path)
    reserve = column_reserve(path, width, PARSE_COLUMN_COST)
    with open_text(path, reserve=reserve, skip=len(header) + start) as lines:  # kept: bounded
        kept = list(itertools.islice(lines, stop - start))
    if not kept:
        raise ValueError(f"{path}: no rows in [{start}, {stop})")
    rows = datasets.read_csv(io.StringIO("".join(header + kept)))
    if isinstance(rows.index, pd.RangeIndex):  # no row names: the global row numbers
        rows.index = pd.RangeIndex(start, start + len(rows))
    return rows


def _parquet_file(path: Path):
    """``pyarrow.parquet.ParquetFile(path)``; an ImportError naming the install without pyarrow."""
    try:
        import pyarrow.parquet as pq
    except ModuleNotFoundError as error:
        if not (error.name or "").startswith("pyarrow"):
            raise
        raise ImportError(
            f"reading Parquet ({path}) needs pyarrow: pip install pyarrow (or 'bernmf[parquet]')"
        ) from error
    return pq.ParquetFile(path)


def _parquet_rows(path: Path, start: int, stop: int | None) -> pd.DataFrame:
    """Rows ``start:stop`` (``None``: to the end) of a Parquet table, from the groups they overlap.

    The frame is the whole table's (pyarrow's ``to_pandas``, which restores the index
    and dtypes pandas wrote in the file's metadata) cut with ``iloc[start:stop]``,
    whichever rows are read: a RangeIndex, which pandas stores only in the metadata,
    gives the global labels, and a column of a file without pandas metadata that
    converts differently with nulls (integers to float, booleans to object) gets the
    dtype of the whole column. A DataFrame of shape (stop - start, N).
    """
    with _parquet_file(path) as file:
        metadata = file.metadata
        sizes = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
        if any(size < 0 for size in sizes):
            raise ValueError("a row group of its metadata declares a negative number of rows")
        bounds = np.cumsum([0, *sizes])
        M = int(bounds[-1])
        stop = M if stop is None else min(stop, M)
        start = min(start, stop)
        columns = metadata.num_columns
        check_bytes((stop - start) * columns * 8, f"rows {start}:{stop} of its {columns} columns")
        groups = [i for i in range(len(sizes)) if max(bounds[i], start) < min(bounds[i + 1], stop)]
        table = file.read_row_groups(groups)
        table = table.slice(start - (bounds[groups[0]] if groups else 0), stop - start)
        frame = table.to_pandas()
        pandas_metadata = file.schema_arrow.pandas_metadata
        if pandas_metadata is None:
            for name, dtype in _parquet_null_dtypes(file, table).items():
                frame[name] = frame[name].astype(dtype)
    index = (pandas_metadata or {}).get("index_columns", [])
    if not any(isinstance(column, str) for column in index):  # the labels are no column
        stored = [pd.RangeIndex(c["start"], c["stop"], c["step"], name=c["name"]) for c in index]
        labels = stored[0] if stored and len(stored[0]) == M else pd.RangeIndex(M)  # as to_pandas
        frame.index = labels[start:stop]
    return frame


def _parquet_null_dtypes(file, table) -> dict:
    """The dtypes of the integer and boolean columns with nulls in the file but not in ``table``.

    Their nulls are counted from the row groups' statistics (the column is read where
    a row group has none).
    """
    import pyarrow as pa

    metadata, dtypes = file.metadata, {}
    for field in table.schema:
        kind = pa.types.is_integer(field.type) or pa.types.is_boolean(field.type)
        if not kind or table.column(field.name).null_count:
            continue
        j = metadata.schema.names.index(field.name)
        stats = [metadata.row_group(i).column(j).statistics for i in range(metadata.num_row_groups)]
        if all(s is not None and s.has_null_count for s in stats):
            nulls = sum(s.null_count for s in stats)
        else:
            nulls = file.read(columns=[field.name]).column(0).null_count
        if nulls:
            dtypes[field.name] = pa.nulls(1, field.type).to_pandas().dtype
    return dtypes


def read_rows(path, start: int, stop: int):
    """Rows ``start:stop`` of a :func:`read_matrix` file, without reading the others.

    For one process's block of a fit across processes (:func:`rows_of`,
    ``bernmf.fit(..., distributed=True)``).

    Parameters
    ----------
    path : str or Path
        ``.npy`` or ``.npz`` (``Y`` or its only array: only the rows' bytes are
        read; or a ``scipy.sparse.save_npz`` matrix: a CSR one by its row pointers,
        CSC and COO by loading the whole matrix; checked as :func:`read_matrix`
        checks them), CSV (the lines are skipped, the header kept; rows without
        names labelled by their global index; a compressed CSV is read whole) or
        Parquet (only the row groups holding the rows are read; labels, index and
        dtypes as ``read_matrix(path).iloc[start:stop]``).
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
    suffix = _format(path)
    with untrusted(path):
        if suffix == ".npy":
            with open(path, "rb") as file:
                header = read_header(file, path.stat().st_size)
                return read_data(file, header, start, stop, "the array")
        if suffix == ".npz":
            return npz_rows(path, start, stop)
        if suffix == ".csv":
            return _csv_rows(path, start, stop)
        if suffix in (".parquet", ".pq"):
            return _parquet_rows(path, start, stop)
    raise ValueError(
        f"{path}: DATA must be .csv (or compressed, .csv.gz), .parquet, .npz or .npy, "
        f"got {''.join(path.suffixes) or 'no suffix'!r}"
    )
