"""Will it fit? An upper estimate of a command's memory, checked before it allocates.

Legend: B = batch, T = sequence, C = width, H = heads, L = depth, V = vocab size,
P = parameters.

A size that cannot fit (``resgrad flow --depth 100000``) should fail at once with
one line, not after minutes of swapping or with a MemoryError traceback. Each
estimate below counts the command's main arrays only and rounds every count up,
so it is an order-of-magnitude upper bound, not a prediction: it is meant to
refuse the impossible, never to refuse something that fits. The counts, per
element of the dtype:

- a GPT of L blocks: P = V*C + T*C + L*(12*C^2 + 13*C) + 2*C parameters;
- its forward caches per block, kept for the backward pass: at most 32*B*T*C
  (LayerNorms, q/k/v, the MLP's 4C hidden, dropout masks, residual sums) plus
  4*B*H*T*T (scores, probabilities, their gradients); the logits and their
  gradient: 3*B*T*V;
- training (float32): parameters, gradients and AdamW's two moments, 4*P, plus
  the caches; the character corpus as text, UTF-8 bytes and int64 ids: 14 bytes
  per character;
- the gradient-flow lab (float64): 4*P plus the caches, one seed at a time;
- the lesson's stack (float64): its bank of max(depth) C x C matrices and, per
  layer, 4*B*C of caches;
- the lesson's gradient check (float64): every W, its numerical gradient's
  workspace, 3*blocks*C^2, plus 10*rows*C;
- the split by path length (``resgrad paths``, float64, one batch at a time): the
  gradient-flow lab's 4*P and caches, plus the per-k parts the split carries down the
  stack, n + 1 arrays of (B, T, C) at the step's input and n + 1 at its output, n = 2L,
  and the model's own gradient at every boundary, (L + 1)*B*T*C; on the lesson's stack,
  per bank seed (all are built before they are split): the bank and its gradients,
  2*N*C^2, the caches and the reference stream, 8*N*B*C, the per-(boundary, k) and
  per-(parameter, k) norms and projections, 4*(N + 1)^2, and 512 bytes of Python per
  layer; plus the parts, 2*(N + 1)*B*C, and 1 MiB.

Available memory is the kernel's ``MemAvailable`` (``/proc/meminfo``), or free
physical pages where that file does not exist.
"""

from __future__ import annotations

import os

from resgrad.nn.model import GPTConfig
from resgrad.train.config import TrainConfig

__all__ = [
    "NotEnoughMemory",
    "available_bytes",
    "flow_bytes",
    "format_bytes",
    "gpt_bytes",
    "gpt_params",
    "lesson_gradcheck_bytes",
    "lesson_paths_bytes",
    "lesson_stack_bytes",
    "paths_bytes",
    "pretrained_flow_bytes",
    "require",
    "require_sample",
    "require_train",
    "sample_bytes",
    "train_bytes",
]

ASSUMED_VOCAB = 256  # V of a character corpus for an estimate made before it is read


class NotEnoughMemory(MemoryError):
    """A command's memory estimate exceeds what is available; the message gives both."""


def available_bytes() -> int | None:
    """Memory the kernel says a process can still allocate without swapping; None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the file counts kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def format_bytes(n: float) -> str:
    """``n`` bytes as e.g. ``'1.5 GiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError  # unreachable


def require(nbytes: float, what: str, available: int | None = None) -> None:
    """Refuse, with one line, if ``nbytes`` (an upper estimate) exceeds available memory.

    Raises
    ------
    NotEnoughMemory
        Naming ``what``, the estimate and the memory available.
    """
    avail = available_bytes() if available is None else available
    if avail is not None and nbytes > avail:
        raise NotEnoughMemory(
            f"{what} would need about {format_bytes(nbytes)} of memory (an upper estimate) "
            f"but {format_bytes(avail)} is available; choose smaller sizes"
        )


def gpt_params(L: int, C: int, T: int, V: int) -> int:
    """Parameters of a GPT of L blocks, width C, context T and vocabulary V."""
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C


def gpt_bytes(L: int, C: int, H: int, T: int, B: int, V: int, itemsize: int, states: int) -> int:
    """Upper estimate for a GPT's forward and backward on (B, T) tokens.

    ``states`` arrays the size of the parameters are held (2: parameters and
    gradients; 4: with AdamW's moments).
    """
    caches = L * (32 * B * T * C + 4 * B * H * T * T) + 3 * B * T * V
    return itemsize * (states * gpt_params(L, C, T, V) + caches)


def lesson_stack_bytes(depth: int, C: int, B: int) -> int:
    """Upper estimate for the lesson's tanh stack of ``depth`` layers (float64)."""
    return 8 * depth * (C * C + 4 * B * C)


def lesson_gradcheck_bytes(blocks: int, C: int, rows: int) -> int:
    """Upper estimate for the lesson's float64 gradient check."""
    return 8 * (3 * blocks * C * C + 10 * rows * C)


def flow_bytes(cfg) -> int:
    """Upper estimate for measuring one stack of the gradient-flow lab (one seed at a time)."""
    if cfg.variant.startswith("lesson-"):  # flow's LESSON_VARIANTS: the lesson's tanh stack
        return lesson_stack_bytes(cfg.depth, cfg.width, cfg.batch)
    return gpt_bytes(cfg.depth, cfg.width, cfg.heads, cfg.seq, cfg.batch, cfg.vocab, 8, 4)


def train_bytes(cfg: TrainConfig, model: GPTConfig | None = None) -> int:
    """Upper estimate for a training run: the float32 model, AdamW, caches and the corpus.

    ``model`` is the model's shape where it is known: a pretrained model's
    (``cfg.init_from``) is known only once it is loaded, which is why the trainer
    checks again then (:func:`resgrad.train.loop.train`'s ``fits``). Without it the
    shape is ``cfg``'s, with the BPE's ``vocab_size`` or, for characters, ASSUMED_VOCAB.
    """
    chars = 500_000  # the built-in corpus has about 465,000 characters
    if cfg.data is not None:
        try:
            chars = os.stat(cfg.data).st_size  # characters <= UTF-8 bytes
        except OSError:
            chars = 0  # reading it will fail with its own clear error
    m = model or cfg.gpt_config(cfg.vocab_size if cfg.tokenizer == "bpe" else ASSUMED_VOCAB)
    # T and B are the run's: a fine-tune may use less than the model's context
    weights = gpt_bytes(m.n_layer, m.n_embd, m.n_head, cfg.block_size, cfg.batch_size,
                        m.vocab_size, 4, 4)  # fmt: skip
    return weights + 14 * chars


def require_train(cfg: TrainConfig, model: GPTConfig | None = None) -> None:
    """:func:`require` for the training run ``cfg``: at once with ``cfg``'s shape, and again
    with a pretrained ``model``'s once it is known (the trainer's ``fits``, bound to ``cfg``)."""
    m = model or cfg  # the pretrained model's shape, once known
    require(train_bytes(cfg, model),
            f"this training run (L={m.n_layer} C={m.n_embd} T={cfg.block_size} "
            f"B={cfg.batch_size})")  # fmt: skip


def sample_bytes(m: GPTConfig, itemsize: int = 4) -> int:
    """Upper estimate for sampling a loaded model (``sample --from-pretrained``): the file's
    arrays and the model's (2*P), the KV cache of its whole context (2*L*T*C), and one
    forward step on up to T tokens (B = 1, the caches of one block, the logits)."""
    L, C, H, T, V = m.n_layer, m.n_embd, m.n_head, m.block_size, m.vocab_size
    P = gpt_params(L, C, T, V)
    return itemsize * (2 * P + 2 * L * T * C + 32 * T * C + 4 * H * T * T + 3 * T * V)


def require_sample(m: GPTConfig) -> None:
    """:func:`require` for sampling the loaded model of shape ``m`` (``resgrad sample``)."""
    require(sample_bytes(m), f"this model (L={m.n_layer} C={m.n_embd} V={m.vocab_size} "
            f"T={m.block_size})")  # fmt: skip


def pretrained_flow_bytes(m: GPTConfig, seq: int, batch: int, itemsize: int = 4) -> int:
    """Upper estimate for the gradient flow of a loaded model on (batch, seq) windows: the
    file's arrays, the parameters and their gradients, and the caches of the backward pass."""
    return gpt_bytes(m.n_layer, m.n_embd, m.n_head, seq, batch, m.vocab_size, itemsize, 4)


def paths_bytes(m: GPTConfig, seq: int, batch: int) -> int:
    """Upper estimate for splitting a loaded model's gradient by path length on (batch, seq)
    windows (float64; the file's arrays, the model, its float64 copy and its gradient)."""
    L, C, B, T = m.n_layer, m.n_embd, batch, seq
    n = 2 * L  # branches: every attention and every MLP
    parts = (2 * (n + 1) + L + 1) * B * T * C  # the per-k parts in and out of a step, dL/dx_i
    return gpt_bytes(L, C, m.n_head, T, B, m.vocab_size, 8, 4) + 8 * parts


def lesson_paths_bytes(depth: int, C: int, B: int, seeds: int = 1) -> int:
    """Upper estimate for splitting the lesson's stack of ``depth`` layers by path length,
    for ``seeds`` banks at once (float64)."""
    N = depth
    per_seed = 2 * N * C * C + 8 * N * B * C + 4 * (N + 1) ** 2 + 64 * N  # 64 x 8: Python
    return 8 * (seeds * per_seed + 2 * (N + 1) * B * C) + 2**20
