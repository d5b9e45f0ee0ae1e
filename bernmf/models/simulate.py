"""Draw data from the model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from bernmf.models.spec import Prior


def simulate(key, M: int, N: int, K: int, prior: Prior = Prior()):
    """Draw W, H from the prior and Y ~ Bernoulli(W @ H).

    Parameters
    ----------
    key : jax.random key or int
        Random key (an int is used as a seed).
    M, N : int
        Number of rows and columns of Y.
    K : int
        Number of components.
    prior : Prior
        Hyperparameters (scalars or arrays of shape (K,)).

    Returns
    -------
    Y : ndarray of shape (M, N), float64 with values 0.0 and 1.0
    W : ndarray of shape (M, K), rows on the simplex
    H : ndarray of shape (K, N), entries in [0, 1]
    """
    for name, value in (("M", M), ("N", N), ("K", K)):
        if not isinstance(value, int | np.integer) or value < 1:
            raise ValueError(f"simulate: {name} must be a positive integer, got {value!r}")
    prior = prior.broadcast(K)
    if isinstance(key, int | np.integer):
        key = jax.random.key(int(key))
    key_w, key_h, key_y = jax.random.split(key, 3)
    with jax.enable_x64(True):
        W = jax.random.dirichlet(key_w, jnp.asarray(prior.gamma), shape=(M,))
        H = jax.random.beta(
            key_h, jnp.asarray(prior.alpha)[:, None], jnp.asarray(prior.beta)[:, None], (K, N)
        )
        Y = jax.random.bernoulli(key_y, W @ H).astype(jnp.float64)
        return np.asarray(Y), np.asarray(W), np.asarray(H)
