"""The gradient-flow lab: per-layer gradient and activation norms through deep stacks.

Legend: B = batch, T = time, C = channels, L = depth (blocks in the stack),
K = number of seeds, V = vocabulary size.

For a stack of L blocks of any residual scheme (:data:`resgrad.nn.model.VARIANTS`)
and for the lesson's tanh stack (:data:`LESSON_VARIANTS`), one pass measures, at
every layer i:

- ``stream_grad``: the norm of dL/dx_i, the gradient reaching the input of
  block i (the residual stream); i = 0..L, ``stream_grad`` at L is the gradient
  arriving at the output of the last block;
- ``stream_act``: the norm of x_i on the forward pass, i = 0..L;
- ``param_grad``: the norm of the gradient of all block i's parameters together,
  and ``param_grad:<name>`` that of each one (e.g. ``param_grad:attn.w_qkv``),
  i = 0..L-1.

Every norm is the Frobenius norm of the whole array, as in the lesson
(``np.linalg.norm(dx)`` over (B, C) there, over (B, T, C) here). K seeds give K
such passes; :func:`measure` aggregates them into :class:`FlowRecord` rows (mean,
std, min, max over the seeds), one per (layer, quantity), which
:func:`records_to_csv` and :func:`records_to_json` write out.

The loss at the top (``FlowConfig.loss``):

- ``"ones"``: the lesson's upstream gradient of ones at the output of the last
  block, ``L = sum(x_L)``; the stream enters as x_0 ~ N(0, 1), (B, T, C).
  Beware: when the last block ends in a LayerNorm (post-ln, deepnorm), the sum
  of its output is the constant ``sum(b)`` and this gradient is exactly zero;
- ``"randn"``: a fixed Gaussian upstream gradient, ``L = <g, x_L>`` with
  g ~ N(0, 1), (B, T, C): the random-projection loss of signal-propagation
  analyses, well defined for every scheme;
- ``"lm"``: the real thing, a whole :class:`resgrad.nn.model.GPT` (embeddings,
  the blocks, the final LayerNorm, the tied head) and its cross-entropy on random
  tokens (or on ``tokens`` given), through ``GPT.backward_stream``.

Seeds: seed s initialises the weights as ``GPT(cfg, seed=s)`` does (so "ones",
"randn" and "lm" measure the same blocks), and draws the data (x_0, g, or the
tokens) from ``np.random.default_rng([s, 1])``. With ``params`` given, every
seed uses those weights and only the data changes.

Cost and memory are linear in L: one forward pass keeping one cache per block,
one backward pass; only norms are kept from the backward.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from resgrad.lab.lesson import StackConfig, make_bank, run_stack
from resgrad.nn import blocks
from resgrad.nn.model import GPT, GPTConfig, per_block_norms

LESSON_VARIANTS = ("lesson-plain", "lesson-residual")  # the lesson's tanh stack, without / with + x
LOSSES = ("ones", "randn", "lm")
QUANTITIES = ("stream_grad", "stream_act", "param_grad")  # plus "param_grad:<name>"
RECORD_FIELDS = (
    "variant",
    "depth",
    "width",
    "heads",
    "seq",
    "batch",
    "init",
    "loss",
    "n_seeds",
    "layer",
    "quantity",
    "mean",
    "std",
    "min",
    "max",
)


def all_variants() -> tuple[str, ...]:
    """Every variant :class:`FlowConfig` accepts: the model's schemes, then the lesson's."""
    return tuple(blocks.VARIANTS) + LESSON_VARIANTS


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def positive_ints(name: str, values: Sequence[int]) -> tuple[int, ...]:
    """A grid's axis of sizes (depths, widths): a non-empty sequence of distinct integers >= 1.

    A value given twice is refused, not run twice: its points would be measured twice and
    counted as two in every table and plot of the grid.
    """
    if isinstance(values, (int, str)) or not isinstance(values, Sequence):
        raise TypeError(f"{name} must be a sequence, got {values!r}")
    out = tuple(values)
    if not out:
        raise ValueError(f"{name} must list at least one value, got none")
    for v in out:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must hold positive integers, got {v!r}")
    if len(set(out)) != len(out):
        raise ValueError(f"{name} must be distinct, got {out!r}")
    return tuple(int(v) for v in out)


def _seed(value: object) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, np.integer))
        or not 0 <= value < 2**32
    ):
        raise ValueError(f"seed must be an integer in [0, 2**32), got {value!r}")
    return int(value)


def _seed_sequence(seeds: object) -> tuple[int, ...]:
    """Explicit seeds: a non-empty sequence of distinct integers in [0, 2**32)."""
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence):
        raise TypeError(f"seeds must be a sequence of integers, got {seeds!r}")
    out = tuple(_seed(s) for s in seeds)
    if not out:
        raise ValueError("seeds must hold at least one seed, got none")
    if len(set(out)) != len(out):
        twice = next(s for i, s in enumerate(out) if s in out[:i])
        raise ValueError(f"seeds must be distinct, got {twice} twice")
    return out


def seed_tuple(seeds: object) -> tuple[int, ...]:
    """The seeds a grid runs at: a count K (seeds 0..K-1) or explicit seeds, as a tuple.

    A count must be >= 1; explicit seeds must be distinct integers in [0, 2**32).
    Callers that cap the grid's size check a count against the cap before calling
    (this builds the list).
    """
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        if seeds < 1:
            raise ValueError(
                f"seeds must be a positive integer (a count K: seeds 0..K-1) or a list of "
                f"seeds, got {seeds!r}"
            )
        return tuple(range(int(seeds)))
    return _seed_sequence(seeds)


@dataclass(frozen=True)
class FlowConfig:
    """One stack to measure, and the seeds to average over.

    For the lesson's variants only ``depth``, ``width``, ``batch``, ``scale`` and
    ``seeds`` matter: the stack is the lesson's ``tanh(x @ W)`` on (B, C) vectors,
    the loss is its upstream gradient of ones, and seed s is the seed of its bank
    of matrices (``StackConfig(seed=s)``; the input keeps the lesson's seed 0).
    """

    variant: str = "pre-ln"  # a resgrad.nn.model.VARIANTS scheme or one of LESSON_VARIANTS
    depth: int = 12  # L, blocks in the stack
    width: int = 64  # C
    heads: int = 4  # H; C must be divisible by H
    seq: int = 16  # T
    batch: int = 4  # B
    init: str = "gpt2"  # one of resgrad.nn.model.INITS
    loss: str = "lm"  # one of LOSSES
    seeds: tuple[int, ...] = (0,)  # K seeds to average over
    vocab: int = 65  # V, for the "lm" loss
    scale: float = 0.5  # the lesson's stack only: W = randn(C, C) * scale / sqrt(C)

    def __post_init__(self):
        if self.variant not in all_variants():
            raise ValueError(
                f"variant must be one of {', '.join(all_variants())}, got {self.variant!r}"
            )
        if self.init not in blocks.INITS:
            raise ValueError(f"init must be one of {', '.join(blocks.INITS)}, got {self.init!r}")
        for name in ("depth", "width", "heads", "seq", "batch", "vocab"):
            _positive_int(name, getattr(self, name))
        if self.variant not in LESSON_VARIANTS and self.width % self.heads:
            raise ValueError(
                f"width must be divisible by heads, got width {self.width} and heads {self.heads}"
            )
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        object.__setattr__(self, "seeds", _seed_sequence(self.seeds))
        if isinstance(self.scale, bool) or not isinstance(self.scale, (int, float, np.floating)):
            raise TypeError(f"scale must be a number, got {self.scale!r}")
        if not math.isfinite(self.scale):
            raise ValueError(f"scale must be a finite number, got {self.scale!r}")

    @property
    def is_lesson(self) -> bool:
        return self.variant in LESSON_VARIANTS

    def gpt_config(self) -> GPTConfig:
        """The :class:`resgrad.nn.model.GPTConfig` of this stack (block variants only)."""
        if self.is_lesson:
            raise ValueError(f"variant {self.variant!r} is the lesson's stack, not a GPT")
        return GPTConfig(
            vocab_size=self.vocab,
            block_size=self.seq,
            n_layer=self.depth,
            n_head=self.heads,
            n_embd=self.width,
            variant=self.variant,
            init=self.init,
        )

    def stack_config(self) -> StackConfig:
        """The lesson's :class:`StackConfig` of this stack at its first seed."""
        return StackConfig(
            depths=(self.depth,), scale=self.scale, width=self.width, batch=self.batch,
            seed=self.seeds[0],
        )  # fmt: skip

    def describe(self) -> dict:
        """The fields a record carries: what was measured, as it was measured."""
        if self.is_lesson:
            # the lesson's stack: (B, C) vectors (T = 1), no heads, its own init and loss
            return dict(
                variant=self.variant, depth=self.depth, width=self.width, heads=0, seq=1,
                batch=self.batch, init=f"lesson:{self.scale:g}", loss="ones",
            )  # fmt: skip
        return dict(
            variant=self.variant, depth=self.depth, width=self.width, heads=self.heads,
            seq=self.seq, batch=self.batch, init=self.init, loss=self.loss,
        )  # fmt: skip


@dataclass(frozen=True)
class Profile:
    """Everything one pass (one seed) measured, each norm per layer.

    ``stream_grad[i]`` = ||dL/dx_i|| and ``stream_act[i]`` = ||x_i|| for
    i = 0..L; ``param_grad[name][i]`` for block i = 0..L-1, where ``name`` is
    ``""`` for all of the block's parameters together, or a parameter's name
    without its ``blocks.{i}.`` prefix.
    """

    seed: int
    stream_grad: np.ndarray  # (L+1,)
    stream_act: np.ndarray  # (L+1,)
    param_grad: dict[str, np.ndarray]  # name -> (L,)

    def quantities(self) -> dict[str, np.ndarray]:
        """Quantity name -> per-layer values, in :data:`QUANTITIES` order."""
        out = {"stream_grad": self.stream_grad, "stream_act": self.stream_act}
        for name, v in self.param_grad.items():
            out["param_grad" + (f":{name}" if name else "")] = v
        return out


def _norm(a: np.ndarray) -> float:
    """||a||, accumulated in float64; a float32 array is cast in einsum's small buffers,
    never copied whole (a whole float64 copy of GPT-2's gradients is 1 GB of traffic)."""
    v = a.ravel()  # (n,) a view when a is contiguous
    if v.dtype == np.float64:
        return math.sqrt(float(np.dot(v, v)))
    return math.sqrt(float(np.einsum("i,i->", v, v, dtype=np.float64)))


def _lesson_profile(cfg: FlowConfig, seed: int, params) -> Profile:
    scfg = dataclasses.replace(cfg.stack_config(), seed=seed)
    bank = make_bank(scfg, cfg.depth) if params is None else list(params)
    prof = run_stack(scfg, cfg.depth, residual=cfg.variant == "lesson-residual", bank=bank)
    wg = np.asarray(prof.weight_grad_norms)  # (L,)
    return Profile(
        seed=seed,
        stream_grad=np.asarray(prof.grad_norms),  # (L+1,)
        stream_act=np.asarray(prof.act_norms),  # (L+1,)
        param_grad={"": wg, "W": wg.copy()},
    )


def _stack_profile(cfg: FlowConfig, seed: int, params, data_rng) -> Profile:
    """x_0 (B, T, C) through L blocks, then an upstream gradient of ones or of randn."""
    gcfg = cfg.gpt_config()
    B, T, C, L = cfg.batch, cfg.seq, cfg.width, cfg.depth
    x = data_rng.standard_normal((B, T, C))  # (B, T, C) x_0
    acts, caches = [_norm(x)], []
    for i in range(L):
        x, cache = blocks.block_forward(x, params, f"blocks.{i}", gcfg)  # (B, T, C)
        caches.append(cache)
        acts.append(_norm(x))
    if cfg.loss == "ones":
        dx = np.ones_like(x)  # (B, T, C), L = sum(x_L)
    else:
        dx = data_rng.standard_normal(x.shape)  # (B, T, C), L = <g, x_L>
    grads_norm, block_grads = [_norm(dx)], {}
    for i in reversed(range(L)):
        dx, grads = blocks.block_backward(dx, caches[i])  # (B, T, C)
        caches[i] = None  # free the cache as soon as it is used
        grads_norm.append(_norm(dx))
        block_grads.update({k: _norm(g) for k, g in grads.items()})  # keep norms, not arrays
    return Profile(
        seed=seed,
        stream_grad=np.array(grads_norm[::-1]),  # (L+1,)
        stream_act=np.array(acts),  # (L+1,)
        param_grad=per_block_norms(block_grads, L),
    )


def _lm_profile(cfg: FlowConfig, seed: int, model_obj, tokens, data_rng) -> Profile:
    """A whole GPT and its cross-entropy on random (or given) tokens."""
    B, T, V = cfg.batch, cfg.seq, cfg.vocab
    if tokens is None:
        seq = data_rng.integers(0, V, size=(B, T + 1))  # (B, T+1) random tokens
    else:
        seq = np.asarray(tokens)
        if seq.shape != (B, T + 1):
            raise ValueError(
                f"tokens must have shape (batch, seq + 1) = {(B, T + 1)}, got {seq.shape}"
            )
        if not np.issubdtype(seq.dtype, np.integer) or seq.min() < 0 or seq.max() >= V:
            raise ValueError(f"tokens must be integers in [0, {V}), got {seq.dtype} values")
    idx, targets = seq[:, :-1], seq[:, 1:]  # (B, T), (B, T): next-token prediction
    _, _, cache = model_obj.forward(idx, targets)
    grads, dxs = model_obj.backward_stream(cache)  # dxs: L+1 x (B, T, C)
    return Profile(
        seed=seed,
        stream_grad=np.array([_norm(d) for d in dxs]),  # (L+1,)
        stream_act=np.array([_norm(x) for x in cache.xs]),  # (L+1,)
        param_grad=per_block_norms({k: _norm(g) for k, g in grads.items()}, cfg.depth),
    )


def profile(
    cfg: FlowConfig,
    seed: int,
    params: Mapping[str, np.ndarray] | Sequence[np.ndarray] | None = None,
    tokens: np.ndarray | None = None,
) -> Profile:
    """One pass at one seed: the per-layer norms of :class:`Profile`.

    Parameters
    ----------
    cfg : FlowConfig
    seed : int
        Seeds the weights (unless ``params`` is given) and the data.
    params : dict or list, optional
        Given weights instead of the initialisation: a flat dict as
        ``GPT.params`` holds it (the "lm" loss needs the whole model's, the others
        the ``blocks.*`` entries), or for the lesson's variants the list of L
        (C, C) matrices.
    tokens : int array (B, T + 1), optional
        The "lm" loss's tokens (inputs ``[:, :-1]``, targets ``[:, 1:]``);
        random ones by default.
    """
    seed = _seed(seed)
    if cfg.is_lesson:
        if tokens is not None:
            raise ValueError("tokens are for the 'lm' loss; the lesson's stack takes none")
        return _lesson_profile(cfg, seed, params)
    if tokens is not None and cfg.loss != "lm":
        raise ValueError(f"tokens are for the 'lm' loss, got loss {cfg.loss!r}")
    gpt = GPT(cfg.gpt_config(), seed=seed, dtype=np.float64)
    if params is not None:
        missing = sorted(set(gpt.params) - set(params))
        if cfg.loss != "lm":
            missing = [k for k in missing if k.startswith("blocks.")]
        if missing:
            raise ValueError(f"params lacks {len(missing)} entries, e.g. {missing[0]!r}")
        for k in gpt.params:
            if k in params:
                if np.shape(params[k]) != gpt.params[k].shape:
                    raise ValueError(
                        f"params[{k!r}] has shape {np.shape(params[k])}, "
                        f"expected {gpt.params[k].shape}"
                    )
                gpt.params[k] = np.asarray(params[k], dtype=np.float64)
    data_rng = np.random.default_rng([seed, 1])
    if cfg.loss == "lm":
        return _lm_profile(cfg, seed, gpt, tokens, data_rng)
    return _stack_profile(cfg, seed, gpt.params, data_rng)


@dataclass(frozen=True)
class FlowRecord:
    """One (layer, quantity) of a stack, aggregated over ``n_seeds`` seeds."""

    variant: str
    depth: int  # L
    width: int  # C
    heads: int  # H (0 for the lesson's stack)
    seq: int  # T (1 for the lesson's stack)
    batch: int  # B
    init: str
    loss: str
    n_seeds: int  # K
    layer: int  # i: 0..L for stream quantities, 0..L-1 for param_grad
    quantity: str  # one of QUANTITIES, or "param_grad:<name>"
    mean: float
    std: float  # population std over the K seeds (0 for K = 1)
    min: float
    max: float

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def aggregate(cfg: FlowConfig, profiles: Sequence[Profile]) -> list[FlowRecord]:
    """Mean, std, min and max over the seeds' profiles, one record per (layer, quantity)."""
    if not profiles:
        raise ValueError("aggregate needs at least one profile, got none")
    base = cfg.describe()
    per_q = [p.quantities() for p in profiles]
    records = []
    for q in per_q[0]:
        v = np.stack([pq[q] for pq in per_q])  # (K, n)
        mean, std, lo, hi = v.mean(0), v.std(0), v.min(0), v.max(0)  # (n,) each
        for i in range(v.shape[1]):
            records.append(
                FlowRecord(
                    **base,
                    n_seeds=len(profiles),
                    layer=i,
                    quantity=q,
                    mean=float(mean[i]),
                    std=float(std[i]),
                    min=float(lo[i]),
                    max=float(hi[i]),
                )  # fmt: skip
            )
    return records


def measure(
    cfg: FlowConfig,
    params: Mapping[str, np.ndarray] | Sequence[np.ndarray] | None = None,
    tokens: np.ndarray | None = None,
) -> list[FlowRecord]:
    """Profile ``cfg`` at each of its seeds and aggregate: see :func:`profile`, :func:`aggregate`.

    Returns
    -------
    list of FlowRecord
        For each quantity (``stream_grad``, ``stream_act``, ``param_grad``, then
        ``param_grad:<name>`` per parameter), one record per layer, layer 0 first.
    """
    return aggregate(cfg, [profile(cfg, s, params, tokens) for s in cfg.seeds])
