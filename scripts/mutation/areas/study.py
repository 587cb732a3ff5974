"""Mutants of the study protocol (src/resgrad/lab/study/), the studies' own modules
(src/resgrad/lab/paths/study.py, src/resgrad/lab/lesion/study.py) and the thin commands over
them (src/resgrad/cli/paths_cmds.py, lesion_cmds.py): refusals, estimates, records, ordering."""

from mutation import Mutant

P_CLI = ("tests/cli/test_cli_paths.py",)
P_TRAINING_CLI = ("tests/cli/test_cli_paths_training.py",)
P_TRAINING = ("tests/lab/test_paths_training.py",)
PRETRAINED_CLI = ("tests/cli/test_cli_pretrained.py",)
LESION_CLI = ("tests/cli/test_cli_lesion.py",)
WROTE = ("tests/cli/test_cli_wrote.py",)
REALFLOW = ("tests/lab/test_realflow.py",)
PROTOCOL = "lab/study/protocol.py"
WINDOWS = "lab/study/windows.py"
PSTUDY = "lab/paths/study.py"

MUTANTS = [
    Mutant("front: lesion never says it wrote its plot", "cli/lesion_cmds.py",
           '    print(lesion.render(table, res, what, runs, args.format), end="")\n    if args.plot:\n        _common.wrote(args.plot, fmt=args.format)\n',
           '    print(lesion.render(table, res, what, runs, args.format), end="")\n', WROTE, "records"),
    Mutant("protocol: the text is encoded without the hint of its source", PROTOCOL,
           "ids = encode_text(tok, text, text_path)  # (N,); a text it cannot encode names the fix",
           "ids = tok.encode(text)  # (N,); a text it cannot encode names the fix",
           PRETRAINED_CLI, "refusal"),
    Mutant("flow: the legend names the scheme, not the loaded model", "lab/flow/report.py",
           '            label = f"{init[len(PRETRAINED) :]} ({label})"',
           "            label = label", REALFLOW, "names"),
    Mutant("paths: the JSON's std over the seeds with ddof=1", PSTUDY,
           "return a.mean(axis=0).tolist(), a.std(axis=0).tolist()",
           "return a.mean(axis=0).tolist(), a.std(axis=0, ddof=1).tolist()", P_CLI, "statistics"),
    Mutant("paths: --every-checkpoint's 'paths in it' slices rows[lo:hi]", PSTUDY,
           "inside = paths_in_range(r.rows, r.range90)",
           "inside = sum(x.count for x in r.rows[lo:hi])", P_TRAINING_CLI, "bounds"),
    Mutant("paths: the table's 'of 2^n paths' leaves out the range's top end", PSTUDY,
           "({paths_in_range(rows, (lo, hi))} of",
           "({sum(r.count for r in rows[lo:hi])} of", P_CLI, "bounds"),
    Mutant("paths: across runs, checkpoints are paired by position, not iteration", PROTOCOL,
           "return [Step(it, [b[it] for b in by_run]) for it in common]",
           "return [Step(it, [list(b.values())[common.index(it)] for b in by_run]) for it in common]",
           P_TRAINING, "ordering"),
    Mutant("paths: across_runs compares nothing", PROTOCOL,
           '    check_comparable([(os.path.dirname(r[0].path), r[0].model) for r in runs], "run")\n',
           "", P_TRAINING, "refusal"),
    Mutant("paths: a run's checkpoints are not compared with its first", PROTOCOL,
           '                check_comparable([first, (path, rm)], "checkpoint", NOT_ONE_RUN)\n',
           "", P_TRAINING, "refusal"),
    Mutant("paths: run/ and run count as two runs", PROTOCOL,
           "real = [os.path.realpath(d) for d in run_dirs]",
           "real = list(run_dirs)", P_TRAINING_CLI, "refusal"),
    Mutant("paths: --seq longer than the model passes to the library's message", WINDOWS,
           "    if seq > cfg.block_size:\n        given",
           "    if False:\n        given", P_CLI, "refusal"),
    Mutant("paths: the default --seq is blamed as if typed", WINDOWS,
           'given = " (the default)" if default else ""',
           'given = ""', P_CLI, "records"),
    Mutant("paths: the lesson's work is not checked against the budget", PSTUDY,
           "    _require(work, budget, what, len(seeds), veit)\n",
           "", P_CLI, "refusal"),
    Mutant("paths: --every-checkpoint is not checked against the budget", PROTOCOL,
           "    study.require(plans[0].cfg, checkpoints, runs=len(plans))  # all of it, before any study\n",
           "", P_TRAINING_CLI, "refusal"),
    Mutant("paths: --every-checkpoint costs one checkpoint per run", PROTOCOL,
           "checkpoints = sum(len(p.kept) for p in plans)",
           "checkpoints = len(plans)", P_TRAINING_CLI, "formula"),
    Mutant("paths: Veit's magnitudes are left out of the memory estimate", PSTUDY,
           "memory.require(memory.paths_bytes(cfg, self.seq, self.batch) + veit_bytes(self.veit),",
           "memory.require(memory.paths_bytes(cfg, self.seq, self.batch),", P_CLI, "formula"),
    Mutant("paths: the plot is saved after the first line is printed", "cli/paths_cmds.py",
           '    if args.plot:  # saved before anything is printed: a reader that leaves loses no plot\n        paths.save_path_figure(args.plot, res.splits, res.veits, res.label)\n    print(paths.render(res, args.format, args.veit or 0), end="")\n',
           '    print(paths.render(res, args.format, args.veit or 0), end="")\n    if args.plot:\n        paths.save_path_figure(args.plot, res.splits, res.veits, res.label)\n',
           P_CLI, "ordering"),
]  # fmt: skip
