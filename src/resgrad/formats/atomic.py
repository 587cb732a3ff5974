"""Atomic file writes: a reader sees the old file or the new one, never half of one.

The recipe: write to a temporary file in the destination's own directory (so
the rename stays on one filesystem), flush and fsync it, ``os.replace`` it over
the destination (atomic on POSIX and Windows), then fsync the directory so the
rename itself survives a power cut. A process killed at any moment leaves
either the previous file or the new one, plus at worst a stray ``.tmp`` file.

This is a low-level module: it imports nothing from resgrad.
"""

from __future__ import annotations

import glob
import os
import tempfile
from collections.abc import Callable, Iterable
from typing import BinaryIO

__all__ = [
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_text",
    "make_dir",
    "remove_stale_temporaries",
]


def _fsync_dir(directory: str) -> None:
    # the rename lives in the directory entry; fsync it too (not possible on Windows)
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _file_mode(path: str) -> int:
    """The mode the written file gets: the old file's, else what open() would give (umask)."""
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)  # read the umask: it can only be read by setting it
        os.umask(umask)
        return 0o666 & ~umask


def _tmp_prefix(path: str) -> str:
    return f".{os.path.basename(path)}."


def remove_stale_temporaries(directory: str | os.PathLike, names: Iterable[str]) -> list[str]:
    """Delete the temporaries a killed :func:`atomic_write` of ``directory/name`` left behind.

    Only files named as this module names its temporaries (``.<name>.XXXXXXXX.tmp``)
    for the given ``names`` are touched. Call it only while holding the directory's
    lock (:mod:`resgrad.formats.lock`), or it could delete a live writer's file.

    Returns
    -------
    list of str
        The paths removed.
    """
    directory = os.fspath(directory)
    removed = []
    for name in names:
        pattern = os.path.join(glob.escape(directory), glob.escape(_tmp_prefix(name)) + "*.tmp")
        for tmp in glob.glob(pattern):
            try:
                os.unlink(tmp)
                removed.append(tmp)
            except FileNotFoundError:
                pass
    return removed


def atomic_write(path: str | os.PathLike, write_fn: Callable[[BinaryIO], None]) -> None:
    """Write ``path`` atomically; ``write_fn(f)`` writes the content to a binary file.

    Parameters
    ----------
    path : str or PathLike
        The destination. Its directory must exist.
    write_fn : callable
        Called once with a binary file object open for writing.

    Raises
    ------
    OSError
        If the directory does not exist or cannot be written. The destination
        is then untouched and no temporary file is left behind.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"directory {directory!r} does not exist (writing {path!r})")
    if os.path.isdir(path):
        raise IsADirectoryError(f"cannot write {path!r}: it is a directory; give a file name")
    try:
        fd, tmp = tempfile.mkstemp(prefix=_tmp_prefix(path), suffix=".tmp", dir=directory)
    except OSError as e:  # the message names the destination, not the temporary's name
        raise type(e)(f"cannot write {path!r} in {directory!r}: {e.strerror}") from None
    try:
        os.fchmod(fd, _file_mode(path))  # mkstemp makes 0600; give the usual mode instead
        with os.fdopen(fd, "wb") as f:
            write_fn(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(directory)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_write`)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data must be bytes, got {type(data).__name__}")
    atomic_write(path, lambda f: f.write(data))


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically, encoded as ``encoding`` (UTF-8 by default)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    atomic_write_bytes(path, text.encode(encoding))


def make_dir(path: str | os.PathLike) -> None:
    """``os.makedirs(path, exist_ok=True)``, with one-line errors naming ``path``."""
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(f"{path!r} is a file; expected a directory (or a new name)")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise type(e)(f"cannot create directory {path!r}: {e.strerror}") from None
