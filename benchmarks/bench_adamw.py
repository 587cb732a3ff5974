"""One AdamW step: NumPy's passes against the fused numba kernel, in one part and in parts.

    python benchmarks/bench_adamw.py [--config all] [--steps 30]
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_adamw.py

For each config, the model's parameters are stepped from fixed gradients five
ways, alternating blocks of 5 steps so all see the same machine: with NumPy's ~12
passes per piece (``fused=False``, the readable reference) in one part on the calling
thread, in ``--parts`` parts as the trainer runs them (a parameter is sliced only
when each slice holds at least ``resgrad.train.optim.MIN_SLICE`` elements), and in
``--parts`` parts with every parameter sliced (the rule before MIN_SLICE); and with
the fused kernel (one compiled pass, :func:`resgrad.train.optim.adamw_piece`) in one
part and in ``--parts`` parts, the trainer's default. Prints the median ms of each and
the ratios. All give the same bytes (``tests/train/test_optim.py``).
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
from threadpoolctl import threadpool_limits

from resgrad.nn.model import GPT
from resgrad.perf.bench import BENCH_CONFIGS, blas_info, settle, time_steps
from resgrad.train import optim
from resgrad.train.optim import AdamW, AdamWConfig
from resgrad.train.shards import Shards

BLOCK = 5


def bench(name: str, steps: int, parts: int, shards: Shards) -> dict[str, float]:
    model = GPT(BENCH_CONFIGS[name].gpt_config(), seed=0, dtype=np.float32)
    rng = np.random.default_rng(0)
    grads = {k: rng.standard_normal(p.shape, dtype=np.float32) for k, p in model.params.items()}
    opt = AdamW(model.params, AdamWConfig(lr=1e-6), fused=False)
    fused = AdamW(model.params, AdamWConfig(lr=1e-6), fused=True)
    rule = optim.MIN_SLICE

    def sliced_throughout() -> None:
        optim.MIN_SLICE = 1  # the old rule: every parameter cut into parts
        try:
            opt.step(grads, pool=shards.pool, parts=parts)
        finally:
            optim.MIN_SLICE = rule

    ways = {
        "one part": lambda: opt.step(grads),
        f"{parts} parts": lambda: opt.step(grads, pool=shards.pool, parts=parts),
        f"{parts} parts, all sliced": sliced_throughout,
        "fused, one part": lambda: fused.step(grads),
        f"fused, {parts} parts": lambda: fused.step(grads, pool=shards.pool, parts=parts),
    }
    times: dict[str, list[float]] = {w: [] for w in ways}
    with threadpool_limits(1):  # as inside the trainer's step: one BLAS thread per shard
        for done in range(0, steps, BLOCK):
            for w, f in ways.items():
                settle()
                times[w] += time_steps(f, min(BLOCK, steps - done), warmup=1)
    return {w: 1e3 * statistics.median(t) for w, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=[*BENCH_CONFIGS, "all"], default="all")
    ap.add_argument("--steps", type=int, default=30, help="timed steps of each way")
    ap.add_argument("--parts", type=int, default=2, help="parts (and threads)")
    args = ap.parse_args()
    names = (
        [n for n, c in BENCH_CONFIGS.items() if c.in_all] if args.config == "all" else [args.config]
    )
    print(f"BLAS: {blas_info()}; MIN_SLICE = {optim.MIN_SLICE}")
    with Shards(args.parts, threads=args.parts) as shards:
        for name in names:
            ms = bench(name, args.steps, args.parts, shards)
            one, split, old, f_one, f_split = ms.values()
            print(
                f"{name:11s} "
                + "  ".join(f"{w}: {t:7.2f} ms" for w, t in ms.items())
                + f"  | one part / {args.parts} parts: {one / split:.2f}x,"
                f" all sliced / {args.parts} parts: {old / split:.2f}x,"
                f" NumPy's passes / fused ({args.parts} parts): {split / f_split:.2f}x"
            )


if __name__ == "__main__":
    main()
