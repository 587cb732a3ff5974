"""End to end: ``resgrad train`` against nanoGPT's own ``train.py``, the CPU recipe, same text.

    git clone https://github.com/karpathy/nanoGPT /tmp/nanoGPT     # not a dependency
    python benchmarks/bench_nanogpt_recipe.py --nanogpt /tmp/nanoGPT        # 2000 iterations
    python benchmarks/bench_nanogpt_recipe.py --nanogpt /tmp/nanoGPT --iters 100   # quick
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \\
        python benchmarks/bench_nanogpt_recipe.py --nanogpt /tmp/nanoGPT

The recipe is nanoGPT's README's for a CPU ("I only have a macbook"): its
``config/train_shakespeare_char.py`` (lr 1e-3 with 100 warmup steps and a cosine to 1e-4,
AdamW beta2 0.99, weight decay 0.1, clip 1.0, an evaluation every 250 steps) with
``--device=cpu --compile=False --eval_iters=20 --log_interval=1 --block_size=64
--batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000
--dropout=0.0``, and here also ``--bias=True``: resgrad's GPT has biases (GPT-2's), so both
train the same model, and ``--dtype=float32``, what a CPU computes in either way (train.py
runs no autocast on a CPU; the flag only keeps its float16 GradScaler off). ``resgrad
train``'s defaults are the same recipe; it gets ``--out-dir``, ``--max-iters`` and
``--activation gelu`` (nanoGPT's MLP has ``nn.GELU()``, the exact form; resgrad's default
is GPT-2's tanh form) and nothing else. ``--iters`` shortens both runs
(``--max_iters`` / ``--max-iters``) and keeps the schedule: the cosine still decays over
2000 iterations, cut short.

The text is resgrad's built-in corpus (:func:`resgrad.train.data.load_corpus`, the Python
reference manual shipped with CPython), not Shakespeare: this script writes nanoGPT's
dataset from it as ``data/shakespeare_char/prepare.py`` would (sorted characters as the
vocabulary, the first 90% of the ids for training and the rest for validation, uint16
``train.bin`` / ``val.bin``, ``meta.pkl`` with ``vocab_size``, ``itos``, ``stoi``) into a
temporary directory, and points ``--dataset`` there (``train.py`` reads
``data/<dataset>``, and an absolute path wins in that join), so nothing is written into
the checkout and nothing is downloaded. ``train.py`` runs with the checkout as its working
directory (it reads ``configurator.py`` and the config from there) and writes its
``--out_dir`` into the temporary directory too.

Each run is a fresh process, timed from start to exit: interpreter start-up and imports,
every evaluation, checkpoint and log included, each with its default threads. With
``--repeat`` above 1 the two alternate. Without a checkout the script says how to get one
and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from resgrad.perf.bench import blas_info, settle
from resgrad.train.config import TrainConfig
from resgrad.train.data import load_corpus

DATASET = "resgrad_chars"  # the dataset directory this script writes
NEEDED = ("train.py", "model.py", "configurator.py", "config/train_shakespeare_char.py")


def write_dataset(out: str, block_size: int) -> dict:
    """nanoGPT's character dataset of resgrad's built-in corpus in ``out``: train.bin,
    val.bin and meta.pkl, as ``data/shakespeare_char/prepare.py`` writes them. Returns the
    meta dict."""
    corpus = load_corpus(None, block_size)  # resgrad's text, tokenizer and 90/10 split
    chars = corpus.tokenizer.chars
    if chars != "".join(sorted(set(corpus.text))):  # prepare.py's vocabulary
        raise RuntimeError("resgrad's vocabulary is not the text's sorted characters")
    if len(chars) >= 2**16:
        raise RuntimeError(f"{len(chars)} characters do not fit nanoGPT's uint16 ids")
    os.makedirs(out, exist_ok=True)
    corpus.train.astype(np.uint16).tofile(os.path.join(out, "train.bin"))  # (N_train,)
    corpus.val.astype(np.uint16).tofile(os.path.join(out, "val.bin"))  # (N_val,)
    meta = {
        "vocab_size": len(chars),
        "itos": dict(enumerate(chars)),
        "stoi": {ch: i for i, ch in enumerate(chars)},
    }
    with open(os.path.join(out, "meta.pkl"), "wb") as f:
        pickle.dump(meta, f)
    return meta


def nanogpt_argv(checkout: str, dataset: str, out_dir: str, iters: int) -> list[str]:
    """nanoGPT's CPU recipe on ``dataset`` (an absolute path), ``iters`` iterations."""
    return [
        sys.executable, os.path.join(checkout, "train.py"), "config/train_shakespeare_char.py",
        "--device=cpu", "--compile=False", "--eval_iters=20", "--log_interval=1",
        "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4", "--n_embd=128",
        f"--max_iters={iters}", "--lr_decay_iters=2000", "--dropout=0.0", "--bias=True",
        "--dtype=float32", f"--dataset={dataset}", f"--out_dir={out_dir}",
    ]  # fmt: skip


def resgrad_argv(out_dir: str, iters: int) -> list[str]:
    """``resgrad train``: its defaults are the recipe, and ``--activation gelu`` is nanoGPT's
    ``nn.GELU()``, the exact form, so both sides train the same model."""
    return [sys.executable, "-m", "resgrad", "train", "--out-dir", out_dir, "--max-iters",
            str(iters), "--activation", "gelu"]  # fmt: skip


def timed_run(argv: list[str], cwd: str | None, log: str) -> float:
    """Wall seconds of one process running ``argv``; its output goes to ``log``."""
    with open(log, "w") as f:
        t0 = time.perf_counter()
        p = subprocess.run(argv, cwd=cwd, stdout=f, stderr=subprocess.STDOUT)
        seconds = time.perf_counter() - t0
    if p.returncode != 0:
        with open(log) as f:
            tail = f.read()[-3000:]
        raise SystemExit(f"{' '.join(argv[:4])} ... failed ({p.returncode}):\n{tail}")
    return seconds


def last_eval_line(log: str) -> str:
    """The last line of a run's output that reports a validation loss."""
    with open(log, errors="replace") as f:
        lines = [ln.strip() for ln in f.read().replace("\r", "\n").splitlines()]
    found = [ln for ln in lines if "val" in ln and "loss" in ln]
    return found[-1] if found else "(no evaluation line)"


def iteration_ms(name: str, log: str, out_dir: str) -> list[float]:
    """The milliseconds of each training iteration as the run itself timed it.

    nanoGPT prints ``iter N: loss L, time Xms`` every iteration (``--log_interval=1``); its
    time runs from the end of one iteration to the end of the next, so the iterations that
    follow an evaluation carry it, and the median leaves them out. resgrad's
    ``metrics.jsonl`` has each step's ``ms`` (evaluations not included)."""
    if name == "nanoGPT":
        with open(log, errors="replace") as f:
            return [float(m) for m in re.findall(r"^iter \d+: loss \S+, time ([\d.]+)ms", f.read(),
                                                  re.MULTILINE)]  # fmt: skip
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        return [r["ms"] for r in map(json.loads, f) if r["kind"] == "iter"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nanogpt", metavar="PATH", help="a nanoGPT checkout (git clone ...)")
    p.add_argument("--iters", type=int, default=2000, help="iterations (default 2000)")
    p.add_argument("--repeat", type=int, default=1, help="runs of each, alternating")
    p.add_argument("--data-only", metavar="DIR", help="write nanoGPT's dataset into DIR and stop")
    args = p.parse_args()
    if args.iters < 1 or args.repeat < 1:
        p.error("--iters and --repeat must be at least 1")
    block_size = TrainConfig().block_size
    if args.data_only:
        meta = write_dataset(args.data_only, block_size)
        print(f"wrote train.bin, val.bin, meta.pkl ({meta['vocab_size']} characters) to "
              f"{args.data_only}")  # fmt: skip
        return
    if not args.nanogpt or not os.path.isdir(args.nanogpt):
        print(
            "no nanoGPT checkout given (--nanogpt PATH); get one with `git clone "
            "https://github.com/karpathy/nanoGPT` and pass its path: skipped"
        )
        return
    checkout = os.path.abspath(args.nanogpt)
    missing = [f for f in NEEDED if not os.path.isfile(os.path.join(checkout, f))]
    if missing:
        p.error(f"{checkout} is not a nanoGPT checkout: it has no {missing[0]}")
    env = {k: os.environ.get(k, "(unset)") for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    print(f"BLAS (threadpoolctl): {json.dumps(blas_info())}")
    print(f"environment: {env}; cpus: {os.cpu_count()}; each with its default threads")
    with tempfile.TemporaryDirectory(prefix="bench_nanogpt_") as tmp:
        dataset = os.path.join(tmp, DATASET)
        meta = write_dataset(dataset, block_size)
        print(
            f"recipe: L=4 H=4 C=128 T=64 B=12, dropout 0, {args.iters} iterations, eval "
            f"every 250 with 20 batches; text: resgrad's built-in corpus, "
            f"{meta['vocab_size']} characters"
        )
        runs = {
            "resgrad": lambda out: (resgrad_argv(out, args.iters), None),
            "nanoGPT": lambda out: (nanogpt_argv(checkout, dataset, out, args.iters), checkout),
        }
        seconds = {name: [] for name in runs}
        iter_ms = {name: [] for name in runs}
        logs = {}
        for r in range(args.repeat):  # alternate: both see the same machine
            for name, make in runs.items():
                out = os.path.join(tmp, f"out-{name}-{r}")
                argv, cwd = make(out)
                logs[name] = os.path.join(tmp, f"{name}-{r}.log")
                settle()
                seconds[name].append(timed_run(argv, cwd, logs[name]))
                iter_ms[name] += iteration_ms(name, logs[name], out)
                print(f"  {name:8} run {r + 1}: {seconds[name][-1]:.1f} s", flush=True)
        for name in runs:
            s = seconds[name]
            print(f"  {name:8} {statistics.median(s):7.1f} s wall (median of {len(s)}); "
                  f"last evaluation: {last_eval_line(logs[name])}")  # fmt: skip
        for name in runs:
            ms = iter_ms[name]
            if not ms:
                raise SystemExit(f"{name}'s output names no iteration times: {logs[name]}")
            print(f"  {name:8} {statistics.median(ms):7.2f} ms per iteration (median of "
                  f"{len(ms)}, as the run timed them)")  # fmt: skip
        ratio = statistics.median(seconds["nanoGPT"]) / statistics.median(seconds["resgrad"])
        step = statistics.median(iter_ms["nanoGPT"]) / statistics.median(iter_ms["resgrad"])
        print(f"  wall time nanoGPT / resgrad: {ratio:.2f}x (per iteration: {step:.2f}x)")


if __name__ == "__main__":
    main()
