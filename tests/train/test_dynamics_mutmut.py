"""train.dynamics, what its readers say and check: a run's records described in words (counts
and plurals, a torn tail's bytes), the damage of several runs in one report, the runs read in
order, the RMS of each array, a damaged step written as a count or in powers of ten from
10^6 on, the order of steps checked from the second record on, each damaged field named (and
a sound one beside it not), a run missing either file, a header's config that is no mapping;
the monitor's bands at their edges, its interval, a zero median, its silence on inf and NaN;
update ratios taken in place and silent on a block of zeros. These are the bugs mutmut plants
here (scripts/mutmut/run.py); the records against their definitions, kills and resumes are in
test_dynamics.py."""

import math
import os
import tracemalloc

import numpy as np
import pytest

from resgrad.train.dynamics import (
    DYNAMICS_BIN,
    MAX_N_LAYER,
    DynamicsWriter,
    damage_report,
    read_dynamics,
    read_runs,
    record_dtype,
    rms,
)


def _write(run_dir, steps, n_layer=2):
    """A dynamics file whose records hold these steps (lr 1e-3, loss 2)."""
    os.makedirs(run_dir, exist_ok=True)
    with DynamicsWriter(run_dir, n_layer) as w:
        for s in steps:
            rec = np.zeros((), dtype=record_dtype(n_layer))
            rec["step"], rec["loss"], rec["lr"] = s, 2.0, 1e-3
            w.append(rec)
    return os.path.join(run_dir, DYNAMICS_BIN)


# -- describe


@pytest.mark.parametrize(
    "steps, n_layer, torn, said",
    [([0], 1, 0, "1 step of 1 block"),
     ([0, 1], 1, 0, "2 steps of 1 block"),
     ([0], 3, 0, "1 step of 3 blocks"),
     ([], 2, 0, "0 steps of 2 blocks"),
     ([0, 1, 2], 2, 5, "3 steps of 2 blocks; a torn last record, 5 bytes, was ignored")],
)  # fmt: skip
def test_a_run_is_described_in_words(tmp_path, steps, n_layer, torn, said):
    path = _write(tmp_path, steps, n_layer)
    with open(path, "ab") as f:
        f.write(b"\x07" * torn)
    assert read_dynamics(tmp_path).describe() == said


# -- several runs


def test_runs_are_read_in_order_and_only_the_damaged_are_reported(tmp_path):
    a, b, c = (str(tmp_path / n) for n in "abc")
    _write(a, range(4))
    _write(b, [0, 1, 1, 2])  # record 3 repeats step 1
    _write(c, [0, -5])  # record 2 is negative
    runs = read_runs([c, a, b])
    assert [d.run_dir for d in runs] == [c, a, b]
    assert [d.steps.tolist() for d in runs] == [[0], [0, 1, 2, 3], [0, 1]]
    assert damage_report(runs, "resgrad compare") == (
        f"resgrad compare: {c}: dynamics.bin: record 2 of 2 is damaged (step -5 after 0); "
        "kept the first 1\n"
        f"resgrad compare: {b}: dynamics.bin: record 3 of 4 is damaged (step 1 after 1); "
        "kept the first 2\n"
    )
    assert damage_report(read_runs([a]), "x") == "" and read_runs([]) == []


# -- rms


def test_rms_is_the_root_of_the_mean_square_of_each_array():
    xs = [np.array([3.0, 4.0]), np.full((2, 5), -2.0, np.float32), np.array([[1.0], [0.0]])]
    got = rms(xs)
    assert got == [pytest.approx(math.sqrt(12.5), rel=1e-15), 2.0,
                   pytest.approx(math.sqrt(0.5), rel=1e-15)]  # fmt: skip
    assert all(type(v) is float for v in got) and rms([]) == []


# -- the words of a damaged step, and the order of steps


@pytest.mark.parametrize(
    "steps, why",
    [([0, 999_999, 999_999], "step 999999 after 999999"),  # the largest count in digits
     ([0, 10**6, 10**6], "step 1e06 after 1e06"),  # from 10^6 on: a power of ten
     ([0, 3 * 10**6, 2 * 10**6], "step 2e06 after 3e06"),
     ([0, 10**7, -(10**6)], "step -1e06 after 1e07"),
     ([0, 5, -999_999], "step -999999 after 5")],
)  # fmt: skip
def test_a_damaged_step_is_written_as_a_count_below_a_million(tmp_path, steps, why):
    _write(tmp_path, steps)
    assert read_dynamics(tmp_path).damage == (
        f"dynamics.bin: record 3 of 3 is damaged ({why}); kept the first 2"
    )


@pytest.mark.parametrize("second", [0, -1])
def test_the_order_of_steps_is_checked_from_the_second_record_on(tmp_path, second):
    """A second record whose step does not follow the first's is damage: one record kept."""
    _write(tmp_path, [0, second, 1])
    dyn = read_dynamics(tmp_path)
    assert dyn.steps.tolist() == [0]
    assert dyn.damage == (
        f"dynamics.bin: record 2 of 3 is damaged (step {second} after 0); kept the first 1"
    )
    _write(tmp_path, [7, 8])  # a first record at any step >= 0 follows nothing
    assert read_dynamics(tmp_path).damage is None


def _with(tmp_path, **fields):
    """Three sound records, the third given these fields."""
    path = _write(tmp_path, [0, 1, 2])
    recs = np.fromfile(path, dtype=record_dtype(2))
    for k, v in fields.items():
        recs[2][k] = v
    recs.tofile(path)
    return read_dynamics(tmp_path).damage


@pytest.mark.parametrize(
    "fields, why",
    [({"clipped": 2}, "clipped is 2, not 0 or 1"),  # the first value a run never writes
     ({"clipped": 255}, "clipped is 255, not 0 or 1"),
     ({"clipped": 1, "lr": np.nan}, "lr is nan"),  # a sound clipped beside a bad lr
     ({"clipped": 1, "lr": -1e-3}, "lr is -0.001"),
     ({"clipped": 0, "lr": np.inf}, "lr is inf")],
)  # fmt: skip
def test_each_damaged_field_is_named_and_the_sound_ones_are_not(tmp_path, fields, why):
    assert _with(tmp_path, **fields) == (
        f"dynamics.bin: record 3 of 3 is damaged ({why}); kept the first 2"
    )
    assert _with(tmp_path, clipped=1) is None  # clipped 1 is sound


def test_a_damaged_first_record_follows_nothing(tmp_path):
    _write(tmp_path, [-3, 0, 1])
    assert read_dynamics(tmp_path).damage == (
        "dynamics.bin: record 1 of 3 is damaged (step -3); kept the first 0"
    )


# -- the reader's refusals and the header's config


@pytest.mark.parametrize("missing", ["dynamics.json", "dynamics.bin"])
def test_a_run_without_either_file_holds_no_records(tmp_path, missing):
    _write(tmp_path, [0, 1])
    os.unlink(tmp_path / missing)
    with pytest.raises(ValueError) as e:
        read_dynamics(tmp_path)
    assert str(e.value) == (
        f"{str(tmp_path)!r} holds no dynamics records (dynamics.json, dynamics.bin); "
        "is it the --out-dir of a `resgrad train` run?"
    )


@pytest.mark.parametrize("config", [None, [1, 2], "lr=3e-3", 7])
def test_a_header_config_that_is_not_a_mapping_reads_as_none(tmp_path, config):
    import json

    _write(tmp_path, [0, 1])
    head_path = tmp_path / "dynamics.json"
    head = json.loads(head_path.read_text())
    head["config"] = config
    head_path.write_text(json.dumps(head))
    dyn = read_dynamics(tmp_path)
    assert dyn.config == {} and dyn.steps.tolist() == [0, 1]
    head["config"] = {"lr": 3e-3}
    head_path.write_text(json.dumps(head))
    assert read_dynamics(tmp_path).config == {"lr": 3e-3}


# -- the monitor: its interval, and silence on a diverging step


def _rec(step, grad, update):
    rec = np.zeros((), dtype=record_dtype(len(grad)))
    rec["step"], rec["grad"], rec["update"] = step, grad, update
    return rec


def test_each_warning_comes_again_every_100_steps_by_default(tmp_path):
    from resgrad.train.dynamics import DynamicsMonitor

    said = []
    mon = DynamicsMonitor(said.append)  # every=100
    bad = ([1e-7, 1.0, 1.0], [1e-3, 1e-3, 0.5])  # block 0 vanishing, block 2 overwritten
    counts = []
    for step in (1000, 1001, 1099, 1100, 1150, 1199, 1200):
        counts.append(len(mon.observe(_rec(step, *bad))))
    assert counts == [2, 0, 0, 2, 0, 0, 2]  # at 1000, at exactly 100 after, again
    assert len(said) == 6


def test_a_diverging_step_s_record_warns_nothing_from_numpy():
    import warnings

    from resgrad.train.dynamics import DynamicsMonitor

    mon = DynamicsMonitor(lambda line: None)
    with warnings.catch_warnings(), np.errstate(all="warn"):
        warnings.simplefilter("error")  # a RuntimeWarning from NumPy would raise here
        mon.observe(_rec(0, [0.0, np.inf, 1.0], [0.0, np.nan, np.inf]))
        mon.observe(_rec(200, [np.nan, np.nan, np.nan], [0.0, 0.0, 0.0]))


@pytest.mark.parametrize(
    "grad, warned",
    [([1.0, 1000.0, 1000.0], None),  # exactly 1e-3 x the median: on the band's edge, inside
     ([1000.0, 1.0, 1.0], None),  # exactly 1e3 x the median
     ([0.999, 1000.0, 1000.0], "block 0 gradient norm 0.999 is 0.000999x the median block's"),
     ([1e-2, 2e-2, 1.5e-2], None),  # a healthy run at a small scale: no block stands out
     ([1e-6, 1e-2, 1e-2], "block 0 gradient norm 1e-06 is 0.0001x the median block's (0.01)"),
     ([0.0, 0.0, 5.0], None),  # a median of 0: no ratio to speak of
     ([0.0, 0.0, 0.0], None)],
)  # fmt: skip
def test_a_gradient_warns_outside_the_band_around_the_median_and_on_it_not(grad, warned):
    from resgrad.train.dynamics import DynamicsMonitor

    said = DynamicsMonitor(lambda line: None).observe(_rec(3, grad, [1e-3] * 3))
    if warned is None:
        assert said == []
    else:
        assert len(said) == 1 and said[0].startswith(f"warning: step 3: {warned}"), said
        assert said[0].endswith("outside [0.001x, 1000x]")


@pytest.mark.parametrize(
    "update, warned",
    [(0.2, "block 1 update ratio ||dw||/||w|| = 0.2, outside [1e-05, 0.1]"),  # twice the bound
     (6e-6, "block 1 update ratio ||dw||/||w|| = 6e-06, outside [1e-05, 0.1]"),
     (0.09, None), (2e-5, None)],
)  # fmt: skip
def test_an_update_just_outside_its_band_warns(update, warned):
    from resgrad.train.dynamics import DynamicsMonitor

    said = DynamicsMonitor(lambda line: None).observe(_rec(9, [1.0] * 3, [1e-3, update, 1e-3]))
    assert said == ([] if warned is None else [f"warning: step 9: {warned}"])


# -- update ratios: in place, and silent on a block of zeros


def test_update_ratios_take_the_update_into_the_snapshot_instead_of_a_new_array():
    from resgrad.train.dynamics import snapshot_blocks, update_ratios

    rng = np.random.default_rng(0)
    params = {"blocks.0.w": rng.standard_normal((256, 256)), "blocks.1.b": rng.standard_normal(8)}
    before = snapshot_blocks(params)
    for p in params.values():
        p += 0.01
    tracemalloc.start()
    try:
        ratio = update_ratios(params, before, 2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < params["blocks.0.w"].nbytes // 4, peak  # no copy of the 512 KB weight
    np.testing.assert_allclose(before["blocks.0.w"], 0.01, rtol=1e-9)  # spent: the update
    assert ratio.shape == (2,) and np.all(ratio > 0)


def test_a_block_of_zero_weights_gives_inf_or_nan_without_a_warning():
    import warnings

    from resgrad.train.dynamics import snapshot_blocks, update_ratios

    params = {"blocks.0.w": np.zeros((2, 2)), "blocks.1.w": np.zeros((2, 2)),
              "blocks.2.w": np.ones((2, 2))}  # fmt: skip
    before = snapshot_blocks(params)
    params["blocks.0.w"] += 1.0  # moved from zero: inf; block 1 stays at zero: nan
    with warnings.catch_warnings(), np.errstate(all="warn"):
        warnings.simplefilter("error")
        ratio = update_ratios(params, before, 3)
    assert np.isinf(ratio[0]) and np.isnan(ratio[1]) and ratio[2] == 0.0


# -- the writer: its header, a fresh start, a resume, the file's mode, fd 0


def test_the_header_says_how_to_read_the_records(tmp_path):
    import json

    from resgrad.train.dynamics import PER_BLOCK, DynamicsWriter

    with DynamicsWriter(tmp_path, 3, config={"lr": 3e-3}) as w:
        assert (w.n_layer, w.dtype, w.path) == (3, record_dtype(3),
                                                str(tmp_path / DYNAMICS_BIN))  # fmt: skip
    head = json.loads((tmp_path / "dynamics.json").read_text(encoding="utf-8"))
    dt = record_dtype(3)
    assert head == {
        "format": "resgrad-dynamics", "version": 1, "n_layer": 3, "record_bytes": dt.itemsize,
        "dtype": json.loads(json.dumps(np.lib.format.dtype_to_descr(dt))),
        "per_block": PER_BLOCK, "config": {"lr": 3e-3},
    }  # fmt: skip
    assert list(head["per_block"]) == list(dt.names[5:])  # the words, in record order


@pytest.mark.parametrize("old", ["missing", "damaged", "of another depth"])
def test_a_fresh_run_replaces_what_was_there_without_a_word(tmp_path, old):
    if old != "missing":
        path = _write(tmp_path, [0, 1, 2], n_layer=3 if old == "of another depth" else 2)
        if old == "damaged":
            with open(path, "r+b") as f:
                f.write(b"\xff" * 8)  # the first record's step: -1
    said = []
    with DynamicsWriter(tmp_path, 2, start=0, log=said.append, config={"run": "new"}):
        pass
    assert said == [] and read_dynamics(tmp_path).steps.size == 0
    assert read_dynamics(tmp_path).config == {"run": "new"}


@pytest.mark.parametrize("start", [1, 2])
def test_a_resume_keeps_the_records_before_it_and_the_header_they_were_written_under(
    tmp_path, start
):
    _write(tmp_path, [0, 1, 2, 3])  # config {}
    head = (tmp_path / "dynamics.json").read_bytes()
    said = []
    with DynamicsWriter(tmp_path, 2, start=start, log=said.append, config={"run": "resumed"}):
        pass
    assert said == [] and read_dynamics(tmp_path).steps.tolist() == list(range(start))
    assert (tmp_path / "dynamics.json").read_bytes() == head  # not rewritten


def test_the_records_file_is_made_readable_and_writable_not_executable(tmp_path):
    umask = os.umask(0o022)
    try:
        DynamicsWriter(tmp_path, 2).close()
    finally:
        os.umask(umask)
    assert os.stat(tmp_path / DYNAMICS_BIN).st_mode & 0o777 == 0o644  # 0o666 less the umask


def test_a_writer_on_descriptor_0_closes_it(tmp_path):
    """A process started with stdin closed hands out descriptor 0 first: it is the file's."""
    try:
        saved = os.dup(0)
    except OSError:  # closed already (a test runner's worker)
        saved = None
    try:
        if saved is not None:
            os.close(0)
        w = DynamicsWriter(tmp_path, 2)
        assert w._fd == 0
        w.close()
        with pytest.raises(OSError):
            os.fstat(0)  # closed
        w.close()  # twice: nothing more to close
    finally:
        if saved is not None:
            os.dup2(saved, 0)
            os.close(saved)


def test_a_closed_writer_closes_nothing_more(tmp_path):
    """Closing twice (a with block after an explicit close) leaves every other descriptor
    alone: stdout, 1, is still open."""
    saved = os.dup(1)
    try:
        w = DynamicsWriter(tmp_path, 2)
        w.close()
        w.close()
        os.fstat(1)  # raises if the second close took descriptor 1
    finally:
        os.dup2(saved, 1)
        os.close(saved)


# -- a record's depth and its kinds


@pytest.mark.parametrize("n_layer", [1, 2, np.int64(3), MAX_N_LAYER])
def test_every_integer_depth_from_1_has_records(n_layer):
    dt = record_dtype(n_layer)
    assert dt["grad"].shape == (int(n_layer),) and dt["stream_grad"].shape == (int(n_layer) + 1,)


@pytest.mark.parametrize("n_layer", [0, -1, MAX_N_LAYER + 1, 2.0, "3", True, None])
def test_a_depth_that_is_not_an_integer_from_1_is_refused_in_words(n_layer):
    with pytest.raises(ValueError) as e:
        record_dtype(n_layer)
    assert str(e.value) == f"n_layer must be an integer in [1, 1000000], got {n_layer!r}"


def test_a_kind_of_parameter_a_model_lacks_records_zero():
    """A block without LayerNorm parameters (no norms named ln*), or no norms at all: 0."""
    from resgrad.train.dynamics import make_record

    norms = {"blocks.0.attn.w_qkv": 3.0, "blocks.0.mlp.w_fc": 4.0, "blocks.1.attn.w_qkv": 1.0,
             "blocks.1.mlp.w_fc": 0.0}  # fmt: skip
    rec = make_record(2, 0, 2.0, 1e-3, 5.0, False, norms, [0.1, 0.1], [1.0] * 3, [1.0] * 2)
    assert rec["grad_ln"].tolist() == [0.0, 0.0]
    assert rec["grad_attn"].tolist() == [3.0, 1.0] and rec["grad"].tolist() == [5.0, 1.0]
    empty = make_record(2, 0, 2.0, 1e-3, 0.0, False, {}, [0.1, 0.1], [1.0] * 3, [1.0] * 2)
    assert [empty[k].tolist() for k in ("grad", "grad_attn", "grad_mlp", "grad_ln")] == [
        [0.0, 0.0]] * 4  # fmt: skip
