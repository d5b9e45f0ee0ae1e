"""Damaged and crafted files for every reader and ``bernmf.load``, and tampered sparse
matrices in memory: the fuzz of test_untrusted.

``python -m tests.untrusted_files SEED COUNT FOLDER [MATRICES]`` writes COUNT files
generated from SEED in FOLDER, one at a time, and reads each with every reader that
takes its format; then builds MATRICES (default 0) scipy.sparse matrices of every
layout, tampers with their arrays, and checks each as Y and as a mask
(:func:`bernmf.data.observed.as_observed`). Before reading a file it prints ``file
<name>`` (so that a crash names it), before a matrix ``matrix <i> <layout>``; after it
one JSON line ``{"file", "reader", "outcome", "message"}`` per reader whose outcome is
not a success or a ValueError naming the file (for a matrix: a ValueError or TypeError
naming the argument). A file is a valid one (``.npy``, dense and sparse ``.npz``, CSV,
Parquet, a saved fit, a compressed CSV), then byte flips, a truncation or a crafted
header or field; a compressed CSV may also be a bomb (a repeated row, or one line,
inflating past the memory limit), of several members, or mislabelled. Run it with a
small ``BERNMF_MEMORY_LIMIT`` so that bombs are cheap to make.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import random
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import sparse

KINDS = ("npy", "npz", "csr", "csc", "coo", "csv", "parquet", "fit", "gz", "bz2", "xz", "zip")
"""The formats generated, in turn (the last four: compressed CSVs, ``.csv.gz`` ...)."""
CODECS = {
    "gz": gzip.compress,
    "bz2": bz2.compress,
    "xz": lzma.compress,
    "zip": lambda data: zip_bytes({"y.csv": data}, True),
}

DESCRS = ["<f8", "|b1", "|i1", "<i8", ">f4", "|O", "<U3", "|S2", "|V8", "<M8[D]", "<c16", "x"]
SHAPES = ["(4, 3)", "(3,)", "()", "(10**12,)", "(4, 3, 2)", "(2**62, 2**62)", "(-1, 3)", "(0, 3)"]
SHAPES += ["(4, 3.5)", "[4, 3]", "(4,", "'a'", "(4, 3) if 1 else 0", "(" + "(" * 200]
INTEGERS = [0, 1, 2, 3, -1, 99, 2**30, 2**31 - 1, 2**62, -(2**62), 10**12]
CELLS = ["0", "1", "", "NA", "nan", "2", "x", "1.0", '"', "'", "\x00", "NULL", "-", "1e400"]


def npy_bytes(array) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.asarray(array), allow_pickle=False)
    return buffer.getvalue()


def crafted_npy(rng: random.Random) -> bytes:
    """An ``.npy`` whose header is made up: any descr, fortran order, shape; some data."""
    descr, fortran = rng.choice(DESCRS), rng.choice(["False", "True", "0", "'x'"])
    header = f"{{'descr': {descr!r}, 'fortran_order': {fortran}, 'shape': {rng.choice(SHAPES)}, }}"
    header = header.encode("latin1")
    header += b" " * (-(len(header) + 11) % 64) + b"\n"
    version = rng.choice([b"\x01\x00", b"\x02\x00", b"\x03\x00", b"\x09\x00"])
    size = len(header).to_bytes(2 if version == b"\x01\x00" else 4, "little")
    data = bytes(rng.randrange(256) for _ in range(rng.choice([0, 8, 12, 96, 200])))
    return b"\x93NUMPY" + version + size + header + data


def zip_bytes(members: dict[str, bytes], compressed: bool) -> bytes:
    buffer = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    with zipfile.ZipFile(buffer, "w", method) as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def matrix(rng: random.Random) -> np.ndarray:
    M, N = rng.randint(1, 6), rng.randint(1, 5)
    return (np.random.default_rng(rng.randrange(2**32)).random((M, N)) < 0.4).astype(float)


def sparse_fields(kind: str, Y: np.ndarray) -> dict[str, np.ndarray]:
    """The arrays ``scipy.sparse.save_npz`` writes for Y in layout ``kind``."""
    buffer = io.BytesIO()
    layout = {"csr": sparse.csr_array, "csc": sparse.csc_array, "coo": sparse.coo_array}[kind]
    sparse.save_npz(buffer, layout(Y), compressed=False)
    with np.load(io.BytesIO(buffer.getvalue())) as arrays:
        return {name: arrays[name] for name in arrays.files}


def crafted_field(rng: random.Random, name: str, array: np.ndarray):
    """A made-up value for one field of a sparse ``.npz``."""
    if name == "format":
        return np.array(rng.choice([b"csr", b"csc", b"coo", b"bsr", b"dia", b"", "csr", b"\xff"]))
    if name == "shape":
        return np.array([rng.choice(INTEGERS), rng.choice(INTEGERS)][: rng.choice([1, 2, 2, 2])])
    choice = rng.random()
    if choice < 0.6 and array.size:  # one entry changed
        array = array.astype(np.int64) if array.dtype.kind in "iub" else array.copy()
        array.flat[rng.randrange(array.size)] = rng.choice(INTEGERS)
        return array
    if choice < 0.8:  # another length
        return np.array([rng.choice(INTEGERS) for _ in range(rng.randint(0, 8))], np.int64)
    return np.asarray(array, rng.choice([np.float64, np.uint64, np.int8, np.bool_, "U2"]))


def valid_file(kind: str, rng: random.Random, folder: Path) -> bytes:
    """The bytes of a valid file of ``kind``."""
    Y = matrix(rng)
    if kind == "npy":
        return npy_bytes(Y.astype(rng.choice([np.float64, np.int8, np.bool_])))
    if kind == "npz":
        return zip_bytes({"Y.npy": npy_bytes(Y)}, rng.random() < 0.5)
    if kind in ("csr", "csc", "coo"):
        members = {f"{k}.npy": npy_bytes(v) for k, v in sparse_fields(kind, Y).items()}
        return zip_bytes(members, rng.random() < 0.5)
    if kind == "csv":
        frame = pd.DataFrame(Y.astype(int), index=[f"r{i}" for i in range(len(Y))])
        labelled = rng.random() < 0.5
        return frame.to_csv(header=labelled, index=labelled).encode()
    if kind == "parquet":
        buffer = io.BytesIO()
        pd.DataFrame(Y, columns=[f"c{j}" for j in range(Y.shape[1])]).to_parquet(
            buffer, row_group_size=rng.randint(1, 4)
        )
        return buffer.getvalue()
    return FITS[rng.randrange(len(FITS))]


def crafted_file(kind: str, rng: random.Random, valid: bytes) -> bytes:
    """A file of ``kind`` with a made-up header or field."""
    if kind == "npy":
        return crafted_npy(rng)
    if kind == "npz":
        members = {"Y.npy": crafted_npy(rng)}
        if rng.random() < 0.3:
            members["other.npy"] = npy_bytes(np.zeros(2))
        return zip_bytes(members, rng.random() < 0.5)
    if kind in ("csr", "csc", "coo"):
        with np.load(io.BytesIO(valid)) as arrays:
            fields = {name: arrays[name] for name in arrays.files}
        for _ in range(rng.randint(1, 2)):
            name = rng.choice(sorted(fields))
            fields[name] = crafted_field(rng, name, fields[name])
        members = {f"{k}.npy": npy_bytes(v) for k, v in fields.items()}
        if rng.random() < 0.1:
            members[f"{rng.choice(sorted(fields))}.npy"] = crafted_npy(rng)
        return zip_bytes(members, rng.random() < 0.5)
    if kind == "csv":
        rows = [
            ",".join(rng.choice(CELLS) for _ in range(rng.randint(0, 5)))
            for _ in range(rng.randint(0, 6))
        ]
        return "\n".join(rows).encode("utf-8", "surrogatepass")
    if kind == "parquet":  # the footer (metadata) damaged: flips in its last bytes
        content = bytearray(valid)
        for _ in range(rng.randint(1, 4)):
            content[-rng.randint(1, min(len(content), 400))] ^= rng.randint(1, 255)
        return bytes(content)
    return crafted_fit(rng, valid)


def crafted_fit(rng: random.Random, valid: bytes) -> bytes:
    """A saved fit with one array or one metadata field made up."""
    with zipfile.ZipFile(io.BytesIO(valid)) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    if rng.random() < 0.5:
        name = rng.choice(sorted(n for n in members if n.endswith(".npy")))
        array = np.load(io.BytesIO(members[name]))
        if rng.random() < 0.5 and array.size and array.dtype.kind == "f":
            array = array.copy()
            array.flat[rng.randrange(array.size)] = rng.choice([np.nan, np.inf, -1.0, 5.0, 1e300])
            members[name] = npy_bytes(array)
        else:
            members[name] = crafted_npy(rng)
    else:
        info = json.loads(members["metadata.json"])
        key = rng.choice(sorted(info))
        info[key] = rng.choice([None, -1, 2**70, "x", [], {}, [1, 2], 1.5, True, info.get(key)])
        members["metadata.json"] = json.dumps(info).encode()
    return zip_bytes(members, True)


def compressed_file(kind: str, rng: random.Random, folder: Path) -> bytes:
    """A CSV compressed by ``kind``: valid, a bomb, of several members, mislabelled, or
    valid then flipped, truncated or crafted."""
    text, compress = valid_file("csv", rng, folder), CODECS[kind]
    how = rng.random()
    if how < 0.15:  # a repeated row past the budget's share of text, or one endless line
        row = text.splitlines(keepends=True)[-1] if text.strip() else b"0,1\n"
        bomb = row * (rng.choice([2, 20]) * 10**5 // len(row))
        return compress(bomb.replace(b"\n", b",") if rng.random() < 0.3 else bomb)
    if how < 0.3:  # several members: gzip, bz2 and xz read them all; a .zip needs one file
        cut = rng.randrange(len(text) + 1)
        if kind == "zip":
            members = {"a.csv": text[:cut], "b.csv": text[cut:], "d/": b""}
            keep = rng.sample(sorted(members), rng.randint(0, 3))
            return zip_bytes({name: members[name] for name in keep}, rng.random() < 0.5)
        return compress(text[:cut]) + compress(text[cut:]) + rng.choice([b"", b"\0" * 8, b"x"])
    if how < 0.4:  # mislabelled: another codec's bytes, plain text, an .npz
        other = rng.choice([*(c for k, c in CODECS.items() if k != kind), lambda d: d])
        return rng.choice([other(text), zip_bytes({"Y.npy": npy_bytes(np.eye(2))}, False)])
    if how < 0.5:  # crafted text: any cells, a field longer than csv's limit, latin-1
        long_field = b'"' + b"x" * 140_000 + b'",1\n'
        latin1 = text.replace(b"r", b"\xe9")
        return compress(rng.choice([crafted_file("csv", rng, text), long_field, latin1]))
    if how < 0.55 and kind == "zip":  # an encrypted member, a damaged directory
        content = bytearray(compress(text))
        if rng.random() < 0.5:
            content[6] |= 1
            content[content.find(b"PK\x01\x02") + 8] |= 1
        else:
            end = content.rfind(b"PK\x05\x06")
            field = rng.choice([12, 16])
            content[end + field : end + field + 4] = rng.randrange(2**32).to_bytes(4, "little")
        return bytes(content)
    content = compress(text)
    if how < 0.8:
        content = bytearray(content)
        for _ in range(rng.randint(1, 3)):
            content[rng.randrange(len(content))] ^= rng.randint(1, 255)
        return bytes(content)
    if how < 0.95:
        return content[: rng.randrange(len(content))]
    return content


def damaged(kind: str, rng: random.Random, folder: Path) -> bytes:
    """A valid file of ``kind``, then flipped, truncated or crafted (or left valid)."""
    if kind in CODECS:
        return compressed_file(kind, rng, folder)
    content = valid_file(kind, rng, folder)
    how = rng.random()
    if how < 0.35:
        content = bytearray(content)
        for _ in range(rng.randint(1, 3)):
            content[rng.randrange(len(content))] ^= rng.randint(1, 255)
        return bytes(content)
    if how < 0.5:
        return content[: rng.randrange(len(content))]
    if how < 0.95:
        return crafted_file(kind, rng, content)
    return content


def readers(kind: str, path: Path) -> dict:
    """Every reader of a file of ``kind``: name -> call."""
    import bernmf
    from bernmf.data.files import readers as r
    from bernmf.results.loading import load_metadata

    if kind == "fit":
        return {"load": lambda: bernmf.load(path), "load_metadata": lambda: load_metadata(path)}
    calls = {"read_rows": lambda: r.read_rows(path, 1, 3), "count_rows": lambda: r.count_rows(path)}
    if kind != "npy":
        calls["read_matrix"] = lambda: r.read_matrix(path)
        calls["read_mask"] = lambda: r.read_mask(path, (3, 2))
    return calls


def touch(result) -> None:
    """Use what a reader gave: convert it to a dense array, as a fit would."""
    if isinstance(result, bernmf_fit()):
        np.asarray(result.probs)
    elif sparse.issparse(result):
        result.toarray()
    elif isinstance(result, pd.DataFrame | np.ndarray):
        np.asarray(result)


def bernmf_fit():
    from bernmf.results.fit import Fit

    return Fit


FITS: list[bytes] = []


def saved_fits(folder: Path) -> list[bytes]:
    """Small saved fits to damage: one with labels and data, an ensemble of two members.

    Built from factors drawn here (no engine runs: the worker starts in about a second).
    """
    import dataclasses

    from bernmf.data.observed import as_observed
    from bernmf.results.fit import Fit, Mixture, Record

    rng = np.random.default_rng(0)
    Y = pd.DataFrame((rng.random((6, 5)) < 0.4).astype(float), index=list("abcdef"))

    def fit(seed: int) -> Fit:
        W = rng.dirichlet(np.ones(2), 6)
        return Fit(
            engine="mm", rank=2, prior=None, W=W, H=rng.random((2, 5)), trace=-rng.random(4),
            converged=True, record=Record(seed, {"run": 0.1}),
        )  # fmt: skip

    plain = dataclasses.replace(
        fit(0), record=Record(0, {"run": 0.1}, None, as_observed(Y), Y.index, Y.columns),
        extras={"note": ("x", np.arange(2))},
    )  # fmt: skip
    members = (fit(1), fit(2))
    ensemble = dataclasses.replace(
        members[0], mixture=Mixture(members, (0.25, 0.75), "mean", scores=(1.0, 2.0))
    )
    return [f.save(folder / f"seed-{i}.npz").read_bytes() for i, f in enumerate([plain, ensemble])]


LAYOUTS = ("csr", "csc", "bsr", "coo", "lil", "dok", "dia")
"""The scipy.sparse layouts of the matrices tampered with, in turn."""


def sparse_matrix(layout: str, rng: random.Random):
    """A valid matrix of ``layout`` (a NaN stored now and then; BSR in blocks that fit)."""
    Y = matrix(rng)
    if rng.random() < 0.2:
        Y[rng.randrange(Y.shape[0]), rng.randrange(Y.shape[1])] = np.nan
    if layout == "bsr":
        return sparse.bsr_array(Y, blocksize=(2 if Y.shape[0] % 2 == 0 else 1, 1))
    return getattr(sparse, f"{layout}_array")(Y)


def crafted_array(rng: random.Random, array) -> np.ndarray:
    """``array`` with one entry changed, another length, or another dtype."""
    array = np.asarray(array)
    choice = rng.random()
    if choice < 0.6 and array.size:
        array = array.astype(np.int64) if array.dtype.kind in "iub" else array.copy()
        array.flat[rng.randrange(array.size)] = rng.choice([*INTEGERS, 0.5, np.nan, np.inf])
        return array
    if choice < 0.8:
        return np.array([rng.choice(INTEGERS) for _ in range(rng.randint(0, 8))], np.int64)
    return np.asarray(array, rng.choice([np.float64, np.uint64, np.int8, np.bool_, "U2", object]))


def tamper(matrix, rng: random.Random) -> None:
    """Change one of ``matrix``'s own arrays (or its shape) in place, as scipy never checks."""
    layout, choice = matrix.format, rng.random()
    if choice < 0.1:
        matrix._shape = (rng.choice(INTEGERS), rng.choice(INTEGERS))
    elif layout in ("csr", "csc", "bsr"):
        field = rng.choice(["indptr", "indptr", "indices", "data"])
        setattr(matrix, field, crafted_array(rng, getattr(matrix, field)))
    elif layout == "coo":
        coords = list(matrix.coords)
        which = rng.randrange(3)
        if which == 2:
            matrix.data = crafted_array(rng, matrix.data)
        else:
            coords[which] = crafted_array(rng, coords[which])
            matrix.coords = tuple(coords[: rng.choice([1, 2, 2, 2])])
    elif layout == "lil":
        i = rng.randrange(matrix.shape[0])
        lists = matrix.rows if rng.random() < 0.5 else matrix.data
        lists[i] = rng.choice([[*lists[i], rng.choice(INTEGERS)], [], "x", lists[i][:-1]])
    elif layout == "dok":
        key = rng.choice([(rng.choice(INTEGERS), 0), (0, rng.choice(INTEGERS)), (0,), "x"])
        dict.__setitem__(matrix._dict, key, rng.choice([1.0, 2.0, np.nan, "x"]))
    else:  # dia
        field = rng.choice(["offsets", "data"])
        setattr(matrix, field, crafted_array(rng, getattr(matrix, field)))


def check_matrices(seed: int, count: int) -> None:
    """Tampered matrices as Y and as a mask: checked, or refused naming the argument."""
    from bernmf.data.observed import as_observed

    rng = random.Random(seed)
    for i in range(count):
        layout = LAYOUTS[i % len(LAYOUTS)]
        matrix = sparse_matrix(layout, rng)
        for _ in range(rng.randint(1, 2)):
            try:
                tamper(matrix, rng)
            except (ValueError, TypeError, AttributeError, IndexError):
                pass  # scipy refused this change: the matrix is as it was
        print(f"matrix {i} {layout}", flush=True)
        for argument in ("Y", "mask"):
            try:
                if argument == "Y":
                    as_observed(matrix)
                else:
                    as_observed(np.ones(_shape(matrix)), mask=matrix)
            except (ValueError, TypeError) as error:
                if argument in str(error):
                    continue
                outcome, message = f"{type(error).__name__} without {argument!r}", str(error)
            except Exception as error:  # what the test reports
                outcome, message = f"raw {type(error).__name__}", str(error)
            else:
                continue
            record = {"file": f"matrix {i} {layout}", "reader": argument, "outcome": outcome}
            print(json.dumps({**record, "message": message})[:400], flush=True)


def _shape(matrix) -> tuple[int, int]:
    """The shape of Y for a tampered mask: its own if sane, else (3, 2)."""
    shape = matrix._shape
    sane = len(shape) == 2 and all(isinstance(n, int) and 0 < n < 100 for n in shape)
    return tuple(shape) if sane else (3, 2)


def main(seed: int, count: int, folder: Path, matrices: int = 0) -> None:
    FITS.extend(saved_fits(folder))
    rng = random.Random(seed)
    warnings.simplefilter("ignore")
    for i in range(count):
        kind = KINDS[i % len(KINDS)]
        suffix = {"fit": ".npz", "csr": ".npz", "csc": ".npz", "coo": ".npz"}.get(kind, "")
        suffix = f".csv.{kind}" if kind in CODECS else suffix
        path = folder / f"f{seed}-{i}-{kind}{suffix or '.' + kind}"
        path.write_bytes(damaged(kind, rng, folder))
        print(f"file {path.name}", flush=True)
        for name, read in readers(kind, path).items():
            try:
                touch(read())
            except ValueError as error:
                if str(path) in str(error):
                    continue
                outcome, message = "ValueError without the file's name", str(error)
            except Exception as error:  # what the test reports
                outcome, message = f"raw {type(error).__name__}", str(error)
            else:
                continue
            record = {"file": path.name, "reader": name, "outcome": outcome, "message": message}
            print(json.dumps(record)[:400], flush=True)
        path.unlink()
    check_matrices(seed, matrices)
    print("done", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), *map(int, sys.argv[4:5]))
