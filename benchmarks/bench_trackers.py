"""What logging to TensorBoard costs a training step, on nanoGPT's CPU recipe.

Two copies of the recipe's model (same seed, same batches) step side by side in one
process, alternating blocks of ``--block`` steps, both as ``resgrad train`` runs them
(the batch as shards on threads, the per-layer dynamics recorded and appended to
``dynamics.bin``, the warning monitor). The second also logs what ``resgrad train
--log-to tensorboard`` logs: every step's scalars (4 + 7L values, one event), and every
``--hist-every`` steps (default 100, the CLI's) the histograms of every parameter and
its unclipped gradient (a copy of the gradients taken before clipping). Printed:

- side by side: the mean ms per step of each copy over all its steps (the mean, not the
  median, so that the histogram steps count at their share) and the difference in
  percent of the plain step;
- measured directly: the time spent in the logging calls themselves, per step, in
  percent of the plain step (the side-by-side difference is this plus noise).

The issue's target is 3% or less.

    python benchmarks/bench_trackers.py [--steps 300] [--block 5] [--hist-every 100]
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_trackers.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from threadpoolctl import threadpool_info

from resgrad.perf.bench import recipe_copies
from resgrad.perf.heap import keep_freed_memory
from resgrad.train.dynamics import DynamicsMonitor, DynamicsWriter, make_record
from resgrad.train.loop import train_step
from resgrad.train.shards import Shards
from resgrad.train.trackers import TensorBoard, param_histograms, step_scalars


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300, help="timed steps of each copy")
    ap.add_argument("--block", type=int, default=5, help="steps of one copy in a row")
    ap.add_argument("--hist-every", type=int, default=100, help="steps between histograms")
    args = ap.parse_args()
    keep_freed_memory()  # as `resgrad train` does

    cfg, models, opts, batches = recipe_copies(2)  # same seed, same batches
    L = cfg.n_layer
    times: dict[bool, list[float]] = {False: [], True: []}
    logging = []  # seconds in the logging calls, per logged step
    shards = Shards(cfg.shards)
    with tempfile.TemporaryDirectory() as tmp:
        for k in "ab":
            os.makedirs(f"{tmp}/{k}")
        writers = [DynamicsWriter(f"{tmp}/{k}", L) for k in "ab"]
        tb = TensorBoard(f"{tmp}/tb", L)
        monitor = DynamicsMonitor(lambda s: None)
        done = [0, 0]  # steps taken by each copy: a copy's histograms at its own multiples
        warm = args.block  # the first block of each copy is not timed
        while min(len(t) for t in times.values()) < args.steps + warm:
            for logged in (False, True):
                model, opt = models[logged], opts[logged]
                for _ in range(args.block):
                    it = done[logged]
                    x, y = batches[it % len(batches)]
                    hist = logged and args.hist_every > 0 and it % args.hist_every == 0
                    t0 = time.perf_counter()
                    weights = param_histograms("weights", model.params) if hist else {}
                    t1 = time.perf_counter()
                    s = train_step(model, opt, x, y, 1e-3, 1.0, None, it, dynamics=True,
                                   shards=shards, keep_grads=hist)  # fmt: skip
                    rec = make_record(L, it, s.loss, 1e-3, s.grad_norm, s.clipped, s.norms,
                                      s.update_ratio, s.stream_norms, s.act_rms)  # fmt: skip
                    writers[logged].append(rec)
                    monitor.observe(rec)
                    t3 = time.perf_counter()
                    if logged:
                        tb.scalars(it, step_scalars(rec))
                        if hist:
                            tb.histograms(it, {**weights, **param_histograms("gradients",
                                                                             s.grads)})  # fmt: skip
                    t4 = time.perf_counter()
                    times[logged].append(t4 - t0)
                    if logged and it >= warm:
                        logging.append((t1 - t0) + (t4 - t3))
                    done[logged] += 1
        tb.close()
        for w in writers:
            w.close()
    shards.close()
    plain, logged = (1e3 * statistics.fmean(times[k][warm:]) for k in (False, True))
    direct = 1e3 * statistics.fmean(logging)
    blas = [f"{i['internal_api']} {i.get('architecture')}" for i in threadpool_info()]
    print(f"cpu-recipe (L={L} C={cfg.n_embd} T={cfg.block_size} B={cfg.batch_size}, "
          f"{cfg.shards} shards), {args.steps} steps each, alternating blocks of {args.block}, "
          f"histograms every {args.hist_every} steps; BLAS: {', '.join(blas)}")  # fmt: skip
    print(f"side by side: plain step {plain:.2f} ms, logging to TensorBoard {logged:.2f} ms: "
          f"{100 * (logged - plain) / plain:+.1f}% (target <= 3%)")  # fmt: skip
    print(f"measured directly: the logging calls take {direct:.3f} ms per step, "
          f"{100 * direct / plain:.2f}% of the plain step (the gradients' copy on histogram "
          "steps is inside the step, in the side-by-side figure only)")  # fmt: skip


if __name__ == "__main__":
    main()
