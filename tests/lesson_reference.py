# ruff: noqa: NPY002
# (the lesson itself uses NumPy's legacy global RNG; these files reproduce it)
"""The lesson's own code, copied verbatim from lesson-residual-connections.txt.

This is the independent reference the tests compare resgrad against: it is not
resgrad's code, it is what the lesson prints. Only the parameterization differs
(``scale`` is an argument so Exercise 1 can run it at 0.9, as the exercise
says to do by editing the line). It touches NumPy's global RNG state exactly as
the lesson does, so callers run it in a subprocess or accept the reseed.
"""

import numpy as np

# the table exactly as the lesson prints it under "Running it prints a real table:"
LESSON_TABLE = """\
 depth N |    no residual |  with residual
--------------------------------------------
       1 |   2.778871e+00 |       8.671100
       5 |   7.579453e-02 |      14.544574
      10 |   1.856928e-03 |      18.981747
      20 |   8.262664e-07 |      25.643279
"""


def lesson_table(scale=0.5):
    """Run the lesson's table code; return (printed text, {N: (g_none, g_res)})."""
    np.random.seed(42)

    C = 16  # feature width
    B = 4  # a small batch of vectors
    depths = [1, 5, 10, 20]
    MAX_N = max(depths)
    Ws = [np.random.randn(C, C) * (scale / np.sqrt(C)) for _ in range(MAX_N)]

    def sublayer_forward(x, W):
        z = x @ W
        a = np.tanh(z)
        return a, (x, z)  # cache x and the pre-activation z

    def sublayer_backward(dout, cache, W):
        x, z = cache
        dz = dout * (1.0 - np.tanh(z) ** 2)  # local derivative of tanh
        dx = dz @ W.T  # gradient wrt the sublayer's input
        return dx

    def run_stack(N, residual):
        x = np.random.RandomState(0).randn(B, C)  # same input every call
        caches = []
        for i in range(N):
            f, cache = sublayer_forward(x, Ws[i])
            caches.append(cache)
            x = x + f if residual else f  # <-- the residual connection

        dout = np.ones_like(x)  # upstream gradient of norm sqrt(B*C) = 8
        dx = dout
        for i in reversed(range(N)):
            df = sublayer_backward(dx, caches[i], Ws[i])
            dx = dx + df if residual else df  # <-- + x path passes dout through
        return np.linalg.norm(dx)  # norm of gradient reaching the input

    lines = [f"{'depth N':>8} | {'no residual':>14} | {'with residual':>14}", "-" * 44]
    values = {}
    for N in depths:
        g_none = run_stack(N, residual=False)
        g_res = run_stack(N, residual=True)
        values[N] = (g_none, g_res)
        lines.append(f"{N:>8} | {g_none:>14.6e} | {g_res:>14.6f}")
    return "\n".join(lines) + "\n", values


def lesson_gradcheck_error():
    """The lesson's gradient check, verbatim; returns its max relative error."""
    rng = np.random.default_rng(42)
    C = 8
    x = rng.standard_normal((3, C)).astype(np.float64)
    W = (rng.standard_normal((C, C)) * (0.5 / np.sqrt(C))).astype(np.float64)

    def residual_forward(x):
        z = x @ W
        f = np.tanh(z)
        out = x + f  # residual connection
        return out, (x, z)

    def residual_backward(dout, cache):
        x, z = cache
        df = (dout * (1.0 - np.tanh(z) ** 2)) @ W.T  # gradient through the sublayer
        dx = dout + df  # + x path adds dout straight through
        return dx

    out, cache = residual_forward(x)
    dout = np.ones_like(out)
    dx = residual_backward(dout, cache)

    eps = 1e-6
    num = np.zeros_like(x)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            xp = x.copy()
            xp[i, j] += eps
            xm = x.copy()
            xm[i, j] -= eps
            num[i, j] = (residual_forward(xp)[0].sum() - residual_forward(xm)[0].sum()) / (2 * eps)

    rel = np.abs(dx - num) / (np.abs(dx) + np.abs(num) + 1e-12)
    return rel.max()
