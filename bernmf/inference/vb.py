"""Engine ``vb``: variational Bayes of the augmented model, two variants.

``variant="cvb0"`` (default): collapsed variational Bayes with the zero-order
approximation (Lumbreras et al. 2020). W and H are integrated out and q(z_mn) is a
categorical ``q_mn`` over the K components; each iteration replaces every q_mn by the
Gibbs conditional of :mod:`bernmf.inference.gibbs` with the soft counts of q in place of
the indicator counts (excluding the entry's own q)::

    q_mnk ∝ (gamma_k + L_km - q_mnk) (y (alpha_k + A_kn - q_mnk) + (1 - y)(beta_k + B_kn - q_mnk))
            / (alpha_k + beta_k + T_kn - q_mnk)

All entries are updated together from the counts of the previous iteration (the
synchronous, "parallel" CVB0 schedule); q is float32 of shape (N, K, M). ``trace`` is
the collapsed log joint log p(Y_observed, Z) of the Gibbs sampler evaluated at the soft
counts (a monitor: CVB0 optimizes no objective that it could
report, and this value need not increase); ``tol`` applies to its relative change.

``variant="meanfield"``: mean-field VB of the aspect Bernoulli model (Kabán & Bingham
2008): q(w_m) = Dirichlet(a_m), q(h_kn) = Beta(a1_kn, b1_kn), q(z_mn) = Categorical(phi_mn)
with ``phi_mnk ∝ exp(E ln w_mk + y E ln h_kn + (1 - y) E ln(1 - h_kn))``. phi is never
stored: with ``U = exp(E ln W)``, ``V1 = exp(E ln H)``, ``V0 = exp(E ln(1 - H))`` (each
scaled by its maximum over k, the log-sum-exp shift) the sums of phi that the Dirichlet
and Beta updates need are matrix products, as in the EM algorithm::

    R1 = O Y / (U @ V1),  R0 = O (1 - Y) / (U @ V0)
    a  = gamma + U * (R1 @ V1.T + R0 @ V0.T)
    a1 = alpha + V1 * (U.T @ R1),  b1 = beta + V0 * (U.T @ R0)

``trace`` is the ELBO, ``sum_observed log sum_k exp(...) - KL(q(W) || p(W)) - KL(q(H) ||
p(H))``, evaluated with phi optimal for the current q(W), q(H): coordinate ascent makes
it non-decreasing. Float64.

Both variants return ``W = E[W]``, ``H = E[H]`` under q, ``probs = E[W] E[H]``, the
parameters of q(W) and q(H) in ``extras``, and ``num_draws`` draws of W and H from q (one
chain; :func:`bernmf.inference._augmented.dirichlet_draws` and ``beta_draws``, in log
space, from numpy's generator of the fit's seed), so that a vb fit has intervals, as the
samplers do.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import digamma, gammaln

from bernmf.data.arguments import MAX_ITER, check_count, check_stopping
from bernmf.data.observed import Observed
from bernmf.inference import _augmented
from bernmf.inference._augmented import Counts
from bernmf.inference._compile import compiled
from bernmf.inference._loop import Solution, iterate_until
from bernmf.inference.registry import Engine, register
from bernmf.models.spec import Prior
from bernmf.results.fit import Fit, Posterior, Record

VARIANTS = ("cvb0", "meanfield")


class Variational(NamedTuple):
    """Parameters of q(W) and q(H): Dirichlet ``a`` (M, K), Beta ``a1``, ``b1`` (K, N)."""

    a: jax.Array
    a1: jax.Array
    b1: jax.Array


class VBData(NamedTuple):
    """The data as floats: y (0 where not observed) and obs of shape (M, N), and both
    transposed and stacked, ``by_column[n, m] = (y_mn, obs_mn)``, shape (N, M, 2)."""

    y: jax.Array
    obs: jax.Array
    by_column: jax.Array

    @classmethod
    def of(cls, Y, mask, dtype) -> VBData:
        """From validated ``Y`` (0 where not observed) and boolean ``mask``, both (M, N)."""
        y, obs = jnp.asarray(Y, dtype), jnp.asarray(mask, dtype)
        return cls(y, obs, jnp.stack([y.T, obs.T], axis=2))


def variational_of(counts: Counts, prior: Prior) -> Variational:
    """q(W), q(H) given (soft) counts: ``a = gamma + L.T``, ``a1 = alpha + A``, ``b1 = beta + B``.

    The prior holds column vectors of shape (K, 1).
    """
    alpha, beta, gamma = prior
    return Variational(a=(gamma + counts.L).T, a1=alpha + counts.A, b1=beta + counts.T - counts.A)


def means(q: Variational) -> tuple[jax.Array, jax.Array]:
    """E[W] of shape (M, K) and E[H] of shape (K, N) under q."""
    return q.a / q.a.sum(1, keepdims=True), q.a1 / (q.a1 + q.b1)


def initial_responsibilities(key, data: VBData, K: int) -> jax.Array:
    """q(z) of an EM E-step at random factors, q_nkm ∝ w_mk h_kn^y (1 - h_kn)^(1-y), (N, K, M)."""
    M, N = data.y.shape
    key_w, key_h = jax.random.split(key)
    W = jax.random.uniform(key_w, (M, K), data.y.dtype, minval=0.05, maxval=1)
    H = jax.random.uniform(key_h, (K, N), data.y.dtype, minval=0.05, maxval=0.95)
    y, obs = data.by_column[:, :, 0], data.by_column[:, :, 1]
    joint = W.T[None] * jnp.where(y[:, None, :] > 0, H.T[:, :, None], 1 - H.T[:, :, None])
    return joint / joint.sum(1, keepdims=True) * obs[:, None, :]


# ---------------------------------------------------------------------------- CVB0
# q is stored column by column, shape (N, K, M), so that the column counts A and T are
# one batched matrix-vector product and L one vector-matrix product (each reads q
# once). XLA on CPU is slow when it fuses elementwise producers into reductions, so the
# weights and q are materialized with optimization barriers. Both choices together made
# an iteration about 1.6x faster on lastfm than the (M, K, N) layout with reductions.


def soft_counts(q, data: VBData) -> Counts:
    """Counts of q of shape (N, K, M): L (K, M), A and T (K, N)."""
    # (N, K, 2) output: asking XLA for the (2, K, N) layout directly is 3x slower
    ones_and_all = jnp.einsum("nkm,nmj->nkj", q, data.by_column)
    L = jnp.einsum("n,nkm->km", jnp.ones(q.shape[0], q.dtype), q)
    return Counts(L=L, A=ones_and_all[:, :, 0].T, T=ones_and_all[:, :, 1].T)


def cvb0_update(q, counts: Counts, data: VBData, prior: Prior):
    """One synchronous CVB0 update of every q_mn; returns the new q (N, K, M) and its counts."""
    alpha, beta, gamma = (v[None] for v in prior)  # (1, K, 1)
    A, T = counts.A.T[:, :, None], counts.T.T[:, :, None]  # (N, K, 1)
    row = gamma + counts.L[None] - q  # L (1, K, M)
    y, obs = data.by_column[:, None, :, 0], data.by_column[:, None, :, 1]
    # The counts include the entry, so each term is >= its prior term: clip the float32
    # rounding there (not at 0), or a tiny prior is lost to it and a q sums to 0 / 0.
    numerator = jnp.where(y > 0, alpha + A - q, beta + T - A - q)
    column = jnp.maximum(numerator, jnp.where(y > 0, alpha, beta)) * (
        1 / jnp.maximum(alpha + beta + T - q, alpha + beta)
    )
    weights = jax.lax.optimization_barrier(jnp.maximum(row, gamma) * column)
    # Products of tiny prior terms (gamma 1e-30 by beta 1e-30, say) can underflow for
    # every k: such an entry's q is then uniform rather than 0 / 0.
    total = weights.sum(1, keepdims=True)
    safe = total > 0
    q = jnp.where(safe, weights, 1.0) * (obs / jnp.where(safe, total, weights.shape[1]))
    q = jax.lax.optimization_barrier(q)
    return q, soft_counts(q, data)


def solve_cvb0(
    key, data: VBData, prior32: Prior, prior64: Prior, tol, *, K: int, max_iter: int
) -> Solution:
    """CVB0 from random responsibilities; the Solution's state is q(W), q(H) (float64)."""
    q = initial_responsibilities(key, data, K)
    start = (q, soft_counts(q, data))

    def update(state):
        return cvb0_update(*state, data, prior32)

    def value(state):
        return _augmented.collapsed_log_joint(state[1], prior64)

    end = iterate_until(update, value, start, tol, max_iter=max_iter)
    counts = Counts(*(c.astype(jnp.float64) for c in end.state[1]))
    return end._replace(state=variational_of(counts, prior64))


# ---------------------------------------------------------------------------- mean field


def _scaled_exp(log_values, axis):
    """``exp(x - max(x, axis))`` and that max (keepdims)."""
    shift = jnp.max(log_values, axis=axis, keepdims=True)
    return jnp.exp(log_values - shift), shift


def kl_dirichlet(a, gamma):
    """Sum over rows of KL(Dirichlet(a_m) || Dirichlet(gamma)); a (M, K), gamma (K,)."""
    a_total = a.sum(1)
    return jnp.sum(
        gammaln(a_total)
        - gammaln(a).sum(1)
        - gammaln(gamma.sum())
        + gammaln(gamma).sum()
        + ((a - gamma) * (digamma(a) - digamma(a_total)[:, None])).sum(1)
    )


def kl_beta(a1, b1, alpha, beta):
    """Sum of KL(Beta(a1, b1) || Beta(alpha, beta)); a1, b1 (K, N), alpha, beta (K, 1)."""
    log_beta = gammaln(alpha) + gammaln(beta) - gammaln(alpha + beta)
    log_beta_q = gammaln(a1) + gammaln(b1) - gammaln(a1 + b1)
    return jnp.sum(
        log_beta
        - log_beta_q
        + (a1 - alpha) * digamma(a1)
        + (b1 - beta) * digamma(b1)
        - (a1 + b1 - alpha - beta) * digamma(a1 + b1)
    )


def meanfield_step(q: Variational, data: VBData, prior: Prior) -> tuple[jax.Array, Variational]:
    """ELBO at q (with phi optimal for it) and the q(W), q(H) updated from that phi."""
    alpha, beta, gamma = prior
    U, shift_w = _scaled_exp(digamma(q.a) - digamma(q.a.sum(1, keepdims=True)), axis=1)
    psi_total = digamma(q.a1 + q.b1)
    V1, shift_1 = _scaled_exp(digamma(q.a1) - psi_total, axis=0)
    V0, shift_0 = _scaled_exp(digamma(q.b1) - psi_total, axis=0)
    ones, zeros = data.obs * data.y, data.obs * (1 - data.y)
    tiny = jnp.finfo(U.dtype).tiny
    Z1, Z0 = jnp.maximum(U @ V1, tiny), jnp.maximum(U @ V0, tiny)
    log_normalizers = jnp.sum(ones * (jnp.log(Z1) + shift_1)) + jnp.sum(
        zeros * (jnp.log(Z0) + shift_0)
    )
    log_normalizers += jnp.sum(data.obs * shift_w)
    elbo = log_normalizers - kl_dirichlet(q.a, gamma[:, 0]) - kl_beta(q.a1, q.b1, alpha, beta)
    R1, R0 = ones / Z1, zeros / Z0
    updated = Variational(
        a=gamma[:, 0] + U * (R1 @ V1.T + R0 @ V0.T),
        a1=alpha + V1 * (U.T @ R1),
        b1=beta + V0 * (U.T @ R0),
    )
    return elbo, updated


class VBState(NamedTuple):
    """A mean-field iterate q, its ELBO and the q that follows it (one :func:`meanfield_step`)."""

    q: Variational
    elbo: jax.Array
    following: Variational


def solve_meanfield(key, data: VBData, prior: Prior, tol, *, K: int, max_iter: int) -> Solution:
    """Mean-field coordinate ascent from random responsibilities; the Solution's state is q.

    One :func:`meanfield_step` yields both the ELBO of a q and its successor, so the
    loop's state carries the next q with the current one: each ELBO is computed once,
    and the q returned is the last one whose ELBO is in the trace. The loop starts one
    iteration early, from a state whose successor is the initial q, and that iteration
    is dropped (its NaN value from the trace, its change by ``min_iter=2``): the step
    is then compiled once, in the loop, not also before it (1.6x the compile time).
    """
    q = variational_of(soft_counts(initial_responsibilities(key, data, K), data), prior)

    def state_at(q: Variational) -> VBState:
        return VBState(q, *meanfield_step(q, data, prior))

    end = iterate_until(
        lambda state: state_at(state.following),
        lambda state: state.elbo,
        VBState(q, jnp.asarray(jnp.nan, q.a.dtype), q),
        tol,
        max_iter=max_iter + 1,
        min_iter=2,
    )
    return Solution(end.state.q, end.trace[1:], end.n_iter - 1, end.change)


# ---------------------------------------------------------------------------- engine


def check_options(options: dict) -> None:
    """Raise TypeError or ValueError for an option of :func:`run` outside its range."""
    variant = options["variant"]
    if not isinstance(variant, str) or variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    check_stopping(options["max_iter"], options["tol"])
    check_count("num_draws", options["num_draws"], most=MAX_ITER)


OPTIONS = {
    "variant": "cvb0",
    "max_iter": 500,
    "tol": 1e-6,
    "num_draws": 250,
}
"""The options of :func:`run`, with their defaults."""


def run(
    data: Observed,
    rank: int,
    prior: Prior,
    seed: int,
    init=None,
    *,
    variant: str,
    max_iter: int,
    tol: float,
    num_draws: int,
) -> Fit:
    """Fit q by CVB0 or mean-field VB; see :func:`bernmf.fit` for the arguments.

    Parameters
    ----------
    variant : {"cvb0", "meanfield"}, default "cvb0"
    max_iter : int, default 500
        Iteration limit.
    tol : float, default 1e-6
        Stop when the relative change of ``trace`` is below it; 0 runs exactly
        ``max_iter`` iterations.
    num_draws : int, default 250
        Draws of W and H from q kept in ``draws`` (one chain): 48 MB of float64 on
        lastfm (285 x 1226) at K = 16.

    Returns
    -------
    Fit
        ``W``, ``H``: E[W], E[H] under q; ``probs`` = E[W] E[H]; ``trace``, from the
        initial q to each iteration: the collapsed log joint at the soft counts (cvb0)
        or the ELBO (meanfield); ``extras``: ``variant`` and q's parameters ``q_W_dirichlet``
        (M, K), ``q_H_beta_a`` and ``q_H_beta_b`` (K, N); ``draws`` {"W": (1, S, M, K),
        "H": (1, S, K, N)} from q (no ``sample_stats``).
    """
    if init is not None:
        raise ValueError("engine 'vb' takes no init (q starts from random responsibilities)")
    with jax.enable_x64(True):
        key = jax.random.key(seed)
        prior64 = _augmented.prior_arrays(prior, jnp.float64)
        tol_array = jnp.asarray(tol, jnp.float64)
        if variant == "cvb0":
            layout = VBData.of(data.Y, data.mask, jnp.float32)
            prior32 = _augmented.prior_arrays(prior, jnp.float32)
            args = (key, layout, prior32, prior64, tol_array)
            solver = solve_cvb0
        else:
            layout = VBData.of(data.Y, data.mask, jnp.float64)
            args = (key, layout, prior64, tol_array)
            solver = solve_meanfield
        program, compile_seconds = compiled(
            f"vb.{variant}", solver, *args, K=rank, max_iter=int(max_iter)
        )
        begin = time.perf_counter()
        solution = jax.block_until_ready(program(*args))
        run_seconds = time.perf_counter() - begin
        W, H = (np.asarray(x, float) for x in means(solution.state))
        n_iter = int(solution.n_iter)
        q = {name: np.asarray(v, float) for name, v in solution.state._asdict().items()}
        trace = np.asarray(solution.trace, float)[: n_iter + 1]
        converged = bool(np.asarray(solution.change) < tol)
    begin = time.perf_counter()
    rng = np.random.default_rng(seed)
    S, (M, N) = num_draws, data.shape
    W_draws = _augmented.dirichlet_draws(rng, np.broadcast_to(q["a"], (S, M, rank)))
    H_draws = _augmented.beta_draws(
        rng, *(np.broadcast_to(q[name], (S, rank, N)) for name in ("a1", "b1"))
    )
    run_seconds += time.perf_counter() - begin
    return Fit(
        engine="vb",
        rank=rank,
        prior=prior,
        W=W,
        H=H,
        trace=trace,
        converged=converged,
        record=Record(seed, {"compile": compile_seconds, "run": run_seconds}),
        extras={
            "variant": variant,
            "q_W_dirichlet": q["a"],
            "q_H_beta_a": q["a1"],
            "q_H_beta_b": q["b1"],
        },
        posterior=Posterior({"W": W_draws[None], "H": H_draws[None]}, {}),
    )


ENGINE = register(
    Engine(
        "vb",
        run,
        OPTIONS,
        _augmented.DEFAULT_PRIOR,
        _augmented.check_prior,
        bayesian=True,
        check_options=check_options,
        maximizes=True,
        trace="the ELBO (mean-field) or collapsed log joint at the soft counts (cvb0)",
    )
)
