"""Pretrained models in: a hub name, a Hugging Face directory or a nanoGPT ``ckpt.pt``.

``--from-pretrained`` and ``--init-from`` take one string, resolved in this order:

1. a file ending in ``.pt``: nanoGPT's checkpoint (:mod:`resgrad.formats.nanogpt`,
   needs ``resgrad[torch]``); its tokenizer is the ``tokenizer.json`` (or
   ``vocab.json`` + ``merges.txt``) beside it, if any;
2. a directory: a Hugging Face GPT-2 directory (:func:`resgrad.formats.hf.load_hf`)
   and the tokenizer in it;
3. a hub name (``gpt2``, ``gpt2-medium``, ``gpt2-large``, ``gpt2-xl``, ``owner/name``):
   downloaded once by ``huggingface_hub`` into its usual cache, then as 2. Offline,
   a one-line error names the model and says to pass a local directory.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from resgrad.formats.hf import export_hf, load_hf, resolve_pretrained
from resgrad.nn.model import GPT
from resgrad.train.bpe import BPETokenizer, char_tokenizer_json, check_vocab, load_tokenizer_dir
from resgrad.train.data import CharTokenizer
from resgrad.train.sample import continue_text, load_model

__all__ = ["encode_prompt", "export_checkpoint", "load_pretrained", "sample_pretrained"]


def load_pretrained(
    name_or_path: str | os.PathLike, dtype: Any = np.float32
) -> tuple[GPT, BPETokenizer | CharTokenizer]:
    """The model and tokenizer that ``name_or_path`` names.

    Every use (sampling, fine-tuning, the flow of a real text) reads text, so a model
    without its tokenizer beside it is refused here, once for all of them.

    Raises
    ------
    ValueError
        Every bad input in one line: see :func:`resgrad.formats.hf.load_hf`,
        :func:`resgrad.formats.nanogpt.load_nanogpt_ckpt`, no tokenizer beside the model,
        a tokenizer larger than the model's vocabulary, or a hub name that cannot be
        fetched.
    """
    name = os.fspath(name_or_path)
    if name.endswith(".pt") and os.path.isfile(name):
        from resgrad.formats.nanogpt import load_nanogpt_ckpt

        model = load_nanogpt_ckpt(name, dtype=dtype)
        where = os.path.dirname(os.path.abspath(name))
    else:
        where = resolve_pretrained(name)
        model = load_hf(where, dtype=dtype)
    tok = load_tokenizer_dir(where)
    if tok is None:
        raise ValueError(
            f"{name!r} has no tokenizer (tokenizer.json, or vocab.json and merges.txt); put "
            "GPT-2's beside the model"
        )
    check_vocab(tok, model.cfg.vocab_size, name)
    return model, tok


def encode_prompt(tok: Any, text: str, block_size: int) -> np.ndarray:
    """``text`` as token ids (N,), refusing an empty prompt or one longer than the context.

    Raises
    ------
    ValueError
        An empty prompt, or one of more than ``block_size`` (GPT-2's n_positions) tokens.
    """
    if not text:
        raise ValueError("the start text is empty; give at least one character")
    ids = tok.encode(text)  # (N,)
    if len(ids) == 0:
        raise ValueError(f"the start text {text[:20]!r} encodes to no tokens")
    if len(ids) > block_size:
        raise ValueError(
            f"the start text is {len(ids)} tokens, longer than the model's context of "
            f"{block_size} (n_positions); shorten it"
        )
    return ids


def sample_pretrained(
    name_or_path: str | os.PathLike,
    start: str,
    num_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
    on_text: Callable[[str], None] | None = None,
) -> str:
    """Continue ``start`` with a pretrained model (as :func:`load_pretrained`); returns
    start plus the new text. ``on_text``, if given, receives the text as it is drawn
    (as :func:`resgrad.train.sample.continue_text`).

    Raises
    ------
    ValueError
        As :func:`load_pretrained`, or a bad prompt (:func:`encode_prompt`).
    """
    model, tok = load_pretrained(name_or_path)
    ids = encode_prompt(tok, start, model.cfg.block_size)  # (T0,)
    return continue_text(model, tok, start, ids, num_tokens, temperature, top_k, seed, on_text)


def export_checkpoint(
    path: str | os.PathLike, out_dir: str | os.PathLike, best: bool = False
) -> str:
    """Write a resgrad checkpoint (a run directory's last.ckpt or best.ckpt, or a file) as a
    Hugging Face GPT-2 directory, with its tokenizer as ``tokenizer.json``: the BPE's, or
    a character-level run's vocabulary (:func:`resgrad.train.bpe.char_tokenizer_json`).

    Returns
    -------
    str
        What was written beside the weights: ``"tokenizer.json"``.

    Raises
    ------
    ValueError
        A variant other than pre-ln, or an unreadable checkpoint.
    """
    model, tok, _ = load_model(path, best)
    tj = tok.to_json() if isinstance(tok, BPETokenizer) else char_tokenizer_json(tok.chars)
    export_hf(model, out_dir, tokenizer_json=tj)
    return "tokenizer.json"
