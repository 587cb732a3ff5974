import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from resgrad.plots import (
    EVALS_JOINED,
    PlotSpec,
    Series,
    draw_losses,
    draw_spec,
    make_figure,
    new_figure,
    plot_format,
    plotted_series,
    render_plot,
    save_plot,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def spec(**kw):
    base = dict(
        title="t",
        xlabel="layer index",
        ylabel="||dL/dx||",
        series=(
            Series("a", [0, 1, 2], [1.0, 1e-3, 1e-6]),
            Series("b", [0, 1, 2], [2.0, 3.0, 4.0], lo=[1.5, 2.5, 3.5], hi=[2.5, 3.5, 4.5]),
        ),
    )
    base.update(kw)
    return PlotSpec(**base)


def test_png_is_a_valid_non_empty_png(tmp_path):
    path = tmp_path / "f.png"
    save_plot(spec(), path)
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 1000
    assert data[12:16] == b"IHDR"


def test_svg_parses_as_xml_and_is_svg(tmp_path):
    path = tmp_path / "f.SVG"  # extension case does not matter
    save_plot(spec(), path)
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg")
    text = path.read_text()
    assert "layer index" in text or "layer" in text


def test_the_same_spec_gives_the_same_svg_bytes():
    assert render_plot(spec(), "svg") == render_plot(spec(), "svg")


def test_plotted_series_are_exactly_the_numbers_given():
    s = spec()
    fig = make_figure(s)
    drawn = plotted_series(fig)
    assert list(drawn) == ["a", "b"]
    for series in s.series:
        x, y = drawn[series.label]
        np.testing.assert_array_equal(x, series.x)
        np.testing.assert_array_equal(y, series.y)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and ax.get_xscale() == "linear"
    assert ax.get_xlabel() == "layer index" and ax.get_ylabel() == "||dL/dx||"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]


def test_log_log_axes():
    ax = make_figure(spec(xscale="log")).axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"


def _bands(ax):
    """Each band's outline (fill_between's polygon), in drawing order."""
    return [np.asarray(p.vertices) for c in ax.collections for p in c.get_paths()]


def test_draw_spec_on_a_given_axes_draws_what_make_figure_draws():
    s = spec(notes=("mean over 2 seed(s)",))
    fig, (left, right) = new_figure(2)
    draw_spec(right, s, title_size=7)
    assert left.get_lines() == [] and left.get_title() == ""  # only the axes it was given
    ref = make_figure(s).axes[0]
    got, want = right.get_lines(), ref.get_lines()
    assert [ln.get_label() for ln in got] == [ln.get_label() for ln in want] == ["a", "b"]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.get_xdata(), w.get_xdata())
        np.testing.assert_array_equal(g.get_ydata(), w.get_ydata())
    assert len(_bands(right)) == len(_bands(ref)) == 1  # b's band, a has none
    for g, w in zip(_bands(right), _bands(ref)):
        np.testing.assert_array_equal(g, w)
    assert right.get_title() == ref.get_title() == "t\nmean over 2 seed(s)"
    assert right.title.get_fontsize() == 7 and ref.title.get_fontsize() == 10
    for name in ("get_xscale", "get_yscale", "get_xlabel", "get_ylabel"):
        assert getattr(right, name)() == getattr(ref, name)(), name
    assert [t.get_text() for t in right.get_legend().get_texts()] == ["a", "b"]


def test_a_zero_on_a_log_axis_is_masked_not_clipped():
    """A zero gradient leaves a gap: masked, it maps to no point, where clipped it would
    be drawn at a tiny made-up value at the bottom of the axes."""
    for s in (spec(), spec(xscale="log")):
        ax = make_figure(s).axes[0]
        for axis in (ax.yaxis, ax.xaxis) if s.xscale == "log" else (ax.yaxis,):
            zero, ten = axis.get_transform().transform(np.array([0.0, 10.0]))
            assert not np.isfinite(zero) and ten == 1.0, (axis, zero)


def test_pyplot_and_the_global_backend_are_never_touched():
    # in a fresh interpreter: drawing and saving must not import pyplot or pick a backend
    code = (
        "import sys, io; from resgrad.plots import *; "
        "s = PlotSpec('t', 'x', 'y', (Series('a', [0, 1], [1.0, 2.0]),)); "
        "render_plot(s, 'png'); render_plot(s, 'svg'); "
        "import matplotlib; print('matplotlib.pyplot' in sys.modules, "
        "matplotlib.rcParams._get_backend_or_none())"
    )
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False", "None"]


@pytest.mark.parametrize("name", ["f.pdf", "f", "f.png.txt", "f.jpeg"])
def test_unknown_extension_is_a_value_error_and_writes_nothing(tmp_path, name):
    with pytest.raises(ValueError, match="expected a file name ending in .png or .svg"):
        save_plot(spec(), tmp_path / name)
    assert os.listdir(tmp_path) == []


def test_unwritable_directory_is_an_os_error_and_leaves_nothing(tmp_path):
    with pytest.raises(OSError):
        save_plot(spec(), tmp_path / "missing" / "f.png")
    assert os.listdir(tmp_path) == []


def test_plot_format():
    assert plot_format("a/b.PNG") == "png" and plot_format("x.svg") == "svg"


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        ({"series": ()}, "at least one series"),
        ({"yscale": "symlog"}, "yscale must be one of"),
        ({"xlabel": ""}, "xlabel must be a non-empty string"),
        ({"series": (Series("a", [0], [1.0]), Series("a", [0], [2.0]))}, "distinct"),
    ],
)
def test_bad_spec(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        spec(**kwargs)


@pytest.mark.parametrize(
    "args, kwargs, msg",
    [
        (("a", [0, 1], [1.0]), {}, "equal length"),
        (("a", [], []), {}, "non-empty"),
        (("a", [0], [float("nan")]), {}, "NaN"),
        (("a", [0], [1.0]), {"lo": [0.5]}, "both lo and hi"),
        (("", [0], [1.0]), {}, "label"),
    ],
)
def test_bad_series(args, kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        Series(*args, **kwargs)


def test_series_that_coincide_stay_visible_and_are_named():
    # six schemes, two pairs on top of each other (as post-ln/deepnorm, residual/rezero)
    x = [0, 1, 2, 3]
    ys = {"p": [1, 1, 1, 1], "q": [2, 2, 2, 2], "r": [1e-3, 1e-2, 1e-1, 1],
          "q2": [2.02, 2, 1.99, 2], "s": [5, 4, 3, 2], "p2": [1, 1, 1, 1]}  # fmt: skip
    fig = make_figure(spec(series=tuple(Series(k, x, v) for k, v in ys.items()), yscale="log"))
    lines = fig.axes[0].get_lines()
    styles = [(ln.get_marker(), ln.get_linestyle()) for ln in lines]
    assert len(set(styles)) == len(lines)  # every series has its own marker and dash
    assert all(ln.get_markerfacecolor() == "none" for ln in lines)  # hollow: see through
    title = fig.axes[0].get_title()
    assert "q2 lies on q" in title and "p2 lies on p" in title
    assert "r lies on" not in title and "s lies on" not in title


def _records(n_steps, evals=(0,)):
    steps = [{"kind": "iter", "iter": i, "loss": 3.0 - 0.1 * i} for i in range(n_steps)]
    return steps + [{"kind": "eval", "iter": i, "train_loss": 2.9, "val_loss": 3.0} for i in evals]


def test_one_step_is_drawn_as_a_point_not_an_invisible_line():
    """A line through one point draws nothing: a 1-step run's loss needs a marker."""
    from resgrad.plots import draw_losses, new_figure

    fig, (ax,) = new_figure()
    draw_losses(ax, _records(1, evals=()))
    raw, smooth = ax.get_lines()
    assert raw.get_xdata().tolist() == [0] and smooth.get_ydata().tolist() == [3.0]
    assert smooth.get_marker() not in ("None", "", None) and smooth.get_markersize() > 0
    fig, (ax,) = new_figure()
    draw_losses(ax, _records(5, evals=()))  # more steps: the lines as they always were
    assert all(ln.get_marker() == "None" for ln in ax.get_lines())


def test_the_loss_curves_are_the_records_trailing_mean_and_val_losses():
    from resgrad.plots import draw_losses, new_figure

    rng = np.random.default_rng(0)
    losses = rng.uniform(1, 3, 40)
    records = [{"kind": "iter", "iter": i, "loss": float(v)} for i, v in enumerate(losses)]
    records += [{"kind": "eval", "iter": i, "train_loss": 9.0, "val_loss": 2.0 + i / 100}
                for i in (0, 20, 40)]  # fmt: skip
    fig, (ax,) = new_figure()
    draw_losses(ax, records)
    raw, smooth, val = ax.get_lines()
    assert raw.get_ydata().tolist() == losses.tolist()
    want = [np.mean(losses[max(0, i - 24) : i + 1]) for i in range(40)]  # the last 25 steps
    np.testing.assert_allclose(smooth.get_ydata(), want, rtol=1e-12)
    assert list(val.get_xdata()) == [0, 20, 40] and list(val.get_ydata()) == [2.0, 2.2, 2.4]


def test_check_plot_path_checks_the_extension_then_the_destination(tmp_path):
    from resgrad.plots import check_plot_path

    (tmp_path / "file.txt").write_text("x")
    assert check_plot_path(tmp_path / "a.svg") == "svg"
    with pytest.raises(ValueError, match="expected a file name ending in .png or .svg"):
        check_plot_path(tmp_path / "nodir" / "a.pdf")  # the extension first
    with pytest.raises(FileNotFoundError, match=r"cannot write '.*nodir/a\.png': directory"):
        check_plot_path(tmp_path / "nodir" / "a.png")
    with pytest.raises(NotADirectoryError, match=r"file\.txt' is a file, not a directory"):
        check_plot_path(tmp_path / "file.txt" / "a.png")
    with pytest.raises(NotADirectoryError, match=r"file\.txt' is a file, not a directory"):
        save_plot(spec(), tmp_path / "file.txt" / "a.png")
    assert sorted(os.listdir(tmp_path)) == ["file.txt"]


@pytest.mark.parametrize("n_evals, joined", [(1, False), (2, False), (3, True), (5, True)])
def test_a_line_joins_the_evaluations_only_where_there_are_enough(n_evals, joined):
    """Two evaluations of a 200-step run joined by a straight line read as a curve that is not
    there: below EVALS_JOINED they are markers alone, the values exactly those recorded."""
    records = [{"kind": "eval", "iter": 50 * i, "val_loss": 4.0 - 0.5 * i} for i in range(n_evals)]
    fig, (ax,) = new_figure()
    draw_losses(ax, records)
    (line,) = ax.get_lines()
    assert (line.get_linestyle() != "None") is joined and (n_evals >= EVALS_JOINED) is joined
    assert line.get_marker() == "o"
    assert list(line.get_xdata()) == [r["iter"] for r in records]
    assert list(line.get_ydata()) == [r["val_loss"] for r in records]
