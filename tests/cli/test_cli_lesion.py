"""``resgrad lesion`` on the lesson, a resgrad run directory, a Hugging Face directory and a
nanoGPT ckpt.pt, one run or several, through training: the numbers are the library's, bad
input is one line and exit 2, before any work."""

import csv
import dataclasses
import io
import json
import pickle
import shutil

import numpy as np
import pytest

import resgrad.lab.lesion.study as lesion_study  # where the study calls its work: spied
from resgrad.cli import main
from resgrad.formats.checkpoint import Checkpoint, save_checkpoint
from resgrad.formats.hf import export_hf
from resgrad.lab.lesion import interventions as lesion
from resgrad.lab.lesion import measure as lesionstudy
from resgrad.lab.lesion import runs as lesionruns
from resgrad.lab.lesion import tables as lesiontables
from resgrad.nn.model import GPT, GPTConfig
from resgrad.train.bpe import char_tokenizer_json
from resgrad.train.data import CharTokenizer

CHARS = "abcdefghij klmnopqrs"  # 20 tokens
TEXT = "abc def ghij klm nopq rs " * 40
CFG = GPTConfig(vocab_size=len(CHARS), block_size=16, n_layer=3, n_head=2, n_embd=8, init="xavier")
SMALL = ["--seq", "8", "--batch", "2", "--threads", "1"]


@pytest.fixture
def text_file(tmp_path):
    p = tmp_path / "text.txt"
    p.write_text(TEXT, encoding="utf-8")
    return str(p)


def _run_dir(path, seed=1, cfg=CFG, iteration=0, name="last.ckpt"):
    m = GPT(cfg, seed=seed, dtype=np.float32)
    path.mkdir(exist_ok=True)
    ckpt = Checkpoint(params=m.params, optimizer={}, iteration=iteration, vocab=CHARS,
                      config={"model": {**cfg.__dict__}, "train": {}})  # fmt: skip
    save_checkpoint(path / name, ckpt)
    return m


def _json(capsys, args):
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def _fails(capsys, args, needle):
    try:
        code = main(args)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert needle in err, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_the_lesson_table_json_and_csv_are_the_librarys(capsys):
    res = lesionstudy.lesson_study(6, lesion.plan(6, samples=3, lesson=True))
    table = lesiontables.rows(res)
    out = _json(capsys, ["lesion", "lesson", "--depth", "6", "--samples", "3", "--format",
                         "json"])  # fmt: skip
    assert out["metrics"] == ["change"] and out["seeds"] == [42] and out["runs"] == 1
    assert [r["name"] for r in out["rows"]] == [r.name for r in table]
    np.testing.assert_allclose([r["change"] for r in out["rows"]],
                               [r.get("change")[0] for r in table], rtol=1e-12)  # fmt: skip
    assert main(["lesion", "lesson", "--depth", "6", "--plain", "--what", "block", "--format",
                 "csv"]) == 0  # fmt: skip
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert list(rows[0]) == lesiontables.row_keys(lesionstudy.LESSON_METRICS)
    assert [r["name"] for r in rows] == ["intact"] + [f"block {i}" for i in range(6)]
    assert all(float(r["change"]) > 0.5 for r in rows[1:])  # no skip: every deletion is felt
    assert main(["lesion", "lesson", "--depth", "6", "--samples", "3"]) == 0
    printed = capsys.readouterr()
    assert "the lesson's stack (x + tanh(x W), L=6, C=16)" in printed.out
    assert "delete k=6" in printed.out and "pairs k=3" in printed.out
    assert printed.err == ""  # no progress bar off a terminal


def test_a_run_directory_is_studied_on_the_seeds_windows(tmp_path, text_file, capsys):
    m = _run_dir(tmp_path / "run")
    out = _json(capsys, ["lesion", str(tmp_path / "run"), "--text", text_file, *SMALL,
                         "--seeds", "2", "--samples", "2", "--format", "json"])  # fmt: skip
    ids = CharTokenizer(CHARS).encode(TEXT)
    lesions = lesion.plan(3, samples=2)
    want = lesiontables.rows(lesionstudy.model_study(m, ids, lesions, 8, 2, (0, 1)))
    assert [r["name"] for r in out["rows"]] == [r.name for r in want]
    for got, r in zip(out["rows"], want):
        for metric in lesionstudy.METRICS:
            assert got[metric] == pytest.approx(r.get(metric)[0], rel=1e-12, abs=1e-15)
            assert got[f"{metric}_std"] == pytest.approx(r.get(metric)[1], rel=1e-12, abs=1e-15)
    assert "run (pre-ln, L=3, C=8), T=8 B=2, 2 window seed(s)" in out["source"]
    assert out["block_passes"] < out["full_passes"]
    assert main(["lesion", str(tmp_path / "run"), "--text", text_file, *SMALL, "--what",
                 "block,swap", "--blocks", "1"]) == 0  # fmt: skip
    table = capsys.readouterr().out
    assert "block 1 " in table and "swap 1,2" in table and "block 0" not in table
    assert "ΔCE" in table and "mean ± std over 3 seed(s)" in table


def test_an_ln_scaling_run_is_studied_with_its_own_power(tmp_path, text_file, capsys):
    cfg = dataclasses.replace(CFG, variant="ln-scaling", ln_scaling_power=0.3)
    m = _run_dir(tmp_path / "run", cfg=cfg)
    out = _json(capsys, ["lesion", str(tmp_path / "run"), "--text", text_file, *SMALL,
                         "--what", "block,swap", "--format", "json"])  # fmt: skip
    assert "run (ln-scaling, L=3, C=8)" in out["source"]
    ids = CharTokenizer(CHARS).encode(TEXT)
    lesions = lesion.plan(3, what=("block", "swap"))
    want = lesiontables.rows(lesionstudy.model_study(m, ids, lesions, 8, 2, (0, 1, 2)))
    assert [r["name"] for r in out["rows"]] == [r.name for r in want]
    for got, r in zip(out["rows"], want):
        assert got["ce"] == pytest.approx(r.get("ce")[0], rel=1e-12)


def test_a_hugging_face_directory_and_a_nanogpt_ckpt(torch, tmp_path, text_file, capsys):
    from tests import nanogpt_reference

    d = tmp_path / "hf"
    export_hf(GPT(CFG, seed=0), d, tokenizer_json=char_tokenizer_json(CHARS))
    out = _json(capsys, ["lesion", str(d), "--text", text_file, *SMALL, "--what", "attn,mlp",
                         "--format", "json"])  # fmt: skip
    assert [r["name"] for r in out["rows"]][:3] == ["intact", "attn 0", "attn 1"]
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
    out = _json(capsys, ["lesion", str(root / "out" / "ckpt.pt"), "--text", text_file, *SMALL,
                         "--what", "block,swap", "--format", "json"])  # fmt: skip
    assert [r["name"] for r in out["rows"]] == ["intact", "block 0", "block 1", "swap 0,1"]
    assert out["rows"][0]["agree"] == 1.0 and out["rows"][1]["kl"] > 0


def test_several_runs_give_the_mean_and_std_over_them(tmp_path, text_file, capsys):
    ms = [_run_dir(tmp_path / f"seed{s}", seed=s) for s in range(3)]
    dirs = [str(tmp_path / f"seed{s}") for s in range(3)]
    out = _json(capsys, ["lesion", *dirs, "--text", text_file, *SMALL, "--what", "block",
                         "--seeds", "2", "--format", "json"])  # fmt: skip
    ids = CharTokenizer(CHARS).encode(TEXT)
    lesions = lesion.plan(3, what=("block",))
    res = [lesionstudy.model_study(m, ids, lesions, 8, 2, (0, 1)) for m in ms]
    want = lesiontables.across_runs(res, ["seed0", "seed1", "seed2"])
    assert out["runs"] == 3 and out["source"].startswith("3 runs (seed0, seed1, seed2)")
    for got, r in zip(out["rows"], want):
        assert got["dce"] == pytest.approx(r.get("dce")[0], rel=1e-12, abs=1e-15)
        assert got["dce_std"] == pytest.approx(r.get("dce")[1], rel=1e-12, abs=1e-15)
    assert out["rows"][1]["dce_std"] > 0
    assert main(["lesion", *dirs, "--text", text_file, *SMALL, "--what", "block"]) == 0
    assert "mean ± std over 3 runs" in capsys.readouterr().out
    wide = GPTConfig(**{**CFG.__dict__, "n_embd": 16})
    _run_dir(tmp_path / "wide", cfg=wide)
    _fails(capsys, ["lesion", dirs[0], str(tmp_path / "wide"), "--text", text_file, *SMALL],
           "run 'wide' has width (n_embd) 16, run 'seed0' has 8")  # fmt: skip
    deep = GPTConfig(**{**CFG.__dict__, "n_layer": 4})
    _run_dir(tmp_path / "deep", cfg=deep)
    _fails(capsys, ["lesion", dirs[0], str(tmp_path / "deep"), "--text", text_file, *SMALL],
           "run 'deep' has depth (n_layer) 4, run 'seed0' has 3")  # fmt: skip


def test_every_checkpoint_one_run_and_several(tmp_path, text_file, capsys):
    for run, seed in (("a", 0), ("b", 5)):
        for it in (0, 20):
            _run_dir(tmp_path / run, seed=seed + it, iteration=it, name=f"ckpt-{it}.ckpt")
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    args = ["lesion", "--every-checkpoint", "--text", text_file, *SMALL, "--what", "block,swap"]
    out = _json(capsys, [*args, a, "--format", "json"])
    assert [s["iteration"] for s in out["steps"]] == [0, 20] and out["runs"] == ["a"]
    got = lesionruns.run_checkpoint_lesions(a, TEXT, 8, 2, (0, 1, 2), what=("block", "swap"))
    for step, c in zip(out["steps"], got):
        want = lesiontables.rows(c.result)
        assert [r["kl"] for r in step["rows"]] == pytest.approx([r.get("kl")[0] for r in want])
    assert main([*args, a, b]) == 0
    table = capsys.readouterr().out
    assert "mean ± std over 2 runs" in table and table.count("\n") >= 5
    lines = [ln for ln in table.splitlines() if ln.strip().startswith(("0 |", "20 |"))]
    assert len(lines) == 2
    assert main([*args, a, b, "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {r["iteration"] for r in rows} == {"0", "20"} and rows[0]["name"] == "intact"
    _fails(capsys, [*args, a, "--plot", str(tmp_path / "p.png")],
           "--plot cannot be combined with --every-checkpoint")  # fmt: skip
    _fails(capsys, [*args, "lesson"], "--every-checkpoint reads a training run's directory")


def test_plot_writes_the_librarys_figure_and_a_bad_extension_fails_before_any_work(
    tmp_path, capsys, monkeypatch
):
    png = tmp_path / "lesion.png"
    assert main(["lesion", "lesson", "--depth", "5", "--samples", "2", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()

    def boom(*a, **k):
        raise AssertionError("the study ran before the plot's path was refused")

    monkeypatch.setattr(lesion_study, "lesson_study", boom)
    _fails(capsys, ["lesion", "lesson", "--plot", str(tmp_path / "lesion.jpg")], "jpg")


@pytest.mark.parametrize(
    "args, needle",
    [
        (["lesson", "--k", "21"], "k 21 is out of range; expected an integer in 1..20"),
        (["lesson", "--what", "pairs", "--k", "11"], "k 11 pairs swap 22 blocks"),
        (["lesson", "--samples", "0"], "--samples: expected a positive integer, got '0'"),
        (["lesson", "--samples", "10001"], "--samples 10,001 is out of range; expected 1..10,000"),
        (["lesson", "--sample-seed", "-1"], "--sample-seed -1 is out of range"),
        (["lesson", "--sample-seed", str(2**32)], "--sample-seed 4294967296 is out of range"),
        (["lesson", "--blocks", "20"], "block 20 does not exist: the model has blocks 0..19"),
        (["lesson", "--what", "swap", "--blocks", "19"], "swap 19 needs blocks 19 and 20"),
        (["lesson", "--depth", "1", "--what", "swap"], "a swap needs two blocks; the model has"),
        (["lesson", "--what", "attn"], "unknown intervention 'attn' (the lesson's stack has"),
        (["lesson", "--text", "x"], "--text cannot be combined with lesson"),
        (["lesson", "--seeds", "1,1"], "--seeds"),
        (["lesson", "lesson"], "SOURCE 'lesson' is given twice"),
        (["lesson", "--depth", "5", "--budget", "1e-9"], "pass --budget"),
        (["lesson", "--depth", "100000"], "the study would hold 1,699,991 interventions"),
        (["no/such/dir", "--depth", "3"], "--depth cannot be combined with a model"),
        (["no/such/dir"], "'no/such/dir' does not exist"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, args, needle):
    _fails(capsys, ["lesion", *args], needle)


def test_a_model_refusals_come_before_any_work(tmp_path, text_file, capsys, monkeypatch):
    run = str(tmp_path / "run")
    _run_dir(tmp_path / "run")

    def boom(*a, **k):
        raise AssertionError("the study ran before the refusal")

    monkeypatch.setattr(lesion_study, "model_study", boom)
    _fails(capsys, ["lesion", run, "--text", text_file, "--k", "4"],
           "k 4 is out of range; expected an integer in 1..3")  # fmt: skip
    _fails(capsys, ["lesion", run, "--text", text_file, "--blocks", "3"],
           "block 3 does not exist: the model has blocks 0..2")  # fmt: skip
    _fails(capsys, ["lesion", run, "--text", text_file], "--seq 64 (the default) is longer than "
           "the model's 16 positions")  # fmt: skip
    short = tmp_path / "short.txt"
    short.write_text("abc de", encoding="utf-8")
    monkeypatch.undo()
    _fails(capsys, ["lesion", run, "--text", str(short), "--seq", "8"],
           "the text is 6 tokens; --seq 8 needs at least 9")  # fmt: skip
    _fails(capsys, ["lesion", run, "--text", text_file, "--seq", "8", "--best"], "--best")
    _fails(capsys, ["lesion", run, "--text", text_file, "--seq", "8", "--budget", "1e-6"],
           "more than the budget of 0 s; pass --budget")  # fmt: skip


def test_a_model_too_large_is_refused_before_its_weights_are_read(
    tmp_path, text_file, capsys, monkeypatch
):
    d = tmp_path / "hf"
    export_hf(GPT(CFG, seed=0), d, tokenizer_json=char_tokenizer_json(CHARS))
    from resgrad.perf import memory

    monkeypatch.setattr(memory, "available_bytes", lambda: 1000)
    import resgrad.formats.hf as hf

    def boom(*a, **k):
        raise AssertionError("weights read before the estimate")

    monkeypatch.setattr(hf, "read_hf_tensors", boom)
    err = _fails(capsys, ["lesion", str(d), "--text", text_file, *SMALL], "would need about")
    assert "a lesion study of this model (L=3 C=8 V=20)" in err


def test_a_copy_of_a_model_given_beside_it_is_refused_before_any_study(
    tmp_path, text_file, capsys, monkeypatch
):
    _run_dir(tmp_path / "a", seed=1)
    _run_dir(tmp_path / "b", seed=2)
    shutil.copytree(tmp_path / "a", tmp_path / "a-copy")

    def boom(*a, **k):
        raise AssertionError("a model was studied before the copy was refused")

    monkeypatch.setattr(lesionstudy, "model_study", boom)
    err = _fails(capsys, ["lesion", str(tmp_path / "a"), str(tmp_path / "b"),
                          str(tmp_path / "a-copy"), "--text", text_file, *SMALL],
                 "holds the same weights as")  # fmt: skip
    assert f"SOURCE {str(tmp_path / 'a-copy')!r}" in err
