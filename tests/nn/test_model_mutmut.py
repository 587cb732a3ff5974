"""The GPT where mutmut found it untested: the forward in training mode as the list of its
layer calls on one stream, the config's epsilon at the final norm, the refusals' names and
bounds, the init's seed, scale and precision, the loss's upstream gradient, a model built
from given arrays, and the per-block norms."""

import math

import numpy as np
import pytest

from resgrad.nn.blocks import block_forward
from resgrad.nn.layers import dropout_forward, embedding_forward, layernorm_forward
from resgrad.nn.model import GPT, GPTConfig, per_block_norms

BASE = dict(vocab_size=7, block_size=6, n_layer=2, n_head=2, n_embd=6)


def _model(variant="pre-ln", dtype=np.float64, seed=0, **kw):
    return GPT(GPTConfig(**{**BASE, **kw, "variant": variant}), seed=seed, dtype=dtype)


def _batch(B=2, T=5, seed=1):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 7, (B, T)), rng.integers(0, 7, (B, T))


# --------------------------------------------------------------------- forward


@pytest.mark.parametrize("variant", ["pre-ln", "post-ln"])
@pytest.mark.parametrize("train", [False, True])
def test_the_forward_is_its_layer_calls_on_one_stream_with_the_configs_epsilon(variant, train):
    """Embedding, its dropout, every block, the final norm where the scheme has one (at the
    config's epsilon, large here so that a norm at its default shows), the tied head; in
    training mode every dropout draws from the one stream, in the model's order."""
    m = _model(variant, dropout=0.25, ln_eps=0.3)
    idx, _ = _batch()
    logits, _, _ = m.forward(idx, train=train, rng=np.random.default_rng(4))
    P, cfg, rng = m.params, m.cfg, np.random.default_rng(4)
    x = embedding_forward(idx, P["wte"], P["wpe"])[0]  # (B,T,C)
    x = dropout_forward(x, cfg.dropout, train=train, rng=rng)[0]
    for i in range(cfg.n_layer):
        x = block_forward(x, P, f"blocks.{i}", cfg, train=train, rng=rng)[0]
    if cfg.final_ln:
        x = layernorm_forward(x, P["ln_f.g"], P["ln_f.b"], 0.3)[0]
    np.testing.assert_allclose(logits, x @ P["wte"].T, rtol=1e-13, atol=1e-15)
    if train:  # and the dropout did something
        assert np.abs(logits - m.forward(idx)[0]).max() > 1e-3


def test_the_loss_gradient_scales_with_its_upstream_gradient():
    m = _model("rezero", rezero_alpha=0.5)
    idx, tgt = _batch()
    _, _, cache = m.forward(idx, tgt)
    one, half = m.backward(cache), m.backward(cache, dloss=0.5)
    for k in one:
        np.testing.assert_allclose(half[k], 0.5 * one[k], rtol=1e-12, atol=1e-18)


def test_a_backward_it_cannot_take_says_why():
    m = _model()
    idx, tgt = _batch()
    _, _, cache = m.forward(idx)
    with pytest.raises(ValueError, match=r"^backward needs a forward with targets \(or an "
                                         r"explicit dlogits\)$"):  # fmt: skip
        m.backward(cache)
    _, _, cache = m.forward(idx, tgt)
    m.backward_stream(cache, release=True)
    with pytest.raises(ValueError, match="^this cache was spent by a backward with release=True$"):
        m.backward(cache)


def test_targets_are_named_as_targets():
    m = _model()
    idx, tgt = _batch()
    with pytest.raises(ValueError, match="^targets must be a 2-D integer array"):
        m.forward(idx, tgt.astype(float))
    with pytest.raises(ValueError, match="^targets has T=7, longer than block_size=6"):
        m.forward(idx, np.zeros((2, 7), int))


# --------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("n_head", 0, "^n_head must be an integer >= 1, got 0$"),
        (
            "n_head",
            3,
            "^n_head=3 does not divide n_embd=128; expected n_embd to be a multiple of n_head$",
        ),  # fmt: skip
        ("dropout", False, r"^dropout must be a number in \[0, 1\), got False$"),
        ("dropout", "0.1", r"^dropout must be a number in \[0, 1\), got '0.1'$"),
        ("ln_eps", True, "^ln_eps must be a positive finite number, got True$"),
        ("ln_eps", math.inf, "^ln_eps must be a positive finite number, got inf$"),
        ("ln_eps", "1e-5", "^ln_eps must be a positive finite number, got '1e-5'$"),
    ],
)
def test_a_config_field_is_refused_by_its_name_at_its_bounds_and_types(field, value, match):
    with pytest.raises(ValueError, match=match):
        GPTConfig(**{field: value})


# --------------------------------------------------------------------- init


def test_the_init_is_seed_0_by_default_with_gpt2s_scale_in_full_precision():
    cfg = GPTConfig(n_embd=128, block_size=64)
    default, zero = GPT(cfg, dtype=np.float64), GPT(cfg, seed=0, dtype=np.float64)
    assert all(np.array_equal(default.params[k], zero.params[k]) for k in zero.params)
    for k in ("wte", "wpe"):  # normal(0, 0.02): thousands of draws, within 5%
        assert zero.params[k].std() == pytest.approx(0.02, rel=0.05), k
    # float64 holds the draws themselves, not their float32 rounding
    w = zero.params["blocks.0.attn.w_qkv"]
    assert not np.array_equal(w, w.astype(np.float32).astype(np.float64))


def test_a_model_of_something_else_names_what_it_got():
    for make in (GPT, GPT.from_params):
        with pytest.raises(TypeError, match="^cfg must be a GPTConfig, got dict$"):
            make({"n_layer": 2}, {})


def test_a_parameter_that_is_not_an_array_is_named_with_its_type():
    m = _model()
    m.params["wpe"] = m.params["wpe"].tolist()
    with pytest.raises(ValueError, match=r"^params\['wpe'\] has shape list; expected \(6, 6\)$"):
        m.check_params()


# --------------------------------------------------------------------- from_params


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_model_from_given_arrays_is_the_model_they_came_from(dtype):
    """The arrays used as given (not copied), in the model's order whatever the dict's, at
    their own dtype, drawing no init: the same logits as the model they came from."""
    src = _model("deepnorm", dtype=dtype, seed=5)
    given = dict(reversed(list(src.params.items())))
    m = GPT.from_params(src.cfg, given)
    assert m.dtype == np.dtype(dtype) and list(m.params) == list(src.params)
    assert all(m.params[k] is src.params[k] for k in src.params)
    idx, _ = _batch()
    np.testing.assert_array_equal(m.forward(idx)[0], src.forward(idx)[0])


def test_a_model_from_given_arrays_refuses_what_it_cannot_hold():
    cfg = _model().cfg
    with pytest.raises(ValueError, match="^params lacks 'wte'; expected an array of shape"):
        GPT.from_params(cfg, {})
    half = {k: a.astype(np.float16) for k, a in _model().params.items()}
    with pytest.raises(ValueError, match="^dtype must be float32 or float64, got float16$"):
        GPT.from_params(cfg, half)


# --------------------------------------------------------------------- per-block norms


def test_per_block_norms_gathers_each_blocks_names_and_their_total():
    """Per name, an (L,) array indexed by the block's number (two digits included), zero
    where a block has no such parameter; ``""`` the root of each block's sum of squares;
    embeddings, the final norm and names of another layout left out."""
    norms = {
        "wte": 9.0, "wpe": 9.0, "ln_f.g": 9.0, "h.0.mlp": 9.0,
        "blocks.0.attn.w_qkv": 3.0, "blocks.10.attn.w_qkv": 4.0, "blocks.10.ln1.g": 12.0,
    }  # fmt: skip
    got = per_block_norms(norms, 11)
    assert list(got) == ["", "attn.w_qkv", "ln1.g"]
    want_qkv, want_ln = np.zeros(11), np.zeros(11)
    want_qkv[[0, 10]], want_ln[10] = [3.0, 4.0], 12.0
    np.testing.assert_array_equal(got["attn.w_qkv"], want_qkv)
    np.testing.assert_array_equal(got["ln1.g"], want_ln)
    total = np.zeros(11)
    total[[0, 10]] = [3.0, 12.649110640673518]  # sqrt(16 + 144)
    np.testing.assert_allclose(got[""], total, rtol=1e-15)
