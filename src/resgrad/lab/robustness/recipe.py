"""The equal-loss study's recipe: a learning rate for each scheme and depth from a short pilot
sweep, and the stated rule that leaves out a model that did not train.

**The pilot.** Each (scheme, depth) trains one pilot model at every candidate learning rate
(:attr:`RobustnessConfig.lrs`) for :attr:`RobustnessConfig.pilot_iters` steps, on a seed no
model of the study trains on, at the scheme's reference dose; its validation loss at the end
decides. The lowest wins (a diverged pilot never does; a tie goes to the smaller rate), and
every model of that scheme and depth, at every dose, trains at it: the dose stays the only
thing that differs inside a dosed scheme. A norm-free stack (``residual``) that a rate
sends over the edge is held back by its own pilot, not by hand.

**The rule.** A model is left out of the analysis, and listed, when it diverged, or when
its lowest loss on the study's windows stays above the unigram plateau less
:data:`PLATEAU_MARGIN`: the loss of the best model that ignores context
(:func:`~resgrad.train.data.unigram_entropy` of the training split), where a model sits
while it has learned only which characters are common. Such a model has nothing to say
about trained networks, and its lesion costs would be read at losses it never left.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from resgrad.lab.experiments.experiment import run_cell

__all__ = ["PLATEAU_MARGIN", "choose_lrs", "left_out", "phase", "pilot_cell", "pilot_lines"]

PLATEAU_MARGIN = 0.1  # nats below the unigram plateau a model must reach to be read


def pilot_cell(point: tuple) -> list[dict]:
    """Train one pilot model (resuming its own run): one row, its scheme, depth, learning
    rate, final validation loss and whether it diverged. A module-level job for the grid."""
    cfg, (scheme, depth, lr) = point
    (row,) = run_cell(cfg)
    loss = row["val_loss"]
    return [{"scheme": scheme, "depth": int(depth), "lr": float(lr),
             "diverged": bool(row["diverged"]),
             "val_loss": float(loss) if loss is not None else math.nan}]  # fmt: skip


def _by_cell(rows: Sequence[dict]) -> dict[tuple[str, int], list[dict]]:
    """The pilot rows of each (scheme, depth), in the order first met."""
    by: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        by.setdefault((r["scheme"], int(r["depth"])), []).append(r)
    return by


def choose_lrs(rows: Sequence[dict]) -> dict[tuple[str, int], float]:
    """{(scheme, depth): the learning rate whose pilot ended lowest}: a diverged pilot, or
    one whose loss is not finite, never wins; a tie goes to the smaller rate; where every
    pilot of a scheme and depth failed, the smallest rate (its models may diverge too, and
    are then left out by :func:`left_out`)."""
    out = {}
    for key, rs in _by_cell(rows).items():
        ok = [r for r in rs if not r["diverged"] and math.isfinite(r["val_loss"])]
        best = min(ok, key=lambda r: (r["val_loss"], r["lr"])) if ok else None
        out[key] = float(best["lr"]) if best else min(float(r["lr"]) for r in rs)
    return out


def pilot_lines(rows: Sequence[dict], chosen: dict[tuple[str, int], float]) -> list[str]:
    """The pilot as printed: a line per (scheme, depth), every rate's final loss, the chosen
    one marked."""
    lines = []
    for (scheme, depth), rs in _by_cell(rows).items():
        parts = []
        for r in sorted(rs, key=lambda r: r["lr"]):
            loss = "diverged" if r["diverged"] else f"{r['val_loss']:.3f}"
            mark = " (chosen)" if r["lr"] == chosen[scheme, depth] else ""
            parts.append(f"lr {r['lr']:g} -> {loss}{mark}")
        lines.append(f"  {scheme} L={depth}: " + ", ".join(parts))
    return lines


def left_out(rows: Sequence[dict], plateau: float) -> dict[tuple, str]:
    """{model key (scheme, depth, dose, seed): why it is left out}: the models of ``rows``
    (every checkpoint's row of :func:`~resgrad.lab.robustness.experiment.measure_cell`)
    that diverged, or whose lowest loss stays above ``plateau`` - :data:`PLATEAU_MARGIN`."""
    by: dict[tuple, list[dict]] = {}
    for r in rows:
        key = (r["scheme"], int(r["depth"]), float(r["dose"]), int(r["seed"]))
        by.setdefault(key, []).append(r)
    out = {}
    bar = plateau - PLATEAU_MARGIN
    for key, rs in by.items():
        low = min(float(r["loss"]) for r in rs)
        if any(r.get("diverged") for r in rs):
            out[key] = f"diverged (read up to step {max(int(r['iteration']) for r in rs)})"
        elif not low < bar:
            out[key] = (f"its lowest loss {low:.3f} stays above the unigram plateau less "
                        f"{PLATEAU_MARGIN:g} ({bar:.3f})")  # fmt: skip
    return out


def phase(level: float, plateau: float) -> str:
    """A level's phase of training, named by where it lies against the unigram plateau:
    the descent to it, the plateau itself (within :data:`PLATEAU_MARGIN`), or learning
    below it."""
    if level > plateau + PLATEAU_MARGIN:
        return "descent to the plateau"
    if level >= plateau - PLATEAU_MARGIN:
        return "on the plateau"
    return f"learning, {plateau - level:.2f} below the plateau"
