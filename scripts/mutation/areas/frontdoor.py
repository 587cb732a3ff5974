"""Mutants of the front door (issue: every writing command says so in one form; notebook
02's static grid): cli._common.wrote and its callers, the lesion figure's panel (a),
lab.flow.explore.explore_grid and plots.draw_spec."""

# ruff: noqa: E501  (each mutant quotes its source text verbatim)

from mutation import EXPLORE, PLOTS, Mutant

WROTE = ("tests/cli/test_cli_wrote.py",)
LESION = ("tests/lab/test_lesion.py",)
COMMON = "cli/_common.py"
FIGS = "lab/lesion/figs.py"

MUTANTS = [
    # cli._common.wrote: one form, on the stream the format leaves free
    Mutant("front: wrote puts its line on stdout beside --format json", COMMON,
           'file=sys.stdout if fmt == "table" else sys.stderr',
           'file=sys.stdout if fmt != "csv" else sys.stderr', WROTE, "records"),
    Mutant("front: wrote lists a directory's hidden files", COMMON,
           'sorted(f for f in os.listdir(path) if not f.startswith("."))',
           "sorted(os.listdir(path))", WROTE, "records"),
    Mutant("front: wrote drops the detail", COMMON,
           '    if detail:\n        line += f" ({detail})"\n',
           "", WROTE, "records"),
    Mutant("front: wrote lists a directory in listdir's order", COMMON,
           'sorted(f for f in os.listdir(path) if not f.startswith("."))',
           '(f for f in os.listdir(path) if not f.startswith("."))', WROTE, "ordering"),
    # its callers
    Mutant("front: sweep says its table but not its plot", "cli/sweep_cmds.py",
           "    if args.plot:\n        _common.wrote(args.plot)\n",
           "", WROTE, "records"),
    # the lesion figure's panel (a)
    Mutant("front: lesion panel (a) shifts as if 3 kinds were drawn", FIGS,
           "shift = (j - (len(drawn) - 1) / 2) * 0.2",
           "shift = (j - 1) * 0.2", LESION, "formula"),
    Mutant("front: lesion panel (a) leaves its x range to matplotlib", FIGS,
           "        ax_a.set_xlim(min(layers) - 0.5, max(layers) + 0.5)\n",
           "        pass\n", LESION, "bounds"),
    # lab.flow.explore.explore_grid
    Mutant("front: explore_grid takes no views (divides by zero)", 'lab/flow/explore.py',
           '    if not views:\n        raise ValueError("views must hold at least one view, got none")\n',
           "", EXPLORE, "refusal"),
    Mutant("front: explore_grid takes ncols=True for one column", 'lab/flow/explore.py',
           "if isinstance(ncols, bool) or not isinstance(ncols, int) or ncols < 1:",
           "if not isinstance(ncols, int) or ncols < 1:", EXPLORE, "refusal"),
    Mutant("front: explore_grid ignores a view's caption", 'lab/flow/explore.py',
           "        if caption is not None:\n            spec = dataclasses.replace(spec, title=str(caption))\n",
           "", EXPLORE, "names"),
    Mutant("front: explore_grid lays out ncols columns for fewer views", 'lab/flow/explore.py',
           "    ncols = min(ncols, len(views))\n",
           "", EXPLORE, "names"),
    # plots.draw_spec
    Mutant("front: draw_spec ignores title_size", "plots.py",
           "ax.set_title(title, fontsize=title_size)",
           "ax.set_title(title, fontsize=10)", PLOTS, "names"),
    Mutant("front: draw_spec clips a zero on log y instead of masking", "plots.py",
           '    if spec.yscale == "log":\n        ax.set_yscale("log", nonpositive="mask")',
           '    if spec.yscale == "log":\n        ax.set_yscale("log", nonpositive="clip")',
           PLOTS, "formula"),
]  # fmt: skip
