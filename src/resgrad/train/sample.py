"""Text generation with a KV cache: each new token costs work linear in the context.

Legend: B = batch, T = new tokens in one call, S = tokens in the cache (keys),
C = channels, H = heads, D = C / H, V = vocab size, L = n_layer.

``GPT.forward`` recomputes every position's keys and values each time it is
called, so generating N tokens that way costs O(N^2) projections. Here each
block keeps the keys and values of the tokens it has already seen
(:class:`KVCache`); a new token computes only its own q, k, v and attends over
the cached keys: O(S C) for attention and O(C^2) for the projections.

The rest of each block (LayerNorm, MLP, the residual scheme) is position-wise,
so it is the same layer functions as the model's, called on the new rows only.
tests/train/test_sample.py proves that the cached logits equal ``GPT.forward``'s at
every position, for every residual scheme.

Cropping: positions are learned embeddings for 0..block_size-1, so the context
can hold at most block_size tokens. Once it is full, the next token is
predicted from the last block_size tokens (as nanoGPT does): every position
shifts by one, so the cache is rebuilt from those tokens in one batched pass.
Past block_size tokens, each new token therefore costs one forward of
block_size tokens, as without a cache.

One new token: :func:`forward_step` with T = 1 (each token after the first call) takes
:func:`decode_step`, the same computation with the small work between the matrix-vector
products compiled (:mod:`resgrad.nn.decode_kernels`): the KV-cache append and the
attention over the cache in one pass per row and head, without the (B, H, 1, S) scores
and the head copies of :func:`attention_step`. The
products stay BLAS, written into buffers the cache keeps (:class:`DecodeBuffers`) and
reused for every layer and token. ``resgrad.nn.kernels.ENABLED = False`` turns it off:
:func:`forward_step` then runs the readable code below for every T, the reference that
tests/train/test_decode.py holds the decode step to.

Threads: a small model's products are too small to split. When the caller leaves
the thread count to resgrad (``resgrad sample`` without ``--threads``), a model
whose token costs fewer than ``DECODE_ONE_THREAD_FLOPS`` matmul FLOPs generates on
one BLAS thread (:func:`decode_threads`): a second thread cannot help it on an idle
machine and, spinning while it waits, costs it dearly on a busy one.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from threadpoolctl import threadpool_limits

from resgrad.formats.checkpoint import BEST, LAST, Checkpoint, check_params, load_checkpoint
from resgrad.nn import decode_kernels
from resgrad.nn.blocks import FINAL_LN, block_alpha, scheme_forward
from resgrad.nn.layers import (
    ACTIVATIONS,
    ATTN_KEYS,
    MLP_KEYS,
    layernorm_forward,
    linear_forward,
    mlp_forward,
    softmax,
)
from resgrad.nn.model import GPT, GPTConfig
from resgrad.train.bpe import BPETokenizer, tokenizer_from_record
from resgrad.train.data import CharTokenizer

__all__ = [
    "DECODE_ONE_THREAD_FLOPS",
    "DecodeBuffers",
    "KVCache",
    "attention_step",
    "continue_text",
    "decode_step",
    "decode_threads",
    "forward_step",
    "generate",
    "load_model",
    "sample_text",
    "sample_token",
    "to_stdout",
    "token_flops",
]

# Matmul FLOPs of a token's forward (token_flops) below which generating takes one BLAS
# thread. One forward_step on an idle 2-core machine, ms with 1 / 2 threads, for a new
# token and for a window of 64 rebuilt after cropping: the run-sized model (L=4, C=128,
# V=65: 1.6 MFLOP a token) 0.39 / 0.39 and 1.32 / 1.46; L=4, C=192 (3.6 MFLOP) 0.41 / 0.39
# and 3.69 / 5.15; L=4, C=256 (6.3 MFLOP) 0.86 / 0.62 and 5.98 / 6.05; GPT-2 124M
# (247 MFLOP) 25.4 / 18.0 for a new token.
DECODE_ONE_THREAD_FLOPS = 4_000_000


@dataclass
class DecodeBuffers:
    """The scratch of :func:`decode_step` for B rows, reused by every layer and token."""

    x: np.ndarray  # (B, C) the residual stream
    qkv: np.ndarray  # (B, 3C) the new tokens' q, k, v
    y: np.ndarray  # (B, C) attention's output, before its projection
    f: np.ndarray  # (B, C) a sublayer's output
    a: np.ndarray  # (B, F) the MLP's hidden layer, F = 4C
    scores: np.ndarray  # (block_size,) one head's attention weights over the cache

    @classmethod
    def empty(cls, cfg: GPTConfig, batch: int, dtype) -> DecodeBuffers:
        """Uninitialised buffers for ``batch`` rows of a ``cfg``-shaped model, in ``dtype``."""
        B, C = batch, cfg.n_embd
        return cls(
            x=np.empty((B, C), dtype),  # (B, C)
            qkv=np.empty((B, 3 * C), dtype),  # (B, 3C)
            y=np.empty((B, C), dtype),  # (B, C)
            f=np.empty((B, C), dtype),  # (B, C)
            a=np.empty((B, 4 * C), dtype),  # (B, F)
            scores=np.empty(cfg.block_size, dtype),  # (block_size,)
        )


@dataclass
class KVCache:
    """Keys and values of the first ``length`` positions, for each block.

    ``k[l]`` and ``v[l]`` have shape (B, H, block_size, D); entries at and
    beyond ``length`` are unused. ``buffers`` holds :func:`decode_step`'s scratch,
    made on its first call.
    """

    k: list[np.ndarray]
    v: list[np.ndarray]
    length: int = 0
    buffers: DecodeBuffers | None = field(default=None, repr=False, compare=False)

    def decode_buffers(self, cfg: GPTConfig, batch: int, dtype) -> DecodeBuffers:
        """:attr:`buffers`, made (again) if there are none for ``batch`` rows of ``dtype``."""
        buf = self.buffers
        if (
            buf is None
            or buf.x.shape != (batch, cfg.n_embd)
            or buf.x.dtype != dtype
            or buf.scores.shape[0] < cfg.block_size
        ):
            buf = self.buffers = DecodeBuffers.empty(cfg, batch, dtype)
        return buf

    @classmethod
    def empty(cls, cfg: GPTConfig, batch: int, dtype) -> KVCache:
        H, D = cfg.n_head, cfg.n_embd // cfg.n_head
        shape = (batch, H, cfg.block_size, D)  # (B, H, block_size, D)
        return cls(
            k=[np.zeros(shape, dtype) for _ in range(cfg.n_layer)],
            v=[np.zeros(shape, dtype) for _ in range(cfg.n_layer)],
        )


def attention_step(
    x: np.ndarray,
    w_qkv: np.ndarray,
    b_qkv: np.ndarray | None,
    w_proj: np.ndarray,
    b_proj: np.ndarray | None,
    n_head: int,
    k_cache: np.ndarray,
    v_cache: np.ndarray,
    start: int,
) -> np.ndarray:
    """Causal self-attention of T new tokens at positions ``start..start+T-1`` over the cache.

    The new tokens' keys and values are written into ``k_cache``/``v_cache``
    at those positions; each new query attends to every cached key up to its
    own position. Same layout as :func:`resgrad.nn.layers.attention_forward`
    (fused [q | k | v] columns, H heads of D consecutive columns), inference
    only (no dropout).

    Parameters
    ----------
    x : ndarray, shape (B, T, C)
    w_qkv, b_qkv, w_proj, b_proj, n_head
        As :func:`resgrad.nn.layers.attention_forward`.
    k_cache, v_cache : ndarray, shape (B, H, block_size, D)
        Updated in place at positions start..start+T-1.
    start : int
        Number of positions already in the cache.

    Returns
    -------
    out : ndarray, shape (B, T, C)
    """
    B, T, C = x.shape
    H, D = n_head, C // n_head
    S = start + T  # keys visible after this call
    if S > k_cache.shape[2]:
        raise ValueError(f"cache holds {k_cache.shape[2]} positions, {S} needed")
    qkv, _ = linear_forward(x, w_qkv, b_qkv)  # 1) (B,T,C) @ (C,3C) -> (B,T,3C)
    q, k, v = qkv.reshape(B, T, 3, H, D).transpose(2, 0, 3, 1, 4)  # 2) 3 x (B,H,T,D)
    k_cache[:, :, start:S] = k  # 3) (B,H,T,D) appended to the cached keys
    v_cache[:, :, start:S] = v  # 3) (B,H,T,D) and values
    keys, vals = k_cache[:, :, :S], v_cache[:, :, :S]  # (B,H,S,D) views, no copy
    att = q @ keys.swapaxes(-1, -2)  # 4) (B,H,T,D) @ (B,H,D,S) -> (B,H,T,S)
    att *= x.dtype.type(1.0 / math.sqrt(D))  # (B,H,T,S)
    if T > 1:  # new query i sits at position start + i: it sees keys s <= start + i
        future = np.arange(S)[None, :] > start + np.arange(T)[:, None]  # (T, S) bool
        att[..., future] = -np.inf  # (B,H,T,S)
    att = softmax(att, axis=-1)  # 5) (B,H,T,S)
    y = att @ vals  # 6) (B,H,T,S) @ (B,H,S,D) -> (B,H,T,D)
    y = y.transpose(0, 2, 1, 3).reshape(B, T, C)  # 7) (B,T,C) heads side by side
    out, _ = linear_forward(y, w_proj, b_proj)  # 8) (B,T,C) @ (C,C) -> (B,T,C)
    return out


def forward_step(model: GPT, idx: np.ndarray, cache: KVCache) -> np.ndarray:
    """Logits of T new tokens that follow the ``cache.length`` cached ones.

    Parameters
    ----------
    model : GPT
    idx : int ndarray, shape (B, T)
        The new tokens, at positions cache.length .. cache.length + T - 1.
    cache : KVCache
        Extended in place by T positions.

    Returns
    -------
    logits : ndarray, shape (B, T, V)
    """
    cfg, p = model.cfg, model.params
    B, T = idx.shape
    t0 = cache.length
    if t0 + T > cfg.block_size:
        raise ValueError(f"context of {t0 + T} tokens exceeds block_size {cfg.block_size}")
    if T == 1 and decode_kernels.available(p["wte"].dtype):
        return decode_step(model, idx, cache)  # the same logits, compiled (module docstring)
    # the reference: every T, and T = 1 with resgrad.nn.kernels.ENABLED = False
    x = p["wte"][idx] + p["wpe"][t0 : t0 + T]  # (B,T,C) token + position embedding
    for layer in range(cfg.n_layer):
        pre = f"blocks.{layer}"
        alpha = block_alpha(p, pre, cfg, x.dtype)
        attn = [p.get(f"{pre}.attn.{k}") for k in ATTN_KEYS]
        mlp = [p.get(f"{pre}.mlp.{k}") for k in MLP_KEYS]

        def f_attn(h, attn=attn, layer=layer):  # the cached attention, in place of training's
            out = attention_step(h, *attn, cfg.n_head, cache.k[layer], cache.v[layer], t0)
            return out, None

        def f_mlp(h, mlp=mlp):
            return mlp_forward(h, *mlp, activation=cfg.activation)

        for ln, f in (("ln1", f_attn), ("ln2", f_mlp)):  # the block's two sublayers
            g, b = p.get(f"{pre}.{ln}.g"), p.get(f"{pre}.{ln}.b")
            x, _ = scheme_forward(x, f, cfg.variant, g, b, cfg.ln_eps, alpha)  # (B,T,C)
    if cfg.variant in FINAL_LN:
        x, _ = layernorm_forward(x, p["ln_f.g"], p.get("ln_f.b"), cfg.ln_eps)  # (B,T,C)
    cache.length = t0 + T
    return x @ p["wte"].T  # (B,T,C) @ (C,V) -> (B,T,V), the LM head tied to wte


def _attention_one(h, attn, n_head, k_cache, v_cache, pos, buf, out=None):
    """:func:`attention_step` of one new token a row, ``h`` (B, C) -> (B, C), through the
    kernel; into ``out`` if given. The reference where the kernel does not run."""
    w_qkv, b_qkv, w_proj, b_proj = attn
    np.dot(h, w_qkv, out=buf.qkv)  # 1) (B,C) @ (C,3C) -> (B,3C), bias added by the kernel
    if not decode_kernels.attend_one(buf.qkv, b_qkv, k_cache, v_cache, pos, buf.scores, buf.y):
        y = attention_step(h[:, None], *attn, n_head, k_cache, v_cache, pos)  # (B,1,C)
        return y[:, 0]  # (B,C)
    out = np.dot(buf.y, w_proj, out=out)  # 2)-8) (B,C) @ (C,C) -> (B,C)
    if b_proj is not None:
        out += b_proj  # (B,C)
    return out


def _mlp_one(h, mlp, activation, buf, out=None):
    """:func:`resgrad.nn.layers.mlp_forward` of ``h`` (B, C) -> (B, C), its hidden layer in
    the buffers; into ``out`` if given. Inference: no dropout."""
    w_fc, b_fc, w_proj, b_proj = mlp
    a = np.dot(h, w_fc, out=buf.a)  # 1) (B,C) @ (C,F) -> (B,F)
    if b_fc is not None:
        a += b_fc  # (B,F)
    a, _ = ACTIVATIONS[activation][0](a)  # 2) (B,F) gelu, in the form the config names
    out = np.dot(a, w_proj, out=out)  # 3) (B,F) @ (F,C) -> (B,C)
    if b_proj is not None:
        out += b_proj  # (B,C)
    return out


def decode_step(model: GPT, idx: np.ndarray, cache: KVCache) -> np.ndarray:
    """:func:`forward_step` for one new token a row (T = 1), its small work compiled.

    The same logits as the reference (in the last bits: the kernels sum in another order,
    :mod:`resgrad.nn.decode_kernels`). Per block: the attention sublayer is one product
    for q, k, v, one kernel pass that appends k and v to the cache and attends over it,
    and the output projection; the MLP is its two products around the GELU; the matrix-
    vector products are BLAS, into :class:`DecodeBuffers`. Under pre-ln (GPT-2's) the
    block runs in place on the residual stream, its LayerNorms compiled too; the other
    schemes wrap the same two sublayers in :func:`resgrad.nn.blocks.scheme_forward`, as
    the reference does. :func:`forward_step` takes it where the kernels run (float32,
    float64, ``resgrad.nn.kernels.ENABLED``); call that instead.

    Parameters
    ----------
    model : GPT
    idx : int ndarray, shape (B, 1)
        The new tokens, at position cache.length.
    cache : KVCache
        Extended in place by one position.

    Returns
    -------
    logits : ndarray, shape (B, 1, V)
    """
    cfg, p = model.cfg, model.params
    B, T = idx.shape
    t0 = cache.length
    if T != 1:
        raise ValueError(f"decode_step takes one new token a row, got {T}")
    if t0 + 1 > cfg.block_size:
        raise ValueError(f"context of {t0 + 1} tokens exceeds block_size {cfg.block_size}")
    wte = p["wte"]
    buf = cache.decode_buffers(cfg, B, wte.dtype)
    x = np.add(wte[idx[:, 0]], p["wpe"][t0], out=buf.x)  # (B,C) token + position embedding
    for layer in range(cfg.n_layer):
        pre = f"blocks.{layer}"
        attn = [p.get(f"{pre}.attn.{k}") for k in ATTN_KEYS]
        mlp = [p.get(f"{pre}.mlp.{k}") for k in MLP_KEYS]
        g1, b1 = p.get(f"{pre}.ln1.g"), p.get(f"{pre}.ln1.b")
        g2, b2 = p.get(f"{pre}.ln2.g"), p.get(f"{pre}.ln2.b")
        kc, vc = cache.k[layer], cache.v[layer]
        if cfg.variant == "pre-ln":  # x += f(ln(x)), in place in the buffers
            h, _ = layernorm_forward(x, g1, b1, cfg.ln_eps)  # (B,C) ln1(x)
            x += _attention_one(h, attn, cfg.n_head, kc, vc, t0, buf, buf.f)  # (B,C)
            h, _ = layernorm_forward(x, g2, b2, cfg.ln_eps)  # (B,C) ln2(x)
            x += _mlp_one(h, mlp, cfg.activation, buf, buf.f)  # (B,C)
            continue
        alpha = block_alpha(p, pre, cfg, x.dtype)

        def f_attn(h, attn=attn, kc=kc, vc=vc):  # (B,1,C) -> (B,1,C), a fresh array
            return _attention_one(h[:, 0], attn, cfg.n_head, kc, vc, t0, buf)[:, None], None

        def f_mlp(h, mlp=mlp):  # (B,1,C) -> (B,1,C), a fresh array
            return _mlp_one(h[:, 0], mlp, cfg.activation, buf)[:, None], None

        x3 = x[:, None]  # (B,1,C)
        x3, _ = scheme_forward(x3, f_attn, cfg.variant, g1, b1, cfg.ln_eps, alpha)  # (B,1,C)
        x3, _ = scheme_forward(x3, f_mlp, cfg.variant, g2, b2, cfg.ln_eps, alpha)  # (B,1,C)
        x = x3[:, 0]  # (B,C)
    if cfg.variant in FINAL_LN:
        x, _ = layernorm_forward(x, p["ln_f.g"], p.get("ln_f.b"), cfg.ln_eps)  # (B,C)
    cache.length = t0 + 1
    return np.dot(x, wte.T)[:, None]  # (B,C) @ (C,V) -> (B,1,V), the LM head tied to wte


def sample_token(
    logits: np.ndarray, rng: np.random.Generator, temperature: float = 1.0, top_k: int | None = None
) -> np.ndarray:
    """Draw one token per row from ``softmax(logits / temperature)``, top-k truncated.

    Parameters
    ----------
    logits : ndarray, shape (B, V)
    rng : np.random.Generator
        Draws B uniforms: the same state gives the same tokens.
    temperature : float > 0
    top_k : int >= 1, optional
        Keep only the k largest logits of each row (all when None or >= V).

    Returns
    -------
    int64 ndarray, shape (B,)
    """
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    l64 = logits.astype(np.float64)  # (B, V) in float64 for the CDF
    with np.errstate(over="ignore"):  # -inf below the row max is exact: exp gives 0
        z = l64 / temperature  # (B, V)
        if not np.isfinite(z).all() and np.isfinite(l64).all():  # a temperature so small
            # that logits / T overflow: the same distribution, from the row max
            z = (l64 - l64.max(axis=-1, keepdims=True)) / temperature  # (B, V) <= 0
    V = z.shape[-1]
    if top_k is not None:
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k!r}")
        if top_k == 1 and V > 1:  # greedy: the largest logit, if one, has probability 1
            best = np.argmax(z, axis=-1)  # (B,) first index of each row's max
            zmax = np.take_along_axis(z, best[:, None], axis=-1)  # (B, 1)
            if np.isfinite(zmax).all() and ((z == zmax).sum(axis=-1) == 1).all():
                rng.random((z.shape[0], 1))  # the draw the CDF below would take: same stream
                return best.astype(np.int64)  # (B,) what the CDF gives: its only step
        if top_k < V:
            kth = np.partition(z, V - top_k, axis=-1)[:, V - top_k, None]  # (B, 1)
            z = np.where(z < kth, -np.inf, z)  # (B, V)
    probs = softmax(z, axis=-1)  # (B, V)
    cdf = np.cumsum(probs, axis=-1)  # (B, V)
    u = rng.random((z.shape[0], 1)) * cdf[:, -1:]  # (B, 1) scaled: cdf[-1] may be 1 - 1e-16
    return np.minimum((cdf <= u).sum(axis=-1), V - 1).astype(np.int64)  # (B,)


def token_flops(cfg: GPTConfig) -> int:
    """Matmul FLOPs of one token's forward: the blocks' QKV, projection and MLP (24 L C^2)
    and the LM head (2 C V); attention over the cache (4 S C L) is left out."""
    C, L, V = cfg.n_embd, cfg.n_layer, cfg.vocab_size
    return L * 24 * C * C + 2 * C * V


def decode_threads(cfg: GPTConfig) -> int | None:
    """BLAS threads for generating with a model of ``cfg``'s shape, when the caller left
    the count to resgrad: 1 below :data:`DECODE_ONE_THREAD_FLOPS` a token, where more
    cannot help (the module docstring); None, BLAS as it is set, at or above it."""
    return 1 if token_flops(cfg) < DECODE_ONE_THREAD_FLOPS else None


def generate(
    model: GPT,
    idx: np.ndarray,
    num_tokens: int,
    rng: np.random.Generator,
    temperature: float = 1.0,
    top_k: int | None = None,
    logits_out: list | None = None,
    on_token: Callable[[np.ndarray], None] | None = None,
    auto_threads: bool = False,
) -> np.ndarray:
    """Continue each row of ``idx`` by ``num_tokens`` sampled tokens.

    Parameters
    ----------
    model : GPT
    idx : int ndarray, shape (B, T0), T0 >= 1
        The start; only its last block_size tokens are seen.
    num_tokens : int >= 0
    rng, temperature, top_k
        As :func:`sample_token`.
    logits_out : list, optional
        If given, receives the (B, V) logits each new token was drawn from.
    on_token : callable, optional
        Called with each new token, int64 (B,), as soon as it is drawn (to stream it).
    auto_threads : bool
        The caller left the BLAS thread count to resgrad (``resgrad sample`` without
        ``--threads``): a model below :data:`DECODE_ONE_THREAD_FLOPS` a token generates
        on one thread (:func:`decode_threads`). False: BLAS as it is set.

    Returns
    -------
    int64 ndarray, shape (B, T0 + num_tokens)
    """
    idx = np.asarray(idx, dtype=np.int64)
    if idx.ndim != 2 or idx.shape[1] < 1:
        raise ValueError(f"idx must be (B, T0) with T0 >= 1, got shape {idx.shape}")
    if num_tokens < 0:
        raise ValueError(f"num_tokens must be >= 0, got {num_tokens!r}")
    if num_tokens == 0:
        return idx.copy()
    one = decode_threads(model.cfg) if auto_threads else None
    blas = contextlib.nullcontext() if one is None else threadpool_limits(one, user_api="blas")
    with blas:
        return _generate(model, idx, num_tokens, rng, temperature, top_k, logits_out, on_token)


def _generate(model, idx, num_tokens, rng, temperature, top_k, logits_out, on_token):
    """:func:`generate`'s loop, its arguments checked; num_tokens >= 1."""
    bs = model.cfg.block_size
    cache = KVCache.empty(model.cfg, idx.shape[0], model.params["wte"].dtype)
    out = [idx]
    logits = forward_step(model, idx[:, -bs:], cache)[:, -1]  # (B, V) the start, in one pass
    for n in range(num_tokens):
        if logits_out is not None:
            logits_out.append(logits)
        nxt = sample_token(logits, rng, temperature, top_k)  # (B,)
        out.append(nxt[:, None])  # (B, 1)
        if on_token is not None:
            on_token(nxt)
        if n + 1 == num_tokens:
            break
        if cache.length < bs:
            logits = forward_step(model, nxt[:, None], cache)[:, -1]  # (B, V) one new position
        else:  # the window is full: crop to the last block_size tokens and rebuild the cache
            context = np.concatenate(out, axis=1)[:, -bs:]  # (B, block_size)
            cache.length = 0
            logits = forward_step(model, context, cache)[:, -1]  # (B, V)
    return np.concatenate(out, axis=1)  # (B, T0 + num_tokens)


def load_model(
    path: str | os.PathLike, best: bool = False
) -> tuple[GPT, CharTokenizer | BPETokenizer, Checkpoint]:
    """The model and vocabulary of a checkpoint file, or of a run directory's
    ``last.ckpt`` (``best.ckpt`` with ``best``).

    Raises
    ------
    ValueError
        If the checkpoint is corrupted or its parameters do not fit its config.
    OSError
        If there is no checkpoint there.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{path!r} does not exist (expected a training run's --out-dir or a checkpoint file)"
        )
    if os.path.isdir(path):
        name = BEST if best else LAST
        path = os.path.join(path, name)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no checkpoint {name!r} in {os.path.dirname(path)!r}")
    elif best:
        raise ValueError(
            f"--best picks a run directory's {BEST}; {path!r} is a checkpoint file already"
        )
    ckpt = load_checkpoint(path)
    try:
        cfg = GPTConfig(**ckpt.config["model"])
    except (KeyError, TypeError) as e:
        raise ValueError(f"checkpoint {path!r} has no usable model config: {e}") from None
    tok = tokenizer_from_record(ckpt.tokenizer, ckpt.vocab)
    if tok.vocab_size != cfg.vocab_size:
        raise ValueError(
            f"checkpoint {path!r}: vocabulary of {tok.vocab_size} tokens but "
            f"vocab_size {cfg.vocab_size}"
        )
    dtype = next(iter(ckpt.params.values())).dtype if ckpt.params else np.float32
    model = GPT(cfg, seed=0, dtype=dtype)
    check_params(ckpt.params, model.params, where=f"checkpoint {path!r}")
    for k, v in ckpt.params.items():
        model.params[k][...] = v
    return model, tok, ckpt


def to_stdout(text: str) -> None:
    """An ``on_text`` that prints each piece at once, as it is drawn (``resgrad sample``):
    an interrupt keeps on screen what was generated."""
    sys.stdout.write(text)
    sys.stdout.flush()


def sample_text(
    path: str | os.PathLike,
    start: str,
    num_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
    best: bool = False,
    on_text: Callable[[str], None] | None = None,
    auto_threads: bool = False,
) -> str:
    """Load a checkpoint (as :func:`load_model`) and continue ``start``; returns start
    plus the new text. ``on_text``, if given, receives the text as it is drawn (as
    :func:`continue_text`; a streaming printer keeps what an interrupt cuts);
    ``auto_threads`` as :func:`generate`.

    Raises
    ------
    ValueError
        If ``start`` is empty or has characters outside the model's vocabulary.
    """
    model, tok, _ = load_model(path, best)
    if not start:
        raise ValueError("the start text is empty; give at least one character")
    try:
        ids = tok.encode(start)  # (T0,)
    except ValueError as e:
        raise ValueError(f"start text: {e}") from None
    return continue_text(
        model, tok, start, ids, num_tokens, temperature, top_k, seed, on_text, auto_threads
    )


def continue_text(
    model: GPT,
    tok,
    start: str,
    ids: np.ndarray,
    num_tokens: int,
    temperature: float,
    top_k: int | None,
    seed: int,
    on_text: Callable[[str], None] | None = None,
    auto_threads: bool = False,
) -> str:
    """``start`` (token ids ``ids``, (T0,)) plus ``num_tokens`` sampled tokens, as text.

    ``on_text``, if given, receives ``start`` and then the new text as it is drawn: each
    token's characters once they are whole (``tok.decode_stream``: a byte-level token
    may end inside a character), and at the end whatever the decoder still held. The
    pieces it receives add up to the text returned. ``auto_threads``: as :func:`generate`.
    """
    stream, sent = None, []
    if on_text is not None:
        on_text(start)
        step = tok.decode_stream()

        def stream(t: np.ndarray) -> None:  # (B=1,) the token just drawn
            piece = step(int(t[0]))
            if piece:
                sent.append(piece)
                on_text(piece)

    out = generate(
        model,
        ids[None, :],
        num_tokens,
        np.random.default_rng(seed),
        temperature,
        top_k,
        on_token=stream,
        auto_threads=auto_threads,
    )  # (1, T0 + N)
    if on_text is not None:  # what the stream held back: an unfinished character's bytes
        new_text, shown = tok.decode(out[0, len(ids) :]), "".join(sent)
        if new_text.startswith(shown) and len(new_text) > len(shown):
            on_text(new_text[len(shown) :])
    return tok.decode(out[0])
