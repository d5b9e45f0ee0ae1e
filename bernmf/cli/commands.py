"""The commands of the ``bernmf`` command line (:mod:`bernmf.cli.parser` parses the arguments).

One function per command, ``<name>_command(args) -> exit code``, and the helpers
they share: reading the data, parsing ``--option``, messages and tables. The commands
that run a study (tune, report, reproduce) are in :mod:`bernmf.cli.study_commands`.
"""

from __future__ import annotations

import argparse
import inspect
import json
from pathlib import Path

import numpy as np
import pandas as pd

from bernmf import _progress as progress
from bernmf._output import atomic_output, check_output, to_json, write_json
from bernmf._warnings import warn
from bernmf.api import fit, refuse_single_fit
from bernmf.data import datasets
from bernmf.data.files.csv_table import write_csv
from bernmf.data.files.readers import read_groups, read_mask, read_matrix
from bernmf.data.observed import Observed, as_observed
from bernmf.data.split import paper_split, random_split
from bernmf.fitting.search import held_out_scores
from bernmf.fitting.search_plan import PLAN_FILE, read_search_plan
from bernmf.fitting.stack import members_table
from bernmf.inference import available, get_engine, registry
from bernmf.models import Prior, perplexity, simulate
from bernmf.results.loading import versions
from bernmf.studies.compare import compare


def demo(args: argparse.Namespace) -> int:
    """Fit ``em`` and ``mm`` at several ranks on data simulated from the model."""
    truth_prior = Prior(alpha=args.alpha, beta=args.beta, gamma=args.gamma)
    map_prior = Prior(alpha=args.mm_alpha, beta=args.mm_beta)
    Y, W, H = simulate(args.seed, args.rows, args.cols, args.true_rank, truth_prior)
    split = random_split(Y.shape, (1 - args.holdout, 0.0, args.holdout), seed=args.seed)
    train, test = split.train, split.test
    say(
        args,
        f"Simulated Y: {args.rows} x {args.cols}, true rank {args.true_rank}, "
        f"H ~ Beta({args.alpha}, {args.beta}), W ~ Dirichlet({args.gamma}), "
        f"density {Y.mean():.3f}; "
        f"{test.mean():.0%} of entries held out for testing.",
    )
    fits = compare(
        Y,
        ["em", "mm"],
        args.ranks,
        [args.seed],
        train=train,
        test=test,
        priors={"mm": map_prior},
        measure=lambda result: {"train objective": result.objective},
        progress=False,
    ).fits
    table = fits[["engine", "rank", "iterations", "train objective"]].assign(
        **{
            "held-out perplexity": fits["perplexity"],
            "seconds": fits["seconds"] + fits["compile_seconds"],
        }
    )
    truth = perplexity(Y, W @ H, test)
    show(args, table, {"fits": table.to_dict(orient="records"), "true_perplexity": truth})
    say(args, "(seconds include compilation the first time a shape is seen)")
    say(
        args,
        f"true W @ H: held-out perplexity {truth:.4g} "
        f"(perplexity = mean negative log-likelihood per held-out entry, nats; lower is better)",
    )
    return 0


# ---------------------------------------------------------------------------------------
# arguments and messages


SPARSE_HINT = 0.01
"""A CSV of at least a million cells with fewer ones than this fraction gets a hint to
store it sparse (:func:`read_data`)."""


def engines_command(args) -> int:
    """``bernmf engines``: every engine the other commands take, and where it comes from
    (built-in, or the distribution of an installed plugin: the entry-point group
    ``bernmf.engines``), with what it declares."""
    rows = [
        {
            "engine": name,
            "origin": origin,
            "bayesian": get_engine(name).bayesian,
            "takes_prior": get_engine(name).takes_prior,
            "probabilities": get_engine(name).probabilities,
        }
        for name, origin in registry.origins().items()
    ]
    show(args, pd.DataFrame(rows), {"engines": rows})
    return 0


def read_data(args, path):
    """``read_matrix(path)``; for a large, mostly-zero table, a line on stderr saying that
    a sparse ``.npz`` file reads faster (see docs/data.md)."""
    Y = read_matrix(path)
    dense = isinstance(Y, pd.DataFrame) and not isinstance(Y.dtypes.iloc[0], pd.SparseDtype)
    if dense and Y.size >= 1_000_000:  # (an .npz with names reads as sparse columns)
        values = Y.to_numpy()
        density = np.nansum(values) / max(np.count_nonzero(~np.isnan(values)), 1)
        if density < SPARSE_HINT:
            tell(
                args,
                f"{path} is {density:.2%} ones: stored sparse (scipy.sparse.save_npz of the "
                "ones, a .npz file) it reads in a fraction of the time and memory; see "
                "docs/data.md",
            )
    return Y


def load_data(args) -> tuple[object, str]:
    """The data of ``compare`` and ``tune``: DATA, ``--dataset`` or a simulation."""
    if args.data is not None and args.dataset is not None:
        raise ValueError("give either DATA or --dataset, not both")
    if args.data_dir is not None and args.dataset is None:
        raise ValueError("--data-dir is where --dataset's file is found: give it with --dataset")
    if args.data is not None:
        return read_data(args, args.data), str(args.data)
    if args.dataset is not None:
        return datasets.load(args.dataset, data_dir=args.data_dir), args.dataset
    return None, "simulated"


def declared(function) -> dict:
    """The defaults ``function`` declares, by parameter name: the options of the commands
    that call it take theirs (and the values their help shows) from there, so that no
    default is written twice."""
    parameters = inspect.signature(function).parameters.values()
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def parse_options(items: list[str], scoped: bool) -> dict:
    """``key=value`` (or ``engine.key=value`` when ``scoped``) with JSON values, else strings.

    Returns ``{key: value}``, or ``{engine: {key: value}}`` when ``scoped``.
    """
    options: dict = {}
    for item in items or []:
        key, equals, text = item.partition("=")
        if not equals or not key:
            raise ValueError(f"--option takes key=value, got {item!r}")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        if scoped:
            engine, dot, name = key.partition(".")
            if not dot or not name:
                raise ValueError(f"--option takes engine.key=value here, got {item!r}")
            options.setdefault(engine, {})[name] = value
        else:
            options[key.replace("-", "_")] = value
    return options


def say(args, message: str) -> None:
    """An informational line on stdout, unless --quiet or --json."""
    if not (args.quiet or args.json):
        print(message, flush=True)


def tell(args, message: str) -> None:
    """A progress line on stderr (what starts now), unless --quiet or --json."""
    progress.say(not (args.quiet or args.json), message)


def show(args, table: pd.DataFrame, summary: dict) -> None:
    """The result: JSON on stdout with --json, else the table (nothing with --quiet)."""
    if args.json:
        print(json.dumps(to_json(summary), indent=2, allow_nan=False))
    elif not args.quiet:
        with pd.option_context("display.width", 160, "display.max_columns", 30):
            print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))


def prior_of(args, engine: str) -> Prior | None:
    """The --alpha/--beta/--gamma prior for an engine that takes one (those not given at the
    engine's defaults: :meth:`~bernmf.inference.registry.Engine.prior_from`), else None."""
    chosen = get_engine(engine)
    if not chosen.takes_prior:
        return None
    return chosen.prior_from(args.alpha, args.beta, args.gamma)


def stopped_early(result) -> str:
    """The warning for a fit that stopped at its ``max_iter`` before converging, else "".

    ``tol=0`` asks for exactly ``max_iter`` iterations: no warning then.
    """
    options = result.record.plan["options"]
    limit = options.get("max_iter")
    if result.converged or limit is None or result.n_iter < limit or options.get("tol") == 0:
        return ""
    return (
        f"{result.engine} stopped at max_iter={limit} iterations without converging "
        f"(tol {options.get('tol')}); the factors may still change: raise --max-iter, "
        "or see the objective in trace.png"
    )


# ---------------------------------------------------------------------------------------
# commands


def fit_command(args) -> int:
    """Fit DATA (the best model, or one engine at ``--rank``) and write factors, trace,
    summary, saved fit and figures."""
    out = Path(args.out)
    given = None
    if args.rank is None:
        _check_search_flags(args)
        if args.plan is not None:  # read and checked before the data
            given = read_search_plan(args.plan)
    keep = (args.data, args.mask, args.validation, args.plan)
    target = check_output(out, args.force, keep=keep)
    Y = read_data(args, args.data)
    mask = None if args.mask is None else read_mask(args.mask, np.shape(Y))
    validation = None if args.validation is None else read_mask(args.validation, np.shape(Y))
    groups = row_groups_of(args.row_groups, Y)
    data = as_observed(Y, warn_empty=False)  # checked once: the fit and its scores select from it
    if args.rank is None:
        engines = None if args.engine is None else args.engine.split(",")
        result = fit(
            data, engines, mask=mask, validation=validation, seed=args.seed, budget=args.budget,
            search_plan=given, progress=not (args.quiet or args.json),
        )  # fmt: skip
        return _write_fit(args, out, target, data, result, {}, validation, groups)
    if args.budget is not None:
        raise ValueError("--budget is the time of a search: leave out --rank to search")
    if args.plan is not None:
        raise ValueError("--plan replays a search: leave out --rank to replay it")
    args.engine = args.engine or "mm"
    options = parse_options(args.option, scoped=False)
    if args.max_iter is not None:
        options["max_iter"] = args.max_iter
    if args.tol is not None:
        options["tol"] = args.tol
    chosen = get_engine(args.engine)  # an unknown name fails before anything is read or said
    prior = chosen.prior_from(args.alpha, args.beta, args.gamma)  # those not given: defaults
    if "progress" in chosen.options and (args.quiet or args.json):
        options.setdefault("progress", False)
    tell(args, f"fitting {args.engine} with rank {args.rank} to {args.data} ...")
    result = fit(
        data, args.engine, args.rank, mask=mask, prior=prior, seed=args.seed,
        restarts=args.restarts, combine=args.combine, validation=validation, **options,
    )  # fmt: skip
    if stopped_early(result):
        warn(stopped_early(result))
    return _write_fit(args, out, target, data, result, options, validation, groups)


def row_groups_of(path, Y) -> dict | None:
    """The ``--row-groups`` file (None without) as :func:`bernmf.plot.factors` takes it:
    ``{row label: group}`` for DATA ``Y``'s rows, matched by their labels as written
    (``str``; positions 0, 1, ... for DATA without row names), checked before any fit
    (:func:`bernmf.plot.group_rows`); the groups in the file's order, which their colours
    follow."""
    if path is None:
        return None
    from bernmf import plot  # matplotlib loads only for a command that draws

    rows = Y.index if isinstance(Y, pd.DataFrame) else pd.RangeIndex(np.shape(Y)[0])
    written = pd.Index([str(label) for label in rows], dtype=object)
    codes, groups = plot.group_rows(read_groups(path, written), written, f"--row-groups {path}")
    by_group = np.argsort(codes, kind="stable")  # the groups in the file's order
    return {rows[m]: groups[codes[m]] for m in by_group if codes[m] >= 0}


def _check_search_flags(args) -> None:
    """Without ``--rank``: a usage error naming the flags of a single fit that were given."""
    single = {
        "--alpha": args.alpha is not None, "--beta": args.beta is not None,
        "--gamma": args.gamma is not None, "--restarts": args.restarts != 1,
        "--combine": args.combine != "best", "--max-iter": args.max_iter is not None,
        "--tol": args.tol is not None, "--option": bool(args.option),
        "--distributed": args.distributed,
    }  # fmt: skip
    refuse_single_fit(single, "give --rank too")


def _write_fit(args, out: Path, target, data: Observed, result, options: dict, validation,
               groups) -> int:  # fmt: skip
    """Write a fit's (or a search's stack's) files into ``out`` and say what they hold;
    ``data`` is DATA as checked (every entry), ``groups`` (:func:`row_groups_of`) colour the
    rows of ``factors.png``."""
    searched = result.record.search is not None
    members = members_table(result)
    summary = {
        "engine": result.engine,
        "rank": result.rank,
        "prior": None if result.prior is None else result.prior._asdict(),
        "data": str(args.data),
        "shape": list(result.shape),
        "observed_entries": int(result.observed.mask.sum()),
        "options": options,
        "seed": result.seed,
        "n_iter": result.n_iter,
        "converged": result.converged,
        "objective": result.objective,
        "train_perplexity": result.perplexity(result.observed),
        "timings": dict(result.timings),
        "versions": versions(),
        "run": result.record.plan,
    }
    if searched:
        summary["search"] = result.record.search
        summary["stack"] = {"members": int((members["weight"] > 0).sum())}
        summary["held_out"] = held_out_scores(result)
        shown = result.mixture.chosen
        summary["factors"] = {
            "engine": result.members[shown].engine, "rank": result.rank,
            "weight": result.mixture.weights[shown],
            "rule": "the member of largest weight whose factors are probabilities",
        }  # fmt: skip
    elif members is not None:
        summary["ensemble"] = {
            "combine": args.combine,
            "members": len(members),
            "modes": int(members["mode"].nunique()),
        }
    if validation is not None and not searched:
        summary["validation_perplexity"] = result.perplexity(data, validation)
    top, rows = result.top_columns(10), result.top_rows(10)
    summary |= flagged_components(result)
    progress.working_on(f"writing {out}")
    from bernmf import plot  # matplotlib loads only for a command that draws

    with atomic_output(target, folder=True) as folder:
        if members is not None:
            write_csv(members, folder / "members.csv", index=False)
        write_csv(result.frames.W, folder / "W.csv")
        write_csv(result.frames.H, folder / "H.csv")
        write_csv(top, folder / "top_columns.csv", index=False)
        write_csv(rows, folder / "top_rows.csv", index=False)
        if searched:  # a stack's P(Y=1) is its mixture's, not its factors' W @ H
            write_probabilities(result, folder)
        trace = pd.DataFrame({"iteration": range(len(result.trace)), "objective": result.trace})
        write_csv(trace, folder / "trace.csv", index=False)
        write_json(folder / "summary.json", summary)
        if searched:
            write_json(folder / PLAN_FILE, result.record.search["plan"])
        result.save(folder / "fit.npz", metadata={"options": options, "data": str(args.data)})
        plot.factors(result, path=folder / "factors.png", row_groups=groups)
        plot.traces(result, path=folder / "trace.png")
    summary["out"] = str(out)
    shown = ("engine", "rank", "n_iter", "converged", "objective", "train_perplexity")
    if searched:  # the held-out entries are training data of the refit stack
        shown = ("engine", "rank", "train_perplexity")
    elif validation is not None:
        shown += ("validation_perplexity",)
    table = pd.DataFrame([{k: summary[k] for k in shown}])
    show(args, table, summary)
    if searched:
        factors = summary["factors"]
        say(
            args,
            f"W.csv, H.csv and the figures are the factors of the stack's {factors['engine']} "
            f"member at K={result.rank} (weight {factors['weight']:.2f}), {factors['rule']}; "
            f"{PROBABILITIES} holds the stack's P(Y=1) of every entry, the missing ones "
            f"included; members.csv lists every member and its weight; {PLAN_FILE} its "
            "steps (--plan replays them)",
        )
    elif members is not None:
        ensemble = summary["ensemble"]
        say(
            args,
            f"ensemble of {ensemble['members']} members ({args.combine}) in "
            f"{ensemble['modes']} distinct mode(s); members.csv lists them",
        )
    say(args, "top columns of each component (H):\n" + top_lines(top))
    say(args, "top rows of each component (W):\n" + top_lines(rows))
    say(args, f"results in {out}")
    return 0


def flagged_components(result) -> dict:
    """Warn of the components shown that do not stand for a part of the rows of their own: the
    empty ones (:meth:`bernmf.Fit.empty_components`) and the pairs of duplicates
    (:meth:`bernmf.Fit.duplicate_components`). Returns them as ``summary.json`` keeps them:
    ``{"empty_components": [name, ...], "duplicate_components": [[name, name], ...]}``."""
    empty, duplicates = result.empty_components(), result.duplicate_components()

    def listed(items: list[str]) -> str:
        return ", ".join(items[:5]) + (", ..." if len(items) > 5 else "")

    if empty:
        warn(
            f"{len(empty)} of the {result.rank} components shown ({listed(empty)}) hold less "
            "than one row in all (their column of W sums below 1): empty, their H set by the "
            "prior alone; a smaller rank fits as well"
        )
    if duplicates:
        pairs = listed([f"{a} and {b}" for a, b in duplicates])
        warn(
            f"{len(duplicates)} pair(s) of the {result.rank} components shown ({pairs}) have "
            "nearly the same H (a row made of one tells them apart by less than 1 nat): "
            "duplicates that share their rows; a smaller rank fits as well"
        )
    return {"empty_components": empty, "duplicate_components": [list(p) for p in duplicates]}


PROBABILITIES = "probs.csv"
"""The file of ``bernmf fit``'s predicted P(Y=1) of every entry (labelled as the data)."""


def write_probabilities(result, folder: Path) -> None:
    """Write the fit's P(Y=1) of every entry, the missing ones included, labelled as the
    data, to :data:`PROBABILITIES` in ``folder``: a matrix's worth of text (about 10 bytes
    an entry), written block by block (:meth:`bernmf.Fit.probs_blocks`)."""
    rows, columns = result.frames.W.index, result.frames.H.columns
    with open(folder / PROBABILITIES, "w", encoding="utf-8", newline="") as stream:
        for start, probs in result.probs_blocks():
            block = pd.DataFrame(probs, index=rows[start : start + len(probs)], columns=columns)
            write_csv(block, stream, header=start == 0, float_format="%.6g")


def top_lines(top: pd.DataFrame, shown: int = 5) -> str:
    """One line per component of :meth:`bernmf.Fit.top_columns` (its first columns and H)
    or of :meth:`bernmf.Fit.top_rows` (its first rows and W)."""
    label, value = ("column", "H") if "column" in top else ("row", "W")
    lines = []
    for component, group in top.groupby("component", sort=False):
        first = group.head(shown)
        named = ", ".join(f"{c} {v:.2f}" for c, v in zip(first[label], first[value], strict=True))
        lines.append(f"  {component}: {named}" + (", ..." if len(group) > shown else ""))
    return "\n".join(lines)


def compare_command(args) -> int:
    """Engines x ranks x seeds on one train/test split; a table of held-out perplexity."""
    out = Path(args.out)
    target = check_output(out, args.force, keep=(args.data, args.data_dir))
    engines_ = available() if args.engines == ["all"] else args.engines
    for name in engines_:
        get_engine(name)  # unknown names fail here, before any fit
    options = parse_options(args.option, scoped=True)
    unknown = sorted(set(options) - set(engines_))
    if unknown:
        raise ValueError(f"--option names engine(s) {unknown} that are not compared")
    Y, source = load_data(args)
    if Y is None:
        truth = Prior(0.3, 0.6, 0.5)
        Y, _, _ = simulate(args.seed, args.rows, args.cols, args.true_rank, truth)
        source = (
            f"simulated {args.rows} x {args.cols}, rank {args.true_rank}, "
            f"H ~ Beta(0.3, 0.6), W ~ Dirichlet(0.5), seed {args.seed}"
        )
    shape = np.shape(Y)
    validation = None
    if args.dataset is not None:  # its validation entries weigh the stacked rows
        split, validation = paper_split(shape), paper_split(shape).validation
        split_name = "the paper's split (train 70%, validation 15%: stacking, test 15%)"
    else:
        split = random_split(shape, (1 - args.test, 0.0, args.test), seed=args.seed)
        split_name = f"random entries, {args.test:.0%} test (seed {args.seed})"
    say(args, f"data: {source}; split: {split_name}")
    comparison = compare(
        Y,
        engines_,
        args.ranks,
        range(args.seeds),
        train=split.train,
        test=split.test,
        priors={engine: prior_of(args, engine) for engine in engines_},
        options=options,
        progress=not (args.quiet or args.json),
        validation=validation,
    )
    fits, table = comparison.fits, comparison.summary
    summary = {
        "data": source,
        "split": split_name,
        "shape": list(shape),
        "options": options,
        "table": table.to_dict(orient="records"),
        "versions": versions(),
    }
    from bernmf import plot  # matplotlib loads only for a command that draws

    with atomic_output(target, folder=True) as folder:
        write_csv(fits, folder / "fits.csv", index=False)
        write_csv(table, folder / "summary.csv", index=False)
        write_json(folder / "summary.json", summary)
        ranks = np.where(fits["rank"] > 0, " K=" + fits["rank"].astype(str), "")  # 0: stacked
        labelled = fits.assign(engine=fits["engine"] + ranks)
        plot.perplexity_boxplot(labelled, path=folder / "perplexity.png")
    summary["out"] = str(out)
    show(args, table, summary)
    say(
        args,
        "perplexity: mean negative log-likelihood per test entry (nats), mean ± sd over "
        f"seeds; seconds: run time per fit, without compilation\nresults in {out}",
    )
    return 0
