"""Per-token cost of sampling with the KV cache vs full recomputation, at a 256-token context.

    python benchmarks/bench_sample.py                # the medium model, batch 1
    python benchmarks/bench_sample.py --config cpu-recipe --context 64

The issue's target: with the KV cache, a new token at a 256-token context costs at
least 10x less than recomputing the whole context.

Both ways predict the token at position ``context`` (the context's last) from the
same ``context`` tokens, with the same float32 model:

- full recomputation: ``GPT.forward`` on all ``context`` tokens, keeping the last
  position's logits (what sampling without a cache does for every token);
- KV cache: ``resgrad.train.sample.forward_step`` on the one new token, over a cache that
  already holds the ``context - 1`` tokens before it (filled once, untimed; each
  timed call rewinds ``cache.length`` by one, so every call is the same step).

The two logits are checked to agree before anything is timed. Each figure is the
median of ``--repeat`` calls after warm-up; the ratio is printed from this one run.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from resgrad.nn.model import GPT
from resgrad.perf.bench import BENCH_CONFIGS, blas_info
from resgrad.perf.heap import keep_freed_memory
from resgrad.train.sample import KVCache, forward_step


def median_ms(fn, repeat: int, warmup: int = 3) -> float:
    """Median wall milliseconds of ``repeat`` calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", choices=list(BENCH_CONFIGS), default="medium")
    p.add_argument("--context", type=int, default=256, help="tokens of context (default 256)")
    p.add_argument("--batch", type=int, default=1, help="sequences sampled at once (default 1)")
    p.add_argument("--repeat", type=int, default=30, help="timed calls per way (default 30)")
    args = p.parse_args()
    keep_freed_memory()  # as `resgrad sample` runs (resgrad.perf.heap)
    cfg = BENCH_CONFIGS[args.config].gpt_config()
    if not 2 <= args.context <= cfg.block_size:
        p.error(f"--context must be in [2, {cfg.block_size}] (the block size), got {args.context}")
    model = GPT(cfg, seed=0, dtype=np.float32)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, cfg.vocab_size, size=(args.batch, args.context))  # (B, context)

    def full() -> np.ndarray:
        logits, _, _ = model.forward(idx)  # (B, context, V) every position recomputed
        return logits[:, -1]  # (B, V)

    cache = KVCache.empty(cfg, args.batch, np.float32)
    forward_step(model, idx[:, :-1], cache)  # the context before the new token, once
    before = cache.length

    def cached() -> np.ndarray:
        cache.length = before  # rewind: each call adds the same last token again
        return forward_step(model, idx[:, -1:], cache)[:, -1]  # (B, V)

    gap = float(np.max(np.abs(full() - cached())))
    if gap > 1e-3:
        raise SystemExit(f"the two ways disagree: max |logit difference| {gap:.2e}")
    t_full = median_ms(full, args.repeat)
    t_cached = median_ms(cached, args.repeat)
    print(f"BLAS (threadpoolctl): {blas_info()}")
    print(
        f"{args.config}: {model.num_params():,} params, batch {args.batch}, "
        f"context {args.context} tokens (logits agree to {gap:.1e})"
    )
    print(f"  full recomputation  {t_full:8.3f} ms per token")
    print(f"  KV cache            {t_cached:8.3f} ms per token")
    print(f"  KV cache speedup:   {t_full / t_cached:.1f}x (target >= 10x)")


if __name__ == "__main__":
    main()
