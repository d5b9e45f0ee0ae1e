"""The bounded reader of text files (bernmf.data.files.streams) under every data reader.

Compressed and plain CSVs are read within the memory limit whatever they inflate to,
and every damaged, mislabelled or encrypted file is a ValueError naming it.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bernmf.data.files import readers

ROOT = Path(__file__).resolve().parents[1]
ROW = ",".join("01"[j % 2] for j in range(100)) + "\n"
"""A CSV row of 100 cells, 200 bytes."""

COMPRESS = {
    ".gz": gzip.compress,
    ".bz2": bz2.compress,
    ".xz": lzma.compress,
    ".zip": lambda data: zip_of({"y.csv": data}),
}


def zip_of(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def every_reader(path):
    """Every reader of a data file, with the CLI's ``--mask`` and ``--split``."""
    return {
        "read_matrix": lambda: readers.read_matrix(path),
        "read_mask": lambda: readers.read_mask(path, (10, 100)),
        "read_codes": lambda: readers.read_codes(path, np.zeros((10, 100))),
        "read_rows": lambda: readers.read_rows(path, 0, 5),
        "count_rows": lambda: readers.count_rows(path),
    }


@pytest.mark.parametrize("suffix", [*COMPRESS, ".gz-multi"])
def test_compressed_csvs_read_as_the_plain_file_does(tmp_path, suffix):
    Y = (np.random.default_rng(0).random((10, 100)) < 0.5).astype(int)
    text = pd.DataFrame(Y).to_csv(header=False, index=False).encode()
    if suffix == ".gz-multi":  # two gzip members, as `cat a.gz b.gz` makes
        content, suffix = gzip.compress(text[:1000]) + gzip.compress(text[1000:]), ".gz"
    else:
        content = COMPRESS[suffix](text)
    path = tmp_path / f"y.csv{suffix}"
    path.write_bytes(content)
    np.testing.assert_array_equal(readers.read_matrix(path).to_numpy(), Y)
    np.testing.assert_array_equal(readers.read_rows(path, 3, 7).to_numpy(), Y[3:7])
    assert readers.count_rows(path) == 10
    np.testing.assert_array_equal(readers.read_mask(path, Y.shape), Y == 1)


@pytest.mark.parametrize("suffix", [*COMPRESS, ".gz-multi", ".csv-plain"])
def test_a_bomb_of_any_format_is_refused_at_the_budget_naming_file_and_budget(
    tmp_path, monkeypatch, suffix
):
    text = (ROW * 5000).encode()  # 1 MB of text
    if suffix == ".gz-multi":
        content, suffix = gzip.compress(text) * 4, ".gz"
    elif suffix == ".csv-plain":
        content, suffix = text, ""
    else:
        content = COMPRESS[suffix](text)
    path = tmp_path / f"bomb.csv{suffix}"
    path.write_bytes(content)
    monkeypatch.setenv("BERNMF_MEMORY_LIMIT", "4e6")  # text: (4 MB - 100 x 2048) / 20
    calls = every_reader(path)
    if not suffix:  # lines of a plain file are counted, or skipped, one at a time
        assert calls.pop("count_rows")() == 5000
        assert calls.pop("read_rows")().shape == (5, 100)
    for name, read in calls.items():
        with pytest.raises(
            ValueError,
            match=r"more text .*than 189.8 KB: its reader takes up to 20 bytes of memory a "
            r"byte, beside 204.8 KB for its columns, within the memory limit of 4.0 MB",
        ) as error:
            read()
        assert str(error.value).startswith(str(path)), name


def test_one_endless_line_is_refused_at_the_line_bound(tmp_path, monkeypatch):
    path = tmp_path / "line.csv.gz"
    path.write_bytes(gzip.compress(b"0," * 10**6))  # 2 MB, no line break
    monkeypatch.setenv("BERNMF_MEMORY_LIMIT", "64e6")  # a line: 1 MB; the text: 3.2 MB
    for read in every_reader(path).values():
        with pytest.raises(ValueError, match=r"line.csv.gz: a line longer than 1.0 MB, 1/64"):
            read()


def test_rows_of_a_large_plain_csv_are_bounded_by_what_is_kept(tmp_path, monkeypatch):
    """A process of a distributed fit reads its block of a file larger than its budget."""
    path = tmp_path / "y.csv"
    path.write_text(ROW * 5000)  # 1 MB
    monkeypatch.setenv("BERNMF_MEMORY_LIMIT", "4e6")  # text: 189.8 KB
    assert readers.count_rows(path) == 5000  # one line at a time
    assert readers.read_rows(path, 4000, 4500).shape == (500, 100)  # 100 KB kept
    with pytest.raises(ValueError, match=r"y.csv: more text than 189.8 KB"):
        readers.read_rows(path, 1000, 3000)


def test_a_refusal_too_large_to_name_its_cells_says_so(tmp_path, monkeypatch):
    path = tmp_path / "typo.csv"
    path.write_text(ROW * 2000 + "0,x\n")  # 400 KB: read as numbers, not as text cells
    monkeypatch.setenv("BERNMF_MEMORY_LIMIT", "16e6")  # numbers: 790 KB, cells: 195 KB
    with pytest.raises(ValueError, match=r"typo.csv: .*\(its cells are not named: more text"):
        readers.read_matrix(path)
    monkeypatch.setenv("BERNMF_MEMORY_LIMIT", "64e6")
    with pytest.raises(ValueError, match=r"typo.csv: cells must be 0, 1 or empty; found \['x'\]"):
        readers.read_matrix(path)


def test_a_table_of_too_many_columns_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    """pandas spends about 1.5 KB a column: one line of 10^6 cells (2 MB) took 1.5 GB."""
    path = tmp_path / "wide.csv.gz"
    path.write_bytes(gzip.compress(("0," * 4999 + "1\n").encode() * 2))  # 10 KB a line
    monkeypatch.setenv("BERNMF_MEMORY_LIMIT", "4e6")  # 1953 columns, a line of 62.5 KB
    message = r"wide.csv.gz: 5000 columns take about 10.2 MB to read \(2048 bytes a column\)"
    for read in every_reader(path).values():
        with pytest.raises(ValueError, match=message):
            read()


BOMB_READ = """
import resource, sys
from bernmf.data.files import readers
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    readers.read_matrix(sys.argv[1])
except ValueError as error:
    print(error)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


def test_reading_a_bomb_takes_the_budget_at_most(tmp_path):
    """100 MB of CSV text in a 0.1 MB .gz took 0.9 GB to read before (peak resident memory)."""
    path = tmp_path / "bomb.csv.gz"
    with gzip.open(path, "wb", compresslevel=9) as file:
        block = (ROW * 5000).encode()
        for _ in range(100):
            file.write(block)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BERNMF_MEMORY_LIMIT": "1e7"}
    done = subprocess.run(
        [sys.executable, "-c", BOMB_READ, str(path)], env=env, capture_output=True, text=True
    )
    message, peak = done.stdout.splitlines()
    assert message.startswith(f"{path}: more text once decompressed than 489.8 KB")
    assert int(peak) < 1e7 + 30e6, int(peak)


def damaged_files() -> dict[str, bytes]:
    """Files that are damaged, mislabelled, truncated, encrypted, of several members."""
    text = (ROW * 50).encode()
    gz, bz, xz = gzip.compress(text), bz2.compress(text), lzma.compress(text)
    archive = bytearray(zip_of({"y.csv": text}))
    end = archive.rfind(b"PK\x05\x06")
    directory = bytearray(archive)
    directory[end + 16 : end + 20] = (2**31).to_bytes(4, "little")  # an offset past the file
    encrypted = bytearray(archive)
    encrypted[6] |= 1
    encrypted[archive.find(b"PK\x01\x02") + 8] |= 1
    return {
        "plain.csv.gz": text,
        "plain.csv.bz2": text,
        "plain.csv.xz": text,
        "plain.csv.zip": text,
        "truncated.csv.gz": gz[: len(gz) // 2],
        "truncated.csv.bz2": bz[: len(bz) // 2],
        "truncated.csv.xz": xz[: len(xz) // 2],
        "flipped.csv.gz": gz[:20] + bytes([gz[20] ^ 0xFF]) + gz[21:],
        "flipped.csv.bz2": bz[:20] + bytes([bz[20] ^ 0xFF]) + bz[21:],
        "flipped.csv.xz": xz[:40] + bytes([xz[40] ^ 0xFF]) + xz[41:],
        "trailing.csv.gz": gz + b"garbage",
        "gzip.csv": gz,
        "directory.csv.zip": bytes(directory),
        "encrypted.csv.zip": bytes(encrypted),
        "two.csv.zip": zip_of({"a.csv": text, "b.csv": text}),
        "empty.csv.zip": zip_of({}),
        "long-field.csv": b'"' + b"x" * 200_000 + b'",1\n0,1\n',
        "latin1.csv": b"name,c\n\xe9t\xe9,1\n",
    }


@pytest.mark.parametrize("name", sorted(damaged_files()))
def test_damaged_files_are_a_value_error_naming_them(tmp_path, name):
    """Before: LZMAError, RuntimeError, OSError [Errno 22], _csv.Error, EOFError, ..."""
    path = tmp_path / name
    path.write_bytes(damaged_files()[name])
    for reader, read in every_reader(path).items():
        with pytest.raises(ValueError) as error:
            read()
        assert str(error.value).startswith(str(path)), (reader, str(error.value))


@pytest.mark.parametrize("layout", ["dense", "csr", "csc", "coo"])
def test_npz_names_of_rows_and_columns_come_back_as_labels(tmp_path, layout):
    """The recipe of docs/data.md: names beside the scipy.sparse fields or the array Y."""
    from scipy import sparse

    import bernmf

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        (rng.random((9, 5)) < 0.4).astype(np.int8),
        index=[f"paper {i}" for i in range(9)],
        columns=["=x", "année", "b", "007", ""],
    )
    names = {
        "row_names": np.asarray(frame.index, dtype=str),
        "col_names": np.asarray(frame.columns, dtype=str),
    }
    path = tmp_path / "y.npz"
    if layout == "dense":
        np.savez_compressed(path, Y=np.ascontiguousarray(frame.to_numpy()), **names)
    elif layout == "csr":  # the fields of scipy.sparse.save_npz, written directly
        matrix = sparse.csr_array(frame.to_numpy())
        np.savez_compressed(
            path, format="csr", shape=matrix.shape, data=matrix.data, indices=matrix.indices,
            indptr=matrix.indptr, **names,
        )  # fmt: skip
    else:
        sparse.save_npz(path, getattr(sparse, f"{layout}_array")(frame.to_numpy()))
        with np.load(path) as fields:
            np.savez_compressed(path, **fields, **names)
    read = readers.read_matrix(path)
    pd.testing.assert_frame_equal(read.astype(np.int8), frame)
    rows = readers.read_rows(path, 3, 7)
    assert list(rows.index) == list(frame.index[3:7]) and list(rows.columns) == list(frame.columns)
    fit = bernmf.fit(read, "mm", 2, max_iter=3)
    assert list(fit.frames.W.index) == list(frame.index)
    assert list(fit.frames.H.columns) == list(frame.columns)
    if layout != "dense":  # read as a sparse matrix, not densified to floats
        assert all(isinstance(t, pd.SparseDtype) for t in read.dtypes)


@pytest.mark.parametrize(
    ("names", "message"),
    [
        ({"row_names": np.arange(9)}, r"'row_names' must be 9 unicode strings .* got int64"),
        ({"col_names": np.array(["a", "b"])}, r"'col_names' must be 5 unicode strings"),
        ({"row_names": np.array([["a"] * 9])}, r"'row_names' must be 9 unicode strings"),
    ],
)
def test_npz_names_of_another_length_or_kind_are_refused(tmp_path, names, message):
    path = tmp_path / "y.npz"
    np.savez(path, Y=np.zeros((9, 5)), **names)
    for read in (lambda: readers.read_matrix(path), lambda: readers.read_rows(path, 0, 2)):
        with pytest.raises(ValueError, match=message) as error:
            read()
        assert str(error.value).startswith(str(path))


def test_a_row_groups_file_is_read_as_written(tmp_path):
    """Labels and groups as written ("007", a quoted comma), in the file's order; an empty
    or NA group is none; blank lines skipped; compressed like any CSV."""
    path = tmp_path / "groups.csv.gz"
    path.write_bytes(gzip.compress(b'animal,group\n007,spies\n"a,b",x\n\nc,\nd,NA\ne,x\n'))
    groups = readers.read_groups(path, ["007", "a,b", "c", "d", "e", "f"])
    assert groups.index.tolist() == ["007", "a,b", "c", "d", "e"]
    assert groups.tolist() == ["spies", "x", None, None, "x"]
    assert (groups.index.name, groups.name) == ("animal", "group")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the file is empty: it starts with a header line"),
        ("row,group\n", "no line after the header line"),
        ("a,x\nb,y\n", "the file names the row 'a': it starts with a header line"),
        ("row,group\n\nb,x,extra\n", r"line 3 has 3 cell\(s\); a row groups file has two a line"),
        ("row,group\nb\n", r"line 2 has 1 cell\(s\)"),
    ],
)
def test_a_row_groups_file_of_other_than_two_columns_after_a_header_is_refused(
    tmp_path, text, message
):
    path = tmp_path / "groups.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as error:
        readers.read_groups(path, ["a", "b"])
    assert str(error.value).startswith(f"{path}: ")
    with pytest.raises(FileNotFoundError, match="no row groups file"):
        readers.read_groups(tmp_path / "none.csv", ["a"])


def test_a_row_groups_bomb_is_refused_at_the_budget(tmp_path, monkeypatch):
    path = tmp_path / "groups.csv.gz"
    path.write_bytes(gzip.compress(b"row,group\n" + b"a,b\n" * 10**6))  # 4 MB of text
    monkeypatch.setenv("BERNMF_MEMORY_LIMIT", "4e6")  # text: 4 MB / 20
    with pytest.raises(ValueError, match=r"more text .*within the memory limit of 4.0 MB"):
        readers.read_groups(path, ["x"])
