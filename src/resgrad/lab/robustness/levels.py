"""Equal-loss levels: each model's series through training, read at losses every model reaches.

A model's measurements at its kept checkpoints (:class:`Trajectory`) are compared with
another's at the same validation loss, not the same iteration: :func:`common_range` is the
loss range every model's curve crosses, :func:`choose_levels` picks levels inside it,
:func:`check_levels` refuses others, and :func:`at_level` reads one model at one level by
linear interpolation between the two checkpoints that bracket it (:class:`Point`).

Legend: M = models, K = kept checkpoints of one model, N = levels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

__all__ = [
    "Kept",
    "ModelKey",
    "Point",
    "Trajectory",
    "at_level",
    "check_levels",
    "check_trajectory",
    "choose_levels",
    "common_range",
    "model_label",
]


# --------------------------------------------------------------------------- records


class ModelKey(NamedTuple):
    """Which model a trajectory is: what the study varies, and the training seed."""

    scheme: str  # GPTConfig.variant: pre-ln, post-ln, deepnorm, rezero, residual
    depth: int  # n_layer
    dose: float  # the within-scheme setting that shifts path length (0: none)
    seed: int  # the training seed: the unit the bootstrap resamples

    @property
    def label(self) -> str:
        """``"pre-ln L=6 dose=0 seed=1"``."""
        return f"{self.scheme} L={self.depth} dose={self.dose:g} seed={self.seed}"


def model_label(model) -> str:
    """What a message calls a model: a :class:`ModelKey` (or a 4-tuple of its fields) as
    ``"pre-ln L=6 dose=0 seed=1"``, anything else as ``str``."""
    if isinstance(model, tuple) and len(model) == 4:
        return ModelKey(*model).label
    return str(model)


class Trajectory(NamedTuple):
    """One model's series through training: its loss and metrics at each kept checkpoint.

    ``iterations`` (K,), ``loss`` (K,) the validation cross-entropy, each of ``metrics`` (K,)
    (path metrics: ``mean_k``, ...; lesion metrics: ``block_dce``, ...), ``paths`` (K,) each
    checkpoint's file, in training order. The loss need not fall monotonically.
    """

    model: ModelKey  # or a tuple (scheme, depth, dose, seed)
    iterations: np.ndarray  # (K,) int
    loss: np.ndarray  # (K,) float
    metrics: dict[str, np.ndarray]  # name -> (K,) float
    paths: tuple[str, ...]  # (K,) the checkpoints' files, for "rerun this point"

    @property
    def name(self) -> str:
        """What a message calls this model (:func:`model_label`)."""
        return model_label(self.model)


class Kept(NamedTuple):
    """One kept checkpoint, as measured (no interpolation)."""

    iteration: int
    path: str
    loss: float
    metrics: dict[str, float]


class Point(NamedTuple):
    """One model read at one loss level: every metric INTERPOLATED linearly in loss between
    the two consecutive checkpoints that bracket the level (``before``, ``after``), with
    ``weight`` w: value = (1 - w) * before + w * after; ``nearest`` is the one of the two
    whose loss lies closer to the level, as measured."""

    model: ModelKey
    level: float  # the loss at which the metrics are read
    iteration: float  # interpolated like the metrics
    metrics: dict[str, float]  # interpolated
    weight: float  # w in [0, 1]
    before: Kept
    after: Kept
    nearest: Kept

    def record(self) -> dict:
        """A flat dict: the model's fields, the level, each interpolated metric, the
        weight, then the bracketing and nearest checkpoints' iterations, paths and losses."""
        key = self.model
        four = isinstance(key, tuple) and len(key) == 4
        out = dict(ModelKey(*key)._asdict()) if four else {"model": str(key)}
        out |= {"level": self.level, "iteration": self.iteration}
        out |= {m: float(v) for m, v in self.metrics.items()}
        out["weight"] = self.weight
        for side in ("before", "after", "nearest"):
            kept = getattr(self, side)
            out |= {f"{side}_iteration": kept.iteration, f"{side}_path": kept.path,
                    f"{side}_loss": kept.loss}  # fmt: skip
        return out


# --------------------------------------------------------------------------- checks


def _num(x: float) -> str:
    return f"{x:.4g}"


def check_trajectory(traj: Trajectory) -> None:
    """Refuse, in one line, a trajectory whose parts disagree in length, whose losses are
    not finite, or that kept fewer than 2 checkpoints (a level needs two to bracket it).

    Raises
    ------
    ValueError
    """
    loss = np.asarray(traj.loss)
    k = len(loss)
    parts = {"iterations": len(traj.iterations), "paths": len(traj.paths)}
    parts |= {f"metric {m!r}": len(v) for m, v in traj.metrics.items()}
    for what, n in parts.items():
        if n != k:
            raise ValueError(f"model {traj.name} has {n} {what} for {k} losses; expected "
                             "one per kept checkpoint")  # fmt: skip
    if not np.isfinite(loss).all():
        raise ValueError(f"model {traj.name} has a loss that is not finite "
                         f"({loss[~np.isfinite(loss)][0]}); expected measured losses")  # fmt: skip
    if k < 2:
        raise ValueError(f"model {traj.name} kept {k} checkpoint(s); at least 2 are needed "
                         "to bracket a level")  # fmt: skip


def common_range(trajs: Sequence[Trajectory]) -> tuple[float, float]:
    """The loss range every model reaches: (lo, hi), lo the largest of each model's lowest
    loss, hi the smallest of each model's highest loss.

    A model reaches a level when its curve (linear between kept checkpoints) crosses it,
    which it does at every loss between its lowest and its highest, so every model
    reaches every loss in [lo, hi].

    Raises
    ------
    ValueError
        No model; a model :func:`check_trajectory` refuses; lo >= hi.
    """
    if not trajs:
        raise ValueError("no model given; expected at least one trajectory")
    for t in trajs:
        check_trajectory(t)
    lows = np.array([np.min(t.loss) for t in trajs])  # (M,)
    highs = np.array([np.max(t.loss) for t in trajs])  # (M,)
    lo, hi = float(lows.max()), float(highs.min())
    if lo >= hi:
        a, b = trajs[int(lows.argmax())].name, trajs[int(highs.argmin())].name
        raise ValueError(f"the models reach no loss in common: {a} reaches down only to "
                         f"{_num(lo)} and {b} up only to {_num(hi)}; expected models whose "
                         "losses overlap")  # fmt: skip
    return lo, hi


def _inside(xs: np.ndarray, lo: float, hi: float) -> tuple[float, ...]:
    """``xs`` rounded to 4 significant digits, or to more where 4 would leave (lo, hi) or
    make two equal."""
    for digits in range(4, 18):
        out = tuple(float(f"{x:.{digits}g}") for x in xs)
        if all(lo < r < hi for r in out) and len(set(out)) == len(out):
            return out
    return tuple(float(x) for x in xs)


def choose_levels(trajs: Sequence[Trajectory], n: int = 4, part: float = 1.0) -> tuple[float, ...]:
    """``n`` loss levels evenly spaced strictly inside the lowest ``part`` of
    :func:`common_range` (lo, hi), that is inside (lo, lo + part (hi - lo)): at its quantiles
    (i + 1) / (n + 1), rounded to 4 significant digits (more where 4 would leave the range),
    in increasing order. ``part`` < 1 keeps the levels away from the losses at
    initialization, where no model has learned anything yet.

    Raises
    ------
    ValueError
        ``n`` < 1, ``part`` outside (0, 1]; or what :func:`common_range` refuses.
    """
    if int(n) != n or n < 1:
        raise ValueError(f"n={n} levels; expected a whole number of at least 1")
    if not 0 < part <= 1:
        raise ValueError(f"part={part} of the common range; expected a fraction in (0, 1]")
    lo, hi = common_range(trajs)
    q = (np.arange(n) + 1) / (n + 1) * part  # (N,)
    return _inside(lo + q * (hi - lo), lo, hi)


def check_levels(trajs: Sequence[Trajectory], levels: Sequence[float]) -> tuple[float, ...]:
    """Refuse, in one line, a level outside the range every model reaches; the levels as
    floats.

    Raises
    ------
    ValueError
        No level; a level not finite or outside :func:`common_range`; or what that refuses.
    """
    lo, hi = common_range(trajs)
    if len(levels) == 0:
        raise ValueError("no level given; expected at least one loss")
    for level in levels:
        if not (lo <= level <= hi):  # NaN falls here too
            raise ValueError(f"level {float(level)} is outside the range every model "
                             f"reaches, {_num(lo)}..{_num(hi)}; expected a loss in it")  # fmt: skip
    return tuple(float(x) for x in levels)


# --------------------------------------------------------------------------- one level


def _kept(traj: Trajectory, i: int) -> Kept:
    return Kept(int(traj.iterations[i]), str(traj.paths[i]), float(traj.loss[i]),
                {m: float(v[i]) for m, v in traj.metrics.items()})  # fmt: skip


def at_level(traj: Trajectory, level: float) -> Point:
    """``traj`` read at loss ``level``: each metric's value there, INTERPOLATED.

    The level is bracketed by the first pair of consecutive checkpoints (i, i + 1), in
    training order, whose losses l_i, l_{i+1} lie on either side of it (or on it); the
    weight is w = (level - l_i) / (l_{i+1} - l_i) (0 where l_i = l_{i+1} = level), and each
    metric m (and the iteration) is (1 - w) * m_i + w * m_{i+1}. These are not measured
    values: ``nearest`` holds the closer checkpoint as measured, ties to the earlier.

    Parameters
    ----------
    traj : Trajectory
        K >= 2 checkpoints.
    level : float
        A loss the curve crosses.

    Returns
    -------
    Point

    Raises
    ------
    ValueError
        What :func:`check_trajectory` refuses; a level the curve never crosses.
    """
    check_trajectory(traj)
    loss = np.asarray(traj.loss, dtype=np.float64)  # (K,)
    a, b = loss[:-1], loss[1:]  # (K-1,) each segment's ends
    crosses = (np.minimum(a, b) <= level) & (level <= np.maximum(a, b))  # (K-1,)
    if not crosses.any():
        raise ValueError(f"model {traj.name} never crosses loss {float(level)}: its losses "
                         f"run {_num(loss.min())}..{_num(loss.max())}; expected a level in "
                         "that range")  # fmt: skip
    i = int(np.argmax(crosses))  # the first crossing in training order
    span = loss[i + 1] - loss[i]
    w = 0.0 if span == 0 else float((level - loss[i]) / span)
    before, after = _kept(traj, i), _kept(traj, i + 1)
    metrics = {m: (1 - w) * before.metrics[m] + w * after.metrics[m] for m in traj.metrics}
    nearest = before if abs(before.loss - level) <= abs(after.loss - level) else after
    iteration = (1 - w) * before.iteration + w * after.iteration
    return Point(traj.model, float(level), iteration, metrics, w, before, after, nearest)
