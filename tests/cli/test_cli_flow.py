import csv
import io
import json
import os
import subprocess
import sys

import pytest

from resgrad.cli import flow_cmds, main
from resgrad.lab.flow import FlowConfig, lesson_per_layer, measure
from resgrad.lab.lesson import StackConfig
from tests.lesson_reference import LESSON_TABLE

SIZES = ["--depth", "3", "--width", "16", "--heads", "2", "--seq", "4", "--batch", "2"]


def run(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "resgrad", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


# -- resgrad flow ----------------------------------------------------------------------


def test_flow_json_is_the_librarys_records(capsys):
    assert (
        main(["flow", "--variant", "pre-ln,rezero", *SIZES, "--seeds", "2", "--format", "json"])
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    want = []
    for v in ("pre-ln", "rezero"):
        cfg = FlowConfig(variant=v, depth=3, width=16, heads=2, seq=4, batch=2, seeds=(0, 1))
        want += [r.as_dict() for r in measure(cfg)]
    assert data == want


def test_flow_of_ln_scaling_is_the_librarys_and_not_pre_lns(capsys):
    """At initialization (the paper's p = 1/2, no scaled init): the library's records, and
    a stream gradient other than pre-ln's."""
    out = _json_flow(capsys, ["--variant", "ln-scaling,pre-ln"])
    cfgs = [FlowConfig(variant=v, depth=3, width=16, heads=2, seq=4, batch=2)
            for v in ("ln-scaling", "pre-ln")]  # fmt: skip
    assert out == [r.as_dict() for c in cfgs for r in measure(c)]
    grads = {v: [r["mean"] for r in out if r["variant"] == v and r["quantity"] == "stream_grad"]
             for v in ("ln-scaling", "pre-ln")}  # fmt: skip
    assert len(grads["pre-ln"]) == 4 and grads["ln-scaling"] != grads["pre-ln"]


def _json_flow(capsys, args):
    assert main(["flow", *args, *SIZES, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_flow_csv_and_table(capsys):
    assert main(["flow", "--variant", "post-ln", *SIZES, "--format", "csv", "--loss", "randn"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {r["loss"] for r in rows} == {"randn"} and rows[0]["quantity"] == "stream_grad"
    assert main(["flow", "--variant", "lesson-plain", "--depth", "5", "--init", "xavier"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "gradient flow at initialization (lesson:0.5 init, L=5)"
    assert "grad mean" in lines[1] and len(lines) == 3 + 6


def test_flow_plot_png_and_svg(tmp_path, capsys):
    png, svg = tmp_path / "f.png", tmp_path / "f.svg"
    assert main(["flow", "--variant", "pre-ln,none", *SIZES, "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["flow", "--variant", "deepnorm", *SIZES, "--plot", str(svg)]) == 0
    assert svg.read_text().lstrip().startswith("<?xml") and "<svg" in svg.read_text()
    assert sorted(os.listdir(tmp_path)) == ["f.png", "f.svg"]


def test_flow_plot_quantity(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(flow_cmds, "save_plot", lambda spec, path: drawn.append(spec))
    assert (
        main(["flow", *SIZES, "--plot", str(tmp_path / "p.png"), "--plot-quantity", "param_grad"])
        == 0
    )
    cfg = FlowConfig(variant="pre-ln", depth=3, width=16, heads=2, seq=4, batch=2)
    want = [r.mean for r in measure(cfg) if r.quantity == "param_grad"]
    assert list(drawn[0].series[0].y) == want and len(want) == 3


# -- resgrad sweep ---------------------------------------------------------------------


def test_sweep_writes_rows_and_plot(tmp_path):
    out, plot = tmp_path / "s.csv", tmp_path / "s.svg"
    p = run(
        "sweep", "--variants", "pre-ln,lesson-residual", "--depths", "1,2", "--widths", "8",
        "--seeds", "2", "--heads", "2", "--seq", "4", "--batch", "2", "--out", str(out),
        "--plot", str(plot), "--jobs", "1", "--no-progress",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == f"wrote {out} (20 rows; 8 configs: 8 computed, 0 resumed)"
    assert len(list(csv.DictReader(out.open()))) == 20
    assert "<svg" in plot.read_text()
    assert sorted(os.listdir(tmp_path)) == [".s.csv.lock", "s.csv", "s.svg"]


def test_sweep_shows_a_progress_bar_when_asked(tmp_path):
    p = run(
        "sweep", "--variants", "lesson-plain", "--depths", "2", "--widths", "8", "--seeds", "3",
        "--batch", "2", "--out", str(tmp_path / "s.json"), "--jobs", "1", "--progress",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "sweep" in p.stderr and "3/3" in p.stderr


# -- resgrad depth --per-layer / --plot ------------------------------------------------


def test_depth_default_output_is_still_the_lessons_table_byte_for_byte():
    p = run("depth")
    assert p.returncode == 0 and p.stderr == "" and p.stdout == LESSON_TABLE


def test_depth_per_layer_table(capsys):
    assert main(["depth", "--per-layer", "--depths", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == " depth N | layer i |    no residual |  with residual"
    assert len(lines) == 2 + 4
    assert lines[2] == "       3 |       0 |   7.186534e-01 |       9.121788"
    assert lines[-1] == "       3 |       3 |   8.000000e+00 |       8.000000"


def test_depth_per_layer_csv_json_ratio(capsys):
    assert main(["depth", "--per-layer", "--format", "csv", "--ratio"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    ref = lesson_per_layer(StackConfig())
    assert len(rows) == len(ref) == 2 + 6 + 11 + 21
    assert [float(r["with_residual"]) for r in rows] == [r.with_residual for r in ref]
    assert float(rows[-1]["ratio"]) == 1.0
    assert main(["depth", "--per-layer", "--format", "json", "--depths", "2"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["layer"] for r in data["rows"]] == [0, 1, 2] and data["config"]["depths"] == [2]


def test_depth_plot_keeps_the_table_and_draws_the_deepest_stack(tmp_path, capsys):
    path = tmp_path / "d.png"
    assert main(["depth", "--plot", str(path)]) == 0
    assert capsys.readouterr().out == LESSON_TABLE + f"wrote {path}\n"  # the table, whole
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- bad input: one line on stderr, exit 2, nothing written ------------------------------


@pytest.mark.parametrize(
    "args, needle",
    [
        (["flow", "--variant", "pre-ln,sandwich"], "'sandwich'"),
        (["flow", "--depth", "0"], "'0'"),
        (["flow", "--width", "-8"], "'-8'"),
        (["flow", "--seeds", "0"], "'0'"),
        (["flow", "--width", "30", "--heads", "4"], "width 30 and heads 4"),
        (["flow", "--loss", "l1"], "'l1'"),
        (["flow", "--format", "xml"], "'xml'"),
        (["flow", "--plot", "f.pdf"], "f.pdf"),
        (["flow", "--plot", "missing/f.png", "--depth", "2"], "missing"),
        (["sweep", "--out", "s.csv", "--variants", "nope"], "'nope'"),
        (["sweep", "--out", "s.csv", "--depths", "2,0"], "'0'"),
        (["sweep", "--out", "s.csv", "--widths", "30"], "width 30 and heads 4"),
        (["sweep", "--out", "s.xlsx"], "s.xlsx"),
        (["sweep", "--out", "missing/s.csv"], "missing"),
        (["sweep", "--out", "s.csv", "--plot", "p.gif"], "p.gif"),
        (["sweep", "--out", "s.csv", "--backend", "dask"], "needs a scheduler address"),
        (["sweep", "--out", "s.csv", "--jobs", "0"], "'0'"),
        (["sweep", "--variants", "pre-ln"], "--out"),
        (["depth", "--plot", "d.jpg"], "d.jpg"),
        (["depth", "--per-layer", "--plot", "missing/d.png"], "missing"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_leaves_no_file(
    tmp_path, monkeypatch, capsys, args, needle
):
    monkeypatch.chdir(tmp_path)
    try:
        status = main(args)
    except SystemExit as e:  # argparse's own errors
        status = e.code
    out, err = capsys.readouterr()
    assert status == 2, err
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert needle in err
    assert os.listdir(tmp_path) == []


def test_bad_input_from_the_shell_too(tmp_path):
    p = run("flow", "--width", "30", "--heads", "4", cwd=tmp_path)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip() == (
        "resgrad flow: error: width must be divisible by heads, got width 30 and heads 4"
    )


def test_unreachable_scheduler_is_one_line_exit_2_and_no_file(tmp_path):
    p = run(
        "sweep", "--variants", "lesson-plain", "--depths", "2", "--out", "s.csv",
        "--plot", "s.png", "--backend", "dask", "--scheduler", "tcp://127.0.0.1:1",
        "--connect-timeout", "1", cwd=tmp_path,
    )  # fmt: skip
    assert p.returncode == 2
    assert (
        p.stderr.strip().splitlines() == [p.stderr.strip()]
        and "cannot reach the Dask scheduler at 'tcp://127.0.0.1:1'" in p.stderr
    )
    assert os.listdir(tmp_path) == []
