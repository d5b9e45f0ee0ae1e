"""Engine ``mm``: MAP estimation by majorization-minimization (Magron & Févotte 2022).

One sweep updates H given W, then W given H, with the mask handled exactly: held-out
entries are neither ones nor zeros, and each row of W is normalized by its number of
observed entries. With ``O`` the mask, ``Y1 = O * Y`` and ``Y0 = O * (1 - Y)``::

    C = H * (W.T @ (Y1 / (W @ H)))           + (alpha - 1)
    D = (1 - H) * (W.T @ (Y0 / (W @ (1 - H)))) + (beta - 1)
    H = C / (C + D)
    S = W * ((Y1 / (W @ H)) @ H.T + (Y0 / (W @ (1 - H))) @ (1 - H).T)
    W = (S + gamma - 1) / (n_obs + sum(gamma - 1))

Entries where ``C + D = 0`` (a column with no observed entry under a flat prior) and
rows where the denominator is 0 (a row with no observed entry and gamma = 1) keep
their value. The objective, ``-log_joint``, never increases when alpha, beta and
gamma are all >= 1.

By default (``accelerate=True``) :func:`run` iterates SQUAREM extrapolations of these
sweeps (:mod:`bernmf.inference.accelerate`), safeguarded so that the constraints hold
and the objective still never increases.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bernmf.data import Observed, check_stopping
from bernmf.inference import accelerate as squarem
from bernmf.inference._compile import compiled
from bernmf.inference.registry import Engine, register
from bernmf.models.spec import Prior, log_prior, masked_log_likelihood_terms
from bernmf.results import Fit

DTYPES = {"float64": jnp.float64, "float32": jnp.float32}


class Factors(NamedTuple):
    """W of shape (M, K), rows on the simplex; H of shape (K, N), entries in [0, 1]."""

    W: jax.Array
    H: jax.Array


class Problem(NamedTuple):
    """The data as the update equations use them: boolean (M, N) indicators and n_obs (M,)."""

    y_one: jax.Array  # O * Y, bool
    y_zero: jax.Array  # O * (1 - Y), bool
    mask: jax.Array  # O, bool
    n_obs: jax.Array  # O.sum(1), float


class Sweep(NamedTuple):
    """Factors with their predictions, so each is computed once per update."""

    W: jax.Array
    H: jax.Array
    p_one: jax.Array  # W @ H
    p_zero: jax.Array  # W @ (1 - H)


def predict(W, H) -> tuple[jax.Array, jax.Array]:
    """Return ``(W @ H, W @ (1 - H))``: P(Y=1) and P(Y=0), each of shape (M, N)."""
    return W @ H, W @ (1 - H)


def _ratios(problem: Problem, p_one, p_zero):
    """``O*Y / (W @ H)`` and ``O*(1-Y) / (W @ (1-H))``, each of shape (M, N)."""
    tiny = jnp.finfo(p_one.dtype).tiny
    return (
        jnp.where(problem.y_one, 1 / jnp.maximum(p_one, tiny), 0.0),
        jnp.where(problem.y_zero, 1 / jnp.maximum(p_zero, tiny), 0.0),
    )


def update_H(problem: Problem, sweep: Sweep, prior: Prior) -> Sweep:
    """The H half of one MM sweep; returns the sweep with H and predictions updated."""
    W, H = sweep.W, sweep.H
    r_one, r_zero = _ratios(problem, sweep.p_one, sweep.p_zero)
    C = H * (W.T @ r_one) + (prior.alpha - 1)[:, None]
    D = (1 - H) * (W.T @ r_zero) + (prior.beta - 1)[:, None]
    total = C + D
    H = jnp.where(total > 0, C / jnp.where(total > 0, total, 1), H)
    return Sweep(W, H, *predict(W, H))


def update_W(problem: Problem, sweep: Sweep, prior: Prior) -> Sweep:
    """The W half of one MM sweep; returns the sweep with W and predictions updated."""
    W, H = sweep.W, sweep.H
    r_one, r_zero = _ratios(problem, sweep.p_one, sweep.p_zero)
    S = W * (r_one @ H.T + r_zero @ (1 - H).T)
    denominator = (problem.n_obs + jnp.sum(prior.gamma - 1))[:, None]
    W = jnp.where(
        denominator > 0, (S + (prior.gamma - 1)) / jnp.where(denominator > 0, denominator, 1), W
    )
    return Sweep(W, H, *predict(W, H))


def step(problem: Problem, sweep: Sweep, prior: Prior) -> Sweep:
    """One MM sweep: H given W, then W given the new H."""
    return update_W(problem, update_H(problem, sweep, prior), prior)


def objective(problem: Problem, sweep: Sweep, prior: Prior) -> jax.Array:
    """Negative log-posterior (unnormalized) of the observed entries: what MM minimizes."""
    log_lik = jnp.sum(
        masked_log_likelihood_terms(problem.y_one, problem.mask, sweep.p_one, sweep.p_zero)
    )
    return -(log_lik + log_prior(sweep.W, sweep.H, prior))


def make_problem(data: Observed, dtype) -> Problem:
    """The :class:`Problem` of validated data, with n_obs in ``dtype``."""
    return Problem(
        y_one=jnp.asarray(data.mask & (data.Y == 1)),
        y_zero=jnp.asarray(data.mask & (data.Y == 0)),
        mask=jnp.asarray(data.mask),
        n_obs=jnp.asarray(data.mask.sum(axis=1), dtype),
    )


def random_init(key, M: int, N: int, K: int, dtype) -> Factors:
    """W with uniform entries normalized to rows summing to one; H uniform on (0, 1)."""
    key_w, key_h = jax.random.split(key)
    W = jax.random.uniform(key_w, (M, K), dtype, minval=jnp.finfo(dtype).eps)
    H = jax.random.uniform(key_h, (K, N), dtype, minval=jnp.finfo(dtype).eps, maxval=1)
    return Factors(W / W.sum(axis=1, keepdims=True), H)


class Solution(NamedTuple):
    W: jax.Array
    H: jax.Array
    trace: jax.Array  # (max_iter + 1,), NaN after n_iter
    n_iter: jax.Array
    rel_change: jax.Array
    sweeps: jax.Array  # MM sweeps evaluated (3 per accelerated iteration, plus one)


def solve(
    init: Factors,
    problem: Problem,
    prior: Prior,
    tol,
    *,
    max_iter: int,
    accelerate: bool = False,
) -> Solution:
    """Iterate :func:`step` from ``init`` until the relative change of the objective is < tol.

    Parameters
    ----------
    init : Factors
    problem : Problem
    prior : Prior
        Arrays of shape (K,), in the factors' dtype.
    tol : scalar
        Stop when ``|f_prev - f| / |f_prev| < tol``; 0 runs exactly ``max_iter`` sweeps.
    max_iter : int
        Iteration limit (static: it sets the trace's length).
    accelerate : bool, default False
        Iterate SQUAREM-accelerated sweeps (:mod:`bernmf.inference.accelerate`)
        instead: an iteration is then three sweeps, and the trace holds the objective
        after each accelerated iteration.

    Returns
    -------
    Solution
    """
    if accelerate:
        return _solve_accelerated(init, problem, prior, tol, max_iter=max_iter)
    sweep = Sweep(init.W, init.H, *predict(init.W, init.H))
    first = objective(problem, sweep, prior)
    trace = jnp.full(max_iter + 1, jnp.nan, first.dtype).at[0].set(first)
    inf = jnp.asarray(jnp.inf, first.dtype)

    def keep_going(carry):
        i, _, _, _, rel_change = carry
        return (i < max_iter) & (rel_change >= tol)

    def iterate(carry):
        i, sweep, previous, trace, _ = carry
        sweep = step(problem, sweep, prior)
        value = objective(problem, sweep, prior)
        scale = jnp.maximum(jnp.abs(previous), jnp.finfo(value.dtype).tiny)
        rel_change = jnp.abs(previous - value) / scale
        return i + 1, sweep, value, trace.at[i + 1].set(value), rel_change

    i, sweep, _, trace, rel_change = jax.lax.while_loop(
        keep_going, iterate, (jnp.asarray(0), sweep, first, trace, inf)
    )
    return Solution(sweep.W, sweep.H, trace, i, rel_change, i)


def _solve_accelerated(init: Factors, problem: Problem, prior: Prior, tol, *, max_iter: int):
    def sweep(factors: Factors):
        current = Sweep(factors.W, factors.H, *predict(factors.W, factors.H))
        following = step(problem, current, prior)
        return objective(problem, current, prior), Factors(following.W, following.H)

    solution = squarem.solve(init, sweep, tol, max_iter=max_iter)
    sweeps = 1 + squarem.EVALUATIONS_PER_ITERATION * solution.n_iter
    return Solution(
        solution.W, solution.H, solution.trace, solution.n_iter, solution.change, sweeps
    )


def check_dtype(dtype: str) -> None:
    """Raise ValueError unless ``dtype`` is one of :data:`DTYPES`."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")


def check_flag(name: str, value) -> None:
    """Raise TypeError unless ``value`` is a bool."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be True or False, got {value!r}")


def check_restarts(restarts, init) -> None:
    """``restarts`` must be an integer >= 1, and 1 when ``init`` is given."""
    if isinstance(restarts, bool) or not isinstance(restarts, int | np.integer) or restarts < 1:
        raise ValueError(f"restarts must be an integer >= 1, got {restarts!r}")
    if restarts > 1 and init is not None:
        raise ValueError("restarts > 1 needs random initializations: do not give init")


def check_prior(prior: Prior) -> None:
    """MM's monotonicity guarantee needs alpha, beta, gamma >= 1."""
    for name, value in prior._asdict().items():
        if np.any(np.asarray(value) < 1):
            raise ValueError(
                f"engine 'mm' needs prior {name} >= 1 (its majorization requires it), "
                f"got {np.asarray(value).tolist()}; use a Bayesian engine for priors below 1"
            )


def check_init(init, M: int, N: int, K: int) -> Factors:
    """Validate user-given initial factors; return them as float64 numpy arrays."""
    if len(init) != 2:
        raise ValueError("init must be a pair (W, H)")
    W, H = (np.array(a, dtype=float) for a in init)
    if W.shape != (M, K) or H.shape != (K, N):
        raise ValueError(
            f"init must have W of shape {(M, K)} and H of shape {(K, N)}, "
            f"got {W.shape} and {H.shape}"
        )
    if not (np.isfinite(W).all() and np.isfinite(H).all()):
        raise ValueError("init W and H must be finite")
    if (W < 0).any() or not np.allclose(W.sum(axis=1), 1, atol=1e-6):
        raise ValueError("init W must be nonnegative with rows summing to 1")
    if (H < 0).any() or (H > 1).any():
        raise ValueError("init H must lie in [0, 1]")
    return Factors(W / W.sum(axis=1, keepdims=True), H)


def run(
    data: Observed,
    rank: int,
    prior: Prior,
    seed: int,
    init=None,
    *,
    max_iter: int = 2000,
    tol: float = 1e-5,
    dtype: str = "float64",
    accelerate: bool = True,
    restarts: int = 1,
) -> Fit:
    """Fit by MM; see :func:`bernmf.fit` for the arguments. Returns a :class:`Fit`.

    With ``accelerate=True``, ``n_iter``, ``max_iter`` and the trace count accelerated
    iterations (three MM sweeps each); ``extras["sweeps"]`` counts the sweeps. With
    ``restarts=R > 1``, the fits from seeds ``seed, ..., seed + R - 1`` run in one
    compiled call (:func:`bernmf.tune.best_of`) and the one of lowest objective is
    returned.
    """
    check_stopping(max_iter, tol)
    check_dtype(dtype)
    check_flag("accelerate", accelerate)
    check_restarts(restarts, init)
    if restarts > 1:
        from bernmf import tune  # tune builds on this module

        seeds = range(seed, seed + restarts)
        options = {"max_iter": max_iter, "tol": tol, "dtype": dtype, "accelerate": accelerate}
        return tune.best_of(data, rank, prior, seeds, **options)
    M, N = data.shape
    given = None if init is None else check_init(init, M, N, rank)
    with jax.enable_x64(True):
        float_type = DTYPES[dtype]
        if given is None:
            start = random_init(jax.random.key(seed), M, N, rank, float_type)
        else:
            start = Factors(*(jnp.asarray(a, float_type) for a in given))
        problem = make_problem(data, float_type)
        prior_arrays = Prior(*(jnp.asarray(v, float_type) for v in prior))
        tol_array = jnp.asarray(tol, float_type)
        args = (start, problem, prior_arrays, tol_array)
        program, compile_seconds = compiled(
            "mm.solve", solve, *args, max_iter=int(max_iter), accelerate=bool(accelerate)
        )
        begin = time.perf_counter()
        solution = jax.block_until_ready(program(*args))
        run_seconds = time.perf_counter() - begin
        W, H = np.asarray(solution.W, float), np.asarray(solution.H, float)
        n_iter = int(solution.n_iter)
        return Fit(
            engine="mm",
            rank=rank,
            prior=prior,
            W=W,
            H=H,
            probs=W @ H,
            trace=np.asarray(solution.trace[: n_iter + 1], float),
            n_iter=n_iter,
            converged=bool(solution.rel_change < tol),
            timings={"compile": compile_seconds, "run": run_seconds},
            seed=seed,
            extras={"accelerate": bool(accelerate), "sweeps": int(solution.sweeps)},
        )


ENGINE = register(Engine(name="mm", run=run, check_prior=check_prior, default_prior=Prior()))
