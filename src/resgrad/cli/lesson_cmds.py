"""``resgrad lesson``, ``resgrad depth`` and ``resgrad gradcheck``: the lesson's experiments."""

from __future__ import annotations

import argparse

from resgrad.cli import _common, flow_cmds
from resgrad.lab.lesson import (
    LESSON_BAR,
    GradcheckConfig,
    StackConfig,
    depth_table,
    format_table,
    lesson_gradcheck,
)
from resgrad.perf import memory
from resgrad.plots import check_plot_path

FORMATS = ("table", "json", "csv")


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
    p.add_argument(
        "--depths",
        type=_common.int_list,
        default=d.depths,
        help="comma-separated depths N (default: 1,5,10,20)",
    )
    p.add_argument(
        "--scale",
        type=_common.finite_float,
        default=d.scale,
        help="each W is randn(C, C) * SCALE / sqrt(C) (default: 0.5)",
    )
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
        "--format", choices=FORMATS, default="table", help="output format (default: table)"
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
    p.add_argument(
        "--blocks",
        type=_common.positive_int,
        default=g.blocks,
        help="residual sublayers chained (default: 1)",
    )
    p.add_argument(
        "--width", type=_common.positive_int, default=g.width, help="feature width C (default: 8)"
    )
    p.add_argument(
        "--rows", type=_common.positive_int, default=g.rows, help="rows of x (default: 3)"
    )
    p.add_argument(
        "--eps",
        type=_common.positive_float,
        default=g.eps,
        help="finite-difference step (default: 1e-6)",
    )
    p.add_argument(
        "--seed", type=_common.seed, default=g.seed, help="seed of default_rng (default: 42)"
    )
    _common.add_threads(p)
    p.set_defaults(func=cmd_gradcheck)


def render_depth(cfg: StackConfig, fmt: str = "table", ratio: bool = False) -> str:
    """The depth experiment as text in one of FORMATS."""
    rows = depth_table(cfg)
    if fmt == "table":
        return format_table(rows, ratio=ratio)
    keys = ["depth", "no_residual", "with_residual"] + (["ratio"] if ratio else [])
    return _common.render_rows(rows, keys, fmt, meta={"config": cfg.as_dict()})


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
        flow_cmds.save_lesson_plot(cfg, args.plot)
    if args.per_layer:
        print(flow_cmds.render_per_layer(cfg, args.format, args.ratio), end="")
    else:
        print(render_depth(cfg, args.format, args.ratio), end="")
    if args.plot:
        _common.wrote(args.plot, fmt=args.format)
    return 0


def _gradcheck_lines(cfg: GradcheckConfig) -> tuple[list[str], bool]:
    report = lesson_gradcheck(cfg)
    ok = report.passed(LESSON_BAR)
    lines = [f"max relative error: {report.max_error:.2e}", "dtype: float64"]
    if not ok:
        lines.append(f"FAIL: {report.summary()}, above the lesson's bar of {LESSON_BAR:.0e}")
    return lines, ok


def cmd_gradcheck(args: argparse.Namespace) -> int:
    cfg = GradcheckConfig(
        blocks=args.blocks, width=args.width, rows=args.rows, eps=args.eps, seed=args.seed
    )
    memory.require(
        memory.lesson_gradcheck_bytes(cfg.blocks, cfg.width, cfg.rows),
        f"this check (blocks {cfg.blocks}, width {cfg.width}, rows {cfg.rows})",
    )
    lines, ok = _gradcheck_lines(cfg)
    print("\n".join(lines))
    return 0 if ok else 1


def cmd_lesson(args: argparse.Namespace) -> int:
    default = StackConfig()
    sections = [
        (
            "Measuring it: gradient norm reaching the input of a deep tanh stack",
            "Without the + x path the gradient collapses geometrically with depth; "
            "with it, the identity highway keeps it alive.",
            format_table(depth_table(default)),
        ),
    ]
    lines, ok1 = _gradcheck_lines(GradcheckConfig())
    sections.append(
        (
            "Proving the backward pass: out = x + tanh(x @ W) against central differences",
            f"dx = dout + df matches the numerical gradient far below the {LESSON_BAR:.0e} bar "
            "(the exact figure is rounding noise of this machine's BLAS).",
            "\n".join(lines) + "\n",
        )
    )
    sections.append(
        (
            "Exercise 1: weaken the attenuation (resgrad depth --scale 0.9)",
            "At scale 0.9 the plain stack still decays with depth, only more slowly; "
            "the residual column stays healthy.",
            format_table(depth_table(StackConfig(scale=0.9))),
        )
    )
    lines, ok2 = _gradcheck_lines(GradcheckConfig(blocks=2))
    sections.append(
        (
            "Exercise 2: gradient-check two chained residual sublayers "
            "(resgrad gradcheck --blocks 2)",
            "out = h + g(h) with h = x + f(x): the backward chains dx = dout + df twice "
            "and still matches in float64.",
            "\n".join(lines) + "\n",
        )
    )
    sections.append(
        (
            "Exercise 3: the preservation ratio (resgrad depth --ratio)",
            f"Input-gradient norm over the upstream norm sqrt(B*C) = {default.upstream_norm:g}: "
            "above 1 everywhere, the sublayer contributions piling onto the residual stream.",
            format_table(depth_table(default), ratio=True),
        )
    )
    for i, (title, why, body) in enumerate(sections):
        if i:
            print()
        print(f"== {title}")
        print(why)
        print()
        print(body, end="")
    return 0 if (ok1 and ok2) else 1
