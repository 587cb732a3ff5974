import os

import pytest

from resgrad.formats.atomic import atomic_write, atomic_write_bytes, atomic_write_text


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
