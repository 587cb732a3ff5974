"""Text windows: the batches every study of a model on text draws, seed by seed.

Legend: B = batch, T = time (seq), N = tokens in the text.
"""

from __future__ import annotations

import numpy as np

from resgrad.lab.study.refusals import SEQ_OVER_CONTEXT, SEQ_TOO_LONG, TEXT_TOO_SHORT
from resgrad.nn.model import GPTConfig


def text_windows(ids: np.ndarray, seq: int, batch: int, seed: int) -> np.ndarray:
    """B random windows of T + 1 consecutive tokens of ``ids`` (N,): (B, T + 1) int64.

    Raises
    ------
    ValueError
        If the text holds fewer than T + 1 tokens.
    """
    ids = np.asarray(ids, dtype=np.int64)
    if len(ids) < seq + 1:
        raise TEXT_TOO_SHORT(tokens=len(ids), seq=seq, need=seq + 1)
    rng = np.random.default_rng([seed, 1])
    starts = rng.integers(0, len(ids) - seq, size=batch)  # (B,)
    return ids[starts[:, None] + np.arange(seq + 1)]  # (B, T + 1)


def check_seq(cfg: GPTConfig, seq: int) -> None:
    """Refuse windows of ``seq`` tokens longer than the model's context (its block_size)."""
    if seq > cfg.block_size:
        raise SEQ_OVER_CONTEXT(seq=seq, context=cfg.block_size)


def refuse_long_seq(cfg, seq: int, default: bool = False) -> None:
    """Refuse, in one line, windows of ``seq`` tokens longer than the model's positions
    (``default``: ``seq`` is the command's default, and the line says so).

    Raises
    ------
    ValueError
    """
    if seq > cfg.block_size:
        given = " (the default)" if default else ""
        raise SEQ_TOO_LONG(seq=seq, given=given, positions=cfg.block_size)
