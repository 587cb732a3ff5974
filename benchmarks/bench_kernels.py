"""The compiled kernels against the NumPy passes they stand beside, one op and one step.

    python benchmarks/bench_kernels.py                     # every config, 1 BLAS thread for ops
    python benchmarks/bench_kernels.py --config cpu-recipe --rounds 5
    python benchmarks/bench_kernels.py --attention --config cpu-recipe --config medium
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_kernels.py

``resgrad.nn.kernels.ENABLED`` is the one switch: on, the layers take the compiled
kernels (:mod:`resgrad.nn.kernels`); off, their readable NumPy passes. For each config
(:data:`resgrad.perf.bench.BENCH_CONFIGS`), float32, at the config's own shapes:

- each op, forward and backward, on and off: the causal attention (``sdpa_forward`` /
  ``sdpa_backward``: the scale, the mask and the softmax in one pass), LayerNorm (the
  whole row in one pass), and the gradient norms (:func:`resgrad.train.optim.grad_norms`
  over the model's parameter shapes: a float64 sum of squares in one pass); on one BLAS
  thread, as each of the trainer's shards runs them; the best of ``--repeat`` calls, the
  two sides alternating call by call;
- the trainer's whole iteration (:func:`resgrad.perf.bench.resgrad_stepper`: the batch,
  the step on its shards, clipping, AdamW, the dynamics), on and off, alternating blocks
  of 5 iterations for ``--rounds`` rounds after a pause each
  (:func:`resgrad.perf.bench.settle`); the median ms of the blocks.

Prints ms and off / on (above 1: the kernels are faster). The two sides round
differently (tests/nn/test_kernels.py holds them within 1e-5 in float32).

``--attention``: the causal attention's forward and backward, float32, at each config's
(B, H, T, D), three ways side by side: the compiled attention
(:func:`resgrad.nn.kernels.causal_attention`, one pass a head on numba's threads), the
NumPy steps (the switch off: batched products on BLAS's threads) and PyTorch's
``scaled_dot_product_attention(is_causal=True)`` with ``backward`` (its threads); every
library on its default thread count. ``--rounds`` rounds, each way ``--repeat`` calls a
round after a pause; the best call of each; then the same on one thread each (as one of
the trainer's shards runs it). The compiled way turns ``kernels.FUSED_ATTENTION`` on for its
calls (it is off by default). Prints the CPU's vector width and the BLAS.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits

from resgrad.nn import kernels
from resgrad.nn.layers import layernorm_backward, layernorm_forward, sdpa_backward, sdpa_forward
from resgrad.nn.model import GPT
from resgrad.perf.bench import ALL_CONFIGS, BENCH_CONFIGS, blas_info, resgrad_stepper, settle
from resgrad.perf.heap import keep_freed_memory
from resgrad.train.optim import grad_norms

BLOCK = 5  # iterations per timed block of the whole step


def best_of(ways: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """The best ms of ``repeat`` calls of each way, on then off, alternating call by call."""
    times: dict[str, list[float]] = {w: [] for w in ways}
    for name, f in ways.items():  # compile, warm the caches
        kernels.ENABLED = name.endswith("on")
        f()
    for _ in range(repeat):
        for name, f in ways.items():
            kernels.ENABLED = name.endswith("on")
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
    kernels.ENABLED = True
    return {w: 1e3 * min(t) for w, t in times.items()}


def op_ways(name: str) -> dict[str, dict[str, Callable[[], object]]]:
    """Per op, its forward and backward with the switch on and off: {op: {way: call}}."""
    c = BENCH_CONFIGS[name]
    B, T, C, H = c.batch_size, c.block_size, c.n_embd, c.n_head
    rng = np.random.default_rng(0)
    f32 = np.float32
    q, k, v, dy = (rng.standard_normal((B, H, T, C // H)).astype(f32) for _ in range(4))
    x, dx = (rng.standard_normal((B, T, C)).astype(f32) for _ in range(2))
    g, b = np.ones(C, f32), np.zeros(C, f32)
    model = GPT(c.gpt_config(), seed=0, dtype=f32)
    grads = {key: rng.standard_normal(p.shape, dtype=f32) for key, p in model.params.items()}
    caches = {}
    for on in (True, False):
        kernels.ENABLED = on
        caches["attn", on] = sdpa_forward(q, k, v)[1]
        caches["ln", on] = layernorm_forward(x, g, b)[1]
    kernels.ENABLED = True
    ways: dict[str, dict[str, Callable[[], object]]] = {}
    for side in ("on", "off"):
        on = side == "on"
        ways.setdefault("attention forward", {})[side] = lambda: sdpa_forward(q, k, v)
        ways.setdefault("attention backward", {})[side] = lambda on=on: sdpa_backward(
            dy, caches["attn", on]
        )
        ways.setdefault("layernorm forward", {})[side] = lambda: layernorm_forward(x, g, b)
        ways.setdefault("layernorm backward", {})[side] = lambda on=on: layernorm_backward(
            dx, caches["ln", on]
        )
        ways.setdefault("gradient norms", {})[side] = lambda: grad_norms(grads)
    return ways


def vector_width() -> str:
    """The widest x86 vector extension /proc/cpuinfo lists: AVX-512, AVX2 or neither."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(f.read().split())
    except OSError:
        return "unknown (no /proc/cpuinfo)"
    for flag, width in (("avx512f", "AVX-512 (512-bit)"), ("avx2", "AVX2 (256-bit)")):
        if flag in flags:
            return width
    return "below AVX2"


def attention_ways(name: str) -> dict[str, Callable[[], object]]:
    """Causal attention forward + backward at config ``name``'s shapes: {way: call}."""
    c = BENCH_CONFIGS[name]
    B, T, C, H = c.batch_size, c.block_size, c.n_embd, c.n_head
    rng = np.random.default_rng(0)
    q, k, v, dy = (rng.standard_normal((B, H, T, C // H), dtype=np.float32) for _ in range(4))
    was = kernels.FUSED_ATTENTION  # the compiled attention, on for the "compiled" way

    def resgrad(on: bool) -> Callable[[], object]:
        def run():
            kernels.ENABLED = kernels.FUSED_ATTENTION = on
            try:
                return sdpa_backward(dy, sdpa_forward(q, k, v)[1])
            finally:
                kernels.ENABLED, kernels.FUSED_ATTENTION = True, was

        return run

    ways = {"compiled": resgrad(True), "NumPy steps": resgrad(False)}
    try:
        import torch
    except ImportError:
        return ways
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    tdy = torch.tensor(dy)

    def pytorch():
        for t in (tq, tk, tv):
            t.grad = None
        y = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
        y.backward(tdy)

    ways["PyTorch"] = pytorch
    return ways


def _best_ms(ways: dict[str, Callable[[], object]], repeat: int, rounds: int) -> dict[str, float]:
    """The best ms of each way: ``rounds`` rounds, each way ``repeat`` calls a round."""
    best = {w: float("inf") for w in ways}
    for f in ways.values():  # compile, warm
        f()
    for _ in range(rounds):
        for w, f in ways.items():
            settle()
            for _ in range(repeat):
                t0 = time.perf_counter()
                f()
                best[w] = min(best[w], time.perf_counter() - t0)
    return {w: 1e3 * t for w, t in best.items()}


def attention_table(names: list[str], repeat: int, rounds: int) -> None:
    """Prints each config's attention ms three ways, and compiled / PyTorch: on every
    library's default threads, then on one thread each (as a trainer's shard runs)."""
    import numba

    try:
        import torch
    except ImportError:
        torch = None
    print(f"CPU vectors: {vector_width()}; numba threads: {numba.get_num_threads()}")
    print(f"{'config':<11} {'(B, H, T, D)':<18} {'threads':>7} {'compiled':>9} {'NumPy':>9} "
          f"{'PyTorch':>9} {'compiled/PyTorch':>17}")  # fmt: skip
    for name in names:
        c = BENCH_CONFIGS[name]
        shape = f"({c.batch_size}, {c.n_head}, {c.block_size}, {c.n_embd // c.n_head})"
        for one in (False, True):
            was = numba.get_num_threads(), torch.get_num_threads() if torch else 1
            if one:
                numba.set_num_threads(1)
                if torch:
                    torch.set_num_threads(1)
            try:
                with threadpool_limits(1 if one else None, user_api="blas"):
                    ms = _best_ms(attention_ways(name), repeat, rounds)
            finally:
                numba.set_num_threads(was[0])
                if torch:
                    torch.set_num_threads(was[1])
            t = ms.get("PyTorch", float("nan"))
            print(f"{name:<11} {shape:<18} {'1' if one else 'all':>7} {ms['compiled']:>9.3f} "
                  f"{ms['NumPy steps']:>9.3f} {t:>9.3f} {ms['compiled'] / t:>16.2f}x")  # fmt: skip


def step_ms(name: str, rounds: int) -> dict[str, float]:
    """The trainer's iteration, switch on and off, alternating blocks: median ms of each."""
    times: dict[str, list[float]] = {"on": [], "off": []}
    with resgrad_stepper(BENCH_CONFIGS[name]) as (_, step):
        for side in times:  # compile, warm
            kernels.ENABLED = side == "on"
            step()
        for _ in range(rounds):
            for side in times:
                kernels.ENABLED = side == "on"
                settle()
                t0 = time.perf_counter()
                for _ in range(BLOCK):
                    step()
                times[side].append((time.perf_counter() - t0) / BLOCK)
    kernels.ENABLED = True
    return {side: 1e3 * statistics.median(t) for side, t in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--config",
        action="append",
        choices=[*BENCH_CONFIGS, "all"],
        help="a config, or all (the default); may be given again",
    )
    p.add_argument(
        "--attention",
        action="store_true",
        help="causal attention forward + backward: compiled, NumPy steps, PyTorch",
    )
    p.add_argument("--repeat", type=int, default=50, help="calls of each op per side (50)")
    p.add_argument("--rounds", type=int, default=4, help="blocks of 5 steps per side (4)")
    args = p.parse_args()
    for flag in ("repeat", "rounds"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    keep_freed_memory()  # as resgrad train runs
    print(f"BLAS (threadpoolctl): {blas_info()}")
    given = args.config or ["all"]
    names = ALL_CONFIGS if "all" in given else given
    if args.attention:
        attention_table(names, args.repeat, args.rounds)
        return
    print(f"{'config':<11} {'op':<20} {'kernels ms':>11} {'NumPy ms':>9} {'off/on':>7}")
    for name in names:
        with threadpool_limits(1, user_api="blas"):  # one shard's thread
            for op, ways in op_ways(name).items():
                t = best_of({f"{op} on": ways["on"], f"{op} off": ways["off"]}, args.repeat)
                on, off = t[f"{op} on"], t[f"{op} off"]
                print(f"{name:<11} {op:<20} {on:>11.3f} {off:>9.3f} {off / on:>6.2f}x")
        s = step_ms(name, args.rounds)
        print(f"{name:<11} {'whole iteration':<20} {s['on']:>11.2f} {s['off']:>9.2f} "
              f"{s['off'] / s['on']:>6.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
