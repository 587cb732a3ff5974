"""Rewrite the README's topic table and the docs front page's guide table from
``resgrad.cli.topics.TOPICS`` (between the ``<!-- topics -->`` and ``<!-- /topics -->``
markers of each), so that the two lists are one: ``python scripts/topics.py``.
tests/test_topics.py fails while either file differs from what this would write.
"""

from __future__ import annotations

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START, END = "<!-- topics -->\n", "<!-- /topics -->\n"


def with_table(text: str, table: str, name: str) -> str:
    """``text`` with the part between its markers replaced by ``table``."""
    pattern = re.compile(re.escape(START) + r".*?" + re.escape(END), re.S)
    if len(pattern.findall(text)) != 1:
        raise SystemExit(f"{name}: expected one {START.strip()} ... {END.strip()} block")
    return pattern.sub(lambda _: START + table + END, text)


def targets() -> dict[str, str]:
    """Each file's path -> its text with the table as TOPICS gives it."""
    from resgrad.cli.topics import front_page_table, readme_table

    out = {}
    for rel, table in (("README.md", readme_table()), ("docs/index.md", front_page_table())):
        path = os.path.join(ROOT, rel)
        with open(path, encoding="utf-8") as f:
            out[path] = with_table(f.read(), table, rel)
    return out


def main() -> int:
    from resgrad.formats.atomic import atomic_write_text

    for path, text in targets().items():
        with open(path, encoding="utf-8") as f:
            if f.read() != text:
                atomic_write_text(path, text)
                print(f"wrote {os.path.relpath(path, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
