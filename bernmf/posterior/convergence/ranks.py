"""Exact ranks of many rows at once, from one sort of 64-bit keys per row.

The order-preserving bits of each float64 value with its lowest bits replaced by
its position in the row: sorting the keys (much faster than ``argsort``) sorts the
values and also gives the permutation. Keys whose value bits agree (exact ties,
values within about 1e-13 of each other) are ranked again on the full values,
ties averaged as ``scipy.stats.rankdata(method="average")``. The exact path of
:func:`bernmf.posterior.convergence.rank_rhat_rows` and the normal scores of bulk ESS.
"""

from __future__ import annotations

import functools

import numpy as np

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


def _tied_slots(run: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Order elements by value within their runs, and each one's mean slot among its ties.

    ``run`` (L,) and ``values`` (L,): the run and the value of each element. Returns
    ``order`` (L,), the sort by run then value, and for each element in that order the
    mean of the first and last slot (0-based, over all runs) of its group of equal
    values in its run: ranks averaged as ``scipy.stats.rankdata(method="average")``.
    """
    order = np.lexsort((values, run))
    run, values = run[order], values[order]
    slot = np.arange(run.size)
    new = np.ones(run.size, bool)
    new[1:] = (run[1:] != run[:-1]) | (values[1:] != values[:-1])
    last_of_group = np.append(new[1:], True)
    group_first = np.maximum.accumulate(np.where(new, slot, 0))
    group_last = np.minimum.accumulate(np.where(last_of_group, slot, run.size)[::-1])[::-1]
    return order, (group_first + group_last) / 2


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
    order, mean_slot = _tied_slots(run, rows.ravel()[element])  # runs kept in place
    z[element[order]] = _rank_z(run_begin[run] - offset + mean_slot + 1, n)
    return run_row[(run_begin <= n // 2) & (run_begin + length > (n - 1) // 2)]


class Workspace:
    """Arrays reused from chunk to chunk of ranks (one workspace per thread).

    Those of the sums of scores from 32-bit keys (``score_sums``) and those of the
    exact ranks from 64-bit keys (here), untouched (so never paged in) where unused.
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
