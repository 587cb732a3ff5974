"""The depth experiment on a real model (resgrad.lab.experiments)."""

import json
import os

import numpy as np
import pytest

from resgrad.cli import main
from resgrad.lab.experiments import DepthTrainConfig


def test_depth_train_cli_tiny(tmp_path, text_file, capsys):
    out = str(tmp_path / "depth")
    args = ["depth-train", "--n-layer", "2", "--n-head", "2", "--n-embd", "16", "--block-size",
            "8", "--batch-size", "2", "--max-iters", "4", "--eval-interval", "2", "--eval-iters",
            "1", "--data", text_file, "--out-dir", out]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "none" in printed and "pre-ln" in printed and "depth_train.png" in printed
    summary = json.load(open(os.path.join(out, "depth_train.json")))
    assert list(summary["variants"]) == ["none", "pre-ln"]
    for s in summary["variants"].values():
        assert len(s["first_step_layer_grad_norms"]) == 2 and np.isfinite(s["val_loss"])
    with open(os.path.join(out, "depth_train.png"), "rb") as f:
        assert f.read(4) == b"\x89PNG"
    # both variants started from the same batches: their first losses see the same data
    assert DepthTrainConfig(n_layer=2).train_config("none").seed == 1337


def test_depth_train_of_zero_steps_draws_without_warnings(tmp_path, text_file, capsys):
    import warnings

    args = ["depth-train", "--n-layer", "2", "--n-head", "2", "--n-embd", "16", "--block-size",
            "8", "--batch-size", "2", "--max-iters", "0", "--eval-iters", "1", "--data",
            text_file, "--out-dir", str(tmp_path / "d")]  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's 'No artists with labels' legend warning
        assert main(args) == 0
    assert os.path.getsize(tmp_path / "d" / "depth_train.png") > 1000


def test_a_one_step_run_says_1_step_and_draws_its_points(tmp_path, text_file, monkeypatch):
    import resgrad.lab.experiments.depthtrain as depthtrain

    drawn, real = [], depthtrain.render_depth_plot

    def render(runs, title, entropy=None):
        drawn.append(title)
        return real(runs, title, entropy)

    monkeypatch.setattr(depthtrain, "render_depth_plot", render)
    said = []
    cfg = DepthTrainConfig(n_layer=2, n_head=2, n_embd=16, block_size=8, batch_size=2,
                           max_iters=1, eval_iters=1, data=text_file,
                           out_dir=str(tmp_path / "d"))  # fmt: skip
    depthtrain.depth_train(cfg, progress=False, log=said.append)
    assert "1 step," in drawn[0] and "1 steps" not in drawn[0], drawn
    assert any("1 step" in s for s in said) and not any("1 steps" in s for s in said), said


def test_the_recipe_and_the_summary_are_what_they_say(tmp_path, text_file):
    """Every variant trains with warm-up max_iters // 10 and a cosine to lr / 10; the
    summary's norms are the first and last steps' in the variant's metrics."""
    from resgrad.train.rundir import read_metrics

    c = DepthTrainConfig(max_iters=600, lr=2e-3).train_config("pre-ln")
    assert (c.warmup_iters, c.lr, c.min_lr, c.lr_decay_iters) == (60, 2e-3, 2e-4, 600)
    assert c.grad_clip == 1.0 and c.out_dir == os.path.join("out", "depth", "pre-ln")
    cfg = DepthTrainConfig(n_layer=2, n_head=2, n_embd=16, block_size=8, batch_size=2,
                           max_iters=3, eval_interval=3, eval_iters=1, data=text_file,
                           variants=("none", "pre-ln"), out_dir=str(tmp_path / "d"))  # fmt: skip
    from resgrad.lab.experiments import depth_train

    summary = depth_train(cfg, progress=False, log=lambda s: None)
    for v in cfg.variants:
        steps = [r for r in read_metrics(tmp_path / "d" / v) if r["kind"] == "iter"]
        s = summary["variants"][v]
        assert s["first_step_layer_grad_norms"] == steps[0]["layer_grad_norms"]
        assert s["last_step_layer_grad_norms"] == steps[-1]["layer_grad_norms"]
        assert steps[0] != steps[-1]
    saved = json.load(open(tmp_path / "d" / "depth_train.json"))
    assert saved["variants"] == summary["variants"]
    with pytest.raises(ValueError, match="already holds a depth-train run"):
        depth_train(cfg, progress=False, log=lambda s: None)


@pytest.mark.parametrize(
    "kw, message",
    [({"variants": ("none", "none")}, "variants must be distinct"),
     ({"seed": 2**32}, "seed must be < 2\\*\\*32, got 4294967296"),
     ({"eval_iters": 10_001}, "eval_iters must be at most 10000, got 10001"),
     ({"max_iters": -1}, "max_iters must be an integer >= 0, got -1")],
)  # fmt: skip
def test_settings_just_outside_their_bounds_are_refused(kw, message):
    with pytest.raises(ValueError, match=message):
        DepthTrainConfig(**kw)


def test_settings_at_their_bounds_are_accepted():
    cfg = DepthTrainConfig(seed=2**32 - 1, eval_iters=10_000, max_iters=0)
    assert [cfg.train_config(v).seed for v in cfg.variants] == [2**32 - 1] * 2
