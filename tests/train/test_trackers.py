"""Dashboards: what a run logs to TensorBoard, wandb and trackio, read back with each tool's
own reader and compared with the run's dynamics.bin and metrics.jsonl."""

import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("tensorboardX")
pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing import event_accumulator as ea  # noqa: E402
from tensorboard.backend.event_processing import event_multiplexer  # noqa: E402

from resgrad.formats.checkpoint import load_checkpoint  # noqa: E402
from resgrad.formats.events import frame, read_events  # noqa: E402
from resgrad.lab.experiments import ExperimentConfig, run_cell, run_experiment  # noqa: E402
from resgrad.nn.model import GPT  # noqa: E402
from resgrad.train import trackers  # noqa: E402
from resgrad.train.config import TrainConfig, resume_config  # noqa: E402
from resgrad.train.data import get_batch, load_corpus  # noqa: E402
from resgrad.train.dynamics import PER_BLOCK, read_dynamics  # noqa: E402
from resgrad.train.loop import train, train_step  # noqa: E402
from resgrad.train.optim import AdamW, grad_norms  # noqa: E402
from resgrad.train.rundir import read_metrics  # noqa: E402
from resgrad.train.shards import Shards  # noqa: E402
from resgrad.train.trackers import (  # noqa: E402
    HIST_BINS,
    LogConfig,
    block_tag,
    export_tensorboard,
    histogram,
    step_scalars,
)
from tests.crashes import synced_at_each_checkpoint  # noqa: E402
from tests.train.test_dynamics import TINY as DYNAMICS_TINY  # noqa: E402

TINY = {**DYNAMICS_TINY, "shards": 1}  # one shard: a test recomputes a step's gradients
TB = LogConfig(to=("tensorboard",), hist_every=5)


def _train(tmp_path, name, text_file, log_to=TB, **kw):
    cfg = TrainConfig(**{**TINY, "data": text_file, "out_dir": str(tmp_path / name), **kw})
    train(cfg, progress=False, log=lambda s: None, log_to=log_to)
    return cfg.out_dir


def _tb(out):
    """The run's own TensorBoard directory: RUN/tb/<the run directory's name>."""
    return os.path.join(out, "tb", os.path.basename(os.path.abspath(out)))


def _acc(logdir):
    acc = ea.EventAccumulator(str(logdir), size_guidance={ea.SCALARS: 0, ea.HISTOGRAMS: 0})
    acc.Reload()
    return acc


def _expected_scalars(run_dir):
    """tag -> (steps, float32 values), built here from the run's own files by their names."""
    dyn = read_dynamics(run_dir)
    L, steps = dyn.n_layer, [int(s) for s in dyn.steps]
    want = {f"train/{f}": (steps, dyn[f].astype(np.float32))
            for f in ("loss", "lr", "grad_norm", "clipped")}  # fmt: skip
    for q in PER_BLOCK:
        for i in range(dyn[q].shape[1]):
            tag = "stream_grad/output" if (q == "stream_grad" and i == L) else f"{q}/block_{i:02d}"
            want[tag] = (steps, dyn[q][:, i].astype(np.float32))
    evals = [r for r in read_metrics(run_dir) if r["kind"] == "eval"]
    for f in ("train_loss", "val_loss"):
        want[f"eval/{f}"] = ([r["iter"] for r in evals],
                             np.array([r[f] for r in evals], dtype=np.float32))  # fmt: skip
    return want


def _assert_scalars_equal(acc, want):
    assert set(acc.Tags()["scalars"]) == set(want)
    for tag, (steps, values) in want.items():
        got = acc.Scalars(tag)
        assert [e.step for e in got] == steps, tag
        np.testing.assert_array_equal(np.array([e.value for e in got], np.float32), values, tag)


def test_every_scalar_tensorboard_reads_is_the_runs_record_bit_for_bit(tmp_path, text_file):
    out = _train(tmp_path, "run", text_file, max_iters=12)
    want = _expected_scalars(out)
    assert len(want) == 4 + 6 * 3 + 4 + 2 and want["train/loss"][0] == list(range(12))
    assert want["eval/val_loss"][0] == [0, 5, 10, 12]
    _assert_scalars_equal(_acc(_tb(out)), want)


def test_histograms_are_the_weights_and_the_unclipped_gradients_at_their_step(tmp_path, text_file):
    """At step 5, weights/<k> is the parameter the step started from (the kept checkpoint of
    iteration 5) and gradients/<k> its gradient on step 5's batch, recomputed here, before
    clipping (grad_clip is tiny, so every step clips)."""
    out = _train(tmp_path, "run", text_file, max_iters=7, keep_every=5, grad_clip=1e-3)
    acc = _acc(_tb(out))
    ckpt = load_checkpoint(os.path.join(out, "ckpt-5.ckpt"))
    names = list(ckpt.params)
    assert set(acc.Tags()["histograms"]) == {f"{p}/{k}" for p in ("weights", "gradients")
                                             for k in names}  # fmt: skip
    cfg = TrainConfig(**{**TINY, "data": text_file})
    model = GPT.from_params(cfg.gpt_config(len(ckpt.vocab)), {k: np.array(v) for k, v in
                                                             ckpt.params.items()})  # fmt: skip
    rng = np.random.Generator(np.random.PCG64())
    rng.bit_generator.state = ckpt.rng_states["data"]
    x, y = get_batch(load_corpus(text_file, cfg.block_size).train, 8, 4, rng)
    grads = Shards(1).forward_backward(model, x, y, None, act_rms=False).grads
    assert read_dynamics(out)["clipped"][5] == 1
    for prefix, arrays in (("weights", ckpt.params), ("gradients", grads)):
        for k in names:
            events = acc.Histograms(f"{prefix}/{k}")
            assert [e.step for e in events] == [0, 5]
            h = events[1].histogram_value
            a = np.asarray(arrays[k], dtype=np.float32)
            counts, edges = np.histogram(a, bins=HIST_BINS, range=(float(a.min()), float(a.max())))
            assert h.num == a.size and sum(h.bucket) == a.size
            assert list(h.bucket) == counts.tolist(), (prefix, k)
            np.testing.assert_allclose(h.bucket_limit, edges[1:], rtol=1e-15)  # right edges
            assert (h.min, h.max) == (float(a.min()), float(a.max()))
            np.testing.assert_allclose(h.sum, a.astype(np.float64).sum(), rtol=1e-12, atol=1e-12)


def test_histogram_of_a_constant_tensor_is_one_bucket():
    h = histogram(np.full((3, 4), 0.5, np.float32))
    assert h.counts.tolist() == [12] and h.edges.tolist() == [0.5, 0.5] and h.sum == 6.0
    h = histogram(np.arange(10.0))
    assert h.counts.sum() == 10 and len(h.counts) == HIST_BINS and h.sum_squares == 285.0


def test_block_tags_sort_by_block():
    assert block_tag("grad", 3, 12) == "grad/block_03"
    assert block_tag("grad", 99, 100) == "grad/block_99"
    assert block_tag("grad", 7, 101) == "grad/block_007"
    assert block_tag("stream_grad", 12, 12) == "stream_grad/output"
    tags = [block_tag("update", i, 12) for i in range(12)]
    assert sorted(tags) == tags


def test_step_scalars_are_the_records_values_exactly(tmp_path, text_file):
    out = _train(tmp_path, "run", text_file, log_to=None, max_iters=2)
    rec = read_dynamics(out).records[1]
    got = step_scalars(rec)
    assert got["train/loss"] == float(rec["loss"]) and got["train/clipped"] == rec["clipped"]
    assert got["stream_grad/output"] == float(rec["stream_grad"][3])
    assert got["act_rms/block_02"] == float(rec["act_rms"][2])


def test_resume_after_a_kill_has_every_step_once(tmp_path, text_file):
    """Killed after its checkpoint at 10 (steps 10-12 logged, then half an event), then
    resumed: TensorBoard reads the same steps and values as an unbroken run, and the files
    themselves hold no step twice."""
    whole = _train(tmp_path, "whole", text_file, max_iters=20)
    half = _train(tmp_path, "half", text_file, max_iters=10)
    tb = _tb(half)
    (path,) = [os.path.join(tb, n) for n in os.listdir(tb)]
    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.proto.summary_pb2 import Summary

    with open(path, "ab") as f:  # what a kill -9 after the checkpoint leaves
        for s in (10, 11, 12):
            ev = Event(
                step=s, summary=Summary(value=[Summary.Value(tag="train/loss", simple_value=99.0)])
            )
            f.write(frame(ev.SerializeToString()))
        f.write(frame(ev.SerializeToString())[:-5])
    train(resume_config(half, max_iters=20), progress=False, log=lambda s: None, log_to=TB)
    want = _expected_scalars(whole)
    _assert_scalars_equal(_acc(tb), want)
    _assert_scalars_equal(_acc(_tb(whole)), want)
    seen = [(v.tag, e.step) for e in read_events(tb) if e.HasField("summary")
            for v in e.summary.value if not v.tag.startswith("custom_scalars")]  # fmt: skip
    assert len(seen) == len(set(seen))  # no (tag, step) twice, purge or not
    assert len(os.listdir(tb)) == 1  # the old file's events are in the new one
    starts = [e.step for e in read_events(tb) if e.HasField("session_log")]
    assert starts == [0]  # a TensorBoard that read the killed run's steps drops them all
    hist_steps = [e.step for e in _acc(tb).Histograms("weights/wte")]
    assert hist_steps == [0, 5, 10, 15]


def test_tensorboard_files_are_fsynced_before_each_checkpoint(tmp_path, text_file, monkeypatch):
    def event_file(path):
        tb = _tb(os.path.dirname(path))
        return [os.path.join(tb, n) for n in os.listdir(tb)]

    checks = synced_at_each_checkpoint(monkeypatch, event_file)
    _train(tmp_path, "run", text_file, max_iters=10)
    assert len(checks) == 3 and all(checks), checks


def test_export_writes_what_the_live_run_logged_and_the_same_bytes_twice(tmp_path, text_file):
    out = _train(tmp_path, "run", text_file, max_iters=12)
    live = _acc(_tb(out))
    _, path, n_steps, n_evals, damage = export_tensorboard(out, str(tmp_path / "exp"))
    assert (n_steps, n_evals, damage) == (12, 4, None) and path == str(tmp_path / "exp" / "run")
    exported = _acc(path)
    want = _expected_scalars(out)
    _assert_scalars_equal(live, want)
    _assert_scalars_equal(exported, want)
    wall = [e.wall_time for e in exported.Scalars("train/loss")]
    ms = [r["ms"] for r in read_metrics(out) if r["kind"] == "iter"]
    np.testing.assert_allclose(wall, np.concatenate([[0], np.cumsum(ms)[:-1]]) / 1e3, atol=1e-9)
    export_tensorboard(out, str(tmp_path / "exp2"))
    a, b = (sorted(os.listdir(tmp_path / d / "run")) for d in ("exp", "exp2"))
    assert a == b and all((tmp_path / "exp" / "run" / n).read_bytes() == (tmp_path / "exp2" / "run"
                          / n).read_bytes() for n in a)  # fmt: skip
    with pytest.raises(ValueError, match="already holds files.*--force"):
        export_tensorboard(out, str(tmp_path / "exp"))
    export_tensorboard(out, str(tmp_path / "exp"), force=True)
    assert os.listdir(tmp_path / "exp") == ["run"] and len(os.listdir(path)) == 1


def test_each_experiment_cell_is_a_run_named_after_it(tmp_path, text_file):
    cfg = ExperimentConfig.defaults(
        "warmup", variants=("pre-ln", "post-ln"), depths=(1,), lrs=(1e-3,), warmups=(0,),
        seeds=(0,), max_iters=4, eval_interval=2, eval_iters=1, n_embd=16, block_size=8,
        batch_size=2, data=text_file,
    )  # fmt: skip
    out = str(tmp_path / "exp")
    run_experiment(cfg, out, jobs=1, progress=False, log_to=TB)
    names = sorted(n for n, _ in cfg.cells(out))
    assert sorted(os.listdir(os.path.join(out, "tb"))) == names
    mux = event_multiplexer.EventMultiplexer(size_guidance={ea.SCALARS: 0})
    mux.AddRunsFromDirectory(os.path.join(out, "tb"))
    mux.Reload()
    assert sorted(mux.Runs()) == names
    for n in names:
        got = [e.value for e in mux.Scalars(n, "train/loss")]
        np.testing.assert_array_equal(np.float32(got), read_dynamics(
            os.path.join(out, "runs", n))["loss"])  # fmt: skip


def test_keep_grads_copies_the_gradients_before_clipping(text_file):
    cfg = TrainConfig(**{**TINY, "data": text_file})
    corpus = load_corpus(text_file, 8)
    model = GPT(cfg.gpt_config(corpus.tokenizer.vocab_size), seed=0)
    x, y = get_batch(corpus.train, 8, 4, np.random.default_rng(0))
    want = Shards(1).forward_backward(model, x, y, None, act_rms=False).grads
    step = train_step(model, AdamW(model.params, cfg.adamw()), x, y, 1e-3, 1e-3, None,
                      keep_grads=True)  # fmt: skip
    assert step.clipped
    for k, g in want.items():
        np.testing.assert_array_equal(step.grads[k], g)
    assert grad_norms(step.grads) == step.norms
    assert train_step(model, AdamW(model.params, cfg.adamw()), x, y, 1e-3, 1.0, None).grads is None


def test_log_config_refuses_what_no_tracker_takes():
    with pytest.raises(ValueError, match="'tensorbord' is not a tracker"):
        LogConfig(to=("tensorbord",))
    with pytest.raises(ValueError, match="twice"):
        LogConfig(to=("wandb", "wandb"))
    with pytest.raises(ValueError, match="hist_every must be an integer >= 0"):
        LogConfig(hist_every=-1)
    assert LogConfig(to="wandb").to == ("wandb",) and LogConfig().hist_every == 100


@pytest.mark.parametrize("kind, extra", [("wandb", "wandb"), ("trackio", "trackio"),
                                         ("tensorboard", "tensorboard")])  # fmt: skip
def test_a_missing_tracker_is_one_line_naming_its_extra(monkeypatch, kind, extra):
    module = trackers.EXTRAS[kind][0]
    monkeypatch.setitem(sys.modules, module, None)  # import of it: ModuleNotFoundError
    with pytest.raises(ValueError, match=rf"^--log-to {kind} needs {module}, which is not "
                       rf'installed; pip install "resgrad\[{extra}\]"$'):  # fmt: skip
        trackers.require((kind,))


@pytest.mark.parametrize("kind", ["wandb", "trackio", "tensorboard"])
def test_a_tracker_that_fails_to_import_is_named_with_its_error_not_missing(
    tmp_path, monkeypatch, kind
):
    """An installed module whose own import fails (a protobuf clash, simulated by a module
    of that name first on sys.path) is one line quoting the error, never "not installed"."""
    module = trackers.EXTRAS[kind][0]
    (tmp_path / f"{module}.py").write_text(
        "raise ImportError(\"cannot import name 'builder' from 'google.protobuf.internal'\")\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ValueError) as e:
        trackers.require((kind,))
    assert str(e.value) == (f"--log-to {kind} needs {module}, which is installed but fails to "
                            "import: ImportError: cannot import name 'builder' from "
                            "'google.protobuf.internal'")  # fmt: skip


def test_a_run_refused_at_its_first_evaluation_leaves_no_tensorboard_files(
    tmp_path, text_file, monkeypatch
):
    import resgrad.train.loop as loop

    def refuse(*a, **kw):
        raise ValueError("refused")

    monkeypatch.setattr(loop, "estimate_loss", refuse)
    (tmp_path / "run").mkdir()  # the user's: it stays, and what the run put in it goes
    with pytest.raises(ValueError, match="refused"):
        _train(tmp_path, "run", text_file, max_iters=4)
    assert "tb" not in os.listdir(tmp_path / "run")
    (tmp_path / "run" / "tb").mkdir()  # the user's too: it stays, and the run's own goes
    with pytest.raises(ValueError, match="refused"):
        _train(tmp_path, "run", text_file, max_iters=4)
    assert os.listdir(tmp_path / "run" / "tb") == []


# --------------------------------------------------------------------------- wandb, offline


def _wandb_records(run_file):
    """The protobuf records of a wandb offline ``.wandb`` file: a 7-byte header, then
    LevelDB-log chunks (crc, length, type) in 32 KiB blocks, FULL or FIRST..MIDDLE..LAST."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = open(run_file, "rb").read()
    assert data[:4] == b":W&B"
    pos, buf, out = 7, b"", []
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:  # a block's tail too short for a chunk header is padding
            pos += left
            continue
        _, n, kind = struct.unpack("<IHB", data[pos : pos + 7])
        buf += data[pos + 7 : pos + 7 + n]
        pos += 7 + n
        if kind in (1, 4):  # FULL, LAST
            rec = pb.Record()
            rec.ParseFromString(buf)
            out.append(rec)
            buf = b""
    return out


def test_wandb_offline_history_holds_the_runs_values(tmp_path, text_file, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    log_to = LogConfig(to=("wandb",), hist_every=5, project="test")
    out = _train(tmp_path, "run", text_file, log_to=log_to, max_iters=7)
    (run_dir,) = [d for d in os.listdir(os.path.join(out, "wandb")) if d.startswith("offline-run")]
    wdir = os.path.join(out, "wandb", run_dir)
    (run_file,) = [f for f in os.listdir(wdir) if f.endswith(".wandb")]
    rows = {}
    records = _wandb_records(os.path.join(wdir, run_file))
    assert records[-1].WhichOneof("record_type") == "exit"  # the file is whole at the end
    for rec in records:
        if rec.WhichOneof("record_type") == "run":
            assert rec.run.display_name == "run" and rec.run.project == "test"
        if rec.WhichOneof("record_type") == "history":
            row = {"/".join(i.nested_key) or i.key: json.loads(i.value_json)
                   for i in rec.history.item}  # fmt: skip
            rows[row["_step"]] = row
    assert sorted(rows) == list(range(8))  # steps 0-6, and the final evaluation's 7
    want = _expected_scalars(out)
    for tag, (steps, values) in want.items():
        for s, v in zip(steps, values):
            assert rows[s][tag] == float(v), (tag, s)
    dyn_w = load_checkpoint(os.path.join(out, "last.ckpt")).params
    for s in (0, 5):
        for k, p in dyn_w.items():
            assert sum(rows[s][f"weights/{k}/values"]) == p.size
            assert sum(rows[s][f"gradients/{k}/values"]) == p.size
    assert "weights/wte/values" not in rows[1]


# --------------------------------------------------------------------------- trackio, local

TRACKIO_SCRIPT = """
import json, sys
from resgrad.train.config import TrainConfig
from resgrad.train.loop import train
from resgrad.train.trackers import LogConfig
import trackio
cfg = TrainConfig(**json.loads(sys.argv[1]))
train(cfg, progress=False, log=lambda s: None,
      log_to=LogConfig(to=("trackio",), hist_every=5, project="test"))
print(json.dumps(trackio.SQLiteStorage.get_logs("test", "run")))
"""


def test_trackio_local_database_holds_the_runs_values(tmp_path, text_file):
    pytest.importorskip("trackio")
    cfg = {**TINY, "data": text_file, "out_dir": str(tmp_path / "run"), "max_iters": 7}
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio")}
    res = subprocess.run([sys.executable, "-c", TRACKIO_SCRIPT, json.dumps(cfg)], env=env,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    logs = json.loads(res.stdout.strip().splitlines()[-1])
    rows: dict[int, dict] = {}
    for r in logs:
        rows.setdefault(r["step"], {}).update(r)
    want = _expected_scalars(cfg["out_dir"])
    assert sorted(rows) == list(range(8))
    for tag, (steps, values) in want.items():
        for s, v in zip(steps, values):
            assert rows[s][tag] == float(v), (tag, s)
    h = rows[5]["gradients/blocks.0.attn.w_qkv"]
    assert h["_type"] == "trackio.histogram" and sum(h["values"]) == 16 * 48


def test_a_resumed_wandb_run_continues_the_same_run_id(tmp_path, text_file, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    log_to = LogConfig(to=("wandb",), hist_every=0)
    out = _train(tmp_path, "run", text_file, log_to=log_to, max_iters=5)
    train(resume_config(out, max_iters=10), progress=False, log=lambda s: None, log_to=log_to)
    runs = sorted(d for d in os.listdir(os.path.join(out, "wandb")) if d.startswith("offline"))
    run_id = open(os.path.join(out, "wandb", "resgrad-run-id")).read().strip()
    assert len(runs) == 2 and all(f"-{run_id}" in r for r in runs)  # same second: "-1" added


def test_a_fresh_run_refuses_a_log_dir_holding_another_runs_events(tmp_path, text_file):
    other = _train(tmp_path, "other", text_file, max_iters=2)
    logdir = os.path.join(other, "tb")
    before = {n: open(os.path.join(_tb(other), n), "rb").read() for n in os.listdir(_tb(other))}
    log_to = LogConfig(to=("tensorboard",), dir=logdir, name="other")  # the other's run name
    with pytest.raises(ValueError, match="already holds TensorBoard event files.*--log-dir"):
        _train(tmp_path, "run", text_file, log_to=log_to, max_iters=2)
    after = {n: open(os.path.join(_tb(other), n), "rb").read() for n in os.listdir(_tb(other))}
    assert after == before  # the other run's events, untouched
    assert not os.path.exists(tmp_path / "run" / "last.ckpt")
    # under its own name, the run sits beside the other in the same log directory
    _train(tmp_path, "run", text_file, log_to=LogConfig(to=("tensorboard",), dir=logdir),
           max_iters=2)  # fmt: skip
    mux = event_multiplexer.EventMultiplexer(size_guidance={ea.SCALARS: 0})
    mux.AddRunsFromDirectory(logdir)
    mux.Reload()
    assert sorted(mux.Runs()) == ["other", "run"]
    assert [e.value for e in mux.Scalars("run", "train/loss")] == read_dynamics(
        tmp_path / "run")["loss"].tolist()  # fmt: skip


def test_a_fresh_run_clears_its_own_tensorboard_debris(tmp_path, text_file):
    """Killed before its first checkpoint, a run leaves events in its own tb/ and no
    checkpoint: the fresh run that follows starts its tb/ over (nothing is refused)."""
    out = tmp_path / "run"
    from resgrad.formats.events import EventFile

    with EventFile(out / "tb" / "run") as f:  # the killed run's
        f.write(_scalar_event_for_test(0, 99.0))
    _train(tmp_path, "run", text_file, max_iters=3)
    acc = _acc(_tb(out))
    assert [e.value for e in acc.Scalars("train/loss")] == read_dynamics(out)["loss"].tolist()
    assert len(os.listdir(_tb(out))) == 1


def _scalar_event_for_test(step, value):
    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.proto.summary_pb2 import Summary

    return Event(step=step, summary=Summary(value=[Summary.Value(tag="train/loss",
                                                                 simple_value=value)]))  # fmt: skip


def test_an_experiment_cell_killed_before_its_checkpoint_runs_again(tmp_path, text_file):
    """A cell's TensorBoard directory is its own: a worker killed before the cell's first
    checkpoint leaves events there, and the cell's next attempt starts them over."""
    from resgrad.formats.events import EventFile

    cfg = ExperimentConfig.defaults(
        "warmup", variants=("pre-ln",), depths=(1,), lrs=(1e-3,), warmups=(0,), seeds=(0,),
        max_iters=3, eval_interval=3, eval_iters=1, n_embd=16, block_size=8, batch_size=2,
        data=text_file,
    )  # fmt: skip
    out = str(tmp_path / "exp")
    ((name, cell),) = cfg.cells(out)
    log_to = TB.cell(name, out, "test")
    assert log_to.tensorboard_run(cell.out_dir) == os.path.join(out, "tb", name)
    with EventFile(log_to.tensorboard_run(cell.out_dir)) as f:  # the killed attempt's
        f.write(_scalar_event_for_test(0, 99.0))
    (row,) = run_cell(cell, log_to)
    assert row["iters"] == 3 and not row["diverged"]
    losses = [e.value for e in _acc(log_to.tensorboard_run(cell.out_dir)).Scalars("train/loss")]
    assert losses == read_dynamics(cell.out_dir)["loss"].tolist()


@pytest.mark.parametrize("given, project", [(None, "resgrad-warmup"), ("mine", "mine")])
def test_experiment_cells_log_to_the_experiments_project_unless_one_is_given(
    tmp_path, text_file, monkeypatch, given, project
):
    import resgrad.lab.experiments.experiment as experiments

    seen = []

    def capture(points, job, *a, **kw):
        seen.extend(points)
        raise KeyboardInterrupt  # stop before any cell trains

    monkeypatch.setattr(experiments, "run_grid", capture)
    cfg = ExperimentConfig.defaults("warmup", depths=(1,), lrs=(1e-3,), warmups=(0,),
                                    seeds=(0,), max_iters=4, data=text_file)  # fmt: skip
    log_to = LogConfig(to=("wandb",), **({} if given is None else {"project": given}))
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, str(tmp_path / "exp"), jobs=1, progress=False, log_to=log_to)
    assert [p[1][1].project for p in seen] == [project] * 2
    assert [p[1][1].name for p in seen] == [n for n, _ in cfg.cells(str(tmp_path / "exp"))]
