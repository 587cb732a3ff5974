"""Runs compared: what runs (or one run's checkpoints) share, read before any work.

Runs (or one run's checkpoints) are compared only when they share their scheme, shape,
vocabulary and text tokens (:class:`RunModel`, :func:`check_comparable`): the one refusal
of unlike runs, for every study. Legend: R = runs.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from resgrad.lab.study.refusals import (
    NO_KEPT_CHECKPOINT,
    NOT_A_RUN_DIRECTORY,
    SAME_RUN_TWICE,
    UNLIKE_RUNS,
    Refusal,
)

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
    models: Sequence[tuple[str, RunModel]], kind: str = "run", refusal: Refusal = UNLIKE_RUNS
) -> None:
    """Refuse, in one line, ``(name, RunModel)`` pairs that differ from the first in any field.

    The message, ``refusal``'s, names the ``kind`` ("run", "checkpoint") and name that
    differs, the field, both values, and why they must not differ
    (:data:`~resgrad.lab.study.refusals.UNLIKE_RUNS`: only runs of one model on one text are
    compared; :data:`~resgrad.lab.study.refusals.NOT_ONE_RUN`: a run's checkpoints).

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
                raise refusal(kind=kind, name=name, field=FIELD_NAMES[field], value=b,
                              first=name0, first_value=a)  # fmt: skip


class RunPlan(NamedTuple):
    """A run directory read before any split: what it kept and its first checkpoint's model."""

    run_dir: str
    kept: list[tuple[int, str]]  # (iteration, path), by iteration
    cfg: Any  # the GPTConfig of its first kept checkpoint
    model: RunModel
    identity: dict | None  # the run of its first kept checkpoint (train.rundir.run_identity)


def _kept(run_dir: str) -> list[tuple[int, str]]:
    """The checkpoints a run directory kept; refused in one line if none."""
    from resgrad.train.rundir import kept_checkpoints

    if not os.path.isdir(run_dir):
        raise NOT_A_RUN_DIRECTORY(run=run_dir)
    kept = kept_checkpoints(run_dir)
    if not kept:
        raise NO_KEPT_CHECKPOINT(run=run_dir)
    return kept


def plan_runs(run_dirs: Sequence[str], text: str | None = None) -> list[RunPlan]:
    """Read each run's first kept checkpoint (not its studies): what
    :func:`~resgrad.lab.study.protocol.every_checkpoint` of them will go through.

    For the checks a caller makes before the work (the model's size, the time it takes)
    and the ones made here, before any study: a first checkpoint named for another
    iteration than its own, a run that is another's copy (the same seed, settings and text:
    :func:`~resgrad.train.rundir.run_identity`), and runs of another scheme, depth, width,
    heads, vocabulary or text tokens than the first (:func:`check_comparable`).

    Raises
    ------
    ValueError
        A run that kept no checkpoint per step, or runs that cannot be compared.
    OSError
        A run directory that is not a directory, or a checkpoint that cannot be read.
    """
    from resgrad.train.data import default_corpus
    from resgrad.train.rundir import check_kept, run_fingerprint, run_identity
    from resgrad.train.sample import load_model

    text = default_corpus() if text is None else text
    plans: list[RunPlan] = []
    for d in run_dirs:
        kept = _kept(d)
        model, tok, ckpt = load_model(kept[0][1])
        check_kept(kept[0][1], kept[0][0], ckpt)  # its own iteration, as its name says
        identity = run_identity(ckpt)
        mine = run_fingerprint(identity)  # None: a checkpoint train did not write
        same = next((p for p in plans if mine and run_fingerprint(p.identity) == mine), None)
        if same is not None:  # a copy of a run given beside it is that run again
            raise SAME_RUN_TWICE(first=same.run_dir, run=d)
        # the model and its vocabulary first: another vocabulary may not encode the text
        named = [(p.run_dir, p.model._replace(tokens="")) for p in plans[:1]]
        check_comparable([*named, (d, run_model(model.cfg, ckpt, None))], "run")
        rm = run_model(model.cfg, ckpt, tok.encode(text))
        plans.append(RunPlan(d, kept, model.cfg, rm, identity))
        check_comparable([(p.run_dir, p.model) for p in (plans[0], plans[-1])], "run")
        del model
    return plans


def describe_model(cfg, ids: np.ndarray, vocabulary: str | None = None) -> RunModel:
    """What runs must share to be compared (:class:`resgrad.lab.study.runs.RunModel`): the
    scheme and shape of ``cfg``, the vocabulary (described; by default its size) and the
    text's token ids ``ids`` (N,)."""
    ids = np.ascontiguousarray(ids, dtype=np.int64)  # (N,)
    tokens = f"{len(ids):,} tokens, sha256 {hashlib.sha256(ids.tobytes()).hexdigest()[:12]}"
    vocab = f"{cfg.vocab_size} tokens" if vocabulary is None else vocabulary
    return RunModel(cfg.variant, cfg.n_layer, cfg.n_embd, cfg.n_head, vocab, tokens)
