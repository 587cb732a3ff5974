"""The transformer block in every residual scheme: semantics, float64 checks, inits."""

import dataclasses

import numpy as np
import pytest

import resgrad.nn.blocks as Bk
from resgrad.nn import layers as L
from resgrad.nn.model import GPTConfig
from resgrad.verify.selfcheck import RTOL, block_checks, compare, randomize_params


@pytest.fixture(scope="session")
def check_rows():  # run inside the tests, not at import: a crash fails these tests only
    return {r.name: r for r in block_checks(seed=0)}


@pytest.mark.parametrize("variant", Bk.VARIANTS)
def test_every_block_scheme_passes_a_full_float64_check(variant, check_rows):
    r = check_rows[f"block {variant}"]
    assert r.passed and r.max_error < RTOL, r.row()
    assert r.n_checked > 500 and r.n_floor < r.n_checked // 10, r.row()


def _cfg(variant, **kw):
    return GPTConfig(n_layer=3, n_head=2, n_embd=6, variant=variant, **kw)


def _block(variant, seed=0, **kw):
    cfg = _cfg(variant, **kw)
    rng = np.random.default_rng(seed)
    params = Bk.init_block_params(cfg, 1, rng, np.float64)
    randomize_params(params, rng)
    x = rng.standard_normal((2, 4, cfg.n_embd))
    return cfg, params, x


def _reference(variant, x, P, cfg, layer=1, rng=None):
    """The scheme's formula written out with the layer functions, forward only; with
    ``rng``, in training mode, each sublayer's dropout drawn from it in the block's order."""
    p = f"blocks.{layer}"
    drop = {} if rng is None else dict(dropout=cfg.dropout, train=True, rng=rng)

    def ln(i, h):
        return L.layernorm_forward(h, P[f"{p}.ln{i}.g"], P.get(f"{p}.ln{i}.b"), cfg.ln_eps)[0]

    def attn(h):
        w = [P.get(f"{p}.attn.{k}") for k in ("w_qkv", "b_qkv", "w_proj", "b_proj")]
        return L.attention_forward(h, *w, cfg.n_head, **drop)[0]

    def mlp(h):  # by hand: the GELU the config names between the two linear maps
        if drop:  # the layer's own, with its dropout
            w = [P.get(f"{p}.mlp.{k}") for k in ("w_fc", "b_fc", "w_proj", "b_proj")]
            return L.mlp_forward(h, *w, **drop, activation=cfg.activation)[0]
        gelu = {"gelu-tanh": L.gelu_forward, "gelu-erf": L.gelu_erf_forward}[cfg.activation]
        a = gelu(L.linear_forward(h, P[f"{p}.mlp.w_fc"], P.get(f"{p}.mlp.b_fc"))[0])[0]
        return L.linear_forward(a, P[f"{p}.mlp.w_proj"], P.get(f"{p}.mlp.b_proj"))[0]

    a = (2 * cfg.n_layer) ** 0.25
    if variant == "pre-ln":
        x = x + attn(ln(1, x))
        return x + mlp(ln(2, x))
    if variant == "post-ln":
        x = ln(1, x + attn(x))
        return ln(2, x + mlp(x))
    if variant == "none":
        return mlp(ln(2, attn(ln(1, x))))
    if variant == "residual":
        x = x + attn(x)
        return x + mlp(x)
    if variant == "rezero":
        al = P[f"{p}.alpha"][0]
        x = x + al * attn(x)
        return x + al * mlp(x)
    if variant == "ln-scaling":  # block i is at depth l = i + 1: each norm's output / l^p
        s = 1.0 / (layer + 1) ** cfg.ln_scaling_power
        x = x + attn(s * ln(1, x))
        return x + mlp(s * ln(2, x))
    x = ln(1, a * x + attn(x))  # deepnorm
    return ln(2, a * x + mlp(x))


@pytest.mark.parametrize("variant", Bk.VARIANTS)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("activation", ["gelu-tanh", "gelu-erf"])
def test_block_forward_is_the_schemes_formula(variant, bias, activation):
    cfg, P, x = _block(variant, bias=bias, activation=activation)
    out, _ = Bk.block_forward(x, P, "blocks.1", cfg)
    np.testing.assert_allclose(out, _reference(variant, x, P, cfg), rtol=1e-13, atol=1e-13)
    other = dataclasses.replace(cfg, activation=({"gelu-tanh", "gelu-erf"} - {activation}).pop())
    assert np.abs(out - Bk.block_forward(x, P, "blocks.1", other)[0]).max() > 1e-9


@pytest.mark.parametrize("variant", Bk.BLOCK_LN)
def test_every_layernorm_of_a_block_uses_the_configs_epsilon(variant):
    # a large epsilon moves every normalized value: a norm left at its default shows
    cfg, P, x = _block(variant, ln_eps=0.5)
    out, _ = Bk.block_forward(x, P, "blocks.1", cfg)
    np.testing.assert_allclose(out, _reference(variant, x, P, cfg), rtol=1e-13, atol=1e-13)
    small = dataclasses.replace(cfg, ln_eps=1e-5)
    assert np.abs(out - Bk.block_forward(x, P, "blocks.1", small)[0]).max() > 1e-3


@pytest.mark.parametrize("variant", Bk.VARIANTS)
def test_dropout_in_training_mode_reaches_both_sublayers_in_order(variant):
    """In training mode each sublayer drops out at the config's rate, attention's draws
    first and the MLP's after, from the one stream the block is given (a sublayer that
    dropped nothing, or drew out of turn, leaves the stream elsewhere for the next); out of
    training mode, the default, the block is its formula exactly."""
    cfg, P, x = _block(variant, dropout=0.3)
    out, _ = Bk.block_forward(x, P, "blocks.1", cfg, train=True, rng=np.random.default_rng(7))
    want = _reference(variant, x, P, cfg, rng=np.random.default_rng(7))
    np.testing.assert_allclose(out, want, rtol=1e-13, atol=1e-13)
    plain = _reference(variant, x, P, cfg)
    assert np.abs(out - plain).max() > 1e-3  # the dropout did something
    np.testing.assert_allclose(Bk.block_forward(x, P, "blocks.1", cfg)[0], plain, rtol=1e-13,
                               atol=1e-13)  # fmt: skip


@pytest.mark.parametrize("variant", ["pre-ln", "deepnorm"])
def test_an_exact_gelu_block_checks_in_float64(variant):
    cfg, P, x = _block(variant, seed=5, activation="gelu-erf")
    out, c = Bk.block_forward(x, P, "blocks.1", cfg)
    dout = np.random.default_rng(6).standard_normal(out.shape)
    dx, grads = Bk.block_backward(dout, c)
    r = compare(variant, lambda **_: Bk.block_forward(x, P, "blocks.1", cfg)[0],
                {"x": x, **P}, {"x": dx, **grads}, dout=dout, mode="directional")  # fmt: skip
    assert r.passed and r.max_error < RTOL, r.row()


@pytest.mark.parametrize("variant", Bk.VARIANTS)
def test_block_without_bias_checks_too(variant):
    cfg, P, x = _block(variant, seed=3, bias=False)
    out, c = Bk.block_forward(x, P, "blocks.1", cfg)
    dout = np.random.default_rng(4).standard_normal(out.shape)
    dx, grads = Bk.block_backward(dout, c)
    assert set(grads) == set(P)
    r = compare(
        variant,
        lambda **_: Bk.block_forward(x, P, "blocks.1", cfg)[0],
        {"x": x, **P},
        {"x": dx, **grads},
        dout=dout,
        mode="directional",
    )
    assert r.passed and r.max_error < RTOL, r.row()


def test_parameter_names_per_scheme():
    def leaves(variant, bias=True):
        cfg = _cfg(variant, bias=bias)
        return {k[len("blocks.2.") :] for k in Bk.block_param_shapes(cfg, 2)}

    core = {"attn.w_qkv", "attn.b_qkv", "attn.w_proj", "attn.b_proj"}
    core |= {"mlp.w_fc", "mlp.b_fc", "mlp.w_proj", "mlp.b_proj"}
    lns = {"ln1.g", "ln1.b", "ln2.g", "ln2.b"}
    for v in ("pre-ln", "post-ln", "none", "deepnorm", "ln-scaling"):
        assert leaves(v) == core | lns
    assert leaves("residual") == core
    assert leaves("rezero") == core | {"alpha"}
    assert leaves("pre-ln", bias=False) == {
        "attn.w_qkv",
        "attn.w_proj",
        "mlp.w_fc",
        "mlp.w_proj",
        "ln1.g",
        "ln2.g",
    }
    shapes = Bk.block_param_shapes(_cfg("rezero"), 0)
    assert shapes["blocks.0.alpha"] == (1,) and shapes["blocks.0.mlp.w_fc"] == (6, 24)


def test_gpt2_init_statistics():
    cfg = GPTConfig(n_layer=8, n_head=4, n_embd=256, variant="pre-ln")
    P = Bk.init_block_params(cfg, 0, np.random.default_rng(0), np.float64)
    assert P["blocks.0.attn.w_qkv"].std() == pytest.approx(0.02, rel=0.02)
    assert P["blocks.0.mlp.w_fc"].std() == pytest.approx(0.02, rel=0.02)
    proj = 0.02 / np.sqrt(2 * 8)
    assert P["blocks.0.attn.w_proj"].std() == pytest.approx(proj, rel=0.02)
    assert P["blocks.0.mlp.w_proj"].std() == pytest.approx(proj, rel=0.02)
    for k, a in P.items():
        if k.endswith((".b", "b_qkv", "b_proj", "b_fc")):
            assert not a.any(), k
        if k.endswith(".g"):
            assert np.all(a == 1), k
    assert P["blocks.0.attn.w_qkv"].dtype == np.float64


def test_xavier_init_statistics():
    cfg = GPTConfig(n_layer=2, n_head=4, n_embd=256, init="xavier")
    P = Bk.init_block_params(cfg, 1, np.random.default_rng(0), np.float32)
    C = 256
    assert P["blocks.1.attn.w_qkv"].std() == pytest.approx(np.sqrt(2 / (2 * C)), rel=0.02)
    assert P["blocks.1.mlp.w_fc"].std() == pytest.approx(np.sqrt(2 / (5 * C)), rel=0.02)
    assert P["blocks.1.attn.w_proj"].std() == pytest.approx(np.sqrt(1 / C), rel=0.02)
    assert all(a.dtype == np.float32 for a in P.values())


def test_deepnorm_constants_and_beta_scaled_init():
    assert Bk.deepnorm_alpha(2) == pytest.approx(np.sqrt(2.0))  # (2N)^(1/4), N = 2
    assert Bk.deepnorm_beta(2) == pytest.approx(0.5)  # (8N)^(-1/4)
    assert Bk.deepnorm_alpha(50) == pytest.approx(100**0.25)
    C, N = 128, 6
    kw = dict(n_layer=N, n_head=4, n_embd=C, init="xavier")
    base = Bk.init_block_params(GPTConfig(variant="post-ln", **kw), 0, np.random.default_rng(1))
    deep = Bk.init_block_params(GPTConfig(variant="deepnorm", **kw), 0, np.random.default_rng(1))
    beta = (8 * N) ** -0.25
    for k in ("attn.w_proj", "mlp.w_fc", "mlp.w_proj"):
        np.testing.assert_allclose(deep[f"blocks.0.{k}"], base[f"blocks.0.{k}"] * beta, rtol=1e-6)
    wq, bq = deep["blocks.0.attn.w_qkv"], base["blocks.0.attn.w_qkv"]
    np.testing.assert_array_equal(wq[:, : 2 * C], bq[:, : 2 * C])  # q and k keep gain 1
    np.testing.assert_allclose(wq[:, 2 * C :], bq[:, 2 * C :] * beta, rtol=1e-6)  # v: beta


def test_deepnorm_block_uses_alpha_on_the_skip_path():
    cfg, P, x = _block("deepnorm")
    _, c = Bk.block_forward(x, P, "blocks.1", cfg)
    assert c.alpha == pytest.approx((2 * 3) ** 0.25)


@pytest.mark.parametrize("power", [0.0, 0.25, 0.5, 1.0])
def test_ln_scaling_scales_each_norm_output_by_its_depth(power):
    """Block l (1-based) multiplies both its LayerNorm outputs by l^-p: at block 3 of 3,
    1/sqrt(3) for the paper's p = 1/2, and its float64 check passes at every p."""
    cfg = _cfg("ln-scaling", ln_scaling_power=power)
    rng = np.random.default_rng(2)
    P = Bk.init_block_params(cfg, 2, rng, np.float64)
    randomize_params(P, rng)
    x = rng.standard_normal((2, 4, 6))
    out, c = Bk.block_forward(x, P, "blocks.2", cfg)
    assert c.alpha == pytest.approx(3.0**-power, rel=1e-15)
    assert Bk.ln_scale(2, 0.5) == pytest.approx(1 / np.sqrt(3), rel=1e-15)
    np.testing.assert_allclose(out, _reference("ln-scaling", x, P, cfg, 2), rtol=1e-13, atol=1e-13)
    dout = rng.standard_normal(out.shape)
    dx, g = Bk.block_backward(dout, c)
    r = compare(f"ln-scaling p={power}", lambda **_: Bk.block_forward(x, P, "blocks.2", cfg)[0],
                {"x": x, **P}, {"x": dx, **g}, dout=dout)  # fmt: skip
    assert r.passed and r.max_error < RTOL, r.row()


def test_ln_scaling_at_power_0_is_pre_ln_exactly_on_the_same_params():
    cfg, P, x = _block("ln-scaling", seed=4, ln_scaling_power=0.0)
    pre = dataclasses.replace(cfg, variant="pre-ln", ln_scaling_power=None)
    out, c = Bk.block_forward(x, P, "blocks.1", cfg)
    out_pre, c_pre = Bk.block_forward(x, P, "blocks.1", pre)
    np.testing.assert_array_equal(out, out_pre)
    dout = np.random.default_rng(5).standard_normal(out.shape)
    (dx, g), (dx_pre, g_pre) = Bk.block_backward(dout, c), Bk.block_backward(dout, c_pre)
    np.testing.assert_array_equal(dx, dx_pre)
    assert g.keys() == g_pre.keys()
    for k in g:
        np.testing.assert_array_equal(g[k], g_pre[k], err_msg=k)
    half = dataclasses.replace(cfg, ln_scaling_power=0.5)  # not vacuous: p > 0 differs
    assert np.abs(Bk.block_forward(x, P, "blocks.1", half)[0] - out).max() > 1e-3


def test_a_backward_that_forgets_the_scale_fails_the_ln_scaling_check(monkeypatch):
    real = Bk._step_backward

    def unscaled(i, dout, c, p, variant, alpha, grads):  # the backward without d(s h) = s dh
        return real(i, dout, c, p, variant, 1.0, grads)

    monkeypatch.setattr(Bk, "_step_backward", unscaled)
    (r,) = block_checks(seed=0, variants=("ln-scaling",))
    assert not r.passed and r.max_error > 1e-2, r.row()


def test_ln_scaling_drops_the_scaled_init_of_the_residual_projections():
    """Sun et al. 2025: no 1/sqrt(2L) on attn.w_proj and mlp.w_proj; the rest as pre-ln."""
    kw = dict(n_layer=8, n_head=4, n_embd=256)
    pre = Bk.init_block_params(GPTConfig(**kw), 3, np.random.default_rng(1), np.float64)
    lns = Bk.init_block_params(GPTConfig(variant="ln-scaling", **kw), 3,
                               np.random.default_rng(1), np.float64)  # fmt: skip
    assert pre.keys() == lns.keys()
    for k in pre:
        if k.endswith("w_proj"):
            np.testing.assert_allclose(lns[k], pre[k] * np.sqrt(2 * 8), rtol=1e-12)
            assert lns[k].std() == pytest.approx(0.02, rel=0.03)
        else:
            np.testing.assert_array_equal(lns[k], pre[k])


def test_rezero_starts_as_the_identity_and_only_alpha_learns_first():
    cfg = _cfg("rezero")
    rng = np.random.default_rng(0)
    P = Bk.init_block_params(cfg, 1, rng, np.float64)
    assert P["blocks.1.alpha"].shape == (1,) and P["blocks.1.alpha"][0] == 0.0
    x = rng.standard_normal((2, 3, 6))
    out, c = Bk.block_forward(x, P, "blocks.1", cfg)
    np.testing.assert_array_equal(out, x)
    dout = rng.standard_normal(out.shape)
    dx, g = Bk.block_backward(dout, c)
    np.testing.assert_array_equal(dx, dout)  # the + x path alone
    assert g["blocks.1.alpha"][0] != 0.0
    assert all(not a.any() for k, a in g.items() if k != "blocks.1.alpha")
    r = compare(
        "alpha",
        lambda **_: Bk.block_forward(x, P, "blocks.1", cfg)[0],
        {"alpha": P["blocks.1.alpha"]},
        {"alpha": g["blocks.1.alpha"]},
        dout=dout,
    )
    assert r.passed and r.max_error < RTOL, r.row()


def test_rezero_alpha_is_shared_by_both_sublayers():
    """One alpha scales both f's; its gradient collects both contributions (alpha = 0.8)."""
    cfg, P, x = _block("rezero")
    assert [k for k in P if k.endswith("alpha")] == ["blocks.1.alpha"]
    out, c = Bk.block_forward(x, P, "blocks.1", cfg)
    dout = np.random.default_rng(1).standard_normal(out.shape)
    _, g = Bk.block_backward(dout, c)
    assert g["blocks.1.alpha"].shape == (1,)
    assert dout.ravel() @ c.mlp.f.ravel() != pytest.approx(g["blocks.1.alpha"][0], rel=1e-3)
    r = compare(
        "alpha",
        lambda **_: Bk.block_forward(x, P, "blocks.1", cfg)[0],
        {"alpha": P["blocks.1.alpha"]},
        {"alpha": g["blocks.1.alpha"]},
        dout=dout,
    )
    assert r.passed and r.max_error < RTOL, r.row()


def test_none_scheme_has_no_identity_path():
    cfg, P, x = _block("none")
    for k in P:
        if ".w_" in k:
            P[k][...] = 0.0  # every sublayer returns its output bias alone
    out, c = Bk.block_forward(x, P, "blocks.1", cfg)
    np.testing.assert_allclose(out, np.broadcast_to(P["blocks.1.mlp.b_proj"], out.shape))
    dx, _ = Bk.block_backward(np.ones_like(out), c)
    assert not dx.any()  # nothing of x reaches the output, so no gradient reaches x
    cfg2 = dataclasses.replace(cfg, variant="pre-ln")
    out2, c2 = Bk.block_forward(x, P, "blocks.1", cfg2)
    dx2, _ = Bk.block_backward(np.ones_like(out2), c2)
    np.testing.assert_array_equal(dx2, 1.0)  # pre-ln: the identity path delivers dout intact


def test_residual_core_carries_the_fan_out(monkeypatch):
    calls = []
    real = Bk.residual_backward

    def spy(dout, df):
        calls.append(dout.shape)
        return real(dout, df)

    monkeypatch.setattr(Bk, "residual_backward", spy)
    for variant, n in [("pre-ln", 2), ("post-ln", 2), ("residual", 2), ("rezero", 2)]:
        calls.clear()
        cfg, P, x = _block(variant)
        out, c = Bk.block_forward(x, P, "blocks.1", cfg)
        Bk.block_backward(np.ones_like(out), c)
        assert len(calls) == n, variant
    calls.clear()
    cfg, P, x = _block("none")
    out, c = Bk.block_forward(x, P, "blocks.1", cfg)
    Bk.block_backward(np.ones_like(out), c)
    assert calls == []  # no + x path, no fan-out


def test_a_residual_that_forgets_the_identity_path_fails_the_block_check(monkeypatch):
    monkeypatch.setattr(Bk, "residual_backward", lambda dout, df: df)
    rows = block_checks(seed=0, variants=("pre-ln", "residual"))
    for r in rows:
        assert not r.passed and r.max_error > 1e-2, r.row()
        assert r.worst.startswith(("x[", "blocks.1.ln1", "blocks.1.attn")), r.row()


def test_float32_block_stays_float32():
    cfg = _cfg("rezero")
    rng = np.random.default_rng(0)
    P = Bk.init_block_params(cfg, 0, rng, np.float32)
    P["blocks.0.alpha"][0] = 0.5
    x = rng.standard_normal((2, 3, 6)).astype(np.float32)
    for v in Bk.VARIANTS:
        c = dataclasses.replace(cfg, variant=v)
        Pv = Bk.init_block_params(c, 0, rng, np.float32)
        out, cache = Bk.block_forward(x, Pv, "blocks.0", c)
        dx, g = Bk.block_backward(out, cache)
        assert out.dtype == dx.dtype == np.float32, v
        assert all(a.dtype == np.float32 for a in g.values()), v


def test_unknown_names_are_refused():
    every = "pre-ln, post-ln, none, residual, rezero, deepnorm, ln-scaling"
    with pytest.raises(ValueError, match=f"unknown variant 'prenorm'; expected one of {every}$"):
        Bk.block_forward(np.zeros((1, 1, 6)), {}, "blocks.0", _Fake("prenorm"))
    with pytest.raises(ValueError, match="unknown init 'he'; expected one of gpt2, xavier"):
        Bk.init_block_params(_Fake("pre-ln", init="he"), 0, np.random.default_rng(0))


@dataclasses.dataclass
class _Fake:
    """A config that skipped GPTConfig's validation, to reach the block's own checks."""

    variant: str
    init: str = "gpt2"
    n_layer: int = 1
    n_head: int = 1
    n_embd: int = 6
    dropout: float = 0.0
    bias: bool = True
    ln_eps: float = 1e-5
    activation: str = "gelu-tanh"
