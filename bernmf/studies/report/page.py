"""The report as users read it: the leaderboard, the findings and the HTML page.

:func:`leaderboard` summarizes the fits of a :class:`bernmf.studies.report.record.Report` per
engine and setting, :func:`findings` says what it found per dataset, and
:func:`write` writes the CSVs, the Pareto plot and a self-contained HTML page.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

import numpy as np
import pandas as pd

from bernmf.studies.compare import summarize
from bernmf.studies.report.record import Report

__all__ = ["findings", "leaderboard", "stacking_weights_table", "write"]


def leaderboard(fits: pd.DataFrame) -> pd.DataFrame:
    """One row per (dataset, engine, setting), best test perplexity first in each dataset.

    Parameters
    ----------
    fits : DataFrame
        :attr:`Report.fits` (or any table with its columns).

    Returns
    -------
    DataFrame
        ``dataset``, ``engine``, ``setting``, ``rank``, ``prior``, ``perplexity``
        (mean over seeds), ``perplexity_sd``, ``seconds`` (mean), ``compile_seconds``
        (max), ``iterations`` (mean), ``ess_per_second`` (mean), ``fits``.
    """
    fits = _merged(fits)
    table = summarize(fits, ["dataset", "engine", "setting", "rank", "prior"])
    order = pd.Categorical(table["dataset"], categories=list(dict.fromkeys(fits["dataset"])))
    return table.assign(_order=order).sort_values(["_order", "perplexity"]).drop(columns="_order")


def _merged(fits: pd.DataFrame) -> pd.DataFrame:
    """``fits`` with the groups (engine, setting) that are the same fits made once: the
    same dataset, rank and test perplexities seed by seed (em tuned at the shared rank is
    em shared; mm at its flat default prior is em). One group is kept, its ``engine`` and
    ``setting`` naming all of them (``"em = mm"``, ``"tuned = shared K=4"``). Groups with
    a perplexity that is not finite (inf where a fit rules a test outcome out) tell
    nothing of being the same fits, and stay apart."""
    keys = ["dataset", "engine", "setting"]
    groups = list(fits.groupby(keys, sort=False))
    signature = {
        key: (key[0], tuple(group["rank"]), tuple(np.round(group["perplexity"].to_numpy(), 10)))
        if np.isfinite(group["perplexity"].to_numpy()).all()
        else key
        for key, group in groups
    }
    kept, names = {}, {}
    for key, _ in groups:
        first = kept.setdefault(signature[key], key)
        names.setdefault(first, []).append(key)
    rows = []
    for first, same in names.items():
        group = fits[(fits[keys] == pd.Series(first, index=keys)).all(axis=1)]
        engines = " = ".join(dict.fromkeys(k[1] for k in same))
        settings = " = ".join(dict.fromkeys(k[2] for k in same))
        rows.append(group.assign(engine=engines, setting=settings))
    return pd.concat(rows, ignore_index=True)


def write(report: Report, folder) -> dict[str, Path]:
    """Write ``fits.csv``, ``leaderboard.csv``, ``pareto.png`` and ``report.html`` to ``folder``
    (and ``weights.csv``, the stacking weights, when the report has stacked rows).

    The HTML page stands alone: the plot is embedded as base64 PNG.

    Returns
    -------
    dict of str to Path
        The files written, by name.
    """
    from bernmf import plot  # matplotlib loads when a figure is drawn, not with the CLI

    folder = Path(folder)
    board = leaderboard(report.fits)
    paths = {name: folder / name for name in ("fits.csv", "leaderboard.csv", "pareto.png")}
    report.fits.to_csv(paths["fits.csv"], index=False)
    board.to_csv(paths["leaderboard.csv"], index=False)
    plot.pareto(board, path=paths["pareto.png"])
    if report.weights is not None and not report.weights.empty:
        paths["weights.csv"] = folder / "weights.csv"
        report.weights.to_csv(paths["weights.csv"], index=False)
    paths["report.html"] = folder / "report.html"
    paths["report.html"].write_text(_html(board, report, paths["pareto.png"]))
    return paths


def findings(report: Report, board: pd.DataFrame | None = None) -> dict[str, list[str]]:
    """What the report found, as sentences per dataset: the data, the winner and its margin
    over the best other engine, the settings chosen on validation (flagged at a grid's
    edge), and engines whose seeds all gave the same fit."""
    board = leaderboard(report.fits) if board is None else board
    said: dict[str, list[str]] = {}
    for dataset, table in board.groupby("dataset", sort=False):
        lines = said.setdefault(str(dataset), [])
        data = report.data[report.data["dataset"] == dataset] if len(report.data) else []
        for row in getattr(data, "itertuples", lambda: [])():
            lines.append(
                f"Data: {row.rows} x {row.columns}, {row.missing:.1%} of entries missing, "
                f"{row.density:.2%} of the observed entries are ones."
            )
        table = table.dropna(subset=["perplexity"]).sort_values("perplexity")
        if len(table):
            best = table.iloc[0]
            others = table[table["engine"].map(lambda e: e.split()[0]) != best["engine"].split()[0]]
            margin = ""
            if len(others):
                runner = others.iloc[0]
                gap = runner["perplexity"] - best["perplexity"]
                sd = np.nanmax([best["perplexity_sd"], runner["perplexity_sd"], 0.0])
                margin = (
                    f", ahead of {runner['engine']} ({runner['setting']}, "
                    f"{runner['perplexity']:.4g}) by {gap:.3g} nats"
                    + (f" ({gap / sd:.1f} sd of the seeds)" if sd > 0 else "")
                )
            lines.append(
                f"Winner: {best['engine']} ({best['setting']}, K = {best['rank']}) with test "
                f"perplexity {best['perplexity']:.4g}{margin}."
            )
        chosen = report.chosen[report.chosen["dataset"] == dataset] if len(report.chosen) else []
        for row in getattr(chosen, "itertuples", lambda: [])():
            flag = {
                "top": " — at the top of the grid: a larger rank may do better",
                "bottom": " — at the bottom of the grid: a smaller rank may do better",
            }.get(row.edge, "")
            prior = "" if row.prior == "none" else f", prior {row.prior}"
            if "," not in row.grid:  # one rank: nothing chosen
                lines.append(f"{row.engine} ran at K = {row.rank} (one rank tried){prior}.")
            else:
                lines.append(
                    f"{row.engine} chose K = {row.rank} of {row.grid}{prior} on validation{flag}."
                )
        out = report.left_out
        for row in (out[out["dataset"] == dataset] if len(out) else out).itertuples():
            lines.append(
                f"{row.engine} was left out: estimated {row.estimate:.0f} s, over the --quick "
                "budget."
            )
        same = table[(table["fits"] > 1) & (table["perplexity_sd"] == 0)]
        for engine in dict.fromkeys(same["engine"]):
            lines.append(
                f"{engine}: every seed gave the same fit (sd 0): its seeds change nothing."
            )
    return said


def stacking_weights_table(weights: pd.DataFrame | None) -> pd.DataFrame | None:
    """Mean stacking weight over seeds per dataset, stacked row, member engine and rank."""
    if weights is None or weights.empty:
        return None
    keys = ["dataset", "stack", "engine", "rank"]
    seeds = weights.groupby(["dataset", "stack"])["seed"].transform("nunique")
    table = weights.assign(weight=weights["weight"] / seeds).groupby(keys, sort=False)["weight"]
    return table.sum().reset_index()


def _html(board: pd.DataFrame, report: Report, png: Path) -> str:
    from bernmf import plot

    env = report.environment
    image = base64.b64encode(png.read_bytes()).decode("ascii")
    shown = board.drop(columns="dataset").rename(columns={"perplexity": "test perplexity"})
    said = findings(report, board)
    weights = stacking_weights_table(report.weights)
    sections = []
    for dataset, table in shown.groupby(board["dataset"], sort=False):
        front = plot.pareto_front(table["seconds"].to_numpy(), table["test perplexity"].to_numpy())
        table = table.assign(pareto=np.where(front, "yes", ""))
        found = "".join(f"<li>{html.escape(line)}</li>" for line in said.get(str(dataset), []))
        sections.append(
            f"<h2>{html.escape(str(dataset))}</h2>\n<ul>{found}</ul>\n"
            + table.to_html(index=False, float_format=lambda x: f"{x:.4g}", na_rep="", border=0)
        )
        if weights is not None and (weights["dataset"] == dataset).any():
            mine = weights[weights["dataset"] == dataset].drop(columns="dataset")
            sections.append(
                "<h3>Stacking weight per engine and rank (mean over seeds)</h3>\n"
                + mine.to_html(index=False, float_format=lambda x: f"{x:.3f}", border=0)
            )
    runtime = (
        f"<p>Total run time: {report.seconds:.0f} s.</p>" if np.isfinite(report.seconds) else ""
    )
    rows = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in env.items()
    )
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>bernmf report</title>
<style>body{{font-family:sans-serif;max-width:70em;margin:auto}}
table{{border-collapse:collapse}}td,th{{padding:2px 8px;text-align:right}}
tr:nth-child(even){{background:#f3f3f3}}</style></head><body>
<h1>bernmf report</h1>
{runtime}
<p>Test perplexity (mean negative log-likelihood per test entry, nats; lower is better) on
the paper's split, mean and sd over seeds. Settings: <em>tuned</em> (rank, and mm's prior,
chosen on the validation entries), <em>shared K</em> (every engine at one rank, default
prior), <em>ensemble</em> (restarts combined on validation), <em>stacked</em> (every fit of a
seed already made, of all engines or of mm only, tuning fits included, stacked on the validation
entries with a smoothed column-frequency member; seconds: the sum of the members'; rank 0 and
prior "mixed"). Seconds: run time per fit
without compilation; iterations: iterations or draws; ESS/s: median bulk ESS of WH per
second (samplers). <em>pareto</em>: no other row is both faster and better. Rows that are
the same fits are one row: <em>em = mm</em> (mm at its flat default prior is em),
<em>tuned = shared K=4</em> (the rank chosen was the shared one). A compile time of 0 means
the program compiled for an earlier fit of the same shape was reused.</p>
<h2>Test perplexity against seconds</h2>
<img alt="Pareto plot" src="data:image/png;base64,{image}">
{"".join(sections)}
<h2>Environment</h2><table>{rows}</table>
</body></html>
"""
