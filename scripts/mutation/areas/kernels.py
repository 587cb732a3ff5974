"""Mutants of the kernels that round their own way (src/resgrad/nn/kernels.py, issue 35):
the causal softmax with its mask and scale, the whole LayerNorm row, the float64 sum of
squares, and where the attention puts the scale and the heads."""

# ruff: noqa: E501  (each mutant quotes its source text verbatim)

from mutation import Mutant

K = "nn/kernels.py"
L = "nn/layers.py"
KT = ("tests/nn/test_kernels.py",)
LT = ("tests/nn/test_kernels.py", "tests/nn/test_layers.py", "tests/nn/test_blocks.py")

MUTANTS = [
    # the causal softmax, float32
    Mutant("kernels: the float32 softmax's row max misses its last visible key", K,
           "            for j in range(1, r + 1):\n                m = max(m, row[j])  # the row's max",
           "            for j in range(1, r):\n                m = max(m, row[j])  # the row's max",
           KT, "bounds"),
    Mutant("kernels: the float32 exp without ln 2's low part", K,
           "        t = t - e * _LN2_LO  # in [-ln2/2, ln2/2]\n", "", KT, "formula"),
    Mutant("kernels: the float32 exp's polynomial one term short", K,
           "        p = p * t + _E0\n", "", KT, "formula"),
    Mutant("kernels: 2^n with the exponent bias off by one", K,
           "_BIAS = np.int32(127)", "_BIAS = np.int32(126)", KT, "formula"),
    Mutant("kernels: exp underflow clamps instead of giving 0", K,
           "bits[j] = 0 if under else (np.int32(e) + _BIAS) << 23",
           "bits[j] = (np.int32(e) + _BIAS) << 23", KT, "bounds"),
    Mutant("kernels: the causal softmax without the scale", K,
           "                row[j] = (row[j] - m) * scale  # <= 0",
           "                row[j] = row[j] - m  # <= 0", KT, "formula"),
    # the causal softmax, float64, and its backward
    Mutant("kernels: the float64 softmax does not normalise", K,
           "            inv = 1.0 / total", "            inv = 1.0", KT, "formula"),
    Mutant("kernels: the causal softmax leaves the future keys as they were", K,
           "            for j in range(r + 1, S):\n                row[j] = 0.0  # keys after the query",
           "            for j in range(r + 1, r + 1):\n                row[j] = 0.0  # keys after the query",
           KT, "bounds"),
    Mutant("kernels: the softmax backward without its sum term", K,
           "                d[j] = scale * p[j] * (d[j] - dot)", "                d[j] = scale * p[j] * d[j]",
           KT, "formula"),
    Mutant("kernels: the softmax backward reads the block's first row for every query", K,
           "            r = i0 + i\n", "            r = i\n", KT, "ordering"),
    Mutant("kernels: the softmax backward without the scale", K,
           "                d[j] = scale * p[j] * (d[j] - dot)", "                d[j] = p[j] * (d[j] - dot)",
           LT, "formula"),
    # LayerNorm
    Mutant("kernels: LayerNorm's variance divided by C - 1", K,
           "        var /= C  # 2)-3)", "        var /= C - 1  # 2)-3)", KT, "statistics"),
    Mutant("kernels: LayerNorm's eps outside the square root", K,
           "rs = 1.0 / np.sqrt(var + eps)", "rs = 1.0 / np.sqrt(var) + eps", KT, "formula"),
    Mutant("kernels: LayerNorm adds the bias without a bias", K,
           "out[r, c] = xh * g[c] + b[c] if has_bias else xh * g[c]",
           "out[r, c] = xh * g[c] + b[c]", KT, "formula"),
    Mutant("kernels: LayerNorm's backward drops the xhat term", K,
           "dx[r, c] = rs * (dout[r, c] * g[c] - m1 - xhat[r, c] * m2)",
           "dx[r, c] = rs * (dout[r, c] * g[c] - m1)", LT, "formula"),
    Mutant("kernels: LayerNorm's dg sums dout, not dout xhat", K,
           "            dg[c] += dout[r, c] * xhat[r, c]", "            dg[c] += dout[r, c]", LT,
           "formula"),
    Mutant("kernels: LayerNorm returns db without a bias", L,
           "        return dx, dg, db if has_bias else None", "        return dx, dg, db", LT,
           "records"),
    # the sum of squares, and the switch
    Mutant("kernels: sum_sq64 skips the last element", K,
           "    for i in range(x.size):\n        v = np.float64(x[i])",
           "    for i in range(x.size - 1):\n        v = np.float64(x[i])", KT, "bounds"),
    Mutant("kernels: sum_sq64 squares in float32", K,
           "        v = np.float64(x[i])", "        v = x[i]", KT, "formula"),
    Mutant("kernels: the switch does not turn the fast kernels off", K,
           "    if not ENABLED:\n        return None\n    dt = arrays[0].dtype",
           "    dt = arrays[0].dtype", KT, "refusal"),
    # where the attention puts the scale and the heads
    Mutant("attention: the scale on q as well as in the kernel", L,
           "    qs = q if fused else q * scale  # 1)", "    qs = q * scale  # 1)", LT, "formula"),
    Mutant("attention: dq scaled twice after the kernel's backward", L,
           "    dq = dqs if scale_in_softmax else np.multiply(dqs, scale, out=dqs)",
           "    dq = np.multiply(dqs, scale, out=dqs)", LT, "formula"),
    Mutant("attention: the backward's NumPy pass forgets the kernel's scale", L,
           "            if scale_in_softmax:  # the forward's kernel scaled the scores: d/d(q k^T)\n"
           "                datt *= scale\n", "", KT, "formula"),
    Mutant("attention: the heads' gradients written as [k | q | v]", L,
           "out=tuple(dqkv[:, :, j].transpose(0, 2, 1, 3) for j in range(3))",
           "out=tuple(dqkv[:, :, j].transpose(0, 2, 1, 3) for j in (1, 0, 2))", LT, "ordering"),
]  # fmt: skip
