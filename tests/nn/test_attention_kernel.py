"""The compiled causal attention (one pass a head, the log-sum-exp kept instead of the
probabilities) against the NumPy steps it stands beside, the formula and PyTorch."""

import numpy as np
import pytest

from resgrad.nn import kernels
from resgrad.nn import layers as L
from resgrad.verify.selfcheck import RTOL, compare, randomize_params


@pytest.fixture(autouse=True)
def fused(monkeypatch):
    """The compiled attention on (it is off by default while slower than the NumPy steps)."""
    monkeypatch.setattr(kernels, "FUSED_ATTENTION", True)


def test_the_compiled_attention_is_off_by_default(monkeypatch):
    monkeypatch.undo()
    assert kernels.FUSED_ATTENTION is False
    q = np.ones((1, 1, 3, 2))
    assert isinstance(L.sdpa_forward(q, q, q)[1], L.SdpaCache)


TOL = {np.float64: 1e-12, np.float32: 1e-5}  # relative to the array's largest entry

# (B, H, T, D): T within one tile (16 queries, 64 keys), across tiles and not a multiple
# of either, a whole number of query tiles, T = 1; D odd, D = 1, a benchmark's D
SHAPES = [(2, 3, 70, 5), (1, 1, 1, 4), (2, 2, 129, 32), (3, 2, 16, 3), (1, 2, 9, 1)]


def _qkv(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(shape) * 1.5).astype(dtype) for _ in range(4)]


def _both(q, k, v, dy, monkeypatch):
    """y, the probabilities and (dq, dk, dv), on the kernel then on the NumPy steps."""
    runs = []
    for on in (True, False):
        monkeypatch.setattr(kernels, "ENABLED", on)
        y, c = L.sdpa_forward(q, k, v)
        assert isinstance(c, L.FlashCache) is on  # the kernel ran, then the steps
        runs.append([y, L.sdpa_probs(c), *L.sdpa_backward(dy, c)])
    return runs


def _err(a, ref):
    """max |a - ref| relative to ref's largest entry (1 where ref is all 0, as dq at T = 1)."""
    return float(np.abs(a.astype(np.float64) - ref).max()) / max(float(np.abs(ref).max()), 1.0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_kernel_gives_the_numpy_steps_forward_and_every_gradient(shape, dtype, monkeypatch):
    q, k, v, dy = _qkv(shape, dtype)
    fused, plain = _both(q, k, v, dy, monkeypatch)
    for name, a, p in zip(("y", "att", "dq", "dk", "dv"), fused, plain):
        assert a.dtype == dtype and a.shape == p.shape
        assert _err(a, p) <= TOL[dtype], (name, _err(a, p))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_kernel_computes_the_formula(dtype):
    """Against softmax(q k^T / sqrt(D) + mask) v and its log-sum-exp, in float64."""
    q, k, v, _ = _qkv((2, 2, 37, 6), dtype, seed=1)
    y = np.empty_like(q)
    lse = kernels.causal_attention(q, k, v, y)
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    s = q64 @ k64.swapaxes(-1, -2) / np.sqrt(6) + L.causal_mask(37)  # (B,H,T,T)
    want_lse = np.log(np.exp(s).sum(-1))  # (B,H,T)
    assert _err(lse, want_lse) <= TOL[dtype]
    assert _err(y, np.exp(s - want_lse[..., None]) @ v64) <= TOL[dtype]


def test_the_kernel_matches_torch_scaled_dot_product_attention(torch):
    q, k, v, dy = _qkv((2, 3, 67, 8), np.float64, seed=2)
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    ty = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    ty.backward(torch.tensor(dy))
    y, c = L.sdpa_forward(q, k, v)
    assert isinstance(c, L.FlashCache)
    assert _err(y, ty.detach().numpy()) <= 1e-13
    for mine, ref in zip(L.sdpa_backward(dy, c), (tq, tk, tv)):
        assert _err(mine, ref.grad.numpy()) <= 1e-12


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_same_bytes_twice_and_on_one_or_two_threads(dtype):
    """Each (b, h) is one thread's, in a fixed order: the count of threads changes nothing."""
    import numba

    q, k, v, dy = _qkv((3, 4, 50, 8), dtype, seed=3)
    runs = []
    was = numba.get_num_threads()
    try:
        for n in (1, min(2, numba.config.NUMBA_NUM_THREADS), 1, was):
            numba.set_num_threads(n)
            y, c = L.sdpa_forward(q, k, v)
            runs.append([y, c.lse, *L.sdpa_backward(dy, c)])
    finally:
        numba.set_num_threads(was)
    for run in runs[1:]:
        assert all(a.tobytes() == b.tobytes() for a, b in zip(run, runs[0]))


def test_views_in_and_out_give_the_contiguous_arrays_bytes():
    """attention's q, k, v are strided views of its fused projection, and y and the
    gradients are written into views: the kernel reads and writes them by their strides."""
    B, T, H, D = 2, 21, 3, 4
    qkv = np.random.default_rng(4).standard_normal((B, T, 3, H, D))  # (B,T,3,H,D)
    q, k, v = qkv.transpose(2, 0, 3, 1, 4)  # (B,H,T,D) views
    dy = np.random.default_rng(5).standard_normal((B, H, T, D))
    y_view = np.empty((B, T, H, D)).transpose(0, 2, 1, 3)  # (B,H,T,D) view
    y, c = L.sdpa_forward(q, k, v, out=y_view)
    grads = np.empty((3, B, T, H, D)).transpose(0, 1, 3, 2, 4)  # (3,B,H,T,D) views
    L.sdpa_backward(dy, c, out=tuple(grads))
    y2, c2 = L.sdpa_forward(*(np.ascontiguousarray(a) for a in (q, k, v)))
    assert y is y_view and y.tobytes() == y2.tobytes()
    for g, g2 in zip(grads, L.sdpa_backward(dy, c2)):
        assert np.ascontiguousarray(g).tobytes() == g2.tobytes()


def test_attention_dropout_keeps_the_steps_and_the_switch_gives_the_reference(monkeypatch):
    q, k, v, dy = _qkv((1, 2, 8, 4), np.float64, seed=6)
    _, c = L.sdpa_forward(q, k, v, dropout=0.3, train=True, rng=np.random.default_rng(0))
    assert isinstance(c, L.SdpaCache) and c.drop.mask is not None  # the kernel has no dropout
    assert isinstance(L.sdpa_forward(q, k, v, dropout=0.3)[1], L.FlashCache)  # eval: none
    monkeypatch.setattr(kernels, "ENABLED", False)  # RESGRAD_KERNELS=0
    assert kernels.causal_attention(q, k, v, np.empty_like(q)) is None
    assert not kernels.causal_attention_backward(dy, q, k, v, q, q[..., 0], q, q, q)
    assert isinstance(L.sdpa_forward(q, k, v)[1], L.SdpaCache)


def _spy(monkeypatch):
    """Counts the forwards and backwards the compiled attention computed."""
    ran = {"forward": 0, "backward": 0}
    fwd, bwd = kernels.causal_attention, kernels.causal_attention_backward

    def forward(*a):
        out = fwd(*a)
        ran["forward"] += out is not None
        return out

    def backward(*a):
        out = bwd(*a)
        ran["backward"] += out
        return out

    monkeypatch.setattr(kernels, "causal_attention", forward)
    monkeypatch.setattr(kernels, "causal_attention_backward", backward)
    return ran


def _model_check():
    from resgrad.nn.model import GPT, GPTConfig

    cfg = GPTConfig(vocab_size=7, block_size=20, n_layer=2, n_head=2, n_embd=6)
    m = GPT(cfg, seed=0, dtype=np.float64)
    randomize_params(m.params, np.random.default_rng(1))
    idx = np.random.default_rng(2).integers(0, 7, (2, 19))
    _, _, cache = m.forward(idx[:, :-1], idx[:, 1:])
    g = m.backward(cache)
    args = {k: a for k, a in m.params.items() if not k.endswith("b_qkv")}
    return compare("gpt", lambda **_: m.forward(idx[:, :-1], idx[:, 1:])[1], args,
                   {k: g[k] for k in args}, mode="directional", directions=4)  # fmt: skip


def test_a_whole_model_on_the_kernel_passes_its_float64_check(monkeypatch):
    ran = _spy(monkeypatch)
    r = _model_check()
    assert r.passed and r.max_error < RTOL, r.row()
    assert ran["backward"] == 2 and ran["forward"] >= 3  # both blocks, forward and backward


def test_a_broken_kernel_backward_fails_the_check(monkeypatch):
    bwd = kernels.causal_attention_backward

    def broken(dy, q, k, v, y, lse, dq, dk, dv):
        out = bwd(dy, q, k, v, y, lse, dq, dk, dv)
        dk *= 1.01  # a 1% error in dL/dk
        return out

    monkeypatch.setattr(kernels, "causal_attention_backward", broken)
    assert not _model_check().passed


def test_the_layer_checks_of_attention_pass_on_the_kernel(monkeypatch):
    """The float64 checks of the sdpa and of multi-head attention (its q, k, v strided views
    of the fused projection), run through the compiled attention."""
    from resgrad.verify.selfcheck import layer_checks

    ran = _spy(monkeypatch)
    rows = {r.name: r for r in layer_checks(seed=0)}
    for name in ("causal sdpa", "multi-head attention"):
        assert rows[name].passed and rows[name].max_error < RTOL, rows[name].row()
    assert ran["forward"] > 0 and ran["backward"] >= 2
