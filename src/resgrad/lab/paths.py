"""Gradient paths: the exact split of a gradient by the number of branches it passed through.

Legend: B = batch, T = time, C = channels, V = vocab, L = blocks, n = sublayer branches
(2L in a GPT: every attention and every MLP is one; N in the lesson's stack), K = keys
(path lengths k = 0..n, or (attention, MLP) pairs).

Unroll a residual stack ``x_{j+1} = x_j + f_j(x_j)`` and the gradient at any point is a sum
over the 2^n paths from the loss to that point: each sublayer is passed either along its
skip or through its branch f_j. The path length k is the number of branches a path takes;
k = 0 is the identity highway (Veit, Wilber, Belongie, "Residual Networks Behave Like
Ensembles of Relatively Shallow Networks", arXiv:1605.06431, 2016).

**Method.** Run the forward once and keep its caches. At fixed activations every backward
here is linear in its upstream gradient, so the backward can carry a list of per-k
gradients instead of one: at a residual add the skip keeps each part's k and the branch's
vector-Jacobian product (the layer's own backward pair, from :mod:`resgrad.nn.layers`)
moves it to k + 1. The parts add up to the ordinary gradient exactly (in real arithmetic;
to rounding in float64). Sublayer j, counted from the top, sees j + 1 parts, so the whole
split costs n(n + 1)/2 branch VJPs, about n/2 ordinary backward passes; the alternative of
evaluating the gradient at n + 1 branch scalings t (roots of unity) and inverting a DFT
costs n + 1 full passes in complex arithmetic, twice this, and would need complex layers.

**Schemes.** pre-ln ``x + f(ln(x))``, residual ``x + f(x)`` and rezero ``x + alpha f(x)``
have a true identity skip: k = 0 is the gradient of the loss's head carried unchanged.
In post-ln ``ln(x + f(x))`` and DeepNorm ``ln(alpha x + f(x))`` the skip passes through
each block's LayerNorms (and DeepNorm's alpha): the split is still by the number of
*branches* a path takes, and the "identity path" k = 0 means the path through every
LayerNorm's Jacobian (times alpha) and through no attention or MLP. ``none`` ``f(ln(x))``
has no skip: every gradient at x_i has k = 2(L - i), all of it at k = 2L at the embeddings.

**Parameters.** A parameter inside a branch (its attention or MLP weights, the pre-ln
LayerNorm before it, rezero's alpha at its output) gets the k of the gradient *entering
that branch* from above: the number of branches between the loss and the branch. A
parameter on the trunk (post-ln's and DeepNorm's LayerNorms, ln_f, the LM head) gets the k
of the gradient reaching it. The tied ``wte`` gets the head's gradient at k = 0 plus the
embedding lookup's gradient split as the stream at x_0 is.

**Cost, before the work.** :func:`model_work` and :func:`lesson_work` count the branch VJPs
a measurement will do (the split's n(n + 1)/2 per chain, Veit's ``samples`` x n(n + 1)/2) and
estimate their seconds; :func:`require_time` refuses work over a budget in one line, and
:func:`work_bar` shows the work's progress on a terminal (every function doing it takes a
``tick``). Runs compared through training (:func:`plan_runs`, :func:`across_runs`) must share
their scheme, shape, vocabulary and text tokens (:class:`RunModel`).

**Veit's protocol** (their section 5, figure 6) samples single paths instead:
:func:`veit_sample` draws k of the n branches, backpropagates through exactly those
branches and the skip everywhere else, and records the gradient magnitude at x_0; their
figure 6(c) quantity is C(n, k) x the mean magnitude. That is a sum of magnitudes: it
counts every path as if its gradient added to the others in phase. The exact split
:func:`split` sums the paths' gradient *vectors*, with their cancellation, so its norms
are smaller and its shares say where the gradient that reaches x_0 really comes from.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from resgrad.lab.lesson import StackConfig, make_bank, sublayer_backward, sublayer_forward
from resgrad.lab.realflow import check_seq, text_windows
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
    "CheckpointPaths",
    "PathRow",
    "PathSplit",
    "RunModel",
    "RunPlan",
    "RunsRow",
    "VeitEstimate",
    "Work",
    "across_runs",
    "check_comparable",
    "effective_range",
    "format_seconds",
    "gpt_chain",
    "lesson_work",
    "model_splits",
    "model_veit",
    "model_work",
    "path_figure",
    "path_gradient",
    "path_table",
    "paths_in_range",
    "plan_runs",
    "refuse_over_budget",
    "require_time",
    "run_checkpoint_paths",
    "run_model",
    "save_path_figure",
    "split",
    "stack_chain",
    "veit_bytes",
    "veit_exact",
    "veit_sample",
    "work_bar",
]

ACTIVATIONS = ("tanh", "linear")  # the lesson's stack: tanh(x W), or x W (Veit's linear case)
MAX_EXACT_PATHS = 1 << 16  # veit_exact enumerates every path: refuse more than this
MAX_SPLIT_BRANCHES = 4096  # split's n(n + 1)/2 VJPs: 8.4 million at this n, minutes at C=16
TIME_BUDGET_S = 600.0  # work estimated longer than this is refused unless asked for (--budget)
PROGRESS_AFTER_S = 3.0  # work estimated longer than this shows a progress bar on a terminal

Tick = Callable[[int], None]  # told the number of branch VJPs just done (a progress bar's update)


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
    if variant in ("pre-ln", "none"):
        # out = x + f(ln(x)) (pre-ln) or f(ln(x)) (none): the norm is inside the branch
        ln = _ln_vjp(c.ln, f"{p}.ln{i + 1}")

        def branch(d):
            dh, g = sub(d)  # (B,T,C) 2) f = f(h)
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
        raise ValueError(f"unknown activation {activation!r}; expected one of "
                         f"{', '.join(ACTIVATIONS)}")  # fmt: skip
    cfg = StackConfig() if cfg is None else cfg
    N = max(cfg.depths) if depth is None else depth
    if isinstance(N, bool) or not isinstance(N, (int, np.integer)) or N < 1:
        raise ValueError(f"depth must be a positive integer, got {N!r}")
    Ws = make_bank(cfg, N) if bank is None else [np.asarray(W) for W in bank]
    if len(Ws) < N:
        raise ValueError(f"depth {N} needs {N} matrices but the bank holds {len(Ws)}")
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


# --------------------------------------------------------------------------- the split


def _bump(key: Any, kind: int) -> Any:
    """The key of a part after one more branch of ``kind``: k + 1, or (a, m) + one."""
    if isinstance(key, tuple):
        return key[:kind] + (key[kind] + 1,) + key[kind + 1 :]
    return key + 1


@dataclass(frozen=True)
class PathSplit:
    """A gradient split by path: per boundary and per parameter, one part per key.

    ``keys`` are the path lengths k = 0..n (``joint=False``) or the pairs (a, m) of
    attention and MLP branches, a, m = 0..L (``joint=True``); arrays index them in that
    order. ``norms[i, j]`` is ||part_j of dL/dx_i||; ``dots[i, j]`` is <part_j, dL/dx_i>,
    which sum over j to ||dL/dx_i||^2 exactly (projection shares sum to 1; a part pointing
    against the total has a negative one).
    """

    label: str
    n: int  # branches
    keys: tuple  # k = 0..n, or (a, m) pairs
    norms: np.ndarray  # (L + 1, K)
    dots: np.ndarray  # (L + 1, K)
    full_norms: np.ndarray  # (L + 1,) ||dL/dx_i||, the model's own backward
    sum_errors: np.ndarray  # (L + 1,) ||sum of parts - dL/dx_i|| / ||dL/dx_i||
    param_norms: dict[str, np.ndarray]  # name -> (K,)
    param_dots: dict[str, np.ndarray]  # name -> (K,)
    param_full_norms: dict[str, float]
    vjps: int  # branch VJPs done
    parts: list[dict] | None = None  # keep=True: per boundary, key -> (B, T, C)
    param_parts: dict[str, dict] | None = None  # keep=True: name -> key -> array

    def share_norm(self) -> np.ndarray:
        """(L + 1, K) ||part|| / sum of ||part|| over keys: Veit's kind of share."""
        total = self.norms.sum(axis=1, keepdims=True)  # (L + 1, 1)
        return self.norms / np.where(total > 0, total, 1.0)

    def share_proj(self) -> np.ndarray:
        """(L + 1, K) <part, g> / ||g||^2: the shares of the gradient itself; they sum to 1."""
        sq = np.square(self.full_norms)[:, None]  # (L + 1, 1)
        return self.dots / np.where(sq > 0, sq, 1.0)


def split(
    chain: Chain, *, joint: bool = False, keep: bool = False, tick: Tick | None = None
) -> PathSplit:
    """The exact split of the chain's gradient by path length, at every boundary and parameter.

    Walks the steps top to bottom carrying one gradient array per key: the skip keeps
    a part's key, the branch's VJP bumps it (see the module docstring).

    Parameters
    ----------
    chain : Chain
    joint : bool
        Split by (attention branches, MLP branches) instead of their sum k.
    keep : bool
        Also keep every part as an array (memory: (n + 1) x the stream per boundary and
        (n + 1) x the parameters: for small models and tests).
    tick : callable, optional
        Called after each step with the branch VJPs it did (a progress bar's update).

    Returns
    -------
    PathSplit

    Raises
    ------
    ValueError
        More than :data:`MAX_SPLIT_BRANCHES` branches: n(n + 1)/2 VJPs would take hours.
    """
    n, nk = chain.n, len(chain.kinds)
    if n > MAX_SPLIT_BRANCHES:
        raise ValueError(
            f"the split of {n:,} branches needs n(n + 1)/2 = {n * (n + 1) // 2:,} branch VJPs; "
            f"expected at most {MAX_SPLIT_BRANCHES:,} branches (a depth of that many sublayers)"
        )
    if joint:
        counts = [sum(s.kind == j for s in chain.steps) for j in range(nk)]
        keys = tuple(itertools.product(*(range(c + 1) for c in counts)))
        key0 = (0,) * nk
    else:
        keys, key0 = tuple(range(n + 1)), 0
    col = {k: j for j, k in enumerate(keys)}
    nb = len(chain.boundary_steps)
    norms, dots = np.zeros((nb, len(keys))), np.zeros((nb, len(keys)))
    full_norms, sum_errors = np.zeros(nb), np.zeros(nb)
    p_norms = {k: np.zeros(len(keys)) for k in chain.ref_params}
    p_dots = {k: np.zeros(len(keys)) for k in chain.ref_params}
    parts_kept: list[dict] | None = [None] * nb if keep else None
    p_kept: dict[str, dict] | None = {k: {} for k in chain.ref_params} if keep else None
    # the last stage (top = n, step j, bottom = -1) that adds into each parameter: its
    # parts are final after it; rezero's alpha and the tied wte take two stages
    last: dict[str, int] = {k: n for k in chain.top_names}
    for j in reversed(range(n)):  # walked top down: the lowest step adding to a name is last
        last.update({k: j for k in chain.steps[j].names})
    last.update({k: -1 for k in chain.bottom_names})
    pending: dict[tuple[str, Any], Any] = {}

    def add_params(stage: int, key: Any, grads: dict) -> None:
        for name, g in grads.items():
            pending[name, key] = _add(pending.get((name, key)), g)
            if last[name] == stage:
                finish(name, key)

    def finish(name: str, key: Any) -> None:
        part = pending.pop((name, key))
        sq, dot = _sq_and_dot(part, chain.ref_params[name])
        p_norms[name][col[key]] = math.sqrt(sq)
        p_dots[name][col[key]] = dot
        if keep:
            p_kept[name][key] = part.dense() if isinstance(part, _Rows) else part

    def finish_stage(stage: int) -> None:
        for name, key in [nk_ for nk_ in pending if last[nk_[0]] == stage]:
            finish(name, key)

    def record(i: int, D: dict) -> None:
        g = chain.ref_stream[i]
        total = None
        for key, part in D.items():
            sq, dot = _sq_and_dot(part, g)
            norms[i, col[key]], dots[i, col[key]] = math.sqrt(sq), dot
            total = _add(total, part)
        gn = float(np.linalg.norm(g))
        full_norms[i] = gn
        err = float(np.linalg.norm(total - g)) if total is not None else gn
        sum_errors[i] = err / gn if gn > 0 else err
        if keep:
            parts_kept[i] = dict(D)

    add_params(n, key0, chain.top)
    finish_stage(n)
    D = {key0: chain.dtop}  # key -> (B,T,C) parts of the gradient at the top
    record(nb - 1, D)
    at = {j: i for i, j in enumerate(chain.boundary_steps) if j is not None}
    vjps = 0
    for j in reversed(range(n)):
        s, out = chain.steps[j], {}
        for key, d in D.items():
            g: dict = {}
            t = d
            if s.trunk is not None:
                t, g = s.trunk(d)  # post-ln, deepnorm: the norm after the sum, at this key
            if s.skip is not None:
                out[key] = _add(out.get(key), s.skip(t))  # the skip keeps k
            dx, gb = s.branch(t)  # the branch's VJP ...
            vjps += 1
            up = _bump(key, s.kind)  # ... moves it one branch further from the loss
            out[up] = _add(out.get(up), dx)
            add_params(j, key, {**g, **gb})  # parameters in the branch: the entering key
        finish_stage(j)
        if tick is not None:
            tick(len(D))  # one branch VJP per key carried into the step
        D = out
        if j in at:
            record(at[j], D)
    if chain.bottom is not None:
        for key, d in D.items():
            add_params(-1, key, chain.bottom(d, key == key0))
    for name, key in list(pending):
        finish(name, key)
    return PathSplit(
        label=chain.label, n=n, keys=keys, norms=norms, dots=dots, full_norms=full_norms,
        sum_errors=sum_errors, param_norms=p_norms, param_dots=p_dots,
        param_full_norms={k: float(np.linalg.norm(v)) for k, v in chain.ref_params.items()},
        vjps=vjps, parts=parts_kept, param_parts=p_kept,
    )  # fmt: skip


# --------------------------------------------------------------------------- one path


def _branch_set(chain: Chain, branches: Iterable[int]) -> frozenset:
    S = frozenset(int(b) for b in branches)
    bad = [b for b in S if not 0 <= b < chain.n]
    if bad:
        raise ValueError(f"branch {bad[0]} is not one of the chain's 0..{chain.n - 1}")
    return S


def path_gradient(chain: Chain, branches: Iterable[int]) -> np.ndarray:
    """The gradient at x_0 carried by one path: through exactly ``branches``, skips elsewhere.

    Parameters
    ----------
    chain : Chain
    branches : iterable of int
        Branch indices, 0 = the lowest (block 0's attention in a GPT).

    Returns
    -------
    ndarray, the shape of x_0
        Zero where the path needs a skip that the scheme lacks (``none``, a plain stack).
    """
    S = _branch_set(chain, branches)
    d = chain.dtop
    for j in reversed(range(chain.n)):
        s = chain.steps[j]
        if s.trunk is not None:
            d, _ = s.trunk(d)
        if j in S:
            d, _ = s.branch(d)  # through the branch
        elif s.skip is None:
            return np.zeros_like(chain.dtop)  # no skip: this path does not exist
        else:
            d = s.skip(d)  # along the skip
    return d


@dataclass(frozen=True)
class VeitEstimate:
    """Veit et al.'s figure 6 for one chain: per path length k, single-path magnitudes at x_0.

    ``mean[j]`` is the mean ||path gradient|| over the paths of length ``ks[j]`` (sampled,
    or all of them for :func:`veit_exact`); ``total = count * mean`` is figure 6(c).
    """

    n: int
    ks: tuple[int, ...]
    mean: np.ndarray  # (K,)
    std: np.ndarray  # (K,) over the samples (or the paths)
    samples: int  # per k; 0 for the exact enumeration
    seed: int | None

    @property
    def count(self) -> np.ndarray:
        """(K,) C(n, k): how many paths have length k (figure 6(a))."""
        return np.array([math.comb(self.n, k) for k in self.ks], dtype=float)

    @property
    def total(self) -> np.ndarray:
        """(K,) C(n, k) x mean magnitude (figure 6(c))."""
        return self.count * self.mean


def _ks(chain: Chain, ks: Iterable[int] | None) -> tuple[int, ...]:
    ks = tuple(range(chain.n + 1)) if ks is None else tuple(int(k) for k in ks)
    for k in ks:
        if not 0 <= k <= chain.n:
            raise ValueError(f"path length {k} is outside 0..{chain.n}")
    return ks


def veit_sample(
    chain: Chain,
    samples: int,
    seed: int,
    ks: Iterable[int] | None = None,
    *,
    tick: Tick | None = None,
) -> VeitEstimate:
    """Veit's protocol: for each k, ``samples`` random sets of k branches (with replacement
    between samples), each backpropagated alone; the magnitude ||gradient at x_0||.

    Randomness: ``np.random.default_rng([seed, k])`` per k, so adding a k, or asking for
    the ks in another order, changes no other k's sample. ``std`` is over the samples,
    ddof=0. Memory: one float per sample (:func:`veit_bytes`). ``tick`` is called after
    each sample with its k, the branch VJPs it took.
    """
    if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or samples < 1:
        raise ValueError(f"samples must be a positive integer, got {samples!r}")
    ks = _ks(chain, ks)
    mean, std = np.zeros(len(ks)), np.zeros(len(ks))
    mags = np.empty(int(samples))  # (samples,) one k at a time
    for j, k in enumerate(ks):
        rng = np.random.default_rng([seed, k])  # its own stream: the other ks do not move it
        for i in range(samples):
            S = rng.choice(chain.n, size=k, replace=False)  # (k,) distinct branches
            mags[i] = np.linalg.norm(path_gradient(chain, S))
            if tick is not None:
                tick(k)
        mean[j], std[j] = mags.mean(), mags.std()
    return VeitEstimate(chain.n, ks, mean, std, int(samples), seed)


def veit_bytes(samples: int) -> int:
    """Memory :func:`veit_sample` adds to its chain's: one float64 per sample."""
    return 8 * int(samples)


def veit_exact(chain: Chain, ks: Iterable[int] | None = None) -> VeitEstimate:
    """The expectation :func:`veit_sample` estimates: every path of each length, enumerated."""
    ks = _ks(chain, ks)
    paths = sum(math.comb(chain.n, k) for k in ks)
    if paths > MAX_EXACT_PATHS:
        raise ValueError(f"{paths} paths to enumerate; expected at most {MAX_EXACT_PATHS} "
                         "(use veit_sample)")  # fmt: skip
    mean, std = np.zeros(len(ks)), np.zeros(len(ks))
    for j, k in enumerate(ks):
        mags = [np.linalg.norm(path_gradient(chain, S))
                for S in itertools.combinations(range(chain.n), k)]  # fmt: skip
        mean[j], std[j] = np.mean(mags), np.std(mags)
    return VeitEstimate(chain.n, ks, mean, std, 0, None)


# --------------------------------------------------------------------------- reading it


def effective_range(shares: Sequence[float], mass: float = 0.9) -> tuple[int, int]:
    """The shortest k-range [lo, hi] whose shares sum to at least ``mass`` (ties: lowest lo).

    Veit et al. found 5-17 of 54 for a ResNet's gradient by magnitude.
    """
    s = np.asarray(shares, dtype=float)  # (K,)
    if s.ndim != 1 or s.size == 0 or (s < 0).any() or not np.isfinite(s).all():
        raise ValueError("shares must be a non-empty list of finite non-negative numbers")
    if not 0.0 < mass <= 1.0:
        raise ValueError(f"mass must be in (0, 1], got {mass!r}")
    target = mass * s.sum() * (1 - 1e-12)
    c = np.concatenate([[0.0], np.cumsum(s)])  # (K + 1,)
    best = (0, s.size - 1)
    for lo in range(s.size):
        hi = int(np.searchsorted(c, c[lo] + target, side="left")) - 1
        if hi < s.size and hi - lo < best[1] - best[0]:
            best = (lo, max(hi, lo))
    return best


class PathRow(NamedTuple):
    """One path length k at one boundary, mean and std over the splits (seeds) given.

    Each std is the spread of the seeds measured, ddof=0 (numpy's default): 0 for one seed.
    """

    k: int
    count: int  # C(n, k), paths of this length
    share_norm: float
    share_norm_std: float
    share_proj: float
    share_proj_std: float
    norm: float  # ||part_k||
    norm_std: float


def path_table(splits: Sequence[PathSplit], boundary: int = 0) -> list[PathRow]:
    """Per-k rows at ``boundary`` (0: the embeddings' output), over one or more splits:
    mean and std (ddof=0) over the splits of each share and norm."""
    if not splits:
        raise ValueError("path_table needs at least one split")
    if any(isinstance(s.keys[0], tuple) for s in splits):
        raise ValueError("path_table reads per-k splits; this one is joint (split by (a, m))")
    n = splits[0].n
    sn = np.array([s.share_norm()[boundary] for s in splits])  # (S, n + 1)
    sp = np.array([s.share_proj()[boundary] for s in splits])  # (S, n + 1)
    nm = np.array([s.norms[boundary] for s in splits])  # (S, n + 1)
    return [
        PathRow(k, math.comb(n, k), sn[:, k].mean(), sn[:, k].std(), sp[:, k].mean(),
                sp[:, k].std(), nm[:, k].mean(), nm[:, k].std())
        for k in range(n + 1)
    ]  # fmt: skip


def paths_in_range(rows: Sequence[PathRow], rng: tuple[int, int]) -> int:
    """How many paths have a length k in ``rng`` = (lo, hi), both ends included."""
    lo, hi = rng
    return sum(r.count for r in rows if lo <= r.k <= hi)


# --------------------------------------------------------------------------- real models


def model_splits(
    model: GPT,
    ids: np.ndarray,
    seq: int = 64,
    batch: int = 4,
    seeds: Sequence[int] = (0,),
    *,
    joint: bool = False,
    tick: Tick | None = None,
) -> list[PathSplit]:
    """The split of ``model``'s loss gradient on windows of a text, one per seed, in float64.

    Seed s draws B windows of T + 1 tokens of ``ids`` (N,) exactly as ``resgrad flow
    --from-pretrained`` does (:func:`resgrad.lab.realflow.text_windows`). A float32 model is
    copied to float64 first, so that the parts sum to the gradient to 1e-12.

    Raises
    ------
    ValueError
        A ``seq`` longer than the model's context, or a text too short for it.
    """
    return _on_windows(model, ids, seq, batch, seeds,
                       lambda s, chain: split(chain, joint=joint, tick=tick))  # fmt: skip


def model_veit(
    model: GPT,
    ids: np.ndarray,
    seq: int,
    batch: int,
    seeds: Sequence[int],
    samples: int,
    sample_seed: int = 0,
    *,
    tick: Tick | None = None,
) -> list[VeitEstimate]:
    """Veit's sampled estimate (:func:`veit_sample`) on the windows of each seed, one chain
    at a time: the same batches as :func:`model_splits` with the same arguments."""

    def sample(s: int, chain: Chain) -> VeitEstimate:
        return veit_sample(chain, samples, sample_seed, tick=tick)  # one seed for every batch

    return _on_windows(model, ids, seq, batch, seeds, sample)


def _on_windows(
    model: GPT, ids: np.ndarray, seq: int, batch: int, seeds: Sequence[int], fn: Callable
) -> list:
    """``[fn(seed, chain) for seed in seeds]``: the chain is the model in float64 on that
    seed's windows of ``ids`` (N,), drawn as ``resgrad flow --from-pretrained`` draws
    them. One chain alive at a time: each is dropped before the next forward."""
    check_seq(model.cfg, seq)
    if model.dtype != np.float64:  # float32 parts could not sum to the gradient to 1e-12
        model = GPT.from_params(
            model.cfg, {k: v.astype(np.float64) for k, v in model.params.items()}
        )
    out = []
    for s in seeds:
        w = text_windows(ids, seq, batch, s)  # (B, T + 1)
        out.append(fn(s, gpt_chain(model, w[:, :-1], w[:, 1:])))  # inputs, targets: (B, T)
    return out


# --------------------------------------------------------------------------- the cost, first

# seconds of one branch VJP: a fixed cost of Python and NumPy calls, plus its float64 flops
# at FLOPS_PER_S (measured on one core: 1e-4 s at C=16, 2e-3 s at C=64 T=64 B=4, 2e-2 s at
# C=256; the lesson's C=16 tanh layer 1.5e-5 s). An order of magnitude, not a prediction.
GPT_VJP_OVERHEAD_S = 1e-4
LESSON_VJP_OVERHEAD_S = 2e-5
FLOPS_PER_S = 2e10


class Work(NamedTuple):
    """What a measurement will cost, estimated before it starts."""

    vjps: int  # branch VJPs in all: the split's and Veit's
    seconds: float  # an estimate: vjps x the seconds of one, plus each chain's forward


def _work(n: int, skips: bool, vjp_s: float, chain_s: float, chains: int, samples: int) -> Work:
    """``chains`` splits of n branches, each with ``samples`` Veit paths per k = 0..n."""
    per_split = n * (n + 1) // 2 if skips else n  # no skip: one part, one VJP a step
    per_veit = samples * n * (n + 1) // 2  # sum over k of samples x k branch VJPs
    vjps = chains * (per_split + per_veit)
    return Work(vjps, vjps * vjp_s + chains * chain_s)


def model_work(cfg, seq: int, batch: int, chains: int, samples: int = 0) -> Work:
    """The cost of ``chains`` splits of a GPT of config ``cfg`` on (batch, seq) windows
    (one per window seed, checkpoint and run), with ``samples`` Veit paths per k each.

    A branch VJP costs about 24 B T C^2 flops (the attention's 4 C^2 and the MLP's 8 C^2
    weights, two matmuls each in the backward, averaged over the two) plus 4 B T^2 C (the
    attention's scores); each chain's forward and ordinary backward about 2n of them plus
    the head's 6 B T V C.
    """
    B, T, C, V = batch, seq, cfg.n_embd, cfg.vocab_size
    n = 2 * cfg.n_layer
    vjp_s = GPT_VJP_OVERHEAD_S + (24 * B * T * C * C + 4 * B * T * T * C) / FLOPS_PER_S
    chain_s = 2 * n * vjp_s + 6 * B * T * V * C / FLOPS_PER_S
    return _work(n, cfg.variant != "none", vjp_s, chain_s, chains, samples)


def lesson_work(
    depth: int, width: int, batch: int, chains: int, samples: int = 0, residual: bool = True
) -> Work:
    """The cost of ``chains`` splits of the lesson's stack (one per bank seed), with
    ``samples`` Veit paths per k each: a branch VJP is two (B, C) x (C, C) matmuls."""
    vjp_s = LESSON_VJP_OVERHEAD_S + 4 * batch * width * width / FLOPS_PER_S
    return _work(depth, residual, vjp_s, 2 * depth * vjp_s, chains, samples)


def format_seconds(t: float) -> str:
    """``t`` seconds as e.g. ``'40 s'``, ``'7.5 min'``, ``'3.2 h'``, ``'12.0 days'``."""
    if t < 60:
        return f"{t:.0f} s"
    if t < 3600:
        return f"{t / 60:.1f} min"
    if t < 86400:
        return f"{t / 3600:.1f} h"
    return f"{t / 86400:,.1f} days"


def refuse_over_budget(seconds: float, budget: float, what: str, counts: str, more: str) -> None:
    """Refuse, in one line, a job estimated to take ``seconds``, longer than ``budget``: the
    one message of every estimated job (the splits here, :mod:`resgrad.lab.lesion`'s studies).

    The message names ``what``, the estimate and the ``counts`` it comes from, the budget,
    and ``more``: how to ask for more time (e.g. ``"pass --budget {seconds}"``, formatted
    with the budget it would take).

    Raises
    ------
    ValueError
    """
    if seconds > budget:
        need = math.ceil(seconds * 1.25)  # room for the estimate's error
        raise ValueError(
            f"{what} would take about {format_seconds(seconds)} ({counts}; an estimate), "
            f"more than the budget of {format_seconds(budget)}; " + more.format(seconds=need)
        )


def require_time(work: Work, budget: float, what: str, more: str) -> None:
    """Refuse, in one line, work estimated to take longer than ``budget`` seconds
    (:func:`refuse_over_budget`, counting its branch VJPs).

    Raises
    ------
    ValueError
    """
    refuse_over_budget(work.seconds, budget, what, f"{work.vjps:,} branch VJPs", more)


def work_bar(work: Work, progress: bool | None = None, desc: str = "paths"):
    """A tqdm bar over ``work.vjps`` on stderr, its description the estimate.

    ``progress`` None: shown on a terminal only, and only for work estimated longer than
    :data:`PROGRESS_AFTER_S`; True or False: always or never. Use it as a context manager
    and pass its ``update`` as the ``tick`` of the functions doing the work.
    """
    from tqdm.auto import tqdm

    if progress is None:
        disable = None if work.seconds > PROGRESS_AFTER_S else True  # None: on a terminal
    else:
        disable = not progress
    return tqdm(total=work.vjps, unit="VJP", unit_scale=True, dynamic_ncols=True, disable=disable,
                desc=f"{desc} (about {format_seconds(work.seconds)})")  # fmt: skip


# --------------------------------------------------------------------------- figures

HEAT_FLOOR = 1e-4  # the heatmap's colours start at this share; exact zeros are left blank


def _band(a: np.ndarray) -> dict:
    """(S, K) over seeds -> the mean line, and a min..max band where S > 1."""
    a = np.asarray(a, dtype=float)
    out = {"y": a.mean(axis=0)}
    if a.shape[0] > 1:
        out["lo"], out["hi"] = a.min(axis=0), a.max(axis=0)
    return out


def _line(ax, x, b: dict, label: str, **kw) -> None:
    (line,) = ax.plot(x, b["y"], label=label, **kw)
    if "lo" in b:
        ax.fill_between(x, b["lo"], b["hi"], color=line.get_color(), alpha=0.2, linewidth=0)


def path_figure(
    splits: Sequence[PathSplit],
    veits: Sequence[VeitEstimate] | None = None,
    title: str = "",
):
    """Veit et al.'s figure 6 for this model, and the share by (boundary i, k).

    Top row, at x_0: (a) C(n, k), the number of paths of each length; (b) the gradient
    magnitude per path: Veit's sampled mean ||path gradient|| (``veits``), or without it
    ||part_k|| / C(n, k), the norm of the mean path's gradient (the exact analogue, smaller:
    paths cancel); (c) the total by k: Veit's C(n, k) x mean beside the exact ||part_k||.
    Bottom row: the share of norm ``share_norm()`` by (i, k), mean over the seeds, with each
    boundary's 90% range outlined; beside it, with more than one seed, its std over them.
    Lines are the mean over the splits (seeds), with a min..max band where there are more.

    Returns
    -------
    matplotlib.figure.Figure
        ``axes[0..2]`` the panels (a)-(c), whose lines hold exactly the numbers described;
        ``axes[3]`` the heatmap (its image's data: the (L + 1, n + 1) mean share).
    """
    from matplotlib.colors import LogNorm
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import MaxNLocator

    from resgrad.plots import new_figure

    if not splits:
        raise ValueError("path_figure needs at least one split")
    if any(isinstance(s.keys[0], tuple) for s in splits):
        raise ValueError("path_figure draws per-k splits; this one is joint (split by (a, m))")
    n, S = splits[0].n, len(splits)
    if any(s.n != n or s.norms.shape != splits[0].norms.shape for s in splits):
        raise ValueError("path_figure needs splits of one model (the same n and boundaries)")
    if veits and any(v.n != n or v.ks != tuple(range(n + 1)) for v in veits):
        raise ValueError(f"path_figure needs Veit estimates of every k = 0..{n}")
    k = np.arange(n + 1)  # (K,)
    count = np.array([math.comb(n, j) for j in k], dtype=float)  # (K,)
    norms0 = np.array([s.norms[0] for s in splits])  # (S, K) ||part_k|| at x_0
    spread = f"mean over {S} seeds, band min..max" if S > 1 else "one seed"
    fig, axes = new_figure(ncols=3, nrows=2, width=14.0, height=8.4)
    ax_a, ax_b, ax_c = axes[:3]
    # (a) the distribution of path lengths: binomial
    ax_a.bar(k, count, color="0.6", label="C(n, k)")
    lo, hi = effective_range(np.mean([s.share_norm()[0] for s in splits], axis=0))
    ax_a.axvspan(lo - 0.5, hi + 0.5, color="C0", alpha=0.15,
                 label=f"90% of ||dL/dx_0|| (exact): k = {lo}..{hi}")  # fmt: skip
    if veits:
        vlo, vhi = effective_range(np.mean([v.total for v in veits], axis=0))
        ax_a.axvspan(vlo - 0.5, vhi + 0.5, ymax=0.06, color="C1", alpha=0.6,
                     label=f"90% of Veit's C(n, k) x mean: k = {vlo}..{vhi}")  # fmt: skip
    ax_a.legend(fontsize=8, loc="upper left")
    ax_a.set_title(f"(a) paths of length k: C({n}, k), {2**n:,} in all", fontsize=9, loc="left")
    ax_a.set_ylabel("number of paths")
    # (b) the gradient magnitude per path, at x_0
    if veits:
        mean = np.array([v.mean for v in veits])  # (S', K)
        _line(ax_b, k, _band(mean), f"Veit: sampled mean ||g_path||, {veits[0].samples}/k",
              marker="o", ms=3.5, color="C1")  # fmt: skip
        ax_b.set_title("(b) magnitude per path: sampled (Veit's protocol)", fontsize=9, loc="left")
    else:
        _line(ax_b, k, _band(norms0 / count), "exact ||part_k|| / C(n, k)", marker="s", ms=3.5,
              color="C0")  # fmt: skip
        ax_b.set_title("(b) per path: the mean path's gradient (exact, not sampled)",
                       fontsize=9, loc="left")  # fmt: skip
    ax_b.set_ylabel("gradient magnitude at x_0, per path")
    # (c) the total by k: Veit's sum of magnitudes beside the exact vector sum
    if veits:
        total = np.array([v.total for v in veits])  # (S', K)
        _line(ax_c, k, _band(total), "Veit: C(n, k) x mean (sum of magnitudes)", marker="o",
              ms=3.5, color="C1")  # fmt: skip
    _line(ax_c, k, _band(norms0), "exact: ||part_k|| (vector sum)", marker="s", ms=3.5,
          color="C0")  # fmt: skip
    ax_c.set_title("(c) total gradient magnitude by path length", fontsize=9, loc="left")
    ax_c.set_ylabel("gradient magnitude at x_0")
    for ax in (ax_b, ax_c):
        ax.set_yscale("log", nonpositive="mask")
        ax.legend(fontsize=8, loc="best")
    for ax in (ax_a, ax_b, ax_c):
        ax.set_xlabel("path length k (branches passed)")
        ax.set_xlim(-0.7, n + 0.7)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
    # the heatmap: rows the boundaries x_0 .. x_L, columns k
    for ax in axes[3:]:
        fig.delaxes(ax)
    sh = np.array([s.share_norm() for s in splits])  # (S, L + 1, K)
    mean = sh.mean(axis=0)  # (L + 1, K)
    nb = mean.shape[0]
    ax_h = fig.add_subplot(2, 3, (4, 5) if S > 1 else (4, 6))
    image = np.ma.masked_where(mean <= 0, np.maximum(mean, HEAT_FLOOR))  # (L + 1, K)
    im = ax_h.imshow(image, aspect="auto", origin="lower", cmap="viridis", interpolation="nearest",
                     norm=LogNorm(vmin=HEAT_FLOOR, vmax=1.0))  # fmt: skip
    fig.colorbar(im, ax=ax_h, pad=0.01, label="share of the norm (log)")
    for i in range(nb):
        lo, hi = effective_range(mean[i])
        ax_h.add_patch(Rectangle((lo - 0.5, i - 0.5), hi - lo + 1, 1, fill=False, lw=0.9,
                                 edgecolor="white"))  # fmt: skip
    ax_h.set_title(f"(d) share of ||dL/dx_i|| by path length, mean over {S} seed(s); white "
                   "outline: the 90% range; blank: no path", fontsize=9, loc="left")  # fmt: skip
    ax_h.set_xlabel("path length k")
    x0 = "the stack's input" if splits[0].label.startswith("lesson:") else "the embeddings' output"
    ax_h.set_ylabel(f"boundary i (x_0: {x0})")
    ax_h.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_h.yaxis.set_major_locator(MaxNLocator(integer=True))
    if S > 1:
        ax_s = fig.add_subplot(2, 3, 6)
        std = np.ma.masked_where(mean <= 0, sh.std(axis=0))  # (L + 1, K)
        im = ax_s.imshow(std, aspect="auto", origin="lower", cmap="magma", interpolation="nearest")
        fig.colorbar(im, ax=ax_s, pad=0.01)
        ax_s.set_title(f"(e) its std over the {S} seeds", fontsize=9, loc="left")
        ax_s.set_xlabel("path length k")
        ax_s.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax_s.yaxis.set_major_locator(MaxNLocator(integer=True))
    head = f"Gradient paths: {title}; " if title else "Gradient paths: "
    fig.suptitle(head + f"n = {n} branches; top row at x_0, {spread}", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / fig.get_figheight()))  # room for the suptitle
    return fig


def save_path_figure(
    path,
    splits: Sequence[PathSplit],
    veits: Sequence[VeitEstimate] | None = None,
    title: str = "",
) -> None:
    """Draw :func:`path_figure` and write it to ``path`` atomically, PNG or SVG by extension
    (a bad extension is refused before anything is drawn)."""
    from resgrad.plots import plot_format, save_figure

    plot_format(path)
    save_figure(path_figure(splits, veits, title), path)


# --------------------------------------------------------------------------- through training


class RunModel(NamedTuple):
    """What runs (or one run's checkpoints) must share for their splits to be compared:
    the model's scheme and shape, its vocabulary, and the token ids of the text the
    windows are drawn from (the same windows are the same token ids)."""

    scheme: str  # GPTConfig.variant: pre-ln, post-ln, ...
    depth: int  # n_layer
    width: int  # n_embd
    heads: int  # n_head
    vocabulary: str  # described: "20 characters 'abc...'", "bpe of 512 tokens (sha256 ...)"
    tokens: str  # the text under that vocabulary: "1,000 tokens, sha256 0123456789ab"


FIELD_NAMES = {
    "scheme": "scheme", "depth": "depth (n_layer)", "width": "width (n_embd)",
    "heads": "heads (n_head)", "vocabulary": "vocabulary", "tokens": "the text's token ids",
}  # fmt: skip


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


def run_model(cfg, ckpt, ids: np.ndarray | None) -> RunModel:
    """The :class:`RunModel` of a checkpoint (its GPTConfig ``cfg`` and its
    :class:`~resgrad.formats.checkpoint.Checkpoint`) and of the text's token ``ids`` (N,);
    ``tokens`` is ``""`` without them (the model compared before the text is encoded)."""
    kind = "char" if ckpt.tokenizer is None else str(ckpt.tokenizer.get("kind"))
    if kind == "char":
        v = ckpt.vocab
        vocab = (f"{len(v)} characters {v!r}" if len(v) <= 40
                 else f"{len(v)} characters (sha256 {_sha(v.encode())})")  # fmt: skip
    else:
        record = json.dumps(ckpt.tokenizer, sort_keys=True).encode()
        vocab = f"{kind} of {cfg.vocab_size} tokens (sha256 {_sha(record)})"
    tokens = ""
    if ids is not None:
        ids = np.ascontiguousarray(ids, dtype=np.int64)  # (N,)
        tokens = f"{len(ids):,} tokens, sha256 {_sha(ids.tobytes())}"
    return RunModel(cfg.variant, cfg.n_layer, cfg.n_embd, cfg.n_head, vocab, tokens)


def check_comparable(
    models: Sequence[tuple[str, RunModel]], kind: str = "run", why: str = ""
) -> None:
    """Refuse, in one line, ``(name, RunModel)`` pairs that differ from the first in any field.

    The message names the ``kind`` ("run", "checkpoint") and name that differs, the
    field, both values, and ``why`` they must not differ (by default: only runs of one
    model on one text are compared).

    Raises
    ------
    ValueError
    """
    if not models:
        return
    name0, m0 = models[0]
    for name, m in models[1:]:
        for field in RunModel._fields:
            a, b = getattr(m0, field), getattr(m, field)
            if a != b:
                raise ValueError(
                    f"{kind} {name!r} has {FIELD_NAMES[field]} {b}, {kind} {name0!r} has {a}: "
                    + (why or f"only {kind}s of one model on one text are compared")
                )


class RunPlan(NamedTuple):
    """A run directory read before any split: what it kept and its first checkpoint's model."""

    run_dir: str
    kept: list[tuple[int, str]]  # (iteration, path), by iteration
    cfg: Any  # the GPTConfig of its first kept checkpoint
    model: RunModel


def _kept(run_dir: str) -> list[tuple[int, str]]:
    """The checkpoints a run directory kept; refused in one line if none."""
    from resgrad.train.rundir import kept_checkpoints

    if not os.path.isdir(run_dir):
        raise NotADirectoryError(f"{run_dir!r} is not a directory (expected a training run's)")
    kept = kept_checkpoints(run_dir)
    if not kept:
        raise ValueError(f"{run_dir!r} keeps no checkpoint per step (ckpt-<iter>.ckpt); "
                         "train it with --keep-every N")  # fmt: skip
    return kept


def plan_runs(run_dirs: Sequence[str], text: str | None = None) -> list[RunPlan]:
    """Read each run's first kept checkpoint (not its splits): what
    :func:`run_checkpoint_paths` of each, and :func:`across_runs` of them all, will do.

    For the checks a caller makes before the work (the model's size, the time it takes)
    and the one made here: runs of another scheme, depth, width, heads, vocabulary or
    text tokens than the first are refused before any split (:func:`check_comparable`).

    Raises
    ------
    ValueError, OSError
        As :func:`run_checkpoint_paths`; or runs that cannot be compared.
    """
    from resgrad.train.data import default_corpus
    from resgrad.train.sample import load_model

    text = default_corpus() if text is None else text
    plans: list[RunPlan] = []
    for d in run_dirs:
        kept = _kept(d)
        model, tok, ckpt = load_model(kept[0][1])
        # the model and its vocabulary first: another vocabulary may not encode the text
        named = [(p.run_dir, p.model._replace(tokens="")) for p in plans[:1]]
        check_comparable([*named, (d, run_model(model.cfg, ckpt, None))], "run")
        plans.append(RunPlan(d, kept, model.cfg, run_model(model.cfg, ckpt, tok.encode(text))))
        check_comparable([(p.run_dir, p.model) for p in (plans[0], plans[-1])], "run")
        del model
    return plans


class CheckpointPaths(NamedTuple):
    """The split at x_0 of one checkpoint a run kept, on the same windows as every other."""

    iteration: int
    path: str
    splits: list[PathSplit]  # one per window seed
    rows: list[PathRow]  # path_table(splits): per k, mean and std over the seeds
    range90: tuple[int, int]  # effective_range of the mean share of the norm
    model: RunModel  # what another run must share to be compared with this one

    @property
    def mean_k(self) -> float:
        """The mean path length, weighted by the share of the norm: sum_k k x share_k."""
        return float(sum(r.k * r.share_norm for r in self.rows))


def run_checkpoint_paths(
    run_dir: str,
    text: str | None = None,
    seq: int = 64,
    batch: int = 4,
    seeds: Sequence[int] = (0,),
    *,
    mass: float = 0.9,
    fits: Callable[[Any], None] | None = None,
    tick: Tick | None = None,
) -> list[CheckpointPaths]:
    """The split at x_0 at every checkpoint ``resgrad train --keep-every`` kept in ``run_dir``.

    Every checkpoint is measured on the same windows (seed s draws them as
    :func:`model_splits` does, from the same token ids), so the steps differ only in the
    weights: each one's result equals :func:`model_splits` on that checkpoint alone.

    Parameters
    ----------
    run_dir : str
        A run directory holding ``ckpt-<iter>.ckpt`` files
        (:func:`resgrad.train.rundir.kept_checkpoints`).
    text : str, optional
        The text the windows come from; the built-in corpus by default.
    seq, batch, seeds
        T, B, and one batch of windows per seed, as :func:`model_splits`.
    mass : float
        The share the effective range holds (0.9: the 90% range).
    fits : callable, optional
        Called with each checkpoint's GPTConfig before its split; it raises to refuse one
        that would not fit in memory, as the CLI's check does.
    tick : callable, optional
        As :func:`split`'s.

    Returns
    -------
    list of CheckpointPaths
        By iteration.

    Raises
    ------
    ValueError
        ``run_dir`` keeps no checkpoint per step, or a checkpoint's scheme, shape or
        vocabulary differs from the first's (:func:`check_comparable`).
    OSError
        ``run_dir`` is not a directory.
    """
    from resgrad.train.data import default_corpus
    from resgrad.train.sample import load_model

    kept = _kept(run_dir)
    text = default_corpus() if text is None else text
    out: list[CheckpointPaths] = []
    ids, first = None, None
    for it, path in kept:
        model, tok, ckpt = load_model(path)
        if fits is not None:
            fits(model.cfg)
        if ids is None:  # one run, one tokenizer: the text is encoded once
            ids = tok.encode(text)
        rm = run_model(model.cfg, ckpt, ids)
        if first is None:
            first = (path, rm)
        check_comparable([first, (path, rm)], "checkpoint", "not one run")
        splits = model_splits(model, ids, seq, batch, seeds, tick=tick)
        rows = path_table(splits)
        rng = effective_range([r.share_norm for r in rows], mass)
        out.append(CheckpointPaths(it, path, splits, rows, rng, rm))
    return out


class RunsRow(NamedTuple):
    """One iteration kept by every run of a comparison: the spread over the runs."""

    iteration: int
    runs: int  # R, the training runs (seeds) averaged
    share0: float  # k = 0 share of the norm at x_0: mean over the runs
    share0_std: float  # its std over the runs (ddof=1; 0 for one run)
    mean_k: float  # CheckpointPaths.mean_k, mean over the runs
    mean_k_std: float
    ranges: tuple[tuple[int, int], ...]  # each run's 90% range, in the runs' order


def across_runs(results: Sequence[Sequence[CheckpointPaths]]) -> list[RunsRow]:
    """:func:`run_checkpoint_paths` of several training runs (e.g. seeds), side by side.

    Only the iterations every run kept are compared, each run's own checkpoint of that
    iteration; each value is the mean and std (ddof=1; 0 for one run) over the runs of that
    run's mean over its window seeds.

    Raises
    ------
    ValueError
        No run, runs that differ in scheme, shape, vocabulary or text tokens
        (:func:`check_comparable`), or no iteration kept by every run.
    """
    if not results:
        raise ValueError("no run to compare")
    check_comparable([(os.path.dirname(r[0].path), r[0].model) for r in results], "run")
    by_run = [{c.iteration: c for c in r} for r in results]
    common = sorted(set.intersection(*(set(b) for b in by_run)))
    if not common:
        raise ValueError("the runs kept no iteration in common; train them with the same "
                         "--keep-every")  # fmt: skip
    ddof = 1 if len(results) > 1 else 0
    out = []
    for it in common:
        cs = [b[it] for b in by_run]
        share0 = np.array([c.rows[0].share_norm for c in cs])  # (R,)
        mean_k = np.array([c.mean_k for c in cs])  # (R,)
        out.append(RunsRow(it, len(cs), float(share0.mean()), float(share0.std(ddof=ddof)),
                           float(mean_k.mean()), float(mean_k.std(ddof=ddof)),
                           tuple(c.range90 for c in cs)))  # fmt: skip
    return out
