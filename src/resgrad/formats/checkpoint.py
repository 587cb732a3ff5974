"""Checkpoints: everything a run needs to continue bit-exactly, written atomically.

A checkpoint holds the model's parameters, the optimizer's state, the state of
every random generator the run draws from, the iteration, the config, the
vocabulary (and which tokenizer) and the best validation loss so far.

The file is a safetensors file (format 2), which any safetensors reader opens:

- tensors ``params/<name>`` (the model's flat names) and ``optim/<key>`` (AdamW's
  ``step``, ``m.<name>``, ``v.<name>``), in their own dtypes, bit for bit;
- metadata ``format`` = ``"resgrad-checkpoint-2"``, ``resgrad`` = everything else
  as one JSON object (iteration, config, vocabulary, tokenizer, best loss, RNG
  states, extra), and ``sha256`` = the SHA-256 of the whole file as written with
  this field's 64 hex digits set to ``0``: it covers the metadata and every tensor.

Format 1 (``RESGRAD-CKPT-v1`` magic, a checksummed .npz) is still read; the
next save of a resumed run writes format 2.

The file is written with :func:`resgrad.formats.atomic.atomic_write` (temporary file in
the same directory, fsync, ``os.replace``, fsync of the directory), so a
process killed at any moment leaves the previous checkpoint or the new one.
On load, a file that is not a checkpoint, one shorter than its header
promises, or a checksum that does not match is a ``ValueError`` that says
which; a checkpoint is never read half-right. :func:`check_params` then
refuses parameters whose names, shapes or dtypes differ from the model's.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
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

MAGIC = b"RESGRAD-CKPT-v1\n"  # 16 bytes, format 1 (read only)
_HEADER = struct.Struct("<16sQ32s")  # format 1: magic, payload length, sha256
FORMAT = "resgrad-checkpoint-2"  # the safetensors metadata's "format"
_ZERO_SHA = "0" * 64  # the checksum field while the checksum is computed
_SHA_FIELD = re.compile(rb'"sha256":"([0-9a-f]{64})"')  # found in the raw header, even damaged
_MAX_HEADER = 100 << 20  # a safetensors header longer than this is not ours
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
            "format": 2,
            "iteration": int(self.iteration),
            "config": self.config,
            "vocab": self.vocab,
            "best_val_loss": None if self.best_val_loss is None else float(self.best_val_loss),
            "rng_states": self.rng_states,
            "extra": self.extra,
            **({} if self.tokenizer is None else {"tokenizer": self.tokenizer}),
        }


def _to_bytes(ckpt: Checkpoint) -> bytes:
    """The format-2 file: safetensors with resgrad's metadata and a whole-file SHA-256."""
    from safetensors.numpy import save

    # np.asarray(order="C"), not ascontiguousarray: that would make AdamW's 0-d step 1-d
    arrays = {f"params/{k}": np.asarray(v, order="C") for k, v in ckpt.params.items()}
    arrays.update({f"optim/{k}": np.asarray(v, order="C") for k, v in ckpt.optimizer.items()})
    meta = json.dumps(ckpt._meta(), allow_nan=False)
    raw = save(arrays, metadata={"format": FORMAT, "resgrad": meta, "sha256": _ZERO_SHA})
    digest = hashlib.sha256(raw).hexdigest()  # over the file with the field zeroed
    field = _SHA_FIELD.search(raw, 8, 8 + int.from_bytes(raw[:8], "little"))
    return raw[: field.start(1)] + digest.encode("ascii") + raw[field.end(1) :]


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
    """Read and verify a checkpoint (format 2, or format 1 written by resgrad 0.1).

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
    if raw[:1] == MAGIC[:1] and MAGIC.startswith(raw[: len(MAGIC)]):
        return _load_v1(name, raw)  # format 1 (or the start of one)
    if len(raw) < 8:
        raise ValueError(
            f"checkpoint {name!r} is truncated: {len(raw)} bytes, shorter than its 8-byte header"
        )
    n = int.from_bytes(raw[:8], "little")  # safetensors: header length, then the JSON header
    if n > _MAX_HEADER or not raw[8:10] or not b'{"'.startswith(raw[8:10]):
        raise ValueError(f"{name!r} is not a resgrad checkpoint (bad header)")
    if len(raw) < 8 + n:
        raise ValueError(
            f"checkpoint {name!r} is truncated: its header promises {n} bytes of header, "
            f"the file holds {len(raw) - 8}"
        )
    header = raw[8 : 8 + n]
    field = _SHA_FIELD.search(header)
    if field is None:
        if FORMAT.encode() not in header:
            raise ValueError(f"{name!r} is not a resgrad checkpoint (a safetensors file without "
                             "resgrad's metadata)")  # fmt: skip
        raise ValueError(f"checkpoint {name!r} is corrupted: its SHA-256 checksum field is damaged")
    a, b = 8 + field.start(1), 8 + field.end(1)
    zeroed = raw[:a] + _ZERO_SHA.encode("ascii") + raw[b:]
    if hashlib.sha256(zeroed).hexdigest() != field.group(1).decode("ascii"):
        raise ValueError(_diagnose(name, raw, header))
    return _from_safetensors(name, raw)


def _diagnose(name: str, raw: bytes, header: bytes) -> str:
    """Why a format-2 file fails its checksum: cut short, extended, or changed."""
    try:
        entries = json.loads(header)
        end = max([e["data_offsets"][1] for k, e in entries.items() if k != "__metadata__"] + [0])
    except (ValueError, KeyError, TypeError, IndexError):
        end = None  # the header itself is damaged
    if end is not None:
        want = 8 + len(header) + end
        if len(raw) < want:
            return (
                f"checkpoint {name!r} is truncated: its header promises {want} bytes, "
                f"the file holds {len(raw)}"
            )
        if len(raw) > want:
            return (
                f"checkpoint {name!r} is corrupted: {len(raw) - want} unexpected bytes after "
                "the tensors"
            )
    return f"checkpoint {name!r} is corrupted: its SHA-256 checksum does not match"


def _from_safetensors(name: str, raw: bytes) -> Checkpoint:
    from safetensors.numpy import load

    try:
        arrays = load(raw)
        header = raw[8 : 8 + int.from_bytes(raw[:8], "little")]
        meta = json.loads(json.loads(header)["__metadata__"]["resgrad"])
    except Exception as e:  # checksum passed, so this is a file written by something else
        raise ValueError(f"checkpoint {name!r} is unreadable: {e}") from None
    return _from_parts(name, arrays, meta, version=2)


def _load_v1(name: str, raw: bytes) -> Checkpoint:
    """Format 1: MAGIC, uint64 payload length, sha256, then an .npz (no pickles)."""
    if len(raw) < _HEADER.size:
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
    return _from_parts(name, arrays, meta, version=1)


def _from_parts(name: str, arrays: dict, meta: dict, version: int) -> Checkpoint:
    keys = ("format", "iteration", "config", "vocab", "best_val_loss", "rng_states", "extra")
    missing = [k for k in keys if k not in meta] if isinstance(meta, dict) else list(keys)
    if missing or meta["format"] != version:
        got = meta.get("format") if isinstance(meta, dict) else None
        raise ValueError(
            f"checkpoint {name!r} has unexpected metadata (format {got!r}, missing {missing})"
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
