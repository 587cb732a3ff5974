"""nanoGPT's ``ckpt.pt`` in: the one place the library may import torch.

A ``.pt`` file is a pickle, and unpickling can run any code the file names. It is
read with ``torch.load(..., weights_only=True)``, PyTorch's restricted unpickler:
tensors, plain containers and numbers only; a file that needs anything else is
refused with a clear error and nothing in it runs (tests/formats/test_nanogpt.py
feeds one whose pickle would call ``os.system``). PyTorch comes with the optional
extra ``pip install "resgrad[torch]"`` and is imported only inside
:func:`load_nanogpt_ckpt`.

What nanoGPT's ``train.py`` saves: ``{"model": state_dict, "optimizer": ...,
"model_args": {n_layer, n_head, n_embd, block_size, bias, vocab_size, dropout},
"iter_num", "best_val_loss", "config"}``; the state dict's names and layouts are
mapped by :data:`resgrad.formats.hf.HF_NAMES` (keys of a ``torch.compile``-d model
carry ``_orig_mod.``; nn.Linear weights are (out, in) and are transposed).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from resgrad.formats.hf import nanogpt_state_to_params
from resgrad.nn.model import GPT

__all__ = ["load_nanogpt_ckpt"]


def load_nanogpt_ckpt(path: str | os.PathLike, dtype: Any = np.float32) -> GPT:
    """Load a nanoGPT ``ckpt.pt`` into a resgrad GPT, never executing code from the file.

    Parameters
    ----------
    path : str or PathLike
    dtype : np.float32 or np.float64

    Raises
    ------
    ValueError
        PyTorch missing (install ``resgrad[torch]``), a pickle that needs more than
        tensors and plain containers, a file that is not nanoGPT's, or weights that do
        not fit ``model_args``.
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
    except FileNotFoundError:
        raise
    except Exception as e:  # UnpicklingError for a forbidden global, others for garbage
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"refused to load {name!r}: it is not a plain PyTorch checkpoint of tensors and "
            f"containers (loaded with weights_only=True, nothing in it was run): {why}"
        ) from None
    if not isinstance(ckpt, dict) or "model" not in ckpt or "model_args" not in ckpt:
        keys = sorted(ckpt)[:5] if isinstance(ckpt, dict) else type(ckpt).__name__
        raise ValueError(
            f"{name!r} is not a nanoGPT checkpoint: expected keys 'model' and 'model_args', "
            f"got {keys}"
        )
    want = torch.float64 if np.dtype(dtype) == np.float64 else torch.float32
    state = {}
    for k, v in ckpt["model"].items():
        if not isinstance(v, torch.Tensor):
            raise ValueError(f"{name!r}: state dict entry {k!r} is not a tensor")
        state[k] = v.detach().to("cpu", want).numpy()
    return nanogpt_state_to_params(ckpt["model_args"], state, dtype=dtype, where=name)
