"""How close an approximate posterior is to a reference posterior, from arrays.

The numbers of :func:`accuracy` (the Inference Gym's squared bias of posterior means in
reference-variance units, posteriordb's comparison with reference draws), on the
identifiable W @ H and, after matching components to the reference's (Hungarian, on H), on
W and H:

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

from bernmf.posterior.draws import component_permutations, permute_draws

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


def aligned_moments(W_draws, H_draws, H_reference) -> dict:
    """Means and sds of W (M, K) and H (K, N), each chain's components matched to
    ``H_reference`` (K, N) (:func:`bernmf.posterior.draws.component_permutations`)."""
    permutations = component_permutations(H_draws, reference=H_reference)
    W, H = permute_draws(W_draws, H_draws, permutations)
    return {
        "W_mean": W.mean(axis=(0, 1)),
        "W_sd": W.std(axis=(0, 1)),
        "H_mean": H.mean(axis=(0, 1)),
        "H_sd": H.std(axis=(0, 1)),
    }


def moments(W_draws, H_draws, H_reference=None) -> dict:
    """Means and sds of WH and, matched to ``H_reference`` (default: chain 0's mean H),
    of W and H: the keys ``{WH, W, H}_{mean, sd}`` that :func:`accuracy` compares."""
    WH_mean, WH_sd = wh_moments(W_draws, H_draws)
    reference = np.asarray(H_draws, float)[0].mean(axis=0) if H_reference is None else H_reference
    return {"WH_mean": WH_mean, "WH_sd": WH_sd, **aligned_moments(W_draws, H_draws, reference)}


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
