"""Text windows and the refusal of a window longer than the model: where the bound sits
(a window of exactly the model's positions is fine, one more is refused), what the
windows are (T + 1 consecutive tokens, int64 whatever the ids came as), and what the
refusal says. Each class of bug here, an off-by-one bound, a dtype lost, a refusal that
names the wrong number, is one mutmut plants (scripts/mutmut/run.py)."""

import numpy as np
import pytest

from resgrad.lab.study.windows import refuse_long_seq, text_windows
from resgrad.nn.model import GPTConfig

CFG = GPTConfig(vocab_size=11, block_size=16, n_layer=1, n_head=1, n_embd=8)


@pytest.mark.parametrize("dtype", [np.uint16, np.int32, np.int64])
def test_windows_are_consecutive_int64_tokens_whatever_the_ids_came_as(dtype):
    ids = np.arange(40, dtype=dtype)  # token i is i: a window's values are its positions
    w = text_windows(ids, seq=5, batch=7, seed=3)
    assert w.shape == (7, 6) and w.dtype == np.int64
    assert (np.diff(w, axis=1) == 1).all() and w.min() >= 0 and w.max() <= 39


def test_refuse_long_seq_takes_the_model_s_positions_and_refuses_one_more():
    refuse_long_seq(CFG, 16)  # every position used: fine
    refuse_long_seq(CFG, 16, default=True)
    with pytest.raises(ValueError) as e:
        refuse_long_seq(CFG, 17)
    assert "--seq 17 is longer than the model's 16 positions; pass --seq 16 or less" in str(e.value)


def test_refuse_long_seq_says_when_the_length_was_the_command_s_default():
    with pytest.raises(ValueError) as e:
        refuse_long_seq(CFG, 64, default=True)
    assert "--seq 64 (the default) is longer than the model's 16 positions" in str(e.value)
    with pytest.raises(ValueError) as e:
        refuse_long_seq(CFG, 64)
    assert "--seq 64 is longer" in str(e.value) and "default" not in str(e.value)
