"""Byte-level BPE tokenizers (GPT-2's, or one trained on a corpus), through ``tokenizers``.

resgrad writes no BPE by hand: Hugging Face's ``tokenizers`` library reads GPT-2's
``tokenizer.json`` (or ``vocab.json`` + ``merges.txt``) and trains new byte-level BPEs.
:class:`BPETokenizer` has the interface of :class:`resgrad.train.data.CharTokenizer`
(``encode`` -> int64 ids, ``decode``, ``vocab_size``), so the corpus, the trainer and
the sampler take either.

Checkpoints record their tokenizer with :func:`tokenizer_record`: ``{"kind": "char"}``
(the vocabulary is the checkpoint's ``vocab`` string, as before) or ``{"kind": "bpe",
"json": <the tokenizer.json text>}``; :func:`tokenizer_from_record` reads either back.

A character vocabulary leaves resgrad as a ``tokenizer.json`` too
(:func:`char_tokenizer_json`, written by ``resgrad export``), so that transformers can
read an exported character-level run; :func:`load_tokenizer_dir` reads it back as the
:class:`~resgrad.train.data.CharTokenizer` it was.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from resgrad.train.data import CharTokenizer

__all__ = [
    "KINDS",
    "MIN_BPE_VOCAB",
    "BPETokenizer",
    "char_tokenizer_json",
    "check_vocab",
    "load_tokenizer_dir",
    "tokenizer_from_record",
    "tokenizer_record",
    "train_bpe",
]

KINDS = ("char", "bpe")  # resgrad train --tokenizer
MIN_BPE_VOCAB = 256  # a byte-level BPE starts from the 256 bytes


class BPETokenizer:
    """A ``tokenizers.Tokenizer`` (byte-level BPE) with CharTokenizer's interface.

    Parameters
    ----------
    tokenizer : tokenizers.Tokenizer
    """

    kind = "bpe"

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer

    @classmethod
    def from_json(cls, text: str) -> BPETokenizer:
        """From the text of a ``tokenizer.json``; a clear ValueError if it is not one."""
        from tokenizers import Tokenizer

        try:
            return cls(Tokenizer.from_str(text))
        except Exception as e:  # tokenizers raises its own Exception subclasses
            raise ValueError(f"not a tokenizer.json: {str(e).splitlines()[0]}") from None

    def to_json(self) -> str:
        """The ``tokenizer.json`` text, which ``tokenizers`` and transformers read."""
        return self.tokenizer.to_str()

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str) -> np.ndarray:
        """``text`` -> token ids, int64 array of shape (N,)."""
        return np.asarray(self.tokenizer.encode(text).ids, dtype=np.int64)  # (N,)

    def decode(self, ids) -> str:
        """Token ids (any int sequence) -> text; special tokens kept."""
        ids = np.asarray(ids).ravel()
        bad = (ids < 0) | (ids >= self.vocab_size)
        if bad.any():
            raise ValueError(f"token id {int(ids[bad][0])} outside [0, {self.vocab_size})")
        return self.tokenizer.decode(ids.tolist(), skip_special_tokens=False)

    def decode_stream(self) -> Callable[[int], str]:
        """A decoder for ids that arrive one at a time (sampling): each call returns the text
        the ids so far complete, '' while a character is still partial.

        A byte-level token may hold part of a character's UTF-8 bytes (an emoji, a CJK
        character, often an accented letter): decoding each token alone would print U+FFFD
        for each piece. ``tokenizers.decoders.DecodeStream`` holds the bytes back until
        they form whole characters. Bytes still held at the end are the caller's to flush
        (:func:`resgrad.train.sample.continue_text` does).
        """
        from tokenizers.decoders import DecodeStream

        stream = DecodeStream(skip_special_tokens=False)
        return lambda i: stream.step(self.tokenizer, int(i)) or ""


def _byte_level(tok: Any) -> Any:
    """``tok`` with GPT-2's byte-level pre-tokenizer and decoder (no prefix space)."""
    from tokenizers import decoders, pre_tokenizers

    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def train_bpe(text: str, vocab_size: int) -> BPETokenizer:
    """A byte-level BPE of ``vocab_size`` tokens trained on ``text`` (GPT-2's pre-tokenizer).

    The same text and size give the same tokenizer (tested). Every byte is in the
    vocabulary, so any text can be encoded. A short text may run out of pairs to merge
    first: the tokenizer then has fewer tokens (``resgrad train`` refuses that run).

    Raises
    ------
    ValueError
        If ``vocab_size`` is below 256 (the byte alphabet).
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    if (
        isinstance(vocab_size, bool)
        or not isinstance(vocab_size, int)
        or vocab_size < MIN_BPE_VOCAB
    ):
        raise ValueError(
            f"vocab_size must be an integer >= {MIN_BPE_VOCAB} for a byte-level BPE "
            f"(the 256 bytes come first), got {vocab_size!r}"
        )
    tok = _byte_level(Tokenizer(models.BPE()))
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    tok.train_from_iterator([text], trainer)
    return BPETokenizer(tok)


def char_tokenizer_json(chars: str) -> str:
    """A character vocabulary (token i is ``chars[i]``) as a ``tokenizer.json`` text.

    It is a ``tokenizers`` BPE with no merges, so each character is a token, and a
    decoder that joins tokens as they are: what transformers needs to read an exported
    character-level run. A character outside the vocabulary encodes to nothing there;
    resgrad reads the file back as a CharTokenizer, which refuses it by name.
    """
    from tokenizers import Tokenizer, decoders, models

    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(chars)}, merges=[]))
    tok.decoder = decoders.Fuse()
    return tok.to_str()


def _char_vocabulary(spec: dict[str, Any]) -> str | None:
    """The characters of a :func:`char_tokenizer_json` tokenizer; None for any other."""
    model = spec.get("model") or {}
    if (
        model.get("type") != "BPE"
        or model.get("merges")
        or spec.get("pre_tokenizer") is not None
        or spec.get("added_tokens")
        or (spec.get("decoder") or {}).get("type") != "Fuse"
    ):
        return None
    vocab = model.get("vocab") or {}
    chars = sorted(vocab, key=vocab.get)  # by id
    if [vocab[c] for c in chars] != list(range(len(chars))) or any(len(c) != 1 for c in chars):
        return None
    return "".join(chars) or None


def load_tokenizer_dir(path: str | os.PathLike) -> BPETokenizer | CharTokenizer | None:
    """The tokenizer of a model directory: ``tokenizer.json``, else ``vocab.json`` +
    ``merges.txt`` (GPT-2's byte-level BPE); None when it has neither. A
    :func:`char_tokenizer_json` file is the CharTokenizer it was written from.

    Raises
    ------
    ValueError
        If the files are there but unreadable.
    """
    from tokenizers import Tokenizer, models

    d = os.fspath(path)
    tj, vocab, merges = (os.path.join(d, n) for n in ("tokenizer.json", "vocab.json", "merges.txt"))
    try:
        if os.path.exists(tj):
            with open(tj, encoding="utf-8") as f:
                text = f.read()
            chars = _char_vocabulary(json.loads(text))
            return CharTokenizer(chars) if chars else BPETokenizer(Tokenizer.from_str(text))
        if os.path.exists(vocab) and os.path.exists(merges):
            return BPETokenizer(_byte_level(Tokenizer(models.BPE.from_file(vocab, merges))))
    except Exception as e:  # tokenizers raises its own Exception subclasses
        raise ValueError(
            f"the tokenizer in {d!r} is unreadable: {str(e).splitlines()[0]}"
        ) from None
    return None


def check_vocab(tok: Any, vocab_size: int, where: str) -> None:
    """Refuse a tokenizer that yields ids the model has no embedding for.

    A tokenizer smaller than the model is allowed (nanoGPT pads GPT-2's 50257 to 50304).
    Its largest id is checked, not only its size: a ``tokenizer.json`` may number its
    tokens with gaps (20 tokens, one of them id 5000).
    """
    if tok.vocab_size > vocab_size:
        raise ValueError(
            f"{where}: the tokenizer has {tok.vocab_size} tokens but the model's vocab_size "
            f"is {vocab_size}; expected a tokenizer of at most {vocab_size}"
        )
    if isinstance(tok, BPETokenizer):  # token -> id, added tokens included
        vocab = tok.tokenizer.get_vocab(with_added_tokens=True)
        token, top = max(vocab.items(), key=lambda kv: kv[1], default=("", -1))
    else:  # characters are numbered 0..n-1
        token, top = tok.chars[-1], tok.vocab_size - 1
    if top >= vocab_size:
        raise ValueError(
            f"{where}: the tokenizer has token id {top} ({token!r}), beyond the model's "
            f"vocab_size {vocab_size}; expected every id below {vocab_size}"
        )


def tokenizer_record(tok: Any) -> dict[str, Any]:
    """What a checkpoint stores to rebuild ``tok`` (the char vocabulary goes in ``vocab``)."""
    if isinstance(tok, BPETokenizer):
        return {"kind": "bpe", "json": tok.to_json()}
    if isinstance(tok, CharTokenizer):
        return {"kind": "char"}
    raise TypeError(f"unknown tokenizer {type(tok).__name__}")


def tokenizer_from_record(record: dict[str, Any] | None, vocab: str) -> Any:
    """The tokenizer a checkpoint recorded; a record of None (old checkpoints) is char."""
    kind = "char" if record is None else record.get("kind")
    if kind == "char":
        return CharTokenizer(vocab)
    if kind == "bpe":
        return BPETokenizer.from_json(record["json"])
    raise ValueError(f"unknown tokenizer kind {kind!r} in checkpoint; expected one of {KINDS}")
