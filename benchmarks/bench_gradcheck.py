"""Wall time of a float64 gradient check of a whole 2-layer GPT, directional mode.

    python benchmarks/bench_gradcheck.py
    python benchmarks/bench_gradcheck.py --directions 4 --repeat 5

The issue's target: a 2-layer float64 GPT gradient check in directional mode in
under 2 s. Timed, as one check: the forward and backward that give the analytic
gradients, then :func:`resgrad.verify.selfcheck.compare` in ``directional`` mode (what
``resgrad check`` and tests/nn/test_model.py run): for every parameter array,
``--directions`` seeded random unit directions, each a central difference of two
forward passes, compared with ``<grad, u>``. Parameters are set by
:func:`resgrad.verify.selfcheck.randomize_params` so that every gradient is large enough
to mean something.

Two shapes: the self-check's own tiny GPT (C=6, T=4), and a 2-layer GPT as wide as
the cpu-recipe model (C=128, 4 heads, T=64, batch 4, 65-token vocabulary). Each
figure is the median of ``--repeat`` runs, measured in this one run; each check
must pass.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from resgrad.nn.model import GPT, GPTConfig
from resgrad.perf.heap import keep_freed_memory
from resgrad.verify.selfcheck import compare, randomize_params

SHAPES = {
    # name: (GPTConfig fields, batch B, sequence length T)
    "self-check": (dict(vocab_size=5, block_size=4, n_layer=2, n_head=2, n_embd=6), 2, 4),
    "cpu-recipe width": (
        dict(vocab_size=65, block_size=64, n_layer=2, n_head=4, n_embd=128),
        4,
        64,
    ),
}


def one_check(fields: dict, B: int, T: int, directions: int, seed: int = 0):
    """Build the float64 GPT, take its gradients and check them; returns the CheckResult."""
    model = GPT(GPTConfig(**fields), seed=seed, dtype=np.float64)
    rng = np.random.default_rng(seed)
    randomize_params(model.params, rng)
    idx = rng.integers(0, fields["vocab_size"], (B, T))  # (B, T)
    targets = rng.integers(0, fields["vocab_size"], (B, T))  # (B, T)
    _, _, cache = model.forward(idx, targets)
    grads = model.backward(cache)

    def loss(**_):
        return model.forward(idx, targets)[1]  # reads the perturbed params in place

    return compare(
        "gpt", loss, model.params, grads, mode="directional", directions=directions, seed=seed
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--directions", type=int, default=2, help="per parameter array (default 2)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per shape (default 3)")
    args = p.parse_args()
    keep_freed_memory()  # as `resgrad check` runs (resgrad.perf.heap)
    for name, (fields, B, T) in SHAPES.items():
        times, row = [], None
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            row = one_check(fields, B, T, args.directions)
            times.append(time.perf_counter() - t0)
        n_params = GPT.param_shapes(GPTConfig(**fields))
        size = sum(int(np.prod(s)) for s in n_params.values())
        verdict = "PASS" if row.passed else "FAIL"
        print(
            f"{name:17} 2 layers, C={fields['n_embd']}, B={B}, T={T}, {size:,} params: "
            f"{row.n_checked} directions, "
            f"{statistics.median(times):.3f} s (median of {args.repeat}; target < 2 s), "
            f"max rel err {row.max_error:.1e} {verdict}"
        )
        if not row.passed:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
