"""The performance benchmark's bookkeeping (its timings live in benchmarks/, not here)."""

import importlib.util
import math
import pathlib

import numpy as np
import pytest

from resgrad.nn.model import GPT
from resgrad.perf.bench import BENCH_CONFIGS, figures, format_row, make_batch

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _bench_script():
    spec = importlib.util.spec_from_file_location(
        "bench_train_step", ROOT / "benchmarks" / "bench_train_step.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_configs_are_the_issue_s():
    shapes = {
        n: (c.n_layer, c.n_head, c.n_embd, c.block_size, c.batch_size)
        for n, c in BENCH_CONFIGS.items()
    }
    assert shapes == {
        "cpu-recipe": (4, 4, 128, 64, 12),
        "small": (4, 4, 128, 64, 32),
        "medium": (6, 6, 384, 256, 8),
        "gpt2-124m": (12, 12, 768, 256, 4),
    }
    g = BENCH_CONFIGS["gpt2-124m"].gpt_config()
    assert (g.vocab_size, g.block_size) == (50257, 1024)  # GPT-2's vocabulary and positions
    assert [n for n, c in BENCH_CONFIGS.items() if c.in_all] == ["cpu-recipe", "small", "medium"]


def test_figures_arithmetic():
    cfg = BENCH_CONFIGS["cpu-recipe"]
    f = figures([0.1, 0.3, 0.2], cfg, flops_per_step=4e9, peak=100.0)
    assert f.ms_per_step == pytest.approx(200.0)
    assert f.tokens_per_s == pytest.approx(12 * 64 / 0.2)
    assert f.gflops == pytest.approx(20.0) and f.peak_fraction == pytest.approx(0.2)
    row = {
        "config": "x",
        "params": 1,
        "flops_per_step": 4e9,
        "resgrad": f.as_dict() | {"peak_mib": 1.0},
    }
    assert (f.ms_min, f.ms_max) == (pytest.approx(100.0), pytest.approx(300.0))
    assert "200.00" in format_row(row) and "100.00-300.00" in format_row(row)
    assert "ceiling" not in format_row(row)  # no PyTorch beside it: no ceiling to state
    # 4 GFLOP, 0.5 of them needless, at 100 GFLOP/s: a 35 ms floor; PyTorch at 70 ms
    t = figures([0.07], cfg, flops_per_step=4e9, peak=100.0).as_dict() | {"peak_mib": 1.0}
    row |= {"torch": t, "peak_gflops": 100.0, "floor_flops": 3.5e9}
    assert "take 35.0 ms" in format_row(row) and "more than 2.00x" in format_row(row)
    assert "1.5x needs 75% of the peak" in format_row(row)


def test_the_ceiling_leaves_out_the_masked_half_of_attention():
    cfg = BENCH_CONFIGS["medium"]
    model = GPT(cfg.gpt_config(), seed=0)
    B, T, C, L = cfg.batch_size, cfg.block_size, cfg.n_embd, cfg.n_layer
    full = model.flops_per_step(B, T)
    no_attention = 3 * B * T * (L * 24 * C * C + 2 * C * cfg.vocab_size)
    assert full - cfg.masked_flops - no_attention == (full - no_attention) // 2


def test_batch_is_seeded_and_shifted():
    idx, tgt = make_batch(BENCH_CONFIGS["cpu-recipe"], seed=3)
    idx2, _ = make_batch(BENCH_CONFIGS["cpu-recipe"], seed=3)
    assert idx.shape == (12, 64) and (idx == idx2).all()
    assert (idx[:, 1:] == tgt[:, :-1]).all()


@pytest.mark.parametrize("name", list(BENCH_CONFIGS))
def test_pytorch_model_has_the_same_parameter_count(torch, name):
    mod = _bench_script()
    mod._import_torch()
    cfg = BENCH_CONFIGS[name]
    with mod.torch.device("meta"):  # shapes only: no memory, no init (GPT-2 124M is 0.5 GB)
        t_params = sum(p.numel() for p in mod.torch_model(cfg).parameters())
    assert t_params == sum(math.prod(s) for s in GPT.param_shapes(cfg.gpt_config()).values())


def test_peak_memory_is_the_child_s_own_report():
    import sys

    from resgrad.perf.bench import own_peak_rss_mib, peak_memory_mib

    assert peak_memory_mib([sys.executable, "-c", "print('hello'); print('peak_mib 12.5')"]) == 12.5
    with pytest.raises(RuntimeError, match="no peak_mib line"):
        peak_memory_mib([sys.executable, "-c", "print('nothing')"])
    with pytest.raises(RuntimeError, match="failed"):
        peak_memory_mib([sys.executable, "-c", "raise SystemExit(3)"])
    # the child's figure is its own, not this process's (ru_maxrss after fork + exec was)
    held = np.ones(300 * 2**18, dtype=np.float32)  # 300 MiB, every page written
    child = peak_memory_mib([sys.executable, "-c", BARE_PROBE])
    assert 0 < child < 200 < own_peak_rss_mib(), (child, own_peak_rss_mib())
    del held


BARE_PROBE = (
    "from resgrad.perf.bench import own_peak_rss_mib; print(f'peak_mib {own_peak_rss_mib()}')"
)


def test_pytorch_model_is_nanogpt_s_model(torch):
    """The benchmark's PyTorch side is nanoGPT's model.py: its parameter names, the exact
    GELU, the tied head. Loaded with the weights of an independently written nanoGPT
    (tests/nanogpt_reference.py), it gives the same loss and gradients, bit for bit."""
    from resgrad.perf.bench import BenchConfig
    from tests import nanogpt_reference

    mod = _bench_script()
    mod._import_torch()
    cfg = BenchConfig("t", n_layer=2, n_head=2, n_embd=16, block_size=8, batch_size=3,
                      vocab_size=11)  # fmt: skip
    ref = nanogpt_reference.build(torch, 2, 2, 16, 8, 11, bias=True, seed=3).train()
    ours = mod.torch_model(cfg).to(torch.float64).train()
    ours.load_state_dict(ref.state_dict(), strict=True)  # the same names and shapes
    assert ours.lm_head.weight is ours.transformer.wte.weight  # tied
    idx, tgt = (torch.from_numpy(np.ascontiguousarray(a)) for a in make_batch(cfg, seed=1))
    losses, grads = [], []
    for m in (ref, ours):
        _, loss = m(idx, tgt)
        loss.backward()
        losses.append(loss.detach())
        grads.append({n: p.grad.clone() for n, p in m.named_parameters()})
    assert torch.equal(losses[0], losses[1])
    assert grads[0].keys() == grads[1].keys()
    assert all(torch.equal(grads[0][n], grads[1][n]) for n in grads[0])


def test_pytorch_optimizer_is_nanogpt_s_groups(torch):
    mod = _bench_script()
    mod._import_torch()
    model = mod.torch_model(BENCH_CONFIGS["cpu-recipe"])
    opt = mod.torch_optimizer(model)
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(
        p.dim() < 2 for p in no_decay["params"]
    )
    ids = [id(p) for g in opt.param_groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))  # the tied weight once
    assert decay["betas"] == (0.9, 0.99)


def test_figures_are_the_median_step_s():
    f = figures([0.1, 0.2, 0.9], BENCH_CONFIGS["cpu-recipe"], flops_per_step=1e9, peak=100.0)
    assert f.ms_per_step == pytest.approx(200.0)  # the median, not the mean (400) or the best


def test_resgrad_stepper_is_the_trainer_s_iteration(monkeypatch):
    """One iteration of the benchmark's resgrad step is train_step on a drawn batch: the same
    weights after it as calling the trainer's step by hand, and a new batch each time."""
    import resgrad.perf.bench as bench
    from resgrad.perf.bench import bench_text, resgrad_stepper
    from resgrad.train.config import TrainConfig
    from resgrad.train.data import get_batch
    from resgrad.train.loop import train_step
    from resgrad.train.optim import AdamW
    from resgrad.train.shards import Shards

    calls = []

    def spy(*args, **kwargs):  # the trainer's step, asked for what the trainer asks
        calls.append(kwargs)
        return train_step(*args, **kwargs)

    monkeypatch.setattr(bench, "train_step", spy)
    cfg = BENCH_CONFIGS["cpu-recipe"]
    with resgrad_stepper(cfg, shards=1) as (model, step):
        losses = [step(), step()]
    assert [c["dynamics"] for c in calls] == [True, True]  # the records the trainer keeps
    by_hand = GPT(cfg.gpt_config(), seed=0)
    opt = AdamW(by_hand.params, TrainConfig().adamw())
    data, rng = bench_text(cfg), np.random.default_rng(0)
    for want in losses:
        x, y = get_batch(data, cfg.block_size, cfg.batch_size, rng)
        r = train_step(by_hand, opt, x, y, 1e-3, 1.0, None, dynamics=True, shards=Shards(1))
        assert r.loss == want
    assert losses[0] != losses[1]
    assert all(np.array_equal(model.params[k], by_hand.params[k]) for k in model.params)
