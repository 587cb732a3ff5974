import csv
import io
import json
import math

import numpy as np
import pytest

from resgrad.lab.flow import (
    FlowConfig,
    aggregate,
    flow_plot_spec,
    format_records,
    lesson_per_layer,
    lesson_plot_spec,
    measure,
    profile,
    records_to_csv,
    records_to_json,
    seed_tuple,
)
from resgrad.lab.lesson import StackConfig, depth_table, run_stack
from resgrad.nn.model import GPT
from resgrad.plots import make_figure, plotted_series

SMALL = dict(depth=3, width=16, heads=2, seq=4, batch=2)


def q(records, quantity):
    """The per-layer means of one quantity, layer 0 first."""
    rs = sorted((r for r in records if r.quantity == quantity), key=lambda r: r.layer)
    return np.array([r.mean for r in rs])


# -- config ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        ({"variant": "sandwich"}, "variant must be one of .*got 'sandwich'"),
        ({"depth": 0}, "depth must be a positive integer, got 0"),
        ({"width": -4}, "width must be a positive integer, got -4"),
        ({"heads": 0}, "heads must be a positive integer, got 0"),
        ({"seq": 0}, "seq must be a positive integer"),
        ({"batch": 0}, "batch must be a positive integer"),
        ({"width": 30, "heads": 4}, "width must be divisible by heads, got width 30 and heads 4"),
        ({"loss": "mse"}, "loss must be one of ones, randn, lm, got 'mse'"),
        ({"init": "kaiming"}, "init must be one of"),
        ({"seeds": ()}, "at least one seed"),
        ({"seeds": (1, 1)}, "distinct"),
        ({"seeds": (-1,)}, "seed must be an integer in"),
        ({"scale": float("nan")}, "scale must be a finite number"),
    ],
)
def test_bad_config_names_the_field_and_value(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        FlowConfig(**kwargs)


def test_seeds_must_be_a_sequence():
    with pytest.raises(TypeError, match="seeds must be a sequence"):
        FlowConfig(seeds=3)


def test_the_lessons_stack_needs_no_heads():
    FlowConfig(variant="lesson-plain", width=30, heads=4)  # no error: heads do not apply


def test_config_is_frozen():
    with pytest.raises(Exception, match="cannot assign"):
        FlowConfig().depth = 3


# -- records ------------------------------------------------------------------------------


def test_records_cover_every_layer_and_quantity():
    cfg = FlowConfig(variant="pre-ln", **SMALL, seeds=(0, 1))
    recs = measure(cfg)
    quantities = list(dict.fromkeys(r.quantity for r in recs))
    assert quantities[:3] == ["stream_grad", "stream_act", "param_grad"]
    assert "param_grad:attn.w_qkv" in quantities and "param_grad:ln1.g" in quantities
    for quantity in quantities:
        layers = [r.layer for r in recs if r.quantity == quantity]
        n = cfg.depth + 1 if quantity.startswith("stream") else cfg.depth
        assert layers == list(range(n)), quantity
    r = recs[0]
    assert (r.variant, r.depth, r.width, r.heads, r.seq, r.batch) == ("pre-ln", 3, 16, 2, 4, 2)
    assert (r.init, r.loss, r.n_seeds) == ("gpt2", "lm", 2)
    assert all(x.min <= x.mean <= x.max and x.std >= 0 for x in recs)


def test_block_param_grad_is_the_norm_of_its_parameters():
    recs = measure(FlowConfig(variant="rezero", **SMALL))
    names = {r.quantity for r in recs if r.quantity.startswith("param_grad:")}
    for i in range(3):
        parts = [r.mean for r in recs if r.quantity in names and r.layer == i]
        total = next(r.mean for r in recs if r.quantity == "param_grad" and r.layer == i)
        assert total == pytest.approx(math.sqrt(sum(p * p for p in parts)), rel=1e-12)


def test_seed_averaging_is_mean_std_min_max_over_the_seeds():
    cfg = FlowConfig(variant="post-ln", **SMALL, seeds=(3, 7, 11))
    recs = measure(cfg)
    one = [profile(cfg, s).stream_grad for s in cfg.seeds]  # 3 x (L+1,)
    v = np.stack(one)  # (3, L+1)
    rs = [r for r in recs if r.quantity == "stream_grad"]
    np.testing.assert_allclose([r.mean for r in rs], v.mean(0), rtol=1e-13)
    np.testing.assert_allclose([r.std for r in rs], v.std(0), rtol=1e-10, atol=1e-300)
    np.testing.assert_array_equal([r.min for r in rs], v.min(0))
    np.testing.assert_array_equal([r.max for r in rs], v.max(0))
    assert any(r.std > 0 for r in rs)  # the seeds really differ
    single = measure(FlowConfig(variant="post-ln", **SMALL, seeds=(3,)))
    assert all(r.std == 0 and r.min == r.mean == r.max for r in single)
    assert q(single, "stream_grad").tolist() == v[0].tolist()


def test_same_seed_same_numbers():
    cfg = FlowConfig(variant="deepnorm", **SMALL, seeds=(0, 1))
    assert measure(cfg) == measure(cfg)


def test_csv_and_json_carry_every_record_at_full_precision():
    recs = measure(FlowConfig(variant="pre-ln", **SMALL, seeds=(0, 1)))
    rows = list(csv.DictReader(io.StringIO(records_to_csv(recs))))
    assert len(rows) == len(recs)
    assert list(rows[0]) == list(recs[0].as_dict())
    for row, r in zip(rows, recs):
        assert float(row["mean"]) == r.mean and int(row["layer"]) == r.layer
        assert row["quantity"] == r.quantity
    data = json.loads(records_to_json(recs))
    assert data == [r.as_dict() for r in recs]


def test_table_lists_every_layer():
    recs = measure(FlowConfig(variant="lesson-residual", depth=4, width=8, batch=2))
    lines = format_records(recs).splitlines()
    assert lines[0] == "gradient flow at initialization (lesson:0.5 init, L=4)"
    assert "grad mean" in lines[1] and len(lines) == 3 + 5


# -- what is measured is what the model computes ---------------------------------------


def test_lm_profile_is_the_models_own_stream_gradient():
    cfg = FlowConfig(variant="pre-ln", **SMALL)
    prof = profile(cfg, 4)
    gpt = GPT(cfg.gpt_config(), seed=4, dtype=np.float64)
    seq = np.random.default_rng([4, 1]).integers(0, cfg.vocab, size=(2, 5))
    _, _, cache = gpt.forward(seq[:, :-1], seq[:, 1:])
    grads, dxs = gpt.backward_stream(cache)
    np.testing.assert_array_equal(prof.stream_grad, [np.linalg.norm(d) for d in dxs])
    np.testing.assert_array_equal(prof.stream_act, [np.linalg.norm(x) for x in cache.xs])
    for i in range(3):
        assert prof.param_grad["mlp.w_fc"][i] == np.linalg.norm(grads[f"blocks.{i}.mlp.w_fc"])


def test_given_tokens_are_used_and_checked():
    cfg = FlowConfig(variant="pre-ln", **SMALL)
    tokens = np.arange(10).reshape(2, 5) % cfg.vocab
    a, b = profile(cfg, 0, tokens=tokens), profile(cfg, 0)
    assert not np.array_equal(a.stream_grad, b.stream_grad)
    assert np.array_equal(profile(cfg, 0, tokens=tokens).stream_grad, a.stream_grad)
    with pytest.raises(ValueError, match=r"tokens must have shape \(batch, seq \+ 1\)"):
        profile(cfg, 0, tokens=tokens[:, :4])
    with pytest.raises(ValueError, match="tokens must be integers in"):
        profile(cfg, 0, tokens=tokens + 100)
    with pytest.raises(ValueError, match="tokens are for the 'lm' loss"):
        profile(FlowConfig(variant="pre-ln", loss="randn", **SMALL), 0, tokens=tokens)


def test_given_weights_replace_the_initialization():
    cfg = FlowConfig(variant="pre-ln", **SMALL)
    other = GPT(cfg.gpt_config(), seed=9, dtype=np.float64).params
    a = profile(cfg, 0, params=other)
    assert not np.array_equal(a.param_grad[""], profile(cfg, 0).param_grad[""])
    # seed 0's data on seed 9's weights: the weights alone decide the blocks
    b = profile(cfg, 0, params={k: v.copy() for k, v in other.items()})
    np.testing.assert_array_equal(a.stream_grad, b.stream_grad)
    with pytest.raises(ValueError, match="params lacks"):
        profile(cfg, 0, params={"wte": other["wte"]})
    bad = dict(other, wte=np.zeros((3, 3)))
    with pytest.raises(ValueError, match=r"params\['wte'\] has shape"):
        profile(cfg, 0, params=bad)


def test_the_ones_loss_vanishes_exactly_under_a_final_layernorm():
    # sum(LN(s)) = sum(b) for every s: the documented reason to offer "randn"
    ones = profile(FlowConfig(variant="post-ln", loss="ones", **SMALL), 0)
    randn = profile(FlowConfig(variant="post-ln", loss="randn", **SMALL), 0)
    assert ones.stream_grad[-1] == math.sqrt(2 * 4 * 16)
    assert ones.stream_grad[0] < 1e-10 * ones.stream_grad[-1]
    assert randn.stream_grad[0] > 1e-2 * randn.stream_grad[-1]


# -- the lesson's stack ----------------------------------------------------------------


def test_lesson_variants_are_the_lessons_own_numbers():
    res = measure(FlowConfig(variant="lesson-residual", depth=20, width=16, batch=4, seeds=(42,)))
    plain = measure(FlowConfig(variant="lesson-plain", depth=20, width=16, batch=4, seeds=(42,)))
    row = depth_table()[-1]
    assert q(res, "stream_grad")[0] == row.with_residual  # 25.643279
    assert q(plain, "stream_grad")[0] == row.no_residual  # 8.262664e-07
    prof = run_stack(StackConfig(), 20, residual=True)
    assert q(res, "param_grad").tolist() == list(prof.weight_grad_norms)
    assert q(res, "stream_act").tolist() == list(prof.act_norms)
    assert res[0].loss == "ones" and res[0].heads == 0 and res[0].seq == 1


def test_lesson_per_layer_rows_start_with_the_lessons_table():
    rows = lesson_per_layer()
    assert [r.depth for r in rows] == [1] * 2 + [5] * 6 + [10] * 11 + [20] * 21
    firsts = [r for r in rows if r.layer == 0]
    for r, t in zip(firsts, depth_table()):
        assert (r.no_residual, r.with_residual) == (t.no_residual, t.with_residual)
    lasts = [r for r in rows if r.layer == r.depth]
    assert all(r.no_residual == r.with_residual == 8.0 for r in lasts)


# -- plots show exactly the records ------------------------------------------------------


def test_flow_plot_series_are_the_records_means():
    recs = measure(FlowConfig(variant="pre-ln", **SMALL, seeds=(0, 1)))
    recs += measure(FlowConfig(variant="none", **SMALL, seeds=(0, 1)))
    spec = flow_plot_spec(recs)
    drawn = plotted_series(make_figure(spec))
    assert list(drawn) == ["pre-ln", "none"]
    for v in ("pre-ln", "none"):
        x, y = drawn[v]
        rs = [r for r in recs if r.variant == v]
        np.testing.assert_array_equal(y, q(rs, "stream_grad"))
        np.testing.assert_array_equal(x, np.arange(4))
    s = spec.series[0]
    assert s.lo == tuple(r.min for r in recs if r.quantity == "stream_grad")[:4]
    assert make_figure(spec).axes[0].get_yscale() == "log"
    pg = flow_plot_spec(recs, "param_grad:mlp.w_fc").series[1]
    assert list(pg.y) == q([r for r in recs if r.variant == "none"], "param_grad:mlp.w_fc").tolist()
    with pytest.raises(ValueError, match="no records of quantity"):
        flow_plot_spec(recs, "param_grad:nothing")


def test_lesson_plot_series_are_the_per_layer_rows():
    spec = lesson_plot_spec(StackConfig(), depth=10)
    rows = lesson_per_layer(StackConfig(depths=(10,)))
    drawn = plotted_series(make_figure(spec))
    plain, res = list(drawn.values())
    assert plain[1].tolist() == [r.no_residual for r in rows]
    assert res[1].tolist() == [r.with_residual for r in rows]


def test_aggregate_needs_a_profile():
    with pytest.raises(ValueError, match="at least one profile"):
        aggregate(FlowConfig(), [])


# -- the science: each scheme's profile at initialization, as the papers say --------------
#
# depth 24, width 32; the numbers in the comments are what these seeds measure.

SCI = dict(depth=24, width=32, heads=4, seq=8, batch=4, seeds=(0, 1, 2))


def sci(variant, init="gpt2", **kw):
    return measure(FlowConfig(**{**SCI, "variant": variant, "init": init, **kw}))


def test_lesson_no_residual_vanishes_geometrically_residual_does_not():
    plain = q(sci("lesson-plain", width=16), "stream_grad")
    res = q(sci("lesson-residual", width=16), "stream_grad")
    assert plain[0] < 1e-5 * plain[-1]  # ~4e-7 of the upstream norm
    assert np.all(np.diff(plain) > 0)  # every layer shrinks it on the way down
    assert res.min() >= 0.9 * res[-1]  # the + x highway keeps it at least O(1)


def test_transformer_without_residual_vanishes_at_gpt2_init():
    g = q(sci("none"), "stream_grad")
    assert g[0] < 1e-9 * g[-1]  # ~1e-13: nothing reaches the input


def test_pre_ln_gradient_is_uniform_across_layers_at_gpt2_init():
    # Xiong et al. 2020: Pre-LN gradients are well behaved at init; the identity path
    # carries dL/dx_L to every layer untouched by any LayerNorm
    g = q(sci("pre-ln"), "stream_grad")
    assert g.max() / g.min() < 1.25  # ~1.09 across 25 layers
    assert 0.5 < g[0] / g[-1] < 2.0  # the input side stays O(1)
    p = q(sci("pre-ln"), "param_grad")
    assert p.max() / p.min() < 1.5


def test_post_ln_last_layer_gradient_does_not_shrink_with_depth_pre_ln_does():
    # Xiong et al. 2020, Theorem 1 (Xavier init): the last FFN weight's gradient is
    # O(d sqrt(ln d)) for Post-LN, independent of L, and O(d sqrt(ln d / L)) for Pre-LN
    w = "param_grad:mlp.w_proj"
    pre24, pre6 = q(sci("pre-ln", "xavier"), w)[-1], q(sci("pre-ln", "xavier", depth=6), w)[-1]
    post24, post6 = q(sci("post-ln", "xavier"), w)[-1], q(sci("post-ln", "xavier", depth=6), w)[-1]
    assert pre24 / pre6 < 0.65  # ~0.52, sqrt(6 / 24) = 0.5
    assert 0.8 < post24 / post6 < 1.25  # ~0.94
    # so at depth the parameters near the output get far larger gradients in Post-LN
    assert post24 > 2.5 * pre24  # ~3.7


def test_rezero_at_alpha_zero_is_identity_and_preserves_the_gradient_exactly():
    recs = sci("rezero")
    g, a = q(recs, "stream_grad"), q(recs, "stream_act")
    assert np.all(g == g[-1]) and np.all(a == a[0])  # bit for bit
    assert np.all(q(recs, "param_grad:attn.w_qkv") == 0)  # f's weights get no gradient yet
    assert np.all(q(recs, "param_grad:alpha") > 0)  # only alpha does: it switches f on


def test_rezero_with_alpha_switched_on_no_longer_preserves_it():
    cfg = FlowConfig(variant="rezero", **{**SCI, "seeds": (0,)})
    params = GPT(cfg.gpt_config(), seed=0, dtype=np.float64).params
    for i in range(cfg.depth):
        params[f"blocks.{i}.alpha"] = np.array([0.5])
    g = profile(cfg, 0, params=params).stream_grad
    assert not np.all(g == g[-1])


def test_deepnorm_keeps_the_stream_gradient_flat_post_ln_does_not():
    # DeepNet (Wang et al. 2022): LN(alpha x + f(x)), alpha = (2L)^(1/4), and the
    # branch weights scaled by beta = (8L)^(-1/4): every block stays close to identity
    dn = q(sci("deepnorm", "xavier"), "stream_grad")[1:]
    post = q(sci("post-ln", "xavier"), "stream_grad")[1:]
    assert dn.max() / dn.min() < 1.15  # ~1.04
    assert post.max() / post.min() > dn.max() / dn.min()  # ~3.2
    # block 0 reads the raw 0.02-scale embeddings, so its LayerNorm's gradient is larger
    p = q(sci("deepnorm", "xavier"), "param_grad")[1:]
    assert p.max() / p.min() < 1.3  # ~1.03


# DeepNet's bounded model update and GPT-2's scaled init are measured by resgrad.lab.experiments
# (resgrad claims) and checked at every seed in tests/lab/test_claims.py.


def test_seed_tuple_takes_a_count_or_the_seeds():
    assert seed_tuple(3) == (0, 1, 2) and seed_tuple(np.int64(1)) == (0,)
    assert seed_tuple([100, 7]) == (100, 7) and seed_tuple(range(2, 4)) == (2, 3)
    for bad, msg in ((0, "seeds must be a positive integer"), ((), "at least one seed"),
                     ((2, 5, 2), "seeds must be distinct, got 2 twice"),
                     ((1, 2**32), r"seed must be an integer in \[0, 2\*\*32\)"),
                     ((True,), "seed must be an integer")):  # fmt: skip
        with pytest.raises(ValueError, match=msg):
            seed_tuple(bad)
    with pytest.raises(TypeError, match="seeds must be a sequence of integers"):
        seed_tuple("012")


# -- statistics and bounds by hand ---------------------------------------------------------


def _hand_profile(seed, grads):
    """A Profile of a 2-block stack whose stream gradients are ``grads`` (3 values)."""
    from resgrad.lab.flow import Profile

    g = np.asarray(grads, dtype=np.float64)  # (L + 1,)
    return Profile(seed=seed, stream_grad=g, stream_act=g * 10, param_grad={"": g[:2] / 10})


def test_aggregate_by_hand_is_mean_population_std_min_max_over_seeds_per_layer():
    """Three seeds (rows) of three layers (columns): each statistic is over the seeds, one
    per layer; std is the population std (ddof=0), 0 for one seed."""
    cfg = FlowConfig(variant="pre-ln", depth=2, width=8, heads=2, seeds=(5, 6, 7))
    grads = [(1.0, 4.0, 2.0), (2.0, 4.0, 8.0), (6.0, 4.0, 5.0)]  # layer 1: the same everywhere
    recs = aggregate(cfg, [_hand_profile(s, g) for s, g in zip(cfg.seeds, grads)])
    sg = [r for r in recs if r.quantity == "stream_grad"]
    assert [r.layer for r in sg] == [0, 1, 2] and all(r.n_seeds == 3 for r in sg)
    assert [r.mean for r in sg] == [3.0, 4.0, 5.0]
    # ((1-3)^2 + (2-3)^2 + (6-3)^2) / 3 = 14/3; layer 2: (9 + 9 + 0) / 3 = 6
    assert [r.std for r in sg] == pytest.approx([(14 / 3) ** 0.5, 0.0, 6**0.5], rel=1e-15)
    assert [(r.min, r.max) for r in sg] == [(1.0, 6.0), (4.0, 4.0), (2.0, 8.0)]
    pg = [r for r in recs if r.quantity == "param_grad"]
    assert [r.layer for r in pg] == [0, 1] and [r.mean for r in pg] == pytest.approx([0.3, 0.4])
    (one,) = [r for r in aggregate(cfg, [_hand_profile(5, grads[0])]) if r.layer == 2
              and r.quantity == "stream_grad"]  # fmt: skip
    assert (one.mean, one.std, one.min, one.max, one.n_seeds) == (2.0, 0.0, 2.0, 2.0, 1)
    lines = format_records(recs).splitlines()
    assert lines[3].split("|")[2:6] == [f" {3.0:>11.4e} ", f" {(14 / 3) ** 0.5:>10.3e} ",
                                        f" {1.0:>10.3e} ", f" {6.0:>10.3e} "]  # fmt: skip


@pytest.mark.parametrize(
    "kwargs, ok",
    [({"depth": 1}, True), ({"depth": 0}, False), ({"batch": 1}, True), ({"batch": 0}, False),
     ({"seeds": (2**32 - 1,)}, True), ({"seeds": (2**32,)}, False), ({"seeds": (0,)}, True),
     ({"seeds": (-1,)}, False), ({"vocab": 1}, True), ({"vocab": 0}, False)],
)  # fmt: skip
def test_each_bound_just_inside_and_just_outside(kwargs, ok):
    name = next(iter(kwargs)).rstrip("s")
    if ok:
        FlowConfig(**{**SMALL, **kwargs})
    else:
        with pytest.raises(ValueError, match=name):
            FlowConfig(**{**SMALL, **kwargs})


def test_tokens_just_inside_and_just_outside_the_vocabulary():
    cfg = FlowConfig(variant="pre-ln", **SMALL, vocab=7)
    top = np.full((2, 5), 6)  # V - 1: the last token there is
    profile(cfg, 0, tokens=top)
    profile(cfg, 0, tokens=top * 0)
    for bad in (top + 1, top * 0 - 1):
        with pytest.raises(ValueError, match=r"tokens must be integers in \[0, 7\)"):
            profile(cfg, 0, tokens=bad)
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*32\)"):
        profile(cfg, 2**32)
    profile(cfg, 2**32 - 1)


def test_positive_ints_refuses_a_value_twice_and_below_one():
    from resgrad.lab.flow import positive_ints

    assert positive_ints("depths", (1, 3)) == (1, 3) and positive_ints("d", [np.int64(2)]) == (2,)
    for bad, msg in (((3, 1, 3), r"depths must be distinct, got \(3, 1, 3\)"),
                     ((0,), "depths must hold positive integers, got 0"),
                     ((True,), "depths must hold positive integers, got True"),
                     ((), "depths must list at least one value")):  # fmt: skip
        with pytest.raises(ValueError, match=msg):
            positive_ints("depths", bad)


def test_describe_names_the_init_and_the_depth_range_of_stacks_at_init():
    from resgrad.lab.flow import describe

    recs = [r for d in (4, 2) for r in measure(FlowConfig(variant="lesson-residual", depth=d,
                                                          width=8, batch=2))]  # fmt: skip
    assert describe(recs) == "at initialization (lesson:0.5 init, L=2..4)"
    assert describe([r for r in recs if r.depth == 4]) == "at initialization (lesson:0.5 init, L=4)"
