"""The project's promises about itself: README commands, CI, layering, lint."""

import ast
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _readme_commands():
    text = (ROOT / "README.md").read_text()
    setup = text.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```\n(.+?)\n```", setup)


def test_readme_has_exactly_two_setup_commands():
    cmds = _readme_commands()
    assert len(cmds) == 2, cmds
    assert cmds[0].endswith("resgrad lesson")
    assert "[test]" in cmds[1] and "pytest" in cmds[1]


def test_ci_runs_the_readme_test_command_verbatim():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert _readme_commands()[1] in ci


SKIPS = """import pytest


def test_a_referee_missing():
    pytest.skip("no referee here")


def test_that_passes():
    pass
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "two workers"])
def test_a_skipped_test_fails_the_run_where_torch_is_required(tmp_path, workers):
    """CI's promise (RESGRAD_REQUIRE_TORCH=1, .ci/run): a skip is not a pass, also where
    the README's command shares the tests among workers, which report to one controller."""
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_skips.py").write_text(SKIPS)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *workers]
    for required, rc in (("1", 1), ("0", 0)):
        env = {**os.environ, "RESGRAD_REQUIRE_TORCH": required}
        p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert p.returncode == rc, (required, p.stdout[-2000:], p.stderr[-2000:])
        said = "RESGRAD_REQUIRE_TORCH=1: 1 test(s) skipped; a skipped test is not a pass"
        assert (said in p.stdout) == (required == "1"), p.stdout[-2000:]


# the one exception: reading a nanoGPT .pt needs torch (the optional extra resgrad[torch]),
# imported inside this one function only
TORCH_ALLOWED = ("formats/nanogpt.py", "read_nanogpt_ckpt")  # the ckpt.pt reader


def torch_imports(pkg):
    """(file, line) of every torch import under the package folder ``pkg``, but the one
    allowed inside TORCH_ALLOWED's function."""
    bad = []
    for path in pkg.rglob("*.py"):
        tree = ast.parse(path.read_text())
        allowed = set()
        if path.relative_to(pkg).as_posix() == TORCH_ALLOWED[0]:
            fn = next(
                n
                for n in tree.body
                if isinstance(n, ast.FunctionDef) and n.name == TORCH_ALLOWED[1]
            )
            allowed = {id(n) for n in ast.walk(fn)}
        for node in ast.walk(tree):
            if id(node) in allowed:
                continue
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            if any(n.split(".")[0] == "torch" for n in names):
                bad.append((path.relative_to(pkg).as_posix(), node.lineno))
    return bad


def test_library_never_imports_torch():
    assert torch_imports(ROOT / "src" / "resgrad") == []


def test_a_torch_import_outside_the_nanogpt_reader_is_caught(tmp_path):
    shutil.copytree(ROOT / "src" / "resgrad", tmp_path / "resgrad")
    nano = tmp_path / "resgrad" / "formats" / "nanogpt.py"
    nano.write_text(nano.read_text() + "\nimport torch\n")
    hf = tmp_path / "resgrad" / "formats" / "hf.py"
    hf.write_text(hf.read_text() + "\n\ndef f():\n    from torch import nn\n")
    bad = {path for path, _ in torch_imports(tmp_path / "resgrad")}
    assert bad == {"formats/nanogpt.py", "formats/hf.py"}


def test_torch_is_pinned():
    text = (ROOT / "pyproject.toml").read_text()
    assert '"torch==2.13.0"' in text


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff not installed")
def test_ruff_is_clean():
    p = subprocess.run(["ruff", "check", str(ROOT)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout


# The architecture, bottom up. A floor is a package (or the single module plots.py);
# a module may import any module on a lower floor and, on its own floor, only the
# modules listed before it. The CLI sits on top: its modules import anything below and
# each other, and nothing below imports them.
FLOORS = [
    ("nn", ["kernels", "decode_kernels", "residual", "layers", "blocks", "model"]),  # the model
    ("verify", ["gradcheck", "selfcheck"]),  # the proofs
    # files
    ("formats", ["atomic", "lock", "records", "sealed", "events", "checkpoint", "hf", "nanogpt"]),
    ("plots", [""]),  # figures
    (
        "train",
        [
            "data",
            "bpe",
            "optim",
            "dynamics",
            "sample",
            "pretrained",
            "shards",
            "bits",
            "config",
            "rundir",
            "source",
            "trackers",
            "loop",
            "report",
        ],
    ),  # training
    ("perf", ["heap", "threads", "bench", "memory"]),  # heap setting, threads, step timer, memory
    (
        "lab",
        [
            "lesson",
            "study.refusals",
            "study.budget",
            "study.windows",
            "study.runs",
            "study.protocol",
            "study",
            "flow.core",
            "flow.report",
            "flow.pretrained",
            "flow.explore",
            "flow.study",
            "flow",
            "paths.chains",
            "paths.exact",
            "paths.veit",
            "paths.figs",
            "paths.runs",
            "paths.study",
            "paths",
            "lesion.interventions",
            "lesion.measure",
            "lesion.tables",
            "lesion.figs",
            "lesion.runs",
            "lesion.study",
            "lesion",
            "experiments.claims",
            "experiments.compare",
            "experiments.depthtrain",
            "experiments.grid",
            "experiments.sweep",
            "experiments.experiment",
            "experiments",
            "robustness.regression",
            "robustness.levels",
            "robustness.stats",
            "robustness.profiles",
            "robustness.recipe",
            "robustness.experiment",
            "robustness.analysis",
            "robustness.report",
            "robustness.figure",
            "robustness",
        ],
    ),  # the lab: a subpackage per study, the shared pieces (study) first
    ("cli", ["*"]),  # the command line: flags in, library calls out
]
RANK = {
    (floor, mod): (i, j) for i, (floor, mods) in enumerate(FLOORS) for j, mod in enumerate(mods)
}


def _place(dotted):
    """('nn', 'layers') for 'resgrad.nn.layers', ('plots', '') for 'resgrad.plots',
    ('lab', 'paths.exact') for 'resgrad.lab.paths.exact'."""
    floor, mod, sub = (dotted.split(".") + ["", "", ""])[1:4]
    if floor == "lab" and sub:  # the lab's subpackages: ('lab', 'paths.exact')
        mod = f"{mod}.{sub}"
    return (floor, "*") if floor == "cli" else (floor, mod)


def _resgrad_imports(path, src):
    """Every resgrad module that the file ``path`` imports, as dotted names."""
    deps = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("resgrad"):
            # `from resgrad.nn import layers` imports the module resgrad.nn.layers
            pkg = src / pathlib.Path(*node.module.split("."))
            for a in node.names:
                is_module = (pkg / f"{a.name}.py").exists() or (pkg / a.name).is_dir()
                deps.add(f"{node.module}.{a.name}" if is_module else node.module)
        elif isinstance(node, ast.Import):
            deps |= {a.name for a in node.names if a.name.startswith("resgrad.")}
    return deps


def _library_modules(src):
    """(path, dotted name) of every module below src/resgrad but its two entry files."""
    for path in sorted((src / "resgrad").rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        if parts in (("resgrad", "__init__"), ("resgrad", "__main__")):
            continue  # the top-level re-exports and `python -m resgrad`
        yield path, ".".join(p for p in parts if p != "__init__")


def upward_imports(src):
    """(importer, imported, why) for every import in ``src`` that breaks the floors."""
    bad = []
    for path, name in _library_modules(src):
        here = _place(name)
        for dep in _resgrad_imports(path, src):
            there = _place(dep)
            if here not in RANK or there not in RANK:
                bad.append((name, dep, "not placed in FLOORS"))
            elif there[0] == "cli" and here[0] != "cli":
                bad.append((name, dep, "imports the CLI"))
            elif RANK[there] >= RANK[here] and here[0] != "cli":
                bad.append((name, dep, f"{here} imports {there}, above it"))
    return bad


def test_lower_floors_never_import_upper_ones():
    assert upward_imports(ROOT / "src") == []


def test_every_module_has_a_floor():
    for _, name in _library_modules(ROOT / "src"):
        floor, mod = _place(name)
        assert (floor, mod) in RANK or mod == "", f"{name} needs a place in FLOORS"


def test_an_upward_import_is_caught(tmp_path):
    """Not vacuous: nn importing the trainer, or verify importing the CLI, is reported."""
    shutil.copytree(ROOT / "src" / "resgrad", tmp_path / "resgrad")
    layers = tmp_path / "resgrad" / "nn" / "layers.py"
    layers.write_text(layers.read_text() + "\nfrom resgrad.train.loop import train_step\n")
    gradcheck = tmp_path / "resgrad" / "verify" / "gradcheck.py"
    gradcheck.write_text(gradcheck.read_text() + "\nfrom resgrad import cli\n")
    blocks = tmp_path / "resgrad" / "nn" / "blocks.py"
    blocks.write_text(blocks.read_text() + "\nfrom resgrad.nn import model\n")
    bad = {(a, b) for a, b, _ in upward_imports(tmp_path)}
    assert bad == {
        ("resgrad.nn.layers", "resgrad.train.loop"),
        ("resgrad.verify.gradcheck", "resgrad.cli"),
        ("resgrad.nn.blocks", "resgrad.nn.model"),
    }


def test_every_hand_written_mutant_applies_to_the_current_source():
    # scripts/mutants.py (the bugs mutmut cannot plant) finds each mutant's text exactly
    # once; a refactor that moves the text must update the mutant, or the run stops
    import importlib.util

    spec = importlib.util.spec_from_file_location("mutants", ROOT / "scripts" / "mutants.py")
    mutants = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mutants)  # it puts scripts/ on sys.path for its package, mutation
    assert len(mutants.MUTANTS) >= 30
    every = mutants.MUTANTS  # every area's (scripts/mutation/areas/*.py)
    assert len({m.name for m in every}) == len(every), "two mutants share a name"
    # the package stays in small files: one area each, none a table of hundreds of lines
    for path in (ROOT / "scripts" / "mutation").rglob("*.py"):
        n = len(path.read_text().splitlines())
        assert n <= 400, f"{path.relative_to(ROOT)}: {n} lines, over 400"
    for m in every:
        assert m.kind in mutants.KINDS, m.name
        text = (ROOT / "src" / "resgrad" / m.file).read_text()
        assert text.count(m.old) == 1, (m.name, m.file)
        assert all((ROOT / t).exists() for t in m.tests), m.name


def _mutmut_run():
    import importlib.util

    spec = importlib.util.spec_from_file_location("mutmut_run", ROOT / "scripts/mutmut/run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    return run


def test_the_mutmut_run_names_test_files_that_exist():
    run = _mutmut_run()
    for module, tests in run.TESTS.items():
        assert (ROOT / "src" / "resgrad" / module).is_file(), module
        assert all((ROOT / t).is_file() for t in tests), module
    assert run.tests_for("nn/residual.py") == [
        "tests/nn/test_residual.py", "tests/nn/test_residual_mutmut.py"]  # fmt: skip


def test_every_equivalent_mutant_names_its_module_its_line_and_a_reason():
    run = _mutmut_run()
    equivalent = run.read_equivalent()
    for name, (line, reason) in equivalent.items():
        module = name.split(".x")[0].removeprefix("resgrad.").replace(".", "/") + ".py"
        assert (ROOT / "src" / "resgrad" / module).is_file(), name
        assert line and len(reason.split()) >= 4, name


def test_a_malformed_equivalent_line_is_refused(tmp_path):
    bad = tmp_path / "equivalent.txt"
    bad.write_text("resgrad.nn.residual.x_residual__mutmut_1 | no reason given\n")
    with pytest.raises(SystemExit, match="expected 'NAME | mutated line | reason'"):
        _mutmut_run().read_equivalent(str(bad))


def test_ci_runs_mutmut_on_one_module():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "python scripts/mutmut/run.py nn/residual.py" in ci
