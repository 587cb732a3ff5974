"""Pretrained GPT-2s in (local directories, hub names offline) and resgrad runs out, by CLI."""

import json
import os
import pathlib
import pickle
import shutil
import subprocess
import sys

import numpy as np
import pytest

import resgrad
from resgrad.cli import main
from resgrad.formats.checkpoint import load_checkpoint
from resgrad.formats.hf import export_hf, load_hf
from resgrad.nn.model import GPT, GPTConfig
from resgrad.train.bpe import train_bpe
from resgrad.train.config import TrainConfig
from resgrad.train.loop import train
from resgrad.train.pretrained import load_pretrained, sample_pretrained
from resgrad.train.sample import generate, load_model
from resgrad.verify.selfcheck import randomize_params

TEXT = "the quick brown fox jumps over the lazy dog. " * 60


@pytest.fixture
def text_file(tmp_path):
    p = tmp_path / "data.txt"
    p.write_text(TEXT, encoding="utf-8")
    return str(p)


@pytest.fixture
def gpt2_dir(tmp_path):
    """A tiny GPT-2 directory as the hub serves it: config, safetensors, tokenizer.json."""
    tok = train_bpe(TEXT, 280)
    cfg = GPTConfig(vocab_size=tok.vocab_size, block_size=32, n_layer=2, n_head=2, n_embd=16)
    model = GPT(cfg, seed=0)
    randomize_params(model.params, np.random.default_rng(0))
    d = tmp_path / "tiny-gpt2"
    export_hf(model, d, tokenizer_json=tok.to_json())
    return str(d)


def _one_line_exit_2(capsys, args, needle):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert needle in err, err
    assert err.count("\n") == 1, err
    return err


def test_sample_from_a_local_directory(gpt2_dir, capsys):
    args = ["sample", "--from-pretrained", gpt2_dir, "--start", "the quick", "--num-tokens",
            "12", "--seed", "3"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("the quick")
    model, tok = load_pretrained(gpt2_dir)
    ids = tok.encode("the quick")
    want = generate(model, ids[None], 12, np.random.default_rng(3), 0.8, 200)
    assert out == tok.decode(want[0]) + "\n"  # the CLI is the library, same seed, same text
    assert main(args) == 0 and capsys.readouterr().out == out  # the same bytes twice


def test_a_prompt_longer_than_n_positions(gpt2_dir, capsys):
    long = "zq " * 40  # rare pairs: about 60 tokens, more than the 32 positions
    _one_line_exit_2(
        capsys, ["sample", "--from-pretrained", gpt2_dir, "--start", long], "longer than"
    )


def test_a_tokenizer_larger_than_the_model(gpt2_dir, capsys):
    (open(os.path.join(gpt2_dir, "tokenizer.json"), "w")).write(train_bpe(TEXT, 400).to_json())
    cfg = json.load(open(os.path.join(gpt2_dir, "config.json")))
    assert train_bpe(TEXT, 400).vocab_size > cfg["vocab_size"]
    _one_line_exit_2(
        capsys, ["sample", "--from-pretrained", gpt2_dir, "--start", "the"], "tokenizer has"
    )


def test_missing_config_is_exit_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    _one_line_exit_2(
        capsys, ["sample", "--from-pretrained", str(tmp_path / "empty"), "--start", "a"],
        "is a directory but not a model: it has no last.ckpt (a resgrad run directory's) and "
        "no config.json (a Hugging Face GPT-2 directory's)",
    )  # fmt: skip


def test_a_missing_path_is_said_to_be_missing_not_fetched(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for missing in ("./nope", "../nope/model", "nope", "gone.pt"):
        _one_line_exit_2(
            capsys, ["sample", "--from-pretrained", missing, "--start", "a"],
            f"'{missing}' does not exist and is not a hub model name",
        )  # fmt: skip
    (tmp_path / "notes.txt").write_bytes(b"x")  # a file that is not a model: not 'missing'
    _one_line_exit_2(capsys, ["sample", "--from-pretrained", "notes.txt", "--start", "a"],
                     "'notes.txt' is a file, not a model")  # fmt: skip
    (tmp_path / "last.ckpt").write_bytes(b"x")  # a damaged checkpoint: said to be one
    _one_line_exit_2(capsys, ["sample", "--from-pretrained", "last.ckpt", "--start", "a"],
                     "checkpoint 'last.ckpt' is truncated")  # fmt: skip


def test_flags_a_pretrained_model_would_ignore_are_refused(gpt2_dir, text_file, capsys):
    """The model brings its scheme and sizes, so these flags would be silently ignored."""
    flow = ["flow", "--from-pretrained", gpt2_dir, "--text", text_file]
    _one_line_exit_2(capsys, [*flow, "--variant", "none", "--loss", "ones"],
                     "--variant, --loss cannot be combined with --from-pretrained")  # fmt: skip
    _one_line_exit_2(capsys, ["sample", "--from-pretrained", gpt2_dir, "--best"],
                     f"--best picks a run directory's best.ckpt; {gpt2_dir!r} is a Hugging Face "
                     "GPT-2 directory")  # fmt: skip
    assert main([*flow, "--seq", "8", "--batch", "2", "--seeds", "1"]) == 0  # these apply


def test_a_model_without_its_tokenizer_is_refused_by_every_command(gpt2_dir, text_file,
                                                                    tmp_path, capsys):  # fmt: skip
    os.remove(os.path.join(gpt2_dir, "tokenizer.json"))
    for args in (
        ["sample", "--from-pretrained", gpt2_dir, "--start", "a"],
        ["flow", "--from-pretrained", gpt2_dir, "--text", text_file],
        ["train", "--init-from", gpt2_dir, "--data", text_file, "--out-dir", str(tmp_path / "t")],
    ):
        _one_line_exit_2(capsys, args, f"{gpt2_dir!r} has no tokenizer (tokenizer.json")


def test_a_hub_name_offline_is_one_line_and_exit_2(tmp_path):
    """Never touches the network: HF_HUB_OFFLINE=1 and an empty cache."""
    src = str(pathlib.Path(resgrad.__file__).parents[1])  # this checkout's resgrad
    path = os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PYTHONPATH": path}
    p = subprocess.run(
        [sys.executable, "-m", "resgrad", "sample", "--from-pretrained", "gpt2", "--start", "Hi"],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1, p.stderr
    assert "'gpt2'" in p.stderr and "pass a local model directory" in p.stderr


def test_flow_of_a_pretrained_model_on_a_text(gpt2_dir, text_file, capsys):
    args = ["flow", "--from-pretrained", gpt2_dir, "--text", text_file, "--seq", "16",
            "--batch", "2", "--seeds", "2", "--format", "json"]  # fmt: skip
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    recs = data["records"] if isinstance(data, dict) else data
    stream = [r for r in recs if r["quantity"] == "stream_grad"]
    assert len(stream) == 3  # L + 1 boundaries of the 2-layer model
    assert all(r["init"] == "pretrained:tiny-gpt2" and r["n_seeds"] == 2 for r in stream)
    assert all(r["mean"] > 0 for r in stream)
    _one_line_exit_2(capsys, ["flow", "--from-pretrained", gpt2_dir], "needs --text")


def test_train_bpe_sample_and_export(tmp_path, text_file, capsys, monkeypatch):
    out = str(tmp_path / "run")
    args = ["train", "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "8",
            "--batch-size", "4", "--max-iters", "3", "--eval-interval", "3", "--eval-iters", "1",
            "--data", text_file, "--out-dir", out,
            "--tokenizer", "bpe", "--vocab-size", "270"]  # fmt: skip
    assert main(args) == 0
    ckpt = load_checkpoint(os.path.join(out, "last.ckpt"))
    assert ckpt.tokenizer["kind"] == "bpe"
    assert ckpt.config["model"]["vocab_size"] == 270
    tj = open(os.path.join(out, "tokenizer.json")).read()
    assert tj == ckpt.tokenizer["json"]  # saved with the run
    model, tok, _ = load_model(out)
    assert tok.vocab_size == 270 and model.cfg.vocab_size == 270
    capsys.readouterr()
    assert main(["sample", "--out-dir", out, "--start", "the quick", "--num-tokens", "5"]) == 0
    assert capsys.readouterr().out.startswith("the quick")
    assert main(["train", "--out-dir", out, "--resume", "--max-iters", "4"]) == 0  # resumes

    hf = str(tmp_path / "hf")
    assert main(["export", "--format", "hf", "--checkpoint", out, "--out-dir", hf]) == 0
    assert "tokenizer.json" in capsys.readouterr().out
    back = load_hf(hf)
    model, _, _ = load_model(out)
    for k in model.params:
        np.testing.assert_array_equal(back.params[k], model.params[k])
    assert open(os.path.join(hf, "tokenizer.json")).read() == tj
    assert sample_pretrained(hf, "the", 4, seed=1).startswith("the")


def test_a_character_level_run_exports_its_vocabulary(tmp_path, text_file, capsys):
    """The default run (characters) exported is a directory resgrad samples from, fine-tunes
    and reads back as the same characters; before, it was written without a tokenizer."""
    from tokenizers import Tokenizer

    from resgrad.train.data import CharTokenizer

    out, hf = str(tmp_path / "run"), str(tmp_path / "hf")
    args = ["train", "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "8",
            "--batch-size", "4", "--max-iters", "3", "--eval-interval", "3", "--eval-iters", "1",
            "--data", text_file, "--out-dir", out]  # fmt: skip
    assert main(args) == 0
    assert main(["export", "--checkpoint", out, "--out-dir", hf]) == 0
    assert "tokenizer.json" in capsys.readouterr().out
    run_model, run_tok, _ = load_model(out)
    model, tok = load_pretrained(hf)
    assert isinstance(tok, CharTokenizer) and tok.chars == run_tok.chars
    # what transformers reads (tokenizers' own file) gives the same ids, and joins them back
    raw = Tokenizer.from_file(os.path.join(hf, "tokenizer.json"))
    text = "the lazy dog.  jumps"
    assert raw.encode(text).ids == run_tok.encode(text).tolist()
    assert raw.decode(run_tok.encode(text).tolist()) == text
    ids = run_tok.encode("the ")  # the same model and tokenizer: the same sample
    same = [generate(m, ids[None], 6, np.random.default_rng(4)) for m in (run_model, model)]
    np.testing.assert_array_equal(same[0], same[1])
    with pytest.raises(ValueError, match="'Q'"):  # not in the vocabulary: named, not dropped
        sample_pretrained(hf, "Quick", 3)
    ft = ["train", "--init-from", hf, "--block-size", "8", "--batch-size", "4", "--max-iters",
          "2", "--eval-interval", "2", "--eval-iters", "1", "--data", text_file,
          "--out-dir", str(tmp_path / "ft")]  # fmt: skip
    assert main(ft) == 0  # fine-tunes, and records the characters as a char run does
    assert load_checkpoint(os.path.join(tmp_path, "ft", "last.ckpt")).tokenizer["kind"] == "char"


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--tokenizer", "bpe"], "needs a vocab_size"),
        (["--tokenizer", "bpe", "--vocab-size", "100"], "vocab_size must be an integer >= 256"),
        (["--vocab-size", "300"], "is for a BPE trained here"),
    ],
)
def test_bad_tokenizer_flags(tmp_path, text_file, capsys, extra, needle):
    args = ["train", "--data", text_file, "--out-dir", str(tmp_path / "r"), *extra]
    _one_line_exit_2(capsys, args, needle)


def test_an_unknown_tokenizer_is_a_flag_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--out-dir", str(tmp_path / "r"), "--tokenizer", "wordpiece"])
    assert e.value.code == 2
    assert "expected one of char, bpe, got 'wordpiece'" in capsys.readouterr().err


def test_export_best_of_a_checkpoint_file_is_refused(tmp_path, text_file, capsys):
    out = str(tmp_path / "run")
    args = ["train", "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "8",
            "--batch-size", "4", "--max-iters", "2", "--eval-interval", "2", "--eval-iters", "1",
            "--data", text_file, "--out-dir", out]  # fmt: skip
    assert main(args) == 0
    last = os.path.join(out, "last.ckpt")
    _one_line_exit_2(capsys, ["export", "--checkpoint", last, "--best", "--out-dir",
                              str(tmp_path / "hf")], "is a checkpoint file already")  # fmt: skip
    assert not os.path.exists(tmp_path / "hf")


def test_export_refuses_a_non_pre_ln_run(tmp_path, text_file, capsys):
    out = str(tmp_path / "run")
    args = ["train", "--n-layer", "1", "--n-head", "2", "--n-embd", "8", "--block-size", "8",
            "--batch-size", "2", "--max-iters", "1", "--eval-iters", "1", "--data", text_file,
            "--out-dir", out, "--variant", "post-ln"]  # fmt: skip
    assert main(args) == 0
    _one_line_exit_2(
        capsys, ["export", "--checkpoint", out, "--out-dir", str(tmp_path / "hf")],
        "cannot export variant 'post-ln' as GPT-2",
    )  # fmt: skip


def test_init_from_fine_tunes_a_pretrained_model(gpt2_dir, text_file, tmp_path, capsys):
    out = str(tmp_path / "ft")
    args = ["train", "--init-from", gpt2_dir, "--block-size", "16", "--batch-size", "2",
            "--max-iters", "4", "--eval-interval", "2", "--eval-iters", "1", "--lr", "1e-3",
            "--warmup-iters", "0", "--lr-decay-iters", "4", "--data", text_file,
            "--out-dir", out]  # fmt: skip
    assert main(args) == 0
    pre = load_hf(gpt2_dir)
    first = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))][0]
    tok = load_pretrained(gpt2_dir)[1]
    # the first evaluation is the pretrained model's own loss, not a fresh init's
    assert first["kind"] == "eval"
    steps = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    steps = [r for r in steps if r["kind"] == "iter"]
    assert all(len(r["layer_grad_norms"]) == 2 for r in steps)  # the model's 2 blocks, not 4
    model, _, ckpt = load_model(out)
    assert model.cfg.n_embd == 16 and model.cfg.vocab_size == pre.cfg.vocab_size
    assert ckpt.tokenizer["kind"] == "bpe" and ckpt.tokenizer["json"] == tok.to_json()
    assert any(not np.array_equal(model.params[k], pre.params[k]) for k in pre.params)
    assert main(["train", "--out-dir", out, "--resume", "--max-iters", "6"]) == 0
    big = ["train", "--init-from", gpt2_dir, "--block-size", "64", "--data", text_file,
           "--out-dir", str(tmp_path / "big")]  # fmt: skip
    _one_line_exit_2(capsys, big, "exceeds")
    # the architecture is the pretrained model's: a flag that would set it is refused, even
    # one typed at its default value (4 layers), rather than ignored
    clashes = [
        (["--n-layer", "4"], "--n-layer"),
        (["--variant", "post-ln", "--tokenizer", "char"], "--variant, --tokenizer"),
    ]
    for flags, named in clashes:
        arch = ["train", "--init-from", gpt2_dir, *flags, "--data", text_file,
                "--out-dir", str(tmp_path / "arch")]  # fmt: skip
        _one_line_exit_2(capsys, arch, f"{named} cannot be combined with --init-from")
    assert not os.path.exists(tmp_path / "arch")
    with pytest.raises(ValueError, match="n_embd=64 cannot be combined with init_from"):
        TrainConfig(init_from=gpt2_dir, n_embd=64)


def test_the_memory_check_sees_the_pretrained_model_not_the_flags_defaults(
    tmp_path, text_file, capsys, monkeypatch
):
    """--init-from: the estimate made before anything is read cannot know the model's
    shape; the trainer checks again once it is loaded. A model 4x wider than the flags'
    defaults, with memory for the defaults' run but not for its own, is refused."""
    from resgrad.perf import memory

    tok = train_bpe(TEXT, 280)
    wide = GPTConfig(vocab_size=tok.vocab_size, block_size=32, n_layer=2, n_head=2, n_embd=512)
    d = str(tmp_path / "wide")
    export_hf(GPT(wide, seed=0), d, tokenizer_json=tok.to_json())
    out = str(tmp_path / "run")
    args = ["train", "--init-from", d, "--block-size", "16", "--batch-size", "2",
            "--max-iters", "2", "--eval-interval", "2", "--eval-iters", "1",
            "--data", text_file, "--out-dir", out]  # fmt: skip
    cfg = TrainConfig(init_from=d, block_size=16, batch_size=2, data=text_file)
    need, flags_need = memory.train_bytes(cfg, wide), memory.train_bytes(cfg)
    assert flags_need < need  # what the check would have used without the model
    monkeypatch.setattr(memory, "available_bytes", lambda: (flags_need + need) // 2)
    err = _one_line_exit_2(capsys, args, "this training run")
    assert f"would need about {memory.format_bytes(need)}" in err, err
    assert not os.path.exists(os.path.join(out, "last.ckpt"))
    monkeypatch.setattr(memory, "available_bytes", lambda: need + 1)  # it fits
    assert main(args) == 0
    assert load_model(out)[0].cfg.n_embd == 512


def test_the_memory_estimate_uses_the_bpe_vocabulary():
    from resgrad.perf import memory

    chars, bpe = TrainConfig(), TrainConfig(tokenizer="bpe", vocab_size=50_000)
    # the logits and the embedding grow with V: 50,000 tokens, not the characters' 256
    assert memory.train_bytes(bpe) - memory.train_bytes(chars) > 4 * 4 * (50_000 - 256) * 128


# --------------------------------------------------------------------------- nanoGPT's vocabulary

CHARS_TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\nAll:\nSpeak, speak.\n"


@pytest.fixture
def nanogpt_run(torch, tmp_path):
    """A character-level nanoGPT run laid out as nanoGPT leaves it: out-shakespeare-char/
    ckpt.pt (train.py's dict, a compiled model's keys) beside data/shakespeare_char/meta.pkl
    (prepare.py's stoi/itos). Returns (root, ckpt path, meta path, nanoGPT's model, itos)."""
    from tests import nanogpt_reference

    chars = sorted(set(CHARS_TEXT))
    stoi, itos = {c: i for i, c in enumerate(chars)}, dict(enumerate(chars))
    root = tmp_path / "nanoGPT"
    (root / "data" / "shakespeare_char").mkdir(parents=True)
    meta = root / "data" / "shakespeare_char" / "meta.pkl"
    with open(meta, "wb") as f:
        pickle.dump({"vocab_size": len(chars), "itos": itos, "stoi": stoi}, f)
    args = dict(n_layer=2, n_head=2, n_embd=16, block_size=32, vocab_size=len(chars), bias=False)
    ref = nanogpt_reference.build(torch, **args, dtype=torch.float32, seed=4)
    (root / "out-shakespeare-char").mkdir()
    ckpt = root / "out-shakespeare-char" / "ckpt.pt"
    torch.save(nanogpt_reference.train_py_checkpoint(torch, ref, **args), ckpt)
    return root, ckpt, meta, ref, itos


def _nanogpt_greedy(torch, ref, stoi, itos, start, n):
    """nanoGPT's own model, greedy, decoded with its itos, as its sample.py decodes."""
    ids = [stoi[c] for c in start]
    with torch.no_grad():
        for _ in range(n):
            x = torch.tensor([ids])
            logits = ref(x, torch.zeros_like(x))[0]  # (1, T, V)
            ids.append(int(logits[0, -1].argmax()))
    return "".join(itos[i] for i in ids)


@pytest.mark.parametrize("where", ["nanogpt-root", "elsewhere"])
def test_a_character_level_nanogpt_run_samples_as_nanogpt_does(
    torch, nanogpt_run, tmp_path, capsys, monkeypatch, where
):
    """data/<config.dataset>/meta.pkl is found from nanoGPT's root (sample.py's rule) and from
    anywhere else (beside the checkpoint's directory); greedy text is nanoGPT's own."""
    root, ckpt, _, ref, itos = nanogpt_run
    monkeypatch.chdir(root if where == "nanogpt-root" else tmp_path)
    name = "out-shakespeare-char/ckpt.pt" if where == "nanogpt-root" else str(ckpt)
    args = ["sample", "--from-pretrained", name, "--start", "Speak", "--num-tokens", "20",
            "--top-k", "1"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    stoi = {c: i for i, c in itos.items()}
    assert out == _nanogpt_greedy(torch, ref, stoi, itos, "Speak", 20) + "\n"
    model, tok = load_pretrained(name)
    assert tok.chars == "".join(itos[i] for i in range(len(itos)))
    assert model.cfg.activation == "gelu-erf"


def test_meta_flag_and_the_error_without_a_vocabulary(torch, nanogpt_run, tmp_path, capsys,
                                                      monkeypatch):  # fmt: skip
    root, ckpt, meta, _, itos = nanogpt_run
    monkeypatch.chdir(tmp_path)
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(ckpt, lone / "ckpt.pt")  # no data/ anywhere near it
    err = _one_line_exit_2(capsys, ["sample", "--from-pretrained", str(lone / "ckpt.pt")],
                           "has no vocabulary")  # fmt: skip
    assert "data/shakespeare_char/meta.pkl" in err and "GPT-2's BPE" in err
    assert "--meta PATH" in err and "tokenizer.json beside the checkpoint" in err
    args = ["sample", "--from-pretrained", str(lone / "ckpt.pt"), "--meta", str(meta),
            "--start", "Speak", "--num-tokens", "5"]  # fmt: skip
    assert main(args) == 0
    assert set(capsys.readouterr().out.strip()) <= set(itos.values())
    # --meta wins over the dataset's: a meta.pkl of another vocabulary is refused by size
    small = tmp_path / "small.pkl"
    small.write_bytes(pickle.dumps({"itos": {0: "a", 1: "b"}, "stoi": {"a": 0, "b": 1}}))
    _one_line_exit_2(capsys, ["sample", "--from-pretrained", str(ckpt), "--meta", str(small)],
                     f"{str(small)!r} holds 2 characters but the model")  # fmt: skip
    _one_line_exit_2(capsys, ["sample", "--from-pretrained", str(ckpt), "--meta",
                              str(tmp_path / "nope.pkl")], "does not exist")  # fmt: skip
    _one_line_exit_2(capsys, ["sample", "--out-dir", str(tmp_path), "--meta", str(meta)],
                     "--meta cannot be combined with --out-dir")  # fmt: skip
    _one_line_exit_2(capsys, ["train", "--meta", str(meta), "--out-dir", str(tmp_path / "t")],
                     "is the vocabulary of a nanoGPT ckpt.pt given as init_from")  # fmt: skip
    assert not os.path.exists(tmp_path / "t")
    with pytest.raises(ValueError, match="is not one"):
        load_pretrained(str(root), meta=meta)  # a directory brings its own tokenizer


def test_a_meta_pkl_that_would_run_code_is_refused_through_the_cli(torch, nanogpt_run, tmp_path,
                                                                   capsys):  # fmt: skip
    root, ckpt, meta, _, _ = nanogpt_run
    marker = tmp_path / "pwned"

    class RunsCode:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    meta.write_bytes(pickle.dumps({"itos": {0: "a"}, "stoi": RunsCode()}))
    _one_line_exit_2(capsys, ["sample", "--from-pretrained", str(ckpt), "--start", "a"],
                     f"it names the global {os.system.__module__}.system")  # fmt: skip
    assert not marker.exists()


def test_flow_and_init_from_read_the_nanogpt_vocabulary(torch, nanogpt_run, tmp_path, capsys):
    root, ckpt, meta, _, itos = nanogpt_run
    text = tmp_path / "speech.txt"
    text.write_text(CHARS_TEXT * 20, encoding="utf-8")
    args = ["flow", "--from-pretrained", str(ckpt), "--text", str(text), "--seq", "16",
            "--batch", "2", "--seeds", "1", "--format", "json"]  # fmt: skip
    assert main(args) == 0
    capsys.readouterr()
    _one_line_exit_2(capsys, ["flow", "--meta", str(meta)], "--meta is the vocabulary of a "
                     "--from-pretrained ckpt.pt")  # fmt: skip
    out = tmp_path / "ft"
    args = ["train", "--init-from", str(ckpt), "--block-size", "16", "--batch-size", "2",
            "--max-iters", "2", "--eval-interval", "2", "--eval-iters", "1", "--warmup-iters",
            "0", "--lr-decay-iters", "2", "--data", str(text), "--out-dir", str(out)]  # fmt: skip
    assert main(args) == 0
    model, tok, ckpt_ = load_model(out)
    assert tok.chars == "".join(itos[i] for i in range(len(itos)))
    assert model.cfg.activation == "gelu-erf"  # the fine-tuned model keeps nanoGPT's GELU
    assert ckpt_.config["model"]["activation"] == "gelu-erf"
    assert main(["train", "--out-dir", str(out), "--resume", "--max-iters", "4"]) == 0
    assert load_model(out)[0].cfg.activation == "gelu-erf"  # resumed with it, too


def test_the_library_train_resolves_init_from_as_the_cli_does(text_file, tmp_path):
    """train(cfg) alone asks resgrad.train.source what init_from is: a resgrad run
    directory is refused by name, and nothing is written."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("")  # a run killed before its first checkpoint
    out = tmp_path / "ft"
    cfg = TrainConfig(init_from=str(run), block_size=8, batch_size=2, data=text_file,
                      out_dir=str(out), max_iters=1)  # fmt: skip
    with pytest.raises(ValueError, match=f"^init_from {str(run)!r} is a resgrad run directory"):
        train(cfg)
    assert not out.exists()
