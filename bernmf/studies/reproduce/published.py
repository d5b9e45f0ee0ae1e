"""The MM iteration of the paper's published code, defects included (``paper.py --as-published``).

Written again from its equations (``helpers/nbmf.py`` of magronp/NMF-binary was read
for its operations; no code is copied), to measure what its defects cost. They are:

* held-out entries count as zeros in the H update (``1 - O * Y`` where the masked
  update has ``O * (1 - Y)``);
* W is divided by the number of columns N instead of each row's number of observed
  entries, so its rows no longer sum to one and P(Y=0) is ``1 - W @ H``;
* the loop stops at the first sweep after the first that lowers the objective per
  observed entry by less than ``tol`` (absolute, rises included; 1e-5 there).

The correct engine, ``bernmf.fit(Y, "mm", ...)``, shares none of this code. The fits
here are few and small (the paper's protocol), so they are plain dense JAX.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bernmf.data.arguments import DTYPES
from bernmf.data.observed import Observed
from bernmf.inference import mm
from bernmf.inference.mm import random_init
from bernmf.models.spec import Factors, Prior, log_prior
from bernmf.results.fit import Fit, Record


class PublishedData(NamedTuple):
    """The data as the published sweep uses them, each (M, N) float but ``n_total``."""

    y_one: jax.Array  # O * Y
    y_zero: jax.Array  # O * (1 - Y)
    y_zero_published: jax.Array  # 1 - O * Y: held-out entries as zeros
    n_total: jax.Array  # observed entries


def make_data(data: Observed, dtype) -> PublishedData:
    """:class:`PublishedData` of validated data."""
    ones, mask = data.ones, data.mask
    return PublishedData(
        jnp.asarray(ones, dtype),
        jnp.asarray(mask & ~ones, dtype),
        jnp.asarray(~ones, dtype),
        jnp.asarray(mask.sum(), dtype),
    )


def sweep(data: PublishedData, W, H, prior: Prior):
    """``(objective per observed entry at (W, H), W_next, H_next)`` of the published code."""
    tiny = jnp.finfo(W.dtype).tiny
    P = jnp.maximum(W @ H, tiny)
    Q = jnp.maximum(1 - W @ H, tiny)
    log_lik = jnp.sum(data.y_one * jnp.log(P) + data.y_zero * jnp.log(Q))
    value = -(log_lik + log_prior(W, H, prior)) / data.n_total
    C = H * (W.T @ (data.y_one / P)) + (prior.alpha - 1)[:, None]
    D = (1 - H) * (W.T @ (data.y_zero_published / Q)) + (prior.beta - 1)[:, None]
    H = C / (C + D)
    P = jnp.maximum(W @ H, tiny)
    Q = jnp.maximum(1 - W @ H, tiny)
    S = W * ((data.y_one / P) @ H.T + (data.y_zero / Q) @ (1 - H).T)
    W = (S + (prior.gamma - 1)) / (H.shape[1] + jnp.sum(prior.gamma - 1))
    return value, W, H


def solve(init: Factors, data: PublishedData, prior: Prior, tol, *, max_iter: int):
    """Sweeps from ``init`` until the published stop rule; ``(W, H, trace, n_iter, converged)``.

    The published loop never evaluates the initial factors: its first loss, after
    one sweep, is compared with +inf, so the earliest stop is at sweep 2.
    """
    inf = jnp.asarray(jnp.inf, init.W.dtype)
    trace = jnp.full(max_iter + 1, jnp.nan, init.W.dtype)

    def keep_going(carry):
        t, _, _, _, change, _ = carry
        return (t < max_iter) & (change >= tol)

    def iterate(carry):  # evaluates `following` and sweeps from it
        t, _, following, previous, _, trace = carry
        value, W, H = sweep(data, *following, prior)
        change = jnp.where(t + 1 < 2, inf, previous - value)
        return t + 1, following, Factors(W, H), value, change, trace.at[t + 1].set(value)

    start = (jnp.asarray(-1), init, init, inf, inf, trace)
    t, current, _, _, change, trace = jax.lax.while_loop(keep_going, iterate, start)
    return current.W, current.H, trace, t, change < tol


def fits(data: Observed, rank: int, priors, seeds, *, max_iter=2000, tol=1e-5, dtype="float64"):
    """One published fit per (prior, seed), from :func:`bernmf.inference.mm.random_init`.

    Returns ``(W (G, M, K), H (G, K, N), traces (G, max_iter + 1), n_iter (G,),
    converged (G,), seconds)`` as numpy arrays, ``seconds`` the run time of the call.
    """
    M, N = data.shape
    with jax.enable_x64(True):
        float_type = DTYPES[dtype]
        problem = make_data(data, float_type)
        arrays = [p.broadcast(rank) for p in priors]
        stacked = Prior(*(jnp.asarray(np.stack(v), float_type) for v in zip(*arrays, strict=True)))

        def one(args):
            seed, prior = args
            init = random_init(jax.random.key(seed), M, N, rank, float_type)
            return solve(init, problem, prior, jnp.asarray(tol, float_type), max_iter=max_iter)

        program = jax.jit(lambda seeds, priors: jax.lax.map(one, (seeds, priors)))
        seed_array = jnp.asarray(np.asarray(seeds, np.uint32))
        program = program.lower(seed_array, stacked).compile()
        begin = time.perf_counter()
        outputs = jax.block_until_ready(program(seed_array, stacked))
        seconds = time.perf_counter() - begin
    return (*(np.asarray(x) for x in outputs), seconds)


def run_settings(data: Observed, rank: int, priors, seeds, **options) -> list[Fit]:
    """The published fits of the (prior, seed) pairs (:func:`fits`) as :class:`bernmf.Fit`,
    engine "mm-as-published"; each fit's run time its share of the call's by sweeps."""
    W, H, traces, n_iter, converged, seconds = fits(data, rank, priors, seeds, **options)
    share = seconds * n_iter / max(n_iter.sum(), 1)
    return [
        Fit(
            engine=ENGINE.name,
            rank=rank,
            prior=prior,
            W=W[i],
            H=H[i],
            stored_probs=W[i] @ H[i],
            trace=traces[i, : n_iter[i] + 1],
            converged=bool(converged[i]),
            record=Record(
                int(seed),
                {"compile": 0.0, "run": float(share[i])},
                row_labels=data.row_labels,
                col_labels=data.col_labels,
                sweeps=int(n_iter[i]) + 1,
            ),
        )
        for i, (prior, seed) in enumerate(zip(priors, seeds, strict=True))
    ]


def _run(data: Observed, rank: int, prior: Prior, seed: int, init, **options) -> Fit:
    """One published fit (no initial factors: it starts from its seed)."""
    if init is not None:
        raise ValueError("the published code starts from its seed: init must be None")
    return run_settings(data, rank, [prior], [seed], **options)[0]


ENGINE = mm.ENGINE._replace(
    name="mm-as-published",
    run=_run,
    options={"max_iter": 2000, "tol": 1e-5, "dtype": "float64"},
    run_members=None,
    check_options=None,
    run_settings=run_settings,
)
"""The published code as an :class:`~bernmf.inference.registry.Engine` that the studies run
through :func:`bernmf.fitting.runner.fit_settings`; not registered (``bernmf.fit`` and the
engines' contract suite know only the correct engines)."""
