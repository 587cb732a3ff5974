"""``resgrad experiment robustness``: the equal-loss study (:mod:`resgrad.lab.robustness`),
registered with the other experiments by :mod:`resgrad.cli.experiment_cmds`."""

from __future__ import annotations

import argparse
import os

from resgrad.cli import _common, _experiments
from resgrad.lab import robustness
from resgrad.perf import memory
from resgrad.plots import check_plot_path


def register(names: argparse._SubParsersAction) -> None:
    _experiments.register_one(names, "robustness", cmd_robustness)


def cmd_robustness(args: argparse.Namespace) -> int:
    """``resgrad experiment robustness``: the equal-loss study."""
    _common.refuse_with(args.argv, _experiments.NOT_ROBUSTNESS, "experiment robustness",
                        "its models train with the study's own settings")  # fmt: skip
    if args.plot:
        check_plot_path(args.plot)  # a bad extension or destination fails before any work
    settings = _common.given(args, _experiments.EXPERIMENT_FLAGS + _experiments.ROBUSTNESS_FLAGS)
    budget = settings.pop("budget", robustness.BUDGET_S)
    cfg = robustness.RobustnessConfig.from_flags(args.quick, **settings)
    out_dir = args.out_dir or os.path.join("out", "experiment-robustness")
    big = cfg.largest_cell(out_dir)
    workers = 1 if args.backend == "dask" else min(args.jobs or os.cpu_count() or 1, 64)
    memory.require(workers * memory.train_bytes(big), f"this study ({workers} model(s) at "
                   f"once, the largest L={big.n_layer} C={big.n_embd})")  # fmt: skip
    command = _common.same_command(args)
    plan = _common.long_work(args, out_dir, "pilot/, runs/, checkpoints.csv and validation.txt",
                             "every finished model", command)  # fmt: skip
    study = robustness.equal_loss(
        cfg, out_dir, jobs=args.jobs, backend=args.backend, scheduler=args.scheduler,
        connect_timeout=args.connect_timeout, threads=args.threads, budget=budget,
        plan=plan)  # fmt: skip
    if args.plot:  # saved before anything is printed: a reader that leaves loses no plot
        robustness.save_robustness_figure(args.plot, study, command)
    text = f"{out_dir}/validation.txt"
    print(robustness.render(study, args.format, text, command), end="")
    _common.wrote(out_dir, fmt=args.format)
    if args.plot:
        _common.wrote(args.plot, fmt=args.format)
    return 0
