"""The same bytes whatever the load, on every OpenBLAS kernel this CPU runs.

The promise (resgrad.perf.threads, resgrad.train.bits): a command without ``--threads``
chooses its BLAS thread count from the load only where a probe shows the count changes no
bit; ``train`` lets its count follow the load only where its own step is unchanged by it.
So two runs of one command, one on an idle machine and one whose load readings move the
count, give the same bytes, on kernels whose sums depend on the count (Haswell, Zen) and
on those whose do not (SkylakeX). Each kernel runs in a subprocess of its own, with
``OPENBLAS_CORETYPE`` set there only; the suite's own environment is never changed.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from resgrad.perf.threads import blas_threads
from resgrad.train import bits, loop
from resgrad.train.bits import counts_agree, probe_counts, step_counts_agree
from resgrad.train.config import TrainConfig
from resgrad.train.loop import train
from resgrad.train.rundir import read_metrics


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            line = next((x for x in f if x.startswith("flags")), "")
    except OSError:
        return set()
    return set(line.split(":", 1)[-1].split())


# every machine kind here has AVX2; SkylakeX's kernel needs AVX-512 (F, BW, DQ, VL)
KERNELS = ["Haswell", "Zen"] + (
    ["SkylakeX"] if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= _cpu_flags() else []
)

# in the subprocess: the CLI trains the same run twice, once as on an idle 2-core machine
# and once under a load that the readings say comes and goes (the follower's readings and
# the start's reading replaced), and prints what the two runs wrote, and what the probes said
SCRIPT = textwrap.dedent(
    """
    import hashlib, json, os, sys
    from threadpoolctl import threadpool_info
    import resgrad.cli as cli
    from resgrad.cli import train_cmds
    from resgrad.formats.checkpoint import load_checkpoint
    from resgrad.perf import threads
    from resgrad.train.rundir import read_metrics

    data, out, load = sys.argv[1], sys.argv[2], sys.argv[3] == "load"
    kernel = [i["architecture"] for i in threadpool_info() if i["user_api"] == "blas"]
    readings = iter([1, 2, 1, 2, 1] * 10)
    cli.load_aware_threads = (lambda: 1) if load else (lambda: 2)
    if load:
        train_cmds.ThreadFollower = lambda: threads.ThreadFollower(
            start=1, read=lambda: next(readings), every=2)
    rc = cli.main(["train", "--data", data, "--out-dir", out, "--n-layer", "2",
                   "--n-embd", "128", "--n-head", "4", "--block-size", "32",
                   "--batch-size", "8", "--shards", "1", "--max-iters", "8",
                   "--eval-interval", "4", "--eval-iters", "1"])
    recs = [{k: v for k, v in r.items() if k != "ms"} for r in read_metrics(out)]
    ckpt = load_checkpoint(os.path.join(out, "last.ckpt"))  # its config names the out-dir
    arrays = hashlib.sha256()
    for k, v in sorted({**ckpt.params, **ckpt.optimizer}.items()):
        arrays.update(k.encode() + v.tobytes())
    dyn = hashlib.sha256(open(os.path.join(out, "dynamics.bin"), "rb").read()).hexdigest()
    print(json.dumps({"rc": rc, "kernel": kernel, "records": recs,
                      "files": {"weights and moments": arrays.hexdigest(), "dynamics.bin": dyn},
                      "depends": threads.sums_depend_on_count()}))
    """
)


def _run(kernel, data, out, load):
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_L2_SIZE"}
    env["OPENBLAS_CORETYPE"] = kernel
    env["OPENBLAS_NUM_THREADS"] = "2"  # the 2-core machine the script stands for
    p = subprocess.run([sys.executable, "-c", SCRIPT, data, out, "load" if load else "idle"],
                       capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_default_train_gives_the_same_bytes_whatever_the_load(tmp_path, text_file, kernel):
    idle, _ = _run(kernel, text_file, str(tmp_path / "idle"), load=False)
    loaded, err = _run(kernel, text_file, str(tmp_path / "loaded"), load=True)
    # the kernel asked for ran (OpenBLAS runs Zen on its Haswell kernels, and says so)
    assert idle["kernel"] == loaded["kernel"]
    assert idle["kernel"] in ([kernel], ["Haswell"] if kernel == "Zen" else None)
    assert idle["rc"] == loaded["rc"] == 0
    assert idle["records"] == loaded["records"]  # every loss and norm, bit for bit
    assert idle["files"] == loaded["files"]  # the checkpoint and the dynamics, byte for byte
    if idle["depends"]:  # this kernel sums otherwise on another count: the run said so
        assert "stays on 2 thread(s) whatever the load" in err


def test_the_haswell_kernel_is_found_to_depend_on_the_count(tmp_path):
    # the probe is not vacuous: the kernel the issue saw fail is caught by it
    env = {**os.environ, "OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_NUM_THREADS": "2"}
    code = "from resgrad.perf.threads import sums_depend_on_count as d; print(d(2))"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "True"


# -- the probe's pieces, in this process


def test_probe_counts_cover_every_count_a_small_machine_can_choose():
    assert probe_counts(1) == (1,)
    assert probe_counts(2) == (1, 2)
    assert probe_counts(8) == tuple(range(1, 9))
    assert probe_counts(9) == (*range(1, 9), 9)  # its half, 4, is among the first
    assert probe_counts(64) == (*range(1, 9), 32, 64)


def test_counts_agree_compares_every_count_bit_for_bit():
    def blas_count():
        from threadpoolctl import threadpool_info

        n = max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")
        return [np.float32(1.0) + np.float32(1e-7) * (n == 3)]  # one count differs, in one bit

    assert counts_agree(lambda: [np.ones(3, np.float32)], (1, 2, 3))
    assert not counts_agree(blas_count, (1, 2, 3))
    assert counts_agree(blas_count, (1, 2))  # the count that differs is not asked
    # a differing dtype, shape or length is a difference too
    seen = iter([[np.zeros(2)], [np.zeros(2, np.float32)]])
    assert not counts_agree(lambda: next(seen), (1, 2))
    seen = iter([[np.zeros(2)], [np.zeros(3)]])
    assert not counts_agree(lambda: next(seen), (1, 2))
    seen = iter([[np.zeros(2)], [np.zeros(2), np.zeros(2)]])
    assert not counts_agree(lambda: next(seen), (1, 2))


def test_the_step_probe_leaves_the_model_and_its_count_alone(text_file):
    from resgrad.nn.model import GPT, GPTConfig

    model = GPT(GPTConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=16,
                          dropout=0.1), seed=0)  # fmt: skip
    before = {k: v.copy() for k, v in model.params.items()}
    x = np.random.default_rng(1).integers(20, size=(4, 8))  # (B, T)
    with threadpool_limits(2):
        assert step_counts_agree(model, x, x, 2, (1, 2)) in (True, False)
        assert blas_threads() == 2
    assert all(np.array_equal(before[k], model.params[k]) for k in before)


TINY = dict(n_layer=1, n_head=2, n_embd=16, block_size=8, batch_size=4, warmup_iters=2,
            lr_decay_iters=12, lr=3e-3, eval_interval=4, eval_iters=1, max_iters=6)  # fmt: skip


class Schedule:
    def __init__(self, *counts):
        self.counts, self.calls = list(counts), 0

    def __call__(self, seconds):
        self.calls += 1
        return self.counts[self.calls - 1]


def test_a_step_that_depends_on_the_count_stops_the_follower(tmp_path, text_file, monkeypatch):
    monkeypatch.setattr(bits, "step_counts_agree", lambda *a, **k: False)
    monkeypatch.setattr(bits, "usable_cores", lambda: 2)
    said, follow, counts = [], Schedule(1, 1, 1, 1, 1, 1), []
    step = loop.train_step
    monkeypatch.setattr(loop, "train_step", lambda *a, **k: counts.append(blas_threads())
                        or step(*a, **k))  # fmt: skip
    cfg = TrainConfig(**TINY, data=text_file, out_dir=str(tmp_path / "run"))
    with threadpool_limits(1):  # a count read from a load: the gate moves it to the cores
        train(cfg, progress=False, log=said.append, threads=follow)
        assert blas_threads() == 1  # the run's count ends with it
    assert follow.calls == 0  # never asked
    assert counts == [2] * 6  # every step on the usable cores, not on the load's count
    warned = [s for s in said if s.startswith("threads:")]
    assert len(warned) == 1 and "stays on 2 thread(s) whatever the load" in warned[0]
    assert len(read_metrics(cfg.out_dir)) > 0


def test_a_step_that_does_not_depend_on_the_count_lets_it_follow(tmp_path, text_file, monkeypatch):
    monkeypatch.setattr(bits, "step_counts_agree", lambda *a, **k: True)
    said, follow = [], Schedule(1, 2, 1, 2, 1, 2)
    cfg = TrainConfig(**TINY, data=text_file, out_dir=str(tmp_path / "run"))
    with threadpool_limits(2):
        train(cfg, progress=False, log=said.append, threads=follow)
    assert follow.calls == 6 and not any(s.startswith("threads:") for s in said)


def test_the_gate_probes_the_runs_own_counts_and_shards(tmp_path, text_file, monkeypatch):
    asked = []
    monkeypatch.setattr(bits, "usable_cores", lambda: 3)
    monkeypatch.setattr(bits, "step_counts_agree",
                        lambda model, x, y, shards, counts: asked.append(
                            (x.shape, shards, counts)) or True)  # fmt: skip
    cfg = TrainConfig(**TINY, data=text_file, out_dir=str(tmp_path / "run"), shards=2)
    train(cfg, progress=False, log=lambda s: None, threads=Schedule(*[2] * 6))
    assert asked == [((4, 8), 2, (1, 2, 3))]  # the run's batch shape, its shards, every count
    fixed = TrainConfig(**TINY, data=text_file, out_dir=str(tmp_path / "fixed"))
    train(fixed, progress=False, log=lambda s: None, threads=2)
    train(TrainConfig(**TINY, data=text_file, out_dir=str(tmp_path / "none")), progress=False,
          log=lambda s: None)  # fmt: skip
    assert len(asked) == 1  # a fixed count, or none given, is not probed
    assert read_metrics(fixed.out_dir)[-1]["iter"] == 6  # the runs ran
