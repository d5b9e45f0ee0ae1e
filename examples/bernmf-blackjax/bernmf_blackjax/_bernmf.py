"""Everything this package takes from bernmf, in one place.

bernmf's public engine API (``bernmf.engine_api``: ``Engine``, ``register_engine``,
``log_density``, ``initial_factors``, ``fit_from_draws``, ...) is being built on another
branch. Until it lands, the names come from bernmf's modules, and :func:`log_density` and
:func:`fit_from_draws` are written here with the signatures that API gives them; then this
module becomes ``from bernmf.engine_api import ...`` and nothing else changes, but for
``MAX_ITER`` (bernmf's bound on counts of iterations), which that API leaves out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

from bernmf.data.observed import MAX_ITER, Observed, check_count, check_real
from bernmf.inference.nuts import initial_factors
from bernmf.inference.registry import Engine
from bernmf.models.spec import Prior, log_prior, log_prior_constant
from bernmf.models.unconstrained import (
    from_simplex,
    from_unit,
    log_likelihood,
    simplex_log_jacobian,
    to_simplex,
    to_unit,
    unit_log_jacobian,
)
from bernmf.posterior.draws import (
    component_permutations,
    log_joint_draws,
    mean_probability,
    permute_draws,
)
from bernmf.results.fit import Fit, Posterior, Record

__all__ = [
    "MAX_ITER",
    "Engine",
    "Fit",
    "Observed",
    "Prior",
    "check_count",
    "check_real",
    "fit_from_draws",
    "from_simplex",
    "from_unit",
    "initial_factors",
    "log_density",
    "log_prior_constant",
    "to_simplex",
    "to_unit",
]


def log_density(params: dict, Y, mask, prior: Prior, constant=0.0):
    """The model's log density at unconstrained coordinates, Jacobians included (JAX).

    ``log p(Y, W, H)`` at ``W = to_simplex(params["W"])``, ``H = to_unit(params["H"])``
    plus the log-Jacobians of those maps; with ``constant = log_prior_constant(*prior, M,
    N)`` it is minus NumPyro's potential energy of bernmf's model (what ``nuts`` samples).

    Parameters
    ----------
    params : dict
        ``{"W": (M, K - 1), "H": (K, N)}`` unconstrained coordinates.
    Y : array of shape (M, N)
        Binary data (any value where ``mask`` is False).
    mask : bool array of shape (M, N)
    prior : Prior
        Arrays of shape (K,).
    constant : scalar, default 0.0
        Added to the prior's kernel.

    Returns
    -------
    scalar
    """
    W_x, H_x = params["W"], params["H"]
    W, H = to_simplex(W_x), to_unit(H_x)
    value = log_prior(W, H, prior) + constant + log_likelihood(Y, mask, W, H)
    value = value + jnp.sum(simplex_log_jacobian(W_x, W))
    return value + jnp.sum(unit_log_jacobian(H_x))


def fit_from_draws(
    engine: str,
    data: Observed,
    rank: int,
    prior: Prior,
    seed: int,
    W_draws,
    H_draws,
    start: tuple,
    *,
    timings: Mapping[str, float],
    sample_stats: Mapping[str, np.ndarray] | None = None,
    extras: Mapping[str, Any] | None = None,
    chains_per_start: int = 1,
) -> Fit:
    """A sampler's :class:`Fit` of its chains' draws, as ``nuts`` makes its own.

    Parameters
    ----------
    engine : str
    data : Observed
    rank : int
    prior : Prior
        Arrays of shape (rank,).
    seed : int
    W_draws : array of shape (C, S, M, K)
    H_draws : array of shape (C, S, K, N)
    start : (W0, H0)
        Each chain's start: W0 (C, M, K), H0 (C, K, N).
    timings : mapping
        Seconds of ``"compile"`` and ``"run"`` (and any others).
    sample_stats : mapping, optional
        Each of shape (C, S); ``"lp"``, the log joint of each draw, is added.
    extras : mapping, optional
    chains_per_start : int, default 1

    Returns
    -------
    Fit
        ``W``, ``H`` the aligned posterior means, ``probs`` the mean of W @ H, ``trace``
        (S + 1,) minus the chains' mean log joint at the start and each draw,
        ``posterior.log_joint`` (C, S + 1), ``converged`` None.
    """
    W_draws, H_draws = np.asarray(W_draws, float), np.asarray(H_draws, float)
    W0, H0 = (np.asarray(x, float) for x in start)
    lp = log_joint_draws(data.Y, data.mask, W_draws, H_draws, prior)
    at_start = log_joint_draws(data.Y, data.mask, W0[:, None], H0[:, None], prior)
    log_joint = np.concatenate([at_start, lp], axis=1)  # (C, S + 1)
    W_aligned, H_aligned = permute_draws(W_draws, H_draws, component_permutations(H_draws))
    return Fit(
        engine=engine,
        rank=rank,
        prior=prior,
        W=W_aligned.mean(axis=(0, 1)),
        H=H_aligned.mean(axis=(0, 1)),
        stored_probs=mean_probability(W_draws, H_draws),
        trace=-log_joint.mean(axis=0),
        converged=None,
        record=Record(seed, dict(timings)),
        extras=dict(extras or {}),
        posterior=Posterior(
            {"W": W_draws, "H": H_draws},
            {**(sample_stats or {}), "lp": lp},
            log_joint=log_joint,
            chains_per_start=chains_per_start,
        ),
    )
