"""The k-deletion cost: exact over every set where there are at most EXACT_SETS, else a
balanced draw with a sampling interval (issue 47).

The references are written here: every subset by itertools.combinations, each deletion
done as a smaller GPT of the blocks left, the monotone cost and the interval's coverage on
a synthetic cost with one dominant block (no GPT).
"""

import itertools
import math

import numpy as np
import pytest

from resgrad.cli import main
from resgrad.lab.lesion import interventions as ls
from resgrad.lab.lesion import measure, tables
from resgrad.lab.lesion.study import LesionStudy, table_text
from resgrad.lab.robustness.experiment import RobustnessConfig
from resgrad.lab.study import text_windows
from resgrad.nn.model import GPT, GPTConfig

V = 20
IDS = np.random.default_rng(5).integers(0, V, 300)  # a "text" of 300 tokens


def _gpt(L, seed=0):
    cfg = GPTConfig(vocab_size=V, block_size=16, n_layer=L, n_head=2, n_embd=8, init="xavier")
    return GPT(cfg, seed=seed, dtype=np.float64)


def _kept(model, gone):
    """The pre-LN GPT of the blocks not in ``gone``, renumbered: the deletion done by hand."""
    L = model.cfg.n_layer
    keep = [i for i in range(L) if i not in gone]
    small = GPT(GPTConfig(vocab_size=V, block_size=16, n_layer=len(keep), n_head=2, n_embd=8),
                dtype=np.float64)  # fmt: skip
    for key in small.params:
        part = key.split(".")
        if part[0] == "blocks":  # block j of the small model is block keep[j] of the big one
            key_big = ".".join(["blocks", str(keep[int(part[1])]), *part[2:]])
        else:
            key_big = key
        small.params[key][...] = model.params[key_big]
    return small


def _ce(model, w):
    """Mean cross-entropy of ``model`` on windows w (B, T + 1), by hand in float64."""
    logits, _, _ = model.forward(w[:, :-1])  # (B, T, V)
    z = logits - logits.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))  # (B, T, V)
    return float(-np.take_along_axis(logp, w[:, 1:, None], axis=-1).mean())


def test_the_exact_cost_is_the_mean_over_every_subset_deleted_by_hand():
    m, seeds = _gpt(5), (0, 1)
    study = LesionStudy(seq=8, batch=2, seeds=seeds, what=("delete",), ks=(2, 3))
    table = tables.rows(study.run(m, IDS))
    for k in (2, 3):
        (row,) = [r for r in table if r.name == f"delete k={k}"]
        assert row.exact and row.samples == row.sets == math.comb(5, k)
        assert row.ci == (0.0,) * len(measure.METRICS)
        dce = []
        for gone in itertools.combinations(range(5), k):  # every subset, the reference's own
            small = _kept(m, gone)
            ws = [text_windows(IDS, 8, 2, s) for s in seeds]
            dce.append(np.mean([_ce(small, w) - _ce(m, w) for w in ws]))
        assert row.get("dce")[0] == pytest.approx(np.mean(dce), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("L, k, n", [(12, 5, 10), (12, 5, 60), (12, 6, 900), (20, 3, 1139),
                                     (7, 3, 34)])  # fmt: skip
def test_a_balanced_draw_deletes_every_block_as_often_or_once_more_and_is_seeded(L, k, n):
    for seed in range(20):
        sets = ls.balanced_sets(L, k, n, np.random.default_rng([seed, k, 0]))
        assert len(sets) == n == len(set(sets))  # distinct sets
        assert all(len(set(s)) == k and list(s) == sorted(s) and 0 <= s[0] for s in sets)
        counts = np.bincount([i for s in sets for i in s], minlength=L)  # (L,)
        assert counts.max() - counts.min() <= 1 and counts.sum() == n * k
    drawn = ls.deletion_sets(12, 5, 60, seed=3)  # the plan's draw is this one
    assert np.ptp(np.bincount([i for s in drawn for i in s], minlength=12)) == 0  # 25 each
    assert ls.deletion_sets(12, 5, 10, seed=3) == ls.deletion_sets(12, 5, 10, seed=3)
    assert ls.deletion_sets(12, 5, 10, seed=3) != ls.deletion_sets(12, 5, 10, seed=4)


def _cost(s):
    """A synthetic cost of deleting the blocks in s: block 0 costs 0.39 nats (the issue's first
    block), the others 0.01 each, and a pair (3, 7) 0.05 more together."""
    return 0.39 * (0 in s) + 0.01 * sum(i > 0 for i in s) + 0.05 * (3 in s and 7 in s)


def test_the_exact_cost_is_monotone_in_k_where_a_small_uniform_draw_is_not(monkeypatch):
    exact = [np.mean([_cost(s) for s in ls.deletion_sets(12, k, 20)]) for k in (1, 2, 3, 4)]
    assert all(math.comb(12, k) == len(ls.deletion_sets(12, k, 20)) for k in (1, 2, 3, 4))
    assert np.all(np.diff(exact) > 0)

    def uniform(k, seed):  # the draw before issue 47: 20 sets, each uniform at random
        rng = np.random.default_rng([seed, k, 0])
        return [np.mean([_cost(rng.choice(12, size=k, replace=False)) for _ in range(20)])]

    drawn = [[uniform(k, seed)[0] for k in (1, 2, 3, 4)] for seed in range(20)]
    assert any(np.any(np.diff(d) < 0) for d in drawn)  # some seed's curve falls with k
    monkeypatch.setattr(ls, "EXACT_SETS", 0)  # drawn, balanced, from k = 2 (C(12, 2) > 20)
    for seed in range(20):
        bal = [np.mean([_cost(s) for s in ls.deletion_sets(12, k, 20, seed)]) for k in (1, 2, 3, 4)]
        assert np.all(np.diff(bal) > 0), seed


def test_the_sampling_interval_covers_the_exact_mean_at_about_its_rate():
    L, k, K = 12, 5, 60  # C(12, 5) = 792 sets: drawn
    every = list(itertools.combinations(range(L), k))
    noise = np.random.default_rng(0).normal(0, 0.02, len(every))  # what blocks do together
    y_all = np.array([_cost(s) for s in every]) + noise  # (792,)
    f = dict(zip(every, y_all))
    exact = y_all.mean()
    hits, widths = 0, []
    for seed in range(300):
        sets = ls.deletion_sets(L, k, K, seed)
        y = np.array([[f[s]] for s in sets])  # (K, 1)
        mean, half = tables.sampled_mean(y, sets, L, len(every))
        hits += abs(mean[0] - exact) <= half[0]
        widths.append(half[0])
    assert 0.9 <= hits / 300 <= 0.99  # nominal 0.95 (measured here: 0.95)
    # a plain mean's interval would ignore block 0's 0.39 nats: balance takes it out
    plain = [_cost(s) for s in sets]
    assert np.mean(widths) < 0.5 * 1.96 * np.std(plain, ddof=1) / np.sqrt(K)
    # exact: no interval; one set of many: an infinite one
    assert tables.sampled_mean(y_all[:, None], every, L, len(every))[1][0] == 0.0
    assert tables.sampled_mean(y[:1], sets[:1], L, len(every))[1][0] == np.inf


def test_the_limit_is_exact_at_EXACT_SETS_sets_and_drawn_one_above():
    assert ls.EXACT_SETS == 500
    assert len(ls.deletion_sets(500, 1, 10)) == 500  # C(500, 1) = EXACT_SETS: every set
    assert len(ls.deletion_sets(501, 1, 10)) == 10  # 501: N drawn
    assert len(ls.deletion_sets(501, 1, 501)) == 501  # N as many as there are: every set
    assert len(ls.deletion_sets(12, 4, 10)) == 495 and len(ls.deletion_sets(12, 5, 10)) == 10
    for L, n in [(500, 500), (501, 10)]:  # the plan's count before it is built is the same
        assert len(ls.plan(L, what=("delete",), ks=(1,), samples=10)) == 1 + n


def test_the_cost_counts_the_sets_measured_and_refuses_before_work():
    m = _gpt(12)
    study = LesionStudy(seq=4, batch=1, seeds=(0,), what=("delete",), ks=(2, 5), samples=7)
    cost = study.cost(m.cfg, 1)
    assert cost.passes == 66 + 7  # k = 2: all 66; k = 5: 7 of 792
    res = study.run(m, IDS)
    assert res.block_passes == cost.blocks and len(res.lesions) - 1 == cost.passes
    tight = LesionStudy(seq=4, batch=1, seeds=(0,), what=("delete",), ks=(2,), budget=1e-9)
    with pytest.raises(ValueError, match="66 lesioned forward passes"):
        tight.require(m.cfg, 1)


def test_runs_share_their_sets_and_a_drawn_k_carries_its_interval_across_them():
    study = LesionStudy(seq=4, batch=1, seeds=(0, 1), what=("delete",), ks=(2, 5), samples=30)
    results = [study.run(_gpt(12, seed=s), IDS) for s in (0, 1)]
    table = tables.across_runs(results, ["a", "b"])
    two, five = table[1], table[2]
    assert two.exact and two.samples == 66 and two.ci == (0.0,) * 5
    assert not five.exact and five.samples == 30 and five.sets == 792
    js = [j for j, les in enumerate(results[0].lesions) if les.k == 5]
    per_set = np.mean([r.values[js].mean(axis=1) for r in results], axis=0)  # (K, M)
    sets = [results[0].lesions[j].deleted for j in js]
    mean, half = tables.sampled_mean(per_set, sets, 12, 792)
    np.testing.assert_allclose(five.ci, half, rtol=1e-12)
    assert five.mean == pytest.approx(tuple(mean), rel=1e-9)  # K = 30 < 2L: the sets' mean
    text = table_text(table)
    assert "± sampling" in text and "66 of 66" in text and "30 of 792" in text
    assert "exact" in text and f"±{five.ci[1]:.4f}" in text


def test_the_cli_prints_exact_and_drawn_ks_and_writes_their_interval(capsys):
    assert main(["lesion", "lesson", "--depth", "12", "--what", "delete", "--k", "2,5",
                 "--format", "json"]) == 0  # fmt: skip
    import json

    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["k"], r["samples"], r["sets"]) for r in rows[1:]] == [(2, 66, 66), (5, 10, 792)]
    assert rows[1]["change_ci"] == 0.0 and rows[2]["change_ci"] > 0
    assert main(["lesion", "lesson", "--depth", "12", "--what", "delete", "--k", "2,5"]) == 0
    out = capsys.readouterr().out
    assert "± sampling" in out and "exact" in out and "10 of 792" in out


def test_the_robustness_studys_delete2_is_exact_at_its_depths():
    _, lesion = RobustnessConfig().studies()
    for L in RobustnessConfig().depths:  # 6 and 12: 15 and 66 sets, every one
        deletes = [les for les in lesion.plan(L) if les.kind == "delete"]
        assert len(deletes) == math.comb(L, 2) <= ls.EXACT_SETS
