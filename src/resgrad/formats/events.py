"""TensorBoard event files: TFRecords of ``Event`` protocol buffers, appended and read back.

An event file is a sequence of records, each framed as TFRecord frames it::

    uint64 length | uint32 masked_crc32c(length) | data (length bytes) | uint32 masked_crc32c(data)

(little-endian; ``masked(c) = ((c >> 15 | c << 17) + 0xa282ead8) mod 2^32``), and each
``data`` an ``Event`` protocol buffer: a wall time, a step, and one of a file version,
a ``Summary`` (scalars, histograms, a plugin's data) or a session log. The protos and
the CRC come from tensorboardX (numpy and protobuf, no torch or TensorFlow: the
``tensorboard`` extra); only the framing is written here, because the writer owns its
file: one ``write`` per event on an ``O_APPEND`` descriptor (a ``kill -9`` loses at most
the event being written) and an ``fsync`` on demand, as ``dynamics.bin`` is written.

A damaged record (a flipped byte, a length no record has) does not end the file: the
reader skips to the next sound record, found by its CRCs, and counts the bytes it skipped,
so that the records after the damage are kept. Bytes after the last sound record that hold
no sound record are a torn tail: what a kill leaves of the event it was writing.
"""

from __future__ import annotations

import importlib
import os
import socket
import struct
import time
from collections.abc import Iterator
from typing import NamedTuple

__all__ = [
    "EXTRA",
    "EventFile",
    "Frames",
    "event_files",
    "frame",
    "import_extra",
    "masked_crc",
    "read_events",
    "read_frames",
    "require_tensorboardx",
    "salvage_events",
]

EXTRA = 'pip install "resgrad[tensorboard]"'  # what a missing tensorboardX asks for
FILE_VERSION = "brain.Event:2"
_MASK_DELTA = 0xA282EAD8


def import_extra(module: str, needs: str, extra: str):
    """``module``, imported; or one line (ValueError) saying why ``needs`` cannot have it.

    "not installed" (and what to install, ``extra``) only when the module itself is
    absent: a ``ModuleNotFoundError`` of that very name. A module that is there but fails
    to import (a missing dependency, a clash of protobuf versions: any exception its
    import raises) is named with the error it raised, not called missing.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name == module:
            raise ValueError(f"{needs} needs {module}, which is not installed; {extra}") from None
        why = e
    except Exception as e:  # noqa: BLE001 - whatever its import raised is the reason
        why = e
    text = (str(why).strip().splitlines() or [""])[0]
    raise ValueError(
        f"{needs} needs {module}, which is installed but fails to import: "
        f"{type(why).__name__}: {text}"
    ) from None


def require_tensorboardx():
    """tensorboardX's module, or one line saying what is wrong (:func:`import_extra`)."""
    return import_extra("tensorboardX", "TensorBoard logging", EXTRA)


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC-32C of ``data`` (tensorboardX's CRC: native with ``crc32c``)."""
    from tensorboardX.crc32c import crc32c

    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One TFRecord: length, its CRC, the data, the data's CRC."""
    head = struct.pack("<Q", len(data))  # 8 bytes
    return head + struct.pack("<I", masked_crc(head)) + data + struct.pack("<I", masked_crc(data))


class Frames(NamedTuple):
    """What :func:`read_frames` found in a TFRecord file."""

    frames: list[bytes]  # each sound record, framed, in file order
    torn: int  # bytes after the last sound record that hold none: a kill's torn tail
    damaged: list[tuple[int, int]]  # (offset, bytes) of each damaged span skipped


def _framed_end(data: bytes, pos: int) -> int | None:
    """The end of the record at ``pos`` if its length is sound (within the file, its CRC
    right), whatever its data: the next record starts there. Else None."""
    if pos + 12 > len(data):
        return None
    (n,) = struct.unpack_from("<Q", data, pos)
    end = pos + 12 + n + 4
    if end > len(data):  # checked first, as it costs nothing: most bytes are no length
        return None
    (head_crc,) = struct.unpack_from("<I", data, pos + 8)
    return end if head_crc == masked_crc(data[pos : pos + 8]) else None


def _sound_end(data: bytes, pos: int) -> int | None:
    """The end of the record at ``pos`` if it is sound (its length and its data), else None."""
    end = _framed_end(data, pos)
    if end is None:
        return None
    (data_crc,) = struct.unpack_from("<I", data, end - 4)
    return end if data_crc == masked_crc(data[pos + 12 : end - 4]) else None


def read_frames(path: str | os.PathLike) -> Frames:
    """The sound records of a TFRecord file, and what is not sound in it.

    A record whose data is damaged but whose length is sound is skipped by its length;
    one whose length is damaged is skipped up to the next place a sound record starts.
    Each skip is a damaged span. Bytes after the last sound record that hold none are
    the torn tail (a kill's), not damage.
    """
    with open(path, "rb") as f:
        data = f.read()
    frames, damaged, pos = [], [], 0
    while pos < len(data):
        end = _sound_end(data, pos)
        if end is not None:
            frames.append(data[pos:end])
            pos = end
            continue
        nxt = _framed_end(data, pos)  # the data is damaged, its length is not
        if nxt is None:  # the length is damaged too: look for the next sound record
            nxt = next((p for p in range(pos + 1, len(data))
                        if _sound_end(data, p) is not None), None)  # fmt: skip
        if nxt is None:
            return Frames(frames, len(data) - pos, damaged)
        damaged.append((pos, nxt - pos))
        pos = nxt
    return Frames(frames, 0, damaged)


def _event(framed: bytes):
    """The ``Event`` a sound record holds, or None when its bytes are not one."""
    from google.protobuf.message import DecodeError
    from tensorboardX.proto.event_pb2 import Event

    ev = Event()
    try:
        ev.ParseFromString(framed[12:-4])
    except DecodeError:
        return None
    return ev


def event_files(logdir: str | os.PathLike) -> list[str]:
    """The event files directly in ``logdir``, in the order TensorBoard reads them (by name)."""
    logdir = os.fspath(logdir)
    if not os.path.isdir(logdir):
        return []
    names = sorted(n for n in os.listdir(logdir) if "tfevents" in n and not n.endswith(".tmp"))
    return [os.path.join(logdir, n) for n in names if os.path.isfile(os.path.join(logdir, n))]


def read_events(logdir: str | os.PathLike) -> Iterator:
    """Every sound ``Event`` of every event file in ``logdir``, in TensorBoard's order."""
    for path in event_files(logdir):
        for framed in read_frames(path).frames:
            ev = _event(framed)
            if ev is not None:
                yield ev


def salvage_events(logdir: str | os.PathLike) -> tuple[list, list[str]]:
    """Every sound ``Event`` of ``logdir``'s event files (TensorBoard's order), and what
    was damaged: one phrase per file with damaged spans or records that are no event
    (its name, how many, how many bytes). A torn tail is a kill's, not damage."""
    events, damage = [], []
    for path in event_files(logdir):
        found = read_frames(path)
        parsed = [_event(f) for f in found.frames]
        events += [e for e in parsed if e is not None]
        what = []
        if found.damaged:
            n, size = len(found.damaged), sum(k for _, k in found.damaged)
            what.append(f"{n} damaged span{'s' * (n != 1)} ({size} bytes) skipped")
        junk = sum(e is None for e in parsed)
        if junk:
            what.append(f"{junk} record{'s' * (junk != 1)} that {'is' if junk == 1 else 'are'} "
                        "no event skipped")  # fmt: skip
        if what:
            damage.append(f"{os.path.basename(path)}: {', '.join(what)}")
    return events, damage


def _seconds(path: str) -> int:
    """The seconds in an event file's name (``events.out.tfevents.<seconds>...``); 0 if none."""
    field = os.path.basename(path).split("tfevents.", 1)[-1].split(".", 1)[0]
    return int(field) if field.isdigit() else 0


class EventFile:
    """A new event file in ``logdir``: a file-version record, then one record per :meth:`write`.

    The name is TensorBoard's (``events.out.tfevents.<seconds>.<host>``) with this
    process's id and a sequence number, so two writers never share a file, and seconds
    past those of every event file already in ``logdir``, so that TensorBoard (which
    reads them in name order) reads this one last. A given
    ``wall_time`` (an export) fixes the first record's time and the whole name, so that
    the file's bytes depend on neither the clock nor the process; default: now.
    """

    _opened = 0  # per process: the sequence number in the next file's name

    def __init__(self, logdir: str | os.PathLike, wall_time: float | None = None):
        require_tensorboardx()
        from tensorboardX.proto.event_pb2 import Event

        logdir = os.fspath(logdir)
        os.makedirs(logdir, exist_ok=True)
        now = time.time() if wall_time is None else wall_time
        name = f"events.out.tfevents.{int(now):010d}"
        if wall_time is None:  # live: this host and process (an export's name is fixed)
            # TensorBoard reads a directory's files in name order: this one must come after
            # every file already there (a resumed run's old ones), even one begun this second
            secs = max([int(now)] + [_seconds(p) + 1 for p in event_files(logdir)])
            EventFile._opened += 1
            name = (f"events.out.tfevents.{secs:010d}.{socket.gethostname()}."
                    f"{os.getpid():010d}.{EventFile._opened:06d}")  # fmt: skip
        self.path = os.path.join(logdir, name)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o666)
        self.write(Event(wall_time=now, step=0, file_version=FILE_VERSION))

    def write(self, event) -> None:
        """Append one ``Event`` (one ``write``: all of it or, after a kill, a torn tail)."""
        os.write(self._fd, frame(event.SerializeToString()))

    def sync(self) -> None:
        """Put the events written so far on disk (fsync)."""
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> EventFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
