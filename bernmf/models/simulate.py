"""Draw data from the model."""

from __future__ import annotations

import jax
import numpy as np

from bernmf.models.spec import Prior


def simulate(key, M: int, N: int, K: int, prior: Prior = Prior.flat()):
    """Draw W, H from the prior and Y ~ Bernoulli(W @ H).

    The draws use numpy's random Generator seeded from ``key`` (JAX's Beta and
    Dirichlet samplers take seconds to compile for every new shape).

    Parameters
    ----------
    key : int or jax.random key
        Seed of the draws; the same key gives the same data.
    M, N : int
        Number of rows and columns of Y.
    K : int
        Number of components.
    prior : Prior
        Hyperparameters (scalars or arrays of shape (K,)); default the flat prior
        (:meth:`Prior.flat`: H uniform on [0, 1], W uniform on the simplex).

    Returns
    -------
    Y : ndarray of shape (M, N), float64 with values 0.0 and 1.0
    W : ndarray of shape (M, K), rows on the simplex
    H : ndarray of shape (K, N), entries in [0, 1]
    """
    for name, value in (("M", M), ("N", N), ("K", K)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise ValueError(f"simulate: {name} must be a positive integer, got {value!r}")
    prior = prior.broadcast(K)
    if isinstance(key, jax.Array):
        key = np.asarray(jax.random.key_data(key)).ravel()
    rng = np.random.default_rng(key)
    W = rng.dirichlet(prior.gamma, size=M)
    H = rng.beta(prior.alpha[:, None], prior.beta[:, None], size=(K, N))
    Y = (rng.random((M, N)) < W @ H).astype(float)
    return Y, W, H
