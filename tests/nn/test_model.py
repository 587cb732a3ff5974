"""The GPT: config validation, parameters, float64 checks of the whole model, stream gradients."""

import dataclasses

import numpy as np
import pytest

import resgrad.nn.model as M
from resgrad.nn.blocks import block_forward
from resgrad.nn.layers import cross_entropy_forward, layernorm_forward
from resgrad.nn.model import GPT, INITS, VARIANTS, GPTConfig
from resgrad.verify.selfcheck import RTOL, compare, model_checks, randomize_params


@pytest.fixture(scope="session")
def check_rows():  # run inside the tests, not at import: a crash fails these tests only
    return model_checks(seed=0)


@pytest.mark.parametrize("variant", VARIANTS)
def test_whole_gpt_passes_sparse_and_directional_float64_checks(variant, check_rows):
    rows = [r for r in check_rows if r.name.startswith(f"gpt {variant}")]
    modes = {r.mode for r in rows}
    assert {"sparse", "directional", "zero"} <= modes
    for r in rows:
        assert r.passed and r.max_error < RTOL, r.row()
        assert r.n_floor <= max(r.n_checked // 5, 1) or r.mode == "zero", r.row()


def test_whole_gpt_with_dropout_in_training_checks_too(check_rows):
    rows = [r for r in check_rows if "dropout" in r.name]
    assert len(rows) == 2 and all(r.passed and r.max_error < RTOL for r in rows)


def _model(variant="pre-ln", dtype=np.float64, seed=0, **kw):
    base = dict(vocab_size=7, block_size=6, n_layer=2, n_head=2, n_embd=6)
    cfg = GPTConfig(**{**base, **kw, "variant": variant})
    return GPT(cfg, seed=seed, dtype=dtype)


def _batch(model, B=2, T=5, seed=1):
    rng = np.random.default_rng(seed)
    V = model.cfg.vocab_size
    return rng.integers(0, V, (B, T)), rng.integers(0, V, (B, T))


# --------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("vocab_size", 0, "vocab_size must be an integer >= 1, got 0"),
        ("block_size", 2.5, "block_size must be an integer >= 1, got 2.5"),
        ("n_layer", 0, "n_layer must be an integer >= 1, got 0"),
        ("n_head", 3, "n_head=3 does not divide n_embd=128"),
        ("n_embd", -4, "n_embd must be an integer >= 1, got -4"),
        ("dropout", 1.0, r"dropout must be a number in \[0, 1\), got 1.0"),
        ("variant", "prenorm", "unknown variant 'prenorm'; expected one of pre-ln, post-ln"),
        ("init", "kaiming", "unknown init 'kaiming'; expected one of gpt2, xavier"),
        ("bias", 1, "bias must be True or False, got 1"),
        ("ln_eps", 0.0, "ln_eps must be a positive finite number, got 0.0"),
        ("activation", "gelu", "unknown activation 'gelu'; expected one of gelu-tanh, gelu-erf"),
        ("activation", None, "unknown activation None; expected one of gelu-tanh, gelu-erf"),
    ],
)
def test_config_names_the_bad_field_and_value(field, value, match):
    with pytest.raises(ValueError, match=match):
        GPTConfig(**{field: value})


def test_config_defaults_and_frozen():
    cfg = GPTConfig()
    assert (cfg.vocab_size, cfg.block_size, cfg.n_layer, cfg.n_head, cfg.n_embd) == (
        65,
        64,
        4,
        4,
        128,
    )
    assert cfg.variant == "pre-ln" and cfg.init == "gpt2" and cfg.bias and cfg.dropout == 0.0
    assert cfg.activation == "gelu-tanh"  # GPT-2's form: every model before the field had it
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.n_layer = 3
    assert VARIANTS == ("pre-ln", "post-ln", "none", "residual", "rezero", "deepnorm", "ln-scaling")
    assert INITS == ("gpt2", "xavier")


# --------------------------------------------------------------------- parameters


@pytest.mark.parametrize("variant", VARIANTS)
def test_parameters_are_flat_named_and_counted(variant):
    m = _model(variant)
    final = variant in ("pre-ln", "none", "ln-scaling")
    assert ("ln_f.g" in m.params) == final and ("ln_f.b" in m.params) == final
    assert "lm_head" not in " ".join(m.params)  # tied to wte
    assert m.params["wte"].shape == (7, 6) and m.params["wpe"].shape == (6, 6)
    assert m.num_params() == sum(a.size for a in m.params.values())
    assert list(m.params) == list(GPT.param_shapes(m.cfg))
    C = 6
    per_block = 12 * C * C + 9 * C  # qkv + proj + fc + proj, with their biases
    per_block += {"residual": 0, "rezero": 1}.get(variant, 4 * C)
    assert m.num_params() == 7 * C + 6 * C + 2 * per_block + (2 * C if final else 0)


def test_same_seed_same_numbers_in_both_dtypes():
    a, b = _model(dtype=np.float32, seed=3), _model(dtype=np.float64, seed=3)
    for k in a.params:
        assert a.params[k].dtype == np.float32 and b.params[k].dtype == np.float64
        np.testing.assert_array_equal(a.params[k], b.params[k].astype(np.float32))
    c = _model(seed=4)
    assert not np.array_equal(b.params["wte"], c.params["wte"])


def test_gpt2_init_gives_a_near_uniform_first_loss():
    m = _model(vocab_size=11, n_embd=32, n_head=4)
    idx, tgt = _batch(m, T=6)
    _, loss, _ = m.forward(idx, tgt)
    assert loss == pytest.approx(np.log(11), abs=0.02)


def test_params_are_settable_by_hand():
    m = _model("rezero")
    m.params["blocks.0.alpha"][0] = 0.5
    m.params["wte"] = np.zeros((7, 6))
    idx, tgt = _batch(m)
    logits, loss, _ = m.forward(idx, tgt)
    assert np.all(logits == 0) and loss == pytest.approx(np.log(7))


# --------------------------------------------------------------------- forward and backward


@pytest.mark.parametrize("variant", VARIANTS)
def test_forward_is_the_list_of_layer_calls(variant):
    m = _model(variant)
    randomize_params(m.params, np.random.default_rng(0))
    idx, tgt = _batch(m)
    logits, loss, cache = m.forward(idx, tgt)
    P, cfg = m.params, m.cfg
    x = P["wte"][idx] + P["wpe"][:5]
    assert len(cache.xs) == cfg.n_layer + 1
    np.testing.assert_array_equal(cache.xs[0], x)
    for i in range(cfg.n_layer):
        x, _ = block_forward(x, P, f"blocks.{i}", cfg)
        np.testing.assert_array_equal(cache.xs[i + 1], x)
    if variant in ("pre-ln", "none", "ln-scaling"):
        x = layernorm_forward(x, P["ln_f.g"], P["ln_f.b"])[0]
    np.testing.assert_allclose(logits, x @ P["wte"].T, rtol=1e-14)
    assert loss == cross_entropy_forward(logits, tgt)[0]


def test_backward_returns_every_parameter_under_its_name_and_dtype():
    for dtype in (np.float32, np.float64):
        m = _model("rezero", dtype=dtype)
        idx, tgt = _batch(m)
        _, _, cache = m.forward(idx, tgt)
        g = m.backward(cache)
        assert list(g) == list(m.params)
        for k in g:
            assert g[k].shape == m.params[k].shape and g[k].dtype == dtype, k


def test_tied_head_gradient_is_the_sum_of_both_uses():
    m = _model("pre-ln")
    randomize_params(m.params, np.random.default_rng(2))
    idx = np.array([[0, 1, 2, 1, 0]])  # tokens 3..6 never enter the embedding
    tgt = np.array([[1, 2, 3, 4, 5]])
    _, _, cache = m.forward(idx, tgt)
    g = m.backward(cache)
    # rows never looked up receive the head's gradient only: dlogits^T @ x_final
    from resgrad.nn.layers import cross_entropy_backward

    head = cross_entropy_backward(1.0, cache.ce)[0].T @ cache.xf[0]  # (V, C)
    np.testing.assert_allclose(g["wte"][3:], head[3:], rtol=1e-12)
    assert np.abs(g["wte"][:3] - head[:3]).max() > 1e-3  # looked-up rows get both


def test_backward_from_an_explicit_dlogits_and_without_targets():
    m = _model("post-ln")
    randomize_params(m.params, np.random.default_rng(1))
    idx, _ = _batch(m)
    logits, loss, cache = m.forward(idx)
    assert loss is None
    with pytest.raises(ValueError, match="needs a forward with targets"):
        m.backward(cache)
    dlogits = np.random.default_rng(5).standard_normal(logits.shape)
    g = m.backward(cache, dlogits)
    r = compare(
        "dlogits",
        lambda **_: m.forward(idx)[0],
        dict(m.params),
        g,
        dout=dlogits,
        mode="directional",
        directions=1,
    )
    assert r.passed and r.max_error < RTOL, r.row()
    with pytest.raises(ValueError, match="dlogits have shape"):
        m.backward(cache, dlogits[:, :2])


@pytest.mark.parametrize("variant", ["pre-ln", "none", "deepnorm", "ln-scaling"])
def test_backward_stream_gives_the_gradient_at_every_block_input(variant):
    m = _model(variant, n_layer=3)
    randomize_params(m.params, np.random.default_rng(3))
    idx, tgt = _batch(m)
    _, loss, cache = m.forward(idx, tgt)
    grads, dxs = m.backward_stream(cache)
    assert len(dxs) == 4 and all(d.shape == (2, 5, 6) for d in dxs)
    np.testing.assert_array_equal(
        np.concatenate([g.ravel() for g in grads.values()]),
        np.concatenate([g.ravel() for g in m.backward(cache).values()]),
    )
    cfg, P = m.cfg, m.params

    def loss_from(i):
        def f(x):
            for j in range(i, cfg.n_layer):
                x, _ = block_forward(x, P, f"blocks.{j}", cfg)
            if cfg.final_ln:
                x = layernorm_forward(x, P["ln_f.g"], P["ln_f.b"])[0]
            return cross_entropy_forward(x @ P["wte"].T, tgt)[0]

        return f

    for i in range(4):
        x = cache.xs[i].copy()
        assert loss_from(i)(x) == pytest.approx(loss, rel=1e-14)
        r = compare(f"x{i}", loss_from(i), {"x": x}, {"x": dxs[i]}, mode="sparse", k=12, seed=i)
        assert r.passed and r.max_error < RTOL, r.row()


def test_rezero_at_init_gives_exact_zero_sublayer_gradients():
    m = _model("rezero")
    idx, tgt = _batch(m)
    _, _, cache = m.forward(idx, tgt)
    g = m.backward(cache)
    for k, a in g.items():
        if ".attn." in k or ".mlp." in k:
            assert not a.any(), k
    assert g["blocks.0.alpha"][0] != 0 and g["blocks.1.alpha"][0] != 0
    r = compare(
        "alpha",
        lambda **_: m.forward(idx, tgt)[1],
        {k: m.params[k] for k in ("blocks.0.alpha", "blocks.1.alpha", "wte", "wpe")},
        g,
        mode="sparse",
        k=6,
    )
    assert r.passed and r.max_error < RTOL, r.row()


@pytest.mark.parametrize("alpha", [0.25, 1.0])
def test_rezero_alpha_is_every_blocks_alpha_at_init_and_the_model_passes_its_check(alpha):
    m = GPT(GPTConfig(vocab_size=7, block_size=6, n_layer=3, n_head=2, n_embd=6,
                      variant="rezero", rezero_alpha=alpha), seed=0, dtype=np.float64)  # fmt: skip
    alphas = [m.params[f"blocks.{i}.alpha"] for i in range(3)]
    assert all(a.shape == (1,) and a[0] == alpha for a in alphas)
    idx, tgt = _batch(m)
    _, loss, cache = m.forward(idx, tgt)
    g = m.backward(cache)
    # the branches speak from the first step: their weights' gradients are not zero
    assert all(g[f"blocks.{i}.mlp.w_fc"].any() for i in range(3))
    # out = x + alpha f(x) by hand, block by block, from the model's own stream
    for i in range(3):
        x, P = cache.xs[i], {k: v for k, v in m.params.items() if k.startswith(f"blocks.{i}.")}
        out, _ = block_forward(x, P, f"blocks.{i}", m.cfg)
        assert np.allclose(out, cache.xs[i + 1], rtol=1e-13, atol=1e-13)
    r = compare("rezero alpha", lambda **_: m.forward(idx, tgt)[1], dict(m.params), g,
                mode="sparse", k=12)  # fmt: skip
    assert r.passed and r.max_error < RTOL, r.row()


@pytest.mark.parametrize(
    "kw, match",
    [
        (
            dict(variant="pre-ln", rezero_alpha=0.5),
            "rezero_alpha 0.5 is rezero's alpha at initialization; variant 'pre-ln' has none",
        ),
        (dict(variant="rezero", rezero_alpha=-0.1), r"rezero_alpha must be a number in \[0, 10\]"),
        (dict(variant="rezero", rezero_alpha=10.5), r"got 10.5"),
        (dict(variant="rezero", rezero_alpha=True), "got True"),
        (dict(variant="rezero", rezero_alpha=float("nan")), "got nan"),
    ],
)
def test_a_rezero_alpha_the_scheme_cannot_take_is_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        GPTConfig(**kw)
    GPTConfig(variant="rezero", rezero_alpha=10.0)  # the largest allowed


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(variant="pre-ln", ln_scaling_power=0.5), "ln_scaling_power 0.5 is ln-scaling's "
         "exponent; variant 'pre-ln' has none \\(expected it unset\\)"),
        (dict(variant="rezero", ln_scaling_power=0.0), "variant 'rezero' has none"),
        (dict(variant="ln-scaling", ln_scaling_power=-0.1),
         r"ln_scaling_power must be a number in \[0, 1\], got -0.1"),
        (dict(variant="ln-scaling", ln_scaling_power=1.5), "got 1.5"),
        (dict(variant="ln-scaling", ln_scaling_power=True), "got True"),
        (dict(variant="ln-scaling", ln_scaling_power="0.5"), "got '0.5'"),
        (dict(variant="ln-scaling", ln_scaling_power=float("nan")), "got nan"),
    ],
)  # fmt: skip
def test_an_ln_scaling_power_the_scheme_cannot_take_is_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        GPTConfig(**kw)
    assert GPTConfig(variant="ln-scaling").ln_scaling_power == 0.5  # unset: the paper's
    assert GPTConfig(variant="ln-scaling", ln_scaling_power=1).ln_scaling_power == 1
    assert GPTConfig().ln_scaling_power is None


def test_ln_scaling_at_power_0_is_the_pre_ln_model_exactly_on_the_same_params():
    """The same params (the init rule aside): same logits, loss and every gradient, bit for
    bit; and the init differs only in the residual projections' 1/sqrt(2L)."""
    m = _model("ln-scaling", ln_scaling_power=0.0, n_layer=3)
    pre = _model("pre-ln", n_layer=3)
    for k in pre.params:
        same = np.array_equal(m.params[k], pre.params[k])
        assert same != k.endswith("w_proj"), k  # Sun et al.: no scaled init under ln-scaling
    randomize_params(m.params, np.random.default_rng(3))
    pre.params = {k: a.copy() for k, a in m.params.items()}
    idx, tgt = _batch(m)
    (lg, loss, c), (lg0, loss0, c0) = m.forward(idx, tgt), pre.forward(idx, tgt)
    np.testing.assert_array_equal(lg, lg0)
    assert loss == loss0
    g, g0 = m.backward(c), pre.backward(c0)
    for k in g0:
        np.testing.assert_array_equal(g[k], g0[k], err_msg=k)


@pytest.mark.parametrize("power", [0.25, 0.5, 1.0])
def test_ln_scaling_model_passes_its_check_at_every_power(power):
    m = _model("ln-scaling", ln_scaling_power=power, n_layer=3)
    randomize_params(m.params, np.random.default_rng(4))
    idx, tgt = _batch(m)
    _, loss, cache = m.forward(idx, tgt)
    g = m.backward(cache)
    assert [c.alpha for c in cache.blocks] == pytest.approx([1.0, 2**-power, 3**-power])
    r = compare(f"ln-scaling {power}", lambda **_: m.forward(idx, tgt)[1], dict(m.params), g,
                mode="sparse", k=12)  # fmt: skip
    assert r.passed and r.max_error < RTOL, r.row()
    pre = _model("pre-ln", n_layer=3)
    pre.params = m.params
    assert abs(pre.forward(idx, tgt)[1] - loss) > 1e-4  # not vacuous: the scale changes it


# --------------------------------------------------------------------- edge shapes


@pytest.mark.parametrize(
    "kw, B, T",
    [
        (dict(vocab_size=2, n_head=1, n_embd=4), 1, 1),  # V=2, B=1, T=1, one head
        (dict(vocab_size=3, n_head=5, n_embd=5), 2, 3),  # head size 1, C=5
        (dict(vocab_size=4, n_head=1, n_embd=7), 1, 6),  # C=7 not a power of two, T=block_size
    ],
    ids=["V2-B1-T1-one-head", "head-size-1", "C7-T-is-block-size"],
)
@pytest.mark.parametrize("variant", VARIANTS)
def test_edge_shapes_check(kw, B, T, variant):
    m = _model(variant, **kw)
    randomize_params(m.params, np.random.default_rng(7))
    idx, tgt = _batch(m, B=B, T=T, seed=8)
    logits, _, cache = m.forward(idx, tgt)
    assert logits.shape == (B, T, m.cfg.vocab_size)
    g = m.backward(cache)
    C = m.cfg.n_embd
    args = {k: a for k, a in m.params.items() if not k.endswith("b_qkv")}
    args.update({f"{k}[q]": a[:C] for k, a in m.params.items() if k.endswith("b_qkv")})
    grads = {k: g[k] for k in args if k in g}
    grads.update({f"{k}[q]": g[k][:C] for k in m.params if k.endswith("b_qkv")})
    r = compare(
        "edge", lambda **_: m.forward(idx, tgt)[1], args, grads, mode="directional", directions=1
    )
    assert r.passed and r.max_error < RTOL, r.row()


# --------------------------------------------------------------------- dtype and speed path


def test_float32_path_never_upcasts():
    m = _model("deepnorm", dtype=np.float32)
    m32 = _model("rezero", dtype=np.float32, dropout=0.1)
    m32.params["blocks.0.alpha"][0] = 0.3
    for model in (m, m32):
        idx, tgt = _batch(model)
        logits, loss, cache = model.forward(idx, tgt, train=True, rng=np.random.default_rng(0))
        assert logits.dtype == np.float32 and isinstance(loss, float)
        assert all(x.dtype == np.float32 for x in cache.xs)
        grads, dxs = model.backward_stream(cache)
        assert all(a.dtype == np.float32 for a in grads.values())
        assert all(d.dtype == np.float32 for d in dxs)


def test_float32_and_float64_agree():
    a, b = _model("pre-ln", dtype=np.float32, seed=2), _model("pre-ln", dtype=np.float64, seed=2)
    idx, tgt = _batch(a)
    _, la, ca = a.forward(idx, tgt)
    _, lb, cb = b.forward(idx, tgt)
    assert la == pytest.approx(lb, rel=1e-6)
    ga, gb = a.backward(ca), b.backward(cb)
    for k in ga:
        np.testing.assert_allclose(ga[k], gb[k], rtol=1e-3, atol=1e-6 * np.abs(gb[k]).max())


def test_dropout_is_seeded_and_off_in_eval():
    m = _model("pre-ln", dropout=0.3)
    idx, tgt = _batch(m)
    l1 = m.forward(idx, tgt, train=True, rng=np.random.default_rng(1))[1]
    l2 = m.forward(idx, tgt, train=True, rng=np.random.default_rng(1))[1]
    l3 = m.forward(idx, tgt, train=True, rng=np.random.default_rng(2))[1]
    assert l1 == l2 and l1 != l3
    e1, e2 = m.forward(idx, tgt)[1], m.forward(idx, tgt, rng=np.random.default_rng(9))[1]
    assert e1 == e2 != l1
    with pytest.raises(ValueError, match="needs rng"):
        m.forward(idx, tgt, train=True)


def test_ignore_index_in_the_model_loss():
    m = _model("residual")
    idx, tgt = _batch(m)
    tgt[0, :2] = -1
    _, loss, cache = m.forward(idx, tgt, ignore_index=-1)
    logits = m.forward(idx)[0]
    keep = tgt != -1
    ref = cross_entropy_forward(logits[keep][None], tgt[keep][None])[0]
    assert loss == pytest.approx(ref, rel=1e-12)
    g = m.backward(cache)
    assert all(np.isfinite(a).all() for a in g.values())


def test_flops_count():
    m = GPT(GPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128))
    C, L, V, T = 128, 4, 65, 64
    per_layer = 2 * (C * 3 * C + C * C + C * 4 * C + 4 * C * C) + 2 * 2 * T * C
    assert m.flops_per_token() == 3 * (L * per_layer + 2 * C * V)
    assert m.flops_per_token(16) < m.flops_per_token()
    assert m.flops_per_step(8, 32) == 8 * 32 * m.flops_per_token(32)


# --------------------------------------------------------------------- bad input


def test_bad_inputs_name_the_value_and_what_was_expected():
    m = _model()
    idx, tgt = _batch(m)
    with pytest.raises(ValueError, match=r"token id 7 is outside \[0, 7\)"):
        m.forward(np.full((1, 3), 7))
    with pytest.raises(ValueError, match="idx has T=7, longer than block_size=6"):
        m.forward(np.zeros((1, 7), int))
    with pytest.raises(ValueError, match=r"target id 9 is outside \[0, 7\)"):
        m.forward(idx, np.full_like(idx, 9))
    with pytest.raises(ValueError, match=r"targets have shape \(2, 4\); expected \(2, 5\)"):
        m.forward(idx, tgt[:, :4])
    with pytest.raises(ValueError, match="idx must be a 2-D integer array"):
        m.forward(idx.astype(float))
    with pytest.raises(ValueError, match="idx must be a 2-D integer array"):
        m.forward(idx[0])
    with pytest.raises(ValueError, match="dtype must be float32 or float64, got float16"):
        GPT(m.cfg, dtype=np.float16)
    with pytest.raises(TypeError, match="cfg must be a GPTConfig"):
        GPT({"n_layer": 2})


def test_bad_params_are_named():
    m = _model()
    idx, _ = _batch(m)
    w = m.params.pop("blocks.1.mlp.w_fc")
    with pytest.raises(ValueError, match=r"params lacks 'blocks.1.mlp.w_fc'; expected .*\(6, 24\)"):
        m.forward(idx)
    m.params["blocks.1.mlp.w_fc"] = w.T
    with pytest.raises(ValueError, match=r"'blocks.1.mlp.w_fc'\] has shape \(24, 6\); expected"):
        m.forward(idx)
    m.params["blocks.1.mlp.w_fc"] = w.astype(np.float32)
    with pytest.raises(TypeError, match="has dtype float32; the model is float64"):
        m.forward(idx)
    m.params["blocks.1.mlp.w_fc"] = w
    m.params["blocks.0.alpha"] = np.zeros(1)
    with pytest.raises(ValueError, match="unexpected key 'blocks.0.alpha' for variant 'pre-ln'"):
        m.forward(idx)


# --------------------------------------------------------------------- broken backward


def test_a_model_with_a_broken_tied_gradient_fails_the_check(monkeypatch):
    """Forget the embedding's share of the wte gradient: the check must catch it."""
    real = M.embedding_backward

    def head_only(dout, cache, dwte=None):
        return dwte, real(dout, cache)[1]  # the head's dwte, the embedding's rows not added

    monkeypatch.setattr(M, "embedding_backward", head_only)
    rows = model_checks(seed=0, variants=("post-ln",))
    bad = [r for r in rows if not r.passed]
    assert bad and all(r.worst.startswith("wte") for r in bad), [r.row() for r in rows]


@pytest.mark.parametrize("variant", ["pre-ln", "post-ln", "deepnorm"])
def test_a_releasing_backward_gives_the_same_bytes_and_spends_the_cache(variant):
    m = _model(variant, dtype=np.float32)
    randomize_params(m.params, np.random.default_rng(3))
    idx, tgt = _batch(m)
    g, dxs = m.backward_stream(m.forward(idx, tgt)[2])
    cache = m.forward(idx, tgt)[2]
    probs = cache.ce.probs.copy()
    g2, dxs2 = m.backward_stream(cache, dloss=0.5, release=True)
    assert all(g2[k].tobytes() == (0.5 * g[k]).tobytes() for k in g)  # 0.5: a power of two
    assert all(a.tobytes() == (0.5 * b).tobytes() for a, b in zip(dxs2, dxs, strict=True))
    assert all(c is None for c in cache.blocks) and not np.array_equal(cache.ce.probs, probs)
    with pytest.raises(ValueError, match="spent by a backward with release=True"):
        m.backward(cache)
