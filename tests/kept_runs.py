"""Tiny real runs that keep a checkpoint every few steps: what the tests of a run's
checkpoints (their identity, their schedule, the studies that follow them) read back."""

import pytest

TEXT = "the quick brown fox jumps over the lazy dog. " * 40
TINY = dict(n_layer=1, n_head=2, n_embd=16, block_size=8, batch_size=4, warmup_iters=2,
            lr_decay_iters=12, lr=3e-3, eval_interval=2, eval_iters=1, max_iters=4,
            keep_every=2)  # fmt: skip


def train_runs(root, seeds=(1, 2), **settings) -> list[str]:
    """One run per seed of one model on :data:`TEXT`, in ``root/s<seed>`` (``settings``
    over :data:`TINY`): by default each keeps ckpt-0, -2 and -4. Their directories."""
    from resgrad.train import loop
    from resgrad.train.config import TrainConfig

    data = root / "data.txt"
    data.write_text(TEXT, encoding="utf-8")
    out = []
    with pytest.MonkeyPatch.context() as mp:  # no loss plot: most of a run's second
        mp.setattr(loop, "render_loss_plot", lambda *a, **k: b"", raising=False)
        for seed in seeds:
            cfg = TrainConfig(**{**TINY, **settings}, seed=seed, data=str(data),
                              out_dir=str(root / f"s{seed}"))  # fmt: skip
            loop.train(cfg, progress=False, log=lambda s: None)
            out.append(cfg.out_dir)
    return out
