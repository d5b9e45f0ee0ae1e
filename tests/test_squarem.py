"""SQUAREM-accelerated MM and best-of-R restarts."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from helpers import examples, mm_cases, random_problem, shared_file
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bernmf
from bernmf.data.observed import as_observed
from bernmf.inference import mm
from bernmf.inference._compile import cache_size
from bernmf.inference._loop import iterate_until
from bernmf.inference.mm import layout as mm_layouts
from bernmf.inference.mm import squarem
from bernmf.models.spec import Factors, Prior


def feasible_point(rng, M, N, K):
    W = rng.uniform(0.3, 0.6, (M, K))
    return Factors(W / W.sum(1, keepdims=True), rng.uniform(0.3, 0.6, (K, N)))


def linear_contraction(center: Factors, rate: float, penalty: float = 0.0):
    """F(x) = c + rate (x - c), f(x) = ||x - c||^2 (+ penalty within 1e-3 of c)."""

    def sweep(x, evaluate=True):
        distance = sum(jnp.sum((a - b) ** 2) for a, b in zip(x, center, strict=True))
        value = distance + penalty * (distance < 1e-6)
        return value, jax.tree.map(lambda a, b: b + rate * (a - b), x, center)

    return sweep


def test_squarem_solves_a_linear_fixed_point_map_in_two_iterations():
    # on F(x) = c + r (x - c) the S3 step is 1 / (1 - r) and lands on c exactly; the
    # first iteration is a plain one (largest step 1), the second is at step 2 <= 4
    rng = np.random.default_rng(0)
    start, center = feasible_point(rng, 6, 5, 3), feasible_point(rng, 6, 5, 3)
    with jax.enable_x64(True):
        sweep = linear_contraction(Factors(*map(jnp.asarray, center)), 0.5)
        solution = squarem.solve(Factors(*map(jnp.asarray, start)), sweep, 0.0, max_iter=2)
    np.testing.assert_allclose(solution.state.x.W, center.W, atol=1e-14)
    np.testing.assert_allclose(solution.state.x.H, center.H, atol=1e-14)
    assert int(solution.n_iter) == 2 and int(solution.state.accepted) == 1
    assert np.asarray(solution.trace)[-1] < 1e-26


def test_each_loop_traces_its_sweep_once():
    # the output type, the progress notes' cost estimate and the loop body share one trace
    # (jit's cache), so that a compile traces an MM sweep once per loop, not two or three times
    rng = np.random.default_rng(0)
    start, center = feasible_point(rng, 6, 5, 3), feasible_point(rng, 6, 5, 3)
    sweep = linear_contraction(Factors(*map(jnp.asarray, center)), 0.5)
    traced = []

    def counted(x, evaluate=True):
        traced.append(1)
        return sweep(x, evaluate)

    loops = {
        "squarem": lambda x: squarem.solve(x, counted, 0.0, max_iter=3),
        "iterate_until": lambda x: iterate_until(
            lambda y: counted(y)[1], lambda y: sweep(y)[0], x, 0.0, max_iter=3
        ),
    }
    for name, loop in loops.items():
        traced.clear()
        jax.make_jaxpr(loop)(Factors(*map(jnp.asarray, start)))
        assert len(traced) == 1, (name, len(traced))


def test_an_accelerated_iteration_evaluates_the_objective_twice():
    # f(x') and f(x_{t+1}) decide; f(x1) is never used, so its sweep skips it, and a
    # sweep that gives NaN where it may skip changes nothing
    rng = np.random.default_rng(2)
    start, center = feasible_point(rng, 6, 5, 3), feasible_point(rng, 6, 5, 3)
    flags = []
    with jax.enable_x64(True):
        sweep = linear_contraction(Factors(*map(jnp.asarray, center)), 0.9, penalty=1e3)

        def skipping(x, evaluate=True):
            jax.debug.callback(lambda e: flags.append(bool(e)), evaluate, ordered=True)
            value, out = sweep(x)
            return jnp.where(evaluate, value, jnp.nan), out

        start = Factors(*map(jnp.asarray, start))
        ends = [squarem.solve(start, f, 0.0, max_iter=4) for f in (sweep, skipping)]
    assert flags == [True] + [False, True, True] * 4
    for a, b in zip(*(jax.tree.leaves(end) for end in ends), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["dense", "sparse"])
def test_an_accelerated_sweep_holds_no_more_n_by_m_arrays_than_a_plain_one(layout):
    # the objective is finished before the sweep's ratios are made; scheduled together,
    # both of an (M, N) table's predictions, its observed probabilities and the two
    # ratios are live at once, and each (M, N) pass of a sweep ran ~1.4x slower
    M, N, K = 64, 48, 3
    Y, O, _, _ = random_problem(0, M, N, K, density=0.03, observed=0.9)
    with jax.enable_x64(True):
        data = mm_layouts.make_data(
            as_observed(Y, mask=O), np.float64, mm_layouts.Choice(None, layout == "sparse", None)
        )
        init = mm.kernel.random_init(jax.random.key(0), M, N, K, jnp.float64)
        prior = Prior(*(jnp.full(K, v, jnp.float64) for v in (1.8, 3.0, 1.0)))
        solve = jax.jit(mm.kernel.solve, static_argnames=("max_iter", "accelerate"))
        temporaries = {}
        for accelerate in (False, True):
            program = solve.lower(init, data, prior, 0.0, max_iter=3, accelerate=accelerate)
            temporaries[accelerate] = program.compile().memory_analysis().temp_size_in_bytes
    assert temporaries[True] <= temporaries[False] + M * N * 8, temporaries


def test_an_extrapolation_that_raises_the_objective_falls_back_to_plain_mm():
    # the same map, with an objective that is high at c: the exact extrapolation of the
    # second iteration is rejected and the two plain sweeps of that iteration are kept
    rng = np.random.default_rng(1)
    start, center = feasible_point(rng, 6, 5, 3), feasible_point(rng, 6, 5, 3)
    with jax.enable_x64(True):
        sweep = linear_contraction(Factors(*map(jnp.asarray, center)), 0.5, penalty=1e3)
        solution = squarem.solve(Factors(*map(jnp.asarray, start)), sweep, 0.0, max_iter=2)
    # iteration 1: x0 -> F(F(F(x0))); iteration 2 rejected: -> F(F(.)); so 5 plain sweeps
    for got, a, c in zip(solution.state.x, start, center, strict=True):
        np.testing.assert_allclose(got, c + 0.5**5 * (a - c), rtol=1e-13)
    assert int(solution.state.accepted) == 0
    assert np.all(np.diff(np.asarray(solution.trace)) <= 0)


@settings(max_examples=examples(100), deadline=None, derandomize=True)
@given(
    st.integers(0, 2**32 - 1),
    st.floats(1.0, 1e3),
    st.sampled_from([0.0, 1e-3, 0.5]),
)
def test_extrapolated_points_are_feasible(seed, max_step, boundary_share):
    # iterates with entries at or near the boundaries (H in {0, 1}, W = 0), extrapolated
    # with steps up to 1000: the point stays on the simplex / in [0, 1], and entries that
    # are positive in x2 stay positive
    rng = np.random.default_rng(seed)
    points = []
    for _ in range(3):
        W = rng.random((7, 4)) * (rng.random((7, 4)) >= boundary_share)
        W[:, 0] += 1e-3
        H = rng.random((4, 9))
        H[rng.random(H.shape) < boundary_share] = rng.integers(0, 2)
        points.append(Factors(W / W.sum(1, keepdims=True), H))
    with jax.enable_x64(True):
        point, step = squarem.extrapolate(*points, jnp.asarray(max_step))
    W, H = np.asarray(point.W), np.asarray(point.H)
    assert 1 <= float(step) <= max_step
    np.testing.assert_allclose(W.sum(1), 1, atol=1e-12)
    assert W.min() >= 0 and H.min() >= 0 and H.max() <= 1
    assert np.all(W[points[2].W > 0] > 0)
    assert np.all(H[points[2].H > 0] > 0) and np.all(H[points[2].H < 1] < 1)


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mm_cases(), st.sampled_from(["float64", "auto"]))
def test_accelerated_objective_never_increases(case, dtype):
    Y, O, K, prior, seed = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = bernmf.fit(
            Y, "mm", K, mask=O, prior=prior, seed=seed % 1000, max_iter=30, tol=0, dtype=dtype
        )
    trace, mixed = result.trace, dtype == "auto"
    assert result.extras["accelerate"] and result.record.sweeps == 1 + mixed + 3 * 30
    assert np.all(np.isfinite(trace))
    rises = np.diff(trace) / np.maximum(1.0, np.abs(trace[:-1]))
    if mixed:
        # float32 iterations, then float64 ones: where float32 stops, the objective is
        # computed in float64 (a float32 rounding apart); each phase never increases
        switch = result.extras["float32_iterations"]
        assert np.all(np.delete(rises, switch - 1) <= 1e-10) and rises[switch - 1] <= 1e-6
    else:
        assert np.all(rises <= 1e-10)
    assert np.allclose(result.W.sum(axis=1), 1, atol=1e-12)
    assert np.all((result.H >= 0) & (result.H <= 1))


@pytest.mark.slow
def test_accelerated_mm_reaches_plain_mms_objective_in_a_third_of_the_sweeps():
    # simulated data: acceleration reaches the objective where plain MM stops (tol 1e-5)
    # in at most a third of its sweeps, and its own stop (tol 1e-5) is lower still
    Y, _, _ = bernmf.simulate(3, 200, 150, 5, bernmf.Prior(0.3, 0.8, 0.5))
    options = {"prior": bernmf.Prior(1.2, 1.5), "seed": 2}
    plain = bernmf.fit(Y, "mm", 5, accelerate=False, **options)
    fast = bernmf.fit(Y, "mm", 5, **options)
    reached = np.flatnonzero(fast.trace <= plain.trace[-1])
    assert reached.size and 1 + 3 * reached[0] <= plain.n_iter / 3
    assert fast.converged and fast.trace[-1] < plain.trace[-1]
    assert np.all(np.diff(fast.trace) <= 1e-10 * np.abs(fast.trace[:-1]))


@pytest.mark.slow
def test_float32_accelerated_fit_is_monotone_and_near_float64():
    Y, _, _ = bernmf.simulate(5, 120, 80, 4, bernmf.Prior(0.5, 1.0, 1.0))
    _, _, W0, H0 = random_problem(5, 120, 80, 4)  # one start for both precisions
    options = {"prior": bernmf.Prior(1.2, 1.2), "init": (W0, H0), "tol": 1e-7}
    single = bernmf.fit(Y, "mm", 4, dtype="float32", **options)
    double = bernmf.fit(Y, "mm", 4, **options)
    assert np.all(np.isfinite(single.trace)) and np.all(np.isfinite(single.W))
    assert np.all(np.diff(single.trace) <= 1e-5 * np.abs(single.trace[:-1]))
    assert single.trace[-1] == pytest.approx(double.trace[-1], rel=1e-4)


@pytest.mark.slow
def test_auto_precision_polishes_float32_iterations_to_a_float64_fits_objective():
    # dtype="auto": float32 until it stalls, then float64 to the stop
    Y, _, _ = bernmf.simulate(8, 150, 90, 4, bernmf.Prior(0.4, 1.5, 1.0))
    options = {"prior": bernmf.Prior(1.3, 1.6, 1.0), "seed": 3, "tol": 1e-7}
    auto = bernmf.fit(Y, "mm", 4, dtype="auto", **options)
    double = bernmf.fit(Y, "mm", 4, **options)
    switch = auto.extras["float32_iterations"]
    assert 0 < switch < auto.n_iter and auto.converged and auto.W.dtype == np.float64
    assert auto.record.sweeps == 2 + 3 * auto.n_iter
    polished = auto.trace[switch:]  # computed in float64: never increases, stops at tol
    assert np.all(np.diff(polished) <= 1e-12 * np.abs(polished[:-1]))
    assert abs(polished[-2] - polished[-1]) / abs(polished[-2]) < 1e-7
    assert np.allclose(auto.W.sum(axis=1), 1, atol=1e-12)
    assert auto.objective == pytest.approx(double.objective, rel=1e-6)
    # float32 stopped at a float32 floor (1e-6) above tol: the float64 phase went on
    rough = auto.trace[: switch + 1]
    assert abs(rough[-2] - rough[-1]) / abs(rough[-2]) < 1e-5
    with pytest.raises(ValueError, match="dtype must be one of"):
        bernmf.fit(Y, "mm", 4, dtype="float16")


@pytest.mark.slow
def test_a_single_fit_from_its_start_and_a_batch_accelerate_alike():
    # the single fit from a given start runs mm.solve alone; the batch maps it over seeds
    Y, O, _, _ = random_problem(11, 40, 30, 3)
    prior = bernmf.Prior(1.3, 1.7, 1.1)
    with jax.enable_x64(True):
        start = mm.random_init(jax.random.key(4), 40, 30, 3, jnp.float64)
    options = {"mask": O, "prior": prior, "max_iter": 200, "tol": 1e-8}
    single = bernmf.fit(Y, "mm", 3, init=tuple(map(np.asarray, start)), **options)
    batch = mm.run_many(as_observed(Y, O), 3, [prior], [4], max_iter=200, tol=1e-8)
    assert batch.n_iter[0] == single.n_iter and batch.sweeps[0] == single.record.sweeps
    np.testing.assert_allclose(batch.traces[0, : single.n_iter + 1], single.trace, rtol=1e-10)
    np.testing.assert_allclose(batch.W[0], single.W, atol=1e-9)


def test_em_accelerates_too():
    Y, O, _, _ = random_problem(12, 30, 20, 3)
    em = bernmf.fit(Y, "em", 3, mask=O, seed=1, max_iter=40, tol=0)
    mm_flat = bernmf.fit(Y, "mm", 3, mask=O, prior=bernmf.Prior.flat(), seed=1, max_iter=40, tol=0)
    np.testing.assert_array_equal(em.trace, mm_flat.trace)
    assert em.record.sweeps == 1 + 3 * 40
    plain = bernmf.fit(Y, "em", 3, mask=O, seed=1, max_iter=40, tol=0, accelerate=False)
    assert plain.extras["accelerate"] is False and plain.record.sweeps == 40
    with pytest.raises(TypeError, match="accelerate must be True or False"):
        bernmf.fit(Y, "mm", 3, mask=O, accelerate="yes")


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["mm", "em"])
def test_restarts_keep_the_lowest_objective_of_the_seeds_fits(engine):
    Y, O, _, _ = random_problem(13, 35, 25, 3)
    prior = bernmf.Prior(1.2, 1.4) if engine == "mm" else None
    options = {"mask": O, "prior": prior, "max_iter": 300}
    best = bernmf.fit(Y, engine, 3, seed=5, restarts=4, **options)
    singles = [bernmf.fit(Y, engine, 3, seed=s, **options) for s in range(5, 9)]
    finals = [f.trace[-1] for f in singles]
    report = best.mixture.table()
    assert report["seed"] == [5, 6, 7, 8]
    np.testing.assert_allclose(report["objective"], finals, rtol=1e-9)
    assert report["n_iter"] == [f.n_iter for f in singles]
    chosen = singles[int(np.argmin(finals))]
    assert best.engine == engine and best.seed == chosen.seed
    np.testing.assert_allclose(best.W, chosen.W, atol=1e-8)
    np.testing.assert_allclose(best.trace, chosen.trace, rtol=1e-9)
    size = cache_size()
    again = bernmf.fit(Y, engine, 3, seed=0, restarts=4, **options)  # compiled once
    assert cache_size() == size and again.timings["compile"] == 0.0


def test_restarts_bad_arguments():
    Y, O, W0, H0 = random_problem(14, 10, 8, 2)
    with pytest.raises(ValueError, match="restarts must be an integer in"):
        bernmf.fit(Y, "mm", 2, mask=O, restarts=0)
    with pytest.raises(ValueError, match="do not give init"):
        bernmf.fit(Y, "mm", 2, mask=O, init=(W0, H0), restarts=2)


@pytest.mark.slow
def test_benchmark_quick_mode_writes_its_table_and_figure(tmp_path):
    data_dir = shared_file("data", "animals.csv").parent
    path = Path(__file__).parents[1] / "benchmarks" / "accelerate.py"
    spec = importlib.util.spec_from_file_location("accelerate_benchmark", path)
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    summary = benchmark.main(["--quick", "--data-dir", str(data_dir), "--out", str(tmp_path)])
    assert (tmp_path / "accelerate.png").stat().st_size > 0
    table = pd.read_csv(tmp_path / "accelerate.csv")
    assert set(table["method"]) == {"plain", "accelerated", "to plain's stop"}
    assert (summary["iterations_ratio"] > 1).all()
