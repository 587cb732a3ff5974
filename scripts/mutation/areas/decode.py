"""Mutants of the one-token decode step: its kernels (src/resgrad/nn/decode_kernels.py) and
its Python side (decode_step in src/resgrad/train/sample.py), each caught by the comparison
with the readable path (tests/train/test_decode.py)."""

# ruff: noqa: E501  (each mutant quotes its source text verbatim)

from mutation import Mutant

T = ("tests/train/test_decode.py",)
K = "nn/decode_kernels.py"
S = "train/sample.py"

MUTANTS = [
    # the attention kernel: append, scores, softmax, the weighted values
    Mutant("decode: softmax without the row max", K,
           "                    mx = sc  # the row max, so that exp stays in range",
           "                    mx = zero  # the row max, so that exp stays in range", T,
           "formula"),
    Mutant("decode: the softmax's max is the first key's score", K,
           "                if s == 0 or sc > mx:", "                if s == 0:", T, "formula"),
    Mutant("decode: attends over one key short of the cache", K,
           "    S = pos + 1  # the cached keys and the new one",
           "    S = pos  # the cached keys and the new one", T, "bounds"),
    Mutant("decode: the new key appended one position early", K,
           "                keys[pos, d] = qkv[b, C + h * D + d]",
           "                keys[pos - 1, d] = qkv[b, C + h * D + d]", T, "bounds"),
    Mutant("decode: the new value taken from the key columns", K,
           "                vals[pos, d] = qkv[b, 2 * C + h * D + d]",
           "                vals[pos, d] = qkv[b, C + h * D + d]", T, "formula"),
    Mutant("decode: scores without the 1/sqrt(D) scale", K,
           "sc = (((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))) * scale",
           "sc = (((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)))", T, "formula"),
    Mutant("decode: the dot product drops D's last columns past 8s", K,
           "                while d < D:  # D not a multiple of 8",
           "                while d < D - D % 8:  # D not a multiple of 8", T, "bounds"),
    Mutant("decode: the qkv bias added to q only", K,
           "            for c in range(3 * C):", "            for c in range(C):", T, "formula"),
    Mutant("decode: the attention weights not normalized", K,
           "                p = scores[s] / tot", "                p = scores[s]", T, "formula"),
    Mutant("decode: the kernels run with the switch off", K,
           "    return kernels.ENABLED and np.dtype(dtype) in (np.float32, np.float64)",
           "    return np.dtype(dtype) in (np.float32, np.float64)", T, "refusal"),
    # decode_step and its sublayers (train/sample.py)
    Mutant("decode: the position embedding of the next position", S,
           'x = np.add(wte[idx[:, 0]], p["wpe"][t0], out=buf.x)',
           'x = np.add(wte[idx[:, 0]], p["wpe"][min(t0 + 1, cfg.block_size - 1)],'
           ' out=buf.x)',
           T, "bounds"),
    Mutant("decode: the cache length not advanced", S,
           "    cache.length = t0 + 1\n", "    cache.length = t0\n", T, "bounds"),
    Mutant("decode: pre-ln's ln2 reads ln1's parameters", S,
           "h, _ = layernorm_forward(x, g2, b2, cfg.ln_eps)  # (B,C) ln2(x)",
           "h, _ = layernorm_forward(x, g1, b1, cfg.ln_eps)  # (B,C) ln2(x)", T, "names"),
    Mutant("decode: pre-ln's attention overwrites the stream", S,
           "            x += _attention_one(h, attn, cfg.n_head, kc, vc, t0, buf, buf.f)",
           "            x[...] = _attention_one(h, attn, cfg.n_head, kc, vc, t0, buf, buf.f)", T,
           "formula"),
    Mutant("decode: no final LayerNorm", S,
           '        x, _ = layernorm_forward(x, p["ln_f.g"], p.get("ln_f.b"), cfg.ln_eps)  # (B,C)',
           "        pass", T, "formula"),
    Mutant("decode: the MLP's output bias dropped", S,
           "    out = np.dot(a, w_proj, out=out)  # 3) (B,F) @ (F,C) -> (B,C)\n"
           "    if b_proj is not None:",
           "    out = np.dot(a, w_proj, out=out)  # 3) (B,F) @ (F,C) -> (B,C)\n"
           "    if False:", T, "formula"),
    Mutant("decode: the MLP's first bias dropped", S,
           "        a += b_fc  # (B,F)", "        pass  # (B,F)", T, "formula"),
    Mutant("decode: the one-token step taken for several tokens", S,
           '    if T == 1 and decode_kernels.available(p["wte"].dtype):',
           '    if decode_kernels.available(p["wte"].dtype):', T, "bounds"),
    Mutant("decode: the buffers kept for another batch size", S,
           "            or buf.x.shape != (batch, cfg.n_embd)\n", "", T, "cache"),
    Mutant("decode: the buffers kept for another dtype", S,
           "            or buf.x.dtype != dtype\n", "", T, "cache"),
    Mutant("decode: a cache the kernel cannot read is not refused", K,
           "    if fn is None:  # the switch off, or an array not C-contiguous or of another dtype\n"
           "        return False", "    if False:\n        return False", T, "refusal"),
]  # fmt: skip
