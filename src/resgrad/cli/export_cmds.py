"""``resgrad export``: a resgrad checkpoint out, as a Hugging Face GPT-2 directory."""

from __future__ import annotations

import argparse

from resgrad.cli import _common

FORMATS = ("hf",)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="write a trained checkpoint as a Hugging Face GPT-2 directory",
        description="Write the checkpoint of a resgrad run (pre-ln only: GPT-2's config cannot "
        "express another residual scheme) as config.json and model.safetensors in --out-dir, "
        "which transformers.GPT2LMHeadModel.from_pretrained loads, with the run's tokenizer "
        "(its BPE, or its characters) as tokenizer.json and tokenizer_config.json beside "
        "them, which transformers.AutoTokenizer.from_pretrained reads.",
    )
    p.add_argument("--format", choices=FORMATS, default="hf", help="default: hf")
    p.add_argument(
        "--checkpoint",
        required=True,
        metavar="PATH",
        help="a run directory written by resgrad train (its last.ckpt), or a checkpoint file",
    )
    p.add_argument("--best", action="store_true", help="use the run's best.ckpt")
    p.add_argument("--out-dir", required=True, help="the directory to write (created if missing)")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace the model already in --out-dir (refused without it); the directory is "
        "written as a whole, so a kill leaves the old model or the new one",
    )
    p.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    from resgrad.train.pretrained import export_checkpoint

    export_checkpoint(args.checkpoint, args.out_dir, best=args.best, force=args.force)
    # the directory is written whole (staged, then renamed): what is in it is what was written
    _common.wrote(args.out_dir)
    return 0
