"""Equal-loss statistics: at one validation loss, does a model whose gradient travels longer
paths lose more when a block is deleted?

At each level (:mod:`resgrad.lab.robustness.levels`) every model gives one row: its path
length (``mean_k``, ...) and its lesion cost (``block_dce``, ...), both interpolated to the
level, the actual loss of its nearest checkpoint, its scheme and its training seed. Across
the models: :func:`spearman` and :func:`partial_spearman` (given that loss), the regression
lesion cost ~ path length + loss + scheme (:func:`regress`), with 95% intervals from
resampling whole training seeds (:func:`bootstrap`), and the :func:`verdict`, which can go
against the claim as readily as for it. :func:`analyse` does all of it at every level.

Legend: M = models (rows), P = regressors, Q = controls, C = clusters (training seeds),
B = bootstrap resamples, N = levels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from resgrad.lab.robustness.levels import Point, Trajectory, at_level, check_levels, model_label
from resgrad.lab.robustness.regression import (
    CONFIDENCE,
    Calibration,
    _calibration_record,
    _vector,
    bootstrap,
    calibrate,
    distinct_resamples,
    regress,
)

__all__ = [
    "VERDICTS",
    "LevelResult",
    "analyse",
    "by_depth",
    "design",
    "dose_response",
    "partial_spearman",
    "ranks",
    "spearman",
    "verdict",
]

VERDICTS = ("supported", "contradicted", "not resolved at this size")


# --------------------------------------------------------------------------- rank correlations


def _points(*arrays: np.ndarray) -> int:
    n = len(arrays[0])
    if any(len(a) != n for a in arrays):
        raise ValueError(f"point counts {[len(a) for a in arrays]} differ; expected one each")
    if n < 3:
        raise ValueError(f"{n} point(s); at least 3 are needed for a rank correlation")
    return n


def ranks(x) -> np.ndarray:
    """1-based ranks of ``x`` (M,), ties given the mean of the ranks they span:
    ranks([10, 20, 20, 30]) = [1, 2.5, 2.5, 4]."""
    x = np.asarray(x, dtype=np.float64)  # (M,)
    order = np.argsort(x, kind="stable")  # (M,)
    xs = x[order]
    new = np.r_[True, xs[1:] != xs[:-1]]  # (M,) where a run of equal values starts
    first = np.flatnonzero(new)  # (G,) each run's first sorted position
    last = np.r_[first[1:], len(x)] - 1  # (G,) and its last
    out = np.empty(len(x))
    out[order] = ((first + last) / 2 + 1)[np.cumsum(new) - 1]
    return out


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson's r of (M,) and (M,); NaN where either is constant."""
    a, b = a - a.mean(), b - b.mean()
    den = np.sqrt((a @ a) * (b @ b))
    return float(a @ b / den) if den > 0 else float("nan")


def spearman(x, y) -> float:
    """Spearman's rho of ``x`` (M,) and ``y`` (M,): Pearson's r of their :func:`ranks`
    (average ranks for ties); NaN where either is constant.

    Raises
    ------
    ValueError
        Fewer than 3 points; unequal lengths; a value not finite.
    """
    x, y = _vector(x, "x"), _vector(y, "y")
    _points(x, y)
    return _pearson(ranks(x), ranks(y))


def _residual(r: np.ndarray, A: np.ndarray) -> np.ndarray:
    """``r`` (M,) less its least-squares fit on the columns of ``A`` (M, 1 + Q); exact 0
    where the fit leaves only rounding."""
    res = r - A @ np.linalg.lstsq(A, r, rcond=None)[0]  # (M,)
    scale = np.abs(r - r.mean()).max()
    return np.zeros_like(res) if np.abs(res).max() <= 1e-10 * max(scale, 1.0) else res


def partial_spearman(x, y, z) -> float:
    """Rank partial correlation of ``x`` (M,) and ``y`` (M,) given ``z`` (M,) or (M, Q):
    Pearson's r of the residuals of rank(x) and rank(y), each regressed (with an intercept)
    on the ranks of z's columns. About 0 where x and y are related only through z; NaN
    where a residual is 0 (x or y a monotone function of z).

    Raises
    ------
    ValueError
        Fewer than 3 points; unequal lengths; a value not finite.
    """
    x, y = _vector(x, "x"), _vector(y, "y")
    z = np.asarray(z, dtype=np.float64)
    z = z[:, None] if z.ndim == 1 else z  # (M, Q)
    if z.ndim != 2 or not np.isfinite(z).all():
        raise ValueError(f"z has shape {z.shape} or a value not finite; expected finite "
                         "(M,) or (M, Q)")  # fmt: skip
    _points(x, y, z)
    A = np.column_stack([np.ones(len(x)), *[ranks(c) for c in z.T]])  # (M, 1 + Q)
    return _pearson(_residual(ranks(x), A), _residual(ranks(y), A))


# --------------------------------------------------------------------------- the verdict


def verdict(
    coef_ci: tuple[float, float, float],
    level: float,
    rho: float,
    partial: float,
    models: int,
    seeds: int,
    path_metric: str = "mean_k",
    lesion_metric: str = "block_dce",
    calibration: Calibration | None = None,
) -> tuple[str, str]:
    """The claim's verdict at one level, from the path-length coefficient
    ``coef_ci`` = (coefficient, lo, hi) of lesion cost ~ path length + loss + scheme.

    - ``"supported"``: the 95% interval lies above 0 (longer paths, larger lesion cost:
      shorter paths make the model more robust);
    - ``"contradicted"``: it lies below 0 (longer paths, smaller lesion cost);
    - ``"not resolved at this size"``: it contains 0 (or the coefficient is NaN: dropped),
      or, with a ``calibration``, its permutation test does not reject (p >= 1 -
      :data:`CONFIDENCE`): an interval from few seeds excludes 0 too often on its own.

    Returns
    -------
    (word, sentence)
        ``word`` one of :data:`VERDICTS`; ``sentence`` one line: the level, the word, the
        coefficient and its interval, the Spearman and partial correlations, the counts.
    """
    coef, lo, hi = (float(v) for v in coef_ci)
    if lo > 0:
        word = VERDICTS[0]
    elif hi < 0:
        word = VERDICTS[1]
    else:  # contains 0, or NaN
        word = VERDICTS[2]
    if calibration is not None and not calibration.p_value < 1 - CONFIDENCE:
        word = VERDICTS[2]
    sentence = (
        f"loss {level:.4g}: {word}: {lesion_metric} ~ {path_metric} coefficient {coef:+.4g} "
        f"(95% interval {lo:+.4g}..{hi:+.4g}), Spearman {rho:+.3f}, partial Spearman given "
        f"loss {partial:+.3f}; {models} models, {seeds} seeds"
    )
    if calibration is not None:
        sentence += f"; {calibration.says()}"
    return word, sentence


# --------------------------------------------------------------------------- every level


class LevelResult(NamedTuple):
    """The study at one loss level: every model's
    :class:`~resgrad.lab.robustness.levels.Point`, the correlations, the regression and its
    intervals, the verdict."""

    level: float
    path_metric: str
    lesion_metric: str
    points: tuple[Point, ...]  # (M,) interpolated
    spearman: float  # of path length and lesion cost across every model
    partial: float  # the same, given the nearest checkpoints' actual loss
    names: tuple[str, ...]  # "intercept", path_metric, "loss", "scheme=<s>", ...
    coef: tuple[float, ...]  # OLS, NaN where a regressor was dropped
    lo: tuple[float, ...]  # 95% bootstrap interval over training seeds
    hi: tuple[float, ...]
    models: int
    seeds: int
    resamples: int  # bootstrap resamples of the training seeds
    verdict: str  # one of VERDICTS
    sentence: str
    calibration: Calibration | None = None  # None: not calibrated

    @property
    def path_coef(self) -> tuple[float, float, float]:
        """(coefficient, lo, hi) of path length."""
        j = self.names.index(self.path_metric)
        return self.coef[j], self.lo[j], self.hi[j]

    def record(self) -> dict:
        """A flat dict: level, metrics, counts, correlations, verdict, then each
        coefficient ``b_<name>`` with ``b_<name>_lo`` and ``b_<name>_hi``, then the sentence."""
        out = {"level": self.level, "path_metric": self.path_metric,
               "lesion_metric": self.lesion_metric, "models": self.models,
               "seeds": self.seeds, "bootstrap_resamples": self.resamples,
               "distinct_resamples": distinct_resamples(self.seeds),
               "spearman": self.spearman,
               "partial_spearman": self.partial, "verdict": self.verdict,
               **_calibration_record(self.calibration)}  # fmt: skip
        for n, b, lo, hi in zip(self.names, self.coef, self.lo, self.hi):
            out |= {f"b_{n}": b, f"b_{n}_lo": lo, f"b_{n}_hi": hi}
        out["sentence"] = self.sentence
        return out

    def point_records(self) -> list[dict]:
        """Each model's :meth:`~resgrad.lab.robustness.levels.Point.record` at this level."""
        return [p.record() for p in self.points]


def design(
    points: Sequence[Point],
    path_metric: str,
    lesion_metric: str,
    schemes: Sequence[str],
    depths: Sequence[int] = (),
) -> tuple[np.ndarray, np.ndarray, tuple[str, ...], np.ndarray]:
    """The regression's rows at one level: (y (M,), X (M, P), names (P,), seeds (M,)).

    y is each point's lesion cost, X its path length, then the LOSS OF ITS NEAREST KEPT
    CHECKPOINT as measured (at the level itself every point's loss is the level, a constant),
    then one indicator per scheme but the first of ``schemes`` (the reference), then one
    per depth but the first of ``depths``: DEPTH AS A FIXED EFFECT, so that the path-length
    coefficient combines only within-depth evidence. Pooled without it, depth drives path
    length up and the per-block lesion cost down (a block is a smaller share of a deeper
    model), and a claim true at every depth reads as contradicted
    (tests/lab/test_robustness_stats.py, the depth confound).

    Raises
    ------
    ValueError
        A point without a finite path length or lesion cost.
    """
    for p in points:
        for m in (path_metric, lesion_metric):
            if not np.isfinite(p.metrics[m]):
                raise ValueError(f"model {model_label(p.model)} has no finite {m} at loss "
                                 f"{p.level:.4g} (iterations {p.before.iteration} and "
                                 f"{p.after.iteration}); expected measured values")  # fmt: skip
    y = np.array([p.metrics[lesion_metric] for p in points])  # (M,)
    path = np.array([p.metrics[path_metric] for p in points])  # (M,)
    loss = np.array([p.nearest.loss for p in points])  # (M,)
    scheme = np.array([p.model[0] for p in points])  # (M,)
    depth = np.array([p.model[1] for p in points])  # (M,)
    dummies = [(scheme == s).astype(np.float64) for s in schemes[1:]]  # (S-1,) of (M,)
    dummies += [(depth == d).astype(np.float64) for d in depths[1:]]  # (D-1,) of (M,)
    X = np.column_stack([path, loss, *dummies])  # (M, P)
    names = (path_metric, "loss", *[f"scheme={s}" for s in schemes[1:]],
             *[f"depth={d}" for d in depths[1:]])  # fmt: skip
    return y, X, names, np.array([p.model[3] for p in points])


def _check_models(trajs: Sequence[Trajectory], path_metric: str, lesion_metric: str) -> None:
    seen = set()
    for t in trajs:
        if not (isinstance(t.model, tuple) and len(t.model) == 4):
            raise ValueError(f"model {t.model!r} is not a (scheme, depth, dose, seed) key; "
                             "expected a ModelKey")  # fmt: skip
        if t.model in seen:
            raise ValueError(f"model {t.name} is given twice; each model counts once")
        seen.add(t.model)
        for m in (path_metric, lesion_metric):
            if m not in t.metrics:
                raise ValueError(f"model {t.name} has no metric {m!r}; expected one of "
                                 f"{sorted(t.metrics)}")  # fmt: skip
    if path_metric == lesion_metric:
        raise ValueError(f"path and lesion metric are both {path_metric!r}; expected two")
    if len(trajs) < 3:
        raise ValueError(f"{len(trajs)} model(s); at least 3 are needed for a rank correlation")
    seeds = {t.model[3] for t in trajs}
    if len(seeds) < 2:
        raise ValueError(f"the models come from {len(seeds)} training seed(s); at least 2 "
                         "are needed to resample seeds")  # fmt: skip


def analyse(
    trajs: Sequence[Trajectory],
    levels: Sequence[float],
    path_metric: str = "mean_k",
    lesion_metric: str = "block_dce",
    B: int = 1000,
    seed: int = 0,
    permutations: int = 0,
    depth_effect: bool = True,
) -> list[LevelResult]:
    """The equal-loss study at each of ``levels``, one :class:`LevelResult` each.

    At each level: every model :func:`~resgrad.lab.robustness.levels.at_level`
    (interpolated); Spearman's rho of path length and lesion cost across the models; the
    partial rho given the nearest checkpoints' actual loss; OLS of lesion cost on path
    length, that loss, scheme and depth (the first scheme met and the shallowest depth are
    the references; depth a fixed effect, see :func:`design`) with :func:`bootstrap`
    intervals over training seeds (the same ``seed`` at every level); and the
    :func:`verdict`. :func:`by_depth` gives the same at each depth alone.
    ``depth_effect`` False leaves depth out of the regression: only for a path and a lesion
    measure made comparable across depths (``k_frac``, ``sum_dce``), a secondary view.

    ``permutations`` > 0 calibrates each verdict (:func:`calibrate`): the lesion costs
    shuffled that many times among the models of each (scheme, depth) stratum; the verdict
    then needs the permutation test to reject as well as the interval to exclude 0, and
    says how often its rule, and the interval alone, call a shuffle (nothing there).

    Raises
    ------
    ValueError
        Levels :func:`~resgrad.lab.robustness.levels.check_levels` refuses; a model given
        twice, without a (scheme, depth, dose, seed) key or without either metric; a
        point without finite values; fewer than 3 models or 2 training seeds.
    """
    levels = check_levels(trajs, levels)
    _check_models(trajs, path_metric, lesion_metric)
    schemes = list(dict.fromkeys(t.model[0] for t in trajs))
    # depth_effect False: no depth indicators, for measures made comparable across depths
    depths = sorted({t.model[1] for t in trajs})[: None if depth_effect else 1]
    seeds = len({t.model[3] for t in trajs})
    out = []
    for level in levels:
        points = tuple(at_level(t, level) for t in trajs)
        y, X, names, clusters = design(points, path_metric, lesion_metric, schemes, depths)
        rho = spearman(X[:, 0], y)
        partial = partial_spearman(X[:, 0], y, X[:, 1])
        coef = regress(y, X, names)
        ci = bootstrap(y, X, names, clusters, B=B, seed=seed)
        keys = tuple(coef)
        cal = None
        if permutations:
            strata = [(p.model[0], p.model[1]) for p in points]
            cal = calibrate(y, X, clusters, strata, int(B), seed, permutations)
        word, sentence = verdict((coef[path_metric], *ci[path_metric]), level, rho, partial,
                                 len(points), seeds, path_metric, lesion_metric, cal)  # fmt: skip
        out.append(LevelResult(level, path_metric, lesion_metric, points, rho, partial, keys,
                               tuple(coef.values()), tuple(ci[k][0] for k in keys),
                               tuple(ci[k][1] for k in keys), len(points), seeds, int(B),
                               word, sentence, cal))  # fmt: skip
    return out


def by_depth(
    trajs: Sequence[Trajectory], levels: Sequence[float], **analysis
) -> tuple[dict[int, list[LevelResult]], list[str]]:
    """:func:`analyse` (``analysis``: its settings) within each depth alone:
    ({depth: its results}, skipped), where
    ``skipped`` says, a line each, which depth has too few models (3) or training seeds (2)
    for its test; such a depth is left out, never merged into another."""
    out, skipped = {}, []
    for L in sorted({t.model[1] for t in trajs}):
        sub = [t for t in trajs if t.model[1] == L]
        seeds = len({t.model[3] for t in sub})
        if len(sub) < 3 or seeds < 2:
            skipped.append(f"depth {L}: {len(sub)} model(s) from {seeds} training seed(s); "
                           "a verdict needs at least 3 models and 2 seeds: skipped")  # fmt: skip
            continue
        out[L] = analyse(sub, levels, **analysis)
    return out, skipped


def dose_response(
    trajs: Sequence[Trajectory], levels: Sequence[float], **analysis
) -> tuple[dict[tuple[str, int], list[LevelResult]], list[str]]:
    """The dose as an experiment: :func:`analyse` (``analysis``: its settings) within each
    (scheme, depth) whose models were given 2 or more doses (rezero's alpha at init,
    ln-scaling's exponent), the only manipulation of path length that holds scheme and
    depth fixed: the slope of lesion cost on path length across the doses and seeds, its
    interval over training seeds, its verdict. ({(scheme, depth): results}, skipped), where
    ``skipped`` names, a line each, a dosed stratum with too few models (3) or seeds (2)."""
    out, skipped = {}, []
    groups = dict.fromkeys((t.model[0], t.model[1]) for t in trajs)
    for scheme, L in groups:
        sub = [t for t in trajs if (t.model[0], t.model[1]) == (scheme, L)]
        doses = sorted({t.model[2] for t in sub})
        if len(doses) < 2:
            continue  # no dose given: nothing to test
        seeds = len({t.model[3] for t in sub})
        if len(sub) < 3 or seeds < 2:
            skipped.append(f"{scheme} L={L}: {len(sub)} model(s) from {seeds} training "
                           "seed(s); a dose's slope needs at least 3 models and 2 seeds: "
                           "skipped")  # fmt: skip
            continue
        out[scheme, L] = analyse(sub, levels, **analysis)
    return out, skipped
