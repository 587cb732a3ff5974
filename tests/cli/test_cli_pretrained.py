"""Bad pretrained models through the commands that read them: one line, exit 2, no traceback,
nothing left behind, nothing allocated for a model that cannot fit.

Each case is a small Hugging Face directory (written by resgrad's export, a character
vocabulary) damaged one way, run through ``sample --from-pretrained``, ``flow
--from-pretrained`` and ``train --init-from`` as a user would type them.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from resgrad.cli import main
from resgrad.formats.hf import export_hf
from resgrad.nn.model import GPT, GPTConfig
from resgrad.train.bpe import char_tokenizer_json

CHARS = "abcdefghij klmnopqrs"  # 20 tokens, the model's vocab_size
TEXT = "abc def ghij klm nopq rs " * 40


@pytest.fixture
def model_dir(tmp_path):
    cfg = GPTConfig(vocab_size=len(CHARS), block_size=16, n_layer=2, n_head=2, n_embd=8)
    d = tmp_path / "model"
    export_hf(GPT(cfg, seed=0), d, tokenizer_json=char_tokenizer_json(CHARS))
    return d


@pytest.fixture
def text_file(tmp_path):
    p = tmp_path / "text.txt"
    p.write_text(TEXT, encoding="utf-8")
    return str(p)


def _commands(d, text_file, out_dir):
    """The three commands that read a pretrained model, as a user types them."""
    return {
        "sample": ["sample", "--from-pretrained", str(d), "--start", "abc", "--num-tokens", "3"],
        "flow": ["flow", "--from-pretrained", str(d), "--text", text_file, "--seq", "8",
                 "--batch", "2", "--seeds", "1"],
        "train": ["train", "--init-from", str(d), "--data", text_file, "--out-dir", out_dir,
                  "--block-size", "8", "--batch-size", "2", "--max-iters", "2",
                  "--eval-interval", "2", "--eval-iters", "1"],
    }  # fmt: skip


def _refused(capsys, args, needle):
    """One line on stderr naming ``needle``, exit 2, and nothing printed on stdout."""
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert needle in err, err
    assert err.count("\n") == 1 and err.startswith(f"resgrad {args[0]}: error: "), err
    assert out == "", out  # not the start of a sample, then a traceback
    return err


def _all_refused(capsys, d, text_file, tmp_path, needle):
    out_dir = str(tmp_path / "run")
    errs = {}
    for name, args in _commands(d, text_file, out_dir).items():
        errs[name] = _refused(capsys, args, needle)
    assert not os.path.exists(out_dir), os.listdir(out_dir)  # train left nothing behind
    return errs


def _edit_config(d, **kw):
    p = d / "config.json"
    p.write_text(json.dumps({**json.loads(p.read_text()), **kw}))


def _edit_tensors(d, fn):
    from safetensors.numpy import load_file, save_file

    t = load_file(d / "model.safetensors")
    fn(t)
    save_file(t, d / "model.safetensors", metadata={"format": "pt"})


def test_the_undamaged_model_runs_in_all_three(model_dir, text_file, tmp_path, capsys):
    """The baseline the cases below damage: each command succeeds on it."""
    for args in _commands(model_dir, text_file, str(tmp_path / "run")).values():
        assert main(args) == 0, capsys.readouterr().err
    capsys.readouterr()


@pytest.mark.parametrize(
    "field, value, needle",
    [
        ("layer_norm_epsilon", None, "layer_norm_epsilon is null; expected a positive finite"),
        ("n_layer", "2", 'n_layer is "2"; expected an integer >= 1'),
        ("n_embd", -8, "n_embd is -8; expected an integer >= 1"),
        ("n_head", True, "n_head is true; expected an integer >= 1"),
        ("vocab_size", 20.5, "vocab_size is 20.5; expected an integer >= 1"),
    ],
)
def test_a_bad_config_field_is_one_line_naming_file_and_field(
    model_dir, text_file, tmp_path, capsys, field, value, needle
):
    _edit_config(model_dir, **{field: value})
    errs = _all_refused(capsys, model_dir, text_file, tmp_path, needle)
    assert all(e.count(str(model_dir / "config.json")) == 1 for e in errs.values()), errs


@pytest.mark.parametrize(
    "index, needle",
    [
        ([], "is a JSON array; expected an object with a 'weight_map'"),
        ({"weight_map": ["model.safetensors"]}, "weight_map is a JSON array"),
        ({"weight_map": {"transformer.wte.weight": 7}},
         "weight_map['transformer.wte.weight'] is 7; expected a shard file name"),
    ],
)  # fmt: skip
def test_a_bad_safetensors_index_is_one_line(model_dir, text_file, tmp_path, capsys, index,
                                             needle):  # fmt: skip
    os.replace(model_dir / "model.safetensors", model_dir / "model-00001-of-00001.safetensors")
    (model_dir / "model.safetensors.index.json").write_text(json.dumps(index))
    errs = _all_refused(capsys, model_dir, text_file, tmp_path, needle)
    assert all("model.safetensors.index.json" in e for e in errs.values()), errs


def test_a_tokenizer_id_beyond_the_vocabulary_is_refused_up_front(
    model_dir, text_file, tmp_path, capsys
):
    """20 tokens (the count fits), one numbered 5000: sample printed the start, then an
    IndexError; train --init-from left files; flow blamed something else."""
    spec = json.loads((model_dir / "tokenizer.json").read_text())
    spec["model"]["vocab"]["s"] = 5000
    (model_dir / "tokenizer.json").write_text(json.dumps(spec))
    needle = "the tokenizer has token id 5000 ('s'), beyond the model's vocab_size 20"
    _all_refused(capsys, model_dir, text_file, tmp_path, needle)


def test_a_config_far_larger_than_its_weights_is_refused_at_once(
    model_dir, text_file, tmp_path, capsys
):
    """n_layer 100,000,000 hung with memory growing."""
    _edit_config(model_dir, n_layer=100_000_000)
    V, T, L, C = 20, 16, 100_000_000, 8
    least = V * C + T * C + L * 12 * C * C  # wte, wpe, the blocks' four matrices
    held = V * C + T * C + 2 * (12 * C * C + 13 * C) + 2 * C  # all the 2-block file holds
    needle = (f"n_layer {L}, n_embd {C}, vocab_size {V} and {T} positions make at least "
              f"{least:,} parameters, but 'model.safetensors' holds {held:,} values")  # fmt: skip
    _all_refused(capsys, model_dir, text_file, tmp_path, needle)


@pytest.mark.parametrize("cmd", ["sample", "flow", "train"])
def test_memory_is_checked_with_the_models_shape_before_its_weights_are_read(
    model_dir, text_file, tmp_path, capsys, monkeypatch, cmd
):
    """A model that cannot fit is refused from its config.json, before a weight is read."""
    import safetensors.numpy

    from resgrad.perf import memory

    out_dir = str(tmp_path / "run")
    args = _commands(model_dir, text_file, out_dir)[cmd]
    monkeypatch.setattr(memory, "available_bytes", lambda: 10_000)  # less than any model

    def no_reading(*a, **k):
        raise AssertionError("weights read before the memory check")

    monkeypatch.setattr(safetensors.numpy, "load_file", no_reading)
    err = _refused(capsys, args, "L=2 C=8")
    assert "would need about" in err and "9.8 KiB is available" in err, err
    assert not os.path.exists(out_dir)


@pytest.mark.parametrize("dtype", [np.int8, np.bool_])
def test_integer_weights_are_refused_by_tensor_and_dtype(
    model_dir, text_file, tmp_path, capsys, dtype
):
    """int8 weights were cast: an all-zero model that trained with gradient norm 0."""
    bad = "transformer.h.0.mlp.c_fc.weight"
    _edit_tensors(model_dir, lambda t: t.update({bad: t[bad].astype(dtype)}))
    st = {np.int8: "I8", np.bool_: "BOOL"}[dtype]
    needle = f"tensor {bad!r} has dtype {st}; expected floating-point weights"
    _all_refused(capsys, model_dir, text_file, tmp_path, needle)


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_weights_are_refused_by_all_three(model_dir, text_file, tmp_path, capsys, value):
    """sample and flow computed garbage from NaN weights; train refused them only later."""

    def poison(t):
        t["transformer.h.1.attn.c_proj.weight"][0, 0] = value

    _edit_tensors(model_dir, poison)
    needle = "tensor 'h.1.attn.c_proj.weight' holds 1 non-finite value(s)"
    _all_refused(capsys, model_dir, text_file, tmp_path, needle)


def test_a_real_process_prints_one_line_and_no_traceback(model_dir, tmp_path):
    _edit_config(model_dir, layer_norm_epsilon=None)
    p = subprocess.run(
        [sys.executable, "-m", "resgrad", "sample", "--from-pretrained", str(model_dir),
         "--start", "abc"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == 2, p.stderr
    assert p.stdout == "" and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    assert "layer_norm_epsilon is null" in p.stderr


def test_export_into_a_model_needs_force(text_file, tmp_path, capsys):
    run, hf = str(tmp_path / "run"), tmp_path / "hf"
    assert (
        main(
            [
                "train",
                "--data",
                text_file,
                "--out-dir",
                run,
                "--n-layer",
                "1",
                "--n-embd",
                "8",
                "--n-head",
                "2",
                "--block-size",
                "8",
                "--batch-size",
                "2",
                "--max-iters",
                "2",
                "--eval-interval",
                "2",
                "--eval-iters",
                "1",
            ]
        )
        == 0
    )
    export = ["export", "--checkpoint", run, "--out-dir", str(hf)]  # fmt: skip
    assert main(export) == 0
    (hf / "tokenizer.json").write_text((hf / "tokenizer.json").read_text() + " ")  # marked
    before = {n: (hf / n).read_bytes() for n in os.listdir(hf)}
    capsys.readouterr()
    err = _refused(capsys, export, "already holds a model")
    assert "pass --force" in err, err
    assert {n: (hf / n).read_bytes() for n in os.listdir(hf)} == before  # nothing lost
    assert main([*export, "--force"]) == 0
    assert (hf / "tokenizer.json").read_bytes() != before["tokenizer.json"]  # replaced
    assert sorted(os.listdir(tmp_path)) == ["hf", "run", "text.txt"]  # no temporary
