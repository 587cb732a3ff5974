"""Two limits of files and inputs a training run hands on: the dynamics header's version
(a newer resgrad's records are refused by name, not misread) and the sampler's context (a
prompt of exactly block_size tokens is whole, one more token is past the context)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from resgrad.nn.model import GPT, GPTConfig
from resgrad.train.dynamics import (
    DYNAMICS_HEADER,
    DynamicsWriter,
    make_record,
    read_dynamics,
)
from resgrad.train.sample import KVCache, forward_step, generate

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "src"))


def _run_with_version(run_dir, version):
    """A run directory of two recorded steps whose header says ``version``."""
    with DynamicsWriter(run_dir, n_layer=2, config={"variant": "pre-ln"}) as w:
        for step in range(2):
            w.append(make_record(2, step, 2.0, 1e-3, 1.0, False, {}, [0.1, 0.2], [1.0] * 3,
                                 [1.0, 1.0]))  # fmt: skip
    head_path = os.path.join(run_dir, DYNAMICS_HEADER)
    with open(head_path) as f:
        head = json.load(f)
    head["version"] = version
    with open(head_path, "w") as f:
        json.dump(head, f)
    return head_path


def test_the_header_version_it_writes_is_read(tmp_path):
    _run_with_version(tmp_path, 1)
    assert read_dynamics(tmp_path).steps.tolist() == [0, 1]


@pytest.mark.parametrize(
    "version, said",
    [(2, "version is 2; this resgrad reads version 1 (a newer resgrad wrote it: upgrade to "
         "read it)"),
     (0, "version is 0; this resgrad reads version 1$"), ("1", "version is '1'; "),
     (True, "version is True; "), (1.0, "version is 1.0; "), (None, "version is None; ")],
)  # fmt: skip
def test_a_header_of_another_version_is_refused_by_name(tmp_path, version, said):
    head_path = _run_with_version(tmp_path, version)
    with pytest.raises(ValueError, match=f"^{head_path!r}: {said}".replace("(", r"\(")
                       .replace(")", r"\)")):  # fmt: skip
        read_dynamics(tmp_path)


def test_the_dynamics_command_names_a_newer_version_in_one_line(tmp_path):
    _run_with_version(tmp_path, 7)
    p = subprocess.run([sys.executable, "-m", "resgrad", "dynamics", str(tmp_path)],
                       capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": SRC})  # fmt: skip
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "version is 7; this resgrad reads version 1 (a newer resgrad wrote it" in p.stderr


@pytest.fixture
def model():
    cfg = GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=1, n_embd=4)
    return GPT(cfg, seed=0, dtype=np.float64)


def test_a_prompt_of_exactly_block_size_tokens_is_taken_whole(model):
    """Four tokens fill a context of four: the first new token is drawn from the logits
    of the whole prompt (as the model's own forward computes them), nothing cropped."""
    prompt = np.array([[1, 2, 3, 4]])  # (1, block_size)
    seen = []
    out = generate(model, prompt, 1, np.random.default_rng(0), logits_out=seen)
    assert out.shape == (1, 5) and out[0, :4].tolist() == [1, 2, 3, 4]
    np.testing.assert_allclose(seen[0], model.forward(prompt)[0][:, -1], rtol=1e-12)
    cache = KVCache.empty(model.cfg, 1, np.float64)
    assert forward_step(model, prompt, cache).shape == (1, 4, 5) and cache.length == 4


def test_one_token_past_the_context_is_refused(model):
    with pytest.raises(ValueError, match="context of 5 tokens exceeds block_size 4"):
        forward_step(model, np.zeros((1, 5), np.int64), KVCache.empty(model.cfg, 1, np.float64))
    cache = KVCache.empty(model.cfg, 1, np.float64)
    forward_step(model, np.zeros((1, 3), np.int64), cache)
    forward_step(model, np.zeros((1, 1), np.int64), cache)  # the fourth: the context is full
    with pytest.raises(ValueError, match="context of 5 tokens exceeds block_size 4"):
        forward_step(model, np.zeros((1, 1), np.int64), cache)
