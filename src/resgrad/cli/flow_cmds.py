"""``resgrad flow``: the gradient-flow lab on the command line, on stacks at initialization or
on trained models (through training, across runs)."""

from __future__ import annotations

import argparse

from resgrad.cli import _common, sweep_cmds
from resgrad.lab import flow
from resgrad.lab.study import TIME_BUDGET_S, across_runs, common_steps, every_checkpoint, run_names
from resgrad.lab.study.refusals import (
    FLOW_EVERY_CHECKPOINT_WITHOUT_RUNS,
    FLOW_META_WITHOUT_MODEL,
    FLOW_NEEDS_TEXT,
    FLOW_SEVERAL_SOURCES,
    FLOW_TEXT_WITHOUT_MODEL,
)
from resgrad.plots import check_plot_path, save_plot
from resgrad.train.data import read_text
from resgrad.train.source import MODELS

FORMATS = ("table", "json", "csv")
MODEL_FLAGS = ("--variant", "--depth", "--width", "--heads", "--init", "--loss")


def register(sub: argparse._SubParsersAction) -> None:
    d = flow.FlowConfig()
    variants = flow.all_variants()
    p = sub.add_parser(
        "flow",
        help="per-layer gradient and activation norms through a deep stack of any residual scheme",
        description="Build a stack of DEPTH blocks of each residual scheme at initialization, "
        "run the loss backward, and report, layer by layer, the norm of the gradient reaching "
        "each block's input (the residual stream), the stream's norm on the forward pass and "
        "the gradient norm of each block's parameters; mean, std, min and max over SEEDS "
        f"seeds. Variants: {', '.join(variants)} (the last two are the lesson's tanh stack).",
    )
    p.add_argument(
        "--variant",
        type=_common.name_list(variants),
        default=(d.variant,),
        help=f"comma-separated residual schemes (default: {d.variant})",
    )
    _common.add_flow_sizes(p, d, single=True)
    p.add_argument(
        "--seeds",
        type=_common.seeds,
        default=d.seeds,
        help="the seeds to average over: a count K (seeds 0..K-1) or a list, e.g. 100,101,102 "
        "or 100-102 (default: 1, seed 0)",
    )
    p.add_argument(
        "--format", choices=FORMATS, default="table", help="output format (default: table)"
    )
    p.add_argument(
        "--plot",
        metavar="PATH",
        help="also draw gradient norm against layer index, one line per scheme (.png or .svg)",
    )
    p.add_argument(
        "--plot-quantity",
        choices=flow.QUANTITIES,
        default="stream_grad",
        help="what --plot draws per layer: stream_grad (the gradient reaching the layer's "
        "input, the default), stream_act (the stream's norm) or param_grad (the gradient of "
        "the layer's parameters)",
    )
    _common.add_threads(p)
    p.add_argument(
        "--from-pretrained",
        metavar="SOURCE",
        nargs="+",
        help="profile a trained model instead, on windows of --text: a resgrad run directory "
        "or checkpoint, a Hugging Face GPT-2 directory or hub name (gpt2), or a nanoGPT "
        "ckpt.pt; --seq, --batch, --seeds apply; with --every-checkpoint, one or more run "
        "directories",
    )
    p.add_argument(
        "--every-checkpoint",
        action="store_true",
        help="through training: the flow at every ckpt-<iter>.ckpt the --from-pretrained run "
        "directories kept (resgrad train --keep-every N), on the same windows at every step; "
        "several runs: the mean and std over them at every step they all kept",
    )
    p.add_argument("--budget", type=_common.positive_float, default=TIME_BUDGET_S,
                   metavar="SECONDS", help="with --from-pretrained: refuse, before it starts, "
                   f"work estimated longer than this (default: {TIME_BUDGET_S:.0f})")  # fmt: skip
    p.add_argument("--text", metavar="FILE", help="UTF-8 text for --from-pretrained")
    p.add_argument(
        "--meta",
        metavar="PATH",
        help="nanoGPT's meta.pkl, the vocabulary of a --from-pretrained ckpt.pt (default: "
        "data/<its dataset>/meta.pkl, as nanoGPT's sample.py finds it)",
    )
    p.set_defaults(func=cmd_flow, measures=True)  # says a long estimate off a terminal
    sweep_cmds.register(sub, variants, d)


def cmd_flow(args: argparse.Namespace) -> int:
    if args.plot:
        check_plot_path(args.plot)  # a bad extension or destination fails before any work
    if args.from_pretrained is not None:
        return _pretrained(args)
    if args.text is not None:
        raise FLOW_TEXT_WITHOUT_MODEL()
    if args.meta is not None:
        raise FLOW_META_WITHOUT_MODEL()
    if args.every_checkpoint:
        raise FLOW_EVERY_CHECKPOINT_WITHOUT_RUNS()
    records = flow.measure_stacks(args.variant, depth=args.depth, width=args.width,
                                  heads=args.heads, seq=args.seq, batch=args.batch,
                                  init=args.init, loss=args.loss, seeds=args.seeds)  # fmt: skip
    return _output(args, records)


def _output(args: argparse.Namespace, records: list) -> int:
    if args.plot:
        save_plot(flow.flow_plot_spec(records, args.plot_quantity), args.plot)
    print(flow.render_records(records, args.format), end="")
    if args.plot:
        _common.wrote(args.plot, fmt=args.format)
    return 0


def _pretrained(args: argparse.Namespace) -> int:
    """``--from-pretrained``: one model, or runs through training (``--every-checkpoint``)."""
    _common.refuse_with(args.argv, MODEL_FLAGS, "--from-pretrained", "the model brings its own "
                        "scheme, sizes and weights, and its loss is the text's")  # fmt: skip
    if args.text is None:
        raise FLOW_NEEDS_TEXT()
    study = flow.FlowStudy(seq=args.seq, batch=args.batch, seeds=args.seeds, budget=args.budget,
                           seq_default=not _common.typed(args.argv, ("--seq",)))  # fmt: skip
    if args.every_checkpoint:
        _common.refuse_with(args.argv, ("--meta", "--plot"), "--every-checkpoint",
                            "it reads every checkpoint a run kept")  # fmt: skip
        steps = common_steps(every_checkpoint(study, args.from_pretrained, read_text(args.text)))
        names = run_names(args.from_pretrained)
        print(flow.render_every_checkpoint(steps, names, study, args.format), end="")
        return 0
    if len(args.from_pretrained) > 1:
        raise FLOW_SEVERAL_SOURCES(count=len(args.from_pretrained))
    (m,) = across_runs(study, args.from_pretrained, read_text(args.text), text_path=args.text,
                       meta=args.meta, kinds=MODELS, flag="--from-pretrained")  # fmt: skip
    return _output(args, m.result)
