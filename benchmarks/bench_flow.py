"""Seconds per gradient-flow profile: a 200-layer pre-LN stack and a 1000-layer lesson stack.

The issue's targets, on 2 cores:

- a 200-layer pre-ln stack at C=64, T=16, B=4: one profile (init, forward, backward,
  every per-layer norm) in under 10 s;
- the lesson's tanh stack at 1000 layers (C=16, B=4): under 2 s.

It also profiles each stack at half and a quarter of the depth, so the printed
seconds per layer show that the cost is linear in depth (a constant per layer),
and reports the peak traced memory (tracemalloc), which is linear in depth too:
one cache per block.

    python benchmarks/bench_flow.py [--repeat 3] [--loss lm|randn|ones]

Threads: numpy's BLAS uses all cores unless OMP_NUM_THREADS / OPENBLAS_NUM_THREADS
say otherwise; pin two cores with ``taskset -c 0,1`` to match the target machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import tracemalloc

from resgrad.lab.flow import LOSSES, FlowConfig, profile


def seconds(cfg: FlowConfig, repeat: int) -> tuple[float, float]:
    """Median wall seconds of one profile over ``repeat`` runs, and peak traced MiB."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        profile(cfg, 0)
        times.append(time.perf_counter() - t)
    tracemalloc.start()
    profile(cfg, 0)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return statistics.median(times), peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per size (median reported)")
    ap.add_argument("--loss", choices=LOSSES, default="lm", help="the pre-ln stack's loss")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"cores available: {cores}; BLAS threads: {os.environ.get('OMP_NUM_THREADS', 'default')}")
    cases = [
        ("pre-ln, C=64 T=16 B=4", 200, 10.0, dict(variant="pre-ln", width=64, heads=4, seq=16,
                                                 batch=4, loss=args.loss)),
        ("lesson tanh + x, C=16 B=4", 1000, 2.0, dict(variant="lesson-residual", width=16,
                                                     batch=4)),
    ]  # fmt: skip
    print(f"{'stack':>26} | {'depth':>5} | {'seconds':>8} | {'ms/layer':>8} | {'peak MiB':>8}")
    for name, depth, target, kw in cases:
        for L in (depth // 4, depth // 2, depth):
            s, mib = seconds(FlowConfig(depth=L, **kw), args.repeat)
            print(f"{name:>26} | {L:>5} | {s:>8.3f} | {1e3 * s / L:>8.3f} | {mib:>8.1f}")
        verdict = "meets" if s < target else "MISSES"
        print(f"{'':>26}   {verdict} the target of {target:g} s at depth {depth}")


if __name__ == "__main__":
    main()
