"""The equal-loss robustness study written out: its table (the recipe, the levels and their
phases, each view's verdicts with their calibration, the curse of depth, the checkpoints
nearest each level with the commands that rerun them), JSON and CSV; its figure:
:mod:`resgrad.lab.robustness.figure`.

Legend: M = models, N = levels.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from resgrad.formats.records import to_csv
from resgrad.lab.robustness.analysis import Study
from resgrad.lab.robustness.experiment import RobustnessConfig
from resgrad.lab.robustness.levels import ModelKey
from resgrad.lab.robustness.profiles import QUESTION as CURSE_QUESTION
from resgrad.lab.robustness.recipe import PLATEAU_MARGIN, phase, pilot_lines
from resgrad.lab.robustness.regression import distinct_resamples
from resgrad.lab.robustness.stats import LevelResult

__all__ = ["CLAIM", "describe", "evidence", "read_again", "render"]


def describe(cfg: RobustnessConfig, models: int) -> str:
    """What the study trained and read, in one line: a title's text."""

    def dosed(s: str) -> str:
        doses = cfg.doses_of(s)
        what = {"rezero": "alpha0", "ln-scaling": "p"}.get(s)
        return f"{s} ({what} {','.join(f'{d:g}' for d in doses)})" if len(doses) > 1 else s

    schemes = ", ".join(dosed(s) for s in cfg.schemes)
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


def render(study: Study, fmt: str = "table", text: str = "VALIDATION.txt",
           command: str = "") -> str:  # fmt: skip
    """The study as ``resgrad experiment robustness`` prints it: a table, ``json`` (every
    view, every model's point) or ``csv`` (one row per level of the answer,
    :meth:`LevelResult.record`)."""
    cfg, results = study.cfg, study.results
    if fmt == "csv":
        recs = [r.record() for r in results]
        return to_csv(recs, list(recs[0]))
    if fmt == "json":
        return json.dumps(_json(study, command), indent=2, default=float) + "\n"
    r0 = results[0]
    lines = [f"Equal-loss robustness: {describe(cfg, len(study.trajs) + len(study.left_out))}",
             f"the claim: {CLAIM} (supported: shorter paths, cheaper lesions)",
             *recipe_lines(study),
             f"lesion cost: {r0.lesion_metric} (one block deleted, the change in cross-entropy, "
             f"mean over blocks); path length: {r0.path_metric}; at each loss level, every "
             "model's values interpolated between the two checkpoints that bracket it",
             "levels (validation loss, inside the range every model reaches, named by phase "
             f"against the unigram plateau {study.plateau:.3f}): "
             + ", ".join(f"{r.level:g} ({phase(r.level, study.plateau)})" for r in results),
             "", "within depth, pooled (the answer):"]  # fmt: skip
    lines += _table(results, "b(path length | scheme, depth, loss) [95% CI over seeds]")
    lines.append(evidence(results, cfg))
    if len(study.by_depth) > 1 or study.depths_skipped:
        lines += ["", "each depth alone (b(path length | scheme, loss) [95% CI], permutation p):"]
        lines += [f"  L={L:<3}" + _compact(rs_) for L, rs_ in study.by_depth.items()]
        lines += [f"  {line}" for line in study.depths_skipped]
    if study.doses or study.doses_skipped:
        lines += ["", "the dose, inside each dosed scheme and depth (b(path length | loss) "
                  "across its doses and seeds [95% CI], permutation p):"]  # fmt: skip
        for (s, L), rs_ in study.doses.items():
            doses = ",".join(f"{d:g}" for d in cfg.doses_of(s))
            lines.append(f"  {s} L={L} ({DOSE_NAMES[s]} {doses}): " + _compact(rs_))
        lines += [f"  {line}" for line in study.doses_skipped]
    if study.across:
        lines += ["", "across depths (secondary: measures comparable across depths, no depth "
                  "effect; b(k_frac | scheme, loss) of sum_dce [95% CI], "
                  "permutation p):"]  # fmt: skip
        lines.append("  " + _compact(study.across))
    lines += ["", *curse_lines(study)]
    lines.append("")
    lines += [r.sentence for r in results]
    lines.append("")
    flags = read_again(cfg, text)
    lines.append("the checkpoints nearest each level (first training seed); read one again with "
                 f"resgrad paths CKPT {flags}, and resgrad lesion CKPT {flags} --what "
                 f"block,delete --k 2 --samples {cfg.samples}:")  # fmt: skip
    lines += [f"  level {r.level:g}: {_nearest(r)}" for r in results]
    return "\n".join(lines) + "\n"


DOSE_NAMES = {"rezero": "alpha0", "ln-scaling": "p"}
CLAIM = (
    "at equal loss, a model whose gradient travels shorter paths loses less when a block is deleted"
)


def _p(r) -> str:
    """A result's permutation p (a level's or a profile's), or that it has none."""
    return f"p {r.calibration.p_value:.3f}" if r.calibration else "uncalibrated"


def _table(results: Sequence[LevelResult], b: str) -> list[str]:
    """The answer's table: a row per level, each column saying what it holds fixed."""
    head = (f"{'level':>7} | {'models':>6} | {'rho(k, cost)':>12} | {'rho(k, cost | loss)':>19} | "
            f"{b:>57} | {'perm p':>6} | verdict")  # fmt: skip
    lines = [head, "-" * len(head)]
    for r in results:
        b, lo, hi = r.path_coef
        ci = f"{b:+.4f} [{lo:+.4f}, {hi:+.4f}]"
        p = f"{r.calibration.p_value:.3f}" if r.calibration else "-"
        lines.append(f"{r.level:>7.4g} | {r.models:>6} | {r.spearman:>+12.3f} | "
                     f"{r.partial:>+19.3f} | {ci:>57} | {p:>6} | {r.verdict}")  # fmt: skip
    return lines


def _compact(results: Sequence[LevelResult]) -> str:
    """A view's verdicts on one line: at each level the coefficient, interval, p and word."""
    return "; ".join(f"{r.level:g}: {r.path_coef[0]:+.4f} [{r.path_coef[1]:+.4f}, "
                     f"{r.path_coef[2]:+.4f}] {_p(r)} {r.verdict}" for r in results)  # fmt: skip


def recipe_lines(study: Study) -> list[str]:
    """How the models trained (the pilot's choice of learning rate) and which were left
    out by the rule, and why."""
    cfg = study.cfg
    lines = []
    if study.pilot:
        lines.append(f"recipe: {cfg.max_iters} steps at each scheme and depth's learning rate, "
                     f"the lowest final validation loss of a {cfg.pilot_iters}-step pilot "
                     "(seed unused by the study):")  # fmt: skip
        lines += pilot_lines(study.pilot, study.lrs)
    else:
        lines.append(f"recipe: {cfg.max_iters} steps at learning rate {cfg.lrs[0]:g} (given)")
    rule = (f"left out: a model that diverged, or whose lowest loss stays above the unigram "
            f"plateau {study.plateau:.3f} less {PLATEAU_MARGIN:g}")  # fmt: skip
    if not cfg.plateau_rule:
        rule += " (--quick: the plateau part not applied; its models are too small to leave it)"
    gone = study.left_out
    lines.append(rule + (": none" if not gone else f": {len(gone)}"))
    lines += [f"  {ModelKey(*k).label}: {why}" for k, why in gone.items()]
    return lines


def curse_lines(study: Study) -> list[str]:
    """The curse of depth: per (scheme, depth, dose), the halves' verdict at each level, and
    both profiles at the lowest level (most trained)."""
    if not study.profiles and not study.profiles_skipped:
        return []
    lines = [f"the curse of depth: {CURSE_QUESTION}? (supported: the later half cheaper; "
             "gap = later less earlier half, in nats [95% CI over seeds], permutation p "
             "against each model's blocks shuffled)"]  # fmt: skip
    groups: dict[str, list] = {}
    for r in study.profiles:
        groups.setdefault(r.label, []).append(r)
    for label, rs_ in groups.items():
        lines.append(f"  {label}: " + "; ".join(
            f"{r.level:g}: {r.gap[0]:+.4f} [{r.gap[1]:+.4f}, {r.gap[2]:+.4f}] "
            f"{_p(r)} {r.verdict}"
            for r in rs_))  # fmt: skip
    lines += [f"  {line}" for line in study.profiles_skipped]
    low = min(study.levels)
    lines.append(f"  profiles at loss {low:g}, block 0 first: one-block lesion cost (nats) | "
                 "share of the gradient through the block's branches")  # fmt: skip
    for r in study.profiles:
        if r.level == low:
            cost = " ".join(f"{v:.3f}" for v in r.lesion)
            share = " ".join(f"{v:.2f}" for v in r.branch)
            lines.append(f"    {r.label}: {cost} | {share}")
    return lines


def _json(study: Study, command: str) -> dict:
    cfg = study.cfg
    return {
        "study": describe(cfg, len(study.trajs) + len(study.left_out)), "command": command,
        "claim": CLAIM, "plateau": study.plateau,
        "pilot": study.pilot,
        "lrs": [{"scheme": s, "depth": L, "lr": lr} for (s, L), lr in study.lrs.items()],
        "left_out": [{**ModelKey(*k)._asdict(), "why": why} for k, why in study.left_out.items()],
        "levels": list(study.levels),
        "phases": [phase(lv, study.plateau) for lv in study.levels],
        "results": [r.record() for r in study.results],
        "by_depth": {str(L): [r.record() for r in rs_] for L, rs_ in study.by_depth.items()},
        "depths_skipped": study.depths_skipped,
        "doses": [{"scheme": s, "depth": L, "doses": list(cfg.doses_of(s)),
                   "results": [r.record() for r in rs_]} for (s, L), rs_ in study.doses.items()],
        "doses_skipped": study.doses_skipped,
        "across_depths": [r.record() for r in study.across],
        "curse_of_depth": [r.record() for r in study.profiles],
        "curse_skipped": study.profiles_skipped,
        "points": [p for r in study.results for p in r.point_records()],
    }  # fmt: skip


def evidence(results: Sequence[LevelResult], cfg: RobustnessConfig) -> str:
    """How strong the table's evidence is, under it: the training seeds and the distinct
    resamples a bootstrap of them can draw, the resamples drawn, the calibration (how often
    the interval alone, and the verdict's rule, call a shuffle with nothing there), and the
    widest gap between a level and the checkpoints that bracket it (interpolated over);
    ``--quick``'s verdicts are a smoke test."""
    seeds, r0 = results[0].seeds, results[0]
    # each model's value at a level is interpolated between the checkpoints that bracket it
    gap = max((abs(p.before.loss - p.after.loss) for r in results for p in r.points), default=0.0)
    line = (f"evidence: {seeds} training seeds ({', '.join(map(str, cfg.seeds))}), "
            f"{distinct_resamples(seeds)} distinct bootstrap resamples of them ({r0.resamples} "
            f"drawn); levels interpolated between checkpoints at most {gap:.3f} nats apart "
            "(b: lesion cost per unit of mean path length k)")  # fmt: skip
    cals = [r.calibration for r in results if r.calibration]
    if cals:
        line += (f"; calibration, lesion costs shuffled within (scheme, depth) "
                 f"{cals[0].permutations} times a level: the interval alone excludes 0 in "
                 f"{np.mean([c.interval_rate for c in cals]):.0%} of them, the verdict's rule "
                 f"(interval and p < 0.05) in {np.mean([c.rule_rate for c in cals]):.0%} "
                 "(nominal 5%)")  # fmt: skip
    if cfg.smoke:
        line += "; --quick: a smoke test of the machinery, its verdicts are not evidence"
    return line
