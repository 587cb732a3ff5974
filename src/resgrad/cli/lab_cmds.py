"""``resgrad dynamics`` and ``resgrad compare``: how training runs went, layer by layer."""

from __future__ import annotations

import argparse
import os

from resgrad.cli import _common
from resgrad.lab.runs import (
    QUANTITIES,
    compare_figure,
    dynamics_figure,
    load_runs,
    save_figure,
)
from resgrad.plots import plot_format


def _nonneg_int_list(text: str) -> tuple[int, ...]:
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(p == "" for p in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated block numbers, got {text!r}")
    return tuple(_common.nonneg_int(p) for p in parts)


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
        type=_nonneg_int_list,
        default=None,
        help="blocks drawn as lines, e.g. 0,5,11 (default: first, middle, last)",
    )
    p.add_argument("--out", default=None, help="PNG or SVG (default: RUN_DIR/dynamics.png)")
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
        type=_nonneg_int_list,
        default=None,
        help="blocks drawn against step (default: first, middle and last of the shallowest run)",
    )
    p.add_argument("--out", default="compare.png", help="PNG or SVG (default: compare.png)")
    p.set_defaults(func=cmd_compare)


def cmd_dynamics(args: argparse.Namespace) -> int:
    out = args.out or os.path.join(args.run_dir, "dynamics.png")
    plot_format(out)  # a bad extension is refused before anything is read
    (dyn,) = load_runs([args.run_dir])
    save_figure(dynamics_figure(dyn, args.quantities, args.layers), out)
    note = f" (a torn last record, {dyn.torn_bytes} bytes, was ignored)" if dyn.torn_bytes else ""
    print(f"{len(dyn.steps)} steps of {dyn.n_layer} blocks drawn to {out}{note}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    plot_format(args.out)
    dyns = load_runs(args.run_dirs)
    save_figure(compare_figure(dyns, args.quantity, args.layers), args.out)
    print(f"{len(dyns)} runs compared in {args.out}")
    return 0
