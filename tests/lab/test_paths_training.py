"""``run_checkpoint_paths``: the split at every checkpoint a run kept equals the split of each
checkpoint on its own, on the same windows; a run that kept none is refused in one line."""

import math
import shutil

import numpy as np
import pytest

from resgrad.lab import study
from resgrad.lab.paths import across_runs
from resgrad.lab.paths import exact as paths
from resgrad.lab.paths import study as pathruns
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
    res = pathruns.run_checkpoint_paths(run.out_dir, text, seq=12, batch=3, seeds=(0, 5))
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
    pathruns.run_checkpoint_paths(run.out_dir, read_text(run.data), seq=8, batch=2, seeds=(3,))
    assert len(drawn) == 3
    assert all(np.array_equal(drawn[0], w) for w in drawn[1:])


def test_a_run_without_kept_checkpoints_is_refused(run, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(f"{run.out_dir}/last.ckpt", bare / "last.ckpt")
    with pytest.raises(ValueError, match=r"keeps no checkpoint per step .*--keep-every N$"):
        pathruns.run_checkpoint_paths(str(bare))
    with pytest.raises(NotADirectoryError, match="not a directory"):
        pathruns.run_checkpoint_paths(f"{run.out_dir}/last.ckpt")


def test_a_checkpoint_of_another_vocabulary_is_refused(run, tmp_path):
    other_text = tmp_path / "other.txt"
    other_text.write_text("0123456789+-*/ " * 60, encoding="utf-8")
    other = TrainConfig(**{**TINY, "max_iters": 0}, keep_every=1, data=str(other_text),
                        out_dir=str(tmp_path / "other"))  # fmt: skip
    train(other, progress=False, log=lambda s: None)
    mixed = tmp_path / "mixed"
    shutil.copytree(run.out_dir, mixed)
    shutil.copy(f"{other.out_dir}/ckpt-0.ckpt", mixed / "ckpt-99.ckpt")
    with pytest.raises(ValueError, match=r"ckpt-99.ckpt' has vocabulary 15 characters "
                       r"' \*\+-/0123456789', checkpoint '.*ckpt-0.ckpt' has 28 characters "
                       r"' \.abcdefghijklmnopqrstuvwxyz': not one run$"):  # fmt: skip
        pathruns.run_checkpoint_paths(str(mixed), read_text(run.data), seq=8, batch=2)


def test_fits_sees_every_checkpoint_before_its_split(run):
    from resgrad.lab.study import every_checkpoint

    events = []

    class Spy(pathruns.PathsStudy):
        def fits(self, cfg):
            events.append(("fits", cfg.n_layer, cfg.n_embd))
            super().fits(cfg)

        def run(self, model, ids, name="", tick=None):
            events.append(("run",))
            return super().run(model, ids, name, tick)

    every_checkpoint(Spy(seq=8, batch=2, seeds=(0,)), [run.out_dir], read_text(run.data))
    # the run's first checkpoint before anything, then each checkpoint before its split
    assert events == [("fits", 2, 16)] + [("fits", 2, 16), ("run",)] * 3

    class Refuse(pathruns.PathsStudy):
        def fits(self, cfg):
            raise MemoryError(f"L={cfg.n_layer} will not fit")

        def run(self, model, ids, name="", tick=None):
            raise AssertionError("a split ran")

    with pytest.raises(MemoryError, match="L=2 will not fit"):
        every_checkpoint(Refuse(seq=8, batch=2), [run.out_dir], read_text(run.data))


# ----------------------------------------------------------------- several runs


def _info(**kw):
    base = dict(scheme="pre-ln", depth=2, width=16, heads=2, vocabulary="3 characters 'abc'",
                tokens="100 tokens, sha256 0123456789ab")  # fmt: skip
    return study.RunModel(**{**base, **kw})


def _kept(run, shares, model=None):
    """Hand-made CheckpointPaths of ``run``: iteration -> (k = 0 share, k = 1 share), n = 1."""
    out = []
    for it, (s0, s1) in sorted(shares.items()):
        # the projections and norms are other numbers: only the shares of the norm count
        rows = [paths.PathRow(0, 1, s0, 0.0, 0.5, 0.0, 9.0, 0.0),
                paths.PathRow(1, 1, s1, 0.0, 0.5, 0.0, 9.0, 0.0)]  # fmt: skip
        rng = (0, 0) if s0 >= 0.9 else (1, 1) if s1 >= 0.9 else (0, 1)
        out.append(pathruns.CheckpointPaths(it, f"{run}/ckpt-{it}.ckpt", [], rows, rng,
                                            model or _info()))  # fmt: skip
    return out


def test_across_runs_compares_each_runs_own_checkpoint_of_the_iterations_all_kept():
    """Runs that kept different iterations: only those every run kept, each run's own."""
    a = _kept("a", {0: (0.2, 0.8), 3: (0.3, 0.7), 6: (0.5, 0.5)})
    b = _kept("b", {0: (0.4, 0.6), 6: (0.1, 0.9), 9: (0.7, 0.3)})
    c = _kept("c", {0: (0.9, 0.1), 6: (0.3, 0.7)})
    rows = across_runs([a, b, c])
    assert [r.iteration for r in rows] == [0, 6] and all(r.runs == 3 for r in rows)
    r0, r6 = rows
    # mean and std (ddof=1) of (0.2, 0.4, 0.9) and of (0.5, 0.1, 0.3), by hand
    assert r0.share0 == pytest.approx(0.5) and r6.share0 == pytest.approx(0.3)
    assert r0.share0_std == pytest.approx(math.sqrt((0.09 + 0.01 + 0.16) / 2), rel=1e-12)
    assert r6.share0_std == pytest.approx(math.sqrt((0.04 + 0.04 + 0.0) / 2), rel=1e-12)
    # mean k = the k = 1 share: (0.5, 0.9, 0.7) at iteration 6
    assert r6.mean_k == pytest.approx(0.7) and r6.mean_k_std == pytest.approx(0.2, rel=1e-12)
    assert r0.ranges == ((0, 1), (0, 1), (0, 0)) and r6.ranges == ((0, 1), (1, 1), (0, 1))
    (one,) = across_runs([_kept("a", {6: (0.5, 0.5)})])
    assert (one.runs, one.share0, one.share0_std, one.mean_k_std) == (1, 0.5, 0.0, 0.0)
    with pytest.raises(ValueError, match="kept no iteration in common"):
        across_runs([_kept("a", {3: (0.5, 0.5)}), _kept("b", {6: (0.5, 0.5)})])


@pytest.mark.parametrize("field, value", [
    ("scheme", "post-ln"), ("depth", 3), ("width", 48), ("heads", 4),
    ("vocabulary", "3 characters 'xyz'"), ("tokens", "100 tokens, sha256 ba9876543210"),
])  # fmt: skip
def test_runs_that_differ_in_any_field_are_refused_naming_the_run_the_field_and_both_values(
    field, value
):
    a, b = _kept("runs/a", {0: (0.5, 0.5)}), _kept("runs/b", {0: (0.5, 0.5)})
    c = _kept("runs/c", {0: (0.5, 0.5)}, _info(**{field: value}))
    old = getattr(_info(), field)
    with pytest.raises(ValueError) as e:
        across_runs([a, b, c])
    assert str(e.value) == (
        f"run 'runs/c' has {study.runs.FIELD_NAMES[field]} {value}, run 'runs/a' "
        f"has {old}: only runs of one model on one text are compared"
    )
    assert len(across_runs([a, b])) == 1


@pytest.fixture(scope="module")
def unlike(run, tmp_path_factory):
    """Runs of one checkpoint each: like ``run`` but for one thing: the scheme, the width,
    or the text (so the vocabulary); and one just like it but for its seed (another run of
    the same model: the same seed too would be the same run)."""
    d = tmp_path_factory.mktemp("paths_unlike")
    other_text = d / "digits.txt"
    other_text.write_text("0123456789+-*/ " * 60, encoding="utf-8")
    out = {}
    for name, kw in [("same", {"seed": 7}), ("post-ln", {"variant": "post-ln"}),
                     ("wide", {"n_embd": 32}), ("heads", {"n_head": 4}),
                     ("digits", {"data": str(other_text)})]:  # fmt: skip
        cfg = TrainConfig(**{**TINY, "max_iters": 0, "data": run.data, **kw}, keep_every=1,
                          out_dir=str(d / name))  # fmt: skip
        train(cfg, progress=False, log=lambda s: None)
        out[name] = cfg.out_dir
    return out


@pytest.mark.parametrize("name, message", [
    ("post-ln", "has scheme post-ln, run '{run}' has pre-ln"),
    ("wide", "has width (n_embd) 32, run '{run}' has 16"),
    ("heads", "has heads (n_head) 4, run '{run}' has 2"),
    ("digits", "has vocabulary 15 characters ' *+-/0123456789', run '{run}' has 28 characters"),
])  # fmt: skip
def test_plan_runs_refuses_unlike_runs_before_any_split(run, unlike, monkeypatch, name, message):
    def boom(*a, **k):
        raise AssertionError("split before the runs were compared")

    monkeypatch.setattr(pathruns, "model_splits", boom)
    text = read_text(run.data)
    plans = study.plan_runs([run.out_dir, unlike["same"]], text)
    assert [len(p.kept) for p in plans] == [3, 1] and plans[0].model == plans[1].model
    assert plans[0].cfg.n_embd == 16 and plans[0].kept[0][0] == 0
    with pytest.raises(ValueError) as e:
        study.plan_runs([run.out_dir, unlike["same"], unlike[name]], text)
    assert str(e.value).startswith(f"run '{unlike[name]}' " + message.format(run=run.out_dir))


def test_a_run_whose_checkpoints_differ_in_shape_is_refused(run, unlike, tmp_path):
    mixed = tmp_path / "mixed"
    shutil.copytree(run.out_dir, mixed)
    shutil.copy(f"{unlike['wide']}/ckpt-0.ckpt", mixed / "ckpt-99.ckpt")
    with pytest.raises(ValueError, match=r"ckpt-99.ckpt' has width \(n_embd\) 32, checkpoint "
                                         r"'.*ckpt-0.ckpt' has 16: not one run$"):  # fmt: skip
        pathruns.run_checkpoint_paths(str(mixed), read_text(run.data), seq=8, batch=2)


def test_a_run_model_names_its_text_tokens_and_vocabulary(run):
    res = pathruns.run_checkpoint_paths(run.out_dir, read_text(run.data), seq=8, batch=2)
    m = res[0].model
    assert all(r.model == m for r in res)
    assert (m.scheme, m.depth, m.width, m.heads) == ("pre-ln", 2, 16, 2)
    assert m.vocabulary == "28 characters ' .abcdefghijklmnopqrstuvwxyz'"
    model, tok, _ = load_model(res[0].path)
    n = len(tok.encode(read_text(run.data)))
    assert m.tokens.startswith(f"{n:,} tokens, sha256 ")
    text = read_text(run.data)
    other = pathruns.run_checkpoint_paths(run.out_dir, text[1:] + text[0], seq=8, batch=2)
    assert other[0].model.tokens != m.tokens  # another text of as many tokens, other ids
    assert other[0].model._replace(tokens=m.tokens) == m


def test_a_vocabulary_is_told_apart_by_its_tokens_not_only_its_size():
    from types import SimpleNamespace

    from resgrad.nn.model import GPTConfig

    cfg = GPTConfig(vocab_size=3, block_size=8, n_layer=1, n_head=1, n_embd=4)
    ids = np.arange(5)

    def vocab(v, tokenizer=None):
        return study.run_model(cfg, SimpleNamespace(vocab=v, tokenizer=tokenizer), ids).vocabulary

    assert vocab("abc") == "3 characters 'abc'" and vocab("abd") != vocab("abc")
    long = "".join(chr(c) for c in range(50, 100))  # 50 characters: named by their hash
    assert vocab(long).startswith("50 characters (sha256 ") and vocab(long) != vocab(long[::-1])
    bpe = {"kind": "bpe", "json": "{...}"}
    assert vocab("", bpe).startswith("bpe of 3 tokens (sha256 ")
    assert vocab("", bpe) != vocab("", {**bpe, "json": "{..}"})
