"""GPT-2 in and out: Hugging Face model directories, nanoGPT state dicts, hub names.

Legend: C = n_embd, V = vocab_size, P = n_positions (resgrad's block_size), L = n_layer.

GPT-2 is resgrad's ``pre-ln`` GPT with biases, GPT-2 init conventions and a tied LM
head, so loading it is renaming tensors. Conventions checked against
``transformers.models.gpt2.modeling_gpt2`` (transformers 5.24):

- projections are ``Conv1D`` with weight (in, out), ``y = x @ W + b``: resgrad's layout,
  copied as is; nanoGPT's ``nn.Linear`` stores (out, in) and is transposed;
- ``c_attn`` fuses [q | k | v] along its output columns, each of H heads D = C / H
  consecutive columns: resgrad's ``w_qkv`` layout;
- attention scores are scaled by 1 / sqrt(D) (``scale_attn_weights``); the
  per-layer scaling ``scale_attn_by_inverse_layer_idx`` is refused;
- ``activation_function`` ``gelu_new`` (and ``gelu_pytorch_tanh``, the same
  function) is resgrad's tanh GELU, ``activation="gelu-tanh"``; ``gelu`` (and
  ``gelu_python``) is the exact erf GELU, ``activation="gelu-erf"``; anything else is
  refused by name. ``export`` writes ``gelu_new`` or ``gelu``;
- LayerNorm's epsilon is ``layer_norm_epsilon`` (resgrad's ``GPTConfig.ln_eps``), read
  from float32's smallest normal to 0.1 (:data:`EPS_MAX`; transformers takes any float);
- the sizes are JSON integers >= 1 (GPT2Config refuses ``12.0``), each also read under
  its aliases, transformers' ``attribute_map`` (``hidden_size``, ``num_hidden_layers``,
  ``num_attention_heads``, ``max_position_embeddings``) and old configs' ``n_ctx``;
  aliases given together must agree; ``n_inner`` is null or 4 * n_embd (resgrad's MLP);
- ``lm_head.weight`` is tied to ``wte``: not stored by ``save_pretrained``; where a
  file holds it (nanoGPT, some hub copies) it must equal ``wte``;
- the causal-mask buffers ``h.{i}.attn.bias`` and ``h.{i}.attn.masked_bias`` of
  old checkpoints are not parameters and are ignored.

The one mapping table, resgrad name -> the name a transformers or nanoGPT user
looks for (``{i}`` is the block index; HF names are ``GPT2Model``'s, which
``GPT2LMHeadModel`` prefixes with ``transformer.``, and nanoGPT's are the same
with that prefix; "T" marks nanoGPT's (out, in) weights, transposed on the way in)::
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from resgrad.formats.atomic import holds, remove_stale_staging, staged_dir
from resgrad.nn.model import GPT, GPTConfig

__all__ = [
    "HF_NAMES",
    "export_hf",
    "gpt_from_state",
    "hf_config",
    "is_hub_name",
    "load_hf",
    "nanogpt_config",
    "nanogpt_state_to_params",
    "read_hf_config",
    "read_hf_tensors",
    "resolve_pretrained",
]

#: resgrad name -> (Hugging Face GPT2Model name, transposed in nanoGPT's nn.Linear)
HF_NAMES: dict[str, tuple[str, bool]] = {
    "wte": ("wte.weight", False),  # (V, C) token embedding, and the tied LM head
    "wpe": ("wpe.weight", False),  # (P, C) position embedding
    "blocks.{i}.ln1.g": ("h.{i}.ln_1.weight", False),  # (C,)
    "blocks.{i}.ln1.b": ("h.{i}.ln_1.bias", False),  # (C,)
    "blocks.{i}.attn.w_qkv": ("h.{i}.attn.c_attn.weight", True),  # (C, 3C) [q | k | v]
    "blocks.{i}.attn.b_qkv": ("h.{i}.attn.c_attn.bias", False),  # (3C,)
    "blocks.{i}.attn.w_proj": ("h.{i}.attn.c_proj.weight", True),  # (C, C)
    "blocks.{i}.attn.b_proj": ("h.{i}.attn.c_proj.bias", False),  # (C,)
    "blocks.{i}.ln2.g": ("h.{i}.ln_2.weight", False),  # (C,)
    "blocks.{i}.ln2.b": ("h.{i}.ln_2.bias", False),  # (C,)
    "blocks.{i}.mlp.w_fc": ("h.{i}.mlp.c_fc.weight", True),  # (C, 4C)
    "blocks.{i}.mlp.b_fc": ("h.{i}.mlp.c_fc.bias", False),  # (4C,)
    "blocks.{i}.mlp.w_proj": ("h.{i}.mlp.c_proj.weight", True),  # (4C, C)
    "blocks.{i}.mlp.b_proj": ("h.{i}.mlp.c_proj.bias", False),  # (C,)
    "ln_f.g": ("ln_f.weight", False),  # (C,)
    "ln_f.b": ("ln_f.bias", False),  # (C,)
}
HEAD = "lm_head.weight"  # (V, C), tied to wte: dropped on the way in, never written
_BUFFER = re.compile(r"h\.\d+\.attn\.(bias|masked_bias)$")  # causal-mask buffers, not weights
# transformers' activation_function -> resgrad's GPTConfig.activation, and back for export
_ACTIVATIONS = {
    "gelu_new": "gelu-tanh",  # GPT-2's tanh form
    "gelu_pytorch_tanh": "gelu-tanh",  # the same function, PyTorch's kernel
    "gelu": "gelu-erf",  # the exact form, torch.nn.functional.gelu: nanoGPT's
    "gelu_python": "gelu-erf",  # the same function, written with torch.erf
}
_HF_ACTIVATION = {"gelu-tanh": "gelu_new", "gelu-erf": "gelu"}  # what export writes
# layer_norm_epsilon's range: from float32's smallest normal (a float32 model keeps it > 0)
# to 0.1 (epsilons in use run 1e-12 to 1e-5, GPT-2's 1e-5; near a unit variance it changes
# the normalization itself: 1e308 overflowed float32 and sampled garbage). transformers
# takes any float; resgrad refuses what no GPT-2 was trained with, and export writes no other
EPS_MIN, EPS_MAX = float(np.finfo(np.float32).tiny), 0.1
# GPT2Config's other float fields -> (least, bound excluded, what is expected)
_FLOAT_FIELDS = {
    "resid_pdrop": (0.0, 1.0, "a dropout probability in [0, 1)"),
    "embd_pdrop": (0.0, 1.0, "a dropout probability in [0, 1)"),
    "attn_pdrop": (0.0, 1.0, "a dropout probability in [0, 1)"),
    "summary_first_dropout": (0.0, 1.0, "a dropout probability in [0, 1)"),
    "initializer_range": (0.0, math.inf, "a finite number >= 0 (the init's std)"),
}
# nanoGPT's GPTConfig fields, the keys of the model_args its train.py saves
NANOGPT_ARGS = ("n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size", "dropout")
MAX_PARAMS = 2**40  # 1.1e12 parameters, 4 TiB in float32: a config beyond it is a typo
HUB_MODELS = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")  # openai-community/<name>
CONFIG, WEIGHTS, INDEX = "config.json", "model.safetensors", "model.safetensors.index.json"
TOKENIZER_CONFIG = {"tokenizer_class": "PreTrainedTokenizerFast"}  # run tokenizer.json as it is

__doc__ += "\n" + "\n".join(  # a literal block after the docstring's "::" and a blank line
    f"    {ours:<24} {theirs:<26} {'T' if t else ''}".rstrip()
    for ours, (theirs, t) in HF_NAMES.items()
)


def _names(n_layer: int) -> dict[str, tuple[str, bool]]:
    """The table expanded for every block: resgrad name -> (HF name, transposed in nanoGPT)."""
    out = {}
    for ours, (theirs, t) in HF_NAMES.items():
        if "{i}" in ours:
            out.update({ours.format(i=i): (theirs.format(i=i), t) for i in range(n_layer)})
        else:
            out[ours] = (theirs, t)
    return out


# --------------------------------------------------------------------------- config


def _json(value: Any) -> str:
    """``value`` as config.json spells it (null, true, "8"), for messages."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _get(cfg: Mapping[str, Any], where: str, *keys: str) -> int:
    """The size under ``keys``, a field and its aliases (n_positions, n_ctx, ...): an integer
    >= 1, a JSON integer (``12.0``, ``"12"`` and ``true`` are refused, as transformers'
    GPT2Config refuses them). Every alias given is checked, and they must agree: where
    transformers reads the alias (hidden_size over n_embd) and resgrad the first, a
    disagreement would load another model."""
    given = [k for k in keys if k in cfg]
    if not given:
        raise ValueError(f"{where}: config.json has no {keys[0]!r}")
    for k in given:
        v = cfg[k]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{where}: {k} is {_json(cfg[k])}; expected an integer >= 1")
    first = given[0]
    for k in given[1:]:
        if cfg[k] != cfg[first]:
            raise ValueError(
                f"{where}: {first} is {cfg[first]} but {k} is {cfg[k]}; expected one value "
                f"({' and '.join(given)} name one field)"
            )
    return cfg[first]


def _eps(cfg: Mapping[str, Any], where: str) -> float:
    """``layer_norm_epsilon`` (GPT-2's 1e-5 when absent): a number in [EPS_MIN, EPS_MAX]."""
    v = cfg.get("layer_norm_epsilon", 1e-5)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not EPS_MIN <= v <= EPS_MAX:
        raise ValueError(
            f"{where}: layer_norm_epsilon is {_json(v)}; expected a positive finite number "
            f"from {EPS_MIN:.6g} to {EPS_MAX:g} (LayerNorm's epsilon; GPT-2's is 1e-05)"
        )
    return float(v)


def _check_floats(cfg: Mapping[str, Any], where: str) -> None:
    """The other float fields of GPT2Config, where given: each a number in its range (resgrad
    does not use them to load, but a file holding nonsense there is not a GPT-2 config)."""
    for key, (lo, hi, want) in _FLOAT_FIELDS.items():
        if key not in cfg:
            continue
        v = cfg[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v < hi:
            raise ValueError(f"{where}: {key} is {_json(v)}; expected {want}")


def _n_params(cfg: GPTConfig) -> int:
    """Parameters a Hugging Face GPT-2 of this shape stores (biases included, head tied)."""
    V, T, L, C = cfg.vocab_size, cfg.block_size, cfg.n_layer, cfg.n_embd
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C


def gpt_config_from_hf(cfg: Mapping[str, Any], where: str = "config.json") -> GPTConfig:
    """resgrad's :class:`GPTConfig` for a Hugging Face GPT-2 ``config.json`` (as a dict).

    Raises
    ------
    ValueError
        ``model_type`` other than gpt2, or a setting resgrad does not implement, named.
    """
    mt = cfg.get("model_type")
    if mt != "gpt2":
        raise ValueError(f"{where}: model_type is {_json(mt)}; resgrad loads only 'gpt2' models")
    act = cfg.get("activation_function", "gelu_new")
    if not isinstance(act, str) or act not in _ACTIVATIONS:
        raise ValueError(
            f"{where}: activation_function {act!r} is not implemented in resgrad; "
            f"expected one of {', '.join(_ACTIVATIONS)} (GELU, tanh or exact form)"
        )
    C = _get(cfg, where, "n_embd", "hidden_size")
    inner = cfg.get("n_inner")  # the MLP's width: null is 4 * n_embd, the one resgrad builds
    checks = [
        ("n_inner", inner is None or (type(inner) is int and inner == 4 * C),
         f"null or the integer 4 * n_embd = {4 * C}"),
        ("scale_attn_weights", cfg.get("scale_attn_weights", True) is True, "true"),
        ("scale_attn_by_inverse_layer_idx",
         cfg.get("scale_attn_by_inverse_layer_idx") in (None, False), "false"),
        ("add_cross_attention", cfg.get("add_cross_attention") in (None, False), "false"),
        ("tie_word_embeddings", cfg.get("tie_word_embeddings", True) is True, "true"),
    ]  # fmt: skip
    for key, ok, want in checks:
        if not ok:
            raise ValueError(
                f"{where}: {key} is {_json(cfg.get(key))}; resgrad's GPT-2 needs {want}"
            )
    sizes = dict(  # each field checked, its message naming the file once
        vocab_size=_get(cfg, where, "vocab_size"),
        block_size=_get(cfg, where, "n_positions", "n_ctx", "max_position_embeddings"),
        n_layer=_get(cfg, where, "n_layer", "num_hidden_layers"),
        n_head=_get(cfg, where, "n_head", "num_attention_heads"),
        ln_eps=_eps(cfg, where),
    )
    _check_floats(cfg, where)
    try:
        out = GPTConfig(
            **sizes,
            n_embd=C,
            activation=_ACTIVATIONS[act],
        )
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    if _n_params(out) > MAX_PARAMS:  # refused from the numbers alone, before any allocation
        raise ValueError(
            f"{where}: these sizes make about {_n_params(out):.1e} parameters (vocab_size "
            f"{out.vocab_size}, n_positions {out.block_size}, n_layer {out.n_layer}, n_embd "
            f"{out.n_embd}), more than resgrad loads ({MAX_PARAMS:.1e})"
        )
    return out


def hf_config(cfg: GPTConfig) -> dict[str, Any]:
    """The Hugging Face ``config.json`` (as a dict) of a pre-LN resgrad GPT."""
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": cfg.vocab_size,
        "n_positions": cfg.block_size,
        "n_embd": cfg.n_embd,
        "n_layer": cfg.n_layer,
        "n_head": cfg.n_head,
        "n_inner": None,
        "activation_function": _HF_ACTIVATION[cfg.activation],
        "layer_norm_epsilon": cfg.ln_eps,
        "resid_pdrop": cfg.dropout,
        "embd_pdrop": cfg.dropout,
        "attn_pdrop": cfg.dropout,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True,
        "bos_token_id": None,
        "eos_token_id": None,
    }


# --------------------------------------------------------------------------- tensors


def _open_error(path: str, e: Exception) -> ValueError:
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    return ValueError(f"{path!r} is not a readable safetensors file (truncated or corrupt?): {msg}")


# safetensors dtype -> NumPy's, little-endian (the format's byte order); BF16 is apart
_ST_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
              "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}  # fmt: skip
_FLOATS = ("F16", "BF16", "F32", "F64")  # what weights may be: an int8 cast is all zeros


def _is_buffer(name: str) -> bool:
    """The causal-mask buffers old files keep (bool or float), which are not weights."""
    return bool(_BUFFER.fullmatch(name.removeprefix("_orig_mod.").removeprefix("transformer.")))


def _bf16_to_float32(raw: bytes) -> np.ndarray:
    """bfloat16 is float32's upper 16 bits: widen each by 16 zero bits, exactly."""
    return (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)


def _read_header(path: str) -> dict[str, tuple[str, int]]:
    """Name -> (safetensors dtype, number of values) of every tensor of one file, from its
    header alone (no data is read), each weight's dtype checked: a float type resgrad
    reads. Integer or boolean weights (an int8 file, cast, would be an all-zero model)
    are refused by name, as is a type NumPy lacks (float8, ...); bfloat16 is read."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(path, framework="numpy") as f:
            kinds = {k: (f.get_slice(k).get_dtype(), math.prod(f.get_slice(k).get_shape()))
                     for k in f.keys()}  # fmt: skip
    except (SafetensorError, OSError, ValueError, TypeError) as e:
        raise _open_error(path, e) from None
    for name, (st, _) in kinds.items():
        if st in _ST_DTYPES and st not in _FLOATS and not _is_buffer(name):
            raise ValueError(f"{path!r}: tensor {name!r} has dtype {st}; expected floating-point "
                             f"weights ({', '.join(_FLOATS)})")  # fmt: skip
        if st not in _ST_DTYPES and st != "BF16":
            raise ValueError(f"{path!r}: tensor {name!r} has dtype {st}, which resgrad does not "
                             f"read (it reads BF16, {', '.join(_ST_DTYPES)})")  # fmt: skip
    return kinds


def _read_safetensors(path: str) -> dict[str, np.ndarray]:
    """Every tensor of one file, its header checked first (:func:`_read_header`). bfloat16
    ones (Hugging Face's half-precision checkpoints), which NumPy has no type for, are
    read as float32, exactly."""
    from safetensors import SafetensorError, deserialize
    from safetensors.numpy import load_file

    kinds = {k: st for k, (st, _) in _read_header(path).items()}
    try:
        if set(kinds.values()) <= _ST_DTYPES.keys():  # NumPy types: safetensors reads them
            return load_file(path)
        with open(path, "rb") as f:
            tensors = deserialize(f.read())  # [(name, {"dtype", "shape", "data": bytes})]
    except (SafetensorError, OSError, ValueError, TypeError) as e:
        raise _open_error(path, e) from None
    out = {}
    for name, t in tensors:
        if t["dtype"] == "BF16":
            a = _bf16_to_float32(t["data"])
        else:  # a NumPy type: _read_header refused the others
            a = np.frombuffer(t["data"], dtype=_ST_DTYPES[t["dtype"]])
        out[name] = a.reshape(t["shape"])
    return out


def _json_kind(value: Any) -> str:
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return kinds.get(type(value), "number")


def _read_index(d: str) -> dict[str, list[str]]:
    """Shard file -> the tensor names ``model.safetensors.index.json`` maps to it, checked:
    an object whose ``weight_map`` maps each name to a file name in the directory."""
    index = os.path.join(d, INDEX)
    try:
        with open(index, encoding="utf-8") as f:
            doc = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{index!r} is not valid JSON: {e}") from None
    want = "expected an object of tensor name -> shard file"
    if not isinstance(doc, dict):
        raise ValueError(f"{index!r} is a JSON {_json_kind(doc)}; expected an object with a "
                         "'weight_map'")  # fmt: skip
    if "weight_map" not in doc:
        raise ValueError(f"{index!r} has no 'weight_map'; {want}")
    wm = doc["weight_map"]
    if not isinstance(wm, dict):
        raise ValueError(f"{index!r}: weight_map is a JSON {_json_kind(wm)}; {want}")
    if not wm:
        raise ValueError(f"{index!r}: weight_map is empty; {want}")
    shards: dict[str, list[str]] = {}
    for name, shard in wm.items():
        plain = isinstance(shard, str) and shard not in ("", ".", "..")
        if not plain or os.path.basename(shard) != shard:  # a file here, not a path elsewhere
            raise ValueError(f"{index!r}: weight_map[{name!r}] is {_json(shard)}; expected a "
                             f"shard file name in {d!r}")  # fmt: skip
        shards.setdefault(shard, []).append(name)
    return shards


def _header_values(path: str) -> int:
    """How many weight values one safetensors file holds, from its header alone."""
    return sum(n for k, (_, n) in _read_header(path).items() if not _is_buffer(k))


def _weights_held(d: str) -> tuple[str, int] | None:
    """What holds the weights (for messages) and how many values, from the headers alone;
    None where there are no safetensors weights (read_hf_tensors says so)."""
    if os.path.exists(os.path.join(d, WEIGHTS)):
        return repr(WEIGHTS), _header_values(os.path.join(d, WEIGHTS))
    if os.path.exists(os.path.join(d, INDEX)):
        shards = _read_index(d)
        held = sum(_header_values(os.path.join(d, s)) for s in shards)
        return f"the {len(shards)} shard(s) of {INDEX!r}", held
    return None


def _least_params(cfg: GPTConfig) -> int:
    """Values any GPT-2 state dict of this shape holds, whatever its biases: wte, wpe and
    the blocks' four matrices."""
    V, T, L, C = cfg.vocab_size, cfg.block_size, cfg.n_layer, cfg.n_embd
    return V * C + T * C + L * 12 * C * C


def _refuse_larger(cfg: GPTConfig, held: int, where: str, what: str) -> None:
    """Refuse a config whose model is larger than the weights at hand (n_layer 10^8 in a
    small model's config), from the numbers alone: before anything of its size is built."""
    if held < _least_params(cfg):
        raise ValueError(
            f"{where}: n_layer {cfg.n_layer}, n_embd {cfg.n_embd}, vocab_size {cfg.vocab_size} "
            f"and {cfg.block_size} positions make at least {_least_params(cfg):,} parameters, "
            f"but {what} holds {held:,} values"
        )


def read_hf_tensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every tensor of a model directory's ``model.safetensors`` (or its shards).

    Raises
    ------
    ValueError
        No safetensors weights (a directory with only ``pytorch_model.bin`` is told how
        to convert), or a truncated or corrupt file.
    """
    d = os.fspath(path)
    single, index = os.path.join(d, WEIGHTS), os.path.join(d, INDEX)
    if os.path.exists(single):
        return _read_safetensors(single)
    if os.path.exists(index):
        out: dict[str, np.ndarray] = {}
        for shard, names in _read_index(d).items():
            tensors = _read_safetensors(os.path.join(d, shard))
            stray = sorted(tensors.keys() - set(names))
            if stray:
                raise ValueError(f"{os.path.join(d, shard)!r} holds tensor {stray[0]!r}, which "
                                 f"the index does not map to it")  # fmt: skip
            out.update(tensors)
        return out
    if any(os.path.exists(os.path.join(d, b)) for b in ("pytorch_model.bin", "tf_model.h5")):
        raise ValueError(
            f"{d!r} holds weights only as pytorch_model.bin (a pickle resgrad does not read); "
            'convert it with: python -c "from transformers import GPT2LMHeadModel as M; '
            f"M.from_pretrained('{d}').save_pretrained('{d}')\""
        )
    raise ValueError(f"{d!r} has no {WEIGHTS}; expected a Hugging Face GPT-2 model directory")


def gpt_from_state(
    cfg: GPTConfig,
    tensors: Mapping[str, np.ndarray],
    *,
    nanogpt: bool = False,
    dtype: Any = np.float32,
    where: str = "model",
) -> GPT:
    """A resgrad GPT holding the weights of a GPT-2 state dict.

    Parameters
    ----------
    cfg : GPTConfig
        The model's shape (pre-ln; ``bias=False`` only for nanoGPT's bias-free models).
    tensors : mapping of str to ndarray
        Hugging Face names (with or without the ``transformer.`` prefix), or nanoGPT's
        (``transformer.`` prefix, ``_orig_mod.`` of a compiled model allowed, nn.Linear
        weights (out, in)) when ``nanogpt``.
    dtype : np.float32 or np.float64
    where : str
        Names the source in error messages.

    Raises
    ------
    ValueError
        A missing or unexpected tensor, a wrong shape, or an LM head not tied to wte.
    """
    state: dict[str, np.ndarray] = {}
    for k, v in tensors.items():
        k = k.removeprefix("_orig_mod.").removeprefix("transformer.")
        if _BUFFER.fullmatch(k):
            continue  # the causal mask, a buffer
        state[k] = np.asarray(v)
    head = state.pop(HEAD, None)
    _refuse_larger(cfg, sum(np.size(a) for a in state.values()), where, "the state dict")
    shapes = GPT.param_shapes(cfg)
    names = {ours: spec for ours, spec in _names(cfg.n_layer).items() if ours in shapes}
    theirs_to_ours = {theirs: ours for ours, (theirs, _) in names.items()}
    missing = [theirs for theirs in theirs_to_ours if theirs not in state]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise ValueError(f"{where}: missing tensor {missing[0]!r}{more}")
    extra = [k for k in state if k not in theirs_to_ours]
    if extra:
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        raise ValueError(f"{where}: unexpected tensor {extra[0]!r}{more} for {cfg.n_layer} layers")
    params = {}
    for ours, (theirs, transposed) in names.items():
        a = state[theirs]
        if nanogpt and transposed:
            a = a.T  # nn.Linear's (out, in) -> resgrad's (in, out)
        if a.shape != shapes[ours]:
            want = shapes[ours][::-1] if nanogpt and transposed else shapes[ours]
            got = state[theirs].shape
            raise ValueError(f"{where}: tensor {theirs!r} has shape {got}; expected {want}")
        with np.errstate(over="ignore"):  # beyond float32's range: inf, refused below
            params[ours] = np.ascontiguousarray(a, dtype=dtype)
        if not np.isfinite(params[ours]).all():  # NaN weights sample garbage, train NaN
            n = int(np.size(params[ours]) - np.isfinite(params[ours]).sum())
            read = f" once read as {np.dtype(dtype)}" if np.isfinite(a).all() else ""
            raise ValueError(f"{where}: tensor {theirs!r} holds {n} non-finite value(s) (NaN or "
                             f"inf{read}); expected finite weights")  # fmt: skip
    model = GPT.from_params(cfg, params)  # no random init: GPT-2 124M loads in a second
    if head is not None and not np.array_equal(np.asarray(head), state["wte.weight"]):
        raise ValueError(
            f"{where}: {HEAD!r} differs from wte.weight; resgrad's LM head is tied to wte"
        )
    return model


def _arg(v: Any) -> str:
    """A model_args value as its pickle holds it, for messages ('2' is a string)."""
    return f"{v!r} (a {type(v).__name__})" if type(v) not in (int, float) else repr(v)


def nanogpt_config(model_args: Mapping[str, Any], where: str = "nanoGPT checkpoint") -> GPTConfig:
    """resgrad's :class:`GPTConfig` for nanoGPT's ``model_args``, checked as its ``GPTConfig``
    would take them: read from the numbers alone, before any weight is converted.

    ``model_args`` holds :data:`NANOGPT_ARGS`, as nanoGPT's ``train.py`` saves them: the
    sizes are integers >= 1 (not ``"2"``, ``2.0`` or ``True``), ``bias`` a bool (nanoGPT's
    default ``True`` where absent), ``dropout`` a number in [0, 1) (its default 0.0; unused
    here, the loaded model has dropout 0). Any other key is another model (a fork's field)
    and refused by name. nanoGPT's LayerNorm eps is 1e-5 and its MLP's activation is
    ``nn.GELU()``, the exact erf form: ``activation="gelu-erf"``.

    Raises
    ------
    ValueError
        A missing size, a value of the wrong type or range, or a key nanoGPT does not have.
    """
    unknown = [k for k in model_args if k not in NANOGPT_ARGS]
    if unknown:
        raise ValueError(f"{where}: model_args has {unknown[0]!r}, which nanoGPT's GPTConfig "
                         f"does not have; expected only {', '.join(NANOGPT_ARGS)}")  # fmt: skip
    sizes = {}
    for k in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
        if k not in model_args:
            raise ValueError(f"{where}: model_args has no {k!r}")
        v = model_args[k]
        if type(v) is not int or v < 1:  # type(): True is no size, nor 2.0, nor "2"
            raise ValueError(f"{where}: model_args {k} is {_arg(v)}; expected an integer >= 1")
        sizes[k] = v
    bias = model_args.get("bias", True)  # nanoGPT's GPTConfig: bias: bool = True
    if type(bias) is not bool:
        raise ValueError(f"{where}: model_args bias is {_arg(bias)}; expected True or False")
    drop = model_args.get("dropout", 0.0)  # nanoGPT's GPTConfig: dropout: float = 0.0
    if type(drop) not in (int, float) or not 0.0 <= drop < 1.0:
        raise ValueError(f"{where}: model_args dropout is {_arg(drop)}; expected a number in "
                         "[0, 1)")  # fmt: skip
    try:
        cfg = GPTConfig(
            **sizes,
            bias=bias,
            ln_eps=1e-5,  # nanoGPT's LayerNorm: F.layer_norm(..., 1e-5)
            activation="gelu-erf",  # nanoGPT's MLP: nn.GELU(), the exact form
        )
    except ValueError as e:
        raise ValueError(f"{where}: bad model_args: {e}") from None
    if _n_params(cfg) > MAX_PARAMS:  # refused from the numbers alone, before any allocation
        raise ValueError(
            f"{where}: model_args make about {_n_params(cfg):.1e} parameters, more than resgrad "
            f"loads ({MAX_PARAMS:.1e})"
        )
    return cfg


def nanogpt_state_to_params(
    model_args: Mapping[str, Any],
    state: Mapping[str, np.ndarray],
    dtype: Any = np.float32,
    where: str = "nanoGPT checkpoint",
) -> GPT:
    """A resgrad GPT from nanoGPT's ``model_args`` (:func:`nanogpt_config`) and its state
    dict (as NumPy arrays: see :func:`gpt_from_state`)."""
    cfg = nanogpt_config(model_args, where)
    return gpt_from_state(cfg, state, nanogpt=True, dtype=dtype, where=where)


# --------------------------------------------------------------------------- directories


def _read_config(d: str) -> dict[str, Any]:
    path = os.path.join(d, CONFIG)
    if not os.path.isdir(d):
        raise ValueError(f"{d!r} is not a directory; expected a Hugging Face GPT-2 model directory")
    if not os.path.exists(path):
        raise ValueError(f"{d!r} has no {CONFIG}; expected a Hugging Face GPT-2 model directory")
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{path!r} is not valid JSON: {e}") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{path!r} is not a JSON object")
    return cfg


def read_hf_config(path: str | os.PathLike) -> GPTConfig:
    """The shape of a Hugging Face GPT-2 directory's model, allocating nothing.

    ``config.json`` is read and checked field by field, then held against the number of
    values the safetensors headers declare, so that a config describing far more than its
    files hold is refused before anything is built.

    Raises
    ------
    ValueError
        As :func:`gpt_config_from_hf`, naming the file, or a config larger than its weights.
    """
    d = os.fspath(path)
    where = os.path.join(d, CONFIG)
    cfg = gpt_config_from_hf(_read_config(d), where=where)
    weights = _weights_held(d)  # None: read_hf_tensors says what is missing
    if weights is not None:
        _refuse_larger(cfg, weights[1], where, weights[0])
    return cfg


def load_hf(
    path: str | os.PathLike,
    dtype: Any = np.float32,
    fits: Callable[[GPTConfig], None] | None = None,
) -> GPT:
    """Load a Hugging Face GPT-2 directory (``config.json`` + ``model.safetensors``).

    Parameters
    ----------
    path : str or PathLike
        A directory as ``save_pretrained`` writes it (or a hub snapshot).
    dtype : np.float32 or np.float64
    fits : callable, optional
        Called with the model's shape (:func:`read_hf_config`) before any weight is read;
        it raises to refuse a model, as the CLI's memory check does.

    Returns
    -------
    GPT
        A pre-ln GPT with biases, dropout 0, ``ln_eps`` = ``layer_norm_epsilon``.

    Raises
    ------
    ValueError
        Every bad input, in one line: no config.json, a model_type other than gpt2, an
        unimplemented setting, a config larger than its weights, no safetensors file, a bad
        index, a truncated file, missing or extra tensors, a wrong shape, weights of an
        integer type, a NaN or inf.
    """
    d = os.fspath(path)
    cfg = read_hf_config(d)
    if fits is not None:
        fits(cfg)
    tensors = read_hf_tensors(d)
    return gpt_from_state(cfg, tensors, dtype=dtype, where=d)


# what a model directory holds (resgrad's export, save_pretrained, a hub snapshot): the
# files `export --force` may replace; anything else in the directory stops it
_MODEL_FILES = re.compile(
    r"config\.json|model\.safetensors|model\.safetensors\.index\.json|model-.*\.safetensors"
    r"|tokenizer\.json|tokenizer_config\.json|vocab\.json|merges\.txt"
    r"|special_tokens_map\.json|generation_config\.json"
)


def _check_export_dir(d: str, force: bool, reads: Sequence[str] = ()) -> bool:
    """Whether ``d`` holds something export would replace; refused unless ``force``, and
    always when it holds a file that is not a model's, or is or holds a path the export
    reads (``reads``: a checkpoint file named as a model's file too), as export replaces
    the directory."""
    for src in reads:
        if holds(d, src):
            same = os.path.realpath(d) == os.path.realpath(src)
            raise ValueError(
                f"{d!r} {'is' if same else 'holds'} {os.fspath(src)!r}, which "
                "the export reads; export writes the directory as a whole: choose a new or "
                "empty directory"
            )
    remove_stale_staging(d)  # a killed export's temporaries (its old model put back)
    if not os.path.isdir(d) or not os.listdir(d):
        return False
    entries = sorted(os.listdir(d))
    model = [e for e in entries if _MODEL_FILES.fullmatch(e) and os.path.isfile(os.path.join(d, e))]
    other = [e for e in entries if e not in model]
    if other:
        raise ValueError(
            f"{d!r} holds {other[0]!r}, which is not part of a model; export writes the "
            "directory as a whole: choose a new or empty directory"
        )
    if not force:
        raise ValueError(
            f"{d!r} already holds a model ({', '.join(entries[:3])}); pass --force "
            "(force=True) to replace it, or choose another directory"
        )
    return True


def export_hf(
    model: GPT,
    out_dir: str | os.PathLike,
    tokenizer_json: str | None = None,
    force: bool = False,
    reads: Sequence[str] = (),
) -> None:
    """Write ``model`` as a Hugging Face GPT-2 directory that ``GPT2LMHeadModel`` loads.

    Writes ``config.json`` and ``model.safetensors`` (the model's dtype, names as
    ``GPT2LMHeadModel.save_pretrained`` writes them, no ``lm_head.weight``: it is tied),
    and ``tokenizer.json`` when ``tokenizer_json`` is given, with a ``tokenizer_config.json``
    that names ``PreTrainedTokenizerFast``: ``AutoTokenizer.from_pretrained`` then runs
    that file as it is, where GPT-2's tokenizer class would put its own byte-level steps
    in front of it (and drop the spaces of a character vocabulary). A model without biases
    (``bias=False``) is written with zero biases, which computes the same function.

    The directory is written as a whole (:func:`resgrad.formats.atomic.staged_dir`): the
    files go to a temporary sibling, are fsynced, and one rename makes it ``out_dir``, so
    a kill at any moment leaves the old model or the new one, never new weights beside an
    old config; a killed export's temporaries are removed by the next export.

    Raises
    ------
    ValueError
        A scheme other than pre-ln: GPT-2's config cannot express it; an ``out_dir`` that
        already holds a model, unless ``force``; one holding files that are not a model's;
        one that is, or holds, a path in ``reads`` (the checkpoint it was read from).
    """
    from safetensors.numpy import save

    cfg = model.cfg
    if cfg.variant == "ln-scaling":  # pre-ln's skeleton: say what GPT-2 lacks
        raise ValueError(
            f"cannot export variant {cfg.variant!r} as GPT-2: transformers' GPT-2 and nanoGPT "
            "have no model whose LayerNorm outputs are scaled by 1/l^p"
        )
    if cfg.variant != "pre-ln":
        raise ValueError(
            f"cannot export variant {cfg.variant!r} as GPT-2: GPT-2 is pre-ln, and its "
            "config cannot express another residual scheme"
        )
    if not EPS_MIN <= cfg.ln_eps <= EPS_MAX:  # what load_hf reads back, and no other
        raise ValueError(
            f"cannot export ln_eps {cfg.ln_eps!r} as GPT-2: its layer_norm_epsilon is read "
            f"from {EPS_MIN:.6g} to {EPS_MAX:g}"
        )
    model.check_params()
    tensors = {}
    for ours, (theirs, _) in _names(cfg.n_layer).items():
        a = model.params.get(ours)
        if a is None:  # bias=False: a zero bias is the same function
            C = cfg.n_embd
            n = {"b_qkv": 3 * C, "b_fc": 4 * C}.get(ours.rsplit(".", 1)[-1], C)
            a = np.zeros(n, model.dtype)  # (n,)
        tensors[f"transformer.{theirs}"] = np.ascontiguousarray(a)
    files = {
        WEIGHTS: save(tensors, metadata={"format": "pt"}),
        CONFIG: (json.dumps(hf_config(cfg), indent=2) + "\n").encode(),
    }
    if tokenizer_json is not None:
        files["tokenizer.json"] = tokenizer_json.encode()
        files["tokenizer_config.json"] = json.dumps(TOKENIZER_CONFIG).encode()
    d = os.fspath(out_dir)
    replace = _check_export_dir(d, force, reads)
    with staged_dir(d, replace=replace) as stage:  # fsynced, then one rename
        for name, data in files.items():
            with open(os.path.join(stage, name), "wb") as f:
                f.write(data)


# --------------------------------------------------------------------------- hub names


def is_hub_name(name: str) -> bool:
    """Whether ``name`` reads as a hub model (``gpt2``, ``owner/name``) rather than a path.

    Hub owners and names start with a letter, digit or underscore, so ``./model`` and
    ``../runs/x`` are paths (a missing one is said to be missing, not fetched).
    """
    if os.path.exists(name):
        return False
    return name in HUB_MODELS or bool(re.fullmatch(r"\w[\w.-]*/\w[\w.-]*", name))


def resolve_pretrained(name_or_dir: str | os.PathLike) -> str:
    """A local directory for ``name_or_dir``: itself, or a hub snapshot in the usual cache.

    Hub names (``gpt2``, ``gpt2-medium``, ``gpt2-large``, ``gpt2-xl``, ``owner/name``)
    go through ``huggingface_hub.snapshot_download`` (config, safetensors weights
    and tokenizer files only).

    Raises
    ------
    ValueError
        A path that does not exist, or a hub name that cannot be fetched (offline,
        unknown): one line naming the model and saying to pass a local directory.
    """
    name = os.fspath(name_or_dir)
    if os.path.isdir(name):
        return name
    if os.path.exists(name):
        raise ValueError(
            f"{name!r} is a file, not a model: expected a Hugging Face GPT-2 directory, a "
            "nanoGPT ckpt.pt or a hub name (a resgrad run's checkpoint: `resgrad export` it, "
            "or sample it with --out-dir)"
        )
    if not is_hub_name(name):
        raise ValueError(
            f"{name!r} does not exist and is not a hub model name (gpt2, owner/name); expected "
            "a model directory or a nanoGPT ckpt.pt"
        )
    from huggingface_hub import snapshot_download

    patterns = [CONFIG, WEIGHTS, INDEX, "model-*.safetensors", "tokenizer.json", "vocab.json",
                "merges.txt"]  # fmt: skip
    repo = f"openai-community/{name}" if name in HUB_MODELS else name
    try:
        return snapshot_download(repo, allow_patterns=patterns)
    except Exception as e:  # offline, unknown repo, gated, ...: all end the same way
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(
            f"cannot fetch {name!r} from the Hugging Face hub ({type(e).__name__}: {why}); "
            "without network, pass a local model directory instead"
        ) from None
