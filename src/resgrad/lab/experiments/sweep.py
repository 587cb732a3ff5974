"""Sweeps of the gradient-flow lab: variants x depths x widths x seeds, in parallel.

Legend: L = depth, C = width, K = number of seeds.

Each point of the grid is one stack at one seed, measured by
:func:`resgrad.lab.flow.core.profile`; it gives one row per layer (``stream_grad``,
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

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from resgrad.formats.atomic import atomic_write_text, remove_stale_temporaries
from resgrad.formats.lock import hold_lock, lock_path_for
from resgrad.formats.records import to_csv, to_json
from resgrad.lab.experiments.grid import (
    _check_writable,
    check_backend,
    connected,
    run_grid,
    sidecar_path,
)
from resgrad.lab.flow.core import LOSSES, FlowConfig, positive_ints, profile, seed_tuple
from resgrad.plots import PlotSpec, Series, plot_format, save_plot

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

    variants: tuple[str, ...] = ("pre-ln", "post-ln")  # resgrad.lab.flow.core.all_variants()
    depths: tuple[int, ...] = (2, 4, 8, 16)  # L values
    widths: tuple[int, ...] = (32,)  # C values; each divisible by heads
    seeds: tuple[int, ...] = (0, 1)  # one grid point each; a count K means seeds 0..K-1
    heads: int = 4  # H
    seq: int = 16  # T
    batch: int = 4  # B
    init: str = "gpt2"
    loss: str = "lm"  # one of resgrad.lab.flow.core.LOSSES
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


def _job(cfg: FlowConfig) -> list[dict]:
    # looked up by name at call time, so that a test can wrap run_point
    return run_point(cfg)


def rows_to_csv(rows: Sequence[dict]) -> str:
    """Rows as CSV with a header; floats by ``repr`` (full precision), None as empty."""
    return to_csv(rows, ROW_FIELDS)


def rows_to_json(rows: Sequence[dict]) -> str:
    """Rows as a JSON list of objects (full float precision, None as null)."""
    return to_json(rows, ROW_FIELDS)


@dataclass(frozen=True)
class SweepResult:
    """What :func:`run_sweep` produced."""

    rows: list[dict]  # every row of the grid, in grid order then layer order
    computed: int  # points computed by this run
    resumed: int  # points taken from a previous, interrupted run's sidecar
    plot: PlotSpec | None  # the summary plot as drawn, if one was asked for


def require_memory(cfg: SweepConfig, jobs: int | None = None) -> None:
    """Refuse, in one line, a sweep whose ``jobs`` workers at once (default: every core)
    cannot hold their points in memory, each estimated at the largest point's size."""
    from resgrad.perf import memory

    jobs = min(jobs or os.cpu_count() or 1, len(cfg.points()))
    per_point = max(memory.flow_bytes(p) for p in cfg.points())
    memory.require(jobs * per_point, f"this sweep ({jobs} worker(s) at once, depth up to "
                   f"{max(cfg.depths)}, width up to {max(cfg.widths)})")  # fmt: skip


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

    # one sweep at a time writes OUT (and its sidecar): a second fails at once, naming the holder
    with (
        connected(backend, scheduler, connect_timeout) as client,
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
