"""The studies ``bernmf reproduce`` runs (:data:`STUDIES`), and what every study's ``main``
shares: its options (:func:`parser`), its progress stream, and :func:`run_into` (run, write
the tables and the figure)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import io
import sys
import time
from pathlib import Path

import pandas as pd

from bernmf.data import datasets
from bernmf.data.files.csv_table import write_csv
from bernmf.studies.runner.running import log, run, summarize
from bernmf.studies.runner.study import Study, StudyResult

STUDIES = {
    "paper": "bernmf.studies.reproduce.paper",
    "modes": "bernmf.studies.reproduce.modes",
    "stacking": "bernmf.studies.reproduce.stacking",
    "posterior_vs_map": "bernmf.studies.reproduce.posterior_vs_map",
    "sbc": "bernmf.studies.reproduce.sbc",
    "posterior_accuracy": "bernmf.studies.reproduce.posterior_accuracy",
}
"""The studies ``bernmf reproduce`` runs: name -> module with ``main(argv) -> int`` (the
options of :func:`parser`, and its own), writing ``summary.csv`` among its results in
``--out``, or where its ``folder(out, as_published) -> Path`` says."""


def run_into(studies, args, figure, png: str) -> StudyResult:
    """:func:`run` into ``args.out``: ``results.csv`` (the table, after every seed set),
    ``weights.csv`` (of the stacks, if any), ``summary.csv`` (:func:`summarize`) and the
    ``figure(summary, path)`` of the summary in ``png``; the summary printed."""
    begin = time.process_time()
    out = Path(args.out)
    result = run(studies, out / "results.csv", progress(args))
    if not result.weights.empty:
        write_csv(result.weights, out / "weights.csv", index=False)
    summary = summarize(result.table)
    write_csv(summary, out / "summary.csv", index=False)
    figure(summary, out / png)
    with pd.option_context("display.width", 160):
        log(summary.to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    log(f"total {time.process_time() - begin:.0f} CPU s; results in {out}")
    return result


def parser(doc: str, out: str) -> argparse.ArgumentParser:
    """The options every study's ``main`` takes: --quick, --datasets, --data-dir, --out."""
    made = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    made.add_argument("--quick", action="store_true", help="a smoke run (animals, tiny grid)")
    made.add_argument("--datasets", nargs="+", choices=datasets.DATASETS, default=None)
    made.add_argument("--data-dir", default=None, help="folder with <name>.csv or .rda")
    made.add_argument("--out", default=out, type=Path)
    made.add_argument("--quiet", action="store_true", help="no progress lines")
    return made


def progress(args):
    """The stream of a study's progress lines: stdout, or nowhere with ``--quiet``."""
    return io.StringIO() if args.quiet else sys.stdout


def module(name: str):
    """The module of a registered study (:data:`STUDIES`)."""
    if name not in STUDIES:
        raise ValueError(f"unknown study {name!r}; the studies: {sorted(STUDIES)}")
    return importlib.import_module(STUDIES[name])


def with_data(study: Study, names, data_dir) -> Study:
    """``study`` on the datasets ``names`` (None: its own) read from ``data_dir``."""
    names = study.datasets if names is None else tuple(names)
    return dataclasses.replace(study, datasets=names, data_dir=data_dir)
