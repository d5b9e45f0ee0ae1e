"""svi's guides and ELBO in plain JAX, with NumPyro's autoguides' parametrization.

A guide's parameters are a dict named as NumPyro names them, each held on its
unconstrained scale as NumPyro's optimizers hold them (:func:`constrained` gives the
values ``SVI.get_params`` reports):

- ``"AutoNormal"``: ``W_auto_loc``, ``W_auto_scale`` (M, K - 1) and ``H_auto_loc``,
  ``H_auto_scale`` (K, N): independent normals on the unconstrained coordinates of
  :mod:`bernmf.models.unconstrained`, the scales through softplus (initial 0.1).
- ``"AutoLowRankMultivariateNormal"``: ``auto_loc`` (D,), ``auto_cov_factor`` (D, R)
  and ``auto_scale`` (D,) with D = K N + M (K - 1) (H's coordinates, then W's, each
  flattened in C order, as NumPyro orders them): a normal of covariance
  ``diag(s) (F F^T + I) diag(s)``, s = softplus(scale), F = cov_factor (initially
  zero); R defaults to round(sqrt(D)).
- ``"AutoDelta"``: ``W_auto_loc`` (M, K) on the simplex, ``H_auto_loc`` (K, N) in
  (0, 1), held as their unconstrained coordinates: a point, no Jacobian (a MAP).

:func:`loss` is NumPyro's ``Trace_ELBO`` of these guides on
:func:`bernmf.models.numpyro_model.model` (minus the ELBO: the model's log density at
the drawn factors plus the log-Jacobian, minus the guide's log density of the drawn
coordinates), given the standard normal noise of each draw (one vector per particle,
:func:`noise_width` numbers, drawn by the caller in one call): NumPyro draws each
sample site from a key of its own, which costs svi's program a random generator and
its compilation per site; the tests give NumPyro's guide the same noise.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import solve_triangular

from bernmf.models import unconstrained
from bernmf.models.spec import log_prior

GUIDES = ("AutoNormal", "AutoLowRankMultivariateNormal", "AutoDelta")
INIT_SCALE = 0.1
"""The initial standard deviation of each coordinate (NumPyro's ``init_scale``)."""
INIT_RADIUS = 2.0
"""The start is drawn uniformly in [-2, 2] on each coordinate (NumPyro's
``init_to_uniform``)."""


def default_rank(shapes: tuple[tuple, tuple]) -> int:
    """NumPyro's rank of the low-rank guide: round(sqrt(D)) for D coordinates."""
    return round(sum(int(np.prod(shape)) for shape in shapes) ** 0.5)


def _softplus_inverse(y: float) -> float:
    return float(np.log(-np.expm1(-y)) + y)


def initial_params(guide: str, start: dict, guide_rank: int | None) -> dict:
    """The guide's parameters at ``start`` (unconstrained, as NumPyro initializes them).

    Parameters
    ----------
    guide : str
        One of :data:`GUIDES`.
    start : dict
        ``{"W": (M, K - 1), "H": (K, N)}``: unconstrained coordinates of the start.
    guide_rank : int, optional
        R of the low-rank guide (:func:`default_rank` when None).

    Returns
    -------
    dict of numpy arrays
    """
    scale = _softplus_inverse(INIT_SCALE)
    if guide == "AutoLowRankMultivariateNormal":
        loc = np.concatenate([start["H"].ravel(), start["W"].ravel()])
        rank = (
            default_rank((start["W"].shape, start["H"].shape)) if guide_rank is None else guide_rank
        )
        return {
            "auto_loc": loc,
            "auto_cov_factor": np.zeros((loc.size, rank), loc.dtype),
            "auto_scale": np.full(loc.size, scale, loc.dtype),
        }
    params = {}
    for site, value in start.items():
        params[f"{site}_auto_loc"] = value
        if guide == "AutoNormal":
            params[f"{site}_auto_scale"] = np.full(value.shape, scale, value.dtype)
    return params


def layout(params: dict) -> tuple:
    """``((name, shape), ...)`` of the parameters, in order: how :func:`unflatten` cuts
    the vector of all of them."""
    return tuple((name, tuple(value.shape)) for name, value in params.items())


def unflatten(vector, shapes: tuple) -> dict:
    """The parameters (numpy or JAX arrays) from the vector of all of them, each
    flattened in C order, in the order of ``shapes`` (:func:`layout`)."""
    params, start = {}, 0
    for name, shape in shapes:
        size = int(np.prod(shape))
        params[name] = vector[start : start + size].reshape(shape)
        start += size
    return params


def constrained(guide: str, params: dict) -> dict:
    """The parameters as NumPyro's ``SVI.get_params`` reports them (numpy arrays)."""
    shown = {}
    for name, value in params.items():
        value = np.asarray(value)
        if name.endswith("_scale"):
            value = _softplus(value)
        elif guide == "AutoDelta":
            value = (
                unconstrained.to_simplex(value) if name[0] == "W" else unconstrained.to_unit(value)
            )
        shown[name] = value
    return shown


def _softplus(x):
    return jax.nn.softplus(x) if isinstance(x, jax.Array) else np.logaddexp(0, x)


def _unpack(x, shapes: tuple[tuple, tuple]):
    """(..., D) flat coordinates, H's then W's (NumPyro's order: the sites sorted by
    name), -> W's (..., M, K - 1) and H's (..., K, N)."""
    size = int(np.prod(shapes[1]))
    batch = x.shape[:-1]
    return x[..., size:].reshape(*batch, *shapes[0]), x[..., :size].reshape(*batch, *shapes[1])


def noise_width(guide: str, params: dict) -> int:
    """Standard normal numbers one draw of the guide takes: D for ``"AutoNormal"``, R + D
    for the low-rank guide (R for the factor, D for the diagonal), 0 for ``"AutoDelta"``."""
    if guide == "AutoDelta":
        return 0
    if guide == "AutoNormal":
        return params["W_auto_loc"].size + params["H_auto_loc"].size
    return sum(params["auto_cov_factor"].shape)


def coordinates(guide: str, params: dict, noise, shapes: tuple[tuple, tuple]):
    """Draws of the guide's unconstrained coordinates from standard normal ``noise``.

    Parameters
    ----------
    guide : str
    params : dict
        The guide's unconstrained parameters: numpy arrays (computed in numpy) or JAX
        arrays (in JAX).
    noise : array of shape (..., width)
        ``width`` = :func:`noise_width`.
    shapes : ((M, K - 1), (K, N))
        The shapes of W's and H's coordinates.

    Returns
    -------
    (array of shape (..., M, K - 1), array of shape (..., K, N))
        ``loc + scale * noise`` for ``"AutoNormal"``, ``loc + F (s * noise[:R]) + s *
        noise[R:]`` for the low-rank guide (NumPyro's ``LowRankMultivariateNormal``
        draw, F = cov_factor scaled by s = softplus(scale)), the point for ``"AutoDelta"``.
    """
    if guide == "AutoDelta":
        xp = jnp if isinstance(noise, jax.Array) else np
        return tuple(
            xp.broadcast_to(params[f"{site}_auto_loc"], (*noise.shape[:-1], *shape))
            for site, shape in zip("WH", shapes, strict=True)
        )
    if guide == "AutoNormal":
        return tuple(
            params[f"{site}_auto_loc"] + z * _softplus(params[f"{site}_auto_scale"])
            for site, z in zip("WH", _unpack(noise, shapes), strict=True)
        )
    scale = _softplus(params["auto_scale"])
    rank = params["auto_cov_factor"].shape[1]
    factor = params["auto_cov_factor"] * scale[:, None]
    x = params["auto_loc"] + noise[..., :rank] @ factor.T + scale * noise[..., rank:]
    return _unpack(x, shapes)


def _normal_log_density(x, loc, scale):
    """Sum of the normal log densities, as NumPyro's ``Normal.log_prob`` computes them."""
    scaled = (x - loc) / scale
    return jnp.sum(-0.5 * scaled**2 - jnp.log(jnp.sqrt(2 * jnp.pi) * scale))


def _low_rank_log_density(x, loc, factor, diagonal):
    """NumPyro's ``LowRankMultivariateNormal(loc, factor, diagonal).log_prob(x)``:
    Woodbury and the matrix determinant lemma through the capacitance ``I + F^T D^-1 F``."""
    scaled_factor = factor.T / diagonal  # (R, D)
    capacitance = scaled_factor @ factor + jnp.eye(factor.shape[1], dtype=x.dtype)
    tril = jnp.linalg.cholesky(capacitance)
    diff = x - loc
    projected = solve_triangular(tril, scaled_factor @ diff, lower=True)
    mahalanobis = jnp.sum(diff**2 / diagonal) - jnp.sum(projected**2)
    log_det = 2 * jnp.sum(jnp.log(jnp.diagonal(tril))) + jnp.sum(jnp.log(diagonal))
    return -0.5 * (x.size * jnp.log(2 * jnp.pi) + log_det + mahalanobis)


def _guide_log_density(guide: str, params: dict, W_x, H_x):
    """The guide's log density of a draw of the coordinates (JAX)."""
    if guide == "AutoNormal":
        return sum(
            _normal_log_density(
                x, params[f"{site}_auto_loc"], jax.nn.softplus(params[f"{site}_auto_scale"])
            )
            for site, x in (("W", W_x), ("H", H_x))
        )
    scale = jax.nn.softplus(params["auto_scale"])
    x = jnp.concatenate([H_x.ravel(), W_x.ravel()])
    factor = params["auto_cov_factor"] * scale[:, None]
    return _low_rank_log_density(x, params["auto_loc"], factor, scale * scale)


def _particle(guide: str, params: dict, noise, args: tuple):
    """One particle's ELBO: log p(Y, W, H) + log-Jacobian - log q at the draw from
    ``noise`` of shape (width,)."""
    Y, mask, prior, constant = args
    shapes = ((Y.shape[0], prior.alpha.shape[0] - 1), (prior.alpha.shape[0], Y.shape[1]))
    W_x, H_x = coordinates(guide, params, noise, shapes)
    if guide == "AutoDelta":  # a point on the constrained space: no Jacobian, no density
        W, H = unconstrained.to_simplex(W_x), unconstrained.to_unit(H_x)
        return log_prior(W, H, prior) + constant + unconstrained.log_likelihood(Y, mask, W, H)
    value = unconstrained.log_density({"W": W_x, "H": H_x}, Y, mask, prior, constant)
    return value - _guide_log_density(guide, params, W_x, H_x)


def loss(guide: str, params: dict, noise, args: tuple):
    """Minus the ELBO, estimated from one draw of the guide per row of ``noise``: NumPyro's
    ``Trace_ELBO`` (with ``num_particles`` = rows), at the draws from this noise.

    Parameters
    ----------
    guide : str
        One of :data:`GUIDES`.
    params : dict
        The guide's unconstrained parameters (:func:`initial_params`), JAX arrays.
    noise : array of shape (num_particles, width)
        Standard normal (:func:`noise_width`).
    args : tuple
        ``(Y (M, N), mask (M, N), Prior of (K,) arrays, the prior's log normalizing
        constant)`` (:func:`bernmf.models.spec.log_prior_constant`, computed outside:
        its log-gamma functions would otherwise be compiled into the program), JAX
        arrays.

    Returns
    -------
    scalar
    """
    if noise.shape[0] == 1:
        return -_particle(guide, params, noise[0], args)
    return -jnp.mean(jax.vmap(lambda row: _particle(guide, params, row, args))(noise))


def draws(guide: str, params: dict, rng: np.random.Generator, count: int, shapes):
    """``count`` draws of (W (count, M, K), H (count, K, N)) from the guide, in numpy.

    Parameters
    ----------
    guide : str
    params : dict
        The guide's unconstrained parameters (numpy arrays).
    rng : numpy.random.Generator
    count : int
    shapes : ((M, K - 1), (K, N))
        The shapes of W's and H's coordinates.
    """
    noise = rng.standard_normal((count, noise_width(guide, params)))
    W_x, H_x = coordinates(guide, params, noise, shapes)
    return unconstrained.to_simplex(W_x), unconstrained.to_unit(H_x)
