"""The ``resgrad`` command line: parses flags and calls the library, nothing more.

Every subcommand lives in a module of this package that defines
``register(subparsers)``; each registers its parser and sets ``func``, a
function of the parsed arguments that returns the exit status.

Errors in what the user typed end in one line on stderr and exit status 2,
without a traceback: argparse's own errors, and any ``ValueError`` or
``OSError`` the library raises about a value or a path. So does a
``MemoryError``: the computing commands first compare an upper estimate of
their memory with what is available (resgrad.perf.memory), and a real
MemoryError that gets past the estimate is reported the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

import resgrad
from resgrad.cli import (
    _common,
    bench_cmds,
    check_cmds,
    export_cmds,
    flow_cmds,
    lab_cmds,
    lesion_cmds,
    lesson_cmds,
    paths_cmds,
    train_cmds,
)
from resgrad.lab.study.budget import speak_estimates
from resgrad.nn import kernels
from resgrad.perf.heap import keep_freed_memory
from resgrad.perf.memory import NotEnoughMemory
from resgrad.perf.threads import load_aware_threads, sums_depend_on_count, usable_cores

# one module per group of subcommands, in the order `resgrad --help` lists them
COMMAND_MODULES = [
    lesson_cmds,
    check_cmds,
    flow_cmds,
    paths_cmds,
    lesion_cmds,
    train_cmds,
    export_cmds,
    lab_cmds,
    bench_cmds,
]


def build_parser() -> argparse.ArgumentParser:
    parser = _common.Parser(
        prog="resgrad",
        description="Residual connections and gradient flow, built and proven in NumPy.",
        epilog="`resgrad COMMAND --help` describes a command and its flags.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {resgrad.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_common.Parser)
    sub.required = True
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def _threads(n: int | None):
    """Limit the BLAS (and OpenMP) thread pools to ``n`` threads (``--threads``); when None,
    to one per usable core that other processes leave free, where this BLAS gives the same
    bits on every count, else to one per usable core whatever the load, so that no number
    depends on the load (resgrad.perf.threads)."""
    from threadpoolctl import threadpool_limits

    if n is None:
        n = usable_cores() if sums_depend_on_count() else load_aware_threads()
    return threadpool_limits(limits=n)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush into the closed pipe is silent."""
    with contextlib.suppress(OSError, ValueError):  # stdout may be no file at all (tests)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def leaf(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the command ``args`` ran: ``experiment``'s NAME's, ``train``'s, ..."""
    while subs := [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]:
        parser = subs[0].choices[getattr(args, subs[0].dest)]
    return parser


def _refuse_empty(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit 2, in one line, on the first flag (or argument) given as an empty string.

    No resgrad value may be empty: an empty path would otherwise mean "no plot" or "the
    default directory" without a word, and an empty list or name is a slip of the shell.
    """
    command = leaf(parser, args)
    for action in command._actions:
        value = getattr(args, action.dest, None)
        if value == "" or (isinstance(value, list) and "" in value):
            name = action.option_strings[-1] if action.option_strings else action.dest
            command.error(f"argument {name}: expected a value, got ''")


NO_COMMAND = "no command given; `resgrad --help` lists the commands"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):  # `resgrad` alone: usage and a pointer
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: {NO_COMMAND}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    args.argv = [str(a) for a in (sys.argv[1:] if argv is None else argv)]  # typed, not default
    _refuse_empty(parser, args)
    switch = os.environ.get(kernels.ENV)
    if switch not in (None, "0", "1"):  # the compiled kernels' switch (resgrad.nn.kernels)
        print(f"{args.prog}: error: {kernels.ENV}={switch!r}; expected 0 (NumPy's "
              "passes, the reference) or 1 (the compiled kernels)", file=sys.stderr)  # fmt: skip
        return 2
    keep_freed_memory()  # the command owns the process: reuse NumPy's freed arrays (heap.py)
    speak_estimates(getattr(args, "measures", False))  # paths, lesion, flow: a line off a tty
    try:
        with _threads(getattr(args, "threads", None)):
            return int(args.func(args) or 0)
    except BrokenPipeError:  # the reader left (`resgrad sample ... | head`): a quiet end
        _quiet_stdout()
        return 0
    except (ValueError, OSError) as e:  # after BrokenPipeError, one of the OSErrors
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"{args.prog}: error: {msg}", file=sys.stderr)
        return 2
    except MemoryError as e:  # NotEnoughMemory (an estimate, before allocating) or the real one
        msg = str(e).splitlines()[0] if str(e) else "no detail given"
        if not isinstance(e, NotEnoughMemory):
            msg = f"out of memory ({msg}); choose smaller sizes"
        print(f"{args.prog}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # one line: what was kept and how to resume, where anything is
        kept = getattr(args, "interrupted", None)
        print(f"{args.prog}: interrupted" + (f"; {kept()}" if kept else ""), file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
