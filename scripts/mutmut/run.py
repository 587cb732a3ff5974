"""Mutation testing with mutmut, one module (or a few) at a time, and the score of each.

    python scripts/mutmut/run.py nn/residual.py              # a module and its tests
    python scripts/mutmut/run.py formats/atomic.py formats/lock.py
    python scripts/mutmut/run.py train/rundir.py --tests tests/train/test_loop.py

mutmut (``[tool.mutmut]`` in pyproject.toml) copies the tree into ``mutants/``, rewrites
every function of the modules named into a trampoline that runs one mutant at a time, runs
the module's tests once to learn which tests reach which function, then runs each mutant
against those tests only. This script picks the tests (the module's mirror in tests/, the
extra files of TESTS below, ``--tests``), starts resgrad on its NumPy passes, prints one row
per module and every survivor not argued equivalent in ``equivalent.txt``, and exits 1 if
there is one.

The kernels: mutmut's trampoline is Python that numba cannot compile, so the run sets
``RESGRAD_KERNELS=0`` (the layers take their NumPy passes, the reference) and
``NUMBA_DISABLE_JIT=1`` (a kernel a test switches on, or AdamW's fused step, runs as the
plain Python it is written in, so its mutants are tested too). ``PYTHONPATH`` points at
the mutated copy, so a test that starts ``resgrad`` in a subprocess runs the mutant too.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EQUIVALENT = os.path.join(ROOT, "scripts", "mutmut", "equivalent.txt")

# the test files that reach a module beyond its mirror tests/<pkg>/test_<name>*.py (the
# modules of lab/'s sub-packages are tested in tests/lab/, a few modules by their callers)
TESTS = {
    "formats/atomic.py": ["tests/train/test_tb_names.py"],
    "formats/hf.py": ["tests/formats/test_formats_bounds.py", "tests/formats/test_nanogpt.py"],
    "lab/experiments/claims.py": ["tests/lab/test_claims.py"],
    "lab/experiments/compare.py": ["tests/lab/test_runs.py"],
    "lab/experiments/depthtrain.py": ["tests/lab/test_depthtrain.py"],
    "lab/experiments/experiment.py": ["tests/lab/test_experiments.py"],
    "lab/experiments/grid.py": ["tests/lab/test_sweep.py"],
    "lab/experiments/sweep.py": ["tests/lab/test_sweep.py"],
    "lab/flow/study.py": ["tests/cli/test_cli_faults.py"],
    "lab/flow/core.py": ["tests/lab/test_flow.py", "tests/lab/test_claims.py"],
    "lab/flow/explore.py": ["tests/lab/test_explore.py"],
    "lab/flow/pretrained.py": ["tests/lab/test_realflow.py"],
    "lab/flow/report.py": ["tests/lab/test_flow.py", "tests/lab/test_realflow.py"],
    "lab/lesion/figs.py": ["tests/lab/test_lesion.py"],
    "lab/lesion/interventions.py": ["tests/lab/test_lesion.py", "tests/lab/test_study_classes.py"],
    "lab/lesion/measure.py": ["tests/lab/test_lesion.py", "tests/lab/test_study_classes.py"],
    "lab/lesion/runs.py": ["tests/lab/test_lesion.py", "tests/cli/test_cli_lesion.py"],
    "lab/lesion/study.py": ["tests/lab/test_study_classes_2.py", "tests/cli/test_cli_lesion.py"],
    "lab/lesion/tables.py": ["tests/lab/test_lesion.py", "tests/lab/test_study_classes.py"],
    "lab/paths/chains.py": ["tests/lab/test_paths.py"],
    "lab/paths/exact.py": ["tests/lab/test_paths.py", "tests/lab/test_study_classes.py"],
    "lab/paths/figs.py": ["tests/lab/test_paths.py"],
    "lab/paths/runs.py": ["tests/lab/test_paths_training.py"],
    "lab/paths/study.py": ["tests/lab/test_study_classes_2.py", "tests/lab/test_paths_training.py"],
    "lab/paths/veit.py": ["tests/lab/test_paths.py"],
    "lab/robustness/levels.py": ["tests/lab/test_robustness_stats.py"],
    "lab/robustness/stats.py": ["tests/lab/test_robustness_stats.py",
                                "tests/lab/test_robustness_calibration.py",
                                "tests/lab/test_robustness_views.py"],
    "lab/robustness/regression.py": ["tests/lab/test_robustness_stats.py",
                                     "tests/lab/test_robustness_calibration.py"],
    "lab/robustness/profiles.py": ["tests/lab/test_robustness_views.py"],
    "lab/robustness/recipe.py": ["tests/lab/test_robustness_views.py",
                                 "tests/lab/test_robustness_study.py"],
    "lab/robustness/analysis.py": ["tests/lab/test_robustness_views.py",
                                   "tests/lab/test_robustness_study.py"],
    "lab/robustness/figure.py": ["tests/lab/test_robustness_study.py"],
    "lab/robustness/experiment.py": ["tests/lab/test_robustness_study.py"],
    "lab/study/budget.py": ["tests/lab/test_paths.py", "tests/lab/test_study_classes.py",
                            "tests/cli/test_cli_front_door.py"],
    "lab/study/protocol.py": ["tests/lab/test_paths_training.py"],
    "lab/study/refusals.py": ["tests/lab/test_refusals.py"],
    "lab/study/runs.py": ["tests/lab/test_paths_training.py"],
    "lab/study/windows.py": ["tests/lab/test_study_classes.py", "tests/lab/test_realflow.py"],
    "nn/blocks.py": ["tests/nn/test_model.py"],
    "nn/decode_kernels.py": ["tests/train/test_decode.py"],
    "nn/kernels.py": ["tests/nn/test_layers.py"],
    "train/config.py": ["tests/train/test_activation.py"],
    "train/dynamics.py": ["tests/train/test_limits.py"],
    "train/optim.py": ["tests/train/test_share.py"],
    "train/sample.py": ["tests/train/test_decode.py", "tests/train/test_limits.py"],
    "train/shards.py": ["tests/train/test_loop.py"],
    "train/trackers.py": ["tests/train/test_tb_names.py", "tests/train/test_tb_resume.py"],
}

# tests that start ``resgrad`` in a subprocess in another directory: under mutmut's first
# pass (the one that learns which test reaches which function) the subprocess's trampolines
# look for mutmut's config in their working directory, fail, and fail the whole run; what
# a subprocess reaches is never recorded anyway, so they are left out (pytest --deselect)
DESELECT = {
    "train/config.py": [
        "tests/train/test_activation.py::test_the_flag_trains_the_exact_gelu_and_the_export_says_so",
        "tests/train/test_activation.py::test_the_help_offers_both_names",
    ],
}


def module_path(name: str) -> str:
    """``nn/residual.py``, ``resgrad.nn.residual`` or ``src/resgrad/nn/residual.py`` as
    ``nn/residual.py``."""
    if not name.endswith(".py"):
        name = name.removeprefix("resgrad.").replace(".", "/") + ".py"
    name = name.removeprefix("src/").removeprefix("resgrad/")
    if not os.path.isfile(os.path.join(ROOT, "src", "resgrad", name)):
        raise SystemExit(f"no module src/resgrad/{name}")
    return name


def tests_for(module: str) -> list[str]:
    """The module's mirror tests (its own mutmut tests among them) and TESTS' extras; for a
    module with neither, the test files that name it (``resgrad.train.bits``)."""
    pkg, stem = os.path.split(module[:-3])
    top = pkg.split("/")[0]  # lab/study/windows.py is tested in tests/lab/
    mirror = {*glob.glob(os.path.join(ROOT, "tests", pkg, f"test_{stem}*.py")),
              *glob.glob(os.path.join(ROOT, "tests", top, f"test_{stem}*.py"))}  # fmt: skip
    found = [os.path.relpath(p, ROOT) for p in sorted(mirror)] + TESTS.get(module, [])
    if not found:
        dotted = "resgrad." + module[:-3].replace("/", ".")
        for p in sorted(glob.glob(os.path.join(ROOT, "tests", "**", "test_*.py"), recursive=True)):
            with open(p, encoding="utf-8") as f:
                if dotted in f.read():
                    found.append(os.path.relpath(p, ROOT))
    return list(dict.fromkeys(found))


def read_equivalent(path: str = EQUIVALENT) -> dict[str, tuple[str, str]]:
    """``equivalent.txt``: ``NAME | mutated line | reason`` a line -> {NAME: (line, reason)}."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip() or raw.lstrip().startswith("#"):
                continue
            name, _, rest = raw.partition(" | ")
            line, _, reason = rest.rpartition(" | ")  # the line may hold " | " (a type)
            parts = [name.strip(), line.strip(), reason.strip()]
            if not all(parts):
                raise SystemExit(f"{path}:{n}: expected 'NAME | mutated line | reason'")
            out[parts[0]] = (parts[1], parts[2])
    return out


def mutated_line(diff: str) -> str:
    """The lines a mutant adds, whitespace collapsed: what equivalent.txt quotes."""
    added = [ln[1:] for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    return " / ".join(" ".join(ln.split()) for ln in added)


def report(modules: list[str], equivalent: dict[str, tuple[str, str]]) -> int:
    """One row per module, then each survivor not argued equivalent; the count of those."""
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    from mutmut.stats import status_by_exit_code

    print(f"\n{'module':<32} {'mutants':>7} {'killed':>7} {'equiv.':>7} {'unexpl.':>7}  score")
    bad: list[tuple[str, str, str]] = []
    for module in modules:
        data = SourceFileMutationData(path=os.path.join("src", "resgrad", module))
        data.load()
        killed = equiv = 0
        for name, code in sorted(data.exit_code_by_key.items()):
            status = status_by_exit_code[code]
            # a mutant whose tests fail, hang, or whose test process dies of a signal (one
            # that signals the pid it is given kills the test run itself) is caught
            if status in ("killed", "timeout", "segfault") or (code is not None and code < 0):
                killed += 1
                continue
            diff = get_diff_for_mutant(name, path=data.path)
            if name in equivalent and equivalent[name][0] == mutated_line(diff):
                equiv += 1
            else:
                stale = " (equivalent.txt quotes another line)" if name in equivalent else ""
                bad.append((name, status + stale, diff))
        total = len(data.exit_code_by_key)
        score = killed / (total - equiv) if total > equiv else 1.0
        print(f"{module:<32} {total:>7} {killed:>7} {equiv:>7} "
              f"{total - killed - equiv:>7}  {score:.1%}")  # fmt: skip
    for name, status, diff in bad:  # the changed lines; `mutmut show NAME` gives the function
        changed = [
            ln for ln in diff.splitlines() if ln[:1] in "-+" and ln[:3] not in ("---", "+++")
        ]
        print(f"\n{name}: {status}\n" + "\n".join(changed))
    return len(bad)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("modules", nargs="+", help="modules of src/resgrad, e.g. nn/residual.py")
    ap.add_argument("--tests", nargs="*", default=[], help="more test files to run")
    ap.add_argument("--max-children", type=int, help="mutants at once (default: the cores)")
    args = ap.parse_args(argv)
    os.chdir(ROOT)  # mutmut works in the current directory
    modules = [module_path(m) for m in args.modules]
    tests = list(dict.fromkeys([t for m in modules for t in tests_for(m)] + args.tests))
    if not tests:
        raise SystemExit(f"no tests found for {modules}; name them with --tests")
    equivalent = read_equivalent()

    # before mutmut or resgrad is imported: the NumPy passes, no compiling, the mutated copy
    os.environ.update(RESGRAD_KERNELS="0", NUMBA_DISABLE_JIT="1", MPLBACKEND="Agg")
    os.environ.pop("RESGRAD_REQUIRE_TORCH", None)  # a skip proves nothing here, fails nothing
    os.makedirs("mutants/src", exist_ok=True)  # on sys.path before mutmut fills it
    for m in modules:  # mutmut takes a copy newer than its source for mutated: mutate it again
        for suffix in ("", ".meta", ".spans"):
            if os.path.exists(f"mutants/src/resgrad/{m}{suffix}"):
                os.remove(f"mutants/src/resgrad/{m}{suffix}")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [os.path.abspath("mutants/src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    )

    from mutmut.__main__ import cli
    from mutmut.configuration import config

    cfg = config()  # pyproject.toml's [tool.mutmut], narrowed to these modules and tests
    cfg.only_mutate = [f"src/resgrad/{m}" for m in modules]
    deselect = [f"--deselect={t}" for m in modules for t in DESELECT.get(m, [])]
    cfg.pytest_add_cli_args_test_selection = tests + deselect
    print(f"mutmut on {', '.join(modules)}\ntests: {' '.join(tests)}", flush=True)
    names = [f"resgrad.{m[:-3].replace('/', '.')}.*" for m in modules]  # rerun every mutant
    children = ["--max-children", str(args.max_children)] if args.max_children else []
    try:
        cli.main(["run", *children, *names], standalone_mode=False)
    except SystemExit as e:  # mutmut exits on a failing clean run or no tests
        if e.code:
            return 2
    return 1 if report(modules, equivalent) else 0


if __name__ == "__main__":
    sys.exit(main())
