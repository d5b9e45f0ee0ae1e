"""Engine ``mm``: MAP estimation by majorization-minimization (Magron & Févotte 2022).

One sweep updates H given W, then W given H, with the mask handled exactly: held-out
entries are neither ones nor zeros, and each row of W is normalized by its number of
observed entries. With ``O`` the mask, ``Y1 = O * Y`` and ``Y0 = O * (1 - Y)``::

    C = H * (W.T @ (Y1 / (W @ H)))           + (alpha - 1)
    D = (1 - H) * (W.T @ (Y0 / (W @ (1 - H)))) + (beta - 1)
    H = C / (C + D)
    S = W * ((Y1 / (W @ H)) @ H.T + (Y0 / (W @ (1 - H))) @ (1 - H).T)
    W = (S + gamma - 1) / sum_k(S + gamma - 1)

The denominator of W equals ``n_obs + sum(gamma - 1)`` in exact arithmetic; it is
computed as the row sum so that W stays on the simplex when the predictions reach 0
or 1 in floating point (H at exactly 1 under a huge alpha, say, where an observed
zero's term is 0 / 0 and left out). Entries where ``C + D = 0`` (a column with no
observed entry under a flat prior) and rows where the denominator is 0 (a row with no
observed entry and gamma = 1, by the exact count n_obs) keep their value. The
objective, ``-log_joint``, never increases when alpha, beta and gamma are all >= 1.

The sums and the log-likelihood come from :mod:`bernmf.inference.layout`, which
computes them on whole arrays, with the ones handled sparsely, over blocks of rows or
over rows sharded across devices; the updates here are written once for all of them.
By default (``accelerate=True``) :func:`solve` iterates SQUAREM extrapolations of
these sweeps (:mod:`bernmf.inference.squarem`), safeguarded so that the constraints
hold and the objective still never increases. Restarts and grids of priors map
:func:`solve` over seeds and priors in one compiled call (:func:`run_many`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from bernmf.data import (
    DTYPES,
    Observed,
    check_count,
    check_dtype,
    check_flag,
    check_init,
    check_seed,
    check_stopping,
)
from bernmf.inference import _batch, squarem
from bernmf.inference import layout as layouts
from bernmf.inference._compile import compiled
from bernmf.inference._loop import Solution, iterate_until
from bernmf.inference.layout import Data, State
from bernmf.inference.registry import Engine, register
from bernmf.models.spec import Factors, Prior, log_prior, probability
from bernmf.results import Fit


def random_init(key, M: int, N: int, K: int, dtype) -> Factors:
    """W with uniform entries normalized to rows summing to one; H uniform on (0, 1)."""
    key_w, key_h = jax.random.split(key)
    W = jax.random.uniform(key_w, (M, K), dtype, minval=jnp.finfo(dtype).eps)
    H = jax.random.uniform(key_h, (K, N), dtype, minval=jnp.finfo(dtype).eps, maxval=1)
    return Factors(W / W.sum(axis=1, keepdims=True), H)


def update_H(data: Data, state: State, prior: Prior) -> State:
    """The H half of one MM sweep; returns the state at the new H."""
    W, H = state.W, state.H
    sum_one, sum_zero = layouts.h_sums(data, state)
    C = H * sum_one + (prior.alpha - 1)[:, None]
    D = (1 - H) * sum_zero + (prior.beta - 1)[:, None]
    total = C + D
    H = jnp.where(total > 0, C / jnp.where(total > 0, total, 1), H)
    # With row blocks, update_W reads none of this state's pass, so XLA drops it (checked
    # in the compiled program: two passes over the blocks per plain sweep, not three).
    return layouts.state_at(data, W, H)


def update_W(data: Data, state: State, prior: Prior) -> State:
    """The W half of one MM sweep (row by row); returns the state at the new W."""
    W, H = state.W, state.H
    numerator = layouts.w_statistic(data, state) + (prior.gamma - 1)
    moves = (data.n_obs + jnp.sum(prior.gamma - 1) > 0)[:, None]  # exact: counts and prior
    denominator = numerator.sum(axis=1, keepdims=True)  # n_obs + sum(gamma - 1), to rounding
    W = jnp.where(moves, numerator / jnp.where(moves, denominator, 1), W)
    return layouts.state_at(data, W, H)


def step(data: Data, state: State, prior: Prior) -> State:
    """One MM sweep: H given W, then W given the new H."""
    return update_W(data, update_H(data, state, prior), prior)


def accumulator(dtype):
    """The dtype the objective is summed in: float64 when JAX has it.

    With float32 factors the stopping rule then sees changes of the objective well
    below float32's precision.
    """
    return jnp.promote_types(dtype, jnp.float64 if jax.config.jax_enable_x64 else dtype)


def _log_prior(data: Data, W, H, prior: Prior):
    """:func:`log_prior` of the real rows of W and of H (once, however many devices)."""
    if data.real_row is not None:
        W = jnp.where(data.real_row[:, None], W, 1.0)  # log 1 = 0: padding adds nothing
    if data.axis_name is None:
        return log_prior(W, H, prior)
    no_columns, no_rows = jnp.ones((H.shape[0], 0), H.dtype), jnp.ones((0, W.shape[1]), W.dtype)
    return layouts.row_total(data, log_prior(W, no_columns, prior)) + log_prior(no_rows, H, prior)


def objective(data: Data, state: State, prior: Prior) -> jax.Array:
    """Negative log-posterior (unnormalized) of the observed entries: what MM minimizes."""
    acc = accumulator(state.W.dtype)
    log_lik = layouts.row_total(data, layouts.log_likelihood(data, state)).astype(acc)
    return -(log_lik + _log_prior(data, state.W.astype(acc), state.H.astype(acc), prior))


def _squared_norm(data: Data, factors: Factors) -> jax.Array:
    """``||W||^2 + ||H||^2`` over the real rows of W on all devices (the SQUAREM step length)."""
    W = factors.W
    if data.real_row is not None:
        W = jnp.where(data.real_row[:, None], W, 0.0)
    return layouts.row_total(data, jnp.sum(W**2)) + jnp.sum(factors.H**2)


def solve(
    init: Factors, data: Data, prior: Prior, tol, *, max_iter: int, accelerate: bool = False
) -> Solution:
    """Iterate :func:`step` from ``init`` until the relative change of the objective is < tol.

    Parameters
    ----------
    init : Factors
        W (M, K) and H (K, N), feasible.
    data : Data
    prior : Prior
        Arrays of shape (K,), in the factors' dtype.
    tol : scalar
        Stop when ``|f_prev - f| / |f_prev| < tol``; 0 runs exactly ``max_iter`` iterations.
    max_iter : int
        Iteration limit (static: it sets the trace's length).
    accelerate : bool, default False
        Iterate SQUAREM-accelerated sweeps (:mod:`bernmf.inference.squarem`)
        instead: an iteration is then three sweeps (:func:`sweeps`), and the trace
        holds the objective after each accelerated iteration.

    Returns
    -------
    Solution
        ``state`` is the last :class:`Factors`.
    """
    if accelerate:

        def sweep(factors: Factors):
            current = layouts.state_at(data, *factors)
            following = step(data, current, prior)
            return objective(data, current, prior), Factors(following.W, following.H)

        norm2 = functools.partial(_squared_norm, data)
        end = squarem.solve(init, sweep, tol, max_iter=max_iter, norm2=norm2)
        return end._replace(state=end.state.x)
    end = iterate_until(
        lambda state: step(data, state, prior),
        lambda state: objective(data, state, prior),
        layouts.state_at(data, *init),
        tol,
        max_iter=max_iter,
    )
    return end._replace(state=Factors(end.state.W, end.state.H))


def sweeps(n_iter, accelerate: bool):
    """MM sweeps evaluated in ``n_iter`` iterations (3 per accelerated one, plus one)."""
    return 1 + squarem.EVALUATIONS_PER_ITERATION * n_iter if accelerate else n_iter


def _solver(devices, gather: bool = True):
    """:func:`solve`, or :func:`solve` under ``shard_map`` over the rows on ``devices``.

    Each device runs the same while loop on its rows of Y, the mask and W, with H
    replicated; the sums over rows (H step, objective) are ``lax.psum``-ed over
    the mesh axis, so every device takes the same decisions. The returned W is
    gathered onto every device, or with ``gather=False`` left sharded over the rows
    (across processes, each reads back only its own rows).
    """
    if devices is None:
        return solve
    rows, replicated = PartitionSpec(layouts.ROWS), PartitionSpec()

    def solve_sharded(init, data, prior, tol, *, max_iter, accelerate):
        solution = jax.shard_map(
            functools.partial(solve, max_iter=max_iter, accelerate=accelerate),
            mesh=layouts.mesh(devices),
            in_specs=(Factors(rows, replicated), rows, replicated, replicated),
            out_specs=Solution(Factors(rows, replicated), *[replicated] * 3),
        )(init, data, prior, tol)
        if not gather:
            return solution
        W = jax.lax.with_sharding_constraint(solution.state.W, layouts.replicated(devices))
        return solution._replace(state=solution.state._replace(W=W))

    return solve_sharded


def _padded(factors: Factors, rows: int) -> Factors:
    """W padded to ``rows`` rows, uniform on the simplex (the padding rows are unobserved)."""
    W = factors.W
    padding = jnp.full((rows - W.shape[0], W.shape[1]), 1 / W.shape[1], W.dtype)
    return Factors(jnp.concatenate([W, padding]), factors.H)


def _solve_from(init, prior, data, tol, *, max_iter, accelerate, devices):
    """One fit from ``init`` (W of the real rows, padded here)."""
    init = _padded(init, data.y_zero.shape[0])
    return _solver(devices)(init, data, prior, tol, max_iter=max_iter, accelerate=accelerate)


def _solve_from_seed(seed, prior, data, tol, *, M, K, **options):
    """One fit from the random initialization of ``seed`` (:func:`random_init`)."""
    init = random_init(jax.random.key(seed), M, data.y_zero.shape[1], K, prior.alpha.dtype)
    return _solve_from(init, prior, data, tol, **options)


# --------------------------------------------------------------------- results


@dataclass(frozen=True)
class Batch:
    """MM fits of one data set, stacked along the first axis.

    Attributes
    ----------
    W : (G, M, K) ndarray
    H : (G, K, N) ndarray
    n_iter : (G,) int ndarray
        Iterations (accelerated iterations with ``accelerate=True``).
    sweeps : (G,) int ndarray
        MM sweeps evaluated.
    converged : (G,) bool ndarray
    objective : (G,) ndarray
        Final objective.
    traces : (G, max_iter + 1) ndarray
        Objective at the start and after each iteration, NaN after ``n_iter``.
    seconds : (G,) ndarray
        Each fit's share of the call's run time, in proportion to its sweeps.
    compile_seconds, run_seconds : float
        Of the whole call (compile is 0 when the program was cached).
    extras : dict
        What every fit records: ``accelerate``, ``layout``, ``block_rows``, ``devices``.
    """

    W: np.ndarray
    H: np.ndarray
    n_iter: np.ndarray
    sweeps: np.ndarray
    converged: np.ndarray
    objective: np.ndarray
    traces: np.ndarray
    seconds: np.ndarray
    compile_seconds: float
    run_seconds: float
    extras: dict

    @classmethod
    def of(cls, solution: Solution, M: int, tol, accelerate, compile_seconds, run_seconds, extras):
        """From stacked solutions (numpy arrays), W cut to the M real rows."""
        n_iter = np.asarray(solution.n_iter)
        traces = np.asarray(solution.trace, float)
        done = np.asarray(sweeps(n_iter, accelerate))
        return cls(
            W=np.asarray(solution.state.W, float)[:, :M],
            H=np.asarray(solution.state.H, float),
            n_iter=n_iter,
            sweeps=done,
            converged=np.asarray(solution.change) < tol,
            objective=traces[np.arange(len(n_iter)), n_iter],
            traces=traces,
            seconds=run_seconds * done / max(done.sum(), 1),
            compile_seconds=compile_seconds,
            run_seconds=run_seconds,
            extras={"accelerate": bool(accelerate), **extras},
        )

    def probs(self, index: int) -> np.ndarray:
        """P(Y=1) = W @ H of fit ``index``."""
        return probability(self.W[index], self.H[index])

    def fit(self, index: int, prior: Prior, seed: int, *, timings=None, extras=None) -> Fit:
        """Fit ``index`` as the :class:`Fit` that ``bernmf.fit(..., engine="mm")`` returns."""
        n_iter = int(self.n_iter[index])
        return Fit(
            engine="mm",
            rank=self.H.shape[1],
            prior=prior,
            W=self.W[index],
            H=self.H[index],
            trace=self.traces[index, : n_iter + 1],
            n_iter=n_iter,
            converged=bool(self.converged[index]),
            timings=timings or {"compile": self.compile_seconds, "run": self.run_seconds},
            seed=seed,
            extras={**self.extras, "sweeps": int(self.sweeps[index]), **(extras or {})},
        )


# --------------------------------------------------------------------- running


def check_prior(prior: Prior) -> None:
    """MM's monotonicity guarantee needs alpha, beta, gamma >= 1."""
    for name, value in prior._asdict().items():
        if np.any(np.asarray(value) < 1):
            raise ValueError(
                f"engine 'mm' needs prior {name} >= 1 (its majorization requires it), "
                f"got {np.asarray(value).tolist()}; use a Bayesian engine for priors below 1"
            )


def check_options(options: dict) -> None:
    """Raise TypeError or ValueError for an option of :func:`run` outside its range."""
    check_stopping(options["max_iter"], options["tol"])
    check_dtype(options["dtype"])
    check_flag("accelerate", options["accelerate"])
    layouts.check_block_rows(options["block_rows"])
    devices = layouts.check_devices(options["devices"])
    layouts.check_layout(options["layout"], options["block_rows"], devices)


def _prepare(data: Observed, *, max_iter, tol, dtype, accelerate, layout, block_rows, devices):
    """The float type, layout choice and :class:`Data` of a fit with checked options."""
    devices = layouts.check_devices(devices)
    float_type = DTYPES[dtype]
    itemsize = np.dtype(float_type).itemsize
    choice = layouts.choose(data, layout, block_rows, devices, itemsize)
    return float_type, choice, layouts.make_data(data, float_type, choice)


def _bytes_per_fit(problem: Data, rank: int, float_type, max_iter: int) -> int:
    """Bytes of one fit's outputs: W and H, and the trace (in float64)."""
    M, N = problem.y_zero.shape
    return (M * rank + rank * N) * np.dtype(float_type).itemsize + 8 * (max_iter + 2)


def _static(choice: layouts.Choice, max_iter, accelerate) -> dict:
    return {"max_iter": int(max_iter), "accelerate": bool(accelerate), "devices": choice.devices}


def _extras(choice: layouts.Choice) -> dict:
    n_devices = 1 if choice.devices is None else len(choice.devices)
    sparse = "sparse" if choice.sparse else "dense"
    return {"layout": sparse, "block_rows": choice.block_rows, "devices": n_devices}


def run_many(
    data: Observed,
    rank: int,
    priors: Sequence[Prior],
    seeds: Sequence[int],
    *,
    batch_size: int | None = None,
    workers: int = 1,
    progress: bool = False,
    label: str = "fits",
    stream=None,
    **options,
) -> Batch:
    """One MM fit per (prior, seed) pair, from random starts, in one compiled call.

    Each fit equals ``bernmf.fit(Y, "mm", rank, prior=prior, seed=seed, ...)`` with
    the same options (to rounding); the fits run as described in
    :mod:`bernmf.inference._batch`.

    Parameters
    ----------
    data : Observed
    rank : int
    priors : sequence of Prior
        One per fit, each broadcast to shape (rank,) and checked (:func:`check_prior`).
    seeds : sequence of int
        One per fit.
    batch_size : int, optional
        Fits vmapped together; default: all on an accelerator, 1 on a CPU.
    workers : int, default 1
        With ``batch_size=1``: threads sharing the fits.
    progress : bool, default False
        Print "label: done/total fits" lines to ``stream`` during long calls.
    **options
        The options of :func:`run`, with the same defaults.

    Returns
    -------
    Batch
    """
    options = ENGINE.with_defaults(options)
    if len(priors) != len(seeds) or not len(seeds):
        raise ValueError("give one seed per prior, and at least one of each")
    for s in seeds:
        check_seed(s)
    broadcast = [p.broadcast(rank) for p in priors]
    for prior in broadcast:
        check_prior(prior)
    size = len(seeds)
    batch_size = _batch.default_batch_size(size) if batch_size is None else batch_size
    check_count("batch_size", batch_size)
    check_count("workers", workers)
    with jax.enable_x64(True):
        float_type, choice, problem = _prepare(data, **options)
        prior_arrays = Prior(
            *(np.stack(v).astype(float_type) for v in zip(*broadcast, strict=True))
        )
        tol_array = layouts.place(
            np.asarray(options["tol"], float_type), layouts.replicated(choice.devices)
        )
        solution, compile_seconds, run_seconds = _batch.run_many(
            ("mm.run_many", choice.block_rows, choice.sparse),
            _solve_from_seed,
            seeds,
            prior_arrays,
            (problem, tol_array),
            batch_size=int(batch_size),
            workers=int(workers),
            progress=progress,
            label=label,
            stream=stream,
            bytes_per_fit=_bytes_per_fit(problem, rank, float_type, options["max_iter"]),
            M=data.shape[0],
            K=rank,
            **_static(choice, options["max_iter"], options["accelerate"]),
        )
    return Batch.of(
        solution,
        data.shape[0],
        options["tol"],
        options["accelerate"],
        compile_seconds,
        run_seconds,
        _extras(choice),
    )


OPTIONS = {
    "max_iter": 2000,
    "tol": 1e-5,
    "dtype": "float64",
    "accelerate": True,
    "layout": "auto",
    "block_rows": "auto",
    "devices": None,
}
"""The options of :func:`run`, with their defaults."""


def run(
    data: Observed,
    rank: int,
    prior: Prior,
    seed: int,
    init=None,
    *,
    max_iter: int,
    tol: float,
    dtype: str,
    accelerate: bool,
    layout: str,
    block_rows: int | str | None,
    devices,
) -> Fit:
    """Fit by MM; see :func:`bernmf.fit` for the arguments. Returns a :class:`Fit`.

    Parameters
    ----------
    max_iter : int, default 2000
    tol : float, default 1e-5
        Stop when the relative change of the objective is below it.
    dtype : {"float64", "float32"}, default "float64"
    accelerate : bool, default True
        Iterate SQUAREM-accelerated sweeps: ``n_iter``, ``max_iter`` and the trace
        then count accelerated iterations (three MM sweeps each) and
        ``extras["sweeps"]`` counts the sweeps. False: plain MM sweeps.
    layout : {"auto", "dense", "sparse"}, default "auto"
        How the observed ones enter the sums (:mod:`bernmf.inference.layout`):
        ``"sparse"`` only at the ones (gathers and segment sums), ``"dense"`` on
        whole arrays, ``"auto"`` sparse when few of the observed entries are ones
        and the rows are neither blocked nor sharded. The result is the same up to
        floating-point rounding.
    block_rows : int, "auto" or None, default "auto"
        None: the sweep works on whole (M, N) arrays. An int B: it goes over
        blocks of B rows, so that the memory beyond Y and the mask is O((M + N) K
        + B N); M is padded to a multiple of B with unobserved rows. ``"auto"``:
        blocks once the temporaries outgrow the CPU's cache or
        :data:`~bernmf.inference.layout.AUTO_BLOCK_BYTES`
        (:func:`~bernmf.inference.layout.choose_block_rows`). The result is the
        same up to floating-point rounding (about 1e-13 in float64).
    devices : list of jax.Device, optional
        Shard the rows of Y, the mask and W over these devices and replicate H
        (``shard_map`` over a one-axis mesh; the sums over rows are ``lax.psum``
        reductions). M is padded to a multiple of the device count with
        unobserved rows. On a machine with several GPUs pass
        ``devices=jax.devices()``; across several hosts, call
        ``jax.distributed.initialize()`` first in every process (each with the
        same data) and pass ``devices=jax.devices()``; every process gets the
        whole result.
    """
    options = {"max_iter": max_iter, "tol": tol, "dtype": dtype, "accelerate": accelerate}
    options |= {"layout": layout, "block_rows": block_rows, "devices": devices}
    M, N = data.shape
    given = None if init is None else check_init(init, M, N, rank)
    with jax.enable_x64(True):
        float_type, choice, problem = _prepare(data, **options)
        replicated = layouts.replicated(choice.devices)
        prior_arrays = Prior(*(layouts.place(np.asarray(v, float_type), replicated) for v in prior))
        tol_array = layouts.place(np.asarray(tol, float_type), replicated)
        static = _static(choice, max_iter, accelerate)
        if given is None:  # one fit alone: a program without run_many's loop over fits
            start, function = np.asarray(seed, np.uint32), _solve_from_seed
            static |= {"M": M, "K": rank}
        else:
            start = Factors(*(layouts.place(a.astype(float_type), replicated) for a in given))
            function = _solve_from
        args = (start, prior_arrays, problem, tol_array)
        program, compile_seconds = compiled(
            (function.__name__, choice.block_rows, choice.sparse), function, *args, **static
        )
        begin = time.perf_counter()
        solution = jax.block_until_ready(program(*args))
        run_seconds = time.perf_counter() - begin
    stacked = jax.tree.map(lambda x: np.asarray(x)[None], solution)
    batch = Batch.of(stacked, M, tol, accelerate, compile_seconds, run_seconds, _extras(choice))
    return batch.fit(0, prior, seed)


def run_members(
    data: Observed, rank: int, prior: Prior, seeds: Sequence[int], **options
) -> list[Fit]:
    """The fits of ``seeds`` in one compiled call (:func:`run_many`), as :func:`run` gives them.

    Each member's timings are its share of the call's run time (:attr:`Batch.seconds`),
    the compile time counted on the first. ``options`` are those of :func:`run_many`.
    """
    batch = run_many(data, rank, [prior] * len(seeds), seeds, **options)
    members = []
    for i, seed in enumerate(seeds):
        compile_seconds = batch.compile_seconds if i == 0 else 0.0
        timings = {"compile": compile_seconds, "run": float(batch.seconds[i])}
        members.append(batch.fit(i, prior, int(seed), timings=timings))
    return members


ENGINE = register(
    Engine(
        name="mm",
        run=run,
        options=OPTIONS,
        default_prior=Prior(),
        check_prior=check_prior,
        run_members=run_members,
        check_options=check_options,
    )
)
