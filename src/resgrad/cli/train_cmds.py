"""``resgrad train``, ``resgrad sample`` and ``resgrad depth-train``: a GPT trained from scratch."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from resgrad.cli import _common
from resgrad.lab.depthtrain import DepthTrainConfig, depth_train
from resgrad.nn.blocks import INITS, VARIANTS
from resgrad.nn.model import GPTConfig
from resgrad.perf import memory
from resgrad.perf.threads import COOLDOWN_STEPS, RECHECK_STEPS, SLOW_STEP, ThreadFollower
from resgrad.train.bpe import KINDS
from resgrad.train.config import ACTIVATION_NAMES, FROM_PRETRAINED, TrainConfig, resume_config
from resgrad.train.loop import TrainingDiverged, train
from resgrad.train.sample import DECODE_ONE_THREAD_FLOPS


def _tokenizer_kind(text: str) -> str:
    if text not in KINDS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(KINDS)}, got {text!r}")
    return text


# flag -> (TrainConfig field, type, help); nanoGPT's names with dashes
TRAIN_FLAGS = [
    ("--n-layer", _common.positive_int, "transformer blocks L"),
    ("--n-head", _common.positive_int, "attention heads H (must divide --n-embd)"),
    ("--n-embd", _common.positive_int, "width C of the residual stream"),
    ("--block-size", _common.positive_int, "context length T"),
    ("--batch-size", _common.positive_int, "sequences per step B"),
    ("--max-iters", _common.nonneg_int, "total optimizer steps"),
    ("--lr", _common.positive_float, "peak learning rate"),
    ("--min-lr", _common.finite_float, "learning rate at the end of the cosine decay"),
    ("--warmup-iters", _common.nonneg_int, "steps of linear warmup"),
    ("--lr-decay-iters", _common.positive_int, "step where the cosine reaches --min-lr"),
    ("--weight-decay", _common.finite_float, "AdamW decoupled weight decay (2-D weights only)"),
    ("--beta1", _common.finite_float, "AdamW beta1"),
    ("--beta2", _common.finite_float, "AdamW beta2"),
    ("--grad-clip", _common.finite_float, "clip the global gradient norm to this (0: off)"),
    ("--dropout", _common.finite_float, "dropout probability in [0, 1)"),
    ("--eval-interval", _common.positive_int, "steps between evaluations and checkpoints"),
    ("--eval-iters", _common.positive_int, "batches per split in each evaluation"),
    ("--variant", None, "residual scheme; 'none' removes the + x path"),
    ("--init", None, "weight initialization"),
    ("--activation", None, "the MLP's GELU: gelu_tanh, GPT-2's tanh form; gelu, the exact "
     "erf form (nanoGPT's nn.GELU())"),
    ("--seed", _common.seed, "seed of the init, batches and dropout"),
    ("--data", str, "a UTF-8 text file (default: the Python reference manual, built in)"),
    ("--tokenizer", _tokenizer_kind, "char: one token per character; bpe: a byte-level BPE "
     "trained on the data"),
    ("--vocab-size", _common.positive_int, "tokens of the BPE (>= 256), with --tokenizer bpe"),
    ("--init-from", str, "fine-tune a pretrained GPT-2: hub name (gpt2), directory or ckpt.pt"),
    ("--meta", str, "nanoGPT's meta.pkl, the vocabulary of an --init-from ckpt.pt "
     "(default: data/<its dataset>/meta.pkl, as nanoGPT's sample.py finds it)"),
    ("--shards", _common.positive_int, "compute each batch as this many shards on threads, "
     "gradients summed; changes only rounding (1: the plain pass)"),
    ("--keep-every", _common.nonneg_int, "also keep the checkpoint ckpt-<iter>.ckpt every "
     "this many steps and at the end, for resgrad paths --every-checkpoint (0: none)"),
]  # fmt: skip


def _field(flag: str) -> str:
    return flag[2:].replace("-", "_")


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
        default = getattr(d, _field(flag))
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
    src.add_argument(
        "--from-pretrained",
        metavar="SOURCE",
        help="a Hugging Face GPT-2 directory, a hub name (gpt2, owner/name), a nanoGPT ckpt.pt, "
        "or a resgrad run directory or checkpoint file",
    )
    p.add_argument("--start", default="\n", help="the text to continue (default: a newline)")
    p.add_argument(
        "--num-tokens",
        type=_common.nonneg_int,
        default=500,
        help="tokens to generate: characters for a character-level run, BPE tokens for a "
        "BPE run or GPT-2 (default: 500)",
    )
    p.add_argument(
        "--temperature",
        type=_common.positive_float,
        default=0.8,
        help="softmax temperature (default: 0.8)",
    )
    p.add_argument(
        "--top-k",
        type=_common.positive_int,
        default=200,
        help="sample among the k most likely (default: 200)",
    )
    p.add_argument(
        "--seed", type=_common.seed, default=1337, help="seed of the sampler (default: 1337)"
    )
    p.add_argument("--best", action="store_true", help="use best.ckpt instead of last.ckpt")
    p.add_argument(
        "--meta",
        metavar="PATH",
        help="nanoGPT's meta.pkl, the vocabulary of a --from-pretrained ckpt.pt (default: "
        "data/<its dataset>/meta.pkl, as nanoGPT's sample.py finds it)",
    )
    mflop = DECODE_ONE_THREAD_FLOPS / 1e6
    _common.add_threads(p, f"; a model whose token costs under {mflop:g} MFLOP: one thread")
    p.set_defaults(func=cmd_sample)

    g = DepthTrainConfig()
    p = sub.add_parser(
        "depth-train",
        help="the depth experiment on a real GPT: 12 layers with and without residuals",
        description="Train the same deep GPT with --variants (default: none and pre-ln) for "
        "the same steps on the same batches; write both loss curves on one plot and the "
        "per-layer gradient norms at the first and last step (depth_train.png, "
        "depth_train.json) in --out-dir, one subdirectory per variant.",
    )
    helps = {flag: (typ, help_) for flag, typ, help_ in TRAIN_FLAGS}
    helps["--lr"] = (
        _common.positive_float,
        "peak learning rate; warmup max_iters/10, cosine to lr/10",
    )
    helps["--max-iters"] = (_common.nonneg_int, "optimizer steps per variant")
    helps["--out-dir"] = (str, "the plot, the summary, and one run directory per variant")
    for flag in ("--n-layer", "--n-head", "--n-embd", "--block-size", "--batch-size",
                 "--max-iters", "--lr", "--eval-interval", "--eval-iters", "--seed", "--data",
                 "--out-dir"):  # fmt: skip
        typ, help_ = helps[flag]
        default = getattr(g, _field(flag))
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


def _run(command, fn, *args, **kwargs):
    """Call fn; a divergence is reported on one line (the caller exits 1)."""
    try:
        return fn(*args, **kwargs)
    except TrainingDiverged as e:
        print(f"resgrad {command}: {e}", file=sys.stderr)
        return None


def cmd_train(args: argparse.Namespace) -> int:
    given = {
        _field(flag): getattr(args, _field(flag))
        for flag, _, _ in TRAIN_FLAGS
        if getattr(args, _field(flag)) is not None
    }
    if args.init_from is not None:  # refused if typed, even at the default value
        _common.refuse_with(
            args.argv, tuple("--" + k.replace("_", "-") for k in FROM_PRETRAINED),
            f"--init-from {args.init_from!r}",
            "the pretrained model brings its own architecture and tokenizer",
        )  # fmt: skip
        if not args.resume:  # a resumed run reads its own checkpoint, not this model
            from resgrad.train.source import PRETRAINED, resolve_source

            resolve_source(args.init_from, meta=args.meta, kinds=PRETRAINED, flag="--init-from")
    out_dir = args.out_dir if args.out_dir is not None else TrainConfig().out_dir
    log_to = _common.log_config(args)
    if args.resume:
        cfg = resume_config(out_dir, **given)
    else:
        cfg = TrainConfig(**given, out_dir=out_dir)

    def fits(model: GPTConfig | None = None) -> None:
        m = model or cfg  # the pretrained model's shape, once known
        memory.require(memory.train_bytes(cfg, model),
                       f"this training run (L={m.n_layer} C={m.n_embd} T={cfg.block_size} "
                       f"B={cfg.batch_size})")  # fmt: skip

    if cfg.init_from is None:
        fits()  # at once; a pretrained model's shape is known once it is loaded
    follow = ThreadFollower() if args.threads is None else None  # --threads N: N throughout
    res = _run("train", train, cfg, progress=None, fits=fits, log_to=log_to, threads=follow)
    if res is None:
        return 1
    resumed = f" ({res.start} to {res.iterations})" if res.start else ""  # this call's
    print(
        f"done: {res.iterations - res.start} iterations{resumed} in {res.seconds:.1f} s "
        f"({res.ms_per_iter:.1f} ms per iteration); train loss {res.train_loss:.4f}, "
        f"val loss {res.val_loss:.4f}, best val loss {res.best_val_loss:.4f}"
    )
    _common.wrote(res.out_dir)
    if "tensorboard" in log_to.to:
        print(f"TensorBoard: tensorboard --logdir {log_to.tensorboard_dir(res.out_dir)}")
    return 0


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def cmd_sample(args: argparse.Namespace) -> int:
    from resgrad.train.source import MODELS, RESGRAD, resolve_source, sample_source

    run = args.out_dir is not None  # --out-dir: a run's; --from-pretrained: any model
    src = resolve_source(
        args.out_dir if run else args.from_pretrained, best=args.best, meta=args.meta,
        kinds=RESGRAD if run else MODELS, flag="--out-dir" if run else "--from-pretrained",
    )  # fmt: skip
    try:  # each token is printed as it is drawn: Ctrl-C keeps what was generated
        sample_source(
            src, args.start, args.num_tokens, temperature=args.temperature, top_k=args.top_k,
            seed=args.seed, on_text=_write, auto_threads=args.threads is None,
            fits=lambda m: memory.require(memory.sample_bytes(m), f"this model (L={m.n_layer} "
                                          f"C={m.n_embd} V={m.vocab_size} T={m.block_size})"),
        )  # fmt: skip
    except KeyboardInterrupt:
        print(flush=True)  # end the cut line; main() reports the interrupt
        raise
    print(flush=True)
    return 0


def cmd_depth_train(args: argparse.Namespace) -> int:
    fields = {f.name for f in dataclasses.fields(DepthTrainConfig)}
    cfg = DepthTrainConfig(**{k: v for k, v in vars(args).items() if k in fields})
    memory.require(memory.train_bytes(cfg.train_config(cfg.variants[0])),
                   f"this training run (L={cfg.n_layer} C={cfg.n_embd} T={cfg.block_size} "
                   f"B={cfg.batch_size})")  # fmt: skip
    summary = _run("depth-train", depth_train, cfg, progress=None)
    if summary is None:
        return 1
    L = cfg.n_layer
    print(f"\n{'variant':<10} {'train':>8} {'val':>8}   grad norm of block 0 / block {L - 1}")
    for v, s in summary["variants"].items():
        first, last = s["first_step_layer_grad_norms"], s["last_step_layer_grad_norms"]
        norms = (
            f"first step {first[0]:.2e} / {first[-1]:.2e}, last step {last[0]:.2e} / {last[-1]:.2e}"
            if first
            else "-"
        )
        print(f"{v:<10} {s['train_loss']:>8.4f} {s['val_loss']:>8.4f}   {norms}")
    _common.wrote(cfg.out_dir)
    return 0
