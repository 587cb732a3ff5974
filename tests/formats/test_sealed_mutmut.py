"""formats.sealed, the check of what resgrad reads back: a sealed record is the SHA-256 of
its canonical JSON (sorted keys, no spaces, the seal left out), so it unseals whatever the
order of its keys and however often it was sealed, and one edited value is found; a stamp
is a file's size and SHA-256 over all of its bytes, and the reason a file is not the one
stamped names the file and what differs. A key order or a separator that changes the seal,
a seal hashed with itself, a refusal let through or naming no file, a size counted from
the last chunk only are the bugs mutmut plants here (scripts/mutmut/run.py)."""

import hashlib
import json
import math

import pytest

from resgrad.formats.sealed import SEAL, Tampered, canonical, seal, stamp, stamp_problem, unseal

RECORD = {"model": "d4.npz", "loss": 1 / 3, "steps": [1, 2], "meta": {"b": None, "a": "x"}}


def test_canonical_is_sorted_keys_and_no_spaces_at_any_depth():
    got = canonical({"b": 1, "a": {"d": [1, 2.5], "c": "x y"}})
    assert got == b'{"a":{"c":"x y","d":[1,2.5]},"b":1}'  # the space inside a string stays
    assert canonical({"a": 1, "b": 2}) == canonical({"b": 2, "a": 1})


def test_canonical_keeps_nan_and_infinity_and_floats_round_trip():
    got = json.loads(canonical({"x": [math.nan, math.inf, -math.inf, 0.1]}))
    assert math.isnan(got["x"][0]) and got["x"][1:] == [math.inf, -math.inf, 0.1]


def test_the_seal_is_the_sha256_of_the_canonical_json_of_the_rest():
    # computed here from the format's definition, not by canonical(): a record sealed by
    # another version of resgrad, or by hand, must unseal
    text = json.dumps(RECORD, sort_keys=True, separators=(",", ":"))
    sealed = seal(RECORD)
    assert sealed[SEAL] == hashlib.sha256(text.encode()).hexdigest()
    assert {k: v for k, v in sealed.items() if k != SEAL} == RECORD
    assert SEAL not in RECORD  # the caller's record is left as it was


def test_a_record_unseals_to_its_content_after_a_json_round_trip_in_any_key_order():
    sealed = json.loads(json.dumps(seal(RECORD)))
    reordered = dict(reversed(list(sealed.items())))
    assert unseal(reordered, "cache.jsonl:3") == RECORD
    assert unseal(seal({"x": math.nan, "y": math.inf}), "w")["y"] == math.inf


def test_sealing_again_replaces_the_old_seal():
    edited = {**seal(RECORD), "loss": 0.5}  # an edit made through resgrad, then sealed
    resealed = seal(edited)
    assert unseal(resealed, "w") == {**RECORD, "loss": 0.5}
    assert resealed[SEAL] == seal({**RECORD, "loss": 0.5})[SEAL]


@pytest.mark.parametrize(
    "bad",
    [
        {**RECORD},  # no seal
        {**RECORD, SEAL: None},  # a seal that is no digest
        {**RECORD, SEAL: 12},
        [RECORD],  # not an object
        "line",
        None,
    ],
)
def test_a_record_without_a_seal_is_refused_naming_where(bad):
    with pytest.raises(Tampered, match=r"^cache\.jsonl:7 carries no sha256 seal"):
        unseal(bad, "cache.jsonl:7")


@pytest.mark.parametrize(
    "edit",
    [
        lambda r: {**r, "loss": 0.3333},  # one number edited
        lambda r: {**r, "extra": 1},  # a field added
        lambda r: {k: v for k, v in r.items() if k != "steps"},  # a field lost
        lambda r: {**r, SEAL: r[SEAL][:-1] + "0" if r[SEAL][-1] != "0" else r[SEAL][:-1] + "1"},
    ],
)
def test_an_edited_record_is_refused_naming_where(edit):
    with pytest.raises(Tampered, match=r"^cache\.jsonl:7 does not match its sha256 seal"):
        unseal(edit(seal(RECORD)), "cache.jsonl:7")
    assert issubclass(Tampered, ValueError)  # a reader's `except ValueError` catches it


def test_a_stamp_is_the_size_and_sha256_of_every_byte(tmp_path):
    data = bytes(range(256)) * (5 * 4096 + 3)  # 5 MiB and 768 bytes: several chunks
    p = tmp_path / "ckpt.npz"
    p.write_bytes(data)
    assert stamp(p) == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert stamp_problem(p, stamp(p)) is None
    assert stamp_problem(str(p), json.loads(json.dumps(stamp(p)))) is None  # read back


def test_an_empty_file_has_a_stamp(tmp_path):
    p = tmp_path / "empty"
    p.write_bytes(b"")
    assert stamp(p) == {"size": 0, "sha256": hashlib.sha256(b"").hexdigest()}
    assert stamp_problem(p, stamp(p)) is None


@pytest.mark.parametrize("expected", [None, {}, {"size": 3}, {"sha256": "ab"}, [3, "ab"]])
def test_no_stamp_recorded_is_a_problem_naming_the_file(tmp_path, expected):
    p = tmp_path / "ckpt.npz"
    p.write_bytes(b"abc")
    got = stamp_problem(p, expected)
    assert got.startswith(repr(str(p))) and "no stamp recorded" in got


def test_a_file_gone_another_size_or_other_bytes_is_said_naming_it(tmp_path):
    p = tmp_path / "ckpt.npz"
    p.write_bytes(b"abcdef")
    measured = stamp(p)
    name = repr(str(p))

    def said(*words):
        got = stamp_problem(p, measured)
        return got.startswith(name) and all(w in got for w in words)

    p.write_bytes(b"abcdeg")  # the same size, one byte changed
    assert said("other bytes", "SHA-256")
    p.write_bytes(b"abcdefg")
    assert said("is 7 bytes, 6 when it was measured")  # the size now, then the one measured
    p.unlink()
    assert said("is gone")
    p.mkdir()  # a directory where the file was is no file
    assert said("is gone")
