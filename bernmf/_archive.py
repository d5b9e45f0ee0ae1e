"""Reading an untrusted zip of ``.npy`` members (a saved fit) with bounded memory.

What a zip says about itself is checked before anything is allocated:

* only stored or deflated, unencrypted members with distinct names, inside the file;
* the compressed sizes add up to no more than the file holds, and each member's
  uncompressed size is at most what deflate can give (at most 1032 times its
  compressed size), so a zip bomb is refused and memory stays within about a
  thousand times the file's size;
* an array's ``.npy`` header (shape, dtype) must account for exactly the member's
  uncompressed size, and its dtype must hold no Python objects (nothing is ever
  unpickled).

Every problem is a ValueError naming the member; damaged data is caught by the
zip's CRC-32 check when the member is read to its end.
"""

from __future__ import annotations

import math
import tokenize
import zipfile
import zlib
from pathlib import Path

import numpy as np

MAX_DEFLATE_RATIO = 1032
"""Deflate emits at least one bit per 258 bytes: no member can expand more than this."""

_DAMAGED = (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError)
"""What :mod:`zipfile` raises on damaged or unsupported content."""


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
        except _DAMAGED as error:
            raise ValueError(f"not a readable zip file ({error})") from None
        try:
            self._check(path.stat().st_size)
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

    def read_bytes(self, name: str) -> bytes:
        """The content of member ``name`` (its size was checked on opening)."""
        try:
            return self._zip.read(name)
        except _DAMAGED as error:
            raise ValueError(f"member {name!r} is damaged ({error})") from None

    def read_array(self, name: str) -> np.ndarray:
        """The ``.npy`` member ``name``, its header checked against its size before reading."""
        try:
            with self._zip.open(name) as stream:
                return _read_npy(stream, self._zip.getinfo(name).file_size, name)
        except _DAMAGED as error:
            raise ValueError(f"member {name!r} is damaged ({error})") from None


def _read_npy(stream, size: int, name: str) -> np.ndarray:
    fmt = np.lib.format
    try:
        version = fmt.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(stream)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except (ValueError, TypeError, SyntaxError, tokenize.TokenError) as error:
        raise ValueError(f"member {name!r} has a bad .npy header ({error})") from None
    if dtype.hasobject or dtype.itemsize == 0 or dtype.kind not in "biufcmMSU":
        raise ValueError(f"member {name!r} has an unsupported dtype {dtype}")
    count = math.prod(shape)
    if stream.tell() + count * dtype.itemsize != size:
        raise ValueError(
            f"member {name!r}: its header declares shape {shape} of {dtype} but it holds "
            f"{size - stream.tell()} bytes of data"
        )
    array = np.empty(count, dtype=dtype)
    buffer = memoryview(array.view(np.uint8))
    filled = 0
    while filled < len(buffer):
        read = stream.readinto(buffer[filled:])
        if not read:
            raise ValueError(f"member {name!r} ends early")
        filled += read
    stream.read(1)  # at the end: the zip checks the CRC-32 of the member
    return array.reshape(shape, order="F" if fortran else "C")
