"""nanoGPT's ckpt.pt in, through torch.load(weights_only=True): weights yes, code never."""

import dataclasses
import os
import pickle
import sys

import numpy as np
import pytest

from resgrad.formats.hf import HF_NAMES
from resgrad.formats.nanogpt import load_nanogpt_ckpt, meta_vocabulary, read_meta_pkl
from resgrad.nn.model import GPT, GPTConfig
from resgrad.train.pretrained import load_pretrained
from resgrad.verify.selfcheck import randomize_params
from tests import nanogpt_reference

CFG = GPTConfig(vocab_size=30, block_size=16, n_layer=2, n_head=2, n_embd=8, activation="gelu-erf")


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


# --------------------------------------------------------------------------- nanoGPT's model

NANO = dict(n_layer=2, n_head=4, n_embd=32, block_size=24, vocab_size=65)


def _nano_ckpt(torch, tmp_path, bias, flash=True, dtype=None, seed=0):
    """nanoGPT's own model (tests/nanogpt_reference.py), saved as its train.py saves it."""
    ref = nanogpt_reference.build(torch, **NANO, bias=bias, flash=flash, dtype=dtype, seed=seed)
    ckpt = nanogpt_reference.train_py_checkpoint(torch, ref, **NANO, bias=bias)
    assert all(k.startswith("_orig_mod.transformer.") or k == "_orig_mod.lm_head.weight"
               for k in ckpt["model"])  # fmt: skip
    torch.save(ckpt, tmp_path / "ckpt.pt")
    return ref, tmp_path / "ckpt.pt"


def _batch(seed=1, B=3, T=NANO["block_size"]):
    rng = np.random.default_rng(seed)
    idx, tgt = rng.integers(0, NANO["vocab_size"], (2, B, T))  # 2 x (B, T)
    tgt[0, :4] = -1  # nanoGPT's cross-entropy ignores -1
    return idx, tgt


@pytest.mark.parametrize("flash", [True, False], ids=["sdpa", "mask-buffer"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_nanogpts_own_model_gives_the_same_float64_logits_and_gradients(torch, tmp_path, bias,
                                                                       flash):  # fmt: skip
    ref, path = _nano_ckpt(torch, tmp_path, bias, flash, dtype=torch.float64, seed=int(bias))
    model = load_nanogpt_ckpt(path, dtype=np.float64)
    assert model.cfg.activation == "gelu-erf" and model.cfg.bias is bias
    idx, tgt = _batch()
    logits, loss, cache = model.forward(idx, tgt, ignore_index=-1)
    grads = model.backward(cache)
    t_logits, t_loss = ref(torch.from_numpy(idx), torch.from_numpy(tgt))
    t_loss.backward()
    t_logits = t_logits.detach().numpy()
    assert np.abs(logits - t_logits).max() / np.abs(t_logits).max() < 1e-12
    assert abs(loss - t_loss.item()) < 1e-12
    t_grads = nanogpt_reference.grads(ref)
    assert set(grads) == set(t_grads)  # every parameter, the tied head once
    errs = {k: np.linalg.norm(grads[k] - t_grads[k]) / np.linalg.norm(t_grads[k]) for k in grads}
    worst = max(errs, key=errs.get)
    assert errs[worst] < 1e-10, (worst, errs[worst])


def test_nanogpts_own_model_gives_the_same_float32_logits(torch, tmp_path):
    for bias in (True, False):
        ref, path = _nano_ckpt(torch, tmp_path, bias, dtype=torch.float32, seed=2)
        model = load_nanogpt_ckpt(path)
        assert model.dtype == np.float32
        idx, tgt = _batch(seed=3)
        logits, _, _ = model.forward(idx)
        with torch.no_grad():
            t_logits = ref(torch.from_numpy(idx), torch.from_numpy(tgt))[0].numpy()
        assert np.abs(logits - t_logits).max() / np.abs(t_logits).max() < 1e-5


def test_the_tanh_gelu_would_be_a_different_model(torch, tmp_path):
    """Not vacuous: the same weights under GPT-2's tanh GELU miss nanoGPT's logits by far
    more than the tolerance (the gap the exact GELU closes)."""
    ref, path = _nano_ckpt(torch, tmp_path, bias=True, dtype=torch.float64)
    model = load_nanogpt_ckpt(path, dtype=np.float64)
    tanh = GPT.from_params(dataclasses.replace(model.cfg, activation="gelu-tanh"), model.params)
    idx, tgt = _batch()
    t_logits = ref(torch.from_numpy(idx), torch.from_numpy(tgt))[0].detach().numpy()
    assert np.abs(tanh.forward(idx)[0] - t_logits).max() / np.abs(t_logits).max() > 1e-6


def test_a_model_field_that_is_not_a_dict_is_one_line(torch, tmp_path):
    ckpt = _nanogpt_ckpt(torch, GPT(CFG, seed=0))
    for field, value in (("model", list(ckpt["model"].values())), ("model_args", [2, 2, 8]),
                         ("config", "shakespeare_char")):  # fmt: skip
        bad = {**ckpt, field: value}
        torch.save(bad, tmp_path / "bad.pt")
        with pytest.raises(ValueError) as e:
            load_nanogpt_ckpt(tmp_path / "bad.pt")
        msg = str(e.value)
        assert "\n" not in msg and str(tmp_path / "bad.pt") in msg
        assert f"field {field!r} is a {type(value).__name__}; expected a dict" in msg


@pytest.mark.parametrize("kind", ["int8", "int64", "bool"])
def test_integer_or_bool_weights_are_refused_by_name_not_cast(torch, tmp_path, kind):
    """A cast int8 weight is all zeros: the model would train with gradient norm 0."""
    ckpt = _nanogpt_ckpt(torch, GPT(CFG, seed=0))
    k = "transformer.h.0.attn.c_attn.weight"
    ckpt["model"][k] = ckpt["model"][k].to(getattr(torch, kind))
    torch.save(ckpt, tmp_path / "int.pt")
    with pytest.raises(ValueError) as e:
        load_nanogpt_ckpt(tmp_path / "int.pt")
    msg = str(e.value)
    assert "\n" not in msg and str(tmp_path / "int.pt") in msg
    assert f"tensor {k!r} has dtype torch.{kind}; expected floating-point weights" in msg


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
    assert str(e.value) == (
        f"refused to load {str(evil)!r}: it holds objects a safe load refuses (it names the "
        f"global {os.system.__module__}.system); resgrad loads a .pt only with "
        "torch.load(weights_only=True), tensors and plain containers, and nothing in it was run"
    )  # torch's advice to retry with weights_only=False is not relayed
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
    with pytest.raises(ValueError) as e:  # torch's reason, not its advice (weights_only=False)
        load_nanogpt_ckpt(tmp_path / "junk.pt")
    assert str(e.value) == (f"{str(tmp_path / 'junk.pt')!r} is not a readable PyTorch checkpoint "
                            "(truncated or damaged: Unsupported operand 110); nothing in it was "
                            "run")  # fmt: skip
    with pytest.raises(FileNotFoundError):  # a missing file is said to be missing
        load_nanogpt_ckpt(tmp_path / "missing.pt")
    model = GPT(CFG, seed=0)
    ck = _nanogpt_ckpt(torch, model)
    torch.save({**ck, "model_args": {**ck["model_args"], "n_layer": 3}}, tmp_path / "wrong.pt")
    with pytest.raises(ValueError, match="n_layer 3"):  # more layers than the weights hold
        load_nanogpt_ckpt(tmp_path / "wrong.pt")
    ck["model"].pop("transformer.h.1.ln_1.weight")
    torch.save(ck, tmp_path / "missing.pt")
    with pytest.raises(ValueError, match=r"missing tensor 'h\.1\.ln_1\.weight'"):
        load_nanogpt_ckpt(tmp_path / "missing.pt")


def test_a_truncated_checkpoint_is_named_with_torchs_reason(torch, tmp_path):
    """A cut ckpt.pt said "[Errno 22] Invalid argument" under "refused to load"; each cut
    (empty, inside the zip, before its end) now names the file as damaged, in one line."""
    torch.save(_nanogpt_ckpt(torch, GPT(CFG, seed=0)), tmp_path / "ckpt.pt")
    raw = (tmp_path / "ckpt.pt").read_bytes()
    reasons = {}
    for n in (0, 100, len(raw) // 2, len(raw) - 1):
        cut = tmp_path / f"cut{n}.pt"
        cut.write_bytes(raw[:n])
        with pytest.raises(ValueError) as e:
            load_nanogpt_ckpt(cut)
        msg = str(e.value)
        head = f"{str(cut)!r} is not a readable PyTorch checkpoint (truncated or damaged: "
        assert msg.startswith(head) and msg.endswith("); nothing in it was run"), msg
        assert "\n" not in msg and "weights_only" not in msg and "miniz" not in msg, msg
        reasons[n] = msg[len(head) : -len("); nothing in it was run")]
    assert reasons[0] == "EOFError"
    assert reasons[100].startswith("PytorchStreamReader failed reading zip archive")
    assert reasons[len(raw) - 1] == "[Errno 22] Invalid argument"


def test_a_class_the_safe_load_refuses_is_named_without_torchs_advice(torch, tmp_path):
    import fractions

    ckpt = _nanogpt_ckpt(torch, GPT(CFG, seed=0))
    ckpt["config"]["learning_rate"] = fractions.Fraction(1, 1000)  # a class torch does not allow
    torch.save(ckpt, tmp_path / "fraction.pt")
    with pytest.raises(ValueError) as e:
        load_nanogpt_ckpt(tmp_path / "fraction.pt")
    msg = str(e.value)
    assert "it holds objects a safe load refuses (it names the global fractions.Fraction)" in msg
    for advice in ("weights_only=False", "safe_globals", "trusted source", "\n"):
        assert advice not in msg, msg
    with pytest.raises(Exception) as e:  # not vacuous: torch itself gives that advice
        torch.load(tmp_path / "fraction.pt", weights_only=True)
    assert "weights_only" in str(e.value) and "safe_globals" in str(e.value)


# --------------------------------------------------------------------------- model_args


def _with_args(torch, tmp_path, **edit):
    """A good checkpoint whose model_args are edited (None deletes a key)."""
    ckpt = _nanogpt_ckpt(torch, GPT(CFG, seed=0))
    for k, v in edit.items():
        if v is None:
            del ckpt["model_args"][k]
        else:
            ckpt["model_args"][k] = v
    torch.save(ckpt, tmp_path / "args.pt")
    return tmp_path / "args.pt"


def _refused(path, message):
    with pytest.raises(ValueError) as e:
        load_nanogpt_ckpt(path)
    assert str(e.value) == f"{path}: {message}", str(e.value)


@pytest.mark.parametrize("field", ["n_layer", "n_head", "n_embd", "block_size", "vocab_size"])
@pytest.mark.parametrize("value, shown", [
    ("2", "'2' (a str)"), (2.0, "2.0"), (True, "True (a bool)"), (0, "0"), (-1, "-1"),
    ([2], "[2] (a list)"),
])  # fmt: skip
def test_a_size_in_model_args_must_be_an_int(torch, tmp_path, field, value, shown):
    """n_layer "2" was read as int("2"), True as 1, 2.7 as 2: nanoGPT's GPTConfig takes ints."""
    path = _with_args(torch, tmp_path, **{field: value})
    _refused(path, f"model_args {field} is {shown}; expected an integer >= 1")


@pytest.mark.parametrize("field", ["n_layer", "n_head", "n_embd", "block_size", "vocab_size"])
def test_a_size_missing_from_model_args_is_named(torch, tmp_path, field):
    _refused(_with_args(torch, tmp_path, **{field: None}), f"model_args has no {field!r}")


@pytest.mark.parametrize("value, shown", [("False", "'False' (a str)"), (0, "0"), (1, "1"),
                                          (None, None)])  # fmt: skip
def test_bias_in_model_args_must_be_a_bool(torch, tmp_path, value, shown):
    """bool("False") is True: a string was read as biases on."""
    ckpt = _nanogpt_ckpt(torch, GPT(CFG, seed=0))
    ckpt["model_args"]["bias"] = value
    torch.save(ckpt, tmp_path / "b.pt")
    _refused(tmp_path / "b.pt", f"model_args bias is {shown or 'None (a NoneType)'}; expected "
                                "True or False")  # fmt: skip


@pytest.mark.parametrize("value, shown", [
    ("0.1", "'0.1' (a str)"), (True, "True (a bool)"), (1.0, "1.0"), (1, "1"),
    (float(np.nextafter(0.0, -1.0)), "-5e-324"), (float("nan"), "nan"),
])  # fmt: skip
def test_dropout_in_model_args_is_a_number_in_0_1(torch, tmp_path, value, shown):
    _refused(_with_args(torch, tmp_path, dropout=value),
             f"model_args dropout is {shown}; expected a number in [0, 1)")  # fmt: skip


@pytest.mark.parametrize("value", [0, 0.0, 0.2, float(np.nextafter(1.0, 0.0))])
def test_dropout_just_inside_its_range_loads(torch, tmp_path, value):
    assert load_nanogpt_ckpt(_with_args(torch, tmp_path, dropout=value)).cfg.dropout == 0.0


def test_a_key_nanogpt_does_not_have_is_refused_by_name(torch, tmp_path):
    """A fork's field (rotary embeddings, grouped heads) is another model: named, not dropped."""
    path = _with_args(torch, tmp_path, n_kv_head=1)
    _refused(
        path,
        "model_args has 'n_kv_head', which nanoGPT's GPTConfig does not have; "
        "expected only n_layer, n_head, n_embd, block_size, bias, vocab_size, dropout",
    )


def test_model_args_are_checked_before_any_weight_is_read(torch, tmp_path):
    """A state dict the loop would refuse ("not a tensor") is never reached: the numbers
    are refused first, before any tensor is converted."""
    ckpt = _nanogpt_ckpt(torch, GPT(CFG, seed=0))
    ckpt["model"] = {"transformer.junk": "not a tensor", **ckpt["model"]}
    ckpt["model_args"]["n_layer"] = "2"
    torch.save(ckpt, tmp_path / "order.pt")
    _refused(tmp_path / "order.pt", "model_args n_layer is '2' (a str); expected an integer >= 1")
    ckpt["model_args"]["n_layer"] = 2  # not vacuous: the state dict alone is refused too
    torch.save(ckpt, tmp_path / "order.pt")
    with pytest.raises(ValueError, match="'transformer.junk' is not a tensor"):
        load_nanogpt_ckpt(tmp_path / "order.pt")


def test_absurd_model_args_are_refused_from_the_numbers(torch, tmp_path, monkeypatch):
    import resgrad.formats.nanogpt as nanogpt

    def no_weights(*a, **k):
        raise AssertionError("weights read for an absurd config")

    monkeypatch.setattr(nanogpt, "gpt_from_state", no_weights)
    path = _with_args(torch, tmp_path, n_embd=10**6, n_head=1, n_layer=8)
    with pytest.raises(ValueError, match=r"model_args make about 9\.6e\+13 parameters"):
        load_nanogpt_ckpt(path)


def test_a_state_dict_key_that_is_not_a_string_is_named(torch, tmp_path):
    ckpt = _nanogpt_ckpt(torch, GPT(CFG, seed=0))
    ckpt["model"][3] = torch.zeros(2)
    torch.save(ckpt, tmp_path / "k.pt")
    with pytest.raises(ValueError) as e:
        load_nanogpt_ckpt(tmp_path / "k.pt")
    assert str(e.value).endswith("state dict key 3 is a int; expected parameter names (strings)")


@pytest.mark.parametrize("flash", [True, False], ids=["sdpa", "mask-buffer"])
def test_model_args_without_bias_is_nanogpts_default_bias_true(torch, tmp_path, flash):
    """nanoGPT's GPTConfig defaults bias=True: a model_args without it is nanoGPT's biased
    model, with its logits (the compiled _orig_mod. prefix on the mask buffers too)."""
    ref = nanogpt_reference.build(torch, **NANO, bias=True, flash=flash, dtype=torch.float64)
    ckpt = nanogpt_reference.train_py_checkpoint(torch, ref, **NANO, bias=True)
    del ckpt["model_args"]["bias"]
    assert any(k.endswith(".attn.bias") for k in ckpt["model"]) is not flash
    torch.save(ckpt, tmp_path / "ckpt.pt")
    model = load_nanogpt_ckpt(tmp_path / "ckpt.pt", dtype=np.float64)
    assert model.cfg.bias is True
    idx, tgt = _batch()
    t_logits = ref(torch.from_numpy(idx), torch.from_numpy(tgt))[0].detach().numpy()
    assert np.abs(model.forward(idx)[0] - t_logits).max() / np.abs(t_logits).max() < 1e-12
    # a bias-free model's weights under the default: nanoGPT's own load_state_dict fails too
    ref = nanogpt_reference.build(torch, **NANO, bias=False, dtype=torch.float64)
    ckpt = nanogpt_reference.train_py_checkpoint(torch, ref, **NANO, bias=False)
    del ckpt["model_args"]["bias"]
    torch.save(ckpt, tmp_path / "nobias.pt")
    with pytest.raises(ValueError, match=r"missing tensor 'h\.0\.ln_1\.bias'"):
        load_nanogpt_ckpt(tmp_path / "nobias.pt")


def test_without_torch_the_error_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    with pytest.raises(ValueError, match=r'pip install "resgrad\[torch\]"'):
        load_nanogpt_ckpt(tmp_path / "ckpt.pt")


# --------------------------------------------------------------------------- meta.pkl


def _prepare_py_meta(text="First Citizen:\nBefore we proceed any further, hear me speak.\n"):
    """The meta dict nanoGPT's data/shakespeare_char/prepare.py pickles."""
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = {i: ch for i, ch in enumerate(chars)}
    return {"vocab_size": len(chars), "itos": itos, "stoi": stoi}


@pytest.mark.parametrize("protocol", [2, pickle.DEFAULT_PROTOCOL, pickle.HIGHEST_PROTOCOL])
def test_a_meta_pkl_as_prepare_py_writes_it(tmp_path, protocol):
    meta = _prepare_py_meta()
    (tmp_path / "meta.pkl").write_bytes(pickle.dumps(meta, protocol=protocol))
    back = read_meta_pkl(tmp_path / "meta.pkl")
    assert back == meta
    chars = meta_vocabulary(back)
    assert chars == "".join(sorted(set(chars))) and len(chars) == meta["vocab_size"]
    assert [meta["stoi"][c] for c in chars] == list(range(len(chars)))


def test_a_meta_pkl_that_would_run_code_is_refused_by_name_and_nothing_runs(tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "meta.pkl"
    evil.write_bytes(pickle.dumps({"itos": {0: "a"}, "x": _RunsCode(marker)}))
    with pytest.raises(ValueError) as e:
        read_meta_pkl(evil)
    msg = str(e.value)
    assert "\n" not in msg and str(evil) in msg
    assert f"it names the global {os.system.__module__}.system" in msg
    assert "nothing in it was run" in msg and not marker.exists()
    pickle.loads(evil.read_bytes())  # not vacuous: the plain unpickler does run the command
    assert marker.exists()


@pytest.mark.parametrize(
    "obj, kind",
    [({"itos": {0: 1.5}}, "float"), ({"itos": (0, "a")}, "tuple"), ({"bias": True}, "bool"),
     ({"itos": None}, "NoneType"), ({"itos": b"ab"}, "bytes"), ({"s": {"a"}}, "set")],
)  # fmt: skip
def test_a_meta_pkl_holds_only_dicts_lists_strings_and_ints(tmp_path, obj, kind):
    (tmp_path / "meta.pkl").write_bytes(pickle.dumps(obj, protocol=4))
    with pytest.raises(ValueError, match=f"it holds a {kind}; a meta.pkl holds only dicts"):
        read_meta_pkl(tmp_path / "meta.pkl")


def test_a_damaged_or_foreign_meta_pkl(tmp_path):
    raw = pickle.dumps(_prepare_py_meta())
    (tmp_path / "cut.pkl").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match="is not a readable meta.pkl"):
        read_meta_pkl(tmp_path / "cut.pkl")
    (tmp_path / "list.pkl").write_bytes(pickle.dumps(["a", "b"]))
    with pytest.raises(ValueError, match="holds a list; expected nanoGPT's meta dict"):
        read_meta_pkl(tmp_path / "list.pkl")


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda m: m.pop("itos"), "no 'itos'"),
        (lambda m: m["itos"].pop(3), "itos has the key 7; expected the ids 0..6"),
        (lambda m: m["itos"].update({2: "ab"}), "itos\\[2\\] is 'ab'; expected one character"),
        (lambda m: m["itos"].update({2: m["itos"][1]}), "gives the character"),
        (lambda m: m["stoi"].update({"d": 0}), "stoi is not the inverse of itos"),
        (lambda m: m.update(vocab_size=9), "vocab_size is 9 but itos holds 8 characters"),
    ],
    ids=["no-itos", "id-gap", "two-characters", "repeated", "stoi", "vocab-size"],
)
def test_a_vocabulary_that_is_not_one_is_named(edit, match):
    meta = _prepare_py_meta("hello world")  # 8 characters: " dehlorw"
    assert len(meta["itos"]) == 8
    edit(meta)
    with pytest.raises(ValueError, match=match):
        meta_vocabulary(meta, where="m.pkl")


@pytest.mark.parametrize(
    "obj, kind",
    [({"itos": {0: "a"}, "stoi": {"a": 0}, "x": {(1, 2): "t"}}, "tuple"),
     ({"itos": {0.0: "a"}, "stoi": {"a": 0}}, "float"), ({"itos": {0: "a", True: "b"}}, "bool"),
     ({"stoi": {b"a": 0}}, "bytes"), ({None: 1}, "NoneType")],
)  # fmt: skip
def test_the_walk_checks_dict_keys_too(tmp_path, obj, kind):
    """A key is data as much as a value: itos {0.0: "a"} equals {0: "a"} as a set of ids,
    and {0: "a", True: "b"} holds the ids 0 and 1; both are refused while reading."""
    (tmp_path / "meta.pkl").write_bytes(pickle.dumps(obj, protocol=4))
    with pytest.raises(ValueError, match=f"it holds a {kind}; a meta.pkl holds only dicts"):
        read_meta_pkl(tmp_path / "meta.pkl")


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda m: m.pop("stoi"), "no 'stoi'; expected nanoGPT's meta with 'itos'"),
        (lambda m: m.update(stoi=list(m["stoi"])), "'stoi' as a list;"),
        (lambda m: m.update(itos={}), "'itos' empty;"),
        (lambda m: m["itos"].update({True: m["itos"].pop(1)}), "itos has the key True;"),
        (lambda m: m["itos"].update({1.0: m["itos"].pop(1)}), "itos has the key 1.0;"),
        (lambda m: m["itos"].update({-1: m["itos"].pop(7)}), "itos has the key -1; expected "
                                                             "the ids 0..7"),
        (lambda m: m["stoi"].update({"d": True}), "stoi maps 'd' to True; expected characters "
                                                  "\\(str\\) to ids \\(int\\)"),
        (lambda m: m["stoi"].update({"d": 1.0}), "stoi maps 'd' to 1.0;"),
        (lambda m: m["stoi"].update({1: 1}), "stoi maps 1 to 1;"),
        (lambda m: m["stoi"].update({"z": 8}), "stoi is not the inverse of itos \\(at 'z'\\)"),
        (lambda m: m["stoi"].update({"d": 99}), "stoi is not the inverse of itos \\(at 'd'\\)"),
        (lambda m: m["stoi"].pop("w"), "stoi is not the inverse of itos \\(at 'w'\\)"),
        (lambda m: m.update(vocab_size=True), "vocab_size is True but itos holds 8"),
        (lambda m: m.update(vocab_size="8"), "vocab_size is '8' but itos holds 8"),
        (lambda m: m.update(vocab_size=7), "vocab_size is 7 but itos holds 8"),
    ],
    ids=["no-stoi", "stoi-list", "itos-empty", "bool-id", "float-id", "negative-id",
         "bool-stoi", "float-stoi", "int-key-stoi", "stoi-extra", "stoi-out-of-range",
         "stoi-missing", "vocab-bool", "vocab-str", "vocab-below"],
)  # fmt: skip
def test_stoi_and_itos_are_one_bijection_of_str_and_int(edit, match):
    """nanoGPT's sample.py encodes with stoi and decodes with itos: both must be there,
    dicts of str -> int and int -> str, inverse of each other, the ids 0..n-1 exactly."""
    meta = _prepare_py_meta("hello world")  # 8 characters: " dehlorw"
    assert meta_vocabulary(dict(meta), where="m.pkl") == " dehlorw"  # the unedited one reads
    edit(meta)
    with pytest.raises(ValueError, match="^m.pkl: " + match):
        meta_vocabulary(meta, where="m.pkl")


def test_vocab_size_is_the_int_n_even_where_true_equals_it():
    """True == 1 and 1.0 == 1: a one-character vocabulary is where only the type tells."""
    for size in (True, 1.0, "1"):
        with pytest.raises(ValueError, match=f"vocab_size is {size!r} but itos holds 1"):
            meta_vocabulary({"itos": {0: "a"}, "stoi": {"a": 0}, "vocab_size": size})
    assert meta_vocabulary({"itos": {0: "a"}, "stoi": {"a": 0}, "vocab_size": 1}) == "a"
