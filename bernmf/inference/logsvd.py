"""Engine ``logsvd``: logistic SVD (Collins et al. 2001; de Leeuw 2006), as R's ``logisticSVD``.

Natural parameters ``Theta = 1 mu^T + A B^T`` with main effects mu (N,), scores A (M, K)
and orthonormal loadings B (N, K). Each iteration majorizes the Bernoulli deviance by a
least-squares problem (see :mod:`bernmf.inference._logistic`)::

    Z = Theta + 4 q (1 - sigmoid(q Theta))        q = 2y - 1 observed, 0 missing
    mu = column means of Z
    U D V^T = rank-K truncated SVD of Z - 1 mu^T;  A = U D,  B = V

Initialization is R's default: ``mu`` = column means of ``4q`` and ``A, B`` from the SVD
of ``4q`` centred by column. With ``svd="exact"`` (default) every step uses a full LAPACK
SVD, which reproduces R's ``logisticSVD(..., partial_decomp=FALSE)``. With
``svd="subspace"`` each step instead takes the best rank-K approximation of the centred
working matrix within the span of the previous loadings B and ``Zc^T Zc B`` (one block
Krylov step, warm-started). Because that span contains the previous loadings, the
majorizer still decreases, so the loss never increases; the iterates differ from R's
but converge to the same fixed points, at a fraction of the cost per iteration.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import expit

from bernmf.data import Observed
from bernmf.inference._compile import compiled
from bernmf.inference._logistic import (
    Problem,
    check_options,
    make_problem,
    minimize,
    prior_checker,
    working_matrix,
)
from bernmf.inference.registry import Engine, register
from bernmf.results import Fit

SVD_MODES = ("exact", "subspace")


class State(NamedTuple):
    """mu (N,), A (M, K), B (N, K) and Theta = 1 mu^T + A B^T (M, N)."""

    mu: jax.Array
    A: jax.Array
    B: jax.Array
    theta: jax.Array


def _state(mu, A, B) -> State:
    return State(mu, A, B, mu[None, :] + A @ B.T)


def _truncated_svd(matrix, rank: int):
    """``(A, B)``: ``A = U_K D_K`` (M, K) and ``B = V_K`` (N, K) from an exact thin SVD."""
    u, d, vt = jnp.linalg.svd(matrix, full_matrices=False)
    return u[:, :rank] * d[:rank], vt[:rank].T


def _subspace_factors(centred, B):
    """Best rank-K approximation of ``centred`` (M, N) with rows in span(B, centred^T centred B).

    Returns ``(A, B)`` of shapes (M, K) and (N, K), B orthonormal.
    """
    rank = B.shape[1]
    basis, _ = jnp.linalg.qr(jnp.concatenate([B, centred.T @ (centred @ B)], axis=1))
    u, d, wt = jnp.linalg.svd(centred @ basis, full_matrices=False)
    return u[:, :rank] * d[:rank], basis @ wt[:rank].T


def initial_state(problem: Problem, *, rank: int) -> State:
    """R's default start: mu = colMeans(4q), A, B from the SVD of 4q centred by column."""
    four_q = 4 * problem.q
    mu = four_q.mean(axis=0)
    return _state(mu, *_truncated_svd(four_q - mu, rank))


def step(problem: Problem, state: State, *, svd: str = "exact") -> State:
    """One majorization step: working matrix, main effects, rank-K SVD of the centred rest.

    Parameters
    ----------
    problem : Problem
    state : State
    svd : {"exact", "subspace"}
        Exact thin SVD, or the warm-started block Krylov step (see the module docstring).

    Returns
    -------
    State
    """
    Z = working_matrix(problem.q, state.theta)
    mu = Z.mean(axis=0)
    centred = Z - mu
    if svd == "exact":
        A, B = _truncated_svd(centred, state.B.shape[1])
    else:
        A, B = _subspace_factors(centred, state.B)
    return _state(mu, A, B)


def solve(problem: Problem, tol, *, rank: int, max_iter: int, svd: str):
    """Initialize as R does and iterate :func:`step` to convergence; a :class:`Solution`."""
    start = initial_state(problem, rank=rank)
    return minimize(
        start,
        lambda p, s: step(p, s, svd=svd),
        problem,
        tol,
        max_iter=max_iter,
        revert_above=0.0,
    )


def run(
    data: Observed,
    rank: int,
    prior: None,
    seed: int,
    init=None,
    *,
    max_iter: int = 2000,
    tol: float = 1e-5,
    svd: str = "exact",
) -> Fit:
    """Fit logistic SVD; see :func:`bernmf.fit` for the common arguments.

    Parameters
    ----------
    data : Observed
        Validated data of shape (M, N).
    rank : int
        K, at most min(M, N).
    prior : None
        This engine takes no prior.
    seed : int
        Recorded only: the initialization is deterministic.
    init : None
        Not supported (R's SVD initialization is used).
    max_iter : int, default 2000
        Iteration limit.
    tol : float, default 1e-5
        Stop after at least 5 iterations when the mean negative log-likelihood
        decreases by less than ``tol`` (R's ``conv_criteria``).
    svd : {"exact", "subspace"}, default "exact"
        "exact" reproduces R; "subspace" is a warm-started block Krylov step,
        much cheaper per iteration and still monotone.

    Returns
    -------
    Fit
        ``W`` = A (M, K), ``H`` = B^T (K, N), ``probs`` = sigmoid(Theta),
        ``trace`` = mean NLL per observed entry from iteration 0,
        ``extras = {"mu": (N,) main effects}``.
    """
    check_options("logsvd", rank, data.shape, init, max_iter, tol)
    if svd not in SVD_MODES:
        raise ValueError(f"svd must be one of {SVD_MODES}, got {svd!r}")
    with jax.enable_x64(True):
        problem = make_problem(data)
        tol_array = jnp.asarray(tol, jnp.float64)
        program, compile_seconds = compiled(
            "logsvd.solve", solve, problem, tol_array, rank=rank, max_iter=int(max_iter), svd=svd
        )
        begin = time.perf_counter()
        solution = jax.block_until_ready(program(problem, tol_array))
        run_seconds = time.perf_counter() - begin
        state = solution.state
        n_iter = int(solution.n_iter)
        return Fit(
            engine="logsvd",
            rank=rank,
            prior=None,
            W=np.asarray(state.A, float),
            H=np.asarray(state.B, float).T.copy(),
            probs=expit(np.asarray(state.theta, float)),
            trace=np.asarray(solution.trace[: n_iter + 1], float),
            n_iter=n_iter,
            converged=bool(solution.converged),
            timings={"compile": compile_seconds, "run": run_seconds},
            seed=seed,
            extras={"mu": np.asarray(state.mu, float)},
        )


ENGINE = register(
    Engine(name="logsvd", run=run, check_prior=prior_checker("logsvd"), default_prior=None)
)
