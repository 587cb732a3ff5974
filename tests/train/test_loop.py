import dataclasses
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from resgrad.cli import main
from resgrad.formats.checkpoint import load_checkpoint
from resgrad.nn.model import GPT, GPTConfig
from resgrad.train.config import TrainConfig, resume_config
from resgrad.train.loop import TrainingDiverged, train
from resgrad.train.optim import AdamW, AdamWConfig, clip_grad_norm
from resgrad.train.rundir import read_metrics

TINY = dict(
    n_layer=2, n_head=2, n_embd=16, block_size=8, batch_size=4, warmup_iters=2,
    lr_decay_iters=12, lr=3e-3, eval_interval=3, eval_iters=2,
)  # fmt: skip
TINY_FLAGS = [
    "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "8",
    "--batch-size", "4", "--warmup-iters", "2", "--lr-decay-iters", "50", "--eval-iters", "1",
]  # fmt: skip


def _cfg(tmp_path, name, text_file, **kw):
    return TrainConfig(**{**TINY, "data": text_file, "out_dir": str(tmp_path / name), **kw})


def _steps(out_dir):
    return [(r["iter"], r["loss"]) for r in read_metrics(out_dir) if r["kind"] == "iter"]


def test_resume_is_bit_exact(tmp_path, text_file):
    # dropout on, so the dropout generator's state must survive the checkpoint too
    whole = _cfg(tmp_path, "whole", text_file, max_iters=12, dropout=0.1)
    train(whole, progress=False, log=lambda s: None)
    half = _cfg(tmp_path, "half", text_file, max_iters=6, dropout=0.1)
    train(half, progress=False, log=lambda s: None)
    res = train(resume_config(half.out_dir, max_iters=12), progress=False, log=lambda s: None)
    assert res.iterations == 12
    a, b = _steps(whole.out_dir), _steps(half.out_dir)
    assert [i for i, _ in b] == list(range(12))
    assert a == b  # the same losses, to the last bit
    ca = load_checkpoint(f"{whole.out_dir}/last.ckpt")
    cb = load_checkpoint(f"{half.out_dir}/last.ckpt")
    assert ca.iteration == cb.iteration == 12
    for k in ca.params:
        assert np.array_equal(ca.params[k], cb.params[k]), k
    for k in ca.optimizer:
        assert np.array_equal(ca.optimizer[k], cb.optimizer[k]), k
    assert ca.rng_states == cb.rng_states


def test_metrics_plot_and_checkpoints(tmp_path, text_file):
    cfg = _cfg(tmp_path, "run", text_file, max_iters=7)
    lines = []
    res = train(cfg, progress=False, log=lines.append)
    assert [ln.split(":")[0] for ln in lines][:3] == ["iter 0", "iter 3", "iter 6"]
    assert all(k in lines[1] for k in ("train loss", "val loss", "grad norm", "lr"))
    recs = read_metrics(cfg.out_dir)
    evals = [r for r in recs if r["kind"] == "eval"]
    assert [r["iter"] for r in evals] == [0, 3, 6, 7]  # every eval_interval, then the end
    steps = [r for r in recs if r["kind"] == "iter"]
    assert len(steps) == 7 and all(len(r["layer_grad_norms"]) == 2 for r in steps)
    assert all(len(r["stream_grad_norms"]) == 3 for r in steps)
    assert all(np.isfinite(r["grad_norm"]) and r["grad_norm"] > 0 for r in steps)
    assert res.val_loss == evals[-1]["val_loss"] and res.best_val_loss == min(
        r["val_loss"] for r in evals
    )
    with open(os.path.join(cfg.out_dir, "loss.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    best = load_checkpoint(os.path.join(cfg.out_dir, "best.ckpt"))
    assert best.best_val_loss == res.best_val_loss
    last = load_checkpoint(os.path.join(cfg.out_dir, "last.ckpt"))
    assert last.iteration == 7 and last.vocab == "".join(sorted(set(open(text_file).read())))
    assert last.config["train"] == dataclasses.asdict(cfg)
    assert sorted(os.listdir(cfg.out_dir)) == [
        ".resgrad.lock",
        "best.ckpt",
        "dynamics.bin",
        "dynamics.json",
        "last.ckpt",
        "loss.png",
        "metrics.jsonl",
    ]  # fmt: skip; the lock file stays (empty), its holder's .info file is gone


def test_a_real_kill_leaves_a_loadable_checkpoint_and_resume_continues(tmp_path, text_file):
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "resgrad", "train", *TINY_FLAGS, "--data", text_file,
           "--max-iters", "100000", "--eval-interval", "1", "--out-dir", str(out)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # wait for a few checkpoints, then kill mid-run
            recs = read_metrics(out) if out.exists() else []
            # the eval record at iteration 4 is written after step 3, so after the
            # checkpoint at iteration 3 was saved (an eval's record precedes its save)
            if sum(r["kind"] == "eval" for r in recs) >= 5:
                break
            time.sleep(0.05)
        time.sleep(np.random.default_rng().uniform(0, 0.2))  # some moment in the loop
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    ckpt = load_checkpoint(out / "last.ckpt")  # loads, checksum verified
    assert ckpt.iteration >= 3
    assert all(np.isfinite(v).all() for v in ckpt.params.values())
    # resume from it: the steps after the checkpoint are redone once, none is duplicated
    target = ckpt.iteration + 3
    assert main(["train", "--out-dir", str(out), "--resume", "--max-iters", str(target)]) == 0
    assert [i for i, _ in _steps(out)] == list(range(target))


def test_overfits_one_small_batch_to_near_zero_loss():
    cfg = GPTConfig(vocab_size=16, block_size=16, n_layer=2, n_head=2, n_embd=32)
    model = GPT(cfg, seed=0)
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 16, (4, 16)), rng.integers(0, 16, (4, 16))  # random: only memory helps
    opt = AdamW(model.params, AdamWConfig(lr=1e-2, weight_decay=0.0))
    first = None
    for _ in range(100):
        _, loss, cache = model.forward(x, y, train=True)
        first = loss if first is None else first
        grads = model.backward(cache)
        clip_grad_norm(grads, 1.0)
        opt.step(grads)
    assert first > 2.5 and loss < 0.01, (first, loss)


def _inject_at_step(monkeypatch, n, fn):
    """Call fn(model_params, grads) inside AdamW.step's n-th call (0-based)."""
    real, calls = AdamW.step, []

    def step(self, grads, lr=None, **kw):
        if len(calls) == n:
            fn(self.params, grads)
        calls.append(1)
        return real(self, grads, lr, **kw)

    monkeypatch.setattr(AdamW, "step", step)


def test_nan_in_a_parameter_stops_with_iteration_and_name(tmp_path, text_file, monkeypatch):
    def poison(params, grads):  # after step 4's gradient: the weight goes NaN in the update
        grads["blocks.1.mlp.w_fc"][0, 0] = np.nan

    _inject_at_step(monkeypatch, 4, poison)
    cfg = _cfg(tmp_path, "nan", text_file, max_iters=12, grad_clip=0.0)
    with pytest.raises(TrainingDiverged) as e:
        train(cfg, progress=False, log=lambda s: None)
    msg = str(e.value)
    assert "iteration 5" in msg and "loss is nan" in msg and "'blocks.1.mlp.w_fc'" in msg
    assert "iteration 3) is kept" in msg
    ckpt = load_checkpoint(os.path.join(cfg.out_dir, "last.ckpt"))
    assert ckpt.iteration == 3 and all(np.isfinite(v).all() for v in ckpt.params.values())


def test_inf_gradient_stops_before_the_update(tmp_path, text_file, monkeypatch):
    real = GPT.backward_stream
    calls = []

    def backward_stream(self, cache, dlogits=None, dloss=1.0, **kw):
        grads, dxs = real(self, cache, dlogits, dloss, **kw)
        calls.append(1)
        if len(calls) == cfg.shards + 1:  # a shard of step 1 (each shard is one call)
            grads["blocks.0.attn.w_qkv"][1, 2] = np.inf
            grads["ln_f.g"][0] = np.nan
        return grads, dxs

    monkeypatch.setattr(GPT, "backward_stream", backward_stream)
    cfg = _cfg(tmp_path, "inf", text_file, max_iters=12)
    with pytest.raises(TrainingDiverged, match=r"iteration 1: non-finite gradient in "
                       r"parameter 'blocks.0.attn.w_qkv' \(first of 2 of"):  # fmt: skip
        train(cfg, progress=False, log=lambda s: None)
    assert load_checkpoint(os.path.join(cfg.out_dir, "last.ckpt")).iteration == 0


def test_cli_divergence_is_one_line_and_exit_1(tmp_path, text_file, monkeypatch, capsys):
    _inject_at_step(monkeypatch, 1, lambda p, g: p["wte"].fill(np.inf))
    out = str(tmp_path / "div")
    assert main(["train", *TINY_FLAGS, "--data", text_file, "--out-dir", out,
                 "--max-iters", "9", "--eval-interval", "1"]) == 1  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "iteration 2: evaluation loss is nan" in err[0], err
    assert "parameter 'wte'" in err[0] and "iteration 1) is kept" in err[0]
    ckpt = load_checkpoint(os.path.join(out, "last.ckpt"))  # the poisoned state was never saved
    assert ckpt.iteration == 1 and all(np.isfinite(v).all() for v in ckpt.params.values())


def test_resume_refuses_a_mismatched_or_corrupted_checkpoint(tmp_path, text_file):
    cfg = _cfg(tmp_path, "run", text_file, max_iters=3)
    train(cfg, progress=False, log=lambda s: None)
    resumed = dataclasses.replace(cfg, resume=True, max_iters=6)
    with pytest.raises(ValueError, match="n_embd is 32 but the checkpoint was trained with 16"):
        train(dataclasses.replace(resumed, n_embd=32), progress=False)
    with pytest.raises(ValueError, match="lr is 0.01"):
        train(dataclasses.replace(resumed, lr=0.01), progress=False)
    other = tmp_path / "other.txt"
    other.write_text("the quick brown fox jumps over the lazy cat. " * 40, encoding="utf-8")
    with pytest.raises(ValueError, match="differs from the text"):
        train(dataclasses.replace(resumed, data=str(other)), progress=False)
    with pytest.raises(ValueError, match="already holds a run"):
        train(cfg, progress=False)
    last = os.path.join(cfg.out_dir, "last.ckpt")
    raw = open(last, "rb").read()
    with open(last, "wb") as f:
        f.write(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match="truncated"):
        train(resumed, progress=False)


def test_bad_data_files_are_clear_errors(tmp_path):
    empty, short, binary = tmp_path / "e.txt", tmp_path / "s.txt", tmp_path / "b.txt"
    empty.write_bytes(b"")
    short.write_text("abc", encoding="utf-8")
    binary.write_bytes(b"\xff\xfe\x00abc" * 100)
    for path, needle in [(empty, "empty"), (short, "shorter than block_size"),
                         (binary, "not UTF-8")]:  # fmt: skip
        with pytest.raises(ValueError, match=needle):
            train(_cfg(tmp_path, "x", str(path), max_iters=1), progress=False)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["train", "--n-layer", "0"], "'0'"),
        (["train", "--lr", "-1"], "'-1'"),
        (["train", "--lr", "nan"], "'nan'"),
        (["train", "--dropout", "1.5"], "dropout"),
        (["train", "--n-head", "3"], "n_head=3"),
        (["train", "--variant", "bogus"], "'bogus'"),
        (["train", "--min-lr", "0.1"], "min_lr"),
        (["train", "--warmup-iters", "100", "--lr-decay-iters", "50"], "lr_decay_iters"),
        (["train", "--beta2", "1.0"], "beta2"),
        (["train", "--grad-clip", "-1"], "grad_clip"),
        (["train", "--seed", "-1"], "'-1'"),
        (["train", "--max-iters", "x"], "'x'"),
        (["train", "--shards", "0"], "--shards"),
        (["train", "--data", "/nonexistent/file.txt"], "/nonexistent/file.txt"),
        (["train", "--resume"], "no checkpoint"),
        (["sample", "--num-tokens", "-1"], "'-1'"),
        (["sample", "--out-dir", "X", "--temperature", "0"], "'0'"),
        (["sample", "--out-dir", "X", "--top-k", "0"], "'0'"),
        (["sample", "--out-dir", "/nonexistent"], "'/nonexistent' does not exist (expected"),
        (["depth-train", "--variants", "none,bogus"], "'bogus'"),
        (["depth-train", "--n-head", "3"], "n_head=3"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(args, needle, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the default out dirs land here, if anything is written at all
    try:
        status = main(args)
    except SystemExit as e:
        status = e.code
    captured = capsys.readouterr()
    assert status == 2
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in captured.err, lines


def test_cli_train_sample_and_resume(tmp_path, text_file, capsys):
    out = str(tmp_path / "cli")
    base = ["train", *TINY_FLAGS, "--data", text_file, "--out-dir", out, "--eval-interval", "2"]
    assert main([*base, "--max-iters", "4"]) == 0
    assert "done: 4 iterations" in capsys.readouterr().out
    assert main(["train", "--out-dir", out, "--resume", "--max-iters", "6"]) == 0
    assert "done: 2 iterations (4 to 6) in" in capsys.readouterr().out  # this call's 2
    assert main(["sample", "--out-dir", out, "--start", "the ", "--num-tokens", "30",
                 "--seed", "1"]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert text.startswith("the ") and len(text) == 4 + 30 + 1  # the print's newline
    assert main(["sample", "--out-dir", out, "--start", "Zebra"]) == 2
    assert "'Z'" in capsys.readouterr().err


def test_cli_trains_ln_scaling_records_its_power_and_resumes_bit_exact(tmp_path, text_file, capsys):
    """--variant ln-scaling --ln-scaling-power 0.25: in the run's config and the model's, in
    the checkpoint; a resume (the power not typed again) gives an unbroken run's numbers; a
    resume with another power is refused by name."""
    base = ["train", *TINY_FLAGS, "--n-layer", "3", "--data", text_file, "--eval-interval", "2",
            "--variant", "ln-scaling", "--ln-scaling-power", "0.25"]  # fmt: skip
    whole, half = str(tmp_path / "whole"), str(tmp_path / "half")
    assert main([*base, "--out-dir", whole, "--max-iters", "6"]) == 0
    assert main([*base, "--out-dir", half, "--max-iters", "4"]) == 0
    ckpt = load_checkpoint(f"{half}/last.ckpt")
    assert ckpt.config["train"]["variant"] == ckpt.config["model"]["variant"] == "ln-scaling"
    assert ckpt.config["train"]["ln_scaling_power"] == ckpt.config["model"]["ln_scaling_power"]
    assert ckpt.config["model"]["ln_scaling_power"] == 0.25
    # the paper's init: the residual projections are not scaled down by 1/sqrt(2L)
    assert ckpt.params["blocks.2.mlp.w_proj"].std() > 0.01
    assert main(["train", "--out-dir", half, "--resume", "--max-iters", "6"]) == 0
    assert _steps(whole) == _steps(half)
    capsys.readouterr()
    assert main(["train", "--out-dir", half, "--resume", "--max-iters", "8",
                 "--ln-scaling-power", "0.5"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "ln_scaling_power is 0.5 but the checkpoint was trained with 0.25" in err, err
    default = str(tmp_path / "default")
    assert main([*base[:-2], "--out-dir", default, "--max-iters", "1"]) == 0
    assert load_checkpoint(f"{default}/last.ckpt").config["train"]["ln_scaling_power"] == 0.5


def test_every_training_step_is_clipped(tmp_path, text_file, monkeypatch):
    # Adam's step barely depends on the gradient's scale, so the loss cannot show a
    # skipped clip: look at the gradients the optimizer is given instead
    seen, real = [], AdamW.step

    def step(self, grads, lr=None, **kw):
        seen.append(
            math.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads.values()))
        )
        return real(self, grads, lr, **kw)

    monkeypatch.setattr(AdamW, "step", step)
    res = train(_cfg(tmp_path, "clip", text_file, max_iters=4, grad_clip=0.01), progress=False)
    raw = [r["grad_norm"] for r in read_metrics(res.out_dir) if r["kind"] == "iter"]
    assert len(seen) == 4 and min(raw) > 0.1  # every raw norm far above the clip
    assert all(0.0099 < n <= 0.01 for n in seen), seen
    seen.clear()
    train(_cfg(tmp_path, "noclip", text_file, max_iters=2, grad_clip=0.0), progress=False)
    assert min(seen) > 0.1  # 0 disables clipping


def test_evaluation_runs_with_dropout_off(tmp_path, text_file):
    from resgrad.train.data import load_corpus
    from resgrad.train.loop import estimate_loss

    corpus = load_corpus(text_file, 8)
    losses = []
    for p in (0.0, 0.5):
        cfg = _cfg(tmp_path, "e", text_file, dropout=p)
        model = GPT(cfg.gpt_config(corpus.tokenizer.vocab_size), seed=cfg.seed)
        losses.append(estimate_loss(model, corpus, cfg))
    assert losses[0] == losses[1]  # the same weights: dropout must not touch evaluation


def test_a_checkpoint_from_before_a_new_setting_still_resumes(tmp_path, text_file):
    """A run written before TrainConfig gained fields (tokenizer, vocab_size, init_from) was
    trained with their defaults: it resumes, and to the same numbers as an unbroken run."""
    from resgrad.formats.checkpoint import save_checkpoint

    whole = _cfg(tmp_path, "whole", text_file, max_iters=12)
    train(whole, progress=False, log=lambda s: None)
    half = _cfg(tmp_path, "half", text_file, max_iters=6)
    train(half, progress=False, log=lambda s: None)
    path = os.path.join(half.out_dir, "last.ckpt")
    ckpt = load_checkpoint(path)
    old = {k: v for k, v in ckpt.config["train"].items()
           if k not in ("tokenizer", "vocab_size", "init_from")}  # fmt: skip
    assert len(old) < len(ckpt.config["train"])
    save_checkpoint(path, dataclasses.replace(ckpt, config={**ckpt.config, "train": old}))
    train(resume_config(half.out_dir, max_iters=12), progress=False, log=lambda s: None)
    assert _steps(whole.out_dir) == _steps(half.out_dir)


def test_resume_with_init_from_names_the_change_not_flags_never_typed(tmp_path, text_file, capsys):
    """A from-scratch run of 2 layers resumed with --init-from: the checkpoint's own n_layer
    is not something the user typed; what is wrong is init_from itself."""
    cfg = _cfg(tmp_path, "run", text_file, max_iters=1)
    train(cfg, progress=False, log=lambda s: None)
    with pytest.raises(ValueError, match="init_from is 'gpt2' but the checkpoint was trained "
                                         "with None"):  # fmt: skip
        resume_config(cfg.out_dir, init_from="gpt2")
    assert main(["train", "--init-from", "gpt2", "--resume", "--out-dir", cfg.out_dir]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "init_from is 'gpt2'" in err, err
    assert "n_layer" not in err and "n_embd" not in err, err


@pytest.mark.parametrize("existing", [False, True])
def test_a_run_refused_before_its_first_checkpoint_leaves_nothing_new(
    tmp_path, text_file, monkeypatch, existing
):
    """Refused at the first evaluation (e.g. token ids a pretrained model has no row for),
    after the metrics, dynamics and tokenizer files were opened: none of them stays."""
    import resgrad.train.loop as loop

    def refuse(*a, **kw):
        raise ValueError("token id 5000 is outside [0, 280)")

    monkeypatch.setattr(loop, "estimate_loss", refuse)
    out = tmp_path / "run"
    if existing:
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    cfg = _cfg(tmp_path, "run", text_file, max_iters=2, tokenizer="bpe", vocab_size=260)
    with pytest.raises(ValueError, match="token id 5000"):
        train(cfg, progress=False, log=lambda s: None)
    left = sorted(p.name for p in out.iterdir() if ".lock" not in p.name) if out.exists() else []
    assert left == (["notes.txt"] if existing else []), left


def test_a_bpe_larger_than_the_text_can_give_is_refused(tmp_path, text_file, capsys):
    """A BPE stops merging when no pair is left: asked for 5000 on a small text it reaches
    a few hundred tokens. The run says so instead of training another vocabulary."""
    from resgrad.train.bpe import train_bpe
    from resgrad.train.data import load_corpus

    reached = train_bpe(load_corpus(text_file, 8).text, 5000).vocab_size
    assert 256 < reached < 5000
    out = str(tmp_path / "bpe")
    args = ["train", *TINY_FLAGS, "--data", text_file, "--tokenizer", "bpe", "--vocab-size",
            "5000", "--max-iters", "1", "--out-dir", out]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "vocab_size 5000" in err and f"{reached} tokens" in err, err
    assert f"at most {reached}" in err, err
    assert not os.path.exists(out)
    args[args.index("5000")] = str(reached)  # the size it reaches is accepted
    assert main(args) == 0


def test_with_clipping_off_the_update_is_adamw_on_the_unclipped_gradient():
    """grad_clip 0 (as the warm-up and depth experiments train): two steps of train_step
    equal AdamW's formula, written out here, on the raw gradients, whose norm is far above
    any clip; a clipped run would have moved elsewhere."""
    from resgrad.train.loop import train_step

    cfg = GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16)
    rng = np.random.default_rng(0)
    batches = [(rng.integers(0, 11, (4, 8)), rng.integers(0, 11, (4, 8))) for _ in range(2)]
    lrs, b1, b2, eps, wd = (1e-2, 3e-2), 0.9, 0.99, 1e-8, 0.1
    model = GPT(cfg, seed=0, dtype=np.float64)
    opt = AdamW(model.params, AdamWConfig(beta1=b1, beta2=b2, eps=eps, weight_decay=wd))
    want = {k: p.copy() for k, p in model.params.items()}
    m = {k: np.zeros_like(p) for k, p in want.items()}
    v = {k: np.zeros_like(p) for k, p in want.items()}
    for t, ((x, y), lr) in enumerate(zip(batches, lrs), 1):
        ref = GPT.from_params(cfg, {k: p.copy() for k, p in want.items()})
        g = ref.backward(ref.forward(x, y)[2])  # the raw gradients at the current weights
        total = math.sqrt(sum(float(np.sum(a**2)) for a in g.values()))
        step = train_step(model, opt, x, y, lr, 0.0, None, t - 1)
        assert step.grad_norm == pytest.approx(total, rel=1e-12) and not step.clipped
        assert total > 0.5  # a clip at 0.1 would have scaled these
        for k in want:
            m[k] = b1 * m[k] + (1 - b1) * g[k]
            v[k] = b2 * v[k] + (1 - b2) * g[k] ** 2
            decay = 1 - lr * wd if want[k].ndim >= 2 else 1.0
            step_size = lr / (1 - b1**t)
            want[k] = want[k] * decay - step_size * m[k] / (np.sqrt(v[k] / (1 - b2**t)) + eps)
    for k in want:
        # atol: the key biases, whose gradient is 0 but for rounding, which Adam normalizes
        np.testing.assert_allclose(model.params[k], want[k], rtol=1e-10, atol=1e-12, err_msg=k)
    clipped = GPT(cfg, seed=0, dtype=np.float64)  # not vacuous: clipping changes the result
    opt = AdamW(clipped.params, AdamWConfig(beta1=b1, beta2=b2, eps=eps, weight_decay=wd))
    for (x, y), lr in zip(batches, lrs):
        train_step(clipped, opt, x, y, lr, 0.1, None)
    assert not np.allclose(clipped.params["wte"], want["wte"], rtol=1e-6, atol=0)
