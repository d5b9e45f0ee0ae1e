"""Pareto-smoothed importance sampling leave-one-out (PSIS-LOO) of the entries of a chain.

The same numbers as ``arviz_stats``' ``loo`` of one chain (Vehtari, Gelman & Gabry 2017;
Vehtari et al. 2024), computed on every entry at once: :func:`psis_loo` checks its input,
:func:`psis_loo_rows` is the vectorized kernel that :func:`bernmf.stacking.chain_stacking`
runs on blocks of entries, and :func:`psis_tail_length` the length of the smoothed tail.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "PARETO_K_THRESHOLD", "PSIS_MIN_DRAWS", "psis_loo", "psis_loo_rows", "psis_tail_length",
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


GPD_CHUNK_VALUES = 2**20
"""Numbers of the (entries, scales, tail) array of :func:`_gpd_fit` computed at once."""


def _gpd_fit(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Empirical-Bayes fit of a generalized Pareto distribution to each row of ``x`` (E, n).

    ``arviz_stats``' ``_gpdfit`` (Zhang & Stephens 2009, with the weakly informative
    prior on the shape of Vehtari et al. 2024) on every row at once; the rows are
    sorted, ascending, and positive. Returns ``(kappa, sigma)``, each (E,): NaN where
    the first quartile does not exceed the minimum, ``kappa = inf`` where it is NaN.
    """
    n = x.shape[1]
    m = 30 + math.isqrt(n)
    quartile = x[:, int(n / 4 + 0.5) - 1]
    unfit = quartile <= x[:, 0]
    grid = 1 - np.sqrt(m / (np.arange(1, m + 1) - 0.5))
    with np.errstate(divide="ignore", invalid="ignore"):
        b = grid / (3 * quartile[:, None]) + 1 / x[:, -1:]  # (E, m)
        k = np.empty(b.shape)
        chunk = max(1, GPD_CHUNK_VALUES // (m * n))
        for i in range(0, len(x), chunk):  # (chunk, m, n) at once
            k[i : i + chunk] = np.log1p(-b[i : i + chunk, :, None] * x[i : i + chunk, None]).mean(2)
        length_scale = n * (np.log(-b / k) - k - 1)
        weights = np.exp(length_scale - length_scale.max(axis=1, keepdims=True))
        weights /= weights.sum(axis=1, keepdims=True)  # as arviz's exp(l - logsumexp(l))
        weights[~(weights >= 10 * np.finfo(float).eps)] = 0.0  # negligible, as arviz
        weights /= weights.sum(axis=1, keepdims=True)
        b_post = np.sum(b * weights, axis=1)
        kappa = np.log1p(-b_post[:, None] * x).mean(axis=1)
        sigma = -kappa / b_post
    kappa = (n * kappa + 10 * 0.5) / (n + 10)
    kappa[np.isnan(kappa)] = np.inf
    kappa[unfit], sigma[unfit] = np.nan, np.nan
    return kappa, sigma


def psis_loo_rows(log_lik: np.ndarray, tail: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """PSIS-LOO of each row of ``log_lik`` (E, S): ``(elpd, pareto_k, tail_all_equal)``.

    ``arviz_stats``' ``loo`` of one chain (its ``_psislw`` and ``_ps_tail``) on every
    row at once: the ``tail`` largest importance log-ratios ``-log_lik`` are replaced
    by the quantiles of the generalized Pareto distribution fitted to them (beyond
    the next largest), capped at the largest, and the elpd is the log of the
    self-normalized weighted mean of the likelihood. ``tail_all_equal`` marks the
    rows whose tail values coincide, where arviz raises. Only the ``tail + 1``
    largest ratios are sorted.
    """
    S = log_lik.shape[1]
    ratios = -log_lik
    shift = -ratios.max(axis=1, keepdims=True)
    ratios += shift
    index = np.argpartition(ratios, S - tail - 1, axis=1)[:, S - tail - 1 :]
    values = np.take_along_axis(ratios, index, axis=1)
    order = np.argsort(values, axis=1)
    index, values = np.take_along_axis(index, order, 1), np.take_along_axis(values, order, 1)
    cutoff, index, values = values[:, 0], index[:, 1:], values[:, 1:]  # tail ascending
    largest = values[:, -1]
    all_equal = np.abs(largest - values[:, 0]) < np.finfo(float).tiny
    kappa, sigma = _gpd_fit(np.exp(values) - np.exp(cutoff)[:, None])
    p = (np.arange(tail) + 0.5) / tail
    k, s = kappa[:, None], sigma[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        quantile = np.where(
            k == 0, -s * np.log1p(-p), s * np.expm1(-k * np.log1p(-p)) / np.where(k == 0, 1, k)
        )
        smoothed = np.log(np.where(s > 0, np.exp(cutoff)[:, None] + quantile, np.nan))
    smoothed = np.where(smoothed > largest[:, None], largest[:, None], smoothed)
    smoothed = np.where(np.isfinite(k), smoothed, values)
    np.put_along_axis(ratios, index, smoothed, axis=1)
    top = ratios.max(axis=1, keepdims=True)
    total = np.log(np.exp(ratios - top).sum(axis=1)) + top[:, 0]  # logsumexp of the ratios
    # ratio + log_lik is the same (minus the largest -log_lik) at every draw outside the tail
    outside = (S - tail) * np.exp(shift[:, 0] - top[:, 0])
    inside = np.exp(smoothed + np.take_along_axis(log_lik, index, axis=1) - top).sum(axis=1)
    return np.log(outside + inside) + top[:, 0] - total, kappa, all_equal


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
    elpd, kappa, all_equal = psis_loo_rows(log_lik, psis_tail_length(log_lik.shape[1], r_eff))
    if np.any(all_equal):
        raise ValueError("All tail values are the same")
    return elpd, kappa
