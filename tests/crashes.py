"""Simulated crashes for the durability tests of files written as a whole."""

import os
import shutil
import signal


def fail_rename_at(monkeypatch, k: int, what: str = "simulated failure") -> None:
    """Make the ``k``-th ``os.replace`` from now raise ``OSError("<what> at rename k")``;
    the others rename as usual."""
    real_replace, calls = os.replace, []

    def replace(src, dst):
        calls.append(src)
        if len(calls) == k:
            raise OSError(f"{what} at rename {k}")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)


def killed_at(step: int, fn) -> bool:
    """Run ``fn`` in a forked child that SIGKILLs itself at its ``step``-th call of
    os.fsync, os.replace or shutil.rmtree (before the call). True if it was killed."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            n = [0]

            def hook(real):
                def call(*a, **k):
                    n[0] += 1
                    if n[0] == step:
                        os.kill(os.getpid(), signal.SIGKILL)
                    return real(*a, **k)

                return call

            os.fsync, os.replace = hook(os.fsync), hook(os.replace)
            shutil.rmtree = hook(shutil.rmtree)
            fn()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) or os.WEXITSTATUS(status) == 0, status
    return os.WIFSIGNALED(status)


def synced_at_each_checkpoint(monkeypatch, files) -> list[bool]:
    """Watch every checkpoint the training loop saves: whether each of ``files(path)`` (the
    files that must be durable before the checkpoint at ``path``) had been fsynced at its
    current size. Returns the list the saves fill, one bool per save."""
    import resgrad.train.loop as loop

    synced = {}  # inode -> file size at its last fsync
    real_fsync, real_save = os.fsync, loop.save_checkpoint

    def fsync(fd):
        st = os.fstat(fd)
        synced[st.st_ino] = st.st_size
        return real_fsync(fd)

    checks = []

    def save(path, *a, **kw):
        sts = [os.stat(f) for f in files(path)]
        checks.append(bool(sts) and all(synced.get(st.st_ino) == st.st_size for st in sts))
        return real_save(path, *a, **kw)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(loop, "save_checkpoint", save)
    return checks
