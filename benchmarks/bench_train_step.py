"""resgrad vs PyTorch eager: one float32 training iteration, side by side, in one run.

    python benchmarks/bench_train_step.py                  # all three configs
    python benchmarks/bench_train_step.py --config gpt2-124m   # GPT-2 124M, T=256, B=4
    python benchmarks/bench_train_step.py --config medium --steps 20
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_train_step.py
    python benchmarks/bench_train_step.py --both-env       # runs itself both ways

Each side times what its trainer does per iteration, so that the ratio here predicts the
end-to-end one (``bench_nanogpt_recipe.py``):

- resgrad's is ``resgrad train``'s (:func:`resgrad.perf.bench.resgrad_stepper`): a batch
  drawn, the batch as ``DEFAULT_SHARDS`` shards on threads (resgrad.train.shards),
  the gradient norms checked and clipped, AdamW, and the dynamics recorded every step.
  The row "plain" is the same iteration as one shard.
- PyTorch's is nanoGPT's ``train.py`` on a CPU (:func:`torch_step_fn`): its model
  (``model.py``: exact GELU, dropout modules at 0, ``F.scaled_dot_product_attention``,
  tied head), its optimizer groups (weight decay on 2-D tensors only), a batch drawn as
  its ``get_batch`` does, ``clip_grad_norm_(1.0)``, ``zero_grad(set_to_none=True)`` and
  ``loss.item()``. It runs in a process of its own with glibc's malloc as it comes, as
  train.py does (this process never imports PyTorch).

Both have the same config, the same parameter count (checked) and the same thread count.
The frameworks alternate in blocks of ``BLOCK`` back-to-back iterations, as a training run
takes them; each block starts after a pause that lets the other's spinning BLAS/OpenMP
threads go quiet and ``WARMUP`` untimed iterations that wake its own, and each figure is
the median of ``--steps`` iterations. (Until issue 29 the blocks were of 5 steps after one
untimed step, PyTorch's model had the tanh GELU, one optimizer group and no clipping, and
resgrad's step left out the batch, the clipping and the dynamics.)
GFLOP/s come from resgrad's counted matmul FLOPs (attention included), the same count for
both, as a fraction of the float32 matmul peak measured in this run. Peak memory is
measured in a fresh child process per framework. PyTorch is optional: without it
resgrad's figures print alone.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import math
import os
import subprocess
import sys

import numpy as np

from resgrad.perf.bench import (
    ALL_CONFIGS,
    BENCH_CONFIGS,
    BenchConfig,
    bench_text,
    blas_info,
    figures,
    format_row,
    machine_header,
    matmul_peak_gflops,
    own_peak_rss_mib,
    peak_memory_mib,
    resgrad_figures,
    resgrad_probe_argv,
    resgrad_stepper,
    settle,
    time_steps,
)
from resgrad.perf.heap import keep_freed_memory

BLOCK = 10  # back-to-back timed iterations of one framework before switching
WARMUP = 2  # untimed iterations at the start of each block: its threads awake

# imported by _import_torch() in PyTorch's own processes (the worker, the memory probe) only:
# the timing parent and resgrad's memory probe never load it
torch = F = nn = None


def _import_torch() -> bool:
    """Import PyTorch if it is installed (it is optional here)."""
    global torch, F, nn
    try:
        import torch
        import torch.nn.functional as F
        from torch import nn
    except ImportError:
        return False
    return True


def torch_model(cfg: BenchConfig):
    """nanoGPT's GPT (``model.py`` at 3adf61e) in PyTorch eager, float32, dropout 0.

    Its module names and calls: LayerNorm as ``F.layer_norm`` with a bias, ``c_attn`` split
    into q, k, v, ``F.scaled_dot_product_attention(is_causal=True)`` (its flash path),
    ``nn.GELU()`` (the exact erf form), ``nn.Dropout(0.0)`` where it has dropout, and
    ``lm_head`` (no bias) whose weight *is* ``wte``'s. Its initialisation: normal(0, 0.02),
    ``c_proj`` weights at 0.02 / sqrt(2 L), zero biases.
    """
    C, H, L = cfg.n_embd, cfg.n_head, cfg.n_layer

    class LayerNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight, self.bias = nn.Parameter(torch.ones(C)), nn.Parameter(torch.zeros(C))

        def forward(self, x):
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.attn_dropout, self.resid_dropout = nn.Dropout(0.0), nn.Dropout(0.0)

        def forward(self, x):
            B, T, _ = x.size()
            q, k, v = self.c_attn(x).split(C, dim=2)  # 3 x (B, T, C)
            q, k, v = (a.view(B, T, H, C // H).transpose(1, 2) for a in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0,
                                               is_causal=True)  # (B, H, T, D)  # fmt: skip
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.resid_dropout(self.c_proj(y))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc, self.gelu, self.c_proj = nn.Linear(C, 4 * C), nn.GELU(), nn.Linear(4 * C, C)
            self.dropout = nn.Dropout(0.0)

        def forward(self, x):
            return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn = LayerNorm(), CausalSelfAttention()
            self.ln_2, self.mlp = LayerNorm(), MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(cfg.vocab_size, C),
                wpe=nn.Embedding(cfg.n_positions or cfg.block_size, C),
                drop=nn.Dropout(0.0), h=nn.ModuleList(Block() for _ in range(L)), ln_f=LayerNorm(),
            ))  # fmt: skip
            self.lm_head = nn.Linear(C, cfg.vocab_size, bias=False)
            self.transformer.wte.weight = self.lm_head.weight  # weight tying
            for name, p in self.named_parameters():  # nanoGPT's _init_weights
                if name.endswith("c_proj.weight"):
                    nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L))
                elif p.ndim == 2:
                    nn.init.normal_(p, 0.0, 0.02)
                elif name.endswith(".bias"):
                    nn.init.zeros_(p)

        def forward(self, idx, targets):
            t = idx.size(1)
            pos = torch.arange(0, t, dtype=torch.long)  # (T,)
            x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
            for block in self.transformer.h:
                x = block(x)
            logits = self.lm_head(self.transformer.ln_f(x))  # (B, T, V)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                   ignore_index=-1)  # fmt: skip
            return logits, loss

    return GPT()


def torch_optimizer(model, lr: float = 1e-3):
    """nanoGPT's ``configure_optimizers`` on a CPU: weight decay 0.1 on the 2-D tensors only,
    betas (0.9, 0.99) (the character recipe's), and no ``fused`` (train.py asks for it on
    CUDA only)."""
    params = [p for p in model.parameters() if p.requires_grad]  # the tied weight once
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.99))


def torch_step_fn(cfg: BenchConfig, seed: int = 0):
    """nanoGPT's training iteration: a batch drawn as its ``get_batch`` draws one, the
    learning rate set on each group, forward, backward, ``clip_grad_norm_(1.0)``, AdamW,
    ``zero_grad(set_to_none=True)`` and the ``loss.item()`` it logs every iteration.

    The text is the seeded random token ids resgrad's step draws from, in memory (train.py
    re-opens a ``np.memmap`` per batch; the copy of B windows is the same)."""
    torch.manual_seed(seed)
    model = torch_model(cfg)
    model.train()
    opt = torch_optimizer(model)
    data = bench_text(cfg, seed)  # (TEXT_TOKENS,) uint16, the ids resgrad's step draws from
    T, B = cfg.block_size, cfg.batch_size

    def step() -> float:
        ix = torch.randint(len(data) - T, (B,))
        x = torch.stack([torch.from_numpy(data[i : i + T].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1 : i + 1 + T].astype(np.int64)) for i in ix])
        for group in opt.param_groups:
            group["lr"] = 1e-3
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    return model, step


def torch_worker(name: str, threads: int, kept_heap: bool = False) -> None:
    """The child process timing PyTorch's step: one JSON line per request on stdin, one back.

    It builds the ``name`` config's model, takes two warm-up steps and sends
    ``{"params": ..., "torch": version}``; then each request ``{"steps": n, "warmup": w}``
    is answered with ``{"times": [...]}``, the wall seconds of n steps after w untimed
    ones (:func:`resgrad.perf.bench.time_steps`). It ends when stdin closes.
    """
    _import_torch()
    torch.set_num_threads(threads)
    if kept_heap:  # --torch-kept-heap: resgrad's malloc setting; else as nanoGPT's process has it
        keep_freed_memory()
    reply, sys.stdout = sys.stdout, sys.stderr  # stdout carries the replies, nothing else

    def send(obj: dict) -> None:
        reply.write(json.dumps(obj) + "\n")
        reply.flush()

    model, step = torch_step_fn(BENCH_CONFIGS[name])
    step()  # warm-up
    step()
    send({"params": sum(p.numel() for p in model.parameters()), "torch": torch.__version__})
    for line in sys.stdin:
        req = json.loads(line)
        send({"times": time_steps(step, req["steps"], warmup=req["warmup"])})


class TorchWorker:
    """The parent's handle on :func:`torch_worker`: ``with TorchWorker(name, threads) as w:``,
    then ``w.time_steps(n)`` times a block of n steps in the child, which sits idle (blocked
    on its stdin) between requests."""

    def __init__(self, name: str, threads: int, kept_heap: bool = False):
        argv = [sys.executable, os.path.abspath(__file__), "--torch-worker", name,
                "--threads", str(threads)] + ["--torch-kept-heap"] * kept_heap  # fmt: skip
        self.kept_heap = kept_heap
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.info = self._read()  # {"params": ..., "torch": ...}

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the PyTorch worker exited (status {self.proc.wait()})")
        return json.loads(line)

    def time_steps(self, n: int, warmup: int = 1) -> list[float]:
        self.proc.stdin.write(json.dumps({"steps": n, "warmup": warmup}) + "\n")
        self.proc.stdin.flush()
        return self._read()["times"]

    def __enter__(self) -> TorchWorker:
        return self

    def __exit__(self, *exc) -> None:
        self.proc.stdin.close()  # the worker's loop ends
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def torch_child(name: str, steps: int = 3, kept_heap: bool = False) -> None:
    """PyTorch's memory probe: build the model, train a few steps, print the peak memory."""
    _import_torch()
    if kept_heap:  # malloc as in the timed process
        keep_freed_memory()
    _, step = torch_step_fn(BENCH_CONFIGS[name])
    for _ in range(steps):
        step()
    print(f"peak_mib {own_peak_rss_mib()}")


def bench_config(
    cfg: BenchConfig, steps: int, peak: float, threads: int | None, kept_heap: bool = False
) -> dict:
    """One config's figures; ``threads`` None: PyTorch is not installed, resgrad's alone."""
    if threads is None:
        return resgrad_figures(cfg, steps, peak)
    with (
        resgrad_stepper(cfg) as (model, r_step),  # the trainer's step: DEFAULT_SHARDS on threads
        resgrad_stepper(cfg, shards=1) as (_, p_step),  # the plain pass, one shard
        TorchWorker(cfg.name, threads, kept_heap) as worker,  # PyTorch's, in its own process
    ):
        return _side_by_side(cfg, steps, peak, model, r_step, p_step, worker)


def _side_by_side(
    cfg: BenchConfig, steps: int, peak: float, model, r_step, p_step, worker: TorchWorker
) -> dict:
    flops = model.flops_per_step(cfg.batch_size, cfg.block_size)
    row = {"config": cfg.name, "params": model.num_params(), "flops_per_step": flops,
           "floor_flops": flops - cfg.masked_flops}  # fmt: skip
    t_params = worker.info["params"]
    if t_params != model.num_params():
        raise SystemExit(f"{cfg.name}: resgrad has {model.num_params()} params, torch {t_params}")
    steppers = {"resgrad": r_step, "plain": p_step}
    for step in steppers.values():  # warm-up each (the worker took its own two)
        step()
        step()
    steppers["torch"] = None  # timed in the worker
    times = {name: [] for name in steppers}
    for done in range(0, steps, BLOCK):  # alternate in blocks, so all see the same machine:
        n = min(BLOCK, steps - done)  # each block after the other's threads have gone quiet
        for name, step in steppers.items():  # and WARMUP untimed steps, so it times steady
            settle()  # training, not a wake-up
            if step is None:
                times[name] += worker.time_steps(n, warmup=WARMUP)
            else:
                times[name] += time_steps(step, n, warmup=WARMUP)
    for name in steppers:
        row[name] = figures(times[name], cfg, flops, peak).as_dict()
    row["resgrad"]["peak_mib"] = peak_memory_mib(resgrad_probe_argv(cfg.name))
    row["plain"]["peak_mib"] = peak_memory_mib(resgrad_probe_argv(cfg.name, shards=1))
    torch_probe = [sys.executable, os.path.abspath(__file__), "--torch-child", cfg.name]
    torch_probe += ["--torch-kept-heap"] * worker.kept_heap
    row["torch"]["peak_mib"] = peak_memory_mib(torch_probe)
    row["speedup"] = row["torch"]["ms_per_step"] / row["resgrad"]["ms_per_step"]
    row["plain_speedup"] = row["plain"]["ms_per_step"] / row["resgrad"]["ms_per_step"]
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", choices=[*BENCH_CONFIGS, "all"], default="all")
    p.add_argument(
        "--steps",
        type=int,
        default=20,
        help="timed iterations per framework (default 20; fewer: a quick check)",
    )
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    p.add_argument(
        "--both-env",
        action="store_true",
        help="run once as set and once with OPENBLAS_CORETYPE/L2_SIZE unset",
    )
    p.add_argument("--torch-child", metavar="CONFIG", help=argparse.SUPPRESS)
    p.add_argument("--torch-worker", metavar="CONFIG", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)  # the worker's
    p.add_argument(
        "--torch-kept-heap",
        action="store_true",
        help="PyTorch's processes keep freed memory as resgrad's do (resgrad.perf.heap), as "
        "this benchmark ran them before issue 29; default: glibc's malloc, as in train.py",
    )
    args = p.parse_args()
    if args.torch_child:
        return torch_child(args.torch_child, kept_heap=args.torch_kept_heap)
    if args.torch_worker:
        return torch_worker(args.torch_worker, args.threads, args.torch_kept_heap)
    if args.steps < 1:
        p.error(f"--steps must be at least 1, got {args.steps}")
    if args.both_env:
        argv = [a for a in sys.argv[1:] if a != "--both-env"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")}
        for label, e in (("as set", os.environ), ("OPENBLAS_* unset", env)):
            print(f"==== environment: {label}", flush=True)
            subprocess.run([sys.executable, os.path.abspath(__file__), *argv], env=e, check=True)
        return None
    threads = [i.get("num_threads") for i in blas_info()]
    n_threads = threads[0] if threads and threads[0] else os.cpu_count()
    # PyTorch is not imported here: it runs in a worker process of its own (TorchWorker)
    torch_version = (
        importlib.metadata.version("torch") if importlib.util.find_spec("torch") else None
    )
    env = {k: os.environ.get(k, "(unset)") for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    # what `resgrad train` does: freed arrays are reused, not faulted in afresh each step
    # (resgrad.perf.heap); PyTorch's worker leaves malloc as nanoGPT's train.py has it
    heap_kept = keep_freed_memory()
    peak = matmul_peak_gflops()
    print(machine_header(peak, heap_kept))
    if torch_version is None:
        print("PyTorch: not installed, resgrad alone")
    else:
        print(f"PyTorch: {torch_version}, in a process of its own, {n_threads} threads")
    if args.steps < 10:
        print(f"--steps {args.steps}: a quick check; the figures want 20 or more")
    names = ALL_CONFIGS if args.config == "all" else [args.config]
    rows = []
    for name in names:
        settle()
        peak = max(peak, matmul_peak_gflops())  # the best reading so far: see its docstring
        t_threads = n_threads if torch_version else None
        rows.append(
            bench_config(BENCH_CONFIGS[name], args.steps, peak, t_threads, args.torch_kept_heap)
        )
        rows[-1]["peak_gflops"] = peak
        print(format_row(rows[-1]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"blas": blas_info(), "env": env, "peak_gflops": peak, "rows": rows}, f, indent=2
            )
    return None


if __name__ == "__main__":
    main()
