"""Simulation-based calibration (SBC) of the engines' posteriors (Talts et al. 2018).

Each replicate draws (Y, W, H) from the prior (:func:`bernmf.simulate`), fits the engine
with that same prior on every entry of Y, keeps L near-independent posterior draws and
ranks the true value of each quantity among them (:func:`simulate_ranks`): for an engine
that draws from the exact posterior the ranks are uniform on 0..L over the replicates,
whatever the model; :func:`summarize` tests that per quantity with
:func:`bernmf.posterior.uniformity.uniformity_pvalue` (Säilynoja et al. 2022).

The quantities (:func:`quantities`) are label-invariant: the components of the model can
be permuted (columns of W with rows of H) without changing the likelihood, so a sampler
may hold them in any order, and W[m, k] has no true value to rank against; cells of
``W @ H`` (``WH[m,n]``, :data:`CELLS` of them spread over the matrix), the
log-likelihood ``log p(Y | W, H)`` (``loglik``) and the column sums of W sorted, largest
first (``W_colsum_1..K``) are the same in every order.

Draws: a fit's kept draws are thinned within each of its C chains to L / C evenly spaced
ones, the last draw of each chain kept (:func:`thinned`): a sampler's every 10th or 20th
(:data:`ENGINES`), a variational fit's independent draws from q likewise. An engine whose
fit has no draws (``mm``, ``em``) is a point mass at its (W, H): its L draws are equal,
ranks break the ties at random, and SBC shows what the point misses of the posterior. ``mm`` takes
priors >= 1 only and ``em`` none (its flat prior is its own setting): they are run at
the flat prior only (:func:`check_setting`).

``bernmf reproduce sbc`` (:func:`main`) runs :data:`ENGINES` at :data:`PRIORS` on 30 x 20
matrices at K = 3 and writes, in ``--out`` (default ``results/sbc``): ``ranks.csv``
(:func:`simulate_ranks`'s table: engine, quantity, replicate, rank, draws, then prior,
pit, kept, ess, cpu_seconds, warnings), ``summary.csv`` (:func:`summarize`) and
``ecdf.png`` (:func:`figure`). ``--quick`` is a smoke run (:data:`QUICK`).
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from bernmf._progress import Progress
from bernmf.api import fit as fit_engine
from bernmf.data.arguments import check_count, check_seed
from bernmf.data.files.csv_table import write_csv
from bernmf.inference import get_engine
from bernmf.models.simulate import simulate
from bernmf.models.spec import Prior, describe_prior, log_likelihood
from bernmf.plot import save_png
from bernmf.posterior import uniformity
from bernmf.posterior.convergence import ess_rows
from bernmf.studies.runner import registry, running

SHAPE = (30, 20, 3)
"""M, N and K of the study's matrices."""

CELLS = 5
"""Cells of ``W @ H`` ranked per replicate (:func:`cells`)."""

LEVEL = 0.001
"""A quantity passes when its Bonferroni-adjusted p-value is at least this."""

ENGINES = {
    "nuts": ("nuts", {"num_chains": 2, "num_warmup": 500, "num_samples": 500}),
    "gibbs": ("gibbs", {"num_chains": 2, "num_warmup": 500, "num_samples": 1000}),
    "vb": ("vb", {"variant": "cvb0"}),
    "vb_meanfield": ("vb", {"variant": "meanfield"}),
    "svi_normal": ("svi", {"guide": "AutoNormal"}),
    "svi_lowrank": ("svi", {"guide": "AutoLowRankMultivariateNormal"}),
    "mm": ("mm", {}),
    "em": ("em", {}),
}
"""The study's engines: label -> (engine, options); each sampler's kept draws thinned to
``--draws`` per replicate (nuts: 2 chains of 500 kept after 500 warmup, every 10th kept;
gibbs: 2 chains of 1000 after 500, every 20th); a variational engine (its option
``num_draws``) draws ``--draws`` from q."""

PRIORS = {"flat": Prior(1.0, 1.0, 1.0), "beta0.1": Prior(0.1, 0.1, 1.0)}
"""The study's priors, by name: flat, and H ~ Beta(0.1, 0.1) (entries near 0 or 1)."""

REPLICATES = 400
DRAWS = 100
QUICK = {
    "replicates": 40,
    "draws": 20,
    "options": {
        "nuts": {"num_warmup": 200, "num_samples": 100},
        "gibbs": {"num_warmup": 200, "num_samples": 200},
        "svi_normal": {"steps": 2000},
        "svi_lowrank": {"steps": 2000},
    },
}
"""``--quick``: replicates, draws and shorter chains and fits, over :data:`ENGINES`."""

COLUMNS = ["engine", "quantity", "replicate", "rank", "draws", "prior", "pit", "kept", "ess",
           "cpu_seconds", "warnings"]  # fmt: skip
"""The columns of :func:`simulate_ranks`'s table."""


def cells(M: int, N: int, count: int = CELLS) -> list[tuple[int, int]]:
    """``count`` cells (m, n) of an M x N matrix, in distinct rows and columns where it has
    them, spread from the top left to the bottom right."""
    return [((i * M) // count, ((2 * i + 1) * N) // (2 * count)) for i in range(count)]


def quantity_names(K: int, at: Sequence[tuple[int, int]]) -> list[str]:
    """The names of :func:`quantities`: ``WH[m,n]`` per cell, ``loglik``,
    ``W_colsum_1..K``."""
    return [f"WH[{m},{n}]" for m, n in at] + ["loglik"] + [f"W_colsum_{k + 1}" for k in range(K)]


def quantities(Y, W, H, at: Sequence[tuple[int, int]]) -> np.ndarray:
    """The label-invariant quantities of factors ``(W, H)`` and data Y.

    Parameters
    ----------
    Y : array of shape (M, N)
        Binary, every entry observed.
    W : array of shape (L, M, K)
    H : array of shape (L, K, N)
    at : sequence of (m, n)
        The cells of ``W @ H``.

    Returns
    -------
    ndarray of shape (L, len(at) + 1 + K)
        Per draw, in the order of :func:`quantity_names`: the cells, the log-likelihood
        (:func:`bernmf.models.spec.log_likelihood`) and the column sums of W, largest first.
    """
    rows, cols = (np.array(x, int) for x in zip(*at, strict=True))
    cell_values = np.einsum("lik,lki->li", W[:, rows], H[:, :, cols])
    mask = np.ones(np.shape(Y), bool)
    loglik = np.array([log_likelihood(Y, mask, w, h) for w, h in zip(W, H, strict=True)])
    sums = -np.sort(-W.sum(axis=1), axis=1)
    return np.column_stack([cell_values, loglik, sums])


def thinned(fit, draws: int) -> tuple[np.ndarray, np.ndarray, int, int]:
    """``draws`` draws of W (L, M, K) and H (L, K, N) of a fit, its chains and the draws it
    kept: in each of its C chains of S draws, L / C evenly spaced ones ending at the last
    (L a multiple of C); a fit without draws: L copies of its (W, H), 1 chain, 0 kept.

    Raises
    ------
    ValueError
        L is not a multiple of C, or more than S per chain.
    """
    if not fit.draws:
        copies = (draws, 1, 1)
        return np.tile(fit.W, copies), np.tile(fit.H, copies), 1, 0
    W, H = np.asarray(fit.draws["W"]), np.asarray(fit.draws["H"])
    C, S = W.shape[:2]
    if draws % C or draws // C > S:
        raise ValueError(
            f"draws={draws} must be a multiple of the fit's {C} chain(s) and at most their "
            f"{C * S} kept draws: raise the engine's draw count (num_samples, num_draws)"
        )
    per = draws // C
    kept = S - 1 - (S // per) * np.arange(per)[::-1]
    return (
        W[:, kept].reshape(draws, *W.shape[2:]),
        H[:, kept].reshape(draws, *H.shape[2:]),
        C,
        C * S,
    )


def check_setting(engine: str, prior: Prior, rank: int) -> Prior | None:
    """The prior to fit ``engine`` with on data drawn from ``prior``: that prior, or None
    for an engine that takes none when ``prior`` is the flat one (its own setting).

    Raises
    ------
    ValueError
        An engine whose factors are not the model's probabilities (its draws have no
        truth to rank against), that takes no prior and ``prior`` is not flat, or whose
        range ``prior`` leaves (``mm``: >= 1).
    """
    chosen = get_engine(engine)
    if not chosen.probabilities:
        raise ValueError(
            f"engine {engine!r} factors natural parameters, not the model's W and H: "
            "SBC has no truth to rank its draws against"
        )
    broadcast = prior.broadcast(rank)
    if chosen.takes_prior:
        return chosen.prior_for(prior, rank)
    if any(np.any(v != 1.0) for v in broadcast):
        raise ValueError(
            f"engine {engine!r} takes no prior: it is the MAP of the flat prior, and SBC runs "
            f"it only there, not at {describe_prior(broadcast)}"
        )
    return None


def simulate_ranks(
    engine: str,
    shape: tuple[int, int, int] = SHAPE,
    prior: Prior = Prior(1.0, 1.0, 1.0),
    *,
    replicates: int = 200,
    draws: int = DRAWS,
    seed: int = 0,
    options: Mapping | None = None,
    label: str | None = None,
    at: Sequence[tuple[int, int]] | None = None,
    progress: bool = True,
    stream=None,
) -> pd.DataFrame:
    """SBC ranks of an engine: replicates drawn from ``prior``, each fitted with it.

    Replicate r draws (Y, W, H) with a seed of ``(seed, r)`` (the same data for every
    engine), fits ``engine`` to Y with ``prior`` and options (the fit's seed drawn too),
    thins its draws to ``draws`` (:func:`thinned`) and ranks the truth of every quantity
    (:func:`quantities`) among them. One fit of replicate 0's data comes first, untimed:
    the engine compiles there, once per shape and options, and the replicates reuse it.

    Parameters
    ----------
    engine : str
        A registered engine whose factors are probabilities.
    shape : (M, N, K), default (30, 20, 3)
    prior : Prior, default flat
        Of the data and of the fits (:func:`check_setting`).
    replicates : int, default 200
    draws : int, default 100
        L: the posterior draws each truth is ranked among.
    seed : int, default 0
    options : mapping, optional
        The engine's options (its own progress off, unless given).
    label : str, optional
        The table's ``engine`` column (default ``engine``), e.g. ``"svi_lowrank"``.
    at : sequence of (m, n), optional
        Cells of ``W @ H`` to rank (default :func:`cells`).
    progress : bool, default True
        A line every few seconds (:class:`bernmf._progress.Progress`).
    stream : file, optional
        Where progress goes (default stderr).

    Returns
    -------
    DataFrame
        A row per replicate and quantity, :data:`COLUMNS`: engine (label), quantity,
        replicate, rank (in 0..draws), draws, prior (as text), pit (the randomized PIT
        value, :func:`bernmf.posterior.uniformity.pit_values`), kept (the draws the fit
        kept before thinning; 0 for a point mass), ess (bulk ESS of the quantity's L
        draws over the fit's chains; NaN for a point mass), cpu_seconds (of the fit) and
        warnings (how many the fit raised).

    Raises
    ------
    ValueError
        A bad shape, count, seed, cell, option or prior, before anything is fitted;
        too few draws (:func:`thinned`), at the first fit.
    """
    if len(shape) != 3:
        raise ValueError(f"shape must be (M, N, K), got {shape!r}")
    for name, value in zip(("M", "N", "K"), shape, strict=True):
        check_count(name, value)
    M, N, K = (int(x) for x in shape)
    check_count("replicates", replicates)
    check_count("draws", draws)
    check_seed(seed)
    at = cells(M, N) if at is None else [tuple(int(i) for i in c) for c in at]
    if not at or any(len(c) != 2 or not (0 <= c[0] < M and 0 <= c[1] < N) for c in at):
        raise ValueError(f"cells must be (m, n) pairs inside the {M} x {N} matrix, got {at}")
    fitted_prior = check_setting(engine, prior, K)
    chosen = get_engine(engine)
    options = dict(options or {})
    if "progress" in chosen.options:
        options.setdefault("progress", False)
    chosen.with_defaults(options)
    label = engine if label is None else label
    names = quantity_names(K, at)
    text = describe_prior(prior.broadcast(K))

    def replicate(r: int):
        rng = np.random.default_rng([seed, r])
        Y, W, H = simulate(int(rng.integers(2**31)), M, N, K, prior)
        fit_seed = int(rng.integers(2**31))
        return rng, Y, W, H, fit_seed

    _, Y, _, _, fit_seed = replicate(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit_engine(Y, engine, K, prior=fitted_prior, seed=fit_seed, **options)
    rows, spent = [], 0.0
    with Progress(f"sbc {label} {text}", replicates, unit="replicates", enabled=progress,
                  stream=stream) as bar:  # fmt: skip
        for r in range(replicates):
            rng, Y, W, H, fit_seed = replicate(r)
            begin = time.process_time()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fit = fit_engine(Y, engine, K, prior=fitted_prior, seed=fit_seed, **options)
            cpu = time.process_time() - begin
            spent += cpu
            W_draws, H_draws, C, kept = thinned(fit, draws)
            truth = quantities(Y, W[None], H[None], at)[0]
            values = quantities(Y, W_draws, H_draws, at)
            rank = uniformity.ranks(truth, values, rng)
            ess = ess_rows(values.T.reshape(len(names), C, draws // C), "bulk") if kept else None
            for q, name in enumerate(names):
                rows.append((
                    label, name, r, int(rank[q]), draws, text,
                    float(uniformity.pit_values(rank[q : q + 1], draws, rng)[0]), kept,
                    np.nan if ess is None else float(ess[q]), cpu, len(caught),
                ))  # fmt: skip
            bar.update()
        bar.close(f"{spent:.0f} CPU s")
    return pd.DataFrame(rows, columns=COLUMNS)


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Per engine, prior and quantity of a ranks table: the uniformity p-value of its PIT
    values, Bonferroni-adjusted for the quantities of its engine and prior, and whether
    that passes at :data:`LEVEL`; replicates, draws, kept draws, the median ESS of the
    thinned draws, the engine's CPU seconds (its fits, all replicates) and its warnings."""
    keys = ["engine", "prior", "quantity"]
    rows = []
    for (engine, prior, quantity), group in table.groupby(keys, sort=False):
        rows.append({
            "engine": engine, "prior": prior, "quantity": quantity,
            "replicates": len(group), "draws": int(group["draws"].iloc[0]),
            "pvalue": uniformity.uniformity_pvalue(group["pit"].to_numpy()),
            "kept": int(group["kept"].iloc[0]), "ess_median": group["ess"].median(),
        })  # fmt: skip
    summary = pd.DataFrame(rows)
    tests = summary.groupby(["engine", "prior"], sort=False)["quantity"].transform("size")
    summary["pvalue_adjusted"] = np.minimum(1.0, summary["pvalue"] * tests)
    summary["passes"] = summary["pvalue_adjusted"] >= LEVEL
    fits = table.drop_duplicates(["engine", "prior", "replicate"])
    spent = fits.groupby(["engine", "prior"], sort=False)[["cpu_seconds", "warnings"]].sum()
    summary = summary.join(spent, on=["engine", "prior"])
    order = ["engine", "prior", "quantity", "pvalue", "pvalue_adjusted", "passes", "replicates",
             "draws", "kept", "ess_median", "cpu_seconds", "warnings"]  # fmt: skip
    return summary[order]


def figure(table: pd.DataFrame, summary: pd.DataFrame, path: Path) -> None:
    """``ecdf.png``: a panel per engine (rows) and prior (columns), the ECDF difference of
    each quantity's PIT values with the simultaneous 95% band shaded, titled with the
    smallest adjusted p-value; a colour per quantity, the legend outside; saved in 64
    colours."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    engines = list(dict.fromkeys(table["engine"]))
    priors = list(dict.fromkeys(table["prior"]))
    names = list(dict.fromkeys(table["quantity"]))
    colour = {name: f"C{i % 10}" for i, name in enumerate(names)}
    figure, axes = plt.subplots(
        len(engines), len(priors), figsize=(3.6 * len(priors) + 1.6, 2.4 * len(engines)),
        squeeze=False, sharex=True, layout="constrained",
    )  # fmt: skip
    for (i, engine), (j, prior) in ((e, p) for e in enumerate(engines) for p in enumerate(priors)):
        axis = axes[i, j]
        rows = table[(table["engine"] == engine) & (table["prior"] == prior)]
        if rows.empty:  # an engine not run at this prior (check_setting)
            axis.text(0.5, 0.5, f"{engine}: not run at\n{prior}", ha="center", va="center",
                      fontsize=8, transform=axis.transAxes)  # fmt: skip
            axis.set_axis_off()
            continue
        for name, group in rows.groupby("quantity", sort=False):
            band = uniformity.ecdf_band(group["pit"].to_numpy())
            axis.plot(band.points, band.difference, color=colour[name], linewidth=0.9,
                      label=name)  # fmt: skip
        axis.fill_between(band.points, band.lower, band.upper, color="0.8", label="95% band")
        axis.axhline(0, color="gray", linewidth=0.5)
        tested = summary[(summary["engine"] == engine) & (summary["prior"] == prior)]
        least = tested["pvalue_adjusted"].min()
        axis.set_title(f"{engine}, {prior}\nsmallest adjusted p = {least:.2g}", fontsize=8)
        axis.tick_params(labelsize=7)
        if j == 0:
            axis.set_ylabel("ECDF - PIT", fontsize=8)
        if i == len(engines) - 1:
            axis.set_xlabel("PIT of the true value", fontsize=8)
    legend = {}
    for axis in axes.ravel():
        for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    figure.legend(legend.values(), legend.keys(), loc="outside right upper", fontsize=7)
    save_png(figure, path, dpi=80)


def parse(argv=None):
    """The options of :func:`main`: :func:`bernmf.studies.runner.registry.parser`'s and
    SBC's own."""
    made = registry.parser(__doc__, "results/sbc")
    made.add_argument("--engines", nargs="+", choices=tuple(ENGINES), default=list(ENGINES))
    made.add_argument("--priors", nargs="+", choices=tuple(PRIORS), default=list(PRIORS))
    replicates = f"default {REPLICATES} (with --quick {QUICK['replicates']})"
    made.add_argument("--replicates", type=int, help=replicates)
    made.add_argument(
        "--draws", type=int, help=f"L, default {DRAWS} (with --quick {QUICK['draws']})"
    )
    made.add_argument("--seed", type=int, default=0)
    return made.parse_args(argv)


def main(argv=None) -> int:
    """Run SBC of ``--engines`` at ``--priors`` (those an engine takes: :func:`check_setting`)
    and write ``ranks.csv`` (after each engine and prior), ``summary.csv`` and ``ecdf.png``
    in ``--out``."""
    args = parse(argv)
    replicates, draws = args.replicates, args.draws  # checked by simulate_ranks
    if replicates is None:
        replicates = QUICK["replicates"] if args.quick else REPLICATES
    if draws is None:
        draws = QUICK["draws"] if args.quick else DRAWS
    stream = registry.progress(args)
    begin = time.process_time()
    settings = []
    for label in args.engines:
        engine, options = ENGINES[label]
        options = {**options, **(QUICK["options"].get(label, {}) if args.quick else {})}
        if "num_draws" in get_engine(engine).options:  # independent draws from q: L of them
            options.setdefault("num_draws", draws)
        for name in args.priors:
            try:
                check_setting(engine, PRIORS[name], SHAPE[2])
            except ValueError as refused:
                running.log(f"{label} at {name}: not run ({refused})", stream)
                continue
            settings.append((label, engine, options, PRIORS[name]))
    out = Path(args.out)
    tables = []
    for label, engine, options, prior in settings:
        tables.append(simulate_ranks(
            engine, SHAPE, prior, replicates=replicates, draws=draws, seed=args.seed,
            options=options, label=label, progress=not args.quiet, stream=stream,
        ))  # fmt: skip
        out.mkdir(parents=True, exist_ok=True)  # once the first setting is checked and run
        write_csv(pd.concat(tables, ignore_index=True), out / "ranks.csv", index=False)
    if not tables:
        running.log("nothing to run", stream)
        return 0
    table = pd.concat(tables, ignore_index=True)
    summary = summarize(table)
    write_csv(summary, out / "summary.csv", index=False)
    figure(table, summary, out / "ecdf.png")
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        running.log(summary.round(4).to_string(index=False), stream)
    running.log(f"total {time.process_time() - begin:.0f} CPU s; results in {out}", stream)
    return 0


if __name__ == "__main__":
    sys.exit(main())
