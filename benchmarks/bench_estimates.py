"""Every study's estimate, before it starts, against its measured wall time on this machine.

    python benchmarks/bench_estimates.py
    python benchmarks/bench_estimates.py --quick      # a smoke run: the small cases only
    python benchmarks/bench_estimates.py --check      # exit 1 if a ratio is outside the goal

A study refuses work estimated over its budget, and shows its estimate beside its
progress bar, so the estimate must be near the truth: the goal is a ratio measured /
estimated within [0.5, 2] for every case (issue 46). The cases:

- ``paths``, ``lesion`` and ``flow`` at every checkpoint a run kept (:func:`every_checkpoint`),
  on runs of three shapes this script trains first, on the BLAS threads the command would
  choose (the estimate is the study's ``cost``);
- ``experiment robustness --quick`` and a middle-sized robustness study (2 schemes,
  depths 2 and 4, 100 steps), each in a fresh out-dir on 2 local workers, their worker
  processes' start-up included (the estimate is :meth:`RobustnessConfig.seconds`);
- ``experiment robustness --quick`` on a local Dask cluster of 2 one-thread workers, its
  estimate on the worker threads the scheduler counts, as the command makes it.

Each case runs once after a warm-up (numba's kernels compiled into their cache by a first
tiny run, as on any machine after its first command). The table gives the estimate, the
measured time, the ratio and whether it is within the goal; with ``--check`` the exit
status is 1 if any is not. The CPU's vector width and the BLAS kernel threadpoolctl reports
are printed first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

from threadpoolctl import threadpool_info

from resgrad.cli import _threads
from resgrad.lab.experiments.grid import connected, parallelism
from resgrad.lab.flow.study import FlowStudy
from resgrad.lab.lesion.study import LesionStudy
from resgrad.lab.paths.study import PathsStudy
from resgrad.lab.robustness import RobustnessConfig
from resgrad.lab.robustness.experiment import run_cells
from resgrad.lab.study.protocol import every_checkpoint
from resgrad.train.config import TrainConfig
from resgrad.train.data import load_corpus
from resgrad.train.loop import train
from resgrad.train.sample import load_model

GOAL = (0.5, 2.0)


def vector_width() -> str:
    """AVX-512 or AVX2, from the CPU's flags."""
    try:
        flags = open("/proc/cpuinfo", encoding="ascii", errors="replace").read()
    except OSError:
        return "unknown"
    return "AVX-512" if " avx512f" in flags else "AVX2" if " avx2" in flags else "below AVX2"


def _study_cases(root: str, quick: bool) -> list[tuple[str, float, float]]:
    out = []
    for L, C in [(4, 64)] if quick else [(4, 64), (12, 32), (6, 128)]:
        run = TrainConfig(n_layer=L, n_head=4, n_embd=C, block_size=64, batch_size=8,
                          max_iters=40, eval_interval=1000, eval_iters=2, keep_every=10,
                          out_dir=os.path.join(root, f"run-L{L}-C{C}"))  # fmt: skip
        train(run, progress=False, log=lambda s: None)
        cfg = load_model(os.path.join(run.out_dir, "last.ckpt"))[0].cfg
        kept = len([n for n in os.listdir(run.out_dir) if n.startswith("ckpt-")])
        for study in (PathsStudy(seq=64, batch=4, seeds=(0, 1, 2)),
                      LesionStudy(seq=64, batch=4, seeds=(0, 1, 2)),
                      FlowStudy(seq=64, batch=4, seeds=(0, 1, 2))):  # fmt: skip
            estimate = study.cost(cfg, kept).seconds
            with _threads(None):  # the count the command would run on
                t0 = time.perf_counter()
                every_checkpoint(study, [run.out_dir])
                seconds = time.perf_counter() - t0
            out.append((f"{study.name} --every-checkpoint (L={L} C={C}, {kept} checkpoints)",
                        estimate, seconds))  # fmt: skip
    return out


def _robustness_cases(root: str, quick: bool) -> list[tuple[str, float, float]]:
    cases = [("experiment robustness --quick", RobustnessConfig.quick())]
    if not quick:
        cases.append(("robustness: 2 schemes, L=2,4, 100 steps",
                      RobustnessConfig.quick(schemes=("pre-ln", "rezero"), depths=(2, 4),
                                             max_iters=100)))  # fmt: skip
    out = []
    for name, cfg in cases:
        V = load_corpus(cfg.data, cfg.block_size).tokenizer.vocab_size
        estimate = cfg.seconds(V, 2)
        where = os.path.join(root, name.split(":")[0].replace(" ", "_"))
        t0 = time.perf_counter()
        run_cells(cfg, where, jobs=2, progress=False)
        out.append((name, estimate, time.perf_counter() - t0))
        shutil.rmtree(where)
    return out


def _dask_case(root: str) -> list[tuple[str, float, float]]:
    """``experiment robustness --quick`` through a Dask cluster of 2 one-thread worker
    processes on this machine, estimated as the command estimates it: on the worker threads
    its scheduler counts (:func:`~resgrad.lab.experiments.grid.parallelism`)."""
    from distributed import LocalCluster

    cfg = RobustnessConfig.quick()
    V = load_corpus(cfg.data, cfg.block_size).tokenizer.vocab_size
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, scheduler_port=0,
                      dashboard_address=None) as cluster:  # fmt: skip
        where = os.path.join(root, "dask")
        with connected("dask", cluster.scheduler_address, 10.0) as client:
            estimate = cfg.seconds(V, parallelism(2, client))
        t0 = time.perf_counter()
        run_cells(cfg, where, backend="dask", scheduler=cluster.scheduler_address,
                  progress=False)  # fmt: skip
        seconds = time.perf_counter() - t0
    return [("experiment robustness --quick, Dask: 2 workers", estimate, seconds)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the small cases only")
    ap.add_argument("--check", action="store_true", help="exit 1 if a ratio misses the goal")
    args = ap.parse_args(argv)
    blas = [i.get("architecture") for i in threadpool_info() if i["user_api"] == "blas"]
    print(f"CPU: {vector_width()}; BLAS kernel: {', '.join(map(str, blas)) or 'none found'}; "
          f"{os.cpu_count()} logical CPUs")  # fmt: skip
    with tempfile.TemporaryDirectory() as root:
        warm = RobustnessConfig.quick(schemes=("pre-ln",), doses=(0.0,), max_iters=20)
        run_cells(warm, os.path.join(root, "warm"), jobs=2, progress=False)  # numba's cache
        rows = _study_cases(root, args.quick) + _robustness_cases(root, args.quick)
        rows += _dask_case(root)
    print(f"{'case':<58} {'estimate':>9} {'measured':>9} {'ratio':>6}  within {GOAL}")
    bad = 0
    for name, est, got in rows:
        ratio = got / est
        ok = GOAL[0] <= ratio <= GOAL[1]
        bad += not ok
        print(f"{name:<58} {est:>8.2f}s {got:>8.2f}s {ratio:>6.2f}  {'yes' if ok else 'NO'}")
    return 1 if bad and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
