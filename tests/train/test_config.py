"""TrainConfig's bounds, each with the value just inside (accepted) and just outside (refused,
naming the field and the value), and what a continuation of a run may change."""

import dataclasses

import pytest

from resgrad.train.config import (
    MAX_EVAL_ITERS,
    RESUMABLE,
    TrainConfig,
    check_matches_checkpoint,
)

# every integer field at its smallest value, and one below it
SMALLEST = {"n_layer": 1, "n_head": 1, "n_embd": 1, "block_size": 1, "batch_size": 1,
            "max_iters": 0, "warmup_iters": 0, "eval_interval": 1, "eval_iters": 1,
            "shards": 1, "keep_every": 0}  # fmt: skip


def _cfg(**kw) -> TrainConfig:
    # the schedule needs lr_decay_iters > warmup_iters; n_head must divide n_embd
    base = {"n_head": 1, "warmup_iters": 0, "lr_decay_iters": 10}
    return TrainConfig(**{**base, **kw})


@pytest.mark.parametrize("field, lo", sorted(SMALLEST.items()))
def test_each_integer_field_at_its_smallest_and_one_below(field, lo):
    assert getattr(_cfg(**{field: lo}), field) == lo
    with pytest.raises(ValueError, match=f"{field} must be an integer >= {lo}, got {lo - 1}"):
        _cfg(**{field: lo - 1})


def test_lr_decay_iters_at_its_smallest_and_one_below():
    assert _cfg(lr_decay_iters=1).lr_decay_iters == 1
    with pytest.raises(ValueError, match="lr_decay_iters must be an integer >= 1, got 0"):
        _cfg(lr_decay_iters=0)
    with pytest.raises(ValueError, match="lr_decay_iters must be greater than warmup_iters=3"):
        _cfg(warmup_iters=3, lr_decay_iters=3)
    assert _cfg(warmup_iters=3, lr_decay_iters=4).lr_decay_iters == 4


def test_eval_iters_at_its_largest_and_one_above():
    """Exactly MAX_EVAL_ITERS batches per split are accepted, one more is refused."""
    assert MAX_EVAL_ITERS == 10_000
    assert _cfg(eval_iters=MAX_EVAL_ITERS).eval_iters == MAX_EVAL_ITERS
    with pytest.raises(ValueError, match="eval_iters must be at most 10000, got 10001"):
        _cfg(eval_iters=MAX_EVAL_ITERS + 1)


def test_seed_at_both_ends_of_0_to_2_to_the_32():
    assert _cfg(seed=0).seed == 0 and _cfg(seed=2**32 - 1).seed == 2**32 - 1
    with pytest.raises(ValueError, match=r"seed must be < 2\*\*32, got 4294967296"):
        _cfg(seed=2**32)
    with pytest.raises(ValueError, match="seed must be an integer >= 0, got -1"):
        _cfg(seed=-1)
    with pytest.raises(ValueError, match="seed must be an integer >= 0, got True"):
        _cfg(seed=True)


@pytest.mark.parametrize(
    "kw, ok",
    [({"min_lr": 0.0, "lr": 1e-300}, True), ({"min_lr": 0.0, "lr": 0.0}, False),
     ({"min_lr": 0.0}, True),
     ({"min_lr": -1e-300}, False), ({"lr": 1e-3, "min_lr": 1e-3}, True),
     ({"lr": 1e-3, "min_lr": 1.0000001e-3}, False), ({"weight_decay": 0.0}, True),
     ({"weight_decay": -1e-300}, False), ({"grad_clip": 0.0}, True),
     ({"grad_clip": -1e-300}, False), ({"grad_clip": float("inf")}, False),
     ({"beta1": 0.0}, True), ({"beta1": 1.0}, False), ({"beta2": 0.999999}, True),
     ({"beta2": 1.0}, False), ({"dropout": 0.0}, True), ({"dropout": 1.0}, False)],
)  # fmt: skip
def test_each_float_bound_just_inside_and_just_outside(kw, ok):
    field = list(kw)[-1]
    if ok:
        assert getattr(_cfg(**kw), field) == kw[field]
    else:
        with pytest.raises(ValueError, match=field):
            _cfg(**kw)


def test_the_bpe_vocabulary_at_its_smallest_and_one_below():
    assert _cfg(tokenizer="bpe", vocab_size=256).vocab_size == 256
    with pytest.raises(ValueError, match="vocab_size must be an integer >= 256, got 255"):
        _cfg(tokenizer="bpe", vocab_size=255)


def test_a_continuation_may_change_only_what_it_is_told_it_may():
    """The checkpoint's settings against a run's: any field but those ``may_change`` lists
    is refused by name; by default the RESUMABLE ones may change (and only they)."""
    cfg = _cfg()
    saved = dataclasses.asdict(cfg)
    check_matches_checkpoint(cfg, saved, "last.ckpt")
    for f in dataclasses.fields(TrainConfig):
        other = {**saved, f.name: "<another value>"}
        if f.name in RESUMABLE:
            check_matches_checkpoint(cfg, other, "last.ckpt")
        else:
            with pytest.raises(ValueError, match=f"{f.name} is .* but the checkpoint was"):
                check_matches_checkpoint(cfg, other, "last.ckpt")
    strict = ("out_dir", "resume")
    check_matches_checkpoint(cfg, {**saved, "out_dir": "x", "resume": True}, "p", strict)
    for name in ("eval_iters", "data", "max_iters", "eval_interval", "keep_every"):
        with pytest.raises(ValueError, match=f"{name} is .* trained with '<another value>'$"):
            check_matches_checkpoint(cfg, {**saved, name: "<another value>"}, "p", strict)


def test_rezero_alpha_reaches_the_model_and_is_refused_for_another_scheme():
    from resgrad.train.config import TrainConfig

    assert TrainConfig(variant="rezero", rezero_alpha=0.5).gpt_config(5).rezero_alpha == 0.5
    assert TrainConfig(variant="rezero").gpt_config(5).rezero_alpha == 0.0  # Bachlechner's
    with pytest.raises(ValueError, match="rezero_alpha 0.5 is rezero's alpha at initialization"):
        TrainConfig(rezero_alpha=0.5)  # pre-ln has no alpha


def test_ln_scaling_power_reaches_the_model_recorded_as_it_trains():
    from resgrad.train.config import TrainConfig

    assert TrainConfig(variant="ln-scaling").ln_scaling_power == 0.5  # the paper's, recorded
    assert TrainConfig(variant="ln-scaling").gpt_config(5).ln_scaling_power == 0.5
    cfg = TrainConfig(variant="ln-scaling", ln_scaling_power=0.25)
    assert cfg.gpt_config(5).ln_scaling_power == 0.25
    assert TrainConfig().ln_scaling_power is None
    with pytest.raises(ValueError, match="ln_scaling_power 0.5 is ln-scaling's exponent"):
        TrainConfig(ln_scaling_power=0.5)  # pre-ln has no exponent
    with pytest.raises(ValueError, match=r"ln_scaling_power must be a number in \[0, 1\]"):
        TrainConfig(variant="ln-scaling", ln_scaling_power=2.0)
    with pytest.raises(ValueError, match="ln_scaling_power=0.5 cannot be combined with init_from"):
        TrainConfig(ln_scaling_power=0.5, init_from="gpt2")
