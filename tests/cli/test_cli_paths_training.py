"""``resgrad paths RUN --every-checkpoint``: table, JSON and CSV are the library's numbers,
one per kept checkpoint; what it cannot read is one line on stderr and exit 2."""

import csv
import io
import json
import math
import os
import shutil

import pytest

from resgrad.cli import main
from resgrad.lab.paths import study as pathruns
from resgrad.train.data import read_text

FLAGS = ["--n-layer", "2", "--n-head", "2", "--n-embd", "16", "--block-size", "16",
         "--batch-size", "4", "--warmup-iters", "1", "--lr-decay-iters", "6", "--lr", "1e-2",
         "--eval-iters", "1", "--eval-interval", "3", "--max-iters", "6",
         "--threads", "1"]  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli_paths_training")
    text = d / "data.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40, encoding="utf-8")
    out = str(d / "run")
    assert main(["train", *FLAGS, "--keep-every", "3", "--data", str(text), "--out-dir", out]) == 0
    return out, str(text)


def test_table_json_csv_are_the_librarys(run, capsys):
    out, text = run
    capsys.readouterr()
    args = ["paths", out, "--every-checkpoint", "--text", text, "--seq", "8", "--batch", "2",
            "--seeds", "2", "--threads", "1"]  # fmt: skip
    lib = pathruns.run_checkpoint_paths(out, read_text(text), 8, 2, (0, 1))
    assert main([*args, "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [g["iteration"] for g in got] == [0, 3, 6]
    for g, r in zip(got, lib):
        assert g["n"] == 4 and g["seeds"] == 2 and g["range90"] == list(r.range90)
        assert [x["share_norm"] for x in g["rows"]] == pytest.approx(
            [x.share_norm for x in r.rows], rel=1e-12)  # fmt: skip
        assert g["mean_k"] == pytest.approx(r.mean_k, rel=1e-12)
    assert main([*args, "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 3 * 5  # 3 checkpoints x k = 0..4
    assert [int(r["count"]) for r in rows[:5]] == [1, 4, 6, 4, 1]
    assert float(rows[5]["share_proj"]) == pytest.approx(lib[1].rows[0].share_proj, rel=1e-12)
    assert main(args) == 0
    table = capsys.readouterr().out.splitlines()
    assert "n = 4 branches" in table[0] and "k=0 share" in table[1]
    assert [line.split()[0] for line in table[3:6]] == ["0", "3", "6"]
    for line, r in zip(table[3:6], lib):  # the paths of its 90% range, both ends counted
        lo, hi = r.range90
        assert line.endswith(f"{sum(math.comb(4, k) for k in range(lo, hi + 1)) / 16:.2%}")
    assert f"{lib[2].rows[0].share_norm:.4f}" in table[5]


@pytest.mark.parametrize(
    "extra, message",
    [
        ([], "keeps no checkpoint per step (ckpt-<iter>.ckpt); train it with --keep-every N"),
        (["--best"], "--best cannot be combined with --every-checkpoint"),
        (["--veit", "3"], "--veit cannot be combined with --every-checkpoint"),
        (["--plot", "f.png"], "--plot cannot be combined with --every-checkpoint"),
    ],
)
def test_what_it_cannot_read_is_one_line(run, tmp_path, capsys, extra, message):
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "last.ckpt").write_bytes(open(f"{run[0]}/last.ckpt", "rb").read())
    src = str(bare) if not extra else run[0]
    assert main(["paths", src, "--every-checkpoint", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_the_lesson_and_a_file_are_refused(run, capsys):
    assert main(["paths", "lesson", "--every-checkpoint"]) == 2
    assert "reads a training run's directory, not the lesson" in capsys.readouterr().err
    assert main(["paths", f"{run[0]}/last.ckpt", "--every-checkpoint"]) == 2
    assert "is not a directory" in capsys.readouterr().err


@pytest.fixture(scope="module")
def seeded_runs(run, tmp_path_factory):
    """The run above (seed 1337, train's default) and one more at seed 1, same settings."""
    out, text = run
    other = str(tmp_path_factory.mktemp("cli_paths_training_seed1") / "run")
    assert main(["train", *FLAGS, "--keep-every", "3", "--seed", "1", "--data", text,
                 "--out-dir", other]) == 0  # fmt: skip
    return [out, other], text


def test_several_runs_give_the_mean_and_std_over_the_runs(seeded_runs, capsys):
    (a, b), text = seeded_runs
    lib = [pathruns.run_checkpoint_paths(d, read_text(text), 8, 2, (0,)) for d in (a, b)]
    assert lib[0][0].rows[0].share_norm != lib[1][0].rows[0].share_norm  # two different runs
    capsys.readouterr()
    args = ["paths", a, b, "--every-checkpoint", "--text", text, "--seq", "8", "--batch", "2",
            "--seeds", "1", "--threads", "1"]  # fmt: skip
    assert main([*args, "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["runs"] == [a, b] and [r["iteration"] for r in got["rows"]] == [0, 3, 6]
    for r, x, y in zip(got["rows"], lib[0], lib[1]):
        s0 = [x.rows[0].share_norm, y.rows[0].share_norm]
        assert r["runs"] == 2
        assert r["share0"] == pytest.approx(sum(s0) / 2, rel=1e-12)
        assert r["share0_std"] == pytest.approx(abs(s0[0] - s0[1]) / 2**0.5, rel=1e-12)  # ddof=1
        assert r["mean_k"] == pytest.approx((x.mean_k + y.mean_k) / 2, rel=1e-12)
        assert r["ranges"] == [list(x.range90), list(y.range90)]
    assert main(args) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("2 runs") and "mean ± std over the runs" in table[0]
    assert f"{got['rows'][2]['share0']:.4f}" in table[5]


@pytest.mark.parametrize(
    "extra, suffix, message",
    [
        ([], "", "2 SOURCEs given; several are compared only with --every-checkpoint"),
        (["--every-checkpoint", "--seq", "8"], "", "is given twice; each run counts once"),
        (["--every-checkpoint", "--seq", "8"], "/", "is given twice; each run counts once"),
    ],
)
def test_several_sources_are_refused_where_they_mean_nothing(run, capsys, extra, suffix, message):
    out, _ = run
    capsys.readouterr()
    assert main(["paths", out, out + suffix, *extra]) == 2  # run/ is run
    io_ = capsys.readouterr()
    err = io_.err.strip()
    assert "\n" not in err and message in err and io_.out == ""


def _flags(**kw):
    """FLAGS with some values replaced: {"--n-embd": "32"}."""
    out = list(FLAGS)
    for flag, value in kw.items():
        out[out.index(flag) + 1] = value
    return out


@pytest.fixture(scope="module")
def unlike_runs(run, tmp_path_factory):
    """One checkpoint each, like ``run`` but for the scheme, the width or the text."""
    _, text = run
    d = tmp_path_factory.mktemp("cli_paths_unlike")
    digits = d / "digits.txt"
    digits.write_text("0123456789+-*/ " * 60, encoding="utf-8")
    out = {}
    for name, flags, data in [
        ("post-ln", [*_flags(**{"--max-iters": "0"}), "--variant", "post-ln"], text),
        ("wide", _flags(**{"--max-iters": "0", "--n-embd": "48"}), text),
        ("digits", _flags(**{"--max-iters": "0"}), str(digits)),
    ]:
        out[name] = str(d / name)
        assert main(["train", *flags, "--keep-every", "1", "--data", data, "--out-dir",
                     out[name]]) == 0  # fmt: skip
    return out


@pytest.mark.parametrize(
    "name, message",
    [
        ("post-ln", "has scheme post-ln, run '{run}' has pre-ln"),
        ("wide", "has width (n_embd) 48, run '{run}' has 16"),
        ("digits", "has vocabulary 15 characters ' *+-/0123456789', run '{run}' has 28 "
                   "characters ' .abcdefghijklmnopqrstuvwxyz'"),
    ],
)  # fmt: skip
def test_unlike_runs_are_refused_in_one_line_before_any_split(
    run, unlike_runs, capsys, monkeypatch, name, message
):
    def boom(*a, **k):
        raise AssertionError("split before the runs were compared")

    monkeypatch.setattr(pathruns, "model_splits", boom)
    out, text = run
    capsys.readouterr()
    assert main(["paths", out, unlike_runs[name], "--every-checkpoint", "--text", text,
                 "--seq", "8", "--batch", "2"]) == 2  # fmt: skip
    io_ = capsys.readouterr()
    assert io_.out == "" and io_.err.count("\n") == 1, io_
    assert io_.err.startswith(
        f"resgrad paths: error: run '{unlike_runs[name]}' "
        + message.format(run=out)
        + ": only runs of one model"
    ), io_.err


def test_every_checkpoint_checks_seq_and_the_budget_before_any_split(run, capsys, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("split before the checks")

    monkeypatch.setattr(pathruns, "model_splits", boom)
    out, text = run
    capsys.readouterr()
    assert main(["paths", out, "--every-checkpoint", "--text", text]) == 2
    assert capsys.readouterr().err == (
        "resgrad paths: error: --seq 64 (the default) is longer "
        "than the model's 16 positions; pass --seq 16 or less\n"
    )
    assert main(["paths", out, "--every-checkpoint", "--text", text, "--seq", "8",
                 "--seeds", "5", "--budget", "1e-6"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "1 run(s) (L=2 C=16) on 4 windows of 8 tokens" in err, err
    assert "(15 splits) would take about" in err and "pass --budget " in err  # 3 ckpts x 5 seeds


@pytest.mark.parametrize("extra, message", [
    (["--every-checkpoint", "--seq", "8"], "hold the same run (the same seed, settings and text"),
])  # fmt: skip
def test_a_copy_of_a_run_given_beside_it_is_the_same_run(run, tmp_path, capsys, extra, message):
    out, text = run
    copy = str(tmp_path / "copy")
    shutil.copytree(out, copy)  # cp -a: another path, the same run
    capsys.readouterr()
    assert main(["paths", out, copy, "--text", text, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err and repr(copy) in err


def test_a_kept_checkpoint_copied_over_another_is_refused_by_name(run, tmp_path, capsys):
    out, text = run
    copy = tmp_path / "swapped"
    shutil.copytree(out, copy)
    kept = sorted(p.name for p in copy.glob("ckpt-*.ckpt"))
    shutil.copy(copy / "ckpt-6.ckpt", copy / "ckpt-3.ckpt")  # row 3 would show step 6
    assert {"ckpt-3.ckpt", "ckpt-6.ckpt"} <= set(kept)
    capsys.readouterr()
    assert main(["paths", str(copy), "--every-checkpoint", "--text", text, "--seq", "8",
                 "--batch", "2", "--seeds", "1"]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "ckpt-3.ckpt' is named for iteration 3 but its iteration " \
        "field is 6" in err


def test_a_checkpoint_of_another_run_of_the_same_shape_is_refused_by_name(run, tmp_path, capsys):
    out, text = run
    other = str(tmp_path / "other")
    assert main(["train", *FLAGS, "--keep-every", "3", "--data", text, "--out-dir", other,
                 "--seed", "7"]) == 0  # fmt: skip
    mixed = tmp_path / "mixed"
    shutil.copytree(out, mixed)
    shutil.copy(os.path.join(other, "ckpt-3.ckpt"), mixed / "ckpt-3.ckpt")  # one shape, text
    capsys.readouterr()
    assert main(["paths", str(mixed), "--every-checkpoint", "--text", text, "--seq", "8",
                 "--batch", "2", "--seeds", "1"]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "ckpt-3.ckpt' belongs to another run" in err
    assert "seed 1337 against 7" in err
