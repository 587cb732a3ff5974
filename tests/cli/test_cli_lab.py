"""``resgrad experiment`` and ``resgrad claims`` through the real command: workers that die
with the experiment (real signals, in a subprocess), and explicit seeds."""

import csv
import json
import os
import shlex
import signal
import subprocess
import sys
import time

import psutil
import pytest

from resgrad.cli import main
from resgrad.lab.experiments import claim_table, stream_growth
from resgrad.lab.flow import FlowConfig, measure, profile

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "src"))
ENV = {**os.environ, "PYTHONPATH": SRC}  # the subprocess runs this checkout's code
# two cells (seeds 30 and 4) of a tiny model, long enough to be killed while they train
GRID = ["--variants", "pre-ln", "--depths", "1", "--lrs", "0.001", "--warmups", "0",
        "--n-embd", "16", "--n-head", "2", "--block-size", "8", "--batch-size", "4",
        "--max-iters", "300", "--eval-interval", "100", "--eval-iters", "1"]  # fmt: skip


@pytest.fixture
def text(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("the quick brown fox jumps over the lazy dog. " * 40, encoding="utf-8")
    return str(path)


def _cells(out):
    with open(os.path.join(out, "cells.csv")) as f:
        return list(csv.DictReader(f))


def _still_running(procs, timeout):
    """The processes of ``procs`` still running after up to ``timeout`` seconds (a zombie,
    dead but not yet reaped by whoever adopted it, is not running)."""
    t0 = time.monotonic()
    while True:
        alive = []
        for w in procs:
            try:
                if w.is_running() and w.status() != psutil.STATUS_ZOMBIE:
                    alive.append(w)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() - t0 > timeout:
            return alive
        time.sleep(0.05)


@pytest.mark.parametrize("sig, group", [(signal.SIGTERM, False), (signal.SIGINT, False),
                                        (signal.SIGKILL, False), (signal.SIGINT, True)],
                         ids=["SIGTERM", "SIGINT", "SIGKILL", "Ctrl-C"])  # fmt: skip
def test_killing_the_experiment_ends_its_workers_and_a_rerun_resumes(tmp_path, text, sig, group):
    """Before, loky's workers trained on as orphans, holding their cells' locks, and the
    rerun was refused ("run directory ... is in use by another resgrad run"). And the
    resource tracker warned at exit of the semaphores the killed workers' progress bars had
    made ("There appear to be 2 leaked semaphore objects to clean up at shutdown")."""
    out = str(tmp_path / "exp")
    args = ["experiment", "warmup", *GRID, "--data", text, "--out-dir", out]
    # Ctrl-C as at a terminal: a shell's background job inherits SIGINT ignored (the
    # mutation run's pytest may be one), and Python then leaves it ignored
    p = subprocess.Popen([sys.executable, "-m", "resgrad", *args, "--seeds", "30,4", "--jobs", "2"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                         start_new_session=group)  # fmt: skip
    dyn = [os.path.join(out, "runs", f"pre-ln_L1_lr0.001_w0_s{s}", "dynamics.bin") for s in (30, 4)]
    t0 = time.monotonic()
    while not all(os.path.exists(d) for d in dyn):  # both workers are training
        assert p.poll() is None, p.communicate()
        assert time.monotonic() - t0 < 120, "the cells did not start"
        time.sleep(0.02)
    workers = psutil.Process(p.pid).children(recursive=True)
    assert len(workers) >= 2  # loky's two workers (and its resource trackers)
    if group:  # Ctrl-C at a terminal: every process of the foreground group gets SIGINT
        os.killpg(p.pid, sig)
    else:
        os.kill(p.pid, sig)
    rc = p.wait(timeout=60)
    alive = _still_running(workers, timeout=30)
    for w in alive:  # a failing test leaves no orphan behind
        w.kill()
    assert alive == [], f"workers outlived the experiment: {alive}"
    err = p.stderr.read()  # (an orphan would hold the pipe open)
    # SIGTERM is handled: the pool is torn down and the command exits 128 + 15; Ctrl-C: 130
    assert rc == {signal.SIGTERM: 143, signal.SIGINT: 130, signal.SIGKILL: -9}[sig], err
    assert "Traceback" not in err, err
    assert "leaked semaphore" not in err, err  # the workers made none
    if sig != signal.SIGKILL:  # (after a SIGKILL, loky's tracker cleans up the pool's own)
        assert "resource_tracker" not in err and "leaked" not in err, err
        if sig == signal.SIGINT:  # one line: what was kept (the disk agrees), how to resume
            resume = shlex.join(["resgrad", *args, "--seeds", "30,4", "--jobs", "2"])
            kept = (f"kept every finished cell in {out}; to resume: {resume}"
                    if os.path.exists(out) else f"nothing was kept in {out}")  # fmt: skip
            assert err == f"resgrad experiment warmup: interrupted; {kept}\n", err
        else:
            assert err == "", err
    assert not os.path.exists(os.path.join(out, "cells.csv"))  # it was cut short

    assert main([*args, "--seeds", "30,4", "--jobs", "1"]) == 0  # resumes, no lock in the way
    cells = _cells(out)
    assert [c["seed"] for c in cells] == ["30", "4"]
    assert all(c["iters"] == "300" and c["diverged"] == "False" for c in cells)


def test_claims_at_explicit_seeds(capsys):
    assert main(["claims", "scaled-init", "--depths", "2", "--seeds", "100,101,7"]) == 0
    out = capsys.readouterr().out
    assert "mean ± std over 3 seeds (100-101, 7)" in out
    (scaled, _) = claim_table("scaled-init", depths=(2,), seeds=(100, 101, 7))
    assert scaled.values == tuple(stream_growth(2, s, True) for s in (100, 101, 7))
    assert f"| scaled-init | scaled | 2 | {scaled.mean:.3g} ± {scaled.std:.2g} " in out
    assert main(["claims", "scaled-init", "--depths", "2", "--seeds", "2"]) == 0  # a count
    assert "over 2 seeds (0-1)" in capsys.readouterr().out


def test_flow_and_sweep_at_explicit_seeds(tmp_path, capsys):
    sizes = ["--heads", "2", "--seq", "4", "--batch", "2"]
    assert main(["flow", "--variant", "post-ln", "--depth", "2", "--width", "8", *sizes,
                 "--seeds", "5,9", "--format", "json"]) == 0  # fmt: skip
    got = json.loads(capsys.readouterr().out)
    want = measure(FlowConfig(variant="post-ln", depth=2, width=8, heads=2, seq=4, batch=2,
                              seeds=(5, 9)))  # fmt: skip
    assert got == [r.as_dict() for r in want] and got[0]["n_seeds"] == 2
    out = tmp_path / "s.csv"
    assert main(["sweep", "--variants", "post-ln", "--depths", "2", "--widths", "8", *sizes,
                 "--seeds", "9-10,3", "--out", str(out), "--jobs", "1"]) == 0  # fmt: skip
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert [r["seed"] for r in rows if r["layer"] == "0"] == ["9", "10", "3"]
    (at9,) = [r for r in rows if (r["seed"], r["layer"]) == ("9", "0")]
    cfg = FlowConfig(variant="post-ln", depth=2, width=8, heads=2, seq=4, batch=2, seeds=(9,))
    assert float(at9["stream_grad"]) == profile(cfg, 9).stream_grad[0]


@pytest.mark.parametrize("cmd", [["experiment", "warmup"], ["claims", "update-size"], ["flow"],
                                 ["sweep", "--out", "s.csv"]])  # fmt: skip
@pytest.mark.parametrize(
    "value, message",
    [
        ("3,1,3", "expected distinct seeds, got '3,1,3' (3 twice)"),
        ("0-2,1", "expected distinct seeds, got '0-2,1' (1 twice)"),
        ("1,-2", "expected seeds >= 0, got '-2' in '1,-2'"),
        ("-1", "expected seeds >= 0, got '-1'"),
        ("0", "expected at least one seed, got '0'"),
        ("5-3", "expected a range LOW-HIGH with LOW <= HIGH, got '5-3'"),
        ("0-100000", "expected at most 100,000 seeds, got 100,001"),
        ("1,4294967296", "expected seeds in [0, 2**32), got 4294967296"),
        ("two", "expected a seed or a range LOW-HIGH, got 'two'"),
    ],
)
def test_bad_seeds_are_one_line_exit_2(tmp_path, monkeypatch, capsys, cmd, value, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main([*cmd, "--seeds", value])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1, err
    assert f"argument --seeds: {message}" in err, err
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "args, message",
    [(["claims", "scaled-init", "--depths", "4,4"], "argument --depths: expected distinct"),
     (["claims", "scaled-init", "--depths", "0"], "argument --depths: expected a positive "
                                                  "integer, got '0'"),
     (["experiment", "warmup", "--variants", "pre-ln,pre-ln"], "argument --variants: expected "
                                                               "distinct"),
     (["experiment", "warmup", "--depths", "4,4"], "argument --depths: expected distinct"),
     (["experiment", "warmup", "--lrs", "0.001,0.0010000001"], "lrs must differ within 6 "
                                                               "significant digits"),
     (["experiment", "warmup", "--eval-iters", "10001"], "eval_iters must be at most 10000"),
     (["experiment", "warmup", "--seeds", "4294967296"], "expected at most 100,000 seeds")],
)  # fmt: skip
def test_a_grid_value_twice_or_out_of_bounds_is_one_line_exit_2(tmp_path, monkeypatch, capsys,
                                                                 args, message):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        sys.exit(main(args))
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and message in err, err
    assert os.listdir(tmp_path) == []
