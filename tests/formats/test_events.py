"""TensorBoard event files: the framing proven against TensorBoard's own reader and a CRC-32C
written here from its definition; torn tails; damaged records skipped and the sound ones after
them kept; durability; an optional extra that is absent or fails to import."""

import os
import struct

import pytest

pytest.importorskip("tensorboardX")
pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_file_loader import (  # noqa: E402
    LegacyEventFileLoader,
)
from tensorboardX.proto.event_pb2 import Event  # noqa: E402
from tensorboardX.proto.summary_pb2 import Summary  # noqa: E402

from resgrad.formats import events  # noqa: E402
from resgrad.formats.events import (  # noqa: E402
    EventFile,
    event_files,
    frame,
    import_extra,
    masked_crc,
    read_events,
    read_frames,
    salvage_events,
)


def crc32c_by_definition(data: bytes) -> int:
    """CRC-32C (Castagnoli), bit by bit: reflected polynomial 0x82F63B78, init and xorout ~0."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_crc32c_check_value_and_tfrecord_mask():
    assert crc32c_by_definition(b"123456789") == 0xE3069283  # the standard check value
    for data in (b"", b"123456789", bytes(range(256)) * 3):
        c = crc32c_by_definition(data)
        want = ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
        assert masked_crc(data) == want


def _scalar_event(step, value, tag="loss"):
    return Event(wall_time=1.5, step=step,
                 summary=Summary(value=[Summary.Value(tag=tag, simple_value=value)]))  # fmt: skip


def _write(tmp_path, steps, name="run"):
    logdir = tmp_path / name
    with EventFile(logdir) as f:
        for s in steps:
            f.write(_scalar_event(s, s / 4))
    return str(logdir), f.path


def test_tensorboards_own_loader_reads_every_event_written(tmp_path):
    logdir, path = _write(tmp_path, range(5))
    got = list(LegacyEventFileLoader(path).Load())  # the protos as written
    assert got[0].file_version == "brain.Event:2"
    assert [(e.step, e.summary.value[0].simple_value) for e in got[1:]] == [
        (s, s / 4) for s in range(5)
    ]


def test_a_frame_is_length_crc_data_crc():
    data = b"resgrad"
    f = frame(data)
    assert f[:8] == struct.pack("<Q", 7) and f[12:19] == data
    assert struct.unpack("<I", f[8:12])[0] == masked_crc(f[:8])
    assert struct.unpack("<I", f[19:])[0] == masked_crc(data)


def test_every_torn_tail_is_left_out_and_counted(tmp_path):
    _, path = _write(tmp_path, range(3))
    whole = open(path, "rb").read()
    frames, torn, damaged = read_frames(path)
    assert len(frames) == 4 and torn == 0 and damaged == [] and b"".join(frames) == whole
    last = len(frames[-1])
    for cut in range(1, last):  # a kill at every byte of the last record
        with open(path, "wb") as f:
            f.write(whole[:-cut])
        frames, torn, damaged = read_frames(path)
        assert len(frames) == 3 and torn == last - cut and damaged == []


def _steps(path):
    return [e.step for e in read_events(os.path.dirname(path)) if not e.file_version]


@pytest.mark.parametrize("where", ["length", "length crc", "data", "data crc"])
def test_a_damaged_record_is_skipped_and_every_sound_one_after_it_kept(tmp_path, where):
    """A flipped byte in the third record (the event of step 1): that record alone is lost,
    the eight after it are read, and the damage is one span of exactly its bytes."""
    _, path = _write(tmp_path, range(10))
    whole = bytearray(open(path, "rb").read())
    frames = read_frames(path).frames
    start, size = sum(len(f) for f in frames[:2]), len(frames[2])
    at = {"length": start + 1, "length crc": start + 9, "data": start + 14,
          "data crc": start + size - 1}[where]  # fmt: skip
    whole[at] ^= 0x40
    open(path, "wb").write(bytes(whole))
    found = read_frames(path)
    assert found.frames == frames[:2] + frames[3:]
    assert found.damaged == [(start, size)] and found.torn == 0
    assert _steps(path) == [0, *range(2, 10)]


def test_a_first_record_claiming_2_to_the_62_bytes_loses_only_itself(tmp_path):
    """A length of 2**62 with its own CRC made right (no torn write makes one): the file's
    other records are all read, the bad one is the damage, nothing is torn."""
    _, path = _write(tmp_path, range(5))
    whole = open(path, "rb").read()
    frames = read_frames(path).frames
    head = struct.pack("<Q", 2**62)
    bad = head + struct.pack("<I", masked_crc(head)) + frames[0][12:]
    open(path, "wb").write(bad + b"".join(frames[1:]))
    found = read_frames(path)
    assert found.frames == frames[1:] and found.damaged == [(0, len(frames[0]))]
    assert found.torn == 0 and len(bad + b"".join(frames[1:])) == len(whole)
    assert _steps(path) == list(range(5))


def test_garbage_between_records_is_one_span_and_a_torn_tail_is_no_damage(tmp_path):
    _, path = _write(tmp_path, range(4))
    frames = read_frames(path).frames
    junk = bytes(range(256)) * 3  # no record: no sound CRCs anywhere in it
    torn = frame(_scalar_event(4, 1.0).SerializeToString())[:-6]
    open(path, "wb").write(b"".join(frames[:3]) + junk + b"".join(frames[3:]) + torn)
    found = read_frames(path)
    assert found.frames == frames and found.torn == len(torn)
    assert found.damaged == [(sum(len(f) for f in frames[:3]), len(junk))]


def test_salvage_says_which_file_lost_what_and_keeps_the_rest(tmp_path):
    logdir, path = _write(tmp_path, range(6))
    whole = bytearray(open(path, "rb").read())
    frames = read_frames(path).frames
    start = sum(len(f) for f in frames[:3])
    whole[start + 14] ^= 0x01  # the event of step 2
    junk = b"not an event"  # sound CRCs around bytes that are no Event
    open(path, "wb").write(bytes(whole) + frame(junk) + frame(b"\xff\xff\xff"))
    events, damage = salvage_events(logdir)
    assert [e.step for e in events if not e.file_version] == [0, 1, 3, 4, 5]
    name = os.path.basename(path)
    assert damage == [f"{name}: 1 damaged span ({len(frames[3])} bytes) skipped, 2 records "
                      "that are no event skipped"]  # fmt: skip
    assert salvage_events(tmp_path / "absent") == ([], [])


def test_one_write_per_event_and_sync_fsyncs_the_file(tmp_path, monkeypatch):
    writes, synced = [], []
    real_write, real_fsync = os.write, os.fsync
    monkeypatch.setattr(os, "write", lambda fd, b: writes.append(b) or real_write(fd, b))
    monkeypatch.setattr(
        os, "fsync", lambda fd: synced.append(os.fstat(fd).st_size) or real_fsync(fd)
    )
    f = EventFile(tmp_path / "run")
    f.write(_scalar_event(0, 1.0))
    assert len(writes) == 2  # the file version, then the event: each whole, in one write
    f.sync()
    assert synced == [os.path.getsize(f.path)]
    f.close()
    assert len(synced) == 2


def test_event_files_are_listed_in_name_order_without_temporaries(tmp_path):
    d = tmp_path / "tb"
    d.mkdir()
    for n in ("events.out.tfevents.2", "events.out.tfevents.1", ".events.out.tfevents.1.x.tmp",
              "notes.txt"):  # fmt: skip
        (d / n).write_bytes(b"")
    assert [os.path.basename(p) for p in event_files(d)] == [
        "events.out.tfevents.1",
        "events.out.tfevents.2",
    ]
    assert event_files(tmp_path / "absent") == []


def test_an_export_file_is_named_by_its_given_time_only(tmp_path):
    with EventFile(tmp_path / "a", wall_time=0.0) as f:
        pass
    assert os.path.basename(f.path) == "events.out.tfevents.0000000000"


def test_missing_tensorboardx_is_one_line_naming_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    with pytest.raises(ValueError, match=r"^TensorBoard logging needs tensorboardX, which is not "
                       r'installed; pip install "resgrad\[tensorboard\]"$'):  # fmt: skip
        events.require_tensorboardx()


FAILS = {  # what an installed module's own import raises
    "protobuf": "raise ImportError(\"cannot import name 'builder' from 'google.protobuf'\")",
    "dependency": "import resgrad_no_such_dependency",
    "descriptors": "raise TypeError('Descriptors cannot be created directly.\\nmore lines')",
    "silent": "raise RuntimeError()",  # an error with no message: nothing made up for it
}


@pytest.mark.parametrize("kind", FAILS)
def test_an_installed_module_that_fails_to_import_is_named_with_its_error(
    tmp_path, monkeypatch, kind
):
    import sys

    (tmp_path / "resgrad_fake_extra.py").write_text(FAILS[kind] + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "resgrad_fake_extra", raising=False)
    with pytest.raises(ValueError) as e:
        import_extra("resgrad_fake_extra", "--log-to fake", "pip install fake")
    msg = str(e.value)
    assert msg.startswith("--log-to fake needs resgrad_fake_extra, which is installed but fails "
                          "to import: ")  # fmt: skip
    assert "not installed" not in msg and "\n" not in msg
    want = {"protobuf": "ImportError: cannot import name 'builder' from 'google.protobuf'",
            "dependency": "ModuleNotFoundError: No module named 'resgrad_no_such_dependency'",
            "descriptors": "TypeError: Descriptors cannot be created directly.",
            "silent": "which is installed but fails to import: RuntimeError: "}[kind]  # fmt: skip
    assert msg.endswith(want)


def test_only_the_module_itself_missing_is_not_installed(monkeypatch):
    with pytest.raises(ValueError, match=r"^x needs resgrad_absent_module, which is not installed; "
                       r"pip install y$"):  # fmt: skip
        import_extra("resgrad_absent_module", "x", "pip install y")
    assert import_extra("json", "x", "y").dumps([1]) == "[1]"


def test_a_new_file_sorts_after_every_file_already_there(tmp_path):
    """TensorBoard reads a directory's event files in name order; a resume's new file must
    come last even when the killed run's file began in the same second, on a host or with
    a pid that sorts later, or when this process has opened ten files already."""
    d = tmp_path / "tb"
    d.mkdir()
    future = int(__import__("time").time()) + 100
    old = d / f"events.out.tfevents.{future:010d}.zzzz.99999.9"
    old.write_bytes(b"")
    files = [EventFile(d) for _ in range(11)]
    for f in files:
        f.close()
    assert event_files(d) == [str(old)] + [f.path for f in files]
