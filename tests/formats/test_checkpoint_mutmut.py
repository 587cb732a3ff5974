"""formats.checkpoint, what is read back is what was saved, or a ValueError that says why:
arrays in any memory layout come back as they were, a checkpoint with no tensors or no
evaluation yet round-trips, a cut or extended file (format 1 or 2) is diagnosed with the
sizes its own header gives, a file that merely starts like a checkpoint, one whose
metadata is not resgrad's record or not JSON, one holding a pickle, or a damaged RNG state
is refused naming the file; the refusal of unlike parameters names at most three of each
kind and says when there are more. A layout lost, a bound off by one, a refusal turned
into another exception or naming no file are the bugs mutmut plants here
(scripts/mutmut/run.py)."""

import hashlib
import json

import numpy as np
import pytest

from resgrad.formats.checkpoint import (
    FORMAT,
    Checkpoint,
    check_params,
    generator_from_state,
    load_checkpoint,
    save_checkpoint,
)
from tests.formats.test_checkpoint import _ckpt, _v1_bytes, _v1_file


def _refusal(path):
    with pytest.raises(ValueError) as e:
        load_checkpoint(path)
    return str(e.value)


def test_arrays_in_any_memory_layout_are_read_back_as_they_were(tmp_path):
    ckpt, _ = _ckpt()
    grid = np.arange(24, dtype=np.float32).reshape(4, 6)
    ckpt.params.update(t=grid.T, f=np.asfortranarray(grid), s=grid[:, ::2])  # views, F order
    ckpt.optimizer.update({"m.t": grid.T * 2, "m.s": np.arange(20.0)[3::4]})
    save_checkpoint(tmp_path / "x.ckpt", ckpt)
    got = load_checkpoint(tmp_path / "x.ckpt")
    for saved, loaded in ((ckpt.params, got.params), (ckpt.optimizer, got.optimizer)):
        assert saved.keys() == loaded.keys()
        for k, v in saved.items():
            assert loaded[k].shape == v.shape and np.array_equal(loaded[k], v), k


def test_a_checkpoint_without_tensors_or_a_best_loss_round_trips_and_is_diagnosed(tmp_path):
    """Before the first evaluation there is no best loss; a record with no arrays at all is
    a file whose header ends it."""
    ckpt = Checkpoint(params={}, optimizer={}, iteration=0, config={"n_layer": 0}, vocab="ab")
    path = tmp_path / "empty.ckpt"
    save_checkpoint(path, ckpt)
    got = load_checkpoint(path)
    assert (got.params, got.optimizer, got.best_val_loss, got.iteration) == ({}, {}, None, 0)
    raw = path.read_bytes()
    i = raw.index(b'\\"ab\\"') + 3  # the vocabulary's "b", escaped in the header's JSON
    path.write_bytes(raw[:i] + b"c" + raw[i + 1 :])  # changed: the file keeps its length
    assert _refusal(path).endswith("is corrupted: its SHA-256 checksum does not match")


def test_a_character_level_checkpoint_names_no_tokenizer(tmp_path):
    from safetensors import safe_open

    ckpt, _ = _ckpt()
    save_checkpoint(tmp_path / "c.ckpt", ckpt)
    with safe_open(str(tmp_path / "c.ckpt"), framework="np") as f:
        assert "tokenizer" not in json.loads(f.metadata()["resgrad"])


def test_every_cut_past_the_length_field_is_called_truncated_with_the_true_sizes(tmp_path):
    ckpt, _ = _ckpt()
    path = tmp_path / "last.ckpt"
    save_checkpoint(path, ckpt)
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    edges = {9, 8 + n - 1, 8 + n, 8 + n + 1, len(raw) - 1}  # the header's end, the file's
    for keep in sorted(edges | set(range(9, len(raw), 37))):
        path.write_bytes(raw[:keep])
        msg = _refusal(path)
        if keep < 8 + n:  # inside the header
            assert f"promises {n} bytes of header, the file holds {keep - 8}" in msg, keep
        else:  # the header whole, tensor bytes missing
            assert f"promises {len(raw)} bytes, the file holds {keep}" in msg, keep


def test_a_file_that_only_starts_like_a_checkpoint_is_not_called_one(tmp_path):
    path = tmp_path / "x.ckpt"
    for raw in (b"RIFF\x24\x00\x00\x00WAVEfmt ", b"RESGRAD-CKPT-v2\n" + b"\x00" * 60):
        path.write_bytes(raw)
        assert _refusal(path) == f"{str(path)!r} is not a resgrad checkpoint (bad header)"


def test_a_safetensors_file_without_resgrads_metadata_says_so(tmp_path):
    from safetensors.numpy import save_file

    save_file({"w": np.zeros(2, np.float32)}, tmp_path / "m.safetensors", metadata={"a": "b"})
    assert _refusal(tmp_path / "m.safetensors") == (
        f"{str(tmp_path / 'm.safetensors')!r} is not a resgrad checkpoint (a safetensors file "
        "without resgrad's metadata)"
    )


def _sealed_file(resgrad_meta: str) -> bytes:
    """A format-2 file as the format defines it, its checksum right, with this metadata."""
    from safetensors.numpy import save

    meta = {"format": FORMAT, "resgrad": resgrad_meta, "sha256": "0" * 64}
    raw = save({"params/w": np.ones(3, np.float32)}, metadata=meta)
    digest = hashlib.sha256(raw).hexdigest()
    return raw.replace(b'"sha256":"' + b"0" * 64, b'"sha256":"' + digest.encode(), 1)


@pytest.mark.parametrize(
    "meta, said",
    [
        ("null", "format None, missing ['format', 'iteration', 'config', 'vocab'"),
        ('["format", "iteration"]', "format None, missing ['format'"),
        ('"format iteration config vocab best_val_loss rng_states extra"', "format None"),
        ('{"format": 2, "iteration": 1, "config": {}, "vocab": "a", "best_val_loss": null, '
         '"rng_states": {}}', "format 2, missing ['extra']"),
    ],
)  # fmt: skip
def test_metadata_that_is_not_resgrads_record_is_refused_naming_the_file(tmp_path, meta, said):
    path = tmp_path / "odd.ckpt"
    path.write_bytes(_sealed_file(meta))
    msg = _refusal(path)
    assert msg.startswith(f"checkpoint {str(path)!r} has unexpected metadata ({said}")


def test_metadata_that_is_not_json_is_unreadable_naming_the_file(tmp_path):
    path = tmp_path / "odd.ckpt"
    path.write_bytes(_sealed_file('{"format": 2, "iteration'))
    assert _refusal(path).startswith(f"checkpoint {str(path)!r} is unreadable: ")


def test_a_format_1_file_names_itself_in_every_refusal(tmp_path):
    ckpt, _ = _ckpt()
    raw = _v1_bytes(ckpt)
    path = tmp_path / "old.ckpt"
    path.write_bytes(raw + b"\x00\x01")
    assert _refusal(path) == (
        f"checkpoint {str(path)!r} is corrupted: 2 unexpected bytes after the payload"
    )
    path.write_bytes(raw[:56])  # the header whole, the payload gone
    assert _refusal(path) == (
        f"checkpoint {str(path)!r} is truncated: header promises {len(raw) - 56} bytes of "
        "payload, the file holds 0"
    )
    meta = np.frombuffer(json.dumps({"format": 1}).encode(), dtype=np.uint8)
    path.write_bytes(_v1_file({"meta": meta}))
    assert _refusal(path).startswith(f"checkpoint {str(path)!r} has unexpected metadata")


def test_a_format_1_file_holding_a_pickle_is_refused_not_unpickled(tmp_path):
    ckpt, _ = _ckpt()
    arrays = {"params/wte": np.array([{"a": 1}, None], dtype=object)}  # an object array
    meta = {**ckpt._meta(), "format": 1}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    path = tmp_path / "old.ckpt"
    path.write_bytes(_v1_file(arrays))
    assert _refusal(path).startswith(f"checkpoint {str(path)!r} is unreadable: ")


@pytest.mark.parametrize("state", [None, ["PCG64"], "PCG64", 7])
def test_a_damaged_rng_state_is_refused_as_such(state):
    with pytest.raises(ValueError, match="unknown bit generator in checkpoint RNG state"):
        generator_from_state(state)


def _model(names):
    return {k: np.zeros(2, np.float32) for k in names}


@pytest.mark.parametrize("count", [3, 4])
def test_unlike_parameters_are_named_three_of_a_kind_and_more_said(count):
    names = [f"blocks.{i}.w" for i in range(count)]
    more = " ..." if count > 3 else ""
    cases = [
        ({}, _model(names), f"missing {', '.join(names[:3])}{more}"),
        (_model(names), {}, f"unexpected {', '.join(names[:3])}{more}"),
        ({k: np.zeros(3, np.float32) for k in names}, _model(names),
         "shape/dtype " + "; ".join(f"{k} (3,) float32 (model: (2,) float32)" for k in names[:3])
         + more),
    ]  # fmt: skip
    for saved, expected, said in cases:
        with pytest.raises(ValueError) as e:
            check_params(saved, expected)
        assert str(e.value) == f"checkpoint does not match the model: {said}"


def test_every_kind_of_difference_is_named_in_one_refusal():
    saved = {"a": np.zeros(2, np.float32), "b": np.zeros(2, np.float64), "x": np.zeros(1)}
    expected = {"a": np.zeros(2, np.float32), "b": np.zeros(2, np.float32), "c": np.zeros(2)}
    with pytest.raises(ValueError) as e:
        check_params(saved, expected, where="best.ckpt")
    assert str(e.value) == (
        "best.ckpt does not match the model: missing c; unexpected x; "
        "shape/dtype b (2,) float64 (model: (2,) float32)"
    )
