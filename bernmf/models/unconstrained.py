"""The model's log density on NumPyro's unconstrained coordinates, in plain JAX.

What the ``svi`` engine differentiates, without NumPyro (whose import a first call
would otherwise pay): the log-likelihood with its gradient written out
(:func:`log_likelihood`, also the factor of :mod:`bernmf.models.numpyro_model`), and
NumPyro's bijections from unconstrained coordinates onto the supports of the priors
with their log-Jacobians, the same functions as ``biject_to(constraints.simplex)``
(a stick-breaking transform) for the rows of W and ``biject_to(constraints.
unit_interval)`` (a sigmoid) for the entries of H, so that a point and a density mean
the same in both. The bijections and their inverses take numpy arrays (computed in
numpy: starting points and draws) or JAX arrays. :func:`interior` moves given factors
(a MAP's exact zeros) inside the supports, so that they have an image here.
:func:`log_density` is the model's log density on these coordinates (what ``svi``'s
ELBO and any gradient-based sampler of an engine of one's own evaluate).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from bernmf.models.spec import log_prior, masked_log_likelihood_terms, observed_probability


@jax.custom_vjp
def log_likelihood(Y, mask, W, H):
    """:func:`bernmf.models.spec.log_likelihood` (JAX arrays), with its gradient written out.

    With ``P = where(Y = 1, W @ H, W @ (1 - H))`` on the observed entries,
    ``A = O * Y / P``, ``B = O * (1 - Y) / P`` and ``G = A - B``, the gradients are
    ``A @ H.T + B @ (1 - H).T = G @ H.T + B.sum(1)`` for W and ``W.T @ A - W.T @ B =
    W.T @ G`` for H: two matrix products.

    Parameters
    ----------
    Y : array of shape (M, N)
        Binary data (values where ``mask`` is False are ignored).
    mask : bool array of shape (M, N)
    W : array of shape (M, K)
    H : array of shape (K, N)

    Returns
    -------
    scalar
        ``sum(mask * (Y log(WH) + (1 - Y) log(W(1 - H))))``.
    """
    return _log_likelihood_forward(Y, mask, W, H)[0]


def _log_likelihood_forward(Y, mask, W, H):
    p_one, p_zero = W @ H, W @ (1 - H)
    value = jnp.sum(masked_log_likelihood_terms(Y, mask, p_one, p_zero))
    observed = observed_probability(Y, mask, p_one, p_zero)  # XLA shares it with the line above
    is_one = mask & (Y == 1)
    tiny = jnp.finfo(W.dtype).tiny
    inverse = jnp.where(mask & (observed > tiny), 1 / jnp.maximum(observed, tiny), 0.0)
    signed = jnp.where(is_one, inverse, -inverse)  # d term / d P(Y=1); clipped terms: 0
    from_zeros = jnp.sum(jnp.where(is_one, 0.0, inverse), axis=1, keepdims=True)
    return value, (W, H, signed, from_zeros)


def _log_likelihood_backward(saved, cotangent):
    W, H, signed, from_zeros = saved
    return None, None, cotangent * (signed @ H.T + from_zeros), cotangent * (W.T @ signed)


log_likelihood.defvjp(_log_likelihood_forward, _log_likelihood_backward)


def _sigmoid(x):
    """NumPyro's clipped expit: within ``[tiny, 1 - eps]`` of the dtype."""
    finfo = np.finfo(x.dtype)
    if isinstance(x, jax.Array):
        return jnp.clip(jax.nn.sigmoid(x), finfo.tiny, 1 - finfo.eps)
    return np.clip(np.exp(-np.logaddexp(0, -x)), finfo.tiny, 1 - finfo.eps)


def _stick_offsets(x):
    """``log(K - 1 - j)`` for the K - 1 coordinates j of a row (0 maps to the uniform row)."""
    xp = jnp if isinstance(x, jax.Array) else np
    size = x.shape[-1]
    return xp.log(size - xp.arange(size, dtype=x.dtype))


def to_simplex(x):
    """Rows on the simplex from unconstrained coordinates (NumPyro's stick breaking).

    Parameters
    ----------
    x : array of shape (..., K - 1)

    Returns
    -------
    array of shape (..., K)
    """
    xp = jnp if isinstance(x, jax.Array) else np
    z = _sigmoid(x - _stick_offsets(x))
    ones = xp.ones((*x.shape[:-1], 1), x.dtype)
    remaining = xp.cumprod(1 - z, axis=-1)
    return xp.concatenate([z, ones], axis=-1) * xp.concatenate([ones, remaining], axis=-1)


def from_simplex(y):
    """The inverse of :func:`to_simplex`: (..., K) -> (..., K - 1)."""
    xp = jnp if isinstance(y, jax.Array) else np
    crop = y[..., :-1]
    remaining = xp.clip(1 - xp.cumsum(crop, axis=-1), np.finfo(y.dtype).tiny, None)
    x = xp.log(crop / remaining)
    return x + _stick_offsets(x)


def simplex_log_jacobian(x, y):
    """log |det d to_simplex(x) / dx| of each row (JAX): x (..., K - 1), y (..., K) -> (...)."""
    shifted = x - _stick_offsets(x)
    return jnp.sum(jnp.log(y[..., :-1]) + (jax.nn.log_sigmoid(shifted) - shifted), axis=-1)


def to_unit(x):
    """Entries in (0, 1) from unconstrained coordinates (NumPyro's clipped sigmoid)."""
    return _sigmoid(x)


def from_unit(y):
    """The inverse of :func:`to_unit` (the logit)."""
    xp = jnp if isinstance(y, jax.Array) else np
    return xp.log(y) - xp.log1p(-y)


def unit_log_jacobian(x):
    """log |d to_unit(x) / dx| of each entry (JAX)."""
    return -jax.nn.softplus(x) - jax.nn.softplus(-x)


def log_density(params: dict, Y, mask, prior, constant=0.0):
    """The model's log density at unconstrained coordinates, Jacobians included (JAX).

    ``log p(Y, W, H)`` at ``W = to_simplex(params["W"])``, ``H = to_unit(params["H"])``
    plus the log-Jacobians of those maps: the density of the coordinates, which a sampler
    on them targets. With ``constant = log_prior_constant(*prior, M, N)``
    (:func:`bernmf.models.spec.log_prior_constant`) it is minus NumPyro's potential energy
    of :func:`bernmf.models.numpyro_model.model`; with 0 it differs from it by that
    constant only. Differentiable (its likelihood's gradient written out,
    :func:`log_likelihood`) and traceable by ``jax.jit``.

    Parameters
    ----------
    params : dict
        ``{"W": (M, K - 1), "H": (K, N)}`` arrays of unconstrained coordinates.
    Y : array of shape (M, N)
        Binary data (any value where ``mask`` is False).
    mask : bool array of shape (M, N)
        True where the entry is observed.
    prior : Prior
        Arrays of shape (K,).
    constant : scalar, default 0.0
        Added to the prior's kernel (see above).

    Returns
    -------
    scalar
    """
    W_x, H_x = params["W"], params["H"]
    W, H = to_simplex(W_x), to_unit(H_x)
    value = log_prior(W, H, prior) + constant + log_likelihood(Y, mask, W, H)
    value = value + jnp.sum(simplex_log_jacobian(W_x, W))
    return value + jnp.sum(unit_log_jacobian(H_x))


def interior(W, H, margin: float = 1e-3) -> tuple[np.ndarray, np.ndarray]:
    """Move factors off the boundary (a MAP often has exact zeros) so they have a finite
    unconstrained image: W is mixed with the uniform row, H is clipped to
    ``[margin, 1 - margin]``.

    Parameters
    ----------
    W : array of shape (..., M, K)
    H : array of shape (..., K, N)
    margin : float

    Returns
    -------
    (W, H)
        Of the same shapes.
    """
    W = np.asarray(W, float)
    K = W.shape[-1]
    return (1 - margin) * W + margin / K, np.clip(np.asarray(H, float), margin, 1 - margin)
