"""Every command that writes a file says so, in the same words everywhere: ``wrote FILE`` or
``wrote DIR: a, b, c`` (what the directory holds), then an optional ``(detail)``.

The commands are found from the parser (every one with ``--plot``, ``--out``, ``--out-dir``,
``--export`` or ``--format``), so that a new command cannot be left out; each is run for real
in an empty directory, and what appeared on disk is compared with what it said it wrote. With
``--format json`` or ``csv`` the line goes to stderr and stdout stays one document.
"""

import argparse
import json
import os
import re

import pytest

from resgrad.cli import build_parser, main

WRITING_FLAGS = ("--plot", "--out", "--out-dir", "--export", "--format")
TINY = ["--n-layer", "2", "--n-head", "2", "--n-embd", "16", "--block-size", "8",
        "--batch-size", "4", "--max-iters", "4", "--eval-interval", "2",
        "--eval-iters", "1"]  # fmt: skip
FLOW = ["--depth", "2", "--width", "8", "--heads", "2", "--seq", "4", "--batch", "1"]
SWEEP = ["--variants", "pre-ln", "--depths", "2", "--widths", "8", "--heads", "2", "--seq", "4",
         "--batch", "1", "--seeds", "1", "--jobs", "1"]  # fmt: skip
GRID = ["--variants", "pre-ln", "--depths", "1", "--lrs", "0.001", "--warmups", "0", "--seeds",
        "1", "--n-embd", "16", "--n-head", "2", "--block-size", "8", "--batch-size", "4",
        "--max-iters", "2", "--eval-interval", "2", "--eval-iters", "1", "--jobs", "1"]  # fmt: skip

# each command, run in an empty directory holding {data} and a trained {run}; what it writes
RUNS = {
    "depth": [["depth", "--depths", "2,3", "--plot", "d.png"],
              ["depth", "--depths", "2,3", "--format", "json", "--plot", "d.png"],
              ["depth", "--depths", "2,3", "--per-layer", "--format", "csv", "--plot", "d.svg"]],
    "flow": [["flow", *FLOW, "--plot", "f.png"],
             ["flow", *FLOW, "--format", "json", "--plot", "f.png"]],
    "sweep": [["sweep", "--out", "s.csv", *SWEEP, "--plot", "s.png"]],
    "paths": [["paths", "lesson", "--depth", "4", "--plot", "p.png"],
              ["paths", "lesson", "--depth", "4", "--format", "json", "--plot", "p.png"]],
    "lesion": [["lesion", "lesson", "--depth", "5", "--samples", "2", "--plot", "l.png"],
               ["lesion", "lesson", "--depth", "5", "--samples", "2", "--format", "csv",
                "--plot", "l.png"]],
    "train": [["train", *TINY, "--data", "{data}", "--out-dir", "t"]],
    "sample": [["sample", "--out-dir", "{run}", "--num-tokens", "3", "--start", "the"]],
    "depth-train": [["depth-train", *TINY, "--data", "{data}", "--out-dir", "dt"]],
    "export": [["export", "--checkpoint", "{run}", "--out-dir", "hf"]],
    "dynamics": [["dynamics", "{run}"], ["dynamics", "{run}", "--out", "dyn.svg"],
                 ["dynamics", "{run}", "--export", "tensorboard", "tb"]],
    "compare": [["compare", "{run}", "{run2}", "--out", "c.png"]],
    "experiment": [["experiment", "warmup", *GRID, "--data", "{data}", "--out-dir", "ex"]],
}  # fmt: skip

LINE = re.compile(r"wrote (?P<path>[^:(]+?)(?:: (?P<files>[^(]+?))?(?: \((?P<detail>.+)\))?")


def _leaves(p: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """``p``, or its subcommands' parsers (``experiment``'s NAMEs), all the way down."""
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    return [q for s in subs for c in s.choices.values() for q in _leaves(c)] if subs else [p]


def _writing_commands() -> set[str]:
    """Every command of which some form (``experiment NAME``) takes a writing flag."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name for name, p in sub.choices.items()
            if any(o in WRITING_FLAGS for q in _leaves(p) for a in q._actions
                   for o in a.option_strings)}  # fmt: skip


def _tree(root) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root)
            for d, dirs, files in os.walk(root) for f in files + dirs}  # fmt: skip


def _snapshot(d) -> set[str]:
    """Every path under ``d``, the trained run's files (reached through a link) included."""
    return _tree(d) | {os.path.join("run", p) for p in _tree(os.path.realpath(d / "run"))}


def test_every_writing_command_is_run_here():
    assert _writing_commands() == set(RUNS)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A directory with a text and two short trained runs, as a user would have them."""
    d = tmp_path_factory.mktemp("work")
    (d / "data.txt").write_text("the quick brown fox jumps over the lazy dog. " * 40)
    for name in ("run", "run2"):
        assert main(["train", *TINY, "--data", str(d / "data.txt"), "--out-dir",
                     str(d / name)]) == 0  # fmt: skip
    return d


def _under(path: str, top: str) -> bool:
    return os.path.normpath(path).startswith(os.path.normpath(top) + os.sep)


def _said(text: str) -> list[re.Match]:
    return [LINE.fullmatch(line) for line in text.splitlines() if line.startswith("wrote ")]


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_command_names_every_file_it_wrote_in_the_same_words(
    name, workdir, tmp_path, monkeypatch, capsys
):
    for f in ("data.txt", "run", "run2"):
        os.symlink(workdir / f, tmp_path / f)
    monkeypatch.chdir(tmp_path)
    fill = {"data": "data.txt", "run": "run", "run2": "run2"}
    for argv in RUNS[name]:
        argv = [a.format(**fill) for a in argv]
        before = _snapshot(tmp_path)
        capsys.readouterr()
        assert main(argv) == 0, argv
        out, err = capsys.readouterr()
        machine = "--format" in argv and argv[argv.index("--format") + 1] in ("json", "csv")
        if machine:  # stdout is the document alone; the line is on stderr
            assert "wrote " not in out, out
            if "json" in argv:
                json.loads(out)
        said = _said(err if machine else out)
        assert all(said), (argv, out, err)  # every ``wrote`` line has the one shape
        new = {p for p in _snapshot(tmp_path) - before  # a lock beside a file is not news
               if not os.path.basename(p).startswith(".")}  # fmt: skip
        named = {m["path"] for m in said}
        for m in said:  # what it said is there, a directory listed as it stands
            assert os.path.exists(m["path"]), (argv, m[0])
            if os.path.isdir(m["path"]):
                shown = sorted(f for f in os.listdir(m["path"]) if not f.startswith("."))
                assert m["files"] == ", ".join(shown), (argv, m[0])  # a lock file is not news
            else:
                assert m["files"] is None, (argv, m[0])
        for p in new:  # nothing appeared that it did not name (or hold what it named)
            assert any(p == n or _under(p, n) or _under(n, p) for n in named), (argv, p)
        if name == "sample":
            assert said == [] and new == set()  # it reads a run; it writes nothing
        else:
            assert said, (argv, out, err)


def test_wrote_names_a_file_a_directory_sorted_without_hidden_files_and_the_detail(
    tmp_path, capsys, monkeypatch
):
    from resgrad.cli import _common

    f = tmp_path / "f.png"
    f.write_bytes(b"x")
    d = tmp_path / "d"
    d.mkdir()
    for n in ("b.csv", ".d.lock", "a.json", "c"):
        (d / n).write_text("")
    listdir = os.listdir  # listed backwards and hidden file last: sorted() must undo it
    monkeypatch.setattr(os, "listdir", lambda p: sorted(listdir(p), reverse=True))
    capsys.readouterr()
    _common.wrote(f)
    _common.wrote(d, "4 files")
    _common.wrote(f, fmt="table")
    _common.wrote(f, "1 row", fmt="json")
    _common.wrote(d, fmt="csv")
    out, err = capsys.readouterr()
    monkeypatch.undo()
    assert out.splitlines() == [
        f"wrote {f}",
        f"wrote {d}: a.json, b.csv, c (4 files)",
        f"wrote {f}",
    ]
    assert err.splitlines() == [f"wrote {f} (1 row)", f"wrote {d}: a.json, b.csv, c"]
    for line in out.splitlines() + err.splitlines():  # the shape the commands' test reads
        assert LINE.fullmatch(line), line
