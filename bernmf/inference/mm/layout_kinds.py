"""The layouts of MM's data, one small type each, and the statistics a sweep needs.

Every MM sweep needs three statistics of the observed entries at factors (W, H),
with ``Y1 = O * Y`` and ``Y0 = O * (1 - Y)``:

* the H step's sums ``W.T @ (Y1 / WH)`` and ``W.T @ (Y0 / W(1-H))``, each (K, N);
* the W step's ``S = W * ((Y1 / WH) @ H.T + (Y0 / W(1-H)) @ (1 - H).T)``, (M, K);
* the log-likelihood ``sum(Y1 log WH + Y0 log W(1-H))``.

Each layout (a :data:`Problem`) computes them its way, with its own type of factors
and what it computed at them (an :data:`Evaluated`):

* :class:`Dense`: on whole (M, N) arrays (:class:`Predictions`);
* :class:`SparseOnes`: ``Y1 / WH`` only at the observed ones (a gather and a segment
  sum), few in most binary tables; only ``W(1-H)`` is dense (:class:`OnesPredictions`);
* :class:`RowBlocks`: over blocks of B rows (``lax.scan``, ``lax.map``), so the
  temporaries are (B, N) (:class:`BlockTotals`);
* :class:`SparseRowBlocks`: the ones as :class:`SparseOnes`'s, the zeros' terms over
  blocks of B rows (:class:`OnesBlockTotals`);

and :class:`Dense` and :class:`RowBlocks` can hold one device's rows under ``shard_map``
(``axis_name``), their sums over rows ``psum``-ed. :mod:`bernmf.inference.mm.layout`
chooses and builds the layout; the MM updates use only :func:`state_at`,
:func:`h_sums`, :func:`w_statistic`, :func:`log_likelihood` and :func:`row_total`:
one code for every layout.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from bernmf.models.spec import masked_log_likelihood_sum


def _pytree(data_fields: list[str], meta_fields: list[str]):
    """Register a frozen dataclass as a JAX pytree: arrays as leaves, the rest static."""
    return functools.partial(
        jax.tree_util.register_dataclass, data_fields=data_fields, meta_fields=meta_fields
    )


class Predictions(NamedTuple):
    """Factors with ``p_one = W @ H`` and ``p_zero = W @ (1 - H)``, each (M, N) (:class:`Dense`)."""

    W: jax.Array
    H: jax.Array
    p_one: jax.Array
    p_zero: jax.Array


class OnesPredictions(NamedTuple):
    """Factors with ``p_one``, ``W @ H`` at the L observed ones (L,), and ``p_zero = W @ (1 -
    H)``, (M, N) (:class:`SparseOnes`)."""

    W: jax.Array
    H: jax.Array
    p_one: jax.Array
    p_zero: jax.Array


class BlockTotals(NamedTuple):
    """Factors with one pass over the row blocks (:class:`RowBlocks`): the log-likelihood of
    this device's rows (``log_lik``) and the H step's sums over all rows (``sums``, each
    (K, N)), instead of (M, N) predictions."""

    W: jax.Array
    H: jax.Array
    log_lik: jax.Array
    sums: tuple[jax.Array, jax.Array]


class OnesBlockTotals(NamedTuple):
    """Factors with ``p_one``, ``W @ H`` at the L observed ones (L,), and one pass over the
    row blocks for the zeros, with the ones' terms added: the log-likelihood (``log_lik``)
    and the H step's sums (``sums``, each (K, N)) (:class:`SparseRowBlocks`)."""

    W: jax.Array
    H: jax.Array
    p_one: jax.Array
    log_lik: jax.Array
    sums: tuple[jax.Array, jax.Array]


@_pytree(["y_one", "y_zero", "mask", "n_obs", "real_row"], ["axis_name"])
@dataclasses.dataclass(frozen=True)
class Dense:
    """The observed data on whole (M, N) arrays (on one device, or this device's rows).

    Attributes
    ----------
    y_one, y_zero, mask : bool arrays of shape (M, N)
        ``O * Y``, ``O * (1 - Y)`` and ``O``.
    n_obs : array of shape (M,)
        ``O.sum(1)`` in the factors' float dtype.
    real_row : bool array of shape (M,) or None
        False for the rows added to pad M to a multiple of the device count (they
        have no observed entry); None without padding.
    axis_name : str or None
        Static. Inside ``shard_map`` over the rows, the mesh axis to ``psum`` row
        sums over; None on one device.
    """

    y_one: jax.Array
    y_zero: jax.Array
    mask: jax.Array
    n_obs: jax.Array
    real_row: jax.Array | None = None
    axis_name: str | None = None

    def evaluate(self, W, H) -> Predictions:
        return Predictions(W, H, *predict(W, H))

    def h_sums(self, state: Predictions):
        sums = _rows_sums(self.y_one, self.y_zero, state.W, state.p_one, state.p_zero)
        return row_total(self, sums)

    def w_statistic(self, state: Predictions):
        return _rows_S(self.y_one, self.y_zero, *state)

    def log_likelihood(self, state: Predictions):
        return masked_log_likelihood_sum(self.y_one, self.mask, state.p_one, state.p_zero)


@_pytree(["y_zero", "n_obs", "one_rows", "one_cols", "by_col"], [])
@dataclasses.dataclass(frozen=True)
class SparseOnes:
    """The observed data with the ones as coordinates: whole rows on one device, unpadded.

    Attributes
    ----------
    y_zero : bool array of shape (M, N)
        ``O * (1 - Y)``.
    n_obs : array of shape (M,)
        ``O.sum(1)`` in the factors' float dtype.
    one_rows, one_cols, by_col : int32 arrays of shape (L,)
        The row and column of each observed one (row-major order) and the
        permutation that sorts them by column.
    """

    y_zero: jax.Array
    n_obs: jax.Array
    one_rows: jax.Array
    one_cols: jax.Array
    by_col: jax.Array
    real_row = None  # never padded
    axis_name = None  # never sharded

    def evaluate(self, W, H) -> OnesPredictions:
        return OnesPredictions(W, H, _ones_at(self, W, H), W @ (1 - H))

    def h_sums(self, state: OnesPredictions):
        one = _ones_h_sum(self, state.W, state.p_one, state.H.shape[1])
        return one, state.W.T @ _inverse(self.y_zero, state.p_zero)

    def w_statistic(self, state: OnesPredictions):
        W, H = state.W, state.H
        return W * (_ones_w_sum(self, state) + _inverse(self.y_zero, state.p_zero) @ (1 - H).T)

    def log_likelihood(self, state: OnesPredictions):
        # over the observed zeros: both probabilities given are P(Y=0)
        zeros = masked_log_likelihood_sum(self.y_zero, self.y_zero, state.p_zero, state.p_zero)
        return zeros + _log_ones(state.p_one)


@_pytree(["y_one", "y_zero", "mask", "n_obs", "real_row"], ["block_rows", "axis_name"])
@dataclasses.dataclass(frozen=True)
class RowBlocks:
    """The observed data as :class:`Dense`'s, gone over in blocks of ``block_rows`` rows
    (``lax.scan``, ``lax.map``), so that the temporaries are (B, N).

    Attributes
    ----------
    y_one, y_zero, mask, n_obs, real_row, axis_name
        As :class:`Dense`'s (``real_row`` also False on the rows that pad M to a
        multiple of the block size).
    block_rows : int
        Static: B; the rows per device are a multiple of it.
    """

    y_one: jax.Array
    y_zero: jax.Array
    mask: jax.Array
    n_obs: jax.Array
    block_rows: int
    real_row: jax.Array | None = None
    axis_name: str | None = None

    def evaluate(self, W, H) -> BlockTotals:
        def add_block(totals, block):
            y_one, y_zero, mask, W_block = block
            p_one, p_zero = predict(W_block, H)
            one, zero = _rows_sums(y_one, y_zero, W_block, p_one, p_zero)
            log_lik = masked_log_likelihood_sum(y_one, mask, p_one, p_zero)
            return (totals[0] + log_lik, totals[1] + one, totals[2] + zero), None

        zeros = (jnp.zeros((), H.dtype), jnp.zeros_like(H), jnp.zeros_like(H))
        if self.axis_name is not None:  # the sums differ between devices until the psum
            zeros = jax.lax.pcast(zeros, self.axis_name, to="varying")
        blocks = _blocks(self.block_rows, self.y_one, self.y_zero, self.mask, W)
        (log_lik, one, zero), _ = jax.lax.scan(add_block, zeros, blocks)
        return BlockTotals(W, H, log_lik, row_total(self, (one, zero)))

    def h_sums(self, state: BlockTotals):
        return state.sums

    def w_statistic(self, state: BlockTotals):
        W, H = state.W, state.H

        def block_S(block):
            y_one, y_zero, W_block = block
            return _rows_S(y_one, y_zero, W_block, H, *predict(W_block, H))

        S = jax.lax.map(block_S, _blocks(self.block_rows, self.y_one, self.y_zero, W))
        return S.reshape(W.shape)

    def log_likelihood(self, state: BlockTotals):
        return state.log_lik


@_pytree(["y_zero", "n_obs", "one_rows", "one_cols", "by_col", "real_row"], ["block_rows"])
@dataclasses.dataclass(frozen=True)
class SparseRowBlocks:
    """The ones as :class:`SparseOnes`'s, the zeros gone over in blocks of ``block_rows``
    rows, so that a sweep's dense products are the zeros' alone and (B, N): on one device.

    Attributes
    ----------
    y_zero, n_obs, one_rows, one_cols, by_col
        As :class:`SparseOnes`'s (over the padded rows).
    block_rows : int
        Static: B; the rows are a multiple of it.
    real_row : bool array of shape (M,) or None
        False on the rows that pad M to a multiple of B; None without padding.
    """

    y_zero: jax.Array
    n_obs: jax.Array
    one_rows: jax.Array
    one_cols: jax.Array
    by_col: jax.Array
    block_rows: int
    real_row: jax.Array | None = None
    axis_name = None  # never sharded

    def evaluate(self, W, H) -> OnesBlockTotals:
        def add_zeros(totals, block):
            y_zero, W_block = block
            p_zero = W_block @ (1 - H)
            zero = W_block.T @ _inverse(y_zero, p_zero)
            log_lik = masked_log_likelihood_sum(y_zero, y_zero, p_zero, p_zero)
            return (totals[0] + log_lik, totals[1] + zero), None

        p_one = _ones_at(self, W, H)
        zeros = (jnp.zeros((), H.dtype), jnp.zeros_like(H))
        blocks = _blocks(self.block_rows, self.y_zero, W)
        (log_lik, zero), _ = jax.lax.scan(add_zeros, zeros, blocks)
        one = _ones_h_sum(self, W, p_one, H.shape[1])
        return OnesBlockTotals(W, H, p_one, log_lik + _log_ones(p_one), (one, zero))

    def h_sums(self, state: OnesBlockTotals):
        return state.sums

    def w_statistic(self, state: OnesBlockTotals):
        W, H = state.W, state.H

        def block_zeros(block):  # the zeros' part of S / W over a block of rows
            y_zero, W_block = block
            return _inverse(y_zero, W_block @ (1 - H)) @ (1 - H).T

        from_zeros = jax.lax.map(block_zeros, _blocks(self.block_rows, self.y_zero, W))
        return W * (_ones_w_sum(self, state) + from_zeros.reshape(W.shape))

    def log_likelihood(self, state: OnesBlockTotals):
        return state.log_lik


Problem = Dense | SparseOnes | RowBlocks | SparseRowBlocks
"""The observed data in one layout, as the MM updates use them."""
Evaluated = Predictions | OnesPredictions | BlockTotals | OnesBlockTotals
"""Factors with what the objective and the next H step need of them, computed once: the
type of :func:`state_at` in each layout."""


def predict(W, H) -> tuple[jax.Array, jax.Array]:
    """Return ``(W @ H, W @ (1 - H))``: P(Y=1) and P(Y=0), each of shape (M, N)."""
    return W @ H, W @ (1 - H)


def state_at(data: Problem, W, H) -> Evaluated:
    """The factors with their predictions, or one pass over the row blocks."""
    return data.evaluate(W, H)


def h_sums(data: Problem, state: Evaluated):
    """``(W.T @ (Y1 / WH), W.T @ (Y0 / W(1-H)))``, each (K, N), summed over all rows."""
    return data.h_sums(state)


def w_statistic(data: Problem, state: Evaluated):
    """``S = W * ((Y1 / WH) @ H.T + (Y0 / W(1-H)) @ (1 - H).T)``, shape (M, K)."""
    return data.w_statistic(state)


def log_likelihood(data: Problem, state: Evaluated):
    """Log-likelihood of the observed entries of this device's rows."""
    return data.log_likelihood(state)


def row_total(data: Problem, value):
    """Add up per-device sums over rows (a no-op on one device)."""
    if data.axis_name is None:
        return value
    return jax.lax.psum(value, data.axis_name)


def _inverse(indicator, p):
    """``indicator / p`` (0 where the indicator is False), with p kept above 0."""
    return jnp.where(indicator, 1 / jnp.maximum(p, jnp.finfo(p.dtype).tiny), 0.0)


def _rows_sums(y_one, y_zero, W_rows, p_one, p_zero):
    """``(W.T @ (Y1 / WH), W.T @ (Y0 / W(1-H)))`` over the given dense rows, each (K, N)."""
    return W_rows.T @ _inverse(y_one, p_one), W_rows.T @ _inverse(y_zero, p_zero)


def _rows_S(y_one, y_zero, W_rows, H, p_one, p_zero):
    """:func:`w_statistic` of the given dense rows, (rows, K)."""
    from_ones = _inverse(y_one, p_one) @ H.T
    return W_rows * (from_ones + _inverse(y_zero, p_zero) @ (1 - H).T)


def _blocks(B: int, *row_arrays):
    """Each (M, ...) array as (M / B, B, ...): the leading axis is scanned over."""
    return tuple(a.reshape(a.shape[0] // B, B, *a.shape[1:]) for a in row_arrays)


def _ones_at(data: SparseOnes | SparseRowBlocks, W, H):
    """``W @ H`` at the observed ones, (L,)."""
    return jnp.sum(W[data.one_rows] * H.T[data.one_cols], axis=1)


def _ones_h_sum(data: SparseOnes | SparseRowBlocks, W, p_one, N: int):
    """``W.T @ (Y1 / WH)`` (K, N) from the sparse ones, ``p_one`` = WH at them."""
    values = (W[data.one_rows] * _inverse(True, p_one)[:, None])[data.by_col]
    columns = data.one_cols[data.by_col]
    return jax.ops.segment_sum(values, columns, num_segments=N, indices_are_sorted=True).T


def _ones_w_sum(data: SparseOnes | SparseRowBlocks, state):
    """``(Y1 / WH) @ H.T`` (M, K) from the sparse ones (``state.p_one`` = WH at them)."""
    values = state.H.T[data.one_cols] * _inverse(True, state.p_one)[:, None]
    M = state.W.shape[0]
    return jax.ops.segment_sum(values, data.one_rows, num_segments=M, indices_are_sorted=True)


def _log_ones(p_one):
    """``sum(log WH)`` at the sparse ones (``p_one``), kept above 0."""
    return jnp.sum(jnp.log(jnp.maximum(p_one, jnp.finfo(p_one.dtype).tiny)))
