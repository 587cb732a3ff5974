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
  function) is resgrad's tanh GELU; anything else is refused by name;
- LayerNorm's epsilon is ``layer_norm_epsilon`` (resgrad's ``GPTConfig.ln_eps``);
- ``lm_head.weight`` is tied to ``wte``: not stored by ``save_pretrained``; where a
  file holds it (nanoGPT, some hub copies) it must equal ``wte``;
- the causal-mask buffers ``h.{i}.attn.bias`` and ``h.{i}.attn.masked_bias`` of
  old checkpoints are not parameters and are ignored.

The one mapping table, resgrad name -> the name a transformers or nanoGPT user
looks for (``{i}`` is the block index; HF names are ``GPT2Model``'s, which
``GPT2LMHeadModel`` prefixes with ``transformer.``, and nanoGPT's are the same
with that prefix; "T" marks nanoGPT's (out, in) weights, transposed on the way in):
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from resgrad.formats.atomic import atomic_write_bytes, atomic_write_text, make_dir
from resgrad.nn.model import GPT, GPTConfig

__all__ = [
    "HF_NAMES",
    "export_hf",
    "gpt_from_state",
    "hf_config",
    "is_hub_name",
    "load_hf",
    "nanogpt_state_to_params",
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
_ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh")  # GPT-2's tanh GELU, resgrad's gelu
HUB_MODELS = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")  # openai-community/<name>
CONFIG, WEIGHTS, INDEX = "config.json", "model.safetensors", "model.safetensors.index.json"
TOKENIZER_CONFIG = {"tokenizer_class": "PreTrainedTokenizerFast"}  # run tokenizer.json as it is

__doc__ += "\n".join(
    f"    {ours:<24} {theirs:<26} {'T' if t else ''}" for ours, (theirs, t) in HF_NAMES.items()
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


def _get(cfg: Mapping[str, Any], where: str, *keys: str, default: Any = None) -> Any:
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    if default is not None:
        return default
    raise ValueError(f"{where}: config.json has no {keys[0]!r}")


def gpt_config_from_hf(cfg: Mapping[str, Any], where: str = "config.json") -> GPTConfig:
    """resgrad's :class:`GPTConfig` for a Hugging Face GPT-2 ``config.json`` (as a dict).

    Raises
    ------
    ValueError
        ``model_type`` other than gpt2, or a setting resgrad does not implement, named.
    """
    mt = cfg.get("model_type")
    if mt != "gpt2":
        raise ValueError(f"{where}: model_type is {mt!r}; resgrad loads only 'gpt2' models")
    act = cfg.get("activation_function", "gelu_new")
    if act not in _ACTIVATIONS:
        raise ValueError(
            f"{where}: activation_function {act!r} is not implemented in resgrad; "
            f"expected one of {', '.join(_ACTIVATIONS)} (GPT-2's tanh GELU)"
        )
    C = _get(cfg, where, "n_embd", "hidden_size")
    checks = [
        ("n_inner", cfg.get("n_inner") in (None, 4 * C), f"None or 4 * n_embd = {4 * C}"),
        ("scale_attn_weights", cfg.get("scale_attn_weights", True) is True, "true"),
        ("scale_attn_by_inverse_layer_idx", not cfg.get("scale_attn_by_inverse_layer_idx"),
         "false"),
        ("add_cross_attention", not cfg.get("add_cross_attention"), "false"),
        ("tie_word_embeddings", cfg.get("tie_word_embeddings", True) is True, "true"),
    ]  # fmt: skip
    for key, ok, want in checks:
        if not ok:
            raise ValueError(f"{where}: {key} is {cfg.get(key)!r}; resgrad's GPT-2 needs {want}")
    try:
        return GPTConfig(
            vocab_size=_get(cfg, where, "vocab_size"),
            block_size=_get(cfg, where, "n_positions", "n_ctx", "max_position_embeddings"),
            n_layer=_get(cfg, where, "n_layer", "num_hidden_layers"),
            n_head=_get(cfg, where, "n_head", "num_attention_heads"),
            n_embd=C,
            ln_eps=float(cfg.get("layer_norm_epsilon", 1e-5)),
        )
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


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
        "activation_function": "gelu_new",
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


def _bf16_to_float32(raw: bytes) -> np.ndarray:
    """bfloat16 is float32's upper 16 bits: widen each by 16 zero bits, exactly."""
    return (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)


def _read_safetensors(path: str) -> dict[str, np.ndarray]:
    """Every tensor of one file. bfloat16 ones (Hugging Face's half-precision checkpoints),
    which NumPy has no type for, are read as float32, exactly; another type NumPy lacks
    (float8, ...) is a one-line error naming it."""
    from safetensors import SafetensorError, deserialize, safe_open
    from safetensors.numpy import load_file

    try:
        with safe_open(path, framework="numpy") as f:
            dtypes = {f.get_slice(k).get_dtype() for k in f.keys()}
        if dtypes <= _ST_DTYPES.keys():  # all NumPy types: safetensors reads them itself
            return load_file(path)
        with open(path, "rb") as f:
            tensors = deserialize(f.read())  # [(name, {"dtype", "shape", "data": bytes})]
    except (SafetensorError, OSError, ValueError, TypeError) as e:
        raise _open_error(path, e) from None
    out = {}
    for name, t in tensors:
        if t["dtype"] == "BF16":
            a = _bf16_to_float32(t["data"])
        elif t["dtype"] in _ST_DTYPES:
            a = np.frombuffer(t["data"], dtype=_ST_DTYPES[t["dtype"]])
        else:
            raise ValueError(f"{path!r}: tensor {name!r} has dtype {t['dtype']}, which resgrad "
                             f"does not read (it reads BF16, {', '.join(_ST_DTYPES)})")  # fmt: skip
        out[name] = a.reshape(t["shape"])
    return out


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
        with open(index, encoding="utf-8") as f:
            try:
                shards = sorted(set(json.load(f)["weight_map"].values()))
            except (ValueError, KeyError, AttributeError) as e:
                raise ValueError(f"{index!r} is not a safetensors index: {e}") from None
        out: dict[str, np.ndarray] = {}
        for s in shards:
            out.update(_read_safetensors(os.path.join(d, s)))
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
        params[ours] = np.ascontiguousarray(a, dtype=dtype)
    model = GPT.from_params(cfg, params)  # no random init: GPT-2 124M loads in a second
    if head is not None and not np.array_equal(np.asarray(head), state["wte.weight"]):
        raise ValueError(
            f"{where}: {HEAD!r} differs from wte.weight; resgrad's LM head is tied to wte"
        )
    return model


def nanogpt_state_to_params(
    model_args: Mapping[str, Any],
    state: Mapping[str, np.ndarray],
    dtype: Any = np.float32,
    where: str = "nanoGPT checkpoint",
) -> GPT:
    """A resgrad GPT from nanoGPT's ``model_args`` and its state dict (as NumPy arrays).

    ``model_args`` holds n_layer, n_head, n_embd, block_size, vocab_size, bias and
    dropout, as nanoGPT's ``train.py`` saves them. nanoGPT's LayerNorm eps is 1e-5.
    """
    try:
        cfg = GPTConfig(
            vocab_size=int(model_args["vocab_size"]),
            block_size=int(model_args["block_size"]),
            n_layer=int(model_args["n_layer"]),
            n_head=int(model_args["n_head"]),
            n_embd=int(model_args["n_embd"]),
            bias=bool(model_args.get("bias", True)),
        )
    except KeyError as e:
        raise ValueError(f"{where}: model_args has no {e.args[0]!r}") from None
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: bad model_args: {e}") from None
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


def load_hf(path: str | os.PathLike, dtype: Any = np.float32) -> GPT:
    """Load a Hugging Face GPT-2 directory (``config.json`` + ``model.safetensors``).

    Parameters
    ----------
    path : str or PathLike
        A directory as ``save_pretrained`` writes it (or a hub snapshot).
    dtype : np.float32 or np.float64

    Returns
    -------
    GPT
        A pre-ln GPT with biases, dropout 0, ``ln_eps`` = ``layer_norm_epsilon``.

    Raises
    ------
    ValueError
        Every bad input, in one line: no config.json, a model_type other than gpt2, an
        unimplemented setting, no safetensors file, a truncated file, missing or extra
        tensors, a wrong shape.
    """
    d = os.fspath(path)
    cfg = gpt_config_from_hf(_read_config(d), where=os.path.join(d, CONFIG))
    tensors = read_hf_tensors(d)
    return gpt_from_state(cfg, tensors, dtype=dtype, where=d)


def export_hf(model: GPT, out_dir: str | os.PathLike, tokenizer_json: str | None = None) -> None:
    """Write ``model`` as a Hugging Face GPT-2 directory that ``GPT2LMHeadModel`` loads.

    Writes ``config.json`` and ``model.safetensors`` (the model's dtype, names as
    ``GPT2LMHeadModel.save_pretrained`` writes them, no ``lm_head.weight``: it is tied),
    and ``tokenizer.json`` when ``tokenizer_json`` is given, with a ``tokenizer_config.json``
    that names ``PreTrainedTokenizerFast``: ``AutoTokenizer.from_pretrained`` then runs
    that file as it is, where GPT-2's tokenizer class would put its own byte-level steps
    in front of it (and drop the spaces of a character vocabulary). A model without biases
    (``bias=False``) is written with zero biases, which computes the same function.
    Each file is written atomically; ``out_dir`` is created if missing.

    Raises
    ------
    ValueError
        A scheme other than pre-ln: GPT-2's config cannot express it.
    """
    from safetensors.numpy import save

    cfg = model.cfg
    if cfg.variant != "pre-ln":
        raise ValueError(
            f"cannot export variant {cfg.variant!r} as GPT-2: GPT-2 is pre-ln, and its "
            "config cannot express another residual scheme"
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
    d = os.fspath(out_dir)
    make_dir(d)
    atomic_write_bytes(os.path.join(d, WEIGHTS), save(tensors, metadata={"format": "pt"}))
    atomic_write_text(os.path.join(d, CONFIG), json.dumps(hf_config(cfg), indent=2) + "\n")
    if tokenizer_json is not None:
        atomic_write_text(os.path.join(d, "tokenizer.json"), tokenizer_json)
        atomic_write_text(os.path.join(d, "tokenizer_config.json"), json.dumps(TOKENIZER_CONFIG))


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
