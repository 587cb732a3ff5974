"""Every command that draws a ``--plot`` refuses a destination it could not write before any
work, in one line naming the path (one check: :func:`resgrad.plots.check_plot_path`), and
writes its plot even when the reader of its stdout has left (``| head``)."""

import io
import os
import sys

import pytest

from resgrad.cli import main

PNG = b"\x89PNG\r\n\x1a\n"

COMMANDS = {
    "paths": ["paths", "lesson", "--depth", "4"],
    "flow": ["flow", "--depth", "2", "--width", "8", "--heads", "2", "--seq", "4", "--batch", "1"],
    "depth": ["depth", "--depths", "2,3"],
    "lesion": ["lesion", "lesson", "--depth", "5", "--samples", "2"],
    "sweep": ["sweep", "--out", "{d}/out.csv", "--variants", "pre-ln", "--depths", "2",
              "--widths", "8", "--heads", "2", "--seq", "4", "--batch", "1", "--seeds", "1",
              "--jobs", "1"],
}  # fmt: skip


def _argv(name, d):
    return [a.format(d=d) for a in COMMANDS[name]]


@pytest.fixture
def no_work(monkeypatch):
    """Every command's work fails the test if it starts."""

    def boom(*a, **k):
        raise AssertionError("the work started before the plot's destination was checked")

    from resgrad.lab import flow, lesson
    from resgrad.lab.experiments import sweep
    from resgrad.lab.lesion import measure as lesionstudy
    from resgrad.lab.paths import chains as pathchains

    for mod, name in [(pathchains, "stack_chain"), (flow, "measure"), (flow, "lesson_plot_spec"),
                      (lesson, "depth_table"), (sweep, "run_grid"),
                      (lesionstudy, "lesson_study")]:  # fmt: skip
        monkeypatch.setattr(mod, name, boom)


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(
    "dest, message",
    [
        ("{d}/nodir/x.png", "cannot write '{d}/nodir/x.png': directory '{d}/nodir' does not exist"),
        ("{d}/file.txt/x.png", "cannot write '{d}/file.txt/x.png': '{d}/file.txt' is a file, not "
                               "a directory"),
        ("{d}/file.txt/sub/x.svg", "cannot write '{d}/file.txt/sub/x.svg': '{d}/file.txt' is a "
                                   "file, not a directory"),
        ("{d}/adir.png", "cannot write '{d}/adir.png': it is a directory; give a file name"),
        ("/proc/x.png", "cannot write '/proc/x.png': directory '/proc' is not writable"),
    ],
)  # fmt: skip
def test_a_plot_that_cannot_be_written_is_refused_before_any_work(
    tmp_path, capsys, no_work, command, dest, message
):
    (tmp_path / "file.txt").write_text("keep")
    (tmp_path / "adir.png").mkdir()
    assert main([*_argv(command, tmp_path), "--plot", dest.format(d=tmp_path)]) == 2
    io_ = capsys.readouterr()
    assert io_.out == "" and io_.err.count("\n") == 1 and "Traceback" not in io_.err, io_
    assert io_.err == f"resgrad {command}: error: {message.format(d=tmp_path)}\n"
    assert sorted(os.listdir(tmp_path)) == ["adir.png", "file.txt"]  # nothing written
    assert (tmp_path / "file.txt").read_text() == "keep"


class ClosedPipe(io.TextIOBase):
    """A stdout whose reader has left (``| head``): every write is a BrokenPipeError."""

    def write(self, s):
        raise BrokenPipeError(32, "Broken pipe")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_plot_is_written_when_the_reader_of_stdout_has_left(tmp_path, monkeypatch, command):
    out = tmp_path / "plot.png"
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main([*_argv(command, tmp_path), "--plot", str(out), "--threads", "1"]) == 0
    assert out.read_bytes()[:8] == PNG
