"""Seconds for the exact per-k split of GPT-2 124M's gradient at every block boundary.

The issue's target, on 2 cores: GPT-2 124M's shape (random weights at GPT-2's init), B=1,
T=128, float64, the exact split by path length k of dL/dx_i at every boundary and of
every parameter gradient, in under 60 s. Printed: the seconds of the forward, of one
ordinary backward and of the split; the branch VJPs the split did (n(n+1)/2 for n = 2L
branches: 300 for GPT-2) and its cost in ordinary-backward equivalents, counted (VJPs / n)
and timed (split seconds / backward seconds).

    python benchmarks/bench_paths.py [--small] [--joint] [--threads N]

``--small`` runs a 4-layer C=128 model (seconds, for a busy machine and the test that
every benchmark runs); ``--joint`` also times the (attention, MLP) split.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from resgrad.lab.paths import effective_range, gpt_chain, split
from resgrad.nn.model import GPT, GPTConfig

GPT2 = dict(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)
SMALL = dict(vocab_size=512, block_size=128, n_layer=4, n_head=4, n_embd=128)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="a 4-layer C=128 model, not GPT-2")
    ap.add_argument("--joint", action="store_true", help="also the (attention, MLP) split")
    ap.add_argument("--seq", type=int, default=128, help="T (default: 128)")
    ap.add_argument("--threads", type=int, default=None, help="BLAS threads (default: all)")
    args = ap.parse_args()
    from threadpoolctl import threadpool_limits

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    shape = SMALL if args.small else GPT2
    cfg = GPTConfig(**shape, variant="pre-ln", init="gpt2")
    print(f"cores available: {cores}; BLAS threads: {args.threads or 'default'}")
    print(f"model: L={cfg.n_layer} C={cfg.n_embd} H={cfg.n_head} V={cfg.vocab_size}, "
          f"B=1 T={args.seq}, float64, pre-ln, GPT-2's init")  # fmt: skip
    with threadpool_limits(limits=args.threads):
        t = time.perf_counter()
        model = GPT(cfg, seed=0, dtype=np.float64)
        print(f"init: {time.perf_counter() - t:.1f} s")
        ids = np.random.default_rng(0).integers(0, cfg.vocab_size, size=(1, args.seq + 1))
        t = time.perf_counter()
        _, _, cache = model.forward(ids[:, :-1], ids[:, 1:])
        t_fwd = time.perf_counter() - t
        t = time.perf_counter()
        model.backward_stream(cache)
        t_bwd = time.perf_counter() - t
        del cache
        t = time.perf_counter()
        chain = gpt_chain(model, ids[:, :-1], ids[:, 1:])  # forward + reference backward
        t_chain = time.perf_counter() - t
        t = time.perf_counter()
        sp = split(chain)
        t_split = time.perf_counter() - t
        n = chain.n
        print(f"forward: {t_fwd:.2f} s; one ordinary backward: {t_bwd:.2f} s")
        print(f"chain (forward + reference backward): {t_chain:.2f} s")
        print(f"per-k split of every boundary and parameter: {t_split:.2f} s "
              f"(total with the chain: {t_chain + t_split:.2f} s)")  # fmt: skip
        print(f"branch VJPs: {sp.vjps} (n = {n}: n(n+1)/2 = {n * (n + 1) // 2}); "
              f"= {sp.vjps / n:.1f} backward passes counted, "
              f"{t_split / t_bwd:.1f} timed")  # fmt: skip
        print(f"max relative error of the sum of parts: {sp.sum_errors.max():.1e}")
        lo, hi = effective_range(sp.share_norm()[0])
        print(f"x_0: share of k=0 by projection {sp.share_proj()[0, 0]:.3f}; "
              f"90% of the norm in k = {lo}..{hi}")  # fmt: skip
        if args.joint:
            t = time.perf_counter()
            sj = split(chain, joint=True)
            print(f"joint (attention, MLP) split: {time.perf_counter() - t:.2f} s, "
                  f"{sj.vjps} VJPs")  # fmt: skip


if __name__ == "__main__":
    main()
