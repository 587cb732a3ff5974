"""``resgrad experiment`` and ``resgrad claims``: the papers' experiments and claims, over
seeds (registered by :mod:`resgrad.cli.lab_cmds`, after ``compare``)."""

from __future__ import annotations

import argparse
import os

from resgrad.cli import _common
from resgrad.lab.experiments import (
    BACKENDS,
    CLAIMS,
    EXPERIMENTS,
    ExperimentConfig,
    claim_table,
    format_claims,
    format_summary,
    run_experiment,
)
from resgrad.nn.blocks import INITS, VARIANTS
from resgrad.perf import memory

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


def register(sub: argparse._SubParsersAction) -> None:
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


def cmd_experiment(args: argparse.Namespace) -> int:
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


def cmd_claims(args: argparse.Namespace) -> int:
    L = max(args.depths)  # the claims' stacks: width 32, 4 heads, T <= 16, B = 4, float64
    memory.require(memory.gpt_bytes(L, 32, 4, 16, 4, 65, 8, 4), f"these claims (depth {L})")
    print(format_claims(claim_table(args.claim, args.depths, args.seeds)))
    return 0
