"""Stacking weights for ensembles of point fits and of MCMC chains.

This model's posterior is strongly multimodal: restarts of a MAP solver and NUTS or
Gibbs chains settle in different modes. Rather than keep the best member, or average
them all, stacking picks the mixture of the members' predictive distributions that
predicts held-out data best (Yao, Vehtari, Simpson & Gelman 2018, "Using stacking to
average Bayesian predictive distributions"); for chains that do not mix, each chain's
leave-one-out predictions play the part of the held-out data (Yao, Vehtari & Gelman
2022, "Stacking for non-mixing Bayesian computations: the curse and blessing of
multimodal posteriors").

The pieces: :func:`bernoulli_lpd` scores members given as probability matrices,
:func:`stacking_weights` finds the weights, :func:`mixture_lpd` scores the mixture (both
from :mod:`bernmf.mixture`, re-exported here), and :func:`chain_stacking` does all of it
for the chains of a posterior (their PSIS-LOO: :mod:`bernmf.psis`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from bernmf.data import as_observed
from bernmf.mixture import mixture_lpd, stacking_weights
from bernmf.models.spec import masked_log_likelihood_terms, outcome_log_probability
from bernmf.psis import PARETO_K_THRESHOLD, PSIS_MIN_DRAWS, psis_loo_rows, psis_tail_length

__all__ = [
    "ChainStacking",
    "bernoulli_lpd",
    "chain_stacking",
    "entries_lpd",
    "mixture_lpd",
    "stacking_weights",
]

PSIS_CHUNK = 1000
"""Entries whose PSIS-LOO :func:`chain_stacking` computes at once."""


def _scored_entries(Y, mask, what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows, columns and 0/1 values of the entries where ``mask`` is True and Y not NaN.

    Validated as :func:`bernmf.data.as_observed` does; in row-major order.
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
    rows, columns, y = _scored_entries(Y, mask, "bernoulli_lpd")
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


class ChainStacking(NamedTuple):
    """Stacking of the chains of a posterior, from :func:`chain_stacking`.

    Attributes
    ----------
    weights : ndarray of shape (C,)
        Stacking weights of the chains, non-negative, summing to 1.
    elpd : ndarray of shape (C,)
        Each chain's expected log predictive density: the sum of ``lpd`` over entries.
    lpd : ndarray of shape (n, C)
        Each chain's log predictive density of each scored entry (PSIS-LOO, or of the
        held-out entries), in the row-major order of the scored entries.
    pareto_k : ndarray of shape (n, C) or None
        PSIS Pareto k of each entry and chain; None for held-out scoring.
    share_k_high : ndarray of shape (C,)
        Share of the entries with Pareto k above :data:`bernmf.psis.PARETO_K_THRESHOLD`, whose
        PSIS-LOO estimate is unreliable; NaN for held-out scoring.
    """

    weights: np.ndarray
    elpd: np.ndarray
    lpd: np.ndarray
    pareto_k: np.ndarray | None
    share_k_high: np.ndarray


def _check_draws(W_draws, H_draws, shape) -> tuple[np.ndarray, np.ndarray]:
    """Return the draws as float arrays after checking their shapes against Y's."""
    W_draws, H_draws = np.asarray(W_draws, dtype=float), np.asarray(H_draws, dtype=float)
    if W_draws.ndim != 4 or H_draws.ndim != 4:
        raise ValueError(
            "W_draws and H_draws must have shapes (C, S, M, K) and (C, S, K, N), got "
            f"{W_draws.shape} and {H_draws.shape}"
        )
    C, S, M, K = W_draws.shape
    if H_draws.shape[:3] != (C, S, K) or (M, H_draws.shape[3]) != tuple(shape):
        raise ValueError(
            f"draws of shapes {W_draws.shape} and {H_draws.shape} do not match each other "
            f"and Y of shape {tuple(shape)}"
        )
    return W_draws, H_draws


def chain_stacking(
    Y,
    mask,
    W_draws,
    H_draws,
    *,
    validation=None,
    r_eff: float = 1.0,
    max_block_values: int = 10_000_000,
) -> ChainStacking:
    """Stacking weights of the chains of a posterior that sit in different modes.

    Each chain is treated as its own approximate posterior (Yao, Vehtari & Gelman
    2022). Its predictive density of each observed entry is estimated by PSIS-LOO
    on that chain's draws alone (:func:`bernmf.psis.psis_loo`: the same numbers as
    ``arviz_stats.loo`` on a DataTree holding that one chain); the
    pointwise log-likelihood of entry i under draw s is ``y log(WH) + (1 - y)
    log(W(1 - H))``. Given ``validation``, the chains are scored on those held-out
    entries instead, by the plain log-mean-exp over draws. The weights come from
    :func:`stacking_weights` on the (entries, chains) matrix.

    The log-likelihood is computed one chain and one block of rows at a time (the
    products ``W @ H`` of those rows under every draw: at most ``max_block_values``
    numbers, or one row), so the (C, S, n) array is never held: about 2.8e5 entries x
    1000 draws on lastfm. The Pareto fits are vectorized over entries, sorting only
    their tails (``arviz_stats`` fits one entry at a time in Python, about half a
    millisecond per entry and chain with 1000 draws).

    Parameters
    ----------
    Y : array of shape (M, N)
        Binary data; NaN marks a missing entry.
    mask : bool array of shape (M, N)
        True where the entry is observed (the training entries the draws saw).
    W_draws : array of shape (C, S, M, K)
    H_draws : array of shape (C, S, K, N)
    validation : bool array of shape (M, N), optional
        Held-out entries to score the chains on; must not overlap ``mask``.
    r_eff : float, default 1.0
        Relative efficiency of each chain's draws passed to PSIS (it sets the
        length of the smoothed tail); 1 is what ``arviz_stats.loo`` uses for one chain.
    max_block_values : int, default 10_000_000
        Memory bound of the blockwise computation.

    Returns
    -------
    ChainStacking

    Raises
    ------
    ValueError
        On inconsistent shapes, invalid Y or masks, a validation mask that
        overlaps ``mask`` or selects nothing, fewer than :data:`bernmf.psis.PSIS_MIN_DRAWS`
        draws per chain for PSIS-LOO, or when PSIS fails for an entry whose
        largest log-likelihood values are all equal (a chain whose draws are all
        the same).
    """
    W_draws, H_draws = _check_draws(W_draws, H_draws, np.shape(Y))
    if not np.isfinite(r_eff) or r_eff <= 0:
        raise ValueError(f"r_eff must be a positive number, got {r_eff!r}")
    if (
        isinstance(max_block_values, bool)
        or not isinstance(max_block_values, int | np.integer)
        or max_block_values < 1
    ):
        raise ValueError(f"max_block_values must be a positive integer, got {max_block_values!r}")
    train_rows, train_columns, train_y = _scored_entries(Y, mask, "chain_stacking mask")
    if validation is None:
        rows, columns, y = train_rows, train_columns, train_y
    else:
        rows, columns, y = _scored_entries(Y, validation, "chain_stacking validation")
        train = np.zeros(np.shape(Y), bool)
        train[train_rows, train_columns] = True
        if train[rows, columns].any():
            raise ValueError("validation entries must be held out: they overlap mask")
    C, S, M, _ = W_draws.shape
    if validation is None and S < PSIS_MIN_DRAWS:
        raise ValueError(
            f"PSIS-LOO needs at least {PSIS_MIN_DRAWS} draws per chain, got {S}; "
            "score the chains on held-out entries instead (validation=...)"
        )
    N = np.shape(Y)[1]
    block = max(1, max_block_values // (S * N))  # rows of W @ H per draw at once
    starts = np.searchsorted(rows, [*range(0, M, block), M])
    tail = None if validation is not None else psis_tail_length(S, r_eff)
    lpd = np.empty((y.size, C))
    pareto_k = None if validation is not None else np.empty((y.size, C))
    from scipy.special import logsumexp  # scipy.special loads on first use (0.2 s)

    for c in range(C):
        H, H_zero = H_draws[c], 1 - H_draws[c]
        for first, lo, hi in zip(range(0, M, block), starts[:-1], starts[1:], strict=True):
            if lo == hi:
                continue
            entries = slice(lo, hi)  # the scored entries of rows first .. first + block - 1
            at = (rows[entries] - first) * N + columns[entries]
            W = W_draws[c, :, first : first + block]  # (S, rows, K)
            p_one, p_zero = (
                np.ascontiguousarray((W @ h).reshape(S, -1)[:, at].T) for h in (H, H_zero)
            )
            terms = masked_log_likelihood_terms(
                y[entries, None], np.ones((hi - lo, 1), bool), p_one, p_zero
            )  # (entries, S)
            if pareto_k is None:
                lpd[entries, c] = logsumexp(terms, axis=1) - np.log(S)
                continue
            for i in range(lo, hi, PSIS_CHUNK):  # each (PSIS_CHUNK, S) at once
                part = slice(i, min(i + PSIS_CHUNK, hi))
                lpd[part, c], pareto_k[part, c], all_equal = psis_loo_rows(
                    terms[i - lo : part.stop - lo], tail
                )
                if all_equal.any():  # e.g. a chain whose draws are all the same
                    raise ValueError(f"PSIS-LOO of chain {c} failed: All tail values are the same")
    share = (
        np.full(C, np.nan) if pareto_k is None else np.mean(pareto_k > PARETO_K_THRESHOLD, axis=0)
    )
    return ChainStacking(stacking_weights(lpd), lpd.sum(axis=0), lpd, pareto_k, share)
