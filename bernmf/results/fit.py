"""The result every engine returns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from bernmf.data.observed import Observed, as_observed
from bernmf.models.spec import Prior, perplexity_of_blocks, probability
from bernmf.results.saving import save

if TYPE_CHECKING:  # pandas loads on first use (0.5 s of an import of bernmf)
    import pandas as pd

    from bernmf.results.frames import FitFrames

BLOCK_ENTRIES = 2**20
"""Entries of P(Y=1) that :meth:`Fit.perplexity` computes at a time when they are not stored."""


@dataclass(frozen=True)
class Fit:
    """A fitted factorization.

    Attributes
    ----------
    engine : str
        Name of the engine that produced it.
    rank : int
        Number of components K.
    prior : Prior or None
        The prior used (arrays of shape (K,)), None for prior-free engines.
    W : ndarray of shape (M, K)
        Row factors (for the NBMF engines, rows on the simplex).
    H : ndarray of shape (K, N)
        Column factors (for the NBMF engines, entries in [0, 1]).
    probs : ndarray of shape (M, N)
        Predictive P(Y=1) for every entry, observed or not (a property):
        :attr:`stored_probs` when the engine keeps them, else computed on each
        access, from W and H (``mm``, ``em``) or from the members of an ensemble
        of them. Of a fit across processes (``bernmf.fit(..., distributed=True)``),
        like W, only this process's rows (M_p, N).
    trace : ndarray of shape (n_iter + 1,)
        The engine's objective at the start and after each iteration (sweep, step
        or kept draw); its kind and direction are the engine's declaration
        (``bernmf.inference.get_engine(name).trace`` and ``.maximizes``). For
        ``mm`` and ``em`` this is the negative log-posterior (negative
        log-likelihood for ``em``) of the observed entries; for the samplers minus
        the log joint, averaged over the chains.
    n_iter : int
        Number of iterations run.
    converged : bool or None
        True if the stopping criterion was met before the iteration limit; None for
        an engine without one (the samplers ``nuts`` and ``gibbs``: see
        :func:`bernmf.diagnostics`).
    timings : dict
        ``{"compile": seconds, "run": seconds}``; compile is 0 when a compiled
        program of the same shapes was reused.
    seed : int
        Seed of the random initialization.
    extras : mapping
        Engine-specific results, and ``"run"``: how :func:`bernmf.fit` made the fit
        (every engine option, defaults included, the prior, the seeds, digests of
        the data and the mask, the versions; :func:`bernmf.fitting.plan.run_record`).
    row_labels, col_labels : pandas.Index or None
        Labels of a DataFrame input; see :attr:`frames`.
    draws : mapping
        Posterior draws of the Bayesian engines, each with leading dims
        (chain, draw): ``"W"`` of shape (C, S, M, K) and ``"H"`` of shape
        (C, S, K, N). Empty for point estimates.
    sample_stats : mapping
        Per-draw statistics of the samplers, each of shape (C, S): for example
        ``"diverging"``, ``"energy"``, ``"step_size"``, ``"tree_depth"``. Empty
        when the engine has none.
    observed : Observed or None
        The data the fit was made on (Y and the mask of its observed entries),
        kept by :func:`bernmf.fit` for the ArviZ export and for saving.
    members : tuple of Fit
        The members of an ensemble (``bernmf.fit(..., restarts=R)``), whose
        predictive probabilities ``probs`` mixes; empty for a single fit.
    stored_probs : ndarray of shape (M, N) or None
        P(Y=1) as the engine computed it (the posterior mean of W @ H, the logistic
        engines' sigmoid), or None when it follows from W and H (``clip(W @ H, 0,
        1)``) or, with ``members``, is their mixture weighted by
        ``extras["restarts"]["weights"]`` (``extras["stack"]["weights"]`` for a
        :func:`bernmf.stack`): no M x N array is kept for those.
    """

    engine: str
    rank: int
    prior: Prior | None
    W: np.ndarray
    H: np.ndarray
    trace: np.ndarray
    n_iter: int
    converged: bool | None
    timings: Mapping[str, float]
    seed: int
    extras: Mapping[str, Any] = field(default_factory=dict)
    row_labels: pd.Index | None = None
    col_labels: pd.Index | None = None
    draws: Mapping[str, np.ndarray] = field(default_factory=dict)
    sample_stats: Mapping[str, np.ndarray] = field(default_factory=dict)
    observed: Observed | None = field(default=None, repr=False)
    members: tuple[Fit, ...] = field(default=(), repr=False)
    stored_probs: np.ndarray | None = field(default=None, repr=False)

    @property
    def shape(self) -> tuple[int, int]:
        """(M, N): the rows of W by the columns of H."""
        return (self.W.shape[0], self.H.shape[1])

    @property
    def probs(self) -> np.ndarray:
        """P(Y=1) of every entry, shape (M, N): see the class's attributes."""
        return self.probs_rows(0, self.shape[0])

    def probs_rows(self, start: int, stop: int) -> np.ndarray:
        """P(Y=1) of rows ``start:stop`` (a slice's bounds), shape (rows, N).

        Computes only those rows when the probabilities are not stored, so a large
        fit can be read (and scored, :meth:`perplexity`) a block of rows at a time.
        """
        if self.stored_probs is not None:
            return self.stored_probs[start:stop]
        if self.members:  # an ensemble's ("restarts") or a stack's (bernmf.stack) weights
            weights = (self.extras.get("stack") or self.extras["restarts"])["weights"]
            used = [(w, m) for w, m in zip(weights, self.members, strict=True) if w > 0]
            return sum(w * m.probs_rows(start, stop) for w, m in used)
        return probability(self.W[start:stop], self.H)

    @property
    def objective(self) -> float:
        """Final value of the objective (the last entry of :attr:`trace`)."""
        return float(self.trace[-1])

    def probs_at(self, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
        """P(Y=1) at the entries ``(rows[i], columns[i])``, shape (n,).

        ``rows`` must be sorted (as ``numpy.nonzero`` gives them): the probabilities
        that are not stored are computed :data:`BLOCK_ENTRIES` at a time, so no
        M x N array of floats is made, with the same values as ``probs[rows, columns]``.
        """
        if self.stored_probs is not None:
            return self.stored_probs[rows, columns]
        M, step = self.shape[0], self._rows_per_block()
        bounds = np.searchsorted(rows, np.arange(0, M + step, step))
        parts = [
            self.probs_rows(a, a + step)[rows[i:j] - a, columns[i:j]]
            for a, i, j in zip(range(0, M, step), bounds[:-1], bounds[1:], strict=False)
            if j > i
        ]
        return np.concatenate(parts) if parts else np.empty(0)

    def perplexity(self, Y, mask=None) -> float:
        """Mean negative log-likelihood (nats) of the selected entries of Y under ``probs``.

        Probabilities that are not stored are computed about :data:`BLOCK_ENTRIES`
        at a time, so scoring adds no M x N array of floats.

        Parameters
        ----------
        Y : array-like or DataFrame of shape (M, N)
            Binary data; NaN is missing and never scored.
        mask : bool array of shape (M, N), optional
            True for the entries to score, e.g. the held-out test entries.

        Returns
        -------
        float
            See :func:`bernmf.models.perplexity` (not exponentiated).
        """
        blocks = self.scoring_blocks(as_observed(Y, mask, warn_empty=False))
        return perplexity_of_blocks(blocks, self.engine, self.prior)

    def scoring_blocks(self, data: Observed):
        """``(Y, probs, mask)`` of blocks of rows of ``data`` (M, N), as scoring takes them.

        One block when the probabilities are stored, else blocks of about
        :data:`BLOCK_ENTRIES` entries (:func:`bernmf.models.spec.perplexity_of_blocks`).

        Raises
        ------
        ValueError
            ``data`` not of the fit's shape.
        """
        M, N = self.shape
        if data.shape != (M, N):
            raise ValueError(f"Y has shape {data.shape} but the fit has shape {(M, N)}")
        step = M if self.stored_probs is not None else self._rows_per_block()
        for a in range(0, M, step):
            rows = slice(a, a + step)
            yield data.ones[rows].astype(float), self.probs_rows(a, a + step), data.mask[rows]

    def _rows_per_block(self) -> int:
        """Rows of about :data:`BLOCK_ENTRIES` probabilities, computed at a time when not stored."""
        return max(1, BLOCK_ENTRIES // self.shape[1])

    def save(self, path, *, overwrite: bool = False, metadata=None):
        """Save to a ``.npz`` file; :func:`bernmf.load` reads it back exactly.

        See :func:`bernmf.results.saving.save` for the parameters. Returns the path written.
        """
        return save(self, path, overwrite=overwrite, metadata=metadata)

    def to_arviz(self, *, wh: bool = False, log_likelihood: bool = True):
        """The posterior draws as an ArviZ DataTree; see :func:`bernmf.posterior.arviz.to_arviz`."""
        from bernmf.posterior.arviz import to_arviz

        return to_arviz(self, wh=wh, log_likelihood=log_likelihood)

    @property
    def frames(self) -> FitFrames:
        """W, H and probs as labelled DataFrames (``fit.frames.W`` ...)."""
        from bernmf.results.frames import FitFrames

        return FitFrames(self)

    def top_columns(self, n: int = 10) -> pd.DataFrame:
        """The ``n`` columns of largest H in each component: what each component means.

        For the NBMF engines ``H[k, n]`` is P(Y=1) in column n for a row made of
        component k alone, so a component reads as the columns it switches on
        (the attributes of an animal type, the artists of a taste).

        Parameters
        ----------
        n : int, default 10
            Columns per component (all of them when there are fewer).

        Returns
        -------
        DataFrame of min(n, N) * K rows
            ``component`` (``"component_k"``, as in :attr:`frames`), ``rank`` (1 for
            the largest H of the component), ``column`` (the input's column label,
            else its position), ``H`` and ``lift``: H over the column's frequency of
            ones in the data fitted (NaN without it). Columns whose H agree to two
            decimals (a vote matrix's H = 1.00) are ordered by lift, so that the
            columns peculiar to the component come before the ones every row has;
            then by the columns' order.

        Raises
        ------
        ValueError
            ``n`` is not an integer >= 1.
        """
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
            raise ValueError(f"n must be an integer >= 1, got {n!r}")
        frames = self.frames
        H = np.asarray(self.H)
        with np.errstate(invalid="ignore", divide="ignore"):  # a column without ones
            lift = H / self._column_frequency()[None, :]
        key = np.where(np.isfinite(lift), lift, -np.inf)
        top = np.stack(
            [np.lexsort((-key[k], -np.round(H[k], 2)))[: int(n)] for k in range(self.rank)]
        )  # (K, n): by H to two decimals, then by lift
        count = top.shape[1]
        import pandas as pd  # on first use: it loads in 0.5 s

        return pd.DataFrame(
            {
                "component": np.repeat(frames.components.to_numpy(), count),
                "rank": np.tile(np.arange(1, count + 1), self.rank),
                "column": frames.columns.to_numpy()[top.ravel()],
                "H": np.take_along_axis(H, top, axis=1).ravel(),
                "lift": np.take_along_axis(lift, top, axis=1).ravel(),
            }
        )

    def _column_frequency(self) -> np.ndarray:
        """Each column's frequency of ones among its observed entries; NaN without data."""
        N = np.shape(self.H)[1]
        if self.observed is None or self.observed.shape[1] != N:
            return np.full(N, np.nan)
        ones = np.asarray(self.observed.ones.sum(axis=0), dtype=float).ravel()
        with np.errstate(invalid="ignore", divide="ignore"):
            return ones / np.asarray(self.observed.mask.sum(axis=0), dtype=float).ravel()
