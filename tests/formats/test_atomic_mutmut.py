"""formats.atomic against the class of bug each mutant stands for: a directory written whole
synced deepest first (every file before its directory, every directory before its parent,
all before the rename); asking whether a temporary's writer lives without signalling it;
a probe of a destination named as every temporary is, so that a kill leaves one the next
cleanup finds; a cleanup that another cleaner races, or that meets what it cannot remove,
does not fail the write that called it, and says what it removed; a refusal that names the
path and the type given (scripts/mutmut/run.py)."""

import os
import subprocess
import sys

import pytest

from resgrad.formats.atomic import (
    atomic_write_bytes,
    atomic_write_text,
    check_destination,
    make_dir,
    remove_dead_temporaries,
    remove_stale_staging,
    remove_stale_temporaries,
    staged_dir,
)
from tests.formats.test_atomic import _record_calls as _fsyncs


def _dead_pid() -> int:
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                       capture_output=True, text=True, check=True)  # fmt: skip
    return int(p.stdout)


# -- a directory written whole: synced deepest first, all before the rename


def test_a_staged_tree_is_synced_deepest_first_and_before_its_rename(tmp_path, monkeypatch):
    events = _fsyncs(monkeypatch)
    with staged_dir(tmp_path / "model") as stage:
        for sub in ("", "a", "a/b", "c"):
            os.makedirs(os.path.join(stage, sub), exist_ok=True)
            with open(os.path.join(stage, sub, "f.bin"), "wb") as f:
                f.write(sub.encode())
    (rename,) = [e for e in events if e[0] == "replace"]
    synced = [e[1] for e in events[: events.index(rename)] if e[0] == "fsync"]
    tree = [os.path.join(stage, s).rstrip("/") for s in ("", "a", "a/b", "c")]
    files = [os.path.join(d, "f.bin") for d in tree]
    assert sorted(synced) == sorted(tree + files)  # everything, once, before the rename
    for d in tree:  # each directory after everything under it
        under = [i for i, p in enumerate(synced) if p.startswith(d + "/")]
        assert under and max(under) < synced.index(d), (d, synced)


# -- whether a temporary's writer lives


def test_asking_whether_a_writer_lives_does_not_signal_it(tmp_path):
    dst = tmp_path / "out.png"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = tmp_path / f".out.png.{child.pid}-abcd1234.tmp"
        live.write_bytes(b"half")
        assert remove_dead_temporaries(dst) == [] and live.exists()
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=0.5)  # still running: asked, not hung up on
    finally:
        child.kill()
        child.wait()
    assert remove_dead_temporaries(dst) == [str(live)]  # its writer gone now


# -- the probe of a destination


def test_a_probe_killed_before_its_cleanup_leaves_a_temporary_the_next_write_removes(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(os, "unlink", lambda p: None)  # killed between create and unlink
    check_destination(tmp_path / "plot.png")
    monkeypatch.undo()
    (left,) = os.listdir(tmp_path)
    assert left.startswith(f".plot.png.{os.getpid()}-") and left.endswith(".tmp"), left
    assert remove_stale_temporaries(tmp_path, ["plot.png"]) == [str(tmp_path / left)]


# -- cleaning up after a killed staged_dir


def test_a_stale_staging_another_cleaner_removes_first_does_not_fail_the_write(
    tmp_path, monkeypatch
):
    pid = _dead_pid()
    stale = tmp_path / f".model.new-{pid}-a1b2c3.tmp"
    stale.mkdir()
    (stale / "f").write_text("half")
    real_listdir = os.listdir

    def listdir(path):  # the other cleaner removes it just after this one listed it
        names = real_listdir(path)
        if stale.exists():
            (stale / "f").unlink()
            stale.rmdir()
        return names

    monkeypatch.setattr(os, "listdir", listdir)
    assert remove_stale_staging(tmp_path / "model") == [str(stale)]
    monkeypatch.undo()
    with staged_dir(tmp_path / "model") as stage:
        (tmp_path / stage / "a").write_text("a")
    assert sorted(os.listdir(tmp_path)) == ["model"]


def test_a_stale_staging_name_on_a_file_does_not_fail_the_write(tmp_path):
    pid = _dead_pid()
    odd = tmp_path / f".model.new-{pid}-a1b2c3.tmp"
    odd.write_text("not a directory")  # named as a staging, yet a file: left, not fatal
    with staged_dir(tmp_path / "model") as stage:
        (tmp_path / stage / "a").write_text("a")
    assert (tmp_path / "model" / "a").read_text() == "a"


def test_remove_stale_staging_returns_the_paths_it_removed_and_put_back(tmp_path):
    pid = _dead_pid()
    new, old = tmp_path / f".model.new-{pid}-a1.tmp", tmp_path / f".model.old-{pid}-b2.tmp"
    for d in (new, old):
        d.mkdir()
        (d / "f").write_text(d.name)
    # killed between the two renames of a replace: the old one is put back
    assert remove_stale_staging(tmp_path / "model") == [str(new), str(old)]
    assert sorted(os.listdir(tmp_path)) == ["model"]
    assert (tmp_path / "model" / "f").read_text() == old.name


# -- refusals that name what they refuse


@pytest.mark.parametrize("data, kind", [("text", "str"), (None, "NoneType"), ([1], "list")])
def test_bytes_refused_name_the_type_given(tmp_path, data, kind):
    with pytest.raises(TypeError, match=rf"^data must be bytes, got {kind}$"):
        atomic_write_bytes(tmp_path / "a", data)


@pytest.mark.parametrize("text, kind", [(b"bytes", "bytes"), (None, "NoneType"), (3, "int")])
def test_text_refused_names_the_type_given(tmp_path, text, kind):
    with pytest.raises(TypeError, match=rf"^text must be str, got {kind}$"):
        atomic_write_text(tmp_path / "a", text)
    assert os.listdir(tmp_path) == []


def test_make_dir_refuses_a_file_naming_it(tmp_path):
    f = tmp_path / "file.txt"
    f.write_text("keep")
    with pytest.raises(NotADirectoryError) as e:
        make_dir(f)
    assert str(e.value).startswith(f"{str(f)!r} is a file") and "\n" not in str(e.value)
    assert f.read_text() == "keep"


def test_make_dir_under_a_file_raises_the_os_s_error_naming_the_path(tmp_path):
    (tmp_path / "file.txt").write_text("keep")
    bad = tmp_path / "file.txt" / "sub" / "dir"
    with pytest.raises(NotADirectoryError) as e:  # the kind of error the OS gave
        make_dir(bad)
    assert str(e.value) == f"cannot create directory {str(bad)!r}: Not a directory"
    make_dir(tmp_path / "new" / "deep")  # and what can be made is made
    make_dir(tmp_path / "new" / "deep")  # twice: it exists
    assert (tmp_path / "new" / "deep").is_dir()
