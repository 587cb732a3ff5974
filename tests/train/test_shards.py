"""A batch as shards on threads equals the whole batch: loss, gradients, stream norms, RMS."""

import os

import numpy as np
import pytest

from resgrad.formats.checkpoint import load_checkpoint, save_checkpoint
from resgrad.nn.model import GPT, GPTConfig
from resgrad.train.config import TrainConfig, resume_config
from resgrad.train.dynamics import rms
from resgrad.train.loop import train
from resgrad.train.shards import Shards, shard_rows

CFG = GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16)


def _batch(B, T=8, V=11, seed=0):
    ids = np.random.default_rng(seed).integers(0, V, size=(B, T + 1))  # (B, T+1)
    return ids[:, :-1], ids[:, 1:]


def _whole(model, x, y):
    """The plain pass, as train_step did before shards: one forward, one backward."""
    _, loss, cache = model.forward(x, y, train=True)
    grads, dxs = model.backward_stream(cache)
    return loss, grads, [float(np.linalg.norm(d)) for d in dxs], rms(cache.xs[1:])


@pytest.mark.parametrize("variant", ["pre-ln", "post-ln", "rezero"])
@pytest.mark.parametrize("n", [2, 3, 5])
def test_shards_equal_the_whole_batch_in_float64(variant, n):
    # B = 5 splits unevenly (2 + 3, 1 + 2 + 2): each shard must carry its own share n_s / N
    model = GPT(GPTConfig(**{**CFG.__dict__, "variant": variant}), seed=1, dtype=np.float64)
    x, y = _batch(5)
    loss, grads, stream, act = _whole(model, x, y)
    with Shards(n, threads=2) as shards:
        p = shards.forward_backward(model, x, y)
    assert p.loss == pytest.approx(loss, rel=1e-14)
    assert list(p.grads) == list(grads)
    for k, g in grads.items():
        err = np.abs(p.grads[k] - g).max() / max(np.abs(g).max(), 1e-300)
        assert err < 1e-12, (k, err)
    np.testing.assert_allclose(p.stream_norms, stream, rtol=1e-13)
    np.testing.assert_allclose(p.act_rms, act, rtol=1e-13)
    with Shards(n, threads=2) as shards:  # evaluation: the forward alone
        assert shards.loss(model, x, y) == pytest.approx(model.forward(x, y)[1], rel=1e-14)


def test_one_shard_is_the_plain_pass_bit_for_bit():
    model = GPT(CFG, seed=2, dtype=np.float32)
    x, y = _batch(4)
    loss, grads, stream, act = _whole(model, x, y)
    p = Shards(1).forward_backward(model, x, y)
    assert p.loss == loss and p.stream_norms == stream and p.act_rms == act
    assert Shards(1).loss(model, x, y) == model.forward(x, y)[1]
    assert all(np.array_equal(p.grads[k], g) for k, g in grads.items())


def test_without_act_rms_the_pass_skips_it_and_nothing_else_changes():
    model = GPT(CFG, seed=2, dtype=np.float32)
    x, y = _batch(4)
    with Shards(2, threads=2) as shards:
        full = shards.forward_backward(model, x, y)
        bare = shards.forward_backward(model, x, y, act_rms=False)
    assert len(full.act_rms) == CFG.n_layer and bare.act_rms == []
    assert (bare.loss, bare.stream_norms) == (full.loss, full.stream_norms)
    assert all(np.array_equal(bare.grads[k], g) for k, g in full.grads.items())


def _bytes(p):
    return (p.loss, p.stream_norms, p.act_rms, [a.tobytes() for a in p.grads.values()])


def test_the_result_depends_on_the_shards_never_on_the_threads():
    model = GPT(CFG, seed=3, dtype=np.float32)
    x, y = _batch(6)
    with Shards(3, threads=1) as one, Shards(3, threads=3) as three:
        a, b, c = (s.forward_backward(model, x, y) for s in (one, three, three))
        assert one.loss(model, x, y) == three.loss(model, x, y)
    assert one.workers == 1 and three.workers == 3
    assert _bytes(a) == _bytes(b) == _bytes(c)  # the same bytes, however many threads
    with Shards(2) as two:
        d = two.forward_backward(model, x, y)
    assert _bytes(d) != _bytes(a)  # not vacuous: another shard count rounds differently


def test_dropout_masks_come_from_per_shard_generators_seeded_in_order():
    model = GPT(GPTConfig(**{**CFG.__dict__, "dropout": 0.2}), seed=4, dtype=np.float32)
    x, y = _batch(4)
    runs = []
    for threads in (1, 2):
        rng = np.random.default_rng(7)
        with Shards(2, threads=threads) as shards:
            p = shards.forward_backward(model, x, y, rng)
        runs.append((_bytes(p), rng.bit_generator.state["state"]["state"]))
    assert runs[0] == runs[1]
    # the run's generator moved on by exactly the two shard seeds
    rng = np.random.default_rng(7)
    rng.integers(2**63, size=2)
    assert runs[0][1] == rng.bit_generator.state["state"]["state"]


def test_shard_rows_cover_the_batch_in_order():
    for B in range(1, 9):
        for n in range(1, 6):
            rows = shard_rows(B, n)
            assert len(rows) == min(B, n)
            assert [i for r in rows for i in range(B)[r]] == list(range(B))
            sizes = [r.stop - r.start for r in rows]
            assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_a_bad_shard_count_is_named(bad):
    with pytest.raises(ValueError, match=rf"shards must be an integer >= 1, got {bad!r}"):
        Shards(bad)
    with pytest.raises(ValueError, match="shards must be an integer >= 1"):
        TrainConfig(shards=bad)


def _tiny(tmp_path, **kw):
    text = tmp_path / "t.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    base = dict(n_layer=1, n_head=2, n_embd=8, block_size=8, batch_size=4, max_iters=4,
                eval_interval=2, eval_iters=1, warmup_iters=0, lr_decay_iters=4)  # fmt: skip
    return TrainConfig(**{**base, **kw}, data=str(text), out_dir=str(tmp_path / "run"))


def test_a_run_recorded_before_shards_resumes_unsharded(tmp_path):
    cfg = _tiny(tmp_path, shards=1)
    train(cfg, progress=False, log=lambda s: None)
    last = os.path.join(cfg.out_dir, "last.ckpt")
    ckpt = load_checkpoint(last)
    del ckpt.config["train"]["shards"]  # as written by a version without the setting
    save_checkpoint(last, ckpt)
    assert resume_config(cfg.out_dir).shards == 1  # it was trained unsharded
    with pytest.raises(ValueError, match="shards is 2 but the checkpoint was trained with 1"):
        train(TrainConfig(**{**cfg.__dict__, "shards": 2, "resume": True}), progress=False)


def test_evaluation_in_shards_is_the_mean_loss_of_the_same_batches(tmp_path):
    from resgrad.train.data import load_corpus
    from resgrad.train.loop import estimate_loss

    cfg = _tiny(tmp_path, eval_iters=3, batch_size=5)
    corpus = load_corpus(cfg.data, cfg.block_size)
    model = GPT(cfg.gpt_config(corpus.tokenizer.vocab_size), seed=0, dtype=np.float64)
    plain = estimate_loss(model, corpus, cfg)
    with Shards(2) as shards:
        sharded = estimate_loss(model, corpus, cfg, shards)
    for split in ("train", "val"):
        assert sharded[split] == pytest.approx(plain[split], rel=1e-14), split
