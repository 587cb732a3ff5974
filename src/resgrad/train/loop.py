"""Training a GPT from scratch: the loop, its metrics, plots and checkpoints, and the depth run.

Legend: B = batch size, T = block size, C = n_embd, L = n_layer, V = vocab size.

One iteration, as nanoGPT's ``train.py``: draw a batch, forward, backward,
check for NaN/Inf, clip the global gradient norm, one AdamW step at the
scheduled learning rate. Step ``it`` (from 0) starts after ``it`` completed
steps; an evaluation "at iteration it" happens before step ``it``, every
``eval_interval`` steps and after the last one.

Three generators, all seeded from ``cfg.seed``, keep every run reproducible:

- ``data``: draws the training batches;
- ``dropout``: draws the dropout masks;
- evaluation batches come from a fresh generator seeded the same way at each
  evaluation, so every evaluation measures the same batches and the training
  trajectory does not depend on how often or how long one evaluates.

The first two are saved in every checkpoint with the parameters and AdamW's
moments, so ``resume`` continues bit-exactly: N steps, stop, N more equals 2N
uninterrupted (tests/train/test_loop.py). A killed run leaves the last checkpoint
(written atomically at each evaluation) loadable.

Files in ``out_dir``: ``last.ckpt`` (every evaluation), ``best.ckpt`` (lowest
validation loss), ``metrics.jsonl`` (one JSON object per step, ``"kind":
"iter"``, and per evaluation, ``"kind": "eval"``; per-layer gradient norms
included), ``loss.png`` (refreshed at each evaluation), ``dynamics.bin`` and
``dynamics.json`` (per-layer gradients, update ratios, stream gradients and
activations at every step: :mod:`resgrad.train.dynamics`). While training, a
rate-limited one-line warning names a block whose gradient or update ratio goes
astray (:class:`resgrad.train.dynamics.DynamicsMonitor`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from resgrad.formats.atomic import atomic_write_bytes, atomic_write_text, remove_stale_temporaries
from resgrad.formats.checkpoint import (
    BEST,
    LAST,
    Checkpoint,
    check_params,
    generator_from_state,
    load_checkpoint,
    save_checkpoint,
)
from resgrad.formats.lock import lock_dir, new_dir_or_nothing
from resgrad.nn.blocks import INITS, VARIANTS
from resgrad.nn.model import GPT, GPTConfig, per_block_norms
from resgrad.plots import figure_bytes, new_figure
from resgrad.train.bpe import KINDS, MIN_BPE_VOCAB, tokenizer_from_record, tokenizer_record
from resgrad.train.data import Corpus, check_text_file, get_batch, load_corpus, unigram_entropy
from resgrad.train.dynamics import (
    DynamicsMonitor,
    DynamicsWriter,
    make_record,
    snapshot_blocks,
    update_ratios,
)
from resgrad.train.optim import (
    AdamW,
    AdamWConfig,
    LRSchedule,
    clip_coef,
    clip_grad_norm,
    grad_norms,
)
from resgrad.train.shards import DEFAULT_SHARDS, Shards

__all__ = [
    "METRICS",
    "PLOT",
    "DepthTrainConfig",
    "TrainConfig",
    "TrainResult",
    "StepResult",
    "TrainingDiverged",
    "check_resumable",
    "depth_train",
    "draw_losses",
    "estimate_loss",
    "layer_grad_norms",
    "read_metrics",
    "resume_config",
    "train",
    "train_step",
]

METRICS = "metrics.jsonl"
PLOT = "loss.png"
# fields that may differ between a checkpoint and the run that resumes it; all
# others must match, or the continuation would silently be another run
RESUMABLE = ("max_iters", "eval_interval", "eval_iters", "data", "out_dir", "resume")
_SEED_DATA, _SEED_DROPOUT, _SEED_EVAL = 1, 2, 3  # streams of np.random.default_rng([seed, k])
MAX_EVAL_ITERS = 10_000  # batches per split per evaluation; std error 1/sqrt(n) is 1% here
_MIN_INT = {  # integer fields of TrainConfig -> smallest allowed value
    "n_layer": 1, "n_head": 1, "n_embd": 1, "block_size": 1, "batch_size": 1, "max_iters": 0,
    "warmup_iters": 0, "lr_decay_iters": 1, "eval_interval": 1, "eval_iters": 1, "shards": 1,
}  # fmt: skip
# a field a checkpoint does not record is newer than the checkpoint, which was trained
# as the code then did: the field's default, except where the default has changed since
_BEFORE_RECORDED = {"shards": 1}  # runs before shards were unsharded


def _int(name, v, lo):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")


def _float(name, v, lo, hi=math.inf, lo_open=False):
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    ok = ok and (v > lo if lo_open else v >= lo) and v <= hi
    if not ok:
        rng = f"{'(' if lo_open else '['}{lo}, {hi}{']' if hi < math.inf else ')'}"
        raise ValueError(f"{name} must be a finite number in {rng}, got {v!r}")


# settings a pretrained model (TrainConfig.init_from) brings with it: a run may not set them
FROM_PRETRAINED = ("n_layer", "n_head", "n_embd", "variant", "init", "tokenizer")


@dataclass(frozen=True)
class TrainConfig:
    """Every setting of a run; the ``resgrad train`` flags map one-to-one onto these fields.

    Defaults are nanoGPT's CPU recipe for character-level text
    (``config/train_shakespeare_char.py`` with the README's CPU overrides).
    """

    n_layer: int = 4  # L, transformer blocks
    n_head: int = 4  # H, attention heads; must divide n_embd
    n_embd: int = 128  # C, width of the residual stream
    block_size: int = 64  # T, context length
    batch_size: int = 12  # B, sequences per step
    max_iters: int = 2000  # total optimizer steps
    lr: float = 1e-3  # peak learning rate
    min_lr: float = 1e-4  # floor of the cosine decay
    warmup_iters: int = 100  # linear warmup steps
    lr_decay_iters: int = 2000  # the cosine reaches min_lr here (nanoGPT: = max_iters)
    weight_decay: float = 0.1  # AdamW's decoupled decay, on 2-D+ parameters only
    beta1: float = 0.9  # AdamW
    beta2: float = 0.99  # AdamW (nanoGPT's char recipe: tokens per step are few)
    grad_clip: float = 1.0  # clip the global gradient norm to this; 0 disables
    dropout: float = 0.0  # dropout probability while training
    eval_interval: int = 250  # evaluate, log, checkpoint and plot every this many steps
    eval_iters: int = 20  # batches per split in each evaluation
    variant: str = "pre-ln"  # residual scheme (resgrad.nn.blocks.VARIANTS); "none" drops + x
    init: str = "gpt2"  # initialization (resgrad.nn.blocks.INITS)
    seed: int = 1337  # seeds the init, the batches, the dropout masks and the eval batches
    data: str | None = None  # a UTF-8 text file; None: the built-in Python reference manual
    out_dir: str = "out"  # checkpoints, metrics, plot
    resume: bool = False  # continue from out_dir/last.ckpt
    tokenizer: str = "char"  # "char", or "bpe": a byte-level BPE trained on the data
    vocab_size: int | None = None  # tokens of the BPE (>= 256); only with tokenizer "bpe"
    init_from: str | None = None  # fine-tune a pretrained GPT-2 (hub name, directory, ckpt.pt)
    # each batch as this many shards on threads, gradients summed (resgrad.train.shards):
    # changes the gradients' rounding, so it is part of the run; never the thread count
    shards: int = DEFAULT_SHARDS

    def __post_init__(self):
        for name, lo in _MIN_INT.items():
            _int(name, getattr(self, name), lo)
        if self.eval_iters > MAX_EVAL_ITERS:  # an evaluation blocks training, with no output
            raise ValueError(
                f"eval_iters must be at most {MAX_EVAL_ITERS}, got {self.eval_iters!r}: each "
                "evaluation runs eval_iters batches per split before training goes on, and "
                f"{MAX_EVAL_ITERS} already pin the mean loss to 1% of one batch's spread"
            )
        _int("seed", self.seed, 0)
        if self.seed >= 2**32:
            raise ValueError(f"seed must be < 2**32, got {self.seed!r}")
        _float("lr", self.lr, 0.0, lo_open=True)
        _float("min_lr", self.min_lr, 0.0, self.lr)
        _float("weight_decay", self.weight_decay, 0.0)
        _float("grad_clip", self.grad_clip, 0.0)
        if self.variant not in VARIANTS:
            raise ValueError(f"unknown variant {self.variant!r}; expected one of {VARIANTS}")
        if self.init not in INITS:
            raise ValueError(f"unknown init {self.init!r}; expected one of {INITS}")
        if self.data is not None and (not isinstance(self.data, str) or not self.data):
            raise ValueError(f"data must be a file path or None, got {self.data!r}")
        if not isinstance(self.out_dir, str) or not self.out_dir:
            raise ValueError(f"out_dir must be a non-empty path, got {self.out_dir!r}")
        if self.tokenizer not in KINDS:
            raise ValueError(f"unknown tokenizer {self.tokenizer!r}; expected one of {KINDS}")
        if self.tokenizer == "bpe" and self.init_from is None:
            if self.vocab_size is None:
                raise ValueError("tokenizer 'bpe' needs a vocab_size (>= 256, e.g. 1024)")
            _int("vocab_size", self.vocab_size, MIN_BPE_VOCAB)
        elif self.vocab_size is not None:
            raise ValueError(
                f"vocab_size {self.vocab_size!r} is for a BPE trained here (tokenizer 'bpe', "
                "no init_from); the char tokenizer and a pretrained model bring their own"
            )
        if self.init_from is not None and (
            not isinstance(self.init_from, str) or not self.init_from
        ):
            raise ValueError(f"init_from must be a model name or path, got {self.init_from!r}")
        if self.init_from is not None:  # the architecture is the pretrained model's
            defaults = {f.name: f.default for f in dataclasses.fields(self)}
            set_ = [f"{k}={getattr(self, k)!r}" for k in FROM_PRETRAINED
                    if getattr(self, k) != defaults[k]]  # fmt: skip
            if set_:
                raise ValueError(
                    f"{', '.join(set_)} cannot be combined with init_from {self.init_from!r}: "
                    f"the pretrained model brings its own {', '.join(FROM_PRETRAINED)}"
                )
        self.gpt_config(vocab_size=1)  # n_head | n_embd, dropout in [0, 1)
        self.schedule()  # lr_decay_iters > warmup_iters
        self.adamw()  # beta1, beta2 < 1

    def gpt_config(self, vocab_size: int) -> GPTConfig:
        """The model this config trains, for a vocabulary of ``vocab_size`` characters."""
        return GPTConfig(
            vocab_size=vocab_size,
            block_size=self.block_size,
            n_layer=self.n_layer,
            n_head=self.n_head,
            n_embd=self.n_embd,
            dropout=self.dropout,
            variant=self.variant,
            init=self.init,
        )

    def schedule(self) -> LRSchedule:
        return LRSchedule(self.lr, self.min_lr, self.warmup_iters, self.lr_decay_iters)

    def adamw(self) -> AdamWConfig:
        return AdamWConfig(
            lr=self.lr, beta1=self.beta1, beta2=self.beta2, weight_decay=self.weight_decay
        )


class TrainingDiverged(RuntimeError):
    """A NaN or Inf in the loss or the gradients; the message names the iteration and parameter."""


@dataclass(frozen=True)
class TrainResult:
    """What a finished run reports; the same facts are in ``out_dir``'s files."""

    iterations: int  # completed steps
    train_loss: float  # at the last evaluation
    val_loss: float
    best_val_loss: float
    seconds: float  # wall time of this call
    ms_per_iter: float  # mean wall time of one step in this call (evaluations excluded)
    out_dir: str
    start: int = 0  # the iteration this call began at: a resumed run's checkpoint


# --------------------------------------------------------------------------- metrics


_RECORD_FIELDS = {"iter": ("loss",), "eval": ("train_loss", "val_loss")}  # beside "iter"


def _is_record(r) -> bool:
    """Whether ``r`` is a step or evaluation record as :func:`train` writes them."""
    if not isinstance(r, dict) or r.get("kind") not in _RECORD_FIELDS:
        return False
    it = r.get("iter")
    if isinstance(it, bool) or not isinstance(it, int):
        return False
    return all(isinstance(r.get(k), (int, float)) for k in _RECORD_FIELDS[r["kind"]])


def read_metrics(
    out_dir: str | os.PathLike, upto: int | None = None, problems: list[str] | None = None
) -> list[dict]:
    """The records of ``out_dir/metrics.jsonl``; a torn last line (a killed run) is skipped.

    With ``upto``, only records of steps before ``upto`` and evaluations at or before it.
    Lines that are not records :func:`train` writes (foreign or damaged) are skipped
    too; with ``problems``, each is described there, as is a missing file.
    """
    problems = [] if problems is None else problems
    path = os.path.join(os.fspath(out_dir), METRICS)
    if not os.path.exists(path):
        problems.append(f"{METRICS} is missing")
        return []
    records = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                if line.endswith("\n"):  # not the tail a kill cut short: damage
                    problems.append(f"line {n} of {METRICS} is not JSON (skipped)")
                continue
            if not _is_record(r):
                problems.append(f"line {n} of {METRICS} is not a resgrad record (skipped)")
                continue
            if upto is not None:
                if r["iter"] >= upto if r["kind"] == "iter" else r["iter"] > upto:
                    continue
            records.append(r)
    return records


def layer_grad_norms(grads: dict[str, float], n_layer: int) -> list[float]:
    """Per block i, the L2 norm of all of block i's parameter gradients, from per-name norms."""
    return per_block_norms(grads, n_layer)[""].tolist()


def estimate_loss(
    model: GPT, corpus: Corpus, cfg: TrainConfig, shards: Shards | None = None
) -> dict[str, float]:
    """Mean loss over ``eval_iters`` batches of each split, dropout off.

    The batches come from a generator seeded afresh from ``cfg.seed``: the same
    batches at every evaluation, and no draw from the training generators.
    ``shards`` computes each batch's loss as shards on threads (default: one).
    """
    shards = shards or Shards(1)
    rng = np.random.default_rng([cfg.seed, _SEED_EVAL])
    out = {}
    for split, data in (("train", corpus.train), ("val", corpus.val)):
        losses = []
        for _ in range(cfg.eval_iters):
            x, y = get_batch(data, cfg.block_size, cfg.batch_size, rng)  # (B, T)
            losses.append(shards.loss(model, x, y))
        out[split] = float(np.mean(losses))
    return out


# --------------------------------------------------------------------------- plots


def _smooth(y: np.ndarray, n: int) -> np.ndarray:
    """Trailing mean over up to n steps, (N,) -> (N,)."""
    c = np.cumsum(np.insert(y, 0, 0.0))  # (N + 1,)
    i = np.arange(1, len(y) + 1)  # (N,)
    lo = np.maximum(0, i - n)  # (N,)
    return (c[i] - c[lo]) / (i - lo)  # (N,)


def draw_losses(ax, records: list[dict], label: str = "", color=None) -> None:
    """Draw on ``ax`` a run's train loss per step (raw, faint; smoothed) and val loss per eval."""
    steps = [r for r in records if r["kind"] == "iter"]
    evals = [r for r in records if r["kind"] == "eval"]
    pre = f"{label} " if label else ""
    if steps:
        x = np.array([r["iter"] for r in steps])  # (N,)
        y = np.array([r["loss"] for r in steps])  # (N,)
        (line,) = ax.plot(x, y, lw=0.6, alpha=0.3, color=color)
        color = line.get_color()
        ax.plot(x, _smooth(y, 25), lw=1.2, color=color, label=f"{pre}train (per step, smoothed)")
    if evals:
        ex = [r["iter"] for r in evals]
        ax.plot(ex, [r["val_loss"] for r in evals], "o--", ms=3.5, color=color,
                label=f"{pre}val (eval)")  # fmt: skip


def render_loss_plot(records: list[dict], title: str, entropy: float | None = None) -> bytes:
    """PNG of the training loss per step (raw and smoothed) and the validation loss per eval."""
    fig, (ax,) = new_figure()
    draw_losses(ax, records)
    if entropy is not None:
        ax.axhline(entropy, color="gray", ls=":", lw=1, label=f"unigram entropy {entropy:.3f}")
    ax.set_xlabel("iteration")
    ax.set_ylabel("cross-entropy loss (nats per character)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return figure_bytes(fig, "png")


# --------------------------------------------------------------------------- the loop


def _describe_nonfinite(arrays: dict[str, np.ndarray]) -> str | None:
    bad = [k for k, a in arrays.items() if not np.isfinite(a).all()]
    if not bad:
        return None
    return f"{bad[0]!r} (first of {len(bad)} of {len(arrays)} parameters affected)"


@dataclass(frozen=True)
class StepResult:
    loss: float  # the batch's loss before the update
    grad_norm: float  # global gradient norm before clipping
    norms: dict[str, float]  # per-parameter gradient norms before clipping
    stream_norms: list[float]  # L + 1 norms of dL/dx_i, the residual stream at block inputs
    clipped: bool = False  # whether clipping scaled the gradients down
    update_ratio: np.ndarray | None = None  # (L,) ||dw|| / ||w|| per block (dynamics=True)
    act_rms: list[float] | None = None  # L RMS of each block's output (dynamics=True)


def train_step(
    model: GPT,
    opt: AdamW,
    x: np.ndarray,
    y: np.ndarray,
    lr: float,
    grad_clip: float,
    rng: np.random.Generator | None,
    it: int = 0,
    *,
    dynamics: bool = False,
    shards: Shards | None = None,
) -> StepResult:
    """One optimizer step on the batch ``x``, ``y`` (B, T): forward, backward, check, clip, AdamW.

    ``shards`` computes the loss and gradients as shards of the batch on threads
    (:mod:`resgrad.train.shards`; default: one shard, the plain pass). With
    ``dynamics``, also measures each block's update ratio (from a copy of its
    weights taken before the step) and the RMS of each block's output
    (:mod:`resgrad.train.dynamics`).

    Raises
    ------
    TrainingDiverged
        If the loss or a gradient is NaN or Inf, before anything is updated; the
        message names iteration ``it`` and the first parameter affected.
    """
    # 1)-2) loss, gradients and dL/dx_i at each block; overflow is caught below, by name
    shards = shards or Shards(1)
    p = shards.forward_backward(model, x, y, rng, act_rms=dynamics)
    loss, grads = p.loss, p.grads
    if not math.isfinite(loss):
        bad = _describe_nonfinite(model.params)
        if bad is None:  # parameters are fine: name where the backward breaks
            where = "first parameter with a non-finite gradient: " + (
                _describe_nonfinite(grads) or "none"
            )
        else:
            where = f"non-finite values in parameter {bad}"
        raise TrainingDiverged(f"iteration {it}: loss is {loss}; {where}")
    norms = grad_norms(grads)
    if not all(math.isfinite(n) for n in norms.values()):  # 3) nothing non-finite goes in
        raise TrainingDiverged(
            f"iteration {it}: non-finite gradient in parameter "
            f"{_describe_nonfinite(grads)} (loss {loss:.4f})"
        )
    total = clip_grad_norm(grads, grad_clip, norms)  # 4) global norm <= grad_clip
    clipped = clip_coef(total, grad_clip) < 1.0
    before = snapshot_blocks(model.params) if dynamics else None
    opt.step(grads, lr=lr, pool=shards.pool, parts=shards.workers)  # 5) AdamW, in place
    if not dynamics:
        return StepResult(loss, total, norms, p.stream_norms, clipped)
    ratio = update_ratios(model.params, before, model.cfg.n_layer)  # (L,)
    return StepResult(loss, total, norms, p.stream_norms, clipped, ratio, p.act_rms)


def resume_config(out_dir: str, **overrides) -> TrainConfig:
    """The config of ``out_dir/last.ckpt`` with ``overrides`` applied and ``resume`` on.

    Raises
    ------
    FileNotFoundError
        If ``out_dir`` holds no checkpoint.
    ValueError
        If the checkpoint is unreadable or an override is invalid.
    """
    path = os.path.join(out_dir, LAST)
    if not os.path.exists(path):
        raise FileNotFoundError(f"--resume: no checkpoint {LAST!r} in {out_dir!r}")
    saved = load_checkpoint(path).config.get("train")
    if not isinstance(saved, dict):
        raise ValueError(f"checkpoint {path!r} has no training config")
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(saved) - fields)
    if unknown:
        raise ValueError(f"checkpoint {path!r} has unknown config fields {unknown}")
    return TrainConfig(
        **{**_BEFORE_RECORDED, **saved, **overrides, "out_dir": out_dir, "resume": True}
    )


def check_resumable(cfg: TrainConfig) -> None:
    """Raise ValueError unless ``cfg`` may resume the run in ``cfg.out_dir``: every setting
    but RESUMABLE must be the one its checkpoint was trained with."""
    path = os.path.join(cfg.out_dir, LAST)
    _check_resumable(cfg, load_checkpoint(path).config.get("train", {}), path)


def _check_resumable(cfg: TrainConfig, saved: dict, path: str) -> None:
    # a setting the checkpoint does not record is newer than it: see _BEFORE_RECORDED
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)} | _BEFORE_RECORDED
    for k, v in dataclasses.asdict(cfg).items():
        was = saved.get(k, defaults[k])
        if k not in RESUMABLE and was != v:
            raise ValueError(
                f"cannot resume {path!r}: {k} is {v!r} but the checkpoint was trained with "
                f"{was!r} (only {', '.join(RESUMABLE[:3])} may change on resume)"
            )


@dataclass
class _Run:
    """The state a run starts from: fresh, or restored from its last checkpoint."""

    corpus: Corpus
    model: GPT
    opt: AdamW
    data_rng: np.random.Generator  # draws the training batches
    dropout_rng: np.random.Generator  # draws the dropout masks
    start: int  # completed steps
    best: float | None  # best validation loss so far
    records: list[dict]  # metrics so far
    repaired: str | None = None  # what was wrong with metrics.jsonl on resume, if anything


def _start_run(cfg: TrainConfig, last_path: str) -> _Run:
    """A fresh run, or (``cfg.resume``) the one in ``last_path``, checked against ``cfg``."""
    out_dir = cfg.out_dir
    if not cfg.resume:
        if os.path.exists(last_path):
            raise ValueError(
                f"{out_dir!r} already holds a run ({LAST}); pass --resume to continue it "
                "or choose another --out-dir"
            )
        corpus, model = _fresh_model(cfg)
        return _Run(
            corpus=corpus,
            model=model,
            opt=AdamW(model.params, cfg.adamw()),
            data_rng=np.random.default_rng([cfg.seed, _SEED_DATA]),
            dropout_rng=np.random.default_rng([cfg.seed, _SEED_DROPOUT]),
            start=0,
            best=None,
            records=[],
        )
    if not os.path.exists(last_path):
        raise FileNotFoundError(f"--resume: no checkpoint {LAST!r} in {out_dir!r}")
    ckpt = load_checkpoint(last_path)
    _check_resumable(cfg, ckpt.config.get("train", {}), last_path)
    tok = tokenizer_from_record(ckpt.tokenizer, ckpt.vocab)
    corpus = load_corpus(cfg.data, cfg.block_size, tok)
    if corpus.sha256 != ckpt.extra.get("data_sha256"):
        raise ValueError(
            f"cannot resume {last_path!r}: the data {corpus.source!r} differs from the "
            "text the checkpoint was trained on (SHA-256 mismatch)"
        )
    if ckpt.iteration > cfg.max_iters:
        raise ValueError(
            f"cannot resume {last_path!r}: it is at iteration {ckpt.iteration}, beyond "
            f"max_iters {cfg.max_iters}"
        )
    if cfg.init_from is None:
        model = GPT(cfg.gpt_config(corpus.tokenizer.vocab_size), seed=cfg.seed)
        check_params(ckpt.params, model.params, where=f"checkpoint {last_path!r}")
        for k, v in ckpt.params.items():
            model.params[k][...] = v
    else:  # a fine-tuned model keeps the pretrained shape its checkpoint records
        model_cfg = GPTConfig(**ckpt.config["model"])
        model = GPT.from_params(model_cfg, {k: np.array(v) for k, v in ckpt.params.items()})
    opt = AdamW(model.params, cfg.adamw())
    opt.load_state_dict(ckpt.optimizer)
    problems: list[str] = []
    records = read_metrics(out_dir, upto=ckpt.iteration, problems=problems)  # drop what a
    # kill left after the checkpoint; the checkpoint is the truth, the metrics follow it
    repaired = None
    if problems:
        repaired = (
            f"{'; '.join(problems[:3])}{' ...' if len(problems) > 3 else ''}; resuming from "
            f"{LAST} at iteration {ckpt.iteration} and keeping the metrics that are usable"
        )
    return _Run(
        corpus=corpus,
        model=model,
        opt=opt,
        data_rng=generator_from_state(ckpt.rng_states["data"]),
        dropout_rng=generator_from_state(ckpt.rng_states["dropout"]),
        start=ckpt.iteration,
        best=ckpt.best_val_loss,
        records=records,
        repaired=repaired,
    )


def _fresh_model(cfg: TrainConfig) -> tuple[Corpus, GPT]:
    """The corpus and the model a fresh run starts from.

    - the default: the char tokenizer and a GPT initialized from ``cfg.seed``;
    - ``tokenizer="bpe"``: a byte-level BPE of ``vocab_size`` tokens trained on the
      whole text (:func:`resgrad.train.bpe.train_bpe`), then as the default;
    - ``init_from``: a pretrained GPT-2 and its tokenizer (``n_layer``, ``n_head``,
      ``n_embd``, ``variant``, ``init`` and ``tokenizer`` are then the model's, and
      ``block_size`` may not exceed its n_positions); ``dropout`` is ``cfg``'s.
    """
    if cfg.init_from is not None:
        from resgrad.train.pretrained import load_pretrained

        model, tok = load_pretrained(cfg.init_from)
        if cfg.block_size > model.cfg.block_size:
            raise ValueError(
                f"block_size {cfg.block_size} exceeds the context of {cfg.init_from!r}, "
                f"{model.cfg.block_size} positions"
            )
        model.cfg = dataclasses.replace(model.cfg, dropout=cfg.dropout)
        return load_corpus(cfg.data, cfg.block_size, tok), model
    corpus = load_corpus(cfg.data, cfg.block_size)
    if cfg.tokenizer == "bpe":
        from resgrad.train.bpe import train_bpe

        corpus = load_corpus(cfg.data, cfg.block_size, train_bpe(corpus.text, cfg.vocab_size))
    return corpus, GPT(cfg.gpt_config(corpus.tokenizer.vocab_size), seed=cfg.seed)


def _checkpoint(run: _Run, it: int, best: float, config: dict) -> Checkpoint:
    """Everything needed to continue ``run`` bit-exactly from iteration ``it``."""
    return Checkpoint(
        params=run.model.params,
        optimizer=run.opt.state_dict(),
        iteration=it,
        config=config,
        vocab=getattr(run.corpus.tokenizer, "chars", ""),
        best_val_loss=best,
        rng_states={
            "data": run.data_rng.bit_generator.state,
            "dropout": run.dropout_rng.bit_generator.state,
        },
        extra={"data_sha256": run.corpus.sha256, "data_source": run.corpus.source},
        tokenizer=tokenizer_record(run.corpus.tokenizer),
    )


def _holding_out_dir(*names: str):
    """Run ``fn(cfg, ...)`` holding the lock of ``cfg.out_dir`` (resgrad.formats.lock).

    A second run into the same directory fails at once (``Locked``, an OSError)
    naming the directory and the holder. Under the lock, the temporaries of
    ``names`` that a killed atomic write left behind are removed first.
    """

    def wrap(fn):
        @functools.wraps(fn)
        def run(cfg, *args, **kwargs):
            if getattr(cfg, "data", None) is not None:  # a bad path: refused before any mkdir
                check_text_file(cfg.data)
            # a run refused before it wrote anything (bad text, a model that will not load)
            # takes away the directory it made
            with new_dir_or_nothing(cfg.out_dir), lock_dir(cfg.out_dir):
                removed = remove_stale_temporaries(cfg.out_dir, names)
                if removed:
                    say = kwargs.get("log") or (lambda s: print(s, file=sys.stderr))
                    say(f"removed {len(removed)} temporary file(s) a killed run left in "
                        f"{cfg.out_dir!r}")  # fmt: skip
                return fn(cfg, *args, **kwargs)

        return run

    return wrap


@_holding_out_dir(LAST, BEST, METRICS, PLOT)
def train(
    cfg: TrainConfig,
    *,
    progress: bool | None = True,
    log: Callable[[str], None] | None = None,
    fits: Callable[[GPTConfig], None] | None = None,
) -> TrainResult:
    """Train (or resume) a GPT as ``cfg`` says; see the module docstring for the files written.

    Parameters
    ----------
    cfg : TrainConfig
    progress : bool or None
        Show a tqdm bar (loss, tokens per second, time left) on stderr; None: only
        when stderr is a terminal.
    log : callable, optional
        Receives the one-line report of each evaluation (default: printed above the bar).
    fits : callable, optional
        Called with the model's shape once it is known (a pretrained model's only once
        it is loaded), before the first step; it raises to refuse the run, as the CLI's
        memory check does (:func:`resgrad.perf.memory.train_bytes`).

    Returns
    -------
    TrainResult

    Raises
    ------
    TrainingDiverged
        On a NaN or Inf in the loss or the gradients; ``last.ckpt`` keeps the last good state.
    ValueError
        Bad data, an out_dir that already holds a run (without ``resume``), or a
        checkpoint that is corrupted or does not match ``cfg``.
    OSError
        If the data or out_dir cannot be read or written;
        ``resgrad.formats.lock.Locked`` if another run holds out_dir.
    """
    from tqdm.auto import tqdm

    t_start = time.perf_counter()
    out_dir = cfg.out_dir
    os.makedirs(out_dir, exist_ok=True)
    last_path, best_path = os.path.join(out_dir, LAST), os.path.join(out_dir, BEST)
    metrics_path = os.path.join(out_dir, METRICS)
    run = _start_run(cfg, last_path)
    if fits is not None:
        fits(run.model.cfg)
    corpus, model, start, best, records = run.corpus, run.model, run.start, run.best, run.records
    if hasattr(corpus.tokenizer, "to_json"):  # a BPE: saved with the run, as transformers reads it
        atomic_write_text(os.path.join(out_dir, "tokenizer.json"), corpus.tokenizer.to_json())
    atomic_write_text(metrics_path, "".join(json.dumps(r) + "\n" for r in records))

    schedule, L = cfg.schedule(), model.cfg.n_layer  # the model's: init_from brings its own
    entropy = unigram_entropy(corpus.text)
    m = model.cfg  # the model's shape: init_from brings its own
    title = (
        f"{m.variant}, L={L} H={m.n_head} C={m.n_embd} T={cfg.block_size} "
        f"B={cfg.batch_size}, lr {cfg.lr:g}; "
        + ("pydoc_data.topics" if cfg.data is None else os.path.basename(cfg.data))
    )
    config_record = {
        "train": dataclasses.asdict(cfg),
        "model": dataclasses.asdict(model.cfg),
    }
    bar = tqdm(
        total=cfg.max_iters, initial=start, disable=None if progress is None else not progress,
        unit="it", dynamic_ncols=True, desc=f"train {cfg.variant}",
    )  # fmt: skip
    say = log if log is not None else (lambda s: bar.write(s))
    if run.repaired:
        say(run.repaired)
    # on resume, the evaluation at the checkpoint's iteration is in the metrics already,
    # unless they were damaged: then it is run again (same batches, same numbers)
    evaluated = any(r["kind"] == "eval" and r["iter"] == start for r in records)
    metrics = open(metrics_path, "a", encoding="utf-8")  # closed in the finally below
    dyn = DynamicsWriter(out_dir, L, start, log=say, config=dataclasses.asdict(cfg))  # closed below
    monitor = DynamicsMonitor(say)
    shards = Shards(cfg.shards)  # its threads stop in the finally below
    last_eval: dict | None = None
    last_norm: float | None = None
    step_seconds, n_steps = 0.0, 0
    it = start
    try:
        while True:
            # --- evaluate, log, checkpoint, plot (not again at the iteration we resumed at)
            if (it % cfg.eval_interval == 0 or it >= cfg.max_iters) and not (
                cfg.resume and it == start and evaluated
            ):
                with np.errstate(all="ignore"):
                    losses = estimate_loss(model, corpus, cfg, shards)
                if not all(math.isfinite(v) for v in losses.values()):
                    bad = _describe_nonfinite(model.params) or "none"
                    raise TrainingDiverged(
                        f"iteration {it}: evaluation loss is {losses['train']} (train), "
                        f"{losses['val']} (val); non-finite values in parameter {bad}"
                    )
                lr = schedule(it)
                is_best = best is None or losses["val"] < best
                best = losses["val"] if is_best else best
                rec = {"kind": "eval", "iter": it, "train_loss": losses["train"],
                       "val_loss": losses["val"], "grad_norm": last_norm, "lr": lr,
                       "best_val_loss": best}  # fmt: skip
                metrics.write(json.dumps(rec) + "\n")
                metrics.flush()
                records.append(rec)
                last_eval = rec
                norm_txt = "-" if last_norm is None else f"{last_norm:.4f}"
                say(
                    f"iter {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}, "
                    f"grad norm {norm_txt}, lr {lr:.3e}" + (" (best)" if is_best else "")
                )
                ckpt = _checkpoint(run, it, best, config_record)
                save_checkpoint(last_path, ckpt, *([best_path] if is_best else []))
                atomic_write_bytes(
                    os.path.join(out_dir, PLOT), render_loss_plot(records, title, entropy)
                )
            if it >= cfg.max_iters:
                break

            # --- one optimizer step
            t0 = time.perf_counter()
            lr = schedule(it)
            x, y = get_batch(corpus.train, cfg.block_size, cfg.batch_size, run.data_rng)  # (B, T)
            step = train_step(model, run.opt, x, y, lr, cfg.grad_clip, run.dropout_rng, it,
                              dynamics=True, shards=shards)  # fmt: skip
            loss, last_norm = step.loss, step.grad_norm
            dyn_rec = make_record(L, it, loss, lr, step.grad_norm, step.clipped, step.norms,
                                  step.update_ratio, step.stream_norms, step.act_rms)  # fmt: skip
            dyn.append(dyn_rec)
            monitor.observe(dyn_rec)
            dt = time.perf_counter() - t0
            step_seconds += dt
            n_steps += 1
            rec = {
                "kind": "iter", "iter": it, "loss": loss, "lr": lr, "grad_norm": last_norm,
                "layer_grad_norms": layer_grad_norms(step.norms, L),  # (L,) float64
                "stream_grad_norms": step.stream_norms,
                "ms": 1e3 * dt,
            }  # fmt: skip
            metrics.write(json.dumps(rec) + "\n")
            records.append(rec)
            it += 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{x.size / dt:,.0f}", refresh=False)
    except TrainingDiverged as e:
        done = load_checkpoint(last_path).iteration if os.path.exists(last_path) else None
        keep = (
            f"the last good checkpoint ({last_path}, iteration {done}) is kept"
            if done is not None
            else "no checkpoint was written yet"
        )
        raise TrainingDiverged(f"training stopped: {e}; {keep}") from None
    finally:
        metrics.close()
        dyn.close()
        shards.close()
        bar.close()
    if last_eval is None:  # resumed a run that was already complete
        last_eval = next(r for r in reversed(records) if r["kind"] == "eval")
    return TrainResult(
        iterations=it,
        train_loss=last_eval["train_loss"],
        val_loss=last_eval["val_loss"],
        best_val_loss=best,
        seconds=time.perf_counter() - t_start,
        ms_per_iter=1e3 * step_seconds / max(n_steps, 1),
        out_dir=out_dir,
        start=start,
    )


# --------------------------------------------------------------------------- the depth run


@dataclass(frozen=True)
class DepthTrainConfig:
    """The depth experiment on a real model: one deep GPT, with and without the + x path.

    Every variant trains the same architecture from the same seed, on the same
    batches, for the same steps; only the residual scheme differs.
    """

    n_layer: int = 12  # L: deep enough that the missing + x path shows
    n_head: int = 4  # H
    n_embd: int = 128  # C, as the CPU recipe
    block_size: int = 64  # T
    batch_size: int = 12  # B
    max_iters: int = 600  # steps per variant
    lr: float = 1e-3  # peak learning rate; warmup max_iters // 10, cosine to lr / 10
    eval_interval: int = 100  # steps between evaluations
    eval_iters: int = 10  # batches per split per evaluation
    seed: int = 1337
    data: str | None = None  # None: the built-in corpus
    out_dir: str = "out-depth"
    variants: tuple[str, ...] = ("none", "pre-ln")

    def __post_init__(self):
        object.__setattr__(self, "variants", tuple(self.variants))
        if not self.variants or len(set(self.variants)) != len(self.variants):
            raise ValueError(f"variants must be distinct and non-empty, got {self.variants!r}")
        for v in self.variants:
            self.train_config(v)  # validates every field through TrainConfig

    def train_config(self, variant: str) -> TrainConfig:
        return TrainConfig(
            n_layer=self.n_layer, n_head=self.n_head, n_embd=self.n_embd,
            block_size=self.block_size, batch_size=self.batch_size, max_iters=self.max_iters,
            lr=self.lr, min_lr=self.lr / 10, warmup_iters=self.max_iters // 10,
            lr_decay_iters=max(self.max_iters, 1), eval_interval=self.eval_interval,
            eval_iters=self.eval_iters, variant=variant, seed=self.seed, data=self.data,
            out_dir=os.path.join(self.out_dir, variant),
        )  # fmt: skip


def render_depth_plot(
    runs: dict[str, list[dict]], title: str, entropy: float | None = None
) -> bytes:
    """Left: every variant's losses. Right: per-layer gradient norms at the first and last step."""
    fig, (ax1, ax2) = new_figure(ncols=2, width=12.0)
    colors = {}
    for v, records in runs.items():
        draw_losses(ax1, records, label=v)
        colors[v] = ax1.get_lines()[-1].get_color()
    if entropy is not None:
        ax1.axhline(entropy, color="gray", ls=":", lw=1, label=f"unigram entropy {entropy:.3f}")
    ax1.set_xlabel("iteration")
    ax1.set_ylabel("cross-entropy loss (nats per character)")
    ax1.set_title("loss", fontsize=10)
    ax1.grid(True, alpha=0.3)
    ax1.legend(fontsize=8)
    for v, records in runs.items():
        steps = [r for r in records if r["kind"] == "iter"]
        if not steps:
            continue
        for r, style in ((steps[0], "o--"), (steps[-1], "s-")):
            g = r["layer_grad_norms"]
            ax2.plot(range(len(g)), g, style, ms=4, color=colors[v],
                     label=f"{v}, step {r['iter']}")  # fmt: skip
    ax2.set_yscale("log", nonpositive="mask")
    ax2.set_xlabel("block (0 = next to the input)")
    ax2.set_ylabel("gradient norm of the block's parameters")
    ax2.set_title("per-layer gradient norms, first and last step", fontsize=10)
    ax2.grid(True, alpha=0.3)
    if ax2.get_lines():
        ax2.legend(fontsize=8)
    else:  # --max-iters 0: evaluations only, no step to draw
        ax2.text(0.5, 0.5, "no training step", ha="center", va="center", transform=ax2.transAxes)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return figure_bytes(fig, "png")


@_holding_out_dir("depth_train.png", "depth_train.json")
def depth_train(
    cfg: DepthTrainConfig, *, progress: bool | None = True, log: Callable[[str], None] | None = None
) -> dict:
    """Train each variant of ``cfg`` in ``out_dir/<variant>``, then plot and summarize them.

    Writes ``out_dir/depth_train.png`` (both loss curves on one axis; per-layer
    gradient norms at the first and last step) and ``out_dir/depth_train.json``.

    Returns
    -------
    dict
        The summary written to ``depth_train.json``: per variant, the final and
        best losses, seconds, and the per-layer gradient norms at the first and last step.
    """
    for v in cfg.variants:  # depth-train has no --resume: refuse before training anything
        held = os.path.join(cfg.train_config(v).out_dir, LAST)
        if os.path.exists(held):
            raise ValueError(
                f"{cfg.out_dir!r} already holds a depth-train run ({held}); depth-train "
                "cannot continue one: choose another --out-dir or delete this one"
            )
    say = log if log is not None else print
    runs, summary = {}, {"config": dataclasses.asdict(cfg), "variants": {}}
    for v in cfg.variants:
        say(f"== {v}: {cfg.n_layer} layers, {cfg.max_iters} steps")
        res = train(cfg.train_config(v), progress=progress, log=log)
        records = read_metrics(res.out_dir)
        steps = [r for r in records if r["kind"] == "iter"]
        runs[v] = records
        summary["variants"][v] = {
            "train_loss": res.train_loss,
            "val_loss": res.val_loss,
            "best_val_loss": res.best_val_loss,
            "seconds": res.seconds,
            "first_step_layer_grad_norms": steps[0]["layer_grad_norms"] if steps else None,
            "last_step_layer_grad_norms": steps[-1]["layer_grad_norms"] if steps else None,
        }
    summary["config"]["variants"] = list(cfg.variants)
    title = (
        f"{cfg.n_layer}-layer GPT (C={cfg.n_embd}, H={cfg.n_head}, T={cfg.block_size}, "
        f"B={cfg.batch_size}), {cfg.max_iters} steps, lr {cfg.lr:g}: " + " vs ".join(cfg.variants)
    )
    entropy = unigram_entropy(load_corpus(cfg.data, cfg.block_size).text)
    summary["unigram_entropy"] = entropy
    png = render_depth_plot(runs, title, entropy)
    atomic_write_bytes(os.path.join(cfg.out_dir, "depth_train.png"), png)
    atomic_write_text(
        os.path.join(cfg.out_dir, "depth_train.json"), json.dumps(summary, indent=2) + "\n"
    )
    return summary
