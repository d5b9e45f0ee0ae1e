"""Pieces shared by the logistic engines ``logsvd`` and ``logpca`` (R package logisticPCA).

Both fit natural parameters Theta of shape (M, N), P(Y=1) = sigmoid(Theta), by the
quadratic majorization of the Bernoulli deviance (de Leeuw 2006; Landgraf & Lee 2020).
With ``q = 2y - 1`` on observed entries and ``q = 0`` on missing ones, the working
matrix is ``Z = Theta + 4 q (1 - sigmoid(q Theta))`` (so ``Z = Theta`` where an entry
is missing), and each engine minimizes ``||Z - Theta_new||^2`` over its model.

The loss is the mean negative log-likelihood per observed entry. The stopping rule is
R's: after at least 5 iterations, stop as soon as the loss decreases by less than
``tol`` (a negative decrease included); if that last step increased the loss, keep the
previous iterate and drop the last trace value.

Both engines need, at each step, the K leading eigenvectors of a symmetric N x N matrix
that changes little from one step to the next: :func:`leading_eigenvectors` finds them
from products with it, warm-started from the previous step's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bernmf.data.observed import Observed
from bernmf.inference._loop import Solution, iterate_until
from bernmf.models.spec import masked_log_likelihood_sum


def expit(x) -> np.ndarray:
    """The logistic function 1 / (1 + exp(-x)) of a numpy array (:func:`scipy.special.expit`).

    scipy.special loads on the first call (0.2 s), not with the package.
    """
    from scipy.special import expit as logistic

    return logistic(x)


MIN_ITER = 5  # R checks convergence only once ``m > 4``


class LogisticData(NamedTuple):
    """The observed data as the updates use them (float64).

    Attributes
    ----------
    y : array of shape (M, N)
        Binary data, 0 where not observed.
    mask : bool array of shape (M, N)
        True where observed.
    q : array of shape (M, N)
        ``2y - 1`` where observed, 0 elsewhere.
    n_obs : scalar
        Number of observed entries.
    """

    y: jax.Array
    mask: jax.Array
    q: jax.Array
    n_obs: jax.Array

    @classmethod
    def of(cls, data: Observed) -> LogisticData:
        """From validated data (call under ``jax.enable_x64(True)``)."""
        return cls(
            y=jnp.asarray(data.Y, jnp.float64),
            mask=jnp.asarray(data.mask),
            q=jnp.asarray(np.where(data.mask, 2 * data.Y - 1, 0.0), jnp.float64),
            n_obs=jnp.asarray(data.mask.sum(), jnp.float64),
        )


def fitted_sigmoid(q, theta):
    """``sigmoid(q Theta)``, shape (M, N).

    Where an entry is observed it is the probability of its observed value (P(Y=1)
    where y = 1, P(Y=0) where y = 0); where it is missing (q = 0) it is 1/2. The
    states of both engines carry it, so that one sigmoid per entry and iteration
    serves both the loss of an iterate and the working matrix of the next step.
    """
    return jax.nn.sigmoid(q * theta)


def working_matrix(q, theta, fitted):
    """``Z = Theta + 4 q (1 - sigmoid(q Theta))``, shape (M, N); equals Theta where q = 0.

    ``fitted`` is :func:`fitted_sigmoid` ``(q, theta)``.
    """
    return theta + 4 * q * (1 - fitted)


def fitted_nll(data: LogisticData, fitted):
    """Mean negative log-likelihood of the observed entries from ``sigmoid(q Theta)``."""
    return -masked_log_likelihood_sum(data.y, data.mask, fitted, fitted) / data.n_obs


def _decrease(previous, current):
    """The loss's decrease ``previous - current``: the change that the loop compares with tol.

    R stops when ``decrease < tol``, which a NaN decrease (a NaN loss, or inf - inf)
    does not meet, so it counts as inf here (the loop stops on a NaN change).
    """
    decrease = previous - current
    return jnp.where(jnp.isnan(decrease), jnp.inf, decrease)


def minimize(
    start,
    step: Callable,
    data: LogisticData,
    tol,
    *,
    max_iter: int,
    revert_above: float,
) -> Solution:
    """Iterate ``state = step(data, state)`` with R's stopping rule.

    Runs on :func:`~bernmf.inference._loop.iterate_until` with the loss's decrease as
    the change and ``min_iter=5``; the loop's state is the pair (latest, previous
    iterate), so that the last step can be undone.

    Parameters
    ----------
    start : NamedTuple of arrays
        The initial state; it must have the fields ``theta`` (M, N) and ``fitted``
        = :func:`fitted_sigmoid` ``(q, theta)``, from which the loss is computed.
    step : callable
        ``step(data, state) -> state``, one majorization step.
    data : LogisticData
    tol : scalar
        Stop after iteration ``i >= 5`` when ``loss[i-1] - loss[i] < tol``.
    max_iter : int
        Iteration limit (static: it sets the trace's length).
    revert_above : float
        Keep the previous iterate when the last step raised the loss by more than
        this (R: 0 for logisticSVD, 1e-10 for logisticPCA).

    Returns
    -------
    Solution
        ``state`` is the kept iterate and ``trace[: n_iter + 1]`` the loss from
        iteration 0 to it; ``change`` is the last step's decrease (inf before
        iteration 5), so ``change < tol`` when R's rule stopped the loop.
    """
    end = iterate_until(
        lambda pair: (step(data, pair[0]), pair[0]),
        lambda pair: fitted_nll(data, pair[0].fitted),
        (start, start),
        tol,
        max_iter=max_iter,
        change=_decrease,
        min_iter=MIN_ITER,
    )
    (latest, previous), trace, i = end.state, end.trace, end.n_iter
    increased = trace[i] - trace[i - 1] > revert_above
    kept = jax.tree.map(lambda new, old: jnp.where(increased, old, new), latest, previous)
    trace = jnp.where(increased, trace.at[i].set(jnp.nan), trace)
    return end._replace(state=kept, trace=trace, n_iter=i - increased.astype(i.dtype))


def check_fit(engine: str, rank: int, shape: tuple[int, int], init) -> None:
    """Raise ValueError for a rank or an init that the logistic engines cannot use
    (their options are checked by each engine's ``check_options``)."""
    if init is not None:
        raise ValueError(
            f"engine {engine!r} starts from R's deterministic SVD initialization and takes no init"
        )
    if rank > min(shape):
        raise ValueError(
            f"engine {engine!r} needs rank <= min(M, N) = {min(shape)}, got rank={rank}"
        )


class Operator(NamedTuple):
    """A symmetric N x N matrix ``G = F^T S F``, known through its factor F (L x N).

    Only F's products are computed, never G (S is any symmetric L x L matrix):

    Attributes
    ----------
    forward : callable
        ``V (N, p) -> F V``: an array or a tuple of arrays whose last axis is V's columns,
        linear in V (``F (V C) = (F V) C``).
    backward : callable
        ``F V -> G V = F^T S F V``, shape (N, p).
    inner : callable
        ``(F V, F W) -> V^T G W = (F V)^T S (F W)``, shape (p, q).
    """

    forward: Callable
    backward: Callable
    inner: Callable


class Eigenpairs(NamedTuple):
    """The leading eigenpairs of a symmetric matrix G, as :func:`leading_eigenvectors` left them.

    Attributes
    ----------
    vectors : array of shape (N, K)
        Orthonormal Ritz vectors, in decreasing order of their Ritz values.
    products : array of shape (N, K)
        ``G @ vectors``.
    factor : array or tuple of arrays
        ``F @ vectors`` (:class:`Operator`), for the caller's use (the scores).
    values : array of shape ((depth + 1) K,)
        The Ritz values of the last basis, decreasing: the first K estimate the leading
        eigenvalues, the next ones those below them.
    converged : bool array
        True when the residual test passed (so the vectors are G's leading eigenvectors
        to its accuracy); False after ``restarts`` restarts, or when the gap was too small.
    """

    vectors: jax.Array
    products: jax.Array
    factor: Any
    values: jax.Array
    converged: jax.Array


def _orthonormal_columns(W):
    """An orthonormal basis (N, p) of span(W) (N, p) by SVQB (Stathopoulos & Wu 2002).

    The columns scaled to unit norm, then ``W P diag(s)^-1/2`` from the eigendecomposition
    ``P diag(s) P^T`` of their p x p Gram matrix; a direction with ``s <= eps max(s)`` (W
    rank-deficient to rounding level) gives a zero column instead. The result is
    orthonormal to about ``eps cond(W)^2``, so to rounding level when W is already nearly
    orthonormal (:func:`_orthonormal_complement` calls it twice).
    """
    norms = jnp.sqrt(jnp.sum(W**2, axis=0))
    W = W / jnp.where(norms > 0, norms, 1.0)
    s, P = jnp.linalg.eigh(W.T @ W)
    kept = s > jnp.finfo(W.dtype).eps * s.max()
    return W @ (P * jnp.where(kept, 1 / jnp.sqrt(jnp.where(kept, s, 1.0)), 0.0))


def _orthonormal_complement(V, basis):
    """An orthonormal basis (N, p) of the part of span(V) (N, p) orthogonal to ``basis`` (N, b).

    Twice ("twice is enough", Parlett 1998, sec. 6.9): project ``basis`` (orthonormal) out,
    then orthonormalize the rest (:func:`_orthonormal_columns`). The second pass restores
    orthogonality to rounding level where V is nearly in span(basis), as a converged Krylov
    block is (its columns then span rounding errors, which is harmless); a direction of V
    in span(basis) to rounding level gives a zero column.

    Only products with N-row matrices and the eigendecomposition of p x p ones: on CPU,
    jax runs QR and the other decompositions with the LAPACK of scipy's OpenBLAS, whose
    threads spin on an N x 2K matrix (a Householder QR of ``[basis, V]`` here made a
    logsvd step on paleo, N = 902, cost 15 to 25 times more CPU at K = 6 and 8 than at
    K = 4).
    """
    for _ in range(2):
        V = _orthonormal_columns(V - basis @ (basis.T @ V))
    return V


def _columns(*blocks):
    """Blocks of F's products (arrays or tuples of arrays) side by side on their last axis."""
    return jax.tree.map(lambda *parts: jnp.concatenate(parts, axis=-1), *blocks)


def leading_eigenvectors(
    G: Operator,
    start,
    *,
    depth: int,
    restarts: int,
    tol: float,
    floor: float,
    min_gap: float,
) -> Eigenpairs:
    """The K eigenvectors of the largest eigenvalues of a symmetric G, from products with G.

    Restarted block Lanczos warm-started from ``start``: each restart builds the block
    Krylov basis span(U, G U, ..., G^depth U) of the current vectors U (orthonormalized
    block by block, :func:`_orthonormal_complement`; a direction already in the basis to
    rounding level, as where G's Krylov space is exhausted, is a zero column, a Ritz
    value 0 with a zero vector) and keeps the K leading Ritz pairs of G in it (Rayleigh-Ritz, the
    projected matrix from F's products of the basis, so that the last block needs no
    product with F^T). The basis contains U, so the Ritz vectors are never worse than U
    for the sum of the K leading Rayleigh quotients. It stops as soon as the residual
    ``r = ||G U - U diag(theta_1..K)||_F`` passes the test
    ``r <= max(tol * (theta_K - theta_K+1), floor * max|theta|)``: the first term bounds
    the sine of the angle between span(U) and G's leading eigenvectors by about
    ``tol`` (Davis-Kahan, with the Ritz values standing for the eigenvalues); the second
    is the residual's rounding level relative to ``||G||``, where the vectors are as
    accurate as an exact eigensolver's (a sine of about ``r`` over the gap). Or it stops
    after ``restarts`` restarts; or when the gap ``theta_K - theta_K+1`` is at most
    ``min_gap`` times the largest ``|theta|``, where the leading subspace is barely
    defined and the restarts converge slowly (``converged`` is then False, and the
    caller falls back on an exact solver). Like every warm-started Krylov method it
    relies on ``start`` not being orthogonal, to rounding level, to a leading
    eigenvector; the previous step's vectors are not, in practice.

    A restart costs ``depth`` products with F and ``depth`` with F^T, of K columns each.

    Parameters
    ----------
    G : Operator
        The matrix, through products with its factor.
    start : array of shape (N, K)
        Orthonormal starting vectors; ``(depth + 1) K <= N``.
    depth : int
        Blocks G U, ..., G^depth U added to U at each restart (static).
    restarts : int
        Most restarts (static). With 1, the one Rayleigh-Ritz step on
        span(U, ..., G^depth U), and what the caller leaves unused (the residual, the
        products) is not computed.
    tol, floor, min_gap : float
        The residual test's two terms and the smallest relative gap, as above.

    Returns
    -------
    Eigenpairs
    """
    rank = start.shape[1]

    def restart(carry):
        i, U, GU, FU, _, _, _ = carry
        basis, factor, latest = U, FU, GU
        for block_number in range(depth):  # static
            block = _orthonormal_complement(latest, basis)
            F_block = G.forward(block)
            basis, factor = jnp.concatenate([basis, block], axis=1), _columns(factor, F_block)
            if block_number < depth - 1:
                latest = G.backward(F_block)
        projected = G.inner(factor, factor)
        values, vectors = jnp.linalg.eigh((projected + projected.T) / 2)  # ascending
        values, vectors = values[::-1], vectors[:, ::-1][:, :rank]
        U, FU = basis @ vectors, jax.tree.map(lambda x: x @ vectors, factor)
        GU = G.backward(FU)
        residual = jnp.sqrt(jnp.sum((GU - U * values[:rank]) ** 2))
        gap, scale = values[rank - 1] - values[rank], jnp.abs(values).max()
        degenerate = gap <= min_gap * scale
        converged = (residual <= jnp.maximum(tol * gap, floor * scale)) & ~degenerate
        return i + 1, U, GU, FU, values, converged, degenerate

    def keep_going(carry):
        i, *_, converged, degenerate = carry
        return (i < restarts) & ~converged & ~degenerate

    FU = G.forward(start)
    values = jnp.zeros((depth + 1) * rank, start.dtype)
    no = jnp.asarray(False)
    carry = (jnp.asarray(0), start, G.backward(FU), FU, values, no, no)
    if restarts == 1:  # static: no loop, so that XLA drops what the caller leaves unused
        carry = restart(carry)
    else:
        carry = jax.lax.while_loop(keep_going, restart, carry)
    _, U, GU, FU, values, converged, _ = carry
    return Eigenpairs(U, GU, FU, values, converged)
