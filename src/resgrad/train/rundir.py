"""A run's directory: its file names, reading its metrics back, and holding it while a run writes.

``out_dir`` holds ``last.ckpt`` and ``best.ckpt`` (:mod:`resgrad.formats.checkpoint`),
with ``keep_every`` also ``ckpt-<iter>.ckpt`` (:func:`kept_checkpoints` lists them),
``metrics.jsonl`` (one JSON object per step, ``"kind": "iter"``, and per
evaluation, ``"kind": "eval"``), ``loss.png`` and the dynamics records
(:mod:`resgrad.train.dynamics`). :func:`read_metrics` reads the metrics back,
skipping what a kill or damage left and naming the steps it lacks; :func:`holding_out_dir`
runs a function holding the directory's lock (:mod:`resgrad.formats.lock`).

A run's checkpoints, read back, are checked against the run (one mechanism for every
command that follows a run through its checkpoints: ``paths``, ``lesion``, ``flow`` and
the experiments): :func:`run_identity` is what makes a run that run (its seed and every
setting a resume may not change, its model, the SHA-256 of its text), and
:func:`check_kept` refuses a kept checkpoint whose own iteration is not the one its name
says, or that belongs to another run, naming the file and the field;
:func:`run_problems` lists what is wrong with a whole run directory against the
checkpoints its schedule must have kept (:func:`kept_schedule`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import sys

from resgrad.formats.atomic import remove_stale_temporaries
from resgrad.formats.checkpoint import BEST, LAST, Checkpoint, load_checkpoint
from resgrad.formats.lock import lock_dir, new_dir_or_nothing
from resgrad.formats.sealed import canonical
from resgrad.train.config import RESUMABLE, recorded_settings
from resgrad.train.data import check_text_file
from resgrad.train.dynamics import DYNAMICS_HEADER
from resgrad.train.dynamics import FORMAT as DYNAMICS_FORMAT

__all__ = [
    "METRICS",
    "PLOT",
    "TOKENIZER",
    "check_kept",
    "foreign_files",
    "holding_out_dir",
    "identity_difference",
    "kept_checkpoints",
    "kept_name",
    "kept_schedule",
    "read_metrics",
    "run_fingerprint",
    "run_identity",
    "run_problems",
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
    if upto is not None:
        missing = _missing_steps(records, upto)
        if missing:
            problems.append(f"{METRICS} holds no record of steps {missing} (cut or damaged)")
    return records


def _missing_steps(records: list[dict], upto: int) -> str:
    """The steps before ``upto`` with no ``iter`` record, as ranges ("66..299"); "" if none."""
    have = {r["iter"] for r in records if r["kind"] == "iter"}
    gaps, start = [], None
    for it in range(upto + 1):
        if it < upto and it not in have:
            start = it if start is None else start
        elif start is not None:
            gaps.append(f"{start}..{it - 1}" if it - 1 > start else str(start))
            start = None
    return ", ".join(gaps)


def _started_here(out_dir: str) -> bool:
    """Whether a run started in ``out_dir``: it holds the dynamics header ``train`` writes
    before anything else (a run killed before its first checkpoint leaves it)."""
    try:
        with open(os.path.join(out_dir, DYNAMICS_HEADER), encoding="utf-8") as f:
            return json.load(f).get("format") == DYNAMICS_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def foreign_files(out_dir: str | os.PathLike) -> list[str]:
    """The files of ``out_dir`` that a fresh run would replace and no run wrote (the caller
    has found no checkpoint there): where no run started there (:func:`_started_here`),
    ``loss.png``, ``best.ckpt``, and a ``metrics.jsonl`` with a line that is not one of
    resgrad's records. Empty files hold nothing to lose and are not named."""
    out_dir = os.fspath(out_dir)
    if _started_here(out_dir):  # a run killed before its first checkpoint: its own files
        return []
    out = []
    for name in (METRICS, PLOT, BEST):
        path = os.path.join(out_dir, name)
        if not os.path.isfile(path) or os.path.getsize(path) == 0:
            continue
        problems: list[str] = []
        if name == METRICS and (read_metrics(out_dir, problems=problems) and not problems):
            continue  # resgrad's records, every line: a run's log
        out.append(name)
    return out


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


# --------------------------------------------------------------------------- a run's checkpoints


def run_identity(ckpt: Checkpoint) -> dict | None:
    """What makes a checkpoint's run that run: every setting of its ``TrainConfig`` that a
    resume may not change (its seed among them; not ``max_iters``, ``out_dir`` and the
    rest of :data:`~resgrad.train.config.RESUMABLE`), its model's config, and the SHA-256
    of the text it trained on. Two runs with one identity are one run (a copy). None for a
    checkpoint that records no training settings or text (not written by ``train``)."""
    saved = ckpt.config.get("train") or {}
    if not saved or not ckpt.extra.get("data_sha256"):
        return None
    train = recorded_settings(saved)  # a setting newer than the checkpoint: what it did then
    return {
        "train": {k: v for k, v in sorted(train.items()) if k not in RESUMABLE},
        "model": ckpt.config.get("model"),
        "data_sha256": ckpt.extra.get("data_sha256"),
    }


def run_fingerprint(identity: dict | None) -> str | None:
    """A short digest of :func:`run_identity`: equal for one run, different for two; None
    for a run of no known identity."""
    return None if identity is None else hashlib.sha256(canonical(identity)).hexdigest()[:16]


def identity_difference(a: dict, b: dict) -> str | None:
    """The first field in which the run identities ``a`` and ``b`` differ, in words ("seed 0
    against 1", "the text's SHA-256 0123456789ab against ..."); None if they are one run."""
    if a.get("data_sha256") != b.get("data_sha256"):
        return (f"the text's SHA-256 {str(a.get('data_sha256'))[:12]} against "
                f"{str(b.get('data_sha256'))[:12]}")  # fmt: skip
    for part in ("train", "model"):
        x, y = a.get(part) or {}, b.get(part) or {}
        for k in sorted(set(x) | set(y)):
            if x.get(k) != y.get(k):
                return f"{k} {x.get(k)!r} against {y.get(k)!r}"
    return None


def check_kept(path: str, iteration: int, ckpt: Checkpoint, identity: dict | None = None) -> None:
    """Refuse, in one line naming the file and the field, the kept checkpoint ``ckpt`` read
    from ``path`` (named for ``iteration``) when its own iteration is another (a copy of
    another checkpoint), or, given the ``identity`` of its run, when it belongs to another
    run (:func:`run_identity`; not compared where either is of no known identity).

    Raises
    ------
    ValueError
    """
    if ckpt.iteration != iteration:
        raise ValueError(f"{path!r} is named for iteration {iteration} but its iteration field "
                         f"is {ckpt.iteration}: a copy of another checkpoint")  # fmt: skip
    theirs = run_identity(ckpt)
    if identity is not None and theirs is not None:
        why = identity_difference(identity, theirs)
        if why is not None:
            raise ValueError(f"{path!r} belongs to another run than the run's first checkpoint: "
                             f"{why}")  # fmt: skip


def kept_schedule(max_iters: int, keep_every: int) -> list[int]:
    """The iterations a run of ``max_iters`` steps keeps a checkpoint at with ``keep_every``
    (every multiple of it, and the last): ``TrainConfig.keep_every``'s schedule."""
    if keep_every <= 0:
        return []
    return sorted({*range(0, max_iters + 1, keep_every), max_iters})


def run_problems(out_dir: str, schedule: list[int]) -> list[str]:
    """What is wrong with the run in ``out_dir`` against the kept checkpoints of ``schedule``,
    each in words naming the file: an unreadable checkpoint (truncated, changed: each
    checkpoint's own SHA-256), a kept checkpoint named for another iteration than its own
    or of another run than ``last.ckpt``'s, one kept beside a schedule it is not on, and
    every iteration of ``schedule`` up to ``last.ckpt``'s that kept nothing. [] for a
    sound run (or none yet: no ``last.ckpt`` and nothing kept)."""
    out_dir = os.fspath(out_dir)
    last_path = os.path.join(out_dir, LAST)
    kept = kept_checkpoints(out_dir) if os.path.isdir(out_dir) else []
    if not os.path.exists(last_path):
        return [f"{kept[0][1]!r} is kept but {last_path!r} is gone"] if kept else []
    try:
        last = load_checkpoint(last_path)
    except ValueError as e:
        return [str(e)]
    identity, problems = run_identity(last), []
    for it, path in kept:
        try:
            check_kept(path, it, load_checkpoint(path), identity)
        except ValueError as e:
            problems.append(str(e))
        if it not in schedule:
            problems.append(f"{path!r} is not on the run's schedule of kept checkpoints")
    have = {it for it, _ in kept}
    lost = [it for it in schedule if it <= last.iteration and it not in have]
    if lost:
        problems.append(f"{out_dir!r} kept no checkpoint at iteration(s) "
                        f"{', '.join(map(str, lost))}, which its schedule keeps")  # fmt: skip
    return problems
