"""Run a fixed set of study commands and record every byte they print or draw.

A refactor of the studies (``paths``, ``lesion``, ``flow``, ``sweep``, ``claims``) must
leave their outputs byte-identical for the same seeds. This script trains three tiny runs
that keep checkpoints (and one of another scheme, for the refusal of unlike runs), runs
each command of :data:`COMMANDS` once, and writes, per command, its exit status, stdout,
stderr and any figure, with a ``MANIFEST`` of SHA-256 sums:

    python scripts/study_outputs.py OUT_DIR           # run and record
    python scripts/study_outputs.py OUT_DIR --against OLD_DIR
                                                      # ... then compare with an earlier record

Paths in the outputs are written relative to OUT_DIR (``{W}``), so that two records made in
different directories compare. Run it twice on one commit to see it give the same bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import os
import sys

TEXT = "the quick brown fox jumps over the lazy dog. " * 40
TRAIN = ["--n-layer", "2", "--n-head", "2", "--n-embd", "16", "--block-size", "16",
         "--batch-size", "4", "--warmup-iters", "1", "--lr-decay-iters", "6", "--lr", "1e-2",
         "--eval-iters", "1", "--eval-interval", "3", "--max-iters", "6", "--keep-every", "3",
         "--threads", "1", "--data", "{W}/data.txt"]  # fmt: skip
RUNS = {"A": ["--seed", "1"], "B": ["--seed", "2"], "C": ["--seed", "3"],
        "D": ["--seed", "1", "--variant", "post-ln"]}  # fmt: skip
M = ["--text", "{W}/data.txt", "--seq", "8", "--batch", "2", "--threads", "1"]

# name -> argv; {W} is the record's directory; a figure is named after its command
# fmt: off
COMMANDS: dict[str, list[str]] = {
    "paths-lesson": ["paths", "lesson"],
    "paths-lesson-veit-json": ["paths", "lesson", "--depth", "8", "--seeds", "2", "--veit", "20",
                               "--format", "json"],
    "paths-lesson-csv": ["paths", "lesson", "--depth", "6", "--format", "csv"],
    "paths-lesson-plot": ["paths", "lesson", "--depth", "6", "--veit", "5",
                          "--plot", "{W}/paths-lesson.png"],
    "paths-model": ["paths", "{W}/A", *M, "--seeds", "2", "--veit", "5",
                    "--plot", "{W}/paths-model.png"],
    "paths-model-json": ["paths", "{W}/A", *M, "--veit", "3", "--format", "json"],
    "paths-model-csv": ["paths", "{W}/A", *M, "--format", "csv"],
    "paths-every": ["paths", "{W}/A", "--every-checkpoint", *M, "--seeds", "2"],
    "paths-every-json": ["paths", "{W}/A", "--every-checkpoint", *M, "--format", "json"],
    "paths-every-csv": ["paths", "{W}/A", "--every-checkpoint", *M, "--format", "csv"],
    "paths-runs": ["paths", "{W}/A", "{W}/B", "{W}/C", "--every-checkpoint", *M],
    "paths-runs-json": ["paths", "{W}/A", "{W}/B", "--every-checkpoint", *M, "--format", "json"],
    "paths-runs-csv": ["paths", "{W}/A", "{W}/B", "--every-checkpoint", *M, "--format", "csv"],
    "lesion-lesson": ["lesion", "lesson"],
    "lesion-lesson-json": ["lesion", "lesson", "--depth", "8", "--seeds", "2", "--format", "json",
                           "--plot", "{W}/lesion-lesson.svg"],
    "lesion-lesson-csv": ["lesion", "lesson", "--depth", "6", "--plain", "--format", "csv"],
    "lesion-model": ["lesion", "{W}/A", *M, "--plot", "{W}/lesion-model.png"],
    "lesion-model-json": ["lesion", "{W}/A", *M, "--what", "block,swap", "--format", "json"],
    "lesion-model-csv": ["lesion", "{W}/A", *M, "--k", "1", "--samples", "2", "--format", "csv"],
    "lesion-runs": ["lesion", "{W}/A", "{W}/B", "{W}/C", *M, "--plot", "{W}/lesion-runs.png"],
    "lesion-runs-json": ["lesion", "{W}/A", "{W}/B", *M, "--what", "attn,mlp", "--format", "json"],
    "lesion-every": ["lesion", "{W}/A", "--every-checkpoint", *M],
    "lesion-every-json": ["lesion", "{W}/A", "--every-checkpoint", *M, "--what", "block",
                          "--format", "json"],
    "lesion-every-csv": ["lesion", "{W}/A", "--every-checkpoint", *M, "--what", "swap",
                         "--format", "csv"],
    "lesion-every-runs": ["lesion", "{W}/A", "{W}/B", "{W}/C", "--every-checkpoint", *M],
    "flow": ["flow", "--variant", "pre-ln,post-ln,rezero", "--depth", "4", "--width", "16",
             "--seeds", "2", "--plot", "{W}/flow.png"],
    "flow-json": ["flow", "--variant", "deepnorm", "--depth", "3", "--width", "16",
                  "--format", "json"],
    "flow-csv": ["flow", "--variant", "none,lesson-residual", "--depth", "3", "--width", "16",
                 "--format", "csv"],
    "flow-pretrained": ["flow", "--from-pretrained", "{W}/A", *M, "--seeds", "2"],
    "sweep": ["sweep", "--variants", "pre-ln,residual", "--depths", "2,3", "--widths", "16",
              "--seeds", "2", "--jobs", "1", "--out", "{W}/sweep.csv", "--plot", "{W}/sweep.png"],
    "depth": ["depth", "--per-layer"],
    # refusals: one line on stderr, exit 2
    "refuse-unlike-paths": ["paths", "{W}/A", "{W}/D", "--every-checkpoint", *M],
    "refuse-unlike-lesion": ["lesion", "{W}/A", "{W}/D", *M],
    "refuse-unlike-lesion-every": ["lesion", "{W}/A", "{W}/D", "--every-checkpoint", *M],
    "refuse-budget-paths": ["paths", "lesson", "--veit", "1000000000"],
    "refuse-budget-lesion": ["lesion", "{W}/A", *M, "--budget", "0.001"],
    "refuse-budget-lesion-every": ["lesion", "{W}/A", "--every-checkpoint", *M,
                                   "--budget", "0.001"],
    "refuse-seq": ["paths", "{W}/A", "--text", "{W}/data.txt", "--threads", "1"],
    "refuse-seq-lesion": ["lesion", "{W}/A", "--text", "{W}/data.txt", "--threads", "1"],
    "refuse-twice-paths": ["paths", "{W}/A", "{W}/A/", "--every-checkpoint", *M],
    "refuse-twice-lesion": ["lesion", "lesson", "lesson"],
    "refuse-lesson-alone": ["lesion", "lesson", "{W}/A"],
    "refuse-lesson-every": ["lesion", "lesson", "--every-checkpoint"],
    "refuse-paths-several": ["paths", "{W}/A", "{W}/B", *M],
    "refuse-k": ["lesion", "lesson", "--k", "21"],
    "refuse-samples": ["lesion", "lesson", "--samples", "10001"],
    "refuse-sample-seed": ["lesion", "lesson", "--sample-seed", "4294967296"],
    "refuse-block": ["lesion", "lesson", "--blocks", "20"],
    "refuse-flags-lesson": ["paths", "lesson", "--seq", "8"],
    "refuse-flags-model": ["lesion", "{W}/A", "--depth", "3", *M],
    "refuse-flags-every": ["paths", "{W}/A", "--every-checkpoint", "--veit", "2", *M],
    "refuse-no-keep": ["paths", "{W}/E", "--every-checkpoint", *M],
}
# fmt: on


def _sub(argv: list[str], w: str) -> list[str]:
    return [a.replace("{W}", w) for a in argv]


def _run(argv: list[str]) -> tuple[int, str, str]:
    from resgrad.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse's errors
            rc = e.code
    return int(rc or 0), out.getvalue(), err.getvalue()


def record(w: str) -> dict[str, str]:
    """Train the runs in ``w``, run every command, write its outputs; the SHA-256 of each."""
    os.makedirs(w, exist_ok=True)
    with open(os.path.join(w, "data.txt"), "w", encoding="utf-8") as f:
        f.write(TEXT)
    for name, flags in RUNS.items():
        if not os.path.isdir(os.path.join(w, name)):
            rc, _, err = _run(["train", *_sub(TRAIN, w), *flags, "--out-dir", f"{w}/{name}"])
            assert rc == 0, err
    e = os.path.join(w, "E")  # a run that kept no checkpoint per step
    if not os.path.isdir(e):
        no_keep = TRAIN[: TRAIN.index("--keep-every")] + TRAIN[TRAIN.index("--keep-every") + 2 :]
        rc, _, err = _run(["train", *_sub(no_keep, w), "--out-dir", e])
        assert rc == 0, err
    sums = {}
    for name, argv in COMMANDS.items():
        rc, out, err = _run(_sub(argv, w))
        text = f"rc {rc}\n--- stdout\n{out}--- stderr\n{err}".replace(w, "{W}")
        path = os.path.join(w, f"{name}.out")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        sums[f"{name}.out"] = hashlib.sha256(text.encode()).hexdigest()
    for f in sorted(os.listdir(w)):
        if f.endswith((".png", ".svg", ".csv")):
            with open(os.path.join(w, f), "rb") as fh:
                sums[f] = hashlib.sha256(fh.read()).hexdigest()
    with open(os.path.join(w, "MANIFEST"), "w", encoding="utf-8") as f:
        f.writelines(f"{h}  {n}\n" for n, h in sorted(sums.items()))
    return sums


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--against", metavar="OLD_DIR", help="compare with this earlier record")
    args = ap.parse_args(argv)
    w = os.path.abspath(args.out_dir)
    sums = record(w)
    print(f"{len(sums)} outputs recorded in {w}/MANIFEST")
    if not args.against:
        return 0
    old = {}
    with open(os.path.join(args.against, "MANIFEST"), encoding="utf-8") as f:
        for line in f:
            h, n = line.split()
            old[n] = h
    differ = sorted(n for n in set(old) | set(sums) if old.get(n) != sums.get(n))
    for n in differ:
        print(f"differs: {n}")
    print(f"{len(sums) - len(differ)} of {len(set(old) | set(sums))} identical")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
