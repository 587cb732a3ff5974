"""The commands' default thread count against every ``--threads``, quiet and beside busy processes.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_threads.py
    python benchmarks/bench_threads.py --loads 0,2 --repeat 5
    python benchmarks/bench_threads.py --quick          # a smoke run: tiny sizes, one repeat

For each load (``--loads``: 0, 1 and 2 busy processes, each a Python loop this script
starts and stops), each command is run as its own ``resgrad`` process, by default (no
``--threads``: resgrad.perf.threads reads the load as it starts) and with ``--threads N``
for N = 1 .. the usable cores, the settings alternating, ``--repeat`` rounds (the whole
process's wall time, its start included: what a user waits). A setting more than 1.5x
slower than the fastest in the first round is not timed again: it cannot be the best.
The table gives, per command, the median of the default, the best setting and its
median, and default / best (the goal: 1.10 at most); beside it, the same ratio of the
fastest runs, less sensitive to the scheduler's luck under load.

The commands, small but as a user types them: ``train`` (nanoGPT's CPU recipe, 15
steps, an evaluation and a checkpoint), ``sample`` (500 tokens from a run this script
trains first), ``flow`` (three schemes, 24 blocks), ``paths`` and ``lesion`` (that run,
their defaults).

Then, on the quiet machine, a load that arrives mid-run (``--mid-load``: that many busy
processes, 1 by default; 0: not run): a longer ``train`` (the CPU recipe, 500 steps, some
30 s on 2 cores) is started alone and the busy processes start 8 s into it, by default
(which reads the load again as it trains: resgrad.perf.threads.ThreadFollower) and with
each ``--threads N``, timed and pruned as above. The goal is the same: default / best
1.10 at most.

Beside them, one training step of the cpu-recipe config under the same load: resgrad's
trainer step (:func:`resgrad.perf.bench.resgrad_stepper`) with the thread count
``resgrad train`` would pick now, and PyTorch's (``benchmarks/bench_train_step.py``'s
TorchWorker, a process of its own) with PyTorch's own default thread count; the steps
alternate in blocks of 5, each after a pause (resgrad.perf.bench.settle). PyTorch is
optional.

"others" is the CPU that processes outside this benchmark used while its commands ran,
in cores (/proc/stat's busy time less this process's and its children's): the machine
was quiet where it reads near 0. The busy processes end with the script on every path
(they also end themselves when it is killed: each watches its parent).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from threadpoolctl import threadpool_limits

from resgrad.perf.bench import BENCH_CONFIGS, blas_info, resgrad_stepper, settle, time_steps
from resgrad.perf.heap import keep_freed_memory
from resgrad.perf.threads import load_aware_threads, usable_cores

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench_train_step, beside
import bench_train_step  # noqa: E402  (its TorchWorker: PyTorch's step in its own process)

# a busy process: a Python loop that ends once its parent, the pid it is given, is gone
# (the pid is passed, not read at its start: a parent killed before then would be missed)
BUSY = "import os, sys\nwhile os.getppid() == int(sys.argv[1]):\n    pass\n"
BLOCK = 5  # training steps of one framework before switching to the other
SLOW = 1.5  # a setting this much slower than the best in round one is timed once
COMMANDS = ("train", "sample", "flow", "paths", "lesion")


@dataclass(frozen=True)
class Sizes:
    """What each command does: the full run's, or ``--quick``'s."""

    model: tuple[str, ...]  # the run's shape flags (empty: nanoGPT's CPU recipe)
    run_iters: int  # steps of the run that sample, paths and lesion read
    train_iters: int  # steps of the timed train
    eval_iters: int
    tokens: int  # sample's --num-tokens
    flow: tuple[str, ...]
    paths: tuple[str, ...]
    lesion: tuple[str, ...]
    steps: int  # timed training steps per framework and load
    repeat: int
    mid_iters: int  # steps of the train a load arrives in the middle of
    mid_delay: float  # seconds into that train when the load arrives


FULL = Sizes(
    model=(), run_iters=40, train_iters=15, eval_iters=4, tokens=500,
    flow=("--variant", "pre-ln,post-ln,none", "--depth", "24"), paths=(), lesion=(),
    steps=20, repeat=4, mid_iters=500, mid_delay=8.0,
)  # fmt: skip
QUICK = Sizes(
    model=("--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "8",
           "--batch-size", "4"),
    run_iters=2, train_iters=2, eval_iters=2, tokens=20,
    flow=("--depth", "2", "--width", "8", "--heads", "2", "--seq", "4", "--batch", "2"),
    paths=("--seq", "8", "--batch", "2", "--seeds", "1"),
    lesion=("--seq", "8", "--batch", "2", "--seeds", "1", "--what", "block"),
    steps=2, repeat=1, mid_iters=200, mid_delay=1.0,
)  # fmt: skip


def resgrad_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "resgrad", *args]


def run_quietly(argv: list[str]) -> float:
    """Wall seconds of ``argv`` run to its end, its output discarded; exits on a failure."""
    t0 = time.perf_counter()
    p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr[-2000:]}")
    return seconds


def loaded_midway(load: int, delay: float) -> Callable[[list[str]], float]:
    """A runner like :func:`run_quietly` whose command gets ``load`` busy processes beside
    it from ``delay`` seconds after its start to its end (none if it ends before)."""

    def run(argv: list[str]) -> float:
        with tempfile.TemporaryFile() as err:
            t0 = time.perf_counter()
            p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
            try:
                try:
                    p.wait(timeout=delay)
                except subprocess.TimeoutExpired:  # still running: the load arrives
                    with busy_processes(load):
                        p.wait()
            finally:
                if p.poll() is None:  # interrupted: the command ends with the benchmark
                    p.kill()
                    p.wait()
            seconds = time.perf_counter() - t0
            if p.returncode != 0:
                err.seek(0)
                tail = err.read()[-2000:].decode(errors="replace")
                raise SystemExit(f"{' '.join(argv)} failed ({p.returncode}): {tail}")
        return seconds

    return run


@contextlib.contextmanager
def busy_processes(n: int) -> Iterator[list[subprocess.Popen]]:
    """``n`` processes that keep a core each busy, stopped at the end of the block."""
    procs = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", BUSY, str(os.getpid())]))
        time.sleep(0.5)  # running, and seen so by the scheduler's counters
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def cpu_seconds(busy: list[subprocess.Popen]) -> tuple[float, float]:
    """(busy CPU seconds of the whole machine, of this process, its waited children and
    the ``busy`` processes, still running); (0, 0) off Linux."""
    t = os.times()
    mine = t.user + t.system + t.children_user + t.children_system
    hz = os.sysconf("SC_CLK_TCK")
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        for p in busy:
            with open(f"/proc/{p.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after the command's name
            mine += (int(fields[11]) + int(fields[12])) / hz  # utime, stime
    except OSError:  # not Linux: no machine-wide figure
        return 0.0, 0.0
    return (sum(v[:8]) - v[3] - v[4]) / hz, mine  # all but idle and iowait


def commands(sizes: Sizes, run_dir: str, scratch: str) -> dict[str, Callable[[], list[str]]]:
    """command -> a function giving its argv afresh (train writes a new directory each time)."""
    counter = iter(range(10**9))

    def train() -> list[str]:
        out = os.path.join(scratch, f"train-{next(counter)}")
        it = str(sizes.train_iters)
        return ["train", *sizes.model, "--max-iters", it, "--eval-interval", it,
                "--eval-iters", str(sizes.eval_iters), "--out-dir", out]  # fmt: skip

    return {
        "train": train,
        "sample": lambda: ["sample", "--out-dir", run_dir, "--num-tokens", str(sizes.tokens)],
        "flow": lambda: ["flow", *sizes.flow],
        "paths": lambda: ["paths", run_dir, *sizes.paths],
        "lesion": lambda: ["lesion", run_dir, *sizes.lesion],
    }


def time_commands(
    cmds: dict, settings: list[int | None], repeat: int, scratch: str, run=run_quietly
) -> dict:
    """{command: {setting: [seconds, ...]}}, the settings alternating (module docstring),
    each command timed by ``run``; also {"_policy": [...]}: the threads load_aware_threads
    gave here before each default."""
    times = {name: {s: [] for s in settings} for name in cmds}
    policy = []
    for r in range(repeat):
        for name, argv in cmds.items():
            order = settings[r % len(settings) :] + settings[: r % len(settings)]
            for s in order:
                done = times[name][s]
                best = min((min(v) for v in times[name].values() if v), default=None)
                if r > 0 and s is not None and best is not None and min(done) > SLOW * best:
                    continue  # far off the best in round one: cannot be the best
                settle()  # the last command's threads are gone
                if s is None:
                    policy.append(load_aware_threads())
                flag = [] if s is None else ["--threads", str(s)]
                done.append(run(resgrad_cmd(*argv(), *flag)))
                shutil.rmtree(scratch)  # train's run directories
                os.makedirs(scratch)
    return {**times, "_policy": policy}


def step_figures(sizes: Sizes, worker) -> dict:
    """Median ms of one cpu-recipe training step: resgrad's with the default threads,
    PyTorch's in its worker with its own; under whatever load is running now."""
    cfg = BENCH_CONFIGS["cpu-recipe"]
    settle()
    n = load_aware_threads()  # what `resgrad train` would read now
    out = {"resgrad_threads": n}
    with threadpool_limits(n), resgrad_stepper(cfg) as (_, step):  # Shards reads n
        step()
        step()
        times = {"resgrad": [], "torch": []}
        for done in range(0, sizes.steps, BLOCK):
            k = min(BLOCK, sizes.steps - done)
            settle()
            times["resgrad"] += time_steps(step, k, warmup=1)
            if worker is not None:
                settle()
                times["torch"] += worker.time_steps(k, warmup=1)
    for name, t in times.items():
        if t:
            out[name] = 1e3 * statistics.median(t)
    return out


def torch_default_threads() -> int | None:
    """PyTorch's own thread count on this machine (asked in a process of its own); None
    where it is not installed."""
    if importlib.util.find_spec("torch") is None:
        return None
    code = "import torch; print(torch.get_num_threads())"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(p.stdout.split()[-1])


def summarize(times: dict) -> dict:
    """{command: {"default": s, "best": N, "best_s": s, "ratio": default / best}}: medians."""
    out = {}
    for name, by in times.items():
        if name.startswith("_"):
            continue
        med = {s: statistics.median(v) for s, v in by.items() if v}
        explicit = {s: m for s, m in med.items() if s is not None}
        best = min(explicit, key=explicit.get)
        fastest = min(min(v) for s, v in by.items() if s is not None)
        out[name] = {"default": med[None], "best": best, "best_s": explicit[best],
                     "ratio": med[None] / explicit[best], "ratio_min": min(by[None]) / fastest,
                     "all": {("default" if s is None else f"--threads {s}"): (m, len(by[s]))
                             for s, m in med.items()},
                     "seconds": {("default" if s is None else str(s)): v
                                 for s, v in by.items()}}  # fmt: skip
    return out


def format_load(load: int, summary: dict, policy: list[int], others: float, step: dict,
                t_threads: int | None) -> str:  # fmt: skip
    """One load's table (module docstring)."""
    read = ", ".join(f"{n} thread(s) x{policy.count(n)}" for n in sorted(set(policy)))
    lines = [
        f"\n== load: {load} busy process(es); others {others:.2f} cores; "
        f"the default read here before its runs: {read}",
        f"  {'command':8} {'default s':>10} {'best':>12} {'best s':>8} {'default/best':>13}"
        f" {'(fastest runs)':>14}   every setting: median s (runs)",
    ]
    for name, r in summary.items():
        every = ", ".join(f"{k} {m:.2f} ({n})" for k, (m, n) in r["all"].items())
        lines.append(
            f"  {name:8} {r['default']:10.2f} {'--threads ' + str(r['best']):>12} "
            f"{r['best_s']:8.2f} {r['ratio']:12.2f}x {r['ratio_min']:13.2f}x   {every}"
        )
    n = step["resgrad_threads"]
    line = f"  training step, cpu-recipe: resgrad {step['resgrad']:.1f} ms ({n} thread(s), default)"
    if "torch" in step:
        speedup = step["torch"] / step["resgrad"]
        line += (f", PyTorch {step['torch']:.1f} ms ({t_threads} threads, its default): "
                 f"resgrad / PyTorch throughput {speedup:.2f}x")  # fmt: skip
    lines.append(line)
    return "\n".join(lines)


def format_midload(load: int, sizes: Sizes, summary: dict, policy: list[int]) -> str:
    """The mid-run load's table (module docstring)."""
    (r,) = summary.values()
    every = ", ".join(f"{k} {m:.2f} ({n})" for k, (m, n) in r["all"].items())
    read = ", ".join(f"{n} thread(s) x{policy.count(n)}" for n in sorted(set(policy)))
    return (
        f"\n== load arriving mid-run: {load} busy process(es) from {sizes.mid_delay:g} s into "
        f"a {sizes.mid_iters}-step train; the default read as it started: {read}\n"
        f"  default {r['default']:.2f} s, best --threads {r['best']} {r['best_s']:.2f} s: "
        f"default/best {r['ratio']:.2f}x ({r['ratio_min']:.2f}x fastest runs; the goal: "
        f"1.10x at most)\n  every setting: median s (runs): {every}"
    )


def format_summary(rows: list[dict]) -> str:
    """default / best for every command and load, and the training step's speedup."""
    loads = [r["load"] for r in rows]
    head = "".join(f"{'load ' + str(n):>16}" for n in loads)
    lines = [f"\n== default / best --threads, medians (fastest runs); the goal: 1.10x at most\n"
             f"  {'command':8}{head}"]  # fmt: skip
    for name in rows[0]["commands"]:
        got = [r["commands"][name] for r in rows]
        cells = "".join(f"{g['ratio']:8.2f}x ({g['ratio_min']:.2f})" for g in got)
        lines.append(f"  {name:8}{cells}")
    if all("torch" in r["step"] for r in rows):
        cells = "".join(f"{r['step']['torch'] / r['step']['resgrad']:15.2f}x" for r in rows)
        lines.append(f"  {'step':8}{cells}   (resgrad / PyTorch throughput, both by default)")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loads", default="0,1,2", help="busy processes, comma-separated (0,1,2)")
    p.add_argument("--repeat", type=int, default=None, help="rounds of every setting (4)")
    p.add_argument("--quick", action="store_true", help="a smoke run: tiny sizes, one round")
    p.add_argument(
        "--commands",
        default=",".join(COMMANDS),
        help=f"which, comma-separated (default: {','.join(COMMANDS)})",
    )
    p.add_argument(
        "--mid-load",
        type=int,
        default=1,
        help="busy processes that arrive during a longer train, on the quiet machine "
        "(default: 1; 0, or no train in --commands: that case is not run)",
    )
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = p.parse_args()
    try:
        loads = [int(x) for x in args.loads.split(",")]
    except ValueError:
        p.error(f"--loads: expected comma-separated integers, got {args.loads!r}")
    if any(n < 0 for n in loads):
        p.error(f"--loads: expected counts >= 0, got {args.loads!r}")
    if args.mid_load < 0:
        p.error(f"--mid-load: expected a count >= 0, got {args.mid_load!r}")
    names = args.commands.split(",")
    if not set(names) <= set(COMMANDS):
        p.error(f"--commands: expected some of {','.join(COMMANDS)}, got {args.commands!r}")
    sizes = QUICK if args.quick else FULL
    repeat = args.repeat or sizes.repeat
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # ends in the finally blocks
    keep_freed_memory()  # as `resgrad train` does (resgrad.perf.heap)
    cores = usable_cores()
    t_threads = torch_default_threads()
    env = {k: os.environ.get(k, "(unset)") for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    print(f"BLAS (threadpoolctl): {json.dumps(blas_info())}")
    print(f"environment: {env}; cpus: {os.cpu_count()}, usable: {cores}")
    print(f"PyTorch: {'not installed' if t_threads is None else f'{t_threads} threads'}")
    print(f"rounds: {repeat}{'; --quick: a smoke run, not a measurement' if args.quick else ''}")
    settings = [None, *range(1, cores + 1)]  # None: the default
    rows = []
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-threads-"))
        run_dir, scratch = os.path.join(tmp, "run"), os.path.join(tmp, "scratch")
        os.makedirs(scratch)
        it = str(sizes.run_iters)
        run_quietly(resgrad_cmd("train", *sizes.model, "--max-iters", it, "--eval-interval", it,
                                "--eval-iters", "2", "--out-dir", run_dir))  # fmt: skip
        worker = None
        if t_threads is not None:  # one PyTorch process for every load, idle between blocks
            worker = stack.enter_context(bench_train_step.TorchWorker("cpu-recipe", t_threads))
        cmds = {name: argv for name, argv in commands(sizes, run_dir, scratch).items()
                if name in names}  # fmt: skip
        for load in loads:
            with busy_processes(load) as busy:
                all0, mine0 = cpu_seconds(busy)
                t0 = time.perf_counter()
                times = time_commands(cmds, settings, repeat, scratch)
                wall = time.perf_counter() - t0
                all1, mine1 = cpu_seconds(busy)
                step = step_figures(sizes, worker)
            others = max(0.0, ((all1 - all0) - (mine1 - mine0)) / wall)  # cores
            summary = summarize(times)
            print(format_load(load, summary, times["_policy"], others, step, t_threads),
                  flush=True)  # fmt: skip
            rows.append({"load": load, "others_cores": others, "default_read": times["_policy"],
                         "commands": summary, "step": step})  # fmt: skip
        mid = None
        if args.mid_load and "train" in names:
            it = str(sizes.mid_iters)
            cmd = {"train": lambda: ["train", *sizes.model, "--max-iters", it, "--eval-interval",
                                     it, "--eval-iters", str(sizes.eval_iters), "--out-dir",
                                     os.path.join(scratch, "mid")]}  # fmt: skip
            run = loaded_midway(args.mid_load, sizes.mid_delay)
            times = time_commands(cmd, settings, repeat, scratch, run=run)
            mid = {"load": args.mid_load, "delay_s": sizes.mid_delay, "iters": sizes.mid_iters,
                   "default_read": times["_policy"], **summarize(times)["train"]}  # fmt: skip
            print(format_midload(args.mid_load, sizes, summarize(times), times["_policy"]))
    print(format_summary(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"blas": blas_info(), "env": env, "cores": cores, "rows": rows,
                       "mid_load": mid}, f, indent=2)  # fmt: skip


if __name__ == "__main__":
    main()
