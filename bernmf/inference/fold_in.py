"""Fold-in: W for new rows with H fixed, by the W half of the MM sweep.

With H fixed, the MAP problem in W separates over rows, and each row's objective
(the Bernoulli log-likelihood of its observed entries, linear in W inside the log,
plus the Dirichlet log-density with gamma >= 1) is concave on the simplex: the
MM iteration :func:`bernmf.inference.mm.update_W` climbs to its maximum from
any interior start. Only the entries where ``data.mask`` is True enter; a row with
no observed entry keeps the start 1/K (gamma = 1) or goes to the prior's mode.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bernmf.data.arguments import check_stopping
from bernmf.data.observed import Observed
from bernmf.inference import mm
from bernmf.inference._compile import compiled
from bernmf.inference.mm import layout
from bernmf.models.spec import Prior, masked_log_likelihood_terms


class FoldIn(NamedTuple):
    """Result of :func:`fold_in`.

    Attributes
    ----------
    W : ndarray of shape (M, K)
        Rows on the simplex.
    n_iter : int
        W updates run (by the slowest row).
    converged : bool
        True if every row's relative change of its objective fell below ``tol``.
    """

    W: np.ndarray
    n_iter: int
    converged: bool


def row_objectives(data: layout.Dense, state: layout.Predictions, gamma) -> jax.Array:
    """Negative log-posterior of each row's W given H, shape (M,)."""
    log_lik = masked_log_likelihood_terms(data.y_one, data.mask, state.p_one, state.p_zero)
    log_w = jnp.log(jnp.maximum(state.W, jnp.finfo(state.W.dtype).tiny))
    return -(log_lik.sum(axis=1) + log_w @ (gamma - 1))


def _solve(W, H, data: layout.Dense, prior: Prior, tol, *, max_iter: int):
    """MM updates of W; each row stops on its own, so rows never depend on each other.

    Not the shared :func:`bernmf.inference._loop.iterate_until`: that loop stops on
    one scalar objective, and here every row has its own stopping rule.
    """
    state = layout.state_at(data, W, H)
    first = row_objectives(data, state, prior.gamma)
    active = jnp.ones(first.shape, bool)

    def keep_going(carry):
        i, _, _, active = carry
        return (i < max_iter) & active.any()

    def iterate(carry):
        i, state, previous, active = carry
        W = jnp.where(active[:, None], mm.update_W(data, state, prior).W, state.W)
        state = layout.state_at(data, W, H)
        value = row_objectives(data, state, prior.gamma)
        scale = jnp.maximum(jnp.abs(previous), jnp.finfo(value.dtype).tiny)
        return i + 1, state, value, active & (jnp.abs(previous - value) / scale >= tol)

    i, state, _, active = jax.lax.while_loop(keep_going, iterate, (0, state, first, active))
    return state.W, i, active.any()


def fold_in(data: Observed, H, gamma=1.0, *, max_iter: int = 1000, tol: float = 1e-9) -> FoldIn:
    """Fit W of shape (M, K) to the observed entries of ``data`` with H fixed.

    Parameters
    ----------
    data : Observed
        Validated data of shape (M, N); only entries with ``data.mask`` True are used.
    H : array of shape (K, N)
        Fixed column factors, entries in [0, 1].
    gamma : float or array of shape (K,), default 1
        Dirichlet parameter of the rows of W, >= 1 (the MM update needs it).
    max_iter : int, default 1000
        Limit on the W updates.
    tol : float, default 1e-9
        A row stops when the relative change of its objective is below it; rows
        are independent, so a row's W does not depend on the other rows given.

    Returns
    -------
    FoldIn
    """
    check_stopping(max_iter, tol)
    H = np.asarray(H, dtype=float)
    M, N = data.shape
    if H.ndim != 2 or H.shape[1] != N:
        raise ValueError(f"H must have shape (K, {N}), got {H.shape}")
    K = H.shape[0]
    prior = Prior(gamma=gamma).broadcast(K)
    if np.any(prior.gamma < 1):
        raise ValueError(f"fold-in needs gamma >= 1, got {prior.gamma.tolist()}")
    with jax.enable_x64(True):
        dense = layout.make_data(data, jnp.float64)
        args = (
            jnp.full((M, K), 1.0 / K),
            jnp.asarray(H),
            dense,
            Prior(*(jnp.asarray(v) for v in prior)),
            jnp.asarray(tol, jnp.float64),
        )
        program, _ = compiled("fold_in.solve", _solve, *args, max_iter=int(max_iter))
        W, n_iter, unconverged = program(*args)
        return FoldIn(np.asarray(W, float), int(n_iter), not bool(unconverged))
