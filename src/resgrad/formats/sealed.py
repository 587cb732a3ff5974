"""What resgrad reads back is what it wrote: sealed records and stamped files.

Every file resgrad writes and later reads again as the truth (a study's cached rows, the
checkpoints those rows were measured on) is checked when it is read, by one mechanism:

- a **sealed record** (:func:`seal`) is a JSON object carrying the SHA-256 of its own
  content (its canonical JSON: sorted keys, no spaces, without the seal), so that one
  number edited by hand, or a line half-overwritten, is found by :func:`unseal`, which
  names the file and the line;
- a **stamp** (:func:`stamp`) is a file's size and SHA-256, kept in the record of what
  was measured on that file; :func:`stamp_problem` says, in words, why the file on disk
  is no longer the one measured (gone, another size, other bytes), or nothing.

A reader that finds a problem measures again or refuses, naming the file and the reason;
it never uses what it read. Checkpoints carry their own SHA-256
(:mod:`resgrad.formats.checkpoint`); a run's checkpoints are checked against the run
they belong to in :mod:`resgrad.train.rundir`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

__all__ = ["SEAL", "Tampered", "canonical", "seal", "stamp", "stamp_problem", "unseal"]

SEAL = "sha256"  # the field of a sealed record that holds the SHA-256 of the rest
_CHUNK = 1 << 20  # a file is hashed a MiB at a time


class Tampered(ValueError):
    """A sealed record whose seal is missing or does not match its content."""


def canonical(obj: Any) -> bytes:
    """``obj`` as canonical JSON: sorted keys, no spaces, floats by ``repr`` (round trip)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=True).encode()


def seal(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` with a field :data:`SEAL` holding the SHA-256 of its canonical JSON."""
    body = {k: v for k, v in record.items() if k != SEAL}
    return {**body, SEAL: hashlib.sha256(canonical(body)).hexdigest()}


def unseal(record: Any, where: str) -> dict[str, Any]:
    """The content of the sealed ``record`` (without its seal), or :class:`Tampered` naming
    ``where`` (a file and line) when the seal is missing or does not match.

    Raises
    ------
    Tampered
    """
    if not isinstance(record, dict) or not isinstance(record.get(SEAL), str):
        raise Tampered(f"{where} carries no {SEAL} seal: not a record resgrad wrote")
    body = {k: v for k, v in record.items() if k != SEAL}
    if hashlib.sha256(canonical(body)).hexdigest() != record[SEAL]:
        raise Tampered(f"{where} does not match its {SEAL} seal: it was edited or damaged")
    return body


def stamp(path: str | os.PathLike) -> dict[str, Any]:
    """The stamp of the file at ``path``: ``{"size": bytes, "sha256": hex digest}``."""
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return {"size": size, "sha256": h.hexdigest()}


def stamp_problem(path: str | os.PathLike, expected: Mapping[str, Any] | None) -> str | None:
    """Why the file at ``path`` is not the one stamped ``expected``, in words naming it; None
    when its size and SHA-256 are the stamp's."""
    name = os.fspath(path)
    if not isinstance(expected, Mapping) or not {"size", "sha256"} <= set(expected):
        return f"{name!r} has no stamp recorded (size and SHA-256)"
    if not os.path.isfile(name):
        return f"{name!r} is gone"
    size = os.path.getsize(name)
    if size != expected["size"]:
        return f"{name!r} is {size} bytes, {expected['size']} when it was measured"
    if stamp(name)["sha256"] != expected["sha256"]:
        return f"{name!r} has other bytes than when it was measured (its SHA-256 differs)"
    return None
