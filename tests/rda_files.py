"""R data files written byte by byte, valid and hostile: the builder and the fuzz of ``.rda``
files that :func:`bernmf.data.datasets.read_rda` reads.

An ``.rda`` file is ``RDX3\\n`` (or ``RDX2\\n``) and R's serialization of a pairlist of
tagged objects, in XDR (big-endian): ``X\\n``, three version integers (and, for version 3,
the native encoding), then each object as a header integer (its type in the low byte; bit
8 "is an object", 9 "has attributes", 10 "has a tag", bits 12-27 its levels), its
contents (a vector's length and values, a pairlist's attributes, tag, CAR and CDR), then
its attributes, a pairlist. ALTREP objects (type 238) are a pairlist of their class,
package and type, a state and attributes; a symbol written again is a reference (type
255) to the table of symbols, counted from 1. The whole may be compressed (gzip, bzip2,
xz), as R's ``save`` writes it.

``python -m tests.rda_files SEED COUNT FOLDER`` writes COUNT files generated from SEED in
FOLDER, one at a time, and reads each with ``read_rda``: before reading it prints ``file
<name>`` (so that a crash names it), after it one JSON line ``{"file", "outcome",
"message"}`` when the outcome is neither a frame nor a ValueError naming the file; at the
end ``read <count>`` (the files read as a frame) and ``peak <bytes> <file>``: the most
resident memory a read took above what the process held before it (:func:`peak_of`).
Run it with a small ``BERNMF_MEMORY_LIMIT`` (the test and ``benchmarks/rda_fuzz.py`` do).
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import random
import struct
import sys
import warnings
from pathlib import Path

import numpy as np

NIL, SYM, LIST, CLO, ENV, PROM, LANG, CHAR, LGL, INT, REAL, CPLX, STR, VEC, RAW = (
    0, 1, 2, 3, 4, 5, 6, 9, 10, 13, 14, 15, 16, 19, 24,
)  # fmt: skip
ALTREP, BASEENV, EMPTYENV, GLOBALENV, NILVALUE, REF = 238, 241, 242, 253, 254, 255
"""R's types (``SEXPTYPE``) and the serialization's special items."""
NA_INTEGER = -(2**31)
COMPRESS = {"gzip": gzip.compress, "bzip2": bz2.compress, "xz": lzma.compress, "none": bytes}
"""The compressions of R's ``save(compress=)``."""


def ints(*values: int) -> bytes:
    """XDR integers (big-endian int32)."""
    return struct.pack(f">{len(values)}i", *values)


def header(kind: int, *, attributes=False, tag=False, obj=False, levels=0) -> bytes:
    """The integer that starts an item: its type and flags."""
    return ints(kind | obj << 8 | attributes << 9 | tag << 10 | levels << 12)


def char(text: str | bytes | None) -> bytes:
    """A CHARSXP (UTF-8; None: NA_character_)."""
    if text is None:
        return header(CHAR) + ints(-1)
    data = text.encode() if isinstance(text, str) else text
    return header(CHAR, levels=8 if any(b > 127 for b in data) else 64) + ints(len(data)) + data


def symbol(name: str) -> bytes:
    return header(SYM) + char(name)


def reference(index: int) -> bytes:
    """A reference to the ``index``-th symbol (or environment) written, from 1."""
    return ints(index << 8 | REF)


def pairlist(items, attributes: bytes = b"", kind: int = LIST) -> bytes:
    """A pairlist of ``(tag or None, item bytes)``, ended by NILVALUE."""
    data = b""
    for i, (tag, item) in enumerate(items):
        data += header(kind, attributes=bool(attributes) and i == 0, tag=tag is not None)
        data += (attributes if i == 0 else b"") + (b"" if tag is None else symbol(tag)) + item
    return data + header(NILVALUE)


def vector(
    kind: int, values, attributes: bytes = b"", *, length: int | None = None, obj: bool = False
) -> bytes:
    """A vector of ``kind`` (LGL, INT, REAL, CPLX, RAW: numbers; STR: strings; VEC: item
    bytes) with ``attributes`` (a pairlist's bytes); ``length`` declares another length;
    ``obj``: an object, whose class attribute rdata uses."""
    values = list(values)
    if kind in (LGL, INT):
        data = ints(*values)
    elif kind in (REAL, CPLX):
        data = struct.pack(f">{len(values)}d", *values)
    elif kind == RAW:
        data = bytes(values)
    elif kind == STR:
        data = b"".join(map(char, values))
    else:
        data = b"".join(values)
    count = len(values) // (2 if kind == CPLX else 1) if length is None else length
    return header(kind, attributes=bool(attributes), obj=obj) + ints(count) + data + attributes


def matrix(values, kind: int = REAL, rows=None, columns=None, dim=None) -> bytes:
    """An R matrix of ``values`` (2-D), stored by column, with its ``dim`` (or another) and
    its dimnames when ``rows`` or ``columns`` are given."""
    values = np.asarray(values)
    flat = values.ravel(order="F").tolist()
    attributes = [("dim", vector(INT, values.shape if dim is None else dim))]
    if rows is not None or columns is not None:
        names = [header(NILVALUE) if n is None else vector(STR, n) for n in (rows, columns)]
        attributes.append(("dimnames", vector(VEC, names)))
    return vector(kind, flat, pairlist(attributes))


def nest(kind: int, depth: int, item: bytes | None = None) -> bytes:
    """``item`` (default NULL) in ``depth`` lists (``kind`` VEC) or pairlists (LIST)."""
    item = header(NILVALUE) if item is None else item
    for _ in range(depth):
        item = vector(VEC, [item]) if kind == VEC else pairlist([(None, item)])
    return item


def altrep(name: str, state: bytes, attributes: bytes = b"", kind: int = REAL) -> bytes:
    """An ALTREP object of class ``name`` (package base, type ``kind``)."""
    info = pairlist([(None, symbol(name)), (None, symbol("base")), (None, vector(INT, [kind]))])
    return header(ALTREP) + info + state + (attributes or header(NILVALUE))


def compact_seq(n: float, start: float = 1, step: float = 1, integer=False, dim=None) -> bytes:
    """R's ``start + step * (0:(n - 1))`` as a compact sequence (of doubles, or integers),
    with a ``dim`` attribute if given."""
    name = "compact_intseq" if integer else "compact_realseq"
    attributes = pairlist([("dim", vector(INT, dim))]) if dim is not None else b""
    return altrep(name, vector(REAL, [n, start, step]), attributes, INT if integer else REAL)


def rda(objects: dict[str, bytes], compression: str = "gzip", version: int = 3) -> bytes:
    """An ``.rda`` file of ``objects`` (name -> item bytes), as R's ``save`` writes it."""
    data = f"RDX{version}\nX\n".encode() + ints(version, 0x040300, 0x030500)
    if version == 3:
        data += ints(5) + b"UTF-8"
    return COMPRESS[compression](data + pairlist(objects.items()))


def dotted(car: bytes, cdr: bytes) -> bytes:
    """A pairlist cell whose CDR is not a pairlist (as R's ALTREP states are)."""
    return header(LIST) + car + cdr


NOT_DATA = {
    "closure": header(3, attributes=True) + pairlist([("srcref", vector(INT, [1]))])
    + header(GLOBALENV) + pairlist([("x", header(NILVALUE))]) + symbol("x"),
    "environment": header(4) + ints(0) + header(GLOBALENV) + pairlist([("y", vector(INT, [1]))])
    + header(NILVALUE) + header(NILVALUE),
    "call": header(LANG) + symbol("f") + pairlist([(None, vector(REAL, [1.0]))]),
    "promise": header(PROM) + header(NILVALUE) + header(NILVALUE),
    "bytecode": header(21) + ints(1) + vector(INT, [12, 1]) + ints(0),
    "raw": vector(RAW, [1, 2, 3]),
    "S4": header(25, obj=True, attributes=True) + pairlist([("class", vector(STR, ["A"]))]),
    "base environment": header(BASEENV),
    "empty environment": header(EMPTYENV),
    "global environment": header(GLOBALENV),
    "NIL": header(NIL),
    "unknown": header(99) + ints(3),
}  # fmt: skip
"""Objects that are not data, by what they are."""
LENGTHS = [0, 1, 2, 3, 6, 1000, 10**5, 3 * 10**8, 2**31 - 1, 2**53, 1e300, -1, -5]
NUMBERS = [0, 1, -1, 0.5, 2, 2**31, -(2**31), float("nan"), float("inf"), 1e300]
DIMS = [None, [2, 3], [6, 1], [1000, 100], [20000, 15000], [2**31 - 1, 2], [-1, 2], [3], [1, 2, 3]]
ALTREPS = ["compact_intseq", "compact_realseq", "deferred_string", "wrap_real", "wrap_integer",
           "wrap_logical", "wrap_string", "wrap_complex", "wrap_raw", "foo", ""]  # fmt: skip


def binary(rng: random.Random, M: int | None = None, N: int | None = None) -> np.ndarray:
    M, N = M or rng.randint(1, 6), N or rng.randint(1, 5)
    return (np.random.default_rng(rng.randrange(2**32)).random((M, N)) < 0.4).astype(int)


def valid_matrix(rng: random.Random) -> bytes:
    """A 0/1 matrix of doubles, integers or logicals, NA now and then, with dimnames or not
    (NA names, non-ASCII names)."""
    Y, kind = binary(rng), rng.choice([REAL, INT, LGL])
    values = Y.astype(float if kind == REAL else int)
    if rng.random() < 0.3:
        values[rng.randrange(Y.shape[0]), rng.randrange(Y.shape[1])] = (
            np.nan if kind == REAL else NA_INTEGER
        )
    rows = [f"r{i}" for i in range(Y.shape[0])] if rng.random() < 0.5 else None
    columns = [rng.choice(["c", "é", "", None]) for _ in range(Y.shape[1])]
    return matrix(values, kind, rows, columns if rng.random() < 0.5 else None)


def crafted_altrep(rng: random.Random) -> bytes:
    """An ALTREP object: any class R writes (or none), a state of any length, start and
    step (or another object), with or without a dim."""
    name = rng.choice(ALTREPS)
    dim = rng.choice(DIMS)
    attributes = pairlist([("dim", vector(INT, dim))]) if dim else b""
    kind = INT if name in ("compact_intseq", "wrap_integer") else REAL
    if name.startswith("compact") or rng.random() < 0.1:
        state = [rng.choice(LENGTHS), rng.choice([*NUMBERS, 0, 1]), rng.choice([1, -1, *NUMBERS])]
        state = vector(REAL, state[: rng.choice([3, 3, 3, 2, 4])])
        if rng.random() < 0.1:
            state = rng.choice([vector(INT, [3, 1, 1]), header(NILVALUE), vector(STR, ["a"])])
    elif name == "deferred_string":
        numbers = vector(rng.choice([REAL, INT]), range(rng.choice([0, 3, 1000])))
        state = dotted(numbers, vector(INT, [0])) if rng.random() < 0.8 else numbers
    else:
        wrapped = rng.choice([
            vector(REAL, [0.0, 1.0]), vector(INT, [1, 0, 1, 1, 0, 0]), vector(STR, ["a"]),
            symbol("s"), header(NILVALUE), vector(RAW, [1]), pairlist([(None, header(NILVALUE))]),
        ])  # fmt: skip
        state = dotted(wrapped, vector(INT, [0, 0])) if rng.random() < 0.8 else wrapped
    if rng.random() < 0.1:  # a class that is not a symbol
        info = pairlist([(None, vector(STR, [name])), (None, symbol("base"))])
        return header(ALTREP) + info + state + (attributes or header(NILVALUE))
    return altrep(name, state, attributes, kind)


def nested(rng: random.Random) -> bytes:
    """Lists in lists, pairlists in pairlists, or a long pairlist, around a matrix."""
    depth = rng.choice([1, 10, 50, 96, 99, 100, 101, 500, 3000])
    item = matrix(binary(rng))
    how = rng.choice(["list", "pairlist", "attributes", "long"])
    if how == "long":
        return pairlist([(f"a{i}", vector(INT, [i])) for i in range(depth)])
    if how == "attributes":
        for _ in range(depth):
            item = vector(INT, [1], pairlist([("a", item)]))
        return item
    return nest(VEC if how == "list" else LIST, depth, item)


def declared(rng: random.Random) -> bytes:
    """A vector, a string or a list declaring a length that its bytes do not hold."""
    length = rng.choice([2**31 - 1, 2**30, 10**9, 5000, -1, -5, -(2**31)])
    kind = rng.choice([LGL, INT, REAL, CPLX, STR, VEC, CHAR])
    if kind == CHAR:
        return vector(STR, [], length=1) + header(CHAR) + ints(length) + b"abc"
    values = {STR: ["a", "b"], VEC: [header(NILVALUE)] * 2}.get(kind, [0, 1, 1, 0])
    return vector(kind, values, length=length)


def strings(rng: random.Random) -> bytes:
    """A character vector of many short strings and one long one (a numpy array as wide as
    the longest, a string), as dimnames or alone."""
    count, width = rng.choice([10, 1000, 20000]), rng.choice([10, 1000, 100_000, 1_000_000])
    names = [""] * count + ["x" * width]
    if rng.random() < 0.5:
        return vector(STR, names)
    return matrix(binary(rng, count + 1, 1), LGL, rows=names)


def many_objects(rng: random.Random) -> bytes:
    """A list of many small objects: a few bytes each in the file, hundreds in memory."""
    count = rng.choice([10**3, 10**4, 10**5, 3 * 10**5])
    item = rng.choice([header(NILVALUE), vector(INT, []), vector(STR, [""]), symbol("s")])
    return vector(VEC, [item] * count)


def shapes(rng: random.Random) -> bytes:
    """An object that is not a matrix of 0/1, or a matrix whose dim or dimnames are wrong."""
    Y = binary(rng, 2, 3)
    flat = Y.ravel(order="F").tolist()
    choices = {
        "vector": lambda: vector(INT, flat),
        "array": lambda: matrix(binary(rng, 2, 2), dim=[2, 1, 2]),
        "dim": lambda: matrix(Y, dim=rng.choice(DIMS[1:])),
        "dimnames": lambda: matrix(Y, rows=["a"], columns=["a", "b", "c", "d"]),
        "list": lambda: vector(VEC, [vector(INT, flat), vector(STR, ["a"])]),
        "named list": lambda: vector(
            VEC, [vector(INT, [1]), vector(INT, [0])],
            pairlist([("names", vector(STR, ["a", "b"]))]),
        ),
        "data.frame": lambda: data_frame(rng),
        "factor": lambda: vector(INT, [1, 2, 9], pairlist(
            [("levels", vector(STR, ["0", "1"])), ("class", vector(STR, ["factor"]))]
        ), obj=True),
        "ts": lambda: vector(REAL, [0, 1], pairlist(
            [("tsp", vector(REAL, [0, 1e12, 1])), ("class", vector(STR, ["ts"]))]
        ), obj=True),
        "NULL": lambda: header(NILVALUE),
        "string": lambda: matrix(np.array([["0", "1"], ["1", "x"]]), STR),
        "complex": lambda: vector(CPLX, [1, 0, 0, 0], pairlist([("dim", vector(INT, [2, 1]))])),
        "non-binary": lambda: matrix(Y * rng.choice([2, 0.5, -1, np.inf])),
    }  # fmt: skip
    return choices[rng.choice(sorted(choices))]()


def data_frame(rng: random.Random) -> bytes:
    """A data frame of 0/1 columns, its row names R's compact c(NA, -n) of any n."""
    n = rng.choice([3, 3, 0, 2**31 - 1])
    columns = [vector(rng.choice([INT, REAL, LGL]), [1, 0, 1]) for _ in range(rng.randint(0, 3))]
    names = vector(STR, [f"v{j}" for j in range(len(columns))])
    attributes = [("names", names), ("class", vector(STR, ["data.frame"]))]
    attributes.append(("row.names", vector(INT, [NA_INTEGER, -n])))
    return vector(VEC, columns, pairlist(rng.sample(attributes, len(attributes))), obj=True)


def random_item(rng: random.Random, depth: int = 0) -> bytes:
    """Any object from R's serialization's grammar, any flags, short lengths: what the
    checks let through, rdata must read."""
    kind = rng.choice([NILVALUE, SYM, LIST, CHAR, LGL, INT, REAL, CPLX, STR, VEC, ALTREP, REF,
                       LANG, ENV, 0, 99])  # fmt: skip
    levels = [v << 12 for v in (1, 2, 4, 64)]  # a CHARSXP's encoding among them
    flags = rng.choice([0, 0, 0, 1 << 8, 1 << 9, 1 << 10, 3 << 8, *levels])
    if kind == REF:
        return ints(rng.choice([0, 1, 2, 5, 2**22]) << 8 | REF)
    if depth > 4 or kind in (NILVALUE, LANG, ENV, 0, 99):
        return ints(kind | flags)
    name = rng.choice(["dim", "names", "class", "a"])
    tail = pairlist([(name, random_item(rng, depth + 1))]) if flags & 1 << 9 else b""
    if kind == SYM:
        name = char("s") if rng.random() < 0.8 else random_item(rng, depth + 1)
        return ints(kind | flags) + name
    if kind == CHAR:
        length = rng.choice([0, 1, 3, -1, -2])
        return ints(kind | flags, length) + b"abc"[: rng.randint(0, 3)]
    if kind == LIST:
        items = [random_item(rng, depth + 1) for _ in range(2)]
        tag = symbol("t") if flags & 1 << 10 else b""
        return ints(kind | flags) + tail + tag + b"".join(items)
    if kind == ALTREP:
        return altrep(rng.choice(ALTREPS), random_item(rng, depth + 1), tail)
    n = rng.randint(0, 3)
    if kind in (STR, VEC):
        items = [char(rng.choice(["a", "", None])) if kind == STR and rng.random() < 0.8
                 else random_item(rng, depth + 1) for _ in range(n)]  # fmt: skip
        return ints(kind | flags, n) + b"".join(items) + tail
    values = [rng.choice([0, 1, NA_INTEGER, 2]) for _ in range(n * (2 if kind == CPLX else 1))]
    data = ints(*values) if kind in (LGL, INT) else struct.pack(f">{len(values)}d", *values)
    return ints(kind | flags, n) + data + tail


def damaged(content: bytes, rng: random.Random) -> bytes:
    """``content`` with bytes flipped, cut short, or followed by more."""
    how = rng.random()
    if how < 0.5:
        content = bytearray(content)
        for _ in range(rng.randint(1, 3)):
            content[rng.randrange(len(content))] ^= rng.randint(1, 255)
        return bytes(content)
    if how < 0.9:
        return content[: rng.randrange(len(content))]
    return content + rng.choice([b"\0", b"\xfe\0\0\0", ints(254), b"garbage"])


def magic(rng: random.Random) -> bytes:
    """A file that does not start as R's ``save`` writes one, or of another version."""
    body = rda({"x": matrix(binary(rng))}, "none")[7:]
    choices = [
        b"RDA3\nA\n3\n262657\n197888\n5\nUTF-8\n", b"RDX1\nX\n" + body, b"RDB3\nB\n" + body,
        b"X\n" + body, b"", b"RD", b"RDX3\n", bytes(rng.randrange(256) for _ in range(40)),
        b"RDX3\nX\n" + ints(rng.choice([1, 4, -1])) + body[4:],
        b"RDX3\nX\n" + body[:12] + ints(rng.choice([-1, 1000, 2**31 - 1])) + body[16:],
        b"RDX3\nX\n" + body[:16] + b"\xff" + body[17:], b"\x1f\x8b" + body,
    ]  # fmt: skip
    return COMPRESS[rng.choice(sorted(COMPRESS))](rng.choice(choices))


def large(rng: random.Random) -> bytes:
    """A matrix that takes 50% to 95% of the memory limit to read, as its costs count it:
    of doubles, integers, logicals, named rows, or a compact sequence (of integers, not
    0/1: refused once read)."""
    from bernmf.data.files.streams import RDA_COST, RDA_OBJECT_COST
    from bernmf.data.memory import memory_limit

    share = rng.uniform(0.5, 0.95) * memory_limit()
    how = rng.choice(["doubles", "integers", "logicals", "names", "sequence"])
    if how == "sequence":
        n = int(share / (RDA_COST * 4))
        return compact_seq(n, 0, 1, integer=True, dim=[n // 2, 2])
    if how == "names":  # a row: its name (an object, 16 bytes of data, 8 of strings), a 0/1
        n = int(share / (RDA_OBJECT_COST + 20 * RDA_COST + 2 * 4 * 8))
        return matrix(binary(rng, n, 1), LGL, rows=[f"r{i:07d}" for i in range(n)])
    item_bytes = 8 if how == "doubles" else 4
    n = int(share / (RDA_COST * item_bytes))
    kind = {"doubles": REAL, "integers": INT, "logicals": LGL}[how]
    return matrix(binary(rng, n // 4, 4), kind)


GENERATORS = {
    "matrix": valid_matrix, "altrep": crafted_altrep, "nested": nested,
    "not-data": lambda rng: rng.choice(list(NOT_DATA.values())), "lengths": declared,
    "strings": strings, "objects": many_objects, "shapes": shapes, "random": random_item,
    "large": large,
}  # fmt: skip
"""Generators of one R object, by kind (and ``damaged`` and ``magic``: whole files)."""
KINDS = (*GENERATORS, "damaged", "magic")


def generated(kind: str, rng: random.Random) -> bytes:
    """The bytes of an ``.rda`` file of ``kind``: one object named x (now and then a matrix y
    beside it), any compression and version."""
    if kind == "magic":
        return magic(rng)
    compression, version = rng.choice(sorted(COMPRESS)), rng.choice([2, 3, 3])
    if kind == "damaged":
        content = rda({"x": GENERATORS[rng.choice(list(GENERATORS))](rng)}, "none", version)
        return COMPRESS[compression](damaged(content, rng))
    objects = {"x": GENERATORS[kind](rng)}
    if rng.random() < 0.15:
        objects["y"] = valid_matrix(rng)
    return rda(objects, compression, version)


def rss(field: str) -> int:
    """This process's resident memory now (``VmRSS``) or at its peak (``VmHWM``), bytes."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field)) * 1024


def peak_of(read) -> tuple[int, object]:
    """The most resident memory that ``read()`` takes above what the process held before
    it (Linux: the peak is reset through ``/proc/self/clear_refs``), and what it gives or
    raises."""
    before = rss("VmRSS")
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")
    try:
        outcome = np.asarray(read())
    except Exception as error:
        outcome = error
    return rss("VmHWM") - before, outcome


def main(seed: int, count: int, folder: Path) -> None:
    from bernmf.data.datasets import read_rda

    rng = random.Random(seed)
    warnings.simplefilter("ignore")
    path = folder / f"r{seed}-warm.rda"  # the imports that a first read makes, done
    path.write_bytes(rda({"x": valid_matrix(rng)}))
    read_rda(path)
    peak, peak_file, read = 0, "", 0
    for i in range(count):
        kind = KINDS[i % len(KINDS)]
        path = folder / f"r{seed}-{i}-{kind}.rda"
        path.write_bytes(generated(kind, rng))
        print(f"file {path.name}", flush=True)
        taken, outcome = peak_of(lambda: read_rda(path))  # noqa: B023 (called here)
        peak, peak_file = max((peak, peak_file), (taken, path.name))
        if not isinstance(outcome, Exception):
            path.unlink()
            read += 1
            continue
        if isinstance(outcome, ValueError):
            if str(outcome).startswith(str(path)):
                path.unlink()
                continue
            kind = "ValueError without the file's name"
        else:
            kind = f"raw {type(outcome).__name__}"
        record = {"file": path.name, "outcome": kind, "message": str(outcome)}
        print(json.dumps(record)[:400], flush=True)
    print(f"read {read}", flush=True)
    print(f"peak {peak} {peak_file}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]))
