"""Sweeps of the gradient-flow lab: variants x depths x widths x seeds, in parallel.

Legend: L = depth, C = width, K = number of seeds.

Each point of the grid is one stack at one seed, measured by
:func:`resgrad.lab.flow.profile`; it gives one row per layer (``stream_grad``,
``stream_act`` and ``param_grad`` of :mod:`resgrad.lab.flow`, with the point's
settings and its seed). The points run in parallel on local cores with joblib
(``backend="loky"``), or on a Dask distributed cluster through joblib's dask
backend (``backend="dask", scheduler="tcp://host:port"``). Every point seeds its
own generators from its seed alone, so the rows are the same whatever the
backend, the number of workers or the order the points finish in.

Files. The result (``.csv`` or ``.json`` by extension) is written atomically
once the whole grid is done. While the grid runs, a sidecar file
``.<name>.partial.jsonl`` beside the result (same directory) holds every point
finished so far, one JSON line per point, appended, flushed and fsynced as the
point finishes (so the cost stays linear in the grid, not quadratic as rewriting
the whole file would be). A sweep that is interrupted (Ctrl-C, a killed job, a
lost cluster) and run again with the same output path skips the points already
done and computes only the rest. A line cut short by a crash mid-write is
recognised (it does not end in a newline, or does not parse) and dropped; the
sidecar is then rewritten atomically without it. The sidecar is removed when the
result is written. Points are matched by all their settings and seed, so a
sidecar from a different sweep is never mistaken for this one's.

Local workers die with the process that runs the grid: SIGTERM tears the pool down
(the command exits with status 143), and after a SIGKILL each worker notices within
0.1 s that its parent is gone and exits, so no orphan keeps computing, or holding a
training cell's lock, and the rerun resumes at once.

Errors are raised before anything is written: a bad grid, an output path whose
extension is not ``.csv``/``.json`` or whose directory is missing or not
writable, a plot path that is not ``.png``/``.svg``, or a Dask scheduler that
cannot be reached within ``connect_timeout`` seconds.
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

from resgrad.formats.atomic import atomic_write_text, remove_stale_temporaries
from resgrad.formats.lock import hold_lock, lock_path_for
from resgrad.formats.records import to_csv, to_json
from resgrad.lab.flow import LOSSES, FlowConfig, positive_ints, profile, seed_tuple
from resgrad.plots import PlotSpec, Series, plot_format, save_plot

__all__ = [
    "BACKENDS",
    "GridResult",
    "ROW_FIELDS",
    "SweepConfig",
    "SweepResult",
    "point_key",
    "rows_to_csv",
    "rows_to_json",
    "check_backend",
    "run_grid",
    "run_point",
    "run_sweep",
    "sidecar_path",
    "sweep_plot_spec",
]

BACKENDS = ("loky", "dask")
OUT_FORMATS = {".csv": "csv", ".json": "json"}
ROW_FIELDS = (
    "variant",
    "depth",
    "width",
    "heads",
    "seq",
    "batch",
    "init",
    "loss",
    "seed",
    "layer",
    "stream_grad",  # ||dL/dx_i||, i = 0..L
    "stream_act",  # ||x_i||
    "param_grad",  # ||dL/dtheta_i|| of block i's parameters; empty at layer L
)


@dataclass(frozen=True)
class SweepConfig:
    """The grid: every variant at every depth and width, at every seed."""

    variants: tuple[str, ...] = ("pre-ln", "post-ln")  # resgrad.lab.flow.all_variants()
    depths: tuple[int, ...] = (2, 4, 8, 16)  # L values
    widths: tuple[int, ...] = (32,)  # C values; each divisible by heads
    seeds: tuple[int, ...] = (0, 1)  # one grid point each; a count K means seeds 0..K-1
    heads: int = 4  # H
    seq: int = 16  # T
    batch: int = 4  # B
    init: str = "gpt2"
    loss: str = "lm"  # one of resgrad.lab.flow.LOSSES
    vocab: int = 65  # V

    def __post_init__(self):
        if isinstance(self.variants, str) or not isinstance(self.variants, Sequence):
            raise TypeError(f"variants must be a sequence of names, got {self.variants!r}")
        variants = tuple(self.variants)
        if not variants:
            raise ValueError("variants must list at least one variant, got none")
        if len(set(variants)) != len(variants):
            raise ValueError(f"variants must be distinct, got {variants!r}")
        object.__setattr__(self, "variants", variants)
        object.__setattr__(self, "depths", positive_ints("depths", self.depths))
        object.__setattr__(self, "widths", positive_ints("widths", self.widths))
        what = "variants x depths x widths x seeds"
        per_seed = len(variants) * len(self.depths) * len(self.widths)
        if isinstance(self.seeds, (int, np.integer)) and not isinstance(self.seeds, bool):
            check_grid_size(per_seed * int(self.seeds), what)  # before the count is listed
        object.__setattr__(self, "seeds", seed_tuple(self.seeds))
        check_grid_size(per_seed * len(self.seeds), what)
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        for v in variants:  # every stack must be valid; FlowConfig names the bad field
            for w in self.widths:
                self._flow(v, self.depths[0], w, self.seeds[0])

    def _flow(self, variant: str, depth: int, width: int, seed: int) -> FlowConfig:
        return FlowConfig(
            variant=variant, depth=depth, width=width, heads=self.heads, seq=self.seq,
            batch=self.batch, init=self.init, loss=self.loss, seeds=(seed,), vocab=self.vocab,
        )  # fmt: skip

    def points(self) -> list[FlowConfig]:
        """The grid in order (variant, depth, width, seed), each a one-seed FlowConfig."""
        return [
            self._flow(v, d, w, s)
            for v in self.variants
            for d in self.depths
            for w in self.widths
            for s in self.seeds
        ]


MAX_GRID = 100_000  # points in one sweep or experiment: each is a measurement or a training run


def check_grid_size(n: int, what: str) -> None:
    """Refuse a grid of more than MAX_GRID points before it is listed (a typo such as
    ``--seeds 1000000000000`` would otherwise hang building it)."""
    if n > MAX_GRID:
        raise ValueError(
            f"this grid has {n:,} points ({what}); at most {MAX_GRID:,} run in one command"
        )


def point_key(cfg: FlowConfig) -> str:
    """A string naming a grid point by everything it was measured with."""
    return json.dumps({**cfg.describe(), "vocab": cfg.vocab, "seed": cfg.seeds[0]}, sort_keys=True)


def run_point(cfg: FlowConfig) -> list[dict]:
    """Measure one grid point (one seed): one row per layer i = 0..L, see ROW_FIELDS."""
    if len(cfg.seeds) != 1:
        raise ValueError(f"a grid point has exactly one seed, got {cfg.seeds!r}")
    p = profile(cfg, cfg.seeds[0])
    base = {**cfg.describe(), "seed": cfg.seeds[0]}
    L = cfg.depth
    return [
        {
            **base,
            "layer": i,
            "stream_grad": float(p.stream_grad[i]),
            "stream_act": float(p.stream_act[i]),
            "param_grad": float(p.param_grad[""][i]) if i < L else None,
        }
        for i in range(L + 1)
    ]


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


def _job(cfg: FlowConfig) -> list[dict]:
    # looked up by name at call time, so that a test can wrap run_point
    return run_point(cfg)


def rows_to_csv(rows: Sequence[dict]) -> str:
    """Rows as CSV with a header; floats by ``repr`` (full precision), None as empty."""
    return to_csv(rows, ROW_FIELDS)


def rows_to_json(rows: Sequence[dict]) -> str:
    """Rows as a JSON list of objects (full float precision, None as null)."""
    return to_json(rows, ROW_FIELDS)


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


def _load_sidecar(path: str) -> dict[str, list[dict]]:
    """Point key -> rows of every point a previous run finished (see the module docstring)."""
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")  # a complete file ends in "\n", so the last piece is ""
    if not text.startswith(_SIDECAR_HEADER):
        raise ValueError(
            f"the partial-results file {path!r} is not a resgrad sweep's; delete it to start afresh"
        )
    done: dict[str, list[dict]] = {}
    body = lines[1:]
    for n, line in enumerate(body):
        last = n == len(body) - 1
        if last and line == "":
            break
        try:
            entry = json.loads(line)
            done[entry["key"]] = entry["rows"]
        except (ValueError, KeyError, TypeError) as e:
            if not last:  # only the tail can be torn by a crash; anything else is damage
                raise ValueError(
                    f"the partial-results file {path!r} is unreadable at line {n + 2} ({e}); "
                    "delete it to start afresh"
                ) from None
        if last:  # no newline after it: a write cut short; keep what parsed, drop the rest
            kept = [_SIDECAR_HEADER] + [_sidecar_line(k, r) for k, r in done.items()]
            atomic_write_text(path, "".join(kept))
    return done


def _sidecar_line(key: str, rows: list[dict]) -> str:
    return json.dumps({"key": key, "rows": rows}) + "\n"


def _append_sidecar(f, key: str, rows: list[dict]) -> None:
    """Append one finished point and make it durable before going on."""
    f.write(_sidecar_line(key, rows))
    f.flush()
    os.fsync(f.fileno())


@dataclass(frozen=True)
class SweepResult:
    """What :func:`run_sweep` produced."""

    rows: list[dict]  # every row of the grid, in grid order then layer order
    computed: int  # points computed by this run
    resumed: int  # points taken from a previous, interrupted run's sidecar
    plot: PlotSpec | None  # the summary plot as drawn, if one was asked for


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
    if parent is not None:  # a local worker
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
    """
    jobs = check_backend(jobs, backend, scheduler, connect_timeout)
    own = client is None and backend == "dask"
    if own:
        client = _connect(scheduler, connect_timeout)
    try:
        done = _load_sidecar(side)  # point key -> rows, from an interrupted run
        todo = [(k, p) for k, p in points if k not in done]
        resumed = len(points) - len(todo)
        disable = None if progress is None else not progress  # None: only on a terminal
        if todo and not os.path.exists(side):
            atomic_write_text(side, _SIDECAR_HEADER)
        with (
            tqdm(
                total=len(points), initial=resumed, desc=desc, unit="config", disable=disable
            ) as bar,
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
                            bar.update(1)
                    finally:  # an error raised here ends the workers now, not when collected
                        with warnings.catch_warnings():  # (joblib warns of the tasks cancelled)
                            warnings.simplefilter("ignore")
                            results.close()
    finally:
        if own:
            client.close()
    return GridResult(done=done, computed=len(todo), resumed=resumed)


def run_sweep(
    cfg: SweepConfig,
    out: str | os.PathLike,
    *,
    plot: str | os.PathLike | None = None,
    jobs: int | None = None,
    backend: str = "loky",
    scheduler: str | None = None,
    connect_timeout: float = 5.0,
    progress: bool | None = None,
    threads: int | None = None,
) -> SweepResult:
    """Run the grid of ``cfg``, write its rows to ``out``, and the summary plot to ``plot``.

    Parameters
    ----------
    cfg : SweepConfig
    out : path
        ``.csv`` or ``.json``; written atomically when the grid is done. Its
        sidecar :func:`sidecar_path` keeps finished points meanwhile (see the
        module docstring) and a rerun resumes from it.
    plot : path, optional
        ``.png`` or ``.svg``: input-gradient norm against depth, per variant, log-log.
    jobs : int, optional
        Local worker processes for ``backend="loky"`` (default: every core; 1 runs
        in this process). With ``backend="dask"`` the cluster's workers are used.
    backend : {"loky", "dask"}
    scheduler : str
        The Dask scheduler's address, e.g. ``"tcp://10.0.0.5:8786"`` (dask only).
    connect_timeout : float
        Seconds to wait for the scheduler before giving up with a ConnectionError.
    progress : bool, optional
        Show a tqdm progress bar on stderr (default: when stderr is a terminal).
    threads : int, optional
        BLAS threads in each local worker (default: joblib's, cores // jobs).

    Raises
    ------
    ValueError, OSError
        On bad arguments or paths, or an unreachable scheduler (ConnectionError),
        before any file is written.
    """
    out = os.fspath(out)
    ext = os.path.splitext(out)[1].lower()
    if ext not in OUT_FORMATS:
        raise ValueError(
            f"cannot tell the result format of {out!r}: expected a name ending in "
            f"{' or '.join(OUT_FORMATS)}"
        )
    _check_writable(out, "the result")
    if plot is not None:
        plot = os.fspath(plot)
        plot_format(plot)
        _check_writable(plot, "the plot")
    check_backend(jobs, backend, scheduler, connect_timeout)

    client = _connect(scheduler, connect_timeout) if backend == "dask" else None
    # one sweep at a time writes OUT (and its sidecar): a second fails at once, naming the holder
    with (
        contextlib.closing(client) if client is not None else contextlib.nullcontext(),
        hold_lock(lock_path_for(out, directory=False), f"sweep output {out!r}"),
    ):
        side = sidecar_path(out)
        remove_stale_temporaries(os.path.dirname(os.path.abspath(out)),
                                 [os.path.basename(out), os.path.basename(side)])  # fmt: skip
        points = cfg.points()
        keys = [point_key(p) for p in points]
        grid = run_grid(list(zip(keys, points)), _job, side, jobs=jobs, backend=backend,
                        scheduler=scheduler, connect_timeout=connect_timeout,
                        progress=progress, threads=threads, client=client)  # fmt: skip
        rows = [r for k in keys for r in grid.done[k]]
        text = rows_to_csv(rows) if OUT_FORMATS[ext] == "csv" else rows_to_json(rows)
        atomic_write_text(out, text)
        spec = None
        if plot is not None:
            spec = save_plot(sweep_plot_spec(rows), plot)
        if os.path.exists(side):
            os.unlink(side)
        return SweepResult(rows=rows, computed=grid.computed, resumed=grid.resumed, plot=spec)


def sweep_plot_spec(rows: Sequence[dict]) -> PlotSpec:
    """Input-gradient norm (``stream_grad`` at layer 0) against depth, log-log.

    One line per (variant, width): the mean over the seeds; with several seeds a
    band spans min..max. The series' y values are exactly those means.
    """
    inputs = [r for r in rows if r["layer"] == 0]
    if not inputs:
        raise ValueError("no rows to plot")
    stacks = list(dict.fromkeys((r["variant"], r["width"]) for r in inputs))
    widths = {w for _, w in stacks}
    series = []
    for v, w in stacks:
        by_depth: dict[int, list[float]] = {}
        for r in inputs:
            if (r["variant"], r["width"]) == (v, w):
                by_depth.setdefault(r["depth"], []).append(r["stream_grad"])
        depths = sorted(by_depth)
        vals = [np.asarray(by_depth[d]) for d in depths]
        band = max(len(a) for a in vals) > 1
        series.append(
            Series(
                label=v + (f" C={w}" if len(widths) > 1 else ""),
                x=depths,
                y=[float(a.mean()) for a in vals],
                lo=[float(a.min()) for a in vals] if band else None,
                hi=[float(a.max()) for a in vals] if band else None,
            )
        )
    r0 = inputs[0]
    k = len({r["seed"] for r in inputs})
    shape = f"C={r0['width']}" if len(widths) == 1 else "C varies"
    losses = ", ".join(sorted({r["loss"] for r in inputs}))
    note = f"{shape}, T={r0['seq']}, B={r0['batch']}, loss {losses}; mean over {k} seed(s)"
    if k > 1:
        note += ", band = min..max"
    inits = ", ".join(dict.fromkeys(r["init"] for r in inputs))
    Ls = sorted({r["depth"] for r in inputs})
    return PlotSpec(
        title=f"Gradient reaching the input (layer 0) against depth L = {Ls[0]}..{Ls[-1]},\n"
        f"at initialization ({inits} init)",
        xlabel="depth L (blocks)",
        ylabel="||dL/dx_0||",
        series=tuple(series),
        xscale="log",
        yscale="log",
        notes=(note,),
    )
