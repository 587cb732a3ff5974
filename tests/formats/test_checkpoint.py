import os

import numpy as np
import pytest

from resgrad.formats.checkpoint import (
    Checkpoint,
    check_params,
    generator_from_state,
    load_checkpoint,
    save_checkpoint,
)


def _ckpt(seed=0, iteration=7):
    rng = np.random.default_rng(seed)
    params = {
        "wte": rng.standard_normal((5, 4)).astype(np.float32),
        "blocks.0.ln1.g": np.ones(4, dtype=np.float32),
    }
    optim = {"step": np.array(iteration, dtype=np.int64)}
    optim.update({f"m.{k}": np.zeros_like(v) for k, v in params.items()})
    optim.update({f"v.{k}": np.zeros_like(v) for k, v in params.items()})
    data_rng = np.random.default_rng(123)
    data_rng.integers(0, 10, size=5)  # advance it
    return Checkpoint(
        params=params,
        optimizer=optim,
        iteration=iteration,
        config={"n_layer": 1, "n_embd": 4, "data": None},
        vocab="abcde",
        best_val_loss=1.25,
        rng_states={"data": data_rng.bit_generator.state},
        extra={"data_sha256": "ab" * 32},
    ), data_rng


def test_round_trip(tmp_path):
    ckpt, data_rng = _ckpt()
    path = tmp_path / "last.ckpt"
    save_checkpoint(path, ckpt)
    got = load_checkpoint(path)
    assert got.iteration == 7 and got.vocab == "abcde" and got.best_val_loss == 1.25
    assert got.config == ckpt.config and got.extra == ckpt.extra
    for k, v in ckpt.params.items():
        assert got.params[k].dtype == v.dtype and np.array_equal(got.params[k], v)
    assert set(got.optimizer) == set(ckpt.optimizer) and int(got.optimizer["step"]) == 7
    # the restored generator continues exactly where the saved one was
    restored = generator_from_state(got.rng_states["data"])
    assert np.array_equal(restored.integers(0, 1000, 20), data_rng.integers(0, 1000, 20))


def test_writes_to_several_paths_and_leaves_no_temp_files(tmp_path):
    ckpt, _ = _ckpt()
    save_checkpoint(tmp_path / "last.ckpt", ckpt, tmp_path / "best.ckpt")
    assert sorted(os.listdir(tmp_path)) == ["best.ckpt", "last.ckpt"]
    assert (tmp_path / "last.ckpt").read_bytes() == (tmp_path / "best.ckpt").read_bytes()


def test_a_failed_save_keeps_the_previous_checkpoint(tmp_path):
    path = tmp_path / "last.ckpt"
    good, _ = _ckpt(iteration=3)
    save_checkpoint(path, good)
    bad, _ = _ckpt(iteration=4)
    bad.best_val_loss = float("nan")  # not JSON-able: the save must fail before touching path
    with pytest.raises(ValueError):
        save_checkpoint(path, bad)
    assert load_checkpoint(path).iteration == 3
    assert os.listdir(tmp_path) == ["last.ckpt"]


@pytest.mark.parametrize("keep", [0, 10, 40, 56, 200, -1])
def test_truncated_checkpoint_is_a_clear_error(tmp_path, keep):
    ckpt, _ = _ckpt()
    path = tmp_path / "last.ckpt"
    save_checkpoint(path, ckpt)
    raw = path.read_bytes()
    path.write_bytes(raw[:keep])
    with pytest.raises(ValueError, match="truncated"):
        load_checkpoint(path)


def test_corrupted_checkpoint_is_a_clear_error(tmp_path):
    ckpt, _ = _ckpt()
    path = tmp_path / "last.ckpt"
    save_checkpoint(path, ckpt)
    raw = bytearray(path.read_bytes())
    for pos in (100, len(raw) // 2, len(raw) - 1):
        flipped = raw.copy()
        flipped[pos] ^= 0x01  # one bit
        path.write_bytes(bytes(flipped))
        with pytest.raises(ValueError, match="corrupted.*checksum"):
            load_checkpoint(path)
    path.write_bytes(bytes(raw) + b"junk")
    with pytest.raises(ValueError, match="corrupted"):
        load_checkpoint(path)


def test_other_files_are_not_checkpoints(tmp_path):
    path = tmp_path / "x.ckpt"
    path.write_bytes(b"PK\x03\x04" + b"\x00" * 100)  # a zip, e.g. a plain .npz
    with pytest.raises(ValueError, match="not a resgrad checkpoint"):
        load_checkpoint(path)
    with pytest.raises(OSError):
        load_checkpoint(tmp_path / "missing.ckpt")


def test_check_params_names_every_kind_of_mismatch():
    model = {"wte": np.zeros((5, 4), np.float32), "ln_f.g": np.zeros(4, np.float32)}
    check_params({k: v.copy() for k, v in model.items()}, model)  # equal: no error
    with pytest.raises(ValueError, match="missing ln_f.g"):
        check_params({"wte": model["wte"]}, model)
    with pytest.raises(ValueError, match="unexpected blocks.0.alpha"):
        check_params({**model, "blocks.0.alpha": np.zeros(1, np.float32)}, model)
    with pytest.raises(ValueError, match=r"wte \(6, 4\)"):
        check_params({**model, "wte": np.zeros((6, 4), np.float32)}, model)
    with pytest.raises(ValueError, match="float64"):
        check_params({**model, "wte": np.zeros((5, 4))}, model)


def test_unknown_generator_state_is_refused():
    with pytest.raises(ValueError, match="bit generator"):
        generator_from_state({"bit_generator": "Evil"})


# --------------------------------------------------------------------------- format 2


def test_a_checkpoint_is_a_safetensors_file_others_can_read(tmp_path):
    import hashlib
    import json

    from safetensors import safe_open

    ckpt, _ = _ckpt()
    path = tmp_path / "last.ckpt"
    save_checkpoint(path, ckpt)
    with safe_open(str(path), framework="np") as f:
        assert set(f.keys()) == {f"params/{k}" for k in ckpt.params} | {
            f"optim/{k}" for k in ckpt.optimizer
        }
        np.testing.assert_array_equal(f.get_tensor("params/wte"), ckpt.params["wte"])
        meta = f.metadata()
    assert meta["format"] == "resgrad-checkpoint-2"
    assert json.loads(meta["resgrad"])["vocab"] == "abcde"
    raw = path.read_bytes()  # the checksum is the file's, with its own field zeroed
    zeroed = raw.replace(meta["sha256"].encode(), b"0" * 64)
    assert hashlib.sha256(zeroed).hexdigest() == meta["sha256"]


def test_every_flipped_bit_is_caught(tmp_path):
    ckpt, _ = _ckpt()
    path = tmp_path / "last.ckpt"
    save_checkpoint(path, ckpt)
    raw = bytearray(path.read_bytes())
    for pos in range(0, len(raw), 7):  # the length, the header, the metadata, every tensor
        flipped = raw.copy()
        flipped[pos] ^= 0x10
        path.write_bytes(bytes(flipped))
        with pytest.raises(ValueError, match="corrupted|truncated|not a resgrad checkpoint"):
            load_checkpoint(path)


def test_a_safetensors_file_that_is_not_a_checkpoint(tmp_path):
    from safetensors.numpy import save_file

    save_file({"wte.weight": np.zeros((2, 2), np.float32)}, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="not a resgrad checkpoint"):
        load_checkpoint(tmp_path / "model.safetensors")


def _v1_file(arrays):
    """A format-1 file of ``arrays`` (their ``meta`` among them): MAGIC, the payload's
    length and SHA-256, then the payload, an .npz."""
    import hashlib
    import io
    import struct

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    payload = buf.getvalue()
    head = struct.pack(
        "<16sQ32s", b"RESGRAD-CKPT-v1\n", len(payload), hashlib.sha256(payload).digest()
    )
    return head + payload


def _v1_bytes(ckpt):
    """A checkpoint as resgrad 0.1 wrote it (format 1)."""
    import json

    arrays = {f"params/{k}": v for k, v in ckpt.params.items()}
    arrays.update({f"optim/{k}": v for k, v in ckpt.optimizer.items()})
    meta = {**ckpt._meta(), "format": 1}
    meta.pop("tokenizer", None)
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    return _v1_file(arrays)


def test_a_format_1_checkpoint_still_loads_and_its_errors_stay(tmp_path):
    ckpt, data_rng = _ckpt()
    path = tmp_path / "old.ckpt"
    raw = _v1_bytes(ckpt)
    path.write_bytes(raw)
    got = load_checkpoint(path)
    assert got.iteration == 7 and got.vocab == "abcde" and got.tokenizer is None
    for k, v in ckpt.params.items():
        assert got.params[k].dtype == v.dtype and np.array_equal(got.params[k], v)
    assert int(got.optimizer["step"]) == 7
    path.write_bytes(raw[:40])
    with pytest.raises(ValueError, match="truncated"):
        load_checkpoint(path)
    path.write_bytes(raw[:-1])
    with pytest.raises(ValueError, match="truncated"):
        load_checkpoint(path)
    flipped = bytearray(raw)
    flipped[len(raw) // 2] ^= 1
    path.write_bytes(bytes(flipped))
    with pytest.raises(ValueError, match="corrupted.*checksum"):
        load_checkpoint(path)


# --------------------------------------------------------------------------- durability


def test_a_save_is_written_whole_and_fsynced_then_renamed_then_the_directory_fsynced(
    tmp_path, monkeypatch
):
    import stat

    ckpt, _ = _ckpt()
    path = tmp_path / "last.ckpt"
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        st = os.fstat(fd)
        kind = "dir" if stat.S_ISDIR(st.st_mode) else "file"
        events.append(("fsync", kind, st.st_ino, st.st_size))
        return real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", os.stat(src).st_ino, os.fspath(src), os.fspath(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    save_checkpoint(path, ckpt)
    size = path.stat().st_size
    renames = [e for e in events if e[0] == "replace"]
    assert len(renames) == 1
    _, ino, src, dst = renames[0]
    assert dst == str(path) and os.path.dirname(src) == str(tmp_path) and src != dst
    i = events.index(renames[0])
    # the temporary was fsynced whole before the rename made it the checkpoint ...
    assert ("fsync", "file", ino, size) in events[:i]
    # ... and the directory after it, so that the rename itself is durable
    assert ("fsync", "dir", tmp_path.stat().st_ino, tmp_path.stat().st_size) in events[i + 1 :]
    assert load_checkpoint(path).iteration == 7


@pytest.mark.parametrize("crash_at", ["fsync", "replace"])
def test_a_crash_during_a_save_leaves_the_previous_checkpoint(tmp_path, monkeypatch, crash_at):
    path = tmp_path / "last.ckpt"
    good, _ = _ckpt(iteration=3)
    save_checkpoint(path, good)
    before = path.read_bytes()

    def crash(*args):
        raise OSError(f"simulated crash in {crash_at}")

    monkeypatch.setattr(os, crash_at, crash)
    newer, _ = _ckpt(iteration=4)
    with pytest.raises(OSError, match="simulated crash"):
        save_checkpoint(path, newer)
    monkeypatch.undo()
    assert path.read_bytes() == before and load_checkpoint(path).iteration == 3
    assert os.listdir(tmp_path) == ["last.ckpt"]


# --------------------------------------------------------------------------- fields


def test_the_tokenizer_record_is_saved_and_read_back(tmp_path):
    ckpt, _ = _ckpt()
    ckpt.tokenizer = {"kind": "bpe", "merges": [[104, 105], [256, 33]], "vocab_size": 258}
    save_checkpoint(tmp_path / "last.ckpt", ckpt)
    got = load_checkpoint(tmp_path / "last.ckpt")
    assert got.tokenizer == ckpt.tokenizer and got.vocab == "abcde"
    ckpt.tokenizer = None  # a character-level run: no record, read back as None
    save_checkpoint(tmp_path / "char.ckpt", ckpt)
    assert load_checkpoint(tmp_path / "char.ckpt").tokenizer is None


def test_a_checkpoint_of_another_format_version_is_refused(tmp_path, monkeypatch):
    ckpt, _ = _ckpt()
    meta = Checkpoint._meta
    monkeypatch.setattr(Checkpoint, "_meta", lambda self: {**meta(self), "format": 3})
    save_checkpoint(tmp_path / "future.ckpt", ckpt)  # a valid file, checksum and all
    with pytest.raises(ValueError, match=r"unexpected metadata \(format 3"):
        load_checkpoint(tmp_path / "future.ckpt")
    monkeypatch.undo()
    raw = _v1_bytes(ckpt)  # format 1's container whose metadata claims format 2

    import io
    import json

    with np.load(io.BytesIO(raw[56:])) as z:
        arrays = {k: z[k] for k in z.files}
    meta2 = {**json.loads(arrays["meta"].tobytes()), "format": 2}
    arrays["meta"] = np.frombuffer(json.dumps(meta2).encode(), dtype=np.uint8)
    (tmp_path / "odd.ckpt").write_bytes(_v1_file(arrays))
    with pytest.raises(ValueError, match=r"unexpected metadata \(format 2"):
        load_checkpoint(tmp_path / "odd.ckpt")


def test_a_failed_checksum_says_whether_the_file_was_cut_extended_or_changed(tmp_path):
    """The three diagnoses, each with the sizes recomputed from the file's own header."""
    import json

    ckpt, _ = _ckpt()
    path = tmp_path / "last.ckpt"
    save_checkpoint(path, ckpt)
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    end = max(e["data_offsets"][1] for k, e in header.items() if k != "__metadata__")
    assert 8 + n + end == len(raw)  # the header accounts for every byte
    changed = bytearray(raw)
    changed[-1] ^= 0x01  # the last tensor byte: same length, another value
    path.write_bytes(bytes(changed))
    with pytest.raises(ValueError) as e:
        load_checkpoint(path)
    assert str(e.value) == (
        f"checkpoint {str(path)!r} is corrupted: its SHA-256 checksum does not match"
    )
    path.write_bytes(raw + b"\x00\x00")
    with pytest.raises(ValueError, match="corrupted: 2 unexpected bytes after the tensors"):
        load_checkpoint(path)
    path.write_bytes(raw[:-3])
    want = f"truncated: its header promises {len(raw)} bytes, the file holds {len(raw) - 3}"
    with pytest.raises(ValueError, match=want):
        load_checkpoint(path)


def test_the_header_bounds_just_inside_and_just_outside(tmp_path):
    """A file shorter than the 8-byte length is truncated, one of 8 is not (it is no
    checkpoint); a header length of exactly the largest accepted is read on (and found
    cut short here), one byte more is not a resgrad checkpoint."""
    from resgrad.formats.checkpoint import _MAX_HEADER

    path = tmp_path / "x.ckpt"
    path.write_bytes(b"\x10" * 7)
    with pytest.raises(ValueError, match="7 bytes, shorter than its 8-byte header"):
        load_checkpoint(path)
    path.write_bytes(b"\x10" * 8)
    with pytest.raises(ValueError, match=r"is not a resgrad checkpoint \(bad header\)"):
        load_checkpoint(path)
    path.write_bytes(_MAX_HEADER.to_bytes(8, "little") + b'{"format": 2}')
    with pytest.raises(ValueError, match=f"promises {_MAX_HEADER} bytes of header, the file "
                                         "holds 13"):  # fmt: skip
        load_checkpoint(path)
    path.write_bytes((_MAX_HEADER + 1).to_bytes(8, "little") + b'{"format": 2}')
    with pytest.raises(ValueError, match=r"is not a resgrad checkpoint \(bad header\)"):
        load_checkpoint(path)


def test_optimizer_state_keeps_its_dtype_and_a_resume_refuses_a_wrong_one(tmp_path):
    """The file keeps each array's own dtype and shape (nothing is cast to fit); a run
    resumed from a checkpoint whose AdamW moments are float64, or of another shape, for
    its float32 model is refused, naming the key, before it trains."""
    from resgrad.train.config import TrainConfig
    from resgrad.train.loop import train

    ckpt, _ = _ckpt()
    ckpt.optimizer["m.wte"] = ckpt.optimizer["m.wte"].astype(np.float64)
    save_checkpoint(tmp_path / "x.ckpt", ckpt)
    assert load_checkpoint(tmp_path / "x.ckpt").optimizer["m.wte"].dtype == np.float64

    data = tmp_path / "data.txt"
    data.write_text("the quick brown fox jumps over the lazy dog. " * 40, encoding="utf-8")
    cfg = TrainConfig(n_layer=1, n_head=2, n_embd=8, block_size=8, batch_size=2, max_iters=2,
                      warmup_iters=0, lr_decay_iters=4, eval_interval=2, eval_iters=1,
                      data=str(data), out_dir=str(tmp_path / "run"))  # fmt: skip
    train(cfg, progress=False, log=lambda s: None)
    last = tmp_path / "run" / "last.ckpt"
    good = load_checkpoint(last)
    wte = good.optimizer["v.wte"]
    for bad, said in ((wte.astype(np.float64), f"{wte.shape} float64, expected {wte.shape} "
                                                "float32"),
                      (wte[:-1], f"{wte[:-1].shape} float32")):  # fmt: skip
        good.optimizer["v.wte"] = bad
        save_checkpoint(last, good)
        with pytest.raises(ValueError, match=rf"optimizer state v\.wte has shape {said}"
                           .replace("(", r"\(").replace(")", r"\)")):  # fmt: skip
            train(TrainConfig(**{**cfg.__dict__, "max_iters": 4, "resume": True}),
                  progress=False, log=lambda s: None)  # fmt: skip
        assert load_checkpoint(last).iteration == 2  # nothing trained
