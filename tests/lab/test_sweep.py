import csv
import json
import os
import time

import numpy as np
import pytest

from resgrad.lab import sweep
from resgrad.lab.flow import FlowConfig, profile
from resgrad.lab.sweep import (
    ROW_FIELDS,
    SweepConfig,
    point_key,
    run_point,
    run_sweep,
    sidecar_path,
    sweep_plot_spec,
)
from resgrad.plots import make_figure, plotted_series

GRID = SweepConfig(
    variants=("pre-ln", "post-ln", "lesson-plain"),
    depths=(1, 3),
    widths=(8, 16),
    seeds=2,
    heads=2,
    seq=4,
    batch=2,
)  # 3 x 2 x 2 x 2 = 24 points


def n_rows(cfg):
    return sum(p.depth + 1 for p in cfg.points())


def done_keys(side):
    """The point keys a sidecar holds (its first line is a header)."""
    with open(side) as f:
        return [json.loads(line)["key"] for line in f.read().splitlines()[1:]]


def write_sidecar(out, done):
    with open(sidecar_path(out), "w") as f:
        f.write('{"resgrad_sweep_partial": 1}\n')
        for key, rows in done.items():
            f.write(json.dumps({"key": key, "rows": rows}) + "\n")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The grid run once in this process: the rows every backend must reproduce."""
    out = tmp_path_factory.mktemp("ref") / "ref.json"
    return run_sweep(GRID, out, jobs=1, progress=False).rows


def test_grid_rows_in_order_to_csv(tmp_path, reference):
    out = tmp_path / "s.csv"
    res = run_sweep(GRID, out, jobs=1, progress=False)
    assert res.computed == 24 and res.resumed == 0
    assert len(res.rows) == n_rows(GRID)
    rows = list(csv.DictReader(out.open()))
    assert tuple(rows[0]) == ROW_FIELDS and len(rows) == len(res.rows)
    for r, d in zip(rows, res.rows):
        assert float(r["stream_grad"]) == d["stream_grad"]
        assert r["param_grad"] == ("" if d["param_grad"] is None else repr(d["param_grad"]))
    order = [(r["variant"], r["depth"], r["width"], r["seed"]) for r in res.rows if r["layer"] == 0]
    assert order == [
        (p.variant, p.depth, p.width, p.seeds[0]) for p in GRID.points()
    ]  # grid order: variant, depth, width, seed
    assert res.rows == reference
    assert sorted(os.listdir(tmp_path)) == [".s.csv.lock", "s.csv"]  # the sidecar is gone


def test_rows_are_the_flow_profiles(reference):
    cfg = FlowConfig(variant="post-ln", depth=3, width=16, heads=2, seq=4, batch=2, seeds=(1,))
    prof = profile(cfg, 1)
    want = ("post-ln", 3, 16, 1)
    rows = [r for r in reference if (r["variant"], r["depth"], r["width"], r["seed"]) == want]
    assert [r["stream_grad"] for r in rows] == prof.stream_grad.tolist()
    assert [r["param_grad"] for r in rows] == prof.param_grad[""].tolist() + [None]
    assert run_point(cfg) == rows


def test_json_result(tmp_path, reference):
    out = tmp_path / "s.json"
    run_sweep(GRID, out, jobs=1, progress=False)
    assert json.loads(out.read_text()) == reference


def test_interrupted_sweep_resumes_and_skips_the_configs_done(tmp_path, monkeypatch, reference):
    out = tmp_path / "s.csv"
    real = sweep.run_point
    calls = []

    def dies_after_five(cfg):
        if len(calls) == 5:
            raise KeyboardInterrupt  # Ctrl-C in the middle of the grid
        calls.append(point_key(cfg))
        return real(cfg)

    monkeypatch.setattr(sweep, "run_point", dies_after_five)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(GRID, out, jobs=1, progress=False)
    assert not out.exists()  # no result until the grid is done
    side = sidecar_path(out)
    assert os.path.basename(side) == ".s.csv.partial.jsonl"
    assert sorted(done_keys(side)) == sorted(calls)

    done_before, calls[:] = list(calls), []
    monkeypatch.setattr(
        sweep, "run_point", lambda cfg: (calls.append(point_key(cfg)), real(cfg))[1]
    )
    res = run_sweep(GRID, out, jobs=1, progress=False)
    assert res.resumed == 5 and res.computed == 19
    assert not set(calls) & set(done_before)  # nothing done before is redone
    assert res.rows == reference
    assert not os.path.exists(side)
    assert len(list(csv.DictReader(out.open()))) == n_rows(GRID)


def test_a_sidecar_of_other_settings_is_not_taken_for_this_sweep(tmp_path):
    out = tmp_path / "s.csv"
    small = SweepConfig(variants=("lesson-plain",), depths=(2,), widths=(8,), seeds=1, batch=2)
    other = SweepConfig(variants=("lesson-plain",), depths=(2,), widths=(8,), seeds=1, batch=3)
    key = point_key(small.points()[0])
    fake = [{**r, "stream_grad": -1.0} for r in run_point(small.points()[0])]
    write_sidecar(out, {key: fake})
    res = run_sweep(other, out, jobs=1, progress=False)
    assert res.resumed == 0 and all(r["stream_grad"] > 0 for r in res.rows)
    # while the same settings do take it (which is how the fake rows show up here)
    write_sidecar(out, {key: fake})
    res = run_sweep(small, out, jobs=1, progress=False)
    assert res.resumed == 1 and res.computed == 0
    assert [r["stream_grad"] for r in res.rows] == [-1.0] * 3


def test_a_line_torn_by_a_crash_is_dropped_and_its_point_recomputed(tmp_path, reference):
    out = tmp_path / "s.json"
    points = GRID.points()
    first, second = points[0], points[1]
    write_sidecar(out, {point_key(first): run_point(first)})
    torn = json.dumps({"key": point_key(second), "rows": run_point(second)})[:-40]
    with open(sidecar_path(out), "a") as f:
        f.write(torn)  # no newline: the process died mid-write
    res = run_sweep(GRID, out, jobs=1, progress=False)
    assert res.resumed == 1 and res.computed == 23
    assert res.rows == reference


def test_a_damaged_sidecar_is_a_clear_error(tmp_path):
    out = tmp_path / "s.csv"
    write_sidecar(out, {})
    with open(sidecar_path(out), "a") as f:
        f.write("garbage\n{}\n")
    with pytest.raises(ValueError, match="unreadable at line 2.*delete it to start afresh"):
        run_sweep(GRID, out, jobs=1, progress=False)
    assert not out.exists()


def test_an_unreadable_sidecar_is_a_clear_error(tmp_path):
    out = tmp_path / "s.csv"
    with open(sidecar_path(out), "w") as f:
        f.write("{not json")
    with pytest.raises(ValueError, match="partial-results file .* is not a resgrad sweep's"):
        run_sweep(GRID, out, jobs=1, progress=False)
    assert not out.exists()


def test_loky_in_parallel_gives_exactly_the_sequential_rows(tmp_path, reference):
    res = run_sweep(GRID, tmp_path / "p.csv", jobs=2, backend="loky", progress=False)
    assert res.rows == reference


def test_dask_on_a_loopback_local_cluster_gives_exactly_the_same_rows(tmp_path, reference):
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=2,
        processes=False,
        host="127.0.0.1",
        protocol="tcp",
        dashboard_address=None,
    ) as cluster:
        addr = cluster.scheduler_address
        assert addr.startswith("tcp://127.0.0.1:")
        res = run_sweep(
            GRID, tmp_path / "d.csv", plot=tmp_path / "d.png", backend="dask", scheduler=addr,
            progress=False,
        )  # fmt: skip
        # the points really ran as tasks of this cluster's scheduler
        assert any("_keyed" in name for name in cluster.scheduler.task_prefixes)
    assert res.rows == reference and res.computed == 24
    assert (tmp_path / "d.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(os.listdir(tmp_path)) == [".d.csv.lock", "d.csv", "d.png"]


def test_unreachable_scheduler_fails_fast_and_leaves_nothing(tmp_path):
    t = time.monotonic()
    with pytest.raises(
        ConnectionError, match="cannot reach the Dask scheduler at 'tcp://127.0.0.1:1'"
    ):
        run_sweep(
            GRID, tmp_path / "s.csv", plot=tmp_path / "s.png", backend="dask",
            scheduler="tcp://127.0.0.1:1", connect_timeout=1.0, progress=False,
        )  # fmt: skip
    assert time.monotonic() - t < 15
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("reply", [b"", b"HTTP/1.0 400 Bad Request\r\n\r\n"])
def test_a_service_that_is_not_a_dask_scheduler_is_refused_at_once(tmp_path, reply):
    """Something else listening at the address: a web server that waits to be asked (the
    client used to wait on it past any timeout) or one that answers at once (its reply
    was read as a frame length: 'Unable to allocate 3.07 EiB')."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    stop = threading.Event()

    def serve():
        conn, _ = server.accept()
        with conn:
            conn.sendall(reply)
            stop.wait(30)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    said = "sent nothing within 1 s" if not reply else "answered 'HTTP/1.0'"
    t0 = time.monotonic()
    try:
        with pytest.raises(ConnectionError, match=f"is not a Dask scheduler: .*{said}"):
            run_sweep(
                GRID, tmp_path / "s.csv", backend="dask", scheduler=f"tcp://127.0.0.1:{port}",
                connect_timeout=1.0, progress=False,
            )  # fmt: skip
    finally:
        stop.set()
        server.close()
    assert time.monotonic() - t0 < 15
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "kwargs, exc, msg",
    [
        ({"out": "s.txt"}, ValueError, "expected a name ending in .csv or .json"),
        ({"out": "missing/s.csv"}, FileNotFoundError, "does not exist"),
        ({"out": "adir"}, ValueError, "expected a name ending in"),
        ({"out": "adir.csv"}, IsADirectoryError, "it is a directory"),
        ({"plot": "p.pdf"}, ValueError, "expected a file name ending in .png or .svg"),
        ({"plot": "missing/p.png"}, FileNotFoundError, "does not exist"),
        ({"backend": "ray"}, ValueError, "backend must be one of loky, dask"),
        ({"backend": "dask"}, ValueError, "needs a scheduler address"),
        ({"scheduler": "tcp://127.0.0.1:8786"}, ValueError, "is for backend 'dask'"),
        ({"jobs": 0}, ValueError, "jobs must be a positive integer"),
        ({"connect_timeout": 0}, ValueError, "connect_timeout must be a positive number"),
    ],
)
def test_bad_arguments_fail_before_anything_is_written(tmp_path, kwargs, exc, msg):
    (tmp_path / "adir").mkdir()
    (tmp_path / "adir.csv").mkdir()
    kw = {"out": "s.csv", **kwargs}
    out = tmp_path / kw.pop("out")
    if "plot" in kw:
        kw["plot"] = tmp_path / kw["plot"]
    with pytest.raises(exc, match=msg):
        run_sweep(GRID, out, progress=False, **kw)
    assert sorted(os.listdir(tmp_path)) == ["adir", "adir.csv"]


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        ({"variants": ("pre-ln", "sandwich")}, "variant must be one of"),
        ({"variants": ()}, "at least one variant"),
        ({"depths": (2, 0)}, "depths must hold positive integers, got 0"),
        ({"widths": ()}, "widths must list at least one value"),
        ({"widths": (32, 30)}, "width must be divisible by heads, got width 30 and heads 4"),
        ({"seeds": 0}, "seeds must be a positive integer"),
        ({"seeds": (4, 4)}, "seeds must be distinct, got 4 twice"),
        ({"seeds": (-1,)}, "seed must be an integer in"),
        ({"seeds": "01"}, "seeds must be a sequence of integers"),
        ({"seeds": 10**12}, "at most 100,000 run in one command"),  # refused before listed
        ({"batch": 0}, "batch must be a positive integer"),
        ({"loss": "l2"}, "loss must be one of"),
        ({"depths": (2, 2)}, "depths must be distinct"),
    ],
)
def test_bad_grid(kwargs, msg):
    with pytest.raises((ValueError, TypeError), match=msg):
        SweepConfig(**kwargs)


def test_summary_plot_is_the_mean_input_gradient_per_depth(reference):
    spec = sweep_plot_spec(reference)
    drawn = plotted_series(make_figure(spec))
    assert list(drawn) == [
        f"{v} C={w}" for v in ("pre-ln", "post-ln", "lesson-plain") for w in (8, 16)
    ]
    for label, (x, y) in drawn.items():
        v, w = label.split(" C=")
        assert x.tolist() == [1, 3]
        for d, yd in zip((1, 3), y):
            inputs = [
                r["stream_grad"] for r in reference
                if (r["variant"], r["width"], r["depth"], r["layer"]) == (v, int(w), d, 0)
            ]  # fmt: skip
            assert len(inputs) == 2 and yd == np.mean(inputs)
    ax = make_figure(spec).axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"


SMALL = SweepConfig(variants=("lesson-plain",), depths=(1, 2), widths=(8,), seeds=2, batch=2)


def test_each_point_is_on_disk_and_fsynced_before_the_next_starts(tmp_path, monkeypatch):
    """What a rerun after a crash would find: every finished point written through (flushed)
    and fsynced, before the next one is computed."""
    out = tmp_path / "s.csv"
    side = sidecar_path(out)
    synced, real_fsync = [], os.fsync

    def fsync(fd):
        st = os.fstat(fd)
        synced.append((st.st_ino, st.st_size))  # the file as it was made durable
        real_fsync(fd)

    seen, real = [], sweep.run_point

    def looks_at_the_sidecar(cfg):
        with open(side) as f:  # another reader: only what reached the file
            n = len(f.read().splitlines()) - 1
        st = os.stat(side)
        seen.append((n, (st.st_ino, st.st_size) in synced))
        return real(cfg)

    monkeypatch.setattr(sweep.os, "fsync", fsync)
    monkeypatch.setattr(sweep, "run_point", looks_at_the_sidecar)
    res = run_sweep(SMALL, out, jobs=1, progress=False)
    assert res.computed == 4
    assert seen == [(0, True), (1, True), (2, True), (3, True)]


def test_a_torn_tail_is_rewritten_as_a_sidecar_a_later_rerun_still_reads(tmp_path, monkeypatch):
    """The torn line is dropped and the file rewritten with its header: cut short again,
    the next run resumes from it rather than calling it another program's file."""
    out = tmp_path / "s.csv"
    first, second, *_ = SMALL.points()
    write_sidecar(out, {point_key(first): run_point(first)})
    with open(sidecar_path(out), "a") as f:
        f.write(json.dumps({"key": point_key(second), "rows": run_point(second)})[:-30])
    real, calls = sweep.run_point, []

    def dies_after_one(cfg):
        if calls:
            raise KeyboardInterrupt
        calls.append(cfg)
        return real(cfg)

    monkeypatch.setattr(sweep, "run_point", dies_after_one)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(SMALL, out, jobs=1, progress=False)
    with open(sidecar_path(out)) as f:
        assert f.readline() == '{"resgrad_sweep_partial": 1}\n'
    assert done_keys(sidecar_path(out)) == [point_key(first), point_key(second)]
    monkeypatch.setattr(sweep, "run_point", real)
    res = run_sweep(SMALL, out, jobs=1, progress=False)
    assert (res.resumed, res.computed) == (2, 2)
    assert res.rows == run_sweep(SMALL, tmp_path / "whole.csv", jobs=1, progress=False).rows


def test_explicit_seeds_are_the_grids_seeds(tmp_path):
    assert SMALL.seeds == (0, 1)  # a count K: seeds 0..K-1
    cfg = SweepConfig(variants=("post-ln",), depths=(2,), widths=(8,), seeds=[7, 3], heads=2,
                      seq=4, batch=2)  # fmt: skip
    assert cfg.seeds == (7, 3) and [p.seeds for p in cfg.points()] == [(7,), (3,)]
    res = run_sweep(cfg, tmp_path / "s.json", jobs=1, progress=False)
    assert [r["seed"] for r in res.rows if r["layer"] == 0] == [7, 3]
    for p in cfg.points():  # each point measured at its own seed
        rows = [r for r in res.rows if r["seed"] == p.seeds[0]]
        assert [r["stream_grad"] for r in rows] == profile(p, p.seeds[0]).stream_grad.tolist()
    assert json.loads((tmp_path / "s.json").read_text()) == res.rows
