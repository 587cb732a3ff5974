"""Lesion study through training: the study at every checkpoint a run kept, across runs."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from resgrad.lab.lesion.interventions import plan
from resgrad.lab.lesion.measure import StudyResult, Tick, model_study
from resgrad.lab.lesion.tables import LesionRow, Summary, across_runs, rows, summary
from resgrad.lab.study.refusals import NO_COMMON_ITERATION
from resgrad.lab.study.runs import check_comparable, plan_runs, run_model

__all__ = ["CheckpointLesions", "across_checkpoints", "run_checkpoint_lesions"]


# --------------------------------------------------------------------------- through training


class CheckpointLesions(NamedTuple):
    """The study at one checkpoint a run kept, on the same windows as every other."""

    iteration: int
    path: str
    result: StudyResult


def run_checkpoint_lesions(
    run_dir: str,
    text: str | None = None,
    seq: int = 64,
    batch: int = 4,
    seeds: Sequence[int] = (0,),
    *,
    what: Sequence[str] | None = None,
    ks: Sequence[int] | None = None,
    samples: int = 10,
    sample_seed: int = 0,
    blocks: Sequence[int] | None = None,
    fits: Callable[[Any], None] | None = None,
    tick: Tick | None = None,
) -> list[CheckpointLesions]:
    """:func:`model_study` of :func:`plan`'s interventions (``what``, ``ks``, ``samples``,
    ``sample_seed``, ``blocks``) at every ``ckpt-<iter>.ckpt`` that ``resgrad train
    --keep-every`` kept in ``run_dir``, on the same windows of ``text`` (the built-in
    corpus by default), so the steps differ only in the weights.

    ``fits`` is called with each checkpoint's GPTConfig before its study (the CLI's checks).

    Raises
    ------
    ValueError
        The run keeps no checkpoint per step; a checkpoint's scheme, shape or vocabulary
        differs from the first's (:func:`resgrad.lab.study.runs.check_comparable`); or a bad
        plan (:func:`~resgrad.lab.lesion.interventions.plan`).
    OSError
        ``run_dir`` is not a directory.
    """
    from resgrad.train.sample import load_model

    (first,) = plan_runs([run_dir], text)  # refuses a run that kept no checkpoint
    text_ids, out = None, []
    label = os.path.basename(os.path.normpath(run_dir))
    for it, path in first.kept:
        model, tok, ckpt = load_model(path)
        if fits is not None:
            fits(model.cfg)
        if text_ids is None:  # one run, one tokenizer: the text is encoded once
            from resgrad.train.data import default_corpus

            text_ids = tok.encode(default_corpus() if text is None else text)
            lesions = plan(model.cfg.n_layer, what, ks, samples, sample_seed, blocks)
        run = run_model(model.cfg, ckpt, text_ids)
        check_comparable([(first.kept[0][1], first.model), (path, run)], "checkpoint")
        res = model_study(model, text_ids, lesions, seq, batch, seeds, label=label, run=run,
                          tick=tick)  # fmt: skip
        out.append(CheckpointLesions(it, path, res))
    return out


def across_checkpoints(
    runs: Sequence[Sequence[CheckpointLesions]], names: Sequence[str]
) -> list[tuple[int, list[LesionRow], list[Summary]]]:
    """Several runs' :func:`run_checkpoint_lesions`: per iteration every run kept, the rows
    across the runs (:func:`across_runs`) and each run's :func:`summary`.

    Raises
    ------
    ValueError
        Runs that cannot be compared, or no iteration kept by every run.
    """
    by_run = [{c.iteration: c for c in r} for r in runs]
    common = sorted(set.intersection(*(set(b) for b in by_run)))
    if not common:
        raise NO_COMMON_ITERATION()
    out = []
    for it in common:
        results = [b[it].result for b in by_run]
        out.append((it, across_runs(results, names), [summary(rows(r)) for r in results]))
    return out
