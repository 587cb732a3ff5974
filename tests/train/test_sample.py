import dataclasses

import numpy as np
import pytest

from resgrad.formats.checkpoint import Checkpoint, save_checkpoint
from resgrad.nn import kernels
from resgrad.nn.blocks import VARIANTS
from resgrad.nn.layers import attention_forward
from resgrad.nn.model import GPT, GPTConfig
from resgrad.train.sample import (
    KVCache,
    attention_step,
    forward_step,
    generate,
    load_model,
    sample_text,
    sample_token,
)


def _model(variant="pre-ln", dtype=np.float64, block_size=8, seed=1, *, n_embd=16, n_head=2,
           **kw):  # fmt: skip
    """A 2-block GPT of vocabulary 11, its 1-D parameters moved off their init (test_decode too)."""
    cfg = GPTConfig(vocab_size=11, block_size=block_size, n_layer=2, n_head=n_head,
                    n_embd=n_embd, variant=variant, **kw)  # fmt: skip
    m = GPT(cfg, seed=seed, dtype=dtype)
    rng = np.random.default_rng(seed)
    for v in m.params.values():  # perturb biases, gains and rezero's alpha off their init
        if v.ndim == 1:
            v += rng.standard_normal(v.shape).astype(dtype) * 0.3
    return m


@pytest.mark.parametrize("variant", VARIANTS)
def test_cached_logits_equal_full_recomputation_at_every_position(variant):
    m = _model(variant)
    start = np.array([[1, 2, 3], [4, 5, 6]])
    logits = []
    out = generate(m, start, 14, np.random.default_rng(0), logits_out=logits)  # crosses block 8
    assert out.shape == (2, 17) and np.array_equal(out[:, :3], start)
    assert len(logits) == 14
    for n, got in enumerate(logits):
        p = 3 + n  # tokens seen before drawing token p
        context = out[:, max(0, p - 8) : p]  # the last block_size of them
        full, _, _ = m.forward(context)  # (B, T, V)
        np.testing.assert_allclose(got, full[:, -1], rtol=0, atol=1e-12)


def test_prefill_logits_equal_forward_at_every_position():
    m = _model()
    idx = np.random.default_rng(2).integers(0, 11, (3, 8))
    cache = KVCache.empty(m.cfg, 3, np.float64)
    a = forward_step(m, idx[:, :5], cache)  # (3, 5, V) five positions in one call
    b = forward_step(m, idx[:, 5:], cache)  # (3, 3, V) three more on the cache
    full, _, _ = m.forward(idx)
    np.testing.assert_allclose(np.concatenate([a, b], axis=1), full, rtol=0, atol=1e-12)


def test_attention_step_matches_attention_forward_one_token_at_a_time():
    rng = np.random.default_rng(0)
    B, T, C, H = 2, 6, 8, 2
    x = rng.standard_normal((B, T, C))
    w = [rng.standard_normal(s) * 0.3 for s in [(C, 3 * C), (3 * C,), (C, C), (C,)]]
    ref, _ = attention_forward(x, *w, H)
    k = np.zeros((B, H, T, C // H))
    v = np.zeros((B, H, T, C // H))
    steps = [attention_step(x[:, t : t + 1], *w, H, k, v, t) for t in range(T)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), ref, rtol=0, atol=1e-12)


def test_a_cached_step_sees_only_one_query_row(monkeypatch):
    # linear cost: the new token's attention is one row of S scores, not a (S, S) square;
    # in the reference path (the decode step's kernel has no softmax call to watch)
    monkeypatch.setattr(kernels, "ENABLED", False)
    m = _model()
    cache = KVCache.empty(m.cfg, 1, np.float64)
    forward_step(m, np.array([[1, 2, 3, 4]]), cache)
    seen = []
    import resgrad.train.sample as s

    real = s.softmax
    s.softmax = lambda a, axis=-1: (seen.append(a.shape), real(a, axis))[1]
    try:
        forward_step(m, np.array([[5]]), cache)
    finally:
        s.softmax = real
    assert seen == [(1, 2, 1, 5)] * 2  # per layer: (B, H, 1 query, 5 keys)


def test_float32_cache_agrees_with_forward():
    m = _model(dtype=np.float32)
    logits = []
    out = generate(m, np.array([[0]]), 10, np.random.default_rng(1), logits_out=logits)
    for n, got in enumerate(logits):
        context = out[:, max(0, n + 1 - 8) : n + 1]
        np.testing.assert_allclose(got, m.forward(context)[0][:, -1], atol=2e-5)


def test_sampling_is_seeded_and_respects_top_k():
    logits = np.log(np.array([[0.1, 0.2, 0.3, 0.4]] * 2000))  # (2000, 4)
    a = sample_token(logits, np.random.default_rng(5))
    assert np.array_equal(a, sample_token(logits, np.random.default_rng(5)))
    freq = np.bincount(a, minlength=4) / len(a)
    np.testing.assert_allclose(freq, [0.1, 0.2, 0.3, 0.4], atol=0.04)
    top2 = sample_token(logits, np.random.default_rng(5), top_k=2)
    assert set(top2.tolist()) == {2, 3}
    assert set(sample_token(logits, np.random.default_rng(5), top_k=1).tolist()) == {3}
    cold = sample_token(logits, np.random.default_rng(5), temperature=0.05)
    assert (cold == 3).mean() > 0.99
    with np.errstate(all="raise"):  # so small that logits / T overflow: greedy, no warning
        frozen = sample_token(logits, np.random.default_rng(5), temperature=1e-320)
    assert (frozen == 3).all()
    with pytest.raises(ValueError, match="temperature"):
        sample_token(logits, np.random.default_rng(0), temperature=0.0)
    with pytest.raises(ValueError, match="top_k"):
        sample_token(logits, np.random.default_rng(0), top_k=0)


def _saved(tmp_path, vocab="abcdefghijk", dtype=np.float32):
    m = _model(dtype=dtype)
    import dataclasses

    ckpt = Checkpoint(
        params=m.params, optimizer={}, iteration=0, vocab=vocab,
        config={"model": dataclasses.asdict(m.cfg), "train": {}},
    )  # fmt: skip
    save_checkpoint(tmp_path / "last.ckpt", ckpt)
    return m


def test_sample_text_from_a_checkpoint(tmp_path):
    m = _saved(tmp_path)
    text = sample_text(tmp_path, "abc", 20, temperature=1.0, top_k=5, seed=3)
    assert text.startswith("abc") and len(text) == 23
    assert set(text) <= set("abcdefghijk")
    assert text == sample_text(tmp_path, "abc", 20, temperature=1.0, top_k=5, seed=3)
    loaded, tok, _ = load_model(tmp_path)
    assert tok.chars == "abcdefghijk"
    assert all(np.array_equal(loaded.params[k], m.params[k]) for k in m.params)


def test_start_text_outside_the_vocabulary_is_a_clear_error(tmp_path):
    _saved(tmp_path)
    with pytest.raises(ValueError, match=r"start text: .*'z'.*first at position 2"):
        sample_text(tmp_path, "abz", 5)
    with pytest.raises(ValueError, match="empty"):
        sample_text(tmp_path, "", 5)
    with pytest.raises(FileNotFoundError, match="best.ckpt"):
        sample_text(tmp_path, "a", 5, best=True)


def test_checkpoint_whose_vocabulary_does_not_fit_the_model_is_refused(tmp_path):
    _saved(tmp_path, vocab="abc")
    with pytest.raises(ValueError, match="vocabulary of 3"):
        load_model(tmp_path)


def test_the_cached_sampler_uses_the_models_activation():
    """The KV-cache path has its own MLP call: it must run the exact GELU of a gelu-erf model."""
    m = _model()
    erf = GPT.from_params(dataclasses.replace(m.cfg, activation="gelu-erf"), m.params)
    idx = np.random.default_rng(4).integers(0, 11, (2, 6))
    got = forward_step(erf, idx, KVCache.empty(erf.cfg, 2, np.float64))  # (2, 6, V)
    np.testing.assert_allclose(got, erf.forward(idx)[0], rtol=0, atol=1e-12)
    assert np.abs(got - m.forward(idx)[0]).max() > 1e-8  # the tanh model is another function


def test_a_checkpoint_round_trips_the_activation_and_an_old_one_is_tanh(tmp_path):
    m = _model(dtype=np.float32)
    erf = GPT.from_params(dataclasses.replace(m.cfg, activation="gelu-erf"), m.params)
    for d, model_cfg in (("new", dataclasses.asdict(erf.cfg)),
                         ("old", {k: v for k, v in dataclasses.asdict(erf.cfg).items()
                                  if k != "activation"})):  # fmt: skip
        (tmp_path / d).mkdir()
        ckpt = Checkpoint(params=m.params, optimizer={}, iteration=0, vocab="abcdefghijk",
                          config={"model": model_cfg, "train": {}})  # fmt: skip
        save_checkpoint(tmp_path / d / "last.ckpt", ckpt)
    new, _, _ = load_model(tmp_path / "new")
    old, _, _ = load_model(tmp_path / "old")  # written before the field existed
    assert new.cfg == erf.cfg and new.cfg.activation == "gelu-erf"
    assert old.cfg == m.cfg and old.cfg.activation == "gelu-tanh"
    idx = np.array([[1, 2, 3, 4]])
    np.testing.assert_array_equal(new.forward(idx)[0], erf.forward(idx)[0])
    np.testing.assert_array_equal(old.forward(idx)[0], m.forward(idx)[0])


def test_a_prompt_longer_than_block_size_is_seen_through_its_last_block_size_tokens():
    m = _model()
    start = np.random.default_rng(3).integers(0, 11, (2, 13))  # 13 tokens, block_size 8
    logits = []
    out = generate(m, start, 5, np.random.default_rng(0), logits_out=logits)
    assert out.shape == (2, 18) and np.array_equal(out[:, :13], start)
    for n, got in enumerate(logits):
        p = 13 + n  # tokens seen before drawing token p: the model sees the last 8
        full, _, _ = m.forward(out[:, p - 8 : p])
        np.testing.assert_allclose(got, full[:, -1], rtol=0, atol=1e-12)


def test_a_context_beyond_block_size_is_refused_by_name():
    m = _model()
    with pytest.raises(ValueError, match="context of 9 tokens exceeds block_size 8"):
        forward_step(m, np.zeros((1, 9), np.int64), KVCache.empty(m.cfg, 1, np.float64))
    cache = KVCache.empty(m.cfg, 1, np.float64)
    forward_step(m, np.zeros((1, 5), np.int64), cache)
    with pytest.raises(ValueError, match="context of 9 tokens exceeds block_size 8"):
        forward_step(m, np.zeros((1, 4), np.int64), cache)
    assert forward_step(m, np.zeros((1, 3), np.int64), cache).shape == (1, 3, 11)  # 8 fits


def test_the_stream_sends_the_start_then_each_piece_adding_up_to_the_text(tmp_path):
    _saved(tmp_path)
    pieces = []
    text = sample_text(tmp_path, "abc", 12, seed=4, on_text=pieces.append)
    assert pieces[0] == "abc" and len(pieces) == 13  # the start, then one per character
    assert "".join(pieces) == text == sample_text(tmp_path, "abc", 12, seed=4)


def test_a_float64_checkpoint_loads_as_float64(tmp_path):
    m = _saved(tmp_path, dtype=np.float64)
    loaded, _, _ = load_model(tmp_path)
    for k, v in m.params.items():
        assert loaded.params[k].dtype == np.float64 and np.array_equal(loaded.params[k], v)


def test_best_is_refused_for_a_checkpoint_file(tmp_path):
    _saved(tmp_path)
    with pytest.raises(ValueError, match="--best picks a run directory's best.ckpt"):
        load_model(tmp_path / "last.ckpt", best=True)
    with pytest.raises(ValueError, match="--best"):
        sample_text(tmp_path / "last.ckpt", "a", 3, best=True)


def _general_path(logits, rng, temperature):
    """sample_token's CDF path at top_k=1, as it runs for ties (the fast path's reference)."""
    z = logits.astype(np.float64) / temperature
    kth = np.partition(z, z.shape[-1] - 1, axis=-1)[:, -1:]
    z = np.where(z < kth, -np.inf, z)
    probs = np.exp(z - kth)
    cdf = np.cumsum(probs / probs.sum(axis=-1, keepdims=True), axis=-1)
    u = rng.random((z.shape[0], 1)) * cdf[:, -1:]
    return np.minimum((cdf <= u).sum(axis=-1), z.shape[-1] - 1)


def test_greedy_is_the_argmax_and_draws_as_the_cdf_does():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((3, 1000)).astype(np.float32)  # unique maxima
    a, b = np.random.default_rng(7), np.random.default_rng(7)
    got = sample_token(logits, a, temperature=0.8, top_k=1)
    assert got.dtype == np.int64 and got.tolist() == logits.argmax(axis=-1).tolist()
    assert got.tolist() == _general_path(logits, b, 0.8).tolist()
    assert a.random() == b.random()  # one uniform per row taken, as the CDF path takes
    # a tie at the max: either tied token, drawn by the CDF (not always the first)
    tied = np.zeros((1, 4), np.float32)
    tied[0, [1, 3]] = 5.0
    draws = {int(sample_token(tied, np.random.default_rng(s), top_k=1)[0]) for s in range(40)}
    assert draws == {1, 3}
