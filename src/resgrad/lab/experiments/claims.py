"""Two claims from the papers, measured at initialization over seeds: DeepNet's bounded
model update and GPT-2's scaled init.

Legend: L = depth, C = width, K = number of seeds.

- :func:`update_size` (Wang et al. 2022, "DeepNet", section 3): after one SGD step
  on every block's weights, how far the last block's output moves, relative to its
  norm, ``||x_L' - x_L|| / ||x_L||``. DeepNet's argument: post-LN's model update
  grows with depth, DeepNorm's stays bounded.
- :func:`stream_growth` (Radford et al. 2019, GPT-2): ``||x_L|| / ||x_0||`` of a
  pre-LN stack's residual stream, with the residual output projections scaled by
  1/sqrt(2L) (GPT-2's init) or with the scaling undone (plain normal(0, 0.02)).

:func:`claim_table` runs both over depths and seeds and gives mean, std (ddof=1),
min and max per cell; ``resgrad claims`` prints it. Every number the README quotes
for these claims comes from that command.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from resgrad.lab.flow.core import FlowConfig, positive_ints, profile, seed_tuple
from resgrad.nn.model import GPT, GPTConfig

__all__ = [
    "CLAIMS",
    "ClaimRow",
    "claim_table",
    "format_claims",
    "seeds_text",
    "stream_growth",
    "update_size",
]

CLAIMS = ("update-size", "scaled-init")


def update_size(
    variant: str, depth: int, seed: int, lr: float = 1e-2, width: int = 32, seq: int = 8
) -> float:
    """``||x_L' - x_L|| / ||x_L||`` after one SGD step (lr) on the blocks, Xavier init.

    The model (V=65, H=4, B=4, float64) and its random tokens are seeded by ``seed``.
    """
    cfg = GPTConfig(vocab_size=65, block_size=seq, n_layer=depth, n_head=4, n_embd=width,
                    variant=variant, init="xavier")  # fmt: skip
    gpt = GPT(cfg, seed=seed, dtype=np.float64)
    ids = np.random.default_rng([seed, 1]).integers(0, 65, size=(4, seq + 1))  # (B, T + 1)
    _, _, c0 = gpt.forward(ids[:, :-1], ids[:, 1:])
    grads = gpt.backward(c0)
    for k, g in grads.items():
        if k.startswith("blocks."):
            gpt.params[k] = gpt.params[k] - lr * g  # one SGD step on the blocks only
    _, _, c1 = gpt.forward(ids[:, :-1], ids[:, 1:])
    x0, x1 = c0.xs[-1], c1.xs[-1]  # (B, T, C) the last block's output, before and after
    return float(np.linalg.norm(x1 - x0) / np.linalg.norm(x0))


def stream_growth(depth: int, seed: int, scaled: bool = True, width: int = 32,
                  seq: int = 16) -> float:  # fmt: skip
    """``||x_L|| / ||x_0||`` of a pre-LN stack at GPT-2 init; ``scaled=False`` multiplies
    the residual output projections (``*.w_proj``) back by sqrt(2L)."""
    cfg = FlowConfig(variant="pre-ln", depth=depth, width=width, heads=4, seq=seq, batch=4,
                     seeds=(seed,))  # fmt: skip
    params = GPT(cfg.gpt_config(), seed=seed, dtype=np.float64).params
    if not scaled:  # undo GPT-2's 1/sqrt(2L): plain normal(0, 0.02) projections
        params = {k: p * math.sqrt(2 * depth) if k.endswith("w_proj") else p
                  for k, p in params.items()}  # fmt: skip
    a = profile(cfg, seed, params=params).stream_act  # (L + 1,)
    return float(a[-1] / a[0])


@dataclass(frozen=True)
class ClaimRow:
    claim: str  # one of CLAIMS
    setting: str  # the variant (update-size) or scaled / unscaled (scaled-init)
    depth: int
    values: tuple[float, ...]  # one per seed
    seeds: tuple[int, ...] = ()  # the seed of each value

    @property
    def mean(self) -> float:
        return statistics.mean(self.values)

    @property
    def std(self) -> float:
        return statistics.stdev(self.values) if len(self.values) > 1 else 0.0


def claim_table(
    claim: str, depths: Sequence[int] = (6, 24, 96), seeds: Sequence[int] | int = range(5)
) -> list[ClaimRow]:
    """Every (setting, depth) of ``claim`` measured at every seed (a count K: seeds 0..K-1).

    ``depths`` must be distinct positive integers: a depth given twice is refused, not
    measured twice into two equal rows.
    """
    depths = positive_ints("depths", depths)
    seeds = seed_tuple(seeds)
    if claim == "update-size":
        settings = {v: (lambda L, s, v=v: update_size(v, L, s)) for v in ("post-ln", "deepnorm")}
    elif claim == "scaled-init":
        settings = {"scaled": lambda L, s: stream_growth(L, s, True),
                    "unscaled": lambda L, s: stream_growth(L, s, False)}  # fmt: skip
    else:
        raise ValueError(f"unknown claim {claim!r}; expected one of {', '.join(CLAIMS)}")
    return [
        ClaimRow(claim, name, L, tuple(fn(L, s) for s in seeds), seeds)
        for name, fn in settings.items()
        for L in depths
    ]


def format_claims(rows: Sequence[ClaimRow]) -> str:
    """A Markdown table: mean ± std (min..max) over the seeds of every row."""
    k = len(rows[0].values) if rows else 0
    which = f" ({seeds_text(rows[0].seeds)})" if rows and rows[0].seeds else ""
    lines = [f"| claim | setting | depth | mean ± std over {k} seeds{which} | min .. max |",
             "| --- | --- | ---: | --- | --- |"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r.claim} | {r.setting} | {r.depth} | {r.mean:.3g} ± {r.std:.2g} "
                     f"| {min(r.values):.3g} .. {max(r.values):.3g} |")  # fmt: skip
    return "\n".join(lines)


def seeds_text(seeds: Sequence[int]) -> str:
    """Seeds as a reader writes them: runs of consecutive seeds as ``0-9``, e.g. ``0-2, 7``."""
    parts, i = [], 0
    while i < len(seeds):
        j = i
        while j + 1 < len(seeds) and seeds[j + 1] == seeds[j] + 1:
            j += 1
        parts.append(str(seeds[i]) if j == i else f"{seeds[i]}-{seeds[j]}")
        i = j + 1
    return ", ".join(parts)
