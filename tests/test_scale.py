"""Blocked sweeps, compact and sparse input, and sharding the rows over several devices."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
import tracemalloc
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from scipy import sparse

import bernmf
from bernmf.data.observed import as_observed
from bernmf.inference import mm
from bernmf.inference._compile import cache_size
from bernmf.inference.mm import layout

ROOT = Path(__file__).resolve().parents[1]


def masked_problem(seed=0, M=53, N=17):
    """Random Y with a random mask, one empty row (allowed; it warns)."""
    rng = np.random.default_rng(seed)
    Y = (rng.random((M, N)) < 0.35).astype(float)
    O = rng.random((M, N)) < 0.8
    O[7] = False
    return Y, O


def fit_quietly(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the empty row
        return bernmf.fit(*args, **kwargs)


def assert_same_fit(ours, reference, tolerance=1e-10):
    assert ours.n_iter == reference.n_iter
    np.testing.assert_allclose(ours.W, reference.W, rtol=0, atol=tolerance)
    np.testing.assert_allclose(ours.H, reference.H, rtol=0, atol=tolerance)
    np.testing.assert_allclose(ours.trace, reference.trace, rtol=tolerance)


@pytest.mark.parametrize(
    ("engine", "prior", "block_rows"),
    [
        ("mm", bernmf.Prior([1.0, 1.3, 2.0], 1.5, 1.4), 10),  # 53 rows padded to 60
        ("mm", bernmf.Prior(1.2, 1.1, 1.0), 1),
        ("em", None, 53),
    ],
)
def test_blocked_sweeps_equal_the_unblocked_ones(engine, prior, block_rows):
    Y, O = masked_problem()
    options = {"mask": O, "prior": prior, "max_iter": 80, "tol": 0, "accelerate": False}
    reference = fit_quietly(Y, engine, 3, **options)
    blocked = fit_quietly(Y, engine, 3, block_rows=block_rows, **options)
    assert blocked.extras["block_rows"] == block_rows
    assert_same_fit(blocked, reference)
    assert np.all(np.diff(blocked.trace) <= 1e-9 * np.abs(blocked.trace[1:]))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("prior", "accelerate"),
    [(bernmf.Prior([1.0, 1.3, 2.0], 1.5, 1.4), False), (bernmf.Prior(), False), (None, True)],
)
def test_sparse_ones_give_the_dense_sweeps(prior, accelerate):
    # the ones enter by gathers and segment sums: the same iterates, to rounding
    Y, O = masked_problem()  # with a row that has no observed entry
    options = {"mask": O, "prior": prior, "max_iter": 20 if accelerate else 80, "tol": 0}
    options |= {"accelerate": accelerate, "dtype": "float64"}
    dense = fit_quietly(Y, "mm", 3, layout="dense", block_rows=None, **options)
    for block_rows in (None, 10):  # whole rows; blocks of rows, 53 padded to 60
        sparse = fit_quietly(Y, "mm", 3, layout="sparse", block_rows=block_rows, **options)
        assert (dense.extras["layout"], sparse.extras["layout"]) == ("dense", "sparse")
        assert sparse.extras["block_rows"] == block_rows
        assert_same_fit(sparse, dense)
        assert np.all(np.diff(sparse.trace) <= 1e-9 * np.abs(sparse.trace[1:]))


@pytest.mark.slow
def test_auto_layout_takes_sparse_ones_below_the_density_threshold(monkeypatch):
    Y, O = masked_problem()
    density = Y[O].mean()
    monkeypatch.setattr(layout, "SPARSE_DENSITY", density + 0.01)
    assert fit_quietly(Y, "mm", 2, mask=O, max_iter=3).extras["layout"] == "sparse"
    blocked = fit_quietly(Y, "mm", 2, mask=O, max_iter=3, block_rows=10)
    assert blocked.extras["layout"] == "sparse"  # and over row blocks
    sharded = fit_quietly(Y, "mm", 2, mask=O, max_iter=3, devices=jax.devices()[:1])
    assert sharded.extras["layout"] == "dense"  # sparse ones are for one unsharded device
    monkeypatch.setattr(layout, "SPARSE_DENSITY", density - 0.01)
    assert fit_quietly(Y, "mm", 2, mask=O, max_iter=3).extras["layout"] == "dense"


def test_accelerated_blocked_sweeps_equal_the_unblocked_ones():
    # SQUAREM's extrapolations amplify rounding (sums in another order) over many
    # iterations on this weakly identified toy problem: compare over 20 (61 sweeps).
    Y, O = masked_problem()
    options = {"mask": O, "prior": bernmf.Prior([1.0, 1.3, 2.0], 1.5, 1.4), "max_iter": 20}
    options["dtype"] = "float64"  # sums in another order: equal to float64's rounding
    reference = fit_quietly(Y, "mm", 3, tol=0, block_rows=None, **options)
    blocked = fit_quietly(Y, "mm", 3, tol=0, block_rows=10, **options)  # padded to 60 rows
    assert blocked.record.sweeps == reference.record.sweeps == 61
    assert_same_fit(blocked, reference)


def test_blocked_sweep_stops_at_the_same_iteration():
    Y, O = masked_problem(1)
    options = {"mask": O, "tol": 1e-7, "dtype": "float64"}
    reference = fit_quietly(Y, "mm", 2, block_rows=None, **options)
    blocked = fit_quietly(Y, "mm", 2, block_rows=8, **options)
    assert reference.converged and blocked.converged
    assert_same_fit(blocked, reference)


@pytest.mark.slow
def test_auto_block_rows_blocks_only_what_does_not_fit(monkeypatch):
    assert layout.choose_block_rows("auto", 1000, 100, 1, 8) is None
    # On a CPU, past the cache: blocks of 8 MiB of temporaries per core (8 x 125 x 1000 x 8 B);
    # elsewhere only memory counts; lastfm's shape stays unblocked.
    assert layout.choose_block_rows("auto", 2000, 1000, 1, 8, "cpu") == 125
    assert layout.choose_block_rows("auto", 2000, 1000, 1, 8, "cpu", cores=2) == 250
    assert layout.choose_block_rows("auto", 2000, 1000, 1, 8, "gpu") is None
    assert layout.choose_block_rows("auto", 1226, 285, 1, 8, "cpu") is None
    monkeypatch.setattr(layout, "AUTO_BLOCK_BYTES", 8 * 100 * 8 * 300)  # 300 rows fit
    assert layout.choose_block_rows("auto", 1000, 100, 1, 8) == 250  # 4 even blocks, no padding
    assert layout.choose_block_rows("auto", 1000, 100, 4, 8) is None  # 250 rows per device fit
    assert layout.choose_block_rows(5000, 1000, 100, 1, 8) == 1000
    assert layout.padded_rows(1001, 250, 2) == 1500
    Y, O = masked_problem()
    monkeypatch.setattr(layout, "AUTO_BLOCK_BYTES", 8 * 17 * 8 * 20)
    options = {"mask": O, "max_iter": 30, "tol": 0, "dtype": "float64"}
    blocked = fit_quietly(Y, "mm", 3, block_rows="auto", **options)
    assert blocked.extras["block_rows"] == 18  # 53 rows in 3 blocks
    unblocked = fit_quietly(Y, "mm", 3, block_rows=None, **options)
    assert unblocked.extras["block_rows"] is None
    assert_same_fit(blocked, unblocked)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the cache rule is for CPUs")
def test_default_blocks_for_the_cpu_cache_with_the_same_result(monkeypatch):
    Y, O = masked_problem()
    monkeypatch.setattr(layout, "CPU_CACHE_BYTES", 8 * 17 * 8 * 20)  # 20 rows fit in the "cache"
    monkeypatch.setattr(layout, "CPU_BLOCK_BYTES_PER_CORE", 8 * 17 * 8 * 10)
    monkeypatch.setattr(layout, "cpu_cores", lambda: 2)  # blocks of up to 20 rows
    options = {"mask": O, "max_iter": 30, "tol": 0, "dtype": "float64"}
    blocked = fit_quietly(Y, "mm", 3, **options)  # block_rows="auto"
    assert blocked.extras["block_rows"] == 18  # 53 rows in 3 blocks
    unblocked = fit_quietly(Y, "mm", 3, block_rows=None, **options)
    assert_same_fit(blocked, unblocked)


@pytest.mark.slow
def test_blocked_temporaries_scale_with_the_block_not_with_the_matrix():
    M, N, K = 4000, 300, 8
    data = as_observed(np.random.default_rng(0).random((M, N)) < 0.3)
    temporaries = {}
    with jax.enable_x64(True):
        start = mm.random_init(jax.random.key(0), M, N, K, jnp.float64)
        prior = bernmf.Prior(*(jnp.ones(K) for _ in range(3)))
        for block_rows in (None, 100):
            choice = layout.Choice(block_rows, False, None)
            problem = layout.make_data(data, jnp.float64, choice)
            program = jax.jit(lambda *a: mm.solve(*a, max_iter=5))
            lowered = program.lower(start, problem, prior, jnp.asarray(1e-5))
            temporaries[block_rows] = lowered.compile().memory_analysis().temp_size_in_bytes
    dense = M * N * 8
    assert temporaries[None] > 2 * dense  # the unblocked sweep holds several (M, N) floats
    assert temporaries[100] < 16 * 100 * N * 8 + 16 * (M + N) * K * 8  # O(BN + (M + N)K)


def test_each_layout_is_its_own_small_type_with_every_field_filled():
    """make_data gives each layout its own type, and state_at its own state: no field of
    either is None (the shapes of one type do not depend on the layout)."""
    Y, O = masked_problem(3, M=12, N=6)
    data = as_observed(Y, O, warn_empty=False)
    expected = {
        layout.Choice(None, False, None): (layout.Dense, layout.Predictions),
        layout.Choice(None, True, None): (layout.SparseOnes, layout.OnesPredictions),
        layout.Choice(4, False, None): (layout.RowBlocks, layout.BlockTotals),
        layout.Choice(4, True, None): (layout.SparseRowBlocks, layout.OnesBlockTotals),
    }
    with jax.enable_x64(True):
        W, H = mm.random_init(jax.random.key(0), 12, 6, 2, jnp.float64)
        for choice, (kind, state_kind) in expected.items():
            problem = layout.make_data(data, jnp.float64, choice)
            state = layout.state_at(problem, W, H)
            assert type(problem) is kind and type(state) is state_kind
            optional = ("real_row", "axis_name")  # padding; a mesh axis
            fields = [f.name for f in dataclasses.fields(problem) if f.name not in optional]
            assert all(getattr(problem, name) is not None for name in fields), kind
            assert all(value is not None for value in state), state_kind


def test_sparse_bool_and_int8_input_give_the_same_fit_as_float():
    Y, O = masked_problem(2)
    reference = fit_quietly(Y, "mm", 2, mask=O, max_iter=40, tol=0, block_rows=None)
    for kind in (
        sparse.csr_array(Y),
        sparse.csc_matrix(Y),
        sparse.coo_array(Y),
        Y.astype(bool),
        Y.astype(np.int8),
    ):
        assert_same_fit(fit_quietly(kind, "mm", 2, mask=O, max_iter=40, tol=0), reference)
    # NaN stored in a sparse Y means missing; so does False in a sparse mask
    with_nan = np.where(O, Y, np.nan)
    assert_same_fit(fit_quietly(sparse.csr_array(with_nan), "mm", 2, max_iter=40, tol=0), reference)
    mask = sparse.csr_array(O)
    assert_same_fit(
        fit_quietly(sparse.csr_array(Y), "mm", 2, mask=mask, max_iter=40, tol=0), reference
    )


def test_compact_input_is_never_converted_to_float64():
    Y = np.random.default_rng(3).random((2000, 1000)) < 0.2  # 2 MB as bool, 16 MB as float
    for data in (
        Y,
        Y.astype(np.int8),
        sparse.csr_array(Y),
        sparse.csc_array(Y),
        sparse.coo_array(Y),
    ):
        tracemalloc.start()
        observed = as_observed(data)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 8 * Y.size, type(data)  # a few bool copies, no float64 one
        assert observed.ones.dtype == bool and observed.mask.dtype == bool
        np.testing.assert_array_equal(observed.ones, Y)
    assert observed.Y.dtype == np.float64 and observed.mask.all()
    np.testing.assert_array_equal(observed.Y, Y.astype(float))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (sparse.csr_array(np.array([[0.0, 2.0], [1.0, 0.0]])), r"e.g. \[2.0\]"),
        (sparse.coo_array(([1.0, 1.0], ([0, 0], [1, 1])), shape=(2, 2)), r"e.g. \[2.0\]"),
        (sparse.csr_array(np.array([[0, np.inf], [1, 0]])), "inf"),
        (sparse.csr_array((0, 3)), "empty"),
        (np.array([[0, 3], [1, 0]], np.int8), r"e.g. \[3\]"),
    ],
)
def test_bad_sparse_and_integer_input_is_a_clear_error(data, message):
    with pytest.raises(ValueError, match=message):
        bernmf.fit(data, "mm", 1)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"devices": []}, ValueError, "devices is empty"),
        ({"devices": "cpu"}, TypeError, "list of jax devices"),
        ({"devices": jax.devices()[0]}, TypeError, r"one device; use \[device\]"),
        ({"devices": [0, 1]}, TypeError, "must be jax devices"),
        ({"devices": jax.devices()[:1] * 2}, ValueError, "duplicates"),
        ({"block_rows": 0}, ValueError, "block_rows must be >= 1"),
        ({"block_rows": 2.5}, TypeError, "block_rows must be None, 'auto'"),
        ({"block_rows": "big"}, TypeError, "block_rows must be None, 'auto'"),
        ({"block_rows": True}, TypeError, "block_rows must be None, 'auto'"),
        ({"layout": "coo"}, ValueError, "layout must be one of"),
        ({"layout": "sparse", "devices": jax.devices()[:1]}, ValueError, "leave out devices"),
    ],
)
def test_bad_devices_and_block_rows_are_clear_errors_before_compilation(options, error, message):
    Y, _ = masked_problem()
    before = cache_size()
    for engine in ("mm", "em"):
        with pytest.raises(error, match=message):
            bernmf.fit(Y, engine, 2, **options)
    assert cache_size() == before


SHARDED_SCRIPT = textwrap.dedent(
    """
    import warnings
    import jax
    import numpy as np
    import bernmf

    assert len(jax.devices()) == 4, jax.devices()
    rng = np.random.default_rng(5)
    Y = (rng.random((51, 13)) < 0.35).astype(float)  # 51 rows: padded to 52 (to 56 blocked)
    O = rng.random(Y.shape) < 0.8
    O[3] = False
    prior = bernmf.Prior([1.0, 1.5, 1.2], 1.3, 1.4)
    devices = jax.devices()
    warnings.simplefilter("ignore", UserWarning)
    cases = [
        ("mm", dict(prior=prior, max_iter=60, tol=0, accelerate=False), dict(devices=devices)),
        ("mm", dict(prior=prior, max_iter=20, tol=0, dtype="float64"),
         dict(devices=jax.devices(), block_rows=7)),
        ("em", dict(tol=1e-7, dtype="float64"), dict(devices=jax.devices()[:3])),
        ("mm", dict(prior=prior, max_iter=20, tol=0, restarts=3, dtype="float64"),
         dict(devices=devices)),
    ]
    for engine, common, sharded in cases:
        one = bernmf.fit(Y, engine, 3, mask=O, **common)
        many = bernmf.fit(Y, engine, 3, mask=O, **common, **sharded)
        assert many.extras["devices"] == len(sharded["devices"])
        assert many.n_iter == one.n_iter, (many.n_iter, one.n_iter)
        np.testing.assert_allclose(many.W, one.W, rtol=0, atol=1e-10)
        np.testing.assert_allclose(many.H, one.H, rtol=0, atol=1e-10)
        np.testing.assert_allclose(many.trace, one.trace, rtol=1e-10)
        print(engine, sharded.get("block_rows"), "max |dW| =", np.abs(many.W - one.W).max())
    # dtype="auto": float32 sums in another order, so equal to float32's rounding
    auto = {"mask": O, "prior": prior, "max_iter": 20, "tol": 0, "dtype": "auto"}
    one = bernmf.fit(Y, "mm", 3, **auto)
    many = bernmf.fit(Y, "mm", 3, **auto, devices=devices)
    assert many.extras["float32_iterations"] > 0 and many.W.dtype == np.float64
    np.testing.assert_allclose(many.objective, one.objective, rtol=1e-5)
    print("OK")
    """
)


@pytest.mark.slow
def test_rows_sharded_over_four_host_devices_give_the_single_device_result():
    # XLA reads the device count when JAX starts, and this process has started it already.
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", SHARDED_SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("OK")


@pytest.mark.slow
def test_scaling_benchmark_quick_mode_writes_its_table_and_figure(tmp_path):
    script = ROOT / "benchmarks" / "scaling.py"
    command = [sys.executable, str(script), "--quick", "--iterations", "1", "--out", str(tmp_path)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    scaling = pd.read_csv(tmp_path / "scaling.csv")
    sharding = pd.read_csv(tmp_path / "sharding.csv")
    assert (scaling["peak RSS MB"] > 0).all() and scaling["s per iteration"].notna().all()
    assert sharding["devices"].tolist() == [1, 4]
    assert (tmp_path / "scaling.png").stat().st_size > 0
