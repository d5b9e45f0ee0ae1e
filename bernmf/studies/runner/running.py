"""The one study runner: :func:`run` fits every grid's settings x seeds of a
:class:`~bernmf.studies.runner.study.Study` with :func:`bernmf.fitting.runner.fit_settings`
(one compiled call per rank for mm and em), scores each member once on the validation
entries, makes every choice (setting, member, weights) on them, and scores only each
method's result on the test entries: the test entries never decide anything. Stacks are
:func:`bernmf.stack`, ensembles :func:`bernmf.fitting.ensemble.combine_members`;
:func:`summarize` averages the table over seed sets."""

from __future__ import annotations

import dataclasses
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from bernmf.data import datasets
from bernmf.data.files.csv_table import write_csv
from bernmf.data.observed import Observed, as_observed, validation_entries
from bernmf.data.split import Split, paper_split, random_split
from bernmf.fitting.ensemble import MODES_WARNING, combine_members
from bernmf.fitting.grids import Budget, Setting, as_prior, fit_grids
from bernmf.fitting.runner import Scored, mean_perplexity, planned, scored_lpd
from bernmf.fitting.stack import members_table, stack
from bernmf.inference import Engine
from bernmf.models import Prior
from bernmf.models.spec import ZeroProbabilityWarning
from bernmf.posterior.accuracy import kl_predictive
from bernmf.posterior.calibration import ece_floor, interval_coverage, reliability
from bernmf.posterior.lpd import mixture_lpd
from bernmf.posterior.modes import mode_prediction
from bernmf.results.fit import Fit
from bernmf.studies.runner.study import (
    CHOICE,
    FIT_COLUMNS,
    MEMBER,
    MIXING_COLUMNS,
    Grid,
    Matrix,
    Simulation,
    Study,
    StudyResult,
    engine_of,
    members_at,
    scaled_options,
)


class _Data(NamedTuple):
    """One dataset of a study: its name, ``observed`` (Y checked once: every observed
    entry, which the rest select from), split, training entries, the held-out ones that
    score every member (the validation entries; a :class:`Matrix`'s test entries when it
    has no validation entries) and the test entries, as the engines read them, its truth (a
    simulation's W @ H, else None) and the seed of its random split (NaN: the paper's split,
    or a :class:`Matrix`'s own)."""

    name: str
    observed: Observed
    split: Split
    train: object
    held_out: object
    test: object
    truth: np.ndarray | None
    split_seed: float = np.nan


def log(message: str, stream=None) -> None:
    """A progress line on ``stream`` (default stdout), flushed."""
    print(message, file=stream or sys.stdout, flush=True)


def load_data(name, data_dir=None):
    """Y (DataFrame or array) of a dataset name, a :class:`Simulation` or a :class:`Matrix`."""
    if isinstance(name, Matrix):
        return name.Y
    if isinstance(name, Simulation):
        return name.draw()[0]
    return datasets.load(name, data_dir=data_dir)


def truth_of(data) -> np.ndarray | None:
    """The true P(Y=1) = W @ H (M, N) of a :class:`Simulation`; None for a dataset."""
    if not isinstance(data, Simulation):
        return None
    _, W, H = data.draw()
    return np.asarray(W) @ np.asarray(H)


def split_of(study: Study, shape, data=None) -> Split:
    """The study's split of a matrix of ``shape`` (a :class:`Matrix`'s own for ``data``)."""
    if isinstance(data, Matrix):
        return data.split
    if study.split == "paper":
        return paper_split(shape)
    return random_split(shape, study.fractions, seed=study.split_seed)


def seed_sets(pool: int, R: int, sets: int) -> list[np.ndarray]:
    """``sets`` sets of R indices into the pool: disjoint blocks if they fit, else random."""
    if R * sets <= pool:
        return [np.arange(j * R, (j + 1) * R) for j in range(sets)]
    rng = np.random.default_rng(R)
    return [np.sort(rng.choice(pool, R, replace=False)) for _ in range(sets)]


def _prior_values(prior: Prior | None) -> dict:
    """alpha, beta and gamma of a prior broadcast to (rank,) (its first component; NaN
    without a prior)."""
    names = ("alpha", "beta", "gamma")
    if prior is None:
        return dict.fromkeys(names, np.nan)
    return {n: float(np.asarray(getattr(prior, n)).ravel()[0]) for n in names}


def fit_row(fit: Fit, prior: Prior | None) -> dict:
    """The :data:`FIT_COLUMNS` of one fit."""
    return {
        "rank": fit.rank,
        **_prior_values(prior),
        "seed": fit.seed,
        "iterations": fit.n_iter,
        "sweeps": np.nan if fit.record.sweeps is None else fit.record.sweeps,
        **_timings(fit),
    }


def _timings(fit: Fit) -> dict:
    """``converged``, ``seconds`` (run) and ``compile_seconds`` of a fit (a mixture's: of its
    members, their seconds summed)."""
    return {
        "converged": fit.converged,
        "seconds": float(fit.timings.get("run", np.nan)),
        "compile_seconds": float(fit.timings.get("compile", np.nan)),
    }


def _options(grid: Grid, engine: Engine, seeds: int, choosing: bool, scale: int = 1) -> dict:
    """Every option of the grid's fits of ``seeds`` seeds (a sampler's: as many chains) at
    ``scale``; an :attr:`Grid.as_fit` grid's: those given, as ``bernmf.fit`` takes them (the
    engine's own progress off)."""
    options = {**scaled_options(grid, scale), **(grid.choosing_options if choosing else {})}
    if grid.as_fit is not None:
        return {"progress": False, **options} if "progress" in engine.options else options
    if engine.seed_count is not None:
        options[engine.seed_count] = seeds
    return engine.with_defaults(options)


def _over(clock: Budget, what: str, stream) -> bool:
    """Whether the study's CPU budget is spent; if so, says that ``what`` is skipped."""
    reason = clock.exhausted()
    if reason is not None:
        log(f"  {what}: skipped, {reason}", stream)
    return reason is not None


class _Fitting(NamedTuple):
    """How a study fits one dataset: its data, the stream of its lines, the runner calls of
    a warm-up (0: none), what is called with each step's settings (None: nothing) and
    whether members keep their draws (:attr:`Study.keep_draws`)."""

    on: _Data
    stream: object
    warmup: int
    watch: Callable[[Setting], None] | None
    keep_draws: bool


def _fitted_settings(grid, engine, settings, seeds, options, fitting, clock) -> list[Setting]:
    """The (rank, prior) ``settings`` of one grid fitted at ``seeds``
    (:func:`bernmf.fitting.grids.fit_grids`, a rank per call) until the budget is spent; an
    :attr:`Grid.as_fit` grid's members made by :func:`bernmf.fitting.runner.planned`."""
    on = fitting.on
    ranks = tuple(dict.fromkeys(k for k, _ in settings))
    priors = None  # the engine's default
    if grid.priors is not None:  # one rank's: as chosen; several (the whole grid): as given
        priors = tuple(p for _, p in settings) if len(ranks) == 1 else grid.priors
    fitter = None
    if grid.as_fit is not None:
        validation = on.held_out if on.split.validation.any() else None
        fitter = planned(validation, grid.as_fit)
    swept = fit_grids(
        [dataclasses.replace(grid, ranks=ranks, priors=priors)], on.train, on.held_out, seeds,
        options={grid.label: options}, budget=clock, warmup=fitting.warmup, extend=None,
        engines={grid.engine: engine}, stream=fitting.stream or sys.stdout, fitter=fitter,
    )  # fmt: skip
    for setting in swept.settings if fitting.watch is not None else ():
        fitting.watch(setting)
    if fitting.keep_draws:
        return swept.settings
    return [
        s._replace(members=[m._replace(fit=m.fit.lightened()) for m in s.members])
        for s in swept.settings
    ]


class _Choice(NamedTuple):
    """What a grid fits once its setting is chosen: its (rank, prior) settings and the
    CPU seconds of the choice; ``fitted``: a deterministic grid's chosen fit itself."""

    grid: Grid
    settings: list
    cpu: float = 0.0
    fitted: list | None = None


def _choose(study, grid, fitting, clock, fit_rows, chosen) -> _Choice | None:
    """The settings of one grid: with ``choose_seed``, the setting of least validation
    perplexity at that seed (at the first scale; nothing fitted when there is one
    setting). ``chosen`` maps the labels of the grids done to their chosen rank (for
    :attr:`Grid.rank_from`); this grid's is added. None when the CPU budget is spent."""
    engine = engine_of(grid.engine)
    priors = [None] if grid.priors is None else [as_prior(p) for p in grid.priors]
    ranks = grid.ranks
    if grid.rank_from is not None:
        if grid.rank_from not in chosen:  # its grid was skipped by the CPU budget
            return None
        ranks = (chosen[grid.rank_from],)
    settings = [(k, engine.prior_for(p, k)) for k in ranks for p in priors]
    if study.choose_seed is None or len(settings) == 1:
        chosen[grid.label] = settings[0][0]
        return _Choice(grid, settings)
    seed = 0 if grid.deterministic else study.choose_seed
    options = _options(grid, engine, 1, choosing=True, scale=grid.scales[0])
    choice = _fitted_settings(grid, engine, settings, [seed], options, fitting, clock)
    fit_rows += [_fits_row(fitting.on, s, s.members[0], CHOICE) for s in choice]
    if not choice:
        return None
    best = min(choice, key=lambda s: _perplexity(s.members[0].lpd))
    chosen[grid.label] = best.rank
    cpu = sum(s.members[0].cpu_seconds for s in choice)
    # a deterministic grid's chosen fit is the one each seed set would make
    return _Choice(grid, [(best.rank, best.prior)], cpu, [best] if grid.deterministic else None)


def _shared(grid: Grid) -> bool:
    """Whether the grid's options are those of every scale (fitted once, at the largest)."""
    return set(grid.scaled) <= {"members"}


def _fit_at(study, choice: _Choice, scale, fitting, clock, fit_rows) -> list[Setting]:
    """The chosen settings of one grid fitted at ``scale``, each with its pool of members
    (a shared grid's: at its largest scale, for every scale). The choice's CPU seconds are
    not among the members': a row says them apart (``tuning_seconds``)."""
    grid = choice.grid
    if choice.fitted is not None:
        return choice.fitted
    engine = engine_of(grid.engine)
    count = members_at(grid, study.pool_size, scale)
    count = count * study.seed_sets if grid.members else count
    seeds = [0] if grid.deterministic else study.pool_seeds(count)
    options = _options(grid, engine, len(seeds), choosing=False, scale=scale)
    made = _fitted_settings(grid, engine, choice.settings, seeds, options, fitting, clock)
    made = [s._replace(scale=None if _shared(grid) else scale) for s in made]
    fit_rows += [_fits_row(fitting.on, s, m, MEMBER) for s in made for m in s.members]
    return made


def _fits_row(on: _Data, setting: Setting, member: Scored, stage: str) -> dict:
    """The row of one fit in :attr:`StudyResult.fits`."""
    return {
        "dataset": on.name,
        "split_seed": on.split_seed,
        "grid": setting.grid.label,
        "engine": setting.engine.name,
        "stage": stage,
        "scale": np.nan if setting.scale is None else setting.scale,
        **fit_row(member.fit, setting.prior),
        "cpu_seconds": member.cpu_seconds,
        "validation_perplexity": float(-member.lpd.mean()),
    }


def _perplexity(lpd: np.ndarray) -> float:
    """Validation perplexity of a mixture's or member's log densities (entries, [members])."""
    return float(-np.mean(lpd))


def _result(rule, chosen, Y, split, train, held_out):
    """``(result Fit, validation perplexity, chosen setting or None)`` of one method."""
    everyone = [m for s, members in chosen for m in members]
    if rule == "single":
        s, m = min(((s, m) for s, ms in chosen for m in ms), key=lambda x: _perplexity(x[1].lpd))
        return m.fit, _perplexity(m.lpd), s
    if rule == "best":
        picked = [(s, min(ms, key=lambda m: s.engine.score(m.fit))) for s, ms in chosen]
        s, m = min(picked, key=lambda x: _perplexity(x[1].lpd))
        return m.fit, _perplexity(m.lpd), s
    common = {"validation": split.validation, "mask": split.train}
    if rule in ("mean", "stack chosen"):
        s, ms = min(chosen, key=lambda x: mean_perplexity(x[1]))
        if rule == "stack chosen":
            result = stack([m.fit for m in ms], Y, seeds="each", **common)
            return result, result.mixture.stacking.validation_perplexity, s
        if len(ms) == 1:
            return ms[0].fit, _perplexity(ms[0].lpd), s
        with warnings.catch_warnings():  # members in distinct modes are what a study measures
            warnings.filterwarnings("ignore", message=MODES_WARNING)
            result = combine_members(
                [m.fit for m in ms], "mean", train, held_out, score=s.engine.score
            )
        return result, mean_perplexity(ms), s
    if rule == "stack setting":
        stacks = [(s, stack([m.fit for m in ms], Y, seeds="each", **common)) for s, ms in chosen]
        s, result = min(stacks, key=lambda x: x[1].mixture.stacking.validation_perplexity)
        return result, result.mixture.stacking.validation_perplexity, s
    fits = [m.fit for m in everyone]
    if rule == "stack+refit":
        options = {s.engine.name: dict(s.grid.options) for s, _ in chosen}
        result = stack(fits, Y, refit=True, options=options, **common)
        return result, np.nan, None
    seeds = "mean" if rule == "stack" else "each"
    result = stack(fits, Y, seeds=seeds, **common)
    return result, result.mixture.stacking.validation_perplexity, None


def _chains(chosen, Y, split, train, held_out):
    """``(result, validation perplexity, setting, mixing columns)`` of the ``chains`` rule:
    per setting its chains by :func:`mode_prediction` (nested R-hat over the start groups
    of the sampler's ``chains_per_start``), as a mixture of its members with the
    prediction's chain weights (rule ``"mean"`` in one mode, else ``"stack"``)."""
    made = []
    for s, ms in chosen:
        fits = [m.fit for m in ms]
        W, H = (np.concatenate([f.draws[name] for f in fits]) for name in ("W", "H"))
        starts = np.arange(len(fits)) // fits[0].posterior.chains_per_start
        mode = mode_prediction(Y, split.train, W, H, starts=starts, validation=split.validation)
        lpd = np.column_stack([m.lpd for m in ms])
        made.append((s, fits, mode, _perplexity(mixture_lpd(lpd, mode.weights))))
    s, fits, mode, validation = min(made, key=lambda x: x[3])
    with warnings.catch_warnings():  # the modes are what mode_prediction weighs
        warnings.filterwarnings("ignore", message=MODES_WARNING)
        result = combine_members(fits, "mean", train, held_out, score=s.engine.score)
    rule = "mean" if mode.rule == "mean" else "stack"
    mixture = dataclasses.replace(result.mixture, weights=tuple(mode.weights.tolist()), rule=rule)
    table = mode.rhat.table()
    diverging = [f.sample_stats.get("diverging") for f in fits]
    every = ["ess_bulk_chain_min", "rhat_bound", "share_rhat_le_bound", "share_rhat_le_1.01"]
    columns = {
        "mixing": mode.status,
        "chain_rule": mode.rule,
        "chain_weights": " ".join(f"{w:.3f}" for w in mode.weights),
        "modes": int(table.index.str.startswith("mode ").sum()),
        **table.loc["all", every].to_dict(),
        "rhat_nested_max": table.loc["nested", "rhat_max"] if "nested" in table.index else np.nan,
        "divergences": sum(0 if d is None else int(np.asarray(d).sum()) for d in diverging),
    }
    return dataclasses.replace(result, mixture=mixture), validation, s, columns


def _coverage(result: Fit, truth) -> dict:
    """``coverage_50`` and ``coverage_90`` of the true WH by the result's draws, its chains
    weighted as its mixture weighs them (no interval for a result without draws)."""
    if not result.draws:
        return interval_coverage(truth).row()
    W, H = result.draws["W"], result.draws["H"]
    mixture = result.mixture
    weights = None
    if mixture is not None and mixture.rule != "best" and len(mixture.weights) == len(W):
        weights = np.asarray(mixture.weights)
    return interval_coverage(truth, W, H, chain_weights=weights).row()


def _describe(setting: Setting | None) -> str:
    """The table's ``chosen``: grid, rank and prior of a setting ("" for a stack)."""
    if setting is None:
        return ""
    values = _prior_values(setting.prior)
    prior = "" if setting.prior is None else " alpha={alpha:g} beta={beta:g} gamma={gamma:.4g}"
    return f"{setting.grid.label} K={setting.rank}" + prior.format(**values)


def _weights(result: Fit) -> pd.DataFrame | None:
    """A stack's weights summed per engine and rank (None for any other fit)."""
    if result.mixture is None or result.mixture.stacking is None:
        return None
    return members_table(result).groupby(["engine", "rank"], as_index=False)["weight"].sum()


def _min_probability(result: Fit, test: Observed) -> float:
    """The smallest probability ``result`` gives a ``test`` entry's outcome."""
    rows, columns, y = test.entries()
    p = result.probs_at(rows, columns)
    return float(np.min(np.where(y == 1, p, 1 - p)))


def _rows(study, on: _Data, R, j, scale, method, settings, tuning: dict) -> list[tuple]:
    """The rows of one method at one seed set (one, but a row per member for ``each``): each
    ``(row, result, weights, reliability bins)``, its result chosen on validation and
    scored on test; its costs apart (:func:`_costs`)."""
    Y, split, train, held_out = on.observed, on.split, on.train, on.held_out
    chosen = [(s, ms) for s, ms in settings if method.grids is None or s.grid.label in method.grids]
    made = (study, on, R, j, scale, method, _costs(chosen, tuning))
    if method.rule == "each":
        return _each(made, chosen, on)
    if method.rule == "first":  # "single" among the first members: the others not fitted
        chosen = [(s, ms[:1]) for s, ms in chosen]
    begin = time.process_time()
    mixing = {}
    if method.rule == "chains":
        result, validation, setting, mixing = _chains(chosen, Y, split, train, held_out)
    else:
        rule = "single" if method.rule == "first" else method.rule
        result, validation, setting = _result(rule, chosen, Y, split, train, held_out)
    combining = time.process_time() - begin
    cpu = sum(m.cpu_seconds for _, ms in chosen for m in ms) + combining
    return [_scored(*made, result, validation, setting, cpu, mixing=mixing)]


def _costs(chosen, tuning: dict) -> dict:
    """The costs of a row kept apart from its ``cpu_seconds`` (the CPU of the fits it is made
    of): ``tuning_seconds``, the CPU seconds of its grids' choices (each fitted once for every
    seed set and scale), and ``compile_seconds``, the most any of its settings' steps spent
    compiling (:attr:`bernmf.fitting.grids.Setting.compile_seconds`: a program is compiled
    once per shape and options, then reused)."""
    labels = {s.grid.label for s, _ in chosen}
    return {
        "tuning_seconds": float(sum(tuning.get(label, 0.0) for label in labels)),
        "compile_seconds": max((s.compile_seconds for s, _ in chosen), default=0.0),
    }


def _each(made: tuple, chosen, on: _Data) -> list[tuple]:
    """The rows of rule ``each``: one per member of every setting, scored on the test entries
    as :func:`bernmf.fitting.runner.runs` scores them (a score of inf said, fit by fit);
    without validation entries the members' own scores are those."""
    pairs = [(s, m) for s, ms in chosen for m in ms]
    if on.held_out is on.test:
        scores = [(np.nan, m.validation_perplexity) for _, m in pairs]
    else:
        fits = [m.fit for _, m in pairs]
        tests = -scored_lpd(fits, on.test, [f.seed for f in fits]).mean(axis=0)
        scores = [(_perplexity(m.lpd), t) for (_, m), t in zip(pairs, tests, strict=True)]
    return [
        _scored(*made, m.fit, validation, s, m.cpu_seconds, test=float(test))
        for (s, m), (validation, test) in zip(pairs, scores, strict=True)
    ]


def _scored(study, on: _Data, R, j, scale, method, costs, result, validation, setting, cpu, *,
            mixing=None, test=None) -> tuple:  # fmt: skip
    """``(row, result, weights, reliability bins)`` of one result: scored on the test entries
    (``test``: that score, already made), with the study's metrics and its ``costs``
    (:func:`_costs`; rule ``each``: a fit's own compile seconds). A score of inf is a
    finding of the study, in its row and line, and is not warned (as a fit's is:
    :func:`_each`)."""
    split = on.split
    if test is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ZeroProbabilityWarning)
            test = result.perplexity(on.test)
    row = {
        "study": study.name, "dataset": on.name, "R": R, "seed_set": j, "scale": scale,
        "disjoint": R * study.seed_sets <= study.pool_size, "method": method.name,
        "rule": method.rule, "validation_perplexity": validation,
        "test_perplexity": test,
        "cpu_seconds": cpu, "chosen": _describe(setting),
        "split_seed": on.split_seed,
    }  # fmt: skip
    fit = method.rule == "each" or result.mixture is None  # one fit, not a choice's mixture
    fit_columns = fit_row(result, setting.prior if setting else None) if fit else _timings(result)
    row |= {c: fit_columns.get(c, np.nan) for c in FIT_COLUMNS}
    row |= {k: v for k, v in costs.items() if method.rule != "each" or k != "compile_seconds"}
    if setting is not None:
        row |= {"rank": setting.rank, **_prior_values(setting.prior)}
    weights = _weights(result)
    by_engine = None if weights is None else weights.groupby("engine", sort=False)["weight"].sum()
    row["weights"] = (
        "" if by_engine is None else "; ".join(f"{e} {w:.3f}" for e, w in by_engine.items())
    )
    if "min_test_probability" in study.metrics:
        row["min_test_probability"] = _min_probability(result, on.test)
    bins = None
    if "ece" in study.metrics:
        diagram = reliability(on.observed, result.probs, split.test)
        row["ece"], bins = diagram.ece, diagram.table
        row["ece_floor"] = ece_floor(result.probs, on.test.mask)
    if "kl_truth" in study.metrics and on.truth is not None:
        test = np.asarray(split.test, bool)
        row["kl_truth"] = kl_predictive(result.probs[test], on.truth[test])
    if "mixing" in study.metrics:
        row |= {c: (mixing or {}).get(c, np.nan) for c in MIXING_COLUMNS}
    if "coverage" in study.metrics and on.truth is not None:
        row |= _coverage(result, on.truth)
    return row, result, weights, bins


def run(
    studies: Study | Sequence[Study],
    out: Path | None = None,
    stream=None,
    watch: Callable[[Setting], None] | None = None,
) -> StudyResult:
    """Run studies: every fit through the fitting runner, every choice on validation.

    Parameters
    ----------
    studies : Study or sequence of Study
    out : Path, optional
        The CSV file the table so far is written to after every seed set.
    stream : file, optional
        Progress lines (default stdout).
    watch : callable, optional
        Called with every setting fitted, its members scored, as each grid step ends (a
        progress bar's hook).

    Returns
    -------
    StudyResult
        Its ``table`` has one row per dataset x R x seed set x scale x method: study,
        dataset, R, seed_set, scale, method, rule, validation_perplexity,
        test_perplexity, cpu_seconds (the CPU seconds of every fit the method chose
        among and of its combining, compiling excluded with ``warmup``), chosen (the
        setting), :data:`FIT_COLUMNS` (of a single fit; rank and prior of a chosen
        setting; a mixture's converged and seconds), tuning_seconds and compile_seconds
        (apart: :func:`_costs`), split_seed (of a random split), weights (per engine, of a
        stack) and the study's metrics; rule ``each`` gives a row per fit.
    """
    studies = [studies] if isinstance(studies, Study) else list(studies)
    rows, fit_rows, weights, results, bins = [], [], [], {}, []
    for study in studies:
        for data in (*study.datasets, *study.simulations, *study.matrices):
            for found in _run_dataset(study, data, fit_rows, stream, watch):
                for row, result, weight, table in found:
                    if row["rule"] in ("single", "each"):
                        results[len(rows)] = result
                    rows.append(row)
                    keys = {k: row[k] for k in ("dataset", "split_seed", "R", "seed_set", "method")}
                    if weight is not None:
                        weights.append(weight.assign(**keys))
                    if table is not None:
                        bins.append(table.assign(**keys, scale=row["scale"]))
                if out is not None:
                    Path(out).parent.mkdir(parents=True, exist_ok=True)
                    write_csv(pd.DataFrame(rows), Path(out), index=False)
    return StudyResult(
        pd.DataFrame(rows),
        pd.DataFrame(fit_rows),
        pd.concat(weights, ignore_index=True) if weights else pd.DataFrame(),
        results,
        pd.concat(bins, ignore_index=True) if bins else None,
    )


def _run_dataset(study: Study, data, fit_rows: list, stream, watch):
    """Yield, scale by scale and seed set by seed set, the ``(row, result, weights,
    reliability bins)`` of every method on one dataset; its fits appended to ``fit_rows``.
    Each grid's setting is chosen first; a grid whose options a scale scales is fitted
    at one scale at a time."""
    name = data if isinstance(data, str) else data.name
    observed = as_observed(load_data(data, study.data_dir), warn_empty=False)  # checked once
    split = split_of(study, observed.shape, data)  # its masks select from it
    train = observed.restricted(split.train, mask_name="the split's train")
    test = observed.restricted(split.test, warn_empty=False, mask_name="the split's test")
    held_out = test  # a Matrix without validation entries: nothing is chosen (Study checks it)
    if split.validation.any():
        held_out = validation_entries(observed, train, split.validation)
    random = study.split == "random" and not isinstance(data, Matrix)
    seed = study.split_seed if random else np.nan
    on = _Data(name, observed, split, train, held_out, test, truth_of(data), seed)
    clock = Budget(study.budget, clock=time.process_time, unit="CPU s")
    log(f"{study.name}: {name} {observed.shape}", stream)
    chosen = {}
    fitting = _Fitting(on, stream, study.seed_sets if study.warmup else 0, watch, study.keep_draws)
    choices = [_choose(study, g, fitting, clock, fit_rows, chosen) for g in study.grids]
    choices = [c for c in choices if c is not None]
    tuning = {c.grid.label: c.cpu for c in choices}
    shared = [
        s
        for c in choices
        if _shared(c.grid)
        for s in _fit_at(study, c, max(c.grid.scales), fitting, clock, fit_rows)
    ]
    for scale in sorted({b for grid in study.grids for b in grid.scales}):
        pools = shared + [  # a scale's fits at a time: only they hold their draws
            s
            for c in choices
            if not _shared(c.grid) and scale in c.grid.scales
            for s in _fit_at(study, c, scale, fitting, clock, fit_rows)
        ]
        for R in study.members:
            for j in range(study.seed_sets):
                if not _over(clock, f"R={R} set {j}", stream):
                    yield _seed_set(study, pools, on, R, j, scale, stream, tuning)


def _seed_set(study, pools, on: _Data, R, j, scale, stream, tuning: dict) -> list:
    """The rows of every method at seed set j of R members and ``scale``; ``tuning``: the
    CPU seconds of each grid's choice (by label)."""
    settings = []
    for s in pools:
        if scale not in s.grid.scales or s.scale not in (None, scale):
            continue
        if s.grid.deterministic:
            settings.append((s, s.members))
            continue
        r = members_at(s.grid, R, scale)
        if r > len(s.members):
            continue
        chosen = seed_sets(len(s.members), r, study.seed_sets)
        settings.append((s, [s.members[i] for i in chosen[j]]))
    found = []
    for method in study.methods:
        if not any(method.grids is None or s.grid.label in method.grids for s, _ in settings):
            continue
        if method.at is not None and R not in method.at:
            continue
        if method.scales is not None and scale not in method.scales:
            continue
        found += _rows(study, on, R, j, scale, method, settings, tuning)
    at = "" if scale == 1 else f" scale {scale}"
    log(f"  R={R} set {j}{at}: " + ", ".join(_said(found)), stream)
    return found


def _said(found: list) -> list[str]:
    """A method's test perplexity, as a seed set's line says it (rule ``each``: its fits'
    count and best)."""
    scores: dict[str, list[float]] = {}
    for row, *_ in found:
        scores.setdefault(row["method"], []).append(row["test_perplexity"])
    return [
        f"{name} {values[0]:.4f}" if len(values) == 1 else
        f"{name} {len(values)} fits, best {min(values):.4f}"
        for name, values in scores.items()
    ]  # fmt: skip


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Mean and sd over seed sets of test and validation perplexity and CPU seconds, per
    dataset, method, R and scale; the least ``min_test_probability`` and the mean ``ece``."""
    grouped = table.groupby(["dataset", "method", "R", "scale"], sort=False)
    extra = {"min_test_probability": "min", "ece": "mean"}
    return grouped.agg(
        test_mean=("test_perplexity", "mean"),
        test_sd=("test_perplexity", "std"),
        validation_mean=("validation_perplexity", "mean"),
        cpu_seconds_mean=("cpu_seconds", "mean"),
        seed_sets=("test_perplexity", "size"),
        **{m: (m, how) for m, how in extra.items() if m in table},
    ).reset_index()
