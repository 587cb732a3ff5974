"""The gradient-flow profile of a GPT-2 124M shape: resgrad against torch autograd and hooks.

    python benchmarks/bench_flow_profile.py                  # GPT-2 124M, T=128, B=4, 1 seed
    python benchmarks/bench_flow_profile.py --seeds 3 --repeat 5
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_flow_profile.py
    python benchmarks/bench_flow_profile.py --config cpu-recipe --seq 16 --batch 2  # quick

What ``resgrad flow --from-pretrained DIR --text FILE --seq 128 --batch 4`` computes once
the model is loaded: :func:`resgrad.lab.flow.pretrained.measure_model`, which for each seed draws
B windows of T + 1 tokens of the text, runs the model's cross-entropy forward and its
backward, and takes per layer the norm of the residual stream's gradient (``stream_grad``,
dL/dx_i for x_0 the embeddings' sum and x_i block i-1's output, i = 0..L), of the stream
itself (``stream_act``) and of each block's parameter gradients (``param_grad``, all of a
block's together and each by name), norms taken in float64, then aggregated over the seeds.

The model has GPT-2 124M's shape (12 layers, 12 heads, 768 wide, 50257 tokens, 1024
positions) with seeded random GPT-2-style weights in float32, and the "text" is seeded
random token ids (no tokenizer, no network). The PyTorch side is transformers'
``GPT2LMHeadModel`` holding the same weights (resgrad's exporter, then
``from_pretrained``, in eval mode: no dropout) on the same windows: forward hooks on
``transformer.drop`` (x_0) and on each block (x_1..x_L) keep the stream and register a
tensor hook that takes its gradient's norm; the loss is the same mean cross-entropy; the
parameter gradients' norms are read after ``backward``. Both measurements are checked to
agree, every (quantity, layer) mean, to ``--rtol`` (float32 arithmetic: they are not
bit-equal), and timed: median of ``--repeat`` whole measurements per side (all seeds),
alternating, after one untimed each, with the same thread count. Without transformers
(or PyTorch) resgrad's time prints alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_generate import hf_copy  # noqa: E402

from resgrad.formats.hf import HF_NAMES  # noqa: E402
from resgrad.lab.flow import measure_model
from resgrad.lab.study import text_windows  # noqa: E402
from resgrad.nn.model import GPT  # noqa: E402
from resgrad.perf.bench import BENCH_CONFIGS, blas_info, settle  # noqa: E402
from resgrad.perf.heap import keep_freed_memory  # noqa: E402

TEXT_TOKENS = 100_000  # the random "text" the windows are drawn from


def torch_measurer(model: GPT, threads: int):
    """A function running the profile in PyTorch on ``model``'s weights, and a version line;
    None where transformers or PyTorch is not installed."""
    copy = hf_copy(model, threads)
    if copy is None:
        return None
    torch, hf = copy
    import torch.nn.functional as F

    L = model.cfg.n_layer
    # transformers' parameter name -> resgrad's name without "blocks.{i}."
    names = {}
    for ours, (theirs, _) in HF_NAMES.items():
        if ours.startswith("blocks."):
            for i in range(L):
                names["transformer." + theirs.format(i=i)] = (i, ours.split(".", 2)[2])

    def norm(t) -> float:
        return float(torch.linalg.vector_norm(t.detach(), dtype=torch.float64))

    def profile(tokens: np.ndarray) -> dict[str, np.ndarray]:
        """One seed's windows (B, T + 1): quantity -> per-layer values, as resgrad's Profile."""
        idx, targets = (torch.from_numpy(a) for a in (tokens[:, :-1], tokens[:, 1:]))  # (B, T)
        act, grad = np.zeros(L + 1), np.zeros(L + 1)

        def keep(i):  # forward hook of x_i's producer: its norm now, its gradient's later
            def hook(module, inputs, out):
                x = out[0] if isinstance(out, tuple) else out  # (B, T, C)
                act[i] = norm(x)
                x.register_hook(lambda g: grad.__setitem__(i, norm(g)))

            return hook

        producers = [hf.transformer.drop, *hf.transformer.h]  # x_0, then blocks 0..L-1
        handles = [m.register_forward_hook(keep(i)) for i, m in enumerate(producers)]
        try:
            logits = hf(idx).logits  # (B, T, V)
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
            hf.zero_grad(set_to_none=True)
            loss.backward()
        finally:
            for h in handles:
                h.remove()
        per = defaultdict(lambda: np.zeros(L))  # name -> (L,)
        for name, p in hf.named_parameters():
            if name in names:
                i, ours = names[name]
                per[ours][i] = norm(p.grad)
        total = np.sqrt(sum(np.square(v) for v in per.values()))  # (L,)
        out = {"stream_grad": grad, "stream_act": act, "param_grad": total}
        return out | {f"param_grad:{k}": v for k, v in per.items()}

    version = f"transformers {sys.modules['transformers'].__version__}, torch {torch.__version__}"
    return profile, version


def resgrad_means(records) -> dict[tuple[str, int], float]:
    return {(r.quantity, r.layer): r.mean for r in records}


def torch_means(profile, ids, seq, batch, seeds) -> dict[tuple[str, int], float]:
    per_seed = [profile(text_windows(ids, seq, batch, s)) for s in seeds]  # the same windows
    return {
        (q, i): float(np.mean([p[q][i] for p in per_seed]))
        for q in per_seed[0]
        for i in range(len(per_seed[0][q]))
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", choices=list(BENCH_CONFIGS), default="gpt2-124m")
    p.add_argument("--seq", type=int, default=128, help="T, tokens per window (default 128)")
    p.add_argument("--batch", type=int, default=4, help="B, windows per seed (default 4)")
    p.add_argument("--seeds", type=int, default=1, help="seeds 0..K-1 (default 1)")
    p.add_argument("--repeat", type=int, default=3, help="timed measurements per side")
    p.add_argument("--rtol", type=float, default=1e-3, help="agreement required (default 1e-3)")
    args = p.parse_args()
    bench = BENCH_CONFIGS[args.config]
    cfg = bench.gpt_config()
    if not 1 <= args.seq <= cfg.block_size:
        p.error(f"--seq must be in [1, {cfg.block_size}], got {args.seq}")
    if min(args.batch, args.seeds, args.repeat) < 1:
        p.error("--batch, --seeds and --repeat must be at least 1")
    keep_freed_memory()  # as the resgrad command runs (resgrad.perf.heap)
    blas = blas_info()
    threads = blas[0].get("num_threads") or os.cpu_count()
    print(f"BLAS (threadpoolctl): {json.dumps(blas)}")
    env = {k: os.environ.get(k, "(unset)") for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    print(f"environment: {env}; cpus: {os.cpu_count()}; threads each: {threads}")

    model = GPT(cfg, seed=0, dtype=np.float32)
    ids = np.random.default_rng(1).integers(0, cfg.vocab_size, TEXT_TOKENS)  # (N,) the "text"
    seeds = tuple(range(args.seeds))
    print(
        f"{bench.name}: L={cfg.n_layer} H={cfg.n_head} C={cfg.n_embd} V={cfg.vocab_size}, "
        f"{model.num_params():,} params, float32; T={args.seq}, B={args.batch}, "
        f"{args.seeds} seed(s)"
    )
    sides = {
        "resgrad": lambda: resgrad_means(
            measure_model(model, ids, args.seq, args.batch, seeds, name=bench.name)
        )
    }
    measurer = torch_measurer(model, threads)
    if measurer is None:
        print("transformers or torch not installed: resgrad alone")
    else:
        profile, version = measurer
        print(f"referee: {version}, GPT2LMHeadModel with forward and tensor hooks")
        sides["torch"] = lambda: torch_means(profile, ids, args.seq, args.batch, seeds)

    means = {name: run() for name, run in sides.items()}  # the untimed first measurement
    times = {name: [] for name in sides}
    for _ in range(args.repeat):  # alternate: both see the same machine
        for name, run in sides.items():
            settle()
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
    sec = {name: statistics.median(t) for name, t in times.items()}
    for name, t in times.items():
        print(f"  {name:8} {sec[name]:8.3f} s per profile  (runs {min(t):.3f}-{max(t):.3f})")
    if "torch" not in sides:
        return
    print(f"  time torch / resgrad: {sec['torch'] / sec['resgrad']:.2f}x")
    r, t = means["resgrad"], means["torch"]
    if set(r) != set(t):
        raise SystemExit(f"the two profiles measure different things: {sorted(set(r) ^ set(t))}")
    worst = defaultdict(float)  # quantity kind -> largest relative difference
    for key in r:
        rel = abs(r[key] - t[key]) / max(abs(t[key]), 1e-30)
        kind = key[0].split(":")[0]
        worst[kind] = max(worst[kind], rel)
    agree = all(w <= args.rtol for w in worst.values())
    print(
        f"  agreement over {len(r)} (quantity, layer) means, largest relative difference: "
        + ", ".join(f"{k} {w:.1e}" for k, w in worst.items())
        + f" ({'within' if agree else 'NOT within'} {args.rtol:g})"
    )
    if not agree:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
