"""The benchmarks of performance round three run at their smallest setting (issue 23).

As tests/perf/test_benchmarks_run.py: the figures are not checked (timings belong to
benchmarks/), only that each script still runs against the library as it is, and what
each script itself checks: the same tokens from resgrad and transformers, the same
gradient-flow profile from resgrad and torch autograd, nanoGPT's dataset holding
resgrad's text. No nanoGPT checkout is needed: a stand-in ``train.py`` takes nanoGPT's
command line (its config keys, checked by name and type as its configurator does) and
reads the dataset the script wrote.
"""

import importlib.util
import os
import pathlib
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from resgrad.train.data import load_corpus

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _run(script: str, *args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, MPLBACKEND="Agg")  # OPENBLAS_* as the machine sets them
    p = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=600,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    return p


def _referees() -> bool:
    return all(importlib.util.find_spec(m) for m in ("torch", "transformers"))


@pytest.mark.slow
def test_bench_generate_runs_and_the_tokens_agree():
    p = _run("bench_generate.py", "--config", "cpu-recipe", "--new-tokens", "8", "--repeat", "1",
             "--bandwidth-mib", "64")  # fmt: skip
    assert "BLAS (threadpoolctl)" in p.stdout and "tokens/s" in p.stdout and "at most" in p.stdout
    if _referees():
        assert "token ids identical on every side (8 of 8)" in p.stdout


@pytest.mark.slow
def test_bench_flow_profile_runs_and_the_profiles_agree():
    p = _run("bench_flow_profile.py", "--config", "cpu-recipe", "--seq", "16", "--batch", "2",
             "--repeat", "1")  # fmt: skip
    assert "BLAS (threadpoolctl)" in p.stdout and "s per profile" in p.stdout
    if _referees():
        assert "(within 0.001)" in p.stdout


def test_bench_nanogpt_recipe_without_a_checkout_says_how_to_get_one():
    p = _run("bench_nanogpt_recipe.py")
    assert p.stdout.count("\n") == 1 and "git clone https://github.com/karpathy/nanoGPT" in p.stdout


def test_bench_nanogpt_recipe_writes_resgrad_s_text_as_nanogpt_s_dataset(tmp_path):
    _run("bench_nanogpt_recipe.py", "--data-only", str(tmp_path))
    meta = pickle.loads((tmp_path / "meta.pkl").read_bytes())
    train = np.fromfile(tmp_path / "train.bin", dtype=np.uint16)
    val = np.fromfile(tmp_path / "val.bin", dtype=np.uint16)
    text = load_corpus(None, 64).text
    # prepare.py's vocabulary (sorted characters), its 90/10 split, its decoding
    assert meta["vocab_size"] == len(meta["itos"]) == len(set(text))
    assert [meta["itos"][i] for i in range(meta["vocab_size"])] == sorted(set(text))
    assert all(meta["stoi"][c] == i for i, c in meta["itos"].items())
    assert len(train) == int(len(text) * 0.9)
    assert "".join(meta["itos"][i] for i in np.concatenate([train, val]).tolist()) == text


# nanoGPT's train.py, as far as its command line and its data go: its config globals with
# their defaults' types, a configurator that executes config files and sets --key=value
# (refusing unknown keys and a changed type), then the dataset read from data/<dataset>
FAKE_TRAIN = """
import os, pickle, sys
from ast import literal_eval
import numpy as np
out_dir, eval_interval, log_interval, eval_iters = "out", 2000, 1, 200
eval_only, always_save_checkpoint, init_from = False, True, "scratch"
wandb_log, wandb_project, wandb_run_name = False, "owt", "gpt2"
dataset, gradient_accumulation_steps, batch_size, block_size = "openwebtext", 40, 12, 1024
n_layer, n_head, n_embd, dropout, bias = 12, 12, 768, 0.0, False
learning_rate, max_iters, weight_decay, beta1, beta2 = 6e-4, 600000, 1e-1, 0.9, 0.95
grad_clip, decay_lr, warmup_iters, lr_decay_iters, min_lr = 1.0, True, 2000, 600000, 6e-5
backend, device, dtype, compile = "nccl", "cuda", "bfloat16", True
exec(open("configurator.py").read())
data_dir = os.path.join("data", dataset)
meta = pickle.load(open(os.path.join(data_dir, "meta.pkl"), "rb"))
for split in ("train", "val"):
    ids = np.memmap(os.path.join(data_dir, split + ".bin"), dtype=np.uint16, mode="r")
    assert len(ids) > block_size and ids.max() < meta["vocab_size"]
assert (n_layer, n_head, n_embd, block_size, batch_size, dropout) == (4, 4, 128, 64, 12, 0.0)
assert (device, compile, eval_iters, eval_interval, learning_rate) == ("cpu", False, 20, 250, 1e-3)
os.makedirs(out_dir, exist_ok=True)
for it in range(max_iters + 1):  # train.py's line per iteration (--log_interval=1)
    print(f"iter {it}: loss 4.1234, time {30 + it:.2f}ms, mfu -100.00%")
print(f"step {max_iters}: train loss 4.0000, val loss 4.1000")
"""
FAKE_CONFIGURATOR = """
for arg in sys.argv[1:]:
    if "=" not in arg:
        exec(open(arg).read())
        continue
    key, val = arg[2:].split("=")
    if key not in globals():
        raise ValueError(f"Unknown config key: {key}")
    try:
        val = literal_eval(val)
    except (SyntaxError, ValueError):
        pass
    assert type(val) is type(globals()[key]), (key, val)
    globals()[key] = val
"""
FAKE_CONFIG = """
out_dir, eval_interval, eval_iters, log_interval = "out-shakespeare-char", 250, 200, 10
always_save_checkpoint, wandb_log, dataset = False, False, "shakespeare_char"
gradient_accumulation_steps, batch_size, block_size = 1, 64, 256
n_layer, n_head, n_embd, dropout = 6, 6, 384, 0.2
learning_rate, max_iters, lr_decay_iters, min_lr = 1e-3, 5000, 5000, 1e-4
beta2, warmup_iters = 0.99, 100
"""


def test_bench_nanogpt_recipe_runs_both_with_nanogpt_s_command_line(tmp_path):
    checkout = tmp_path / "nanoGPT"
    (checkout / "config").mkdir(parents=True)
    (checkout / "train.py").write_text(textwrap.dedent(FAKE_TRAIN))
    (checkout / "configurator.py").write_text(textwrap.dedent(FAKE_CONFIGURATOR))
    (checkout / "config" / "train_shakespeare_char.py").write_text(textwrap.dedent(FAKE_CONFIG))
    (checkout / "model.py").write_text("")
    p = _run("bench_nanogpt_recipe.py", "--nanogpt", str(checkout), "--iters", "2")
    assert "BLAS (threadpoolctl)" in p.stdout and "wall time nanoGPT / resgrad" in p.stdout
    assert "step 2: train loss 4.0000, val loss 4.1000" in p.stdout  # nanoGPT's run, 2 iters
    # each run's own time per iteration: nanoGPT's from its log (30, 31, 32 ms), resgrad's
    # from its metrics.jsonl (2 steps)
    assert "nanoGPT    31.00 ms per iteration (median of 3" in p.stdout
    assert "ms per iteration (median of 2, as the run timed them)" in p.stdout
    assert list(checkout.iterdir()) and not (checkout / "data").exists()  # nothing written there
