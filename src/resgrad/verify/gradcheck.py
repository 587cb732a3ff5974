"""Finite-difference gradient checks in float64.

The check is the lesson's: central differences with step ``eps`` and the
relative error ``|a - n| / (|a| + |n| + tiny)`` between the analytic gradient
``a`` and the numerical one ``n``.

A function of several named arrays (inputs and parameters alike) is checked in
its vector-Jacobian form: for an array-valued output the scalar under test is
``loss = sum(out * dout)`` for a fixed upstream gradient ``dout`` (ones when
not given, as in the lesson), so the analytic gradients to supply are those
that the backward pass returns for that ``dout``.

Three modes:

- ``full``: every entry of every argument (two forward calls per entry);
- ``sparse``: ``k`` seeded random entries per argument, for big tensors;
- ``directional``: ``directions`` seeded random unit directions per argument,
  one pair of forward calls per direction; compares the numerical directional
  derivative with ``sum(grad * u)``. Cheap enough for whole models.

Arrays are perturbed in place and every entry is restored afterwards, so the
function under test may read its parameters from a dict it closes over.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

__all__ = ["ArgReport", "GradCheckReport", "check_gradients", "relative_error"]

MODES = ("full", "sparse", "directional")
TINY = 1e-12  # the lesson's guard against 0/0


def relative_error(a: np.ndarray, n: np.ndarray, tiny: float = TINY) -> np.ndarray:
    """Elementwise ``|a - n| / (|a| + |n| + tiny)``, the lesson's error."""
    return np.abs(a - n) / (np.abs(a) + np.abs(n) + tiny)


@dataclass(frozen=True)
class ArgReport:
    """The check of one argument.

    ``index`` is the entry (full and sparse modes) or the direction number
    (directional mode) where ``max_error`` occurred; ``analytic`` and
    ``numeric`` are the two values compared there.
    """

    name: str
    max_error: float
    index: tuple[int, ...] | int
    analytic: float
    numeric: float
    n_checked: int


@dataclass(frozen=True)
class GradCheckReport:
    """Result of :func:`check_gradients`. Nothing is printed; read the fields."""

    mode: str
    eps: float
    args: dict[str, ArgReport] = field(default_factory=dict)

    @property
    def max_error(self) -> float:
        """The largest relative error over all arguments."""
        return max((r.max_error for r in self.args.values()), default=0.0)

    @property
    def worst(self) -> ArgReport | None:
        """The argument report holding the largest error."""
        if not self.args:
            return None
        return max(self.args.values(), key=lambda r: r.max_error)

    @property
    def per_arg(self) -> dict[str, float]:
        """Max relative error of each argument, by name."""
        return {name: r.max_error for name, r in self.args.items()}

    def passed(self, tol: float = 1e-4) -> bool:
        """True when every error is at most ``tol`` (the lesson's bar is 1e-4)."""
        return bool(self.max_error <= tol)

    def summary(self) -> str:
        """One line: the max error, where it occurred and the two values there."""
        w = self.worst
        if w is None:
            return f"{self.mode} check: nothing checked"
        where = f"direction {w.index}" if self.mode == "directional" else f"index {w.index}"
        return (
            f"{self.mode} check: max relative error {self.max_error:.2e} "
            f"in {w.name!r} at {where} (analytic {w.analytic:.6e}, numeric {w.numeric:.6e})"
        )


def _as_named(args: Mapping[str, np.ndarray] | list | tuple) -> dict[str, np.ndarray]:
    if isinstance(args, Mapping):
        return dict(args)
    return {str(i): a for i, a in enumerate(args)}


def _require_float64(name: str, a: object, what: str) -> None:
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{what} {name!r} must be a numpy array, got {type(a).__name__}")
    if a.dtype != np.float64:
        raise TypeError(
            f"{what} {name!r} has dtype {a.dtype}; gradient checks need float64 "
            f"(a central difference at eps=1e-6 is meaningless in single or half precision)"
        )


def check_gradients(
    fn: Callable[..., np.ndarray | float],
    args: Mapping[str, np.ndarray] | list | tuple,
    grads: Mapping[str, np.ndarray] | list | tuple,
    *,
    dout: np.ndarray | None = None,
    mode: str = "full",
    eps: float = 1e-6,
    k: int = 20,
    directions: int = 8,
    seed: int = 0,
) -> GradCheckReport:
    """Check analytic gradients of ``fn`` against central finite differences.

    Parameters
    ----------
    fn : callable
        Called as ``fn(**args)`` when ``args`` is a dict, else ``fn(*args)``;
        returns a float64 array or scalar. It must read the arrays it is given
        (they are perturbed in place).
    args : dict of str to ndarray, or sequence of ndarray
        The float64 arrays to differentiate with respect to.
    grads : same structure as ``args``
        The analytic gradients of ``loss = sum(fn(...) * dout)``, each of its
        argument's shape. Only arguments present in ``grads`` are checked.
    dout : ndarray, optional
        Upstream gradient of fn's output; ones of the output's shape by default.
    mode : {"full", "sparse", "directional"}
    eps : float
        Finite-difference step (the lesson uses 1e-6).
    k : int
        Entries per argument in sparse mode.
    directions : int
        Random unit directions per argument in directional mode.
    seed : int
        Seeds the entries or directions drawn in sparse and directional modes.

    Returns
    -------
    GradCheckReport

    Raises
    ------
    TypeError
        If an argument, gradient or output is not float64.
    ValueError
        If a mode, size or shape is invalid.
    """
    if mode not in MODES:
        raise ValueError(f"unknown gradcheck mode {mode!r}; expected one of {', '.join(MODES)}")
    if not (np.isfinite(eps) and eps > 0):
        raise ValueError(f"eps must be a positive finite number, got {eps!r}")
    if mode == "sparse" and k < 1:
        raise ValueError(f"k must be at least 1 in sparse mode, got {k}")
    if mode == "directional" and directions < 1:
        raise ValueError(f"directions must be at least 1 in directional mode, got {directions}")

    as_kwargs = isinstance(args, Mapping)
    named = _as_named(args)
    named_grads = _as_named(grads)
    for name, a in named.items():
        _require_float64(name, a, "argument")
    for name, g in named_grads.items():
        if name not in named:
            raise ValueError(
                f"gradient {name!r} has no matching argument; arguments: {list(named)}"
            )
        _require_float64(name, g, "gradient")
        if g.shape != named[name].shape:
            raise ValueError(
                f"gradient {name!r} has shape {g.shape} but its argument has shape "
                f"{named[name].shape}"
            )

    def call() -> np.ndarray:
        return np.asarray(fn(**named) if as_kwargs else fn(*named.values()))

    out0 = call()
    _require_float64("output", out0, "function")
    if dout is None:
        dout = np.ones_like(out0)
    else:
        _require_float64("dout", dout, "upstream gradient")
        if dout.shape != out0.shape:
            raise ValueError(f"dout has shape {dout.shape} but the output has shape {out0.shape}")

    def loss() -> float:
        return float(np.sum(call() * dout))  # the vector-Jacobian form

    rng = np.random.default_rng(seed)
    reports = {}
    for name, g in named_grads.items():
        a = named[name]
        if mode == "directional":
            reports[name] = _check_directional(name, a, g, loss, eps, directions, rng)
        else:
            if mode == "full":
                flat_idx = np.arange(a.size)
            else:
                flat_idx = rng.choice(a.size, size=min(k, a.size), replace=False)
            reports[name] = _check_entries(name, a, g, loss, eps, flat_idx)
    return GradCheckReport(mode=mode, eps=eps, args=reports)


def _check_entries(name, a, g, loss, eps, flat_idx) -> ArgReport:
    """Central difference on each listed entry of ``a``, restoring it after."""
    num = np.empty(len(flat_idx))
    for j, fi in enumerate(flat_idx):
        idx = np.unravel_index(fi, a.shape)
        orig = a[idx]
        a[idx] = orig + eps
        lp = loss()
        a[idx] = orig - eps
        lm = loss()
        a[idx] = orig  # restore exactly
        num[j] = (lp - lm) / (2 * eps)
    ana = g.reshape(-1)[flat_idx]
    rel = relative_error(ana, num)
    j = int(np.argmax(rel)) if rel.size else 0
    idx = tuple(int(i) for i in np.unravel_index(flat_idx[j], a.shape)) if rel.size else ()
    return ArgReport(
        name=name,
        max_error=float(rel[j]) if rel.size else 0.0,
        index=idx,
        analytic=float(ana[j]) if rel.size else 0.0,
        numeric=float(num[j]) if rel.size else 0.0,
        n_checked=int(rel.size),
    )


def _check_directional(name, a, g, loss, eps, directions, rng) -> ArgReport:
    """Directional derivatives along random unit vectors u: n = dL/du, a = <g, u>."""
    orig = a.copy()
    ana = np.empty(directions)
    num = np.empty(directions)
    for d in range(directions):
        u = rng.standard_normal(a.shape)
        u /= np.linalg.norm(u) or 1.0
        a[...] = orig + eps * u
        lp = loss()
        a[...] = orig - eps * u
        lm = loss()
        num[d] = (lp - lm) / (2 * eps)
        ana[d] = float(np.sum(g * u))
    a[...] = orig  # restore every entry
    rel = relative_error(ana, num)
    j = int(np.argmax(rel))
    return ArgReport(
        name=name,
        max_error=float(rel[j]),
        index=j,
        analytic=float(ana[j]),
        numeric=float(num[j]),
        n_checked=directions,
    )
