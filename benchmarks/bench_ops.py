"""Where a training step's time goes, per kind of work, resgrad beside PyTorch eager.

    python benchmarks/bench_ops.py                         # the small config
    python benchmarks/bench_ops.py --config cpu-recipe --steps 20
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_ops.py

The first step of the performance issue: a per-operation table, so that each
optimization aims at the largest gap and shows what it gained. Same model, batch
and thread count as ``bench_train_step.py`` (its PyTorch model is imported from
there).

- resgrad: ``cProfile`` over ``--steps`` steps of the plain pass (one shard:
  cProfile sees only the thread it runs on, so the trainer's shards on threads are
  left out); the self time of each layer function (its inline NumPy work included:
  a matmul written ``x @ w`` counts in the function that writes it) is summed by
  kind. The profiler adds a little per Python call, so the resgrad total reads a
  few percent above the untimed step.
- PyTorch: ``torch.profiler`` over the same number of steps; the self CPU time of
  each ATen op, summed by kind.

Kinds: matmul (the linear layers' and the LM head's GEMMs), attention (q k^T,
softmax, masking, att v, and their backward), layernorm, gelu, cross-entropy,
embedding, optimizer (AdamW), clip+dynamics (the gradient norms and their clipping, and
resgrad's per-step dynamics: update ratios, activation RMS), other (everything else:
residual adds, reshapes, copies, allocation, Python). Each row is ms per step.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_train_step import _import_torch, torch_step_fn  # noqa: E402

from resgrad.perf.bench import BENCH_CONFIGS, blas_info, resgrad_stepper  # noqa: E402
from resgrad.perf.heap import keep_freed_memory  # noqa: E402

KINDS = ("matmul", "attention", "layernorm", "gelu", "cross-entropy", "embedding", "optimizer",
         "clip+dynamics", "other")  # fmt: skip

# resgrad: function name -> kind (self time); anything not listed is "other"
RESGRAD_KIND = {
    "linear_forward": "matmul", "linear_backward": "matmul",
    "forward": "matmul", "backward_stream": "matmul",  # GPT's: the tied LM head's GEMMs
    "sdpa_forward": "attention", "sdpa_backward": "attention",
    "attention_forward": "attention", "attention_backward": "attention",
    "softmax_forward": "attention", "softmax_backward": "attention",
    "layernorm_forward": "layernorm", "layernorm_backward": "layernorm",
    "gelu_forward": "gelu", "gelu_backward": "gelu",
    "gelu_erf_forward": "gelu", "gelu_erf_backward": "gelu",  # the exact form, nanoGPT's
    "cross_entropy_forward": "cross-entropy", "cross_entropy_backward": "cross-entropy",
    "embedding_forward": "embedding", "embedding_backward": "embedding",
    "softmax": "attention",  # layers.softmax: attention's, in the forward
    "step": "optimizer", "_update": "optimizer", "_pieces": "optimizer",  # AdamW's arithmetic
    # the compiled kernels (resgrad.nn.kernels, AdamW's fused pass): cProfile names each
    # by its Python source function, and its wrapper
    "gelu_u": "gelu", "gelu_out": "gelu", "gelu_dx": "gelu",
    "_gelu_u": "gelu", "_gelu_out": "gelu", "_gelu_dx": "gelu",
    "gelu_erf": "gelu", "_gelu_erf32": "gelu",
    "_ln_forward": "layernorm", "_ln_backward": "layernorm", "adamw_piece": "optimizer",
    "causal_softmax": "attention", "causal_softmax_backward": "attention",
    "_causal_softmax": "attention", "causal_attention": "attention",
    "causal_attention_backward": "attention", "_attn_forward": "attention",
    "_attn_backward": "attention",
    "_causal_softmax_dx": "attention", "sum_sq64": "clip+dynamics", "_sum_sq64": "clip+dynamics",
    # the trainer's checks and records: gradient norms, clipping, update ratios, RMS
    "grad_norms": "clip+dynamics", "clip_grad_norm": "clip+dynamics",
    "snapshot_blocks": "clip+dynamics", "update_ratios": "clip+dynamics",
    "sum_sq": "clip+dynamics",
}  # fmt: skip


def torch_kind(op: str) -> str:
    """The kind of an ATen op, by its name."""
    name = op.lower()
    rules = (
        (("scaled_dot_product", "flash_attention", "_softmax", "softmax"), "attention"),
        (("addmm", "aten::mm", "bmm", "matmul", "linear"), "matmul"),
        (("layer_norm",), "layernorm"),
        (("gelu",), "gelu"),
        (("cross_entropy", "log_softmax", "nll_loss"), "cross-entropy"),
        (("embedding",), "embedding"),
        (("norm", "clamp", "_foreach_mul"), "clip+dynamics"),  # clip_grad_norm_
        (("adam", "_foreach", "lerp", "addcmul", "addcdiv"), "optimizer"),
    )
    for keys, kind in rules:
        if any(k in name for k in keys):
            return kind
    return "other"


def resgrad_table(cfg, steps: int) -> dict[str, float]:
    with resgrad_stepper(cfg, shards=1) as (_, step):  # cProfile sees one thread: plain pass
        for _ in range(2):
            step()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(steps):
            step()
        prof.disable()
    out: dict[str, float] = defaultdict(float)
    for (_, _, func), (_, _, tottime, _, _) in pstats.Stats(prof).stats.items():
        out[RESGRAD_KIND.get(func, "other")] += 1e3 * tottime / steps
    return out


def torch_table(cfg, steps: int) -> dict[str, float]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    _, step = torch_step_fn(cfg)
    for _ in range(2):
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    out: dict[str, float] = defaultdict(float)
    for e in prof.key_averages():
        out[torch_kind(e.key)] += e.self_cpu_time_total / 1e3 / steps  # us -> ms
    del torch
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="small", choices=sorted(BENCH_CONFIGS))
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    keep_freed_memory()  # as `resgrad train` runs
    cfg = BENCH_CONFIGS[args.config]
    blas = ", ".join(f"{i['internal_api']} {i.get('architecture')} x{i['num_threads']}"
                     for i in blas_info())  # fmt: skip
    print(f"{args.config}: {args.steps} profiled steps; BLAS: {blas}")
    ours = resgrad_table(cfg, args.steps)
    theirs = torch_table(cfg, args.steps) if _import_torch() else {}
    print(f"{'kind':<14} {'resgrad ms':>11} {'PyTorch ms':>11} {'ratio':>7}")
    for k in KINDS:
        a, b = ours.get(k, 0.0), theirs.get(k, 0.0)
        ratio = f"{a / b:6.2f}x" if b > 0 else "      -"
        print(f"{k:<14} {a:>11.2f} {b:>11.2f} {ratio}")
    ta, tb = sum(ours.values()), sum(theirs.values())
    print(f"{'total':<14} {ta:>11.2f} {tb:>11.2f} {ta / tb if tb else 0:6.2f}x")
    print("ratio = resgrad time / PyTorch time per kind (below 1: resgrad is faster)")


if __name__ == "__main__":
    main()
