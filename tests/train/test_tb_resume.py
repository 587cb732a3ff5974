"""A resumed run's TensorBoard history is a view of its records, and the records are whole:
whatever happened to the event files (damaged, cut short, removed, emptied, a flipped byte,
a first record claiming 2**62 bytes, a kill right after the step-0 checkpoint), TensorBoard's
own reader finds every (tag, step) of an unbroken run exactly once, with the records' values;
what was lost is said in one line, with the histograms no record can give back."""

import os
import re
import shutil
import struct

import pytest

pytest.importorskip("tensorboardX")
pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing import event_accumulator as ea  # noqa: E402

from resgrad.formats.events import masked_crc, read_events, read_frames  # noqa: E402
from resgrad.train import loop  # noqa: E402
from resgrad.train.config import TrainConfig, resume_config  # noqa: E402
from resgrad.train.loop import train  # noqa: E402
from resgrad.train.trackers import LogConfig  # noqa: E402
from tests.train.test_trackers import TINY, _assert_scalars_equal, _expected_scalars  # noqa: E402

TB = LogConfig(to=("tensorboard",), hist_every=5)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """An unbroken run of 20 steps, and one stopped at its checkpoint of step 10."""
    d = tmp_path_factory.mktemp("tb-resume")
    text = d / "data.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40, encoding="utf-8")
    out = {}
    for name, iters in (("whole", 20), ("half", 10)):
        cfg = TrainConfig(**{**TINY, "data": str(text), "out_dir": str(d / name),
                             "max_iters": iters})  # fmt: skip
        train(cfg, progress=False, log=lambda s: None, log_to=TB)
        out[name] = cfg.out_dir
    return out


def _acc(logdir):
    acc = ea.EventAccumulator(str(logdir), size_guidance={ea.SCALARS: 0, ea.HISTOGRAMS: 0})
    acc.Reload()
    return acc


def _hists(acc):
    """The (tag, step) of every histogram TensorBoard reads."""
    return {(t, e.step) for t in acc.Tags()["histograms"] for e in acc.Histograms(t)}


def _event_file(run_dir):
    tb = os.path.join(run_dir, "tb", os.path.basename(run_dir))
    (name,) = os.listdir(tb)
    return os.path.join(tb, name)


def _tb_dir(run_dir):
    return os.path.join(run_dir, "tb", os.path.basename(run_dir))


def _record_at(path, step, kind):
    """(offset, size) of the record of ``step`` holding a scalar or histogram summary."""
    from tensorboardX.proto.event_pb2 import Event

    pos = 0
    for f in read_frames(path).frames:
        ev = Event.FromString(f[12:-4])
        if (
            ev.step == step
            and ev.HasField("summary")
            and any(v.HasField(kind) for v in ev.summary.value)
        ):
            return pos, len(f)
        pos += len(f)
    raise AssertionError(f"no {kind} record of step {step}")


def _flip(path, at):
    data = bytearray(open(path, "rb").read())
    data[at] ^= 0x20
    open(path, "wb").write(bytes(data))


def _flip_scalar_of_step_1(path):
    at, size = _record_at(path, 1, "simple_value")
    _flip(path, at + size // 2)  # mid-file: 8 steps and their histograms follow it


def _flip_histogram_of_step_5(path):
    at, size = _record_at(path, 5, "histo")
    _flip(path, at + size // 2)


def _claim_2_to_the_62(path):
    data = open(path, "rb").read()
    head = struct.pack("<Q", 2**62)  # the first record (the file version), its CRC made right
    open(path, "wb").write(head + struct.pack("<I", masked_crc(head)) + data[12:])


def _cut_short(path):
    at, _ = _record_at(path, 6, "simple_value")
    with open(path, "r+b") as f:
        f.truncate(at + 7)  # in the middle of step 6's record: steps 6-9 gone


FAULTS = {
    "flipped byte mid-file": _flip_scalar_of_step_1,
    "damaged histogram": _flip_histogram_of_step_5,
    "first record of 2**62 bytes": _claim_2_to_the_62,
    "cut short": _cut_short,
    "emptied": lambda path: open(path, "wb").close(),
    "removed": os.unlink,
}


def _left_twice(path):
    """A resume killed after writing its new file and before removing the old one: both."""
    shutil.copy(path, path + ".2")


CLEAN = {"none": lambda path: None, "left twice": _left_twice}  # nothing lost: nothing said


@pytest.mark.parametrize("fault", [*CLEAN, *FAULTS])
def test_a_resume_rebuilds_every_step_once_whatever_happened_to_the_events(tmp_path, runs, fault):
    run = str(tmp_path / "half")
    shutil.copytree(runs["half"], run)
    last = max(e.wall_time for e in read_events(_tb_dir(run)))  # the killed run's last event
    {**CLEAN, **FAULTS}[fault](_event_file(run))
    said = []
    train(resume_config(run, max_iters=20), progress=False, log=said.append, log_to=TB)
    tb, whole_tb = _tb_dir(run), _tb_dir(runs["whole"])
    acc, whole = _acc(tb), _acc(whole_tb)
    _assert_scalars_equal(acc, _expected_scalars(runs["whole"]))  # every step, the records'
    seen = [(v.tag, e.step) for e in read_events(tb) if e.HasField("summary")
            for v in e.summary.value]  # fmt: skip
    assert len(seen) == len(set(seen))  # none twice in the files
    assert len(os.listdir(tb)) == 1
    lines = [s for s in said if s.startswith("TensorBoard ")]
    lost = _hists(whole) - _hists(acc)
    assert _hists(acc) <= _hists(whole)
    if fault in CLEAN:
        assert lines == [] and lost == set()
        return
    assert len(lines) == 1, said
    (line,) = lines
    assert line.startswith(f"TensorBoard {tb}: ")
    m = re.search(r"the histograms of steps? ([0-9, -]+) are missing", line)
    missing = set() if m is None else {int(s) for s in m[1].replace("-", ", ").split(", ")}
    assert {s for _, s in lost} == missing  # said missing exactly when TensorBoard lacks them
    want = {"flipped byte mid-file": "1 damaged span", "damaged histogram": "1 damaged span",
            "first record of 2**62 bytes": "1 damaged span", "cut short": "steps 6-9 written",
            "emptied": "steps 0-9 written", "removed": "no event file"}[fault]  # fmt: skip
    assert want in line and ("no event file" in line) == (fault == "removed")
    scalars = [e for e in read_events(tb) if e.step < 10 and e.HasField("summary")
               and e.summary.value[0].HasField("simple_value")]  # fmt: skip
    if fault in ("flipped byte mid-file", "cut short"):  # rebuilt in the old run's time
        assert len(scalars) == 10 + 2 and all(e.wall_time <= last for e in scalars)
    if fault == "flipped byte mid-file":
        assert "the scalars of step 1 written again" in line and not missing
    if fault in ("emptied", "removed", "cut short"):
        assert missing == ({0, 5} if fault != "cut short" else set())


@pytest.mark.parametrize("given_dir", [False, True])
def test_a_run_killed_after_its_step_0_checkpoint_resumes_with_every_evaluation(
    tmp_path, runs, monkeypatch, given_dir
):
    """Killed at step 3, its checkpoint at 0: the resumed run (start 0) logs eval/* at step 0
    as metrics.jsonl has it, drops the killed steps it redoes, and its own --log-dir's
    events are its own, not another run's."""
    log_to = LogConfig(to=("tensorboard",), hist_every=5,
                       dir=str(tmp_path / "board") if given_dir else None)  # fmt: skip
    data = os.path.join(os.path.dirname(runs["whole"]), "data.txt")
    cfg = TrainConfig(**{**TINY, "data": data, "out_dir": str(tmp_path / "whole"), "max_iters": 20})
    real = loop.train_step

    def killed_at_3(*a, **kw):
        if a[7] == 3:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(loop, "train_step", killed_at_3)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, progress=False, log=lambda s: None, log_to=log_to)
    monkeypatch.setattr(loop, "train_step", real)
    said = []
    train(resume_config(cfg.out_dir, max_iters=20), progress=False, log=said.append,
          log_to=log_to)  # fmt: skip
    tb = log_to.tensorboard_run(cfg.out_dir)
    acc = _acc(tb)
    _assert_scalars_equal(acc, _expected_scalars(runs["whole"]))
    assert [e.step for e in acc.Scalars("eval/val_loss")] == [0, 5, 10, 15, 20]
    assert _hists(acc) == _hists(_acc(os.path.dirname(_event_file(runs["whole"]))))
    assert not [s for s in said if s.startswith("TensorBoard ")]


def test_the_old_files_go_only_once_the_new_one_holds_their_history_on_disk(
    tmp_path, runs, monkeypatch
):
    """A kill between the two leaves both files (read as one by the next resume, above),
    never neither: the new file is fsynced, history and all, before an old one is removed."""
    run = str(tmp_path / "half")
    shutil.copytree(runs["half"], run)
    old = _event_file(run)
    said, real_fsync, real_unlink = [], os.fsync, os.unlink

    def fsync(fd):
        said.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"), os.fstat(fd).st_size))
        real_fsync(fd)

    def unlink(path, *a, **kw):
        said.append(("unlink", str(path), 0))
        real_unlink(path, *a, **kw)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "unlink", unlink)
    train(resume_config(run, max_iters=11), progress=False, log=lambda s: None, log_to=TB)
    gone = [i for i, (what, path, _) in enumerate(said) if what == "unlink" and path == old]
    assert len(gone) == 1
    (new,) = os.listdir(_tb_dir(run))
    synced = [size for what, path, size in said[: gone[0]]
              if what == "fsync" and path == os.path.join(_tb_dir(run), new)]  # fmt: skip
    history = sum(len(f) for f in read_frames(os.path.join(_tb_dir(run), new)).frames
                  if _step_of(f) < 10)  # fmt: skip
    assert synced and synced[-1] >= history


def _step_of(framed):
    from tensorboardX.proto.event_pb2 import Event

    return Event.FromString(framed[12:-4]).step
