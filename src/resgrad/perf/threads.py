"""BLAS threads by default: one per usable core that no other process is keeping busy.

Why: OpenBLAS splits a matrix product over its threads, and a thread that has
finished its part, or waits for the next call, spins on its core rather than
sleeping. On an idle machine that is what makes it fast. On a machine where
another process keeps a core busy, each product waits for its slowest part,
the one whose thread must share a core with the other process, and the waiting
threads spin away time slices the other threads needed. With OpenBLAS's own
default (one thread per core) ``resgrad sample`` took 2.52 s against 1.72 s with
``--threads 1`` beside one busy process on a 2-core machine, 3.95 against 2.46 s
beside two, and 8-13x longer under a load 3-7 deep (issue 29).

What: when ``--threads`` is not given, the ``resgrad`` command counts, as it
starts, the cores it may run on and the other tasks running now, and gives BLAS
one thread per core left over, at least one (:func:`load_aware_threads`). The
count of running tasks is the kernel's ``procs_running`` (``/proc/stat``), read a
few times over a few milliseconds and the median taken, so that a task that ran
for an instant is not counted; this process's own reading thread is taken off.
Off Linux there is no such count, and none is taken for busy: BLAS gets one thread
per usable core, as it would by itself.

The policy is pure arithmetic on readings (:func:`busy_others`,
:func:`default_threads`), kept apart from the reading (:func:`read_procs_running`,
:func:`usable_cores`), so the tests drive it without a loaded machine.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence

__all__ = [
    "PROC_STAT",
    "busy_others",
    "default_threads",
    "load_aware_threads",
    "parse_procs_running",
    "read_procs_running",
    "sample_procs_running",
    "usable_cores",
]

PROC_STAT = "/proc/stat"  # Linux: the kernel's counters, procs_running among them
READS = 5  # readings of procs_running per decision: a median over them
READ_GAP_S = 0.001  # between readings: 5 of them take ~5 ms of a command's start


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity (``taskset``, a cgroup's cpuset),
    else every core the machine reports; at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no sched_getaffinity off Linux
        return max(1, os.cpu_count() or 1)


def parse_procs_running(text: str) -> int | None:
    """The ``procs_running N`` count in the text of ``/proc/stat``; None if it has none."""
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == "procs_running":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def read_procs_running(path: str = PROC_STAT) -> int | None:
    """Tasks running or ready to run now, this process's reading thread among them
    (``procs_running`` of ``path``); None where the file cannot be read (not Linux)."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return parse_procs_running(f.read())
    except OSError:
        return None


def sample_procs_running(
    reads: int = READS, gap_s: float = READ_GAP_S, path: str = PROC_STAT
) -> list[int]:
    """``reads`` readings of :func:`read_procs_running`, ``gap_s`` apart; [] off Linux."""
    out = []
    for i in range(reads):
        if i:
            time.sleep(gap_s)
        n = read_procs_running(path)
        if n is None:
            return []
        out.append(n)
    return out


def busy_others(readings: Sequence[int], usable: int, online: int) -> int:
    """Cores of the ``usable`` ones that other tasks keep busy, from readings of
    ``procs_running`` taken by this process (so each counts this process once).

    The median reading, less this process, is the other tasks running on the whole
    machine's ``online`` cores; the share of them on the usable cores is counted
    (all of them when this process may use every core), rounded to the nearest.
    No readings (off Linux): 0, none busy.
    """
    if not readings:
        return 0
    others = max(0.0, statistics.median(readings) - 1)  # this process reads: it runs
    share = min(usable, online) / max(online, 1)  # a cpuset of 4 on a 64-core host: 1/16
    return int(others * share + 0.5)


def default_threads(usable: int, busy: int) -> int:
    """BLAS threads for a command: one per usable core that others leave free, at
    least 1 and at most ``usable``.

    A thread more than the free cores would wait for one, spinning (module docstring).
    """
    return max(1, min(usable, usable - max(0, busy)))


def load_aware_threads() -> int:
    """:func:`default_threads` for this process and this machine now (module docstring)."""
    usable = usable_cores()
    online = os.cpu_count() or usable
    return default_threads(usable, busy_others(sample_procs_running(), usable, online))
