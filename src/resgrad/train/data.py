"""Character-level data: the corpus, the tokenizer, the train/val split and batches.

Legend: B = batch size, T = time (block size), N = tokens in a split.

The default corpus is the Python reference manual that ships with every
CPython: ``pydoc_data.topics.topics``, the text ``help("assert")`` and friends
print. It is a dict from topic name to text; the corpus is its values joined
by a blank line in sorted-key order (so it never depends on dict order). About
465,000 characters and a vocabulary of about 100 on Python 3.11. Nothing is
downloaded; the exact text varies a little between Python versions, so a
checkpoint records a SHA-256 of the text it was trained on.

The tokenizer maps each distinct character of the text to an integer, in
sorted order. Its vocabulary (a string) is stored with the model in every
checkpoint; sampling reads it from there.
"""

from __future__ import annotations

import hashlib
import math
import os
import stat
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "VAL_FRACTION",
    "CharTokenizer",
    "Corpus",
    "check_text_file",
    "default_corpus",
    "get_batch",
    "load_corpus",
    "min_length",
    "split_train_val",
    "unigram_entropy",
]

VAL_FRACTION = 0.1  # the last 10% of the text is the validation split
DEFAULT_SOURCE = "pydoc_data.topics (the Python reference manual shipped with CPython)"


def default_corpus() -> str:
    """The built-in corpus: ``pydoc_data.topics.topics`` values by sorted key, newline-joined."""
    from pydoc_data.topics import topics

    return "\n".join(topics[k] for k in sorted(topics))


class CharTokenizer:
    """Characters to integers and back.

    Parameters
    ----------
    chars : str
        The vocabulary: distinct characters, token ``i`` is ``chars[i]``.
    """

    def __init__(self, chars: str):
        if not isinstance(chars, str) or not chars:
            raise ValueError(f"vocabulary must be a non-empty string, got {chars!r}")
        if len(set(chars)) != len(chars):
            raise ValueError("vocabulary has repeated characters")
        self.chars = chars
        self._index = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """The tokenizer whose vocabulary is the sorted distinct characters of ``text``."""
        return cls("".join(sorted(set(text))))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        """``text`` -> token ids, int64 array of shape (len(text),).

        Raises
        ------
        ValueError
            Naming the characters that are not in the vocabulary and where the
            first one is.
        """
        missing = sorted(set(text) - self._index.keys())
        if missing:
            pos = min(text.index(c) for c in missing)
            shown = ", ".join(repr(c) for c in missing[:10]) + (" ..." if len(missing) > 10 else "")
            raise ValueError(
                f"{len(missing)} character(s) not in the model's vocabulary: {shown} "
                f"(first at position {pos}); the vocabulary has {self.vocab_size} characters"
            )
        return np.fromiter((self._index[c] for c in text), dtype=np.int64, count=len(text))  # (N,)

    def decode(self, ids) -> str:
        """Token ids (any int sequence) -> text."""
        ids = np.asarray(ids).ravel()
        bad = (ids < 0) | (ids >= self.vocab_size)
        if bad.any():
            raise ValueError(f"token id {int(ids[bad][0])} outside [0, {self.vocab_size})")
        return "".join(self.chars[i] for i in ids.tolist())

    def decode_stream(self) -> Callable[[int], str]:
        """A decoder for ids that arrive one at a time (sampling): each id is one character."""
        return lambda i: self.decode([i])


def min_length(block_size: int, val_fraction: float = VAL_FRACTION) -> int:
    """Fewest characters a text needs so both splits hold ``block_size + 1`` tokens."""
    n = block_size + 1
    while True:
        n_val = n - int(n * (1 - val_fraction))
        if n_val >= block_size + 1 and n - n_val >= block_size + 1:
            return n
        n += 1


@dataclass(frozen=True)
class Corpus:
    """A text, where it came from, its tokenizer and its two splits as token ids.

    ``train`` and ``val`` are int64 arrays of shape (N_train,) and (N_val,).
    """

    text: str
    source: str
    tokenizer: CharTokenizer
    train: np.ndarray
    val: np.ndarray

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


MAX_DATA_BYTES = 2**30  # 1 GiB: a character-level NumPy model has no use for more text


def _open_regular(path: str | os.PathLike) -> int:
    """A read-only descriptor of ``path``; a clear error unless it is a regular file."""
    try:  # non-blocking: opening a pipe that has no writer would wait for one forever
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"data file {os.fspath(path)!r} does not exist; give a UTF-8 text file"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError(
            f"data {os.fspath(path)!r} is not a regular file (a device, pipe or "
            "directory); give a UTF-8 text file"
        )
    return fd


def check_text_file(path: str | os.PathLike) -> None:
    """Refuse, as :func:`read_text` would, a path that is missing or not a regular file,
    before a command creates anything (a run's directory) on the way to reading it."""
    os.close(_open_regular(path))


def read_text(path: str | os.PathLike) -> str:
    """A UTF-8 text file's content; a clear ValueError if it is empty or not UTF-8.

    Only a regular file is read (not ``/dev/zero``, a pipe or a directory), and at
    most ``MAX_DATA_BYTES``: a larger text is refused rather than read into memory.
    """
    fd = _open_regular(path)
    with os.fdopen(fd, "rb") as f:
        raw = f.read(MAX_DATA_BYTES + 1)  # bounded even if the file grows while we read
    if len(raw) > MAX_DATA_BYTES:
        raise ValueError(
            f"data file {os.fspath(path)!r} is larger than {MAX_DATA_BYTES // 2**20} MiB, the "
            "most resgrad reads; use a part of it"
        )
    if not raw:
        raise ValueError(f"data file {os.fspath(path)!r} is empty")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"data file {os.fspath(path)!r} is not UTF-8 text: byte 0x{raw[e.start]:02x} "
            f"at offset {e.start} ({e.reason})"
        ) from None


def split_train_val(ids: np.ndarray, val_fraction: float = VAL_FRACTION):
    """First ``1 - val_fraction`` of the tokens for training, the rest for validation."""
    n = int(len(ids) * (1 - val_fraction))
    return ids[:n], ids[n:]  # (N_train,), (N_val,)


def load_corpus(
    path: str | os.PathLike | None,
    block_size: int,
    tokenizer: CharTokenizer | None = None,
) -> Corpus:
    """Read, tokenize and split a corpus.

    Parameters
    ----------
    path : str, PathLike or None
        A UTF-8 text file, or None for the built-in corpus.
    block_size : int
        Context length T; each split must hold at least ``T + 1`` tokens.
    tokenizer : CharTokenizer, optional
        An existing vocabulary (e.g. a checkpoint's); built from the text when None.

    Raises
    ------
    ValueError
        An empty, non-UTF-8 or too-short text, or characters outside ``tokenizer``.
    OSError
        If the file cannot be read.
    """
    if path is None:
        text, source = default_corpus(), DEFAULT_SOURCE
    else:
        text, source = read_text(path), os.fspath(path)
    if len(text) < block_size + 1:
        raise ValueError(
            f"data {source!r} has {len(text)} characters, shorter than block_size + 1 = "
            f"{block_size + 1}; use a longer text or a smaller --block-size"
        )
    need = min_length(block_size)
    if len(text) < need:
        raise ValueError(
            f"data {source!r} has {len(text)} characters; with block_size {block_size} it "
            f"needs at least {need} so that the 10% validation split holds block_size + 1"
        )
    tok = tokenizer if tokenizer is not None else CharTokenizer.from_text(text)
    ids = tok.encode(text)  # (N,)
    train, val = split_train_val(ids)
    return Corpus(text=text, source=source, tokenizer=tok, train=train, val=val)


def get_batch(
    data: np.ndarray, block_size: int, batch_size: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Random windows of a split, as nanoGPT's ``get_batch``.

    Parameters
    ----------
    data : int array, shape (N,)
    block_size, batch_size : int
        T and B.
    rng : np.random.Generator
        Draws the B start offsets; its state advances by exactly one call.

    Returns
    -------
    x, y : int64 arrays, shape (B, T)
        ``y`` is ``x`` shifted by one: the next character at each position.
    """
    if len(data) < block_size + 1:
        raise ValueError(f"split of {len(data)} tokens is shorter than block_size + 1")
    ix = rng.integers(0, len(data) - block_size, size=batch_size)  # (B,)
    offsets = ix[:, None] + np.arange(block_size)  # (B, T)
    x = data[offsets]  # (B, T)
    y = data[offsets + 1]  # (B, T)
    return x, y


def unigram_entropy(text: str) -> float:
    """Entropy in nats of the character frequencies of ``text``: the loss of the best
    model that ignores context, the bar a trained model has to go far below."""
    counts = Counter(text)
    n = len(text)
    return -sum(c / n * math.log(c / n) for c in counts.values())
