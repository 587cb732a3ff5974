"""What the mutation run prints: the --list lines, the table's header and rows, and the
summary of kills, in all and per class of bug."""

from __future__ import annotations

import os

from mutation import KINDS, Mutant


def list_line(i: int, m: Mutant) -> str:
    """One line of --list: number, class of bug, file, name."""
    return f"{i:>3}  {m.kind:<11} {m.file:<22} {m.name}"


def header() -> str:
    """The table's header and the rule under it."""
    line = f"{'#':>3}  {'mutant':<58} {'file':<22} {'tests run':<34} result"
    return f"{line}\n{'-' * len(line)}"


def row(i: int, m: Mutant, killed: bool) -> str:
    """The table's row of one mutant, once it has run."""
    tests = ", ".join(os.path.basename(t) for t in m.tests)
    return (f"{i:>3}  {m.name:<58} {m.file:<22} {tests:<34} "
            f"{'killed' if killed else 'SURVIVED'}")  # fmt: skip


def summary(mutants: list[Mutant], survived: list[Mutant], seconds: float) -> str:
    """The kills in all, after a blank line."""
    n = len(mutants)
    return (f"\n{n - len(survived)} of {n} killed, {len(survived)} survived "
            f"({seconds:.0f} s)")  # fmt: skip


def per_kind(mutants: list[Mutant], survived: list[Mutant]) -> str:
    """The kills per class of bug, one line each, in KINDS' order."""
    lines = ["per class:"]
    for kind in KINDS:
        n = sum(m.kind == kind for m in mutants)
        if n:
            s = sum(m.kind == kind for m in survived)
            lines.append(f"  {kind:<12} {n - s:>4} of {n:<4} killed")
    return "\n".join(lines)
