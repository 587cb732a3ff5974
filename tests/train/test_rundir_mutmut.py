"""train.rundir against the class of bug each mutant stands for: the metrics read as UTF-8
whatever the locale, a damaged line skipped and named without ending the reading, the
steps a cut file lacks said as ranges; a killed keep_every write's temporary found; what
makes a run that run (every setting a resume may not change, the model, the text) and the
first field two runs differ in; a kept checkpoint refused when its iteration or its run is
another; the schedule of kept checkpoints that train keeps; and every problem of a run
directory, each naming its file. The run checked is a real one that train wrote, then
damaged as a copy, a kill or another run would (scripts/mutmut/run.py)."""

import copy
import dataclasses
import json
import os
import shutil
import subprocess
import sys

import pytest

from resgrad.formats.checkpoint import LAST, load_checkpoint, save_checkpoint
from resgrad.train.config import RESUMABLE, TrainConfig
from resgrad.train.rundir import (
    check_kept,
    foreign_files,
    holding_out_dir,
    identity_difference,
    kept_checkpoints,
    kept_name,
    kept_schedule,
    kept_temporaries,
    read_metrics,
    run_fingerprint,
    run_identity,
    run_problems,
)
from tests.kept_runs import TINY, train_runs

EV = {"train_loss": 2.0, "val_loss": 2.1}


def _write(tmp_path, lines: list) -> None:
    """metrics.jsonl of ``lines``: a record (dict) as JSON, a str or bytes as it is."""
    raw = b"".join(
        (json.dumps(x, ensure_ascii=False) + "\n").encode() if isinstance(x, dict)
        else x.encode() if isinstance(x, str) else x
        for x in lines
    )  # fmt: skip
    (tmp_path / "metrics.jsonl").write_bytes(raw)


def _it(i, **kw):
    return {"kind": "iter", "iter": i, "loss": 2.0 - i / 10, **kw}


# -- read_metrics


def test_a_damaged_line_in_the_middle_is_skipped_and_the_rest_is_read(tmp_path):
    _write(tmp_path, [_it(0), "{not json\n", _it(1), b'{"kind": "iter", \xff\xfe}\n', _it(2)])
    problems = []
    assert read_metrics(tmp_path, problems=problems) == [_it(0), _it(1), _it(2)]
    assert problems == [f"line {n} of metrics.jsonl is not JSON (skipped)" for n in (2, 4)]


def test_bytes_that_are_not_utf8_are_damage_not_an_error(tmp_path):
    _write(tmp_path, [_it(0), b"\xff\xfe\xfa\n", _it(1)])
    assert read_metrics(tmp_path) == [_it(0), _it(1)]  # no list of problems asked


def test_lines_that_are_json_but_no_record_are_skipped_whatever_they_hold(tmp_path):
    foreign = [[1, 2], 3, "text", None, {"kind": "note", "iter": 1, "loss": 1.0}]
    _write(tmp_path, [_it(0), *(json.dumps(x) + "\n" for x in foreign), _it(1)])
    problems = []
    assert read_metrics(tmp_path, problems=problems) == [_it(0), _it(1)]
    assert [p.split(" of ")[0] for p in problems] == [f"line {n}" for n in range(2, 7)]
    assert all(p.endswith("is not a resgrad record (skipped)") for p in problems)


def test_a_record_reads_back_as_written_whatever_the_locale(tmp_path):
    # the file is UTF-8 (train writes it so): a reader in a C locale reads the same record
    rec = _it(0, note="écart ±0.1 — ok")
    _write(tmp_path, [rec])
    assert read_metrics(tmp_path) == [rec]  # in this process's locale
    code = "import json, sys; from resgrad.train.rundir import read_metrics as r; " \
           "print(json.dumps(r(sys.argv[1])))"  # fmt: skip
    env = {**os.environ, "LC_ALL": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                       text=True, env=env, timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout) == [rec]


def test_upto_keeps_every_step_before_it_and_every_evaluation_at_it_wherever_they_lie(tmp_path):
    # the evaluation at 2 written after step 2's record, and a step after a later one
    lines = [_it(0), _it(1), _it(2), {"kind": "eval", "iter": 2, **EV}, _it(3),
             {"kind": "eval", "iter": 3, **EV}, _it(1, note="again")]  # fmt: skip
    _write(tmp_path, lines)
    got = read_metrics(tmp_path, upto=2)
    assert got == [_it(0), _it(1), {"kind": "eval", "iter": 2, **EV}, _it(1, note="again")]


@pytest.mark.parametrize(
    "have, upto, said",
    [
        ({0, 1, 3, 4}, 5, "2"),  # one step: not a range
        ({0, 3, 4}, 5, "1..2"),
        ({0, 2, 5}, 6, "1, 3..4"),  # two gaps, the second a range
        ({1, 3}, 5, "0, 2, 4"),  # three, the last ending at upto
        ({0}, 4, "1..3"),
        (set(), 1, "0"),
    ],
)
def test_the_steps_a_cut_file_lacks_are_said_as_ranges(tmp_path, have, upto, said):
    _write(tmp_path, [_it(i) for i in sorted(have)])
    problems = []
    read_metrics(tmp_path, upto=upto, problems=problems)
    assert problems == [f"metrics.jsonl holds no record of steps {said} (cut or damaged)"]


def test_a_file_with_every_step_lacks_none(tmp_path):
    _write(tmp_path, [_it(i) for i in range(4)])
    problems = []
    assert len(read_metrics(tmp_path, upto=4, problems=problems)) == 4
    assert len(read_metrics(tmp_path, upto=3, problems=problems)) == 3
    assert problems == []


# -- a killed keep_every write's temporary


def test_a_killed_kept_write_s_temporary_is_found_and_removed(tmp_path, monkeypatch):
    out = tmp_path / "run"
    out.mkdir()
    for name in (".ckpt-20.ckpt.ab12.tmp", ".ckpt-4.ckpt.zz.tmp", ".ckpt-4.ckpt.yy.tmp",
                 "ckpt-8.ckpt", ".notes.ckpt-3.ckpt.x.tmp"):  # fmt: skip
        (out / name).write_bytes(b"x")
    monkeypatch.chdir(tmp_path)  # the directory asked, not the current one
    assert kept_temporaries(out) == ["ckpt-20.ckpt", "ckpt-4.ckpt"]
    assert kept_temporaries(str(out)) == ["ckpt-20.ckpt", "ckpt-4.ckpt"]

    @holding_out_dir("last.ckpt")
    def run(cfg, log=None):
        return sorted(os.listdir(cfg.out_dir))

    said = []
    left = run(type("Cfg", (), {"out_dir": str(out), "data": None}), log=said.append)
    left = [n for n in left if not n.startswith(".resgrad.lock")]  # the lock's own files
    assert left == [".notes.ckpt-3.ckpt.x.tmp", "ckpt-8.ckpt"]  # ours gone, the rest kept
    assert said == [f"removed 3 temporary file(s) a killed run left in {str(out)!r}"]


def test_kept_name_is_what_kept_checkpoints_reads(tmp_path):
    import numpy as np

    for it in (0, 7, np.int64(12)):
        (tmp_path / kept_name(it)).write_bytes(b"x")
    assert [it for it, _ in kept_checkpoints(tmp_path)] == [0, 7, 12]
    assert kept_name(np.int64(12)) == "ckpt-12.ckpt"


# -- a real run, to check and to damage


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run of 7 steps keeping ckpt-0, -2, -4, -6 and -7 (its config: ``out_dir``, ...)."""

    (out,) = train_runs(tmp_path_factory.mktemp("rundir"), seeds=(1337,), max_iters=7,
                        eval_interval=3)  # fmt: skip
    return TrainConfig(**{**TINY, "max_iters": 7, "eval_interval": 3}, seed=1337, out_dir=out)


@pytest.fixture
def run(trained, tmp_path):
    """A fresh copy of the trained run's directory."""
    out = str(tmp_path / "run")
    shutil.copytree(trained.out_dir, out)
    return out


def _other_run(ckpt, **train_changes):
    """``ckpt`` as another run would have written it: the same, but its settings changed."""
    other = copy.deepcopy(ckpt)
    other.config["train"].update(train_changes)
    return other


def test_the_schedule_is_what_train_keeps(trained, run):
    kept = [it for it, _ in kept_checkpoints(run)]
    assert kept == kept_schedule(trained.max_iters, trained.keep_every) == [0, 2, 4, 6, 7]
    assert run_problems(run, kept) == []


@pytest.mark.parametrize(
    "max_iters, keep_every, kept",
    [
        (10, 0, []),  # 0: nothing kept
        (10, -1, []),
        (3, 1, [0, 1, 2, 3]),
        (10, 4, [0, 4, 8, 10]),  # every multiple, and the end
        (9, 4, [0, 4, 8, 9]),  # the multiple just before the end
        (7, 4, [0, 4, 7]),  # none past the end
        (8, 4, [0, 4, 8]),  # the end a multiple: once
        (0, 5, [0]),
    ],
)
def test_the_schedule_is_every_multiple_and_the_end(max_iters, keep_every, kept):
    assert kept_schedule(max_iters, keep_every) == kept


def test_a_run_s_identity_is_every_setting_a_resume_may_not_change(run):
    ckpt = load_checkpoint(os.path.join(run, LAST))
    ident = run_identity(ckpt)
    train_cfg = ckpt.config["train"]
    assert set(ident) == {"train", "model", "data_sha256"}
    assert ident["train"] == {k: v for k, v in train_cfg.items() if k not in RESUMABLE}
    assert ident["model"] == ckpt.config["model"]
    assert ident["data_sha256"] == ckpt.extra["data_sha256"]
    # a resume that trains longer, elsewhere, keeping otherwise: the same run
    resumed = _other_run(ckpt, max_iters=99, out_dir="/elsewhere", keep_every=5, resume=True,
                         eval_interval=9, eval_iters=4, data="/copy/of/data.txt")  # fmt: skip
    assert run_identity(resumed) == ident
    assert run_fingerprint(run_identity(resumed)) == run_fingerprint(ident)
    assert identity_difference(ident, run_identity(resumed)) is None
    # another seed: another run
    other = run_identity(_other_run(ckpt, seed=train_cfg["seed"] + 1))
    assert run_fingerprint(other) != run_fingerprint(ident)
    assert identity_difference(ident, other) == (
        f"seed {train_cfg['seed']} against {train_cfg['seed'] + 1}"
    )


def test_a_fingerprint_is_a_short_digest_of_the_identity_in_any_key_order():
    a = {"train": {"seed": 1, "lr": 0.1}, "model": {"n_layer": 2}, "data_sha256": "ab"}
    b = {"data_sha256": "ab", "model": {"n_layer": 2}, "train": {"lr": 0.1, "seed": 1}}
    fa = run_fingerprint(a)
    assert fa == run_fingerprint(b) and len(fa) == 16 and int(fa, 16) >= 0
    assert run_fingerprint({**a, "data_sha256": "ac"}) != fa
    assert run_fingerprint(None) is None


def test_a_checkpoint_train_did_not_write_has_no_identity(run):
    ckpt = load_checkpoint(os.path.join(run, LAST))
    assert run_identity(dataclasses.replace(ckpt, config={"model": ckpt.config["model"]})) is None
    assert run_identity(dataclasses.replace(ckpt, config={**ckpt.config, "train": {}})) is None
    assert run_identity(dataclasses.replace(ckpt, extra={})) is None  # no text recorded
    assert run_identity(dataclasses.replace(ckpt, extra={"data_sha256": ""})) is None


BASE = {"train": {"seed": 0, "lr": 0.1}, "model": {"n_layer": 2, "bias": True},
        "data_sha256": "0123456789abcdef" * 4}  # fmt: skip


@pytest.mark.parametrize(
    "change, said",
    [
        (
            {"data_sha256": "fedcba9876543210" * 4},
            "the text's SHA-256 0123456789ab against fedcba987654",
        ),  # 12 digits each; fmt: skip
        ({"train": {"seed": 1, "lr": 0.1}}, "seed 0 against 1"),
        ({"train": {"seed": 0}}, "lr 0.1 against None"),  # a setting one run lacks
        ({"train": {"seed": 0, "lr": 0.1, "shards": 2}}, "shards None against 2"),
        ({"model": {"n_layer": 4, "bias": True}}, "n_layer 2 against 4"),
        ({"model": {"n_layer": 2, "bias": True, "ln_eps": 1e-5}}, "ln_eps None against 1e-05"),
        ({"model": None}, "bias True against None"),
        ({"train": {"seed": 1, "lr": 0.2}}, "lr 0.1 against 0.2"),  # the first, in key order
    ],
)
def test_the_first_field_two_runs_differ_in_is_said(change, said):
    assert identity_difference(BASE, {**BASE, **change}) == said


def test_two_identities_of_one_run_differ_in_nothing():
    assert identity_difference(BASE, copy.deepcopy(BASE)) is None
    assert identity_difference({**BASE, "model": None}, {**BASE, "model": {}}) is None


def test_a_kept_checkpoint_named_for_another_iteration_is_refused_naming_both(run):
    kept = dict(kept_checkpoints(run))
    ckpt = load_checkpoint(kept[4])
    check_kept(kept[4], 4, ckpt)  # its own name: fine
    with pytest.raises(ValueError) as e:
        check_kept("ckpt-6.ckpt", 6, ckpt)
    assert str(e.value).startswith("'ckpt-6.ckpt' is named for iteration 6")
    assert "its iteration field is 4" in str(e.value)


def test_a_kept_checkpoint_of_another_run_is_refused_naming_the_field(run):
    kept = dict(kept_checkpoints(run))
    mine = load_checkpoint(kept[4])
    identity = run_identity(load_checkpoint(os.path.join(run, LAST)))
    check_kept(kept[4], 4, mine, identity)  # the same run
    other = _other_run(mine, seed=mine.config["train"]["seed"] + 1)
    with pytest.raises(ValueError) as e:
        check_kept(kept[4], 4, other, identity)
    assert str(e.value).startswith(f"{kept[4]!r} belongs to another run")
    assert str(e.value).endswith(f"seed {mine.config['train']['seed']} against "
                                 f"{mine.config['train']['seed'] + 1}")  # fmt: skip
    # where either identity is unknown, nothing is compared
    check_kept(kept[4], 4, other)
    check_kept(kept[4], 4, other, None)
    check_kept(kept[4], 4, dataclasses.replace(other, extra={}), identity)


# -- run_problems: every problem of a run directory, each naming its file


def _problems(run, trained):
    return run_problems(run, kept_schedule(trained.max_iters, trained.keep_every))


def test_no_run_yet_has_no_problem(tmp_path):
    assert run_problems(str(tmp_path / "nowhere"), [0, 2]) == []
    assert run_problems(str(tmp_path), [0, 2]) == []


def test_a_kept_checkpoint_without_last_is_said(run, trained):
    os.remove(os.path.join(run, LAST))
    for _, path in kept_checkpoints(run)[1:]:
        os.remove(path)
    first, last = kept_checkpoints(run)[0][1], os.path.join(run, LAST)
    assert _problems(run, trained) == [f"{first!r} is kept but {last!r} is gone"]


def test_an_unreadable_last_is_said_naming_it(run, trained):
    last = os.path.join(run, LAST)
    with open(last, "r+b") as f:
        f.truncate(os.path.getsize(last) // 2)
    got = _problems(run, trained)
    assert len(got) == 1 and repr(last) in got[0] and "truncated" in got[0]


def test_an_unreadable_kept_checkpoint_is_said_and_the_others_checked(run, trained):
    kept = dict(kept_checkpoints(run))
    with open(kept[2], "r+b") as f:
        f.truncate(100)
    shutil.copyfile(kept[0], kept[4])  # and a copy of another
    got = _problems(run, trained)
    assert len(got) == 2
    assert repr(kept[2]) in got[0] and "truncated" in got[0]
    assert got[1].startswith(f"{kept[4]!r} is named for iteration 4")


def test_a_kept_checkpoint_of_another_run_is_said(run, trained):
    kept = dict(kept_checkpoints(run))
    ckpt = load_checkpoint(kept[6])
    save_checkpoint(kept[6], _other_run(ckpt, lr=ckpt.config["train"]["lr"] * 2))
    got = _problems(run, trained)
    assert len(got) == 1
    assert got[0].startswith(f"{kept[6]!r} belongs to another run")
    assert f"lr {ckpt.config['train']['lr']!r} against" in got[0]


def test_a_checkpoint_kept_off_the_schedule_is_said(run, trained):
    kept = dict(kept_checkpoints(run))
    assert run_problems(run, [0, 2, 6, 7]) == [
        f"{kept[4]!r} is not on the run's schedule of kept checkpoints"
    ]


def test_iterations_the_schedule_keeps_up_to_last_s_and_nothing_kept_are_said(run, trained):
    kept = dict(kept_checkpoints(run))
    os.remove(kept[2])
    os.remove(kept[7])  # last.ckpt's own iteration
    last = load_checkpoint(os.path.join(run, LAST)).iteration
    assert last == 7
    # iteration 8 of the schedule is past last.ckpt's: not yet due
    assert run_problems(run, [0, 2, 4, 6, 7, 8]) == [
        f"{run!r} kept no checkpoint at iteration(s) 2, 7, which its schedule keeps"
    ]


# -- files a fresh run would replace: only what no run wrote is named


def _files(d, **files):
    for name, data in files.items():
        (d / name.replace("_", ".")).write_bytes(data if isinstance(data, bytes) else data.encode())


RECORD = json.dumps({"kind": "iter", "iter": 0, "loss": 2.5}) + "\n"


def test_foreign_files_names_each_kind_of_file_no_run_wrote(tmp_path):
    assert foreign_files(tmp_path) == []
    _files(tmp_path, metrics_jsonl="my own notes\n", loss_png="x", best_ckpt="y")
    assert foreign_files(tmp_path) == ["metrics.jsonl", "loss.png", "best.ckpt"]


def test_empty_files_and_a_runs_own_log_are_not_named(tmp_path):
    _files(tmp_path, metrics_jsonl="", loss_png="", best_ckpt="")  # nothing to lose
    assert foreign_files(tmp_path) == []
    _files(tmp_path, loss_png="x")  # one byte is something: the files after metrics are read
    assert foreign_files(tmp_path) == ["loss.png"]
    _files(tmp_path, metrics_jsonl=RECORD)  # resgrad's records, every line
    assert foreign_files(tmp_path) == ["loss.png"]
    _files(tmp_path, metrics_jsonl=RECORD + "a line of mine\n")
    assert foreign_files(tmp_path) == ["metrics.jsonl", "loss.png"]


@pytest.mark.parametrize("header, started", [
    ({"format": "resgrad-dynamics"}, True),
    ({"format": "something else"}, False),
    ({"FORMAT": "resgrad-dynamics"}, False),
    (["resgrad-dynamics"], False),
    ("not json", False),
])  # fmt: skip
def test_a_directory_a_run_started_in_holds_only_its_files(tmp_path, header, started):
    _files(tmp_path, metrics_jsonl="mine\n", loss_png="x")
    body = header if isinstance(header, str) else json.dumps(header)
    (tmp_path / "dynamics.json").write_text(body, encoding="utf-8")
    assert foreign_files(tmp_path) == ([] if started else ["metrics.jsonl", "loss.png"])


def test_the_dynamics_header_is_read_as_utf8_whatever_the_locale(tmp_path):
    _files(tmp_path, loss_png="x")
    header = {"format": "resgrad-dynamics", "config": {"data": "naïve.txt"}}
    (tmp_path / "dynamics.json").write_text(json.dumps(header, ensure_ascii=False),
                                            encoding="utf-8")  # fmt: skip
    assert foreign_files(tmp_path) == []  # here (and so the test is the function's too)
    code = ("import sys; from resgrad.train.rundir import foreign_files; "
            "print(foreign_files(sys.argv[1]))")  # fmt: skip
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0",
           "PYTHONUTF8": "0"}  # fmt: skip
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                       text=True, env=env)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"  # a run started here: nothing is foreign
