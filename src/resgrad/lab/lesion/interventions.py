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

==============  ================================  =======================================
scheme          one step, x -> out                 the step with its branch deleted
==============  ================================  =======================================
``pre-ln``      x + f(ln(x))                       x        (the skip carries x past it)
``residual``    x + f(x)                           x
``rezero``      x + alpha f(x)                     x
``post-ln``     ln(x + f(x))                       ln(x)    (the LayerNorm after the sum stays)
``deepnorm``    ln(alpha x + f(x))                 ln(alpha x)   (and DeepNet's alpha too)
``ln-scaling``  x + f(s_l ln(x)), s_l = l^-p        x
``none``        f(ln(x))                           x        (no skip: the step becomes the
                                                             identity)
==============  ================================  =======================================

Deleting block i deletes both of its branches; in pre-ln, residual, rezero and ln-scaling
that is the identity, as transformers' model with module i taken out of ``transformer.h``.
In ``none`` the block is replaced by the identity: the plain network's experiment. In the lesson's
stack ``x + tanh(x W)`` (or ``tanh(x W)`` without ``+ x``) a deleted layer passes x on.
A swap runs block j's weights at position i and block i's at j; nothing else moves. An
ln-scaling block moved keeps its own ``s_l`` (l its place in the trained model): the
scale is part of the block's function, as its weights are, as a module moved in
``transformer.h`` keeps its ``layer_idx``.

**Interventions** (:data:`KINDS`): ``attn`` and ``mlp`` delete one branch, ``block`` one
block, ``delete`` k random blocks (Veit's figure 5a), ``swap`` adjacent blocks i and i + 1
(Lad et al.), ``pairs`` k random disjoint pairs of blocks swapped (Veit's figure 5b). A
random kind's k is exact where it can be: every one of its sets is measured where there
are at most :data:`EXACT_SETS` (or N) of them, C(L, k) for ``delete``. Otherwise N sets are
drawn from ``np.random.default_rng([seed, k, kind])``; ``delete``'s so that every block is
deleted equally often (:func:`balanced_sets`), and the table gives the draw's sampling
interval beside the spread over seeds or runs (:mod:`resgrad.lab.lesion.tables`).

**Metrics** (:data:`~resgrad.lab.lesion.measure.METRICS`), on B windows of T + 1 tokens drawn
by seed exactly as ``resgrad flow`` and ``resgrad paths`` draw them
(:func:`resgrad.lab.study.windows.text_windows`), averaged over the B*T predictions: ``ce`` the
mean cross-entropy, ``dce`` its change from the intact model, ``agree`` top-1 agreement with
the intact model (Lad et al.'s accuracy retained), ``acc`` top-1 accuracy against the true
next token, ``kl`` KL(intact || lesioned) of the next-token distributions. The lesson's
stack has no text: its metric (:data:`~resgrad.lab.lesion.measure.LESSON_METRICS`) is
``change`` = ||y' - y|| / ||y||, the relative change of the stack's output. Each is a mean
and a sample standard deviation (ddof 1; 0 from one value) over the window seeds; a random
kind's over its K sets, each set averaged over the seeds.

**Fast.** Forward passes only. The intact stream x_0 .. x_L is computed once per batch;
an intervention whose first changed position is p starts from the intact x_p and runs
only blocks p .. L-1 (the prefix below it is the same for every intervention there).

**Modules.** This one holds the interventions (:class:`Lesion`), the plan of a study
(:func:`plan`) and its cost before it starts (:func:`model_cost`, :func:`require_time`);
:mod:`resgrad.lab.lesion` runs the lesioned model and measures it,
:mod:`resgrad.lab.lesion` makes its tables, :mod:`resgrad.lab.lesion` its figure,
and :mod:`resgrad.lab.lesion` follows it through training.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from resgrad.lab.study.budget import (
    FLOAT32_FLOPS_PER_S,
    bar,
    refuse_over_budget,
)
from resgrad.lab.study.refusals import (
    K_OUT_OF_RANGE,
    L_NOT_POSITIVE,
    LESSON_INTERVENTION,
    NO_BLOCK_TO_DELETE,
    NO_PAIR_TO_SWAP,
    NO_SUCH_BLOCK,
    PAIRS_K_TOO_LARGE,
    PAIRS_NOT_DISJOINT,
    PLAN_SAMPLES_OUT_OF_RANGE,
    PLAN_SEED_OUT_OF_RANGE,
    SWAP_NEEDS_TWO,
    SWAP_PAST_TOP,
    TOO_MANY_INTERVENTIONS,
    UNKNOWN_BRANCH,
    UNKNOWN_INTERVENTION,
    Refusal,
)

__all__ = [
    "KINDS",
    "LESSON_KINDS",
    "Cost",
    "Lesion",
    "balanced_sets",
    "delete_blocks",
    "delete_branch",
    "deletion_sets",
    "intact",
    "lesson_cost",
    "model_cost",
    "pair_sets",
    "plan",
    "population",
    "progress_bar",
    "require_time",
    "swap_blocks",
]

KINDS = ("attn", "mlp", "block", "delete", "swap", "pairs")  # every intervention, in order
LESSON_KINDS = ("block", "delete", "swap", "pairs")  # the lesson's stack: one branch a layer
RANDOM = ("delete", "pairs")  # N random sets per k
MAX_SAMPLES = 10_000  # N, random sets per k
# a k with at most this many sets (C(L, k) for delete) is exact: every set is measured. 500
# holds every k of a 12-block stack from 1 to 4 (12, 66, 220, 495 sets), where a draw of 10
# sets per k gave a cost that was not monotone in k (issue 47)
EXACT_SETS = 500
MAX_LESIONS = 100_000  # interventions in one plan (each a few L-long tuples)
MAX_SEED = 2**32  # seeds are in [0, 2**32), as numpy's
# seconds of one block's forward: a fixed cost of Python and NumPy calls plus its flops at
# budget.FLOAT32_FLOPS_PER_S (the forward is float32; the lesson's layer: the cost)
BLOCK_OVERHEAD_S = 1e-4
LESSON_LAYER_S = 1e-5


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
    def deleted(self) -> tuple[int, ...]:
        """The positions whose block is deleted, both of its branches."""
        return tuple(p for p in range(self.L) if not (self.attn[p] or self.mlp[p]))

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
            return "delete {" + ",".join(map(str, self.deleted)) + "}"
        moved = sorted({(min(p, q), max(p, q)) for p, q in enumerate(self.order) if p != q})
        return "pairs " + "".join(f"({a},{b})" for a, b in moved)


def _check_block(L: int, i: object) -> int:
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < L:
        raise NO_SUCH_BLOCK(block=i, last=L - 1)
    return int(i)


def _check_L(L: object) -> int:
    if isinstance(L, bool) or not isinstance(L, (int, np.integer)) or L < 1:
        raise L_NOT_POSITIVE(L=L)
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
        raise UNKNOWN_BRANCH(branch=branch)
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
        raise NO_BLOCK_TO_DELETE()
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
            raise PAIRS_NOT_DISJOINT(pairs=pairs)
        seen.update((i, j))
        order[i], order[j] = order[j], order[i]
    if not pairs:
        raise NO_PAIR_TO_SWAP()
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


def _exact(count: int, samples: int) -> bool:
    """Whether a k of ``count`` sets (capped) is measured whole: at most
    max(:data:`EXACT_SETS`, N) of them."""
    return count <= max(EXACT_SETS, samples)


def _measured(count: int, samples: int) -> int:
    """The sets measured of a k of ``count`` sets (capped): all of them, or N drawn."""
    return count if _exact(count, samples) else samples


def population(kind: str, L: int, k: int) -> int:
    """The sets of one k of a random kind on L blocks: C(L, k) for ``delete``, C(L, 2k)
    (2k - 1)!! for ``pairs``."""
    if kind == "delete":
        return math.comb(L, k)
    return math.comb(L, 2 * k) * math.prod(range(1, 2 * k, 2))


def balanced_sets(L: int, k: int, samples: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """``samples`` distinct sets of k of the L blocks, each block in as many sets as the
    others, or one more: each set takes the k blocks deleted least often so far, ties broken
    at random.

    Counts that differ by at most 1 stay so: if m blocks are at the lowest count c, a set
    takes k of them (m >= k), or all m and k - m at c + 1. Where that set was drawn before
    (m = k leaves no choice), it is drawn again with a random key that mixes more counts,
    1 wider each 8 tries; then, while the counts differ by more than 1, a random set holding
    a block of the highest count and not one of the lowest trades the first for the second
    (:func:`_rebalance`). Every step is blind to the blocks' labels, so every k-set is equally
    likely to be drawn, and the sets' mean cost is unbiased for the mean over all C(L, k).
    Needs ``samples`` < C(L, k)."""
    count = np.zeros(L, dtype=np.int64)  # (L,) the sets each block is in so far
    out: list[tuple[int, ...]] = []
    seen: set[tuple[int, ...]] = set()
    for _ in range(samples):
        for tries in itertools.count():
            key = count + (1 + tries // 8) * rng.random(L)  # (L,) width 1: random ties only
            s = tuple(sorted(np.argsort(key, kind="stable")[:k].tolist()))
            if s not in seen:
                break
        out.append(s)
        seen.add(s)
        count[list(s)] += 1
    return _rebalance(out, seen, count, rng)


def _rebalance(out: list, seen: set, count: np.ndarray, rng: np.random.Generator) -> list:
    """Trade blocks between sets until the counts (L,) differ by at most 1, or no set can
    trade without repeating another: each trade lowers sum (count - mean)^2 by at least 2."""
    while count.max() - count.min() > 1:
        hi = int(rng.choice(np.flatnonzero(count == count.max())))
        lo = int(rng.choice(np.flatnonzero(count == count.min())))
        swap = [j for j, s in enumerate(out) if hi in s and lo not in s
                and _traded(s, hi, lo) not in seen]  # fmt: skip
        if not swap:
            break
        j = swap[int(rng.integers(len(swap)))]
        seen.discard(out[j])
        out[j] = _traded(out[j], hi, lo)
        seen.add(out[j])
        count[hi] -= 1
        count[lo] += 1
    return out


def _traded(s: tuple[int, ...], hi: int, lo: int) -> tuple[int, ...]:
    """Set s with block ``hi`` replaced by ``lo``, sorted."""
    return tuple(sorted(lo if i == hi else i for i in s))


def deletion_sets(L: int, k: int, samples: int, seed: int = 0) -> list[tuple[int, ...]]:
    """The sets of k blocks to delete: every one of the C(L, k) where that is at most
    max(:data:`EXACT_SETS`, ``samples``), else ``samples`` sets drawn by
    :func:`balanced_sets` from ``default_rng([seed, k, 0])``."""
    if _exact(_comb_capped(L, k, max(EXACT_SETS, samples)), samples):
        return list(itertools.combinations(range(L), k))
    return balanced_sets(L, k, samples, np.random.default_rng([seed, k, 0]))


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
    """The sets of k disjoint pairs to swap: every one where there are at most
    max(:data:`EXACT_SETS`, ``samples``), else ``samples`` drawn from
    ``default_rng([seed, k, 1])`` (2k blocks in a random order, paired first with second,
    third with fourth, ...; a set may come twice)."""
    if _exact(_pairings(L, k, max(EXACT_SETS, samples)), samples):
        return [m for c in itertools.combinations(range(L), 2 * k) for m in _matchings(c)]
    rng = np.random.default_rng([seed, k, 1])
    out = []
    for _ in range(samples):
        perm = rng.permutation(L)[: 2 * k].tolist()  # (2k,)
        out.append(tuple(sorted(tuple(sorted(perm[j : j + 2])) for j in range(0, 2 * k, 2))))
    return out


def _int_in(refusal: Refusal, value: object, lo: int, hi: int) -> int:
    """``value`` as an int, refused by ``refusal`` (of its value, lo and hi) unless it is an
    integer in lo..hi."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise refusal(value=value, lo=lo, hi=hi)
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
        N, the random sets of a k with more than max(:data:`EXACT_SETS`, N) sets (a k with
        fewer is exact: every set), 1..MAX_SAMPLES.
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
            if w in KINDS:  # a kind of a GPT's blocks, not of the lesson's layers
                raise LESSON_INTERVENTION(what=w, expected=", ".join(allowed))
            raise UNKNOWN_INTERVENTION(what=w, expected=", ".join(allowed))
    if L < 2 and any(w in ("swap", "pairs") for w in what):
        raise SWAP_NEEDS_TWO(L=L)
    samples = _int_in(PLAN_SAMPLES_OUT_OF_RANGE, samples, 1, MAX_SAMPLES)
    seed = _int_in(PLAN_SEED_OUT_OF_RANGE, seed, 0, MAX_SEED - 1)
    if ks is not None:
        for k in ks:
            _int_in(K_OUT_OF_RANGE, k, 1, L)
            if "pairs" in what and 2 * k > L:
                raise PAIRS_K_TOO_LARGE(k=k, blocks=2 * k, L=L, most=L // 2)
    if blocks is not None:
        for i in blocks:
            _check_block(L, i)
            if "swap" in what and i + 1 >= L:
                raise SWAP_PAST_TOP(i=i, next=i + 1, last=L - 1, most=L - 2)
    layers = list(range(L)) if blocks is None else sorted(set(blocks))
    kinds = [w for w in allowed if w in what]  # the kinds in one order, whatever was asked
    del_ks = range(1, L + 1) if ks is None else sorted(set(ks))
    pair_ks = range(1, L // 2 + 1) if ks is None else sorted(set(ks))
    cap = max(EXACT_SETS, samples)  # counts capped above it: a deep stack's C(L, k) is huge
    count = 1 + sum(  # counted before any is built: a deep stack's plan could fill memory
        len(layers) if w in ("attn", "mlp", "block")
        else len([i for i in layers if i + 1 < L]) if w == "swap"
        else sum(_measured(_comb_capped(L, k, cap), samples) for k in del_ks) if w == "delete"
        else sum(_measured(_pairings(L, k, cap), samples) for k in pair_ks)
        for w in kinds
    )  # fmt: skip
    if count > MAX_LESIONS:
        raise TOO_MANY_INTERVENTIONS(count=count, most=MAX_LESIONS)
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
    """The cost of :func:`~resgrad.lab.lesion.measure.model_study` of ``lesions`` on ``seeds``
    batches of (batch, seq): a block forward about 24 B T C^2 + 4 B T^2 C flops, a pass's head
    and metrics 2 B T C V + 10 B T V, in float32."""
    B, T, C, V = batch, seq, cfg.n_embd, cfg.vocab_size
    block_s = BLOCK_OVERHEAD_S + (24 * B * T * C * C + 4 * B * T * T * C) / FLOAT32_FLOPS_PER_S
    head_s = (2 * B * T * C * V + 10 * B * T * V) / FLOAT32_FLOPS_PER_S
    blocks, passes = _blocks(lesions, seeds), len(lesions) * seeds
    return Cost(passes - seeds, blocks, blocks * block_s + passes * head_s)


def lesson_cost(lesions: Sequence[Lesion], seeds: int) -> Cost:
    """The cost of :func:`~resgrad.lab.lesion.measure.lesson_study` of ``lesions`` on ``seeds``
    banks."""
    blocks = _blocks(lesions, seeds)
    return Cost((len(lesions) - 1) * seeds, blocks, blocks * LESSON_LAYER_S)


def require_time(cost: Cost, budget: float, what: str, more: str) -> None:
    """Refuse, in one line, a study estimated to take longer than ``budget`` seconds
    (:func:`resgrad.lab.study.budget.refuse_over_budget`, counting its passes and block forwards).

    Raises
    ------
    ValueError
    """
    counts = f"{cost.passes:,} lesioned forward passes, {cost.blocks:,} block forwards"
    refuse_over_budget(cost.seconds, budget, what, counts, more)


def progress_bar(cost: Cost, progress: bool | None = None):
    """:func:`resgrad.lab.study.budget.bar` over ``cost.passes`` (``progress``: its ``show``):
    pass its ``update`` as the ``tick`` of the study."""
    return bar(cost.passes, cost.seconds, "pass", "lesion", progress)
