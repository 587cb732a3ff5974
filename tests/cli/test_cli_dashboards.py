"""``resgrad train --log-to``, ``resgrad experiment --log-to`` and ``resgrad dynamics --export``
through the real command: what they print, the files they write, and their one-line errors."""

import os

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
    acc = ea.EventAccumulator(logdir, size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return [e.value for e in acc.Scalars("train/loss")]


def test_train_log_to_tensorboard_says_where_and_writes_the_events(tmp_path, capsys, text_file):
    out, stdout = _train(tmp_path, capsys, text_file, "--log-to", "tensorboard", "--hist-every",
                         "2")  # fmt: skip
    tb = os.path.join(out, "tb")
    assert stdout.splitlines()[-1] == f"TensorBoard: tensorboard --logdir {tb}"
    assert _losses(tb) == read_dynamics(out)["loss"].tolist()
    acc = ea.EventAccumulator(tb, size_guidance={ea.HISTOGRAMS: 0})
    acc.Reload()
    assert [e.step for e in acc.Histograms("gradients/wte")] == [0, 2, 4]


def test_log_dir_puts_the_events_elsewhere(tmp_path, capsys, text_file):
    logdir = str(tmp_path / "board" / "mine")
    out, stdout = _train(tmp_path, capsys, text_file, "--log-to", "tensorboard", "--log-dir",
                         logdir)  # fmt: skip
    assert not os.path.exists(os.path.join(out, "tb")) and len(_losses(logdir)) == 6
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
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "wandb" else real(name, *a))  # fmt: skip
    code, _, err = _run(capsys, "train", "--out-dir", tmp_path / "run", "--log-to", "wandb")
    assert code == 2
    assert err.strip() == ("resgrad train: error: --log-to wandb needs wandb, which is not "
                           'installed; pip install "resgrad[wandb]"')  # fmt: skip
    assert not os.path.exists(tmp_path / "run")


def test_dynamics_export_writes_once_and_refuses_to_overwrite(tmp_path, capsys, text_file):
    out, _ = _train(tmp_path, capsys, text_file)
    tb = os.path.join(out, "tb")
    code, stdout, _ = _run(capsys, "dynamics", out, "--export", "tensorboard")
    assert code == 0
    assert stdout.splitlines() == [f"6 steps and 3 evaluations written to {tb}",
                                   f"TensorBoard: tensorboard --logdir {tb}"]  # fmt: skip
    assert _losses(tb) == read_dynamics(out)["loss"].tolist()
    assert not os.path.exists(os.path.join(out, "dynamics.png"))  # an export draws nothing
    code, _, err = _run(capsys, "dynamics", out, "--export", "tensorboard")
    assert code == 2 and "already holds files" in err and "--force" in err
    code, _, err = _run(capsys, "dynamics", out, "--export", "tensorboard", "--force")
    assert code == 0, err
    code, _, _ = _run(capsys, "dynamics", out, "--export", "tensorboard", tmp_path / "other")
    assert code == 0 and len(_losses(str(tmp_path / "other"))) == 6


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
