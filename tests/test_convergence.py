"""Fast R-hat / ESS (bernmf.posterior.convergence) vs arviz_stats and the former implementation.

``reference_*`` below is the slow implementation that ``bernmf.diagnostics`` had before
(a stable argsort per block of entries, arviz_stats' ``ess`` entry by entry): kept here,
not in the package, as the independent reference (``benchmarks/diagnostics_speed.py``
times it too).
"""

from __future__ import annotations

import warnings

import arviz_stats
import numpy as np
import pytest
from scipy.special import ndtri

import bernmf
from bernmf.posterior import convergence
from bernmf.posterior.convergence import Workspace, ess_rows, rank_rhat_rows, score_sums
from bernmf.posterior.draws import rank_rhat
from bernmf.results.fit import Posterior, Record


def _reference_average_ranks(rows: np.ndarray) -> np.ndarray:
    """Ranks (1-based, ties averaged) within each row of a 2-D array."""
    count = rows.shape[1]
    order = np.argsort(rows, axis=1, kind="stable")
    ordered = np.take_along_axis(rows, order, axis=1)
    position = np.broadcast_to(np.arange(count), rows.shape)
    differs = ordered[:, 1:] != ordered[:, :-1]
    first = np.concatenate([np.ones((rows.shape[0], 1), bool), differs], axis=1)
    last = np.concatenate([differs, np.ones((rows.shape[0], 1), bool)], axis=1)
    group_start = np.maximum.accumulate(np.where(first, position, 0), axis=1)
    group_end = np.minimum.accumulate(np.where(last, position, count - 1)[:, ::-1], axis=1)[:, ::-1]
    ranks = np.empty(rows.shape)
    np.put_along_axis(ranks, order, (group_start + group_end) / 2 + 1, axis=1)
    return ranks


def _reference_z_scale(x: np.ndarray) -> np.ndarray:
    chains, draws = x.shape[:2]
    size = chains * draws
    ranks = _reference_average_ranks(x.reshape(size, -1).T).T
    return ndtri((ranks - 0.375) / (size + 0.25)).reshape(x.shape)


def _reference_basic_rhat(x: np.ndarray) -> np.ndarray:
    draws = x.shape[1]
    within = x.var(axis=1, ddof=1).mean(axis=0)
    between = draws * x.mean(axis=1).var(axis=0, ddof=1)
    return np.sqrt((between / within + draws - 1) / draws)


def reference_rank_rhat(x) -> np.ndarray:
    """R-hat of (C, S, ...) draws, shape x.shape[2:]: the former ``rank_rhat``."""
    x = np.asarray(x, float)
    if x.shape[0] < 2 or x.shape[1] < 4:
        return np.full(x.shape[2:], np.nan)
    half = x.shape[1] // 2
    split = np.concatenate([x[:, :half], x[:, x.shape[1] - half :]], axis=0)
    folded = np.abs(split - np.median(split.reshape(-1, *split.shape[2:]), axis=0))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.maximum(
            _reference_basic_rhat(_reference_z_scale(split)),
            _reference_basic_rhat(_reference_z_scale(folded)),
        )


def reference_ess(x: np.ndarray, method: str) -> np.ndarray:
    """arviz_stats' ESS of (C, S, entries) draws, entry by entry."""
    options = {"prob": 0.05} if method == "tail" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.asarray(arviz_stats.ess(x, chain_axis=0, draw_axis=1, method=method, **options))


def reference_wh_rhat(W_draws, H_draws, rows: slice) -> np.ndarray:
    """R-hat of the rows ``rows`` of W @ H, formed with ``np.einsum`` as before."""
    return reference_rank_rhat(np.einsum("csmk,cskn->csmn", W_draws[:, :, rows], H_draws))


def reference_ess_arrays(W_draws, H_draws, *, ess_entries: int = 1000, seed: int = 0):
    """The former ESS arrays (bulk, tail) of the aligned draws, dicts like ``Diagnostics``."""
    C, S, M = W_draws.shape[:3]
    N = H_draws.shape[-1]
    rng = np.random.default_rng(seed)
    bulk, tail = {}, {}
    for quantity, shape in (("WH", (M, N)), ("W", W_draws.shape[2:]), ("H", H_draws.shape[2:])):
        size = int(np.prod(shape))
        chosen = np.sort(rng.choice(size, min(size, ess_entries), replace=False))
        if quantity == "WH":
            rows, columns = np.unravel_index(chosen, shape)
            picked = np.einsum("csek,cske->cse", W_draws[:, :, rows], H_draws[..., columns])
        else:
            draws = W_draws if quantity == "W" else H_draws
            picked = draws.reshape(C, S, size)[..., chosen]
        for store, method in ((bulk, "bulk"), (tail, "tail")):
            values = np.full(size, np.nan)
            values[chosen] = reference_ess(picked, method)
            store[quantity] = values.reshape(shape)
    return bulk, tail


def reference_diagnostics(fit, *, ess_entries: int = 1000, seed: int = 0):
    """The former R-hat and ESS arrays of :func:`bernmf.diagnostics`: (rhat, bulk, tail)."""
    aligned = bernmf.align_components(fit)
    W_draws, H_draws = (np.asarray(aligned.draws[k]) for k in ("W", "H"))
    rhat = {
        "WH": reference_wh_rhat(W_draws, H_draws, slice(0, W_draws.shape[2])),
        "W": reference_rank_rhat(W_draws),
        "H": reference_rank_rhat(H_draws),
    }
    return rhat, *reference_ess_arrays(W_draws, H_draws, ess_entries=ess_entries, seed=seed)


def autocorrelated(rng, shape, rho):
    """AR(1) draws with lag-1 correlation rho along axis 1 of shape (C, S, ...)."""
    x = np.empty(shape)
    x[:, 0] = rng.standard_normal((shape[0], *shape[2:]))
    noise = np.sqrt(1 - rho**2) * rng.standard_normal(shape)
    for s in range(1, shape[1]):
        x[:, s] = rho * x[:, s - 1] + noise[:, s]
    return x


def synthetic_factor_draws(rng, C=2, S=200, M=7, K=3, N=6, rho=0.7):
    """Autocorrelated draws of W (rows on the simplex) and H (in (0, 1)), as a sampler's."""
    W = np.exp(rng.normal(0, 1.5, (M, K)) + 0.3 * autocorrelated(rng, (C, S, M, K), rho))
    W /= W.sum(axis=-1, keepdims=True)
    H = 1 / (1 + np.exp(-(rng.normal(0, 2, (K, N)) + 0.3 * autocorrelated(rng, (C, S, K, N), rho))))
    return W, H


def _draw_cases():
    rng = np.random.default_rng(0)
    ties = rng.random((2, 60, 12))
    ties[:, 10:20] = ties[:, 9:10]  # a sampler that stays put
    ties[:, :, 0] = 0.3  # a constant entry
    ties[0, :, 1] = np.round(ties[0, :, 1], 1)  # many ties
    near = rng.random((2, 60, 12))
    near[1, 5] = near[0, 7] * (1 + 1e-15)  # a few ulps apart: the same sort key
    near[1, 6] = np.nextafter(near[0, 8], 2)
    near[1, 7, :6] = near[0, 9, :6]  # an exact tie beside them
    signed = rng.standard_normal((3, 41, 10))
    signed[0, :5] = 0.0
    signed[1, :5] = -0.0  # -0.0 and 0.0 tie
    return {
        "iid": rng.random((3, 101, 20)),
        "autocorrelated": autocorrelated(rng, (2, 200, 20), 0.95),
        "shifted chains": autocorrelated(rng, (2, 80, 20), 0.5) + np.array([0, 1.0])[:, None, None],
        "ties": ties,
        "near ties": near,
        "signed, odd draws": signed,
        "four draws": rng.random((2, 4, 5)),
    }


CASES = _draw_cases()


@pytest.mark.parametrize("name", CASES)
def test_rank_rhat_is_the_former_implementation_and_arviz(name):
    x = CASES[name]
    expected = reference_rank_rhat(x)
    np.testing.assert_allclose(rank_rhat(x), expected, rtol=1e-12, atol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # arviz on the constant entry
        np.testing.assert_allclose(
            rank_rhat(x), arviz_stats.rhat(x, chain_axis=0, draw_axis=1), rtol=1e-12, atol=0
        )


def _grid_draws(rng, C, S, entries, step):
    """Draws on a grid of ``step``: ties in the draws and, around the median, in |x - median|."""
    return np.round(autocorrelated(rng, (C, S, entries), 0.5) / step) * step


def _tie_cases():
    rng = np.random.default_rng(11)
    repeated = rng.random((2, 120, 30))
    repeated[:, 31] = repeated[:, 30]  # a sampler that stays put: a tie in every entry
    repeated[1, 70:72] = repeated[1, 69]
    stuck = rng.random((2, 200, 30))  # 20 repeated draws per chain, a few in a row
    for chain, draws in enumerate([[5, 6, 7, 50, 99, 100, 101, 150], [1, 2, 60, 61, 62, 63, 199]]):
        for s in draws + list(rng.choice(np.arange(8, 190), 13, replace=False)):
            stuck[chain, s] = stuck[chain, s - 1]  # 100: the first of a split chain
    stuck[0, 120, :10] = stuck[0, 5, :10]  # a tie with a group of repeated draws
    stuck[0, 20, 10:20] = np.nextafter(stuck[0, 5, 10:20], 2)  # a near tie in its split chain
    crowded = _grid_draws(rng, 2, 100, 20, 2.0**-6)  # ties everywhere: ranked the exact way
    crowded[:, :, :5] = rng.random((2, 100, 5))
    edge = rng.random((2, 60, 16))
    edge[:, :, 0] = -1.5  # constant
    edge[1, 7, 1] = np.nan
    edge[0, 3, 2] = np.inf
    edge[:, :, 3] = 1e-300 * rng.random((2, 60))  # range 1e-300: the bucket scale overflows
    edge[:, :, 4] = np.nextafter(0.5, 1) * (rng.random((2, 60)) < 0.5) + 0.5  # two values
    edge[:, :, 5] = 6e307 * rng.random((2, 60)) - 3e307  # a range of 6e307: no overflow
    return {
        "grid, 2 chains": _grid_draws(rng, 2, 101, 40, 2.0**-14),
        "grid, 3 chains, negative": _grid_draws(rng, 3, 64, 40, 2.0**-13) - 5.0,
        "grid, 4 chains": _grid_draws(rng, 4, 30, 40, 2.0**-12),
        "repeated draws": repeated,
        "stuck sampler": stuck,
        "near ties": CASES["near ties"],
        "crowded": crowded,
        "edge rows": edge,
        "258 split chains": rng.random((129, 4, 3)),
    }


TIE_CASES = _tie_cases()


@pytest.mark.parametrize("name", TIE_CASES)
def test_ties_in_shared_buckets_are_ranked_exactly(name, monkeypatch):
    """Rows of ties and near ties, mostly without the exact fallback: the former R-hat.

    On the grids, draws tie and so do |x - median| around the median (the middle
    pair exactly): the runs of shared buckets are ranked again on the full values.
    """
    x = TIE_CASES[name]
    fallback = []
    exact = convergence._exact_rank_rhat
    monkeypatch.setattr(
        convergence,
        "_exact_rank_rhat",
        lambda split, work: fallback.append(len(split)) or exact(split, work),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = reference_rank_rhat(x)
    expected[np.isnan(x).any(axis=(0, 1))] = np.nan  # as arviz (the former gave a number)
    np.testing.assert_allclose(rank_rhat(x), expected, rtol=1e-12, atol=0)
    entries = x.shape[2]
    if name == "crowded":
        assert sum(fallback) >= 15
    elif name == "258 split chains":
        assert fallback == [entries]
    elif name == "edge rows":
        assert sum(fallback) == 5, fallback  # constant, NaN, inf, 1e-300, two values
    else:
        assert sum(fallback) <= entries // 4, fallback


def test_split_chain_sums_of_scores_trust_only_a_true_smallest_pair():
    """Sums of scores by split chain against ranks; a wrong ``smallest`` pair is not used."""
    rng = np.random.default_rng(5)
    chains, half = 4, 50
    values = rng.random((6, chains * half)) + 0.5
    values[:, 3], values[:, 120] = 1e-12, 2e-12  # the two smallest share the first bucket
    values[1, 120] = 1e-12  # a tie
    values[2, [40, 41, 42]] = values[2, 60]  # a run elsewhere
    z = _reference_z_scale(values.T[None])[0].T  # normal scores of the ranks, row by row
    expected = z.reshape(6, chains, half).sum(axis=2), np.einsum("ij,ij->i", z, z)
    work = Workspace(6, chains * half)
    bits, skip = 2, np.zeros(6, bool)
    scale = (2.0**30 - 1) / values.max(axis=1)  # onto buckets 0 .. 2**30 - 1
    keys = score_sums._bucket_keys(values, None, scale, bits, half, work)
    for smallest in (None, [3, 120], [3, 17]):  # [3, 17]: not the smallest pair
        pair = None if smallest is None else np.tile(smallest, (6, 1))
        sums, squares = score_sums._score_sums(values, keys, bits, chains, skip, work, pair)[:2]
        np.testing.assert_allclose(sums, expected[0], rtol=0, atol=1e-12)
        np.testing.assert_allclose(squares, expected[1], rtol=1e-14)


def test_rank_rhat_does_not_depend_on_the_chunking():
    x = np.moveaxis(CASES["ties"], 2, 0)
    whole = rank_rhat_rows(x)
    np.testing.assert_array_equal(rank_rhat_rows(x, chunk_values=250), whole)
    assert np.isnan(rank_rhat_rows(x[:, :1])).all()  # one chain


def test_a_workspace_reused_across_draws_keeps_no_state():
    """Chunks of a shared workspace, smaller last chunks included, give the fresh results."""
    work = Workspace(3, 2 * 2 * 30)  # 3 entries of 2 chains x 60 draws per chunk
    for name in ("ties", "near ties", "iid", "ties"):
        x = np.moveaxis(CASES[name][:2, :60], 2, 0)  # 12 or 20 entries: a short last chunk
        np.testing.assert_array_equal(rank_rhat_rows(x, workspace=work), rank_rhat_rows(x))
    with pytest.raises(ValueError, match="workspace is for rows of 120 values, not 400"):
        rank_rhat_rows(np.moveaxis(CASES["autocorrelated"], 2, 0), workspace=work)


@pytest.mark.parametrize("method", ["bulk", "tail"])
@pytest.mark.parametrize("name", CASES)
def test_ess_is_arviz_ess(name, method):
    x = CASES[name]
    expected = reference_ess(x, method)
    actual = ess_rows(np.moveaxis(x, 2, 0), method)
    np.testing.assert_allclose(actual, expected, rtol=1e-10, atol=0)
    one_chain = ess_rows(np.moveaxis(x[:1], 2, 0), method)
    np.testing.assert_allclose(one_chain, reference_ess(x[:1], method), rtol=1e-10, atol=0)


def test_entries_with_a_nan_draw_get_nan_as_in_arviz():
    x = np.random.default_rng(7).random((2, 50, 4))
    x[0, 3, 1] = np.nan
    x[:, :, 2] = np.nan
    rows = np.moveaxis(x, 2, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = arviz_stats.rhat(x, chain_axis=0, draw_axis=1)
    np.testing.assert_array_equal(np.isnan(expected), [False, True, True, False])
    np.testing.assert_allclose(rank_rhat_rows(rows), expected, rtol=1e-12)
    for method in ("bulk", "tail"):
        np.testing.assert_allclose(ess_rows(rows, method), reference_ess(x, method), rtol=1e-10)


def test_ess_follows_the_autocorrelation():
    """Independent check: AR(1) with rho = 0.9 has ESS about n (1 - rho) / (1 + rho)."""
    x = autocorrelated(np.random.default_rng(3), (4, 2000, 30), 0.9)
    ess = ess_rows(np.moveaxis(x, 2, 0), "bulk")
    assert np.median(ess) == pytest.approx(8000 * 0.1 / 1.9, rel=0.15)
    with pytest.raises(ValueError, match="method"):
        ess_rows(np.moveaxis(x, 2, 0), "mean")


def _fit_with_draws(W, H):
    return bernmf.Fit(
        engine="fake",
        rank=W.shape[-1],
        prior=None,
        W=W.mean(axis=(0, 1)),
        H=H.mean(axis=(0, 1)),
        stored_probs=np.zeros((W.shape[2], H.shape[-1])),
        trace=np.zeros(W.shape[1] + 1),
        converged=True,
        record=Record(0, {"run": 1.0}),
        posterior=Posterior({"W": W, "H": H}),
    )


@pytest.mark.parametrize(("block", "threads"), [(1, 2), (5 * 2 * 201, 2), (10**12, 1)])
def test_diagnostics_are_the_former_ones(block, threads):
    """Every R-hat and the ESS of the same chosen entries, to 1e-6 (in fact to rounding).

    WH by tiles of 1 x 1, 2 x 2 (a short last strip and column) and 7 x 6 entries.
    """
    W, H = synthetic_factor_draws(np.random.default_rng(4), S=201)  # odd: the split drops one
    W[:, 50:53] = W[:, 49:50]  # repeated draws
    H[:, 50:53] = H[:, 49:50]
    fit = _fit_with_draws(W, H)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        new = bernmf.diagnostics(fit, ess_entries=20, max_block_values=block, threads=threads)
    rhat, bulk, tail = reference_diagnostics(fit, ess_entries=20)
    for quantity in ("WH", "W", "H"):
        np.testing.assert_allclose(new.rhat[quantity], rhat[quantity], rtol=1e-6, atol=0)
        np.testing.assert_allclose(new.ess_bulk[quantity], bulk[quantity], rtol=1e-6, atol=0)
        np.testing.assert_allclose(new.ess_tail[quantity], tail[quantity], rtol=1e-6, atol=0)
    assert np.isfinite(new.ess_bulk["WH"]).sum() == 20
    with pytest.raises(ValueError, match="threads"):
        bernmf.diagnostics(fit, threads=0)


def test_the_kernel_over_arrays_gives_the_arrays_of_diagnostics():
    """rhat_and_ess takes the aligned draws, no Fit; diagnostics adds the table around it."""
    from bernmf.posterior.draws import rhat_and_ess

    W, H = synthetic_factor_draws(np.random.default_rng(5), S=60)
    fit = _fit_with_draws(W, H)
    aligned = bernmf.align_components(fit)
    arrays = rhat_and_ess(aligned.draws["W"], aligned.draws["H"], ess_entries=15, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        layer = bernmf.diagnostics(fit, ess_entries=15, seed=2, threads=1)
    for got, want in zip(arrays, (layer.rhat, layer.ess_bulk, layer.ess_tail), strict=True):
        for quantity in ("WH", "W", "H"):
            np.testing.assert_array_equal(got[quantity], want[quantity])
    assert layer.table.loc["WH", "rhat_max"] == np.nanmax(arrays[0]["WH"])
    with pytest.raises(ValueError, match="threads must be at least 1"):
        rhat_and_ess(W, H, threads=0)
