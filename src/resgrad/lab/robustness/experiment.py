"""The equal-loss robustness study's runs: the models trained (schemes x depths x seeds, and a
dose of rezero's alpha at initialization), each measured at every checkpoint it kept (the
paths split and the lesion study, :mod:`resgrad.lab.study.protocol`), cached and resumed by
every setting and the text's SHA-256, on local cores or a Dask cluster.

Legend: L = blocks, K = kept checkpoints of a run, M = models (cells).

The loss of a checkpoint is the intact model's cross-entropy on the study's windows of the
validation text (the last 10% of the corpus, which training never sees): the same windows
the lesion study deletes blocks on, so that a level and a lesion cost are read on one text.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from resgrad.formats.atomic import atomic_write_text
from resgrad.formats.checkpoint import LAST
from resgrad.formats.sealed import stamp, stamp_problem
from resgrad.lab.experiments.experiment import _check_same_cell, cell_key, run_cell
from resgrad.lab.experiments.grid import run_grid, sidecar_path
from resgrad.lab.lesion.interventions import EXACT_SETS
from resgrad.lab.lesion.study import LesionStudy
from resgrad.lab.lesion.tables import rows as lesion_rows
from resgrad.lab.lesion.tables import summary as lesion_summary
from resgrad.lab.paths.exact import path_table
from resgrad.lab.paths.study import PathsStudy
from resgrad.lab.robustness.levels import ModelKey, Trajectory
from resgrad.lab.study.budget import format_seconds, plan_left, refuse_over_budget
from resgrad.lab.study.protocol import every_checkpoint
from resgrad.nn.model import MAX_ALPHA, VARIANTS
from resgrad.train.config import TrainConfig
from resgrad.train.rundir import kept_checkpoints, kept_schedule, run_problems

__all__ = [
    "BUDGET_S",
    "DOSE_SCHEME",
    "METRICS",
    "SCHEMES",
    "RobustnessConfig",
    "measure_cell",
    "run_cells",
    "trajectories",
]

SCHEMES = ("pre-ln", "post-ln", "deepnorm", "rezero", "residual")
# the question the study answers, in one line (its command's help)
QUESTION = (
    "at equal validation loss, does a model whose gradient travels shorter paths lose "
    "less when a block is deleted?"
)
BUDGET_S = 3600.0  # a study estimated longer than this is refused unless asked for
# the levels are chosen in the lowest half of the range every model reaches: the upper half
# lies near the loss at initialization, where the models differ by their init alone
LEVELS_PART = 0.5
# the estimate's fixed costs (measured on 2 cores, numba's kernels in their cache): a worker
# process's start (its imports, the kernels loaded, a first step's warm-up), and a model's
# own (its text encoded, its init, two evaluations, its dynamics files, ~10 checkpoints)
WORKER_START_S = 2.0
MODEL_S = 0.2
DOSE_SCHEME = "rezero"  # the dose: rezero's alpha at initialization (GPTConfig.rezero_alpha)
# measured at every kept checkpoint: paths' mean k, k = 0 share and share with k <= L // 4;
# lesion's one-block change in CE (mean over blocks, and its worst block's) and k = 2 deletion
METRICS = ("mean_k", "share0", "share_short", "block_dce", "worst_dce", "delete2_dce")
ROW_FIELDS = ("scheme", "depth", "dose", "seed", "iteration", "checkpoint", "loss", *METRICS)


@dataclass(frozen=True)
class RobustnessConfig:
    """The study: which models, how they train, where they are read."""

    schemes: tuple[str, ...] = SCHEMES
    depths: tuple[int, ...] = (6, 12)
    seeds: tuple[int, ...] = (0, 1, 2)  # training seeds: the bootstrap's unit
    doses: tuple[float, ...] = (0.0, 0.05, 0.25, 1.0)  # rezero's alpha at init (0: ReZero's)
    n_embd: int = 32  # C
    n_head: int = 2  # H
    block_size: int = 32  # T of training and of the study's windows
    batch_size: int = 8  # B of training
    max_iters: int = 300  # steps per model
    keep_every: int = 10  # a checkpoint kept every this many steps (and at 0 and the end)
    lr: float = 1e-3  # peak learning rate (warmup 30 steps, cosine to lr / 10): issue 30's
    windows: int = 4  # windows per window seed of the studies
    window_seeds: tuple[int, ...] = (0, 1)
    samples: int = 10  # random sets of the k = 2 deletion where C(L, 2) > EXACT_SETS (L > 32)
    levels: tuple[float, ...] | None = None  # None: chosen in the range every model reaches
    n_levels: int = 4
    bootstrap: int = 1000  # resamples of the training seeds
    data: str | None = None  # a UTF-8 text file; None: the built-in corpus
    smoke: bool = False  # --quick's: a smoke test of the machinery, its verdicts no evidence

    def __post_init__(self):
        for s in self.schemes:
            if s not in VARIANTS or s == "none":
                raise ValueError(f"scheme {s!r} has no + x path to study; expected some of "
                                 f"{', '.join(SCHEMES)}")  # fmt: skip
        if len(set(self.schemes)) < len(self.schemes) or not self.schemes:
            raise ValueError(f"schemes must be distinct and at least one, got {self.schemes}")
        for d in self.doses:
            ok = isinstance(d, (int, float)) and not isinstance(d, bool) and math.isfinite(d)
            if not ok or not 0.0 <= d <= MAX_ALPHA:
                raise ValueError(f"dose {d!r} is not an alpha rezero can start at; expected a "
                                 f"number in [0, {MAX_ALPHA:g}]")  # fmt: skip
        if self.doses != (0.0,) and DOSE_SCHEME not in self.schemes:
            raise ValueError(f"doses {','.join(f'{d:g}' for d in self.doses)} are rezero's "
                             "alpha at initialization; add rezero to the schemes, or give "
                             "the dose 0 alone")  # fmt: skip
        kept = self.max_iters // self.keep_every + 1 + (self.max_iters % self.keep_every > 0)
        if kept < 3:
            raise ValueError(f"--keep-every {self.keep_every} keeps {kept} checkpoint(s) per "
                             f"model of {self.max_iters} steps; expected at least 3, so that "
                             "a loss level falls between two")  # fmt: skip
        # -0 is 0: one model, one name (a0), not a-0 beside it
        object.__setattr__(self, "doses", tuple(float(d) + 0.0 for d in self.doses))
        if len(set(self.doses)) < len(self.doses):
            raise ValueError(f"--doses {','.join(f'{d:g}' for d in self.doses)}: expected "
                             "distinct doses")  # fmt: skip
        if len(self.seeds) < 2:
            raise ValueError(f"--seeds {','.join(map(str, self.seeds))} is {len(self.seeds)} "
                             "training seed; the analysis resamples the seeds: expected at "
                             "least 2 (5 for a verdict a referee trusts)")  # fmt: skip
        for lv in self.levels or ():
            if not (isinstance(lv, (int, float)) and math.isfinite(lv) and lv > 0):
                raise ValueError(f"level {lv!r} is not a loss; expected a positive number")
        for c in self.cells("."):  # every model's settings, refused before any trains
            c[1].gpt_config(vocab_size=1)

    @classmethod
    def quick(cls, **kw) -> RobustnessConfig:
        """A small study for CI: three schemes, depth 2, three seeds, two doses, 60 steps."""
        base = dict(schemes=("pre-ln", "post-ln", "rezero"), depths=(2,), doses=(0.0, 1.0),
                    n_embd=16, block_size=16, batch_size=4, max_iters=60, keep_every=10,
                    lr=1e-2, windows=2, window_seeds=(0,), samples=3, bootstrap=200,
                    smoke=True)  # fmt: skip
        return cls(**{**base, **kw})

    @classmethod
    def from_flags(cls, quick: bool = False, variants=None, **settings) -> RobustnessConfig:
        """The study a command asks for: :meth:`quick`'s or the default, with ``settings``
        (fields by name; ``variants``, the flag's name, are the schemes)."""
        if variants is not None:
            settings["schemes"] = tuple(variants)
        return cls.quick(**settings) if quick else cls(**settings)

    def largest_cell(self, out_dir: str) -> TrainConfig:
        """The config of the deepest model, for a memory estimate."""
        return max((c for _, c, _ in self.cells(out_dir)), key=lambda c: c.n_layer)

    def cells(self, out_dir: str) -> list[tuple[str, TrainConfig, ModelKey]]:
        """(name, its run's config, its model key) for every model, in order."""
        out = []
        for s in self.schemes:
            for L in self.depths:
                for dose in self.doses if s == DOSE_SCHEME else (0.0,):
                    for seed in self.seeds:
                        name = f"{s}_L{L}_a{dose:g}_s{seed}"
                        out.append((name, self._train_config(s, L, dose, seed, out_dir, name),
                                    ModelKey(s, L, float(dose), seed)))  # fmt: skip
        return out

    def _train_config(self, scheme, L, dose, seed, out_dir, name) -> TrainConfig:
        return TrainConfig(
            n_layer=L, n_head=self.n_head, n_embd=self.n_embd, block_size=self.block_size,
            batch_size=self.batch_size, max_iters=self.max_iters, lr=self.lr,
            min_lr=self.lr / 10, warmup_iters=min(30, self.max_iters // 5),
            lr_decay_iters=self.max_iters, eval_interval=self.max_iters, eval_iters=2,
            variant=scheme, rezero_alpha=float(dose), seed=seed, data=self.data,
            out_dir=os.path.join(out_dir, "runs", name), keep_every=self.keep_every,
        )  # fmt: skip

    def studies(self) -> tuple[PathsStudy, LesionStudy]:
        """The paths split and the lesion study every kept checkpoint is read with."""
        kw = dict(seq=self.block_size, batch=self.windows, seeds=self.window_seeds,
                  budget=math.inf)  # fmt: skip
        return PathsStudy(**kw), LesionStudy(
            **kw, what=("block", "delete"), ks=(2,), samples=self.samples, text_name="validation"
        )

    def seconds(self, vocab_size: int, jobs: int) -> float:
        """An estimate of the whole study on ``jobs`` workers: their start-up
        (:data:`WORKER_START_S`, in parallel), then each model's fixed cost
        (:data:`MODEL_S`), its training (:meth:`TrainConfig.seconds`) and its studies at
        every kept checkpoint, shared among the workers. Within a factor of 2 of the
        measured time: ``benchmarks/bench_estimates.py``."""
        total = 0.0
        paths, lesion = self.studies()
        for _, c, _ in self.cells("."):
            g = c.gpt_config(vocab_size)
            kept = c.max_iters // c.keep_every + 2
            total += MODEL_S + c.seconds(vocab_size)
            total += paths.cost(g, kept).seconds + lesion.cost(g, kept).seconds
        return WORKER_START_S + total / max(jobs, 1)


def validation_text(text: str) -> str:
    """The last 10% of ``text``: the validation split training never sees."""
    from resgrad.train.data import VAL_FRACTION

    return text[int(len(text) * (1 - VAL_FRACTION)) :]


def _sound_run(cfg: TrainConfig) -> None:
    """Make ``cfg``'s run directory one this study can resume and read: where it holds a
    checkpoint that does not read back as written (damaged, a copy of another iteration's,
    another run's) or lacks one its schedule kept, the run is said on stderr, naming the
    file and why, and removed to be trained again from the start (the study wrote it)."""
    schedule = kept_schedule(cfg.max_iters, cfg.keep_every)
    problems = run_problems(cfg.out_dir, schedule)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        print(f"{problems[0]}{more}: model {os.path.basename(cfg.out_dir)} is trained again "
              "from the start", file=sys.stderr)  # fmt: skip
        shutil.rmtree(cfg.out_dir)


def measure_cell(point: tuple) -> list[dict]:
    """Train one model (resuming its own run, after :func:`_sound_run`) and read it at every
    checkpoint its schedule keeps: one row per checkpoint (:data:`ROW_FIELDS`, and the stamp
    of the checkpoint it was read on, so that a rerun can tell the file is still that one).
    A module-level job for the grid's workers."""
    cfg, key, study_cfg, text = point
    _sound_run(cfg)
    (trained,) = run_cell(cfg)
    kept = [it for it, _ in kept_checkpoints(cfg.out_dir)]
    schedule = kept_schedule(cfg.max_iters, cfg.keep_every)
    # trained to the end: every checkpoint of the schedule and no other (a model that
    # diverged: the schedule's up to where it stopped, read as far as it went)
    want = schedule[: len(kept)] if trained["diverged"] else schedule
    if kept != want:
        raise RuntimeError(f"{cfg.out_dir!r} kept checkpoints at {kept}, its schedule at "
                           f"{schedule}")  # fmt: skip
    paths_study, lesion_study = study_cfg.studies()
    val = validation_text(text)
    (psteps,) = every_checkpoint(paths_study, [cfg.out_dir], val)
    (lsteps,) = every_checkpoint(lesion_study, [cfg.out_dir], val)
    out = []
    for p, les in zip(psteps, lsteps):
        prow = path_table(p.result.splits)
        shares = np.array([r.share_norm for r in prow])  # (n + 1,) by k
        table = lesion_rows(les.result)
        s = lesion_summary(table)
        d2 = next(r.get("dce")[0] for r in table if r.kind == "delete" and r.k == 2)
        out.append({
            **key._asdict(), "iteration": p.iteration,
            "checkpoint": os.path.relpath(p.path, os.path.dirname(os.path.dirname(cfg.out_dir))),
            "loss": s.ce, "mean_k": float(np.arange(len(shares)) @ shares),
            "share0": float(shares[0]), "share_short": float(shares[: key.depth // 4 + 1].sum()),
            "block_dce": s.block_dce, "worst_dce": s.worst_dce, "delete2_dce": float(d2),
            "stamp": stamp(p.path),
        })  # fmt: skip
    return out


def _stale_rows(out_dir: str):
    """The grid's check of a model's cached rows: why one of them was read on a checkpoint
    that is no longer the file on disk (gone, cut, changed), or None."""

    def check(key: str, rows: list[dict]) -> str | None:
        for r in rows:
            why = stamp_problem(os.path.join(out_dir, r.get("checkpoint", "")), r.get("stamp"))
            if why is not None:
                return why
        return None

    return check


def run_cells(cfg: RobustnessConfig, out_dir: str, *, jobs: int | None = None,
              backend: str = "loky", scheduler: str | None = None,
              connect_timeout: float = 5.0, progress: bool | None = None,
              threads: int | None = None, budget: float = math.inf,
              plan: Callable[[float, str], None] | None = None) -> list[dict]:  # fmt: skip
    """Every model of ``cfg`` trained into ``out_dir/runs`` and read at every kept checkpoint,
    as rows (:data:`ROW_FIELDS`), in the cells' order. A model finished before, with the
    same settings and text, is not trained or read again (its rows are in the grid's
    sidecar, each row checked against the checkpoint it was read on); one trained before
    with other settings is refused, as are a study estimated over ``budget`` seconds, a text
    of one character and an out-dir holding files no study wrote, before any model trains.
    One study at a time writes ``out_dir`` (its lock); one refused before a model finished
    leaves no out-dir behind. ``plan``: called once, after every check (the scheduler
    reached) and before the first model trains, with the estimated seconds and the work.

    Raises
    ------
    ValueError
    """
    from resgrad.formats.lock import lock_dir, new_dir_or_nothing
    from resgrad.lab.experiments.grid import check_backend, sidecar_is_empty
    from resgrad.train.data import load_corpus

    side = sidecar_path(os.path.join(out_dir, "checkpoints.csv"))
    _check_out_dir(out_dir, side)
    corpus = load_corpus(cfg.data, cfg.block_size)
    V = corpus.tokenizer.vocab_size
    if V < 2:  # ln V = 0: every model starts at its floor, no level lies below
        raise ValueError(f"--data {corpus.source!r} has {V} distinct character; a model of it "
                         "starts at loss ln V = 0 and has nothing to learn: expected a text "
                         "of at least 2 distinct characters")  # fmt: skip
    start = math.log(V)  # about every model's loss at initialization
    for lv in cfg.levels or ():
        if lv >= start:
            raise ValueError(f"level {lv:g} is above the loss every model starts near, ln V = "
                             f"{start:.3f}; expected a loss below it")  # fmt: skip
    cells = cfg.cells(out_dir)
    workers = check_backend(jobs, backend, scheduler, connect_timeout)
    seconds = cfg.seconds(V, 1 if backend == "dask" else workers)
    work = (f"{len(cells)} models of {cfg.max_iters} steps, each read at "
            f"{cfg.max_iters // cfg.keep_every + 1} checkpoints")  # fmt: skip
    refuse_over_budget(seconds, budget, f"this study ({len(cells)} models)", work,
                       "pass --budget {seconds} to allow it, or ask for fewer models or "
                       "steps")  # fmt: skip
    for _, c, _ in cells:  # a model trained before with other settings: refused, never mixed
        last = os.path.join(c.out_dir, LAST)
        if os.path.exists(last):
            _check_same_cell(c, last, corpus)
    # the limit decides delete2_dce's sets (every one at these depths): rows read under another
    # limit are read again
    lesion_key = {**dataclasses.asdict(cfg.studies()[1]), "exact_sets": EXACT_SETS}
    studies = json.dumps(lesion_key, sort_keys=True, default=str)
    keys = [cell_key(c, corpus.sha256) + studies for _, c, _ in cells]
    points = [(c, k, cfg, corpus.text) for _, c, k in cells]
    # a study refused before a model finished (no scheduler, Ctrl-C at once) leaves nothing
    with (
        new_dir_or_nothing(out_dir, disposable=sidecar_is_empty),
        lock_dir(out_dir, "study directory"),
    ):
        grid = run_grid(list(zip(keys, points)), measure_cell, side, jobs=jobs,
                        backend=backend, scheduler=scheduler, connect_timeout=connect_timeout,
                        progress=progress, desc=f"robustness (about {format_seconds(seconds)})",
                        threads=threads, check=_stale_rows(out_dir),
                        ready=plan and plan_left(plan, seconds, work, "models"))  # fmt: skip
        # the text the studies read, so that a point can be read again with resgrad paths
        atomic_write_text(os.path.join(out_dir, "validation.txt"), validation_text(corpus.text))
    return [r for k in keys for r in grid.done[k]]


# what a study writes in its out-dir; found there without its cache, a study did not write them
STUDY_FILES = ("validation.txt", "checkpoints.csv", "runs")


def _check_out_dir(out_dir: str, side: str) -> None:
    """Refuse, before any work, an out-dir that is a file, or that holds files of a study's
    names (:data:`STUDY_FILES`) without the study's cache beside them: this command did not
    write them, and would replace them."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise NotADirectoryError(f"--out-dir {out_dir!r} is a file; expected a directory (or "
                                 "a new name)")  # fmt: skip
    if os.path.isdir(out_dir) and not os.path.exists(side):
        theirs = [n for n in STUDY_FILES if os.path.exists(os.path.join(out_dir, n))]
        if theirs:
            raise ValueError(f"--out-dir {out_dir!r} holds {', '.join(theirs)}, which no study "
                             f"wrote there (it has no {os.path.basename(side)}); choose another "
                             "--out-dir, or move them")  # fmt: skip


def trajectories(rows: Sequence[dict], out_dir: str = ".") -> list[Trajectory]:
    """The rows of :func:`run_cells` as one :class:`Trajectory` per model, by iteration."""
    by: dict[ModelKey, list[dict]] = {}
    for r in rows:
        key = ModelKey(r["scheme"], int(r["depth"]), float(r["dose"]), int(r["seed"]))
        by.setdefault(key, []).append(r)
    out = []
    for key, rs in by.items():
        rs = sorted(rs, key=lambda r: int(r["iteration"]))
        out.append(Trajectory(
            key, np.array([int(r["iteration"]) for r in rs]),
            np.array([float(r["loss"]) for r in rs]),
            {m: np.array([float(r[m]) for r in rs]) for m in METRICS},
            tuple(os.path.join(out_dir, r["checkpoint"]) for r in rs),
        ))  # fmt: skip
    return out


def equal_loss(cfg: RobustnessConfig, out_dir: str, **grid) -> tuple[list, list[Trajectory]]:
    """The whole study: :func:`run_cells` (``grid``: its keyword arguments), every row written
    to ``out_dir/checkpoints.csv`` (and the validation text the studies read, to
    ``validation.txt``), the models' trajectories, the levels (``cfg.levels``, or
    :func:`~resgrad.lab.robustness.levels.choose_levels`' inside the range every model
    reaches, in its lowest half: :data:`LEVELS_PART`) and
    :func:`~resgrad.lab.robustness.stats.analyse` at each: (results, trajectories).

    Raises
    ------
    ValueError
        As :func:`run_cells`; or levels outside the range every model reaches (the models
        stay trained: a rerun with other levels trains nothing).
    """
    from resgrad.formats.records import to_csv
    from resgrad.lab.robustness.levels import choose_levels
    from resgrad.lab.robustness.stats import analyse

    rows = run_cells(cfg, out_dir, **grid)
    atomic_write_text(os.path.join(out_dir, "checkpoints.csv"), to_csv(rows, list(ROW_FIELDS)))
    trajs = trajectories(rows, out_dir)
    levels = cfg.levels or choose_levels(trajs, cfg.n_levels, part=LEVELS_PART)
    return analyse(trajs, levels, B=cfg.bootstrap), trajs
