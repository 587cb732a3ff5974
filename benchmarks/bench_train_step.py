"""resgrad vs PyTorch eager: one float32 training step, side by side, in one run.

    python benchmarks/bench_train_step.py                  # all three configs
    python benchmarks/bench_train_step.py --config gpt2-124m   # GPT-2 124M, T=256, B=4
    python benchmarks/bench_train_step.py --config medium --steps 20
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_train_step.py
    python benchmarks/bench_train_step.py --both-env       # runs itself both ways

A step is forward + backward + AdamW. resgrad's is the trainer's: the batch as
``DEFAULT_SHARDS`` shards on threads (resgrad.train.shards); the row "plain" is the
same step as one shard, so the gain of the shards is measured in the same run.
Both frameworks have the same config, the same parameter count (checked) and the
same thread count. PyTorch's step runs in a child process of its own (as nanoGPT's
train.py runs it; this process never imports PyTorch), so the two runtimes' thread
pools never share a process: PyTorch's step timed beside resgrad's in one process was
slower than in a process of its own (cpu-recipe 48.2 against 43.9 ms, issue 23). The
child builds its model once and, on each request, times a block of steps and sends the
times back; the steps alternate between the three in blocks of 5, each block after a
short pause that lets the others' spinning BLAS/OpenMP threads go quiet and one untimed
step, and each figure is the median of ``--steps`` steps.
GFLOP/s come from resgrad's counted matmul FLOPs (attention included), the same count for both, as a
fraction of the float32 matmul peak measured in this run. Peak memory is
measured in a fresh child process per framework. PyTorch is optional: without
it resgrad's figures print alone.

The PyTorch model is what a PyTorch user writes (nanoGPT's model): nn.Linear,
nn.LayerNorm, F.scaled_dot_product_attention(is_causal=True), GELU (tanh), the
LM head tied to the token embedding, and torch.optim.AdamW.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys

from resgrad.perf.bench import (
    ALL_CONFIGS,
    BENCH_CONFIGS,
    BenchConfig,
    blas_info,
    figures,
    format_row,
    machine_header,
    make_batch,
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

BLOCK = 5  # timed steps of one framework before switching to the other

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
    """nanoGPT's GPT (pre-LN, tied head) in PyTorch eager, float32."""

    class Block(nn.Module):
        def __init__(self, C, H):
            super().__init__()
            self.H = H
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.fc_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            C = cfg.n_embd
            self.wte = nn.Embedding(cfg.vocab_size, C)
            self.wpe = nn.Embedding(cfg.n_positions or cfg.block_size, C)
            self.blocks = nn.ModuleList(Block(C, cfg.n_head) for _ in range(cfg.n_layer))
            self.ln_f = nn.LayerNorm(C)

        def forward(self, idx, targets):
            T = idx.shape[1]
            x = self.wte(idx) + self.wpe(torch.arange(T))
            for b in self.blocks:
                x = b(x)
            logits = self.ln_f(x) @ self.wte.weight.T  # tied head
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return GPT()


def torch_step_fn(cfg: BenchConfig, seed: int = 0):
    torch.manual_seed(seed)
    model = torch_model(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.99), weight_decay=0.1)
    idx, targets = (torch.from_numpy(a) for a in make_batch(cfg, seed))

    def step() -> float:
        loss = model(idx, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    return model, step


def torch_worker(name: str, threads: int) -> None:
    """The child process timing PyTorch's step: one JSON line per request on stdin, one back.

    It builds the ``name`` config's model, takes two warm-up steps and sends
    ``{"params": ..., "torch": version}``; then each request ``{"steps": n, "warmup": w}``
    is answered with ``{"times": [...]}``, the wall seconds of n steps after w untimed
    ones (:func:`resgrad.perf.bench.time_steps`). It ends when stdin closes.
    """
    _import_torch()
    torch.set_num_threads(threads)
    keep_freed_memory()  # as in the parent and the memory probe (resgrad.perf.heap)
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

    def __init__(self, name: str, threads: int):
        argv = [sys.executable, os.path.abspath(__file__), "--torch-worker", name,
                "--threads", str(threads)]  # fmt: skip
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


def torch_child(name: str, steps: int = 3) -> None:
    """PyTorch's memory probe: build the model, train a few steps, print the peak memory."""
    _import_torch()
    keep_freed_memory()  # as in the timed process
    _, step = torch_step_fn(BENCH_CONFIGS[name])
    for _ in range(steps):
        step()
    print(f"peak_mib {own_peak_rss_mib()}")


def bench_config(cfg: BenchConfig, steps: int, peak: float, threads: int | None) -> dict:
    """One config's figures; ``threads`` None: PyTorch is not installed, resgrad's alone."""
    if threads is None:
        return resgrad_figures(cfg, steps, peak)
    with (
        resgrad_stepper(cfg) as (model, r_step),  # the trainer's step: DEFAULT_SHARDS on threads
        resgrad_stepper(cfg, shards=1) as (_, p_step),  # the plain pass, one shard
        TorchWorker(cfg.name, threads) as worker,  # PyTorch's step, in its own process
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
        for name, step in steppers.items():  # and one untimed step, so it times steady
            settle()  # training, not a wake-up
            if step is None:
                times[name] += worker.time_steps(n, warmup=1)
            else:
                times[name] += time_steps(step, n, warmup=1)
    for name in steppers:
        row[name] = figures(times[name], cfg, flops, peak).as_dict()
    row["resgrad"]["peak_mib"] = peak_memory_mib(resgrad_probe_argv(cfg.name))
    row["plain"]["peak_mib"] = peak_memory_mib(resgrad_probe_argv(cfg.name, shards=1))
    torch_probe = [sys.executable, os.path.abspath(__file__), "--torch-child", cfg.name]
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
        default=10,
        help="timed steps per framework (default 10; fewer: a quick check)",
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
    args = p.parse_args()
    if args.torch_child:
        return torch_child(args.torch_child)
    if args.torch_worker:
        return torch_worker(args.torch_worker, args.threads)
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
    # (resgrad.perf.heap); PyTorch's worker sets the same in its process (its timing is
    # unchanged by it)
    heap_kept = keep_freed_memory()
    peak = matmul_peak_gflops()
    print(machine_header(peak, heap_kept))
    if torch_version is None:
        print("PyTorch: not installed, resgrad alone")
    else:
        print(f"PyTorch: {torch_version}, in a process of its own, {n_threads} threads")
    if args.steps < 10:
        print(f"--steps {args.steps}: a quick check; the figures want 10 or more")
    names = ALL_CONFIGS if args.config == "all" else [args.config]
    rows = []
    for name in names:
        settle()
        peak = max(peak, matmul_peak_gflops())  # the best reading so far: see its docstring
        t_threads = n_threads if torch_version else None
        rows.append(bench_config(BENCH_CONFIGS[name], args.steps, peak, t_threads))
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
