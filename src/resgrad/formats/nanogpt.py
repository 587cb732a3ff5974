"""nanoGPT's ``ckpt.pt`` and ``meta.pkl`` in: the one place the library may import torch.

A ``.pt`` file is a pickle, and unpickling can run any code the file names. It is
read with ``torch.load(..., weights_only=True)``, PyTorch's restricted unpickler:
tensors, plain containers and numbers only; a file that needs anything else is
refused with a clear error and nothing in it runs (tests/formats/test_nanogpt.py
feeds one whose pickle would call ``os.system``). PyTorch comes with the optional
extra ``pip install "resgrad[torch]"`` and is imported only inside
:func:`read_nanogpt_ckpt`.

What nanoGPT's ``train.py`` saves: ``{"model": state_dict, "optimizer": ...,
"model_args": {n_layer, n_head, n_embd, block_size, bias, vocab_size, dropout},
"iter_num", "best_val_loss", "config"}``; the state dict's names and layouts are
mapped by :data:`resgrad.formats.hf.HF_NAMES` (keys of a ``torch.compile``-d model
carry ``_orig_mod.``; nn.Linear weights are (out, in) and are transposed). Its MLP's
``nn.GELU()`` is the exact erf form: the model loads with ``activation="gelu-erf"``.

A character-level dataset's vocabulary is ``data/<dataset>/meta.pkl``, a plain pickle
of ``{"vocab_size", "itos", "stoi"}``: :func:`read_meta_pkl` reads it with an unpickler
that refuses every global by name (nothing in the file runs) and keeps only dicts, lists,
strings and ints; :func:`meta_vocabulary` checks it and returns its characters.
"""

from __future__ import annotations

import io
import os
import pickle
import re
from typing import Any, NamedTuple

import numpy as np

from resgrad.formats.hf import gpt_from_state, nanogpt_config
from resgrad.nn.model import GPT

__all__ = ["NanoGPTCheckpoint", "load_nanogpt_ckpt", "meta_vocabulary", "read_meta_pkl",
           "read_nanogpt_ckpt"]  # fmt: skip


class NanoGPTCheckpoint(NamedTuple):
    model: GPT  # the weights, as a resgrad GPT (activation "gelu-erf", nanoGPT's nn.GELU())
    config: dict[str, Any]  # train.py's settings (``dataset``, ...); {} in older files


def read_nanogpt_ckpt(path: str | os.PathLike, dtype: Any = np.float32) -> NanoGPTCheckpoint:
    """Read a nanoGPT ``ckpt.pt``: the model, and the training settings saved with it.

    Parameters
    ----------
    path : str or PathLike
    dtype : np.float32 or np.float64

    Raises
    ------
    ValueError
        PyTorch missing (install ``resgrad[torch]``); a pickle that names a global (a
        class, a function: refused by that name, torch's advice to load it with
        ``weights_only=False`` never relayed); a truncated or damaged file (named, with
        torch's reason); a file that is not nanoGPT's (a field of the wrong kind named);
        ``model_args`` nanoGPT's GPTConfig would not take
        (:func:`resgrad.formats.hf.nanogpt_config`, checked before any tensor is
        converted); or weights that do not fit them.
    FileNotFoundError, PermissionError, IsADirectoryError
        As for any file.
    """
    name = os.fspath(path)
    try:
        import torch  # the optional extra resgrad[torch]: this path only
    except ImportError:
        raise ValueError(
            f'reading {name!r} (a PyTorch .pt) needs PyTorch: pip install "resgrad[torch]"'
        ) from None
    try:
        ckpt = torch.load(name, map_location="cpu", weights_only=True)
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise  # said as any file's: missing, unreadable
    except Exception as e:  # UnpicklingError for a forbidden global, others for damage
        raise _load_error(name, e) from None
    if not isinstance(ckpt, dict) or "model" not in ckpt or "model_args" not in ckpt:
        keys = sorted(map(str, ckpt))[:5] if isinstance(ckpt, dict) else type(ckpt).__name__
        raise ValueError(
            f"{name!r} is not a nanoGPT checkpoint: expected keys 'model' and 'model_args', "
            f"got {keys}"
        )
    for field in ("model", "model_args"):  # train.py saves a state dict and a dict of sizes
        if not isinstance(ckpt[field], dict):
            raise ValueError(
                f"{name!r}: field {field!r} is a {type(ckpt[field]).__name__}; expected a dict "
                f"({'the state dict' if field == 'model' else 'n_layer, n_head, ...'}) as "
                "nanoGPT's train.py saves it"
            )
    config = ckpt.get("config", {})
    if not isinstance(config, dict):
        raise ValueError(
            f"{name!r}: field 'config' is a {type(config).__name__}; expected a dict of "
            "train.py's settings"
        )
    cfg = nanogpt_config(ckpt["model_args"], where=name)  # before any tensor is converted
    want = torch.float64 if np.dtype(dtype) == np.float64 else torch.float32
    state = {}
    for k, v in ckpt["model"].items():
        if type(k) is not str:
            raise ValueError(f"{name!r}: state dict key {k!r} is a {type(k).__name__}; "
                             "expected parameter names (strings)")  # fmt: skip
        if not isinstance(v, torch.Tensor):
            raise ValueError(f"{name!r}: state dict entry {k!r} is not a tensor")
        if not v.is_floating_point():  # cast, an int8 weight would be all zeros: refuse it
            raise ValueError(
                f"{name!r}: tensor {k!r} has dtype {v.dtype}; expected floating-point weights "
                "(float16, bfloat16, float32, float64)"
            )
        state[k] = v.detach().to("cpu", want).numpy()
    model = gpt_from_state(cfg, state, nanogpt=True, dtype=dtype, where=name)
    return NanoGPTCheckpoint(model, config)


# what torch's weights-only message says beyond the reason: advice to load the file with
# weights_only=False (which runs its code) or to allowlist its globals; never relayed
_ADVICE = ("weights_only", "safe_globals", "trusted source", "Please file an issue",
           "Check the documentation")  # fmt: skip


def _load_error(name: str, e: Exception) -> ValueError:
    """torch.load's failure on ``name`` in one line: a pickle naming a global (a class, a
    function such as os.system) is refused by that name; anything else is a damaged file,
    said with torch's first line of reason (its advice dropped, see _ADVICE)."""
    text = str(e)
    glob = re.search(r"GLOBAL ([\w.]+)", text)
    if glob:
        return ValueError(
            f"refused to load {name!r}: it holds objects a safe load refuses (it names the "
            f"global {glob.group(1)}); resgrad loads a .pt only with torch.load(weights_only="
            "True), tensors and plain containers, and nothing in it was run"
        )
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    why = next((ln for ln in lines if not any(a in ln for a in _ADVICE)), type(e).__name__)
    why = why.split(". ")[0].rstrip(".")  # miniz's first sentence, without its explanation
    return ValueError(
        f"{name!r} is not a readable PyTorch checkpoint (truncated or damaged: {why}); nothing "
        "in it was run"
    )


def load_nanogpt_ckpt(path: str | os.PathLike, dtype: Any = np.float32) -> GPT:
    """Load a nanoGPT ``ckpt.pt`` into a resgrad GPT, never executing code from the file.

    As :func:`read_nanogpt_ckpt`, the model alone.
    """
    return read_nanogpt_ckpt(path, dtype).model


# --------------------------------------------------------------------------- meta.pkl


class _Refused(pickle.UnpicklingError):
    """What the pickle asked for and was not given."""


class _PlainUnpickler(pickle.Unpickler):
    """Builds plain containers only: every global (a class, a function such as os.system)
    is refused by name before it is looked up, so nothing a pickle names is ever called."""

    def find_class(self, module: str, name: str) -> Any:
        raise _Refused(f"it names the global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("it refers to a persistent object")


_PLAIN = (dict, list, str, int)  # what a meta.pkl may hold (type(x) is exact: no bool)


def read_meta_pkl(path: str | os.PathLike) -> dict[str, Any]:
    """nanoGPT's ``meta.pkl`` (``{"vocab_size", "itos", "stoi"}``, written by its character
    datasets' ``prepare.py``), read without running anything in it.

    The pickle is read by an unpickler that refuses every global, so only dicts, lists,
    strings, numbers and the like can be built; the result must then hold nothing but
    dicts, lists, strings and ints.

    Raises
    ------
    ValueError
        A pickle naming any global (refused by name, nothing run), a damaged pickle, or
        one holding anything but dicts, lists, strings and ints.
    OSError
        If the file cannot be read.
    """
    name = os.fspath(path)
    with open(name, "rb") as f:
        raw = f.read()
    try:
        obj = _PlainUnpickler(io.BytesIO(raw)).load()
    except _Refused as e:
        raise ValueError(
            f"refused to load {name!r}: {e}; a meta.pkl holds only dicts, lists, strings and "
            "ints (nothing in it was run)"
        ) from None
    except Exception as e:  # EOFError, ValueError, ... for a damaged or foreign file
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{name!r} is not a readable meta.pkl (a pickle): {why}") from None
    stack = [obj]  # walked with a stack: a deeply nested pickle cannot exhaust recursion
    while stack:
        x = stack.pop()
        if type(x) not in _PLAIN:
            raise ValueError(
                f"refused {name!r}: it holds a {type(x).__name__}; a meta.pkl holds only dicts, "
                "lists, strings and ints"
            )
        if type(x) is dict:
            stack.extend(x.keys())
            stack.extend(x.values())
        elif type(x) is list:
            stack.extend(x)
    if type(obj) is not dict:
        raise ValueError(f"{name!r} holds a {type(obj).__name__}; expected nanoGPT's meta dict "
                         "with 'itos' and 'stoi'")  # fmt: skip
    return obj


def meta_vocabulary(meta: dict[str, Any], where: str = "meta.pkl") -> str:
    """The characters of a :func:`read_meta_pkl` dict, token ``i`` first at ``i``: nanoGPT's
    ``itos`` (id -> character), checked against its ``stoi`` (character -> id) and
    ``vocab_size`` where given.

    nanoGPT's ``sample.py`` reads both ``stoi`` (to encode) and ``itos`` (to decode), so both
    must be there: ``itos`` a dict of the int ids 0..n-1 (exactly ``int``: not ``True``,
    not ``1.0``) to distinct single characters, ``stoi`` a dict of str -> int that is its
    inverse, a bijection; ``vocab_size``, where given, the int n.

    Raises
    ------
    ValueError
        No ``itos`` or ``stoi``, either not a dict, ids other than the ints 0..n-1, a
        token that is not one character, two ids for one character, ``stoi`` not the
        inverse of ``itos``, or ``vocab_size`` not the number of tokens.
    """
    want = "expected nanoGPT's meta with 'itos' (id -> character) and 'stoi' (character -> id)"
    for key in ("itos", "stoi"):
        table = meta.get(key)
        if type(table) is not dict or not table:
            got = f"no {key!r}" if table is None else f"{key!r} as a {type(table).__name__}"
            got = f"{key!r} empty" if type(table) is dict else got
            raise ValueError(f"{where}: {got}; {want}")
    itos, stoi = meta["itos"], meta["stoi"]
    n = len(itos)
    bad = [k for k in itos if type(k) is not int or not 0 <= k < n]  # then: 0..n-1, each once
    if bad:
        raise ValueError(f"{where}: itos has the key {bad[0]!r}; expected the ids 0..{n - 1}")
    chars = [itos[i] for i in range(n)]
    for i, c in enumerate(chars):
        if type(c) is not str or len(c) != 1:
            raise ValueError(f"{where}: itos[{i}] is {c!r}; expected one character (resgrad "
                             "reads character-level vocabularies)")  # fmt: skip
    if len(set(chars)) != n:
        c = next(c for c in chars if chars.count(c) > 1)
        raise ValueError(f"{where}: itos gives the character {c!r} to two ids")
    odd = [(c, i) for c, i in stoi.items() if type(c) is not str or type(i) is not int]
    if odd:
        raise ValueError(f"{where}: stoi maps {odd[0][0]!r} to {odd[0][1]!r}; expected "
                         "characters (str) to ids (int)")  # fmt: skip
    if stoi != {c: i for i, c in enumerate(chars)}:
        inverse = {c: i for i, c in enumerate(chars)}
        c = next((c for c in stoi if inverse.get(c) != stoi[c]), None)  # a wrong id
        c = next(c for c in chars if c not in stoi) if c is None else c  # else a missing one
        raise ValueError(f"{where}: stoi is not the inverse of itos (at {c!r}); expected "
                         "stoi[itos[i]] == i for every id")  # fmt: skip
    size = meta.get("vocab_size")
    if size is not None and (type(size) is not int or size != n):
        raise ValueError(f"{where}: vocab_size is {size!r} but itos holds {n} characters")
    return "".join(chars)
