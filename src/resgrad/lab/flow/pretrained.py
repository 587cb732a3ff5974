"""Gradient flow through a real, trained network: a pretrained GPT-2 on real text.

Legend: B = batch, T = time (seq), L = n_layer, N = tokens in the text.

:mod:`resgrad.lab.flow` measures stacks at initialization. Here the stack is a
loaded model (:func:`resgrad.train.pretrained.load_pretrained`) and the loss is its
cross-entropy on windows of a real text: seed s draws B windows of T + 1 tokens from
``np.random.default_rng([s, 1])``, and the per-layer norms are those of
:func:`resgrad.lab.flow.core.profile`'s "lm" loss (``stream_grad``, ``stream_act``, ``param_grad``),
aggregated over the seeds into the same :class:`resgrad.lab.flow.core.FlowRecord` rows,
with ``init`` = ``"pretrained:<name>"``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from resgrad.lab.flow.core import FlowConfig, FlowRecord, Profile, _lm_profile, aggregate
from resgrad.lab.flow.report import PRETRAINED
from resgrad.lab.study.windows import check_seq, text_windows
from resgrad.nn.model import GPT


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
        As :func:`resgrad.lab.flow.core.measure`, ``init`` set to ``"pretrained:<name>"``.

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
