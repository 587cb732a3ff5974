"""A sweep's partial results read back (``resgrad.lab.experiments.grid._load_sidecar``): each
point is taken only as it was written, and once; what is not is said and measured again.

Aimed at the classes of bug mutation testing found unguarded: a check of cached rows that
is skipped or given the wrong arguments, a bad line that ends the reading of the good ones
after it, a record's shape half checked, the file rewritten when nothing changed (or not
rewritten when a torn tail must go), and a file read in the locale's encoding.
"""

import json
import os
import subprocess
import sys

from resgrad.formats.sealed import seal
from resgrad.lab.experiments.grid import _SIDECAR_HEADER, _load_sidecar

ROWS = {"a": [{"x": 1.5}], "b": [{"x": -0.25}, {"x": 2.0}], "c": []}


def _write(path, lines, tail=""):
    with open(path, "w", encoding="utf-8") as f:
        f.write(_SIDECAR_HEADER + "".join(ln + "\n" for ln in lines) + tail)


def _sealed(key, rows):
    return json.dumps(seal({"key": key, "rows": rows}))


def _load(path, check=None):
    said = []
    return _load_sidecar(str(path), said.append, check), said


def test_the_check_sees_each_point_and_drops_only_the_stale_ones(tmp_path):
    side = tmp_path / "s.partial.jsonl"
    _write(side, [_sealed(k, r) for k, r in ROWS.items()])
    seen = []

    def check(key, rows):
        seen.append((key, rows))
        return "'ckpt-3.ckpt' is gone" if key == "b" else None

    done, said = _load(side, check)
    assert seen == list(ROWS.items())  # every point, with its own rows
    assert done == {"a": ROWS["a"], "c": ROWS["c"]}
    assert said == ["'ckpt-3.ckpt' is gone: its point is measured again"]
    again, said = _load(side)  # the file now holds the points kept, once each
    assert again == done and said == []


def test_without_a_check_every_sound_point_is_taken(tmp_path):
    side = tmp_path / "s.partial.jsonl"
    _write(side, [_sealed(k, r) for k, r in ROWS.items()])
    assert _load(side) == (ROWS, [])


def test_a_bad_line_does_not_end_the_reading_of_the_lines_after_it(tmp_path):
    side = tmp_path / "s.partial.jsonl"
    edited = json.loads(_sealed("a", ROWS["a"]))
    edited["rows"] = [{"x": 9.0}]
    _write(side, [json.dumps(edited), "not json", _sealed("b", ROWS["b"]), _sealed("c", []),
                  _sealed("c", []), _sealed("d", [{"x": 3.0}])])  # fmt: skip
    done, said = _load(side)
    # the lines after the bad ones are read, after a point written twice too
    assert done == {"b": ROWS["b"], "d": [{"x": 3.0}]}
    assert len(said) == 3 and "line 2 of" in said[0] and "line 3 of" in said[1]
    assert "line 6 of" in said[2] and "holds the point of line 5 again" in said[2]


def test_a_record_of_another_shape_is_not_a_point(tmp_path):
    side = tmp_path / "s.partial.jsonl"
    _write(side, [json.dumps(seal({"key": "a", "rows": {"x": 1}})),  # rows not a list
                  json.dumps(seal({"key": 7, "rows": []})),  # key not a string
                  json.dumps(seal({"rows": []})),  # no key
                  _sealed("c", [])])  # fmt: skip
    done, said = _load(side)
    assert done == {"c": []}
    assert [s.split(" of the partial-results")[0] for s in said] == ["line 2", "line 3", "line 4"]
    assert all("is not a point's record: its point is measured again" in s for s in said)


def test_a_sound_file_is_left_as_it_is_and_a_torn_tail_is_cut(tmp_path):
    side = tmp_path / "s.partial.jsonl"
    _write(side, [_sealed(k, r) for k, r in ROWS.items()])
    before = os.stat(side)
    assert _load(side) == (ROWS, [])
    after = os.stat(side)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # untouched
    _write(side, [_sealed(k, r) for k, r in ROWS.items()], tail=_sealed("d", [])[:-9])
    assert _load(side) == (ROWS, [])  # a tail a crash cut short: dropped without a word
    text = open(side, encoding="utf-8").read()
    assert text.endswith("\n") and '"d"' not in text and text.count("\n") == 4


def test_the_file_is_read_as_utf8_whatever_the_locale(tmp_path):
    side = tmp_path / "s.partial.jsonl"
    # a sealed line as any JSON writer may write it, its text not escaped to ASCII: the seal
    # covers the content, not the escaping
    line = json.dumps(seal({"key": "naïve résumé", "rows": ROWS["a"]}), ensure_ascii=False)
    _write(side, [line])
    assert list(_load(side)[0]) == ["naïve résumé"]  # here (the test is the function's too)
    code = ("import sys; from resgrad.lab.experiments.grid import _load_sidecar; "
            "print(list(_load_sidecar(sys.argv[1], print, None)))")  # fmt: skip
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0",
           "PYTHONUTF8": "0", "PYTHONIOENCODING": "utf-8"}  # fmt: skip
    p = subprocess.run([sys.executable, "-c", code, str(side)], capture_output=True,
                       text=True, env=env, encoding="utf-8")  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(["naïve résumé"])
