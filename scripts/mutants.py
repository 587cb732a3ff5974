"""The mutation run's entry point: plant realistic bugs one at a time and check that the
tests catch each (see scripts/mutation/runner.py, or --help).

    python scripts/mutants.py --list        # the table of mutants, without running
    python scripts/mutants.py --jobs 2      # all of them, two at a time

The mutants are in scripts/mutation/areas/*.py, one file per area.
"""

from __future__ import annotations

import os
import sys

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
if SCRIPTS not in sys.path:  # run by path from anywhere, or loaded by path by the tests
    sys.path.insert(0, SCRIPTS)

from mutation import KINDS, Mutant, all_mutants  # noqa: E402
from mutation.runner import main  # noqa: E402

MUTANTS: list[Mutant] = all_mutants()  # every area's

__all__ = ["KINDS", "MUTANTS", "Mutant", "main"]

if __name__ == "__main__":
    sys.exit(main())
