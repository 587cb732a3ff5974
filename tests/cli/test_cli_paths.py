"""``resgrad paths`` on the lesson, a resgrad run directory, a Hugging Face directory and a
nanoGPT ckpt.pt: the numbers are the library's, bad input is one line and exit 2."""

import csv
import dataclasses
import io
import json
import math
import pickle

import numpy as np
import pytest

import resgrad.lab.paths.study as paths_study  # where the studies call their work: spied
from resgrad.cli import main
from resgrad.formats.checkpoint import Checkpoint, save_checkpoint
from resgrad.formats.hf import export_hf
from resgrad.lab import paths
from resgrad.lab.lesson import StackConfig
from resgrad.lab.paths import chains as pathchains
from resgrad.lab.study import budget
from resgrad.nn.model import GPT, GPTConfig
from resgrad.train.bpe import char_tokenizer_json
from resgrad.train.data import CharTokenizer

CHARS = "abcdefghij klmnopqrs"  # 20 tokens
TEXT = "abc def ghij klm nopq rs " * 40
CFG = GPTConfig(vocab_size=len(CHARS), block_size=16, n_layer=2, n_head=2, n_embd=8, init="xavier")


@pytest.fixture
def text_file(tmp_path):
    p = tmp_path / "text.txt"
    p.write_text(TEXT, encoding="utf-8")
    return str(p)


def _json(capsys, args):
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_lesson_table_json_csv_are_the_librarys(capsys):
    sp = paths.split(pathchains.stack_chain(StackConfig(depths=(6,))))
    out = _json(capsys, ["paths", "lesson", "--depth", "6", "--format", "json", "--threads", "1"])
    assert out["n"] == 6 and out["seeds"] == 1
    b0 = out["boundaries"][0]
    np.testing.assert_allclose(b0["norms"], sp.norms[0], rtol=1e-12)
    np.testing.assert_allclose(b0["share_proj"], sp.share_proj()[0], rtol=1e-12)
    assert len(out["boundaries"]) == 7 and len(b0["norms"]) == 7
    assert out["range90"] == list(paths.effective_range(sp.share_norm()[0]))
    assert main(["paths", "lesson", "--depth", "6", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [int(r["count"]) for r in rows] == [1, 6, 15, 20, 15, 6, 1]
    assert main(["paths", "lesson", "--depth", "6", "--veit", "5"]) == 0
    table = capsys.readouterr().out
    assert "C(n,k) x mean" in table and "90% of the gradient's norm lies on paths of k = " in table
    assert main(["paths", "lesson", "--depth", "4", "--plain", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["boundaries"][0]["share_proj"][-1] == 1.0


def test_a_run_directory_is_split_on_the_seeds_windows(tmp_path, text_file, capsys):
    m = GPT(CFG, seed=1, dtype=np.float32)
    (tmp_path / "run").mkdir()
    ckpt = Checkpoint(params=m.params, optimizer={}, iteration=0, vocab=CHARS,
                      config={"model": {**CFG.__dict__}, "train": {}})  # fmt: skip
    save_checkpoint(tmp_path / "run" / "last.ckpt", ckpt)
    args = ["paths", str(tmp_path / "run"), "--text", text_file, "--seq", "8", "--batch", "2",
            "--seeds", "2", "--format", "json"]  # fmt: skip
    out = _json(capsys, args)
    ids = CharTokenizer(CHARS).encode(TEXT)
    splits = paths.model_splits(m, ids, seq=8, batch=2, seeds=(0, 1))
    assert out["n"] == 4 and out["seeds"] == 2
    for i, b in enumerate(out["boundaries"]):
        np.testing.assert_allclose(b["norms"], np.mean([s.norms[i] for s in splits], axis=0),
                                   rtol=1e-10)  # fmt: skip
        np.testing.assert_allclose(np.sum(b["share_proj"]), 1.0, rtol=1e-12)
    assert any(r["share_proj_std"] > 0 for r in out["rows"])  # two batches differ


def test_an_ln_scaling_run_is_split_with_its_own_power(tmp_path, text_file, capsys):
    """The run's recorded ln_scaling_power reaches the split: the numbers are those of the
    model at that power, not of the same weights at the paper's 0.5."""
    cfg = dataclasses.replace(CFG, variant="ln-scaling", ln_scaling_power=0.3)
    m = GPT(cfg, seed=2, dtype=np.float32)
    (tmp_path / "run").mkdir()
    ckpt = Checkpoint(params=m.params, optimizer={}, iteration=0, vocab=CHARS,
                      config={"model": {**cfg.__dict__}, "train": {}})  # fmt: skip
    save_checkpoint(tmp_path / "run" / "last.ckpt", ckpt)
    out = _json(capsys, ["paths", str(tmp_path / "run"), "--text", text_file, "--seq", "8",
                         "--batch", "2", "--seeds", "1", "--format", "json"])  # fmt: skip
    assert "(ln-scaling, L=2, C=8)" in out["source"]
    ids = CharTokenizer(CHARS).encode(TEXT)
    (want,) = paths.model_splits(m, ids, seq=8, batch=2, seeds=(0,))
    half = GPT.from_params(dataclasses.replace(cfg, ln_scaling_power=0.5), m.params)
    (other,) = paths.model_splits(half, ids, seq=8, batch=2, seeds=(0,))
    np.testing.assert_allclose(out["boundaries"][0]["norms"], want.norms[0], rtol=1e-10)
    assert np.abs(other.norms[0] - want.norms[0]).max() > 1e-3 * want.norms[0].max()


def test_a_hugging_face_directory(tmp_path, text_file, capsys):
    d = tmp_path / "hf"
    export_hf(GPT(CFG, seed=0), d, tokenizer_json=char_tokenizer_json(CHARS))
    assert main(["paths", str(d), "--text", text_file, "--seq", "8", "--batch", "2"]) == 0
    out = capsys.readouterr().out
    assert "n = 4 branches" in out and "the parts sum to the gradient to" in out
    # the built-in corpus holds characters this model's vocabulary lacks: one line, exit 2
    assert main(["paths", str(d), "--seq", "8", "--batch", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("resgrad paths: error: ") and err.count("\n") == 1, err


def test_a_nanogpt_ckpt(torch, tmp_path, capsys):
    from tests import nanogpt_reference

    chars = sorted(set(TEXT))
    root = tmp_path / "nanoGPT"
    (root / "data" / "shakespeare_char").mkdir(parents=True)
    with open(root / "data" / "shakespeare_char" / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars)),
                     "stoi": {c: i for i, c in enumerate(chars)}}, f)  # fmt: skip
    kw = dict(n_layer=2, n_head=2, n_embd=16, block_size=32, vocab_size=len(chars), bias=False)
    ref = nanogpt_reference.build(torch, **kw, dtype=torch.float32, seed=4)
    (root / "out").mkdir()
    torch.save(nanogpt_reference.train_py_checkpoint(torch, ref, **kw), root / "out" / "ckpt.pt")
    text = tmp_path / "t.txt"
    text.write_text(TEXT)
    out = _json(capsys, ["paths", str(root / "out" / "ckpt.pt"), "--text", str(text), "--seq",
                         "8", "--batch", "2", "--format", "json"])  # fmt: skip
    assert out["n"] == 4
    np.testing.assert_allclose(sum(out["boundaries"][0]["share_proj"]), 1.0, rtol=1e-12)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["paths", "lesson", "--text", "x"], "--text cannot be combined with lesson"),
        (["paths", "no/such/dir", "--depth", "3"], "--depth cannot be combined with a model"),
        (["paths", "lesson", "--seeds", "1,1"], "--seeds"),
        (["paths", "lesson", "--depth", "0"], "--depth"),
        (["paths", "lesson", "--veit", "0"], "--veit"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, args, needle):
    try:
        code = main(args)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err, err


# ----------------------------------------------------------------- plots, seeds, memory


def test_plot_writes_the_librarys_figure_and_a_bad_extension_fails_before_any_work(
    tmp_path, capsys, monkeypatch
):
    out = tmp_path / "paths.png"
    assert main(["paths", "lesson", "--depth", "5", "--seeds", "42,43", "--veit", "3",
                 "--plot", str(out)]) == 0  # fmt: skip
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()

    def boom(*a, **k):
        raise AssertionError("the split ran before the extension was checked")

    monkeypatch.setattr(paths_study, "stack_chain", boom)
    assert main(["paths", "lesson", "--plot", str(tmp_path / "paths.pdf")]) == 2
    err = capsys.readouterr().err
    assert "paths.pdf" in err and ".png or .svg" in err and err.count("\n") == 1, err
    assert not (tmp_path / "paths.pdf").exists()


def test_one_seed_prints_no_spread_and_several_print_mean_and_std(capsys):
    assert main(["paths", "lesson", "--depth", "4"]) == 0
    one = capsys.readouterr().out
    assert "±" not in one and "0.0000 ± 0.0000" not in one and "seeds: 1;" in one
    assert main(["paths", "lesson", "--depth", "4", "--seeds", "42,43,44"]) == 0
    three = capsys.readouterr().out
    assert "seeds: 3 (mean ± std)" in three and three.count("±") >= 2 * 5


def test_a_model_defaults_to_three_batches_and_veit_runs_on_each(tmp_path, text_file, capsys):
    d = tmp_path / "hf"
    m = GPT(CFG, seed=0)
    export_hf(m, d, tokenizer_json=char_tokenizer_json(CHARS))
    out = _json(capsys, ["paths", str(d), "--text", text_file, "--seq", "8", "--batch", "2",
                         "--veit", "3", "--format", "json"])  # fmt: skip
    assert out["seeds"] == 3
    ids = CharTokenizer(CHARS).encode(TEXT)
    veits = paths.model_veit(m, ids, 8, 2, (0, 1, 2), 3)
    assert out["veit"]["seeds"] == 3 and out["veit"]["samples"] == 3
    np.testing.assert_allclose(out["veit"]["mean"], np.mean([v.mean for v in veits], axis=0),
                               rtol=1e-10)  # fmt: skip
    total_std = np.std([v.total for v in veits], axis=0)  # (K,) the spread over the batches
    np.testing.assert_allclose(out["veit"]["total_std"], total_std, rtol=1e-10, atol=1e-300)


def test_seeds_help_names_the_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["paths", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default for a model: 3, mean ± std over the batches of seeds 0, 1, 2" in text


@pytest.mark.parametrize(
    "extra", [["lesson", "--depth", "100000000"], ["HF", "--batch", "100000000"]]
)
def test_an_absurd_size_is_refused_in_one_line_before_allocating(
    tmp_path, text_file, capsys, monkeypatch, extra
):
    if extra[0] == "HF":
        extra[0] = str(tmp_path / "hf")
        export_hf(GPT(CFG, seed=0), extra[0], tokenizer_json=char_tokenizer_json(CHARS))
        extra += ["--text", text_file, "--seq", "8"]

    def boom(*a, **k):
        raise AssertionError("allocated before the estimate")

    monkeypatch.setattr(paths_study, "stack_chain", boom)
    monkeypatch.setattr(paths_study, "model_splits", boom)
    assert main(["paths", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("resgrad paths: ") and "would need about" in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_directory_transformers_saved_splits_into_parts_that_sum_to_torchs_gradient(
    tmp_path, capsys
):
    """A GPT-2 written by transformers' own save_pretrained: the parts of dL/dx_0 add up to
    the gradient torch autograd takes through transformers' model, and the CLI reads it."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from resgrad.formats.hf import load_hf
    from resgrad.train.bpe import char_tokenizer_json

    cfg = transformers.GPT2Config(vocab_size=len(CHARS), n_positions=16, n_embd=32, n_layer=2,
                                  n_head=4, bos_token_id=None, eos_token_id=None,
                                  attn_implementation="eager")  # fmt: skip
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(cfg).to(torch.float64).eval()
    d = tmp_path / "gpt2"
    hf.save_pretrained(d)
    (d / "tokenizer.json").write_text(char_tokenizer_json(CHARS), encoding="utf-8")

    ids = np.random.default_rng(3).integers(0, len(CHARS), (2, 9))  # (B, T + 1)
    sp = paths.split(pathchains.gpt_chain(load_hf(d, dtype=np.float64), ids[:, :-1], ids[:, 1:]),
                     keep=True)  # fmt: skip
    whole = sum(sp.parts[0].values())  # (B, T, C): every k's part at x_0, added
    e = hf.transformer.wte(torch.tensor(ids[:, :-1])).detach().requires_grad_()  # (B, T, C)
    logits = hf(inputs_embeds=e).logits  # x_0 = e + wpe, so dL/de = dL/dx_0
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, len(CHARS)), torch.tensor(ids[:, 1:]).reshape(-1)
    )
    loss.backward()
    ref = e.grad.numpy()
    assert np.linalg.norm(whole - ref) <= 1e-10 * np.linalg.norm(ref)
    assert (sp.norms[0] > 1e-3 * sp.norms[0].max()).sum() >= 3  # a real split, not one k

    text = tmp_path / "t.txt"
    text.write_text(CHARS * 20, encoding="utf-8")
    capsys.readouterr()
    assert main(["paths", str(d), "--text", str(text), "--seq", "8", "--batch", "2",
                 "--seeds", "1", "--format", "json", "--threads", "1"]) == 0  # fmt: skip
    got = json.loads(capsys.readouterr().out)
    assert got["n"] == 4


# ----------------------------------------------------------------- bounds, before the work


def _boom(*a, **k):
    raise AssertionError("the work started before the check")


def _hf(tmp_path):
    d = tmp_path / "hf"
    export_hf(GPT(CFG, seed=0), d, tokenizer_json=char_tokenizer_json(CHARS))
    return str(d)


@pytest.mark.parametrize("source", ["lesson", "HF"])
def test_a_veit_count_of_days_is_refused_at_once_saying_what_it_would_take(
    tmp_path, text_file, capsys, monkeypatch, source
):
    extra = ["lesson"] if source == "lesson" else [_hf(tmp_path), "--text", text_file,
                                                    "--seq", "8"]  # fmt: skip
    for name in ("stack_chain", "model_splits", "model_veit", "veit_sample", "split"):
        monkeypatch.setattr(paths_study, name, _boom)  # no work may start before the refusal
    assert main(["paths", *extra, "--veit", "1000000000"]) == 2
    io_ = capsys.readouterr()
    err = io_.err
    assert io_.out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("resgrad paths: error: ") and " days (" in err, err
    assert "and --veit 1,000,000,000 sampled paths per k) would take about " in err, err
    assert "more than the budget of 10.0 min" in err
    assert "pass --budget " in err


def test_the_budget_a_refusal_names_is_enough(capsys):
    assert main(["paths", "lesson", "--depth", "6", "--veit", "40", "--budget", "1e-9"]) == 2
    err = capsys.readouterr().err
    assert "(861 branch VJPs; an estimate)" in err, err  # the split's 21 + 40 x 21 (Veit's)
    need = err.split("pass --budget ")[1].split()[0]
    assert main(["paths", "lesson", "--depth", "6", "--veit", "40", "--budget", need]) == 0
    assert "C(n,k) x mean" in capsys.readouterr().out


def test_every_count_that_multiplies_the_work_is_in_the_estimate(capsys, monkeypatch):
    seen = []
    real = budget.require_time

    def spy(work, budget, what, more):
        seen.append(work.vjps)
        real(work, budget, what, more)

    import resgrad.lab.paths.study as paths_study  # where the study asks for its time

    monkeypatch.setattr(paths_study, "require_time", spy)
    for extra in ([], ["--seeds", "3"], ["--veit", "2"], ["--depth", "8"]):
        assert main(["paths", "lesson", "--depth", "6", *extra, "--format", "csv"]) == 0
    capsys.readouterr()
    assert seen == [21, 3 * 21, 21 + 2 * 21, 36]


def test_a_long_job_shows_a_progress_bar_on_a_terminal_only(capsys, monkeypatch):
    import io
    import sys

    monkeypatch.setattr(budget, "PROGRESS_AFTER_S", 0.0)
    assert main(["paths", "lesson", "--depth", "6", "--veit", "5"]) == 0
    err = capsys.readouterr().err  # stderr is no terminal here: one line, no bar
    assert err.startswith("resgrad paths: about ") and err.count("\n") == 1 and "%" not in err

    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    assert main(["paths", "lesson", "--depth", "6", "--veit", "5"]) == 0
    bar = tty.getvalue()
    assert "paths (about " in bar and "VJP" in bar and "100%" in bar, bar
    monkeypatch.setattr(budget, "PROGRESS_AFTER_S", 1e9)
    tty.seek(0)
    tty.truncate()
    assert main(["paths", "lesson", "--depth", "6", "--veit", "5"]) == 0
    assert tty.getvalue() == ""  # a short job: no bar


@pytest.mark.parametrize(
    "extra, message",
    [
        ([], "--seq 64 (the default) is longer than the model's 16 positions; pass --seq 16 or "
             "less"),
        (["--seq", "17"], "--seq 17 is longer than the model's 16 positions; pass --seq 16 or "
                          "less"),
        (["--seq=20"], "--seq 20 is longer than the model's 16 positions"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("kind", ["HF", "run"])
def test_a_seq_longer_than_the_model_names_the_flag_and_whether_it_was_typed(
    tmp_path, text_file, capsys, monkeypatch, extra, message, kind
):
    if kind == "HF":
        src = _hf(tmp_path)
    else:
        src = str(tmp_path / "run")
        (tmp_path / "run").mkdir()
        ckpt = Checkpoint(params=GPT(CFG, seed=1).params, optimizer={}, iteration=0, vocab=CHARS,
                          config={"model": {**CFG.__dict__}, "train": {}})  # fmt: skip
        save_checkpoint(tmp_path / "run" / "last.ckpt", ckpt)
    monkeypatch.setattr(paths_study, "model_splits", _boom)
    assert main(["paths", src, "--text", text_file, *extra]) == 2
    err = capsys.readouterr().err
    assert err == f"resgrad paths: error: {message}" + ("\n" if extra != ["--seq=20"] else
                                                       "; pass --seq 16 or less\n")  # fmt: skip


def test_a_seq_of_exactly_the_models_positions_is_allowed(tmp_path, text_file, capsys):
    out = _json(capsys, ["paths", _hf(tmp_path), "--text", text_file, "--seq", "16",
                         "--seeds", "1", "--format", "json"])  # fmt: skip
    assert "T=16" in out["source"]


def test_veits_samples_count_in_the_memory_estimate(tmp_path, text_file, capsys, monkeypatch):
    from resgrad.perf import memory

    seen = []

    def require(nbytes, what, available=None):
        seen.append(nbytes)
        raise memory.NotEnoughMemory(f"{what}: stop here")

    monkeypatch.setattr(memory, "require", require)
    d = _hf(tmp_path)
    for source in ([d, "--text", text_file, "--seq", "8"], ["lesson", "--depth", "6"]):
        for veit in ([], ["--veit", "1000"]):
            assert main(["paths", *source, *veit]) == 2
            assert "stop here" in capsys.readouterr().err
    assert seen[1] - seen[0] == seen[3] - seen[2] == 8 * 1000  # one float per sample
    assert seen[0] == memory.paths_bytes(CFG, 8, 4)


# ----------------------------------------------------------------- the plot's destination


@pytest.mark.parametrize(
    "dest, message",
    [
        ("nodir/x.png", "cannot write '{d}/nodir/x.png': directory '{d}/nodir' does not exist"),
        ("file.txt/x.png", "cannot write '{d}/file.txt/x.png': '{d}/file.txt' is a file, not a "
                           "directory"),
        ("adir.png", "cannot write '{d}/adir.png': it is a directory; give a file name"),
        ("/proc/x.png", "cannot write '/proc/x.png': directory '/proc' is not writable"),
    ],
)  # fmt: skip
def test_a_plot_that_cannot_be_written_is_refused_before_any_work(
    tmp_path, capsys, monkeypatch, dest, message
):
    (tmp_path / "file.txt").write_text("keep")
    (tmp_path / "adir.png").mkdir()
    dest = dest if dest.startswith("/") else f"{tmp_path}/{dest}"
    monkeypatch.setattr(paths_study, "stack_chain", _boom)
    assert main(["paths", "lesson", "--depth", "4", "--plot", dest]) == 2
    io_ = capsys.readouterr()
    assert io_.out == "" and io_.err.count("\n") == 1, io_
    assert io_.err.startswith("resgrad paths: error: " + message.format(d=tmp_path)), io_.err
    assert (tmp_path / "file.txt").read_text() == "keep"


class ClosedPipe(io.TextIOBase):
    """A stdout whose reader has left (``| head``): every write is a BrokenPipeError."""

    def write(self, s):
        raise BrokenPipeError(32, "Broken pipe")


@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_a_plot_is_written_even_when_the_reader_of_stdout_has_left(tmp_path, monkeypatch, fmt):
    import sys

    out = tmp_path / "p.png"
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["paths", "lesson", "--depth", "5", "--veit", "2", "--plot", str(out),
                 "--format", fmt]) == 0  # fmt: skip
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_table_counts_the_paths_of_its_range_with_both_ends(capsys):
    out = _json(capsys, ["paths", "lesson", "--depth", "8", "--format", "json"])
    lo, hi = out["range90"]
    assert lo < hi
    assert main(["paths", "lesson", "--depth", "8"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("90% of"))
    inside = sum(math.comb(8, k) for k in range(lo, hi + 1))
    assert line.endswith(f"k = {lo}..{hi} ({inside} of 256 paths)"), line
