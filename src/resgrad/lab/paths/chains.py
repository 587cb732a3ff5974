"""Chains: a model's backward unrolled into its residual steps, at fixed activations.

Legend: B = batch, T = time, C = channels, V = vocab, L = blocks, n = sublayer branches
(2L in a GPT: every attention and every MLP is one; N in the lesson's stack).

A :class:`Chain` is what :func:`resgrad.lab.paths.exact.split` walks: one forward's caches, and
per sublayer a :class:`Step` of three linear maps (the trunk, the skip and the branch's
vector-Jacobian product, from the layers' own backward pairs in :mod:`resgrad.nn.layers`).
:func:`gpt_chain` builds one for a GPT of any scheme, :func:`stack_chain` for the lesson's
stack; both carry the ordinary gradient the split is checked against. The schemes' skips
and where each parameter sits are described in :mod:`resgrad.lab.paths`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from resgrad.lab.lesson import StackConfig, make_bank, sublayer_backward, sublayer_forward
from resgrad.lab.study.refusals import BANK_TOO_SMALL, DEPTH_NOT_POSITIVE, UNKNOWN_ACTIVATION
from resgrad.nn.blocks import PRE_LN
from resgrad.nn.layers import (
    ATTN_KEYS,
    MLP_KEYS,
    attention_backward,
    cross_entropy_backward,
    dropout_backward,
    layernorm_backward,
    linear_backward,
    linear_forward,
    mlp_backward,
)
from resgrad.nn.model import GPT
from resgrad.nn.residual import residual_backward

__all__ = [
    "ACTIVATIONS",
    "Chain",
    "gpt_chain",
    "stack_chain",
]

ACTIVATIONS = ("tanh", "linear")  # the lesson's stack: tanh(x W), or x W (Veit's linear case)


# --------------------------------------------------------------------------- the chain


class Step(NamedTuple):
    """One sublayer inside its residual scheme, seen by the backward as three linear maps.

    Backward through the step, for a gradient ``d`` at its output:
    ``t = trunk(d)`` (post-ln's and DeepNorm's LayerNorm after the sum; the identity
    elsewhere), then ``dx = skip(t) + branch(t)``. Each map also returns the gradients of
    the parameters it passes (a dict keyed by the model's names).
    """

    name: str  # "blocks.3.attn", "W.7"
    kind: int  # index into Chain.kinds: 0 attention, 1 MLP in a GPT
    trunk: Callable[[np.ndarray], tuple[np.ndarray, dict]] | None  # None: the identity
    skip: Callable[[np.ndarray], np.ndarray] | None  # None: no skip (``none``, a plain stack)
    branch: Callable[[np.ndarray], tuple[np.ndarray, dict]]  # the sublayer's VJP
    names: frozenset  # every parameter the step's maps return


@dataclass
class Chain:
    """A model's backward, unrolled into steps, at fixed activations (one forward's caches).

    Build one with :func:`gpt_chain` or :func:`stack_chain`. ``steps`` run bottom to top;
    boundary i (x_0 .. x_L) is the input of step ``boundary_steps[i]`` (``None`` for the top,
    x_L). ``dtop`` is the gradient at x_L; ``top`` the parameter gradients above x_L (at
    k = 0); ``bottom(d, is_key0)`` maps a part of the gradient at x_0 to the gradients of
    the parameters below it. ``ref_stream`` and ``ref_params`` are the ordinary gradient,
    from the model's own backward, which the parts are checked against.
    """

    label: str
    kinds: tuple[str, ...]
    steps: list[Step]
    boundary_steps: list[int | None]
    dtop: np.ndarray
    top: dict[str, Any]
    top_names: frozenset
    bottom: Callable[[np.ndarray, bool], dict[str, Any]] | None
    bottom_names: frozenset
    ref_stream: list[np.ndarray]  # L + 1 arrays, dL/dx_i
    ref_params: dict[str, np.ndarray]

    @property
    def n(self) -> int:
        """n, the number of branches."""
        return len(self.steps)


class _Rows(NamedTuple):
    """A gradient that is zero but in a few rows: ``full[rows] = vals``, rows unique."""

    rows: np.ndarray  # (U,) int
    vals: np.ndarray  # (U, C)
    shape: tuple[int, ...]  # (V, C)

    def dense(self) -> np.ndarray:
        out = np.zeros(self.shape, dtype=self.vals.dtype)  # (V, C)
        out[self.rows] = self.vals
        return out


def _add(a: Any, b: Any) -> Any:
    """a + b for arrays and _Rows, never writing into either (they may be shared)."""
    if a is None:
        return b
    if isinstance(b, _Rows):
        a, b = b, a
    if isinstance(a, _Rows):
        if isinstance(b, _Rows):
            return _add(a.dense(), b)
        out = b.copy()  # (V, C)
        out[a.rows] += a.vals
        return out
    return a + b


def _sq_and_dot(part: Any, ref: np.ndarray) -> tuple[float, float]:
    """(||part||^2, <part, ref>) for an array or _Rows."""
    if isinstance(part, _Rows):
        return float(np.vdot(part.vals, part.vals)), float(np.vdot(part.vals, ref[part.rows]))
    return float(np.vdot(part, part)), float(np.vdot(part, ref))


# --------------------------------------------------------------------------- a GPT


def _ln_vjp(cache, prefix: str) -> Callable[[np.ndarray], tuple[np.ndarray, dict]]:
    """LayerNorm ``{prefix}.g, .b``: d (B,T,C) -> (dx (B,T,C), {g: (C,), b: (C,)})."""

    def vjp(d):
        dx, dg, db = layernorm_backward(d, cache)  # (B,T,C), (C,), (C,)
        g = {f"{prefix}.g": dg}
        if db is not None:
            g[f"{prefix}.b"] = db
        return dx, g

    return vjp


def _sub_vjp(name: str, cache, p: str) -> Callable[[np.ndarray], tuple[np.ndarray, dict]]:
    """Attention or MLP of block ``p``: df (B,T,C) -> (dx (B,T,C), its weights' gradients)."""
    backward, keys = (attention_backward, ATTN_KEYS) if name == "attn" else (mlp_backward, MLP_KEYS)

    def vjp(d):
        dx, *g = backward(d, cache)  # (B,T,C), then the weights in keys' order
        return dx, {f"{p}.{name}.{k}": gk for k, gk in zip(keys, g) if gk is not None}

    return vjp


def _gpt_step(c, p: str, i: int, variant: str, alpha, names: Iterable[str]) -> Step:
    """Step ``i`` (0: attention, 1: MLP) of block ``p``, read from its StepCache ``c``.

    Mirrors :func:`resgrad.nn.blocks._step_backward` scheme by scheme, split at the + x.
    """
    name = ("attn", "mlp")[i]
    sub = _sub_vjp(name, c.sub, p)
    trunk, skip = None, _identity
    if variant in PRE_LN:
        # out = x + f(ln(x)) (pre-ln), x + f(s ln(x)) (ln-scaling, s = l^-p, a constant of the
        # block) or f(ln(x)) (none): the norm, and s, are inside the branch
        ln = _ln_vjp(c.ln, f"{p}.ln{i + 1}")
        s = alpha if variant == "ln-scaling" else None

        def branch(d):
            dh, g = sub(d)  # (B,T,C) 2) f = f(h)
            if s is not None:
                dh = dh * s  # (B,T,C) 1b) h = s ln(x)
            dx, g_ln = ln(dh)  # (B,T,C) 1) h = ln(x)
            return dx, {**g, **g_ln}

        skip = None if variant == "none" else _identity
    elif variant == "residual":
        branch = sub  # out = x + f(x)
    elif variant == "rezero":
        # out = x + alpha f(x)  ->  dalpha = sum(dout * f), df = alpha dout
        def branch(d):
            dx, g = sub(d * alpha)  # (B,T,C)
            g[f"{p}.alpha"] = np.array([(d * c.f).sum()], dtype=d.dtype)  # (1,)
            return dx, g

    else:
        # out = ln(s), s = x + f(x) (post-ln) or alpha x + f(x) (deepnorm): the norm is
        # on the trunk, before the split
        trunk = _ln_vjp(c.ln, f"{p}.ln{i + 1}")
        branch = sub
        if variant == "deepnorm":

            def skip(d):
                return d * alpha  # (B,T,C) the x path gets alpha ds

    mine = frozenset(
        k for k in names
        if k.startswith((f"{p}.{name}.", f"{p}.ln{i + 1}.")) or k == f"{p}.alpha"
    )  # fmt: skip
    return Step(f"{p}.{name}", i, trunk, skip, branch, mine)


def _identity(d: np.ndarray) -> np.ndarray:
    return d


def gpt_chain(
    model: GPT, idx: np.ndarray, targets: np.ndarray, *, ignore_index: int | None = None
) -> Chain:
    """Run ``model`` forward (eval: no dropout) and backward on a batch; unroll its backward.

    Parameters
    ----------
    model : GPT
        Any scheme; float64 for a split exact to 1e-12.
    idx, targets : int ndarray, shape (B, T)
        Token ids and next-token ids; the loss is the mean cross-entropy.
    ignore_index : int, optional
        As :meth:`GPT.forward`.

    Returns
    -------
    Chain
        n = 2L branches, kinds ("attn", "mlp"); boundary i is block i's input (x_0: the
        embeddings' output), x_L the last block's output.
    """
    cfg, P = model.cfg, model.params
    _, _, cache = model.forward(idx, targets, ignore_index=ignore_index)
    ref_params, ref_stream = model.backward_stream(cache)  # the ordinary gradient
    # 6) loss = cross_entropy(logits)  ->  dlogits, as GPT.backward_stream
    dlogits = cross_entropy_backward(1.0, cache.ce)  # (B,T,V)
    B, T, V = dlogits.shape
    C = cfg.n_embd
    # 5) logits = x @ wte.T  ->  dx = dlogits @ wte, dwte_head = dlogits^T @ x (the head: k = 0)
    dx = (dlogits.reshape(-1, V) @ cache.wte).reshape(B, T, C)  # (B*T,V) @ (V,C) -> (B,T,C)
    dwte_head = dlogits.reshape(-1, V).T @ cache.xf.reshape(-1, C)  # (V,N) @ (N,C) -> (V,C)
    top: dict[str, Any] = {"wte": dwte_head}
    # 4) x = ln_f(x)  (pre-ln and none): on the trunk, k = 0
    if cache.ln_f is not None:
        dx, g = _ln_vjp(cache.ln_f, "ln_f")(dx)  # (B,T,C)
        top.update(g)
    steps, boundary_steps = [], []
    for bc in cache.blocks:
        boundary_steps.append(len(steps))  # block i's input is boundary i
        for s, c in enumerate((bc.attn, bc.mlp)):
            steps.append(_gpt_step(c, bc.prefix, s, bc.variant, bc.alpha, P))
    boundary_steps.append(None)  # x_L, the top
    idx_flat = np.asarray(idx).reshape(-1)  # (N,)
    rows, inverse = np.unique(idx_flat, return_inverse=True)  # (U,), (N,)

    def bottom(d: np.ndarray, is_key0: bool) -> dict[str, Any]:
        # 2) x = dropout(x)  (the identity in eval)
        d = dropout_backward(d, cache.drop)  # (B,T,C)
        # 1) x = wte[idx] + wpe[:T]  ->  dwpe[t] = sum over b; dwte: scatter-add into rows
        dwpe = np.zeros_like(P["wpe"], dtype=d.dtype)  # (block_size, C)
        dwpe[:T] = d.sum(axis=0)  # (T, C)
        vals = np.zeros((len(rows), C), dtype=d.dtype)  # (U, C)
        np.add.at(vals, inverse, d.reshape(-1, C))  # (U, C) one sum per token id
        return {"wte": _Rows(rows, vals, P["wte"].shape), "wpe": dwpe}

    return Chain(
        label=f"gpt:{cfg.variant}",
        kinds=("attn", "mlp"),
        steps=steps,
        boundary_steps=boundary_steps,
        dtop=dx,
        top=top,
        top_names=frozenset(top),
        bottom=bottom,
        bottom_names=frozenset({"wte", "wpe"}),
        ref_stream=list(ref_stream),
        ref_params=ref_params,
    )


# --------------------------------------------------------------------------- the lesson


def stack_chain(
    cfg: StackConfig | None = None,
    depth: int | None = None,
    *,
    residual: bool = True,
    activation: str = "tanh",
    bank: Sequence[np.ndarray] | None = None,
) -> Chain:
    """The lesson's stack ``x_{i+1} = x_i + f(x_i W_i)`` as a chain, upstream gradient of ones.

    Parameters
    ----------
    cfg : StackConfig, optional
        The lesson's sizes and seeds (default ``StackConfig()``, the lesson's own): its
        matrices from ``make_bank``, its input from ``RandomState(cfg.input_seed)``.
    depth : int, optional
        N; ``max(cfg.depths)`` (20 for the lesson) by default.
    residual : bool
        With the + x path (True) or the plain stack (everything at k = N).
    activation : {"tanh", "linear"}
        f = tanh (the lesson's) or the identity: the linear residual stack of Veit's
        analysis, where E||part_k||^2 = C(N, k) scale^(2k) ||dout||^2.
    bank : list of (C, C) arrays, optional
        The matrices W_i; ``make_bank(cfg, depth)`` by default.

    Returns
    -------
    Chain
        n = N branches, one kind ("f"); boundary i is layer i's input; parameters "W.i".
    """
    if activation not in ACTIVATIONS:
        raise UNKNOWN_ACTIVATION(activation=activation, expected=", ".join(ACTIVATIONS))
    cfg = StackConfig() if cfg is None else cfg
    N = max(cfg.depths) if depth is None else depth
    if isinstance(N, bool) or not isinstance(N, (int, np.integer)) or N < 1:
        raise DEPTH_NOT_POSITIVE(depth=N)
    Ws = make_bank(cfg, N) if bank is None else [np.asarray(W) for W in bank]
    if len(Ws) < N:
        raise BANK_TOO_SMALL(depth=N, matrices=len(Ws))
    x = np.random.RandomState(cfg.input_seed).randn(cfg.batch, cfg.width)  # (B, C)
    steps = []
    for i in range(N):
        W = Ws[i]
        if activation == "tanh":
            f, c = sublayer_forward(x, W)  # (B, C) tanh(x @ W)

            def branch(d, c=c, W=W, i=i):
                dx, dW = sublayer_backward(d, c, W)  # (B, C), (C, C)
                return dx, {f"W.{i}": dW}

        else:
            f, c = linear_forward(x, W)  # (B, C) x @ W

            def branch(d, c=c, i=i):
                dx, dW, _ = linear_backward(d, c)  # (B, C), (C, C)
                return dx, {f"W.{i}": dW}

        x = x + f if residual else f  # (B, C)
        skip = _identity if residual else None
        steps.append(Step(f"W.{i}", 0, None, skip, branch, frozenset({f"W.{i}"})))
    # the ordinary backward, as the lesson's run_stack does it
    dx = np.ones_like(x)  # (B, C) upstream gradient of ones
    ref_stream, ref_params = [dx], {}
    for i in reversed(range(N)):
        df, g = steps[i].branch(dx)  # (B, C)
        dx = residual_backward(dx, df) if residual else df  # + x passes dout through
        ref_stream.append(dx)
        ref_params.update(g)
    return Chain(
        label=f"lesson:{activation}:{'residual' if residual else 'plain'}",
        kinds=("f",),
        steps=steps,
        boundary_steps=[*range(N), None],
        dtop=np.ones_like(x),
        top={},
        top_names=frozenset(),
        bottom=None,
        bottom_names=frozenset(),
        ref_stream=ref_stream[::-1],
        ref_params={f"W.{i}": ref_params[f"W.{i}"] for i in range(N)},
    )
