"""One list of the topics (resgrad.cli.topics.TOPICS): the README's table, the docs front
page's guide table, the guide's table of contents and the commands of ``resgrad --help`` are
held to it, so that a study added to one cannot be missed in another."""

import argparse
import importlib.util
import pathlib
import re

import pytest

from resgrad.cli import build_parser
from resgrad.cli.topics import TOPICS, commands, front_page_table, readme_table

ROOT = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("topics_script", ROOT / "scripts" / "topics.py")
script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(script)


def leaf_commands(parser=None, prefix="") -> list[str]:
    """Every command ``resgrad`` runs, ``experiment NAME`` for each experiment."""
    parser = parser or build_parser()
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [prefix.strip()]
    return [c for name, p in subs[0].choices.items() for c in leaf_commands(p, f"{prefix} {name}")]


@pytest.mark.parametrize("rel", ["README.md", "docs/index.md"])
def test_the_tables_are_written_from_the_topics(rel):
    path = str(ROOT / rel)
    want = script.targets()[path]
    assert (ROOT / rel).read_text(encoding="utf-8") == want, (
        f"{rel}'s topic table is not TOPICS'; run python scripts/topics.py"
    )


def test_every_page_of_the_guide_is_a_topic_in_its_order():
    toc = (ROOT / "docs" / "guide" / "index.md").read_text(encoding="utf-8")
    block = re.search(r"```\{toctree\}\n(.*?)```", toc, re.S)[1]
    pages = [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.startswith(":")]
    assert pages == [t.page for t in TOPICS]
    on_disk = {p.stem for p in (ROOT / "docs" / "guide").glob("*.md")} - {"index"}
    assert on_disk == set(pages)


def test_every_command_belongs_to_a_topic_and_every_topic_command_exists():
    leaves = leaf_commands()
    assert "experiment robustness" in leaves and "lesson" in leaves  # the walk reaches them
    assert sorted(set(leaves) - set(commands())) == []
    assert sorted(set(commands()) - set(leaves)) == []


def test_each_table_names_every_page_once():
    for table, link in ((readme_table(), "docs/guide/{}.md"), (front_page_table(), "guide/{}.md")):
        for t in TOPICS:
            assert table.count(f"]({link.format(t.page)})") == 1, t.page


def test_a_missing_table_is_refused():
    with pytest.raises(SystemExit, match="expected one"):
        script.with_table("# no markers\n", "| x |\n", "x.md")
    text = f"a\n{script.START}| old |\n{script.END}b\n"
    new = f"a\n{script.START}| new |\n{script.END}b\n"
    assert script.with_table(text, "| new |\n", "x.md") == new
