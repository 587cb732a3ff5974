import os

import pytest

from resgrad.formats.atomic import atomic_write, atomic_write_bytes, atomic_write_text
from tests.crashes import fail_rename_at, killed_at


def test_text_and_bytes_round_trip(tmp_path):
    p = tmp_path / "a.txt"
    atomic_write_text(p, "héllo\n")
    assert p.read_text(encoding="utf-8") == "héllo\n"
    atomic_write_bytes(p, b"\x00\x01")
    assert p.read_bytes() == b"\x00\x01"
    assert os.listdir(tmp_path) == ["a.txt"]  # no temporary file left


def test_a_failing_write_leaves_the_old_file_and_no_temp(tmp_path):
    p = tmp_path / "a.bin"
    atomic_write_bytes(p, b"old")

    def boom(f):
        f.write(b"half of the new")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        atomic_write(p, boom)
    assert p.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["a.bin"]


def test_missing_directory_is_a_clear_oserror(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        atomic_write_text(tmp_path / "nope" / "a.txt", "x")


def test_wrong_types_are_rejected(tmp_path):
    with pytest.raises(TypeError, match="bytes"):
        atomic_write_bytes(tmp_path / "a", "text")
    with pytest.raises(TypeError, match="str"):
        atomic_write_text(tmp_path / "a", b"bytes")


def test_written_files_get_the_usual_mode_not_mkstemps_0600(tmp_path):
    import os

    from resgrad.formats.atomic import atomic_write_text

    old = os.umask(0o022)
    try:
        p = tmp_path / "new.txt"
        atomic_write_text(p, "a")
        assert p.stat().st_mode & 0o777 == 0o644
        os.chmod(p, 0o600)  # an existing file keeps its own mode
        atomic_write_text(p, "b")
        assert p.stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(old)


def test_stale_temporaries_of_a_killed_write_are_removed_and_nothing_else(tmp_path):
    from resgrad.formats.atomic import remove_stale_temporaries

    stale = [tmp_path / ".last.ckpt.abc123xy.tmp", tmp_path / ".metrics.jsonl.q1w2e3r4.tmp"]
    keep = [tmp_path / "last.ckpt", tmp_path / ".other.ckpt.abc123xy.tmp", tmp_path / "x.tmp"]
    for p in stale + keep:
        p.write_bytes(b"x")
    removed = remove_stale_temporaries(tmp_path, ["last.ckpt", "metrics.jsonl", "best.ckpt"])
    assert sorted(removed) == sorted(str(p) for p in stale)
    assert all(p.exists() for p in keep) and not any(p.exists() for p in stale)
    # the names are what atomic_write's own temporaries are called
    seen = []
    atomic_write(tmp_path / "last.ckpt", lambda f: seen.extend(os.listdir(tmp_path)))
    assert any(n.startswith(".last.ckpt.") and n.endswith(".tmp") for n in seen)


def test_a_destination_that_cannot_be_written_is_named_not_its_temporary(tmp_path):
    (tmp_path / "d.png").mkdir()
    with pytest.raises(IsADirectoryError, match=r"cannot write '.*d\.png': it is a directory"):
        atomic_write_bytes(tmp_path / "d.png", b"x")
    with pytest.raises(OSError, match=r"cannot write '/proc/x\.png' in '/proc'") as e:
        atomic_write_bytes("/proc/x.png", b"x")  # /proc takes no new files
    assert ".tmp" not in str(e.value)


# --------------------------------------------------------------------------- durability


def _fd_path(fd):
    return os.readlink(f"/proc/self/fd/{fd}")


def _record_calls(monkeypatch):
    """Log every fsync (by the path of its descriptor) and every os.replace, in order."""
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", _fd_path(fd)))
        real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", os.fspath(src), os.fspath(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


def test_atomic_write_fsyncs_the_file_before_the_rename_and_the_directory_after(
    tmp_path, monkeypatch
):
    events = _record_calls(monkeypatch)
    atomic_write_bytes(tmp_path / "a.bin", b"new")
    (rename,) = [e for e in events if e[0] == "replace"]
    tmp, dst = rename[1], rename[2]
    assert dst == str(tmp_path / "a.bin") and os.path.basename(tmp).startswith(".a.bin.")
    i = events.index(rename)
    assert ("fsync", tmp) in events[:i]  # the bytes are on disk before they get the name
    assert ("fsync", str(tmp_path)) in events[i + 1 :]  # and the name is, after
    assert (tmp_path / "a.bin").read_bytes() == b"new"


def test_staged_dir_writes_a_directory_as_a_whole(tmp_path):
    from resgrad.formats.atomic import staged_dir

    d = tmp_path / "parent" / "model"  # the parent is made too
    old = os.umask(0o022)
    try:
        with staged_dir(d) as stage:
            assert os.path.dirname(stage) == str(d.parent) and not d.exists()
            with open(os.path.join(stage, "a.json"), "w") as f:
                f.write("{}")
            os.mkdir(os.path.join(stage, "sub"))
            with open(os.path.join(stage, "sub", "b.bin"), "wb") as f:
                f.write(b"b")
    finally:
        os.umask(old)
    assert (d / "a.json").read_text() == "{}" and (d / "sub" / "b.bin").read_bytes() == b"b"
    assert os.listdir(d.parent) == ["model"]  # no temporary left
    assert d.stat().st_mode & 0o777 == 0o755  # the usual mode, not mkdtemp's 0700


def test_staged_dir_fsyncs_everything_before_the_one_rename(tmp_path, monkeypatch):
    from resgrad.formats.atomic import staged_dir

    d = tmp_path / "model"
    events = _record_calls(monkeypatch)
    with staged_dir(d) as stage:
        for name in ("a.json", "b.bin"):
            with open(os.path.join(stage, name), "wb") as f:
                f.write(name.encode())
    (rename,) = [e for e in events if e[0] == "replace"]
    assert rename == ("replace", stage, str(d))
    i = events.index(rename)
    before, after = events[:i], events[i + 1 :]
    for name in ("a.json", "b.bin"):
        assert ("fsync", os.path.join(stage, name)) in before, events
    assert ("fsync", stage) in before, events  # its entries
    assert ("fsync", str(tmp_path)) in after, events  # the rename itself


def test_staged_dir_refuses_a_non_empty_directory_unless_replacing(tmp_path):
    from resgrad.formats.atomic import staged_dir

    d = tmp_path / "model"
    d.mkdir()
    with staged_dir(d) as stage:  # an empty one is taken
        open(os.path.join(stage, "v1"), "w").close()
    with pytest.raises(FileExistsError, match="is not empty"), staged_dir(d):
        pytest.fail("entered")
    with staged_dir(d, replace=True) as stage:
        open(os.path.join(stage, "v2"), "w").close()
    assert os.listdir(d) == ["v2"] and os.listdir(tmp_path) == ["model"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file"), staged_dir(tmp_path / "file"):
        pytest.fail("entered")


def _fill(stage, version):
    for name in ("config.json", "weights.bin", "tokenizer.json"):
        with open(os.path.join(stage, name), "w") as f:
            f.write(f"{name} {version}")


def _version(d):
    """'old' or 'new' if every file of ``d`` is of that version; anything else fails."""
    contents = {n: (d / n).read_text() for n in sorted(os.listdir(d))}
    versions = {v.split()[-1] for v in contents.values()}
    assert len(contents) == 3 and len(versions) == 1, contents  # never a mix
    return versions.pop()


def test_a_failure_at_each_rename_leaves_the_old_directory_and_no_temporary(tmp_path, monkeypatch):
    from resgrad.formats.atomic import staged_dir

    d = tmp_path / "model"
    with staged_dir(d) as stage:
        _fill(stage, "old")
    k = 0
    while True:
        k += 1
        fail_rename_at(monkeypatch, k)
        try:
            with staged_dir(d, replace=True) as stage:
                _fill(stage, "new")
        except OSError as e:
            assert f"rename {k}" in str(e)
            assert _version(d) == "old", k
            assert os.listdir(tmp_path) == ["model"], (k, os.listdir(tmp_path))
            continue
        break
    assert k == 3  # the old aside, the new in place; both failures seen, then it went through
    assert _version(d) == "new" and os.listdir(tmp_path) == ["model"]


def test_a_failing_body_leaves_the_old_directory_and_no_temporary(tmp_path):
    from resgrad.formats.atomic import staged_dir

    d = tmp_path / "model"
    with staged_dir(d) as stage:
        _fill(stage, "old")
    with pytest.raises(RuntimeError, match="half"), staged_dir(d, replace=True) as stage:
        _fill(stage, "new")
        raise RuntimeError("killed half-way")
    assert _version(d) == "old" and os.listdir(tmp_path) == ["model"]


def test_a_kill_at_any_step_leaves_the_old_or_the_new_directory(tmp_path):
    """SIGKILL at every fsync, rename and removal of a replacing staged_dir: the directory
    is the old one or the new one; killed between the two renames, the old one is aside,
    complete, and put back. The next write removes every temporary the kill left."""
    from resgrad.formats.atomic import remove_stale_staging, staged_dir

    d = tmp_path / "model"
    seen = set()
    step = 0
    while True:
        step += 1
        with staged_dir(d, replace=True) as stage:  # also cleans up the previous kill
            _fill(stage, "old")
        assert os.listdir(tmp_path) == ["model"], os.listdir(tmp_path)

        def write_new():
            with staged_dir(d, replace=True) as stage:
                _fill(stage, "new")

        killed = killed_at(step, write_new)
        if not d.exists():  # between the renames
            seen.add("missing")
            assert remove_stale_staging(d) and _version(d) == "old"
        seen.add(_version(d))
        if not killed:
            break
    assert step > 6 and seen == {"old", "new", "missing"}, (step, seen)
    assert _version(d) == "new" and os.listdir(tmp_path) == ["model"]


def test_only_a_dead_processs_temporaries_are_removed(tmp_path):
    import subprocess
    import sys

    from resgrad.formats.atomic import remove_stale_staging, staged_dir

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    pid = int(dead.stdout)
    stale = [f".model.new-{pid}-a1b2c3.tmp", f".model.old-{pid}-d4e5f6.tmp"]
    live = [f".model.new-{os.getpid()}-a1b2c3.tmp", f".other.new-{pid}-a1b2c3.tmp",
            f"model.new-{pid}-a1b2c3.tmp"]  # fmt: skip
    with staged_dir(tmp_path / "model") as stage:
        _fill(stage, "old")
    for n in stale + live:
        (tmp_path / n).mkdir()
        (tmp_path / n / "f").write_text(n)
    with staged_dir(tmp_path / "model", replace=True) as stage:
        _fill(stage, "new")
    assert sorted(os.listdir(tmp_path)) == sorted(["model", *live])
    assert _version(tmp_path / "model") == "new"  # the old one aside was not put back
    assert remove_stale_staging(tmp_path / "model") == []


# --------------------------------------------------------------------------- destinations


def test_check_destination_refuses_each_case_in_its_own_line_naming_the_path(tmp_path):
    from resgrad.formats.atomic import check_destination

    (tmp_path / "file.txt").write_text("keep me")
    (tmp_path / "d.png").mkdir()
    cases = [
        (tmp_path / "nodir" / "x.png", FileNotFoundError,
         f"directory '{tmp_path}/nodir' does not exist"),
        (tmp_path / "file.txt" / "x.png", NotADirectoryError,
         f"'{tmp_path}/file.txt' is a file, not a directory"),
        (tmp_path / "file.txt" / "sub" / "x.png", NotADirectoryError,
         f"'{tmp_path}/file.txt' is a file, not a directory"),
        (tmp_path / "d.png", IsADirectoryError, "it is a directory; give a file name"),
        ("/proc/x.png", PermissionError, "directory '/proc' is not writable"),
    ]  # fmt: skip
    for path, error, message in cases:
        with pytest.raises(error) as e:
            check_destination(path)
        msg = str(e.value)
        assert msg.startswith(f"cannot write '{path}': ") and message in msg, msg
        assert "\n" not in msg and ".tmp" not in msg
    check_destination(tmp_path / "ok.png")  # writable: nothing raised, nothing left behind
    assert sorted(os.listdir(tmp_path)) == ["d.png", "file.txt"]
    assert (tmp_path / "file.txt").read_text() == "keep me"


def test_a_path_under_a_file_is_not_called_a_missing_directory(tmp_path):
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(NotADirectoryError, match=r"file\.txt' is a file, not a directory"):
        atomic_write_bytes(tmp_path / "file.txt" / "x.png", b"png")
    with pytest.raises(FileNotFoundError, match=r"directory '.*nodir' does not exist"):
        atomic_write_bytes(tmp_path / "nodir" / "x.png", b"png")


def _dead_pid():
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                       capture_output=True, text=True, check=True)  # fmt: skip
    return int(p.stdout)


def test_temporaries_carry_their_writers_pid(tmp_path):
    seen = []
    atomic_write(tmp_path / "old.png", lambda f: seen.extend(os.listdir(tmp_path)))
    (name,) = seen
    assert name.startswith(f".old.png.{os.getpid()}-") and name.endswith(".tmp"), name


def test_a_killed_writes_temporary_is_removed_by_the_next_write_and_nothing_else(tmp_path):
    from resgrad.formats.atomic import remove_dead_temporaries

    dst = tmp_path / "old.png"
    assert killed_at(1, lambda: atomic_write_bytes(dst, b"half"))  # killed at the file's fsync
    (left,) = os.listdir(tmp_path)  # the killed write's temporary, named with its dead pid
    assert left.startswith(".old.png.") and left.endswith(".tmp")
    dead = _dead_pid()
    keep = [
        f".old.png.{os.getpid()}-abcd1234.tmp",  # a live writer's (this process)
        f".other.png.{dead}-abcd1234.tmp",  # another destination's
        f".old.png.5.png.{dead}-abcd1234.tmp",  # the destination "old.png.5.png"'s
        ".old.png.abcd1234.tmp",  # no pid in the name: whose it is cannot be told
        f"old.png.{dead}-abcd1234.tmp",  # not hidden: not a name this module gives
        f".old.png.{dead}-abcd1234.tmp.bak",
        f".old.png.{10**30}-abcd1234.tmp",  # no pid at all
    ]
    stale = [f".old.png.{dead}-q1w2e3r4.tmp"]
    for n in keep + stale:
        (tmp_path / n).write_bytes(b"x")
    atomic_write_bytes(dst, b"new")
    assert dst.read_bytes() == b"new"
    assert sorted(os.listdir(tmp_path)) == sorted(["old.png", *keep])
    assert remove_dead_temporaries(dst) == []  # nothing more of this destination's
    (tmp_path / stale[0]).write_bytes(b"x")
    assert remove_dead_temporaries(dst) == [str(tmp_path / stale[0])]
