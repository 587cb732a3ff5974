"""The equal-loss robustness study written out: its table (the levels, each verdict, the
checkpoints nearest each level with the commands that rerun them), JSON, CSV, and its figure
of three panels.

Legend: M = models, N = levels.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from resgrad.formats.records import to_csv
from resgrad.lab.robustness.experiment import DOSE_SCHEME, RobustnessConfig
from resgrad.lab.robustness.levels import Trajectory
from resgrad.lab.robustness.stats import LevelResult

__all__ = [
    "describe",
    "read_again",
    "render",
    "robustness_figure",
    "save_robustness_figure",
]


def describe(cfg: RobustnessConfig, models: int) -> str:
    """What the study trained and read, in one line: a title's text."""
    doses = ",".join(f"{d:g}" for d in cfg.doses)
    schemes = ", ".join(s + (f" (alpha0 {doses})" if s == DOSE_SCHEME and cfg.doses != (0.0,)
                             else "") for s in cfg.schemes)  # fmt: skip
    depths = ",".join(str(d) for d in cfg.depths)
    return (f"{models} models: {schemes}; L={depths}, C={cfg.n_embd}, {cfg.max_iters} steps, "
            f"{len(cfg.seeds)} training seeds")  # fmt: skip


def read_again(cfg: RobustnessConfig, text: str) -> str:
    """The flags that read one checkpoint again as the study read it: ``resgrad paths CKPT``
    and ``resgrad lesion CKPT`` followed by these."""
    seeds = seeds_flag(cfg.window_seeds)
    return f"--text {text} --seq {cfg.block_size} --batch {cfg.windows} --seeds {seeds}"


def seeds_flag(seeds: Sequence[int]) -> str:
    """``--seeds`` for ``seeds``, as the parser reads it back: a count K where they are
    0..K-1; else the list, a lone seed s as the range ``s-s`` (a lone number is a count)."""
    seeds = tuple(int(s) for s in seeds)
    if seeds == tuple(range(len(seeds))):
        return str(len(seeds))
    if len(seeds) == 1:
        return f"{seeds[0]}-{seeds[0]}"
    return ",".join(map(str, seeds))


def _nearest(r: LevelResult) -> str:
    """The checkpoints nearest the level, one per (scheme, depth, dose) of the first seed."""
    seed0 = min(p.model.seed for p in r.points)
    return "; ".join(f"{p.model.label}: {p.nearest.path} (loss {p.nearest.loss:.4f})"
                     for p in r.points if p.model.seed == seed0)  # fmt: skip


def render(results: Sequence[LevelResult], trajs: Sequence[Trajectory], cfg: RobustnessConfig,
           fmt: str = "table", text: str = "VALIDATION.txt", command: str = "") -> str:  # fmt: skip
    """The study as ``resgrad experiment robustness`` prints it: a table, ``json`` or ``csv``
    (one row per level, :meth:`LevelResult.record`)."""
    if fmt == "csv":
        recs = [r.record() for r in results]
        return to_csv(recs, list(recs[0]))
    if fmt == "json":
        strata, skipped = _strata(results, trajs, cfg)
        out = {"study": describe(cfg, len(trajs)), "command": command,
               "levels": [r.level for r in results], "results": [r.record() for r in results],
               "by_depth": {str(L): [r.record() for r in rs_] for L, rs_ in strata.items()},
               "depths_skipped": skipped,
               "points": [p for r in results for p in r.point_records()]}  # fmt: skip
        return json.dumps(out, indent=2, default=float) + "\n"
    r0 = results[0]
    lines = [f"Equal-loss robustness: {describe(cfg, len(trajs))}",
             f"the claim: {CLAIM} (supported: shorter paths, cheaper lesions)",
             f"lesion cost: {r0.lesion_metric} (one block deleted, the change in cross-entropy, "
             f"mean over blocks); path length: {r0.path_metric}; at each loss level, every "
             "model's values interpolated between the two checkpoints that bracket it",
             "levels (validation loss, inside the range every model reaches): "
             + ", ".join(f"{r.level:g}" for r in results)]  # fmt: skip
    # each column says what it holds fixed: the verdict reads the regression's coefficient,
    # which holds scheme and loss fixed; the rank correlations hold nothing (or loss) fixed
    b = "b(path length | scheme, depth, loss) [95% CI over seeds]"
    head = (f"{'level':>7} | {'models':>6} | {'rho(k, cost)':>12} | {'rho(k, cost | loss)':>19} | "
            f"{b:>57} | verdict")  # fmt: skip
    lines += [head, "-" * len(head)]
    for r in results:
        b, lo, hi = r.path_coef
        ci = f"{b:+.4f} [{lo:+.4f}, {hi:+.4f}]"
        lines.append(f"{r.level:>7.4g} | {r.models:>6} | {r.spearman:>+12.3f} | "
                     f"{r.partial:>+19.3f} | {ci:>57} | {r.verdict}")  # fmt: skip
    lines.append(evidence(results, cfg))
    strata, skipped = _strata(results, trajs, cfg)
    if len(strata) > 1 or skipped:
        lines.append("within each depth alone (b(path length | scheme, loss) [95% CI]):")
        for L, rs_ in strata.items():
            lines.append(f"  L={L:<3}" + "; ".join(
                f"{r.level:g}: {r.path_coef[0]:+.4f} [{r.path_coef[1]:+.4f}, "
                f"{r.path_coef[2]:+.4f}] {r.verdict}" for r in rs_))  # fmt: skip
        lines += [f"  {line}" for line in skipped]
    lines.append("")
    lines += [r.sentence for r in results]
    lines.append("")
    flags = read_again(cfg, text)
    lines.append("the checkpoints nearest each level (first training seed); read one again with "
                 f"resgrad paths CKPT {flags}, and resgrad lesion CKPT {flags} --what "
                 f"block,delete --k 2 --samples {cfg.samples}:")  # fmt: skip
    lines += [f"  level {r.level:g}: {_nearest(r)}" for r in results]
    return "\n".join(lines) + "\n"


CLAIM = (
    "at equal loss, a model whose gradient travels shorter paths loses less when a block is deleted"
)


def _strata(results: Sequence[LevelResult], trajs: Sequence[Trajectory], cfg: RobustnessConfig):
    """The study at each depth alone (:func:`~resgrad.lab.robustness.stats.by_depth`), at the
    pooled results' levels: ({depth: results}, the depths skipped and why)."""
    from resgrad.lab.robustness.stats import by_depth

    r0 = results[0]
    return by_depth(trajs, [r.level for r in results], path_metric=r0.path_metric,
                    lesion_metric=r0.lesion_metric, B=r0.resamples)  # fmt: skip


def evidence(results: Sequence[LevelResult], cfg: RobustnessConfig) -> str:
    """How strong the table's evidence is, under it: the training seeds and the distinct
    resamples a bootstrap of them can draw, the resamples drawn, and the widest gap between
    a level and the checkpoints that bracket it (interpolated over); ``--quick``'s verdicts
    are a smoke test."""
    from resgrad.lab.robustness.stats import distinct_resamples

    seeds, r0 = results[0].seeds, results[0]
    # each model's value at a level is interpolated between the checkpoints that bracket it
    gap = max((abs(p.before.loss - p.after.loss) for r in results for p in r.points), default=0.0)
    line = (f"evidence: {seeds} training seeds ({', '.join(map(str, cfg.seeds))}), "
            f"{distinct_resamples(seeds)} distinct bootstrap resamples of them ({r0.resamples} "
            f"drawn); levels interpolated between checkpoints at most {gap:.3f} nats apart "
            "(b: lesion cost per unit of mean path length k)")  # fmt: skip
    if cfg.smoke:
        line += "; --quick: a smoke test of the machinery, its verdicts are not evidence"
    return line


SCHEME_COLORS = {"pre-ln": "C0", "post-ln": "C1", "deepnorm": "C2", "rezero": "C3",
                 "residual": "C4", "ln-scaling": "C5"}  # fmt: skip


def robustness_figure(results: Sequence[LevelResult], trajs: Sequence[Trajectory],
                      cfg: RobustnessConfig, command: str = ""):  # fmt: skip
    """Three panels: lesion cost against loss through training, a line per model coloured by
    scheme, the levels marked; lesion cost against path length at each level, a marker per
    model; the dose response of rezero's alpha at initialization at each level, mean ± std
    over the training seeds."""
    from resgrad.plots import new_figure

    fig, (a1, a2, a3) = new_figure(ncols=3, width=16.0, height=5.0)
    metric, pm = results[0].lesion_metric, results[0].path_metric
    for t in trajs:
        c = SCHEME_COLORS.get(t.model.scheme, "C7")
        ls = "-" if t.model.depth == min(cfg.depths) else "--"
        a1.plot(t.loss, t.metrics[metric], color=c, linestyle=ls, linewidth=0.8, alpha=0.7)
    for r in results:
        a1.axvline(r.level, color="0.6", linestyle=":", linewidth=0.8)
    a1.invert_xaxis()  # training goes left to right
    a1.set_xlabel("validation loss (training goes right)")
    a1.set_ylabel(f"{metric}: ΔCE, one block deleted")
    a1.set_title("lesion cost through training\n(solid: shallowest L, dashed: deeper)")
    markers = "osD^v<>"
    for j, r in enumerate(results):
        for p in r.points:
            a2.scatter(p.metrics[pm], p.metrics[metric], s=18, marker=markers[j % len(markers)],
                       color=SCHEME_COLORS.get(p.model.scheme, "C7"), alpha=0.8)  # fmt: skip
    a2.set_xlabel(f"{pm}: mean path length k of the gradient at x_0")
    a2.set_ylabel(f"{metric} at the level (interpolated)")
    a2.set_title("at equal loss: lesion cost against path length")
    for s, c in SCHEME_COLORS.items():  # in words: a colour per scheme, a shape per level
        if s in cfg.schemes:
            a2.scatter([], [], color=c, marker="o", label=s)
    for j, r in enumerate(results):
        a2.scatter([], [], color="0.4", marker=markers[j % len(markers)],
                   label=f"at loss {r.level:g}")  # fmt: skip
    a2.legend(fontsize=7)
    dosed = [d for d in cfg.doses] if DOSE_SCHEME in cfg.schemes else []
    for j, r in enumerate(results):
        for L in cfg.depths:
            ys = [[p.metrics[metric] for p in r.points if p.model.scheme == DOSE_SCHEME
                   and p.model.depth == L and p.model.dose == d] for d in dosed]  # fmt: skip
            if not dosed or not all(ys):
                continue
            m = np.array([np.mean(y) for y in ys])  # (doses,)
            sd = np.array([np.std(y, ddof=1) if len(y) > 1 else 0.0 for y in ys])
            a3.errorbar(dosed, m, yerr=sd, marker=markers[j % len(markers)], capsize=2,
                        linestyle="-" if L == min(cfg.depths) else "--",
                        label=f"loss {r.level:g}, L={L}")  # fmt: skip
    a3.set_xlabel("dose: rezero's alpha at initialization")
    a3.set_ylabel(f"{metric} at the level, mean ± std over seeds")
    a3.set_title("dose response (rezero)")
    if dosed:
        a3.legend(fontsize=7)
    fig.suptitle(f"Equal-loss robustness: {describe(cfg, len(trajs))}\n{command}", fontsize=9)
    fig.tight_layout()
    return fig


def save_robustness_figure(path, results, trajs, cfg, command: str = "") -> None:
    """Draw :func:`robustness_figure` and write it to ``path`` atomically (PNG or SVG)."""
    from resgrad.plots import plot_format, save_figure

    plot_format(path)
    save_figure(robustness_figure(results, trajs, cfg, command), path)
