"""Reading untrusted ``.npy`` arrays, alone or in a zip (``.npz``), with bounded memory.

What a zip says about itself is checked before anything is allocated:

* only stored or deflated, unencrypted members with distinct names, inside the file;
* the compressed sizes add up to no more than the file holds, and each member's
  uncompressed size is at most what deflate can give (at most 1032 times its
  compressed size), so a zip bomb is refused and memory stays within about a
  thousand times the file's size;
* an array's ``.npy`` header (shape, dtype) must account for exactly the member's
  (or the ``.npy`` file's) size, and its dtype must hold no Python objects (nothing
  is ever unpickled);
* what is read of an array is within the memory limit (:mod:`bernmf.data.memory`).

Every problem is a ValueError naming the member; damaged data is caught by the
zip's CRC-32 check when a member is read to its end.
"""

from __future__ import annotations

import math
import tokenize
import zipfile
import zlib
from pathlib import Path
from typing import NamedTuple

import numpy as np

from bernmf.data.memory import check_bytes

MAX_DEFLATE_RATIO = 1032
"""Deflate emits at least one bit per 258 bytes: no member can expand more than this."""

_DAMAGED = (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError)
"""What :mod:`zipfile` raises on damaged or unsupported content."""


class Header(NamedTuple):
    """What an ``.npy`` header declares, checked against the bytes that follow it."""

    shape: tuple[int, ...]
    fortran: bool
    dtype: np.dtype
    offset: int
    """Where the data start, in bytes from the start of the ``.npy``."""


class Archive:
    """An open zip whose members have been checked; use as a context manager.

    Parameters
    ----------
    path : Path
        The zip file.

    Raises
    ------
    ValueError
        If it is not a zip, or its members are encrypted, compressed other than by
        deflate, duplicated, or claim more data than the file can hold.
    """

    def __init__(self, path: Path):
        try:
            self._zip = zipfile.ZipFile(path)
        except (*_DAMAGED, OSError) as error:
            raise ValueError(f"not a readable zip file ({error})") from None
        self._headers: dict[str, Header] = {}
        try:
            self._check(Path(path).stat().st_size)
        except BaseException:
            self._zip.close()
            raise

    def _check(self, file_size: int) -> None:
        members = self._zip.infolist()
        self.names = [member.filename for member in members]
        if len(set(self.names)) != len(self.names):
            raise ValueError("the zip has members with the same name")
        if sum(member.compress_size for member in members) > file_size:
            raise ValueError("the zip's members claim more data than the file holds")
        for member in members:
            name = member.filename
            if not 0 <= member.header_offset < file_size - member.compress_size:
                raise ValueError(f"member {name!r} lies outside the file")
            if member.flag_bits & 0x1:
                raise ValueError(f"member {name!r} is encrypted")
            if member.compress_type == zipfile.ZIP_STORED:
                bound = member.compress_size
            elif member.compress_type == zipfile.ZIP_DEFLATED:
                bound = MAX_DEFLATE_RATIO * member.compress_size + 64
            else:
                raise ValueError(f"member {name!r} uses an unsupported compression")
            if member.file_size > bound:
                raise ValueError(
                    f"member {name!r} claims {member.file_size} bytes from "
                    f"{member.compress_size} compressed bytes (a zip bomb or a damaged zip)"
                )

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc) -> None:
        self._zip.close()

    def total_size(self) -> int:
        """The members' declared sizes, uncompressed, added up (checked on opening)."""
        return sum(member.file_size for member in self._zip.infolist())

    def read_bytes(self, name: str) -> bytes:
        """The content of member ``name`` (its size was checked on opening)."""
        try:
            return self._zip.read(name)
        except _DAMAGED as error:
            raise ValueError(f"member {name!r} is damaged ({error})") from None

    def header(self, name: str) -> Header:
        """The ``.npy`` header of member ``name``, checked against its size; nothing else read."""
        if name not in self._headers:
            try:
                with self._zip.open(name) as stream:
                    self._headers[name] = read_header(stream, self._zip.getinfo(name).file_size)
            except _DAMAGED as error:
                raise ValueError(f"member {name!r} is damaged ({error})") from None
            except ValueError as error:
                raise ValueError(f"member {name!r}: {error}") from None
        return self._headers[name]

    def read_array(self, name: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """The ``.npy`` member ``name`` (rows ``start:stop`` of it), its header checked first.

        Only the rows' bytes are decompressed into memory (a stored member is seeked
        into); rows of an array need it in C order.
        """
        header = self.header(name)
        try:
            with self._zip.open(name) as stream:
                stream.seek(header.offset)
                return read_data(stream, header, start, stop, f"member {name!r}")
        except _DAMAGED as error:
            raise ValueError(f"member {name!r} is damaged ({error})") from None


def read_header(stream, size: int) -> Header:
    """The header of the ``.npy`` of ``size`` bytes in ``stream``, checked against that size.

    Raises
    ------
    ValueError
        A header numpy cannot parse, an unsupported version or dtype (objects,
        empty or structured), or a shape whose data would not take exactly the
        bytes after the header.
    """
    fmt = np.lib.format
    try:
        version = fmt.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(stream)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except (ValueError, TypeError, SyntaxError, OverflowError, tokenize.TokenError) as error:
        raise ValueError(f"bad .npy header ({error})") from None
    if dtype.hasobject or dtype.itemsize == 0 or dtype.kind not in "biufcmMSU" or dtype.names:
        raise ValueError(f"unsupported dtype {dtype}")
    offset = stream.tell()
    count = math.prod(shape)
    if offset + count * dtype.itemsize != size:
        raise ValueError(
            f"its header declares shape {shape} of {dtype} but it holds "
            f"{size - offset} bytes of data"
        )
    return Header(tuple(int(n) for n in shape), bool(fortran), dtype, offset)


def read_data(stream, header: Header, start: int, stop: int | None, what: str) -> np.ndarray:
    """Rows ``start:stop`` (all: 0, None) of the array whose data ``stream`` is at (its
    ``header.offset``).

    The bytes read are within the memory limit; the stream is read to its end
    when the whole array is (where a zip checks its CRC-32).
    """
    shape, dtype = header.shape, header.dtype
    whole = start == 0 and (stop is None or (shape and stop >= shape[0]))
    if not whole:
        if not shape or (header.fortran and len(shape) > 1):
            raise ValueError(f"{what} must be a C-ordered array of at least 1 dimension")
        stop = min(shape[0] if stop is None else stop, shape[0])
        start = min(start, stop)
        shape = (stop - start, *shape[1:])
    row = math.prod(header.shape[1:]) * dtype.itemsize
    check_bytes(math.prod(shape) * dtype.itemsize, f"{what} of shape {shape} of {dtype}")
    if start:
        stream.seek(stream.tell() + start * row)
    array = np.empty(math.prod(shape), dtype=dtype)
    buffer = memoryview(array.view(np.uint8))
    filled = 0
    while filled < len(buffer):
        read = stream.readinto(buffer[filled:])
        if not read:
            raise ValueError(f"{what} ends early")
        filled += read
    if whole:
        stream.read(1)  # at the end: a zip checks the CRC-32 of the member
    return array.reshape(shape, order="F" if header.fortran and whole else "C")
