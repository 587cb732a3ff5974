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
        wait_for(out / ".resgrad.lock.info", out / "last.ckpt", proc=first)  # it holds the lock
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
