"""Mutants of the lab (sweep, experiments, claims, runs, flow, explore) and of the training
files it stands on (config, optim, data, checkpoint, the dynamics header, the sampler's
context): statistics written to tables, order-sensitive outputs, refusals, bounds, cache
keys, and the workers of a grid."""

# ruff: noqa: E501  (each mutant quotes its source text verbatim)

from mutation import (
    CHECKPOINT,
    CLAIMS,
    CLI_LAB,
    EXPERIMENTS,
    EXPLORE,
    FLOW,
    OPTIM,
    RUNS,
    SWEEP,
    Mutant,
)

CONFIG = ("tests/train/test_config.py",)
LIMITS = ("tests/train/test_limits.py",)
S, E, C, R, F = (
    "lab/experiments/sweep.py",
    "lab/experiments/experiment.py",
    "lab/experiments/claims.py",
    "lab/experiments/compare.py",
    "lab/flow/core.py",
)

# AdamW's load_state_dict: every array checked, then all taken (a refusal takes nothing)
_CHECK_THEN_TAKE = """        for k, p in self.params.items():  # every array checked before any is taken
            for s in "mv":
                a = state[f"{s}.{k}"]
                if a.shape != p.shape or a.dtype != p.dtype:
                    raise ValueError(
                        f"optimizer state {s}.{k} has shape {a.shape} {a.dtype}, "
                        f"expected {p.shape} {p.dtype}"
                    )
        for k in self.params:
            self.m[k] = np.array(state[f"m.{k}"], copy=True, order="C")
            self.v[k] = np.array(state[f"v.{k}"], copy=True, order="C")
"""
_TAKE_WHILE_CHECKING = """        for k, p in self.params.items():
            for s, buf in (("m", self.m), ("v", self.v)):
                a = state[f"{s}.{k}"]
                if a.shape != p.shape or a.dtype != p.dtype:
                    raise ValueError(
                        f"optimizer state {s}.{k} has shape {a.shape} {a.dtype}, "
                        f"expected {p.shape} {p.dtype}"
                    )
                buf[k] = np.array(a, copy=True, order="C")
"""

MUTANTS = [
    # -- lab/experiments/claims.py (4)
    Mutant('claims: update_size relative to the moved output', 'lab/experiments/claims.py',
           'np.linalg.norm(x1 - x0) / np.linalg.norm(x0)',
           'np.linalg.norm(x1 - x0) / np.linalg.norm(x1)', CLAIMS, 'formula'),
    Mutant('claims: the SGD step moves the embeddings too', 'lab/experiments/claims.py',
           '        if k.startswith("blocks."):\n            gpt.params[k] = gpt.params[k] - lr * g',
           '        if True:\n            gpt.params[k] = gpt.params[k] - lr * g', CLAIMS, 'formula'),
    Mutant('claims: unscaled init undoes 1/sqrt(L), not 1/sqrt(2L)', 'lab/experiments/claims.py',
           'p * math.sqrt(2 * depth)',
           'p * math.sqrt(depth)', CLAIMS, 'formula'),
    Mutant('claims: the spread is the population std', 'lab/experiments/claims.py',
           'return statistics.stdev(self.values)',
           'return statistics.pstdev(self.values)', CLAIMS, 'statistics'),
    # -- lab/flow/explore.py (2)
    Mutant("explore: gain 1 records read 'gpt2 x1'", 'lab/flow/explore.py',
           'if cfg.is_lesson or gain == 1.0:',
           'if cfg.is_lesson:', EXPLORE, 'names'),
    Mutant("explore: overflow note counts every quantity's layers", 'lab/flow/explore.py',
           'if r.quantity == quantity and not all(math.isfinite(v) for v in vals):',
           'if not all(math.isfinite(v) for v in vals):', EXPLORE, 'statistics'),
    # -- lab/experiments/compare.py (3)
    Mutant('runs: the compare profile averages the first steps', 'lab/experiments/compare.py',
           'prof = np.nanmean(np.where(np.isfinite(vals[-n:]), vals[-n:], np.nan), axis=0)',
           'prof = np.nanmean(np.where(np.isfinite(vals[:n]), vals[:n], np.nan), axis=0)', RUNS, 'statistics'),
    Mutant('runs: labels name the out_dir as a difference', 'lab/experiments/compare.py',
           'keys = sorted({k for c in configs for k in c} - set(_NOT_A_DIFFERENCE))',
           'keys = sorted({k for c in configs for k in c})', RUNS, 'names'),
    Mutant("runs: a 1-step run's heatmap lines get no marker", 'lab/experiments/compare.py',
           'point = {"marker": "o", "ms": 4} if len(steps) == 1 else {}',
           'point = {"marker": "o", "ms": 4} if len(steps) == 0 else {}', RUNS, 'records'),
    # -- lab/experiments/sweep.py (6)
    Mutant('sweep: the sidecar append is not flushed', 'lab/experiments/grid.py',
           '    f.write(_sidecar_line(key, rows))\n    f.flush()\n',
           '    f.write(_sidecar_line(key, rows))\n', SWEEP, 'durability'),
    Mutant('sweep: the sidecar append is not fsynced', 'lab/experiments/grid.py',
           '    f.flush()\n    os.fsync(f.fileno())',
           '    f.flush()', SWEEP, 'durability'),
    Mutant('sweep: the torn-tail rewrite drops the header', 'lab/experiments/grid.py',
           'kept = [_SIDECAR_HEADER] + [_sidecar_line(k, r) for k, r in done.items()]',
           'kept = [_sidecar_line(k, r) for k, r in done.items()]', SWEEP, 'durability'),
    Mutant('sweep: workers never start the parent-death watchdog', 'lab/experiments/grid.py',
           '        _die_with_parent(parent)\n',
           '        pass\n', CLI_LAB, 'concurrency'),
    Mutant('sweep: the SIGTERM handler is never installed', 'lab/experiments/grid.py',
           '    signal.signal(signal.SIGTERM, handler)\n    try:',
           '    try:', CLI_LAB, 'concurrency'),
    Mutant('sweep: seeds used as indices 0..K-1', 'lab/experiments/sweep.py',
           'for s in self.seeds',
           'for s in range(len(self.seeds))', SWEEP, 'formula'),
    # -- lab/experiments/experiment.py (53)
    Mutant("experiments: grad_block0 is the last block's gradient", 'lab/experiments/experiment.py',
           'grad0 = float(np.mean(dyn["grad"][-n:, 0]))',
           'grad0 = float(np.mean(dyn["grad"][-n:, -1]))', EXPERIMENTS, 'records'),
    Mutant('experiments: the last 10% of steps is one step too many', 'lab/experiments/experiment.py',
           'n = max(1, len(dyn.steps) // 10)',
           'n = len(dyn.steps) // 10 + 1', EXPERIMENTS, 'bounds'),
    Mutant("experiments: best_val_loss is the last evaluation's", 'lab/experiments/experiment.py',
           'best_val_loss=last.get("best_val_loss")',
           'best_val_loss=last.get("val_loss")', EXPERIMENTS, 'formula'),
    Mutant('experiments: seeds used as indices 0..K-1', 'lab/experiments/experiment.py',
           'for s in self.seeds:',
           'for s in range(len(self.seeds)):', EXPERIMENTS, 'formula'),
    Mutant('experiments: val_min/val_max count the diverged seeds', 'lab/experiments/experiment.py',
           '"val_min": min(ok) if ok else None, "val_max": max(ok) if ok else None,',
           '"val_min": min(r["val_loss"] for r in rs) if ok else None,\n            "val_max": max(r["val_loss"] for r in rs) if ok else None,', EXPERIMENTS, 'statistics'),
    # -- statistics written to tables and plots
    Mutant("experiments: the summary's std is the population std (ddof=0)", E,
           '"val_std": statistics.stdev(ok) if len(ok) > 1 else None,',
           '"val_std": statistics.pstdev(ok) if len(ok) > 1 else None,', EXPERIMENTS,
           "statistics"),
    Mutant("experiments: the summary's mean is the median", E,
           '"val_mean": statistics.mean(ok) if ok else None,',
           '"val_mean": statistics.median(ok) if ok else None,', EXPERIMENTS, "statistics"),
    Mutant("experiments: the summary's range is the first and last seed's", E,
           '"val_min": min(ok) if ok else None, "val_max": max(ok) if ok else None,',
           '"val_min": ok[0] if ok else None, "val_max": ok[-1] if ok else None,', EXPERIMENTS,
           "statistics"),
    Mutant("experiments: the figure's curves are the median over the seeds", E,
           "mean = [np.mean([v for run in runs for i2, v in run if i2 == i]) for i in iters]",
           "mean = [np.median([v for run in runs for i2, v in run if i2 == i]) for i in iters]",
           EXPERIMENTS, "statistics"),
    Mutant("experiments: the figure's error bars are the standard error, not the std", E,
           'es = [s["val_std"] or 0.0 for s in ss if s["val_mean"] is not None]',
           'es = [(s["val_std"] or 0.0) / len(cfg.seeds) ** 0.5 for s in ss\n'
           '              if s["val_mean"] is not None]', EXPERIMENTS, "statistics"),
    Mutant("claims: the mean is the median", C,
           "return statistics.mean(self.values)",
           "return statistics.median(self.values)", CLAIMS, "statistics"),
    Mutant("claims: the table's range is the first and last seed's", C,
           '| {min(r.values):.3g} .. {max(r.values):.3g} |',
           '| {r.values[0]:.3g} .. {r.values[-1]:.3g} |', CLAIMS, "statistics"),
    Mutant("flow: the range over the seeds is the first and last seed's", "lab/flow/core.py",
           "mean, std, lo, hi = v.mean(0), v.std(0), v.min(0), v.max(0)  # (n,) each",
           "mean, std, lo, hi = v.mean(0), v.std(0), v[0], v[-1]  # (n,) each", FLOW,
           "statistics"),
    Mutant("flow: the mean over the seeds is the median", "lab/flow/core.py",
           "mean, std, lo, hi = v.mean(0), v.std(0), v.min(0), v.max(0)  # (n,) each",
           "mean, std, lo, hi = np.median(v, 0), v.std(0), v.min(0), v.max(0)  # (n,) each",
           FLOW, "statistics"),
    Mutant("flow: the table prints min and max swapped", "lab/flow/report.py",
           "{g.min:>10.3e} | \"\n                f\"{g.max:>10.3e}",
           "{g.max:>10.3e} | \"\n                f\"{g.min:>10.3e}", FLOW, "statistics"),
    Mutant("sweep: the plot's band is mean ± std, not min..max", "lab/experiments/sweep.py",
           "lo=[float(a.min()) for a in vals] if band else None,",
           "lo=[float(a.mean() - a.std()) for a in vals] if band else None,", SWEEP,
           "statistics"),
    Mutant("sweep: the plot's line is the median over the seeds", "lab/experiments/sweep.py",
           "y=[float(a.mean()) for a in vals],",
           "y=[float(np.median(a)) for a in vals],", SWEEP, "statistics"),
    Mutant("runs: the compare profile averages non-finite steps in", R,
           "prof = np.nanmean(np.where(np.isfinite(vals[-n:]), vals[-n:], np.nan), axis=0)",
           "prof = np.nanmean(vals[-n:], axis=0)", RUNS, "statistics"),
    Mutant("runs: the compare profile is the median of the last steps", R,
           "prof = np.nanmean(np.where(np.isfinite(vals[-n:]), vals[-n:], np.nan), axis=0)",
           "prof = np.nanmedian(np.where(np.isfinite(vals[-n:]), vals[-n:], np.nan), axis=0)",
           RUNS, "statistics"),
    Mutant("runs: a tail shorter than one step averages every step", R,
           "n = max(1, int(round(tail * len(vals))))",
           "n = int(round(tail * len(vals)))", RUNS, "statistics"),
    # -- order-sensitive outputs
    Mutant("sweep: rows in the order the points finished", "lab/experiments/sweep.py",
           'rows = [r for k in keys for r in grid.done[k]]\n        text',
           'rows = [r for rs in grid.done.values() for r in rs]\n        text', SWEEP,
           "ordering"),
    Mutant("experiments: cells in the order they finished", E,
           "rows = [r for k in keys for r in grid.done[k]]",
           "rows = [r for rs in grid.done.values() for r in rs]", EXPERIMENTS, "ordering"),
    Mutant("experiments: summary groups sorted, not in grid order", E,
           "for key, rs in groups.items():",
           "for key, rs in sorted(groups.items()):", EXPERIMENTS, "ordering"),
    Mutant("experiments: the error bars in grid order, not along the axis", E,
           "ss = sorted(ss, key=lambda s: s[x_key])",
           "ss = list(ss)", EXPERIMENTS, "ordering"),
    Mutant("sweep: the plot's depths in grid order, not increasing", "lab/experiments/sweep.py",
           "depths = sorted(by_depth)",
           "depths = list(by_depth)", SWEEP, "ordering"),
    Mutant("runs: labels name the settings in the first config's order", R,
           "keys = sorted({k for c in configs for k in c} - set(_NOT_A_DIFFERENCE))",
           "keys = [k for k in dict.fromkeys(k for c in configs for k in c)\n"
           "            if k not in _NOT_A_DIFFERENCE]", RUNS, "ordering"),
    Mutant("sweep: the grid's depths vary slowest", "lab/experiments/sweep.py",
           "            for v in self.variants\n            for d in self.depths\n",
           "            for d in self.depths\n            for v in self.variants\n", SWEEP,
           "ordering"),
    Mutant("experiments: the grid's depths vary slowest", E,
           "for v in self.variants:\n            for L in self.depths:",
           "for L in self.depths:\n            for v in self.variants:", EXPERIMENTS,
           "ordering"),
    # -- refusals dropped or weakened
    Mutant("sweep: a variant given twice is measured twice", "lab/experiments/sweep.py",
           "if len(set(variants)) != len(variants):",
           "if False:", SWEEP, "refusal"),
    Mutant("experiments: a variant given twice is run twice", E,
           "        if len(set(self.variants)) != len(self.variants):  # two cells would share a "
           "directory\n            raise",
           "        if False:\n            raise", EXPERIMENTS, "refusal"),
    Mutant("experiments: two lrs that name the same cell are accepted", E,
           "if twice is not None:\n            raise ValueError(\n                f\"lrs must",
           "if False:\n            raise ValueError(\n                f\"lrs must", EXPERIMENTS,
           "refusal"),
    Mutant("experiments: a rerun on another text at the same path is not refused", E,
           'if ckpt.extra.get("data_sha256") != corpus.sha256:',
           "if False:", EXPERIMENTS, "refusal"),
    Mutant("claims: a depth given twice is measured twice", C,
           '    depths = positive_ints("depths", depths)\n',
           "", CLAIMS, "refusal"),
    Mutant("flow: a size given twice is accepted by the grids", "lab/flow/core.py",
           "    if len(set(out)) != len(out):\n        raise ValueError(f\"{name} must be distinct",
           "    if False:\n        raise ValueError(f\"{name} must be distinct", SWEEP + CLAIMS,
           "refusal"),
    Mutant("dynamics: the header's version is not checked", "train/dynamics.py",
           "if type(version) is not int or version != VERSION:",
           "if False:", LIMITS, "refusal"),
    Mutant("dynamics: a version of another type equal to 1 (1.0, True) is read", "train/dynamics.py",
           "if type(version) is not int or version != VERSION:",
           "if version != VERSION:", LIMITS, "refusal"),
    Mutant("optim: moments of another dtype are taken", "train/optim.py",
           "if a.shape != p.shape or a.dtype != p.dtype:",
           "if a.shape != p.shape:", OPTIM + CHECKPOINT, "refusal"),
    Mutant("optim: a refused state is half taken", "train/optim.py",
           _CHECK_THEN_TAKE, _TAKE_WHILE_CHECKING, OPTIM, "refusal"),
    Mutant("optim: a step count that is no integer is taken", "train/optim.py",
           "if step.shape != () or not np.issubdtype(step.dtype, np.integer) or step < 0:",
           "if step.shape != ():", OPTIM, "refusal"),
    Mutant("runs: the compare tail is not checked", R,
           "not 0 < tail <= 1:\n        raise",
           "False:\n        raise", RUNS, "refusal"),
    Mutant("runs: a negative layer is drawn from the end", R,
           "if not 0 <= i < n_layer:",
           "if not i < n_layer:", RUNS, "refusal"),
    # -- bounds off by one
    Mutant("config: a run of zero steps is refused", "train/config.py",
           '"batch_size": 1, "max_iters": 0,', '"batch_size": 1, "max_iters": 1,', CONFIG,
           "bounds"),
    Mutant("flow: the last token of the vocabulary is refused", "lab/flow/core.py",
           "seq.min() < 0 or seq.max() >= V:", "seq.min() < 0 or seq.max() >= V - 1:", FLOW,
           "bounds"),
    Mutant("dynamics: an older version than the current is read", "train/dynamics.py",
           "if type(version) is not int or version != VERSION:",
           "if type(version) is not int or version > VERSION:", LIMITS, "bounds"),
    # -- keys of cached results
    Mutant("sweep: a finished point is reused at another vocabulary", "lab/experiments/sweep.py",
           '{**cfg.describe(), "vocab": cfg.vocab, "seed": cfg.seeds[0]}',
           '{**cfg.describe(), "seed": cfg.seeds[0]}', SWEEP, "cache"),
    Mutant("sweep: a finished point is reused at another seed", "lab/experiments/sweep.py",
           '{**cfg.describe(), "vocab": cfg.vocab, "seed": cfg.seeds[0]}',
           '{**cfg.describe(), "vocab": cfg.vocab}', SWEEP, "cache"),
    Mutant("experiments: a finished cell is reused at another eval_iters", E,
           '_NOT_IN_KEY = ("out_dir", "resume")',
           '_NOT_IN_KEY = ("out_dir", "resume", "eval_iters")', EXPERIMENTS, "cache"),
    Mutant("experiments: a finished cell is reused on another text", E,
           'return json.dumps({**settings, "data_sha256": data_sha256}, sort_keys=True)',
           "return json.dumps(settings, sort_keys=True)", EXPERIMENTS, "cache"),
    Mutant("experiments: cells keyed by their name's settings alone", E,
           "keys = [cell_key(c, corpus.sha256) for _, c in cells]",
           "keys = [json.dumps([c.variant, c.n_layer, c.lr, c.warmup_iters, c.seed])\n"
           "            for _, c in cells]", EXPERIMENTS, "cache"),
    # -- the workers of a grid
    Mutant("sweep: a worker whose parent died before its task runs it as an orphan", "lab/experiments/grid.py",
           "if os.getppid() != parent:  # the parent died before this task started\n"
           "        os._exit(1)",
           "if os.getppid() != parent:  # the parent died before this task started\n"
           "        return", SWEEP, "concurrency"),
    Mutant("sweep: the watchdog looks for its parent every 10 s", "lab/experiments/grid.py",
           "while os.getppid() == parent:\n            time.sleep(0.1)",
           "while os.getppid() == parent:\n            time.sleep(10)", SWEEP, "concurrency"),
    Mutant("sweep: a worker's progress bars lock with a named semaphore", "lab/experiments/grid.py",
           "        _die_with_parent(parent)\n        _bars_lock_threads_only()\n",
           "        _die_with_parent(parent)\n", CLI_LAB, "concurrency"),
    Mutant("sweep: workers watch the grid's own parent", "lab/experiments/grid.py",
           "n_jobs, parent = min(jobs, len(todo)), os.getpid()",
           "n_jobs, parent = min(jobs, len(todo)), os.getppid()", SWEEP, "concurrency"),
]  # fmt: skip
