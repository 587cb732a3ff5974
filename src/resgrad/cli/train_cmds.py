"""``resgrad train`` and ``resgrad sample``: a GPT trained from scratch, and text drawn from
it. ``resgrad depth-train``, listed after them, is :mod:`resgrad.cli.depthtrain_cmds`."""

from __future__ import annotations

import argparse
import functools
import os
import shlex

from resgrad.cli import _common, depthtrain_cmds
from resgrad.cli._common import TRAIN_FLAGS
from resgrad.formats.checkpoint import LAST
from resgrad.nn.blocks import INITS, VARIANTS
from resgrad.perf import memory
from resgrad.perf.threads import COOLDOWN_STEPS, RECHECK_STEPS, SLOW_STEP, ThreadFollower
from resgrad.train.bpe import KINDS
from resgrad.train.config import ACTIVATION_NAMES, FROM_PRETRAINED, TrainConfig, resume_config
from resgrad.train.loop import train
from resgrad.train.report import done_line
from resgrad.train.sample import DECODE_ONE_THREAD_FLOPS, to_stdout
from resgrad.train.source import MODELS, PRETRAINED, RESGRAD, resolve_source, sample_source


def register(sub: argparse._SubParsersAction) -> None:
    d = TrainConfig()
    p = sub.add_parser(
        "train",
        help="train a GPT from scratch, on characters or a byte-level BPE (nanoGPT's flags)",
        description="Train a GPT in NumPy, on characters or a byte-level BPE (--tokenizer), "
        "with AdamW, warmup + cosine learning rate and gradient clipping. Defaults are "
        "nanoGPT's CPU recipe on the built-in corpus. At each evaluation: one log line, "
        "metrics.jsonl, loss.png, and checkpoints (last.ckpt, best.ckpt) in --out-dir. "
        "With --resume, flags not given keep the checkpoint's values.",
    )
    for flag, typ, help_ in TRAIN_FLAGS:
        default = getattr(d, _common.field(flag))
        choices = {"--variant": VARIANTS, "--init": INITS, "--tokenizer": KINDS,
                   "--activation": tuple(ACTIVATION_NAMES)}.get(flag)  # fmt: skip
        kw = {"choices": choices} if choices else {}
        shown = "" if default is None else f" (default: {default})"
        p.add_argument(flag, type=typ or str, default=None, help=help_ + shown, **kw)
    p.add_argument(
        "--out-dir", default=None, help=f"checkpoints, metrics and plot (default: {d.out_dir})"
    )
    p.add_argument(
        "--resume", action="store_true", help="continue the run in --out-dir from last.ckpt"
    )
    _common.add_log_to(p)
    _common.add_threads(p, f"; read again every {RECHECK_STEPS} steps and after a step "
                        f"{SLOW_STEP:g}x slower than the recent median, at most once in "
                        f"{COOLDOWN_STEPS} steps")  # fmt: skip
    p.set_defaults(func=cmd_train)

    p = sub.add_parser(
        "sample",
        help="generate text from a trained checkpoint (KV cache)",
        description="Continue --start with --num-tokens tokens sampled from the model "
        "in --out-dir (last.ckpt, or best.ckpt with --best), or from a pretrained GPT-2 "
        "(--from-pretrained: a directory, a hub name or a nanoGPT ckpt.pt). Each new token "
        "reuses the cached keys and values; past block_size tokens the context is cropped to "
        "the last block_size. Text is printed as it is generated.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--out-dir", help="a directory written by resgrad train, or one of its checkpoint files"
    )
    src.add_argument("--from-pretrained", metavar="SOURCE", help="a Hugging Face GPT-2 "
                     "directory, a hub name (gpt2, owner/name), a nanoGPT ckpt.pt, or a resgrad "
                     "run directory or checkpoint file")  # fmt: skip
    p.add_argument("--start", default="\n", help="the text to continue (default: a newline)")
    p.add_argument(
        "--num-tokens",
        type=_common.nonneg_int,
        default=500,
        help="tokens to generate: characters for a character-level run, BPE tokens for a "
        "BPE run or GPT-2 (default: 500)",
    )
    p.add_argument("--temperature", type=_common.positive_float, default=0.8,
                   help="softmax temperature (default: 0.8)")  # fmt: skip
    p.add_argument("--top-k", type=_common.positive_int, default=200,
                   help="sample among the k most likely (default: 200)")  # fmt: skip
    p.add_argument(
        "--seed", type=_common.seed, default=1337, help="seed of the sampler (default: 1337)"
    )
    p.add_argument("--best", action="store_true", help="use best.ckpt instead of last.ckpt")
    p.add_argument("--meta", metavar="PATH", help="nanoGPT's meta.pkl, the vocabulary of a "
                   "--from-pretrained ckpt.pt (default: data/<its dataset>/meta.pkl, as "
                   "nanoGPT's sample.py finds it)")  # fmt: skip
    mflop = DECODE_ONE_THREAD_FLOPS / 1e6
    _common.add_threads(p, f"; a model whose token costs under {mflop:g} MFLOP: one thread")
    p.set_defaults(func=cmd_sample)

    depthtrain_cmds.register(sub)  # `resgrad depth-train`, listed after sample


def cmd_train(args: argparse.Namespace) -> int:
    given = _common.given(args, TRAIN_FLAGS)
    if args.init_from is not None:  # refused if typed, even at the default value
        _common.refuse_with(
            args.argv, _common.flag_names(FROM_PRETRAINED), f"--init-from {args.init_from!r}",
            "the pretrained model brings its own architecture and tokenizer",
        )  # fmt: skip
        if not args.resume:  # a resumed run reads its own checkpoint, not this model
            resolve_source(args.init_from, meta=args.meta, kinds=PRETRAINED, flag="--init-from")
    out_dir = args.out_dir if args.out_dir is not None else TrainConfig().out_dir
    log_to = _common.log_config(args)
    if args.resume:
        cfg = resume_config(out_dir, **given)
    else:
        cfg = TrainConfig(**given, out_dir=out_dir)
    fits = functools.partial(memory.require_train, cfg)  # again with a pretrained model's shape
    if cfg.init_from is None:
        fits()  # at once; a pretrained model's shape is known once it is loaded
    follow = ThreadFollower() if args.threads is None else None  # --threads N: N throughout
    resume = shlex.join(["resgrad", "train", "--out-dir", out_dir, "--resume"])
    writes, last = "checkpoints, metrics.jsonl, dynamics and loss.png", os.path.join(out_dir, LAST)
    plan = _common.long_work(args, out_dir, writes, "the last checkpoint", resume, last)
    res = _common.unless_diverged("train", train, cfg, progress=None, fits=fits, log_to=log_to,
                                  threads=follow, plan=plan)  # fmt: skip
    if res is None:
        return 1
    print(done_line(res))
    _common.wrote(res.out_dir)
    if "tensorboard" in log_to.to:
        print(f"TensorBoard: tensorboard --logdir {log_to.tensorboard_dir(res.out_dir)}")
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    run = args.out_dir is not None  # --out-dir: a run's; --from-pretrained: any model
    src = resolve_source(
        args.out_dir if run else args.from_pretrained, best=args.best, meta=args.meta,
        kinds=RESGRAD if run else MODELS, flag="--out-dir" if run else "--from-pretrained",
    )  # fmt: skip
    try:  # each token is printed as it is drawn: Ctrl-C keeps what was generated
        sample_source(
            src, args.start, args.num_tokens, temperature=args.temperature, top_k=args.top_k,
            seed=args.seed, on_text=to_stdout, auto_threads=args.threads is None,
            fits=memory.require_sample,
        )  # fmt: skip
    except KeyboardInterrupt:
        print(flush=True)  # end the cut line; main() reports the interrupt
        raise
    print(flush=True)
    return 0
