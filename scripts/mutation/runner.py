"""Mutation run: plant realistic bugs one at a time and check that the tests catch each.

Each mutant replaces one exact piece of source (found exactly once) by a plausible
mistake: a backward pass that drops a term, AdamW with the wrong beta, a training
loop that skips clipping or evaluates with dropout on, a checkpoint that is not
verified, a sampler with an off-by-one mask. For every mutant the source and the
tests are copied to a fresh temporary directory, the mutation is applied to the
copy, and the test files that cover that module run there (``pytest -x``, with
``PYTHONPATH`` pointing at the copy). The working tree is never modified, and is read
once: every mutant is copied from the snapshot the baseline passed on, so an edit made
while a long run goes on changes nothing in it.

A mutant is *killed* when its tests fail, and *survives* when they pass. The run
first checks that every test subset passes on the unmutated copy (otherwise a
"kill" would mean nothing), then prints one row per mutant and exits 1 if any
survived.

The mutants are in scripts/mutation/areas/*.py, one file per area; the classes of bug
(KINDS) and the Mutant record in scripts/mutation/__init__.py.

    python scripts/mutants.py               # all mutants
    python scripts/mutants.py --no-torch    # the same with PyTorch hidden: the
                                            # torch-free tests alone must kill them
    python scripts/mutants.py --only adamw  # mutants whose name contains "adamw"
    python scripts/mutants.py --kind bounds # the mutants of one class of bug (KINDS)
    python scripts/mutants.py --list        # the table of mutants, without running
    python scripts/mutants.py --jobs 2      # two mutants at a time (one BLAS thread each)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from mutation import KINDS, Mutant, all_mutants, table

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

NO_TORCH = "raise ImportError('hidden by scripts/mutants.py --no-torch')\n"


def _copy_tree(dst: str, src: str = ROOT) -> None:
    for d in ("src", "tests", "benchmarks"):  # tests read benchmarks/ scripts' models
        shutil.copytree(
            os.path.join(src, d), os.path.join(dst, d),
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )  # fmt: skip
    shutil.copy(os.path.join(src, "pyproject.toml"), dst)


def _apply(root: str, m: Mutant) -> None:
    path = os.path.join(root, "src", "resgrad", m.file)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    n = text.count(m.old)
    if n != 1:
        raise SystemExit(f"mutant {m.name!r}: its source text occurs {n} times in {m.file}")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace(m.old, m.new))


MUTANT_TIMEOUT_S = 600  # a mutant's tests still running after this hang: the suite fails


def _pytest(root: str, tests: tuple[str, ...], hide_torch: bool, jobs: int = 1,
            timeout: float | None = None) -> tuple[int, str]:  # fmt: skip
    paths = [os.path.join(root, "src")]
    if hide_torch:
        shim = os.path.join(root, "_no_torch")
        os.makedirs(shim, exist_ok=True)
        with open(os.path.join(shim, "torch.py"), "w") as f:
            f.write(NO_TORCH)
        paths.insert(0, shim)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "MPLBACKEND": "Agg"}
    if jobs > 1:  # several pytest runs share the cores: one BLAS thread each
        env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = "1"
    env.pop("RESGRAD_REQUIRE_TORCH", None)  # with torch hidden, its tests skip
    try:
        p = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-m", "not slow", "-p",
             "no:cacheprovider", *tests],
            cwd=root, env=env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
    except subprocess.TimeoutExpired:  # a test the mutant made hang: it does not pass
        return 124, f"timed out after {timeout:.0f} s"
    lines = (p.stdout + p.stderr).strip().splitlines()
    return p.returncode, lines[-1] if lines else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--no-torch", action="store_true", help="hide PyTorch from the tests")
    ap.add_argument("--only", default="", help="run the mutants whose name contains this")
    ap.add_argument("--kind", choices=KINDS, help="run the mutants of this class of bug")
    ap.add_argument("--list", action="store_true", help="print the mutants and exit")
    ap.add_argument("--jobs", type=int, default=1, help="mutants run at once (default 1)")
    args = ap.parse_args(argv)
    mutants = [m for m in all_mutants() if args.only.lower() in m.name.lower()
               and args.kind in (None, m.kind)]  # fmt: skip
    if args.list:
        for i, m in enumerate(mutants, 1):
            print(table.list_line(i, m))
        return 0
    if not mutants:
        print(f"no mutant matches {args.only!r}", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="resgrad-mutants-") as tmp:
        # the baseline: every subset must pass unmutated, or a "kill" means nothing
        base = os.path.join(tmp, "base")
        _copy_tree(base)
        subsets = sorted({m.tests for m in mutants})
        rc, last = _pytest(base, tuple(t for s in subsets for t in s), args.no_torch)
        if rc != 0:
            print(f"the unmutated tests fail ({last}); fix them first", file=sys.stderr)
            return 2
        print(f"baseline: the unmutated tests pass ({last})")
        torch_note = ", PyTorch hidden" if args.no_torch else ""
        print(f"{len(mutants)} mutants, each run in a fresh copy{torch_note}\n")
        print(table.header())
        survived = []
        t0 = time.perf_counter()

        def run_one(i: int, m: Mutant) -> bool:
            work = os.path.join(tmp, f"m{i}")
            _copy_tree(work, base)  # the snapshot the baseline passed on, not the working tree
            _apply(work, m)
            rc, _ = _pytest(work, m.tests, args.no_torch, args.jobs, MUTANT_TIMEOUT_S)
            shutil.rmtree(work)
            if rc == 5:  # no tests collected, which proves nothing
                raise SystemExit(f"mutant {m.name!r}: no tests collected from {m.tests}")
            return rc != 0

        # mutants are independent copies: --jobs of them run at once, reported in order
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(run_one, i, m) for i, m in enumerate(mutants, 1)]
            for i, (m, fut) in enumerate(zip(mutants, futures), 1):
                killed = fut.result()
                if not killed:
                    survived.append(m)
                print(table.row(i, m, killed), flush=True)
    print(table.summary(mutants, survived, time.perf_counter() - t0))
    print(table.per_kind(mutants, survived))
    return 1 if survived else 0
