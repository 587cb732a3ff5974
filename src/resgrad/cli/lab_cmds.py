"""The lab's commands on training runs: ``dynamics`` and ``compare``; then ``experiment`` and
``claims``, which :mod:`resgrad.cli.experiment_cmds` registers."""

from __future__ import annotations

import argparse
import os
import sys

from resgrad.cli import _common, experiment_cmds
from resgrad.lab.experiments import QUANTITIES, compare_figure, dynamics_figure
from resgrad.plots import plot_format, save_figure
from resgrad.train.dynamics import damage_report, read_dynamics, read_runs
from resgrad.train.trackers import TB_DIR, Exported, export_runs


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dynamics",
        help="heatmaps of a training run's per-layer dynamics",
        description="Draw every per-layer quantity that `resgrad train` recorded in RUN_DIR "
        "(dynamics.bin): a heatmap of block against step on a log colour scale, and the "
        "values of a few blocks against step.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="the --out-dir of a `resgrad train` run")
    p.add_argument(
        "--quantities",
        type=_common.name_list(QUANTITIES),
        default=QUANTITIES,
        help=f"comma-separated, from {', '.join(QUANTITIES)} (default: all)",
    )
    p.add_argument(
        "--layers",
        type=_common.nonneg_int_list,
        default=None,
        help="blocks drawn as lines, e.g. 0,5,11 (default: first, middle, last)",
    )
    p.add_argument("--out", default=None, help="PNG or SVG (default: RUN_DIR/dynamics.png)")
    p.add_argument(
        "--export",
        nargs="+",
        metavar=("tensorboard", "DIR"),
        default=None,
        help="instead of drawing, write the run's records as TensorBoard event files in "
        "DIR/<run name> (default DIR: RUN_DIR/tb), DIR written whole; an experiment's directory: "
        "one run per cell in DIR/<cell>",
    )
    p.add_argument("--force", action="store_true", help="--export: replace a DIR that holds "
                   "only event files (an earlier export, a run's logs); never one that holds "
                   "anything else, RUN_DIR among it")  # fmt: skip
    p.set_defaults(func=cmd_dynamics)

    p = sub.add_parser(
        "compare",
        help="several training runs side by side",
        description="Overlay the runs' loss curves and one per-layer quantity (against step for "
        "chosen blocks, and across blocks at the end of training), one colour per run, each "
        "labelled by the settings in which it differs from the others.",
    )
    p.add_argument("run_dirs", metavar="RUN_DIR", nargs="+", help="`resgrad train` out-dirs")
    p.add_argument(
        "--quantity",
        choices=QUANTITIES,
        default="grad",
        help="the per-layer quantity to compare (default: grad)",
    )
    p.add_argument(
        "--layers",
        type=_common.nonneg_int_list,
        default=None,
        help="blocks drawn against step (default: first, middle and last of the shallowest run)",
    )
    p.add_argument("--out", default="compare.png", help="PNG or SVG (default: compare.png)")
    p.set_defaults(func=cmd_compare)

    experiment_cmds.register(sub)  # `resgrad experiment` and `resgrad claims`, listed next


def cmd_dynamics(args: argparse.Namespace) -> int:
    if args.export is not None:
        return _export(args)
    _common.refuse_with(args.argv, ("--force",), "no --export", "it replaces an export's DIR")
    out = args.out or os.path.join(args.run_dir, "dynamics.png")
    plot_format(out)  # a bad extension is refused before anything is read
    dyn = read_dynamics(args.run_dir)
    save_figure(dynamics_figure(dyn, args.quantities, args.layers), out)
    if dyn.damage:  # the records before the damage were drawn
        print(f"resgrad dynamics: {args.run_dir}: {dyn.damage}", file=sys.stderr)
    _common.wrote(out, dyn.describe())
    return 0


def _export(args: argparse.Namespace) -> int:
    fmt, *rest = args.export
    if fmt != "tensorboard" or len(rest) > 1:
        raise ValueError(
            f"--export takes tensorboard and an optional DIR, got {' '.join(args.export)!r}"
        )
    _common.refuse_with(args.argv, ("--quantities", "--layers", "--out"), "--export",
                        "they choose what a drawing shows")  # fmt: skip
    logdir = rest[0] if rest else os.path.join(args.run_dir, TB_DIR)

    def said(e: Exported) -> None:  # each run (an experiment's: each cell), once written
        if e.damage:  # the records before the damage were written, as a drawing says
            print(f"resgrad dynamics: {e.run_dir}: {e.damage}", file=sys.stderr)
        _common.wrote(e.path, f"{e.steps} steps and {e.evals} evaluations")

    export_runs(args.run_dir, logdir, force=args.force, on_export=said)
    print(f"TensorBoard: tensorboard --logdir {logdir}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    plot_format(args.out)
    dyns = read_runs(args.run_dirs)
    save_figure(compare_figure(dyns, args.quantity, args.layers), args.out)
    # the records before a run's damage were drawn
    print(damage_report(dyns, "resgrad compare"), end="", file=sys.stderr)
    _common.wrote(args.out, f"{len(dyns)} run{'s' if len(dyns) != 1 else ''} compared")
    return 0
