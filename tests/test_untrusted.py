"""Untrusted files: every reader and ``load`` check a file's structure before using it.

The fuzz runs in worker processes (:mod:`tests.untrusted_files`, :mod:`tests.rda_files`),
so that a crash (a signal) fails the test instead of ending pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import sparse

from bernmf.data.files import readers
from bernmf.data.observed import as_observed
from bernmf.data.sparse import checked_coo

ROOT = Path(__file__).resolve().parents[1]
WORKERS = 2
"""Worker processes of the fuzz, each with its own seed."""
LIMITS = {"untrusted_files": "2e6", "rda_files": "2e7"}
"""The memory limit of a fuzz's workers: 100 KB of CSV text, 1.2 MB of R data."""


def fuzz(folder: Path, files: int, matrices: int = 0, worker: str = "untrusted_files") -> list:
    """``files`` generated files read, and ``matrices`` tampered matrices checked, by each
    worker (:mod:`tests.untrusted_files`, or :mod:`tests.rda_files`): no crash, no error
    but a ValueError naming the file (or a ValueError or TypeError naming the argument).
    The lines the workers print that are neither a file, a matrix nor a failure."""
    env = {
        **os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "OMP_NUM_THREADS": "1",
        "BERNMF_MEMORY_LIMIT": LIMITS[worker],  # bombs are small to make
    }  # fmt: skip
    workers = []
    for seed in range(WORKERS):
        (folder / str(seed)).mkdir()
        command = [sys.executable, "-m", f"tests.{worker}", str(seed), str(files)]
        command += [str(folder / str(seed))] + ([str(matrices)] if matrices else [])
        workers.append(
            subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
        )
    failures, read, checked, said = [], 0, 0, []
    for worker in workers:
        stdout, _ = worker.communicate(timeout=500)
        lines = stdout.splitlines()
        started = [line for line in lines if line.startswith(("file ", "matrix "))]
        read += sum(line.startswith("file ") for line in started)
        checked += sum(line.startswith("matrix ") for line in started)
        if worker.returncode != 0:
            failures.append(f"worker ended with {worker.returncode} at {started[-1:]}")
        failures += [line for line in lines if line.startswith("{")]
        said += [line for line in lines if not line.startswith(("file ", "matrix ", "{"))]
    assert not failures, "\n".join(failures[:20])
    assert (read, checked) == (WORKERS * files, WORKERS * matrices)
    return said


def test_fuzzed_files_and_matrices_are_read_or_refused_naming_them(tmp_path):
    """A deterministic subset of the fuzz below: 480 files, 120 matrices."""
    fuzz(tmp_path, files=240, matrices=60)


@pytest.mark.slow
def test_thousands_of_fuzzed_files_and_matrices_are_read_or_refused_naming_them(tmp_path):
    """3200 files of 12 formats (compressed CSVs included) and 600 matrices of 7 layouts."""
    fuzz(tmp_path, files=1600, matrices=300)


def rda_fuzz(folder: Path, files: int) -> None:
    """The fuzz of ``.rda`` files: no crash, every failure a ValueError naming the file,
    and no read taking more resident memory than the budget (each worker's peak)."""
    said = fuzz(folder, files, worker="rda_files")
    peaks = [int(line.split()[1]) for line in said if line.startswith("peak ")]
    assert len(peaks) == WORKERS
    assert max(peaks) <= float(LIMITS["rda_files"]), peaks


def test_fuzzed_r_files_are_read_or_refused_naming_them_within_the_budget(tmp_path):
    """A deterministic subset of the fuzz below: 24 files (2 of each of 12 kinds)."""
    rda_fuzz(tmp_path, files=12)


@pytest.mark.slow
def test_a_thousand_fuzzed_r_files_are_read_or_refused_naming_them_within_the_budget(tmp_path):
    """1040 ``.rda`` files: valid, crafted (ALTREP, nesting, declared lengths, strings, many
    objects, what is not data or not a matrix, near the budget), random or damaged, of
    every compression (:mod:`tests.rda_files`)."""
    rda_fuzz(tmp_path, files=520)


def save_npz(path, **fields):
    np.savez(path, **fields)
    return path


def csr_fields(shape, indices, indptr, layout=b"csr"):
    data = np.ones(len(indices))
    return {"format": np.array(layout), "shape": np.array(shape), "data": data,
            "indices": np.array(indices), "indptr": np.array(indptr)}  # fmt: skip


def every_read(path):
    return [
        lambda: readers.read_rows(path, 0, 3),
        lambda: readers.read_matrix(path),
        lambda: readers.read_mask(path, (4, 3)),
    ]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (csr_fields((4, 3), [0, 1, 2**30], [0, 1, 2, 3], b"csc"), "'indices' holds 1073741824"),
        (csr_fields((4, 3), [0, 99, 1], [0, 1, 2, 3, 3]), r"'indices' holds 99, outside \[0, 3\)"),
        (csr_fields((4, 3), [0, -1, 1], [0, 1, 2, 3, 3]), r"'indices' holds -1, outside \[0, 3\)"),
        (csr_fields((4, 3), [0, 1, 2], [0, 2, 1, 3, 3]), "'indptr' must be nondecreasing"),
        (csr_fields((4, 3), [0, 1, 2], [0, 1, 2]), "'indptr' must be 5 integers"),
        (csr_fields((4, 3), [0, 1, 2], [0, 1, 2, 9, 9]), "'indptr' must be nondecreasing"),
        (csr_fields((3, 10**12), [0], [0, 1, 1, 1]), r"'shape' \(3, 1000000000000\).* 3.0 TB"),
        (csr_fields((4, -3), [0], [0, 1, 1, 1, 1]), "'shape' must be 2 integers >= 0"),
        (csr_fields((4, 3), [0], [0, 1, 1, 1, 1], b"dia"), "'format' must be one of"),
        ({**csr_fields((4, 3), [0], [0, 1, 1, 1, 1]), "indices": np.array([0.5])}, "integers"),
    ],
    ids=[
        "csc-2**30",
        "csr-99",
        "csr-minus-1",
        "indptr-order",
        "indptr-length",
        "indptr-end",
        "shape-1e12",
        "shape-negative",
        "format",
        "float-indices",
    ],
)
def test_crafted_sparse_files_are_refused_naming_the_file_and_the_field(tmp_path, fields, message):
    path = save_npz(tmp_path / "b.npz", **fields)
    assert path.stat().st_size < 2000
    for read in every_read(path):
        with pytest.raises(ValueError, match=message) as error:
            read()
        assert str(error.value).startswith(str(path))


@pytest.mark.parametrize("layout", [sparse.csr_array, sparse.csc_array, sparse.coo_array])
@pytest.mark.parametrize("compressed", [False, True])
def test_sparse_files_of_every_layout_are_read(tmp_path, layout, compressed):
    Y = (np.random.default_rng(0).random((9, 4)) < 0.4).astype(np.int8)
    sparse.save_npz(tmp_path / "y.npz", layout(Y), compressed=compressed)
    whole = readers.read_matrix(tmp_path / "y.npz")
    assert isinstance(whole, sparse.csr_array)
    np.testing.assert_array_equal(whole.toarray(), Y)
    np.testing.assert_array_equal(readers.read_rows(tmp_path / "y.npz", 2, 7).toarray(), Y[2:7])
    assert readers.count_rows(tmp_path / "y.npz") == 9
    np.testing.assert_array_equal(readers.read_mask(tmp_path / "y.npz", Y.shape), Y == 1)


def test_npy_headers_are_checked_against_the_file_size(tmp_path):
    np.save(tmp_path / "y.npy", np.ones((4, 3)))
    content = (tmp_path / "y.npy").read_bytes()
    (tmp_path / "short.npy").write_bytes(content[:-8])
    (tmp_path / "long.npy").write_bytes(content.replace(b"(4, 3)", b"(9, 3)"))
    for name in ("short.npy", "long.npy"):
        for read in (readers.read_rows, lambda path, *_: readers.count_rows(path)):
            with pytest.raises(
                ValueError, match=r"declares shape \(\d, 3\) of float64 but it holds"
            ):
                read(tmp_path / name, 0, 2)


def test_rows_beyond_the_memory_budget_are_refused(tmp_path, monkeypatch):
    np.save(tmp_path / "y.npy", np.ones((100, 10)))
    np.savez(tmp_path / "y.npz", Y=np.ones((100, 10)))
    monkeypatch.setenv("BERNMF_MEMORY_LIMIT", "4000")
    for name in ("y.npy", "y.npz"):
        assert readers.read_rows(tmp_path / name, 0, 5).shape == (5, 10)  # 400 bytes
        with pytest.raises(ValueError, match=r"would need 8.0 KB, more than .* 4.0 KB"):
            readers.read_rows(tmp_path / name, 0, 100)


def test_split_codes_outside_0_1_2_name_the_split_file(tmp_path):
    np.savetxt(tmp_path / "split.csv", np.array([[2, 1], [0, 2]]), fmt="%d", delimiter=",")
    np.savez(tmp_path / "codes.npz", Y=np.array([[2, 1], [0, 3]]))
    with pytest.raises(
        ValueError, match=r"the split .*codes.npz: codes must be 0, 1 or 2, .*\[3\]"
    ):
        readers.read_codes(tmp_path / "codes.npz", np.zeros((2, 2)))
    assert readers.read_codes(tmp_path / "split.csv", np.zeros((2, 2))).train.sum() == 2


def test_rows_of_a_csv_without_row_names_keep_their_numbers(tmp_path):
    """A block of a header-less CSV is numbered as in the whole file (10..19, not 0..9)."""
    Y = (np.random.default_rng(0).random((20, 4)) < 0.5).astype(int)
    np.savetxt(tmp_path / "y.csv", Y, fmt="%d", delimiter=",")
    whole = readers.read_matrix(tmp_path / "y.csv")
    block = readers.read_rows(tmp_path / "y.csv", 10, 20)
    assert list(block.index) == list(whole.index[10:20]) == list(range(10, 20))
    np.testing.assert_array_equal(block.to_numpy(), Y[10:])


TAMPERED = """
import numpy as np
from scipy import sparse
import bernmf
from bernmf.studies.report.run import checked

Y = (np.random.default_rng(0).random((30, 20)) < 0.3).astype(float)
def tampered(layout, field, value):
    matrix = getattr(sparse, layout + "_array")(Y)
    if layout == "lil":
        matrix.rows[5].append(value)  # a column without its value
    else:
        (matrix.coords[0] if layout == "coo" else getattr(matrix, field))[5] = value
    return matrix
cases = [(layout, field, value) for layout in ("csr", "csc", "bsr") for field, value in
         (("indptr", 10**6), ("indptr", -5), ("indices", 10**6))]
cases += [("coo", "row", 10**6), ("lil", "rows", 3)]
for layout, field, value in cases:
    for argument in ("Y", "mask"):
        print(layout, field, argument, flush=True)
        matrix = tampered(layout, field, value)
        data, mask = (matrix, None) if argument == "Y" else (Y, matrix)
        try:
            bernmf.fit(data, "mm", 2, mask=mask, max_iter=2)
        except ValueError as error:
            print("ValueError:", error, flush=True)
for layout, field, value in cases:  # the scikit-learn front end, the report's table
    for argument in ("X", "data"):
        print(layout, field, argument, flush=True)
        matrix = tampered(layout, field, value)
        try:
            if argument == "X":
                bernmf.NBMF(n_components=2, max_iter=2).fit(matrix)
            else:
                checked({"data": matrix})
        except ValueError as error:
            print("ValueError:", error, flush=True)
"""


def test_inconsistent_sparse_matrices_in_memory_are_refused_not_a_crash():
    """An ``indptr`` changed after construction crashed ``fit`` in scipy (exit 139 or 134)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-c", TAMPERED], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    assert done.returncode == 0, f"ended with {done.returncode} after {lines[-1:]}"
    cases, errors = lines[0::2], lines[1::2]
    assert len(cases) == len(errors) == 44
    for case, error in zip(cases, errors, strict=True):
        layout, field, argument = case.split()
        shown = {"lil": "row 5's lists", "coo": "field 'row'"}.get(layout, f"field {field!r}")
        named = "dataset 'data': Y" if argument == "data" else argument  # the report's
        assert error.startswith(f"ValueError: {named}, a sparse {layout} matrix: {shown}"), (
            case,
            error,
        )


DIAGONALS = """
import numpy as np
from scipy import sparse
from bernmf.data.observed import as_observed

# matrix 174 of the fuzz's seed 1: 7 offsets for 2 diagonals, 2**62 and -2**62 among them
crafted = sparse.dia_array((np.ones((2, 2)), [0, 1]), shape=(3, 3))
crafted.offsets = np.array([2**31 - 1, -1, -(2**62), -(2**62), 2, 99, 2**62])
far = sparse.dia_array(np.ones((4, 4)))  # a diagonal moved to 2**62: outside the matrix
far.offsets = far.offsets.astype(np.int64)
far.offsets[far.offsets == 1] = 2**62
for matrix in (crafted, far):
    for argument in ("Y", "mask"):
        try:
            if argument == "Y":
                print(as_observed(matrix).ones.sum(), flush=True)
            else:
                print(as_observed(np.ones(matrix.shape), mask=matrix).mask.sum(), flush=True)
        except ValueError as error:
            print("ValueError:", error, flush=True)
"""


def test_a_diagonal_matrix_whose_offsets_do_not_fit_its_data_is_refused_not_a_crash():
    """scipy's ``dia_tocsr`` trusts ``offsets`` (one per row of ``data``, each an index
    once cast to int32): the fuzz's worker of seed 1 ended with a corrupted heap (glibc:
    double free or corruption). glibc's heap checks make the corruption an abort here."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    env["GLIBC_TUNABLES"] = "glibc.malloc.check=3"
    done = subprocess.run(
        [sys.executable, "-c", DIAGONALS], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    assert done.returncode == 0, f"ended with {done.returncode} after {lines[-1:]}"
    message = "a sparse dia matrix: field 'offsets' must be 2 integers"
    assert lines[:2] == [f"ValueError: {argument}, {message} in one dimension, got int64 (7,)"
                         for argument in ("Y", "mask")]  # fmt: skip
    assert lines[2:] == ["13", "13"]  # 16 entries but the 3 of the diagonal moved away


def _scipy_routines(monkeypatch) -> None:
    """Make every routine of scipy.sparse's C code (``_sparsetools``) fail if called."""
    from scipy.sparse import _sparsetools

    def refuse(name):
        def routine(*arguments):
            raise AssertionError(f"scipy's {name} ran on a matrix not yet checked")

        return routine

    modules = [module for name, module in sys.modules.items() if name.startswith("scipy.sparse")]
    routines = {name: getattr(_sparsetools, name) for name in dir(_sparsetools)}
    for name, routine in routines.items():
        for module in modules:
            if callable(routine) and getattr(module, name, None) is routine:
                monkeypatch.setattr(module, name, refuse(name))


@pytest.mark.parametrize("layout", ["csr", "csc", "bsr", "coo", "lil", "dok", "dia"])
@pytest.mark.parametrize("kind", ["array", "matrix"])
def test_sparse_matrices_in_memory_reach_scipy_only_as_checked_entries(monkeypatch, layout, kind):
    """No routine of scipy's C code reads a matrix's own arrays (a CSR's ``indptr``, a
    DIA's ``offsets`` ...): its entries are computed with numpy once checked."""
    Y = (np.random.default_rng(1).random((6, 4)) < 0.4).astype(float)
    Y[2, 3] = np.nan
    if layout == "bsr":
        matrix = getattr(sparse, f"bsr_{kind}")(Y, blocksize=(2, 2))
    else:
        matrix = getattr(sparse, f"{layout}_{kind}")(Y)
    _scipy_routines(monkeypatch)
    stored = checked_coo(matrix, "Y")
    dense = np.zeros(Y.shape)
    np.add.at(dense, tuple(stored.coords), stored.data)
    np.testing.assert_array_equal(dense, Y)
    assert not any(np.shares_memory(stored.data, array) for array in vars(matrix).values()
                   if isinstance(array, np.ndarray))  # fmt: skip


def test_entries_out_of_order_or_repeated_are_summed_and_small_indices_do_not_wrap():
    """The canonical flag is set only for entries in row order with no repeats (a CSR
    matrix's), so repeated entries are summed as ``toarray`` sums them; int8 column
    indices of a matrix of 300 rows give rows counted past 127."""
    Y = (np.random.default_rng(2).random((300, 5)) < 0.5).astype(float)
    csr = sparse.csr_array(Y)
    csr.indices = csr.indices.astype(np.int8)
    stored = checked_coo(csr, "Y")
    assert stored.has_canonical_format
    np.testing.assert_array_equal(stored.toarray(), Y)
    rows, columns = np.array([3, 0, 3, 1]), np.array([2, 1, 2, 0])
    repeated = sparse.coo_array((np.array([0.5, 1.0, 0.5, 1.0]), (rows, columns)), shape=(4, 3))
    stored = checked_coo(repeated, "Y")
    assert not stored.has_canonical_format
    np.testing.assert_array_equal(stored.toarray(), repeated.toarray())
    observed = as_observed(repeated)
    assert observed.ones[3, 2] and observed.ones.sum() == 3
