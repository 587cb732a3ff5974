import csv
import json
import os
import time

import numpy as np
import pytest

from resgrad.formats.sealed import seal
from resgrad.lab.experiments import (
    ROW_FIELDS,
    SweepConfig,
    grid,
    point_key,
    run_point,
    run_sweep,
    sidecar_path,
    sweep,
    sweep_plot_spec,
)
from resgrad.lab.flow import FlowConfig, profile
from resgrad.plots import make_figure, plotted_series
from tests.listings import list_backwards

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
    """A sidecar as a run writes it: each point a sealed record."""
    with open(sidecar_path(out), "w") as f:
        f.write('{"resgrad_sweep_partial": 1}\n')
        for key, rows in done.items():
            f.write(json.dumps(seal({"key": key, "rows": rows})) + "\n")


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


def _said(capsys):
    return [line for line in capsys.readouterr().err.splitlines() if "measured again" in line]


def test_a_damaged_line_is_said_and_its_point_measured_again(tmp_path, reference, capsys):
    out = tmp_path / "s.csv"
    first = GRID.points()[0]
    write_sidecar(out, {point_key(first): run_point(first)})
    with open(sidecar_path(out), "a") as f:
        f.write("garbage\n{}\n")
    res = run_sweep(GRID, out, jobs=1, progress=False)
    assert res.resumed == 1 and res.computed == 23 and res.rows == reference
    said = _said(capsys)
    assert len(said) == 2 and "line 3 of the partial-results file" in said[0]
    assert "line 4" in said[1] and all(sidecar_path(out) in s for s in said)


def test_an_edited_number_is_found_by_its_seal_and_measured_again(tmp_path, reference, capsys):
    out = tmp_path / "s.csv"
    points = GRID.points()
    write_sidecar(out, {point_key(p): run_point(p) for p in points[:2]})
    side = sidecar_path(out)
    lines = open(side).read().splitlines(keepends=True)
    entry = json.loads(lines[2])
    entry["rows"][0]["stream_grad"] *= 1.5  # still valid JSON, one number changed
    lines[2] = json.dumps(entry) + "\n"
    open(side, "w").writelines(lines)
    res = run_sweep(GRID, out, jobs=1, progress=False)
    assert res.resumed == 1 and res.computed == 23
    assert res.rows == reference  # the edited number is not in the result
    (said,) = _said(capsys)
    assert "line 3 of the partial-results file" in said and "edited or damaged" in said


def test_a_point_written_twice_is_used_neither_time(tmp_path, reference, capsys):
    out = tmp_path / "s.csv"
    first = GRID.points()[0]
    key, rows = point_key(first), run_point(first)
    other = [{**r, "stream_grad": -1.0} for r in rows]
    write_sidecar(out, {key: rows})
    with open(sidecar_path(out), "a") as f:
        f.write(json.dumps(seal({"key": key, "rows": other})) + "\n")  # sealed, but twice
    res = run_sweep(GRID, out, jobs=1, progress=False)
    assert res.resumed == 0 and res.computed == 24 and res.rows == reference
    (said,) = _said(capsys)
    assert "line 3 of the partial-results file" in said and "of line 2 again" in said


def test_a_sidecar_is_rewritten_with_each_point_once(tmp_path, monkeypatch):
    # a point measured again after a bad line is written once: a second rerun finds no twin
    out = tmp_path / "s.csv"
    first = GRID.points()[0]
    write_sidecar(out, {point_key(first): run_point(first)})
    with open(sidecar_path(out), "a") as f:
        f.write("garbage\n")
    calls = []
    real = sweep.run_point

    def dies_after_two(cfg):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(cfg)
        return real(cfg)

    monkeypatch.setattr(sweep, "run_point", dies_after_two)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(GRID, out, jobs=1, progress=False)
    keys = done_keys(sidecar_path(out))
    assert len(keys) == len(set(keys)) == 3  # the first, then the two measured since


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
        ({"widths": (8, 16, 8)}, r"widths must be distinct, got \(8, 16, 8\)"),
        ({"variants": ("pre-ln", "pre-ln")}, r"variants must be distinct, got \('pre-ln', "),
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


# -- statistics, ordering, bounds, cache keys and workers, each checked from first principles


def _row(variant, width, depth, seed, grad):
    """One layer-0 row as run_point writes it (only what the plot reads matters)."""
    return {"variant": variant, "depth": depth, "width": width, "heads": 2, "seq": 4, "batch": 2,
            "init": "gpt2", "loss": "lm", "seed": seed, "layer": 0, "stream_grad": grad,
            "stream_act": 1.0, "param_grad": 1.0}  # fmt: skip


def test_the_plot_is_the_mean_and_the_band_the_min_and_max_over_seeds_by_hand():
    """Three seeds whose values differ in mean, median, min and max; depths listed deepest
    first: the plot's x is the depths in increasing order, y the mean at each."""
    rows = [_row("pre-ln", 8, 4, s, v) for s, v in zip((0, 1, 2), (1.0, 2.0, 6.0))]
    rows += [_row("pre-ln", 8, 1, s, v) for s, v in zip((0, 1, 2), (10.0, 4.0, 1.0))]
    rows += [{**_row("pre-ln", 8, 4, 0, 5.0), "layer": 1}]  # not layer 0: not in the plot
    spec = sweep_plot_spec(rows)
    (s,) = spec.series
    assert s.label == "pre-ln" and list(s.x) == [1, 4]
    assert list(s.y) == [5.0, 3.0]  # (10 + 4 + 1) / 3, (1 + 2 + 6) / 3
    assert list(s.lo) == [1.0, 1.0] and list(s.hi) == [10.0, 6.0]
    assert spec.notes == ("C=8, T=4, B=2, loss lm; mean over 3 seed(s), band = min..max",)
    # the title names the init and the depth range: two sweeps' figures tell themselves apart
    assert spec.title.endswith("against depth L = 1..4,\nat initialization (gpt2 init)")
    xavier = sweep_plot_spec([{**r, "init": "xavier"} for r in rows])
    assert xavier.title.endswith("(xavier init)")
    one = sweep_plot_spec([_row("post-ln", 8, 2, 7, 3.0), _row("post-ln", 16, 2, 7, 4.0)])
    assert [(s.label, list(s.y), s.lo, s.hi) for s in one.series] == [
        ("post-ln C=8", [3.0], None, None), ("post-ln C=16", [4.0], None, None)]  # fmt: skip
    assert one.notes == ("C varies, T=4, B=2, loss lm; mean over 1 seed(s)",)


def test_rows_are_in_grid_order_whatever_order_the_points_finished_in(tmp_path, monkeypatch):
    """Points finish in any order (loky returns them unordered, a sidecar holds them in
    the order they finished): the rows follow the grid, not the finishing order."""
    whole = run_sweep(SMALL, tmp_path / "whole.csv", jobs=1, progress=False)
    out = tmp_path / "s.csv"
    points = SMALL.points()[::-1]  # the sidecar holds every point, the last first
    write_sidecar(out, {point_key(p): run_point(p) for p in points})
    res = run_sweep(SMALL, out, jobs=1, progress=False)
    assert (res.resumed, res.computed) == (4, 0) and res.rows == whole.rows
    assert out.read_text() == (tmp_path / "whole.csv").read_text()
    real = sweep.run_grid

    def finished_backwards(*args, **kwargs):
        res = real(*args, **kwargs)
        return grid.GridResult(dict(reversed(res.done.items())), res.computed, res.resumed)

    monkeypatch.setattr(sweep, "run_grid", finished_backwards)
    assert run_sweep(SMALL, tmp_path / "b.csv", jobs=1, progress=False).rows == whole.rows


def test_a_directory_listed_in_another_order_changes_nothing(tmp_path, monkeypatch):
    """Whatever order the file system lists a directory in, the same files come out."""
    (tmp_path / "a").mkdir()
    want = run_sweep(SMALL, tmp_path / "a" / "s.csv", jobs=1, progress=False)
    list_backwards(monkeypatch)
    (tmp_path / "b").mkdir()
    got = run_sweep(SMALL, tmp_path / "b" / "s.csv", jobs=1, progress=False)
    assert got.rows == want.rows
    assert (tmp_path / "b" / "s.csv").read_bytes() == (tmp_path / "a" / "s.csv").read_bytes()


POINT = SweepConfig(variants=("pre-ln",), depths=(1,), widths=(8,), seeds=(0,), heads=2, seq=4,
                    batch=2, init="gpt2", loss="lm", vocab=65)  # fmt: skip


@pytest.mark.parametrize(
    "field, value",
    [("variants", ("post-ln",)), ("depths", (2,)), ("widths", (16,)), ("seeds", (1,)),
     ("heads", 4), ("seq", 5), ("batch", 3), ("init", "xavier"), ("loss", "randn"),
     ("vocab", 66)],
)  # fmt: skip
def test_a_finished_point_is_reused_only_at_every_same_setting(tmp_path, field, value):
    """Every setting that changes a point's rows is in its key: a sidecar point measured
    with one setting changed (here: fake rows) is never taken for this sweep's."""
    import dataclasses

    other = dataclasses.replace(POINT, **{field: value})
    (p,), (q,) = POINT.points(), other.points()
    assert point_key(p) != point_key(q)
    out = tmp_path / "s.csv"
    write_sidecar(out, {point_key(p): [{**r, "stream_grad": -1.0} for r in run_point(p)]})
    res = run_sweep(other, out, jobs=1, progress=False)
    assert (res.resumed, res.computed) == (0, 1) and res.rows == run_point(q)
    write_sidecar(out, {point_key(p): [{**r, "stream_grad": -1.0} for r in run_point(p)]})
    same = run_sweep(POINT, out, jobs=1, progress=False)  # the same settings do reuse it
    assert same.resumed == 1 and same.rows[0]["stream_grad"] == -1.0


def test_the_grid_size_limit_is_exact():
    """At most MAX_GRID points: exactly that many are accepted (as a count of seeds or as
    the seeds themselves), one more is refused, either way."""
    one = dict(variants=("lesson-plain",), depths=(1,), widths=(1,), batch=1)
    assert len(SweepConfig(**one, seeds=sweep.MAX_GRID).seeds) == sweep.MAX_GRID
    assert len(SweepConfig(**one, seeds=tuple(range(sweep.MAX_GRID))).seeds) == sweep.MAX_GRID
    for seeds in (sweep.MAX_GRID + 1, tuple(range(sweep.MAX_GRID + 1))):
        with pytest.raises(ValueError, match="this grid has 100,001 points"):
            SweepConfig(**one, seeds=seeds)
    two = {**one, "variants": ("lesson-plain", "lesson-residual")}
    with pytest.raises(ValueError, match="this grid has 100,002 points"):
        SweepConfig(**two, seeds=sweep.MAX_GRID // 2 + 1)


@pytest.mark.parametrize(
    "kwargs, ok",
    [({"depths": (1,)}, True), ({"depths": (0,)}, False), ({"widths": (1,)}, True),
     ({"widths": (0,)}, False), ({"seeds": (2**32 - 1,)}, True), ({"seeds": (2**32,)}, False),
     ({"seeds": (0,)}, True), ({"seeds": (-1,)}, False), ({"seeds": 1}, True),
     ({"seeds": 0}, False), ({"batch": 1}, True), ({"batch": 0}, False)],
)  # fmt: skip
def test_each_bound_of_the_grid_just_inside_and_just_outside(kwargs, ok):
    cfg = {"variants": ("lesson-plain",), "depths": (2,), "widths": (4,), "seeds": 1,
           "batch": 2, **kwargs}  # fmt: skip
    if ok:
        SweepConfig(**cfg)
    else:
        with pytest.raises(ValueError, match=f"{next(iter(kwargs)).rstrip('s')}"):
            SweepConfig(**cfg)


@pytest.mark.parametrize(
    "kwargs, ok",
    [({"jobs": 1}, True), ({"jobs": 0}, False), ({"connect_timeout": 1e-9}, True),
     ({"connect_timeout": 0.0}, False), ({"connect_timeout": -1.0}, False)],
)  # fmt: skip
def test_the_backend_bounds_just_inside_and_just_outside(kwargs, ok):
    args = {"jobs": 2, "backend": "loky", "scheduler": None, "connect_timeout": 5.0, **kwargs}
    if ok:
        assert grid.check_backend(**args) == args["jobs"]
    else:
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            grid.check_backend(**args)


# the worker side of a local grid, in a process of its own: its parent forks it and dies
# before its task begins ("before"), or while it runs ("during")
_ORPHAN = r"""
import os, sys, time
from resgrad.lab.experiments import grid
marker, when = sys.argv[1], sys.argv[2]

def job(seconds):
    open(marker + ".started", "w").close()
    time.sleep(seconds)
    open(marker + ".done", "w").close()
    return []

parent = os.getpid()
child = os.fork()
if child:
    print(child, flush=True)
    if when == "during":
        while not os.path.exists(marker + ".started"):
            time.sleep(0.01)
    os._exit(0)
sys.stdout.close()
if when == "before":
    while os.getppid() == parent:  # orphaned: adopted by init or a subreaper
        time.sleep(0.01)
grid._keyed(job, "key", 5.0, parent)
open(marker + ".returned", "w").close()
"""


@pytest.mark.parametrize("when", ["before", "during"])
def test_a_worker_whose_parent_died_exits_before_or_during_its_task(tmp_path, when):
    """The watchdog of a local worker, in real processes: a worker whose parent (the process
    running the grid) is gone exits at once, whether the parent died before its task began
    (it never starts it) or while it runs (it stops within a fraction of a second)."""
    import subprocess
    import sys

    import psutil

    marker = str(tmp_path / "w")
    src = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "src"))
    p = subprocess.run([sys.executable, "-c", _ORPHAN, marker, when], capture_output=True,
                       text=True, timeout=60, env={**os.environ, "PYTHONPATH": src})  # fmt: skip
    assert p.returncode == 0, p.stderr
    t0 = time.monotonic()
    try:
        worker = psutil.Process(int(p.stdout.split()[0]))
        while worker.is_running() and worker.status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() - t0 < 3, f"the orphaned worker runs on ({when})"
            time.sleep(0.02)
    except psutil.NoSuchProcess:
        pass
    finally:
        try:
            psutil.Process(int(p.stdout.split()[0])).kill()  # a failing test leaves no orphan
        except psutil.NoSuchProcess:
            pass
    assert os.path.exists(marker + ".started") == (when == "during")
    assert not os.path.exists(marker + ".done") and not os.path.exists(marker + ".returned")


def test_the_grid_order_is_variant_then_depth_then_width_then_seed():
    """From first principles: the points (and so the rows) in the nested order the docs give,
    each axis in the order it was given (not sorted)."""
    import itertools

    cfg = SweepConfig(variants=("post-ln", "lesson-plain", "pre-ln"), depths=(3, 1),
                      widths=(16, 8), seeds=(5, 2), heads=2, seq=4, batch=2)  # fmt: skip
    want = list(itertools.product(cfg.variants, (3, 1), (16, 8), (5, 2)))
    assert [(p.variant, p.depth, p.width, p.seeds[0]) for p in cfg.points()] == want


def _sigint_disposition(point):
    """A grid job that reports how its process handles SIGINT."""
    import signal

    return [{"sigint": str(signal.getsignal(signal.SIGINT))}]


def test_a_local_worker_leaves_ctrl_c_to_the_grid_that_runs_it():
    # Ctrl-C at a terminal reaches every process of the group: a worker that took it would
    # print its own traceback while the grid tears the pool down and says its one line
    import signal
    from concurrent.futures import ProcessPoolExecutor

    parent = os.getpid()
    with ProcessPoolExecutor(1) as pool:
        key, rows = pool.submit(grid._keyed, _sigint_disposition, "k", None, parent).result()
    assert key == "k" and rows == [{"sigint": str(signal.SIG_IGN)}]
    # the grid's own process (jobs=1 runs the points there) keeps Ctrl-C: from the default
    # handler (set here, whatever an earlier test in this process left), _keyed changes nothing
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _, rows = grid._keyed(_sigint_disposition, "k", None, parent)
    assert rows[0]["sigint"] != str(signal.SIG_IGN)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _rows_of(point):
    return [{"x": point}]


def test_the_bar_counts_each_points_size_in_its_unit_resumed_ones_included(tmp_path, monkeypatch):
    """A grid given sizes counts what its points do (a model's checkpoints), not the points:
    the bar's total is their sum, a resumed point starts it at its size, and each finished
    point moves it by its own."""
    from resgrad.lab.experiments import grid

    seen = {}

    class Bar:
        def __init__(self, total, initial, desc, unit, disable):
            seen.update(total=total, initial=initial, unit=unit, steps=[])

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

        def update(self, n):
            seen["steps"].append(n)

    monkeypatch.setattr(grid, "tqdm", Bar)
    side = str(tmp_path / "side.jsonl")
    points = [("a", 1), ("b", 2), ("c", 3)]
    sizes = {"a": 7, "b": 11, "c": 13}
    grid.run_grid(points[:1], _rows_of, side, jobs=1, sizes=sizes, unit="checkpoint")
    assert seen == {"total": 7, "initial": 0, "unit": "checkpoint", "steps": [7]}
    grid.run_grid(points, _rows_of, side, jobs=1, sizes=sizes, unit="checkpoint")
    assert (seen["total"], seen["initial"]) == (31, 7)  # "a" was done: it counts as done
    assert sorted(seen["steps"]) == [11, 13]
    grid.run_grid(points, _rows_of, str(tmp_path / "other.jsonl"), jobs=1)  # no sizes: 1 each
    assert (seen["total"], seen["unit"], seen["steps"]) == (3, "config", [1, 1, 1])
