"""Float64 finite-difference checks of every layer, every block and a whole GPT.

Legend: B = batch, T = time, C = channels, H = heads, D = C / H, V = vocab, F = 4C.

What ``resgrad check`` runs, and what the tests reuse. Every comparison goes
through :func:`resgrad.verify.gradcheck.check_gradients` (central differences in
float64), one entry or one direction at a time, so that each analytic value is
judged against its own numerical one:

- layers and blocks: every entry of every argument (``full``);
- the whole GPT, in every residual scheme: ``sparse`` (k seeded entries of each
  parameter) and ``directional`` (seeded random unit directions of each parameter).

The bar is a relative error ``|a - n| / (|a| + |n|)`` of at most ``rtol`` (1e-7).
A central difference cannot resolve a derivative below its own rounding floor:
evaluating the scalar ``S = sum(out * dout)`` in float64 is exact only to about
``eps_mach * sum|out * dout|``, so the difference quotient carries an absolute error
of about that over ``eps``. Entries whose gradient is smaller than
``atol / rtol`` (``atol`` = 4 of those floors) are judged by their absolute error
``|a - n| <= atol`` instead and counted in ``n_floor``; the reported ``max_error``
is the largest relative error over all the other entries. (PyTorch's
``gradcheck`` uses the same atol-plus-rtol rule.)

Inputs are chosen so that no entry sits on a kink (ReLU at 0) and the attention
key bias, whose gradient is exactly 0 in exact arithmetic (softmax ignores a
constant added to every score of a row), is checked on its own to be 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from resgrad.nn.blocks import VARIANTS, block_backward, block_forward, init_block_params
from resgrad.nn.layers import (
    attention_backward,
    attention_forward,
    cross_entropy_backward,
    cross_entropy_forward,
    dropout_backward,
    dropout_forward,
    embedding_backward,
    embedding_forward,
    gelu_backward,
    gelu_erf_backward,
    gelu_erf_forward,
    gelu_forward,
    layernorm_backward,
    layernorm_forward,
    linear_backward,
    linear_forward,
    mlp_backward,
    mlp_forward,
    relu_backward,
    relu_forward,
    sdpa_backward,
    sdpa_forward,
    tanh_backward,
    tanh_forward,
)
from resgrad.nn.model import GPT, GPTConfig
from resgrad.verify.gradcheck import check_gradients, relative_error

__all__ = [
    "EPS",
    "HEADER",
    "PARTS",
    "RTOL",
    "CheckResult",
    "block_checks",
    "compare",
    "layer_checks",
    "model_checks",
    "randomize_params",
    "render_checks",
    "run_checks",
]

PARTS = ("layers", "blocks", "model")  # what run_checks checks, in order
RTOL = 1e-7  # the bar on the relative error
EPS = 1e-5  # central-difference step: truncation ~eps^2 stays far below rtol, rounding ~1/eps
FLOORS = 4.0  # atol = FLOORS * eps_mach * sum|out * dout| / eps


@dataclass(frozen=True)
class CheckResult:
    """One row of ``resgrad check``."""

    name: str  # what was checked, e.g. "layernorm" or "gpt pre-ln"
    mode: str  # "full", "sparse", "directional" or "zero"
    max_error: float  # largest relative error above the rounding floor
    worst: str  # where it occurred, e.g. "w[2, 3]" or "w dir 1"
    n_checked: int  # entries or directions compared
    n_floor: int  # of those, below the rounding floor (judged by absolute error), not exact
    max_abs_floor: float  # largest |a - n| among the entries below the floor
    atol: float  # the rounding floor used
    passed: bool

    def row(self) -> str:
        """One line: name, mode, max error, entries checked and below the floor, PASS or FAIL."""
        verdict = "PASS" if self.passed else "FAIL"
        return (
            f"{self.name:<30} {self.mode:<11} {self.max_error:>11.2e} {self.n_checked:>7} "
            f"{self.n_floor:>5}  {verdict:<6} {self.worst}"
        )


HEADER = f"{'check':<30} {'mode':<11} {'max rel err':>11} {'checked':>7} {'floor':>5}  result worst"


def compare(
    name: str,
    fn: Callable[..., np.ndarray | float],
    args: Mapping[str, np.ndarray],
    grads: Mapping[str, np.ndarray],
    *,
    dout: np.ndarray | None = None,
    mode: str = "full",
    k: int = 4,
    directions: int = 2,
    seed: int = 0,
    eps: float = EPS,
    rtol: float = RTOL,
) -> CheckResult:
    """Check ``grads`` against central differences of ``fn``, entry by entry.

    Parameters
    ----------
    name : str
        The row's label.
    fn : callable
        Called as ``fn(**args)``; reads the arrays in ``args``, which are perturbed
        in place (through one-entry views) and restored.
    args : dict of str to float64 ndarray (C-contiguous)
    grads : dict of str to float64 ndarray
        Analytic gradients of ``sum(fn(**args) * dout)``, one per argument.
    dout : ndarray, optional
        Upstream gradient of fn's output (ones by default).
    mode : {"full", "sparse", "directional"}
    k, directions, seed
        Entries per argument (sparse) or directions per argument (directional), seeded.
    eps, rtol
        Step and relative bar.

    Returns
    -------
    CheckResult
    """
    out0 = np.asarray(fn(**args))
    d = np.ones_like(out0) if dout is None else dout
    scale = float(np.sum(np.abs(out0 * d)))  # size of the scalar the check differentiates
    atol = FLOORS * np.finfo(np.float64).eps * max(scale, 1e-300) / eps

    def call(**_):
        return fn(**args)  # the perturbed arrays are views into args

    labels, ana, num = [], [], []
    rng = np.random.default_rng(seed)
    for arg, a in args.items():
        g = np.ascontiguousarray(grads[arg])  # (a.shape)
        if mode == "directional":
            for j in range(directions):
                rep = check_gradients(
                    call,
                    {arg: a},
                    {arg: g},
                    dout=dout,
                    mode="directional",
                    directions=1,
                    eps=eps,
                    seed=seed * 1009 + 17 * j + len(labels),
                ).args[arg]
                labels.append(f"{arg} dir {j}")
                ana.append(rep.analytic)
                num.append(rep.numeric)
            continue
        if not a.flags.c_contiguous:
            raise ValueError(f"argument {arg!r} must be C-contiguous to be checked entry by entry")
        flat, gflat = a.reshape(-1), g.reshape(-1)  # views: perturbing flat perturbs a
        entries = range(a.size) if mode == "full" else rng.choice(a.size, min(k, a.size), False)
        for i in entries:
            rep = check_gradients(
                call, {arg: flat[i : i + 1]}, {arg: gflat[i : i + 1]}, dout=dout, eps=eps
            ).args[arg]
            where = ", ".join(str(int(j)) for j in np.unravel_index(i, a.shape))
            labels.append(f"{arg}[{where}]")
            ana.append(rep.analytic)
            num.append(rep.numeric)
    a_, n_ = np.array(ana), np.array(num)  # (n,)
    rel = relative_error(a_, n_)  # (n,)
    diff = np.abs(a_ - n_)  # (n,)
    above = rtol * (np.abs(a_) + np.abs(n_)) > atol  # (n,) resolvable by a central difference
    ok = np.where(above, rel <= rtol, diff <= atol)  # (n,)
    rel_above = np.where(above, rel, 0.0)  # (n,)
    j = int(np.argmax(rel_above)) if rel.size else 0
    if rel.size and not ok.all():
        j = int(np.argmax(np.where(ok, -1.0, np.where(above, rel, diff / max(atol, 1e-300)))))
    below = ~above & (diff > 0)  # below the floor and not an exact match (e.g. both 0)
    return CheckResult(
        name=name,
        mode=mode,
        max_error=float(rel_above.max()) if rel.size else 0.0,
        worst=labels[j] if labels else "",
        n_checked=len(labels),
        n_floor=int(below.sum()),
        max_abs_floor=float(diff[below].max()) if below.any() else 0.0,
        atol=float(atol),
        passed=bool(ok.all()),
    )


def _zero_row(name: str, g: np.ndarray, atol: float) -> CheckResult:
    """A gradient that is exactly 0 in exact arithmetic: pass if every |entry| <= atol."""
    m = float(np.abs(g).max())
    n = int(np.count_nonzero(g))  # rounding leaves some entries at ~1e-17 rather than 0
    return CheckResult(name, "zero", 0.0, f"max |g| {m:.1e}", g.size, n, m, atol, m <= atol)


# --------------------------------------------------------------------------- layers


def layer_checks(seed: int = 0) -> list[CheckResult]:
    """Full float64 check of every layer pair of :mod:`resgrad.nn.layers` (small shapes)."""
    rng = np.random.default_rng(seed)

    def R(*shape, scale=1.0):
        return rng.standard_normal(shape) * scale  # float64

    B, T, C, H, V = 2, 5, 6, 2, 7
    rows = []

    x, w, b = R(B, T, 4), R(4, 5), R(5)
    out, c = linear_forward(x, w, b)  # (B, T, 5)
    dout = R(*out.shape)
    dx, dw, db = linear_backward(dout, c)
    rows.append(
        compare(
            "linear",
            lambda x, w, b: linear_forward(x, w, b)[0],
            {"x": x, "w": w, "b": b},
            {"x": dx, "w": dw, "b": db},
            dout=dout,
        )
    )
    out, c = linear_forward(x, w)  # (B, T, 5)
    dx, dw, _ = linear_backward(dout, c)
    rows.append(
        compare(
            "linear (no bias)",
            lambda x, w: linear_forward(x, w)[0],
            {"x": x, "w": w},
            {"x": dx, "w": dw},
            dout=dout,
        )
    )

    x = R(B, T, C)
    dout = R(B, T, C)
    for name, fwd, bwd, xin in (
        ("tanh", tanh_forward, tanh_backward, x),
        ("gelu (tanh approx.)", gelu_forward, gelu_backward, 2 * x),
        ("gelu (exact, erf)", gelu_erf_forward, gelu_erf_backward, 2 * x),
        # no entry within 0.1 of ReLU's kink at 0
        ("relu", relu_forward, relu_backward, np.where(np.abs(x) < 0.1, 0.5, x)),
    ):
        _, c = fwd(xin)
        rows.append(
            compare(name, lambda x, f=fwd: f(x)[0], {"x": xin}, {"x": bwd(dout, c)}, dout=dout)
        )

    g, bb = 1.0 + R(C, scale=0.2), R(C, scale=0.2)
    _, c = layernorm_forward(x, g, bb)
    dx, dg, db = layernorm_backward(dout, c)
    rows.append(
        compare(
            "layernorm",
            lambda x, g, b: layernorm_forward(x, g, b)[0],
            {"x": x, "g": g, "b": bb},
            {"x": dx, "g": dg, "b": db},
            dout=dout,
        )
    )

    def drop(x):
        return dropout_forward(x, 0.3, train=True, rng=np.random.default_rng(seed + 1))[0]

    _, c = dropout_forward(x, 0.3, train=True, rng=np.random.default_rng(seed + 1))
    rows.append(
        compare(
            "dropout (train, p=0.3)", drop, {"x": x}, {"x": dropout_backward(dout, c)}, dout=dout
        )
    )

    idx = rng.integers(0, V, (B, T))  # (B, T)
    wte, wpe = R(V, C), R(T + 2, C)
    _, c = embedding_forward(idx, wte, wpe)
    dwte, dwpe = embedding_backward(dout, c)
    rows.append(
        compare(
            "embedding (token + position)",
            lambda wte, wpe: embedding_forward(idx, wte, wpe)[0],
            {"wte": wte, "wpe": wpe},
            {"wte": dwte, "wpe": dwpe},
            dout=dout,
        )
    )

    q, k, v = R(B, H, T, 3), R(B, H, T, 3), R(B, H, T, 3)
    dy = R(B, H, T, 3)
    for p in (0.0, 0.3):

        def sdpa(q, k, v, p=p):
            return sdpa_forward(
                q, k, v, dropout=p, train=True, rng=np.random.default_rng(seed + 2)
            )[0]

        _, c = sdpa_forward(q, k, v, dropout=p, train=True, rng=np.random.default_rng(seed + 2))
        dq, dk, dv = sdpa_backward(dy, c)
        label = "causal sdpa" + (f" (dropout {p})" if p else "")
        rows.append(
            compare(label, sdpa, {"q": q, "k": k, "v": v}, {"q": dq, "k": dk, "v": dv}, dout=dy)
        )

    wqkv, bqkv = R(C, 3 * C, scale=C**-0.5), R(3 * C, scale=0.3)
    wp, bp = R(C, C, scale=C**-0.5), R(C, scale=0.3)
    _, c = attention_forward(x, wqkv, bqkv, wp, bp, H)
    dx, dwqkv, dbqkv, dwp, dbp = attention_backward(dout, c)
    args = {
        "x": x,
        "w_qkv": wqkv,
        "b_q": bqkv[:C],
        "b_v": bqkv[2 * C :],
        "w_proj": wp,
        "b_proj": bp,
    }
    grads = {"x": dx, "w_qkv": dwqkv, "b_q": dbqkv[:C], "b_v": dbqkv[2 * C :]}
    grads.update({"w_proj": dwp, "b_proj": dbp})
    row = compare(
        "multi-head attention",
        lambda **a: attention_forward(x, wqkv, bqkv, wp, bp, H)[0],
        args,
        grads,
        dout=dout,
    )
    rows.append(row)
    rows.append(_zero_row("attention key bias (= 0)", dbqkv[C : 2 * C], row.atol))

    wfc, bfc = R(C, 4 * C, scale=C**-0.5), R(4 * C, scale=0.3)
    wpr, bpr = R(4 * C, C, scale=(4 * C) ** -0.5), R(C, scale=0.3)
    _, c = mlp_forward(x, wfc, bfc, wpr, bpr)
    grads = dict(zip(("x", "w_fc", "b_fc", "w_proj", "b_proj"), mlp_backward(dout, c)))
    rows.append(
        compare(
            "mlp (C -> 4C -> C)",
            lambda x, w_fc, b_fc, w_proj, b_proj: mlp_forward(x, w_fc, b_fc, w_proj, b_proj)[0],
            {"x": x, "w_fc": wfc, "b_fc": bfc, "w_proj": wpr, "b_proj": bpr},
            grads,
            dout=dout,
        )
    )

    logits = R(B, T, V)  # (B, T, V)
    targets = rng.integers(0, V, (B, T))  # (B, T)
    targets[0, 1] = -1  # one ignored position
    _, c = cross_entropy_forward(logits, targets, ignore_index=-1)
    rows.append(
        compare(
            "cross-entropy (ignore index)",
            lambda logits: cross_entropy_forward(logits, targets, ignore_index=-1)[0],
            {"logits": logits},
            {"logits": cross_entropy_backward(1.0, c)},
        )
    )
    return rows


# --------------------------------------------------------------------------- blocks and model


def randomize_params(params: dict[str, np.ndarray], rng: np.random.Generator) -> None:
    """Overwrite params in place with values that make a gradient check mean something.

    At initialization many gradients are tiny or exactly 0 (rezero's alpha = 0 zeroes
    every sublayer's gradient; biases 0 and gains 1 hide their own mistakes). Here:
    weights normal(0, 1/fan_in), embeddings normal(0, 0.5), biases normal(0, 0.2),
    LayerNorm gains 1 + normal(0, 0.2), rezero's alpha 0.8.
    """
    for name, a in params.items():
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "g":
            a[...] = 1.0 + 0.2 * rng.standard_normal(a.shape)
        elif leaf == "alpha":
            a[...] = 0.8
        elif leaf in ("wte", "wpe"):
            a[...] = 0.5 * rng.standard_normal(a.shape)
        elif leaf.startswith("b"):
            a[...] = 0.2 * rng.standard_normal(a.shape)
        else:
            a[...] = rng.standard_normal(a.shape) / np.sqrt(a.shape[0])


def _without_key_bias(params, grads, C):
    """Split every b_qkv into its q and v thirds (views); return the k thirds' gradients."""
    args, g, zero = {}, {}, {}
    for name, a in params.items():
        if name.endswith("attn.b_qkv"):
            for j, part in ((0, "q"), (2, "v")):
                args[f"{name}[{part}]"] = a[j * C : (j + 1) * C]  # (C,) view
                g[f"{name}[{part}]"] = grads[name][j * C : (j + 1) * C]
            zero[name] = grads[name][C : 2 * C]  # (C,) exactly 0 in exact arithmetic
        else:
            args[name], g[name] = a, grads[name]
    return args, g, zero


def block_checks(seed: int = 0, variants: tuple[str, ...] = VARIANTS) -> list[CheckResult]:
    """Full float64 check of one transformer block in each residual scheme: the last of two,
    where ln-scaling's factor 1/l^p is not 1."""
    rows = []
    for variant in variants:
        cfg = GPTConfig(n_layer=2, n_head=2, n_embd=6, variant=variant)
        rng = np.random.default_rng(seed)
        params = init_block_params(cfg, 1, rng, np.float64)
        randomize_params(params, rng)
        x = rng.standard_normal((2, 4, 6))  # (B, T, C)
        out, c = block_forward(x, params, "blocks.1", cfg)
        dout = rng.standard_normal(out.shape)  # (B, T, C)
        dx, grads = block_backward(dout, c)
        args, g, zero = _without_key_bias(params, grads, cfg.n_embd)
        row = compare(
            f"block {variant}",
            lambda x=x, params=params, cfg=cfg, **_: block_forward(x, params, "blocks.1", cfg)[0],
            {"x": x, **args},
            {"x": dx, **g},
            dout=dout,
        )
        rows.append(row)
    return rows


def _small_gpt(variant: str, seed: int, dropout: float = 0.0):
    cfg = GPTConfig(
        vocab_size=5, block_size=4, n_layer=2, n_head=2, n_embd=6, variant=variant, dropout=dropout
    )
    model = GPT(cfg, seed=seed, dtype=np.float64)
    rng = np.random.default_rng(seed)
    randomize_params(model.params, rng)
    idx = rng.integers(0, cfg.vocab_size, (2, 4))  # (B, T)
    targets = rng.integers(0, cfg.vocab_size, (2, 4))  # (B, T)
    return model, idx, targets


def model_checks(
    seed: int = 0, variants: tuple[str, ...] = VARIANTS, k: int = 4, directions: int = 2
) -> list[CheckResult]:
    """Sparse and directional float64 checks of a whole 2-layer GPT in each scheme.

    The loss is the mean cross-entropy; parameters are set by :func:`randomize_params`.
    """
    rows = []
    for variant in variants:
        model, idx, targets = _small_gpt(variant, seed)
        _, loss, cache = model.forward(idx, targets)
        grads = model.backward(cache)
        args, g, zero = _without_key_bias(model.params, grads, model.cfg.n_embd)

        def loss_fn(model=model, idx=idx, targets=targets, **_):
            return model.forward(idx, targets)[1]

        for mode in ("sparse", "directional"):
            row = compare(
                f"gpt {variant}", loss_fn, args, g, mode=mode, k=k, directions=directions, seed=seed
            )
            rows.append(row)
        kb = np.concatenate(list(zero.values()))  # (L*C,)
        rows.append(_zero_row(f"gpt {variant} key biases (= 0)", kb, row.atol))
    if "pre-ln" in variants:  # dropout in training mode: the same seeded masks on every call
        model, idx, targets = _small_gpt("pre-ln", seed, dropout=0.2)

        def drop_loss(model=model, idx=idx, targets=targets, **_):
            rng = np.random.default_rng(seed + 7)
            return model.forward(idx, targets, train=True, rng=rng)[1]

        _, _, cache = model.forward(idx, targets, train=True, rng=np.random.default_rng(seed + 7))
        args, g, _ = _without_key_bias(model.params, model.backward(cache), model.cfg.n_embd)
        for mode in ("sparse", "directional"):
            rows.append(
                compare(
                    "gpt pre-ln dropout 0.2",
                    drop_loss,
                    args,
                    g,
                    mode=mode,
                    k=k,
                    directions=directions,
                    seed=seed,
                )
            )
    return rows


def run_checks(
    seed: int = 0, variants: tuple[str, ...] = VARIANTS, parts: tuple[str, ...] = PARTS
) -> list[CheckResult]:
    """Everything ``resgrad check`` prints: layers, blocks, then the whole GPT (those of
    them that ``parts`` names)."""
    rows = []
    if "layers" in parts:
        rows += layer_checks(seed)
    if "blocks" in parts:
        rows += block_checks(seed, variants)
    if "model" in parts:
        rows += model_checks(seed, variants)
    return rows


def render_checks(rows: list[CheckResult]) -> tuple[str, bool]:
    """The checks as ``resgrad check`` prints them, HEADER, a row each and a verdict, and
    whether every one passed."""
    failed = [r for r in rows if not r.passed]
    worst = max(r.max_error for r in rows)
    lines = [HEADER, *(r.row() for r in rows)]
    if failed:
        lines.append(f"FAIL: {len(failed)} of {len(rows)} checks above {RTOL:g} (dtype float64)")
    else:
        lines.append(
            f"all {len(rows)} checks passed: max relative error {worst:.2e} <= {RTOL:g} (float64)"
        )
    return "\n".join(lines) + "\n", not failed
