"""Each flag states its default once, in its own help text, and nowhere else.

`resgrad COMMAND --help` prints the parser's help texts, and the command-line reference
(docs/cli.md) is generated from the same parser with sphinx-argparse's own "Default:"
lines turned off (``:nodefault:``), so that the page says what --help says, once. That
holds only if every flag whose default means something writes it in its help.
"""

import argparse
import pathlib

from resgrad.cli import build_parser

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _flags(parser):
    """(command, flag, action) of every flag of every subcommand."""
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        for action in command._actions:
            if action.option_strings and action.help not in (None, argparse.SUPPRESS):
                yield name, action.option_strings[-1], action


def _meaningful(default):
    """A default worth stating: not "not given" (None, False, an empty list)."""
    if default is None or default is False or default is argparse.SUPPRESS:
        return False
    return not (isinstance(default, (tuple, list)) and not default)


def unstated_defaults(parser):
    """(command, flag, default) of every flag with a meaningful default its help never names."""
    return [
        (name, flag, action.default)
        for name, flag, action in _flags(parser)
        if not isinstance(action, (argparse._HelpAction, argparse._VersionAction))
        and _meaningful(action.default)
        and "default" not in action.help.lower()
    ]


def test_every_meaningful_default_is_in_its_help():
    assert unstated_defaults(build_parser()) == []


def test_a_default_left_out_of_a_help_is_caught():
    """Not vacuous: a flag with a default and a help that does not say it is found."""
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub.choices["depth"].add_argument("--colour", default="blue", help="the colour of the table")
    assert unstated_defaults(parser) == [("depth", "--colour", "blue")]


def test_the_cli_reference_leaves_the_defaults_to_the_help_texts():
    page = (ROOT / "docs" / "cli.md").read_text()
    directive = page.split(".. argparse::", 1)[1]
    assert ":nodefault:" in directive.split("```", 1)[0]
