"""Greedy generation, GPT-2 124M shape: resgrad's KV cache against transformers' generate.

    python benchmarks/bench_generate.py                      # GPT-2 124M, 16 + 100 tokens
    python benchmarks/bench_generate.py --repeat 5
    python benchmarks/bench_generate.py --reference          # the readable path beside it
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_generate.py
    python benchmarks/bench_generate.py --config cpu-recipe --new-tokens 8   # a quick check

One sequence, a seeded random prompt of ``--prompt`` tokens, ``--new-tokens`` new tokens
chosen greedily, float32, from a model with random (seeded) GPT-2-style weights:

- resgrad: :func:`resgrad.train.sample.generate` with ``top_k=1`` (the argmax: greedy),
  which fills its :class:`~resgrad.train.sample.KVCache` from the prompt in one pass, then
  runs :func:`~resgrad.train.sample.forward_step` on one new token at a time: the fused
  one-token step, :func:`~resgrad.train.sample.decode_step` (compiled attention over the
  cache, buffers reused, BLAS products);
- with ``--reference``, "resgrad (reference)": the same call with
  ``resgrad.nn.kernels.ENABLED = False``, the readable NumPy path of every layer, timed in
  the same rounds;
- transformers: ``GPT2LMHeadModel.generate(do_sample=False, use_cache=True)`` on the
  same weights, written by resgrad's exporter (:func:`resgrad.formats.hf.export_hf`) to a
  temporary directory and read with ``from_pretrained``.

Every side must produce the same token ids (checked; the script exits 1 if they differ).
tokens/s = new tokens / wall time of one whole call (the prompt's pass included), the
median of ``--repeat`` calls per side, the sides alternating call by call after one
untimed call each, each call after a pause that lets the other's threads go quiet.
Both use the same thread count. transformers (and PyTorch) are optional: without them
resgrad's figures print alone.

The limit: a token cannot come faster than the bytes it must read from memory at the
memory bandwidth. Counted per token: every float32 parameter except the position
embedding (each block's weights, biases and LayerNorms, ``ln_f``, and ``wte`` once, as
the tied LM head's (V, C) matrix; the token and position embeddings' one row each are
left aside), plus the KV cache's keys and values read by attention (its mean over the
generated tokens). The bandwidth is the best of the readings of
:func:`resgrad.perf.bench.memory_bandwidth_gbs` taken in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

from resgrad.formats.hf import export_hf
from resgrad.nn import kernels
from resgrad.nn.model import GPT
from resgrad.perf.bench import (
    BANDWIDTH_MIB,
    BENCH_CONFIGS,
    blas_info,
    memory_bandwidth_gbs,
    settle,
)
from resgrad.perf.heap import keep_freed_memory
from resgrad.train.sample import generate


def resgrad_generate(model: GPT, prompt: np.ndarray, new: int, fused: bool = True) -> np.ndarray:
    """Greedy continuation of ``prompt`` (T0,) by ``new`` tokens: (new,) int64; ``fused``
    False runs the readable path (``resgrad.nn.kernels.ENABLED = False``)."""
    was, kernels.ENABLED = kernels.ENABLED, fused
    try:
        rng = np.random.default_rng(0)
        out = generate(model, prompt[None, :], new, rng, top_k=1)  # (1, T0 + new)
    finally:
        kernels.ENABLED = was
    return out[0, len(prompt) :]


def hf_copy(model: GPT, threads: int):
    """(torch, transformers' GPT2LMHeadModel holding ``model``'s weights, in eval mode), the
    weights passed through resgrad's exporter and transformers' own loader; None where
    transformers or PyTorch is not installed. bench_flow_profile.py uses it too."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local directory: nothing to fetch
    try:
        import torch
        from transformers import GPT2LMHeadModel
        from transformers.utils import logging
    except ImportError:
        return None
    logging.disable_progress_bar()  # the weights' loading bar
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as d:
        export_hf(model, os.path.join(d, "model"))
        hf = GPT2LMHeadModel.from_pretrained(os.path.join(d, "model"), dtype=torch.float32)
    hf.eval()  # dropout off; autograd stays on
    return torch, hf


def hf_generator(model: GPT, threads: int):
    """transformers' GPT2LMHeadModel holding ``model``'s weights, and its greedy generate;
    None where transformers or PyTorch is not installed."""
    copy = hf_copy(model, threads)
    if copy is None:
        return None
    torch, hf = copy

    def run(prompt: np.ndarray, new: int) -> np.ndarray:
        ids = torch.from_numpy(prompt[None, :])  # (1, T0)
        with torch.no_grad():
            out = hf.generate(
                ids, attention_mask=torch.ones_like(ids), do_sample=False, use_cache=True,
                max_new_tokens=new, min_new_tokens=new, eos_token_id=None, pad_token_id=0,
            )  # fmt: skip
        return out[0, len(prompt) :].numpy()

    return run, f"transformers {sys.modules['transformers'].__version__}, torch {torch.__version__}"


def bytes_per_token(model: GPT, prompt: int, new: int) -> tuple[int, float]:
    """Float32 bytes one generated token reads: (the weights, the KV cache's mean)."""
    cfg = model.cfg
    weights = sum(a.size for k, a in model.params.items() if k != "wpe")  # wte once: the head
    itemsize = model.params["wte"].itemsize
    # a pass at positions 0..s-1 reads s keys and s values of C per block; the calls see
    # s = prompt (the prompt's pass), then prompt + 1, ..., prompt + new - 1
    s = np.arange(prompt, prompt + new)  # (new,)
    kv = 2 * cfg.n_layer * cfg.n_embd * float(s.mean())
    return weights * itemsize, kv * itemsize


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", choices=list(BENCH_CONFIGS), default="gpt2-124m")
    p.add_argument("--prompt", type=int, default=16, help="prompt tokens (default 16)")
    p.add_argument("--new-tokens", type=int, default=100, help="generated tokens (default 100)")
    p.add_argument("--repeat", type=int, default=3, help="timed calls per side (default 3)")
    p.add_argument("--seed", type=int, default=0, help="seeds the weights and the prompt")
    p.add_argument(
        "--reference", action="store_true",
        help="also time resgrad's readable path (resgrad.nn.kernels.ENABLED = False) beside it",
    )  # fmt: skip
    p.add_argument("--bandwidth-mib", type=int, default=BANDWIDTH_MIB, help=argparse.SUPPRESS)
    args = p.parse_args()
    bench = BENCH_CONFIGS[args.config]
    cfg = bench.gpt_config()
    if args.prompt < 1 or args.new_tokens < 1 or args.repeat < 1:
        p.error("--prompt, --new-tokens and --repeat must be at least 1")
    if args.prompt + args.new_tokens > cfg.block_size:
        p.error(f"--prompt + --new-tokens must be at most the context, {cfg.block_size}")
    keep_freed_memory()  # as `resgrad sample` runs (resgrad.perf.heap)
    blas = blas_info()
    threads = blas[0].get("num_threads") or os.cpu_count()
    print(f"BLAS (threadpoolctl): {json.dumps(blas)}")
    env = {k: os.environ.get(k, "(unset)") for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    print(f"environment: {env}; cpus: {os.cpu_count()}; threads each: {threads}")

    model = GPT(cfg, seed=args.seed, dtype=np.float32)
    prompt = np.random.default_rng([args.seed, 1]).integers(0, cfg.vocab_size, args.prompt)
    print(
        f"{bench.name}: L={cfg.n_layer} H={cfg.n_head} C={cfg.n_embd} V={cfg.vocab_size}, "
        f"{model.num_params():,} params, float32; greedy, batch 1, prompt {args.prompt}, "
        f"{args.new_tokens} new tokens"
    )
    print("resgrad: forward_step's one-token decode step (resgrad.nn.decode_kernels)")
    sides = {"resgrad": lambda: resgrad_generate(model, prompt, args.new_tokens)}
    if args.reference:
        sides["resgrad (reference)"] = lambda: resgrad_generate(
            model, prompt, args.new_tokens, fused=False
        )
    hf = hf_generator(model, threads)
    if hf is None:
        print("transformers or torch not installed: resgrad alone")
    else:
        run, version = hf
        print(f"referee: {version}, GPT2LMHeadModel.generate(do_sample=False, use_cache=True)")
        sides["transformers"] = lambda: run(prompt, args.new_tokens)

    tokens = {name: gen() for name, gen in sides.items()}  # the untimed first call of each
    times = {name: [] for name in sides}
    for _ in range(args.repeat):  # alternate call by call: both see the same machine
        for name, gen in sides.items():
            settle()
            t0 = time.perf_counter()
            gen()
            times[name].append(time.perf_counter() - t0)
    bw = memory_bandwidth_gbs(args.bandwidth_mib)  # after the timing: no array left in memory
    rate = {name: args.new_tokens / statistics.median(t) for name, t in times.items()}

    for name, t in times.items():
        ms = [1e3 * x / args.new_tokens for x in t]
        print(
            f"  {name:19} {rate[name]:7.1f} tokens/s  ({statistics.median(ms):.2f} ms/token, "
            f"calls {min(ms):.2f}-{max(ms):.2f})"
        )
    w, kv = bytes_per_token(model, args.prompt, args.new_tokens)
    best = max(bw.values())
    ceiling = best * 1e9 / (w + kv)
    print(
        "  memory bandwidth, GB/s: " + ", ".join(f"{k} {v:.1f}" for k, v in bw.items())
        + f" ({args.bandwidth_mib} MiB arrays)"
    )  # fmt: skip
    print(
        f"  limit: {(w + kv) / 1e6:.1f} MB read per token (weights {w / 1e6:.1f} MB, "
        f"KV cache {kv / 1e6:.2f} MB mean) at {best:.1f} GB/s: at most {ceiling:.1f} tokens/s"
    )
    shares = ", ".join(f"{name} {rate[name] / ceiling:.0%}" for name in sides)
    print(f"  share of the limit: {shares}")
    for name in sides:
        if name != "resgrad":
            print(f"  tokens/s resgrad / {name}: {rate['resgrad'] / rate[name]:.2f}x")
    if len(sides) > 1:
        for name in sides:
            diff = np.flatnonzero(tokens[name] != tokens["resgrad"])
            if diff.size:
                print(
                    f"  token ids of {name} DIFFER from resgrad's from new token {diff[0]} on "
                    f"({diff.size} of {args.new_tokens})"
                )
                raise SystemExit(1)
        print(f"  token ids identical on every side ({args.new_tokens} of {args.new_tokens})")


if __name__ == "__main__":
    main()
