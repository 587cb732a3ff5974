"""What one shard of the trainer's step costs, alone and beside a second one.

    python benchmarks/bench_shards.py [--config cpu-recipe] [--seconds 4]
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_shards.py

One shard is half the config's batch, forward and backward on one thread with one
BLAS thread, as ``resgrad.train.shards`` runs it. Printed, the median ms of a shard:

- alone;
- beside a thread that does nothing but BLAS (matmuls release Python's lock: this
  is what sharing the machine costs, caches and memory bandwidth);
- beside a thread running the other shard (the trainer's case: the difference
  from the line above is what the two threads' Python and NumPy calls cost each other);
- in two processes at once, one shard each (no shared lock at all).

And the floor: the shard's counted matmul FLOPs at one core's float32 peak, measured
in the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

import numpy as np
from threadpoolctl import threadpool_limits

from resgrad.nn.model import GPT
from resgrad.perf.bench import BENCH_CONFIGS, blas_info, make_batch, matmul_peak_gflops
from resgrad.perf.heap import keep_freed_memory
from resgrad.train.shards import _pass


def _shard(cfg_name: str):
    cfg = BENCH_CONFIGS[cfg_name]
    model = GPT(cfg.gpt_config(), seed=0, dtype=np.float32)
    x, y = make_batch(cfg)
    h = cfg.batch_size // 2
    return model, x, y, h, cfg


def _time_for(f, seconds: float) -> float:
    """Median ms of ``f`` called for ``seconds`` (at least 5 calls)."""
    f()
    times, end = [], time.monotonic() + seconds
    while time.monotonic() < end or len(times) < 5:
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def _beside(f, other, seconds: float) -> float:
    """Median ms of ``f`` while another thread runs ``other`` in a loop."""
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            other()

    t = threading.Thread(target=loop)
    t.start()
    try:
        return _time_for(f, seconds)
    finally:
        stop.set()
        t.join()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=list(BENCH_CONFIGS), default="cpu-recipe")
    ap.add_argument("--seconds", type=float, default=4.0, help="timing per line")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    keep_freed_memory()  # as the trainer does
    model, x, y, h, cfg = _shard(args.config)

    def first():
        _pass(model, x[:h], y[:h], 0.5, None, True)  # act_rms: the trainer records dynamics

    def second():
        _pass(model, x[h:], y[h:], 0.5, None, True)

    with threadpool_limits(1):  # one BLAS thread per shard, as in the trainer
        if args.child:
            print(f"{_time_for(first, args.seconds):.2f}")
            return
        peak1 = matmul_peak_gflops()
        a = np.ones((512, 512), np.float32)
        out = np.empty_like(a)
        alone = _time_for(first, args.seconds)
        by_blas = _beside(first, lambda: np.matmul(a, a, out=out), args.seconds)
        by_shard = _beside(first, second, args.seconds)
    argv = [sys.executable, os.path.abspath(__file__), "--child", "--config", args.config,
            "--seconds", str(args.seconds)]  # fmt: skip
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    in_procs = [float(p.communicate()[0].split()[-1]) for p in procs]
    floor = 1e3 * model.flops_per_step(h, cfg.block_size) / (peak1 * 1e9)
    print(f"BLAS: {blas_info()}")
    print(f"{args.config}: one shard = {h} of {cfg.batch_size} rows, one thread, one BLAS thread")
    print(f"  matmul floor (its FLOPs at one core's {peak1:.1f} GFLOP/s): {floor:7.2f} ms")
    print(f"  alone:                                  {alone:7.2f} ms")
    print(f"  beside a thread doing only BLAS:        {by_blas:7.2f} ms")
    print(f"  beside a thread running the other shard:{by_shard:7.2f} ms")
    print(f"  two processes, one shard each:          {in_procs[0]:7.2f} / {in_procs[1]:.2f} ms")


if __name__ == "__main__":
    main()
