"""The project's promises about itself: README commands, CI, layering, lint."""

import ast
import pathlib
import re
import shutil
import subprocess

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


def test_library_never_imports_torch():
    for path in (ROOT / "src" / "resgrad").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not any(n.split(".")[0] == "torch" for n in names), path


def test_torch_is_pinned():
    text = (ROOT / "pyproject.toml").read_text()
    assert '"torch==2.13.0"' in text


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff not installed")
def test_ruff_is_clean():
    p = subprocess.run(["ruff", "check", str(ROOT)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout


# the architecture, bottom up: a module may import only from tiers below its own
TIERS = [
    ["residual", "io", "heap", "records"],  # the residual core; files, memory, tables
    ["gradcheck", "plots"],  # the float64 checker; figures
    ["lesson", "layers"],  # the lesson's stack; the layer pairs
    ["blocks"],  # a transformer block in every residual scheme
    ["model"],  # the GPT
    ["selfcheck", "data", "optim", "checkpoint"],  # proof of every layer; training's parts
    ["sample", "train", "flow", "bench"],  # sampling, training, the gradient-flow lab
    ["sweep"],  # grids of flow measurements, local or on a cluster
]


def _resgrad_imports(path):
    deps = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("resgrad."):
            deps.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            deps |= {a.name.split(".")[1] for a in node.names if a.name.startswith("resgrad.")}
    return deps


def test_lower_layers_never_import_upper_ones():
    tier = {m: i for i, names in enumerate(TIERS) for m in names}
    pkg = ROOT / "src" / "resgrad"
    modules = {p.stem for p in pkg.glob("*.py")} - {"__init__", "__main__"}
    assert modules == set(tier), "every module needs a place in TIERS"
    for m in modules:
        for dep in _resgrad_imports(pkg / f"{m}.py"):
            assert dep != "cli", f"{m} imports the CLI"
            assert tier[dep] < tier[m], f"{m} (tier {tier[m]}) imports {dep} (tier {tier[dep]})"
