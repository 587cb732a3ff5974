"""Gradient flow through a real, trained network: a pretrained GPT-2 on real text.

Legend: B = batch, T = time (seq), L = n_layer, N = tokens in the text.

:mod:`resgrad.lab.flow` measures stacks at initialization. Here the stack is a
loaded model (:func:`resgrad.train.pretrained.load_pretrained`) and the loss is its
cross-entropy on windows of a real text: seed s draws B windows of T + 1 tokens from
``np.random.default_rng([s, 1])``, and the per-layer norms are those of
:func:`resgrad.lab.flow.profile`'s "lm" loss (``stream_grad``, ``stream_act``, ``param_grad``),
aggregated over the seeds into the same :class:`resgrad.lab.flow.FlowRecord` rows,
with ``init`` = ``"pretrained:<name>"``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from resgrad.lab.flow import PRETRAINED, FlowConfig, FlowRecord, Profile, _lm_profile, aggregate
from resgrad.nn.model import GPT, GPTConfig

__all__ = ["check_seq", "measure_model", "text_windows"]


def text_windows(ids: np.ndarray, seq: int, batch: int, seed: int) -> np.ndarray:
    """B random windows of T + 1 consecutive tokens of ``ids`` (N,): (B, T + 1) int64.

    Raises
    ------
    ValueError
        If the text holds fewer than T + 1 tokens.
    """
    ids = np.asarray(ids, dtype=np.int64)
    if len(ids) < seq + 1:
        raise ValueError(f"the text is {len(ids)} tokens; --seq {seq} needs at least {seq + 1}")
    rng = np.random.default_rng([seed, 1])
    starts = rng.integers(0, len(ids) - seq, size=batch)  # (B,)
    return ids[starts[:, None] + np.arange(seq + 1)]  # (B, T + 1)


def check_seq(cfg: GPTConfig, seq: int) -> None:
    """Refuse windows of ``seq`` tokens longer than the model's context (its block_size)."""
    if seq > cfg.block_size:
        raise ValueError(f"seq {seq} is longer than the model's context of {cfg.block_size}")


def measure_model(
    model: GPT,
    ids: np.ndarray,
    seq: int = 64,
    batch: int = 4,
    seeds: Sequence[int] = (0,),
    name: str = "model",
) -> list[FlowRecord]:
    """Per-layer gradient flow of ``model`` on windows of the token ids ``ids`` (N,).

    Returns
    -------
    list of FlowRecord
        As :func:`resgrad.lab.flow.measure`, ``init`` set to ``"pretrained:<name>"``.

    Raises
    ------
    ValueError
        A ``seq`` longer than the model's context, or a text too short for it.
    """
    c = model.cfg
    check_seq(c, seq)
    cfg = FlowConfig(
        variant=c.variant, depth=c.n_layer, width=c.n_embd, heads=c.n_head, seq=seq,
        batch=batch, init=c.init, loss="lm", seeds=tuple(seeds), vocab=c.vocab_size,
    )  # fmt: skip
    profiles: list[Profile] = []
    for s in cfg.seeds:
        tokens = text_windows(ids, seq, batch, s)  # (B, T + 1)
        # flow's "lm" pass on this model as it is (its dtype, its ln_eps): no re-initialization
        profiles.append(_lm_profile(cfg, s, model, tokens, None))
    return [dataclasses.replace(r, init=f"{PRETRAINED}{name}") for r in aggregate(cfg, profiles)]
