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

Following the load: a long ``resgrad train`` outlives the load it read as it started. A
process that starts later makes every product wait as above, and one that ends leaves a
core unused. So, without ``--threads``, the trainer reads the load again as it goes
(:class:`ThreadFollower`): every :data:`RECHECK_STEPS` steps, and at once after a step
slower than :data:`SLOW_STEP` times the median of the recent ones (a new load is the
usual cause), but no sooner than :data:`COOLDOWN_STEPS` steps after the last reading,
since a load that stays slows every step. Mid-run this process's own threads are among
the running tasks (OpenBLAS's spin after each product), so they are taken off the count:
its threads in state R (``/proc/self/task/*/stat``, :func:`reread_threads`). On an
idle machine the count never changes. With ``--threads N``, N for the whole run.

The policy is pure arithmetic on readings (:func:`busy_others`,
:func:`default_threads`, :class:`ThreadFollower`), kept apart from the reading
(:func:`read_procs_running`, :func:`read_own_running`, :func:`usable_cores`), so the
tests drive it without a loaded machine.

The same bytes whatever the load: OpenBLAS's float32 and float64 products give the same
bits on any thread count with some kernels (SkylakeX, measured) and not with others
(Haswell and Zen split a product's tiles so that its sums round differently: an
``sgemm`` of (256, 128) @ (128, 384) differs in its last bits between 1 and 2 threads).
A count read from the load would then make a command's numbers depend on the load. So
the load is followed only where a probe shows the count changes no bit: as a command
starts, :func:`sums_depend_on_count` runs a bank of products at every count it could
choose (:func:`probe_counts`) and compares them bit for bit; where they differ, a
command without ``--threads`` runs on one thread per usable core, whatever the load
(``resgrad.cli``), and ``resgrad train`` probes its own model's step the same way
before it lets a :class:`ThreadFollower` move the count
(:func:`resgrad.train.bits.step_counts_agree`).
"""

from __future__ import annotations

import functools
import os
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence

import numpy as np

from resgrad.train.bits import counts_agree, probe_counts, usable_cores

__all__ = [
    "PROC_STAT",
    "ThreadFollower",
    "blas_threads",
    "busy_others",
    "default_threads",
    "load_aware_threads",
    "parse_procs_running",
    "parse_task_state",
    "probe_counts",
    "read_own_running",
    "read_procs_running",
    "reread_threads",
    "sample_others_running",
    "sample_procs_running",
    "sums_depend_on_count",
    "usable_cores",
]

PROC_STAT = "/proc/stat"  # Linux: the kernel's counters, procs_running among them
READS = 5  # readings of procs_running per decision: a median over them
READ_GAP_S = 0.001  # between readings: 5 of them take ~5 ms of a command's start
SELF_TASKS = "/proc/self/task"  # Linux: a directory per thread of this process
# following the load in a long train (ThreadFollower)
RECHECK_STEPS = 200  # read the load again every this many steps
SLOW_STEP = 1.5  # ... and at once after a step this much slower than the recent median
COOLDOWN_STEPS = 20  # ... but not sooner than this many steps after the last reading
STEP_WINDOW = 21  # the recent steps whose median is a normal step
MIN_STEPS = 5  # steps timed before one can be slow: the first ones warm up


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


def _threads_for(readings: Sequence[int]) -> int:
    """:func:`default_threads` on this machine's cores, given readings of the running tasks."""
    usable = usable_cores()
    online = os.cpu_count() or usable
    return default_threads(usable, busy_others(readings, usable, online))


def load_aware_threads() -> int:
    """:func:`default_threads` for this process and this machine now (module docstring)."""
    return _threads_for(sample_procs_running())


# --------------------------------------------------------------------------- the same bytes


# the probe's products: (M, K, N) as a GPT's are (B*T rows by C, 3C, 4C columns; a tall
# and narrow one), in float32 and float64: the Haswell kernel's tiles split each of these
# otherwise on 1 and 2 threads (measured), the SkylakeX kernel's do not
PROBE_SHAPES = ((256, 128, 384), (65, 1024, 128))


def _probe_products() -> list[np.ndarray]:
    """:data:`PROBE_SHAPES`' products in float32 and float64, on fixed operands."""
    rng = np.random.default_rng(0)
    out = []
    for m, k, n in PROBE_SHAPES:
        a, b = rng.random((m, k)) - 0.5, rng.random((k, n)) - 0.5  # (M, K), (K, N)
        for dt in (np.float32, np.float64):
            a_, b_ = a.astype(dt), b.astype(dt)
            out += [a_ @ b_, b_.T @ a_.T]  # (M, N), (N, M): both operand layouts
    return out


@functools.cache
def sums_depend_on_count(usable: int | None = None) -> bool:
    """Whether this process's BLAS gives other bits on another thread count: the products of
    :data:`PROBE_SHAPES` at every count of :func:`probe_counts` compared (once per process:
    65-130 ms on an idle 2-core machine, most of it the BLAS's first calls on each count)."""
    usable = usable_cores() if usable is None else usable
    return not counts_agree(_probe_products, probe_counts(usable))


# --------------------------------------------------------------------------- following the load


def parse_task_state(text: str) -> str | None:
    """The state letter (R running, S sleeping, ...) in the text of a ``/proc/.../stat``;
    None if it has none. The command's name, in parentheses, may hold spaces and ')'."""
    _, paren, rest = text.rpartition(")")
    fields = rest.split()
    return fields[0] if paren and fields else None


def read_own_running(task_dir: str = SELF_TASKS) -> int | None:
    """This process's threads running or ready to run now, the reader among them (the
    ``R`` states under ``task_dir``); None where the directory cannot be read (not Linux)."""
    try:
        tasks = os.listdir(task_dir)
    except OSError:
        return None
    n = 0
    for tid in tasks:
        try:
            with open(os.path.join(task_dir, tid, "stat"), encoding="ascii", errors="replace") as f:
                if parse_task_state(f.read()) == "R":
                    n += 1
        except OSError:  # the thread ended between the listing and the reading
            continue
    return max(1, n)  # the reader runs


def sample_others_running(
    reads: int = READS, gap_s: float = READ_GAP_S, path: str = PROC_STAT,
    task_dir: str = SELF_TASKS,
) -> list[int]:  # fmt: skip
    """As :func:`sample_procs_running`, with this process's running threads but the reader
    taken off each reading: what :func:`busy_others` expects of a process that has threads
    of its own at work (BLAS's spinning ones). [] off Linux."""
    out = []
    for k in range(reads):
        if k:
            time.sleep(gap_s)
        own = read_own_running(task_dir)  # before: the spinning threads only go to sleep
        n = read_procs_running(path)
        if n is None:
            return []
        out.append(max(1, n - (own or 1) + 1))  # no task directory: as procs_running alone
    return out


def reread_threads() -> int:
    """:func:`default_threads` for this process and this machine now, mid-run: the other
    tasks are counted without this process's own (module docstring)."""
    return _threads_for(sample_others_running())


def blas_threads() -> int:
    """The loaded BLAS's thread count now (threadpoolctl); the usable cores if none is found."""
    from threadpoolctl import threadpool_info

    counts = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    return max(counts) if counts else usable_cores()


def _count(name: str, value, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {value!r}")
    return value


class ThreadFollower:
    """When a long run reads the load again, and the BLAS threads it then runs on.

    The trainer calls it once per step with the step's wall time; it returns the thread
    count for the next steps. It reads (``read()``) every ``every`` steps, and after a
    step slower than ``slow`` times the median of the last ``window`` steps (once
    ``min_steps`` are timed) when ``cooldown`` steps or more have passed since the last
    reading. The median starts afresh when the count changes: steps on another count
    are another normal.

    Parameters
    ----------
    start : int, optional
        The count in force (default: the BLAS's now, :func:`blas_threads`).
    read : callable
        The count the load leaves now (default: :func:`reread_threads`); the tests
        pass their own.
    every, slow, cooldown, window, min_steps
        Default :data:`RECHECK_STEPS`, :data:`SLOW_STEP`, :data:`COOLDOWN_STEPS`,
        :data:`STEP_WINDOW`, :data:`MIN_STEPS`.
    """

    def __init__(
        self,
        start: int | None = None,
        read: Callable[[], int] = reread_threads,
        *,
        every: int = RECHECK_STEPS,
        slow: float = SLOW_STEP,
        cooldown: int = COOLDOWN_STEPS,
        window: int = STEP_WINDOW,
        min_steps: int = MIN_STEPS,
    ):
        self.threads = blas_threads() if start is None else _count("start", start, 1)
        self.read = read
        self.every = _count("every", every, 1)
        if not isinstance(slow, int | float) or not slow > 1:
            raise ValueError(f"slow must be a number > 1, got {slow!r}")
        self.slow = float(slow)
        self.cooldown = _count("cooldown", cooldown, 0)
        self.min_steps = _count("min_steps", min_steps, 1)
        if _count("window", window, 1) < min_steps:
            raise ValueError(f"window must be at least min_steps ({min_steps}), got {window!r}")
        self.recent: deque[float] = deque(maxlen=window)  # seconds of the last steps
        self.since = 0  # steps since the last reading (or the start)
        self.reads = 0  # readings taken

    def __call__(self, seconds: float) -> int:
        """The thread count for the next step, after a step of ``seconds``."""
        self.since += 1
        known = len(self.recent) >= self.min_steps
        slow = known and seconds > self.slow * statistics.median(self.recent)
        self.recent.append(seconds)
        if self.since >= self.every or (slow and self.since >= self.cooldown):
            self.since = 0
            self.reads += 1
            n = _count("read()", self.read(), 1)
            if n != self.threads:
                self.threads = n
                self.recent.clear()  # a new count: a new normal step
        return self.threads
