"""The run lock: a second holder fails at once naming the first; a SIGKILLed holder frees it."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from resgrad.formats.lock import (
    LOCK_NAME,
    Locked,
    hold_lock,
    lock_dir,
    lock_path_for,
    new_dir_or_nothing,
)

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")

HOLDER = textwrap.dedent(
    """
    import sys, time
    from resgrad.formats.lock import lock_dir
    with lock_dir(sys.argv[1]):
        print("held", flush=True)
        time.sleep(600)
    """
)


def _start_holder(directory):
    env = {**os.environ, "PYTHONPATH": os.path.abspath(SRC)}
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(directory)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert p.stdout.readline() == "held\n"  # blocks until the lock and its info are in place
    return p


def test_a_second_holder_fails_at_once_naming_the_first_and_sigkill_frees_it(tmp_path):
    holder = _start_holder(tmp_path)
    try:
        with pytest.raises(Locked) as e:
            with lock_dir(tmp_path):
                pass
        msg = str(e.value)
        assert str(tmp_path) in msg and f"pid {holder.pid}" in msg and "\n" not in msg
        assert isinstance(e.value, OSError)  # the CLI turns it into exit status 2
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
        holder.stdout.close()
    # the kernel dropped the flock with the process: the stale lock file does not block
    assert os.path.exists(tmp_path / LOCK_NAME)
    with lock_dir(tmp_path):
        assert os.path.exists(str(tmp_path / LOCK_NAME) + ".info")
    assert not os.path.exists(str(tmp_path / LOCK_NAME) + ".info")  # removed on release


def test_released_lock_can_be_taken_again_in_process(tmp_path):
    path = lock_path_for(tmp_path / "out.csv", directory=False)
    assert os.path.basename(path) == ".out.csv.lock"
    for _ in range(2):
        with hold_lock(path, "x"):
            with pytest.raises(Locked, match="x is in use"):
                with hold_lock(path, "x"):
                    pass


def test_a_place_that_cannot_be_written_is_not_called_locked():
    with pytest.raises(OSError, match="cannot be written: its lock file") as e:
        with hold_lock("/proc/.x.csv.lock", "output '/proc/x.csv'"):
            pass
    assert not isinstance(e.value, Locked) and "in use" not in str(e.value)


def test_a_new_directory_of_a_refused_command_is_taken_away(tmp_path):
    new = tmp_path / "a" / "run"
    with pytest.raises(ValueError):
        with new_dir_or_nothing(new), lock_dir(new):
            os.makedirs(new / "runs")
            (new / ".cells.partial.jsonl").write_text("")
            raise ValueError("refused")
    assert not new.exists()
    with pytest.raises(ValueError):  # something was written: it stays, lock and all
        with new_dir_or_nothing(new), lock_dir(new):
            (new / "metrics.jsonl").write_text("{}\n")
            raise ValueError("diverged")
    assert sorted(os.listdir(new)) == [LOCK_NAME, "metrics.jsonl"]
    os.unlink(new / "metrics.jsonl")
    with pytest.raises(ValueError):  # a directory that was there before is never removed
        with new_dir_or_nothing(new), lock_dir(new):
            raise ValueError("refused")
    assert new.is_dir()


def test_the_info_sidecar_names_this_process_its_program_and_start(tmp_path, monkeypatch):
    import json
    import socket
    import time

    monkeypatch.setattr(sys, "argv", ["/x/resgrad/__main__.py", "train", "--out-dir", "o"])
    path = str(tmp_path / LOCK_NAME)
    before = time.time()
    with hold_lock(path, "run directory 'o'"):
        after = time.time()
        with open(path + ".info", encoding="utf-8") as f:
            info = json.load(f)
        with pytest.raises(Locked) as e:
            with hold_lock(path, "run directory 'o'"):
                pass
    assert info["pid"] == os.getpid() and info["host"] == socket.gethostname()
    assert info["command"] == "resgrad train --out-dir o"  # `python -m resgrad` reads as resgrad
    assert before <= info["started"] <= after  # wall-clock seconds since the epoch
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(info["started"]))
    assert f"pid {os.getpid()} on {socket.gethostname()}, started {started}" in str(e.value)
    assert str(e.value).count("(resgrad train --out-dir o)") == 1


def test_a_refused_command_keeps_what_it_wrote_in_a_hidden_file(tmp_path):
    new = tmp_path / "run"
    with pytest.raises(ValueError):
        with new_dir_or_nothing(new), lock_dir(new):
            (new / ".notes").write_text("kept")  # hidden but not empty: written, not bookkeeping
            raise ValueError("refused")
    assert (new / ".notes").read_text() == "kept"


def test_cleanup_leaves_a_directory_whose_lock_is_held(tmp_path):
    import contextlib

    new = tmp_path / "run"
    with contextlib.ExitStack() as other:  # another holder, still inside its run
        with pytest.raises(ValueError):
            with new_dir_or_nothing(new):
                other.enter_context(lock_dir(new))
                raise ValueError("refused")
        assert sorted(os.listdir(new)) == [LOCK_NAME, LOCK_NAME + ".info"]
        with pytest.raises(Locked):  # and the holder still holds it
            with lock_dir(new):
                pass
