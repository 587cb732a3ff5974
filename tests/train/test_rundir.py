"""A run's directory: reading its metrics back (resgrad.train.rundir)."""

import json
import os

from resgrad.train import rundir
from resgrad.train.rundir import read_metrics


def test_read_metrics_skips_a_torn_line_and_cuts_at_the_checkpoint(tmp_path):
    ev = {"train_loss": 2.0, "val_loss": 2.1}
    lines = [
        {"kind": "eval", "iter": 0, **ev},
        {"kind": "iter", "iter": 0, "loss": 2.5},
        {"kind": "iter", "iter": 1, "loss": 2.4},
        {"kind": "eval", "iter": 2, **ev},
        {"kind": "iter", "iter": 2, "loss": 2.3},
    ]
    text = "".join(json.dumps(r) + "\n" for r in lines) + '{"kind": "iter", "it'  # killed
    (tmp_path / "metrics.jsonl").write_text(text, encoding="utf-8")
    problems = []
    assert read_metrics(tmp_path, problems=problems) == lines
    assert problems == []  # a torn last line is what a kill leaves: not a problem
    assert read_metrics(tmp_path, upto=2) == lines[:4]  # steps before 2, evals up to 2


def test_read_metrics_skips_and_names_foreign_and_damaged_lines(tmp_path):
    good = {"kind": "iter", "iter": 0, "loss": 2.5}
    bad = [
        {"kind": "note"},
        {"kind": "iter", "iter": "1", "loss": 1.0},
        {"kind": "eval", "iter": 1},
    ]
    text = "".join(json.dumps(r) + "\n" for r in [good, *bad]) + "garbage\n"
    (tmp_path / "metrics.jsonl").write_text(text, encoding="utf-8")
    problems = []
    assert read_metrics(tmp_path, upto=5, problems=problems) == [good]
    assert [p.split(" of ")[0] for p in problems] == ["line 2", "line 3", "line 4", "line 5",
                                                      "metrics.jsonl holds no record"]
    assert problems[-1].endswith("steps 1..4 (cut or damaged)")  # the step the damage took
    problems = []
    assert read_metrics(tmp_path / "nowhere", problems=problems) == []
    assert problems == ["metrics.jsonl is missing"]


def test_holding_out_dir_removes_a_killed_writes_temporaries_and_says_so(tmp_path):
    from types import SimpleNamespace

    from resgrad.train.rundir import holding_out_dir

    out = tmp_path / "run"
    out.mkdir()
    stale, other = out / ".metrics.jsonl.abcd1234.tmp", out / ".notes.txt.abcd1234.tmp"
    stale.write_text("half")
    other.write_text("not ours")
    said = []

    @holding_out_dir("metrics.jsonl")
    def run(cfg, log=None):
        return sorted(os.listdir(cfg.out_dir))

    left = run(SimpleNamespace(out_dir=str(out), data=None), log=said.append)
    assert stale.name not in left and other.name in left
    assert said == [f"removed 1 temporary file(s) a killed run left in {str(out)!r}"]


def test_kept_checkpoints_come_in_iteration_order_not_name_order(tmp_path):
    for name in ("ckpt-10.ckpt", "ckpt-5.ckpt", "ckpt-100.ckpt", "ckpt-05.ckpt", "last.ckpt",
                 ".ckpt-20.ckpt.x1.tmp"):  # fmt: skip
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "ckpt-7.ckpt").mkdir()  # a directory is no checkpoint
    got = rundir.kept_checkpoints(tmp_path)
    assert got == [(i, str(tmp_path / f"ckpt-{i}.ckpt")) for i in (5, 10, 100)]
