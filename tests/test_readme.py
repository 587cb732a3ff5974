"""Every Python example in the README runs, as printed (tests/test_docs.py runs the docs').

Each ```python block is executed in a fresh namespace, in a temporary directory, so an
example that no longer matches the library (a moved module, a renamed argument, a
wrong result caught by the example's own assert) fails here instead of in a reader's
hands. The examples are small enough to run as they stand: nothing is shrunk.
"""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


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
