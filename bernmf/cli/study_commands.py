"""The commands that run a study: ``bernmf tune``, ``bernmf report`` and ``bernmf reproduce``.

Each is ``<name>_command(args) -> exit code``, as those of :mod:`bernmf.cli.commands`, whose
helpers (reading the data, messages and tables) they share.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from bernmf import tune
from bernmf._output import atomic_output, check_output, to_json, write_json
from bernmf._progress import working_on
from bernmf.cli.commands import declared, load_data, read_data, say, show, tell
from bernmf.data import datasets
from bernmf.data.files.csv_table import write_csv
from bernmf.data.files.readers import read_codes
from bernmf.data.observed import as_observed
from bernmf.data.split import TEST, TRAIN, VALIDATION, paper_split, random_split
from bernmf.fitting.search import check_engines
from bernmf.fitting.stack import members_table
from bernmf.inference import available, get_engine
from bernmf.results.loading import versions
from bernmf.studies.report import run as report
from bernmf.studies.runner import registry


def tune_command(args) -> int:
    """Engines x rank (x alpha x beta) on validation entries; the best setting scored on test."""
    out = Path(args.out)
    target = check_output(out, args.force, keep=(args.data, args.data_dir, args.split))
    engines = check_engines(args.engines)  # unknown names fail here, before any data is read
    ranks, alphas, betas = args.ranks, args.alphas, args.betas
    if any(engine.takes_prior for engine in engines):
        alphas = tune.PRIOR_GRID if alphas is None else alphas
        betas = tune.PRIOR_GRID if betas is None else betas
    elif alphas is not None or betas is not None:
        flags = " and ".join(f for f, v in (("--alphas", alphas), ("--betas", betas)) if v)
        names = ", ".join(engine.name for engine in engines)
        raise ValueError(f"{flags} set a Beta prior, but {names} take no prior")
    Y, source = load_data(args)
    if Y is None:
        raise ValueError("tune needs DATA or --dataset")
    shape = np.shape(Y)
    if args.split is not None:
        split = read_codes(args.split, Y)
        split_name = f"codes from {args.split}"
        for part, code in (("train", TRAIN), ("validation", VALIDATION), ("test", TEST)):
            if not getattr(split, part).any():
                raise ValueError(f"the split {args.split} has no {part} entry (code {code})")
    elif args.dataset is not None:
        split, split_name = paper_split(shape), "the paper's split (70/15/15, seed 12345)"
    else:
        split = random_split(shape, seed=args.seed)
        split_name = f"random entries 70/15/15 (seed {args.seed})"
    say(args, f"data: {source} {shape}; split: {split_name}")
    data = as_observed(Y, warn_empty=False)  # checked once: the grid and the test select from it
    given = {"max_iter": args.max_iter, "tol": args.tol}
    options = {key: value for key, value in given.items() if value is not None}
    tuning = tune.grid(
        data,
        ranks,
        alphas,
        betas,
        mask=split.train,
        validation=split.validation,
        engines=[engine.name for engine in engines],
        gamma=args.gamma,
        restarts=args.restarts,
        combine=args.combine,
        refit=args.refit,
        seed=args.seed,
        extend=args.extend,
        progress=not (args.quiet or args.json),
        **options,
    )
    best = {**tuning.best, "gamma": None if tuning.best["alpha"] is None else args.gamma}
    if args.combine == "stack":  # every fit of the grid, stacked on validation (--refit)
        result = tuning.stacked
        stacked = result.mixture.stacking.validation_perplexity
        best = {**best, "stack_validation_perplexity": stacked}
    else:  # the fit, or the ensemble, the grid scored
        result = tuning.best_fit
    best = {**best, "test_perplexity": result.perplexity(data, split.test)}
    summary = {
        "data": source, "split": split_name, "split_file": str(out / SPLIT_FILE), "best": best,
        "notes": tuning.notes, "versions": versions(),
    }  # fmt: skip
    from bernmf import plot  # matplotlib loads only for a command that draws

    working_on(f"writing {out}")
    with atomic_output(target, folder=True) as folder:
        write_csv(tuning.table, folder / "grid.csv", index=False)
        write_codes(split, Y, folder / SPLIT_FILE)
        if tuning.ensembles is not None:
            write_csv(tuning.ensembles, folder / "ensembles.csv", index=False)
        if tuning.stacked is not None:
            write_csv(members_table(tuning.stacked), folder / "members.csv", index=False)
        write_json(folder / "summary.json", summary)
        with_prior = tuning.table.dropna(subset=["alpha"])
        if len(with_prior):  # the best engine that takes a prior, at its best rank
            first = with_prior.loc[with_prior["validation_perplexity"].fillna(np.inf).idxmin()]
            heat = with_prior[with_prior["engine"] == first["engine"]]
            plot.validation_heatmap(heat, int(first["rank"]), path=folder / "validation.png")
        result.save(folder / "best_fit.npz", metadata={"options": options, "data": source})
    working_on(None)
    summary["out"] = str(out)
    show(args, pd.DataFrame([best]), summary)
    say(args, f"split saved as {out / SPLIT_FILE} (--split reads it back)")
    say(args, f"results in {out}")
    return 0


SPLIT_FILE = "split.csv"
"""The split's codes that ``bernmf tune`` writes beside its results (``--split`` reads them)."""


def write_codes(split, Y, path) -> None:
    """Write ``split``'s codes (2 train, 1 validation, 0 test) as :func:`read_codes` reads
    them: labelled as Y when Y is a DataFrame (aligned by label), else a bare grid of
    integers like the paper's split files."""
    codes = split.codes()
    if isinstance(Y, pd.DataFrame):
        write_csv(pd.DataFrame(codes, index=Y.index, columns=Y.columns), path)
    else:
        np.savetxt(path, codes, fmt="%d", delimiter=",")


def report_command(args) -> int:
    """Every engine, tuned on validation, scored on test: CSV, Pareto plot and HTML page."""
    out = Path(args.out)
    target = check_output(out, args.force, keep=(args.data, args.data_dir))
    engines_ = available() if args.engines == ["all"] else args.engines
    for name in engines_:
        get_engine(name)  # unknown names fail here, before any data is read
    if args.data is not None and args.datasets is not None:
        raise ValueError("give either DATA or --datasets, not both")
    if args.data is not None and args.data_dir is not None:
        raise ValueError("--data-dir is where the datasets' files are found: not with DATA")
    unused = [flag for flag, value in (("--ranks", args.ranks), ("--restarts", args.restarts))
              if args.quick and value is not None]  # fmt: skip
    if unused:
        raise ValueError(
            f"{' and '.join(unused)} {'are' if len(unused) > 1 else 'is'} not used with "
            "--quick, which fits --shared-rank only, with 2 restarts: leave "
            f"{'them' if len(unused) > 1 else 'it'} out, or leave out --quick"
        )
    defaults = declared(report.run)  # of the flags left out: --quick refuses some given
    if args.data is not None:
        data = {Path(args.data).name.split(".")[0]: read_data(args, args.data)}
    else:
        names = args.datasets or (["animals"] if args.quick else list(datasets.DATASETS))
        data = {name: datasets.load(name, data_dir=args.data_dir) for name in names}
    split = "split 70/15/15 as the paper's"
    tell(args, f"report: {', '.join(engines_)} on {', '.join(data)} ({split})")
    result = report.run(
        data, engines_, ranks=defaults["ranks"] if args.ranks is None else args.ranks,
        shared_rank=args.shared_rank, seeds=range(args.seeds), ensembles=args.ensembles,
        restarts=defaults["restarts"] if args.restarts is None else args.restarts,
        quick=args.quick, budget=args.budget, progress=not (args.quiet or args.json),
    )  # fmt: skip
    with atomic_output(target, folder=True) as folder:
        report.write(result, folder)
        write_json(folder / "environment.json", result.environment)
    board = report.leaderboard(result.fits, result.entries)
    summary = {"out": str(out), "leaderboard": board.to_dict(orient="records")}
    show(args, board, summary)
    winners = "".join(f", {report.winner_file(name)}" for name in result.winners)
    say(args, f"results in {out}: report.html, fits.csv, leaderboard.csv, pareto.png{winners}")
    return 0


def reproduce_command(args) -> int:
    """Run a registered study (:data:`bernmf.studies.runner.registry.STUDIES`) with these
    options."""
    runner = registry.module(args.study)
    if args.as_published and args.study != "paper":
        raise ValueError(f"--as-published is the paper's variant; study {args.study!r} has none")
    out = Path(args.out.replace("<study>", args.study))
    folder = runner.folder(out, args.as_published) if hasattr(runner, "folder") else out
    check_output(folder, args.force)
    argv = ["--out", str(out)]
    argv += ["--as-published"] * args.as_published + ["--quick"] * args.quick
    argv += ["--quiet"] * (args.quiet or args.json)
    if args.datasets:
        argv += ["--datasets", *args.datasets]
    if args.data_dir:
        argv += ["--data-dir", str(args.data_dir)]
    if args.json:
        with contextlib.redirect_stdout(sys.stderr):
            code = runner.main(argv)
        summary = pd.read_csv(folder / "summary.csv")
        records = to_json(summary.to_dict("records"))
        print(json.dumps({"out": str(folder), "summary": records}, allow_nan=False))
        return code
    if args.quiet:
        with contextlib.redirect_stdout(io.StringIO()):
            return runner.main(argv)
    return runner.main(argv)
