"""train.report, what a training command prints when it ends: ``resgrad train``'s last line
gives this call's steps (a resumed run's span), its time and the run's losses, each the
field it names; ``resgrad depth-train``'s table gives one aligned row per variant, in the
summary's order, with the norms of its first and last block at its first and last step."""

import re

import pytest

from resgrad.train.loop import TrainResult
from resgrad.train.report import depth_train_table, done_line

RESULT = dict(
    train_loss=2.71828,
    val_loss=3.14159,
    best_val_loss=1.41421,
    seconds=12.345,
    ms_per_iter=41.15,
    out_dir="out",
)

DONE = re.compile(
    r"done: (\d+) iterations( \((\d+) to (\d+)\))? in ([\d.]+) s \(([\d.]+) ms per iteration\); "
    r"train loss ([\d.]+), val loss ([\d.]+), best val loss ([\d.]+)"
)


@pytest.mark.parametrize("start, iterations", [(0, 300), (120, 300), (299, 300)])
def test_the_done_line_gives_this_calls_steps_and_each_figure_under_its_name(start, iterations):
    res = TrainResult(iterations=iterations, start=start, **RESULT)
    m = DONE.fullmatch(done_line(res))
    assert m, done_line(res)
    assert int(m[1]) == iterations - start  # the steps this call took
    if start:  # a resumed call says from where to where
        assert (int(m[3]), int(m[4])) == (start, iterations)
    else:
        assert m[2] is None
    got = [float(m[i]) for i in range(5, 10)]
    want = [res.seconds, res.ms_per_iter, res.train_loss, res.val_loss, res.best_val_loss]
    places = [len(m[i].split(".")[1]) for i in range(5, 10)]
    assert places == [1, 1, 4, 4, 4]  # times to a tenth, losses to four places
    for g, w, p in zip(got, want, places, strict=True):
        assert abs(g - w) <= 0.5 * 10**-p + 1e-12


def _variant(train, val, first, last):
    return {
        "train_loss": train,
        "val_loss": val,
        "best_val_loss": val,
        "seconds": 1.0,
        "first_step_layer_grad_norms": first,
        "last_step_layer_grad_norms": last,
    }


def test_the_depth_table_has_a_row_per_variant_in_order_with_first_and_last_blocks():
    summary = {
        "variants": {
            "residual": _variant(2.5, 2.75, [1e-3, 2e-3, 3e-3, 4e-3], [5e-4, 6e-4, 7e-4, 8e-4]),
            "plain": _variant(4.125, 4.0625, [1.5e-9, 1, 1, 2.5e2], [3.5e-10, 1, 1, 7.25]),
            "none": _variant(3.0, 3.5, None, None),  # a run that logged no steps
        }
    }
    text = depth_train_table(summary, n_layer=4)
    lines = text.split("\n")
    assert lines[0] == "" and text.endswith("\n") and lines[-1] == ""  # a blank line before
    header, rows = lines[1], lines[2:-1]
    assert header.split() == ["variant", "train", "val", "grad", "norm", "of", "block", "0", "/",
                              "block", "3"]  # fmt: skip
    assert [r.split()[0] for r in rows] == ["residual", "plain", "none"]
    for row, s in zip(rows, summary["variants"].values(), strict=True):
        cells = row.split()
        assert [float(c) for c in cells[1:3]] == [s["train_loss"], s["val_loss"]]
        first, last = s["first_step_layer_grad_norms"], s["last_step_layer_grad_norms"]
        if first is None:
            assert cells[3:] == ["-"]
            continue
        norms = [float(c) for c in re.findall(r"\d\.\d\de[-+]\d+", row)]
        assert norms == [first[0], first[-1], last[0], last[-1]]
        assert "first step" in row and row.index("first step") < row.index("last step")
    # the columns line up under the header: names padded to 10, losses right in 8 each
    loss = re.compile(r" *\d+\.\d{4}")  # four places, right-aligned in 8
    for row in rows:
        assert row[10] == " " == row[19] and row[:10].strip() == row.split()[0]
        assert loss.fullmatch(row[11:19]) and loss.fullmatch(row[20:28])
    assert header.index("train") + len("train") == 19 and header.index("val") + 3 == 28
