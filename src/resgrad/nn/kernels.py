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

The kernels of issue 35 round differently from their NumPy passes, by design: the causal
softmax with its mask and scale (:func:`causal_softmax`, :func:`causal_softmax_backward`),
the whole LayerNorm row (:func:`layernorm_forward`, :func:`layernorm_backward`) and the
float64 sum of squares behind the gradient norms (:func:`sum_sq64`). They sum in a
different order than NumPy's pairwise sums (the compiler may reassociate their
reductions, so that they vectorize), and the float32 softmax evaluates ``exp`` as a
polynomial that vectorizes (Cephes' ``expf``; its probabilities within 5 ulp of the
float64 truth), where numba's ``exp`` calls libm one element at a time. Each gives the
same bytes on every run of one machine, and ``tests/nn/test_kernels.py`` holds it to its
NumPy pass: within 1e-12 relative in float64, 1e-5 in float32. The float64 gradient
checks run through them.

The causal attention of issue 49 (:func:`causal_attention`,
:func:`causal_attention_backward`) is one pass over each (batch, head), forward and
backward, the heads spread over numba's threads (``prange``); the (T, T) probabilities are
never stored: the forward keeps each row's log-sum-exp and the backward recomputes them
(flash attention's tiling and online softmax). Each head is one thread's, computed in a
fixed order on contiguous copies of its rows, so its bytes depend neither on the number of
threads nor on the strides of the arrays given. It rounds its own way too
(``tests/nn/test_attention_kernel.py`` holds it to the NumPy steps within 1e-12 in float64
and 1e-5 in float32, and the float64 checks of attention and the whole model run through
it); attention dropout keeps the NumPy steps.

numba compiles each kernel on its first call (cached on disk, GIL released, so the
trainer's shards run them on their threads; :func:`set_threads` gives a shard's thread
its share of numba's threads). Without numba, or with ``ENABLED = False``,
every function here returns None and the layers take their NumPy passes. A command
starts with ``ENABLED = False`` under ``RESGRAD_KERNELS=0`` in its environment
(``RESGRAD_KERNELS=0 resgrad train ...``: the reference, one setting away).

This is a low-level module: it imports nothing from resgrad.
"""

from __future__ import annotations

import math
import os

import numpy as np

__all__ = [
    "ENABLED",
    "ENV",
    "FUSED_ATTENTION",
    "causal_attention",
    "causal_attention_backward",
    "causal_softmax",
    "causal_softmax_backward",
    "causal_softmax_runs",
    "compiled",
    "gelu_dx",
    "gelu_erf",
    "gelu_out",
    "gelu_u",
    "layernorm_backward",
    "layernorm_forward",
    "set_threads",
    "sum_sq64",
]

ENV = "RESGRAD_KERNELS"  # "0" in the environment: start with the NumPy passes; "1": the kernels
ENABLED = os.environ.get(ENV, "1") != "0"  # False: the layers' readable NumPy passes, everywhere
# the compiled attention (causal_attention), off until it beats the NumPy steps it would
# replace: on one thread, as a shard runs it, it took 2.90 ms against their 2.07 at
# cpu-recipe and 65 against 47 ms at medium (issue 49, docs/guide/performance.md)
FUSED_ATTENTION = False


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


# --------------------------------------------------- kernels that round their own way
# Legend: N rows, C channels (a LayerNorm row), T queries, S keys (a causal score row).


def _ln_forward(x, g, b, has_bias, eps, out, xhat, rstd):
    # each row: mean and variance summed in float64, then xhat = (x - mean) rstd, out = xhat g + b
    N, C = x.shape
    for r in range(N):
        mean = 0.0
        for c in range(C):
            mean += x[r, c]
        mean /= C  # 1) mean(x)
        var = 0.0
        for c in range(C):
            d = x[r, c] - mean
            var += d * d
        var /= C  # 2)-3) mean((x - mean)^2), the biased variance
        rs = 1.0 / np.sqrt(var + eps)  # 4) rstd = (var + eps)^-1/2
        rstd[r] = rs
        for c in range(C):
            xh = (x[r, c] - mean) * rs  # 5) xhat
            xhat[r, c] = xh
            out[r, c] = xh * g[c] + b[c] if has_bias else xh * g[c]  # 6)-7)


def _ln_backward(dout, xhat, rstd, g, dx, dg, db):
    # each row: dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dout g;
    # dg += dout xhat and db += dout, row after row into float64 (C,) sums
    N, C = dout.shape
    for r in range(N):
        s1 = 0.0
        s2 = 0.0
        for c in range(C):
            dh = dout[r, c] * g[c]  # dxhat
            s1 += dh
            s2 += dh * xhat[r, c]
            dg[c] += dout[r, c] * xhat[r, c]
            db[c] += dout[r, c]
        m1, m2 = s1 / C, s2 / C  # mean(dxhat), mean(dxhat xhat)
        rs = rstd[r]
        for c in range(C):
            dx[r, c] = rs * (dout[r, c] * g[c] - m1 - xhat[r, c] * m2)


# exp(x) = 2^n exp(t), n = round(x / ln 2), t = x - n ln 2 in [-ln2/2, ln2/2] (ln 2 in two
# parts, so that n ln 2 is exact), exp(t) = 1 + t + t^2 P(t): Cephes' expf, in _exp_shift;
# 2^n is built from its exponent bits. Highest power first, as Horner's rule takes them.
_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
          1.6666665459e-1, 5.0000001201e-1)  # fmt: skip
_E5, _E4, _E3, _E2, _E1, _E0 = (_F32(c) for c in _EXP_P)
_LOG2E, _LN2_HI, _LN2_LO = _F32(1.4426950408889634), _F32(0.693359375), _F32(-2.12194440e-4)
_EXP_LO = _F32(-87.33654)  # log(2^-126): below it exp(x) is taken as 0
_BIAS = np.int32(127)  # float32's exponent bias


def _exp_shift(row, n, m, bits, poly):
    # row[:n] = exp(row[:n] - m), each <= 1 where m is at least the row's max. poly: Cephes'
    # expf (float32; vectorizes, where numba's exp calls libm one element at a time); else
    # libm's exp (float64)
    if not poly:
        for j in range(n):
            row[j] = math.exp(row[j] - m)
        return
    two_n = bits.view(np.float32)  # (n,) 2^n of each exp, as float32 bit patterns
    for j in range(n):
        x = row[j] - m
        under = x < _EXP_LO  # exp(x) below float32's normal range: 0
        x = _EXP_LO if under else x
        e = np.floor(x * _LOG2E + _HALF)  # the nearest integer to x / ln 2
        t = x - e * _LN2_HI
        t = t - e * _LN2_LO  # in [-ln2/2, ln2/2]
        p = _E5 * t + _E4
        p = p * t + _E3
        p = p * t + _E2
        p = p * t + _E1
        p = p * t + _E0
        row[j] = p * (t * t) + t + _ONE  # exp(t)
        bits[j] = 0 if under else (np.int32(e) + _BIAS) << 23  # 2^e, or 0
    for j in range(n):
        row[j] = row[j] * two_n[j]  # exp(x) = exp(t) 2^e


def _causal_softmax(s, i0, i1, scale, poly):
    # s (N, T, S) raw scores q k^T; rows r = i0..i1-1 become softmax(scale s[r, :r+1])
    # followed by zeros: the causal mask, the scale and the softmax in one pass. poly: exp
    # as a polynomial that vectorizes (float32), else libm's (float64, the gradient checks)
    N, _, S = s.shape
    bits = np.empty(S, np.int32)  # _exp_shift's 2^n
    zero = np.zeros(1, s.dtype)[0]  # 0 in s's dtype
    for b in range(N):
        for r in range(i0, i1):
            row = s[b, r]  # (S,) keys 0..r visible
            m = row[0]
            for j in range(1, r + 1):
                m = max(m, row[j])  # the row's max: its exps are <= 1
            for j in range(r + 1):
                row[j] = (row[j] - m) * scale  # <= 0
            _exp_shift(row, r + 1, zero, bits, poly)
            total = row[0]
            for j in range(1, r + 1):
                total += row[j]
            inv = 1.0 / total
            for j in range(r + 1):
                row[j] = row[j] * inv  # rows sum to 1
            for j in range(r + 1, S):
                row[j] = 0.0  # keys after the query: probability 0


def _causal_softmax_dx(datt, att, i0, scale):
    # datt (N, Tb, S) dL/dp of queries i0..i0+Tb-1, att (N, T, S) their p; in datt's buffer:
    # ds = scale p (datt - sum(datt p)) over keys 0..r, 0 after (p is 0 there)
    N, Tb, S = datt.shape
    for b in range(N):
        for i in range(Tb):
            r = i0 + i
            d, p = datt[b, i], att[b, r]  # (S,), (S,)
            dot = d[0] * p[0]
            for j in range(1, r + 1):
                dot += d[j] * p[j]
            for j in range(r + 1):
                d[j] = scale * p[j] * (d[j] - dot)
            for j in range(r + 1, S):
                d[j] = 0.0


# --------------------------------------------- causal attention in one compiled pass
# Legend: B batch, H heads, T positions, D = C/H head size; each (b, h) is one thread's.
# Flash attention (Dao et al. 2022, arXiv:2205.14135): the queries in tiles of ATTN_TQ
# rows, the keys they see in tiles of ATTN_TK, one row's softmax carried across its key
# tiles by its running max m and sum l; the (T, T) probabilities are never stored, the
# backward recomputes them from q, k and each row's log-sum-exp, lse = m + log l.
ATTN_TQ, ATTN_TK = 16, 64  # query rows and keys a tile


def _rows(x, b, h, scale):
    # x[b, h] * scale (T, D) as a contiguous copy
    T, D = x.shape[2:]
    out = np.empty((T, D), x.dtype)
    for t in range(T):
        for d in range(D):
            out[t, d] = x[b, h, t, d] * scale
    return out


def _dots(a, i, b, j0, n, out):
    # out[:n] = a[i] . b[j0 + j] for j < n: one row against n rows, (n,)
    for j in range(n):
        out[j] = 0.0
        for d in range(a.shape[1]):  # from 0: D in whole vectors, no scalar tail
            out[j] += a[i, d] * b[j0 + j, d]


def _attn_forward(q, k, v, y, lse, scale, poly):
    # q, k, v, y (B, H, T, D) any strides, lse (B, H, T): y = softmax(q k^T scale + mask) v
    B, H, T, D = q.shape
    for bh in prange(B * H):  # one thread a head, the same bytes on any count
        b, h = bh // H, bh % H
        # 1) qs = q scale; the head's (T, D) rows as contiguous copies
        qs, kk, vv = _rows(q, b, h, scale), _rows(k, b, h, 1.0), _rows(v, b, h, 1.0)
        row = np.empty(ATTN_TK, q.dtype)  # (TK,) one query's scores, then exps, in a tile
        bits = np.empty(ATTN_TK, np.int32)
        acc = np.empty((ATTN_TQ, D), q.dtype)  # (TQ, D) the tile's sum p v, unnormalised
        m = np.empty(ATTN_TQ, q.dtype)  # (TQ,) running max of each row's scores
        el = np.empty(ATTN_TQ, q.dtype)  # (TQ,) running sum of exp(s - m)
        for i0 in range(0, T, ATTN_TQ):
            i1 = min(i0 + ATTN_TQ, T)
            acc[:] = 0.0
            m[:] = -np.inf
            el[:] = 0.0
            for j0 in range(0, i1, ATTN_TK):  # the key tiles these queries see
                for i in range(max(i0, j0), i1):  # query i sees keys j0..min(j1, i+1)-1
                    r, n = i - i0, min(ATTN_TK, i + 1 - j0)
                    _dots(qs, i, kk, j0, n, row)  # 2) s = qs k^T
                    mt = row[0]
                    for j in range(1, n):
                        mt = max(mt, row[j])
                    mnew = max(m[r], mt)
                    corr = math.exp(m[r] - mnew)  # the old terms' rescale, 0 at the first tile
                    _exp_shift(row, n, mnew, bits, poly)  # 3)-4) exp(s - m), keys > i left out
                    tile = row[0]
                    for j in range(1, n):
                        tile += row[j]
                    el[r] = el[r] * corr + tile
                    m[r] = mnew
                    for d in range(D):
                        acc[r, d] *= corr
                    for j in range(n):  # 6) acc += p v
                        p = row[j]
                        for d in range(D):
                            acc[r, d] += p * vv[j0 + j, d]
            for i in range(i0, i1):
                r = i - i0
                inv = 1.0 / el[r]
                for d in range(D):
                    y[b, h, i, d] = acc[r, d] * inv  # rows of p sum to 1
                lse[b, h, i] = m[r] + math.log(el[r])  # log sum_j exp(s_ij)


def _attn_backward(dy, q, k, v, y, lse, dq, dk, dv, scale, poly):
    # the forward's p recomputed as exp(s - lse); D_i = dy_i . y_i = sum_j p_ij dp_ij, so
    # ds = p (dp - D_i); dq, dk, dv (B, H, T, D) any strides, every element written
    B, H, T, D = q.shape
    for bh in prange(B * H):  # one thread a head, the same bytes on any count
        b, h = bh // H, bh % H
        qs, kk, vv = _rows(q, b, h, scale), _rows(k, b, h, 1.0), _rows(v, b, h, 1.0)
        go, yy = _rows(dy, b, h, 1.0), _rows(y, b, h, 1.0)  # (T, D) each
        di = np.empty(T, q.dtype)  # (T,) D_i = rowsum(dy * y)
        for t in range(T):
            _dots(go, t, yy, t, 1, di[t:])  # di[t] = dy_t . y_t
        gq, gk, gv = np.zeros((T, D), q.dtype), np.zeros((T, D), q.dtype), np.zeros((T, D), q.dtype)
        row = np.empty(ATTN_TK, q.dtype)  # (TK,) s, then p
        dp = np.empty(ATTN_TK, q.dtype)  # (TK,) dp, then ds
        bits = np.empty(ATTN_TK, np.int32)
        for i0 in range(0, T, ATTN_TQ):
            i1 = min(i0 + ATTN_TQ, T)
            for j0 in range(0, i1, ATTN_TK):
                for i in range(max(i0, j0), i1):
                    n = min(ATTN_TK, i + 1 - j0)
                    _dots(qs, i, kk, j0, n, row)  # 2) s = qs k^T, recomputed
                    _exp_shift(row, n, lse[b, h, i], bits, poly)  # 4) p = exp(s - lse)
                    _dots(go, i, vv, j0, n, dp)  # 6) y = p v  ->  dp = dy v^T
                    for j in range(n):  # dv += p^T dy
                        p = row[j]
                        for d in range(D):
                            gv[j0 + j, d] += p * go[i, d]
                    for j in range(n):  # 4) p = softmax(s)  ->  ds = p (dp - D_i)
                        dp[j] = row[j] * (dp[j] - di[i])
                    for j in range(n):  # 2) s = qs k^T  ->  dqs += ds k, dk += ds^T qs
                        g = dp[j]
                        for d in range(D):
                            gq[i, d] += g * kk[j0 + j, d]
                            gk[j0 + j, d] += g * qs[i, d]
        for t in range(T):
            for d in range(D):
                dq[b, h, t, d] = gq[t, d] * scale  # 1) qs = q scale  ->  dq = dqs scale
                dk[b, h, t, d] = gk[t, d]
                dv[b, h, t, d] = gv[t, d]


def _sum_sq64(x):
    # sum(x^2), each element widened to float64
    total = 0.0
    for i in range(x.size):
        v = np.float64(x[i])
        total += v * v
    return total


prange = range  # numba.prange once compiled() has imported numba; as Python, range
_HELPERS = (_exp_shift, _rows, _dots)  # called from the softmax and attention kernels

_SOURCES = {"gelu_u": _gelu_u, "gelu_out": _gelu_out, "gelu_dx": _gelu_dx,
            "gelu_erf32": _gelu_erf32, "ln_forward": _ln_forward, "ln_backward": _ln_backward,
            "causal_softmax": _causal_softmax,
            "causal_softmax_dx": _causal_softmax_dx, "sum_sq64": _sum_sq64,
            "attn_forward": _attn_forward, "attn_backward": _attn_backward}  # fmt: skip
# the kernels that may round their own way: the compiler may reassociate their sums (so
# that the reductions vectorize) and contract a * b + c into one fused multiply-add
_FAST = {"ln_forward", "ln_backward", "causal_softmax",
         "causal_softmax_dx", "sum_sq64", "attn_forward", "attn_backward"}  # fmt: skip
_PARALLEL = {"attn_forward", "attn_backward"}  # over (b, h) on numba's threads, strided views
_FAST_FLAGS = {"reassoc", "contract", "nsz"}  # numba's fastmath flags for _FAST
_COMPILED: dict = {}  # source function -> its compiled kernel, or None without numba


def compiled(source, *arrays: np.ndarray, fast: bool = False, parallel: bool = False):
    """numba's compile of the kernel ``source`` (a plain Python function, compiled on first
    use, cached on disk) if it can run on ``arrays``: the switch on, each C-contiguous, all
    float32 or all float64. None otherwise: the caller takes its NumPy passes.

    ``fast``: the compiler may reassociate sums and contract ``a * b + c`` into a fused
    multiply-add (the kernels that round their own way); else every rounding as written.
    ``parallel``: ``prange`` loops run on numba's threads, and the arrays may be strided
    views (the kernel reads them by their strides).
    :mod:`resgrad.nn.decode_kernels` compiles its kernels here too.
    """
    if not ENABLED:
        return None
    dt = arrays[0].dtype
    if any(not (parallel or a.flags.c_contiguous) or a.dtype != dt for a in arrays):
        return None
    if dt not in (np.float32, np.float64):
        return None
    if source not in _COMPILED:
        try:
            import numba
        except ImportError:  # pragma: no cover - numba is a dependency
            _COMPILED[source] = None
        else:
            # error_model "numpy": a division by 0 gives inf, as NumPy does, and loops vectorize
            _numba_globals(numba)
            flags = _FAST_FLAGS if fast else False
            _COMPILED[source] = numba.njit(
                cache=True, nogil=True, error_model="numpy", fastmath=flags, parallel=parallel
            )(source)
    return _COMPILED[source]


def _numba_globals(numba) -> None:
    """What the kernels' sources name: numba's ``prange``, and the helpers they call made
    callable from compiled code (with the flags of the kernels that round their own way)."""
    global prange
    if prange is range:
        prange = numba.prange
        for helper in _HELPERS:
            numba.extending.register_jitable(fastmath=_FAST_FLAGS, error_model="numpy")(helper)


def set_threads(n: int) -> None:
    """Threads for the parallel kernels this thread calls, at most numba's count (numba's
    setting is per thread): the trainer's shard threads take as many as their BLAS threads,
    so that two shards' heads do not share two cores four ways."""
    if not ENABLED:
        return
    try:
        import numba
    except ImportError:  # pragma: no cover - numba is a dependency
        return
    numba.set_num_threads(max(1, min(n, numba.config.NUMBA_NUM_THREADS)))


def _kernel(name: str, *arrays: np.ndarray):
    """The compiled kernel ``name`` of this module if it can run on ``arrays``."""
    return compiled(_SOURCES[name], *arrays, fast=name in _FAST, parallel=name in _PARALLEL)


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


def layernorm_forward(x: np.ndarray, g: np.ndarray, b: np.ndarray | None, eps: float):
    """:func:`resgrad.nn.layers.layernorm_forward`'s steps 1-7 in one pass over each row:
    ``(out, xhat, rstd)``, (..., C), (..., C), (..., 1). None when no kernel runs."""
    C = g.shape[0]
    fn = _kernel("ln_forward", x, g, g if b is None else b)
    if fn is None:
        return None
    out, xhat = np.empty_like(x), np.empty_like(x)  # (..., C), (..., C)
    rstd = np.empty(x.shape[:-1] + (1,), x.dtype)  # (..., 1)
    fn(x.reshape(-1, C), g, g if b is None else b, b is not None, float(eps),
       out.reshape(-1, C), xhat.reshape(-1, C), rstd.reshape(-1))  # fmt: skip
    return out, xhat, rstd


def layernorm_backward(dout: np.ndarray, xhat: np.ndarray, rstd: np.ndarray, g: np.ndarray):
    """:func:`resgrad.nn.layers.layernorm_backward` in one pass over each row: ``(dx, dg,
    db)``, (..., C), (C,), (C,), dg and db summed in float64 and returned in g's dtype.
    None when no kernel runs."""
    C = g.shape[0]
    fn = _kernel("ln_backward", dout, xhat, rstd, g)
    if fn is None:
        return None
    dx = np.empty_like(dout)  # (..., C)
    dg, db = np.zeros(C), np.zeros(C)  # (C,), (C,) float64 sums over the rows
    fn(dout.reshape(-1, C), xhat.reshape(-1, C), rstd.reshape(-1), g, dx.reshape(-1, C), dg, db)
    return dx, dg.astype(g.dtype), db.astype(g.dtype)


def causal_softmax_runs(att: np.ndarray) -> bool:
    """Whether :func:`causal_softmax` runs on an array like ``att`` (..., T, T)."""
    return _kernel("causal_softmax", att) is not None


def causal_softmax(att: np.ndarray, i0: int, i1: int, scale) -> bool:
    """Queries ``i0..i1-1`` of raw scores ``q k^T`` (..., T, T), in place: each row r becomes
    ``softmax(scale * att[r, :r+1])`` followed by zeros, the causal mask and the scale in
    the same pass (:func:`resgrad.nn.layers.sdpa_forward`'s steps 3-4). False (att
    untouched) when no kernel runs."""
    fn = _kernel("causal_softmax", att)
    if fn is None:
        return False
    T = att.shape[-1]
    fn(att.reshape(-1, T, T), i0, i1, att.dtype.type(scale), att.dtype == np.float32)
    return True


def causal_softmax_backward(datt: np.ndarray, att: np.ndarray, i0: int, scale) -> bool:
    """The backward of :func:`causal_softmax` for queries ``i0..i0+Tb-1``, in datt's buffer
    (..., Tb, S): ``ds = scale * p * (datt - sum(datt * p))`` over the keys each query
    sees, 0 after; ``att`` (..., T, T) holds p. False (datt untouched) when no kernel runs."""
    fn = _kernel("causal_softmax_dx", datt, att)
    if fn is None:
        return False
    T, (Tb, S) = att.shape[-1], datt.shape[-2:]
    fn(datt.reshape(-1, Tb, S), att.reshape(-1, T, T), i0, datt.dtype.type(scale))
    return True


def sum_sq64(x: np.ndarray) -> float | None:
    """``sum(x^2)`` with every element widened to float64, in one pass (...); None when no
    kernel runs."""
    fn = _kernel("sum_sq64", x)
    if fn is None:
        return None
    return float(fn(x.reshape(-1)))


def causal_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, y: np.ndarray
) -> np.ndarray | None:
    """Causal attention without dropout in one pass over each head, ``(B, H, T, D) -> lse``:
    writes ``y = softmax(q k^T / sqrt(D) + mask) v`` into ``y`` and returns each row's
    log-sum-exp of its scaled scores, (B, H, T) (:func:`resgrad.nn.layers.sdpa_forward`'s
    steps 1-4 and 6, the probabilities never stored). q, k, v and y may be strided views.
    None (y untouched) when no kernel runs, or with :data:`FUSED_ATTENTION` False."""
    fn = _kernel("attn_forward", q, k, v, y) if FUSED_ATTENTION else None
    if fn is None:
        return None
    lse = np.empty(q.shape[:-1], q.dtype)  # (B,H,T)
    fn(q, k, v, y, lse, q.dtype.type(1.0 / math.sqrt(q.shape[-1])), q.dtype == np.float32)
    return lse


def causal_attention_backward(dy, q, k, v, y, lse, dq, dk, dv) -> bool:
    """The backward of :func:`causal_attention` into ``dq, dk, dv`` (B, H, T, D), every
    element written: the probabilities recomputed from q, k and ``lse``, and
    ``ds = p (dp - rowsum(dy * y))``. False (nothing written) when no kernel runs."""
    fn = _kernel("attn_backward", dy, q, k, v, y, lse, dq, dk, dv)
    if fn is None:
        return False
    scale = q.dtype.type(1.0 / math.sqrt(q.shape[-1]))
    fn(dy, q, k, v, y, lse, dq, dk, dv, scale, q.dtype == np.float32)
    return True
