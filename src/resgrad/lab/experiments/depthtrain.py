"""The depth experiment on a real model: one deep GPT trained with and without the + x path.

:func:`depth_train` trains every variant of a :class:`DepthTrainConfig` with
:func:`resgrad.train.loop.train`, each in ``out_dir/<variant>``, then draws
``depth_train.png`` (:func:`resgrad.plots.render_depth_plot`) and writes the
summary ``depth_train.json``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from dataclasses import dataclass

from resgrad.formats.atomic import atomic_write_bytes, atomic_write_text
from resgrad.formats.checkpoint import LAST
from resgrad.plots import render_depth_plot
from resgrad.train.config import TrainConfig
from resgrad.train.data import load_corpus, unigram_entropy
from resgrad.train.loop import train
from resgrad.train.rundir import holding_out_dir, read_metrics

__all__ = ["DepthTrainConfig", "depth_train"]


def _steps(n: int) -> str:
    return f"{n} step{'s' * (n != 1)}"


@dataclass(frozen=True)
class DepthTrainConfig:
    """The depth experiment on a real model: one deep GPT, with and without the + x path.

    Every variant trains the same architecture from the same seed, on the same
    batches, for the same steps; only the residual scheme differs.
    """

    n_layer: int = 12  # L: deep enough that the missing + x path shows
    n_head: int = 4  # H
    n_embd: int = 128  # C, as the CPU recipe
    block_size: int = 64  # T
    batch_size: int = 12  # B
    max_iters: int = 600  # steps per variant
    lr: float = 1e-3  # peak learning rate; warmup max_iters // 10, cosine to lr / 10
    eval_interval: int = 100  # steps between evaluations
    eval_iters: int = 10  # batches per split per evaluation
    seed: int = 1337
    data: str | None = None  # None: the built-in corpus
    out_dir: str = os.path.join("out", "depth")
    variants: tuple[str, ...] = ("none", "pre-ln")

    def __post_init__(self):
        object.__setattr__(self, "variants", tuple(self.variants))
        if not self.variants or len(set(self.variants)) != len(self.variants):
            raise ValueError(f"variants must be distinct and non-empty, got {self.variants!r}")
        for v in self.variants:
            self.train_config(v)  # validates every field through TrainConfig

    def train_config(self, variant: str) -> TrainConfig:
        return TrainConfig(
            n_layer=self.n_layer, n_head=self.n_head, n_embd=self.n_embd,
            block_size=self.block_size, batch_size=self.batch_size, max_iters=self.max_iters,
            lr=self.lr, min_lr=self.lr / 10, warmup_iters=self.max_iters // 10,
            lr_decay_iters=max(self.max_iters, 1), eval_interval=self.eval_interval,
            eval_iters=self.eval_iters, variant=variant, seed=self.seed, data=self.data,
            out_dir=os.path.join(self.out_dir, variant),
        )  # fmt: skip


@holding_out_dir("depth_train.png", "depth_train.json")
def depth_train(
    cfg: DepthTrainConfig, *, progress: bool | None = True, log: Callable[[str], None] | None = None
) -> dict:
    """Train each variant of ``cfg`` in ``out_dir/<variant>``, then plot and summarize them.

    Writes ``out_dir/depth_train.png`` (both loss curves on one axis; per-layer
    gradient norms at the first and last step) and ``out_dir/depth_train.json``.

    Returns
    -------
    dict
        The summary written to ``depth_train.json``: per variant, the final and
        best losses, seconds, and the per-layer gradient norms at the first and last step.
    """
    for v in cfg.variants:  # depth-train has no --resume: refuse before training anything
        held = os.path.join(cfg.train_config(v).out_dir, LAST)
        if os.path.exists(held):
            raise ValueError(
                f"{cfg.out_dir!r} already holds a depth-train run ({held}); depth-train "
                "cannot continue one: choose another --out-dir or delete this one"
            )
    say = log if log is not None else print
    runs, summary = {}, {"config": dataclasses.asdict(cfg), "variants": {}}
    for v in cfg.variants:
        say(f"== {v}: {cfg.n_layer} layers, {_steps(cfg.max_iters)}")
        res = train(cfg.train_config(v), progress=progress, log=log)
        records = read_metrics(res.out_dir)
        steps = [r for r in records if r["kind"] == "iter"]
        runs[v] = records
        summary["variants"][v] = {
            "train_loss": res.train_loss,
            "val_loss": res.val_loss,
            "best_val_loss": res.best_val_loss,
            "seconds": res.seconds,
            "first_step_layer_grad_norms": steps[0]["layer_grad_norms"] if steps else None,
            "last_step_layer_grad_norms": steps[-1]["layer_grad_norms"] if steps else None,
        }
    summary["config"]["variants"] = list(cfg.variants)
    title = (
        f"{cfg.n_layer}-layer GPT (C={cfg.n_embd}, H={cfg.n_head}, T={cfg.block_size}, "
        f"B={cfg.batch_size}), {_steps(cfg.max_iters)}, lr {cfg.lr:g}: " + " vs ".join(cfg.variants)
    )
    entropy = unigram_entropy(load_corpus(cfg.data, cfg.block_size).text)
    summary["unigram_entropy"] = entropy
    png = render_depth_plot(runs, title, entropy)
    atomic_write_bytes(os.path.join(cfg.out_dir, "depth_train.png"), png)
    atomic_write_text(
        os.path.join(cfg.out_dir, "depth_train.json"), json.dumps(summary, indent=2) + "\n"
    )
    return summary
