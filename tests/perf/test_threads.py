"""resgrad.perf.threads: the load-aware BLAS thread count, from readings a test supplies;
and the decoding rule beside it (resgrad.train.sample.decode_threads), which gives a
model too small to gain from threads one thread when resgrad picks the count."""

import importlib.util
import os
import pathlib
import re
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
    ThreadFollower,
    blas_threads,
    busy_others,
    default_threads,
    load_aware_threads,
    parse_procs_running,
    parse_task_state,
    read_own_running,
    read_procs_running,
    reread_threads,
    sample_others_running,
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


def blas_threads_now() -> int:
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


# -- following the load: this process's own running threads, and when to read again


def _task(stat: str, name: str) -> str:
    """A /proc/<pid>/task/<tid>/stat line of a thread in ``stat``, as Linux writes it."""
    return f"4242 ({name}) {stat} 1 4242 4242 0 -1 4194560 1543 0 0 0 12 3 0 0 20 0 3 0\n"


def _tasks(tmp_path, states, name="python"):
    d = tmp_path / "task"
    for i, state in enumerate(states):
        (d / str(4242 + i)).mkdir(parents=True)
        (d / str(4242 + i) / "stat").write_text(_task(state, name))
    return str(d)


def test_a_threads_state_is_read_past_its_name():
    assert parse_task_state(_task("R", "python")) == "R"
    assert parse_task_state(_task("S", "a) R (b")) == "S"  # a name may hold ") R"
    assert parse_task_state("") is None
    assert parse_task_state("4242 (python)") is None


def test_own_running_threads_are_the_r_states(tmp_path):
    assert read_own_running(_tasks(tmp_path / "a", "RSRDS")) == 2
    assert read_own_running(_tasks(tmp_path / "b", "SS")) == 1  # the reader runs
    assert read_own_running(str(tmp_path / "absent")) is None  # not Linux


def test_the_mid_run_readings_take_this_processes_threads_off(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text(PROC_STAT.replace("procs_running 2", "procs_running 5"))
    tasks = _tasks(tmp_path, "RRRS")  # the reader and two spinning BLAS threads
    got = sample_others_running(reads=3, gap_s=0, path=str(stat), task_dir=tasks)
    assert got == [3, 3, 3]  # 5 running, 2 of them ours besides the reader
    assert busy_others(got, usable=2, online=2) == 2
    absent = str(tmp_path / "absent")
    assert sample_others_running(reads=2, gap_s=0, path=str(stat), task_dir=absent) == [5, 5]
    assert sample_others_running(reads=2, gap_s=0, path=absent, task_dir=tasks) == []


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux's /proc")
def test_this_process_runs_at_least_its_reader():
    assert read_own_running() >= 1
    assert all(n >= 1 for n in sample_others_running())


def test_the_mid_run_count_puts_the_readings_together(monkeypatch):
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads, "sample_others_running", lambda: [1, 1, 1])
    monkeypatch.setattr(threads, "sample_procs_running", lambda: [9, 9, 9])  # not this one
    assert reread_threads() == 2
    monkeypatch.setattr(threads, "sample_others_running", lambda: [2, 2, 2])
    assert reread_threads() == 1


class Reader:
    """A stand-in for the machine: the counts it gives, in turn; the steps it was read at."""

    def __init__(self, *counts):
        self.counts, self.at, self.step = list(counts), [], 0

    def __call__(self):
        self.at.append(self.step)
        return self.counts.pop(0) if len(self.counts) > 1 else self.counts[0]


def _run(follower, reader, seconds):
    """The counts ``follower`` gives after each step of ``seconds``; steps count from 1."""
    out = []
    for i, s in enumerate(seconds, 1):
        reader.step = i
        out.append(follower(s))
    return out


def test_the_load_is_read_again_every_recheck_period():
    reader = Reader(2)
    f = ThreadFollower(2, reader, every=200)
    assert _run(f, reader, [0.05] * 650) == [2] * 650
    assert reader.at == [200, 400, 600] and f.reads == 3


def test_the_defaults_are_the_modules():
    f = ThreadFollower(2, Reader(2))
    assert (f.every, f.slow, f.cooldown) == (200, 1.5, 20)
    assert (f.recent.maxlen, f.min_steps) == (threads.STEP_WINDOW, threads.MIN_STEPS)


def test_a_slow_step_reads_at_once_and_its_count_is_used_next():
    reader = Reader(1)
    f = ThreadFollower(2, reader, every=200, cooldown=5)
    counts = _run(f, reader, [0.1] * 9 + [0.16] + [0.1] * 3)
    assert reader.at == [10]  # 0.16 > 1.5 x 0.1: at once
    assert counts == [2] * 9 + [1] * 4


def test_a_step_at_or_under_the_factor_is_not_slow():
    reader = Reader(1)
    f = ThreadFollower(2, reader, every=200, cooldown=5)
    _run(f, reader, [0.25] * 9 + [0.375, 0.37, 0.25])  # 0.375 = 1.5 x 0.25 exactly
    assert reader.at == []


def test_a_normal_step_is_the_median_one_outlier_does_not_hide_a_load():
    reader = Reader(2)
    f = ThreadFollower(2, reader, every=200, cooldown=5)
    _run(f, reader, [0.1] * 10 + [2.0] + [0.1] * 5 + [0.16])  # 2.0: a step that stalled once
    assert reader.at == [11, 17]  # the mean, 0.22 s, would call 0.16 s normal


def test_the_first_steps_are_not_judged():
    reader = Reader(1)
    f = ThreadFollower(2, reader, every=200, cooldown=0, min_steps=5)
    _run(f, reader, [0.1] * 4 + [1.0])  # 4 steps timed: too few to know a normal one
    assert reader.at == []
    _run(f, reader, [1.0])  # 5 timed, their median 0.1
    assert reader.at == [1]  # reader.step counts this call's steps


def test_a_load_that_stays_is_read_once_a_cooldown():
    reader = Reader(1)  # the count is 1 already: nothing to move, the steps stay slow
    f = ThreadFollower(1, reader, every=200, cooldown=5, window=21)
    _run(f, reader, [0.1] * 30 + [0.3] * 40)
    assert reader.at == [31, 36, 41]  # from step 42 the median is a slow step's: the new normal


def test_no_slow_reading_before_the_cooldown_after_the_last():
    reader = Reader(2)
    f = ThreadFollower(2, reader, every=10, cooldown=4)
    _run(f, reader, [0.1] * 10 + [0.1, 0.1, 0.5, 0.1, 0.1])  # read at 10 (the period)
    assert reader.at == [10]  # 0.5 at step 13: 3 steps after, under the cooldown
    _run(f, reader, [0.5])
    assert reader.at == [10, 1]  # step 16 (reader.step restarted): 6 after, read


def test_a_new_count_starts_a_new_normal():
    reader = Reader(1, 1)
    f = ThreadFollower(2, reader, every=200, cooldown=1, window=21)
    _run(f, reader, [0.1] * 10 + [0.2] * 7 + [0.25])  # one thread: 0.2 s a step
    assert reader.at == [11]  # 0.25 is slow against 0.1, not against the new 0.2


def test_the_count_follows_the_load_both_ways():
    reader = Reader(1, 2)
    f = ThreadFollower(2, reader, every=50, cooldown=5)
    counts = _run(f, reader, [0.1] * 10 + [0.2] * 90)
    assert reader.at == [11, 61] and counts[10:60] == [1] * 50 and counts[60:] == [2] * 40


@pytest.mark.parametrize(
    "kw, msg",
    [
        ({"start": 0}, "start must be an integer >= 1, got 0"),
        ({"every": 0}, "every must be an integer >= 1, got 0"),
        ({"slow": 1.0}, "slow must be a number > 1, got 1.0"),
        ({"slow": "2"}, "slow must be a number > 1, got '2'"),
        ({"cooldown": -1}, "cooldown must be an integer >= 0, got -1"),
        ({"window": 3, "min_steps": 5}, "window must be at least min_steps (5), got 3"),
        ({"min_steps": True}, "min_steps must be an integer >= 1, got True"),
    ],
)
def test_a_bad_setting_is_refused_by_name(kw, msg):
    with pytest.raises(ValueError, match=f"^{re.escape(msg)}$"):
        ThreadFollower(**{"start": 2, "read": Reader(2), **kw})


def test_a_reading_below_one_is_refused():
    f = ThreadFollower(2, lambda: 0, every=1)
    with pytest.raises(ValueError, match=r"read\(\) must be an integer >= 1, got 0"):
        f(0.1)


def test_the_start_is_the_blas_count_in_force():
    np.ones((2, 2)) @ np.ones((2, 2))  # BLAS loaded
    with threadpool_limits(1):
        assert blas_threads() == 1 and ThreadFollower(read=Reader(1)).threads == 1
    with threadpool_limits(2):
        assert ThreadFollower(read=Reader(2)).threads == 2


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


def _numpy_blas_threads() -> int:
    """The thread count of NumPy's BLAS, the one resgrad's products run on (numba's first
    compile loads SciPy's too, after generate set its limit: that one is not resgrad's)."""
    import numpy

    ours = os.path.dirname(os.path.dirname(numpy.__file__))  # site-packages
    counts = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"
              and i["filepath"].startswith(os.path.join(ours, "numpy"))]  # fmt: skip
    return max(counts) if counts else blas_threads_now()


def _threads_while_generating(model, auto_threads):
    seen = []
    with threadpool_limits(2, user_api="blas"):
        out = generate(
            model, np.zeros((1, 3), np.int64), 4, np.random.default_rng(0), top_k=1,
            on_token=lambda t: seen.append(_numpy_blas_threads()), auto_threads=auto_threads,
        )  # fmt: skip
        after = blas_threads_now()
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
