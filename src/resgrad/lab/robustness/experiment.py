"""The equal-loss robustness study's runs: the models trained (schemes x depths x seeds, and a
dose inside each dosed scheme: rezero's alpha at initialization, ln-scaling's exponent), each
at the learning rate a pilot sweep chose for its scheme and depth
(:mod:`resgrad.lab.robustness.recipe`), each measured at every checkpoint it kept (the paths
split and the lesion study, :mod:`resgrad.lab.study.protocol`), cached and resumed by every
setting and the text's SHA-256, on local cores or a Dask cluster.

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

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
from resgrad.lab.robustness.levels import ModelKey
from resgrad.lab.robustness.profiles import BRANCH, LESION, profile_metrics
from resgrad.lab.study.budget import format_seconds, plan_left, refuse_over_budget
from resgrad.lab.study.protocol import every_checkpoint
from resgrad.nn.model import MAX_ALPHA, VARIANTS
from resgrad.train.config import TrainConfig
from resgrad.train.data import VAL_FRACTION
from resgrad.train.rundir import kept_checkpoints, kept_schedule, run_problems

__all__ = [
    "BUDGET_S",
    "DOSE_SCHEME",
    "METRICS",
    "SCHEMES",
    "RobustnessConfig",
    "measure_cell",
    "run_cells",
]

SCHEMES = ("pre-ln", "post-ln", "deepnorm", "rezero", "residual", "ln-scaling")
# the question the study answers, in one line (its command's help)
QUESTION = (
    "at equal validation loss, does a model whose gradient travels shorter paths lose "
    "less when a block is deleted?"
)
BUDGET_S = 3600.0  # a study estimated longer than this is refused unless asked for
# the estimate's fixed costs (measured on 2 cores, numba's kernels in their cache): a worker
# process's start (its imports, the kernels loaded, a first step's warm-up), and a model's
# own (its text encoded, its init, two evaluations, its dynamics files, ~10 checkpoints)
WORKER_START_S = 2.0
MODEL_S = 0.2
# the schemes with a dose, each its GPTConfig field: a setting that moves path length inside
# the scheme, its depth and learning rate held fixed
DOSED = {"rezero": "rezero_alpha", "ln-scaling": "ln_scaling_power"}
DOSE_SCHEME = "rezero"  # the first: --doses are rezero's alpha at initialization
# measured at every kept checkpoint: paths' mean k, k = 0 share and share with k <= L // 4;
# lesion's one-block change in CE (mean over blocks, and its worst block's) and k = 2 deletion;
# two made comparable across depths: k_frac = mean k / 2L (the share of the branches a path
# passes) and sum_dce = L x block_dce (every block deleted in turn, the costs summed: a
# block's cost falls like 1/L as it becomes a smaller share of the model, their sum need not)
METRICS = ("mean_k", "share0", "share_short", "block_dce", "worst_dce", "delete2_dce",
           "k_frac", "sum_dce")  # fmt: skip
ROW_FIELDS = ("scheme", "depth", "dose", "seed", "iteration", "checkpoint", "loss", *METRICS)
# the rows' layout: rows cached under another are measured again (2: the per-block profiles
# dce_b<l>, branch_b<l> and the comparable measures)
ROW_VERSION = 2


@dataclass(frozen=True)
class RobustnessConfig:
    """The study: which models, how they train, where they are read."""

    schemes: tuple[str, ...] = SCHEMES
    depths: tuple[int, ...] = (6, 12)
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)  # training seeds: the bootstrap's unit
    doses: tuple[float, ...] = (0.0, 0.05, 0.25, 1.0)  # rezero's alpha at init (0: ReZero's)
    powers: tuple[float, ...] = (0.0, 0.25, 0.5)  # ln-scaling's exponent p (0.5: the paper's)
    n_embd: int = 32  # C
    n_head: int = 2  # H
    block_size: int = 32  # T of training and of the study's windows
    batch_size: int = 8  # B of training
    max_iters: int = 600  # steps per model
    keep_every: int = 20  # a checkpoint kept every this many steps (and at 0 and the end)
    # peak learning rates (warmup, cosine to lr / 10): the pilot sweep's candidates, each
    # scheme and depth trained at the one whose pilot ends lowest; one: every model at it
    lrs: tuple[float, ...] = (1e-3, 3e-3, 1e-2)
    pilot_iters: int = 200  # steps of a pilot model
    windows: int = 4  # windows per window seed of the studies
    window_seeds: tuple[int, ...] = (0, 1)
    samples: int = 10  # random sets of the k = 2 deletion where C(L, 2) > EXACT_SETS (L > 32)
    levels: tuple[float, ...] | None = None  # None: chosen in the range every model reaches
    n_levels: int = 5
    bootstrap: int = 1000  # resamples of the training seeds
    permutations: int = 200  # shuffles of the calibration (0: none)
    plateau_rule: bool = True  # leave out a model that never left the unigram plateau
    data: str | None = None  # a UTF-8 text file; None: the built-in corpus
    smoke: bool = False  # --quick's: a smoke test of the machinery, its verdicts no evidence

    def __post_init__(self):
        for s in self.schemes:
            if s not in VARIANTS or s == "none":
                raise ValueError(f"scheme {s!r} has no + x path to study; expected some of "
                                 f"{', '.join(SCHEMES)}")  # fmt: skip
        if len(set(self.schemes)) < len(self.schemes) or not self.schemes:
            raise ValueError(f"schemes must be distinct and at least one, got {self.schemes}")
        # -0 is 0: one model, one name (a0), not a-0 beside it
        object.__setattr__(self, "doses", _doses(self.doses, "--doses", "an alpha rezero can "
                                                 "start at", 0.0, MAX_ALPHA))  # fmt: skip
        object.__setattr__(self, "powers", _doses(self.powers, "--powers", "an exponent "
                                                  "ln-scaling can take", 0.0, 1.0))  # fmt: skip
        dosed = (("--doses", self.doses, "rezero", 0.0),
                 ("--powers", self.powers, "ln-scaling", 0.5))  # fmt: skip
        for flag, doses, scheme, alone in dosed:
            if doses != (alone,) and scheme not in self.schemes:
                raise ValueError(f"{flag} {','.join(f'{d:g}' for d in doses)} are {scheme}'s "
                                 f"dose; add {scheme} to the schemes, or give {flag} "
                                 f"{alone:g} alone")  # fmt: skip
        kept = self.max_iters // self.keep_every + 1 + (self.max_iters % self.keep_every > 0)
        if kept < 3:
            raise ValueError(f"--keep-every {self.keep_every} keeps {kept} checkpoint(s) per "
                             f"model of {self.max_iters} steps; expected at least 3, so that "
                             "a loss level falls between two")  # fmt: skip
        if len(self.seeds) < 2:
            raise ValueError(f"--seeds {','.join(map(str, self.seeds))} is {len(self.seeds)} "
                             "training seed; the analysis resamples the seeds: expected at "
                             "least 2 (5 for a verdict a referee trusts)")  # fmt: skip
        if not self.lrs or len(set(self.lrs)) < len(self.lrs):
            raise ValueError(f"--lrs {','.join(f'{x:g}' for x in self.lrs)}: expected one or "
                             "more distinct learning rates")  # fmt: skip
        if not (isinstance(self.pilot_iters, int) and self.pilot_iters >= 10):
            raise ValueError(f"--pilot-iters {self.pilot_iters!r}: expected a whole number of "
                             "steps, at least 10")  # fmt: skip
        if int(self.permutations) != self.permutations or self.permutations < 0:
            raise ValueError(f"--permutations {self.permutations!r}: expected a whole number, "
                             "0 for none")  # fmt: skip
        for lv in self.levels or ():
            if not (isinstance(lv, (int, float)) and math.isfinite(lv) and lv > 0):
                raise ValueError(f"level {lv!r} is not a loss; expected a positive number")
        for c in self.cells("."):  # every model's settings, refused before any trains
            c[1].gpt_config(vocab_size=1)
        for c in self.pilot_cells("."):
            c[1].gpt_config(vocab_size=1)

    @classmethod
    def quick(cls, **kw) -> RobustnessConfig:
        """A small study for CI: three schemes, depth 2, three seeds, two doses, 60 steps, a
        pilot of two learning rates."""
        base = dict(schemes=("pre-ln", "post-ln", "rezero"), depths=(2,), seeds=(0, 1, 2),
                    doses=(0.0, 1.0), powers=(0.5,), n_embd=16, block_size=16, batch_size=4,
                    max_iters=60, keep_every=10, lrs=(3e-3, 1e-2), pilot_iters=20,
                    windows=2, window_seeds=(0,), samples=3, n_levels=4, bootstrap=200,
                    permutations=50, plateau_rule=False, smoke=True)  # fmt: skip
        return cls(**{**base, **kw})

    @classmethod
    def from_flags(cls, quick: bool = False, variants=None, **settings) -> RobustnessConfig:
        """The study a command asks for: :meth:`quick`'s or the default, with ``settings``
        (fields by name; ``variants``, the flag's name, are the schemes). Schemes asked for
        without a dosed scheme drop its doses unless they are given too."""
        if variants is not None:
            settings["schemes"] = tuple(variants)
            for field, scheme, alone in (("doses", "rezero", 0.0), ("powers", "ln-scaling", 0.5)):
                if scheme not in settings["schemes"]:
                    settings.setdefault(field, (alone,))
        return cls.quick(**settings) if quick else cls(**settings)

    def largest_cell(self, out_dir: str) -> TrainConfig:
        """The config of the deepest model, for a memory estimate."""
        return max((c for _, c, _ in self.cells(out_dir)), key=lambda c: c.n_layer)

    def doses_of(self, scheme: str) -> tuple[float, ...]:
        """The doses ``scheme``'s models are given: rezero's alphas, ln-scaling's exponents,
        0 (none) for the others."""
        return {"rezero": self.doses, "ln-scaling": self.powers}.get(scheme, (0.0,))

    def cells(
        self, out_dir: str, lrs: dict | None = None
    ) -> list[tuple[str, TrainConfig, ModelKey]]:
        """(name, its run's config, its model key) for every model, in order; ``lrs``: the
        learning rate of each (scheme, depth), the pilot's choice (default: the first of
        :attr:`lrs`)."""
        out = []
        for s in self.schemes:
            for L in self.depths:
                lr = (lrs or {}).get((s, L), self.lrs[0])
                for dose in self.doses_of(s):
                    for seed in self.seeds:
                        name = f"{s}_L{L}_{'p' if s == 'ln-scaling' else 'a'}{dose:g}_s{seed}"
                        cfg = self._train_config(s, L, dose, seed, out_dir, name, lr,
                                                 self.max_iters)  # fmt: skip
                        out.append((name, cfg, ModelKey(s, L, float(dose), seed)))
        return out

    def pilot_cells(self, out_dir: str) -> list[tuple[str, TrainConfig, tuple[str, int, float]]]:
        """(name, its run's config, (scheme, depth, lr)) for every pilot model: each scheme
        and depth at each of :attr:`lrs`, for :attr:`pilot_iters` steps, at the scheme's
        reference dose (rezero's 0, ln-scaling's 0.5, where given; else its first), on a
        seed no model trains on; none where one learning rate is given."""
        if len(self.lrs) < 2:
            return []
        seed = max(self.seeds) + 1000
        out = []
        for s in self.schemes:
            ref = {"rezero": 0.0, "ln-scaling": 0.5}.get(s, 0.0)
            dose = ref if ref in self.doses_of(s) else self.doses_of(s)[0]
            for L in self.depths:
                for lr in self.lrs:
                    name = f"{s}_L{L}_lr{lr:g}"
                    cfg = self._train_config(s, L, dose, seed, os.path.join(out_dir, "pilot"),
                                             name, lr, self.pilot_iters, keep=False)  # fmt: skip
                    out.append((name, cfg, (s, L, float(lr))))
        return out

    def _train_config(self, scheme, L, dose, seed, out_dir, name, lr, iters,
                      keep=True) -> TrainConfig:  # fmt: skip
        dosed = {DOSED[scheme]: float(dose)} if scheme in DOSED else {}
        return TrainConfig(
            n_layer=L, n_head=self.n_head, n_embd=self.n_embd, block_size=self.block_size,
            batch_size=self.batch_size, max_iters=iters, lr=lr, min_lr=lr / 10,
            warmup_iters=min(30, iters // 5), lr_decay_iters=iters, eval_interval=iters,
            eval_iters=2 if keep else 8, variant=scheme, seed=seed, data=self.data,
            out_dir=os.path.join(out_dir, "runs", name) if keep else os.path.join(out_dir, name),
            keep_every=self.keep_every if keep else 0, **dosed,
        )  # fmt: skip

    def studies(self) -> tuple[PathsStudy, LesionStudy]:
        """The paths split and the lesion study every kept checkpoint is read with."""
        kw = dict(seq=self.block_size, batch=self.windows, seeds=self.window_seeds,
                  budget=math.inf)  # fmt: skip
        return PathsStudy(**kw), LesionStudy(
            **kw, what=("block", "delete"), ks=(2,), samples=self.samples, text_name="validation"
        )

    def seconds(self, vocab_size: int, jobs: int, pilot: bool = True) -> float:
        """An estimate of the whole study on ``jobs`` workers: their start-up
        (:data:`WORKER_START_S`, in parallel), then each model's fixed cost
        (:data:`MODEL_S`), its training (:meth:`TrainConfig.seconds`) and its studies at
        every kept checkpoint, shared among the workers; before them the pilot models', a
        second start-up and each one's fixed cost and training. Within a factor of 2 of the
        measured time: ``benchmarks/bench_estimates.py``."""
        total = 0.0
        paths, lesion = self.studies()
        for _, c, _ in self.cells("."):
            g = c.gpt_config(vocab_size)
            kept = c.max_iters // c.keep_every + 2
            total += MODEL_S + c.seconds(vocab_size)
            total += paths.cost(g, kept).seconds + lesion.cost(g, kept).seconds
        pilots = self.pilot_cells(".") if pilot else []
        total += sum(MODEL_S + c.seconds(vocab_size) for _, c, _ in pilots)
        return WORKER_START_S * (1 + bool(pilots)) + total / max(jobs, 1)


def _doses(doses, flag: str, what: str, lo: float, hi: float) -> tuple[float, ...]:
    """``doses`` as distinct floats in [lo, hi] (-0 read as 0), or refused naming ``flag``."""
    for d in doses:
        ok = isinstance(d, (int, float)) and not isinstance(d, bool) and math.isfinite(d)
        if not ok or not lo <= d <= hi:
            raise ValueError(f"{flag}: {d!r} is not {what}; expected a number in "
                             f"[{lo:g}, {hi:g}]")  # fmt: skip
    out = tuple(float(d) + 0.0 for d in doses)
    if len(set(out)) < len(out) or not out:
        raise ValueError(f"{flag} {','.join(f'{d:g}' for d in out)}: expected distinct doses")
    return out


def validation_text(text: str) -> str:
    """The last 10% of ``text``: the validation split training never sees."""
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
    L = key.depth
    for p, les in zip(psteps, lsteps):
        prow = path_table(p.result.splits)
        shares = np.array([r.share_norm for r in prow])  # (n + 1,) by k
        table = lesion_rows(les.result)
        s = lesion_summary(table)
        d2 = next(r.get("dce")[0] for r in table if r.kind == "delete" and r.k == 2)
        mean_k = float(np.arange(len(shares)) @ shares)
        # the profiles: block l's one-block lesion cost, and its two sublayers' branch share
        # (mean over the window seeds' splits)
        dce = {r.layer: r.get("dce")[0] for r in table if r.kind == "block"}  # layer -> cost
        branch = np.mean([sp.branch_share() for sp in p.result.splits], axis=0)  # (2L,)
        out.append({
            **key._asdict(), "iteration": p.iteration,
            "checkpoint": os.path.relpath(p.path, os.path.dirname(os.path.dirname(cfg.out_dir))),
            "loss": s.ce, "mean_k": mean_k,
            "share0": float(shares[0]), "share_short": float(shares[: L // 4 + 1].sum()),
            "block_dce": s.block_dce, "worst_dce": s.worst_dce, "delete2_dce": float(d2),
            "k_frac": mean_k / (2 * L), "sum_dce": L * s.block_dce,
            "diverged": bool(trained["diverged"]),
            **dict(zip(profile_metrics(LESION, L), (float(dce[b]) for b in range(L)))),
            **dict(zip(profile_metrics(BRANCH, L), map(float, branch.reshape(L, 2).mean(1)))),
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


class Runs(NamedTuple):
    """What :func:`run_cells` trained and read."""

    rows: list[dict]  # every model's row at every kept checkpoint, in the cells' order
    pilot: list[dict]  # every pilot model's row (none where one learning rate was given)
    lrs: dict[tuple[str, int], float]  # (scheme, depth) -> the learning rate it trained at
    plateau: float  # the unigram plateau of the training split, in nats


def run_cells(cfg: RobustnessConfig, out_dir: str, *, jobs: int | None = None,
              backend: str = "loky", scheduler: str | None = None,
              connect_timeout: float = 5.0, progress: bool | None = None,
              threads: int | None = None, budget: float = math.inf,
              plan: Callable[[float, str], None] | None = None) -> Runs:  # fmt: skip
    """The pilot sweep (:mod:`resgrad.lab.robustness.recipe`) into ``out_dir/pilot``, then
    every model of ``cfg`` trained into ``out_dir/runs`` at its scheme and depth's chosen
    learning rate and read at every kept checkpoint, as rows (:data:`ROW_FIELDS`, the
    profiles, whether it diverged), in the cells' order. A model finished before, with the
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
    from resgrad.lab.experiments.grid import check_backend, connected, parallelism
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
    jobs = check_backend(jobs, backend, scheduler, connect_timeout)
    # the cluster reached before the estimate, which counts its workers, and before any file
    with connected(backend, scheduler, connect_timeout) as client:
        grid = dict(jobs=jobs, backend=backend, scheduler=scheduler,
                    connect_timeout=connect_timeout, progress=progress, threads=threads,
                    client=client)  # fmt: skip
        return _run_study(cfg, out_dir, side, corpus, parallelism(jobs, client), grid, budget,
                          plan)  # fmt: skip


def _run_study(cfg: RobustnessConfig, out_dir: str, side: str, corpus, workers: int,
               grid: dict, budget: float, plan) -> Runs:  # fmt: skip
    """:func:`run_cells` once its arguments are checked and its cluster reached: the
    estimate on ``workers``, the pilot and every model through :func:`run_grid` (``grid``:
    its backend's arguments)."""
    from resgrad.formats.lock import lock_dir, new_dir_or_nothing
    from resgrad.lab.experiments.grid import sidecar_is_empty
    from resgrad.lab.robustness.recipe import choose_lrs, pilot_cell
    from resgrad.train.data import unigram_entropy

    V = corpus.tokenizer.vocab_size
    cells, pilots = cfg.cells(out_dir), cfg.pilot_cells(out_dir)
    seconds = cfg.seconds(V, workers)
    kept = cfg.max_iters // cfg.keep_every + 1 + (cfg.max_iters % cfg.keep_every > 0)
    work = f"{len(cells)} models of {cfg.max_iters} steps, each read at {kept} checkpoints"
    work += f", after {len(pilots)} pilot models of {cfg.pilot_iters}" if pilots else ""
    refuse_over_budget(seconds, budget, f"this study ({len(cells)} models)", work,
                       "pass --budget {seconds} to allow it, or ask for fewer models or "
                       "steps")  # fmt: skip
    for _, c, _ in cells:  # a model trained before with other settings: refused, never mixed
        last = os.path.join(c.out_dir, LAST)
        if os.path.exists(last):  # its learning rate is the pilot's, checked once chosen
            _check_same_cell(c, last, corpus, also=("lr", "min_lr"))
    # the limit decides delete2_dce's sets (every one at these depths): rows read under another
    # limit, or laid out otherwise, are read again
    lesion_key = {**dataclasses.asdict(cfg.studies()[1]), "exact_sets": EXACT_SETS,
                  "rows": ROW_VERSION}  # fmt: skip
    studies = json.dumps(lesion_key, sort_keys=True, default=str)
    said: list[bool] = []

    def ready(secs: float, unit: str):  # the plan said once, by the first grid with work
        def say(left: int, total: int) -> None:
            if plan and left and not said:
                said.append(True)
                plan_left(plan, secs, work, unit)(left, total)

        return say

    # a study refused before a model finished (no scheduler, Ctrl-C at once) leaves nothing
    with (
        new_dir_or_nothing(out_dir, disposable=sidecar_is_empty),
        lock_dir(out_dir, "study directory"),
    ):
        pilot_rows, lrs = [], {}
        if pilots:
            os.makedirs(os.path.join(out_dir, "pilot"), exist_ok=True)
            keys = [cell_key(c, corpus.sha256) for _, c, _ in pilots]
            done = run_grid([(k, (c, g)) for k, (_, c, g) in zip(keys, pilots)], pilot_cell,
                            sidecar_path(os.path.join(out_dir, "pilot", "pilot.csv")),
                            desc="robustness: pilot", ready=ready(seconds, "pilot models"),
                            **grid)  # fmt: skip
            pilot_rows = [r for k in keys for r in done.done[k]]
            lrs = choose_lrs(pilot_rows)
            cells = cfg.cells(out_dir, lrs)
            for _, c, _ in cells:  # now with the learning rate chosen
                last = os.path.join(c.out_dir, LAST)
                if os.path.exists(last):
                    _check_same_cell(c, last, corpus)
        keys = [cell_key(c, corpus.sha256) + studies for _, c, _ in cells]
        points = [(c, k, cfg, corpus.text) for _, c, k in cells]
        main = cfg.seconds(V, workers, pilot=False)
        done = run_grid(list(zip(keys, points)), measure_cell, side,
                        desc=f"robustness (about {format_seconds(seconds)})",
                        check=_stale_rows(out_dir), ready=ready(main, "models"),
                        sizes=dict.fromkeys(keys, kept), unit="checkpoint", **grid)  # fmt: skip
        # the text the studies read, so that a point can be read again with resgrad paths
        atomic_write_text(os.path.join(out_dir, "validation.txt"), validation_text(corpus.text))
    train = corpus.text[: int(len(corpus.text) * (1 - VAL_FRACTION))]
    return Runs([r for k in keys for r in done.done[k]], pilot_rows,
                lrs or {(s, L): cfg.lrs[0] for s in cfg.schemes for L in cfg.depths},
                unigram_entropy(train))  # fmt: skip


# what a study writes in its out-dir; found there without its cache, a study did not write them
STUDY_FILES = ("validation.txt", "checkpoints.csv", "runs", "pilot")


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
