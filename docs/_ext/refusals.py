"""A Sphinx extension that lists the studies' refusals on the errors page from the one place
that holds them, :mod:`resgrad.lab.study.refusals`.

The directive ``refusals`` (in MyST: a ```` ```{refusals} ```` block) renders a ``text``
block of one line per refusal of :data:`resgrad.lab.study.refusals.ALL`, in that order: its
message made from its example, prefixed as its command prints it (``resgrad lesion: error:
...``). Its options filter the list:

``:study:``
    the studies or shared parts to list, comma-separated (``budget, windows, runs``;
    ``lesion``): a refusal's ``study``. All of them by default.
``:library:``
    list the refusals that no command reaches, which the library raises with the bare
    message; without it, the refusals of the commands.

A filter that lists nothing is an error, so a misspelt study fails the build.
``tests/lab/test_refusals.py`` holds every refusal on the page once, in the order of ``ALL``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

from resgrad.lab.study import refusals


def line(refusal: refusals.Refusal) -> str:
    """``refusal``'s example message as its command prints it, or bare for the library's."""
    message = refusal.message(**refusal.example)
    return f"resgrad {refusal.command}: error: {message}" if refusal.command else message


def select(
    studies: Sequence[str] | None = None,
    library: bool = False,
    every: Iterable[refusals.Refusal] = refusals.ALL,
) -> list[refusals.Refusal]:
    """The refusals of ``every`` that the directive lists for these options, in order."""
    return [r for r in every
            if (studies is None or r.study in studies) and (not r.command) == library]  # fmt: skip


def render(studies: Sequence[str] | None = None, library: bool = False) -> str:
    """The text block the directive shows: one :func:`line` per refusal selected."""
    return "\n".join(line(r) for r in select(studies, library))


def _studies(argument: str | None) -> list[str]:
    return [s.strip() for s in (argument or "").split(",") if s.strip()]


class RefusalsDirective(SphinxDirective):
    """``.. refusals::`` with ``:study:`` and ``:library:``: the refusals, one a line."""

    has_content = False
    option_spec = {"study": _studies, "library": directives.flag}

    def run(self) -> list[nodes.Node]:
        studies = self.options.get("study") or None
        library = "library" in self.options
        text = render(studies, library)
        if not text:
            known = ", ".join(sorted({r.study for r in refusals.ALL}))
            raise self.error(f"no refusal of study {studies} (library: {library}) to list; "
                             f"the studies are {known}")  # fmt: skip
        self.env.note_dependency(refusals.__file__)  # the page is rebuilt when they change
        block = nodes.literal_block(text, text, language="text")
        self.set_source_info(block)
        return [block]


def setup(app):
    app.add_directive("refusals", RefusalsDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
