"""Memory estimates: upper bounds of what the commands allocate, and the one-line refusal."""

import tracemalloc

import numpy as np
import pytest

from resgrad.lab.flow import FlowConfig, measure
from resgrad.lab.lesson import StackConfig, depth_table
from resgrad.nn.model import GPT, GPTConfig
from resgrad.perf import memory
from resgrad.train.optim import AdamW, AdamWConfig


@pytest.fixture(scope="module")
def warm():
    """One small flow measurement first: the first in a process imports modules lazily and
    loads the compiled kernels, memory that is the process's, not the measurement's (the
    first case measured cold read 58 MB against its 22 MB estimate)."""
    measure(FlowConfig(variant="pre-ln", depth=1, width=8, heads=2, seq=4, batch=1))


def _peak(fn):
    """Peak bytes of Python and NumPy allocations while ``fn()`` runs (tracemalloc)."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    "cfg",
    [
        FlowConfig(variant="pre-ln", depth=8, width=64, seq=16, batch=4),
        FlowConfig(variant="post-ln", depth=4, width=128, heads=4, seq=64, batch=8),
        FlowConfig(variant="rezero", depth=6, width=32, seq=32, batch=2, seeds=(0, 1)),
        FlowConfig(variant="ln-scaling", depth=8, width=64, seq=64, batch=4),  # + s ln(x)
        FlowConfig(variant="lesson-plain", depth=200, width=64, batch=4),
    ],
    ids=lambda c: c.variant,
)
def test_the_flow_estimate_bounds_what_a_measurement_allocates(cfg, warm):
    peak, est = _peak(lambda: measure(cfg)), memory.flow_bytes(cfg)
    assert peak <= est < 10 * peak  # an upper bound, within an order of magnitude


def test_the_training_estimate_bounds_a_float32_step_with_adamw():
    L, C, H, T, B, V = 2, 64, 4, 32, 8, 65

    def step():
        model = GPT(GPTConfig(vocab_size=V, block_size=T, n_layer=L, n_head=H, n_embd=C), seed=0)
        opt = AdamW(model.params, AdamWConfig())
        ids = np.random.default_rng(0).integers(0, V, (B, T + 1))  # (B, T + 1)
        _, _, cache = model.forward(ids[:, :-1], ids[:, 1:], train=True)
        opt.step(model.backward(cache))

    peak, est = _peak(step), memory.gpt_bytes(L, C, H, T, B, V, 4, 4)
    assert peak <= est < 10 * peak


def test_the_lesson_estimate_bounds_the_depth_table():
    cfg = StackConfig(depths=(1, 5, 50), width=32, batch=4)
    peak, est = _peak(lambda: depth_table(cfg)), memory.lesson_stack_bytes(50, 32, 4)
    assert peak <= est < 10 * peak


def test_require_refuses_in_one_line_naming_the_estimate_and_what_is_available():
    memory.require(10 * 2**20, "x", available=2**30)  # fits: nothing happens
    with pytest.raises(memory.NotEnoughMemory) as e:
        memory.require(3 * 2**40, "this stack", available=2**30)
    msg = str(e.value)
    assert "this stack" in msg and "3.0 TiB" in msg and "1.0 GiB is available" in msg
    assert "\n" not in msg and isinstance(e.value, MemoryError)


def test_available_memory_is_read_from_the_system():
    avail = memory.available_bytes()
    assert avail is None or 2**20 < avail < 2**50
    assert memory.format_bytes(512) == "512 B" and memory.format_bytes(1.5 * 2**30) == "1.5 GiB"


@pytest.mark.parametrize(
    "L, C, H, T, B, V",
    [(2, 32, 2, 16, 4, 20), (6, 64, 4, 32, 2, 65), (12, 32, 4, 16, 4, 256)],
)
def test_the_paths_estimate_bounds_the_split_of_a_float32_model(L, C, H, T, B, V):
    from resgrad.lab.paths import model_splits

    cfg = GPTConfig(vocab_size=V, block_size=T, n_layer=L, n_head=H, n_embd=C)
    ids = np.random.default_rng(0).integers(0, V, 2000)  # (N,)

    def run():
        model_splits(GPT(cfg, seed=0, dtype=np.float32), ids, T, B, seeds=(0, 1))

    peak, est = _peak(run), memory.paths_bytes(cfg, T, B)
    assert peak <= est < 10 * peak
    # the flow estimate it replaces leaves out the per-k parts: a 12-block split needs more
    if L == 12:
        assert memory.pretrained_flow_bytes(cfg, T, B) < peak


@pytest.mark.parametrize("N, C, B, S", [(20, 16, 4, 3), (200, 16, 4, 1), (50, 64, 8, 2)])
def test_the_lesson_paths_estimate_bounds_its_split(N, C, B, S):
    from resgrad.lab.paths import split, stack_chain

    def run():
        chains = [stack_chain(StackConfig(depths=(N,), width=C, batch=B, seed=s))
                  for s in range(S)]  # fmt: skip
        [split(c) for c in chains]

    peak, est = _peak(run), memory.lesson_paths_bytes(N, C, B, S)
    assert peak <= est < 10 * peak
