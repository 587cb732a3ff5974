"""``keep_every``: a run keeps ckpt-<iter>.ckpt at every multiple and at the end, each the
state after exactly that many steps, through resume too; bad values refused in one line."""

import os

import numpy as np
import pytest

from resgrad.cli import main
from resgrad.formats.checkpoint import LAST, load_checkpoint
from resgrad.train.config import TrainConfig, resume_config
from resgrad.train.loop import train
from resgrad.train.rundir import kept_checkpoints, kept_name

TINY = dict(
    n_layer=2, n_head=2, n_embd=16, block_size=8, batch_size=4, warmup_iters=2,
    lr_decay_iters=12, lr=3e-3, eval_interval=3, eval_iters=1,
)  # fmt: skip


def _cfg(tmp_path, name, text_file, **kw):
    return TrainConfig(**{**TINY, "data": text_file, "out_dir": str(tmp_path / name), **kw})


def _params(path):
    return load_checkpoint(path).params


def test_kept_checkpoints_are_the_state_after_that_many_steps(tmp_path, text_file):
    run = _cfg(tmp_path, "run", text_file, max_iters=7, keep_every=2)
    train(run, progress=False, log=lambda s: None)
    kept = kept_checkpoints(run.out_dir)
    assert [it for it, _ in kept] == [0, 2, 4, 6, 7]  # every 2, and the end
    assert all(load_checkpoint(p).iteration == it for it, p in kept)
    # the end is written with last.ckpt, from the same bytes
    with open(kept[-1][1], "rb") as a, open(os.path.join(run.out_dir, LAST), "rb") as b:
        assert a.read() == b.read()
    # ckpt-4 is between evaluations (every 3): the same weights as a run stopped at 4
    short = _cfg(tmp_path, "short", text_file, max_iters=4)
    train(short, progress=False, log=lambda s: None)
    assert kept_checkpoints(short.out_dir) == []  # keep_every 0: none kept
    mid, end4 = _params(dict(kept)[4]), _params(os.path.join(short.out_dir, LAST))
    assert mid.keys() == end4.keys()
    for k in mid:
        np.testing.assert_array_equal(mid[k], end4[k])
    # and step 0 is the initialization
    first = _params(dict(kept)[0])
    assert any(not np.array_equal(first[k], mid[k]) for k in first)


def test_resume_keeps_the_same_checkpoints(tmp_path, text_file):
    whole = _cfg(tmp_path, "whole", text_file, max_iters=7, keep_every=2)
    train(whole, progress=False, log=lambda s: None)
    part = _cfg(tmp_path, "part", text_file, max_iters=3, keep_every=2)
    train(part, progress=False, log=lambda s: None)
    assert [it for it, _ in kept_checkpoints(part.out_dir)] == [0, 2, 3]
    # a killed write of a kept checkpoint left its temporary: resume removes it
    stale = os.path.join(part.out_dir, f".{kept_name(4)}.abc123.tmp")
    open(stale, "wb").close()
    logs = []
    train(resume_config(part.out_dir, max_iters=7), progress=False, log=logs.append)
    assert not os.path.exists(stale) and any("temporary" in s for s in logs)
    got = dict(kept_checkpoints(part.out_dir))
    assert sorted(got) == [0, 2, 3, 4, 6, 7]  # 3 was the end of the first call
    for it, path in kept_checkpoints(whole.out_dir):
        a, b = _params(path), _params(got[it])
        assert all(np.array_equal(a[k], b[k]) for k in a), it


def test_kept_checkpoints_lists_only_its_names_by_iteration(tmp_path):
    for name in ("ckpt-10.ckpt", "ckpt-2.ckpt", "ckpt-02.ckpt", "ckpt-x.ckpt", "last.ckpt"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "ckpt-5.ckpt").mkdir()
    assert kept_checkpoints(tmp_path) == [
        (2, str(tmp_path / "ckpt-2.ckpt")),
        (10, str(tmp_path / "ckpt-10.ckpt")),
    ]


def test_bad_keep_every_is_refused_in_one_line(tmp_path, text_file, capsys):
    with pytest.raises(ValueError, match=r"keep_every must be an integer >= 0, got -1"):
        _cfg(tmp_path, "r", text_file, keep_every=-1)
    with pytest.raises(SystemExit) as e:
        main(["train", "--keep-every", "-2", "--out-dir", str(tmp_path / "r")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--keep-every" in err and "Traceback" not in err


def test_the_flag_keeps_checkpoints_and_may_change_on_resume(tmp_path, text_file, capsys):
    out = str(tmp_path / "cli")
    flags = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "8",
             "--batch-size", "4", "--warmup-iters", "1", "--lr-decay-iters", "10",
             "--eval-iters", "1", "--eval-interval", "5", "--data", text_file,
             "--threads", "1", "--out-dir", out]  # fmt: skip
    assert main(["train", *flags, "--max-iters", "4", "--keep-every", "2"]) == 0
    assert [it for it, _ in kept_checkpoints(out)] == [0, 2, 4]
    # keep_every is no part of the trajectory: a resumed run may change it
    assert main(["train", "--out-dir", out, "--resume", "--max-iters", "6",
                 "--keep-every", "3", "--threads", "1"]) == 0  # fmt: skip
    assert [it for it, _ in kept_checkpoints(out)] == [0, 2, 4, 6]
    capsys.readouterr()


def test_a_fresh_run_is_refused_where_another_kept_checkpoints(tmp_path, text_file):
    first = _cfg(tmp_path, "run", text_file, max_iters=2, keep_every=1)
    train(first, progress=False, log=lambda s: None)
    os.unlink(os.path.join(first.out_dir, LAST))  # last.ckpt gone, ckpt-<iter>.ckpt left
    with pytest.raises(ValueError, match=r"already holds a run \(ckpt-0.ckpt\); pass --resume"):
        train(first, progress=False, log=lambda s: None)
