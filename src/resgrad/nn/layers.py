"""Every layer of a GPT as a forward/backward pair, side by side.

Legend: B = batch, T = time (sequence length), C = channels (n_embd),
H = heads, D = C / H (head size), V = vocab size, F = 4C (MLP hidden width),
N = any number of leading rows (B*T, or B, or nothing).

Each pair reads like the lesson's ``sublayer_forward`` / ``sublayer_backward``:

- ``out, cache = x_forward(x, <params>)`` and
  ``dx, d<params>... = x_backward(dout, cache)``, in the forward's argument order;
- the forward numbers its steps; the backward quotes them in reverse;
- the cache is a NamedTuple holding only what the backward needs;
- every function returns fresh arrays (preallocated ``out=`` buffers can come
  later without changing a signature); the model owns any accumulation.

Linear weights are (C_in, C_out): ``out = x @ w + b``, computed as one 2-D matmul
over all N = B*T rows (one BLAS call rather than B). Everything keeps the
dtype of its inputs: float32 trains, float64 checks. Python-float constants
are cast with ``x.dtype.type`` so that nothing is silently upcast to float64.

At the end, thin module objects (:class:`Linear`, :class:`LayerNorm`,
:class:`MLP`, :class:`CausalSelfAttention`) carry named parameters and satisfy
:class:`resgrad.nn.residual.Module`, so ``Residual(MLP(...))`` is a residual block.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

from resgrad.nn import kernels

__all__ = [
    "ACTIVATIONS",
    "ATTN_BLOCK",
    "ATTN_KEYS",
    "MLP_KEYS",
    "CausalSelfAttention",
    "LayerNorm",
    "Linear",
    "MLP",
    "attention_backward",
    "attention_forward",
    "causal_mask",
    "cross_entropy_backward",
    "cross_entropy_forward",
    "dropout_backward",
    "dropout_forward",
    "embedding_backward",
    "embedding_forward",
    "gelu_backward",
    "gelu_erf_backward",
    "gelu_erf_forward",
    "gelu_forward",
    "layernorm_backward",
    "layernorm_forward",
    "linear_backward",
    "linear_forward",
    "mlp_backward",
    "mlp_forward",
    "relu_backward",
    "relu_forward",
    "sdpa_backward",
    "sdpa_forward",
    "sdpa_probs",
    "softmax",
    "tanh_backward",
    "tanh_forward",
]


def _require_last_dim(name: str, x: np.ndarray, n: int, what: str) -> None:
    if x.ndim < 1 or x.shape[-1] != n:
        raise ValueError(f"{name} has shape {x.shape}; expected last dimension {n} ({what})")


def _require_shape(name: str, a: np.ndarray, shape: tuple[int, ...]) -> None:
    if a.shape != shape:
        raise ValueError(f"{name} has shape {a.shape}; expected {shape}")


def _sum_last(x: np.ndarray) -> np.ndarray:
    """Sum over the last axis, kept as an axis of size 1: (..., n) -> (..., 1).

    Computed as a matrix-vector product with ones, which BLAS does 4-7x faster than
    ``x.sum(axis=-1, keepdims=True)`` on the short rows of this model, to the same
    accuracy: (2048, 128) float32, 0.061 -> 0.012 ms; attention rows of 64, 0.167 ->
    0.028 ms on (32, 4, 64, 64).
    """
    return (x @ np.ones(x.shape[-1], dtype=x.dtype))[..., None]  # (..., n) @ (n,) -> (..., 1)


# --------------------------------------------------------------------------- linear


class LinearCache(NamedTuple):
    x: np.ndarray  # (..., C_in) input
    w: np.ndarray  # (C_in, C_out) weight
    has_bias: bool  # whether the forward added b


def linear_forward(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None
) -> tuple[np.ndarray, LinearCache]:
    """``out = x @ w + b``: (..., C_in) -> (..., C_out).

    Parameters
    ----------
    x : ndarray, shape (..., C_in)
    w : ndarray, shape (C_in, C_out)
    b : ndarray, shape (C_out,), or None for a linear map without bias

    Returns
    -------
    out : ndarray, shape (..., C_out)
    cache : LinearCache
    """
    if w.ndim != 2:
        raise ValueError(f"w has shape {w.shape}; expected a 2-D (C_in, C_out) weight")
    _require_last_dim("x", x, w.shape[0], "C_in, the rows of w")
    if b is not None:
        _require_shape("b", b, (w.shape[1],))
    out = x.reshape(-1, w.shape[0]) @ w  # 1) (N, C_in) @ (C_in, C_out) -> (N, C_out), one GEMM
    if b is not None:
        out += b  # 2) (N, C_out) + (C_out,)
    return out.reshape(*x.shape[:-1], w.shape[1]), LinearCache(x, w, b is not None)


def linear_backward(
    dout: np.ndarray, cache: LinearCache
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Backward of :func:`linear_forward`: returns ``(dx, dw, db)``; db is None without bias."""
    x, w, has_bias = cache
    C_in, C_out = w.shape
    dout2 = dout.reshape(-1, C_out)  # (N, C_out)
    # 2) out += b  ->  db = sum of dout over every leading row
    db = dout2.sum(axis=0) if has_bias else None  # (C_out,)
    # 1) out = x @ w  ->  dx = dout @ w.T, dw = x.T @ dout
    dx = (dout2 @ w.T).reshape(x.shape)  # (N, C_out) @ (C_out, C_in) -> (N, C_in) -> (..., C_in)
    dw = x.reshape(-1, C_in).T @ dout2  # (C_in, N) @ (N, C_out) -> (C_in, C_out)
    return dx, dw, db


# --------------------------------------------------------------------------- activations


class TanhCache(NamedTuple):
    out: np.ndarray  # (...) tanh(x), kept: the derivative is 1 - out^2


def tanh_forward(x: np.ndarray) -> tuple[np.ndarray, TanhCache]:
    """``out = tanh(x)``, elementwise: (...) -> (...)."""
    out = np.tanh(x)  # 1) (...)
    return out, TanhCache(out)


def tanh_backward(dout: np.ndarray, cache: TanhCache) -> np.ndarray:
    """Backward of :func:`tanh_forward`: returns dx."""
    one = dout.dtype.type(1.0)
    # 1) out = tanh(x)  ->  dx = dout * (1 - out^2)
    return dout * (one - cache.out * cache.out)  # (...)


class ReluCache(NamedTuple):
    positive: np.ndarray  # (...) bool, x > 0


def relu_forward(x: np.ndarray) -> tuple[np.ndarray, ReluCache]:
    """``out = max(x, 0)``, elementwise: (...) -> (...)."""
    positive = x > 0  # 1) (...) bool
    out = x * positive  # 2) (...) x where positive, else 0
    return out, ReluCache(positive)


def relu_backward(dout: np.ndarray, cache: ReluCache) -> np.ndarray:
    """Backward of :func:`relu_forward`: returns dx (the derivative at 0 is taken as 0)."""
    # 2) out = x * positive  ->  dx = dout * positive
    return dout * cache.positive  # (...)


class GeluCache(NamedTuple):
    x: np.ndarray  # (...) input
    t: np.ndarray  # (...) tanh(u), u = sqrt(2/pi) * (x + 0.044715 x^3)


_GELU_A = 0.044715  # GPT-2's cubic coefficient (Hendrycks & Gimpel 2016, tanh form)
_GELU_K = math.sqrt(2.0 / math.pi)


def gelu_forward(x: np.ndarray) -> tuple[np.ndarray, GeluCache]:
    """GELU, GPT-2's tanh approximation: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.

    Elementwise, (...) -> (...); the same as ``torch.nn.functional.gelu(x, approximate="tanh")``.
    """
    f = x.dtype.type
    # steps 1 and 3 in one compiled pass each, rounded as the NumPy passes below round them
    # (resgrad.nn.kernels; GELU forward + backward, 2048 x 3072 float32: 42.8 -> 19.9 ms)
    u = kernels.gelu_u(x, f(_GELU_A), f(_GELU_K))
    if u is None:  # NumPy's passes. Each writes into the buffer of the one before: a fresh
        # (B*T, 4C) temporary per operation costs page faults (forward + backward, cpu-recipe
        # step: 24 -> 11 ms)
        u = x * f(_GELU_A)  # (...) a x
        u *= x
        u *= x  # (...) a x^3
        u += x
        u *= f(_GELU_K)  # 1) (...) u = k (x + a x^3)
    t = np.tanh(u, out=u)  # 2) (...) t = tanh(u), in u's buffer
    out = kernels.gelu_out(x, t)
    if out is None:
        out = t + f(1.0)
        out *= x
        out *= f(0.5)  # 3) (...) out = 0.5 x (1 + t)
    return out, GeluCache(x, t)


def gelu_backward(dout: np.ndarray, cache: GeluCache) -> np.ndarray:
    """Backward of :func:`gelu_forward`: returns dx."""
    x, t = cache
    f = x.dtype.type
    # 3) out = 0.5 x (1 + t)  ->  dx_direct = 0.5 (1 + t), dt = 0.5 x
    # 2) t = tanh(u)          ->  du = dt (1 - t^2)
    # 1) u = k (x + a x^3)    ->  dx_via_u = du k (1 + 3 a x^2)
    # so dx = dout * (0.5 (1 + t) + 0.5 x k (1 + 3 a x^2) (1 - t^2)): in one compiled pass,
    # or built in place in two buffers (fresh temporaries cost page faults, as in the forward)
    dx = kernels.gelu_dx(dout, x, t, f(1.5 * _GELU_K * _GELU_A), f(0.5 * _GELU_K))
    if dx is not None:
        return dx
    local = x * x  # (...) x^2
    local *= f(1.5 * _GELU_K * _GELU_A)
    local += f(0.5 * _GELU_K)
    local *= x  # (...) 0.5 x k (1 + 3 a x^2) = dt * du/dx
    tmp = t * t  # (...) t^2
    np.subtract(f(1.0), tmp, out=tmp)  # (...) 1 - t^2 = dtanh(u)/du
    local *= tmp  # (...) dx_via_u / dout
    np.multiply(t, f(0.5), out=tmp)
    local += tmp
    local += f(0.5)  # (...) + dx_direct / dout = 0.5 (1 + t)
    local *= dout  # (...) dx
    return local


class GeluErfCache(NamedTuple):
    x: np.ndarray  # (...) input
    cdf: np.ndarray  # (...) Phi(x) = 0.5 (1 + erf(x / sqrt(2))), the standard normal's CDF


_SQRT1_2 = math.sqrt(0.5)  # 1 / sqrt(2)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)  # the standard normal density's constant


def gelu_erf_forward(x: np.ndarray) -> tuple[np.ndarray, GeluErfCache]:
    """GELU, the exact form: ``x Phi(x) = 0.5 x (1 + erf(x / sqrt(2)))`` (Hendrycks & Gimpel
    2016).

    Elementwise, (...) -> (...); the same as ``torch.nn.GELU()`` (nanoGPT's MLP) and
    transformers' ``"gelu"``. ``erf`` is ``scipy.special.erf``, which keeps float32 float32;
    in float32 a compiled pass takes its place (:func:`resgrad.nn.kernels.gelu_erf`, 38x
    faster, within 2.3e-7 of ``Phi``).
    """
    fused = kernels.gelu_erf(x)  # 1)-3) in one vectorized float32 pass
    if fused is not None:
        return fused[0], GeluErfCache(x, fused[1])
    # imported here, not at the top: scipy.special takes 0.23 s to import, which every
    # resgrad command would pay while only models with the exact GELU use it
    from scipy.special import erf

    f = x.dtype.type
    u = x * f(_SQRT1_2)  # 1) (...) u = x / sqrt(2)
    cdf = erf(u, out=u)  # (...) erf(u), in u's buffer
    cdf += f(1.0)
    cdf *= f(0.5)  # 2) (...) cdf = 0.5 (1 + erf(u))
    out = x * cdf  # 3) (...) out = x cdf
    return out, GeluErfCache(x, cdf)


def gelu_erf_backward(dout: np.ndarray, cache: GeluErfCache) -> np.ndarray:
    """Backward of :func:`gelu_erf_forward`: returns dx."""
    x, cdf = cache
    f = x.dtype.type
    # 3) out = x cdf                  ->  dx_direct = dout cdf, dcdf = dout x
    # 2) cdf = 0.5 (1 + erf(u))       ->  du = dcdf exp(-u^2) / sqrt(pi)
    # 1) u = x / sqrt(2)              ->  dx_via_u = du / sqrt(2)
    # so dx = dout (cdf + x exp(-x^2 / 2) / sqrt(2 pi)): Phi(x) + x phi(x)
    local = x * x  # (...) x^2
    local *= f(-0.5)
    np.exp(local, out=local)  # (...) exp(-x^2 / 2)
    local *= f(_INV_SQRT_2PI)  # (...) phi(x), the standard normal density
    local *= x  # (...) dx_via_u / dout = x phi(x)
    local += cdf  # (...) + dx_direct / dout = cdf
    local *= dout  # (...) dx
    return local


def softmax(x: np.ndarray, axis: int = -1, *, out: np.ndarray | None = None) -> np.ndarray:
    """Numerically stable softmax along ``axis``; rows of all ``-inf`` are not allowed.

    Subtracting the row max first keeps ``exp`` in range for any finite logits.
    ``out`` (x's shape and dtype, may be x itself) receives the result instead of
    a fresh array: attention overwrites its (B, H, T, T) scores this way.
    """
    # np.fmax.reduce, not x.max: 4x faster (3.2 -> 0.8 ms on (8,6,256,256) float32), as it
    # skips max's NaN checks; a NaN in a row still makes that row NaN, through exp
    m = np.fmax.reduce(x, axis=axis, keepdims=True)  # (...) each row's max
    z = np.subtract(x, m, out=out)  # (...) each row's max is 0
    e = np.exp(z, out=z)  # (...) in (0, 1], in z's buffer
    last = axis in (-1, e.ndim - 1)
    e /= _sum_last(e) if last else e.sum(axis=axis, keepdims=True)  # (...) rows sum to 1
    return e


# --------------------------------------------------------------------------- layernorm


class LayerNormCache(NamedTuple):
    xhat: np.ndarray  # (..., C) normalized input
    rstd: np.ndarray  # (..., 1) 1 / sqrt(var + eps)
    g: np.ndarray  # (C,) gain
    has_bias: bool  # whether the forward added b


def layernorm_forward(
    x: np.ndarray, g: np.ndarray, b: np.ndarray | None = None, eps: float = 1e-5
) -> tuple[np.ndarray, LayerNormCache]:
    """LayerNorm over the last axis: ``(x - mean) / sqrt(var + eps) * g + b``.

    Parameters
    ----------
    x : ndarray, shape (..., C)
    g : ndarray, shape (C,)
        Gain.
    b : ndarray, shape (C,), or None
        Bias (None: no bias, as in GPT configs with ``bias=False``).
    eps : float
        Added to the (biased) variance, as in ``torch.nn.LayerNorm``.

    Returns
    -------
    out : ndarray, shape (..., C)
    cache : LayerNormCache
    """
    if g.ndim != 1:
        raise ValueError(f"g has shape {g.shape}; expected a 1-D gain (C,)")
    _require_last_dim("x", x, g.shape[0], "C, the size of the gain g")
    if b is not None:
        _require_shape("b", b, g.shape)
    fused = kernels.layernorm_forward(x, g, b, eps)  # 1)-7) in one compiled pass over each row
    if fused is not None:
        out, xhat, rstd = fused  # (..., C), (..., C), (..., 1)
        return out, LayerNormCache(xhat, rstd, g, b is not None)
    C = g.shape[0]
    mean = _sum_last(x) / C  # 1) (..., 1)
    xc = x - mean  # 2) (..., C)
    # einsum sums xc * xc without a (..., C) temporary
    var = np.einsum("...c,...c->...", xc, xc)[..., None] / C  # 3) (..., 1) biased variance
    rstd = x.dtype.type(1.0) / np.sqrt(var + x.dtype.type(eps))  # 4) (..., 1)
    np.multiply(xc, rstd, out=xc)  # 5) (..., C) xhat, in xc's buffer
    out = xc * g  # 6) (..., C)
    if b is not None:
        out += b  # 7) (..., C)
    return out, LayerNormCache(xc, rstd, g, b is not None)  # xc holds xhat


def layernorm_backward(
    dout: np.ndarray, cache: LayerNormCache
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Backward of :func:`layernorm_forward`: returns ``(dx, dg, db)``; db is None without bias.

    Steps 1-5 collapse into the usual closed form
    ``dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))``.
    """
    xhat, rstd, g, has_bias = cache
    fused = kernels.layernorm_backward(dout, xhat, rstd, g)  # one compiled pass over each row
    if fused is not None:
        dx, dg, db = fused  # (..., C), (C,), (C,)
        return dx, dg, db if has_bias else None
    C = g.shape[0]
    dout2 = dout.reshape(-1, C)  # (N, C)
    # 7) out += b  ->  db = sum of dout over rows
    db = dout2.sum(axis=0) if has_bias else None  # (C,)
    # 6) out = xhat * g  ->  dg = sum(dout * xhat), dxhat = dout * g
    tmp = dout * xhat  # (..., C) scratch, reused below: fewer fresh (B,T,C) temporaries
    dg = tmp.reshape(-1, C).sum(axis=0)  # (C,)
    dxhat = dout * g  # (..., C)
    # 5) xhat = xc * rstd, 4) rstd = (var + eps)^-1/2, 3) var = mean(xc^2), 2) xc = x - mean,
    # 1) mean = mean(x)  ->  dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
    m1 = _sum_last(dxhat) / C  # (..., 1) mean(dxhat)
    m2 = np.einsum("...c,...c->...", dxhat, xhat)[..., None] / C  # (..., 1)
    dx = dxhat  # (..., C) built in dxhat's buffer
    dx -= m1
    dx -= np.multiply(xhat, m2, out=tmp)
    dx *= rstd
    return dx, dg, db


# --------------------------------------------------------------------------- dropout


class DropoutCache(NamedTuple):
    mask: np.ndarray | None  # (...) keep / (1 - p), or None when dropout was the identity


def dropout_forward(
    x: np.ndarray, p: float, *, train: bool = False, rng: np.random.Generator | None = None
) -> tuple[np.ndarray, DropoutCache]:
    """Inverted dropout: zero each entry with probability ``p`` and scale the rest by 1/(1-p).

    Parameters
    ----------
    x : ndarray, shape (...)
    p : float in [0, 1)
    train : bool
        False (eval): the identity, ``out`` is a copy of x and no randomness is drawn.
    rng : numpy.random.Generator
        Draws the mask; required when ``train`` and ``p > 0``. The same seed
        gives the same mask.

    Returns
    -------
    out : ndarray, shape (...)
    cache : DropoutCache
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout p must be in [0, 1), got {p!r}")
    if not train or p == 0.0:
        return x.copy(), DropoutCache(None)  # (...) identity in eval mode
    if rng is None:
        raise ValueError("dropout with train=True and p > 0 needs rng, a np.random.Generator")
    f = x.dtype.type
    keep = rng.random(x.shape, dtype=x.dtype) >= f(p)  # 1) (...) bool, P(keep) = 1 - p
    mask = keep * f(1.0 / (1.0 - p))  # 2) (...) 0 or 1/(1-p), x's dtype
    out = x * mask  # 3) (...)
    return out, DropoutCache(mask)


def dropout_backward(dout: np.ndarray, cache: DropoutCache) -> np.ndarray:
    """Backward of :func:`dropout_forward`: returns dx."""
    if cache.mask is None:
        return dout.copy()  # (...) identity
    # 3) out = x * mask  ->  dx = dout * mask
    return dout * cache.mask  # (...)


# --------------------------------------------------------------------------- embeddings


class EmbeddingCache(NamedTuple):
    idx: np.ndarray  # (B, T) token ids
    V: int  # rows of wte
    n_pos: int  # rows of wpe (block size)


def embedding_forward(
    idx: np.ndarray, wte: np.ndarray, wpe: np.ndarray
) -> tuple[np.ndarray, EmbeddingCache]:
    """Token plus learned position embedding: ``x[b, t] = wte[idx[b, t]] + wpe[t]``.

    Parameters
    ----------
    idx : int ndarray, shape (B, T)
        Token ids in [0, V); T at most the rows of wpe.
    wte : ndarray, shape (V, C)
    wpe : ndarray, shape (block_size, C)

    Returns
    -------
    x : ndarray, shape (B, T, C)
    cache : EmbeddingCache
    """
    idx = np.asarray(idx)
    if idx.ndim != 2 or not np.issubdtype(idx.dtype, np.integer):
        raise ValueError(f"idx must be a 2-D integer array (B, T), got {idx.dtype} {idx.shape}")
    if wte.ndim != 2 or wpe.ndim != 2 or wte.shape[1] != wpe.shape[1]:
        raise ValueError(f"wte {wte.shape} and wpe {wpe.shape} must be (V, C) and (block_size, C)")
    B, T = idx.shape
    V = wte.shape[0]
    if T > wpe.shape[0]:
        raise ValueError(f"sequence length T={T} is longer than the block size {wpe.shape[0]}")
    if idx.size and (idx.min() < 0 or idx.max() >= V):
        bad = idx[(idx < 0) | (idx >= V)].flat[0]
        raise ValueError(f"token id {bad} is outside [0, {V}) (vocab_size={V})")
    tok = wte[idx]  # 1) (B, T, C) gather rows of wte
    x = tok + wpe[:T]  # 2) (B, T, C) + (T, C)
    return x, EmbeddingCache(idx, V, wpe.shape[0])


def embedding_backward(
    dout: np.ndarray, cache: EmbeddingCache, dwte: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Backward of :func:`embedding_forward`: returns ``(dwte, dwpe)`` (idx is integer: no dx).

    ``dwte``, if given, is a (V, C) gradient of wte from elsewhere (the tied LM head's)
    that the embedding's rows are added into, in place; it is returned. Only the rows
    of tokens in ``idx`` change, so no second (V, C) array is made: at GPT-2's
    vocabulary that is 154 MB zeroed and added per backward (a GPT-2 124M shard of
    B=2, T=256: 0.30 s of a 4.3 s pass, before).
    """
    idx, V, n_pos = cache
    B, T, C = dout.shape
    # 2) x = tok + wpe[:T]  ->  dwpe[t] = sum over b of dout[b, t]; rows >= T get 0
    dwpe = np.zeros((n_pos, C), dtype=dout.dtype)  # (block_size, C)
    dwpe[:T] = dout.sum(axis=0)  # (T, C)
    # 1) tok = wte[idx]  ->  scatter-add: every occurrence of a token adds its dout row.
    # Sorted, the occurrences of one token are a run, summed by one reduceat
    # (np.add.at did the same 5x slower: 5.0 vs 0.9 ms at B*T = 2048, C = 384)
    if dwte is None:
        dwte = np.zeros((V, C), dtype=dout.dtype)  # (V, C)
    ids = idx.reshape(-1)  # (N,) N = B*T
    if ids.size:
        order = np.argsort(ids, kind="stable")  # (N,)
        run_ids = ids[order]  # (N,) sorted ids
        starts = np.flatnonzero(np.r_[True, run_ids[1:] != run_ids[:-1]])  # (U,) first of each run
        rows = dout.reshape(-1, C)[order]  # (N, C) in sorted order
        dwte[run_ids[starts]] += np.add.reduceat(rows, starts, axis=0)  # (U, C) one sum per token
    return dwte, dwpe


# --------------------------------------------------------------------------- attention


@functools.lru_cache(maxsize=32)
def causal_mask(T: int, dtype: str = "float64") -> np.ndarray:
    """Additive causal mask, (T, T): 0 where key s <= query t, -inf above the diagonal.

    Computed once per (T, dtype) and cached; the array is read-only.
    """
    m = np.triu(np.full((T, T), -np.inf, dtype=dtype), k=1)  # (T, T)
    m.flags.writeable = False
    return m


ATTN_BLOCK = 128  # queries per block in sdpa_forward; at T <= 128 one block, the whole square


def _check_block(block: int) -> None:
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
        raise ValueError(f"block must be a positive integer, got {block!r}")


def _query_blocks(T: int, block: int) -> list[tuple[int, int]]:
    """Query ranges ``(i0, i1)``, ``block`` at a time; queries i0..i1-1 see keys 0..i1-1."""
    return [(i0, min(i0 + block, T)) for i0 in range(0, T, block)]


class SdpaCache(NamedTuple):
    qs: np.ndarray  # (B, H, T, D) the query as it entered q k^T: q / sqrt(D), or q itself
    k: np.ndarray  # (B, H, T, D)
    v: np.ndarray  # (B, H, T, D)
    att: np.ndarray  # (B, H, T, T) softmax probabilities, before dropout (0 above the diagonal)
    drop: DropoutCache  # dropout on att
    scale_in_softmax: bool  # the compiled softmax scaled the scores: qs is q, unscaled


class FlashCache(NamedTuple):
    """:func:`sdpa_forward`'s cache where the compiled attention ran (no dropout): each
    row's log-sum-exp instead of the (B, H, T, T) probabilities, which the backward
    recomputes (:func:`sdpa_probs` gives them to any other reader)."""

    q: np.ndarray  # (B, H, T, D) unscaled
    k: np.ndarray  # (B, H, T, D)
    v: np.ndarray  # (B, H, T, D)
    y: np.ndarray  # (B, H, T, D) the output: the backward's D_i = rowsum(dy * y)
    lse: np.ndarray  # (B, H, T) log sum_j exp(q_i . k_j / sqrt(D)) over the keys j <= i


def sdpa_forward(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    dropout: float = 0.0,
    train: bool = False,
    rng: np.random.Generator | None = None,
    block: int = ATTN_BLOCK,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, SdpaCache | FlashCache]:
    """Causal scaled dot-product attention, batched over every leading axis.

    ``y = dropout(softmax(q k^T / sqrt(D) + mask)) v``, where the mask stops query t
    from seeing keys s > t.

    The queries are taken ``block`` at a time, and each block is scored only against
    the keys it can see (up to its last query): the part of the (T, T) square right
    of that is 0 after the softmax and is never computed. At T = 256 with blocks of
    128 that skips a quarter of the square (medium training step ~4% faster); with
    ``block >= T`` it is the one-shot computation.

    Where a compiled kernel runs (:func:`resgrad.nn.kernels.causal_softmax`), steps 1, 3
    and 4 are one pass over each block's scores: the scale, the mask and the softmax
    (float32: 1.5-2x NumPy's passes); ``kernels.ENABLED = False`` takes the steps below.
    Without dropout, on (B, H, T, D) arrays, the compiled attention
    (:func:`resgrad.nn.kernels.causal_attention`, where ``kernels.FUSED_ATTENTION`` is on)
    does all the steps in one pass over each head instead, in its own tiles (``block``
    unused), and the cache is a :class:`FlashCache`; attention dropout (``dropout > 0``
    and ``train``) keeps the steps.

    Parameters
    ----------
    q, k, v : ndarray, shape (B, H, T, D)
    dropout, train, rng
        Dropout on the attention probabilities, as :func:`dropout_forward`.
    block : int >= 1
        Queries per block; the result does not depend on it, up to rounding.
    out : ndarray, shape (B, H, T, D), optional
        Receives y (a view of another array may be given: attention writes its heads
        side by side this way, with no copy).

    Returns
    -------
    y : ndarray, shape (B, H, T, D)
    cache : SdpaCache, or FlashCache where the compiled attention ran
    """
    if not (q.shape == k.shape == v.shape) or q.ndim < 2:
        raise ValueError(
            f"q, k, v must share one shape (..., T, D); got {q.shape}, {k.shape}, {v.shape}"
        )
    _check_block(block)
    if q.ndim == 4 and not (dropout > 0.0 and train):  # 1)-6) in one compiled pass a head
        y = np.empty(q.shape, dtype=q.dtype) if out is None else out  # (B,H,T,D)
        lse = kernels.causal_attention(q, k, v, y)  # (B,H,T), or None: no kernel runs
        if lse is not None:
            return y, FlashCache(q, k, v, y, lse)
    T, D = q.shape[-2:]
    scale = q.dtype.type(1.0 / math.sqrt(D))
    blocks = _query_blocks(T, block)
    mask = causal_mask(T, q.dtype.name)  # (T,T) 0 on and below the diagonal, -inf above
    att = np.empty(q.shape[:-1] + (T,), dtype=q.dtype)  # (B,H,T,T) filled block by block
    fused = kernels.causal_softmax_runs(att)  # the scale goes in the compiled softmax
    # the scale goes on q, (B,H,T,D), not on the (B,H,T,T) scores: T/D times fewer multiplies
    qs = q if fused else q * scale  # 1) (B,H,T,D) q / sqrt(D)
    for i0, i1 in blocks:  # queries i0..i1-1, keys 0..i1-1 (S = i1 of them)
        s = att[..., i0:i1, :i1]  # (B,H,Tb,S) a view: scores, then probabilities, in place
        np.matmul(qs[..., i0:i1, :], k[..., :i1, :].swapaxes(-1, -2), out=s)  # 2) qs @ k^T
        if fused:  # 1), 3), 4) and the zeros below in one compiled pass over the rows
            kernels.causal_softmax(att, i0, i1, scale)
            continue
        s += mask[i0:i1, :i1]  # 3) (B,H,Tb,S) + (Tb,S): -inf above the diagonal
        softmax(s, axis=-1, out=s)  # 4) (B,H,Tb,S) rows sum to 1
        att[..., i0:i1, i1:] = 0  # keys after the block's last query: probability 0
    if dropout > 0.0 and train:
        att_d, drop = dropout_forward(att, dropout, train=True, rng=rng)  # 5) (B,H,T,T)
    else:
        att_d, drop = att, DropoutCache(None)  # 5) no dropout: att itself, no copy
    y = np.empty(q.shape, dtype=q.dtype) if out is None else out  # (B,H,T,D)
    for i0, i1 in blocks:  # 6) y = att_d @ v: (B,H,Tb,S) @ (B,H,S,D) -> (B,H,Tb,D)
        np.matmul(att_d[..., i0:i1, :i1], v[..., :i1, :], out=y[..., i0:i1, :])
    return y, SdpaCache(qs, k, v, att, drop, fused)


def sdpa_probs(cache: SdpaCache | FlashCache) -> np.ndarray:
    """The attention probabilities before dropout, (B, H, T, T), 0 above the diagonal:
    the ones an :class:`SdpaCache` holds, or recomputed from a :class:`FlashCache`'s q, k
    and log-sum-exp, ``p = exp(q k^T / sqrt(D) + mask - lse)``."""
    if isinstance(cache, SdpaCache):
        return cache.att
    q, k, _, _, lse = cache
    T, D = q.shape[-2:]
    s = (q * q.dtype.type(1.0 / math.sqrt(D))) @ k.swapaxes(-1, -2)  # (B,H,T,D)@(B,H,D,T)
    s += causal_mask(T, q.dtype.name)  # (B,H,T,T) + (T,T): -inf above the diagonal
    s -= lse[..., None]  # (B,H,T,T) - (B,H,T,1)
    return np.exp(s, out=s)  # (B,H,T,T) rows sum to 1


def sdpa_backward(
    dy: np.ndarray,
    cache: SdpaCache | FlashCache,
    *,
    block: int = ATTN_BLOCK,
    out: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Backward of :func:`sdpa_forward`: returns ``(dq, dk, dv)``.

    Walks the queries in blocks too, skipping the keys after each block's last query.
    The cached ``att`` is the whole (T, T) square, exactly 0 where it was skipped, so
    any ``block`` gives the same gradients (up to rounding), whatever the forward's.
    ``out``, three (B, H, T, D) arrays or views, receives dq, dk and dv (attention
    writes them into its fused [q | k | v] gradient this way, with no copy).

    A :class:`FlashCache` goes to the compiled backward
    (:func:`resgrad.nn.kernels.causal_attention_backward`), or, with the kernels switched
    off since its forward, to the steps below on its recomputed probabilities.
    """
    _check_block(block)
    if isinstance(cache, FlashCache):
        q, k, v, y, lse = cache
        grads = (np.empty(q.shape, dtype=q.dtype) for _ in range(3)) if out is None else out
        dq, dk, dv = grads  # (B,H,T,D) each
        if kernels.causal_attention_backward(dy, q, k, v, y, lse, dq, dk, dv):
            return dq, dk, dv
        scale = q.dtype.type(1.0 / math.sqrt(q.shape[-1]))
        cache = SdpaCache(q * scale, k, v, sdpa_probs(cache), DropoutCache(None), False)
        return sdpa_backward(dy, cache, block=block, out=(dq, dk, dv))
    qs, k, v, att, drop, scale_in_softmax = cache
    T = qs.shape[-2]
    scale = qs.dtype.type(1.0 / math.sqrt(qs.shape[-1]))
    dqs, dk, dv = (np.empty(qs.shape, dtype=qs.dtype) for _ in range(3)) if out is None else out
    for i0, i1 in reversed(_query_blocks(T, block)):  # queries i0..i1-1, keys 0..i1-1
        p = att[..., i0:i1, :i1]  # (B,H,Tb,S) this block's probabilities
        m = None if drop.mask is None else drop.mask[..., i0:i1, :i1]  # (B,H,Tb,S)
        p_d = p if m is None else p * m  # (B,H,Tb,S) after dropout, recomputed, not stored
        dyb = dy[..., i0:i1, :]  # (B,H,Tb,D)
        first = i1 == T  # the last block, walked first, sees every key: its shares start dk, dv
        # 6) y = att_d @ v  ->  datt_d = dy @ v^T, dv = att_d^T @ dy
        datt = dyb @ v[..., :i1, :].swapaxes(-1, -2)  # (B,H,Tb,D) @ (B,H,D,S) -> (B,H,Tb,S)
        if first:
            np.matmul(p_d.swapaxes(-1, -2), dyb, out=dv)  # (B,H,S,Tb) @ (B,H,Tb,D) -> (B,H,S,D)
        else:  # an earlier block adds its share to the keys 0..i1-1 it sees
            dv[..., :i1, :] += p_d.swapaxes(-1, -2) @ dyb  # (B,H,S,D)
        # 5) att_d = att * mask  ->  datt = datt_d * mask
        if m is not None:
            datt *= m  # (B,H,Tb,S)
        # 4) att = softmax(s)  ->  ds = att * (datt - sum(datt * att, over keys)), in datt's
        # buffer; where the compiled softmax scaled s, its backward scales ds in the same pass
        if not kernels.causal_softmax_backward(datt, att, i0, scale if scale_in_softmax else 1):
            # einsum sums the products without a (B,H,Tb,S) temporary
            datt -= np.einsum("...k,...k->...", datt, p)[..., None]  # (B,H,Tb,S) - (B,H,Tb,1)
            np.multiply(datt, p, out=datt)  # (B,H,Tb,S)
            if scale_in_softmax:  # the forward's kernel scaled the scores: d/d(q k^T)
                datt *= scale
        ds = datt  # (B,H,Tb,S)
        # 3) s += mask  ->  constant: ds passes through (it is already 0 where att is 0)
        # 2) s = qs @ k^T  ->  dqs = ds @ k, dk = ds^T @ qs
        np.matmul(ds, k[..., :i1, :], out=dqs[..., i0:i1, :])  # (B,H,Tb,S) @ (B,H,S,D)
        if first:  # (B,H,S,Tb) @ (B,H,Tb,D) -> (B,H,S,D)
            np.matmul(ds.swapaxes(-1, -2), qs[..., i0:i1, :], out=dk)
        else:
            dk[..., :i1, :] += ds.swapaxes(-1, -2) @ qs[..., i0:i1, :]  # (B,H,S,D)
    # 1) qs = q * scale  ->  dq = dqs * scale (the compiled softmax's ds holds it already)
    dq = dqs if scale_in_softmax else np.multiply(dqs, scale, out=dqs)  # (B,H,T,D)
    return dq, dk, dv


class AttentionCache(NamedTuple):
    qkv: LinearCache  # fused projection x -> (q, k, v)
    sdpa: SdpaCache | FlashCache  # the heads
    proj: LinearCache  # output projection
    drop: DropoutCache  # dropout on the output (nanoGPT's resid_dropout)
    n_head: int


def attention_forward(
    x: np.ndarray,
    w_qkv: np.ndarray,
    b_qkv: np.ndarray | None,
    w_proj: np.ndarray,
    b_proj: np.ndarray | None,
    n_head: int,
    *,
    dropout: float = 0.0,
    train: bool = False,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, AttentionCache]:
    """Multi-head causal self-attention with a fused QKV projection: (B, T, C) -> (B, T, C).

    The heads are batched: one matmul over (B, H, T, D), no loop over heads.
    The fused projection's columns are [q | k | v], each split into H heads of
    D consecutive columns (nanoGPT's ``c_attn`` layout).

    Parameters
    ----------
    x : ndarray, shape (B, T, C)
    w_qkv : ndarray, shape (C, 3C)
    b_qkv : ndarray, shape (3C,), or None
    w_proj : ndarray, shape (C, C)
    b_proj : ndarray, shape (C,), or None
    n_head : int
        H; must divide C.
    dropout, train, rng
        Dropout on the attention probabilities and on the output, as :func:`dropout_forward`.

    Returns
    -------
    out : ndarray, shape (B, T, C)
    cache : AttentionCache
    """
    if x.ndim != 3:
        raise ValueError(f"x has shape {x.shape}; expected (B, T, C)")
    B, T, C = x.shape
    if isinstance(n_head, bool) or not isinstance(n_head, (int, np.integer)) or n_head < 1:
        raise ValueError(f"n_head must be a positive integer, got {n_head!r}")
    if C % n_head:
        raise ValueError(f"n_head={n_head} does not divide n_embd C={C}")
    _require_shape("w_qkv", w_qkv, (C, 3 * C))
    _require_shape("w_proj", w_proj, (C, C))
    H, D = n_head, C // n_head
    qkv, c_qkv = linear_forward(x, w_qkv, b_qkv)  # 1) (B,T,C) @ (C,3C) -> (B,T,3C)
    qkv = qkv.reshape(B, T, 3, H, D).transpose(2, 0, 3, 1, 4)  # 2) (3,B,H,T,D) views, no copy
    y = np.empty((B, T, H, D), dtype=x.dtype)  # (B,T,H,D) heads side by side, filled by 3)
    _, c_sdpa = sdpa_forward(qkv[0], qkv[1], qkv[2], dropout=dropout, train=train, rng=rng,
                             out=y.transpose(0, 2, 1, 3))  # 3) (B,H,T,D), a view of y  # fmt: skip
    y = y.reshape(B, T, C)  # 4) (B,T,H,D) -> (B,T,C) a view: merging the heads copies nothing
    out, c_proj = linear_forward(y, w_proj, b_proj)  # 5) (B,T,C) @ (C,C) -> (B,T,C)
    if dropout > 0.0 and train:
        out, c_drop = dropout_forward(out, dropout, train=True, rng=rng)  # 6) (B,T,C)
    else:
        c_drop = DropoutCache(None)  # 6) no dropout
    return out, AttentionCache(c_qkv, c_sdpa, c_proj, c_drop, H)


def attention_backward(
    dout: np.ndarray, cache: AttentionCache
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray, np.ndarray | None]:
    """Backward of :func:`attention_forward`: ``(dx, dw_qkv, db_qkv, dw_proj, db_proj)``.

    The biases' gradients are None where the forward had no bias.
    """
    c_qkv, c_sdpa, c_proj, c_drop, H = cache
    B, T, C = dout.shape
    D = C // H
    # 6) out = dropout(out)
    if c_drop.mask is not None:
        dout = dropout_backward(dout, c_drop)  # (B,T,C)
    # 5) out = y @ w_proj + b_proj
    dy, dw_proj, db_proj = linear_backward(dout, c_proj)  # (B,T,C), (C,C), (C,)
    # 4) y = heads side by side  ->  split the columns back into heads
    dy = dy.reshape(B, T, H, D).transpose(0, 2, 1, 3)  # (B,H,T,D)
    # 3) y = sdpa(q, k, v)  and  2) (q, k, v) = split of qkv  ->  the three gradients are
    # written straight into their [q | k | v] columns of dqkv: the split's backward, no copy
    dqkv = np.empty((B, T, 3, H, D), dtype=dout.dtype)  # (B,T,3,H,D) the columns of qkv
    sdpa_backward(dy, c_sdpa, out=tuple(dqkv[:, :, j].transpose(0, 2, 1, 3) for j in range(3)))
    dqkv = dqkv.reshape(B, T, 3 * C)  # (B,T,3C), a view
    # 1) qkv = x @ w_qkv + b_qkv
    dx, dw_qkv, db_qkv = linear_backward(dqkv, c_qkv)  # (B,T,C), (C,3C), (3C,)
    return dx, dw_qkv, db_qkv, dw_proj, db_proj


# --------------------------------------------------------------------------- MLP


class MlpCache(NamedTuple):
    fc: LinearCache  # C -> 4C
    act: GeluCache | GeluErfCache  # GELU, in the form ``activation`` names
    proj: LinearCache  # 4C -> C
    drop: DropoutCache  # dropout on the output
    activation: str  # a key of ACTIVATIONS: which backward undoes ``act``


# the MLP's activation by name -> its (forward, backward) pair; GPTConfig.activation picks one
ACTIVATIONS = {
    "gelu-tanh": (gelu_forward, gelu_backward),  # GPT-2's tanh form (transformers' gelu_new)
    "gelu-erf": (gelu_erf_forward, gelu_erf_backward),  # exact: torch.nn.GELU(), nanoGPT's
}


def mlp_forward(
    x: np.ndarray,
    w_fc: np.ndarray,
    b_fc: np.ndarray | None,
    w_proj: np.ndarray,
    b_proj: np.ndarray | None,
    *,
    dropout: float = 0.0,
    train: bool = False,
    rng: np.random.Generator | None = None,
    activation: str = "gelu-tanh",
) -> tuple[np.ndarray, MlpCache]:
    """The feed-forward sublayer, ``gelu(x @ w_fc + b_fc) @ w_proj + b_proj``: (..., C) -> (..., C).

    Parameters
    ----------
    x : ndarray, shape (..., C)
    w_fc : ndarray, shape (C, F), F = 4C in a GPT
    b_fc : ndarray, shape (F,), or None
    w_proj : ndarray, shape (F, C)
    b_proj : ndarray, shape (C,), or None
    dropout, train, rng
        Dropout on the output, as :func:`dropout_forward`.
    activation : str
        The GELU's form, a key of :data:`ACTIVATIONS`: ``"gelu-tanh"`` (GPT-2's, the
        default) or ``"gelu-erf"`` (exact, as ``torch.nn.GELU()``).

    Returns
    -------
    out : ndarray, shape (..., C)
    cache : MlpCache
    """
    if activation not in ACTIVATIONS:
        raise ValueError(
            f"unknown activation {activation!r}; expected one of {', '.join(ACTIVATIONS)}"
        )
    if w_fc.ndim != 2 or w_proj.shape != w_fc.shape[::-1]:
        raise ValueError(f"w_fc {w_fc.shape} and w_proj {w_proj.shape} must be (C, F) and (F, C)")
    h, c_fc = linear_forward(x, w_fc, b_fc)  # 1) (..., C) @ (C, F) -> (..., F)
    a, c_act = ACTIVATIONS[activation][0](h)  # 2) (..., F) gelu(h), in the named form
    out, c_proj = linear_forward(a, w_proj, b_proj)  # 3) (..., F) @ (F, C) -> (..., C)
    if dropout > 0.0 and train:
        out, c_drop = dropout_forward(out, dropout, train=True, rng=rng)  # 4) (..., C)
    else:
        c_drop = DropoutCache(None)  # 4) no dropout
    return out, MlpCache(c_fc, c_act, c_proj, c_drop, activation)


def mlp_backward(
    dout: np.ndarray, cache: MlpCache
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray, np.ndarray | None]:
    """Backward of :func:`mlp_forward`: ``(dx, dw_fc, db_fc, dw_proj, db_proj)``."""
    c_fc, c_act, c_proj, c_drop, activation = cache
    # 4) out = dropout(out)
    if c_drop.mask is not None:
        dout = dropout_backward(dout, c_drop)  # (..., C)
    # 3) out = a @ w_proj + b_proj
    da, dw_proj, db_proj = linear_backward(dout, c_proj)  # (..., F), (F, C), (C,)
    # 2) a = gelu(h)
    dh = ACTIVATIONS[activation][1](da, c_act)  # (..., F)
    # 1) h = x @ w_fc + b_fc
    dx, dw_fc, db_fc = linear_backward(dh, c_fc)  # (..., C), (C, F), (F,)
    return dx, dw_fc, db_fc, dw_proj, db_proj


# --------------------------------------------------------------------------- cross-entropy


class CrossEntropyCache(NamedTuple):
    probs: np.ndarray  # (B, T, V) softmax of the logits
    targets: np.ndarray  # (B, T) target ids (ignored positions hold 0)
    valid: np.ndarray  # (B, T) bool, False at ignored positions
    n_valid: int  # positions averaged over


def cross_entropy_forward(
    logits: np.ndarray, targets: np.ndarray, ignore_index: int | None = None
) -> tuple[float, CrossEntropyCache]:
    """Mean softmax cross-entropy of integer targets under (B, T, V) logits.

    ``loss = mean over valid (b, t) of  logsumexp(logits[b, t]) - logits[b, t, targets[b, t]]``,
    computed with the row max subtracted first, so logits of magnitude 1e4 (or
    more) neither overflow nor lose the answer.

    Parameters
    ----------
    logits : ndarray, shape (B, T, V)
    targets : int ndarray, shape (B, T)
        Ids in [0, V), except positions equal to ``ignore_index``.
    ignore_index : int, optional
        Positions whose target equals it add nothing to the loss or the gradient
        and are left out of the mean (as in ``torch.nn.functional.cross_entropy``).
        If every position is ignored the loss is 0.0.

    Returns
    -------
    loss : float
    cache : CrossEntropyCache
    """
    if logits.ndim != 3:
        raise ValueError(f"logits have shape {logits.shape}; expected (B, T, V)")
    targets = np.asarray(targets)
    if targets.shape != logits.shape[:2] or not np.issubdtype(targets.dtype, np.integer):
        raise ValueError(
            f"targets must be an integer array of shape {logits.shape[:2]} (B, T), "
            f"got {targets.dtype} {targets.shape}"
        )
    V = logits.shape[-1]
    valid = np.ones(targets.shape, dtype=bool) if ignore_index is None else targets != ignore_index
    bad = valid & ((targets < 0) | (targets >= V))
    if bad.any():
        raise ValueError(f"target id {targets[bad].flat[0]} is outside [0, {V}) (vocab_size={V})")
    safe = np.where(valid, targets, 0)  # (B, T) ignored positions point at column 0
    m = np.fmax.reduce(logits, axis=-1, keepdims=True)  # (B, T, 1) row max, fast (see softmax)
    z = logits - m  # 1) (B, T, V) max of each row is 0
    z_t = np.take_along_axis(z, safe[..., None], axis=-1)[..., 0]  # 4) (B, T), read before 2)
    e = np.exp(z, out=z)  # 2) (B, T, V) in (0, 1], in z's buffer (one (B, T, V) array)
    s = _sum_last(e)  # 3) (B, T, 1) >= 1, no overflow
    nll = np.log(s[..., 0]) - z_t  # 5) (B, T) -log softmax at the target
    n_valid = int(valid.sum())
    loss = float((nll * valid).sum() / max(n_valid, 1))  # 6) mean over valid positions
    probs = np.divide(e, s, out=e)  # (B, T, V) kept for the backward
    return loss, CrossEntropyCache(probs, safe, valid, n_valid)


def cross_entropy_backward(
    dloss: float, cache: CrossEntropyCache, *, out: np.ndarray | None = None
) -> np.ndarray:
    """Backward of :func:`cross_entropy_forward`: returns dlogits, (B, T, V).

    ``dlogits = dloss * (softmax(logits) - onehot(targets)) / n_valid`` at valid
    positions, 0 at ignored ones. ``out`` (B, T, V) receives dlogits instead of a
    fresh array; it may be ``cache.probs`` itself, which spends the cache.
    """
    probs, targets, valid, n_valid = cache
    f = probs.dtype.type
    # 6) loss = sum(nll * valid) / n_valid  ->  dnll = dloss * valid / n_valid
    dnll = valid * f(float(dloss) / max(n_valid, 1))  # (B, T)
    # 5)-1) nll = logsumexp(logits) - logits[target]  ->  dlogits = dnll * (probs - onehot)
    dlogits = np.multiply(probs, dnll[..., None], out=out)  # (B, T, V)
    b, t = np.indices(targets.shape)  # 2 x (B, T)
    dlogits[b, t, targets] -= dnll  # (B, T) subtract at each target column
    return dlogits


# --------------------------------------------------------------------------- module objects


class Linear:
    """``x @ w + b`` with named parameters ``w`` (C_in, C_out) and ``b`` (C_out,)."""

    def __init__(self, w: np.ndarray, b: np.ndarray | None = None):
        self.params = {"w": w} if b is None else {"w": w, "b": b}

    def forward(self, x: np.ndarray) -> tuple[np.ndarray, LinearCache]:
        """(..., C_in) -> (..., C_out)."""
        return linear_forward(x, self.params["w"], self.params.get("b"))

    def backward(self, dout, cache) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        dx, dw, db = linear_backward(dout, cache)
        return dx, ({"w": dw} if db is None else {"w": dw, "b": db})


class LayerNorm:
    """LayerNorm with named parameters ``g`` and ``b`` (C,)."""

    def __init__(self, g: np.ndarray, b: np.ndarray | None = None, eps: float = 1e-5):
        self.params = {"g": g} if b is None else {"g": g, "b": b}
        self.eps = eps

    def forward(self, x: np.ndarray) -> tuple[np.ndarray, LayerNormCache]:
        """(..., C) -> (..., C)."""
        return layernorm_forward(x, self.params["g"], self.params.get("b"), self.eps)

    def backward(self, dout, cache) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        dx, dg, db = layernorm_backward(dout, cache)
        return dx, ({"g": dg} if db is None else {"g": dg, "b": db})


# parameter names of the two sublayers, in their forward's argument order (and so in the
# order their backward returns the gradients); blocks.py names the model's keys with them
ATTN_KEYS = ("w_qkv", "b_qkv", "w_proj", "b_proj")
MLP_KEYS = ("w_fc", "b_fc", "w_proj", "b_proj")


def _named(keys: tuple[str, ...], grads: tuple) -> dict[str, np.ndarray]:
    return {k: g for k, g in zip(keys, grads) if g is not None}


class MLP:
    """:func:`mlp_forward` with named parameters ``w_fc``, ``b_fc``, ``w_proj``, ``b_proj``
    and the GELU ``activation`` names (a key of :data:`ACTIVATIONS`)."""

    KEYS = MLP_KEYS

    def __init__(self, params: dict[str, np.ndarray], activation: str = "gelu-tanh"):
        self.params = params
        self.activation = activation

    def forward(self, x: np.ndarray) -> tuple[np.ndarray, MlpCache]:
        """(..., C) -> (..., C)."""
        w = (self.params.get(k) for k in self.KEYS)
        return mlp_forward(x, *w, activation=self.activation)

    def backward(self, dout, cache) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        dx, *grads = mlp_backward(dout, cache)
        return dx, _named(self.KEYS, grads)


class CausalSelfAttention:
    """:func:`attention_forward` with parameters ``w_qkv``, ``b_qkv``, ``w_proj``, ``b_proj``."""

    KEYS = ATTN_KEYS

    def __init__(self, params: dict[str, np.ndarray], n_head: int):
        self.params = params
        self.n_head = n_head

    def forward(self, x: np.ndarray) -> tuple[np.ndarray, AttentionCache]:
        """(B, T, C) -> (B, T, C)."""
        return attention_forward(x, *(self.params.get(k) for k in self.KEYS), self.n_head)

    def backward(self, dout, cache) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        dx, *grads = attention_backward(dout, cache)
        return dx, _named(self.KEYS, grads)
