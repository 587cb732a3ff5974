"""Compiled elementwise kernels beside the readable NumPy layers: the same operations, the
same roundings, one pass over memory instead of one per operation.

A layer written in NumPy runs a chain of in-place operations (``u = x * a; u *= x; ...``),
each a full pass over a (B*T, 4C) array. Each kernel here replays such a chain of
:mod:`resgrad.nn.layers` element by element, in the same order and the same dtype: +, -,
* and / are correctly rounded IEEE operations whichever code runs them, and numba does not
contract ``a * b + c`` into a fused multiply-add, so the result is the same bit for bit
(``tests/nn/test_kernels.py`` holds every kernel to its NumPy chain, float32 and float64).
Transcendentals (tanh) stay NumPy's: another library's may round differently.

One kernel is not NumPy's bytes: :func:`gelu_erf`, the exact GELU in float32. SciPy's
``erf`` (libm's, one element at a time) costs 3.8 ms on a (768, 512) float32 array, 27x
the whole tanh-form GELU forward; the kernel evaluates ``erf`` as a rational function
that the compiler vectorizes, within 2.3e-7 of the true ``Phi``, at 0.1 ms. float64
keeps SciPy's ``erf``, so the float64 gradient checks see the exact function;
``tests/nn/test_kernels.py`` holds the float32 kernel within 1e-5 of SciPy's.

numba compiles each kernel on its first call (cached on disk, GIL released, so the
trainer's shards run them on their threads). Without numba, or with ``ENABLED = False``,
every function here returns None and the layers take their NumPy passes.

This is a low-level module: it imports nothing from resgrad.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "ENABLED",
    "gelu_dx",
    "gelu_erf",
    "gelu_out",
    "gelu_u",
    "layernorm_dx",
    "layernorm_out",
]

ENABLED = True  # False: the layers' readable NumPy passes, everywhere


def _gelu_u(x, u, a, k):
    for i in range(x.size):
        xi = x[i]
        ui = xi * a  # u = a x
        ui = ui * xi
        ui = ui * xi  # a x^3
        ui = ui + xi
        u[i] = ui * k  # k (x + a x^3)


def _gelu_out(x, t, out, one, half):
    for i in range(x.size):
        o = t[i] + one
        o = o * x[i]
        out[i] = o * half  # 0.5 x (1 + t)


def _gelu_dx(dout, x, t, dx, c3, c1, one, half):
    for i in range(x.size):
        xi, ti = x[i], t[i]
        local = xi * xi
        local = local * c3
        local = local + c1
        local = local * xi  # 0.5 x k (1 + 3 a x^2)
        local = local * (one - ti * ti)  # * (1 - t^2)
        local = local + ti * half
        local = local + half  # + 0.5 (1 + t)
        dx[i] = local * dout[i]


def _ln_out(xc, rstd, g, b, has_bias, out):
    for r in range(xc.shape[0]):
        rs = rstd[r]
        for c in range(xc.shape[1]):
            xh = xc[r, c] * rs  # xhat = xc rstd, kept in xc's buffer
            xc[r, c] = xh
            o = xh * g[c]
            if has_bias:
                o = o + b[c]
            out[r, c] = o  # xhat g + b


def _ln_dx(dxhat, xhat, m1, m2, rstd):
    for r in range(dxhat.shape[0]):
        a, m, rs = m1[r], m2[r], rstd[r]
        for c in range(dxhat.shape[1]):
            d = dxhat[r, c] - a
            d = d - xhat[r, c] * m
            dxhat[r, c] = d * rs  # rstd (dxhat - m1 - xhat m2), in dxhat's buffer


# erf(u) on |u| <= 4 as u P(u^2) / Q(u^2), P of degree 6 and Q of degree 4 in u^2: the
# coefficients of Eigen's float erf (also TensorFlow's and XLA's); past 4, float32's erf
# is +-1. Highest power first, as Horner's rule takes them.
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
          -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
          -1.60960333262415e-02)  # fmt: skip
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
          -7.37332916720468e-03, -1.42647390514189e-02)  # fmt: skip
_F32 = np.float32
_P13, _P11, _P9, _P7, _P5, _P3, _P1 = (_F32(c) for c in _ERF_P)
_Q8, _Q6, _Q4, _Q2, _Q0 = (_F32(c) for c in _ERF_Q)
_SQRT1_2, _HALF, _ONE, _FOUR = _F32(0.7071067811865476), _F32(0.5), _F32(1.0), _F32(4.0)


def _gelu_erf32(x, cdf, out):
    # float32 only: the constants above are float32, so every step rounds in float32
    for i in range(x.size):
        xi = x[i]
        u = xi * _SQRT1_2  # u = x / sqrt(2)
        u = -_FOUR if u < -_FOUR else u
        u = _FOUR if u > _FOUR else u  # |u| <= 4 (a NaN passes both tests unchanged)
        u2 = u * u
        p = _P13 * u2 + _P11  # P(u^2), Horner
        p = p * u2 + _P9
        p = p * u2 + _P7
        p = p * u2 + _P5
        p = p * u2 + _P3
        p = p * u2 + _P1
        q = _Q8 * u2 + _Q6  # Q(u^2)
        q = q * u2 + _Q4
        q = q * u2 + _Q2
        q = q * u2 + _Q0
        c = ((u * p) / q + _ONE) * _HALF  # Phi(x) = 0.5 (1 + erf(u))
        cdf[i] = c
        out[i] = xi * c  # x Phi(x)


_SOURCES = {"gelu_u": _gelu_u, "gelu_out": _gelu_out, "gelu_dx": _gelu_dx,
            "ln_out": _ln_out, "ln_dx": _ln_dx, "gelu_erf32": _gelu_erf32}  # fmt: skip
_COMPILED: dict = {}  # name -> the compiled kernel, or None without numba


def _kernel(name: str, *arrays: np.ndarray):
    """The compiled kernel ``name`` if it can run on ``arrays`` (C-contiguous, one dtype)."""
    if not ENABLED:
        return None
    dt = arrays[0].dtype
    if any(not a.flags.c_contiguous or a.dtype != dt for a in arrays):
        return None
    if dt not in (np.float32, np.float64):
        return None
    if name not in _COMPILED:
        try:
            import numba
        except ImportError:  # pragma: no cover - numba is a dependency
            _COMPILED[name] = None
        else:
            # error_model "numpy": a division by 0 gives inf, as NumPy does, and loops vectorize
            _COMPILED[name] = numba.njit(cache=True, nogil=True, error_model="numpy")(
                _SOURCES[name]
            )
    return _COMPILED[name]


def gelu_u(x: np.ndarray, a, k) -> np.ndarray | None:
    """``k (x + a x^3)``, rounded as :func:`resgrad.nn.layers.gelu_forward`'s step 1, (...);
    None when no kernel runs."""
    fn = _kernel("gelu_u", x)
    if fn is None:
        return None
    u = np.empty_like(x)  # (...)
    fn(x.reshape(-1), u.reshape(-1), a, k)
    return u


def gelu_out(x: np.ndarray, t: np.ndarray) -> np.ndarray | None:
    """``0.5 x (1 + t)``, as gelu_forward's step 3, (...); None when no kernel runs."""
    fn = _kernel("gelu_out", x, t)
    if fn is None:
        return None
    f = x.dtype.type
    out = np.empty_like(x)  # (...)
    fn(x.reshape(-1), t.reshape(-1), out.reshape(-1), f(1.0), f(0.5))
    return out


def gelu_dx(dout: np.ndarray, x: np.ndarray, t: np.ndarray, c3, c1) -> np.ndarray | None:
    """:func:`resgrad.nn.layers.gelu_backward`'s dx in one pass, (...); ``c3 = 1.5 k a`` and
    ``c1 = 0.5 k`` in x's dtype. None when no kernel runs."""
    fn = _kernel("gelu_dx", dout, x, t)
    if fn is None:
        return None
    f = x.dtype.type
    dx = np.empty_like(x)  # (...)
    fn(dout.reshape(-1), x.reshape(-1), t.reshape(-1), dx.reshape(-1), c3, c1, f(1.0), f(0.5))
    return dx


def gelu_erf(x: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The exact GELU's ``(out, cdf)`` = ``(x Phi(x), Phi(x))`` of a float32 array (...) in one
    vectorized pass, as :func:`resgrad.nn.layers.gelu_erf_forward`'s steps 1-3 with a
    rational ``erf`` (within 2.3e-7 of ``Phi``). None for float64 (which keeps SciPy's
    ``erf``) or when no kernel runs."""
    if x.dtype != np.float32:
        return None
    fn = _kernel("gelu_erf32", x)
    if fn is None:
        return None
    cdf, out = np.empty_like(x), np.empty_like(x)  # (...), (...)
    fn(x.reshape(-1), cdf.reshape(-1), out.reshape(-1))
    return out, cdf


def layernorm_out(xc: np.ndarray, rstd: np.ndarray, g: np.ndarray,
                  b: np.ndarray | None) -> np.ndarray | None:  # fmt: skip
    """:func:`resgrad.nn.layers.layernorm_forward`'s steps 5-7 in one pass: ``xhat = xc
    rstd`` written over xc (..., C), and the returned ``out = xhat g + b`` (..., C).
    None (and xc untouched) when no kernel runs."""
    C = g.shape[0]
    fn = _kernel("ln_out", xc, rstd, g, g if b is None else b)
    if fn is None:
        return None
    out = np.empty_like(xc)  # (..., C)
    fn(xc.reshape(-1, C), rstd.reshape(-1), g, g if b is None else b, b is not None,
       out.reshape(-1, C))  # fmt: skip
    return out


def layernorm_dx(dxhat: np.ndarray, xhat: np.ndarray, m1: np.ndarray, m2: np.ndarray,
                 rstd: np.ndarray) -> np.ndarray | None:  # fmt: skip
    """:func:`resgrad.nn.layers.layernorm_backward`'s last steps in one pass: ``dx = rstd
    (dxhat - m1 - xhat m2)`` written over dxhat (..., C) and returned. None (dxhat
    untouched) when no kernel runs."""
    C = dxhat.shape[-1]
    fn = _kernel("ln_dx", dxhat, xhat, m1, m2, rstd)
    if fn is None:
        return None
    fn(dxhat.reshape(-1, C), xhat.reshape(-1, C), m1.reshape(-1), m2.reshape(-1),
       rstd.reshape(-1))  # fmt: skip
    return dxhat
