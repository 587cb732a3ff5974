"""Gradient paths through training: the split at every checkpoint a run kept, across runs.

Runs (or one run's checkpoints) are compared only when they share their scheme, shape,
vocabulary and text tokens (:class:`RunModel`, :func:`check_comparable`), which the lesion
studies check too (:mod:`resgrad.lab.lesion`). Legend: R = runs.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from resgrad.lab.paths import PathRow, PathSplit, Tick, effective_range, model_splits, path_table

__all__ = [
    "CheckpointPaths",
    "RunModel",
    "RunPlan",
    "RunsRow",
    "across_runs",
    "check_comparable",
    "plan_runs",
    "run_checkpoint_paths",
    "run_model",
]


# --------------------------------------------------------------------------- through training


class RunModel(NamedTuple):
    """What runs (or one run's checkpoints) must share for their splits to be compared:
    the model's scheme and shape, its vocabulary, and the token ids of the text the
    windows are drawn from (the same windows are the same token ids)."""

    scheme: str  # GPTConfig.variant: pre-ln, post-ln, ...
    depth: int  # n_layer
    width: int  # n_embd
    heads: int  # n_head
    vocabulary: str  # described: "20 characters 'abc...'", "bpe of 512 tokens (sha256 ...)"
    tokens: str  # the text under that vocabulary: "1,000 tokens, sha256 0123456789ab"


FIELD_NAMES = {
    "scheme": "scheme", "depth": "depth (n_layer)", "width": "width (n_embd)",
    "heads": "heads (n_head)", "vocabulary": "vocabulary", "tokens": "the text's token ids",
}  # fmt: skip


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


def run_model(cfg, ckpt, ids: np.ndarray | None) -> RunModel:
    """The :class:`RunModel` of a checkpoint (its GPTConfig ``cfg`` and its
    :class:`~resgrad.formats.checkpoint.Checkpoint`) and of the text's token ``ids`` (N,);
    ``tokens`` is ``""`` without them (the model compared before the text is encoded)."""
    kind = "char" if ckpt.tokenizer is None else str(ckpt.tokenizer.get("kind"))
    if kind == "char":
        v = ckpt.vocab
        vocab = (f"{len(v)} characters {v!r}" if len(v) <= 40
                 else f"{len(v)} characters (sha256 {_sha(v.encode())})")  # fmt: skip
    else:
        record = json.dumps(ckpt.tokenizer, sort_keys=True).encode()
        vocab = f"{kind} of {cfg.vocab_size} tokens (sha256 {_sha(record)})"
    tokens = ""
    if ids is not None:
        ids = np.ascontiguousarray(ids, dtype=np.int64)  # (N,)
        tokens = f"{len(ids):,} tokens, sha256 {_sha(ids.tobytes())}"
    return RunModel(cfg.variant, cfg.n_layer, cfg.n_embd, cfg.n_head, vocab, tokens)


def check_comparable(
    models: Sequence[tuple[str, RunModel]], kind: str = "run", why: str = ""
) -> None:
    """Refuse, in one line, ``(name, RunModel)`` pairs that differ from the first in any field.

    The message names the ``kind`` ("run", "checkpoint") and name that differs, the
    field, both values, and ``why`` they must not differ (by default: only runs of one
    model on one text are compared).

    Raises
    ------
    ValueError
    """
    if not models:
        return
    name0, m0 = models[0]
    for name, m in models[1:]:
        for field in RunModel._fields:
            a, b = getattr(m0, field), getattr(m, field)
            if a != b:
                raise ValueError(
                    f"{kind} {name!r} has {FIELD_NAMES[field]} {b}, {kind} {name0!r} has {a}: "
                    + (why or f"only {kind}s of one model on one text are compared")
                )


class RunPlan(NamedTuple):
    """A run directory read before any split: what it kept and its first checkpoint's model."""

    run_dir: str
    kept: list[tuple[int, str]]  # (iteration, path), by iteration
    cfg: Any  # the GPTConfig of its first kept checkpoint
    model: RunModel


def _kept(run_dir: str) -> list[tuple[int, str]]:
    """The checkpoints a run directory kept; refused in one line if none."""
    from resgrad.train.rundir import kept_checkpoints

    if not os.path.isdir(run_dir):
        raise NotADirectoryError(f"{run_dir!r} is not a directory (expected a training run's)")
    kept = kept_checkpoints(run_dir)
    if not kept:
        raise ValueError(f"{run_dir!r} keeps no checkpoint per step (ckpt-<iter>.ckpt); "
                         "train it with --keep-every N")  # fmt: skip
    return kept


def plan_runs(run_dirs: Sequence[str], text: str | None = None) -> list[RunPlan]:
    """Read each run's first kept checkpoint (not its splits): what
    :func:`run_checkpoint_paths` of each, and :func:`across_runs` of them all, will do.

    For the checks a caller makes before the work (the model's size, the time it takes)
    and the one made here: runs of another scheme, depth, width, heads, vocabulary or
    text tokens than the first are refused before any split (:func:`check_comparable`).

    Raises
    ------
    ValueError, OSError
        As :func:`run_checkpoint_paths`; or runs that cannot be compared.
    """
    from resgrad.train.data import default_corpus
    from resgrad.train.sample import load_model

    text = default_corpus() if text is None else text
    plans: list[RunPlan] = []
    for d in run_dirs:
        kept = _kept(d)
        model, tok, ckpt = load_model(kept[0][1])
        # the model and its vocabulary first: another vocabulary may not encode the text
        named = [(p.run_dir, p.model._replace(tokens="")) for p in plans[:1]]
        check_comparable([*named, (d, run_model(model.cfg, ckpt, None))], "run")
        plans.append(RunPlan(d, kept, model.cfg, run_model(model.cfg, ckpt, tok.encode(text))))
        check_comparable([(p.run_dir, p.model) for p in (plans[0], plans[-1])], "run")
        del model
    return plans


class CheckpointPaths(NamedTuple):
    """The split at x_0 of one checkpoint a run kept, on the same windows as every other."""

    iteration: int
    path: str
    splits: list[PathSplit]  # one per window seed
    rows: list[PathRow]  # path_table(splits): per k, mean and std over the seeds
    range90: tuple[int, int]  # effective_range of the mean share of the norm
    model: RunModel  # what another run must share to be compared with this one

    @property
    def mean_k(self) -> float:
        """The mean path length, weighted by the share of the norm: sum_k k x share_k."""
        return float(sum(r.k * r.share_norm for r in self.rows))


def run_checkpoint_paths(
    run_dir: str,
    text: str | None = None,
    seq: int = 64,
    batch: int = 4,
    seeds: Sequence[int] = (0,),
    *,
    mass: float = 0.9,
    fits: Callable[[Any], None] | None = None,
    tick: Tick | None = None,
) -> list[CheckpointPaths]:
    """The split at x_0 at every checkpoint ``resgrad train --keep-every`` kept in ``run_dir``.

    Every checkpoint is measured on the same windows (seed s draws them as
    :func:`model_splits` does, from the same token ids), so the steps differ only in the
    weights: each one's result equals :func:`model_splits` on that checkpoint alone.

    Parameters
    ----------
    run_dir : str
        A run directory holding ``ckpt-<iter>.ckpt`` files
        (:func:`resgrad.train.rundir.kept_checkpoints`).
    text : str, optional
        The text the windows come from; the built-in corpus by default.
    seq, batch, seeds
        T, B, and one batch of windows per seed, as :func:`model_splits`.
    mass : float
        The share the effective range holds (0.9: the 90% range).
    fits : callable, optional
        Called with each checkpoint's GPTConfig before its split; it raises to refuse one
        that would not fit in memory, as the CLI's check does.
    tick : callable, optional
        As :func:`resgrad.lab.paths.split`'s.

    Returns
    -------
    list of CheckpointPaths
        By iteration.

    Raises
    ------
    ValueError
        ``run_dir`` keeps no checkpoint per step, or a checkpoint's scheme, shape or
        vocabulary differs from the first's (:func:`check_comparable`).
    OSError
        ``run_dir`` is not a directory.
    """
    from resgrad.train.data import default_corpus
    from resgrad.train.sample import load_model

    kept = _kept(run_dir)
    text = default_corpus() if text is None else text
    out: list[CheckpointPaths] = []
    ids, first = None, None
    for it, path in kept:
        model, tok, ckpt = load_model(path)
        if fits is not None:
            fits(model.cfg)
        if ids is None:  # one run, one tokenizer: the text is encoded once
            ids = tok.encode(text)
        rm = run_model(model.cfg, ckpt, ids)
        if first is None:
            first = (path, rm)
        check_comparable([first, (path, rm)], "checkpoint", "not one run")
        splits = model_splits(model, ids, seq, batch, seeds, tick=tick)
        rows = path_table(splits)
        rng = effective_range([r.share_norm for r in rows], mass)
        out.append(CheckpointPaths(it, path, splits, rows, rng, rm))
    return out


class RunsRow(NamedTuple):
    """One iteration kept by every run of a comparison: the spread over the runs."""

    iteration: int
    runs: int  # R, the training runs (seeds) averaged
    share0: float  # k = 0 share of the norm at x_0: mean over the runs
    share0_std: float  # its std over the runs (ddof=1; 0 for one run)
    mean_k: float  # CheckpointPaths.mean_k, mean over the runs
    mean_k_std: float
    ranges: tuple[tuple[int, int], ...]  # each run's 90% range, in the runs' order


def across_runs(results: Sequence[Sequence[CheckpointPaths]]) -> list[RunsRow]:
    """:func:`run_checkpoint_paths` of several training runs (e.g. seeds), side by side.

    Only the iterations every run kept are compared, each run's own checkpoint of that
    iteration; each value is the mean and std (ddof=1; 0 for one run) over the runs of that
    run's mean over its window seeds.

    Raises
    ------
    ValueError
        No run, runs that differ in scheme, shape, vocabulary or text tokens
        (:func:`check_comparable`), or no iteration kept by every run.
    """
    if not results:
        raise ValueError("no run to compare")
    check_comparable([(os.path.dirname(r[0].path), r[0].model) for r in results], "run")
    by_run = [{c.iteration: c for c in r} for r in results]
    common = sorted(set.intersection(*(set(b) for b in by_run)))
    if not common:
        raise ValueError("the runs kept no iteration in common; train them with the same "
                         "--keep-every")  # fmt: skip
    ddof = 1 if len(results) > 1 else 0
    out = []
    for it in common:
        cs = [b[it] for b in by_run]
        share0 = np.array([c.rows[0].share_norm for c in cs])  # (R,)
        mean_k = np.array([c.mean_k for c in cs])  # (R,)
        out.append(RunsRow(it, len(cs), float(share0.mean()), float(share0.std(ddof=ddof)),
                           float(mean_k.mean()), float(mean_k.std(ddof=ddof)),
                           tuple(c.range90 for c in cs)))  # fmt: skip
    return out
