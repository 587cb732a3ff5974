"""The equal-loss study's figure: six panels, each saying in its title what it shows.

Top: lesion cost through training (a line per model, the levels marked); lesion cost against
path length at each level (a colour per scheme, a shape per level); the dose response inside
each dosed scheme. Bottom: the curse of depth at the lowest level (most trained), at the
deepest depth: each block's one-block lesion cost and its share of the gradient through its
branches, by block index, with 95% intervals over training seeds; and the answer's
path-length coefficient at each level, per depth and pooled, with its interval.

Legend: M = models, N = levels, L = blocks.
"""

from __future__ import annotations

import numpy as np

from resgrad.lab.robustness.analysis import Study
from resgrad.lab.robustness.report import DOSE_NAMES, describe

__all__ = ["SCHEME_COLORS", "robustness_figure", "save_robustness_figure"]

SCHEME_COLORS = {"pre-ln": "C0", "post-ln": "C1", "deepnorm": "C2", "rezero": "C3",
                 "residual": "C4", "ln-scaling": "C5"}  # fmt: skip
MARKERS = "osD^v<>"
# lesion costs run from thousandths of a nat to a diverged model's hundreds: a symmetric log
# axis, linear within this of 0, shows both (and the negative costs of a block that hurts)
SYMLOG = 0.05


def _through_training(ax, study: Study, metric: str) -> None:
    shallow = min(study.cfg.depths)
    for t in study.trajs:
        c = SCHEME_COLORS.get(t.model.scheme, "C7")
        ls = "-" if t.model.depth == shallow else "--"
        ax.plot(t.loss, t.metrics[metric], color=c, linestyle=ls, linewidth=0.8, alpha=0.7)
    for lv in study.levels:
        ax.axvline(lv, color="0.6", linestyle=":", linewidth=0.8)
    ax.axvline(study.plateau, color="k", linestyle="-.", linewidth=0.8, label="unigram plateau")
    # a diverging model's spikes (losses far above the start) would squash the rest: the
    # axis runs from the lowest loss to a little above the highest start, said in the title
    start = max(float(t.loss[0]) for t in study.trajs)
    low = min(float(np.min(t.loss)) for t in study.trajs)
    ax.set_xlim(start + 0.2, low - 0.05)  # inverted: training goes left to right
    ax.set_yscale("symlog", linthresh=SYMLOG)
    ax.set_xlabel("validation loss (training goes right)")
    ax.set_ylabel(f"{metric}: ΔCE, one block deleted (symlog)")
    ax.set_title(f"lesion cost through training\n(solid: L={shallow}, dashed: deeper; "
                 f"dotted: the levels; losses above {start + 0.2:.2f} off the axis)",
                 fontsize=9)  # fmt: skip
    ax.legend(fontsize=7)


def _at_levels(ax, study: Study, metric: str, pm: str) -> None:
    for j, r in enumerate(study.results):
        for p in r.points:
            ax.scatter(p.metrics[pm], p.metrics[metric], s=16, marker=MARKERS[j % len(MARKERS)],
                       color=SCHEME_COLORS.get(p.model.scheme, "C7"), alpha=0.8)  # fmt: skip
    for s, c in SCHEME_COLORS.items():  # in words: a colour per scheme, a shape per level
        if s in study.cfg.schemes:
            ax.scatter([], [], color=c, marker="o", label=s)
    for j, r in enumerate(study.results):
        ax.scatter([], [], color="0.4", marker=MARKERS[j % len(MARKERS)],
                   label=f"at loss {r.level:g}")  # fmt: skip
    ax.set_yscale("symlog", linthresh=SYMLOG)
    ax.set_xlabel(f"{pm}: mean path length k of the gradient at x_0")
    ax.set_ylabel(f"{metric} at the level (interpolated, symlog)")
    ax.set_title("at equal loss: lesion cost against path length\n(every model, every level)",
                 fontsize=9)  # fmt: skip
    ax.legend(fontsize=6, ncol=2)


def _doses(ax, study: Study, metric: str) -> None:
    low = min(study.levels)
    r = next(r for r in study.results if r.level == low)
    drawn = False
    for (s, L), _ in study.doses.items():
        doses = study.cfg.doses_of(s)
        ys = [[p.metrics[metric] for p in r.points
               if (p.model.scheme, p.model.depth, p.model.dose) == (s, L, d)]
              for d in doses]  # fmt: skip
        if not all(ys):
            continue
        x = np.arange(len(doses))  # the doses in order: alpha0 and p share an axis
        m = np.array([np.mean(y) for y in ys])  # (doses,)
        sd = np.array([np.std(y, ddof=1) if len(y) > 1 else 0.0 for y in ys])
        ax.errorbar(x, m, yerr=sd, marker="o", capsize=2, color=SCHEME_COLORS.get(s, "C7"),
                    linestyle="-" if L == min(study.cfg.depths) else "--",
                    label=f"{s} L={L}: {DOSE_NAMES[s]} "
                    + ",".join(f"{d:g}" for d in doses))  # fmt: skip
        drawn = True
    ax.set_xlabel("dose, in order (rezero: alpha at init; ln-scaling: exponent p)")
    ax.set_ylabel(f"{metric} at loss {low:g}, mean ± std over seeds")
    ax.set_title(f"the dose inside a scheme, at loss {low:g}", fontsize=9)
    if drawn:
        ax.legend(fontsize=6)


def _profiles(ax_cost, ax_share, study: Study) -> None:
    low, deep = min(study.levels), max(t.model.depth for t in study.trajs)
    for r in study.profiles:
        if r.level != low or r.depth != deep:
            continue
        dosed = len(study.cfg.doses_of(r.scheme)) > 1
        label = f"{r.scheme}" + (f" {DOSE_NAMES[r.scheme]}={r.dose:g}" if dosed else "")
        c = SCHEME_COLORS.get(r.scheme, "C7")
        ls = "-" if not dosed or r.dose == max(study.cfg.doses_of(r.scheme)) else ":"
        x = np.arange(r.depth)
        for ax, (m, lo, hi) in ((ax_cost, (r.lesion, r.lesion_lo, r.lesion_hi)),
                                (ax_share, (r.branch, r.branch_lo, r.branch_hi))):  # fmt: skip
            ax.plot(x, m, color=c, linestyle=ls, marker=".", linewidth=1, label=label)
            ax.fill_between(x, lo, hi, color=c, alpha=0.12)
    for ax in (ax_cost, ax_share):
        ax.set_xticks(range(deep))
    ax_cost.set_yscale("symlog", linthresh=SYMLOG)
    ax_cost.set_xlabel("block index (0: nearest the embeddings)")
    ax_cost.set_ylabel("one-block lesion cost ΔCE (nats, symlog)")
    ax_cost.set_title(f"the curse of depth at loss {low:g}, L={deep}: what deleting\n"
                      "each block costs (band: 95% over seeds)", fontsize=9)  # fmt: skip
    ax_share.set_xlabel("block index (0: nearest the embeddings)")
    ax_share.set_ylabel("share of the gradient through its branches")
    ax_share.set_title(f"beside it, at loss {low:g}, L={deep}: the gradient\n"
                       "through each block's branches (band: 95% over seeds)",
                       fontsize=9)  # fmt: skip
    ax_cost.legend(fontsize=6, ncol=2)


def _coefficients(ax, study: Study) -> None:
    views = [("pooled within depth", study.results, "k")]
    views += [(f"L={L} alone", rs_, None) for L, rs_ in study.by_depth.items()]
    for j, (name, rs_, color) in enumerate(views):
        x = np.array([r.level for r in rs_]) + 0.006 * (j - len(views) / 2)
        b = np.array([r.path_coef for r in rs_])  # (N, 3)
        # a percentile interval need not hold the estimate: its bar drawn from the estimate
        err = np.clip([b[:, 0] - b[:, 1], b[:, 2] - b[:, 0]], 0, None)  # (2, N)
        ax.errorbar(x, b[:, 0], yerr=err, marker="o",
                    capsize=2, linestyle="none", color=color, label=name)  # fmt: skip
    ax.axhline(0, color="0.5", linewidth=0.8)
    ax.set_yscale("symlog", linthresh=SYMLOG / 10)  # one wide interval squashes the rest
    ax.invert_xaxis()
    ax.set_xlabel("loss level (training goes right)")
    ax.set_ylabel("b(path length | scheme, loss), 95% over seeds (symlog)")
    ax.set_title("the answer at each level: above 0, shorter paths\ncheaper lesions", fontsize=9)
    ax.legend(fontsize=7)


def robustness_figure(study: Study, command: str = ""):
    """The six panels (see the module docstring), titled with the study and the command."""
    from resgrad.plots import new_figure

    fig, axes = new_figure(nrows=2, ncols=3, width=16.0, height=10.0)
    a1, a2, a3, b1, b2, b3 = axes  # row by row
    metric, pm = study.results[0].lesion_metric, study.results[0].path_metric
    _through_training(a1, study, metric)
    _at_levels(a2, study, metric, pm)
    _doses(a3, study, metric)
    _profiles(b1, b2, study)
    _coefficients(b3, study)
    models = len(study.trajs) + len(study.left_out)
    fig.suptitle(f"Equal-loss robustness: {describe(study.cfg, models)}\n{command}", fontsize=9)
    fig.tight_layout()
    return fig


def save_robustness_figure(path, study: Study, command: str = "") -> None:
    """Draw :func:`robustness_figure` and write it to ``path`` atomically (PNG or SVG)."""
    from resgrad.plots import plot_format, save_figure

    plot_format(path)
    save_figure(robustness_figure(study, command), path)
