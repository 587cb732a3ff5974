"""The residual connection: ``out = x + sublayer(x)``, backward ``dx = dout + df``.

Legend: B = batch, T = time, C = channels. A residual works for any leading
dimensions, so (B, C) and (B, T, C) activations are both fine; the only demand
is that the sublayer keeps the shape of its input.

This is the lowest module of resgrad: it imports nothing from the package.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import numpy as np

__all__ = ["Module", "Residual", "ResidualCache", "residual", "residual_backward"]


def _check_same_shape(a: np.ndarray, b: np.ndarray, a_name: str, b_name: str) -> None:
    if np.shape(a) != np.shape(b):
        raise ValueError(
            f"{a_name} has shape {np.shape(a)} but {b_name} has shape {np.shape(b)}: "
            "a residual sublayer must map (B, T, C) to (B, T, C)"
        )


def residual(x: np.ndarray, sublayer: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Forward of the residual connection, ``x + sublayer(x)``.

    Parameters
    ----------
    x : ndarray, shape (..., C)
        The block input, e.g. (B, T, C).
    sublayer : callable
        Maps an array of x's shape to an array of the same shape.

    Returns
    -------
    out : ndarray, same shape as x

    Raises
    ------
    ValueError
        If ``sublayer(x)`` does not have x's shape.
    """
    f = sublayer(x)  # (..., C)
    _check_same_shape(x, f, "x", "sublayer(x)")
    return x + f  # (..., C): the + x path


def residual_backward(dout: np.ndarray, df: np.ndarray) -> np.ndarray:
    """Backward of ``out = x + f(x)``: ``dx = dout + df``.

    Parameters
    ----------
    dout : ndarray, shape (..., C)
        Gradient of the loss with respect to the block output.
    df : ndarray, shape (..., C)
        Gradient sent back through the sublayer f to its input x.

    Returns
    -------
    dx : ndarray, shape (..., C)
        The + x path has local derivative exactly 1, so dout arrives unchanged
        and the sublayer's gradient is added on top.
    """
    _check_same_shape(dout, df, "dout", "df")
    return dout + df  # fan-out: x fed both the identity path and f


class Module(Protocol):
    """What a sublayer object provides, so that ``Residual`` can wrap it.

    ``params`` is a flat dict of named arrays; ``backward`` returns the input
    gradient and a dict of parameter gradients under the same names.
    """

    params: dict[str, np.ndarray]

    def forward(self, x: np.ndarray) -> tuple[np.ndarray, Any]: ...

    def backward(
        self, dout: np.ndarray, cache: Any
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]: ...


class ResidualCache(NamedTuple):
    sub: Any  # the sublayer's own cache


class Residual:
    """``out = x + sublayer(x)`` around any :class:`Module`.

    The wrapper has no parameters of its own; ``params`` is the sublayer's dict,
    so optimizers and checkers see the same names and the same arrays.
    """

    def __init__(self, sublayer: Module):
        for attr in ("forward", "backward", "params"):
            if not hasattr(sublayer, attr):
                raise TypeError(
                    f"Residual needs a sublayer with forward, backward and params; "
                    f"{type(sublayer).__name__} has no {attr!r}"
                )
        self.sublayer = sublayer

    @property
    def params(self) -> dict[str, np.ndarray]:
        return self.sublayer.params

    def forward(self, x: np.ndarray) -> tuple[np.ndarray, ResidualCache]:
        """x (..., C) -> out (..., C)."""
        f, sub_cache = self.sublayer.forward(x)  # (..., C)
        _check_same_shape(x, f, "x", "sublayer(x)")
        out = x + f  # (..., C): 1) out = x + f(x)
        return out, ResidualCache(sub_cache)

    def backward(
        self, dout: np.ndarray, cache: ResidualCache
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """dout (..., C) -> (dx (..., C), parameter gradients)."""
        # 1) out = x + f(x)  ->  dx = dout (identity path) + df (through f)
        df, grads = self.sublayer.backward(dout, cache.sub)  # (..., C)
        dx = residual_backward(dout, df)  # (..., C)
        return dx, grads
