"""render_rows, the one writer of result objects: the same table whichever format, every
attribute named once, in the order asked, the meta beside the rows in JSON. A row read
from the wrong object, a format test inverted, a field or the meta dropped are the bugs
mutmut plants here (scripts/mutmut/run.py)."""

import csv
import io
import json
from typing import NamedTuple

from resgrad.formats.records import render_rows


class Row(NamedTuple):
    name: str
    depth: int
    loss: float | None


ROWS = [Row("a", 1, 1 / 3), Row("b,c", 12, None)]


def test_csv_is_every_row_s_attributes_in_the_order_asked():
    for fmt in ("csv", "text", ""):  # every format but json is CSV
        lines = list(csv.reader(io.StringIO(render_rows(ROWS, ("loss", "name"), fmt))))
        assert lines == [["loss", "name"], [repr(1 / 3), "a"], ["", "b,c"]]


def test_json_is_the_meta_and_every_row_s_attributes():
    got = json.loads(render_rows(ROWS, ("name", "depth", "loss"), "json", meta={"seed": 7}))
    assert got == {"seed": 7, "rows": [{"name": "a", "depth": 1, "loss": 1 / 3},
                                       {"name": "b,c", "depth": 12, "loss": None}]}  # fmt: skip
    assert list(got["rows"][0]) == ["name", "depth", "loss"]


def test_json_without_meta_is_the_list_of_rows():
    got = json.loads(render_rows(ROWS[:1], ("depth",), "json"))
    assert got == [{"depth": 1}]
