"""A run's files read back: what a resume finds cut, damaged or swapped is said, not used
silently (resgrad.train.rundir), and said even where the caller silences the log."""

import os
import shutil

import pytest

from resgrad.formats.checkpoint import load_checkpoint
from resgrad.train.config import TrainConfig
from resgrad.train.loop import train
from resgrad.train.rundir import (
    check_kept,
    identity_difference,
    kept_schedule,
    read_metrics,
    run_fingerprint,
    run_identity,
    run_problems,
)

TINY = dict(n_layer=1, n_head=2, n_embd=16, block_size=8, batch_size=4, warmup_iters=2,
            lr_decay_iters=12, lr=3e-3, eval_interval=4, eval_iters=1)  # fmt: skip


def _cfg(tmp_path, text_file, name="run", **kw):
    return TrainConfig(**{**TINY, "max_iters": 12, "keep_every": 4, "data": text_file,
                          "out_dir": str(tmp_path / name), **kw})  # fmt: skip


@pytest.fixture
def run(tmp_path, text_file):
    cfg = _cfg(tmp_path, text_file)
    train(cfg, progress=False, log=lambda s: None)
    return cfg


def test_metrics_cut_mid_file_are_said_on_resume_with_the_steps_lost(run, capsys):
    path = os.path.join(run.out_dir, "metrics.jsonl")
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 3])  # cut mid-line: looks like a torn tail
    kept = [r["iter"] for r in read_metrics(run.out_dir) if r["kind"] == "iter"]
    assert kept and kept[-1] < 11
    said = []
    resumed = TrainConfig(**{**run.__dict__, "max_iters": 16, "resume": True})
    train(resumed, progress=False, log=lambda s: None, warn=said.append)
    lost = f"{kept[-1] + 1}..11"
    assert any(f"holds no record of steps {lost} (cut or damaged)" in s for s in said), said


def test_read_metrics_names_every_gap_and_nothing_when_whole(run):
    problems = []
    assert len(read_metrics(run.out_dir, upto=12, problems=problems)) > 0 and problems == []
    path = os.path.join(run.out_dir, "metrics.jsonl")
    lines = open(path).read().splitlines(keepends=True)
    iters = [i for i, ln in enumerate(lines) if '"kind": "iter"' in ln]
    drop = {iters[0], iters[5], iters[6]}  # steps 0, 5 and 6
    open(path, "w").writelines(ln for i, ln in enumerate(lines) if i not in drop)
    read_metrics(run.out_dir, upto=12, problems=problems)
    assert problems == ["metrics.jsonl holds no record of steps 0, 5..6 (cut or damaged)"]
    problems = []
    read_metrics(run.out_dir, upto=5, problems=problems)  # only steps before 5 are asked
    assert problems == ["metrics.jsonl holds no record of steps 0 (cut or damaged)"]


def test_damage_reaches_warn_when_the_log_is_silenced(run):
    dyn = os.path.join(run.out_dir, "dynamics.bin")
    data = open(dyn, "rb").read()
    open(dyn, "wb").write(data[: len(data) - 7])  # a record cut short
    said, logged = [], []
    resumed = TrainConfig(**{**run.__dict__, "max_iters": 16, "resume": True})
    train(resumed, progress=False, log=logged.append, warn=said.append)
    assert any("dynamics.bin" in s for s in said) and not any("dynamics.bin" in s for s in logged)


# -- a run's checkpoints against the run


def test_the_schedule_is_every_multiple_and_the_end():
    assert kept_schedule(20, 10) == [0, 10, 20]
    assert kept_schedule(25, 10) == [0, 10, 20, 25]
    assert kept_schedule(0, 10) == [0]
    assert kept_schedule(20, 0) == []


def test_a_sound_run_has_no_problems_and_each_kind_of_damage_is_named(run, tmp_path, text_file):
    schedule = kept_schedule(12, 4)
    assert run_problems(run.out_dir, schedule) == []
    d = run.out_dir
    shutil.copy(os.path.join(d, "ckpt-8.ckpt"), os.path.join(d, "ckpt-4.ckpt"))
    (p,) = run_problems(d, schedule)
    assert "ckpt-4.ckpt' is named for iteration 4 but its iteration field is 8" in p
    other = _cfg(tmp_path, text_file, "other", seed=5)
    train(other, progress=False, log=lambda s: None)
    shutil.copy(os.path.join(other.out_dir, "ckpt-4.ckpt"), os.path.join(d, "ckpt-4.ckpt"))
    (p,) = run_problems(d, schedule)
    assert "ckpt-4.ckpt' belongs to another run" in p and "seed 1337 against 5" in p
    os.unlink(os.path.join(d, "ckpt-4.ckpt"))
    (p,) = run_problems(d, schedule)
    assert p.endswith("kept no checkpoint at iteration(s) 4, which its schedule keeps")
    shutil.copy(os.path.join(d, "ckpt-8.ckpt"), os.path.join(d, "ckpt-5.ckpt"))
    assert any("ckpt-5.ckpt' is not on the run's schedule" in p for p in run_problems(d, schedule))
    with open(os.path.join(d, "ckpt-8.ckpt"), "r+b") as f:
        f.seek(200)
        f.write(b"\0" * 64)  # inside its header: its checksum no longer matches
    assert any("ckpt-8.ckpt" in p and "corrupted" in p for p in run_problems(d, schedule))
    os.unlink(os.path.join(d, "last.ckpt"))
    assert run_problems(d, schedule) == [f"{os.path.join(d, 'ckpt-0.ckpt')!r} is kept but "
                                         f"{os.path.join(d, 'last.ckpt')!r} is gone"]  # fmt: skip
    assert run_problems(str(tmp_path / "nothing"), schedule) == []  # no run yet


def test_the_identity_is_the_seed_settings_model_and_text_not_the_length(run, tmp_path, text_file):
    ckpt = load_checkpoint(os.path.join(run.out_dir, "last.ckpt"))
    me = run_identity(ckpt)
    longer = _cfg(tmp_path, text_file, "longer", max_iters=16, eval_interval=8)
    train(longer, progress=False, log=lambda s: None)
    same = run_identity(load_checkpoint(os.path.join(longer.out_dir, "ckpt-4.ckpt")))
    assert identity_difference(me, same) is None and run_fingerprint(me) == run_fingerprint(same)
    other_text = tmp_path / "other.txt"
    other_text.write_text(open(text_file).read() + " more", encoding="utf-8")
    for name, kw, said in [("lr", {"lr": 1e-3}, "lr 0.003 against 0.001"),
                           ("text", {"data": str(other_text)}, "the text's SHA-256")]:  # fmt: skip
        c = _cfg(tmp_path, text_file, name, **kw)
        train(c, progress=False, log=lambda s: None)
        theirs = run_identity(load_checkpoint(os.path.join(c.out_dir, "last.ckpt")))
        assert said in identity_difference(me, theirs)
        assert run_fingerprint(me) != run_fingerprint(theirs)
        with pytest.raises(ValueError, match="belongs to another run"):
            check_kept("x.ckpt", 12, load_checkpoint(os.path.join(c.out_dir, "last.ckpt")), me)
    check_kept("x.ckpt", 12, ckpt, me)  # its own run, its own iteration: no refusal


@pytest.mark.parametrize("name", ["metrics.jsonl", "loss.png", "best.ckpt"])
def test_a_fresh_run_never_replaces_a_file_it_did_not_write(tmp_path, text_file, name):
    out = tmp_path / "mine"
    out.mkdir()
    (out / name).write_text("my own", encoding="utf-8")
    with pytest.raises(ValueError, match=f"holds {name}, which no run wrote there"):
        train(_cfg(tmp_path, text_file, "mine"), progress=False, log=lambda s: None)
    assert [p.name for p in out.iterdir() if not p.name.startswith(".")] == [name]  # no more
    assert (out / name).read_text(encoding="utf-8") == "my own"
    (out / name).write_text("", encoding="utf-8")  # an empty file holds nothing to lose
    train(_cfg(tmp_path, text_file, "mine"), progress=False, log=lambda s: None)


def test_a_setting_newer_than_a_checkpoint_is_what_the_code_then_did(run):
    # a checkpoint written before a setting existed is of the same run as one that records
    # the setting at the value the code then used; at another value it is another run
    ckpt = load_checkpoint(os.path.join(run.out_dir, "last.ckpt"))
    me, saved = run_identity(ckpt), ckpt.config["train"]
    assert saved["activation"] == "gelu_tanh" and saved["shards"] == 2  # this run's

    def without(name):
        old = load_checkpoint(os.path.join(run.out_dir, "last.ckpt"))
        old.config = {**old.config, "train": {k: v for k, v in saved.items() if k != name}}
        return run_identity(old)

    assert identity_difference(me, without("activation")) is None  # gelu_tanh, as then
    assert identity_difference(me, without("shards")) == "shards 2 against 1"  # unsharded then
