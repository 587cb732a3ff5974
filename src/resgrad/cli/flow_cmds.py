"""``resgrad flow`` and ``resgrad sweep``: the gradient-flow lab on the command line.

Also the pieces ``resgrad depth --per-layer`` and ``resgrad depth --plot`` call
for the lesson's stack.
"""

from __future__ import annotations

import argparse
import os

from resgrad.cli import _common
from resgrad.lab import flow
from resgrad.lab.lesson import StackConfig
from resgrad.nn import blocks
from resgrad.perf import memory
from resgrad.plots import check_plot_path, save_plot

FORMATS = ("table", "json", "csv")


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
    _add_sizes(p, d, single=True)
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
        help="profile a trained model instead, on windows of --text: a resgrad run directory "
        "or checkpoint, a Hugging Face GPT-2 directory or hub name (gpt2), or a nanoGPT "
        "ckpt.pt; --seq, --batch, --seeds apply",
    )
    p.add_argument("--text", metavar="FILE", help="UTF-8 text for --from-pretrained")
    p.add_argument(
        "--meta",
        metavar="PATH",
        help="nanoGPT's meta.pkl, the vocabulary of a --from-pretrained ckpt.pt (default: "
        "data/<its dataset>/meta.pkl, as nanoGPT's sample.py finds it)",
    )
    p.set_defaults(func=cmd_flow)

    s = sub.add_parser(
        "sweep",
        help="gradient flow over a grid of schemes x depths x widths x seeds, in parallel",
        description="Measure every (variant, depth, width, seed) of the grid; write one row per "
        "(config, layer) to OUT (.csv or .json, atomically). Runs on local cores with joblib, or "
        "on a Dask cluster with --backend dask --scheduler ADDRESS; the rows are the same either "
        "way. While it runs, finished configs are kept in .OUT.partial.jsonl beside OUT, so an "
        "interrupted sweep run again with the same flags resumes where it stopped.",
    )
    s.add_argument(
        "--variants",
        type=_common.name_list(variants),
        default=("pre-ln", "post-ln"),
        help="comma-separated residual schemes (default: pre-ln,post-ln)",
    )
    s.add_argument(
        "--depths", type=_common.int_list, default=(2, 4, 8, 16), help="default: 2,4,8,16"
    )
    s.add_argument("--widths", type=_common.int_list, default=(32,), help="default: 32")
    s.add_argument(
        "--seeds",
        type=_common.seeds,
        default=(0, 1),
        help="a count K (seeds 0..K-1) or a list, e.g. 100,101,102 or 100-102 (default: 2, "
        "seeds 0 and 1)",
    )
    _add_sizes(s, d, single=False)
    s.add_argument("--out", metavar="PATH", required=True, help="result file, .csv or .json")
    s.add_argument(
        "--plot",
        metavar="PATH",
        help="also draw input-gradient norm against depth per scheme, log-log (.png or .svg)",
    )
    s.add_argument(
        "--jobs",
        type=_common.positive_int,
        default=None,
        help="local worker processes (default: every core)",
    )
    s.add_argument("--backend", choices=("loky", "dask"), default="loky", help="default: loky")
    s.add_argument(
        "--scheduler", metavar="ADDRESS", help="Dask scheduler address, e.g. tcp://HOST:8786"
    )
    s.add_argument(
        "--connect-timeout",
        type=_common.positive_float,
        default=5.0,
        help="seconds to wait for the Dask scheduler (default: 5)",
    )
    s.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar on stderr (default: when stderr is a terminal)",
    )
    _common.add_threads(s)
    s.set_defaults(func=cmd_sweep)


def _add_sizes(p: argparse.ArgumentParser, d: flow.FlowConfig, single: bool) -> None:
    if single:
        p.add_argument(
            "--depth", type=_common.positive_int, default=d.depth, help=f"L (default: {d.depth})"
        )
        p.add_argument(
            "--width", type=_common.positive_int, default=d.width, help=f"C (default: {d.width})"
        )
    p.add_argument(
        "--heads", type=_common.positive_int, default=d.heads, help=f"H (default: {d.heads})"
    )
    p.add_argument("--seq", type=_common.positive_int, default=d.seq, help=f"T (default: {d.seq})")
    p.add_argument(
        "--batch", type=_common.positive_int, default=d.batch, help=f"B (default: {d.batch})"
    )
    p.add_argument("--init", choices=blocks.INITS, default=d.init, help=f"default: {d.init}")
    p.add_argument(
        "--loss",
        choices=flow.LOSSES,
        default=d.loss,
        help="ones: the lesson's upstream gradient of ones; randn: a fixed Gaussian one; "
        "lm: a whole GPT's cross-entropy on random tokens (default: lm)",
    )


def _flow_config(args: argparse.Namespace, variant: str) -> flow.FlowConfig:
    return flow.FlowConfig(
        variant=variant, depth=args.depth, width=args.width, heads=args.heads, seq=args.seq,
        batch=args.batch, init=args.init, loss=args.loss, seeds=args.seeds,
    )  # fmt: skip


def cmd_flow(args: argparse.Namespace) -> int:
    if args.plot:
        check_plot_path(args.plot)  # a bad extension or destination fails before any work
    if args.from_pretrained is not None:
        records = _pretrained_records(args)
    elif args.text is not None:
        raise ValueError("--text is the input of --from-pretrained; give that too")
    elif args.meta is not None:
        raise ValueError("--meta is the vocabulary of a --from-pretrained ckpt.pt; give that too")
    else:
        records = []
    cfgs = [] if args.from_pretrained is not None else [_flow_config(args, v) for v in args.variant]
    if cfgs:
        c = cfgs[0]  # the variants share their sizes
        memory.require(max(memory.flow_bytes(c) for c in cfgs),
                       f"this flow measurement (depth {c.depth}, width {c.width}, seq {c.seq}, "
                       f"batch {c.batch})")  # fmt: skip
    for cfg in cfgs:
        records += flow.measure(cfg)
    if args.plot:
        save_plot(flow.flow_plot_spec(records, args.plot_quantity), args.plot)
    if args.format == "json":
        print(flow.records_to_json(records), end="")
    elif args.format == "csv":
        print(flow.records_to_csv(records), end="")
    else:
        print(flow.format_records(records), end="")
    if args.plot:
        _common.wrote(args.plot, fmt=args.format)
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    # imported here: joblib and tqdm only load for the command that needs them
    from resgrad.lab.sweep import SweepConfig, run_sweep

    if args.plot:
        check_plot_path(args.plot)  # a bad extension or destination fails before any work
    cfg = SweepConfig(
        variants=args.variants, depths=args.depths, widths=args.widths, seeds=args.seeds,
        heads=args.heads, seq=args.seq, batch=args.batch, init=args.init, loss=args.loss,
    )  # fmt: skip
    jobs = min(args.jobs or os.cpu_count() or 1, len(cfg.points()))
    per_point = max(memory.flow_bytes(p) for p in cfg.points())
    memory.require(jobs * per_point, f"this sweep ({jobs} worker(s) at once, depth up to "
                   f"{max(cfg.depths)}, width up to {max(cfg.widths)})")  # fmt: skip
    res = run_sweep(
        cfg,
        args.out,
        plot=args.plot,
        jobs=args.jobs,
        backend=args.backend,
        scheduler=args.scheduler,
        connect_timeout=args.connect_timeout,
        progress=args.progress,
        threads=args.threads,
    )
    n = res.computed + res.resumed
    _common.wrote(args.out, f"{len(res.rows)} rows; {n} configs: {res.computed} computed, "
                  f"{res.resumed} resumed")  # fmt: skip
    if args.plot:
        _common.wrote(args.plot)
    return 0


# -- `resgrad depth --per-layer` and `--plot`: the lesson's stack layer by layer --------


def save_lesson_plot(cfg: StackConfig, path: str | os.PathLike) -> None:
    """Per-layer gradient norm of the lesson's deepest stack, without and with residuals."""
    save_plot(flow.lesson_plot_spec(cfg), path)


def render_per_layer(cfg: StackConfig, fmt: str = "table", ratio: bool = False) -> str:
    """The lesson's stack layer by layer (layer 0 = the lesson's number) in one of FORMATS."""
    rows = flow.lesson_per_layer(cfg)
    keys = ["depth", "layer", "no_residual", "with_residual"] + (["ratio"] if ratio else [])
    if fmt == "table":
        header = f"{'depth N':>8} | {'layer i':>7} | {'no residual':>14} | {'with residual':>14}"
        header += f" | {'ratio':>14}" if ratio else ""
        lines = [header, "-" * len(header)]
        for r in rows:
            line = (
                f"{r.depth:>8} | {r.layer:>7} | {r.no_residual:>14.6e} | {r.with_residual:>14.6f}"
            )
            line += f" | {r.ratio:>14.6f}" if ratio else ""
            lines.append(line)
        return "\n".join(lines) + "\n"
    return _common.render_rows(rows, keys, fmt, meta={"config": cfg.as_dict()})


def _pretrained_records(args: argparse.Namespace) -> list:
    from resgrad.lab.realflow import measure_model
    from resgrad.train.data import read_text
    from resgrad.train.source import MODELS, encode_text, load_source, resolve_source

    _common.refuse_with(
        args.argv, ("--variant", "--depth", "--width", "--heads", "--init", "--loss"),
        "--from-pretrained", "the model brings its own scheme, sizes and weights, and its loss "
        "is the text's",
    )  # fmt: skip
    if args.text is None:
        raise ValueError("--from-pretrained needs --text FILE, the text to run the model on")
    src = resolve_source(args.from_pretrained, meta=args.meta, kinds=MODELS,
                         flag="--from-pretrained")  # fmt: skip
    text = read_text(args.text)

    def fits(m) -> None:  # the model's shape, from its config.json: before it is read
        memory.require(memory.pretrained_flow_bytes(m, args.seq, args.batch),
                       f"this model (L={m.n_layer} C={m.n_embd} V={m.vocab_size}) on "
                       f"{args.batch} windows of {args.seq} tokens")  # fmt: skip

    model, tok = load_source(src, fits=fits)
    name = os.path.basename(os.path.normpath(args.from_pretrained))
    return measure_model(
        model, encode_text(tok, text, args.text), seq=args.seq, batch=args.batch,
        seeds=args.seeds, name=name,
    )  # fmt: skip
