"""Labelled DataFrame views of a fit's W, H and probabilities (``Fit.frames``)."""

from __future__ import annotations

import pandas as pd


class FitFrames:
    """DataFrame views of a :class:`~bernmf.results.fit.Fit`, labelled with the input's row
    and column labels.

    Parameters
    ----------
    fit : Fit
        Read for its ``W``, ``H``, ``probs``, ``shape``, ``rank`` and labels (not imported
        here: ``Fit.frames`` builds this view, and modules import one way).
    """

    def __init__(self, fit):
        self._fit = fit
        M, N = fit.shape
        self.rows = fit.row_labels if fit.row_labels is not None else pd.RangeIndex(M)
        self.columns = fit.col_labels if fit.col_labels is not None else pd.RangeIndex(N)
        self.components = pd.Index([f"component_{k}" for k in range(fit.rank)], name="component")

    @property
    def W(self) -> pd.DataFrame:
        """W, shape (M, K): rows labelled as Y's rows, columns by component."""
        return pd.DataFrame(self._fit.W, index=self.rows, columns=self.components)

    @property
    def H(self) -> pd.DataFrame:
        """H, shape (K, N): rows by component, columns labelled as Y's columns."""
        return pd.DataFrame(self._fit.H, index=self.components, columns=self.columns)

    @property
    def probs(self) -> pd.DataFrame:
        """Predictive P(Y=1), shape (M, N), labelled as Y."""
        return pd.DataFrame(self._fit.probs, index=self.rows, columns=self.columns)
