"""Seconds for the single-branch and single-block lesion table, resgrad against torch.

The issue's target: GPT-2 124M's shape (random weights from transformers' own GPT2Config
init, nothing downloaded), T=128, B=4, float32: every attention, every MLP and every block
deleted in turn (2L + L = 36 interventions, plus the intact model), each measured on one
batch (cross-entropy, top-1 agreement and accuracy, KL(intact || lesioned)). resgrad runs
:func:`resgrad.lab.lesion.measure.model_study`, which computes the intact stream once and runs each
lesion from its first changed block; transformers' model in torch runs the same lesions
the torch way, one whole forward each (a deleted block: ``transformer.h`` without it; a
deleted branch: its ``c_proj`` weight and bias zeroed, then restored). Printed: both times,
forward passes per second, block forwards run, and the largest difference between the two
tables' figures (float32 rounding).

    python benchmarks/bench_lesion.py [--small] [--threads N] [--repeat R]

``--small`` runs a 4-layer C=128 model (seconds, for a busy machine and the test that
every benchmark runs).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from resgrad.formats.hf import gpt_config_from_hf, gpt_from_state
from resgrad.lab.lesion import interventions as lesion
from resgrad.lab.lesion import measure as lesionstudy
from resgrad.lab.study import text_windows

GPT2 = dict(vocab_size=50257, n_positions=1024, n_layer=12, n_head=12, n_embd=768)
SMALL = dict(vocab_size=512, n_positions=128, n_layer=4, n_head=4, n_embd=128)
WHAT = ("attn", "mlp", "block")


def torch_table(torch, hf, lesions, idx: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """(J, 4) CE, agreement, accuracy and KL of each lesion, by whole forwards in torch."""
    x, y = torch.from_numpy(idx), torch.from_numpy(targets).reshape(-1)
    blocks = list(hf.transformer.h)

    def forward():
        return hf(x, use_cache=False).logits.reshape(-1, hf.config.vocab_size)  # (N, V)

    out = []
    with torch.no_grad():
        lp0 = torch.log_softmax(forward(), dim=-1)  # (N, V) the intact model
        top0 = lp0.argmax(dim=-1)
        for les in lesions:
            zeroed = []
            for p in range(les.L):  # single lesions only: nothing moves
                for keep, sub in ((les.attn[p], blocks[p].attn), (les.mlp[p], blocks[p].mlp)):
                    if not keep and (les.attn[p] or les.mlp[p]):
                        w = sub.c_proj
                        zeroed.append((w, w.weight.clone(), w.bias.clone()))
                        w.weight.zero_()
                        w.bias.zero_()
            hf.transformer.h = torch.nn.ModuleList(
                [b for p, b in enumerate(blocks) if les.attn[p] or les.mlp[p]]
            )
            lp = torch.log_softmax(forward(), dim=-1)  # (N, V)
            top = lp.argmax(dim=-1)
            kl = (lp0.exp() * (lp0 - lp)).sum(dim=-1).mean()
            ce = -lp.gather(1, y[:, None]).mean()
            agree, acc = (top == top0).double().mean(), (top == y).double().mean()
            out.append([float(ce), float(agree), float(acc), float(kl)])
            hf.transformer.h = torch.nn.ModuleList(blocks)
            for w, weight, bias in zeroed:
                w.weight.copy_(weight)
                w.bias.copy_(bias)
    return np.array(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="a 4-layer C=128 model, not GPT-2")
    ap.add_argument("--seq", type=int, default=128, help="T (default: 128)")
    ap.add_argument("--batch", type=int, default=4, help="B (default: 4)")
    ap.add_argument("--threads", type=int, default=None, help="BLAS and torch threads "
                    "(default: every core)")  # fmt: skip
    ap.add_argument("--repeat", type=int, default=1, help="timed runs of each (default: 1)")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers
    from threadpoolctl import threadpool_limits

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = args.threads or cores
    torch.set_num_threads(threads)
    shape = SMALL if args.small else GPT2
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(**shape, attn_implementation="eager", bos_token_id=None,
                                  eos_token_id=None)  # fmt: skip
    hf = transformers.GPT2LMHeadModel(cfg).to(torch.float32).eval()
    tensors = {k: v.detach().numpy() for k, v in hf.state_dict().items()}
    model = gpt_from_state(gpt_config_from_hf(cfg.to_dict()), tensors, dtype=np.float32)
    L, T, B = model.cfg.n_layer, args.seq, args.batch
    print(f"cores available: {cores}; threads: {threads} (BLAS and torch)")
    print(f"model: L={L} C={model.cfg.n_embd} H={model.cfg.n_head} V={model.cfg.vocab_size}, "
          f"B={B} T={T}, float32, transformers' GPT2Config init; torch {torch.__version__}, "
          f"transformers {transformers.__version__}")  # fmt: skip
    lesions = lesion.plan(L, what=WHAT)  # the intact model, then 2L branches and L blocks
    ids = np.random.default_rng(0).integers(0, model.cfg.vocab_size, 20 * T)  # (N,) a "text"
    w = text_windows(ids, T, B, 0)  # (B, T + 1): the study's own batch of seed 0
    passes = len(lesions)  # forward passes of either table, the intact one included
    with threadpool_limits(limits=threads):
        warm = lesions[:2]  # untimed: numba compiles its kernels, torch warms its allocator
        lesionstudy.model_study(model, ids, warm, T, B, seeds=(0,))
        torch_table(torch, hf, warm, w[:, :-1], w[:, 1:])
        best_r = best_t = float("inf")
        for _ in range(args.repeat):
            t = time.perf_counter()
            res = lesionstudy.model_study(model, ids, lesions, T, B, seeds=(0,))
            best_r = min(best_r, time.perf_counter() - t)
            t = time.perf_counter()
            ref = torch_table(torch, hf, lesions, w[:, :-1], w[:, 1:])
            best_t = min(best_t, time.perf_counter() - t)
    ours = res.values[:, 0][:, [0, 2, 3, 4]]  # (J, 4) ce, agree, acc, kl
    print(f"{len(lesions) - 1} interventions ({', '.join(WHAT)}) and the intact model: "
          f"{passes} forward passes each")  # fmt: skip
    print(f"resgrad: {best_r:.2f} s, {passes / best_r:.2f} passes/s; block forwards "
          f"{res.block_passes} of {res.full_passes} (the intact prefix reused)")  # fmt: skip
    print(f"torch (transformers, whole forwards): {best_t:.2f} s, {passes / best_t:.2f} "
          "passes/s")  # fmt: skip
    print(f"resgrad / torch speed: {best_t / best_r:.2f}x")
    diff = np.abs(ours - ref).max(axis=0)  # (4,)
    print(f"largest difference, resgrad vs torch: CE {diff[0]:.1e}, agreement {diff[1]:.3f}, "
          f"accuracy {diff[2]:.3f}, KL {diff[3]:.1e} (float32)")  # fmt: skip


if __name__ == "__main__":
    main()
