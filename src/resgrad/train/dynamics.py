"""Per-layer training dynamics: what each block's gradients, updates and activations do, every step.

Legend: L = n_layer, N = number of recorded steps.

At every step of ``resgrad train`` one fixed-size binary record is appended to
``dynamics.bin`` in the run directory; ``dynamics.json`` beside it says how to read
it (the NumPy dtype, L, what each quantity means). Per block i (0 = next to the input):

===============  ====================================================================
``grad``         ||g|| of all of block i's parameter gradients, before clipping
``grad_attn``    the same, attention's parameters only (``attn.*``)
``grad_mlp``     the same, the MLP's parameters only (``mlp.*``)
``grad_ln``      the same, LayerNorm gains and biases (``ln1.*``, ``ln2.*``; ReZero: alpha)
``update``       ||w_after - w_before|| / ||w_before|| over block i's parameters: the
                 "update:data ratio" people check against about 1e-3
``stream_grad``  ||dL/dx_i||, the gradient of the residual stream at block i's input
                 (L + 1 values: the last is at the output of the last block)
``act_rms``      RMS of block i's output, sqrt(mean(x_{i+1}^2))
===============  ====================================================================

and per step: ``step``, ``loss``, ``lr``, ``grad_norm`` (the global norm before
clipping) and ``clipped`` (1 when clipping scaled the gradients down).

Why a binary file: a record is ~(7L + 6) numbers, 2000 steps of a 12-layer run
are 0.7 MB, and a fixed record size makes a torn write trivial to detect. Each
record is one unbuffered ``write`` (O_APPEND), so a ``kill -9`` loses at most the
record being written; a file whose size is not a whole number of records has a
torn tail, which :func:`read_dynamics` ignores and a resume cuts off. On resume
the file is cut back to the steps before the checkpoint's iteration, so the
records of a resumed run equal those of an uninterrupted one, byte for byte; at
each checkpoint the records so far are fsynced, so that a checkpoint on disk
never has fewer records before it.

Damage is not a kill's torn tail: the header is checked field by field (n_layer,
record_bytes and dtype must be those of resgrad's records, each named with the
file when it is not), and the records are read up to the first one a run never
writes (a step that does not follow the one before it or is out of range, a
``clipped`` other than 0 or 1, a non-finite or negative ``lr``). What was kept is
said in one line (:attr:`Dynamics.damage`), by the readers and by a resume.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from resgrad.formats.atomic import atomic_write_text
from resgrad.nn.model import per_block_norms

__all__ = [
    "DYNAMICS_BIN",
    "DYNAMICS_HEADER",
    "GRAD_KINDS",
    "PER_BLOCK",
    "Dynamics",
    "DynamicsMonitor",
    "DynamicsWriter",
    "damage_report",
    "param_kind",
    "read_dynamics",
    "read_runs",
    "make_record",
    "record_dtype",
    "rms",
    "snapshot_blocks",
    "sum_sq",
    "update_ratios",
]

DYNAMICS_BIN = "dynamics.bin"
DYNAMICS_HEADER = "dynamics.json"
FORMAT = "resgrad-dynamics"
VERSION = 1
MAX_N_LAYER = 1_000_000  # a record of 28 MB; NumPy's record size must fit a C int
MAX_STEP = 2**53  # steps are counts; beyond this, a record's step is damage

# per-block quantities, in record order, with the words a plot puts on its axis
PER_BLOCK = {
    "grad": "gradient norm of the block's parameters",
    "grad_attn": "gradient norm, attention parameters",
    "grad_mlp": "gradient norm, MLP parameters",
    "grad_ln": "gradient norm, LayerNorm gains and biases (ReZero: alpha)",
    "update": "update ratio ||w_after - w_before|| / ||w_before||",
    "stream_grad": "||dL/dx_i||, residual-stream gradient at the block's input",
    "act_rms": "RMS of the block's output",
}
# parameter-name prefix inside a block -> its kind (everything else, e.g. alpha, is "ln")
GRAD_KINDS = {"attn.": "grad_attn", "mlp.": "grad_mlp"}


def record_dtype(n_layer: int) -> np.dtype:
    """The NumPy dtype of one step's record for a model of ``n_layer`` blocks."""
    if (
        isinstance(n_layer, bool)
        or not isinstance(n_layer, (int, np.integer))
        or not (1 <= n_layer <= MAX_N_LAYER)
    ):
        raise ValueError(f"n_layer must be an integer in [1, {MAX_N_LAYER}], got {n_layer!r}")
    L = n_layer
    fields = [("step", "<i8"), ("loss", "<f4"), ("lr", "<f4"), ("grad_norm", "<f4"),
              ("clipped", "u1")]  # fmt: skip
    for name in PER_BLOCK:
        fields.append((name, "<f4", (L + 1 if name == "stream_grad" else L,)))
    return np.dtype(fields)


def param_kind(name: str) -> str:
    """The gradient kind of a parameter named inside a block, e.g. ``attn.w_qkv`` -> grad_attn."""
    for prefix, kind in GRAD_KINDS.items():
        if name.startswith(prefix):
            return kind
    return "grad_ln"


def _header(n_layer: int, config: Mapping | None) -> dict:
    dt = record_dtype(n_layer)
    return {
        "format": FORMAT,
        "version": VERSION,
        "n_layer": n_layer,
        "record_bytes": dt.itemsize,
        "dtype": np.lib.format.dtype_to_descr(dt),
        "per_block": PER_BLOCK,
        "config": dict(config or {}),
    }


def make_record(
    n_layer: int,
    it: int,
    loss: float,
    lr: float,
    grad_norm: float,
    clipped: bool,
    norms: Mapping[str, float],
    update_ratio: Sequence[float],
    stream_norms: Sequence[float],
    act_rms: Sequence[float],
) -> np.ndarray:
    """One step's record (a 0-d array of :func:`record_dtype`), from what a train step measured.

    ``norms`` are the per-parameter gradient norms (keys as in ``GPT.params``).
    """
    rec = np.zeros((), dtype=record_dtype(n_layer))
    rec["step"], rec["loss"], rec["lr"] = it, loss, lr
    rec["grad_norm"], rec["clipped"] = grad_norm, clipped
    per_name = per_block_norms(norms, n_layer)  # "" -> (L,), "attn.w_qkv" -> (L,), ...
    rec["grad"] = per_name.pop("")
    for kind in ("grad_attn", "grad_mlp", "grad_ln"):
        sq = [v**2 for k, v in per_name.items() if param_kind(k) == kind]
        rec[kind] = np.sqrt(np.sum(sq, axis=0)) if sq else 0.0  # (L,)
    rec["update"] = update_ratio
    rec["stream_grad"] = stream_norms
    rec["act_rms"] = act_rms
    return rec


def snapshot_blocks(params: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Copies of every block parameter, taken before an optimizer step."""
    return {k: p.copy() for k, p in params.items() if k.startswith("blocks.")}


def update_ratios(
    params: Mapping[str, np.ndarray], before: Mapping[str, np.ndarray], n_layer: int
) -> np.ndarray:
    """Per block, ||w_after - w_before|| / ||w_before|| over all its parameters, (L,).

    ``before`` (:func:`snapshot_blocks`) is spent: each copy's buffer takes its update.
    """
    dw2, w2 = np.zeros(n_layer), np.zeros(n_layer)  # (L,), (L,) sums of squares
    with np.errstate(all="ignore"):  # a diverging update: inf (its record says so)
        for k, w0 in before.items():
            i = int(k.split(".", 2)[1])
            w2[i] += sum_sq(w0)
            dw2[i] += sum_sq(np.subtract(params[k], w0, out=w0))  # w_after - w_before, in place
        return np.sqrt(dw2) / np.sqrt(w2)  # (L,); a block of all-zero weights: inf or nan


def sum_sq(a: np.ndarray) -> float:
    """sum(a^2) as one BLAS dot, accumulated in a's dtype (float32 for a float32 model)."""
    return float(np.dot(a.ravel(), a.ravel()))


def rms(xs: Sequence[np.ndarray]) -> list[float]:
    """sqrt(mean(x^2)) of each array (:func:`sum_sq` / its size)."""
    return [math.sqrt(sum_sq(x) / x.size) for x in xs]


class DynamicsWriter:
    """Appends one record per step to ``run_dir/dynamics.bin``.

    Parameters
    ----------
    run_dir : path
    n_layer : int
    start : int
        The first step this run will record. 0: a fresh run (any old file is
        replaced). Above 0: a resume; records of steps >= ``start`` (and a torn
        tail) are cut off, so the file continues exactly where the checkpoint is.
    log : callable, optional
        Told, in one line, when a resume finds the file missing or unreadable and
        starts it afresh at ``start`` (the checkpoint is the source of truth).
    config : dict, optional
        The run's settings, kept in the header so that runs can be compared
        (:mod:`resgrad.lab.experiments`) without opening their checkpoints.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        n_layer: int,
        start: int = 0,
        log: Callable[[str], None] | None = None,
        config: Mapping | None = None,
    ):
        run_dir = os.fspath(run_dir)
        self.n_layer = n_layer
        self.path = os.path.join(run_dir, DYNAMICS_BIN)
        self.dtype = record_dtype(n_layer)
        head_path = os.path.join(run_dir, DYNAMICS_HEADER)
        keep = 0
        if start > 0:
            try:
                old = read_dynamics(run_dir)
                if old.n_layer != n_layer:
                    raise ValueError(f"its records are of {old.n_layer} blocks, not {n_layer}")
                keep = int(np.searchsorted(old.records["step"], start))  # records before start
                if old.damage is not None and log is not None:
                    log(f"{old.damage}; recording again from step {start}")
                elif keep and old.records["step"][keep - 1] != start - 1 and log is not None:
                    log(f"{DYNAMICS_BIN}: its records stop at step {old.records['step'][keep - 1]}"
                        f", before the checkpoint's step {start} (the file was cut short); kept "
                        f"the first {keep}; recording again from step {start}")  # fmt: skip
            except (OSError, ValueError) as e:
                if log is not None:
                    log(f"dynamics: {e}; recording again from step {start}")
        if keep == 0 or start == 0:
            atomic_write_text(head_path, json.dumps(_header(n_layer, config), indent=1) + "\n")
        # O_APPEND: each record is one write at the end; no user-space buffer to lose
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        os.ftruncate(self._fd, keep * self.dtype.itemsize)

    def append(self, record: np.ndarray) -> None:
        if record.dtype != self.dtype:
            raise ValueError(f"record dtype {record.dtype} does not match the file's")
        os.write(self._fd, record.tobytes())

    def sync(self) -> None:
        """Put the records written so far on disk (fsync): called before each checkpoint."""
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> DynamicsWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(frozen=True)
class Dynamics:
    """The records of a run: ``records[name]`` is (N,) per step or (N, L) per block."""

    run_dir: str
    n_layer: int
    records: np.ndarray  # (N,) structured, record_dtype(n_layer)
    torn_bytes: int  # bytes of an incomplete last record, ignored
    config: dict  # the run's settings (TrainConfig's fields), from the header
    damage: str | None = None  # one line: the first damaged record, and what was kept

    @property
    def steps(self) -> np.ndarray:
        return self.records["step"]  # (N,)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.records[name]

    def describe(self) -> str:
        """What was read, in words: ``'N steps of L blocks'``, and a torn last record's
        bytes if one was ignored."""
        n, L = len(self.steps), self.n_layer
        torn = f"; a torn last record, {self.torn_bytes} bytes, was ignored"
        torn = torn if self.torn_bytes else ""
        return f"{n} step{'s' * (n != 1)} of {L} block{'s' * (L != 1)}{torn}"


def read_dynamics(run_dir: str | os.PathLike) -> Dynamics:
    """The dynamics records of the run in ``run_dir``.

    Records from the first damaged one on are left out, and said in ``damage``.

    Raises
    ------
    ValueError
        If ``run_dir`` is not a directory, holds no dynamics records, or its
        header is not resgrad's; a header field that is not what resgrad writes
        is named with the file.
    """
    run_dir = os.fspath(run_dir)
    if not os.path.isdir(run_dir):
        raise ValueError(f"{run_dir!r} is not a directory (expected a training run's --out-dir)")
    head_path = os.path.join(run_dir, DYNAMICS_HEADER)
    bin_path = os.path.join(run_dir, DYNAMICS_BIN)
    if not os.path.exists(head_path) or not os.path.exists(bin_path):
        raise ValueError(
            f"{run_dir!r} holds no dynamics records ({DYNAMICS_HEADER}, {DYNAMICS_BIN}); "
            "is it the --out-dir of a `resgrad train` run?"
        )
    try:
        with open(head_path, encoding="utf-8") as f:
            head = json.load(f)
        ok = head.get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        ok = False
    if not ok:
        raise ValueError(f"{head_path!r} is not a resgrad dynamics header (format {VERSION})")
    version = head.get("version")
    if type(version) is not int or version != VERSION:  # records of another layout: unread
        newer = type(version) is int and version > VERSION
        raise ValueError(
            f"{head_path!r}: version is {version!r}; this resgrad reads version {VERSION}"
            + (" (a newer resgrad wrote it: upgrade to read it)" if newer else "")
        )
    dt = _header_dtype(head, head_path)
    data = np.fromfile(bin_path, dtype=np.uint8)  # (bytes,)
    n, torn = divmod(data.size, dt.itemsize)
    records = data[: n * dt.itemsize].view(dt)  # (N,)
    kept, why = _first_damaged(records)
    damage = None
    if why is not None:
        damage = f"{DYNAMICS_BIN}: record {kept + 1} of {n} is damaged ({why}); "
        damage += f"kept the first {kept}"
    config = head.get("config") if isinstance(head.get("config"), dict) else {}
    return Dynamics(run_dir, head["n_layer"], records[:kept], int(torn), config, damage)


def read_runs(run_dirs: Sequence[str | os.PathLike]) -> list[Dynamics]:
    """:func:`read_dynamics` of every run directory, in order."""
    return [read_dynamics(d) for d in run_dirs]


def damage_report(runs: Sequence[Dynamics], prefix: str) -> str:
    """One line ``'<prefix>: <run_dir>: <damage>'`` per run whose records are damaged (the
    records before the damage were read), in order; ``''`` when none is."""
    return "".join(f"{prefix}: {d.run_dir}: {d.damage}\n" for d in runs if d.damage)


def _header_dtype(head: dict, head_path: str) -> np.dtype:
    """The record dtype ``head`` describes; a field other than resgrad writes is named."""
    L = head.get("n_layer")
    try:
        dt = record_dtype(L)
    except ValueError:
        raise ValueError(
            f"{head_path!r}: n_layer is {L!r}; expected an integer in [1, {MAX_N_LAYER}]"
        ) from None
    size = head.get("record_bytes")
    if isinstance(size, bool) or size != dt.itemsize:
        raise ValueError(
            f"{head_path!r}: record_bytes is {size!r}; expected {dt.itemsize} for n_layer {L}"
        )
    if head.get("dtype") != json.loads(json.dumps(np.lib.format.dtype_to_descr(dt))):
        raise ValueError(f"{head_path!r}: dtype is not the records of n_layer {L}")
    return dt


def _count(v: int) -> str:
    """A step as a line shows it: 6, or 8e18 for what only damage gives."""
    return str(v) if abs(v) < 10**6 else f"{v:.0e}".replace("e+", "e")


def _first_damaged(records: np.ndarray) -> tuple[int, str | None]:
    """(index of the first record no run writes, why), or (N, None) when all are sound."""
    step = records["step"]  # (N,) int64
    prev = np.concatenate([[-1], step[:-1]])  # (N,) the step before each record's
    with np.errstate(invalid="ignore"):
        bad_step = (step < 0) | (step >= MAX_STEP) | ((step <= prev) & (np.arange(len(step)) > 0))
        bad_lr = ~np.isfinite(records["lr"]) | (records["lr"] < 0)
    bad = bad_step | (records["clipped"] > 1) | bad_lr  # (N,)
    if not bad.any():
        return len(records), None
    k = int(np.argmax(bad))
    if bad_step[k]:
        after = f" after {_count(int(prev[k]))}" if k else ""
        return k, f"step {_count(int(step[k]))}{after}"
    if records["clipped"][k] > 1:
        return k, f"clipped is {int(records['clipped'][k])}, not 0 or 1"
    return k, f"lr is {float(records['lr'][k]):g}"


class DynamicsMonitor:
    """One-line warnings while training, when a block's gradient or update goes astray.

    Warned, each at most once every ``every`` steps (the first time at once):

    - ``grad``: a block's gradient norm below ``1e-3`` or above ``1e3`` times the
      median block's (a vanishing or exploding layer);
    - ``update``: a block's update ratio outside ``[1e-5, 1e-1]`` (a frozen layer, or
      one whose weights are being overwritten).

    The line names the step, the most extreme block, its value and the bound.
    """

    GRAD_BAND = (1e-3, 1e3)  # x the median block's gradient norm
    UPDATE_BAND = (1e-5, 1e-1)  # ||dw|| / ||w||

    def __init__(self, say: Callable[[str], None], every: int = 100):
        self.say = say
        self.every = every
        self._last: dict[str, int] = {}  # check -> step it last warned

    def _due(self, check: str, step: int) -> bool:
        last = self._last.get(check)
        return last is None or step - last >= self.every

    def observe(self, record: np.ndarray) -> list[str]:
        """Check one step's record; say and return the warnings it triggers."""
        with np.errstate(all="ignore"):  # a diverging step's inf and NaN: the trainer names it
            said = self._check(record)
        for line in said:
            self.say(line)
        return said

    def _check(self, record: np.ndarray) -> list[str]:
        step = int(record["step"])
        said = []
        grad = record["grad"].astype(np.float64)  # (L,)
        median = float(np.median(grad))
        if median > 0 and self._due("grad", step):
            rel = grad / median  # (L,)
            i = int(np.argmax(np.abs(np.log(np.maximum(rel, 1e-300)))))
            lo, hi = self.GRAD_BAND
            if not lo <= rel[i] <= hi:
                said.append(
                    f"warning: step {step}: block {i} gradient norm {grad[i]:.3g} is "
                    f"{rel[i]:.3g}x the median block's ({median:.3g}), outside "
                    f"[{lo:g}x, {hi:g}x]"
                )
                self._last["grad"] = step
        upd = record["update"].astype(np.float64)  # (L,)
        if self._due("update", step) and upd.size:
            lo, hi = self.UPDATE_BAND
            dist = np.maximum(np.log(lo / np.maximum(upd, 1e-300)), np.log(upd / hi))  # (L,)
            i = int(np.argmax(dist))
            if dist[i] > 0 and math.isfinite(upd[i]):
                said.append(
                    f"warning: step {step}: block {i} update ratio ||dw||/||w|| = {upd[i]:.3g}, "
                    f"outside [{lo:g}, {hi:g}]"
                )
                self._last["update"] = step
        return said
