"""The same GPT built from PyTorch's own modules, loaded from resgrad's flat params dict.

Tests only (the library never imports torch). Every piece is PyTorch's, not a
transcription of resgrad's code: ``nn.Embedding``, ``nn.LayerNorm``,
``nn.MultiheadAttention`` (causal mask), ``nn.Linear``, ``nn.GELU(approximate="tanh")``
(``nn.GELU()``, the exact form, for ``activation="gelu-erf"``) and ``F.cross_entropy``;
autograd computes the gradients.

Layout map: resgrad's linear weights are (C_in, C_out) and ``out = x @ w + b``;
PyTorch's are (C_out, C_in) and ``out = x @ W.T + b``, so every weight is
transposed on the way in and its gradient on the way out. The fused
``attn.w_qkv`` (C, 3C) is ``MultiheadAttention.in_proj_weight.T``: columns
[q | k | v], each split into heads of D consecutive columns, as PyTorch does.
"""

from __future__ import annotations

import numpy as np

# resgrad's GPTConfig.activation -> nn.GELU's ``approximate``
GELU_APPROXIMATE = {"gelu-tanh": "tanh", "gelu-erf": "none"}


def build(torch, cfg, params: dict[str, np.ndarray]):
    """A ``TorchGPT`` (an ``nn.Module``) holding copies of ``params``; see :func:`run`."""
    nn = torch.nn
    F = torch.nn.functional
    dtype = torch.float64 if params["wte"].dtype == np.float64 else torch.float32
    C, H = cfg.n_embd, cfg.n_head
    alpha_deep = (2 * cfg.n_layer) ** 0.25  # DeepNet's decoder-only alpha

    def ln():
        return nn.LayerNorm(C, eps=cfg.ln_eps, bias=cfg.bias, dtype=dtype)

    class Block(nn.Module):
        def __init__(self, depth):
            super().__init__()
            v = cfg.variant
            self.ln1 = ln() if v not in ("residual", "rezero") else None  # those have no norm
            # LayerNorm Scaling (Sun et al. 2025): the l-th block's norms' outputs over l^p
            self.depth = depth  # l, 1-based
            self.ln2 = ln() if self.ln1 is not None else None
            self.attn = nn.MultiheadAttention(C, H, bias=cfg.bias, batch_first=True, dtype=dtype)
            self.fc = nn.Linear(C, 4 * C, bias=cfg.bias, dtype=dtype)
            self.proj = nn.Linear(4 * C, C, bias=cfg.bias, dtype=dtype)
            # GPTConfig.activation: GPT-2's tanh form, or the exact erf form (nanoGPT's)
            self.gelu = nn.GELU(approximate=GELU_APPROXIMATE[cfg.activation])
            self.alpha = nn.Parameter(torch.zeros(1, dtype=dtype)) if v == "rezero" else None

        def f_attn(self, x):
            T = x.shape[1]
            mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # True: hidden
            return self.attn(x, x, x, attn_mask=mask, need_weights=False)[0]

        def f_mlp(self, x):
            return self.proj(self.gelu(self.fc(x)))

        def forward(self, x):
            v = cfg.variant
            for f, norm in ((self.f_attn, self.ln1), (self.f_mlp, self.ln2)):
                if v == "pre-ln":
                    x = x + f(norm(x))
                elif v == "none":
                    x = f(norm(x))
                elif v == "post-ln":
                    x = norm(x + f(x))
                elif v == "residual":
                    x = x + f(x)
                elif v == "rezero":
                    x = x + self.alpha * f(x)
                elif v == "deepnorm":
                    x = norm(alpha_deep * x + f(x))
                elif v == "ln-scaling":
                    x = x + f(norm(x) / self.depth**cfg.ln_scaling_power)
                else:
                    raise ValueError(v)
            return x

    class TorchGPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(cfg.vocab_size, C, dtype=dtype)
            self.wpe = nn.Embedding(cfg.block_size, C, dtype=dtype)
            self.blocks = nn.ModuleList(Block(depth) for depth in range(1, cfg.n_layer + 1))
            self.ln_f = ln() if cfg.variant in ("pre-ln", "none", "ln-scaling") else None

        def forward(self, idx, targets=None, ignore_index=-100):
            T = idx.shape[1]
            x = self.wte(idx) + self.wpe(torch.arange(T))
            for b in self.blocks:
                x = b(x)
            if self.ln_f is not None:
                x = self.ln_f(x)
            logits = F.linear(x, self.wte.weight)  # the head tied to wte
            loss = None
            if targets is not None:
                loss = F.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]),
                    targets.reshape(-1),
                    ignore_index=ignore_index,
                )
            return logits, loss

    model = TorchGPT()
    model.mapping = _mapping(model, cfg)  # resgrad name -> (torch parameter, transposed?)
    with torch.no_grad():
        for name, (p, t) in model.mapping.items():
            a = torch.from_numpy(np.ascontiguousarray(params[name]))
            p.copy_(a.T if t else a)
    unmapped = {id(p) for p in model.parameters()} - {id(p) for p, _ in model.mapping.values()}
    assert not unmapped, "every PyTorch parameter must come from resgrad's dict"
    return model


def _mapping(model, cfg):
    m = {"wte": (model.wte.weight, False), "wpe": (model.wpe.weight, False)}
    for i, b in enumerate(model.blocks):
        p = f"blocks.{i}"
        for j, norm in ((1, b.ln1), (2, b.ln2)):
            if norm is not None:
                m[f"{p}.ln{j}.g"] = (norm.weight, False)
                if cfg.bias:
                    m[f"{p}.ln{j}.b"] = (norm.bias, False)
        m[f"{p}.attn.w_qkv"] = (b.attn.in_proj_weight, True)
        m[f"{p}.attn.w_proj"] = (b.attn.out_proj.weight, True)
        m[f"{p}.mlp.w_fc"] = (b.fc.weight, True)
        m[f"{p}.mlp.w_proj"] = (b.proj.weight, True)
        if cfg.bias:
            m[f"{p}.attn.b_qkv"] = (b.attn.in_proj_bias, False)
            m[f"{p}.attn.b_proj"] = (b.attn.out_proj.bias, False)
            m[f"{p}.mlp.b_fc"] = (b.fc.bias, False)
            m[f"{p}.mlp.b_proj"] = (b.proj.bias, False)
        if b.alpha is not None:
            m[f"{p}.alpha"] = (b.alpha, False)
    if model.ln_f is not None:
        m["ln_f.g"] = (model.ln_f.weight, False)
        if cfg.bias:
            m["ln_f.b"] = (model.ln_f.bias, False)
    return m


def run(torch, cfg, params, idx, targets, ignore_index=None):
    """PyTorch's logits, loss and gradients (as numpy, resgrad's names and layouts)."""
    model = build(torch, cfg, params)
    logits, loss = model(
        torch.from_numpy(np.asarray(idx, dtype=np.int64)),
        torch.from_numpy(np.asarray(targets, dtype=np.int64)),
        ignore_index=-100 if ignore_index is None else ignore_index,
    )
    loss.backward()
    grads = {}
    for name, (p, t) in model.mapping.items():
        g = p.grad if p.grad is not None else torch.zeros_like(p)
        grads[name] = (g.T if t else g).detach().numpy().copy()
    return logits.detach().numpy(), float(loss.detach()), grads
