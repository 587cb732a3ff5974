"""The compiled kernels give their NumPy chains' bytes: every rounding, in the same order."""

import numpy as np
import pytest

from resgrad.nn import kernels
from resgrad.nn.layers import (
    _GELU_A,
    _GELU_K,
    gelu_backward,
    gelu_forward,
    layernorm_backward,
    layernorm_forward,
)


@pytest.fixture
def numpy_passes(monkeypatch):
    """Run the layers' readable NumPy passes: kernels off."""

    def off():
        monkeypatch.setattr(kernels, "ENABLED", False)

    return off


def _gelu_both(x, dout, numpy_passes):
    fused = gelu_forward(x)
    dx_fused = gelu_backward(dout, fused[1])
    numpy_passes()
    plain = gelu_forward(x)
    dx_plain = gelu_backward(dout, plain[1])
    return (fused[0], fused[1].t, dx_fused), (plain[0], plain[1].t, dx_plain)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(3, 7, 33), (1,), (64, 257)])
def test_gelu_kernels_give_the_numpy_passes_bytes(dtype, shape, numpy_passes):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 3).astype(dtype)  # tails where tanh saturates too
    dout = rng.standard_normal(shape).astype(dtype)
    f = x.dtype.type
    assert kernels.gelu_u(x, f(_GELU_A), f(_GELU_K)) is not None  # the kernel runs here
    fused, plain = _gelu_both(x, dout, numpy_passes)
    for a, b in zip(fused, plain):
        assert a.dtype == dtype and a.shape == shape
        assert a.tobytes() == b.tobytes()


def test_gelu_on_a_strided_view_takes_the_numpy_passes_and_agrees(numpy_passes):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((20, 30)).astype(np.float32)[:, ::2]  # not contiguous
    dout = rng.standard_normal(x.shape).astype(np.float32)
    assert kernels.gelu_u(x, np.float32(_GELU_A), np.float32(_GELU_K)) is None
    fused, plain = _gelu_both(x, dout, numpy_passes)
    for a, b in zip(fused, plain):
        assert a.tobytes() == b.tobytes()


def test_each_kernel_computes_its_formula():
    """Against the formulas themselves in float64 (independent of the NumPy chains)."""
    x = np.linspace(-4, 4, 101)
    a, k = _GELU_A, _GELU_K
    u = kernels.gelu_u(x, a, k)
    np.testing.assert_allclose(u, k * (x + a * x**3), rtol=1e-15, atol=1e-15)
    t = np.tanh(u)
    np.testing.assert_allclose(kernels.gelu_out(x, t), 0.5 * x * (1 + t), rtol=1e-15)
    dout = np.cos(x)
    want = dout * (0.5 * (1 + t) + 0.5 * x * k * (1 + 3 * a * x**2) * (1 - t**2))
    got = kernels.gelu_dx(dout, x, t, 1.5 * k * a, 0.5 * k)
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)


def test_kernels_off_or_mixed_dtypes_return_none(monkeypatch):
    x32, x64 = np.ones(4, np.float32), np.ones(4)
    assert kernels.gelu_out(x32, x64) is None  # one dtype or none
    assert kernels.gelu_out(np.ones(4, np.int64), np.ones(4, np.int64)) is None
    monkeypatch.setattr(kernels, "ENABLED", False)
    assert kernels.gelu_out(x64, x64) is None


def _layernorm_both(x, g, b, dout, numpy_passes):
    runs = []
    for off in (False, True):
        if off:
            numpy_passes()
        out, cache = layernorm_forward(x, g, b)
        dx, dg, db = layernorm_backward(dout, cache)
        runs.append([out, cache.xhat, cache.rstd, dx, dg] + ([] if db is None else [db]))
    return runs


# the contract of a kernel that rounds its own way (issue 35): its NumPy pass's result
# within 1e-12 relative in float64 and 1e-5 in float32, the same bytes on every run
TOL = {np.float64: 1e-12, np.float32: 1e-5}


def _close(a, b, dtype):
    scale = max(float(np.abs(b).max()), 1e-30)  # relative to the array's largest entry
    assert a.dtype == b.dtype == dtype and a.shape == b.shape
    assert float(np.abs(a.astype(np.float64) - b).max()) <= TOL[dtype] * scale


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(2, 5, 64), (3, 7), (4, 96, 384)])
def test_layernorm_kernels_stay_within_the_numpy_passes(dtype, bias, shape, numpy_passes):
    rng = np.random.default_rng(2)
    C = shape[-1]
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
    g, b = (1 + rng.standard_normal(C)).astype(dtype), rng.standard_normal(C).astype(dtype)
    dout = rng.standard_normal(shape).astype(dtype)
    assert kernels.layernorm_forward(x, g, b, 1e-5) is not None  # the kernel runs here
    again = _layernorm_both(x, g, b if bias else None, dout, lambda: None)[0]
    fused, plain = _layernorm_both(x, g, b if bias else None, dout, numpy_passes)
    assert len(fused) == len(plain) == 5 + bias
    for a, p, a2 in zip(fused, plain, again):
        _close(a, p, dtype)
        assert a.tobytes() == a2.tobytes()  # the same bytes on every run


def test_layernorm_kernels_compute_their_formulas():
    """Against the formulas themselves in float64 (independent of the NumPy passes)."""
    rng = np.random.default_rng(3)
    x, dout = rng.standard_normal((4, 6)) * 3 + 1, rng.standard_normal((4, 6))
    g, b, eps = rng.standard_normal(6), rng.standard_normal(6), 1e-5
    out, xhat, rstd = kernels.layernorm_forward(x, g, b, eps)
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)  # the biased variance
    np.testing.assert_allclose(rstd, 1 / np.sqrt(var + eps), rtol=1e-14)
    np.testing.assert_allclose(xhat, (x - mean) / np.sqrt(var + eps), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(out, xhat * g + b, rtol=1e-13, atol=1e-15)
    assert np.allclose(kernels.layernorm_forward(x, g, None, eps)[0], xhat * g, rtol=1e-13)
    dx, dg, db = kernels.layernorm_backward(dout, xhat, rstd, g)
    dxhat = dout * g
    want = rstd * (dxhat - dxhat.mean(-1, keepdims=True)
                   - xhat * (dxhat * xhat).mean(-1, keepdims=True))  # fmt: skip
    np.testing.assert_allclose(dx, want, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(dg, (dout * xhat).sum(0), rtol=1e-13)
    np.testing.assert_allclose(db, dout.sum(0), rtol=1e-13)


def _masked_softmax(s, scale):
    """softmax(scale * s) over keys <= the query, float64: the formula, (..., T, T)."""
    T = s.shape[-1]
    z = np.where(np.tril(np.ones((T, T), bool)), s.astype(np.float64) * scale, -np.inf)
    z -= z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("blocks", [[(0, 9)], [(0, 4), (4, 8), (8, 9)]])
def test_the_causal_softmax_kernel_computes_its_formula(dtype, blocks):
    rng = np.random.default_rng(4)
    s = (rng.standard_normal((2, 3, 9, 9)) * 4).astype(dtype)  # (B,H,T,T) raw scores
    s[0, 0, 5, :3] = [1e4, -1e4, 0]  # a row whose exps span every float32 exponent
    s[1, 2, 6, 6] = 1e4  # the largest score on the diagonal, the last key its row sees:
    # a max that missed it would overflow exp
    scale = 0.3
    want = _masked_softmax(s, scale)  # (B,H,T,T)
    att = s.copy()
    for i0, i1 in blocks:  # one block's rows at a time, as sdpa_forward calls it
        assert kernels.causal_softmax(att, i0, i1, scale)
    assert np.abs(att - want).max() <= (3e-7 if dtype == np.float32 else 1e-15)
    assert np.all(np.triu(att[0, 0], k=1) == 0) and np.all(att >= 0)  # the mask: 0, not tiny
    # the backward: ds = scale p (datt - sum(datt p)), queries i0..i1-1 against keys < i1
    datt = rng.standard_normal((2, 3, 9, 9)).astype(dtype)
    p = want
    full = scale * p * (datt - (datt * p).sum(-1, keepdims=True))  # (B,H,T,T) the formula
    for i0, i1 in blocks:
        d = np.ascontiguousarray(datt[..., i0:i1, :i1])  # (B,H,Tb,S)
        assert kernels.causal_softmax_backward(d, att, i0, scale)
        tol = 2e-6 if dtype == np.float32 else 1e-14
        np.testing.assert_allclose(d, full[..., i0:i1, :i1], rtol=0, atol=tol)


def test_the_float32_exp_of_the_softmax_is_within_float32_rounding():
    """The polynomial exp over the whole range a softmax feeds it (x <= 0): rows of scores
    0 and x, so the probabilities are 1 / (1 + exp(x)) and exp(x) / (1 + exp(x))."""
    x = np.concatenate([-np.geomspace(1e-8, 87.3, 20_000), [-87.5, -100.0, -1e30, -np.inf]])
    s = np.zeros((x.size, 2, 2), np.float32)  # (N, T=2, S=2): row 1 sees keys 0 and 1
    s[:, 1, 1] = x  # key 0 scores 0 (the max), key 1 scores x
    e = np.exp(s[:, 1, 1].astype(np.float64))  # of the float32 scores the kernel sees
    assert kernels.causal_softmax(s, 1, 2, 1.0)
    want = np.stack([1 / (1 + e), e / (1 + e)], -1)  # (N, 2)
    got = s[:, 1].astype(np.float64)
    normal = want >= 2.0**-126  # float32 normal: the exp and the normalisation, 5 ulp at most
    assert np.all(np.abs(got - want)[normal] <= 6 * 2.0**-24 * want[normal])
    assert np.all(got[~normal] == 0)  # below it, 0: a key far below the max weighs nothing
    assert np.all(got[:, 0] <= 1) and got[-1, 0] == 1.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("block", [128, 3])
@pytest.mark.parametrize("dropout", [0.0, 0.25])
def test_attention_on_the_kernels_stays_within_the_numpy_passes(
    dtype, block, dropout, numpy_passes
):
    from resgrad.nn.layers import FlashCache, sdpa_backward, sdpa_forward, sdpa_probs

    rng = np.random.default_rng(5)
    q, k, v, dy = (rng.standard_normal((2, 3, 8, 4)).astype(dtype) for _ in range(4))

    def run():
        y, c = sdpa_forward(q, k, v, block=block, dropout=dropout, train=True,
                            rng=np.random.default_rng(6))  # fmt: skip
        # the compiled attention (no dropout, kernels.FUSED_ATTENTION), or the steps with
        # the compiled softmax
        ran = isinstance(c, FlashCache) or c.scale_in_softmax
        return ran, [y, sdpa_probs(c), *sdpa_backward(dy, c, block=block)]

    fused_ran, fused = run()
    again = run()[1]
    numpy_passes()
    plain_ran, plain = run()
    assert fused_ran and not plain_ran  # the kernel ran, then NumPy's passes
    for a, p, a2 in zip(fused, plain, again):
        _close(a, p, dtype)
        assert a.tobytes() == a2.tobytes()


@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_a_forward_on_the_kernel_has_a_right_backward_without_it(dropout, monkeypatch):
    """The scale sits where the forward put it, whichever path the backward takes; a
    compiled attention's cache (no dropout) gives the steps its recomputed probabilities."""
    from resgrad.nn.layers import FlashCache, sdpa_backward, sdpa_forward

    monkeypatch.setattr(kernels, "FUSED_ATTENTION", True)
    rng = np.random.default_rng(7)
    q, k, v, dy = (rng.standard_normal((1, 2, 6, 4)) for _ in range(4))
    y, c = sdpa_forward(q, k, v, dropout=dropout, train=True, rng=np.random.default_rng(8))
    assert isinstance(c, FlashCache) if dropout == 0 else c.scale_in_softmax
    both = sdpa_backward(dy, c)
    monkeypatch.setattr(kernels, "ENABLED", False)
    for a, b in zip(sdpa_backward(dy, c), both):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_sum_sq64_widens_each_element():
    rng = np.random.default_rng(8)
    x = (rng.standard_normal(100_003) * 1e18).astype(np.float32)  # x^2 overflows float32
    want = float(np.sum(x.astype(np.float64) ** 2))
    got = kernels.sum_sq64(x)
    assert abs(got - want) <= 1e-12 * want and got == kernels.sum_sq64(x)
    assert kernels.sum_sq64(x[::2]) is None  # a strided view: the caller's NumPy pass
    from resgrad.train.optim import grad_norms

    norms = grad_norms({"a": x, "b": x[:7].reshape(7, 1)})
    assert norms["a"] == np.sqrt(got)
    assert abs(norms["b"] - np.sqrt(np.sum(x[:7].astype(np.float64) ** 2))) <= 1e-12 * norms["b"]


def test_the_fast_kernels_are_off_with_the_switch(monkeypatch):
    x = np.ones((2, 4, 4))
    monkeypatch.setattr(kernels, "ENABLED", False)
    assert not kernels.causal_softmax(x, 0, 4, 1.0) and np.all(x == 1)
    assert not kernels.causal_softmax_backward(x, x, 0, 1.0) and np.all(x == 1)
    assert kernels.layernorm_forward(x, np.ones(4), None, 1e-5) is None
    assert kernels.layernorm_backward(x, x, np.ones((2, 4, 1)), np.ones(4)) is None
    assert kernels.sum_sq64(x) is None


def test_the_float32_exact_gelu_kernel_is_within_1e_5_of_scipy_s_erf(numpy_passes):
    """The rational erf against SciPy's, over every float32 input that matters (+-12, where
    Phi is 0 or 1 in float32) and some that do not (+-1e30, inf, nan), forward and backward:
    the kernel replaces the forward only, the backward reads its cdf."""
    from resgrad.nn.layers import gelu_erf_backward, gelu_erf_forward

    x = np.concatenate([np.linspace(-12, 12, 240_001), [-1e30, 1e30, -np.inf, np.inf, np.nan]])
    x = x.astype(np.float32)
    dout = np.random.default_rng(0).standard_normal(x.shape).astype(np.float32)
    assert kernels.gelu_erf(x) is not None  # the kernel runs here
    # the infinite inputs make NaNs on purpose (-inf * 0 = nan): their warnings are not news
    with np.errstate(invalid="ignore", over="ignore"):
        out, cache = gelu_erf_forward(x)
        dx = gelu_erf_backward(dout, cache)
        again = gelu_erf_forward(x)[0]
        numpy_passes()
        ref, ref_cache = gelu_erf_forward(x)
        ref_dx = gelu_erf_backward(dout, ref_cache)
    assert out.tobytes() == again.tobytes()  # the same bytes on every run
    assert out.dtype == cache.cdf.dtype == dx.dtype == np.float32
    fin = np.isfinite(x)
    np.testing.assert_allclose(cache.cdf[fin], ref_cache.cdf[fin], rtol=0, atol=1e-6)
    np.testing.assert_allclose(out[fin], ref[fin], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx[fin], ref_dx[fin], rtol=1e-5, atol=1e-5)
    assert np.isnan(out[-1]) and np.isnan(cache.cdf[-1])  # a NaN stays a NaN
    assert out[-2] == ref[-2] == np.inf and cache.cdf[-3] == 0.0 and cache.cdf[-2] == 1.0
    assert out[-4] == ref[-4] == np.float32(1e30) and out[-5] == ref[-5] == 0.0  # -1e30 * 0
    # the error that matters, against the float64 truth: Phi within 2.3e-7 everywhere
    from scipy.special import ndtr

    truth = ndtr(x[fin].astype(np.float64))
    assert np.abs(cache.cdf[fin] - truth).max() < 2.5e-7


def test_the_exact_gelu_kernel_leaves_float64_and_views_to_scipy(monkeypatch):
    from resgrad.nn.layers import gelu_erf_forward

    x64 = np.linspace(-3, 3, 7)
    assert kernels.gelu_erf(x64) is None  # float64: SciPy's erf, for the gradient checks
    assert kernels.gelu_erf(np.linspace(-3, 3, 14, dtype=np.float32)[::2]) is None
    out, cache = gelu_erf_forward(x64)
    from scipy.special import erf

    np.testing.assert_array_equal(cache.cdf, 0.5 * (1 + erf(x64 * np.sqrt(0.5))))
    monkeypatch.setattr(kernels, "ENABLED", False)
    assert kernels.gelu_erf(x64.astype(np.float32)) is None


def test_the_environment_starts_a_command_on_the_numpy_passes(monkeypatch):
    """RESGRAD_KERNELS=0: the reference, one setting away; 1 or unset: the kernels."""
    import importlib

    try:
        for value, on in (("0", False), ("1", True), (None, True)):
            if value is None:
                monkeypatch.delenv(kernels.ENV, raising=False)
            else:
                monkeypatch.setenv(kernels.ENV, value)
            assert importlib.reload(kernels).ENABLED is on
    finally:
        monkeypatch.delenv(kernels.ENV, raising=False)
        importlib.reload(kernels)


def test_a_command_refuses_a_switch_it_cannot_read(monkeypatch, capsys, tmp_path):
    from resgrad.cli import main

    monkeypatch.setenv(kernels.ENV, "off")
    assert main(["depth", "--plot", str(tmp_path / "d.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("resgrad depth: error: RESGRAD_KERNELS='off'; expected 0 (NumPy's passes, "
                   "the reference) or 1 (the compiled kernels)")  # fmt: skip
    assert not list(tmp_path.iterdir())  # refused before any work


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_an_ln_scaling_model_on_the_kernels_stays_within_the_numpy_passes(
    dtype, numpy_passes, monkeypatch
):
    """ln-scaling's l^-p multiplies the LayerNorm kernel's output and the gradient it is
    given: the kernels' model and the reference (RESGRAD_KERNELS=0) are the same model."""
    from resgrad.nn.model import GPT, GPTConfig
    from resgrad.verify.selfcheck import randomize_params

    cfg = GPTConfig(vocab_size=11, block_size=8, n_layer=3, n_head=2, n_embd=16,
                    variant="ln-scaling")  # fmt: skip
    m = GPT(cfg, seed=0, dtype=dtype)
    randomize_params(m.params, np.random.default_rng(1))
    idx = np.random.default_rng(2).integers(0, 11, (2, 8))

    ran, real = [], kernels.layernorm_forward

    def spy(*a):  # did the LayerNorm kernel compute, or leave it to NumPy (None)?
        out = real(*a)
        ran.append(out is not None)
        return out

    monkeypatch.setattr(kernels, "layernorm_forward", spy)

    def run():
        ran.clear()
        _, loss, cache = m.forward(idx[:, :-1], idx[:, 1:])
        return loss, m.backward(cache), list(ran)

    loss, grads, on = run()
    numpy_passes()
    loss_ref, grads_ref, off = run()
    assert on == [True] * 7 and off == [False] * 7  # 2 norms a block and ln_f, each pass
    tol = 1e-12 if dtype == np.float64 else 1e-5
    assert abs(loss - loss_ref) <= tol * abs(loss_ref)
    for k in grads_ref:
        err = np.linalg.norm(grads[k] - grads_ref[k]) / np.linalg.norm(grads_ref[k])
        assert err <= tol, (k, err)
        assert grads[k].dtype == dtype
