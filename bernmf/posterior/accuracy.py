"""How close an approximate posterior is to a reference posterior, from arrays.

The numbers of :func:`accuracy` (the Inference Gym's squared bias of posterior means in
reference-variance units, posteriordb's comparison with reference draws), on the
identifiable W @ H and, after matching every draw's components to the reference's
(:func:`relabel`: Hungarian, on H, draw by draw), on W and H:

- ``mean_error_sd``: root mean square over the entries of (mean - reference mean) /
  reference sd: 0.1 is a tenth of a posterior sd, about the Monte Carlo error of a mean
  from 100 independent draws;
- ``sd_ratio``: the geometric mean over the entries of sd / reference sd (1 is right, below
  1 too narrow, 0 a point mass);
- ``kl_predictive``: the mean over the entries of KL(Bernoulli(reference mean) ||
  Bernoulli(mean)) in nats, the cost of predicting a new entry with the approximation; inf
  when the approximation gives probability 0 to an outcome the reference does not.
"""

from __future__ import annotations

import numpy as np

QUANTITIES = ("WH", "W", "H")


def wh_moments(W_draws, H_draws, block: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sd (divisor C S) of every entry of W @ H over all chains and draws.

    Parameters
    ----------
    W_draws : array of shape (C, S, M, K)
    H_draws : array of shape (C, S, K, N)
    block : int
        Draws multiplied at a time: the (C S, M, N) products are never all held.

    Returns
    -------
    mean, sd : ndarray of shape (M, N)
    """
    W = np.asarray(W_draws, float).reshape(-1, *np.shape(W_draws)[2:])
    H = np.asarray(H_draws, float).reshape(-1, *np.shape(H_draws)[2:])
    total = np.zeros((W.shape[1], H.shape[2]))
    squares = np.zeros_like(total)
    for first in range(0, len(W), block):
        products = np.matmul(W[first : first + block], H[first : first + block])
        total += products.sum(axis=0)
        squares += (products**2).sum(axis=0)
    mean = total / len(W)
    return mean, np.sqrt(np.maximum(squares / len(W) - mean**2, 0.0))


RELABEL_ROUNDS = 50
"""At most this many rounds of :func:`relabel` (each draw matched to the mean H of the
last); it stops when no draw changes its labels, after 2 to 6 rounds on the study's cases."""


def draw_permutations(H_draws, H_reference) -> np.ndarray:
    """For each draw, the permutation of its components that best matches ``H_reference``.

    Per draw, not per chain (:func:`bernmf.posterior.draws.component_permutations`): a
    sampler that mixes well switches labels *within* a chain (collapsed Gibbs visits every
    ordering), so only draw by draw do components keep one meaning.

    Parameters
    ----------
    H_draws : array of shape (C, S, K, N)
    H_reference : array of shape (K, N)

    Returns
    -------
    ndarray of int, shape (C, S, K)
        ``perm[c, s][k]``: the draw's component matched to the reference's component k
        (Hungarian matching on squared distance).
    """
    from scipy.optimize import linear_sum_assignment  # on first use: it loads in 0.1 s

    H_draws, H_reference = np.asarray(H_draws, float), np.asarray(H_reference, float)
    # squared distances (C, S, K, K) without the (C, S, K, K, N) differences
    cross = np.einsum("kn,csjn->cskj", H_reference, H_draws)
    cost = (H_reference**2).sum(-1)[:, None] - 2 * cross + (H_draws**2).sum(-1)[:, :, None, :]
    flat = cost.reshape(-1, *cost.shape[2:])
    return np.stack([linear_sum_assignment(c)[1] for c in flat]).reshape(cost.shape[:3])


def relabel(W_draws, H_draws, H_reference=None) -> tuple[np.ndarray, np.ndarray]:
    """W and H draws with every draw's components matched to ``H_reference``, or, without
    one, to their own mean (pivotal relabelling, Stephens 2000: match every draw to the mean
    H, recompute the mean, until no draw changes, from chain 0's first draw).

    Parameters
    ----------
    W_draws : array of shape (C, S, M, K)
    H_draws : array of shape (C, S, K, N)
    H_reference : array of shape (K, N), optional

    Returns
    -------
    W_draws, H_draws : ndarrays of the same shapes, relabelled
    """
    W_draws, H_draws = np.asarray(W_draws, float), np.asarray(H_draws, float)
    pivot = H_draws[0, 0] if H_reference is None else np.asarray(H_reference, float)
    before = None
    for _ in range(1 if H_reference is not None else RELABEL_ROUNDS):
        permutations = draw_permutations(H_draws, pivot)
        if before is not None and np.array_equal(permutations, before):
            break
        H = np.take_along_axis(H_draws, permutations[..., None], axis=2)
        pivot, before = H.mean(axis=(0, 1)), permutations
    W = np.take_along_axis(W_draws, before[:, :, None, :], axis=3)
    return W, np.take_along_axis(H_draws, before[..., None], axis=2)


def moments(W_draws, H_draws, H_reference=None) -> dict:
    """Means and sds of WH and, every draw matched to ``H_reference`` (default: relabelled
    to their own mean, :func:`relabel`), of W (M, K) and H (K, N): the keys ``{WH, W,
    H}_{mean, sd}`` that :func:`accuracy` compares."""
    WH_mean, WH_sd = wh_moments(W_draws, H_draws)
    W, H = relabel(W_draws, H_draws, H_reference)
    return {
        "WH_mean": WH_mean,
        "WH_sd": WH_sd,
        "W_mean": W.mean(axis=(0, 1)),
        "W_sd": W.std(axis=(0, 1)),
        "H_mean": H.mean(axis=(0, 1)),
        "H_sd": H.std(axis=(0, 1)),
    }


def mean_error_sd(mean, reference_mean, reference_sd) -> float:
    """Root mean square of (mean - reference mean) / reference sd over the entries.

    Entries of reference sd 0 are left out (none in a posterior with any spread).
    """
    mean, reference_mean, sd = (np.asarray(a, float) for a in (mean, reference_mean, reference_sd))
    spread = sd > 0
    return float(np.sqrt(np.mean(((mean - reference_mean)[spread] / sd[spread]) ** 2)))


def sd_ratio(sd, reference_sd) -> float:
    """Geometric mean of sd / reference sd over the entries (0 when some sd is 0)."""
    sd, reference_sd = np.asarray(sd, float), np.asarray(reference_sd, float)
    spread = reference_sd > 0
    with np.errstate(divide="ignore"):
        return float(np.exp(np.mean(np.log(sd[spread] / reference_sd[spread]))))


def kl_predictive(probs, reference_probs) -> float:
    """Mean over the entries of KL(Bernoulli(reference) || Bernoulli(probs)), in nats.

    ``0 log(0 / q) = 0``; an outcome of reference probability > 0 given probability 0 makes
    it inf (numpy's, not scipy's ``rel_entr``: ``bernmf --help`` loads no scipy).
    """
    p, q = np.asarray(reference_probs, float), np.asarray(probs, float)
    return float(np.mean(_relative_entropy(p, q) + _relative_entropy(1 - p, 1 - q)))


def _relative_entropy(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``p log(p / q)`` elementwise: 0 where p = 0, inf where p > 0 = q."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(p > 0, p * (np.log(p) - np.log(q)), 0.0)


def accuracy(approximate: dict, reference: dict, probs=None) -> dict:
    """The accuracy numbers of an approximate posterior against a reference.

    Parameters
    ----------
    approximate, reference : dict
        ``{WH, W, H}_{mean, sd}`` arrays (:func:`moments`), the approximation's W and H
        matched to the reference's components.
    probs : array of shape (M, N), optional
        The approximation's predictive P(Y=1) (default its mean WH), e.g. a Gibbs fit's
        Rao-Blackwellized one.

    Returns
    -------
    dict
        ``mean_error_sd``, ``sd_ratio``, ``kl_predictive`` (of WH) and ``W_mean_error_sd``,
        ``W_sd_ratio``, ``H_mean_error_sd``, ``H_sd_ratio``.
    """
    probs = approximate["WH_mean"] if probs is None else probs
    made = {
        "mean_error_sd": mean_error_sd(probs, reference["WH_mean"], reference["WH_sd"]),
        "sd_ratio": sd_ratio(approximate["WH_sd"], reference["WH_sd"]),
        "kl_predictive": kl_predictive(probs, reference["WH_mean"]),
    }
    for name in ("W", "H"):
        made[f"{name}_mean_error_sd"] = mean_error_sd(
            approximate[f"{name}_mean"], reference[f"{name}_mean"], reference[f"{name}_sd"]
        )
        made[f"{name}_sd_ratio"] = sd_ratio(approximate[f"{name}_sd"], reference[f"{name}_sd"])
    return made
