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

**Cost, before the work.** :mod:`resgrad.lab.study` counts the branch VJPs a measurement
will do (the split's n(n + 1)/2 per chain, Veit's ``samples`` x n(n + 1)/2), estimates their
seconds, refuses work over a budget in one line and shows its progress on a terminal (every
function doing it here takes a ``tick``). Runs compared through training
(:mod:`resgrad.lab.paths`) must share their scheme, shape, vocabulary and text tokens.

**Modules.** :mod:`resgrad.lab.paths` unrolls a model's backward into a
:class:`~resgrad.lab.paths.chains.Chain`; this module splits it and reads the split;
:mod:`resgrad.lab.paths` draws it and :mod:`resgrad.lab.paths` follows it through
training.

**Veit's protocol** (their section 5, figure 6) samples single paths instead:
:func:`veit_sample` draws k of the n branches, backpropagates through exactly those
branches and the skip everywhere else, and records the gradient magnitude at x_0; their
figure 6(c) quantity is C(n, k) x the mean magnitude. That is a sum of magnitudes: it
counts every path as if its gradient added to the others in phase. The exact split
:func:`split` sums the paths' gradient *vectors*, with their cancellation, so its norms
are smaller and its shares say where the gradient that reaches x_0 really comes from.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from resgrad.lab.paths.chains import Chain, _add, _Rows, _sq_and_dot, gpt_chain
from resgrad.lab.study.refusals import (
    BAD_SHARES,
    BRANCH_NOT_IN_CHAIN,
    JOINT_SPLIT,
    MASS_OUT_OF_RANGE,
    NO_SPLIT,
    PATH_LENGTH_OUT_OF_RANGE,
    SAMPLES_NOT_POSITIVE,
    SPLIT_TOO_LARGE,
    TOO_MANY_PATHS,
)
from resgrad.lab.study.windows import check_seq, text_windows
from resgrad.nn.model import GPT

__all__ = [
    "PathRow",
    "PathSplit",
    "VeitEstimate",
    "effective_range",
    "model_splits",
    "model_veit",
    "path_gradient",
    "path_table",
    "paths_in_range",
    "split",
    "veit_bytes",
    "veit_exact",
    "veit_sample",
]

MAX_EXACT_PATHS = 1 << 16  # veit_exact enumerates every path: refuse more than this
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
        raise SPLIT_TOO_LARGE(n=n, vjps=n * (n + 1) // 2, most=MAX_SPLIT_BRANCHES)
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
        raise BRANCH_NOT_IN_CHAIN(branch=bad[0], last=chain.n - 1)
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
    if not _exists(chain, S):
        return np.zeros_like(chain.dtop)  # no skip where it leaves a branch: no such path
    d = chain.dtop
    for j in reversed(range(chain.n)):
        s = chain.steps[j]
        if s.trunk is not None:
            d, _ = s.trunk(d)
        if j in S:
            d, _ = s.branch(d)  # through the branch
        else:
            d = s.skip(d)  # along the skip
    return d


def _exists(chain: Chain, S: frozenset) -> bool:
    """Whether the path through exactly the branches ``S`` exists: every step it does not
    take through its branch has a skip (in ``none`` and a plain stack, only k = n does)."""
    return all(j in S or s.skip is not None for j, s in enumerate(chain.steps))


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
            raise PATH_LENGTH_OUT_OF_RANGE(k=k, n=chain.n)
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
    each sample with the branch VJPs it took: its k, or 0 for a path that does not exist.
    """
    if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or samples < 1:
        raise SAMPLES_NOT_POSITIVE(samples=samples)
    ks = _ks(chain, ks)
    mean, std = np.zeros(len(ks)), np.zeros(len(ks))
    mags = np.empty(int(samples))  # (samples,) one k at a time
    for j, k in enumerate(ks):
        rng = np.random.default_rng([seed, k])  # its own stream: the other ks do not move it
        for i in range(samples):
            S = rng.choice(chain.n, size=k, replace=False)  # (k,) distinct branches
            mags[i] = np.linalg.norm(path_gradient(chain, S))
            if tick is not None:  # a path that does not exist took no VJP
                tick(k if _exists(chain, _branch_set(chain, S)) else 0)
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
        raise TOO_MANY_PATHS(paths=paths, most=MAX_EXACT_PATHS)
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
