"""Gradient paths through training: the split at every checkpoint a run kept, across runs.

Legend: R = runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from resgrad.lab.paths.exact import (
    PathRow,
    PathSplit,
)
from resgrad.lab.study.protocol import common_steps
from resgrad.lab.study.runs import RunModel


class CheckpointPaths(NamedTuple):
    """The split at x_0 of one checkpoint a run kept, on the same windows as every other."""

    iteration: int
    path: str
    splits: list[PathSplit]  # one per window seed
    rows: list[PathRow]  # path_table(splits): per k, mean and std over the seeds
    range90: tuple[int, int]  # effective_range of the mean share of the norm
    model: RunModel  # what another run must share to be compared with this one

    @property
    def mean_k(self) -> float:
        """The mean path length, weighted by the share of the norm: sum_k k x share_k."""
        return float(sum(r.k * r.share_norm for r in self.rows))


class RunsRow(NamedTuple):
    """One iteration kept by every run of a comparison: the spread over the runs."""

    iteration: int
    runs: int  # R, the training runs (seeds) averaged
    share0: float  # k = 0 share of the norm at x_0: mean over the runs
    share0_std: float  # its std over the runs (ddof=1; 0 for one run)
    mean_k: float  # CheckpointPaths.mean_k, mean over the runs
    mean_k_std: float
    ranges: tuple[tuple[int, int], ...]  # each run's 90% range, in the runs' order


def across_runs(results: Sequence[Sequence[CheckpointPaths]]) -> list[RunsRow]:
    """Several training runs' splits through training (e.g. seeds), side by side.

    Only the iterations every run kept are compared, each run's own checkpoint of that
    iteration (:func:`~resgrad.lab.study.protocol.common_steps`); each value is the mean and
    std (ddof=1; 0 for one run) over the runs of that run's mean over its window seeds.

    Raises
    ------
    ValueError
        No run, runs that differ in scheme, shape, vocabulary or text tokens
        (:func:`~resgrad.lab.study.runs.check_comparable`), or no iteration kept by every run.
    """
    steps = common_steps(results)
    ddof = 1 if len(results) > 1 else 0
    out = []
    for st in steps:
        cs = st.checkpoints
        share0 = np.array([c.rows[0].share_norm for c in cs])  # (R,)
        mean_k = np.array([c.mean_k for c in cs])  # (R,)
        out.append(RunsRow(st.iteration, len(cs), float(share0.mean()),
                           float(share0.std(ddof=ddof)), float(mean_k.mean()),
                           float(mean_k.std(ddof=ddof)), tuple(c.range90 for c in cs)))  # fmt: skip
    return out
