"""The one reader of a file's text, plain or compressed, within the memory limit.

:func:`open_text` and :func:`open_bytes` decompress a file by its suffix (``.gz``,
``.bz2``, ``.xz``, ``.zip`` of one file, ``.zst``; any other suffix is plain text),
multi-member files included, and count the bytes they give. Once the count exceeds
what its reader may hold within the memory limit (``(memory_limit() - reserve) /
cost``: ``cost`` bytes of memory a byte of text, ``reserve`` for its columns, as
measured for :mod:`~bernmf.data.files.csv_table`), or a line exceeds ``memory_limit()
/ LINE_COST``, the read stops with :class:`OverBudget`, a ValueError that names the
file and the limit. Decompression runs in bounded steps, so a file
that would inflate to gigabytes (a bomb of any format, a multi-member gzip, one
endless line) costs at most the memory limit, whatever it holds.

:func:`untrusted` is the one place where the errors of codecs and parsers become a
ValueError that names the file.
"""

from __future__ import annotations

import bz2
import contextlib
import csv
import gzip
import io
import itertools
import lzma
import zipfile
import zlib
from pathlib import Path

from bernmf.data.memory import LIMIT_VARIABLE, memory_limit, size_text

__all__ = [
    "CELLS_COLUMN_COST", "CELLS_COST", "COMPRESSIONS", "LINE_COST", "PARSE_COLUMN_COST",
    "PARSE_COST", "RDA_COST", "RDA_OBJECT_COST", "FileRefused", "OverBudget", "column_reserve",
    "open_bytes", "open_text", "untrusted",
]  # fmt: skip

COMPRESSIONS = (".gz", ".bz2", ".xz", ".zip", ".zst")
"""Suffixes of the compressed files read (``.zst`` needs the ``zstandard`` package, ``.zip``
must hold one file)."""

PARSE_COST, PARSE_COLUMN_COST = 20, 2048
"""Peak bytes of memory that reading a CSV as numbers takes, at most, a byte of its text
and a column: a CSV of T bytes of text and N columns takes up to ``20 T + 2048 N`` bytes,
which must fit the memory limit. Measured peaks (above the imports,
:func:`bernmf.data.files.csv_table.read_csv`): 18.2 bytes a byte for a table of empty
cells (a float64 NaN from each byte), 9.3 for a 0/1 table, 15-17 with one column of
distinct row names, 6-7 for text cells (refused); 1.4-1.6 KB a column of a table of
1 to 10 rows and 10^5 to 10^6 columns (pandas' arrays and labels a column)."""

RDA_COST, RDA_OBJECT_COST = 16, 512
"""Peak bytes of memory that reading an R matrix from an ``.rda`` file takes a byte of its
decompressed serialization, and an R object (:mod:`bernmf.data.files.rda`, through
:func:`bernmf.data.datasets.read_rda`; an ALTREP sequence counts as the vector it expands
to). Measured above the imports, for 10^6 cells: 13.9 bytes a byte for a matrix of
integers (11.8 for 0/1), 13.9 for a compact sequence of integers, 10.3 for logicals,
7.9 for a compact sequence of doubles, 6.6 for doubles; 354 bytes an object for a list of
NULLs, 363 for empty strings, 514 for a row's name (dimnames: the R object, its numpy and
Python strings, the frame's labels)."""

MAGIC = {b"\x1f\x8b": ".gz", b"BZh": ".bz2", b"\xfd7zXZ\x00": ".xz"}
"""The first bytes of the compressions R writes (``save(..., compress=)``), by suffix."""

CELLS_COST, CELLS_COLUMN_COST = 80, 4096
"""The same for reading a CSV cell by cell as text, as is done to name the cells of a
refusal: measured 73 bytes a byte for a table of empty cells, 36 for a 0/1 table; 2.2-2.8
KB a column."""

LINE_COST = 64
"""A line may take ``memory_limit() / LINE_COST`` bytes: a line split into cells costs
about 30 bytes a byte (a Python string and a pointer a cell of two bytes)."""

_CHUNK = 1 << 20
"""The most bytes decompressed at a time."""


class FileRefused(ValueError):
    """A file refused while its bytes are read (damaged or encrypted compressed data, more
    text than the limit allows, a line too long): reading it again cannot succeed."""


class OverBudget(FileRefused):
    """More text, columns or a longer line than the memory limit allows for its reader."""


MALFORMED = (
    ValueError, TypeError, KeyError, IndexError, OverflowError, EOFError, NotImplementedError,
    zipfile.BadZipFile, zlib.error, lzma.LZMAError, csv.Error,
)  # fmt: skip
"""What parsing or decompressing a malformed file raises (pyarrow's errors are recognized
by their module, and OSErrors without an errno, gzip's and bz2's, are malformed data)."""


@contextlib.contextmanager
def untrusted(path, *, decoding: bool = False, form: str = ""):
    """Turn an error of reading ``path`` into a ValueError that starts with its name.

    A missing file stays a FileNotFoundError, a missing pyarrow an ImportError, an
    error of the system (an OSError with an errno) itself, except while ``decoding``:
    the errors of a codec reading an open file (any OSError, zipfile's EINVAL for a
    damaged directory included; a RuntimeError, zipfile's for an encrypted member)
    are the file's, and are raised as :class:`FileRefused`. The codec's words are
    given as ``damaged or not a .gz file (...)``; with ``form`` (such as ``"an R data
    file"``), so are a parser's, every error that does not name the file already, its
    assertions included (rdata asserts a file's structure): ``damaged or not an R data
    file (...)``.
    """
    try:
        yield
    except FileRefused:
        raise
    except Exception as error:
        parsing = isinstance(error, MALFORMED) or type(error).__module__.startswith(
            ("pyarrow", "zstandard")
        )
        if isinstance(error, OSError) and (decoding or error.errno is None):
            parsing = True
        if form and isinstance(error, AssertionError):  # rdata asserts a file's structure
            parsing = True
        if not parsing and not (decoding and isinstance(error, RuntimeError)):
            raise
        message = " ".join(str(error).split()) or type(error).__name__
        if decoding and not isinstance(error, ValueError):  # the codec's words
            kind = Path(path).suffix.lower() if Path(path).suffix.lower() in COMPRESSIONS else ""
            message = f"damaged or not a {kind or 'plain'} file ({message})"
        elif form and not message.startswith(str(path)):  # the parser's words
            message = f"damaged or not {form} ({message})"
        if not message.startswith(str(path)):
            message = f"{path}: {message}"
        raise (FileRefused if decoding else ValueError)(message) from None


def _limit(cost: int | None, reserve: int = 0) -> int | None:
    """The bytes of text that a reader of ``cost`` may read beside ``reserve`` bytes."""
    return None if cost is None else max(memory_limit() - reserve, 0) // cost


def _limit_text() -> str:
    return f"the memory limit of {size_text(memory_limit())} (set {LIMIT_VARIABLE} to raise it)"


def column_reserve(path, columns: int, cost: int) -> int:
    """The bytes that reading ``columns`` columns takes at ``cost`` bytes a column
    (:data:`PARSE_COLUMN_COST`, :data:`CELLS_COLUMN_COST`); :class:`OverBudget` if they
    exceed the memory limit."""
    reserve = columns * cost
    if reserve > memory_limit():
        raise OverBudget(
            f"{path}: {columns} columns take about {size_text(reserve)} to read ({cost} bytes "
            f"a column), more than {_limit_text()}"
        )
    return reserve


class _Counted(io.RawIOBase):
    """The decompressed bytes of ``stream``, counted and bounded (see :func:`open_bytes`);
    with ``lines`` False (binary data), no line is bounded."""

    def __init__(self, stream, path, compressed: bool, lines: bool = True):
        self._stream, self._path, self._compressed = stream, path, compressed
        self._line = max(memory_limit() // LINE_COST, 1) if lines else None
        self._count = self._run = 0
        self.allow(None)

    def allow(self, cost: int | None, reserve: int = 0) -> None:
        """Bound the bytes read from here on by ``cost`` and ``reserve`` (see
        :func:`open_bytes`)."""
        self._cost, self._reserve = cost, reserve
        limit = _limit(cost, reserve)
        self._stop = None if limit is None else self._count + limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        with untrusted(self._path, decoding=True):
            data = self._stream.read(min(len(buffer), (self._line or _CHUNK) + 1, _CHUNK))
        size = len(data)
        buffer[:size] = data
        self._count += size
        if self._stop is not None and self._count > self._stop:
            raise self._refusal()
        if self._line is None:
            return size
        ends = [data.find(b"\n"), data.find(b"\r")]
        first = min((e for e in ends if e >= 0), default=-1)
        if first < 0:
            self._run += size
        elif self._run + first > self._line:  # lines inside ``data`` are shorter than it
            self._run += first
        else:
            self._run = size - 1 - max(data.rfind(b"\n"), data.rfind(b"\r"))
        if self._run > self._line:
            raise OverBudget(
                f"{self._path}: a line longer than {size_text(self._line)}, 1/{LINE_COST} of "
                f"{_limit_text()}"
            )
        return size

    def _refusal(self) -> OverBudget:
        text = "text" if self._line is not None else "data"
        text = f"{text} once decompressed" if self._compressed else text
        columns = f", beside {size_text(self._reserve)} for its columns" if self._reserve else ""
        return OverBudget(
            f"{self._path}: more {text} than {size_text(_limit(self._cost, self._reserve))}: "
            f"its reader takes up to {self._cost} bytes of memory a byte{columns}, within "
            f"{_limit_text()}"
        )


def _decompressed(raw, path: Path, stack: contextlib.ExitStack, suffix: str):
    """The decompressed stream of the open file ``raw`` (``path``), by ``suffix``."""
    if suffix == ".gz":
        return stack.enter_context(gzip.GzipFile(fileobj=raw, mode="rb"))
    if suffix == ".bz2":
        return stack.enter_context(bz2.BZ2File(raw))
    if suffix == ".xz":
        return stack.enter_context(lzma.LZMAFile(raw))
    if suffix == ".zip":
        archive = stack.enter_context(zipfile.ZipFile(raw))
        files = [m for m in archive.infolist() if not m.is_dir()]
        files = [m for m in files if not m.filename.startswith("__MACOSX/")] or files
        if len(files) != 1:
            raise ValueError(f"a .zip must hold one file, found {len(files)}")
        if files[0].flag_bits & 0x1:
            raise ValueError(f"its member {files[0].filename!r} is encrypted")
        return stack.enter_context(archive.open(files[0]))
    if suffix == ".zst":
        try:
            import zstandard
        except ModuleNotFoundError as error:
            raise ImportError(
                f"reading {path} needs the zstandard package: pip install zstandard"
            ) from error
        reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        return stack.enter_context(reader)
    return raw


@contextlib.contextmanager
def open_bytes(path, cost: int | None = PARSE_COST, reserve: int = 0, *, binary: bool = False):
    """The bytes of ``path``, decompressed by its suffix, bounded; a binary file.

    Parameters
    ----------
    path : str or path-like
    cost : int or None, default :data:`PARSE_COST`
        The bytes of memory its reader spends a byte: the text may be at most
        ``(memory_limit() - reserve) // cost`` bytes (None: no bound on the total, for
        a reader whose memory does not grow with it, e.g. one that counts lines). A
        line may be at most ``memory_limit() // LINE_COST`` bytes in any case.
    reserve : int, default 0
        Bytes of the limit that its reader spends besides (:func:`column_reserve`).
    binary : bool, default False
        Binary data (an ``.rda`` file's): decompressed by its first bytes (:data:`MAGIC`:
        gzip, bzip2 or xz, as R compresses it; else as they are), and no bound on a line
        (binary data has none).

    Raises
    ------
    FileNotFoundError, OSError
        A file that cannot be opened.
    FileRefused
        (A ValueError naming the file, raised while reading.) Damaged, encrypted or
        mislabelled compressed data, a ``.zip`` of more than one file; :class:`OverBudget`:
        more text than the bound, a line too long.
    ImportError
        A ``.zst`` file without the zstandard package.
    """
    path = Path(path)
    with contextlib.ExitStack() as stack:
        raw = stack.enter_context(open(path, "rb"))
        suffix = path.suffix.lower()
        if binary:
            start = raw.read(6)
            raw.seek(0)
            suffix = next((s for magic, s in MAGIC.items() if start.startswith(magic)), "")
        with untrusted(path, decoding=True):
            stream = _decompressed(raw, path, stack, suffix)
        counted = _Counted(stream, path, suffix in COMPRESSIONS, lines=not binary)
        counted.allow(cost, reserve)
        yield stack.enter_context(io.BufferedReader(counted, buffer_size=_CHUNK))


@contextlib.contextmanager
def open_text(path, cost: int | None = PARSE_COST, reserve: int = 0, skip: int = 0):
    """The text of ``path`` (UTF-8), as :func:`open_bytes` bounds it; a text file.

    Lines end at ``\\n``, ``\\r\\n`` or ``\\r`` (as the csv module reads them). The
    first ``skip`` lines are read past, each within the bound of a line, and the bound
    of ``cost`` counts the bytes after them only (for a block of rows of a large file).
    """
    with open_bytes(path, None if skip else cost, reserve) as binary:
        text = io.TextIOWrapper(binary, encoding="utf-8", newline="")
        if skip:
            for _ in itertools.islice(text, skip):
                pass
            binary.raw.allow(cost, reserve)
        yield text
