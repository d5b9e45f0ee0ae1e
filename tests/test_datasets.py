"""The dataset loader: local folder (.csv and .rda), checked download, clear errors."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import rda_files as R
from helpers import SHARED, shared_file

from bernmf.data import datasets
from bernmf.data.files import csv_table as csv_reader
from bernmf.data.files import streams

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """No local data folder, an empty cache, and no real network."""
    monkeypatch.delenv("BERNMF_DATA_DIR", raising=False)
    monkeypatch.setenv("BERNMF_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def copying_downloader(source):
    """A pooch downloader that 'downloads' by copying a local file."""
    calls = []

    def download(url, output_file, pooch):
        calls.append(url)
        shutil.copyfile(source, output_file)

    download.calls = calls
    return download


@pytest.mark.parametrize("name", sorted(datasets.DATASETS))
def test_load_from_data_dir_has_shape_and_labels(name):
    shared_file("data", f"{name}.csv")
    frame = datasets.load(name, data_dir=SHARED / "data")
    assert frame.shape == datasets.SHAPES[name]
    assert frame.dtypes.unique().tolist() == [np.int64]
    assert set(np.unique(frame.to_numpy())) == {0, 1}
    assert frame.index.is_unique and frame.columns.is_unique
    assert all(isinstance(label, str) for label in [*frame.index[:3], *frame.columns[:3]])


def test_rda_and_csv_give_the_same_frame(tmp_path):
    for name in ("animals", "paleo"):
        rda = tmp_path / "rda"
        rda.mkdir(exist_ok=True)
        shutil.copy(shared_file("data", f"{name}.rda"), rda)
        from_rda = datasets.load(name, data_dir=rda)
        from_csv = datasets.load(name, data_dir=SHARED / "data")
        pd.testing.assert_frame_equal(from_rda, from_csv)
    assert "Dorn Dürkheim" in from_rda.columns  # UTF-8 names read right from the .rda


def test_environment_variable_points_at_the_folder(monkeypatch):
    shared_file("data", "animals.csv")
    monkeypatch.setenv("BERNMF_DATA_DIR", str(SHARED / "data"))
    frame = datasets.load("animals")
    assert frame.loc["killer+whale", "lean"] in (0, 1)


def test_download_is_checked_and_cached(offline):
    source = shared_file("data", "animals.rda")
    downloader = copying_downloader(source)
    frame = datasets.load("animals", downloader=downloader)
    assert frame.shape == (50, 85)
    assert downloader.calls == [datasets.URL.format(name="animals")]
    assert (offline / "cache" / "animals.rda").is_file()
    datasets.load("animals", downloader=downloader)  # second time: from the cache
    assert len(downloader.calls) == 1
    assert datasets.load("animals", download=False).equals(frame)


def test_download_with_a_wrong_checksum_is_refused(offline):
    downloader = copying_downloader(shared_file("data", "paleo.rda"))  # not animals
    with pytest.raises(ValueError, match=r"(?i)hash"):
        datasets.load("animals", downloader=downloader)
    assert not (offline / "cache" / "animals.rda").exists()


def test_no_network_and_no_local_copy_says_where_to_put_the_file(offline):
    def no_network(url, output_file, pooch):
        raise ConnectionError("network is unreachable")

    (offline / "empty").mkdir(exist_ok=True)  # a folder without the file
    with pytest.raises(OSError, match="BERNMF_DATA_DIR") as info:
        datasets.load("lastfm", data_dir=offline / "empty", downloader=no_network)
    assert "lastfm.rda" in str(info.value)
    with pytest.raises(OSError, match="data_dir"):
        datasets.load("lastfm", download=False)


def test_unknown_dataset():
    with pytest.raises(ValueError, match="animals"):
        datasets.load("mnist")


def test_read_csv_of_a_user_table_with_missing_cells(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text(",a,b,c\n001,1,0,\nx y,0,,1\n", encoding="utf-8")
    frame = datasets.read_csv(path)
    assert frame.index.tolist() == ["001", "x y"]
    assert frame.columns.tolist() == ["a", "b", "c"]
    assert frame.dtypes.unique().tolist() == [np.float64]
    np.testing.assert_array_equal(frame.isna().to_numpy(), [[0, 0, 1], [0, 1, 0]])
    assert frame.loc["001", "a"] == 1


@pytest.mark.parametrize("cell", ["2", "yes", "0.5"])
def test_read_csv_rejects_non_binary_cells(tmp_path, cell):
    path = tmp_path / "bad.csv"
    path.write_text(f",a,b\nr,1,{cell}\n", encoding="utf-8")
    with pytest.raises(ValueError, match="0, 1 or empty"):
        datasets.read_csv(path)


@pytest.mark.parametrize(
    ("text", "index", "columns"),
    [
        (",a,b\nx,1,0\ny,0,1\n", ["x", "y"], ["a", "b"]),  # R's write.csv, pandas' to_csv
        ("x,1,0\ny,0,1\n", ["x", "y"], [0, 1]),  # row names, no header
        ("a,b\n1,0\n0,1\n", [0, 1], ["a", "b"]),  # header, no row names
        ("1,0\n0,1\n", [0, 1], [0, 1]),  # neither: the first line is data
        (",1,0\n1,0,\n", [0, 1], [0, 1, 2]),  # a missing first cell is not a corner
        (",0,1,2\n0,1,0,1\n1,0,1,1\n2,1,1,0\n", ["0", "1", "2"], ["0", "1", "2"]),  # numbered
    ],
)
def test_read_csv_detects_header_and_row_names(tmp_path, text, index, columns):
    path = tmp_path / "layout.csv"
    path.write_text(text, encoding="utf-8")
    frame = datasets.read_csv(path)
    assert frame.index.tolist() == index and frame.columns.tolist() == columns
    assert frame.shape == (len(index), len(columns))


@pytest.mark.parametrize(
    ("text", "read_as"),
    [
        ("2001,2002\n1,0\n", "no header line and no row names"),  # numbers are not names
        ("id,a,b\n1,1,0\n2,0,1\n", "a header line and no row names"),  # nor row numbers
    ],
)
def test_read_csv_refuses_numbers_as_names_saying_how_it_read(tmp_path, text, read_as):
    path = tmp_path / "numbers.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=f"0, 1 or empty; found .*read with {read_as}"):
        datasets.read_csv(path)


@pytest.mark.parametrize("suffix", [".csv.gz", ".csv.bz2", ".csv.xz", ".csv.zip"])
def test_a_compressed_csv_reads_as_the_plain_one_everywhere(tmp_path, suffix):
    from bernmf.data.files import readers

    Y = (np.random.default_rng(1).random((23, 7)) < 0.3).astype(float)
    Y[2, 3] = np.nan
    frame = pd.DataFrame(Y, index=[f"r{i}" for i in range(23)], columns=list("abcdefg"))
    frame.to_csv(tmp_path / "plain.csv", na_rep="")
    frame.to_csv(tmp_path / f"packed{suffix}", na_rep="")  # compression told by the suffix
    plain = datasets.read_csv(tmp_path / "plain.csv")
    pd.testing.assert_frame_equal(datasets.read_csv(tmp_path / f"packed{suffix}"), plain)
    pd.testing.assert_frame_equal(readers.read_matrix(tmp_path / f"packed{suffix}"), plain)
    assert readers.count_rows(tmp_path / f"packed{suffix}") == 23
    pd.testing.assert_frame_equal(readers.read_rows(tmp_path / f"packed{suffix}", 5, 9), plain[5:9])
    with pytest.raises(ValueError, match=r"\.csv\.gz"):
        readers.read_matrix(tmp_path / "plain.csv").to_csv(tmp_path / "x.txt.gz")
        readers.read_matrix(tmp_path / "x.txt.gz")


def test_only_empty_and_na_cells_are_missing_and_names_are_never_missing(tmp_path):
    path = tmp_path / "names.csv"
    path.write_text(",NA,null,b\nNA,1,,NA\nnull,0,1,0\nN/A,1,0,1\n", encoding="utf-8")
    frame = datasets.read_csv(path)
    assert frame.index.tolist() == ["NA", "null", "N/A"]
    assert frame.columns.tolist() == ["NA", "null", "b"]
    np.testing.assert_array_equal(frame.isna().to_numpy(), [[0, 1, 1], [0, 0, 0], [0, 0, 0]])
    for spelling in ("null", "NaN", "N/A", "None"):
        path.write_text(f",a,b\nx,1,{spelling}\n", encoding="utf-8")
        with pytest.raises(ValueError, match=f"0, 1 or empty; found \\['{spelling}'\\]"):
            datasets.read_csv(path)


def test_the_fast_read_agrees_with_the_cell_by_cell_read(tmp_path):
    rng = np.random.default_rng(2)
    Y = (rng.random((150, 40)) < 0.2).astype(float)
    Y[rng.random(Y.shape) < 0.16] = np.nan
    layouts = {
        "both": {}, "header": {"index": False}, "names": {"header": False},
        "neither": {"index": False, "header": False},
    }  # fmt: skip
    frame = pd.DataFrame(
        Y, index=[f"r{i}" for i in range(150)], columns=[f"c{j}" for j in range(40)]
    )
    for name, options in layouts.items():
        path = tmp_path / f"{name}.csv"
        frame.to_csv(path, na_rep="", **options)
        fast, exact = datasets.read_csv(path), csv_reader._read_cells(path, (0, 1))
        pd.testing.assert_frame_equal(fast, exact, check_index_type=False)
    # a name far below the first lines: the fast read gives way to the exact one
    text = (tmp_path / "neither.csv").read_text().splitlines()
    text[100] = "stray," + text[100].split(",", 1)[1]
    (tmp_path / "late.csv").write_text("\n".join(text) + "\n")
    with pytest.raises(ValueError, match="first column mixes names and numbers"):
        datasets.read_csv(tmp_path / "late.csv")


MATRIX = R.matrix([[1, 0, 1], [0, 0, 1]], rows=["a", "b"])
DATA_FRAME = R.vector(
    R.VEC, [R.vector(R.INT, [1, 0])], R.pairlist([("class", R.vector(R.STR, ["data.frame"]))]),
    obj=True,
)  # fmt: skip
"""A data frame without row names."""


def attribute_named(symbol: bytes) -> bytes:
    """An integer with one attribute, named by ``symbol`` (a SYMSXP's bytes)."""
    cell = R.header(R.LIST, tag=True) + symbol + R.vector(R.INT, [1]) + R.header(R.NILVALUE)
    return R.vector(R.INT, [1], cell)


@pytest.mark.parametrize("compression", ["gzip", "bzip2", "xz", None])
def test_an_rda_is_read_within_the_memory_budget_whatever_it_inflates_to(
    tmp_path, monkeypatch, compression
):
    """An .rda is decompressed by its first bytes, in bounded steps: a matrix (or a bomb)
    larger than the memory limit allows its reader is refused, the file named."""
    import rdata

    from bernmf.data.files.streams import OverBudget

    small = (np.arange(12).reshape(4, 3) % 2).astype(float)
    large = np.zeros((300, 300))  # 720 KB of doubles: over 2 MB / RDA_COST once inflated
    for name, matrix in (("small", small), ("large", large)):
        rdata.write_rda(tmp_path / f"{name}.rda", {name: matrix}, compression=compression)
    monkeypatch.setenv("BERNMF_MEMORY_LIMIT", "2e6")
    assert datasets.read_rda(tmp_path / "small.rda").to_numpy().tolist() == small.tolist()
    with pytest.raises(OverBudget, match=r"large\.rda: more data"):
        datasets.read_rda(tmp_path / "large.rda")


def test_an_rda_bomb_and_a_damaged_rda_are_refused_by_name(tmp_path, monkeypatch):
    import gzip

    bomb = tmp_path / "bomb.rda"
    bomb.write_bytes(gzip.compress(b"RDX2\nX\n" + bytes(50_000_000), compresslevel=9))
    assert bomb.stat().st_size < 100_000
    monkeypatch.setenv("BERNMF_MEMORY_LIMIT", "2e6")
    with pytest.raises(ValueError, match=r"bomb\.rda: more data once decompressed"):
        datasets.read_rda(bomb)
    damaged = tmp_path / "damaged.rda"
    damaged.write_bytes(b"BZh9" + bytes(100))
    with pytest.raises(ValueError, match=r"damaged\.rda: damaged"):
        datasets.read_rda(damaged)
    garbage = tmp_path / "garbage.rda"
    garbage.write_bytes(b"RDX2\nX\n" + bytes(range(256)))
    with pytest.raises(ValueError, match=r"garbage\.rda"):
        datasets.read_rda(garbage)


@pytest.mark.parametrize(
    ("sequence", "said"),
    [
        (R.compact_seq(3e8, dim=[20000, 15000]),
         "compact_realseq of 300000000 doubles would need 38.4 GB"),
        (R.compact_seq(2**31 - 2, integer=True),
         "compact_intseq of 2147483646 integers would need 137.4 GB"),
        (R.compact_seq(1e15, 0),
         "compact_realseq of 1000000000000000 doubles would need 128000.0 TB"),
    ],
    ids=["3e8-doubles-as-a-matrix", "2**31-integers", "1e15-doubles"],
)  # fmt: skip
def test_an_altrep_sequence_is_sized_against_the_budget_before_it_is_expanded(
    tmp_path, monkeypatch, sequence, said
):
    """A file of 134 bytes reached 5.0 GB under a budget of 500 MB: rdata expanded the
    compact sequence it holds (``1:3e8``, ``dim<-`` 20000 x 15000), whatever its length."""
    path = tmp_path / "bomb.rda"
    path.write_bytes(R.rda({"bomb": sequence}))
    assert path.stat().st_size < 200
    monkeypatch.setenv("BERNMF_MEMORY_LIMIT", "5e8")
    with pytest.raises(ValueError) as error:
        datasets.read_rda(path)
    assert str(error.value) == (
        f"{path}: reading its {said}, more than the memory limit of 500.0 MB "
        "(set BERNMF_MEMORY_LIMIT to raise it)"
    )


@pytest.mark.parametrize("integer", [True, False])
def test_compact_sequences_within_the_budget_are_read_increasing_or_decreasing(tmp_path, integer):
    """R's ``1:0`` was one item long (rdata's expansion), so its matrix was refused."""
    for start, step, values in ((0, 1, [[0], [1]]), (1, -1, [[1], [0]])):
        path = tmp_path / "seq.rda"
        path.write_bytes(R.rda({"seq": R.compact_seq(2, start, step, integer, dim=[2, 1])}))
        assert datasets.read_rda(path).to_numpy().tolist() == values


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (R.rda({"x": R.nest(R.VEC, 2000)}), "R objects nested more than 100 levels deep"),
        (R.rda({"x": R.nest(R.LIST, 2000)}), "R objects nested more than 100 levels deep"),
        (R.rda({f"x{i}": R.header(R.NILVALUE) for i in range(150)}), "pairlist of over 100 items"),
        (R.rda({"x": MATRIX}, "none") + b"\0\0", "damaged or not an R data file: 2 bytes after"),
        (R.rda({"x": MATRIX}, "none")[:-9], "damaged or not an R data file: it ends inside"),
        (R.rda({"x": R.vector(R.REAL, [1], length=2**31 - 1)}), "2147483647 items of 8 bytes"),
        (R.rda({"x": R.vector(R.INT, [1], length=-1)}), "R's long vectors"),
        (R.rda({"x": R.NOT_DATA["closure"]}), "holds a function (an R object of type 3), which"),
        (R.rda({"x": R.NOT_DATA["environment"]}), "holds an environment (an R object of type 4)"),
        (R.rda({"x": R.altrep("vroom_dbl", R.header(R.NILVALUE))}), "of class 'vroom_dbl'"),
        (R.rda({"x": R.altrep("compact_realseq", R.vector(R.REAL, [3, 1]))}), "whose state is not"),
        (R.rda({"x": R.reference(7)}), "not an R data file: a reference to symbol 7 of 1"),
        (b"RDA3\nA\n3\n262657\n197888\n", "written in R's ASCII format"),
        (b"RDS3\n" + bytes(30), "it does not start as R's save writes a file"),
        (R.rda({"x": DATA_FRAME}), "damaged or not an R data file ('row.names')"),
        (R.rda({"x": attribute_named(R.header(R.SYM) + R.char(None))}), "whose name is NA"),
        (R.rda({"x": attribute_named(R.header(R.SYM) + R.header(R.CHAR, levels=2) + R.ints(1)
                                     + b"a")}), "not an R data file (AssertionError)"),
    ],
    ids=["deep-list", "deep-pairlist", "long-pairlist", "trailing-bytes", "truncated", "length",
         "long-vector", "closure", "environment", "altrep-class", "altrep-state", "reference",
         "ascii", "magic", "data-frame", "na-name", "bytes-name"],
)  # fmt: skip
def test_a_malformed_rda_is_refused_saying_what_is_wrong(tmp_path, content, said):
    """Malformed files gave "maximum recursion depth exceeded", an AssertionError (trailing
    bytes), rdata's words or a MemoryError: each a ValueError that names the file."""
    path = tmp_path / "x.rda"
    path.write_bytes(content)
    with pytest.raises(ValueError) as error:
        datasets.read_rda(path)
    assert str(error.value).startswith(f"{path}: ")
    assert said in str(error.value)


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (R.vector(R.STR, [""] * 20000 + ["x" * 10**6]), "20006 R objects (1.2 MB of data and"),
        (R.vector(R.VEC, [R.header(R.NILVALUE)] * 300_000), "300005 R objects (1.2 MB of data)"),
    ],
    ids=["strings", "objects"],
)
def test_what_rdata_builds_is_sized_against_the_budget_before_it_is_built(
    tmp_path, monkeypatch, content, said
):
    """A character vector is a numpy array as wide as its longest string, each string (74.5
    GiB asked for by a file of 1.4 KB); an R object of 4 bytes takes 350 bytes built."""
    path = tmp_path / "x.rda"
    path.write_bytes(R.rda({"x": content}))
    monkeypatch.setenv("BERNMF_MEMORY_LIMIT", "1e8")
    with pytest.raises(ValueError, match=re.escape(f"{path}: reading its {said}")):
        datasets.read_rda(path)


def test_a_dataset_file_without_the_dataset_names_the_file_and_what_it_holds(tmp_path):
    """``load("animals")`` of an animals.rda holding another object said only ``'animals'``."""
    (tmp_path / "animals.rda").write_bytes(R.rda({"x": MATRIX, "y": MATRIX}))
    with pytest.raises(ValueError) as error:
        datasets.load("animals", data_dir=tmp_path)
    assert str(error.value) == (
        f"{tmp_path / 'animals.rda'}: holds no R object named 'animals', only ['x', 'y']"
    )


@pytest.mark.parametrize("kind", [R.LGL, R.INT, R.REAL])
@pytest.mark.parametrize("named", [False, True])
def test_r_na_in_a_matrix_is_missing(tmp_path, kind, named):
    """An NA in a logical matrix without dimnames was read as 1, in an integer one refused."""
    values = np.array([[1, np.nan if kind == R.REAL else R.NA_INTEGER], [0, 1]])
    rows = ["a", "b"] if named else None
    (tmp_path / "y.rda").write_bytes(R.rda({"y": R.matrix(values, kind, rows=rows)}))
    frame = datasets.read_rda(tmp_path / "y.rda")
    np.testing.assert_array_equal(frame.to_numpy(), [[1, np.nan], [0, 1]])


@pytest.mark.parametrize("file_format", ["xdr", "binary"])
@pytest.mark.parametrize("version", [2, 3])
def test_rdas_of_both_formats_and_versions_are_read(tmp_path, file_format, version):
    import rdata

    Y = np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    path = tmp_path / "y.rda"
    rdata.write_rda(path, {"y": Y}, file_format=file_format, format_version=version)
    np.testing.assert_array_equal(datasets.read_rda(path).to_numpy(), Y)


PEAK_READ = """
import sys
from tests.rda_files import peak_of
from bernmf.data.datasets import read_rda
read_rda(sys.argv[1])  # the imports of a first read
taken, outcome = peak_of(lambda: read_rda(sys.argv[2]))
print(taken, str(outcome)[:200])
"""


@pytest.mark.slow
@pytest.mark.parametrize("altrep", [False, True])
def test_reading_an_r_matrix_near_the_budget_takes_the_budget_at_most(tmp_path, altrep):
    """1.4 million distinct integers, as a vector or as R's ``0:(n - 1)``, taking 95% of a
    budget of 100 MB as counted: the vector took 107 MB before its cells were checked
    without a Python object each."""
    n = int(0.95 * 1e8 / (streams.RDA_COST * 4)) // 2 * 2
    (tmp_path / "warm.rda").write_bytes(R.rda({"warm": MATRIX}))
    values = (
        R.compact_seq(n, 0, 1, True, dim=[n // 2, 2])
        if altrep
        else R.matrix(np.arange(n).reshape(-1, 2), R.INT)
    )
    (tmp_path / "near.rda").write_bytes(R.rda({"near": values}))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BERNMF_MEMORY_LIMIT": "1e8"}
    done = subprocess.run(
        [sys.executable, "-c", PEAK_READ, str(tmp_path / "warm.rda"), str(tmp_path / "near.rda")],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    taken, said = done.stdout.split(" ", 1)
    assert said.startswith(f"{tmp_path / 'near.rda'}: cells must be 0, 1 or empty")
    assert int(taken) <= 1e8, int(taken)
