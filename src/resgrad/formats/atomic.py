"""Atomic file writes: a reader sees the old file or the new one, never half of one.

The recipe: write to a temporary file in the destination's own directory (so
the rename stays on one filesystem), flush and fsync it, ``os.replace`` it over
the destination (atomic on POSIX and Windows), then fsync the directory so the
rename itself survives a power cut. A process killed at any moment leaves
either the previous file or the new one, plus at worst a stray temporary,
``.<name>.<pid>-XXXXXXXX.tmp``: the next write to the same destination removes it
once process ``pid`` is gone (:func:`remove_dead_temporaries`).

:func:`check_destination` refuses, before any work, a destination that cannot be
written (its directory missing, a file, or read-only): a command that would compute
for minutes and then fail to save calls it first.

A directory written as a whole (a model export: weights, config and tokenizer that
belong together) goes the same way one level up: :func:`staged_dir` fills a sibling
temporary directory, fsyncs it, and renames it into place, so a reader never sees new
weights beside an old config.

This is a low-level module: it imports nothing from resgrad.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

__all__ = [
    "holds",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_text",
    "check_destination",
    "make_dir",
    "remove_dead_temporaries",
    "remove_stale_staging",
    "remove_stale_temporaries",
    "staged_dir",
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
    """What every temporary of ``path`` starts with: ``.<name>.`` (then ``<pid>-XXXXXXXX.tmp``)."""
    return f".{os.path.basename(path)}."


def _tmp_pattern(path: str) -> re.Pattern:
    """The names this module gives the temporaries of ``path``, the writer's pid captured."""
    return re.compile(re.escape(_tmp_prefix(path)) + r"(?P<pid>[0-9]+)-[^.]+\.tmp")


def remove_dead_temporaries(path: str | os.PathLike) -> list[str]:
    """Delete the temporaries that killed :func:`atomic_write` s of ``path`` left behind.

    Only files beside ``path`` named as this module names the temporaries of ``path``
    (``.<name>.<pid>-XXXXXXXX.tmp``), written by a process ``pid`` that no longer runs,
    are touched: a live writer's temporary, another destination's, or a file named
    otherwise (an older ``.<name>.XXXXXXXX.tmp`` without a pid included) is left alone.

    Returns
    -------
    list of str
        The paths removed.
    """
    path = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(path)
    pattern = _tmp_pattern(path)
    removed = []
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        return removed
    for entry in entries:
        m = pattern.fullmatch(entry)
        if m is None or _alive(int(m["pid"])):  # not ours, or its writer still runs
            continue
        tmp = os.path.join(directory, entry)
        try:
            os.unlink(tmp)
            removed.append(tmp)
        except FileNotFoundError:  # another writer removed it first
            pass
    return removed


def holds(directory: str | os.PathLike, path: str | os.PathLike) -> bool:
    """Whether ``directory`` is ``path`` or one of its parents (links resolved): what a
    command that replaces ``directory`` whole must never do to a ``path`` it reads."""
    d, p = os.path.realpath(directory), os.path.realpath(path)
    return os.path.commonpath([d, p]) == d


def check_destination(path: str | os.PathLike) -> None:
    """Refuse, in one line naming ``path``, a file that :func:`atomic_write` could not write.

    Called before the work whose result goes to ``path`` (a plot, a table), so that a
    bad destination costs nothing. Each case has its own message: ``path`` is a
    directory; a directory on the way is a file; its directory does not exist; its
    directory cannot be written (tried with a temporary, which is removed at once: a
    permission bit alone does not tell, e.g. for root or on a read-only filesystem).

    Raises
    ------
    IsADirectoryError, NotADirectoryError, FileNotFoundError, PermissionError
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise IsADirectoryError(f"cannot write {path!r}: it is a directory; give a file name")
    if not os.path.isdir(directory):
        up = directory
        while not os.path.lexists(up):  # the nearest ancestor that exists
            up = os.path.dirname(up)
        if not os.path.isdir(up):
            raise NotADirectoryError(f"cannot write {path!r}: {up!r} is a file, not a directory")
        raise FileNotFoundError(f"cannot write {path!r}: directory {directory!r} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f"{_tmp_prefix(path)}{os.getpid()}-", suffix=".tmp",
                                   dir=directory)  # fmt: skip
    except OSError:  # EACCES, EROFS, or /proc's ENOENT: all say the same to the user
        raise PermissionError(f"cannot write {path!r}: directory {directory!r} is not "
                              "writable") from None  # fmt: skip
    os.close(fd)
    os.unlink(tmp)


def remove_stale_temporaries(directory: str | os.PathLike, names: Iterable[str]) -> list[str]:
    """Delete the temporaries a killed :func:`atomic_write` of ``directory/name`` left behind.

    Only files named as this module names its temporaries (``.<name>.<pid>-XXXXXXXX.tmp``,
    or ``.<name>.XXXXXXXX.tmp`` before the pid was in the name) for the given ``names`` are
    touched, whatever their writer's pid. Call it only while holding the directory's
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
        The destination. Its directory must exist. The temporaries of earlier
        writes to it whose processes were killed are removed first.
    write_fn : callable
        Called once with a binary file object open for writing.

    Raises
    ------
    OSError
        If the directory does not exist or cannot be written (the messages of
        :func:`check_destination`). The destination is then untouched and no
        temporary file is left behind.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path) or not os.path.isdir(directory):
        check_destination(path)  # raises, saying which of the two
    remove_dead_temporaries(path)  # a killed writer's, of this destination only
    try:  # the pid in the name: the next write knows when its writer is dead
        fd, tmp = tempfile.mkstemp(prefix=f"{_tmp_prefix(path)}{os.getpid()}-", suffix=".tmp",
                                   dir=directory)  # fmt: skip
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


# --------------------------------------------------------------------------- whole directories

# a staged directory's temporaries, siblings of it: ``.<name>.new-<pid>-XXXXXXXX.tmp`` (being
# written) and ``.<name>.old-<pid>-XXXXXXXX.tmp`` (the directory it replaces, moved aside)
_STAGED = re.compile(r"\.(?P<name>.+)\.(?P<kind>new|old)-(?P<pid>\d+)-[^.]+\.tmp")


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs; a number that cannot be a pid counts as alive (its
    temporary is left alone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # somebody else's process; no pid at all
        return True
    return True


def remove_stale_staging(path: str | os.PathLike) -> list[str]:
    """Clean up after a :func:`staged_dir` of ``path`` whose process was killed.

    Only siblings named as :func:`staged_dir` names its temporaries, by a process that
    no longer runs, are touched: a staged directory is removed; a directory moved aside
    is put back if ``path`` is missing (killed between the two renames of a replace:
    the old directory is the one that was complete), else removed.

    Returns
    -------
    list of str
        The temporaries removed or put back.
    """
    path = os.path.abspath(os.fspath(path))
    parent, name = os.path.split(path)
    done: list[str] = []
    if not os.path.isdir(parent):
        return done
    for entry in sorted(os.listdir(parent)):  # "new" before "old"
        m = _STAGED.fullmatch(entry)
        if m is None or m["name"] != name or _alive(int(m["pid"])):
            continue
        tmp = os.path.join(parent, entry)
        if m["kind"] == "old" and not os.path.lexists(path):
            os.replace(tmp, path)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        done.append(tmp)
    if done:
        _fsync_dir(parent)
    return done


def _fsync_tree(directory: str) -> None:
    """fsync every file under ``directory``, then each directory, deepest first."""
    for root, _, files in os.walk(directory, topdown=False):
        for f in files:
            fd = os.open(os.path.join(root, f), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(root)


@contextlib.contextmanager
def staged_dir(path: str | os.PathLike, *, replace: bool = False) -> Iterator[str]:
    """Write the directory ``path`` as a whole: readers see the old one or the new one.

    Yields an empty temporary directory beside ``path``; fill it. When the block ends
    normally, everything in it is fsynced and it is renamed to ``path`` in one step
    (an existing empty ``path`` is replaced the same way). With ``replace``, an existing
    ``path`` is first renamed aside, and removed once the new one is in place; a kill
    between those two renames leaves the complete old directory aside, which the next
    :func:`staged_dir` of ``path`` (through :func:`remove_stale_staging`) puts back.
    If the block raises, the temporary is removed and ``path`` is as it was.
    Temporaries that a killed process left are cleaned up first.

    Raises
    ------
    FileExistsError
        ``path`` is a directory that is not empty, and ``replace`` is false.
    NotADirectoryError
        ``path`` is a file.
    """
    path = os.path.abspath(os.fspath(path))
    parent, name = os.path.split(path)
    if os.path.lexists(path) and not os.path.isdir(path):
        raise NotADirectoryError(f"{path!r} is a file; expected a directory (or a new name)")
    make_dir(parent)
    remove_stale_staging(path)
    occupied = os.path.isdir(path) and bool(os.listdir(path))
    if occupied and not replace:
        raise FileExistsError(f"{path!r} is not empty; refusing to replace it")
    prefix = f".{name}.new-{os.getpid()}-"
    try:
        stage = tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=parent)
    except OSError as e:
        raise type(e)(f"cannot write {path!r} in {parent!r}: {e.strerror}") from None
    aside = None
    try:
        os.chmod(stage, 0o777 & ~_umask())  # mkdtemp makes 0700; give the usual mode
        yield stage
        _fsync_tree(stage)  # every byte on disk before the rename makes it visible
        if occupied:
            aside = tempfile.mkdtemp(prefix=f".{name}.old-{os.getpid()}-", suffix=".tmp",
                                     dir=parent)  # fmt: skip
            os.replace(path, aside)  # a directory onto an empty one: allowed
        os.replace(stage, path)
        _fsync_dir(parent)
    except BaseException:
        if aside is not None and not os.path.lexists(path):
            os.replace(aside, path)  # the new one never arrived: the old one back
        for tmp in (stage, aside):  # what is still a temporary (stage may be path by now)
            if tmp is not None and os.path.lexists(tmp):
                shutil.rmtree(tmp, ignore_errors=True)
        raise
    if aside is not None:
        shutil.rmtree(aside)  # the old one, once the new one is durable in its place


def _umask() -> int:
    umask = os.umask(0)  # read the umask: it can only be read by setting it
    os.umask(umask)
    return umask
