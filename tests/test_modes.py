"""bernmf.count_modes: distinct modes among the members of a multi-start fit; chain_modes:
among a sampler's chains, apart by more than their Monte Carlo error."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import bernmf
from bernmf.posterior.modes import MC_TOL, chain_distances, chain_modes, count_modes, h_distances

K, N = 3, 12


def _truth(seed):
    return np.random.default_rng(seed).uniform(0.05, 0.95, (K, N))


def _member(H, permutation, seed, noise=1e-3):
    """H with its components permuted and a little noise: another seed's estimate of it."""
    jitter = noise * np.random.default_rng(seed).standard_normal(H.shape)
    return np.clip(H[permutation] + jitter, 0, 1)


def test_members_that_are_permutations_of_each_other_are_one_mode():
    H = _truth(0)
    members = np.stack([_member(H, p, s) for s, p in enumerate([[0, 1, 2], [2, 0, 1], [1, 2, 0]])])
    modes = bernmf.count_modes(members, [1000.0, 1000.01, 1000.02], n_observed=500)
    assert modes.count == 1 and not modes.disagree
    np.testing.assert_array_equal(modes.labels, [0, 0, 0])
    assert modes.distance.max() < 0.01  # aligned: only the noise is left
    np.testing.assert_allclose(modes.distance, modes.distance.T)
    assert modes.table.loc[0, "members"] == [0, 1, 2]
    assert modes.table.loc[0, "spread"] == pytest.approx(0.02)
    unaligned = np.sqrt(np.mean((members[0] - members[1]) ** 2))
    assert unaligned > 0.1  # without matching the components they would look different


def test_two_different_truths_are_two_modes():
    a, b = _truth(1), _truth(2)
    members = np.stack(
        [_member(b, [1, 0, 2], 0), _member(a, [0, 1, 2], 1), _member(a, [2, 1, 0], 2)]
    )
    objectives = [1010.0, 1000.0, 1000.05]
    with pytest.warns(UserWarning, match="2 distinct modes"):
        modes = count_modes(members, objectives, n_observed=500, warn=True)
    assert modes.count == 2 and modes.disagree
    np.testing.assert_array_equal(modes.labels, [1, 0, 0])  # mode 0: the best objective
    np.testing.assert_allclose(modes.objectives, [1000.0, 1010.0])
    assert modes.gap_per_entry == pytest.approx(10 / 500)
    assert list(modes.table["size"]) == [2, 1]
    assert modes.table.loc[1, "members"] == [0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same gap over many entries is small: no warning
        quiet = count_modes(members, objectives, n_observed=10**6, warn=True)
    assert quiet.count == 2 and not quiet.disagree


def test_equal_objectives_but_different_h_are_two_modes():
    members = np.stack([_truth(3), _truth(4)])
    modes = count_modes(members, [500.0, 500.0], n_observed=100)
    assert modes.count == 2 and not modes.disagree  # no gap: they just differ
    np.testing.assert_array_equal(modes.labels, [0, 1])


def test_same_h_but_distant_objectives_are_two_modes():
    H = _truth(5)
    modes = count_modes(np.stack([H, H]), [500.0, 501.0], n_observed=100)
    assert modes.count == 2


def test_h_distances_is_the_rms_of_matched_components():
    H = _truth(6)
    shifted = H[[2, 0, 1]] + 0.1
    distance = h_distances(np.stack([H, shifted]))
    np.testing.assert_allclose(distance, [[0, 0.1], [0.1, 0]], atol=1e-12)


@pytest.mark.parametrize(
    ("H", "objectives", "n_observed", "match"),
    [
        (np.zeros((2, K)), [1.0, 2.0], 10, "shape"),
        (np.zeros((2, K, N)), [1.0], 10, "one value per member"),
        (np.zeros((2, K, N)), [1.0, np.nan], 10, "finite"),
        (np.zeros((2, K, N)), [1.0, 2.0], 0, "n_observed"),
    ],
)
def test_bad_input_is_named(H, objectives, n_observed, match):
    with pytest.raises(ValueError, match=match):
        count_modes(H, objectives, n_observed)


def _chains(draws, means, entries=500, seed=0):
    """K = 1, so that WH is H: 4 chains of ``draws`` iid normal draws per entry (sd 0.05),
    chain c about 0.5 + ``means[c]`` sds."""
    rng = np.random.default_rng(seed)
    shifted = rng.standard_normal((len(means), draws, 1, entries)) + np.c_[means][:, :, None, None]
    return np.ones((len(means), draws, 1, 1)), 0.5 + 0.05 * shifted


@pytest.mark.parametrize("draws", [30, 400])
def test_chains_of_one_distribution_are_their_monte_carlo_error_apart_at_any_length(draws):
    """In standard errors of the difference of means, iid chains are about 2.6 apart (a
    normal's 99th percentile) at 30 draws as at 400, while in posterior sds they are 0.7
    and 0.2 apart: a tolerance in sds fits one length only."""
    W_draws, H_draws = _chains(draws, [0, 0, 0, 0], seed=draws)
    apart = chain_distances(W_draws, H_draws)[np.triu_indices(4, 1)]
    assert 2.0 < apart.min() and apart.max() < 3.5 < MC_TOL
    np.testing.assert_array_equal(chain_modes(W_draws, H_draws), [0, 0, 0, 0])


@pytest.mark.parametrize(("draws", "modes"), [(400, [0, 0, 1, 1]), (20, [0, 0, 0, 0])])
def test_chains_one_sd_apart_are_two_modes_once_their_error_is_smaller(draws, modes):
    """2 + 2 chains whose means are one posterior sd apart: 14 standard errors at 400 draws
    (two modes), about 3 at 20 (Monte Carlo error explains it: one mode)."""
    W_draws, H_draws = _chains(draws, [0, 0, 1, 1])
    np.testing.assert_array_equal(chain_modes(W_draws, H_draws), modes)
    assert chain_modes(W_draws, H_draws, mc_tol=np.inf).max() == 0
