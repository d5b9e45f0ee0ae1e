"""R data files (``.rda``): their serialization checked and sized before rdata reads it.

:mod:`rdata` trusts a file: it builds a Python object for each R object (about 350 bytes
for 4 to 8 bytes of the file), expands an ALTREP compact sequence to the length its state
declares (3e8 doubles from a file of 134 bytes), makes a character vector a numpy array as
wide as its longest string, and recurses once a level of nesting. :func:`read_objects`
first walks the decompressed serialization without building anything (:class:`_Walk`):
each object's type, length and nesting is checked against the bytes that are there, and
what reading them takes (:data:`~bernmf.data.files.streams.RDA_COST` bytes a byte,
:data:`~bernmf.data.files.streams.RDA_OBJECT_COST` an object, the strings' arrays) against
the memory limit; then rdata reads it, each ALTREP object sized before it is expanded.
Only data is read: vectors, lists, their attributes, and the ALTREP classes R writes for
them (compact sequences, deferred strings, wrappers); a function, an environment, a call
or byte code is refused, as are R's ASCII format and nesting deeper than :data:`MAX_DEPTH`.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np

from bernmf.data.files.streams import RDA_COST, RDA_OBJECT_COST, FileRefused, open_bytes, untrusted
from bernmf.data.memory import check_bytes, size_text

__all__ = ["MAX_DEPTH", "read_objects"]

MAX_DEPTH = 100
"""The deepest nesting of R objects read (a pairlist, such as the file's list of objects,
nests one level an item). rdata takes two Python frames a level to parse a file and two
to convert it: well within Python's limit of 1000."""

SYM, LIST, CHAR, LGL, INT, REAL, CPLX, STR, VEC = 1, 2, 9, 10, 13, 14, 15, 16, 19
ALTREP, NILVALUE, REF = 238, 254, 255
"""R's types (``SEXPTYPE``) read, and the serialization's own items."""
ITEM_BYTES = {LGL: 4, INT: 4, REAL: 8, CPLX: 16}
"""The bytes of an item of each numeric vector."""
NOT_DATA = {
    3: "a function", 4: "an environment", 5: "a promise", 6: "a call", 7: "a function",
    8: "a function", 17: "a '...' argument", 20: "an expression", 21: "byte code",
    22: "an external pointer", 23: "a weak reference", 24: "a raw vector", 25: "an S4 object",
    241: "an environment", 242: "an environment", 253: "an environment",
}  # fmt: skip
"""R's types that are not data, in words."""
_ATTRIBUTES, _TAG = 1 << 9, 1 << 10
"""The flags of an object's header: it has attributes, a tag (a name)."""
UNITS = {"compact_intseq": "integers", "compact_realseq": "doubles", "deferred_string": "strings"}
"""What the items of an ALTREP object are, by class."""
DEFERRED_STRING_BYTES = RDA_OBJECT_COST + 4 * 24
"""An item of an ALTREP deferred string: an R object, then a numpy string of up to 24
characters (a double formatted as R does)."""


def read_objects(path) -> dict:
    """The R objects of the ``.rda`` file ``path``, by name, as :mod:`rdata` converts them.

    A data frame is a pandas DataFrame, a matrix with dimnames an xarray DataArray, other
    vectors numpy arrays (masked where R's NA is), lists Python lists or dicts.

    Raises
    ------
    FileNotFoundError, OSError
        A file that cannot be opened.
    ValueError
        Naming the file: damaged, compressed data included; not R's serialization of data
        (a function, an environment ...); nested deeper than :data:`MAX_DEPTH`; or taking
        more than the memory limit to read, the size it would need said.
    """
    import rdata

    with open_bytes(path, RDA_COST, binary=True) as stream:  # a bomb stops at the memory limit
        data = stream.read()
    walk = _Walk(data, path)
    cost = _Cost(path)
    strings = f" and {size_text(walk.strings)} of strings" if walk.strings else ""
    cost.add(
        RDA_COST * len(data) + RDA_OBJECT_COST * walk.objects + walk.strings,
        f"its {walk.objects} R objects ({size_text(len(data))} of data{strings})",
    )
    del walk  # and its view of data
    classes = rdata.conversion.DEFAULT_CLASS_MAP
    with warnings.catch_warnings(), untrusted(path, form="an R data file"):
        # the files do not record their strings' encoding; they are UTF-8; a time series
        # is its values (rdata's "ts" would make an index of any length its "tsp" says)
        warnings.filterwarnings("ignore", message="Unknown encoding", category=UserWarning)
        warnings.filterwarnings("ignore", message="Missing constructor", category=UserWarning)
        parsed = rdata.parser.parse_data(
            data, altrep_constructor_dict=_Constructors(path, cost), extension=".rda"
        )
        del data  # the parsed objects hold the matrix: a copy less at the peak
        return rdata.conversion.convert(
            parsed,
            {name: classes[name] for name in ("data.frame", "factor", "ordered")},
            default_encoding="utf-8",
        )


class _Cost:
    """The memory that reading ``path`` takes, checked against the limit as it grows."""

    def __init__(self, path):
        self.path, self.nbytes = path, 0

    def add(self, nbytes: int, what: str) -> None:
        """Count ``nbytes`` more for reading ``what``; ValueError past the memory limit."""
        self.nbytes += nbytes
        check_bytes(self.nbytes, f"{self.path}: reading {what}")


class _Walk:
    """One pass over the decompressed ``.rda`` file ``data`` (of ``path``) that builds nothing.

    Checks what :func:`read_objects` says, and counts :attr:`objects` (those rdata will
    build) and :attr:`strings`: the bytes of the numpy arrays of character vectors, 4 a
    character of the longest string, a string, twice (rdata's array, then xarray's copy
    for dimnames: 177 MB measured for 20000 empty row names and one of 1000 characters).
    Raises :class:`FileRefused`.
    """

    def __init__(self, data: bytes, path):
        self.data, self.path = memoryview(data), path
        self.position = self.objects = self.strings = self.symbols = 0
        start = bytes(self.data[:7])
        if start[:5] in (b"RDA2\n", b"RDA3\n"):
            raise FileRefused(
                f"{path}: written in R's ASCII format (save(ascii = TRUE)), which is not "
                "read: save it with R's default format"
            )
        if start not in (b"RDX2\nX\n", b"RDX3\nX\n", b"RDB2\nB\n", b"RDB3\nB\n"):
            raise self.damaged("it does not start as R's save writes a file (RDX3)")
        native = start.endswith(b"B\n") and int.from_bytes(self.data[7:11], "little") in (2, 3)
        self.order, self.position = "little" if native else "big", 7
        version = self.int()
        if version not in (2, 3):
            raise self.damaged(f"format version {version} (R writes 2 or 3)")
        self.int()  # the versions of R that wrote it
        self.int()  # and that can read it
        if version == 3:
            length = self.count(1)
            encoding = bytes(self.data[self.position : self.position + length])
            if length > 64 or not encoding.isascii():
                raise self.damaged("its encoding is not the name of one")
            self.position += length
        if not self.named(1):
            raise self.damaged("it holds no object")
        if self.position != len(self.data):
            raise self.damaged(f"{len(self.data) - self.position} bytes after its last object")

    def damaged(self, detail: str) -> FileRefused:
        return FileRefused(
            f"{self.path}: damaged or not an R data file: {detail} (at byte {self.position} "
            f"of its {len(self.data)} bytes of R data)"
        )

    def int(self) -> int:
        end = self.position + 4
        if end > len(self.data):
            raise self.damaged("it ends inside an object (truncated)")
        value = int.from_bytes(self.data[self.position : end], self.order, signed=True)
        self.position = end
        return value

    def count(self, size: int, *, na: bool = False) -> int:
        """A length, of items of at least ``size`` bytes each that must be there; with
        ``na``, -1 too (R's NA string, without bytes)."""
        count = self.int()
        if na and count == -1:
            return count
        if count < 0:
            long = " (R's long vectors, of 2^31 items or more, are not read)" if count == -1 else ""
            raise self.damaged(f"a length of {count}{long}")
        if count * size > len(self.data) - self.position:
            raise self.damaged(
                f"{count} items of {size} bytes or more declared where "
                f"{len(self.data) - self.position} bytes are left (truncated)"
            )
        return count

    def header(self, depth: int) -> int:
        """The header of an object nested ``depth`` levels deep: its type and flags."""
        if depth > MAX_DEPTH:
            raise FileRefused(
                f"{self.path}: R objects nested more than {MAX_DEPTH} levels deep (lists in "
                f"lists, or a pairlist of over {MAX_DEPTH} items), which is not read"
            )
        self.objects += 1
        return self.int()

    def item(self, depth: int) -> None:
        """Any object that is data, nested ``depth`` levels deep."""
        flags = self.header(depth)
        kind = flags & 0xFF
        if kind == NILVALUE:
            return
        if kind == REF:
            return self.reference(flags)
        if kind == LIST:  # a pairlist's cell: attributes first, then a name, an item, the rest
            if flags & _ATTRIBUTES:
                self.named(depth + 1)
            if flags & _TAG:
                self.name(depth + 1)
            self.item(depth + 1)
            return self.item(depth + 1)
        if kind == ALTREP:  # its class (a pairlist of class, package, type), state, attributes
            if self.header(depth + 1) != LIST:
                raise self.damaged("an ALTREP object without its class")
            self.name(depth + 2)
            self.item(depth + 2)
            self.item(depth + 1)
            self.named(depth + 1)
            return
        if kind == SYM:
            self.symbol(flags, depth)
        elif kind == CHAR:
            self.string(flags)
        elif kind in ITEM_BYTES:
            items = self.count(ITEM_BYTES[kind])
            self.position += items * ITEM_BYTES[kind]
        elif kind == STR:
            self.character(depth)
        elif kind == VEC:
            for _ in range(self.count(4)):
                self.item(depth + 1)
        elif kind in NOT_DATA:
            raise FileRefused(
                f"{self.path}: holds {NOT_DATA[kind]} (an R object of type {kind}), which is "
                "not data: save the matrix alone (save(x, file = ...))"
            )
        else:
            raise self.damaged(f"an object of unknown type {kind}")
        if flags & _ATTRIBUTES:
            self.named(depth + 1)

    def named(self, depth: int) -> int:
        """A pairlist of named items (attributes, the file's objects) or NULL: their count."""
        items = 0
        while (flags := self.header(depth + items)) & 0xFF != NILVALUE:
            if flags & 0xFF != LIST or not flags & _TAG:
                raise self.damaged("attributes or objects without names")
            if flags & _ATTRIBUTES:
                self.named(depth + items + 1)
            self.name(depth + items + 1)
            self.item(depth + items + 1)
            items += 1
        return items

    def name(self, depth: int) -> None:
        """A symbol, or a reference to one."""
        flags = self.header(depth)
        if flags & 0xFF == REF:
            return self.reference(flags)
        self.symbol(flags, depth)

    def symbol(self, flags: int, depth: int) -> None:
        if flags != SYM:
            raise self.damaged("a name that is not a symbol")
        flags = self.header(depth + 1)
        if flags & 0xFF != CHAR:
            raise self.damaged("a symbol that is not a string")
        if self.string(flags) < 0:
            raise self.damaged("a symbol whose name is NA")
        self.symbols += 1

    def reference(self, flags: int) -> None:
        """A reference to a symbol read before (rdata's table holds only those read)."""
        index = flags >> 8 & 0xFFFFFF
        if not 1 <= index <= self.symbols:
            raise self.damaged(f"a reference to symbol {index} of {self.symbols}")

    def string(self, flags: int) -> int:
        """A CHARSXP: its length in bytes (-1 for NA)."""
        if flags & _ATTRIBUTES:
            raise self.damaged("a string with attributes")
        length = self.count(1, na=True)
        self.position += max(length, 0)
        return length

    def character(self, depth: int) -> None:
        """A character vector: strings (their numpy arrays are as wide as the longest)."""
        count, longest = self.count(8), 0
        for _ in range(count):
            flags = self.header(depth + 1)
            if flags & 0xFF != CHAR:
                raise self.damaged("a character vector holding something other than strings")
            longest = max(longest, self.string(flags))
        self.strings += 2 * 4 * count * longest


class _Constructors(dict):
    """The ALTREP constructors, by class, each checking and sizing its object before
    expanding it: rdata's, but compact sequences expanded here (rdata's are one item long
    when decreasing, ``3:1``); a class without one is refused."""

    def __init__(self, path, cost: _Cost):
        from rdata.parser import DEFAULT_ALTREP_MAP

        constructors = {name.decode(): c for name, c in DEFAULT_ALTREP_MAP.items()}
        constructors["compact_intseq"] = functools.partial(self.compact, np.int32)
        constructors["compact_realseq"] = functools.partial(self.compact, np.float64)
        super().__init__({name.encode(): self.sized(name, c) for name, c in constructors.items()})
        self.path, self.cost = path, cost

    def __missing__(self, name: bytes):
        raise FileRefused(
            f"{self.path}: holds an R ALTREP object of class "
            f"{name.decode(errors='replace')!r}, which is not read (R writes compact "
            "sequences, deferred strings and wrappers)"
        )

    def sized(self, name: str, construct):
        def expand(state):
            items, item_bytes = self.expansion(name, state)
            unit = UNITS.get(name, "items")
            self.cost.add(items * item_bytes, f"its {name} of {items} {unit}")
            return construct(state)

        return expand

    def expansion(self, name: str, state) -> tuple[int, int]:
        """The items that the ALTREP object of class ``name`` expands to, and the bytes
        each takes to read; :class:`FileRefused` for a state R does not write."""
        from rdata.parser import RObjectType

        if name.startswith("compact_"):  # doubles: length, start, step (+1 or -1)
            integer = name == "compact_intseq"
            values = state.value if state.info.type == RObjectType.REAL else np.zeros(0)
            if len(values) != 3 or not np.isfinite(values).all():
                raise self.refused(name, "(length, start, step)")
            n, start, step = (float(v) for v in values)
            ends = (start, start + step * max(n - 1, 0))
            if not (n >= 0 and n.is_integer() and start.is_integer() and step in (1, -1)):
                raise self.refused(name, "(length, start, step) with a step of 1 or -1")
            if integer and not all(abs(end) < 2**31 for end in ends):
                raise self.refused(name, "a sequence of integers")
            return int(n), RDA_COST * ITEM_BYTES[INT if integer else REAL]
        vectors = {RObjectType(t) for t in (LGL, INT, REAL, CPLX, STR, VEC)}
        if state.info.type != RObjectType.LIST or state.value[0].info.type not in vectors:
            raise self.refused(name, "a pairlist of a vector and its details")
        if name == "deferred_string":  # numbers, to be formatted as strings
            if state.value[0].info.type not in {RObjectType.INT, RObjectType.REAL}:
                raise self.refused(name, "a pairlist of numbers and their format")
            return len(state.value[0].value), DEFERRED_STRING_BYTES
        return 0, 0  # a wrapper: its vector, read already

    @staticmethod
    def compact(dtype, state):
        """R's compact sequence ``start + step * (0:(length - 1))`` (checked), as rdata's
        constructors give a vector: its header and values."""
        from rdata.parser import RObjectInfo, RObjectType

        n, start, step = (int(v) for v in state.value)
        values = np.arange(start, start + step * n, step, dtype=dtype)
        kind = RObjectType.INT if dtype == np.int32 else RObjectType.REAL
        info = RObjectInfo(kind, object=False, attributes=False, tag=False, gp=0, reference=0)
        return info, values

    def refused(self, name: str, state: str) -> FileRefused:
        return FileRefused(
            f"{self.path}: damaged or not an R data file: an ALTREP {name} whose state is not "
            f"{state}, as R writes it"
        )
