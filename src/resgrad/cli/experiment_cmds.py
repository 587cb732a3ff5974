"""``resgrad experiment`` and ``resgrad claims``: the papers' experiments and claims, over
seeds (registered by :mod:`resgrad.cli.lab_cmds`, after ``compare``)."""

from __future__ import annotations

import argparse
import os

from resgrad.cli import _common, claims_cmds
from resgrad.lab import robustness
from resgrad.lab.experiments import (
    BACKENDS,
    EXPERIMENTS,
    ExperimentConfig,
    format_summary,
    run_experiment,
)
from resgrad.nn.blocks import INITS, VARIANTS
from resgrad.perf import memory
from resgrad.plots import check_plot_path

# flag -> (ExperimentConfig field, type, help); None keeps the experiment's default
EXPERIMENT_FLAGS = [
    ("--variants", _common.name_list(VARIANTS), "residual schemes, comma-separated"),
    ("--depths", _common.int_list, "numbers of layers, comma-separated"),
    ("--lrs", _common.positive_float_list, "peak learning rates, comma-separated"),
    ("--warmups", _common.nonneg_int_list, "warm-up steps, comma-separated (0: none)"),
    ("--seeds", _common.seeds, "every cell's seeds: a count K (0..K-1) or a list, e.g. "
     "100,101,102 or 100-102"),
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
]  # fmt: skip


# robustness's own flags, and the experiments' flags it does not take
ROBUSTNESS_FLAGS = [
    ("--doses", _common.list_of(_common.finite_float, "numbers"), "robustness: rezero's alpha "
     "at initialization, comma-separated: the dose that moves path length inside a scheme"),
    ("--levels", _common.positive_float_list, "robustness: validation losses to compare the "
     "models at (default: 4 inside the range every model reaches)"),
    ("--keep-every", _common.positive_int, "robustness: steps between kept checkpoints"),
    ("--budget", _common.positive_float, "robustness: refuse a study estimated longer than "
     "this many seconds (default: 3600)"),
]  # fmt: skip
ROBUSTNESS_ONLY = ("--doses", "--levels", "--keep-every", "--budget", "--quick", "--plot",
                   "--format")  # fmt: skip
NOT_ROBUSTNESS = ("--lrs", "--warmups", "--eval-interval", "--eval-iters", "--grad-clip",
                  "--init", *_common.LOG_FLAGS, "--log-to")  # fmt: skip


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "experiment",
        help="the papers' training experiments over seeds (warmup, depth, residual)",
        description="Train a grid of runs (scheme x depth x learning rate x warm-up x seed) "
        "on local cores or a Dask cluster, then report the final validation loss as mean ± "
        "std over seeds, a table (summary.md), every cell (cells.csv) and a figure. "
        "warmup: pre-LN vs post-LN with and without warm-up (Xiong et al. 2020). depth: "
        "pre-LN, post-LN and DeepNorm as depth grows (Wang et al. 2022). residual: a "
        "12-layer GPT with and without + x. robustness: at equal validation loss, does a model "
        "whose gradient travels shorter paths lose less when a block is deleted (5 schemes, "
        "rezero's alpha at initialization as a dose, every kept checkpoint read with resgrad "
        "paths and resgrad lesion)? Run again after a crash: finished cells are kept.",
    )
    p.add_argument("name", choices=(*EXPERIMENTS, "robustness"), help="which experiment")
    p.add_argument("--out-dir", default=None, help="where the runs and results go "
                   "(default: out-experiment-NAME)")  # fmt: skip
    for flag, typ, help_ in EXPERIMENT_FLAGS + ROBUSTNESS_FLAGS:
        kw = {"choices": INITS} if flag == "--init" else {}
        shown = "" if "(default:" in help_ else " (default: the experiment's)"
        p.add_argument(flag, type=typ or str, default=None, help=help_ + shown, **kw)
    p.add_argument("--quick", action="store_true", help="robustness: the small study CI runs "
                   "(3 schemes, L=2, 2 doses, 60 steps: under a minute on 2 cores)")  # fmt: skip
    p.add_argument("--plot", metavar="FILE", help="robustness: three panels (.png or .svg)")
    p.add_argument("--format", choices=("table", "json", "csv"), default="table",
                   help="robustness: output format (default: table)")  # fmt: skip
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

    claims_cmds.register(sub)  # `resgrad claims`, listed next


def cmd_experiment(args: argparse.Namespace) -> int:
    if args.name == "robustness":
        return _robustness(args)
    _common.refuse_with(args.argv, ROBUSTNESS_ONLY, f"experiment {args.name}",
                        "they set the robustness study")  # fmt: skip
    cfg = ExperimentConfig.defaults(args.name, **_common.given(args, EXPERIMENT_FLAGS))
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


def _robustness(args: argparse.Namespace) -> int:
    """``resgrad experiment robustness``: the equal-loss study (:mod:`resgrad.lab.robustness`)."""
    _common.refuse_with(args.argv, NOT_ROBUSTNESS, "experiment robustness",
                        "its models train with the study's own settings")  # fmt: skip
    if args.plot:
        check_plot_path(args.plot)  # a bad extension or destination fails before any work
    settings = _common.given(args, EXPERIMENT_FLAGS + ROBUSTNESS_FLAGS)
    budget = settings.pop("budget", robustness.BUDGET_S)
    cfg = robustness.RobustnessConfig.from_flags(args.quick, **settings)
    out_dir = args.out_dir or "out-experiment-robustness"
    big = cfg.largest_cell(out_dir)
    workers = 1 if args.backend == "dask" else min(args.jobs or os.cpu_count() or 1, 64)
    memory.require(workers * memory.train_bytes(big), f"this study ({workers} model(s) at "
                   f"once, the largest L={big.n_layer} C={big.n_embd})")  # fmt: skip
    results, trajs = robustness.equal_loss(
        cfg, out_dir, jobs=args.jobs, backend=args.backend, scheduler=args.scheduler,
        connect_timeout=args.connect_timeout, threads=args.threads, budget=budget)  # fmt: skip
    command = "resgrad " + " ".join(args.argv)
    if args.plot:  # saved before anything is printed: a reader that leaves loses no plot
        robustness.save_robustness_figure(args.plot, results, trajs, cfg, command)
    text = f"{out_dir}/validation.txt"
    print(robustness.render(results, trajs, cfg, args.format, text, command), end="")
    _common.wrote(out_dir, fmt=args.format)
    if args.plot:
        _common.wrote(args.plot, fmt=args.format)
    return 0
