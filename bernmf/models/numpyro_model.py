"""The model of :mod:`bernmf.models.spec` as a NumPyro model, for the Bayesian engines.

The priors are NumPyro's Dirichlet and Beta distributions, whose log densities are
the normalized ones of :func:`bernmf.models.spec.log_prior`; the likelihood is a
``numpyro.factor`` of the value of :func:`bernmf.models.spec.log_likelihood`, so only
the observed entries enter (no ``obs_mask``, which would make the missing entries
latent variables) and P(Y=0) is computed as ``W @ (1 - H)``, clipped only inside
the log. The model's log density therefore equals
``spec.log_joint(Y, mask, W, H, prior, normalized=True)``. Its gradient is written
out (:func:`bernmf.models.unconstrained.log_likelihood`) so that it takes two matrix
products instead of the four of automatic differentiation.
"""

from __future__ import annotations

import threading

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.infer import util as infer_util

from bernmf.models.spec import Prior
from bernmf.models.unconstrained import log_likelihood

SITES = ("W", "H")
"""The latent sample sites, in the order of the factors."""


def model(Y, mask, prior: Prior) -> None:
    """NumPyro model of ``Y ~ Bernoulli(W @ H)`` on the observed entries.

    Parameters
    ----------
    Y : array of shape (M, N)
        Binary data, 0 wherever the entry is not observed.
    mask : bool array of shape (M, N)
        True where the entry is observed.
    prior : Prior
        Arrays of shape (K,), in the dtype of Y.

    Notes
    -----
    Sample sites ``"W"`` of shape (M, K) (rows ~ Dirichlet(gamma)) and ``"H"`` of
    shape (K, N) (entries ~ Beta(alpha_k, beta_k)); factor site ``"Y"``.
    """
    M, N = Y.shape
    K = prior.alpha.shape[0]
    W = numpyro.sample("W", dist.Dirichlet(jnp.broadcast_to(prior.gamma, (M, K))).to_event(1))
    H = numpyro.sample(
        "H",
        dist.Beta(
            jnp.broadcast_to(prior.alpha[:, None], (K, N)),
            jnp.broadcast_to(prior.beta[:, None], (K, N)),
        ).to_event(2),
    )
    numpyro.factor("Y", log_likelihood(Y, mask, W, H))


def model_args(Y, mask, prior: Prior, dtype) -> tuple:
    """The positional arguments of :func:`model` as JAX arrays of ``dtype``.

    ``Y`` (M, N) holds 0 and 1 (any value where ``mask`` is False), ``mask`` (M, N) is
    True where the entry is observed: e.g. ``Observed.Y`` and ``Observed.mask``.
    """
    return (
        jnp.asarray(Y, dtype),
        jnp.asarray(mask),
        Prior(*(jnp.asarray(v, dtype) for v in prior)),
    )


TRACING = threading.RLock()
"""Held while NumPyro runs :func:`model` under its effect handlers (tracing a guide,
an ELBO or a potential): the handlers live on one stack shared by every thread
(``numpyro.primitives._PYRO_STACK``), so two threads tracing at once see each other's
sites ("all sites must have unique names"). Compiled programs run without it."""


def potential_energy(params: dict, args: tuple):
    """Minus the log density of :func:`model` at unconstrained ``params``, Jacobians included.

    What NUTS integrates. Built from the model inside the caller's trace (no eager
    model initialization), so it can be handed to ``NUTS(potential_fn=...)``.

    Parameters
    ----------
    params : dict
        ``{"W": (M, K - 1), "H": (K, N)}`` in NumPyro's unconstrained coordinates.
    args : tuple
        :func:`model_args`.
    """
    return infer_util.potential_energy(model, args, {}, params)
