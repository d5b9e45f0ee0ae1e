"""Log predictive densities of scored entries: of members given as probability matrices
(:func:`bernoulli_lpd`, its kernel :func:`entries_lpd`) and of their mixture
(:func:`mixture_lpd`); the arrays that :mod:`bernmf.posterior.stacking_weights` weighs.
"""

from __future__ import annotations

import numpy as np

from bernmf.data.observed import as_observed
from bernmf.models.spec import outcome_log_probability

__all__ = ["bernoulli_lpd", "check_lpd", "entries_lpd", "mixture_lpd", "scored_entries"]


def check_lpd(lpd) -> np.ndarray:
    """Return ``lpd`` as a float64 (n, R) array; ValueError/TypeError naming the problem."""
    lpd = np.asarray(lpd)
    if lpd.dtype.kind not in "iuf":
        raise TypeError(f"lpd must be a real array, got dtype {lpd.dtype}")
    if lpd.ndim != 2 or 0 in lpd.shape:
        raise ValueError(f"lpd must have shape (entries, members), both >= 1; got {lpd.shape}")
    lpd = lpd.astype(float, copy=False)
    if np.isnan(lpd).any() or np.isposinf(lpd).any():
        raise ValueError("lpd holds NaN or +inf; a log density is finite or -inf")
    return lpd


def mixture_lpd(lpd, weights) -> np.ndarray:
    """Log density of each entry under the mixture of members with the given weights.

    Parameters
    ----------
    lpd : array of shape (n, R)
        Log predictive densities, as in :func:`stacking_weights`.
    weights : array of shape (R,)
        Non-negative, summing to 1 (to 1e-8).

    Returns
    -------
    ndarray of shape (n,)
        ``log sum_r weights[r] exp(lpd[:, r])``; ``-inf`` where every member with
        positive weight gives the entry probability 0.
    """
    lpd = check_lpd(lpd)
    weights = np.asarray(weights, dtype=float)
    if weights.shape != (lpd.shape[1],):
        raise ValueError(f"weights must have shape ({lpd.shape[1]},), got {weights.shape}")
    if not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise ValueError("weights must be finite and non-negative")
    if abs(weights.sum() - 1) > 1e-8:
        raise ValueError(f"weights must sum to 1, got {weights.sum()!r}")
    from scipy.special import logsumexp  # scipy.special loads on first use (0.2 s)

    used = weights > 0
    with np.errstate(divide="ignore"):
        return logsumexp(lpd[:, used], b=weights[used], axis=1)


def scored_entries(Y, mask, what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows, columns and 0/1 values of the entries where ``mask`` is True and Y not NaN.

    Validated as :func:`bernmf.data.observed.as_observed` does; in row-major order.
    """
    try:  # scoring a few entries of a row is normal: no warning on empty lines
        observed = as_observed(Y, mask, warn_empty=False)
    except ValueError as error:
        raise ValueError(f"{what}: {error}") from error
    return observed.entries()


def bernoulli_lpd(Y, mask, probs) -> np.ndarray:
    """Log-likelihood of the selected entries of Y under each member's probabilities.

    Parameters
    ----------
    Y : array of shape (M, N)
        Binary data; NaN marks a missing entry, which is never scored.
    mask : bool array of shape (M, N)
        True for the entries to score (for example the validation entries).
    probs : array of shape (R, M, N)
        P(Y=1) under each of R members (e.g. ``W @ H`` of R restarts).

    Returns
    -------
    ndarray of shape (n, R)
        ``log P(Y=y)`` of each scored entry (row-major order of ``mask & ~isnan(Y)``)
        under each member, ``-inf`` where the member gives the outcome probability 0
        (not clipped, as :func:`bernmf.perplexity`). One member is gathered at a time,
        so no array of shape (R, M, N) is created beyond ``probs`` itself.

    Raises
    ------
    ValueError
        On shapes that differ, Y values other than 0/1/NaN, no scored entry, or
        probabilities outside [0, 1] at the scored entries.
    """
    probs_shape = np.shape(probs)
    if len(probs_shape) != 3:
        raise ValueError(
            f"probs must have shape (members, M, N), got {probs_shape} (one member: probs[None])"
        )
    if probs_shape[1:] != np.shape(Y):
        raise ValueError(f"probs has shape {probs_shape} but Y has shape {np.shape(Y)}")
    rows, columns, y = scored_entries(Y, mask, "bernoulli_lpd")
    lpd = np.empty((y.size, probs_shape[0]))
    for r in range(probs_shape[0]):
        p = np.asarray(probs[r], dtype=float)[rows, columns]
        lpd[:, r] = entries_lpd(y, p, f"probs[{r}]")
    return lpd


def entries_lpd(y, p, what: str = "probs") -> np.ndarray:
    """``log P(Y=y)`` of scored entries with values ``y`` (n,) and P(Y=1) ``p`` (n,).

    ``-inf`` where ``p`` gives the outcome probability 0 (not clipped, as
    :func:`bernmf.perplexity`); the kernel of :func:`bernoulli_lpd`, for probabilities
    computed at the entries only.

    Raises
    ------
    ValueError
        ``p`` outside [0, 1] (or NaN), naming ``what``.
    """
    p = np.asarray(p, dtype=float)
    if not np.all((p >= 0) & (p <= 1)):
        raise ValueError(f"{what} holds values outside [0, 1] (or NaN) at scored entries")
    return outcome_log_probability(y, np.ones(p.shape, bool), p)
