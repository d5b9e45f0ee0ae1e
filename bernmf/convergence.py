"""Rank-normalized R-hat and bulk / tail ESS, vectorized over many entries at once.

The same numbers as ``arviz_stats.rhat`` (method "rank") and ``arviz_stats.ess``
(methods "bulk" and "tail"), which loop over entries in Python and take
milliseconds each: too slow for the 350,000 entries of W @ H on lastfm. Here the
draws of E entries are one array of shape (E, C, S) (entries first, C chains of S
draws, each entry's draws contiguous), and every step works on all entries at once.

R-hat needs only each split chain's sum of the normal scores of the ranks and their
sum of squares. Those come from one sort per row of ``uint32`` keys: a bucket of the
value (an order-preserving map of the row's range onto the high bits) and the split
chain of the draw (the low bits), so that the split chain of each sorted position is
known without the permutation. Values sharing a bucket (exact ties, such as a sampler
that stays put, or values within about 1e-9 of the row's range) are few; they are
ranked again on the full values, ties averaged as
``scipy.stats.rankdata(method="average")``, and rows with many of them take an exact
path: one sort per row of ``uint64`` keys, the order-preserving bits of the float64
value with its lowest bits replaced by the draw's position, so that sorting values
alone (much faster than ``argsort``) also gives the permutation (ESS ranks that way).
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

BUCKET_RUNS = 16
"""Runs of values sharing a bucket ranked again per row; rows with more are ranked exactly."""

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
    run_row, run_begin, length = _near_runs(np.divmod(np.flatnonzero(near), n - 1))
    if run_row.size == 0:
        return run_row
    run = np.repeat(np.arange(run_row.size), length)
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
        self.near = np.empty((entries, n), bool)
        self.z, self.folded = np.empty((entries, n)), np.empty((entries, n))
        self.offsets = np.arange(entries)[:, None] * n
        self.tiled = _tiled_scores(entries, n)
        self.bucketed, self.bucketed_sorted = (np.empty((entries, n), np.uint32) for _ in range(2))
        self.bucket_gaps = np.empty((entries, n), np.uint32)
        self.labels = np.empty((entries, n), np.uint8)
        self.is_label = np.empty((entries, n), bool)


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
    near = np.less_equal(gaps, low, out=work.near[:E, : n - 1])
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
    values (:func:`_score_sums`); the rows where that does not suffice (non-finite
    or constant rows, many shared buckets, one at the median) go the exact way of
    :func:`_exact_rank_rhat`.
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


def _repeated_draws(rows: np.ndarray, half: int):
    """Groups of draws equal in every row of (E, n) split ``rows`` (a sampler that stays put).

    A group: consecutive draws of one split chain (of ``half``), each equal to the
    one before it in every row. Returns (first draw, size) of each group, arrays of
    shape (G,), or None without any.
    """
    repeated = np.flatnonzero(rows[0, 1:] == rows[0, :-1]) + 1  # candidates from row 0
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
    (at most :data:`BUCKET_RUNS` per row) is ranked on the full values, ties averaged
    as :func:`_fix_near_ties`, and the sums corrected; rows in ``skip`` (E,) are not.
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
    tie = np.zeros_like(keep)
    if repeats is not None:  # runs of one key, that of a group of repeated draws, of its size
        first, size = repeats
        candidate = np.flatnonzero(keep & (ordered[row, begin] == ordered[row, begin + length - 1]))
        # (row, key) of every group, sorted, to look the runs' up
        groups = (np.arange(E, dtype=np.uint64)[:, None] << 32) | keys[:, first]
        order = np.argsort(groups, axis=None)
        groups, sizes = groups.ravel()[order], np.tile(size, E)[order]
        runs = (row[candidate].astype(np.uint64) << 32) | ordered[row[candidate], begin[candidate]]
        found = np.minimum(np.searchsorted(groups, runs), groups.size - 1)
        tie[candidate] = (groups[found] == runs) & (sizes[found] == length[candidate])
    crowded = np.bincount(row[keep & ~tie], minlength=E) > BUCKET_RUNS
    middle_run = np.zeros(E, bool)
    middle_run[row[(begin <= n // 2) & (begin + length > n // 2 - 1) & ~tie]] = True
    keep &= ~crowded[row]
    tie &= keep
    keep &= ~tie
    pair = keep & (begin == 0) & (length == 2)
    if smallest is None:
        pair[:] = False
    else:  # the run of the two smallest values when both are in the first bucket
        bucket = (ordered[row[pair], 0] >> bits)[:, None]
        pair[pair] = ((keys[row[pair, None], smallest[row[pair]]] >> bits) == bucket).all(axis=1)
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


def _ranked_runs(values, keys, ordered, bits: int, chains: int, row, begin, length):
    """Normal scores of the elements of runs sharing a bucket, from their full values.

    Runs: ``row``, ``begin``, ``length`` (R,) in the sorted ``ordered`` keys; their
    elements are found in ``keys`` (E, n), unsorted: by their key among the keys of
    their split chain when the run's keys are all one (ties of one split chain, as
    a draw repeated), else by their bucket in the whole row; then ranked by value,
    ties averaged as :func:`_fix_near_ties`.

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
    value = values[row[run], element]
    order = np.lexsort((value, run))  # by value within each run
    run, element, value = run[order], element[order], value[order]
    slot = np.arange(run.size)
    new = np.ones(run.size, bool)
    new[1:] = (run[1:] != run[:-1]) | (value[1:] != value[:-1])
    last_of_group = np.append(new[1:], True)
    group_first = np.maximum.accumulate(np.where(new, slot, 0))
    group_last = np.minimum.accumulate(np.where(last_of_group, slot, run.size)[::-1])[::-1]
    first = np.cumsum(length) - length  # each run's first slot
    start = begin[run] - first[run]
    score = _rank_z(start + (group_first + group_last) / 2 + 1, n)
    return row[run], element, start + slot, score


def _runs(ordered, bits: int, work: Workspace):
    """Runs of sorted ``ordered`` keys (E, n) sharing a bucket: (row, first position, length)."""
    E, n = ordered.shape
    flat = ordered.reshape(-1)  # contiguous: faster than the 2-D views of neighbours
    gaps = np.bitwise_xor(flat[1:], flat[:-1], out=work.bucket_gaps.reshape(-1)[: E * n - 1])
    near = np.less(gaps, 1 << bits, out=work.near.reshape(-1)[: E * n - 1])
    near[n - 1 :: n] = False  # the last of a row and the first of the next
    return _near_runs(np.divmod(np.flatnonzero(near), n))


def _near_runs(marked):
    """Runs of consecutive marked neighbours, (row, position) of each: (row, first, length).

    Position p marks the sorted neighbours p and p + 1 of its row.
    """
    row, position = marked
    starts = np.ones(row.size, bool)
    starts[1:] = (row[1:] != row[:-1]) | (position[1:] != position[:-1] + 1)
    first = np.flatnonzero(starts)
    last = np.flatnonzero(np.append(starts[1:], row.size > 0))
    return row[first], position[first], position[last] + 2 - position[first]


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
