"""The layers where mutmut found them untested: dropout inside attention and the MLP in
training mode (its stream, its order, its gradient), dropout's own stream and bounds, the
embedding's sum and bounds, LayerNorm where epsilon dominates, softmax along any axis, the
derivatives at their edges, the named-parameter classes, attention's steps over any leading
axes and blocks and from a flash cache, the in-place passes' memory, and the refusals'
names."""

import numpy as np
import pytest
from scipy.special import softmax as scipy_softmax

from resgrad.nn import layers as L
from resgrad.verify.selfcheck import RTOL, compare

P = 0.3  # a dropout rate


def _params(rng, shapes):
    """Weights at scale 0.3, biases at 0.1, in the sublayer's argument order."""
    return {k: rng.standard_normal(s) * (0.3 if k[0] == "w" else 0.1) for k, s in shapes.items()}


def _attn_params(rng, C=8):
    return _params(rng, dict(w_qkv=(C, 3 * C), b_qkv=(3 * C,), w_proj=(C, C), b_proj=(C,)))


def _mlp_params(rng, C=8):
    return _params(rng, dict(w_fc=(C, 4 * C), b_fc=(4 * C,), w_proj=(4 * C, C), b_proj=(C,)))


def _attention_by_hand(x, w, n_head, rng):
    """Causal attention with dropout on the probabilities, then on the output, in that order
    from one stream: written out step by step."""
    B, T, C = x.shape
    H, D = n_head, C // n_head
    qkv = (x @ w["w_qkv"] + w["b_qkv"]).reshape(B, T, 3, H, D).transpose(2, 0, 3, 1, 4)
    s = qkv[0] @ qkv[1].transpose(0, 1, 3, 2) / np.sqrt(D)  # (B,H,T,T)
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    att = scipy_softmax(s, axis=-1)
    att = L.dropout_forward(att, P, train=True, rng=rng)[0]
    y = (att @ qkv[2]).transpose(0, 2, 1, 3).reshape(B, T, C)
    out = y @ w["w_proj"] + w["b_proj"]
    return L.dropout_forward(out, P, train=True, rng=rng)[0]


def test_attention_in_training_mode_drops_out_its_probabilities_then_its_output():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 5, 8)), _attn_params(rng)
    out, _ = L.attention_forward(x, *w.values(), 2, dropout=P, train=True,
                                 rng=np.random.default_rng(7))  # fmt: skip
    want = _attention_by_hand(x, w, 2, np.random.default_rng(7))
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-14)
    assert np.abs(out - L.attention_forward(x, *w.values(), 2)[0]).max() > 1e-3
    # out of training mode (the default), or at rate 0, nothing is dropped and nothing drawn
    for kw in ({"dropout": P}, {"train": True}):
        r = np.random.default_rng(7)
        same = L.attention_forward(x, *w.values(), 2, rng=r, **kw)[0]
        np.testing.assert_array_equal(same, L.attention_forward(x, *w.values(), 2)[0])
        assert r.random() == np.random.default_rng(7).random()


def test_the_mlp_in_training_mode_drops_out_its_output():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 5, 8)), _mlp_params(rng)
    out, _ = L.mlp_forward(x, *w.values(), dropout=P, train=True, rng=np.random.default_rng(7))
    plain = L.mlp_forward(x, *w.values())[0]
    want = L.dropout_forward(plain, P, train=True, rng=np.random.default_rng(7))[0]
    np.testing.assert_allclose(out, want, rtol=1e-13, atol=1e-15)
    assert np.abs(out - plain).max() > 1e-3
    r = np.random.default_rng(7)
    np.testing.assert_array_equal(L.mlp_forward(x, *w.values(), dropout=P, rng=r)[0], plain)
    assert r.random() == np.random.default_rng(7).random()


@pytest.mark.parametrize("sublayer", ["attention", "mlp", "dropout"])
def test_a_backward_through_dropout_in_training_mode_checks_in_float64(sublayer):
    """The mask fixed by the seed: each forward of the check draws the same one."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 5, 8))
    drop = dict(dropout=P, train=True)
    if sublayer == "attention":
        w, bwd = _attn_params(rng), L.attention_backward

        def fwd():
            return L.attention_forward(x, *w.values(), 2, **drop, rng=np.random.default_rng(3))
    elif sublayer == "mlp":
        w, bwd = _mlp_params(rng), L.mlp_backward

        def fwd():
            return L.mlp_forward(x, *w.values(), **drop, rng=np.random.default_rng(3))
    else:
        w = {}
        fwd = lambda: L.dropout_forward(x, P, train=True, rng=np.random.default_rng(3))  # noqa: E731
        bwd = lambda d, c: (L.dropout_backward(d, c),)  # noqa: E731
    out, cache = fwd()
    dout = np.random.default_rng(4).standard_normal(out.shape)
    dx, *g = bwd(dout, cache)
    r = compare(sublayer, lambda **_: fwd()[0], {"x": x, **w}, {"x": dx, **dict(zip(w, g))},
                dout=dout, mode="directional")  # fmt: skip
    assert r.passed and r.max_error < RTOL, r.row()


# --------------------------------------------------------------------- dropout itself


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dropout_draws_its_mask_in_the_arrays_dtype(dtype):
    """One uniform of x's dtype an entry, kept where it is at least p: a float32 array
    takes float32 draws (half the stream of float64's), so its masks are its own."""
    x = np.ones((64, 32), dtype=dtype)
    out, cache = L.dropout_forward(x, P, train=True, rng=np.random.default_rng(5))
    u = np.random.default_rng(5).random(x.shape, dtype=dtype)
    np.testing.assert_array_equal(out != 0, u >= dtype(P))
    assert out.dtype == dtype and np.allclose(out[out != 0], 1 / (1 - P))


def test_dropout_at_rate_0_is_the_identity_and_draws_nothing():
    x = np.random.default_rng(0).standard_normal((4, 4))
    r = np.random.default_rng(5)
    out, cache = L.dropout_forward(x, 0.0, train=True, rng=r)
    np.testing.assert_array_equal(out, x)
    assert cache.mask is None and r.random() == np.random.default_rng(5).random()
    out, cache = L.dropout_forward(x, 0.5, rng=np.random.default_rng(5))  # eval, the default
    np.testing.assert_array_equal(out, x)
    assert cache.mask is None


def test_the_sublayers_do_no_dropout_by_default():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 8))
    q, k, v = (rng.standard_normal((2, 2, 4, 4)) for _ in range(3))
    r = np.random.default_rng(1)
    y, c = L.sdpa_forward(q, k, v, rng=r, train=True)  # rate 0 by default
    assert r.random() == np.random.default_rng(1).random()
    y2, _ = L.sdpa_forward(q, k, v, dropout=P, rng=np.random.default_rng(1))  # eval by default
    np.testing.assert_array_equal(y, y2)
    w = _mlp_params(rng)
    np.testing.assert_array_equal(L.mlp_forward(x, *w.values(), train=True, rng=r)[0],
                                  L.mlp_forward(x, *w.values())[0])  # fmt: skip


# --------------------------------------------------------------------- embedding


def test_the_embedding_is_the_token_row_plus_the_position_row():
    rng = np.random.default_rng(0)
    wte, wpe = rng.standard_normal((5, 3)), rng.standard_normal((4, 3))
    idx = np.array([[4, 0, 2], [1, 1, 3]])
    x, _ = L.embedding_forward(idx, wte, wpe)
    for b in range(2):
        for t in range(3):
            np.testing.assert_array_equal(x[b, t], wte[idx[b, t]] + wpe[t])


def test_the_embedding_refuses_what_lies_past_its_tables():
    wte, wpe = np.zeros((5, 8)), np.zeros((4, 8))  # C = 8 > block size 4
    with pytest.raises(ValueError, match=r"^token id 5 is outside \[0, 5\) \(vocab_size=5\)$"):
        L.embedding_forward(np.array([[0, 5]]), wte, wpe)
    with pytest.raises(ValueError, match="^sequence length T=5 is longer than the block size 4$"):
        L.embedding_forward(np.zeros((1, 5), int), wte, wpe)
    for a, b in ((wte, np.zeros(8)), (wte, np.zeros((4, 7))), (np.zeros(8), wpe)):
        with pytest.raises(ValueError, match=r"must be \(V, C\) and \(block_size, C\)$"):
            L.embedding_forward(np.zeros((1, 2), int), a, b)


# --------------------------------------------------------------------- LayerNorm


def test_layernorm_where_epsilon_dominates_the_variance():
    """A row of variance 2.5e-7, far below epsilon: the output is (x - mean) / sqrt(var + eps)
    to the last digits (with var - eps it would be NaN; at another epsilon, another row)."""
    x = np.array([[0.0, 1e-3], [2.0, -1.0]])
    g, b = np.array([1.5, 0.5]), np.array([0.1, -0.2])
    for eps in (1e-5, 1e-3):
        out, _ = L.layernorm_forward(x, g, b, eps)
        xc = x - x.mean(-1, keepdims=True)
        want = xc / np.sqrt((xc**2).mean(-1, keepdims=True) + eps) * g + b
        np.testing.assert_allclose(out, want, rtol=1e-14, atol=1e-16)
    np.testing.assert_array_equal(L.layernorm_forward(x, g, b)[0],
                                  L.layernorm_forward(x, g, b, 1e-5)[0])  # fmt: skip


def test_the_named_parameter_classes_hold_their_names_defaults_and_gradients():
    rng = np.random.default_rng(0)
    x, w, bias = rng.standard_normal((3, 4)), rng.standard_normal((4, 2)), rng.standard_normal(2)
    for lin, keys in ((L.Linear(w, bias), ["w", "b"]), (L.Linear(w), ["w"])):
        assert list(lin.params) == keys
        out, c = lin.forward(x)
        np.testing.assert_array_equal(out, L.linear_forward(x, w, lin.params.get("b"))[0])
        dx, grads = lin.backward(np.ones_like(out), c)
        assert list(grads) == keys
    g, b = rng.standard_normal(4), rng.standard_normal(4)
    x = np.array([[0.0, 1e-3, 2e-3, 0.0], [1.0, 2.0, 3.0, 5.0]])
    for ln, keys in ((L.LayerNorm(g, b), ["g", "b"]), (L.LayerNorm(g), ["g"])):
        assert list(ln.params) == keys and ln.eps == 1e-5
        out, c = ln.forward(x)
        np.testing.assert_array_equal(out, L.layernorm_forward(x, g, ln.params.get("b"), 1e-5)[0])
        assert list(ln.backward(np.ones_like(out), c)[1]) == keys
    wide = L.LayerNorm(g, b, eps=0.5)
    np.testing.assert_array_equal(wide.forward(x)[0], L.layernorm_forward(x, g, b, 0.5)[0])


def test_a_single_vector_is_a_batch_of_one():
    rng = np.random.default_rng(0)
    x, w, g = rng.standard_normal(4), rng.standard_normal((4, 3)), rng.standard_normal(4)
    np.testing.assert_allclose(L.linear_forward(x, w, None)[0], x @ w, rtol=1e-14)
    out = L.layernorm_forward(x, g, None)[0]
    np.testing.assert_allclose(out, L.layernorm_forward(x[None], g, None)[0][0], rtol=1e-14)


# --------------------------------------------------------------------- softmax, derivatives


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2, -3])
def test_softmax_along_any_axis(axis):
    x = np.random.default_rng(0).standard_normal((3, 4, 5)) * 3
    np.testing.assert_allclose(L.softmax(x, axis=axis), scipy_softmax(x, axis=axis), rtol=1e-14)


def test_the_derivatives_at_their_edges():
    x = np.array([-2.0, 0.0, 0.5, 3.0])
    d = np.array([1.0, 2.0, 3.0, 4.0])
    _, c = L.relu_forward(x)
    np.testing.assert_array_equal(L.relu_backward(d, c), [0.0, 0.0, 3.0, 4.0])  # 0 at x = 0
    out, c = L.tanh_forward(x)
    np.testing.assert_allclose(L.tanh_backward(d, c), d / np.cosh(x) ** 2, rtol=1e-14)


def test_a_one_token_vocabulary_with_ignored_positions():
    """V = 1: every logit is the one class's; an ignored position reads column 0 (there is
    no other) and counts for nothing."""
    logits = np.zeros((1, 3, 1))
    loss, cache = L.cross_entropy_forward(logits, np.array([[0, -1, 0]]), -1)
    assert loss == 0.0
    np.testing.assert_array_equal(L.cross_entropy_backward(1.0, cache), np.zeros((1, 3, 1)))


# --------------------------------------------------------------------- refusals


@pytest.mark.parametrize("n_head", [True, "2", 0, 2.0])
def test_attention_refuses_a_head_count_that_is_not_a_positive_integer(n_head):
    x = np.zeros((1, 2, 8))
    with pytest.raises(ValueError, match=f"^n_head must be a positive integer, got {n_head!r}$"):
        L.attention_forward(x, np.zeros((8, 24)), None, np.zeros((8, 8)), None, n_head)


def test_the_sublayers_name_what_is_misshapen():
    x = np.zeros((1, 2, 8))
    with pytest.raises(ValueError, match=r"^x has shape \(2, 8\); expected \(B, T, C\)$"):
        L.attention_forward(x[0], np.zeros((8, 24)), None, np.zeros((8, 8)), None, 2)
    with pytest.raises(ValueError, match=r"^w_proj has shape \(8, 4\); expected \(8, 8\)"):
        L.attention_forward(x, np.zeros((8, 24)), None, np.zeros((8, 4)), None, 2)
    for w_fc, w_proj in ((np.zeros((8, 32)), np.zeros((8, 32))), (np.zeros(8), np.zeros(8))):
        with pytest.raises(ValueError, match=r"must be \(C, F\) and \(F, C\)$"):
            L.mlp_forward(x, w_fc, None, w_proj, None)
    every = ", ".join(L.ACTIVATIONS)
    with pytest.raises(ValueError, match=f"^unknown activation 'relu'; expected one of {every}$"):
        L.mlp_forward(x, np.zeros((8, 32)), None, np.zeros((32, 8)), None, activation="relu")


def test_a_uniform_equal_to_the_rate_is_kept():
    """P(keep) = 1 - p: an entry is kept where its uniform is at least p, so a uniform that
    is exactly p keeps its entry (the rate chosen here to be the stream's first draw)."""
    p = float(np.random.default_rng(9).random())
    out, _ = L.dropout_forward(np.ones(3), p, train=True, rng=np.random.default_rng(9))
    assert out[0] == 1 / (1 - p)


# --------------------------------------------------------------------- memory


def _peak(fn, *args):
    """The most memory traced while ``fn(*args)`` runs (NumPy reports its arrays' buffers
    to tracemalloc), what it returns kept alive; after a first call, which may compile."""
    import tracemalloc

    fn(*args)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        kept = fn(*args)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    del kept
    return peak


def test_the_elementwise_passes_write_into_their_own_buffers():
    """The (B, T, V) and (B*T, 4C) passes work in place: cross-entropy holds one array of
    the logits' size (its probabilities), the tanh GELU two (the tanh, kept, and the
    output), the exact GELU two (the CDF, kept, and the output). A pass that made a fresh
    array where it meant to write into one holds one more."""
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((4, 16, 2000))
    size = logits.nbytes
    assert _peak(L.cross_entropy_forward, logits, np.zeros((4, 16), int)) < 1.5 * size
    x = rng.standard_normal((64, 2000))
    assert _peak(L.gelu_forward, x) < 2.5 * size
    assert _peak(L.gelu_erf_forward, x) < 2.5 * size


# --------------------------------------------------------------------- attention's steps


def _qkv(shape, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape) for _ in range(3)]


@pytest.mark.parametrize("lead", [(), (3,), (2, 1, 3)])
def test_attention_steps_batch_over_any_leading_axes_in_any_blocks(lead):
    """(T, D), (H, T, D) or (B, A, H, T, D): each (T, D) slice attends as it would alone,
    forward and backward, whether its queries are taken in blocks of 2 or all at once."""
    T, D = 5, 4
    q, k, v = _qkv((*lead, T, D))
    dy = np.random.default_rng(1).standard_normal(q.shape)
    flat = [a.reshape(1, -1, T, D) for a in (q, k, v, dy)]  # the same slices, as (1, N, T, D)
    y_ref, c_ref = L.sdpa_forward(*flat[:3], block=T)
    g_ref = L.sdpa_backward(flat[3], c_ref, block=T)
    for block in (2, T):
        y, c = L.sdpa_forward(q, k, v, block=block)
        np.testing.assert_allclose(y.reshape(y_ref.shape), y_ref, rtol=1e-13, atol=1e-15)
        for g, want in zip(L.sdpa_backward(dy, c, block=block), g_ref):
            np.testing.assert_allclose(g.reshape(want.shape), want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("lead", [(2, 2), (3,)])
def test_a_flash_cache_read_without_its_kernel_gives_the_steps_probabilities_and_gradients(
    lead, monkeypatch
):
    """A FlashCache (what the compiled attention keeps: q, k, v, y and each row's
    log-sum-exp) read where the kernels are off: its probabilities recomputed, then the
    NumPy steps' backward, into the arrays given or fresh ones of q's dtype."""
    from resgrad.nn import kernels

    monkeypatch.setattr(kernels, "ENABLED", False)  # RESGRAD_KERNELS=0
    q, k, v = _qkv((*lead, 5, 4))
    dy = np.random.default_rng(1).standard_normal(q.shape)
    y, c = L.sdpa_forward(q, k, v)
    s = q @ k.swapaxes(-1, -2) / 2.0 + L.causal_mask(5)  # D = 4: 1 / sqrt(D) = 1/2
    lse = np.log(np.exp(s).sum(-1))  # (B,H,T)
    flash = L.FlashCache(q, k, v, y, lse)
    np.testing.assert_allclose(L.sdpa_probs(flash), c.att, rtol=1e-13, atol=1e-16)
    want = L.sdpa_backward(dy, c)
    for out in (None, tuple(np.empty_like(q) for _ in range(3))):
        got = L.sdpa_backward(dy, flash, block=2, out=out)
        for g, w in zip(got, want):
            assert g.dtype == q.dtype
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
        if out is not None:
            assert all(g is o for g, o in zip(got, out))


def test_float32_attention_keeps_its_probabilities_in_float32():
    q, k, v = (a.astype(np.float32) for a in _qkv((1, 2, 5, 4)))
    y, c = L.sdpa_forward(q, k, v)
    assert y.dtype == np.float32 and L.sdpa_probs(c).dtype == np.float32
    assert all(g.dtype == np.float32 for g in L.sdpa_backward(np.ones_like(y), c))


def test_attention_steps_refuse_q_k_v_of_other_shapes():
    q, k, v = _qkv((1, 2, 5, 4))
    said = r"^q, k, v must share one shape \(\.\.\., T, D\); got \(1, 2, 5, 4\), \(1, 2, 4, 4\), "
    with pytest.raises(ValueError, match=said + r"\(1, 2, 5, 4\)$"):
        L.sdpa_forward(q, k[..., :4, :], v)
    with pytest.raises(ValueError, match="must share one shape"):
        L.sdpa_forward(q[0, 0, 0], k[0, 0, 0], v[0, 0, 0])  # (D,): no T


def test_the_embedding_gradient_adds_every_occurrence():
    """dwte: each token's rows of dout summed (every occurrence, the first token's too), a
    token never seen 0; dwpe: position t's rows summed over the batch, the
    positions after T 0."""
    rng = np.random.default_rng(0)
    idx = rng.integers(0, 4, (8, 300))  # every token hundreds of times, ids 0..3 of 6
    dout = rng.standard_normal((8, 300, 3)).astype(np.float32)
    _, cache = L.embedding_forward(
        idx, np.zeros((6, 3), np.float32), np.zeros((320, 3), np.float32)
    )
    dwte, dwpe = L.embedding_backward(dout, cache)
    want = np.zeros((6, 3))
    np.add.at(want, idx.reshape(-1), dout.reshape(-1, 3).astype(np.float64))
    np.testing.assert_allclose(dwte, want, rtol=1e-5, atol=1e-4)
    assert not dwte[4:].any()
    np.testing.assert_array_equal(dwpe[:300], dout.sum(axis=0))
    assert not dwpe[300:].any()


def test_the_loss_gradient_is_written_into_the_buffer_given():
    logits = np.random.default_rng(0).standard_normal((2, 3, 5))
    _, cache = L.cross_entropy_forward(logits, np.zeros((2, 3), int))
    want = L.cross_entropy_backward(1.0, cache)
    buf = np.empty_like(logits)
    got = L.cross_entropy_backward(1.0, cache, out=buf)
    assert got is buf
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("axis", [1, 2])
def test_the_last_axis_named_either_way_gives_the_same_bytes(axis):
    x = np.random.default_rng(0).standard_normal((3, 4, 200)).astype(np.float32)
    if axis == 2:
        np.testing.assert_array_equal(L.softmax(x, axis=2), L.softmax(x, axis=-1))
    else:
        np.testing.assert_array_equal(L.softmax(x, axis=1), L.softmax(x, axis=-2))


def test_the_refusals_name_the_argument_and_what_was_expected():
    x, w = np.zeros((2, 3)), np.zeros((4, 5))
    with pytest.raises(ValueError, match=r"^x has shape \(2, 3\); expected last dimension 4 "
                                         r"\(C_in, the rows of w\)$"):  # fmt: skip
        L.linear_forward(x, w, None)
    with pytest.raises(ValueError, match=r"^w has shape \(4,\); expected a 2-D \(C_in, C_out\) "
                                         r"weight$"):  # fmt: skip
        L.linear_forward(x, np.zeros(4), None)
    g = np.ones(4)
    with pytest.raises(ValueError, match=r"^x has shape \(2, 3\); expected last dimension 4 "
                                         r"\(C, the size of the gain g\)$"):  # fmt: skip
        L.layernorm_forward(x, g, None)
    with pytest.raises(ValueError, match=r"^b has shape \(3,\); expected \(4,\)$"):
        L.layernorm_forward(np.zeros((2, 4)), g, np.zeros(3))
    with pytest.raises(ValueError, match=r"^logits have shape \(2, 3\); expected \(B, T, V\)$"):
        L.cross_entropy_forward(x, np.zeros((2, 3), int))
    with pytest.raises(ValueError, match="^dropout with train=True and p > 0 needs rng, a "
                                         "np.random.Generator$"):  # fmt: skip
        L.dropout_forward(x, 0.5, train=True)
