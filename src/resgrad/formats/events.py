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

A resumed run must not show the steps it is about to redo twice. :func:`trim_events`
rewrites (atomically) every event file of a log directory without the events at or
after the resume step; a ``SessionLog.START`` at that step in the new file tells a
TensorBoard that already read the old events to drop them too (its "purge").
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Iterator

from resgrad.formats.atomic import atomic_write_bytes

__all__ = [
    "EXTRA",
    "EventFile",
    "event_files",
    "frame",
    "masked_crc",
    "read_events",
    "read_frames",
    "require_tensorboardx",
    "trim_events",
]

EXTRA = 'pip install "resgrad[tensorboard]"'  # what a missing tensorboardX asks for
FILE_VERSION = "brain.Event:2"
_MASK_DELTA = 0xA282EAD8


def require_tensorboardx():
    """tensorboardX's module, or one line saying what to install (ValueError, as every
    missing optional extra in resgrad)."""
    try:
        import tensorboardX
    except ImportError:
        raise ValueError(
            f"TensorBoard logging needs tensorboardX, which is not installed; {EXTRA}"
        ) from None
    return tensorboardX


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC-32C of ``data`` (tensorboardX's CRC: native with ``crc32c``)."""
    from tensorboardX.crc32c import crc32c

    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One TFRecord: length, its CRC, the data, the data's CRC."""
    head = struct.pack("<Q", len(data))  # 8 bytes
    return head + struct.pack("<I", masked_crc(head)) + data + struct.pack("<I", masked_crc(data))


def read_frames(path: str | os.PathLike) -> tuple[list[bytes], int]:
    """The records of a TFRecord file, up to the first torn or damaged one.

    Returns (each record's framed bytes, the number of bytes after the last sound
    record): a kill's torn last record, or damage, is left out and counted.
    """
    with open(path, "rb") as f:
        data = f.read()
    frames, pos = [], 0
    while pos + 12 <= len(data):
        head = data[pos : pos + 8]
        (n,) = struct.unpack("<Q", head)
        (head_crc,) = struct.unpack("<I", data[pos + 8 : pos + 12])
        end = pos + 12 + n + 4
        if head_crc != masked_crc(head) or end > len(data):
            break
        body = data[pos + 12 : pos + 12 + n]
        if struct.unpack("<I", data[end - 4 : end])[0] != masked_crc(body):
            break
        frames.append(data[pos:end])
        pos = end
    return frames, len(data) - pos


def _event(framed: bytes):
    from tensorboardX.proto.event_pb2 import Event

    ev = Event()
    ev.ParseFromString(framed[12:-4])
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
        for framed in read_frames(path)[0]:
            yield _event(framed)


def trim_events(logdir: str | os.PathLike, before_step: int) -> int:
    """Keep only the events of steps < ``before_step`` in ``logdir``'s event files.

    Each file that holds a later event (or a torn tail) is rewritten atomically with the
    earlier ones, file-version record included; the others are left as they are.
    Returns how many events were dropped.
    """
    dropped = 0
    for path in event_files(logdir):
        frames, torn = read_frames(path)
        keep = [f for f in frames if _event(f).step < before_step]
        if len(keep) < len(frames) or torn:
            atomic_write_bytes(path, b"".join(keep))
            dropped += len(frames) - len(keep)
    return dropped


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
            # every file already there (a resume's trimmed ones), even one begun this second
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
