"""Looking at training runs: per-layer dynamics as heatmaps, and several runs side by side.

Legend: L = n_layer, N = recorded steps.

``resgrad dynamics RUN_DIR`` draws :func:`dynamics_figure`: for each quantity of
:data:`resgrad.train.dynamics.PER_BLOCK`, a heatmap of layer against step on a
log colour scale (left), and the same quantity against step for a few chosen
layers (right). ``resgrad compare RUN_DIR...`` draws :func:`compare_figure`: the
loss curves of every run, then one quantity against step for chosen layers and
its profile across layers at the end of training, one colour per run, each run
labelled by the settings in which it differs from the others.
"""

from __future__ import annotations

import math
import os
import textwrap
import warnings
from collections.abc import Sequence

import numpy as np

from resgrad.plots import draw_losses, new_figure
from resgrad.train.dynamics import PER_BLOCK, Dynamics
from resgrad.train.rundir import read_metrics

__all__ = [
    "QUANTITIES",
    "compare_figure",
    "default_layers",
    "dynamics_figure",
    "run_labels",
]

QUANTITIES = tuple(PER_BLOCK)
# settings that never say how two runs differ as experiments
RUN_LABEL_WIDTH = 70  # characters of a run's label per line in compare's key
_NOT_A_DIFFERENCE = ("out_dir", "resume", "max_iters", "eval_interval", "eval_iters",
                     "keep_every")  # fmt: skip


def default_layers(n_layer: int) -> tuple[int, ...]:
    """The first, middle and last block (fewer when the model is shallow)."""
    return tuple(sorted({0, n_layer // 2, n_layer - 1}))


def _check_quantities(quantities: Sequence[str]) -> tuple[str, ...]:
    quantities = tuple(quantities)
    if not quantities:
        raise ValueError("expected at least one quantity")
    for q in quantities:
        if q not in PER_BLOCK:
            raise ValueError(f"unknown quantity {q!r}; expected one of {', '.join(QUANTITIES)}")
    return quantities


def _check_layers(layers: Sequence[int], n_layer: int, where: str) -> tuple[int, ...]:
    for i in layers:
        if not 0 <= i < n_layer:
            raise ValueError(f"layer {i} does not exist in {where} (blocks 0..{n_layer - 1})")
    return tuple(layers)


def _rows(dyn: Dynamics, q: str) -> np.ndarray:
    """(N, L) of quantity q; stream_grad keeps its L + 1 boundaries."""
    return dyn[q].astype(np.float64)


def _need_records(dyn: Dynamics) -> None:
    if dyn.records.size == 0:
        if dyn.damage:  # the first record is already damaged
            raise ValueError(f"{dyn.run_dir!r}: {dyn.damage}: nothing to draw")
        raise ValueError(f"{dyn.run_dir!r} has no dynamics records yet (no step completed)")


def dynamics_figure(
    dyn: Dynamics,
    quantities: Sequence[str] = QUANTITIES,
    layers: Sequence[int] | None = None,
):
    """Heatmaps (layer x step, log colours) and per-layer lines of each quantity.

    Returns a matplotlib Figure with one row per quantity: ``axes[2 r]`` the heatmap
    (its image's data is exactly the recorded values, (L, N)), ``axes[2 r + 1]`` one
    line per chosen layer against step.
    """
    from matplotlib.colors import LogNorm
    from matplotlib.ticker import MaxNLocator

    _need_records(dyn)
    quantities = _check_quantities(quantities)
    layers = default_layers(dyn.n_layer) if layers is None else layers
    layers = _check_layers(layers, dyn.n_layer, dyn.run_dir)
    steps = dyn.steps  # (N,)
    fig, axes = new_figure(ncols=2, nrows=len(quantities), width=13.0,
                           height=2.7 * len(quantities) + 0.6)  # fmt: skip
    for r, q in enumerate(quantities):
        ax_map, ax_line = axes[2 * r], axes[2 * r + 1]
        vals = _rows(dyn, q)  # (N, L) or (N, L + 1)
        pos = vals[np.isfinite(vals) & (vals > 0)]
        norm = LogNorm(vmin=pos.min(), vmax=pos.max()) if pos.size else None
        image = np.ma.masked_where(~np.isfinite(vals.T) | (vals.T <= 0), vals.T)  # (L, N)
        x0, x1 = float(steps[0]) - 0.5, float(steps[-1]) + 0.5
        im = ax_map.imshow(image, aspect="auto", origin="lower", norm=norm, cmap="viridis",
                           interpolation="nearest",
                           extent=(x0, x1, -0.5, vals.shape[1] - 0.5))  # fmt: skip
        fig.colorbar(im, ax=ax_map, pad=0.01)
        ax_map.set_ylabel("boundary" if q == "stream_grad" else "block")
        ax_map.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax_map.set_title(f"{q}: {PER_BLOCK[q]}", fontsize=9, loc="left")
        point = {"marker": "o", "ms": 4} if len(steps) == 1 else {}  # a line draws nothing
        for i in layers:
            where = "boundary" if q == "stream_grad" else "block"  # x_i is a boundary's
            ax_line.plot(steps, vals[:, i], lw=1.0, label=f"{where} {i}", **point)
        ax_line.set_yscale("log", nonpositive="mask")
        ax_line.grid(True, alpha=0.3)
        ax_line.legend(fontsize=7, loc="best")
        ax_line.set_title(q, fontsize=9, loc="left")
    for ax in axes[-2:]:
        ax.set_xlabel("step")
    cfg = dyn.config
    desc = ", ".join(f"{k} {cfg[k]}" for k in ("variant", "n_layer", "n_embd", "lr") if k in cfg)
    fig.suptitle(f"training dynamics of {dyn.run_dir}" + (f" ({desc})" if desc else ""),
                 fontsize=11)  # fmt: skip
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / fig.get_figheight()))  # room for the suptitle
    return fig


def run_labels(configs: Sequence[dict], dirs: Sequence[str]) -> list[str]:
    """Per run, ``"key=value, ..."`` of the settings in which the runs differ.

    Runs that differ in no setting (or whose settings are unknown) are labelled
    by their directory.
    """
    keys = sorted({k for c in configs for k in c} - set(_NOT_A_DIFFERENCE))
    differ = [k for k in keys if len({repr(c.get(k)) for c in configs}) > 1]
    labels = [", ".join(f"{k}={c.get(k)}" for k in differ) for c in configs]
    if not differ or len(set(labels)) < len(labels):
        labels = [os.path.basename(os.path.normpath(d)) or d for d in dirs]
    return labels


def compare_figure(
    dyns: Sequence[Dynamics],
    quantity: str = "grad",
    layers: Sequence[int] | None = None,
    tail: float = 0.1,
):
    """Several runs on one figure, one colour per run.

    Panels: loss curves (from each run's metrics); ``quantity`` against step for
    the chosen layers (solid: the first, then dashed, dotted); its profile across
    layers, averaged over the last ``tail`` fraction of each run's steps.
    """
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    (quantity,) = _check_quantities([quantity])
    if isinstance(tail, bool) or not isinstance(tail, (int, float)) or not 0 < tail <= 1:
        raise ValueError(f"tail must be a fraction of the steps in (0, 1], got {tail!r}")
    if len(dyns) < 1:
        raise ValueError("compare needs at least one run")
    for d in dyns:
        _need_records(d)
    if layers is None:
        layers = default_layers(min(d.n_layer for d in dyns))
    for d in dyns:
        _check_layers(layers, d.n_layer, d.run_dir)
    labels = run_labels([d.config for d in dyns], [d.run_dir for d in dyns])
    fig, (ax_loss, ax_step, ax_prof) = new_figure(ncols=3, width=17.0, height=5.0)
    styles = ("-", "--", ":", "-.")
    for k, (d, label) in enumerate(zip(dyns, labels)):
        color = f"C{k % 10}"
        draw_losses(ax_loss, read_metrics(d.run_dir), label=label, color=color)
        vals = _rows(d, quantity)  # (N, L)
        point = {"marker": "o", "ms": 4} if len(d.steps) == 1 else {}  # a line draws nothing
        for j, i in enumerate(layers):
            ax_step.plot(d.steps, vals[:, i], styles[j % len(styles)], color=color, lw=1.0,
                         label=f"{label}, block {i}", **point)  # fmt: skip
        n = max(1, int(round(tail * len(vals))))
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a block with no finite step: a gap
            prof = np.nanmean(np.where(np.isfinite(vals[-n:]), vals[-n:], np.nan), axis=0)
        ax_prof.plot(range(len(prof)), prof, "o-", ms=3.5, color=color, label=label)
    ax_loss.set_xlabel("iteration")
    ax_loss.set_ylabel("cross-entropy loss")
    ax_loss.set_title("loss", fontsize=10)
    ax_step.set_xlabel("step")
    ax_step.set_ylabel(quantity)
    ax_step.set_title(f"{quantity} by step: {PER_BLOCK[quantity]}", fontsize=9)
    ax_prof.set_xlabel("boundary (0 = input)" if quantity == "stream_grad" else "block")
    ax_prof.set_ylabel(quantity)
    ax_prof.set_title(f"{quantity} across layers, mean of the last {tail:.0%} of steps",
                      fontsize=9)  # fmt: skip
    for ax in (ax_step, ax_prof):
        ax.set_yscale("log", nonpositive="mask")
    ax_prof.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in (ax_loss, ax_step, ax_prof):
        ax.grid(True, alpha=0.3)
    # the panels' legends key the line styles; one key below them names the runs' colours,
    # so labels of many differing settings wrap there instead of covering the curves
    key = {"train (per step, smoothed)": {}, "val (eval)": {"ls": "--", "marker": "o", "ms": 3.5}}
    ax_loss.legend(handles=[Line2D([], [], color="0.35", label=k, **kw) for k, kw in key.items()],
                   fontsize=7, loc="best")  # fmt: skip
    ax_step.legend(handles=[Line2D([], [], color="0.35", ls=styles[j % len(styles)],
                                   label=f"block {i}") for j, i in enumerate(layers)],
                   fontsize=7, loc="best")  # fmt: skip
    wrapped = ["\n".join(textwrap.wrap(label, RUN_LABEL_WIDTH)) or label for label in labels]
    ncol = 1 if max(len(label) for label in labels) > RUN_LABEL_WIDTH // 2 else min(3, len(labels))
    rows = max(w.count("\n") + 1 for w in wrapped) * math.ceil(len(labels) / ncol)
    key_h = 0.25 + 0.16 * rows  # inches: 8-point lines and a margin
    fig.set_figheight(fig.get_figheight() + key_h)
    fig.legend(handles=[Line2D([], [], color=f"C{k % 10}", lw=2.5, label=w)
                        for k, w in enumerate(wrapped)],
               loc="lower center", ncol=ncol, fontsize=8, frameon=False)  # fmt: skip
    fig.tight_layout(rect=(0, key_h / fig.get_figheight(), 1, 1))
    return fig
