"""Training experiments: a grid of real runs, summarized over seeds, resumable, and every
cell an ordinary run directory."""

import csv
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys

import numpy as np
import pytest

from resgrad.formats.checkpoint import load_checkpoint
from resgrad.formats.sealed import seal
from resgrad.lab.experiments import ExperimentConfig, run_experiment, summarize
from resgrad.lab.experiments import experiment as E
from resgrad.train.config import TrainConfig
from resgrad.train.dynamics import read_dynamics
from tests.listings import list_backwards

TINY = dict(variants=("pre-ln", "post-ln"), depths=(2,), lrs=(1e-3,), warmups=(0, 5), seeds=2,
            n_embd=16, n_head=2, block_size=8, batch_size=4, max_iters=12, eval_interval=6,
            eval_iters=1)  # fmt: skip


@pytest.fixture
def data(tmp_path):
    p = tmp_path / "data.txt"
    p.write_text("the quick brown fox jumps over the lazy dog. " * 40, encoding="utf-8")
    return str(p)


def test_a_grid_of_runs_is_summarized_over_seeds(tmp_path, data):
    cfg = ExperimentConfig(name="warmup", data=data, **TINY)
    out = str(tmp_path / "exp")
    res = run_experiment(cfg, out, jobs=1, progress=False)
    with open(os.path.join(out, "cells.csv")) as f:
        cells = list(csv.DictReader(f))
    assert len(cells) == 8 and {c["variant"] for c in cells} == {"pre-ln", "post-ln"}
    for c in cells:  # every cell is an ordinary run: its val loss is its last evaluation's
        run = os.path.join(
            out, "runs", f"{c['variant']}_L2_lr0.001_w{c['warmup_iters']}_s{c['seed']}"
        )
        evals = [json.loads(ln) for ln in open(os.path.join(run, "metrics.jsonl"))]
        evals = [e for e in evals if e["kind"] == "eval"]
        assert float(c["val_loss"]) == evals[-1]["val_loss"] and c["iters"] == "12"
        assert os.path.exists(os.path.join(run, "dynamics.bin"))
    s = next(r for r in res["summary"] if r["variant"] == "post-ln" and r["warmup_iters"] == 5)
    vals = [float(c["val_loss"]) for c in cells if c["variant"] == "post-ln"
            and c["warmup_iters"] == "5"]  # fmt: skip
    assert s["val_mean"] == pytest.approx(statistics.mean(vals))
    assert s["val_std"] == pytest.approx(statistics.stdev(vals)) and s["seeds"] == 2
    assert os.path.getsize(os.path.join(out, "warmup.png")) > 1000
    assert "| post-ln | 2 | 0.001 | 5 |" in open(os.path.join(out, "summary.md")).read()
    assert not os.path.exists(os.path.join(out, ".cells.csv.partial.jsonl"))


def test_a_crashed_experiment_resumes_where_it_stopped(tmp_path, data, monkeypatch):
    cfg = ExperimentConfig(name="depth", data=data, **{**TINY, "variants": ("pre-ln",)})
    out = str(tmp_path / "exp")
    real, calls = E.run_cell, []

    def dies_after_three(c):
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(c.out_dir)
        return real(c)

    monkeypatch.setattr(E, "run_cell", dies_after_three)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, out, jobs=1, progress=False)
    monkeypatch.setattr(E, "run_cell", real)
    whole = run_experiment(cfg, str(tmp_path / "whole"), jobs=1, progress=False)
    resumed = run_experiment(cfg, out, jobs=1, progress=False)
    assert resumed["summary"] == whole["summary"]  # the same numbers as an unbroken run


def test_a_rerun_with_other_settings_is_refused_not_mixed_in(tmp_path, data):
    """Cells are found by name (variant, depth, lr, warm-up, seed); a rerun into the same
    directory with another width or length would otherwise report the old cells' numbers
    under the new settings."""
    small = {**TINY, "variants": ("pre-ln",), "warmups": (0,), "seeds": 1}
    out = str(tmp_path / "exp")
    first = run_experiment(ExperimentConfig(name="depth", data=data, **small), out, jobs=1,
                           progress=False)  # fmt: skip
    again = run_experiment(ExperimentConfig(name="depth", data=data, **small), out, jobs=1,
                           progress=False)  # fmt: skip
    assert again["summary"] == first["summary"]  # the same flags: the finished cells stand
    for change, named in (({"n_embd": 32}, "n_embd is 32"), ({"max_iters": 18}, "max_iters is 18"),
                          ({"eval_iters": 2}, "eval_iters is 2")):  # fmt: skip
        cfg = ExperimentConfig(name="depth", data=data, **{**small, **change})
        with pytest.raises(ValueError, match=f"other settings.*{named}.*another --out-dir"):
            run_experiment(cfg, out, jobs=1, progress=False)
    assert json.load(open(os.path.join(out, "summary.json")))["config"]["n_embd"] == 16


def test_a_cell_cut_short_resumes_from_its_checkpoint(tmp_path, data):
    cfg = ExperimentConfig(name="depth", data=data, **TINY)
    (_, cell), *_ = cfg.cells(str(tmp_path))
    import dataclasses

    from resgrad.train.loop import train

    train(dataclasses.replace(cell, max_iters=6), progress=False, log=lambda s: None)
    (row,) = E.run_cell(cell)  # picks up at iteration 6
    (fresh,) = E.run_cell(dataclasses.replace(cell, out_dir=str(tmp_path / "fresh")))
    assert row["iters"] == 12 and row["val_loss"] == fresh["val_loss"]


def test_a_diverged_cell_is_a_row_not_an_error(tmp_path, data):
    cfg = ExperimentConfig(name="warmup", data=data, **{**TINY, "lrs": (1e6,), "warmups": (0,),
                           "variants": ("residual",), "seeds": 1})  # fmt: skip
    (_, cell), *_ = cfg.cells(str(tmp_path))
    (row,) = E.run_cell(cell)
    assert row["diverged"] and row["diverged_at"] == row["iters"] < 12
    (s,) = summarize([row, {**row, "seed": 1, "diverged": False, "val_loss": 2.0}])
    assert s["diverged"] == 1 and s["val_mean"] == 2.0 and s["val_std"] is None


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"name": "nope"}, "unknown experiment 'nope'"),
        ({"depths": ()}, "depths must be a non-empty list"),
        ({"lrs": (0.0,)}, "lrs must hold numbers"),
        ({"warmups": (20,)}, "warm-up 20 must be shorter than max_iters 12"),
        ({"variants": ("pre-ln", "sideways")}, "unknown variant 'sideways'"),
        ({"seeds": 0}, "seeds must be a positive integer"),
        ({"seeds": (3, 1, 3)}, "seeds must be distinct, got 3 twice"),
        ({"seeds": (1, -2)}, r"seed must be an integer in \[0, 2\*\*32\), got -2"),
        ({"seeds": ()}, "seeds must hold at least one seed"),
        ({"seeds": 10**12}, "at most 100,000 run in one command"),  # refused before listed
    ],
)
def test_bad_configs_name_the_value(kw, message):
    with pytest.raises(ValueError, match=message):
        ExperimentConfig(**{"name": "warmup", **TINY, **kw})


def test_the_defaults_are_the_papers_grids():
    w = ExperimentConfig.defaults("warmup")
    assert set(w.variants) == {"pre-ln", "post-ln"} and 0 in w.warmups and len(w.lrs) >= 2
    d = ExperimentConfig.defaults("depth")
    assert set(d.variants) == {"pre-ln", "post-ln", "deepnorm"} and len(d.depths) >= 3
    r = ExperimentConfig.defaults("residual")
    assert (r.variants, r.depths, r.n_embd, r.max_iters) == (("none", "pre-ln"), (12,), 128, 600)
    assert w.seeds == d.seeds == r.seeds == (0, 1, 2)  # the README's figures: seeds 0-2
    # the papers' settings: no clipping in warm-up and depth (Xiong et al.; DeepNet's post-LN
    # baseline), and DeepNet's Xavier init
    assert (w.grad_clip, d.grad_clip, r.grad_clip) == (0.0, 0.0, 1.0)
    assert (w.init, d.init, r.init) == ("gpt2", "xavier", "gpt2")
    for cfg in (w, d, r):  # and every cell trains with them
        for name, c in cfg.cells("out"):
            assert (c.init, c.grad_clip, c.max_iters) == (cfg.init, cfg.grad_clip, cfg.max_iters)
            assert (c.min_lr, c.lr_decay_iters) == (c.lr / 10, cfg.max_iters)
            assert name.endswith(f"_s{c.seed}") and c.out_dir.endswith(name)


def test_cli_bad_flags_are_one_line_exit_2(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for args, message in ((["warmup", "--lrs", "0"], "expected a positive number"),
                          (["depth", "--warmups", "400"], "must be shorter than max_iters"),
                          (["nope"], "invalid choice")):  # fmt: skip
        p = subprocess.run([sys.executable, "-m", "resgrad", "experiment", *args,
                            "--out-dir", str(tmp_path)], capture_output=True, text=True,
                           env=env)  # fmt: skip
        assert p.returncode == 2 and message in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1


def test_summary_counts_only_non_diverged_seeds():
    base = {"variant": "a", "n_layer": 1, "lr": 1.0, "warmup_iters": 0}
    # seed 2 diverged after an evaluation: its row keeps that evaluation's (finite) loss
    vals = [1.0, 3.0, 5.0]
    rows = [{**base, "seed": s, "diverged": s == 2, "val_loss": v} for s, v in enumerate(vals)]
    (s,) = summarize(rows)
    assert (s["val_mean"], s["val_std"], s["diverged"], s["seeds"]) == (2.0, 2**0.5, 1, 3)
    assert (s["val_min"], s["val_max"]) == (1.0, 3.0)
    other = {**base, "lr": 2.0, "seed": 0, "diverged": True, "val_loss": float("nan")}
    assert summarize([*rows, other])[1] == {**base, "lr": 2.0, "seeds": 1, "diverged": 1,
                                            "val_mean": None, "val_std": None, "val_min": None,
                                            "val_max": None}  # fmt: skip


def test_explicit_seeds_name_the_cells_rows_and_summary(tmp_path, data):
    """Seeds 100 and 7, not 0..K-1: the cells' names, their runs, the rows and summary.json
    carry the seeds asked for (and the count form still means 0..K-1)."""
    assert ExperimentConfig(name="depth", **{**TINY, "seeds": 2}).seeds == (0, 1)
    cfg = ExperimentConfig(name="depth", data=data, **{**TINY, "variants": ("pre-ln",),
                           "warmups": (0,), "seeds": [100, 7]})  # fmt: skip
    assert cfg.seeds == (100, 7) and cfg.n_cells == 2
    out = str(tmp_path / "exp")
    res = run_experiment(cfg, out, jobs=1, progress=False)
    assert sorted(os.listdir(os.path.join(out, "runs"))) == ["pre-ln_L2_lr0.001_w0_s100",
                                                             "pre-ln_L2_lr0.001_w0_s7"]  # fmt: skip
    for s in (100, 7):  # each run really trained at its seed
        ckpt = load_checkpoint(os.path.join(out, "runs", f"pre-ln_L2_lr0.001_w0_s{s}", "last.ckpt"))
        assert ckpt.config["train"]["seed"] == s
    with open(os.path.join(out, "cells.csv")) as f:
        assert [r["seed"] for r in csv.DictReader(f)] == ["100", "7"]
    saved = json.load(open(os.path.join(out, "summary.json")))
    assert saved["config"]["seeds"] == [100, 7] and res["summary"][0]["seeds"] == 2


def _cell(tmp_path, data, **kw):
    cfg = ExperimentConfig(name="warmup", data=data, **{**TINY, "variants": ("pre-ln",),
                           "warmups": (4,), "seeds": 1, **kw})  # fmt: skip
    ((_, cell),) = cfg.cells(str(tmp_path / "x"))
    return cell


def test_a_cells_row_is_recomputed_from_its_run_files(tmp_path, data):
    """Every field of a row, from the run's own files: the losses of its last evaluation, the
    best validation loss of all of them, block 0's gradient (metrics.jsonl's per-layer norms)
    and the largest block's update ratio (dynamics.bin), each a mean over the last 10% of
    the steps, and the learning rate of every step from warm-up and cosine down to lr / 10."""
    cell = _cell(tmp_path, data, depths=(3,), max_iters=30, eval_interval=10, lrs=(3e-3,))
    (row,) = E.run_cell(cell)
    records = [json.loads(ln) for ln in open(os.path.join(cell.out_dir, "metrics.jsonl"))]
    evals = [r for r in records if r["kind"] == "eval"]
    steps = [r for r in records if r["kind"] == "iter"]
    assert [r["iter"] for r in steps] == list(range(30)) and row["iters"] == 30
    assert (row["train_loss"], row["val_loss"]) == (evals[-1]["train_loss"], evals[-1]["val_loss"])
    assert row["best_val_loss"] == min(e["val_loss"] for e in evals)
    assert (row["variant"], row["n_layer"], row["lr"], row["warmup_iters"], row["seed"]) == (
        "pre-ln",
        3,
        3e-3,
        4,
        0,
    )
    assert row["diverged"] is False and row["diverged_at"] is None and row["seconds"] > 0
    tail = steps[-3:]  # the last 10% of 30 steps
    assert row["grad_block0"] == pytest.approx(
        np.mean([r["layer_grad_norms"][0] for r in tail]), rel=1e-6
    )
    upd = read_dynamics(cell.out_dir)["update"]  # (steps, L): ||update|| / ||weights||
    assert upd.shape == (30, 3)
    assert row["update_max"] == pytest.approx(max(np.mean(upd[-3:, i]) for i in range(3)))
    lr, lo, w = 3e-3, 3e-4, 4
    for r in steps:  # nanoGPT's schedule by hand: the cell decays to lr / 10 at max_iters
        it = r["iter"]
        want = (
            lr * (it + 1) / (w + 1)
            if it < w
            else (lo + 0.5 * (1 + math.cos(math.pi * (it - w) / (30 - w))) * (lr - lo))
        )
        assert r["lr"] == pytest.approx(want, rel=1e-12), it


def test_best_val_loss_is_the_best_evaluation_not_the_last(tmp_path, data):
    """A run whose validation loss rose after its best evaluation (lr 0.03, no clipping): the
    row's best_val_loss is the minimum over every evaluation, val_loss the last one's."""
    cell = _cell(tmp_path, data, lrs=(3e-2,), warmups=(0,), eval_interval=4, grad_clip=0.0)
    (row,) = E.run_cell(cell)
    with open(os.path.join(cell.out_dir, "metrics.jsonl")) as f:
        vals = [r["val_loss"] for r in map(json.loads, f) if r["kind"] == "eval"]
    assert len(vals) == 4 and min(vals) < vals[-1]  # the last evaluation is not the best
    assert (row["val_loss"], row["best_val_loss"]) == (vals[-1], min(vals))


def test_clipping_off_trains_on_the_raw_gradient(tmp_path, data):
    """The warm-up and depth experiments train with grad_clip 0 (off). Off must mean the
    raw gradient: the same run as with a clip no gradient reaches, and unlike a clip of 1,
    which the first steps' norms (above 1 here) do reach."""
    off = E.run_cell(_cell(tmp_path / "off", data, grad_clip=0.0))[0]
    huge = E.run_cell(_cell(tmp_path / "huge", data, grad_clip=1e9))[0]
    one_cell = _cell(tmp_path / "one", data, grad_clip=1.0)
    one = E.run_cell(one_cell)[0]
    dyn = read_dynamics(_cell(tmp_path / "off", data, grad_clip=0.0).out_dir)
    assert dyn["grad_norm"].max() > 1.0 and not dyn["clipped"].any()
    assert read_dynamics(one_cell.out_dir)["clipped"].any()
    assert (off["val_loss"], off["grad_block0"]) == (huge["val_loss"], huge["grad_block0"])
    assert off["val_loss"] != one["val_loss"]


# -- statistics, ordering, bounds and the key of a finished cell, each from first principles


def test_the_summary_of_three_seeds_by_hand():
    """mean, std with ddof=1, min and max of 2, 6 and 1 (each differs from its look-alikes:
    the median is 2, the population std 2.16, the first and last seeds' 2 and 1)."""
    base = {"variant": "a", "n_layer": 1, "lr": 1.0, "warmup_iters": 0, "diverged": False}
    rows = [{**base, "seed": s, "val_loss": v} for s, v in zip((0, 1, 2), (2.0, 6.0, 1.0))]
    (s,) = summarize(rows)
    assert s["val_mean"] == 3.0 and s["val_std"] == pytest.approx(7**0.5, rel=1e-15)
    assert (s["val_min"], s["val_max"], s["seeds"], s["diverged"]) == (1.0, 6.0, 3, 0)
    assert E.format_summary([s]).splitlines()[2] == "| a | 1 | 1 | 0 | 3.000 ± 2.646 | 0/3 |"
    # groups in the order of the rows, one per setting but the seed
    other = [{**r, "lr": 2.0} for r in rows[:2]]
    assert [(g["lr"], g["seeds"]) for g in summarize([*other, *rows])] == [(2.0, 2), (1.0, 3)]


def test_the_figure_draws_the_summary_and_the_mean_curve_over_seeds(tmp_path, monkeypatch):
    """Left: each group's val_mean with val_std as its error bar; right: at each evaluation,
    the mean over the seeds of their validation losses (three seeds by hand). The lrs are
    given largest first; the error bars run along the lr axis, smallest first."""
    cfg = ExperimentConfig(name="warmup", **{**TINY, "variants": ("pre-ln",), "warmups": (0,),
                                             "seeds": 3, "lrs": (2e-3, 1e-3)})  # fmt: skip
    out = str(tmp_path)
    curves = {0: [(0, 4.0), (6, 1.0)], 1: [(0, 5.0), (6, 2.0)], 2: [(0, 9.0), (6, 6.0)]}
    rows, names = [], {}
    for name, c in cfg.cells(out):
        os.makedirs(c.out_dir)
        with open(os.path.join(c.out_dir, "metrics.jsonl"), "w") as f:
            for it, v in curves[c.seed]:
                v *= c.lr * 1e3  # the second lr's curves: twice the first's
                f.write(json.dumps({"kind": "eval", "iter": it, "train_loss": v,
                                    "val_loss": v}) + "\n")  # fmt: skip
        rows.append({"variant": c.variant, "n_layer": c.n_layer, "lr": c.lr,
                     "warmup_iters": c.warmup_iters, "seed": c.seed, "diverged": False,
                     "val_loss": curves[c.seed][-1][1] * c.lr * 1e3})  # fmt: skip
        names[json.dumps([c.variant, c.n_layer, c.lr, c.warmup_iters, c.seed])] = name
    summary = summarize(rows)
    figs = []
    monkeypatch.setattr(E, "figure_bytes", lambda fig, fmt: figs.append(fig) or b"")
    E.render_figure(cfg, rows, summary, out, names, entropy=1.5)
    ax1, ax2 = figs[0].axes
    (bars,) = ax1.containers
    assert list(bars.lines[0].get_ydata()) == [3.0, 6.0]  # lr 1e-3, 2e-3: means of the seeds
    spans = [seg[1][1] - seg[0][1] for seg in bars.lines[2][0].get_segments()]
    assert spans == pytest.approx([2 * 7**0.5, 4 * 7**0.5])  # mean ± std: twice the std
    assert list(bars.lines[0].get_xdata()) == [1e-3, 2e-3]
    for line, scale in zip(ax2.get_lines(), (2, 1)):  # one per group, in the grid's order
        assert list(line.get_xdata()) == [0, 6]
        assert list(line.get_ydata()) == pytest.approx([6.0 * scale, 3.0 * scale])


def test_cells_are_in_grid_order_whatever_order_they_finished_or_are_listed_in(
    tmp_path, data, monkeypatch
):
    """Cells finish in any order (loky returns them unordered, the sidecar keeps the order
    they finished in) and a directory may list its runs in any order: cells.csv and the
    summary follow the grid (here its lrs, given largest first)."""
    cfg = ExperimentConfig(name="depth", data=data, **{**TINY, "variants": ("pre-ln",),
                           "warmups": (0,), "lrs": (3e-3, 1e-3), "seeds": 1, "max_iters": 3,
                           "eval_interval": 3})  # fmt: skip
    real = E.run_grid

    def finished_backwards(*args, **kwargs):
        grid = real(*args, **kwargs)
        return dataclasses.replace(grid, done=dict(reversed(grid.done.items())))

    monkeypatch.setattr(E, "run_grid", finished_backwards)
    list_backwards(monkeypatch)
    out = tmp_path / "exp"
    got = run_experiment(cfg, str(out), jobs=1, progress=False)
    assert [s["lr"] for s in got["summary"]] == [3e-3, 1e-3]
    cells = list(csv.DictReader(open(out / "cells.csv")))
    assert [c["lr"] for c in cells] == ["0.003", "0.001"]
    for c in cells:  # each row is its own cell's
        run = out / "runs" / f"pre-ln_L2_lr{float(c['lr']):g}_w0_s0"
        evals = [json.loads(ln) for ln in open(run / "metrics.jsonl")]
        assert float(c["val_loss"]) == [e for e in evals if e["kind"] == "eval"][-1]["val_loss"]


def test_every_setting_of_a_cell_is_in_its_key():
    """A finished cell's row is found by a key that changes with every setting of its run
    but where it lives (out_dir, resume), and with the text it trains on."""
    (_, cell), *_ = ExperimentConfig(name="warmup", **TINY).cells("out")
    key = E.cell_key(cell, "a" * 64)
    assert E.cell_key(cell, "b" * 64) != key
    for f in dataclasses.fields(cell):
        changed = dataclasses.replace(cell)
        object.__setattr__(changed, f.name, "<another value>")
        assert (E.cell_key(changed, "a" * 64) == key) == (f.name in ("out_dir", "resume")), f.name


def test_a_finished_cell_of_other_settings_is_not_reused(tmp_path, data):
    """A sidecar row of a cell evaluated over another number of batches (eval_iters, which a
    plain resume may change) is not taken for this experiment's: the cell trains."""
    small = {**TINY, "variants": ("pre-ln",), "warmups": (0,), "seeds": 1, "max_iters": 6,
             "eval_interval": 3}  # fmt: skip
    cfg = ExperimentConfig(name="depth", data=data, **small)
    other = ExperimentConfig(name="depth", data=data, **{**small, "eval_iters": 2})
    out = str(tmp_path / "exp")
    os.makedirs(out)
    sha = E.load_corpus(data, cfg.block_size).sha256
    ((_, a),), ((_, b),) = cfg.cells(out), other.cells(out)
    fake = {"variant": "pre-ln", "n_layer": 2, "lr": 1e-3, "warmup_iters": 0, "seed": 0,
            "iters": 6, "train_loss": -1.0, "val_loss": -1.0, "best_val_loss": -1.0,
            "diverged": False, "diverged_at": None, "seconds": 0.0, "grad_block0": 0.0,
            "update_max": 0.0}  # fmt: skip
    side = os.path.join(out, ".cells.csv.partial.jsonl")

    def write_sidecar(key):
        with open(side, "w") as f:
            f.write('{"resgrad_sweep_partial": 1}\n'
                    + json.dumps(seal({"key": key, "rows": [fake]})) + "\n")  # fmt: skip

    write_sidecar(E.cell_key(a, sha))
    res = run_experiment(other, out, jobs=1, progress=False)
    assert res["summary"][0]["val_mean"] > 0  # trained, not the fake row
    (row,) = csv.DictReader(open(os.path.join(out, "cells.csv")))
    assert float(row["val_loss"]) > 0
    write_sidecar(E.cell_key(b, sha))  # the same settings do reuse it
    assert run_experiment(other, out, jobs=1, progress=False)["summary"][0]["val_mean"] == -1.0


def test_a_rerun_on_another_text_at_the_same_path_is_refused(tmp_path, data):
    small = {**TINY, "variants": ("pre-ln",), "warmups": (0,), "seeds": 1, "max_iters": 3,
             "eval_interval": 3}  # fmt: skip
    cfg = ExperimentConfig(name="depth", data=data, **small)
    out = str(tmp_path / "exp")
    run_experiment(cfg, out, jobs=1, progress=False)
    with open(data, "a", encoding="utf-8") as f:
        f.write("a fox again. " * 5)
    with pytest.raises(ValueError, match="other settings.*differs from the text it was trained"):
        run_experiment(cfg, out, jobs=1, progress=False)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"variants": ("pre-ln", "pre-ln")}, r"variants must be distinct, got \('pre-ln', 'pre-"),
        ({"depths": (2, 2)}, r"depths must be distinct, got \(2, 2\)"),
        ({"lrs": (1e-3, 1e-3)}, "lrs must be distinct"),
        ({"lrs": (1e-3, 0.0010000001)}, "lrs must differ within 6 significant digits"),
        ({"warmups": (0, 0)}, "warmups must be distinct"),
        ({"seeds": (2**32,)}, r"seed must be an integer in \[0, 2\*\*32\), got 4294967296"),
        ({"depths": (0,)}, "depths must hold numbers >= 1, got 0"),
        ({"warmups": (-1,)}, "warmups must hold numbers >= 0, got -1"),
        ({"warmups": (12,)}, "warm-up 12 must be shorter than max_iters 12"),
        ({"lrs": (9e-13,)}, "lrs must hold numbers >= 1e-12"),
        ({"lrs": (float("inf"),)}, "lrs must hold numbers"),
        ({"eval_iters": 10_001}, "eval_iters must be at most 10000, got 10001"),
    ],
)  # fmt: skip
def test_a_grid_value_given_twice_or_just_out_of_bounds_is_refused(kw, message):
    with pytest.raises(ValueError, match=message):
        ExperimentConfig(**{"name": "warmup", **TINY, **kw})


@pytest.mark.parametrize(
    "kw",
    [{"depths": (1,)}, {"warmups": (0,)}, {"warmups": (11,)}, {"lrs": (1e-12,)},
     {"seeds": (2**32 - 1, 0)}, {"eval_iters": 10_000}, {"lrs": (1e-3, 0.001001)}],
)  # fmt: skip
def test_a_grid_value_just_inside_its_bounds_is_accepted(kw):
    cfg = ExperimentConfig(**{"name": "warmup", **TINY, **kw})
    assert cfg.n_cells == len(cfg.cells("out"))
    assert len({name for name, _ in cfg.cells("out")}) == cfg.n_cells  # one directory each


def test_the_cells_order_is_variant_depth_lr_warmup_seed_as_given():
    """From first principles: the cells (and so cells.csv's rows) in the nested order of the
    grid's axes, each axis in the order it was given (not sorted)."""
    import itertools

    cfg = ExperimentConfig(name="warmup", **{**TINY, "variants": ("post-ln", "pre-ln"),
                           "depths": (3, 2), "lrs": (2e-3, 1e-3), "warmups": (5, 0),
                           "seeds": (7, 1)})  # fmt: skip
    want = list(itertools.product(("post-ln", "pre-ln"), (3, 2), (2e-3, 1e-3), (5, 0), (7, 1)))
    cells = cfg.cells("out")
    assert [(c.variant, c.n_layer, c.lr, c.warmup_iters, c.seed) for _, c in cells] == want
    assert [n for n, _ in cells][:2] == ["post-ln_L3_lr0.002_w5_s7", "post-ln_L3_lr0.002_w5_s1"]


def test_a_cells_damage_is_said_on_stderr_though_its_log_is_silent(tmp_path, capfd):
    # an experiment trains its cells with their logs silenced: what a resume finds damaged
    # still reaches the user, naming the cell's run
    text = tmp_path / "t.txt"
    text.write_text("the residual stream carries the gradient past every block. " * 40)
    cfg = TrainConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, batch_size=4,
                      max_iters=8, eval_interval=4, eval_iters=1, data=str(text),
                      out_dir=str(tmp_path / "cell"))  # fmt: skip
    E.run_cell(cfg)
    dyn = os.path.join(cfg.out_dir, "dynamics.bin")
    data = open(dyn, "rb").read()
    open(dyn, "wb").write(data[: len(data) - 5])  # a record cut short
    capfd.readouterr()
    E.run_cell(dataclasses.replace(cfg, max_iters=12))
    err = capfd.readouterr().err
    assert f"{cfg.out_dir}: " in err and "dynamics.bin" in err
