"""Posterior draws as an ArviZ DataTree (:func:`to_arviz`), with the pointwise
log-likelihood that PSIS-LOO reads (:func:`pointwise_log_likelihood`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from bernmf.data.observed import Observed
from bernmf.models.spec import observed_probability, warn_zero_probability
from bernmf.posterior.draws import map_draws

SHOWN_ENTRIES = 5
"""Entries of probability 0 that :func:`pointwise_log_likelihood`'s warning names."""


def _entry_terms(factors, y, rows, columns):
    W, H = factors
    p_one = jnp.sum(W[rows] * H[:, columns].T, axis=1)
    p_zero = jnp.sum(W[rows] * (1 - H[:, columns]).T, axis=1)
    return jnp.log(observed_probability(y, jnp.ones(y.shape, bool), p_one, p_zero))


def pointwise_log_likelihood(Y, mask, W_draws, H_draws) -> np.ndarray:
    """Log-likelihood of each observed entry under each draw, one draw at a time.

    Nothing is clipped (the policy of :func:`bernmf.perplexity`): a draw that gives an
    entry's observed outcome probability exactly 0 (H at exactly 0 or 1) gives that
    entry ``-inf``, with a :class:`bernmf.ZeroProbabilityWarning` that counts such
    entries and names the first :data:`SHOWN_ENTRIES` of them; PSIS-LOO of such an
    entry is then undefined.

    Parameters
    ----------
    Y, mask : arrays of shape (M, N)
        The training data and its mask.
    W_draws : array of shape (C, S, M, K)
    H_draws : array of shape (C, S, K, N)

    Returns
    -------
    ndarray of shape (C, S, n_observed)
        In the order of ``np.nonzero(mask)``; P(Y=0) computed as ``W @ (1 - H)``.
    """
    C, S = W_draws.shape[:2]
    row_index, column_index = np.nonzero(np.asarray(mask))
    with jax.enable_x64(True):
        y = jnp.asarray(np.asarray(Y)[row_index, column_index])
        rows, columns = jnp.asarray(row_index), jnp.asarray(column_index)
        terms = map_draws(_entry_terms, W_draws, H_draws, y, rows, columns)
    terms = terms.reshape(C, S, row_index.size)
    zero = np.isneginf(terms).any(axis=(0, 1))
    if zero.any():
        named = np.flatnonzero(zero)[:SHOWN_ENTRIES]
        shown = ", ".join(f"({row_index[i]}, {column_index[i]})" for i in named)
        warn_zero_probability(
            int(zero.sum()),
            row_index.size,
            f"pointwise_log_likelihood (entries (row, column) {shown}"
            f"{', ...' if zero.sum() > SHOWN_ENTRIES else ''}; in some draw)",
        )
    return terms


def to_arviz(
    W_draws,
    H_draws,
    *,
    sample_stats=None,
    row_labels=None,
    col_labels=None,
    observed: Observed | None = None,
    wh: bool = False,
    log_likelihood: bool = True,
):
    """Export posterior draws as an ArviZ 1.x DataTree (what :meth:`Fit.to_arviz
    <bernmf.results.fit.Fit.to_arviz>` gives of a fit's draws).

    Parameters
    ----------
    W_draws : array of shape (C, S, M, K)
    H_draws : array of shape (C, S, K, N)
    sample_stats : mapping of str to array of shape (C, S, ...), optional
        What the sampler recorded per draw.
    row_labels, col_labels : pandas Index of size M and N, optional
        The rows' and columns' labels; default 0, 1, ...
    observed : Observed, optional
        The training data, for the ``observed_data`` and ``log_likelihood`` groups.
    wh : bool, default False
        Also store the draws of ``W @ H`` (C * S * M * N numbers).
    log_likelihood : bool, default True
        Store the pointwise log-likelihood of every observed (training) entry and
        draw, C * S * n_observed numbers (about 4 GB for lastfm with 2 x 1000
        draws: pass False for large data), so that ``arviz_stats.loo`` works.

    Returns
    -------
    xarray.DataTree
        Groups ``posterior`` (W with dims (row, component), H with (component,
        column), WH with (row, column) on request), ``sample_stats`` (what the
        engine recorded, e.g. diverging, energy, step_size, tree_depth),
        ``observed_data`` (Y with dims (row, column), NaN where not observed) and
        ``log_likelihood`` (Y over dim ``observation``, one per observed entry in
        row-major order, with coordinates ``observed_row`` and ``observed_column``
        holding its labels). Rows and columns carry the labels of a DataFrame input.
    """
    import xarray as xr
    from arviz_base import dict_to_dataset

    W_draws, H_draws = np.asarray(W_draws), np.asarray(H_draws)
    C, S, M, K = W_draws.shape
    N = H_draws.shape[-1]
    rows = np.asarray(row_labels if row_labels is not None else pd.RangeIndex(M))
    columns = np.asarray(col_labels if col_labels is not None else pd.RangeIndex(N))
    coords = {
        "chain": np.arange(C),
        "draw": np.arange(S),
        "row": rows,
        "column": columns,
        "component": np.asarray([f"component_{k}" for k in range(K)]),
    }
    sample_dims = ["chain", "draw"]
    posterior = {"W": W_draws, "H": H_draws}
    if wh:
        posterior["WH"] = np.einsum("csmk,cskn->csmn", W_draws, H_draws)
    dims = {"W": ["row", "component"], "H": ["component", "column"], "WH": ["row", "column"]}
    groups = {
        "posterior": dict_to_dataset(posterior, coords=coords, dims=dims, sample_dims=sample_dims)
    }
    if sample_stats:
        stats = {name: np.asarray(v) for name, v in sample_stats.items()}
        groups["sample_stats"] = dict_to_dataset(stats, coords=coords, sample_dims=sample_dims)
    if observed is not None:
        groups["observed_data"] = dict_to_dataset(
            {"Y": np.where(observed.mask, observed.Y, np.nan)},
            coords=coords,
            dims={"Y": ["row", "column"]},
            sample_dims=[],
        )
    if observed is not None and log_likelihood:
        row_index, column_index = np.nonzero(observed.mask)
        terms = pointwise_log_likelihood(observed.Y, observed.mask, W_draws, H_draws)
        groups["log_likelihood"] = dict_to_dataset(
            {"Y": terms},
            coords={**coords, "observation": np.arange(row_index.size)},
            dims={"Y": ["observation"]},
            sample_dims=sample_dims,
        ).assign_coords(
            observed_row=("observation", rows[row_index]),
            observed_column=("observation", columns[column_index]),
        )
    return xr.DataTree.from_dict(groups)
