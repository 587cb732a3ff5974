"""Dashboards: a run's losses and per-layer dynamics in TensorBoard, wandb and trackio.

Legend: L = n_layer.

``resgrad train --log-to tensorboard`` (or ``wandb``, ``trackio``, several at once)
sends, as training goes, what :mod:`resgrad.train.dynamics` records at every step,
the evaluations' losses, and every ``hist_every`` steps the histograms of each
parameter and its gradient, under these names:

=============================  =========================================================
``train/loss``                 the step's batch loss (before the update)
``train/lr``                   the step's learning rate
``train/grad_norm``            the global gradient norm before clipping
``train/clipped``              1 when clipping scaled the gradients down, else 0
``eval/train_loss``            at each evaluation: the mean loss of ``eval_iters``
``eval/val_loss``              batches of each split
``<q>/block_<i>``              per block i, each quantity q of the dynamics records:
                               grad, grad_attn, grad_mlp, grad_ln, update, act_rms,
                               stream_grad (``stream_grad/output``: after the last block)
``weights/<name>``             histogram of parameter ``<name>`` at the step, before its update
``gradients/<name>``           histogram of its gradient at the step, before clipping
=============================  =========================================================

Block numbers are zero-padded (``block_07``) so that they sort. The step of every
value is the iteration it belongs to (an evaluation "at iteration it" is logged at
step it, before step it's own values). ``weights/`` and ``gradients/`` are the
names ``wandb.watch`` gives its histograms; a histogram has 64 equal-width buckets
from the tensor's min to its max.

TensorBoard's scalars tab groups the tags by their prefix (one section per
quantity, one chart per block); the run also carries a custom-scalars layout
(the "Custom Scalars" tab) with one chart per quantity and one line per block.
Event files are written by :class:`resgrad.formats.events.EventFile` into
``RUN/tb`` (or ``LogConfig.dir``), fsynced at each checkpoint; a resume first
trims them back to the checkpoint's iteration (:func:`resgrad.formats.events.trim_events`),
so that no step appears twice and none is missing. :func:`export_tensorboard`
writes the same scalars afterwards, from a run's ``dynamics.bin`` and
``metrics.jsonl``.

wandb and trackio take the same ``init / log / finish`` calls: offline by
default (wandb's ``mode="offline"`` in ``RUN/wandb``, trackio's local database),
named after the run, with the run's settings as their config. Each is an
optional extra, imported only when asked for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from resgrad.formats.atomic import atomic_write_text, staged_dir
from resgrad.formats.events import EventFile, event_files, require_tensorboardx, trim_events
from resgrad.train.dynamics import DYNAMICS_HEADER, PER_BLOCK, read_dynamics
from resgrad.train.rundir import read_metrics

__all__ = [
    "EVAL_TAGS",
    "HIST_BINS",
    "LOG_TO",
    "STEP_TAGS",
    "TB_DIR",
    "Histogram",
    "LogConfig",
    "TensorBoard",
    "Tracker",
    "WandbLike",
    "block_tag",
    "cell_dirs",
    "config_for",
    "eval_scalars",
    "export_many",
    "export_tensorboard",
    "histogram",
    "open_trackers",
    "param_histograms",
    "require",
    "scalar_layout",
    "step_scalars",
]

LOG_TO = ("tensorboard", "wandb", "trackio")
EXTRAS = {  # what each tracker needs, and the extra that installs it
    "tensorboard": ("tensorboardX", 'pip install "resgrad[tensorboard]"'),
    "wandb": ("wandb", 'pip install "resgrad[wandb]"'),
    "trackio": ("trackio", 'pip install "resgrad[trackio]"'),
}
TB_DIR = "tb"  # the run's TensorBoard log directory, inside its out_dir
HIST_BINS = 64
STEP_TAGS = {"train/loss": "loss", "train/lr": "lr", "train/grad_norm": "grad_norm",
             "train/clipped": "clipped"}  # fmt: skip
EVAL_TAGS = {"eval/train_loss": "train_loss", "eval/val_loss": "val_loss"}


@dataclass(frozen=True)
class LogConfig:
    """Where a run's values go besides its own files: ``resgrad train --log-to ...``."""

    to: tuple[str, ...] = ()  # any of LOG_TO
    dir: str | None = None  # TensorBoard's log directory (default: <out_dir>/tb)
    hist_every: int = 100  # steps between parameter and gradient histograms; 0: none
    name: str | None = None  # the run's name in wandb / trackio (default: out_dir's name)
    project: str = "resgrad"  # the wandb / trackio project
    own_dir: bool = False  # dir is the run's alone (an experiment cell's), as the default is

    def __post_init__(self):
        to = (self.to,) if isinstance(self.to, str) else tuple(self.to)
        for t in to:
            if t not in LOG_TO:
                raise ValueError(f"log_to {t!r} is not a tracker; expected one of {LOG_TO}")
        if len(set(to)) != len(to):
            raise ValueError(f"log_to names a tracker twice: {', '.join(to)}")
        object.__setattr__(self, "to", to)
        h = self.hist_every
        if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or h < 0:
            raise ValueError(f"hist_every must be an integer >= 0 (0: no histograms), got {h!r}")

    def tensorboard_dir(self, out_dir: str) -> str:
        return self.dir if self.dir is not None else os.path.join(out_dir, TB_DIR)

    def cell(self, name: str, out_dir: str, project: str) -> LogConfig:
        """This config for one cell of an experiment: its own name and log directory."""
        base = self.tensorboard_dir(out_dir)
        return dataclasses.replace(self, dir=os.path.join(base, name), name=name, project=project,
                                   own_dir=True)  # fmt: skip


# --------------------------------------------------------------------------- names, values


def block_tag(quantity: str, i: int, n_layer: int) -> str:
    """The name of block i's value of ``quantity``: ``grad/block_03``; ``stream_grad/output``."""
    if quantity == "stream_grad" and i == n_layer:
        return "stream_grad/output"
    return f"{quantity}/block_{i:0{max(2, len(str(n_layer - 1)))}d}"


def step_scalars(record: np.ndarray) -> dict[str, float]:
    """Every scalar of one step, named, from its dynamics record (float32 values, exact)."""
    n_layer = record["grad"].shape[0]
    out = {tag: float(record[field]) for tag, field in STEP_TAGS.items()}
    for q in PER_BLOCK:
        for i, v in enumerate(record[q].tolist()):  # (L,) or (L + 1,)
            out[block_tag(q, i, n_layer)] = v
    return out


def eval_scalars(record: Mapping) -> dict[str, float]:
    """An evaluation's losses, named, from its ``metrics.jsonl`` record."""
    return {tag: float(record[field]) for tag, field in EVAL_TAGS.items()}


def scalar_layout(n_layer: int) -> dict[str, dict[str, list[str]]]:
    """TensorBoard's custom-scalars layout: per quantity, one chart with a line per block."""
    charts = {}
    for q in PER_BLOCK:
        n = n_layer + 1 if q == "stream_grad" else n_layer
        charts[q] = [block_tag(q, i, n_layer) for i in range(n)]
    return {"resgrad: per block": charts, "resgrad: training": {
        "loss": ["train/loss", "eval/train_loss", "eval/val_loss"],
        "gradient norm": ["train/grad_norm"]}}  # fmt: skip


@dataclass(frozen=True)
class Histogram:
    """A tensor's values in HIST_BINS equal buckets from its min to its max."""

    counts: np.ndarray  # (HIST_BINS,) int64, or (1,) when every value is the same
    edges: np.ndarray  # (len(counts) + 1,) float64
    num: int
    sum: float
    sum_squares: float


def histogram(a: np.ndarray) -> Histogram:
    """The histogram of ``a``'s values (float64 sums; a constant tensor is one bucket)."""
    v = np.asarray(a).ravel()  # (n,)
    lo, hi = float(v.min()), float(v.max())
    if lo == hi:
        counts, edges = np.array([v.size]), np.array([lo, hi])
    else:
        counts, edges = np.histogram(v, bins=HIST_BINS, range=(lo, hi))  # (64,), (65,)
    v64 = v.astype(np.float64)
    return Histogram(counts.astype(np.int64), edges, v.size, float(v64.sum()),
                     float(np.dot(v64, v64)))  # fmt: skip


# --------------------------------------------------------------------------- trackers


class Tracker:
    """What the training loop calls; each dashboard implements it."""

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        raise NotImplementedError

    def histograms(self, step: int, hists: Mapping[str, Histogram]) -> None:
        raise NotImplementedError

    def sync(self) -> None:
        """Make what was logged so far durable: called before each checkpoint."""

    def close(self) -> None:
        pass


class TensorBoard(Tracker):
    """Event files in ``logdir``, for ``tensorboard --logdir``.

    ``start`` > 0 (a resume): the directory's events of steps >= ``start`` are dropped
    first, and the new file opens with a purge at ``start`` for a TensorBoard already
    watching. A fresh run (``start`` 0) finds event files in the directory only where a
    run was killed before its first checkpoint: in its ``own`` directory they are that
    run's and go; in a directory given to it (``--log-dir``) they may be another run's,
    and it is refused. ``wall_time`` (an export):
    the events' times are given, not the clock's.
    """

    def __init__(self, logdir: str, n_layer: int, start: int = 0, wall_time: float | None = None,
                 own: bool = True):  # fmt: skip
        require_tensorboardx()
        from tensorboardX.proto.event_pb2 import Event, SessionLog
        from tensorboardX.summary import custom_scalars

        self._Event = Event
        self.logdir = logdir
        if start > 0:
            trim_events(logdir, start)
        elif wall_time is None and event_files(logdir):  # a fresh run's would mix with them
            if not own:
                raise ValueError(
                    f"{logdir!r} already holds TensorBoard event files (another run's); a "
                    "fresh run logs into a directory of its own: choose another --log-dir"
                )
            for path in event_files(logdir):  # its own: a run killed before its first
                os.unlink(path)  # checkpoint left them, and a fresh run starts over
        self.file = EventFile(logdir, wall_time)
        self.wall_time = wall_time
        if start > 0:
            self._write(start, session_log=SessionLog(status=SessionLog.START))
        layout = {cat: {chart: ["Multiline", tags] for chart, tags in charts.items()}
                  for cat, charts in scalar_layout(n_layer).items()}  # fmt: skip
        self._write(start, summary=custom_scalars(layout))

    def _write(self, step: int, **what) -> None:
        wall = time.time() if self.wall_time is None else self.wall_time
        self.file.write(self._Event(wall_time=wall, step=step, **what))

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        from tensorboardX.proto.summary_pb2 import Summary

        summary = Summary(value=[Summary.Value(tag=k, simple_value=v) for k, v in values.items()])
        self._write(step, summary=summary)  # one event per call: every value of the step

    def histograms(self, step: int, hists: Mapping[str, Histogram]) -> None:
        from tensorboardX.proto.summary_pb2 import HistogramProto, Summary

        values = []
        for tag, h in hists.items():
            proto = HistogramProto(min=h.edges[0], max=h.edges[-1], num=h.num, sum=h.sum,
                                   sum_squares=h.sum_squares, bucket_limit=h.edges[1:].tolist(),
                                   bucket=h.counts.tolist())  # fmt: skip
            values.append(Summary.Value(tag=tag, histo=proto))
        self._write(step, summary=Summary(value=values))

    def sync(self) -> None:
        self.file.sync()

    def close(self) -> None:
        self.file.close()


class WandbLike(Tracker):
    """wandb or trackio through their common ``init / log / finish``, offline.

    wandb: ``mode="offline"`` (``WANDB_MODE`` overrides it), files in ``out_dir/wandb``;
    a resumed run continues the same run id (kept in ``out_dir/wandb/resgrad-run-id``).
    trackio: its local database (``TRACKIO_DIR``), the run resumed by name; its
    messages go to stderr, so that stdout keeps the command's own output.
    """

    def __init__(self, kind: str, name: str, config: dict, out_dir: str, project: str,
                 start: int = 0):  # fmt: skip
        self.kind = kind
        if kind == "wandb":
            import wandb

            self.mod = wandb
            id_path = os.path.join(out_dir, "wandb", "resgrad-run-id")
            run_id = None
            if start > 0 and os.path.exists(id_path):
                with open(id_path, encoding="utf-8") as f:
                    run_id = f.read().strip() or None
            run_id = run_id or uuid.uuid4().hex[:8]  # wandb's own ids: 8 of [0-9a-z]
            os.makedirs(os.path.dirname(id_path), exist_ok=True)
            atomic_write_text(id_path, run_id + "\n")
            self.run = wandb.init(project=project, name=name, config=config, dir=out_dir,
                                  mode=os.environ.get("WANDB_MODE", "offline"), id=run_id,
                                  resume="allow")  # fmt: skip
        else:
            import trackio

            self.mod = trackio
            with contextlib.redirect_stdout(sys.stderr):
                self.run = trackio.init(project=project, name=name, config=config,
                                        resume="allow" if start > 0 else "never",
                                        auto_log_cpu=False, auto_log_gpu=False)  # fmt: skip

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        self.run.log(dict(values), step=step)

    def histograms(self, step: int, hists: Mapping[str, Histogram]) -> None:
        H = self.mod.Histogram
        self.run.log({k: H(np_histogram=(h.counts, h.edges)) for k, h in hists.items()}, step=step)

    def close(self) -> None:
        with contextlib.redirect_stdout(sys.stderr):
            if self.kind == "wandb":
                self.run.finish()
                self.mod.teardown()  # waits until its service has written the run file whole
            else:
                self.mod.finish()  # trackio's module-level finish: it ends its run too


def require(trackers: Iterable[str]) -> None:
    """Raise ValueError (one line: what to install) unless every tracker's library is there."""
    import importlib.util

    for t in trackers:
        module, extra = EXTRAS[t]
        if importlib.util.find_spec(module) is None:
            raise ValueError(f"--log-to {t} needs {module}, which is not installed; {extra}")


def open_trackers(log: LogConfig, out_dir: str, n_layer: int, start: int,
                  config: dict) -> list[Tracker]:  # fmt: skip
    """The trackers ``log`` asks for, opened for the run in ``out_dir`` at step ``start``."""
    require(log.to)
    name = log.name or os.path.basename(os.path.abspath(out_dir))
    out: list[Tracker] = []
    try:
        for t in log.to:
            if t == "tensorboard":
                own = log.dir is None or log.own_dir
                out.append(TensorBoard(log.tensorboard_dir(out_dir), n_layer, start, own=own))
            else:
                out.append(WandbLike(t, name, config, out_dir, log.project, start))
    except BaseException:
        for tr in out:
            tr.close()
        raise
    return out


def param_histograms(prefix: str, arrays: Mapping[str, np.ndarray]) -> dict[str, Histogram]:
    """``<prefix>/<name>`` (``weights``, ``gradients``) for every array, in the model's order."""
    return {f"{prefix}/{k}": histogram(a) for k, a in arrays.items()}


# --------------------------------------------------------------------------- after the fact


def export_tensorboard(run_dir: str, logdir: str | None = None, *,
                       force: bool = False) -> tuple[str, int, int]:  # fmt: skip
    """Write a finished (or running) run's scalars as TensorBoard event files.

    From ``dynamics.bin`` every step's values and from ``metrics.jsonl`` every
    evaluation, under the names and steps :func:`resgrad.train.loop.train` logs
    live (no histograms: the records hold none). An event's wall time is the
    training time before its step, summed from ``metrics.jsonl``'s step times, so
    TensorBoard's "relative" axis is training time and the file's bytes are the same
    every time. ``logdir`` (default ``run_dir/tb``) is written as a whole
    (:func:`resgrad.formats.atomic.staged_dir`); one that is not empty is refused
    unless ``force``.

    Returns (logdir, steps written, evaluations written).

    Raises
    ------
    ValueError
        ``run_dir`` holds no dynamics records, or ``logdir`` is not empty (without
        ``force``).
    """
    dyn = read_dynamics(run_dir)
    logdir = logdir if logdir is not None else os.path.join(run_dir, TB_DIR)
    records = read_metrics(run_dir)
    evals = {r["iter"]: r for r in records if r["kind"] == "eval"}
    ms = {r["iter"]: r.get("ms") or 0.0 for r in records if r["kind"] == "iter"}
    steps = [int(s) for s in dyn.steps]
    last = max([*steps, *evals], default=-1)
    elapsed, t = {}, 0.0  # iteration -> seconds of training before it
    for it in range(last + 1):
        elapsed[it] = t
        t += ms.get(it, 0.0) / 1e3
    by_step = dict(zip(steps, dyn.records))
    try:
        with staged_dir(logdir, replace=force) as stage:
            tb = TensorBoard(stage, dyn.n_layer, wall_time=0.0)
            try:
                for it in range(last + 1):
                    tb.wall_time = elapsed[it]
                    if it in evals:
                        tb.scalars(it, eval_scalars(evals[it]))
                    if it in by_step:
                        tb.scalars(it, step_scalars(by_step[it]))
            finally:
                tb.close()
    except FileExistsError:
        raise ValueError(
            f"{logdir!r} already holds files (a live --log-to tensorboard run's, or an earlier "
            "export); pass --force (force=True) to replace it, or choose another directory"
        ) from None
    return logdir, len(steps), len(evals)


def cell_dirs(exp_dir: str) -> list[tuple[str, str]]:
    """(cell name, run directory) of every cell of an experiment directory that has records."""
    runs = os.path.join(exp_dir, "runs")
    if not os.path.isdir(runs):
        return []
    return [(n, os.path.join(runs, n)) for n in sorted(os.listdir(runs))
            if os.path.exists(os.path.join(runs, n, DYNAMICS_HEADER))]  # fmt: skip


def export_many(cells: Sequence[tuple[str, str]], logdir: str, *, force: bool = False) -> list:
    """:func:`export_tensorboard` of each (name, run directory) into ``logdir/<name>``."""
    return [export_tensorboard(d, os.path.join(logdir, n), force=force) for n, d in cells]


def config_for(cfg) -> dict:
    """A run's settings as the trackers' config (JSON types only)."""
    return json.loads(json.dumps(dataclasses.asdict(cfg), default=str))
