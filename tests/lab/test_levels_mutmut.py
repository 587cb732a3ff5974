"""lab.robustness.levels, models compared at equal loss: a level is read between the first
pair of kept checkpoints, in training order, whose losses bracket it or touch it, so the
ends of the common range are readable; the weight and every value are the docstring's
linear interpolation in float64 (0 on a flat segment), ``nearest`` the closer checkpoint;
chosen levels are the range's quantiles at 4 significant digits, more only where 4 would
leave the range; a range that is one point is no range; each refusal names the model and
what is wrong; a point's record names its model and fields. A bound made strict, a
weight from a flat segment, a tie or a side swapped, a message's value from the wrong
checkpoint are the bugs mutmut plants here (scripts/mutmut/run.py)."""

import math

import numpy as np
import pytest

from resgrad.lab.robustness.levels import (
    ModelKey,
    Trajectory,
    at_level,
    check_levels,
    check_trajectory,
    choose_levels,
    common_range,
    model_label,
)

KEY = ModelKey("rezero", 4, 0.5, 2)


def _traj(loss, model=KEY, metric=None):
    """A model whose kept checkpoints have these losses; its metric ``m`` is 10 x the
    checkpoint's index, its iterations 100 x, its paths ``c<index>``."""
    k = len(loss)
    metric = np.arange(k) * 10.0 if metric is None else metric
    return Trajectory(model, np.arange(k) * 100, np.asarray(loss), {"m": metric},
                      tuple(f"c{i}" for i in range(k)))  # fmt: skip


def test_the_ends_of_the_common_range_are_levels_every_model_is_read_at():
    trajs = [_traj([4.0, 2.5, 2.0]), _traj([3.5, 3.0, 1.0], model="b")]
    lo, hi = common_range(trajs)
    assert (lo, hi) == (2.0, 3.5)
    assert check_levels(trajs, [lo, hi]) == (2.0, 3.5)
    for t in trajs:
        for level in (lo, hi):
            p = at_level(t, level)
            assert p.level == level and min(p.before.loss, p.after.loss) <= level
            assert level <= max(p.before.loss, p.after.loss)


def test_a_level_on_a_kept_loss_is_read_from_the_first_pair_that_touches_it():
    p = at_level(_traj([3.0, 2.0, 1.0]), 2.0)  # the loss of checkpoint 1
    assert (p.before.iteration, p.after.iteration, p.weight) == (0, 100, 1.0)
    assert p.metrics == {"m": 10.0} and p.iteration == 100.0 and p.nearest.path == "c1"


def test_a_flat_segment_on_the_level_weighs_its_first_checkpoint():
    p = at_level(_traj([2.0, 2.0, 1.0]), 2.0)
    assert (p.before.path, p.after.path, p.weight) == ("c0", "c1", 0.0)
    assert p.metrics == {"m": 0.0} and p.iteration == 0.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_the_weight_is_the_linear_interpolation_in_float64_whatever_the_losses_dtype(dtype):
    loss = np.array([3, 1], dtype=dtype)
    level = 2.2
    l0, l1 = float(loss[0]), float(loss[1])  # the stored values, exactly
    w = (level - l0) / (l1 - l0)
    p = at_level(_traj(loss, metric=np.array([5.0, 7.0])), level)
    assert p.weight == w and type(p.weight) is float
    assert p.metrics["m"] == (1 - w) * 5.0 + w * 7.0


@pytest.mark.parametrize("level, nearest", [(2.9, "c0"), (2.5, "c0"), (2.1, "c1")])
def test_nearest_is_the_closer_checkpoint_as_measured_ties_to_the_earlier(level, nearest):
    assert at_level(_traj([3.0, 2.0]), level).nearest.path == nearest


def test_a_level_the_curve_never_crosses_is_refused_with_its_range():
    with pytest.raises(ValueError) as e:
        at_level(_traj([3.0, 2.0]), 1.5)
    assert str(e.value) == (
        f"model {KEY.label} never crosses loss 1.5: its losses run 2..3; expected a level in "
        "that range"
    )


def test_models_whose_ranges_meet_in_one_point_reach_no_loss_in_common():
    with pytest.raises(ValueError, match="reach no loss in common: b reaches down only to 2 "):
        common_range([_traj([3.0, 1.0]), _traj([4.0, 2.0], model="b"), _traj([2.0, 1.0])])


def test_no_level_is_refused():
    with pytest.raises(ValueError) as e:
        check_levels([_traj([3.0, 1.0])], [])
    assert str(e.value) == "no level given; expected at least one loss"


def test_chosen_levels_are_the_quantiles_at_four_significant_digits():
    trajs = [_traj([3.0, 2.0]), _traj([3.5, 1.0], model="b")]
    got = choose_levels(trajs)  # four by default
    want = tuple(float(f"{2.0 + q / 5:.4g}") for q in (1, 2, 3, 4))
    assert got == want == (2.2, 2.4, 2.6, 2.8)
    assert choose_levels(trajs, n=2) == (2.333, 2.667)
    assert choose_levels(trajs, n=2, part=0.5) == (2.167, 2.333)


def test_a_level_is_given_more_digits_only_where_four_would_leave_the_range():
    # (2, 2.0004): the middle, 2.0002, is 2.000 at 4 digits: the range's end, not inside it
    assert choose_levels([_traj([2.0004, 2.0])], n=1) == (2.0002,)


def test_a_range_too_narrow_for_distinct_levels_still_gives_them_within_it():
    lo = 2.0
    hi = math.nextafter(lo, 3.0)  # one float apart: no level lies strictly between
    got = choose_levels([_traj([hi, lo])], n=2)
    assert len(got) == 2 and all(lo <= x <= hi for x in got)


def test_a_bad_trajectory_is_refused_naming_the_part_and_the_value():
    t = _traj([3.0, 2.0])
    with pytest.raises(ValueError) as e:
        check_trajectory(t._replace(iterations=np.arange(3)))
    assert str(e.value) == (
        f"model {KEY.label} has 3 iterations for 2 losses; expected one per kept checkpoint"
    )
    with pytest.raises(ValueError) as e:
        check_trajectory(_traj([3.0, math.nan, math.inf]))
    assert str(e.value) == (
        f"model {KEY.label} has a loss that is not finite (nan); expected measured losses"
    )


@pytest.mark.parametrize(
    "model, label",
    [(KEY, "rezero L=4 dose=0.5 seed=2"), (("pre-ln", 6, 0.0, 1), "pre-ln L=6 dose=0 seed=1"),
     (("pre-ln", 6, 0.0), "('pre-ln', 6, 0.0)"), ("abcd", "abcd"), (7, "7")],
)  # fmt: skip
def test_a_model_is_called_by_its_fields_or_as_it_was_given(model, label):
    assert model_label(model) == label


def test_a_points_record_names_its_model_the_level_and_the_checkpoints():
    keyed = at_level(_traj([3.0, 1.0]), 2.5).record()
    assert keyed == {
        "scheme": "rezero", "depth": 4, "dose": 0.5, "seed": 2, "level": 2.5,
        "iteration": 25.0, "m": 2.5, "weight": 0.25,
        "before_iteration": 0, "before_path": "c0", "before_loss": 3.0,
        "after_iteration": 100, "after_path": "c1", "after_loss": 1.0,
        "nearest_iteration": 0, "nearest_path": "c0", "nearest_loss": 3.0,
    }  # fmt: skip
    for other in ("run-a", ("pre-ln", 6)):
        got = at_level(_traj([3.0, 1.0], model=other), 2.5).record()
        assert list(got)[:3] == ["model", "level", "iteration"]
        assert got["model"] == str(other)
