"""``resgrad depth-train``: the lesson's depth experiment on a real GPT (registered by
:mod:`resgrad.cli.train_cmds`, after ``sample``)."""

from __future__ import annotations

import argparse

from resgrad.cli import _common
from resgrad.cli._common import TRAIN_FLAGS
from resgrad.lab.experiments import DepthTrainConfig, depth_train
from resgrad.nn.blocks import VARIANTS
from resgrad.perf import memory
from resgrad.train.report import depth_train_table

# the flags of `resgrad train` that depth-train takes, in its order
FLAGS = ("--n-layer", "--n-head", "--n-embd", "--block-size", "--batch-size", "--max-iters",
         "--lr", "--eval-interval", "--eval-iters", "--seed", "--data", "--out-dir")  # fmt: skip
# flag -> (type, help) where depth-train's differ from TRAIN_FLAGS'
OWN_HELP = {
    "--lr": (_common.positive_float, "peak learning rate; warmup max_iters/10, cosine to lr/10"),
    "--max-iters": (_common.nonneg_int, "optimizer steps per variant"),
    "--out-dir": (str, "the plot, the summary, and one run directory per variant"),
}


def register(sub: argparse._SubParsersAction) -> None:
    g = DepthTrainConfig()
    p = sub.add_parser(
        "depth-train",
        help="the depth experiment on a real GPT: 12 layers with and without residuals",
        description="Train the same deep GPT with --variants (default: none and pre-ln) for "
        "the same steps on the same batches; write both loss curves on one plot and the "
        "per-layer gradient norms at the first and last step (depth_train.png, "
        "depth_train.json) in --out-dir, one subdirectory per variant.",
    )
    helps = {flag: (typ, help_) for flag, typ, help_ in TRAIN_FLAGS} | OWN_HELP
    for flag in FLAGS:
        typ, help_ = helps[flag]
        default = getattr(g, _common.field(flag))
        shown = "" if default is None else f" (default: {default})"
        p.add_argument(flag, type=typ, default=default, help=help_ + shown)
    p.add_argument(
        "--variants",
        type=_common.name_list(VARIANTS),
        default=g.variants,
        help=f"comma-separated residual schemes (default: {','.join(g.variants)})",
    )
    _common.add_threads(p)
    p.set_defaults(func=cmd_depth_train)


def cmd_depth_train(args: argparse.Namespace) -> int:
    cfg = _common.config_from(args, DepthTrainConfig)
    memory.require_train(cfg.train_config(cfg.variants[0]))  # every variant has its shape
    summary = _common.unless_diverged("depth-train", depth_train, cfg, progress=None)
    if summary is None:
        return 1
    print(depth_train_table(summary, cfg.n_layer), end="")
    _common.wrote(cfg.out_dir)
    return 0
