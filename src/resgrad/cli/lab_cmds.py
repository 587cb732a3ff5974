"""The lab's commands on training: ``dynamics``, ``compare``, ``experiment``, ``claims``."""

from __future__ import annotations

import argparse
import os
import sys

from resgrad.cli import _common
from resgrad.lab.claims import CLAIMS, claim_table, format_claims
from resgrad.lab.experiments import EXPERIMENTS, ExperimentConfig, format_summary, run_experiment
from resgrad.lab.runs import QUANTITIES, compare_figure, dynamics_figure
from resgrad.lab.sweep import BACKENDS
from resgrad.nn.blocks import INITS, VARIANTS
from resgrad.perf import memory
from resgrad.plots import plot_format, save_figure
from resgrad.train.dynamics import DYNAMICS_HEADER, read_dynamics
from resgrad.train.trackers import TB_DIR, cell_dirs, export_many, export_tensorboard


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

    register_experiment(sub)
    register_claims(sub)


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
    note = f"; a torn last record, {dyn.torn_bytes} bytes, was ignored" if dyn.torn_bytes else ""
    n, L = len(dyn.steps), dyn.n_layer
    _common.wrote(out, f"{n} step{'s' * (n != 1)} of {L} block{'s' * (L != 1)}{note}")
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
    cells = cell_dirs(args.run_dir) if not os.path.exists(
        os.path.join(args.run_dir, DYNAMICS_HEADER)) else []  # fmt: skip
    done = export_many(cells, logdir, force=args.force) if cells else [
        export_tensorboard(args.run_dir, logdir, force=args.force)]  # fmt: skip
    for e in done:
        if e.damage:  # the records before the damage were written, as a drawing says
            print(f"resgrad dynamics: {e.run_dir}: {e.damage}", file=sys.stderr)
        _common.wrote(e.path, f"{e.steps} steps and {e.evals} evaluations")
    print(f"TensorBoard: tensorboard --logdir {logdir}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    plot_format(args.out)
    dyns = [read_dynamics(d) for d in args.run_dirs]
    save_figure(compare_figure(dyns, args.quantity, args.layers), args.out)
    for d in dyns:
        if d.damage:  # the records before the damage were drawn
            print(f"resgrad compare: {d.run_dir}: {d.damage}", file=sys.stderr)
    _common.wrote(args.out, f"{len(dyns)} run{'s' if len(dyns) != 1 else ''} compared")
    return 0


# flag -> (ExperimentConfig field, type, help); None keeps the experiment's default
EXPERIMENT_FLAGS = [
    ("--variants", _common.name_list(VARIANTS), "residual schemes, comma-separated"),
    ("--depths", _common.int_list, "numbers of layers, comma-separated"),
    ("--lrs", _common.positive_float_list, "peak learning rates, comma-separated"),
    ("--warmups", _common.nonneg_int_list, "warm-up steps, comma-separated (0: none)"),
    (
        "--seeds",
        _common.seeds,
        "every cell's seeds: a count K (0..K-1) or a list, e.g. 100,101,102 or 100-102",
    ),
    ("--max-iters", _common.positive_int, "steps per cell"),
    ("--n-embd", _common.positive_int, "width C"),
    ("--n-head", _common.positive_int, "heads H"),
    ("--block-size", _common.positive_int, "context length T"),
    ("--batch-size", _common.positive_int, "sequences per step B"),
    ("--eval-interval", _common.positive_int, "steps between evaluations"),
    ("--eval-iters", _common.positive_int, "batches per split per evaluation"),
    ("--grad-clip", _common.finite_float, "clip the global gradient norm (0: off)"),
    ("--init", None, "weight initialization"),
    ("--data", str, "a UTF-8 text file (default: the built-in corpus)"),
]


def register_experiment(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "experiment",
        help="the papers' training experiments over seeds (warmup, depth, residual)",
        description="Train a grid of runs (scheme x depth x learning rate x warm-up x seed) "
        "on local cores or a Dask cluster, then report the final validation loss as mean ± "
        "std over seeds, a table (summary.md), every cell (cells.csv) and a figure. "
        "warmup: pre-LN vs post-LN with and without warm-up (Xiong et al. 2020). depth: "
        "pre-LN, post-LN and DeepNorm as depth grows (Wang et al. 2022). residual: a "
        "12-layer GPT with and without + x. Run again after a crash: finished cells are kept.",
    )
    p.add_argument("name", choices=EXPERIMENTS, help="which experiment")
    p.add_argument("--out-dir", default=None, help="where the runs and results go "
                   "(default: out-experiment-NAME)")  # fmt: skip
    for flag, typ, help_ in EXPERIMENT_FLAGS:
        kw = {"choices": INITS} if flag == "--init" else {}
        shown = "" if "(default:" in help_ else " (default: the experiment's)"
        p.add_argument(flag, type=typ or str, default=None, help=help_ + shown, **kw)
    p.add_argument("--jobs", type=_common.positive_int, default=None,
                   help="local worker processes (default: every core)")  # fmt: skip
    p.add_argument("--backend", choices=BACKENDS, default="loky",
                   help="loky: local cores; dask: a cluster at --scheduler "
                        "(default: loky)")  # fmt: skip
    p.add_argument("--scheduler", default=None, help="Dask scheduler address, tcp://HOST:PORT")
    p.add_argument("--connect-timeout", type=_common.positive_float, default=5.0,
                   help="seconds to wait for the scheduler (default: 5)")  # fmt: skip
    _common.add_log_to(p, "each cell (a run named after it)")
    _common.add_threads(p)
    p.set_defaults(func=cmd_experiment)


def cmd_experiment(args: argparse.Namespace) -> int:
    over = {f.lstrip("-").replace("-", "_"): getattr(args, f.lstrip("-").replace("-", "_"))
            for f, _, _ in EXPERIMENT_FLAGS}  # fmt: skip
    cfg = ExperimentConfig.defaults(args.name, **{k: v for k, v in over.items() if v is not None})
    out_dir = args.out_dir or f"out-experiment-{args.name}"
    log_to = _common.log_config(args)
    big = cfg.largest_cell(out_dir)
    local = min(args.jobs or os.cpu_count() or 1, cfg.n_cells)  # runs at once
    workers = 1 if args.backend == "dask" else local
    memory.require(workers * memory.train_bytes(big),
                   f"this experiment ({workers} run(s) at once, the largest L={big.n_layer} "
                   f"C={big.n_embd} T={big.block_size} B={big.batch_size})")  # fmt: skip
    result = run_experiment(cfg, out_dir, jobs=args.jobs, backend=args.backend,
                            scheduler=args.scheduler, connect_timeout=args.connect_timeout,
                            progress=None, threads=args.threads, log_to=log_to)  # fmt: skip
    print(format_summary(result["summary"], result["unigram_entropy"]))
    _common.wrote(out_dir)  # its figure NAME.png, the table summary.md, cells.csv, runs/
    if "tensorboard" in log_to.to:
        print(f"TensorBoard: tensorboard --logdir {log_to.tensorboard_dir(out_dir)}")
    return 0


def register_claims(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "claims",
        help="DeepNet's update size and GPT-2's scaled init, measured over seeds",
        description="update-size: ||x_L' - x_L|| / ||x_L|| after one SGD step (lr 1e-2, Xavier "
        "init) for post-LN and DeepNorm (Wang et al. 2022). scaled-init: ||x_L|| / ||x_0|| of a "
        "pre-LN stack with GPT-2's 1/sqrt(2L) output projections and with it undone (Radford "
        "et al. 2019). Prints mean ± std and min..max over the seeds.",
    )
    p.add_argument("claim", choices=CLAIMS, help="which claim")
    p.add_argument("--depths", type=_common.int_list, default=(6, 24, 96),
                   help="comma-separated depths (default: 6,24,96)")  # fmt: skip
    p.add_argument("--seeds", type=_common.seeds, default=tuple(range(10)),
                   help="a count K (seeds 0..K-1) or a list, e.g. 100,101,102 or 100-109 "
                   "(default: 10, seeds 0-9)")  # fmt: skip
    _common.add_threads(p)
    p.set_defaults(func=cmd_claims)


def cmd_claims(args: argparse.Namespace) -> int:
    L = max(args.depths)  # the claims' stacks: width 32, 4 heads, T <= 16, B = 4, float64
    memory.require(memory.gpt_bytes(L, 32, 4, 16, 4, 65, 8, 4), f"these claims (depth {L})")
    print(format_claims(claim_table(args.claim, args.depths, args.seeds)))
    return 0
