"""Rank-normalized R-hat and bulk / tail ESS, vectorized over many entries at once.

The same numbers as ``arviz_stats.rhat`` (method "rank") and ``arviz_stats.ess``
(methods "bulk" and "tail"), which loop over entries in Python and take
milliseconds each: too slow for the 350,000 entries of W @ H on lastfm. Here the
draws of E entries are one array of shape (E, C, S) (entries first, C chains of S
draws, each entry's draws contiguous), and every step works on all entries at once.

Ranks come from one sort per row of packed ``uint64`` keys: the order-preserving bits
of the float64 value with its lowest bits replaced by the draw's position, so that
sorting values alone (much faster than ``argsort``) also gives the permutation. Keys
whose value bits agree (exact ties, such as a sampler that stays put, or values
within about 1e-13 of each other) are few; their ranks are recomputed exactly from
the full values, ties averaged, as ``scipy.stats.rankdata(method="average")``.
"""

from __future__ import annotations

import functools

import numpy as np

TAIL_PROB = 0.05
"""Tail ESS is the smaller ESS of the indicators of the 5% and 95% quantiles."""

CHUNK_VALUES = 2**18
"""Numbers ranked at once: small enough for the cache and for memory the allocator reuses.

Arrays of 2 MiB: at 4 MiB glibc gives a chunk's temporaries back to the system and
page-faults them in again for the next (measured in docs/ensembles.md).
"""

_SIGN = np.uint64(1 << 63)


def _keys(
    values: np.ndarray, bits: int, out: np.ndarray | None = None, *, signed: bool = True
) -> np.ndarray:
    """Order-preserving uint64 keys of float64 ``values`` (E, n), position in the low bits.

    The ``bits`` lowest bits of each value's key are replaced by its position in the
    row, so sorting the keys sorts the values and also gives the permutation.
    Written into ``out`` (E, n) when given; ``signed=False`` promises that no value
    has its sign bit set (no check).
    """
    high = ~np.uint64((1 << bits) - 1)
    keys = np.bitwise_and(values.view(np.uint64), high, out=out)
    if signed and keys.max() >= _SIGN:  # negative values: flip their bits, so keys order as values
        flipped = (values + 0.0).view(np.uint64)  # + 0.0 turns -0.0 into 0.0: they tie
        keys[...] = np.where(flipped >= _SIGN, ~flipped, flipped | _SIGN) & high
    keys |= np.arange(values.shape[1], dtype=np.uint64)
    return keys


def _rank_z(ranks, n: int) -> np.ndarray:
    """Normal scores of 1-based ranks among n values (Blom's offset 3/8, as arviz)."""
    from scipy.special import ndtri  # scipy.special loads on first use (0.2 s)

    return ndtri((np.asarray(ranks, float) - 0.375) / (n + 0.25))


def _fix_near_ties(rows, flat, near, z) -> np.ndarray:
    """Exact ranks where sorted keys could not tell values apart; returns the rows touched.

    ``near`` (E, n - 1) marks sorted neighbours whose keys agree but for the
    position (``flat`` (E, n): their flat indices in ``rows``); each run of them is
    ranked again on the full values, ties averaged, and its normal scores written
    into ``z`` (flat) in place. Returns the rows whose runs cover the middle.
    """
    n = rows.shape[1]
    # flat indices, not np.nonzero(near): far slower on a 2-D array (numpy 2.5, docs/ensembles.md)
    row, position = np.divmod(np.flatnonzero(near), n - 1)
    if row.size == 0:
        return row
    starts = np.ones(row.size, bool)
    starts[1:] = (row[1:] != row[:-1]) | (position[1:] != position[:-1] + 1)
    first = np.flatnonzero(starts)
    last = np.append(first[1:], row.size) - 1
    run_row, run_begin = row[first], position[first]
    length = position[last] + 2 - run_begin
    run = np.repeat(np.arange(first.size), length)
    offset = np.repeat(np.cumsum(length) - length, length)  # where each run starts below
    element = flat[run_row[run], run_begin[run] + np.arange(run.size) - offset]
    values = rows.ravel()[element]
    order = np.lexsort((values, run))  # by value within each run, runs kept in place
    values, element = values[order], element[order]
    new = np.ones(run.size, bool)
    new[1:] = (run[1:] != run[:-1]) | (values[1:] != values[:-1])
    last_of_group = np.append(new[1:], True)
    slot = np.arange(run.size)
    group_first = np.maximum.accumulate(np.where(new, slot, 0))
    group_last = np.minimum.accumulate(np.where(last_of_group, slot, run.size)[::-1])[::-1]
    z[element] = _rank_z(run_begin[run] - offset + (group_first + group_last) / 2 + 1, n)
    return run_row[(run_begin <= n // 2) & (run_begin + length > (n - 1) // 2)]


class Workspace:
    """Arrays reused from chunk to chunk of ranks (one workspace per thread).

    A chunk's temporaries of a few MiB are otherwise page-faulted in afresh whenever
    the allocator has given their memory back between chunks (glibc does).

    Parameters
    ----------
    entries : int
        Rows per chunk, at most.
    n : int
        Values per row (split draws of one entry).
    """

    def __init__(self, entries: int, n: int):
        self.entries, self.n = entries, n
        self.keys, self.unordered_keys, self.folded_keys = (
            np.empty((entries, n), np.uint64) for _ in range(3)
        )
        self.gaps = np.empty((entries, max(n - 1, 0)), np.uint64)
        self.near = np.empty((entries, max(n - 1, 0)), bool)
        self.z, self.folded = np.empty((entries, n)), np.empty((entries, n))
        self.offsets = np.arange(entries)[:, None] * n
        self.tiled = _tiled_scores(entries, n)


def _scores(rows: np.ndarray, keys: np.ndarray, bits: int, work: Workspace):
    """Normal scores of ``rows`` (E, n) from its keys sorted row by row (consumed).

    Returns
    -------
    z : ndarray of shape (E, n)
        ``ndtri((rank - 3/8) / (n + 1/4))``, ties averaged (as arviz's ``_z_scale``);
        a view of ``work.z``, overwritten by the next call.
    flat : ndarray of int64, shape (E, n)
        Flat indices into ``rows`` in sorted order, row by row (``keys``' memory).
    unsure : ndarray of int
        Rows whose two middle sorted values may be out of order (near ties).
    """
    E, n = rows.shape
    low = np.uint64((1 << bits) - 1)
    gaps = np.bitwise_xor(keys[:, 1:], keys[:, :-1], out=work.gaps[:E])
    near = np.less_equal(gaps, low, out=work.near[:E])
    keys &= low
    flat = keys.view(np.int64)
    flat += work.offsets[:E]
    z = work.z[:E].reshape(-1)
    z[flat.ravel()] = work.tiled[: E * n]
    unsure = _fix_near_ties(rows, flat, near, z)
    return z.reshape(E, n), flat, unsure


def _normal_scores(rows: np.ndarray) -> np.ndarray:
    """Rank-normalize each row of (E, n) values, ties averaged (arviz's ``_z_scale``)."""
    rows = np.ascontiguousarray(rows, float)
    E, n = rows.shape
    bits = max(1, (n - 1).bit_length())
    work = Workspace(min(E, max(1, CHUNK_VALUES // n)), n)
    z = np.empty((E, n))
    for start in range(0, E, work.entries):
        part = rows[start : start + work.entries]
        keys = _keys(part, bits, work.keys[: len(part)])
        keys.sort(axis=1)
        z[start : start + len(part)] = _scores(part, keys, bits, work)[0]
    return z


@functools.lru_cache(maxsize=4)
def _tiled_scores(E: int, n: int) -> np.ndarray:
    """E copies of the normal scores of the ranks 1 .. n, end to end: shape (E * n,)."""
    tiled = np.tile(_rank_z(np.arange(1, n + 1), n), E)
    tiled.flags.writeable = False
    return tiled


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
    chains, draws = x.shape[1:]
    means = x.mean(axis=2)
    squares = np.einsum("ecs,ecs->e", x, x) - draws * np.einsum("ec,ec->e", means, means)
    within = squares / (chains * (draws - 1))
    between = draws * means.var(axis=1, ddof=1)
    return np.sqrt((between / within + draws - 1) / draws)


def rank_rhat_rows(
    draws: np.ndarray, *, chunk_values: int = CHUNK_VALUES, workspace: Workspace | None = None
) -> np.ndarray:
    """Rank-normalized split R-hat, ``max(bulk, tail)``, of (E, C, S) draws.

    As ``arviz_stats.rhat`` (Vehtari et al. 2021). The folded draws ``|x - median|``
    are sorted from the bulk order, where they form two sorted runs (below and above
    the median), so their stable sort is a merge. Entries are ranked ``chunk_values``
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
    """:func:`rank_rhat_rows` of at most ``work.entries`` entries at once."""
    split = split_chains(np.ascontiguousarray(draws, float))
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
