"""Every Python example and every ``resgrad`` command in the README runs, as printed
(tests/test_docs.py runs the docs' examples).

Each ```python block is executed in a fresh namespace, in a temporary directory, so an
example that no longer matches the library (a moved module, a renamed argument, a
wrong result caught by the example's own assert) fails here instead of in a reader's
hands. The examples are small enough to run as they stand: nothing is shrunk.

The shell blocks' ``resgrad`` commands run in order, as a reader types them, in one empty
directory (``pip``, ``pytest`` and ``sphinx-build`` lines are the set-up, run by CI), and
the repository is left as it was: a command that wrote into it (a figure over a committed
one, a run directory) fails here.
"""

import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
if "redraw_figures" in sys.modules:  # tests/test_docs.py loaded it: the one copy
    rf = sys.modules["redraw_figures"]
else:
    _spec = importlib.util.spec_from_file_location(
        "redraw_figures", ROOT / "scripts" / "redraw_figures.py"
    )
    rf = importlib.util.module_from_spec(_spec)
    sys.modules["redraw_figures"] = rf  # its dataclasses look their module up there
    _spec.loader.exec_module(rf)


def python_blocks(text):
    """(first line number, code) of every ```python block in a Markdown text."""
    blocks = []
    for m in re.finditer(r"^```python\n(.*?)^```$", text, flags=re.S | re.M):
        line = text.count("\n", 0, m.start()) + 2
        blocks.append((line, m.group(1)))
    return blocks


BLOCKS = python_blocks((ROOT / "README.md").read_text())


def test_the_readme_has_python_examples():
    assert len(BLOCKS) >= 1


@pytest.mark.parametrize("line, code", BLOCKS, ids=[f"README.md:{n}" for n, _ in BLOCKS])
def test_readme_example_runs(line, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"README.md:{line}", "exec"), {"__name__": "__readme__"})


def test_a_broken_example_fails():
    """The runner is not vacuous: a block with a wrong name or a failing assert raises."""
    broken = "```python\nfrom resgrad import residual_forward\n```\n"
    wrong = "```python\nfrom resgrad import residual\nassert residual(1.0, abs) == 3.0\n```\n"
    for text, error in ((broken, ImportError), (wrong, AssertionError)):
        ((line, code),) = python_blocks(text)
        with pytest.raises(error):
            exec(compile(code, f"README.md:{line}", "exec"), {})


def readme_commands(root: pathlib.Path = ROOT) -> list[list[str]]:
    """The argv of every ``resgrad`` command in the README's shell blocks, in order."""
    text = (root / "README.md").read_text()
    blocks = [b for b in rf.fenced_blocks(text, "README.md") if b.lang in rf.SHELL_LANGS]
    return [argv for b in blocks for argv in rf.commands(b)]


def _repository_state(root: pathlib.Path) -> dict[str, tuple[int, int]]:
    """Every file of the checkout (not .git, caches or builds) with its size and mtime."""
    # build outputs git ignores: the docs, the API pages, mutmut's copy of the tree
    skip = {".git", "__pycache__", "_build", "generated", "node_modules", "mutants"}
    state = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in skip and not x.startswith(".")
                   and not x.endswith(".egg-info")]  # fmt: skip
        for f in files:
            st = os.stat(os.path.join(d, f))
            state[os.path.relpath(os.path.join(d, f), root)] = (st.st_size, st.st_mtime_ns)
    return state


def test_the_readme_commands_are_found():
    argvs = readme_commands()
    assert ["lesson"] in argvs and ["depth"] in argvs
    assert any(a[:1] == ["train"] for a in argvs) and any(a[:1] == ["flow"] for a in argvs)


def _clone(tmp_path: pathlib.Path) -> pathlib.Path:
    """A fresh clone as the README's reader has one, for what git sees: the README and the
    .gitignore, committed."""
    clone = tmp_path / "clone"
    clone.mkdir()
    for name in ("README.md", ".gitignore"):
        shutil.copyfile(ROOT / name, clone / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "clone"]):
        subprocess.run([*git, *args], cwd=clone, check=True, capture_output=True)
    return clone


def _untracked(clone: pathlib.Path) -> list[str]:
    p = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=clone,
                       check=True, capture_output=True, text=True)  # fmt: skip
    return p.stdout.splitlines()


def test_the_readme_commands_run_as_written_and_leave_the_clone_clean(tmp_path):
    """Every resgrad command of the README's shell blocks (with each block's mkdir first),
    run in a fresh clone: each succeeds, and git status stays clean after them all, as a
    reader finds it (they write under out/, which git ignores); the checkout is left alone."""
    before = _repository_state(ROOT)
    clone = _clone(tmp_path)
    env = {**os.environ, "MPLBACKEND": "Agg"}
    text = (ROOT / "README.md").read_text()
    blocks = [b for b in rf.fenced_blocks(text, "README.md") if b.lang in rf.SHELL_LANGS]
    for b in blocks:
        for line in b.text.splitlines():
            if line.startswith("mkdir "):
                subprocess.run(["bash", "-c", line], cwd=clone, check=True)
        for argv in rf.commands(b):
            p = subprocess.run([sys.executable, "-m", "resgrad", *argv], cwd=clone, env=env,
                               capture_output=True, text=True, timeout=600)  # fmt: skip
            assert p.returncode == 0, (argv, p.stderr[-2000:])
    assert _untracked(clone) == [], "the README's commands wrote where git sees it"
    assert (clone / "out" / "figures" / "flow_schemes.png").exists()
    assert (clone / "out" / "last.ckpt").exists() and (clone / "out" / "gpt2-dir").is_dir()
    after = _repository_state(ROOT)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert changed == [], f"the README's commands wrote into the repository: {changed}"


def test_a_file_written_in_the_clone_is_seen(tmp_path):
    """Not vacuous: a figure written beside the README, outside out/, is one git sees."""
    clone = _clone(tmp_path)
    assert _untracked(clone) == []
    (clone / "flow_schemes.png").write_bytes(b"png")
    (clone / "out").mkdir()
    (clone / "out" / "x.png").write_bytes(b"png")
    assert _untracked(clone) == ["?? flow_schemes.png"]


def test_a_command_writing_into_the_repository_is_caught(tmp_path):
    """Not vacuous: a new file beside the README changes the state the test compares."""
    (tmp_path / "README.md").write_text("# x\n")
    before = _repository_state(tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "f.png").write_bytes(b"png")
    assert _repository_state(tmp_path).keys() - before.keys() == {"docs/f.png"}
