"""formats.events, what is read back from an event file is what was written: records of
every length read back whatever the top bit of their CRCs, a length past 2^63 is damage, a
record with damaged data is skipped by its length (a record framed inside it is not read),
a stray byte before a record loses only itself; every file of a directory is salvaged,
the damage counted in words that agree with the count; a new file starts with the file
version at its given time, is named by the pid and a sequence number counting the files
opened, an export written again replaces its old bytes, its mode is a plain file's, and it
is closed once. A length or CRC read signed, a scan that starts a byte late, a file name
shared, a descriptor closed twice are the bugs mutmut plants here
(scripts/mutmut/run.py)."""

import os
import re
import struct

from resgrad.formats import events
from resgrad.formats.events import (
    EventFile,
    event_files,
    frame,
    masked_crc,
    read_events,
    read_frames,
    salvage_events,
)
from tests.formats.test_events import _scalar_event


def _file(tmp_path, data, name="events.out.tfevents.0000000001.h"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_records_of_every_length_are_read_back_whatever_their_crcs(tmp_path):
    records = [bytes(range(n)) for n in range(64)]  # CRCs with the top bit set and not
    assert {masked_crc(struct.pack("<Q", len(r))) >> 31 for r in records} == {0, 1}
    found = read_frames(_file(tmp_path, b"".join(frame(r) for r in records)))
    assert [f[12:-4] for f in found.frames] == records
    assert (found.torn, found.damaged) == (0, [])


def test_a_length_past_2_to_the_63_is_damage_not_a_record(tmp_path):
    head = struct.pack("<Q", 2**63 + 5)  # its CRC right: only the length is impossible
    bogus = head + struct.pack("<I", masked_crc(head)) + b"\x00" * 8
    found = read_frames(_file(tmp_path, frame(b"a") + bogus + frame(b"b")))
    assert [f[12:-4] for f in found.frames] == [b"a", b"b"]
    assert found.damaged == [(len(frame(b"a")), len(bogus))]


def test_a_record_with_damaged_data_is_skipped_by_its_length_not_read_inside(tmp_path):
    inner = frame(b"not a record of this file")
    outer = bytearray(frame(b"xy" + inner))
    outer[-1] ^= 0x01  # the outer data's CRC: its length stays sound
    found = read_frames(_file(tmp_path, frame(b"a") + bytes(outer) + frame(b"b")))
    assert [f[12:-4] for f in found.frames] == [b"a", b"b"]
    assert found.damaged == [(len(frame(b"a")), len(outer))]


def test_a_stray_byte_before_a_record_loses_only_itself(tmp_path):
    found = read_frames(_file(tmp_path, b"\x07" + frame(b"a") + frame(b"b")))
    assert [f[12:-4] for f in found.frames] == [b"a", b"b"]
    assert (found.damaged, found.torn) == ([(0, 1)], 0)


def test_every_file_is_salvaged_and_the_damage_is_counted_in_agreeing_words(tmp_path):
    d = tmp_path / "tb"
    d.mkdir()
    one = frame(_scalar_event(1, 0.5).SerializeToString())
    two = frame(_scalar_event(2, 0.5).SerializeToString())
    _file(d, one + b"\x07" + two, "events.out.tfevents.0000000001.a")
    _file(d, b"\x07" + one + b"\x07" + two + frame(b"\xff"), "events.out.tfevents.0000000002.b")
    _file(d, one + frame(b"\xff") + frame(b"\xff\xff"), "events.out.tfevents.0000000003.c")
    got, damage = salvage_events(d)
    assert [e.step for e in got] == [1, 2, 1, 2, 1]  # every file's, in name order
    assert [e.step for e in read_events(d)] == [1, 2, 1, 2, 1]
    assert damage == [
        "events.out.tfevents.0000000001.a: 1 damaged span (1 bytes) skipped",
        "events.out.tfevents.0000000002.b: 2 damaged spans (2 bytes) skipped, 1 record that is "
        "no event skipped",
        "events.out.tfevents.0000000003.c: 2 records that are no event skipped",
    ]


def test_the_first_record_is_the_file_version_at_the_files_time(tmp_path):
    with EventFile(tmp_path / "tb", wall_time=1234.5) as f:
        f.write(_scalar_event(3, 0.5))
    first = [e for e in read_events(tmp_path / "tb")][0]
    assert (first.file_version, first.wall_time, first.step) == ("brain.Event:2", 1234.5, 0)


def test_an_export_written_again_holds_only_its_new_events(tmp_path):
    for steps in ([1, 2, 3, 4], [7]):
        with EventFile(tmp_path / "tb", wall_time=99.0) as f:
            for s in steps:
                f.write(_scalar_event(s, 0.5))
    assert [e.step for e in read_events(tmp_path / "tb") if not e.file_version] == [7]
    assert read_frames(event_files(tmp_path / "tb")[0]).torn == 0


def test_a_live_file_names_its_process_and_counts_the_files_it_opened(tmp_path, monkeypatch):
    # two writers that list the directory before either has made its file (threads, say):
    # the same second, the same host and pid; the sequence number keeps them apart
    monkeypatch.setattr(events, "event_files", lambda d: [])
    monkeypatch.setattr(events.time, "time", lambda: 1000.25)
    a, b = EventFile(tmp_path / "tb"), EventFile(tmp_path / "tb")
    a.write(_scalar_event(1, 0.5))
    b.write(_scalar_event(2, 0.5))
    a.close()
    b.close()
    monkeypatch.undo()
    pattern = re.compile(r"events\.out\.tfevents\.0000001000\.(.+)\.(\d{10})\.(\d{6})")
    (host, pid, sa), (_, _, sb) = (pattern.fullmatch(os.path.basename(f.path)).groups()
                                   for f in (a, b))  # fmt: skip
    assert int(pid) == os.getpid() and int(sb) == int(sa) + 1 and host
    assert sorted(e.step for e in read_events(tmp_path / "tb") if not e.file_version) == [1, 2]


def test_a_new_file_is_named_as_near_its_time_as_the_order_allows(tmp_path, monkeypatch):
    d = tmp_path / "tb"
    d.mkdir()
    for name in (
        "events.out.tfevents.0000005000.h.1.1",
        "events.out.tfevents",
        "events.out.tfevents.x1.h",
        "events.out.tfevents.0000000100.tfevents.0009999999",
    ):
        (d / name).write_bytes(b"")  # fmt: skip
    monkeypatch.setattr(events.time, "time", lambda: 4000.5)
    with EventFile(d) as f:
        assert os.path.basename(f.path).startswith("events.out.tfevents.0000005001.")
    monkeypatch.setattr(events.time, "time", lambda: 6000.5)
    with EventFile(d) as f:
        assert os.path.basename(f.path).startswith("events.out.tfevents.0000006000.")


def test_an_event_file_has_a_plain_files_mode(tmp_path):
    umask = os.umask(0o022)
    try:
        with EventFile(tmp_path / "tb") as f:
            pass
    finally:
        os.umask(umask)
    assert os.stat(f.path).st_mode & 0o777 == 0o644  # 0o666 less the umask: not executable


def test_the_file_is_closed_once_whatever_its_descriptor(tmp_path, monkeypatch):
    try:
        saved = os.dup(0)
        os.close(0)  # a daemon's stdin, closed: the file gets descriptor 0
    except OSError:  # closed already
        saved = None
    try:
        f = EventFile(tmp_path / "tb")
        assert f._fd == 0
        f.close()
        try:
            os.fstat(0)
            still_open = True
        except OSError:
            still_open = False
        assert not still_open
    finally:
        if saved is not None:
            os.dup2(saved, 0)
            os.close(saved)
    calls = []
    monkeypatch.setattr(os, "close", lambda fd: calls.append(("close", fd)))
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(("fsync", fd)))
    f.close()  # again, and on leaving a with block: nothing more
    f.__exit__(None, None, None)
    assert calls == []
