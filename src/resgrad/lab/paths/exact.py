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

**Schemes.** pre-ln ``x + f(ln(x))``, residual ``x + f(x)``, rezero ``x + alpha f(x)`` and
ln-scaling ``x + f(s_l ln(x))`` (``s_l = l^-p``, a constant of block l) have a true identity
skip: k = 0 is the gradient of the loss's head carried unchanged.
In post-ln ``ln(x + f(x))`` and DeepNorm ``ln(alpha x + f(x))`` the skip passes through
each block's LayerNorms (and DeepNorm's alpha): the split is still by the number of
*branches* a path takes, and the "identity path" k = 0 means the path through every
LayerNorm's Jacobian (times alpha) and through no attention or MLP. ``none`` ``f(ln(x))``
has no skip: every gradient at x_i has k = 2(L - i), all of it at k = 2L at the embeddings.

**Parameters.** A parameter inside a branch (its attention or MLP weights, the pre-ln or
ln-scaling LayerNorm before it, rezero's alpha at its output) gets the k of the gradient
*entering that branch* from above: the number of branches between the loss and the branch. A
parameter on the trunk (post-ln's and DeepNorm's LayerNorms, ln_f, the LM head) gets the k
of the gradient reaching it. The tied ``wte`` gets the head's gradient at k = 0 plus the
embedding lookup's gradient split as the stream at x_0 is.

**Cost, before the work.** :mod:`resgrad.lab.study` counts the branch VJPs a measurement
will do (the split's n(n + 1)/2 per chain, Veit's ``samples`` x n(n + 1)/2), estimates their
seconds, refuses work over a budget in one line and shows its progress on a terminal (every
function doing it here takes a ``tick``). Runs compared through training
(:mod:`resgrad.lab.paths`) must share their scheme, shape, vocabulary and text tokens.

**Modules.** :mod:`resgrad.lab.paths.chains` unrolls a model's backward into a
:class:`~resgrad.lab.paths.chains.Chain`; this module splits it and reads the split;
:mod:`resgrad.lab.paths.veit` follows single paths instead (Veit's protocol);
:mod:`resgrad.lab.paths.figs` draws the split and :mod:`resgrad.lab.paths.study` follows it
through training.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from resgrad.lab.paths.chains import Chain, _add, _Rows, _sq_and_dot, gpt_chain
from resgrad.lab.study.refusals import (
    BAD_SHARES,
    JOINT_SPLIT,
    MASS_OUT_OF_RANGE,
    NO_SPLIT,
    SPLIT_TOO_LARGE,
)
from resgrad.lab.study.windows import check_seq, text_windows
from resgrad.nn.model import GPT

__all__ = [
    "PathRow",
    "PathSplit",
    "effective_range",
    "model_splits",
    "path_table",
    "paths_in_range",
    "split",
    "check_branches",
]

MAX_SPLIT_BRANCHES = 4096  # split's n(n + 1)/2 VJPs: 8.4 million at this n, minutes at C=16

Tick = Callable[[int], None]  # told the number of branch VJPs just done (a progress bar's update)


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
    # per sublayer j, bottom up: ||what its branch's VJP sends down|| and ||what its skip
    # does||, each summed over the keys (by linearity, of the whole gradient entering it)
    branch_norms: np.ndarray | None = None  # (n,)
    skip_norms: np.ndarray | None = None  # (n,)

    def share_norm(self) -> np.ndarray:
        """(L + 1, K) ||part|| / sum of ||part|| over keys: Veit's kind of share."""
        total = self.norms.sum(axis=1, keepdims=True)  # (L + 1, 1)
        return self.norms / np.where(total > 0, total, 1.0)

    def share_proj(self) -> np.ndarray:
        """(L + 1, K) <part, g> / ||g||^2: the shares of the gradient itself; they sum to 1."""
        sq = np.square(self.full_norms)[:, None]  # (L + 1, 1)
        return self.dots / np.where(sq > 0, sq, 1.0)

    def branch_share(self) -> np.ndarray:
        """(n,) per sublayer, bottom up: the share of the gradient below it that came through
        its branch, ||branch VJP|| / (||branch VJP|| + ||skip||) (0 where both are 0; 1 in
        ``none``, which has no skip). Near 0: the sublayer is passed along its identity, as
        the curse of depth says of deep pre-LN blocks."""
        b, sk = self.branch_norms, self.skip_norms  # (n,) each
        total = b + sk
        return np.divide(b, total, out=np.zeros_like(b), where=total > 0)


def check_branches(n: int) -> None:
    """Refuse, before any work, a split of more than :data:`MAX_SPLIT_BRANCHES` branches:
    its n(n + 1)/2 VJPs would take hours.

    Raises
    ------
    ValueError
    """
    if n > MAX_SPLIT_BRANCHES:
        raise SPLIT_TOO_LARGE(n=n, vjps=n * (n + 1) // 2, most=MAX_SPLIT_BRANCHES)


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
    check_branches(n)
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
    branch_norms, skip_norms = np.zeros(n), np.zeros(n)
    for j in reversed(range(n)):
        s, out = chain.steps[j], {}
        through = along = None  # (B, T, C) the branch's and the skip's, summed over keys
        for key, d in D.items():
            g: dict = {}
            t = d
            if s.trunk is not None:
                t, g = s.trunk(d)  # post-ln, deepnorm: the norm after the sum, at this key
            if s.skip is not None:
                sk = s.skip(t)
                out[key] = _add(out.get(key), sk)  # the skip keeps k
                along = _add(along, sk)
            dx, gb = s.branch(t)  # the branch's VJP ...
            vjps += 1
            up = _bump(key, s.kind)  # ... moves it one branch further from the loss
            out[up] = _add(out.get(up), dx)
            through = _add(through, dx)
            add_params(j, key, {**g, **gb})  # parameters in the branch: the entering key
        branch_norms[j] = float(np.linalg.norm(through)) if through is not None else 0.0
        skip_norms[j] = float(np.linalg.norm(along)) if along is not None else 0.0
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
        vjps=vjps, parts=parts_kept, param_parts=p_kept, branch_norms=branch_norms,
        skip_norms=skip_norms,
    )  # fmt: skip


# --------------------------------------------------------------------------- reading it


def effective_range(shares: Sequence[float], mass: float = 0.9) -> tuple[int, int]:
    """The shortest k-range [lo, hi] whose shares sum to at least ``mass`` (ties: lowest lo).

    Veit et al. found 5-17 of 54 for a ResNet's gradient by magnitude.
    """
    s = np.asarray(shares, dtype=float)  # (K,)
    if s.ndim != 1 or s.size == 0 or (s < 0).any() or not np.isfinite(s).all():
        raise BAD_SHARES()
    if not 0.0 < mass <= 1.0:
        raise MASS_OUT_OF_RANGE(mass=mass)
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
        raise NO_SPLIT(function="path_table")
    if any(isinstance(s.keys[0], tuple) for s in splits):
        raise JOINT_SPLIT(function="path_table", does="reads")
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
    --from-pretrained`` does (:func:`resgrad.lab.study.windows.text_windows`). A float32 model is
    copied to float64 first, so that the parts sum to the gradient to 1e-12.

    Raises
    ------
    ValueError
        A ``seq`` longer than the model's context, or a text too short for it.
    """
    return _on_windows(model, ids, seq, batch, seeds,
                       lambda s, chain: split(chain, joint=joint, tick=tick))  # fmt: skip


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
