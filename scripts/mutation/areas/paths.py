"""Mutants of the gradient paths (src/resgrad/lab/paths.py, budget.py, pathruns.py; src/resgrad/cli/paths_cmds.py), the
plot's destination (src/resgrad/plots.py, src/resgrad/formats/atomic.py) and the --plot checks
of the other drawing commands (issue 27)."""

# ruff: noqa: E501  (each mutant quotes its source text verbatim)

from mutation import ATOMIC, PATHS, PLOTS, Mutant

LAB = ("tests/lab/test_paths.py",)
TRAINING = ("tests/lab/test_paths_training.py",)
CLI = ("tests/cli/test_cli_paths.py",)
CLI_TRAINING = ("tests/cli/test_cli_paths_training.py",)
DESTINATIONS = ("tests/cli/test_cli_plot_destinations.py",)
P = "lab/paths/exact.py"
V = "lab/paths/veit.py"
CHAINS = "lab/paths/chains.py"
BUDGET = "lab/study/budget.py"
FIGS = "lab/paths/figs.py"
RUNS = "lab/paths/runs.py"
C = "cli/paths_cmds.py"
A = "formats/atomic.py"

MUTANTS = [
    # -- lab/paths/exact.py and lab/paths/veit.py
    Mutant("paths: post-ln's branch VJP skips the trunk's LayerNorm", 'lab/paths/exact.py',
           "dx, gb = s.branch(t)  # the branch's VJP ...",
           "dx, gb = s.branch(d)  # the branch's VJP ...", PATHS, 'formula'),
    Mutant("paths: branch weights take the key after the branch", 'lab/paths/exact.py',
           'add_params(j, key, {**g, **gb})  # parameters in the branch: the entering key',
           'add_params(j, up, {**g, **gb})  # parameters in the branch: the entering key', PATHS, 'ordering'),
    Mutant("paths: ln-scaling's branch VJP misses its factor s = l^-p", 'lab/paths/chains.py',
           'dh = dh * s  # (B,T,C) 1b) h = s ln(x)',
           'dh = dh  # (B,T,C) 1b) h = s ln(x)', PATHS, 'formula'),
    Mutant('paths: the tied wte loses the LM head\'s part (k = 0)', 'lab/paths/chains.py',
           'top: dict[str, Any] = {"wte": dwte_head}',
           'top: dict[str, Any] = {}', PATHS, 'formula'),
    Mutant('paths: share of norm over ||dL/dx_i||, not the parts\' sum', 'lab/paths/exact.py',
           'total = self.norms.sum(axis=1, keepdims=True)  # (L + 1, 1)',
           'total = self.full_norms[:, None]  # (L + 1, 1)', PATHS, 'statistics'),
    Mutant('paths: projection shares over ||g||, not ||g||^2', 'lab/paths/exact.py',
           'sq = np.square(self.full_norms)[:, None]  # (L + 1, 1)',
           'sq = self.full_norms[:, None]  # (L + 1, 1)', PATHS, 'statistics'),
    Mutant('paths: the 90% range\'s cumulative sum lacks its leading 0', 'lab/paths/exact.py',
           'c = np.concatenate([[0.0], np.cumsum(s)])  # (K + 1,)',
           'c = np.cumsum(s)  # (K + 1,)', PATHS, 'statistics'),
    Mutant('paths: the figure draws the top boundary x_L, not x_0', 'lab/paths/figs.py',
           'norms0 = np.array([s.norms[0] for s in splits])  # (S, K) ||part_k|| at x_0',
           'norms0 = np.array([s.norms[-1] for s in splits])  # (S, K) ||part_k|| at x_0', PATHS, 'records'),
    # statistics: the figures the tables write
    Mutant("paths: the table's std of the share of norm with ddof=1", P,
           "sn[:, k].std()", "sn[:, k].std(ddof=1)", LAB, "statistics"),
    Mutant("paths: the table's std of the projection share with ddof=1", P,
           "sp[:, k].std()", "sp[:, k].std(ddof=1)", LAB, "statistics"),
    Mutant("paths: the table's std of ||part_k|| with ddof=1", P,
           "nm[:, k].std()", "nm[:, k].std(ddof=1)", LAB, "statistics"),
    Mutant("paths: Veit's std over the samples with ddof=1", V,
           "mean[j], std[j] = mags.mean(), mags.std()",
           "mean[j], std[j] = mags.mean(), mags.std(ddof=1)", LAB, "statistics"),
    Mutant("paths: across runs, the std over the runs with ddof=0", "lab/paths/runs.py",
           "ddof = 1 if len(results) > 1 else 0", "ddof = 0", TRAINING, "statistics"),
    Mutant("paths: across runs, one run's std is NaN (ddof=1)", "lab/paths/runs.py",
           "ddof = 1 if len(results) > 1 else 0", "ddof = 1", TRAINING, "statistics"),
    Mutant("paths: the 90% range misses a mass that rounds just under it", P,
           "target = mass * s.sum() * (1 - 1e-12)", "target = mass * s.sum()", LAB, "statistics"),
    Mutant("paths: Veit's random stream is shared across k (adding a k moves the others)", V,
           "        rng = np.random.default_rng([seed, k])  # its own stream: the other ks do not",
           "        rng = rng if j else np.random.default_rng([seed, k])  # its own stream: the other ks do not",
           LAB, "statistics"),
    Mutant("paths: Veit's stream is keyed by the k's position, not k", V,
           "rng = np.random.default_rng([seed, k])", "rng = np.random.default_rng([seed, j])",
           LAB, "ordering"),
    Mutant("paths: mean k weights by the projection share", "lab/paths/runs.py",
           "return float(sum(r.k * r.share_norm for r in self.rows))",
           "return float(sum(r.k * r.share_proj for r in self.rows))", TRAINING, "formula"),
    Mutant("paths: model_veit samples each batch with its window seed (new line)", V,
           "return veit_sample(chain, samples, sample_seed, tick=tick)",
           "return veit_sample(chain, samples, s, tick=tick)", LAB, "formula"),
    # refusal: runs, checkpoints and values that must not pass
    Mutant("paths: across runs only the depth is compared", "lab/study/runs.py",
           "        for field in RunModel._fields:\n",
           '        for field in ("depth",):\n', TRAINING, "refusal"),
    Mutant("paths: across runs the text's tokens and vocabulary are not compared", "lab/study/runs.py",
           "        for field in RunModel._fields:\n",
           "        for field in RunModel._fields[:4]:\n", TRAINING, "refusal"),
    Mutant("paths: plan_runs encodes the text before comparing vocabularies", "lab/study/runs.py",
           '        check_comparable([*named, (d, run_model(model.cfg, ckpt, None))], "run")\n',
           "", TRAINING, "refusal"),
    Mutant("paths: a vocabulary is described by its size alone", "lab/study/runs.py",
           'vocab = (f"{len(v)} characters {v!r}" if len(v) <= 40',
           'vocab = (f"{len(v)} characters" if len(v) <= 40', TRAINING, "refusal"),
    Mutant("paths: the text's tokens are described by their count alone", "lab/study/runs.py",
           'tokens = f"{len(ids):,} tokens, sha256 {_sha(ids.tobytes())}"',
           'tokens = f"{len(ids):,} tokens"', TRAINING, "refusal"),
    Mutant("paths: runs are compared only after their splits (plan_runs checks nothing)", "lab/study/runs.py",
           '        check_comparable([*named, (d, run_model(model.cfg, ckpt, None))], "run")\n'
           "        rm = run_model(model.cfg, ckpt, tok.encode(text))\n"
           "        plans.append(RunPlan(d, kept, model.cfg, rm, identity))\n"
           '        check_comparable([(p.run_dir, p.model) for p in (plans[0], plans[-1])], "run")\n',
           "        rm = run_model(model.cfg, ckpt, tok.encode(text))\n"
           "        plans.append(RunPlan(d, kept, model.cfg, rm, identity))\n",
           CLI_TRAINING, "refusal"),
    Mutant("paths: the plot's destination is checked only for its extension", C,
           "        check_plot_path(args.plot)  # a bad extension or destination fails before any work",
           "        plot_format(args.plot)  # a bad extension or destination fails before any work",
           CLI, "refusal"),
    # bounds: the estimates and limits
    Mutant("paths: Veit's cost counts one VJP per path, not k", BUDGET,
           "per_veit = samples * n * (n + 1) // 2", "per_veit = samples * n", LAB, "bounds"),
    Mutant("paths: a split without skips is costed as one with", BUDGET,
           "_work(n, cfg.variant != \"none\", vjp_s", "_work(n, True, vjp_s", LAB, "bounds"),
    Mutant("paths: the split ticks one VJP a step", P,
           "tick(len(D))  # one branch VJP per key", "tick(1)  # one branch VJP per key",
           LAB, "bounds"),
    Mutant("paths: Veit ticks one VJP a sample", V,
           "            if tick is not None:  # a path that does not exist took no VJP\n                tick(k if _exists(chain, _branch_set(chain, S)) else 0)\n",
           "            if tick is not None:\n                tick(1)\n", LAB, "bounds"),
    Mutant("paths: a long job's bar shows where stderr is no terminal", BUDGET,
           "disable = None if seconds > PROGRESS_AFTER_S else True  # None: on a terminal",
           "disable = False if seconds > PROGRESS_AFTER_S else True  # None: on a terminal", CLI, "bounds"),
    # ordering: what a closed stdout must not lose
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
    Mutant("sweep: --plot's destination is left to the sweep's own check", "cli/sweep_cmds.py",
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
