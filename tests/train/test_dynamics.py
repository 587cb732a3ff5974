"""Per-layer training dynamics: each recorded number is what it says, and the file survives
kills, torn writes and resumes."""

import os

import numpy as np
import pytest

from resgrad.nn.model import GPT, GPTConfig
from resgrad.train.config import TrainConfig, resume_config
from resgrad.train.dynamics import (
    DYNAMICS_BIN,
    DYNAMICS_HEADER,
    DynamicsMonitor,
    DynamicsWriter,
    make_record,
    read_dynamics,
    record_dtype,
    snapshot_blocks,
    update_ratios,
)
from resgrad.train.loop import train, train_step
from resgrad.train.optim import AdamW, AdamWConfig, grad_norms
from tests.crashes import synced_at_each_checkpoint

TINY = dict(
    n_layer=3, n_head=2, n_embd=16, block_size=8, batch_size=4, warmup_iters=2,
    lr_decay_iters=30, lr=3e-3, eval_interval=5, eval_iters=1,
)  # fmt: skip


def _train(tmp_path, name, text_file, **kw):
    cfg = TrainConfig(**{**TINY, "data": text_file, "out_dir": str(tmp_path / name), **kw})
    lines = []
    train(cfg, progress=False, log=lines.append)
    return cfg.out_dir, lines


@pytest.mark.parametrize("variant", ["pre-ln", "rezero"])
def test_a_step_records_what_it_says(variant):
    """Every per-block number equals its definition, computed here from scratch in float64."""
    cfg = GPTConfig(vocab_size=11, block_size=8, n_layer=3, n_head=2, n_embd=16, variant=variant)
    model = GPT(cfg, seed=0, dtype=np.float64)
    opt = AdamW(model.params, AdamWConfig(lr=1e-2, weight_decay=0.1))
    rng = np.random.default_rng(1)
    x, y = rng.integers(0, 11, (4, 8)), rng.integers(0, 11, (4, 8))
    before = {k: p.copy() for k, p in model.params.items()}
    _, _, cache = model.forward(x, y)
    grads, dxs = model.backward_stream(cache)
    step = train_step(model, opt, x, y, 1e-2, 0.5, None, dynamics=True)
    rec = make_record(3, 7, step.loss, 1e-2, step.grad_norm, step.clipped, step.norms,
                      step.update_ratio, step.stream_norms, step.act_rms)  # fmt: skip
    assert rec["step"] == 7 and rec["clipped"] == (step.grad_norm > 0.5)
    for i in range(3):
        keys = [k for k in before if k.startswith(f"blocks.{i}.")]

        def norm(arrs, ks):
            return np.sqrt(sum(np.sum(arrs[k] ** 2) for k in ks))

        dw = {k: model.params[k] - before[k] for k in keys}
        np.testing.assert_allclose(rec["update"][i], norm(dw, keys) / norm(before, keys), 1e-6)
        np.testing.assert_allclose(rec["grad"][i], norm(grads, keys), rtol=1e-6)
        attn = [k for k in keys if ".attn." in k]
        mlp = [k for k in keys if ".mlp." in k]
        rest = [k for k in keys if k not in attn and k not in mlp]
        np.testing.assert_allclose(rec["grad_attn"][i], norm(grads, attn), rtol=1e-6)
        np.testing.assert_allclose(rec["grad_mlp"][i], norm(grads, mlp), rtol=1e-6)
        np.testing.assert_allclose(rec["grad_ln"][i], norm(grads, rest), rtol=1e-6, atol=1e-30)
        out = cache.xs[i + 1]  # block i's output
        np.testing.assert_allclose(rec["act_rms"][i], np.sqrt(np.mean(out**2)), rtol=1e-6)
    np.testing.assert_allclose(rec["stream_grad"], [np.linalg.norm(d) for d in dxs], rtol=1e-6)
    np.testing.assert_allclose(rec["grad_norm"], np.sqrt(sum(grad_norms(grads)[k] ** 2
                               for k in grads)), rtol=1e-6)  # fmt: skip


def test_update_ratio_is_the_norm_of_the_update_over_the_norm_of_the_weights():
    rng = np.random.default_rng(0)
    params = {f"blocks.{i}.{n}": rng.standard_normal(s) for i in range(2)
              for n, s in (("w", (4, 3)), ("b", (3,)))}  # fmt: skip
    params["wte"] = rng.standard_normal((5, 3))  # not a block's: left out
    before = snapshot_blocks(params)
    w0 = {k: p.copy() for k, p in before.items()}
    for k in params:
        params[k] += rng.standard_normal(params[k].shape) * (0.01 if "blocks.0" in k else 0.1)
    ratio = update_ratios(params, before, 2)
    for i in range(2):
        keys = [k for k in w0 if k.startswith(f"blocks.{i}.")]
        dw = np.sqrt(sum(np.sum((params[k] - w0[k]) ** 2) for k in keys))
        w = np.sqrt(sum(np.sum(w0[k] ** 2) for k in keys))
        assert ratio[i] == pytest.approx(dw / w, rel=1e-12)
    assert 0.005 < ratio[0] < 0.02 and 0.05 < ratio[1] < 0.2


def test_update_ratio_sees_a_frozen_block():
    """Not vacuous: a block whose update is undone records an update ratio of exactly 0."""
    cfg = GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16)
    model = GPT(cfg, seed=0, dtype=np.float64)
    opt = AdamW(model.params)
    real_step = opt.step

    def step_all_but_block_1(grads, lr=None, **kw):
        keep = {k: p.copy() for k, p in model.params.items() if k.startswith("blocks.1.")}
        real_step(grads, lr, **kw)
        for k, p in keep.items():
            model.params[k][...] = p

    opt.step = step_all_but_block_1
    rng = np.random.default_rng(1)
    x, y = rng.integers(0, 11, (2, 8)), rng.integers(0, 11, (2, 8))
    ratio = train_step(model, opt, x, y, 1e-3, 1.0, None, dynamics=True).update_ratio
    assert ratio[0] > 1e-5 and ratio[1] == 0.0


def test_training_writes_one_record_per_step(tmp_path, text_file):
    out, _ = _train(tmp_path, "run", text_file, max_iters=12)
    dyn = read_dynamics(out)
    assert dyn.steps.tolist() == list(range(12)) and dyn.torn_bytes == 0
    assert dyn.n_layer == 3 and dyn["grad"].shape == (12, 3)
    assert dyn["stream_grad"].shape == (12, 4)
    assert dyn.config["variant"] == "pre-ln" and dyn.config["n_layer"] == 3
    assert os.path.getsize(os.path.join(out, DYNAMICS_BIN)) == 12 * record_dtype(3).itemsize
    assert np.all(np.isfinite(dyn["update"])) and np.all(dyn["update"] > 0)


def test_resume_after_a_kill_gives_the_same_bytes(tmp_path, text_file):
    """Killed after its checkpoint, mid-record, then resumed: the same bytes as an unbroken run."""
    whole, _ = _train(tmp_path, "whole", text_file, max_iters=20)
    half, _ = _train(tmp_path, "half", text_file, max_iters=10)
    # what a kill -9 leaves: steps past the checkpoint (10), then half a record
    junk = np.zeros(3, dtype=record_dtype(3))
    junk["step"] = [10, 11, 12]
    with open(os.path.join(half, DYNAMICS_BIN), "ab") as f:
        f.write(junk.tobytes() + b"\x01" * 17)
    assert read_dynamics(half).torn_bytes == 17  # seen and ignored by the reader
    train(resume_config(half, max_iters=20), progress=False, log=lambda s: None)
    a = open(os.path.join(whole, DYNAMICS_BIN), "rb").read()
    b = open(os.path.join(half, DYNAMICS_BIN), "rb").read()
    assert len(a) == 20 * record_dtype(3).itemsize and a == b


def test_resume_without_dynamics_says_so_and_goes_on(tmp_path, text_file):
    half, _ = _train(tmp_path, "half", text_file, max_iters=10)
    os.unlink(os.path.join(half, DYNAMICS_HEADER))
    lines = []
    train(resume_config(half, max_iters=15), progress=False, log=lines.append)
    assert any("dynamics" in ln and "from step 10" in ln for ln in lines), lines
    assert read_dynamics(half).steps.tolist() == list(range(10, 15))


@pytest.mark.parametrize(
    "header, message",
    [(None, "holds no dynamics records"), ("{}", "not a resgrad dynamics header"),
     ("not json", "not a resgrad dynamics header")],
)  # fmt: skip
def test_read_dynamics_errors(tmp_path, header, message):
    if header is not None:
        (tmp_path / DYNAMICS_HEADER).write_text(header)
        (tmp_path / DYNAMICS_BIN).write_bytes(b"")
    with pytest.raises(ValueError, match=message):
        read_dynamics(tmp_path)
    with pytest.raises(ValueError, match="not a directory"):
        read_dynamics(tmp_path / "nope")


def _record(step, grad, update):
    L = len(grad)
    rec = np.zeros((), dtype=record_dtype(L))
    rec["step"], rec["grad"], rec["update"] = step, grad, update
    return rec


def test_monitor_names_block_step_and_value_and_is_rate_limited():
    said = []
    mon = DynamicsMonitor(said.append, every=100)
    healthy = _record(0, [1.0, 2.0, 1.5, 1.2], [1e-3] * 4)
    assert mon.observe(healthy) == []
    vanishing = _record(5, [1e-7, 2.0, 1.5, 1.2], [1e-3, 1e-3, 0.5, 1e-3])
    lines = mon.observe(vanishing)
    assert len(lines) == 2 and said == lines
    assert "step 5" in lines[0] and "block 0" in lines[0] and "1e-07" in lines[0]
    assert "step 5" in lines[1] and "block 2" in lines[1] and "0.5" in lines[1]
    assert mon.observe(_record(50, [1e-7, 2.0, 1.5, 1.2], [1e-3, 1e-3, 0.5, 1e-3])) == []
    again = mon.observe(_record(105, [1.0, 2.0, 1.5, 1e5], [1e-7, 1e-3, 1e-3, 1e-3]))
    assert "block 3" in again[0] and "block 0" in again[1] and "step 105" in again[0]


def test_training_warns_when_a_layer_vanishes(tmp_path, text_file):
    """A residual-free stack at width 16: block 0's gradient falls far below the median's."""
    _, lines = _train(tmp_path, "none", text_file, max_iters=30, variant="none", n_layer=8,
                      lr=3e-2, warmup_iters=0)  # fmt: skip
    warned = [ln for ln in lines if ln.startswith("warning:")]
    assert warned and len(warned) <= 4  # rate-limited: at most one per check per 100 steps


def test_writer_rejects_a_foreign_record(tmp_path):
    with DynamicsWriter(tmp_path, 2) as w, pytest.raises(ValueError, match="dtype"):
        w.append(np.zeros((), dtype=record_dtype(3)))


def test_resume_over_records_of_another_depth_starts_afresh(tmp_path):
    with DynamicsWriter(tmp_path, 2) as w:
        for s in range(3):
            rec = np.zeros((), dtype=record_dtype(2))
            rec["step"] = s
            w.append(rec)
    said = []
    DynamicsWriter(tmp_path, 3, start=2, log=said.append).close()
    assert said and "of 2 blocks, not 3" in said[0] and "from step 2" in said[0]
    assert read_dynamics(tmp_path).n_layer == 3 and read_dynamics(tmp_path).steps.size == 0


# -- damaged records: validated on read and before a resume appends


def _write_run(tmp_path, n_steps=12, n_layer=2):
    """A dynamics file of n_steps plausible records, as a run writes them."""
    with DynamicsWriter(tmp_path, n_layer, config={"max_iters": n_steps}) as w:
        for s in range(n_steps):
            rec = np.zeros((), dtype=record_dtype(n_layer))
            rec["step"], rec["loss"], rec["lr"], rec["grad"] = s, 3.0 - 0.1 * s, 1e-3, 0.5
            w.append(rec)
    return tmp_path / DYNAMICS_BIN, record_dtype(n_layer).itemsize


def _damage(path, index, size, data):
    raw = bytearray(path.read_bytes())
    raw[index * size : (index + 1) * size] = data
    path.write_bytes(bytes(raw))


def test_random_bytes_in_a_record_are_reported_and_the_records_before_kept(tmp_path):
    path, size = _write_run(tmp_path)
    junk = np.zeros((), dtype=record_dtype(2))
    junk["step"] = 8 * 10**18  # what random bytes give: a step no run reaches
    _damage(path, 6, size, junk.tobytes())
    dyn = read_dynamics(tmp_path)
    assert dyn.steps.tolist() == list(range(6))
    assert dyn.damage == (
        "dynamics.bin: record 7 of 12 is damaged (step 8e18 after 5); kept the first 6"
    )
    rng = np.random.default_rng(0)  # really random bytes: refused on some field
    _damage(path, 6, size, rng.integers(0, 256, size, dtype=np.uint8).tobytes())
    dyn = read_dynamics(tmp_path)
    assert dyn.steps.tolist() == list(range(6)) and "record 7 of 12 is damaged" in dyn.damage


@pytest.mark.parametrize(
    "field, value, why",
    [("step", 3, "step 3 after 5"), ("step", 5, "step 5 after 5"), ("step", -1, "step -1 after 5"),
     ("step", 2**53, "step 9e15 after 5"),
     ("clipped", 7, "clipped is 7, not 0 or 1"), ("lr", np.nan, "lr is nan")],
)  # fmt: skip
def test_each_field_a_run_never_writes_is_damage(tmp_path, field, value, why):
    path, size = _write_run(tmp_path)
    rec = read_dynamics(tmp_path).records[6].copy()
    rec[field] = value
    _damage(path, 6, size, rec.tobytes())
    assert read_dynamics(tmp_path).damage == (
        f"dynamics.bin: record 7 of 12 is damaged ({why}); kept the first 6"
    )


def test_healthy_records_carry_no_damage(tmp_path):
    _write_run(tmp_path, 5)
    dyn = read_dynamics(tmp_path)
    assert dyn.damage is None and dyn.steps.tolist() == list(range(5))
    os.truncate(tmp_path / DYNAMICS_BIN, 0)
    assert read_dynamics(tmp_path).damage is None  # no step yet is not damage


def test_a_resume_over_damaged_records_says_what_it_kept(tmp_path):
    path, size = _write_run(tmp_path)
    _damage(path, 6, size, np.full(size, 0xFF, np.uint8).tobytes())
    said = []
    with DynamicsWriter(tmp_path, 2, start=10, log=said.append) as w:
        rec = np.zeros((), dtype=record_dtype(2))
        rec["step"] = 10
        w.append(rec)
    assert len(said) == 1 and said[0].startswith("dynamics.bin: record 7 of 12 is damaged (")
    assert said[0].endswith("kept the first 6; recording again from step 10"), said
    assert read_dynamics(tmp_path).steps.tolist() == [0, 1, 2, 3, 4, 5, 10]


def test_a_resume_over_a_file_truncated_before_the_checkpoint_says_so(tmp_path):
    """Cut mid-record 3 of a run checkpointed at step 10: not what a kill leaves."""
    path, size = _write_run(tmp_path)
    os.truncate(path, 2 * size + size // 2)
    said = []
    DynamicsWriter(tmp_path, 2, start=10, log=said.append).close()
    assert said == [
        "dynamics.bin: its records stop at step 1, before the checkpoint's step 10 (the file "
        "was cut short); kept the first 2; recording again from step 10"
    ]
    said.clear()  # a kill's torn tail after the checkpoint: silent, as before
    path, size = _write_run(tmp_path)
    os.truncate(path, 11 * size + 5)
    DynamicsWriter(tmp_path, 2, start=10, log=said.append).close()
    assert said == [] and read_dynamics(tmp_path).steps.tolist() == list(range(10))


@pytest.mark.parametrize(
    "field, value, message",
    [("n_layer", 100_000_000, "n_layer is 100000000; expected an integer in [1, 1000000]"),
     ("n_layer", 1e300, "n_layer is 1e+300; expected an integer in [1, 1000000]"),
     ("n_layer", float("inf"), "n_layer is inf; expected an integer in [1, 1000000]"),
     ("n_layer", True, "n_layer is True; expected an integer in [1, 1000000]"),
     ("record_bytes", float("nan"), "record_bytes is nan; expected 81 for n_layer 2"),
     ("record_bytes", 80, "record_bytes is 80; expected 81 for n_layer 2"),
     ("dtype", [["step", "<i8"]], "dtype is not the records of n_layer 2")],
)  # fmt: skip
def test_an_absurd_header_field_is_named_with_its_file(tmp_path, field, value, message):
    import json

    _write_run(tmp_path, 3)
    head_path = tmp_path / DYNAMICS_HEADER
    head = json.loads(head_path.read_text())
    head[field] = value
    head_path.write_text(json.dumps(head))  # NaN and Infinity as Python's json writes them
    with pytest.raises(ValueError) as e:
        read_dynamics(tmp_path)
    assert str(e.value) == f"{str(head_path)!r}: {message}"


def test_record_dtype_refuses_a_depth_no_record_can_hold():
    with pytest.raises(ValueError, match=r"n_layer must be an integer in \[1, 1000000\]"):
        record_dtype(100_000_000)
    assert record_dtype(1_000_000).itemsize == 21 + 4 * (7 * 1_000_000 + 1)


def test_records_hold_the_steps_losses_and_rates_of_the_run(tmp_path, text_file):
    """Each record's per-step fields are the ones metrics.jsonl logs for that step, and the
    learning rate is the schedule's, computed here from its formula."""
    from resgrad.train.rundir import read_metrics

    out, _ = _train(tmp_path, "run", text_file, max_iters=8, warmup_iters=2, lr_decay_iters=6,
                    lr=3e-3, min_lr=3e-4, grad_clip=0.05)  # fmt: skip
    dyn = read_dynamics(out)
    steps = [r for r in read_metrics(out) if r["kind"] == "iter"]
    assert dyn.steps.tolist() == [r["iter"] for r in steps] == list(range(8))
    np.testing.assert_array_equal(dyn["loss"], np.float32([r["loss"] for r in steps]))
    np.testing.assert_array_equal(dyn["grad_norm"], np.float32([r["grad_norm"] for r in steps]))
    np.testing.assert_array_equal(dyn["clipped"], [r["grad_norm"] > 0.05 for r in steps])
    assert dyn["clipped"].any()
    for r, lr in zip(steps, dyn["lr"]):
        it = r["iter"]
        if it < 2:
            want = 3e-3 * (it + 1) / 3
        elif it > 6:
            want = 3e-4
        else:
            c = 0.5 * (1 + np.cos(np.pi * (it - 2) / 4))
            want = 3e-4 + c * (3e-3 - 3e-4)
        assert lr == np.float32(want) == np.float32(r["lr"]), it
    np.testing.assert_allclose(dyn["grad"], [r["layer_grad_norms"] for r in steps], rtol=1e-6)
    np.testing.assert_allclose(dyn["stream_grad"], [r["stream_grad_norms"] for r in steps],
                               rtol=1e-6)  # fmt: skip


def test_the_records_before_a_checkpoint_are_fsynced_before_it_is_saved(
    tmp_path, text_file, monkeypatch
):
    """Durability: at each checkpoint save, dynamics.bin has been fsynced at its current size
    (a power cut must not leave a checkpoint with fewer records before it)."""
    checks = synced_at_each_checkpoint(
        monkeypatch, lambda path: [os.path.join(os.path.dirname(path), DYNAMICS_BIN)]
    )
    _train(tmp_path, "run", text_file, max_iters=10, eval_interval=5)
    assert len(checks) == 3 and all(checks), checks  # iterations 0, 5 and 10
