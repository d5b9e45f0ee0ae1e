"""What an engine of one's own needs, in one import: ``from bernmf import engine_api``.

An engine is a :class:`Engine` (its ``run`` and what it declares) given to
:func:`register_engine`, or declared as an entry point of the group ``bernmf.engines`` by
an installed package; :func:`bernmf.testing.check_engine` checks it as bernmf's own are
checked. Its ``run(data, rank, prior, seed, init, **options)`` receives the validated
data (:class:`Observed`: ``data.Y`` (M, N) 0.0/1.0, 0 where missing, ``data.mask`` (M, N)
True where observed), the rank K, the prior broadcast to arrays of shape (K,) (a
:class:`Prior`, None for an engine that takes none), the seed, the user's start ``init``
(``(W, H)`` or None) and every declared option, and returns a :class:`Fit`. The
helpers (each bernmf's own, the one the built-in engines use):

- the model's log density on unconstrained coordinates and its gradient
  (:func:`log_density`, :func:`log_density_and_grad`, :func:`log_prior_constant`), the
  bijections onto the supports (:func:`to_simplex`, :func:`to_unit` and their inverses)
  and :func:`interior`;
- the start of each chain at an ``mm`` fit, a prior draw or ``init``
  (:func:`initial_factors`);
- a sampler's draws to its :class:`Fit` (:func:`fit_from_draws`) and its chains as an
  ensemble's members (:func:`by_chain`);
- the checks of options that raise bernmf's messages (:func:`check_count`,
  :func:`check_real`, :func:`check_flag`) and bernmf's bound on counts of iterations
  (:data:`MAX_ITER`).

See docs/engines-api.md for a worked example.
"""

from __future__ import annotations

import jax

from bernmf.data.arguments import MAX_ITER, check_count, check_flag, check_real
from bernmf.data.observed import Observed
from bernmf.inference.chains import by_chain, fit_from_draws
from bernmf.inference.nuts import initial_factors
from bernmf.inference.registry import Engine, register_engine
from bernmf.models.spec import Prior, log_prior_constant
from bernmf.models.unconstrained import (
    from_simplex,
    from_unit,
    interior,
    log_density,
    to_simplex,
    to_unit,
)
from bernmf.results.fit import Fit, Posterior, Record

log_density_and_grad = jax.value_and_grad(log_density)
"""``log_density_and_grad(params, Y, mask, prior, constant=0.0) -> (value, grads)``:
:func:`log_density` and its gradient with respect to ``params`` (a dict of the same keys
and shapes)."""

__all__ = [
    "MAX_ITER",
    "Engine",
    "Fit",
    "Observed",
    "Posterior",
    "Prior",
    "Record",
    "by_chain",
    "check_count",
    "check_flag",
    "check_real",
    "fit_from_draws",
    "from_simplex",
    "from_unit",
    "initial_factors",
    "interior",
    "log_density",
    "log_density_and_grad",
    "log_prior_constant",
    "register_engine",
    "to_simplex",
    "to_unit",
]
