"""The study's calibration (resgrad.lab.robustness.regression): shuffles that keep what a
stratum shares, one bootstrap serving many responses, the permutation test and the rate at
which the design says yes when nothing is there, measured over many synthetic draws; and
the verdict that needs both the interval and the test."""

import numpy as np
import pytest

from resgrad.lab.robustness import levels as rl
from resgrad.lab.robustness import regression as rg
from resgrad.lab.robustness import stats as rs

SCHEMES = ("pre-ln", "post-ln", "deepnorm", "rezero")


def test_shuffles_stay_inside_their_stratum_and_are_seeded():
    y = np.arange(12, dtype=np.float64)
    strata = ["a"] * 4 + ["b"] * 4 + [("c", 1)] * 4
    Y = rg.shuffled(y, strata, 50, seed=3)
    assert Y.shape == (12, 50)
    for rows in (slice(0, 4), slice(4, 8), slice(8, 12)):  # each stratum keeps its values
        assert (np.sort(Y[rows], axis=0) == y[rows][:, None]).all()
    assert len({tuple(c) for c in Y.T}) > 10  # the shuffles differ from one another
    assert np.array_equal(Y, rg.shuffled(y, strata, 50, seed=3))  # the same seed, the same
    assert not np.array_equal(Y, rg.shuffled(y, strata, 50, seed=4))
    one = rg.shuffled(y, [0] * 12, 1, seed=0)[:, 0]  # one stratum: a permutation of all
    assert sorted(one) == y.tolist() and not np.array_equal(one, y)
    with pytest.raises(ValueError, match="^11 strata labels for 12 values"):
        rg.shuffled(y, strata[:11], 5)


def test_one_bootstrap_serving_many_responses_equals_one_each_to_rounding():
    rng = np.random.default_rng(0)
    M = 30
    X = np.column_stack([rng.normal(size=M), rng.normal(size=M)])
    clusters = np.tile(np.arange(5), 6)
    Y = rng.normal(size=(M, 4))
    lo, hi = rg._intervals(Y, X, clusters, 300, 7)
    for r in range(4):
        one = rg.bootstrap(Y[:, r], X, ["a", "b"], clusters, B=300, seed=7)
        got = [one[n] for n in ("intercept", "a", "b")]
        assert np.allclose(got, np.column_stack([lo[:, r], hi[:, r]]), rtol=1e-12, atol=0)


def _null_design(rng, seeds=5, strata=8):
    """Rows of ``strata`` strata x ``seeds`` seeds; y has a stratum effect and noise and
    nothing to do with x's first column, which varies within strata."""
    M = seeds * strata
    group = np.repeat(np.arange(strata), seeds)  # (M,)
    x = rng.normal(size=M) + 0.5 * group
    X = np.column_stack([x, (group == 1).astype(float), (group == 2).astype(float)])
    y = 0.3 * group + rng.normal(size=M)
    return y, X, np.tile(np.arange(seeds), strata), group.tolist()


def test_on_nothing_the_rule_says_yes_at_about_the_nominal_rate():
    """Over 60 draws of data with no effect: the permutation test rejects about 5% of the
    time, the verdict's rule calls about 5% of the shuffles, and the interval alone, from 5
    seeds (126 distinct resamples), calls more: the reason the rule needs the test."""
    rng = np.random.default_rng(11)
    cals = [rg.calibrate(*_null_design(rng), B=400, seed=d, permutations=100) for d in range(60)]
    reject = np.mean([c.p_value < 0.05 for c in cals])
    rule = np.mean([c.rule_rate for c in cals])
    interval = np.mean([c.interval_rate for c in cals])
    assert reject <= 0.15
    assert 0.01 <= rule <= 0.08
    assert interval > rule + 0.03  # the percentile interval of few clusters is too narrow
    assert all(c.permutations == 100 and 1 / 101 <= c.p_value <= 1 for c in cals)


def test_a_real_effect_is_found_by_the_test_and_kept_by_the_verdict():
    rng = np.random.default_rng(5)
    y, X, clusters, strata = _null_design(rng)
    y = y + 2.0 * X[:, 0]  # the claim true within strata
    cal = rg.calibrate(y, X, clusters, strata, B=400, seed=0, permutations=200)
    assert cal.p_value == pytest.approx(1 / 201)  # no shuffle reaches the observed slope
    lo, hi = rg.bootstrap(y, X, ["x", "g1", "g2"], clusters, B=400)["x"]
    word, sentence = rs.verdict((2.0, lo, hi), 3.0, 0.5, 0.5, 40, 5, calibration=cal)
    assert word == "supported" and sentence.endswith(cal.says())
    assert "permutation p 0.005; on 200 shuffles the interval alone" in sentence


def test_an_interval_that_excludes_0_without_the_test_is_not_a_verdict():
    weak = rg.Calibration(100, 0.2, 0.15, 0.05)
    strong = weak._replace(p_value=0.01)
    for ci, word in (((0.5, 0.1, 0.9), "supported"), ((-0.5, -0.9, -0.1), "contradicted")):
        assert rs.verdict(ci, 3.0, 0.1, 0.1, 40, 5, calibration=weak)[0] == rs.VERDICTS[2]
        assert rs.verdict(ci, 3.0, 0.1, 0.1, 40, 5, calibration=strong)[0] == word
        assert rs.verdict(ci, 3.0, 0.1, 0.1, 40, 5)[0] == word  # uncalibrated: the interval
    # the test alone does not make a verdict either: the interval must exclude 0 too
    assert rs.verdict((0.1, -0.2, 0.4), 3.0, 0.1, 0.1, 40, 5, calibration=strong)[0] == (
        rs.VERDICTS[2])  # fmt: skip


def test_calibrate_refuses_a_count_of_shuffles_that_is_not_one():
    y, X, clusters, strata = _null_design(np.random.default_rng(0))
    for bad in (0, 2.5, -1):
        with pytest.raises(ValueError, match=f"^permutations={bad}; expected a whole number"):
            rg.calibrate(y, X, clusters, strata, B=10, seed=0, permutations=bad)


# --------------------------------------------------------------------------- through analyse


def _synthetic(scheme, depth, seed, it, loss, path, lesion):
    key = rl.ModelKey(scheme, depth, 0.0, seed)
    paths = tuple(f"{scheme}-L{depth}-s{seed}/ckpt-{i}.ckpt" for i in it)
    return rl.Trajectory(key, it, loss, {"mean_k": path, "block_dce": lesion}, paths)


def _models(beta, data_seed, loss_effect=0.3, noise=0.05, seeds=5):
    """4 schemes x depths 6, 12 x ``seeds`` seeds. Lesion cost = beta x path length + the
    loss's own effect + a scheme's; models reach a level at different losses of their
    nearest checkpoint, so a lesion cost driven by loss alone is there to be confused."""
    rng = np.random.default_rng(data_seed)
    it = np.arange(8) * 250
    out = []
    for s, scheme in enumerate(SCHEMES):
        for depth in (6, 12):
            for seed in range(seeds):
                loss = 2.4 + 0.2 * rng.random() + (1.6 + 0.2 * rng.random()) * np.exp(-it / 600)
                path = 2.0 + 0.5 * s + 0.1 * depth + rng.normal(0, 0.4) + 0.5 * (loss - 3)
                lesion = 0.5 + beta * path + loss_effect * (loss - 3) + 0.2 * s
                out.append(_synthetic(scheme, depth, seed, it, loss, path,
                                      lesion + rng.normal(0, noise, 8)))  # fmt: skip
    return out


@pytest.mark.parametrize(
    "beta, loss_effect, noise, word",
    [
        (0.5, 0.3, 0.05, "supported"),
        (-0.5, 0.3, 0.05, "contradicted"),
        (0.0, 0.3, 0.4, "not resolved at this size"),  # no effect
        (0.0, 2.0, 0.02, "not resolved at this size"),  # lesion cost driven by loss alone
    ],
)
def test_analyse_calibrated_says_what_the_models_hold(beta, loss_effect, noise, word):
    trajs = _models(beta, data_seed=3, loss_effect=loss_effect, noise=noise)
    levels = rl.choose_levels(trajs, n=3)
    results = rs.analyse(trajs, levels, B=300, permutations=100)
    assert [r.verdict for r in results] == [word] * 3, [r.sentence for r in results]
    for r in results:
        rec = r.record()
        assert rec["permutations"] == 100 and 0 < rec["permutation_p"] <= 1
        assert 0 <= rec["calibration_rule_rate"] <= rec["calibration_interval_rate"] <= 1
        assert r.sentence.endswith(r.calibration.says())
    plain = rs.analyse(trajs, levels[:1], B=300)[0]  # uncalibrated: said as NaN, not 0
    assert plain.calibration is None and plain.record()["permutations"] == 0
    assert np.isnan(plain.record()["permutation_p"])
