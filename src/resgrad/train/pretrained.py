"""Pretrained models in: a hub name, a Hugging Face directory or a nanoGPT ``ckpt.pt``.

``--from-pretrained`` and ``--init-from`` take one string, resolved in this order:

1. a file ending in ``.pt``: nanoGPT's checkpoint (:mod:`resgrad.formats.nanogpt`,
   needs ``resgrad[torch]``). Its vocabulary is found as nanoGPT's ``sample.py`` finds
   it: ``meta.pkl`` (``meta=``, the CLI's ``--meta``), else
   ``data/<ckpt["config"]["dataset"]>/meta.pkl`` under the working directory (sample.py's
   own rule), the checkpoint's directory or the directory above it (nanoGPT's layout,
   ``out-*/ckpt.pt`` beside ``data/``); without one, nanoGPT would use GPT-2's BPE,
   which resgrad reads from a ``tokenizer.json`` (or ``vocab.json`` + ``merges.txt``)
   beside the checkpoint;
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
from resgrad.nn.model import GPT, GPTConfig
from resgrad.train.bpe import BPETokenizer, char_tokenizer_json, check_vocab, load_tokenizer_dir
from resgrad.train.data import CharTokenizer
from resgrad.train.sample import continue_text, load_model

__all__ = ["check_meta_file", "encode_prompt", "export_checkpoint", "find_nanogpt_meta",
           "load_pretrained", "sample_pretrained"]  # fmt: skip

META = "meta.pkl"  # nanoGPT's vocabulary file, data/<dataset>/meta.pkl


def find_nanogpt_meta(ckpt_path: str | os.PathLike, config: dict[str, Any]) -> str | None:
    """Where nanoGPT's ``sample.py`` would find the checkpoint's ``meta.pkl``, or None.

    sample.py opens ``os.path.join('data', checkpoint['config']['dataset'], 'meta.pkl')``
    relative to the working directory. resgrad looks for ``data/<dataset>/meta.pkl`` under,
    in this order, the first that exists winning:

    1. the working directory (sample.py's own rule: it runs from nanoGPT's root);
    2. the checkpoint's directory (the directory of the ``.pt`` file, not the file);
    3. the directory above it (nanoGPT's layout: ``out-shakespeare-char/ckpt.pt`` beside
       ``data/``).

    A config without ``dataset`` (older files) finds nothing (None).

    Raises
    ------
    ValueError
        A ``dataset`` that is not one directory name under ``data/`` (not a string, empty,
        ``.``, ``..``, holding a ``/``, ``\\`` or NUL): sample.py would read a meta.pkl
        outside ``data/``; it is named, and ``--meta PATH`` passes the vocabulary instead.
    """
    dataset = config.get("dataset")
    if dataset is None:
        return None
    plain = isinstance(dataset, str) and dataset not in ("", ".", "..")
    if not plain or any(c in dataset for c in "/\\\0"):  # a / also starts an absolute path
        raise ValueError(
            f"{os.fspath(ckpt_path)!r}: its config's dataset is {dataset!r}; expected one "
            f"directory name under data/ (nanoGPT's data/<dataset>/{META}): pass the "
            "vocabulary with --meta PATH"
        )
    here = os.path.dirname(os.path.abspath(os.fspath(ckpt_path)))
    for base in (os.getcwd(), here, os.path.dirname(here)):
        path = os.path.join(base, "data", dataset, META)
        if os.path.isfile(path):
            return path
    return None


def check_meta_file(meta: str) -> None:
    """Refuse, in one line, a ``meta.pkl`` path (``--meta``) that is not a file."""
    if os.path.isdir(meta):
        raise ValueError(f"meta.pkl {meta!r} is a directory; expected a file, nanoGPT's "
                         "data/<dataset>/meta.pkl")  # fmt: skip
    if not os.path.isfile(meta):
        raise ValueError(f"meta.pkl {meta!r} does not exist; expected nanoGPT's "
                         "data/<dataset>/meta.pkl")  # fmt: skip


def _meta_tokenizer(meta: str, model: GPT, name: str) -> CharTokenizer:
    """The character tokenizer of nanoGPT's ``meta.pkl``, which must be the model's vocabulary."""
    from resgrad.formats.nanogpt import meta_vocabulary, read_meta_pkl

    check_meta_file(meta)
    tok = CharTokenizer(meta_vocabulary(read_meta_pkl(meta), where=meta))
    if tok.vocab_size != model.cfg.vocab_size:
        raise ValueError(
            f"{meta!r} holds {tok.vocab_size} characters but the model in {name!r} has "
            f"vocab_size {model.cfg.vocab_size}; expected the meta.pkl of the dataset it was "
            "trained on"
        )
    return tok


def _load_nanogpt(
    name: str, dtype: Any, meta: str | os.PathLike | None
) -> tuple[GPT, BPETokenizer | CharTokenizer]:
    """A nanoGPT ckpt.pt and its vocabulary: ``meta``, the dataset's meta.pkl, or the
    tokenizer beside the checkpoint (see the module's docstring)."""
    from resgrad.formats.nanogpt import read_nanogpt_ckpt

    model, config = read_nanogpt_ckpt(name, dtype=dtype)
    found = os.fspath(meta) if meta is not None else find_nanogpt_meta(name, config)
    if found is not None:
        return model, _meta_tokenizer(found, model, name)
    tok = load_tokenizer_dir(os.path.dirname(os.path.abspath(name)))
    if tok is None:
        dataset = config.get("dataset")
        looked = (f"no data/{dataset}/{META} (its config's dataset) under the working "
                  "directory or beside it, " if isinstance(dataset, str) and dataset
                  else "no dataset in its config, ")  # fmt: skip
        raise ValueError(
            f"{name!r} has no vocabulary: {looked}no tokenizer.json beside it; nanoGPT then "
            f"uses GPT-2's BPE: pass its {META} (--meta PATH) or put GPT-2's tokenizer.json "
            "beside the checkpoint"
        )
    return model, tok


def load_pretrained(
    name_or_path: str | os.PathLike,
    dtype: Any = np.float32,
    meta: str | os.PathLike | None = None,
    fits: Callable[[GPTConfig], None] | None = None,
) -> tuple[GPT, BPETokenizer | CharTokenizer]:
    """The model and tokenizer that ``name_or_path`` names.

    Every use (sampling, fine-tuning, the flow of a real text) reads text, so a model
    without its tokenizer beside it is refused here, once for all of them. ``meta`` is
    nanoGPT's ``meta.pkl`` for a ``ckpt.pt``, in place of the one its dataset names.
    ``fits``, if given, is called with the model's shape and raises to refuse it (the
    CLI's memory check): for a directory, from its config.json before any weight is read
    (:func:`resgrad.formats.hf.load_hf`); a ``ckpt.pt`` is one pickle, checked once read.

    Raises
    ------
    ValueError
        Every bad input in one line: see :func:`resgrad.formats.hf.load_hf`,
        :func:`resgrad.formats.nanogpt.load_nanogpt_ckpt`, no tokenizer beside the model,
        a tokenizer larger than the model's vocabulary, or a hub name that cannot be
        fetched.
    """
    name = os.fspath(name_or_path)
    nanogpt = name.endswith(".pt") and os.path.isfile(name)
    if meta is not None and not name.endswith(".pt"):  # a missing .pt is said to be missing
        raise ValueError(
            f"a meta.pkl ({os.fspath(meta)!r}) is the vocabulary of a nanoGPT ckpt.pt; "
            f"{name!r} is not one (its tokenizer is the one in its directory)"
        )
    if nanogpt:
        model, tok = _load_nanogpt(name, dtype, meta)
        if fits is not None:
            fits(model.cfg)
    else:
        where = resolve_pretrained(name)
        model = load_hf(where, dtype=dtype, fits=fits)
        tok = load_tokenizer_dir(where)
        if tok is None:
            raise ValueError(
                f"{name!r} has no tokenizer (tokenizer.json, or vocab.json and merges.txt); "
                "put GPT-2's beside the model"
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
    try:
        ids = tok.encode(text)  # (N,)
    except ValueError as e:  # a character-level model: characters outside its vocabulary
        raise ValueError(f"start text: {e}") from None
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
    meta: str | os.PathLike | None = None,
    fits: Callable[[GPTConfig], None] | None = None,
    auto_threads: bool = False,
) -> str:
    """Continue ``start`` with a pretrained model (as :func:`load_pretrained`); returns
    start plus the new text. ``on_text``, if given, receives the text as it is drawn
    (as :func:`resgrad.train.sample.continue_text`); ``meta`` is a nanoGPT checkpoint's
    ``meta.pkl`` and ``fits`` a memory check, as in :func:`load_pretrained`;
    ``auto_threads`` as :func:`resgrad.train.sample.generate`.

    Raises
    ------
    ValueError
        As :func:`load_pretrained`, or a bad prompt (:func:`encode_prompt`).
    """
    model, tok = load_pretrained(name_or_path, meta=meta, fits=fits)
    ids = encode_prompt(tok, start, model.cfg.block_size)  # (T0,)
    return continue_text(
        model, tok, start, ids, num_tokens, temperature, top_k, seed, on_text, auto_threads
    )


def export_checkpoint(
    path: str | os.PathLike, out_dir: str | os.PathLike, best: bool = False, force: bool = False
) -> str:
    """Write a resgrad checkpoint (a run directory's last.ckpt or best.ckpt, or a file) as a
    Hugging Face GPT-2 directory, with its tokenizer as ``tokenizer.json``: the BPE's, or
    a character-level run's vocabulary (:func:`resgrad.train.bpe.char_tokenizer_json`).
    ``out_dir`` is written as a whole (:func:`resgrad.formats.hf.export_hf`); one that
    already holds a model is replaced only with ``force``.

    Returns
    -------
    str
        What was written beside the weights: ``"tokenizer.json"``.

    Raises
    ------
    ValueError
        A variant other than pre-ln, an unreadable checkpoint, or an ``out_dir`` that holds
        a model (without ``force``) or files that are not a model's.
    """
    model, tok, _ = load_model(path, best)
    tj = tok.to_json() if isinstance(tok, BPETokenizer) else char_tokenizer_json(tok.chars)
    export_hf(model, out_dir, tokenizer_json=tj, force=force, reads=[path])
    return "tokenizer.json"
