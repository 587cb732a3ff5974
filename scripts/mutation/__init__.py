"""The mutation run's mutants: the bug classes (KINDS), the Mutant record, the test
subsets a mutant names, and every area's mutants (areas/*.py, one file per area).

scripts/mutants.py is the entry point; runner.py runs the mutants and table.py prints them.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass

# the test subsets the mutants run, by name (an area may name its own beside these)
ATOMIC = ("tests/formats/test_atomic.py",)
BLOCKS = ("tests/nn/test_blocks.py",)
BPE = ("tests/train/test_bpe.py",)
CHECKPOINT = ("tests/formats/test_checkpoint.py",)
CLAIMS = ("tests/lab/test_claims.py",)
CLI_LAB = ("tests/cli/test_cli_lab.py",)
DATA = ("tests/train/test_data.py",)
DEPTHTRAIN = ("tests/lab/test_depthtrain.py",)
DYNAMICS = ("tests/train/test_dynamics.py",)
EXPERIMENTS = ("tests/lab/test_experiments.py",)
EXPLORE = ("tests/lab/test_explore.py",)
FLOW = ("tests/lab/test_flow.py",)
HF = ("tests/formats/test_hf.py",)
HF_CLI_PRETRAINED = ("tests/formats/test_hf.py", "tests/cli/test_cli_pretrained.py")
HF_NANOGPT = ("tests/formats/test_hf.py", "tests/formats/test_nanogpt.py")
LAYERS = ("tests/nn/test_layers.py",)
LAYERS_TORCH_PARITY = ("tests/nn/test_layers.py", "tests/verify/test_torch_parity.py")
KERNELS = ("tests/nn/test_kernels.py",)
LAYERS_KERNELS = ("tests/nn/test_layers.py", "tests/nn/test_kernels.py")
LESSON = ("tests/lab/test_lesson.py",)
LOCK = ("tests/formats/test_lock.py",)
LOOP = ("tests/train/test_loop.py",)
LOOP_CHECKPOINT_COMPAT = ("tests/train/test_loop.py", "tests/train/test_checkpoint_compat.py")
LOOP_DYNAMICS = ("tests/train/test_loop.py", "tests/train/test_dynamics.py")
MODEL = ("tests/nn/test_model.py",)
NANOGPT = ("tests/formats/test_nanogpt.py",)
OPTIM = ("tests/train/test_optim.py",)
PATHS = ("tests/lab/test_paths.py",)
KEEP_EVERY = ("tests/train/test_keep_every.py",)
PLOTS = ("tests/test_plots.py",)
PRETRAINED = ("tests/train/test_pretrained.py",)
PRETRAINED_CLI_PRETRAINED = ("tests/train/test_pretrained.py", "tests/cli/test_cli_pretrained.py")
REALFLOW = ("tests/lab/test_realflow.py",)
RECORDS = ("tests/formats/test_records.py",)
RESIDUAL = ("tests/nn/test_residual.py",)
RUNDIR = ("tests/train/test_rundir.py",)
RUNS = ("tests/lab/test_runs.py",)
SAMPLE = ("tests/train/test_sample.py",)
SHARDS = ("tests/train/test_shards.py",)
SWEEP = ("tests/lab/test_sweep.py",)
EVENTS = ("tests/formats/test_events.py",)
TRACKERS = ("tests/train/test_trackers.py",)
DASHBOARDS = ("tests/cli/test_cli_dashboards.py",)

# the classes of bug a mutant plants; the run reports its kills per class
KINDS = (
    "formula",  # a wrong formula: a backward term, an optimizer constant, a loss
    "statistics",  # a figure written to a table: std's ddof, a range's ties or endpoint
    "bounds",  # a limit off by one, inclusive where it is exclusive
    "refusal",  # a check of bad input or a bad file dropped or weakened
    "ordering",  # an order-sensitive output: listdir order, search order, iteration order
    "durability",  # fsync, rename, atomic writes, resume after a kill, cleanup
    "records",  # values written to a record or file: a field, its type, its source
    "names",  # names and layouts: tags, run names, keys
    "aliases",  # another tool's names for the same thing (HF config, nanoGPT keys)
    "cache",  # the key of a cached or reused result missing a field
    "concurrency",  # locks, workers, watchdogs, processes
)


@dataclass(frozen=True)
class Mutant:
    name: str  # what the bug is
    file: str  # under src/resgrad/
    old: str  # exact source text, found exactly once
    new: str  # the bug
    tests: tuple[str, ...]  # the test files that should catch it
    kind: str  # the class of bug: one of KINDS

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"mutant {self.name!r}: kind {self.kind!r} is not one of {KINDS}")


def all_mutants() -> list[Mutant]:
    """Every mutant: the areas' lists (areas/*.py) in the order of their file names, each
    area's list in its own order."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "areas")
    names = sorted(f[:-3] for f in os.listdir(here) if f.endswith(".py") and f != "__init__.py")
    out: list[Mutant] = []
    for name in names:
        out.extend(importlib.import_module(f"{__name__}.areas.{name}").MUTANTS)
    return out
