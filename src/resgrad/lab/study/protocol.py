"""One shape for every study of a model, and the two ways of following one: through a run's
checkpoints and across runs, written once for every study.

A study (:class:`Study`: the paths split, the lesion study, the flow profile) is a small
object that holds its settings (the windows, the window seeds, its budget) and answers:

- ``fits(cfg)``: refuse, in one line, a model it cannot study (a plan its shape does not
  take, a ``seq`` longer than its positions, memory it cannot hold), from the model's
  config alone, before any weight is used;
- ``cost(cfg, models)``: its estimate for ``models`` models of that config, before anything
  starts (``.seconds``), and ``require(cfg, models)``, which refuses it over the budget;
- ``bar(cost)``: a progress bar over that work, whose ``update`` is the ``tick`` of ``run``;
- ``run(model, ids, name, tick)``: the study of one model on the token ids of a text, over
  every window seed: its result.

:func:`every_checkpoint` runs a study at every checkpoint a run kept (``resgrad train
--keep-every``), for one run or several; :func:`common_steps` lines several runs up on the
iterations they all kept; :func:`across_runs` runs it on several models of one shape. Each
refuses unlike runs with :func:`~resgrad.lab.study.runs.check_comparable` and work over the
budget through the study's ``require``, before the first model's study starts.

Legend: R = runs, K = kept checkpoints of a run.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from resgrad.lab.study.refusals import (
    NO_COMMON_ITERATION,
    NO_RUN,
    NOT_ONE_RUN,
    RUN_GIVEN_TWICE,
    SAME_MODEL_TWICE,
    SOURCE_GIVEN_TWICE,
)
from resgrad.lab.study.runs import RunModel, check_comparable, plan_runs, run_model

__all__ = [
    "Checkpoint",
    "Model",
    "Step",
    "Study",
    "across_runs",
    "common_steps",
    "every_checkpoint",
    "refuse_repeated",
    "refuse_twice",
    "run_names",
]

Tick = Callable[[int], Any]


class Study(Protocol):
    """What every study of a model answers (see the module's docstring)."""

    name: str  # the command's name: "paths", "lesion", "flow"
    seeds: tuple[int, ...]  # the window seeds: one batch of windows each

    def fits(self, cfg) -> None:
        """Refuse, in one line, a model of GPTConfig ``cfg`` this study cannot take."""

    def cost(self, cfg, models: int) -> Any:
        """The estimate of ``models`` studies of a model of ``cfg`` (``.seconds``)."""

    def require(self, cfg, models: int, runs: int | None = None) -> None:
        """Refuse, in one line, ``models`` studies of ``cfg`` estimated over the budget (the
        checkpoints of ``runs`` runs, when :func:`every_checkpoint` asks)."""

    def bar(self, cost: Any) -> Any:
        """A progress bar over ``cost`` (a context manager whose ``update`` is a tick)."""

    def run(self, model, ids, name: str = "", tick: Tick | None = None) -> Any:
        """The study of ``model`` on windows of the token ids ``ids`` (N,), every seed."""


def refuse_twice(run_dirs: Sequence[str]) -> None:
    """Refuse, in one line, a run directory given twice (``run/`` and ``./run`` are one run).

    Raises
    ------
    ValueError
    """
    real = [os.path.realpath(d) for d in run_dirs]
    twice = next((d for i, d in enumerate(run_dirs) if real[i] in real[:i]), None)
    if twice is not None:
        raise RUN_GIVEN_TWICE(run=twice)


def refuse_repeated(sources: Sequence[str]) -> None:
    """Refuse, in one line, a SOURCE given twice (as typed): each model counts once.

    Raises
    ------
    ValueError
    """
    twice = next((d for i, d in enumerate(sources) if d in sources[:i]), None)
    if twice is not None:
        raise SOURCE_GIVEN_TWICE(source=twice)


def run_names(paths: Sequence[str]) -> list[str]:
    """What a table calls each run: its directory's (or file's) name, or, where two runs share
    a name, the paths as given."""
    names = [os.path.basename(os.path.normpath(p)) for p in paths]
    return names if len(set(names)) == len(names) else list(paths)


# --------------------------------------------------------------------------- through training


class Checkpoint(NamedTuple):
    """A study at one checkpoint a run kept, on the same windows as at every other."""

    iteration: int
    path: str
    result: Any  # the study's run(...) of this checkpoint
    model: RunModel  # what another run must share to be compared with this one


def every_checkpoint(
    study: Study, run_dirs: Sequence[str], text: str | None = None
) -> list[list[Checkpoint]]:
    """``study`` at every ``ckpt-<iter>.ckpt`` each run of ``run_dirs`` kept, by iteration.

    Every checkpoint is studied on the same windows of ``text`` (the built-in corpus by
    default), encoded once per run, so the steps differ only in the weights: each one's
    result equals the study of that checkpoint alone. Before the first study: a run given
    twice, a run that kept no checkpoint, and runs unlike the first (:func:`plan_runs`) are
    refused, then a model the study cannot take and work over its budget (every checkpoint
    of every run). A checkpoint of another shape than its run's first is ``not one run``;
    one whose own iteration is not its name's, or of another run (another seed or text,
    :func:`~resgrad.train.rundir.check_kept`), is refused naming the file and the field.

    Raises
    ------
    ValueError, OSError
    """
    from resgrad.train.data import default_corpus
    from resgrad.train.rundir import check_kept
    from resgrad.train.sample import load_model

    refuse_twice(run_dirs)
    text = default_corpus() if text is None else text
    plans = plan_runs(run_dirs, text)  # every run's first checkpoint; unlike runs refused
    for p in plans:
        study.fits(p.cfg)
    checkpoints = sum(len(p.kept) for p in plans)
    study.require(plans[0].cfg, checkpoints, runs=len(plans))  # all of it, before any study
    out: list[list[Checkpoint]] = []
    with study.bar(study.cost(plans[0].cfg, checkpoints)) as bar:
        for plan, name in zip(plans, run_names(run_dirs)):
            steps: list[Checkpoint] = []
            ids, first = None, None
            for it, path in plan.kept:
                model, tok, ckpt = load_model(path)
                study.fits(model.cfg)
                if ids is None:  # one run, one tokenizer: the text is encoded once
                    ids = tok.encode(text)
                rm = run_model(model.cfg, ckpt, ids)
                first = first or (path, rm)
                check_comparable([first, (path, rm)], "checkpoint", NOT_ONE_RUN)
                check_kept(path, it, ckpt, plan.identity)  # its iteration, and this run's
                steps.append(Checkpoint(it, path, study.run(model, ids, name, bar.update), rm))
                del model
            out.append(steps)
    return out


class Step(NamedTuple):
    """One iteration every run kept: each run's checkpoint there, in the runs' order."""

    iteration: int
    checkpoints: list[Checkpoint]  # (R,)

    @property
    def results(self) -> list:
        """Each run's result at this iteration."""
        return [c.result for c in self.checkpoints]


def common_steps(runs: Sequence[Sequence[Checkpoint]]) -> list[Step]:
    """:func:`every_checkpoint`'s runs side by side, on the iterations they all kept.

    Raises
    ------
    ValueError
        No run, runs that differ in scheme, shape, vocabulary or text tokens, or no
        iteration kept by every run.
    """
    if not runs:
        raise NO_RUN()
    check_comparable([(os.path.dirname(r[0].path), r[0].model) for r in runs], "run")
    by_run = [{c.iteration: c for c in r} for r in runs]
    common = sorted(set.intersection(*(set(b) for b in by_run)))
    if not common:
        raise NO_COMMON_ITERATION()
    return [Step(it, [b[it] for b in by_run]) for it in common]


# --------------------------------------------------------------------------- across runs


def _weights_digest(params) -> str:
    """The SHA-256 of a model's weights: every parameter's name, dtype, shape and bytes."""
    h = hashlib.sha256()
    for k in sorted(params):
        v = np.ascontiguousarray(params[k])
        h.update(f"{k}|{v.dtype.str}|{v.shape}|".encode())
        h.update(v.data)
    return h.hexdigest()


class Model(NamedTuple):
    """A study of one SOURCE model."""

    name: str  # what a table calls it (:func:`run_names`)
    result: Any  # the study's run(...)
    model: RunModel  # what another model must share to be compared with this one
    cfg: Any  # its GPTConfig


def across_runs(
    study: Study,
    sources: Sequence[str],
    text: str | None = None,
    *,
    text_path: str | None = None,
    best: bool = False,
    meta: str | None = None,
    kinds: tuple[str, ...] | None = None,
    flag: str = "SOURCE",
    describe: Callable[[Any, Any], RunModel] | None = None,
) -> list[Model]:
    """``study`` of each SOURCE model of ``sources`` (a run directory or checkpoint, a Hugging
    Face GPT-2 directory or hub name, a nanoGPT ckpt.pt; :mod:`resgrad.train.source`), in order,
    on windows of ``text`` (the built-in corpus by default; ``text_path`` names it in errors).

    Every model is read once before the first study, one at a time, and refused before any
    study: when the study cannot take it or ``len(sources)`` such studies would go over the
    budget (before its weights are read), when it is unlike the first (``describe(cfg,
    ids)`` says what must be shared; by default its scheme, shape, vocabulary size and
    text tokens), and when its weights are another's, bit for bit (a copy of a run, a link
    to a checkpoint: given twice). Then each is read again for its study. ``kinds`` are the
    kinds of SOURCE taken (default: every model and the lesson's name, which a caller
    handles first), ``flag`` names them in a refusal.

    Raises
    ------
    ValueError, OSError
    """
    from resgrad.lab.study.runs import describe_model
    from resgrad.train.data import default_corpus
    from resgrad.train.source import ALL, encode_text, load_source, resolve_source

    describe = describe or describe_model
    text = default_corpus() if text is None else text
    kinds = ALL if kinds is None else kinds
    srcs = [resolve_source(s, best=best, meta=meta, kinds=kinds, flag=flag) for s in sources]
    out: list[Model] = []

    def fits(cfg) -> None:
        study.fits(cfg)
        study.require(cfg, len(srcs))

    names = run_names([s.name for s in srcs])
    described: list[tuple[str, RunModel]] = []
    weights: dict[str, str] = {}  # the digest of each model's weights -> its SOURCE
    for name, src in zip(names, srcs):  # every refusal before the first study: each model
        model, tok = load_source(src, fits=fits)  # read once here, its weights let go
        digest = _weights_digest(model.params)
        if digest in weights:  # a copy given beside its original is that model again
            raise SAME_MODEL_TWICE(source=src.name, first=weights[digest])
        weights[digest] = src.name
        ids = encode_text(tok, text, text_path)  # (N,); a text it cannot encode names the fix
        described.append((name, describe(model.cfg, ids)))
        check_comparable([described[0], described[-1]], "run")
        del model
    for (name, rm), src in zip(described, srcs):
        model, tok = load_source(src)
        ids = encode_text(tok, text, text_path)  # (N,)
        with study.bar(study.cost(model.cfg, 1)) as bar:
            out.append(Model(name, study.run(model, ids, name, bar.update), rm, model.cfg))
        del model
    return out
