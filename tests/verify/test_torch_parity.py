"""PyTorch autograd as the outside referee: identical weights and inputs, float64.

Every parameter gradient of a 2-layer GPT, in every residual scheme, must agree
with PyTorch's to ``||g - g_torch|| / ||g_torch|| < 1e-10``, and the loss to 1e-12.
"""

import dataclasses

import numpy as np
import pytest

from resgrad.nn import layers as L
from resgrad.nn.model import GPT, VARIANTS, GPTConfig
from resgrad.verify.selfcheck import randomize_params
from tests import torch_reference

GRAD_TOL = 1e-10  # per parameter tensor: ||g - g_torch|| / ||g_torch||
LOSS_TOL = 1e-12


def _rel(g, ref):
    n = np.linalg.norm(ref)
    return np.linalg.norm(g - ref) / n if n > 0 else np.linalg.norm(g)


def _compare(torch, model, idx, tgt, ignore_index=None):
    logits, loss, cache = model.forward(idx, tgt, ignore_index=ignore_index)
    grads = model.backward(cache)
    t_logits, t_loss, t_grads = torch_reference.run(
        torch, model.cfg, model.params, idx, tgt, ignore_index
    )
    assert set(t_grads) == set(grads)
    errs = {k: _rel(grads[k], t_grads[k]) for k in grads}
    return abs(loss - t_loss), np.abs(logits - t_logits).max(), errs, t_grads


def _small(variant, seed=0, randomize=True, dtype=np.float64, **kw):
    base = dict(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=12, variant=variant)
    model = GPT(GPTConfig(**{**base, **kw}), seed=seed, dtype=dtype)
    rng = np.random.default_rng(seed + 100)
    if randomize:
        randomize_params(model.params, rng)
    V, T = model.cfg.vocab_size, min(6, model.cfg.block_size)
    return model, rng.integers(0, V, (3, T)), rng.integers(0, V, (3, T))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("randomize", [True, False], ids=["random-params", "as-initialized"])
def test_every_gradient_matches_pytorch_in_float64(torch, variant, randomize):
    model, idx, tgt = _small(variant, randomize=randomize)
    dloss, dlogits, errs, t_grads = _compare(torch, model, idx, tgt)
    assert dloss < LOSS_TOL
    assert dlogits < 1e-12
    worst = max(errs, key=errs.get)
    assert errs[worst] < GRAD_TOL, (worst, errs[worst])
    if not randomize and variant == "rezero":  # alpha = 0: sublayer gradients exactly 0
        assert all(not t_grads[k].any() for k in t_grads if ".attn." in k or ".mlp." in k)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_the_exact_gelu_gpt_matches_pytorch_nn_gelu(torch, variant, bias):
    """activation="gelu-erf" against PyTorch's nn.GELU() (approximate="none")."""
    model, idx, tgt = _small(variant, seed=7, bias=bias, activation="gelu-erf")
    dloss, dlogits, errs, _ = _compare(torch, model, idx, tgt)
    assert dloss < LOSS_TOL and dlogits < 1e-12
    worst = max(errs, key=errs.get)
    assert errs[worst] < GRAD_TOL, (worst, errs[worst])
    # not vacuous: the same weights under the tanh form are a different model to PyTorch
    tanh = dataclasses.replace(model.cfg, activation="gelu-tanh")
    _, loss_tanh, _ = torch_reference.run(torch, tanh, model.params, idx, tgt)
    assert abs(model.forward(idx, tgt)[1] - loss_tanh) > 1e-7


@pytest.mark.parametrize("variant", VARIANTS)
def test_parity_without_biases_and_with_xavier_init(torch, variant):
    model, idx, tgt = _small(variant, seed=1, bias=False, init="xavier")
    dloss, _, errs, _ = _compare(torch, model, idx, tgt)
    assert dloss < LOSS_TOL and max(errs.values()) < GRAD_TOL, errs


@pytest.mark.parametrize("power", [0.0, 0.25, 1.0])
def test_ln_scaling_at_other_powers_matches_pytorch(torch, power):
    """p = 0 (pre-ln's function), a quarter, and 1/l; three blocks, so l reaches 3."""
    model, idx, tgt = _small("ln-scaling", seed=8, n_layer=3, ln_scaling_power=power)
    dloss, dlogits, errs, _ = _compare(torch, model, idx, tgt)
    assert dloss < LOSS_TOL and dlogits < 1e-12
    worst = max(errs, key=errs.get)
    assert errs[worst] < GRAD_TOL, (worst, errs[worst])
    # not vacuous: PyTorch's model at another power is another model
    other = dataclasses.replace(model.cfg, ln_scaling_power=0.5 if power != 0.5 else 0.0)
    _, loss_other, _ = torch_reference.run(torch, other, model.params, idx, tgt)
    assert abs(model.forward(idx, tgt)[1] - loss_other) > 1e-6


@pytest.mark.parametrize(
    "kw, B, T",
    [
        (dict(vocab_size=2, n_head=1, n_embd=4), 1, 1),
        (dict(vocab_size=3, n_head=5, n_embd=5), 2, 4),
        (dict(vocab_size=4, n_head=1, n_embd=7), 1, 8),
    ],
    ids=["V2-B1-T1-one-head", "head-size-1-C5", "C7-T-is-block-size"],
)
@pytest.mark.parametrize("variant", VARIANTS)
def test_parity_at_edge_shapes(torch, kw, B, T, variant):
    model, _, _ = _small(variant, seed=2, **kw)
    rng = np.random.default_rng(3)
    idx = rng.integers(0, model.cfg.vocab_size, (B, T))
    tgt = rng.integers(0, model.cfg.vocab_size, (B, T))
    dloss, _, errs, _ = _compare(torch, model, idx, tgt)
    assert dloss < LOSS_TOL and max(errs.values()) < GRAD_TOL, errs


def test_parity_with_an_ignore_index(torch):
    model, idx, tgt = _small("pre-ln", seed=4)
    tgt[0, :3] = -100
    tgt[2, 5] = -100
    dloss, _, errs, _ = _compare(torch, model, idx, tgt, ignore_index=-100)
    assert dloss < LOSS_TOL and max(errs.values()) < GRAD_TOL, errs


def test_float32_training_path_agrees_with_pytorch_float32(torch):
    model, idx, tgt = _small("pre-ln", seed=5, dtype=np.float32)
    torch.set_default_dtype(torch.float32)
    dloss, dlogits, errs, _ = _compare(torch, model, idx, tgt)
    assert dloss < 1e-5 and dlogits < 1e-4
    assert max(errs.values()) < 1e-4, errs


# --------------------------------------------------------------------- single layers


def test_cross_entropy_at_logits_of_1e4_matches_pytorch(torch):
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((2, 3, 5)) * 1e4
    tgt = rng.integers(0, 5, (2, 3))
    tgt[1, 1] = -1
    loss, c = L.cross_entropy_forward(logits, tgt, ignore_index=-1)
    d = L.cross_entropy_backward(1.0, c)
    t = torch.tensor(logits, requires_grad=True)
    tl = torch.nn.functional.cross_entropy(
        t.reshape(-1, 5), torch.tensor(tgt).reshape(-1), ignore_index=-1
    )
    tl.backward()
    assert np.isfinite(loss) and loss == pytest.approx(float(tl.detach()), rel=1e-14)
    np.testing.assert_allclose(d, t.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_gelu_and_layernorm_match_pytorch(torch):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4, 7)) * 3
    dout = rng.standard_normal(x.shape)
    tx = torch.tensor(x, requires_grad=True)
    torch.nn.functional.gelu(tx, approximate="tanh").backward(torch.tensor(dout))
    out, c = L.gelu_forward(x)
    np.testing.assert_allclose(out, torch.nn.functional.gelu(tx, approximate="tanh").detach())
    assert _rel(L.gelu_backward(dout, c), tx.grad.numpy()) < 1e-13

    tx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.GELU()(tx)  # the exact form: nanoGPT's MLP activation
    ty.backward(torch.tensor(dout))
    out, c = L.gelu_erf_forward(x)
    np.testing.assert_allclose(out, ty.detach().numpy(), rtol=1e-14, atol=1e-15)
    assert _rel(L.gelu_erf_backward(dout, c), tx.grad.numpy()) < 1e-13
    t32 = torch.tensor(x.astype(np.float32))
    out32, _ = L.gelu_erf_forward(x.astype(np.float32))
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32, torch.nn.GELU()(t32).numpy(), rtol=1e-6, atol=1e-6)

    g, b = rng.standard_normal(7), rng.standard_normal(7)
    tx = torch.tensor(x, requires_grad=True)
    tg, tb = torch.tensor(g, requires_grad=True), torch.tensor(b, requires_grad=True)
    torch.nn.functional.layer_norm(tx, (7,), tg, tb, 1e-5).backward(torch.tensor(dout))
    out, c = L.layernorm_forward(x, g, b)
    dx, dg, db = L.layernorm_backward(dout, c)
    for mine, ref in ((dx, tx.grad), (dg, tg.grad), (db, tb.grad)):
        assert _rel(mine, ref.numpy()) < 1e-13


def test_dropout_free_attention_matches_torch_sdpa(torch):
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((2, 3, 5, 4)) for _ in range(3))
    dy = rng.standard_normal(q.shape)
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    ty = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    ty.backward(torch.tensor(dy))
    y, c = L.sdpa_forward(q, k, v)
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-12, atol=1e-14)
    for mine, ref in zip(L.sdpa_backward(dy, c), (tq, tk, tv)):
        assert _rel(mine, ref.grad.numpy()) < 1e-12


def test_the_reference_is_not_trivially_equal(torch):
    """A different scheme gives a different PyTorch loss: the comparison can fail."""
    model, idx, tgt = _small("pre-ln", seed=6)
    other = dataclasses.replace(model.cfg, variant="residual")
    params = {
        k: v
        for k, v in model.params.items()
        if not k.startswith(("ln_f", "blocks.0.ln", "blocks.1.ln"))
    }
    _, loss_other, _ = torch_reference.run(torch, other, params, idx, tgt)
    _, loss, _ = model.forward(idx, tgt)
    assert abs(loss - loss_other) > 1e-3
