"""Checkpoints: everything a run needs to continue bit-exactly, written atomically.

A checkpoint holds the model's parameters, the optimizer's state, the state of
every random generator the run draws from, the iteration, the config, the
vocabulary and the best validation loss so far.

File layout (little-endian)::

    MAGIC             16 bytes   b"RESGRAD-CKPT-v1\\n"
    payload length     8 bytes   uint64
    payload sha256    32 bytes
    payload                      an uncompressed .npz (no pickles): "params/<name>",
                                 "optim/<key>", and "meta" (UTF-8 JSON as uint8)

The file is written with :func:`resgrad.formats.atomic.atomic_write` (temporary file in
the same directory, fsync, ``os.replace``, fsync of the directory), so a
process killed at any moment leaves the previous checkpoint or the new one.
On load, a wrong magic, a length that does not match, or a checksum that does
not match is a ``ValueError`` that says which; a checkpoint is never read
half-right. :func:`check_params` then refuses parameters whose names, shapes
or dtypes differ from the model's.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from resgrad.formats.atomic import atomic_write_bytes

__all__ = [
    "BEST",
    "LAST",
    "Checkpoint",
    "check_params",
    "generator_from_state",
    "load_checkpoint",
    "save_checkpoint",
]

MAGIC = b"RESGRAD-CKPT-v1\n"  # 16 bytes
_HEADER = struct.Struct("<16sQ32s")  # magic, payload length, sha256
LAST = "last.ckpt"  # written at every evaluation
BEST = "best.ckpt"  # written when the validation loss improves
_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937")


@dataclass
class Checkpoint:
    """The content of one checkpoint file.

    ``rng_states`` maps a name (e.g. ``"data"``, ``"dropout"``) to
    ``Generator.bit_generator.state``; ``extra`` holds any other JSON-able
    facts the trainer wants back (e.g. the data's SHA-256).
    """

    params: dict[str, np.ndarray]
    optimizer: dict[str, np.ndarray]
    iteration: int
    config: dict[str, Any]
    vocab: str
    best_val_loss: float | None = None
    rng_states: dict[str, dict] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    tokenizer: dict[str, Any] | None = None  # resgrad.train.bpe.tokenizer_record; None: char

    def _meta(self) -> dict[str, Any]:
        return {
            "format": 1,
            "iteration": int(self.iteration),
            "config": self.config,
            "vocab": self.vocab,
            "best_val_loss": None if self.best_val_loss is None else float(self.best_val_loss),
            "rng_states": self.rng_states,
            "extra": self.extra,
            **({} if self.tokenizer is None else {"tokenizer": self.tokenizer}),
        }


def _to_bytes(ckpt: Checkpoint) -> bytes:
    arrays = {f"params/{k}": np.asarray(v) for k, v in ckpt.params.items()}
    arrays.update({f"optim/{k}": np.asarray(v) for k, v in ckpt.optimizer.items()})
    meta = json.dumps(ckpt._meta(), allow_nan=False).encode("utf-8")
    arrays["meta"] = np.frombuffer(meta, dtype=np.uint8)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    payload = buf.getvalue()
    header = _HEADER.pack(MAGIC, len(payload), hashlib.sha256(payload).digest())
    return header + payload


def save_checkpoint(path: str | os.PathLike, ckpt: Checkpoint, *also: str | os.PathLike) -> None:
    """Write ``ckpt`` atomically to ``path`` (and to each path in ``also``).

    Raises
    ------
    ValueError
        If the metadata is not JSON-able without NaN/Inf (e.g. a NaN best loss).
    OSError
        If the directory is missing or not writable; existing files are untouched.
    """
    data = _to_bytes(ckpt)
    for p in (path, *also):
        atomic_write_bytes(p, data)


def load_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Read and verify a checkpoint.

    Raises
    ------
    ValueError
        Not a resgrad checkpoint, truncated, corrupted (checksum), or unreadable.
    OSError
        If the file cannot be opened.
    """
    name = os.fspath(path)
    with open(name, "rb") as f:
        raw = f.read()
    if len(raw) < _HEADER.size:
        if raw and not MAGIC.startswith(raw[: len(MAGIC)]):
            raise ValueError(f"{name!r} is not a resgrad checkpoint (bad header)")
        raise ValueError(
            f"checkpoint {name!r} is truncated: {len(raw)} bytes, shorter than its "
            f"{_HEADER.size}-byte header"
        )
    magic, length, digest = _HEADER.unpack_from(raw)
    if magic != MAGIC:
        raise ValueError(f"{name!r} is not a resgrad checkpoint (bad header)")
    payload = raw[_HEADER.size :]
    if len(payload) < length:
        raise ValueError(
            f"checkpoint {name!r} is truncated: header promises {length} bytes of payload, "
            f"the file holds {len(payload)}"
        )
    if len(payload) > length:
        raise ValueError(
            f"checkpoint {name!r} is corrupted: {len(payload) - length} unexpected bytes "
            "after the payload"
        )
    if hashlib.sha256(payload).digest() != digest:
        raise ValueError(f"checkpoint {name!r} is corrupted: its SHA-256 checksum does not match")
    try:
        with np.load(io.BytesIO(payload), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(arrays.pop("meta").tobytes().decode("utf-8"))
    except Exception as e:  # checksum passed, so this is a file written by something else
        raise ValueError(f"checkpoint {name!r} is unreadable: {e}") from None
    keys = ("format", "iteration", "config", "vocab", "best_val_loss", "rng_states", "extra")
    missing = [k for k in keys if k not in meta]
    if missing or meta["format"] != 1:
        raise ValueError(
            f"checkpoint {name!r} has unexpected metadata (format {meta.get('format')!r}, "
            f"missing {missing})"
        )
    params = {k[len("params/") :]: v for k, v in arrays.items() if k.startswith("params/")}
    optim = {k[len("optim/") :]: v for k, v in arrays.items() if k.startswith("optim/")}
    return Checkpoint(
        params=params,
        optimizer=optim,
        iteration=int(meta["iteration"]),
        config=meta["config"],
        vocab=meta["vocab"],
        best_val_loss=meta["best_val_loss"],
        rng_states=meta["rng_states"],
        extra=meta["extra"],
        tokenizer=meta.get("tokenizer"),
    )


def check_params(
    saved: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray], where: str = "checkpoint"
) -> None:
    """Refuse parameters whose names, shapes or dtypes differ from ``expected``'s.

    Raises
    ------
    ValueError
        Naming the first few missing, unexpected or mis-shaped parameters.
    """
    missing = [k for k in expected if k not in saved]
    extra = [k for k in saved if k not in expected]
    wrong = [
        f"{k} {saved[k].shape} {saved[k].dtype} (model: {expected[k].shape} {expected[k].dtype})"
        for k in expected
        if k in saved
        and (saved[k].shape != expected[k].shape or saved[k].dtype != expected[k].dtype)
    ]
    problems = []
    if missing:
        problems.append(f"missing {', '.join(missing[:3])}" + (" ..." if len(missing) > 3 else ""))
    if extra:
        problems.append(f"unexpected {', '.join(extra[:3])}" + (" ..." if len(extra) > 3 else ""))
    if wrong:
        problems.append(f"shape/dtype {'; '.join(wrong[:3])}" + (" ..." if len(wrong) > 3 else ""))
    if problems:
        raise ValueError(f"{where} does not match the model: {'; '.join(problems)}")


def generator_from_state(state: Mapping[str, Any]) -> np.random.Generator:
    """A ``np.random.Generator`` continuing exactly from ``bit_generator.state``."""
    name = state.get("bit_generator") if isinstance(state, Mapping) else None
    if name not in _BIT_GENERATORS:
        raise ValueError(f"unknown bit generator in checkpoint RNG state: {name!r}")
    gen = np.random.Generator(getattr(np.random, name)())
    gen.bit_generator.state = dict(state)
    return gen
