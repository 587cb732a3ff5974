"""What the equal-loss study reads back is what it wrote, or it says so and does the work again.

A study's models and its cached rows live in its out-dir between runs, where a kill, a disk
or a hand can change them. Each case below changes one thing a rerun reads (a kept
checkpoint, the cached rows, a whole run) and holds that the rerun names what it found,
trains or measures again, and gives exactly the rows of the study that was never touched:
every model here is deterministic, so the right answer is known.
"""

import json
import os
import shutil

import pytest

from resgrad.formats.sealed import seal
from resgrad.lab.experiments.grid import sidecar_path
from resgrad.lab.robustness import RobustnessConfig
from resgrad.lab.robustness.experiment import run_cells

CFG = RobustnessConfig.quick(schemes=("pre-ln",), doses=(0.0,), seeds=(0, 1, 2), max_iters=20,
                             keep_every=10, bootstrap=10, lrs=(1e-2,))  # fmt: skip


def _rows(rows):
    """The rows without the stamps (a stamp covers a checkpoint's bytes, which name its
    out-dir: a study copied elsewhere has other stamps and the same numbers)."""
    return [{k: v for k, v in r.items() if k != "stamp"} for r in rows]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("readback") / "study")
    return out, _rows(run_cells(CFG, out, jobs=1, progress=False).rows)


@pytest.fixture
def copy(made, tmp_path):
    """A copy of the finished study to change, and the rows the untouched study gives."""
    out, rows = made
    dst = str(tmp_path / "study")
    shutil.copytree(out, dst)
    return dst, rows


def _rerun(out, capsys):
    rows = _rows(run_cells(CFG, out, jobs=1, progress=False).rows)
    return rows, capsys.readouterr().err


def _side(out):
    return sidecar_path(os.path.join(out, "checkpoints.csv"))


RUN = os.path.join("runs", "pre-ln_L2_a0_s1")


def test_an_untouched_study_is_read_back_without_a_word(copy, capsys):
    out, rows = copy
    before = os.stat(os.path.join(out, RUN, "last.ckpt")).st_mtime_ns
    again, err = _rerun(out, capsys)
    assert again == rows and "again" not in err
    assert os.stat(os.path.join(out, RUN, "last.ckpt")).st_mtime_ns == before  # nothing trained


@pytest.mark.parametrize("damage", ["truncate", "zero", "flip", "delete"])
def test_a_damaged_kept_checkpoint_of_a_finished_model_is_said_and_the_model_trained_again(
    copy, capsys, damage
):
    out, rows = copy
    path = os.path.join(out, RUN, "ckpt-10.ckpt")
    data = open(path, "rb").read()
    if damage == "truncate":
        open(path, "wb").write(data[: len(data) // 2])
    elif damage == "zero":
        open(path, "wb").write(bytes(len(data)))
    elif damage == "flip":
        open(path, "wb").write(data[:-100] + bytes([data[-100] ^ 1]) + data[-99:])
    else:
        os.unlink(path)
    again, err = _rerun(out, capsys)
    assert again == rows  # the numbers of the study that was never touched
    assert f"{path!r}" in err and "measured again" in err  # the file, named
    assert "pre-ln_L2_a0_s1 is trained again" in err  # its model retrained from the start


def test_a_deleted_run_directory_is_trained_again(copy, capsys):
    out, rows = copy
    shutil.rmtree(os.path.join(out, RUN))
    again, err = _rerun(out, capsys)
    assert again == rows and "is gone" in err and "measured again" in err


def test_an_edited_number_in_the_cached_rows_is_said_and_measured_again(copy, capsys):
    out, rows = copy
    side = _side(out)
    lines = open(side).read().splitlines(keepends=True)
    entry = json.loads(lines[2])
    entry["rows"][1]["block_dce"] += 0.5  # still valid JSON; a verdict could flip on it
    lines[2] = json.dumps(entry) + "\n"
    open(side, "w").writelines(lines)
    again, err = _rerun(out, capsys)
    assert again == rows and "line 3 of the partial-results file" in err
    assert "edited or damaged" in err


def test_a_point_cached_twice_is_used_neither_time(copy, capsys):
    out, rows = copy
    side = _side(out)
    lines = open(side).read().splitlines(keepends=True)
    entry = json.loads(lines[2])
    entry.pop("sha256")
    entry["rows"] = [{**r, "block_dce": -1.0} for r in entry["rows"]]
    with open(side, "a") as f:
        f.write(json.dumps(seal(entry)) + "\n")  # a second, sealed line for the same model
    again, err = _rerun(out, capsys)
    assert again == rows and "of line 3 again" in err


def test_a_kept_checkpoint_deleted_from_an_unmeasured_model_is_trained_again(copy, capsys):
    # the model trained to its end but was not measured (its line never reached the cache):
    # the study knows its own schedule, and does not read it at 2 checkpoints instead of 3
    out, rows = copy
    side = _side(out)
    lines = open(side).read().splitlines(keepends=True)
    open(side, "w").writelines(lines[:2] + lines[3:])  # the model of line 3 (seed 1) unmeasured
    os.unlink(os.path.join(out, RUN, "ckpt-10.ckpt"))
    again, err = _rerun(out, capsys)
    assert again == rows
    assert "kept no checkpoint at iteration(s) 10" in err and "trained again" in err


def test_a_checkpoint_copied_over_another_is_found_by_its_own_iteration(copy, capsys):
    out, rows = copy
    run = os.path.join(out, RUN)
    shutil.copy(os.path.join(run, "ckpt-20.ckpt"), os.path.join(run, "ckpt-10.ckpt"))
    again, err = _rerun(out, capsys)
    assert again == rows
    assert "named for iteration 10 but its iteration field is 20" in err


def test_a_checkpoint_of_another_run_of_the_same_shape_is_found(copy, capsys):
    out, rows = copy
    other = os.path.join(out, "runs", "pre-ln_L2_a0_s2", "ckpt-10.ckpt")  # seed 2, one shape
    shutil.copy(other, os.path.join(out, RUN, "ckpt-10.ckpt"))
    again, err = _rerun(out, capsys)
    assert again == rows
    assert "belongs to another run" in err and "seed 1 against 2" in err


def test_a_model_that_diverged_is_read_as_far_as_it_went(tmp_path, monkeypatch):
    # a model whose loss goes non-finite stops early: it is read at the checkpoints it kept
    from resgrad.lab.robustness import experiment as RX

    cfg = RobustnessConfig.quick(schemes=("pre-ln",), doses=(0.0,), seeds=(0, 1),
                                 max_iters=30, keep_every=10, lrs=(1e-2,))  # fmt: skip
    real = RX.run_cell

    def diverges_after_ten(c):
        import dataclasses

        row = real(dataclasses.replace(c, max_iters=10))[0]  # it kept 0 and 10, then stopped
        return [{**row, "diverged": True}]

    monkeypatch.setattr(RX, "run_cell", diverges_after_ten)
    rows = run_cells(cfg, str(tmp_path / "study"), jobs=1, progress=False).rows
    assert sorted({r["iteration"] for r in rows}) == [0, 10] and len(rows) == 4
    assert all(r["diverged"] for r in rows)  # and said so, for the rule that leaves it out
