"""A run whose last.ckpt is in format 1 (resgrad 0.1) resumes bit-exactly, then writes format 2."""

import numpy as np

from resgrad.formats.checkpoint import load_checkpoint
from resgrad.train.config import TrainConfig
from resgrad.train.loop import train
from resgrad.train.rundir import read_metrics
from tests.formats.test_checkpoint import _v1_bytes

TINY = dict(
    n_layer=1, n_head=2, n_embd=16, block_size=8, batch_size=4, warmup_iters=2,
    lr_decay_iters=12, lr=3e-3, eval_interval=3, eval_iters=1, dropout=0.1,
)  # fmt: skip


def test_resume_from_a_format_1_checkpoint_is_bit_exact(tmp_path):
    data = tmp_path / "data.txt"
    data.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    whole = TrainConfig(**TINY, max_iters=6, data=str(data), out_dir=str(tmp_path / "a"))
    train(whole, progress=False, log=lambda s: None)
    half = TrainConfig(**TINY, max_iters=3, data=str(data), out_dir=str(tmp_path / "b"))
    train(half, progress=False, log=lambda s: None)
    last = tmp_path / "b" / "last.ckpt"
    last.write_bytes(_v1_bytes(load_checkpoint(last)))  # as resgrad 0.1 would have left it
    assert last.read_bytes()[:16] == b"RESGRAD-CKPT-v1\n"
    train(TrainConfig(**{**TINY, "max_iters": 6, "data": str(data), "out_dir": str(tmp_path / "b"),
                         "resume": True}), progress=False, log=lambda s: None)  # fmt: skip
    a, b = load_checkpoint(tmp_path / "a" / "last.ckpt"), load_checkpoint(last)
    assert last.read_bytes()[:16] != b"RESGRAD-CKPT-v1\n"  # rewritten as format 2
    for k in a.params:
        np.testing.assert_array_equal(a.params[k], b.params[k])
    steps = [[(r["iter"], r["loss"]) for r in read_metrics(d) if r["kind"] == "iter"] for d in
             (tmp_path / "a", tmp_path / "b")]  # fmt: skip
    assert steps[0] == steps[1]
