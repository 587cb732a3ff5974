"""The same bits on every BLAS thread count, or not: the probe that decides whether a command
may choose its thread count from the load (:mod:`resgrad.perf.threads`).

OpenBLAS splits a matrix product's tiles among its threads. With some kernels (SkylakeX,
measured) every element is summed in the same order on any count; with others (Haswell,
Zen) the tiles at the edges are summed otherwise, and an ``sgemm`` of (256, 128) @
(128, 384) differs in its last bits between 1 and 2 threads. A thread count read from the
load would then make a command's numbers depend on the load. :func:`counts_agree` runs a
computation at each count a command could choose (:func:`probe_counts`) and compares
the results bit for bit; :func:`step_counts_agree` does it for one training step of the
run's own model, before ``train`` lets its count follow the load.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np
from threadpoolctl import ThreadpoolController

from resgrad.nn.model import GPT
from resgrad.train.shards import Shards

__all__ = [
    "MAX_PROBED",
    "counts_agree",
    "may_follow_load",
    "probe_counts",
    "step_counts_agree",
    "usable_cores",
]

MAX_PROBED = 8  # every count up to this one is probed; above it, half and all the cores


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity (``taskset``, a cgroup's cpuset),
    else every core the machine reports; at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no sched_getaffinity off Linux
        return max(1, os.cpu_count() or 1)


def probe_counts(usable: int) -> tuple[int, ...]:
    """The thread counts a command could run on with ``usable`` cores, as probed: every one
    up to :data:`MAX_PROBED`, then half and all of ``usable``."""
    upto = tuple(range(1, min(usable, MAX_PROBED) + 1))
    return tuple(sorted({*upto, max(1, usable // 2), max(1, usable)}))


def counts_agree(fn: Callable[[], Sequence[np.ndarray]], counts: Sequence[int]) -> bool:
    """Whether ``fn()`` gives the same arrays, bit for bit, on every BLAS thread count of
    ``counts`` (each run under threadpoolctl's limit, the count before restored)."""
    first, blas = None, ThreadpoolController()  # found once: a search of the loaded libraries
    for n in counts:
        with blas.limit(limits=n, user_api="blas"):
            got = [np.array(a, copy=True) for a in fn()]
        if first is None:
            first = got
        elif len(got) != len(first) or not all(
            a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
            for a, b in zip(first, got)
        ):
            return False
    return True


def step_counts_agree(
    model: GPT, x: np.ndarray, y: np.ndarray, shards: int, counts: Sequence[int], seed: int = 0
) -> bool:
    """Whether one training step's loss, gradients and stream norms come out the same bits on
    every BLAS thread count of ``counts`` (``shards`` shards, :class:`Shards`, dropout from a
    generator of ``seed``, fresh at each count): the gate of a run that would follow the load.

    The products are those of the run itself (its shapes, its shards, its model), so a
    BLAS whose tiles split these shapes differently on another count is found out; the
    parameters and the run's generators are not touched.
    """

    def step() -> list[np.ndarray]:
        with Shards(shards) as s:  # made under the count: its threads split as the run's would
            p = s.forward_backward(model, x, y, np.random.default_rng(seed), act_rms=True)
        return [np.float64(p.loss), *p.grads.values(), np.array(p.stream_norms)]

    return counts_agree(step, counts)


def may_follow_load(
    model: GPT, x: np.ndarray, y: np.ndarray, shards: int, set_count: Callable[[int], object],
    warn: Callable[[str], None],
) -> bool:  # fmt: skip
    """Whether a run may let the load move its thread count: its step on the batch ``x``,
    ``y`` (B, T) gives the same bits on every count it could choose
    (:func:`step_counts_agree` at :func:`probe_counts` of the usable cores). If not, the run
    is set (``set_count``) to one thread per usable core for good, whatever the load, and
    ``warn`` is told once."""
    counts = probe_counts(usable_cores())  # (1, ..., cores)
    if step_counts_agree(model, x, y, shards, counts):
        return True
    set_count(counts[-1])
    warn(f"threads: this BLAS gives this model's step other bits on another thread count, so "
         f"the run stays on {counts[-1]} thread(s) whatever the load, and its numbers do not "
         "depend on it (--threads N sets the count)")  # fmt: skip
    return False
