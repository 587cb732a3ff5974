"""train.sample beyond the logits: the decode step's products written into the buffers the
cache keeps (of the model's dtype and shape), the config's LayerNorm epsilon on every path;
what sample_text and continue_text hand on (top_k, the seed and temperature defaults, the
thread count left to resgrad or not), the characters a stream held back flushed at the end;
load_model's refusals naming the checkpoint and its tokenizer taken from the record. These
are the bugs mutmut plants here (scripts/mutmut/run.py); the logits against the model's
forward are in test_sample.py and test_decode.py."""

import dataclasses

import numpy as np
import pytest

from resgrad.formats.checkpoint import Checkpoint, save_checkpoint
from resgrad.nn import kernels
from resgrad.train import sample
from resgrad.train.sample import (
    DecodeBuffers,
    KVCache,
    continue_text,
    decode_step,
    forward_step,
    generate,
    load_model,
    sample_text,
    sample_token,
)
from tests.train.test_sample import _model

START = np.array([[1, 2, 3], [4, 5, 6]])  # (B=2, T0=3)


# -- the decode step's buffers


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_buffers_are_of_the_model_s_dtype_and_shape(dtype):
    m = _model(dtype=dtype)
    buf = DecodeBuffers.empty(m.cfg, 3, dtype)
    C, F, S = m.cfg.n_embd, 4 * m.cfg.n_embd, m.cfg.block_size
    shapes = {"x": (3, C), "qkv": (3, 3 * C), "y": (3, C), "f": (3, C), "a": (3, F), "scores": (S,)}
    for name, shape in shapes.items():
        a = getattr(buf, name)
        assert a.shape == shape and a.dtype == dtype, name


class _Recorder:
    """np.dot or np.add, recording the ``out`` each call was given."""

    def __init__(self, fn, seen):
        self.fn, self.seen = fn, seen

    def __call__(self, *args, out=None, **kw):
        self.seen.append(out)
        return self.fn(*args, **kw) if out is None else self.fn(*args, out=out, **kw)

    def __getattr__(self, name):  # np.add.reduce and the like
        return getattr(self.fn, name)


@pytest.mark.parametrize("variant", ["pre-ln", "post-ln"])
def test_a_decode_step_writes_its_products_into_the_cache_s_buffers(variant, monkeypatch):
    """Every product but the LM head's, and the embedding's sum, goes into a buffer the cache
    keeps: no fresh array per layer and token. Under pre-ln (in place on the stream) both
    projections too; the other schemes keep the sublayers' outputs, fresh."""
    monkeypatch.setattr(kernels, "ENABLED", True)
    m = _model(variant)
    cache = KVCache.empty(m.cfg, 2, np.float64)
    forward_step(m, START, cache)
    ref_cache = KVCache.empty(m.cfg, 2, np.float64)
    forward_step(m, START, ref_cache)
    decode_step(m, np.array([[7], [8]]), cache)  # makes the buffers
    buf = cache.buffers
    dots, adds = [], []
    monkeypatch.setattr(np, "dot", _Recorder(np.dot, dots))
    monkeypatch.setattr(np, "add", _Recorder(np.add, adds))
    got = decode_step(m, np.array([[9], [10]]), cache)
    monkeypatch.undo()
    assert cache.buffers is buf and adds[0] is buf.x
    per_layer = (
        [buf.qkv, buf.f, buf.a, buf.f] if variant == "pre-ln" else [buf.qkv, None, buf.a, None]
    )
    layers = per_layer * m.cfg.n_layer
    assert all(a is b for a, b in zip(dots[:-1], layers)), dots
    assert len(dots) == 4 * m.cfg.n_layer + 1 and dots[-1] is None  # the logits: fresh
    monkeypatch.setattr(kernels, "ENABLED", False)
    forward_step(m, np.array([[7], [8]]), ref_cache)
    want = forward_step(m, np.array([[9], [10]]), ref_cache)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("variant", ["pre-ln", "post-ln"])
@pytest.mark.parametrize("enabled", [True, False])
def test_the_config_s_layernorm_epsilon_reaches_every_path(variant, enabled, monkeypatch):
    """A model whose ln_eps is far from LayerNorm's default: the cached logits are its own."""
    monkeypatch.setattr(kernels, "ENABLED", enabled)
    m = _model(variant)
    m = type(m).from_params(dataclasses.replace(m.cfg, ln_eps=0.5), m.params)
    cache = KVCache.empty(m.cfg, 2, np.float64)
    forward_step(m, START, cache)
    got = forward_step(m, np.array([[7], [8]]), cache)  # decode_step where enabled
    full = m.forward(np.concatenate([START, [[7], [8]]], axis=1))[0][:, -1:]
    np.testing.assert_allclose(got, full, rtol=0, atol=1e-12)


# -- sample_text and continue_text: what they hand on


def _saved(tmp_path, dtype=np.float64, params=None, model_cfg=None, tokenizer=None, vocab=None):
    m = _model(dtype=dtype)
    ckpt = Checkpoint(
        params=m.params if params is None else params, optimizer={}, iteration=0,
        vocab="abcdefghijk" if vocab is None else vocab,
        config={"model": dataclasses.asdict(m.cfg) if model_cfg is None else model_cfg,
                "train": {}},
        tokenizer=tokenizer,
    )  # fmt: skip
    save_checkpoint(tmp_path / "last.ckpt", ckpt)
    return m


def test_sample_text_s_defaults_are_temperature_1_and_seed_0(tmp_path):
    _saved(tmp_path)
    plain = sample_text(tmp_path, "abc", 30)
    assert plain == sample_text(tmp_path, "abc", 30, temperature=1.0, seed=0)
    assert plain != sample_text(tmp_path, "abc", 30, temperature=1.0, seed=1)
    assert plain != sample_text(tmp_path, "abc", 30, temperature=2.0, seed=0)


def test_top_k_is_handed_on_to_the_draw(tmp_path):
    """top_k=1 is greedy: the argmax at each step, as generate draws it."""
    m = _saved(tmp_path)
    ids = np.array([0, 1, 2])
    greedy = generate(m, ids[None], 12, np.random.default_rng(0), top_k=1)[0]
    want = "".join("abcdefghijk"[i] for i in greedy)
    assert sample_text(tmp_path, "abc", 12, temperature=1.5, top_k=1, seed=5) == want
    tok = load_model(tmp_path)[1]
    assert continue_text(m, tok, "abc", ids, 12, 1.5, 1, 5) == want


@pytest.fixture
def blas_limits(monkeypatch):
    """The thread counts generate limits BLAS to (threadpool_limits' calls)."""
    asked = []

    def limits(n, user_api=None):
        asked.append((n, user_api))
        import contextlib

        return contextlib.nullcontext()

    monkeypatch.setattr(sample, "threadpool_limits", limits)
    return asked


def test_the_thread_count_is_left_to_resgrad_only_when_asked(tmp_path, blas_limits):
    m = _saved(tmp_path)
    tok = load_model(tmp_path)[1]
    ids = np.array([0, 1, 2])
    sample_text(tmp_path, "abc", 3)
    continue_text(m, tok, "abc", ids, 3, 1.0, None, 0)
    assert blas_limits == []  # BLAS as it is set
    sample_text(tmp_path, "abc", 3, auto_threads=True)
    continue_text(m, tok, "abc", ids, 3, 1.0, None, 0, auto_threads=True)
    assert blas_limits == [(1, "blas")] * 2  # a small model: one thread


def test_the_characters_a_stream_held_back_are_sent_at_the_end(monkeypatch):
    """A byte-level token may end inside a character: its bytes are held back while drawing,
    and sent (as the decoder gives them) once the draw is over; the pieces add up to the
    text returned."""
    from resgrad.train.bpe import train_bpe

    tok = train_bpe("abc abd abe " * 20, 260)
    a, b = tok.encode("a")[0], tok.encode("b")[0]
    first_byte_of_e_acute = tok.encode("é")[0]  # é is two bytes; this is the first
    drawn = [a, b, first_byte_of_e_acute]

    def fake_generate(model, idx, n, rng, temperature, top_k, on_token=None, **kw):
        for t in drawn:
            on_token(np.array([t]))
        return np.concatenate([idx, np.array([drawn])], axis=1)

    monkeypatch.setattr(sample, "generate", fake_generate)
    pieces = []
    text = continue_text(None, tok, "x", tok.encode("x"), 3, 1.0, None, 0, on_text=pieces.append)
    assert pieces[:3] == ["x", "a", "b"] and len(pieces) == 4 and pieces[3]
    assert "".join(pieces) == text == tok.decode(np.concatenate([tok.encode("x"), drawn]))


# -- load_model's refusals and its tokenizer


def test_a_missing_checkpoint_is_named(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        load_model(tmp_path / "nope")
    assert str(e.value) == (
        f"{str(tmp_path / 'nope')!r} does not exist (expected a training run's --out-dir or "
        "a checkpoint file)"
    )


def test_a_checkpoint_without_a_usable_model_config_is_named(tmp_path):
    _saved(tmp_path, model_cfg={"vocab_size": 11, "no_such_field": 3})
    with pytest.raises(ValueError) as e:
        load_model(tmp_path)
    path = str(tmp_path / "last.ckpt")
    assert str(e.value).startswith(f"checkpoint {path!r} has no usable model config: ")
    assert "no_such_field" in str(e.value)


def test_parameters_that_do_not_fit_are_refused_naming_the_checkpoint(tmp_path):
    m = _model()
    params = {k: v for k, v in m.params.items() if k != "wpe"}
    _saved(tmp_path, params=params)
    with pytest.raises(ValueError, match=r"^checkpoint '.*last\.ckpt'.*wpe"):
        load_model(tmp_path)
    (tmp_path / "none").mkdir()
    _saved(tmp_path / "none", params={})  # no parameters at all: refused the same way
    with pytest.raises(ValueError, match=r"^checkpoint '.*last\.ckpt'.*wte"):
        load_model(tmp_path / "none")


def test_the_tokenizer_is_the_one_the_checkpoint_records(tmp_path):
    from resgrad.train.bpe import BPETokenizer, tokenizer_record, train_bpe

    tok = train_bpe("abc abd abe " * 20, 260)
    m = _model()
    m = type(m).from_params(dataclasses.replace(m.cfg, vocab_size=tok.vocab_size),
                            GPT_params(m, tok.vocab_size))  # fmt: skip
    ckpt = Checkpoint(params=m.params, optimizer={}, iteration=0, vocab="",
                      config={"model": dataclasses.asdict(m.cfg), "train": {}},
                      tokenizer=tokenizer_record(tok))  # fmt: skip
    save_checkpoint(tmp_path / "last.ckpt", ckpt)
    _, got, _ = load_model(tmp_path)
    assert isinstance(got, BPETokenizer) and got.to_json() == tok.to_json()


def GPT_params(m, vocab_size):
    """m's parameters with the embedding resized to ``vocab_size`` rows."""
    rng = np.random.default_rng(0)
    p = dict(m.params)
    p["wte"] = rng.standard_normal((vocab_size, m.cfg.n_embd)) * 0.02
    return p


def test_an_empty_start_is_refused_in_words(tmp_path):
    _saved(tmp_path)
    with pytest.raises(ValueError) as e:
        sample_text(tmp_path, "", 3)
    assert str(e.value) == "the start text is empty; give at least one character"


# -- generate: its arguments, its defaults, its passes


def test_generate_refuses_a_start_that_is_not_rows_of_tokens_in_words():
    m = _model()
    for bad in (np.array([1, 2, 3]), np.zeros((2, 0), np.int64)):
        with pytest.raises(ValueError) as e:
            generate(m, bad, 2, np.random.default_rng(0))
        assert str(e.value) == f"idx must be (B, T0) with T0 >= 1, got shape {bad.shape}"
    with pytest.raises(ValueError) as e:
        generate(m, START, -1, np.random.default_rng(0))
    assert str(e.value) == "num_tokens must be >= 0, got -1"


def test_no_new_token_is_the_start_as_int64():
    m = _model()
    start = START.astype(np.int32)
    out = generate(m, start, 0, np.random.default_rng(0))
    assert out.dtype == np.int64 and np.array_equal(out, START)
    out[0, 0] = 99  # a copy
    assert start[0, 0] == 1


def test_generate_s_defaults_are_temperature_1_and_blas_as_set(blas_limits):
    m = _model()
    a = generate(m, START, 6, np.random.default_rng(3))
    assert np.array_equal(a, generate(m, START, 6, np.random.default_rng(3), temperature=1.0))
    assert not np.array_equal(a, generate(m, START, 6, np.random.default_rng(3), 2.0))
    assert blas_limits == []
    generate(m, START, 2, np.random.default_rng(3), auto_threads=True)
    assert blas_limits == [(1, "blas")]


def test_n_tokens_take_n_passes(monkeypatch):
    """The start in one pass, then one per new token but the last: no pass whose logits
    nothing draws from."""
    m = _model()
    calls = []
    real = sample.forward_step

    def counted(model, idx, cache):
        calls.append(idx.shape[1])
        return real(model, idx, cache)

    monkeypatch.setattr(sample, "forward_step", counted)
    generate(m, START, 5, np.random.default_rng(0))
    assert calls == [3, 1, 1, 1, 1]


@pytest.mark.parametrize("variant", ["post-ln", "rezero"])
def test_a_cache_the_kernel_cannot_read_falls_back_under_every_scheme(variant, monkeypatch):
    """The fallback takes the model's head count under the other schemes too."""
    monkeypatch.setattr(kernels, "ENABLED", True)
    m = _model(variant)
    shape = (2, 2, 8, 8)  # (B, H, block_size, D)
    fortran = KVCache([np.zeros(shape, order="F") for _ in range(2)],
                      [np.zeros(shape, order="F") for _ in range(2)])  # fmt: skip
    plain = KVCache.empty(m.cfg, 2, np.float64)
    for cache in (fortran, plain):
        forward_step(m, START, cache)
    got = decode_step(m, np.array([[7], [8]]), fortran)
    np.testing.assert_allclose(got, decode_step(m, np.array([[7], [8]]), plain), atol=1e-12)


# -- sample_token: the inverse CDF, per row


class _Uniforms:
    """A generator whose uniforms are given."""

    def __init__(self, *u):
        self.u = np.array(u, np.float64)

    def random(self, shape):
        return self.u.reshape(shape)


def test_a_uniform_on_a_step_of_the_cdf_takes_the_token_after_it():
    """Token k is drawn for cdf[k-1] <= u * cdf[-1] < cdf[k]: u exactly 0.5 on two equal
    tokens is the second."""
    logits = np.zeros((3, 2))
    got = sample_token(logits, _Uniforms(0.0, 0.5, 0.9999999999999999))
    assert got.tolist() == [0, 1, 1]


def test_the_uniform_is_scaled_to_the_cdf_s_total():
    """Where the probabilities add up to less than 1 in floating point, u is scaled down by
    their total (so u < 1 stays below the last step), not up."""
    rng = np.random.default_rng(0)
    for _ in range(1000):
        logits = rng.standard_normal((1, 7)) * 3
        z = logits - logits.max()
        cdf = np.cumsum(np.exp(z) / np.exp(z).sum())
        if cdf[-1] < 1.0:
            break
    else:
        pytest.skip("no row whose probabilities add up to less than 1")
    u = cdf[0]  # u * total falls just below cdf[0]: token 0; u / total would be above it
    assert u * cdf[-1] < cdf[0] < u / cdf[-1]
    assert sample_token(logits, _Uniforms(u)).tolist() == [0]


@pytest.mark.parametrize(
    "logits, row, tied",
    [([[5.0, 5.0, 0.0]], 0, {0, 1}),  # two of three tied at the max
     ([[5.0, 5.0, 0.0], [0.0, 0.0, 5.0]], 0, {0, 1}),  # a tie in one row of a batch
     ([[1.0, 0.0, 0.0], [5.0, 5.0, 1.0]], 1, {0, 1})],  # each row's max is its own
)  # fmt: skip
def test_greedy_draws_among_tied_maxima_in_each_row(logits, row, tied):
    draws = {int(sample_token(np.array(logits), np.random.default_rng(s), top_k=1)[row])
             for s in range(40)}  # fmt: skip
    assert draws == tied


def test_each_row_is_drawn_from_its_own_softmax_whatever_the_others_scale():
    logits = np.array([[0.0, 0.0, 0.0], [-999.0, -1000.0, -1000.0]])  # row 1: token 0 at 58%
    draws = [int(sample_token(logits, np.random.default_rng(s))[1]) for s in range(200)]
    assert 0.45 < draws.count(0) / 200 < 0.7 and draws.count(1) > 0 and draws.count(2) > 0
    frozen = sample_token(np.array([[0.0, 1.0, 0.5], [-1000.0, -900.0, -950.0]]),
                          np.random.default_rng(0), temperature=1e-320)  # fmt: skip
    assert frozen.tolist() == [1, 1]  # each row its own argmax, logits / T overflowing


# -- attention_step: the mask from two new tokens on, the cache's bound


def test_two_new_tokens_attend_causally():
    m = _model()
    for idx in (np.array([[1, 2]]), np.array([[4, 5], [6, 7]])):
        cache = KVCache.empty(m.cfg, idx.shape[0], np.float64)
        got = forward_step(m, idx, cache)  # (B, 2, V)
        np.testing.assert_allclose(got, m.forward(idx)[0], rtol=0, atol=1e-12)


def test_a_cache_too_short_is_refused_naming_its_positions():
    from resgrad.train.sample import attention_step

    rng = np.random.default_rng(0)
    C, H, D = 8, 2, 4
    x = rng.standard_normal((1, 3, C))
    k = np.zeros((1, H, 3, D))  # (B, H, positions, D): 3 positions, D = 4
    with pytest.raises(ValueError) as e:
        attention_step(x, rng.standard_normal((C, 3 * C)), None, rng.standard_normal((C, C)),
                       None, H, k, k.copy(), 1)  # fmt: skip
    assert str(e.value) == "cache holds 3 positions, 4 needed"


# -- the cost of a token, and the thread count it chooses


def test_a_token_s_matmul_flops_are_counted_from_the_shapes():
    """Per block: q, k, v (C x 3C), the projection (C x C), the MLP (C x 4C, 4C x C), each
    2 FLOPs a multiply-add: 24 C^2; the LM head (C x V): 2 C V."""
    from resgrad.nn.model import GPTConfig
    from resgrad.train.sample import token_flops

    for L, C, V in ((1, 4, 5), (3, 16, 11), (12, 768, 50257)):
        cfg = GPTConfig(vocab_size=V, block_size=8, n_layer=L, n_head=2, n_embd=C)
        per_block = 2 * (C * 3 * C + C * C + C * 4 * C + 4 * C * C)
        assert token_flops(cfg) == L * per_block + 2 * C * V


def test_one_thread_below_the_bound_and_blas_as_set_from_it(monkeypatch):
    from resgrad.nn.model import GPTConfig
    from resgrad.train.sample import decode_threads, token_flops

    cfg = GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16)
    flops = token_flops(cfg)
    monkeypatch.setattr(sample, "DECODE_ONE_THREAD_FLOPS", flops + 1)
    assert decode_threads(cfg) == 1
    monkeypatch.setattr(sample, "DECODE_ONE_THREAD_FLOPS", flops)
    assert decode_threads(cfg) is None


def test_to_stdout_writes_each_piece_at_once(monkeypatch):
    import io

    class Out(io.StringIO):
        flushed = []

        def flush(self):
            self.flushed.append(self.getvalue())

    out = Out()
    monkeypatch.setattr("sys.stdout", out)
    sample.to_stdout("ab")
    sample.to_stdout("c")
    assert out.getvalue() == "abc" and out.flushed == ["ab", "abc"]
