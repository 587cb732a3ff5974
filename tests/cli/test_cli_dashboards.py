"""``resgrad train --log-to``, ``resgrad experiment --log-to`` and ``resgrad dynamics --export``
through the real command: what they print, the files they write, and their one-line errors."""

import os
import sys

import pytest

pytest.importorskip("tensorboardX")
pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing import event_accumulator as ea  # noqa: E402

from resgrad.cli import main  # noqa: E402
from resgrad.train.dynamics import read_dynamics  # noqa: E402

TINY = ["--n-layer", "2", "--n-head", "2", "--n-embd", "16", "--block-size", "8",
        "--batch-size", "4", "--max-iters", "6", "--eval-interval", "3",
        "--eval-iters", "1"]  # fmt: skip


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _train(tmp_path, capsys, text_file, *more, name="run"):
    out = tmp_path / name
    code, stdout, err = _run(capsys, "train", *TINY, "--data", text_file, "--out-dir", out, *more)
    assert code == 0, err
    return str(out), stdout


def _losses(logdir):
    acc = ea.EventAccumulator(str(logdir), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return [e.value for e in acc.Scalars("train/loss")]


def test_train_log_to_tensorboard_says_where_and_writes_the_events(tmp_path, capsys, text_file):
    out, stdout = _train(tmp_path, capsys, text_file, "--log-to", "tensorboard", "--hist-every",
                         "2")  # fmt: skip
    tb = os.path.join(out, "tb")
    assert stdout.splitlines()[-1] == f"TensorBoard: tensorboard --logdir {tb}"
    assert os.listdir(tb) == ["run"]  # the run, named after its directory
    assert _losses(os.path.join(tb, "run")) == read_dynamics(out)["loss"].tolist()
    acc = ea.EventAccumulator(os.path.join(tb, "run"), size_guidance={ea.HISTOGRAMS: 0})
    acc.Reload()
    assert [e.step for e in acc.Histograms("gradients/wte")] == [0, 2, 4]


def test_log_dir_puts_the_events_elsewhere(tmp_path, capsys, text_file):
    logdir = str(tmp_path / "board" / "mine")
    out, stdout = _train(tmp_path, capsys, text_file, "--log-to", "tensorboard", "--log-dir",
                         logdir)  # fmt: skip
    assert not os.path.exists(os.path.join(out, "tb"))
    assert len(_losses(os.path.join(logdir, "run"))) == 6
    assert stdout.splitlines()[-1].endswith(logdir)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--hist-every", "3"], "resgrad train: error: --hist-every sets how a dashboard logs; "
         "it needs --log-to"),
        (["--log-dir", "x", "--run-name", "y"], "resgrad train: error: --log-dir, --run-name sets"),
        (["--log-to", "tensorbord"], "argument --log-to: unknown name 'tensorbord'; expected one "
         "of tensorboard, wandb, trackio"),
        (["--log-to", "wandb,wandb"], "argument --log-to: expected distinct values"),
        (["--log-to", "tensorboard", "--hist-every", "-1"], "argument --hist-every"),
        (["--log-to", "tensorboard", "--project", "p"], "resgrad train: error: --project cannot "
         "be combined with --log-to tensorboard: it is a wandb or trackio project"),
        (["--log-to", "wandb", "--log-dir", "d"], "resgrad train: error: --log-dir cannot be "
         "combined with --log-to wandb: it is TensorBoard's log directory"),
        (["--log-to", "trackio", "--log-dir=d"], "--log-dir cannot be combined with --log-to "
         "trackio"),
        (["--log-to", "tensorboard", "--run-name", "a/b"], "resgrad train: error: run name "
         "'a/b' cannot name TensorBoard's run directory"),
    ],
)  # fmt: skip
def test_bad_dashboard_flags_are_one_line_and_write_nothing(
    tmp_path, capsys, text_file, argv, message
):
    try:  # argparse's own errors exit from the parser (a tiny run, should one start)
        code, _, err = _run(capsys, "train", *TINY, "--data", text_file, "--out-dir",
                            tmp_path / "run", *argv)  # fmt: skip
    except SystemExit as e:
        code, err = e.code, capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not os.path.exists(tmp_path / "run")


def test_a_missing_extra_is_one_line_before_anything_is_written(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # its import: ModuleNotFoundError('wandb')
    code, _, err = _run(capsys, "train", "--out-dir", tmp_path / "run", "--log-to", "wandb")
    assert code == 2
    assert err.strip() == ("resgrad train: error: --log-to wandb needs wandb, which is not "
                           'installed; pip install "resgrad[wandb]"')  # fmt: skip
    assert not os.path.exists(tmp_path / "run")


@pytest.mark.parametrize("kind, module", [("wandb", "wandb"), ("trackio", "trackio"),
                                          ("tensorboard", "tensorboardX")])  # fmt: skip
def test_an_extra_that_fails_to_import_is_one_line_with_its_error(
    tmp_path, capsys, monkeypatch, kind, module
):
    """Installed but broken (a protobuf clash): one line quoting the error, no traceback, and
    never "not installed"."""
    fake = tmp_path / "site"
    fake.mkdir()
    (fake / f"{module}.py").write_text(
        "raise ImportError(\"cannot import name 'builder' from 'google.protobuf.internal' "
        '(/usr/lib/python3/google/protobuf/internal/__init__.py)")\n'
    )
    monkeypatch.syspath_prepend(str(fake))
    monkeypatch.delitem(sys.modules, module, raising=False)
    code, _, err = _run(capsys, "train", "--out-dir", tmp_path / "run", "--log-to", kind)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.strip() == (
        f"resgrad train: error: --log-to {kind} needs {module}, which is installed but fails to "
        "import: ImportError: cannot import name 'builder' from 'google.protobuf.internal' "
        "(/usr/lib/python3/google/protobuf/internal/__init__.py)"
    )
    assert not os.path.exists(tmp_path / "run")


@pytest.mark.parametrize("where", ["file", "under a file", "unwritable"])
def test_a_log_dir_that_cannot_be_one_is_refused_before_training(
    tmp_path, capsys, monkeypatch, text_file, where
):
    f = tmp_path / "notes.txt"
    f.write_text("x")
    logdir = {"file": f, "under a file": f / "tb", "unwritable": tmp_path / "ro" / "tb"}[where]
    if where == "unwritable":  # what a read-only directory answers (root ignores mode bits)
        import tempfile

        real = tempfile.mkdtemp

        def mkdtemp(*a, dir=None, **kw):
            if dir is not None and os.path.abspath(dir) == str(tmp_path):
                raise PermissionError(13, "Permission denied")
            return real(*a, dir=dir, **kw)

        monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    code, stdout, err = _run(capsys, "train", *TINY, "--data", text_file, "--out-dir",
                             tmp_path / "run", "--log-to", "tensorboard", "--log-dir",
                             logdir)  # fmt: skip
    assert code == 2 and len(err.strip().splitlines()) == 1 and stdout == "", err
    want = {"file": f"--log-dir '{f}' is a file; expected a directory (or a new name)",
            "under a file": f"--log-dir '{f}/tb' is under '{f}', which is a file",
            "unwritable": f"--log-dir '{logdir}': '{tmp_path}' cannot be written (Permission "
                          "denied); expected a directory you can write to"}[where]  # fmt: skip
    assert err.startswith(f"resgrad train: error: {want}")
    assert not os.path.exists(tmp_path / "run")  # before any work
    assert sorted(os.listdir(tmp_path)) == sorted(["notes.txt", "data.txt"])


def test_dynamics_export_writes_once_and_refuses_to_overwrite(tmp_path, capsys, text_file):
    out, _ = _train(tmp_path, capsys, text_file)
    tb = os.path.join(out, "tb")
    code, stdout, _ = _run(capsys, "dynamics", out, "--export", "tensorboard")
    assert code == 0
    assert stdout.splitlines() == [f"wrote {tb}/run: {_events(tb)} (6 steps and 3 evaluations)",
                                   f"TensorBoard: tensorboard --logdir {tb}"]  # fmt: skip
    assert _losses(os.path.join(tb, "run")) == read_dynamics(out)["loss"].tolist()
    assert not os.path.exists(os.path.join(out, "dynamics.png"))  # an export draws nothing
    code, _, err = _run(capsys, "dynamics", out, "--export", "tensorboard")
    assert code == 2 and "already holds files" in err and "--force" in err
    code, _, err = _run(capsys, "dynamics", out, "--export", "tensorboard", "--force")
    assert code == 0, err
    code, _, _ = _run(capsys, "dynamics", out, "--export", "tensorboard", tmp_path / "other")
    assert code == 0 and len(_losses(tmp_path / "other" / "run")) == 6


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--export", "csv"], "--export takes tensorboard and an optional DIR, got 'csv'"),
        (["--export", "tensorboard", "a", "b"], "got 'tensorboard a b'"),
        (["--force"], "--force cannot be combined with no --export"),
        (["--export", "tensorboard", "--out", "x.png"], "--out cannot be combined with --export"),
    ],
)
def test_bad_export_flags_are_one_line(tmp_path, capsys, text_file, argv, message):
    out, _ = _train(tmp_path, capsys, text_file)
    code, _, err = _run(capsys, "dynamics", out, *argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not os.path.exists(os.path.join(out, "tb"))


def test_experiment_cells_export_and_log_one_run_each(tmp_path, capsys, text_file):
    grid = ["--variants", "pre-ln,post-ln", "--depths", "1", "--lrs", "0.001", "--warmups", "0",
            "--seeds", "1", "--n-embd", "16", "--n-head", "2", "--block-size", "8",
            "--batch-size", "4", "--max-iters", "4", "--eval-interval", "2", "--eval-iters",
            "1", "--data", text_file, "--jobs", "1"]  # fmt: skip
    exp = str(tmp_path / "exp")
    code, stdout, err = _run(capsys, "experiment", "warmup", *grid, "--out-dir", exp,
                             "--log-to", "tensorboard")  # fmt: skip
    assert code == 0, err
    cells = sorted(os.listdir(os.path.join(exp, "runs")))
    assert cells == ["post-ln_L1_lr0.001_w0_s0", "pre-ln_L1_lr0.001_w0_s0"]
    assert stdout.splitlines()[-1] == f"TensorBoard: tensorboard --logdir {exp}/tb"
    assert sorted(os.listdir(os.path.join(exp, "tb"))) == cells
    code, stdout, err = _run(capsys, "dynamics", exp, "--export", "tensorboard",
                             tmp_path / "old")  # fmt: skip
    assert code == 0, err
    assert sorted(os.listdir(tmp_path / "old")) == cells
    for c in cells:  # the export of an old experiment equals what its cells logged live
        assert _losses(str(tmp_path / "old" / c)) == _losses(os.path.join(exp, "tb", c))
    before = _files(tmp_path)
    for target in (exp, os.path.join(exp, "runs"), os.path.join(exp, "runs", cells[0]), tmp_path):
        code, _, err = _run(capsys, "dynamics", exp, "--export", "tensorboard", target, "--force")
        assert code == 2 and "which the export reads" in err and len(err.splitlines()) == 1
    assert _files(tmp_path) == before  # nothing of the experiment, nor beside it, deleted
    code, _, err = _run(capsys, "dynamics", exp, "--export", "tensorboard", "--force")
    assert code == 0, err  # its live logs: event files only, replaced by the export
    assert sorted(os.listdir(os.path.join(exp, "tb"))) == cells


def _events(logdir):
    """What ``wrote`` lists of an exported run: its event file."""
    return ", ".join(sorted(os.listdir(os.path.join(logdir, "run"))))


def _files(root):
    """Every file under ``root`` and its bytes."""
    return {os.path.relpath(os.path.join(d, n), root): open(os.path.join(d, n), "rb").read()
            for d, _, names in os.walk(root) for n in names}  # fmt: skip


def test_dynamics_export_force_never_deletes_the_run_it_reads_nor_what_is_beside_it(
    tmp_path, capsys, text_file
):
    """--force into RUN_DIR itself, or its parent, once deleted the checkpoints, the records
    and the files beside the run: it is refused, and nothing is touched."""
    out, _ = _train(tmp_path, capsys, text_file)
    (tmp_path / "thesis.tex").write_text("months of work")
    before = _files(tmp_path)
    for target, what in ((out, "is"), (tmp_path, "holds"), (f"{out}/", "is"),
                         (os.path.join(out, "..", "run"), "is")):  # fmt: skip
        code, stdout, err = _run(capsys, "dynamics", out, "--export", "tensorboard", target,
                                 "--force")  # fmt: skip
        assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1, err
        assert err.startswith(f"resgrad dynamics: error: '{target}' {what} '{out}', which the "
                              "export reads")  # fmt: skip
    assert _files(tmp_path) == before
    notes = tmp_path / "board"
    notes.mkdir()
    (notes / "todo.txt").write_text("mine")
    code, _, err = _run(capsys, "dynamics", out, "--export", "tensorboard", notes, "--force")
    assert code == 2 and "holds 'todo.txt', which is not a TensorBoard event file" in err
    assert (notes / "todo.txt").read_text() == "mine"


def test_hf_export_force_never_replaces_the_checkpoint_it_reads(tmp_path, capsys, text_file):
    """``export --force`` into the run directory, its parent, or the directory of a
    checkpoint file (even one named as a model's file) is refused; nothing is deleted."""
    out, _ = _train(tmp_path, capsys, text_file)
    solo = tmp_path / "solo"
    solo.mkdir()
    ckpt = solo / "model.safetensors"  # a resgrad checkpoint, named as an HF model's weights
    ckpt.write_bytes(open(os.path.join(out, "last.ckpt"), "rb").read())
    before = _files(tmp_path)
    for source, target in ((out, out), (out, tmp_path), (ckpt, solo), (ckpt, tmp_path)):
        code, _, err = _run(capsys, "export", "--checkpoint", source, "--out-dir", target,
                            "--force")  # fmt: skip
        assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert _files(tmp_path) == before
    code, _, err = _run(capsys, "export", "--checkpoint", ckpt, "--out-dir", tmp_path / "hf")
    assert code == 0, err


def test_dynamics_export_says_the_records_damage_as_drawing_does(tmp_path, capsys, text_file):
    out, _ = _train(tmp_path, capsys, text_file)
    path = os.path.join(out, "dynamics.bin")
    size = read_dynamics(out).records.dtype.itemsize
    with open(path, "r+b") as f:  # record 4 of 6: a step no run writes
        f.seek(3 * size)
        f.write((2**62).to_bytes(8, "little"))
    code, _, drawn = _run(capsys, "dynamics", out, "--out", tmp_path / "d.png")
    assert code == 0
    code, stdout, err = _run(capsys, "dynamics", out, "--export", "tensorboard")
    assert code == 0
    line = f"resgrad dynamics: {out}: dynamics.bin: record 4 of 6 is damaged"
    assert drawn.startswith(line) and err == drawn  # the same line, once
    tb = os.path.join(out, "tb")
    assert stdout.splitlines()[0] == f"wrote {tb}/run: {_events(tb)} (3 steps and 3 evaluations)"


def test_a_resume_says_its_damaged_tensorboard_history_on_stderr_in_one_line(
    tmp_path, capsys, text_file
):
    out, _ = _train(tmp_path, capsys, text_file, "--log-to", "tensorboard", "--max-iters", "3")
    tb = os.path.join(out, "tb", "run")
    (name,) = os.listdir(tb)
    with open(os.path.join(tb, name), "r+b") as f:
        f.truncate(os.path.getsize(f.name) // 2)
    code, stdout, err = _run(capsys, "train", "--out-dir", out, "--resume", "--max-iters", "6",
                             "--log-to", "tensorboard")  # fmt: skip
    assert code == 0, err
    lines = [s for s in err.splitlines() if s.startswith("TensorBoard ")]
    assert len(lines) == 1 and "written again from dynamics.bin and metrics.jsonl" in lines[0]
    assert "TensorBoard " + tb not in stdout
    assert _losses(tb) == read_dynamics(out)["loss"].tolist()


def test_a_run_out_dir_with_a_trailing_slash_is_named_in_tensorboard(
    tmp_path, capsys, monkeypatch, text_file
):
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(capsys, "train", *TINY, "--data", text_file, "--out-dir", "out/",
                        "--log-to", "tensorboard")  # fmt: skip
    assert code == 0, err
    from tensorboard.backend.event_processing import event_multiplexer

    mux = event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(str(tmp_path / "out" / "tb"))
    assert list(mux.Runs()) == ["out"]


@pytest.mark.parametrize(
    "argv, to",
    [
        (["--project", "p"], ("trackio",)),
        (["--project=p"], ("tensorboard", "wandb")),
        (["--log-dir", "{tmp}/board"], ("tensorboard", "trackio")),
        (["--log-dir", "{tmp}/board", "--run-name", "r"], ("tensorboard",)),
    ],
)
def test_a_dashboard_flag_is_taken_where_a_chosen_dashboard_uses_it(tmp_path, argv, to):
    import argparse

    from resgrad.cli import _common

    argv = [a.format(tmp=tmp_path) for a in argv]
    given = dict(a.lstrip("-").split("=") if "=" in a else (a.lstrip("-"), b)
                 for a, b in zip(argv, argv[1:] + [""]) if a.startswith("--"))  # fmt: skip
    args = argparse.Namespace(argv=argv, log_to=to, log_dir=given.get("log-dir"),
                              hist_every=100, run_name=given.get("run-name"),
                              project=given.get("project", "resgrad"))  # fmt: skip
    log = _common.log_config(args)
    assert log.to == to and log.project == given.get("project", "resgrad")
    assert log.dir == given.get("log-dir") and not os.path.exists(tmp_path / "board")
