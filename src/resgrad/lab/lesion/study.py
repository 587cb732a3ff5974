"""The lesion study as a study (:class:`LesionStudy`, :mod:`resgrad.lab.study.protocol`): of a
model, of the lesson's stack, through a run's checkpoints and across runs; and the result
written out as ``resgrad lesion`` prints it (a table, JSON, CSV, a summary per checkpoint).

Legend: S = window seeds, R = runs, L = blocks.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from resgrad.formats.records import to_csv
from resgrad.lab.lesion.interventions import (
    EXACT_SETS,
    MAX_SAMPLES,
    MAX_SEED,
    RANDOM,
    Cost,
    lesson_cost,
    model_cost,
    plan,
    progress_bar,
    require_time,
)
from resgrad.lab.lesion.measure import METRICS, StudyResult, lesion_bytes, lesson_study, model_study
from resgrad.lab.lesion.measure import title as _title
from resgrad.lab.lesion.tables import LesionRow, across_runs, row_keys, rows, summary
from resgrad.lab.lesson import StackConfig
from resgrad.lab.study.budget import TIME_BUDGET_S
from resgrad.lab.study.protocol import Model, Step
from resgrad.lab.study.refusals import SAMPLE_SEED_OUT_OF_RANGE, SAMPLES_OUT_OF_RANGE
from resgrad.lab.study.windows import refuse_long_seq
from resgrad.perf import memory

__all__ = [
    "LESSON_SEEDS",
    "MODEL_SEEDS",
    "LesionStudy",
    "across_models",
    "lesson_lesions",
    "render",
    "render_every_checkpoint",
    "runs_title",
]

MODEL_SEEDS = (0, 1, 2)  # a model's default window seeds: mean ± std over 3 batches
LESSON_SEEDS = (42,)  # the lesson's default bank seed: its own stack
MORE = "pass --budget {seconds} to allow it, or ask for fewer --what, --k, --samples or --seeds"
# the table's legend of a random kind's k, under the table
SETS_NOTE = (f"sets: measured of all; a k with at most {EXACT_SETS} sets (C(L, k) for delete) "
             "is exact, every one measured; else N are drawn, delete's with each block in as "
             "many")  # fmt: skip
SAMPLING_NOTE = ("± sampling: the half-width of the 95% interval of a drawn k's mean over all "
                 "its sets (the draw's error, which the spread over seeds or runs cannot "
                 "show)")  # fmt: skip


@dataclass(frozen=True)
class LesionStudy:
    """Interventions planned by :func:`~resgrad.lab.lesion.interventions.plan` (``what``,
    ``ks``, ``samples``, ``sample_seed``, ``blocks``), each measured on ``batch`` windows of
    ``seq`` tokens per window seed; refused over ``budget`` seconds. ``text_name`` names the
    text in the title; ``seq_default`` says that ``seq`` is the command's default."""

    seq: int = 64
    batch: int = 4
    seeds: tuple[int, ...] = MODEL_SEEDS
    what: tuple[str, ...] | None = None
    ks: tuple[int, ...] | None = None
    samples: int = 10
    sample_seed: int = 0
    blocks: tuple[int, ...] | None = None
    budget: float = TIME_BUDGET_S
    text_name: str = "the built-in corpus"
    seq_default: bool = False
    name: str = "lesion"

    def __post_init__(self):
        if not 0 <= self.sample_seed < MAX_SEED:
            raise SAMPLE_SEED_OUT_OF_RANGE(seed=self.sample_seed)
        if self.samples > MAX_SAMPLES:
            raise SAMPLES_OUT_OF_RANGE(samples=self.samples, most=MAX_SAMPLES)

    def plan(self, L: int, lesson: bool = False) -> list:
        """The interventions on a stack of ``L`` blocks (the intact first)."""
        return plan(L, self.what, self.ks, self.samples, self.sample_seed, self.blocks,
                    lesson=lesson)  # fmt: skip

    @property
    def setting(self) -> str:
        """The windows, seeds and sets, and the text: a title's second half."""
        return (f"T={self.seq} B={self.batch}, {len(self.seeds)} window seed(s), every set "
                f"of a k with at most {max(EXACT_SETS, self.samples)}, else N={self.samples}; "
                f"{self.text_name}")  # fmt: skip

    def fits(self, cfg) -> None:
        """Refuse a bad plan for the model's L, a ``seq`` it does not fit, and a study memory
        cannot hold."""
        self.plan(cfg.n_layer)
        refuse_long_seq(cfg, self.seq, self.seq_default)
        what = f"this model (L={cfg.n_layer} C={cfg.n_embd} V={cfg.vocab_size})"
        memory.require(lesion_bytes(cfg, self.seq, self.batch),
                       f"a lesion study of {what} on {self.batch} windows of {self.seq} "
                       "tokens")  # fmt: skip

    def cost(self, cfg, models: int) -> Cost:
        """The passes and block forwards of ``models`` studies, every window seed."""
        lesions = self.plan(cfg.n_layer)
        return model_cost(cfg, self.seq, self.batch, lesions, len(self.seeds) * models)

    def require(self, cfg, models: int, runs: int | None = None) -> None:
        """Refuse ``models`` studies estimated longer than the budget."""
        n = len(self.plan(cfg.n_layer)) - 1
        what = (f"this model (L={cfg.n_layer} C={cfg.n_embd} V={cfg.vocab_size}), {n:,} "
                f"interventions on {len(self.seeds) * models} batch(es) of {self.batch} x "
                f"{self.seq},")  # fmt: skip
        require_time(self.cost(cfg, models), self.budget, what, MORE)

    def bar(self, cost: Cost):
        """A progress bar over the lesioned passes."""
        return progress_bar(cost)

    def run(self, model, ids, name: str = "", tick=None) -> StudyResult:
        """Every intervention on ``model``, on each seed's windows of ``ids`` (N,)."""
        c = model.cfg
        label = _title(name, c.variant, c.n_layer, c.n_embd, self.setting)
        return model_study(model, ids, self.plan(c.n_layer), self.seq, self.batch, self.seeds,
                           label=label, tick=tick)  # fmt: skip


def lesson_lesions(study: LesionStudy, depth: int = 20, residual: bool = True) -> StudyResult:
    """``study``'s interventions on the lesson's tanh stack of ``depth`` layers, one bank per
    seed of ``study.seeds``; refused first if memory cannot hold it or it is over budget."""
    sc = StackConfig(depths=(depth,))
    memory.require(memory.lesson_stack_bytes(depth, sc.width, sc.batch) * 2,
                   f"the lesson's stack of depth {depth}")  # fmt: skip
    lesions = study.plan(depth, lesson=True)
    cost = lesson_cost(lesions, len(study.seeds))
    require_time(cost, study.budget, f"the lesson's stack of depth {depth}, "
                 f"{len(lesions) - 1:,} interventions on {len(study.seeds)} bank(s),",
                 MORE)  # fmt: skip
    with progress_bar(cost) as bar:
        return lesson_study(depth, lesions, study.seeds, residual=residual, tick=bar.update)


def across_models(models: Sequence[Model]) -> tuple[list[LesionRow], StudyResult, str]:
    """:func:`~resgrad.lab.study.protocol.across_runs` of a :class:`LesionStudy`: the rows
    (one model's, or the mean ± std over the models), the first result, and the title."""
    results = [m.result for m in models]
    table = result_rows(results, [m.name for m in models])
    return table, results[0], results[0].label if len(models) == 1 else runs_title(models)


def runs_title(models: Sequence[Model]) -> str:
    """The title of several runs' study: ``R runs (a, b, c) (scheme, L, C), setting``."""
    m = models[0].result.model
    setting = models[0].result.label.split("), ", 1)[1]
    names = [x.name for x in models]
    return _title(f"{len(names)} runs ({', '.join(names)})", m.scheme, m.depth, m.width, setting)


# --------------------------------------------------------------------------- written out

HEADS = {"ce": "CE", "dce": "ΔCE", "agree": "agree w/ intact", "acc": "top-1 acc",
         "kl": "KL(intact||les.)", "change": "||y'-y|| / ||y||"}  # fmt: skip


def _pm(mean: float, std: float) -> str:
    return f"{mean:>8.4f} ± {std:<7.4f}" if math.isfinite(mean) else f"{'-':>18}"


def _sets(r: LesionRow) -> str:
    """``1``, ``66 of 66`` (exact) or ``10 of 792`` (drawn)."""
    if r.kind not in RANDOM:
        return "1"
    n = f"{r.sets:,}" if r.sets < 10**9 else f"{r.sets:.1e}"
    return f"{r.samples:,} of {n}"


def _sampling(r: LesionRow, j: int) -> str:
    """A row's sampling interval of metric j: ``exact``, ``±0.0123``, or blank."""
    if r.kind not in RANDOM:
        return ""
    return "exact" if r.exact else f"±{r.ci[j]:.4f}"


def table_text(table: Sequence[LesionRow], spread: str = "± std") -> str:
    """The rows as a text table: an intervention a line, each metric's mean ± std, and where
    a k was drawn, not measured on every set, each metric's sampling interval beside it."""
    metrics = table[0].metrics
    drawn = any(r.kind in RANDOM and not r.exact for r in table)
    w = max(12, *(len(r.name) for r in table))
    ws = max(5, *(len(_sets(r)) for r in table))
    heads = [f"{HEADS[m]} {spread}" for m in metrics]
    wm = [max(18, len(h)) for h in heads]  # a metric's column: mean ± std, 18 wide
    cols = [f"{h:>{n}}" + (f" | {'± sampling':>10}" if drawn else "") for h, n in zip(heads, wm)]
    head = f"{'intervention':<{w}} | {'k':>2} | {'sets':>{ws}} | " + " | ".join(cols)
    lines = [head, "-" * len(head)]
    for r in table:
        cells = " | ".join(f"{_pm(*r.get(m)):>{wm[j]}}"
                           + (f" | {_sampling(r, j):>10}" if drawn else "")
                           for j, m in enumerate(metrics))  # fmt: skip
        lines.append(f"{r.name:<{w}} | {r.k:>2} | {_sets(r):>{ws}} | {cells}".rstrip())
    return "\n".join(lines)


def result_rows(results: Sequence[StudyResult], names: Sequence[str]) -> list[LesionRow]:
    """One study's rows, or several runs' (mean ± std over them)."""
    return rows(results[0]) if len(results) == 1 else across_runs(results, names)


def render(table: Sequence[LesionRow], res: StudyResult, what: str, runs: int = 1,
           fmt: str = "table") -> str:  # fmt: skip
    """A study (or ``runs`` runs' rows) as ``resgrad lesion`` prints it."""
    if fmt == "csv":
        return to_csv([r.record() for r in table], row_keys(res.metrics))
    if fmt == "json":
        out = {"source": what, "runs": runs, "metrics": list(res.metrics),
               "seeds": list(res.seeds), "block_passes": res.block_passes,
               "full_passes": res.full_passes, "rows": [r.record() for r in table]}  # fmt: skip
        return json.dumps(out, indent=2) + "\n"
    S = len(res.seeds)
    spread = (f"mean ± std over {runs} runs" if runs > 1
              else f"mean ± std over {S} seed(s)" if S > 1 else "one seed")  # fmt: skip
    lines = [f"Lesion study: {what}; {spread}", table_text(table)]
    if any(r.kind in RANDOM for r in table):
        if runs == 1:
            lines.append("a random kind's k: mean ± std over its sets, each averaged over the "
                         "seeds")  # fmt: skip
        lines.append(SETS_NOTE)
        if any(not r.exact for r in table):
            lines.append(SAMPLING_NOTE)
    lines.append(f"block forwards: {res.block_passes:,} of the {res.full_passes:,} a whole forward "
                 "per intervention would run (the intact prefix reused)" + (" in the first run"
                 if runs > 1 else ""))  # fmt: skip
    return "\n".join(lines) + "\n"


CKPT_KEYS = ["iteration"]  # then row_keys(METRICS)
SUMMARY_HEAD = (f"{'iter':>6} | {'intact CE':>9} | {'ΔCE, 1 block':>18} | {'worst block':>17} | "
                f"{'agree, 1 block':>18} | {'ΔCE, adj. swap':>18}")  # fmt: skip


def render_every_checkpoint(steps: Sequence[Step], names: Sequence[str], study: LesionStudy,
                            fmt: str = "table") -> str:  # fmt: skip
    """Runs through training: a summary line per iteration they all kept (table), or every
    row (json, csv)."""
    tables = [(st.iteration, across_runs(st.results, names)) for st in steps]
    if fmt == "csv":
        return to_csv([{"iteration": it, **r.record()} for it, table in tables for r in table],
                      CKPT_KEYS + row_keys(METRICS))  # fmt: skip
    if fmt == "json":
        out = {"runs": list(names), "seeds": list(study.seeds), "metrics": list(METRICS),
               "steps": [{"iteration": it, "rows": [r.record() for r in table]}
                         for it, table in tables]}  # fmt: skip
        return json.dumps(out, indent=2) + "\n"
    m = steps[0].results[0].model
    R = len(names)
    spread = f"mean ± std over {R} runs" if R > 1 else "one run"
    lines = [f"Lesion study through training: {', '.join(names)} ({m.scheme}, L={m.depth}, "
             f"C={m.width}), {study.setting}; {spread}",
             SUMMARY_HEAD, "-" * len(SUMMARY_HEAD)]  # fmt: skip
    for st in steps:
        lines.append(_summary_line(st.iteration, [summary(rows(r)) for r in st.results]))
    lines.append("ΔCE, 1 block: the change in cross-entropy with one block deleted, mean over "
                 "the blocks; worst block: the one whose deletion costs most")  # fmt: skip
    return "\n".join(lines) + "\n"


def _summary_line(it: int, sums: list) -> str:
    """One kept step: each run's summary, mean ± std (ddof 1) over the runs."""

    def pm(field: str) -> str:
        a = np.array([getattr(s, field) for s in sums], dtype=float)  # (R,)
        if not np.isfinite(a).all():
            return f"{'-':>18}"
        return _pm(float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0)

    worst = ",".join(str(s.worst_block) for s in sums)
    wd = np.mean([s.worst_dce for s in sums])
    ce = np.mean([s.ce for s in sums])
    return (f"{it:>6} | {ce:>9.4f} | {pm('block_dce')} | {worst + f' ({wd:.3f})':>17} | "
            f"{pm('block_agree')} | {pm('swap_dce')}")  # fmt: skip


def text_name(path: str | None) -> str:
    """The text as a title names it: its file's name, or the built-in corpus."""
    return "the built-in corpus" if path is None else os.path.basename(path)
