"""Lesion study, the figure: three panels of one study's rows (or the mean over runs).

Legend: L = blocks, K = the k of the random kinds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from resgrad.lab.lesion.tables import LesionRow
from resgrad.lab.study.refusals import NO_ROWS, UNKNOWN_METRIC

__all__ = ["lesion_figure", "save_lesion_figure"]


# --------------------------------------------------------------------------- the figure


def _panel_rows(table: Sequence[LesionRow], kind: str) -> list[LesionRow]:
    return [r for r in table if r.kind == kind]


def lesion_figure(table: Sequence[LesionRow], title_text: str = "", metric: str | None = None):
    """Three panels of one study (or the mean over runs), for ``metric`` (``dce`` for a
    model, ``change`` for the lesson's stack, by default).

    - panel a: the metric per deleted attention, MLP and block, by layer, with a ± std bar;
    - panel b: the k-deletion and k-pair-swap curves (Veit's figures 5a and 5b), with a
      ± std band over the sets (or runs);
    - panel c: the adjacent-swap effect by layer.

    Returns
    -------
    matplotlib.figure.Figure
        ``axes[0..2]`` the panels; each line's data are exactly the rows' means.
    """
    from matplotlib.ticker import MaxNLocator

    from resgrad.plots import new_figure

    if not table:
        raise NO_ROWS()
    names = table[0].metrics
    metric = metric or ("dce" if "dce" in names else names[0])
    if metric not in names:
        raise UNKNOWN_METRIC(metric=metric, expected=", ".join(names))
    label = {"ce": "cross-entropy", "dce": "change in cross-entropy (nats)",
             "agree": "top-1 agreement with intact", "acc": "top-1 accuracy",
             "kl": "KL(intact || lesioned)", "change": "||y' - y|| / ||y||"}[metric]  # fmt: skip
    fig, axes = new_figure(ncols=3, width=15.0, height=4.6)
    ax_a, ax_b, ax_c = axes
    drawn = {kind: rs for kind in ("attn", "mlp", "block") if (rs := _panel_rows(table, kind))}
    for j, (kind, rs) in enumerate(drawn.items()):
        shift = (j - (len(drawn) - 1) / 2) * 0.2  # side by side, centred on the layer
        x = np.array([r.layer for r in rs]) + shift  # (L,)
        m, s = np.array([r.get(metric) for r in rs]).T  # (L,), (L,)
        name = {"attn": "attention", "mlp": "MLP"}.get(kind, "whole block")
        marker = "os^"[("attn", "mlp", "block").index(kind)]
        ax_a.errorbar(x, m, yerr=s, fmt=marker + "-", ms=4, capsize=2, label=name)
    layers = [r.layer for rs in drawn.values() for r in rs]
    if layers:  # half a unit either side of the layers drawn: each one has its tick
        ax_a.set_xlim(min(layers) - 0.5, max(layers) + 0.5)
    ax_a.set_title("(a) one branch or block deleted", fontsize=9, loc="left")
    ax_a.set_xlabel("layer i")
    for i, kind in enumerate(("delete", "pairs")):
        rs = _panel_rows(table, kind)
        if rs:
            k = np.array([r.k for r in rs])
            m, s = np.array([r.get(metric) for r in rs]).T  # (K,), (K,)
            (line,) = ax_b.plot(k, m, "os"[i] + "-", ms=4,
                                label="k blocks deleted" if kind == "delete" else
                                "k pairs swapped")  # fmt: skip
            ax_b.fill_between(k, m - s, m + s, color=line.get_color(), alpha=0.2, linewidth=0)
    ax_b.set_title("(b) k random deletions and pair swaps, band ± std", fontsize=9, loc="left")
    ax_b.set_xlabel("k")
    rs = _panel_rows(table, "swap")
    if rs:
        m, s = np.array([r.get(metric) for r in rs]).T  # (L - 1,), (L - 1,)
        ax_c.errorbar([r.layer for r in rs], m, yerr=s, fmt="D-", ms=4, capsize=2,
                      color="C3", label="blocks i and i + 1 swapped")  # fmt: skip
    ax_c.set_title("(c) adjacent blocks swapped", fontsize=9, loc="left")
    ax_c.set_xlabel("layer i (swapped with i + 1)")
    for ax in axes:
        if metric in ("dce", "kl", "change"):
            ax.axhline(0.0, color="0.5", linewidth=0.8)  # the intact model
        if len(ax.lines) > 1 or ax.collections:
            ax.legend(fontsize=8, loc="best")
        else:
            ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
        ax.set_ylabel(label)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"Lesion study: {title_text}" if title_text else "Lesion study", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
    return fig


def save_lesion_figure(path, table: Sequence[LesionRow], title_text: str = "",
                       metric: str | None = None) -> None:  # fmt: skip
    """Draw :func:`lesion_figure` and write it to ``path`` atomically, PNG or SVG by its
    extension (a bad extension is refused before anything is drawn)."""
    from resgrad.plots import plot_format, save_figure

    plot_format(path)
    save_figure(lesion_figure(table, title_text, metric), path)
