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
