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


# -- SOURCE: every command asks resgrad.train.source what it is, and says it the same way


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny trained run, the same run killed before its first checkpoint, its export as
    a Hugging Face directory, and a text with characters outside its vocabulary."""
    from tests.train import test_source

    base = tmp_path_factory.mktemp("runs")
    (base / "data.txt").write_text(test_source.TEXT, encoding="utf-8")
    run = test_source.tiny_run(base / "run", base / "data.txt")
    from resgrad.train.sample import load_model

    model, tok, _ = load_model(run)
    export_hf(model, base / "hf", tokenizer_json=char_tokenizer_json(tok.chars))
    (base / "caps.txt").write_text("The Quick Brown Fox. " * 40, encoding="utf-8")
    return {"run": run, "killed": test_source.killed(run, base / "killed"),
            "hf": str(base / "hf"), "text": str(base / "data.txt"),
            "caps": str(base / "caps.txt")}  # fmt: skip


def _source_commands(src, r, out_dir):
    """Every command that reads a SOURCE, as a user types them."""
    return {
        "sample --out-dir": ["sample", "--out-dir", src, "--start", "the", "--num-tokens", "2"],
        "sample --from-pretrained": ["sample", "--from-pretrained", src, "--start", "the",
                                     "--num-tokens", "2"],
        "paths": ["paths", src, "--text", r["text"], "--seq", "8", "--batch", "2"],
        "flow": ["flow", "--from-pretrained", src, "--text", r["text"], "--seq", "8",
                 "--batch", "2"],
        "train": ["train", "--init-from", src, "--data", r["text"], "--out-dir", out_dir,
                  "--block-size", "8", "--max-iters", "1"],
    }  # fmt: skip


def test_a_run_killed_before_its_first_checkpoint_is_said_to_be_one_by_every_command(
    runs, tmp_path, capsys
):
    k = runs["killed"]
    said = (f"{k!r} is a resgrad run directory with no checkpoint yet (killed before its first "
            f"checkpoint?); train it on with resgrad train --out-dir {k}")  # fmt: skip
    cmds = _source_commands(k, runs, str(tmp_path / "ft"))
    for name in ("sample --out-dir", "sample --from-pretrained", "paths", "flow"):
        _refused(capsys, cmds[name], said)
    _refused(capsys, [*cmds["paths"], "--best"], said)  # not "a pretrained model"
    _refused(capsys, cmds["train"], f"--init-from {k!r} is a resgrad run directory; "
             "--init-from takes a Hugging Face GPT-2 directory")  # fmt: skip
    assert not os.path.exists(tmp_path / "ft")


def test_a_resgrad_run_is_a_source_of_flow_and_sample_from_pretrained(runs, capsys):
    cmds = _source_commands(runs["run"], runs, "unused")
    for name in ("sample --out-dir", "sample --from-pretrained", "paths", "flow"):
        assert main(cmds[name]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out.splitlines()
    assert out[0] == out[1] and out[0].startswith("the")  # one model, the same seed
    assert out[2].startswith("run (pre-ln, L=1, C=8), T=8 B=2") and "n = 2 branches" in out[2]
    flow = [line.split("|")[:2] for line in out[-2:]]  # its rows: the run's 2 layer inputs
    assert [[v.strip() for v in r] for r in flow] == [["pre-ln", "0"], ["pre-ln", "1"]], out
    assert main([*cmds["sample --from-pretrained"], "--best", "--seed", "3"]) == 0
    assert main(["sample", "--out-dir", runs["run"], "--best", "--start", "the",
                 "--num-tokens", "2", "--seed", "3"]) == 0  # fmt: skip
    a, b = capsys.readouterr().out.splitlines()
    assert a == b  # one model, one seed: one text
    _refused(capsys, ["sample", "--out-dir", runs["hf"]], f"--out-dir {runs['hf']!r} is a "
             "Hugging Face GPT-2 directory; --out-dir takes a resgrad run directory or a "
             "resgrad checkpoint file")  # fmt: skip


@pytest.mark.parametrize(
    "args, needle",
    [
        (["paths", "{run}", "--meta", "{text}"], "--meta is the vocabulary of a nanoGPT ckpt.pt; "
         "{run!r} is a resgrad run directory: its vocabulary is in its checkpoint"),
        (["paths", "{run}/last.ckpt", "--best"], "--best picks a run directory's best.ckpt; "
         "'{run}/last.ckpt' is a resgrad checkpoint file"),
        (["paths", "{hf}", "--best"], "--best picks a run directory's best.ckpt; {hf!r} is a "
         "Hugging Face GPT-2 directory"),
        (["paths", "{hf}", "--meta", "{text}"], "{hf!r} is a Hugging Face GPT-2 directory: its "
         "tokenizer is in the directory"),
        (["sample", "--from-pretrained", "{run}", "--meta", "{text}"], "--meta is the "
         "vocabulary of a nanoGPT ckpt.pt; {run!r} is a resgrad run directory"),
        (["flow", "--from-pretrained", "{hf}", "--text", "{text}", "--meta", "{text}"],
         "--meta is the vocabulary of a nanoGPT ckpt.pt; {hf!r} is a Hugging Face"),
        (["paths", "{tmp}/nope", "--text", "{text}"], "'{tmp}/nope' does not exist and is not "
         "a hub model name (expected a resgrad run directory"),
        (["sample", "--out-dir", "{tmp}/nope"], "'{tmp}/nope' does not exist (expected a "
         "resgrad run directory or a resgrad checkpoint file)"),
        (["paths", "{tmp}", "--text", "{text}"], "{tmp!r} is a directory but not a model: it "
         "has no last.ckpt"),
    ],
)  # fmt: skip
def test_flags_meaningless_for_the_source_found_are_refused_in_one_line(
    runs, tmp_path, capsys, args, needle
):
    fill = dict(run=runs["run"], hf=runs["hf"], text=runs["text"], tmp=str(tmp_path))
    _refused(capsys, [a.format(**fill) for a in args], needle.format(**fill))


def test_best_on_a_run_without_best_ckpt_says_so(runs, tmp_path, capsys):
    import shutil

    d = tmp_path / "out"
    shutil.copytree(runs["run"], d)
    os.remove(d / "best.ckpt")
    for args in (["paths", str(d), "--text", runs["text"], "--best"],
                 ["sample", "--out-dir", str(d), "--best"]):  # fmt: skip
        _refused(capsys, args, f"--best: {str(d)!r} is a resgrad run directory with no "
                 "best.ckpt; without --best, its last.ckpt is read")  # fmt: skip


def _reads_text(command: str, run: str) -> list[str]:
    """``flow`` or ``paths`` of ``run`` on windows that fit its 8 positions."""
    src = ["flow", "--from-pretrained", run] if command == "flow" else ["paths", run]
    return [*src, "--seq", "8"]


@pytest.mark.parametrize("command", ["flow", "paths"])
def test_a_text_outside_the_vocabulary_names_the_text(runs, capsys, command):
    """flow and paths run a character-level model on --text: a text it cannot read is
    named."""
    src = _reads_text(command, runs["run"])
    err = _refused(capsys, [*src, "--text", runs["caps"]], f"--text {runs['caps']!r}: ")
    assert "character(s) not in the model's vocabulary" in err
    assert err.rstrip().endswith("pass a text in the model's vocabulary"), err


def test_the_built_in_corpus_outside_the_vocabulary_is_named_with_the_fix(runs, capsys):
    """Without --text, paths reads the built-in corpus: the message says so, and --text.
    (flow --from-pretrained needs --text.)"""
    corpus = "the built-in corpus (pydoc_data.topics"
    err = _refused(capsys, _reads_text("paths", runs["run"]), corpus)
    assert err.rstrip().endswith("pass --text FILE, a text in the model's vocabulary"), err


@pytest.fixture
def nanogpt_ckpt(torch, tmp_path):
    """nanoGPT's out/ckpt.pt beside data/shakespeare_char/meta.pkl, of CHARS."""
    import pickle

    from tests import nanogpt_reference

    (tmp_path / "data" / "shakespeare_char").mkdir(parents=True)
    stoi = {c: i for i, c in enumerate(CHARS)}
    (tmp_path / "data" / "shakespeare_char" / "meta.pkl").write_bytes(pickle.dumps(
        {"vocab_size": len(CHARS), "stoi": stoi, "itos": dict(enumerate(CHARS))}))  # fmt: skip
    kw = dict(n_layer=1, n_head=1, n_embd=8, block_size=16, vocab_size=len(CHARS), bias=False)
    ref = nanogpt_reference.build(torch, **kw, dtype=torch.float32, seed=0)
    (tmp_path / "out").mkdir()
    torch.save(nanogpt_reference.train_py_checkpoint(torch, ref, **kw), tmp_path / "out/ckpt.pt")
    return str(tmp_path / "out" / "ckpt.pt")


def test_meta_that_is_a_directory_is_said_to_be_one_by_every_command(
    nanogpt_ckpt, text_file, tmp_path, capsys
):
    d = os.path.dirname(nanogpt_ckpt)  # a directory, not the meta.pkl in data/
    said = f"meta.pkl {d!r} is a directory; expected a file, nanoGPT's data/<dataset>/meta.pkl"
    for args in _commands(nanogpt_ckpt, text_file, str(tmp_path / "ft")).values():
        _refused(capsys, [*args, "--meta", d], said)
    _refused(capsys, ["paths", nanogpt_ckpt, "--text", text_file, "--meta", d], said)
    assert not os.path.exists(tmp_path / "ft")
    assert main(["paths", nanogpt_ckpt, "--text", text_file, "--seq", "8", "--batch", "2"]) == 0


def test_a_killed_run_in_a_real_process_is_one_line_and_no_traceback(runs):
    p = subprocess.run([sys.executable, "-m", "resgrad", "paths", runs["killed"]],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 2 and p.stdout == "", p.stderr
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    assert "with no checkpoint yet (killed before its first checkpoint?)" in p.stderr
