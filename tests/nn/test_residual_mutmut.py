"""A refusal names what it refused: each shape check of the residual connection says which
two arrays disagree, by the names the docs give them, with both shapes, and the wrapper
names the type it cannot wrap. A message that names the wrong array (or none) sends a
reader to the wrong line; mutmut plants exactly that (scripts/mutmut/run.py)."""

import numpy as np
import pytest

from resgrad import Residual, residual, residual_backward

RULE = "a residual sublayer must map (B, T, C) to (B, T, C)"


def message(fn, *args) -> str:
    with pytest.raises(ValueError) as e:
        fn(*args)
    return str(e.value)


def test_forward_refusal_names_x_and_the_sublayer_output():
    x = np.zeros((2, 3, 4))  # (B, T, C); the sublayer drops a channel
    got = message(residual, x, lambda v: v[..., :-1])
    assert got == f"x has shape (2, 3, 4) but sublayer(x) has shape (2, 3, 3): {RULE}"


def test_backward_refusal_names_dout_and_df():
    got = message(residual_backward, np.zeros((2, 4)), np.zeros((2, 5)))
    assert got == f"dout has shape (2, 4) but df has shape (2, 5): {RULE}"


class Shrink:
    """A sublayer that maps (..., C) to (..., C - 1): the bug the check is there for."""

    params: dict = {}

    def forward(self, x):
        return x[..., :-1], None

    def backward(self, dout, cache):  # pragma: no cover - never reached
        raise AssertionError


def test_wrapper_refusal_names_x_and_the_sublayer_output():
    got = message(Residual(Shrink()).forward, np.zeros((2, 4)))
    assert got == f"x has shape (2, 4) but sublayer(x) has shape (2, 3): {RULE}"


class NoBackward:
    params: dict = {}

    def forward(self, x):  # pragma: no cover - never reached
        return x, None


def test_wrapper_refusal_names_the_type_and_the_missing_attribute():
    with pytest.raises(TypeError) as e:
        Residual(NoBackward())
    assert str(e.value).endswith("NoBackward has no 'backward'")
