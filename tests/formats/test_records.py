"""CSV and JSON rows: every value comes back exactly as it went in."""

import csv
import io
import json

import numpy as np

from resgrad.formats.records import to_csv, to_json

FIELDS = ("name", "depth", "loss", "best")
# floats that only their full repr gives back: a third, a sum with rounding, a tiny
# and a huge one, zeros of both signs; ints of 0; None; text CSV must quote
ROWS = [
    {"name": "a,b", "depth": 0, "loss": 1 / 3, "best": None},
    {"name": 'say "hi"', "depth": 12, "loss": 0.1 + 0.2, "best": 0.0},
    {"name": "x", "depth": 3, "loss": 1e-300, "best": -0.0},
    {"name": "", "depth": 1, "loss": 1.7976931348623157e308, "best": 123456.789012345},
]


def _read_csv(text):
    return list(csv.reader(io.StringIO(text)))


def test_csv_has_the_header_and_one_line_per_row():
    text = to_csv(ROWS, FIELDS)
    lines = _read_csv(text)
    assert lines[0] == list(FIELDS)
    assert len(lines) == 1 + len(ROWS) and text.endswith("\n") and "\r" not in text


def test_csv_floats_round_trip_exactly_and_none_is_an_empty_cell():
    got = list(csv.DictReader(io.StringIO(to_csv(ROWS, FIELDS))))
    for want, row in zip(ROWS, got):
        assert row["name"] == want["name"]
        assert int(row["depth"]) == want["depth"]  # 0 stays "0", not an empty cell
        assert float(row["loss"]) == want["loss"]  # bit for bit
        if want["best"] is None:
            assert row["best"] == ""
        else:
            assert row["best"] != "" and float(row["best"]) == want["best"]
    assert got[2]["best"] == "-0.0" and got[1]["best"] == "0.0"  # both zeros, signed


def test_csv_writes_numpy_floats_as_numbers():
    # np.float64 is a float: its repr under NumPy 2 is "np.float64(0.1)", not a number
    rows = [{"name": "n", "depth": np.int64(2), "loss": np.float64(0.1), "best": np.float64(1e-20)}]
    row = next(csv.DictReader(io.StringIO(to_csv(rows, FIELDS))))
    assert row["loss"] == "0.1" and float(row["best"]) == 1e-20 and row["depth"] == "2"


def test_csv_writes_only_the_fields_in_their_order():
    rows = [{**r, "extra": 1} for r in ROWS]
    lines = _read_csv(to_csv(rows, ("loss", "name")))
    assert lines[0] == ["loss", "name"]
    assert [float(x) for x, _ in lines[1:]] == [r["loss"] for r in ROWS]


def test_json_rows_are_the_fields_with_exact_floats_and_null():
    rows = [{**r, "extra": "not asked for"} for r in ROWS]
    data = json.loads(to_json(rows, FIELDS))
    assert data == [{k: r[k] for k in FIELDS} for r in ROWS]  # floats compare exactly
    assert all(list(d) == list(FIELDS) for d in data)  # no extra key, fields in order
    assert data[0]["best"] is None


def test_json_meta_wraps_the_rows():
    meta = {"experiment": "depth", "seeds": [0, 1], "lr": 3e-4}
    text = to_json(ROWS, FIELDS, meta=meta, indent=2)
    data = json.loads(text)
    assert data == {**meta, "rows": [{k: r[k] for k in FIELDS} for r in ROWS]}
    assert text.endswith("}\n") and '\n  "rows": [' in text  # indent as asked
    assert json.loads(to_json([], FIELDS)) == [] and json.loads(to_json([], FIELDS, meta={})) == {
        "rows": []
    }
