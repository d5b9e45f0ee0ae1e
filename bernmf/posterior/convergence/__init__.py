"""Rank-normalized R-hat and bulk / tail ESS, vectorized over many entries at once.

The same numbers as ``arviz_stats.rhat`` (method "rank") and ``arviz_stats.ess``
(methods "bulk" and "tail"), which loop over entries in Python and take
milliseconds each: too slow for the 350,000 entries of W @ H on lastfm. Here the
draws of E entries are one array of shape (E, C, S) (entries first, C chains of S
draws, each entry's draws contiguous), and every step works on all entries at once.

R-hat needs only each split chain's sum of the normal scores of the ranks and their
sum of squares: :mod:`bernmf.posterior.convergence.score_sums` gets them from one sort per row
of 32-bit keys (a bucket of the value, the split chain of the draw), without the
permutation; the rows it cannot settle (many shared buckets, non-finite or constant
values) are ranked exactly by :mod:`bernmf.posterior.convergence.ranks` (64-bit keys of value
and position), as are the normal scores of bulk ESS.
"""

from __future__ import annotations

import numpy as np

from bernmf.posterior.convergence.ranks import (
    CHUNK_VALUES,
    Workspace,
    _keys,
    _normal_scores,
    _scores,
)
from bernmf.posterior.convergence.score_sums import (
    _bucket_keys,
    _middle_values,
    _repeated_draws,
    _score_sums,
)

TAIL_PROB = 0.05
"""Tail ESS is the smaller ESS of the indicators of the 5% and 95% quantiles."""


def split_chains(draws: np.ndarray) -> np.ndarray:
    """(E, C, S) -> (E, 2C, S // 2): first and last halves of each chain as chains.

    With S odd the middle draw of each chain is left out (as arviz).
    """
    E, C, S = draws.shape
    half = S // 2
    if S % 2 == 0:
        return draws.reshape(E, 2 * C, half)
    return np.concatenate([draws[:, :, :half], draws[:, :, S - half :]], axis=1)


def _basic_rhat(x: np.ndarray) -> np.ndarray:
    """Gelman-Rubin R-hat of (E, C, S) draws, one per entry.

    The within-chain variance from the sums of squares (two passes over ``x``, no
    centered copy): the normal scores it gets are within a few units of 0.
    """
    return _rhat_of_sums(x.sum(axis=2), np.einsum("ecs,ecs->e", x, x), x.shape[2])


def _rhat_of_sums(sums: np.ndarray, squares: np.ndarray, draws: int) -> np.ndarray:
    """Gelman-Rubin R-hat from each chain's sum (E, C) and the sum of squares (E,) of all draws.

    Chains of ``draws`` draws each.
    """
    chains = sums.shape[1]
    means = sums / draws
    within = (squares - draws * np.einsum("ec,ec->e", means, means)) / (chains * (draws - 1))
    between = draws * means.var(axis=1, ddof=1)
    return np.sqrt((between / within + draws - 1) / draws)


def rank_rhat_rows(
    draws: np.ndarray, *, chunk_values: int = CHUNK_VALUES, workspace: Workspace | None = None
) -> np.ndarray:
    """Rank-normalized split R-hat, ``max(bulk, tail)``, of (E, C, S) draws.

    As ``arviz_stats.rhat`` (Vehtari et al. 2021), from each split chain's sum of
    normal scores (:func:`_rank_rhat_chunk`). Entries are ranked ``chunk_values``
    numbers at a time, or ``workspace.entries`` entries at a time in the arrays of
    ``workspace`` (a :class:`Workspace` for rows of ``2 * C * (S // 2)`` values).

    Returns an array of shape (E,); NaN with fewer than 2 chains or 4 draws, and
    for the entries with a NaN draw.
    """
    E, C, S = draws.shape
    if C < 2 or S < 4:
        return np.full(E, np.nan)
    n = 2 * C * (S // 2)
    if workspace is None:
        workspace = Workspace(min(E, max(1, chunk_values // n)), n)
    elif workspace.n != n:
        raise ValueError(f"workspace is for rows of {workspace.n} values, not {n}")
    chunk = workspace.entries
    return np.concatenate(
        [_rank_rhat_chunk(draws[i : i + chunk], workspace) for i in range(0, E, chunk)]
    )


def _rank_rhat_chunk(draws: np.ndarray, work: Workspace) -> np.ndarray:
    """:func:`rank_rhat_rows` of at most ``work.entries`` entries at once.

    R-hat needs only each split chain's sum of the normal scores and their sum of
    squares. Without ties the scores of a row are the fixed scores of the ranks 1 ..
    n, so these sums come from the split chain of each sorted position: keys of 32
    bits hold a bucket of the value (an order-preserving map onto its high bits) and
    the split chain (its low bits), and are sorted without the positions of the
    draws. Values sharing a bucket (ties, near ties) are ranked again on their full
    values (``score_sums._score_sums``); the rows where that does not suffice
    (non-finite or constant rows, many shared buckets, one at the median) go the
    exact way of :func:`_exact_rank_rhat`.
    """
    split = split_chains(np.ascontiguousarray(draws, float))
    E, chains, half = split.shape
    rows = split.reshape(E, -1)
    bits = (chains - 1).bit_length()
    if bits > 8:  # split chains beyond the labels of uint8
        return _exact_rank_rhat(split, work)
    top = 2.0 ** (32 - bits) - 1  # the largest bucket
    low, high = rows.min(axis=1), rows.max(axis=1)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        scale = top / (high - low)
    exact = ~((scale > 0) & (scale < np.inf))  # NaN, infinite or constant rows
    scale[exact] = 0.0
    keys = _bucket_keys(rows, low, scale, bits, half, work)
    repeats = _repeated_draws(rows, half)
    sums, squares, ordered, crowded, middle_run = _score_sums(
        rows, keys, bits, chains, exact, work, repeats=repeats
    )
    exact |= crowded | middle_run
    if 2 * exact.sum() > E:  # mostly exact: no folded pass for the few others
        return _exact_rank_rhat(split, work)
    middle, central = _middle_values(rows, keys, ordered, bits, chains, exact)
    folded = np.subtract(rows, middle[:, None], out=work.folded[:E])
    np.abs(folded, out=folded)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        folded_scale = top / np.maximum(high - middle, middle - low)  # the largest |x - middle|
    exact |= ~((folded_scale > 0) & (folded_scale < np.inf))
    folded_scale[exact] = 0.0
    keys = _bucket_keys(folded, None, folded_scale, bits, half, work)
    folded_sums, folded_squares, _, crowded, _ = _score_sums(
        folded, keys, bits, chains, exact, work, smallest=central, repeats=repeats
    )
    exact |= crowded
    with np.errstate(invalid="ignore", divide="ignore"):
        rhat = np.maximum(
            _rhat_of_sums(sums, squares, half), _rhat_of_sums(folded_sums, folded_squares, half)
        )
    if exact.any():
        rhat[exact] = _exact_rank_rhat(rows[exact].reshape(-1, chains, half), work)
    return rhat


def _exact_rank_rhat(split: np.ndarray, work: Workspace) -> np.ndarray:
    """R-hat of (E, 2C, S // 2) split draws by the ranks of 64-bit keys (value and position).

    The folded draws are sorted from the bulk order, where they form two sorted runs
    (below and above the median), so their stable sort is a merge.
    """
    E = split.shape[0]
    rows = split.reshape(E, -1)
    n = rows.shape[1]
    bits = max(1, (n - 1).bit_length())
    keys = _keys(rows, bits, work.keys[:E])
    keys.sort(axis=1)
    z, flat, unsure = _scores(rows, keys, bits, work)
    with np.errstate(invalid="ignore", divide="ignore"):
        rhat = _basic_rhat(z.reshape(split.shape))  # before work.z holds the folded scores
    values = rows.ravel()
    middle = (values[flat[:, n // 2 - 1]] + values[flat[:, n // 2]]) / 2  # n is even
    middle[unsure] = np.median(rows[unsure], axis=1)
    folded = np.subtract(rows, middle[:, None], out=work.folded[:E])
    np.abs(folded, out=folded)
    # in the bulk order, two sorted runs: down to, then up from the median
    unordered = _keys(folded, bits, work.unordered_keys[:E], signed=False)
    folded_keys = np.take(unordered, flat, out=work.folded_keys[:E], mode="clip")
    folded_keys.sort(axis=1, kind="stable")
    z_folded = _scores(folded, folded_keys, bits, work)[0]
    with np.errstate(invalid="ignore", divide="ignore"):
        np.maximum(rhat, _basic_rhat(z_folded.reshape(split.shape)), out=rhat)
    rhat[np.isnan(rows).any(axis=1)] = np.nan
    return rhat


def nested_rank_rhat_rows(draws: np.ndarray, groups) -> np.ndarray:
    """Rank-normalized nested R-hat of (E, C, S) draws whose chains form superchains.

    Nested R-hat (Margossian et al. 2024, "Nested R-hat: assessing the convergence of
    Markov chain Monte Carlo when running many short chains") compares superchains,
    here the groups of chains in one mode: ``sqrt(1 + B / W)`` with B the variance
    of the superchain means and W the mean, over superchains, of the within-chain
    variance plus the variance between their chains' means. As
    ``arviz_stats.rhat_nested`` (method "rank"): on the normal scores of the split
    chains (:func:`split_chains`, ranks over all chains, ties averaged), the larger
    of the bulk value and that of the draws folded about their median.

    Parameters
    ----------
    draws : array of shape (E, C, S)
    groups : int array of shape (C,)
        The superchain of each chain; every superchain has as many chains, and there
        are at least two superchains.

    Returns
    -------
    ndarray of shape (E,)
        NaN with fewer than 4 draws, and for the entries with a NaN draw.

    Raises
    ------
    ValueError
        ``groups`` not one integer label per chain, superchains of different sizes,
        or a single superchain.
    """
    draws = np.asarray(draws, float)
    E, C, S = draws.shape
    groups = np.asarray(groups)
    if groups.shape != (C,) or groups.dtype.kind not in "iu":
        raise ValueError(f"groups must be {C} integer labels, one per chain, got {groups!r}")
    labels, sizes = np.unique(groups, return_counts=True)
    if labels.size < 2 or sizes.min() != sizes.max():
        raise ValueError(
            "nested R-hat needs at least two superchains of equal numbers of chains; got "
            f"chains per superchain {dict(zip(labels.tolist(), sizes.tolist(), strict=True))}"
        )
    if S < 4:
        return np.full(E, np.nan)
    split = split_chains(draws)
    # the superchain of each split chain: split the labels as the draws
    split_groups = split_chains(np.broadcast_to(groups[None, :, None], (1, C, S)))[0, :, 0]
    chains = 2 * int(sizes[0])  # split chains per superchain
    one_hot = (split_groups[:, None] == labels[None, :]) / chains  # (2C, G): means
    rows = split.reshape(E, -1)
    z = _normal_scores(rows).reshape(split.shape)
    folded = np.abs(rows - np.median(rows, axis=1, keepdims=True))
    z_folded = _normal_scores(folded).reshape(split.shape)
    rhat = np.maximum(_nested_rhat(z, one_hot, chains), _nested_rhat(z_folded, one_hot, chains))
    rhat[np.isnan(rows).any(axis=1)] = np.nan
    return rhat


def _nested_rhat(x: np.ndarray, one_hot: np.ndarray, chains: int) -> np.ndarray:
    """Nested R-hat of (E, C, S) values in superchains of ``chains`` >= 2 chains each;
    ``one_hot`` (C, G) maps chains to superchain means (1 / chains where a chain is in
    a superchain, else 0)."""
    chain_means = x.mean(axis=2)  # (E, C)
    group_means = chain_means @ one_hot  # (E, G)
    spread = (chain_means - group_means @ one_hot.T * chains) ** 2  # about their superchain's
    # per superchain: the mean within-chain variance plus the variance of the chain means
    within = x.var(axis=2, ddof=1) @ one_hot + spread @ one_hot * chains / (chains - 1)
    between = group_means.var(axis=1, ddof=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sqrt(1 + between / within.mean(axis=1))


def _autocovariance(x: np.ndarray) -> np.ndarray:
    """Autocovariance at every lag along the last axis, by FFT (as arviz_stats)."""
    from scipy.fft import next_fast_len  # scipy.fft loads on first use

    n = x.shape[-1]
    centered = x - x.mean(axis=-1, keepdims=True)
    transform = np.fft.rfft(centered, n=next_fast_len(2 * n), axis=-1)
    transform *= np.conjugate(transform)
    return np.fft.irfft(transform, n=next_fast_len(2 * n), axis=-1)[..., :n] / n


def _geyer_ess(x: np.ndarray) -> np.ndarray:
    """ESS of (E, C, S) draws by Geyer's initial monotone sequence, entry by entry.

    arviz_stats' ``_ess`` with its loops over lags replaced by array operations: the
    autocorrelations are summed in pairs (lags 2j, 2j + 1) up to the first pair whose
    sum is not positive, the pair sums made non-increasing, and the last even lag
    added when positive.
    """
    E, C, S = x.shape
    acov = _autocovariance(x).mean(axis=1)  # (E, S): mean over chains
    mean_var = acov[:, 0] * S / (S - 1.0)
    var_plus = mean_var * (S - 1.0) / S
    if C > 1:
        var_plus = var_plus + x.mean(axis=2).var(axis=1, ddof=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = 1.0 - (mean_var[:, None] - acov) / var_plus[:, None]
    rho[:, 0] = 1.0
    pairs = max(1, (S - 1) // 2)  # pairs j of lags (2j, 2j + 1) that arviz may visit
    pair_sum = rho[:, 0 : 2 * pairs : 2] + rho[:, 1 : 2 * pairs : 2]
    # the last pair visited: the first whose sum is not positive, or the last one
    stop = np.full(E, pairs - 1)
    if pairs > 1:
        stop = np.where(~(pair_sum[:, :-1] > 0), np.arange(pairs - 1), pairs - 1).min(axis=1)
    lags = np.arange(pairs)
    kept = lags[None, :] < stop[:, None]  # pairs 0 .. stop - 1: positive sums
    monotone = np.minimum.accumulate(np.where(kept, pair_sum, np.inf), axis=1)
    changed = kept & (monotone < pair_sum)
    even = np.where(changed, monotone / 2, rho[:, 0 : 2 * pairs : 2])
    odd = np.where(changed, monotone / 2, rho[:, 1 : 2 * pairs : 2])
    total = np.where(kept, even + odd, 0.0).sum(axis=1)
    last_even = rho[np.arange(E), 2 * stop]
    last_pair_kept = np.take_along_axis(pair_sum, stop[:, None], axis=1)[:, 0] >= 0
    last_even = np.where((last_even > 0) | (last_pair_kept & (stop > 0)), last_even, 0.0)
    last_even = np.where(stop == 0, 1.0, last_even)
    tau = np.maximum(-1.0 + 2.0 * total + last_even, 1 / np.log10(C * S))
    ess = C * S / tau
    ess[np.isnan(rho).any(axis=1)] = np.nan
    constant = x.max(axis=(1, 2)) - x.min(axis=(1, 2)) < np.finfo(float).resolution
    ess[constant] = C * S
    return ess


def ess_rows(draws: np.ndarray, method: str) -> np.ndarray:
    """Bulk or tail ESS of (E, C, S) draws, as ``arviz_stats.ess`` (tail: ``prob=0.05``).

    Returns an array of shape (E,); NaN with fewer than 4 draws, and for the
    entries with a NaN draw.
    """
    if method not in ("bulk", "tail"):
        raise ValueError(f"method must be 'bulk' or 'tail', got {method!r}")
    draws = np.asarray(draws, float)
    E, C, S = draws.shape
    if S < 4:
        return np.full(E, np.nan)
    if method == "bulk":
        split = split_chains(draws)
        ess = _geyer_ess(_normal_scores(split.reshape(E, -1)).reshape(split.shape))
    else:
        quantiles = np.quantile(draws.reshape(E, C * S), [TAIL_PROB, 1 - TAIL_PROB], axis=1)
        ess = np.minimum(
            *(
                _geyer_ess(split_chains((draws <= q[:, None, None]).astype(float)))
                for q in quantiles
            )
        )
    ess[np.isnan(draws).any(axis=(1, 2))] = np.nan
    return ess
