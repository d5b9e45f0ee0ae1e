"""The augmented model shared by the ``gibbs`` and ``vb`` engines (Lumbreras et al. 2020).

Each observed entry gets a component ``z_mn`` in {0..K-1} with ``P(z_mn = k | w_m) =
w_mk`` and ``y_mn | z_mn = k ~ Bernoulli(h_kn)``; summing ``z`` out gives back the model.
Entries that are not observed get no ``z``. The samplers and the variational methods
work with the counts over observed entries only, stored component-first (float, so
that soft counts fit the same code)::

    L[k, m] = #{n observed in row m    : z_mn = k}             shape (K, M)
    A[k, n] = #{m observed in column n : z_mn = k, y_mn = 1}   shape (K, N)
    T[k, n] = #{m observed in column n : z_mn = k}             shape (K, N)

(``B = T - A`` counts the zeros.) Given the counts, W and H are conditionally
independent: ``w_m | Z ~ Dirichlet(gamma + L[:, m])`` and ``h_kn | Z ~ Beta(alpha_k +
A_kn, beta_k + B_kn)`` (:func:`conditionals`; vb's q(W) and q(H) are of the same
families, drawn by :func:`dirichlet_draws` and :func:`beta_draws`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from bernmf.models.spec import Prior


class Counts(NamedTuple):
    """Counts of the augmented model: L of shape (K, M), A and T of shape (K, N)."""

    L: jax.Array
    A: jax.Array
    T: jax.Array


class RankScaledPrior(Prior):
    """A prior whose Dirichlet parameter is divided by the rank: gamma_k = gamma / K.

    The default of the ``gibbs`` and ``vb`` engines is ``RankScaledPrior(1, 1, 1)``,
    that is alpha = beta = 1 and gamma = 1/K (the setting of Lumbreras et al. 2020),
    resolved by :meth:`broadcast` when :func:`bernmf.fit` knows the rank.
    """

    __slots__ = ()

    def broadcast(self, rank: int) -> Prior:
        """Return ``Prior(alpha, beta, gamma / rank)`` as float64 arrays of shape (rank,)."""
        gamma = np.asarray(self.gamma, dtype=float) / rank
        return Prior(self.alpha, self.beta, gamma).broadcast(rank)

    def __repr__(self) -> str:
        return f"Prior(alpha={self.alpha!r}, beta={self.beta!r}, gamma={self.gamma!r}/K)"


DEFAULT_PRIOR = RankScaledPrior(alpha=1.0, beta=1.0, gamma=1.0)


def check_prior(prior: Prior) -> None:
    """Any positive, finite alpha, beta and gamma (gamma < 1 included) is accepted.

    Raises
    ------
    ValueError
        If a hyperparameter is not finite or not positive.
    """
    for name, value in prior._asdict().items():
        array = np.asarray(value, dtype=float)
        if not (np.all(np.isfinite(array)) and np.all(array > 0)):
            raise ValueError(f"prior {name} must be positive and finite, got {array.tolist()}")


def prior_arrays(prior: Prior, dtype) -> Prior:
    """The prior as column vectors of shape (K, 1) in ``dtype``, ready to broadcast with counts."""
    return Prior(*(jnp.asarray(v, dtype).reshape(-1, 1) for v in prior))


def counts_of(onehot, y, obs) -> Counts:
    """Counts of a (soft) assignment.

    Parameters
    ----------
    onehot : array of shape (K, M, N)
        Indicator (or probability) of each entry's component.
    y, obs : arrays of shape (M, N)
        Data (0 where not observed) and the observed indicator, as floats.

    Returns
    -------
    Counts
    """
    weighted = onehot * obs
    return Counts(L=weighted.sum(2), A=(weighted * y).sum(1), T=weighted.sum(1))


def conditionals(counts: Counts, prior: Prior) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The parameters of W and H given the counts, float64 numpy.

    ``w_m | counts ~ Dirichlet(c_m)`` with ``c = gamma + L.T`` of shape (M, K), and ``h_kn |
    counts ~ Beta(a_kn, b_kn)`` with ``a = alpha + A``, ``b = beta + T - A`` of shape (K,
    N). Any leading (chain, draw) axes of the counts are kept.
    """
    L, A, T = (np.asarray(c, dtype=float) for c in counts)
    alpha, beta, gamma = (np.asarray(v, dtype=float).reshape(-1, 1) for v in prior)
    return np.swapaxes(gamma + L, -1, -2), alpha + A, beta + T - A


def posterior_means(counts: Counts, prior: Prior) -> tuple[np.ndarray, np.ndarray]:
    """E[W | counts] of shape (M, K) and E[H | counts] of shape (K, N), float64 numpy.

    ``E[w_mk] = (gamma_k + L_km) / (sum(gamma) + n_m)`` and ``E[h_kn] = (alpha_k + A_kn) /
    (alpha_k + beta_k + T_kn)``. Any leading (chain, draw) axes of the counts are kept.
    """
    concentration, a, b = conditionals(counts, prior)
    return concentration / concentration.sum(axis=-1, keepdims=True), a / (a + b)


def log_gamma_draws(rng: np.random.Generator, a: np.ndarray) -> np.ndarray:
    """log of one Gamma(a, 1) draw per entry of the shape parameters ``a`` > 0, float64.

    ``log G(a) = log G(a + 1) + log(U) / a`` (U uniform on (0, 1]): a Gamma(a) draw is
    below the smallest float for a << 1 (gamma = 1e-3 / K), its log is not. Clipped at
    half the most negative float, so that differences of logs never overflow and their
    softmax and sigmoid are never NaN.
    """
    a = np.asarray(a, float)
    with np.errstate(over="ignore"):  # log(U) / a is -inf below a = 1e-307: clipped
        logs = np.log(rng.standard_gamma(a + 1)) + np.log1p(-rng.random(a.shape)) / a
    return np.maximum(logs, np.finfo(float).min / 2)


def dirichlet_draws(rng: np.random.Generator, concentration: np.ndarray) -> np.ndarray:
    """One Dirichlet draw per row of ``concentration`` (..., K), on the simplex: the
    softmax of K log-gamma draws (:func:`log_gamma_draws`)."""
    logs = log_gamma_draws(rng, concentration)
    shares = np.exp(logs - logs.max(axis=-1, keepdims=True))
    return shares / shares.sum(axis=-1, keepdims=True)


def beta_draws(rng: np.random.Generator, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One Beta(a, b) draw per entry of ``a`` and ``b`` (same shape), in [0, 1]: the
    sigmoid of the difference d of two log-gamma draws (:func:`log_gamma_draws`), from
    exp(-|d|), which never overflows (numpy: scipy is no import of ``bernmf``)."""
    difference = log_gamma_draws(rng, a) - log_gamma_draws(rng, b)
    small = np.exp(-np.abs(difference))
    return np.where(difference >= 0, 1, small) / (1 + small)


def conditional_draws(
    counts: Counts, prior: Prior, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """W of shape (M, K) and H of shape (K, N) drawn given the counts (:func:`conditionals`).

    float64 numpy; any leading (chain, draw) axes of the counts are kept, one draw each.
    W first, then H, from ``rng``.
    """
    concentration, a, b = conditionals(counts, prior)
    return dirichlet_draws(rng, concentration), beta_draws(rng, a, b)


def collapsed_log_joint(counts: Counts, prior: Prior) -> jax.Array:
    """log p(Y_observed, Z) with W and H integrated out, from the counts of Z.

    ``sum_m [lnG(sum gamma) - lnG(sum gamma + n_m) + sum_k lnG(gamma_k + L_km) - lnG(gamma_k)]
    + sum_kn [lnB(alpha_k + A_kn, beta_k + B_kn) - lnB(alpha_k, beta_k)]`` with lnG = log
    Gamma and lnB = log Beta. ``prior`` holds column vectors of shape (K, 1); computed in
    the dtype of the prior (the counts are cast to it).

    Returns
    -------
    scalar
    """
    alpha, beta, gamma = prior
    L, A, T = (c.astype(alpha.dtype) for c in counts)
    total_gamma = jnp.sum(gamma)
    rows = (
        gammaln(total_gamma) * L.shape[1]
        - jnp.sum(gammaln(total_gamma + L.sum(0)))
        + jnp.sum(gammaln(gamma + L) - gammaln(gamma))
    )
    columns = jnp.sum(
        gammaln(alpha + A)
        + gammaln(beta + T - A)
        - gammaln(alpha + beta + T)
        - (gammaln(alpha) + gammaln(beta) - gammaln(alpha + beta))
    )
    return rows + columns
