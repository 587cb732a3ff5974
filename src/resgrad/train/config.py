"""A training run's settings: :class:`TrainConfig`, and the config a resumed run continues with.

Every ``resgrad train`` flag maps one-to-one onto a field of :class:`TrainConfig`,
validated in ``__post_init__``. A run's checkpoint records the config it was
trained with; :func:`resume_config` reads it back (with overrides) and
:func:`check_resumable` refuses a continuation that would silently be another run.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from resgrad.formats.checkpoint import LAST, load_checkpoint
from resgrad.nn.blocks import INITS, VARIANTS
from resgrad.nn.model import GPTConfig
from resgrad.train.bpe import KINDS, MIN_BPE_VOCAB
from resgrad.train.optim import AdamWConfig, LRSchedule
from resgrad.train.shards import DEFAULT_SHARDS

__all__ = [
    "ACTIVATION_NAMES",
    "FROM_PRETRAINED",
    "MAX_EVAL_ITERS",
    "RESUMABLE",
    "TrainConfig",
    "check_matches_checkpoint",
    "check_resumable",
    "recorded_settings",
    "resume_config",
]

# fields that may differ between a checkpoint and the run that resumes it; all
# others must match, or the continuation would silently be another run
RESUMABLE = ("max_iters", "eval_interval", "eval_iters", "data", "out_dir", "resume", "keep_every")
MAX_EVAL_ITERS = 10_000  # batches per split per evaluation; std error 1/sqrt(n) is 1% here
_MIN_INT = {  # integer fields of TrainConfig -> smallest allowed value
    "n_layer": 1, "n_head": 1, "n_embd": 1, "block_size": 1, "batch_size": 1, "max_iters": 0,
    "warmup_iters": 0, "lr_decay_iters": 1, "eval_interval": 1, "eval_iters": 1, "shards": 1,
    "keep_every": 0,
}  # fmt: skip
# a field a checkpoint does not record is newer than the checkpoint, which was trained
# as the code then did: the field's default, except where the default has changed since
_BEFORE_RECORDED = {"shards": 1, "activation": "gelu_tanh"}

# ``--activation`` -> the model's GELU (GPTConfig.activation, a key of nn.layers.ACTIVATIONS),
# in PyTorch's words: F.gelu(x, approximate="tanh") is GPT-2's, F.gelu(x) (nn.GELU()) nanoGPT's
ACTIVATION_NAMES = {"gelu_tanh": "gelu-tanh", "gelu": "gelu-erf"}


def _int(name, v, lo):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")


def _float(name, v, lo, hi=math.inf, lo_open=False):
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    ok = ok and (v > lo if lo_open else v >= lo) and v <= hi
    if not ok:
        rng = f"{'(' if lo_open else '['}{lo}, {hi}{']' if hi < math.inf else ')'}"
        raise ValueError(f"{name} must be a finite number in {rng}, got {v!r}")


# a training step's float32 throughput and per-block overhead on one core
# (TrainConfig.seconds; nanoGPT's CPU recipe reaches about 6e10 a core on AVX-512)
TRAIN_FLOPS_PER_S = 6e10
BLOCK_STEP_S = 2e-3

# settings a pretrained model (TrainConfig.init_from) brings with it: a run may not set them
FROM_PRETRAINED = ("n_layer", "n_head", "n_embd", "variant", "init", "tokenizer", "activation",
                   "rezero_alpha", "ln_scaling_power")  # fmt: skip


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
    # the MLP's GELU, a key of ACTIVATION_NAMES: "gelu_tanh" (GPT-2's tanh form) or "gelu"
    # (the exact erf form, nanoGPT's nn.GELU()); part of the run: a resume may not change it
    activation: str = "gelu_tanh"
    rezero_alpha: float = 0.0  # rezero's alpha at initialization (GPTConfig.rezero_alpha)
    # ln-scaling's exponent p (GPTConfig.ln_scaling_power): None is the paper's 0.5 under
    # ln-scaling, recorded as 0.5, and stays None for every other scheme
    ln_scaling_power: float | None = None
    seed: int = 1337  # seeds the init, the batches, the dropout masks and the eval batches
    data: str | None = None  # a UTF-8 text file; None: the built-in Python reference manual
    out_dir: str = "out"  # checkpoints, metrics, plot
    resume: bool = False  # continue from out_dir/last.ckpt
    tokenizer: str = "char"  # "char", or "bpe": a byte-level BPE trained on the data
    vocab_size: int | None = None  # tokens of the BPE (>= 256); only with tokenizer "bpe"
    init_from: str | None = None  # fine-tune a pretrained GPT-2 (hub name, directory, ckpt.pt)
    meta: str | None = None  # nanoGPT's meta.pkl for an init_from ckpt.pt (None: its dataset's)
    # each batch as this many shards on threads, gradients summed (resgrad.train.shards):
    # changes the gradients' rounding, so it is part of the run; never the thread count
    shards: int = DEFAULT_SHARDS
    # also keep ckpt-<iter>.ckpt every this many steps (and at the end), beside last.ckpt:
    # a run's history for ``resgrad paths --every-checkpoint``; 0: keep none
    keep_every: int = 0

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
        if not isinstance(self.activation, str) or self.activation not in ACTIVATION_NAMES:
            raise ValueError(
                f"unknown activation {self.activation!r}; expected one of {tuple(ACTIVATION_NAMES)}"
            )
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
        if self.meta is not None and (not isinstance(self.meta, str) or not self.meta):
            raise ValueError(f"meta must be a path to nanoGPT's meta.pkl, got {self.meta!r}")
        if self.meta is not None and self.init_from is None:
            raise ValueError(
                f"meta {self.meta!r} is the vocabulary of a nanoGPT ckpt.pt given as init_from; "
                "a run from scratch builds its own"
            )
        if self.init_from is not None:  # the architecture is the pretrained model's
            defaults = {f.name: f.default for f in dataclasses.fields(self)}
            set_ = [f"{k}={getattr(self, k)!r}" for k in FROM_PRETRAINED
                    if getattr(self, k) != defaults[k]]  # fmt: skip
            if set_:
                raise ValueError(
                    f"{', '.join(set_)} cannot be combined with init_from {self.init_from!r}: "
                    f"the pretrained model brings its own {', '.join(FROM_PRETRAINED)}"
                )
        model = self.gpt_config(vocab_size=1)  # n_head | n_embd, dropout in [0, 1), ...
        object.__setattr__(self, "ln_scaling_power", model.ln_scaling_power)  # as it trains
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
            activation=ACTIVATION_NAMES[self.activation],
            rezero_alpha=self.rezero_alpha,
            ln_scaling_power=self.ln_scaling_power,
        )

    def schedule(self) -> LRSchedule:
        return LRSchedule(self.lr, self.min_lr, self.warmup_iters, self.lr_decay_iters)

    def seconds(self, vocab_size: int, start: int = 0, model: GPTConfig | None = None) -> float:
        """An estimate of the run's seconds from step ``start`` on one core: each step 3 x a
        forward's flops (about 24 B T C^2 + 4 B T^2 C a block and 2 B T C V for the head) at
        :data:`TRAIN_FLOPS_PER_S`, plus :data:`BLOCK_STEP_S` a block; each evaluation a
        forward of ``eval_iters`` batches per split. ``model``: the shape trained, where a
        pretrained one brings its own. Within a factor of 2 of the measured time at the
        studies' sizes (``benchmarks/bench_estimates.py``)."""
        m = model or self.gpt_config(vocab_size)
        B, T, C, L, V = self.batch_size, self.block_size, m.n_embd, m.n_layer, vocab_size
        forward = L * (24 * B * T * C * C + 4 * B * T * T * C) + 2 * B * T * C * V
        steps = max(self.max_iters - start, 0)
        evals = steps // self.eval_interval + 1
        flops = steps * 3 * forward + evals * 2 * self.eval_iters * forward
        return flops / TRAIN_FLOPS_PER_S + steps * BLOCK_STEP_S * L

    def adamw(self) -> AdamWConfig:
        return AdamWConfig(
            lr=self.lr, beta1=self.beta1, beta2=self.beta2, weight_decay=self.weight_decay
        )


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
    # a changed setting is named before the merged config is validated: otherwise a clash
    # with it would blame the checkpoint's own settings, which the user never typed
    _refuse_changes({k: v for k, v in overrides.items() if k in fields}, saved, path)
    return TrainConfig(
        **{**_BEFORE_RECORDED, **saved, **overrides, "out_dir": out_dir, "resume": True}
    )


def check_resumable(cfg: TrainConfig) -> None:
    """Raise ValueError unless ``cfg`` may resume the run in ``cfg.out_dir``: every setting
    but RESUMABLE must be the one its checkpoint was trained with."""
    path = os.path.join(cfg.out_dir, LAST)
    check_matches_checkpoint(cfg, load_checkpoint(path).config.get("train", {}), path)


def recorded_settings(saved: dict) -> dict:
    """Every ``TrainConfig`` setting a checkpoint's ``"train"`` config ``saved`` stands for:
    what it records, and for a setting newer than it, what the code then did (the field's
    default, or :data:`_BEFORE_RECORDED`'s where that default has changed since)."""
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)} | _BEFORE_RECORDED
    return {k: saved.get(k, v) for k, v in defaults.items()}


def check_matches_checkpoint(
    cfg: TrainConfig, saved: dict, path: str, may_change: Sequence[str] = RESUMABLE
) -> None:
    """Raise ValueError unless every setting of ``cfg`` but ``may_change`` is the one
    ``saved`` (the ``"train"`` config of the checkpoint at ``path``) records."""
    _refuse_changes(dataclasses.asdict(cfg), saved, path, tuple(may_change))


def _refuse_changes(
    values: dict, saved: dict, path: str, may_change: tuple[str, ...] = RESUMABLE
) -> None:
    recorded = recorded_settings(saved)  # a setting it does not record: _BEFORE_RECORDED
    for k, v in values.items():
        was = recorded[k]
        if k not in may_change and was != v:
            why = f" (only {', '.join(RESUMABLE[:3])} may change on resume)"
            raise ValueError(
                f"cannot resume {path!r}: {k} is {v!r} but the checkpoint was trained with "
                f"{was!r}" + (why if may_change == RESUMABLE else "")
            )
