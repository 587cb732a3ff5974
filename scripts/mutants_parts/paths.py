"""Mutants of the gradient paths (src/resgrad/lab/paths.py, budget.py, pathruns.py; src/resgrad/cli/paths_cmds.py), the
plot's destination (src/resgrad/plots.py, src/resgrad/formats/atomic.py) and the --plot checks
of the other drawing commands (issue 27)."""

# ruff: noqa: E501  (exact source text, as scripts/mutants.py's table)

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from mutants import Mutant  # noqa: E402

LAB = ("tests/lab/test_paths.py",)
TRAINING = ("tests/lab/test_paths_training.py",)
CLI = ("tests/cli/test_cli_paths.py",)
CLI_TRAINING = ("tests/cli/test_cli_paths_training.py",)
ATOMIC = ("tests/formats/test_atomic.py",)
PLOTS = ("tests/test_plots.py",)
DESTINATIONS = ("tests/cli/test_cli_plot_destinations.py",)
P = "lab/paths.py"
CHAINS = "lab/pathchains.py"
BUDGET = "lab/budget.py"
FIGS = "lab/pathfigs.py"
RUNS = "lab/pathruns.py"
C = "cli/paths_cmds.py"
A = "formats/atomic.py"

MUTANTS = [
    # statistics: the figures the tables write
    Mutant("paths: the table's std of the share of norm with ddof=1", P,
           "sn[:, k].std()", "sn[:, k].std(ddof=1)", LAB, "statistics"),
    Mutant("paths: the table's std of the projection share with ddof=1", P,
           "sp[:, k].std()", "sp[:, k].std(ddof=1)", LAB, "statistics"),
    Mutant("paths: the table's std of ||part_k|| with ddof=1", P,
           "nm[:, k].std()", "nm[:, k].std(ddof=1)", LAB, "statistics"),
    Mutant("paths: the JSON's std over the seeds with ddof=1", C,
           "return a.mean(axis=0).tolist(), a.std(axis=0).tolist()",
           "return a.mean(axis=0).tolist(), a.std(axis=0, ddof=1).tolist()", CLI, "statistics"),
    Mutant("paths: Veit's std over the samples with ddof=1", P,
           "mean[j], std[j] = mags.mean(), mags.std()",
           "mean[j], std[j] = mags.mean(), mags.std(ddof=1)", LAB, "statistics"),
    Mutant("paths: across runs, the std over the runs with ddof=0", RUNS,
           "ddof = 1 if len(results) > 1 else 0", "ddof = 0", TRAINING, "statistics"),
    Mutant("paths: across runs, one run's std is NaN (ddof=1)", RUNS,
           "ddof = 1 if len(results) > 1 else 0", "ddof = 1", TRAINING, "statistics"),
    Mutant("paths: ties in the 90% range go to the highest k", P,
           "if hi < s.size and hi - lo < best[1] - best[0]:",
           "if hi < s.size and hi - lo <= best[1] - best[0]:", LAB, "statistics"),
    Mutant("paths: the 90% range misses a mass that rounds just under it", P,
           "target = mass * s.sum() * (1 - 1e-12)", "target = mass * s.sum()", LAB, "statistics"),
    Mutant("paths: the count of paths in the range leaves out its top end", P,
           "return sum(r.count for r in rows if lo <= r.k <= hi)",
           "return sum(r.count for r in rows if lo <= r.k < hi)", LAB, "statistics"),
    Mutant("paths: --every-checkpoint's 'paths in it' slices rows[lo:hi]", C,
           "inside = paths.paths_in_range(r.rows, r.range90)",
           "inside = sum(x.count for x in r.rows[lo:hi])", CLI_TRAINING, "statistics"),
    Mutant("paths: the table's 'of 2^n paths' leaves out the range's top end", C,
           "({paths.paths_in_range(rows, (lo, hi))} of",
           "({sum(r.count for r in rows[lo:hi])} of", CLI, "statistics"),
    Mutant("paths: Veit's random stream is shared across k (adding a k moves the others)", P,
           "        rng = np.random.default_rng([seed, k])  # its own stream: the other ks do not",
           "        rng = rng if j else np.random.default_rng([seed, k])  # its own stream: the other ks do not",
           LAB, "statistics"),
    Mutant("paths: Veit's stream is keyed by the k's position, not k", P,
           "rng = np.random.default_rng([seed, k])", "rng = np.random.default_rng([seed, j])",
           LAB, "ordering"),
    Mutant("paths: across runs, checkpoints are paired by position, not iteration", RUNS,
           "cs = [b[it] for b in by_run]",
           "cs = [list(b.values())[common.index(it)] for b in by_run]", TRAINING, "ordering"),
    Mutant("paths: mean k weights by the projection share", RUNS,
           "return float(sum(r.k * r.share_norm for r in self.rows))",
           "return float(sum(r.k * r.share_proj for r in self.rows))", TRAINING, "formula"),
    Mutant("paths: model_veit samples each batch with its window seed (new line)", P,
           "return veit_sample(chain, samples, sample_seed, tick=tick)",
           "return veit_sample(chain, samples, s, tick=tick)", LAB, "formula"),
    # refusal: runs, checkpoints and values that must not pass
    Mutant("paths: across runs only the depth is compared", RUNS,
           "        for field in RunModel._fields:\n",
           '        for field in ("depth",):\n', TRAINING, "refusal"),
    Mutant("paths: across runs the text's tokens and vocabulary are not compared", RUNS,
           "        for field in RunModel._fields:\n",
           "        for field in RunModel._fields[:4]:\n", TRAINING, "refusal"),
    Mutant("paths: across_runs compares nothing", RUNS,
           '    check_comparable([(os.path.dirname(r[0].path), r[0].model) for r in results], "run")\n',
           "", TRAINING, "refusal"),
    Mutant("paths: a run's checkpoints are not compared with its first", RUNS,
           '        check_comparable([first, (path, rm)], "checkpoint", "not one run")\n',
           "", TRAINING, "refusal"),
    Mutant("paths: plan_runs encodes the text before comparing vocabularies", RUNS,
           '        check_comparable([*named, (d, run_model(model.cfg, ckpt, None))], "run")\n',
           "", TRAINING, "refusal"),
    Mutant("paths: a vocabulary is described by its size alone", RUNS,
           'vocab = (f"{len(v)} characters {v!r}" if len(v) <= 40',
           'vocab = (f"{len(v)} characters" if len(v) <= 40', TRAINING, "refusal"),
    Mutant("paths: the text's tokens are described by their count alone", RUNS,
           'tokens = f"{len(ids):,} tokens, sha256 {_sha(ids.tobytes())}"',
           'tokens = f"{len(ids):,} tokens"', TRAINING, "refusal"),
    Mutant("paths: runs are compared only after their splits (plan_runs checks nothing)", RUNS,
           '        check_comparable([*named, (d, run_model(model.cfg, ckpt, None))], "run")\n'
           "        plans.append(RunPlan(d, kept, model.cfg, run_model(model.cfg, ckpt, tok.encode(text))))\n"
           '        check_comparable([(p.run_dir, p.model) for p in (plans[0], plans[-1])], "run")\n',
           "        plans.append(RunPlan(d, kept, model.cfg, run_model(model.cfg, ckpt, tok.encode(text))))\n",
           CLI_TRAINING, "refusal"),
    Mutant("paths: run/ and run count as two runs", C,
           "real = [os.path.realpath(d) for d in args.source]",
           "real = list(args.source)", CLI_TRAINING, "refusal"),
    Mutant("paths: --seq longer than the model passes to the library's message", C,
           "    if args.seq > m.block_size:\n        given",
           "    if False:\n        given", CLI, "refusal"),
    Mutant("paths: the default --seq is blamed as if typed", C,
           'given = "" if _common.typed(args.argv, ("--seq",)) else " (the default)"',
           'given = ""', CLI, "refusal"),
    Mutant("paths: the plot's destination is checked only for its extension", C,
           "        check_plot_path(args.plot)  # a bad extension or destination fails before any work",
           "        plot_format(args.plot)  # a bad extension or destination fails before any work",
           CLI, "refusal"),
    Mutant("paths: the lesson's work is not checked against the budget", C,
           "        _require_time(work, args, what, len(seeds))\n", "", CLI, "refusal"),
    Mutant("paths: --every-checkpoint is not checked against the budget", C,
           "    _require_time(work, args, what, chains)\n    return work\n",
           "    return work\n", CLI_TRAINING, "refusal"),
    # bounds: the estimates and limits
    Mutant("paths: the model's estimate forgets --veit", C,
           "work = budget.model_work(m, args.seq, args.batch, chains, veit)",
           "work = budget.model_work(m, args.seq, args.batch, chains)", CLI, "bounds"),
    Mutant("paths: Veit's cost counts one VJP per path, not k", BUDGET,
           "per_veit = samples * n * (n + 1) // 2", "per_veit = samples * n", LAB, "bounds"),
    Mutant("paths: a split without skips is costed as one with", BUDGET,
           "_work(n, cfg.variant != \"none\", vjp_s", "_work(n, True, vjp_s", LAB, "bounds"),
    Mutant("paths: --every-checkpoint costs one checkpoint per run", C,
           "chains = sum(len(p.kept) for p in plans) * len(seeds)",
           "chains = len(plans) * len(seeds)", CLI_TRAINING, "bounds"),
    Mutant("paths: Veit's magnitudes are left out of the memory estimate", C,
           "memory.require(memory.paths_bytes(m, args.seq, args.batch) + paths.veit_bytes(veit),",
           "memory.require(memory.paths_bytes(m, args.seq, args.batch),", CLI, "bounds"),
    Mutant("paths: work exactly at the budget is refused", BUDGET,
           "    if seconds > budget:\n        need", "    if seconds >= budget:\n        need", LAB, "bounds"),
    Mutant("paths: a --seq of exactly the model's positions is refused", C,
           "if args.seq > m.block_size:", "if args.seq >= m.block_size:", CLI, "bounds"),
    Mutant("paths: the split ticks one VJP a step", P,
           "tick(len(D))  # one branch VJP per key", "tick(1)  # one branch VJP per key",
           LAB, "bounds"),
    Mutant("paths: Veit ticks one VJP a sample", P,
           "            if tick is not None:\n                tick(k)\n",
           "            if tick is not None:\n                tick(1)\n", LAB, "bounds"),
    Mutant("paths: a short job shows a bar too", BUDGET,
           "disable = None if work.seconds > PROGRESS_AFTER_S else True",
           "disable = None", LAB, "bounds"),
    Mutant("paths: a long job's bar shows where stderr is no terminal", BUDGET,
           "disable = None if work.seconds > PROGRESS_AFTER_S else True",
           "disable = False if work.seconds > PROGRESS_AFTER_S else True", CLI, "bounds"),
    # ordering: what a closed stdout must not lose
    Mutant("paths: the plot is saved after the first line is printed", C,
           "    if args.plot:  # saved before anything is printed: a reader that leaves loses no plot\n"
           "        pathfigs.save_path_figure(args.plot, splits, veits, what)\n"
           "    if args.format == \"table\":\n"
           "        print(f\"{what}; seeds: {S}\" + (\" (mean ± std)\" if S > 1 else \"\")\n"
           "              + f\"; n = {splits[0].n} branches; at x_0\")  # fmt: skip\n",
           "    if args.format == \"table\":\n"
           "        print(f\"{what}; seeds: {S}\" + (\" (mean ± std)\" if S > 1 else \"\")\n"
           "              + f\"; n = {splits[0].n} branches; at x_0\")  # fmt: skip\n"
           "    if args.plot:\n"
           "        pathfigs.save_path_figure(args.plot, splits, veits, what)\n",
           CLI, "ordering"),
    # the destination: one check, each case its own message
    Mutant("atomic: a path under a file is called a missing directory", A,
           "        if not os.path.isdir(up):\n            raise NotADirectoryError",
           "        if False:\n            raise NotADirectoryError", ATOMIC, "refusal"),
    Mutant("atomic: writability read from the permission bits (root and /proc pass)", A,
           "    try:\n        fd, tmp = tempfile.mkstemp(prefix=f\"{_tmp_prefix(path)}{os.getpid()}-\", "
           "suffix=\".tmp\",\n                                   dir=directory)  # fmt: skip\n"
           "    except OSError:",
           "    try:\n        if not os.access(directory, os.W_OK):\n            raise OSError\n"
           "        return\n    except OSError:", ATOMIC, "refusal"),
    Mutant("atomic: the writability probe is left behind", A,
           "    os.close(fd)\n    os.unlink(tmp)\n", "    os.close(fd)\n", ATOMIC, "durability"),
    Mutant("atomic: check_destination lets a directory through", A,
           "    if os.path.isdir(path):\n        raise IsADirectoryError(f\"cannot write {path!r}: it is a "
           "directory; give a file name\")\n    if not os.path.isdir(directory):\n        up",
           "    if not os.path.isdir(directory):\n        up", ATOMIC, "refusal"),
    Mutant("plots: check_plot_path checks the extension only", "plots.py",
           "    fmt = plot_format(path)\n    check_destination(path)\n",
           "    fmt = plot_format(path)\n", PLOTS, "refusal"),
    Mutant("flow: --plot's destination is not checked before the work", "cli/flow_cmds.py",
           "        check_plot_path(args.plot)  # a bad extension or destination fails before any work\n"
           "    if args.from_pretrained",
           "        pass\n    if args.from_pretrained", DESTINATIONS, "refusal"),
    Mutant("sweep: --plot's destination is left to the sweep's own check", "cli/flow_cmds.py",
           "    if args.plot:\n        check_plot_path(args.plot)  # a bad extension or destination "
           "fails before any work\n    cfg = SweepConfig(",
           "    cfg = SweepConfig(", DESTINATIONS, "refusal"),
    Mutant("depth: --plot's destination is not checked before the work", "cli/lesson_cmds.py",
           "        check_plot_path(args.plot)  # a bad extension or destination fails before any work\n",
           "", DESTINATIONS, "refusal"),
    # durability: a killed write's temporaries
    Mutant("atomic: the next write leaves a killed write's temporary", A,
           "    remove_dead_temporaries(path)  # a killed writer's, of this destination only\n",
           "", ATOMIC, "durability"),
    Mutant("atomic: temporaries are named without their writer's pid", A,
           "    try:  # the pid in the name: the next write knows when its writer is dead\n"
           "        fd, tmp = tempfile.mkstemp(prefix=f\"{_tmp_prefix(path)}{os.getpid()}-\",",
           "    try:  # the pid in the name: the next write knows when its writer is dead\n"
           "        fd, tmp = tempfile.mkstemp(prefix=_tmp_prefix(path),", ATOMIC, "durability"),
    Mutant("atomic: a live writer's temporary is removed as dead", A,
           "if m is None or _alive(int(m[\"pid\"])):  # not ours, or its writer still runs",
           "if m is None:  # not ours, or its writer still runs", ATOMIC, "concurrency"),
    Mutant("atomic: another destination's temporaries are removed too", A,
           "return re.compile(re.escape(_tmp_prefix(path)) + r\"(?P<pid>[0-9]+)-[^.]+\\.tmp\")",
           "return re.compile(r\"\\..*\\.(?P<pid>[0-9]+)-[^.]+\\.tmp\")", ATOMIC, "durability"),
    Mutant("atomic: a name that only starts like a temporary is removed", A,
           "        m = pattern.fullmatch(entry)\n", "        m = pattern.match(entry)\n",
           ATOMIC, "durability"),
    Mutant("atomic: a number too big to be a pid crashes the write", A,
           "    except (PermissionError, OverflowError):  # somebody else's process; no pid at all",
           "    except PermissionError:  # somebody else's process; no pid at all",
           ATOMIC, "durability"),
]  # fmt: skip
