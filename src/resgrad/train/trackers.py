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

Every dashboard names the run after its output directory (``--out-dir out/`` is the run
``out``), or ``LogConfig.name``. TensorBoard's log directory (``RUN/tb``, or
``LogConfig.dir``) holds one subdirectory per run, named so (``RUN/tb/<name>``, an
experiment's ``EXP/tb/<cell>``): ``tensorboard --logdir RUN/tb`` lists the run by its
name, and runs logged into one ``--log-dir`` sit side by side. Its scalars tab groups
the tags by their prefix (one section per quantity, one chart per block); the run also
carries a custom-scalars layout (the "Custom Scalars" tab) with one chart per quantity
and one line per block, each block its own tag (an exact regex), which the chart's
legend (its "Matches" list) names. TensorBoard colours a line by its run, in both tabs:
within a run the blocks' lines share the run's colour and differ by their marker (it
cycles through five), so that in an experiment's charts each cell has its colour.

Event files are written by :class:`resgrad.formats.events.EventFile`, fsynced at each
checkpoint. The records (``dynamics.bin``, ``metrics.jsonl``) are the truth and the
dashboards a view of them: a resumed run rebuilds its event files up to the checkpoint
(:func:`resume_history`), keeping every sound event and writing again, from the records,
every scalar that a damaged, cut or missing event file lost; no step appears twice and
none is missing; what was damaged is said in one line, with the histograms that no record
can give back. :func:`export_tensorboard` writes the same scalars afterwards, from the
records alone (the same :func:`record_scalars`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from resgrad.formats.atomic import atomic_write_text, holds, staged_dir
from resgrad.formats.events import (
    EventFile,
    event_files,
    import_extra,
    require_tensorboardx,
    salvage_events,
)
from resgrad.train.dynamics import DYNAMICS_BIN, DYNAMICS_HEADER, PER_BLOCK, read_dynamics
from resgrad.train.rundir import METRICS, read_metrics

__all__ = [
    "EVAL_TAGS",
    "HIST_BINS",
    "LAYOUT_TAG",
    "LOG_TO",
    "STEP_TAGS",
    "TB_DIR",
    "Exported",
    "Histogram",
    "LogConfig",
    "TensorBoard",
    "Tracker",
    "WandbLike",
    "block_tag",
    "cell_dirs",
    "check_log_dir",
    "config_for",
    "eval_scalars",
    "export_many",
    "export_runs",
    "export_tensorboard",
    "histogram",
    "open_trackers",
    "param_histograms",
    "record_scalars",
    "require",
    "resume_history",
    "run_name",
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
LAYOUT_TAG = "custom_scalars__config__"  # the summary that carries the custom-scalars layout


@dataclass(frozen=True)
class LogConfig:
    """Where a run's values go besides its own files: ``resgrad train --log-to ...``."""

    to: tuple[str, ...] = ()  # any of LOG_TO
    dir: str | None = None  # TensorBoard's log directory, a run per subdirectory (<out_dir>/tb)
    hist_every: int = 100  # steps between parameter and gradient histograms; 0: none
    name: str | None = None  # the run's name in every dashboard (default: out_dir's name)
    project: str = "resgrad"  # the wandb / trackio project
    own_dir: bool = False  # dir/<name> is the run's alone (an experiment cell's), as by default

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
        n = self.name
        if n is not None and (n in ("", ".", "..") or "/" in n or os.sep in n):
            raise ValueError(f"run name {n!r} cannot name TensorBoard's run directory; "
                             "expected a name without '/', not '.' or '..'")  # fmt: skip

    def tensorboard_dir(self, out_dir: str) -> str:
        """The directory to give ``tensorboard --logdir``: it holds the run's directory."""
        return self.dir if self.dir is not None else os.path.join(out_dir, TB_DIR)

    def tensorboard_run(self, out_dir: str) -> str:
        """The run's own directory of event files: ``<tensorboard_dir>/<its name>``."""
        return os.path.join(self.tensorboard_dir(out_dir), run_name(out_dir, self.name))

    def cell(self, name: str, out_dir: str, project: str) -> LogConfig:
        """This config for one cell of an experiment: a run of its own, named after it."""
        return dataclasses.replace(self, dir=self.tensorboard_dir(out_dir), name=name,
                                   project=project, own_dir=True)  # fmt: skip


def run_name(out_dir: str, name: str | None = None) -> str:
    """A run's name in every dashboard: ``name``, else its output directory's own name
    (``out``, ``out/``, ``./out/`` and ``/abs/out`` are all ``out``)."""
    return name if name is not None else os.path.basename(os.path.abspath(out_dir))


def check_log_dir(path: str) -> None:
    """Refuse, in one line naming ``path``, a TensorBoard log directory that cannot be
    made: a file, under a file, or in a directory that cannot be written (tried with a
    temporary directory, removed at once: a permission bit alone does not tell, e.g.
    for root or on a read-only filesystem). Called before a run starts.

    Raises
    ------
    NotADirectoryError, PermissionError
    """
    full = os.path.abspath(path)
    if os.path.lexists(full) and not os.path.isdir(full):
        raise NotADirectoryError(f"--log-dir {path!r} is a file; expected a directory "
                                 "(or a new name)")  # fmt: skip
    up = full
    while not os.path.lexists(up):  # the nearest ancestor that exists
        up = os.path.dirname(up)
    if not os.path.isdir(up):
        raise NotADirectoryError(f"--log-dir {path!r} is under {up!r}, which is a file; "
                                 "expected a directory")  # fmt: skip
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".resgrad-probe-", dir=up))
    except OSError as e:
        raise PermissionError(f"--log-dir {path!r}: {up!r} cannot be written ({e.strerror}); "
                              "expected a directory you can write to") from None  # fmt: skip


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
    """TensorBoard's custom-scalars layout: per quantity, one chart with a line per block,
    and the step's own values; every tag a run logs is in one chart.

    Each entry is a regex that TensorBoard matches from the tag's start: escaped and
    anchored, so that it is the one tag.
    """
    charts = {}
    for q in PER_BLOCK:
        n = n_layer + 1 if q == "stream_grad" else n_layer
        charts[q] = [block_tag(q, i, n_layer) for i in range(n)]
    training = {"loss": ["train/loss", *EVAL_TAGS], "gradient norm": ["train/grad_norm"],
                "learning rate": ["train/lr"], "clipped": ["train/clipped"]}  # fmt: skip
    layout = {"resgrad: per block": charts, "resgrad: training": training}
    return {cat: {chart: [re.escape(t) + "$" for t in tags] for chart, tags in group.items()}
            for cat, group in layout.items()}  # fmt: skip


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
    """Event files in ``logdir``, the run's own directory (``<--logdir>/<run name>``).

    A fresh run finds event files in ``logdir`` only where a run was killed before its
    first checkpoint: in its ``own`` directory they are that run's and go; in a
    directory given to it (``--log-dir``) they may be another run's, and it is refused.
    A resumed run passes its ``history`` (:func:`resume_history`): the new file opens with
    a purge of every step (``SessionLog.START`` at 0, for a TensorBoard already watching),
    the layout and the history, fsynced, and only then are the old files removed: a kill
    in between leaves both, which the next resume reads as one. ``wall_time`` (an
    export): the events' times are given, not the clock's.
    """

    def __init__(self, logdir: str, n_layer: int, wall_time: float | None = None,
                 own: bool = True, history: Sequence | None = None):  # fmt: skip
        require_tensorboardx()
        from tensorboardX.proto.event_pb2 import Event, SessionLog
        from tensorboardX.summary import custom_scalars

        self._Event = Event
        self.logdir = logdir
        old = event_files(logdir)
        if history is None and wall_time is None and old:  # a fresh run's would mix with them
            if not own:
                raise ValueError(
                    f"{logdir!r} already holds TensorBoard event files (another run's); a "
                    "fresh run logs into a directory of its own: choose another --log-dir "
                    "or --run-name"
                )
            for path in old:  # its own: a run killed before its first
                os.unlink(path)  # checkpoint left them, and a fresh run starts over
        self.file = EventFile(logdir, wall_time)
        self.wall_time = wall_time
        if history is not None:
            self._write(0, session_log=SessionLog(status=SessionLog.START))
        layout = {cat: {chart: ["Multiline", tags] for chart, tags in charts.items()}
                  for cat, charts in scalar_layout(n_layer).items()}  # fmt: skip
        self._write(0, summary=custom_scalars(layout))
        if history is not None:
            for event in history:
                self.file.write(event)
            self.file.sync()  # the history is on disk before the files it came from go
            for path in old:
                os.unlink(path)

    def _write(self, step: int, **what) -> None:
        wall = time.time() if self.wall_time is None else self.wall_time
        self.file.write(self._Event(wall_time=wall, step=step, **what))

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        self._write(step, summary=_summary(values))  # one event per call: every value of the step

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


def _summary(values: Mapping[str, float]):
    """A ``Summary`` of scalars, one value per tag."""
    from tensorboardX.proto.summary_pb2 import Summary

    return Summary(value=[Summary.Value(tag=k, simple_value=v) for k, v in values.items()])


class WandbLike(Tracker):
    """wandb or trackio through their common ``init / log / finish``, offline.

    wandb: ``mode="offline"`` (``WANDB_MODE`` overrides it), files in ``out_dir/wandb``;
    a resumed run continues the same run id (kept in ``out_dir/wandb/resgrad-run-id``),
    a fresh one gets a new id. trackio: its local database (``TRACKIO_DIR``); a resumed
    run continues the run of its name, a fresh one is a new run even where an older run
    has the same name. Their messages go to stderr, so that stdout keeps the command's
    own output.
    """

    def __init__(self, kind: str, name: str, config: dict, out_dir: str, project: str,
                 resume: bool = False):  # fmt: skip
        self.kind = kind
        if kind == "wandb":
            import wandb

            self.mod = wandb
            id_path = os.path.join(out_dir, "wandb", "resgrad-run-id")
            run_id = None
            if resume and os.path.exists(id_path):
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
                                        resume="allow" if resume else "never",
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
    """Raise ValueError (one line) unless every tracker's library imports: what to install
    when it is absent, the error it raised when it is there but fails to import."""
    for t in trackers:
        module, extra = EXTRAS[t]
        import_extra(module, f"--log-to {t}", extra)


def open_trackers(log: LogConfig, out_dir: str, n_layer: int, start: int, config: dict, *,
                  resume: bool = False,
                  say: Callable[[str], None] | None = None) -> list[Tracker]:  # fmt: skip
    """The trackers ``log`` asks for, opened for the run in ``out_dir`` at step ``start``.

    ``resume``: the run continues from its checkpoint at ``start`` (0 too: killed after
    its first checkpoint); TensorBoard's history is rebuilt (:func:`resume_history`) and
    ``say`` is told, in one line, what was damaged.
    """
    require(log.to)
    name = run_name(out_dir, log.name)
    out: list[Tracker] = []
    try:
        for t in log.to:
            if t == "tensorboard":
                logdir, history = log.tensorboard_run(out_dir), None
                if resume:
                    history, damage = resume_history(logdir, out_dir, start, log.hist_every)
                    if damage is not None and say is not None:
                        say(damage)
                own = log.dir is None or log.own_dir
                out.append(TensorBoard(logdir, n_layer, own=own, history=history))
            else:
                out.append(WandbLike(t, name, config, out_dir, log.project, resume))
    except BaseException:
        for tr in out:
            tr.close()
        raise
    return out


def param_histograms(prefix: str, arrays: Mapping[str, np.ndarray]) -> dict[str, Histogram]:
    """``<prefix>/<name>`` (``weights``, ``gradients``) for every array, in the model's order."""
    return {f"{prefix}/{k}": histogram(a) for k, a in arrays.items()}


# --------------------------------------------------------------------------- from the records


Scalars = tuple[int, float, dict[str, float]]  # (step, seconds of training before it, values)


def record_scalars(records: Sequence[np.ndarray], metrics: Sequence[Mapping]) -> Iterator[Scalars]:
    """Every scalar a live run logs, rebuilt from its records, in the order it logs them.

    ``records``: the dynamics records (:func:`resgrad.train.dynamics.read_dynamics`);
    ``metrics``: ``metrics.jsonl``'s records. Yields (step, seconds of training before the
    step, the values): at each iteration its evaluation, then its step's values, under the
    names and steps :func:`resgrad.train.loop.train` logs. The seconds are summed from
    ``metrics.jsonl``'s step times, so that they depend on nothing but the records.
    """
    evals = {r["iter"]: r for r in metrics if r["kind"] == "eval"}
    ms = {r["iter"]: r.get("ms") or 0.0 for r in metrics if r["kind"] == "iter"}
    by_step = {int(r["step"]): r for r in records}
    t = 0.0  # seconds of training before iteration it
    for it in sorted({*evals, *by_step, *ms}):
        if it in evals:
            yield it, t, eval_scalars(evals[it])
        if it in by_step:
            yield it, t, step_scalars(by_step[it])
        t += ms.get(it, 0.0) / 1e3


def _spans(steps: Iterable[int]) -> str:
    """Steps as ranges: ``0-49, 60, 70-71``."""
    out, run = [], []
    for s in sorted(steps):
        if run and s == run[-1] + 1:
            run.append(s)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else f"{run[0]}")
        run = [s]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else f"{run[0]}")
    return ", ".join(out)


def resume_history(logdir: str, run_dir: str, start: int,
                   hist_every: int) -> tuple[list, str | None]:  # fmt: skip
    """What a resumed run's event files must hold before ``start``, and what was lost.

    Every sound event of ``logdir``'s files before ``start`` is kept as it was (its time,
    its values; a (tag, step) that comes twice, once), and every scalar of a step before
    ``start`` that they lack is written again from the run's records in ``run_dir``
    (:func:`record_scalars`), timed by training time from the old files' first event.
    Returns (the events, in step order; one line saying what was damaged or missing and
    what was rebuilt, or None when nothing was). The line names the histograms, every
    ``hist_every`` steps, that no event file holds any more: no record can give them back.
    """
    from tensorboardX.proto.event_pb2 import Event

    old, damage = salvage_events(logdir)
    if start > 0 and not event_files(logdir):
        damage = ["no event file"]
    kept, have, hist_steps = [], set(), set()
    for ev in old:
        if ev.step >= start or not ev.HasField("summary"):  # the redone steps, file versions,
            continue  # purges: the new file writes its own
        values = [v for v in ev.summary.value
                  if v.tag != LAYOUT_TAG and (v.tag, ev.step) not in have]  # fmt: skip
        if values:
            have.update((v.tag, ev.step) for v in values)
            hist_steps.update(ev.step for v in values if v.HasField("histo"))
            del ev.summary.value[:]
            ev.summary.value.extend(values)
            kept.append(ev)
    try:
        records = read_dynamics(run_dir).records
    except ValueError:  # no records, or not resgrad's: the dynamics writer says so
        records = []
    lost = []  # (step, seconds, values the event files lack)
    for step, seconds, values in record_scalars(records, read_metrics(run_dir)):
        missing = {k: v for k, v in values.items() if (k, step) not in have}
        if step < start and missing:
            lost.append((step, seconds, missing))
    first = min((e.wall_time for e in old), default=None)
    base = first if first is not None else time.time() - (lost[-1][1] if lost else 0.0)
    rebuilt = [Event(wall_time=base + t, step=step, summary=_summary(v)) for step, t, v in lost]
    history = sorted(kept + rebuilt, key=lambda e: e.step)  # stable: a step's own order kept
    if not damage and not lost:
        return history, None
    said = list(damage)
    steps = {s for s, _, _ in lost}
    if steps:
        said.append(f"the scalars of step{'s' * (len(steps) > 1)} {_spans(steps)} written "
                    f"again from {DYNAMICS_BIN} and {METRICS}")  # fmt: skip
    else:
        said.append(f"every scalar before step {start} was kept")
    gone = sorted(set(range(0, start, hist_every)) - hist_steps) if hist_every else []
    if gone:
        said.append(f"the histograms of step{'s' * (len(gone) > 1)} {_spans(gone)} are missing "
                    "(the records hold none)")  # fmt: skip
    return history, f"TensorBoard {logdir}: {'; '.join(said)}"


class Exported(NamedTuple):
    """What :func:`export_tensorboard` wrote for one run."""

    run_dir: str  # the run whose records were written
    path: str  # the run's directory of event files, <logdir>/<run name>
    steps: int  # steps written
    evals: int  # evaluations written
    damage: str | None  # dynamics.bin's damage (the records before it were written), if any


def export_tensorboard(run_dir: str, logdir: str | None = None, *,
                       force: bool = False) -> Exported:  # fmt: skip
    """Write a finished (or running) run's scalars as TensorBoard event files.

    From ``dynamics.bin`` every step's values and from ``metrics.jsonl`` every
    evaluation (:func:`record_scalars`), under the names and steps
    :func:`resgrad.train.loop.train` logs live (no histograms: the records hold none),
    into ``logdir/<run name>`` (``logdir`` default ``run_dir/tb``), so that ``tensorboard
    --logdir logdir`` lists the run by its name. An event's wall time is the training
    time before its step, so that TensorBoard's "relative" axis is training time and the
    file's bytes are the same every time. ``logdir`` is written as a whole
    (:func:`export_many`).

    Raises
    ------
    ValueError
        ``run_dir`` holds no dynamics records; ``logdir`` is ``run_dir`` or holds it;
        ``logdir`` holds a file that is no event file; ``logdir`` is not empty (without
        ``force``).
    """
    logdir = logdir if logdir is not None else os.path.join(run_dir, TB_DIR)
    return export_many([(run_name(run_dir), run_dir)], logdir, force=force)[0]


def export_many(cells: Sequence[tuple[str, str]], logdir: str, *,
                force: bool = False) -> list[Exported]:  # fmt: skip
    """:func:`export_tensorboard` of each (name, run directory) into ``logdir/<name>``.

    ``logdir`` is written as a whole (:func:`resgrad.formats.atomic.staged_dir`): a kill
    leaves the old one or the new one. ``force`` replaces an existing ``logdir`` only if
    it holds nothing but event files, in run subdirectories or not (an earlier export, a
    live run's logs), and never when it is, or holds, a run directory the export reads
    (nor, so, the experiment directory that holds them).
    """
    for _, src in cells:
        if holds(logdir, src):
            same = os.path.realpath(logdir) == os.path.realpath(src)
            raise ValueError(
                f"{logdir!r} {'is' if same else 'holds'} {src!r}, which the export reads; "
                "an export's directory is replaced whole: choose another directory "
                f"(default: {os.path.join(src, TB_DIR)})"
            )
    replace = _check_export_dir(logdir, force)
    done = []
    with staged_dir(logdir, replace=replace) as stage:
        for name, run_dir in cells:
            done.append(_export_run(run_dir, os.path.join(stage, name)))
    return [e._replace(path=os.path.join(logdir, n)) for e, (n, _) in zip(done, cells)]


def export_runs(run_dir: str, logdir: str, *, force: bool = False,
                on_export: Callable[[Exported], None] | None = None) -> list[Exported]:  # fmt: skip
    """Export ``run_dir`` into ``logdir``: a training run (:func:`export_tensorboard`, into
    ``logdir/<run name>``), or an experiment's directory, every cell with records
    (:func:`cell_dirs`) into ``logdir/<cell>`` (:func:`export_many`). ``on_export`` then
    receives what was written for each run, in order."""
    cells = cell_dirs(run_dir) if not os.path.exists(
        os.path.join(run_dir, DYNAMICS_HEADER)) else []  # fmt: skip
    done = export_many(cells, logdir, force=force) if cells else [
        export_tensorboard(run_dir, logdir, force=force)]  # fmt: skip
    if on_export is not None:
        for e in done:
            on_export(e)
    return done


def _export_run(run_dir: str, logdir: str) -> Exported:
    """One run's records as one event file in ``logdir``."""
    dyn = read_dynamics(run_dir)
    metrics = read_metrics(run_dir)
    tb = TensorBoard(logdir, dyn.n_layer, wall_time=0.0)
    try:
        for step, seconds, values in record_scalars(dyn.records, metrics):
            tb.wall_time = seconds
            tb.scalars(step, values)
    finally:
        tb.close()
    n_evals = sum(r["kind"] == "eval" for r in metrics)
    return Exported(run_dir, logdir, len(dyn.steps), n_evals, dyn.damage)


def _stray(directory: str) -> str | None:
    """The first entry under ``directory`` that is neither an event file nor a directory of
    them (a link counts as stray), as a path relative to it; None when there is none."""
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if entry.is_dir(follow_symlinks=False):
            inner = _stray(entry.path)
            if inner is not None:
                return os.path.join(entry.name, inner)
        elif not (entry.is_file(follow_symlinks=False) and "tfevents" in entry.name):
            return entry.name
    return None


def _check_export_dir(logdir: str, force: bool) -> bool:
    """Whether ``logdir`` is there to be replaced; refused unless it holds only event files,
    and unless ``force``."""
    if not os.path.isdir(logdir) or not os.listdir(logdir):
        return False
    stray = _stray(logdir)
    if stray is not None:
        raise ValueError(
            f"{logdir!r} holds {stray!r}, which is not a TensorBoard event file; an export "
            "replaces only a directory of event files (an earlier export, a --log-to "
            "tensorboard run's): choose another directory"
        )
    if not force:
        raise ValueError(
            f"{logdir!r} already holds files (a live --log-to tensorboard run's, or an earlier "
            "export); pass --force (force=True) to replace it, or choose another directory"
        )
    return True


def cell_dirs(exp_dir: str) -> list[tuple[str, str]]:
    """(cell name, run directory) of every cell of an experiment directory that has records."""
    runs = os.path.join(exp_dir, "runs")
    if not os.path.isdir(runs):
        return []
    return [(n, os.path.join(runs, n)) for n in sorted(os.listdir(runs))
            if os.path.exists(os.path.join(runs, n, DYNAMICS_HEADER))]  # fmt: skip


def config_for(cfg) -> dict:
    """A run's settings as the trackers' config (JSON types only)."""
    return json.loads(json.dumps(dataclasses.asdict(cfg), default=str))
