"""Mutants of the command line's lab commands (src/resgrad/cli/lab_cmds.py): where
`resgrad dynamics` reports a damaged record."""

from mutation import RUNS, Mutant

MUTANTS = [
    # -- cli/lab_cmds.py (1)
    Mutant('lab_cmds: dynamics prints its damage line on stdout', 'cli/lab_cmds.py',
           'print(f"resgrad dynamics: {args.run_dir}: {dyn.damage}", file=sys.stderr)',
           'print(f"resgrad dynamics: {args.run_dir}: {dyn.damage}")', RUNS, 'records'),
]  # fmt: skip
