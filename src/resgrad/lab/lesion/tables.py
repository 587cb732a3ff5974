"""Lesion study, the tables: one row per intervention (or per k), across runs, in a summary.

Legend: S = window seeds, M = metrics, K = random sets of one k, R = runs, L = blocks.

**The sampling interval.** A random kind's k measured on every one of its sets is exact: its
mean has no sampling error. A k with more sets than
:data:`~resgrad.lab.lesion.interventions.EXACT_SETS` is measured on K of them, and its row
carries the half-width of a 95% interval for the mean over all of them
(:func:`sampled_mean`), beside the spread over seeds or runs, which cannot show that
error: every run is measured on the same sets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from resgrad.lab.lesion.interventions import RANDOM, Lesion, population
from resgrad.lab.lesion.measure import StudyResult
from resgrad.lab.study.refusals import INTERVENTIONS_DIFFER, NO_RUN
from resgrad.lab.study.runs import check_comparable

__all__ = [
    "LesionRow",
    "Summary",
    "across_runs",
    "row_keys",
    "rows",
    "sampled_mean",
    "summary",
]

LEVEL = 0.95  # the sampling interval's coverage


# --------------------------------------------------------------------------- tables


class LesionRow(NamedTuple):
    """One intervention (or one k of a random kind): its metrics' mean and std.

    A single intervention: over the window seeds. A random kind's k: over its K sets, each
    averaged over the seeds (``samples`` = K, of the ``sets`` there are). Across runs: over
    the runs, of each run's mean. The std is the sample standard deviation (ddof 1; 0 from
    one value). ``ci`` is the half-width of a k's 95% sampling interval
    (:func:`sampled_mean`): 0 where the k is exact, every one of its sets measured, and
    for a single intervention.
    """

    kind: str
    name: str
    k: int
    layer: int
    samples: int
    metrics: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    sets: int = 1  # the sets of a random kind's k there are (samples == sets: exact)
    ci: tuple[float, ...] = ()  # (M,) the 95% sampling interval's half-width

    @property
    def exact(self) -> bool:
        """Every set measured: the mean has no sampling error."""
        return self.samples >= self.sets

    def get(self, metric: str) -> tuple[float, float]:
        """(mean, std) of one metric."""
        j = self.metrics.index(metric)
        return self.mean[j], self.std[j]

    def record(self) -> dict:
        """A flat dict: kind, name, k, layer, samples, sets, then each metric, its ``_std``
        and its ``_ci`` (the sampling interval's half-width)."""
        out = {"kind": self.kind, "name": self.name, "k": self.k, "layer": self.layer,
               "samples": self.samples, "sets": self.sets}  # fmt: skip
        ci = self.ci or (0.0,) * len(self.metrics)
        for m, a, s, c in zip(self.metrics, self.mean, self.std, ci):
            out[m], out[f"{m}_std"], out[f"{m}_ci"] = float(a), float(s), float(c)
        return out


def row_keys(metric_names: Sequence[str]) -> list[str]:
    """The columns of :meth:`LesionRow.record`."""
    return ["kind", "name", "k", "layer", "samples", "sets",
            *[c for m in metric_names for c in (m, f"{m}_std", f"{m}_ci")]]  # fmt: skip


def _floats(a: np.ndarray) -> tuple[float, ...]:
    return tuple(float(x) for x in a)


def _std(a: np.ndarray, axis: int = 0) -> np.ndarray:
    """Sample standard deviation (ddof 1) along ``axis``; 0 where there is one value."""
    if a.shape[axis] < 2:
        return np.zeros(np.delete(a.shape, axis))
    return a.std(axis=axis, ddof=1)


def sampled_mean(y: np.ndarray, sets: Sequence[tuple[int, ...]] | None, L: int,
                 population: int, level: float = LEVEL) -> tuple:  # fmt: skip
    """The mean over all ``population`` sets of one k, estimated from the K measured ones'
    figures ``y`` (K, M), and the half-width (M,) of its ``level`` interval: two (M,) arrays,
    the plain mean and 0 where every set was measured.

    ``sets`` are the deleted blocks of each, drawn balanced
    (:func:`~resgrad.lab.lesion.interventions.balanced_sets`, distinct), or None for sets drawn
    at random with replacement (``pairs``). The half-width is t(level, dof) sqrt(v / K fpc),
    fpc = 1 - K / population the finite-population correction (1 with replacement), v the
    variance of what the draw leaves to chance. For a balanced draw of K >= 2L sets, y is
    fitted by the blocks' main effects, y ~ sum_{i in set} a_i (least squares); a draw that
    deletes every block equally often leaves no error from them, so v is the residuals'
    variance (dof = K - rank; Deville and Tillé, "Variance approximation under balanced
    sampling", J. Stat. Plan. Inference 128, 2005), and the mean is k mean_i(a_i), the sets'
    mean less what the counts' imbalance of 1 adds (the two are equal where K k / L is
    whole). Otherwise the sets' mean and their sample variance (ddof 1; dof = K - 1), which
    only overstates a balanced draw's error. One set of many: an infinite interval.
    """
    from scipy import stats  # here: scipy.stats takes a moment to import

    K, M = y.shape
    mean = y.mean(axis=0)  # (M,)
    if K >= population:
        return mean, np.zeros(M)
    if K < 2:
        return mean, np.full(M, np.inf)
    fpc = 1.0 if sets is None else 1.0 - K / population
    e, dof = y - mean, K - 1  # (K, M)
    if sets is not None and K >= 2 * L:
        X = np.zeros((K, L))  # (K, L) 1 where the set deletes the block
        for j, s in enumerate(sets):
            X[j, list(s)] = 1.0
        a, _, rank, _ = np.linalg.lstsq(X, y, rcond=None)  # (L, M); rows sum to k: a mean too
        if rank == L:  # every block's effect fitted
            e, dof = y - X @ a, K - rank  # (K, M) what the main effects leave
            mean = len(sets[0]) * a.mean(axis=0)  # (M,) each set deletes k: k mean_i a_i
    v = (e * e).sum(axis=0) / dof  # (M,)
    return mean, stats.t.ppf(0.5 + level / 2, dof) * np.sqrt(v / K * fpc)


def _groups(result: StudyResult) -> dict[tuple[str, int], list[int]]:
    """The lesions of each (random kind, k): their indices in ``result.lesions``."""
    groups: dict[tuple[str, int], list[int]] = {}
    for j, les in enumerate(result.lesions):
        if les.kind in RANDOM:
            groups.setdefault((les.kind, les.k), []).append(j)
    return groups


def _sampled(kind: str, k: int, lesions: Sequence[Lesion], per_set: np.ndarray) -> tuple:
    """:func:`sampled_mean` of one k's sets' (K, M) figures, and the sets there are."""
    L = lesions[0].L
    sets = [les.deleted for les in lesions] if kind == "delete" else None
    n = population(kind, L, k)
    mean, ci = sampled_mean(per_set, sets, L, n)
    return _floats(mean), _floats(ci), n


def rows(result: StudyResult) -> list[LesionRow]:
    """The table: the intact stack, each single intervention (mean and std over the seeds),
    then each k of each random kind (mean and std over its sets, and the sampling interval
    of that mean), in the plan's order."""
    out: list[LesionRow] = []
    zero = (0.0,) * len(result.metrics)
    for les, v in zip(result.lesions, result.values):  # v: (S, M)
        if les.kind not in RANDOM:
            out.append(LesionRow(les.kind, les.name, les.k, les.layer, 1, result.metrics,
                                 _floats(v.mean(axis=0)), _floats(_std(v)), 1, zero))  # fmt: skip
    for (kind, k), js in _groups(result).items():
        per_set = result.values[js].mean(axis=1)  # (K, M): each set over the seeds
        mean, ci, n = _sampled(kind, k, [result.lesions[j] for j in js], per_set)
        out.append(LesionRow(kind, f"{kind} k={k}", k, -1, len(js), result.metrics, mean,
                             _floats(_std(per_set)), n, ci))  # fmt: skip
    return out


def across_runs(results: Sequence[StudyResult], names: Sequence[str] | None = None):
    """Each run's :func:`rows`, then per intervention the mean and std (ddof 1; 0 for one
    run) over the runs of each run's mean; ``samples`` stays each run's. A sampled k's
    interval is that of the runs' mean on each set: the runs share their sets, so their
    spread cannot show the draw's error.

    Raises
    ------
    ValueError
        No result; runs of another scheme, depth, width, heads, vocabulary or text tokens
        than the first, named (:func:`resgrad.lab.study.runs.check_comparable`); or runs given
        different interventions (another set of a random k too).
    """
    if not results:
        raise NO_RUN()
    names = [r.label for r in results] if names is None else list(names)
    check_comparable([(n, r.model) for n, r in zip(names, results)], "run")
    tables = [rows(r) for r in results]
    if any([les.name for les in r.lesions] != [les.name for les in results[0].lesions]
           for r in results):  # fmt: skip
        raise INTERVENTIONS_DIFFER()
    groups = _groups(results[0])
    out = []
    for j, r0 in enumerate(tables[0]):
        means = np.array([t[j].mean for t in tables])  # (R, M)
        row = r0._replace(mean=_floats(means.mean(axis=0)), std=_floats(_std(means)))
        if r0.kind in RANDOM:
            js = groups[(r0.kind, r0.k)]
            per_set = np.mean([r.values[js].mean(axis=1) for r in results], axis=0)  # (K, M)
            lesions = [results[0].lesions[i] for i in js]
            row = row._replace(ci=_sampled(r0.kind, r0.k, lesions, per_set)[1])
        out.append(row)
    return out


class Summary(NamedTuple):
    """A study in a few numbers (NaN where the study has no such intervention)."""

    ce: float  # the intact model's cross-entropy
    block_dce: float  # the change in cross-entropy with one block deleted, mean over blocks
    worst_block: int  # the block whose deletion raises it most (-1: none deleted)
    worst_dce: float  # that rise
    block_agree: float  # top-1 agreement with one block deleted, mean over blocks
    swap_dce: float  # the change with adjacent blocks swapped, mean over the swaps


def summary(table: Sequence[LesionRow]) -> Summary:
    """:class:`Summary` of one study's rows (a model's:
    :data:`~resgrad.lab.lesion.measure.METRICS`)."""
    blocks = [r for r in table if r.kind == "block"]
    swaps = [r for r in table if r.kind == "swap"]
    dce = np.array([r.get("dce")[0] for r in blocks])  # (L,)
    nan = float("nan")
    worst = int(np.argmax(dce)) if len(dce) else -1
    return Summary(
        table[0].get("ce")[0],
        float(dce.mean()) if len(dce) else nan,
        blocks[worst].layer if blocks else -1,
        float(dce[worst]) if blocks else nan,
        float(np.mean([r.get("agree")[0] for r in blocks])) if blocks else nan,
        float(np.mean([r.get("dce")[0] for r in swaps])) if swaps else nan,
    )
