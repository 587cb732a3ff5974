"""Mutants of the equal-loss robustness study (src/resgrad/lab/robustness/): the levels and
their interpolation, the statistics and the verdict, the models' runs and their cache."""

from mutation import Mutant

STATS = ("tests/lab/test_robustness_stats.py",)
STUDY = ("tests/lab/test_robustness_study.py",)
LEVELS = "lab/robustness/levels.py"
STAT = "lab/robustness/stats.py"
REGR = "lab/robustness/regression.py"
EXP = "lab/robustness/experiment.py"

MUTANTS = [
    # the levels: which range, which crossing, which weight
    Mutant("robustness: the common range's floor is the lowest model's, not the highest's", LEVELS,
           "lo, hi = float(lows.max()), float(highs.min())",
           "lo, hi = float(lows.min()), float(highs.min())", STATS, "bounds"),
    Mutant("robustness: the common range's ceiling is the highest start", LEVELS,
           "lo, hi = float(lows.max()), float(highs.min())",
           "lo, hi = float(lows.max()), float(highs.max())", STATS, "bounds"),
    Mutant("robustness: the last crossing is read, not the first", LEVELS,
           "i = int(np.argmax(crosses))  # the first crossing in training order",
           "i = len(crosses) - 1 - int(np.argmax(crosses[::-1]))  # the first crossing in training order",
           STATS, "ordering"),
    Mutant("robustness: the interpolation weight measured from the later checkpoint", LEVELS,
           "w = 0.0 if span == 0 else float((level - loss[i]) / span)",
           "w = 0.0 if span == 0 else float((level - loss[i + 1]) / span)", STATS, "formula"),
    # the statistics: ranks, direction, the bootstrap's unit, the verdict's side
    Mutant("robustness: tied values get their first rank, not the mean of theirs", STAT,
           "out[order] = ((first + last) / 2 + 1)[np.cumsum(new) - 1]",
           "out[order] = (first + 1)[np.cumsum(new) - 1]", STATS, "statistics"),
    Mutant("robustness: the bootstrap draws without replacement (every resample the data)", REGR,
           "pick = tuple(sorted(rng.integers(0, len(ids), len(ids)).tolist()))  # (C,)",
           "pick = tuple(range(len(ids)))  # (C,)", STATS, "statistics"),
    Mutant("robustness: a positive path coefficient reads as contradicting the claim", STAT,
           "    if lo > 0:", "    if hi < 0:", STATS, "formula"),
    # the runs: what a row holds, what the cache keys on, what is refused before training
    Mutant("robustness: a checkpoint's loss is the lesion study's worst block, not the intact CE", EXP,
           '"loss": s.ce, "mean_k"', '"loss": s.ce + s.worst_dce, "mean_k"', STUDY, "records"),
    Mutant("robustness: two kept checkpoints are taken as enough", EXP,
           "        if kept < 3:", "        if kept < 2:", STUDY, "bounds"),
    Mutant("robustness: doses are taken without their scheme among the schemes", EXP,
           "if doses != (alone,) and scheme not in self.schemes:",
           "if False:", STUDY, "refusal"),
    Mutant("robustness: the budget is not checked before the models train", EXP,
           "    refuse_over_budget(seconds, budget,", "    (seconds, budget,", STUDY, "refusal"),
]  # fmt: skip
