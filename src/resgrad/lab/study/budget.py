"""The cost, first: estimate a measurement's seconds before it starts, and refuse it over a budget.

**Paths.** :func:`model_work` and :func:`lesson_work` count the branch VJPs a split will do
(the split's n(n + 1)/2 per chain, Veit's ``samples`` x n(n + 1)/2; :mod:`resgrad.lab.paths`)
and estimate their seconds; :func:`require_time` refuses work over a budget in one line, and
:func:`work_bar` shows the work's progress on a terminal (every function doing it takes a
``tick``). :func:`refuse_over_budget` is the one message of every estimated job, the
lesion studies' too (:mod:`resgrad.lab.lesion`); :func:`format_seconds` writes the times.
"""

from __future__ import annotations

import math
import sys
from typing import NamedTuple

from resgrad.lab.study.refusals import OVER_BUDGET

__all__ = [
    "Work",
    "format_seconds",
    "lesson_work",
    "model_work",
    "plan_left",
    "refuse_over_budget",
    "speak_estimates",
    "require_time",
    "work_bar",
]

TIME_BUDGET_S = 600.0  # work estimated longer than this is refused unless asked for (--budget)
PROGRESS_AFTER_S = 3.0  # work estimated longer than this shows a progress bar on a terminal


# --------------------------------------------------------------------------- the cost, first

# seconds of one branch VJP: a fixed cost of Python and NumPy calls, plus its float64 flops
# at FLOPS_PER_S (measured on one core: 1e-4 s at C=16, 2e-3 s at C=64 T=64 B=4, 2e-2 s at
# C=256; the lesson's C=16 tanh layer 1.5e-5 s); a float32 forward's at FLOAT32_FLOPS_PER_S.
# Held within a factor of 2 of the measured time by benchmarks/bench_estimates.py (on one
# BLAS thread, 2026-12-07, AMD EPYC AVX-512: paths 0.9-1.4x of its estimate from C=16 to
# C=256, the lesion study 0.5-0.9x).
GPT_VJP_OVERHEAD_S = 1e-4
LESSON_VJP_OVERHEAD_S = 2e-5
FLOPS_PER_S = 3e10
FLOAT32_FLOPS_PER_S = 6e10


class Work(NamedTuple):
    """What a measurement will cost, estimated before it starts."""

    vjps: int  # branch VJPs in all: the split's and Veit's
    seconds: float  # an estimate: vjps x the seconds of one, plus each chain's forward


def _work(n: int, skips: bool, vjp_s: float, chain_s: float, chains: int, samples: int) -> Work:
    """``chains`` splits of n branches, each with ``samples`` Veit paths per k = 0..n."""
    per_split = n * (n + 1) // 2 if skips else n  # no skip: one part, one VJP a step
    # sum over k of samples x k branch VJPs; no skip: only k = n's paths exist, n VJPs each
    per_veit = samples * n * (n + 1) // 2 if skips else samples * n
    vjps = chains * (per_split + per_veit)
    return Work(vjps, vjps * vjp_s + chains * chain_s)


def model_work(cfg, seq: int, batch: int, chains: int, samples: int = 0) -> Work:
    """The cost of ``chains`` splits of a GPT of config ``cfg`` on (batch, seq) windows
    (one per window seed, checkpoint and run), with ``samples`` Veit paths per k each.

    A branch VJP costs about 24 B T C^2 flops (the attention's 4 C^2 and the MLP's 8 C^2
    weights, two matmuls each in the backward, averaged over the two) plus 4 B T^2 C (the
    attention's scores); each chain's forward and ordinary backward about 2n of them plus
    the head's 6 B T V C.
    """
    B, T, C, V = batch, seq, cfg.n_embd, cfg.vocab_size
    n = 2 * cfg.n_layer
    vjp_s = GPT_VJP_OVERHEAD_S + (24 * B * T * C * C + 4 * B * T * T * C) / FLOPS_PER_S
    chain_s = 2 * n * vjp_s + 6 * B * T * V * C / FLOPS_PER_S
    return _work(n, cfg.variant != "none", vjp_s, chain_s, chains, samples)


def lesson_work(
    depth: int, width: int, batch: int, chains: int, samples: int = 0, residual: bool = True
) -> Work:
    """The cost of ``chains`` splits of the lesson's stack (one per bank seed), with
    ``samples`` Veit paths per k each: a branch VJP is two (B, C) x (C, C) matmuls, and each
    chain's forward and ordinary backward about 2 ``depth`` of them."""
    vjp_s = LESSON_VJP_OVERHEAD_S + 4 * batch * width * width / FLOPS_PER_S
    return _work(depth, residual, vjp_s, 2 * depth * vjp_s, chains, samples)


def plan_left(plan, seconds: float, work: str, unit: str):
    """A grid's ``ready(left, total)`` that tells ``plan`` the seconds and the work of the
    points left (a resumed grid: ``left of total`` ``unit``), and nothing when none is."""

    def ready(left: int, total: int) -> None:
        if left:
            what = work if left == total else f"{left} of {total} {unit} left; {work}"
            plan(seconds * left / total, what)

    return ready


def format_seconds(t: float) -> str:
    """``t`` seconds as e.g. ``'40 s'``, ``'7.5 min'``, ``'3.2 h'``, ``'12.0 days'``."""
    if t < 60:
        return f"{t:.0f} s"
    if t < 3600:
        return f"{t / 60:.1f} min"
    if t < 86400:
        return f"{t / 3600:.1f} h"
    return f"{t / 86400:,.1f} days"


def refuse_over_budget(seconds: float, budget: float, what: str, counts: str, more: str) -> None:
    """Refuse, in one line, a job estimated to take ``seconds``, longer than ``budget``: the
    one message of every estimated job (the splits of :mod:`resgrad.lab.paths`, the studies
    of :mod:`resgrad.lab.lesion`), :data:`~resgrad.lab.study.refusals.OVER_BUDGET`.

    The message names ``what``, the estimate and the ``counts`` it comes from, the budget,
    and ``more``: how to ask for more time (e.g. ``"pass --budget {seconds}"``, formatted
    with the budget it would take).

    Raises
    ------
    ValueError
    """
    if seconds > budget:
        need = math.ceil(seconds * 1.25)  # room for the estimate's error
        raise OVER_BUDGET(
            what=what,
            estimate=format_seconds(seconds),
            counts=counts,
            budget=format_seconds(budget),
            more=more.format(seconds=need),
        )


def require_time(work: Work, budget: float, what: str, more: str) -> None:
    """Refuse, in one line, work estimated to take longer than ``budget`` seconds
    (:func:`refuse_over_budget`, counting its branch VJPs).

    Raises
    ------
    ValueError
    """
    refuse_over_budget(work.seconds, budget, what, f"{work.vjps:,} branch VJPs", more)


_SPEAK = {"off_terminal": False}  # set by the command that owns the process (speak_estimates)


def speak_estimates(on: bool = True) -> None:
    """Let :func:`bar` say a long job's estimate in one line where stderr is no terminal.
    A command that measures (``resgrad paths``, ``lesion``, ``flow``) turns it on for its
    process; a study that runs these measurements many times inside its own work (the
    robustness study, its workers) leaves it off, so that only its own plan speaks."""
    _SPEAK["off_terminal"] = on


def _on_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # no stderr, or a closed one
        return False


def bar(total: int, seconds: float, unit: str, desc: str, show: bool | None = None):
    """A tqdm bar over ``total`` units of work on stderr, its description the estimate: every
    study's progress bar.

    ``show`` None: shown on a terminal only, and only for work estimated longer than
    :data:`PROGRESS_AFTER_S` (off a terminal, such work says its estimate in one line on
    stderr instead, where :func:`speak_estimates` is on); True or False: always or never.
    Use it as a context manager and pass its ``update`` as the ``tick`` of the functions
    doing the work.
    """
    from tqdm.auto import tqdm

    if show is None:
        disable = None if seconds > PROGRESS_AFTER_S else True  # None: on a terminal
        if disable is None and _SPEAK["off_terminal"] and not _on_terminal():  # no bar: a line
            units = unit if total == 1 else unit + ("es" if unit.endswith("s") else "s")
            say = f"resgrad {desc}: about {format_seconds(seconds)} ({total:,} {units}); it keeps "
            print(say + "nothing part-way: Ctrl-C stops it", file=sys.stderr, flush=True)
    else:
        disable = not show
    return tqdm(total=total, unit=unit, unit_scale=unit == "VJP", dynamic_ncols=True,
                disable=disable, desc=f"{desc} (about {format_seconds(seconds)})")  # fmt: skip


def work_bar(work: Work, progress: bool | None = None, desc: str = "paths"):
    """:func:`bar` over ``work.vjps`` (``progress``: its ``show``)."""
    return bar(work.vjps, work.seconds, "VJP", desc, progress)
