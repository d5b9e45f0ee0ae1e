"""``bernmf fit DATA --rank K --distributed``: one process of a fit across processes.

Every process is started with the same command; it finds the coordinator, the
process count and its index in its arguments or environment (:func:`coordinates`),
joins the others (``jax.distributed.initialize``), reads only its block of rows
(:func:`bernmf.readers.rows_of`, :func:`bernmf.readers.read_rows`), and writes its
rows of W to ``OUT/W.part-<index>.csv`` and its fit (its rows, the shared H) to
``OUT/fit.part-<index>.npz``; process 0 also writes ``H.csv``, ``trace.csv``,
``summary.json`` and, for an ensemble, ``members.csv``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from bernmf._output import write_json
from bernmf.api import fit
from bernmf.cli import members_table, parse_options
from bernmf.distributed import perplexity
from bernmf.models import Prior
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


def fit_part(args) -> dict:
    """Join the other processes, fit this process's rows, write its files; return a summary."""
    import jax

    options = parse_options(args.option, scoped=False)
    options |= {k: v for k, v in (("max_iter", args.max_iter), ("tol", args.tol)) if v is not None}
    given = (args.alpha, args.beta, args.gamma)
    prior = None
    if any(v is not None for v in given):
        prior = Prior(*(1.0 if v is None else v for v in given))

    coordinator, count, index = coordinates(args.coordinator, args.num_processes, args.process_id)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU processes only
    jax.distributed.initialize(coordinator, num_processes=count, process_id=index)
    start, stop = rows_of(index, count, count_rows(args.data))
    Y = read_rows(args.data, start, stop)
    mask = None if args.mask is None else read_rows(args.mask, start, stop)
    validation = None if args.validation is None else read_rows(args.validation, start, stop)
    result = fit(
        Y, args.engine, args.rank, mask=mask, prior=prior, seed=args.seed, distributed=True,
        restarts=args.restarts, combine=args.combine, validation=validation, **options,
    )  # fmt: skip
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    W = result.frames.W
    W.index = range(start, stop) if result.row_labels is None else W.index
    W.to_csv(out / f"W.part-{index:05d}.csv")
    result.save(out / f"fit.part-{index:05d}.npz", overwrite=args.force)
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
    if index == 0:
        if members is not None:
            members.to_csv(out / "members.csv", index=False)
        result.frames.H.to_csv(out / "H.csv")
        trace = pd.DataFrame({"iteration": range(len(result.trace)), "objective": result.trace})
        trace.to_csv(out / "trace.csv", index=False)
        write_json(out / "summary.json", summary)
    return summary
