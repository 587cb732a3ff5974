"""``run_checkpoint_paths``: the split at every checkpoint a run kept equals the split of each
checkpoint on its own, on the same windows; a run that kept none is refused in one line."""

import shutil

import numpy as np
import pytest

from resgrad.lab import paths
from resgrad.train.config import TrainConfig
from resgrad.train.data import read_text
from resgrad.train.loop import train
from resgrad.train.rundir import kept_checkpoints
from resgrad.train.sample import load_model

TINY = dict(
    n_layer=2, n_head=2, n_embd=16, block_size=16, batch_size=4, warmup_iters=1,
    lr_decay_iters=8, lr=1e-2, eval_interval=4, eval_iters=1, max_iters=8,
)  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("paths_training")
    text = d / "data.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40, encoding="utf-8")
    cfg = TrainConfig(**TINY, keep_every=4, data=str(text), out_dir=str(d / "run"))
    train(cfg, progress=False, log=lambda s: None)
    return cfg


def test_every_checkpoint_equals_each_checkpoint_alone(run):
    text = read_text(run.data)
    res = paths.run_checkpoint_paths(run.out_dir, text, seq=12, batch=3, seeds=(0, 5))
    assert [r.iteration for r in res] == [0, 4, 8]
    for r, (it, path) in zip(res, kept_checkpoints(run.out_dir)):
        assert (r.iteration, r.path) == (it, path)
        model, tok, _ = load_model(path)
        alone = paths.model_splits(model, tok.encode(text), 12, 3, (0, 5))
        assert len(r.splits) == 2
        for a, b in zip(r.splits, alone):
            np.testing.assert_allclose(a.norms, b.norms, rtol=1e-12, atol=0)
            np.testing.assert_allclose(a.dots, b.dots, rtol=1e-12, atol=1e-300)
            assert a.sum_errors.max() < 1e-12
        rows = paths.path_table(alone)
        assert [x.share_norm for x in r.rows] == pytest.approx([x.share_norm for x in rows])
        assert r.range90 == paths.effective_range([x.share_norm for x in rows])
        assert r.mean_k == pytest.approx(sum(x.k * x.share_norm for x in rows))
    # the weights moved, so the steps differ: the windows are the same, the numbers are not
    assert not np.allclose(res[0].splits[0].norms, res[-1].splits[0].norms)


def test_the_windows_are_the_same_at_every_step(run, monkeypatch):
    drawn = []
    real = paths.text_windows

    def spy(ids, seq, batch, seed):
        w = real(ids, seq, batch, seed)
        drawn.append(w)
        return w

    monkeypatch.setattr(paths, "text_windows", spy)
    paths.run_checkpoint_paths(run.out_dir, read_text(run.data), seq=8, batch=2, seeds=(3,))
    assert len(drawn) == 3
    assert all(np.array_equal(drawn[0], w) for w in drawn[1:])


def test_a_run_without_kept_checkpoints_is_refused(run, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(f"{run.out_dir}/last.ckpt", bare / "last.ckpt")
    with pytest.raises(ValueError, match=r"keeps no checkpoint per step .*--keep-every N$"):
        paths.run_checkpoint_paths(str(bare))
    with pytest.raises(NotADirectoryError, match="not a directory"):
        paths.run_checkpoint_paths(f"{run.out_dir}/last.ckpt")


def test_a_checkpoint_of_another_vocabulary_is_refused(run, tmp_path):
    other_text = tmp_path / "other.txt"
    other_text.write_text("0123456789+-*/ " * 60, encoding="utf-8")
    other = TrainConfig(**{**TINY, "max_iters": 0}, keep_every=1, data=str(other_text),
                        out_dir=str(tmp_path / "other"))  # fmt: skip
    train(other, progress=False, log=lambda s: None)
    mixed = tmp_path / "mixed"
    shutil.copytree(run.out_dir, mixed)
    shutil.copy(f"{other.out_dir}/ckpt-0.ckpt", mixed / "ckpt-99.ckpt")
    with pytest.raises(ValueError, match=r"ckpt-99.ckpt' has another vocabulary"):
        paths.run_checkpoint_paths(str(mixed), read_text(run.data), seq=8, batch=2)


def test_fits_sees_every_checkpoint_before_its_split(run):
    seen = []
    paths.run_checkpoint_paths(run.out_dir, read_text(run.data), seq=8, batch=2,
                               fits=seen.append)  # fmt: skip
    assert [(c.n_layer, c.n_embd) for c in seen] == [(2, 16)] * 3

    def refuse(cfg):
        raise MemoryError(f"L={cfg.n_layer} will not fit")

    with pytest.raises(MemoryError, match="L=2 will not fit"):
        paths.run_checkpoint_paths(run.out_dir, read_text(run.data), seq=8, batch=2, fits=refuse)
