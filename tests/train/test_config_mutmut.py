"""train.config, a run's settings reach what they set and a bad one is refused by name: the
model, the schedule and AdamW a config builds carry every field it has; each refusal names
the field, the value and (for a number) the interval, open or closed at each end; an empty
or non-text path is no path; nanoGPT's meta.pkl comes only with a pretrained ckpt.pt; and a
continuation reads the checkpoint's settings back, refuses a changed one naming the file,
and says which may change. A field not passed on, a bound's end flipped, a refusal with no
message or let through, an override not checked are the bugs mutmut plants here
(scripts/mutmut/run.py)."""

import dataclasses
import os

import pytest

from resgrad.formats.checkpoint import LAST, Checkpoint, save_checkpoint
from resgrad.train.config import (
    FROM_PRETRAINED,
    MAX_EVAL_ITERS,
    TrainConfig,
    check_matches_checkpoint,
    check_resumable,
    resume_config,
)

# every model and optimizer setting away from its default (and from GPTConfig's)
ODD = dict(n_layer=3, n_head=2, n_embd=6, block_size=5, dropout=0.25, variant="rezero",
           init="xavier", activation="gelu", rezero_alpha=0.5, lr=3e-3, min_lr=2e-4,
           warmup_iters=7, lr_decay_iters=11, weight_decay=0.05, beta1=0.8, beta2=0.95)  # fmt: skip


def test_the_model_schedule_and_optimizer_carry_every_setting():
    cfg = TrainConfig(**ODD)
    m = cfg.gpt_config(vocab_size=17)
    got = {k: getattr(m, k) for k in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd",
                                      "dropout", "variant", "init", "rezero_alpha")}  # fmt: skip
    assert got == {"vocab_size": 17, **{k: ODD[k] for k in got if k != "vocab_size"}}
    assert m.activation == "gelu-erf"  # PyTorch's name of the exact GELU
    s = cfg.schedule()
    assert (s.lr, s.min_lr, s.warmup_iters, s.lr_decay_iters) == (3e-3, 2e-4, 7, 11)
    a = cfg.adamw()
    assert (a.lr, a.beta1, a.beta2, a.weight_decay) == (3e-3, 0.8, 0.95, 0.05)


@pytest.mark.parametrize(
    "kw, said",
    [
        ({"lr": 0.0}, "lr must be a finite number in (0.0, inf), got 0.0"),
        ({"lr": -1.0, "min_lr": -2.0}, "lr must be a finite number in (0.0, inf), got -1.0"),
        ({"min_lr": 2e-3}, "min_lr must be a finite number in [0.0, 0.001], got 0.002"),
        ({"min_lr": -1e-9}, "min_lr must be a finite number in [0.0, 0.001], got -1e-09"),
        ({"weight_decay": -0.5}, "weight_decay must be a finite number in [0.0, inf), got -0.5"),
        ({"grad_clip": float("nan")}, "grad_clip must be a finite number in [0.0, inf), got nan"),
    ],
)
def test_a_number_out_of_its_interval_is_refused_naming_the_interval(kw, said):
    with pytest.raises(ValueError) as e:
        TrainConfig(**kw)
    assert str(e.value) == said


@pytest.mark.parametrize(
    "kw, said",
    [
        ({"variant": "pre_ln"}, "unknown variant 'pre_ln'; expected one of ("),
        ({"init": "he"}, "unknown init 'he'; expected one of ("),
        ({"tokenizer": "bytes"}, "unknown tokenizer 'bytes'; expected one of ("),
        ({"data": ""}, "data must be a file path or None, got ''"),
        ({"data": 3}, "data must be a file path or None, got 3"),
        ({"out_dir": ""}, "out_dir must be a non-empty path, got ''"),
        ({"out_dir": None}, "out_dir must be a non-empty path, got None"),
        ({"init_from": ""}, "init_from must be a model name or path, got ''"),
        ({"init_from": 2}, "init_from must be a model name or path, got 2"),
        ({"init_from": "gpt2", "meta": ""}, "meta must be a path to nanoGPT's meta.pkl, got ''"),
        ({"tokenizer": "bpe"}, "tokenizer 'bpe' needs a vocab_size (>= 256, e.g. 1024)"),
        ({"vocab_size": 512}, "vocab_size 512 is for a BPE trained here (tokenizer 'bpe', no "
                              "init_from); the char tokenizer and a pretrained model bring "
                              "their own"),
        ({"meta": "meta.pkl"}, "meta 'meta.pkl' is the vocabulary of a nanoGPT ckpt.pt given as "
                               "init_from; a run from scratch builds its own"),
        ({"eval_iters": MAX_EVAL_ITERS + 1}, "eval_iters must be at most 10000, got 10001: each "
                                             "evaluation runs eval_iters batches per split"),
    ],
)  # fmt: skip
def test_a_bad_setting_is_refused_naming_the_field_and_the_value(kw, said):
    with pytest.raises(ValueError) as e:
        TrainConfig(**kw)
    assert str(e.value).startswith(said)


def test_nanogpts_meta_comes_with_a_pretrained_checkpoint():
    cfg = TrainConfig(init_from="out/ckpt.pt", meta="data/meta.pkl")
    assert (cfg.init_from, cfg.meta) == ("out/ckpt.pt", "data/meta.pkl")


def test_a_pretrained_model_refuses_each_setting_it_brings_naming_them_all():
    with pytest.raises(ValueError) as e:
        TrainConfig(init_from="gpt2", n_layer=2, variant="post-ln")
    assert str(e.value) == (
        "n_layer=2, variant='post-ln' cannot be combined with init_from 'gpt2': the pretrained "
        f"model brings its own {', '.join(FROM_PRETRAINED)}"
    )
    assert ", ".join(FROM_PRETRAINED).startswith("n_layer, n_head, n_embd")


# --------------------------------------------------------------------------- continuing


def _run_dir(tmp_path, train, name="run"):
    """A run directory whose last checkpoint records ``train`` as its settings."""
    out = tmp_path / name
    os.makedirs(out)
    config = {} if train is None else {"train": train}
    ckpt = Checkpoint(params={}, optimizer={}, iteration=4, config=config, vocab="ab")
    save_checkpoint(out / LAST, ckpt)
    return str(out)


def test_a_continuation_reads_the_settings_back_with_what_may_change(tmp_path):
    cfg = TrainConfig(**ODD, out_dir="elsewhere")
    out = _run_dir(tmp_path, dataclasses.asdict(cfg))
    got = resume_config(out, max_iters=50)
    want = dataclasses.replace(cfg, max_iters=50, out_dir=out, resume=True)
    assert got == want and got.resume is True


@pytest.mark.parametrize("override", [{"n_layer": 2}, {"seed": 7}, {"activation": "gelu_tanh"}])
def test_a_continuation_refuses_a_changed_setting_naming_the_file(tmp_path, override):
    cfg = TrainConfig(**ODD)
    out = _run_dir(tmp_path, dataclasses.asdict(cfg))
    (k, v), path = next(iter(override.items())), os.path.join(out, LAST)
    with pytest.raises(ValueError) as e:
        resume_config(out, **override)
    assert str(e.value) == (
        f"cannot resume {path!r}: {k} is {v!r} but the checkpoint was trained with "
        f"{getattr(cfg, k)!r} (only max_iters, eval_interval, eval_iters may change on resume)"
    )
    with pytest.raises(ValueError) as e:
        check_resumable(dataclasses.replace(cfg, out_dir=out, **override))
    assert str(e.value).startswith(f"cannot resume {path!r}: {k} is {v!r}")
    check_resumable(dataclasses.replace(cfg, out_dir=out, max_iters=99))  # may change


def test_a_checkpoint_with_no_recorded_settings_stands_for_what_the_code_then_did(tmp_path):
    out = _run_dir(tmp_path, None)
    then = TrainConfig(out_dir=out, shards=1)  # the defaults, one shard before shards existed
    check_resumable(then)
    with pytest.raises(ValueError, match="n_layer is 2 but the checkpoint was trained with 4"):
        check_resumable(dataclasses.replace(then, n_layer=2, n_head=1))
    with pytest.raises(ValueError) as e:
        resume_config(out)
    assert str(e.value) == f"checkpoint {os.path.join(out, LAST)!r} has no training config"


def test_a_continuation_refuses_what_it_cannot_read_back(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        resume_config(str(tmp_path / "none"))
    assert str(e.value) == f"--resume: no checkpoint {LAST!r} in {str(tmp_path / 'none')!r}"
    saved = {**dataclasses.asdict(TrainConfig()), "z_future": 1, "a_future": 2}
    out = _run_dir(tmp_path, saved)
    with pytest.raises(ValueError) as e:
        resume_config(out)
    assert str(e.value) == (
        f"checkpoint {os.path.join(out, LAST)!r} has unknown config fields ['a_future', 'z_future']"
    )


def test_a_stricter_comparison_names_the_file_and_no_resume_rule():
    cfg = TrainConfig()
    saved = {**dataclasses.asdict(cfg), "max_iters": 1}
    with pytest.raises(ValueError) as e:
        check_matches_checkpoint(cfg, saved, "runs/a/best.ckpt", may_change=("out_dir",))
    assert str(e.value) == (
        "cannot resume 'runs/a/best.ckpt': max_iters is 2000 but the checkpoint was trained with 1"
    )
