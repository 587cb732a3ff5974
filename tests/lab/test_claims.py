"""DeepNet's bounded update and GPT-2's scaled init: each claim's direction holds at every seed."""

import numpy as np
import pytest

from resgrad.cli import main
from resgrad.lab.experiments import (
    ClaimRow,
    claim_table,
    format_claims,
    seeds_text,
    stream_growth,
    update_size,
)
from resgrad.nn.model import GPT, GPTConfig

SEEDS = range(5)


def test_deepnorm_bounds_the_model_update_post_ln_does_not():
    """Wang et al. 2022: one SGD step moves DeepNorm's output by about 1%, at every depth."""
    for s in SEEDS:
        dn = [update_size("deepnorm", L, s) for L in (6, 24)]
        post = [update_size("post-ln", L, s) for L in (6, 24)]
        assert max(dn) < 0.05, (s, dn)  # bounded: ~0.01
        assert max(dn) / min(dn) < 2, (s, dn)  # and flat in depth
        assert all(p > 3 * d for p, d in zip(post, dn)), (s, post, dn)  # 5-100x larger


def test_update_size_is_what_it_says():
    """By hand: the same step on a 2-layer post-LN model."""
    cfg = GPTConfig(vocab_size=65, block_size=8, n_layer=2, n_head=4, n_embd=32,
                    variant="post-ln", init="xavier")  # fmt: skip
    gpt = GPT(cfg, seed=3, dtype=np.float64)
    ids = np.random.default_rng([3, 1]).integers(0, 65, size=(4, 9))
    _, _, c0 = gpt.forward(ids[:, :-1], ids[:, 1:])
    grads = gpt.backward(c0)
    for k in gpt.params:
        if k.startswith("blocks."):
            gpt.params[k] = gpt.params[k] - 0.05 * grads[k]
    _, _, c1 = gpt.forward(ids[:, :-1], ids[:, 1:])
    want = np.linalg.norm(c1.xs[-1] - c0.xs[-1]) / np.linalg.norm(c0.xs[-1])
    assert update_size("post-ln", 2, 3, lr=0.05) == pytest.approx(want, rel=1e-12)
    assert update_size("post-ln", 2, 3, lr=0.0) == 0.0


def test_gpt2_scaled_init_keeps_the_stream_from_growing_with_depth():
    """Radford et al. 2019: w_proj / sqrt(2L) keeps ||x_L|| / ||x_0|| flat; undone, it grows."""
    for s in range(3):
        scaled = [stream_growth(L, s, True) for L in (6, 48)]  # ~1.07, ~1.06
        unscaled = [stream_growth(L, s, False) for L in (6, 48)]  # ~1.6, ~4.1
        assert abs(scaled[1] / scaled[0] - 1) < 0.1, (s, scaled)
        assert unscaled[1] > 1.5 * unscaled[0], (s, unscaled)
        assert unscaled[1] > 1.5 * scaled[1], (s, unscaled, scaled)


def test_the_table_is_mean_and_spread_over_seeds(capsys):
    rows = claim_table("scaled-init", depths=(4,), seeds=(0, 1, 2))
    assert [r.setting for r in rows] == ["scaled", "unscaled"]
    vals = [stream_growth(4, s, True) for s in (0, 1, 2)]
    assert rows[0].values == tuple(vals) and rows[0].mean == pytest.approx(np.mean(vals))
    assert rows[0].std == pytest.approx(np.std(vals, ddof=1))
    assert "| scaled-init | scaled | 4 |" in format_claims(rows)
    assert main(["claims", "update-size", "--depths", "2", "--seeds", "3"]) == 0
    out = capsys.readouterr().out
    assert "over 3 seeds" in out and "| update-size | deepnorm | 2 |" in out
    with pytest.raises(ValueError, match="unknown claim"):
        claim_table("nope")


def test_stream_growth_is_what_it_says():
    """By hand: ||x_L|| / ||x_0|| of the 'lm' pass (seed s: its init and its tokens), with
    the residual output projections multiplied back by sqrt(2L) for the unscaled init."""
    L, s = 3, 4
    cfg = GPTConfig(vocab_size=65, block_size=16, n_layer=L, n_head=4, n_embd=32,
                    variant="pre-ln", init="gpt2")  # fmt: skip
    ids = np.random.default_rng([s, 1]).integers(0, 65, size=(4, 17))  # (B, T + 1)
    want = {}
    for scaled in (True, False):
        gpt = GPT(cfg, seed=s, dtype=np.float64)
        if not scaled:
            for i in range(L):
                for k in (f"blocks.{i}.attn.w_proj", f"blocks.{i}.mlp.w_proj"):
                    gpt.params[k] = gpt.params[k] * np.sqrt(2 * L)
        _, _, c = gpt.forward(ids[:, :-1], ids[:, 1:])
        want[scaled] = np.linalg.norm(c.xs[-1]) / np.linalg.norm(c.xs[0])
    assert stream_growth(L, s, True) == pytest.approx(want[True], rel=1e-12)
    assert stream_growth(L, s, False) == pytest.approx(want[False], rel=1e-12)
    assert want[False] > want[True]  # the two really differ


def test_a_rows_mean_std_and_table_line_by_hand():
    r = ClaimRow("update-size", "post-ln", 6, (1.0, 2.0, 4.0), (0, 1, 2))
    assert r.mean == pytest.approx(7 / 3)
    # ddof = 1: ((1 - 7/3)^2 + (2 - 7/3)^2 + (4 - 7/3)^2) / 2 = (16 + 1 + 25) / 18 = 7 / 3
    assert r.std == pytest.approx(np.sqrt(7 / 3))
    assert ClaimRow("update-size", "post-ln", 6, (0.5,)).std == 0.0  # one seed: no spread
    table = format_claims([r, ClaimRow("update-size", "deepnorm", 24, (0.25, 0.75), (0, 1))])
    lines = table.splitlines()
    assert lines[0] == "| claim | setting | depth | mean ± std over 3 seeds (0-2) | min .. max |"
    assert lines[2] == "| update-size | post-ln | 6 | 2.33 ± 1.5 | 1 .. 4 |"
    assert lines[3] == "| update-size | deepnorm | 24 | 0.5 ± 0.35 | 0.25 .. 0.75 |"


def test_explicit_seeds_are_measured_and_named():
    rows = claim_table("update-size", depths=(2,), seeds=(11, 3))
    assert [r.setting for r in rows] == ["post-ln", "deepnorm"]
    assert rows[1].values == (update_size("deepnorm", 2, 11), update_size("deepnorm", 2, 3))
    assert rows[0].seeds == (11, 3)
    assert claim_table("update-size", depths=(2,), seeds=2)[0].seeds == (0, 1)  # a count
    assert seeds_text((0, 1, 2, 7, 9, 10)) == "0-2, 7, 9-10"
    for bad, msg in (((1, 1), "seeds must be distinct"), ((-3,), "seed must be an integer"),
                     (0, "seeds must be a positive integer")):  # fmt: skip
        with pytest.raises(ValueError, match=msg):
            claim_table("update-size", depths=(2,), seeds=bad)


@pytest.mark.parametrize(
    "depths, message",
    [((4, 4), r"depths must be distinct, got \(4, 4\)"), ((0,), "depths must hold positive"),
     ((), "depths must list at least one value"), (4, "depths must be a sequence")],
)  # fmt: skip
def test_a_depth_given_twice_or_out_of_bounds_is_refused(depths, message):
    """A depth given twice would be measured twice, into two equal rows of the table."""
    with pytest.raises((ValueError, TypeError), match=message):
        claim_table("scaled-init", depths=depths, seeds=1)


def test_the_bounds_of_depths_and_seeds_just_inside():
    (row, _) = claim_table("scaled-init", depths=(1,), seeds=(2**32 - 1,))
    assert (row.depth, row.seeds) == (1, (2**32 - 1,))
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*32\)"):
        claim_table("scaled-init", depths=(1,), seeds=(2**32,))


def test_the_table_of_three_seeds_by_hand():
    """mean, std (ddof=1), min and max of 1, 2 and 6: each differs from its look-alikes
    (the median 2, the population std 2.16, the seeds' first and last values)."""
    r = ClaimRow("scaled-init", "scaled", 4, (2.0, 6.0, 1.0), (0, 1, 2))
    assert r.mean == 3.0 and r.std == pytest.approx(7**0.5, rel=1e-15)
    assert format_claims([r]).splitlines()[2] == "| scaled-init | scaled | 4 | 3 ± 2.6 | 1 .. 6 |"
