"""``resgrad sweep``: gradient flow over a grid of schemes x depths x widths x seeds."""

from __future__ import annotations

import argparse

from resgrad.cli import _common
from resgrad.plots import check_plot_path


def register(sub: argparse._SubParsersAction, variants: tuple[str, ...], d) -> None:
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
    _common.add_flow_sizes(s, d, single=False)
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


def cmd_sweep(args: argparse.Namespace) -> int:
    # imported here: joblib and tqdm only load for the command that needs them
    from resgrad.lab.experiments import SweepConfig, require_memory, run_sweep, sidecar_path

    if args.plot:
        check_plot_path(args.plot)  # a bad extension or destination fails before any work
    cfg = SweepConfig(
        variants=args.variants, depths=args.depths, widths=args.widths, seeds=args.seeds,
        heads=args.heads, seq=args.seq, batch=args.batch, init=args.init, loss=args.loss,
    )  # fmt: skip
    require_memory(cfg, args.jobs)
    side = sidecar_path(args.out)  # where finished configs wait for the whole file
    _common.long_work(args, side, "", "every finished config", _common.same_command(args))
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
