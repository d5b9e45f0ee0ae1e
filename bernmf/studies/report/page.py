"""The report as users read it: the leaderboard, the findings and the HTML page.

:func:`leaderboard` summarizes the fits of a :class:`bernmf.studies.report.contents.Report` per
engine and setting, :func:`findings` says what it found per dataset, and
:func:`write` writes the CSVs, the Pareto plot and a self-contained HTML page.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from bernmf.data.files.csv_table import write_csv
from bernmf.studies.compare import summarize
from bernmf.studies.report.contents import Report

__all__ = ["findings", "leaderboard", "stacking_weights_table", "write"]


RESAMPLES = 200
"""Resamples of the test entries of the paired bootstrap behind ``behind_sd``."""

WEIGHT_SHOWN = 5e-4
"""Mean stacking weights under this are summed in one line of the page's weights table."""


def leaderboard(
    fits: pd.DataFrame, entries: Mapping[tuple, np.ndarray] | None = None, *, seed: int = 0
) -> pd.DataFrame:
    """One row per (dataset, engine, setting), best test perplexity first in each dataset.

    Rows that are the same fits are one row (:func:`_merged`).

    Parameters
    ----------
    fits : DataFrame
        :attr:`Report.fits` (or any table with its columns).
    entries : dict of (dataset, engine, setting) to ndarray of shape (n,), optional
        :attr:`Report.entries`: with it, rows are the same fits whether their perplexity is
        finite or not, and each row's margin to the first row of its dataset has an
        uncertainty (``behind_sd``).
    seed : int, default 0
        Seed of the bootstrap's resamples.

    Returns
    -------
    DataFrame
        ``dataset``, ``engine``, ``setting``, ``rank``, ``prior``, ``perplexity``
        (mean over seeds), ``perplexity_sd``, ``seconds`` (mean), ``compile_seconds``
        (max), ``iterations`` (mean), ``ess_per_second`` (mean), ``fits``; with ``entries``
        also ``behind``: nats of test perplexity behind the dataset's first row, and
        ``behind_sd``: its sd over :data:`RESAMPLES` paired bootstrap resamples of the test
        entries (both rows scored on the same resampled entries: an uncertainty that
        deterministic engines, whose seeds agree, have too); NaN where either is inf.
    """
    fits, kept = _merged(fits, entries)
    table = summarize(fits, ["dataset", "engine", "setting", "rank", "prior"])
    order = pd.Categorical(table["dataset"], categories=list(dict.fromkeys(fits["dataset"])))
    table = table.assign(_order=order).sort_values(["_order", "perplexity"]).drop(columns="_order")
    if not entries:
        return table
    behind, sd = np.full(len(table), np.nan), np.full(len(table), np.nan)
    for dataset in dict.fromkeys(table["dataset"]):
        rows = np.flatnonzero((table["dataset"] == dataset).to_numpy())
        perplexity = table["perplexity"].to_numpy()[rows]
        if not np.isfinite(perplexity[0]):
            continue  # no row scores finitely: no margin
        names = zip(table["engine"].iloc[rows], table["setting"].iloc[rows], strict=True)
        scores = np.column_stack([entries[kept[(dataset, *name)]] for name in names])
        finite = np.isfinite(perplexity)
        behind[rows[finite]] = perplexity[finite] - perplexity[0]
        ahead = scores[:, [0]] - scores[:, finite]  # the first row's gain, entry by entry
        sd[rows[finite]] = paired_bootstrap_sd(ahead, RESAMPLES, seed)
    return table.assign(behind=behind, behind_sd=sd)


def paired_bootstrap_sd(differences: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Sd of the mean of each column of ``differences`` over resamples of its rows.

    Parameters
    ----------
    differences : array of shape (n, k)
        Per test entry, the difference of two rows' log-probabilities (paired: the same
        entry for both), k pairs of rows at once.
    resamples : int
        Resamples of the n entries (with replacement, the same for every column).
    seed : int

    Returns
    -------
    ndarray of shape (k,)
        The sd (ddof 1) of the resampled means: 0 for a column of equal rows.
    """
    n, k = differences.shape
    rng = np.random.default_rng(seed)
    means = np.empty((resamples, k))
    step = max(1, 2**22 // (n * k))  # resamples at a time: about 32 MB of gathered values
    for first in range(0, resamples, step):
        chosen = rng.integers(0, n, (min(step, resamples - first), n))
        means[first : first + len(chosen)] = differences[chosen].mean(axis=1)
    return means.std(axis=0, ddof=1)


def _merged(fits: pd.DataFrame, entries=None) -> tuple[pd.DataFrame, dict]:
    """``fits`` with the groups (engine, setting) that are the same fits made once, and
    which group each merged row kept (``(dataset, engine, setting)`` of the merged names to
    the kept group's).

    The same fits: the same dataset, ranks and test perplexities seed by seed (em tuned at
    the shared rank is em shared; mm at its flat default prior is em), and with
    ``entries`` the same log-probability of every test entry (to 1e-9 relative; ``-inf``
    at the same entries), so that fits ruling test outcomes out (perplexity inf) are
    told apart or merged too. Without ``entries``, groups whose perplexity is not finite
    stay apart: a perplexity of inf says nothing of being the same fits. One group is
    kept, its ``engine`` and ``setting`` naming all of them (``"em = mm"``,
    ``"tuned = shared K=4"``).
    """
    keys = ["dataset", "engine", "setting"]
    groups = list(fits.groupby(keys, sort=False))

    def same(a, b) -> bool:
        (key_a, group_a), (key_b, group_b) = a, b
        perplexities = [np.round(g["perplexity"].to_numpy(float), 10) for g in (group_a, group_b)]
        if key_a[0] != key_b[0] or tuple(group_a["rank"]) != tuple(group_b["rank"]):
            return False
        if not np.array_equal(*perplexities):
            return False
        if not entries:
            return bool(np.isfinite(perplexities[0]).all())
        x, y = entries[key_a], entries[key_b]
        finite = np.isfinite(x)
        return bool(
            np.array_equal(finite, np.isfinite(y))
            and np.array_equal(x[~finite], y[~finite])
            and np.allclose(x[finite], y[finite], rtol=1e-9, atol=0)
        )

    firsts, names = [], {}
    for group in groups:
        first = next((f for f in firsts if same(f, group)), None)
        if first is None:
            firsts.append(first := group)
        names.setdefault(first[0], []).append(group[0])
    rows, kept = [], {}
    for first, merged in names.items():
        group = fits[(fits[keys] == pd.Series(first, index=keys)).all(axis=1)]
        engines = " = ".join(dict.fromkeys(k[1] for k in merged))
        settings = " = ".join(dict.fromkeys(k[2] for k in merged))
        rows.append(group.assign(engine=engines, setting=settings))
        kept[(first[0], engines, settings)] = first
    return pd.concat(rows, ignore_index=True), kept


def write(report: Report, folder) -> dict[str, Path]:
    """Write ``fits.csv``, ``leaderboard.csv``, ``pareto.png`` and ``report.html`` to ``folder``
    (and ``weights.csv``, the stacking weights, when the report has stacked rows, and each
    dataset's winning fit as :func:`winner_file`, which :func:`bernmf.load` reads).

    The HTML page stands alone: the plot is embedded as base64 PNG.

    Returns
    -------
    dict of str to Path
        The files written, by name.
    """
    from bernmf import plot  # matplotlib loads when a figure is drawn, not with the CLI

    folder = Path(folder)
    board = leaderboard(report.fits, report.entries)
    paths = {name: folder / name for name in ("fits.csv", "leaderboard.csv", "pareto.png")}
    write_csv(report.fits, paths["fits.csv"], index=False)
    write_csv(board, paths["leaderboard.csv"], index=False)
    plot.pareto(board, path=paths["pareto.png"])
    if report.weights is not None and not report.weights.empty:
        paths["weights.csv"] = folder / "weights.csv"
        write_csv(report.weights, paths["weights.csv"], index=False)
    for dataset, winner in report.winners.items():
        name = winner_file(dataset)
        paths[name] = winner.fit.save(folder / name)
    paths["report.html"] = folder / "report.html"
    paths["report.html"].write_text(_html(board, report, paths["pareto.png"]))
    return paths


def winner_file(dataset: str) -> str:
    """The name of the file of ``dataset``'s winning fit in the report's folder:
    ``winner-<dataset>.npz``, each character but letters, digits, ``.``, ``_`` and ``-``
    written ``_``."""
    return f"winner-{re.sub(r'[^A-Za-z0-9._-]', '_', str(dataset))}.npz"


def findings(report: Report, board: pd.DataFrame | None = None) -> dict[str, list[str]]:
    """What the report found, as sentences per dataset: the data, the winner and its margin
    over the best other engine (in nats, with its paired bootstrap sd when the report has
    :attr:`Report.entries`), the settings chosen on validation (flagged at a grid's edge;
    no advice where every validation score was inf), and engines whose seeds all gave the
    same fit."""
    board = leaderboard(report.fits, report.entries) if board is None else board
    said: dict[str, list[str]] = {}
    for dataset, table in board.groupby("dataset", sort=False):
        lines = said.setdefault(str(dataset), [])
        data = report.data[report.data["dataset"] == dataset] if len(report.data) else []
        for row in getattr(data, "itertuples", lambda: [])():
            lines.append(
                f"Data: {row.rows} x {row.columns}, {row.missing:.1%} of entries missing, "
                f"{row.density:.2%} of the observed entries are ones."
            )
        table = table.dropna(subset=["perplexity"]).sort_values("perplexity", kind="stable")
        lines += _winner(table)
        if dataset in report.winners:
            won = report.winners[dataset]
            file = winner_file(str(dataset))
            lines.append(
                f"Saved: the winner's fit of seed {won.seed} ({won.engine}, {won.setting}) as "
                f'{file}, read by bernmf.load("{file}").'
            )
        chosen = report.chosen[report.chosen["dataset"] == dataset] if len(report.chosen) else []
        for row in getattr(chosen, "itertuples", lambda: [])():
            lines.append(_choice(row))
        lines += _budget(report, dataset)
        same = table[(table["fits"] > 1) & (table["perplexity_sd"] == 0)]
        for engine in dict.fromkeys(same["engine"]):
            lines.append(
                f"{engine}: every seed gave the same fit (sd 0): its seeds change nothing."
            )
    return said


def _winner(table: pd.DataFrame) -> list[str]:
    """The sentence on the winner of a dataset's leaderboard (best first) and its margin
    over the best row of another engine."""
    if not len(table):
        return []
    best = table.iloc[0]
    if not np.isfinite(best["perplexity"]):
        return ["No row scores the test entries finitely: every fit gives some test entry "
                "probability 0 (perplexity inf)."]  # fmt: skip
    others = table[table["engine"].map(lambda e: e.split()[0]) != best["engine"].split()[0]]
    margin = ""
    if len(others):
        runner = others.iloc[0]
        name = f"{runner['engine']} ({runner['setting']}"
        gap = runner["perplexity"] - best["perplexity"]
        if not np.isfinite(gap):
            margin = f", ahead of {name}, inf: it gives some test entries probability 0)"
        else:
            margin = f", ahead of {name}, {runner['perplexity']:.4g}) by {gap:.3g} nats"
            sd = runner.get("behind_sd", np.nan)  # the margin to the best row: this one's
            if np.isfinite(sd):
                unclear = "; under 2 sd: no clear lead" if gap < 2 * sd else ""
                margin += (
                    f" ± {sd:.2g} (sd over {RESAMPLES} paired bootstrap resamples of the test "
                    f"entries{unclear})"
                )
    setting = best["setting"] + (f", K = {best['rank']}" if best["rank"] else "")
    score = f"{best['perplexity']:.4g}"
    return [f"Winner: {best['engine']} ({setting}) with test perplexity {score}{margin}."]


def _budget(report: Report, dataset) -> list[str]:
    """The sentences on the engines the budget shortened or left out on ``dataset``."""
    lines = []
    plans = report.plans
    for row in (plans[plans["dataset"] == dataset] if len(plans) else plans).itertuples():
        if row.changes and np.isfinite(row.seconds):
            lines.append(
                f"{row.engine} was shortened to fit the budget of {report.budget:.0f} s: "
                f"{row.changes.replace('; ', ', ')} (estimated {row.estimate:.0f} s in full, "
                f"{row.seconds:.0f} s so)."
            )
    out = report.left_out
    for row in (out[out["dataset"] == dataset] if len(out) else out).itertuples():
        lines.append(
            f"{row.engine} was left out: estimated {row.estimate:.0f} s at its shortest, more "
            f"than the budget of {report.budget:.0f} s had left for it beside the engines kept."
        )
    return lines


def _choice(row) -> str:
    """The sentence on the setting an engine chose on validation (a row of
    :attr:`Report.chosen`)."""
    prior = "" if row.prior == "none" else f", prior {row.prior}"
    if "," not in row.grid:  # one rank: nothing chosen
        return f"{row.engine} ran at K = {row.rank} (one rank tried){prior}."
    finite = getattr(row, "finite", row.grid)
    if not finite:
        return (
            f"{row.engine}: every setting tried on validation (K in {row.grid}) gives some "
            f"validation entry probability 0 (perplexity inf), so none was chosen; it ran at "
            f"the shared K = {row.rank}{prior}."
        )
    if "," not in finite:
        return (
            f"{row.engine} chose K = {row.rank} of {row.grid}{prior} on validation, the only "
            "rank whose validation perplexity is finite (the others give some validation "
            "entry probability 0)."
        )
    flag = {
        "top": " — at the top of the grid: a larger rank may do better",
        "bottom": " — at the bottom of the grid: a smaller rank may do better",
    }.get(row.edge, "")
    return f"{row.engine} chose K = {row.rank} of {row.grid}{prior} on validation{flag}."


def stacking_weights_table(weights: pd.DataFrame | None) -> pd.DataFrame | None:
    """Mean stacking weight over seeds per dataset, stacked row, member engine and rank,
    largest first in each stacked row; the weights under :data:`WEIGHT_SHOWN` summed in one
    row per stacked row (``engine`` "N others, each under ...", ``rank`` empty)."""
    if weights is None or weights.empty:
        return None
    keys = ["dataset", "stack", "engine", "rank"]
    seeds = weights.groupby(["dataset", "stack"])["seed"].transform("nunique")
    table = weights.assign(weight=weights["weight"] / seeds).groupby(keys, sort=False)["weight"]
    table = table.sum().reset_index().astype({"rank": object})
    parts = []
    for (dataset, stack), mine in table.groupby(["dataset", "stack"], sort=False):
        shown = mine["weight"] >= WEIGHT_SHOWN
        parts.append(mine[shown].sort_values("weight", ascending=False, kind="stable"))
        if (~shown).any():
            rest = {
                "dataset": dataset, "stack": stack, "rank": "",
                "engine": f"{_count((~shown).sum(), 'other')}, each under {WEIGHT_SHOWN:g}",
                "weight": mine.loc[~shown, "weight"].sum(),
            }  # fmt: skip
            parts.append(pd.DataFrame([rest]))
    return pd.concat(parts, ignore_index=True)


def times_table(report: Report, dataset) -> pd.DataFrame | None:
    """Each engine's seconds on ``dataset``, estimated and measured, side by side:
    ``engine``, ``plan`` (what the budget changed, "as asked", or "left out"),
    ``planned`` (the seconds of its steps that the budget planned before the first fit, at
    the largest rank it might choose: tuning, seeds, ensembles, without its share of the
    stacks), ``estimated`` (what was estimated for its steps as they ran: its tuning by its
    probes, its later steps by its tuning fits once they existed, at the rank chosen),
    ``measured`` (the seconds they took), and ``measured / estimated`` (NaN where nothing
    was estimated); a last row ``stacks`` (the engines' shares as planned, the members
    stacked at the probe's seconds per member, and the seconds the stacks took). None
    without :attr:`Report.plans`."""
    plans = report.plans
    if not len(plans) or "measured" not in plans:
        return None
    mine = plans[plans["dataset"] == dataset]
    plan = np.where(mine["changes"] != "", mine["changes"].str.replace("; ", ", "), "as asked")
    plan = np.where(mine["measured"].isna(), "left out", plan)
    stacks = (mine["engine"] == "stacks").to_numpy()
    plan = np.where(stacks, "", plan)
    planned = np.where(stacks, mine["stacks"], mine["seconds"] - mine["stacks"])
    estimated, measured = mine["estimated"].to_numpy(), mine["measured"].to_numpy()
    return pd.DataFrame(
        {
            "engine": mine["engine"].to_numpy(), "plan": plan, "planned s": planned,
            "estimated s": estimated, "measured s": measured,
            "measured / estimated": measured / np.where(estimated > 0, estimated, np.nan),
        }
    )  # fmt: skip


def _count(n: int, noun: str) -> str:
    """``"1 other"``, ``"3 others"``."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _html(board: pd.DataFrame, report: Report, png: Path) -> str:
    from bernmf import plot

    env = report.environment
    clock = {"process_time": "CPU seconds of the process"}.get(env.get("clock"), "wall-clock")
    image = base64.b64encode(png.read_bytes()).decode("ascii")
    shown = board.drop(columns="dataset").rename(columns={"perplexity": "test perplexity"})
    said = findings(report, board)
    weights = stacking_weights_table(report.weights)
    sections = []
    for dataset, table in shown.groupby(board["dataset"], sort=False):
        front = plot.pareto_front(table["seconds"].to_numpy(), table["test perplexity"].to_numpy())
        table = table.assign(pareto=np.where(front, "yes", ""))
        found = "".join(f"<li>{html.escape(line)}</li>" for line in said.get(str(dataset), []))
        board_html = table.to_html(
            index=False, float_format=lambda x: f"{x:.4g}", na_rep="", border=0
        )
        sections.append(
            f"<h2>{html.escape(str(dataset))}</h2>\n<ul>{found}</ul>\n"
            f'<div style="overflow-x:auto">{board_html}</div>'
        )
        times = times_table(report, dataset)
        if times is not None:
            sections.append(
                "<h3>Seconds per engine: planned, estimated and measured</h3>\n"
                + times.to_html(index=False, float_format=lambda x: f"{x:.3g}", na_rep="",
                                border=0)
            )  # fmt: skip
        if weights is not None and (weights["dataset"] == dataset).any():
            mine = weights[weights["dataset"] == dataset].drop(columns="dataset")
            sections.append(
                "<h3>Stacking weight per engine and rank (mean over seeds, largest first)</h3>\n"
                + mine.to_html(index=False, float_format=lambda x: f"{x:.3f}", border=0)
            )
    runtime = ""
    if np.isfinite(report.seconds):
        within = f" (budget {report.budget:.0f} s)" if np.isfinite(report.budget) else ""
        runtime = f"<p>Total run time: {report.seconds:.0f} s{within}.</p>"
    rows = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in env.items()
    )
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>bernmf report</title>
<style>body{{font-family:sans-serif;max-width:80em;margin:auto}}
table{{border-collapse:collapse;font-size:0.85em}}td,th{{padding:2px 6px;text-align:right}}
tr:nth-child(even){{background:#f3f3f3}}</style></head><body>
<h1>bernmf report</h1>
{runtime}
<p>Test perplexity (mean negative log-likelihood per test entry, nats; lower is better) on
a split made as the paper's (70% train, 15% validation, 15% test, shuffled with its seed
12345: on the paper's datasets, its split itself), mean and sd over seeds (sd 0: every seed
gave the same fit).
<em>behind</em>: nats behind the first row of the dataset, and <em>behind_sd</em> the sd of
that margin over {RESAMPLES} paired bootstrap resamples of the test entries (both rows scored
on the same resampled entries: the uncertainty of a test set of this size, which deterministic
engines have too); empty where a perplexity is inf. Settings: <em>tuned</em> (rank, and mm's prior,
chosen on the validation entries), <em>shared K</em> (every engine at one rank, default
prior), <em>ensemble</em> (restarts combined on validation), <em>stacked</em> (every fit of a
seed already made, of all engines or of mm only, tuning fits included, stacked on the validation
entries with a smoothed column-frequency member; seconds: the sum of the members'; rank 0 and
prior "mixed"). Seconds: run time per fit
without compilation; iterations: iterations or draws; ESS/s: median bulk ESS of WH per
second (samplers). <em>pareto</em>: no other row is both faster and better. Rows that are
the same fits are one row: <em>em = mm</em> (mm at its flat default prior is em),
<em>tuned = shared K=4</em> (the setting chosen on validation was the shared one); an engine
that chose nothing (one rank tried) has its <em>shared K</em> row only; a setting
that ends in, say, <em>625 of 5000 steps</em> ran with the draws (svi's steps) that the budget
left. A compile time of 0 means the program compiled for an earlier fit of the same shape was
reused. Seconds per engine ({clock}, compilation included): <em>planned</em>, what the
budget planned for its steps (tuning, seeds, ensembles) before the first fit, at the largest
rank it might choose; <em>estimated</em>, what was estimated for the steps as they ran: the
tuning by the probe fits, the later steps (at the rank chosen on validation) by the tuning
fits once they had run; <em>measured</em>, what they took; <em>stacks</em>: the stacks of
every seed.</p>
<h2>Test perplexity against seconds</h2>
<img alt="Pareto plot" style="max-width:100%" src="data:image/png;base64,{image}">
{"".join(sections)}
<h2>Environment</h2><table>{rows}</table>
</body></html>
"""
