"""The paths split as a study (:class:`PathsStudy`, :mod:`resgrad.lab.study.protocol`): of a
model, of the lesson's stack, through a run's checkpoints and across runs; and the result
written out as ``resgrad paths`` prints it (a table, JSON, CSV).

Legend: S = window seeds, K = path lengths k = 0..n, R = runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from resgrad.formats.records import to_csv
from resgrad.lab.lesson import StackConfig
from resgrad.lab.paths.chains import stack_chain
from resgrad.lab.paths.exact import (
    PathRow,
    PathSplit,
    check_branches,
    effective_range,
    model_splits,
    path_table,
    paths_in_range,
    split,
)
from resgrad.lab.paths.runs import CheckpointPaths, RunsRow
from resgrad.lab.paths.veit import VeitEstimate, model_veit, veit_bytes, veit_sample
from resgrad.lab.study.budget import (
    TIME_BUDGET_S,
    Work,
    lesson_work,
    model_work,
    require_time,
    work_bar,
)
from resgrad.lab.study.protocol import every_checkpoint
from resgrad.lab.study.windows import refuse_long_seq
from resgrad.perf import memory

__all__ = [
    "MODEL_SEEDS",
    "LESSON_SEEDS",
    "PathsResult",
    "PathsStudy",
    "checkpoint_paths",
    "lesson_paths",
    "render",
    "render_every_checkpoint",
    "render_runs",
    "run_checkpoint_paths",
    "through_training",
]

MODEL_SEEDS = (0, 1, 2)  # a model's default window seeds: mean ± std over 3 batches
LESSON_SEEDS = (42,)  # the lesson's default bank seed: its own table
ROW_KEYS = list(PathRow._fields)
CKPT_KEYS = ["iteration", *ROW_KEYS, "range90_lo", "range90_hi"]  # through training, as CSV
MORE = "pass --budget {seconds} to allow it, or ask for less"


class PathsResult(NamedTuple):
    """The split of one model (or the lesson's stack), one per seed, and Veit's estimates."""

    splits: list[PathSplit]  # (S,)
    veits: list[VeitEstimate] | None  # (S,), with --veit
    label: str  # what was measured, in one line


@dataclass(frozen=True)
class PathsStudy:
    """The split at x_0 of a model's loss gradient by path length, on ``batch`` windows of
    ``seq`` tokens per window seed, with ``veit`` sampled single paths per k (0: none), refused
    over ``budget`` seconds. ``seq_default`` says that ``seq`` is the command's default (a
    refusal says so)."""

    seq: int = 64
    batch: int = 4
    seeds: tuple[int, ...] = MODEL_SEEDS
    veit: int = 0
    budget: float = TIME_BUDGET_S
    seq_default: bool = False
    name: str = "paths"

    def _what(self, m) -> str:
        return (f"this model (L={m.n_layer} C={m.n_embd} V={m.vocab_size}) on {self.batch} "
                f"windows of {self.seq} tokens")  # fmt: skip

    def fits(self, cfg) -> None:
        """Refuse a model that ``seq`` does not fit, or whose split memory cannot hold (one
        batch at a time)."""
        refuse_long_seq(cfg, self.seq, self.seq_default)
        memory.require(memory.paths_bytes(cfg, self.seq, self.batch) + veit_bytes(self.veit),
                       f"splitting this model (L={cfg.n_layer} C={cfg.n_embd} "
                       f"V={cfg.vocab_size}) on {self.batch} windows of {self.seq} "
                       "tokens")  # fmt: skip

    def cost(self, cfg, models: int) -> Work:
        """The branch VJPs of ``models`` splits per seed (and Veit's samples)."""
        return model_work(cfg, self.seq, self.batch, models * len(self.seeds), self.veit)

    def require(self, cfg, models: int, runs: int | None = None) -> None:
        """Refuse work estimated longer than the budget, naming the counts that multiply it."""
        check_branches(2 * cfg.n_layer)  # a block's two branches
        chains = models * len(self.seeds)
        what = self._what(cfg)
        if runs is not None:
            what = (f"{runs} run(s) (L={cfg.n_layer} C={cfg.n_embd}) on {self.batch} windows "
                    f"of {self.seq} tokens at every kept checkpoint")  # fmt: skip
        _require(self.cost(cfg, models), self.budget, what, chains, self.veit)

    def bar(self, cost: Work):
        """A progress bar over the branch VJPs."""
        return work_bar(cost)

    def run(self, model, ids, name: str = "", tick=None) -> PathsResult:
        """The split of ``model`` on each seed's windows of ``ids`` (N,), and Veit's."""
        splits = model_splits(model, ids, self.seq, self.batch, self.seeds, tick=tick)
        veits = None
        if self.veit:
            veits = model_veit(model, ids, self.seq, self.batch, self.seeds, self.veit,
                               tick=tick)  # fmt: skip
        c = model.cfg
        label = f"{name} ({c.variant}, L={c.n_layer}, C={c.n_embd}), T={self.seq} B={self.batch}"
        return PathsResult(splits, veits, label)


def _require(work: Work, budget: float, what: str, chains: int, veit: int) -> None:
    counts = f"{chains:,} split{'s' * (chains != 1)}"
    if veit:
        counts += f" and --veit {veit:,} sampled paths per k"
    require_time(work, budget, f"{what} ({counts})", MORE)


def lesson_paths(
    depth: int = 20,
    seeds: tuple[int, ...] = LESSON_SEEDS,
    veit: int = 0,
    residual: bool = True,
    budget: float = TIME_BUDGET_S,
) -> PathsResult:
    """The split of the lesson's tanh stack of ``depth`` layers, one per bank seed, and
    ``veit`` of Veit's sampled paths per k; refused first if memory cannot hold it or it
    is estimated longer than ``budget`` seconds."""
    sc = StackConfig(depths=(depth,))
    need = memory.lesson_paths_bytes(depth, sc.width, sc.batch, len(seeds))
    what = f"the lesson's stack of depth {depth}"
    memory.require(need + veit_bytes(veit), f"{what} ({len(seeds)} seed(s))")
    check_branches(depth)  # each of the depth layers a branch: refused before any line
    work = lesson_work(depth, sc.width, sc.batch, len(seeds), veit, residual=residual)
    _require(work, budget, what, len(seeds), veit)
    chains = [stack_chain(StackConfig(depths=(depth,), seed=s), residual=residual)
              for s in seeds]  # fmt: skip
    with work_bar(work) as bar:
        veits = None
        if veit:
            veits = [veit_sample(c, veit, seed=0, tick=bar.update) for c in chains]
        splits = [split(c, tick=bar.update) for c in chains]
    return PathsResult(splits, veits, f"{chains[0].label} N={depth}")


def checkpoint_paths(steps, mass: float = 0.9) -> list[CheckpointPaths]:
    """One run's :func:`~resgrad.lab.study.protocol.every_checkpoint` of a :class:`PathsStudy`
    as :class:`~resgrad.lab.paths.runs.CheckpointPaths` rows (the table per k, the effective
    range holding ``mass`` of the norm)."""
    out = []
    for c in steps:  # Checkpoint
        rows = path_table(c.result.splits)
        rng = effective_range([r.share_norm for r in rows], mass)
        out.append(CheckpointPaths(c.iteration, c.path, c.result.splits, rows, rng, c.model))
    return out


def run_checkpoint_paths(
    run_dir: str,
    text: str | None = None,
    seq: int = 64,
    batch: int = 4,
    seeds: tuple[int, ...] = (0,),
    *,
    mass: float = 0.9,
) -> list[CheckpointPaths]:
    """The split at x_0 at every checkpoint ``resgrad train --keep-every`` kept in ``run_dir``,
    on the same windows of ``text`` (the built-in corpus by default) at every one:
    :func:`~resgrad.lab.study.protocol.every_checkpoint` of a :class:`PathsStudy` (no budget),
    by iteration; each equals :func:`~resgrad.lab.paths.exact.model_splits` of that checkpoint.

    Raises
    ------
    ValueError
        ``run_dir`` keeps no checkpoint per step, or a checkpoint's scheme, shape or
        vocabulary differs from the first's.
    OSError
        ``run_dir`` is not a directory.
    """
    study = PathsStudy(seq, batch, tuple(seeds), budget=float("inf"))
    (steps,) = every_checkpoint(study, [run_dir], text)
    return checkpoint_paths(steps, mass)


def through_training(study: PathsStudy, run_dirs, text: str | None = None):
    """:func:`~resgrad.lab.study.protocol.every_checkpoint` of ``study`` over ``run_dirs``, each
    run's steps as :class:`~resgrad.lab.paths.runs.CheckpointPaths`."""
    return [checkpoint_paths(r) for r in every_checkpoint(study, run_dirs, text)]


# --------------------------------------------------------------------------- written out


def _pm(mean: float, std: float, seeds: int) -> str:
    """``mean ± std`` over the seeds; the mean alone for one seed (it has no spread)."""
    return f"{mean:>8.4f} ± {std:<6.4f}" if seeds > 1 else f"{mean:>14.4f}"


def render(res: PathsResult, fmt: str = "table", veit: int = 0) -> str:
    """The split at x_0 as ``resgrad paths`` prints it: a table, ``json`` or ``csv``."""
    splits, veits, what = res
    rows = path_table(splits)
    lo, hi = effective_range([r.share_norm for r in rows])
    if fmt == "csv":
        return to_csv([r._asdict() for r in rows], ROW_KEYS)
    if fmt == "json":
        return json.dumps(_json(splits, rows, (lo, hi), veits, what), indent=2) + "\n"
    S = len(splits)
    out = [f"{what}; seeds: {S}" + (" (mean ± std)" if S > 1 else "")
           + f"; n = {splits[0].n} branches; at x_0"]  # fmt: skip
    w = 17 if S > 1 else 14  # one seed: no spread to print
    head = f"{'k':>3} | {'paths C(n,k)':>12} | {'share of norm':>{w}} | {'share by proj.':>{w}}"
    if veits:
        head += f" | {'Veit mean |g|':>13} | {'C(n,k) x mean':>13} | {'||part_k||':>10}"
    out += [head, "-" * len(head)]
    v_mean = np.mean([v.mean for v in veits], axis=0) if veits else None  # (K,)
    v_total = np.mean([v.total for v in veits], axis=0) if veits else None  # (K,)
    for r in rows:
        line = (f"{r.k:>3} | {r.count:>12} | {_pm(r.share_norm, r.share_norm_std, S)}"
                f" | {_pm(r.share_proj, r.share_proj_std, S)}")  # fmt: skip
        if veits:
            line += f" | {v_mean[r.k]:>13.4e} | {v_total[r.k]:>13.4e} | {r.norm:>10.3e}"
        out.append(line)
    out.append(f"90% of the gradient's norm lies on paths of k = {lo}..{hi} "
               f"({paths_in_range(rows, (lo, hi))} of {2 ** splits[0].n} paths)")  # fmt: skip
    if veits:
        vlo, vhi = effective_range(v_total)
        out.append(f"Veit: {veit} sampled paths per k for each seed, the mean over {S} "
                   "seed(s); C(n,k) x mean sums magnitudes, the exact ||part_k|| vectors; "
                   f"90% of the sum of magnitudes lies on k = {vlo}..{vhi}")  # fmt: skip
    err = max(s.sum_errors.max() for s in splits)
    out.append(f"the parts sum to the gradient to {err:.1e} (relative)")
    return "\n".join(out) + "\n"


def _json(splits, rows, rng, veits, what) -> dict:
    def ms(a):  # (S, ...) -> mean and std lists over the seeds
        a = np.asarray(a)
        return a.mean(axis=0).tolist(), a.std(axis=0).tolist()

    bounds = []
    for i in range(splits[0].norms.shape[0]):
        norms, norms_std = ms([s.norms[i] for s in splits])
        sn, sn_std = ms([s.share_norm()[i] for s in splits])
        sp, sp_std = ms([s.share_proj()[i] for s in splits])
        bounds.append({"boundary": i, "norms": norms, "norms_std": norms_std,
                       "share_norm": sn, "share_norm_std": sn_std,
                       "share_proj": sp, "share_proj_std": sp_std})  # fmt: skip
    out = {
        "source": what, "n": splits[0].n, "seeds": len(splits),
        "range90": list(rng), "rows": [r._asdict() for r in rows], "boundaries": bounds,
    }  # fmt: skip
    if veits:
        # mean and total: over the seeds (their std: the spread over seeds); std: the spread
        # of single paths' magnitudes within a seed, averaged over the seeds
        mean, mean_std = ms([v.mean for v in veits])
        total, total_std = ms([v.total for v in veits])
        out["veit"] = {"samples": veits[0].samples, "seeds": len(veits), "mean": mean,
                       "mean_std": mean_std, "std": ms([v.std for v in veits])[0],
                       "total": total, "total_std": total_std,
                       "range90": list(effective_range(total))}  # fmt: skip
    return json.loads(json.dumps(out, default=float))


def render_every_checkpoint(res: list[CheckpointPaths], name: str, study: PathsStudy,
                            fmt: str = "table") -> str:  # fmt: skip
    """One run through training: a line per kept checkpoint (table), or every k (json, csv)."""
    n = res[0].splits[0].n
    if fmt == "csv":
        rows = [{"iteration": r.iteration, **row._asdict(), "range90_lo": r.range90[0],
                 "range90_hi": r.range90[1]} for r in res for row in r.rows]  # fmt: skip
        return to_csv(rows, CKPT_KEYS)
    if fmt == "json":
        import os

        out = [{"iteration": r.iteration, "checkpoint": os.path.basename(r.path), "n": n,
                "seeds": len(r.splits), "range90": list(r.range90), "mean_k": r.mean_k,
                "rows": [x._asdict() for x in r.rows]} for r in res]  # fmt: skip
        return json.dumps(json.loads(json.dumps(out, default=float)), indent=2) + "\n"
    lines = [f"{name} ({res[0].splits[0].label}, L={n // 2}), T={study.seq} B={study.batch}; "
             f"window seeds: {len(study.seeds)}; n = {n} branches; at x_0"]  # fmt: skip
    head = (f"{'iter':>6} | {'k=0 share':>17} | {'k=1 share':>17} | {'mean k':>6} | "
            f"{'90% range':>9} | {'paths in it':>11}")  # fmt: skip
    lines += [head, "-" * len(head)]
    for r in res:
        k0, k1 = r.rows[0], r.rows[1]
        lo, hi = r.range90
        inside = paths_in_range(r.rows, r.range90)
        lines.append(f"{r.iteration:>6} | {k0.share_norm:>8.4f} ± {k0.share_norm_std:<6.4f} | "
                     f"{k1.share_norm:>8.4f} ± {k1.share_norm_std:<6.4f} | {r.mean_k:>6.2f} | "
                     f"{f'{lo}..{hi}':>9} | {inside / 2**n:>11.2%}")  # fmt: skip
    err = max(s.sum_errors.max() for r in res for s in r.splits)
    lines.append(f"shares of the gradient's norm; the parts sum to the gradient to {err:.1e}")
    return "\n".join(lines) + "\n"


def render_runs(rows: list[RunsRow], sources: list[str], label: str, n: int, study: PathsStudy,
                fmt: str = "table") -> str:  # fmt: skip
    """Several runs through training: per step they all kept, mean ± std over them."""
    if fmt != "table":
        out = [{**r._asdict(), "ranges": [list(x) for x in r.ranges]} for r in rows]
        if fmt == "csv":
            return to_csv(out, ["iteration", "runs", "share0", "share0_std", "mean_k",
                                "mean_k_std"])  # fmt: skip
        return json.dumps({"runs": list(sources), "rows": out}, indent=2) + "\n"
    R = rows[0].runs
    lines = [f"{R} runs ({label}, L={n // 2}), T={study.seq} B={study.batch}; window seeds: "
             f"{len(study.seeds)}; n = {n} branches; at x_0; mean ± std over the runs"]  # fmt: skip
    head = f"{'iter':>6} | {'k=0 share':>17} | {'mean k':>13} | 90% range, each run"
    lines += [head, "-" * len(head)]
    for r in rows:
        ranges = ", ".join(f"{lo}..{hi}" for lo, hi in r.ranges)
        lines.append(f"{r.iteration:>6} | {r.share0:>8.4f} ± {r.share0_std:<6.4f} | "
                     f"{r.mean_k:>5.2f} ± {r.mean_k_std:<5.2f} | {ranges}")  # fmt: skip
    lines.append("shares of the gradient's norm: " + ", ".join(sources))
    return "\n".join(lines) + "\n"
