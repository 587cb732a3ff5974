"""resgrad.perf.threads: the load-aware BLAS thread count, from readings a test supplies;
and the decoding rule beside it (resgrad.train.sample.decode_threads), which gives a
model too small to gain from threads one thread when resgrad picks the count."""

import importlib.util
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from threadpoolctl import threadpool_info, threadpool_limits

from resgrad.nn.model import GPT, GPTConfig
from resgrad.perf import threads
from resgrad.perf.threads import (
    busy_others,
    default_threads,
    load_aware_threads,
    parse_procs_running,
    read_procs_running,
    sample_procs_running,
    usable_cores,
)
from resgrad.train.config import TrainConfig
from resgrad.train.sample import DECODE_ONE_THREAD_FLOPS, decode_threads, generate, token_flops

# /proc/stat of a 2-core machine with one busy process besides the reader, as Linux writes it
PROC_STAT = """\
cpu  171718 48 30456 1850118 4242 0 1210 0 0 0
cpu0 86312 20 15187 924533 2160 0 723 0 0 0
cpu1 85406 28 15269 925585 2082 0 487 0 0 0
intr 27409876 0 9 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
ctxt 60112847
btime 1700000000
processes 41234
procs_running 2
procs_blocked 0
softirq 11385022 1 3519339 0 3 0 0 55 3620071 0 4245553
"""


def blas_threads() -> int:
    """The loaded BLAS's thread count now."""
    return max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")


# -- reading /proc/stat


def test_procs_running_is_read_from_the_kernels_text():
    assert parse_procs_running(PROC_STAT) == 2
    assert parse_procs_running(PROC_STAT.replace("procs_running 2", "procs_running 17")) == 17


@pytest.mark.parametrize(
    "text",
    ["", "cpu  1 2 3\n", "procs_running\n", "procs_running two\n", "procs_runnings 3\n"],
)
def test_a_text_without_the_count_reads_as_none(text):
    assert parse_procs_running(text) is None


def test_the_reader_reads_a_file_and_none_where_there_is_none(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text(PROC_STAT.replace("procs_running 2", "procs_running 5"))
    assert read_procs_running(str(stat)) == 5
    assert read_procs_running(str(tmp_path / "absent")) is None  # not Linux


def test_the_sample_takes_every_reading_or_none(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text(PROC_STAT)
    assert sample_procs_running(reads=4, gap_s=0, path=str(stat)) == [2, 2, 2, 2]
    assert sample_procs_running(reads=4, gap_s=0, path=str(tmp_path / "absent")) == []


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="Linux's /proc/stat")
def test_this_machine_counts_at_least_the_reader():
    readings = sample_procs_running()
    assert len(readings) == threads.READS
    assert all(n >= 1 for n in readings)  # the reading thread itself runs


def test_usable_cores_are_between_one_and_the_machines():
    assert 1 <= usable_cores() <= (os.cpu_count() or 1)


def test_usable_cores_are_the_affinitys(monkeypatch):
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {3}, raising=False)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 64)
    assert usable_cores() == 1  # `taskset -c 3` on a 64-core machine
    monkeypatch.delattr(threads.os, "sched_getaffinity")  # macOS, Windows
    assert usable_cores() == 64


# -- readings -> busy cores -> threads


@pytest.mark.parametrize(
    "readings, busy",
    [
        ([], 0),  # no readings (off Linux): none busy
        ([1, 1, 1, 1, 1], 0),  # the reader alone
        ([2, 2, 2, 2, 2], 1),  # one other task
        ([3, 3, 2, 3, 3], 2),  # two others
        ([1, 1, 4, 1, 1], 0),  # a task that ran for one reading: the median leaves it out
        ([2, 2, 9, 9, 9], 8),  # eight others most of the time
    ],
)
def test_busy_cores_are_the_median_reading_less_the_reader(readings, busy):
    assert busy_others(readings, usable=2, online=2) == busy


def test_only_the_share_of_others_on_usable_cores_counts():
    # a cpuset of 4 cores on a 64-core host where 32 other tasks run: about 2 on ours
    assert busy_others([33] * 5, usable=4, online=64) == 2
    assert busy_others([33] * 5, usable=64, online=64) == 32
    assert busy_others([2] * 5, usable=2, online=4) == 1  # half a task rounds up


@pytest.mark.parametrize(
    "usable, busy, expected",
    [(2, 0, 2), (2, 1, 1), (2, 2, 1), (2, 7, 1), (16, 3, 13), (1, 0, 1), (4, -1, 4)],
)
def test_threads_are_the_free_cores_at_least_one(usable, busy, expected):
    assert default_threads(usable, busy) == expected


@given(st.integers(1, 512), st.integers(-5, 1000))
def test_threads_are_never_below_one_nor_above_the_usable_cores(usable, busy):
    assert 1 <= default_threads(usable, busy) <= usable


def test_the_machines_default_puts_the_readings_together(monkeypatch):
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads, "sample_procs_running", lambda: [1, 1, 1, 1, 1])
    assert load_aware_threads() == 2  # quiet: a thread per core
    monkeypatch.setattr(threads, "sample_procs_running", lambda: [2, 2, 2, 2, 2])
    assert load_aware_threads() == 1  # one busy process: the free core alone
    monkeypatch.setattr(threads, "sample_procs_running", lambda: [])
    assert load_aware_threads() == 2  # no count (not Linux): as BLAS would choose


# -- decoding: a small model generates on one thread when resgrad picks the count


def _cfg(L, C, V, H=2, T=16):
    return GPTConfig(vocab_size=V, block_size=T, n_layer=L, n_head=H, n_embd=C)


def test_a_tokens_work_is_its_matmuls():
    # GPT-2 124M: 124M weights in matmuls less the position embedding, 2 FLOPs each
    gpt2 = _cfg(12, 768, 50257, H=12, T=1024)
    assert token_flops(gpt2) == 2 * (12 * 12 * 768**2 + 768 * 50257) == 247_064_064
    model = GPT(_cfg(2, 32, 50), seed=0)
    assert token_flops(model.cfg) == model.flops_per_token(T=0) // 3  # a forward, no attention


def test_the_run_sized_model_decodes_on_one_thread_and_gpt2_on_all():
    assert decode_threads(TrainConfig().gpt_config(65)) == 1  # C=128: 1.6 MFLOP a token
    assert decode_threads(_cfg(12, 768, 50257, H=12, T=1024)) is None  # as set


def test_the_threshold_is_where_one_thread_stops():
    assert DECODE_ONE_THREAD_FLOPS == 4_000_000  # as measured and documented (sample.py)
    # L=1, C=40: 24 * 1600 = 38,400 FLOPs in the block and 80 V in the head
    V = (DECODE_ONE_THREAD_FLOPS - 38_400) // 80  # token_flops is exactly the threshold
    assert token_flops(_cfg(1, 40, V)) == DECODE_ONE_THREAD_FLOPS
    assert decode_threads(_cfg(1, 40, V)) is None
    assert decode_threads(_cfg(1, 40, V - 1)) == 1


def _threads_while_generating(model, auto_threads):
    seen = []
    with threadpool_limits(2, user_api="blas"):
        out = generate(
            model, np.zeros((1, 3), np.int64), 4, np.random.default_rng(0), top_k=1,
            on_token=lambda t: seen.append(blas_threads()), auto_threads=auto_threads,
        )  # fmt: skip
        after = blas_threads()
    assert after == 2  # the limit ends with the call
    return out, set(seen)


def test_generation_takes_one_thread_only_for_a_small_model_left_to_resgrad():
    small = GPT(_cfg(1, 16, 20), seed=0)  # 6,784 FLOPs a token
    out_auto, seen = _threads_while_generating(small, auto_threads=True)
    assert seen == {1}
    out_set, seen = _threads_while_generating(small, auto_threads=False)
    assert seen == {2}  # the caller's count (--threads) is kept exactly
    assert np.array_equal(out_auto, out_set)  # the same greedy tokens either way
    big = GPT(_cfg(1, 32, 65_000), seed=0)  # 4.2 MFLOP a token: threads help
    assert _threads_while_generating(big, auto_threads=True)[1] == {2}


# -- benchmarks/bench_threads.py: the busy processes it starts end on every path


def _bench_threads():
    path = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "bench_threads.py"
    spec = importlib.util.spec_from_file_location("bench_threads", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_threads", module)  # its dataclasses look themselves up
    spec.loader.exec_module(sys.modules["bench_threads"])
    return sys.modules["bench_threads"]


def _ended(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie has ended
    except FileNotFoundError:
        return True


def test_the_busy_processes_end_with_their_block_even_on_ctrl_c():
    bench = _bench_threads()
    with pytest.raises(KeyboardInterrupt), bench.busy_processes(2) as procs:
        assert len(procs) == 2 and all(p.poll() is None for p in procs)  # busy
        raise KeyboardInterrupt
    assert all(p.poll() is not None for p in procs)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="Linux's /proc")
def test_a_busy_process_ends_itself_when_the_benchmark_is_killed():
    bench = _bench_threads()
    parent = subprocess.Popen(  # a stand-in for the benchmark: starts one, reports its pid
        [sys.executable, "-c", "import os, subprocess, sys, time\n"
         f"p = subprocess.Popen([sys.executable, '-c', {bench.BUSY!r}, str(os.getpid())])\n"
         "print(p.pid, flush=True)\ntime.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    busy = int(parent.stdout.readline())
    assert not _ended(busy)
    parent.send_signal(signal.SIGKILL)  # no finally block runs
    parent.wait()
    deadline = time.monotonic() + 10
    while not _ended(busy):
        assert time.monotonic() < deadline, "the busy process outlived the benchmark"
        time.sleep(0.05)
