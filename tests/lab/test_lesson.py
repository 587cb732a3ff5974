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
    from resgrad.cli.lesson_cmds import render_depth

    data = json.loads(render_depth(StackConfig(), "json", ratio=True))
    assert [r["depth"] for r in data["rows"]] == [1, 5, 10, 20]
    assert data["rows"][-1]["with_residual"] == depth_table()[-1].with_residual
