"""Lesion study, the work: the lesioned GPT (or the lesson's stack), its metrics, the study.

Legend: B = batch, T = time, C = channels, V = vocab, L = blocks (layers of the lesson's
stack), S = window seeds (bank seeds for the lesson), M = metrics, N = rows (B*T), J =
interventions.

What each intervention does, and what the metrics mean: :mod:`resgrad.lab.lesion`, which
also plans a study (:func:`~resgrad.lab.lesion.interventions.plan`) and estimates its cost.
The intact
stream x_0 .. x_L is computed once per batch; an intervention whose first changed position
is p starts from the intact x_p and runs only blocks p .. L-1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from resgrad.lab.lesion.interventions import MAX_SEED, Lesion, _check_L, _int_in
from resgrad.lab.lesson import StackConfig, make_bank
from resgrad.lab.study.refusals import (
    LESION_FOR_OTHER_L,
    LESIONS_NOT_PLANNED,
    LESSON_ONE_BRANCH,
    NO_SEED,
    SEED_OUT_OF_RANGE,
    SEEDS_NOT_DISTINCT,
)
from resgrad.lab.study.runs import RunModel, describe_model
from resgrad.lab.study.windows import check_seq, text_windows
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
    "LESSON_METRICS",
    "METRICS",
    "StudyResult",
    "lesion_bytes",
    "lesioned_logits",
    "lesson_study",
    "metrics",
    "model_study",
    "reference",
    "title",
]

METRICS = ("ce", "dce", "agree", "acc", "kl")  # a model's, on text
LESSON_METRICS = ("change",)  # the lesson's stack: ||y' - y|| / ||y||

Tick = Callable[[int], None]  # told the lesioned passes just done (a progress bar's update)


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
    return x  # (B,T,C) pre-ln, residual, rezero, ln-scaling: x + 0; none: the identity


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
        raise LESION_FOR_OTHER_L(lesion_L=lesion.L, model_L=model.cfg.n_layer)
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
        raise NO_SEED()
    for s in seeds:
        _int_in(SEED_OUT_OF_RANGE, s, 0, MAX_SEED - 1)
    if len(set(seeds)) != len(seeds):
        raise SEEDS_NOT_DISTINCT(seeds=list(seeds))
    return seeds


def _check_lesions(lesions: Sequence[Lesion], L: int, what: str) -> None:
    if not lesions or lesions[0].kind != "intact" or any(les.L != L for les in lesions):
        raise LESIONS_NOT_PLANNED(what=what, L=L)


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
    """Every lesion of ``lesions`` (:func:`~resgrad.lab.lesion.interventions.plan`'s) on B
    windows of T + 1 tokens of ``ids`` (N,) per seed, drawn as ``resgrad flow`` and
    ``resgrad paths`` draw them.

    ``run`` describes the model for comparisons (:func:`describe_model` by default);
    ``tick`` is told of each lesioned pass done (the ``update`` of
    :func:`~resgrad.lab.lesion.interventions.progress_bar`).

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
        raise LESSON_ONE_BRANCH()
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
