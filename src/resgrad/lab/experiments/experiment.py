"""The papers' training experiments, over seeds: warm-up, depth, and the residual path itself.

Each experiment is a grid of training runs ("cells"): residual scheme x learning
rate x warm-up x depth x seed. Every cell is an ordinary ``resgrad train`` run in
``OUT/runs/<cell>/`` (checkpoints, metrics, per-layer dynamics: ``resgrad
dynamics`` and ``resgrad compare`` work on them), run through the same machinery
as ``resgrad sweep`` (:func:`resgrad.lab.experiments.grid.run_grid`: local cores with
joblib, or a Dask cluster, with identical results; a rerun after a crash skips
the finished cells and resumes a half-finished one from its last checkpoint).

The summary groups the cells by everything but the seed and reports the mean and
standard deviation (ddof=1) of the final validation loss over the seeds that did
not diverge, and how many diverged (a NaN or Inf in the loss or the gradients
stops a run: :class:`resgrad.train.loop.TrainingDiverged`).

- ``warmup`` (Xiong et al. 2020, "On Layer Normalization in the Transformer
  Architecture"): pre-LN and post-LN, with and without linear warm-up, at two or
  more peak learning rates. The paper: post-LN needs the warm-up, pre-LN does not.
- ``depth`` (Wang et al. 2022, "DeepNet"): pre-LN, post-LN and DeepNorm at
  increasing depth. The paper: deep post-LN stalls or diverges, DeepNorm trains.
- ``residual`` (the lesson, on a real model): the same 12-layer GPT with and
  without the + x path (``resgrad depth-train``'s defaults, over seeds).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from resgrad.formats.atomic import atomic_write_bytes, atomic_write_text
from resgrad.formats.checkpoint import LAST, load_checkpoint
from resgrad.formats.lock import lock_dir, new_dir_or_nothing
from resgrad.formats.records import to_csv
from resgrad.lab.experiments.grid import (
    check_backend,
    connected,
    parallelism,
    run_grid,
    sidecar_is_empty,
    sidecar_path,
)
from resgrad.lab.experiments.sweep import check_grid_size
from resgrad.lab.flow.core import seed_tuple
from resgrad.lab.study.budget import plan_left
from resgrad.plots import figure_bytes, new_figure
from resgrad.train.config import TrainConfig, check_matches_checkpoint
from resgrad.train.data import check_text_file, load_corpus, unigram_entropy
from resgrad.train.dynamics import read_dynamics
from resgrad.train.loop import TrainingDiverged, train
from resgrad.train.rundir import read_metrics
from resgrad.train.trackers import LogConfig

__all__ = [
    "ABOUT",
    "EXPERIMENTS",
    "ROW_FIELDS",
    "ExperimentConfig",
    "cell_key",
    "format_summary",
    "run_cell",
    "run_experiment",
    "summarize",
]

EXPERIMENTS = ("warmup", "depth", "residual")
# what each experiment asks, in one line (its command's help)
ABOUT = {
    "warmup": "pre-LN vs post-LN with and without learning-rate warm-up (Xiong et al. 2020)",
    "depth": "pre-LN, post-LN and DeepNorm as depth grows (Wang et al. 2022)",
    "residual": "a 12-layer GPT with and without + x",
}
# one row per cell: its settings; completed steps; the last evaluation's losses; whether
# (and after how many steps) it diverged; the wall time of the call that finished it; block
# 0's gradient norm and the largest block's update ratio, means over the last 10% of steps
ROW_FIELDS = (
    "variant", "n_layer", "lr", "warmup_iters", "seed", "iters", "train_loss", "val_loss",
    "best_val_loss", "diverged", "diverged_at", "seconds", "grad_block0", "update_max",
)  # fmt: skip
GROUP = ("variant", "n_layer", "lr", "warmup_iters")  # a summary row: everything but the seed


def _tuple(name, values, kind, lo):
    if isinstance(values, (str, int, float)) or not isinstance(values, Sequence) or not values:
        raise ValueError(f"{name} must be a non-empty list, got {values!r}")
    out = tuple(values)
    for v in out:
        ok = isinstance(v, kind) and not isinstance(v, bool) and v >= lo
        if not ok or (isinstance(v, float) and not math.isfinite(v)):
            raise ValueError(f"{name} must hold numbers >= {lo}, got {v!r}")
    if len(set(out)) != len(out):
        raise ValueError(f"{name} must be distinct, got {out!r}")
    return out


@dataclass(frozen=True)
class ExperimentConfig:
    """A grid of training runs; :meth:`defaults` gives each experiment's own.

    Every cell trains ``TrainConfig(**base)`` with one variant, depth, learning
    rate, warm-up and seed; the cosine decays to lr / 10 over ``max_iters``.
    """

    name: str  # one of EXPERIMENTS
    variants: tuple[str, ...]  # residual schemes
    depths: tuple[int, ...]  # n_layer values
    lrs: tuple[float, ...]  # peak learning rates
    warmups: tuple[int, ...]  # warm-up steps; 0 = none
    seeds: tuple[int, ...] = (0, 1, 2)  # the seeds of every cell; a count K means 0..K-1
    n_embd: int = 64  # C
    n_head: int = 4  # H
    block_size: int = 64  # T
    batch_size: int = 12  # B
    max_iters: int = 400  # steps per cell
    eval_interval: int = 100  # steps between evaluations (and checkpoints)
    eval_iters: int = 10  # batches per split per evaluation
    grad_clip: float = 1.0  # clip the global norm; 0 disables (see the warmup defaults)
    init: str = "gpt2"
    data: str | None = None  # None: the built-in corpus

    def __post_init__(self):
        if self.name not in EXPERIMENTS:
            raise ValueError(f"unknown experiment {self.name!r}; expected one of {EXPERIMENTS}")
        if isinstance(self.variants, str) or not self.variants:
            raise ValueError(f"variants must be a non-empty list, got {self.variants!r}")
        object.__setattr__(self, "variants", tuple(self.variants))
        if len(set(self.variants)) != len(self.variants):  # two cells would share a directory
            raise ValueError(f"variants must be distinct, got {self.variants!r}")
        object.__setattr__(self, "depths", _tuple("depths", self.depths, int, 1))
        object.__setattr__(self, "lrs", _tuple("lrs", self.lrs, (int, float), 1e-12))
        shown = [f"{lr:g}" for lr in self.lrs]  # as a cell's name shows it
        twice = next((lr for i, lr in enumerate(self.lrs) if shown[i] in shown[:i]), None)
        if twice is not None:
            raise ValueError(
                f"lrs must differ within 6 significant digits (a cell's name shows lr "
                f"{twice!r} as {twice:g}, as another of them), got {self.lrs!r}"
            )
        object.__setattr__(self, "warmups", _tuple("warmups", self.warmups, int, 0))
        what = "variants x depths x lrs x warm-ups x seeds"
        if isinstance(self.seeds, (int, np.integer)) and not isinstance(self.seeds, bool):
            check_grid_size(self._n_settings * self.seeds, what)  # before the count is listed
        object.__setattr__(self, "seeds", seed_tuple(self.seeds))
        check_grid_size(self.n_cells, what)
        for w in self.warmups:
            if w >= self.max_iters:
                raise ValueError(f"warm-up {w} must be shorter than max_iters {self.max_iters}")
        self.cells("out")  # every cell must be a valid run: TrainConfig says why not

    @staticmethod
    def defaults(name: str, **overrides) -> ExperimentConfig:
        """The experiment's defaults (each finishes within 15 minutes on 2 cores)."""
        base = {
            # Xiong et al.: post-LN without warm-up at a high peak lr. Clipping off, as
            # in the paper (it would cap exactly the early updates warm-up is about).
            "warmup": dict(variants=("pre-ln", "post-ln"), depths=(6,), lrs=(1e-3, 2e-3),
                           warmups=(0, 100), grad_clip=0.0, max_iters=400),
            # DeepNet: post-LN against DeepNorm as the stack deepens, at small width. Xavier
            # init and no clipping, as DeepNet's post-LN baseline: GPT-2's init already
            # scales the branches down (1/sqrt(2L)), which is half of what DeepNorm does.
            "depth": dict(variants=("pre-ln", "post-ln", "deepnorm"), depths=(6, 12, 24, 48),
                          lrs=(1e-3,), warmups=(30,), n_embd=32, n_head=4, block_size=32,
                          max_iters=300, init="xavier", grad_clip=0.0),
            # resgrad depth-train's run, over seeds: 12 layers with and without + x
            "residual": dict(variants=("none", "pre-ln"), depths=(12,), lrs=(1e-3,),
                             warmups=(60,), n_embd=128, n_head=4, block_size=64, max_iters=600,
                             eval_iters=10),
        }  # fmt: skip
        if name not in base:
            raise ValueError(f"unknown experiment {name!r}; expected one of {EXPERIMENTS}")
        return ExperimentConfig(name=name, **{**base[name], **overrides})

    def cells(self, out_dir: str) -> list[tuple[str, TrainConfig]]:
        """(cell name, its run's config) for every cell, in grid order."""
        out = []
        for v in self.variants:
            for L in self.depths:
                for lr in self.lrs:
                    for w in self.warmups:
                        for s in self.seeds:
                            name = f"{v}_L{L}_lr{lr:g}_w{w}_s{s}"
                            out.append((name, self._train_config(v, L, lr, w, s, out_dir, name)))
        return out

    @property
    def _n_settings(self) -> int:
        """How many cells one seed has: variants x depths x lrs x warm-ups."""
        return math.prod(len(axis) for axis in (self.variants, self.depths, self.lrs, self.warmups))

    @property
    def n_cells(self) -> int:
        """How many runs the grid holds (:meth:`cells` without building them)."""
        return self._n_settings * len(self.seeds)

    def seconds(self, vocab_size: int, jobs: int) -> float:
        """An estimate of the whole grid on ``jobs`` workers: each cell's training
        (:meth:`TrainConfig.seconds`), shared among them."""
        cells = self.cells(".")
        return sum(c.seconds(vocab_size) for _, c in cells) / max(min(jobs, len(cells)), 1)

    def largest_cell(self, out_dir: str) -> TrainConfig:
        """The config of the grid's largest run (the deepest), for a memory estimate."""
        return self._train_config(self.variants[0], max(self.depths), self.lrs[0],
                                  self.warmups[0], self.seeds[0], out_dir, "largest")  # fmt: skip

    def _train_config(self, variant, L, lr, warmup, seed, out_dir, name) -> TrainConfig:
        return TrainConfig(
            n_layer=L, n_head=self.n_head, n_embd=self.n_embd, block_size=self.block_size,
            batch_size=self.batch_size, max_iters=self.max_iters, lr=lr, min_lr=lr / 10,
            warmup_iters=warmup, lr_decay_iters=self.max_iters, grad_clip=self.grad_clip,
            eval_interval=self.eval_interval, eval_iters=self.eval_iters, variant=variant,
            init=self.init, seed=seed, data=self.data,
            out_dir=os.path.join(out_dir, "runs", name),
            shards=1,  # cells run one per core already; and the README's figures keep their bytes
        )  # fmt: skip


def run_cell(cfg: TrainConfig, log_to: LogConfig | None = None) -> list[dict]:
    """Train one cell (resuming its own checkpoint if a previous attempt was cut short).

    Returns one row (see ROW_FIELDS); a diverged run is a row with ``diverged`` True
    and the losses of its last evaluation, not an error. ``log_to``: the cell's
    dashboards (:meth:`resgrad.train.trackers.LogConfig.cell`).
    """
    if os.path.exists(os.path.join(cfg.out_dir, LAST)):  # its settings: checked up front
        cfg = dataclasses.replace(cfg, resume=True)
    row = {"variant": cfg.variant, "n_layer": cfg.n_layer, "lr": cfg.lr,
           "warmup_iters": cfg.warmup_iters, "seed": cfg.seed}  # fmt: skip
    diverged = False
    try:
        res = train(
            cfg,
            progress=False,
            log=lambda s: None,
            log_to=log_to,
            warn=lambda s: print(f"{cfg.out_dir}: {s}", file=sys.stderr),
        )  # damage
        row.update(seconds=res.seconds)
    except TrainingDiverged:
        diverged = True
        row.update(seconds=None)
    records = read_metrics(cfg.out_dir)
    evals = [r for r in records if r["kind"] == "eval"]
    last = evals[-1] if evals else {}
    dyn = read_dynamics(cfg.out_dir)
    n = max(1, len(dyn.steps) // 10)  # the last 10% of the recorded steps
    with np.errstate(all="ignore"):
        grad0 = float(np.mean(dyn["grad"][-n:, 0])) if len(dyn.steps) else None
        upd = float(np.max(np.mean(dyn["update"][-n:], axis=0))) if len(dyn.steps) else None
    iters = int(dyn.steps[-1]) + 1 if len(dyn.steps) else 0  # completed steps
    row.update(
        iters=iters, train_loss=last.get("train_loss"), val_loss=last.get("val_loss"),
        best_val_loss=last.get("best_val_loss"), diverged=diverged,
        diverged_at=iters if diverged else None,  # the step that failed was not completed
        grad_block0=grad0, update_max=upd,
    )  # fmt: skip
    return [row]


# where a cell's run lives and how it was started: nothing of its row depends on them
_NOT_IN_KEY = ("out_dir", "resume")


def cell_key(cell: TrainConfig, data_sha256: str) -> str:
    """The key of a cell's row in the sidecar of finished cells: every setting of its run
    but :data:`_NOT_IN_KEY` (eval_iters and the text too, which a plain resume may change),
    and the SHA-256 of the text it trains on. A row is reused only under the same key."""
    settings = {k: v for k, v in dataclasses.asdict(cell).items() if k not in _NOT_IN_KEY}
    return json.dumps({**settings, "data_sha256": data_sha256}, sort_keys=True)


def _check_same_cell(cell: TrainConfig, last: str, corpus, also: tuple[str, ...] = ()) -> None:
    """Refuse the checkpoint ``last`` of a cell's earlier run unless it was trained with
    every setting of ``cell`` (but :data:`_NOT_IN_KEY`, and ``also``: settings not decided
    yet, checked again once they are) and on ``corpus``'s text: its row would otherwise
    stand beside rows measured with other settings."""
    ckpt = load_checkpoint(last)
    check_matches_checkpoint(cell, ckpt.config.get("train", {}), last,
                             may_change=_NOT_IN_KEY + tuple(also))  # fmt: skip
    if ckpt.extra.get("data_sha256") != corpus.sha256:
        raise ValueError(
            f"cannot resume {last!r}: the data {corpus.source!r} differs from the text it "
            "was trained on (SHA-256 mismatch)"
        )


def _run_logged_cell(point: tuple[TrainConfig, LogConfig]) -> list[dict]:
    """:func:`run_cell` of a (config, its dashboards) point."""
    return run_cell(*point)


def summarize(rows: Sequence[dict]) -> list[dict]:
    """One row per (variant, depth, lr, warm-up): val loss mean and std over the seeds
    that did not diverge, and the count that diverged."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in GROUP), []).append(r)
    out = []
    for key, rs in groups.items():
        ok = [r["val_loss"] for r in rs if not r["diverged"]]
        out.append({
            **dict(zip(GROUP, key)), "seeds": len(rs), "diverged": sum(r["diverged"] for r in rs),
            "val_mean": statistics.mean(ok) if ok else None,
            "val_std": statistics.stdev(ok) if len(ok) > 1 else None,
            "val_min": min(ok) if ok else None, "val_max": max(ok) if ok else None,
        })  # fmt: skip
    return out


def format_summary(summary: Sequence[dict], entropy: float | None = None) -> str:
    """The summary as a Markdown table (what the README shows)."""
    lines = ["| variant | layers | peak lr | warm-up | val loss, mean ± std | diverged |",
             "| --- | ---: | ---: | ---: | --- | ---: |"]  # fmt: skip
    for s in summary:
        if s["val_mean"] is None:
            val = "-"
        else:
            std = "" if s["val_std"] is None else f" ± {s['val_std']:.3f}"
            val = f"{s['val_mean']:.3f}{std}"
        lines.append(f"| {s['variant']} | {s['n_layer']} | {s['lr']:g} | {s['warmup_iters']} "
                     f"| {val} | {s['diverged']}/{s['seeds']} |")  # fmt: skip
    if entropy is not None:
        lines.append(f"\nunigram entropy of the corpus (a model without context): {entropy:.3f}")
    return "\n".join(lines)


def _curves(rows: Sequence[dict], out_dir: str, cells: dict[str, str]):
    """Per group, the mean (over seeds) validation loss at each evaluation."""
    by_group: dict[tuple, list[list[tuple[int, float]]]] = {}
    for r in rows:
        name = cells[json.dumps([r[k] for k in (*GROUP, "seed")])]
        records = read_metrics(os.path.join(out_dir, "runs", name))
        evals = [(e["iter"], e["val_loss"]) for e in records if e["kind"] == "eval"]
        by_group.setdefault(tuple(r[k] for k in GROUP), []).append(evals)
    return by_group


def render_figure(cfg: ExperimentConfig, rows, summary, out_dir, cells, entropy) -> bytes:
    """Left: final val loss (mean ± std over seeds, diverged cells as x) against the swept
    axis; right: mean val-loss curves of every group."""
    fig, (ax1, ax2) = new_figure(ncols=2, width=13.0, height=5.0)
    # one colour per variant; the other settings a line style each
    color = {v: f"C{i % 10}" for i, v in enumerate(cfg.variants)}
    others = sorted({tuple(s[k] for k in GROUP[1:]) for s in summary})
    style = {o: ("-", "--", ":", "-.")[i % 4] for i, o in enumerate(others)}
    x_key = "n_layer" if cfg.name == "depth" else "lr"
    line_keys = [k for k in GROUP if k != x_key]
    lines: dict[tuple, list[dict]] = {}
    for s in summary:
        lines.setdefault(tuple(s[k] for k in line_keys), []).append(s)
    rest = sorted({k[1:] for k in lines})  # each line's settings other than the variant
    for key, ss in lines.items():
        label = ", ".join(f"{k}={v}" for k, v in zip(line_keys, key)
                          if len({s[k] for s in summary}) > 1 or k == "variant")  # fmt: skip
        c = color[key[0]]  # key[0] is the variant
        ss = sorted(ss, key=lambda s: s[x_key])
        xs = [s[x_key] for s in ss if s["val_mean"] is not None]
        ys = [s["val_mean"] for s in ss if s["val_mean"] is not None]
        es = [s["val_std"] or 0.0 for s in ss if s["val_mean"] is not None]
        ls = ("-", "--", ":", "-.")[rest.index(key[1:]) % 4]
        ax1.errorbar(xs, ys, yerr=es, fmt="o", ls=ls, color=c, capsize=3, ms=4, label=label)
        for s in ss:
            if s["diverged"]:
                ax1.plot([s[x_key]], [entropy or 0], "x", color=c, ms=9, mew=2)
    ax1.set_xscale("log", base=2 if x_key == "n_layer" else 10)
    ticks = sorted({s[x_key] for s in summary})
    ax1.set_xticks(ticks, [f"{v:g}" for v in ticks])
    ax1.minorticks_off()
    ax1.set_xlabel("layers" if x_key == "n_layer" else "peak learning rate")
    ax1.set_ylabel(f"val loss after {cfg.max_iters} steps, mean ± std over {len(cfg.seeds)} seeds")
    if entropy is not None:
        ax1.axhline(entropy, color="gray", ls=":", lw=1, label=f"unigram entropy {entropy:.2f}")
    ax1.set_title("final validation loss (x: a seed diverged)", fontsize=10)
    curves = _curves(rows, out_dir, cells)
    for key, runs in curves.items():
        d = dict(zip(GROUP, key))
        iters = sorted({i for run in runs for i, _ in run})
        mean = [np.mean([v for run in runs for i2, v in run if i2 == i]) for i in iters]
        ax2.plot(iters, mean, marker="o", ls=style[key[1:]], ms=2.5, lw=1.0, color=color[key[0]],
                 label=f"{d['variant']} L={d['n_layer']} lr={d['lr']:g} "
                       f"warm-up {d['warmup_iters']}")  # fmt: skip
    ax2.set_xlabel("iteration")
    ax2.set_ylabel("val loss, mean over seeds")
    ax2.set_title("validation loss during training", fontsize=10)
    for ax in (ax1, ax2):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle(f"resgrad experiment {cfg.name}: C={cfg.n_embd}, T={cfg.block_size}, "
                 f"B={cfg.batch_size}, {len(cfg.seeds)} seeds", fontsize=11)  # fmt: skip
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return figure_bytes(fig, "png")


def run_experiment(
    cfg: ExperimentConfig,
    out_dir: str,
    *,
    jobs: int | None = None,
    backend: str = "loky",
    scheduler: str | None = None,
    connect_timeout: float = 5.0,
    progress: bool | None = None,
    threads: int | None = None,
    log_to: LogConfig | None = None,
    plan: Callable[[float, str], None] | None = None,
) -> dict:
    """Run every cell of ``cfg`` into ``out_dir`` and write the results there.

    Files: ``runs/<cell>/`` (each cell's run), ``cells.csv`` (one row per cell),
    ``summary.json`` (the config, the per-group summary, the unigram entropy),
    ``summary.md`` (the table) and ``<name>.png`` (the figure). Returns the summary.
    One experiment at a time writes ``out_dir``: a second fails at once, naming the
    holder (:func:`resgrad.formats.lock.lock_dir`). Run again into the same ``out_dir``, it
    keeps the finished cells and resumes the others, unless a cell there was trained with
    any other setting (eval_iters and the text included): that is refused, by name, before
    anything trains. ``threads``: BLAS threads per
    local worker (default: cores // jobs). ``log_to``: dashboards, each cell a run named
    after it (its variant, depth, lr, warm-up and seed); TensorBoard's in
    ``out_dir/tb/<cell>`` (or ``log_to.dir/<cell>``), so that ``tensorboard --logdir
    out_dir/tb`` lists the cells as runs. ``plan``: called once, after every check and
    before the first cell trains, with the estimated seconds and what the work is.
    """
    jobs = check_backend(jobs, backend, scheduler, connect_timeout)  # every core by default
    if cfg.data is not None:  # every cell reads it: refused here, before any directory
        check_text_file(cfg.data)
    # an experiment refused before a cell finished (a model too large, a text too short,
    # no scheduler) takes away the directory it made
    with (
        new_dir_or_nothing(out_dir, disposable=sidecar_is_empty),
        lock_dir(out_dir, "experiment directory"),
    ):
        os.makedirs(os.path.join(out_dir, "runs"), exist_ok=True)
        return _run_experiment(cfg, out_dir, jobs, backend, scheduler, connect_timeout,
                               progress, threads, log_to, plan)  # fmt: skip


def _run_experiment(cfg, out_dir, jobs, backend, scheduler, connect_timeout, progress, threads,
                    log_to, plan):  # fmt: skip
    cells = cfg.cells(out_dir)
    corpus = load_corpus(cfg.data, cfg.block_size)  # every cell's text, refused before any trains
    for _, c in cells:  # a cell trained before with other settings is refused, never mixed in
        last = os.path.join(c.out_dir, LAST)
        if os.path.exists(last):
            try:
                _check_same_cell(c, last, corpus)
            except ValueError as e:
                raise ValueError(
                    f"{out_dir!r} holds this experiment run with other settings ({e}); run it "
                    "with the same flags to resume it, or choose another --out-dir"
                ) from None
    keys = [cell_key(c, corpus.sha256) for _, c in cells]
    side = sidecar_path(os.path.join(out_dir, "cells.csv"))
    points = [c for _, c in cells]
    job = run_cell
    if log_to is not None and log_to.to:  # each cell logs under its own name, in a project
        # of the experiment's own unless one was given (cells of two experiments share names)
        project = f"resgrad-{cfg.name}" if log_to.project == LogConfig().project else log_to.project
        points = [(c, log_to.cell(n, out_dir, project)) for n, c in cells]
        job = _run_logged_cell
    with connected(backend, scheduler, connect_timeout) as client:
        workers = parallelism(jobs, client)
        seconds = cfg.seconds(corpus.tokenizer.vocab_size, workers)
        work = f"{len(cells)} runs of {cfg.max_iters} steps"
        grid = run_grid(list(zip(keys, points)), job, side, jobs=jobs,
                        backend=backend, scheduler=scheduler, connect_timeout=connect_timeout,
                        progress=progress, desc=f"experiment {cfg.name}",
                        ready=plan and plan_left(plan, seconds, work, "runs"),
                        threads=threads, client=client)  # fmt: skip
    rows = [r for k in keys for r in grid.done[k]]
    summary = summarize(rows)
    entropy = unigram_entropy(corpus.text)
    names = {json.dumps([c.variant, c.n_layer, c.lr, c.warmup_iters, c.seed]): n for n, c in cells}
    png = render_figure(cfg, rows, summary, out_dir, names, entropy)
    atomic_write_bytes(os.path.join(out_dir, f"{cfg.name}.png"), png)
    atomic_write_text(os.path.join(out_dir, "cells.csv"), to_csv(rows, ROW_FIELDS))
    result = {"config": dataclasses.asdict(cfg), "summary": summary, "unigram_entropy": entropy}
    atomic_write_text(os.path.join(out_dir, "summary.json"), json.dumps(result, indent=2) + "\n")
    atomic_write_text(os.path.join(out_dir, "summary.md"), format_summary(summary, entropy) + "\n")
    if os.path.exists(side):
        os.unlink(side)
    return result
