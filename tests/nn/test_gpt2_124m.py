"""GPT-2 124M's shape without its weights: forward and backward in float32, and
GPT.from_params (weights from elsewhere, no random init drawn).

The 124M test costs about 6 s on 2 cores and 1.5 GB: 124,439,808 float32 parameters
(drawn directly in float32, not by GPT's float64 init) and as many gradients, one
sequence of 16 tokens.
"""

import math

import numpy as np
import pytest

from resgrad.nn.model import GPT, GPTConfig

GPT2_124M = GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)


def _random_params(cfg, rng, dtype=np.float32):
    params = {}
    for k, shape in GPT.param_shapes(cfg).items():
        if k.endswith(".g"):
            params[k] = np.ones(shape, dtype)  # (C,) LayerNorm gains
        else:
            params[k] = rng.standard_normal(shape, dtype=dtype) * dtype(0.02)
    return params


def test_gpt2_124m_forward_and_backward_in_float32():
    assert sum(math.prod(s) for s in GPT.param_shapes(GPT2_124M).values()) == 124_439_808
    model = GPT.from_params(GPT2_124M, _random_params(GPT2_124M, np.random.default_rng(0)))
    assert model.num_params() == 124_439_808 and model.dtype == np.float32
    ids = np.random.default_rng(1).integers(0, 50257, (1, 17))  # (B=1, T+1=17)
    logits, loss, cache = model.forward(ids[:, :-1], ids[:, 1:])
    assert logits.shape == (1, 16, 50257) and logits.dtype == np.float32
    # random weights of std 0.02: near-uniform predictions, loss close to ln V = 10.82
    assert abs(loss - math.log(50257)) < 0.5, loss
    grads = model.backward(cache)
    assert list(grads) == list(model.params)
    for k, g in grads.items():
        assert g.shape == model.params[k].shape and g.dtype == np.float32, k
        assert np.isfinite(g).all(), k
    assert np.count_nonzero(grads["wte"].any(axis=1)) == 50257  # the tied head reaches every row
    assert all(np.linalg.norm(grads[f"blocks.{i}.attn.w_qkv"]) > 0 for i in range(12))


def test_from_params_is_the_same_model_and_checks_what_it_gets():
    cfg = GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=8)
    ref = GPT(cfg, seed=3, dtype=np.float64)
    m = GPT.from_params(cfg, dict(reversed(ref.params.items())))
    assert list(m.params) == list(ref.params) and m.dtype == np.float64
    idx = np.random.default_rng(0).integers(0, 11, (2, 8))
    np.testing.assert_array_equal(m.forward(idx)[0], ref.forward(idx)[0])
    with pytest.raises(ValueError, match="params lacks 'ln_f.b'"):
        GPT.from_params(cfg, {k: v for k, v in ref.params.items() if k != "ln_f.b"})
    with pytest.raises(ValueError, match=r"params\['wpe'\] has shape \(9, 8\)"):
        GPT.from_params(cfg, {**ref.params, "wpe": np.zeros((9, 8))})
    with pytest.raises(TypeError, match="has dtype float(32|64); the model is"):
        GPT.from_params(cfg, {**ref.params, "wte": ref.params["wte"].astype(np.float32)})
    with pytest.raises(ValueError, match="float32 or float64, got int64"):
        GPT.from_params(cfg, {k: v.astype(np.int64) for k, v in ref.params.items()})
