import math

import numpy as np
import pytest

from resgrad.train.optim import AdamW, AdamWConfig, LRSchedule, clip_grad_norm, grad_norms

SHAPES = {
    "wte": (7, 4),  # 2-D: decayed
    "blocks.0.attn.w_qkv": (4, 12),  # 2-D: decayed
    "blocks.0.attn.b_qkv": (12,),  # bias: not decayed
    "blocks.0.ln1.g": (4,),  # gain: not decayed
    "blocks.0.alpha": (1,),  # rezero scalar: not decayed
}


@pytest.fixture(params=[False, True], ids=["numpy-passes", "fused"])
def fused(request):
    """Both ways AdamW steps: NumPy's passes (the readable reference) and the numba kernel."""
    return request.param


def _params(seed=0):
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(s) for k, s in SHAPES.items()}  # float64


def _grads(step):
    rng = np.random.default_rng(100 + step)
    return {k: rng.standard_normal(s) for k, s in SHAPES.items()}


def test_adamw_matches_torch_over_10_steps_in_float64(torch, fused):
    cfg = AdamWConfig(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.5)
    sched = LRSchedule(lr=1e-2, min_lr=1e-3, warmup_iters=3, lr_decay_iters=8)
    params = _params()
    tparams = {k: torch.tensor(v.copy(), requires_grad=True) for k, v in params.items()}
    decay = [p for p in tparams.values() if p.dim() >= 2]
    no_decay = [p for p in tparams.values() if p.dim() < 2]
    topt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": cfg.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=cfg.lr,
        betas=(cfg.beta1, cfg.beta2),
        eps=cfg.eps,
    )
    opt = AdamW(params, cfg, fused=fused)
    for step in range(10):
        lr = sched(step)
        grads = _grads(step)
        opt.step(grads, lr=lr)
        for group in topt.param_groups:
            group["lr"] = lr
        for k, p in tparams.items():
            p.grad = torch.tensor(grads[k])
        topt.step()
    worst = max(float(np.max(np.abs(params[k] - tparams[k].detach().numpy()))) for k in SHAPES)
    assert worst < 1e-10, worst
    print(f"max |adamw - torch| after 10 steps: {worst:.1e}")
    # the state agrees too
    for k, p in tparams.items():
        st = topt.state[p]
        assert np.max(np.abs(opt.m[k] - st["exp_avg"].numpy())) < 1e-12
        assert np.max(np.abs(opt.v[k] - st["exp_avg_sq"].numpy())) < 1e-12


def test_weight_decay_touches_only_2d_parameters(fused):
    params = _params()
    before = {k: v.copy() for k, v in params.items()}
    opt = AdamW(params, AdamWConfig(lr=0.1, weight_decay=0.5), fused=fused)
    opt.step({k: np.zeros_like(v) for k, v in params.items()})  # zero gradient: only decay acts
    for k in SHAPES:
        if len(SHAPES[k]) >= 2:
            np.testing.assert_allclose(params[k], before[k] * (1 - 0.1 * 0.5), rtol=1e-15)
        else:
            assert np.array_equal(params[k], before[k]), k


def test_updates_in_place_and_keeps_float32():
    params = {k: v.astype(np.float32) for k, v in _params().items()}
    ids = {k: id(v) for k, v in params.items()}
    opt = AdamW(params)
    opt.step({k: np.ones_like(v) for k, v in params.items()}, lr=1e-3)
    assert all(id(v) == ids[k] and v.dtype == np.float32 for k, v in params.items())
    assert all(m.dtype == np.float32 for m in opt.m.values())


def test_state_dict_round_trip_continues_identically():
    p1, p2 = _params(), _params()
    o1, o2 = AdamW(p1), AdamW(p2)
    for s in range(3):
        o1.step(_grads(s))
        o2.step(_grads(s))
    state = o1.state_dict()
    assert int(state["step"]) == 3 and "m.wte" in state and "v.blocks.0.alpha" in state
    p3 = {k: v.copy() for k, v in p1.items()}
    o3 = AdamW(p3)
    o3.load_state_dict(state)
    for s in range(3, 6):
        o2.step(_grads(s))
        o3.step(_grads(s))
    for k in SHAPES:
        assert np.array_equal(p2[k], p3[k])


def test_mismatched_state_and_grads_are_refused():
    opt = AdamW(_params())
    state = opt.state_dict()
    del state["m.wte"]
    with pytest.raises(ValueError, match="m.wte"):
        opt.load_state_dict(state)
    state = opt.state_dict()
    state["v.wte"] = np.zeros((3, 3))
    with pytest.raises(ValueError, match=r"v.wte has shape \(3, 3\)"):
        opt.load_state_dict(state)
    with pytest.raises(ValueError, match="missing"):
        opt.step({"wte": np.zeros((7, 4))})


def test_clip_grad_norm_matches_torch(torch):
    grads = _grads(0)
    tgrads = {k: torch.tensor(v.copy()) for k, v in grads.items()}
    tparams = [torch.zeros(s, requires_grad=True) for s in SHAPES.values()]
    for p, g in zip(tparams, tgrads.values()):
        p.grad = g
    t_total = torch.nn.utils.clip_grad_norm_(tparams, 1.0)
    total = clip_grad_norm(grads, 1.0)
    assert total == pytest.approx(float(t_total), rel=1e-12)
    for p, k in zip(tparams, SHAPES):
        np.testing.assert_allclose(grads[k], p.grad.numpy(), rtol=1e-12)
    assert math.sqrt(sum(n * n for n in grad_norms(grads).values())) == pytest.approx(1.0, 1e-5)


def test_clip_leaves_small_gradients_and_zero_disables():
    grads = {"a": np.array([3.0, 4.0])}
    assert clip_grad_norm(grads, 10.0) == 5.0 and np.array_equal(grads["a"], [3.0, 4.0])
    assert clip_grad_norm(grads, 0.0) == 5.0 and np.array_equal(grads["a"], [3.0, 4.0])


def test_schedule_is_nanogpts_get_lr():
    s = LRSchedule(lr=1e-3, min_lr=1e-4, warmup_iters=100, lr_decay_iters=2000)

    def get_lr(it):  # nanoGPT train.py, verbatim logic
        if it < 100:
            return 1e-3 * (it + 1) / (100 + 1)
        if it > 2000:
            return 1e-4
        decay_ratio = (it - 100) / (2000 - 100)
        coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
        return 1e-4 + coeff * (1e-3 - 1e-4)

    for it in [0, 1, 50, 99, 100, 101, 1000, 1999, 2000, 2001, 5000]:
        assert s(it) == get_lr(it)
    assert s(100) == 1e-3 and s(2000) == pytest.approx(1e-4) and s(3000) == 1e-4
    lrs = [s(i) for i in range(100, 2001)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))  # monotone decay


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"lr": -1.0}, "lr"),
        ({"min_lr": 1.0}, "min_lr"),
        ({"warmup_iters": -1}, "warmup_iters"),
        ({"warmup_iters": 10, "lr_decay_iters": 10}, "lr_decay_iters"),
    ],
)
def test_schedule_validation(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        LRSchedule(**kwargs)


@pytest.mark.parametrize(
    "kwargs, needle",
    [({"beta1": 1.0}, "beta1"), ({"beta2": -0.1}, "beta2"), ({"eps": 0.0}, "eps"),
     ({"weight_decay": float("nan")}, "weight_decay"), ({"lr": float("inf")}, "lr")],
)  # fmt: skip
def test_adamw_config_validation(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        AdamWConfig(**kwargs)


def _adamw_reference(p0, grads, lr, beta1, beta2, eps, wd):
    """AdamW on a list of floats, line by line from the published algorithm, no NumPy.

    Loshchilov & Hutter, "Decoupled Weight Decay Regularization" (2019), Algorithm 2,
    in the form torch.optim.AdamW's documentation gives it (t counts from 1):
        theta = theta - lr * wd * theta
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g^2
        m_hat = m / (1 - beta1^t);  v_hat = v / (1 - beta2^t)
        theta = theta - lr * m_hat / (sqrt(v_hat) + eps)
    """
    theta, m, v = list(p0), [0.0] * len(p0), [0.0] * len(p0)
    for t, g in enumerate(grads, start=1):
        for i in range(len(theta)):
            theta[i] = theta[i] - lr * wd * theta[i]
            m[i] = beta1 * m[i] + (1 - beta1) * g[i]
            v[i] = beta2 * v[i] + (1 - beta2) * g[i] ** 2
            m_hat = m[i] / (1 - beta1**t)
            v_hat = v[i] / (1 - beta2**t)
            theta[i] = theta[i] - lr * m_hat / (math.sqrt(v_hat) + eps)
    return theta, m, v


def test_adamw_matches_the_published_update_rule_without_torch(fused):
    # a 2-D weight (decayed) and a bias (not), four steps of gradients that change sign
    w0, b0 = [0.5, -1.0, 2.0, 0.25], [0.1, -0.3]
    gs = [[0.3, -0.2, 0.05, 1.5, -0.4, 0.01], [-0.1, 0.4, 0.02, -2.0, 0.3, 0.0],
          [0.2, 0.2, -0.3, 0.5, -0.1, 0.05], [0.05, -0.6, 0.1, 0.7, 0.2, -0.02]]  # fmt: skip
    cfg = AdamWConfig(lr=0.1, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.1)
    params = {"w": np.array(w0).reshape(2, 2), "b": np.array(b0)}
    opt = AdamW(params, cfg, fused=fused)
    for g in gs:
        opt.step({"w": np.array(g[:4]).reshape(2, 2), "b": np.array(g[4:])})
    w, mw, vw = _adamw_reference(w0, [g[:4] for g in gs], 0.1, 0.9, 0.99, 1e-8, 0.1)
    b, mb, vb = _adamw_reference(b0, [g[4:] for g in gs], 0.1, 0.9, 0.99, 1e-8, 0.0)
    np.testing.assert_allclose(params["w"].ravel(), w, rtol=1e-13)
    np.testing.assert_allclose(params["b"], b, rtol=1e-13)
    np.testing.assert_allclose(opt.m["w"].ravel(), mw, rtol=1e-13)
    np.testing.assert_allclose(opt.v["b"], vb, rtol=1e-13)
    np.testing.assert_allclose(opt.m["b"], mb, rtol=1e-13)
    np.testing.assert_allclose(opt.v["w"].ravel(), vw, rtol=1e-13)


def test_adamw_first_step_worked_by_hand(fused):
    # at t = 1 the bias corrections make m_hat = g and sqrt(v_hat) = |g|, so the step is
    # lr * g / (|g| + eps): lr * sign(g) up to eps, whatever the betas; decay comes first
    p = {"w": np.array([[2.0, -1.0]]), "b": np.array([3.0])}
    opt = AdamW(p, AdamWConfig(lr=0.01, beta1=0.8, beta2=0.95, eps=1e-8, weight_decay=0.5),
                fused=fused)  # fmt: skip
    opt.step({"w": np.array([[4.0, -0.5]]), "b": np.array([-2.0])})
    decayed = 1 - 0.01 * 0.5
    want_w = [2.0 * decayed - 0.01 * 4 / (4 + 1e-8), -1.0 * decayed + 0.01 * 0.5 / (0.5 + 1e-8)]
    np.testing.assert_allclose(p["w"].ravel(), want_w, rtol=1e-15)
    np.testing.assert_allclose(p["b"], [3.0 + 0.01 * 2 / (2 + 1e-8)], rtol=1e-15)
    np.testing.assert_allclose(opt.m["w"].ravel(), [0.2 * 4.0, 0.2 * -0.5], rtol=1e-15)
    np.testing.assert_allclose(opt.v["w"].ravel(), [0.05 * 16.0, 0.05 * 0.25], rtol=1e-15)


@pytest.mark.parametrize("parts", [2, 3, 7])
def test_adamw_in_parts_on_threads_is_bit_identical(parts, monkeypatch, fused):
    from concurrent.futures import ThreadPoolExecutor

    from resgrad.train import optim

    # slices of >= 1000 elements: "big" is sliced, the small ones go whole to part 0; in
    # the parts, pieces of 1000 elements, where the plain run takes each array whole
    monkeypatch.setattr(optim, "MIN_SLICE", 1000)
    rng = np.random.default_rng(0)
    shapes = {"w": (37, 11), "b": (11,), "one": (1,), "tiny": (2,), "big": (300, 64)}
    init = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    init["f"] = np.asfortranarray(rng.standard_normal((5, 6)).astype(np.float32))  # no flat view
    init["F"] = np.asfortranarray(rng.standard_normal((400, 64)).astype(np.float32))  # largest
    runs = []
    with ThreadPoolExecutor(parts) as pool:
        for kw, chunk in (({}, 1 << 40), ({"pool": pool, "parts": parts}, 1000)):
            monkeypatch.setattr(optim, "CHUNK", chunk)
            params = {k: a.copy(order="K") for k, a in init.items()}
            opt = AdamW(params, AdamWConfig(lr=1e-2, weight_decay=0.1), fused=fused)
            for step in range(3):
                g_rng = np.random.default_rng(step)  # the same gradients in both runs
                grads = {k: g_rng.standard_normal(a.shape).astype(np.float32)
                         for k, a in init.items()}  # fmt: skip
                opt.step(grads, **kw)
            runs.append(params)
    assert not params["f"].flags.c_contiguous
    for k in init:
        assert not np.array_equal(runs[1][k], init[k]), k  # every part was updated
        assert runs[0][k].tobytes() == runs[1][k].tobytes(), k


def test_adamw_slices_only_large_parameters_and_a_small_model_stays_on_one_thread():
    from resgrad.train.optim import MIN_SLICE, _sliced

    big = np.zeros(2 * MIN_SLICE, np.float32)
    assert _sliced(big, 2) and not _sliced(big, 3) and not _sliced(big, 1)
    assert not _sliced(np.asfortranarray(big.reshape(2, -1)), 2)  # no flat view

    class Refuses:  # a pool that must not be used
        def map(self, *a):
            raise AssertionError("a model with no large parameter went to the threads")

    params = {"w": np.ones((3, 4), np.float32), "b": np.ones(4, np.float32)}
    AdamW(params, AdamWConfig(lr=0.1)).step({k: np.ones_like(a) for k, a in params.items()},
                                           pool=Refuses(), parts=2)  # fmt: skip
    assert (params["b"] < 1).all()


@pytest.mark.parametrize("compiled", [False, True])
def test_grad_norms_in_float64_pieces_equal_the_whole_norm(monkeypatch, compiled):
    """Both passes: the readable NumPy one in pieces of CHUNK, and the compiled kernel
    where it runs (the kernel would otherwise hide the pieces' bounds from this test)."""
    from resgrad.nn import kernels
    from resgrad.train import optim

    monkeypatch.setattr(kernels, "ENABLED", compiled)
    monkeypatch.setattr(optim, "CHUNK", 7)  # pieces of 7: every boundary case below
    rng = np.random.default_rng(0)
    grads = {
        "w": rng.standard_normal((5, 3)).astype(np.float32),  # 15 = 7 + 7 + 1
        "f": np.asfortranarray(rng.standard_normal((4, 5)).astype(np.float32)),
        "b": rng.standard_normal(7).astype(np.float32),  # one whole piece
        "big": np.full(9, 1e30, np.float32),  # squares overflow float32, not float64
        "none": np.zeros(0, np.float32),
    }
    got = grad_norms(grads)
    for k, g in grads.items():
        assert got[k] == pytest.approx(float(np.linalg.norm(g.astype(np.float64))), rel=1e-14), k
    assert math.isfinite(got["big"]) and grad_norms({}) == {}
    assert math.isnan(grad_norms({"x": np.array([1.0, np.nan, 2.0], np.float32)})["x"])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_fused_kernel_gives_the_numpy_passes_bytes(dtype):
    """The numba kernel does every rounding of the readable NumPy passes, in their order:
    20 steps of both from the same start give the same bytes, parameters and moments."""
    rng = np.random.default_rng(0)
    shapes = {"w": (67, 45), "b": (45,), "alpha": (1,)}
    init = {k: rng.standard_normal(s).astype(dtype) for k, s in shapes.items()}
    init["f"] = np.asfortranarray(rng.standard_normal((5, 6)).astype(dtype))  # NumPy's path
    runs = []
    for fused in (False, True):
        params = {k: a.copy(order="K") for k, a in init.items()}
        opt = AdamW(params, AdamWConfig(lr=3e-3, beta1=0.8, weight_decay=0.1), fused=fused)
        for step in range(20):
            g_rng = np.random.default_rng(step)
            grads = {k: (g_rng.standard_normal(a.shape) * 10.0 ** (step % 5 - 2)).astype(dtype)
                     for k, a in init.items()}  # fmt: skip
            opt.step(grads, lr=3e-3 * (1 + step % 3))
        runs.append((params, opt.m, opt.v))
    for k in init:
        assert not np.array_equal(runs[1][0][k], init[k]), k
        for a, b in zip(runs[0], runs[1]):
            assert a[k].tobytes() == b[k].tobytes(), k


def test_fused_true_without_numba_is_refused(monkeypatch):
    from resgrad.train import optim

    monkeypatch.setattr(optim, "_FUSED", [None])
    params = {"b": np.ones(3)}
    with pytest.raises(ValueError, match="fused=True.*needs numba"):
        AdamW(params, fused=True).step({"b": np.ones(3)})
    AdamW(params).step({"b": np.ones(3)})  # the default falls back to NumPy's passes
    assert (params["b"] < 1).all()


def test_a_state_of_another_dtype_or_shape_is_refused_naming_its_key():
    """A float32 model's state must be float32: float64 moments (or the model's shape
    transposed) are refused by key, before anything of the optimizer changes."""
    params = {k: v.astype(np.float32) for k, v in _params().items()}
    opt = AdamW(params)
    opt.step({k: np.ones_like(v) for k, v in params.items()})
    good = opt.state_dict()
    before = {k: v.copy() for k, v in good.items()}
    for key, bad, said in (
        ("m.wte", good["m.wte"].astype(np.float64), r"m.wte has shape \(7, 4\) float64, "
                                                     r"expected \(7, 4\) float32"),
        ("v.blocks.0.ln1.g", good["v.blocks.0.ln1.g"].astype(np.float16), "v.blocks.0.ln1.g"),
        ("v.wte", good["v.wte"].T.copy(), r"v.wte has shape \(4, 7\) float32"),
        ("m.blocks.0.alpha", np.zeros((), np.float32), r"m.blocks.0.alpha has shape \(\)"),
    ):  # fmt: skip
        fresh = AdamW(params)
        with pytest.raises(ValueError, match=f"optimizer state {said}"):
            fresh.load_state_dict({**good, key: bad})
        assert fresh.step_count == 0 and not fresh.m["wte"].any()  # nothing was taken
    fresh = AdamW(params)
    fresh.load_state_dict(good)
    assert fresh.step_count == 1
    assert all(np.array_equal(fresh.m[k], before[f"m.{k}"]) for k in params)


@pytest.mark.parametrize(
    "step, ok",
    [(np.array(0, np.int64), True), (np.array(-1, np.int64), False),
     (np.array(2.5), False), (np.array([3], np.int64), False), (7, True)],
)  # fmt: skip
def test_the_step_count_is_one_integer_at_least_0(step, ok):
    opt = AdamW(_params())
    state = {**opt.state_dict(), "step": step}
    if ok:
        opt.load_state_dict(state)
        assert opt.step_count == int(step)
    else:
        with pytest.raises(ValueError, match="optimizer state step is .*expected one integer >= 0"):
            opt.load_state_dict(state)


@pytest.mark.parametrize(
    "kwargs, ok",
    [({"lr": 0.0}, True), ({"lr": -1e-300}, False), ({"beta1": 0.0}, True),
     ({"beta1": -1e-300}, False), ({"beta1": 0.9999999}, True), ({"beta1": 1.0}, False),
     ({"beta2": 0.0}, True), ({"beta2": 1.0}, False), ({"eps": 1e-300}, True),
     ({"eps": 0.0}, False), ({"weight_decay": 0.0}, True), ({"weight_decay": -1e-300}, False)],
)  # fmt: skip
def test_adamw_config_bounds_just_inside_and_just_outside(kwargs, ok):
    if ok:
        AdamWConfig(**kwargs)
    else:
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            AdamWConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs, ok",
    [({"min_lr": 0.0, "lr": 1e-300}, True), ({"min_lr": 0.0, "lr": 0.0}, False),
     ({"lr": 1e-3, "min_lr": 1e-3}, True), ({"lr": 1e-3, "min_lr": 1.0000001e-3}, False),
     ({"min_lr": 0.0}, True), ({"min_lr": -1e-300}, False), ({"warmup_iters": 0}, True),
     ({"warmup_iters": -1}, False), ({"warmup_iters": 9, "lr_decay_iters": 10}, True),
     ({"warmup_iters": 10, "lr_decay_iters": 10}, False)],
)  # fmt: skip
def test_schedule_bounds_just_inside_and_just_outside(kwargs, ok):
    if ok:
        LRSchedule(**kwargs)
    else:
        with pytest.raises(ValueError, match=list(kwargs)[-1]):
            LRSchedule(**kwargs)


def test_the_schedule_at_the_ends_of_its_phases():
    """The warm-up's last step is just below lr, its end exactly lr; the floor from just
    after lr_decay_iters (at it, the cosine's end, within rounding)."""
    s = LRSchedule(lr=1.0, min_lr=0.25, warmup_iters=3, lr_decay_iters=7)
    assert [s(i) for i in range(3)] == [0.25, 0.5, 0.75]  # (it + 1) / (warmup + 1)
    assert s(3) == 1.0 and s(7) == pytest.approx(0.25, abs=1e-15) and s(8) == 0.25
    assert s(5) == pytest.approx(0.625)  # halfway down the cosine: (1 + 0.25) / 2
