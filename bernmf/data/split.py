"""Entry-wise train / validation / test splits of a matrix, as boolean masks.

``Split.train`` is the ``mask`` to fit with (True = observed); ``validation`` and
``test`` are the masks to score with (``fit.perplexity(Y, split.test)``).
:func:`paper_split` is the exact procedure of Magron & Févotte (2022).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["Split", "paper_split", "random_split"]

TRAIN, VALIDATION, TEST = 2, 1, 0
"""The codes of :meth:`Split.codes` (those of the paper's split files)."""

SPLIT_CODES = (TEST, VALIDATION, TRAIN)
"""Every code, in increasing order."""


class Split(NamedTuple):
    """Three disjoint boolean masks of one shape that together cover every entry."""

    train: np.ndarray
    validation: np.ndarray
    test: np.ndarray

    def codes(self) -> np.ndarray:
        """One integer per entry: 2 = train, 1 = validation, 0 = test."""
        return np.where(self.train, TRAIN, np.where(self.validation, VALIDATION, TEST))

    @classmethod
    def from_codes(cls, codes) -> Split:
        """Build a split from an integer array with 2 = train, 1 = validation, 0 = test."""
        codes = np.asarray(codes)
        if codes.ndim != 2:
            raise ValueError(f"codes must be 2-D, got shape {codes.shape}")
        unknown = np.setdiff1d(np.unique(codes), SPLIT_CODES)
        if unknown.size:
            raise ValueError(f"codes must be 0, 1 or 2, found {unknown[:5].tolist()}")
        return cls(codes == TRAIN, codes == VALIDATION, codes == TEST)


def _check_shape(shape) -> tuple[int, int]:
    shape = tuple(int(s) for s in shape)
    if len(shape) != 2 or min(shape) < 1:
        raise ValueError(f"shape must be (rows, columns) with both >= 1, got {shape}")
    return shape


def random_split(
    shape, fractions: tuple[float, float, float] = (0.7, 0.15, 0.15), seed: int = 0
) -> Split:
    """Assign each entry to train, validation or test at random, in the given proportions.

    Parameters
    ----------
    shape : (int, int)
        Shape of the matrix.
    fractions : (train, validation, test)
        Nonnegative, summing to 1. The counts are ``round(fraction * size)`` for train
        and validation; test gets the rest.
    seed : int
        Seed of :func:`numpy.random.default_rng`.

    Returns
    -------
    Split
    """
    M, N = _check_shape(shape)
    fractions = np.asarray(fractions, dtype=float)
    if fractions.shape != (3,) or (fractions < 0).any() or not np.isclose(fractions.sum(), 1):
        raise ValueError(
            f"fractions must be three nonnegative numbers summing to 1, got {fractions.tolist()}"
        )
    size = M * N
    n_train = round(fractions[0] * size)
    n_validation = min(round(fractions[1] * size), size - n_train)
    codes = np.full(size, TEST, dtype=np.int64)
    codes[:n_train] = TRAIN
    codes[n_train : n_train + n_validation] = VALIDATION
    np.random.default_rng(seed).shuffle(codes)
    return Split.from_codes(codes.reshape(M, N))


def paper_split(shape, seed: int = 12345) -> Split:
    """The split of Magron & Févotte (2022): 70% train, 15% validation, 15% test.

    A vector whose first ``int(0.7 * M * N)`` entries are 2, the next ones up to
    ``int(0.85 * M * N)`` are 1 and the rest 0, shuffled by numpy's legacy
    ``RandomState(seed)`` (the stream of ``np.random.seed(seed);
    np.random.shuffle(v)``, without touching the global state) and reshaped row-major.

    Parameters
    ----------
    shape : (int, int)
    seed : int, default 12345

    Returns
    -------
    Split
        ``split.codes()`` equals the paper's split file.
    """
    M, N = _check_shape(shape)
    size = M * N
    codes = np.zeros(size)  # float, as the paper's vector: the shuffle depends only on length
    codes[: int(0.7 * size)] = TRAIN
    codes[int(0.7 * size) : int(0.85 * size)] = VALIDATION
    np.random.RandomState(seed).shuffle(codes)
    return Split.from_codes(codes.reshape(M, N).astype(np.int64))
