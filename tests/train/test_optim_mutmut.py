"""train.optim beyond the update rule: the compiled step's options (the GIL released for
the parts' threads, cached, NumPy's error model), clipping that does not clip writes
nothing, gradient norms on the calling thread unless a pool and parts are given, one
widening buffer per thread, the compiled norm taken where it runs, largest-first
balancing of the shared arrays and its threshold, the optimizer's scratch sized to one
piece and kept across steps, a loaded state copied into C order (not aliased, not kept
in Fortran order, where a flat view would be a copy), the refusals' lists and words, and
the schedule's peak exactly lr at the end of warm-up. These are the bugs mutmut plants
here (scripts/mutmut/run.py); the update rule against torch and the published algorithm
is in test_optim.py."""

import math
import tracemalloc

import numpy as np
import pytest

from resgrad.nn import kernels
from resgrad.train import optim
from resgrad.train.optim import (
    CHUNK,
    MIN_SHARE,
    AdamW,
    AdamWConfig,
    LRSchedule,
    clip_grad_norm,
    grad_norms,
    share,
)

# -- the compiled step


def test_the_compiled_step_releases_the_gil_is_cached_and_keeps_numpy_s_errors(monkeypatch):
    """The parts of a step run on threads only if the kernel releases the GIL; it is
    compiled once per install (cached on disk); and a zero or overflow gives inf or NaN as
    the NumPy passes do, not an exception (NumPy's error model)."""
    import numba

    asked = []

    def njit(**options):
        asked.append(options)
        return lambda fn: ("compiled", fn)

    monkeypatch.setattr(numba, "njit", njit)
    monkeypatch.setattr(optim, "_FUSED", [])
    assert optim.fused_kernel() == ("compiled", optim.adamw_piece)
    assert optim.fused_kernel() == ("compiled", optim.adamw_piece)  # looked up once
    assert asked == [{"cache": True, "nogil": True, "error_model": "numpy"}]


def _recording_kernel(monkeypatch):
    """The fused kernel, as the plain Python it is written in, counting its calls (pieces)."""
    calls = []

    def kernel(p, *rest):
        calls.append((p.size, p.dtype))
        optim.adamw_piece(p, *rest)

    monkeypatch.setattr(optim, "_FUSED", [kernel])
    return calls


def test_the_kernel_takes_the_flat_pieces_of_one_dtype_and_only_when_fused(monkeypatch):
    calls = _recording_kernel(monkeypatch)
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((4, 5)).astype(np.float32),
              "f": np.asfortranarray(rng.standard_normal((3, 2)).astype(np.float32)),
              "mixed": rng.standard_normal(6).astype(np.float32)}  # fmt: skip
    grads = {k: np.ones_like(p) for k, p in params.items()}  # f's in Fortran order too
    grads["mixed"] = np.ones(6)  # float64 for a float32 parameter: NumPy's passes
    AdamW(params, AdamWConfig(lr=1e-2), fused=True).step(grads)
    assert calls == [(20, np.float32)]  # w flat; f has no flat view, mixed two dtypes
    calls.clear()
    for fused in (None, True):  # the default takes the kernel where there is one
        AdamW({"b": np.ones(3)}, fused=fused).step({"b": np.ones(3)})
    assert calls == [(3, np.float64)] * 2
    calls.clear()
    AdamW({"b": np.ones(3)}, fused=False).step({"b": np.ones(3)})
    assert calls == []  # fused=False: NumPy's passes


def test_fused_true_without_numba_is_refused_in_words(monkeypatch):
    monkeypatch.setattr(optim, "_FUSED", [None])
    with pytest.raises(ValueError) as e:
        AdamW({"b": np.ones(3)}, fused=True).step({"b": np.ones(3)})
    assert str(e.value) == "AdamW(fused=True) needs numba, which is not installed"


# -- a step's parts and its refusal


def _big():
    """One parameter large enough to be cut into 2 slices, and its gradient."""
    params = {"w": np.ones(2 * optim.MIN_SLICE, np.float32), "b": np.ones(3, np.float32)}
    return params, {k: np.full_like(p, 0.25) for k, p in params.items()}


def test_a_step_goes_to_the_pool_only_with_parts_and_a_large_parameter():
    params, grads = _big()
    AdamW(params, AdamWConfig(lr=1e-2)).step(grads, pool=RefusingPool())  # one part: here
    pool = RecordingPool()
    ref = {k: p.copy() for k, p in params.items()}
    AdamW(params, AdamWConfig(lr=1e-2)).step(grads, pool=pool, parts=2)
    AdamW(ref, AdamWConfig(lr=1e-2)).step(grads)
    assert pool.groups == [0, 1]  # both parts went to the pool
    assert all(params[k].tobytes() == ref[k].tobytes() for k in params)


def test_a_step_s_gradients_of_other_keys_are_refused_naming_both_ways():
    _, opt = _opt()
    with pytest.raises(ValueError) as e:
        opt.step({"p0": np.ones((3, 4)), "p1": np.ones((3, 4)), "z": np.ones(1)})
    assert str(e.value) == (
        "gradient keys differ from parameters: missing ['p2', 'p3'], extra ['z']"
    )
    assert opt.step_count == 0


# -- clipping


def test_gradients_below_the_bound_are_not_written(monkeypatch):
    """Clipping that does not clip leaves the gradients alone: read-only arrays pass."""
    g = np.array([3.0, 4.0])
    g.flags.writeable = False
    for max_norm in (5.0 + 1e-5, 100.0, 0.0):  # just above the norm (+ 1e-6), far above, off
        assert clip_grad_norm({"a": g}, max_norm) == 5.0
    with pytest.raises(ValueError, match="read-only"):
        clip_grad_norm({"a": g}, 4.0)  # below the norm: scaled in place


# -- gradient norms: threads, buffers, the compiled pass


class RecordingPool:
    """A pool that runs each group in order on the calling thread, and keeps the groups."""

    def __init__(self):
        self.groups = []

    def map(self, fn, groups):
        groups = list(groups)
        self.groups.extend(groups)
        return [fn(g) for g in groups]


class RefusingPool:
    def map(self, *a):
        raise AssertionError("the pool was used")


def _large_grads():
    """Enough elements to share among 2 parts (2 x MIN_SHARE), float32."""
    rng = np.random.default_rng(0)
    return {
        "a": rng.standard_normal(MIN_SHARE).astype(np.float32),
        "b": rng.standard_normal(MIN_SHARE + 3).astype(np.float32),
    }


def test_norms_share_the_pool_only_when_given_parts():
    grads = _large_grads()
    want = {k: float(np.linalg.norm(g.astype(np.float64))) for k, g in grads.items()}
    got = grad_norms(grads, pool=RefusingPool())  # one part by default: the calling thread
    assert got == pytest.approx(want, rel=1e-12)
    pool = RecordingPool()
    got = grad_norms(grads, pool=pool, parts=2)
    assert sorted(map(sorted, pool.groups)) == [["a"], ["b"]]  # each part got one gradient
    assert got == pytest.approx(want, rel=1e-12) and list(got) == ["a", "b"]


def test_one_widening_buffer_per_thread_not_per_gradient(monkeypatch):
    monkeypatch.setattr(kernels, "ENABLED", False)  # the NumPy pass that uses the buffer
    real_empty = np.empty
    made = []  # the float64 arrays np.empty made

    def empty(shape, dtype=float, *a, **kw):
        out = real_empty(shape, dtype, *a, **kw)
        if out.dtype == np.float64:
            made.append(out.size)
        return out

    rng = np.random.default_rng(0)
    grads = {f"g{i}": rng.standard_normal(50 + i).astype(np.float32) for i in range(5)}
    monkeypatch.setattr(np, "empty", empty)
    got = grad_norms(grads)
    assert made == [54]  # one buffer, as long as the longest gradient (under CHUNK)
    for k, g in grads.items():
        assert got[k] == pytest.approx(float(np.linalg.norm(g.astype(np.float64))), rel=1e-12)


def test_the_compiled_norm_is_taken_where_it_runs(monkeypatch):
    """What kernels.sum_sq64 returns is the sum of squares (None: it does not run here)."""
    monkeypatch.setattr(kernels, "sum_sq64", lambda flat: 4.0 * flat.size)
    grads = {"a": np.ones(9, np.float32), "b": np.ones((2, 8), np.float32)}
    assert grad_norms(grads) == {"a": 6.0, "b": 8.0}
    monkeypatch.setattr(kernels, "sum_sq64", lambda flat: None)
    assert grad_norms({"a": np.full(9, 2.0, np.float32)}) == {"a": 6.0}


# -- share: largest first, each to the least loaded part


def _lpt(sizes: dict, parts: int) -> list[list[str]]:
    """The longest-processing-time rule, written out: the arrays by size, largest first
    (ties in key order), each to the part with the least work so far (ties: the first)."""
    groups, load = [[] for _ in range(parts)], [0] * parts
    order = sorted(sizes, key=lambda k: (-sizes[k], list(sizes).index(k)))
    for k in order:
        j = min(range(parts), key=lambda i: (load[i], i))
        groups[j].append(k)
        load[j] += sizes[k]
    return groups


@pytest.mark.parametrize(
    "units, parts",
    [({"a": 1, "b": 1, "c": 2}, 2),  # name order is not size order
     ({"a": 2, "b": 2, "c": 1, "d": 1}, 2),  # the loads add up: c and d go to different parts
     ({"x": 3, "a": 5, "m": 1, "b": 4, "z": 2, "c": 2}, 3),
     ({"p": 1, "q": 1, "r": 1, "s": 1, "t": 1}, 2)],  # ties: key order
)  # fmt: skip
def test_share_balances_largest_first_onto_the_least_loaded_part(units, parts):
    sizes = {k: u * MIN_SHARE for k, u in units.items()}
    arrays = {k: np.broadcast_to(np.float32(0), (n,)) for k, n in sizes.items()}  # no memory
    pool = RecordingPool()
    out = share(pool, parts, arrays, lambda k: k.upper())
    assert out == {k: k.upper() for k in units} and list(out) == list(units)
    assert pool.groups == _lpt(sizes, parts)


def test_share_begins_at_exactly_min_share_a_part():
    def arrays(n):
        return {"a": np.broadcast_to(np.float32(0), (MIN_SHARE,)),
                "b": np.broadcast_to(np.float32(0), (n,))}  # fmt: skip

    pool = RecordingPool()
    share(pool, 2, arrays(MIN_SHARE), len)  # 2 x MIN_SHARE in all: shared
    assert sorted(map(sorted, pool.groups)) == [["a"], ["b"]]
    share(RefusingPool(), 2, arrays(MIN_SHARE - 1), len)  # one element short: one thread


# -- the optimizer's scratch


def _step_allocations(opt, grads) -> int:
    """Peak bytes allocated by one step."""
    tracemalloc.start()
    try:
        opt.step(grads)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("fused", [False, True])
def test_the_scratch_holds_one_piece_and_is_kept_across_steps(fused):
    """The scratch is one piece (CHUNK elements) per dtype, however large the parameter,
    made on the first step and reused after: no array the size of a parameter per step."""
    params = {"w": np.ones(3 * CHUNK, np.float32), "b": np.ones(7, np.float32)}
    grads = {k: np.full_like(p, 0.5) for k, p in params.items()}
    opt = AdamW(params, AdamWConfig(lr=1e-3), fused=fused)
    first = _step_allocations(opt, grads)
    assert first < 1.5 * CHUNK * 4, first  # one float32 piece, not the 3-piece parameter
    again = [_step_allocations(opt, grads) for _ in range(2)]
    assert max(again) < CHUNK * 4 // 4, again  # nothing piece-sized made again


def test_a_fortran_parameter_s_scratch_is_the_whole_parameter():
    """A parameter without a flat view is updated whole, so its scratch is its size."""
    rng = np.random.default_rng(0)
    init = np.asfortranarray(rng.standard_normal((9, 5)))
    params = {"f": init.copy(order="F")}
    opt = AdamW(params, AdamWConfig(lr=1e-2), fused=False)
    grads = {"f": np.asfortranarray(rng.standard_normal((9, 5)))}
    opt.step(grads)
    ref = {"f": np.ascontiguousarray(init)}
    AdamW(ref, AdamWConfig(lr=1e-2), fused=False).step({"f": np.ascontiguousarray(grads["f"])})
    assert np.array_equal(params["f"], ref["f"])


# -- the state: refusals, copies, order


def _opt(seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    params = {f"p{i}": rng.standard_normal((3, 4)).astype(dtype) for i in range(4)}
    return params, AdamW(params, AdamWConfig(lr=1e-2))


def test_a_state_of_other_keys_is_refused_naming_the_first_five_each_way():
    params, opt = _opt()
    state = opt.state_dict()
    missing = {k: v for k, v in state.items() if k.startswith("m.") or k == "v.p0"}
    with pytest.raises(ValueError) as e:
        opt.load_state_dict({k: v for k, v in state.items() if k not in missing})
    assert str(e.value) == (
        "optimizer state does not match the parameters: missing "
        "['m.p0', 'm.p1', 'm.p2', 'm.p3', 'v.p0'], extra []"
    )
    extra = {f"x.{i}": np.zeros(1) for i in range(7)}
    with pytest.raises(ValueError) as e:
        opt.load_state_dict({**state, **extra})
    assert str(e.value) == (
        "optimizer state does not match the parameters: missing [], "
        "extra ['x.0', 'x.1', 'x.2', 'x.3', 'x.4']"
    )
    del state["m.p0"], state["m.p1"], state["m.p2"], state["m.p3"], state["v.p0"], state["v.p1"]
    with pytest.raises(ValueError, match=r"missing \['m.p0', 'm.p1', 'm.p2', 'm.p3', 'v.p0'\],"):
        opt.load_state_dict(state)  # six missing: five named


def test_a_bad_step_is_refused_in_words():
    _, opt = _opt()
    with pytest.raises(ValueError) as e:
        opt.load_state_dict({**opt.state_dict(), "step": np.array(-2)})
    assert str(e.value) == (
        "optimizer state step is array(-2); expected one integer >= 0 (the steps taken)"
    )


def test_a_loaded_state_is_copied_not_shared_with_the_caller():
    """Steps after a load leave the state they were given as it was (a checkpoint's arrays
    still held by its caller), and a second optimizer loaded from it is not moved by the
    first."""
    params, opt = _opt()
    opt.step({k: np.ones_like(p) for k, p in params.items()})
    state = opt.state_dict()
    saved = {k: np.array(v, copy=True) for k, v in state.items()}
    p2, o2 = _opt(1)
    o2.load_state_dict(state)
    for _ in range(2):
        o2.step({k: np.full_like(p, 0.5) for k, p in p2.items()})
    assert all(np.array_equal(state[k], saved[k]) for k in state)
    assert all(not np.shares_memory(o2.m[k], state[f"m.{k}"]) for k in p2)
    assert all(not np.shares_memory(o2.v[k], state[f"v.{k}"]) for k in p2)


@pytest.mark.parametrize("fused", [False, True])
def test_a_state_in_fortran_order_resumes_as_the_same_state_in_c_order(fused):
    """The moments are updated through flat views: a Fortran-ordered state (as a reader may
    hand it over) is taken in C order, so the steps after the load move it."""
    runs = []
    for order in ("C", "F"):
        params, opt = _opt()
        opt.step({k: np.ones_like(p) for k, p in params.items()})
        state = {k: np.array(v, order=order) for k, v in opt.state_dict().items()}
        p2 = {k: p.copy() for k, p in params.items()}
        o2 = AdamW(p2, AdamWConfig(lr=1e-2), fused=fused)
        o2.load_state_dict(state)
        rng = np.random.default_rng(3)
        for _ in range(3):
            o2.step({k: rng.standard_normal(p.shape) for k, p in p2.items()})
        assert all(o2.m[k].flags.c_contiguous and o2.v[k].flags.c_contiguous for k in p2)
        runs.append((p2, o2.m, o2.v))
    for a, b in zip(runs[0], runs[1]):
        assert all(a[k].tobytes() == b[k].tobytes() for k in a)


# -- the schedule's peak


@pytest.mark.parametrize("lr, min_lr, warmup", [(0.1, 0.01, 2), (0.1, 0.0, 5), (3e-3, 3e-4, 2)])
def test_where_warm_up_ends_the_cosine_begins_at_its_top(lr, min_lr, warmup):
    """At it == warmup_iters the cosine begins (nanoGPT's ``it < warmup_iters``), at its top,
    min_lr + 1 * (lr - min_lr): here exactly lr. The warm-up's line would give
    lr * (w + 1) / (w + 1), which rounds off lr for these (0.1 * 3 / 3 is 0.10000000000000002)."""
    s = LRSchedule(lr=lr, min_lr=min_lr, warmup_iters=warmup, lr_decay_iters=warmup + 10)
    top = min_lr + 0.5 * (1.0 + math.cos(0.0)) * (lr - min_lr)  # nanoGPT's get_lr at ratio 0
    assert s(warmup) == top == lr != lr * (warmup + 1) / (warmup + 1)
    assert s(warmup - 1) == lr * warmup / (warmup + 1)  # the warm-up's last step
    assert s(warmup + 1) < lr
    assert math.isclose(s(warmup + 5), (lr + min_lr) / 2, rel_tol=1e-12)  # cosine's middle
