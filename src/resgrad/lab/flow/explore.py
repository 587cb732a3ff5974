"""The gradient-flow explorer: one plain function from a handful of knobs to a figure.

Legend: B = batch, T = time, C = channels (width), L = depth, K = number of seeds.

``notebooks/02_gradient_flow_explorer.ipynb`` hangs its sliders and dropdowns on
:func:`explore_figure`; the function itself knows nothing of widgets, so the same
call draws the same plot in a script, in a test, or in a notebook viewer that
does not run widgets. It adds no measurement of its own: the numbers are
:func:`resgrad.lab.flow.core.profile`'s, aggregated by :func:`resgrad.lab.flow.core.aggregate`
and drawn by :func:`resgrad.lab.flow.report.flow_plot_spec` and
:func:`resgrad.plots.make_figure`.

Two knobs set the size of the weights, one per kind of stack, so that neither
means two things:

- ``scale``, for the lesson's tanh stack (``lesson-plain``, ``lesson-residual``):
  the lesson's own ``W = randn(C, C) * scale / sqrt(C)`` (0.5 in its table, 0.9
  in Exercise 1). The GPT schemes ignore it.
- ``gain``, for the GPT schemes (``pre-ln``, ``post-ln``, ...): every 2-D weight
  matrix of every block (``attn.w_qkv``, ``attn.w_proj``, ``mlp.w_fc``,
  ``mlp.w_proj``) is multiplied by ``gain`` after ``init`` has drawn it;
  biases, LayerNorm gains and ReZero's alpha are left as drawn, and so are the
  embeddings. ``gain=1`` is the init untouched. The lesson's stack ignores it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from resgrad.lab.flow.core import (
    LESSON_VARIANTS,
    QUANTITIES,
    FlowConfig,
    FlowRecord,
    aggregate,
    profile,
)
from resgrad.lab.flow.report import flow_plot_spec
from resgrad.nn.model import GPT
from resgrad.plots import PlotSpec, draw_spec, make_figure, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "explore_figure",
    "explore_grid",
    "explore_records",
    "explore_spec",
    "gained_params",
]


def _gain(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"gain must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"gain must be a finite number >= 0, got {value!r}")
    return float(value)


def _schemes(schemes: str | Sequence[str]) -> tuple[str, ...]:
    out = (schemes,) if isinstance(schemes, str) else tuple(schemes)
    if not out:
        raise ValueError("schemes must name at least one scheme, got none")
    if len(set(out)) != len(out):
        raise ValueError(f"schemes must be distinct, got {out!r}")
    return out


def _heads(width: int) -> int:
    """The most heads of (4, 2, 1) that divide ``width`` (so any width works)."""
    if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or width < 1:
        return 1  # FlowConfig names the bad width
    return next(h for h in (4, 2, 1) if width % h == 0)


def gained_params(cfg: FlowConfig, seed: int, gain: float) -> dict[str, np.ndarray]:
    """The GPT's parameters as ``init`` draws them at ``seed``, every block's weight
    matrices (the 2-D ``blocks.*`` entries) multiplied by ``gain``.

    Returns a flat dict under ``GPT.params``' names, float64, for
    :func:`resgrad.lab.flow.core.profile`'s ``params``.
    """
    gain = _gain(gain)
    params = GPT(cfg.gpt_config(), seed=seed, dtype=np.float64).params
    return {
        k: v * gain if k.startswith("blocks.") and v.ndim == 2 else v for k, v in params.items()
    }


def explore_records(
    schemes: str | Sequence[str] = ("none", "pre-ln"),
    depth: int = 12,
    width: int = 32,
    scale: float = 0.5,
    gain: float = 1.0,
    init: str = "gpt2",
    *,
    seeds: Sequence[int] = (0, 1, 2),
    seq: int = 8,
    batch: int = 4,
    heads: int | None = None,
    loss: str = "lm",
) -> list[FlowRecord]:
    """Measure each scheme's per-layer profile; see :func:`explore_figure` for the arguments.

    Returns
    -------
    list of FlowRecord
        :func:`resgrad.lab.flow.core.measure`'s records, scheme after scheme. Where
        ``gain`` is not 1 the GPT schemes' ``init`` field reads e.g.
        ``"gpt2 x0.5"``, so a record never claims weights it was not measured on.
    """
    gain = _gain(gain)
    heads = _heads(width) if heads is None else heads
    records: list[FlowRecord] = []
    for scheme in _schemes(schemes):
        cfg = FlowConfig(
            variant=scheme, depth=depth, width=width, heads=heads, seq=seq, batch=batch,
            init=init, loss=loss, seeds=seeds, scale=scale,
        )  # fmt: skip
        # a large gain can overflow float64: that is a result (inf or NaN), not a warning
        with np.errstate(all="ignore"):
            if cfg.is_lesson or gain == 1.0:
                records += aggregate(cfg, [profile(cfg, s) for s in cfg.seeds])
                continue
            # each seed draws its own weights, then the gain scales them
            profiles = [profile(cfg, s, params=gained_params(cfg, s, gain)) for s in cfg.seeds]
            records += [
                dataclasses.replace(r, init=f"{init} x{gain:g}") for r in aggregate(cfg, profiles)
            ]
    return records


def _drawable(records: list[FlowRecord], quantity: str) -> tuple[list[FlowRecord], list[str]]:
    """The records with each non-finite value set to 0 (a gap on the log axis), and a
    note per scheme that overflowed."""
    out, notes = [], []
    for r in records:
        vals = (r.mean, r.min, r.max)
        if r.quantity == quantity and not all(math.isfinite(v) for v in vals):
            finite = [v if math.isfinite(v) else 0.0 for v in vals]
            r = dataclasses.replace(r, **dict(zip(("mean", "min", "max"), finite)))
            notes.append(r.variant)
        out.append(r)
    counts = {v: notes.count(v) for v in dict.fromkeys(notes)}
    return out, [
        f"{v}: overflowed float64 (inf/NaN) at {n} layer(s), left blank" for v, n in counts.items()
    ]


def explore_spec(
    schemes: str | Sequence[str] = ("none", "pre-ln"),
    depth: int = 12,
    width: int = 32,
    scale: float = 0.5,
    gain: float = 1.0,
    init: str = "gpt2",
    quantity: str = "stream_grad",
    *,
    seeds: Sequence[int] = (0, 1, 2),
    seq: int = 8,
    batch: int = 4,
    heads: int | None = None,
    loss: str = "lm",
) -> PlotSpec:
    """The per-layer profile of one or more stacks at initialization, as a plot's spec.

    Parameters
    ----------
    schemes : str or sequence of str
        Any of :func:`resgrad.lab.flow.core.all_variants`: a GPT residual scheme or the
        lesson's ``lesson-plain`` / ``lesson-residual``. One line each.
    depth : int
        L, blocks (or the lesson's sublayers) in the stack.
    width : int
        C.
    scale : float
        The lesson's stack only: ``W = randn(C, C) * scale / sqrt(C)``.
    gain : float
        The GPT schemes only: multiplies every block weight matrix after ``init``
        (see the module docstring); 1 leaves the init as it is.
    init : str
        The GPT schemes' initialization, ``"gpt2"`` or ``"xavier"``.
    quantity : str
        What to draw per layer: ``"stream_grad"`` (||dL/dx_i||, the gradient
        reaching layer i), ``"stream_act"`` (||x_i||) or ``"param_grad"``
        (the gradient of layer i's parameters).
    seeds : sequence of int
        K seeds; the line is their mean and a band spans their min..max.
    seq, batch : int
        T and B of the GPT schemes (the lesson's stack works on (B, C) vectors).
    heads : int, optional
        H; by default the most of 4, 2, 1 that divide ``width``.
    loss : str
        The GPT schemes' loss: ``"lm"`` (a whole GPT's cross-entropy on random
        tokens), ``"randn"`` or ``"ones"`` (see :mod:`resgrad.lab.flow`). The
        lesson's stack always uses its upstream gradient of ones.

    Returns
    -------
    PlotSpec
        One series per scheme: exactly the records' means, except where a stack
        overflowed float64 (a large ``gain`` on ``residual`` does): those layers are
        drawn as gaps (value 0 on the log axis) and a note under the title names the
        scheme, rather than the figure failing.
    """
    if quantity not in QUANTITIES:
        raise ValueError(f"quantity must be one of {', '.join(QUANTITIES)}, got {quantity!r}")
    heads = _heads(width) if heads is None else heads
    records = explore_records(
        schemes, depth, width, scale, gain, init,
        seeds=seeds, seq=seq, batch=batch, heads=heads, loss=loss,
    )  # fmt: skip
    records, overflow = _drawable(records, quantity)
    spec = flow_plot_spec(records, quantity)
    names = _schemes(schemes)
    k = len(tuple(seeds))
    notes = [f"mean over {k} seed(s)" + (", band = min..max" if k > 1 else "")]
    if any(s in LESSON_VARIANTS for s in names):
        notes.append(
            f"lesson stack: C={width}, B={batch}, W = randn(C, C) * {scale:g} / sqrt(C), "
            "upstream gradient of ones"
        )
    if any(s not in LESSON_VARIANTS for s in names):
        notes.append(
            f"GPT schemes: C={width}, H={heads}, T={seq}, B={batch}, init {init}, "
            f"block weights x{gain:g}, loss {loss}"
        )
    return dataclasses.replace(spec, notes=(*notes, *overflow))


def explore_figure(*args, **options) -> Figure:
    """The per-layer profile of one or more stacks at initialization, as a figure:
    :func:`explore_spec`'s, with its arguments, drawn by :func:`resgrad.plots.make_figure`.

    Returns a matplotlib Figure on an Agg canvas (no pyplot) whose lines hold exactly the
    records' means (:func:`resgrad.plots.plotted_series` reads them back).
    """
    return make_figure(explore_spec(*args, **options))


def explore_grid(views: Sequence[Mapping[str, object]], ncols: int = 2) -> Figure:
    """Several explorer views in one figure, a panel each, row by row: what the
    notebook's sliders draw at a few settings, for a page where no kernel runs them.

    Parameters
    ----------
    views : sequence of mapping
        Each is a set of :func:`explore_spec`'s keyword arguments (``schemes``,
        ``depth``, ``quantity``, ...); a ``"caption"`` entry, if any, opens the panel's
        title instead of the spec's own.
    ncols : int
        Panels per row.

    Returns
    -------
    matplotlib.figure.Figure
        ``len(views)`` axes (any left over in the last row hidden), each drawn by
        :func:`resgrad.plots.draw_spec` from its view's spec.
    """
    if not views:
        raise ValueError("views must hold at least one view, got none")
    if isinstance(ncols, bool) or not isinstance(ncols, int) or ncols < 1:
        raise ValueError(f"ncols must be an int >= 1, got {ncols!r}")
    ncols = min(ncols, len(views))
    nrows = -(-len(views) // ncols)
    fig, axes = new_figure(ncols, width=6.0 * ncols, nrows=nrows, height=4.6 * nrows)
    for ax, view in zip(axes, views):
        kwargs = dict(view)
        caption = kwargs.pop("caption", None)
        spec = explore_spec(**kwargs)
        if caption is not None:
            spec = dataclasses.replace(spec, title=str(caption))
        draw_spec(ax, spec, title_size=9)
    for ax in axes[len(views) :]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig
