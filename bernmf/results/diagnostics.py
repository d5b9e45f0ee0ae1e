"""A fit's posterior draws aligned and diagnosed: :func:`align_components` undoes label
switching chain by chain, :func:`diagnostics` gives R-hat and ESS of WH, W and H (the
arrays from :mod:`bernmf.posterior.draws`) as a table, and warns when they did not mix."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from bernmf import _warnings
from bernmf.posterior.convergence import CHUNK_VALUES
from bernmf.posterior.draws import RHAT_WARN, component_permutations, permute_draws, rhat_and_ess

if TYPE_CHECKING:
    import pandas as pd

    from bernmf.results.fit import Fit


def align_components(fit: Fit, reference=None) -> Fit:
    """Permute each chain's components to match a reference (undoes label switching).

    Parameters
    ----------
    fit : Fit
        With ``draws`` ``{"W": (C, S, M, K), "H": (C, S, K, N)}``.
    reference : array of shape (K, N), optional
        The H to match (for example ``fit.H`` or another fit's H). Default: the
        posterior mean of H in chain 0.

    Returns
    -------
    Fit
        A copy with the draws permuted chain by chain (W's columns and H's rows
        together, so every draw of ``W @ H`` is unchanged) and
        ``posterior.permutations`` of shape (C, K). Other fields are unchanged.
    """
    W_draws, H_draws = fit.posterior_draws()
    permutations = component_permutations(H_draws, reference)
    W_aligned, H_aligned = permute_draws(W_draws, H_draws, permutations)
    return dataclasses.replace(
        fit,
        posterior=dataclasses.replace(
            fit.posterior,
            draws={**fit.draws, "W": W_aligned, "H": H_aligned},
            permutations=permutations,
        ),
    )


@dataclass(frozen=True)
class Diagnostics:
    """Result of :func:`diagnostics`.

    Attributes
    ----------
    table : DataFrame
        One row per quantity (``"WH"``, ``"W"``, ``"H"``, the last two aligned):
        entries, R-hat max / 99th percentile / share <= 1.01, the number of
        entries with an ESS, bulk and tail ESS min / median over them, and median
        bulk ESS per second of the fit's run time (``timings["run"]``).
    rhat, ess_bulk, ess_tail : dict of str to ndarray
        Per-entry values, of shapes (M, N), (M, K) and (K, N); ESS is NaN for the
        entries it was not computed on.
    divergences : int
        Number of divergent transitions (0 when the engine reports none).
    seconds : float
        The fit's run time used for ESS per second.
    """

    table: pd.DataFrame
    rhat: dict
    ess_bulk: dict
    ess_tail: dict
    divergences: int
    seconds: float


def diagnostics(
    fit: Fit,
    *,
    warn: bool = True,
    ess_entries: int = 1000,
    seed: int = 0,
    max_block_values: int = CHUNK_VALUES,
    threads: int | None = None,
) -> Diagnostics:
    """R-hat and bulk/tail ESS of WH (identifiable) and of the aligned W and H.

    R-hat (rank-normalized split R-hat, :func:`rank_rhat`) is computed for every
    entry, WH a tile of rows x columns at a time (about ``max_block_values``
    numbers at once per thread, so its draws are never all in memory: small
    tiles stay in cache and reuse the memory of the last), tiles on ``threads``
    threads. ESS (bulk and tail, the numbers of ``arviz_stats.ess``) is computed
    for each quantity on at most ``ess_entries`` entries drawn at random (all of
    them when there are fewer); the per-entry ESS arrays are NaN elsewhere. R-hat
    needs at least 2 chains: with one (``svi``) it is NaN and only ESS is reported.
    The arrays come from :func:`rhat_and_ess`; this builds the table and the warning.

    Parameters
    ----------
    fit : Fit
        With posterior draws (any engine).
    warn : bool, default True
        Warn when R-hat(WH) > 1.01 for some entry or there are divergences.
    ess_entries : int, default 1000
        Entries per quantity whose ESS is computed.
    seed : int
        Seed of the choice of those entries.
    max_block_values : int
        Memory bound of the tiled computation of WH's R-hat (at least one entry
        of WH per tile, each tile about 4 arrays of its size).
    threads : int, optional
        Threads computing WH's R-hat. Default: the CPUs this process may use.

    Returns
    -------
    Diagnostics
    """
    aligned = align_components(fit)
    rhat, ess_bulk, ess_tail = rhat_and_ess(
        aligned.draws["W"], aligned.draws["H"], ess_entries=ess_entries, seed=seed,
        max_block_values=max_block_values, threads=threads,
    )  # fmt: skip
    diverging = fit.sample_stats.get("diverging")
    divergences = 0 if diverging is None else int(np.asarray(diverging).sum())
    seconds = float(fit.timings.get("run", np.nan))
    chains = np.shape(aligned.draws["W"])[0]
    table = _table(rhat, ess_bulk, ess_tail, chains, seconds)
    worst = table.loc["WH", "rhat_max"]
    if warn and (worst > RHAT_WARN or divergences):
        _warnings.warn(
            f"posterior of engine {fit.engine!r} may not have converged: max R-hat(WH) = "
            f"{worst:.3f} (share <= {RHAT_WARN}: {table.loc['WH', 'share_rhat_le_1.01']:.3f}), "
            f"{divergences} divergent transition(s)"
        )
    return Diagnostics(
        table=table,
        rhat=rhat,
        ess_bulk=ess_bulk,
        ess_tail=ess_tail,
        divergences=divergences,
        seconds=seconds,
    )


def _table(rhat: dict, ess_bulk: dict, ess_tail: dict, chains: int, seconds: float):
    """:attr:`Diagnostics.table` of the per-entry arrays: one row per quantity (R-hat NaN
    with one chain)."""
    rows = []
    for quantity in ("WH", "W", "H"):
        r = rhat[quantity].ravel()
        bulk, tail = ess_bulk[quantity].ravel(), ess_tail[quantity].ravel()
        several = chains > 1
        rows.append(
            {
                "quantity": quantity,
                "entries": r.size,
                "rhat_max": np.nanmax(r) if several else np.nan,
                "rhat_q99": np.nanquantile(r, 0.99) if several else np.nan,
                "share_rhat_le_1.01": float(np.mean(r <= RHAT_WARN)) if several else np.nan,
                "ess_entries": int(np.isfinite(bulk).sum()),
                "ess_bulk_min": np.nanmin(bulk),
                "ess_bulk_median": np.nanmedian(bulk),
                "ess_tail_min": np.nanmin(tail),
                "ess_tail_median": np.nanmedian(tail),
                "ess_bulk_per_second": np.nanmedian(bulk) / seconds,
            }
        )
    import pandas as pd  # on first use: it loads in 0.5 s

    return pd.DataFrame(rows).set_index("quantity")
