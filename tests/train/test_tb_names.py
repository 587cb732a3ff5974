"""Dashboards' names, layouts and refusals: a run is named after its directory however it
is spelled; the custom-scalars layout charts every tag once; an export never replaces what it
reads nor anything but event files; a --log-dir that cannot be one is named; a fresh
wandb/trackio run never joins an older one, a resumed one continues its own."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("tensorboardX")
pytest.importorskip("tensorboard")

from resgrad.formats.events import read_events  # noqa: E402
from resgrad.train import trackers  # noqa: E402
from resgrad.train.dynamics import PER_BLOCK, record_dtype  # noqa: E402
from resgrad.train.trackers import (  # noqa: E402
    LogConfig,
    check_log_dir,
    export_many,
    export_tensorboard,
    run_name,
    step_scalars,
)
from tests.train.test_trackers import _acc, _tb, _train  # noqa: E402

# --------------------------------------------------------------------------- names, layouts


@pytest.mark.parametrize("spelling", ["out", "out/", "./out/", "out//", "{abs}/out/", "x/../out"])
def test_a_run_is_named_after_its_output_directory_however_it_is_spelled(
    tmp_path, monkeypatch, spelling
):
    monkeypatch.chdir(tmp_path)
    out = spelling.format(abs=tmp_path)
    assert run_name(out) == "out" and run_name(out, "mine") == "mine"
    (tmp_path / "out").mkdir()
    monkeypatch.chdir(tmp_path / "out")
    assert run_name(".") == "out" and run_name("./") == "out"
    monkeypatch.chdir(tmp_path)
    run = LogConfig(to=("tensorboard",)).tensorboard_run(out)
    assert os.path.abspath(run) == str(tmp_path / "out" / "tb" / "out")
    assert LogConfig(to=("tensorboard",), dir="b", name="n").tensorboard_run(out) == "b/n"


@pytest.mark.parametrize("name", ["", ".", "..", "a/b"])
def test_a_run_name_that_cannot_name_a_directory_is_refused(name):
    with pytest.raises(ValueError, match=f"run name {re.escape(repr(name))} cannot name"):
        LogConfig(to=("tensorboard",), name=name)


def _layout_regexes(logdir):
    """The tag regexes of the custom-scalars layout the run wrote, as TensorBoard reads it:
    (category, chart, regex)."""
    from tensorboard.plugins.custom_scalar import layout_pb2

    (value,) = [v for e in read_events(logdir) if e.HasField("summary")
                for v in e.summary.value if v.tag == trackers.LAYOUT_TAG]  # fmt: skip
    layout = layout_pb2.Layout.FromString(value.tensor.string_val[0])
    return [(c.title, ch.title, r) for c in layout.category for ch in c.chart
            for r in ch.multiline.tag]  # fmt: skip


def test_the_layout_charts_every_scalar_the_run_logs_one_line_each(tmp_path, text_file):
    """The custom-scalars plugin matches each regex from the tag's start (re.match): every
    tag TensorBoard reads back is in exactly one chart, and every line of a chart is a tag."""
    out = _train(tmp_path, "run", text_file, max_iters=2)
    tags = set(_acc(_tb(out)).Tags()["scalars"])
    regexes = _layout_regexes(_tb(out))
    for tag in tags:
        assert len([r for *_, r in regexes if re.match(r, tag)]) == 1, tag
    for cat, chart, r in regexes:
        assert len([t for t in tags if re.match(r, t)]) == 1, (cat, chart, r)
    per_block = {chart: [r for c, ch, r in regexes if ch == chart and c == "resgrad: per block"]
                 for chart in PER_BLOCK}  # fmt: skip
    assert {q: len(rs) for q, rs in per_block.items()} == {
        q: 4 if q == "stream_grad" else 3 for q in PER_BLOCK}  # fmt: skip


@pytest.mark.parametrize("n_layer", [1, 12, 101])
def test_the_layout_holds_every_tag_of_any_depth(n_layer):
    rec = np.zeros((), record_dtype(n_layer))
    tags = set(step_scalars(rec)) | set(trackers.EVAL_TAGS)
    regexes = [r for charts in trackers.scalar_layout(n_layer).values()
               for rs in charts.values() for r in rs]  # fmt: skip
    assert sorted(t for t in tags for r in regexes if re.match(r, t)) == sorted(tags)
    assert len(regexes) == len(tags)


# --------------------------------------------------------------------------- --force, --log-dir


def _files(root):
    return {os.path.relpath(os.path.join(d, n), root): open(os.path.join(d, n), "rb").read()
            for d, _, names in os.walk(root) for n in names}  # fmt: skip


def test_an_export_never_replaces_what_it_reads_nor_a_directory_of_other_files(tmp_path, text_file):
    out = _train(tmp_path, "run", text_file, log_to=None, max_iters=2)
    (tmp_path / "notes.txt").write_text("the user's")
    os.symlink(out, tmp_path / "link")
    before = _files(tmp_path)
    for target, what in ((out, "is"), (str(tmp_path), "holds"), (str(tmp_path / "link"), "is")):
        for force in (False, True):
            with pytest.raises(ValueError, match=rf"^'{re.escape(target)}' {what} "
                               rf"'{re.escape(out)}', which the export reads"):  # fmt: skip
                export_tensorboard(out, target, force=force)
    assert _files(tmp_path) == before  # nothing deleted, nothing written
    board = tmp_path / "board"
    (board / "a").mkdir(parents=True)
    (board / "a" / "events.out.tfevents.1").write_bytes(b"")
    (board / "a" / "model.ckpt").write_bytes(b"weights")
    for force in (False, True):
        with pytest.raises(ValueError, match="holds 'a/model.ckpt', which is not a TensorBoard "
                           "event file"):  # fmt: skip
            export_tensorboard(out, str(board), force=force)
    (board / "a" / "model.ckpt").unlink()
    os.symlink(tmp_path / "notes.txt", board / "events.out.tfevents.2")  # a link is no event file
    with pytest.raises(ValueError, match="holds 'events.out.tfevents.2', which is not"):
        export_tensorboard(out, str(board), force=True)
    (board / "events.out.tfevents.2").unlink()
    assert (tmp_path / "notes.txt").read_text() == "the user's"
    with pytest.raises(ValueError, match="already holds files.*--force"):
        export_tensorboard(out, str(board))
    export_tensorboard(out, str(board), force=True)  # event files in run directories: replaced
    assert sorted(_files(board)) == [os.path.join("run", "events.out.tfevents.0000000000")]


def test_export_many_refuses_the_experiment_directory_holding_its_runs(tmp_path, text_file):
    out = _train(tmp_path / "exp" / "runs", "cell", text_file, log_to=None, max_iters=2)
    cells = [("cell", out)]
    before = _files(tmp_path)
    for target in (tmp_path / "exp", tmp_path / "exp" / "runs", tmp_path):
        with pytest.raises(ValueError, match=f"holds '{re.escape(out)}', which the export reads"):
            export_many(cells, str(target), force=True)
    assert _files(tmp_path) == before
    (done,) = export_many(cells, str(tmp_path / "exp" / "tb"))
    assert done.path == str(tmp_path / "exp" / "tb" / "cell") and done.steps == 2


def test_check_log_dir_names_a_file_a_file_on_the_way_and_an_unwritable_place(
    tmp_path, monkeypatch
):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(NotADirectoryError, match=rf"^--log-dir '{f}' is a file; expected a "
                       r"directory \(or a new name\)$"):  # fmt: skip
        check_log_dir(str(f))
    with pytest.raises(NotADirectoryError, match=rf"^--log-dir '{f}/a/b' is under '{f}', which "
                       "is a file; expected a directory$"):  # fmt: skip
        check_log_dir(str(f / "a" / "b"))
    check_log_dir(str(tmp_path / "new" / "deeper"))  # made later, by the run
    assert sorted(os.listdir(tmp_path)) == ["file"]  # the probe is gone, nothing made
    import tempfile

    def denied(*a, **kw):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkdtemp", denied)  # what a read-only place answers
    with pytest.raises(PermissionError, match=rf"^--log-dir '{tmp_path}/new': '{tmp_path}' cannot "
                       r"be written \(Permission denied\); expected a directory you can write "
                       "to$"):  # fmt: skip
        check_log_dir(str(tmp_path / "new"))


# --------------------------------------------------------------------------- fresh or resumed

TRACKIO_RUNS = """
import json, sys
import trackio
from resgrad.train.trackers import LogConfig, open_trackers

log = LogConfig(to=("trackio",), project="test")
def run(out, resume, steps):
    (t,) = open_trackers(log, out, 2, steps[0], {}, resume=resume)
    for s in steps:
        t.scalars(s, {"train/loss": float(s)})
    t.close()

run(sys.argv[1] + "/a/run/", False, [0, 1])  # an older run named "run"
run(sys.argv[1] + "/b/run/", False, [0, 1, 2])  # a fresh run of the same name
run(sys.argv[1] + "/b/run/", True, [3, 4])  # resumed
runs = trackio.SQLiteStorage.get_run_records("test")
print(json.dumps(sorted([r["name"], [x["step"] for x in trackio.SQLiteStorage.get_logs(
    "test", run_id=r["id"])]] for r in runs)))
"""


def test_a_fresh_trackio_run_is_new_and_a_resumed_one_continues(tmp_path):
    """A fresh run never joins an older run of its name; its resume continues it (the
    names come from out-dirs spelled with a trailing slash)."""
    pytest.importorskip("trackio")
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio")}
    res = subprocess.run([sys.executable, "-c", TRACKIO_RUNS, str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    runs = json.loads(res.stdout.strip().splitlines()[-1])
    assert runs == [["run", [0, 1]], ["run", [0, 1, 2, 3, 4]]]


def test_a_fresh_wandb_run_never_takes_an_old_run_id(tmp_path, monkeypatch):
    """A run killed before its first checkpoint leaves its id behind; the fresh run that
    follows is a new wandb run, and only a resume continues an id."""
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    log = LogConfig(to=("wandb",), project="test")
    out = str(tmp_path / "run") + "/"
    ids = []
    for resume in (False, False, True):
        (t,) = trackers.open_trackers(log, out, 2, 0, {}, resume=resume)
        ids.append((t.run.id, t.run.name))
        t.close()
    assert ids[0] != ids[1] and ids[2] == ids[1] and ids[0][1] == "run"
