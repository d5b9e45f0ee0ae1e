"""Simulation-based calibration (bernmf.studies.reproduce.sbc): its quantities against plain
numpy and scipy, its thinning, its refusals, ``bernmf reproduce sbc`` end to end, and (slow) that
NUTS passes where the MAP's point mass fails."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from bernmf.cli.parser import main as cli
from bernmf.models import Prior
from bernmf.models.simulate import simulate
from bernmf.results.fit import Fit, Posterior, Record
from bernmf.studies.reproduce import sbc


def test_quantities_are_the_cells_loglik_and_sorted_column_sums_in_any_label_order():
    Y, W, H = simulate(0, 7, 5, 3)
    at = sbc.cells(7, 5)
    assert len(set(at)) == sbc.CELLS and len({m for m, _ in at}) == len({n for _, n in at}) == 5
    values = sbc.quantities(Y, W[None], H[None], at)[0]
    assert sbc.quantity_names(3, at)[5:] == ["loglik", "W_colsum_1", "W_colsum_2", "W_colsum_3"]
    np.testing.assert_allclose(values[:5], [(W @ H)[m, n] for m, n in at])
    np.testing.assert_allclose(values[5], stats.bernoulli.logpmf(Y, W @ H).sum())
    np.testing.assert_allclose(values[6:], sorted(W.sum(axis=0), reverse=True))
    order = [2, 0, 1]  # the same factorization, components relabelled
    np.testing.assert_allclose(sbc.quantities(Y, W[None, :, order], H[None, order], at)[0],
                               values)  # fmt: skip


def _fit(W, H, draws=None) -> Fit:
    posterior = Posterior({} if draws is None else draws, {})
    return Fit(engine="x", rank=W.shape[1], prior=None, W=W, H=H, stored_probs=W @ H,
               trace=np.zeros(1), converged=True, record=Record(0, {}),
               posterior=posterior)  # fmt: skip


def test_thinning_keeps_evenly_spaced_draws_ending_each_chain_and_a_point_is_repeated():
    _, W, H = simulate(0, 4, 3, 2)
    C, S = 2, 10
    labels = np.arange(C * S, dtype=float).reshape(C, S)  # draw (c, s) carries c S + s
    draws = {"W": np.broadcast_to(labels[..., None, None], (C, S, 4, 2)),
             "H": np.broadcast_to(labels[..., None, None], (C, S, 2, 3))}  # fmt: skip
    W_kept, H_kept, chains, kept = sbc.thinned(_fit(W, H, draws), 4)
    assert (chains, kept) == (2, 20)
    assert W_kept[:, 0, 0].tolist() == H_kept[:, 0, 0].tolist() == [4, 9, 14, 19]
    with pytest.raises(ValueError, match="multiple of the fit's 2 chain"):
        sbc.thinned(_fit(W, H, draws), 5)
    with pytest.raises(ValueError, match="at most their 20 kept"):
        sbc.thinned(_fit(W, H, draws), 22)
    W_point, H_point, chains, kept = sbc.thinned(_fit(W, H), 3)
    assert (W_point.shape, H_point.shape, chains, kept) == ((3, 4, 2), (3, 2, 3), 1, 0)
    assert (W_point == W).all() and (H_point == H).all()


@pytest.mark.parametrize(
    ("engine", "prior", "arguments", "error", "message"),
    [("em", Prior(0.1, 0.1, 1.0), {}, ValueError, "takes no prior"),
     ("mm", Prior(0.1, 0.1, 1.0), {}, ValueError, "mm"),
     ("logsvd", Prior.flat(), {}, ValueError, "natural parameters"),
     ("nuts", Prior.flat(), {"shape": (30, 20)}, ValueError, "shape"),
     ("nuts", Prior.flat(), {"at": [(30, 0)]}, ValueError, "inside the 30 x 20"),
     ("nuts", Prior.flat(), {"replicates": 0}, ValueError, "replicates"),
     ("nuts", Prior.flat(), {"options": {"steps": 5}}, TypeError, "does not take")],
)  # fmt: skip
def test_bad_settings_are_refused_before_any_fit(monkeypatch, engine, prior, arguments, error,
                                                 message):  # fmt: skip
    monkeypatch.setattr(sbc, "fit_engine", lambda *a, **k: pytest.fail("fitted"))
    with pytest.raises(error, match=message):
        sbc.simulate_ranks(engine, prior=prior, **arguments)


def test_reproduce_sbc_writes_ranks_summary_and_figure(tmp_path, capsys):
    """Two engines through the study's ``main``: mm and em only at the flat prior (said),
    every file with its columns, ranks in 0..draws, one p-value a quantity, adjusted for
    the 9 of its engine."""
    out = tmp_path / "sbc"
    code = sbc.main(["--quick", "--out", str(out), "--engines", "mm", "em",
                     "--replicates", "6", "--draws", "10"])  # fmt: skip
    assert code == 0
    said = capsys.readouterr().out
    assert "mm at beta0.1: not run" in said and "em at beta0.1: not run" in said
    ranks = pd.read_csv(out / "ranks.csv")
    assert list(ranks.columns[:5]) == ["engine", "quantity", "replicate", "rank", "draws"]
    assert list(ranks.columns) == sbc.COLUMNS
    assert ranks["rank"].between(0, 10).all() and (ranks["draws"] == 10).all()
    assert set(ranks["prior"]) == {"Beta(1, 1) Dirichlet(1)"}
    assert (ranks.groupby(["engine", "quantity"]).size() == 6).all()
    assert (ranks["kept"] == 0).all() and ranks["ess"].isna().all()  # point masses
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == 2 * 9
    assert {"pvalue", "pvalue_adjusted", "passes", "cpu_seconds"} <= set(summary.columns)
    np.testing.assert_allclose(summary["pvalue_adjusted"],
                               np.minimum(1, 9 * summary["pvalue"]))  # fmt: skip
    assert (out / "ecdf.png").stat().st_size > 0


def test_zero_replicates_are_refused_not_read_as_the_default(tmp_path):
    with pytest.raises(ValueError, match="replicates"):
        sbc.main(["--out", str(tmp_path / "sbc"), "--engines", "mm", "--replicates", "0"])
    assert not (tmp_path / "sbc").exists()


def test_the_command_runs_the_registered_study(tmp_path, monkeypatch):
    """``bernmf reproduce sbc`` hands its options to sbc.main."""
    seen = []
    monkeypatch.setattr(sbc, "main", lambda argv: seen.append(argv) or 0)
    assert cli(["reproduce", "sbc", "--quick", "--out", str(tmp_path / "s")]) == 0
    assert seen == [["--out", str(tmp_path / "s"), "--quick"]]


@pytest.mark.slow
def test_nuts_passes_and_the_map_fails_at_the_flat_prior():
    """30 replicates of 20 draws: no quantity of NUTS's is rejected (Bonferroni, 0.001), every
    one of the MAP's (a point mass) is."""
    options = {"num_chains": 2, "num_warmup": 300, "num_samples": 200}
    tables = [sbc.simulate_ranks("nuts", replicates=30, draws=20, options=options, progress=False),
              sbc.simulate_ranks("mm", replicates=30, draws=20, progress=False)]  # fmt: skip
    summary = sbc.summarize(pd.concat(tables, ignore_index=True))
    passes = summary.groupby("engine")["passes"]
    assert passes.all()["nuts"] and not passes.any()["mm"]
