"""bernmf.plot: each figure is built, labelled as documented, and saved as PNG."""

from __future__ import annotations

import dataclasses
import warnings

import matplotlib.colors
import numpy as np
import pandas as pd
import pytest

import bernmf
from bernmf import plot


@pytest.fixture(scope="module")
def labelled():
    Y, _, _ = bernmf.simulate(0, 12, 8, 2, bernmf.Prior(0.3, 0.3, 0.3))
    frame = pd.DataFrame(Y, index=[f"r{i}" for i in range(12)], columns=list("abcdefgh"))
    return frame, bernmf.fit(frame, "mm", 2, prior=bernmf.Prior(1.2, 1.2), max_iter=50)


def test_reading_order_groups_by_dominant_component():
    W = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    H = np.array([[0.9, 0.1, 0.5], [0.2, 0.8, 0.4]])
    rows, columns = plot.reading_order(W, H)
    assert rows.tolist() == [1, 3, 0, 2] and columns.tolist() == [0, 2, 1]


def test_factor_heatmaps_carry_the_labels(labelled, tmp_path):
    frame, fit = labelled
    fig = plot.factors(fit, path=tmp_path / "factors.png")
    titled = {ax.get_title().split()[0]: ax for ax in fig.axes if ax.get_title()}
    ax_W, ax_H = titled["W"], titled["H"]
    assert len(fig.axes) == 4  # a colorbar each: the scales are fitted to W's and H's values
    image = ax_H.get_images()[0]
    assert image.get_interpolation() == "nearest"  # one cell per entry, not a blur
    assert image.get_clim()[1] == pytest.approx(np.percentile(fit.H, 99.5))
    assert {t.get_text() for t in ax_W.get_yticklabels()} == set(frame.index)
    assert {t.get_text() for t in ax_H.get_xticklabels()} == set(frame.columns)
    assert (tmp_path / "factors.png").stat().st_size > 1000


def test_other_figures(labelled, tmp_path):
    frame, fit = labelled
    table = pd.DataFrame(
        [(2, a, b, 0.5 + (a - 2) ** 2 + (b - 1.5) ** 2) for a in (1, 2, 3) for b in (1, 1.5)],
        columns=["rank", "alpha", "beta", "validation_perplexity"],
    )
    fig = plot.validation_heatmap(table, path=tmp_path / "v.png")
    assert fig.axes[0].get_title() == "K = 2: best 0.5000"
    mm = plot.validation_heatmap(table.assign(engine="mm")).axes[0]
    assert mm.get_title() == "mm, K = 2: best 0.5000"
    halved = table.assign(alpha=table["alpha"].replace({3: 1.05, 2: 1.1}))  # tune's extension
    labels = plot.validation_heatmap(halved).axes[0].get_yticklabels()
    assert [t.get_text() for t in labels] == ["1", "1.05", "1.1"]  # were 1, 1.1, 1.1
    two = pd.concat([table.assign(engine="mm"), table.assign(engine="gibbs")])
    with pytest.raises(ValueError, match=r"engines \['mm', 'gibbs'\]; give one engine's rows"):
        plot.validation_heatmap(two)
    runs = pd.DataFrame({"engine": ["mm", "mm", "em"], "perplexity": [0.5, 0.6, 0.9]})
    boxes = plot.perplexity_boxplot(runs, path=tmp_path / "b.png")
    assert [t.get_text() for t in boxes.axes[0].get_xticklabels()] == ["mm", "em"]
    lines = plot.traces({"a": fit, "b": fit}, path=tmp_path / "t.png").axes[0].get_lines()
    np.testing.assert_array_equal(lines[0].get_ydata(), fit.trace)
    fig = plot.reliability(frame.to_numpy(), fit.probs, bins=4, path=tmp_path / "r.png")
    x, y = fig.axes[0].get_lines()[1].get_data()
    assert ((0 <= x) & (x <= 1) & (0 <= y) & (y <= 1)).all()
    assert all((tmp_path / n).stat().st_size > 1000 for n in ("v.png", "b.png", "t.png", "r.png"))


def test_many_columns_are_thinned_to_readable_names():
    names = [f"artist number {j} with a long name" for j in range(285)]
    Y, _, _ = bernmf.simulate(2, 40, 285, 3, bernmf.Prior(0.3, 0.3, 0.3))
    fit = bernmf.fit(pd.DataFrame(Y, columns=names), "mm", 3, max_iter=20)
    fig = plot.factors(fit, order=False)
    ax_H = next(ax for ax in fig.axes if ax.get_title().startswith("H"))
    shown = [t.get_text() for t in ax_H.get_xticklabels()]
    step = ax_H.get_xticks()[1] - ax_H.get_xticks()[0]
    assert 2 <= step <= 6 and ax_H.get_xticks().tolist() == list(range(0, 285, int(step)))
    cut = plot.LABEL_CHARACTERS - 1
    assert shown[:2] == [names[0][:cut] + "…", names[int(step)][:cut] + "…"]
    assert all(t.get_fontsize() >= 7 for t in ax_H.get_xticklabels())
    assert not overlapping(fig, ax_H.get_xticklabels())


def test_many_rows_are_named_by_the_strongest_rows_of_each_component():
    """Beyond ROW_LABELS rows the plot names each component's strongest rows in turn, no two
    closer than every k-th row would be, instead of every k-th row, which may skip the rows
    that make a component."""
    names = [f"row {m}" for m in range(300)]
    Y, _, _ = bernmf.simulate(4, 300, 40, 4, bernmf.Prior(0.3, 0.3, 0.3))
    fit = bernmf.fit(pd.DataFrame(Y, index=names), "mm", 4, max_iter=30)
    fig = plot.factors(fit, order=False)
    ax_W = next(ax for ax in fig.axes if ax.get_title().startswith("W"))
    shown = [t.get_text() for t in ax_W.get_yticklabels()]
    named = plot.strongest_rows(fit.W, plot.ROW_LABELS)
    assert shown == [names[m] for m in named] and 4 <= len(named) <= plot.ROW_LABELS
    gap = -(-300 // plot.ROW_LABELS)
    assert (np.diff(named) >= gap).all()  # never closer than every k-th row's names
    assert int(np.argmax(fit.W[:, 0])) in named  # the first component's strongest, first
    for k in range(4):  # each component's strongest row, or one next to it, is named
        assert np.abs(named - int(np.argmax(fit.W[:, k]))).min() < gap
    # rows drawn grouped by component (the default): every group named
    W = np.repeat(np.eye(4), 75, axis=0) * 0.9 + 0.025
    named = plot.strongest_rows(W, plot.ROW_LABELS)
    assert {int(m) // 75 for m in named} == {0, 1, 2, 3} and (np.diff(named) >= gap).all()


def test_row_groups_colour_the_rows_of_w_with_a_legend(labelled):
    """Each row's group: a strip left of W and its name, in the group's colour (the groups'
    colours in their order in row_groups), rows left out or of no group in light grey; a
    legend counts the rows of each; W's heat map is drawn as without groups."""
    frame, fit = labelled
    groups = pd.Series(["b", "a"] * 5 + [None], frame.index[:11], object)  # r10: none; r11 out
    colour = {"b": plot.GROUP_COLOURS[0], "a": plot.GROUP_COLOURS[1], None: plot.UNGROUPED_COLOUR}
    rows, _ = plot.reading_order(fit.W, fit.H)
    drawn = [colour[groups.get(frame.index[m])] for m in rows]
    for given in (groups, groups.to_dict()):
        ax_W = next(
            ax for ax in plot.factors(fit, row_groups=given).axes if ax.get_title()[0] == "W"
        )
        heat, strip = ax_W.get_images()
        np.testing.assert_array_equal(heat.get_array(), fit.W[rows])
        rgb = [matplotlib.colors.to_rgb(c) for c in drawn]
        np.testing.assert_allclose(strip.get_array()[:, 0, :], rgb)
        assert ax_W.get_xlim() == (-1.5, fit.rank - 0.5)  # every component and the strip
        for label in ax_W.get_yticklabels():
            group = groups.get(label.get_text())
            if group is not None:
                assert matplotlib.colors.same_color(label.get_color(), colour[group])
            else:
                assert not any(
                    matplotlib.colors.same_color(label.get_color(), c) for c in colour.values()
                )
        legend = [t.get_text() for t in ax_W.get_legend().get_texts()]
        assert legend == ["b (5)", "a (5)", "ungrouped (2)"]
    plain = next(ax for ax in plot.factors(fit).axes if ax.get_title()[0] == "W")
    assert len(plain.get_images()) == 1 and plain.get_legend() is None


@pytest.mark.parametrize(
    ("groups", "error", "message"),
    [
        ([("r0", "a")], TypeError, "must map row labels to groups .*got list"),
        ({"r0": "a", "x": "b", 3: "b"}, ValueError, r"names 2 label\(s\) that are no row's: \['x'"),
        (pd.Series(["a", "b"], index=["r1", "r1"]), ValueError, r"gives the rows \['r1'\] a group"),
        ({"r0": None, "r1": np.nan, "r2": pd.NA}, ValueError, "gives no row a group"),
        ({f"r{m}": m for m in range(12)}, None, None),
    ],
)  # fmt: skip
def test_row_groups_that_do_not_fit_the_rows_are_refused(labelled, groups, error, message):
    _, fit = labelled
    if error is None:
        assert len(plot.group_rows(groups, fit.frames.rows)[1]) == 12
        return
    with pytest.raises(error, match=f"^row_groups {message}"):
        plot.factors(fit, row_groups=groups)


def test_no_more_row_groups_than_colours_told_apart():
    rows = pd.RangeIndex(30)
    n = len(plot.GROUP_COLOURS)
    codes, groups = plot.group_rows({m: f"g{m}" for m in range(n)}, rows)
    assert groups == [f"g{m}" for m in range(n)] and codes.tolist() == [*range(n)] + [-1] * 12
    assert len(set(plot.GROUP_COLOURS) | {plot.UNGROUPED_COLOUR}) == n + 1
    with pytest.raises(ValueError, match=f"has {n + 1} groups; at most {n} can be told apart"):
        plot.group_rows({m: f"g{m}" for m in range(n + 1)}, rows)


def test_top_columns_against_a_sort_of_each_row(labelled):
    frame, fit = labelled
    top = fit.top_columns(3)
    assert list(top.columns) == ["component", "rank", "column", "H", "lift"]
    assert len(top) == fit.rank * 3
    frequency = frame.mean(axis=0).to_numpy()
    for k in range(fit.rank):
        rows = top[top["component"] == f"component_{k}"]
        lift = fit.H[k] / frequency
        order = sorted(range(frame.shape[1]), key=lambda j: (-round(fit.H[k, j], 2), -lift[j], j))
        assert rows["rank"].tolist() == [1, 2, 3]
        assert rows["column"].tolist() == [frame.columns[j] for j in order[:3]]
        np.testing.assert_allclose(rows["lift"], lift[order[:3]])
    assert len(fit.top_columns(100)) == fit.rank * frame.shape[1]  # all when fewer
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        fit.top_columns(0)


def test_top_rows_against_a_sort_of_each_column_of_w(labelled):
    frame, fit = labelled
    top = fit.top_rows(4)
    assert list(top.columns) == ["component", "rank", "row", "W"] and len(top) == fit.rank * 4
    for k in range(fit.rank):
        rows = top[top["component"] == f"component_{k}"]
        order = sorted(range(frame.shape[0]), key=lambda m: (-fit.W[m, k], m))
        assert rows["row"].tolist() == [frame.index[m] for m in order[:4]]
        np.testing.assert_array_equal(rows["W"], fit.W[order[:4], k])
    assert len(fit.top_rows(10**6)) == fit.rank * frame.shape[0]  # all when fewer
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        fit.top_rows(0)


def test_a_component_that_holds_less_than_one_row_is_empty():
    """An empty component (no row made of it, H at the prior's mean) is named; W's columns
    summing to at least one row each are not; a logistic fit's natural parameters never."""
    Y, _, _ = bernmf.simulate(0, 30, 20, 2)
    fit = bernmf.fit(Y, "mm", 3, max_iter=20)
    W = np.column_stack([fit.W[:, 0] + fit.W[:, 2] * 0.99, fit.W[:, 1], fit.W[:, 2] * 0.01])
    assert dataclasses.replace(fit, W=W).empty_components() == ["component_2"]
    assert fit.empty_components() == [f"component_{k}" for k in range(3) if fit.W[:, k].sum() < 1]
    logistic = bernmf.fit(Y, "logsvd", 2)
    assert logistic.empty_components() == [] and logistic.duplicate_components() == []


def split_component(fit, H_copy, share=0.5):
    """``fit`` with its last component split in two: W's column shared ``1 - share`` and
    ``share`` between the original and a new component of H ``H_copy``."""
    W = np.column_stack([fit.W[:, :-1], fit.W[:, -1] * (1 - share), fit.W[:, -1] * share])
    return dataclasses.replace(fit, rank=fit.rank + 1, W=W, H=np.vstack([fit.H, H_copy]))


def test_two_components_of_nearly_the_same_h_are_duplicates():
    """A component split into two of nearly its H, its rows' W shared between them, makes a
    pair of duplicates exactly when a row tells them apart by less than DUPLICATE_NATS both
    ways (the KL summed by scipy); a fit of distinct components has none, nor has a pair
    whose copy holds less than one row (it is empty)."""
    from scipy.stats import entropy

    Y, _, _ = bernmf.simulate(0, 40, 30, 2, bernmf.Prior(0.3, 0.3, 0.3))
    fit = bernmf.fit(Y, "mm", 2, max_iter=50)
    assert fit.duplicate_components() == [] and fit.empty_components() == []
    assert split_component(fit, fit.H[1]).duplicate_components() == [("component_1", "component_2")]
    rng = np.random.default_rng(0)
    flagged = []
    for scale in np.repeat([0.01, 0.03, 0.05, 0.08, 0.15], 4):
        H_copy = np.clip(fit.H[1] + rng.normal(0, scale, 30), 0.001, 0.999)
        p, q = np.clip(fit.H[1], 1e-6, 1 - 1e-6), H_copy  # KL of Bernoulli pairs, by column
        kl = [
            entropy(np.stack([x, 1 - x]), np.stack([y, 1 - y])).sum() for x, y in ((p, q), (q, p))
        ]
        duplicate = max(kl) < bernmf.results.fit.DUPLICATE_NATS
        found = split_component(fit, H_copy).duplicate_components()
        assert found == ([("component_1", "component_2")] if duplicate else []), (scale, kl)
        flagged.append(duplicate)
    assert any(flagged) and not all(flagged)  # both sides of the tolerance were tried
    mass = fit.W[:, 1].sum()
    empty_copy = split_component(fit, fit.H[1], share=0.9 / mass)
    assert empty_copy.empty_components() == ["component_2"]
    assert empty_copy.duplicate_components() == []


def test_ties_of_h_are_broken_by_lift_over_the_column_frequency():
    # columns 0-2 every row has, column 3 only the first half: with H = 1 for all four
    # in component 0, column 3 (lift 2 over its frequency 0.5) comes first
    Y = np.ones((20, 4))
    Y[10:, 3] = 0
    fit = bernmf.fit(Y, "mm", 2, max_iter=5)
    fit = dataclasses.replace(fit, H=np.array([[1.0, 1.0, 0.999, 1.0], [1.0, 1.0, 1.0, 0.0]]))
    top = fit.top_columns(4)
    first = top[top["component"] == "component_0"]
    assert first["column"].tolist() == [3, 0, 1, 2]
    np.testing.assert_allclose(first["lift"], [2.0, 1.0, 1.0, 0.999])


def overlapping(fig, labels) -> bool:
    """Whether any two of the visible, non-empty ``labels`` overlap once drawn."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in labels if t.get_visible() and t.get_text()]
    return any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])


@pytest.mark.parametrize("seconds", [[0.21, 0.35, 0.5], [0.002, 0.04, 3.0, 900.0], [5.0, 5.5]])
def test_pareto_ticks_never_overlap_and_engines_keep_their_colours(seconds):
    engines = ["em", "mm", "logsvd", "vb"][: len(seconds)]
    board = pd.DataFrame(
        {"dataset": "d", "engine": engines, "setting": "tuned", "seconds": seconds,
         "perplexity": np.linspace(0.4, 0.5, len(seconds))}
    )  # fmt: skip
    fig = plot.pareto(board)
    ax = fig.axes[0]
    labels = [t for t in ax.get_xticklabels() if t.get_text()]
    assert len(labels) >= 2 and not overlapping(fig, ax.get_xticklabels())
    assert not overlapping(fig, ax.get_yticklabels())
    colours = {c.get_label(): tuple(c.get_facecolor()[0]) for c in ax.collections}
    for engine in engines:  # the same colour in every figure, whatever the order
        assert colours[engine] == pytest.approx(
            matplotlib.colors.to_rgba(plot.ENGINE_COLORS[engine])
        )
    assert len(set(plot.ENGINE_COLORS.values())) == len(plot.ENGINE_COLORS)
    off = matplotlib.colors.to_rgba(plot.OFF_SCALE_COLOR)
    assert off not in [matplotlib.colors.to_rgba(c) for c in plot.ENGINE_COLORS.values()]


def test_trace_is_also_drawn_relative_to_its_final_value_on_a_log_axis(labelled):
    _, fit = labelled
    fig = plot.traces(fit)
    _, relative = fig.axes
    assert relative.get_yscale() == "log"
    gap = np.abs(fit.trace[:-1] - fit.trace[-1]) / abs(fit.trace[-1])
    np.testing.assert_allclose(relative.get_lines()[0].get_ydata(), gap[gap > 0])
    assert not overlapping(fig, relative.get_yticklabels())


def test_outlier_limit_clips_only_values_far_above_the_rest():
    close = [0.40, 0.41, 0.43, 0.45]
    top = plot.outlier_limit([*close, 1.98, 2.33])
    assert 0.45 < top < 1.0
    # a report's leaderboard on animals: logsvd's 0.64 stays, the 1.67 and above go
    board = [0.432, 0.439, 0.453, 0.453, 0.644, 1.67, 2.33, 3.49]
    assert 0.65 < plot.outlier_limit(board) < 1.67
    assert plot.outlier_limit([0.40, 1.98, 2.33]) < 1.0  # one close value is enough
    assert plot.outlier_limit(close) is None  # evenly spread: nothing to clip
    assert plot.outlier_limit([0.4, np.nan]) is None


def test_boxplot_clips_the_axis_and_annotates_the_far_medians():
    table = pd.DataFrame(
        {"engine": ["mm"] * 3 + ["vb"] * 3 + ["em"] * 3,
         "perplexity": [0.40, 0.41, 0.42, 0.43, 0.44, 0.45, 1.97, 1.98, 1.99]}
    )  # fmt: skip
    ax = plot.perplexity_boxplot(table).axes[0]
    assert ax.get_ylim()[1] < 1.0
    assert [t.get_text() for t in ax.texts] == ["1.98"]


def test_boxplot_names_inf_scores_at_the_top_and_warns_nothing():
    """A group scored inf (em's H at 0 or 1) was an empty column, with a RuntimeWarning."""
    table = pd.DataFrame(
        {"engine": ["mm"] * 2 + ["em"] * 2 + ["vb"] * 2,
         "perplexity": [0.40, 0.41, np.inf, np.inf, 0.42, np.inf]}
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ax = plot.perplexity_boxplot(table).axes[0]
    assert [t.get_text() for t in ax.texts] == ["inf", "1 of 2 inf"]


def test_pareto_front_of_a_hand_made_table():
    seconds = [1.0, 2.0, 0.5, 3.0, 2.0, np.nan]
    perplexity = [0.50, 0.45, 0.70, 0.46, 0.45, 0.1]
    # 3.0 s / 0.46 is beaten by 2.0 s / 0.45; the tie at 2.0 s / 0.45 keeps both
    assert plot.pareto_front(seconds, perplexity).tolist() == [True, True, True, False, True, False]
    with pytest.raises(ValueError, match="1-d"):
        plot.pareto_front([1.0, 2.0], [0.5])


def test_pareto_plot_draws_the_front_and_annotates_off_scale_engines(tmp_path):
    board = pd.DataFrame(
        {"dataset": "animals", "engine": ["mm", "vb", "em", "logsvd"], "setting": "tuned",
         "seconds": [0.4, 1.0, 0.3, 0.05], "perplexity": [0.40, 0.41, 1.98, 2.33]}
    )  # fmt: skip
    fig = plot.pareto(board, path=tmp_path / "pareto.png")
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_ylim()[1] < 1.0
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "3  em tuned: 1.98 (off scale)" in texts and "4  logsvd tuned: 2.33 (off scale)" in texts
    assert (tmp_path / "pareto.png").stat().st_size > 0


def test_labels_with_dollar_signs_are_drawn_as_written(labelled, tmp_path):
    """A name with two "$" was parsed as mathtext: most raised (ParseSyntaxException) and
    the command failed after its computation; the others were drawn as formulas."""
    frame, fit = labelled
    names = ["$a_$", "cost $5", "$x$", r"\$", "b", "c", "d", "e"]
    hostile = bernmf.fit(frame.set_axis(names, axis=1), "mm", 2, max_iter=5)
    hostile = dataclasses.replace(hostile, engine="$mm_$")

    def shown(texts):
        return {t.get_text().replace(r"\$", "$") for t in texts}

    fig = plot.factors(hostile, path=tmp_path / "factors.png")
    assert shown(fig.axes[2].get_xticklabels()) == set(names)
    assert "$mm_$" in fig.axes[0].get_title().replace(r"\$", "$")
    plot.traces({"$a_$": hostile, "b": fit}, path=tmp_path / "trace.png")
    runs = pd.DataFrame({"engine": ["$e_$", "mm"], "perplexity": [0.5, 0.6]})
    boxes = plot.perplexity_boxplot(runs, path=tmp_path / "b.png")
    assert shown(boxes.axes[0].get_xticklabels()) == {"$e_$", "mm"}
    board = pd.DataFrame(
        {"dataset": "$d_$", "engine": ["$e_$", "mm", "em"], "setting": "$s_$",
         "seconds": [0.4, 1.0, 0.3], "perplexity": [0.40, 0.41, 1.98]}
    )  # fmt: skip
    ax = plot.pareto(board, path=tmp_path / "pareto.png").axes[0]
    legend = shown(ax.get_legend().get_texts())  # the points are numbered, named here
    assert any("$e_$ $s_$" in t for t in legend) and any("em $s_$" in t for t in legend)
    assert ax.get_title().replace(r"\$", "$") == "$d_$"


def test_save_png_keeps_every_colour_of_a_legend(tmp_path):
    """Ten small markers of ten colours, in a few pixels each: every colour survives the
    quantization (median cut merged a rare red into orange)."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgb
    from PIL import Image

    from bernmf.plot import save_png

    figure, axis = plt.subplots(figsize=(3, 2))
    axis.plot(np.arange(50), np.sin(np.arange(50)), color="C0", linewidth=3)
    for i in range(10):
        axis.plot([i], [2], marker="s", markersize=3, color=f"C{i}", linestyle="")
    save_png(figure, tmp_path / "f.png", dpi=80)
    pixels = np.asarray(Image.open(tmp_path / "f.png").convert("RGB")).reshape(-1, 3).astype(int)
    for i in range(10):
        wanted = np.array(to_rgb(f"C{i}")) * 255
        assert (np.abs(pixels - wanted).sum(axis=1) < 30).any(), f"C{i}"
