"""Classes of bug in the studies, each checked from first principles: the value expected is
computed here, by hand or with plain NumPy, never by the function under test.

This file: which block or pair an intervention touches; the direction and the averaging of
a metric; which kind of SOURCE a string names. test_study_classes_2.py: the bounds, the
estimates of the work, and the load-aware thread count.
"""

import itertools
import math
import os

import numpy as np
import pytest

from resgrad.formats.checkpoint import MAGIC
from resgrad.lab.lesion import interventions as les
from resgrad.lab.lesion import measure, tables
from resgrad.lab.paths import exact as pathsx
from resgrad.lab.paths import runs as pathruns
from resgrad.lab.study.runs import RunModel
from resgrad.lab.study.windows import text_windows
from resgrad.nn.blocks import block_forward
from resgrad.nn.model import GPT, GPTConfig
from resgrad.train import source

V = 20
IDS = np.random.default_rng(11).integers(0, V, 300)  # a "text" of 300 tokens


def _gpt(variant="pre-ln", L=4, seed=1):
    cfg = GPTConfig(vocab_size=V, block_size=16, n_layer=L, n_head=2, n_embd=16,
                    variant=variant, init="xavier")  # fmt: skip
    m = GPT(cfg, seed=seed, dtype=np.float64)
    if variant == "rezero":  # alpha starts at 0: every branch would add nothing
        for i in range(L):
            m.params[f"blocks.{i}.alpha"][:] = 0.4 + 0.2 * i
    return m


def _ln(x, g, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def _by_hand(m, idx, positions):
    """Logits of the blocks ``positions`` (block indices, in the order they run), by hand:
    embeddings, each block's own forward, ln_f where the scheme has it, the tied head."""
    P, cfg = m.params, m.cfg
    x = P["wte"][idx] + P["wpe"][: idx.shape[1]]  # (B, T, C)
    for j in positions:
        x = block_forward(x, P, f"blocks.{j}", cfg)[0]
    if cfg.final_ln:
        x = _ln(x, P["ln_f.g"], P["ln_f.b"], cfg.ln_eps)
    return x @ P["wte"].T  # (B, T, V)


def _zeroed(m, zero):
    """A copy of ``m`` whose branches ``zero`` ((block, "attn" | "mlp"), ...) output nothing."""
    P = {k: v.copy() for k, v in m.params.items()}
    for i, br in zero:
        P[f"blocks.{i}.{br}.w_proj"][:] = 0.0
        P[f"blocks.{i}.{br}.b_proj"][:] = 0.0
    return GPT.from_params(m.cfg, P)


IDX = np.random.default_rng(3).integers(0, V, (2, 9))


# --------------------------------------------------------------------------- 1. which block


def test_the_hand_forward_is_the_models_forward():
    for variant in ("pre-ln", "none", "rezero"):
        m = _gpt(variant)
        np.testing.assert_allclose(_by_hand(m, IDX, range(4)), m.forward(IDX)[0], rtol=1e-12)


@pytest.mark.parametrize("variant", ["pre-ln", "none", "rezero", "residual"])
def test_deleting_block_i_is_running_every_block_but_i(variant):
    m = _gpt(variant)
    for i in range(4):
        got = measure.lesioned_logits(m, IDX, les.delete_blocks(4, [i], "block"))
        want = _by_hand(m, IDX, [j for j in range(4) if j != i])
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    got = measure.lesioned_logits(m, IDX, les.delete_blocks(4, [0, 3]))
    np.testing.assert_allclose(got, _by_hand(m, IDX, [1, 2]), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("variant", ["post-ln", "deepnorm"])
def test_deleting_in_a_post_norm_scheme_is_zeroing_exactly_those_branches(variant):
    m = _gpt(variant)
    for i in range(4):
        got = measure.lesioned_logits(m, IDX, les.delete_blocks(4, [i], "block"))
        want = _zeroed(m, [(i, "attn"), (i, "mlp")]).forward(IDX)[0]
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("variant", ["pre-ln", "post-ln", "rezero"])
def test_deleting_one_branch_is_zeroing_that_branch_of_that_block(variant):
    m = _gpt(variant)
    for i in range(4):
        for br in ("attn", "mlp"):
            got = measure.lesioned_logits(m, IDX, les.delete_branch(4, i, br))
            want = _zeroed(m, [(i, br)]).forward(IDX)[0]
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("variant", ["pre-ln", "none", "post-ln"])
def test_swaps_run_the_blocks_in_the_swapped_order(variant):
    m = _gpt(variant)
    for i in range(3):
        order = [0, 1, 2, 3]
        order[i], order[i + 1] = order[i + 1], order[i]
        got = measure.lesioned_logits(m, IDX, les.swap_blocks(4, [(i, i + 1)], "swap"))
        np.testing.assert_allclose(got, _by_hand(m, IDX, order), rtol=1e-10, atol=1e-12)
    got = measure.lesioned_logits(m, IDX, les.swap_blocks(4, [(0, 2), (1, 3)]))
    np.testing.assert_allclose(got, _by_hand(m, IDX, [2, 3, 0, 1]), rtol=1e-10, atol=1e-12)


def test_the_study_measures_each_lesion_on_the_blocks_it_names():
    """The study's fast path (the intact prefix reused) against the hand logits' CE."""
    m = _gpt("pre-ln")
    lesions = les.plan(4, what=("block", "swap", "delete"), ks=(2,), samples=6)
    res = measure.model_study(m, IDS, lesions, seq=8, batch=2, seeds=(0, 5))
    for s, seed in enumerate((0, 5)):
        w = text_windows(IDS, 8, 2, seed)
        for j, lesion in enumerate(lesions):
            pos = [lesion.order[p] for p in range(4) if lesion.attn[p]]
            z = _by_hand(m, w[:, :-1], pos).reshape(-1, V)
            y = w[:, 1:].reshape(-1)
            zmax = z.max(axis=1)
            lse = zmax + np.log(np.exp(z - zmax[:, None]).sum(axis=1))
            ce = float(np.mean(lse - z[np.arange(len(y)), y]))
            assert res.values[j, s, 0] == pytest.approx(ce, rel=1e-10), lesion.name


def test_the_plan_holds_exactly_the_blocks_asked_each_touching_only_its_own():
    L = 5
    plan = les.plan(L, what=("swap", "block", "mlp", "attn"), blocks=[3, 1, 3])
    assert [x.name for x in plan] == ["intact", "attn 1", "attn 3", "mlp 1", "mlp 3",
                                      "block 1", "block 3", "swap 1,2", "swap 3,4"]  # fmt: skip
    for x in plan[1:]:
        i = x.layer
        off = tuple(p == i for p in range(L))
        if x.kind in ("attn", "mlp", "block"):
            assert x.order == tuple(range(L))
            assert tuple(not a for a in x.attn) == (off if x.kind != "mlp" else (False,) * L)
            assert tuple(not a for a in x.mlp) == (off if x.kind != "attn" else (False,) * L)
        else:
            want = list(range(L))
            want[i], want[i + 1] = i + 1, i
            assert x.order == tuple(want) and all(x.attn) and all(x.mlp)
    every = les.plan(3, what=("block", "swap"))
    assert [x.name for x in every] == ["intact", "block 0", "block 1", "block 2",
                                       "swap 0,1", "swap 1,2"]  # fmt: skip


def _matchings_by_hand(L, k):
    """Every set of k disjoint pairs among L blocks, as frozensets of (i, j), i < j."""
    pairs = list(itertools.combinations(range(L), 2))
    return {frozenset(c) for c in itertools.combinations(pairs, k)
            if len({b for p in c for b in p}) == 2 * k}  # fmt: skip


def test_deletion_sets_are_valid_distinct_blocks_and_every_set_when_n_allows(monkeypatch):
    monkeypatch.setattr(les, "EXACT_SETS", 0)  # N alone decides: every set where N allows
    for L in (3, 4, 6):
        for k in range(1, L + 1):
            every = set(itertools.combinations(range(L), k))
            got = les.deletion_sets(L, k, math.comb(L, k), seed=2)
            assert len(got) == len(every) and set(got) == every
            if math.comb(L, k) > 1:
                few = les.deletion_sets(L, k, math.comb(L, k) - 1, seed=2)
                assert len(few) == math.comb(L, k) - 1
                assert all(len(set(s)) == k and set(s) <= set(range(L)) for s in few)
    drawn = les.deletion_sets(12, 3, 100, seed=9)  # C(12, 3) = 220 > 100: drawn
    assert len(drawn) == 100
    assert all(len(set(s)) == 3 and list(s) == sorted(s) for s in drawn)
    assert set().union(*drawn) == set(range(12))  # every block, the last one too


def test_pair_sets_are_disjoint_valid_pairs_and_every_set_when_n_allows():
    for L, k in [(2, 1), (4, 1), (4, 2), (5, 2), (6, 2), (6, 3)]:
        every = _matchings_by_hand(L, k)
        got = les.pair_sets(L, k, len(every), seed=1)
        assert len(got) == len(every) and {frozenset(s) for s in got} == every
    drawn = les.pair_sets(10, 2, 50, seed=4)  # 630 sets of 2 pairs among 10 > 50
    assert len(drawn) == 50
    for s in drawn:
        blocks = [b for p in s for b in p]
        assert len(s) == 2 and len(set(blocks)) == 4 and set(blocks) <= set(range(10))
        assert all(i < j for i, j in s)
    assert {b for s in drawn for p in s for b in p} == set(range(10))


# --------------------------------------------------------------------------- 2. metrics


def _log_softmax(z):
    m = z.max(axis=-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))


def test_each_metric_has_its_sign_direction_and_scale():
    rng = np.random.default_rng(0)
    B, T = 3, 4
    y = rng.integers(0, 7, (B, T))
    z0 = rng.normal(size=(B, T, 7))
    z0[np.arange(B)[:, None], np.arange(T), y] += 1.5  # the intact model predicts well
    z = z0 + 3.0 * rng.normal(size=(B, T, 7))  # the lesioned one, worse
    z[0] = z0[0]  # four rows unchanged: an agreement strictly between 0 and 1
    got = measure.metrics(measure.reference(z0, y), z)
    lp0, lp = _log_softmax(z0).reshape(-1, 7), _log_softmax(z).reshape(-1, 7)
    n, yy = np.arange(B * T), y.reshape(-1)
    ce0, ce = -lp0[n, yy].mean(), -lp[n, yy].mean()
    p0 = np.exp(lp0)
    kl = (p0 * (lp0 - lp)).sum(axis=1).mean()  # KL(intact || lesioned)
    reverse = (np.exp(lp) * (lp - lp0)).sum(axis=1).mean()
    top0, top = z0.reshape(-1, 7).argmax(1), z.reshape(-1, 7).argmax(1)
    agree = sum(int(a == b) for a, b in zip(top, top0)) / (B * T)
    acc = sum(int(a == b) for a, b in zip(top, yy)) / (B * T)
    assert 0 < agree < 1 and agree != acc and abs(kl - reverse) > 1e-3 and ce > ce0
    want = [ce, ce - ce0, agree, acc, kl]
    np.testing.assert_allclose(got, want, rtol=1e-10)
    assert got[1] > 0  # worse predictions: a rise in CE
    same = measure.metrics(measure.reference(z0, y), z0.copy())
    np.testing.assert_allclose(same, [ce0, 0.0, 1.0, np.mean(top0 == yy), 0.0], atol=1e-12)


RUN = RunModel("pre-ln", 4, 16, 2, "20 tokens", "300 tokens, sha256 0")


def _result(values, lesions, seeds=(0, 1, 2)):
    values = np.asarray(values, dtype=float)
    return measure.StudyResult("hand", 4, measure.METRICS, list(lesions), values, tuple(seeds),
                               0, 0, RUN)  # fmt: skip


def _mean(xs):
    return sum(xs) / len(xs)


def _sample_std(xs):
    if len(xs) < 2:
        return 0.0
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


PLAN = les.plan(4, what=("block", "delete"), ks=(2,), samples=3, seed=5)  # all C(4, 2) = 6


def test_a_row_is_the_mean_and_sample_std_over_seeds_and_a_random_k_over_its_sets():
    vals = np.random.default_rng(1).normal(size=(len(PLAN), 3, 5))
    table = tables.rows(_result(vals, PLAN))
    assert [r.name for r in table] == ["intact", "block 0", "block 1", "block 2", "block 3",
                                       "delete k=2"]  # fmt: skip
    for j, r in enumerate(table[:5]):
        for m in range(5):
            xs = [vals[j, s, m] for s in range(3)]
            assert r.mean[m] == pytest.approx(_mean(xs), rel=1e-12)
            assert r.std[m] == pytest.approx(_sample_std(xs), rel=1e-12)
        assert r.samples == 1
    rand = table[5]
    assert rand.samples == 6 == rand.sets and rand.k == 2 and rand.exact  # 6 <= EXACT_SETS
    for m in range(5):
        set_means = [_mean([vals[j, s, m] for s in range(3)]) for j in range(5, 11)]
        assert rand.mean[m] == pytest.approx(_mean(set_means), rel=1e-12)
        assert rand.std[m] == pytest.approx(_sample_std(set_means), rel=1e-12)
    one = tables.rows(_result(vals[:, :1], PLAN, seeds=(0,)))
    assert one[1].std == (0.0,) * 5 and one[1].mean == tuple(vals[1, 0])


def test_across_runs_is_the_mean_and_sample_std_of_each_runs_mean():
    rng = np.random.default_rng(2)
    vals = [rng.normal(size=(len(PLAN), 3, 5)) for _ in range(3)]
    table = tables.across_runs([_result(v, PLAN) for v in vals], ["a", "b", "c"])
    per_run = [tables.rows(_result(v, PLAN)) for v in vals]
    for j, r in enumerate(table):
        for m in range(5):
            means = [t[j].mean[m] for t in per_run]
            assert r.mean[m] == pytest.approx(_mean(means), rel=1e-12)
            assert r.std[m] == pytest.approx(_sample_std(means), rel=1e-12)
    for m in range(5):  # the first row's means by hand from the values
        means = [_mean([v[0, s, m] for s in range(3)]) for v in vals]
        assert table[0].mean[m] == pytest.approx(_mean(means), rel=1e-12)


def _split(norms, dots):
    norms, dots = np.array([norms], float), np.array([dots], float)
    K = norms.shape[1]
    return pathsx.PathSplit("hand", K - 1, tuple(range(K)), norms, dots,
                            np.ones(1), np.zeros(1), {}, {}, {}, 0)  # fmt: skip


def test_path_shares_sum_to_one_over_k_and_mean_k_weights_k_by_its_share():
    m = _gpt("pre-ln", L=2)
    splits = pathsx.model_splits(m, IDS, 6, 2, (0, 1))
    rows = pathsx.path_table(splits)
    assert sum(r.share_norm for r in rows) == pytest.approx(1.0, rel=1e-12)
    assert sum(r.share_proj for r in rows) == pytest.approx(1.0, rel=1e-9)
    for k, r in enumerate(rows):
        by_seed = [s.norms[0, k] / s.norms[0].sum() for s in splits]
        assert r.share_norm == pytest.approx(_mean(by_seed), rel=1e-12)
        assert r.share_norm_std == pytest.approx(np.sqrt(np.mean((np.array(by_seed)
                                                 - _mean(by_seed)) ** 2)), abs=1e-14)  # fmt: skip
        proj = [s.dots[0, k] / s.full_norms[0] ** 2 for s in splits]
        assert r.share_proj == pytest.approx(_mean(proj), rel=1e-9, abs=1e-12)
    cp = pathruns.CheckpointPaths(0, "r/ckpt-0.ckpt", splits, rows, (0, 4), RUN)
    shares = [_mean([s.norms[0, k] / s.norms[0].sum() for s in splits]) for k in range(5)]
    assert cp.mean_k == pytest.approx(sum(k * shares[k] for k in range(5)), rel=1e-12)


def test_paths_across_runs_is_the_mean_and_sample_std_over_runs():
    norms = {"a": [[1, 3, 0], [2, 2, 1]], "b": [[3, 1, 1], [1, 1, 1]], "c": [[1, 1, 2], [0, 1, 3]]}
    runs = []
    for name, per_it in norms.items():
        steps = []
        for it, ns in zip((10, 20), per_it):
            sp = _split(ns, [0.5, 0.3, 0.2])
            rows = pathsx.path_table([sp])
            steps.append(pathruns.CheckpointPaths(it, f"{name}/ckpt-{it}.ckpt", [sp], rows,
                                                  (0, 2), RUN))  # fmt: skip
        runs.append(steps)
    out = pathruns.across_runs(runs)
    assert [r.iteration for r in out] == [10, 20] and all(r.runs == 3 for r in out)
    for i, r in enumerate(out):
        share0 = [norms[n][i][0] / sum(norms[n][i]) for n in norms]
        mean_k = [sum(k * x / sum(norms[n][i]) for k, x in enumerate(norms[n][i])) for n in norms]
        assert r.share0 == pytest.approx(_mean(share0), rel=1e-12)
        assert r.share0_std == pytest.approx(_sample_std(share0), rel=1e-12)
        assert r.mean_k == pytest.approx(_mean(mean_k), rel=1e-12)
        assert r.mean_k_std == pytest.approx(_sample_std(mean_k), rel=1e-12)
    (alone,) = pathruns.across_runs(runs[:1])[:1]
    assert alone.share0_std == 0.0 and alone.mean_k_std == 0.0


# --------------------------------------------------------------------------- 3. a SOURCE's kind


@pytest.fixture
def here(tmp_path, monkeypatch):
    """An empty working directory; the hub's cache is never consulted (no snapshot)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(source, "_cached_snapshot", lambda name: None)
    return tmp_path


def _dir(path, *files):
    os.makedirs(path, exist_ok=True)
    for f in files:
        with open(os.path.join(path, f), "wb") as fh:
            fh.write(b"{}")
    return str(path)


def test_a_run_directory_with_a_config_json_is_a_run(here):
    d = _dir("both", "last.ckpt", "best.ckpt", "config.json")
    src = source.resolve_source(d)
    assert (src.kind, src.path) == ("run", os.path.join(d, "last.ckpt"))
    assert source.resolve_source(d, best=True).path == os.path.join(d, "best.ckpt")
    hf = _dir("hf", "config.json")
    assert (source.resolve_source(hf).kind, source.resolve_source(hf).path) == ("hf-dir", hf)
    # a directory with a model to load is that model, not a run killed before its checkpoint
    assert source.resolve_source(_dir("hf2", "config.json", "metrics.jsonl")).kind == "hf-dir"
    with pytest.raises(ValueError, match="no checkpoint yet"):
        source.resolve_source(_dir("killed", "metrics.jsonl"))


def test_a_file_is_a_checkpoint_by_its_name_or_its_first_bytes(here):
    for name, content, kind in [("model.ckpt", b"", "checkpoint"),
                                ("renamed.bin", MAGIC + b"x" * 40, "checkpoint"),
                                ("ckpt.pt", b"PK", "nanogpt")]:  # fmt: skip
        with open(name, "wb") as f:
            f.write(content)
        src = source.resolve_source(name)
        assert (src.kind, src.path) == (kind, name)
    with open("notes.txt", "w") as f:
        f.write("no model here " * 100)
    with pytest.raises(ValueError, match="is a file, not a model"):
        source.resolve_source("notes.txt")


def test_lesson_is_looked_at_first_and_a_path_of_that_name_is_dot_slash_lesson(here):
    with pytest.raises(ValueError, match="the lesson's tanh stack"):
        source.resolve_source("lesson")  # not a kind the default caller takes: said so
    assert source.resolve_source("lesson", kinds=source.ALL).kind == "lesson"
    _dir("lesson", "last.ckpt")
    assert source.resolve_source("lesson", kinds=source.ALL).kind == "lesson"
    for name in ("./lesson", os.path.join(str(here), "lesson")):
        src = source.resolve_source(name, kinds=source.ALL)
        assert (src.kind, src.path) == ("run", os.path.join(name, "last.ckpt"))
    assert source.resolve_source("lesson").kind == "run"  # a caller without the lesson: a path


def test_an_existing_directory_wins_over_the_hub_name_it_spells(here):
    assert source.resolve_source("gpt2").kind == "hub"
    assert source.resolve_source("owner/model").kind == "hub"
    _dir("gpt2", "config.json")
    _dir(os.path.join("owner", "model"), "config.json")
    assert (source.resolve_source("gpt2").kind, source.resolve_source("gpt2").path) == (
        "hf-dir", "gpt2")  # fmt: skip
    assert source.resolve_source("owner/model").kind == "hf-dir"
    _dir("gpt2-medium", "last.ckpt")
    assert source.resolve_source("gpt2-medium").kind == "run"
