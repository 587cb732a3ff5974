"""Mutation run: plant realistic bugs one at a time and check that the tests catch each.

Each mutant replaces one exact piece of source (found exactly once) by a plausible
mistake: a backward pass that drops a term, AdamW with the wrong beta, a training
loop that skips clipping or evaluates with dropout on, a checkpoint that is not
verified, a sampler with an off-by-one mask. For every mutant the source and the
tests are copied to a fresh temporary directory, the mutation is applied to the
copy, and the test files that cover that module run there (``pytest -x``, with
``PYTHONPATH`` pointing at the copy). The working tree is never modified.

A mutant is *killed* when its tests fail, and *survives* when they pass. The run
first checks that every test subset passes on the unmutated copy (otherwise a
"kill" would mean nothing), then prints one row per mutant and exits 1 if any
survived.

    python scripts/mutants.py               # all mutants
    python scripts/mutants.py --no-torch    # the same with PyTorch hidden: the
                                            # torch-free tests alone must kill them
    python scripts/mutants.py --only adamw  # mutants whose name contains "adamw"
    python scripts/mutants.py --list        # the table of mutants, without running
    python scripts/mutants.py --jobs 2      # two mutants at a time (one BLAS thread each)
"""

from __future__ import annotations

import argparse
import glob
import os
import runpy
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LAYERS = ("tests/nn/test_layers.py",)
BLOCKS = ("tests/nn/test_blocks.py",)
MODEL = ("tests/nn/test_model.py",)
RESIDUAL = ("tests/nn/test_residual.py",)
OPTIM = ("tests/train/test_optim.py",)
LOOP = ("tests/train/test_loop.py",)
CKPT = ("tests/formats/test_checkpoint.py",)
SAMPLE = ("tests/train/test_sample.py",)
SHARDS = ("tests/train/test_shards.py",)


@dataclass(frozen=True)
class Mutant:
    name: str  # what the bug is
    file: str  # under src/resgrad/
    old: str  # exact source text, found exactly once
    new: str  # the bug
    tests: tuple[str, ...]  # the test files that should catch it


MUTANTS = [
    # -- nn/residual.py, nn/layers.py: the layer pairs' backward passes
    Mutant("residual backward drops the identity path", "nn/residual.py",
           "return dout + df  # fan-out", "return df  # fan-out", RESIDUAL),
    Mutant("linear db averaged instead of summed", "nn/layers.py",
           "db = dout2.sum(axis=0) if has_bias else None  # (C_out,)",
           "db = dout2.mean(axis=0) if has_bias else None  # (C_out,)", LAYERS),
    Mutant("linear dw averaged over rows", "nn/layers.py",
           "dw = x.reshape(-1, C_in).T @ dout2", "dw = x.reshape(-1, C_in).T @ dout2 / len(dout2)",
           LAYERS),
    Mutant("tanh backward uses 1 - out, not 1 - out^2", "nn/layers.py",
           "return dout * (one - cache.out * cache.out)", "return dout * (one - cache.out)",
           LAYERS),
    Mutant("relu backward passes negatives through", "nn/layers.py",
           "return dout * cache.positive  # (...)", "return dout  # (...)", LAYERS),
    Mutant("gelu backward: wrong constant in the direct term", "nn/layers.py",
           "local += f(0.5)  # (...) + dx_direct", "local += f(0.25)  # (...) + dx_direct", LAYERS),
    Mutant("layernorm backward drops the mean term", "nn/layers.py",
           "    dx -= m1\n", "", LAYERS),
    Mutant("layernorm backward drops the rstd factor", "nn/layers.py",
           "    dx *= rstd\n    return dx, dg, db", "    return dx, dg, db", LAYERS),
    Mutant("layernorm backward forgets the gain", "nn/layers.py",
           "dxhat = dout * g  # (..., C)", "dxhat = dout * 1.0  # (..., C)", LAYERS),
    Mutant("dropout backward ignores the mask", "nn/layers.py",
           "return dout * cache.mask  # (...)", "return dout  # (...)", LAYERS),
    Mutant("embedding backward: repeated tokens overwrite, not add", "nn/layers.py",
           "dwte[run_ids[starts]] += np.add.reduceat(rows, starts, axis=0)",
           "dwte[run_ids] += rows", LAYERS),
    Mutant("attention: softmax backward misses the row sum", "nn/layers.py",
           '        datt -= np.einsum("...k,...k->...", datt, p)[..., None]', "        pass",
           LAYERS),
    Mutant("attention: dq misses the 1/sqrt(D) scale", "nn/layers.py",
           "dq = np.multiply(dqs, scale, out=dqs)  # (B,H,T,D)", "dq = dqs  # (B,H,T,D)", LAYERS),
    Mutant("attention: dropout mask skipped in the backward", "nn/layers.py",
           "            datt *= m  # (B,H,Tb,S)", "            pass", LAYERS),
    Mutant("attention: query blocks overwrite dk instead of adding", "nn/layers.py",
           "dk[..., :i1, :] += dk_b", "dk[..., :i1, :] = dk_b", LAYERS),
    Mutant("cross-entropy gradient not divided by the count", "nn/layers.py",
           "dnll = valid * f(float(dloss) / max(n_valid, 1))", "dnll = valid * f(float(dloss))",
           LAYERS),
    Mutant("mlp backward skips GELU", "nn/layers.py",
           "dh = ACTIVATIONS[activation][1](da, c_act)  # (..., F)", "dh = da  # (..., F)",
           LAYERS),
    # -- nn/blocks.py: the residual schemes
    Mutant("pre-ln block backward drops + x", "nn/blocks.py",
           "            return df  # no + x path: the gradient has only the sublayer route home\n"
           "        return residual_backward(dout, df)",
           "            return df  # no + x path: the gradient has only the sublayer route home\n"
           "        return df", BLOCKS),
    Mutant("rezero: the second sublayer overwrites alpha's gradient", "nn/blocks.py",
           'grads[f"{p}.alpha"] += (dout * c.f).sum()', 'grads[f"{p}.alpha"] = (dout * c.f).sum()',
           BLOCKS),
    Mutant("rezero: df misses the factor alpha", "nn/blocks.py",
           "dfo = dout * alpha  # (B,T,C)", "dfo = dout  # (B,T,C)", BLOCKS),
    Mutant("deepnorm: the x path misses alpha", "nn/blocks.py",
           'dskip = ds if variant == "post-ln" else ds * alpha', "dskip = ds", BLOCKS),
    Mutant("gpt2 init: output projections not scaled by 1/sqrt(2L)", "nn/blocks.py",
           'std = 0.02 / math.sqrt(2 * L) if kind.endswith("w_proj") else 0.02', "std = 0.02",
           BLOCKS),
    # -- nn/model.py: the whole GPT
    Mutant("tied wte keeps only the head's gradient", "nn/model.py",
           'grads["wte"], grads["wpe"] = embedding_backward(dx, cache.emb, dwte=dwte_head)',
           'grads["wte"], grads["wpe"] = dwte_head, embedding_backward(dx, cache.emb)[1]',
           MODEL),
    Mutant("embedding dropout skipped in the backward", "nn/model.py",
           "dx = dropout_backward(dx, cache.drop)  # (B,T,C)", "dx = dx  # (B,T,C)", MODEL),
    # -- train/optim.py: AdamW, clipping, the schedule
    Mutant("adamw: bias correction of v without the square root", "train/optim.py",
           "bc2_sqrt = math.sqrt(1 - c.beta2**t)", "bc2_sqrt = 1 - c.beta2**t", OPTIM),
    Mutant("adamw: m updated with beta2", "train/optim.py",
           "tmp *= 1 - c.beta1", "tmp *= 1 - c.beta2", OPTIM),
    Mutant("adamw: no bias correction of m", "train/optim.py",
           "step_size = lr / (1 - c.beta1**t)", "step_size = lr", OPTIM),
    Mutant("adamw: eps dropped", "train/optim.py",
           "denom += c.eps  # sqrt(v_hat) + eps", "denom += 0.0  # sqrt(v_hat) + eps", OPTIM),
    Mutant("adamw: weight decay on every parameter", "train/optim.py",
           "self.decay = {k: p.ndim >= 2 for k, p in params.items()}",
           "self.decay = {k: True for k, p in params.items()}", OPTIM),
    Mutant("adamw: decay not scaled by lr", "train/optim.py",
           "p *= 1 - lr * c.weight_decay", "p *= 1 - c.weight_decay", OPTIM),
    Mutant("adamw: parts on threads skip an element per slice", "train/optim.py",
           "a, b = n * part // parts, n * (part + 1) // parts",
           "a, b = n * part // parts, max(n * (part + 1) // parts - 1, n * part // parts)", OPTIM),
    Mutant("adamw: parts on threads leave the small parameters out", "train/optim.py",
           "a, b = 0, (n if part == 0 else 0)", "a, b = 0, (n if part == 1 else 0)", OPTIM),
    Mutant("adamw: pieces skip their last element", "train/optim.py",
           "j = min(i + CHUNK, b)", "j = min(i + CHUNK, b) - 1", OPTIM),
    Mutant("grad norms: a last piece of one element is left out", "train/optim.py",
           "for i in range(0, flat.size, CHUNK):", "for i in range(0, flat.size - 1, CHUNK):",
           OPTIM),
    Mutant("clip_grad_norm scales up small gradients", "train/optim.py",
           "if coef < 1.0:", "if coef > 1.0:", OPTIM),
    Mutant("schedule: warmup off by one", "train/optim.py",
           "return self.lr * (it + 1) / (self.warmup_iters + 1)",
           "return self.lr * it / (self.warmup_iters + 1)", OPTIM),
    # -- train/loop.py: the training loop
    Mutant("trainer skips gradient clipping", "train/loop.py",
           "total = clip_grad_norm(grads, grad_clip, norms)",
           "total = clip_grad_norm(grads, 0.0, norms)", LOOP),
    Mutant("evaluation runs in train mode (dropout on)", "train/shards.py",
           "float(model.forward(x[r], y[r])[1])",
           "float(model.forward(x[r], y[r], train=True, rng=np.random.default_rng(0))[1])", LOOP),
    Mutant("resume restarts the batch generator", "train/loop.py",
           'data_rng=generator_from_state(ckpt.rng_states["data"]),',
           "data_rng=np.random.default_rng([cfg.seed, _SEED_DATA]),", LOOP),
    Mutant("best checkpoint kept on a worse val loss", "train/loop.py",
           'is_best = best is None or losses["val"] < best',
           'is_best = best is None or losses["val"] > best', LOOP),
    # -- train/shards.py: a batch as shards on threads
    Mutant("shards: every shard weighted equally", "train/shards.py",
           "(r.stop - r.start) / B, g, act_rms)", "1 / len(rows), g, act_rms)", SHARDS),
    Mutant("shards: the later shards' gradients dropped", "train/shards.py",
           "grads[k] += a  # (shape of params[k])", "grads[k] += 0 * a", SHARDS),
    Mutant("shards: stream norms of the first shard only", "train/shards.py",
           "stream = [math.hypot(*norms) for norms in zip(*(p[2] for p in parts))]",
           "stream = [norms[0] for norms in zip(*(p[2] for p in parts))]", SHARDS),
    # -- formats/checkpoint.py
    Mutant("checkpoint checksum not verified", "formats/checkpoint.py",
           'if hashlib.sha256(zeroed).hexdigest() != field.group(1).decode("ascii"):',
           "if False:", CKPT),
    Mutant("checkpoint drops the optimizer state", "formats/checkpoint.py",
           'arrays.update({f"optim/{k}": np.asarray(v, order="C") '
           'for k, v in ckpt.optimizer.items()})', "pass", CKPT),
    # -- train/sample.py: the KV-cache sampler
    Mutant("sampler: causal mask off by one", "train/sample.py",
           "future = np.arange(S)[None, :] > start + np.arange(T)[:, None]",
           "future = np.arange(S)[None, :] >= start + np.arange(T)[:, None]", SAMPLE),
    Mutant("sampler: attention scaled by 1/D, not 1/sqrt(D)", "train/sample.py",
           "att *= x.dtype.type(1.0 / math.sqrt(D))", "att *= x.dtype.type(1.0 / D)", SAMPLE),
    Mutant("sampler: new tokens get positions from 0", "train/sample.py",
           'x = p["wte"][idx] + p["wpe"][t0 : t0 + T]', 'x = p["wte"][idx] + p["wpe"][:T]', SAMPLE),
    Mutant("sampler: crop keeps the first block_size tokens", "train/sample.py",
           "context = np.concatenate(out, axis=1)[:, -bs:]",
           "context = np.concatenate(out, axis=1)[:, :bs]", SAMPLE),
    Mutant("sampler: temperature multiplies the logits", "train/sample.py",
           "z = l64 / temperature  # (B, V)",
           "z = l64 * temperature  # (B, V)", SAMPLE),
]  # fmt: skip

# parts written alongside (scripts/mutants_parts/*.py, each a list MUTANTS of
# (name, file, old, new, tests) tuples); merged into the list above before landing
for _part in sorted(glob.glob(os.path.join(ROOT, "scripts", "mutants_parts", "*.py"))):
    MUTANTS += [Mutant(*t) for t in runpy.run_path(_part)["MUTANTS"]]

NO_TORCH = "raise ImportError('hidden by scripts/mutants.py --no-torch')\n"


def _copy_tree(dst: str) -> None:
    for d in ("src", "tests"):
        shutil.copytree(
            os.path.join(ROOT, d), os.path.join(dst, d),
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )  # fmt: skip
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), dst)


def _apply(root: str, m: Mutant) -> None:
    path = os.path.join(root, "src", "resgrad", m.file)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    n = text.count(m.old)
    if n != 1:
        raise SystemExit(f"mutant {m.name!r}: its source text occurs {n} times in {m.file}")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace(m.old, m.new))


def _pytest(root: str, tests: tuple[str, ...], hide_torch: bool, jobs: int = 1) -> tuple[int, str]:
    paths = [os.path.join(root, "src")]
    if hide_torch:
        shim = os.path.join(root, "_no_torch")
        os.makedirs(shim, exist_ok=True)
        with open(os.path.join(shim, "torch.py"), "w") as f:
            f.write(NO_TORCH)
        paths.insert(0, shim)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "MPLBACKEND": "Agg"}
    if jobs > 1:  # several pytest runs share the cores: one BLAS thread each
        env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = "1"
    env.pop("RESGRAD_REQUIRE_TORCH", None)  # with torch hidden, its tests skip
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-m", "not slow", "-p", "no:cacheprovider",
         *tests],
        cwd=root, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    lines = (p.stdout + p.stderr).strip().splitlines()
    return p.returncode, lines[-1] if lines else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--no-torch", action="store_true", help="hide PyTorch from the tests")
    ap.add_argument("--only", default="", help="run the mutants whose name contains this")
    ap.add_argument("--list", action="store_true", help="print the mutants and exit")
    ap.add_argument("--jobs", type=int, default=1, help="mutants run at once (default 1)")
    args = ap.parse_args(argv)
    mutants = [m for m in MUTANTS if args.only.lower() in m.name.lower()]
    if args.list:
        for i, m in enumerate(mutants, 1):
            print(f"{i:>2}  {m.file:<22} {m.name}")
        return 0
    if not mutants:
        print(f"no mutant matches {args.only!r}", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="resgrad-mutants-") as tmp:
        # the baseline: every subset must pass unmutated, or a "kill" means nothing
        base = os.path.join(tmp, "base")
        _copy_tree(base)
        subsets = sorted({m.tests for m in mutants})
        rc, last = _pytest(base, tuple(t for s in subsets for t in s), args.no_torch)
        if rc != 0:
            print(f"the unmutated tests fail ({last}); fix them first", file=sys.stderr)
            return 2
        print(f"baseline: the unmutated tests pass ({last})")
        torch_note = ", PyTorch hidden" if args.no_torch else ""
        print(f"{len(mutants)} mutants, each run in a fresh copy{torch_note}\n")
        header = f"{'#':>3}  {'mutant':<58} {'file':<22} {'tests run':<34} result"
        print(header)
        print("-" * len(header))
        survived = []
        t0 = time.perf_counter()

        def run_one(i: int, m: Mutant) -> bool:
            work = os.path.join(tmp, f"m{i}")
            _copy_tree(work)
            _apply(work, m)
            rc, _ = _pytest(work, m.tests, args.no_torch, args.jobs)
            shutil.rmtree(work)
            if rc == 5:  # no tests collected, which proves nothing
                raise SystemExit(f"mutant {m.name!r}: no tests collected from {m.tests}")
            return rc != 0

        # mutants are independent copies: --jobs of them run at once, reported in order
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(run_one, i, m) for i, m in enumerate(mutants, 1)]
            for i, (m, fut) in enumerate(zip(mutants, futures), 1):
                killed = fut.result()
                if not killed:
                    survived.append(m)
                tests = ", ".join(os.path.basename(t) for t in m.tests)
                print(f"{i:>3}  {m.name:<58} {m.file:<22} {tests:<34} "
                      f"{'killed' if killed else 'SURVIVED'}", flush=True)  # fmt: skip
    n = len(mutants)
    print(f"\n{n - len(survived)} of {n} killed, {len(survived)} survived "
          f"({time.perf_counter() - t0:.0f} s)")  # fmt: skip
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
