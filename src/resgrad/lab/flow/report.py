"""The gradient-flow lab's records written out: JSON, CSV, a table, plot specs; the lesson's
stack layer by layer.

Legend: L = depth, K = number of seeds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from resgrad.formats.records import to_csv, to_json
from resgrad.lab.flow.core import RECORD_FIELDS, FlowRecord
from resgrad.lab.lesson import StackConfig, make_bank, run_stack
from resgrad.plots import PlotSpec, Series


def records_to_json(records: Sequence[FlowRecord]) -> str:
    """The records as a JSON list of objects (full float precision)."""
    return to_json([r.as_dict() for r in records], RECORD_FIELDS)


def records_to_csv(records: Sequence[FlowRecord]) -> str:
    """The records as CSV with a header row; floats by ``repr`` (full precision)."""
    return to_csv([r.as_dict() for r in records], RECORD_FIELDS)


PRETRAINED = "pretrained:"  # a FlowRecord's init for a loaded model: pretrained:<name>


def describe(records: Sequence[FlowRecord]) -> str:
    """What ``records`` measured, in one line: each loaded model by name, scheme, L and C;
    or stacks "at initialization", with their init and depth (or depth range)."""
    loaded = dict.fromkeys((r.init[len(PRETRAINED):], r.variant, r.depth, r.width)
                           for r in records if r.init.startswith(PRETRAINED))  # fmt: skip
    if loaded:
        return "; ".join(f"{n} ({v}, L={d}, C={w})" for n, v, d, w in loaded)
    inits = ", ".join(dict.fromkeys(r.init for r in records))
    Ls = sorted({r.depth for r in records})
    depth = f"L={Ls[0]}" if len(Ls) == 1 else f"L={Ls[0]}..{Ls[-1]}"
    return f"at initialization ({inits} init, {depth})"


def format_records(records: Sequence[FlowRecord]) -> str:
    """A readable table under a line that says what was measured (:func:`describe`): per
    variant and layer, the stream gradient (with its spread over the seeds), the stream
    activation and the block's parameter gradient."""
    by = {(r.variant, r.depth, r.width, r.layer, r.quantity): r for r in records}
    stacks = list(dict.fromkeys((r.variant, r.depth, r.width) for r in records))
    header = (
        f"{'variant':>15} | {'layer':>5} | {'grad mean':>11} | {'grad std':>10} | "
        f"{'grad min':>10} | {'grad max':>10} | {'act mean':>10} | {'param grad':>10}"
    )
    lines = [f"gradient flow {describe(records)}", header, "-" * len(header)]
    for v, d, w in stacks:
        for i in range(d + 1):
            g, a = by[(v, d, w, i, "stream_grad")], by[(v, d, w, i, "stream_act")]
            p = by.get((v, d, w, i, "param_grad"))
            ptxt = f"{p.mean:>10.3e}" if p is not None else f"{'':>10}"
            lines.append(
                f"{v:>15} | {i:>5} | {g.mean:>11.4e} | {g.std:>10.3e} | {g.min:>10.3e} | "
                f"{g.max:>10.3e} | {a.mean:>10.3e} | {ptxt}"
            )
    return "\n".join(lines) + "\n"


_YLABELS = {
    "stream_grad": "||dL/dx_i||, gradient reaching layer i's input",
    "stream_act": "||x_i||, residual stream on the forward pass",
    "param_grad": "||dL/dtheta_i||, gradient of layer i's parameters",
}


def flow_plot_spec(records: Sequence[FlowRecord], quantity: str = "stream_grad") -> PlotSpec:
    """Per-layer ``quantity`` against layer index, log y, one line per stack.

    Each line is the mean over the seeds; with K > 1 a band spans min..max.
    The series' y values are exactly the records' means.
    """
    rows = [r for r in records if r.quantity == quantity]
    if not rows:
        raise ValueError(f"no records of quantity {quantity!r}")
    stacks = list(dict.fromkeys((r.variant, r.depth, r.width) for r in rows))
    widths = {w for _, _, w in stacks}
    depths = {d for _, d, _ in stacks}
    series = []
    for v, d, w in stacks:
        rs = sorted(
            (r for r in rows if (r.variant, r.depth, r.width) == (v, d, w)), key=lambda r: r.layer
        )
        label = v + (f" L={d}" if len(depths) > 1 else "") + (f" C={w}" if len(widths) > 1 else "")
        init = next(r.init for r in rows if (r.variant, r.depth, r.width) == (v, d, w))
        if init.startswith(PRETRAINED):  # a loaded model: its name first
            label = f"{init[len(PRETRAINED) :]} ({label})"
        band = rs[0].n_seeds > 1
        series.append(
            Series(
                label=label,
                x=[r.layer for r in rs],
                y=[r.mean for r in rs],
                lo=[r.min for r in rs] if band else None,
                hi=[r.max for r in rs] if band else None,
            )
        )
    r0 = rows[0]
    what = "loss " + ", ".join(sorted({r.loss for r in rows}))
    shape = f"C={r0.width}" if len(widths) == 1 else "C varies"
    k = max(r.n_seeds for r in rows)
    note = f"{shape}, T={r0.seq}, B={r0.batch}, {what}; mean over {k} seed(s)"
    if k > 1:
        note += ", band = min..max"
    ylabel = _YLABELS.get(quantity.split(":")[0], quantity)
    if ":" in quantity:
        ylabel = f"||dL/d {quantity.split(':', 1)[1]}|| at layer i"
    return PlotSpec(
        title=f"Gradient flow {'of ' if rows[0].init.startswith(PRETRAINED) else ''}"
        f"{describe(rows)}: {quantity} per layer",
        xlabel="layer index i (0 = input side)",
        ylabel=ylabel,
        series=tuple(series),
        yscale="log",
        notes=(note,),
    )


# -- the lesson's stack, per layer, for `resgrad depth --per-layer` --------------------


@dataclass(frozen=True)
class LessonLayerRow:
    depth: int  # N, the stack's depth
    layer: int  # i = 0..N; layer 0 is the input (the lesson's number), layer N the output
    no_residual: float  # ||dL/dx_i|| without the + x path
    with_residual: float  # ||dL/dx_i|| with it
    ratio: float  # with_residual / sqrt(B * C)


def lesson_per_layer(cfg: StackConfig | None = None) -> list[LessonLayerRow]:
    """The lesson's stack layer by layer: for each depth N in ``cfg.depths``, the norm
    of the gradient reaching every layer's input, without and with residuals.

    Row ``layer=0`` of depth N holds exactly the lesson's table entry for N.
    ``cfg`` defaults to the lesson's own ``StackConfig()``.
    """
    cfg = StackConfig() if cfg is None else cfg
    bank = make_bank(cfg)
    rows = []
    for N in cfg.depths:
        plain = run_stack(cfg, N, residual=False, bank=bank).grad_norms  # N + 1
        res = run_stack(cfg, N, residual=True, bank=bank).grad_norms  # N + 1
        for i in range(N + 1):
            rows.append(LessonLayerRow(N, i, plain[i], res[i], res[i] / cfg.upstream_norm))
    return rows


def lesson_plot_spec(cfg: StackConfig | None = None, depth: int | None = None) -> PlotSpec:
    """Per-layer gradient norm of the lesson's stack of ``depth`` (default: the deepest of
    ``cfg.depths``), without and with residuals, against layer index on a log scale.

    The series' y values are exactly :func:`lesson_per_layer`'s rows for that depth.
    """
    cfg = StackConfig() if cfg is None else cfg
    N = max(cfg.depths) if depth is None else depth
    rows = lesson_per_layer(dataclasses.replace(cfg, depths=(N,)))
    x = [r.layer for r in rows]
    return PlotSpec(
        title=f"The lesson's tanh stack, N={N}: gradient reaching each layer's input",
        xlabel="layer index i (0 = input, N = output)",
        ylabel="||dL/dx_i||",
        series=(
            Series("no residual: x = tanh(x @ W)", x, [r.no_residual for r in rows]),
            Series("with residual: x = x + tanh(x @ W)", x, [r.with_residual for r in rows]),
        ),
        yscale="log",
        notes=(
            f"C={cfg.width}, B={cfg.batch}, W = randn(C, C) * {cfg.scale:g} / sqrt(C), "
            f"seed {cfg.seed}; upstream gradient of ones, norm sqrt(B*C) = {cfg.upstream_norm:g}",
        ),
    )


def lesson_per_layer_text(cfg: StackConfig | None = None, fmt: str = "table",
                          ratio: bool = False) -> str:  # fmt: skip
    """The lesson's stack layer by layer (:func:`lesson_per_layer`; layer 0 = the lesson's
    number) as ``resgrad depth --per-layer`` prints it: a table, ``json`` or ``csv``."""
    cfg = cfg or StackConfig()
    rows = lesson_per_layer(cfg)
    keys = ["depth", "layer", "no_residual", "with_residual"] + (["ratio"] if ratio else [])
    if fmt == "table":
        header = f"{'depth N':>8} | {'layer i':>7} | {'no residual':>14} | {'with residual':>14}"
        header += f" | {'ratio':>14}" if ratio else ""
        lines = [header, "-" * len(header)]
        for r in rows:
            line = (
                f"{r.depth:>8} | {r.layer:>7} | {r.no_residual:>14.6e} | {r.with_residual:>14.6f}"
            )
            line += f" | {r.ratio:>14.6f}" if ratio else ""
            lines.append(line)
        return "\n".join(lines) + "\n"
    dicts = [{k: getattr(r, k) for k in keys} for r in rows]
    if fmt == "json":
        return to_json(dicts, keys, meta={"config": cfg.as_dict()}, indent=2)
    return to_csv(dicts, keys)
