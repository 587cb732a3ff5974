"""Timing resgrad's training step: configs, FLOPs, the matmul peak, peak memory.

This is resgrad's half of the performance benchmark. The side-by-side
comparison with PyTorch eager lives in ``benchmarks/bench_train_step.py``,
which imports this module: the library itself never imports PyTorch, so
``resgrad bench`` prints resgrad's own figures alone.

One training step is what the trainer does: forward with targets, backward,
AdamW update in place, all in float32.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import numpy as np

from resgrad.nn.model import GPT, GPTConfig
from resgrad.perf.heap import keep_freed_memory
from resgrad.train.config import TrainConfig
from resgrad.train.data import get_batch, load_corpus
from resgrad.train.loop import train_step
from resgrad.train.optim import AdamW
from resgrad.train.shards import DEFAULT_SHARDS, Shards

__all__ = [
    "ALL_CONFIGS",
    "BENCH_CONFIGS",
    "BenchConfig",
    "bench_text",
    "blas_info",
    "format_row",
    "machine_header",
    "make_batch",
    "matmul_peak_gflops",
    "memory_bandwidth_gbs",
    "own_peak_rss_mib",
    "peak_memory_mib",
    "resgrad_probe_argv",
    "resgrad_stepper",
    "settle",
    "time_configs",
    "time_steps",
]

# Seconds to wait before timing a step of the other framework. OpenBLAS's worker
# threads keep spinning ~0.1 s after the last BLAS call (0.10 CPU-seconds burnt
# while idle after a resgrad step; PyTorch's OpenMP threads: 0.01 s), so without a
# pause the framework timed second shares the cores with them: alternating with no
# pause, PyTorch's cpu-recipe step took 67 ms against 31 ms alone.
SETTLE_S = 0.25


@dataclass(frozen=True)
class BenchConfig:
    """A model and batch shape to time."""

    name: str
    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    batch_size: int
    vocab_size: int = 65  # a character vocabulary
    n_positions: int = 0  # rows of the position embedding; 0: block_size
    in_all: bool = True  # timed by --config all (GPT-2 124M only when named)
    # the MLP's GELU: the exact form, nn.GELU(), as nanoGPT's model.py that PyTorch's side runs
    activation: str = "gelu-erf"

    def gpt_config(self) -> GPTConfig:
        return GPTConfig(
            vocab_size=self.vocab_size,
            block_size=self.n_positions or self.block_size,
            n_layer=self.n_layer,
            n_head=self.n_head,
            n_embd=self.n_embd,
            activation=self.activation,
        )

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.block_size

    @property
    def masked_flops(self) -> int:
        """Matmul FLOPs of a step that causality makes needless: the ceiling's saving.

        :meth:`resgrad.nn.model.GPT.flops_per_step` counts attention's ``q k^T`` and
        ``att v`` over the whole (T, T) square, 4TC per token and block in the
        forward; the half above the diagonal is 0 after the mask, so 2TC of them, and
        twice that in the backward, need not be done. The count less this is the
        fewest matmul FLOPs a step can do in any framework (the ``ceiling`` line).
        """
        B, T, C, L = self.batch_size, self.block_size, self.n_embd, self.n_layer
        return 3 * L * B * T * (2 * T * C)


BENCH_CONFIGS = {
    c.name: c
    for c in (
        BenchConfig("cpu-recipe", 4, 4, 128, 64, 12),  # nanoGPT's CPU recipe for chars
        BenchConfig("small", 4, 4, 128, 64, 32),
        BenchConfig("medium", 6, 6, 384, 256, 8),
        # GPT-2 124M's shape (12 layers, 12 heads, 768 wide, 50257 tokens, 1024 positions)
        # at T=256, B=4; random weights
        BenchConfig("gpt2-124m", 12, 12, 768, 256, 4, 50257, 1024, in_all=False),
    )
}
ALL_CONFIGS = [n for n, c in BENCH_CONFIGS.items() if c.in_all]  # what --config all times


def make_batch(cfg: BenchConfig, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A seeded random (idx, targets) pair, each (B, T) int64."""
    rng = np.random.default_rng(seed)
    B, T, V = cfg.batch_size, cfg.block_size, cfg.vocab_size
    ids = rng.integers(0, V, size=(B, T + 1))  # (B, T+1)
    return ids[:, :-1], ids[:, 1:]


def recipe_copies(k: int, n_batches: int = 20):
    """``k`` copies of nanoGPT's CPU recipe as ``resgrad train`` builds it (same seed), each
    with its AdamW, and ``n_batches`` batches of the built-in corpus: for benchmarks that
    time copies side by side. Returns (TrainConfig, models, optimizers, batches)."""
    cfg = TrainConfig()  # the defaults are the recipe
    corpus = load_corpus(cfg.data, cfg.block_size)
    models = [GPT(cfg.gpt_config(corpus.tokenizer.vocab_size), seed=cfg.seed) for _ in range(k)]
    opts = [AdamW(m.params, cfg.adamw()) for m in models]
    rng = np.random.default_rng(0)
    batches = [get_batch(corpus.train, cfg.block_size, cfg.batch_size, rng)
               for _ in range(n_batches)]  # fmt: skip
    return cfg, models, opts, batches


TEXT_TOKENS = 1_000_000  # the benchmarks' seeded random text, in tokens


def bench_text(cfg: BenchConfig, seed: int = 0) -> np.ndarray:
    """Seeded random token ids, (TEXT_TOKENS,): the text both frameworks draw batches from."""
    return np.random.default_rng(seed).integers(0, cfg.vocab_size, TEXT_TOKENS, dtype=np.uint16)


@contextmanager
def resgrad_stepper(
    cfg: BenchConfig, seed: int = 0, shards: int = DEFAULT_SHARDS
) -> Iterator[tuple[GPT, Callable[[], float]]]:
    """resgrad's GPT in float32 and a function doing one training iteration, returning the loss.

    The iteration is ``resgrad train``'s: a batch drawn from the text
    (:func:`resgrad.train.data.get_batch`), then :func:`resgrad.train.loop.train_step` as
    the trainer calls it, the batch as ``shards`` shards on threads
    (:mod:`resgrad.train.shards`; 1: the plain pass), the gradients' norms checked and
    clipped, AdamW at the recipe's settings (:class:`resgrad.train.config.TrainConfig`),
    and the dynamics the trainer records every step (update ratios, stream gradients,
    activation RMS); left out: making and writing the records (0.35 ms at cpu-recipe).
    Use as ``with resgrad_stepper(cfg) as (model, step):``; the shards' threads stop at its end.
    """
    model = GPT(cfg.gpt_config(), seed=seed, dtype=np.float32)
    tc = TrainConfig()  # the recipe: its AdamW, learning rate and clipping
    opt = AdamW(model.params, tc.adamw())
    data, rng = bench_text(cfg, seed), np.random.default_rng(seed)
    with Shards(shards) as sharded:

        def step() -> float:
            x, y = get_batch(data, cfg.block_size, cfg.batch_size, rng)  # (B, T)
            r = train_step(model, opt, x, y, tc.lr, tc.grad_clip, None, dynamics=True,
                           shards=sharded)  # fmt: skip
            return r.loss

        yield model, step


def train_steps(name: str, steps: int = 3, shards: int = DEFAULT_SHARDS) -> None:
    """Build the ``name`` config's model, train ``steps`` steps and print the peak memory.

    The memory probe's body: the last line printed is ``peak_mib <float>``.
    """
    keep_freed_memory()  # as in the timed process
    with resgrad_stepper(BENCH_CONFIGS[name], shards=shards) as (_, step):
        for _ in range(steps):
            step()
    print(f"peak_mib {own_peak_rss_mib()}")


def settle(seconds: float = SETTLE_S) -> None:
    """Sleep until the BLAS and OpenMP threads of the last timed step have stopped spinning."""
    time.sleep(seconds)


def resgrad_probe_argv(name: str, shards: int = DEFAULT_SHARDS) -> list[str]:
    """A command that runs :func:`train_steps` in a fresh interpreter."""
    return [
        sys.executable,
        "-c",
        f"from resgrad.perf.bench import train_steps; train_steps({name!r}, shards={shards})",
    ]


def time_steps(step: Callable[[], object], n: int, warmup: int = 2) -> list[float]:
    """Wall seconds of each of ``n`` calls of ``step`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return times


PEAK_N = 2048  # the peak's matrix size


def matmul_peak_gflops(n: int = PEAK_N, reps: int = 5) -> float:
    """The float32 matmul rate of this machine's BLAS, (n, n) @ (n, n), best of ``reps``.

    n = 2048, not 1024: on the 2-core AMD EPYC this project is measured on, 1024^3 reads
    165-172 GFLOP/s and 2048^3 195-200, and the training steps' own matmuls reached 167,
    above the 1024^3 "peak". The benchmarks measure it again before each config and keep
    the best, so one slow reading (a busy neighbour) does not inflate the fractions.
    """
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)  # (n, n)
    b = rng.standard_normal((n, n), dtype=np.float32)  # (n, n)
    out = np.empty((n, n), dtype=np.float32)  # (n, n)
    np.matmul(a, b, out=out)
    best = min(time_steps(lambda: np.matmul(a, b, out=out), reps, warmup=1))
    return 2 * n**3 / best / 1e9


BANDWIDTH_MIB = 512  # the bandwidth's array size: 16x the 32 MiB L3 of the measured machine


def memory_bandwidth_gbs(mib: int = BANDWIDTH_MIB, reps: int = 5) -> dict[str, float]:
    """This machine's memory bandwidth as NumPy and its BLAS reach it, GB/s, best of ``reps``.

    Three readings on float32 arrays of ``mib`` MiB each (far beyond the caches):

    - ``sum``: one array read once by NumPy's reduction, on one thread;
    - ``gemv``: a (R, 4096) matrix read once by a vector-matrix product ``x @ W``,
      x (1, R), on the BLAS threads: what generating a token does with each weight;
    - ``copy``: one array read and another written (``np.copyto``), counted as twice the
      array's bytes (the write-allocate reads a CPU may add are not counted).

    A limit uses the largest: the fastest this process was seen to move memory.
    """
    n = mib * 2**20 // 4  # float32 values per array
    cols = 4096
    a = np.ones(n, dtype=np.float32)  # (n,) touched: resident before it is timed
    b = np.empty_like(a)  # (n,)
    np.copyto(b, a)
    w = a.reshape(n // cols, cols)  # (R, 4096) the same bytes as a matrix
    x = np.ones((1, n // cols), dtype=np.float32)  # (1, R)
    nbytes = a.nbytes
    best = {
        "sum": min(time_steps(a.sum, reps, warmup=1)),
        "gemv": min(time_steps(lambda: x @ w, reps, warmup=1)),  # (1,R)@(R,4096) -> (1,4096)
        # each byte of a moved twice: read, then written into b
        "copy": min(time_steps(lambda: np.copyto(b, a), reps, warmup=1)) / 2,
    }
    return {k: nbytes / t / 1e9 for k, t in best.items()}


def blas_info() -> list[dict]:
    """What threadpoolctl reports for the loaded BLAS: library, kernel, threads."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:  # threadpoolctl is optional
        return [{"note": "threadpoolctl not installed"}]
    keys = ("internal_api", "architecture", "num_threads", "version")
    return [{k: i.get(k) for k in keys} for i in threadpool_info() if i["user_api"] == "blas"]


def own_peak_rss_mib() -> float:
    """Peak resident memory (MiB) of this process: the kernel's ``VmHWM``.

    Not ``ru_maxrss``: on Linux a child's ``ru_maxrss`` starts from its parent's
    resident size at the fork (exec keeps that high-water mark), so a probe
    forked from a parent holding PyTorch reported the parent's memory (a child
    of a parent holding 527 MiB: ru_maxrss 527 MiB, VmHWM 13 MiB).
    ``VmHWM`` belongs to the process's own address space.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB -> MiB
    except OSError:  # no /proc (macOS): the rusage figure, bytes there
        pass
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024


def peak_memory_mib(argv: list[str]) -> float:
    """Peak resident memory (MiB) of a fresh child process running ``argv``.

    Each framework is measured in a process of its own, which trains a few steps
    and prints ``peak_mib <float>`` (:func:`own_peak_rss_mib`) as its last line,
    so its figure is its own whatever else the parent holds; the interpreter and
    the libraries it imports are included.
    """
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        err = proc.stderr.strip()
        raise RuntimeError(f"memory probe {argv} failed ({proc.returncode}): {err}")
    last = proc.stdout.strip().splitlines()[-1:] or [""]
    key, _, value = last[0].partition(" ")
    if key != "peak_mib":
        raise RuntimeError(f"memory probe {argv} printed no peak_mib line: {proc.stdout!r}")
    return float(value)


def resgrad_figures(cfg: BenchConfig, steps: int, peak: float) -> dict:
    """resgrad's figures alone on one config: timing, rates, peak memory."""
    with resgrad_stepper(cfg) as (model, step):
        flops = model.flops_per_step(cfg.batch_size, cfg.block_size)
        row = figures(time_steps(step, steps), cfg, flops, peak).as_dict()
    row["peak_mib"] = peak_memory_mib(resgrad_probe_argv(cfg.name))
    return {
        "config": cfg.name,
        "params": model.num_params(),
        "flops_per_step": flops,
        "resgrad": row,
    }


@dataclass(frozen=True)
class StepFigures:
    """What one framework measured on one config."""

    ms_per_step: float  # median
    tokens_per_s: float
    gflops: float  # counted matmul FLOPs / median step time
    peak_fraction: float  # gflops / the matmul peak measured in the same run
    ms_min: float = math.nan  # the fastest and slowest timed steps: how noisy the run was
    ms_max: float = math.nan

    def as_dict(self) -> dict:
        return asdict(self)


def figures(times: list[float], cfg: BenchConfig, flops_per_step: int, peak: float) -> StepFigures:
    """Median step time, the rates that follow from it, and the fastest and slowest step."""
    med = statistics.median(times)
    gflops = flops_per_step / med / 1e9
    return StepFigures(
        1e3 * med, cfg.tokens_per_step / med, gflops, gflops / peak, 1e3 * min(times),
        1e3 * max(times),
    )  # fmt: skip


def time_configs(
    names: Sequence[str], steps: int, peak: float, say: Callable[[str], None]
) -> list[dict]:
    """Time resgrad's step on each config of ``names`` in turn (``resgrad bench``), each with
    the best matmul peak read so far (read again before it), and ``say`` its figures
    (:func:`format_row`) as soon as they are measured; returns the rows."""
    rows = []
    for name in names:
        peak = max(peak, matmul_peak_gflops())  # the best reading so far
        row = resgrad_figures(BENCH_CONFIGS[name], steps, peak) | {"peak_gflops": peak}
        say(format_row(row))
        rows.append(row)
    return rows


def machine_header(peak: float, heap_kept: bool | None = None) -> str:
    """Lines saying what was measured on: BLAS kernel, OPENBLAS_* settings, threads, peak,
    and whether freed memory is kept for reuse (:func:`resgrad.perf.heap.keep_freed_memory`)."""
    env = {k: os.environ.get(k, "(unset)") for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    heap = {None: "", True: "; malloc keeps freed memory", False: "; default malloc"}[heap_kept]
    return (
        f"BLAS (threadpoolctl): {json.dumps(blas_info())}\n"
        f"environment: {env}; cpus: {os.cpu_count()}{heap}\n"
        f"float32 matmul peak, {PEAK_N}^3, this run: {peak:.1f} GFLOP/s"
    )


def format_row(row: dict) -> str:
    """One config's figures as a small table, one line per framework."""
    gflop = row["flops_per_step"] / 1e9
    limit = None  # ms: the least matmul FLOPs any step can do, each at the measured peak
    if "peak_gflops" in row and "floor_flops" in row:
        limit = 1e3 * row["floor_flops"] / (row["peak_gflops"] * 1e9)
    lines = [
        f"\n{row['config']}: {row['params']:,} params, {gflop:.2f} GFLOP/step"
        + (f"; matmul peak {row['peak_gflops']:.1f} GFLOP/s" if "peak_gflops" in row else ""),
        f"  {'':8} {'ms/step':>9} {'min-max':>17} {'tok/s':>9} {'GFLOP/s':>8} {'of peak':>8} "
        f"{'peak MiB':>9}" + (f" {'of limit':>9}" if limit else ""),
    ]
    for fw in ("resgrad", "plain", "torch"):
        if fw in row:
            f = row[fw]
            spread = f"{f.get('ms_min', math.nan):.2f}-{f.get('ms_max', math.nan):.2f}"
            lines.append(
                f"  {fw:8} {f['ms_per_step']:9.2f} {spread:>17} {f['tokens_per_s']:9.0f} "
                f"{f['gflops']:8.1f} {f['peak_fraction']:8.1%} {f['peak_mib']:9.0f}"
                + (f" {limit / f['ms_per_step']:9.1%}" if limit else "")  # limit efficiency
            )
    if "speedup" in row:
        lines.append(f"  throughput resgrad / PyTorch: {row['speedup']:.2f}x")
    if "plain_speedup" in row:
        lines.append(f"  throughput resgrad / plain (one shard): {row['plain_speedup']:.2f}x")
    if "torch" in row and "peak_gflops" in row and "floor_flops" in row:
        floor = 1e3 * row["floor_flops"] / (row["peak_gflops"] * 1e9)  # ms: each matmul at peak
        t = row["torch"]["ms_per_step"]
        lines.append(
            f"  ceiling: the least matmul FLOPs at the peak take {floor:.1f} ms, so no step "
            f"here beats PyTorch by more than {t / floor:.2f}x; 1.5x needs "
            f"{1.5 * floor / t:.0%} of the peak for the whole step"
        )
    if limit:
        lines.append(
            "  of limit (limit efficiency): that least time over the step's, the share of "
            "the machine's limit each step reaches"
        )
    return "\n".join(lines)
