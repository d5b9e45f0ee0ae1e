"""bernmf.NBMF: scikit-learn's own checks, the fold-in, honest scoring, pipelines and grids."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("sklearn")

import sklearn
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import check_estimator

import bernmf
from bernmf.data.observed import as_observed
from bernmf.estimator import EXPECTED_FAILED_CHECKS, NBMF
from bernmf.inference.fold_in import fold_in


@pytest.mark.slow
def test_passes_scikit_learns_check_estimator():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the checks' own data leave rows empty etc.
        results = check_estimator(
            NBMF(binarize=0.0), expected_failed_checks=EXPECTED_FAILED_CHECKS, on_skip=None
        )
    names = {r["check_name"] for r in results}
    assert {"check_fit_idempotent", "check_transformer_general", "check_n_features_in"} <= names


def test_fold_in_satisfies_the_optimality_conditions_on_the_simplex():
    """KKT, written from the objective: grad_k = n_obs where w_k > 0, <= n_obs elsewhere."""
    rng = np.random.default_rng(0)
    M, N, K = 6, 40, 3
    H = rng.uniform(0.05, 0.95, (K, N))
    Y = (rng.random((M, N)) < 0.5).astype(float)
    mask = rng.random((M, N)) < 0.7
    W = fold_in(as_observed(Y, mask), H, max_iter=50_000, tol=0.0).W
    default = fold_in(as_observed(Y, mask), H).W  # MM is slow near a face of the simplex
    np.testing.assert_allclose(default, W, atol=0.02)
    P = W @ H
    gradient = (mask * (Y / P)) @ H.T + (mask * ((1 - Y) / (1 - P))) @ (1 - H).T
    n_obs = mask.sum(axis=1, keepdims=True)
    assert np.allclose(W.sum(axis=1), 1) and (W >= 0).all()
    active = W > 1e-3
    np.testing.assert_allclose(gradient[active], np.broadcast_to(n_obs, W.shape)[active], rtol=1e-5)
    assert (gradient <= n_obs * (1 + 1e-5)).all()


def test_fold_in_recovers_known_weights_and_ignores_unobserved_entries():
    Y, W_true, H_true = bernmf.simulate(1, 8, 3000, 3, bernmf.Prior(0.3, 0.3))
    mask = np.random.default_rng(1).random(Y.shape) < 0.8
    W = fold_in(as_observed(Y, mask), H_true).W
    assert np.abs(W - W_true).max() < 0.08
    changed = np.where(mask, Y, 1 - Y)  # flip every unobserved entry
    np.testing.assert_array_equal(fold_in(as_observed(changed, mask), H_true).W, W)


def test_transform_uses_only_each_rows_own_observed_entries():
    Y, _, _ = bernmf.simulate(2, 60, 30, 3, bernmf.Prior(0.5, 0.5))
    model = NBMF(3, alpha=1.2, beta=1.2, random_state=0).fit(Y)
    mask = np.random.default_rng(2).random(Y.shape) < 0.6
    rows = model.transform(Y[:10], mask=mask[:10])
    changed = np.where(mask[:10], Y[:10], np.nan)
    np.testing.assert_array_equal(model.transform(changed), rows)
    one_by_one = np.vstack([model.transform(changed[i : i + 1]) for i in range(10)])
    np.testing.assert_allclose(one_by_one, rows, atol=1e-10)
    np.testing.assert_allclose(model.probabilities(changed), rows @ model.components_)


def test_score_never_uses_an_entry_to_fit_its_own_row():
    """On coin flips nothing beats log(1/2) out of sample; fitting on the scored entries does.
    (At the flat prior, which lets H learn the coin flips too: a smoothing prior's H, fitted
    on the same entries, predicts them a little.)"""
    Y = (np.random.default_rng(3).random((40, 24)) < 0.5).astype(float)
    model = NBMF(8, alpha=1.0, beta=1.0, gamma=1.0, random_state=0).fit(Y)
    P = model.probabilities(Y)  # rows folded in on the very entries scored below
    in_sample = np.mean(np.log(np.where(Y == 1, P, 1 - P)))
    assert in_sample > np.log(0.5) + 0.02
    assert model.score(Y) < np.log(0.5)


def test_fitted_attributes_labels_and_engine_options():
    Y, _, _ = bernmf.simulate(4, 30, 12, 2)
    frame = pd.DataFrame(Y, columns=[f"c{j}" for j in range(12)])
    model = NBMF(2, alpha=1.5, max_iter=30, tol=0.0, random_state=1)
    model.set_params(engine_options={"dtype": "float32"})
    W = model.fit_transform(frame)
    assert W.shape == (30, 2) and model.components_.shape == (2, 12)
    assert model.n_iter_ == 30 and model.loss_curve_.shape == (31,)
    assert list(model.feature_names_in_) == list(frame.columns)
    assert list(model.result_.frames.H.columns) == list(frame.columns)
    assert model.get_feature_names_out().tolist() == ["nbmf0", "nbmf1"]
    reference = bernmf.fit(
        Y, "mm", 2, prior=bernmf.Prior(1.5), seed=1, max_iter=30, tol=0.0, dtype="float32"
    )
    np.testing.assert_array_equal(model.components_, reference.H)


def test_bad_input_and_settings_give_clear_errors():
    Y, _, _ = bernmf.simulate(5, 10, 6, 2)
    with pytest.raises(ValueError, match="only 0, 1 or NaN"):
        NBMF().fit(Y * 0.5)
    assert NBMF(binarize=0.2).fit(Y * 0.5).n_features_in_ == 6
    with pytest.raises(ValueError, match="infinity"):
        NBMF().fit(np.where(Y == 1, np.inf, Y))  # NaN means missing, inf is an error
    with pytest.raises(ValueError, match="binarize must be None or a number"):
        NBMF(binarize="yes").fit(Y)
    with pytest.raises(ValueError, match="takes no prior"):
        NBMF(engine="em", alpha=2.0).fit(Y)
    with pytest.raises(ValueError, match="does not give probabilities"):
        NBMF(engine="logsvd").fit(Y)
    with pytest.raises(ValueError, match="unknown engine"):
        NBMF(engine="nope").fit(Y)


@pytest.mark.slow
def test_pipeline_and_grid_search_with_entrywise_masks():
    Y, _, _ = bernmf.simulate(6, 80, 40, 3, bernmf.Prior(0.3, 0.3, 0.2))
    mask = np.random.default_rng(6).random(Y.shape) < 0.8
    with sklearn.config_context(enable_metadata_routing=True):
        model = NBMF(alpha=1.5, beta=1.5, random_state=0).set_fit_request(mask=True)
        model = model.set_score_request(mask=True)
        search = GridSearchCV(model, {"n_components": [1, 3]}, cv=KFold(2))
        search.fit(Y, mask=mask)
    assert search.best_params_ == {"n_components": 3}
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    pipeline = make_pipeline(NBMF(3, random_state=0, binarize=0.5))
    assert pipeline.fit_transform(Y).shape == (80, 3)


@pytest.mark.slow
def test_each_engine_fits_at_its_default_prior_unless_one_is_given():
    # issue 23: NBMF(engine="gibbs") fitted at Prior(1, 1, 1), not gibbs' gamma = 1/K
    Y, _, _ = bernmf.simulate(6, 20, 10, 2)
    options = {"num_warmup": 5, "num_samples": 5, "progress": False}
    model = NBMF(2, engine="gibbs", random_state=0, engine_options=options).fit(Y)
    np.testing.assert_allclose(model.result_.prior.gamma, [0.5, 0.5])
    assert model.transform(Y).shape == (20, 2)
    model = NBMF(2, engine="gibbs", gamma=2.0, random_state=0, engine_options=options).fit(Y)
    np.testing.assert_allclose(model.result_.prior.gamma, [2.0, 2.0])
    model = NBMF(2, alpha=1.5, random_state=0).fit(Y)  # mm: beta and gamma its defaults
    np.testing.assert_allclose(model.result_.prior.alpha, [1.5, 1.5])
    np.testing.assert_allclose(model.result_.prior[1:], [[1.2, 1.2]] * 2)
