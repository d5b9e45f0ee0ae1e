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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

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
