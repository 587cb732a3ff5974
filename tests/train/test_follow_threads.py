"""The trainer's BLAS threads: fixed, or following the load (``train(threads=...)``).

The follower is a stand-in giving counts on a schedule, so no test needs a loaded
machine; the count each step runs on is read with threadpoolctl inside the step.
"""

import os

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

import resgrad.cli as cli
from resgrad.cli import main, train_cmds
from resgrad.formats.checkpoint import load_checkpoint
from resgrad.perf.threads import ThreadFollower
from resgrad.train import loop
from resgrad.train.config import TrainConfig
from resgrad.train.loop import train
from resgrad.train.rundir import read_metrics

TINY = dict(
    n_layer=1, n_head=2, n_embd=16, block_size=8, batch_size=4, warmup_iters=2,
    lr_decay_iters=12, lr=3e-3, eval_interval=4, eval_iters=1, shards=2, dropout=0.1,
)  # fmt: skip
TINY_FLAGS = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "8",
              "--batch-size", "4", "--eval-iters", "1", "--max-iters", "6"]  # fmt: skip


def blas_threads() -> int:
    """The loaded BLAS's thread count now."""
    return max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")


def _cfg(tmp_path, name, text_file, **kw):
    return TrainConfig(**{**TINY, "data": text_file, "out_dir": str(tmp_path / name), **kw})


@pytest.fixture
def steps(monkeypatch):
    """(BLAS threads, shard threads) of every training step, read as it runs."""
    seen, step = [], loop.train_step

    def reading(*args, **kwargs):
        seen.append((blas_threads(), kwargs["shards"].workers))
        return step(*args, **kwargs)

    monkeypatch.setattr(loop, "train_step", reading)
    return seen


class Schedule:
    """A follower giving ``counts`` after the steps in turn; the seconds it was given."""

    def __init__(self, *counts):
        self.counts, self.seconds = list(counts), []

    def __call__(self, seconds):
        self.seconds.append(seconds)
        return self.counts[len(self.seconds) - 1]


def _train(cfg, threads):
    with threadpool_limits(2):  # as the CLI sets it on an idle 2-core machine
        res = train(cfg, progress=False, log=lambda s: None, threads=threads)
        assert blas_threads() == 2  # the run's limits end with it
    return res


def _results(out_dir):
    """Everything a run computes: its steps' records (without their wall times), its
    evaluations, its final parameters and AdamW state, its dynamics' bytes."""
    recs = [{k: v for k, v in r.items() if k != "ms"} for r in read_metrics(out_dir)]
    ckpt = load_checkpoint(os.path.join(out_dir, "last.ckpt"))
    with open(os.path.join(out_dir, "dynamics.bin"), "rb") as f:
        dyn = f.read()
    return recs, ckpt.params, ckpt.optimizer, dyn


def _same(a, b):
    assert a[0] == b[0]
    for x, y in zip(a[1:3], b[1:3], strict=True):
        assert x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x)
    assert a[3] == b[3]


def test_each_step_runs_on_the_count_the_follower_gave_after_the_last(tmp_path, text_file, steps):
    follow = Schedule(2, 1, 1, 2, 1, 1, 1, 2)
    _train(_cfg(tmp_path, "run", text_file, max_iters=8), follow)
    # step 0 on the start's 2; then each on what the follower said after the one before
    assert [n for n, _ in steps] == [2, 2, 1, 1, 2, 1, 1, 1]
    assert [w for _, w in steps] == [2, 2, 1, 1, 2, 1, 1, 1]  # the shards' threads follow
    assert len(follow.seconds) == 8 and all(s > 0 for s in follow.seconds)


@pytest.mark.parametrize("shards", [1, 2])
def test_results_do_not_depend_on_the_count(tmp_path, text_file, shards):
    # the recipe's width, so that BLAS splits its products over threads (C=16 would not)
    size = dict(n_layer=2, n_embd=128, n_head=4, block_size=32, batch_size=8, shards=shards)
    fixed = _cfg(tmp_path, "fixed", text_file, max_iters=6, **size)
    _train(fixed, None)
    moved = _cfg(tmp_path, "moved", text_file, max_iters=6, **size)
    _train(moved, Schedule(1, 2, 1, 1, 2, 2))
    _same(_results(fixed.out_dir), _results(moved.out_dir))  # with the OpenBLAS tested


def test_a_count_that_does_not_change_sets_no_limit(tmp_path, text_file, steps, monkeypatch):
    limits = []

    class Recording(loop.ThreadpoolController):
        def limit(self, *, limits=None, user_api=None):
            limits.append(limits)
            return super().limit(limits=limits, user_api=user_api)

    monkeypatch.setattr(loop, "ThreadpoolController", Recording)
    fixed = _cfg(tmp_path, "fixed", text_file, max_iters=5)
    _train(fixed, None)
    same = _cfg(tmp_path, "same", text_file, max_iters=5)
    _train(same, Schedule(*[2] * 5))
    assert limits == [] and [n for n, _ in steps] == [2] * 10
    _same(_results(fixed.out_dir), _results(same.out_dir))


def test_an_int_holds_for_the_whole_run(tmp_path, text_file, steps):
    _train(_cfg(tmp_path, "run", text_file, max_iters=4), 1)
    assert steps == [(1, 1)] * 4


def test_the_start_count_comes_back_when_the_run_fails(tmp_path, text_file, steps):
    def follow(seconds):
        if steps[-1][0] == 1:
            raise RuntimeError("the reader broke")
        return 1

    cfg = _cfg(tmp_path, "run", text_file, max_iters=6)
    with threadpool_limits(2):
        with pytest.raises(RuntimeError, match="the reader broke"):
            train(cfg, progress=False, log=lambda s: None, threads=follow)
        assert blas_threads() == 2
    assert steps == [(2, 2), (1, 1)]


@pytest.mark.parametrize("bad", [0, -2, True, 1.5, "2"])
def test_a_bad_count_is_refused_by_name(tmp_path, text_file, bad):
    cfg = _cfg(tmp_path, "run", text_file, max_iters=2)
    with pytest.raises(ValueError, match=r"^threads must be None, an integer >= 1 or a callable"):
        train(cfg, progress=False, log=lambda s: None, threads=bad)
    assert not os.path.exists(cfg.out_dir)


@pytest.mark.parametrize("bad", [0, None, 1.0])
def test_a_follower_giving_a_bad_count_stops_the_run_by_name(tmp_path, text_file, bad):
    cfg = _cfg(tmp_path, "run", text_file, max_iters=2)
    with pytest.raises(ValueError, match=rf"returned {bad!r}; expected an integer >= 1$"):
        train(cfg, progress=False, log=lambda s: None, threads=lambda s: bad)


# -- resgrad train: follows the load without --threads, never with it


@pytest.fixture
def data_file(tmp_path):
    p = tmp_path / "text.txt"
    p.write_text("the residual stream carries the gradient past every block. " * 30)
    return str(p)


def test_without_threads_the_train_command_follows_the_load(
    monkeypatch, capsys, tmp_path, data_file, steps
):
    monkeypatch.setattr(cli, "load_aware_threads", lambda: 2)  # idle as it starts
    made = []

    def follower():  # the machine gets busy: each reading leaves one core
        made.append(ThreadFollower(read=lambda: 1, every=3))
        return made[-1]

    monkeypatch.setattr(train_cmds, "ThreadFollower", follower)
    args = ["train", "--out-dir", str(tmp_path / "run"), "--data", data_file, *TINY_FLAGS]
    assert main(args) == 0
    assert made[0].threads == 1 and made[0].reads == 2  # started on the CLI's 2, read at 3, 6
    assert [n for n, _ in steps] == [2, 2, 2, 1, 1, 1]


def test_with_threads_the_train_command_keeps_them(monkeypatch, capsys, tmp_path, data_file, steps):
    def never(*args, **kwargs):
        raise AssertionError("the load was followed although --threads was given")

    monkeypatch.setattr(cli, "load_aware_threads", never)
    monkeypatch.setattr(train_cmds, "ThreadFollower", never)
    args = ["train", "--out-dir", str(tmp_path / "run"), "--data", data_file, *TINY_FLAGS]
    assert main([*args, "--threads", "2"]) == 0
    assert [n for n, _ in steps] == [2] * 6
