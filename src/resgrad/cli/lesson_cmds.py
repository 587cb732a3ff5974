"""``resgrad lesson``, ``resgrad depth`` and ``resgrad gradcheck``: the lesson's experiments."""

from __future__ import annotations

import argparse

from resgrad.cli import _common
from resgrad.lab import flow
from resgrad.lab.lesson import (
    DEPTH_FORMATS,
    LESSON_BAR,
    GradcheckConfig,
    StackConfig,
    render_depth,
    render_gradcheck,
    render_lesson,
)
from resgrad.perf import memory
from resgrad.plots import check_plot_path, save_plot


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "lesson",
        help="run the whole lesson: the table, the gradient check and the three exercises",
        description="The lesson in order: the depth table, the float64 gradient check, "
        "then Exercises 1-3, each with a line on what it shows.",
    )
    _common.add_threads(p)
    p.set_defaults(func=cmd_lesson)

    d = StackConfig()
    p = sub.add_parser(
        "depth",
        help="gradient norm reaching the input of a deep tanh stack, with and without residuals",
        description="The lesson's deep stack: the norm of the gradient that reaches the input "
        "of N tanh(x @ W) sublayers, without and with the + x path. With no flags it prints "
        "the lesson's table byte for byte. Exercise 1 is --scale 0.9; Exercise 3 is --ratio.",
    )
    p.add_argument("--depths", type=_common.int_list, default=d.depths,
                   help="comma-separated depths N (default: 1,5,10,20)")  # fmt: skip
    p.add_argument("--scale", type=_common.finite_float, default=d.scale,
                   help="each W is randn(C, C) * SCALE / sqrt(C) (default: 0.5)")  # fmt: skip
    p.add_argument(
        "--width", type=_common.positive_int, default=d.width, help="feature width C (default: 16)"
    )
    p.add_argument(
        "--batch", type=_common.positive_int, default=d.batch, help="batch size B (default: 4)"
    )
    p.add_argument(
        "--seed",
        type=_common.seed,
        default=d.seed,
        help="seed of the bank of matrices (default: 42; the input keeps seed 0)",
    )
    p.add_argument(
        "--ratio",
        action="store_true",
        help="add Exercise 3's preservation ratio: input-gradient norm / sqrt(B*C)",
    )
    p.add_argument(
        "--format", choices=DEPTH_FORMATS, default="table", help="output format (default: table)"
    )
    p.add_argument(
        "--per-layer",
        action="store_true",
        help="print the gradient norm reaching every layer's input, not only the input's",
    )
    p.add_argument(
        "--plot",
        metavar="PATH",
        help="draw the deepest stack's per-layer gradient norm, log scale (.png or .svg)",
    )
    _common.add_threads(p)
    p.set_defaults(func=cmd_depth)

    g = GradcheckConfig()
    p = sub.add_parser(
        "gradcheck",
        help="float64 finite-difference check of the residual backward pass",
        description="The lesson's gradient check of out = x + tanh(x @ W) against central "
        f"differences in float64. Exits 1 if the max relative error is above {LESSON_BAR:.0e}. "
        "Exercise 2 is --blocks 2.",
    )
    p.add_argument("--blocks", type=_common.positive_int, default=g.blocks,
                   help="residual sublayers chained (default: 1)")  # fmt: skip
    p.add_argument(
        "--width", type=_common.positive_int, default=g.width, help="feature width C (default: 8)"
    )
    p.add_argument(
        "--rows", type=_common.positive_int, default=g.rows, help="rows of x (default: 3)"
    )
    p.add_argument("--eps", type=_common.positive_float, default=g.eps,
                   help="finite-difference step (default: 1e-6)")  # fmt: skip
    p.add_argument(
        "--seed", type=_common.seed, default=g.seed, help="seed of default_rng (default: 42)"
    )
    _common.add_threads(p)
    p.set_defaults(func=cmd_gradcheck)


def cmd_depth(args: argparse.Namespace) -> int:
    if args.plot:
        check_plot_path(args.plot)  # a bad extension or destination fails before any work
    cfg = StackConfig(
        depths=args.depths, scale=args.scale, width=args.width, batch=args.batch, seed=args.seed
    )
    memory.require(
        memory.lesson_stack_bytes(max(cfg.depths), cfg.width, cfg.batch),
        f"this stack (depth {max(cfg.depths)}, width {cfg.width}, batch {cfg.batch})",
    )
    if args.plot:
        save_plot(flow.lesson_plot_spec(cfg), args.plot)
    if args.per_layer:
        print(flow.lesson_per_layer_text(cfg, args.format, args.ratio), end="")
    else:
        print(render_depth(cfg, args.format, args.ratio), end="")
    if args.plot:
        _common.wrote(args.plot, fmt=args.format)
    return 0


def cmd_gradcheck(args: argparse.Namespace) -> int:
    cfg = GradcheckConfig(
        blocks=args.blocks, width=args.width, rows=args.rows, eps=args.eps, seed=args.seed
    )
    memory.require(
        memory.lesson_gradcheck_bytes(cfg.blocks, cfg.width, cfg.rows),
        f"this check (blocks {cfg.blocks}, width {cfg.width}, rows {cfg.rows})",
    )
    text, ok = render_gradcheck(cfg)
    print(text, end="")
    return 0 if ok else 1


def cmd_lesson(args: argparse.Namespace) -> int:
    text, ok = render_lesson()
    print(text, end="")
    return 0 if ok else 1
