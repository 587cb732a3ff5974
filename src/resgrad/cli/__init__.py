"""The ``resgrad`` command line: parses flags and calls the library, nothing more.

Every subcommand lives in a module of this package that defines
``register(subparsers)``; each registers its parser and sets ``func``, a
function of the parsed arguments that returns the exit status.

Errors in what the user typed end in one line on stderr and exit status 2,
without a traceback: argparse's own errors, and any ``ValueError`` or
``OSError`` the library raises about a value or a path.
"""

from __future__ import annotations

import argparse
import sys

from resgrad.cli import (
    _common,
    bench_cmds,
    check_cmds,
    export_cmds,
    flow_cmds,
    lesson_cmds,
    train_cmds,
)
from resgrad.perf.heap import keep_freed_memory

# one module per group of subcommands, in the order `resgrad --help` lists them
COMMAND_MODULES = [lesson_cmds, check_cmds, flow_cmds, train_cmds, export_cmds, bench_cmds]


def build_parser() -> argparse.ArgumentParser:
    parser = _common.Parser(
        prog="resgrad",
        description="Residual connections and gradient flow, built and proven in NumPy.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_common.Parser)
    sub.required = True
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    keep_freed_memory()  # the command owns the process: reuse NumPy's freed arrays (heap.py)
    try:
        return int(args.func(args) or 0)
    except (ValueError, OSError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"resgrad {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"resgrad {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `resgrad depth | head -1`
        return 0


if __name__ == "__main__":
    sys.exit(main())
