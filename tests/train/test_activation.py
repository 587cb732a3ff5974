"""``resgrad train --activation``: the GELU a run trains with is the one it names, recorded in
its checkpoints and its export, and a resume may not change it."""

import dataclasses
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from resgrad.formats.checkpoint import load_checkpoint, save_checkpoint
from resgrad.nn.layers import ACTIVATIONS, gelu_erf_forward, gelu_forward
from resgrad.train.config import ACTIVATION_NAMES, FROM_PRETRAINED, TrainConfig, resume_config
from resgrad.train.loop import train


def _tiny(tmp_path, **kw):
    text = tmp_path / "t.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    base = dict(n_layer=1, n_head=2, n_embd=8, block_size=8, batch_size=4, max_iters=4,
                eval_interval=2, eval_iters=1, warmup_iters=0, lr_decay_iters=4)  # fmt: skip
    return TrainConfig(**{**base, **kw}, data=str(text), out_dir=str(tmp_path / "run"))


def test_each_name_is_a_gelu_of_the_model_and_the_two_differ():
    assert sorted(ACTIVATION_NAMES.values()) == sorted(ACTIVATIONS)
    x = np.linspace(-3.0, 3.0, 61)
    tanh_form, exact = gelu_forward(x)[0], gelu_erf_forward(x)[0]
    for name in ACTIVATION_NAMES:
        got = ACTIVATIONS[TrainConfig(activation=name).gpt_config(5).activation][0](x)[0]
        np.testing.assert_array_equal(got, exact if name == "gelu" else tanh_form)
    assert np.abs(tanh_form - exact).max() > 1e-4  # the choice is a different model


@pytest.mark.parametrize("bad", ["erf", "gelu-erf", "GELU", "", None, ["gelu"]])
def test_an_unknown_activation_is_refused_by_name(bad):
    with pytest.raises(ValueError, match=rf"unknown activation {re.escape(repr(bad))}; expected"):
        TrainConfig(activation=bad)


def test_the_activation_comes_with_a_pretrained_model():
    assert "activation" in FROM_PRETRAINED
    with pytest.raises(ValueError, match="activation='gelu' cannot be combined with init_from"):
        TrainConfig(init_from="gpt2", activation="gelu")


@pytest.mark.parametrize("name", sorted(ACTIVATION_NAMES))
def test_a_run_trains_records_and_resumes_with_its_activation(tmp_path, name):
    cfg = _tiny(tmp_path, activation=name)
    train(cfg, progress=False, log=lambda s: None)
    ckpt = load_checkpoint(os.path.join(cfg.out_dir, "last.ckpt"))
    assert ckpt.config["train"]["activation"] == name
    assert ckpt.config["model"]["activation"] == ACTIVATION_NAMES[name]
    dyn = json.loads((tmp_path / "run" / "dynamics.json").read_text())
    assert json.dumps(dyn).count(f'"activation": "{name}"') == 1, dyn
    other = "gelu" if name == "gelu_tanh" else "gelu_tanh"
    assert resume_config(cfg.out_dir).activation == name
    with pytest.raises(ValueError, match=f"activation is '{other}' but the checkpoint was "
                                         f"trained with '{name}'"):  # fmt: skip
        train(dataclasses.replace(cfg, activation=other, resume=True, max_iters=6),
              progress=False, log=lambda s: None)  # fmt: skip
    assert load_checkpoint(os.path.join(cfg.out_dir, "last.ckpt")).iteration == 4


def test_a_run_recorded_before_the_setting_resumes_with_the_tanh_form(tmp_path):
    cfg = _tiny(tmp_path)
    train(cfg, progress=False, log=lambda s: None)
    last = os.path.join(cfg.out_dir, "last.ckpt")
    ckpt = load_checkpoint(last)
    del ckpt.config["train"]["activation"]  # as written by a version without the setting
    save_checkpoint(last, ckpt)
    assert resume_config(cfg.out_dir).activation == "gelu_tanh"
    with pytest.raises(ValueError, match="activation is 'gelu' but the checkpoint was trained "
                                         "with 'gelu_tanh'"):  # fmt: skip
        train(dataclasses.replace(cfg, activation="gelu", resume=True), progress=False)


def _resgrad(*args, cwd):
    return subprocess.run([sys.executable, "-m", "resgrad", *args], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, "MPLBACKEND": "Agg"})  # fmt: skip


def test_the_flag_trains_the_exact_gelu_and_the_export_says_so(tmp_path):
    (tmp_path / "t.txt").write_text("the quick brown fox jumps over the lazy dog. " * 40)
    flags = ["--data", "t.txt", "--n-layer", "1", "--n-head", "2", "--n-embd", "8",
             "--block-size", "8", "--max-iters", "2", "--eval-interval", "2",
             "--eval-iters", "1", "--warmup-iters", "0", "--lr-decay-iters", "2"]  # fmt: skip
    p = _resgrad("train", *flags, "--activation", "gelu", "--out-dir", "run", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    p = _resgrad("export", "--checkpoint", "run", "--out-dir", "hf", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert cfg["activation_function"] == "gelu"  # transformers' exact GELU
    p = _resgrad("train", "--resume", "--out-dir", "run", "--activation", "gelu_tanh",
                 "--max-iters", "4", cwd=tmp_path)  # fmt: skip
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "activation is 'gelu_tanh' but the checkpoint was trained with 'gelu'" in p.stderr
    p = _resgrad("train", *flags, "--activation", "erf", "--out-dir", "bad", cwd=tmp_path)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "'erf'" in p.stderr and "gelu_tanh" in p.stderr and not (tmp_path / "bad").exists()


def test_the_help_offers_both_names(tmp_path):
    p = _resgrad("train", "--help", cwd=tmp_path)
    assert p.returncode == 0 and "--activation {gelu_tanh,gelu}" in " ".join(p.stdout.split())
