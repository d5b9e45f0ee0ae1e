"""Pareto-smoothed importance sampling leave-one-out (PSIS-LOO) of the entries of a chain.

The same numbers as ``arviz_stats``' ``loo`` of one chain (Vehtari, Gelman & Gabry 2017;
Vehtari et al. 2024), computed on every entry at once: :func:`psis_loo` checks its input,
:func:`psis_loo_chunks` runs it on blocks of entries (as
:func:`bernmf.posterior.stacking_weights.chain_stacking` does), and :func:`psis_tail_length`
gives the length of the smoothed tail.

Of each entry's S draws, PSIS needs only the ``tail`` largest importance ratios, the next
largest and the sum of the others (:func:`tails`: one partition per entry, in numpy);
the rest (:func:`psis_loo_tails`: the Pareto fits, whose (entries, 30 + sqrt(tail), tail)
logarithms dominate) runs compiled in JAX, every entry at once.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "PARETO_K_THRESHOLD", "PSIS_CHUNK", "PSIS_MIN_DRAWS", "Tails", "psis_loo", "psis_loo_chunks",
    "psis_loo_tails", "psis_tail_length", "tails",
]  # fmt: skip

PARETO_K_THRESHOLD = 0.7
"""Pareto k above which a PSIS-LOO estimate is unreliable (Vehtari et al. 2024)."""

PSIS_MIN_DRAWS = 25
"""Fewest draws per chain for PSIS: with few draws arviz_stats fits the Pareto tail to the
S / 5 largest importance ratios, and needs at least 5."""


def psis_tail_length(draws: int, r_eff: float) -> int:
    """Draws in the Pareto-smoothed tail, as ``arviz_stats``: ``3 sqrt(S / r_eff)``, or ``S / 5``
    when ``S r_eff <= 225``."""
    if draws * r_eff > 225:
        return math.floor(3 * math.sqrt(draws / r_eff))
    return math.floor(draws / 5)


GROUP = 8
"""Terms of the Pareto fit's profile likelihood multiplied together before one logarithm."""


def _mean_log1p(b, x, exact: bool):
    """``log1p(-b[:, :, None] * x[:, None, :]).mean(axis=2)``: b (E, m), x (E, n), x > 0;
    and whether that fast sum may be inexact (then call again with ``exact``).

    Each entry's ``-b x_i`` have one sign, so the logarithm of a product of :data:`GROUP`
    of the ``1 - b x_i`` is their sum without cancellation; each group's product is
    kept as ``prod - 1`` (accurate near 0, for ``log1p``) and as the plain product
    (accurate when it is below 1/2), so two logarithms replace :data:`GROUP` ``log1p``,
    to rounding. Where a product leaves the normal numbers (tails spanning over 1e38
    between quartile and maximum), the second value is True. ``-b x`` below -1 gives NaN
    and -1 gives ``-inf``, as ``log1p``.
    """
    if exact:
        return jnp.log1p(-b[:, :, None] * x[:, None, :]).mean(axis=2), False
    E, n = x.shape
    padded = jnp.pad(x, ((0, 0), (0, -n % GROUP))).reshape(E, 1, -1, GROUP)
    q = jnp.zeros((E, b.shape[1], padded.shape[2]))  # each group's product minus 1
    product = jnp.ones(q.shape)
    for j in range(GROUP):
        u = -b[:, :, None] * padded[..., j]
        q, product = q + u * (1 + q), product * (1 + u)
    near_one = q >= -0.5
    logs = jnp.log1p(jnp.where(near_one, q, 0.0)) + jnp.log(jnp.where(near_one, 1.0, product))
    fast = logs.sum(axis=2) / n
    end = -b * x[:, -1:]  # the term of largest magnitude
    normal = jnp.where(near_one, True, product >= np.finfo(float).tiny).all(axis=2)
    inexact = ((end > -1) & ~(jnp.isfinite(fast) & normal)).any()
    return jnp.where(end > -1, fast, jnp.where(end == -1, -jnp.inf, jnp.nan)), inexact


def _gpd_fit(x, exact: bool):
    """Empirical-Bayes fit of a generalized Pareto distribution to each row of ``x`` (E, n).

    ``arviz_stats``' ``_gpdfit`` (Zhang & Stephens 2009, with the weakly informative
    prior on the shape of Vehtari et al. 2024) on every row at once, in JAX (float64);
    the rows are sorted, ascending, and positive. Returns ``(kappa, sigma, inexact)``,
    kappa and sigma (E,): NaN where the first quartile does not exceed the minimum,
    ``kappa = inf`` where it is NaN. The (E, m, n) logarithms of the profile likelihood,
    and ``inexact``: :func:`_mean_log1p`.
    """
    n = x.shape[1]
    m = 30 + math.isqrt(n)
    quartile = x[:, int(n / 4 + 0.5) - 1]
    unfit = quartile <= x[:, 0]
    grid = 1 - np.sqrt(m / (np.arange(1, m + 1) - 0.5))
    b = grid / (3 * quartile[:, None]) + 1 / x[:, -1:]  # (E, m)
    k, inexact = _mean_log1p(b, x, exact)
    length_scale = n * (jnp.log(-b / k) - k - 1)
    weights = jnp.exp(length_scale - length_scale.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)  # as arviz's exp(l - logsumexp(l))
    weights = jnp.where(weights >= 10 * np.finfo(float).eps, weights, 0.0)  # as arviz
    weights /= weights.sum(axis=1, keepdims=True)
    b_post = jnp.sum(b * weights, axis=1)
    kappa = jnp.log1p(-b_post[:, None] * x).mean(axis=1)
    sigma = -kappa / b_post
    kappa = (n * kappa + 10 * 0.5) / (n + 10)
    kappa = jnp.where(jnp.isnan(kappa), jnp.inf, kappa)
    return jnp.where(unfit, jnp.nan, kappa), jnp.where(unfit, jnp.nan, sigma), inexact


class Tails(NamedTuple):
    """What PSIS-LOO needs of each entry's S draws (E entries), from :func:`tails`.

    Attributes
    ----------
    log_lik : ndarray of shape (E, tail)
        The ``tail`` smallest log-likelihoods (largest importance ratios), ascending.
    cutoff : ndarray of shape (E,)
        The next smallest log-likelihood.
    outside : ndarray of shape (E,)
        ``sum exp(log_lik.min() - log_lik[s])`` over the draws s outside the tail.
    """

    log_lik: np.ndarray
    cutoff: np.ndarray
    outside: np.ndarray


def tails(values: np.ndarray, tail: int, *, probabilities: bool = False) -> Tails:
    """:class:`Tails` of each row of ``values`` (E, S): log-likelihoods, or with
    ``probabilities`` the likelihoods themselves (positive; no logarithm outside the tail).

    One partition of each row (numpy's; several times faster here than a sort in XLA),
    a sort of its ``tail`` smallest values only.
    """
    parted = np.partition(values, tail, axis=1)
    smallest = np.sort(parted[:, :tail], axis=1)
    rest = parted[:, tail:]
    if probabilities:
        return Tails(np.log(smallest), np.log(rest[:, 0]), (smallest[:, :1] / rest).sum(axis=1))
    return Tails(smallest, rest[:, 0], np.exp(smallest[:, :1] - rest).sum(axis=1))


def psis_loo_tails(log_lik, cutoff, outside, draws: int, exact: bool = False):
    """PSIS-LOO of E entries from their :class:`Tails`: ``(elpd, pareto_k, tail_all_equal,
    inexact)``.

    ``arviz_stats``' ``loo`` of one chain (its ``_psislw`` and ``_ps_tail``) on every
    entry at once, in JAX (traceable; float64 enabled), of ``draws`` draws: the ``tail``
    largest importance log-ratios ``-log_lik`` are replaced by the quantiles of the
    generalized Pareto distribution fitted to them (beyond the next largest, ``cutoff``),
    capped at the largest, and the elpd is the log of the self-normalized weighted mean
    of the likelihood. Outside the tail, only the sum ``outside`` of the ratios (relative
    to the largest) enters. ``tail_all_equal`` marks the entries whose tail values
    coincide, where arviz raises; ``inexact`` is True when the fast Pareto fit may be off
    (:func:`_mean_log1p`): then call again with ``exact``.
    """
    tail = log_lik.shape[1]
    shift = log_lik[:, :1]  # the smallest log_lik: ratios relative to the largest
    values = shift - log_lik[:, ::-1]  # the tail's log-ratios, ascending; the largest is 0
    cutoff = shift[:, 0] - cutoff
    largest = values[:, -1]
    all_equal = jnp.abs(largest - values[:, 0]) < np.finfo(float).tiny
    kappa, sigma, inexact = _gpd_fit(jnp.exp(values) - jnp.exp(cutoff)[:, None], exact)
    p = (np.arange(tail) + 0.5) / tail
    k, s = kappa[:, None], sigma[:, None]
    quantile = jnp.where(
        k == 0, -s * np.log1p(-p), s * jnp.expm1(-k * np.log1p(-p)) / jnp.where(k == 0, 1, k)
    )
    smoothed = jnp.log(jnp.where(s > 0, jnp.exp(cutoff)[:, None] + quantile, jnp.nan))
    smoothed = jnp.where(smoothed > largest[:, None], largest[:, None], smoothed)
    smoothed = jnp.where(jnp.isfinite(k), smoothed, values)
    top = jnp.maximum(smoothed.max(axis=1), cutoff)  # the largest ratio after smoothing
    # log of the sum of exp(ratio - top) over every draw: the tail's smoothed, the others'
    total = jnp.log(jnp.exp(smoothed - top[:, None]).sum(axis=1) + outside * jnp.exp(-top))
    # ratio + log_lik is the same (the smallest log_lik) at every draw outside the tail
    inside = jnp.exp(smoothed + log_lik[:, ::-1] - top[:, None]).sum(axis=1)
    elpd = jnp.log((draws - tail) * jnp.exp(shift[:, 0] - top) + inside) - total
    return elpd, kappa, all_equal, inexact


PSIS_CHUNK = 512
"""Entries whose PSIS-LOO :func:`psis_loo_chunks` computes at once (one compiled program)."""

_psis_loo_block = jax.jit(psis_loo_tails, static_argnames=("draws", "exact"))


def psis_loo_chunks(
    values: np.ndarray, tail: int, *, probabilities: bool = False, checked=None
) -> tuple[np.ndarray, np.ndarray]:
    """``(elpd, pareto_k)`` of each row of ``values`` (E, S), :data:`PSIS_CHUNK` rows at once.

    :func:`tails` (``values`` and ``probabilities`` as there) then
    :func:`psis_loo_tails` compiled, on chunks of a fixed size (the last one filled up
    with repeats of the last row; fewer rows than that: the next power of 2), so that
    calls with the same S and ``tail`` share their programs.

    Raises
    ------
    ValueError
        "All tail values are the same" (as arviz) for a row whose tail values coincide,
        among the rows ``checked`` (bool (E,), default all).
    """
    E, S = values.shape
    chunk = min(PSIS_CHUNK, 1 << (E - 1).bit_length())  # few shapes: powers of 2
    elpd, kappa = np.empty(E), np.empty(E)
    with jax.enable_x64(True):
        for i in range(0, E, chunk):
            part = tails(values[np.minimum(np.arange(i, i + chunk), E - 1)], tail,
                         probabilities=probabilities)  # fmt: skip
            out = [np.asarray(a) for a in _psis_loo_block(*part, draws=S)]
            if out[3]:  # tails too wide for the fast Pareto fit
                out = [np.asarray(a) for a in _psis_loo_block(*part, draws=S, exact=True)]
            done = slice(i, min(i + chunk, E))
            size = done.stop - i
            elpd[done], kappa[done], all_equal = (a[:size] for a in out[:3])
            if (all_equal if checked is None else all_equal & checked[done]).any():
                raise ValueError("All tail values are the same")
    return elpd, kappa


def psis_loo(log_lik, r_eff: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """PSIS-LOO of each entry from the log-likelihood of one chain's draws.

    The same numbers as ``arviz_stats.base.array_stats.loo(log_lik[:, None, :],
    r_eff=r_eff)`` (to rounding), computed on all entries at once instead of one
    entry at a time in Python.

    Parameters
    ----------
    log_lik : array of shape (E, S)
        Log-likelihood of each of E entries under each of S draws (S >= 25), finite.
    r_eff : float, default 1.0
        Relative efficiency of the draws (sets the length of the smoothed tail).

    Returns
    -------
    elpd : ndarray of shape (E,)
        Each entry's leave-one-out log predictive density.
    pareto_k : ndarray of shape (E,)
        The shape of the generalized Pareto fit to its largest importance ratios.

    Raises
    ------
    ValueError
        When an entry's largest importance ratios are all equal (as arviz).
    """
    log_lik = np.asarray(log_lik, dtype=float)
    if log_lik.ndim != 2 or log_lik.shape[1] < PSIS_MIN_DRAWS:
        raise ValueError(
            f"log_lik must have shape (entries, draws >= {PSIS_MIN_DRAWS}), got {log_lik.shape}"
        )
    if not np.isfinite(log_lik).all():
        raise ValueError("log_lik must be finite")
    return psis_loo_chunks(log_lik, psis_tail_length(log_lik.shape[1], r_eff))
