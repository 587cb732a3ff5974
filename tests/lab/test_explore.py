import dataclasses
import math
import re

import numpy as np
import pytest

from resgrad.lab.flow import (
    FlowConfig,
    explore_figure,
    explore_grid,
    explore_records,
    explore_spec,
    gained_params,
    measure,
    profile,
)
from resgrad.lab.lesson import StackConfig, run_stack
from resgrad.plots import make_figure, plotted_series

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


# the grid's views: the lesson's stack, two GPT schemes, and one without a caption
LESSON = dict(depth=3, width=16, batch=2, seeds=(0,))
VIEWS = [
    dict(schemes="lesson-plain", scale=0.9, caption="(a) plain at 0.9", **LESSON),
    dict(schemes=("none", "pre-ln"), seeds=(0, 1), caption="(b) two schemes", **SMALL),
    dict(schemes="post-ln", quantity="stream_act", seeds=(0,), **SMALL),
]


def _spec(view):
    kw = dict(view)
    caption = kw.pop("caption", None)
    spec = explore_spec(**kw)
    return spec if caption is None else dataclasses.replace(spec, title=caption)


def _cell(ax):
    """(row, column, rows, columns) of a panel in its figure's grid."""
    ss = ax.get_subplotspec()
    rows, cols = ss.get_geometry()[:2]
    return ss.rowspan.start, ss.colspan.start, rows, cols


def _drawn(ax):
    return [(ln.get_label(), ln.get_xdata(), ln.get_ydata()) for ln in ax.get_lines()]


def test_the_grid_draws_each_view_as_explore_spec_does_in_its_own_panel():
    fig = explore_grid(VIEWS, ncols=2)
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert len(shown) == len(VIEWS) == 3 and len(fig.axes) == 4  # the fourth cell hidden
    assert [_cell(ax) for ax in shown] == [(0, 0, 2, 2), (0, 1, 2, 2), (1, 0, 2, 2)]
    assert fig.get_size_inches().tolist() == [12.0, 9.2]  # 6 x 4.6 inches a panel
    for ax, view in zip(shown, VIEWS):
        ref = make_figure(_spec(view)).axes[0]  # the view alone, as the explorer draws it
        got, want = _drawn(ax), _drawn(ref)
        assert [g[0] for g in got] == [w[0] for w in want] and got
        for (_, gx, gy), (_, wx, wy) in zip(got, want):
            np.testing.assert_array_equal(gx, wx)
            np.testing.assert_array_equal(gy, wy)
        assert ax.get_title() == ref.get_title()  # the caption, then the spec's notes
        assert ax.get_ylabel() == ref.get_ylabel() and ax.get_yscale() == ref.get_yscale()
        assert ax.title.get_fontsize() == 9
    # the numbers are explore_spec's: the records' means, one line per scheme
    b = explore_spec(("none", "pre-ln"), seeds=(0, 1), **SMALL)
    assert {ln.get_label(): ln.get_ydata().tolist() for ln in shown[1].get_lines()} == {
        s.label: list(s.y) for s in b.series
    }


def test_a_panels_title_opens_with_its_caption_and_keeps_the_specs_notes():
    fig = explore_grid(VIEWS, ncols=3)
    titles = [ax.get_title().split("\n") for ax in fig.axes]
    own = [explore_spec(**{k: v for k, v in view.items() if k != "caption"}) for view in VIEWS]
    assert [t[0] for t in titles] == ["(a) plain at 0.9", "(b) two schemes", own[2].title]
    assert all(spec.title not in "\n".join(t) for t, spec in zip(titles[:2], own))  # replaced
    for t, spec in zip(titles, own):  # ... and the spec's notes kept under it
        assert t[1 : 1 + len(spec.notes)] == list(spec.notes) and len(spec.notes) >= 2


@pytest.mark.parametrize(
    "n, ncols, cells",
    [
        (3, 3, [(0, 0, 1, 3), (0, 1, 1, 3), (0, 2, 1, 3)]),
        (3, 5, [(0, 0, 1, 3), (0, 1, 1, 3), (0, 2, 1, 3)]),  # no wider than the views
        (3, 1, [(0, 0, 3, 1), (1, 0, 3, 1), (2, 0, 3, 1)]),
        (1, 2, [(0, 0, 1, 1)]),
        (5, 2, [(0, 0, 3, 2), (0, 1, 3, 2), (1, 0, 3, 2), (1, 1, 3, 2), (2, 0, 3, 2)]),
    ],
)
def test_the_panels_go_row_by_row_in_ncols_columns(n, ncols, cells):
    views = [dict(schemes="lesson-plain", scale=0.5 + 0.1 * i, caption=f"v{i}", **LESSON)
             for i in range(n)]  # fmt: skip
    fig = explore_grid(views, ncols=ncols)
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [_cell(ax) for ax in shown] == cells
    assert [ax.get_title().split("\n")[0] for ax in shown] == [f"v{i}" for i in range(n)]
    assert len(fig.axes) == cells[0][2] * cells[0][3]  # the cells of the grid, no more
    assert fig.get_size_inches().tolist() == pytest.approx([6.0 * cells[0][3], 4.6 * cells[0][2]])


@pytest.mark.parametrize(
    "views, ncols, msg",
    [
        ([], 2, "views must hold at least one view, got none"),
        ((), 2, "views must hold at least one view, got none"),
        (VIEWS[:1], 0, "ncols must be an int >= 1, got 0"),
        (VIEWS[:1], -1, "ncols must be an int >= 1, got -1"),
        (VIEWS[:1], 1.0, "ncols must be an int >= 1, got 1.0"),
        (VIEWS[:1], "2", "ncols must be an int >= 1, got '2'"),
        (VIEWS[:1], True, "ncols must be an int >= 1, got True"),
        (VIEWS[:1], None, "ncols must be an int >= 1, got None"),
    ],
)
def test_the_grid_refuses_no_views_and_a_bad_ncols_in_one_line(views, ncols, msg):
    with pytest.raises(ValueError, match=f"^{re.escape(msg)}$") as e:
        explore_grid(views, ncols=ncols)
    assert "\n" not in str(e.value)


def test_a_bad_view_is_named_as_explore_spec_names_it():
    with pytest.raises(ValueError, match="depth must be a positive integer, got 0"):
        explore_grid([dict(VIEWS[0], depth=0)])
