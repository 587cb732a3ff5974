"""The equal-loss study read whole: the models' trajectories, the rule that leaves a model out,
the levels and their phases, and every view of the question at them.

The views, each at every level, each verdict calibrated
(:func:`~resgrad.lab.robustness.regression.calibrate`):

- **within depth, pooled** (the answer): lesion cost ``block_dce`` on path length ``mean_k``
  with scheme and depth as fixed effects, so that only within-depth evidence counts;
- **each depth alone**;
- **the dose**: inside each dosed scheme and depth, the slope across its doses, the only
  manipulation of path length that holds scheme and depth fixed;
- **across depths** (secondary): the measures made comparable across depths, ``sum_dce`` on
  ``k_frac``, with no depth effect;
- **the curse of depth** (:mod:`resgrad.lab.robustness.profiles`): block by block, which
  blocks cost what to delete, beside their share of the gradient.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from resgrad.formats.atomic import atomic_write_text
from resgrad.lab.robustness.experiment import METRICS, ROW_FIELDS, RobustnessConfig, run_cells
from resgrad.lab.robustness.levels import ModelKey, Trajectory, choose_levels, common_range
from resgrad.lab.robustness.profiles import ProfileResult, both_profiles, curse_of_depth
from resgrad.lab.robustness.recipe import left_out
from resgrad.lab.robustness.stats import LevelResult, analyse, by_depth, dose_response

__all__ = ["LEVELS_ABOVE", "Study", "equal_loss", "read_study", "study_levels", "trajectories"]

# the levels span the range every model reaches from its bottom up to this far above the
# unigram plateau: the learning phase and the plateau, with a little of the descent to it;
# higher, near the loss at initialization, the models differ by their init alone
LEVELS_ABOVE = 0.3


class Study(NamedTuple):
    """The study read: its models, what was left out and why, its levels, every view."""

    cfg: RobustnessConfig
    trajs: list[Trajectory]  # the models analysed
    left_out: dict[tuple, str]  # (scheme, depth, dose, seed) -> why
    plateau: float  # nats: the unigram plateau of the training split
    pilot: list[dict]  # the pilot models' rows
    lrs: dict[tuple[str, int], float]  # (scheme, depth) -> the learning rate it trained at
    levels: tuple[float, ...]
    results: list[LevelResult]  # within depth, pooled: the answer
    by_depth: dict[int, list[LevelResult]]
    depths_skipped: list[str]
    doses: dict[tuple[str, int], list[LevelResult]]
    doses_skipped: list[str]
    across: list[LevelResult]  # sum_dce on k_frac, no depth effect (none at one depth)
    profiles: list[ProfileResult]
    profiles_skipped: list[str]


def trajectories(rows: Sequence[dict], out_dir: str = ".") -> list[Trajectory]:
    """The rows of :func:`~resgrad.lab.robustness.experiment.run_cells` as one
    :class:`Trajectory` per model, by iteration: :data:`METRICS` and, where the rows hold
    them, the per-block profiles."""
    by: dict[ModelKey, list[dict]] = {}
    for r in rows:
        key = ModelKey(r["scheme"], int(r["depth"]), float(r["dose"]), int(r["seed"]))
        by.setdefault(key, []).append(r)
    out = []
    for key, rs in by.items():
        rs = sorted(rs, key=lambda r: int(r["iteration"]))
        names = [*METRICS, *both_profiles(key.depth)]
        names = [m for m in names if all(m in r for r in rs)]
        out.append(Trajectory(
            key, np.array([int(r["iteration"]) for r in rs]),
            np.array([float(r["loss"]) for r in rs]),
            {m: np.array([float(r[m]) for r in rs]) for m in names},
            tuple(os.path.join(out_dir, r["checkpoint"]) for r in rs),
        ))  # fmt: skip
    return out


def study_levels(cfg: RobustnessConfig, trajs: Sequence[Trajectory], plateau: float):
    """The levels: ``cfg.levels``, or ``cfg.n_levels`` evenly spaced inside the range every
    model reaches, from its bottom up to :data:`LEVELS_ABOVE` over the plateau (the whole
    range where it ends lower)."""
    if cfg.levels:
        return tuple(cfg.levels)
    lo, hi = common_range(trajs)
    top = min(hi, plateau + LEVELS_ABOVE)
    return choose_levels(trajs, cfg.n_levels, part=(top - lo) / (hi - lo) if top > lo else 1.0)


def read_study(cfg: RobustnessConfig, rows: Sequence[dict], out_dir: str, plateau: float,
               pilot=(), lrs=None) -> Study:  # fmt: skip
    """Every view of the study from its rows (those of
    :func:`~resgrad.lab.robustness.experiment.run_cells`).

    Raises
    ------
    ValueError
        Levels outside the range every model reaches; too few models or seeds left.
    """
    gone = left_out(rows, plateau)
    if not cfg.plateau_rule:  # --quick's models are too small to leave the plateau
        gone = {k: why for k, why in gone.items() if why.startswith("diverged")}
    trajs = [t for t in trajectories(rows, out_dir) if tuple(t.model) not in gone]
    if not trajs:
        raise ValueError(f"every model of the study was left out ({len(gone)}: "
                         f"{next(iter(gone.values()))}); expected models that trained: give "
                         "more --max-iters, or other --lrs")  # fmt: skip
    levels = study_levels(cfg, trajs, plateau)
    kw = dict(B=cfg.bootstrap, permutations=cfg.permutations)
    results = analyse(trajs, levels, **kw)
    depths, depths_skipped = by_depth(trajs, levels, **kw)
    doses, doses_skipped = dose_response(trajs, levels, **kw)
    across = []
    if len({t.model.depth for t in trajs}) > 1:
        across = analyse(trajs, levels, "k_frac", "sum_dce", depth_effect=False, **kw)
    profiles, profiles_skipped = curse_of_depth(trajs, levels, **kw)
    return Study(cfg, trajs, gone, plateau, list(pilot), dict(lrs or {}), tuple(levels),
                 results, depths, depths_skipped, doses, doses_skipped, across, profiles,
                 profiles_skipped)  # fmt: skip


def equal_loss(cfg: RobustnessConfig, out_dir: str, **grid) -> Study:
    """The whole study: :func:`~resgrad.lab.robustness.experiment.run_cells` (``grid``: its
    keyword arguments), every row written to ``out_dir/checkpoints.csv`` (and the validation
    text the studies read, to ``validation.txt``), then :func:`read_study`.

    Raises
    ------
    ValueError
        As :func:`run_cells`; or levels outside the range every model reaches (the models
        stay trained: a rerun with other levels trains nothing).
    """
    from resgrad.formats.records import to_csv

    runs = run_cells(cfg, out_dir, **grid)
    deepest = max(cfg.depths)
    fields = [*ROW_FIELDS, *both_profiles(deepest)]
    table = [{f: r.get(f, "") for f in fields} for r in runs.rows]  # shallower: blank blocks
    atomic_write_text(os.path.join(out_dir, "checkpoints.csv"), to_csv(table, fields))
    return read_study(cfg, runs.rows, out_dir, runs.plateau, runs.pilot, runs.lrs)
