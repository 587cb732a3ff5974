"""What recording per-layer dynamics costs a training step, on nanoGPT's CPU recipe.

Two copies of the recipe's model (same seed, same batches) step side by side in
one process, alternating blocks of ``--block`` steps: one plain
(``train_step(..., dynamics=False)``), one as ``resgrad train`` runs it (update
ratios from a copy of every block's weights, activation RMS, the binary record
appended to a file, the warning monitor). Prints the median ms of each and the
overhead in percent of the plain step; the target is 5% or less.

    python benchmarks/bench_dynamics.py [--steps 60] [--block 5]
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_dynamics.py
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from threadpoolctl import threadpool_info

from resgrad.perf.bench import recipe_copies
from resgrad.perf.heap import keep_freed_memory
from resgrad.train.dynamics import DynamicsMonitor, DynamicsWriter, make_record
from resgrad.train.loop import train_step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60, help="timed steps of each kind")
    ap.add_argument("--block", type=int, default=5, help="steps of one kind in a row")
    args = ap.parse_args()
    keep_freed_memory()  # as `resgrad train` does

    cfg, models, opts, batches = recipe_copies(2)  # same seed, same batches
    L = cfg.n_layer
    times: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as run_dir, DynamicsWriter(run_dir, L) as writer:
        monitor = DynamicsMonitor(lambda s: None)
        it = 0
        while min(len(t) for t in times.values()) < args.steps + args.block:
            for record in (False, True):
                model, opt = models[record], opts[record]
                for _ in range(args.block):
                    x, y = batches[it % len(batches)]
                    t0 = time.perf_counter()
                    s = train_step(model, opt, x, y, 1e-3, 1.0, None, it, dynamics=record)
                    if record:
                        rec = make_record(L, it, s.loss, 1e-3, s.grad_norm, s.clipped, s.norms,
                                          s.update_ratio, s.stream_norms, s.act_rms)  # fmt: skip
                        writer.append(rec)
                        monitor.observe(rec)
                    times[record].append(time.perf_counter() - t0)
                it += 1
    plain, dyn = (1e3 * statistics.median(times[k][args.block :]) for k in (False, True))
    blas = [f"{i['internal_api']} {i.get('architecture')}" for i in threadpool_info()]
    print(f"cpu-recipe (L={L} C={cfg.n_embd} T={cfg.block_size} B={cfg.batch_size}), "
          f"{args.steps} steps each, alternating blocks of {args.block}; "
          f"BLAS: {', '.join(blas)}")  # fmt: skip
    print(f"plain step {plain:.2f} ms, with dynamics {dyn:.2f} ms: "
          f"overhead {100 * (dyn - plain) / plain:+.1f}% (target <= 5%)")  # fmt: skip


if __name__ == "__main__":
    main()
