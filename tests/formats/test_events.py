"""TensorBoard event files: the framing proven against TensorBoard's own reader and a CRC-32C
written here from its definition; torn and damaged tails; trimming for a resume; durability."""

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
    masked_crc,
    read_events,
    read_frames,
    trim_events,
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
    frames, torn = read_frames(path)
    assert len(frames) == 4 and torn == 0 and b"".join(frames) == whole
    last = len(frames[-1])
    for cut in range(1, last):  # a kill at every byte of the last record
        with open(path, "wb") as f:
            f.write(whole[:-cut])
        frames, torn = read_frames(path)
        assert len(frames) == 3 and torn == last - cut


@pytest.mark.parametrize("where", ["length", "data", "data crc"])
def test_a_damaged_record_ends_the_sound_ones(tmp_path, where):
    _, path = _write(tmp_path, range(3))
    whole = bytearray(open(path, "rb").read())
    frames, _ = read_frames(path)
    start = sum(len(f) for f in frames[:2])  # the third record: the event of step 1
    at = {"length": start, "data": start + 14, "data crc": start + len(frames[2]) - 1}[where]
    whole[at] ^= 0x40
    open(path, "wb").write(bytes(whole))
    frames, torn = read_frames(path)
    assert len(frames) == 2 and torn == len(whole) - start


def test_trim_keeps_the_steps_before_and_the_file_version(tmp_path):
    logdir, path = _write(tmp_path, range(10))
    with open(path, "ab") as f:  # a kill's torn tail
        f.write(frame(_scalar_event(10, 0.0).SerializeToString())[:-3])
    assert trim_events(logdir, 6) == 4
    evs = list(read_events(logdir))
    assert evs[0].file_version and [e.step for e in evs[1:]] == list(range(6))
    assert read_frames(path)[1] == 0  # the torn tail went too
    before = open(path, "rb").read()
    assert trim_events(logdir, 6) == 0 and open(path, "rb").read() == before
    with open(path, "ab") as f:  # a torn tail alone, every whole event before the step
        f.write(frame(_scalar_event(3, 0.0).SerializeToString())[:9])
    assert trim_events(logdir, 6) == 0 and open(path, "rb").read() == before


def test_trim_rewrites_atomically(tmp_path, monkeypatch):
    """A failure in the middle of a trim leaves the event file as it was."""
    logdir, path = _write(tmp_path, range(10))
    before = open(path, "rb").read()

    def fail(*a):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        trim_events(logdir, 3)
    assert open(path, "rb").read() == before
    assert os.listdir(logdir) == [os.path.basename(path)]  # no temporary left


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
    with pytest.raises(ValueError, match=r'pip install "resgrad\[tensorboard\]"'):
        events.require_tensorboardx()


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
