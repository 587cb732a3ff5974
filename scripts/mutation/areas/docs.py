"""Mutants of the command line's account of itself (issue 28): --version, the bare
command, the help texts the CLI reference is generated from, and export's report."""

from mutation import Mutant

HELP = ("tests/cli/test_cli_help.py",)

MUTANTS = [
    Mutant("cli: resgrad alone prints no usage", "cli/__init__.py",
           "        parser.print_usage(sys.stderr)\n",
           "        pass  # the usage line forgotten\n", HELP, "refusal"),
    Mutant("cli: resgrad alone falls through to argparse's bare error", "cli/__init__.py",
           "    if not (sys.argv[1:] if argv is None else argv):",
           "    if argv is not None and argv == [] and False:", HELP, "refusal"),
    Mutant("cli: --version hard-codes an old version", "cli/__init__.py",
           'version=f"%(prog)s {resgrad.__version__}"',
           'version="%(prog)s 0.1"', HELP, "names"),
    Mutant("export_cmds: reports the files it meant to write, not those written",
           "cli/export_cmds.py",
           "_common.wrote(args.out_dir)",
           'print(f"wrote {args.out_dir}: config.json, model.safetensors, tokenizer.json")',
           HELP, "records"),
    Mutant("_experiments: an experiment's help says no default of its own",
           "cli/_experiments.py",
           'help_ += f" (default: {given[flag]})"',
           'help_ += " (default: the experiment\'s)"', ("tests/cli/test_cli_front_door.py",),
           "names"),
    Mutant("train_cmds: --tokenizer lists no choices", "cli/train_cmds.py",
           '"--tokenizer": KINDS,', '"--tokenizer-kind": KINDS,', HELP, "names"),
    Mutant("train_cmds: sample counts characters", "cli/train_cmds.py",
           'help="tokens to generate: characters for a character-level run, BPE tokens for a "\n'
           '        "BPE run or GPT-2 (default: 500)",',
           'help="characters to generate (default: 500)",', HELP, "names"),
]  # fmt: skip
