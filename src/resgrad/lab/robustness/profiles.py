"""The curse of depth, beside the paths: block by block, at equal loss, what deleting a block
costs and how much of the gradient passes through its branch.

Sun et al. ("The Curse of Depth in Large Language Models", arXiv:2502.05795, 2025) report
that in pre-LN models the deeper blocks act close to the identity and cost little to delete,
and that LayerNorm Scaling (ln-scaling: each block's LayerNorm output times 1/l^p) makes
them contribute. That is the lesson's identity path seen from the forward side. At each
loss level, for each (scheme, depth, dose):

- the lesion profile: block l's one-block lesion cost ``dce_b<l>`` (the change in
  cross-entropy with block l deleted), mean over the training seeds, with its 95% interval;
- beside it the branch profile: ``branch_b<l>``, the share of the gradient below block l's
  sublayers that came through their branches rather than their skips
  (:meth:`~resgrad.lab.paths.exact.PathSplit.branch_share`, mean of its two sublayers);
- the question "does the later half of the blocks cost less to delete than the earlier
  half?": each model's gap, the mean cost of its later half less its earlier half's (the
  middle block of an odd depth in neither), bootstrapped over training seeds, tested against
  its own null (each model's block order shuffled,
  :func:`~resgrad.lab.robustness.regression.against_null`) and given a verdict as the
  main question's is: "supported" where the later half is cheaper.

Legend: M = models of one group (its seeds), L = blocks, R = shuffles.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from resgrad.lab.robustness.levels import Trajectory, at_level, check_levels
from resgrad.lab.robustness.regression import (
    CONFIDENCE,
    Calibration,
    _calibration_record,
    _intervals,
    against_null,
)

__all__ = ["BRANCH", "CLAIM", "LESION", "QUESTION", "ProfileResult", "both_profiles",
           "curse_of_depth", "gap", "profile_metrics"]  # fmt: skip

LESION = "dce_b"  # dce_b0 .. dce_b<L-1>: block l's one-block lesion cost
BRANCH = "branch_b"  # branch_b0 .. : block l's share of the gradient through its branches
CLAIM = "the later half of the blocks costs less to delete than the earlier half"
QUESTION = "does the later half of the blocks cost less to delete than the earlier half"


def profile_metrics(prefix: str, L: int) -> list[str]:
    """The metric names of a profile of ``L`` blocks: ``prefix`` + 0 .. L - 1."""
    return [f"{prefix}{b}" for b in range(L)]


def both_profiles(L: int) -> list[str]:
    """Every profile metric of a model of ``L`` blocks: the lesion profile, then the branch
    profile (the names a row of the study holds beside its summary metrics)."""
    return profile_metrics(LESION, L) + profile_metrics(BRANCH, L)


def gap(profiles: np.ndarray) -> np.ndarray:
    """(M,) each row of ``profiles`` (M, L): the mean of its later half less the mean of its
    earlier half (blocks L - L // 2 .. L - 1 against 0 .. L // 2 - 1; an odd depth's middle
    block in neither). Negative: the deeper blocks matter less.

    Raises
    ------
    ValueError
        Fewer than 2 blocks.
    """
    profiles = np.asarray(profiles, dtype=np.float64)
    L = profiles.shape[1]
    if L < 2:
        raise ValueError(f"a profile of {L} block(s) has no halves; expected at least 2")
    h = L // 2
    return profiles[:, L - h :].mean(axis=1) - profiles[:, :h].mean(axis=1)


class ProfileResult(NamedTuple):
    """One (scheme, depth, dose) at one level: both profiles and the halves' verdict."""

    level: float
    scheme: str
    depth: int
    dose: float
    seeds: int
    lesion: tuple[float, ...]  # (L,) mean over the seeds
    lesion_lo: tuple[float, ...]  # (L,) 95% interval over the seeds
    lesion_hi: tuple[float, ...]
    branch: tuple[float, ...]  # (L,)
    branch_lo: tuple[float, ...]
    branch_hi: tuple[float, ...]
    gap: tuple[float, float, float]  # the lesion cost's later-less-earlier gap, lo, hi
    branch_gap: tuple[float, float, float]  # the branch share's
    verdict: str
    calibration: Calibration | None

    @property
    def label(self) -> str:
        """``"ln-scaling L=12 dose=0.5"``."""
        return f"{self.scheme} L={self.depth} dose={self.dose:g}"

    def sentence(self) -> str:
        """One line: the level, the group, the verdict, both gaps, the calibration."""
        g, lo, hi = self.gap
        b, blo, bhi = self.branch_gap
        out = (f"loss {self.level:.4g}, {self.label}: {self.verdict}: later less earlier half, "
               f"lesion cost {g:+.4f} [{lo:+.4f}, {hi:+.4f}], branch share {b:+.3f} "
               f"[{blo:+.3f}, {bhi:+.3f}]; {self.seeds} seeds")  # fmt: skip
        return out + (f"; {self.calibration.says()}" if self.calibration else "")

    def record(self) -> dict:
        """A flat dict: the group, the verdict, the gaps, the calibration, the profiles."""
        out = {"level": self.level, "scheme": self.scheme, "depth": self.depth,
               "dose": self.dose, "seeds": self.seeds, "verdict": self.verdict,
               "gap": self.gap[0], "gap_lo": self.gap[1], "gap_hi": self.gap[2],
               "branch_gap": self.branch_gap[0], "branch_gap_lo": self.branch_gap[1],
               "branch_gap_hi": self.branch_gap[2],
               **_calibration_record(self.calibration)}  # fmt: skip
        for name in ("lesion", "lesion_lo", "lesion_hi", "branch", "branch_lo", "branch_hi"):
            out[name] = list(getattr(self, name))
        return out


def _word(gap_ci: tuple[float, float, float], cal: Calibration | None) -> str:
    from resgrad.lab.robustness.stats import VERDICTS

    _, lo, hi = gap_ci
    if cal is not None and not cal.p_value < 1 - CONFIDENCE:
        return VERDICTS[2]
    if hi < 0:
        return VERDICTS[0]  # the later half cheaper: the curse of depth
    if lo > 0:
        return VERDICTS[1]
    return VERDICTS[2]


def _mean_ci(Y: np.ndarray, clusters: np.ndarray, B: int, seed: int) -> tuple:
    """(mean, lo, hi) of each column of ``Y`` (M, R) over rows, the interval resampling
    whole ``clusters``: each (R,)."""
    lo, hi = _intervals(Y, np.empty((len(Y), 0)), clusters, B, seed)  # (1, R) each
    return Y.mean(axis=0), lo[0], hi[0]


def _group(trajs, level, key, B, seed, permutations) -> ProfileResult:
    scheme, L, dose = key
    points = [at_level(t, level) for t in trajs]
    lesion = np.array([[p.metrics[m] for m in profile_metrics(LESION, L)] for p in points])
    branch = np.array([[p.metrics[m] for m in profile_metrics(BRANCH, L)] for p in points])
    clusters = np.array([p.model[3] for p in points])  # (M,) the seeds
    lm, llo, lhi = _mean_ci(lesion, clusters, B, seed)  # (L,) each
    bm, blo, bhi = _mean_ci(branch, clusters, B, seed)
    gaps, bgaps = gap(lesion), gap(branch)  # (M,) each
    gm, glo, ghi = _mean_ci(np.column_stack([gaps, bgaps]), clusters, B, seed)  # (2,) each
    cal = None
    if permutations:  # nothing there: each model's blocks in a random order
        rng = np.random.default_rng(seed + 1)
        null = np.stack([gap(rng.permuted(lesion, axis=1)) for _ in range(permutations)], 1)
        cal = against_null(gaps, null, np.empty((len(gaps), 0)), clusters, B, seed, column=0)
    g = (float(gm[0]), float(glo[0]), float(ghi[0]))
    return ProfileResult(
        float(level), scheme, int(L), float(dose), len(set(clusters.tolist())),
        *(tuple(map(float, a)) for a in (lm, llo, lhi, bm, blo, bhi)), g,
        (float(gm[1]), float(glo[1]), float(ghi[1])), _word(g, cal), cal,
    )  # fmt: skip


def curse_of_depth(
    trajs: Sequence[Trajectory],
    levels: Sequence[float],
    B: int = 1000,
    seed: int = 0,
    permutations: int = 0,
) -> tuple[list[ProfileResult], list[str]]:
    """Both profiles and the halves' verdict for every (scheme, depth, dose) at every level:
    (results, by level then group in the models' order; skipped), where ``skipped`` names,
    a line each, a group with fewer than 2 training seeds or 2 blocks, or whose models lack
    a profile (measured before profiles were kept), never merged into another.

    Raises
    ------
    ValueError
        Levels :func:`~resgrad.lab.robustness.levels.check_levels` refuses.
    """
    levels = check_levels(trajs, levels)
    groups: dict[tuple, list[Trajectory]] = {}
    for t in trajs:
        groups.setdefault((t.model[0], t.model[1], t.model[2]), []).append(t)
    usable, skipped = {}, []
    for (scheme, L, dose), ts in groups.items():
        seeds = len({t.model[3] for t in ts})
        names = both_profiles(L)
        why = None
        if L < 2:
            why = f"{L} block(s), no halves to compare"
        elif seeds < 2:
            why = f"{seeds} training seed(s); an interval needs at least 2"
        elif any(m not in t.metrics for t in ts for m in names):
            why = "no per-block profile in its rows"
        if why:
            skipped.append(f"{scheme} L={L} dose={dose:g}: {why}: skipped")
        else:
            usable[scheme, L, dose] = ts
    out = [_group(ts, level, key, int(B), seed, int(permutations))
           for level in levels for key, ts in usable.items()]  # fmt: skip
    return out, skipped
