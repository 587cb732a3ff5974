"""Mutants of the performance helpers (src/resgrad/perf/bench.py): what the benchmarks time
and how their figures are made."""

from mutation import SAMPLE, Mutant

T = ("tests/perf/test_bench.py",)
F = "perf/bench.py"
S = ("tests/train/test_share.py",)
OPTIM = "train/optim.py"
SAMPLING = "train/sample.py"
STUDY = ("tests/cli/test_cli_paths.py", "tests/cli/test_cli_lesion.py",
         "tests/cli/test_cli_paths_training.py")  # fmt: skip
COMMON = "cli/_common.py"

MUTANTS = [
    Mutant("bench: the resgrad step leaves out the trainer's dynamics", F,
           "tc.grad_clip, None, dynamics=True,", "tc.grad_clip, None, dynamics=False,", T,
           "formula"),
    Mutant("bench: the resgrad step does not clip", F,
           "tc.lr, tc.grad_clip, None, dynamics=True,", "tc.lr, 0.0, None, dynamics=True,", T,
           "formula"),
    Mutant("bench: the resgrad step trains on one batch throughout", F,
           "            x, y = get_batch(data, cfg.block_size, cfg.batch_size, rng)  # (B, T)",
           "            x, y = get_batch(data, cfg.block_size, cfg.batch_size,"
           " np.random.default_rng(seed))", T, "formula"),
    Mutant("bench: a step's figure is the mean, not the median", F,
           "    med = statistics.median(times)", "    med = statistics.mean(times)", T,
           "statistics"),
    Mutant("bench: the ceiling leaves out the whole square of attention", F,
           "return 3 * L * B * T * (2 * T * C)", "return 3 * L * B * T * (4 * T * C)", T,
           "formula"),
    # the gradient norms shared among the shards' threads (train/optim.py: share)
    Mutant("share: the norms come back in the threads' order, not the keys'", OPTIM,
           "    return {k: found[k] for k in arrays}", "    return found", S, "ordering"),
    Mutant("share: shared as soon as the total passes one part's minimum", OPTIM,
           "if pool is None or parts < 2 or total < parts * MIN_SHARE:",
           "if pool is None or parts < 2 or total < MIN_SHARE:", S, "bounds"),
    Mutant("share: each array to the most loaded thread", OPTIM,
           "        j = load.index(min(load))", "        j = load.index(max(load))", S, "formula"),
    # greedy decoding's shortcut (train/sample.py: sample_token at top_k=1)
    Mutant("greedy: the shortcut skips the uniform the CDF would draw", SAMPLING,
           "                rng.random((z.shape[0], 1))  # the draw the CDF below would take",
           "                pass  # the draw the CDF below would take", SAMPLE, "ordering"),
    Mutant("greedy: a tie at the max goes to the first tied token", SAMPLING,
           "if np.isfinite(zmax).all() and ((z == zmax).sum(axis=-1) == 1).all():",
           "if np.isfinite(zmax).all():", SAMPLE, "formula"),
    # the flags paths and lesion share (cli/_common.py: add_study_output)
    Mutant("study flags: --budget's default is a tenth of the budget", COMMON,
           "        default=TIME_BUDGET_S,\n", "        default=TIME_BUDGET_S / 10,\n", STUDY,
           "bounds"),
    Mutant("study flags: --every-checkpoint is on unless given", COMMON,
           '"--every-checkpoint",\n        action="store_true",',
           '"--every-checkpoint",\n        action="store_false",', STUDY, "names"),
]  # fmt: skip
