"""Paired differences over matrices: their mean and Student-t interval, as benchmarks print them.

A benchmark that fits two methods on the same simulated matrices compares them by the
per-matrix difference of their scores; the interval is over matrices (data), so it is as wide
as the matrices disagree, and with few matrices it is wide (t of 2 degrees of freedom: 4.30).
"""

from __future__ import annotations

import numpy as np
from scipy import stats


def paired_interval(differences, level: float = 0.95) -> tuple[float, float, float]:
    """Mean of per-matrix paired differences and its Student-t interval.

    Parameters
    ----------
    differences : array-like of shape (n,)
        One difference (method A's score minus B's) per matrix, n >= 2.
    level : float
        Coverage of the two-sided interval.

    Returns
    -------
    mean, low, high : float
        The mean difference and the interval's bounds: mean -/+ t_{(1+level)/2, n-1} s / sqrt(n).
    """
    d = np.asarray(differences, float)
    half = stats.t.ppf((1 + level) / 2, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    return float(d.mean()), float(d.mean() - half), float(d.mean() + half)


def line(name: str, differences, digits: int = 4) -> str:
    """``name: mean [low, high] (n matrices; per matrix: ...)``, the 95% t-interval."""
    mean, low, high = paired_interval(differences)
    each = ", ".join(f"{d:+.{digits}g}" for d in differences)
    return (f"{name}: {mean:+.{digits}g} [{low:+.{digits}g}, {high:+.{digits}g}] "
            f"(95% t-interval over {len(differences)} matrices; per matrix {each})")  # fmt: skip
