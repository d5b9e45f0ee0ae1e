"""Figures of fits and comparisons; each function returns a matplotlib Figure.

Every function takes ``path``: when given, the figure is also saved there as PNG.
Figures are built without pyplot, so they work headless and never pop up windows.
Trace and rank plots of the Bayesian engines come from ArviZ itself
(``arviz.plot_trace(fit.to_arviz())``), not from here.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from bernmf.results.fit import Fit


def as_text(name) -> str:
    """``name`` (a label, engine or data set) as matplotlib draws it literally.

    matplotlib reads a string with two ``$`` as a formula (mathtext): ``"$a_$"`` fails to
    parse (after the whole computation of a command) and ``"$x$"`` is drawn in italics.
    Every ``$`` is escaped (``\\$``), so every name is drawn as written.
    """
    return str(name).replace("$", r"\$")


def _finish(fig: Figure, path) -> Figure:
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


PNG_COLOURS = 128
"""Colours of a study's committed figures (:func:`save_png`)."""


def save_png(fig: Figure, path, dpi: int = 110, **options) -> None:
    """Save ``fig`` as a PNG of :data:`PNG_COLOURS` colours and close it: about a third of
    the bytes of matplotlib's own PNG (32 KB against 115 for posterior_vs_map's
    score_vs_cpu.png), the same figure to the eye, so that a study's figures fit in the
    repository. Octree quantization keeps a colour that few pixels have (a legend's marker),
    which median cut merged into its neighbour. ``options`` go to :meth:`Figure.savefig`
    (e.g. ``bbox_inches``)."""
    import io

    import matplotlib.pyplot as plt
    from PIL import Image  # matplotlib's own dependency

    image = io.BytesIO()
    fig.savefig(image, dpi=dpi, **options)
    plt.close(fig)
    quantized = (
        Image.open(image).convert("RGB").quantize(PNG_COLOURS, method=Image.Quantize.FASTOCTREE)
    )
    quantized.save(path, optimize=True)


ENGINE_COLORS = {
    "mm": "#1f77b4", "em": "#ff7f0e", "vb": "#2ca02c", "gibbs": "#9467bd", "nuts": "#8c564b",
    "svi": "#e377c2", "logsvd": "#17becf", "logpca": "#bcbd22",
}  # fmt: skip
"""One colour per engine in every figure (tab10 without red and grey, which mark off-scale
values and the Pareto front); an ensemble takes its engine's colour."""
OTHER_COLOR = "#7f7f7f"
OFF_SCALE_COLOR = "black"
"""Off-scale markers of the box plots and their labels: no engine's colour (the Pareto
plot's arrows keep their engine's)."""


def engine_color(engine: str) -> str:
    """The colour of ``engine`` (``"mm ensemble"``: mm's) in every figure."""
    return ENGINE_COLORS.get(str(engine).split()[0], OTHER_COLOR)


def log_ticks(ax, axis: str = "x") -> None:
    """Readable ticks on a log axis over any range: 1-2-5 steps (every digit under a
    decade), plain numbers, no minor labels, so that no two labels overlap."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    low, high = sorted(ax.get_xlim() if axis == "x" else ax.get_ylim())
    low, high = max(low, 1e-300), max(high, 1e-300)
    decades = range(int(np.floor(np.log10(low))), int(np.ceil(np.log10(high))) + 1)
    ticks = []
    for mantissas in ((1,), (1, 2, 5), (1, 2, 3, 4, 5, 6, 7, 8, 9)):
        ticks = [m * 10.0**d for d in decades for m in mantissas if low <= m * 10.0**d <= high]
        if len(ticks) >= 3:
            break
    step = -(-len(ticks) // 8)  # at most 8 labels
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(FixedLocator(ticks[::step]))
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}"))
    target.set_minor_formatter(NullFormatter())


def reading_order(W: np.ndarray, H: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Orders of rows and columns that group them by their dominant component.

    Parameters
    ----------
    W : array of shape (M, K)
    H : array of shape (K, N)

    Returns
    -------
    rows : int array of shape (M,)
        Rows sorted by their largest weight's component, then by that weight (descending).
    columns : int array of shape (N,)
        Columns sorted the same way by H.
    """
    W, H = np.asarray(W), np.asarray(H)
    rows = np.lexsort((-W.max(axis=1), W.argmax(axis=1)))
    columns = np.lexsort((-H.max(axis=0), H.argmax(axis=0)))
    return rows, columns


LABEL_CHARACTERS = 24
"""Longer tick labels are cut to this many characters (ending with "…")."""


def _ticks(ax, axis: str, labels, limit: int, positions=None) -> None:
    """Name the ticks by ``labels``: every one up to ``limit`` labels, else every k-th, or
    those at ``positions`` when given.

    Column labels on the x axis are rotated; with more than ``limit`` labels every
    ``ceil(len / limit)``-th one is shown, in a smaller font, so that names stay
    readable (85 attributes, 285 artists) instead of overlapping.
    """
    if positions is None:
        step = -(-len(labels) // limit)
        positions = range(0, len(labels), step)
    positions = [int(i) for i in positions]
    names = [str(labels[i]) for i in positions]
    names = [v if len(v) <= LABEL_CHARACTERS else v[: LABEL_CHARACTERS - 1] + "…" for v in names]
    names = [as_text(v) for v in names]
    size = 7
    if axis == "x":
        ax.set_xticks(positions, names, rotation=90, fontsize=size)
    else:
        ax.set_yticks(positions, names, fontsize=size)


ROW_LABELS = 80
"""The most row labels a factor plot shows (about a figure's height of 7-point names)."""


def strongest_rows(W: np.ndarray, limit: int) -> np.ndarray:
    """Positions of the rows a factor plot names when it cannot name them all: each
    component's rows of largest W in turn (every component's strongest, then its second,
    ...), a row taken only when no row already taken lies within ``ceil(M / limit)``
    positions (the spacing of every k-th row, so that names never overlap), at most
    ``limit`` of them. Every k-th row may skip the rows that make a component; these name
    whom each component holds.

    Parameters
    ----------
    W : array of shape (M, K)
        In the order the plot draws its rows.
    limit : int
        The most rows named.

    Returns
    -------
    ndarray of int
        Sorted row positions.
    """
    M = W.shape[0]
    gap = -(-M // limit)
    order = np.argsort(-W, axis=0, kind="stable")  # (M, K): each component's rows, strongest first
    free = np.ones(M + 2 * gap, bool)  # padded: row m is free[m + gap]
    taken: list[int] = []
    for m in order.ravel():  # depth by depth, the components in turn
        if len(taken) == limit:
            break
        if free[m + 1 : m + 2 * gap].all():  # no taken row within gap - 1 positions
            taken.append(int(m))
            free[m + gap] = False
    return np.sort(np.array(taken, dtype=int))


GROUP_COLOURS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22",
    "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2",
    "#dbdb8d", "#9edae5",
)  # fmt: skip
"""The colours of row groups (:func:`factors`), in the order the groups come: tab10's, then
tab20's light ones, without their greys (:data:`UNGROUPED_COLOUR`'s); more groups cannot be
told apart by colour."""
UNGROUPED_COLOUR = "#d9d9d9"
"""The colour of a row without a group."""


def group_rows(row_groups, rows: pd.Index, what: str = "row_groups") -> tuple[np.ndarray, list]:
    """Each row's group of ``row_groups``, as codes into the list of the groups.

    Parameters
    ----------
    row_groups : mapping or pandas.Series
        Row label -> group (a party, a region: any hashable, drawn as ``str`` writes it).
        A row that it leaves out, or whose group is missing (None, NaN, ``pd.NA``), is
        ungrouped.
    rows : pandas.Index of length M
        The rows' labels.
    what : str, default "row_groups"
        How the errors name ``row_groups`` (the command line's: its file).

    Returns
    -------
    codes : int ndarray of shape (M,)
        Each row's position in ``groups``; -1 for a row without a group.
    groups : list
        The groups, in the order they first come in ``row_groups``; at most
        ``len(GROUP_COLOURS)``.

    Raises
    ------
    TypeError
        ``row_groups`` is not a mapping.
    ValueError
        A label twice (in a Series), a label that is no row's, more groups than
        :data:`GROUP_COLOURS`, or no row with a group; the message names them.
    """
    if not isinstance(row_groups, Mapping | pd.Series):
        raise TypeError(
            f"{what} must map row labels to groups (a dict or a pandas Series), "
            f"got {type(row_groups).__name__}"
        )
    labels = pd.Index(list(row_groups.keys()), dtype=object, tupleize_cols=False)
    twice = labels[labels.duplicated()].unique().tolist()
    if twice:
        raise ValueError(f"{what} gives the rows {twice[:5]} a group more than once")
    unknown = labels[~labels.isin(rows)].tolist()
    if unknown:
        raise ValueError(
            f"{what} names {len(unknown)} label(s) that are no row's: {unknown[:5]} (rows are "
            f"labelled {rows[:3].tolist()}, ...)"
        )
    group_of = {
        label: group
        for label, group in row_groups.items()
        if not (pd.api.types.is_scalar(group) and pd.isna(group))
    }
    groups = list(dict.fromkeys(group_of.values()))
    if len(groups) > len(GROUP_COLOURS):
        raise ValueError(
            f"{what} has {len(groups)} groups; at most {len(GROUP_COLOURS)} can be told apart "
            "by colour"
        )
    if not groups:
        raise ValueError(f"{what} gives no row a group")
    index = {group: i for i, group in enumerate(groups)}
    codes = np.array([index[group_of[row]] if row in group_of else -1 for row in rows], int)
    return codes, groups


def _draw_groups(ax, codes: np.ndarray, groups: list) -> None:
    """A strip of the rows' group colours left of W's heat map in ``ax``, its row labels in
    their group's colour, and a legend of the groups (with their rows' counts) below."""
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Patch
    from matplotlib.transforms import ScaledTranslation

    colours = [*GROUP_COLOURS[: len(groups)], UNGROUPED_COLOUR]  # codes of -1: the last
    right = ax.get_xlim()[1]
    strip = np.array([to_rgb(c) for c in colours])[codes][:, None, :]  # (M, 1, 3)
    M = len(codes)
    ax.imshow(strip, extent=(-1.5, -0.6, M - 0.5, -0.5), aspect="auto", interpolation="nearest")
    ax.set_xlim(-1.5, right)
    ax.set_ylim(M - 0.5, -0.5)
    for label, position in zip(ax.get_yticklabels(), ax.get_yticks(), strict=True):
        if codes[int(position)] >= 0:
            label.set_color(colours[codes[int(position)]])
    counts = np.bincount(codes + 1, minlength=len(groups) + 1)  # ungrouped first
    handles = [
        Patch(color=colour, label=as_text(f"{group} ({count})"))
        for colour, group, count in zip(colours[:-1], groups, counts[1:], strict=True)
    ]
    if counts[0]:
        handles.append(Patch(color=UNGROUPED_COLOUR, label=f"ungrouped ({counts[0]})"))
    # 40 points below the axes: under the components' numbers and the "component" label
    below = ax.transAxes + ScaledTranslation(0, -40 / 72, ax.figure.dpi_scale_trans)
    ax.legend(
        handles=handles, title="row groups", loc="upper center", bbox_to_anchor=(0.5, 0),
        bbox_transform=below, fontsize=7, title_fontsize=7, frameon=False,
    )  # fmt: skip


def factors(fit: Fit, *, path=None, order: bool = True, row_groups=None) -> Figure:
    """Heatmaps of W (rows x components) and H (components x columns), labelled.

    Rows and columns carry the input's labels (every one up to :data:`ROW_LABELS` rows
    and 120 columns, long names cut; beyond, the columns every k-th and the rows
    :func:`strongest_rows`, those of largest W in each component), so that components
    can be read off the named rows and columns; :meth:`bernmf.Fit.top_columns` and
    :meth:`bernmf.Fit.top_rows` list them.

    Parameters
    ----------
    fit : Fit
    path : str or Path, optional
        Save the figure there (PNG).
    order : bool, default True
        Group rows and columns by their dominant component (see :func:`reading_order`).
    row_groups : mapping or pandas.Series, optional
        Row label -> group (a party, a region), as :func:`group_rows` reads it: each
        row's group is drawn as a strip of colour left of W, its name in that colour,
        with a legend of the groups and their rows' counts below W; rows without a
        group in light grey, "ungrouped".

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    TypeError, ValueError
        ``row_groups`` that :func:`group_rows` refuses.
    """
    frames = fit.frames
    W, H = frames.W, frames.H
    codes, groups = (None, None) if row_groups is None else group_rows(row_groups, frames.rows)
    shown = fit.engine  # a stack's factors are one member's: named
    if fit.mixture is not None and fit.mixture.stacking is not None:
        shown = f"stack's {fit.members[fit.mixture.chosen].engine} member"
    if order:
        rows, columns = reading_order(W.to_numpy(), H.to_numpy())
        W, H = W.iloc[rows], H.iloc[:, columns]
        codes = None if codes is None else codes[rows]
    M, N = W.shape[0], H.shape[1]
    fig = Figure(figsize=(min(4 + 0.15 * N, 16), min(3 + 0.12 * max(M, 10), 14)))
    # W at least an eighth of H's width, so that its title and row names fit beside it;
    # one column more for the groups' strip
    wide = max(fit.rank, 2, N / 8) + (groups is not None)
    grid = fig.add_gridspec(1, 2, width_ratios=(wide, max(N, 4)))
    width = fig.get_figwidth() * 72 * max(N, 4) / (wide + max(N, 4))
    for position, (name, frame) in enumerate((("W", W), ("H", H))):
        ax = fig.add_subplot(grid[0, position])
        values = frame.to_numpy(dtype=float)
        image = ax.imshow(
            values, aspect="auto", cmap="viridis", interpolation="nearest", **_scale(values)
        )  # one cell per entry, the colours spread over the values' own range
        columns = range(fit.rank) if name == "W" else frame.columns  # W: "k", not "component_k"
        _ticks(ax, "x", columns, limit=120 if name == "W" else max(4, int(width / 11)))
        named = None  # W's rows beyond the limit: those that name each component
        if name == "W" and len(frame.index) > ROW_LABELS:
            named = strongest_rows(values, ROW_LABELS)
        _ticks(ax, "y", frame.index, limit=ROW_LABELS, positions=named)
        if name == "W":
            ax.set_xlabel("component")
            if groups is not None:
                _draw_groups(ax, codes, groups)
        ax.set_title(f"{name} ({as_text(shown)}, K = {fit.rank})")
        fig.colorbar(image, ax=ax, shrink=0.7)
    return _finish(fig, path)


def _scale(values: np.ndarray) -> dict:
    """``vmin`` and ``vmax`` of a heatmap: 0 (when no value is below) to the largest value
    (its 99.5th percentile when a few outliers would flatten the rest)."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return {}
    low = min(0.0, float(finite.min()))
    high = float(np.percentile(finite, 99.5))
    high = high if high > low else float(finite.max())
    return {"vmin": low, "vmax": high if high > low else low + 1.0}


def validation_heatmap(table: pd.DataFrame, rank: int | None = None, *, path=None) -> Figure:
    """Validation perplexity over alpha x beta at one rank, the best setting starred.

    Parameters
    ----------
    table : DataFrame
        Columns rank, alpha, beta, validation_perplexity (as :class:`bernmf.tune.Tuning`'s
        table), and engine (named in the title) if it has one: one engine's rows, several
        seeds per setting averaged.
    rank : int, optional
        Default: the rank of the best row.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ValueError
        Rows of several engines (their scores would be averaged together), or no row at
        ``rank``.
    """
    engines = table["engine"].unique().tolist() if "engine" in table else []
    if len(engines) > 1:
        raise ValueError(f"the table has rows of engines {engines}; give one engine's rows")
    if rank is None:
        rank = int(table.loc[table["validation_perplexity"].idxmin(), "rank"])
    subset = table[table["rank"] == rank]
    if subset.empty:
        raise ValueError(f"no row of the table has rank {rank}")
    heat = subset.pivot_table(index="alpha", columns="beta", values="validation_perplexity")
    values = heat.to_numpy()
    fig = Figure(figsize=(5.5, 4.5))
    ax = fig.add_subplot()
    image = ax.imshow(values, origin="lower", aspect="auto", cmap="viridis_r")
    ax.set_xticks(range(heat.shape[1]), [f"{b:.3g}" for b in heat.columns], rotation=90)
    ax.set_yticks(range(heat.shape[0]), [f"{a:.3g}" for a in heat.index])
    i, j = np.unravel_index(np.nanargmin(values), values.shape)
    ax.plot(j, i, marker="*", color="red", markersize=12)
    engine = f"{engines[0]}, " if engines else ""
    title = f"{engine}K = {rank}: best {np.nanmin(values):.4f}"
    ax.set(xlabel="beta", ylabel="alpha", title=title)
    fig.colorbar(image, ax=ax, label="validation perplexity (nats)")
    return _finish(fig, path)


def outlier_limit(values) -> float | None:
    """The top of an axis that keeps the close values readable, or None to show them all.

    Values far above the rest (em's 1.98 and logsvd's 2.33 next to 0.4) would squeeze
    the close ones into a line. Two rules, the lower limit wins: the median plus the
    larger of three times its distance to the minimum and half its size; and, sorted
    ascending, a margin above the values before the first gap that is over half the
    whole range and over three times the spread below it (a close group of few values).

    Parameters
    ----------
    values : array-like
        The plotted values; NaN is ignored.

    Returns
    -------
    float or None
        The axis top (every value above it is off the scale); None when none would be.
    """
    v = np.asarray(values, dtype=float)
    v = np.sort(v[np.isfinite(v)])
    if v.size < 2:
        return None
    median = np.median(v)
    limits = [median + max(3 * (median - v[0]), 0.5 * abs(median))]
    whole = v[-1] - v[0]
    for i, gap in enumerate(np.diff(v)):
        spread = v[i] - v[0]
        if gap > 0.5 * whole and gap > 3 * spread:
            limits.append(v[i] + max(0.25 * spread, 0.02 * abs(v[i]), 1e-3))
            break
    top = float(min(limits))
    return top if v[-1] > top else None


def _mark_off_scale(ax, x, y, labels, top: float) -> None:
    """Draw values above ``top`` at the top as arrows, annotated with their values."""
    off = sorted((xi, yi, label) for xi, yi, label in zip(x, y, labels, strict=True) if yi > top)
    for j, (xi, yi, label) in enumerate(off):  # neighbours' labels on staggered lines
        ax.plot(xi, top, marker="^", color=OFF_SCALE_COLOR, clip_on=False, markersize=7)
        ax.annotate(
            as_text(f"{label} {yi:.3g}".strip()), (xi, top), xytext=(0, -12 - 9 * (j % 3)),
            textcoords="offset points", ha="center", fontsize=7, color=OFF_SCALE_COLOR,
        )  # fmt: skip


def pareto_front(seconds, perplexity) -> np.ndarray:
    """Which points no other point beats on both time and perplexity.

    Parameters
    ----------
    seconds, perplexity : arrays of shape (n,)
        Lower is better in both.

    Returns
    -------
    bool array of shape (n,)
        True for a point when no other point is at least as fast and as good and
        strictly better in one of the two (NaN points are never on the front).
    """
    s, p = np.asarray(seconds, dtype=float), np.asarray(perplexity, dtype=float)
    if s.shape != p.shape or s.ndim != 1:
        raise ValueError(f"seconds {s.shape} and perplexity {p.shape} must be equal 1-d shapes")
    ok = np.isfinite(s) & np.isfinite(p)
    no_worse = (s[None, :] <= s[:, None]) & (p[None, :] <= p[:, None])
    better = (s[None, :] < s[:, None]) | (p[None, :] < p[:, None])
    dominated = (no_worse & better & ok[None, :]).any(axis=1)
    return ok & ~dominated


def pareto(board: pd.DataFrame, *, path=None) -> Figure:
    """Test perplexity against seconds (log scale), one panel per dataset, front drawn.

    Each point is numbered (best perplexity first), its number placed beside it where it
    overlaps no other number or point (:func:`_place_numbers`), and the numbers are
    listed with their engine, setting and perplexity in a legend right of the axes.
    Off-scale perplexities (see :func:`outlier_limit`) are drawn as arrows at the top
    of a clipped axis in their engine's colour, numbered as the others.

    Parameters
    ----------
    board : DataFrame
        One row per engine and setting: ``dataset``, ``engine``, ``setting``,
        ``seconds``, ``perplexity`` (as :func:`bernmf.studies.report.page.leaderboard`).

    Returns
    -------
    matplotlib.figure.Figure
    """
    from matplotlib.lines import Line2D

    datasets = list(dict.fromkeys(board["dataset"]))
    fig = Figure(figsize=(9.5, 4.6 * len(datasets)))
    panels = []
    for i, dataset in enumerate(datasets):
        ax = fig.add_subplot(len(datasets), 1, i + 1)
        table = (  # settings that are the same fits (tuned = shared rank) share a point
            board[board["dataset"] == dataset]
            .groupby(["engine", "seconds", "perplexity"], sort=False)["setting"]
            .agg(" = ".join)
            .reset_index()
            .sort_values("perplexity", kind="stable", ignore_index=True)
        )
        x, y = table["seconds"].to_numpy(float), table["perplexity"].to_numpy(float)
        top = outlier_limit(y)
        finite = y[np.isfinite(y)]
        if top is None and np.isinf(y).any() and finite.size:  # inf is off every scale
            top = float(finite.max() + max(0.05 * np.ptp(finite), 0.01 * abs(finite.max())))
        off = np.zeros(len(y), bool) if top is None else ~(y <= top)
        shown = np.where(off, top if top is not None else 0.0, y)
        handles = []
        for j, (engine, setting) in enumerate(zip(table["engine"], table["setting"], strict=True)):
            marker = "D" if engine.endswith("ensemble") else "o"
            handles.append(
                Line2D([], [], marker="^" if off[j] else marker, color=engine_color(engine),
                       linestyle="", label=_pareto_label(j + 1, engine, setting, y[j], off[j]))
            )  # fmt: skip
        for engine in dict.fromkeys(table["engine"]):
            chosen = (table["engine"] == engine).to_numpy() & ~off
            marker = "D" if engine.endswith("ensemble") else "o"
            ax.scatter(
                x[chosen], y[chosen], label=as_text(engine), s=25, color=engine_color(engine),
                marker=marker,
            )  # fmt: skip
        if off.any():
            ax.scatter(
                x[off], shown[off], marker="^", s=40, clip_on=False,
                color=[engine_color(engine) for engine in table["engine"][off]],
            )  # fmt: skip
        front = pareto_front(x, y)
        order = np.argsort(x[front])
        ax.step(x[front][order], y[front][order], where="post", color="grey", linestyle="--")
        ax.set_xscale("log")
        finite = x[np.isfinite(x) & (x > 0)]
        if finite.size:  # room for the numbers around the points
            ax.set_xlim(finite.min() / 1.6, finite.max() * 1.6)
        log_ticks(ax, "x")
        if top is not None:
            ax.set_ylim(top=top)
        ax.set(
            xlabel="seconds per fit (log)", ylabel="test perplexity (nats)", title=as_text(dataset)
        )
        ax.grid(alpha=0.3)
        ax.legend(
            handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
            fontsize=7, ncols=1 + len(handles) // 24, title="points (best first)",
            title_fontsize=7, handletextpad=0.3,
        )  # fmt: skip
        panels.append((ax, x, shown))
    fig.tight_layout()  # before the numbers: they are placed in the final axes
    for ax, x, shown in panels:
        _place_numbers(ax, x, shown, [str(j + 1) for j in range(len(x))])
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def _pareto_label(number: int, engine: str, setting: str, perplexity: float, off: bool) -> str:
    """The legend's text of point ``number`` of :func:`pareto` (all its text but numbers and
    axis labels)."""
    name = engine if setting in ("ensemble", "stacked") else f"{engine} {setting}"
    return as_text(f"{number}  {name}: {perplexity:.4g}" + (" (off scale)" if off else ""))


def _place_numbers(ax, x, y, numbers: list[str], fontsize: float = 7.0) -> None:
    """Write ``numbers[i]`` beside point ``(x[i], y[i])`` where it overlaps no other number
    and no point, inside the axes; a thin line joins a number placed away from its point.

    Greedy, point by point: the first free box among offsets on rings of growing radius
    (16 directions each) around the point, in display units; a number with no free box
    (hardly possible: rings reach the whole axes) goes where it overlaps least.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.transforms import Bbox

    canvas = FigureCanvasAgg(ax.figure)
    renderer = canvas.get_renderer()
    scale = ax.figure.dpi / 72.0  # display units per point
    frame = ax.get_window_extent(renderer)
    ok = np.isfinite(x) & np.isfinite(y)
    centers = np.full((len(x), 2), np.nan)
    centers[ok] = ax.transData.transform(np.column_stack([x[ok], y[ok]]))
    marker = 4.0 * scale  # half the side of a point's box
    taken = [Bbox.from_bounds(cx - marker, cy - marker, 2 * marker, 2 * marker)
             for cx, cy in centers[ok]]  # fmt: skip
    angles = np.linspace(0.0, 2 * np.pi, 16, endpoint=False)  # right first, then around
    radii = [9, 13, 18, 24, 32, 42, 55, 75, 100, 140, 200, 300]
    for i in np.flatnonzero(ok):
        text = ax.annotate(numbers[i], (x[i], y[i]), fontsize=fontsize, ha="center", va="center",
                           annotation_clip=False)  # fmt: skip
        extent = text.get_window_extent(renderer)
        width, height = extent.width + 2, extent.height
        best, fewest = (0.0, 0.0), np.inf
        for radius in radii:
            for angle in angles:
                dx, dy = radius * scale * np.cos(angle), radius * scale * np.sin(angle)
                cx, cy = centers[i] + (dx, dy)
                box = Bbox.from_bounds(cx - width / 2, cy - height / 2, width, height)
                inside = frame.containsx(box.x0) and frame.containsx(box.x1)
                inside = inside and frame.containsy(box.y0) and frame.containsy(box.y1)
                overlaps = sum(box.overlaps(other) for other in taken) + (not inside) * 100
                if overlaps < fewest:
                    best, fewest = (dx, dy), overlaps
                if not overlaps:
                    break
            if not fewest:
                break
        dx, dy = best
        text.remove()
        line = (
            {"arrowstyle": "-", "lw": 0.5, "color": "grey"}
            if np.hypot(dx, dy) > 12 * scale
            else None
        )
        ax.annotate(
            numbers[i], (x[i], y[i]), xytext=(dx / scale, dy / scale), textcoords="offset points",
            fontsize=fontsize, ha="center", va="center", arrowprops=line, annotation_clip=False,
        )  # fmt: skip
        cx, cy = centers[i] + best
        taken.append(Bbox.from_bounds(cx - width / 2, cy - height / 2, width, height))


def perplexity_boxplot(
    table: pd.DataFrame, *, by: str = "engine", value: str = "perplexity", path=None, ax=None
) -> Figure:
    """Box plots of held-out perplexity per engine (or per any column ``by``).

    Groups far above the others are drawn off a clipped axis, their medians annotated
    (:func:`outlier_limit`); inf values (a held-out entry given probability 0) are
    annotated at the top as "inf", with their count when the group has finite ones too.

    Parameters
    ----------
    table : DataFrame
        One row per fit, with columns ``by`` and ``value``.
    ax : matplotlib Axes, optional
        Draw there (a panel of a larger figure, which its caller lays out and saves);
        default a figure of its own, saved to ``path`` when given.

    Returns
    -------
    matplotlib.figure.Figure
    """
    groups = list(dict.fromkeys(table[by]))
    own = ax is None
    if own:
        ax = Figure(figsize=(1.2 * len(groups) + 2.5, 4)).add_subplot()
    values = [table.loc[table[by] == g, value].to_numpy(float) for g in groups]
    finite = [v[np.isfinite(v)] for v in values]
    boxes = ax.boxplot([v if v.size else [np.nan] for v in finite], patch_artist=True)
    for box, group in zip(boxes["boxes"], groups, strict=True):
        box.set(facecolor=engine_color(group), alpha=0.6)
    x = range(1, len(groups) + 1)
    ax.set_xticks(x, [as_text(g) for g in groups])
    top = outlier_limit(table[value])
    if top is not None:  # keep the close groups readable; the far ones are annotated
        medians = [float(np.median(v)) if v.size else np.nan for v in finite]
        ax.set_ylim(top=top)
        _mark_off_scale(ax, x, medians, [""] * len(groups), top)
    counts = [int((~np.isfinite(v)).sum()) for v in values]
    labels = [f"{n} of {len(v)}" if n < len(v) else "" for n, v in zip(counts, values, strict=True)]
    _mark_off_scale(ax, x, [np.inf if n else np.nan for n in counts], labels, ax.get_ylim()[1])
    ax.set(xlabel=by, ylabel=f"held-out {value} (nats)")
    ax.grid(axis="y", alpha=0.3)
    return _finish(ax.figure, path) if own else ax.figure


def traces(fits: Mapping[str, Fit] | Fit, *, path=None) -> Figure:
    """Each engine's ``trace`` (objective, ELBO or mean NLL) against iteration, two ways.

    Left: the trace itself. Right: its distance to the final value, relative to that
    value, on a log scale, where the hundreds of iterations that a linear axis draws as
    one flat line show how the fit converged (down to the stopping tolerance).

    Parameters
    ----------
    fits : Fit or mapping of label -> Fit

    Returns
    -------
    matplotlib.figure.Figure
    """
    if isinstance(fits, Fit):
        fits = {fits.engine: fits}
    fig = Figure(figsize=(10, 4))
    raw, relative = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for label, fit in fits.items():
        trace = np.asarray(fit.trace, dtype=float)
        color = engine_color(fit.engine) if len(fits) == 1 else None
        raw.plot(np.arange(len(trace)), trace, label=as_text(label), color=color)
        finite = trace[np.isfinite(trace)]
        if finite.size > 1:
            final = finite[-1]
            gap = np.abs(trace[:-1] - final) / max(abs(final), np.finfo(float).tiny)
            keep = np.isfinite(gap) & (gap > 0)
            relative.plot(np.arange(len(gap))[keep], gap[keep], label=as_text(label), color=color)
    raw.set(xlabel="iteration", ylabel="objective (engine's trace)")
    relative.set_yscale("log")
    if relative.lines:
        log_ticks(relative, "y")
    relative.set(xlabel="iteration", ylabel="|trace - final| / |final| (log)")
    for ax in (raw, relative):
        ax.grid(alpha=0.3)
    if len(fits) > 1:
        raw.legend()
    return _finish(fig, path)


def reliability(Y, probs, mask=None, *, bins: int = 10, path=None) -> Figure:
    """Reliability diagram: observed frequency of ones against predicted P(Y=1).

    Parameters
    ----------
    Y : array of shape (M, N)
        Binary data; NaN is never scored.
    probs : array of shape (M, N)
        Predicted P(Y=1).
    mask : bool array of shape (M, N), optional
        Entries to score (e.g. the test entries).
    bins : int, default 10
        Equal-width bins of the predicted probability.

    Returns
    -------
    matplotlib.figure.Figure
    """
    Y, probs = np.asarray(Y, dtype=float), np.asarray(probs, dtype=float)
    if Y.shape != probs.shape:
        raise ValueError(f"Y has shape {Y.shape} but probs has shape {probs.shape}")
    selected = ~np.isnan(Y) if mask is None else ~np.isnan(Y) & np.asarray(mask, bool)
    y, p = Y[selected], probs[selected]
    which = np.clip((p * bins).astype(int), 0, bins - 1)
    counts = np.bincount(which, minlength=bins)
    used = counts > 0
    mean_p = np.bincount(which, p, bins)[used] / counts[used]
    frequency = np.bincount(which, y, bins)[used] / counts[used]
    fig = Figure(figsize=(4.5, 4.5))
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", label="perfect")
    ax.plot(mean_p, frequency, marker="o", label="model")
    ax.set(xlabel="predicted P(Y=1)", ylabel="observed frequency of 1", xlim=(0, 1), ylim=(0, 1))
    ax.legend()
    return _finish(fig, path)
