"""Calibration of held-out predictions, and coverage of a known truth by posterior intervals.

:func:`reliability`: the reliability diagram (equal-width bins of the predicted P(Y=1), the
mean prediction against the observed frequency in each) and the expected calibration error
of the predictions at held-out entries: ``ECE = sum over bins of (n_b / n) |mean p - mean
y|`` (Naeini, Cooper & Hauskrecht 2015), 0 for a calibrated predictor up to the noise of
the bins' counts.

:func:`ece_floor`: the ECE a calibrated predictor scores on the same entries, the noise
floor below which ECEs cannot be told apart.

:func:`interval_coverage`: on data simulated from the model, the share of the true ``W @
H`` entries inside the central posterior intervals of ``W @ H`` (50% and 90%): about the
level itself for a calibrated posterior. A point fit (MAP, no draws) has no interval, and
says so rather than give a number.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from bernmf.data.arguments import check_count, check_real
from bernmf.data.observed import as_observed

if TYPE_CHECKING:
    import pandas as pd

BINS = 10
"""Equal-width bins of the predicted probability in :func:`reliability`."""

LEVELS = (0.5, 0.9)
"""Central interval levels of :func:`interval_coverage`."""

BLOCK_VALUES = 4_000_000
"""Products held at once by :func:`interval_coverage` (draws x entries): 32 MB."""

NO_INTERVAL = "no interval"
"""What :meth:`Coverage.row` gives for a fit without posterior draws."""


class Reliability(NamedTuple):
    """Result of :func:`reliability`.

    Attributes
    ----------
    table : DataFrame
        One row per non-empty bin: ``bin`` (0 .. bins - 1), ``lower``, ``upper`` (its
        edges), ``count``, ``predicted`` (mean P(Y=1) in it) and ``observed`` (mean Y).
    ece : float
        Expected calibration error: the count-weighted mean of ``|predicted - observed|``.
    entries : int
        The number of scored entries.
    """

    table: pd.DataFrame
    ece: float
    entries: int


def reliability(Y, probs, mask, *, bins: int = BINS) -> Reliability:
    """Reliability diagram and expected calibration error of predictions at held-out entries.

    Entry (i, j) with ``p = probs[i, j]`` falls in bin ``min(floor(p * bins), bins - 1)``
    (equal widths; p = 1 in the last bin).

    Parameters
    ----------
    Y : array of shape (M, N)
        Binary data; NaN marks a missing entry, never scored.
    probs : array of shape (M, N)
        Predicted P(Y=1) (e.g. ``fit.probs``).
    mask : bool array of shape (M, N)
        The entries to score (e.g. the test entries).
    bins : int, default 10

    Returns
    -------
    Reliability

    Raises
    ------
    ValueError
        Shapes that differ, Y values other than 0/1/NaN, no scored entry, probabilities
        outside [0, 1] (or NaN) at scored entries, ``bins`` not a positive integer.
    """
    check_count("bins", bins)
    if np.shape(probs) != np.shape(Y):
        raise ValueError(f"probs has shape {np.shape(probs)} but Y has shape {np.shape(Y)}")
    try:
        rows, columns, y = as_observed(Y, mask, warn_empty=False).entries()
    except ValueError as error:
        raise ValueError(f"reliability: {error}") from error
    p = np.asarray(probs, float)[rows, columns]
    if not np.all((p >= 0) & (p <= 1)):
        raise ValueError("reliability: probs holds values outside [0, 1] or NaN at scored entries")
    which = np.minimum((p * bins).astype(int), bins - 1)
    count = np.bincount(which, minlength=bins)
    used = np.flatnonzero(count)
    predicted = np.bincount(which, p, bins)[used] / count[used]
    observed = np.bincount(which, y, bins)[used] / count[used]
    import pandas as pd  # on first use: it loads in 0.5 s

    table = pd.DataFrame(
        {
            "bin": used,
            "lower": used / bins,
            "upper": (used + 1) / bins,
            "count": count[used],
            "predicted": predicted,
            "observed": observed,
        }
    )
    ece = float(np.sum(count[used] * np.abs(predicted - observed)) / y.size)
    return Reliability(table, ece, int(y.size))


FLOOR_DRAWS = 200
"""Outcome sets drawn by :func:`ece_floor`."""


def ece_floor(probs, mask, *, bins: int = BINS, draws: int = FLOOR_DRAWS, seed: int = 0) -> float:
    """The mean ECE that predictions score when they are right: the noise floor of an ECE.

    Outcomes are drawn from the predictions themselves (``y ~ Bernoulli(p)`` at each scored
    entry, ``draws`` times) and scored as :func:`reliability` scores them: a perfectly
    calibrated predictor's ECE on that many entries, which differences of ECE below it cannot
    be told from (e.g. 0.036 to 0.040 on animals' 638 test entries).

    Parameters
    ----------
    probs : array of shape (M, N)
        Predicted P(Y=1), in [0, 1] at the scored entries.
    mask : bool array of shape (M, N)
        The scored entries (observed ones only).
    bins, draws, seed : int

    Returns
    -------
    float
    """
    check_count("bins", bins)
    check_count("draws", draws)
    p = np.asarray(probs, float)[np.asarray(mask, bool)]
    if p.size == 0 or not np.all((p >= 0) & (p <= 1)):
        raise ValueError("ece_floor: no scored entry, or probs outside [0, 1] at them")
    which = np.minimum((p * bins).astype(int), bins - 1)
    predicted = np.bincount(which, p, bins)
    y = np.random.default_rng(seed).random((draws, p.size)) < p  # (draws, entries)
    observed = np.stack([np.bincount(which, row, bins) for row in y])  # (draws, bins)
    return float(np.mean(np.abs(predicted - observed).sum(axis=1)) / p.size)


class Coverage(NamedTuple):
    """Result of :func:`interval_coverage`.

    Attributes
    ----------
    levels : tuple of float
        The central interval levels.
    shares : ndarray of shape (len(levels),) or None
        Share of the true entries inside each interval; None for a fit without draws.
    """

    levels: tuple[float, ...]
    shares: np.ndarray | None

    def row(self) -> dict:
        """``{"coverage_50": share, ...}``; :data:`NO_INTERVAL` for each level without draws."""
        names = [f"coverage_{round(level * 100):g}" for level in self.levels]
        if self.shares is None:
            return dict.fromkeys(names, NO_INTERVAL)
        return {name: float(share) for name, share in zip(names, self.shares, strict=True)}


def interval_coverage(
    truth,
    W_draws=None,
    H_draws=None,
    *,
    levels=LEVELS,
    chain_weights=None,
    max_block_values: int = BLOCK_VALUES,
) -> Coverage:
    """Share of the true ``W @ H`` entries inside central posterior intervals of ``W @ H``.

    The interval of level ``l`` runs from the ``(1 - l) / 2`` to the ``(1 + l) / 2``
    quantile of the C * S draws of an entry, bounds included: chains pooled (numpy's
    linear interpolation), or with ``chain_weights`` the quantiles of the mixture of the
    chains with those weights (chains in distinct modes, mixed by chain stacking: the
    smallest draw whose cumulative weight reaches the probability, each draw of chain c
    weighing ``chain_weights[c] / S``). The products are formed a tile of rows x columns
    at a time, at most about ``max_block_values`` numbers (at least one entry's draws),
    so the (C * S, M, N) array is never held.

    Parameters
    ----------
    truth : array of shape (M, N)
        The true P(Y=1), e.g. ``W @ H`` of :func:`bernmf.simulate`.
    W_draws : array of shape (C, S, M, K), optional
    H_draws : array of shape (C, S, K, N), optional
        The posterior draws (``fit.draws["W"]``, ``fit.draws["H"]``). Both None (a
        point fit: ``fit.draws`` is empty) gives ``shares=None``: no interval.
    levels : sequence of float in (0, 1), default (0.5, 0.9)
    chain_weights : array of shape (C,), optional
        Non-negative weights of the chains summing to 1 (e.g. ``chain_stacking(...).weights``).
    max_block_values : int, default :data:`BLOCK_VALUES`

    Returns
    -------
    Coverage

    Raises
    ------
    ValueError
        One of the draws without the other, shapes that do not match ``truth``, a
        non-finite truth or draw, levels outside (0, 1), chain weights that are not C
        non-negative numbers summing to 1, ``max_block_values`` < 1.
    """
    levels = tuple(levels)
    if not levels:
        raise ValueError("levels must hold at least one level")
    for level in levels:
        check_real("each of levels", level, 0.0, 1.0, closed="neither")
    levels = tuple(float(level) for level in levels)
    check_count("max_block_values", max_block_values)
    truth = np.asarray(truth, float)
    if truth.ndim != 2:
        raise ValueError(f"truth must have shape (M, N), got {truth.shape}")
    if W_draws is None and H_draws is None:
        return Coverage(levels, None)
    if W_draws is None or H_draws is None:
        raise ValueError("give both W_draws and H_draws, or neither (a fit without draws)")
    W_draws, H_draws = np.asarray(W_draws, float), np.asarray(H_draws, float)
    M, N = truth.shape
    if W_draws.ndim != 4 or H_draws.ndim != 4:
        raise ValueError(
            "W_draws and H_draws must have shapes (C, S, M, K) and (C, S, K, N), got "
            f"{W_draws.shape} and {H_draws.shape}"
        )
    C, S, _, K = W_draws.shape
    if W_draws.shape[2] != M or H_draws.shape != (C, S, K, N):
        raise ValueError(
            f"draws of shapes {W_draws.shape} and {H_draws.shape} do not match each other "
            f"and truth of shape {truth.shape}"
        )
    if not (np.isfinite(truth).all() and np.isfinite(W_draws).all() and np.isfinite(H_draws).all()):
        raise ValueError("truth and the draws must be finite")
    draw_weights = None
    if chain_weights is not None:
        chain_weights = np.asarray(chain_weights, float)
        if chain_weights.shape != (C,) or not (
            (chain_weights >= 0).all() and np.isclose(chain_weights.sum(), 1)
        ):
            raise ValueError(
                f"chain_weights must be {C} non-negative numbers summing to 1, "
                f"got {chain_weights.tolist()}"
            )
        draw_weights = np.repeat(chain_weights / S, S)  # (C * S,), chain by chain
    D = C * S
    W_flat, H_flat = W_draws.reshape(D, M, K), H_draws.reshape(D, K, N)
    tile = max(1, max_block_values // D)  # entries per tile
    tile_columns = min(N, tile)
    tile_rows = min(M, max(1, tile // tile_columns))
    quantiles = np.array([q for level in levels for q in ((1 - level) / 2, (1 + level) / 2)])
    inside = np.zeros(len(levels), np.int64)
    for top in range(0, M, tile_rows):
        rows = slice(top, top + tile_rows)
        for left in range(0, N, tile_columns):
            columns = slice(left, left + tile_columns)
            products = np.matmul(W_flat[:, rows], H_flat[:, :, columns])  # (D, r, c)
            if draw_weights is None:
                bounds = np.quantile(products, quantiles, axis=0)  # (2L, r, c)
            else:
                bounds = _weighted_quantiles(products, draw_weights, quantiles)
            true = truth[rows, columns]
            inside += ((true >= bounds[0::2]) & (true <= bounds[1::2])).sum(axis=(1, 2))
    return Coverage(levels, inside / truth.size)


def _weighted_quantiles(values: np.ndarray, weights: np.ndarray, probabilities) -> np.ndarray:
    """Quantiles along axis 0 of (D, ...) values with weights (D,) summing to 1: for each
    probability the smallest value whose cumulative weight reaches it (an inverse CDF, as
    numpy's ``method="inverted_cdf"`` on draws repeated in proportion to their weights).
    Returns shape (len(probabilities), ...)."""
    order = np.argsort(values, axis=0)
    ordered = np.take_along_axis(values, order, axis=0)
    cumulative = np.cumsum(weights[order], axis=0)
    last = values.shape[0] - 1
    return np.stack(
        [
            np.take_along_axis(
                ordered, np.minimum((cumulative < q).sum(axis=0), last)[None], axis=0
            )[0]
            for q in probabilities
        ]
    )
