"""A grid of independent jobs on local processes (joblib's loky) or a Dask cluster, with a
progress bar, that dies with its parent and resumes where it stopped.

Each finished point is appended to a sidecar file (``.<out>.partial.jsonl`` beside the
output, :func:`sidecar_path`) and fsynced: a header line, then one sealed record
(:mod:`resgrad.formats.sealed`) ``{"key", "rows", "sha256"}`` per point. A rerun takes the
points there instead of computing them again, after checking each one: a line edited or
damaged, a point written twice, or rows whose files changed since are measured again, and
said (:func:`run_grid`).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import joblib
import numpy as np
from tqdm.auto import tqdm

from resgrad.formats.atomic import atomic_write_text
from resgrad.formats.sealed import Tampered, seal, unseal

BACKENDS = ("loky", "dask")  # joblib's local processes, or a Dask cluster


def _return_freed_memory() -> None:
    """Hand the heap's free blocks back to the OS (glibc's ``malloc_trim``; elsewhere a no-op).

    After a deep point, glibc keeps the freed arrays in the worker's heap (its mmap
    threshold rises as large blocks are freed), so the worker's resident size stays
    at that point's peak. loky takes a worker whose size grew by 300 MB since its
    first task for a leaking one, restarts it and warns "A worker stopped ... memory
    leak". Nothing leaks (the size is flat over repeated points); trimming after each
    point keeps the size honest, and costs a fraction of a millisecond.
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).malloc_trim(0)


def sidecar_path(out: str | os.PathLike) -> str:
    """The partial-results file of a sweep writing ``out``: ``.<name>.partial.jsonl`` beside it."""
    out = os.fspath(out)
    return os.path.join(os.path.dirname(out), f".{os.path.basename(out)}.partial.jsonl")


def _check_writable(path: str, what: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(
            f"cannot write {what} {path!r}: directory {directory!r} does not exist"
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        raise PermissionError(
            f"cannot write {what} {path!r}: directory {directory!r} is not writable"
        )
    if os.path.isdir(path):
        raise IsADirectoryError(f"cannot write {what} {path!r}: it is a directory")


_SIDECAR_HEADER = '{"resgrad_sweep_partial": 1}\n'  # first line of every sidecar


def sidecar_is_empty(path: str) -> bool:
    """Whether ``path`` is a sidecar that holds no finished point yet (its header alone)."""
    if not path.endswith(".partial.jsonl"):
        return False
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(len(_SIDECAR_HEADER) + 1) == _SIDECAR_HEADER
    except (OSError, UnicodeDecodeError):
        return False


def _load_sidecar(
    path: str, say: Callable[[str], None], check: Callable[[str, list[dict]], str | None] | None
) -> dict[str, list[dict]]:
    """Point key -> rows of every point a previous run finished and that reads back as it was
    written (see the module docstring).

    Each line is a sealed record (:func:`resgrad.formats.sealed.seal`). A line whose seal
    does not match (edited or damaged), a point written on two lines, and a point whose
    rows ``check`` finds stale (it returns why: a file they were measured on is gone or
    changed) are not used: each is said to ``say``, naming the file and the line or the
    reason, and its point is measured again. The tail a crash cut short is dropped
    without a word. The file is then rewritten with the lines kept, so that the point
    measured again is written once.
    """
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if not text.startswith(_SIDECAR_HEADER):
        raise ValueError(
            f"the partial-results file {path!r} is not a resgrad sweep's; delete it to start afresh"
        )
    pieces = text[len(_SIDECAR_HEADER) :].split("\n")  # a whole file ends in "\n": last ""
    done: dict[str, list[dict]] = {}
    first_at: dict[str, int] = {}
    twice: set[str] = set()
    problems: list[str] = []
    for n, line in enumerate(pieces[:-1], 2):  # the last piece: "" or a torn tail
        where = f"line {n} of the partial-results file {path!r}"
        try:
            entry = unseal(json.loads(line), where)
            key, rows = entry["key"], entry["rows"]
            if not isinstance(key, str) or not isinstance(rows, list):
                raise TypeError
        except Tampered as e:
            problems.append(str(e))
            continue
        except (ValueError, KeyError, TypeError):
            problems.append(f"{where} is not a point's record")
            continue
        if key in first_at:
            problems.append(f"{where} holds the point of line {first_at[key]} again")
            twice.add(key)
            continue
        first_at[key] = n
        done[key] = rows
    for key in twice:  # which of the two is right cannot be told: neither is used
        del done[key]
    for key in list(done) if check is not None else ():
        why = check(key, done[key])
        if why is not None:
            problems.append(why)
            del done[key]
    for why in problems:
        say(f"{why}: its point is measured again")
    if problems or pieces[-1]:  # what is kept, once each, and no torn tail
        kept = [_SIDECAR_HEADER] + [_sidecar_line(k, r) for k, r in done.items()]
        atomic_write_text(path, "".join(kept))
    return done


def _sidecar_line(key: str, rows: list[dict]) -> str:
    return json.dumps(seal({"key": key, "rows": rows})) + "\n"


def _append_sidecar(f, key: str, rows: list[dict]) -> None:
    """Append one finished point and make it durable before going on."""
    f.write(_sidecar_line(key, rows))
    f.flush()
    os.fsync(f.fileno())


def _connect(scheduler: str, timeout: float):
    try:
        from distributed import Client
    except ImportError:  # pragma: no cover - dask is in the test extras
        raise ValueError(
            "backend 'dask' needs dask.distributed: pip install 'resgrad[cluster]'"
        ) from None
    from distributed.comm import get_address_host_port, parse_address

    try:  # a malformed address is refused here: a Client that fails on one is left
        # half-built, and its __del__ hangs 10 s at exit before printing a traceback
        if parse_address(scheduler)[0] != "inproc":
            get_address_host_port(scheduler)
    except ValueError as e:
        raise ValueError(
            f"scheduler {scheduler!r} is not a Dask scheduler address such as tcp://HOST:8786 ({e})"
        ) from None
    _probe(scheduler, timeout)
    try:
        return Client(scheduler, timeout=timeout, set_as_default=False)
    except (OSError, ValueError, TimeoutError, MemoryError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConnectionError(
            f"cannot reach the Dask scheduler at {scheduler!r} within {timeout:g} s: {reason}"
        ) from None


def _probe(scheduler: str, timeout: float) -> None:
    """Refuse a ``tcp://`` address where something other than a Dask scheduler listens.

    A Dask scheduler speaks first: it sends its handshake as soon as a connection is
    accepted (``tests/lab/test_sweep.py`` holds a real one to that). A web server says
    nothing until it is asked, and a Dask client would wait on it, or read a proxy's
    reply as a frame length and try to allocate exabytes. The probe connects, reads
    what comes within ``timeout`` and closes; an address nothing listens on is left to
    the client's own error.
    """
    import socket
    from urllib.parse import urlsplit

    if not scheduler.startswith("tcp://"):
        return  # tls:// and the rest: their handshake starts elsewhere
    where = urlsplit(scheduler)
    try:
        conn = socket.create_connection((where.hostname, where.port), timeout=timeout)
    except OSError:
        return  # nothing there: the client says so, within its timeout
    with conn:
        try:
            first = conn.recv(16)
        except TimeoutError:
            first = None
        except OSError:
            return
    said = None
    if first is None:
        said = f"something listens there but sent nothing within {timeout:g} s"
    elif first[:5] in (b"HTTP/", b"<!DOC", b"<html", b"SSH-2"):
        said = f"it answered {first.decode('ascii', 'replace').split()[0]!r}"
    if said is not None:
        raise ConnectionError(f"{scheduler!r} is not a Dask scheduler: {said}")


@contextlib.contextmanager
def connected(backend: str, scheduler: str | None, timeout: float):
    """The Dask client a grid on ``backend`` runs through, connected here and closed on
    leaving (refused within ``timeout`` where no scheduler answers), or None for local
    workers. Connected before a study estimates its time, so that the estimate can count
    the cluster's workers (:func:`parallelism`) and an unreachable scheduler is refused
    before anything is written."""
    client = _connect(scheduler, timeout) if backend == "dask" else None
    try:
        yield client
    finally:
        if client is not None:
            client.close()


def parallelism(jobs: int, client) -> int:
    """How many points run at once: ``jobs`` local processes, or, through a Dask ``client``,
    the worker threads its scheduler counts now (at least 1: workers may join later)."""
    if client is None:
        return jobs
    return max(1, sum(client.nthreads().values()))


@dataclass(frozen=True)
class GridResult:
    """What :func:`run_grid` produced."""

    done: dict[str, list[dict]]  # point key -> its rows, every point of the grid
    computed: int  # points computed by this run
    resumed: int  # points taken from a previous, interrupted run's sidecar


def check_backend(
    jobs: int | None, backend: str, scheduler: str | None, connect_timeout: float
) -> int:
    """Validate where a grid runs; return the number of local jobs (every core by default)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "dask" and not scheduler:
        raise ValueError("backend 'dask' needs a scheduler address, e.g. tcp://127.0.0.1:8786")
    if backend != "dask" and scheduler:
        raise ValueError(f"a scheduler address is for backend 'dask', got backend {backend!r}")
    if jobs is None:
        jobs = os.cpu_count() or 1
    if isinstance(jobs, bool) or not isinstance(jobs, (int, np.integer)) or jobs < 1:
        raise ValueError(f"jobs must be a positive integer, got {jobs!r}")
    if not (isinstance(connect_timeout, (int, float)) and connect_timeout > 0):
        raise ValueError(f"connect_timeout must be a positive number, got {connect_timeout!r}")
    return int(jobs)


_WATCHED_PARENT: int | None = None  # in a local worker: the pid its watchdog watches


def _die_with_parent(parent: int) -> None:
    """In a local worker, exit as soon as ``parent`` (the process running the grid) is gone.

    loky's workers do not watch their parent: when it is killed (SIGKILL, or anything that
    skips its cleanup) they train on as orphans, holding their cells' locks, and a rerun is
    refused. A daemon thread polls ``os.getppid()``, which changes when the parent dies
    (the orphan is adopted by init or a subreaper), and ends the worker at once: what it
    had saved is atomic, and its cell resumes from its last checkpoint. Started once per
    worker; nothing in the process that runs the grid itself (``jobs=1``).
    """
    global _WATCHED_PARENT
    if os.getpid() == parent or _WATCHED_PARENT == parent:
        return
    if os.getppid() != parent:  # the parent died before this task started
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.1)
        os._exit(1)

    threading.Thread(target=watch, name="resgrad-parent-watchdog", daemon=True).start()
    _WATCHED_PARENT = parent


@contextlib.contextmanager
def _sigterm_raises():
    """While the grid runs, SIGTERM raises SystemExit(143) in the main thread instead of
    ending the process on the spot, so that joblib tears the pool down (killing the
    workers) and every ``with`` block (locks, the sidecar) closes on the way out. Left
    alone when the caller installed a handler of its own, or off the main thread."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):  # fmt: skip
        yield
        return

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _bars_lock_threads_only() -> None:
    """In a local worker, give tqdm a thread lock instead of the multiprocessing one it makes
    on first use (a bar, even a disabled one, takes it).

    That lock is a named POSIX semaphore, unlinked by a finalizer at the worker's exit. A
    grid cut short (SIGTERM, Ctrl-C, a dead parent) kills its workers before any finalizer
    runs, and the resource tracker then warned at the command's exit "There appear to be 2
    leaked semaphore objects to clean up at shutdown". A worker's bars are its own (none is
    shared with another process), so a thread lock is all they need.
    """
    from tqdm import tqdm as std_tqdm

    if not isinstance(getattr(std_tqdm, "_lock", None), type(threading.RLock())):
        std_tqdm.set_lock(threading.RLock())


def _keyed(job: Callable[[object], list[dict]], key: str, point: object, parent: int | None):
    if parent is not None and os.getpid() != parent:  # a local worker (jobs=1: the parent)
        # Ctrl-C at a terminal reaches the whole process group: the parent tears the pool
        # down and says one line; a worker that took it too would print its traceback
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _die_with_parent(parent)
        _bars_lock_threads_only()
    rows = job(point)
    _return_freed_memory()
    return key, rows


def run_grid(
    points: Sequence[tuple[str, object]],
    job: Callable[[object], list[dict]],
    side: str,
    *,
    jobs: int | None = None,
    backend: str = "loky",
    scheduler: str | None = None,
    connect_timeout: float = 5.0,
    progress: bool | None = None,
    desc: str = "sweep",
    threads: int | None = None,
    client=None,
    say: Callable[[str], None] | None = None,
    check: Callable[[str, list[dict]], str | None] | None = None,
    ready: Callable[[int, int], None] | None = None,
    sizes: dict[str, int] | None = None,
    unit: str = "config",
) -> GridResult:
    """Run ``job`` on every (key, point) not already in the sidecar file ``side``.

    The machinery behind ``resgrad sweep`` and ``resgrad experiment``: points run on
    local cores (joblib's loky) or a Dask cluster, each finished point is appended and
    fsynced to ``side`` (see the module docstring), and a rerun skips what is there.
    ``job`` must be a module-level function (it is pickled to the workers) returning
    the point's rows; each point must seed its own randomness, so that the rows do not
    depend on the backend or the order the points finish in. ``threads``: BLAS threads
    in each local worker (default: joblib's, cores // jobs). ``client``: a Dask client
    the caller connected (and closes); by default one is connected here for ``dask``.
    ``check(key, rows)``: why a finished point's rows can no longer be trusted (a file
    they were measured on changed), or None; such a point, and a sidecar line that fails
    its seal, is measured again, said to ``say`` (default: a line on stderr).
    ``ready(left, total)``: called once everything is checked (the scheduler reached, the
    sidecar read), before the first point runs, with the points left to run and all of them.
    ``sizes``: each key's share of the bar, counted in ``unit`` (default 1 a point), so that a bar
    can count what a point does (a model's checkpoints) rather than the points.
    """
    say = say or (lambda s: print(s, file=sys.stderr))
    jobs = check_backend(jobs, backend, scheduler, connect_timeout)
    own = client is None and backend == "dask"
    if own:
        client = _connect(scheduler, connect_timeout)
    try:
        done = _load_sidecar(side, say, check)  # point key -> rows, from an interrupted run
        todo = [(k, p) for k, p in points if k not in done]
        resumed = len(points) - len(todo)
        disable = None if progress is None else not progress  # None: only on a terminal
        if ready is not None:
            ready(len(todo), len(points))
        if todo and not os.path.exists(side):
            atomic_write_text(side, _SIDECAR_HEADER)
        size = (lambda k: 1) if sizes is None else sizes.__getitem__
        total = sum(size(k) for k, _ in points)
        initial = sum(size(k) for k, _ in points if k in done)
        with (
            tqdm(total=total, initial=initial, desc=desc, unit=unit, disable=disable) as bar,
            open(side, "a", encoding="utf-8") if todo else contextlib.nullcontext() as partial,
        ):
            if todo:
                if client is not None:
                    # the client is handed to joblib's dask backend, not made the global default
                    ctx = joblib.parallel_config(backend="dask", client=client)
                    n_jobs, parent = -1, None
                else:
                    ctx = joblib.parallel_config(backend="loky", inner_max_num_threads=threads)
                    n_jobs, parent = min(jobs, len(todo)), os.getpid()  # workers die with it
                with ctx, _sigterm_raises():
                    results = joblib.Parallel(n_jobs=n_jobs, return_as="generator_unordered")(
                        joblib.delayed(_keyed)(job, k, p, parent) for k, p in todo
                    )
                    try:
                        for key, rows in results:
                            done[key] = rows
                            _append_sidecar(partial, key, rows)  # a crash from here loses nothing
                            bar.update(size(key))
                    finally:  # an error raised here ends the workers now, not when collected
                        with warnings.catch_warnings():  # (joblib warns of the tasks cancelled)
                            warnings.simplefilter("ignore")
                            results.close()
    finally:
        if own:
            client.close()
    return GridResult(done=done, computed=len(todo), resumed=resumed)
