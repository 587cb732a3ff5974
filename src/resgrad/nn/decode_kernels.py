"""Compiled kernels of the one-token decode step (:func:`resgrad.train.sample.decode_step`).

Legend: B = batch (rows, one new token each), C = channels, H = heads, D = C / H,
S = cached positions the new token attends over (its own included).

Generating one token reads every weight once; the matrix-vector products that do it stay
BLAS, which reads memory at the bandwidth. What lies between them is small work on a few
rows, and NumPy runs it as a chain of calls, each with its own overhead and temporaries:
the attention over the cache (:func:`resgrad.train.sample.attention_step`, T = 1) is a
batched (B, H, 1, D) @ (B, H, D, S) product, a (B, H, 1, S) softmax, a second batched
product and two head copies. The kernel here does it in one compiled pass over its rows,
into buffers the caller reuses (the LayerNorms take :mod:`resgrad.nn.kernels`' own).

It computes what the readable NumPy code computes, in another order: sums run in eight
interleaved partial sums (the dot products over D) or left to right, and ``exp`` is
numba's. The results differ from the reference's in the last bits, not in meaning;
``tests/train/test_decode.py`` holds the decode step within 1e-12 (float64) and 1e-5
(float32) of the reference path, with the same greedy tokens. The order is fixed by the
code, not by threads or the vector width, so a run gives the same bytes every time.

numba compiles the kernel on its first call (:func:`resgrad.nn.kernels.compiled`, cached
on disk, GIL released). With :data:`resgrad.nn.kernels.ENABLED` set to False (the one
switch of every compiled kernel), :func:`available` is False and the decode step is not
taken.

This is a low-level module: it imports nothing from resgrad but the switch.
"""

from __future__ import annotations

import math

import numpy as np

from resgrad.nn import kernels

__all__ = ["attend_one", "available"]


def _attend_one(qkv, b_qkv, has_bias, k_cache, v_cache, pos, scale, zero, scores, y):
    # qkv (B, 3C) [q | k | v], k_cache, v_cache (B, H, block_size, D), scores (>= S,), y (B, C)
    B, H, D = k_cache.shape[0], k_cache.shape[1], k_cache.shape[3]
    C = H * D
    S = pos + 1  # the cached keys and the new one
    for b in range(B):
        if has_bias:
            for c in range(3 * C):
                qkv[b, c] = qkv[b, c] + b_qkv[c]  # 1) q, k, v = x w_qkv + b_qkv
        for h in range(H):
            q = qkv[b, h * D : (h + 1) * D]  # (D,) head h's query
            keys, vals = k_cache[b, h], v_cache[b, h]  # (block_size, D) views
            out = y[b, h * D : (h + 1) * D]  # (D,) head h's columns of y
            for d in range(D):  # 2) the new key and value appended at position pos
                keys[pos, d] = qkv[b, C + h * D + d]
                vals[pos, d] = qkv[b, 2 * C + h * D + d]
            mx = zero
            for s in range(S):  # 3) scores[s] = q . k_s * scale, eight partial sums over D
                k = keys[s]  # (D,)
                a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = zero
                d = 0
                while d + 8 <= D:
                    a0 += q[d] * k[d]
                    a1 += q[d + 1] * k[d + 1]
                    a2 += q[d + 2] * k[d + 2]
                    a3 += q[d + 3] * k[d + 3]
                    a4 += q[d + 4] * k[d + 4]
                    a5 += q[d + 5] * k[d + 5]
                    a6 += q[d + 6] * k[d + 6]
                    a7 += q[d + 7] * k[d + 7]
                    d += 8
                while d < D:  # D not a multiple of 8: the rest into the first sum
                    a0 += q[d] * k[d]
                    d += 1
                sc = (((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))) * scale
                scores[s] = sc
                if s == 0 or sc > mx:
                    mx = sc  # the row max, so that exp stays in range
            tot = zero
            for s in range(S):  # 4) softmax: exp(scores - max) / their sum
                e = math.exp(scores[s] - mx)
                scores[s] = e
                tot += e
            for d in range(D):
                out[d] = zero
            for s in range(S):  # 5) y = p @ V, head h's D columns of y
                p = scores[s] / tot
                v = vals[s]  # (D,)
                for d in range(D):
                    out[d] += p * v[d]


def available(dtype) -> bool:
    """Whether the decode kernels run on arrays of ``dtype``: the switch
    (:data:`resgrad.nn.kernels.ENABLED`, read at each call) is on and the dtype is float32
    or float64."""
    return kernels.ENABLED and np.dtype(dtype) in (np.float32, np.float64)


def attend_one(
    qkv: np.ndarray,
    b_qkv: np.ndarray | None,
    k_cache: np.ndarray,
    v_cache: np.ndarray,
    pos: int,
    scores: np.ndarray,
    y: np.ndarray,
) -> bool:
    """One new token's causal attention over the cache, per row and head, in one pass.

    With ``q, k, v = qkv + b_qkv`` (heads of D consecutive columns, as
    :func:`resgrad.nn.layers.attention_forward`): writes k and v into the caches at
    position ``pos``, then ``y = softmax(q K^T / sqrt(D)) V`` over positions 0..pos, heads
    side by side. This is :func:`resgrad.train.sample.attention_step`'s steps 2-7 for
    T = 1, without its (B, H, 1, S) temporaries.

    Parameters
    ----------
    qkv : ndarray, shape (B, 3C)
        ``x @ w_qkv`` of the new tokens, without the bias; the bias is added in place.
    b_qkv : ndarray, shape (3C,), or None
    k_cache, v_cache : ndarray, shape (B, H, block_size, D)
        Written at position ``pos``; positions 0..pos-1 hold the earlier tokens.
    pos : int
        The new token's position, 0 <= pos < block_size.
    scores : ndarray, shape (>= pos + 1,)
        Scratch.
    y : ndarray, shape (B, C)
        Receives the attention's output, before the output projection.

    Returns
    -------
    bool
        False (nothing written) where the kernel does not run: the switch off, no numba,
        an array not C-contiguous or of another dtype.
    """
    if not kernels.ENABLED:
        return False
    B, H, n, D = k_cache.shape
    if not 0 <= pos < n:
        raise ValueError(f"cache holds {n} positions, {pos + 1} needed")
    if qkv.shape != (B, 3 * H * D) or y.shape != (B, H * D) or scores.shape[0] <= pos:
        raise ValueError(
            f"qkv {qkv.shape}, y {y.shape}, scores {scores.shape} do not fit a cache "
            f"{k_cache.shape} at position {pos}"
        )
    bias = qkv[0] if b_qkv is None else b_qkv  # (3C,) unread without a bias
    fn = kernels.compiled(_attend_one, qkv, bias, k_cache, v_cache, scores, y)
    if fn is None:  # the switch off, or an array not C-contiguous or of another dtype
        return False
    f = qkv.dtype.type
    fn(qkv, bias, b_qkv is not None, k_cache, v_cache, pos, f(1.0 / math.sqrt(D)), f(0.0),
       scores, y)  # fmt: skip
    return True
