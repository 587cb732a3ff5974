"""Lesion study, the tables: one row per intervention (or per k), across runs, in a summary.

Legend: S = window seeds, M = metrics, K = random sets of one k, R = runs, L = blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from resgrad.lab.lesion.interventions import RANDOM
from resgrad.lab.lesion.measure import StudyResult
from resgrad.lab.study.refusals import INTERVENTIONS_DIFFER, NO_RUN
from resgrad.lab.study.runs import check_comparable

__all__ = ["LesionRow", "Summary", "across_runs", "row_keys", "rows", "summary"]


# --------------------------------------------------------------------------- tables


class LesionRow(NamedTuple):
    """One intervention (or one k of a random kind): its metrics' mean and std.

    A single intervention: over the window seeds. A random kind's k: over its K sets, each
    averaged over the seeds (``samples`` = K). Across runs: over the runs, of each run's
    mean. The std is the sample standard deviation (ddof 1; 0 from one value).
    """

    kind: str
    name: str
    k: int
    layer: int
    samples: int
    metrics: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def get(self, metric: str) -> tuple[float, float]:
        """(mean, std) of one metric."""
        j = self.metrics.index(metric)
        return self.mean[j], self.std[j]

    def record(self) -> dict:
        """A flat dict: kind, name, k, layer, samples, then each metric and its ``_std``."""
        out = {"kind": self.kind, "name": self.name, "k": self.k, "layer": self.layer,
               "samples": self.samples}  # fmt: skip
        for m, a, s in zip(self.metrics, self.mean, self.std):
            out[m], out[f"{m}_std"] = float(a), float(s)
        return out


def row_keys(metric_names: Sequence[str]) -> list[str]:
    """The columns of :meth:`LesionRow.record`."""
    return ["kind", "name", "k", "layer", "samples",
            *[c for m in metric_names for c in (m, f"{m}_std")]]  # fmt: skip


def _floats(a: np.ndarray) -> tuple[float, ...]:
    return tuple(float(x) for x in a)


def _std(a: np.ndarray, axis: int = 0) -> np.ndarray:
    """Sample standard deviation (ddof 1) along ``axis``; 0 where there is one value."""
    if a.shape[axis] < 2:
        return np.zeros(np.delete(a.shape, axis))
    return a.std(axis=axis, ddof=1)


def rows(result: StudyResult) -> list[LesionRow]:
    """The table: the intact stack, each single intervention (mean and std over the seeds),
    then each k of each random kind (mean and std over its sets), in the plan's order."""
    out: list[LesionRow] = []
    groups: dict[tuple[str, int], list[int]] = {}
    for j, les in enumerate(result.lesions):
        if les.kind in RANDOM:
            groups.setdefault((les.kind, les.k), []).append(j)
            continue
        v = result.values[j]  # (S, M)
        out.append(LesionRow(les.kind, les.name, les.k, les.layer, 1, result.metrics,
                             _floats(v.mean(axis=0)), _floats(_std(v))))  # fmt: skip
    for (kind, k), js in groups.items():
        per_set = result.values[js].mean(axis=1)  # (K, M): each set over the seeds
        out.append(LesionRow(kind, f"{kind} k={k}", k, -1, len(js), result.metrics,
                             _floats(per_set.mean(axis=0)), _floats(_std(per_set))))  # fmt: skip
    return out


def across_runs(results: Sequence[StudyResult], names: Sequence[str] | None = None):
    """Each run's :func:`rows`, then per intervention the mean and std (ddof 1; 0 for one
    run) over the runs of each run's mean; ``samples`` stays each run's.

    Raises
    ------
    ValueError
        No result; runs of another scheme, depth, width, heads, vocabulary or text tokens
        than the first, named (:func:`resgrad.lab.study.runs.check_comparable`); or runs given
        different interventions.
    """
    if not results:
        raise NO_RUN()
    names = [r.label for r in results] if names is None else list(names)
    check_comparable([(n, r.model) for n, r in zip(names, results)], "run")
    tables = [rows(r) for r in results]
    if any([r.name for r in t] != [r.name for r in tables[0]] for t in tables):
        raise INTERVENTIONS_DIFFER()
    out = []
    for j, r0 in enumerate(tables[0]):
        means = np.array([t[j].mean for t in tables])  # (R, M)
        out.append(r0._replace(mean=_floats(means.mean(axis=0)), std=_floats(_std(means))))
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
