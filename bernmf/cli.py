"""The ``bernmf`` command line: fit, compare, tune, report, reproduce, demo.

Every command takes ``--quiet``, ``--json`` and ``--debug``; exit codes are 0
(success), 1 (an error, reported in one line), 2 (a usage error) and 130
(interrupted with Ctrl-C). Results go to a new folder, written under a temporary
name and published when complete (:func:`bernmf._output.atomic_output`): never
over a folder that appeared meanwhile, and with ``--force`` only over the folder
that existed at the start.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from bernmf import datasets, report, tune
from bernmf._output import atomic_output, check_output, to_json, write_json
from bernmf.api import fit
from bernmf.comparison import compare
from bernmf.ensemble import COMBINES
from bernmf.experiments import paper
from bernmf.inference import available, get_engine
from bernmf.io import versions
from bernmf.models import Prior, perplexity, simulate
from bernmf.readers import read_codes, read_mask, read_matrix
from bernmf.split import paper_split, random_split


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


def load_data(args) -> tuple[object, str]:
    """The data of ``compare`` and ``tune``: DATA, ``--dataset`` or a simulation."""
    if args.data is not None and args.dataset is not None:
        raise ValueError("give either DATA or --dataset, not both")
    if args.data is not None:
        return read_matrix(args.data), str(args.data)
    if args.dataset is not None:
        return datasets.load(args.dataset, data_dir=args.data_dir), args.dataset
    return None, "simulated"


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


def comma_list(kind):
    """An argparse type: ``"2,4,8"`` -> [2, 4, 8] (a usage error otherwise)."""

    def parse(text: str) -> list:
        try:
            values = [kind(v) for v in text.split(",") if v.strip()]
        except ValueError:
            values = []
        if not values:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated list of {kind.__name__}, got {text!r}"
            )
        return values

    return parse


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (a usage error naming the value otherwise)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def say(args, message: str) -> None:
    """An informational line, unless --quiet or --json."""
    if not (args.quiet or args.json):
        print(message, flush=True)


def show(args, table: pd.DataFrame, summary: dict) -> None:
    """The result: JSON on stdout with --json, else the table (nothing with --quiet)."""
    if args.json:
        print(json.dumps(to_json(summary), indent=2, allow_nan=False))
    elif not args.quiet:
        with pd.option_context("display.width", 160, "display.max_columns", 30):
            print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))


def prior_of(args, engine: str) -> Prior | None:
    """The --alpha/--beta/--gamma prior for an engine that takes one, else None."""
    chosen = get_engine(engine)
    if not chosen.takes_prior:
        return None
    default = chosen.default_prior
    return Prior(
        default.alpha if args.alpha is None else args.alpha,
        default.beta if args.beta is None else args.beta,
        default.gamma if args.gamma is None else args.gamma,
    )


def members_table(result) -> pd.DataFrame | None:
    """One row per member of an ensemble (seed, objective, weight, mode, ...); None for one fit."""
    if not result.members:
        return None
    record = result.extras["restarts"]
    columns = ("seeds", "objectives", "n_iter", "converged", "weights", "modes")
    columns += ("validation_perplexity",) * ("validation_perplexity" in record)
    table = pd.DataFrame({k: record[k] for k in columns})
    singular = {"seeds": "seed", "objectives": "objective", "weights": "weight", "modes": "mode"}
    return table.rename(columns=singular)


def scored(Y, result, mask) -> float:
    """Perplexity of ``result`` on the entries of Y selected by ``mask`` (NaN never scored)."""
    return result.perplexity(Y, mask)


# ---------------------------------------------------------------------------------------
# commands


def fit_command(args) -> int:
    """Fit one engine to DATA and write factors, trace, summary, saved fit and figures."""
    if args.distributed:  # one process of several, each with its rows (bernmf.launch)
        from bernmf.launch import fit_part

        summary = fit_part(args)
        say(args, f"rows {summary['rows']} done; results in {args.out}")
        return 0
    out = Path(args.out)
    target = check_output(out, args.force, keep=(args.data, args.mask, args.validation))
    Y = read_matrix(args.data)
    mask = None if args.mask is None else read_mask(args.mask, np.shape(Y))
    validation = None if args.validation is None else read_mask(args.validation, np.shape(Y))
    options = parse_options(args.option, scoped=False)
    if args.max_iter is not None:
        options["max_iter"] = args.max_iter
    if args.tol is not None:
        options["tol"] = args.tol
    given = (args.alpha, args.beta, args.gamma)
    prior = None
    if any(v is not None for v in given):
        prior = Prior(*(1.0 if v is None else v for v in given))
    chosen = get_engine(args.engine)  # an unknown name fails before anything is read or said
    if "progress" in chosen.options and (args.quiet or args.json):
        options.setdefault("progress", False)
    say(args, f"fitting {args.engine} with rank {args.rank} to {args.data} ...")
    result = fit(
        Y, args.engine, args.rank, mask=mask, prior=prior, seed=args.seed,
        restarts=args.restarts, combine=args.combine, validation=validation, **options,
    )  # fmt: skip
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
        "train_perplexity": scored(Y, result, result.observed.mask),
        "timings": dict(result.timings),
        "versions": versions(),
        "run": result.extras["run"],
    }
    if members is not None:
        summary["ensemble"] = {
            "combine": args.combine,
            "members": len(members),
            "modes": int(members["mode"].nunique()),
        }
    if validation is not None:
        summary["validation_perplexity"] = result.perplexity(Y, validation)
    top = result.top_columns(10)
    from bernmf import plot  # matplotlib loads only for a command that draws

    with atomic_output(target, folder=True) as folder:
        if members is not None:
            members.to_csv(folder / "members.csv", index=False)
        result.frames.W.to_csv(folder / "W.csv")
        result.frames.H.to_csv(folder / "H.csv")
        top.to_csv(folder / "top_columns.csv", index=False)
        trace = pd.DataFrame({"iteration": range(len(result.trace)), "objective": result.trace})
        trace.to_csv(folder / "trace.csv", index=False)
        write_json(folder / "summary.json", summary)
        result.save(folder / "fit.npz", metadata={"options": options, "data": str(args.data)})
        plot.factors(result, path=folder / "factors.png")
        plot.traces(result, path=folder / "trace.png")
    summary["out"] = str(out)
    shown = ("engine", "rank", "n_iter", "converged", "objective", "train_perplexity")
    shown += ("validation_perplexity",) * (validation is not None)
    table = pd.DataFrame([{k: summary[k] for k in shown}])
    show(args, table, summary)
    if members is not None:
        ensemble = summary["ensemble"]
        say(
            args,
            f"ensemble of {ensemble['members']} members ({args.combine}) in "
            f"{ensemble['modes']} distinct mode(s); members.csv lists them",
        )
    say(args, "top columns of each component (H):\n" + top_lines(top))
    say(args, f"results in {out}")
    return 0


def top_lines(top: pd.DataFrame, shown: int = 5) -> str:
    """One line per component of :meth:`bernmf.Fit.top_columns`: its first columns and H."""
    lines = []
    for component, group in top.groupby("component", sort=False):
        first = group.head(shown)
        named = ", ".join(f"{c} {h:.2f}" for c, h in zip(first["column"], first["H"], strict=True))
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
    if args.dataset is not None:
        split = paper_split(shape)
        split_name = "the paper's split (train 70%, test 15%)"
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
        fits.to_csv(folder / "fits.csv", index=False)
        table.to_csv(folder / "summary.csv", index=False)
        write_json(folder / "summary.json", summary)
        labelled = fits.assign(engine=fits["engine"] + " K=" + fits["rank"].astype(str))
        plot.perplexity_boxplot(labelled, path=folder / "perplexity.png")
    summary["out"] = str(out)
    show(args, table, summary)
    say(
        args,
        "perplexity: mean negative log-likelihood per test entry (nats), mean ± sd over "
        f"seeds; seconds: run time per fit, without compilation\nresults in {out}",
    )
    return 0


def tune_command(args) -> int:
    """MM over rank x alpha x beta on validation entries; best setting scored on test."""
    out = Path(args.out)
    target = check_output(out, args.force, keep=(args.data, args.data_dir, args.split))
    ranks, alphas, betas = args.ranks, args.alphas, args.betas
    Y, source = load_data(args)
    if Y is None:
        raise ValueError("tune needs DATA or --dataset")
    shape = np.shape(Y)
    if args.split is not None:
        split = read_codes(args.split, Y)
        split_name = f"codes from {args.split}"
    elif args.dataset is not None:
        split, split_name = paper_split(shape), "the paper's split (70/15/15, seed 12345)"
    else:
        split = random_split(shape, seed=args.seed)
        split_name = f"random entries 70/15/15 (seed {args.seed})"
    say(args, f"data: {source} {shape}; split: {split_name}")
    options = {"max_iter": args.max_iter, "tol": args.tol}
    tuning = tune.grid(
        Y,
        ranks,
        alphas,
        betas,
        mask=split.train,
        validation=split.validation,
        gamma=args.gamma,
        restarts=args.restarts,
        combine=args.combine,
        seed=args.seed,
        progress=not (args.quiet or args.json),
        **options,
    )
    best = tuning.best
    prior = Prior(best["alpha"], best["beta"], args.gamma)
    if args.combine is None:
        chosen = {"seed": best["seed"]}
    else:  # the ensemble the grid scored, refitted with its members
        chosen = {"seed": args.seed, "restarts": args.restarts, "combine": args.combine}
    result = fit(Y, "mm", best["rank"], mask=split.train, prior=prior, **chosen, **options)
    best = {**best, "gamma": args.gamma, "test_perplexity": scored(Y, result, split.test)}
    summary = {"data": source, "split": split_name, "best": best, "versions": versions()}
    from bernmf import plot  # matplotlib loads only for a command that draws

    with atomic_output(target, folder=True) as folder:
        tuning.table.to_csv(folder / "grid.csv", index=False)
        if tuning.ensembles is not None:
            tuning.ensembles.to_csv(folder / "ensembles.csv", index=False)
        write_json(folder / "summary.json", summary)
        plot.validation_heatmap(tuning.table, best["rank"], path=folder / "validation.png")
        result.save(folder / "best_fit.npz", metadata={"options": options, "data": source})
    summary["out"] = str(out)
    show(args, pd.DataFrame([best]), summary)
    say(args, f"results in {out}")
    return 0


def report_command(args) -> int:
    """Every engine, tuned on validation, scored on test: CSV, Pareto plot and HTML page."""
    out = Path(args.out)
    target = check_output(out, args.force, keep=(args.data, args.data_dir))
    engines_ = available() if args.engines == ["all"] else args.engines
    for name in engines_:
        get_engine(name)  # unknown names fail here, before any data is read
    if args.data is not None and args.datasets is not None:
        raise ValueError("give either DATA or --datasets, not both")
    if args.data is not None:
        data = {Path(args.data).stem: read_matrix(args.data)}
    else:
        names = args.datasets or (["animals"] if args.quick else list(datasets.DATASETS))
        data = {name: datasets.load(name, data_dir=args.data_dir) for name in names}
    say(args, f"report: {', '.join(engines_)} on {', '.join(data)} (the paper's split)")
    result = report.run(
        data, engines_, ranks=args.ranks, shared_rank=args.shared_rank, seeds=range(args.seeds),
        ensembles=args.ensembles, restarts=args.restarts, quick=args.quick,
        progress=not (args.quiet or args.json),
    )  # fmt: skip
    with atomic_output(target, folder=True) as folder:
        report.write(result, folder)
        write_json(folder / "environment.json", result.environment)
    board = report.leaderboard(result.fits)
    summary = {"out": str(out), "leaderboard": board.to_dict(orient="records")}
    show(args, board, summary)
    say(args, f"results in {out}: report.html, fits.csv, leaderboard.csv, pareto.png")
    return 0


def reproduce_command(args) -> int:
    """Run :func:`bernmf.experiments.paper.main` (the paper's protocol) with these options."""
    out = Path(args.out)
    variant = out / ("as_published" if args.as_published else "corrected")
    check_output(variant, args.force)
    argv = ["--out", str(out)]
    argv += ["--as-published"] * args.as_published + ["--quick"] * args.quick
    argv += ["--quiet"] * (args.quiet or args.json)
    if args.datasets:
        argv += ["--datasets", *args.datasets]
    if args.data_dir:
        argv += ["--data-dir", str(args.data_dir)]
    if args.json:
        with contextlib.redirect_stdout(sys.stderr):
            code = paper.main(argv)
        summary = pd.read_csv(variant / "summary.csv")
        records = to_json(summary.to_dict("records"))
        print(json.dumps({"out": str(variant), "summary": records}, allow_nan=False))
        return code
    if args.quiet:
        with contextlib.redirect_stdout(io.StringIO()):
            return paper.main(argv)
    return paper.main(argv)


# ---------------------------------------------------------------------------------------
# parser

EXAMPLES = {
    "fit": """examples:
  bernmf fit animals.csv --rank 4 --alpha 1.2 --beta 1.5 --out results/animals-k4
  bernmf fit data.npz --engine em --rank 8 --mask train.csv --seed 3 --out results/em
  bernmf fit data.csv --rank 4 --option dtype=float32 --json --out results/f32

DATA: .csv (first column row names, header column names, empty cell = missing),
.parquet (needs pyarrow), or .npz (array 'Y'). --mask: same formats, 1 = use the entry.
Writes W.csv, H.csv, top_columns.csv (the 10 columns of largest H per component),
trace.csv, summary.json, fit.npz (bernmf.load), factors.png, trace.png.""",
    "compare": """examples:
  bernmf compare --out results/compare                    # simulated data, offline
  bernmf compare --dataset animals --engines mm,em --ranks 2,4,8 --seeds 5 --out results/cmp
  bernmf compare data.csv --engines all --option mm.max_iter=500 --out results/cmp

Prior-taking engines get --alpha/--beta/--gamma; the others none.
Writes fits.csv (every fit), summary.csv, summary.json, perplexity.png.""",
    "tune": """examples:
  bernmf tune --dataset animals --ranks 2,4,8 --alphas 1,1.5,2,3 --betas 1,1.5,2,3 --out t
  bernmf tune data.csv --split split_codes.csv --ranks 4 --restarts 3 --out t

--split: codes 2 = train, 1 = validation, 0 = test, one per entry of DATA: a CSV like
the paper's split files (no header, no row names; or labelled as DATA, any order),
.npz or .parquet.
Writes grid.csv, summary.json, validation.png and best_fit.npz.""",
    "report": """examples:
  bernmf report --quick --out results/report-quick          # animals, about a minute
  bernmf report --engines mm,em,vb,logsvd,logpca --data-dir ../shared/data --out results/report
  bernmf report data.csv --engines mm,em --out results/mine

Each engine's rank (and mm's prior) is chosen on the validation entries of the paper's
split, then scored on its test entries over --seeds seeds, also at --shared-rank; the
--ensembles engines also as an ensemble of --restarts members combined by stacking.
Writes report.html (stands alone), fits.csv (one row per test fit), leaderboard.csv,
pareto.png (test perplexity against seconds) and environment.json.""",
    "reproduce": """examples:
  bernmf reproduce paper --quick --out results/paper-quick
  bernmf reproduce paper --as-published --data-dir ../shared/data

Runs bernmf.experiments.paper (installed with the package); outputs in OUT/corrected
or OUT/as_published; see that module for the protocol.""",
}


def common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--quiet", action="store_true", help="no progress and no table")
    common.add_argument("--json", action="store_true", help="print the result as JSON")
    common.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    return common


def output_options(parser, default: str | None = None) -> None:
    parser.add_argument(
        "--out", required=default is None, default=default, help="results folder (must be new)"
    )
    parser.add_argument(
        "--force", action="store_true", help="replace the --out folder that exists at the start"
    )


def prior_options(parser, default: float | None = None) -> None:
    hint = "the engine's default" if default is None else default
    parser.add_argument("--alpha", type=float, default=default, help=f"Beta alpha ({hint})")
    parser.add_argument("--beta", type=float, default=default, help=f"Beta beta ({hint})")
    parser.add_argument("--gamma", type=float, default=None, help="Dirichlet gamma (engine's)")


def data_options(parser) -> None:
    parser.add_argument("data", nargs="?", default=None, help="DATA file (.csv, .parquet, .npz)")
    parser.add_argument("--dataset", choices=tuple(datasets.DATASETS), help="a paper dataset")
    parser.add_argument("--data-dir", default=None, help="folder with <dataset>.csv or .rda")


def add_command(commands, name: str, help: str, common) -> argparse.ArgumentParser:
    return commands.add_parser(
        name,
        help=help,
        description=help,
        epilog=EXAMPLES.get(name),
        parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bernmf",
        description="Binary matrix factorization with mean-parametrized Bernoulli models.",
        epilog="Run 'bernmf COMMAND --help' for a command's options and examples. "
        "Exit codes: 0 success, 1 error, 2 usage, 130 interrupted.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    common = common_options()

    fit_parser = add_command(commands, "fit", "fit one engine to a data file", common)
    fit_parser.add_argument("data", help="DATA file (.csv, .parquet, .npz)")
    fit_parser.add_argument("--engine", default="mm", help="an engine (default mm)")
    fit_parser.add_argument("--rank", type=int, required=True, help="number of components K")
    prior_options(fit_parser)
    fit_parser.add_argument("--mask", help="file of the entries to fit on (1 = use)")
    fit_parser.add_argument("--seed", type=int, default=0, help="initialization seed (0)")
    fit_parser.add_argument(
        "--restarts", type=int, default=1, help="members of an ensemble, seeds SEED, SEED+1, ..."
    )
    fit_parser.add_argument(
        "--combine", choices=COMBINES, default="best", help="how members combine (best)"
    )
    fit_parser.add_argument(
        "--validation", help="file of held-out entries that weigh --combine stack (1 = use)"
    )
    fit_parser.add_argument("--max-iter", type=int, help="iteration limit (engine's default)")
    fit_parser.add_argument("--tol", type=float, help="stopping tolerance (engine's default)")
    fit_parser.add_argument(
        "--option", action="append", metavar="KEY=VALUE", help="another engine option"
    )
    fit_parser.add_argument(
        "--distributed", action="store_true", help="one process of a multi-process fit (mm, em)"
    )
    for flag, text in [
        ("--coordinator", "host:port of process 0 (or BERNMF_COORDINATOR)"),
        ("--num-processes", "processes (or BERNMF_NUM_PROCESSES, SLURM_NTASKS)"),
        ("--process-id", "this process's index (or BERNMF_PROCESS_ID, SLURM_PROCID)"),
    ]:
        fit_parser.add_argument(flag, help=text)
    output_options(fit_parser)
    fit_parser.set_defaults(run=fit_command)

    compare_parser = add_command(
        commands, "compare", "held-out perplexity of engines x ranks x seeds", common
    )
    data_options(compare_parser)
    compare_parser.add_argument(
        "--engines", type=comma_list(str), default="mm,em", help="comma list, or 'all'"
    )
    compare_parser.add_argument(
        "--ranks", type=comma_list(int), default="4", help="comma list of K (default 4)"
    )
    compare_parser.add_argument(
        "--seeds", type=positive_int, default=3, help="seeds per setting, >= 1 (3)"
    )
    compare_parser.add_argument("--test", type=float, default=0.2, help="test fraction (0.2)")
    prior_options(compare_parser, default=1.2)
    compare_parser.add_argument(
        "--option", action="append", metavar="ENGINE.KEY=VALUE", help="an engine's option"
    )
    compare_parser.add_argument("--rows", type=int, default=200, help="simulated M (200)")
    compare_parser.add_argument("--cols", type=int, default=100, help="simulated N (100)")
    compare_parser.add_argument("--true-rank", type=int, default=4, help="simulated K (4)")
    compare_parser.add_argument("--seed", type=int, default=0, help="data and split seed (0)")
    output_options(compare_parser)
    compare_parser.set_defaults(run=compare_command)

    tune_parser = add_command(
        commands, "tune", "choose rank, alpha, beta of mm on validation entries", common
    )
    data_options(tune_parser)
    tune_parser.add_argument("--split", help="CSV of split codes (2 train, 1 valid., 0 test)")
    tune_parser.add_argument(
        "--ranks", type=comma_list(int), default="2,4,8", help="comma list (2,4,8)"
    )
    tune_parser.add_argument(
        "--alphas", type=comma_list(float), default="1,1.5,2,3", help="comma list (1,1.5,2,3)"
    )
    tune_parser.add_argument(
        "--betas", type=comma_list(float), default="1,1.5,2,3", help="comma list (1,1.5,2,3)"
    )
    tune_parser.add_argument("--gamma", type=float, default=1.0, help="Dirichlet gamma (1)")
    tune_parser.add_argument("--restarts", type=int, default=1, help="seeds per setting (1)")
    tune_parser.add_argument(
        "--combine",
        choices=("mean", "best"),
        help="score each setting's ensemble of --restarts fits (uniform mixture or best)",
    )
    tune_parser.add_argument("--seed", type=int, default=0, help="first seed (0)")
    tune_parser.add_argument("--max-iter", type=int, default=2000, help="(2000)")
    tune_parser.add_argument("--tol", type=float, default=1e-5, help="(1e-5)")
    output_options(tune_parser)
    tune_parser.set_defaults(run=tune_command)

    report_parser = add_command(
        commands, "report", "engines tuned and scored on the paper's split: an HTML report", common
    )
    report_parser.add_argument("data", nargs="?", default=None, help="DATA file instead")
    report_parser.add_argument(
        "--datasets", type=comma_list(str), default=None, help="comma list (all; --quick: animals)"
    )
    report_parser.add_argument("--data-dir", default=None, help="folder with <dataset>.csv or .rda")
    report_parser.add_argument(
        "--engines", type=comma_list(str), default="all", help="comma list, or 'all' (all)"
    )
    report_parser.add_argument(
        "--ranks", type=comma_list(int), default="2,4,8", help="ranks tuned on validation (2,4,8)"
    )
    report_parser.add_argument("--shared-rank", type=int, default=4, help="rank for all (4)")
    report_parser.add_argument("--seeds", type=int, default=3, help="test fits per setting (3)")
    report_parser.add_argument(
        "--ensembles", type=comma_list(str), default="mm", help="engines also as ensembles (mm)"
    )
    report_parser.add_argument("--restarts", type=int, default=4, help="ensemble members (4)")
    report_parser.add_argument(
        "--quick", action="store_true", help="few iterations, one rank, 2 seeds (about a minute)"
    )
    output_options(report_parser)
    report_parser.set_defaults(run=report_command)

    reproduce_parser = add_command(
        commands, "reproduce", "reproduce the paper's experiment", common
    )
    reproduce_parser.add_argument("study", choices=("paper",), help="what to reproduce")
    reproduce_parser.add_argument("--as-published", action="store_true", help="published defects")
    reproduce_parser.add_argument("--quick", action="store_true", help="a smoke run (animals)")
    reproduce_parser.add_argument("--datasets", nargs="+", choices=tuple(datasets.DATASETS))
    reproduce_parser.add_argument("--data-dir", default=None, help="folder with the data")
    output_options(reproduce_parser, default="results/paper")
    reproduce_parser.set_defaults(run=reproduce_command)

    demo_parser = add_command(
        commands, "demo", "fit em and mm on data simulated from the model (no download)", common
    )
    demo_parser.description = (
        "Simulate Y from the model, hold out entries, fit em and mm at several "
        "ranks, and print iterations, objective, held-out perplexity and seconds."
    )
    demo_parser.epilog = "example: bernmf demo --rows 500 --cols 200 --ranks 2 4 8"
    demo_parser.add_argument("--rows", type=int, default=400, help="rows M (default 400)")
    demo_parser.add_argument("--cols", type=int, default=200, help="columns N (default 200)")
    demo_parser.add_argument("--true-rank", type=int, default=4, help="simulated K (default 4)")
    demo_parser.add_argument(
        "--ranks", type=int, nargs="+", default=[2, 4, 8], help="ranks to fit (default 2 4 8)"
    )
    demo_parser.add_argument(
        "--alpha", type=float, default=0.3, help="simulated H ~ Beta(alpha, beta) (default 0.3)"
    )
    demo_parser.add_argument("--beta", type=float, default=0.6, help="(default 0.6)")
    demo_parser.add_argument(
        "--gamma", type=float, default=0.5, help="simulated W ~ Dirichlet(gamma) (default 0.5)"
    )
    demo_parser.add_argument(
        "--mm-alpha", type=float, default=1.2, help="prior alpha of the mm fits (default 1.2)"
    )
    demo_parser.add_argument(
        "--mm-beta", type=float, default=1.2, help="prior beta of the mm fits (default 1.2)"
    )
    demo_parser.add_argument(
        "--holdout", type=float, default=0.2, help="fraction held out (default 0.2)"
    )
    demo_parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo_parser.set_defaults(run=demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``bernmf`` command; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo" and not 0 < args.holdout < 1:
        parser.error(f"--holdout must be between 0 and 1, got {args.holdout}")
    if args.command == "compare" and not 0 < args.test < 1:
        parser.error(f"--test must be between 0 and 1, got {args.test}")
    try:
        return args.run(args)
    except KeyboardInterrupt:  # temporary results are already removed
        print("bernmf: interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        if args.debug:
            raise
        message = " ".join(str(error).split()) or type(error).__name__
        print(f"bernmf: error: {message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
