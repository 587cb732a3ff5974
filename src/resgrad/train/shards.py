"""One batch as shards on threads: forward and backward of each shard at once, gradients summed.

Legend: B = batch size, T = block size, C = n_embd, L = n_layer, V = vocab size,
S = shards, N = the batch's counted targets, n_s = shard s's.

Why: a training step's matrix products are BLAS calls that use both cores, but
everything between them (softmax, GELU, LayerNorm, the residual adds, AdamW) is
NumPy on one core while the other waits. Split the batch into S shards of rows
and give each shard its own thread and one BLAS thread: every core is busy for
the whole step, because NumPy and BLAS release the GIL while they compute.

The math is gradient accumulation. The batch's loss is the mean over its N
targets, so it is the shards' mean losses weighted by their share of them:

    L = sum_s (n_s / N) L_s
    dL/dtheta = sum_s (n_s / N) dL_s/dtheta

Each shard's backward starts from ``dloss = n_s / N`` instead of 1
(:meth:`resgrad.nn.model.GPT.backward`'s ``dloss``), and the shards' gradients
are added. Every row of dL/dx_i then already carries its weight, so the
batch's stream gradient norm is ``sqrt(sum_s ||dL/dx_i||_s^2)``.

What it changes: the sum over the batch inside each weight gradient is taken
in another order, so the gradients equal the unsharded ones up to float
rounding (within 1e-12 relative in float64: ``tests/train/test_shards.py``), not bit
for bit. The result depends on the shard count, never on the number of threads
computing it: shards are added in a fixed order, and each shard's dropout
masks come from its own generator, seeded from the run's in order. That is why
the shard count is a setting of the run (``TrainConfig.shards``, ``resgrad
train --shards``) and one shard is exactly the unsharded step.

The gain, one float32 training step side by side (``python
benchmarks/bench_train_step.py``), is in the README's performance section.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from threadpoolctl import ThreadpoolController

from resgrad.nn import kernels
from resgrad.nn.model import GPT
from resgrad.train.dynamics import sum_sq

__all__ = ["DEFAULT_SHARDS", "Pass", "Shards", "shard_rows"]

DEFAULT_SHARDS = 2  # a run's default (TrainConfig.shards): one per core of a 2-core machine


@dataclass(frozen=True)
class Pass:
    """What one forward and backward over a batch gives the training step."""

    loss: float  # the batch's mean loss
    grads: dict[str, np.ndarray]  # dL/dtheta for every parameter, named as model.params
    stream_norms: list[float]  # L + 1 norms of dL/dx_i, the residual stream at block inputs
    act_rms: list[float]  # L RMS of each block's output over the whole batch ([]: not asked)


def shard_rows(B: int, shards: int) -> list[slice]:
    """``min(shards, B)`` contiguous slices of the B rows, their sizes within one of each other."""
    S = min(shards, B)
    edges = [B * s // S for s in range(S + 1)]  # 0 = e_0 < e_1 < ... < e_S = B
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def _pass(model: GPT, x: np.ndarray, y: np.ndarray, dloss: float, rng, act_rms: bool) -> tuple:
    """Forward and backward of one shard, on its own thread: its loss, gradients, the
    norms of dL/dx_i, and (``act_rms``) each block output's sum of squares and size."""
    with np.errstate(all="ignore"):  # per thread; the caller finds a NaN by name
        # 1) (B_s, T) -> L_s; the logits are not kept: the backward starts from the cache,
        # and (B_s, T, V) floats are 103 MB a shard at GPT-2's vocabulary and T=256, B=4
        loss, cache = model.forward(x, y, train=True, rng=rng)[1:]
        # 2) (n_s / N) dL_s/dtheta, freeing the activations as the backward passes them
        grads, dxs = model.backward_stream(cache, dloss=dloss, release=True)
        # 3) what the batch's norms are made of, here rather than after the join
        stream = [float(np.linalg.norm(d)) for d in dxs]  # L + 1 of ||dL/dx_i||_s
        outs = cache.xs[1:] if act_rms else []  # (B_s, T, C) each block's output
        act = [(sum_sq(a), a.size) for a in outs]
    return loss, grads, stream, act


class Shards:
    """Computes a batch's loss and gradients as ``n`` shards on up to ``threads`` threads.

    Parameters
    ----------
    n : int
        Shards per batch (at most B are used). 1: the plain, unsharded pass.
    threads : int, optional
        Threads for the whole pass (default: the BLAS library's current thread
        count, which ``--threads`` sets). ``min(n, threads)`` run shards at
        once, each with ``threads // that`` BLAS threads.

    Use as a context manager, or call :meth:`close`, to stop the threads.
    """

    def __init__(self, n: int, threads: int | None = None):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"shards must be an integer >= 1, got {n!r}")
        self.n = n
        self.workers, self.blas_threads = 1, None  # one thread; BLAS as it is set
        self._blas = self._pool = None
        if n > 1:
            self._blas = ThreadpoolController().select(user_api="blas")
            if threads is None:
                threads = max([i["num_threads"] for i in self._blas.info()] or [1])
            self.workers = min(n, threads)
        if self.workers > 1:
            self.blas_threads = max(1, threads // self.workers)
            # and as many of numba's threads for the compiled attention's heads
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="resgrad-shard",
                                            initializer=kernels.set_threads,
                                            initargs=(self.blas_threads,))  # fmt: skip

    def __enter__(self) -> Shards:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def forward_backward(
        self,
        model: GPT,
        x: np.ndarray,
        y: np.ndarray,
        rng: np.random.Generator | None = None,
        *,
        act_rms: bool = True,
    ) -> Pass:
        """The batch's loss and gradients, from the shards' (see the module docstring).

        Parameters
        ----------
        x, y : int ndarray, shape (B, T)
            Token ids and next-token targets.
        rng : numpy.random.Generator, optional
            The dropout masks' generator (needed when the model has dropout). With
            more than one shard, each shard's generator is seeded from it in order.
        act_rms : bool
            Whether to measure each block output's RMS (the dynamics' L dots; False: []).
        """
        B = x.shape[0]
        rows = shard_rows(B, self.n)
        rngs = [rng] * len(rows)  # one shard: the run's own generator, as unsharded
        if len(rows) > 1 and rng is not None and model.cfg.dropout > 0:
            rngs = [np.random.default_rng(s) for s in rng.integers(2**63, size=len(rows))]
        # the loss is the mean over B*T targets: shard s holds n_s / N = rows_s / B of them
        jobs = [(model, x[r], y[r], (r.stop - r.start) / B, g, act_rms) for r, g in zip(rows, rngs)]
        if self._pool is None:  # one thread: the shards in turn, BLAS as it is
            return _combine([_pass(*job) for job in jobs], jobs)
        # one BLAS thread per shard, also while combining: BLAS's own workers stay asleep
        with self._blas.limit(limits=self.blas_threads):
            return _combine(list(self._pool.map(lambda job: _pass(*job), jobs)), jobs)

    def loss(self, model: GPT, x: np.ndarray, y: np.ndarray) -> float:
        """The batch's mean loss in eval mode (no dropout), from the shards' forward passes."""
        B = x.shape[0]
        rows = shard_rows(B, self.n)

        def shard_loss(r: slice) -> float:
            with np.errstate(all="ignore"):  # a non-finite loss is the caller's to report
                return float(model.forward(x[r], y[r])[1]) * ((r.stop - r.start) / B)

        if self._pool is None:
            return sum(shard_loss(r) for r in rows)  # one shard: 1.0 * the plain loss
        with self._blas.limit(limits=self.blas_threads):
            return sum(self._pool.map(shard_loss, rows))  # in shard order

    @property
    def pool(self) -> ThreadPoolExecutor | None:
        """The shards' threads (None with one), for other work split ``workers`` ways."""
        return self._pool


def _combine(parts: list[tuple], jobs: list[tuple]) -> Pass:
    """The batch's :class:`Pass` from its shards' (see the module docstring)."""
    with np.errstate(all="ignore"):  # a diverged step: the caller names the NaN
        # L = sum_s (n_s / N) L_s
        loss = sum(float(l_s) * job[3] for (l_s, *_), job in zip(parts, jobs))
        # dL/dtheta = sum_s (n_s / N) dL_s/dtheta: each shard's backward carries its weight;
        # added in shard order, so the bytes never depend on which thread finished first
        grads = parts[0][1]
        for _, g, _, _ in parts[1:]:
            for k, a in g.items():
                grads[k] += a  # (shape of params[k])
        # shards hold disjoint rows of dL/dx_i and of each block's output: squares add
        stream = [math.hypot(*norms) for norms in zip(*(p[2] for p in parts))]
        act = [
            math.sqrt(sum(sq for sq, _ in blocks) / sum(n for _, n in blocks))
            for blocks in zip(*(p[3] for p in parts))
        ]
    return Pass(float(loss), grads, stream, act)
