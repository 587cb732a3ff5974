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
