"""Mutants of reading a model in (`resgrad paths` encoding its text and refusing --depth,
the trainer's init_from through the source resolver) and of the titles, legends and
labels of the flow, sweep, paths and runs figures (TITLES)."""

# ruff: noqa: E501  (each mutant quotes its source text verbatim)

from mutation import Mutant

CLI_PRETRAINED = ("tests/cli/test_cli_pretrained.py",)
MUTANTS = [
    Mutant("paths_cmds: --depth on a model is not refused", "cli/paths_cmds.py",
           '''        _common.refuse_with(args.argv, ("--depth", "--plain"), "a model",''',
           '''        _common.refuse_with(args.argv, ("--plain",), "a model",''',
           ("tests/cli/test_cli_paths.py",), "refusal"),
    Mutant("loop: init_from is loaded without the resolver", "train/loop.py",
           "        src = resolve_source(cfg.init_from, meta=cfg.meta, kinds=PRETRAINED, "
           "flag=\"init_from\")\n        model, tok = load_source(src, fits=fits)",
           "        from resgrad.train.pretrained import load_pretrained\n\n"
           "        model, tok = load_pretrained(cfg.init_from, meta=cfg.meta, fits=fits)",
           ("tests/train/test_pretrained.py",), "refusal"),
]  # fmt: skip

TITLES = [
    Mutant("flow: a loaded model's figure is titled 'at initialization'", 'lab/flow/report.py',
           '''        title=f"Gradient flow {'of ' if rows[0].init.startswith(PRETRAINED) else ''}"''',
           '''        title=f"Gradient flow at initialization {'of ' if rows[0].init.startswith(PRETRAINED) else ''}"''',
           ("tests/lab/test_realflow.py",), "names"),
    Mutant("flow: the init's depth range names only the first depth", 'lab/flow/report.py',
           '''    depth = f"L={Ls[0]}" if len(Ls) == 1 else f"L={Ls[0]}..{Ls[-1]}"''',
           '''    depth = f"L={Ls[0]}"''', ("tests/lab/test_flow.py", "tests/lab/test_realflow.py"), "names"),
    Mutant("sweep: the title names no init", 'lab/experiments/sweep.py',
           '''        f"at initialization ({inits} init)",''',
           '''        "at initialization",''', ("tests/lab/test_sweep.py",), "names"),
    Mutant("paths: the lesson's x_0 is called the embeddings' output", 'lab/paths/figs.py',
           '''    x0 = "the stack's input" if splits[0].label.startswith("lesson:") else "the embeddings' output"''',
           '''    x0 = "the embeddings' output"''', ("tests/lab/test_paths.py",), "names"),
    Mutant("runs: stream_grad's lines are called blocks", 'lab/experiments/compare.py',
           '''            where = "boundary" if q == "stream_grad" else "block"  # x_i is a boundary's''',
           '''            where = "block"''', ("tests/lab/test_runs.py",), "names"),
]  # fmt: skip
MUTANTS += TITLES
