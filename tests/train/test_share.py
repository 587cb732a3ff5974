"""Gradient norms shared among the shards' threads: the same norms, bit for bit, in order."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from resgrad.train import optim
from resgrad.train.optim import MIN_SHARE, grad_norms, share


def _grads(sizes, seed=0):
    rng = np.random.default_rng(seed)
    return {f"p{i}": rng.standard_normal(n).astype(np.float32) for i, n in enumerate(sizes)}


def test_shared_norms_are_the_serial_ones_in_the_keys_order():
    # enough to share: two threads get work; the largest array is not first in key order
    g = _grads([1000, 3 * MIN_SHARE // 2, 17, MIN_SHARE, 5 * optim.CHUNK // 2])
    with ThreadPoolExecutor(2) as pool:
        shared = grad_norms(g, pool=pool, parts=2)
    serial = grad_norms(g)
    assert list(shared) == list(serial) == list(g)  # the global norm sums them in this order
    assert all(shared[k] == serial[k] for k in g)  # bit for bit
    want = {k: float(np.sqrt(np.sum(a.astype(np.float64) ** 2))) for k, a in g.items()}
    assert all(shared[k] == pytest.approx(want[k], rel=1e-12) for k in g)


def test_share_splits_by_size_and_only_when_worth_it():
    seen = []

    class Pool:  # records the groups instead of running them on threads
        def map(self, fn, groups):
            seen.extend(groups)
            return [fn(keys) for keys in groups]

    big = {"a": np.zeros(MIN_SHARE), "b": np.zeros(3 * MIN_SHARE), "c": np.zeros(2 * MIN_SHARE)}
    out = share(Pool(), 2, big, lambda k: big[k].size)
    assert list(out) == ["a", "b", "c"] and out["b"] == 3 * MIN_SHARE
    assert sorted(map(sorted, seen)) == [["a", "c"], ["b"]]  # 3 + 3 million: balanced
    seen.clear()
    small = {"a": np.zeros(MIN_SHARE), "b": np.zeros(MIN_SHARE - 1)}  # under 2 x MIN_SHARE
    assert share(Pool(), 2, small, lambda k: k) == {"a": "a", "b": "b"} and seen == []
    assert share(None, 2, big, lambda k: k) == {"a": "a", "b": "b", "c": "c"}
    assert share(Pool(), 1, big, lambda k: k) and seen == []


def test_the_trainer_s_norms_do_not_depend_on_the_threads():
    """train_step on a model large enough to share its norms: records equal on 1 and 2
    threads of the same 2 shards (one BLAS thread each either way: BLAS's own threads may
    add in another order)."""
    from threadpoolctl import threadpool_limits

    from resgrad.nn.model import GPT, GPTConfig
    from resgrad.train.loop import train_step
    from resgrad.train.optim import AdamW, AdamWConfig
    from resgrad.train.shards import Shards

    cfg = GPTConfig(vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=320)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 50, (4, 16))
    y = rng.integers(0, 50, (4, 16))
    results = []
    for threads in (1, 2):
        m = GPT(cfg, seed=0)
        assert m.num_params() >= 2 * MIN_SHARE  # shared on 2 threads
        with threadpool_limits(1), Shards(2, threads=threads) as shards:
            r = train_step(m, AdamW(m.params, AdamWConfig()), x, y, 1e-3, 1.0, None,
                           dynamics=True, shards=shards)  # fmt: skip
        results.append((r, m.params))
    (a, pa), (b, pb) = results
    assert a.norms == b.norms and list(a.norms) == list(b.norms) and a.grad_norm == b.grad_norm
    assert all(np.array_equal(pa[k], pb[k]) for k in pa)
