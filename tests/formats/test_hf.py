"""GPT-2 in and out, proven against Hugging Face transformers on the same weights.

Small random GPT-2s (2 layers, width 64, 4 heads) are written by transformers'
``save_pretrained`` and loaded by resgrad; logits, every parameter gradient, greedy
tokens and a round trip through resgrad's export must agree. transformers and torch are
test-only referees (pinned in pyproject's test extra).
"""

import json
import os
import re

import numpy as np
import pytest

from resgrad.cli import main
from resgrad.formats.checkpoint import Checkpoint, save_checkpoint
from resgrad.formats.hf import HF_NAMES, export_hf, gpt_from_state, load_hf, nanogpt_state_to_params
from resgrad.nn.model import GPT, GPTConfig
from resgrad.train.sample import generate
from resgrad.verify.selfcheck import randomize_params
from tests.crashes import fail_rename_at, killed_at

LOGITS_TOL_64 = 1e-10  # max |logits - ref| / max |ref|, float64
GRAD_TOL = 1e-10  # per parameter: ||g - g_ref|| / ||g_ref||, float64
LOGITS_TOL_32 = 1e-4  # float32
SMALL = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=97, n_positions=80)


@pytest.fixture
def transformers(torch):
    return pytest.importorskip("transformers")


def _hf_model(torch, transformers, seed=0, dtype=None, **kw):
    """A random GPT2LMHeadModel: every weight, bias and LayerNorm gain drawn at random."""
    cfg = transformers.GPT2Config(
        **{**SMALL, **kw}, bos_token_id=None, eos_token_id=None, attn_implementation="eager"
    )
    torch.manual_seed(seed)
    m = transformers.GPT2LMHeadModel(cfg).to(dtype or torch.float64).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            scale = 0.3 if name.endswith("weight") and p.ndim == 1 else 0.1
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)
    return m


def _saved(torch, transformers, tmp_path, name="gpt2-small", **kw):
    m = _hf_model(torch, transformers, **kw)
    d = tmp_path / name
    m.save_pretrained(d)
    return m, d


def _rel(a, ref):
    return float(np.linalg.norm(a - ref) / np.linalg.norm(ref))


def _ids(V, B=3, T=17, seed=1):
    return np.random.default_rng(seed).integers(0, V, (B, T))  # (B, T)


def _resgrad_name(hf_name):
    """'transformer.h.1.attn.c_attn.weight' -> 'blocks.1.attn.w_qkv', through HF_NAMES."""
    k = hf_name.removeprefix("transformer.")
    for ours, (theirs, _) in HF_NAMES.items():
        pat = theirs.replace(".", r"\.").replace("{i}", r"(\d+)")
        m = re.fullmatch(pat, k)
        if m:
            return ours.format(i=m.group(1)) if m.groups() else ours
    raise KeyError(hf_name)


@pytest.mark.parametrize("act, ours", [("gelu_new", "gelu-tanh"), ("gelu", "gelu-erf")])
def test_float64_logits_and_every_gradient_match_transformers(
    torch, transformers, tmp_path, act, ours
):
    """GPT-2's tanh GELU and the exact one (activation_function "gelu", nanoGPT's)."""
    hf, d = _saved(torch, transformers, tmp_path, activation_function=act)
    model = load_hf(d, dtype=np.float64)
    assert model.cfg.activation == ours
    ids = _ids(SMALL["vocab_size"])
    idx, tgt = ids[:, :-1], ids[:, 1:]
    logits, loss, cache = model.forward(idx, tgt)
    grads = model.backward(cache)

    t_logits = hf(torch.from_numpy(idx)).logits  # (B, T, V)
    t_loss = torch.nn.functional.cross_entropy(
        t_logits.reshape(-1, t_logits.shape[-1]), torch.from_numpy(tgt).reshape(-1)
    )
    t_loss.backward()
    ref = t_logits.detach().numpy()
    err = np.abs(logits - ref).max() / np.abs(ref).max()
    assert err < LOGITS_TOL_64, err
    assert abs(loss - t_loss.item()) < 1e-12
    t_grads = {_resgrad_name(n): p.grad.numpy() for n, p in hf.named_parameters()}
    assert set(t_grads) == set(grads)  # lm_head is wte: one Parameter, one gradient
    errs = {k: _rel(grads[k], t_grads[k]) for k in grads}
    worst = max(errs, key=errs.get)
    assert errs[worst] < GRAD_TOL, (worst, errs[worst])


def test_a_broken_weight_breaks_the_parity(torch, transformers, tmp_path):
    """Not vacuous: one transposed projection is far outside the tolerance."""
    hf, d = _saved(torch, transformers, tmp_path)
    model = load_hf(d, dtype=np.float64)
    w = model.params["blocks.1.attn.w_proj"]
    model.params["blocks.1.attn.w_proj"] = np.ascontiguousarray(w.T)
    idx = _ids(SMALL["vocab_size"])
    logits, _, _ = model.forward(idx)
    ref = hf(torch.from_numpy(idx)).logits.detach().numpy()
    assert np.abs(logits - ref).max() / np.abs(ref).max() > 1e-3


@pytest.mark.parametrize("act", ["gelu_new", "gelu"])
def test_float32_logits_and_50_greedy_tokens_match(torch, transformers, tmp_path, act):
    hf, d = _saved(torch, transformers, tmp_path, dtype=torch.float32, activation_function=act)
    model = load_hf(d)
    assert model.dtype == np.float32
    idx = _ids(SMALL["vocab_size"], B=2, T=20)
    logits, _, _ = model.forward(idx)
    with torch.no_grad():
        ref = hf(torch.from_numpy(idx)).logits.numpy()
    err = np.abs(logits - ref).max() / np.abs(ref).max()
    assert err < LOGITS_TOL_32, err

    start = idx[:1, :5]  # (1, 5)
    ours = generate(model, start, 50, np.random.default_rng(0), top_k=1)[0, 5:]  # greedy
    ctx = torch.from_numpy(start)
    with torch.no_grad():
        for _ in range(50):  # greedy decoding, the plain way
            nxt = hf(ctx).logits[:, -1].argmax(-1, keepdim=True)
            ctx = torch.cat([ctx, nxt], dim=1)
    theirs = ctx[0, 5:].numpy()
    assert len(set(theirs.tolist())) > 1  # not a degenerate repeat of one token
    np.testing.assert_array_equal(ours, theirs)


def test_layer_norm_epsilon_is_read(torch, transformers, tmp_path):
    """At the largest epsilon read (0.1), where it differs most from GPT-2's 1e-5."""
    from resgrad.formats.hf import EPS_MAX

    hf, d = _saved(torch, transformers, tmp_path, layer_norm_epsilon=EPS_MAX)
    model = load_hf(d, dtype=np.float64)
    assert model.cfg.ln_eps == EPS_MAX == 0.1
    idx = _ids(SMALL["vocab_size"])
    ref = hf(torch.from_numpy(idx)).logits.detach().numpy()
    assert np.abs(model.forward(idx)[0] - ref).max() / np.abs(ref).max() < LOGITS_TOL_64


def test_resgrad_to_hf_to_resgrad_is_bit_identical(torch, transformers, tmp_path):
    for dtype in (np.float32, np.float64):
        cfg = GPTConfig(vocab_size=50, block_size=16, n_layer=2, n_head=4, n_embd=32)
        model = GPT(cfg, seed=3, dtype=dtype)
        randomize_params(model.params, np.random.default_rng(4))
        export_hf(model, tmp_path / "out", force=True)  # the float64 one replaces the first
        back = load_hf(tmp_path / "out", dtype=dtype)
        assert back.cfg == cfg
        assert list(back.params) == list(model.params)
        for k in model.params:
            np.testing.assert_array_equal(back.params[k], model.params[k], err_msg=k)
            assert back.params[k].dtype == model.params[k].dtype


def test_export_loads_in_transformers_with_no_missing_or_unexpected_keys(
    torch, transformers, tmp_path
):
    cfg = GPTConfig(vocab_size=50, block_size=16, n_layer=2, n_head=4, n_embd=32, ln_eps=1e-6)
    model = GPT(cfg, seed=3, dtype=np.float64)
    randomize_params(model.params, np.random.default_rng(4))
    export_hf(model, tmp_path / "out")
    hf, info = transformers.GPT2LMHeadModel.from_pretrained(
        tmp_path / "out", output_loading_info=True, dtype=torch.float64, attn_implementation="eager"
    )
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert not info.get("mismatched_keys"), info
    idx = _ids(50, T=16)
    ref = hf.eval()(torch.from_numpy(idx)).logits.detach().numpy()
    assert np.abs(model.forward(idx)[0] - ref).max() / np.abs(ref).max() < LOGITS_TOL_64


@pytest.mark.parametrize("activation, written", [("gelu-tanh", "gelu_new"), ("gelu-erf", "gelu")])
def test_export_writes_the_activation_eps_and_sizes_and_reads_them_back(tmp_path, activation,
                                                                        written):  # fmt: skip
    """config.json's fields from the config they come from, every size distinct, and back."""
    cfg = GPTConfig(vocab_size=50, block_size=24, n_layer=3, n_head=2, n_embd=8, ln_eps=3e-4,
                    activation=activation)  # fmt: skip
    export_hf(GPT(cfg, seed=0), tmp_path / "out")
    c = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (c["vocab_size"], c["n_positions"], c["n_layer"], c["n_head"], c["n_embd"]) == (
        50, 24, 3, 2, 8)  # fmt: skip
    assert c["layer_norm_epsilon"] == 3e-4 and c["activation_function"] == written
    assert c["model_type"] == "gpt2" and c["n_inner"] is None and c["tie_word_embeddings"]
    assert load_hf(tmp_path / "out").cfg == cfg
    for act, ours in (("gelu_new", "gelu-tanh"), ("gelu_pytorch_tanh", "gelu-tanh"),
                      ("gelu", "gelu-erf"), ("gelu_python", "gelu-erf")):  # fmt: skip
        _edit_config(tmp_path / "out", activation_function=act)
        assert load_hf(tmp_path / "out").cfg.activation == ours, act


def test_an_exact_gelu_export_is_the_model_transformers_runs(torch, transformers, tmp_path):
    cfg = GPTConfig(vocab_size=50, block_size=16, n_layer=2, n_head=4, n_embd=32,
                    activation="gelu-erf")  # fmt: skip
    model = GPT(cfg, seed=3, dtype=np.float64)
    randomize_params(model.params, np.random.default_rng(4))
    export_hf(model, tmp_path / "out")
    hf = transformers.GPT2LMHeadModel.from_pretrained(
        tmp_path / "out", dtype=torch.float64, attn_implementation="eager"
    ).eval()
    assert hf.config.activation_function == "gelu"
    idx = _ids(50, T=16)
    ref = hf(torch.from_numpy(idx)).logits.detach().numpy()
    assert np.abs(model.forward(idx)[0] - ref).max() / np.abs(ref).max() < LOGITS_TOL_64


def test_export_without_biases_writes_zero_biases(torch, transformers, tmp_path):
    cfg = GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=8, bias=False)
    model = GPT(cfg, seed=0, dtype=np.float64)
    export_hf(model, tmp_path / "nb")
    back = load_hf(tmp_path / "nb", dtype=np.float64)
    idx = _ids(20, T=8)
    np.testing.assert_allclose(back.forward(idx)[0], model.forward(idx)[0], rtol=0, atol=1e-14)


def _nanogpt_state(hf, compiled=False):
    """hf's weights named and shaped as nanoGPT's model.py holds them (by hand, not HF_NAMES):
    the transformer. prefix, nn.Linear (out, in) weights, lm_head.weight, the mask buffers."""
    state = {}
    for name, p in hf.state_dict().items():
        a = p.detach().numpy().copy()
        linear = any(s in name for s in ("c_attn.weight", "c_proj.weight", "c_fc.weight"))
        state[name] = a.T.copy() if linear else a
    n_layer, P = hf.config.n_layer, hf.config.n_positions
    for i in range(n_layer):  # nanoGPT's non-flash path registers the causal mask
        state[f"transformer.h.{i}.attn.bias"] = np.tril(np.ones((P, P)))[None, None]
    state["lm_head.weight"] = state["transformer.wte.weight"]
    if compiled:
        state = {f"_orig_mod.{k}": v for k, v in state.items()}
    return state


@pytest.mark.parametrize("compiled", [False, True], ids=["plain", "orig-mod-prefix"])
def test_nanogpt_state_dict_loads_to_the_same_logits(torch, transformers, tmp_path, compiled):
    hf = _hf_model(torch, transformers, seed=5, activation_function="gelu")  # nanoGPT's nn.GELU()
    args = dict(n_layer=2, n_head=4, n_embd=64, block_size=80, vocab_size=97, bias=True,
                dropout=0.0)  # fmt: skip
    model = nanogpt_state_to_params(args, _nanogpt_state(hf, compiled), dtype=np.float64)
    idx = _ids(97)
    ref = hf(torch.from_numpy(idx)).logits.detach().numpy()
    assert np.abs(model.forward(idx)[0] - ref).max() / np.abs(ref).max() < LOGITS_TOL_64


def test_nanogpt_without_biases_loads():
    cfg = GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=8, bias=False)
    model = GPT(cfg, seed=0, dtype=np.float64)
    randomize_params(model.params, np.random.default_rng(0))
    state = {
        "transformer.wte.weight": model.params["wte"],
        "transformer.wpe.weight": model.params["wpe"],
        "transformer.h.0.ln_1.weight": model.params["blocks.0.ln1.g"],
        "transformer.h.0.attn.c_attn.weight": model.params["blocks.0.attn.w_qkv"].T,
        "transformer.h.0.attn.c_proj.weight": model.params["blocks.0.attn.w_proj"].T,
        "transformer.h.0.ln_2.weight": model.params["blocks.0.ln2.g"],
        "transformer.h.0.mlp.c_fc.weight": model.params["blocks.0.mlp.w_fc"].T,
        "transformer.h.0.mlp.c_proj.weight": model.params["blocks.0.mlp.w_proj"].T,
        "transformer.ln_f.weight": model.params["ln_f.g"],
        "lm_head.weight": model.params["wte"],
    }
    args = dict(n_layer=1, n_head=2, n_embd=8, block_size=8, vocab_size=20, bias=False)
    back = nanogpt_state_to_params(args, state, dtype=np.float64)
    for k in model.params:
        np.testing.assert_array_equal(back.params[k], model.params[k])


# --------------------------------------------------------------------------- bad input


def _tiny_dir(tmp_path, name="m"):
    cfg = GPTConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=8)
    export_hf(GPT(cfg, seed=0), tmp_path / name)
    return tmp_path / name


def _edit_config(d, **kw):
    p = d / "config.json"
    cfg = json.loads(p.read_text())
    cfg.update(kw)
    p.write_text(json.dumps(cfg))


def _edit_tensors(d, fn):
    from safetensors.numpy import load_file, save_file

    t = load_file(d / "model.safetensors")
    fn(t)
    save_file(t, d / "model.safetensors", metadata={"format": "pt"})


def _one_line_error(path, match):
    with pytest.raises(ValueError, match=match) as e:
        load_hf(path)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_a_directory_without_config_json(tmp_path):
    d = _tiny_dir(tmp_path)
    os.remove(d / "config.json")
    _one_line_error(d, "has no config.json")
    _one_line_error(tmp_path / "nowhere", "is not a directory")


def test_model_type_other_than_gpt2(tmp_path):
    d = _tiny_dir(tmp_path)
    _edit_config(d, model_type="llama")
    _one_line_error(d, 'model_type is "llama"')


@pytest.mark.parametrize(
    "key, value, match",
    [
        ("activation_function", "relu", "activation_function 'relu' is not implemented"),
        ("n_inner", 12, "n_inner is 12"),
        ("scale_attn_by_inverse_layer_idx", True, "scale_attn_by_inverse_layer_idx"),
        ("tie_word_embeddings", False, "tie_word_embeddings"),
        ("n_head", 3, "n_head=3 does not divide n_embd=8"),
    ],
)
def test_settings_resgrad_does_not_implement(tmp_path, key, value, match):
    d = _tiny_dir(tmp_path)
    _edit_config(d, **{key: value})
    _one_line_error(d, match)


def test_missing_extra_and_misshapen_tensors(tmp_path):
    d = _tiny_dir(tmp_path)
    _edit_tensors(d, lambda t: t.pop("transformer.h.1.mlp.c_fc.bias"))
    _one_line_error(d, r"missing tensor 'h\.1\.mlp\.c_fc\.bias'")
    d = _tiny_dir(tmp_path, "extra")
    _edit_tensors(d, lambda t: t.update({"transformer.h.2.ln_1.weight": np.ones(8, np.float32)}))
    _one_line_error(d, r"unexpected tensor 'h\.2\.ln_1\.weight'")
    d = _tiny_dir(tmp_path, "shape")
    _edit_tensors(d, lambda t: t.update({"transformer.wpe.weight": np.ones((9, 8), np.float32)}))
    _one_line_error(d, r"tensor 'wpe\.weight' has shape \(9, 8\); expected \(8, 8\)")


def test_an_untied_lm_head_is_refused(tmp_path):
    d = _tiny_dir(tmp_path)
    _edit_tensors(d, lambda t: t.update({"lm_head.weight": np.ones((20, 8), np.float32)}))
    _one_line_error(d, "differs from wte.weight")


def test_a_truncated_safetensors_file(tmp_path):
    d = _tiny_dir(tmp_path)
    raw = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(raw[: len(raw) // 2])
    _one_line_error(d, "not a readable safetensors file")
    (d / "model.safetensors").write_bytes(raw[:5])
    _one_line_error(d, "not a readable safetensors file")


def test_only_pytorch_model_bin_says_how_to_convert(tmp_path):
    d = _tiny_dir(tmp_path)
    os.remove(d / "model.safetensors")
    (d / "pytorch_model.bin").write_bytes(b"pickle")
    msg = _one_line_error(d, "pytorch_model.bin")
    assert "save_pretrained" in msg
    os.remove(d / "pytorch_model.bin")
    _one_line_error(d, "has no model.safetensors")


@pytest.mark.parametrize(
    "variant", ["post-ln", "none", "residual", "rezero", "deepnorm", "ln-scaling"]
)
def test_exporting_a_non_pre_ln_model_is_refused(tmp_path, variant):
    cfg = GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=8, variant=variant)
    with pytest.raises(ValueError, match=f"cannot export variant '{variant}' as GPT-2"):
        export_hf(GPT(cfg), tmp_path / "x")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("power", [0.0, 0.5])
def test_exporting_ln_scaling_is_refused_by_name_in_one_line(tmp_path, capsys, power):
    """Even at p = 0 (pre-ln's function): neither transformers nor nanoGPT has the model;
    from a run's checkpoint, ``resgrad export`` says so in one line, exit 2, nothing written."""
    cfg = GPTConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=8,
                    variant="ln-scaling", ln_scaling_power=power)  # fmt: skip
    m = GPT(cfg)
    (tmp_path / "run").mkdir()
    ckpt = Checkpoint(params=m.params, optimizer={}, iteration=0, vocab="abcdefghij klmnopqrs",
                      config={"model": {**cfg.__dict__}, "train": {}})  # fmt: skip
    save_checkpoint(tmp_path / "run" / "last.ckpt", ckpt)
    code = main(["export", "--checkpoint", str(tmp_path / "run"), "--out-dir", str(tmp_path / "x")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "cannot export variant 'ln-scaling' as GPT-2: transformers' GPT-2 and nanoGPT" in err[0]
    assert not (tmp_path / "x").exists()


def test_gpt_from_state_accepts_names_with_and_without_the_prefix(tmp_path):
    d = _tiny_dir(tmp_path)
    from safetensors.numpy import load_file

    t = load_file(d / "model.safetensors")
    bare = {k.removeprefix("transformer."): v for k, v in t.items()}
    bare["h.0.attn.bias"] = np.ones((1, 1, 8, 8), np.float32)  # old hub files hold the mask
    a = gpt_from_state(load_hf(d).cfg, bare)
    b = load_hf(d)
    for k in a.params:
        np.testing.assert_array_equal(a.params[k], b.params[k])


def test_a_bpe_trained_here_is_the_tokenizer_transformers_reads(torch, transformers, tmp_path):
    """Export with a BPE trained in the test: transformers' fast tokenizer reads the same ids,
    and a GPT-2 of that vocabulary agrees with transformers on text encoded by it."""
    from resgrad.train.bpe import load_tokenizer_dir, train_bpe

    text = "the residual stream carries the gradient home. " * 40
    bpe = train_bpe(text, 300)
    cfg = GPTConfig(vocab_size=bpe.vocab_size, block_size=64, n_layer=2, n_head=4, n_embd=64)
    model = GPT(cfg, seed=0, dtype=np.float64)
    randomize_params(model.params, np.random.default_rng(1))
    export_hf(model, tmp_path / "bpe", tokenizer_json=bpe.to_json())
    fast = transformers.AutoTokenizer.from_pretrained(tmp_path / "bpe")  # as a user loads it
    sample = "the gradient carries the stream home, residually."
    ours = load_tokenizer_dir(tmp_path / "bpe").encode(sample)
    assert fast(sample)["input_ids"] == ours.tolist() == bpe.encode(sample).tolist()
    hf = transformers.GPT2LMHeadModel.from_pretrained(
        tmp_path / "bpe", dtype=torch.float64, attn_implementation="eager"
    ).eval()
    idx = ours[None, :]
    ref = hf(torch.from_numpy(idx)).logits.detach().numpy()
    assert np.abs(model.forward(idx)[0] - ref).max() / np.abs(ref).max() < LOGITS_TOL_64


def test_a_character_vocabulary_is_the_tokenizer_transformers_reads(transformers, tmp_path):
    """A character-level run exported: AutoTokenizer gives resgrad's ids, spaces and
    newlines included, and decodes them back to the text."""
    from resgrad.train.bpe import char_tokenizer_json
    from resgrad.train.data import CharTokenizer

    chars = CharTokenizer.from_text("def f(x):\n    return x + 1\n")
    model = GPT(GPTConfig(vocab_size=chars.vocab_size, block_size=8, n_layer=1, n_head=2,
                          n_embd=8), seed=0)  # fmt: skip
    export_hf(model, tmp_path / "chars", tokenizer_json=char_tokenizer_json(chars.chars))
    fast = transformers.AutoTokenizer.from_pretrained(tmp_path / "chars")
    text = "def f(x):\n  return 1 + x"
    assert fast(text)["input_ids"] == chars.encode(text).tolist()
    assert fast.decode(chars.encode(text).tolist()) == text


def test_a_directory_laid_out_as_the_hub_serves_gpt2(tmp_path):
    """openai-community/gpt2's files: names without ``transformer.``, the causal-mask buffers
    ``h.{i}.attn.bias`` stored, an old config (n_ctx, no tie_word_embeddings)."""
    from safetensors.numpy import save_file

    cfg = GPTConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=8)
    model = GPT(cfg, seed=0)
    randomize_params(model.params, np.random.default_rng(0))
    export_hf(model, tmp_path / "src")
    from safetensors.numpy import load_file

    t = {
        k.removeprefix("transformer."): v
        for k, v in load_file(tmp_path / "src" / "model.safetensors").items()
    }
    for i in range(2):
        t[f"h.{i}.attn.bias"] = np.tril(np.ones((8, 8), np.float32))[None, None]
        t[f"h.{i}.attn.masked_bias"] = np.array(-1e4, np.float32)
    d = tmp_path / "hub"
    d.mkdir()
    save_file(t, d / "model.safetensors", metadata={"format": "pt"})
    hub_config = {
        "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256,
        "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2",
        "n_ctx": 8, "n_embd": 8, "n_head": 2, "n_layer": 2, "n_positions": 8,
        "resid_pdrop": 0.1, "summary_activation": None, "summary_first_dropout": 0.1,
        "summary_proj_to_labels": True, "summary_type": "cls_index", "summary_use_proj": True,
        "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
        "vocab_size": 20,
    }  # fmt: skip
    (d / "config.json").write_text(json.dumps(hub_config))
    back = load_hf(d)
    for k in model.params:
        np.testing.assert_array_equal(back.params[k], model.params[k])


def test_a_bfloat16_checkpoint_loads_as_its_exact_float32_values(tmp_path):
    # many hub checkpoints are bfloat16, which NumPy has no type for: each value is
    # float32's upper half, so it widens exactly
    from safetensors.numpy import load_file, save_file

    bf, wide = _tiny_dir(tmp_path, "bf16"), _tiny_dir(tmp_path, "wide")
    f32 = load_file(bf / "model.safetensors")
    bits = {k: (a.view(np.uint32) >> 16).astype(np.uint16) for k, a in f32.items()}  # bf16
    # the file format by hand (its writers' APIs differ across safetensors versions):
    # an 8-byte little-endian header length, the JSON header, the tensors' bytes
    header, at = {}, 0
    for k, b in bits.items():
        header[k] = {"dtype": "BF16", "shape": list(b.shape), "data_offsets": [at, at + b.nbytes]}
        at += b.nbytes
    head = json.dumps(header).encode()
    body = b"".join(b.tobytes() for b in bits.values())
    (bf / "model.safetensors").write_bytes(len(head).to_bytes(8, "little") + head + body)
    widened = {k: (b.astype(np.uint32) << 16).view(np.float32) for k, b in bits.items()}
    save_file(widened, wide / "model.safetensors", metadata={"format": "pt"})
    got, want = load_hf(bf), load_hf(wide)
    for k, a in want.params.items():
        assert got.params[k].dtype == np.float32 and got.params[k].tobytes() == a.tobytes(), k
    assert not np.array_equal(widened["transformer.wte.weight"], f32["transformer.wte.weight"])
    # a type resgrad does not read is named, not called corrupt
    head = json.dumps({"x": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 4]}}).encode()
    (bf / "model.safetensors").write_bytes(len(head).to_bytes(8, "little") + head + bytes(4))
    with pytest.raises(ValueError, match=r"'x' has dtype F8_E4M3, which resgrad does not read"):
        load_hf(bf)


# --------------------------------------------------------------------------- every field read


_CONFIG_FIELDS = {  # field -> what a good value is
    "vocab_size": "an integer >= 1",
    "n_positions": "an integer >= 1",
    "n_layer": "an integer >= 1",
    "n_head": "an integer >= 1",
    "n_embd": "an integer >= 1",
    "layer_norm_epsilon": "a positive finite number from 1.17549e-38 to 0.1",
}


@pytest.mark.parametrize("field", list(_CONFIG_FIELDS))
@pytest.mark.parametrize("value", [None, "8", True, -1, 0, 2.5, 8.0, [8], {"v": 8}])
def test_every_config_field_is_checked_for_type_and_range(tmp_path, field, value):
    """null, strings, booleans, negatives, zero and non-integers in a field resgrad reads:
    one line naming the file and the field, the value as JSON writes it, and what fits."""
    if field == "layer_norm_epsilon" and value == 2.5:
        value = float("inf")  # 2.5 is a positive number: eps must be finite instead
    d = _tiny_dir(tmp_path)
    _edit_config(d, **{field: value})
    if field == "n_positions":  # the old alias must not stand in for a bad n_positions
        _edit_config(d, n_ctx=8)
    msg = _one_line_error(d, re.escape(f"{field} is {json.dumps(value)}; expected"))
    assert msg.startswith(f"{d / 'config.json'}: ") and msg.count("config.json") == 1, msg
    assert _CONFIG_FIELDS[field] in msg, msg


def test_an_integral_float_size_is_refused_and_an_epsilon_is_read_as_a_float(tmp_path):
    """transformers' GPT2Config refuses n_layer 2.0 (a float where an int is expected):
    so does resgrad, by name; an epsilon written 1e-05 is read as the float it is."""
    d = _tiny_dir(tmp_path)
    _edit_config(d, n_layer=2.0)
    _one_line_error(d, re.escape("n_layer is 2.0; expected an integer >= 1"))
    _edit_config(d, n_layer=2, layer_norm_epsilon=1e-05)
    cfg = load_hf(d).cfg
    assert (cfg.n_layer, cfg.ln_eps) == (2, 1e-05)
    assert type(cfg.n_layer) is int and type(cfg.ln_eps) is float


@pytest.mark.parametrize(
    "key, value",
    [("scale_attn_weights", "true"), ("tie_word_embeddings", 1), ("add_cross_attention", "no"),
     ("scale_attn_by_inverse_layer_idx", "false"), ("n_inner", "32"), ("model_type", None)],
)  # fmt: skip
def test_switches_must_be_json_booleans(tmp_path, key, value):
    d = _tiny_dir(tmp_path)
    _edit_config(d, **{key: value})
    msg = _one_line_error(d, re.escape(f"{key} is {json.dumps(value)}"))
    assert msg.startswith(f"{d / 'config.json'}: "), msg


# --------------------------------------------------------------------------- aliases

# transformers' GPT2Config.attribute_map: the names other configs use for GPT-2's sizes
_ALIASES = {"n_embd": "hidden_size", "n_layer": "num_hidden_layers",
            "n_head": "num_attention_heads", "n_positions": "max_position_embeddings"}  # fmt: skip


def _renamed(d, **renames):
    """config.json with fields renamed (old name -> new name), values kept."""
    cfg = json.loads((d / "config.json").read_text())
    for old, new in renames.items():
        cfg[new] = cfg.pop(old)
    (d / "config.json").write_text(json.dumps(cfg))
    return cfg


def _same_logits_as_transformers(torch, transformers, d, hf=None):
    """resgrad's float64 logits on ``d`` against the ones transformers computes from ``d``
    (itself reading the same config.json), or from ``hf`` when transformers cannot."""
    if hf is None:
        hf = transformers.GPT2LMHeadModel.from_pretrained(
            d, dtype=torch.float64, attn_implementation="eager"
        ).eval()
    model = load_hf(d, dtype=np.float64)
    idx = _ids(model.cfg.vocab_size, T=min(17, model.cfg.block_size))
    ref = hf(torch.from_numpy(idx)).logits.detach().numpy()
    assert np.abs(model.forward(idx)[0] - ref).max() / np.abs(ref).max() < LOGITS_TOL_64
    return model


@pytest.mark.parametrize("field", list(_ALIASES))
def test_each_alias_of_attribute_map_gives_transformers_logits(torch, transformers, tmp_path,
                                                               field):  # fmt: skip
    """A config.json naming a size by its alias only (hidden_size, ...): transformers reads
    it (its attribute_map), and resgrad computes its logits."""
    _, d = _saved(torch, transformers, tmp_path)
    cfg = _renamed(d, **{field: _ALIASES[field]})
    assert field not in cfg
    hf = transformers.GPT2LMHeadModel.from_pretrained(
        d, dtype=torch.float64, attn_implementation="eager"
    ).eval()
    assert getattr(hf.config, field) == SMALL[field]  # transformers did read the alias
    model = _same_logits_as_transformers(torch, transformers, d, hf)
    assert model.cfg == GPTConfig(vocab_size=97, block_size=80, n_layer=2, n_head=4, n_embd=64)


def test_all_aliases_at_once_and_aliases_that_disagree(torch, transformers, tmp_path):
    _, d = _saved(torch, transformers, tmp_path)
    _renamed(d, **_ALIASES)
    _same_logits_as_transformers(torch, transformers, d)
    _edit_config(d, n_embd=64)  # the field and its alias, equal: one value
    _same_logits_as_transformers(torch, transformers, d)
    for field, alias in _ALIASES.items():  # unequal: which one transformers reads is moot
        _, d = _saved(torch, transformers, tmp_path, name=f"two-{field}")
        _edit_config(d, **{alias: 2 * SMALL[field]})
        msg = _one_line_error(d, re.escape(
            f"{field} is {SMALL[field]} but {alias} is {2 * SMALL[field]}; expected one value "
            f"({field} and {alias} name one field)"))  # fmt: skip
        assert msg.startswith(f"{d / 'config.json'}: "), msg


def test_n_ctx_old_configs_context_size(torch, transformers, tmp_path):
    """Old GPT-2 configs (the hub's gpt2) carry n_ctx beside n_positions: equal, read;
    unequal, refused; alone, read (the position embedding's shape confirms it)."""
    hf, d = _saved(torch, transformers, tmp_path, n_ctx=SMALL["n_positions"])
    assert json.loads((d / "config.json").read_text())["n_ctx"] == 80  # written by transformers
    _same_logits_as_transformers(torch, transformers, d)
    _edit_config(d, n_ctx=40)
    _one_line_error(d, re.escape("n_positions is 80 but n_ctx is 40; expected one value"))
    _edit_config(d, n_ctx=80)
    _renamed(d, n_positions="unused")  # n_ctx alone (transformers would default to 1024)
    _same_logits_as_transformers(torch, transformers, d, hf)
    _edit_config(d, n_ctx=40)  # a wrong n_ctx alone: the weights refuse it
    _one_line_error(d, re.escape("tensor 'wpe.weight' has shape (80, 64); expected (40, 64)"))


def test_n_inner_is_honoured_when_4_n_embd_and_refused_by_name_otherwise(torch, transformers,
                                                                        tmp_path):  # fmt: skip
    _, d = _saved(torch, transformers, tmp_path, n_inner=4 * SMALL["n_embd"])
    assert json.loads((d / "config.json").read_text())["n_inner"] == 256
    _same_logits_as_transformers(torch, transformers, d)  # the MLP transformers builds: 256
    for inner in (255, 257, 128, 256.0, True, "256"):
        _, d = _saved(torch, transformers, tmp_path, name=f"inner-{inner}")
        _edit_config(d, n_inner=inner)
        _one_line_error(d, re.escape(f"n_inner is {json.dumps(inner)}; resgrad's GPT-2 needs "
                                     "null or the integer 4 * n_embd = 256"))  # fmt: skip


# --------------------------------------------------------------------------- float fields


@pytest.mark.parametrize("field", ["resid_pdrop", "embd_pdrop", "attn_pdrop",
                                   "summary_first_dropout"])  # fmt: skip
def test_a_dropout_field_is_a_probability_below_1(tmp_path, field):
    d = _tiny_dir(tmp_path)
    for ok in (0, 0.0, 0.1, float(np.nextafter(1.0, 0.0))):
        _edit_config(d, **{field: ok})
        load_hf(d)
    for bad in (1, 1.0, float(np.nextafter(0.0, -1.0)), -0.1, "0.1", True, None, float("nan")):
        _edit_config(d, **{field: bad})
        _one_line_error(d, re.escape(f"{field} is {json.dumps(bad)}; expected a dropout "
                                     "probability in [0, 1)"))  # fmt: skip


def test_initializer_range_is_a_finite_number_at_least_0(tmp_path):
    d = _tiny_dir(tmp_path)
    for ok in (0, 0.02, 1e300):
        _edit_config(d, initializer_range=ok)
        load_hf(d)
    for bad in (float(np.nextafter(0.0, -1.0)), float("inf"), "0.02", False, None):
        _edit_config(d, initializer_range=bad)
        _one_line_error(d, re.escape(f"initializer_range is {json.dumps(bad)}; expected a "
                                     "finite number >= 0"))  # fmt: skip


@pytest.mark.parametrize("eps", [1e308, 1.0, 0.5, 1e-39, 1e-300, float("nan"), float("inf")])
def test_an_epsilon_no_gpt2_uses_is_refused(tmp_path, eps):
    """1e308 was read, overflowed float32 and sampled garbage."""
    d = _tiny_dir(tmp_path)
    _edit_config(d, layer_norm_epsilon=eps)
    _one_line_error(d, re.escape(f"layer_norm_epsilon is {json.dumps(eps)}; expected a "
                                 "positive finite number from 1.17549e-38 to 0.1 "
                                 "(LayerNorm's epsilon; GPT-2's is 1e-05)"))  # fmt: skip


# --------------------------------------------------------------------------- export's fields


def test_every_field_export_writes_is_the_models_as_transformers_reads_it(transformers, tmp_path):
    """Each field from the model (dropout 0.25, not GPT-2's 0.1; its epsilon, activation and
    sizes, each distinct), present in config.json itself (not a default that happens to
    match), as transformers' GPT2Config reads it."""
    cfg = GPTConfig(vocab_size=50, block_size=24, n_layer=3, n_head=2, n_embd=8, dropout=0.25,
                    ln_eps=3e-4, activation="gelu-erf", bias=False)  # fmt: skip
    export_hf(GPT(cfg, seed=0), tmp_path / "out")
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    c = transformers.GPT2Config.from_pretrained(tmp_path / "out")
    want = {
        "vocab_size": cfg.vocab_size, "n_positions": cfg.block_size, "n_layer": cfg.n_layer,
        "n_head": cfg.n_head, "n_embd": cfg.n_embd, "layer_norm_epsilon": cfg.ln_eps,
        "activation_function": "gelu", "resid_pdrop": cfg.dropout, "embd_pdrop": cfg.dropout,
        "attn_pdrop": cfg.dropout, "n_inner": None, "tie_word_embeddings": True,
        "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
        "model_type": "gpt2",
    }  # fmt: skip
    for key, value in want.items():
        assert key in written and written[key] == value, (key, written.get(key), value)
        assert getattr(c, key) == value, (key, getattr(c, key), value)
    assert c.architectures == ["GPT2LMHeadModel"]
    assert c.bos_token_id is None and c.eos_token_id is None  # GPT-2's 50256 is out of V
    back = load_hf(tmp_path / "out").cfg  # and resgrad reads the same shape back
    assert (back.vocab_size, back.block_size, back.n_layer, back.n_head, back.n_embd,
            back.ln_eps, back.activation) == (50, 24, 3, 2, 8, 3e-4, "gelu-erf")  # fmt: skip


def test_export_refuses_an_epsilon_load_would_refuse(tmp_path):
    from resgrad.formats.hf import EPS_MAX, EPS_MIN

    for eps in (EPS_MIN, EPS_MAX):  # the bounds: exported and read back
        cfg = GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=8, ln_eps=eps)
        export_hf(GPT(cfg, seed=0), tmp_path / f"ok{eps}")
        assert load_hf(tmp_path / f"ok{eps}").cfg.ln_eps == eps
    for eps in (float(np.nextafter(EPS_MIN, 0)), float(np.nextafter(EPS_MAX, 1)), 0.5):
        cfg = GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=8, ln_eps=eps)
        with pytest.raises(ValueError) as e:
            export_hf(GPT(cfg, seed=0), tmp_path / "bad")
        assert str(e.value) == (f"cannot export ln_eps {eps!r} as GPT-2: its layer_norm_epsilon "
                                "is read from 1.17549e-38 to 0.1")  # fmt: skip
        assert not (tmp_path / "bad").exists()


def test_a_config_too_large_for_its_weights_is_refused_before_anything_is_allocated(
    tmp_path, monkeypatch
):
    """n_layer 100,000,000 in a tiny model's config hung, memory growing: the config is now
    held against the weights' size on disk (2 bytes a parameter at least) first."""
    import resgrad.formats.hf as hf

    d = _tiny_dir(tmp_path)
    _edit_config(d, n_layer=100_000_000)

    def no_allocation(*a, **k):
        raise AssertionError("allocated for the config's size")

    monkeypatch.setattr(hf, "_names", no_allocation)
    monkeypatch.setattr(GPT, "param_shapes", no_allocation)
    msg = _one_line_error(d, "n_layer 100000000")
    assert msg.endswith("parameters, but 'model.safetensors' holds 1,984 values"), msg


def test_absurd_sizes_are_refused_by_the_config_alone():
    from resgrad.formats.hf import gpt_config_from_hf, hf_config

    ok = hf_config(GPTConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=8))
    with pytest.raises(ValueError, match=r"config.json: these sizes make about 9\.6e\+13 param"):
        gpt_config_from_hf({**ok, "n_embd": 10**6, "n_head": 1, "n_layer": 8})
    assert gpt_config_from_hf({**ok, "n_layer": 10**4}).n_layer == 10**4  # large, not absurd


def test_load_hf_calls_fits_with_the_shape_before_reading_any_weight(tmp_path, monkeypatch):
    import safetensors.numpy

    d = _tiny_dir(tmp_path)
    load_hf(d, fits=lambda cfg: None)  # it fits: loaded

    def no_reading(*a, **k):
        raise AssertionError("weights read before fits()")

    monkeypatch.setattr(safetensors.numpy, "load_file", no_reading)
    seen = []

    def fits(cfg):
        seen.append(cfg)
        raise MemoryError("too big")

    with pytest.raises(MemoryError, match="too big"):
        load_hf(d, fits=fits)
    assert seen == [GPTConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=8)]


# --------------------------------------------------------------------------- shards


def test_a_sharded_model_gives_transformers_logits(torch, transformers, tmp_path):
    """save_pretrained with a small max_shard_size: an index and several safetensors files,
    loaded as one model with transformers' logits."""
    hf = _hf_model(torch, transformers)
    d = tmp_path / "sharded"
    hf.save_pretrained(d, max_shard_size="200KB")
    shards = sorted(p.name for p in d.glob("model-*.safetensors"))
    assert len(shards) >= 3 and not (d / "model.safetensors").exists(), os.listdir(d)
    index = json.loads((d / "model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == shards
    ours = load_hf(d, dtype=np.float64)
    idx = _ids(SMALL["vocab_size"])
    ref = hf(torch.from_numpy(idx)).logits.detach().numpy()
    assert np.abs(ours.forward(idx)[0] - ref).max() / np.abs(ref).max() < LOGITS_TOL_64
    os.remove(d / shards[-1])  # a shard the index names, missing: named
    _one_line_error(d, re.escape(shards[-1]))


def _sharded_tiny(tmp_path):
    """The tiny model split by hand into two shards and an index."""
    from safetensors.numpy import load_file, save_file

    d = _tiny_dir(tmp_path)
    t = load_file(d / "model.safetensors")
    os.remove(d / "model.safetensors")
    names = sorted(t)
    half = {"model-00001-of-00002.safetensors": names[::2],
            "model-00002-of-00002.safetensors": names[1::2]}  # fmt: skip
    for shard, ks in half.items():
        save_file({k: t[k] for k in ks}, d / shard, metadata={"format": "pt"})
    wm = {k: shard for shard, ks in half.items() for k in ks}
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
    return d, wm


def test_a_hand_sharded_model_loads_as_the_single_file(tmp_path):
    d, _ = _sharded_tiny(tmp_path)
    one = _tiny_dir(tmp_path, "one")
    a, b = load_hf(d), load_hf(one)
    for k in b.params:
        np.testing.assert_array_equal(a.params[k], b.params[k])


@pytest.mark.parametrize(
    "index, match",
    [
        ([1, 2], "is a JSON array; expected an object with a 'weight_map'"),
        ({"metadata": {}}, "has no 'weight_map'"),
        ({"weight_map": ["model-00001-of-00002.safetensors"]},
         "weight_map is a JSON array; expected an object of tensor name -> shard file"),
        ({"weight_map": {"transformer.wte.weight": 3}},
         "weight_map['transformer.wte.weight'] is 3; expected a shard file name"),
        ({"weight_map": {"transformer.wte.weight": None}},
         "weight_map['transformer.wte.weight'] is null; expected a shard file name"),
        ({"weight_map": {"transformer.wte.weight": "../other/model.safetensors"}},
         'is "../other/model.safetensors"; expected a shard file name'),
        ({"weight_map": {}}, "weight_map is empty"),
    ],
)  # fmt: skip
def test_a_bad_safetensors_index_is_refused_by_name(tmp_path, index, match):
    d, _ = _sharded_tiny(tmp_path)
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    msg = _one_line_error(d, re.escape(match))
    assert msg.startswith(repr(str(d / "model.safetensors.index.json"))), msg


def test_a_shard_holding_tensors_its_index_does_not_name_is_refused(tmp_path):
    d, wm = _sharded_tiny(tmp_path)
    first = sorted(wm)[0]
    del wm[first]
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
    _one_line_error(d, re.escape(f"tensor {first!r}, which the index does not map to it"))


# --------------------------------------------------------------------------- weight values


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.bool_])
def test_integer_and_boolean_weights_are_refused_by_name_and_dtype(tmp_path, dtype):
    """int8 weights were cast: an all-zero model that trained with gradient norm 0."""
    d = _tiny_dir(tmp_path)
    bad = "transformer.h.0.attn.c_attn.weight"
    _edit_tensors(d, lambda t: t.update({bad: t[bad].astype(dtype)}))
    from safetensors import safe_open

    with safe_open(d / "model.safetensors", framework="numpy") as f:
        st = f.get_slice(bad).get_dtype()
    msg = _one_line_error(d, re.escape(f"tensor {bad!r} has dtype {st}; expected floating-point"))
    assert msg.startswith(repr(str(d / "model.safetensors"))), msg


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_float_weights_of_every_width_load_as_their_values(tmp_path, dtype):
    d = _tiny_dir(tmp_path)
    _edit_tensors(d, lambda t: t.update({k: v.astype(dtype) for k, v in t.items()}))
    from safetensors.numpy import load_file

    t = load_file(d / "model.safetensors")
    got = load_hf(d, dtype=np.float64)
    np.testing.assert_array_equal(got.params["wte"], t["transformer.wte.weight"].astype(np.float64))


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf, 1e300])
def test_non_finite_weights_are_refused_naming_the_tensor(tmp_path, value):
    """A NaN, an inf, or a float64 beyond float32's range (inf once loaded as float32)."""
    d = _tiny_dir(tmp_path)
    bad = "transformer.h.1.mlp.c_proj.weight"

    def poison(t):
        t[bad] = t[bad].astype(np.float64)
        t[bad][3, 2] = value

    _edit_tensors(d, poison)
    msg = _one_line_error(d, re.escape("tensor 'h.1.mlp.c_proj.weight' holds 1 non-finite"))
    assert msg.startswith(f"{d}: "), msg
    if value == 1e300:  # fits float64: only the float32 load is refused
        assert load_hf(d, dtype=np.float64).params["blocks.1.mlp.w_proj"][3, 2] == 1e300


# --------------------------------------------------------------------------- export, as a whole


def _two_models():
    """Two models that differ in every file export writes: shape, weights and tokenizer."""
    from resgrad.train.bpe import char_tokenizer_json

    old = GPT(GPTConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=8), seed=0)
    new = GPT(GPTConfig(vocab_size=12, block_size=8, n_layer=1, n_head=2, n_embd=8), seed=1)
    return (old, char_tokenizer_json("abcdefghijklmnopqrst")), (
        new,
        char_tokenizer_json("0123456789 ."),
    )


def _which(d, old, new):
    """'old' or 'new' when every file in ``d`` is that export's; fails on a mix."""
    got = load_hf(d)
    tok = (d / "tokenizer.json").read_text()
    for name, (model, tj) in (("old", old), ("new", new)):
        if got.cfg == model.cfg:
            assert tok == tj, "a tokenizer from the other export"
            for k in model.params:
                np.testing.assert_array_equal(got.params[k], model.params[k])
            return name
    raise AssertionError(f"neither export: {got.cfg}")


def test_export_refuses_a_directory_holding_a_model_unless_forced(tmp_path):
    (old, old_tj), (new, new_tj) = _two_models()
    d = tmp_path / "hf"
    export_hf(old, d, tokenizer_json=old_tj)
    before = {n: (d / n).read_bytes() for n in os.listdir(d)}
    with pytest.raises(ValueError) as e:
        export_hf(new, d, tokenizer_json=new_tj)
    assert str(e.value) == (
        f"{str(d)!r} already holds a model (config.json, model.safetensors, tokenizer.json); "
        "pass --force (force=True) to replace it, or choose another directory"
    )
    assert {n: (d / n).read_bytes() for n in os.listdir(d)} == before  # nothing lost
    export_hf(new, d, tokenizer_json=new_tj, force=True)
    assert _which(d, (old, old_tj), (new, new_tj)) == "new"
    assert os.listdir(tmp_path) == ["hf"]  # no temporary beside it
    (d / "notes.txt").write_text("mine")  # a file that is not a model's: never replaced
    with pytest.raises(ValueError, match=r"holds 'notes.txt', which is not part of a model"):
        export_hf(old, d, tokenizer_json=old_tj, force=True)
    assert (d / "notes.txt").read_text() == "mine"
    assert _which(d, (old, old_tj), (new, new_tj)) == "new"
    (tmp_path / "empty").mkdir()  # an empty directory is no model: taken without --force
    export_hf(old, tmp_path / "empty", tokenizer_json=old_tj)
    assert _which(tmp_path / "empty", (old, old_tj), (new, new_tj)) == "old"


def test_an_export_failing_at_each_rename_leaves_the_old_model(tmp_path, monkeypatch):
    (old, old_tj), (new, new_tj) = _two_models()
    d = tmp_path / "hf"
    export_hf(old, d, tokenizer_json=old_tj)
    for k in (1, 2):  # the old one aside; the new one in place
        fail_rename_at(monkeypatch, k, "disk full")
        with pytest.raises(OSError, match=f"rename {k}"):
            export_hf(new, d, tokenizer_json=new_tj, force=True)
        assert _which(d, (old, old_tj), (new, new_tj)) == "old"
        assert os.listdir(tmp_path) == ["hf"], os.listdir(tmp_path)


def test_a_killed_export_leaves_the_old_model_or_the_new_one(tmp_path):
    """SIGKILL at each fsync, rename and removal of ``export --force``: the directory is
    the old model or the new one, never new weights beside the old config; killed between
    the renames, the old model is aside, whole, and the next export puts it back first.
    The next export removes every temporary a kill left."""

    (old, old_tj), (new, new_tj) = _two_models()
    d = tmp_path / "hf"
    seen = []
    step = 0
    while True:
        step += 1
        export_hf(old, d, tokenizer_json=old_tj, force=True)  # cleans up the previous kill
        assert os.listdir(tmp_path) == ["hf"], os.listdir(tmp_path)
        killed = killed_at(step, lambda: export_hf(new, d, tokenizer_json=new_tj, force=True))
        if not d.exists():  # killed between the renames: the old one aside comes back
            seen.append("missing")
            with pytest.raises(ValueError, match="already holds a model"):
                export_hf(new, d, tokenizer_json=new_tj)  # refused: the old one is back
        seen.append(_which(d, (old, old_tj), (new, new_tj)))
        if not killed:
            break
    assert {"old", "new", "missing"} <= set(seen) and seen[-1] == "new", seen
    export_hf(old, d, tokenizer_json=old_tj, force=True)
    assert os.listdir(tmp_path) == ["hf"]
