"""Training a GPT from scratch: one step, the loop, its evaluations and checkpoints.

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

The run's settings are a :class:`resgrad.train.config.TrainConfig`. Files in
``out_dir`` (their names, and reading them back: :mod:`resgrad.train.rundir`):
``last.ckpt`` (every evaluation), ``best.ckpt`` (lowest validation loss),
``ckpt-<iter>.ckpt`` (with ``keep_every``: at every multiple of it and at the end, kept),
``metrics.jsonl`` (one JSON object per step, ``"kind": "iter"``, and per
evaluation, ``"kind": "eval"``; per-layer gradient norms included), ``loss.png``
(refreshed at each evaluation, :func:`resgrad.plots.render_loss_plot`),
``dynamics.bin`` and ``dynamics.json`` (per-layer gradients, update ratios, stream
gradients and activations at every step: :mod:`resgrad.train.dynamics`). While
training, a rate-limited one-line warning names a block whose gradient or update
ratio goes astray (:class:`resgrad.train.dynamics.DynamicsMonitor`). With ``log_to``,
the same values, the evaluations and histograms also go to TensorBoard (``tb/``),
wandb or trackio as training goes (:mod:`resgrad.train.trackers`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from threadpoolctl import ThreadpoolController

from resgrad.formats.atomic import atomic_write_bytes, atomic_write_text
from resgrad.formats.checkpoint import (
    BEST,
    LAST,
    Checkpoint,
    check_params,
    generator_from_state,
    load_checkpoint,
    save_checkpoint,
)
from resgrad.nn.model import GPT, GPTConfig, per_block_norms
from resgrad.plots import render_loss_plot
from resgrad.train.bits import may_follow_load
from resgrad.train.bpe import tokenizer_from_record, tokenizer_record
from resgrad.train.config import TrainConfig, check_matches_checkpoint
from resgrad.train.data import Corpus, get_batch, load_corpus, unigram_entropy
from resgrad.train.dynamics import (
    DYNAMICS_BIN,
    DYNAMICS_HEADER,
    DynamicsMonitor,
    DynamicsWriter,
    make_record,
    snapshot_blocks,
    update_ratios,
)
from resgrad.train.optim import AdamW, clip_coef, clip_grad_norm, grad_norms
from resgrad.train.rundir import (
    METRICS,
    PLOT,
    TOKENIZER,
    foreign_files,
    holding_out_dir,
    kept_checkpoints,
    kept_name,
    read_metrics,
)
from resgrad.train.shards import Shards
from resgrad.train.trackers import (
    LogConfig,
    TensorBoard,
    Tracker,
    config_for,
    eval_scalars,
    open_trackers,
    param_histograms,
    step_scalars,
)

__all__ = [
    "StepResult",
    "TrainResult",
    "TrainingDiverged",
    "estimate_loss",
    "layer_grad_norms",
    "train",
    "train_step",
]

_SEED_DATA, _SEED_DROPOUT, _SEED_EVAL = 1, 2, 3  # streams of np.random.default_rng([seed, k])


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
    grads: dict[str, np.ndarray] | None = None  # copies, before clipping (keep_grads=True)


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
    keep_grads: bool = False,
) -> StepResult:
    """One optimizer step on the batch ``x``, ``y`` (B, T): forward, backward, check, clip, AdamW.

    ``shards`` computes the loss and gradients as shards of the batch on threads
    (:mod:`resgrad.train.shards`; default: one shard, the plain pass). With
    ``dynamics``, also measures each block's update ratio (from a copy of its
    weights taken before the step) and the RMS of each block's output
    (:mod:`resgrad.train.dynamics`). With ``keep_grads``, the result carries a copy
    of every gradient as the backward gave it, before clipping (for histograms).

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
    pool, parts = shards.pool, shards.workers  # the shards' threads, also for the norms
    norms = grad_norms(grads, pool=pool, parts=parts)
    if not all(math.isfinite(n) for n in norms.values()):  # 3) nothing non-finite goes in
        raise TrainingDiverged(
            f"iteration {it}: non-finite gradient in parameter "
            f"{_describe_nonfinite(grads)} (loss {loss:.4f})"
        )
    kept = {k: g.copy() for k, g in grads.items()} if keep_grads else None
    total = clip_grad_norm(grads, grad_clip, norms)  # 4) global norm <= grad_clip
    clipped = clip_coef(total, grad_clip) < 1.0
    before = snapshot_blocks(model.params) if dynamics else None
    opt.step(grads, lr=lr, pool=pool, parts=parts)  # 5) AdamW, in place
    if not dynamics:
        return StepResult(loss, total, norms, p.stream_norms, clipped, grads=kept)
    ratio = update_ratios(model.params, before, model.cfg.n_layer)  # (L,) dots on BLAS threads
    return StepResult(loss, total, norms, p.stream_norms, clipped, ratio, p.act_rms, kept)


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


def _start_run(cfg: TrainConfig, last_path: str, fits=None) -> _Run:
    """A fresh run, or (``cfg.resume``) the one in ``last_path``, checked against ``cfg``."""
    out_dir = cfg.out_dir
    if not cfg.resume:
        kept = kept_checkpoints(out_dir)  # a fresh run's would mix with another run's
        if os.path.exists(last_path) or kept:
            raise ValueError(
                f"{out_dir!r} already holds a run ({LAST if not kept else kept_name(kept[0][0])});"
                " pass --resume to continue it or choose another --out-dir"
            )
        theirs = foreign_files(out_dir)
        if theirs:  # not a run's (it has no checkpoint): a fresh run would replace them
            raise ValueError(f"--out-dir {out_dir!r} holds {', '.join(theirs)}, which no run "
                             f"wrote there (it has no {LAST}); choose another --out-dir, or "
                             "move them")  # fmt: skip
        corpus, model = _fresh_model(cfg, fits)
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
    check_matches_checkpoint(cfg, ckpt.config.get("train", {}), last_path)
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


def _fresh_model(cfg: TrainConfig, fits=None) -> tuple[Corpus, GPT]:
    """The corpus and the model a fresh run starts from.

    - the default: the char tokenizer and a GPT initialized from ``cfg.seed``;
    - ``tokenizer="bpe"``: a byte-level BPE of ``vocab_size`` tokens trained on the
      whole text (:func:`resgrad.train.bpe.train_bpe`), then as the default;
    - ``init_from``: a pretrained GPT-2 and its tokenizer (``n_layer``, ``n_head``,
      ``n_embd``, ``variant``, ``init`` and ``tokenizer`` are then the model's, and
      ``block_size`` may not exceed its n_positions); ``dropout`` is ``cfg``'s. ``fits``
      (the memory check) sees its shape before its weights are read.
    """
    if cfg.init_from is not None:
        from resgrad.train.source import PRETRAINED, load_source, resolve_source

        src = resolve_source(cfg.init_from, meta=cfg.meta, kinds=PRETRAINED, flag="init_from")
        model, tok = load_source(src, fits=fits)
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

        tok = train_bpe(corpus.text, cfg.vocab_size)
        if tok.vocab_size < cfg.vocab_size:  # no pair left to merge: a smaller vocabulary
            raise ValueError(
                f"vocab_size {cfg.vocab_size} is more than {corpus.source!r} gives a byte-level "
                f"BPE: it stops at {tok.vocab_size} tokens, with no pair left to merge; pass "
                f"a vocab_size of at most {tok.vocab_size}, or a longer text"
            )
        corpus = load_corpus(cfg.data, cfg.block_size, tok)
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


def _open_trackers(log_to: LogConfig, cfg: TrainConfig, n_layer: int, start: int,
                   wrote: list[str], warn: Callable[[str], None]) -> list[Tracker]:  # fmt: skip
    """The run's dashboards; the TensorBoard directories and file it makes go into ``wrote``;
    a resume's damaged TensorBoard history is told to ``warn``."""
    if not log_to.to:
        return []
    tb_dirs = (log_to.tensorboard_dir(cfg.out_dir), log_to.tensorboard_run(cfg.out_dir))
    made = [d for d in tb_dirs if "tensorboard" in log_to.to and not os.path.exists(d)]
    try:
        trackers = open_trackers(log_to, cfg.out_dir, n_layer, start, config_for(cfg),
                                 resume=cfg.resume, say=warn)  # fmt: skip
    except BaseException:
        if made:  # it holds only what open_trackers began to write
            shutil.rmtree(made[0], ignore_errors=True)
        raise
    wrote += made
    wrote += [t.file.path for t in trackers if isinstance(t, TensorBoard)]
    return trackers


class _BlasThreads:
    """The BLAS (and OpenMP) thread count during a run: set when it changes, and the count
    found at the start restored when the run ends, so no limit outlives the call.

    Limits are set from the thread that runs the loop: threadpoolctl lets one thread at
    a time set OpenBLAS's (process-wide) count.
    """

    def __init__(self):
        info = ThreadpoolController().info()
        blas = [i["num_threads"] for i in info if i["user_api"] == "blas"]
        self.count = max(blas) if blas else None  # None: no BLAS found, nothing to set
        self._limiter = None

    def set(self, n: int) -> bool:
        """Run on ``n`` threads from now on; whether that changed the count."""
        if n == self.count:
            return False
        self.close()  # back to the start's count, then the new limit over it
        # a fresh controller: it also finds a BLAS loaded since (SciPy's, on first use)
        self._limiter = ThreadpoolController().limit(limits=n).__enter__()
        self.count = n
        return True

    def close(self) -> None:
        if self._limiter is not None:
            self._limiter.__exit__(None, None, None)
            self._limiter = None


def _check_threads(threads) -> None:
    if threads is None or callable(threads):
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be None, an integer >= 1 or a callable, got {threads!r}")


def _count_from(follow: Callable[[float], int], seconds: float) -> int:
    """The thread count ``follow`` gives after a step of ``seconds``, checked."""
    n = follow(seconds)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"threads({seconds:.3g}) returned {n!r}; expected an integer >= 1")
    return n


def _sync(dyn: DynamicsWriter, trackers: list[Tracker]) -> None:
    """fsync the dynamics records and the dashboards' files: called before each checkpoint."""
    dyn.sync()
    for t in trackers:
        t.sync()


@holding_out_dir(LAST, BEST, METRICS, PLOT)
def train(
    cfg: TrainConfig,
    *,
    progress: bool | None = True,
    log: Callable[[str], None] | None = None,
    fits: Callable[[GPTConfig], None] | None = None,
    log_to: LogConfig | None = None,
    threads: int | Callable[[float], int] | None = None,
    warn: Callable[[str], None] | None = None,
    plan: Callable[[float, str], None] | None = None,
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
    warn : callable, optional
        Receives what a resume found damaged or missing (the metrics, the dynamics, the
        dashboards' history) and the thread count's gate (default: ``log``, else stderr),
        so that a caller who silences ``log`` still hears of damage.
    plan : callable, optional
        Called once, before the first step, with the estimated seconds of the steps left
        (:meth:`TrainConfig.seconds`) and what they are.
    fits : callable, optional
        Called with the model's shape once it is known (a pretrained model's only once
        it is loaded), before the first step; it raises to refuse the run, as the CLI's
        memory check does (:func:`resgrad.perf.memory.train_bytes`).
    log_to : LogConfig, optional
        Dashboards that receive every step's values, the evaluations and histograms as
        training goes (:mod:`resgrad.train.trackers`): TensorBoard, wandb, trackio.
    threads : int or callable, optional
        BLAS threads (the step's threads, :class:`resgrad.train.shards.Shards`). None:
        the count the caller set, for the whole run. An int: that many for the whole
        run. A callable (:class:`resgrad.perf.threads.ThreadFollower`, ``resgrad train``
        without ``--threads``): called after every step with its wall time in seconds,
        it returns the count for the next steps, applied when it changes. Shards add up
        in a fixed order, but a BLAS may split a product's sums by its thread count
        (OpenBLAS's Haswell and Zen kernels): so the model's step is first run at every
        count the follower could choose (:func:`~resgrad.train.bits.step_counts_agree`),
        and where any bit differs the follower is not used and the run stays on one
        thread per usable core, saying so once. Either way no result depends on the load
        (tests/train/test_same_bits.py, on each kernel); the count in force at the start
        is restored at the end. Nothing of it is recorded.

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

    A fresh run stopped before its first checkpoint (refused at evaluation 0) takes
    away every file it wrote: a refused run leaves nothing behind.
    """
    _check_threads(threads)
    wrote: list[str] = []  # the files this call writes, as it opens them
    try:
        return _train(cfg, progress, log, fits, log_to or LogConfig(), wrote, threads, warn, plan)
    except BaseException:
        # a fresh run stopped before its first checkpoint (at evaluation 0, e.g. token ids
        # the model has no row for): nothing of it can be resumed or read, so nothing stays
        if not cfg.resume and not os.path.exists(os.path.join(cfg.out_dir, LAST)):
            for path in reversed(wrote):  # a directory after the files in it
                with contextlib.suppress(OSError):  # gone already, or not empty
                    if os.path.isdir(path):
                        os.rmdir(path)
                    else:
                        os.unlink(path)
        raise


def _train(
    cfg: TrainConfig,
    progress: bool | None,
    log: Callable[[str], None] | None,
    fits: Callable[[GPTConfig], None] | None,
    log_to: LogConfig,
    wrote: list[str],
    threads: int | Callable[[float], int] | None = None,
    warn: Callable[[str], None] | None = None,
    plan: Callable[[float, str], None] | None = None,
) -> TrainResult:
    """:func:`train`'s body; every file it writes is in ``wrote`` before it is opened."""
    from tqdm.auto import tqdm

    t_start = time.perf_counter()
    out_dir = cfg.out_dir
    os.makedirs(out_dir, exist_ok=True)
    last_path, best_path = os.path.join(out_dir, LAST), os.path.join(out_dir, BEST)
    metrics_path = os.path.join(out_dir, METRICS)
    run = _start_run(cfg, last_path, fits)
    if fits is not None:
        fits(run.model.cfg)
    corpus, model, start, best, records = run.corpus, run.model, run.start, run.best, run.records
    if plan is not None:
        V, m = corpus.tokenizer.vocab_size, model.cfg
        plan(cfg.seconds(V, start, m), f"{cfg.max_iters - start} steps of a {m.n_layer}-layer "
             f"GPT (C={m.n_embd}, T={cfg.block_size}, B={cfg.batch_size})")  # fmt: skip
    wrote += [os.path.join(out_dir, n) for n in (TOKENIZER, METRICS, DYNAMICS_BIN, DYNAMICS_HEADER)]
    if hasattr(corpus.tokenizer, "to_json"):  # a BPE: saved with the run, as transformers reads it
        atomic_write_text(os.path.join(out_dir, TOKENIZER), corpus.tokenizer.to_json())
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
    warn = warn or log or (lambda s: bar.write(s, file=sys.stderr))  # damage, the count's gate
    if run.repaired:
        warn(run.repaired)
    # on resume, the evaluation at the checkpoint's iteration is in the metrics already,
    # unless they were damaged: then it is run again (same batches, same numbers)
    evaluated = any(r["kind"] == "eval" and r["iter"] == start for r in records)
    trackers = _open_trackers(log_to, cfg, L, start, wrote, warn)  # closed in the finally below
    if cfg.resume and evaluated:  # a resume: its trackers dropped the steps from here on
        at_start = next(r for r in records if r["kind"] == "eval" and r["iter"] == start)
        for t in trackers:
            t.scalars(start, eval_scalars(at_start))
    metrics = open(metrics_path, "a", encoding="utf-8")  # closed in the finally below
    # closed in the finally below; what it finds damaged on resume goes to warn
    dyn = DynamicsWriter(out_dir, L, start, log=warn, config=dataclasses.asdict(cfg))
    monitor = DynamicsMonitor(say)
    blas = _BlasThreads()  # restored in the finally below
    if isinstance(threads, int):
        blas.set(threads)
    follow = threads if callable(threads) else None
    if follow is not None:  # the load may move the count only where it changes no bit
        x, y = get_batch(corpus.train, cfg.block_size, cfg.batch_size, np.random.default_rng(0))
        if not may_follow_load(model, x, y, cfg.shards, blas.set, warn):
            follow = None  # the count the gate set, for the whole run
    shards = Shards(cfg.shards)  # its threads stop in the finally below; reads blas's count
    last_eval: dict | None = None
    last_norm: float | None = None
    step_seconds, n_steps = 0.0, 0
    it = start
    try:
        while True:
            # --- evaluate, log, checkpoint, plot (not again at the iteration we resumed at)
            kept = None  # keep_every: this iteration's checkpoint is kept as well
            if cfg.keep_every and (it % cfg.keep_every == 0 or it >= cfg.max_iters):
                kept = os.path.join(out_dir, kept_name(it))
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
                for t in trackers:
                    t.scalars(it, eval_scalars(rec))
                last_eval = rec
                norm_txt = "-" if last_norm is None else f"{last_norm:.4f}"
                say(
                    f"iter {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}, "
                    f"grad norm {norm_txt}, lr {lr:.3e}" + (" (best)" if is_best else "")
                )
                ckpt = _checkpoint(run, it, best, config_record)
                _sync(dyn, trackers)  # what was recorded before this checkpoint is on disk first
                also = ([best_path] if is_best else []) + ([kept] if kept else [])
                save_checkpoint(last_path, ckpt, *also)
                atomic_write_bytes(
                    os.path.join(out_dir, PLOT), render_loss_plot(records, title, entropy)
                )
            if kept and not os.path.exists(kept):  # between evaluations, or the resumed one
                _sync(dyn, trackers)
                save_checkpoint(kept, _checkpoint(run, it, best, config_record))
            if it >= cfg.max_iters:
                break

            # --- one optimizer step
            t0 = time.perf_counter()
            lr = schedule(it)
            x, y = get_batch(corpus.train, cfg.block_size, cfg.batch_size, run.data_rng)  # (B, T)
            hist = bool(trackers) and log_to.hist_every > 0 and it % log_to.hist_every == 0
            weights = param_histograms("weights", model.params) if hist else {}  # before the step
            step = train_step(model, run.opt, x, y, lr, cfg.grad_clip, run.dropout_rng, it,
                              dynamics=True, shards=shards, keep_grads=hist)  # fmt: skip
            loss, last_norm = step.loss, step.grad_norm
            dyn_rec = make_record(L, it, loss, lr, step.grad_norm, step.clipped, step.norms,
                                  step.update_ratio, step.stream_norms, step.act_rms)  # fmt: skip
            dyn.append(dyn_rec)
            monitor.observe(dyn_rec)
            if trackers:
                values = step_scalars(dyn_rec)
                hists = {**weights, **param_histograms("gradients", step.grads)} if hist else {}
                for t in trackers:
                    t.scalars(it, values)
                    if hists:
                        t.histograms(it, hists)
            dt = time.perf_counter() - t0
            step_seconds += dt
            n_steps += 1
            if follow is not None and blas.set(_count_from(follow, dt)):  # the load moved
                shards.close()
                shards = Shards(cfg.shards)  # min(shards, count) threads: the same sums
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
        for t in trackers:
            t.close()
        shards.close()
        blas.close()
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
