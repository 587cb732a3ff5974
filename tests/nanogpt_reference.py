"""nanoGPT's model, built independently in PyTorch, and its ``ckpt.pt`` as train.py saves it.

Tests only. The architecture is nanoGPT's published ``model.py`` (github.com/karpathy/nanoGPT),
written here from its description, not from resgrad's code:

- ``LayerNorm(ndim, bias)``: a weight, an optional bias, ``F.layer_norm(..., 1e-5)``;
- ``CausalSelfAttention``: ``c_attn`` = nn.Linear(C, 3C) split into q, k, v, heads of
  D = C / H; ``F.scaled_dot_product_attention(is_causal=True)`` (its "flash" path) or the
  manual softmax under a registered ``bias`` buffer (its path without flash); ``c_proj``;
- ``MLP``: ``c_fc`` = nn.Linear(C, 4C), ``nn.GELU()`` (the exact erf form), ``c_proj``;
- ``Block``: ``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))``;
- ``GPT``: ``transformer`` = ModuleDict(wte, wpe, drop, h, ln_f) and ``lm_head`` =
  nn.Linear(C, V, bias=False) whose weight *is* wte's (tied); with targets, the logits of
  every position and ``F.cross_entropy(..., ignore_index=-1)``.

nn.Linear stores its weight (out, in), the transpose of resgrad's (in, out).
:func:`train_py_checkpoint` is the dict nanoGPT's train.py hands to ``torch.save``: the
state dict of a ``torch.compile``-d model (keys prefixed ``_orig_mod.``), the optimizer's
state, ``model_args``, ``iter_num``, ``best_val_loss`` (a tensor) and ``config``.
"""

from __future__ import annotations

import math

import numpy as np

# nanoGPT's parameter names -> resgrad's, and whether nn.Linear's (out, in) is transposed;
# written out by hand (not resgrad's HF_NAMES table), for block i
BLOCK_NAMES = {
    "ln_1.weight": ("ln1.g", False), "ln_1.bias": ("ln1.b", False),
    "attn.c_attn.weight": ("attn.w_qkv", True), "attn.c_attn.bias": ("attn.b_qkv", False),
    "attn.c_proj.weight": ("attn.w_proj", True), "attn.c_proj.bias": ("attn.b_proj", False),
    "ln_2.weight": ("ln2.g", False), "ln_2.bias": ("ln2.b", False),
    "mlp.c_fc.weight": ("mlp.w_fc", True), "mlp.c_fc.bias": ("mlp.b_fc", False),
    "mlp.c_proj.weight": ("mlp.w_proj", True), "mlp.c_proj.bias": ("mlp.b_proj", False),
}  # fmt: skip
TOP_NAMES = {
    "transformer.wte.weight": ("wte", False), "transformer.wpe.weight": ("wpe", False),
    "transformer.ln_f.weight": ("ln_f.g", False), "transformer.ln_f.bias": ("ln_f.b", False),
}  # fmt: skip


def resgrad_name(name: str) -> tuple[str, bool]:
    """'transformer.h.1.mlp.c_fc.weight' -> ('blocks.1.mlp.w_fc', True)."""
    if name in TOP_NAMES:
        return TOP_NAMES[name]
    _, _, i, rest = name.split(".", 3)  # transformer, h, i, the rest
    ours, transposed = BLOCK_NAMES[rest]
    return f"blocks.{i}.{ours}", transposed


def build(torch, n_layer, n_head, n_embd, block_size, vocab_size, bias, dropout=0.0, flash=True,
          dtype=None, seed=0):  # fmt: skip
    """nanoGPT's GPT with every weight, bias and gain drawn at random (seeded)."""
    nn, F = torch.nn, torch.nn.functional

    class LayerNorm(nn.Module):
        def __init__(self, ndim):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(ndim))
            self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

        def forward(self, x):
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
            self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
            self.attn_dropout = nn.Dropout(dropout)
            self.resid_dropout = nn.Dropout(dropout)
            if not flash:  # the causal mask as a buffer: it is in the state dict
                mask = torch.tril(torch.ones(block_size, block_size))
                self.register_buffer("bias", mask.view(1, 1, block_size, block_size))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(n_embd, dim=2)  # 3 x (B, T, C)
            q, k, v = (a.view(B, T, n_head, C // n_head).transpose(1, 2) for a in (q, k, v))
            if flash:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hs)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # (B,nh,T,T)
                att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
                y = self.attn_dropout(F.softmax(att, dim=-1)) @ v  # (B, nh, T, hs)
            y = y.transpose(1, 2).contiguous().view(B, T, C)  # heads side by side
            return self.resid_dropout(self.c_proj(y))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
            self.gelu = nn.GELU()  # the exact form
            self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)
            self.dropout = nn.Dropout(dropout)

        def forward(self, x):
            return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn = LayerNorm(n_embd), CausalSelfAttention()
            self.ln_2, self.mlp = LayerNorm(n_embd), MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(vocab_size, n_embd), wpe=nn.Embedding(block_size, n_embd),
                drop=nn.Dropout(dropout), h=nn.ModuleList(Block() for _ in range(n_layer)),
                ln_f=LayerNorm(n_embd),
            ))  # fmt: skip
            self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
            self.transformer.wte.weight = self.lm_head.weight  # weight tying

        def forward(self, idx, targets):
            t = idx.size(1)
            pos = torch.arange(0, t, dtype=torch.long)  # (t,)
            x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
            for block in self.transformer.h:
                x = block(x)
            logits = self.lm_head(self.transformer.ln_f(x))  # (B, T, V)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                   ignore_index=-1)  # fmt: skip
            return logits, loss

    torch.manual_seed(seed)
    model = GPT().to(dtype or torch.get_default_dtype()).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # every weight, bias and gain random: nothing is trivially 0 or 1
        for name, p in model.named_parameters():
            scale = 0.3 if p.ndim == 1 and name.endswith("weight") else 0.1
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)
    return model


def train_py_checkpoint(torch, model, n_layer, n_head, n_embd, block_size, vocab_size, bias,
                        dataset="shakespeare_char", dropout=0.0):  # fmt: skip
    """What nanoGPT's train.py passes to ``torch.save(checkpoint, "ckpt.pt")``."""
    state = {f"_orig_mod.{k}": v for k, v in model.state_dict().items()}  # a compiled model's
    # AdamW's state after one step (exp_avg, exp_avg_sq, step tensors), taken on copies so
    # the model's weights stay the ones saved
    copies = [torch.nn.Parameter(p.detach().clone()) for p in model.parameters()]
    opt = torch.optim.AdamW(copies, lr=1e-3, betas=(0.9, 0.99))
    sum((p**2).sum() for p in copies).backward()
    opt.step()
    model_args = dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size,
                      bias=bias, vocab_size=vocab_size, dropout=dropout)  # fmt: skip
    config = dict(out_dir="out-shakespeare-char", eval_interval=250, eval_iters=200,
                  dataset=dataset, gradient_accumulation_steps=1, batch_size=64,
                  block_size=block_size, n_layer=n_layer, n_head=n_head, n_embd=n_embd,
                  dropout=dropout, bias=bias, learning_rate=1e-3, max_iters=5000,
                  compile=True, device="cpu", dtype="float32", init_from="scratch")  # fmt: skip
    return {
        "model": state,
        "optimizer": opt.state_dict(),
        "model_args": model_args,
        "iter_num": 250,
        "best_val_loss": torch.tensor(1.4697),
        "config": config,
    }


def grads(model) -> dict[str, np.ndarray]:
    """Every parameter's gradient after ``loss.backward()``, in resgrad's names and layout."""
    out = {}
    for name, p in model.named_parameters():  # the tied lm_head.weight is wte: listed once
        ours, transposed = resgrad_name(name)
        g = p.grad.detach().numpy()
        out[ours] = (g.T if transposed else g).copy()
    return out
