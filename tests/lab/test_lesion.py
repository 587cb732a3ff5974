"""The lesion study (resgrad.lab.lesion): each intervention against an independent model of
it (transformers lesioned the torch way, resgrad's own GPT with weights zeroed, removed or
reordered), the metrics against a hand computation, the statistics, the refusals."""

import copy
import dataclasses
import math

import numpy as np
import pytest

from resgrad.lab.lesion import figs as lesionfigs
from resgrad.lab.lesion import interventions as ls
from resgrad.lab.lesion import measure as lesionstudy
from resgrad.lab.lesion import runs as lesionruns
from resgrad.lab.lesion import tables as lesiontables
from resgrad.lab.lesson import StackConfig, make_bank
from resgrad.lab.paths import chains as pathchains
from resgrad.lab.study import budget, text_windows
from resgrad.nn.blocks import VARIANTS
from resgrad.nn.layers import layernorm_forward
from resgrad.nn.model import GPT, GPTConfig

CHARS = "abcdefghij klmnopqrs"  # V = 20
IDS = np.random.default_rng(7).integers(0, len(CHARS), 400)  # a "text" of 400 tokens


def _model(variant="pre-ln", L=3, seed=0, dtype=np.float64, V=20):
    cfg = GPTConfig(vocab_size=V, block_size=16, n_layer=L, n_head=2, n_embd=8,
                    variant=variant, init="xavier")  # fmt: skip
    m = GPT(cfg, seed=seed, dtype=dtype)
    if variant == "rezero":  # alpha starts at 0: the branches would add nothing
        for i in range(L):
            m.params[f"blocks.{i}.alpha"][:] = 0.5 + 0.1 * i
    return m


def _idx(B=2, T=9, seed=3):
    return np.random.default_rng(seed).integers(0, len(CHARS), (B, T))


def _renamed(model, order, L=None):
    """A GPT whose block p holds ``model``'s block order[p] (L = len(order) blocks)."""
    cfg = GPTConfig(**{**model.cfg.__dict__, "n_layer": len(order) if L is None else L})
    P = {k: v for k, v in model.params.items() if not k.startswith("blocks.")}
    for p, j in enumerate(order):
        pre = f"blocks.{j}."
        P.update({f"blocks.{p}.{k[len(pre):]}": v for k, v in model.params.items()
                  if k.startswith(pre)})  # fmt: skip
    return GPT.from_params(cfg, P)


# --------------------------------------------------------------------------- exact identities


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("variant", VARIANTS)
def test_deleting_nothing_gives_the_intact_logits_bit_for_bit(variant, dtype):
    m = _model(variant, dtype=dtype)
    idx = _idx()
    logits, _, _ = m.forward(idx)
    assert np.array_equal(lesionstudy.lesioned_logits(m, idx, ls.intact(3)), logits)
    res = lesionstudy.model_study(m, IDS, [ls.intact(3)], seq=8, batch=2, seeds=(0,))
    w = text_windows(IDS, 8, 2, 0)
    _, loss, _ = m.forward(w[:, :-1], w[:, 1:])
    assert res.values[0, 0, 0] == pytest.approx(loss, rel=1e-12 if dtype == np.float64 else 1e-6)
    assert list(res.values[0, 0, 1:]) == [0.0, 1.0, res.values[0, 0, 3], 0.0]  # dce, agree, kl


@pytest.mark.parametrize("variant", ["pre-ln", "residual", "rezero", "none", "ln-scaling"])
def test_every_branch_deleted_is_the_head_on_the_embeddings(variant):
    """With the skip the identity (or none's deleted step the identity), every branch deleted
    leaves the head applied to the embeddings, through ln_f where the scheme has it."""
    m = _model(variant, L=4)
    P, idx = m.params, _idx()
    x0 = P["wte"][idx] + P["wpe"][: idx.shape[1]]  # (B, T, C)
    if m.cfg.final_ln:
        x0, _ = layernorm_forward(x0, P["ln_f.g"], P["ln_f.b"], m.cfg.ln_eps)
    B, T, C = x0.shape
    want = (x0.reshape(-1, C) @ P["wte"].T).reshape(B, T, -1)  # (B*T, C) @ (C, V): the head
    for les in (ls.delete_blocks(4, range(4)),
                ls.Lesion("delete", tuple(range(4)), (False,) * 4, (False,) * 4, 4)):  # fmt: skip
        np.testing.assert_array_equal(lesionstudy.lesioned_logits(m, idx, les), want)


@pytest.mark.parametrize("variant", ["post-ln", "deepnorm"])
def test_every_branch_deleted_in_a_post_norm_scheme_keeps_each_layernorm(variant):
    """post-ln's ln(x + f) becomes ln(x), DeepNorm's ln(alpha x + f) ln(alpha x): the norms
    after the sums stay, and alpha with them."""
    m = _model(variant, L=3)
    P, idx = m.params, _idx()
    alpha = (2 * 3) ** 0.25 if variant == "deepnorm" else 1.0
    x = P["wte"][idx] + P["wpe"][: idx.shape[1]]  # (B, T, C)
    for i in range(3):
        for j in (1, 2):
            x, _ = layernorm_forward(x * alpha, P[f"blocks.{i}.ln{j}.g"], P[f"blocks.{i}.ln{j}.b"])
    np.testing.assert_allclose(lesionstudy.lesioned_logits(m, idx, ls.delete_blocks(3, range(3))),
                               x @ P["wte"].T, rtol=1e-13, atol=1e-13)  # fmt: skip


@pytest.mark.parametrize(
    "variant", ["pre-ln", "post-ln", "residual", "rezero", "deepnorm", "ln-scaling"]
)
@pytest.mark.parametrize("branch", ["attn", "mlp"])
def test_a_deleted_branch_is_its_output_projection_zeroed(variant, branch):
    """Where the scheme has a skip, a deleted branch is the branch made to output 0."""
    m = _model(variant)
    idx = _idx()
    for i in range(3):
        zeroed = GPT.from_params(m.cfg, {k: v.copy() for k, v in m.params.items()})
        zeroed.params[f"blocks.{i}.{branch}.w_proj"][:] = 0.0
        zeroed.params[f"blocks.{i}.{branch}.b_proj"][:] = 0.0
        got = lesionstudy.lesioned_logits(m, idx, ls.delete_branch(3, i, branch))
        np.testing.assert_allclose(got, zeroed.forward(idx)[0], rtol=0, atol=1e-12)
        assert np.abs(got - m.forward(idx)[0]).max() > 1e-6  # the branch did something


@pytest.mark.parametrize("variant", ["pre-ln", "residual", "rezero", "none"])
def test_a_deleted_block_is_the_model_without_it(variant):
    """Where a deleted block is the identity (every skip scheme without a norm after the sum,
    and none, whose deleted block passes x through), it is the (L - 1)-block GPT."""
    m = _model(variant, L=4)
    idx = _idx()
    for i in range(4):
        smaller = _renamed(m, [j for j in range(4) if j != i])
        les = ls.delete_blocks(4, [i], "block")
        np.testing.assert_array_equal(lesionstudy.lesioned_logits(m, idx, les),
                                      smaller.forward(idx)[0])  # fmt: skip
    # none without + x: its deleted attention step passes x to the MLP unchanged
    if variant == "none":
        les = ls.delete_branch(4, 0, "attn")
        P = m.params
        x = P["wte"][idx] + P["wpe"][: idx.shape[1]]
        h, _ = layernorm_forward(x, P["blocks.0.ln2.g"], P["blocks.0.ln2.b"])
        from resgrad.nn.layers import mlp_forward

        x1, _ = mlp_forward(h, P["blocks.0.mlp.w_fc"], P["blocks.0.mlp.b_fc"],
                            P["blocks.0.mlp.w_proj"], P["blocks.0.mlp.b_proj"])  # fmt: skip
        rest = _renamed(m, [1, 2, 3])
        from resgrad.lab.lesion.measure import _blocks_from, _head

        want = _head(rest, _blocks_from(rest, x1, ls.intact(3), 0))
        np.testing.assert_allclose(
            lesionstudy.lesioned_logits(m, idx, les), want, rtol=1e-13, atol=1e-13
        )


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "ln-scaling"])
def test_a_swap_is_the_model_with_its_blocks_reordered(variant):
    m = _model(variant, L=4)
    idx = _idx()
    for les in (ls.swap_blocks(4, [(1, 2)], "swap"), ls.swap_blocks(4, [(0, 3), (1, 2)])):
        assert les.order in ((0, 2, 1, 3), (3, 2, 1, 0))
        np.testing.assert_array_equal(lesionstudy.lesioned_logits(m, idx, les),
                                      _renamed(m, les.order).forward(idx)[0])  # fmt: skip


def test_an_ln_scaling_block_moved_keeps_its_own_scale():
    """ln-scaling's 1/l^p is part of block l's function, as its weights are: a swapped
    block brings it along. The referee: pre-ln blocks reordered, each LayerNorm's gain and
    bias times its own block's l^-p (s (xhat g + b) = xhat (s g) + s b)."""
    m = _model("ln-scaling", L=4)
    idx = _idx()
    folded = GPT.from_params(dataclasses.replace(m.cfg, variant="pre-ln", ln_scaling_power=None),
                             {k: v.copy() for k, v in m.params.items()})  # fmt: skip
    for i in range(4):
        for k in ("ln1.g", "ln1.b", "ln2.g", "ln2.b"):
            folded.params[f"blocks.{i}.{k}"] *= (i + 1) ** -0.5
    for les in (ls.swap_blocks(4, [(1, 2)], "swap"), ls.swap_blocks(4, [(0, 3), (1, 2)])):
        got = lesionstudy.lesioned_logits(m, idx, les)
        np.testing.assert_allclose(got, _renamed(folded, les.order).forward(idx)[0],
                                   rtol=1e-12, atol=1e-12)  # fmt: skip
        # not the slots' scales: the same weights with each position's l^-p are another model
        assert np.abs(got - _renamed(m, les.order).forward(idx)[0]).max() > 1e-6


# --------------------------------------------------------------------------- the fast path


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_study_equals_whole_forwards_and_runs_only_each_lesions_tail(variant):
    m = _model(variant, L=4)
    lesions = ls.plan(4, samples=3, seed=5)
    seeds = (0, 4)
    res = lesionstudy.model_study(m, IDS, lesions, seq=8, batch=2, seeds=seeds)
    for s, seed in enumerate(seeds):
        w = text_windows(IDS, 8, 2, seed)
        ref = lesionstudy.reference(lesionstudy.lesioned_logits(m, w[:, :-1], lesions[0]), w[:, 1:])
        for j, les in enumerate(lesions):
            want = lesionstudy.metrics(ref, lesionstudy.lesioned_logits(m, w[:, :-1], les))
            np.testing.assert_array_equal(res.values[j, s], want, err_msg=les.name)
    # the intact stream once per seed, then each lesion from its first changed block
    tails = sum(4 - les.first for les in lesions)
    assert res.block_passes == len(seeds) * (4 + tails)
    assert res.full_passes == len(seeds) * 4 * len(lesions) > res.block_passes
    assert ls.model_cost(m.cfg, 8, 2, lesions, 2).blocks == res.block_passes
    firsts = {les.name: les.first for les in lesions}
    assert firsts["intact"] == 4 and firsts["attn 2"] == 2 and firsts["swap 1,2"] == 1
    assert ls.swap_blocks(4, [(1, 3)]).first == 1 and ls.delete_blocks(4, [3, 2]).first == 2


# --------------------------------------------------------------------------- the metrics


def _by_hand(z0, z, y):
    """The metrics of lesioned logits z against intact z0, row by row, in plain Python."""
    ce = ce0 = agree = acc = kl = 0.0
    V = z0.shape[-1]
    rows = [(a.tolist(), b.tolist(), int(t))
            for a, b, t in zip(z0.reshape(-1, V), z.reshape(-1, V), y.reshape(-1))]  # fmt: skip
    for r0, r, t in rows:
        lp0 = [v - math.log(sum(math.exp(u) for u in r0)) for v in r0]  # log softmax
        lp = [v - math.log(sum(math.exp(u) for u in r)) for v in r]
        ce, ce0 = ce - lp[t], ce0 - lp0[t]
        top0, top = r0.index(max(r0)), r.index(max(r))
        agree += top == top0
        acc += top == t
        kl += sum(math.exp(a) * (a - b) for a, b in zip(lp0, lp))
    n = len(rows)
    return [ce / n, (ce - ce0) / n, agree / n, acc / n, kl / n]


def test_each_metric_against_a_hand_computation():
    m = _model("pre-ln", L=3)
    w = text_windows(IDS, 8, 2, 1)
    z0 = lesionstudy.lesioned_logits(m, w[:, :-1], ls.intact(3))
    z = lesionstudy.lesioned_logits(m, w[:, :-1], ls.delete_blocks(3, [0], "block"))
    got = lesionstudy.metrics(lesionstudy.reference(z0, w[:, 1:]), z)
    want = _by_hand(z0, z, w[:, 1:])
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-13)
    assert got[4] > 0 and 0 < got[2] < 1  # a real KL, some top-1 changed
    # a distribution shifted by a constant is the same distribution: KL 0, CE unchanged
    np.testing.assert_allclose(lesionstudy.metrics(lesionstudy.reference(z0, w[:, 1:]), z0 + 3.0),
                               [want[0] - want[1], 0, 1, _by_hand(z0, z0, w[:, 1:])[3], 0],
                               atol=1e-12)  # fmt: skip


def test_kl_is_intact_given_lesioned_not_the_reverse():
    z0 = np.array([[[0.0, 2.0, -1.0]]])  # (1, 1, 3)
    z = np.array([[[1.0, 0.0, 0.5]]])
    y = np.array([[1]])
    p0, p = (np.exp(a) / np.exp(a).sum() for a in (z0[0, 0], z[0, 0]))
    kl = lesionstudy.metrics(lesionstudy.reference(z0, y), z)[4]
    assert kl == pytest.approx(float(np.sum(p0 * np.log(p0 / p))), rel=1e-12)
    assert abs(kl - float(np.sum(p * np.log(p / p0)))) > 0.05


# --------------------------------------------------------------------------- the statistics


def test_rows_are_the_mean_and_sample_std_over_seeds_and_over_the_random_sets():
    m = _model("post-ln", L=3)
    lesions = ls.plan(3, what=("block", "delete"), ks=(1, 2), samples=2, seed=1)
    res = lesionstudy.model_study(m, IDS, lesions, seq=8, batch=2, seeds=(0, 1, 2))
    table = lesiontables.rows(res)
    assert [r.name for r in table] == ["intact", "block 0", "block 1", "block 2",
                                       "delete k=1", "delete k=2"]  # fmt: skip

    def sample_std(xs):
        mu = sum(xs) / len(xs)
        return math.sqrt(sum((x - mu) ** 2 for x in xs) / (len(xs) - 1))

    b1 = table[2]
    for j, metric in enumerate(lesionstudy.METRICS):
        xs = list(res.values[2, :, j])  # block 1 on the 3 seeds
        assert b1.get(metric)[0] == pytest.approx(sum(xs) / 3, rel=1e-12, abs=1e-15)
        assert b1.get(metric)[1] == pytest.approx(sample_std(xs), rel=1e-12, abs=1e-15)
    js = [j for j, les in enumerate(lesions) if les.kind == "delete" and les.k == 2]
    assert len(js) == 3 and table[5].samples == 3 == table[5].sets  # C(3, 2) = 3: every set
    assert table[5].exact and table[5].ci == (0.0,) * 5
    per_set = [float(np.mean(res.values[j, :, 1])) for j in js]  # dce, each set over the seeds
    assert table[5].get("dce")[0] == pytest.approx(sum(per_set) / 3, rel=1e-12)
    assert table[5].get("dce")[1] == pytest.approx(sample_std(per_set), rel=1e-12)
    assert table[5].get("dce")[1] > 0
    one = lesiontables.rows(lesionstudy.model_study(m, IDS, lesions, seq=8, batch=2, seeds=(0,)))
    assert one[1].std == (0.0,) * 5  # one seed: no spread
    rec = table[5].record()
    assert (
        list(rec) == lesiontables.row_keys(lesionstudy.METRICS)
        and rec["dce_std"] == table[5].get("dce")[1]
    )


def test_the_mean_and_std_over_runs_and_unlike_runs_refused_by_name():
    lesions = ls.plan(3, what=("block",))
    res = [lesionstudy.model_study(_model("pre-ln", seed=s), IDS, lesions, seq=8, batch=2,
                                   seeds=(0, 1))
           for s in range(3)]  # fmt: skip
    table = lesiontables.across_runs(res, ["a", "b", "c"])
    per_run = np.array([lesiontables.rows(r)[1].get("kl")[0] for r in res])  # (R,) block 0
    assert table[1].get("kl")[0] == pytest.approx(per_run.mean(), rel=1e-12)
    assert table[1].get("kl")[1] == pytest.approx(per_run.std(ddof=1), rel=1e-12)
    assert lesiontables.across_runs(res[:1], ["a"])[1].std == (0.0,) * 5
    for other, field in [
        (_model("post-ln"), "scheme"),
        (_model("pre-ln", L=4), "depth"),
        (GPT(GPTConfig(vocab_size=20, block_size=16, n_layer=3, n_head=2, n_embd=16)), "width"),
        (GPT(GPTConfig(vocab_size=20, block_size=16, n_layer=3, n_head=4, n_embd=8)), "heads"),
        (_model("pre-ln", V=21), "vocabulary"),
    ]:
        r = lesionstudy.model_study(other, IDS, ls.plan(other.cfg.n_layer, what=("block",)), seq=8,
                                    batch=2, seeds=(0, 1))  # fmt: skip
        with pytest.raises(ValueError, match=f"run 'odd' has {field}"):
            lesiontables.across_runs([res[0], r], ["a", "odd"])
    r = lesionstudy.model_study(_model(), IDS[::-1].copy(), lesions, seq=8, batch=2, seeds=(0, 1))
    with pytest.raises(ValueError, match="run 'odd' has the text's token ids"):
        lesiontables.across_runs([res[0], r], ["a", "odd"])


# --------------------------------------------------------------------------- the plan


def test_random_sets_are_seeded_distinct_and_every_set_where_there_are_few():
    sets = ls.deletion_sets(12, 5, 10, seed=4)  # C(12, 5) = 792 > EXACT_SETS: drawn
    assert len(sets) == 10 and all(len(set(s)) == 5 and list(s) == sorted(s) for s in sets)
    assert all(0 <= i < 12 for s in sets for i in s)
    assert sets == ls.deletion_sets(12, 5, 10, seed=4) != ls.deletion_sets(12, 5, 10, seed=5)
    assert ls.deletion_sets(4, 2, 6) == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    assert ls.deletion_sets(4, 2, 1) == ls.deletion_sets(4, 2, 6)  # 6 <= EXACT_SETS: every set
    assert ls.deletion_sets(5, 5, 10) == [(0, 1, 2, 3, 4)]
    pairs = ls.pair_sets(12, 3, 10, seed=4)
    for s in pairs:
        flat = [i for p in s for i in p]
        assert len(s) == 3 and len(set(flat)) == 6 and all(a < b for a, b in s)
    every = ls.pair_sets(4, 2, 100)
    assert sorted(every) == [((0, 1), (2, 3)), ((0, 2), (1, 3)), ((0, 3), (1, 2))]
    assert len(ls.pair_sets(6, 2, 1000)) == 45  # C(6, 4) x 3 pairings
    assert len(set(ls.pair_sets(6, 2, 45))) == 45  # as many as there are: every one, once
    assert len(ls.pair_sets(6, 2, 44)) == 45  # 45 <= EXACT_SETS: every one, whatever N
    # each k draws from its own stream: asking for another k changes no set of this one
    one = [les.name for les in ls.plan(8, what=("delete",), ks=(3,), samples=4)]
    two = [les.name for les in ls.plan(8, what=("delete",), ks=(2, 3), samples=4)]
    assert [n for n in two if n.count(",") == 2] == one[1:]


def test_the_plan_lists_the_intact_stack_then_each_kind_in_order():
    lesions = ls.plan(3, what=("swap", "block", "attn"), blocks=(0, 1))
    assert [les.name for les in lesions] == ["intact", "attn 0", "attn 1", "block 0", "block 1",
                                             "swap 0,1", "swap 1,2"]  # fmt: skip
    assert [les.kind for les in ls.plan(1)] == ["intact", "attn", "mlp", "block", "delete"]
    kinds = [les.kind for les in ls.plan(4, samples=2)]
    assert kinds == sorted(kinds, key=["intact", *ls.KINDS].index)
    ks = [les.k for les in ls.plan(4, what=("delete",), samples=2)][1:]
    assert ks == sorted(ks) and set(ks) == {1, 2, 3, 4}
    assert {les.k for les in ls.plan(5, what=("pairs",), samples=2)[1:]} == {1, 2}
    assert [les.name for les in ls.plan(4, what=("block",), lesson=True)][1:] == [
        "block 0", "block 1", "block 2", "block 3"]  # fmt: skip
    les = ls.delete_blocks(4, [2, 0])
    assert les.name == "delete {0,2}" and les.first == 0 and les.k == 2
    assert ls.swap_blocks(5, [(3, 1)]).name == "pairs (1,3)"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            dict(ks=(4,)),
            r"k 4 is out of range; expected an integer in 1\.\.3 \(the model has "
            r"L = 3 blocks\)",
        ),
        (dict(ks=(0,)), r"k 0 is out of range"),
        (
            dict(what=("pairs",), ks=(2,)),
            r"k 2 pairs swap 4 blocks but the model has L = 3; "
            r"expected k in 1\.\.1 with pairs",
        ),
        (dict(samples=0), r"N \(samples\) 0 is out of range; expected an integer in 1\.\.10,000"),
        (dict(samples=10_001), r"N \(samples\) 10001 is out of range"),
        (dict(seed=-1), r"sample seed -1 is out of range"),
        (dict(seed=2**32), r"sample seed 4294967296 is out of range"),
        (dict(blocks=(3,)), r"block 3 does not exist: the model has blocks 0\.\.2"),
        (
            dict(what=("swap",), blocks=(2,)),
            r"swap 2 needs blocks 2 and 3; the model has "
            r"blocks 0\.\.2 \(swap takes i in 0\.\.1\)",
        ),
        (dict(what=("jump",)), r"unknown intervention 'jump'; expected one of attn, mlp"),
    ],
)
def test_bad_input_is_refused_in_one_line_naming_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ls.plan(3, **kwargs)


def test_more_refusals_before_any_forward(monkeypatch):
    with pytest.raises(ValueError, match="a swap needs two blocks; the model has L = 1 block"):
        ls.plan(1, what=("swap",))
    with pytest.raises(ValueError, match="a swap needs two blocks"):
        ls.plan(1, what=("pairs",))
    with pytest.raises(ValueError, match=r"unknown intervention 'attn' \(the lesson's stack has "
                                         "one branch a layer\\)"):  # fmt: skip
        ls.plan(3, what=("attn",), lesson=True)
    with pytest.raises(ValueError, match="block 5 does not exist"):
        ls.delete_blocks(3, [5])
    with pytest.raises(ValueError, match="disjoint pairs"):
        ls.swap_blocks(4, [(0, 1), (1, 2)])

    def boom(*a, **k):
        raise AssertionError("a forward ran before the refusal")

    monkeypatch.setattr(lesionstudy, "_stream", boom)
    m = _model()
    lesions = ls.plan(3, what=("block",))
    with pytest.raises(ValueError, match="seq 17 is longer than the model's context of 16"):
        lesionstudy.model_study(m, IDS, lesions, seq=17, batch=2)
    with pytest.raises(ValueError, match="the text is 9 tokens; --seq 9 needs at least 10"):
        lesionstudy.model_study(m, IDS[:9], lesions, seq=9, batch=2)
    with pytest.raises(ValueError, match=r"seed 4294967296 is out of range"):
        lesionstudy.model_study(m, IDS, lesions, seq=8, batch=2, seeds=(0, 2**32))
    with pytest.raises(ValueError, match="the lesions must be plan\\(\\)'s for the model's L = 3"):
        lesionstudy.model_study(m, IDS, ls.plan(4), seq=8, batch=2)


@pytest.mark.parametrize("L, kw", [(3, {}), (5, dict(samples=4)), (6, dict(ks=(2, 3))),
                                   (4, dict(blocks=(0, 2), samples=2))])  # fmt: skip
def test_a_plan_too_large_is_counted_and_refused_before_it_is_built(monkeypatch, L, kw):
    n = len(ls.plan(L, **kw))
    monkeypatch.setattr(ls, "MAX_LESIONS", n)  # the count is exact: n passes, n - 1 does not
    assert len(ls.plan(L, **kw)) == n
    monkeypatch.setattr(ls, "MAX_LESIONS", n - 1)
    with pytest.raises(ValueError, match=f"the study would hold {n:,} interventions; "
                                         f"expected at most {n - 1:,}"):  # fmt: skip
        ls.plan(L, **kw)


def test_capped_counts_are_exact_below_the_cap_and_fast_for_a_deep_stack():
    for n in range(1, 16):
        for k in range(n + 1):
            for cap in (1, 4, 10, 1000):
                assert ls._comb_capped(n, k, cap) == min(math.comb(n, k), cap + 1)
                if 2 * k <= n:
                    exact = math.comb(n, 2 * k) * math.prod(range(1, 2 * k, 2))
                    assert ls._pairings(n, k, cap) == min(exact, cap + 1)
    with pytest.raises(ValueError, match="the study would hold 1,899,991 interventions"):
        ls.plan(100_000)  # C(100000, k) for every k would take minutes: capped, it takes none


def test_a_study_over_its_time_budget_is_refused_with_the_budget_it_needs():
    m = _model()
    lesions = ls.plan(3, samples=10)
    cost = ls.model_cost(m.cfg, 8, 2, lesions, 3)
    assert cost.passes == 3 * (len(lesions) - 1) and cost.seconds > 0
    ls.require_time(cost, cost.seconds * 1.01, "it", "x")
    with pytest.raises(ValueError, match=rf"it would take about .* \({cost.passes:,} lesioned "
                                         r"forward passes, .*; pass --budget \d+"):  # fmt: skip
        ls.require_time(cost, cost.seconds / 2, "it", "pass --budget {seconds}")
    big = ls.model_cost(GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12,
                                  n_embd=768), 128, 4, ls.plan(12, samples=10), 3)  # fmt: skip
    assert big.seconds > 100 * cost.seconds


def test_the_memory_estimate_bounds_what_a_study_allocates():
    """lesion_bytes is an upper bound of the study's peak (numpy's allocations, traced), here
    on a model whose logits (B, T, V) outweigh everything else."""
    import tracemalloc

    m = _model("pre-ln", L=2, V=4000)
    ids = np.random.default_rng(0).integers(0, 4000, 500)
    lesions = ls.plan(2, what=("block", "swap"))
    # numba compiles on first use
    lesionstudy.model_study(m, ids, lesions, seq=16, batch=4, seeds=(0,))
    tracemalloc.start()
    try:
        lesionstudy.model_study(m, ids, lesions, seq=16, batch=4, seeds=(0,))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    logits = 4 * 16 * 4000 * 8  # one (B, T, V) float64 array
    assert 2 * logits < peak <= lesionstudy.lesion_bytes(m.cfg, 16, 4, itemsize=8)


# --------------------------------------------------------------------------- the lesson


def test_the_lessons_stack_against_a_hand_computation_and_without_its_skip():
    lesions = ls.plan(6, what=("block", "swap"), lesson=True)
    res = lesionstudy.lesson_study(6, lesions)
    Ws = make_bank(StackConfig(depths=(6,)), 6)
    x0 = np.random.RandomState(0).randn(4, 16)

    def run(order, keep, residual=True):
        x = x0
        for p in range(6):
            if keep[p]:
                f = np.tanh(x @ Ws[order[p]])
                x = x + f if residual else f
        return x

    y = run(range(6), [True] * 6)
    for j, les in enumerate(lesions):
        yl = run(les.order, les.attn)
        assert res.values[j, 0, 0] == pytest.approx(np.linalg.norm(yl - y) / np.linalg.norm(y),
                                                    rel=1e-12, abs=1e-15)  # fmt: skip
    # the chain paths splits is the same stack: its output is y
    plain = lesionstudy.lesson_study(6, lesions, residual=False)
    yp = run(range(6), [True] * 6, residual=False)
    les = lesions[3]  # block 2 deleted: the plain stack passes x past it
    want = np.linalg.norm(run(les.order, les.attn, False) - yp) / np.linalg.norm(yp)
    assert plain.values[3, 0, 0] == pytest.approx(want, rel=1e-12)
    blocks = slice(1, 7)
    assert plain.values[blocks, 0, 0].mean() > 3 * res.values[blocks, 0, 0].mean()
    assert pathchains.stack_chain(StackConfig(depths=(6,)), 6).n == 6
    two = lesionstudy.lesson_study(6, lesions, seeds=(42, 7))
    assert two.values[1, 0, 0] == res.values[1, 0, 0] != two.values[1, 1, 0]


# --------------------------------------------------------------------------- through training


def test_every_kept_checkpoint_is_studied_on_the_same_windows(tmp_path):
    from resgrad.formats.checkpoint import Checkpoint, save_checkpoint

    text = "abc def ghij klm nopq rs " * 40
    models = {}
    for run in ("r1", "r2"):
        (tmp_path / run).mkdir()
        for it, seed in ((0, 1), (50, 2)):
            m = _model("pre-ln", seed=seed + (run == "r2"), dtype=np.float32)
            models[(run, it)] = m
            ckpt = Checkpoint(params=m.params, optimizer={}, iteration=it, vocab=CHARS,
                              config={"model": {**m.cfg.__dict__}, "train": {}})  # fmt: skip
            save_checkpoint(tmp_path / run / f"ckpt-{it}.ckpt", ckpt)
    seen = []
    got = lesionruns.run_checkpoint_lesions(str(tmp_path / "r1"), text, 8, 2, (0, 1),
                                            what=("block",), fits=seen.append)  # fmt: skip
    assert [c.iteration for c in got] == [0, 50] and len(seen) == 2
    from resgrad.train.data import CharTokenizer

    ids = CharTokenizer(CHARS).encode(text)
    for c in got:
        want = lesionstudy.model_study(models[("r1", c.iteration)], ids,
                                       ls.plan(3, what=("block",)), 8, 2, (0, 1))  # fmt: skip
        np.testing.assert_array_equal(c.result.values, want.values)
    other = lesionruns.run_checkpoint_lesions(
        str(tmp_path / "r2"), text, 8, 2, (0, 1), what=("block",)
    )
    steps = lesionruns.across_checkpoints([got, other], ["r1", "r2"])
    assert [s[0] for s in steps] == [0, 50]
    it, table, sums = steps[1]
    s1 = lesiontables.summary(lesiontables.rows(got[1].result))
    np.testing.assert_equal(tuple(sums[0]), tuple(s1))  # NaN where no swap was asked for
    assert len(sums) == 2
    dce = [r.get("dce")[0] for r in lesiontables.rows(got[1].result) if r.kind == "block"]
    assert s1.block_dce == pytest.approx(np.mean(dce)) and s1.worst_block == int(np.argmax(dce))
    assert math.isnan(s1.swap_dce)
    with pytest.raises(ValueError, match="keeps no checkpoint per step"):
        lesionruns.run_checkpoint_lesions(str(tmp_path), text)


# --------------------------------------------------------------------------- the figure


def test_the_figure_draws_the_rows_numbers_in_three_panels(tmp_path, monkeypatch):
    m = _model("pre-ln", L=4)
    res = lesionstudy.model_study(m, IDS, ls.plan(4, samples=3), seq=8, batch=2, seeds=(0, 1))
    table = lesiontables.rows(res)
    fig = lesionfigs.lesion_figure(table, "my model (pre-ln, L=4, C=8), T=8")
    a, b, c = fig.axes[:3]
    assert "my model (pre-ln, L=4, C=8)" in fig._suptitle.get_text()
    by = {line.get_label(): line for ax in (a, b, c) for line in ax.get_lines()}
    by.update({e.get_label(): e.lines[0] for ax in (a, c) for e in ax.containers})  # error bars
    blocks = [r for r in table if r.kind == "block"]
    np.testing.assert_allclose(by["whole block"].get_ydata(), [r.get("dce")[0] for r in blocks])
    np.testing.assert_allclose(by["whole block"].get_xdata(), [r.layer + 0.2 for r in blocks])
    np.testing.assert_allclose(by["attention"].get_xdata(), [r.layer - 0.2 for r in blocks])
    dels = [r for r in table if r.kind == "delete"]
    np.testing.assert_allclose(by["k blocks deleted"].get_xdata(), [r.k for r in dels])
    np.testing.assert_allclose(by["k blocks deleted"].get_ydata(), [r.get("dce")[0] for r in dels])
    band = b.collections[0].get_paths()[0].vertices[:, 1]  # the ± std band
    lo = min(r.get("dce")[0] - r.get("dce")[1] for r in dels)
    assert band.min() == pytest.approx(lo)
    swaps = [r for r in table if r.kind == "swap"]
    np.testing.assert_allclose(by["blocks i and i + 1 swapped"].get_ydata(),
                               [r.get("dce")[0] for r in swaps])  # fmt: skip
    kl = lesionfigs.lesion_figure(table, "t", metric="kl")
    assert kl.axes[0].get_ylabel() == "KL(intact || lesioned)"
    only = lesionfigs.lesion_figure([r for r in table if r.kind in ("intact", "block")], "t")
    assert [t.get_text() for t in only.axes[1].texts] == ["not measured"]
    (alone,) = only.axes[0].containers  # one kind: its points on the layers, ticks from 0
    np.testing.assert_array_equal(alone.lines[0].get_xdata(), [r.layer for r in blocks])
    lo, hi = only.axes[0].get_xlim()
    ticks = [t for t in only.axes[0].get_xticks() if lo <= t <= hi]
    assert lo < 0 < 3 < hi and {0, 3} <= set(ticks), (lo, hi, ticks)
    for f in (fig, only):  # each layer's whole unit, half a layer either side, no margin
        assert f.axes[0].get_xlim() == (-0.5, 3.5), f.axes[0].get_xlim()
    for ext in ("png", "svg"):
        lesionfigs.save_lesion_figure(tmp_path / f"f.{ext}", table, "t")
        assert (tmp_path / f"f.{ext}").stat().st_size > 1000

    def boom(*a, **k):
        raise AssertionError("drew before refusing the extension")

    monkeypatch.setattr(lesionfigs, "lesion_figure", boom)
    with pytest.raises(ValueError, match="jpg"):
        lesionfigs.save_lesion_figure(tmp_path / "f.jpg", table)
    assert not (tmp_path / "f.jpg").exists()


def test_the_progress_bar_is_on_stderr_when_asked_and_silent_off_a_terminal(capsys, monkeypatch):
    monkeypatch.setitem(budget._SPEAK, "off_terminal", True)  # as resgrad lesion runs it
    m = _model()
    lesions = ls.plan(3, what=("block",))
    cost = ls.model_cost(m.cfg, 8, 2, lesions, 1)
    with ls.progress_bar(cost, True) as bar:
        lesionstudy.model_study(m, IDS, lesions, seq=8, batch=2, tick=bar.update)
    assert bar.n == 3 == cost.passes
    err = capsys.readouterr()
    assert "lesion (about" in err.err and err.out == ""
    with ls.progress_bar(cost._replace(seconds=1e6)) as bar:  # None: a bar on a terminal only
        lesionstudy.model_study(m, IDS, lesions, seq=8, batch=2, tick=bar.update)
    err = capsys.readouterr().err  # off a terminal: the estimate in one line, no bar
    assert (
        err == "resgrad lesion: about 11.6 days (3 passes); it keeps nothing part-way: "
        "Ctrl-C stops it\n"
    ), err


# --------------------------------------------------------------------------- the referee


def test_a_directory_transformers_saved_is_lesioned_as_torch_lesions_it(tmp_path):
    """transformers' GPT-2, written by its own save_pretrained and read by load_pretrained:
    every intervention gives transformers' logits within 1e-10 (float64), lesioned the torch
    way: a deleted block is transformer.h without module i, a deleted branch its c_proj
    weight and bias zeroed, a swap the module list reordered."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from resgrad.train.bpe import char_tokenizer_json
    from resgrad.train.pretrained import load_pretrained

    cfg = transformers.GPT2Config(vocab_size=len(CHARS), n_positions=16, n_embd=32, n_layer=4,
                                  n_head=4, bos_token_id=None, eos_token_id=None,
                                  attn_implementation="eager")  # fmt: skip
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(cfg).to(torch.float64).eval()
    with torch.no_grad():  # branches big enough that every lesion moves the logits
        for b in hf.transformer.h:
            b.attn.c_proj.weight.mul_(10)
            b.mlp.c_proj.weight.mul_(10)
    d = tmp_path / "gpt2"
    hf.save_pretrained(d)
    (d / "tokenizer.json").write_text(char_tokenizer_json(CHARS), encoding="utf-8")
    model, _ = load_pretrained(d, dtype=np.float64)
    idx = _idx()

    def torch_logits(h):
        with torch.no_grad():
            return h(torch.tensor(idx), use_cache=False).logits.numpy()  # (B, T, V)

    intact = torch_logits(hf)
    lesions = ls.plan(4, samples=2)
    assert {les.kind for les in lesions} == {"intact", *ls.KINDS}
    for les in lesions:
        h = copy.deepcopy(hf)
        blocks, kept = list(h.transformer.h), []
        for p in range(4):
            b = blocks[les.order[p]]
            if not (les.attn[p] or les.mlp[p]):
                continue  # the block deleted: the module list without it
            if not (les.attn[p] and les.mlp[p]):
                with torch.no_grad():
                    sub = b.mlp if les.attn[p] else b.attn
                    sub.c_proj.weight.zero_()
                    sub.c_proj.bias.zero_()
            kept.append(b)
        h.transformer.h = torch.nn.ModuleList(kept)
        ref = torch_logits(h)
        got = lesionstudy.lesioned_logits(model, idx, les)
        assert np.abs(got - ref).max() <= 1e-10, les.name
        if les.kind != "intact":
            assert np.abs(ref - intact).max() > 1e-2, les.name  # the lesion did something
