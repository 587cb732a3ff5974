"""The one-token decode step (resgrad.train.sample.decode_step, resgrad.nn.decode_kernels)
against the readable reference path (resgrad.nn.kernels.ENABLED = False)."""

import numpy as np
import pytest

from resgrad.nn import decode_kernels, kernels
from resgrad.nn.blocks import VARIANTS
from resgrad.train import sample
from resgrad.train.sample import KVCache, attention_step, decode_step, forward_step, generate
from tests.train.test_sample import _model

# the decode step within these of the reference, relative to the logits' largest magnitude
TOL = {np.float64: 1e-12, np.float32: 1e-5}


def _generate(m, start, n, enabled, monkeypatch, top_k=1):
    """(token ids (B, T0 + n), logits (n, B, V)) of ``generate`` with the kernels on or off."""
    monkeypatch.setattr(kernels, "ENABLED", enabled)
    logits = []
    out = generate(m, start, n, np.random.default_rng(0), top_k=top_k, logits_out=logits)
    return out, np.array(logits)


def _rel(got, ref):
    return np.abs(got - ref).max() / np.abs(ref).max()


START = np.array([[1, 2, 3], [4, 5, 6]])  # (B=2, T0=3)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("n_embd", [16, 24])  # D = 8 and D = 12, not a multiple of 8
def test_decode_step_equals_the_reference_across_the_window(variant, dtype, n_embd, monkeypatch):
    m = _model(variant, dtype, n_embd=n_embd)
    # 14 new tokens in a window of 8: the cache fills, is cropped and rebuilt, fills again
    ids, got = _generate(m, START, 14, True, monkeypatch)
    ref_ids, ref = _generate(m, START, 14, False, monkeypatch)
    assert got.dtype == ref.dtype == dtype and got.shape == (14, 2, 11)
    assert _rel(got, ref) <= TOL[dtype]
    assert np.array_equal(ids, ref_ids)  # the same greedy tokens


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_decode_step_without_biases_and_with_the_exact_gelu(dtype, monkeypatch):
    m = _model("pre-ln", dtype, n_embd=24, n_head=3, bias=False, activation="gelu-erf")
    assert "blocks.0.attn.b_qkv" not in m.params and "ln_f.b" not in m.params
    ids, got = _generate(m, START, 9, True, monkeypatch)
    ref_ids, ref = _generate(m, START, 9, False, monkeypatch)
    assert _rel(got, ref) <= TOL[dtype] and np.array_equal(ids, ref_ids)


def test_the_decode_step_is_taken_and_fills_the_cache_as_the_reference(monkeypatch):
    m = _model()
    calls = []
    real = decode_kernels.attend_one
    monkeypatch.setattr(decode_kernels, "attend_one", lambda *a: calls.append(a[4]) or real(*a))
    caches = {}
    for enabled in (True, False):
        monkeypatch.setattr(kernels, "ENABLED", enabled)
        cache = KVCache.empty(m.cfg, 2, np.float64)
        forward_step(m, START, cache)  # the prompt: the reference, T = 3
        for t in range(4):
            logits = forward_step(m, np.array([[t], [t + 5]]), cache)  # (2, 1, V)
            assert logits.shape == (2, 1, 11)
        caches[enabled] = cache
    assert calls == [3, 3, 4, 4, 5, 5, 6, 6]  # each layer, at each new token's position
    on, off = caches[True], caches[False]
    assert on.length == off.length == 7
    for layer in range(m.cfg.n_layer):  # appended at the same positions, the same values
        np.testing.assert_allclose(on.k[layer], off.k[layer], rtol=0, atol=1e-13)
        np.testing.assert_allclose(on.v[layer], off.v[layer], rtol=0, atol=1e-13)


def test_the_decode_step_gives_the_same_bytes_every_run(monkeypatch):
    m = _model(dtype=np.float32, n_embd=24)
    a = _generate(m, START, 12, True, monkeypatch, top_k=None)
    b = _generate(m, START, 12, True, monkeypatch, top_k=None)
    assert np.array_equal(a[0], b[0]) and a[1].tobytes() == b[1].tobytes()


def test_scores_far_beyond_exps_range_stay_finite(monkeypatch):
    # q . k in the thousands: exp overflows float32 unless the row max is taken off first
    m = _model(dtype=np.float32)
    for layer in range(m.cfg.n_layer):
        m.params[f"blocks.{layer}.attn.w_qkv"][:, :32] *= 300.0  # (C, 2C) the q and k columns
    ids, got = _generate(m, START, 5, True, monkeypatch)
    ref_ids, ref = _generate(m, START, 5, False, monkeypatch)
    assert np.isfinite(ref).all() and np.isfinite(got).all()
    assert _rel(got, ref) <= TOL[np.float32] and np.array_equal(ids, ref_ids)


def test_a_broken_kernel_fails_the_comparison(monkeypatch):
    """The comparison above can fail: the attention kernel's output off by 1e-6 is caught."""
    m = _model()
    monkeypatch.setattr(kernels, "ENABLED", True)  # on even under RESGRAD_KERNELS=0 (mutmut's)
    real = kernels.compiled(decode_kernels._attend_one, np.zeros((1, 1)))  # numba's
    _, ref = _generate(m, START, 4, False, monkeypatch)

    def broken(qkv, b_qkv, has_bias, k_cache, v_cache, pos, scale, zero, scores, y):
        real(qkv, b_qkv, has_bias, k_cache, v_cache, pos, scale, zero, scores, y)
        y *= 1 + 1e-6  # (B, C)

    monkeypatch.setitem(kernels._COMPILED, decode_kernels._attend_one, broken)
    _, got = _generate(m, START, 4, True, monkeypatch)
    assert _rel(got, ref) > TOL[np.float64]


def test_a_cache_the_kernel_cannot_read_falls_back_to_the_reference(monkeypatch):
    monkeypatch.setattr(kernels, "ENABLED", True)  # on even under RESGRAD_KERNELS=0 (mutmut's)
    m = _model()
    shape = (2, 2, 8, 8)  # (B, H, block_size, D)
    fortran = KVCache([np.zeros(shape, order="F") for _ in range(2)],
                      [np.zeros(shape, order="F") for _ in range(2)])  # fmt: skip
    plain = KVCache.empty(m.cfg, 2, np.float64)
    seen = []
    monkeypatch.setattr(sample, "attention_step",
                        lambda *a: seen.append(a[-1]) or attention_step(*a))  # fmt: skip
    for cache in (fortran, plain):
        forward_step(m, START, cache)  # (2, 3, V)
    got = forward_step(m, np.array([[7], [8]]), fortran)  # (2, 1, V)
    n = len(seen)
    ref = forward_step(m, np.array([[7], [8]]), plain)  # (2, 1, V)
    assert seen[n - 2 : n] == [3, 3] and len(seen) == n  # the fallback, then the kernel
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-13)


def test_decode_step_refuses_what_it_cannot_do():
    m = _model()
    cache = KVCache.empty(m.cfg, 1, np.float64)
    with pytest.raises(ValueError, match="one new token a row, got 2"):
        decode_step(m, np.zeros((1, 2), np.int64), cache)
    cache.length = 8
    with pytest.raises(ValueError, match="context of 9 tokens exceeds block_size 8"):
        decode_step(m, np.zeros((1, 1), np.int64), cache)


def test_the_switch_turns_the_kernels_off(monkeypatch):
    monkeypatch.setattr(kernels, "ENABLED", False)
    assert not decode_kernels.available(np.float32)
    qkv, y = np.ones((1, 12)), np.zeros((1, 4))  # (B, 3C), (B, C)
    k = np.zeros((1, 2, 4, 2))  # (B, H, block_size, D)
    assert not decode_kernels.attend_one(qkv, None, k, k.copy(), 0, np.zeros(4), y)
    assert not y.any() and not k.any()  # nothing written
    monkeypatch.setattr(kernels, "ENABLED", True)
    assert decode_kernels.available(np.float32) and decode_kernels.available(np.float64)
    assert not decode_kernels.available(np.float16)


def test_the_buffers_follow_the_batch_and_dtype():
    cfg = _model().cfg
    cache = KVCache.empty(cfg, 2, np.float32)
    a = cache.decode_buffers(cfg, 2, np.float32)
    assert cache.decode_buffers(cfg, 2, np.float32) is a  # reused
    assert a.x.shape == (2, 16) and a.a.shape == (2, 64) and a.scores.shape == (8,)
    b = cache.decode_buffers(cfg, 3, np.float32)
    assert b is not a and b.x.shape == (3, 16)
    assert cache.decode_buffers(cfg, 3, np.float64).x.dtype == np.float64
