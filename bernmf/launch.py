"""``bernmf fit DATA --rank K --distributed``: one process of a fit across processes.

Every process is started with the same command; it finds the coordinator, the
process count and its index in its arguments or environment (:func:`coordinates`),
joins the others (``jax.distributed.initialize``), reads only its block of rows
(:func:`bernmf.readers.rows_of`, :func:`bernmf.readers.read_rows`), and writes its
rows of W to ``OUT/W.part-<index>.csv`` and its fit (its rows, the shared H) to
``OUT/fit.part-<index>.npz``; process 0 also writes ``H.csv``, ``trace.csv``,
``summary.json`` and, for an ensemble, ``members.csv``. Each file is written
atomically, and none that exists is replaced without ``--force``: every process checks
its own files, with its block's input, before the fit, and all stop if one fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from bernmf._output import Target, atomic_output, write_json
from bernmf.api import fit
from bernmf.commands import members_table, parse_options, prior_of, say
from bernmf.distributed import perplexity
from bernmf.readers import count_rows, read_rows, rows_of

ENVIRONMENT = {
    "coordinator": ("BERNMF_COORDINATOR",),
    "num_processes": ("BERNMF_NUM_PROCESSES", "SLURM_NTASKS", "SLURM_ARRAY_TASK_COUNT"),
    "process_id": ("BERNMF_PROCESS_ID", "SLURM_PROCID", "SLURM_ARRAY_TASK_ID"),
}
"""Where each of :func:`coordinates` is looked for when not given, in order."""


def coordinates(coordinator, num_processes, process_id, environ=os.environ) -> tuple:
    """``(coordinator "host:port", process count, process index)`` from arguments or environment.

    Raises
    ------
    ValueError
        One of them neither given nor in the environment, or an index out of range.
    """
    given = {"coordinator": coordinator, "num_processes": num_processes}
    given["process_id"] = process_id
    for name, variables in ENVIRONMENT.items():
        for variable in variables:
            if given[name] is None and environ.get(variable):
                given[name] = environ[variable]
        if given[name] is None:
            option = "--" + name.replace("_", "-")
            raise ValueError(f"--distributed needs {option} or one of {variables} set")
    count, index = int(given["num_processes"]), int(given["process_id"])
    if not 0 <= index < count:
        raise ValueError(f"process id {index} out of range for {count} processes")
    return str(given["coordinator"]), count, index


def fit_command(args) -> int:
    """``bernmf fit --distributed``: this process's part (:func:`fit_part`), and a line."""
    summary = fit_part(args)
    say(args, f"rows {summary['rows']} done; results in {args.out}")
    return 0


def fit_part(args) -> dict:
    """Join the other processes, fit this process's rows, write its files; return a summary."""
    import jax

    options = parse_options(args.option, scoped=False)
    options |= {k: v for k, v in (("max_iter", args.max_iter), ("tol", args.tol)) if v is not None}
    prior = prior_of(args, args.engine)

    coordinator, count, index = coordinates(args.coordinator, args.num_processes, args.process_id)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU processes only
    jax.distributed.initialize(coordinator, num_processes=count, process_id=index)
    from bernmf.inference.distributed import agree

    out, failure = Path(args.out), None
    try:
        start, stop, Y, mask, validation = read_block(args, out, index, count)
    except (OSError, ValueError) as error:
        failure = error
    agree(failure, [])  # every process stops here if one could not read or write
    result = fit(
        Y, args.engine, args.rank, mask=mask, prior=prior, seed=args.seed, distributed=True,
        restarts=args.restarts, combine=args.combine, validation=validation, **options,
    )  # fmt: skip
    summary = {
        "engine": result.engine,
        "rank": result.rank,
        "data": str(args.data),
        "rows": [start, stop],
        "processes": count,
        "n_iter": result.n_iter,
        "converged": result.converged,
        "objective": result.objective,
        "timings": dict(result.timings),
        "run": result.extras["run"],
    }
    if validation is not None:
        summary["validation_perplexity"] = perplexity(result, Y, validation)
    members = members_table(result)

    def write(name: str, save) -> None:
        with atomic_output(Target(out / name, args.force), folder=False) as temporary:
            save(temporary)

    out.mkdir(parents=True, exist_ok=True)
    W = result.frames.W
    W.index = range(start, stop) if result.row_labels is None else W.index
    write(f"W.part-{index:05d}.csv", W.to_csv)
    result.save(out / f"fit.part-{index:05d}.npz", overwrite=args.force)
    if index == 0:
        if members is not None:
            write("members.csv", lambda path: members.to_csv(path, index=False))
        write("H.csv", result.frames.H.to_csv)
        trace = pd.DataFrame({"iteration": range(len(result.trace)), "objective": result.trace})
        write("trace.csv", lambda path: trace.to_csv(path, index=False))
        write("summary.json", lambda path: write_json(path, summary))
    return summary


def outputs(index: int) -> list[str]:
    """The files process ``index`` writes in the output folder."""
    names = [f"W.part-{index:05d}.csv", f"fit.part-{index:05d}.npz"]
    return names + ["H.csv", "trace.csv", "summary.json", "members.csv"] * (index == 0)


def read_block(args, out: Path, index: int, count: int) -> tuple:
    """This process's rows of the data, mask and validation; check its outputs are new.

    Returns
    -------
    (start, stop, Y, mask, validation)
        The rows' global range and their blocks (mask and validation None if not given).

    Raises
    ------
    FileExistsError
        One of this process's :func:`outputs` is in ``out`` and ``args.force`` is False.
    OSError, ValueError
        An input that cannot be read.
    """
    taken = [name for name in outputs(index) if (out / name).exists()]
    if taken and not args.force:
        raise FileExistsError(f"{out} has {', '.join(taken)}; use --force to replace them")
    start, stop = rows_of(index, count, count_rows(args.data))
    blocks = [
        None if path is None else read_rows(path, start, stop)
        for path in (args.data, args.mask, args.validation)
    ]
    return start, stop, *blocks
