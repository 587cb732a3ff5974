"""Directories listed in another order than the file system's: a test of an output that
must not depend on it (os.listdir and os.scandir, and glob through them, list backwards)."""

import os


class _Listing:
    """What os.scandir returns: an iterator that is also a context manager."""

    def __init__(self, entries):
        self._it = iter(entries)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._it)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def close(self):
        return None


def list_backwards(monkeypatch):
    """Make os.listdir and os.scandir (and so glob) list every directory backwards."""
    real_listdir, real_scandir = os.listdir, os.scandir

    def scandir(*args):
        with real_scandir(*args) as it:
            return _Listing(list(it)[::-1])

    monkeypatch.setattr(os, "listdir", lambda *a: real_listdir(*a)[::-1])
    monkeypatch.setattr(os, "scandir", scandir)
