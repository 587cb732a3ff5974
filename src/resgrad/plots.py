"""Plots of gradient flow: matplotlib on the Agg backend, PNG or SVG by extension.

Legend: L = depth (number of layers), K = number of seeds.

A plot is described by a :class:`PlotSpec` (title, labelled axes, their scales and
the series to draw), rendered by :func:`make_figure` and written atomically by
:func:`save_plot`. The spec holds the very numbers that are drawn, so a caller
(or a test) can compare them with the numbers it measured; :func:`plotted_series`
reads them back out of a rendered figure's artists. A training run's figures are
drawn from its metrics records: :func:`render_loss_plot` (``loss.png``) and
:func:`render_depth_plot` (``depth_train.png``).

The figure is a ``matplotlib.figure.Figure`` drawn on a ``FigureCanvasAgg``:
pyplot is never imported, so no global backend or figure registry is touched
(``MPLBACKEND`` and ``matplotlib.use`` are left alone) and no display is needed.

This module imports nothing from resgrad but :mod:`resgrad.formats.atomic`.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from resgrad.formats.atomic import atomic_write_bytes, check_destination

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "FORMATS",
    "PlotSpec",
    "Series",
    "check_plot_path",
    "draw_losses",
    "draw_spec",
    "figure_bytes",
    "make_figure",
    "new_figure",
    "plot_format",
    "plotted_series",
    "render_depth_plot",
    "render_loss_plot",
    "render_plot",
    "save_figure",
    "save_plot",
]

FORMATS = {".png": "png", ".svg": "svg"}  # file extension -> matplotlib format
SCALES = ("linear", "log")


def plot_format(path: str | os.PathLike) -> str:
    """The image format for ``path`` from its extension: ``"png"`` or ``"svg"``.

    Raises
    ------
    ValueError
        If the extension is neither ``.png`` nor ``.svg`` (case-insensitive).
    """
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext not in FORMATS:
        raise ValueError(
            f"cannot tell the plot format of {os.fspath(path)!r}: "
            f"expected a file name ending in {' or '.join(FORMATS)}"
        )
    return FORMATS[ext]


def check_plot_path(path: str | os.PathLike) -> str:
    """Refuse, before any work, a plot that could not be saved; return its format.

    Every command that draws (``--plot``, ``--out``) calls this first: the extension
    (:func:`plot_format`), then the destination
    (:func:`resgrad.formats.atomic.check_destination`: a directory, a path under a file,
    a directory that does not exist or cannot be written), each refused in one line
    naming ``path``.

    Raises
    ------
    ValueError
        A bad extension.
    OSError
        A destination that cannot be written.
    """
    fmt = plot_format(path)
    check_destination(path)
    return fmt


def _floats(name: str, values: Sequence[float]) -> tuple[float, ...]:
    out = tuple(float(v) for v in values)
    if any(math.isnan(v) for v in out):
        raise ValueError(f"{name} holds NaN: {out!r}")
    return out


@dataclass(frozen=True)
class Series:
    """One line of a plot: ``y`` against ``x``, with an optional shaded band.

    ``lo`` and ``hi`` (both or neither) bound a band drawn around the line, e.g.
    the min and max over K seeds.
    """

    label: str  # legend entry
    x: tuple[float, ...]  # (n,)
    y: tuple[float, ...]  # (n,)
    lo: tuple[float, ...] | None = None  # (n,) lower edge of the band
    hi: tuple[float, ...] | None = None  # (n,) upper edge of the band

    def __post_init__(self):
        if not isinstance(self.label, str) or not self.label:
            raise ValueError(f"label must be a non-empty string, got {self.label!r}")
        object.__setattr__(self, "x", _floats("x", self.x))
        object.__setattr__(self, "y", _floats("y", self.y))
        if len(self.x) != len(self.y) or not self.x:
            raise ValueError(
                f"series {self.label!r}: x and y must be non-empty and of equal length, "
                f"got {len(self.x)} and {len(self.y)}"
            )
        if (self.lo is None) != (self.hi is None):
            raise ValueError(f"series {self.label!r}: give both lo and hi, or neither")
        for name in ("lo", "hi"):
            v = getattr(self, name)
            if v is not None:
                v = _floats(name, v)
                if len(v) != len(self.x):
                    raise ValueError(
                        f"series {self.label!r}: {name} has {len(v)} values, expected {len(self.x)}"
                    )
                object.__setattr__(self, name, v)


@dataclass(frozen=True)
class PlotSpec:
    """What to draw: labelled axes, their scales, and the series with a legend."""

    title: str
    xlabel: str
    ylabel: str
    series: tuple[Series, ...]
    xscale: str = "linear"  # one of SCALES
    yscale: str = "log"  # one of SCALES; gradient norms span orders of magnitude
    notes: tuple[str, ...] = field(default=())  # small text lines under the title

    def __post_init__(self):
        object.__setattr__(self, "series", tuple(self.series))
        if not self.series:
            raise ValueError("a plot needs at least one series, got none")
        for s in self.series:
            if not isinstance(s, Series):
                raise TypeError(f"series must be Series objects, got {type(s).__name__}")
        labels = [s.label for s in self.series]
        if len(set(labels)) != len(labels):
            raise ValueError(f"series labels must be distinct, got {labels!r}")
        for name in ("xlabel", "ylabel"):
            if not getattr(self, name):
                raise ValueError(f"{name} must be a non-empty string, got {getattr(self, name)!r}")
        for name in ("xscale", "yscale"):
            if getattr(self, name) not in SCALES:
                raise ValueError(f"{name} must be one of {SCALES}, got {getattr(self, name)!r}")
        object.__setattr__(self, "notes", tuple(self.notes))


def new_figure(
    ncols: int = 1, width: float = 7.0, nrows: int = 1, height: float = 4.5
) -> tuple[Figure, list]:
    """A bare figure of ``nrows`` x ``ncols`` axes (listed row by row) on an Agg canvas
    (no pyplot, no global backend): every resgrad plot starts here."""
    # imported here, not at the top: matplotlib takes ~0.3 s to import and most
    # commands never draw
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)  # attaches itself to fig
    n = nrows * ncols
    return fig, [fig.add_subplot(nrows, ncols, i + 1) for i in range(n)]


def figure_bytes(fig: Figure, fmt: str) -> bytes:
    """The image bytes of ``fig`` as ``fmt`` (``"png"`` or ``"svg"``), the same every time."""
    if fmt not in FORMATS.values():
        raise ValueError(f"format must be one of {tuple(FORMATS.values())}, got {fmt!r}")
    from matplotlib import rc_context

    buf = io.BytesIO()
    # the same figure gives the same bytes: no creation date, and SVG element ids hashed
    # from a fixed salt instead of random ones (rc_context restores the setting after)
    metadata = {"Date": None} if fmt == "svg" else {}
    with rc_context({"svg.hashsalt": "resgrad"}):
        fig.savefig(buf, format=fmt, metadata=metadata)
    return buf.getvalue()


MARKERS = ("o", "s", "^", "v", "D", "x", "+", "*")  # series i gets MARKERS[i % 8]
LINESTYLES = ("-", "--", "-.", ":")  # and LINESTYLES[i % 4]
COINCIDE_RTOL = 0.03  # closer than this everywhere, two curves look like one line


def coincident_notes(series: Sequence[Series]) -> list[str]:
    """One note per series that lies on an earlier one (same x, y within 3% everywhere)."""
    notes = []
    for j, b in enumerate(series):
        for a in series[:j]:
            if a.x == b.x and np.allclose(b.y, a.y, rtol=COINCIDE_RTOL, atol=0.0):
                notes.append(f"{b.label} lies on {a.label} (within 3% at every point)")
                break
    return notes


def draw_spec(ax: Axes, spec: PlotSpec, title_size: float = 10) -> None:
    """Draw ``spec`` on one axes: each series is one line (``ax.get_lines()`` in the
    order of ``spec.series``); non-positive values on a log axis are masked, not
    clipped, so a zero gradient leaves a gap instead of a fake point."""
    from matplotlib.ticker import MaxNLocator, NullFormatter

    for i, s in enumerate(spec.series):
        # colour, marker and dash all differ, markers hollow: a series drawn over another
        # (schemes whose curves coincide) still shows its own marks and dashes
        (line,) = ax.plot(
            s.x, s.y, label=s.label, linewidth=1.4, linestyle=LINESTYLES[i % len(LINESTYLES)],
            marker=MARKERS[i % len(MARKERS)], markersize=5.5 - 2.5 * i / max(len(spec.series), 1),
            markerfacecolor="none", markeredgewidth=1.0,
        )  # fmt: skip
        if s.lo is not None:
            ax.fill_between(s.x, s.lo, s.hi, color=line.get_color(), alpha=0.18, linewidth=0)
    integer_x = all(v == int(v) for s in spec.series for v in s.x)  # layer indices, depths
    if spec.xscale == "log":
        ax.set_xscale("log", nonpositive="mask")
        xs = sorted({v for s in spec.series for v in s.x if v > 0})
        if integer_x and len(xs) <= 12:  # label each depth plainly: 2, 4, 8, not 2x10^0
            ax.set_xticks(xs, [f"{v:g}" for v in xs])
            ax.xaxis.set_minor_formatter(NullFormatter())
    elif integer_x:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if spec.yscale == "log":
        ax.set_yscale("log", nonpositive="mask")
    ax.set_xlabel(spec.xlabel)
    ax.set_ylabel(spec.ylabel)
    notes = (*spec.notes, *coincident_notes(spec.series))
    title = spec.title if not notes else spec.title + "\n" + "\n".join(notes)
    ax.set_title(title, fontsize=title_size)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="best")


def make_figure(spec: PlotSpec) -> Figure:
    """Render ``spec`` on a new Agg figure (no pyplot, no global state), one axes drawn
    by :func:`draw_spec`."""
    fig, (ax,) = new_figure()
    draw_spec(ax, spec)
    fig.tight_layout()
    return fig


def plotted_series(fig: Figure) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Read back what ``fig`` draws: legend label -> (x, y) of each line."""
    ax = fig.axes[0]
    return {
        line.get_label(): (np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float))
        for line in ax.get_lines()
    }


def render_plot(spec: PlotSpec, fmt: str) -> bytes:
    """The image bytes of ``spec`` as ``fmt`` (``"png"`` or ``"svg"``)."""
    if fmt not in FORMATS.values():
        raise ValueError(f"format must be one of {tuple(FORMATS.values())}, got {fmt!r}")
    return figure_bytes(make_figure(spec), fmt)


def save_plot(spec: PlotSpec, path: str | os.PathLike) -> PlotSpec:
    """Write ``spec`` to ``path`` atomically, PNG or SVG by extension; return ``spec``.

    Raises
    ------
    ValueError
        If the extension is not ``.png`` or ``.svg`` (checked before anything is drawn).
    OSError
        If ``path`` cannot be written; no file is left behind then.
    """
    plot_format(path)  # a bad extension is refused before anything is drawn
    save_figure(make_figure(spec), path)
    return spec


def save_figure(fig: Figure, path: str | os.PathLike) -> None:
    """Write ``fig`` to ``path`` atomically, PNG or SVG by its extension."""
    atomic_write_bytes(path, figure_bytes(fig, plot_format(path)))


# --------------------------------------------------------------------------- training runs


def _smooth(y: np.ndarray, n: int) -> np.ndarray:
    """Trailing mean over up to n steps, (N,) -> (N,)."""
    c = np.cumsum(np.insert(y, 0, 0.0))  # (N + 1,)
    i = np.arange(1, len(y) + 1)  # (N,)
    lo = np.maximum(0, i - n)  # (N,)
    return (c[i] - c[lo]) / (i - lo)  # (N,)


EVALS_JOINED = 3  # validation losses are joined by a line from this many evaluations on


def draw_losses(ax, records: list[dict], label: str = "", color=None) -> None:
    """Draw on ``ax`` a run's train loss per step (raw, faint; smoothed) and val loss per
    eval: markers, joined by a dashed line from :data:`EVALS_JOINED` evaluations on."""
    steps = [r for r in records if r["kind"] == "iter"]
    evals = [r for r in records if r["kind"] == "eval"]
    pre = f"{label} " if label else ""
    if steps:
        x = np.array([r["iter"] for r in steps])  # (N,)
        y = np.array([r["loss"] for r in steps])  # (N,)
        (line,) = ax.plot(x, y, lw=0.6, alpha=0.3, color=color)
        color = line.get_color()
        point = {"marker": "o", "ms": 4} if len(x) == 1 else {}  # one step: a line draws nothing
        ax.plot(x, _smooth(y, 25), lw=1.2, color=color, label=f"{pre}train (per step, smoothed)",
                **point)  # fmt: skip
    if evals:
        ex = [r["iter"] for r in evals]
        # two evaluations joined by a straight line would be drawn as if it were a curve
        style = "o--" if len(evals) >= EVALS_JOINED else "o"
        ax.plot(ex, [r["val_loss"] for r in evals], style, ms=3.5, color=color,
                label=f"{pre}val (eval)")  # fmt: skip


def render_loss_plot(records: list[dict], title: str, entropy: float | None = None) -> bytes:
    """PNG of the training loss per step (raw and smoothed) and the validation loss per eval."""
    fig, (ax,) = new_figure()
    draw_losses(ax, records)
    if entropy is not None:
        ax.axhline(entropy, color="gray", ls=":", lw=1, label=f"unigram entropy {entropy:.3f}")
    ax.set_xlabel("iteration")
    ax.set_ylabel("cross-entropy loss (nats per character)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return figure_bytes(fig, "png")


def render_depth_plot(
    runs: dict[str, list[dict]], title: str, entropy: float | None = None
) -> bytes:
    """Left: every variant's losses. Right: per-layer gradient norms at the first and last step."""
    fig, (ax1, ax2) = new_figure(ncols=2, width=12.0)
    colors = {}
    for v, records in runs.items():
        draw_losses(ax1, records, label=v)
        colors[v] = ax1.get_lines()[-1].get_color()
    if entropy is not None:
        ax1.axhline(entropy, color="gray", ls=":", lw=1, label=f"unigram entropy {entropy:.3f}")
    ax1.set_xlabel("iteration")
    ax1.set_ylabel("cross-entropy loss (nats per character)")
    ax1.set_title("loss", fontsize=10)
    ax1.grid(True, alpha=0.3)
    ax1.legend(fontsize=8)
    for v, records in runs.items():
        steps = [r for r in records if r["kind"] == "iter"]
        if not steps:
            continue
        for r, style in ((steps[0], "o--"), (steps[-1], "s-")):
            g = r["layer_grad_norms"]
            ax2.plot(range(len(g)), g, style, ms=4, color=colors[v],
                     label=f"{v}, step {r['iter']}")  # fmt: skip
    ax2.set_yscale("log", nonpositive="mask")
    ax2.set_xlabel("block (0 = next to the input)")
    ax2.set_ylabel("gradient norm of the block's parameters")
    ax2.set_title("per-layer gradient norms, first and last step", fontsize=10)
    ax2.grid(True, alpha=0.3)
    if ax2.get_lines():
        ax2.legend(fontsize=8)
    else:  # --max-iters 0: evaluations only, no step to draw
        ax2.text(0.5, 0.5, "no training step", ha="center", va="center", transform=ax2.transAxes)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return figure_bytes(fig, "png")
