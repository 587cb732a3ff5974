"""The split of a gradient by path length: exact sums against the model's own backward,
every path enumerated by its own masked backward, the binomial closed form of a linear
stack, Veit's sampled estimate against its exact expectation, and a planted bug."""

import itertools
import math

import numpy as np
import pytest

from resgrad.lab.lesson import StackConfig, run_stack
from resgrad.lab.paths import chains as pathchains
from resgrad.lab.paths import exact as paths
from resgrad.lab.paths import figs as pathfigs
from resgrad.lab.paths import veit
from resgrad.lab.study import budget
from resgrad.nn.blocks import VARIANTS
from resgrad.nn.model import GPT, GPTConfig


def _model(variant, n_layer=2, seed=0, init="xavier"):
    """A small float64 GPT whose branches carry a real share of the gradient."""
    cfg = GPTConfig(vocab_size=13, block_size=8, n_layer=n_layer, n_head=2, n_embd=8,
                    variant=variant, init=init)  # fmt: skip
    m = GPT(cfg, seed=seed, dtype=np.float64)
    rng = np.random.default_rng(seed + 100)
    for k, a in m.params.items():
        if k.endswith(".alpha"):
            a[:] = rng.uniform(0.3, 0.8)  # rezero's alpha, away from its init of 0
        elif k.endswith((".b", "b_qkv", "b_fc", "b_proj")):
            a[:] = rng.standard_normal(a.shape) * 0.1  # biases, so their gradients are split too
        elif k.endswith("w_proj"):
            a *= 3.0  # branches loud enough that every path length matters
    return m


def _chain(variant, n_layer=2, seed=0, B=2, T=6):
    m = _model(variant, n_layer, seed)
    ids = np.random.default_rng(seed).integers(0, 13, size=(B, T + 1))  # (B, T + 1)
    return m, ids, pathchains.gpt_chain(m, ids[:, :-1], ids[:, 1:])


def _rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


# ----------------------------------------------------------------- the parts sum exactly


@pytest.mark.parametrize("variant", VARIANTS)
def test_parts_sum_to_the_models_own_gradient(variant):
    m, ids, chain = _chain(variant, n_layer=3)
    sp = paths.split(chain, keep=True)
    # the referee: a fresh forward and GPT's own backward_stream, not the chain's copy
    _, _, cache = m.forward(ids[:, :-1], ids[:, 1:])
    grads, dxs = m.backward_stream(cache)
    assert len(sp.parts) == 4 and sp.keys == tuple(range(7))
    for i, g in enumerate(dxs):
        assert _rel(sum(sp.parts[i].values()), g) < 1e-12, i
        assert np.isclose(sp.full_norms[i], np.linalg.norm(g), rtol=1e-14)
    assert sp.sum_errors.max() < 1e-12
    for name, g in grads.items():
        parts = sp.param_parts[name]
        assert parts, name
        assert _rel(sum(parts.values()), g) < 1e-12, name
        # the norms and projections reported are those of the kept parts
        for k, p in parts.items():
            assert np.isclose(sp.param_norms[name][k], np.linalg.norm(p), rtol=1e-12)
            assert np.isclose(sp.param_dots[name][k], np.vdot(p, g), rtol=1e-9, atol=1e-300)
    # projection shares sum to 1 at every boundary, exactly as the parts sum
    np.testing.assert_allclose(sp.share_proj().sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(sp.share_norm().sum(axis=1), 1.0, rtol=1e-12)
    assert sp.vjps == sum(range(1, 7)) - (15 if variant == "none" else 0)  # n(n+1)/2, or n


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_split_is_not_trivial(variant):
    """Every scheme with a skip spreads the gradient at x_0 over several k (else the
    brute-force comparison below would prove little)."""
    _, _, chain = _chain(variant, n_layer=3)
    sp = paths.split(chain)
    big = (sp.norms[0] > 1e-3 * sp.full_norms[0]).sum()
    assert big == 1 if variant == "none" else big >= 5


def test_identity_path_is_the_top_gradient_unchanged_where_the_skip_is_the_identity():
    for variant in ("pre-ln", "residual", "rezero", "ln-scaling"):
        _, _, chain = _chain(variant)
        sp = paths.split(chain, keep=True)
        assert np.array_equal(sp.parts[0][0], chain.dtop)  # k = 0: no weight matrix passed
        assert np.array_equal(sp.parts[2][0], chain.dtop)
    # post-ln's identity path passes the LayerNorms: not the top gradient
    _, _, chain = _chain("post-ln")
    assert not np.allclose(paths.split(chain, keep=True).parts[0][0], chain.dtop)


def test_a_chain_that_forgets_ln_scalings_factor_does_not_sum_to_the_gradient(monkeypatch):
    """ln-scaling's branch is f(s ln(x)), s = l^-p: its VJP must pass s; a chain built
    as if s were 1 (pre-ln's) splits another model's gradient, and the sum says so."""
    real = pathchains._gpt_step

    def unscaled(c, p, i, variant, alpha, names):
        return real(c, p, i, variant, 1.0, names)

    monkeypatch.setattr(pathchains, "_gpt_step", unscaled)
    _, _, chain = _chain("ln-scaling", n_layer=3)
    assert paths.split(chain).sum_errors[0] > 1e-2


def test_none_puts_everything_at_k_equal_2L():
    L = 3
    _, _, chain = _chain("none", n_layer=L)
    sp = paths.split(chain, keep=True)
    for i in range(L + 1):
        k = 2 * (L - i)  # the only path from the loss to x_i passes every branch above it
        assert list(sp.parts[i]) == [k]
        assert sp.norms[i, k] == pytest.approx(sp.full_norms[i], rel=1e-14)
        assert np.count_nonzero(sp.norms[i]) == 1
        assert sp.share_proj()[i, k] == pytest.approx(1.0, rel=1e-12)
    # the tied wte: the head's gradient at k = 0, the embedding's at k = 2L, nothing between
    nz = np.flatnonzero(sp.param_norms["wte"])
    assert nz.tolist() == [0, 2 * L]
    assert np.flatnonzero(sp.param_norms["wpe"]).tolist() == [2 * L]
    # block i's weights sit under 2(L - 1 - i) (MLP) and 2(L - 1 - i) + 1 (attention) branches
    assert np.flatnonzero(sp.param_norms["blocks.0.mlp.w_fc"]).tolist() == [2 * L - 2]
    assert np.flatnonzero(sp.param_norms["blocks.0.attn.w_qkv"]).tolist() == [2 * L - 1]


def test_parameters_take_the_k_of_the_gradient_entering_their_branch():
    """The top block's MLP sees only the k = 0 gradient; its attention k = 0 and 1; ln_f
    and post-ln's trunk norms the k of the gradient reaching them."""
    _, _, chain = _chain("pre-ln", n_layer=2)
    sp = paths.split(chain, keep=True)
    assert np.flatnonzero(sp.param_norms["blocks.1.mlp.w_fc"]).tolist() == [0]
    assert np.flatnonzero(sp.param_norms["blocks.1.attn.w_qkv"]).tolist() == [0, 1]
    assert np.flatnonzero(sp.param_norms["blocks.0.attn.w_qkv"]).tolist() == [0, 1, 2, 3]
    assert np.flatnonzero(sp.param_norms["ln_f.g"]).tolist() == [0]
    _, _, chain = _chain("post-ln", n_layer=2)
    sp = paths.split(chain, keep=True)
    assert np.flatnonzero(sp.param_norms["blocks.1.ln2.g"]).tolist() == [0]  # on the trunk
    assert np.flatnonzero(sp.param_norms["blocks.1.ln1.g"]).tolist() == [0, 1]


def test_tied_wte_gets_the_heads_part_at_k0_and_the_lookups_parts_by_k():
    m, ids, chain = _chain("pre-ln", n_layer=2)
    sp = paths.split(chain, keep=True)
    head = chain.top["wte"]  # (V, C) the LM head's gradient
    used = np.unique(ids[:, :-1])
    unused = np.setdiff1d(np.arange(13), used)
    for k in range(1, 5):  # the lookup's parts live only in the rows of tokens in the batch
        assert not sp.param_parts["wte"][k][unused].any()
    # k = 0: the head's gradient, plus the lookup's k = 0 part in the used rows
    assert np.array_equal(sp.param_parts["wte"][0][unused], head[unused])
    x0 = sp.parts[0][0].reshape(-1, 8)  # (B*T, C) the k = 0 stream at x_0
    row = np.zeros((13, 8))
    np.add.at(row, ids[:, :-1].reshape(-1), x0)
    np.testing.assert_allclose(sp.param_parts["wte"][0], head + row, rtol=1e-13, atol=1e-17)


# ----------------------------------------------------------------- every path, one by one


def _enumerated(chain):
    """Every path's gradient at x_0 by its own masked backward, summed per k and per (a, m)."""
    by_k, by_am = {}, {}
    kinds = [s.kind for s in chain.steps]
    for bits in itertools.product((0, 1), repeat=chain.n):
        S = [j for j, b in enumerate(bits) if b]
        g = veit.path_gradient(chain, S)
        a = sum(1 for j in S if kinds[j] == 0)
        by_k[len(S)] = by_k.get(len(S), 0) + g
        by_am[a, len(S) - a] = by_am.get((a, len(S) - a), 0) + g
    return by_k, by_am


def _brute_force_error(chain):
    """Max over k of ||enumerated part_k - split's part_k|| / ||dL/dx_0||."""
    sp = paths.split(chain, keep=True)
    by_k, _ = _enumerated(chain)
    g = chain.ref_stream[0]
    zero = np.zeros_like(g)
    return max(np.linalg.norm(by_k[k] - sp.parts[0].get(k, zero)) for k in by_k) / np.linalg.norm(g)


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_path_enumerated_equals_the_per_k_parts(variant):
    _, _, chain = _chain(variant, n_layer=4)  # n = 8 branches, 256 paths
    assert _brute_force_error(chain) < 1e-10


def test_every_path_of_ten_branches_and_the_joint_split():
    _, _, chain = _chain("pre-ln", n_layer=5, seed=3)  # n = 10, 1024 paths
    assert chain.n == 10
    sp = paths.split(chain, joint=True, keep=True)
    _, by_am = _enumerated(chain)
    g = chain.ref_stream[0]
    for key, part in by_am.items():
        assert np.linalg.norm(part - sp.parts[0][key]) < 1e-10 * np.linalg.norm(g), key


def test_every_path_of_the_lesson_stack_equals_the_per_k_parts():
    chain = pathchains.stack_chain(StackConfig(depths=(9,), scale=1.5), residual=True)
    assert _brute_force_error(chain) < 1e-10


def test_a_branch_counted_at_the_wrong_k_is_caught(monkeypatch):
    """The planted bug: MLP branches leave k unchanged. The parts still sum to the whole
    gradient (that test cannot see it); the enumeration of every path does."""
    _, _, chain = _chain("pre-ln", n_layer=3)
    good = paths._bump

    def bad(key, kind):
        return key if kind == 1 else good(key, kind)

    monkeypatch.setattr(paths, "_bump", bad)
    sp = paths.split(chain, keep=True)
    assert sp.sum_errors.max() < 1e-12  # blind to it
    assert _brute_force_error(chain) > 1e-3  # caught
    monkeypatch.setattr(paths, "_bump", good)
    assert _brute_force_error(chain) < 1e-10


# ----------------------------------------------------------------- the joint split


@pytest.mark.parametrize("variant", ["pre-ln", "post-ln", "rezero"])
def test_the_joint_split_sums_to_the_per_k_split(variant):
    _, _, chain = _chain(variant, n_layer=3)
    sk = paths.split(chain, keep=True)
    sj = paths.split(chain, joint=True, keep=True)
    assert sj.keys == tuple(itertools.product(range(4), range(4)))
    for i in range(4):
        for k in range(7):
            same_k = [sj.parts[i][am] for am in sj.parts[i] if sum(am) == k]
            if k in sk.parts[i]:
                assert _rel(sum(same_k), sk.parts[i][k]) < 1e-12, (i, k)
            # projections are linear in the part: they add exactly across (a, m)
            cols = [j for j, am in enumerate(sj.keys) if sum(am) == k]
            assert sj.dots[i, cols].sum() == pytest.approx(sk.dots[i, k], rel=1e-9, abs=1e-30)
    for name in chain.ref_params:
        for k in range(7):
            cols = [j for j, am in enumerate(sj.keys) if sum(am) == k]
            assert sj.param_dots[name][cols].sum() == pytest.approx(
                sk.param_dots[name][k], rel=1e-9, abs=1e-30
            )
    # n(n+1)/2 VJPs for the per-k split; the joint split does more (one per (a, m) pair)
    assert sk.vjps == 21 and sj.vjps > sk.vjps


# ----------------------------------------------------------------- the lesson's stack


def test_the_lessons_stack_parts_sum_to_its_gradient_and_the_plain_stack_is_all_at_N():
    cfg = StackConfig()
    chain = pathchains.stack_chain(cfg)  # N = 20, the lesson's table
    sp = paths.split(chain)
    prof = run_stack(cfg, 20, residual=True)
    np.testing.assert_allclose(sp.full_norms, prof.grad_norms, rtol=1e-13)
    assert sp.sum_errors.max() < 1e-12
    assert sp.norms[0, 0] == pytest.approx(cfg.upstream_norm)  # the highway: ones, norm 8
    plain = paths.split(pathchains.stack_chain(cfg, residual=False))
    assert np.flatnonzero(plain.norms[0]).tolist() == [20]
    assert plain.norms[0, 20] == pytest.approx(run_stack(cfg, 20, residual=False).grad_norms[0])


def test_a_linear_stack_matches_the_binomial_closed_form():
    """E||part_k||^2 = C(n, k) sigma^(2k) ||dout||^2 for x + x W, W_ij ~ N(0, sigma^2 / C)
    (Veit et al.'s setting): cross terms between distinct paths vanish in expectation."""
    n, sigma, S = 6, 0.7, 400
    cfgs = [StackConfig(depths=(n,), scale=sigma, width=32, batch=2, seed=s) for s in range(S)]
    chains = [pathchains.stack_chain(c, activation="linear") for c in cfgs]
    sq = np.array([paths.split(c).norms[0] ** 2 / 64.0 for c in chains])  # (S, n + 1)
    expect = np.array([math.comb(n, k) * sigma ** (2 * k) for k in range(n + 1)])
    mean, se = sq.mean(axis=0), sq.std(axis=0, ddof=1) / math.sqrt(S)
    assert sq[:, 0] == pytest.approx(1.0)  # the identity path is exact, every seed
    assert (np.abs(mean[1:] - expect[1:]) < 4 * se[1:]).all(), (mean, expect, se)
    assert (np.abs(mean / expect - 1) < 0.1).all()
    # a wrong sigma (the bump counting one k too many) would be many standard errors off
    wrong = np.array([math.comb(n, k) * sigma ** (2 * k + 2) for k in range(n + 1)])
    assert (np.abs(mean[1:] - wrong[1:]) > 4 * se[1:]).all()


# ----------------------------------------------------------------- Veit's protocol


def test_veits_sampled_estimate_converges_to_its_exact_expectation():
    chain = pathchains.stack_chain(StackConfig(depths=(8,), scale=1.5))
    exact = veit.veit_exact(chain)
    assert exact.count.tolist() == [math.comb(8, k) for k in range(9)]
    np.testing.assert_allclose(exact.total, exact.count * exact.mean)
    errs = []
    for N in (10, 100, 1000):
        est = veit.veit_sample(chain, samples=N, seed=7)
        err = np.abs(est.mean - exact.mean)
        assert (err <= 4 * exact.std / math.sqrt(N) + 1e-12).all(), N  # within sampling error
        errs.append((err / exact.mean).max())
    assert errs[2] < errs[0] and errs[2] < 0.05
    # one path of length 0 and one of length n: sampling them is exact
    est = veit.veit_sample(chain, samples=3, seed=0, ks=[0, 8])
    np.testing.assert_allclose(est.mean, exact.mean[[0, 8]], rtol=1e-14)
    assert (
        veit.veit_sample(chain, 5, seed=1).mean.tolist()
        == veit.veit_sample(chain, 5, seed=1).mean.tolist()
    )  # seeded


def test_veits_magnitudes_bound_the_exact_split_from_above():
    """Figure 6(c) sums magnitudes: by the triangle inequality it bounds ||part_k||."""
    _, _, chain = _chain("pre-ln", n_layer=3)
    sp, ve = paths.split(chain), veit.veit_exact(chain)
    assert (sp.norms[0] <= ve.total * (1 + 1e-12)).all()
    assert (sp.norms[0][2:] < 0.999 * ve.total[2:]).any()  # cancellation is real


# ----------------------------------------------------------------- reading and refusing


def test_effective_range_and_the_table():
    assert paths.effective_range([0.05, 0.5, 0.4, 0.05]) == (1, 2)
    assert paths.effective_range([1.0, 0, 0]) == (0, 0)
    assert paths.effective_range([0.25] * 4, mass=1.0) == (0, 3)
    assert paths.effective_range([0.1, 0.45, 0.0, 0.45]) == (1, 3)
    _, _, chain = _chain("pre-ln")
    sp = paths.split(chain)
    rows = paths.path_table([sp, sp])
    assert [r.count for r in rows] == [1, 4, 6, 4, 1]
    assert sum(r.share_proj for r in rows) == pytest.approx(1.0)
    assert all(r.share_proj_std == 0 for r in rows)


def test_bad_input_is_refused_naming_the_value():
    _, _, chain = _chain("pre-ln")
    with pytest.raises(ValueError, match="branch 4 is not one of the chain's 0..3"):
        veit.path_gradient(chain, [4])
    with pytest.raises(ValueError, match="samples must be a positive integer, got 0"):
        veit.veit_sample(chain, 0, seed=0)
    with pytest.raises(ValueError, match="path length 5 is outside 0..4"):
        veit.veit_sample(chain, 1, seed=0, ks=[5])
    with pytest.raises(ValueError, match="unknown activation 'relu'"):
        pathchains.stack_chain(activation="relu")
    with pytest.raises(ValueError, match="mass must be in"):
        paths.effective_range([1.0], mass=0)
    with pytest.raises(ValueError, match="joint"):
        paths.path_table([paths.split(chain, joint=True)])
    big = pathchains.stack_chain(StackConfig(depths=(17,)))
    with pytest.raises(ValueError, match="131072 paths to enumerate"):
        veit.veit_exact(big)


# ----------------------------------------------------------------- figures


def _lesson_splits(seeds, depth=6):
    chains = [
        pathchains.stack_chain(StackConfig(depths=(depth,), scale=1.5, seed=s)) for s in seeds
    ]
    return [paths.split(c) for c in chains], [veit.veit_sample(c, 20, seed=0) for c in chains]


def _lines(ax):
    return {ln.get_label(): np.asarray(ln.get_ydata(), float) for ln in ax.get_lines()}


def test_the_figure_draws_the_splits_numbers_mean_over_seeds_with_their_band():
    splits, veits = _lesson_splits((42, 43, 44))
    fig = pathfigs.path_figure(splits, veits, "lesson")
    ax_a, ax_b, ax_c = fig.axes[:3]
    ax_h, ax_s = [a for a in fig.axes if a.images]  # the mean share and its spread
    assert ax_h is fig.axes[3]
    assert [p.get_height() for p in ax_a.patches[:7]] == [math.comb(6, k) for k in range(7)]
    (b,) = _lines(ax_b).values()
    np.testing.assert_allclose(b, np.mean([v.mean for v in veits], axis=0), rtol=1e-14)
    c = _lines(ax_c)
    veit_c = next(v for k, v in c.items() if k.startswith("Veit"))
    exact_c = next(v for k, v in c.items() if k.startswith("exact"))
    np.testing.assert_allclose(veit_c, np.mean([v.total for v in veits], axis=0), rtol=1e-14)
    np.testing.assert_allclose(exact_c, np.mean([s.norms[0] for s in splits], axis=0), rtol=1e-14)
    assert (exact_c <= veit_c * (1 + 1e-9)).all()  # a vector sum under the sum of magnitudes
    # a min..max band around every line of (b) and (c): three seeds differ
    assert len(ax_b.collections) == 1 and len(ax_c.collections) == 2
    band = ax_c.collections[-1].get_paths()[0].vertices[:, 1]
    lo = np.min([s.norms[0] for s in splits], axis=0)
    assert np.isclose(band.min(), lo.min())
    # the heatmap: the mean share by (boundary, k), 7 boundaries, one 90% outline each
    img = ax_h.images[0].get_array()
    mean = np.mean([s.share_norm() for s in splits], axis=0)  # (7, 7)
    assert img.shape == (7, 7) and img.mask[6, 1:].all() and not img.mask[0].any()
    np.testing.assert_allclose(img[~img.mask], np.maximum(mean, pathfigs.HEAT_FLOOR)[~img.mask])
    assert len([p for p in ax_h.patches if not p.get_fill()]) == 7
    std = np.std([s.share_norm() for s in splits], axis=0)
    np.testing.assert_allclose(ax_s.images[0].get_array()[0], std[0])


def test_with_one_seed_and_no_veit_the_figure_says_so_and_draws_no_band():
    splits, _ = _lesson_splits((42,))
    fig = pathfigs.path_figure(splits)
    ax_b, ax_c = fig.axes[1], fig.axes[2]
    (label,) = _lines(ax_b)
    assert "exact ||part_k|| / C(n, k)" in label and "not sampled" in ax_b.get_title(loc="left")
    count = np.array([math.comb(6, k) for k in range(7)])
    np.testing.assert_allclose(_lines(ax_b)[label], splits[0].norms[0] / count, rtol=1e-14)
    assert list(_lines(ax_c)) == ["exact: ||part_k|| (vector sum)"]
    assert not ax_b.collections and not ax_c.collections
    assert len([a for a in fig.axes if a.images]) == 1  # no spread panel
    assert "one seed" in fig._suptitle.get_text()


def test_save_path_figure_writes_png_or_svg_and_refuses_a_bad_extension_first(
    tmp_path, monkeypatch
):
    splits, veits = _lesson_splits((42, 43))
    pathfigs.save_path_figure(tmp_path / "f.png", splits, veits)
    pathfigs.save_path_figure(tmp_path / "f.svg", splits)
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in (tmp_path / "f.svg").read_bytes()[:500]

    def boom(*a, **k):
        raise AssertionError("drawn before the extension was checked")

    monkeypatch.setattr(pathfigs, "path_figure", boom)
    with pytest.raises(ValueError, match="expected a file name ending in .png or .svg"):
        pathfigs.save_path_figure(tmp_path / "f.pdf", splits)
    assert not (tmp_path / "f.pdf").exists()


def test_the_figure_refuses_what_it_cannot_draw():
    splits, veits = _lesson_splits((42,))
    other, _ = _lesson_splits((42,), depth=5)
    with pytest.raises(ValueError, match="at least one split"):
        pathfigs.path_figure([])
    with pytest.raises(ValueError, match="the same n"):
        pathfigs.path_figure(splits + other)
    with pytest.raises(ValueError, match="every k = 0..6"):
        six = pathchains.stack_chain(StackConfig(depths=(6,)))
        pathfigs.path_figure(splits, [veit.veit_sample(six, 3, seed=0, ks=[0, 1])])
    _, _, chain = _chain("pre-ln")
    with pytest.raises(ValueError, match="joint"):
        pathfigs.path_figure([paths.split(chain, joint=True)])


def test_model_veit_samples_each_seeds_windows():
    from resgrad.lab.study import text_windows

    m = _model("pre-ln")
    ids = np.random.default_rng(5).integers(0, 13, size=200)
    got = veit.model_veit(m, ids, seq=6, batch=2, seeds=(0, 3), samples=4)
    for s, v in zip((0, 3), got):
        w = text_windows(ids, 6, 2, s)  # (B, T + 1)
        ref = veit.veit_sample(pathchains.gpt_chain(m, w[:, :-1], w[:, 1:]), 4, seed=0)
        np.testing.assert_allclose(v.mean, ref.mean, rtol=1e-12)
    assert not np.allclose(got[0].mean, got[1].mean)  # two batches, two estimates
    with pytest.raises(ValueError, match="seq 9 is longer than the model's context of 8"):
        veit.model_veit(m, ids, seq=9, batch=2, seeds=(0,), samples=1)


def test_a_split_too_long_to_finish_is_refused_before_it_starts(monkeypatch):
    monkeypatch.setattr(paths, "MAX_SPLIT_BRANCHES", 5)
    chain = pathchains.stack_chain(StackConfig(), 6)
    with pytest.raises(ValueError, match=r"6 branches needs n\(n \+ 1\)/2 = 21 branch VJPs; "
                                         r"expected at most 5 branches"):  # fmt: skip
        paths.split(chain)
    assert paths.split(pathchains.stack_chain(StackConfig(), 5)).vjps == 15


# ----------------------------------------------------------------- the statistics, by hand


def _hand_split(norms, dots=None):
    """A split at one boundary with the given ||part_k|| (and <part_k, g>, ||g|| = 1)."""
    norms = np.array([norms], dtype=float)  # (1, K)
    dots = norms.copy() if dots is None else np.array([dots], dtype=float)
    K = norms.shape[1]
    return paths.PathSplit("hand", K - 1, tuple(range(K)), norms, dots, np.ones(1), np.zeros(1),
                           {}, {}, {}, 0)  # fmt: skip


def test_the_table_is_the_mean_and_the_population_std_of_three_hand_made_seeds():
    """Three seeds with ||part_0||, ||part_1|| = (1, 3), (2, 2), (3, 1): shares of the norm
    1/4, 1/2, 3/4 at k = 0, whose mean is 1/2 and whose std (ddof=0, as documented) is
    sqrt(((1/4)^2 + 0 + (1/4)^2) / 3); the projections 0.1, 0.2, 0.6."""
    splits = [_hand_split([1, 3], [0.1, 0.9]), _hand_split([2, 2], [0.2, 0.8]),
              _hand_split([3, 1], [0.6, 0.4])]  # fmt: skip
    r0, r1 = paths.path_table(splits)
    assert (r0.k, r0.count, r1.k, r1.count) == (0, 1, 1, 1)
    assert r0.share_norm == pytest.approx(0.5, rel=1e-15)
    assert r0.share_norm_std == pytest.approx(math.sqrt(2 * 0.25**2 / 3), rel=1e-14)
    assert r1.share_norm_std == pytest.approx(math.sqrt(2 * 0.25**2 / 3), rel=1e-14)
    assert r0.norm == pytest.approx(2.0) and r0.norm_std == pytest.approx(math.sqrt(2 / 3))
    assert r0.share_proj == pytest.approx(0.3)
    assert r0.share_proj_std == pytest.approx(math.sqrt((0.2**2 + 0.1**2 + 0.3**2) / 3))
    one = paths.path_table(splits[:1])[0]
    assert (one.share_norm, one.share_norm_std, one.norm_std) == (0.25, 0.0, 0.0)


def test_effective_range_ties_go_to_the_lowest_k_and_an_exact_mass_is_enough():
    assert paths.effective_range([0.45, 0.1, 0.45], mass=0.5) == (0, 1)  # (1, 2) holds 0.55 too
    assert paths.effective_range([0.3, 0.3, 0.3, 0.1], mass=0.6) == (0, 1)
    assert paths.effective_range([0.1, 0.3, 0.3, 0.3], mass=0.6) == (1, 2)
    # exactly the mass: the range ends there, not one k further
    assert paths.effective_range([0.5, 0.4, 0.1]) == (0, 1)
    assert paths.effective_range([0.1, 0.4, 0.5]) == (1, 2)
    assert paths.effective_range([0.0, 0.0, 0.9, 0.1]) == (2, 2)
    assert paths.effective_range([0.7, 0.2, 0.1]) == (0, 1)
    assert paths.effective_range([0.2, 0.4, 0.3, 0.1]) == (0, 2)  # 0.2 + 0.4 + 0.3 < 0.9 in floats
    assert paths.effective_range([0.05, 0.0, 0.9, 0.05], mass=1.0) == (0, 3)
    # unnormalised shares: the mass is of their sum
    assert paths.effective_range([5.0, 40.0, 50.0, 5.0]) == (1, 2)


def test_paths_in_range_counts_both_ends():
    rows = paths.path_table([_hand_split([1.0] * 5)])  # n = 4: 1, 4, 6, 4, 1 paths
    assert [r.count for r in rows] == [1, 4, 6, 4, 1]
    assert paths.paths_in_range(rows, (1, 3)) == 4 + 6 + 4
    assert paths.paths_in_range(rows, (0, 0)) == 1
    assert paths.paths_in_range(rows, (4, 4)) == 1
    assert paths.paths_in_range(rows, (0, 4)) == 16
    assert paths.paths_in_range(rows, (2, 3)) == 10


def test_veit_sample_is_its_documented_protocol_recomputed_by_hand():
    """Per k: ``default_rng([seed, k])`` draws ``samples`` sets of k distinct branches; the
    mean and the std (ddof=0) of their paths' magnitudes at x_0."""
    chain = pathchains.stack_chain(StackConfig(depths=(6,), scale=1.5))
    est = veit.veit_sample(chain, 7, seed=3, ks=[2, 5])
    assert est.ks == (2, 5) and est.samples == 7 and est.seed == 3
    for j, k in enumerate((2, 5)):
        rng = np.random.default_rng([3, k])
        mags = [float(np.linalg.norm(veit.path_gradient(chain, rng.choice(6, k, replace=False))))
                for _ in range(7)]  # fmt: skip
        mean = sum(mags) / 7
        assert len(set(mags)) > 1  # a spread, so that the std's ddof matters
        assert est.mean[j] == pytest.approx(mean, rel=1e-13)
        assert est.std[j] == pytest.approx(math.sqrt(sum((m - mean) ** 2 for m in mags) / 7),
                                           rel=1e-12)  # fmt: skip


def test_veit_sample_of_one_k_is_the_same_whatever_other_ks_are_asked_for():
    chain = pathchains.stack_chain(StackConfig(depths=(6,), scale=1.5))
    alone = veit.veit_sample(chain, 9, seed=4, ks=[2])
    with5 = veit.veit_sample(chain, 9, seed=4, ks=[2, 5])
    before = veit.veit_sample(chain, 9, seed=4, ks=[5, 2])
    every = veit.veit_sample(chain, 9, seed=4)
    assert alone.mean[0] == with5.mean[0] == before.mean[1] == every.mean[2]
    assert alone.std[0] == with5.std[0] == before.std[1] == every.std[2]
    assert with5.mean[1] == before.mean[0] == every.mean[5]
    assert veit.veit_sample(chain, 9, seed=5, ks=[2]).mean[0] != alone.mean[0]  # seeded


# ----------------------------------------------------------------- the cost, before the work


def test_the_estimate_counts_exactly_the_vjps_the_work_does():
    ticks = []
    chain = pathchains.stack_chain(StackConfig(depths=(7,)))
    sp = paths.split(chain, tick=ticks.append)
    assert sum(ticks) == sp.vjps == budget.lesson_work(7, 16, 4, chains=1).vjps == 28
    ticks.clear()
    veit.veit_sample(chain, 3, seed=0, tick=ticks.append)
    assert sum(ticks) == 3 * 28 == budget.lesson_work(7, 16, 4, 1, samples=3).vjps - 28
    plain = paths.split(pathchains.stack_chain(StackConfig(depths=(7,)), residual=False))
    assert plain.vjps == budget.lesson_work(7, 16, 4, 1, residual=False).vjps == 7
    m = _model("pre-ln", n_layer=3)
    ids = np.random.default_rng(0).integers(0, 13, size=100)
    ticks.clear()
    splits = paths.model_splits(m, ids, 6, 2, (0, 1), tick=ticks.append)
    veit.model_veit(m, ids, 6, 2, (0, 1), 2, tick=ticks.append)
    assert sum(ticks) == 2 * splits[0].vjps + 2 * 2 * 21 == budget.model_work(
        m.cfg, 6, 2, chains=2, samples=2).vjps  # fmt: skip
    none = _model("none", n_layer=3)
    assert paths.model_splits(none, ids, 6, 2)[0].vjps == budget.model_work(none.cfg, 6, 2, 1).vjps


def test_the_estimate_grows_with_every_count_that_multiplies_the_work():
    cfg = GPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=64)
    base = budget.model_work(cfg, 64, 4, chains=3)
    assert base.seconds > 0
    for more in (budget.model_work(cfg, 64, 4, chains=6), budget.model_work(cfg, 64, 8, 3),
                 budget.model_work(cfg, 32 * 2, 4, 3, samples=10)):  # fmt: skip
        assert more.seconds > 1.9 * base.seconds
    assert budget.model_work(cfg, 64, 4, 3, samples=10).vjps == 11 * base.vjps
    wide = GPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=256)
    assert budget.model_work(wide, 64, 4, 3).seconds > 4 * base.seconds
    assert budget.lesson_work(20, 16, 4, 1, samples=10**9).seconds > 86400  # days


def test_require_time_refuses_over_the_budget_and_says_what_it_would_take():
    w = budget.Work(vjps=1_234_567, seconds=7200.0)
    budget.require_time(w, 7200.0, "this", "pass --budget {seconds}")  # at the budget: allowed
    with pytest.raises(ValueError) as e:
        budget.require_time(w, 600.0, "the lesson's stack", "pass --budget {seconds} to allow it")
    msg = str(e.value)
    assert msg == (
        "the lesson's stack would take about 2.0 h (1,234,567 branch VJPs; an "
        "estimate), more than the budget of 10.0 min; pass --budget 9000 to allow it"
    )
    assert [budget.format_seconds(t) for t in (5, 90, 7200, 3 * 86400)] == [
        "5 s", "1.5 min", "2.0 h", "3.0 days"]  # fmt: skip


def test_the_progress_bar_counts_the_vjps_and_shows_only_when_asked_or_long(monkeypatch):
    import io

    w = budget.Work(vjps=28, seconds=1.0)
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    with budget.work_bar(w, progress=True) as bar:
        paths.split(pathchains.stack_chain(StackConfig(depths=(7,))), tick=bar.update)
        assert (bar.n, bar.total) == (28, 28)
    assert "100%" in err.getvalue() and "paths (about 1 s)" in err.getvalue()
    assert budget.work_bar(w).disable  # under PROGRESS_AFTER_S: never
    assert budget.work_bar(w, progress=False).disable
    long = budget.Work(vjps=28, seconds=budget.PROGRESS_AFTER_S + 1)
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setitem(budget._SPEAK, "off_terminal", False)  # inside a study: silent
    assert budget.work_bar(long).disable and err.getvalue() == ""
    monkeypatch.setitem(budget._SPEAK, "off_terminal", True)  # a command that measures
    assert budget.work_bar(long).disable  # long, but stderr is no terminal: no bar ...
    said = err.getvalue()  # ... and one line with the estimate instead
    want = "resgrad paths: about 4 s (28 VJPs); it keeps nothing part-way: Ctrl-C stops it\n"
    assert said == want
    assert budget.work_bar(w).disable and err.getvalue() == said  # short work stays silent

    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    monkeypatch.setattr("sys.stderr", tty)
    assert not budget.work_bar(long).disable  # long, on a terminal
    assert budget.work_bar(w).disable
    assert "it keeps nothing" not in tty.getvalue()  # the bar says it there, not a line


def test_the_figure_names_x_0_as_what_it_is_the_lessons_input_or_the_embeddings():
    """The lesson's stack has no embeddings: its x_0 is the stack's input."""
    lesson, _ = _lesson_splits((42,))
    _, _, chain = _chain("pre-ln")
    for splits, x0 in ((lesson, "the stack's input"), ([paths.split(chain)], "the embeddings'")):
        ax_h = next(a for a in pathfigs.path_figure(splits).axes if a.images)
        assert ax_h.get_ylabel().startswith(f"boundary i (x_0: {x0}"), ax_h.get_ylabel()


# ----------------------------------------------------------------- each sublayer's branch share


@pytest.mark.parametrize("variant", VARIANTS)
def test_branch_and_skip_norms_are_the_whole_gradients_own(variant):
    """By linearity the branch's VJPs summed over the keys are the VJP of the whole
    gradient: the chain walked once with the total, not split, gives the same norms."""
    L = 3
    _, _, chain = _chain(variant, n_layer=L)
    sp = paths.split(chain)
    d = chain.dtop  # (B, T, C) the whole gradient, walked down unsplit
    for j in reversed(range(2 * L)):
        s = chain.steps[j]
        t = s.trunk(d)[0] if s.trunk is not None else d
        skip = s.skip(t) if s.skip is not None else np.zeros_like(t)
        dx = s.branch(t)[0]
        assert sp.branch_norms[j] == pytest.approx(np.linalg.norm(dx), rel=1e-12), j
        assert sp.skip_norms[j] == pytest.approx(np.linalg.norm(skip), rel=1e-12, abs=0), j
        d = skip + dx
    assert _rel(d, m_grad_at_x0(variant, L)) < 1e-12


def m_grad_at_x0(variant, L):
    m, ids, _ = _chain(variant, n_layer=L)
    _, _, cache = m.forward(ids[:, :-1], ids[:, 1:])
    return m.backward_stream(cache)[1][0]


def test_where_the_skip_is_the_identity_it_passes_the_boundarys_gradient():
    """The skip of a block's top sublayer (its MLP) passes exactly the gradient at the
    boundary above the block: its norm is that boundary's full norm."""
    for variant in ("pre-ln", "residual", "rezero", "ln-scaling"):
        sp = paths.split(_chain(variant, n_layer=3)[2])
        for b in range(3):
            assert sp.skip_norms[2 * b + 1] == pytest.approx(sp.full_norms[b + 1], rel=1e-12)
        share = sp.branch_share()
        assert ((share > 0) & (share < 1)).all()  # every branch carries a real part here


def test_a_branch_that_sends_nothing_down_has_share_0_and_none_has_share_1():
    m, ids, _ = _chain("rezero", n_layer=3)
    for k in m.params:
        if k.endswith(".alpha"):
            m.params[k][:] = 0.0  # rezero at its init: every branch scaled by 0
    sp = paths.split(pathchains.gpt_chain(m, ids[:, :-1], ids[:, 1:]))
    assert np.array_equal(sp.branch_share(), np.zeros(6))
    sp = paths.split(_chain("none", n_layer=3)[2])  # no skip: all of it through the branch
    assert np.array_equal(sp.skip_norms, np.zeros(6))
    assert np.array_equal(sp.branch_share(), np.ones(6))
