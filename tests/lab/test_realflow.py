"""Gradient flow of a loaded model on windows of a real text: the windows and the numbers,
recomputed by hand from the model's own forward and backward passes."""

import numpy as np
import pytest

from resgrad.lab.flow import measure_model
from resgrad.lab.study import text_windows
from resgrad.nn.model import GPT, GPTConfig


@pytest.fixture(scope="module")
def model():
    cfg = GPTConfig(vocab_size=23, block_size=8, n_layer=2, n_head=2, n_embd=8)
    return GPT(cfg, seed=5, dtype=np.float64)


def _starts(n, seq, batch, seed):
    """Where seed's windows start, by the documented rule: B draws in [0, N - T) from
    default_rng([seed, 1]), T + 1 tokens each."""
    return np.random.default_rng([seed, 1]).integers(0, n - seq, size=batch)


def test_windows_are_consecutive_tokens_from_the_seeds_starts():
    ids = (np.arange(100) * 7) % 23  # (N,)
    w = text_windows(ids, seq=6, batch=5, seed=3)
    assert w.shape == (5, 7) and w.dtype == np.int64
    for row, s in zip(w, _starts(100, 6, 5, 3)):
        assert row.tolist() == ids[s : s + 7].tolist()
    assert not np.array_equal(w, text_windows(ids, seq=6, batch=5, seed=4))  # seeds differ
    assert np.array_equal(w, text_windows(list(ids), seq=6, batch=5, seed=3))  # and repeat


def test_every_window_of_the_text_can_be_drawn_the_last_included():
    ids = np.arange(10)  # N = 10, T = 6: starts 0, 1, 2, 3 (the last window ends at token 9)
    firsts = text_windows(ids, seq=6, batch=400, seed=0)[:, 0]
    assert sorted(set(firsts.tolist())) == [0, 1, 2, 3]
    exact = text_windows(np.arange(7), seq=6, batch=2, seed=1)  # N = T + 1: the whole text
    assert exact.tolist() == [list(range(7))] * 2
    with pytest.raises(ValueError, match="the text is 6 tokens; --seq 6 needs at least 7"):
        text_windows(np.arange(6), seq=6, batch=2, seed=0)


def _by_hand(model, ids, seq, batch, seeds):
    """Per seed: ||dL/dx_i||, ||x_i|| (i = 0..L) and each block's parameter-gradient norm."""
    out = {"stream_grad": [], "stream_act": [], "param_grad": []}
    L = model.cfg.n_layer
    for s in seeds:
        starts = _starts(len(ids), seq, batch, s)
        tokens = np.stack([ids[a : a + seq + 1] for a in starts])  # (B, T + 1)
        _, _, cache = model.forward(tokens[:, :-1], tokens[:, 1:])
        grads, dxs = model.backward_stream(cache)
        out["stream_grad"].append([np.linalg.norm(d) for d in dxs])
        out["stream_act"].append([np.linalg.norm(x) for x in cache.xs])
        out["param_grad"].append([
            np.sqrt(sum(np.sum(g**2) for k, g in grads.items() if k.startswith(f"blocks.{i}.")))
            for i in range(L)
        ])  # fmt: skip
    return {q: np.array(v) for q, v in out.items()}  # (K, n) each


def test_measure_model_is_the_models_own_flow_on_the_seeds_windows(model):
    ids = (np.arange(300) * 11 + 3) % 23
    seeds = (9, 2, 40)
    recs = measure_model(model, ids, seq=8, batch=3, seeds=seeds, name="tiny")
    want = _by_hand(model, ids, 8, 3, seeds)
    for q, v in want.items():
        rs = sorted((r for r in recs if r.quantity == q), key=lambda r: r.layer)
        assert len(rs) == v.shape[1]
        np.testing.assert_allclose([r.mean for r in rs], v.mean(0), rtol=1e-12)
        np.testing.assert_allclose([r.std for r in rs], v.std(0), rtol=1e-9)  # population std
        np.testing.assert_allclose([r.min for r in rs], v.min(0), rtol=1e-12)
        np.testing.assert_allclose([r.max for r in rs], v.max(0), rtol=1e-12)
    assert all(r.init == "pretrained:tiny" and r.n_seeds == 3 for r in recs)
    assert all((r.variant, r.depth, r.width, r.seq, r.batch) == ("pre-ln", 2, 8, 8, 3)
               for r in recs)  # fmt: skip
    assert any(r.std > 0 for r in recs if r.quantity == "stream_grad")  # the windows differ


def test_a_seq_beyond_the_models_context_is_refused(model):
    ids = np.arange(50) % 23
    assert measure_model(model, ids, seq=8, batch=1)  # exactly the context: fine
    with pytest.raises(ValueError, match="seq 9 is longer than the model's context of 8"):
        measure_model(model, ids, seq=9, batch=1)
    with pytest.raises(ValueError, match="seeds must be distinct"):
        measure_model(model, ids, seq=4, batch=1, seeds=(1, 1))


def test_the_figure_and_the_table_name_the_model_measured_not_initialization(model):
    from resgrad.lab.flow import FlowConfig, flow_plot_spec, format_records, measure

    ids = np.arange(60) % 23
    recs = measure_model(model, ids, seq=8, batch=2, seeds=(0,), name="tiny-dir")
    spec = flow_plot_spec(recs)
    assert spec.title == "Gradient flow of tiny-dir (pre-ln, L=2, C=8): stream_grad per layer"
    assert [s.label for s in spec.series] == ["tiny-dir (pre-ln)"]
    assert format_records(recs).splitlines()[0] == "gradient flow tiny-dir (pre-ln, L=2, C=8)"
    init = measure(FlowConfig(variant="pre-ln", depth=3, width=8, heads=2, seq=4, batch=2,
                              init="xavier", seeds=(0,)))  # fmt: skip
    assert flow_plot_spec(init).title == (
        "Gradient flow at initialization (xavier init, L=3): stream_grad per layer"
    )
