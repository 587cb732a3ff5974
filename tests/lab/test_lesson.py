# ruff: noqa: NPY002
# (the lesson itself uses NumPy's legacy global RNG; these files reproduce it)
import json
import math

import numpy as np
import pytest

from resgrad.lab.lesson import (
    GradcheckConfig,
    StackConfig,
    depth_table,
    format_table,
    lesson_gradcheck,
    make_bank,
    run_stack,
)
from tests.lesson_reference import LESSON_TABLE, lesson_gradcheck_error, lesson_table


def test_default_table_is_the_lessons_byte_for_byte():
    assert format_table(depth_table()) == LESSON_TABLE


def test_the_lessons_own_code_prints_the_same_table_here():
    text, _ = lesson_table()
    assert text == LESSON_TABLE


def test_bank_is_the_lessons_global_seed_stream_without_touching_global_state():
    state = np.random.get_state()[1].copy()
    bank = make_bank(StackConfig())
    np.testing.assert_array_equal(np.random.get_state()[1], state)
    np.random.seed(42)
    ref = [np.random.randn(16, 16) * (0.5 / np.sqrt(16)) for _ in range(20)]
    for a, b in zip(bank, ref):
        np.testing.assert_array_equal(a, b)


def test_exercise_1_matches_the_lessons_code_at_scale_0_9():
    # reference: the lesson's own code with the Ws line edited to 0.9, as Exercise 1 says
    text, ref = lesson_table(scale=0.9)
    rows = depth_table(StackConfig(scale=0.9))
    assert format_table(rows) == text
    for r in rows:
        assert r.no_residual == ref[r.depth][0]
        assert r.with_residual == ref[r.depth][1]
    # the exercise's answer: the plain column still decays, the residual one does not
    plain = [r.no_residual for r in rows]
    assert all(a > b for a, b in zip(plain, plain[1:]))
    assert all(r.with_residual > 8.0 for r in rows)


def test_exercise_3_ratios_are_the_lessons_norms_over_8():
    # reference: the lesson's own run_stack(N, residual=True) / 8.0
    _, ref = lesson_table()
    for r in depth_table():
        assert r.ratio == pytest.approx(ref[r.depth][1] / 8.0, rel=1e-15)
    assert format_table(depth_table(), ratio=True).splitlines()[-1].endswith("3.205410")


def test_per_layer_profile_is_consistent():
    cfg = StackConfig()
    prof = run_stack(cfg, 10, residual=True)
    assert len(prof.grad_norms) == 11 and len(prof.act_norms) == 11
    assert len(prof.weight_grad_norms) == 10
    assert prof.grad_norms[-1] == pytest.approx(math.sqrt(64))
    assert prof.input_grad_norm == depth_table(StackConfig(depths=(10,)))[0].with_residual
    plain = run_stack(cfg, 10, residual=False)
    # without the + x path every layer shrinks the gradient (scale 0.5 attenuates)
    assert all(a < b for a, b in zip(plain.grad_norms, plain.grad_norms[1:]))


def test_lesson_gradcheck_passes_and_is_the_lessons_order_of_magnitude():
    rep = lesson_gradcheck()
    ref = lesson_gradcheck_error()
    assert rep.passed(1e-4)
    # both are float64 rounding noise; they must be of the same tiny order, not equal
    assert rep.max_error < 1e-7 and ref < 1e-7
    assert rep.worst.name == "x"


def test_exercise_2_two_blocks_passes():
    rep = lesson_gradcheck(GradcheckConfig(blocks=2))
    assert rep.passed(1e-4) and rep.max_error < 1e-6


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        ({"depths": (1, 0)}, "depth must be a positive integer, got 0"),
        ({"depths": ()}, "at least one depth"),
        ({"width": -2}, "width must be a positive integer, got -2"),
        ({"batch": 0}, "batch must be a positive integer, got 0"),
        ({"scale": float("inf")}, "scale must be a finite number, got inf"),
        ({"seed": -1}, "seed must be an integer"),
    ],
)
def test_bad_stack_config_names_the_value(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        StackConfig(**kwargs)


def test_config_is_frozen():
    with pytest.raises(Exception, match="cannot assign"):
        StackConfig().scale = 1.0


def test_json_roundtrip_of_depth_rows():
    from resgrad.lab.lesson import render_depth

    data = json.loads(render_depth(StackConfig(), "json", ratio=True))
    assert [r["depth"] for r in data["rows"]] == [1, 5, 10, 20]
    assert data["rows"][-1]["with_residual"] == depth_table()[-1].with_residual


def _stream(Ws, x, residual):
    """The stack's forward by hand: x_{i+1} = x_i + tanh(x_i @ W_i) (no + x_i when plain)."""
    xs = [x]
    for W in Ws:
        f = np.tanh(xs[-1] @ W)
        xs.append(xs[-1] + f if residual else f)
    return xs


@pytest.mark.parametrize("residual", [True, False])
def test_profile_norms_are_the_hand_computed_ones(residual):
    # the activation norms by a forward written out here; the weight-gradient norms by
    # central differences of L = sum(out) (the upstream gradient of ones), layer by layer
    cfg = StackConfig(depths=(3,), width=4, batch=2, scale=0.9)
    Ws = make_bank(cfg)
    x = np.random.RandomState(cfg.input_seed).randn(2, 4)
    prof = run_stack(cfg, 3, residual=residual, bank=Ws)
    xs = _stream(Ws, x, residual)
    np.testing.assert_allclose(prof.act_norms, [np.linalg.norm(a) for a in xs], rtol=1e-14)
    h = 1e-6
    for i in range(3):
        dW = np.zeros((4, 4))
        for j, k in np.ndindex(4, 4):
            plus = [W.copy() for W in Ws]
            minus = [W.copy() for W in Ws]
            plus[i][j, k] += h
            minus[i][j, k] -= h
            dW[j, k] = (
                _stream(plus, x, residual)[-1].sum() - _stream(minus, x, residual)[-1].sum()
            ) / (2 * h)
        assert prof.weight_grad_norms[i] == pytest.approx(np.linalg.norm(dW), rel=1e-7)
    assert len(set(prof.weight_grad_norms)) == 3  # distinct per layer: the order is checked


def test_bad_gradcheck_config_and_seed_bounds_are_named():
    with pytest.raises(ValueError, match="eps must be positive, got 0"):
        GradcheckConfig(eps=0)
    bound = r"seed must be an integer in \[0, 2\*\*32\), got 4294967296"
    with pytest.raises(ValueError, match=bound):
        StackConfig(seed=2**32)
    with pytest.raises(ValueError, match="input_seed must be an integer"):
        StackConfig(input_seed=2**32)
    assert StackConfig(seed=2**32 - 1).seed == 2**32 - 1  # the last seed RandomState takes


def test_a_bank_shorter_than_the_depth_is_refused():
    cfg = StackConfig()
    with pytest.raises(ValueError, match="depth 5 needs 5 matrices but the bank holds 4"):
        run_stack(cfg, 5, residual=True, bank=make_bank(cfg, 4))
