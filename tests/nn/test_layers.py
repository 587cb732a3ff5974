"""Layer pairs: float64 finite-difference checks, edge shapes, stability, dtypes, bad input."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resgrad import Residual
from resgrad.nn import layers as L
from resgrad.verify.selfcheck import RTOL, compare, layer_checks

# the checks run inside the tests (a session fixture), not at import: a crash in one
# backward pass fails those tests instead of ending the collection with "1 error"
NAMES = ["linear", "linear (no bias)", "tanh", "gelu (tanh approx.)", "gelu (exact, erf)", "relu",
         "layernorm", "dropout (train, p=0.3)", "embedding (token + position)", "causal sdpa",
         "causal sdpa (dropout 0.3)", "multi-head attention", "attention key bias (= 0)",
         "mlp (C -> 4C -> C)", "cross-entropy (ignore index)"]  # fmt: skip


@pytest.fixture(scope="session")
def check_rows():
    return {r.name: r for r in layer_checks(seed=0)}


@pytest.fixture(scope="session")
def reference_rows():
    """The same checks on the readable NumPy passes: the compiled kernels switched off."""
    from resgrad.nn import kernels

    was, kernels.ENABLED = kernels.ENABLED, False
    try:
        return {r.name: r for r in layer_checks(seed=0)}
    finally:
        kernels.ENABLED = was


@pytest.mark.parametrize("name", NAMES)
def test_every_layer_passes_a_full_float64_check_on_the_numpy_passes(name, reference_rows):
    r = reference_rows[name]
    assert r.passed and r.max_error < RTOL, r.row()


def test_the_check_rows_are_the_layers_listed_here(check_rows):
    assert list(check_rows) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_every_layer_passes_a_full_float64_check(name, check_rows):
    r = check_rows[name]
    assert r.passed and r.max_error < RTOL, r.row()
    if r.mode == "full":
        assert r.n_floor <= r.n_checked // 3, r.row()  # most entries are judged relatively


def test_layer_check_covers_every_layer_of_the_issue(check_rows):
    names = " ".join(check_rows)
    for needle in (
        "linear",
        "linear (no bias)",
        "tanh",
        "gelu",
        "relu",
        "layernorm",
        "dropout",
        "embedding",
        "causal sdpa",
        "multi-head attention",
        "mlp",
        "cross-entropy",
    ):
        assert needle in names


def _check(fn, args, grads, dout=None):
    return compare("t", fn, args, grads, dout=dout)


# --------------------------------------------------------------------- edge shapes


@pytest.mark.parametrize(
    "B, T, C, H",
    [(1, 1, 4, 1), (1, 3, 5, 1), (2, 4, 3, 3), (1, 2, 7, 7), (3, 1, 6, 2)],
    ids=["B1-T1-one-head", "C5-one-head", "head-size-1", "C7-head-size-1", "T1"],
)
def test_attention_edge_shapes(B, T, C, H):
    rng = np.random.default_rng(B * 100 + T * 10 + C)
    x = rng.standard_normal((B, T, C))
    w, b = rng.standard_normal((C, 3 * C)) / np.sqrt(C), 0.3 * rng.standard_normal(3 * C)
    wp, bp = rng.standard_normal((C, C)) / np.sqrt(C), 0.3 * rng.standard_normal(C)
    out, c = L.attention_forward(x, w, b, wp, bp, H)
    assert out.shape == (B, T, C)
    dout = rng.standard_normal(out.shape)
    dx, dw, db, dwp, dbp = L.attention_backward(dout, c)
    r = _check(
        lambda **_: L.attention_forward(x, w, b, wp, bp, H)[0],
        {"x": x, "w": w, "bq": b[:C], "bv": b[2 * C :], "wp": wp, "bp": bp},
        {"x": dx, "w": dw, "bq": db[:C], "bv": db[2 * C :], "wp": dwp, "bp": dbp},
        dout,
    )
    assert r.passed and r.max_error < RTOL, r.row()
    assert np.abs(db[C : 2 * C]).max() < 1e-12  # the key bias cannot move a softmax


def test_t1_attention_is_the_value_projection():
    """With one position, the softmax is 1: attention returns v, projected."""
    rng = np.random.default_rng(0)
    C = 4
    x = rng.standard_normal((2, 1, C))
    w, wp = rng.standard_normal((C, 3 * C)), rng.standard_normal((C, C))
    out, _ = L.attention_forward(x, w, None, wp, None, 2)
    np.testing.assert_allclose(out, (x @ w[:, 2 * C :]) @ wp, rtol=1e-12)


def test_causal_attention_never_looks_ahead():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 2, 5, 3)) for _ in range(3))
    y, c = L.sdpa_forward(q, k, v)
    att = L.sdpa_probs(c)  # (B,H,T,T) held, or recomputed from the compiled attention's lse
    assert np.all(np.triu(att[0, 0], k=1) == 0)
    np.testing.assert_allclose(att.sum(-1), 1.0)
    k2, v2 = k.copy(), v.copy()
    k2[..., 3:, :] += 10.0  # change the future
    v2[..., 3:, :] -= 7.0
    y2, _ = L.sdpa_forward(q, k2, v2)
    np.testing.assert_array_equal(y[..., :3, :], y2[..., :3, :])


@pytest.mark.parametrize("block", [1, 2, 3, 6])
def test_causal_attention_in_query_blocks_is_the_one_shot_attention(block, monkeypatch):
    """Blocks skip the keys after each block's last query: same y, same gradients (the
    NumPy steps' blocks: the compiled attention, which has its own tiles, is left out)."""
    from resgrad.nn import kernels

    monkeypatch.setattr(kernels, "causal_attention", lambda *a: None)
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((2, 3, 7, 4)) for _ in range(3))
    dy = rng.standard_normal(q.shape)
    y0, c0 = L.sdpa_forward(q, k, v, block=7)  # one block: the whole square at once
    y, c = L.sdpa_forward(q, k, v, block=block)
    np.testing.assert_allclose(y, y0, rtol=1e-13, atol=1e-14)
    assert np.all(np.triu(c.att, k=1) == 0)  # the skipped part is exactly 0, rows sum to 1
    np.testing.assert_allclose(c.att.sum(-1), 1.0, rtol=1e-14)
    for bwd_block in (block, 7, 2):  # the backward's blocks need not be the forward's
        for g, g0 in zip(L.sdpa_backward(dy, c, block=bwd_block), L.sdpa_backward(dy, c0)):
            np.testing.assert_allclose(g, g0, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("p", [0.0, 0.3])
def test_causal_attention_in_blocks_passes_a_full_float64_check(p):
    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal((1, 2, 5, 3)) for _ in range(3))
    dy = rng.standard_normal(q.shape)

    def sdpa(q, k, v):
        drop_rng = np.random.default_rng(9)  # the same dropout mask on every call
        return L.sdpa_forward(q, k, v, dropout=p, train=True, rng=drop_rng, block=2)[0]

    _, c = L.sdpa_forward(q, k, v, dropout=p, train=True, rng=np.random.default_rng(9), block=2)
    dq, dk, dv = L.sdpa_backward(dy, c, block=2)
    r = compare(
        "blocked sdpa", sdpa, {"q": q, "k": k, "v": v}, {"q": dq, "k": dk, "v": dv}, dout=dy
    )
    assert r.passed and r.max_error < RTOL, r.row()


def test_causal_attention_in_blocks_matches_torch(torch):
    rng = np.random.default_rng(10)
    q, k, v = (rng.standard_normal((2, 2, 9, 4)) for _ in range(3))
    dy = rng.standard_normal(q.shape)
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    ty = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    ty.backward(torch.tensor(dy))
    y, c = L.sdpa_forward(q, k, v, block=4)  # blocks of 4, 4 and 1 queries
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-12, atol=1e-14)
    for mine, ref in zip(L.sdpa_backward(dy, c, block=4), (tq, tk, tv)):
        np.testing.assert_allclose(mine, ref.grad.numpy(), rtol=1e-10, atol=1e-13)


def test_a_bad_attention_block_is_refused():
    q = np.zeros((1, 1, 2, 2))
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="block must be a positive integer"):
            L.sdpa_forward(q, q, q, block=bad)


def test_causal_mask_is_cached_once_per_T_and_read_only():
    assert L.causal_mask(7, "float32") is L.causal_mask(7, "float32")
    m = L.causal_mask(3)
    assert not m.flags.writeable
    np.testing.assert_array_equal(np.isinf(m), np.triu(np.ones((3, 3), bool), 1))


@pytest.mark.parametrize("V", [2, 3])
def test_cross_entropy_with_two_classes_and_one_position(V):
    rng = np.random.default_rng(V)
    logits = rng.standard_normal((1, 1, V))
    t = np.array([[1]])
    loss, c = L.cross_entropy_forward(logits, t)
    z = logits[0, 0]
    assert loss == pytest.approx(np.log(np.exp(z).sum()) - z[1], rel=1e-14)
    r = _check(
        lambda lg: L.cross_entropy_forward(lg, t)[0],
        {"lg": logits},
        {"lg": L.cross_entropy_backward(1.0, c)},
    )
    assert r.passed and r.max_error < RTOL, r.row()


def test_layernorm_with_C_not_a_power_of_two_and_one_row():
    rng = np.random.default_rng(3)
    for shape in [(1, 1, 7), (2, 3, 5)]:
        x = rng.standard_normal(shape)
        g, b = 1 + 0.2 * rng.standard_normal(shape[-1]), rng.standard_normal(shape[-1])
        out, c = L.layernorm_forward(x, g, b)
        np.testing.assert_allclose(((out - b) / g).mean(-1), 0, atol=1e-12)
        dout = rng.standard_normal(shape)
        dx, dg, db = L.layernorm_backward(dout, c)
        r = _check(
            lambda x, g, b: L.layernorm_forward(x, g, b)[0],
            {"x": x, "g": g, "b": b},
            {"x": dx, "g": dg, "b": db},
            dout,
        )
        assert r.passed, r.row()


def test_layernorm_without_bias():
    x = np.random.default_rng(0).standard_normal((2, 3))
    out, c = L.layernorm_forward(x, np.ones(3))
    dx, dg, db = L.layernorm_backward(np.ones_like(out), c)
    assert db is None and dg.shape == (3,)
    np.testing.assert_allclose(dx, 0, atol=1e-12)  # a shift of every input changes nothing


# --------------------------------------------------------------------- cross-entropy


def test_cross_entropy_is_stable_at_logits_of_1e4():
    logits = np.array([[[1e4, -1e4, 0.0], [5e3, 5e3 + 1.0, -1e4]]])  # (1, 2, 3)
    t = np.array([[1, 0]])
    loss, c = L.cross_entropy_forward(logits, t)
    # row 0: target is 2e4 below the max; row 1: two logits 1 apart, target the smaller
    expected = (2e4 + 1.0 + np.log1p(np.exp(-1.0))) / 2
    assert np.isfinite(loss)
    assert loss == pytest.approx(expected, rel=1e-12)
    d = L.cross_entropy_backward(1.0, c)
    assert np.all(np.isfinite(d))
    np.testing.assert_allclose(d.sum(-1), 0, atol=1e-15)
    np.testing.assert_allclose(d[0, 0], [0.5, -0.5, 0.0], atol=1e-15)


def test_cross_entropy_float32_is_stable_at_1e4_too():
    logits = (np.array([[[1e4, -1e4, 3.0]]]) * np.ones((2, 1, 1))).astype(np.float32)
    loss, c = L.cross_entropy_forward(logits, np.array([[0], [2]]))
    assert np.isfinite(loss) and loss == pytest.approx((0.0 + (1e4 - 3.0)) / 2, rel=1e-6)
    assert L.cross_entropy_backward(1.0, c).dtype == np.float32


def test_ignore_index_drops_positions_from_the_loss_and_the_gradient():
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((2, 3, 4))
    t = np.array([[0, -100, 2], [3, 3, -100]])
    loss, c = L.cross_entropy_forward(logits, t, ignore_index=-100)
    keep = t != -100
    ref, _ = L.cross_entropy_forward(logits[keep][None], t[keep][None])
    assert loss == pytest.approx(ref, rel=1e-14)
    d = L.cross_entropy_backward(1.0, c)
    assert np.all(d[~keep] == 0)
    assert np.all(d[keep] != 0)


def test_all_positions_ignored_gives_zero_loss_and_gradient():
    logits = np.ones((1, 2, 3))
    loss, c = L.cross_entropy_forward(logits, np.full((1, 2), 7), ignore_index=7)
    assert loss == 0.0
    assert not L.cross_entropy_backward(1.0, c).any()


# --------------------------------------------------------------------- dropout


def test_dropout_eval_is_the_identity_and_draws_nothing():
    x = np.arange(6.0).reshape(2, 3)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    out, c = L.dropout_forward(x, 0.5, train=False, rng=rng)
    np.testing.assert_array_equal(out, x)
    assert out is not x  # fresh
    assert rng.bit_generator.state == state
    np.testing.assert_array_equal(L.dropout_backward(np.ones((2, 3)), c), 1.0)


def test_dropout_mask_is_seeded_scaled_and_about_p():
    x = np.ones((200, 50), dtype=np.float32)
    a, _ = L.dropout_forward(x, 0.25, train=True, rng=np.random.default_rng(9))
    b, _ = L.dropout_forward(x, 0.25, train=True, rng=np.random.default_rng(9))
    np.testing.assert_array_equal(a, b)
    assert a.dtype == np.float32
    assert set(np.unique(a)) == {0.0, np.float32(1 / 0.75)}
    assert abs((a == 0).mean() - 0.25) < 0.02
    c, _ = L.dropout_forward(x, 0.25, train=True, rng=np.random.default_rng(10))
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5])
def test_dropout_rejects_p_outside_0_1(p):
    with pytest.raises(ValueError, match=r"dropout p must be in \[0, 1\)"):
        L.dropout_forward(np.ones(3), p, train=True, rng=np.random.default_rng(0))


def test_dropout_in_training_needs_an_rng():
    with pytest.raises(ValueError, match="needs rng"):
        L.dropout_forward(np.ones(3), 0.1, train=True)


# --------------------------------------------------------------------- activations


def test_gelu_matches_the_tanh_formula_and_relu_and_tanh_are_exact():
    x = np.linspace(-5, 5, 101)
    g, _ = L.gelu_forward(x)
    np.testing.assert_allclose(
        g, 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))), rtol=1e-15
    )
    np.testing.assert_array_equal(L.relu_forward(x)[0], np.maximum(x, 0))
    np.testing.assert_array_equal(L.tanh_forward(x)[0], np.tanh(x))


def test_exact_gelu_is_x_times_the_normal_cdf_and_its_derivative():
    """Against math.erf and math.exp one entry at a time, not scipy: x Phi(x) and its
    derivative Phi(x) + x phi(x), and far from the tanh form where the two differ."""
    x = np.linspace(-6, 6, 121)
    out, c = L.gelu_erf_forward(x)
    ref = [v * 0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x]
    # atol: for x << 0, 1 + erf(x / sqrt(2)) cancels, in every implementation (torch's too)
    np.testing.assert_allclose(out, ref, rtol=1e-15, atol=1e-15)
    phi = [math.exp(-v * v / 2) / math.sqrt(2 * math.pi) for v in x]  # the normal density
    dref = [0.5 * (1 + math.erf(v / math.sqrt(2))) + v * p for v, p in zip(x, phi)]
    dx = L.gelu_erf_backward(np.ones_like(x), c)
    np.testing.assert_allclose(dx, dref, rtol=1e-14, atol=1e-16)
    # hand values: GELU(1) = Phi(1) = 0.8413447460685429, GELU'(0) = 1/2
    np.testing.assert_allclose(L.gelu_erf_forward(np.array([1.0, -1.0]))[0],
                               [0.8413447460685429, -0.15865525393145707], rtol=1e-15)  # fmt: skip
    assert L.gelu_erf_backward(np.ones(1), L.gelu_erf_forward(np.zeros(1))[1])[0] == 0.5
    # the tanh form differs by up to ~5e-4 here: the two are different functions
    assert 1e-4 < np.abs(out - L.gelu_forward(x)[0]).max() < 1e-3


def test_the_mlp_uses_the_activation_it_is_given_and_checks_in_float64():
    rng = np.random.default_rng(3)
    C = 4
    x = 2 * rng.standard_normal((2, 3, C))
    w = {"w_fc": rng.standard_normal((C, 4 * C)), "b_fc": rng.standard_normal(4 * C),
         "w_proj": rng.standard_normal((4 * C, C)), "b_proj": rng.standard_normal(C)}  # fmt: skip
    out, c = L.mlp_forward(x, *w.values(), activation="gelu-erf")
    h = x @ w["w_fc"] + w["b_fc"]
    ref = L.gelu_erf_forward(h)[0] @ w["w_proj"] + w["b_proj"]
    np.testing.assert_allclose(out, ref, rtol=1e-13)
    assert np.abs(out - L.mlp_forward(x, *w.values())[0]).max() > 1e-6  # not the tanh form
    dout = rng.standard_normal(out.shape)
    grads = dict(zip(("x", *w), L.mlp_backward(dout, c)))
    r = _check(lambda x, **p: L.mlp_forward(x, *p.values(), activation="gelu-erf")[0],
               {"x": x, **w}, grads, dout)  # fmt: skip
    assert r.passed and r.max_error < RTOL, r.row()
    mlp = L.MLP(w, activation="gelu-erf")
    np.testing.assert_array_equal(mlp.forward(x)[0], out)
    with pytest.raises(ValueError, match="unknown activation 'gelu_new'; expected one of gelu-"):
        L.mlp_forward(x, *w.values(), activation="gelu_new")


def test_a_broken_exact_gelu_backward_fails_the_check(monkeypatch):
    """The erf GELU's row of the float64 check is not vacuous: drop x phi(x) and it fails."""
    import resgrad.verify.selfcheck as S

    monkeypatch.setattr(S, "gelu_erf_backward", lambda dout, c: dout * c.cdf)
    row = next(r for r in S.layer_checks() if r.name == "gelu (exact, erf)")
    assert not row.passed and row.max_error > 1e-2


def test_softmax_is_stable_and_normalized():
    s = L.softmax(np.array([[1e4, 1e4 - 1.0, -1e4]]))
    np.testing.assert_allclose(s.sum(), 1.0)
    np.testing.assert_allclose(s[0, :2], [1 / (1 + np.exp(-1)), np.exp(-1) / (1 + np.exp(-1))])


# --------------------------------------------------------------------- dtypes


def test_float32_in_float32_out_no_silent_upcast():
    rng = np.random.default_rng(0)
    f = np.float32
    B, T, C, V = 2, 3, 4, 5
    x = rng.standard_normal((B, T, C)).astype(f)
    w = rng.standard_normal((C, 3 * C)).astype(f)
    b = np.zeros(3 * C, f)
    wp, bp = rng.standard_normal((C, C)).astype(f), np.zeros(C, f)
    out, c = L.attention_forward(x, w, b, wp, bp, 2)
    assert out.dtype == f
    assert all(a is None or a.dtype == f for a in L.attention_backward(out, c))
    w1, w2 = rng.standard_normal((C, 4 * C)).astype(f), rng.standard_normal((4 * C, C)).astype(f)
    out, c = L.mlp_forward(x, w1, None, w2, None)
    assert out.dtype == f
    assert all(a is None or a.dtype == f for a in L.mlp_backward(out, c))
    out, c = L.layernorm_forward(x, np.ones(C, f), np.zeros(C, f))
    assert out.dtype == f and all(a.dtype == f for a in L.layernorm_backward(out, c))
    out, c = L.gelu_forward(x)
    assert out.dtype == f and L.gelu_backward(out, c).dtype == f
    out, c = L.tanh_forward(x)
    assert L.tanh_backward(out, c).dtype == f
    out, c = L.dropout_forward(x, 0.5, train=True, rng=np.random.default_rng(0))
    assert out.dtype == f and L.dropout_backward(out, c).dtype == f
    wte, wpe = rng.standard_normal((V, C)).astype(f), rng.standard_normal((T, C)).astype(f)
    out, c = L.embedding_forward(np.zeros((B, T), int), wte, wpe)
    assert out.dtype == f and all(a.dtype == f for a in L.embedding_backward(out, c))
    loss, c = L.cross_entropy_forward(
        rng.standard_normal((B, T, V)).astype(f), np.ones((B, T), int)
    )
    assert L.cross_entropy_backward(1.0, c).dtype == f


# --------------------------------------------------------------------- bad input


def test_bad_inputs_name_the_value_and_the_expectation():
    x = np.zeros((2, 3, 4))
    with pytest.raises(ValueError, match=r"x has shape \(2, 3, 4\); expected last dimension 5"):
        L.linear_forward(x, np.zeros((5, 2)))
    with pytest.raises(ValueError, match=r"b has shape \(3,\); expected \(2,\)"):
        L.linear_forward(x, np.zeros((4, 2)), np.zeros(3))
    with pytest.raises(ValueError, match="n_head=3 does not divide n_embd C=4"):
        L.attention_forward(x, np.zeros((4, 12)), None, np.zeros((4, 4)), None, 3)
    with pytest.raises(ValueError, match=r"w_qkv has shape \(4, 8\); expected \(4, 12\)"):
        L.attention_forward(x, np.zeros((4, 8)), None, np.zeros((4, 4)), None, 2)
    with pytest.raises(ValueError, match=r"target id 5 is outside \[0, 5\)"):
        L.cross_entropy_forward(np.zeros((1, 2, 5)), np.array([[0, 5]]))
    with pytest.raises(ValueError, match=r"target id -1 is outside \[0, 5\)"):
        L.cross_entropy_forward(np.zeros((1, 2, 5)), np.array([[0, -1]]), ignore_index=-100)
    with pytest.raises(ValueError, match=r"targets must be an integer array of shape \(1, 2\)"):
        L.cross_entropy_forward(np.zeros((1, 2, 5)), np.array([0, 1]))
    with pytest.raises(ValueError, match=r"token id 9 is outside \[0, 5\)"):
        L.embedding_forward(np.array([[1, 9]]), np.zeros((5, 3)), np.zeros((4, 3)))
    with pytest.raises(ValueError, match="T=5 is longer than the block size 4"):
        L.embedding_forward(np.zeros((1, 5), int), np.zeros((5, 3)), np.zeros((4, 3)))
    with pytest.raises(ValueError, match="2-D integer array"):
        L.embedding_forward(np.zeros((1, 2)), np.zeros((5, 3)), np.zeros((4, 3)))
    with pytest.raises(ValueError, match=r"g has shape \(3, 1\)"):
        L.layernorm_forward(x, np.ones((3, 1)))


# --------------------------------------------------------------------- broken backward


def test_a_broken_backward_fails_the_check(monkeypatch):
    """Drop LayerNorm's mean(dxhat * xhat) term: the full check must fail loudly."""

    def broken(dout, cache):
        xhat, rstd, g, _ = cache
        dxhat = dout * g
        dx = (dxhat - dxhat.mean(-1, keepdims=True)) * rstd  # the xhat term is missing
        return dx, (dout * xhat).reshape(-1, g.size).sum(0), dout.reshape(-1, g.size).sum(0)

    monkeypatch.setattr(L, "layernorm_backward", broken)
    import resgrad.verify.selfcheck as S

    monkeypatch.setattr(S, "layernorm_backward", broken)
    row = next(r for r in S.layer_checks() if r.name == "layernorm")
    assert not row.passed and row.max_error > 1e-3 and row.worst.startswith("x[")


def test_a_softmax_backward_without_its_sum_term_fails(monkeypatch):
    import resgrad.verify.selfcheck as S

    def broken(dy, cache):
        if isinstance(cache, L.FlashCache):  # the compiled attention's: q unscaled, p recomputed
            (qs, k, v, _, _), att, scale_in_softmax = cache, L.sdpa_probs(cache), True
        else:
            qs, k, v, att, drop, scale_in_softmax = cache  # qs: q itself where the kernel scaled
        datt = dy @ v.swapaxes(-1, -2)
        ds = att * datt / np.sqrt(qs.shape[-1])  # forgot - sum(datt * att)
        dq = ds @ k if scale_in_softmax else ds @ k / np.sqrt(qs.shape[-1])
        return dq, ds.swapaxes(-1, -2) @ qs, att.swapaxes(-1, -2) @ dy

    monkeypatch.setattr(S, "sdpa_backward", broken)
    row = next(r for r in S.layer_checks() if r.name == "causal sdpa")
    assert not row.passed and row.max_error > 1e-3


# --------------------------------------------------------------------- module objects


def test_module_objects_plug_into_the_residual_core():
    rng = np.random.default_rng(2)
    C = 5
    mlp = L.MLP(
        {
            "w_fc": rng.standard_normal((C, 4 * C)) / np.sqrt(C),
            "b_fc": rng.standard_normal(4 * C) * 0.2,
            "w_proj": rng.standard_normal((4 * C, C)) / np.sqrt(4 * C),
            "b_proj": rng.standard_normal(C) * 0.2,
        }
    )
    block = Residual(mlp)
    x = rng.standard_normal((2, 3, C))
    out, c = block.forward(x)
    dout = rng.standard_normal(out.shape)
    dx, grads = block.backward(dout, c)
    assert set(grads) == set(mlp.params)
    r = _check(lambda **_: block.forward(x)[0], {"x": x, **mlp.params}, {"x": dx, **grads}, dout)
    assert r.passed and r.max_error < RTOL, r.row()
    attn = L.CausalSelfAttention(
        {"w_qkv": rng.standard_normal((C, 3 * C)), "w_proj": rng.standard_normal((C, C))}, 5
    )
    out, c = Residual(attn).forward(x)
    assert set(Residual(attn).backward(out, c)[1]) == {"w_qkv", "w_proj"}
    lin, ln = L.Linear(np.eye(C)), L.LayerNorm(np.ones(C), np.zeros(C))
    assert set(lin.backward(*lin.forward(x))[1]) == {"w"}
    assert set(ln.backward(*ln.forward(x))[1]) == {"g", "b"}


# --------------------------------------------------------------------- properties


@settings(max_examples=15, deadline=None)
@given(
    B=st.integers(1, 3),
    T=st.integers(1, 5),
    H=st.integers(1, 3),
    D=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
)
def test_attention_keeps_shapes_and_its_input_gradient_checks(B, T, H, D, seed):
    rng = np.random.default_rng(seed)
    C = H * D
    x = rng.standard_normal((B, T, C))
    w, wp = rng.standard_normal((C, 3 * C)) / np.sqrt(C), rng.standard_normal((C, C))
    out, c = L.attention_forward(x, w, None, wp, None, H)
    dout = rng.standard_normal(out.shape)
    dx, dw, db, dwp, dbp = L.attention_backward(dout, c)
    assert out.shape == dx.shape == x.shape and dw.shape == w.shape and dwp.shape == wp.shape
    assert db is None and dbp is None
    r = compare(
        "x",
        lambda x: L.attention_forward(x, w, None, wp, None, H)[0],
        {"x": x},
        {"x": dx},
        dout=dout,
        mode="directional",
        directions=2,
    )
    assert r.passed, r.row()


def test_embedding_backward_adds_into_a_given_gradient_only_the_rows_it_touches():
    # the tied LM head's dwte: the embedding's rows are added into it in place, bit for bit
    # what adding the embedding's own dense gradient would give
    rng = np.random.default_rng(0)
    idx = np.array([[3, 1, 3], [0, 3, 1]])  # (B, T) token 3 thrice, 2 and 4 never
    wte, wpe = rng.standard_normal((6, 4)), rng.standard_normal((3, 4))
    dout = rng.standard_normal((2, 3, 4))  # (B, T, C)
    _, c = L.embedding_forward(idx, wte, wpe)
    head = rng.standard_normal((6, 4))
    dense, dwpe = L.embedding_backward(dout, c)
    into = head.copy()
    got, dwpe2 = L.embedding_backward(dout, c, dwte=into)
    assert got is into and got.tobytes() == (head + dense).tobytes()
    assert dwpe2.tobytes() == dwpe.tobytes()
    np.testing.assert_array_equal(got[[2, 4, 5]], head[[2, 4, 5]])  # untouched rows
    np.testing.assert_allclose(dense[3], dout[0, 0] + dout[0, 2] + dout[1, 1], rtol=1e-15)
