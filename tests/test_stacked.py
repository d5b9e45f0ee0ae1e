"""bernmf.stack: fits of any engines mixed on validation entries, checked by hand in numpy."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
from scipy.stats import betabinom

import bernmf
from bernmf.data.split import random_split
from bernmf.fitting.stack import BASELINE_FLOOR, baseline, column_prior, members_table
from bernmf.models.spec import zero_probability_advice
from bernmf.posterior.accuracy import kl_predictive
from bernmf.posterior.stacking_weights import GAP, stacking_weights
from bernmf.results.fit import Record


def logsvd_and_ensemble(Y, train):
    """A logsvd fit at K = 2 and an mm ensemble of 2 seeds at K = 2, on ``train``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [
            bernmf.fit(Y, "logsvd", 2, mask=train),
            bernmf.fit(
                Y, "mm", 2, mask=train, prior=bernmf.Prior(1.2, 1.2), restarts=2, combine="mean"
            ),
        ]


@pytest.fixture(scope="module")
def problem():
    Y, _, _ = bernmf.simulate(0, 50, 30, 3)
    split = random_split(Y.shape, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = bernmf.fit(Y, "mm", 3, mask=split.train, prior=bernmf.Prior(1.5, 1.5))
    return Y, split, [first, *logsvd_and_ensemble(Y, split.train)]


def floored(weights):
    """Stacking weights with the baseline (last) member's floor, as bernmf.stack sets it."""
    weights = (1 - BASELINE_FLOOR) * weights
    weights[-1] += BASELINE_FLOOR
    return weights


def by_hand(Y, mask, probs):
    """log P(Y=y) of the entries of ``mask`` under each member's full matrix: (n, R)."""
    y = Y[mask]
    with np.errstate(divide="ignore"):  # logsvd's sigmoid reaches exactly 1: log 0 = -inf
        return np.column_stack([np.log(np.where(y == 1, p[mask], 1 - p[mask])) for p in probs])


def mixed(lpd, weights):
    """Perplexity of the mixture of members with log densities ``lpd`` (n, R), by hand."""
    return -np.mean(np.log(np.exp(lpd) @ weights))


def test_the_stack_perplexity_is_the_mixture_of_its_members_by_hand(problem):
    Y, split, fits = problem
    stacked = bernmf.stack(fits, Y, validation=split.validation, seeds="each")
    members = [fits[0], fits[1], *fits[2].members]
    frequency = baseline(Y, split.train).H[0]  # checked by test_baseline_*
    probs = [m.probs for m in members] + [np.broadcast_to(frequency, Y.shape)]
    val = by_hand(Y, split.validation, probs)
    weights = np.asarray(stacked.mixture.weights)
    np.testing.assert_allclose(weights, floored(stacking_weights(val)), atol=1e-12)
    test = by_hand(Y, split.test, probs)
    expected = -np.mean(np.log(np.exp(test) @ weights))
    assert stacked.perplexity(Y, split.test) == pytest.approx(expected, rel=1e-12)
    np.testing.assert_allclose(stacked.probs, np.tensordot(weights, probs, axes=1), atol=1e-15)
    table = members_table(stacked)
    assert list(table["engine"]) == ["mm", "logsvd", "mm", "mm", "baseline"]
    assert list(table["rank"]) == [3, 2, 2, 2, 1]
    np.testing.assert_allclose(table["validation_perplexity"], -val.mean(axis=0), rtol=1e-12)
    mixture = stacked.mixture.stacking.validation_perplexity
    assert mixture == pytest.approx(-np.mean(np.log(np.exp(val) @ weights)), rel=1e-12)
    assert mixture <= table["validation_perplexity"].min() + 2e-6  # optimal, but the floor
    assert stacked.timings["run"] == pytest.approx(sum(m.timings["run"] for m in stacked.members))


@pytest.fixture(scope="module")
def structured():
    """Data of clear structure (a flat prior's data is nearly all noise, which the baseline
    alone predicts): logsvd at K = 2 and an mm ensemble of 2 seeds both get weight. The
    shapes and ranks of ``problem``'s fits, whose compiled programs they reuse."""
    Y, _, _ = bernmf.simulate(2, 50, 30, 3, bernmf.Prior(0.3, 0.3, 0.3))
    split = random_split(Y.shape, seed=0)
    return Y, split, logsvd_and_ensemble(Y, split.train)


def test_seeds_mean_gives_a_setting_one_weight_split_between_its_seeds(structured, tmp_path):
    Y, split, fits = structured
    stacked = bernmf.stack(fits, Y, validation=split.validation)  # seeds="mean", the default
    frequency = baseline(Y, split.train).H[0]  # checked by test_baseline_*
    seeds = [m.probs for m in fits[1].members]  # one setting: mm, K = 2, Beta(1.2, 1.2)
    probs = [fits[0].probs, np.mean(seeds, axis=0), np.broadcast_to(frequency, Y.shape)]
    val, test = by_hand(Y, split.validation, probs), by_hand(Y, split.test, probs)
    setting = floored(stacking_weights(val))
    assert setting.min() > 0.01  # every setting has weight: the test can tell them apart
    weights = np.asarray(stacked.mixture.weights)
    assert weights[1] == weights[2]  # the setting's weight, split evenly between its seeds
    merged = np.array([weights[0], weights[1] + weights[2], weights[3]])
    # merged and setting solve one problem from log densities equal up to rounding (the
    # stack's: the log of the seeds' mean density; here: the log of their mean probability),
    # but stacking_weights stops as soon as its bound certifies the weights within GAP nats
    # per entry of optimal, at an iterate that rounding can move: the weights were seen
    # 5e-9 apart, the test perplexities with them 1.4e-10 apart (relative). What is
    # certified is the score: both within GAP of the optimal validation score
    assert abs(mixed(val, merged) - mixed(val, setting)) <= GAP
    # and with its own weights the stack's perplexity is the mixture's by hand up to
    # rounding (the members' probabilities mixed before the log, here densities after)
    assert stacked.perplexity(Y, split.test) == pytest.approx(mixed(test, merged), rel=1e-12)
    each = bernmf.stack(fits, Y, validation=split.validation, seeds="each")
    assert not np.allclose(each.mixture.weights, weights, atol=1e-3)
    assert len(stacked.members) == 4  # the members themselves: saved and loaded as such
    loaded = bernmf.load(stacked.save(tmp_path / "stack.npz"))
    np.testing.assert_allclose(loaded.probs, stacked.probs, rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="seeds must be 'mean' or 'each'"):
        bernmf.stack(fits, Y, validation=split.validation, seeds="stack")


def test_refit_fits_the_weighted_members_again_on_training_and_validation(structured):
    Y, split, fits = structured
    chosen = bernmf.stack(fits, Y, validation=split.validation)
    refitted = bernmf.stack(fits, Y, validation=split.validation, refit=True)
    weights = np.asarray(refitted.mixture.weights)
    np.testing.assert_allclose(weights, chosen.mixture.weights, rtol=0, atol=0)
    both = split.train | split.validation
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = [bernmf.fit(Y, "logsvd", 2, mask=both)] + [
            bernmf.fit(Y, "mm", 2, mask=both, prior=bernmf.Prior(1.2, 1.2), seed=m.seed)
            for m in fits[1].members
        ]
    frequency = baseline(Y, both).H[0]
    probs = [f.probs for f in again] + [np.broadcast_to(frequency, Y.shape)]
    for member, expected in zip(refitted.members, probs, strict=True):
        np.testing.assert_allclose(member.probs, expected, rtol=0, atol=1e-8)
        assert member.observed is None or np.array_equal(member.observed.mask, both)
    expected = -np.mean(np.log(np.exp(by_hand(Y, split.test, probs)) @ weights))
    assert refitted.perplexity(Y, split.test) == pytest.approx(expected, rel=1e-8)
    assert refitted.perplexity(Y, split.test) != pytest.approx(chosen.perplexity(Y, split.test))
    assert np.array_equal(refitted.observed.mask, both)
    assert refitted.mixture.stacking.refit and refitted.mixture.stacking.refit_seconds > 0
    whole = bernmf.stack(fits, Y, validation=split.validation, unpack=False)
    with pytest.raises(ValueError, match="has members of its own"):
        bernmf.stack([whole], Y, validation=split.validation, unpack=False, refit=True)


def test_unpack_false_stacks_an_ensemble_as_its_mixture(problem, tmp_path):
    Y, split, fits = problem
    stacked = bernmf.stack(fits, Y, validation=split.validation, unpack=False)
    assert len(stacked.members) == 4  # the mean ensemble of fits[2] is one member
    frequency = baseline(Y, split.train).H[0]  # checked by test_baseline_*
    mean = np.mean([m.probs for m in fits[2].members], axis=0)
    probs = [fits[0].probs, fits[1].probs, mean, np.broadcast_to(frequency, Y.shape)]
    weights = floored(stacking_weights(by_hand(Y, split.validation, probs)))
    np.testing.assert_allclose(stacked.mixture.weights, weights, atol=1e-12)
    expected = -np.mean(np.log(np.exp(by_hand(Y, split.test, probs)) @ weights))
    assert stacked.perplexity(Y, split.test) == pytest.approx(expected, rel=1e-12)
    assert list(members_table(stacked)["engine"]) == ["mm", "logsvd", "mm", "baseline"]
    loaded = bernmf.load(stacked.save(tmp_path / "stack.npz"))
    np.testing.assert_allclose(loaded.probs, stacked.probs, rtol=0, atol=1e-15)
    for back, member in zip(loaded.members, stacked.members, strict=True):  # weight or not
        np.testing.assert_allclose(back.probs, member.probs, rtol=0, atol=1e-15)
    alone = bernmf.stack([fits[2]], Y, validation=split.validation, unpack=False)
    loaded = bernmf.load(alone.save(tmp_path / "alone.npz"))
    np.testing.assert_allclose(loaded.probs, alone.probs, rtol=0, atol=1e-15)


def test_a_uniformly_worse_member_gets_no_weight(problem):
    Y, split, fits = problem
    good = fits[0]
    # every entry's outcome has half good's probability: y=1 -> p/2, y=0 -> (1-p)/2
    worse = dataclasses.replace(
        good, stored_probs=0.5 * good.probs + 0.5 * (1 - Y), mixture=None, engine="worse"
    )
    stacked = bernmf.stack([good, worse], Y, validation=split.validation, baseline=False)
    weights = members_table(stacked).set_index("engine")["weight"]
    assert weights["worse"] < 1e-6
    assert weights["mm"] > 1 - 1e-6


def test_mismatched_fits_are_refused_before_any_work(problem, monkeypatch):
    Y, split, fits = problem
    import bernmf.fitting.stack

    def fail(*args, **kwargs):
        raise AssertionError("stacking started")

    monkeypatch.setattr(bernmf.fitting.stack, "stacking_weights", fail)
    other = random_split(Y.shape, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        moved = bernmf.fit(Y, "mm", 2, mask=other.train, prior=bernmf.Prior(1.5, 1.5))
        small = bernmf.fit(Y[:40], "mm", 2, prior=bernmf.Prior(1.5, 1.5))
    with pytest.raises(ValueError, match=r"fits\[1\] \(mm, K=2\) was fitted on other training"):
        bernmf.stack([fits[0], moved], Y, validation=split.validation)
    with pytest.raises(ValueError, match=r"fits\[1\] \(mm, K=2\) has shape \(40, 30\)"):
        bernmf.stack([fits[0], small], Y, validation=split.validation)
    flipped = Y.copy()
    flipped[split.train] = 1 - flipped[split.train]
    with pytest.raises(ValueError, match="other data than Y"):
        bernmf.stack(fits, flipped, validation=split.validation)
    with pytest.raises(ValueError, match="overlap"):
        bernmf.stack(fits, Y, validation=split.validation | split.train)
    with pytest.raises(ValueError, match="other training entries than mask"):
        bernmf.stack(fits, Y, validation=split.validation, mask=other.train)
    bare = dataclasses.replace(fits[0], record=Record(fits[0].seed, fits[0].timings))
    with pytest.raises(ValueError, match="give mask="):
        bernmf.stack([bare], Y, validation=split.validation)
    with pytest.raises(TypeError, match=r"not a bernmf\.Fit"):
        bernmf.stack([fits[0], fits[0].probs], Y, validation=split.validation)
    with pytest.raises(ValueError, match="empty"):
        bernmf.stack([], Y, validation=split.validation)


def test_save_and_load_give_the_same_stack(problem, tmp_path):
    Y, split, fits = problem
    bare = dataclasses.replace(fits[0], record=Record(fits[0].seed, fits[0].timings))  # no data
    stacked = bernmf.stack([bare, *fits[1:]], Y, validation=split.validation, mask=split.train)
    loaded = bernmf.load(stacked.save(tmp_path / "stack.npz"))
    np.testing.assert_array_equal(loaded.probs, stacked.probs)
    assert loaded.perplexity(Y, split.test) == stacked.perplexity(Y, split.test)
    assert members_table(loaded).equals(members_table(stacked))
    for a, b in zip(loaded.members, stacked.members, strict=True):
        assert (a.engine, a.rank, a.seed, a.n_iter) == (b.engine, b.rank, b.seed, b.n_iter)
        np.testing.assert_array_equal(a.W, b.W)
        assert (a.prior is None) == (b.prior is None)
        if a.prior is not None:
            for x, z in zip(a.prior, b.prior, strict=True):
                np.testing.assert_array_equal(x, z)
    # an ensemble of one engine keeps its stacked layout
    ensemble = bernmf.load(fits[2].save(tmp_path / "ensemble.npz"))
    np.testing.assert_array_equal(ensemble.probs, fits[2].probs)


def test_a_stack_shows_the_factors_of_its_best_member_whose_factors_are_probabilities(
    problem, tmp_path
):
    """The factors a stack shows come from the model: a logistic member's natural
    parameters (W from -909 to 430 in the issue) are never shown, even of largest weight;
    the choice survives save and load."""
    Y, split, fits = problem
    logistic = fits[1]
    alone = bernmf.stack([logistic], Y, validation=split.validation, mask=split.train)
    assert alone.mixture.chosen == int(np.argmax(alone.mixture.weights))  # no model member
    stacked = bernmf.stack(fits, Y, validation=split.validation, mask=split.train)
    weights = np.array(stacked.mixture.weights)
    engines = [m.engine for m in stacked.members]
    model = [i for i, e in enumerate(engines) if e == "mm"]
    shown = model[int(np.argmax(weights[model]))]
    assert stacked.mixture.chosen == shown and engines[shown] == "mm"
    np.testing.assert_array_equal(stacked.W, stacked.members[shown].W)
    np.testing.assert_allclose(stacked.W.sum(axis=1), 1)
    swapped = dataclasses.replace(stacked.mixture, weights=tuple(np.roll(weights, -shown + 1)))
    assert engines[swapped.chosen] == "mm"  # the rule is kept, not the weights redone
    loaded = bernmf.load(stacked.save(tmp_path / "shown.npz"))
    assert loaded.mixture.chosen == shown
    np.testing.assert_array_equal(loaded.W, stacked.W)


def beta_binomial_prior(ones, count):
    """(m, c) of greatest beta-binomial likelihood, found apart from ``column_prior``: scipy's
    ``betabinom`` and Nelder-Mead from four starts, clipped to the same bounds."""
    from scipy.optimize import minimize

    edge = 1 / (count.sum() + 2)

    def unpacked(x):
        return np.clip(1 / (1 + np.exp(-x[0])), edge, 1 - edge), np.clip(np.exp(x[1]), 2, 1e8)

    def nll(x):
        m, c = unpacked(x)
        return -betabinom.logpmf(ones, count, c * m, c * (1 - m)).sum()

    options = {"xatol": 1e-10, "fatol": 1e-12, "maxiter": 4000}
    found = [minimize(nll, [a, b], method="Nelder-Mead", options=options)
             for a in (-4.0, 0.0) for b in (1.0, 8.0)]  # fmt: skip
    return unpacked(min(found, key=lambda r: r.fun).x)


@pytest.mark.parametrize("kind", ["columns differ", "columns alike, sparse"])
def test_the_baseline_shrinks_column_frequencies_by_the_beta_prior_of_greatest_likelihood(kind):
    rng = np.random.default_rng(4)
    if kind == "columns differ":  # a trait matrix: each column its own frequency
        P = np.broadcast_to(rng.beta(0.5, 0.5, size=40), (150, 40))
    else:  # a sparse network: every column at 0.5%
        P = np.full((600, 80), 0.005)
    Y = (rng.random(P.shape) < P).astype(float)
    Y[rng.random(P.shape) < 0.2] = np.nan
    train = rng.random(P.shape) < 0.8
    ones, count = np.nansum(Y * train, axis=0), (train & np.isfinite(Y)).sum(axis=0)
    m, c = column_prior(ones, count)
    p = baseline(Y, train).H[0]
    np.testing.assert_allclose(p, (ones + c * m) / (count + c), rtol=1e-12)
    m_ref, c_ref = beta_binomial_prior(ones, count)
    np.testing.assert_allclose(p, (ones + c_ref * m_ref) / (count + c_ref), rtol=1e-4)
    likelihood = [  # of the prior each found: as high, up to a flat ridge's 1e-4 nats
        betabinom.logpmf(ones, count, c_ * m_, c_ * (1 - m_)).sum()
        for m_, c_ in ((m, c), (m_ref, c_ref))
    ]
    assert likelihood[0] >= likelihood[1] - 1e-4
    laplace = (ones + 1) / (count + 2)
    kl = {
        name: kl_predictive(np.broadcast_to(q, P.shape)[~train], P[~train])
        for name, q in (("shrunk", p), ("laplace", laplace))
    }
    if kind == "columns differ":
        assert c < 10 and np.corrcoef(p, ones / count)[0, 1] > 0.999
    else:
        assert c > 1000 and np.ptp(p) < 0.05 * p.mean()  # every column near the overall 0.5%
        assert kl["shrunk"] < 0.5 * kl["laplace"]  # Laplace's + 1 over ~400 entries: +50%


def test_the_baseline_keeps_every_probability_inside_the_unit_interval():
    Y = np.array([[1, 1, 0], [1, 1, 0], [1, np.nan, 0.0]])
    for data in (Y, np.zeros((4, 3)), np.ones((4, 3))):
        fit = baseline(data, np.ones(data.shape, bool))
        assert fit.probs.shape == data.shape
        assert ((fit.probs > 0) & (fit.probs < 1)).all()
    fit = baseline(Y, np.ones(Y.shape, bool))
    assert fit.H[0, 0] > fit.H[0, 1] > 0.5 > fit.H[0, 2]  # all ones, 2 of 2, none


def test_an_outcome_of_probability_zero_scores_inf_and_says_how_many():
    Y = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, np.nan]])
    probs = np.array([[0.0, 0.5, 1.0], [0.0, 0.5, 0.0]])
    with pytest.warns(bernmf.ZeroProbabilityWarning, match="1 of 5 scored entries"):
        assert bernmf.perplexity(Y, probs) == np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        finite = bernmf.perplexity(Y, probs, mask=np.array([[0, 1, 1], [1, 1, 1]], bool))
    assert finite == pytest.approx(-np.log(0.5) * 2 / 4)
    from bernmf.posterior.lpd import entries_lpd

    assert entries_lpd(np.array([1.0, 0.0]), np.array([0.0, 0.0]))[0] == -np.inf


def column_ruled_out():
    """Y (30, 12) whose column 0 is all zeros in training and ones held out (rows 25-29),
    where H reaches exactly 0 at the flat prior; masks train, validation, test."""
    rng = np.random.default_rng(0)
    Y = (rng.random((30, 12)) < 0.5).astype(float)
    Y[:, 0] = 0.0  # column 0 all zeros in training: a flat prior puts H at exactly 0
    Y[25:, 0] = 1.0  # ... and its held-out entries are ones
    train = np.ones(Y.shape, bool)
    train[25:, :6] = False
    validation = np.zeros(Y.shape, bool)
    validation[25:27, :6] = True
    return Y, train, validation, ~train & ~validation


def test_fit_warns_when_held_out_entries_are_certain_and_a_stack_never_gives_zero():
    """The flat prior (by name) rules held-out ones out and warns; the default prior keeps
    every probability inside (0, 1), silently, as a stack does."""
    Y, train, validation, test = column_ruled_out()
    with pytest.warns(bernmf.ZeroProbabilityWarning, match="exactly 0 or 1 at"):
        flat = bernmf.fit(Y, "mm", 2, mask=train, prior=bernmf.Prior.flat())
    with pytest.warns(bernmf.ZeroProbabilityWarning, match="scored entries have probability 0"):
        assert flat.perplexity(Y, test) == np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        default = bernmf.fit(Y, "mm", 2, mask=train)
        stacked = bernmf.stack([flat], Y, validation=validation)
        assert np.isfinite(stacked.perplexity(Y, test))
        assert np.isfinite(default.perplexity(Y, test))
    assert (stacked.probs > 0).all() and (stacked.probs < 1).all()
    assert (default.probs > 0).all() and (default.probs < 1).all()


@pytest.mark.parametrize("name", bernmf.engines())
def test_zero_probability_advice_applies_to_the_engine_in_the_users_syntax(name):
    """A flat prior: alpha, beta > 1 as Prior(...) in Python, as flags in the CLI; em: mm;
    the default priors and the engines without one (logsvd, logpca): no prior advice."""
    engine = bernmf.inference.get_engine(name)
    python, cli = zero_probability_advice(name, engine.prior_for(None, 3))
    assert "Prior(" not in cli and "--" not in python
    if engine.takes_prior:
        flat = zero_probability_advice(name, bernmf.Prior.flat().broadcast(3))
        assert flat[0] == "prior=Prior(1.2, 1.2) keeps H inside (0, 1)"
        assert flat[1] == "--alpha 1.2 --beta 1.2 keeps H inside (0, 1)"
        assert ("alpha" in cli) == (name != "mm")  # the others' defaults: alpha = beta = 1
    elif name == "em":
        assert '"mm"' in python and cli.startswith("--engine mm")
    elif not engine.takes_prior:
        assert "alpha" not in python + cli and cli == ""
    assert zero_probability_advice(None, None) == ("", "")


def test_em_warns_with_advice_for_em_and_a_scored_run_only_when_a_score_is_inf():
    """em at exactly 0 advises mm, in Python and (its cli text) in flags. compare scores
    its fits: a certain prediction at an entry it scores finitely says nothing; one that
    scores inf says how many."""
    Y, train, validation, test = column_ruled_out()
    with pytest.warns(bernmf.ZeroProbabilityWarning) as caught:
        bernmf.fit(Y, "em", 2, mask=train)
    (warning,) = [w.message for w in caught]
    assert str(warning).startswith("em: P(Y=1) is exactly 0 or 1 at")
    assert str(warning).endswith('; "mm" (em with the default prior) keeps H inside (0, 1)')
    assert warning.cli.endswith("; --engine mm (em with a prior) keeps H inside (0, 1)")
    unharmed = test.copy()
    unharmed[:, 0] = False  # column 0's held-out ones are not scored
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        finite = bernmf.compare(Y, ["em"], [2], [0], train=train, test=unharmed, progress=False)
    assert np.isfinite(finite.fits["perplexity"]).all()
    counts = f"em K=2 seed 0: {test[:, 0].sum()} of {test.sum()} scored"
    with pytest.warns(bernmf.ZeroProbabilityWarning, match=counts):
        ruled_out = bernmf.compare(Y, ["em"], [2], [0], train=train, test=test, progress=False)
    assert (ruled_out.fits["perplexity"] == np.inf).all()
    # with validation entries, what is said is the test score of each fit (its row), never
    # the validation scores that weigh the stacks (finite: the baseline's floor)
    with pytest.warns(bernmf.ZeroProbabilityWarning) as caught:
        stacked = bernmf.compare(
            Y, ["em"], [2, 3], [0], train=train, test=test, validation=validation, progress=False
        )
    said = sorted(str(w.message).split(":")[0] for w in caught)
    assert said == ["perplexity of em K=2 seed 0", "perplexity of em K=3 seed 0"]
    assert all(f"{test[:, 0].sum()} of {test.sum()} scored" in str(w.message) for w in caught)
    assert np.isfinite(stacked.fits.query("engine == 'stacked: all engines'")["perplexity"]).all()


def test_the_baseline_keeps_its_floor_when_stacking_gives_it_no_weight():
    """A member better than the baseline on every validation entry takes all the weight;
    the test entry it rules out still scores finite, through the baseline's floor."""
    Y = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    train = np.array([[1, 1], [1, 1], [0, 0], [0, 0]], bool)
    validation = np.array([[0, 0], [0, 0], [1, 1], [0, 0]], bool)
    sure = dataclasses.replace(
        baseline(Y, train), engine="sure", H=np.array([[1.0, 0.0]]), stored_probs=None
    )  # P(Y=1) = 1 in column 0: right on validation, rules out the test entry Y[3, 0] = 0
    assert stacking_weights(by_hand(Y, validation, [sure.probs, baseline(Y, train).probs]))[
        1
    ] == pytest.approx(0, abs=1e-9)
    stacked = bernmf.stack([sure], Y, validation=validation)
    weights = members_table(stacked).set_index("engine")["weight"]
    assert weights["baseline"] == pytest.approx(BASELINE_FLOOR, rel=1e-3)
    test = np.array([[0, 0], [0, 0], [0, 0], [1, 0]], bool)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        score = stacked.perplexity(Y, test)
    assert score == pytest.approx(-np.log(BASELINE_FLOOR * 1 / 4), rel=1e-3)  # p(0) = 1 - 3/4


@pytest.mark.slow
def test_grid_stacking_stacks_every_fit_of_the_grid(problem, tmp_path, capsys):
    import json

    import pandas as pd

    from bernmf import tune
    from bernmf.cli.parser import main

    Y, split, _ = problem
    result = tune.grid(
        Y, [2, 3], [1.2, 2.0], [1.5], mask=split.train, validation=split.validation,
        restarts=2, combine="stack", progress=False, max_iter=50,
    )  # fmt: skip
    table = members_table(result.stacked)
    assert len(table) == len(result.table) + 1 == 9  # 2 ranks x 2 priors x 2 seeds, baseline
    seeds = table["weight"][:-1].to_numpy().reshape(4, 2)  # a setting's seeds share its weight
    np.testing.assert_allclose(seeds[:, 0], seeds[:, 1], rtol=1e-12)
    assert list(table["rank"][:-1]) == list(result.table["rank"])
    single = result.table["validation_perplexity"].min()
    assert result.best["validation_perplexity"] == single
    assert result.stacked.mixture.stacking.validation_perplexity <= single + 1e-12
    # the members are the grid's fits: each scores as its row of the table
    for member, (_, row) in zip(result.stacked.members, result.table.iterrows(), strict=False):
        expected = row["validation_perplexity"]
        assert member.perplexity(Y, split.validation) == pytest.approx(expected, rel=1e-12)
    path = tmp_path / "Y.csv"
    np.savetxt(path, Y, fmt="%d", delimiter=",")
    np.savez(tmp_path / "split.npz", Y=split.codes())
    out = tmp_path / "tune"
    argv = ["tune", str(path), "--split", str(tmp_path / "split.npz"), "--ranks", "2", "--quiet"]
    argv += ["--alphas", "1.2,2", "--betas", "1.5", "--restarts", "2", "--combine", "stack"]
    assert main([*argv, "--max-iter", "50", "--extend", "0", "--out", str(out)]) == 0
    members = pd.read_csv(out / "members.csv")
    assert list(members["engine"]) == ["mm"] * 4 + ["baseline"]  # the grid, not extended
    saved = bernmf.load(out / "best_fit.npz")
    best = json.loads((out / "summary.json").read_text())["best"]
    assert saved.engine == "stack"
    assert best["test_perplexity"] == pytest.approx(saved.perplexity(Y, split.test), rel=1e-12)


@pytest.mark.slow
def test_grid_stacking_refits_with_the_grids_options(structured, tmp_path):
    from bernmf import tune
    from bernmf.cli.parser import main

    Y, split, _ = structured
    both = split.train | split.validation
    result = tune.grid(
        Y, [2], [1.2], [1.5], mask=split.train, validation=split.validation, restarts=2,
        combine="stack", refit=True, progress=False, max_iter=5,
    )  # fmt: skip
    stacked = result.stacked
    assert np.array_equal(stacked.observed.mask, both)
    weights = stacked.mixture.weights
    assert weights[0] == weights[1] > 0.01  # both seeds refitted
    for member in stacked.members[:-1]:
        prior = bernmf.Prior(1.2, 1.5)
        again = bernmf.fit(Y, "mm", 2, mask=both, prior=prior, seed=member.seed, max_iter=5)
        assert member.n_iter == again.n_iter == 5  # the grid's max_iter, not the default
        np.testing.assert_allclose(member.probs, again.probs, rtol=0, atol=1e-8)
    with pytest.raises(ValueError, match="give combine='stack'"):
        tune.grid(Y, [2], mask=split.train, validation=split.validation, refit=True)
    with pytest.raises(ValueError, match="give refit=True"):
        bernmf.stack([stacked.members[0]], Y, validation=split.validation, options={})
    path = tmp_path / "Y.csv"
    np.savetxt(path, Y, fmt="%d", delimiter=",")
    np.savez(tmp_path / "split.npz", Y=split.codes())
    argv = ["tune", str(path), "--split", str(tmp_path / "split.npz"), "--ranks", "2"]
    argv += ["--alphas", "1.2", "--betas", "1.5", "--combine", "stack", "--refit", "--quiet"]
    assert main([*argv, "--max-iter", "5", "--out", str(tmp_path / "tune")]) == 0
    saved = bernmf.load(tmp_path / "tune" / "best_fit.npz")
    assert saved.mixture.stacking.refit and np.array_equal(saved.observed.mask, both)


def test_the_reports_stacked_rows_give_a_setting_one_weight(structured):
    from bernmf.data.observed import as_observed
    from bernmf.studies.compare import STACKED_ALL
    from bernmf.studies.report.run import stacked_rows

    Y, split, fits = structured
    test = as_observed(Y, split.test, warn_empty=False)
    members = [fits[0], *fits[1].members]  # the seeds of an ensemble row: one setting
    [(row, stacked)] = stacked_rows(
        Y, {STACKED_ALL: members}, split.train, split.validation, test, seed=0
    )
    weights = members_table(stacked)["weight"]
    assert weights[1] == pytest.approx(weights[2], rel=1e-12)
    assert weights[1] > 0.01
    assert row["perplexity"] == pytest.approx(stacked.perplexity(Y, split.test), rel=1e-12)


@pytest.mark.slow
def test_compare_adds_stacked_rows_from_the_fits_it_made(problem):
    Y, split, _ = problem
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bernmf.ZeroProbabilityWarning)  # em's H at 0 or 1
        result = bernmf.compare(
            Y, ["mm", "em"], [2, 3], seeds=[0, 1], train=split.train, test=split.test,
            validation=split.validation, progress=False, options={"mm": {"max_iter": 50}},
        )  # fmt: skip
    fits = result.fits
    assert len(result.results) == 8
    for seed in (0, 1):
        made = fits[(fits["seed"] == seed) & (fits["rank"] > 0)]
        rows = fits[(fits["seed"] == seed) & (fits["rank"] == 0)].set_index("engine")
        assert list(rows.index) == ["stacked: all engines", "stacked: mm grid"]
        total = made["seconds"].sum()
        # the fits' seconds and the baseline's (its prior fitted over columns, under 0.5 s)
        assert total <= rows.loc["stacked: all engines", "seconds"] <= total + 0.5
        seeds = fits["seed"][: len(result.results)]  # the fits' rows come first
        members = [f for f, s in zip(result.results, seeds, strict=True) if s == seed]
        stacked = bernmf.stack(members, Y, validation=split.validation)
        expected = stacked.perplexity(Y, split.test)
        assert rows.loc["stacked: all engines", "perplexity"] == pytest.approx(expected)
        assert np.isfinite(rows["perplexity"]).all()
    with pytest.raises(ValueError, match="validation and test entries overlap"):
        bernmf.compare(
            Y, ["mm"], [2], train=split.train, test=split.test,
            validation=split.validation | split.test, progress=False,
        )  # fmt: skip
