import math

import numpy as np
import pytest

from resgrad.lab.explore import explore_figure, explore_records, gained_params
from resgrad.lab.flow import FlowConfig, measure, profile
from resgrad.lab.lesson import StackConfig, run_stack
from resgrad.plots import plotted_series

SMALL = dict(depth=3, width=16, seq=4, batch=2)


def means(records, variant, quantity="stream_grad"):
    rs = sorted(
        (r for r in records if r.variant == variant and r.quantity == quantity),
        key=lambda r: r.layer,
    )
    return np.array([r.mean for r in rs])


def test_the_figure_draws_flows_own_numbers():
    """At gain 1 the explorer is measure() drawn: each line is the records' means."""
    fig = explore_figure(("none", "pre-ln"), seeds=(0, 1), **SMALL)
    drawn = plotted_series(fig)
    assert set(drawn) == {"none", "pre-ln"}
    for v in ("none", "pre-ln"):
        ref = measure(FlowConfig(variant=v, heads=4, seeds=(0, 1), **SMALL))
        x, y = drawn[v]
        np.testing.assert_array_equal(x, np.arange(SMALL["depth"] + 1))
        np.testing.assert_array_equal(y, means(ref, v))


def test_scale_is_the_lessons_scale():
    """lesson-residual at scale 0.9 is the lesson's run_stack at 0.9 (Exercise 1)."""
    fig = explore_figure("lesson-residual", depth=5, width=16, scale=0.9, batch=4, seeds=(42,))
    y = plotted_series(fig)["lesson-residual"][1]
    ref = run_stack(StackConfig(depths=(5,), scale=0.9), 5, residual=True).grad_norms
    np.testing.assert_array_equal(y, ref)
    fig = explore_figure("lesson-residual", depth=5, width=16, scale=0.5, batch=4, seeds=(42,))
    assert f"{plotted_series(fig)['lesson-residual'][1][0]:.6f}" == "14.544574"  # the table's


def test_gain_scales_every_block_weight_matrix_and_nothing_else():
    cfg = FlowConfig(variant="pre-ln", heads=4, **SMALL)
    base = gained_params(cfg, 0, 1.0)
    half = gained_params(cfg, 0, 0.5)
    assert set(base) == set(half)
    scaled = {k for k in base if not np.array_equal(base[k], half[k])}
    assert scaled == {k for k, v in base.items() if k.startswith("blocks.") and v.ndim == 2}
    assert len(scaled) == 4 * SMALL["depth"]  # w_qkv, attn.w_proj, w_fc, mlp.w_proj
    for k in scaled:
        np.testing.assert_array_equal(half[k], 0.5 * base[k])


def test_gain_changes_the_profile_as_hand_scaled_weights_do():
    recs = explore_records("residual", gain=3.0, init="xavier", seeds=(0, 1), **SMALL)
    cfg = FlowConfig(variant="residual", init="xavier", heads=4, seeds=(0, 1), **SMALL)
    ref = []
    for s in (0, 1):
        params = gained_params(cfg, s, 1.0)
        params = {k: v * 3.0 if k.startswith("blocks.") and v.ndim == 2 else v
                  for k, v in params.items()}  # fmt: skip
        ref.append(profile(cfg, s, params=params).stream_grad)
    np.testing.assert_array_equal(means(recs, "residual"), np.mean(ref, axis=0))
    plain = means(explore_records("residual", init="xavier", seeds=(0, 1), **SMALL), "residual")
    assert not np.allclose(means(recs, "residual"), plain)  # the knob does something
    assert {r.init for r in recs} == {"xavier x3"}  # the records say what was measured


def test_each_knob_leaves_the_other_kind_of_stack_alone():
    a = explore_records(("lesson-plain", "pre-ln"), scale=0.5, gain=1.0, **SMALL)
    b = explore_records(("lesson-plain", "pre-ln"), scale=0.9, gain=2.0, **SMALL)
    assert not np.array_equal(means(a, "lesson-plain"), means(b, "lesson-plain"))
    assert not np.array_equal(means(a, "pre-ln"), means(b, "pre-ln"))
    c = explore_records(("lesson-plain", "pre-ln"), scale=0.5, gain=2.0, **SMALL)
    np.testing.assert_array_equal(means(a, "lesson-plain"), means(c, "lesson-plain"))
    d = explore_records(("lesson-plain", "pre-ln"), scale=0.9, gain=1.0, **SMALL)
    np.testing.assert_array_equal(means(a, "pre-ln"), means(d, "pre-ln"))


def test_quantity_picks_what_is_drawn():
    for q, n in (("stream_act", SMALL["depth"] + 1), ("param_grad", SMALL["depth"])):
        fig = explore_figure("post-ln", quantity=q, seeds=(0,), **SMALL)
        ref = measure(FlowConfig(variant="post-ln", heads=4, **SMALL))
        np.testing.assert_array_equal(plotted_series(fig)["post-ln"][1], means(ref, "post-ln", q))
        assert len(plotted_series(fig)["post-ln"][1]) == n


def test_any_width_gets_heads_that_divide_it():
    recs = explore_records("pre-ln", depth=2, width=18, seq=4, batch=2, seeds=(0,))
    assert {r.heads for r in recs} == {2}
    recs = explore_records("pre-ln", depth=2, width=7, seq=4, batch=2, seeds=(0,))
    assert {r.heads for r in recs} == {1}


def test_an_overflow_is_drawn_as_gaps_with_a_note():
    """A huge gain overflows the unnormalized residual stack: the figure says so."""
    fig = explore_figure(("residual", "pre-ln"), depth=6, width=16, gain=1e30, seeds=(0,))
    y = plotted_series(fig)["residual"][1]
    assert (y == 0).any()  # the overflowed layers, masked on the log axis
    assert np.isfinite(plotted_series(fig)["pre-ln"][1]).all()
    assert "residual: overflowed float64" in fig.axes[0].get_title()
    recs = explore_records("residual", depth=6, width=16, gain=1e30, seeds=(0,))
    assert not all(math.isfinite(r.mean) for r in recs)  # the records keep the truth


@pytest.mark.parametrize(
    "kwargs, error, msg",
    [
        ({"gain": float("nan")}, ValueError, "gain must be a finite number >= 0, got nan"),
        ({"gain": -1.0}, ValueError, "gain must be a finite number >= 0, got -1.0"),
        ({"gain": "2"}, TypeError, "gain must be a number, got '2'"),
        ({"schemes": ()}, ValueError, "schemes must name at least one scheme"),
        ({"schemes": ("none", "none")}, ValueError, "schemes must be distinct"),
        ({"schemes": "sandwich"}, ValueError, "variant must be one of .*got 'sandwich'"),
        ({"depth": 0}, ValueError, "depth must be a positive integer, got 0"),
        ({"width": 0}, ValueError, "width must be a positive integer, got 0"),
        ({"init": "he"}, ValueError, "init must be one of gpt2, xavier, got 'he'"),
        ({"quantity": "loss"}, ValueError, "quantity must be one of .*got 'loss'"),
        ({"seeds": 3}, TypeError, "seeds must be a sequence of integers, got 3"),
    ],
)
def test_bad_input_is_named(kwargs, error, msg):
    with pytest.raises(error, match=msg):
        explore_figure(**{**dict(seeds=(0,), **SMALL), **kwargs})


def test_at_gain_1_the_records_are_flows_own_and_say_the_init_untouched():
    for init in ("gpt2", "xavier"):
        recs = explore_records("pre-ln", gain=1.0, init=init, seeds=(0, 1), **SMALL)
        ref = measure(FlowConfig(variant="pre-ln", init=init, heads=4, seeds=(0, 1), **SMALL))
        assert recs == ref
        assert {r.init for r in recs} == {init}


def test_gain_0_is_allowed_and_zeroes_the_block_weights():
    cfg = FlowConfig(variant="pre-ln", heads=4, **SMALL)
    base, zero = gained_params(cfg, 0, 1.0), gained_params(cfg, 0, 0)
    for k, v in zero.items():
        if k.startswith("blocks.") and v.ndim == 2:
            assert base[k].any() and not v.any()
        else:
            np.testing.assert_array_equal(v, base[k])
    recs = explore_records("pre-ln", gain=0, seeds=(0,), **SMALL)
    assert {r.init for r in recs} == {"gpt2 x0"}
    assert all(math.isfinite(r.mean) for r in recs)


def test_the_overflow_note_counts_the_drawn_quantitys_layers():
    kw = dict(depth=6, width=16, gain=1e30, seeds=(0,))
    recs = explore_records("residual", **kw)
    for q in ("stream_grad", "stream_act"):
        n = sum(
            not all(math.isfinite(v) for v in (r.mean, r.min, r.max))
            for r in recs
            if r.quantity == q
        )
        assert 0 < n < len(recs)  # some layers overflow, not every record
        fig = explore_figure(("residual", "pre-ln"), quantity=q, **kw)
        title = fig.axes[0].get_title()
        assert f"residual: overflowed float64 (inf/NaN) at {n} layer(s), left blank" in title


def test_the_title_claims_a_band_only_over_several_seeds():
    one = explore_figure("pre-ln", seeds=(0,), **SMALL).axes[0].get_title()
    assert "mean over 1 seed(s)" in one and "band" not in one
    two = explore_figure("pre-ln", seeds=(0, 1), **SMALL).axes[0].get_title()
    assert "mean over 2 seed(s), band = min..max" in two


def test_the_gain_and_seed_bounds_just_inside_and_just_outside():
    explore_records("pre-ln", gain=0.0, seeds=(2**32 - 1,), **SMALL)
    for kw, msg in (({"gain": -1e-300}, "gain must be a finite number >= 0"),
                    ({"gain": float("inf")}, "gain must be a finite number >= 0"),
                    ({"seeds": (2**32,)}, r"seed must be an integer in \[0, 2\*\*32")):  # fmt: skip
        with pytest.raises(ValueError, match=msg):
            explore_records("pre-ln", **{"seeds": (0,), **SMALL, **kw})


def test_a_band_is_the_min_and_max_over_the_seeds():
    """The lines and bands drawn are flow's records: mean, and min..max over the seeds."""
    recs = explore_records("pre-ln", seeds=(0, 1, 2), **SMALL)
    sg = sorted((r for r in recs if r.quantity == "stream_grad"), key=lambda r: r.layer)
    one = [explore_records("pre-ln", seeds=(s,), **SMALL) for s in (0, 1, 2)]
    per_seed = np.array([[r.mean for r in sorted((r for r in o if r.quantity == "stream_grad"),
                                                 key=lambda r: r.layer)] for o in one])  # fmt: skip
    np.testing.assert_allclose([r.mean for r in sg], per_seed.mean(0), rtol=1e-13)
    np.testing.assert_array_equal([r.min for r in sg], per_seed.min(0))
    np.testing.assert_array_equal([r.max for r in sg], per_seed.max(0))
