"""``resgrad bench``: time resgrad's float32 training step on the benchmark configs."""

from __future__ import annotations

import argparse

from resgrad.cli import _common
from resgrad.perf.bench import (
    ALL_CONFIGS,
    BENCH_CONFIGS,
    machine_header,
    matmul_peak_gflops,
    time_configs,
)
from resgrad.perf.heap import keep_freed_memory


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="time resgrad's training step (forward + backward + AdamW) per config",
        description="Times resgrad's float32 training step on nanoGPT-sized configs: ms per "
        "step, tokens per second, GFLOP/s as a fraction of the matmul peak measured in the "
        "same run, and peak memory. The side-by-side comparison with PyTorch eager is "
        "`python benchmarks/bench_train_step.py` (the library itself never imports PyTorch).",
    )
    p.add_argument(
        "--config",
        choices=[*BENCH_CONFIGS, "all"],
        default="cpu-recipe",
        help="config to time (default: cpu-recipe)",
    )
    p.add_argument(
        "--steps",
        type=_common.positive_int,
        default=10,
        help="timed steps, after 2 warm-up steps (default: 10)",
    )
    _common.add_threads(p)
    p.set_defaults(func=cmd_bench)


def _say(text: str) -> None:
    print(text, flush=True)  # each config's figures as soon as they are measured


def cmd_bench(args: argparse.Namespace) -> int:
    peak = matmul_peak_gflops()
    print(machine_header(peak, keep_freed_memory()))  # main() applied it; True again if it took
    names = ALL_CONFIGS if args.config == "all" else [args.config]
    time_configs(names, args.steps, peak, say=_say)
    return 0
