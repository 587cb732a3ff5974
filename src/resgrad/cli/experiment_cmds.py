"""``resgrad experiment NAME`` and ``resgrad claims``: the papers' experiments and claims,
over seeds (registered by :mod:`resgrad.cli.lab_cmds`, after ``compare``); the robustness
study is :mod:`resgrad.cli.robustness_cmds`'s."""

from __future__ import annotations

import argparse
import os

from resgrad.cli import _common, _experiments, claims_cmds, robustness_cmds
from resgrad.lab.experiments import EXPERIMENTS, ExperimentConfig, format_summary, run_experiment
from resgrad.perf import memory


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "experiment",
        help=_experiments.SUMMARY,
        description="Train a grid of runs (scheme x depth x learning rate x warm-up x seed) "
        "on local cores or a Dask cluster, then report the result as mean ± std over seeds. "
        + " ".join(f"{n}: {_experiments.ABOUT[n]}." for n in _experiments.NAMES)
        + " Run again after a crash or Ctrl-C: finished cells are kept. `resgrad experiment "
        "NAME --help` lists NAME's flags and their defaults.",
    )
    names = p.add_subparsers(dest="name", metavar="NAME", parser_class=_common.Parser)
    names.required = True
    for name in EXPERIMENTS:
        _experiments.register_one(names, name, cmd_experiment)
    robustness_cmds.register(names)  # `resgrad experiment robustness`, listed last

    claims_cmds.register(sub)  # `resgrad claims`, listed next


def cmd_experiment(args: argparse.Namespace) -> int:
    _common.refuse_with(args.argv, _experiments.ROBUSTNESS_ONLY, f"experiment {args.name}",
                        "they set the robustness study")  # fmt: skip
    cfg = ExperimentConfig.defaults(args.name, **_common.given(args, _experiments.EXPERIMENT_FLAGS))
    out_dir = args.out_dir or os.path.join("out", f"experiment-{args.name}")
    log_to = _common.log_config(args)
    big = cfg.largest_cell(out_dir)
    local = min(args.jobs or os.cpu_count() or 1, cfg.n_cells)  # runs at once
    workers = 1 if args.backend == "dask" else local
    memory.require(workers * memory.train_bytes(big),
                   f"this experiment ({workers} run(s) at once, the largest L={big.n_layer} "
                   f"C={big.n_embd} T={big.block_size} B={big.batch_size})")  # fmt: skip
    plan = _common.long_work(args, out_dir, f"runs/, cells.csv, summary.md and {cfg.name}.png",
                             "every finished cell", _common.same_command(args))  # fmt: skip
    result = run_experiment(cfg, out_dir, jobs=args.jobs, backend=args.backend,
                            scheduler=args.scheduler, connect_timeout=args.connect_timeout,
                            progress=None, threads=args.threads, log_to=log_to,
                            plan=plan)  # fmt: skip
    print(format_summary(result["summary"], result["unigram_entropy"]))
    _common.wrote(out_dir)  # its figure NAME.png, the table summary.md, cells.csv, runs/
    if "tensorboard" in log_to.to:
        print(f"TensorBoard: tensorboard --logdir {log_to.tensorboard_dir(out_dir)}")
    return 0
