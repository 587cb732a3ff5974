"""Milliseconds per training iteration of nanoGPT's CPU recipe, in resgrad's NumPy.

The recipe (nanoGPT README, "I only have a macbook"): 4 layers, 4 heads, 128
wide, block 64, batch 12, on character-level text; here the built-in corpus.
One iteration is what ``resgrad train`` times: draw a batch, forward, backward as
``--shards`` shards on threads (the run's default), NaN check, clip, AdamW step, the
per-layer dynamics (:func:`resgrad.train.loop.train_step`), in float32.
Evaluations, checkpoints and plots are not counted.

    python benchmarks/bench_train_recipe.py [--iters 50] [--warmup 5] [--shards 2]

Prints the median and mean ms per iteration and tokens per second. The
performance issue compares the figure with PyTorch on the same machine.
Threads: numpy's BLAS uses all cores unless OMP_NUM_THREADS / OPENBLAS_NUM_THREADS
say otherwise; the line printed says how many it saw.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from resgrad.nn.model import GPT
from resgrad.perf.heap import keep_freed_memory
from resgrad.train.config import TrainConfig
from resgrad.train.data import get_batch, load_corpus
from resgrad.train.loop import train_step
from resgrad.train.optim import AdamW
from resgrad.train.shards import Shards


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=50, help="timed iterations")
    ap.add_argument("--warmup", type=int, default=5, help="untimed iterations first")
    ap.add_argument("--shards", type=int, default=TrainConfig().shards, help="shards per batch")
    args = ap.parse_args()
    keep_freed_memory()  # as `resgrad train` does: freed arrays reused, no page faults

    cfg = TrainConfig(shards=args.shards)  # the defaults are the recipe
    corpus = load_corpus(cfg.data, cfg.block_size)
    model = GPT(cfg.gpt_config(corpus.tokenizer.vocab_size), seed=cfg.seed)
    opt = AdamW(model.params, cfg.adamw())
    data_rng = np.random.default_rng([cfg.seed, 1])
    schedule = cfg.schedule()
    times = []
    with Shards(cfg.shards) as shards:
        for it in range(args.warmup + args.iters):
            t0 = time.perf_counter()
            x, y = get_batch(corpus.train, cfg.block_size, cfg.batch_size, data_rng)  # (B, T)
            train_step(model, opt, x, y, schedule(it), cfg.grad_clip, None, it,
                       dynamics=True, shards=shards)  # fmt: skip
            if it >= args.warmup:
                times.append(time.perf_counter() - t0)
    ms = [1e3 * t for t in times]
    tokens = cfg.batch_size * cfg.block_size
    threads = os.environ.get("OMP_NUM_THREADS") or os.environ.get("OPENBLAS_NUM_THREADS")
    print(
        f"nanoGPT CPU recipe (L={cfg.n_layer} H={cfg.n_head} C={cfg.n_embd} "
        f"T={cfg.block_size} B={cfg.batch_size}, {model.num_params():,} params, float32, "
        f"{cfg.shards} shards), "
        f"{args.iters} iterations, {os.cpu_count()} CPUs, BLAS threads {threads or 'default'}"
    )
    print(
        f"ms per iteration: median {statistics.median(ms):.1f}, mean {statistics.mean(ms):.1f}, "
        f"min {min(ms):.1f}; {tokens / (statistics.median(ms) / 1e3):,.0f} tokens/s"
    )


if __name__ == "__main__":
    main()
