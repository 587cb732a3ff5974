"""Exclusive locks on what a command writes: a run directory, a sweep's result file.

Two runs writing one place would mix their files silently (checkpoints from
one, metrics from the other). So a run holds an exclusive lock on its output
for as long as it writes, and a second run fails at once naming the place and
the holder.

The lock is ``filelock.FileLock`` on ``<place>.lock`` (a run directory:
``<dir>/.resgrad.lock``). On Linux and macOS that is ``flock(2)``: the kernel
releases it when the holding process exits, however it exits, so a run killed
with SIGKILL never blocks the next one (tests/formats/test_lock.py kills a holder
with SIGKILL and takes the lock after it). The lock file stays in place, empty,
after release (so that waiters share one inode); it carries no content (a
process that tries the lock may truncate it), so the holder's pid, host, start
time and command line go into a sidecar ``<lock>.info`` file, written after the
lock is taken and read back for the error message.

This is a low-level module: it imports nothing from resgrad.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator

import filelock

from resgrad.formats.atomic import make_dir

__all__ = ["LOCK_NAME", "Locked", "hold_lock", "lock_dir", "lock_path_for", "new_dir_or_nothing"]

LOCK_NAME = ".resgrad.lock"  # the lock file inside a locked directory


class Locked(OSError):
    """Another process holds the lock; the message names the place and the holder."""


def lock_path_for(path: str | os.PathLike, directory: bool) -> str:
    """The lock file of ``path``: inside a directory, ``.<name>.lock`` beside a file."""
    path = os.fspath(path)
    if directory:
        return os.path.join(path, LOCK_NAME)
    return os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.lock")


def _program() -> str:
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    return "resgrad" if name == "__main__.py" else name  # `python -m resgrad` reads as resgrad


def _holder_text(info_path: str) -> str:
    try:
        with open(info_path, encoding="utf-8") as f:
            info = json.load(f)
        started = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(info["started"]))
        return f"pid {info['pid']} on {info['host']}, started {started} ({info['command']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that has not yet written its details"


@contextlib.contextmanager
def hold_lock(lock_file: str, what: str) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_file`` for the ``with`` block, or fail at once.

    Parameters
    ----------
    lock_file : str
        The lock file (created if missing; its directory must exist).
    what : str
        The locked place as the error message names it, e.g. ``"run directory 'out'"``.

    Raises
    ------
    Locked
        If another process holds the lock: one line naming ``what`` and the holder.
    """
    info_path = lock_file + ".info"
    try:  # a place that cannot be written says so, rather than look locked
        os.close(os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644))
    except OSError as e:
        raise type(e)(
            f"{what} cannot be written: its lock file {lock_file!r} cannot be created "
            f"({e.strerror})"
        ) from None
    lock = filelock.FileLock(lock_file, timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise Locked(
            f"{what} is in use by another resgrad run: {_holder_text(info_path)}; wait for it "
            "to finish or write elsewhere"
        ) from None
    try:
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.time(),
            "command": " ".join([_program(), *sys.argv[1:]])[:200],
        }
        with open(info_path, "w", encoding="utf-8") as f:  # small; read only for messages
            json.dump(info, f)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(info_path)
        lock.release()


def lock_dir(
    directory: str | os.PathLike, what: str = "run directory"
) -> contextlib.AbstractContextManager:
    """Hold the lock of ``directory`` (which must exist): see :func:`hold_lock`."""
    directory = os.fspath(directory)
    return hold_lock(lock_path_for(directory, True), f"{what} {directory!r}")


@contextlib.contextmanager
def new_dir_or_nothing(
    directory: str | os.PathLike, disposable: Callable[[str], bool] | None = None
) -> Iterator[None]:
    """Make ``directory`` (and its parents) for the ``with`` block; if the block fails
    and the directory is new, take it away again unless it holds more than lock files,
    empty hidden files, files ``disposable(path)`` calls bookkeeping, and empty folders:
    a refused command leaves nothing behind.

    The lock files go only once the lock can be taken again at once, so that no run
    holding one (it would have to have started since) loses it.
    """
    directory = os.fspath(directory)
    new = not os.path.isdir(directory)
    make_dir(directory)
    try:
        yield
    except BaseException:
        if new:
            with contextlib.suppress(OSError):  # the block's own error is the one to report
                _remove_if_unused(directory, disposable or (lambda path: False))
        raise


def _remove_if_unused(directory: str, disposable: Callable[[str], bool]) -> None:
    walk = list(os.walk(directory, topdown=False))  # deepest folders first
    files = [os.path.join(root, name) for root, _, names in walk for name in names]

    def bookkeeping(path: str) -> bool:
        name = os.path.basename(path)
        empty_hidden = name.startswith(".") and os.path.getsize(path) == 0
        return name.endswith((".lock", ".lock.info")) or empty_hidden or disposable(path)

    if not all(bookkeeping(f) for f in files):
        return  # something was written: the directory stays as it is
    locks = []
    for f in files:
        if f.endswith(".lock"):
            lock = filelock.FileLock(f, timeout=0)
            try:
                lock.acquire()
            except filelock.Timeout:  # somebody holds it: leave everything
                for held in locks:
                    held.release()
                return
            locks.append(lock)
    for f in files:
        with contextlib.suppress(OSError):
            os.unlink(f)
    for lock in locks:
        lock.release()
    for root, _, _ in walk:
        with contextlib.suppress(OSError):
            os.rmdir(root)
