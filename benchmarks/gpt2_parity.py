"""The GPT-2 parity figures the README quotes: resgrad against transformers on the same weights.

    python benchmarks/gpt2_parity.py

Builds the small random GPT-2s of tests/formats/test_hf.py (2 layers, width 64, 4
heads, vocabulary 97, every weight random), writes them with transformers'
``save_pretrained``, loads them with resgrad and prints the measured errors that the
tests bound: float64 logits and every parameter gradient of the LM loss, float32
logits, and greedy tokens. Seeds 0, 1, 2; the tests hold the bounds at seed 0.
"""

from __future__ import annotations

import pathlib
import sys
import tempfile

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import transformers  # noqa: E402

from resgrad.formats.hf import load_hf  # noqa: E402
from resgrad.train.sample import generate  # noqa: E402
from tests.formats.test_hf import SMALL, _hf_model, _ids, _rel, _resgrad_name  # noqa: E402


def main() -> None:
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    print(f"model: {SMALL}, random weights; logits error = max|diff| / max|ref|")
    for seed in (0, 1, 2):
        with tempfile.TemporaryDirectory() as d:
            torch.set_default_dtype(torch.float64)
            hf = _hf_model(torch, transformers, seed=seed)
            hf.save_pretrained(d)
            model = load_hf(d, dtype=np.float64)
            ids = _ids(SMALL["vocab_size"], seed=seed + 1)
            idx, tgt = ids[:, :-1], ids[:, 1:]
            logits, loss, cache = model.forward(idx, tgt)
            grads = model.backward(cache)
            t_logits = hf(torch.from_numpy(idx)).logits
            t_loss = torch.nn.functional.cross_entropy(
                t_logits.reshape(-1, t_logits.shape[-1]), torch.from_numpy(tgt).reshape(-1)
            )
            t_loss.backward()
            ref = t_logits.detach().numpy()
            e64 = np.abs(logits - ref).max() / np.abs(ref).max()
            g = max(_rel(grads[_resgrad_name(n)], p.grad.numpy()) for n, p in hf.named_parameters())
            torch.set_default_dtype(torch.float32)
            hf32 = _hf_model(torch, transformers, seed=seed, dtype=torch.float32)
            hf32.save_pretrained(d)
            m32 = load_hf(d)
            with torch.no_grad():
                ref32 = hf32(torch.from_numpy(idx)).logits.numpy()
                start = idx[:1, :5]
                ctx = torch.from_numpy(start)
                for _ in range(50):
                    ctx = torch.cat([ctx, hf32(ctx).logits[:, -1].argmax(-1, keepdim=True)], 1)
            e32 = np.abs(m32.forward(idx)[0] - ref32).max() / np.abs(ref32).max()
            ours = generate(m32, start, 50, np.random.default_rng(0), top_k=1)
            same = int((ours[0, 5:] == ctx[0, 5:].numpy()).sum())
            print(
                f"seed {seed}: float64 logits {e64:.1e}, loss {abs(loss - t_loss.item()):.1e}, "
                f"worst parameter gradient {g:.1e}; float32 logits {e32:.1e}; "
                f"greedy tokens identical {same}/50"
            )


if __name__ == "__main__":
    main()
