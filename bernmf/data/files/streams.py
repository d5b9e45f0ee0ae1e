"""The one reader of a file's text, plain or compressed, within the memory budget.

:func:`open_text` and :func:`open_bytes` decompress a file by its suffix (``.gz``,
``.bz2``, ``.xz``, ``.zip`` of one file, ``.zst``; any other suffix is plain text),
multi-member files included, and count the bytes they give. Once the count exceeds
``memory_budget() / cost`` (``cost``: the bytes of memory its reader spends on a byte
of text, :data:`PARSE_COST` or :data:`CELLS_COST`), or a line exceeds
``memory_budget() / LINE_COST``, the read stops with :class:`FileRefused`, a ValueError
that names the file and the budget. Decompression runs in bounded steps, so a file
that would inflate to gigabytes (a bomb of any format, a multi-member gzip, one
endless line) costs at most the memory budget, whatever it holds.

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

from bernmf.data.budget import BUDGET_VARIABLE, memory_budget, size_text

__all__ = [
    "CELLS_COST", "COMPRESSIONS", "LINE_COST", "PARSE_COST", "FileRefused", "OverBudget",
    "open_bytes", "open_text", "untrusted",
]  # fmt: skip

COMPRESSIONS = (".gz", ".bz2", ".xz", ".zip", ".zst")
"""Suffixes of the compressed files read (``.zst`` needs the ``zstandard`` package, ``.zip``
must hold one file)."""

PARSE_COST = 20
"""Peak bytes of memory that reading a CSV as numbers takes a byte of its text, at most:
its text may take ``memory_budget() / PARSE_COST`` bytes. Measured peaks (above the
imports, :func:`bernmf.data.files.csv_table.read_csv`): 18.2 for a table of empty cells
(a float64 NaN from each byte), 9.3 for a 0/1 table, 15-17 for one column of
distinct names beside one of cells, 6-7 for text cells (refused)."""

CELLS_COST = 80
"""The same for reading a CSV cell by cell as text, as is done to name the cells of a
refusal: measured 73 for a table of empty cells, 36 for a 0/1 table."""

LINE_COST = 64
"""A line may take ``memory_budget() / LINE_COST`` bytes: a line split into cells costs
about 30 bytes a byte (a Python string and a pointer a cell of two bytes)."""

_CHUNK = 1 << 20
"""The most bytes decompressed at a time."""


class FileRefused(ValueError):
    """A file refused while its bytes are read (damaged or encrypted compressed data, more
    text than the budget allows, a line too long): reading it again cannot succeed."""


class OverBudget(FileRefused):
    """More text, or a longer line, than the memory budget allows for its reader."""


MALFORMED = (
    ValueError, TypeError, KeyError, IndexError, OverflowError, EOFError, NotImplementedError,
    zipfile.BadZipFile, zlib.error, lzma.LZMAError, csv.Error,
)  # fmt: skip
"""What parsing or decompressing a malformed file raises (pyarrow's errors are recognized
by their module, and OSErrors without an errno, gzip's and bz2's, are malformed data)."""


@contextlib.contextmanager
def untrusted(path, *, decoding: bool = False):
    """Turn an error of reading ``path`` into a ValueError that starts with its name.

    A missing file stays a FileNotFoundError, a missing pyarrow an ImportError, an
    error of the system (an OSError with an errno) itself, except while ``decoding``:
    the errors of a codec reading an open file (any OSError, zipfile's EINVAL for a
    damaged directory included; a RuntimeError, zipfile's for an encrypted member)
    are the file's, and are raised as :class:`FileRefused`.
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
        if not parsing and not (decoding and isinstance(error, RuntimeError)):
            raise
        message = " ".join(str(error).split()) or type(error).__name__
        if decoding and not isinstance(error, ValueError):  # the codec's words
            kind = Path(path).suffix.lower() if Path(path).suffix.lower() in COMPRESSIONS else ""
            message = f"damaged or not a {kind or 'plain'} file ({message})"
        if not message.startswith(str(path)):
            message = f"{path}: {message}"
        raise (FileRefused if decoding else ValueError)(message) from None


def _limit(cost: int | None) -> int | None:
    return None if cost is None else memory_budget() // cost


def _over(path, what: str, limit: int, cost: int) -> OverBudget:
    """The refusal of more than ``limit`` bytes (``what``: of text, in a line)."""
    return OverBudget(
        f"{path}: {what} {size_text(limit)}, 1/{cost} of the memory budget of "
        f"{size_text(memory_budget())}: its reader takes up to {cost} bytes of memory a byte "
        f"(set {BUDGET_VARIABLE} to raise the budget)"
    )


class _Counted(io.RawIOBase):
    """The decompressed bytes of ``stream``, counted and bounded (see :func:`open_bytes`)."""

    def __init__(self, stream, path, cost: int | None, compressed: bool):
        self._stream, self._path = stream, path
        self._what = "more text once decompressed than" if compressed else "more text than"
        self._line = max(memory_budget() // LINE_COST, 1)
        self._count = self._run = 0
        self.allow(cost)

    def allow(self, cost: int | None) -> None:
        """Bound the bytes read from here on by ``cost`` (see :func:`open_bytes`)."""
        self._cost = cost
        self._stop = None if cost is None else self._count + _limit(cost)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        with untrusted(self._path, decoding=True):
            data = self._stream.read(min(len(buffer), self._line + 1, _CHUNK))
        size = len(data)
        buffer[:size] = data
        self._count += size
        if self._stop is not None and self._count > self._stop:
            raise _over(self._path, self._what, _limit(self._cost), self._cost)
        ends = [data.find(b"\n"), data.find(b"\r")]
        first = min((e for e in ends if e >= 0), default=-1)
        if first < 0:
            self._run += size
        elif self._run + first > self._line:  # lines inside ``data`` are shorter than it
            self._run += first
        else:
            self._run = size - 1 - max(data.rfind(b"\n"), data.rfind(b"\r"))
        if self._run > self._line:
            raise _over(self._path, "a line longer than", self._line, LINE_COST)
        return size


def _decompressed(raw, path: Path, stack: contextlib.ExitStack):
    """The decompressed stream of the open file ``raw``, by the suffix of ``path``."""
    suffix = path.suffix.lower()
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
def open_bytes(path, cost: int | None = PARSE_COST):
    """The bytes of ``path``, decompressed by its suffix, bounded; a binary file.

    Parameters
    ----------
    path : str or path-like
    cost : int or None, default :data:`PARSE_COST`
        The bytes of memory its reader spends a byte: the text may be at most
        ``memory_budget() // cost`` bytes (None: no bound on the total, for a reader
        whose memory does not grow with it, e.g. one that counts lines). A line may be
        at most ``memory_budget() // LINE_COST`` bytes in any case.

    Raises
    ------
    FileNotFoundError, OSError
        A file that cannot be opened.
    FileRefused
        (A ValueError naming the file, raised while reading.) Damaged, encrypted or
        mislabelled compressed data, a ``.zip`` of more than one file, more text than
        the bound, a line too long.
    ImportError
        A ``.zst`` file without the zstandard package.
    """
    path = Path(path)
    compressed = path.suffix.lower() in COMPRESSIONS
    with contextlib.ExitStack() as stack:
        raw = stack.enter_context(open(path, "rb"))
        with untrusted(path, decoding=True):
            stream = _decompressed(raw, path, stack)
        counted = _Counted(stream, path, cost, compressed)
        yield stack.enter_context(io.BufferedReader(counted, buffer_size=_CHUNK))


@contextlib.contextmanager
def open_text(path, cost: int | None = PARSE_COST, skip: int = 0):
    """The text of ``path`` (UTF-8), as :func:`open_bytes` bounds it; a text file.

    Lines end at ``\\n``, ``\\r\\n`` or ``\\r`` (as the csv module reads them). The
    first ``skip`` lines are read past, each within the bound of a line, and the bound
    of ``cost`` counts the bytes after them only (for a block of rows of a large file).
    """
    with open_bytes(path, None if skip else cost) as binary:
        text = io.TextIOWrapper(binary, encoding="utf-8", newline="")
        if skip:
            for _ in itertools.islice(text, skip):
                pass
            binary.raw.allow(cost)
        yield text
