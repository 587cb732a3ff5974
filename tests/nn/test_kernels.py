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


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(2, 5, 64), (3, 7)])
def test_layernorm_kernels_give_the_numpy_passes_bytes(dtype, bias, shape, numpy_passes):
    rng = np.random.default_rng(2)
    C = shape[-1]
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
    g, b = (1 + rng.standard_normal(C)).astype(dtype), rng.standard_normal(C).astype(dtype)
    dout = rng.standard_normal(shape).astype(dtype)
    fused, plain = _layernorm_both(x, g, b if bias else None, dout, numpy_passes)
    assert len(fused) == len(plain) == 5 + bias
    for a, p in zip(fused, plain):
        assert a.dtype == dtype and a.tobytes() == p.tobytes()


def test_layernorm_kernels_compute_their_formulas():
    rng = np.random.default_rng(3)
    xc, rstd = rng.standard_normal((4, 6)), rng.random((4, 1)) + 0.5
    g, b = rng.standard_normal(6), rng.standard_normal(6)
    want_xhat = xc * rstd
    out = kernels.layernorm_out(xc, rstd, g, b)
    np.testing.assert_allclose(xc, want_xhat, rtol=1e-15)  # xhat, over xc
    np.testing.assert_allclose(out, want_xhat * g + b, rtol=1e-14)
    np.testing.assert_allclose(kernels.layernorm_out(xc.copy(), rstd, g, None),
                               xc * rstd * g, rtol=1e-14)  # fmt: skip
    dxhat, m1, m2 = rng.standard_normal((4, 6)), rng.standard_normal((4, 1)), rng.random((4, 1))
    want = rstd * (dxhat - m1 - xc * m2)
    np.testing.assert_allclose(kernels.layernorm_dx(dxhat, xc, m1, m2, rstd), want, rtol=1e-13)


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
