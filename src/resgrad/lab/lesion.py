"""Lesion study: delete, swap and reorder blocks at test time, forward passes only.

Legend: B = batch, T = time, C = channels, V = vocab, L = blocks (layers of the lesson's
stack), S = window seeds (bank seeds for the lesson), M = metrics, N = rows (B*T), K =
random sets of one k.

If a residual network is an ensemble of many short paths (Veit, Wilber, Belongie,
"Residual Networks Behave Like Ensembles of Relatively Shallow Networks", arXiv:1605.06431,
2016, section 4), removing one block at test time should barely hurt it, while a network
without ``+ x`` should collapse. Lad, Lee, Gurnee and Tegmark ("The Remarkable Robustness
of LLMs: Stages of Inference?", arXiv:2406.19384, 2024) asked the same of GPT-2. This module
does their interventions on any resgrad GPT, and on the lesson's tanh stack.

**What "delete" means.** A deleted sublayer branch (an attention or an MLP) contributes
nothing, and what is left of its step stays:

=============  ================================  =======================================
scheme         one step, x -> out                 the step with its branch deleted
=============  ================================  =======================================
``pre-ln``     x + f(ln(x))                       x        (the skip carries x past it)
``residual``   x + f(x)                           x
``rezero``     x + alpha f(x)                     x
``post-ln``    ln(x + f(x))                       ln(x)    (the LayerNorm after the sum stays)
``deepnorm``   ln(alpha x + f(x))                 ln(alpha x)   (and DeepNet's alpha too)
``none``       f(ln(x))                           x        (no skip: the step becomes the
                                                            identity)
=============  ================================  =======================================

Deleting block i deletes both of its branches; in pre-ln, residual and rezero that is the
identity, as transformers' model with module i taken out of ``transformer.h``. In ``none``
the block is replaced by the identity: the plain network's experiment. In the lesson's
stack ``x + tanh(x W)`` (or ``tanh(x W)`` without ``+ x``) a deleted layer passes x on.
A swap runs block j's weights at position i and block i's at j; nothing else moves.

**Interventions** (:data:`KINDS`): ``attn`` and ``mlp`` delete one branch, ``block`` one
block, ``delete`` k random blocks (Veit's figure 5a), ``swap`` adjacent blocks i and i + 1
(Lad et al.), ``pairs`` k random disjoint pairs of blocks swapped (Veit's figure 5b). A
random kind draws N sets of each k from ``np.random.default_rng([seed, k, kind])``, or
takes every set where there are no more than N.

**Metrics** (:data:`METRICS`), on B windows of T + 1 tokens drawn by seed exactly as
``resgrad flow`` and ``resgrad paths`` draw them (:func:`resgrad.lab.realflow.text_windows`),
averaged over the B*T predictions: ``ce`` the mean cross-entropy, ``dce`` its change from
the intact model, ``agree`` top-1 agreement with the intact model (Lad et al.'s accuracy
retained), ``acc`` top-1 accuracy against the true next token, ``kl`` KL(intact ||
lesioned) of the next-token distributions. The lesson's stack has no text: its metric
(:data:`LESSON_METRICS`) is ``change`` = ||y' - y|| / ||y||, the relative change of the
stack's output. Each is a mean and a sample standard deviation (ddof 1; 0 from one value)
over the window seeds; a random kind's over its K sets, each set averaged over the seeds.

**Fast.** Forward passes only. The intact stream x_0 .. x_L is computed once per batch;
an intervention whose first changed position is p starts from the intact x_p and runs
only blocks p .. L-1 (the prefix below it is the same for every intervention there).
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from resgrad.lab.lesson import StackConfig, make_bank
from resgrad.lab.paths import (
    FLOPS_PER_S,
    PROGRESS_AFTER_S,
    RunModel,
    check_comparable,
    format_seconds,
    plan_runs,
    refuse_over_budget,
    run_model,
)
from resgrad.lab.realflow import check_seq, text_windows
from resgrad.nn.blocks import block_alpha, block_forward, scheme_forward
from resgrad.nn.layers import (
    ATTN_KEYS,
    MLP_KEYS,
    attention_forward,
    dropout_forward,
    embedding_forward,
    layernorm_forward,
    mlp_forward,
)
from resgrad.nn.model import GPT

__all__ = [
    "KINDS",
    "LESSON_KINDS",
    "LESSON_METRICS",
    "METRICS",
    "CheckpointLesions",
    "Cost",
    "Lesion",
    "LesionRow",
    "StudyResult",
    "Summary",
    "across_checkpoints",
    "across_runs",
    "delete_blocks",
    "delete_branch",
    "deletion_sets",
    "describe_model",
    "intact",
    "lesion_bytes",
    "lesion_figure",
    "lesioned_logits",
    "lesson_cost",
    "lesson_study",
    "metrics",
    "model_cost",
    "model_study",
    "pair_sets",
    "plan",
    "progress_bar",
    "reference",
    "require_time",
    "row_keys",
    "rows",
    "run_checkpoint_lesions",
    "save_lesion_figure",
    "summary",
    "swap_blocks",
    "title",
]

KINDS = ("attn", "mlp", "block", "delete", "swap", "pairs")  # every intervention, in order
LESSON_KINDS = ("block", "delete", "swap", "pairs")  # the lesson's stack: one branch a layer
RANDOM = ("delete", "pairs")  # N random sets per k
METRICS = ("ce", "dce", "agree", "acc", "kl")  # a model's, on text
LESSON_METRICS = ("change",)  # the lesson's stack: ||y' - y|| / ||y||
MAX_SAMPLES = 10_000  # N, random sets per k
MAX_LESIONS = 100_000  # interventions in one plan (each a few L-long tuples)
MAX_SEED = 2**32  # seeds are in [0, 2**32), as numpy's
# seconds of one block's forward: a fixed cost of Python and NumPy calls plus its flops at
# paths.FLOPS_PER_S (an order of magnitude, as paths' estimate; the lesson's layer: the cost)
BLOCK_OVERHEAD_S = 2e-4
LESSON_LAYER_S = 1e-5

Tick = Callable[[int], None]  # told the lesioned passes just done (a progress bar's update)


# --------------------------------------------------------------------------- interventions


@dataclass(frozen=True)
class Lesion:
    """One intervention on an L-block stack, position by position.

    ``order[p]`` is the block whose weights run at position p (the identity order: none
    moved); ``attn[p]`` and ``mlp[p]`` whether position p keeps that branch (the lesson's
    stack has one branch a layer: ``attn[p] == mlp[p]``). ``kind`` is ``"intact"`` or one
    of :data:`KINDS`; ``k`` the blocks deleted or pairs swapped; ``layer`` the block of a
    single intervention (the first of a swapped pair), -1 for a random set.
    """

    kind: str
    order: tuple[int, ...]
    attn: tuple[bool, ...]
    mlp: tuple[bool, ...]
    k: int = 0
    layer: int = -1

    @property
    def L(self) -> int:
        return len(self.order)

    @property
    def first(self) -> int:
        """The first position that differs from the intact stack (L: none does)."""
        for p in range(self.L):
            if self.order[p] != p or not self.attn[p] or not self.mlp[p]:
                return p
        return self.L

    @property
    def name(self) -> str:
        """``intact``, ``attn 3``, ``block 3``, ``swap 3,4``, ``delete {1,5}``,
        ``pairs (1,5)(2,7)``."""
        if self.kind == "intact":
            return "intact"
        if self.kind in ("attn", "mlp", "block"):
            return f"{self.kind} {self.layer}"
        if self.kind == "swap":
            return f"swap {self.layer},{self.layer + 1}"
        if self.kind == "delete":
            gone = [p for p in range(self.L) if not (self.attn[p] or self.mlp[p])]
            return "delete {" + ",".join(map(str, gone)) + "}"
        moved = sorted({(min(p, q), max(p, q)) for p, q in enumerate(self.order) if p != q})
        return "pairs " + "".join(f"({a},{b})" for a, b in moved)


def _check_block(L: int, i: object, what: str = "block") -> int:
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < L:
        raise ValueError(f"{what} {i!r} does not exist: the model has blocks 0..{L - 1}")
    return int(i)


def _check_L(L: object) -> int:
    if isinstance(L, bool) or not isinstance(L, (int, np.integer)) or L < 1:
        raise ValueError(f"L must be a positive integer, got {L!r}")
    return int(L)


def intact(L: int) -> Lesion:
    """The stack as it is: nothing deleted, nothing moved."""
    L = _check_L(L)
    return Lesion("intact", tuple(range(L)), (True,) * L, (True,) * L)


def delete_branch(L: int, i: int, branch: str) -> Lesion:
    """Block i's attention (``branch="attn"``) or MLP (``"mlp"``) contributes nothing."""
    L = _check_L(L)
    i = _check_block(L, i)
    if branch not in ("attn", "mlp"):
        raise ValueError(f"unknown branch {branch!r}; expected attn or mlp")
    keep = tuple(p != i for p in range(L))
    on = (True,) * L
    attn, mlp = (keep, on) if branch == "attn" else (on, keep)
    return Lesion(branch, tuple(range(L)), attn, mlp, 1, i)


def delete_blocks(L: int, blocks: Iterable[int], kind: str = "delete") -> Lesion:
    """Every block in ``blocks`` deleted (both of its branches); ``kind`` ``"block"`` for
    one named block, ``"delete"`` for a set."""
    L = _check_L(L)
    gone = sorted({_check_block(L, i) for i in blocks})
    if not gone:
        raise ValueError("delete_blocks needs at least one block")
    keep = tuple(p not in gone for p in range(L))
    layer = gone[0] if kind == "block" else -1
    return Lesion(kind, tuple(range(L)), keep, keep, len(gone), layer)


def swap_blocks(L: int, pairs: Iterable[tuple[int, int]], kind: str = "pairs") -> Lesion:
    """Each pair (i, j) of blocks trades places: block j's weights run at position i and
    block i's at j. The pairs must be disjoint; ``kind`` ``"swap"`` for one adjacent pair."""
    L = _check_L(L)
    order = list(range(L))
    seen: set[int] = set()
    pairs = [(_check_block(L, i), _check_block(L, j)) for i, j in pairs]
    for i, j in pairs:
        if i == j or i in seen or j in seen:
            raise ValueError(f"swapped pairs must be disjoint pairs of two blocks; got {pairs}")
        seen.update((i, j))
        order[i], order[j] = order[j], order[i]
    if not pairs:
        raise ValueError("swap_blocks needs at least one pair")
    layer = min(pairs[0]) if kind == "swap" else -1
    return Lesion(kind, tuple(order), (True,) * L, (True,) * L, len(pairs), layer)


def _comb_capped(n: int, k: int, cap: int) -> int:
    """min(C(n, k), cap + 1), without computing a huge C(n, k) (a deep stack's)."""
    k = min(k, n - k)
    c = 1
    for j in range(1, k + 1):
        c = c * (n - k + j) // j  # C(n - k + j, j), exact at every step
        if c > cap:
            return cap + 1
    return c


def deletion_sets(L: int, k: int, samples: int, seed: int = 0) -> list[tuple[int, ...]]:
    """The sets of k blocks to delete: every one of the C(L, k) where that is at most
    ``samples``, else ``samples`` sets drawn from ``default_rng([seed, k, 0])``."""
    if _comb_capped(L, k, samples) <= samples:
        return list(itertools.combinations(range(L), k))
    rng = np.random.default_rng([seed, k, 0])
    return [tuple(sorted(rng.choice(L, size=k, replace=False).tolist())) for _ in range(samples)]


def _pairings(n_blocks: int, k: int, cap: int) -> int:
    """Sets of k disjoint pairs among n blocks, C(n, 2k) (2k - 1)!!, or cap + 1 if more."""
    c = _comb_capped(n_blocks, 2 * k, cap)
    for j in range(1, 2 * k, 2):  # times (2k - 1)!! = 1 x 3 x ... x (2k - 1)
        c *= j
        if c > cap:
            return cap + 1
    return c


def _matchings(items: tuple[int, ...]) -> list[tuple[tuple[int, int], ...]]:
    """Every way to split ``items`` (an even number) into pairs, each pair and list sorted."""
    if not items:
        return [()]
    first, rest = items[0], items[1:]
    return [((first, b), *m) for j, b in enumerate(rest)
            for m in _matchings(rest[:j] + rest[j + 1 :])]  # fmt: skip


def pair_sets(L: int, k: int, samples: int, seed: int = 0) -> list[tuple[tuple[int, int], ...]]:
    """The sets of k disjoint pairs to swap: every one where there are at most ``samples``,
    else ``samples`` drawn from ``default_rng([seed, k, 1])`` (2k blocks in a random order,
    paired first with second, third with fourth, ...)."""
    if _pairings(L, k, samples) <= samples:
        return [m for c in itertools.combinations(range(L), 2 * k) for m in _matchings(c)]
    rng = np.random.default_rng([seed, k, 1])
    out = []
    for _ in range(samples):
        perm = rng.permutation(L)[: 2 * k].tolist()  # (2k,)
        out.append(tuple(sorted(tuple(sorted(perm[j : j + 2])) for j in range(0, 2 * k, 2))))
    return out


def _int_in(name: str, value: object, lo: int, hi: int, why: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise ValueError(f"{name} {value!r} is out of range; expected an integer in "
                         f"{lo}..{hi:,}{why}")  # fmt: skip
    return int(value)


def plan(
    L: int,
    what: Sequence[str] | None = None,
    ks: Sequence[int] | None = None,
    samples: int = 10,
    seed: int = 0,
    blocks: Sequence[int] | None = None,
    *,
    lesson: bool = False,
) -> list[Lesion]:
    """The interventions of one study, the intact stack first.

    Parameters
    ----------
    L : int
        Blocks of the model (layers of the lesson's stack).
    what : sequence of str, optional
        Kinds from :data:`KINDS` (the lesson: :data:`LESSON_KINDS`); by default every kind
        the stack admits (swaps need two blocks).
    ks : sequence of int, optional
        k for ``delete`` (1..L) and ``pairs`` (1..L // 2); by default every one.
    samples : int
        N, the random sets of each k (every set where there are no more), 1..MAX_SAMPLES.
    seed : int
        Seeds the random sets, in [0, 2**32).
    blocks : sequence of int, optional
        The layers of the single interventions (``attn``, ``mlp``, ``block``; ``swap`` i
        swaps i and i + 1); by default every one.

    Returns
    -------
    list of Lesion

    Raises
    ------
    ValueError
        An unknown kind, a k above L (or above L // 2 for pairs), N or the seed out of
        range, a block that does not exist, a swap in a 1-block stack, or more than
        :data:`MAX_LESIONS` interventions (counted before any is built).
    """
    L = _check_L(L)
    allowed = LESSON_KINDS if lesson else KINDS
    if what is None:
        what = tuple(w for w in allowed if L > 1 or w not in ("swap", "pairs"))
    for w in what:
        if w not in allowed:
            extra = " (the lesson's stack has one branch a layer)" if w in KINDS else ""
            raise ValueError(f"unknown intervention {w!r}{extra}; expected one of "
                             f"{', '.join(allowed)}")  # fmt: skip
    if L < 2 and any(w in ("swap", "pairs") for w in what):
        raise ValueError(f"a swap needs two blocks; the model has L = {L} block")
    samples = _int_in("N (samples)", samples, 1, MAX_SAMPLES)
    seed = _int_in("sample seed", seed, 0, MAX_SEED - 1)
    if ks is not None:
        for k in ks:
            _int_in("k", k, 1, L, f" (the model has L = {L} blocks)")
            if "pairs" in what and 2 * k > L:
                raise ValueError(f"k {k} pairs swap {2 * k} blocks but the model has L = {L}; "
                                 f"expected k in 1..{L // 2} with pairs (or leave pairs out "
                                 "of the interventions)")  # fmt: skip
    if blocks is not None:
        for i in blocks:
            _check_block(L, i)
            if "swap" in what and i + 1 >= L:
                raise ValueError(f"swap {i} needs blocks {i} and {i + 1}; the model has "
                                 f"blocks 0..{L - 1} (swap takes i in 0..{L - 2})")  # fmt: skip
    layers = list(range(L)) if blocks is None else sorted(set(blocks))
    kinds = [w for w in allowed if w in what]  # the kinds in one order, whatever was asked
    del_ks = range(1, L + 1) if ks is None else sorted(set(ks))
    pair_ks = range(1, L // 2 + 1) if ks is None else sorted(set(ks))
    count = 1 + sum(  # counted before any is built: a deep stack's plan could fill memory
        len(layers) if w in ("attn", "mlp", "block")
        else len([i for i in layers if i + 1 < L]) if w == "swap"
        else sum(min(_comb_capped(L, k, samples), samples) for k in del_ks) if w == "delete"
        else sum(min(_pairings(L, k, samples), samples) for k in pair_ks)
        for w in kinds
    )  # fmt: skip
    if count > MAX_LESIONS:
        raise ValueError(f"the study would hold {count:,} interventions; expected at most "
                         f"{MAX_LESIONS:,}: ask for fewer kinds, k or samples")  # fmt: skip
    out = [intact(L)]
    for w in kinds:
        if w in ("attn", "mlp"):
            out += [delete_branch(L, i, w) for i in layers]
        elif w == "block":
            out += [delete_blocks(L, [i], "block") for i in layers]
        elif w == "swap":
            out += [swap_blocks(L, [(i, i + 1)], "swap") for i in layers if i + 1 < L]
        elif w == "delete":
            for k in del_ks:
                out += [delete_blocks(L, s) for s in deletion_sets(L, k, samples, seed)]
        else:
            for k in pair_ks:
                out += [swap_blocks(L, s) for s in pair_sets(L, k, samples, seed)]
    return out


class Cost(NamedTuple):
    """What a study will cost, estimated before it starts."""

    passes: int  # lesioned forward passes: interventions (not the intact) x seeds
    blocks: int  # block forwards, the intact prefix reused, the intact streams included
    seconds: float  # an estimate: blocks x the seconds of one, plus each pass's head


def _blocks(lesions: Sequence[Lesion], seeds: int) -> int:
    """Block forwards of a study: each seed's intact stream (L), then each lesion's tail."""
    return seeds * sum(les.L - les.first for les in lesions) + seeds * lesions[0].L


def model_cost(cfg, seq: int, batch: int, lesions: Sequence[Lesion], seeds: int) -> Cost:
    """The cost of :func:`model_study` of ``lesions`` on ``seeds`` batches of (batch, seq):
    a block forward about 24 B T C^2 + 4 B T^2 C flops, a pass's head and metrics
    2 B T C V + 10 B T V."""
    B, T, C, V = batch, seq, cfg.n_embd, cfg.vocab_size
    block_s = BLOCK_OVERHEAD_S + (24 * B * T * C * C + 4 * B * T * T * C) / FLOPS_PER_S
    head_s = (2 * B * T * C * V + 10 * B * T * V) / FLOPS_PER_S
    blocks, passes = _blocks(lesions, seeds), len(lesions) * seeds
    return Cost(passes - seeds, blocks, blocks * block_s + passes * head_s)


def lesson_cost(lesions: Sequence[Lesion], seeds: int) -> Cost:
    """The cost of :func:`lesson_study` of ``lesions`` on ``seeds`` banks."""
    blocks = _blocks(lesions, seeds)
    return Cost((len(lesions) - 1) * seeds, blocks, blocks * LESSON_LAYER_S)


def require_time(cost: Cost, budget: float, what: str, more: str) -> None:
    """Refuse, in one line, a study estimated to take longer than ``budget`` seconds
    (:func:`resgrad.lab.paths.refuse_over_budget`, counting its passes and block forwards).

    Raises
    ------
    ValueError
    """
    counts = f"{cost.passes:,} lesioned forward passes, {cost.blocks:,} block forwards"
    refuse_over_budget(cost.seconds, budget, what, counts, more)


def progress_bar(cost: Cost, progress: bool | None = None):
    """A tqdm bar over ``cost.passes`` on stderr, its description the estimate.

    ``progress`` None: shown on a terminal only, and only for a study estimated longer than
    paths' PROGRESS_AFTER_S; True or False: always or never. Use it as a context manager
    and pass its ``update`` as the ``tick`` of the study.
    """
    from tqdm.auto import tqdm

    if progress is None:
        disable = None if cost.seconds > PROGRESS_AFTER_S else True  # None: on a terminal
    else:
        disable = not progress
    return tqdm(total=cost.passes, unit="pass", dynamic_ncols=True, disable=disable,
                desc=f"lesion (about {format_seconds(cost.seconds)})")  # fmt: skip


# --------------------------------------------------------------------------- the lesioned GPT


def _sublayer(name: str, P: dict, p: str, cfg) -> Callable:
    """f(h) for f = block ``p``'s attention or MLP (inference: no dropout)."""
    if name == "attn":
        w = [P.get(f"{p}.attn.{k}") for k in ATTN_KEYS]  # biases None where bias=False
        return lambda h: attention_forward(h, *w, cfg.n_head)
    w = [P.get(f"{p}.mlp.{k}") for k in MLP_KEYS]
    return lambda h: mlp_forward(h, *w, activation=cfg.activation)


def _step(x: np.ndarray, P: dict, p: str, s: int, cfg, alpha, keep: bool) -> np.ndarray:
    """Step s (0: attention, 1: MLP) of block ``p`` in its scheme, the branch kept or
    deleted (see the module's table): (B, T, C) -> (B, T, C)."""
    ln = f"{p}.ln{s + 1}"
    g, b = P.get(f"{ln}.g"), P.get(f"{ln}.b")
    if keep:
        sub = _sublayer(("attn", "mlp")[s], P, p, cfg)
        return scheme_forward(x, sub, cfg.variant, g, b, cfg.ln_eps, alpha)[0]  # (B,T,C)
    if cfg.variant == "post-ln":
        return layernorm_forward(x, g, b, cfg.ln_eps)[0]  # (B,T,C) ln(x + 0)
    if cfg.variant == "deepnorm":
        return layernorm_forward(x * alpha, g, b, cfg.ln_eps)[0]  # (B,T,C) ln(alpha x + 0)
    return x  # (B,T,C) pre-ln, residual, rezero: x + 0; none: the identity


def _blocks_from(model: GPT, x: np.ndarray, lesion: Lesion, start: int) -> np.ndarray:
    """Positions start .. L-1 of the lesioned stack on x = x_start: (B, T, C) -> x_L."""
    cfg, P = model.cfg, model.params
    for pos in range(start, lesion.L):
        p = f"blocks.{lesion.order[pos]}"
        if lesion.attn[pos] and lesion.mlp[pos]:
            x, _ = block_forward(x, P, p, cfg)  # (B,T,C) the block whole, as GPT.forward
            continue
        alpha = block_alpha(P, p, cfg, x.dtype)
        x = _step(x, P, p, 0, cfg, alpha, lesion.attn[pos])  # (B,T,C)
        x = _step(x, P, p, 1, cfg, alpha, lesion.mlp[pos])  # (B,T,C)
    return x


def _head(model: GPT, x: np.ndarray) -> np.ndarray:
    """ln_f (where the scheme has it) and the tied LM head: (B, T, C) -> (B, T, V)."""
    cfg, P = model.cfg, model.params
    if cfg.final_ln:
        x, _ = layernorm_forward(x, P["ln_f.g"], P.get("ln_f.b"), cfg.ln_eps)  # (B,T,C)
    B, T, C = x.shape
    return (x.reshape(-1, C) @ P["wte"].T).reshape(B, T, -1)  # (B*T,C) @ (C,V) -> (B,T,V)


def _embed(model: GPT, idx: np.ndarray) -> np.ndarray:
    """x_0, the embeddings' output, on ``idx`` (B, T): (B, T, C), as GPT.forward makes it."""
    model.check_params()
    idx = model._check_ids(idx, "idx")
    P = model.params
    x, _ = embedding_forward(idx, P["wte"], P["wpe"])  # (B,T,C) wte[idx] + wpe[:T]
    return dropout_forward(x, model.cfg.dropout, train=False)[0]  # (B,T,C) eval: a copy


def _stream(model: GPT, idx: np.ndarray) -> list[np.ndarray]:
    """The intact stream x_0 .. x_L on ``idx`` (B, T): L + 1 arrays (B, T, C), computed
    with GPT.forward's calls in its order (so its logits are GPT.forward's, bit for bit)."""
    xs = [_embed(model, idx)]
    for i in range(model.cfg.n_layer):
        xs.append(block_forward(xs[-1], model.params, f"blocks.{i}", model.cfg)[0])  # (B,T,C)
    return xs


def lesioned_logits(model: GPT, idx: np.ndarray, lesion: Lesion) -> np.ndarray:
    """The logits (B, T, V) of ``model`` on ``idx`` (B, T) with ``lesion`` applied, from
    one whole forward pass (no reuse): the plain reference the study's fast path equals."""
    if lesion.L != model.cfg.n_layer:
        raise ValueError(f"the lesion is for L = {lesion.L} blocks; the model has "
                         f"{model.cfg.n_layer}")  # fmt: skip
    return _head(model, _blocks_from(model, _embed(model, idx), lesion, 0))


# --------------------------------------------------------------------------- the metrics


def _lse(z: np.ndarray) -> np.ndarray:
    """log sum_v exp(z) per row, (N, V) -> (N,) float64 (summed in float64)."""
    m = z.max(axis=-1, keepdims=True)  # (N, 1)
    e = z - m  # (N, V)
    s = np.exp(e, out=e).sum(axis=-1, dtype=np.float64)  # (N,): one (N, V) temporary
    return m[:, 0].astype(np.float64) + np.log(s)


class Reference(NamedTuple):
    """The intact model's predictions on one batch: what a lesioned one is compared with."""

    z: np.ndarray  # (N, V) logits
    lse: np.ndarray  # (N,) float64 log-partition
    p: np.ndarray  # (N, V) next-token probabilities
    top: np.ndarray  # (N,) argmax
    y: np.ndarray  # (N,) the true next tokens
    ce: float  # mean cross-entropy


def reference(logits: np.ndarray, targets: np.ndarray) -> Reference:
    """The intact model's logits (B, T, V) and the true next tokens (B, T), prepared once."""
    z = logits.reshape(-1, logits.shape[-1])  # (N, V)
    y = np.asarray(targets).reshape(-1)  # (N,)
    lse = _lse(z)  # (N,)
    p = z - lse[:, None].astype(z.dtype)  # (N, V)
    np.exp(p, out=p)  # (N, V) softmax
    ce = float(np.mean(lse - z[np.arange(len(y)), y]))
    return Reference(z, lse, p, z.argmax(axis=-1), y, ce)


def metrics(ref: Reference, logits: np.ndarray) -> np.ndarray:
    """The lesioned model's :data:`METRICS` against the intact one's: (M,) float64.

    ``ce`` = mean_n (lse(z_n) - z_n[y_n]); ``dce`` = ce - ce(intact); ``agree`` = mean_n
    [argmax z_n = argmax z0_n]; ``acc`` = mean_n [argmax z_n = y_n]; ``kl`` = mean_n
    sum_v p0 (log p0 - log p) = mean_n (sum_v p0 (z0 - z) + lse(z) - lse(z0)), since
    log p = z - lse(z) and sum_v p0 = 1.
    """
    z = logits.reshape(-1, logits.shape[-1])  # (N, V)
    n = np.arange(len(ref.y))
    lse = _lse(z)  # (N,)
    ce = float(np.mean(lse - z[n, ref.y]))
    top = z.argmax(axis=-1)  # (N,)
    d = ref.z - z  # (N, V)
    cross = np.multiply(d, ref.p, out=d).sum(axis=-1, dtype=np.float64)  # (N,) sum_v p0 (z0 - z)
    kl = float(np.mean(cross + lse - ref.lse))
    agree, acc = float(np.mean(top == ref.top)), float(np.mean(top == ref.y))
    return np.array([ce, ce - ref.ce, agree, acc, kl])


# --------------------------------------------------------------------------- the study


@dataclass
class StudyResult:
    """Every intervention's figures on every seed's batch.

    ``values[j, s]`` holds :attr:`metrics` of ``lesions[j]`` on seed ``seeds[s]``;
    ``lesions[0]`` is the intact stack. ``block_passes`` counts the block forwards the study
    ran (the intact prefix reused), ``full_passes`` those a whole forward per intervention
    would have run. ``model`` is what another run must share to be compared with this one.
    """

    label: str
    L: int
    metrics: tuple[str, ...]
    lesions: list[Lesion]
    values: np.ndarray  # (J, S, M)
    seeds: tuple[int, ...]
    block_passes: int
    full_passes: int
    model: RunModel


class _GPTSubject:
    """A GPT on text windows: the intact stream, a lesion's tail, the metrics."""

    metrics = METRICS

    def __init__(self, model: GPT, windows: dict[int, np.ndarray]):
        self.model, self.windows = model, windows

    def intact(self, seed: int):
        w = self.windows[seed]  # (B, T + 1)
        xs = _stream(self.model, w[:, :-1])  # L + 1 x (B, T, C)
        return xs, reference(_head(self.model, xs[-1]), w[:, 1:])

    def measure(self, xs, ref, lesion: Lesion) -> tuple[np.ndarray, int]:
        """(M,) metrics of ``lesion``, and the blocks run: from its first changed one."""
        start = lesion.first
        x = _blocks_from(self.model, xs[start], lesion, start)  # (B, T, C) x_L
        return metrics(ref, _head(self.model, x)), lesion.L - start


class _StackSubject:
    """The lesson's stack ``x + tanh(x W)`` (or ``tanh(x W)``), one bank per seed."""

    metrics = LESSON_METRICS

    def __init__(self, depth: int, residual: bool):
        self.depth, self.residual = depth, residual

    def intact(self, seed: int):
        cfg = StackConfig(depths=(self.depth,), seed=seed)
        Ws = make_bank(cfg, self.depth)  # N x (C, C), as paths.stack_chain draws them
        x = np.random.RandomState(cfg.input_seed).randn(cfg.batch, cfg.width)  # (B, C)
        xs = [x]
        for W in Ws:
            xs.append(self._layer(xs[-1], W))  # (B, C)
        return xs, (Ws, xs[-1])

    def _layer(self, x: np.ndarray, W: np.ndarray) -> np.ndarray:
        f = np.tanh(x @ W)  # (B, C) @ (C, C) -> (B, C)
        return x + f if self.residual else f

    def measure(self, xs, ref, lesion: Lesion) -> tuple[np.ndarray, int]:
        """(1,) the relative change of the output, and the layers run."""
        Ws, y = ref
        start = lesion.first
        x = xs[start]  # (B, C)
        for pos in range(start, lesion.L):
            if lesion.attn[pos]:  # a deleted layer passes x on
                x = self._layer(x, Ws[lesion.order[pos]])  # (B, C)
        return np.array([np.linalg.norm(x - y) / np.linalg.norm(y)]), lesion.L - start


def _run(subject, lesions: Sequence[Lesion], seeds: Sequence[int], tick: Tick | None):
    """(J, S, M) figures and the block forwards run, one seed's intact stream at a time."""
    values = np.zeros((len(lesions), len(seeds), len(subject.metrics)))  # (J, S, M)
    blocks = 0
    for s, seed in enumerate(seeds):
        xs, ref = subject.intact(seed)
        blocks += len(xs) - 1
        for j, lesion in enumerate(lesions):
            values[j, s], ran = subject.measure(xs, ref, lesion)
            blocks += ran
            if tick is not None and j:  # the intact row is the reference, not a lesion
                tick(1)
        del xs, ref
    return values, blocks


def _check_seeds(seeds: Sequence[int]) -> tuple[int, ...]:
    seeds = tuple(seeds)
    if not seeds:
        raise ValueError("seeds must list at least one seed")
    for s in seeds:
        _int_in("seed", s, 0, MAX_SEED - 1)
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct, got {list(seeds)}")
    return seeds


def _check_lesions(lesions: Sequence[Lesion], L: int, what: str) -> None:
    if not lesions or lesions[0].kind != "intact" or any(les.L != L for les in lesions):
        raise ValueError(f"the lesions must be plan()'s for {what}'s L = {L}: the intact "
                         "stack first")  # fmt: skip


def describe_model(cfg, ids: np.ndarray, vocabulary: str | None = None) -> RunModel:
    """What runs must share to be compared (:class:`resgrad.lab.paths.RunModel`): the
    scheme and shape of ``cfg``, the vocabulary (described; by default its size) and the
    text's token ids ``ids`` (N,)."""
    ids = np.ascontiguousarray(ids, dtype=np.int64)  # (N,)
    tokens = f"{len(ids):,} tokens, sha256 {hashlib.sha256(ids.tobytes()).hexdigest()[:12]}"
    vocab = f"{cfg.vocab_size} tokens" if vocabulary is None else vocabulary
    return RunModel(cfg.variant, cfg.n_layer, cfg.n_embd, cfg.n_head, vocab, tokens)


def model_study(
    model: GPT,
    ids: np.ndarray,
    lesions: Sequence[Lesion],
    seq: int = 64,
    batch: int = 4,
    seeds: Sequence[int] = (0,),
    *,
    label: str = "",
    run: RunModel | None = None,
    tick: Tick | None = None,
) -> StudyResult:
    """Every lesion of ``lesions`` (:func:`plan`'s) on B windows of T + 1 tokens of ``ids``
    (N,) per seed, drawn as ``resgrad flow`` and ``resgrad paths`` draw them.

    ``run`` describes the model for comparisons (:func:`describe_model` by default);
    ``tick`` is told of each lesioned pass done (:func:`progress_bar`'s ``update``).

    Raises
    ------
    ValueError
        Lesions for another L, a ``seq`` longer than the model's context, a text shorter
        than ``seq`` + 1 tokens or a bad seed: all before the first forward.
    """
    cfg = model.cfg
    seeds = _check_seeds(seeds)
    _check_lesions(lesions, cfg.n_layer, "the model")
    check_seq(cfg, seq)
    windows = {s: text_windows(ids, seq, batch, s) for s in seeds}  # S x (B, T + 1): checked
    values, blocks = _run(_GPTSubject(model, windows), lesions, seeds, tick)
    run = describe_model(cfg, ids) if run is None else run
    full = len(seeds) * cfg.n_layer * len(lesions)
    return StudyResult(label, cfg.n_layer, METRICS, list(lesions), values, seeds, blocks, full,
                       run)  # fmt: skip


def lesson_study(
    depth: int,
    lesions: Sequence[Lesion],
    seeds: Sequence[int] = (42,),
    *,
    residual: bool = True,
    tick: Tick | None = None,
) -> StudyResult:
    """The lesson's stack of ``depth`` layers (its width, batch and input; the bank of each
    seed in ``seeds``, 42 being the lesson's), with or without ``+ x``: the relative change
    of its output (:data:`LESSON_METRICS`) under each lesion."""
    depth = _check_L(depth)
    seeds = _check_seeds(seeds)
    _check_lesions(lesions, depth, "the stack")
    if any(les.attn != les.mlp for les in lesions):
        raise ValueError("the lesson's stack has one branch a layer: delete layers, not "
                         "attention or MLP")  # fmt: skip
    values, blocks = _run(_StackSubject(depth, residual), lesions, seeds, tick)
    sc = StackConfig()
    variant = "x + tanh(x W)" if residual else "tanh(x W), no + x"
    label = title("the lesson's stack", variant, depth, sc.width,
                  f"B={sc.batch}, bank seed(s) {', '.join(map(str, seeds))}")  # fmt: skip
    run = RunModel(variant, depth, sc.width, 0, "none", "none")
    return StudyResult(label, depth, LESSON_METRICS, list(lesions), values, seeds, blocks,
                       len(seeds) * depth * len(lesions), run)  # fmt: skip


def title(name: str, variant: str, L: int, C: int, setting: str) -> str:
    """``name (variant, L=.., C=..), setting``: what a table or figure measured."""
    return f"{name} ({variant}, L={L}, C={C}), {setting}"


def lesion_bytes(cfg, seq: int, batch: int, itemsize: int = 4) -> int:
    """Upper estimate of a study's memory on (batch, seq) windows: the file's arrays and the
    model (2P), the intact stream (L + 1)BTC, one block's work 32BTC + 4BHTT, and the
    intact and lesioned logits with the reference's probabilities and temporaries, 6BTV."""
    L, C, H, V, B, T = cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.vocab_size, batch, seq
    P = V * C + cfg.block_size * C + L * (12 * C * C + 13 * C) + 2 * C
    return itemsize * (2 * P + (L + 1) * B * T * C + 32 * B * T * C + 4 * B * H * T * T
                       + 6 * B * T * V)  # fmt: skip


# --------------------------------------------------------------------------- tables


class LesionRow(NamedTuple):
    """One intervention (or one k of a random kind): its metrics' mean and std.

    A single intervention: over the window seeds. A random kind's k: over its K sets, each
    averaged over the seeds (``samples`` = K). Across runs: over the runs, of each run's
    mean. The std is the sample standard deviation (ddof 1; 0 from one value).
    """

    kind: str
    name: str
    k: int
    layer: int
    samples: int
    metrics: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def get(self, metric: str) -> tuple[float, float]:
        """(mean, std) of one metric."""
        j = self.metrics.index(metric)
        return self.mean[j], self.std[j]

    def record(self) -> dict:
        """A flat dict: kind, name, k, layer, samples, then each metric and its ``_std``."""
        out = {"kind": self.kind, "name": self.name, "k": self.k, "layer": self.layer,
               "samples": self.samples}  # fmt: skip
        for m, a, s in zip(self.metrics, self.mean, self.std):
            out[m], out[f"{m}_std"] = float(a), float(s)
        return out


def row_keys(metric_names: Sequence[str]) -> list[str]:
    """The columns of :meth:`LesionRow.record`."""
    return ["kind", "name", "k", "layer", "samples",
            *[c for m in metric_names for c in (m, f"{m}_std")]]  # fmt: skip


def _floats(a: np.ndarray) -> tuple[float, ...]:
    return tuple(float(x) for x in a)


def _std(a: np.ndarray, axis: int = 0) -> np.ndarray:
    """Sample standard deviation (ddof 1) along ``axis``; 0 where there is one value."""
    if a.shape[axis] < 2:
        return np.zeros(np.delete(a.shape, axis))
    return a.std(axis=axis, ddof=1)


def rows(result: StudyResult) -> list[LesionRow]:
    """The table: the intact stack, each single intervention (mean and std over the seeds),
    then each k of each random kind (mean and std over its sets), in the plan's order."""
    out: list[LesionRow] = []
    groups: dict[tuple[str, int], list[int]] = {}
    for j, les in enumerate(result.lesions):
        if les.kind in RANDOM:
            groups.setdefault((les.kind, les.k), []).append(j)
            continue
        v = result.values[j]  # (S, M)
        out.append(LesionRow(les.kind, les.name, les.k, les.layer, 1, result.metrics,
                             _floats(v.mean(axis=0)), _floats(_std(v))))  # fmt: skip
    for (kind, k), js in groups.items():
        per_set = result.values[js].mean(axis=1)  # (K, M): each set over the seeds
        out.append(LesionRow(kind, f"{kind} k={k}", k, -1, len(js), result.metrics,
                             _floats(per_set.mean(axis=0)), _floats(_std(per_set))))  # fmt: skip
    return out


def across_runs(results: Sequence[StudyResult], names: Sequence[str] | None = None):
    """Each run's :func:`rows`, then per intervention the mean and std (ddof 1; 0 for one
    run) over the runs of each run's mean; ``samples`` stays each run's.

    Raises
    ------
    ValueError
        No result; runs of another scheme, depth, width, heads, vocabulary or text tokens
        than the first, named (:func:`resgrad.lab.paths.check_comparable`); or runs given
        different interventions.
    """
    if not results:
        raise ValueError("no run to compare")
    names = [r.label for r in results] if names is None else list(names)
    check_comparable([(n, r.model) for n, r in zip(names, results)], "run")
    tables = [rows(r) for r in results]
    if any([r.name for r in t] != [r.name for r in tables[0]] for t in tables):
        raise ValueError("the runs were given different interventions; study them alike")
    out = []
    for j, r0 in enumerate(tables[0]):
        means = np.array([t[j].mean for t in tables])  # (R, M)
        out.append(r0._replace(mean=_floats(means.mean(axis=0)), std=_floats(_std(means))))
    return out


class Summary(NamedTuple):
    """A study in a few numbers (NaN where the study has no such intervention)."""

    ce: float  # the intact model's cross-entropy
    block_dce: float  # the change in cross-entropy with one block deleted, mean over blocks
    worst_block: int  # the block whose deletion raises it most (-1: none deleted)
    worst_dce: float  # that rise
    block_agree: float  # top-1 agreement with one block deleted, mean over blocks
    swap_dce: float  # the change with adjacent blocks swapped, mean over the swaps


def summary(table: Sequence[LesionRow]) -> Summary:
    """:class:`Summary` of one study's rows (a model's: :data:`METRICS`)."""
    blocks = [r for r in table if r.kind == "block"]
    swaps = [r for r in table if r.kind == "swap"]
    dce = np.array([r.get("dce")[0] for r in blocks])  # (L,)
    nan = float("nan")
    worst = int(np.argmax(dce)) if len(dce) else -1
    return Summary(
        table[0].get("ce")[0],
        float(dce.mean()) if len(dce) else nan,
        blocks[worst].layer if blocks else -1,
        float(dce[worst]) if blocks else nan,
        float(np.mean([r.get("agree")[0] for r in blocks])) if blocks else nan,
        float(np.mean([r.get("dce")[0] for r in swaps])) if swaps else nan,
    )


# --------------------------------------------------------------------------- through training


class CheckpointLesions(NamedTuple):
    """The study at one checkpoint a run kept, on the same windows as every other."""

    iteration: int
    path: str
    result: StudyResult


def run_checkpoint_lesions(
    run_dir: str,
    text: str | None = None,
    seq: int = 64,
    batch: int = 4,
    seeds: Sequence[int] = (0,),
    *,
    what: Sequence[str] | None = None,
    ks: Sequence[int] | None = None,
    samples: int = 10,
    sample_seed: int = 0,
    blocks: Sequence[int] | None = None,
    fits: Callable[[Any], None] | None = None,
    tick: Tick | None = None,
) -> list[CheckpointLesions]:
    """:func:`model_study` of :func:`plan`'s interventions (``what``, ``ks``, ``samples``,
    ``sample_seed``, ``blocks``) at every ``ckpt-<iter>.ckpt`` that ``resgrad train
    --keep-every`` kept in ``run_dir``, on the same windows of ``text`` (the built-in
    corpus by default), so the steps differ only in the weights.

    ``fits`` is called with each checkpoint's GPTConfig before its study (the CLI's checks).

    Raises
    ------
    ValueError
        The run keeps no checkpoint per step; a checkpoint's scheme, shape or vocabulary
        differs from the first's (:func:`resgrad.lab.paths.check_comparable`); or a bad
        plan (:func:`plan`).
    OSError
        ``run_dir`` is not a directory.
    """
    from resgrad.train.sample import load_model

    (first,) = plan_runs([run_dir], text)  # refuses a run that kept no checkpoint
    text_ids, out = None, []
    label = os.path.basename(os.path.normpath(run_dir))
    for it, path in first.kept:
        model, tok, ckpt = load_model(path)
        if fits is not None:
            fits(model.cfg)
        if text_ids is None:  # one run, one tokenizer: the text is encoded once
            from resgrad.train.data import default_corpus

            text_ids = tok.encode(default_corpus() if text is None else text)
            lesions = plan(model.cfg.n_layer, what, ks, samples, sample_seed, blocks)
        run = run_model(model.cfg, ckpt, text_ids)
        check_comparable([(first.kept[0][1], first.model), (path, run)], "checkpoint")
        res = model_study(model, text_ids, lesions, seq, batch, seeds, label=label, run=run,
                          tick=tick)  # fmt: skip
        out.append(CheckpointLesions(it, path, res))
    return out


def across_checkpoints(
    runs: Sequence[Sequence[CheckpointLesions]], names: Sequence[str]
) -> list[tuple[int, list[LesionRow], list[Summary]]]:
    """Several runs' :func:`run_checkpoint_lesions`: per iteration every run kept, the rows
    across the runs (:func:`across_runs`) and each run's :func:`summary`.

    Raises
    ------
    ValueError
        Runs that cannot be compared, or no iteration kept by every run.
    """
    by_run = [{c.iteration: c for c in r} for r in runs]
    common = sorted(set.intersection(*(set(b) for b in by_run)))
    if not common:
        raise ValueError("the runs kept no iteration in common; train them with the same "
                         "--keep-every")  # fmt: skip
    out = []
    for it in common:
        results = [b[it].result for b in by_run]
        out.append((it, across_runs(results, names), [summary(rows(r)) for r in results]))
    return out


# --------------------------------------------------------------------------- the figure


def _panel_rows(table: Sequence[LesionRow], kind: str) -> list[LesionRow]:
    return [r for r in table if r.kind == kind]


def lesion_figure(table: Sequence[LesionRow], title_text: str = "", metric: str | None = None):
    """Three panels of one study (or the mean over runs), for ``metric`` (``dce`` for a
    model, ``change`` for the lesson's stack, by default).

    - panel a: the metric per deleted attention, MLP and block, by layer, with a ± std bar;
    - panel b: the k-deletion and k-pair-swap curves (Veit's figures 5a and 5b), with a
      ± std band over the sets (or runs);
    - panel c: the adjacent-swap effect by layer.

    Returns
    -------
    matplotlib.figure.Figure
        ``axes[0..2]`` the panels; each line's data are exactly the rows' means.
    """
    from matplotlib.ticker import MaxNLocator

    from resgrad.plots import new_figure

    if not table:
        raise ValueError("lesion_figure needs rows")
    names = table[0].metrics
    metric = metric or ("dce" if "dce" in names else names[0])
    if metric not in names:
        raise ValueError(f"unknown metric {metric!r}; expected one of {', '.join(names)}")
    label = {"ce": "cross-entropy", "dce": "change in cross-entropy (nats)",
             "agree": "top-1 agreement with intact", "acc": "top-1 accuracy",
             "kl": "KL(intact || lesioned)", "change": "||y' - y|| / ||y||"}[metric]  # fmt: skip
    fig, axes = new_figure(ncols=3, width=15.0, height=4.6)
    ax_a, ax_b, ax_c = axes
    for i, kind in enumerate(("attn", "mlp", "block")):
        rs = _panel_rows(table, kind)
        if rs:
            x = np.array([r.layer for r in rs]) + (i - 1) * 0.2  # side by side per layer
            m, s = np.array([r.get(metric) for r in rs]).T  # (L,), (L,)
            name = {"attn": "attention", "mlp": "MLP"}.get(kind, "whole block")
            ax_a.errorbar(x, m, yerr=s, fmt="os^"[i] + "-", ms=4, capsize=2, label=name)
    ax_a.set_title("(a) one branch or block deleted", fontsize=9, loc="left")
    ax_a.set_xlabel("layer i")
    for i, kind in enumerate(("delete", "pairs")):
        rs = _panel_rows(table, kind)
        if rs:
            k = np.array([r.k for r in rs])
            m, s = np.array([r.get(metric) for r in rs]).T  # (K,), (K,)
            (line,) = ax_b.plot(k, m, "os"[i] + "-", ms=4,
                                label="k blocks deleted" if kind == "delete" else
                                "k pairs swapped")  # fmt: skip
            ax_b.fill_between(k, m - s, m + s, color=line.get_color(), alpha=0.2, linewidth=0)
    ax_b.set_title("(b) k random deletions and pair swaps, band ± std", fontsize=9, loc="left")
    ax_b.set_xlabel("k")
    rs = _panel_rows(table, "swap")
    if rs:
        m, s = np.array([r.get(metric) for r in rs]).T  # (L - 1,), (L - 1,)
        ax_c.errorbar([r.layer for r in rs], m, yerr=s, fmt="D-", ms=4, capsize=2,
                      color="C3", label="blocks i and i + 1 swapped")  # fmt: skip
    ax_c.set_title("(c) adjacent blocks swapped", fontsize=9, loc="left")
    ax_c.set_xlabel("layer i (swapped with i + 1)")
    for ax in axes:
        if metric in ("dce", "kl", "change"):
            ax.axhline(0.0, color="0.5", linewidth=0.8)  # the intact model
        if len(ax.lines) > 1 or ax.collections:
            ax.legend(fontsize=8, loc="best")
        else:
            ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
        ax.set_ylabel(label)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"Lesion study: {title_text}" if title_text else "Lesion study", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
    return fig


def save_lesion_figure(path, table: Sequence[LesionRow], title_text: str = "",
                       metric: str | None = None) -> None:  # fmt: skip
    """Draw :func:`lesion_figure` and write it to ``path`` atomically, PNG or SVG by its
    extension (a bad extension is refused before anything is drawn)."""
    from resgrad.plots import plot_format, save_figure

    plot_format(path)
    save_figure(lesion_figure(table, title_text, metric), path)
