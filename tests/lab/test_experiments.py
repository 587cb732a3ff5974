"""Training experiments: a grid of real runs, summarized over seeds, resumable, and every
cell an ordinary run directory."""

import csv
import json
import os
import statistics
import subprocess
import sys

import numpy as np
import pytest

from resgrad.lab import experiments as E
from resgrad.lab.experiments import ExperimentConfig, run_experiment, summarize

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
    for change, named in (({"n_embd": 32}, "n_embd is 32"), ({"max_iters": 18}, "lr_decay")):
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
    assert min(w.seeds, d.seeds, r.seeds) >= 3


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
    vals = [1.0, 3.0, np.nan]
    rows = [{**base, "seed": s, "diverged": s == 2, "val_loss": v} for s, v in enumerate(vals)]
    (s,) = summarize(rows)
    assert (s["val_mean"], s["val_std"], s["diverged"], s["seeds"]) == (2.0, 2**0.5, 1, 3)
