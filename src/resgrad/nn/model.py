"""The GPT: embeddings, L blocks in one residual scheme, a final norm, a tied LM head.

Legend: B = batch, T = time, C = channels (n_embd), H = heads, D = C / H,
V = vocab size, L = n_layer.

The forward is a list of layer calls, numbered; the backward walks them in
reverse, quoting each. The LM head is tied to the token embedding (``logits =
x @ wte.T``), so ``wte`` receives two gradients, one from each use, summed on one
line. Parameters and gradients are flat dicts with the same keys; pick the
dtype at construction: float32 to train, float64 to check gradients.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from resgrad.nn.blocks import (
    FINAL_LN,
    INITS,
    VARIANTS,
    BlockCache,
    block_backward,
    block_forward,
    block_param_shapes,
    init_block_params,
)
from resgrad.nn.layers import (
    ACTIVATIONS,
    CrossEntropyCache,
    DropoutCache,
    EmbeddingCache,
    LayerNormCache,
    cross_entropy_backward,
    cross_entropy_forward,
    dropout_backward,
    dropout_forward,
    embedding_backward,
    embedding_forward,
    layernorm_backward,
    layernorm_forward,
)

__all__ = [
    "ACTIVATIONS", "DTYPES", "GPT", "INITS", "VARIANTS", "GPTCache", "GPTConfig", "per_block_norms",
]  # fmt: skip

DTYPES = (np.float32, np.float64)  # float32 trains, float64 checks


def _require_int(name: str, value: object, lo: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {value!r}")


MAX_ALPHA = 10.0  # rezero_alpha's largest: a branch 10x its input is no longer a residual
LN_SCALING_POWER = 0.5  # ln-scaling's exponent by default: Sun et al.'s 1/sqrt(l)


@dataclass(frozen=True)
class GPTConfig:
    """Shape and scheme of a GPT. Validated on construction: a bad field raises ValueError."""

    vocab_size: int = 65  # V, tokens in the vocabulary (65: Tiny Shakespeare's characters)
    block_size: int = 64  # longest sequence T the position embedding covers
    n_layer: int = 4  # L, transformer blocks
    n_head: int = 4  # H, attention heads; must divide n_embd
    n_embd: int = 128  # C, width of the residual stream
    dropout: float = 0.0  # in training: on embeddings, attention, sublayer outputs
    variant: str = "pre-ln"  # residual scheme, one of VARIANTS
    init: str = "gpt2"  # initialization scheme, one of INITS
    bias: bool = True  # biases in the linear layers and the LayerNorms
    ln_eps: float = 1e-5  # LayerNorm's epsilon, added to the variance
    # the MLP's GELU, one of ACTIVATIONS: "gelu-tanh" (GPT-2's tanh form) or "gelu-erf" (exact,
    # torch.nn.GELU(): nanoGPT's); a checkpoint from before this field is "gelu-tanh"
    activation: str = "gelu-tanh"
    # rezero's alpha at initialization, every block's (Bachlechner et al. 2020: 0, every branch
    # silent and every path of the gradient the identity's); above 0 the branches speak from
    # the first step: the dose of the robustness study. 0 for every other scheme
    rezero_alpha: float = 0.0
    # ln-scaling's exponent p: block l's LayerNorm outputs times 1/l^p (Sun et al. 2025, arXiv:
    # 2502.05795: 1/2), the dose from pre-ln (0) to the paper's (0.5) and beyond, up to 1.
    # None: the paper's 0.5 under ln-scaling (set on construction), unset for every other scheme
    ln_scaling_power: float | None = None

    def __post_init__(self):
        _require_int("vocab_size", self.vocab_size, 1)
        _require_int("block_size", self.block_size, 1)
        _require_int("n_layer", self.n_layer, 1)
        _require_int("n_head", self.n_head, 1)
        _require_int("n_embd", self.n_embd, 1)
        if self.n_embd % self.n_head:
            raise ValueError(
                f"n_head={self.n_head} does not divide n_embd={self.n_embd}; "
                "expected n_embd to be a multiple of n_head"
            )
        d = self.dropout
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0.0 <= d < 1.0:
            raise ValueError(f"dropout must be a number in [0, 1), got {d!r}")
        if self.variant not in VARIANTS:
            raise ValueError(
                f"unknown variant {self.variant!r}; expected one of {', '.join(VARIANTS)}"
            )
        if self.init not in INITS:
            raise ValueError(f"unknown init {self.init!r}; expected one of {', '.join(INITS)}")
        if not isinstance(self.bias, bool):
            raise ValueError(f"bias must be True or False, got {self.bias!r}")
        e = self.ln_eps
        if isinstance(e, bool) or not isinstance(e, (int, float)) or not 0.0 < e < math.inf:
            raise ValueError(f"ln_eps must be a positive finite number, got {e!r}")
        if not isinstance(self.activation, str) or self.activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown activation {self.activation!r}; expected one of {', '.join(ACTIVATIONS)}"
            )
        a = self.rezero_alpha
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0.0 <= a <= MAX_ALPHA:
            raise ValueError(f"rezero_alpha must be a number in [0, {MAX_ALPHA:g}], got {a!r}")
        if a and self.variant != "rezero":
            raise ValueError(f"rezero_alpha {a!r} is rezero's alpha at initialization; variant "
                             f"{self.variant!r} has none (expected 0)")  # fmt: skip
        p = self.ln_scaling_power
        if p is not None and self.variant != "ln-scaling":
            raise ValueError(f"ln_scaling_power {p!r} is ln-scaling's exponent; variant "
                             f"{self.variant!r} has none (expected it unset)")  # fmt: skip
        if self.variant == "ln-scaling":
            if p is None:
                object.__setattr__(self, "ln_scaling_power", LN_SCALING_POWER)  # the paper's
            elif isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
                raise ValueError(f"ln_scaling_power must be a number in [0, 1], got {p!r}")

    @property
    def final_ln(self) -> bool:
        """Whether the model ends in a LayerNorm (pre-ln and none do; post-norm schemes do not)."""
        return self.variant in FINAL_LN


class GPTCache(NamedTuple):
    emb: EmbeddingCache  # token + position embedding
    drop: DropoutCache  # dropout on the embeddings
    blocks: list[BlockCache]  # L block caches
    ln_f: LayerNormCache | None  # final LayerNorm, where the scheme has one
    xf: np.ndarray  # (B, T, C) input of the LM head
    wte: np.ndarray  # (V, C) the tied head's weight
    ce: CrossEntropyCache | None  # None when forward had no targets
    xs: list[np.ndarray]  # L + 1 arrays (B, T, C): the stream at each block input, then the output


class GPT:
    """A GPT with hand-written forward and backward passes.

    Parameters
    ----------
    cfg : GPTConfig
    seed : int
        Seeds the initialization (``np.random.default_rng(seed)``). The same seed
        gives the same numbers in float32 and float64.
    dtype : np.float32 or np.float64

    Attributes
    ----------
    cfg : GPTConfig
    params : dict of str to ndarray
        Flat and plain: any entry can be set by hand (same shape and dtype).
        Keys: ``wte`` (V, C), ``wpe`` (block_size, C), ``blocks.{i}.*`` and, where
        the scheme has one, ``ln_f.g``, ``ln_f.b``.
    dtype : numpy dtype
    """

    def __init__(self, cfg: GPTConfig, seed: int = 0, dtype=np.float32):
        if not isinstance(cfg, GPTConfig):
            raise TypeError(f"cfg must be a GPTConfig, got {type(cfg).__name__}")
        if np.dtype(dtype) not in [np.dtype(d) for d in DTYPES]:
            raise ValueError(f"dtype must be float32 or float64, got {np.dtype(dtype)}")
        self.cfg = cfg
        self.dtype = np.dtype(dtype)
        self.shapes = self.param_shapes(cfg)
        rng = np.random.default_rng(seed)
        V, C = cfg.vocab_size, cfg.n_embd
        params = {
            "wte": rng.standard_normal((V, C)) * 0.02,  # (V, C) both inits: normal(0, 0.02)
            "wpe": rng.standard_normal((cfg.block_size, C)) * 0.02,  # (block_size, C)
        }
        for i in range(cfg.n_layer):
            params.update(init_block_params(cfg, i, rng, np.float64))
        if cfg.final_ln:
            params["ln_f.g"] = np.ones(C)  # (C,)
            if cfg.bias:
                params["ln_f.b"] = np.zeros(C)  # (C,)
        self.params = {k: params[k].astype(self.dtype) for k in self.shapes}

    @classmethod
    def from_params(cls, cfg: GPTConfig, params: Mapping[str, np.ndarray]) -> GPT:
        """A GPT holding ``params`` (names, shapes, one float dtype checked), drawing no init.

        For weights that come from elsewhere (a file, a hand-made test): building GPT-2
        124M with ``GPT(cfg)`` first draws 124M random numbers in float64 (seconds, and
        1 GB); this does not. The arrays are used as given, not copied.
        """
        if not isinstance(cfg, GPTConfig):
            raise TypeError(f"cfg must be a GPTConfig, got {type(cfg).__name__}")
        first = next(iter(params.values()), None)
        dtype = np.dtype(first.dtype if isinstance(first, np.ndarray) else np.float32)
        if dtype not in [np.dtype(d) for d in DTYPES]:
            raise ValueError(f"dtype must be float32 or float64, got {dtype}")
        model = cls.__new__(cls)
        model.cfg, model.dtype, model.shapes = cfg, dtype, cls.param_shapes(cfg)
        model.params = dict(params)
        model.check_params()
        model.params = {k: model.params[k] for k in model.shapes}  # the model's order
        return model

    @staticmethod
    def param_shapes(cfg: GPTConfig) -> dict[str, tuple[int, ...]]:
        """Name -> shape of every parameter of a GPT under ``cfg``, in the model's order."""
        C = cfg.n_embd
        shapes = {"wte": (cfg.vocab_size, C), "wpe": (cfg.block_size, C)}
        for i in range(cfg.n_layer):
            shapes.update(block_param_shapes(cfg, i))
        if cfg.final_ln:
            shapes["ln_f.g"] = (C,)
            if cfg.bias:
                shapes["ln_f.b"] = (C,)
        return shapes

    def check_params(self) -> None:
        """Raise ValueError/TypeError if ``params`` lacks a key, has an extra one or a bad array."""
        for k, shape in self.shapes.items():
            if k not in self.params:
                raise ValueError(f"params lacks {k!r}; expected an array of shape {shape}")
            a = self.params[k]
            if not isinstance(a, np.ndarray) or a.shape != shape:
                got = a.shape if isinstance(a, np.ndarray) else type(a).__name__
                raise ValueError(f"params[{k!r}] has shape {got}; expected {shape}")
            if a.dtype != self.dtype:
                raise TypeError(f"params[{k!r}] has dtype {a.dtype}; the model is {self.dtype}")
        extra = set(self.params) - set(self.shapes)
        if extra:
            raise ValueError(
                f"params has unexpected key {sorted(extra)[0]!r} for variant "
                f"{self.cfg.variant!r}; expected only {list(self.shapes)}"
            )

    def num_params(self) -> int:
        """Number of parameters (the tied LM head is counted once, as wte)."""
        return int(sum(math.prod(s) for s in self.shapes.values()))

    def flops_per_token(self, T: int | None = None) -> int:
        """Matmul FLOPs of one forward plus backward pass, per token, at sequence length T.

        Counts 2 FLOPs per multiply-add of every matmul: per block, the fused QKV
        (6C^2), the output projection (2C^2), the MLP (16C^2) and attention's
        ``q k^T`` and ``att v`` over the full T x T square (4TC); then the LM head
        (2CV). The backward does two matmuls for every forward one, so the total is
        3x the forward. Elementwise work (softmax, GELU, LayerNorm) is left out: it
        is O(TC) or O(HT^2), not O(C^2). This is the model's count, the same for
        any implementation: :func:`resgrad.nn.layers.sdpa_forward` skips the part of
        the square after each query block (a quarter of it at T = 256, none at
        T <= 128), as PyTorch's causal attention skips it too.
        """
        cfg = self.cfg
        T = cfg.block_size if T is None else T
        C, L, V = cfg.n_embd, cfg.n_layer, cfg.vocab_size
        forward = L * (24 * C * C + 4 * T * C) + 2 * C * V
        return 3 * forward

    def flops_per_step(self, B: int, T: int) -> int:
        """Matmul FLOPs of one training step (forward and backward) on a (B, T) batch."""
        return B * T * self.flops_per_token(T)

    def _check_ids(self, a, name: str) -> np.ndarray:
        a = np.asarray(a)
        if a.ndim != 2 or not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"{name} must be a 2-D integer array (B, T), got {a.dtype} {a.shape}")
        if a.shape[1] > self.cfg.block_size:
            raise ValueError(
                f"{name} has T={a.shape[1]}, longer than block_size={self.cfg.block_size}"
            )
        return a

    def forward(
        self,
        idx: np.ndarray,
        targets: np.ndarray | None = None,
        *,
        train: bool = False,
        rng: np.random.Generator | None = None,
        ignore_index: int | None = None,
    ) -> tuple[np.ndarray, float | None, GPTCache]:
        """Logits, the mean cross-entropy loss and the cache for :meth:`backward`.

        Parameters
        ----------
        idx : int ndarray, shape (B, T)
            Token ids in [0, V), T <= block_size.
        targets : int ndarray, shape (B, T), optional
            Next-token ids in [0, V) (or ``ignore_index``). Without them the loss is None.
        train : bool
            Enables dropout (when cfg.dropout > 0), masks drawn from ``rng``.
        rng : numpy.random.Generator, optional
            Required when training with dropout.
        ignore_index : int, optional
            Target positions equal to it are left out of the loss.

        Returns
        -------
        logits : ndarray, shape (B, T, V), the model's dtype
        loss : float or None
        cache : GPTCache
        """
        self.check_params()
        idx = self._check_ids(idx, "idx")
        if targets is not None:
            targets = self._check_ids(targets, "targets")
            if targets.shape != idx.shape:
                raise ValueError(f"targets have shape {targets.shape}; expected {idx.shape}")
        cfg, P = self.cfg, self.params
        x, c_emb = embedding_forward(idx, P["wte"], P["wpe"])  # 1) (B,T,C) wte[idx] + wpe[:T]
        x, c_drop = dropout_forward(x, cfg.dropout, train=train, rng=rng)  # 2) (B,T,C)
        xs, c_blocks = [x], []
        for i in range(cfg.n_layer):
            x, c = block_forward(x, P, f"blocks.{i}", cfg, train=train, rng=rng)  # 3) (B,T,C)
            xs.append(x)
            c_blocks.append(c)
        c_ln = None
        if cfg.final_ln:
            x, c_ln = layernorm_forward(x, P["ln_f.g"], P.get("ln_f.b"), cfg.ln_eps)  # 4) (B,T,C)
        B, T, C = x.shape
        # 5) the LM head, tied to wte: (B*T,C) @ (C,V) -> (B,T,V)
        logits = (x.reshape(-1, C) @ P["wte"].T).reshape(B, T, -1)  # (B,T,V)
        loss, c_ce = None, None
        if targets is not None:
            loss, c_ce = cross_entropy_forward(logits, targets, ignore_index)  # 6) float
        cache = GPTCache(c_emb, c_drop, c_blocks, c_ln, x, P["wte"], c_ce, xs)
        return logits, loss, cache

    def backward(
        self, cache: GPTCache, dlogits: np.ndarray | None = None, dloss: float = 1.0
    ) -> dict[str, np.ndarray]:
        """Gradients of the loss with respect to every parameter, under the same names.

        Parameters
        ----------
        cache : GPTCache
            From :meth:`forward` with targets.
        dlogits : ndarray, shape (B, T, V), optional
            Start from this upstream gradient of the logits instead of the loss
            (then forward's targets are not needed).
        dloss : float
            The upstream gradient of the loss (1.0: dL/dL; unused with ``dlogits``).
            A batch split into shards starts each shard's backward from its share
            of the batch (:mod:`resgrad.train.shards`).

        Returns
        -------
        grads : dict of str to ndarray, the keys and order of ``params``
        """
        return self.backward_stream(cache, dlogits, dloss)[0]

    def backward_stream(
        self,
        cache: GPTCache,
        dlogits: np.ndarray | None = None,
        dloss: float = 1.0,
        *,
        release: bool = False,
    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        """:meth:`backward`, plus the gradient of the residual stream at every block boundary.

        With ``release``, the backward frees what it no longer needs as it goes: dlogits
        are built in the cache's softmax probabilities, and each block's saved
        activations are dropped once its backward is done (GPT-2 124M, T=256, B=4, a
        training step with 2 shards: peak memory 4266 -> 3464 MiB). The cache is then spent: a
        second backward from it is refused. ``cache.xs`` is kept.

        Returns
        -------
        grads : dict of str to ndarray
        dxs : list of L + 1 ndarrays, shape (B, T, C)
            ``dxs[i] = dL/dx_i``, x_i the input of block i (``dxs[L]``: the output
            of the last block), matching ``cache.xs``.
        """
        cfg = self.cfg
        if any(c is None for c in cache.blocks):
            raise ValueError("this cache was spent by a backward with release=True")
        if dlogits is None:
            if cache.ce is None:
                raise ValueError("backward needs a forward with targets (or an explicit dlogits)")
            # 6) loss = cross_entropy(logits, targets)
            out = cache.ce.probs if release else None  # (B,T,V) the probabilities' buffer
            dlogits = cross_entropy_backward(dloss, cache.ce, out=out)  # (B,T,V)
        elif dlogits.shape != cache.xf.shape[:2] + (cache.wte.shape[0],):
            raise ValueError(f"dlogits have shape {dlogits.shape}; expected the logits' shape")
        B, T, V = dlogits.shape
        C = cfg.n_embd
        grads: dict[str, np.ndarray] = {}
        # 5) logits = x @ wte.T  ->  dx = dlogits @ wte, dwte_head = dlogits^T @ x
        dx = (dlogits.reshape(-1, V) @ cache.wte).reshape(B, T, C)  # (B*T,V) @ (V,C) -> (B,T,C)
        dwte_head = dlogits.reshape(-1, V).T @ cache.xf.reshape(-1, C)  # (V,N) @ (N,C) -> (V,C)
        # 4) x = ln_f(x)
        if cache.ln_f is not None:
            dx, grads["ln_f.g"], db = layernorm_backward(dx, cache.ln_f)  # (B,T,C), (C,), (C,)
            if db is not None:
                grads["ln_f.b"] = db
        # 3) x_{i+1} = block_i(x_i), i = L-1 .. 0
        dxs = [dx]
        for i in reversed(range(len(cache.blocks))):
            dx, g = block_backward(dx, cache.blocks[i])  # (B,T,C)
            if release:
                cache.blocks[i] = None  # block i's activations: no longer needed
            grads.update(g)
            dxs.append(dx)
        dxs.reverse()  # dxs[i] = dL/dx_i
        # 2) x = dropout(x)
        dx = dropout_backward(dx, cache.drop)  # (B,T,C)
        # 1) x = wte[idx] + wpe[:T]; tied: wte is the embedding and the LM head, so the
        # embedding's rows are added into the head's gradient (no second (V, C) array)
        grads["wte"], grads["wpe"] = embedding_backward(dx, cache.emb, dwte=dwte_head)
        return {k: grads[k] for k in self.shapes}, dxs


def per_block_norms(norms: Mapping[str, float], L: int) -> dict[str, np.ndarray]:
    """Per-layer arrays from the norms of named gradients (keys as in ``GPT.params``).

    Returns name -> (L,) for every ``blocks.{i}.<name>`` key, plus ``""`` -> (L,) the
    norm of each block's parameters together: sqrt of the sum of their squares.
    Other keys (embeddings, ln_f) are not per layer and are left out.
    """
    out: dict[str, np.ndarray] = {}
    for key, n in norms.items():
        parts = key.split(".", 2)
        if len(parts) == 3 and parts[0] == "blocks":
            out.setdefault(parts[2], np.zeros(L))[int(parts[1])] = n  # (L,)
    total = np.sqrt(sum(np.square(v) for v in out.values()))  # (L,)
    return {"": total, **out}
