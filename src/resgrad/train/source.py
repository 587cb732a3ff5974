"""What a SOURCE is: the one place that decides, for every command that reads a model.

``sample``, ``flow --from-pretrained``, ``paths``, ``train --init-from`` (and ``lesion``)
take one string that may name any of these kinds:

========== ============================================== ===============================
kind       what the string is                             what is loaded
========== ============================================== ===============================
run        a resgrad run directory (``resgrad train``)    its last.ckpt (best.ckpt: best)
checkpoint a resgrad checkpoint file (``*.ckpt``)         the file
hf-dir     a Hugging Face GPT-2 directory (config.json)   the directory
hub        a hub name (``gpt2``, ``owner/name``)          its snapshot in the local cache,
                                                          fetched once if not there
nanogpt    a nanoGPT ``ckpt.pt``                          the file, and its meta.pkl
lesson     ``lesson``, the lesson's tanh stack            nothing: the stack is built
========== ============================================== ===============================

:func:`resolve_source` finds the kind and refuses, in one line and before any weight is
read, a SOURCE that is none of them, a kind the caller does not take (``kinds``), and every
flag meaningless for the kind found: ``best`` (``--best``) anywhere but a run directory,
``meta`` (``--meta``) anywhere but a nanoGPT ckpt.pt. A run directory killed before its
first checkpoint, or without the best.ckpt ``best`` asks for, is said to be one.
:func:`load_source` then loads what was found with the loaders of each kind
(:func:`resgrad.train.sample.load_model`, :func:`resgrad.train.pretrained.load_pretrained`).

Checks, in this order: a flag none of ``kinds`` takes; what the string names (``lesson``
first, then a path, then a hub name); a kind outside ``kinds``; a flag meaningless for
the kind found; what the kind needs (a checkpoint in the run, the best.ckpt, a meta.pkl
file).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from resgrad.formats.checkpoint import BEST, FORMAT, LAST, MAGIC
from resgrad.formats.hf import CONFIG, HUB_MODELS, is_hub_name
from resgrad.nn.model import GPT, GPTConfig
from resgrad.train.data import DEFAULT_SOURCE
from resgrad.train.dynamics import DYNAMICS_BIN, DYNAMICS_HEADER
from resgrad.train.pretrained import check_meta_file, load_pretrained, sample_pretrained
from resgrad.train.rundir import METRICS, kept_checkpoints
from resgrad.train.sample import load_model, sample_text

__all__ = [
    "ALL",
    "KINDS",
    "LESSON",
    "MODELS",
    "PRETRAINED",
    "RESGRAD",
    "Source",
    "encode_text",
    "load_source",
    "names_lesson",
    "resolve_source",
    "sample_source",
]

LESSON = "lesson"  # the SOURCE that names the lesson's stack, before any path of that name
NANOGPT = "ckpt.pt"  # the file nanoGPT's train.py writes in its out_dir
# kind -> what a SOURCE of that kind is, in messages
KINDS = {
    "run": "a resgrad run directory",
    "checkpoint": "a resgrad checkpoint file",
    "hf-dir": "a Hugging Face GPT-2 directory",
    "hub": "a hub model name (gpt2, owner/name)",
    "nanogpt": "a nanoGPT ckpt.pt",
    "lesson": "the lesson's tanh stack",
}
RESGRAD = ("run", "checkpoint")  # written by resgrad train: the vocabulary in the checkpoint
PRETRAINED = ("hf-dir", "hub", "nanogpt")  # resgrad.train.pretrained.load_pretrained's
MODELS = RESGRAD + PRETRAINED  # every kind that is a GPT
ALL = MODELS + ("lesson",)  # paths and lesion: a GPT or the lesson
# kind -> where its vocabulary is, when --meta is given for it
_VOCABULARY = {
    "run": "its vocabulary is in its checkpoint",
    "checkpoint": "its vocabulary is in it",
    "hf-dir": "its tokenizer is in the directory",
    "hub": "its tokenizer comes with it",
    "lesson": "the lesson's stack reads no text",
}
_RUN_FILES = (METRICS, DYNAMICS_BIN, DYNAMICS_HEADER)  # what train writes before a checkpoint


@dataclass(frozen=True)
class Source:
    """A SOURCE as :func:`resolve_source` found it; nothing of the model read yet."""

    name: str  # the string as given
    kind: str  # one of KINDS
    path: str | None  # what is loaded: the checkpoint file (run, checkpoint), the directory
    # (hf-dir; hub: its snapshot in the local cache, None until fetched), the ckpt.pt
    # (nanogpt); None for the lesson
    meta: str | None = None  # nanogpt: the meta.pkl given (None: found as nanoGPT finds it)

    def describe(self) -> str:
        """One line: the string, its kind and what is loaded, e.g. ``'out': a resgrad run
        directory, loading 'out/last.ckpt'``."""
        what = f"{self.name!r}: {KINDS[self.kind]}"
        if self.kind == "lesson":
            return what
        if self.path is None:
            return f"{what}, not in the local cache: fetched from the hub when loaded"
        meta = f" with the vocabulary {self.meta!r}" if self.meta is not None else ""
        return f"{what}, loading {self.path!r}{meta}"


def names_lesson(source: str) -> bool:
    """Whether ``source`` names the lesson's stack (``lesson``; a path of that name is
    ``./lesson``)."""
    return source == LESSON


def _expected(kinds: tuple[str, ...]) -> str:
    """``kinds`` as a phrase: ``a resgrad run directory or a resgrad checkpoint file``."""
    names = [KINDS[k] if k != "lesson" else f"{LESSON!r} ({KINDS[k]})" for k in kinds]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _is_checkpoint_file(path: str) -> bool:
    """Whether the file at ``path`` starts as a resgrad checkpoint does (its name aside)."""
    with open(path, "rb") as f:
        head = f.read(4096)  # format 2 opens with its metadata, "format" first
    return head.startswith(MAGIC) or (len(head) > 8 and FORMAT.encode() in head[8:])


def _classify(name: str, kinds: tuple[str, ...]) -> tuple[str, str | None]:
    """(kind, the path it loads) of ``name``, or a ValueError: missing, or no model."""
    if names_lesson(name) and ("lesson" in kinds or not os.path.exists(name)):
        return "lesson", None
    if os.path.isdir(name):
        if any(os.path.exists(os.path.join(name, f)) for f in (LAST, BEST)):
            return "run", os.path.join(name, LAST)
        if os.path.exists(os.path.join(name, CONFIG)):
            return "hf-dir", name
        if any(os.path.exists(os.path.join(name, f)) for f in _RUN_FILES) or kept_checkpoints(name):
            return "run", None  # killed before its first checkpoint: said once flags are checked
        if os.path.isfile(os.path.join(name, NANOGPT)):
            raise ValueError(f"{name!r} is a nanoGPT out directory; pass its checkpoint, "
                             f"{os.path.join(name, NANOGPT)!r}")  # fmt: skip
        raise ValueError(
            f"{name!r} is a directory but not a model: it has no {LAST} (a resgrad run "
            f"directory's) and no {CONFIG} (a Hugging Face GPT-2 directory's)"
        )
    if os.path.isfile(name):
        if name.endswith(".pt"):
            return "nanogpt", name
        if name.endswith(".ckpt") or _is_checkpoint_file(name):
            return "checkpoint", name  # a damaged one is said to be by load_checkpoint
        raise ValueError(f"{name!r} is a file, not a model: expected {_expected(kinds)}")
    if os.path.exists(name):
        raise ValueError(f"{name!r} is neither a file nor a directory; expected {_expected(kinds)}")
    if is_hub_name(name):
        return "hub", _cached_snapshot(name)
    hub = " and is not a hub model name" if "hub" in kinds else ""
    raise ValueError(f"{name!r} does not exist{hub} (expected {_expected(kinds)})")


def _cached_snapshot(name: str) -> str | None:
    """The directory of hub model ``name`` in the local Hugging Face cache, or None (no
    network: :func:`resgrad.formats.hf.resolve_pretrained` fetches it when loaded)."""
    from huggingface_hub import try_to_load_from_cache

    repo = f"openai-community/{name}" if name in HUB_MODELS else name  # resolve_pretrained's
    try:
        found = try_to_load_from_cache(repo, CONFIG)
    except Exception:  # a name the hub client refuses: the fetch says why, once loaded
        return None
    return os.path.dirname(found) if isinstance(found, str) else None


def resolve_source(
    source: str | os.PathLike,
    *,
    best: bool = False,
    meta: str | os.PathLike | None = None,
    kinds: tuple[str, ...] = MODELS,
    flag: str = "SOURCE",
) -> Source:
    """What ``source`` names, checked against the flags given with it; nothing is loaded.

    Parameters
    ----------
    source : str or PathLike
        A run directory, a checkpoint file, a Hugging Face directory or hub name, a nanoGPT
        ckpt.pt, or ``lesson`` (see the module's table).
    best : bool
        ``--best``: a run directory's best.ckpt instead of its last.ckpt.
    meta : str or PathLike, optional
        ``--meta``: nanoGPT's meta.pkl, the vocabulary of a ckpt.pt.
    kinds : tuple of str
        The kinds the caller takes (a subset of KINDS; default: every model, not the lesson).
    flag : str
        How the caller's user gave ``source`` (``--from-pretrained``), for the messages.

    Returns
    -------
    Source

    Raises
    ------
    ValueError
        One line: ``best``/``meta`` where none of ``kinds`` takes it or the kind found does
        not; a path that does not exist; a directory or file that is no model; a kind
        outside ``kinds``; a run directory with no checkpoint yet, or no best.ckpt with
        ``best``; a ``meta`` that is a directory or missing.
    """
    name = os.fspath(source)
    meta = os.fspath(meta) if meta is not None else None
    if best and "run" not in kinds:
        raise ValueError(f"--best cannot be combined with {flag}: it picks a run directory's "
                         f"{BEST}, and {flag} takes {_expected(kinds)}")  # fmt: skip
    if meta is not None and "nanogpt" not in kinds:
        raise ValueError(f"--meta cannot be combined with {flag}: it is the vocabulary of a "
                         f"nanoGPT ckpt.pt, and {flag} takes {_expected(kinds)}")  # fmt: skip
    kind, path = _classify(name, kinds)
    if kind not in kinds:
        raise ValueError(f"{flag} {name!r} is {KINDS[kind]}; {flag} takes {_expected(kinds)}")
    if best and kind != "run":
        raise ValueError(f"--best picks a run directory's {BEST}; {name!r} is {KINDS[kind]}")
    if meta is not None and kind != "nanogpt":
        raise ValueError(f"--meta is the vocabulary of a nanoGPT ckpt.pt; {name!r} is "
                         f"{KINDS[kind]}: {_VOCABULARY[kind]}")  # fmt: skip
    if kind == "run":
        path = _run_checkpoint(name, best)
    if meta is not None:
        check_meta_file(meta)
    return Source(name=name, kind=kind, path=path, meta=meta)


def _run_checkpoint(run_dir: str, best: bool) -> str:
    """The checkpoint a run directory's SOURCE loads: last.ckpt, or best.ckpt with ``best``."""
    last, best_path = os.path.join(run_dir, LAST), os.path.join(run_dir, BEST)
    if not os.path.exists(last) and not os.path.exists(best_path):
        kept = kept_checkpoints(run_dir)
        if kept:  # a fresh run there is refused: it holds a run
            raise ValueError(f"{run_dir!r} is a resgrad run directory with no {LAST}; it kept "
                             f"{os.path.basename(kept[-1][1])}: pass that file")  # fmt: skip
        raise ValueError(
            f"{run_dir!r} is a resgrad run directory with no checkpoint yet (killed before its "
            f"first checkpoint?); train it on with resgrad train --out-dir {shlex.quote(run_dir)}"
        )
    if best and not os.path.exists(best_path):
        raise ValueError(f"--best: {run_dir!r} is a resgrad run directory with no {BEST}; "
                         f"without --best, its {LAST} is read")  # fmt: skip
    if not best and not os.path.exists(last):
        raise ValueError(f"{run_dir!r} is a resgrad run directory with no {LAST} but a "
                         f"{BEST}: pass --best to read it")  # fmt: skip
    return best_path if best else last


def load_source(src: Source, fits: Callable[[GPTConfig], None] | None = None) -> tuple[GPT, Any]:
    """The model and tokenizer of a resolved SOURCE (not the lesson, which is no GPT).

    A resgrad checkpoint loads in its own dtype (:func:`resgrad.train.sample.load_model`),
    a pretrained model in float32 (:func:`resgrad.train.pretrained.load_pretrained`).
    ``fits``, if given, is called with the model's shape and raises to refuse it (the
    memory check): a Hugging Face directory's before its weights are read, a checkpoint's
    and a ckpt.pt's once read.
    """
    if src.kind == "lesson":
        raise ValueError(f"{src.name!r} is the lesson's tanh stack, not a GPT: nothing to load")
    if src.kind in RESGRAD:
        model, tok, _ = load_model(src.path)
        if fits is not None:
            fits(model.cfg)
        return model, tok
    return load_pretrained(src.name, meta=src.meta, fits=fits)


def sample_source(
    src: Source,
    start: str,
    num_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
    on_text: Callable[[str], None] | None = None,
    fits: Callable[[GPTConfig], None] | None = None,
    auto_threads: bool = False,
) -> str:
    """Continue ``start`` with the model of a resolved SOURCE; returns start plus the new
    text (:func:`resgrad.train.sample.sample_text` for a resgrad checkpoint,
    :func:`resgrad.train.pretrained.sample_pretrained`, with ``fits``, for the others);
    ``auto_threads`` as :func:`resgrad.train.sample.generate`."""
    if src.kind in RESGRAD:
        return sample_text(src.path, start, num_tokens, temperature, top_k, seed,
                           on_text=on_text, auto_threads=auto_threads)  # fmt: skip
    if src.kind == "lesson":
        raise ValueError(f"{src.name!r} is the lesson's tanh stack, not a GPT: it draws no text")
    return sample_pretrained(src.name, start, num_tokens, temperature, top_k, seed,
                             on_text=on_text, meta=src.meta, fits=fits,
                             auto_threads=auto_threads)  # fmt: skip


def encode_text(tok: Any, text: str, text_path: str | None) -> np.ndarray:
    """``text`` as the model's token ids (N,), read from ``text_path`` (``--text``) or, with
    None, the built-in corpus; a text the vocabulary cannot encode is refused naming it
    and the fix.

    Raises
    ------
    ValueError
        Characters outside a character-level model's vocabulary.
    """
    try:
        return tok.encode(text)  # (N,)
    except ValueError as e:
        if text_path is None:
            raise ValueError(f"the built-in corpus ({DEFAULT_SOURCE}, used without --text): "
                             f"{e}; pass --text FILE, a text in the model's "
                             "vocabulary") from None  # fmt: skip
        raise ValueError(f"--text {text_path!r}: {e}; pass a text in the model's "
                         "vocabulary") from None  # fmt: skip
