"""A run's directory: its file names, reading its metrics back, and holding it while a run writes.

``out_dir`` holds ``last.ckpt`` and ``best.ckpt`` (:mod:`resgrad.formats.checkpoint`),
with ``keep_every`` also ``ckpt-<iter>.ckpt`` (:func:`kept_checkpoints` lists them),
``metrics.jsonl`` (one JSON object per step, ``"kind": "iter"``, and per
evaluation, ``"kind": "eval"``), ``loss.png`` and the dynamics records
(:mod:`resgrad.train.dynamics`). :func:`read_metrics` reads the metrics back,
skipping what a kill or damage left; :func:`holding_out_dir` runs a function
holding the directory's lock (:mod:`resgrad.formats.lock`).
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys

from resgrad.formats.atomic import remove_stale_temporaries
from resgrad.formats.lock import lock_dir, new_dir_or_nothing
from resgrad.train.data import check_text_file

__all__ = [
    "METRICS",
    "PLOT",
    "TOKENIZER",
    "holding_out_dir",
    "kept_checkpoints",
    "kept_name",
    "read_metrics",
]

METRICS = "metrics.jsonl"
PLOT = "loss.png"
TOKENIZER = "tokenizer.json"  # a BPE run's tokenizer, as transformers reads it
_KEPT = re.compile(r"ckpt-(0|[1-9][0-9]*)\.ckpt")  # a checkpoint kept at one iteration
_KEPT_TMP = re.compile(r"\.(ckpt-[0-9]+\.ckpt)\.[^.]+\.tmp")  # a killed write's temporary


def kept_name(iteration: int) -> str:
    """The file name of the checkpoint kept at ``iteration`` (``TrainConfig.keep_every``)."""
    return f"ckpt-{int(iteration)}.ckpt"


def kept_checkpoints(out_dir: str | os.PathLike) -> list[tuple[int, str]]:
    """(iteration, path) of every ``ckpt-<iter>.ckpt`` in ``out_dir``, by iteration."""
    out_dir = os.fspath(out_dir)
    found = []
    for entry in os.listdir(out_dir):
        m = _KEPT.fullmatch(entry)
        if m and os.path.isfile(os.path.join(out_dir, entry)):
            found.append((int(m.group(1)), os.path.join(out_dir, entry)))
    return sorted(found)


def kept_temporaries(out_dir: str | os.PathLike) -> list[str]:
    """The names of the kept checkpoints whose atomic writes left a temporary behind."""
    return sorted({m.group(1) for e in os.listdir(os.fspath(out_dir))
                   if (m := _KEPT_TMP.fullmatch(e))})  # fmt: skip


_RECORD_FIELDS = {"iter": ("loss",), "eval": ("train_loss", "val_loss")}  # beside "iter"


def _is_record(r) -> bool:
    """Whether ``r`` is a step or evaluation record as :func:`train` writes them."""
    if not isinstance(r, dict) or r.get("kind") not in _RECORD_FIELDS:
        return False
    it = r.get("iter")
    if isinstance(it, bool) or not isinstance(it, int):
        return False
    return all(isinstance(r.get(k), (int, float)) for k in _RECORD_FIELDS[r["kind"]])


def read_metrics(
    out_dir: str | os.PathLike, upto: int | None = None, problems: list[str] | None = None
) -> list[dict]:
    """The records of ``out_dir/metrics.jsonl``; a torn last line (a killed run) is skipped.

    With ``upto``, only records of steps before ``upto`` and evaluations at or before it.
    Lines that are not records :func:`train` writes (foreign or damaged) are skipped
    too; with ``problems``, each is described there, as is a missing file.
    """
    problems = [] if problems is None else problems
    path = os.path.join(os.fspath(out_dir), METRICS)
    if not os.path.exists(path):
        problems.append(f"{METRICS} is missing")
        return []
    records = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                if line.endswith("\n"):  # not the tail a kill cut short: damage
                    problems.append(f"line {n} of {METRICS} is not JSON (skipped)")
                continue
            if not _is_record(r):
                problems.append(f"line {n} of {METRICS} is not a resgrad record (skipped)")
                continue
            if upto is not None:
                if r["iter"] >= upto if r["kind"] == "iter" else r["iter"] > upto:
                    continue
            records.append(r)
    return records


def holding_out_dir(*names: str):
    """Run ``fn(cfg, ...)`` holding the lock of ``cfg.out_dir`` (resgrad.formats.lock).

    A second run into the same directory fails at once (``Locked``, an OSError)
    naming the directory and the holder. Under the lock, the temporaries of
    ``names`` that a killed atomic write left behind are removed first.
    """

    def wrap(fn):
        @functools.wraps(fn)
        def run(cfg, *args, **kwargs):
            if getattr(cfg, "data", None) is not None:  # a bad path: refused before any mkdir
                check_text_file(cfg.data)
            # a run refused before it wrote anything (bad text, a model that will not load)
            # takes away the directory it made
            with new_dir_or_nothing(cfg.out_dir), lock_dir(cfg.out_dir):
                kept = kept_temporaries(cfg.out_dir)  # keep_every's, named by iteration
                removed = remove_stale_temporaries(cfg.out_dir, (*names, *kept))
                if removed:
                    say = kwargs.get("log") or (lambda s: print(s, file=sys.stderr))
                    say(f"removed {len(removed)} temporary file(s) a killed run left in "
                        f"{cfg.out_dir!r}")  # fmt: skip
                return fn(cfg, *args, **kwargs)

        return run

    return wrap
