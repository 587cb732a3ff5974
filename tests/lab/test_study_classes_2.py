"""Classes of bug in the studies, each checked from first principles (continued from
test_study_classes.py): a bound moved by one; an estimate off by a constant factor; a load
reading that ignores the load."""

import dataclasses
import itertools
import math
import os
import re

import numpy as np
import pytest

from resgrad.lab.lesion import interventions as les
from resgrad.lab.lesion import measure
from resgrad.lab.lesion.study import LesionStudy
from resgrad.lab.paths import chains as pathchains
from resgrad.lab.paths import exact as pathsx
from resgrad.lab.paths import veit as pathveit
from resgrad.lab.paths.study import PathsStudy
from resgrad.lab.study import budget
from resgrad.lab.study.windows import check_seq, refuse_long_seq, text_windows
from resgrad.nn.model import GPT, GPTConfig
from resgrad.perf import threads

V = 20
IDS = np.random.default_rng(11).integers(0, V, 300)


def _gpt(variant="pre-ln", L=4, block_size=16):
    cfg = GPTConfig(vocab_size=V, block_size=block_size, n_layer=L, n_head=2, n_embd=16,
                    variant=variant, init="xavier")  # fmt: skip
    return GPT(cfg, seed=1, dtype=np.float64)


# --------------------------------------------------------------------------- 4. bounds


def test_k_block_and_swap_bounds_each_accept_the_last_and_refuse_one_more():
    for L in (4, 5):
        les.plan(L, what=("delete",), ks=(L,))  # every block deleted
        with pytest.raises(ValueError, match="out of range"):
            les.plan(L, what=("delete",), ks=(L + 1,))
        with pytest.raises(ValueError, match="out of range"):
            les.plan(L, what=("delete",), ks=(0,))
        les.plan(L, what=("pairs",), ks=(L // 2,))
        with pytest.raises(ValueError, match="pairs"):
            les.plan(L, what=("pairs",), ks=(L // 2 + 1,))
        les.plan(L, what=("block", "attn"), blocks=(L - 1,))
        for bad in (L, -1):
            with pytest.raises(ValueError, match="does not exist"):
                les.plan(L, what=("block",), blocks=(bad,))
        assert les.plan(L, what=("swap",), blocks=(L - 2,))[1].name == f"swap {L - 2},{L - 1}"
        with pytest.raises(ValueError, match="swap"):
            les.plan(L, what=("swap",), blocks=(L - 1,))


def test_by_default_every_k_from_one_to_its_largest_is_planned():
    for L in (4, 5):
        plan = les.plan(L, what=("delete", "pairs"), samples=10_000)
        dk = sorted({x.k for x in plan if x.kind == "delete"})
        pk = sorted({x.k for x in plan if x.kind == "pairs"})
        assert dk == list(range(1, L + 1)) and pk == list(range(1, L // 2 + 1))
        assert sum(x.kind == "delete" for x in plan) == 2**L - 1  # every non-empty subset
        assert sum(x.kind == "swap" for x in les.plan(L, what=("swap",))) == L - 1


def test_seeds_in_0_to_2_32_minus_1_are_accepted_and_2_32_refused():
    top, over = 2**32 - 1, 2**32
    les.plan(4, what=("delete",), ks=(2,), samples=2, seed=top)
    with pytest.raises(ValueError, match="seed"):
        les.plan(4, what=("delete",), ks=(2,), samples=2, seed=over)
    LesionStudy(sample_seed=top)
    with pytest.raises(ValueError, match="sample-seed"):
        LesionStudy(sample_seed=over)
    m = _gpt(L=2)
    res = measure.model_study(m, IDS, [les.intact(2)], seq=4, batch=1, seeds=(top,))
    assert res.seeds == (top,)
    with pytest.raises(ValueError, match="seed"):
        measure.model_study(m, IDS, [les.intact(2)], seq=4, batch=1, seeds=(over,))
    with pytest.raises(ValueError, match="seed"):
        measure.lesson_study(3, [les.intact(3)], seeds=(over,))


def test_a_text_of_t_plus_1_tokens_is_one_window_and_t_tokens_are_refused():
    ids = np.arange(9)
    w = text_windows(ids, 8, 3, seed=0)
    assert w.shape == (3, 9) and (w == ids).all()
    with pytest.raises(ValueError, match="needs at least 9"):
        text_windows(ids[:8], 8, 1, seed=0)
    # every start drawn is valid, and the first and last valid starts are both drawn
    ids = np.arange(20)
    starts = set()
    for seed in range(20):
        w = text_windows(ids, 8, 16, seed)
        assert (np.diff(w, axis=1) == 1).all() and w.min() >= 0 and w.max() <= 19
        starts |= set(w[:, 0].tolist())
    assert starts == set(range(0, 20 - 8))  # 0 .. N - T - 1


def test_seq_equal_to_block_size_is_accepted_and_one_more_refused():
    m = _gpt(L=2, block_size=8)
    refuse_long_seq(m.cfg, 8)
    check_seq(m.cfg, 8)
    with pytest.raises(ValueError, match="--seq 9"):
        refuse_long_seq(m.cfg, 9)
    with pytest.raises(ValueError, match="seq 9"):
        check_seq(m.cfg, 9)
    measure.model_study(m, IDS, [les.intact(2)], seq=8, batch=1, seeds=(0,))
    LesionStudy(seq=8, batch=1).fits(m.cfg)
    PathsStudy(seq=8, batch=1).fits(m.cfg)
    with pytest.raises(ValueError, match="positions"):
        LesionStudy(seq=9, batch=1).fits(m.cfg)


def _range_by_hand(shares, mass):
    """The shortest [lo, hi] holding ``mass`` of the sum, the lowest lo on ties."""
    total = sum(shares)
    best = None
    for lo, hi in itertools.combinations_with_replacement(range(len(shares)), 2):
        if sum(shares[lo : hi + 1]) >= mass * total * (1 - 1e-9):
            if best is None or hi - lo < best[1] - best[0]:
                best = (lo, hi)
    return best


def test_the_effective_range_reaches_both_ends_and_matches_a_brute_force():
    K = 6
    for k in range(K):
        one = [0.0] * K
        one[k] = 1.0
        assert pathsx.effective_range(one) == (k, k)  # the first k and the last k
    assert pathsx.effective_range([1.0] * K, mass=1.0) == (0, K - 1)
    assert pathsx.effective_range([0.45, 0.1, 0.45], mass=0.5) == (0, 1)  # a tie: lowest lo
    rng = np.random.default_rng(5)
    for _ in range(200):
        s = rng.random(rng.integers(1, 9)) ** 3
        mass = float(rng.choice([0.5, 0.8, 0.9, 1.0]))
        assert pathsx.effective_range(s, mass) == _range_by_hand(list(s), mass)


# --------------------------------------------------------------------------- 5. estimates


def _count_positions(monkeypatch):
    """Count the block positions the lesion study really runs: a whole block_forward, or a
    block's two steps (one branch deleted)."""
    seen = {"block": 0, "step": 0}
    real_block, real_step = measure.block_forward, measure._step

    def block(*a, **k):
        seen["block"] += 1
        return real_block(*a, **k)

    def step(*a, **k):
        seen["step"] += 1
        return real_step(*a, **k)

    monkeypatch.setattr(measure, "block_forward", block)
    monkeypatch.setattr(measure, "_step", step)
    return lambda: seen["block"] + seen["step"] / 2


def _first(x):
    return next((p for p in range(x.L) if x.order[p] != p or not (x.attn[p] and x.mlp[p])), x.L)


def test_the_lesion_estimate_counts_the_passes_and_blocks_the_study_runs(monkeypatch):
    m = _gpt(L=4)
    study = LesionStudy(seq=8, batch=2, seeds=(0, 1, 2), what=("attn", "block", "swap", "delete"),
                        ks=(1, 3), samples=2)  # fmt: skip
    lesions = study.plan(4)
    positions = _count_positions(monkeypatch)
    ticks = []
    res = study.run(m, IDS, tick=ticks.append)
    S, J = 3, len(lesions)
    by_hand = S * 4 + S * sum(4 - _first(x) for x in lesions)  # the intact streams, the tails
    assert positions() == res.block_passes == by_hand
    cost = study.cost(m.cfg, 1)
    assert (cost.passes, cost.blocks) == (sum(ticks), res.block_passes) == (S * (J - 1), by_hand)
    assert res.full_passes == S * J * 4
    two = study.cost(m.cfg, 2)
    assert (two.passes, two.blocks) == (2 * cost.passes, 2 * cost.blocks)
    assert two.seconds == pytest.approx(2 * cost.seconds, rel=1e-12)
    flops = budget.FLOAT32_FLOPS_PER_S  # the lesioned forwards are float32
    block_s = les.BLOCK_OVERHEAD_S + (24 * 2 * 8 * 16**2 + 4 * 2 * 8**2 * 16) / flops
    head_s = (2 * 2 * 8 * 16 * V + 10 * 2 * 8 * V) / flops
    assert cost.seconds == pytest.approx(by_hand * block_s + S * J * head_s, rel=1e-12)


def test_the_lessons_estimate_counts_its_passes_and_layers(monkeypatch):
    lesions = les.plan(5, samples=3, lesson=True)
    calls = []
    real = measure._StackSubject._layer
    monkeypatch.setattr(measure._StackSubject, "_layer",
                        lambda self, x, W: calls.append(1) or real(self, x, W))  # fmt: skip
    ticks = []
    res = measure.lesson_study(5, lesions, seeds=(42, 7), tick=ticks.append)
    deleted = sum(not x.attn[p] for x in lesions for p in range(_first(x), 5))
    ran = len(calls) + 2 * deleted  # a deleted layer is a position passed, not run
    cost = les.lesson_cost(lesions, 2)
    assert ran == res.block_passes == cost.blocks == 2 * (5 + sum(5 - _first(x) for x in lesions))
    assert cost.passes == sum(ticks) == 2 * (len(lesions) - 1)


def _counted_chain(m, seq=6, batch=2, seed=0):
    w = text_windows(IDS, seq, batch, seed)
    chain = pathchains.gpt_chain(m, w[:, :-1], w[:, 1:])
    calls = []

    def wrap(f):
        return lambda d: calls.append(1) or f(d)

    chain.steps = [s._replace(branch=wrap(s.branch)) for s in chain.steps]
    return chain, calls


@pytest.mark.parametrize("variant", ["pre-ln", "none"])
def test_the_paths_estimate_counts_the_vjps_a_split_performs(variant):
    m = _gpt(variant, L=3)
    chain, calls = _counted_chain(m)
    ticks = []
    sp = pathsx.split(chain, tick=ticks.append)
    n = 6  # 2 branches a block
    want = n * (n + 1) // 2 if variant != "none" else n
    assert len(calls) == sum(ticks) == sp.vjps == want
    assert budget.model_work(m.cfg, 6, 2, chains=1).vjps == want
    chain, calls = _counted_chain(m)
    ticks = []
    pathveit.veit_sample(chain, 3, seed=0, tick=ticks.append)
    # each sampled path of k branches: k VJPs; with no skip only k = n's paths exist
    assert len(calls) == sum(ticks) == 3 * (sum(range(n + 1)) if variant != "none" else n)
    assert budget.model_work(m.cfg, 6, 2, 1, samples=3).vjps == want + len(calls)


def test_the_paths_study_estimate_is_what_it_ticks_and_linear_in_models():
    m = _gpt(L=2)
    study = PathsStudy(seq=6, batch=2, seeds=(0, 1, 2), veit=2)
    ticks = []
    study.run(m, IDS, tick=ticks.append)
    n = 4
    assert sum(ticks) == study.cost(m.cfg, 1).vjps == 3 * (n * (n + 1) // 2 + 2 * n * (n + 1) // 2)
    one, three = study.cost(m.cfg, 1), study.cost(m.cfg, 3)
    assert three.vjps == 3 * one.vjps and three.seconds == pytest.approx(3 * one.seconds)


def _suggested(msg):
    return float(re.search(r"--budget (\d+)", msg).group(1))


def test_the_budget_refusal_fires_exactly_over_the_estimate_and_suggests_enough():
    more = "pass --budget {seconds} to allow it"
    budget.refuse_over_budget(100.0, 100.0, "it", "1 VJP", more)  # at the budget: allowed
    for seconds in (100.0 * (1 + 1e-9), 110.0, 124.0, 126.0, 1e5):
        with pytest.raises(ValueError) as e:
            budget.refuse_over_budget(seconds, 100.0, "it", "1 VJP", more)
        assert _suggested(str(e.value)) >= seconds
    m = _gpt(L=4)
    for study in (LesionStudy(seq=8, batch=2, seeds=(0, 1), samples=3),
                  PathsStudy(seq=8, batch=2, seeds=(0, 1))):  # fmt: skip
        for models in (1, 3):
            need = study.cost(m.cfg, models).seconds
            dataclasses.replace(study, budget=need).require(m.cfg, models)
            tight = dataclasses.replace(study, budget=need * (1 - 1e-9))
            with pytest.raises(ValueError, match="budget") as e:
                tight.require(m.cfg, models)
            assert _suggested(str(e.value)) >= need


# --------------------------------------------------------------------------- 6. the load


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A fake machine: ``cores`` usable of ``online``, ``running`` tasks in /proc/stat (the
    reader among them), ``own`` of this process's threads in state R."""
    state = {"usable": 8, "online": 8, "running": 1, "own": 1}
    stat = tmp_path / "stat"
    tasks = tmp_path / "task"
    real_read, real_own = threads.read_procs_running, threads.read_own_running

    def read(path=None):
        stat.write_text(f"cpu  1 2 3 4\nprocs_running {state['running']}\nprocs_blocked 0\n")
        return real_read(str(stat))

    def own(task_dir=None):
        for tid in range(6):
            d = tasks / str(100 + tid)
            d.mkdir(parents=True, exist_ok=True)
            s = "R" if tid < state["own"] else "S"
            (d / "stat").write_text(f"{100 + tid} (python (x)) {s} 1 2 3\n")
        return real_own(str(tasks))

    monkeypatch.setattr(threads, "read_procs_running", read)
    monkeypatch.setattr(threads, "read_own_running", own)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(state["usable"])),
                        raising=False)  # fmt: skip
    monkeypatch.setattr(os, "cpu_count", lambda: state["online"])
    return state


def _expected(usable, online, others):
    busy = math.floor(others * usable / online + 0.5)  # the other tasks on the usable cores
    return max(1, usable - busy)


def test_the_thread_count_falls_as_the_load_rises_within_1_and_the_usable_cores(machine):
    for usable, online in [(8, 8), (4, 16), (2, 2)]:
        machine.update(usable=usable, online=online)
        counts = []
        for running in range(0, 3 * online + 2):
            machine["running"] = running
            n = threads.load_aware_threads()
            assert 1 <= n <= usable
            assert n == _expected(usable, online, max(0, running - 1))
            counts.append(n)
        assert counts[0] == counts[1] == usable and counts[-1] == 1
        assert all(a >= b for a, b in zip(counts, counts[1:]))


def test_mid_run_this_processes_own_running_threads_are_not_load(machine):
    machine.update(usable=8, online=8, running=6, own=4)  # 4 of ours (the reader one), 2 others
    assert threads.reread_threads() == 8 - 2
    machine.update(running=6, own=1)
    assert threads.reread_threads() == 8 - 5
    assert threads.load_aware_threads() == 8 - 5


def test_the_follower_reads_again_after_its_interval_and_follows_the_load(machine):
    machine.update(usable=8, online=8, running=1, own=1)
    f = threads.ThreadFollower(start=8, every=10, cooldown=3, window=5, min_steps=3)
    counts = [f(1.0) for _ in range(5)]
    machine["running"] = 4  # three others start
    counts += [f(1.0) for _ in range(4)]
    assert f.reads == 0 and counts == [8] * 9  # not yet read
    assert f(1.0) == 5 and f.reads == 1  # the 10th step since the start: read
    machine["running"] = 9
    assert [f(1.0) for _ in range(9)] == [5] * 9
    assert f(1.0) == 1 and f.reads == 2
    machine["running"] = 2
    counts = [f(1.0) for _ in range(10)]
    assert counts[-1] == 7 and f.reads == 3  # the load falls: more threads again
    calls = []
    g = threads.ThreadFollower(start=4, read=lambda: calls.append(1) or 4, every=100,
                               cooldown=3, window=5, min_steps=3)  # fmt: skip
    for _ in range(4):
        g(1.0)
    g(2.0)  # slower than 1.5x the median, 5 steps after the start: read at once
    assert len(calls) == 1
    g(2.0)  # slow again, but within the cooldown
    assert len(calls) == 1
    with pytest.raises(ValueError):
        threads.ThreadFollower(start=4, read=lambda: 0, every=1)(1.0)
