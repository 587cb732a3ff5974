"""The transformer block in every residual scheme, and its initializations.

Legend: B = batch, T = time, C = channels (n_embd), H = heads, D = C / H,
F = 4C (MLP hidden width), L = n_layer.

A block is two sublayers, attention then MLP, each f: (B, T, C) -> (B, T, C),
wrapped in the residual scheme the config names (``cfg.variant``):

==============  =====================================  ==========================
scheme          one sublayer step, x -> out            the backward's + x path
==============  =====================================  ==========================
``pre-ln``      out = x + f(ln(x))          (GPT-2)     dx = dout + df
``post-ln``     out = ln(x + f(x))    (Vaswani 2017)    dx = ds + df, ds = dln(dout)
``none``        out = f(ln(x))   (pre-ln minus + x)     dx = df: no identity path
``residual``    out = x + f(x)          (no norm)       dx = dout + df
``rezero``      out = x + alpha * f(x)  (Bachlechner    dx = dout + df, df through
                et al. 2020, alpha starts at 0)         alpha * dout
``deepnorm``    out = ln(alpha * x + f(x))  (DeepNet)   dx = alpha * ds + df
``ln-scaling``  out = x + f(s * ln(x)),  s = l^-p       dx = dout + df, df through
                (Sun et al. 2025)                       dh = s * dhs
==============  =====================================  ==========================

Every ``+ x`` fan-out goes through :func:`resgrad.nn.residual.residual_backward`,
``dx = dout + df``: the residual core is the centre of every scheme but ``none``.

DeepNorm (Wang, Ma, Dong, Huang, Zhang, Wei, "DeepNet: Scaling Transformers to
1,000 Layers", arXiv:2203.00555, 2022), decoder-only case with N layers:
``x_{l+1} = LN(alpha * x_l + G_l(x_l))`` with ``alpha = (2N)^(1/4)``, and the
weights of the FFN, the value projection and the attention output projection
initialized with gain ``beta = (8N)^(-1/4)``; the query and key projections keep gain 1.

LayerNorm Scaling (Sun, Yin, Wang, Liu, Liu, "The Curse of Depth in Large Language
Models", arXiv:2502.05795, 2025): pre-LN, with the output of each of block l's two
LayerNorms (l = 1..L, 1-based) multiplied by ``s_l = 1 / sqrt(l)``, so that the variance
of the deep blocks' outputs stops growing with depth and their branches keep learning.
Here the exponent is a dose, ``s_l = l^-p`` with ``p = cfg.ln_scaling_power`` in [0, 1]
(the paper's 0.5; p = 0 is pre-LN exactly). The paper drops GPT-2's scaled init of the
residual projections when it scales, and so does :func:`init_block_params`. ``s_l`` is a
constant of the block, as DeepNet's alpha is: no parameter learns it, and its backward is
one multiplication, ``dh = s_l * dhs``.

``cfg`` is a :class:`resgrad.nn.model.GPTConfig` (any object with its fields:
variant, init, n_layer, n_head, n_embd, dropout, bias, ln_eps, activation, and
ln_scaling_power under ln-scaling); this module does not import model.py, which sits above it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from resgrad.nn.layers import (
    ATTN_KEYS,
    MLP_KEYS,
    AttentionCache,
    LayerNormCache,
    MlpCache,
    attention_backward,
    attention_forward,
    layernorm_backward,
    layernorm_forward,
    mlp_backward,
    mlp_forward,
)
from resgrad.nn.residual import residual_backward

__all__ = [
    "BLOCK_LN",
    "FINAL_LN",
    "INITS",
    "VARIANTS",
    "BlockCache",
    "block_alpha",
    "block_backward",
    "block_forward",
    "block_param_shapes",
    "deepnorm_alpha",
    "deepnorm_beta",
    "init_block_params",
    "ln_scale",
    "scheme_forward",
]

VARIANTS = ("pre-ln", "post-ln", "none", "residual", "rezero", "deepnorm", "ln-scaling")
INITS = ("gpt2", "xavier")
BLOCK_LN = ("pre-ln", "post-ln", "none", "deepnorm", "ln-scaling")  # blocks holding ln1, ln2
FINAL_LN = ("pre-ln", "none", "ln-scaling")  # schemes whose model ends in ln_f before the LM head
PRE_LN = ("pre-ln", "none", "ln-scaling")  # schemes whose LayerNorm is inside the branch, f(ln(x))
SUBLAYERS = ("attn", "mlp")  # in order; sublayer i is normalized by ln{i+1}


def deepnorm_alpha(n_layer: int) -> float:
    """DeepNet's decoder-only residual scale, ``alpha = (2N)^(1/4)`` (arXiv:2203.00555)."""
    return (2.0 * n_layer) ** 0.25


def deepnorm_beta(n_layer: int) -> float:
    """DeepNet's decoder-only init gain, ``beta = (8N)^(-1/4)`` (arXiv:2203.00555)."""
    return (8.0 * n_layer) ** -0.25


def ln_scale(layer: int, power: float) -> float:
    """LayerNorm Scaling's factor on block ``layer``'s LayerNorm outputs, ``s = l^-p`` with
    l = layer + 1 the block's 1-based depth (Sun et al. 2025, arXiv:2502.05795: p = 1/2)."""
    return float(layer + 1) ** -power


def _check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {', '.join(VARIANTS)}")


def _check_init(init: str) -> None:
    if init not in INITS:
        raise ValueError(f"unknown init {init!r}; expected one of {', '.join(INITS)}")


def block_param_shapes(cfg: Any, layer: int) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every parameter of block ``layer`` under ``cfg``, in a fixed order."""
    _check_variant(cfg.variant)
    C, p = cfg.n_embd, f"blocks.{layer}"
    ln = {"g": (C,), **({"b": (C,)} if cfg.bias else {})}
    attn = {"w_qkv": (C, 3 * C), "b_qkv": (3 * C,), "w_proj": (C, C), "b_proj": (C,)}
    mlp = {"w_fc": (C, 4 * C), "b_fc": (4 * C,), "w_proj": (4 * C, C), "b_proj": (C,)}
    shapes: dict[str, tuple[int, ...]] = {}
    for i, (name, sub) in enumerate((("attn", attn), ("mlp", mlp)), start=1):
        if cfg.variant in BLOCK_LN:
            shapes.update({f"{p}.ln{i}.{k}": s for k, s in ln.items()})
        shapes.update({f"{p}.{name}.{k}": s for k, s in sub.items() if cfg.bias or k[0] == "w"})
    if cfg.variant == "rezero":
        shapes[f"{p}.alpha"] = (1,)
    return shapes


def init_block_params(
    cfg: Any, layer: int, rng: np.random.Generator, dtype: Any = np.float32
) -> dict[str, np.ndarray]:
    """Fresh parameters of block ``layer``, keys ``"blocks.{layer}.*"``.

    Inits (``cfg.init``):

    - ``gpt2``: weights normal(0, 0.02); the residual output projections
      ``attn.w_proj`` and ``mlp.w_proj`` normal(0, 0.02 / sqrt(2 L)) (GPT-2's
      scaling by the number of residual additions); biases 0; LayerNorm gain 1, bias 0.
    - ``xavier``: weights normal(0, sqrt(2 / (fan_in + fan_out))) (Glorot &
      Bengio 2010), the fused ``w_qkv`` treated as three (C, C) maps; biases 0;
      LayerNorm gain 1, bias 0.

    Under ``deepnorm`` the FFN weights, the value third of ``w_qkv`` and
    ``attn.w_proj`` are then multiplied by DeepNet's ``beta = (8L)^(-1/4)``
    (with ``xavier`` this is exactly DeepNet's init). ``rezero``'s alpha starts
    at ``cfg.rezero_alpha`` (0 by default). Under ``ln-scaling`` the ``gpt2`` init
    leaves ``attn.w_proj`` and ``mlp.w_proj`` at normal(0, 0.02), unscaled: Sun et al.
    (2025, arXiv:2502.05795) remove the 1/sqrt(2L) scaled initialization when LayerNorm
    Scaling is on, which already shrinks the deep branches. Any entry can be overwritten
    afterwards: the dict is plain.

    Parameters
    ----------
    cfg : GPTConfig
    layer : int
        Block index, 0 <= layer < cfg.n_layer.
    rng : numpy.random.Generator
    dtype : numpy dtype
        float32 to train, float64 to check.

    Returns
    -------
    dict of str to ndarray
    """
    _check_init(cfg.init)
    C, L, p = cfg.n_embd, cfg.n_layer, f"blocks.{layer}"
    params = {}
    for name, shape in block_param_shapes(cfg, layer).items():
        kind = name[len(p) + 1 :]  # e.g. "attn.w_qkv"
        leaf = kind.rsplit(".", 1)[-1]  # e.g. "w_qkv", "g", "b", "alpha"
        if leaf == "g":
            a = np.ones(shape)  # (C,) LayerNorm gain
        elif leaf == "alpha":
            a = np.full(shape, float(cfg.rezero_alpha))  # (1,) rezero's alpha: 0 by default
        elif leaf.startswith("b"):
            a = np.zeros(shape)  # biases, LayerNorm biases
        elif cfg.init == "gpt2":
            scaled = kind.endswith("w_proj") and cfg.variant != "ln-scaling"  # Sun et al.: none
            std = 0.02 / math.sqrt(2 * L) if scaled else 0.02
            a = rng.standard_normal(shape) * std  # (C_in, C_out)
        else:  # xavier: fused qkv counts as three (C, C) maps
            fan_in, fan_out = (C, C) if kind == "attn.w_qkv" else shape
            a = rng.standard_normal(shape) * math.sqrt(2.0 / (fan_in + fan_out))  # (C_in, C_out)
        if cfg.variant == "deepnorm":
            beta = deepnorm_beta(L)
            if kind == "attn.w_qkv":
                a[:, 2 * C :] *= beta  # (C, C) the value projection
            elif kind in ("attn.w_proj", "mlp.w_fc", "mlp.w_proj"):
                a *= beta  # (C_in, C_out)
        params[name] = a.astype(dtype)
    return params


class StepCache(NamedTuple):
    """One sublayer inside its residual scheme."""

    ln: LayerNormCache | None  # before f (PRE_LN's schemes), after the sum (post-ln, deepnorm)
    sub: AttentionCache | MlpCache  # the sublayer f itself
    f: np.ndarray | None  # (B, T, C) f's output, kept by rezero for dalpha


class BlockCache(NamedTuple):
    attn: StepCache
    mlp: StepCache
    prefix: str  # "blocks.{i}"
    variant: str
    alpha: Any  # rezero's learned alpha, deepnorm's constant, ln-scaling's l^-p; else None


def _sublayer_forward(name, x, params, p, cfg, train, rng):
    """f(x) for f = attention or MLP, reading ``{p}.{name}.*`` from params."""
    kw = dict(dropout=cfg.dropout, train=train, rng=rng)
    if name == "attn":
        w = [params.get(f"{p}.attn.{k}") for k in ATTN_KEYS]  # biases None where bias=False
        return attention_forward(x, *w, cfg.n_head, **kw)
    w = [params.get(f"{p}.mlp.{k}") for k in MLP_KEYS]
    return mlp_forward(x, *w, **kw, activation=cfg.activation)  # the GELU the config names


def _sublayer_backward(name, df, cache, p, grads):
    """Backward of :func:`_sublayer_forward`; writes ``{p}.{name}.*`` into grads, returns dx."""
    if name == "attn":
        dx, *g = attention_backward(df, cache)
        keys = ATTN_KEYS
    else:
        dx, *g = mlp_backward(df, cache)
        keys = MLP_KEYS
    grads.update({f"{p}.{name}.{k}": gk for k, gk in zip(keys, g) if gk is not None})
    return dx


def scheme_forward(
    x: np.ndarray,
    sublayer: Callable[[np.ndarray], tuple[np.ndarray, Any]],
    variant: str,
    g: np.ndarray | None,
    b: np.ndarray | None,
    eps: float,
    alpha: Any,
) -> tuple[np.ndarray, StepCache]:
    """One sublayer f inside the residual scheme ``variant``: x (B, T, C) -> out (B, T, C).

    ``sublayer(h)`` returns ``(f(h), cache)``; ``g``, ``b`` are the scheme's LayerNorm
    (None where it has none) and ``alpha`` rezero's, deepnorm's or ln-scaling's scale
    (:func:`block_alpha`; None in the schemes without one). The KV-cache sampler passes its
    own attention here, so training and sampling share the schemes.
    """
    if variant in PRE_LN:
        h, c_ln = layernorm_forward(x, g, b, eps)  # 1) (B,T,C) h = ln(x)
        if variant == "ln-scaling":
            h = h * alpha  # 1b) (B,T,C) h = s ln(x), s = l^-p: a fresh array, ln's stays intact
        f, c_sub = sublayer(h)  # 2) (B,T,C) f(h)
        out = f if variant == "none" else x + f  # 3) (B,T,C) x + f; none: f alone
        return out, StepCache(c_ln, c_sub, None)
    f, c_sub = sublayer(x)  # 1) (B,T,C) f(x)
    if variant == "residual":
        return x + f, StepCache(None, c_sub, None)  # 2) (B,T,C) x + f
    if variant == "rezero":
        return x + alpha * f, StepCache(None, c_sub, f)  # 2) (B,T,C) x + alpha f
    # 2) (B,T,C) post-ln: s = x + f; deepnorm: s = alpha x + f
    s = x + f if variant == "post-ln" else x * alpha + f
    out, c_ln = layernorm_forward(s, g, b, eps)  # 3) (B,T,C) ln(s)
    return out, StepCache(c_ln, c_sub, None)


def _step_forward(i, x, params, p, cfg, alpha, train, rng):
    """Sublayer ``i`` (0: attn, 1: mlp) of block ``p`` in its scheme: (B, T, C) -> (B, T, C)."""
    name, ln = SUBLAYERS[i], f"{p}.ln{i + 1}"

    def sublayer(h):
        return _sublayer_forward(name, h, params, p, cfg, train, rng)

    g, b = params.get(f"{ln}.g"), params.get(f"{ln}.b")
    return scheme_forward(x, sublayer, cfg.variant, g, b, cfg.ln_eps, alpha)


def block_alpha(params: dict[str, np.ndarray], prefix: str, cfg: Any, dtype: Any) -> Any:
    """The block's scale: rezero's learned alpha, deepnorm's constant, ln-scaling's
    ``l^-p`` for block ``prefix = "blocks.{l - 1}"`` (it goes with the block's name, so a
    block run elsewhere keeps its own); None in the schemes that have no scale, whose
    formulas never read it."""
    if cfg.variant == "rezero":
        return np.dtype(dtype).type(params[f"{prefix}.alpha"][0])  # learned, one per block
    if cfg.variant == "deepnorm":
        return np.dtype(dtype).type(deepnorm_alpha(cfg.n_layer))  # DeepNet's (2L)^(1/4)
    if cfg.variant == "ln-scaling":
        layer = int(prefix.removeprefix("blocks."))  # "blocks.{layer}"
        return np.dtype(dtype).type(ln_scale(layer, cfg.ln_scaling_power))  # Sun et al.'s 1/l^p
    return None


def _step_backward(i, dout, c, p, variant, alpha, grads):
    """Backward of :func:`_step_forward`: returns dx, writes parameter gradients into grads."""
    name, ln = SUBLAYERS[i], f"{p}.ln{i + 1}"

    def ln_backward(d):
        dx, grads[f"{ln}.g"], db = layernorm_backward(d, c.ln)  # (B,T,C), (C,), (C,)
        if db is not None:
            grads[f"{ln}.b"] = db
        return dx

    if variant in PRE_LN:
        # 3) out = x + f (pre-ln, ln-scaling) or f (none)  ->  df = dout
        # 2) f = f(h)                                      ->  dh
        dh = _sublayer_backward(name, dout, c.sub, p, grads)  # (B,T,C)
        if variant == "ln-scaling":
            dh = dh * alpha  # (B,T,C) 1b) h = s ln(x)  ->  d ln(x) = s dh
        # 1) h = ln(x)                                     ->  dx through the norm
        df = ln_backward(dh)  # (B,T,C)
        if variant == "none":
            return df  # no + x path: the gradient has only the sublayer route home
        return residual_backward(dout, df)  # (B,T,C) dx = dout + df
    if variant in ("residual", "rezero"):
        if variant == "rezero":
            # 2) out = x + alpha f  ->  dalpha = sum(dout * f), df = alpha dout
            grads[f"{p}.alpha"] += (dout * c.f).sum()  # (1,) both sublayers share alpha
            dfo = dout * alpha  # (B,T,C)
        else:
            dfo = dout  # 2) out = x + f  ->  df = dout
        # 1) f = f(x)
        df = _sublayer_backward(name, dfo, c.sub, p, grads)  # (B,T,C)
        return residual_backward(dout, df)  # (B,T,C) dx = dout + df
    # 3) out = ln(s)
    ds = ln_backward(dout)  # (B,T,C)
    # 2) s = x + f (post-ln) or alpha x + f (deepnorm)  ->  the x path gets ds (times alpha)
    dskip = ds if variant == "post-ln" else ds * alpha  # (B,T,C)
    # 1) f = f(x)
    df = _sublayer_backward(name, ds, c.sub, p, grads)  # (B,T,C)
    return residual_backward(dskip, df)  # (B,T,C) dx = (alpha) ds + df


def block_forward(
    x: np.ndarray,
    params: dict[str, np.ndarray],
    prefix: str,
    cfg: Any,
    *,
    train: bool = False,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, BlockCache]:
    """One transformer block, attention then MLP, in the scheme ``cfg.variant``.

    Parameters
    ----------
    x : ndarray, shape (B, T, C)
        The residual stream at the block's input.
    params : dict of str to ndarray
        Holds this block's parameters under ``f"{prefix}.*"`` (other keys are ignored).
    prefix : str
        ``"blocks.{i}"``.
    cfg : GPTConfig
    train, rng
        Dropout, as :func:`resgrad.nn.layers.dropout_forward`.

    Returns
    -------
    out : ndarray, shape (B, T, C)
    cache : BlockCache
    """
    _check_variant(cfg.variant)
    p = prefix  # "blocks.{i}"
    alpha = block_alpha(params, p, cfg, x.dtype)
    h, c_attn = _step_forward(0, x, params, p, cfg, alpha, train, rng)  # 1) (B,T,C) attention
    out, c_mlp = _step_forward(1, h, params, p, cfg, alpha, train, rng)  # 2) (B,T,C) MLP
    return out, BlockCache(c_attn, c_mlp, p, cfg.variant, alpha)


def block_backward(dout: np.ndarray, cache: BlockCache) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Backward of :func:`block_forward`.

    Parameters
    ----------
    dout : ndarray, shape (B, T, C)
    cache : BlockCache

    Returns
    -------
    dx : ndarray, shape (B, T, C)
    grads : dict of str to ndarray
        A fresh gradient for every parameter of the block, keyed by its full name
        (``"blocks.{i}.attn.w_qkv"``, ...).
    """
    p, v, alpha = cache.prefix, cache.variant, cache.alpha
    grads: dict[str, np.ndarray] = {}
    if v == "rezero":
        grads[f"{p}.alpha"] = np.zeros(1, dtype=dout.dtype)  # (1,) the two steps add into it
    # 2) out = mlp step(h)
    dh = _step_backward(1, dout, cache.mlp, p, v, alpha, grads)  # (B,T,C)
    # 1) h = attention step(x)
    dx = _step_backward(0, dh, cache.attn, p, v, alpha, grads)  # (B,T,C)
    return dx, grads
