"""Every bound the file readers check, at the value just inside and just outside it.

config.json (formats/hf.py) and nanoGPT's model_args (formats/hf.py's nanogpt_config) are
checked from their numbers alone, so each case is a dict: no weights are built.
"""

import numpy as np
import pytest

from resgrad.formats import hf
from resgrad.formats.hf import (
    EPS_MAX,
    EPS_MIN,
    MAX_PARAMS,
    gpt_config_from_hf,
    hf_config,
    nanogpt_config,
)
from resgrad.nn.model import GPTConfig

OK = hf_config(GPTConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=8))
NANO = dict(n_layer=2, n_head=2, n_embd=8, block_size=8, bias=True, vocab_size=20, dropout=0.0)


def _below(x):
    return float(np.nextafter(x, -np.inf))


def _above(x):
    return float(np.nextafter(x, np.inf))


def _refused(fn, arg, match):
    """``fn(arg)`` raises one line matching ``match``."""
    with pytest.raises(ValueError, match=match) as e:
        fn(arg)
    assert "\n" not in str(e.value)


# --------------------------------------------------------------------------- config.json


@pytest.mark.parametrize("key", ["vocab_size", "n_positions", "n_ctx", "n_layer", "n_head",
                                 "n_embd", "hidden_size", "num_hidden_layers",
                                 "num_attention_heads", "max_position_embeddings"])  # fmt: skip
def test_a_config_size_of_1_is_read_and_0_is_not(key):
    one = {**OK, "n_head": 1, key: 1}  # n_head 1 divides any width
    for field, alias in (("n_embd", "hidden_size"), ("n_layer", "num_hidden_layers"),
                         ("n_head", "num_attention_heads"), ("n_positions", "n_ctx"),
                         ("n_positions", "max_position_embeddings")):  # fmt: skip
        if key == alias:
            one[field] = 1  # the field beside its alias, agreeing
    cfg = gpt_config_from_hf(one)
    assert 1 in (cfg.vocab_size, cfg.block_size, cfg.n_layer, cfg.n_head, cfg.n_embd)
    _refused(gpt_config_from_hf, {**one, key: 0}, f"{key} is 0; expected an integer >= 1")


def test_layer_norm_epsilon_at_its_bounds():
    """From float32's smallest normal, 2**-126 (a float32 model keeps it positive), to 0.1."""
    assert (EPS_MIN, EPS_MAX) == (2.0**-126, 0.1)
    for eps in (2.0**-126, 0.1, 1e-5):
        assert gpt_config_from_hf({**OK, "layer_norm_epsilon": eps}).ln_eps == eps
    for eps in (_below(2.0**-126), _above(0.1), 0.0, -(2.0**-126), 1e-300):
        _refused(gpt_config_from_hf, {**OK, "layer_norm_epsilon": eps},
                 "layer_norm_epsilon is .*; expected a positive finite number from")  # fmt: skip
    assert gpt_config_from_hf({k: v for k, v in OK.items() if k != "layer_norm_epsilon"}).ln_eps \
        == 1e-5  # absent: GPT-2's  # fmt: skip


@pytest.mark.parametrize("key", ["resid_pdrop", "embd_pdrop", "attn_pdrop",
                                 "summary_first_dropout"])  # fmt: skip
def test_a_dropout_field_at_its_bounds(key):
    for p in (0.0, _below(1.0)):
        gpt_config_from_hf({**OK, key: p})
    for p in (_below(0.0), 1.0):
        _refused(gpt_config_from_hf, {**OK, key: p}, f"{key} is .*; expected a dropout")


def test_initializer_range_at_its_bounds():
    for r in (0.0, 1e308):
        gpt_config_from_hf({**OK, "initializer_range": r})
    for r in (_below(0.0), float("inf")):
        _refused(gpt_config_from_hf, {**OK, "initializer_range": r},
                 "initializer_range is .*; expected a finite number >= 0")  # fmt: skip


def test_n_inner_at_4_n_embd_exactly():
    assert gpt_config_from_hf({**OK, "n_inner": 32}).n_embd == 8
    for inner in (31, 33):
        _refused(gpt_config_from_hf, {**OK, "n_inner": inner}, f"n_inner is {inner};")


def _at_max_params(extra=0):
    """Sizes whose GPT-2 holds MAX_PARAMS + extra parameters: C = L = T = H = 1."""
    v = MAX_PARAMS + extra - 28  # V*C + T*C + L*(12*C*C + 13*C) + 2*C with C = L = T = 1
    return dict(vocab_size=v, n_positions=1, n_layer=1, n_head=1, n_embd=1)


def test_the_parameter_limit_is_inclusive():
    cfg = gpt_config_from_hf({**OK, **_at_max_params()})
    assert hf._n_params(cfg) == MAX_PARAMS
    _refused(gpt_config_from_hf, {**OK, **_at_max_params(1)},
             "parameters .*, more than resgrad loads")  # fmt: skip


def test_weights_as_many_as_the_config_needs_and_one_fewer():
    cfg = GPTConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=8)
    least = hf._least_params(cfg)
    assert least == 20 * 8 + 8 * 8 + 2 * 12 * 8 * 8
    hf._refuse_larger(cfg, least, "here", "the file")
    _refused(lambda held: hf._refuse_larger(cfg, held, "here", "the file"), least - 1,
             f"at least {least:,} parameters, but the file holds {least - 1:,} values")  # fmt: skip


# --------------------------------------------------------------------------- model_args


@pytest.mark.parametrize("key", ["n_layer", "n_head", "n_embd", "block_size", "vocab_size"])
def test_a_model_args_size_of_1_is_read_and_0_is_not(key):
    one = {**NANO, "n_head": 1, key: 1}
    assert getattr(nanogpt_config(one), key) == 1
    _refused(nanogpt_config, {**one, key: 0},
             f"model_args {key} is 0; expected an integer >= 1")  # fmt: skip


def test_model_args_dropout_at_its_bounds():
    for p in (0, 0.0, _below(1.0)):
        assert nanogpt_config({**NANO, "dropout": p}).dropout == 0.0  # loaded for inference
    for p in (_below(0.0), 1.0):
        _refused(nanogpt_config, {**NANO, "dropout": p}, "model_args dropout is")


def test_model_args_defaults_are_nanogpts():
    cfg = nanogpt_config({k: v for k, v in NANO.items() if k not in ("bias", "dropout")})
    assert cfg.bias is True and cfg.dropout == 0.0  # GPTConfig: bias=True, dropout=0.0
    assert cfg.ln_eps == 1e-5 and cfg.activation == "gelu-erf"
    assert nanogpt_config({**NANO, "bias": False}).bias is False


def test_the_model_args_parameter_limit_is_inclusive():
    at = _at_max_params()
    args = {**NANO, **{k: at[k] for k in ("vocab_size", "n_layer", "n_head", "n_embd")},
            "block_size": 1}  # fmt: skip
    assert hf._n_params(nanogpt_config(args)) == MAX_PARAMS
    _refused(nanogpt_config, {**args, "vocab_size": args["vocab_size"] + 1},
             "model_args make about .* parameters, more than resgrad loads")  # fmt: skip
