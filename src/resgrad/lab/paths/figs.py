"""Figures of the path split: Veit et al.'s figure 6 for a model, and the share by (i, k).

Legend: L = blocks, n = sublayer branches, K = path lengths k = 0..n, S = seeds (splits).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from resgrad.lab.paths.exact import PathSplit, effective_range
from resgrad.lab.paths.veit import VeitEstimate
from resgrad.lab.study.refusals import JOINT_SPLIT, NO_SPLIT, UNLIKE_SPLITS, VEIT_KS_MISSING

__all__ = ["path_figure", "save_path_figure"]


# --------------------------------------------------------------------------- figures

HEAT_FLOOR = 1e-4  # the heatmap's colours start at this share; exact zeros are left blank


def _band(a: np.ndarray) -> dict:
    """(S, K) over seeds -> the mean line, and a min..max band where S > 1."""
    a = np.asarray(a, dtype=float)
    out = {"y": a.mean(axis=0)}
    if a.shape[0] > 1:
        out["lo"], out["hi"] = a.min(axis=0), a.max(axis=0)
    return out


def _line(ax, x, b: dict, label: str, **kw) -> None:
    (line,) = ax.plot(x, b["y"], label=label, **kw)
    if "lo" in b:
        ax.fill_between(x, b["lo"], b["hi"], color=line.get_color(), alpha=0.2, linewidth=0)


def path_figure(
    splits: Sequence[PathSplit],
    veits: Sequence[VeitEstimate] | None = None,
    title: str = "",
):
    """Veit et al.'s figure 6 for this model, and the share by (boundary i, k).

    Top row, at x_0: (a) C(n, k), the number of paths of each length; (b) the gradient
    magnitude per path: Veit's sampled mean ||path gradient|| (``veits``), or without it
    ||part_k|| / C(n, k), the norm of the mean path's gradient (the exact analogue, smaller:
    paths cancel); (c) the total by k: Veit's C(n, k) x mean beside the exact ||part_k||.
    Bottom row: the share of norm ``share_norm()`` by (i, k), mean over the seeds, with each
    boundary's 90% range outlined; beside it, with more than one seed, its std over them.
    Lines are the mean over the splits (seeds), with a min..max band where there are more.

    Returns
    -------
    matplotlib.figure.Figure
        ``axes[0..2]`` the panels (a)-(c), whose lines hold exactly the numbers described;
        ``axes[3]`` the heatmap (its image's data: the (L + 1, n + 1) mean share).
    """
    from matplotlib.colors import LogNorm
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import MaxNLocator

    from resgrad.plots import new_figure

    if not splits:
        raise NO_SPLIT(function="path_figure")
    if any(isinstance(s.keys[0], tuple) for s in splits):
        raise JOINT_SPLIT(function="path_figure", does="draws")
    n, S = splits[0].n, len(splits)
    if any(s.n != n or s.norms.shape != splits[0].norms.shape for s in splits):
        raise UNLIKE_SPLITS()
    if veits and any(v.n != n or v.ks != tuple(range(n + 1)) for v in veits):
        raise VEIT_KS_MISSING(n=n)
    k = np.arange(n + 1)  # (K,)
    count = np.array([math.comb(n, j) for j in k], dtype=float)  # (K,)
    norms0 = np.array([s.norms[0] for s in splits])  # (S, K) ||part_k|| at x_0
    spread = f"mean over {S} seeds, band min..max" if S > 1 else "one seed"
    fig, axes = new_figure(ncols=3, nrows=2, width=14.0, height=8.4)
    ax_a, ax_b, ax_c = axes[:3]
    # (a) the distribution of path lengths: binomial
    ax_a.bar(k, count, color="0.6", label="C(n, k)")
    lo, hi = effective_range(np.mean([s.share_norm()[0] for s in splits], axis=0))
    ax_a.axvspan(lo - 0.5, hi + 0.5, color="C0", alpha=0.15,
                 label=f"90% of ||dL/dx_0|| (exact): k = {lo}..{hi}")  # fmt: skip
    if veits:
        vlo, vhi = effective_range(np.mean([v.total for v in veits], axis=0))
        ax_a.axvspan(vlo - 0.5, vhi + 0.5, ymax=0.06, color="C1", alpha=0.6,
                     label=f"90% of Veit's C(n, k) x mean: k = {vlo}..{vhi}")  # fmt: skip
    ax_a.legend(fontsize=8, loc="upper left")
    ax_a.set_title(f"(a) paths of length k: C({n}, k), {2**n:,} in all", fontsize=9, loc="left")
    ax_a.set_ylabel("number of paths")
    # (b) the gradient magnitude per path, at x_0
    if veits:
        mean = np.array([v.mean for v in veits])  # (S', K)
        _line(ax_b, k, _band(mean), f"Veit: sampled mean ||g_path||, {veits[0].samples}/k",
              marker="o", ms=3.5, color="C1")  # fmt: skip
        ax_b.set_title("(b) magnitude per path: sampled (Veit's protocol)", fontsize=9, loc="left")
    else:
        _line(ax_b, k, _band(norms0 / count), "exact ||part_k|| / C(n, k)", marker="s", ms=3.5,
              color="C0")  # fmt: skip
        ax_b.set_title("(b) per path: the mean path's gradient (exact, not sampled)",
                       fontsize=9, loc="left")  # fmt: skip
    ax_b.set_ylabel("gradient magnitude at x_0, per path")
    # (c) the total by k: Veit's sum of magnitudes beside the exact vector sum
    if veits:
        total = np.array([v.total for v in veits])  # (S', K)
        _line(ax_c, k, _band(total), "Veit: C(n, k) x mean (sum of magnitudes)", marker="o",
              ms=3.5, color="C1")  # fmt: skip
    _line(ax_c, k, _band(norms0), "exact: ||part_k|| (vector sum)", marker="s", ms=3.5,
          color="C0")  # fmt: skip
    ax_c.set_title("(c) total gradient magnitude by path length", fontsize=9, loc="left")
    ax_c.set_ylabel("gradient magnitude at x_0")
    for ax in (ax_b, ax_c):
        ax.set_yscale("log", nonpositive="mask")
        ax.legend(fontsize=8, loc="best")
    for ax in (ax_a, ax_b, ax_c):
        ax.set_xlabel("path length k (branches passed)")
        ax.set_xlim(-0.7, n + 0.7)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
    # the heatmap: rows the boundaries x_0 .. x_L, columns k
    for ax in axes[3:]:
        fig.delaxes(ax)
    sh = np.array([s.share_norm() for s in splits])  # (S, L + 1, K)
    mean = sh.mean(axis=0)  # (L + 1, K)
    nb = mean.shape[0]
    ax_h = fig.add_subplot(2, 3, (4, 5) if S > 1 else (4, 6))
    image = np.ma.masked_where(mean <= 0, np.maximum(mean, HEAT_FLOOR))  # (L + 1, K)
    im = ax_h.imshow(image, aspect="auto", origin="lower", cmap="viridis", interpolation="nearest",
                     norm=LogNorm(vmin=HEAT_FLOOR, vmax=1.0))  # fmt: skip
    fig.colorbar(im, ax=ax_h, pad=0.01, label="share of the norm (log)")
    for i in range(nb):
        lo, hi = effective_range(mean[i])
        ax_h.add_patch(Rectangle((lo - 0.5, i - 0.5), hi - lo + 1, 1, fill=False, lw=0.9,
                                 edgecolor="white"))  # fmt: skip
    ax_h.set_title(f"(d) share of ||dL/dx_i|| by path length, mean over {S} seed(s); white "
                   "outline: the 90% range; blank: no path", fontsize=9, loc="left")  # fmt: skip
    ax_h.set_xlabel("path length k")
    x0 = "the stack's input" if splits[0].label.startswith("lesson:") else "the embeddings' output"
    ax_h.set_ylabel(f"boundary i (x_0: {x0})")
    ax_h.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_h.yaxis.set_major_locator(MaxNLocator(integer=True))
    if S > 1:
        ax_s = fig.add_subplot(2, 3, 6)
        std = np.ma.masked_where(mean <= 0, sh.std(axis=0))  # (L + 1, K)
        im = ax_s.imshow(std, aspect="auto", origin="lower", cmap="magma", interpolation="nearest")
        fig.colorbar(im, ax=ax_s, pad=0.01)
        ax_s.set_title(f"(e) its std over the {S} seeds", fontsize=9, loc="left")
        ax_s.set_xlabel("path length k")
        ax_s.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax_s.yaxis.set_major_locator(MaxNLocator(integer=True))
    head = f"Gradient paths: {title}; " if title else "Gradient paths: "
    fig.suptitle(head + f"n = {n} branches; top row at x_0, {spread}", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / fig.get_figheight()))  # room for the suptitle
    return fig


def save_path_figure(
    path,
    splits: Sequence[PathSplit],
    veits: Sequence[VeitEstimate] | None = None,
    title: str = "",
) -> None:
    """Draw :func:`path_figure` and write it to ``path`` atomically, PNG or SVG by extension
    (a bad extension is refused before anything is drawn)."""
    from resgrad.plots import plot_format, save_figure

    plot_format(path)
    save_figure(path_figure(splits, veits, title), path)
