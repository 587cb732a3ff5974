"""Gradient flow of a trained model as a study (:class:`FlowStudy`,
:mod:`resgrad.lab.study.protocol`): per-layer norms on text windows, so that it follows a run
through its checkpoints and averages runs as the paths and lesion studies do; and the
through-training table.

Legend: L = blocks, S = window seeds, R = runs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from resgrad.formats.records import to_csv
from resgrad.lab.flow.core import FlowConfig, FlowRecord, measure
from resgrad.lab.flow.pretrained import measure_model
from resgrad.lab.flow.report import format_records, records_to_csv, records_to_json
from resgrad.lab.study.budget import FLOPS_PER_S, TIME_BUDGET_S, bar, refuse_over_budget
from resgrad.lab.study.protocol import Step
from resgrad.lab.study.windows import refuse_long_seq
from resgrad.perf import memory

__all__ = [
    "FlowCost",
    "FlowStudy",
    "FlowSummary",
    "measure_stacks",
    "render_every_checkpoint",
    "render_records",
    "summary",
]

PASS_OVERHEAD_S = 1e-3  # a forward and backward pass's Python and NumPy calls per block
MORE = "pass --budget {seconds} to allow it, or ask for fewer --seeds"


class FlowCost(NamedTuple):
    """What a flow study will cost, estimated before it starts."""

    passes: int  # forward and backward passes: one per window seed and model
    seconds: float  # an estimate: 3 x a forward's flops per pass, plus its fixed cost


@dataclass(frozen=True)
class FlowStudy:
    """Per-layer gradient and activation norms of a model's cross-entropy on ``batch``
    windows of ``seq`` tokens per window seed (:func:`measure_model`), refused over ``budget``
    seconds. ``seq_default`` says that ``seq`` is the command's default."""

    seq: int = 64
    batch: int = 4
    seeds: tuple[int, ...] = (0,)
    budget: float = TIME_BUDGET_S
    seq_default: bool = False
    name: str = "flow"

    def fits(self, cfg) -> None:
        """Refuse a model ``seq`` does not fit, or memory cannot hold (one seed at a time)."""
        refuse_long_seq(cfg, self.seq, self.seq_default)
        memory.require(memory.pretrained_flow_bytes(cfg, self.seq, self.batch),
                       f"this model (L={cfg.n_layer} C={cfg.n_embd} V={cfg.vocab_size}) on "
                       f"{self.batch} windows of {self.seq} tokens")  # fmt: skip

    def cost(self, cfg, models: int) -> FlowCost:
        """A forward about 24 B T C^2 + 4 B T^2 C flops a block and 2 B T C V for the head;
        the backward twice that."""
        B, T, C, V, L = self.batch, self.seq, cfg.n_embd, cfg.vocab_size, cfg.n_layer
        flops = 3 * (L * (24 * B * T * C * C + 4 * B * T * T * C) + 2 * B * T * C * V)
        passes = models * len(self.seeds)
        return FlowCost(passes, passes * (L * PASS_OVERHEAD_S + flops / FLOPS_PER_S))

    def require(self, cfg, models: int, runs: int | None = None) -> None:
        """Refuse ``models`` studies estimated longer than the budget."""
        c = self.cost(cfg, models)
        what = f"the gradient flow of this model (L={cfg.n_layer} C={cfg.n_embd})"
        refuse_over_budget(c.seconds, self.budget, what, f"{c.passes:,} passes", MORE)

    def bar(self, cost: FlowCost):
        """A progress bar over the passes."""
        return bar(cost.passes, cost.seconds, "pass", "flow")

    def run(self, model, ids, name: str = "", tick=None) -> list[FlowRecord]:
        """The per-layer records of ``model`` on each seed's windows of ``ids`` (N,)."""
        records = measure_model(model, ids, self.seq, self.batch, self.seeds, name=name or "model")
        if tick is not None:
            tick(len(self.seeds))
        return records


def measure_stacks(variants: Sequence[str], **sizes) -> list[FlowRecord]:
    """:func:`~resgrad.lab.flow.core.measure` of a stack of each scheme of ``variants``, all
    of one size (``sizes``: :class:`~resgrad.lab.flow.core.FlowConfig`'s fields), in order;
    refused first if memory cannot hold the largest."""
    cfgs = [FlowConfig(variant=v, **sizes) for v in variants]
    c = cfgs[0]  # the variants share their sizes
    memory.require(max(memory.flow_bytes(c) for c in cfgs),
                   f"this flow measurement (depth {c.depth}, width {c.width}, seq {c.seq}, "
                   f"batch {c.batch})")  # fmt: skip
    return [r for cfg in cfgs for r in measure(cfg)]


def render_records(records: Sequence[FlowRecord], fmt: str = "table") -> str:
    """``records`` as ``resgrad flow`` prints them: a table, ``json`` or ``csv``."""
    if fmt == "json":
        return records_to_json(records)
    if fmt == "csv":
        return records_to_csv(records)
    return format_records(records)


class FlowSummary(NamedTuple):
    """A flow study in a few numbers."""

    grad_in: float  # ||dL/dx_0||, the gradient reaching the first block, mean over the seeds
    grad_out: float  # ||dL/dx_L||, the gradient arriving at the last block's output
    ratio: float  # grad_in / grad_out: > 1, the gradient grows on its way down
    act_out: float  # ||x_L||, the stream's norm at the top


def summary(records: Sequence[FlowRecord]) -> FlowSummary:
    """:class:`FlowSummary` of one model's records."""
    by = {(r.layer, r.quantity): r.mean for r in records}
    L = max(r.layer for r in records)
    g0, gL = by[(0, "stream_grad")], by[(L, "stream_grad")]
    return FlowSummary(g0, gL, g0 / gL if gL else float("nan"), by[(L, "stream_act")])


KEYS = ["iteration", "runs"] + [f"{f}{s}" for f in FlowSummary._fields for s in ("", "_std")]


def _rows(steps: Sequence[Step]) -> list[dict]:
    out = []
    for st in steps:
        sums = np.array([summary(r) for r in st.results], dtype=float)  # (R, 4)
        std = sums.std(axis=0, ddof=1) if len(sums) > 1 else np.zeros(sums.shape[1])
        row = {"iteration": st.iteration, "runs": len(sums)}
        for j, f in enumerate(FlowSummary._fields):
            row[f], row[f"{f}_std"] = float(sums[:, j].mean()), float(std[j])
        out.append(row)
    return out


def render_every_checkpoint(steps: Sequence[Step], names: Sequence[str], study: FlowStudy,
                            fmt: str = "table") -> str:  # fmt: skip
    """Runs through training: per iteration they all kept, the gradient reaching the first
    block and arriving at the last, their ratio and the stream's norm at the top, each the
    mean ± std (ddof 1; 0 for one run) over the runs of each run's mean over its window seeds."""
    rows = _rows(steps)
    if fmt == "csv":
        return to_csv(rows, KEYS)
    if fmt == "json":
        return json.dumps({"runs": list(names), "seeds": list(study.seeds), "rows": rows},
                          indent=2) + "\n"  # fmt: skip
    m = steps[0].checkpoints[0].model
    spread = f"mean ± std over {len(names)} runs" if len(names) > 1 else "one run"
    head = (f"{'iter':>6} | {'||dL/dx_0||':>19} | {'||dL/dx_L||':>19} | {'ratio':>17} | "
            f"{'||x_L||':>17}")  # fmt: skip
    lines = [f"Gradient flow through training: {', '.join(names)} ({m.scheme}, L={m.depth}, "
             f"C={m.width}), T={study.seq} B={study.batch}, {len(study.seeds)} window "
             f"seed(s); {spread}", head, "-" * len(head)]  # fmt: skip
    for r in rows:
        lines.append(f"{r['iteration']:>6} | {r['grad_in']:>9.3e} ± {r['grad_in_std']:<7.1e} | "
                     f"{r['grad_out']:>9.3e} ± {r['grad_out_std']:<7.1e} | "
                     f"{r['ratio']:>7.3f} ± {r['ratio_std']:<7.3f} | "
                     f"{r['act_out']:>7.3f} ± {r['act_out_std']:<7.3f}")  # fmt: skip
    lines.append("||dL/dx_0||: the gradient reaching the first block; ||dL/dx_L||: arriving at "
                 "the last block's output; ratio: the first over the second")  # fmt: skip
    return "\n".join(lines) + "\n"
