"""Engine ``logpca``: projection logistic PCA (Landgraf & Lee 2020), as R's ``logisticPCA``.

Natural parameters are a projection of the saturated model's, ``eta = m q + O' * mu``
(``q = 2y - 1`` observed, 0 missing; ``O'`` the missing indicator, so a missing entry
sits at its column's main effect)::

    Theta = 1 mu^T + (eta - 1 mu^T) U U^T            U orthonormal, shape (N, K)

Each iteration (see :mod:`bernmf.inference._logistic` for Z, the loss and the
stopping rule)::

    Z = Theta + 4 q (1 - sigmoid(q Theta))
    mu = column means of Z - eta U U^T
    eta = m q + O' * mu                              (with the new mu)
    T = (eta - 1 mu^T)^T Z;  T = T + T^T - eta^T eta + M mu mu^T
    U = eigenvectors of the K largest eigenvalues of T

R takes U from a full eigendecomposition of T (N x N), which took 0.9 s of CPU per step
at N = 1799; here U is refined from the previous step's by a few block Krylov restarts
with products ``T V`` (T never formed), until its residual is at rounding level
(:func:`_leading_eigenvectors`): R's iterates to about rounding level, in 9 to 17 times
less CPU time (``docs/speed.md``), and the full decomposition still where the K-th
eigenvalue is too close to the next.

Initialization is R's default: ``mu`` = column means of ``m q`` and U = the first K
right singular vectors of ``q`` centred by column. The scores of a row are
``(eta - mu) U``: a projection, so :func:`transform` scores new rows without refitting.

With ``m=None`` the engine chooses m from ``m_grid`` by validation perplexity: a random
``validation_fraction`` of the observed entries (drawn with ``seed``) is held out, one
fit per candidate m is scored on it, and the best m is refitted on every observed entry.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bernmf.data.arguments import check_real, check_stopping
from bernmf.data.observed import Observed, as_observed
from bernmf.inference._compile import compiled
from bernmf.inference._logistic import (
    LogisticData,
    Operator,
    check_fit,
    expit,
    fitted_sigmoid,
    leading_eigenvectors,
    minimize,
    working_matrix,
)
from bernmf.inference.registry import Engine, register
from bernmf.models.spec import perplexity
from bernmf.results.fit import Fit, Record

DEFAULT_M_GRID = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0)


class LogPCAState(NamedTuple):
    """mu (N,), U (N, K), eta (M, N), Theta (M, N) and ``fitted`` = sigmoid(q Theta)."""

    mu: jax.Array
    U: jax.Array
    eta: jax.Array
    theta: jax.Array
    fitted: jax.Array


def saturated(data: LogisticData, m, mu):
    """``eta = m q + (missing indicator) * mu``, shape (M, N)."""
    return m * data.q + jnp.where(data.mask, 0.0, mu[None, :])


def _state(data: LogisticData, mu, U, eta, scores) -> LogPCAState:
    """The state of ``mu``, ``U``, ``eta`` and the scores ``(eta - 1 mu^T) U`` (M, K)."""
    theta = mu[None, :] + scores @ U.T
    return LogPCAState(mu, U, eta, theta, fitted_sigmoid(data.q, theta))


DEPTH = 3
"""Krylov blocks T U, T^2 U, T^3 U added to U at each restart of the eigensolver.

On a simulated 374 x 1799 vote matrix at K = 8 the warm start reached a residual of 1e-10
times the gap in 16 restarts with one block, 6 with two, 4 with three and 3 with four:
about the same products with T from two blocks on, and fewer small eigendecompositions
with more. Carrying 8 vectors beyond the K (a wider block) took as many restarts on it,
on paleo and on a sparser simulated matrix, in 1.5 times the CPU time
(``benchmarks/logpca_speed.py`` measures the default).
"""

RESIDUAL_FLOOR = 4.0
"""Stop refining U when ``||T U - U Lambda||_F <= RESIDUAL_FLOOR eps sqrt(N K) ||T||``.

That is the rounding level of the residual computed from products ``T V`` (measured: 0.15
to 1.2 ``eps sqrt(N K) ||T||`` once converged on paleo and a simulated vote matrix, where
the full decomposition's eigenvectors leave 0.1), so that U is about as exact as R's:
the sine of its angle to the leading eigenvectors was 3e-13 or less there (bounded by
the residual over the gap). A looser test (``1e-10`` times the gap) moved the final loss on
paleo by up to 2e-5: R's iteration amplifies small perturbations there (permuting the
rows, which changes only rounding, moves its final loss by 5e-9).
"""

MIN_GAP = 1e-4
"""The exact solver takes over when ``lambda_K - lambda_K+1 <= MIN_GAP ||T||``.

There the leading subspace is barely defined (a small change of T rotates it), U's error
``residual / gap`` is no longer small, and the restarts, whose convergence depends on
the gap, would seldom reach the rounding level.
"""

MAX_RESTARTS = 20
"""Restarts of the eigensolver before the exact solver takes over."""


def initial_state(data: LogisticData, m, *, rank: int) -> LogPCAState:
    """R's default start: mu = colMeans(m q), U = top-K right singular vectors of centred q."""
    q = data.q
    mu = (m * q).mean(axis=0)
    _, _, vt = jnp.linalg.svd(q - q.mean(axis=0), full_matrices=False)
    U = vt[:rank].T
    eta = saturated(data, m, mu)
    return _state(data, mu, U, eta, (eta - mu) @ U)


def _exact_eigenvectors(T, rank: int):
    """The K leading eigenvectors (N, K) of T from its full symmetric eigendecomposition."""
    _, vectors = jnp.linalg.eigh(T)  # ascending eigenvalues
    return vectors[:, ::-1][:, :rank]


def _operator(Z, eta, mu) -> Operator:
    """T (module docstring) as an :class:`~bernmf.inference._logistic.Operator`, never formed.

    With ``A = eta - 1 mu^T``, ``T = A^T Z + Z^T A - eta^T eta + M mu mu^T`` is
    ``A^T (Z - A) + Z^T A - (A^T 1) mu^T - mu (1^T A)``, so its factor is
    ``F V = (A V, Z V, mu^T V)``: ``T V`` costs four products with (M, N) matrices, and
    ``A U`` is the scores.
    """
    A = eta - mu

    def backward(FV):
        AV, ZV, muV = FV
        return A.T @ (ZV - AV - muV) + Z.T @ AV - jnp.outer(mu, AV.sum(axis=0))

    def inner(FV, FW):
        (AV, ZV, muV), (AW, ZW, muW) = FV, FW
        cross = jnp.outer(AV.sum(axis=0), muW) + jnp.outer(muV, AW.sum(axis=0))
        return AV.T @ (ZW - AW) + ZV.T @ AW - cross

    return Operator(lambda V: (A @ V, Z @ V, mu @ V), backward, inner)


def _leading_eigenvectors(Z, eta, mu, U, *, exact: bool):
    """U (N, K) for the K largest eigenvalues of T (module docstring) and the scores (M, K).

    U is refined from the previous one (:func:`_operator`,
    :func:`~bernmf.inference._logistic.leading_eigenvectors`) until its residual is at
    rounding level (RESIDUAL_FLOOR); if it is not after MAX_RESTARTS restarts, if the
    gap at K is below MIN_GAP, or if ``exact`` (or ``(DEPTH + 1) K > N``), T is formed
    and fully decomposed (:func:`_exact_eigenvectors`, R's method).
    """
    A = eta - mu
    rank = U.shape[1]

    def exact_solution():
        T = A.T @ Z
        T = T + T.T - eta.T @ eta + eta.shape[0] * jnp.outer(mu, mu)
        vectors = _exact_eigenvectors(T, rank)
        return vectors, A @ vectors

    if exact or (DEPTH + 1) * rank > U.shape[0]:  # static
        return exact_solution()
    found = leading_eigenvectors(
        _operator(Z, eta, mu),
        U,
        depth=DEPTH,
        restarts=MAX_RESTARTS,
        tol=0.0,
        floor=RESIDUAL_FLOOR * jnp.finfo(A.dtype).eps * (A.shape[1] * rank) ** 0.5,
        min_gap=MIN_GAP,
    )
    warm = (found.vectors, found.factor[0])
    return jax.lax.cond(found.converged, lambda: warm, exact_solution)


def step(data: LogisticData, state: LogPCAState, m, *, exact: bool = False) -> LogPCAState:
    """One majorization step of projection logistic PCA (module docstring).

    ``exact=True`` decomposes T fully at every step, as R does (the reference of
    ``benchmarks/logpca_speed.py``); by default U is refined from the previous one.
    """
    U = state.U
    Z = working_matrix(data.q, state.theta, state.fitted)
    mu = (Z - (state.eta @ U) @ U.T).mean(axis=0)
    eta = saturated(data, m, mu)
    U, scores = _leading_eigenvectors(Z, eta, mu, U, exact=exact)
    return _state(data, mu, U, eta, scores)


def solve(data: LogisticData, m, tol, *, rank: int, max_iter: int, exact: bool = False):
    """Initialize as R does and iterate :func:`step` to convergence (:func:`minimize`)."""
    return minimize(
        initial_state(data, m, rank=rank),
        lambda p, s: step(p, s, m, exact=exact),
        data,
        tol,
        max_iter=max_iter,
        revert_above=1e-10,  # R's logisticPCA tolerates increases up to 1e-10
    )


def check_options(options: dict) -> None:
    """Raise TypeError or ValueError for an option of :func:`run` outside its range."""
    check_stopping(options["max_iter"], options["tol"])
    if options["m"] is not None:
        check_real("m", options["m"], 0, closed="right")
    m_grid = options["m_grid"]
    if isinstance(m_grid, str) or not isinstance(m_grid, Sequence | np.ndarray) or not len(m_grid):
        raise ValueError(f"m_grid must be a non-empty sequence of numbers > 0, got {m_grid!r}")
    for value in m_grid:
        check_real("each m_grid value", value, 0, closed="right")
    check_real("validation_fraction", options["validation_fraction"], 0, 1, closed="neither")


def _fit_once(data: Observed, rank: int, m: float, tol: float, max_iter: int):
    """Run the compiled solver once; return (state and solution as numpy, timings)."""
    with jax.enable_x64(True):
        layout = LogisticData.of(data)
        m_array = jnp.asarray(m, jnp.float64)
        tol_array = jnp.asarray(tol, jnp.float64)
        program, compile_seconds = compiled(
            "logpca.solve", solve, layout, m_array, tol_array, rank=rank, max_iter=max_iter
        )
        begin = time.perf_counter()
        solution = jax.block_until_ready(program(layout, m_array, tol_array))
        run_seconds = time.perf_counter() - begin
        solution = jax.tree.map(np.asarray, solution)
    return solution, {"compile": compile_seconds, "run": run_seconds}


def _choose_m(data, rank, m_grid, validation_fraction, seed, tol, max_iter):
    """Validation perplexity of each m in ``m_grid``; returns (best m, scores, seconds)."""
    observed = np.flatnonzero(data.mask)
    n_validation = round(validation_fraction * observed.size)
    if n_validation < 1 or n_validation >= observed.size:
        raise ValueError(
            f"validation_fraction={validation_fraction} leaves no validation or no training "
            f"entry among {observed.size} observed entries"
        )
    held_out = np.zeros(data.mask.size, bool)
    held_out[np.random.default_rng(seed).choice(observed, n_validation, replace=False)] = True
    held_out = held_out.reshape(data.mask.shape)
    train_mask = data.mask & ~held_out
    train = Observed(np.where(train_mask, data.Y, 0.0), train_mask, None, None)
    scores, seconds = {}, {"compile": 0.0, "run": 0.0}
    for m in m_grid:
        solution, timings = _fit_once(train, rank, m, tol, max_iter)
        scores[m] = perplexity(data.Y, expit(solution.state.theta), held_out)
        for name in seconds:
            seconds[name] += timings[name]
    best = min(m_grid, key=lambda m: (scores[m], m))
    return best, scores, seconds


OPTIONS = {
    "m": 4.0,
    "max_iter": 2000,
    "tol": 1e-5,
    "m_grid": DEFAULT_M_GRID,
    "validation_fraction": 0.2,
}
"""The options of :func:`run`, with their defaults."""


def run(
    data: Observed,
    rank: int,
    prior: None,
    seed: int,
    init=None,
    *,
    m: float | None,
    max_iter: int,
    tol: float,
    m_grid: tuple[float, ...],
    validation_fraction: float,
) -> Fit:
    """Fit projection logistic PCA; see :func:`bernmf.fit` for the common arguments.

    Parameters
    ----------
    data : Observed
        Validated data of shape (M, N).
    rank : int
        K, at most min(M, N).
    prior : None
        This engine takes no prior.
    seed : int
        Seed of the validation split when ``m=None``; otherwise recorded only.
    init : None
        Not supported (R's SVD initialization is used).
    m : float or None, default 4.0
        Scale of the saturated model's natural parameters (R's ``m``). None:
        chosen from ``m_grid`` by validation perplexity (module docstring).
    max_iter : int, default 2000
        Iteration limit.
    tol : float, default 1e-5
        Stop after at least 5 iterations when the mean negative log-likelihood
        decreases by less than ``tol`` (R's ``conv_criteria``).
    m_grid : sequence of float, default 1, 2, ..., 10
        Candidates for m when ``m=None``.
    validation_fraction : float, default 0.2
        Fraction of observed entries held out to choose m when ``m=None``.

    Returns
    -------
    Fit
        ``W`` = scores (eta - 1 mu^T) U (M, K), ``H`` = U^T (K, N),
        ``probs`` = sigmoid(Theta), ``trace`` = mean NLL per observed entry from
        iteration 0, ``extras = {"mu": (N,), "U": (N, K), "m": float}`` plus
        ``"m_scores"`` (validation perplexity per candidate) when m was chosen.
    """
    check_fit("logpca", rank, data.shape, init)
    extras, timings = {}, {}
    if m is None:
        grid = tuple(float(value) for value in m_grid)
        m, scores, timings = _choose_m(
            data, rank, grid, validation_fraction, seed, tol, int(max_iter)
        )
        extras["m_scores"] = scores
        timings = {"select_m_" + name: value for name, value in timings.items()}
    m = float(m)
    solution, fit_timings = _fit_once(data, rank, m, tol, int(max_iter))
    state = solution.state
    n_iter = int(solution.n_iter)
    U = np.asarray(state.U, float)
    scores_matrix = (state.eta - state.mu) @ U
    return Fit(
        engine="logpca",
        rank=rank,
        prior=None,
        W=scores_matrix,
        H=U.T.copy(),
        stored_probs=expit(np.asarray(state.theta, float)),
        trace=np.asarray(solution.trace[: n_iter + 1], float),
        converged=bool(solution.change < tol),
        record=Record(seed, {**fit_timings, **timings}),
        extras={"mu": np.asarray(state.mu, float), "U": U, "m": m, **extras},
    )


class Projection(NamedTuple):
    """Scores (M', K) of new rows and their probabilities sigmoid(Theta) (M', N)."""

    scores: np.ndarray
    probs: np.ndarray


def transform(fit: Fit, Y, mask=None) -> Projection:
    """Project new rows onto a fitted ``logpca`` model (no refitting).

    Parameters
    ----------
    fit : Fit
        A result of ``bernmf.fit(..., engine="logpca")``.
    Y : array-like or DataFrame of shape (M', N)
        New rows with the fitted columns; NaN is missing.
    mask : bool array of shape (M', N), optional
        True where observed; missing entries sit at the column's main effect,
        as in the fit.

    Returns
    -------
    Projection
        ``scores = (eta - 1 mu^T) U`` of shape (M', K) with
        ``eta = m q + (missing) * mu``, and ``probs = sigmoid(1 mu^T + scores U^T)``.
    """
    if fit.engine != "logpca":
        raise ValueError(f"transform needs a 'logpca' fit, got engine {fit.engine!r}")
    data = as_observed(Y, mask)
    mu, U, m = fit.extras["mu"], fit.extras["U"], fit.extras["m"]
    if data.shape[1] != mu.shape[0]:
        raise ValueError(f"Y has {data.shape[1]} columns but the fit has {mu.shape[0]}")
    q = np.where(data.mask, 2 * data.Y - 1, 0.0)
    eta = m * q + np.where(data.mask, 0.0, mu)
    scores = (eta - mu) @ U
    return Projection(scores, expit(mu + scores @ U.T))


ENGINE = register(
    Engine(
        "logpca",
        run,
        OPTIONS,
        probabilities=False,
        check_options=check_options,
        trace="the mean negative log likelihood per observed entry",
    )
)
