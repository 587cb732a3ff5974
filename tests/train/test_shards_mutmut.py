"""train.shards, how a batch is split over threads: ``min(n, threads)`` shards run at once
on that many threads (named for a thread dump), each with its share of the BLAS threads
(BLAS's own count by default, one thread when no BLAS library is found); a pass trains
(dropout on) from the run's own generator with one shard and draws nothing from it without
dropout; a diverged model's NaN comes back without a warning; closing twice is harmless.
A pool of another size or none, a thread limit not applied, a generator drawn from when
it should not be, a warning where the caller names the NaN are the bugs mutmut plants here
(scripts/mutmut/run.py)."""

import threading
import warnings

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from resgrad.nn.model import GPT, GPTConfig
from resgrad.train import shards as shards_module
from resgrad.train.shards import Shards, _combine
from tests.perf.test_memory import _peak
from tests.train.test_shards import CFG, _batch, _bytes


def _blas_threads():
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


def _watch(monkeypatch, parties):
    """Record, for each shard's pass, its thread's name and the BLAS threads it ran with;
    each pass waits until ``parties`` passes run at once."""
    seen, barrier, real = [], threading.Barrier(parties, timeout=20), shards_module._pass

    def watched(*job):
        seen.append((threading.current_thread().name, tuple(_blas_threads())))
        barrier.wait()
        return real(*job)

    monkeypatch.setattr(shards_module, "_pass", watched)
    return seen


@pytest.mark.parametrize("n, threads, workers, blas", [(2, 2, 2, 1), (4, 2, 2, 1), (2, 4, 2, 2),
                                                       (2, 3, 2, 1), (3, 3, 3, 1)])  # fmt: skip
def test_min_n_threads_shards_run_at_once_each_with_its_share_of_blas(
    monkeypatch, n, threads, workers, blas
):
    model = GPT(CFG, seed=1, dtype=np.float32)
    x, y = _batch(n)
    model.forward(x, y)  # loads every library a pass uses (SciPy's, with its own BLAS) first
    seen = _watch(monkeypatch, workers)
    with Shards(n, threads=threads) as s:
        assert (s.workers, s.blas_threads) == (workers, blas)
        s.forward_backward(model, x, y)
        names = {name for name, _ in seen}
        assert len(names) == workers and all(t.startswith("resgrad-shard") for t in names)
        assert all(set(b) == {blas} for _, b in seen)  # BLAS limited inside every shard
        monkeypatch.setattr(shards_module, "_pass", seen.clear)  # the loss: its own check
        limited = []
        monkeypatch.setattr(model, "forward", lambda *a: limited.append(_blas_threads()) or
                            (None, 0.0, None))  # fmt: skip
        s.loss(model, x, y)
        assert limited and all(set(b) == {blas} for b in limited)


def test_by_default_the_threads_are_blas_own(monkeypatch):
    with threadpool_limits(2, user_api="blas"):
        with Shards(3) as s:
            assert (s.workers, s.blas_threads) == (2, 1)
        with Shards(1) as s:
            assert (s.workers, s.pool) == (1, None)

    class NoBlas:  # threadpoolctl finds no BLAS library
        def select(self, user_api):
            return self

        def info(self):
            return []

    monkeypatch.setattr(shards_module, "ThreadpoolController", NoBlas)
    with Shards(2) as s:
        assert (s.workers, s.pool) == (1, None)


def test_one_shard_trains_from_the_runs_own_generator():
    model = GPT(GPTConfig(**{**CFG.__dict__, "dropout": 0.5}), seed=4, dtype=np.float32)
    x, y = _batch(4)
    p = Shards(1).forward_backward(model, x, y, np.random.default_rng(7))
    want = model.forward(x, y, train=True, rng=np.random.default_rng(7))[1]
    assert p.loss == want != model.forward(x, y)[1]  # dropout on: not the eval loss


def test_without_dropout_the_runs_generator_is_not_drawn_from():
    model = GPT(CFG, seed=4, dtype=np.float32)
    x, y = _batch(4)
    rng = np.random.default_rng(7)
    before = rng.bit_generator.state
    with Shards(2, threads=2) as s:
        a = s.forward_backward(model, x, y, rng)
        b = s.forward_backward(model, x, y)
    assert rng.bit_generator.state == before and _bytes(a) == _bytes(b)


@pytest.mark.parametrize("n", [1, 2])
def test_a_diverged_pass_gives_its_nan_without_a_warning(n):
    model = GPT(CFG, seed=4, dtype=np.float32)
    model.params["wte"][0, 0] = np.inf  # one weight blown up
    x, y = _batch(4)
    x[:, 0] = 0  # every row reads it
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning fails the test
        with Shards(n, threads=2) as s:
            p = s.forward_backward(model, x, y)
            loss = s.loss(model, x, y)
    assert np.isnan(p.loss) and np.isnan(loss)
    assert any(not np.isfinite(g).all() for g in p.grads.values())


def test_shards_that_overflow_when_added_give_inf_without_a_warning():
    big = np.array([3e38], dtype=np.float32)  # each finite, their sum past float32's range
    parts = [(1.0, {"w": big.copy()}, [1.0], []), (2.0, {"w": big.copy()}, [1.0], [])]
    jobs = [(None, None, None, 0.5, None, False)] * 2  # each shard: half the targets
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = _combine(parts, jobs)
    assert p.loss == 1.5 and np.isinf(p.grads["w"]).all()


def test_a_pass_frees_what_the_backward_no_longer_needs():
    cfg = GPTConfig(vocab_size=4096, block_size=8, n_layer=2, n_head=2, n_embd=16)
    model = GPT(cfg, seed=0, dtype=np.float32)
    x, y = _batch(4, V=4096)

    def keeping():  # the same pass, every activation kept to the end
        model.backward_stream(model.forward(x, y, train=True)[2])

    def sharded():
        Shards(1).forward_backward(model, x, y)

    sharded()
    keeping()  # imports and caches warmed
    probs = 4 * 8 * 4096 * 4  # (B, T, V) float32: the probabilities, reused for dlogits
    assert _peak(sharded) <= _peak(keeping) - probs // 4


def test_closing_twice_is_harmless():
    s = Shards(2, threads=2)
    assert s.pool is not None
    s.close()
    s.close()
    assert s.pool is None
