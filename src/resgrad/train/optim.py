"""AdamW, gradient clipping by global norm, and the warmup + cosine learning rate.

Parameters and gradients are flat dicts with the same keys (``"blocks.3.attn.w_qkv"``).
The optimizer updates the parameter arrays in place, so a model holding the same
dict sees the new values without copying.

AdamW follows ``torch.optim.AdamW`` (Loshchilov & Hutter, "Decoupled Weight
Decay Regularization", 2019) step for step, including the order of operations,
so the two agree to rounding in float64 (tests/train/test_optim.py). As in nanoGPT,
weight decay applies to every parameter with 2 or more dimensions (the linear
weights and the embeddings) and never to biases, LayerNorm gains or rezero's
alpha.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from concurrent.futures import Executor
from dataclasses import dataclass

import numpy as np

from resgrad.nn import kernels

__all__ = [
    "AdamW",
    "AdamWConfig",
    "LRSchedule",
    "adamw_piece",
    "clip_coef",
    "clip_grad_norm",
    "fused_kernel",
    "grad_norms",
    "share",
]


@dataclass(frozen=True)
class AdamWConfig:
    lr: float = 1e-3  # base learning rate; step() may be given the scheduled one
    beta1: float = 0.9  # decay of the first-moment average
    beta2: float = 0.99  # decay of the second-moment average (nanoGPT's char recipe)
    eps: float = 1e-8  # added to sqrt(v_hat), as torch
    weight_decay: float = 0.1  # decoupled: p -= lr * wd * p, on 2-D+ parameters only

    def __post_init__(self):
        if not (math.isfinite(self.lr) and self.lr >= 0):
            raise ValueError(f"lr must be a finite number >= 0, got {self.lr!r}")
        for name in ("beta1", "beta2"):
            v = getattr(self, name)
            if not 0.0 <= v < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {v!r}")
        if not (math.isfinite(self.eps) and self.eps > 0):
            raise ValueError(f"eps must be a finite number > 0, got {self.eps!r}")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(
                f"weight_decay must be a finite number >= 0, got {self.weight_decay!r}"
            )


# A parameter is cut into slices for the parts only when each slice holds at least this
# many elements. Below it, the ~12 NumPy calls per slice cost more in thread hand-offs
# than the second core gains, so the small ones (biases, gains, small matrices) are
# updated whole in part 0, and a model with no large parameter is updated on one thread.
# ``python benchmarks/bench_adamw.py``, ms per step, one part / 2 parts / 2 parts with every
# parameter sliced (the rule before this one): cpu-recipe (0.8M parameters, none large)
# 1.87 / 1.89 / 2.73; medium (10.8M) 25.3 / 15.5 / 16.0.
MIN_SLICE = 1 << 16
# Elements per piece of a parameter in one pass of the step: the 5 arrays a piece
# touches (p, g, m, v, scratch; 2.5 MB in float32) stay in cache across the step's ~12
# passes instead of streaming from memory each time. AdamW step, 2 parts, whole slices ->
# pieces of 2^17: GPT-2 124M 234 -> 144 ms; medium 14.1 -> 15.0, cpu-recipe 2.0 -> 2.0
# (2^14-2^18 measured; the scratch shrinks from the largest slice to one piece).
CHUNK = 1 << 17
# Elements each thread must get before whole arrays are shared among the parts
# (:func:`share`): below it, waking the pool's threads costs more than the second core
# gains. grad_norms, ms, one thread / 2 (2 shared): cpu-recipe (0.8M) 0.45 / 0.56,
# medium (10.8M) 7.2 / 4.7, GPT-2 124M 81.7 / 48.1. (The update ratios' dots are BLAS's,
# already on its threads: shared, GPT-2's took 80 ms against 64.)
MIN_SHARE = 1 << 20


def share(pool: Executor | None, parts: int, arrays: Mapping[str, np.ndarray], fn) -> dict:
    """``{k: fn(k) for k in arrays}``, each array's ``fn`` whole on one of ``parts`` threads.

    The arrays go to the threads by size, largest first, each to the least loaded, so
    each ``fn(k)`` runs exactly as it would alone: the results are the same, bit for bit,
    on any number of threads. The dict comes back in the keys' order. One thread (no
    ``pool``, one part, or under ``MIN_SHARE`` elements a part) calls ``fn`` in order.
    """
    total = sum(a.size for a in arrays.values())
    if pool is None or parts < 2 or total < parts * MIN_SHARE:
        return {k: fn(k) for k in arrays}
    groups: list[list[str]] = [[] for _ in range(parts)]
    load = [0] * parts
    for k in sorted(arrays, key=lambda k: -arrays[k].size):  # stable: ties keep key order
        j = load.index(min(load))
        groups[j].append(k)
        load[j] += arrays[k].size
    found: dict = {}
    for part in pool.map(lambda keys: {k: fn(k) for k in keys}, groups):
        found.update(part)
    return {k: found[k] for k in arrays}


def _sliced(p: np.ndarray, parts: int) -> bool:
    """Whether ``p`` is cut into ``parts`` flat slices: large, with a flat view to write through."""
    return parts > 1 and p.size >= parts * MIN_SLICE and p.flags.c_contiguous


def adamw_piece(p, g, m, v, decay, c1, b2, c2, bc2, eps, step) -> None:
    """The AdamW step on 1-D arrays ``p, g, m, v``, element by element, in place.

    Every operation and rounding of :meth:`AdamW._update`'s NumPy passes, in the same
    order, in one pass over memory instead of ~12: the constants come in p's dtype
    (``decay = 1 - lr wd`` or 1, ``c1 = 1 - beta1``, ``b2 = beta2``, ``c2 = 1 - beta2``,
    ``bc2 = sqrt(1 - beta2^t)``, ``step = lr / (1 - beta1^t)``), so the result is the
    same bit for bit (tests/train/test_optim.py). numba compiles it (:func:`fused_kernel`).
    """
    for i in range(p.size):
        gi = g[i]
        mi = m[i] + (gi - m[i]) * c1  # m = beta1 m + (1 - beta1) g
        vi = v[i] * b2 + (gi * c2) * gi  # v = beta2 v + (1 - beta2) g^2
        m[i] = mi
        v[i] = vi
        p[i] = p[i] * decay - mi / (np.sqrt(vi) / bc2 + eps) * step


_FUSED: list = []  # [the compiled adamw_piece, or None without numba], once looked up


def fused_kernel():
    """:func:`adamw_piece` compiled by numba (cached on disk, GIL released), or None when
    numba is not installed. Compiled on first use, so that importing resgrad stays fast."""
    if not _FUSED:
        try:
            import numba
        except ImportError:  # pragma: no cover - numba is a dependency
            _FUSED.append(None)
        else:
            _FUSED.append(numba.njit(cache=True, nogil=True, error_model="numpy")(adamw_piece))
    return _FUSED[0]


class AdamW:
    """AdamW over a flat dict of parameters, updated in place.

    Parameters
    ----------
    params : dict of str to ndarray
        The model's parameters; the arrays themselves are updated.
    cfg : AdamWConfig
    fused : bool, optional
        Update each piece in one compiled pass (:func:`adamw_piece`, numba) instead of
        the ~12 NumPy passes of :meth:`_update`; the result is the same bit for bit.
        Default: when numba is installed.

    Notes
    -----
    One step, for each parameter p with gradient g (``t`` counts steps from 1)::

        p = p * (1 - lr * wd)              # decoupled weight decay (2-D+ only)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g^2
        p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
    """

    def __init__(self, params: Mapping[str, np.ndarray], cfg: AdamWConfig | None = None,
                 fused: bool | None = None):  # fmt: skip
        self.cfg = cfg if cfg is not None else AdamWConfig()
        self.fused = fused
        self.params = params
        self.step_count = 0
        self.m = {k: np.zeros(p.shape, p.dtype) for k, p in params.items()}  # C order
        self.v = {k: np.zeros(p.shape, p.dtype) for k, p in params.items()}
        self.decay = {k: p.ndim >= 2 for k, p in params.items()}
        # scratch per part and dtype, as long as the largest parameter's part: step() builds
        # its temporaries in views of it instead of allocating ~6 fresh arrays per parameter
        # (medium, 10.8M parameters: 21.1 -> 18.4 ms per step)
        self._scratch: dict[int, list[dict[np.dtype, np.ndarray]]] = {}

    def step(
        self,
        grads: Mapping[str, np.ndarray],
        lr: float | None = None,
        *,
        pool: Executor | None = None,
        parts: int = 1,
    ) -> None:
        """Update every parameter in place from ``grads`` (same keys), at ``lr``
        (the config's when None).

        With a thread ``pool``, every parameter is cut into ``parts`` flat slices and
        part j of each is updated on a thread of its own (NumPy releases the GIL). The
        update is elementwise, so the result is the same, bit for bit, for any ``parts``.
        """
        if grads.keys() != self.params.keys():
            missing = sorted(self.params.keys() - grads.keys())
            extra = sorted(grads.keys() - self.params.keys())
            raise ValueError(
                f"gradient keys differ from parameters: missing {missing}, extra {extra}"
            )
        c = self.cfg
        lr = c.lr if lr is None else float(lr)
        self.step_count += 1
        t = self.step_count
        step_size = lr / (1 - c.beta1**t)  # lr / bias correction of m
        bc2_sqrt = math.sqrt(1 - c.beta2**t)  # sqrt of the bias correction of v
        if pool is None or not any(_sliced(p, parts) for p in self.params.values()):
            parts = 1  # nothing large enough to share: one thread, no hand-offs
        scratch = self._scratch_for(parts)
        if parts == 1:
            self._update(grads, lr, step_size, bc2_sqrt, 0, 1, scratch[0])
        else:
            done = pool.map(
                lambda j: self._update(grads, lr, step_size, bc2_sqrt, j, parts, scratch[j]),
                range(parts),
            )
            list(done)  # waits, and raises what a part raised

    def _scratch_for(self, parts: int) -> list[dict[np.dtype, np.ndarray]]:
        """``parts`` scratch arrays per dtype, each as long as the longest piece it will hold."""
        sizes: dict[np.dtype, int] = {}
        for p in self.params.values():
            n = min(p.size, CHUNK) if p.flags.c_contiguous else p.size
            sizes[p.dtype] = max(sizes.get(p.dtype, 0), n)
        have = self._scratch.get(parts)
        if have is None or any(have[0][dt].size < n for dt, n in sizes.items()):
            self._scratch[parts] = [
                {dt: np.empty(n, dtype=dt) for dt, n in sizes.items()} for _ in range(parts)
            ]
        return self._scratch[parts]

    def _pieces(self, grads, part: int, parts: int):
        """``(name, p, g, m, v)``: the views part ``part`` of ``parts`` updates, in order.

        A parameter with a flat view comes in pieces of at most ``CHUNK`` elements, so
        the step's ~12 passes over a piece run in cache, not memory; a large one is first
        cut into ``parts`` slices (:func:`_sliced`), a small one goes whole to part 0.
        One without a flat view (Fortran order) is one piece, in part 0.
        """
        for k, p_all in self.params.items():
            arrays = (p_all, grads[k], self.m[k], self.v[k])
            if not p_all.flags.c_contiguous:
                if part == 0:
                    yield k, *arrays
                continue
            n = p_all.size
            if _sliced(p_all, parts):
                a, b = n * part // parts, n * (part + 1) // parts
            else:
                a, b = 0, (n if part == 0 else 0)
            flat = [x.reshape(-1) for x in arrays]  # (n,) views
            for i in range(a, b, CHUNK):
                j = min(i + CHUNK, b)
                yield k, *(x[i:j] for x in flat)

    def _update(self, grads, lr, step_size, bc2_sqrt, part, parts, scratch) -> None:
        """The AdamW step on part ``part`` of ``parts`` of every parameter, piece by piece."""
        c = self.cfg
        kernel = fused_kernel() if self.fused is not False else None
        if self.fused and kernel is None:
            raise ValueError("AdamW(fused=True) needs numba, which is not installed")
        for k, p, g, m, v in self._pieces(grads, part, parts):
            if kernel is not None and p.ndim == 1 and p.dtype == g.dtype:  # a flat piece
                dt = p.dtype.type
                kernel(p, g, m, v, dt(1 - lr * c.weight_decay) if self.decay[k] else dt(1),
                       dt(1 - c.beta1), dt(c.beta2), dt(1 - c.beta2), dt(bc2_sqrt), dt(c.eps),
                       dt(step_size))  # fmt: skip
                continue
            tmp = scratch[p.dtype][: p.size].reshape(p.shape)  # p's shape: (piece,) or whole
            if self.decay[k]:
                p *= 1 - lr * c.weight_decay  # decoupled decay, before the Adam step
            # the same operations, in the same order, as m += (1 - beta1) * (g - m) etc.
            np.subtract(g, m, out=tmp)
            tmp *= 1 - c.beta1
            m += tmp  # m = beta1 m + (1 - beta1) g, torch's lerp
            v *= c.beta2
            np.multiply(g, 1 - c.beta2, out=tmp)
            tmp *= g
            v += tmp  # v = beta2 v + (1 - beta2) g^2
            denom = np.sqrt(v, out=tmp)
            denom /= bc2_sqrt
            denom += c.eps  # sqrt(v_hat) + eps
            update = np.divide(m, denom, out=tmp)  # m / (sqrt(v_hat) + eps)
            update *= step_size
            p -= update

    def state_dict(self) -> dict[str, np.ndarray]:
        """The state as a flat dict of arrays: ``"step"``, ``"m.<name>"``, ``"v.<name>"``."""
        state = {"step": np.array(self.step_count, dtype=np.int64)}
        state.update({f"m.{k}": a for k, a in self.m.items()})
        state.update({f"v.{k}": a for k, a in self.v.items()})
        return state

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore :meth:`state_dict`'s output; names, shapes and dtypes must match."""
        expected = {"step"} | {f"{s}.{k}" for s in "mv" for k in self.params}
        if set(state) != expected:
            missing = sorted(expected - set(state))[:5]
            extra = sorted(set(state) - expected)[:5]
            raise ValueError(
                f"optimizer state does not match the parameters: missing {missing}, extra {extra}"
            )
        step = np.asarray(state["step"])  # () int64, as state_dict writes it
        if step.shape != () or not np.issubdtype(step.dtype, np.integer) or step < 0:
            raise ValueError(
                f"optimizer state step is {state['step']!r}; expected one integer >= 0 "
                "(the steps taken)"
            )
        for k, p in self.params.items():  # every array checked before any is taken
            for s in "mv":
                a = state[f"{s}.{k}"]
                if a.shape != p.shape or a.dtype != p.dtype:
                    raise ValueError(
                        f"optimizer state {s}.{k} has shape {a.shape} {a.dtype}, "
                        f"expected {p.shape} {p.dtype}"
                    )
        for k in self.params:
            self.m[k] = np.array(state[f"m.{k}"], copy=True, order="C")
            self.v[k] = np.array(state[f"v.{k}"], copy=True, order="C")
        self.step_count = int(step)


def grad_norms(
    grads: Mapping[str, np.ndarray], *, pool: Executor | None = None, parts: int = 1
) -> dict[str, float]:
    """The L2 norm of each gradient, accumulated in float64 (no float32 overflow).

    Each gradient is widened ``CHUNK`` elements at a time into a float64 buffer, not
    whole: no float64 copy of the largest gradient (309 MB for GPT-2's wte), and the
    widened piece is summed while in cache (ms per call, whole copies -> pieces: GPT-2 124M
    162 -> 92, medium 9.1 -> 8.5, cpu-recipe 0.55 -> 0.63); a compiled pass
    (:func:`resgrad.nn.kernels.sum_sq64`) widens each element as it reads it, where it
    runs. With a thread ``pool``, the
    gradients are shared among ``parts`` threads, each norm whole on one (:func:`share`):
    the same norms, bit for bit.
    """
    if not grads:
        return {}
    n = min(CHUNK, max(g.size for g in grads.values()))
    bufs: dict[int, np.ndarray] = {}  # one float64 buffer per thread

    def norm(k: str) -> float:
        buf = bufs.get(threading.get_ident())  # (piece,) this thread's
        if buf is None:
            buf = bufs[threading.get_ident()] = np.empty(n, np.float64)
        flat, total = grads[k].reshape(-1), 0.0  # (n,)
        fused = kernels.sum_sq64(flat)  # one compiled pass, each element widened as it is read
        if fused is not None:
            return math.sqrt(fused)
        for i in range(0, flat.size, CHUNK):
            piece = buf[: min(CHUNK, flat.size - i)]
            np.copyto(piece, flat[i : i + CHUNK])  # float32 -> float64, exactly
            total += float(np.einsum("i,i->", piece, piece))  # sum of squares
        return math.sqrt(total)

    return share(pool, parts, grads, norm)


def clip_grad_norm(
    grads: dict[str, np.ndarray], max_norm: float, norms: Mapping[str, float] | None = None
) -> float:
    """Scale all gradients in place so their global L2 norm is at most ``max_norm``.

    As ``torch.nn.utils.clip_grad_norm_``: the factor is ``max_norm / (norm + 1e-6)``,
    applied only when below 1. ``max_norm`` 0 disables clipping.

    Parameters
    ----------
    grads : dict of str to ndarray
        Scaled in place.
    max_norm : float
    norms : dict, optional
        Per-gradient norms already computed by :func:`grad_norms`.

    Returns
    -------
    float
        The global norm before clipping.
    """
    if norms is None:
        norms = grad_norms(grads)
    total = math.sqrt(sum(n * n for n in norms.values()))
    coef = clip_coef(total, max_norm)
    if coef != 1.0:
        for g in grads.values():
            g *= coef
    return total


def clip_coef(total: float, max_norm: float) -> float:
    """The factor :func:`clip_grad_norm` scales by: ``max_norm / (total + 1e-6)`` when
    that is below 1, else 1 (``max_norm`` 0: clipping off)."""
    if max_norm > 0:
        coef = max_norm / (total + 1e-6)
        if coef < 1.0:
            return coef
    return 1.0


@dataclass(frozen=True)
class LRSchedule:
    """Linear warmup, then cosine decay to ``min_lr``, then ``min_lr`` (nanoGPT's get_lr)."""

    lr: float = 1e-3  # peak learning rate, reached at the end of warmup
    min_lr: float = 1e-4  # floor, reached at lr_decay_iters
    warmup_iters: int = 100  # linear warmup steps
    lr_decay_iters: int = 2000  # the cosine ends here

    def __post_init__(self):
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a finite number > 0, got {self.lr!r}")
        if not (math.isfinite(self.min_lr) and 0 <= self.min_lr <= self.lr):
            raise ValueError(f"min_lr must be in [0, lr={self.lr!r}], got {self.min_lr!r}")
        if self.warmup_iters < 0:
            raise ValueError(f"warmup_iters must be >= 0, got {self.warmup_iters!r}")
        if self.lr_decay_iters <= self.warmup_iters:
            raise ValueError(
                f"lr_decay_iters must be greater than warmup_iters={self.warmup_iters}, "
                f"got {self.lr_decay_iters!r}"
            )

    def __call__(self, it: int) -> float:
        """The learning rate for step ``it`` (counted from 0)."""
        if it < self.warmup_iters:  # 1) linear warmup
            return self.lr * (it + 1) / (self.warmup_iters + 1)
        if it > self.lr_decay_iters:  # 3) after the decay, the floor
            return self.min_lr
        # 2) cosine from lr down to min_lr
        ratio = (it - self.warmup_iters) / (self.lr_decay_iters - self.warmup_iters)
        coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))  # 1 -> 0
        return self.min_lr + coeff * (self.lr - self.min_lr)
