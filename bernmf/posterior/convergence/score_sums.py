"""Each split chain's sum of the normal scores of the ranks, from one sort of 32-bit keys.

What :func:`bernmf.posterior.convergence.rank_rhat_rows` needs of the ranks of a row of n
values: without ties its normal scores are the fixed scores of the ranks 1 .. n,
so each split chain's sum of scores comes from the split chain of each sorted
position. A key holds a bucket of the value (the row's range mapped monotonically
onto its high bits) and the split chain (its low bits): sorted keys are sorted
values but inside runs of a shared bucket, which are ranked again on the values.
"""

from __future__ import annotations

import functools

import numpy as np

from bernmf.posterior.convergence.ranks import (
    Workspace,
    _near_runs,
    _rank_z,
    _tied_slots,
    _tiled_scores,
)

BUCKET_RUNS = 16
"""Runs of values sharing a bucket ranked again per row; rows with more are ranked exactly."""


def _repeated_draws(rows: np.ndarray, half: int):
    """Groups of draws equal in every row of (E, n) split ``rows`` (a sampler that stays put).

    A group: consecutive draws of one split chain (of ``half``), each equal to the
    one before it in every row. Returns (first draw, size) of each group, arrays of
    shape (G,), or None without any.
    """
    repeated = np.flatnonzero(rows[0, 1:] == rows[0, :-1]) + 1  # candidates from row 0
    if repeated.size:
        repeated = repeated[repeated % half != 0]
        repeated = repeated[(rows[:, repeated] == rows[:, repeated - 1]).all(axis=0)]
    if repeated.size == 0:
        return None
    starts = np.ones(repeated.size, bool)
    starts[1:] = repeated[1:] != repeated[:-1] + 1
    first = repeated[starts] - 1
    return first, repeated[np.append(starts[1:], True)] - first + 1


def _bucket_keys(values, low, scale, bits: int, half: int, work: Workspace) -> np.ndarray:
    """uint32 keys of (E, n) ``values``: bucket, then the split chain in the ``bits`` low bits.

    The bucket ``floor((values - low) * scale)`` (``low`` None: 0) is monotone in
    the value, each rounding being monotone: sorted keys are sorted values but
    inside runs of a shared bucket. ``scale`` (E,) maps each row into the buckets.
    Written into ``work.bucketed``.
    """
    E, n = values.shape
    scaled, keys = work.z[:E], work.bucketed[:E]
    with np.errstate(invalid="ignore"):  # rows of NaN or inf: ranked the exact way
        if low is None:
            np.multiply(values, scale[:, None], out=scaled)
        else:
            np.subtract(values, low[:, None], out=scaled)
            scaled *= scale[:, None]
        # buckets < 2**30 (at least 4 split chains): cast as int32, faster than as uint32
        np.copyto(keys.view(np.int32), scaled, casting="unsafe")
    keys <<= bits
    keys |= _chain_labels(n, half)
    return keys


@functools.lru_cache(maxsize=4)
def _chain_labels(n: int, half: int) -> np.ndarray:
    """Split chain of each of the n positions of a row: shape (n,), uint32."""
    labels = np.arange(n, dtype=np.uint32) // half
    labels.flags.writeable = False
    return labels


def _score_sums(
    values, keys, bits: int, chains: int, skip, work: Workspace, smallest=None, repeats=None
):
    """Each split chain's sum of normal scores, and the sum of squares, of (E, n) ``values``.

    ``keys`` are their :func:`_bucket_keys`. Each run of sorted keys sharing a bucket
    (at most :data:`BUCKET_RUNS` per row) is ranked on the full values, ties averaged,
    and the sums corrected; rows in ``skip`` (E,) are not.
    ``smallest`` (E, 2): where given, two elements of each row that have the two
    smallest values when they share the first bucket (the middle pair of the draws,
    for the folded draws); a run of these two alone is ranked without a search.
    ``repeats``: where given, the groups of equal draws of :func:`_repeated_draws`;
    a run of one group alone is one tie, ranked without a search either.

    Returns
    -------
    sums : ndarray of shape (E, chains)
    squares : ndarray of shape (E,)
    ordered : ndarray of uint32, shape (E, n)
        The keys sorted row by row (``work.bucketed_sorted``).
    crowded : ndarray of bool, shape (E,)
        Rows with more runs than :data:`BUCKET_RUNS`, left uncorrected.
    middle_run : ndarray of bool, shape (E,)
        Rows with a run at one of the two middle positions, but for a tie of
        ``repeats`` (all its keys are the key of one value).
    """
    E, n = values.shape
    z = _tiled_scores(1, n)
    ordered = work.bucketed_sorted[:E]
    np.copyto(ordered, keys)
    ordered.sort(axis=1)
    labels = np.bitwise_and(ordered, (1 << bits) - 1, out=work.labels[:E], casting="unsafe")
    sums = np.empty((E, chains))
    for chain in range(chains - 1):
        sums[:, chain] = np.equal(labels, chain, out=work.is_label[:E]) @ z
    sums[:, -1] = z.sum() - sums[:, :-1].sum(axis=1)
    squares = np.full(E, z @ z)
    row, begin, length = _runs(ordered, bits, work)
    keep = ~skip[row]
    tie = _repeat_ties(keys, ordered, repeats, row, begin, length, keep)
    crowded = np.bincount(row[keep & ~tie], minlength=E) > BUCKET_RUNS
    middle_run = np.zeros(E, bool)
    middle_run[row[(begin <= n // 2) & (begin + length > n // 2 - 1) & ~tie]] = True
    keep &= ~crowded[row]
    tie &= keep
    keep &= ~tie
    pair = _smallest_pair(keys, ordered, bits, smallest, row, begin, length, keep)
    keep &= ~pair
    half = n // chains
    if keep.any():
        entry, element, position, right = _ranked_runs(
            values, keys, ordered, bits, chains, row[keep], begin[keep], length[keep]
        )
        chain = element // half
    else:
        entry = chain = position = np.zeros(0, np.intp)
        right = np.zeros(0)
    if tie.any():
        tied, at, size = row[tie], begin[tie], length[tie]
        slot = np.arange(size.sum()) - np.repeat(np.cumsum(size) - size, size)
        entry = np.concatenate([entry, np.repeat(tied, size)])
        chain = np.concatenate([chain, np.repeat(labels[tied, at], size)])
        position = np.concatenate([position, np.repeat(at, size) + slot])
        right = np.concatenate([right, np.repeat(_rank_z(at + (size + 1) / 2, n), size)])
    if pair.any():
        paired = row[pair]
        chain = np.concatenate([chain, smallest[paired].ravel() // half])
        first, second = values[paired, smallest[paired, 0]], values[paired, smallest[paired, 1]]
        rank = np.empty((paired.size, 2))
        rank[:, 0] = 1.5 + 0.5 * np.sign(first - second)  # ranks 1 and 2, or 1.5 for a tie
        rank[:, 1] = 3 - rank[:, 0]
        entry = np.concatenate([entry, np.repeat(paired, 2)])
        position = np.concatenate([position, np.tile([0, 1], paired.size)])
        right = np.concatenate([right, _rank_z(rank.ravel(), n)])
    if entry.size:
        wrong = z[position]
        flat = np.concatenate([entry * chains + chain, entry * chains + labels[entry, position]])
        sums += np.bincount(flat, np.concatenate([right, -wrong]), E * chains).reshape(E, chains)
        squares += np.bincount(entry, right * right - wrong * wrong, E)
    return sums, squares, ordered, crowded, middle_run


def _repeat_ties(keys, ordered, repeats, row, begin, length, keep) -> np.ndarray:
    """Which runs (R,) in ``keep`` are one group of ``repeats`` alone: its key, its size.

    All elements of a group share one key, so its run holds them all; a run of that
    key alone and of the group's size is the group, one tie.
    """
    tie = np.zeros_like(keep)
    if repeats is None:
        return tie
    first, size = repeats
    one_key = np.flatnonzero(keep & (ordered[row, begin] == ordered[row, begin + length - 1]))
    groups = (np.arange(len(keys), dtype=np.uint64)[:, None] << 32) | keys[:, first]
    order = np.argsort(groups, axis=None)  # (row, key) of each group, sorted
    groups, sizes = groups.ravel()[order], np.tile(size, len(keys))[order]
    runs = (row[one_key].astype(np.uint64) << 32) | ordered[row[one_key], begin[one_key]]
    found = np.minimum(np.searchsorted(groups, runs), groups.size - 1)
    tie[one_key] = (groups[found] == runs) & (sizes[found] == length[one_key])
    return tie


def _smallest_pair(keys, ordered, bits: int, smallest, row, begin, length, keep) -> np.ndarray:
    """Which runs (R,) in ``keep`` are the two elements ``smallest`` (E, 2) of their row alone.

    A run of two at the first position whose two elements are both in the first
    bucket; none without ``smallest``.
    """
    pair = keep & (begin == 0) & (length == 2)
    if smallest is None:
        pair[:] = False
        return pair
    bucket = (ordered[row[pair], 0] >> bits)[:, None]
    pair[pair] = ((keys[row[pair, None], smallest[row[pair]]] >> bits) == bucket).all(axis=1)
    return pair


def _ranked_runs(values, keys, ordered, bits: int, chains: int, row, begin, length):
    """Normal scores of the elements of runs sharing a bucket, from their full values.

    Runs: ``row``, ``begin``, ``length`` (R,) in the sorted ``ordered`` keys; their
    elements are found in ``keys`` (E, n), unsorted: by their key among the keys of
    their split chain when the run's keys are all one (ties of one split chain, as
    a draw repeated), else by their bucket in the whole row; then ranked by value,
    ties averaged (``scipy.stats.rankdata(method="average")``).

    Returns
    -------
    entry, element, position, score : ndarray of shape (sum of lengths,)
        The row, the element (index in the row) of each slot of the runs, the
        sorted position of that slot and its exact normal score.
    """
    E, n = values.shape
    half = n // chains
    key = ordered[row, begin]
    one_key = key == ordered[row, begin + length - 1]
    runs, elements = [], []
    single = np.flatnonzero(one_key)
    chain = key[single] & ((1 << bits) - 1)
    found = keys.reshape(E, chains, half)[row[single], chain] == key[single, None]
    run, element = np.divmod(np.flatnonzero(found), half)
    runs.append(single[run])
    elements.append(chain[run] * half + element)
    mixed = np.flatnonzero(~one_key)
    found = (keys[row[mixed]] >> bits) == (key[mixed, None] >> bits)
    run, element = np.divmod(np.flatnonzero(found), n)
    runs.append(mixed[run])
    elements.append(element)
    run, element = np.concatenate(runs), np.concatenate(elements)
    order, mean_slot = _tied_slots(run, values[row[run], element])
    run, element = run[order], element[order]
    first = np.cumsum(length) - length  # each run's first slot
    start = begin[run] - first[run]
    score = _rank_z(start + mean_slot + 1, n)
    return row[run], element, start + np.arange(run.size), score


def _runs(ordered, bits: int, work: Workspace):
    """Runs of sorted ``ordered`` keys (E, n) sharing a bucket: (row, first position, length)."""
    E, n = ordered.shape
    flat = ordered.reshape(-1)  # contiguous: faster than the 2-D views of neighbours
    gaps = np.bitwise_xor(flat[1:], flat[:-1], out=work.bucket_gaps.reshape(-1)[: E * n - 1])
    near = np.less(gaps, 1 << bits, out=work.near.reshape(-1)[: E * n - 1])
    near[n - 1 :: n] = False  # the last of a row and the first of the next
    return _near_runs(np.divmod(np.flatnonzero(near), n))


def _middle_values(values, keys, ordered, bits: int, chains: int, skip):
    """Median of each row of (E, n) ``values``: mean of the two middle ones (0 in ``skip``).

    Their keys (``ordered``: ``keys`` sorted) are unique in their rows outside
    ``skip``; each is looked for among the keys of its split chain alone. Returns
    the medians (E,) and the two middle elements (E, 2).
    """
    E, n = values.shape
    half = n // chains
    entry = np.arange(E)
    by_chain = keys.reshape(E, chains, half)
    elements = np.empty((E, 2), np.intp)
    for i, position in enumerate((n // 2 - 1, n // 2)):
        key = ordered[:, position]
        chain = key & ((1 << bits) - 1)
        found = by_chain[entry, chain] == key[:, None]
        elements[:, i] = chain * half + found.argmax(axis=1)
    lower, upper = values[entry[:, None], elements].T
    return np.where(skip, 0.0, (lower + upper) / 2), elements
