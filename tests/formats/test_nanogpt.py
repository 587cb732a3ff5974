"""nanoGPT's ckpt.pt in, through torch.load(weights_only=True): weights yes, code never."""

import os
import sys

import numpy as np
import pytest

from resgrad.formats.hf import HF_NAMES
from resgrad.formats.nanogpt import load_nanogpt_ckpt
from resgrad.nn.model import GPT, GPTConfig
from resgrad.train.pretrained import load_pretrained
from resgrad.verify.selfcheck import randomize_params

CFG = GPTConfig(vocab_size=30, block_size=16, n_layer=2, n_head=2, n_embd=8)


def _nanogpt_ckpt(torch, model, compiled=False, bias=True):
    """What nanoGPT's train.py saves, named as its model.py names the weights."""
    state = {}
    for ours, (theirs, transposed) in HF_NAMES.items():
        for i in range(model.cfg.n_layer) if "{i}" in ours else [None]:
            k = ours.format(i=i)
            if k not in model.params:
                continue
            a = model.params[k].T if transposed else model.params[k]  # nn.Linear: (out, in)
            state["transformer." + theirs.format(i=i)] = torch.tensor(np.ascontiguousarray(a))
    state["lm_head.weight"] = state["transformer.wte.weight"]
    if compiled:
        state = {f"_orig_mod.{k}": v for k, v in state.items()}
    c = model.cfg
    params = [torch.nn.Parameter(v.clone()) for v in state.values()]
    opt = torch.optim.AdamW(params, lr=1e-3)
    sum((p**2).sum() for p in params).backward()
    opt.step()
    return {
        "model": state,
        "optimizer": opt.state_dict(),
        "model_args": dict(
            n_layer=c.n_layer,
            n_head=c.n_head,
            n_embd=c.n_embd,
            block_size=c.block_size,
            bias=bias,
            vocab_size=c.vocab_size,
            dropout=0.0,
        ),  # fmt: skip
        "iter_num": 250,
        "best_val_loss": torch.tensor(1.5),
        "config": {"dataset": "shakespeare_char", "init_from": "scratch", "compile": compiled},
    }


@pytest.mark.parametrize("compiled", [False, True], ids=["plain", "compiled"])
def test_a_nanogpt_checkpoint_loads_bit_identically(torch, tmp_path, compiled):
    model = GPT(CFG, seed=0, dtype=np.float32)
    randomize_params(model.params, np.random.default_rng(1))
    torch.save(_nanogpt_ckpt(torch, model, compiled), tmp_path / "ckpt.pt")
    back = load_nanogpt_ckpt(tmp_path / "ckpt.pt")
    for k in model.params:
        np.testing.assert_array_equal(back.params[k], model.params[k], err_msg=k)
    idx = np.random.default_rng(2).integers(0, 30, (2, 16))
    np.testing.assert_array_equal(back.forward(idx)[0], model.forward(idx)[0])


def test_a_bias_free_nanogpt_checkpoint(torch, tmp_path):
    cfg = GPTConfig(vocab_size=30, block_size=16, n_layer=1, n_head=2, n_embd=8, bias=False)
    model = GPT(cfg, seed=0, dtype=np.float64)
    randomize_params(model.params, np.random.default_rng(1))
    torch.save(_nanogpt_ckpt(torch, model, bias=False), tmp_path / "ckpt.pt")
    back = load_nanogpt_ckpt(tmp_path / "ckpt.pt", dtype=np.float64)
    assert back.cfg.bias is False
    for k in model.params:
        np.testing.assert_array_equal(back.params[k], model.params[k])


class _RunsCode:
    """A pickle that, when loaded the unsafe way, runs a shell command."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_would_run_code_is_refused_and_nothing_runs(torch, tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    torch.save({"model": _RunsCode(marker), "model_args": {}}, evil)
    with pytest.raises(ValueError, match="refused to load") as e:
        load_nanogpt_ckpt(evil)
    assert "\n" not in str(e.value) and "weights_only=True" in str(e.value)
    assert not marker.exists()  # nothing ran
    with pytest.raises(ValueError, match="refused to load"):
        load_pretrained(str(evil))  # the CLI's path too
    assert not marker.exists()
    # not vacuous: the unsafe load of the same file does run the command
    torch.load(evil, weights_only=False)
    assert marker.exists()


def test_not_a_nanogpt_checkpoint(torch, tmp_path):
    torch.save({"weights": torch.zeros(3)}, tmp_path / "x.pt")
    with pytest.raises(ValueError, match="not a nanoGPT checkpoint"):
        load_nanogpt_ckpt(tmp_path / "x.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a zip, not a pickle")
    with pytest.raises(ValueError, match="refused to load"):
        load_nanogpt_ckpt(tmp_path / "junk.pt")
    model = GPT(CFG, seed=0)
    ck = _nanogpt_ckpt(torch, model)
    ck["model_args"]["n_layer"] = 3
    torch.save(ck, tmp_path / "wrong.pt")
    with pytest.raises(ValueError, match="missing tensor 'h.2.ln_1.weight'"):
        load_nanogpt_ckpt(tmp_path / "wrong.pt")


def test_without_torch_the_error_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    with pytest.raises(ValueError, match=r'pip install "resgrad\[torch\]"'):
        load_nanogpt_ckpt(tmp_path / "ckpt.pt")
