"""Pictures of training runs: the heatmaps draw the recorded numbers; compare labels runs by
what differs between them; bad run directories are one-line errors."""

import os
import subprocess
import sys

import numpy as np
import pytest

from resgrad.cli import main
from resgrad.lab.experiments import QUANTITIES, compare_figure, dynamics_figure, run_labels
from resgrad.train.config import TrainConfig
from resgrad.train.dynamics import DYNAMICS_BIN, read_dynamics
from resgrad.train.loop import train

TINY = dict(
    n_layer=3, n_head=2, n_embd=16, block_size=8, batch_size=4, warmup_iters=2,
    lr_decay_iters=30, lr=3e-3, eval_interval=5, eval_iters=1, max_iters=10,
)  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    data = root / "data.txt"
    data.write_text("the quick brown fox jumps over the lazy dog. " * 40, encoding="utf-8")
    dirs = []
    for variant in ("pre-ln", "post-ln"):
        cfg = TrainConfig(**TINY, variant=variant, data=str(data), out_dir=str(root / variant))
        train(cfg, progress=False, log=lambda s: None)
        dirs.append(cfg.out_dir)
    return dirs


def test_heatmaps_draw_the_recorded_values(runs):
    dyn = read_dynamics(runs[0])
    fig = dynamics_figure(dyn)
    for r, q in enumerate(QUANTITIES):
        (image,) = fig.axes[2 * r].get_images()
        np.testing.assert_array_equal(np.asarray(image.get_array()), dyn[q].T)  # (L, N)
        assert image.norm.__class__.__name__ == "LogNorm"
        lines = fig.axes[2 * r + 1].get_lines()
        where = "boundary" if q == "stream_grad" else "block"  # x_i sits between blocks
        assert [ln.get_label() for ln in lines] == [f"{where} {i}" for i in range(3)]
        np.testing.assert_array_equal(lines[2].get_ydata(), dyn[q][:, 2])


def test_compare_labels_runs_by_what_differs(runs):
    assert run_labels([{"variant": "a", "lr": 1, "out_dir": "x"},
                       {"variant": "b", "lr": 1, "out_dir": "y"}],
                      ["x", "y"]) == ["variant=a", "variant=b"]  # fmt: skip
    assert run_labels([{"lr": 1}, {"lr": 1}], ["runs/a", "runs/b/"]) == ["a", "b"]
    fig = compare_figure([read_dynamics(d) for d in runs], "stream_grad", layers=(0, 2))
    labels = [ln.get_label() for ln in fig.axes[2].get_lines()]
    assert labels == ["variant=pre-ln", "variant=post-ln"]
    prof = fig.axes[2].get_lines()[1].get_ydata()
    last = read_dynamics(runs[1])["stream_grad"][-1:]  # the last 10% of 10 steps: one step
    np.testing.assert_allclose(prof, last.mean(axis=0), rtol=1e-6)


def test_compare_names_the_runs_below_the_panels_however_long_their_labels(runs, monkeypatch):
    """Runs that differ in many settings: their labels wrap in one key under the panels,
    inside the figure, instead of a legend in each panel running over the curves."""
    from resgrad.lab.experiments import compare as R

    long = [", ".join(f"setting_{k}={k * (j + 1)}" for k in range(12)) for j in range(2)]
    monkeypatch.setattr(R, "run_labels", lambda configs, dirs: long)
    fig = compare_figure([read_dynamics(d) for d in runs], "grad")
    (key,) = fig.legends
    assert [t.get_text().replace("\n", " ") for t in key.get_texts()] == long
    fig.canvas.draw()
    box, panels = key.get_window_extent(), [ax.get_window_extent() for ax in fig.axes]
    assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0
    assert box.y1 <= min(p.y0 for p in panels)  # below the panels, not over them


def test_the_commands_draw_files(runs, tmp_path, capsys):
    assert main(["dynamics", runs[0], "--quantities", "grad,update", "--layers", "0,2"]) == 0
    assert os.path.getsize(os.path.join(runs[0], "dynamics.png")) > 1000
    out = str(tmp_path / "cmp.svg")
    assert main(["compare", *runs, "--quantity", "act_rms", "--out", out]) == 0
    assert "<svg" in open(out).read()[:400]


def _resgrad(*args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, "-m", "resgrad", *args], capture_output=True,
                          text=True, env=env)  # fmt: skip


@pytest.mark.parametrize(
    "args, message",
    [
        (["dynamics", "/nonexistent-run"], "is not a directory"),
        (["dynamics", "{tmp}"], "holds no dynamics records"),
        (["dynamics", "{run}", "--layers", "9"], "layer 9 does not exist"),
        (["dynamics", "{run}", "--quantities", "grad,nope"], "unknown name 'nope'"),
        (["compare", "{run}", "--quantity", "nope"], "invalid choice: 'nope'"),
        (["dynamics", "{run}", "--out", "{tmp}/x.jpg"], "expected a file name ending in"),
    ],
)
def test_bad_input_is_one_line_exit_2(runs, tmp_path, args, message):
    args = [a.format(tmp=tmp_path, run=runs[0]) for a in args]
    p = _resgrad(*args)
    assert p.returncode == 2, p.stderr
    assert message in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_a_torn_record_is_ignored_and_said(runs, tmp_path):
    import shutil

    run = shutil.copytree(runs[0], tmp_path / "torn")
    with open(run / DYNAMICS_BIN, "ab") as f:
        f.write(b"\x00" * 5)
    p = _resgrad("dynamics", str(run))
    assert p.returncode == 0 and "torn last record, 5 bytes" in p.stdout


def test_a_one_step_run_is_drawn_as_points_and_said_in_the_singular(runs, tmp_path):
    """One recorded step: a line through one point would leave the panels blank."""
    data = tmp_path / "data.txt"
    data.write_text("the quick brown fox jumps over the lazy dog. " * 40, encoding="utf-8")
    cfg = TrainConfig(**{**TINY, "max_iters": 1}, data=str(data), out_dir=str(tmp_path / "one"))
    train(cfg, progress=False, log=lambda s: None)
    fig = dynamics_figure(read_dynamics(cfg.out_dir), ["grad"])
    lines = fig.axes[1].get_lines()
    assert len(lines) == 3 and all(len(ln.get_xdata()) == 1 for ln in lines)
    assert all(ln.get_marker() not in ("None", "", None) for ln in lines)
    fig = compare_figure([read_dynamics(cfg.out_dir), read_dynamics(runs[0])], "grad")
    one = [ln for ln in fig.axes[1].get_lines() if len(ln.get_xdata()) == 1]
    assert one and all(ln.get_marker() not in ("None", "", None) for ln in one)
    p = _resgrad("dynamics", cfg.out_dir)
    assert p.returncode == 0 and "(1 step of 3 blocks)" in p.stdout, p.stdout + p.stderr


def test_damaged_records_are_drawn_up_to_the_damage_and_said(runs, tmp_path):
    import shutil

    from resgrad.train.dynamics import record_dtype

    run = shutil.copytree(runs[0], tmp_path / "damaged")
    size = record_dtype(3).itemsize
    raw = bytearray((run / DYNAMICS_BIN).read_bytes())
    raw[4 * size : 5 * size] = b"\xff" * size  # record 5 of 10: step -1
    (run / DYNAMICS_BIN).write_bytes(bytes(raw))
    p = _resgrad("dynamics", str(run))
    assert p.returncode == 0 and "(4 steps of 3 blocks)" in p.stdout, p.stdout
    assert p.stderr == (f"resgrad dynamics: {run}: dynamics.bin: record 5 of 10 is damaged "
                        "(step -1 after 3); kept the first 4\n")  # fmt: skip
    raw[0:size] = b"\xff" * size  # the first record: nothing is left to draw
    (run / DYNAMICS_BIN).write_bytes(bytes(raw))
    p = _resgrad("dynamics", str(run))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "record 1 of 10 is damaged (step -1); kept the first 0" in p.stderr, p.stderr


def test_the_compare_profile_is_the_mean_of_the_last_steps(runs):
    dyns = [read_dynamics(d) for d in runs]
    fig = compare_figure(dyns, "grad", tail=0.3)
    profiles = fig.axes[2].get_lines()
    for d, line in zip(dyns, profiles):
        np.testing.assert_allclose(line.get_ydata(), d["grad"][-3:].mean(axis=0), rtol=1e-6)


def test_the_compare_profile_by_hand_skips_non_finite_steps(runs):
    """The profile is, per block, the mean over the last ``tail`` of the steps of the
    finite values (an overflowed step is left out, not averaged in as inf); at least one
    step, and ``tail=1`` is every step."""
    import dataclasses

    dyn = read_dynamics(runs[0])
    recs = dyn.records.copy()
    recs["grad"][-1, 1] = np.inf  # block 1's last step overflowed
    recs["grad"][-2, 2] = np.nan
    hand = dataclasses.replace(dyn, records=recs)
    g = recs["grad"].astype(np.float64)  # (10, 3)
    (line,) = compare_figure([hand], "grad", tail=0.3).axes[2].get_lines()
    want = [g[-3:, 0].mean(), g[-3:-1, 1].mean(), g[[-3, -1], 2].mean()]
    np.testing.assert_allclose(line.get_ydata(), want, rtol=1e-12)
    (line,) = compare_figure([hand], "grad", tail=1).axes[2].get_lines()
    np.testing.assert_allclose(line.get_ydata()[0], g[:, 0].mean(), rtol=1e-12)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # block 1 has no finite step left: a gap, not a warning
        (line,) = compare_figure([hand], "grad", tail=0.01).axes[2].get_lines()  # 0.1 steps: 1
    np.testing.assert_allclose(line.get_ydata()[[0, 2]], g[-1, [0, 2]], rtol=1e-12)
    assert np.isnan(line.get_ydata()[1])


@pytest.mark.parametrize("tail, ok", [(1, True), (1.0001, False), (0, False), (1e-9, True),
                                      (float("nan"), False), (-0.1, False)])  # fmt: skip
def test_the_tail_is_a_fraction_in_0_1(runs, tail, ok):
    dyns = [read_dynamics(runs[0])]
    if ok:
        compare_figure(dyns, "grad", tail=tail)
    else:
        with pytest.raises(ValueError, match=r"tail must be a fraction of the steps in \(0, 1\]"):
            compare_figure(dyns, "grad", tail=tail)


@pytest.mark.parametrize("layers, ok", [((2,), True), ((3,), False), ((0,), True), ((-1,), False)])
def test_layers_just_inside_and_just_outside_the_model(runs, layers, ok):
    dyn = read_dynamics(runs[0])  # 3 blocks: 0..2
    for draw in (lambda: dynamics_figure(dyn, ["grad"], layers),
                 lambda: compare_figure([dyn], "grad", layers)):  # fmt: skip
        if ok:
            draw()
        else:
            with pytest.raises(ValueError, match=f"layer {layers[0]} does not exist"):
                draw()


def test_labels_do_not_depend_on_the_order_of_the_settings(runs):
    """The differing settings are named in sorted order, whichever order a config lists them."""
    a = {"variant": "a", "lr": 1, "n_layer": 2}
    b = {"n_layer": 3, "lr": 1, "variant": "b"}
    assert run_labels([a, b], ["x", "y"]) == ["n_layer=2, variant=a", "n_layer=3, variant=b"]
    assert run_labels([dict(reversed(a.items())), b], ["x", "y"]) == run_labels([a, b], ["x", "y"])
