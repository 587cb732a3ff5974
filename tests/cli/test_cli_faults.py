"""Faults and bad input through the real ``resgrad`` command (issue 12), each in a subprocess.

Every test here failed before its fix. Trainings are tiny (1 layer, C=16, T=8) so the
file stays fast; concurrency is arranged by the lock's own files, never by sleeping.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "src"))
ENV = {**os.environ, "PYTHONPATH": SRC}  # the subprocess runs this checkout's code
TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "8",
        "--batch-size", "4", "--eval-iters", "2", "--warmup-iters", "0"]  # fmt: skip


def resgrad(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "resgrad", *map(str, args)],
        capture_output=True, text=True, timeout=timeout, env=ENV,
    )  # fmt: skip


def start(*args):
    return subprocess.Popen(
        [sys.executable, "-m", "resgrad", *map(str, args)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    )  # fmt: skip


def wait_for(*paths, proc=None, timeout=120):
    """Poll until every path exists (the process must stay alive meanwhile)."""
    t0 = time.monotonic()
    while not all(os.path.exists(p) for p in paths):
        assert proc is None or proc.poll() is None, proc.communicate()
        assert time.monotonic() - t0 < timeout, f"{paths} did not appear"
        time.sleep(0.05)


def one_error_line(p, *words):
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def text(tmp_path):
    words = "the residual stream carries gradients past every block of a deep model ".split()
    path = tmp_path / "text.txt"
    path.write_text(" ".join(words[(i * 7) % len(words)] for i in range(1500)))
    return str(path)


# -- 1, 8: one run at a time in a directory; a killed run leaves no lock, no temporaries


def test_two_trainings_into_one_directory_the_second_fails_at_once(tmp_path, text):
    out = tmp_path / "conc"
    first = start("train", "--out-dir", out, "--data", text, *TINY, "--max-iters", 10**6,
                  "--eval-interval", 10**6, "--seed", 1)  # fmt: skip
    try:
        # it holds the lock, and its first evaluation's writes are done (loss.png comes last):
        # killed during one, it would leave a second temporary beside the one made below
        wait_for(out / ".resgrad.lock.info", out / "last.ckpt", out / "loss.png", proc=first)
        second = resgrad("train", "--out-dir", out, "--data", text, *TINY, "--max-iters", 5,
                         "--seed", 2)  # fmt: skip
        line = one_error_line(second, repr(str(out)), f"pid {first.pid}", "in use")
        assert "resgrad train: error:" in line
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=60)
    # the killed run's lock does not block, and its stale temporaries are removed
    stale = out / ".last.ckpt.k1ll3d00.tmp"
    stale.write_bytes(b"\0" * 1000)
    third = resgrad("train", "--out-dir", out, "--data", text, "--resume", "--max-iters", 3)
    assert third.returncode == 0, third.stderr
    assert not stale.exists() and "removed 1 temporary file" in third.stderr


def test_two_sweeps_into_one_output_the_second_fails_at_once(tmp_path):
    out = tmp_path / "s.csv"
    grid = ["--variants", "pre-ln", "--widths", "16", "--heads", "2", "--seq", "4",
            "--batch", "2", "--jobs", "1"]  # fmt: skip
    first = start("sweep", *grid, "--depths", ",".join(map(str, range(1, 400))), "--out", out)
    try:
        wait_for(tmp_path / ".s.csv.lock.info", proc=first)
        second = resgrad("sweep", *grid, "--depths", "2", "--out", out)
        one_error_line(second, "sweep output", repr(str(out)), f"pid {first.pid}")
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=60)
    assert resgrad("sweep", *grid, "--depths", "2", "--out", out).returncode == 0


DEPTH_TINY = ["--n-layer", "1", "--n-embd", "16", "--n-head", "2", "--block-size", "8",
              "--batch-size", "4", "--eval-iters", "2"]  # fmt: skip


def test_depth_train_holds_its_directory(tmp_path, text):
    out = tmp_path / "d"
    holder = start("depth-train", "--out-dir", out, "--data", text, *DEPTH_TINY,
                   "--max-iters", 10**6, "--eval-interval", 10**6)  # fmt: skip
    try:
        wait_for(out / ".resgrad.lock.info", proc=holder)
        p = resgrad("depth-train", "--out-dir", out, "--data", text, *DEPTH_TINY, "--max-iters", 2)
        one_error_line(p, repr(str(out)), f"pid {holder.pid}")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.communicate(timeout=60)


# -- 7: depth-train run twice into one directory names what it can do


def test_depth_train_twice_does_not_suggest_a_resume_it_lacks(tmp_path, text):
    args = ["depth-train", "--out-dir", tmp_path / "d", "--data", text, *DEPTH_TINY,
            "--max-iters", 2, "--variants", "pre-ln"]  # fmt: skip
    assert resgrad(*args).returncode == 0
    line = one_error_line(resgrad(*args), "already holds a depth-train run", "another --out-dir")
    assert "--resume" not in line


# -- 2: sizes that cannot fit are refused before allocating; a MemoryError is one line


@pytest.mark.parametrize(
    "args",
    [
        ["flow", "--depth", "100000"],
        ["depth", "--depths", "100000000"],
        ["train", "--n-embd", "1000000", "--n-head", "1"],
        ["gradcheck", "--width", "100000"],
        ["sweep", "--depths", "2,100000", "--out", "{tmp}/s.csv"],
    ],
)
def test_sizes_that_cannot_fit_are_refused_at_once(tmp_path, args):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    t0 = time.monotonic()
    p = resgrad(*args, "--threads", "1", timeout=60)
    line = one_error_line(p, "would need about", "upper estimate", "is available")
    assert time.monotonic() - t0 < 30, "it must refuse before allocating, not after"
    assert "GiB" in line or "TiB" in line
    big = max(args[1:], key=lambda a: len(a.split(",")[-1]) if a[:1].isdigit() else 0)
    assert big.split(",")[-1] in line  # the size that does not fit is named


def test_a_real_memory_error_is_one_line(tmp_path):
    import resource

    def limit():  # 1 GiB of address space: the estimate (3.5 GiB) passes, W's 1.1 GiB fails
        resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))

    p = subprocess.run(
        [sys.executable, "-m", "resgrad", "gradcheck", "--width", "12000", "--threads", "1"],
        capture_output=True, text=True, timeout=120, preexec_fn=limit,
        env={**ENV, "OPENBLAS_NUM_THREADS": "1"},  # per-thread buffers stay within the limit
    )  # fmt: skip
    one_error_line(p, "out of memory", "Unable to allocate", "choose smaller sizes")


# -- 3: a data path that is not a regular file


@pytest.mark.parametrize("data", ["/dev/zero", "/dev/null", "fifo", "dir"])
def test_data_that_is_not_a_regular_file_is_refused(tmp_path, data):
    if data == "fifo":  # a named pipe nobody writes to: opening it must not wait for one
        data = str(tmp_path / "fifo")
        os.mkfifo(data)
    elif data == "dir":
        data = str(tmp_path)
    p = resgrad("train", "--data", data, "--out-dir", tmp_path / "o", *TINY, timeout=60)
    one_error_line(p, repr(data), "not a regular file")
    assert not (tmp_path / "o").exists()  # refused before the run's directory is made


def test_a_diverging_run_prints_its_one_line_and_no_numpy_warnings(tmp_path, text):
    """A learning rate of 1e30 overflows the update: the run stops on one line (exit 1),
    with no RuntimeWarning from the dynamics' norms of the inf weights before it."""
    p = resgrad("train", "--data", text, "--out-dir", tmp_path / "o", *TINY, "--lr", "1e30",
                "--grad-clip", "0", "--max-iters", "20", timeout=120)  # fmt: skip
    assert p.returncode == 1, p.stderr
    assert "training stopped" in p.stderr and "Warning" not in p.stderr, p.stderr


@pytest.mark.parametrize(
    "args, needle",
    [
        (["experiment", "residual", "--depths", "1000000000000", "--seeds", "1"], "largest L="),
        (["experiment", "residual", "--seeds", "1000000000000"], "at most 100,000"),
        (["claims", "update-size", "--seeds", "1", "--depths", "1000000000000"], "depth 1000"),
        (["sweep", "--seeds", "1000000000000", "--out", "{tmp}/s.csv"], "at most 100,000"),
        (["flow", "--seeds", "100000000"], "at most 100,000 seeds, got '100000000'"),
        (["claims", "scaled-init", "--seeds", "1000000000000"], "at most 100,000 seeds"),
    ],
)
def test_grids_and_stacks_too_large_are_refused_at_once_leaving_nothing(tmp_path, args, needle):
    """They hung (building a list of 10^12 cells, or a 10^12-layer model), and the
    experiment left its directory behind."""
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    out = ["--out-dir", tmp_path / "ex"] if args[0] == "experiment" else []
    p = resgrad(*args, *out, timeout=60)
    one_error_line(p, needle)
    assert os.listdir(tmp_path) == []


def test_a_run_refused_on_its_text_leaves_no_directory(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    p = resgrad("train", "--data", empty, "--out-dir", tmp_path / "o", *TINY, timeout=60)
    one_error_line(p, "is empty")
    grid = ["--depths", "1", "--seeds", "1", "--max-iters", "2", "--warmups", "0"]
    p = resgrad("experiment", "residual", *grid, "--data", empty, "--out-dir", tmp_path / "ex")
    one_error_line(p, "is empty")
    assert os.listdir(tmp_path) == ["empty.txt"]


@pytest.mark.parametrize(
    "args, named",
    [
        (["depth", "--plot", ""], "--plot"),  # ran without its plot
        (["dynamics", ""], "run_dir"),
        (["experiment", "residual", "--out-dir", ""], "--out-dir"),  # used the default dir
        (["sweep", "--variants", "pre-ln", "--out", ""], "--out"),
    ],
)
def test_an_empty_value_is_refused_not_taken_for_the_default(tmp_path, monkeypatch, args, named):
    monkeypatch.chdir(tmp_path)  # where a default directory would have been made
    p = resgrad(*args, timeout=60)
    one_error_line(p, f"argument {named}: expected a value, got ''")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "args",
    [["depth", "--depths", "2,5,2"], ["flow", "--variant", "pre-ln,pre-ln"],
     ["claims", "update-size", "--depths", "2,2"], ["check", "--only", "layers,layers"]],
)  # fmt: skip
def test_a_list_with_a_value_twice_is_refused(args):
    """Duplicates printed duplicate rows in some commands and were dropped in others."""
    one_error_line(resgrad(*args, timeout=60), "expected distinct values", "twice")


def test_an_out_dir_that_is_a_file_is_named(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    for args in (["train", *TINY, "--max-iters", "2"], ["depth-train", "--max-iters", "2"]):
        p = resgrad(*args, "--out-dir", f, timeout=60)
        one_error_line(p, f"{str(f)!r} is a file; expected a directory")
    assert f.read_text() == "x"


def test_missing_data_is_named_as_missing(tmp_path):
    missing = str(tmp_path / "nope.txt")
    p = resgrad("train", "--data", missing, "--out-dir", tmp_path / "o", *TINY, timeout=60)
    line = one_error_line(p, repr(missing), "does not exist")
    assert "Errno" not in line


# -- 4: an evaluation too long to be useful is refused, saying why


def test_eval_iters_has_a_bound_that_says_why(tmp_path, text):
    p = resgrad("train", "--data", text, "--out-dir", tmp_path / "o", *TINY[:-4],
                "--eval-iters", "100000000", timeout=60)  # fmt: skip
    one_error_line(p, "eval_iters must be at most", "100000000", "before training goes on")


# -- 5: resume trusts the checkpoint; damaged metrics are skipped and said so


@pytest.mark.parametrize("damage", ["remove", "foreign", "garbage"])
def test_resume_over_damaged_metrics(tmp_path, text, damage):
    out = tmp_path / "o"
    args = ["train", "--out-dir", out, "--data", text, *TINY, "--eval-interval", 2]
    assert resgrad(*args, "--max-iters", 4).returncode == 0
    metrics = out / "metrics.jsonl"
    good = [json.loads(s) for s in metrics.read_text().splitlines()]
    if damage == "remove":
        metrics.unlink()
    elif damage == "foreign":
        with metrics.open("a") as f:
            f.write('{"kind": "note"}\n')
    else:
        with metrics.open("a") as f:
            f.write("not json at all\n")
    done = resgrad("train", "--out-dir", out, "--resume", "--max-iters", 4)  # already complete
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "; resuming from last.ckpt at iteration 4" in done.stdout + done.stderr
    p = resgrad("train", "--out-dir", out, "--resume", "--max-iters", 6)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    recs = [json.loads(s) for s in metrics.read_text().splitlines()]
    assert all(r["kind"] in ("iter", "eval") for r in recs)
    assert [r["iter"] for r in recs if r["kind"] == "iter"][-2:] == [4, 5]
    if damage != "remove":
        assert recs[: len(good)] == good  # the usable records are kept as they were


# -- 9: sample shows its defaults, streams its tokens, and Ctrl-C keeps them


def test_sample_help_shows_the_defaults():
    out = resgrad("sample", "--help").stdout
    for d in ("(default: 500)", "(default: 0.8)", "(default: 200)", "(default: 1337)"):
        assert d in out


def test_sample_streams_tokens_and_an_interrupt_keeps_them(tmp_path, text):
    out = tmp_path / "o"
    assert (
        resgrad("train", "--out-dir", out, "--data", text, *TINY, "--max-iters", 2).returncode == 0
    )
    # Ctrl-C as a terminal delivers it. A process started with SIGINT ignored (a test run
    # launched in the background: `pytest &`, nohup, some CI runners) passes the ignoring
    # on, Python then installs no KeyboardInterrupt handler, and the interrupt would do
    # nothing until the timeout: the child gets SIGINT's default disposition back first.
    p = subprocess.Popen(
        [sys.executable, "-m", "resgrad", "sample", "--out-dir", str(out), "--start", "the ",
         "--num-tokens", str(10**7)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        got = b""
        while len(got) < 20:  # raw reads: nothing is held in a buffer communicate() skips
            chunk = os.read(p.stdout.fileno(), 20 - len(got))
            assert chunk, p.communicate(timeout=60)  # the output arrives while 10**7 tokens
            got += chunk  # are far from done
        assert got.startswith(b"the ") and p.poll() is None
        p.send_signal(signal.SIGINT)
        rest, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    err = err.decode()
    assert p.returncode == 130 and "interrupted" in err and "Traceback" not in err, err
    assert (got + rest).endswith(b"\n") and len(got + rest) >= 21


# -- 10: --threads limits the BLAS threads of a computing command


def test_threads_limits_blas_threads_during_the_command(monkeypatch, capsys):
    from threadpoolctl import threadpool_info

    import resgrad.lab.flow.study as flow_study  # where the command's stacks are measured
    from resgrad.cli import main

    seen = []
    real = flow_study.measure

    def measure(cfg):
        seen.append({p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"})
        return real(cfg)

    monkeypatch.setattr(flow_study, "measure", measure)
    assert main(["flow", "--depth", "2", "--width", "8", "--heads", "2", "--threads", "1"]) == 0
    assert seen == [{1}]


@pytest.mark.parametrize("cmd", ["lesson", "depth", "gradcheck", "check", "flow", "sweep", "train",
                                 "sample", "depth-train", "bench", "experiment warmup",
                                 "experiment robustness", "claims"])  # fmt: skip
def test_every_computing_command_takes_threads(cmd):
    assert "--threads" in resgrad(*cmd.split(), "--help").stdout
    one_error_line(resgrad(*cmd.split(), "--threads", "0"), "--threads", "positive integer")


# -- 6: a malformed Dask address is one line, with no Client.__del__ hang after it


def test_sweep_with_a_malformed_scheduler_address_is_one_line(tmp_path):
    p = resgrad("sweep", "--backend", "dask", "--scheduler", "not a url", "--out",
                tmp_path / "s.csv")  # fmt: skip
    one_error_line(p, "'not a url'", "tcp://HOST:8786")
    assert "Exception ignored" not in p.stderr and os.listdir(tmp_path) == []


# -- 11: a sweep whose points differ in size does not trip loky's memory-leak warning


def test_sweep_of_deep_points_prints_no_memory_leak_warning(tmp_path):
    # first a shallow point per worker (loky's reference size), then deep ones: each
    # leaves ~400 MB of freed heap behind, more than loky's 300 MB leak threshold
    p = resgrad("sweep", "--variants", "pre-ln", "--depths", "2,300", "--widths", "64",
                "--seeds", "4", "--jobs", "2", "--threads", "1", "--out", tmp_path / "s.csv",
                timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "memory leak" not in p.stderr and "worker stopped" not in p.stderr, p.stderr


def test_a_reader_that_leaves_ends_the_command_quietly():
    # `resgrad depth | head -1`: the pipe is closed before the command writes a byte
    p = start("depth")
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=120) == 0 and err == "", err
