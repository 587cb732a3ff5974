"""train.bits, the probe of whether BLAS gives the same bits on every thread count: the
cores a process may use (its affinity, else the machine's count, at least one); every
count a command could choose on them; a computation run at each count under that count,
its arrays copied before the next run, and compared in dtype, shape and bytes; one
training step run at each count with a fresh generator of one seed. A count limited on
another library or not at all, a result compared with itself, a difference in dtype or
shape let through, a generator shared between counts are the bugs mutmut plants here
(scripts/mutmut/run.py). The probe's verdict on real kernels is tested in subprocesses in
test_same_bits.py."""

import os
from types import SimpleNamespace

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from resgrad.nn.model import GPT, GPTConfig
from resgrad.perf.threads import blas_threads
from resgrad.train import bits
from resgrad.train.bits import (
    MAX_PROBED,
    counts_agree,
    probe_counts,
    step_counts_agree,
    usable_cores,
)

# -- usable_cores


def test_usable_cores_are_the_affinity_s_count(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 64)  # the machine's count is not asked
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert usable_cores() == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2, 5, 7}, raising=False)
    assert usable_cores() == 3
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(), raising=False)
    assert usable_cores() == 1  # at least one


@pytest.mark.parametrize("error", [OSError, AttributeError])
def test_without_an_affinity_the_usable_cores_are_the_machine_s(monkeypatch, error):
    def no_affinity(pid):
        raise error("no sched_getaffinity here")

    monkeypatch.setattr(os, "sched_getaffinity", no_affinity, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert usable_cores() == 6
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert usable_cores() == 1
    monkeypatch.setattr(os, "cpu_count", lambda: None)  # the count is unknown
    assert usable_cores() == 1


def test_usable_cores_off_linux(monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert usable_cores() == 4


# -- probe_counts


def test_probe_counts_are_every_count_up_to_the_bound_then_half_and_all():
    assert probe_counts(1) == (1,)
    assert probe_counts(2) == (1, 2)
    assert probe_counts(3) == (1, 2, 3)
    assert probe_counts(MAX_PROBED) == tuple(range(1, MAX_PROBED + 1))
    assert probe_counts(MAX_PROBED + 1) == (*range(1, MAX_PROBED + 1), MAX_PROBED + 1)
    assert probe_counts(4 * MAX_PROBED + 2) == (*range(1, MAX_PROBED + 1), 2 * MAX_PROBED + 1,
                                                4 * MAX_PROBED + 2)  # fmt: skip
    assert all(type(n) is int for n in probe_counts(4 * MAX_PROBED + 2))  # counts, not halves


def test_probe_counts_hold_one_count_however_few_the_cores():
    assert probe_counts(0) == (1,)


# -- counts_agree


def _blas_count() -> int:
    return blas_threads()


def test_each_run_is_under_its_count_and_the_count_before_comes_back():
    seen = []
    with threadpool_limits(limits=2, user_api="blas"):
        assert counts_agree(lambda: seen.append(_blas_count()) or [np.zeros(1)], (1, 2, 1))
        assert _blas_count() == 2
    assert seen == [1, 2, 1]


def test_only_the_blas_pool_is_limited():
    # an OpenMP pool (a numba kernel's threads, here torch's libgomp) keeps the count the
    # run gives it: the probe measures BLAS under the run's conditions, not all pools at n
    pytest.importorskip("torch")

    def openmp():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "openmp"]

    seen = []
    with threadpool_limits(limits=2, user_api="openmp"):
        assert openmp() and set(openmp()) == {2}
        counts_agree(lambda: seen.append((_blas_count(), openmp())) or [np.zeros(1)], (1,))
    assert seen == [(1, [2] * len(seen[0][1]))]


def test_one_count_that_differs_in_one_bit_is_found():
    def one_bit(n):  # float32 1 + 2**-23 * (count == n): one ulp at one count
        return lambda: [np.zeros(2), np.float32(1) + np.float32(2**-23) * (_blas_count() == n)]

    assert counts_agree(one_bit(3), (1, 2))
    assert not counts_agree(one_bit(1), (1, 2))  # the first count differs
    assert not counts_agree(one_bit(2), (1, 2))
    assert not counts_agree(one_bit(3), (1, 2, 3, 1))  # one in the middle


def test_a_buffer_reused_by_the_computation_is_compared_as_it_was_at_each_count():
    out = np.zeros(3)  # the computation writes into its own buffer, as an out= pass does

    def fill():
        out[:] = _blas_count()
        return [out]

    assert not counts_agree(fill, (1, 2))


@pytest.mark.parametrize(
    "first, second",
    [
        ([np.zeros(2, np.int64)], [np.zeros(2, np.float64)]),  # the same bytes, another dtype
        ([np.zeros((2, 3))], [np.zeros((3, 2))]),  # the same bytes, another shape
        ([np.zeros(2)], [np.zeros(3)]),
        ([np.zeros(2)], [np.zeros(2), np.zeros(2)]),  # one array more
        ([np.zeros(2), np.zeros(2)], [np.zeros(2)]),
    ],
)
def test_another_dtype_shape_or_count_of_arrays_is_a_difference(first, second):
    seen = iter([first, second])
    assert not counts_agree(lambda: next(seen), (1, 2))
    seen = iter([first, first])
    assert counts_agree(lambda: next(seen), (1, 2))


# -- step_counts_agree


class FakeShards:
    """Shards whose pass is made of the generator's draws and the BLAS count at each run."""

    made: list = []

    def __init__(self, n):
        self.n = n

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def forward_backward(self, model, x, y, rng, act_rms=True):
        FakeShards.made.append((self.n, x, y, rng.random()))
        vary = model(_blas_count())  # the part of the pass the test makes depend on the count
        return SimpleNamespace(loss=vary.get("loss", 1.5),
                               grads={"a": np.ones(2), "b": vary.get("b", np.zeros(3))},
                               stream_norms=[0.5, vary.get("norm", 0.25)])  # fmt: skip


@pytest.fixture
def fake(monkeypatch):
    FakeShards.made = []
    monkeypatch.setattr(bits, "Shards", FakeShards)
    return FakeShards.made


X, Y = np.zeros((2, 4), np.int64), np.ones((2, 4), np.int64)


def test_the_step_runs_the_run_s_shards_and_batch_with_a_fresh_generator_each_count(fake):
    assert step_counts_agree(lambda n: {}, X, Y, 3, (1, 2), seed=5)
    first = np.random.default_rng(5).random()
    assert [(n, x is X, y is Y, r) for n, x, y, r in fake] == [(3, True, True, first)] * 2
    fake.clear()
    step_counts_agree(lambda n: {}, X, Y, 1, (1,))  # the signature's default seed, 0
    assert fake[0][3] == np.random.default_rng(0).random()


@pytest.mark.parametrize(
    "vary",
    [
        lambda n: {"loss": 1.5 + (n == 2)},
        lambda n: {"b": np.full(3, float(n == 2))},  # one gradient of several
        lambda n: {"norm": 0.25 * n},  # a stream norm
    ],
)
def test_the_step_compares_its_loss_every_gradient_and_the_stream_norms(fake, vary):
    assert not step_counts_agree(vary, X, Y, 1, (1, 2))
    assert step_counts_agree(vary, X, Y, 1, (1, 1))


def test_a_real_step_agrees_with_itself_and_leaves_the_model_alone():
    model = GPT(GPTConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=16,
                          dropout=0.1), seed=0)  # fmt: skip
    before = {k: v.copy() for k, v in model.params.items()}
    x = np.random.default_rng(1).integers(20, size=(4, 8))  # (B, T)
    # the same count twice: the same masks and the same sums, whichever BLAS kernel
    assert step_counts_agree(model, x, np.roll(x, -1, axis=1), 2, (1, 1))
    assert all(np.array_equal(before[k], model.params[k]) for k in before)
