"""Every refusal the studies give (``paths``, ``lesion``, ``flow`` and the protocol they
share), each in one place: its one-line message and an example of it.

A refusal is raised where it applies, with the values of the situation::

    raise K_OUT_OF_RANGE(value=k, lo=1, hi=L)

and its text lives here alone. :data:`ALL` lists them in the order the errors page of the
documentation shows them (``docs/guide/errors.md``, drawn from here by
``docs/_ext/refusals.py``), each message made from its :attr:`Refusal.example` and
printed as its command prints it (``resgrad lesion: error: ...``); a test holds every
refusal of this module in :data:`ALL`, and every study module free of a message of its own
(``tests/lab/test_refusals.py``).

Pieces that depend on the situation (a plural, ``" (the default)"``, the counts of the
budget refusal, a list of names joined) are made where the refusal is raised and passed
as values.
"""

# Not here: the refusals the studies share with every command, each already one place of
# its own: a flag the rest of the command makes meaningless (resgrad.cli._common.refuse_with),
# a model too large for memory (resgrad.perf.memory.require), a SOURCE that names nothing
# (resgrad.train.source), a --plot that cannot be written (resgrad.plots.check_plot_path).
# No raise of the studies' modules is left with a message of its own.

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ALL", "Refusal"]


@dataclass(frozen=True)
class Refusal:
    """One refusal: a one-line message, a template of the values that make it.

    Parameters
    ----------
    key : str
        Its name, e.g. ``"unlike-runs"``.
    study : str
        The study or shared part that gives it: ``"budget"``, ``"windows"``, ``"runs"``
        (the protocol every study shares), ``"paths"``, ``"lesion"`` or ``"flow"``.
    command : str
        The command whose line the errors page shows (``resgrad COMMAND: error: ...``), or
        ``""`` for a refusal of the library that no command reaches.
    text : str
        The message, a ``str.format`` template of named fields (format specs included:
        ``{count:,}``, ``{name!r}``).
    example : dict
        Values of the fields that make the message the errors page shows.
    exc : type
        The exception raised (``ValueError``, or e.g. ``NotADirectoryError``).
    """

    key: str
    study: str
    command: str
    text: str
    example: dict[str, Any] = field(hash=False)
    exc: type[Exception] = ValueError

    def message(self, **values: Any) -> str:
        """The one-line message for ``values`` (every field of :attr:`text`)."""
        return self.text.format(**values)

    def __call__(self, **values: Any) -> Exception:
        """The exception to raise, its message made of ``values``:
        ``raise REFUSAL(field=value, ...)``."""
        return self.exc(self.message(**values))


# --------------------------------------------------------------------------- long jobs, runs
# (the parts every study shares: resgrad.lab.study.budget, .windows, .runs, .protocol)

#: work estimated over the budget (:func:`resgrad.lab.study.budget.refuse_over_budget`);
#: ``more`` says how to ask for the time it would take
OVER_BUDGET = Refusal(
    "over-budget", "budget", "paths",
    "{what} would take about {estimate} ({counts}; an estimate), more than the budget of "
    "{budget}; {more}",
    {"what": "the lesson's stack of depth 20 (1 split and --veit 1,000,000,000 sampled paths "
             "per k)",
     "estimate": "48.9 days", "counts": "210,000,000,210 branch VJPs", "budget": "10.0 min",
     "more": "pass --budget 5285841 to allow it, or ask for less"},
)  # fmt: skip
#: windows longer than the model's positions; ``given`` is ``" (the default)"`` or ``""``
SEQ_TOO_LONG = Refusal(
    "seq-too-long", "windows", "paths",
    "--seq {seq}{given} is longer than the model's {positions} positions; pass --seq "
    "{positions} or less",
    {"seq": 64, "given": " (the default)", "positions": 16},
)  # fmt: skip
#: runs unlike the first (:func:`resgrad.lab.study.runs.check_comparable`)
UNLIKE_RUNS = Refusal(
    "unlike-runs", "runs", "paths",
    "{kind} {name!r} has {field} {value}, {kind} {first!r} has {first_value}: only {kind}s "
    "of one model on one text are compared",
    {"kind": "run", "name": "B", "field": "scheme", "value": "post-ln", "first": "A",
     "first_value": "pre-ln"},
)  # fmt: skip
#: one run directory given twice (``run/`` and ``./run`` are one run)
RUN_GIVEN_TWICE = Refusal(
    "run-given-twice", "runs", "paths",
    "run directory {run!r} is given twice; each run counts once",
    {"run": "run/"},
)  # fmt: skip
#: two run directories that hold one run (a copy): the same seed, settings and text
SAME_RUN_TWICE = Refusal(
    "same-run-twice", "runs", "paths",
    "run directories {first!r} and {run!r} hold the same run (the same seed, settings and "
    "text: a copy); each run counts once",
    {"first": "run/", "run": "run-copy/"},
)  # fmt: skip
#: two SOURCE models with the same weights, bit for bit (a copy)
SAME_MODEL_TWICE = Refusal(
    "same-model-twice", "runs", "lesion",
    "SOURCE {source!r} holds the same weights as {first!r} (a copy); each model counts once",
    {"source": "run-copy", "first": "run"},
)  # fmt: skip
#: a kept checkpoint unlike its run's first
NOT_ONE_RUN = Refusal(
    "not-one-run", "runs", "paths",
    "{kind} {name!r} has {field} {value}, {kind} {first!r} has {first_value}: not one run",
    {"kind": "checkpoint", "name": "run/ckpt-200.ckpt", "field": "width (n_embd)",
     "value": 32, "first": "run/ckpt-100.ckpt", "first_value": 16},
)  # fmt: skip
#: one SOURCE given twice, as typed
SOURCE_GIVEN_TWICE = Refusal(
    "source-given-twice", "runs", "lesion",
    "SOURCE {source!r} is given twice; each model counts once",
    {"source": "lesson"},
)  # fmt: skip
#: a run directory that is not a directory
NOT_A_RUN_DIRECTORY = Refusal(
    "not-a-run-directory", "runs", "paths",
    "{run!r} is not a directory (expected a training run's)",
    {"run": "out/last.ckpt"},
    NotADirectoryError,
)  # fmt: skip
#: a run directory that kept no ckpt-<iter>.ckpt
NO_KEPT_CHECKPOINT = Refusal(
    "no-kept-checkpoint", "runs", "paths",
    "{run!r} keeps no checkpoint per step (ckpt-<iter>.ckpt); train it with --keep-every N",
    {"run": "out"},
)  # fmt: skip
#: runs compared through training that kept no iteration in common
NO_COMMON_ITERATION = Refusal(
    "no-common-iteration", "runs", "paths",
    "the runs kept no iteration in common; train them with the same --keep-every",
    {},
)  # fmt: skip
#: --every-checkpoint of the lesson's stack, which has no checkpoints
EVERY_CHECKPOINT_LESSON = Refusal(
    "every-checkpoint-lesson", "runs", "lesion",
    "--every-checkpoint reads a training run's directory, not the lesson",
    {},
)  # fmt: skip
#: a text too short for one window; ``need`` is ``seq + 1``
TEXT_TOO_SHORT = Refusal(
    "text-too-short", "windows", "lesion",
    "the text is {tokens} tokens; --seq {seq} needs at least {need}",
    {"tokens": 6, "seq": 8, "need": 9},
)  # fmt: skip
#: windows longer than the model's context, asked of the library
SEQ_OVER_CONTEXT = Refusal(
    "seq-over-context", "windows", "",
    "seq {seq} is longer than the model's context of {context}",
    {"seq": 64, "context": 16},
)  # fmt: skip
#: no run given to compare
NO_RUN = Refusal("no-run", "runs", "", "no run to compare", {})

# --------------------------------------------------------------------------- paths

#: several SOURCEs without --every-checkpoint
SEVERAL_SOURCES = Refusal(
    "several-sources", "paths", "paths",
    "{count} SOURCEs given; several are compared only with --every-checkpoint (one run "
    "directory each)",
    {"count": 2},
)  # fmt: skip
#: a split of more branches than :data:`resgrad.lab.paths.exact.MAX_SPLIT_BRANCHES`;
#: ``vjps`` is n(n + 1)/2
SPLIT_TOO_LARGE = Refusal(
    "split-too-large", "paths", "paths",
    "the split of {n:,} branches needs n(n + 1)/2 = {vjps:,} branch VJPs; expected at most "
    "{most:,} branches (a depth of that many sublayers)",
    {"n": 4097, "vjps": 8394753, "most": 4096},
)  # fmt: skip
#: the lesson's stack with an activation it does not have
UNKNOWN_ACTIVATION = Refusal(
    "unknown-activation", "paths", "",
    "unknown activation {activation!r}; expected one of {expected}",
    {"activation": "relu", "expected": "tanh, linear"},
)  # fmt: skip
#: a stack of depth 0, or of a depth that is not an integer
DEPTH_NOT_POSITIVE = Refusal(
    "depth-not-positive", "paths", "",
    "depth must be a positive integer, got {depth!r}",
    {"depth": 0},
)  # fmt: skip
#: a bank of fewer matrices than layers
BANK_TOO_SMALL = Refusal(
    "bank-too-small", "paths", "",
    "depth {depth} needs {depth} matrices but the bank holds {matrices}",
    {"depth": 20, "matrices": 12},
)  # fmt: skip
#: a path through a branch the chain does not have; ``last`` is n - 1
BRANCH_NOT_IN_CHAIN = Refusal(
    "branch-not-in-chain", "paths", "",
    "branch {branch} is not one of the chain's 0..{last}",
    {"branch": 40, "last": 39},
)  # fmt: skip
#: a path length outside 0..n
PATH_LENGTH_OUT_OF_RANGE = Refusal(
    "path-length-out-of-range", "paths", "",
    "path length {k} is outside 0..{n}",
    {"k": 41, "n": 40},
)  # fmt: skip
#: Veit's protocol with no sample
SAMPLES_NOT_POSITIVE = Refusal(
    "samples-not-positive", "paths", "",
    "samples must be a positive integer, got {samples!r}",
    {"samples": 0},
)  # fmt: skip
#: more paths to enumerate than :data:`resgrad.lab.paths.veit.MAX_EXACT_PATHS`
TOO_MANY_PATHS = Refusal(
    "too-many-paths", "paths", "",
    "{paths} paths to enumerate; expected at most {most} (use veit_sample)",
    {"paths": 1048576, "most": 65536},
)  # fmt: skip
#: shares that are no distribution over k
BAD_SHARES = Refusal(
    "bad-shares", "paths", "",
    "shares must be a non-empty list of finite non-negative numbers",
    {},
)  # fmt: skip
#: a mass outside (0, 1]
MASS_OUT_OF_RANGE = Refusal(
    "mass-out-of-range", "paths", "",
    "mass must be in (0, 1], got {mass!r}",
    {"mass": 1.5},
)  # fmt: skip
#: a table or figure of no split; ``function`` names it
NO_SPLIT = Refusal(
    "no-split", "paths", "",
    "{function} needs at least one split",
    {"function": "path_table"},
)  # fmt: skip
#: a table or figure of a split by (a, m); ``does`` is what ``function`` does with a split
JOINT_SPLIT = Refusal(
    "joint-split", "paths", "",
    "{function} {does} per-k splits; this one is joint (split by (a, m))",
    {"function": "path_table", "does": "reads"},
)  # fmt: skip
#: a figure of splits of different models
UNLIKE_SPLITS = Refusal(
    "unlike-splits", "paths", "",
    "path_figure needs splits of one model (the same n and boundaries)",
    {},
)  # fmt: skip
#: a figure of Veit estimates that leave out some k
VEIT_KS_MISSING = Refusal(
    "veit-ks-missing", "paths", "",
    "path_figure needs Veit estimates of every k = 0..{n}",
    {"n": 40},
)  # fmt: skip

# --------------------------------------------------------------------------- lesion

#: a k outside 1..L (``hi``); ``value`` as given
K_OUT_OF_RANGE = Refusal(
    "k-out-of-range", "lesion", "lesion",
    "k {value!r} is out of range; expected an integer in {lo}..{hi:,} (the model has L = "
    "{hi} blocks)",
    {"value": 21, "lo": 1, "hi": 20},
)  # fmt: skip
#: a k of pairs that needs more blocks than the model has; ``blocks`` is 2k, ``most`` L // 2
PAIRS_K_TOO_LARGE = Refusal(
    "pairs-k-too-large", "lesion", "lesion",
    "k {k} pairs swap {blocks} blocks but the model has L = {L}; expected k in 1..{most} "
    "with pairs (or leave pairs out of the interventions)",
    {"k": 11, "blocks": 22, "L": 20, "most": 10},
)  # fmt: skip
#: --samples over :data:`resgrad.lab.lesion.interventions.MAX_SAMPLES`
SAMPLES_OUT_OF_RANGE = Refusal(
    "samples-out-of-range", "lesion", "lesion",
    "--samples {samples:,} is out of range; expected 1..{most:,} random sets per k",
    {"samples": 10001, "most": 10000},
)  # fmt: skip
#: --sample-seed outside numpy's seeds
SAMPLE_SEED_OUT_OF_RANGE = Refusal(
    "sample-seed-out-of-range", "lesion", "lesion",
    "--sample-seed {seed} is out of range; expected a seed in [0, 2**32)",
    {"seed": 4294967296},
)  # fmt: skip
#: a block the model does not have; ``last`` is L - 1
NO_SUCH_BLOCK = Refusal(
    "no-such-block", "lesion", "lesion",
    "block {block!r} does not exist: the model has blocks 0..{last}",
    {"block": 20, "last": 19},
)  # fmt: skip
#: swap i of the top block, which has no block i + 1 (``next``)
SWAP_PAST_TOP = Refusal(
    "swap-past-top", "lesion", "lesion",
    "swap {i} needs blocks {i} and {next}; the model has blocks 0..{last} (swap takes i in "
    "0..{most})",
    {"i": 19, "next": 20, "last": 19, "most": 18},
)  # fmt: skip
#: a swap in a stack of one block
SWAP_NEEDS_TWO = Refusal(
    "swap-needs-two", "lesion", "lesion",
    "a swap needs two blocks; the model has L = {L} block",
    {"L": 1},
)  # fmt: skip
#: attn or mlp of the lesson's stack, whose layers have one branch
LESSON_INTERVENTION = Refusal(
    "lesson-intervention", "lesion", "lesion",
    "unknown intervention {what!r} (the lesson's stack has one branch a layer); expected one "
    "of {expected}",
    {"what": "attn", "expected": "block, delete, swap, pairs"},
)  # fmt: skip
#: a plan of more than :data:`resgrad.lab.lesion.interventions.MAX_LESIONS` interventions
TOO_MANY_INTERVENTIONS = Refusal(
    "too-many-interventions", "lesion", "lesion",
    "the study would hold {count:,} interventions; expected at most {most:,}: ask for fewer "
    "kinds, k or samples",
    {"count": 212621, "most": 100000},
)  # fmt: skip
#: the lesson's stack beside another SOURCE
LESSON_NOT_ALONE = Refusal(
    "lesson-not-alone", "lesion", "lesion",
    "'lesson' is compared with nothing else: give it alone",
    {},
)  # fmt: skip
#: an intervention that is not one of :data:`resgrad.lab.lesion.interventions.KINDS`
UNKNOWN_INTERVENTION = Refusal(
    "unknown-intervention", "lesion", "",
    "unknown intervention {what!r}; expected one of {expected}",
    {"what": "drop", "expected": "attn, mlp, block, delete, swap, pairs"},
)  # fmt: skip
#: N, the random sets per k, outside 1..MAX_SAMPLES (``hi``)
PLAN_SAMPLES_OUT_OF_RANGE = Refusal(
    "plan-samples-out-of-range", "lesion", "",
    "N (samples) {value!r} is out of range; expected an integer in {lo}..{hi:,}",
    {"value": 0, "lo": 1, "hi": 10000},
)  # fmt: skip
#: the random sets' seed outside 0..2**32 - 1 (``hi``)
PLAN_SEED_OUT_OF_RANGE = Refusal(
    "plan-seed-out-of-range", "lesion", "",
    "sample seed {value!r} is out of range; expected an integer in {lo}..{hi:,}",
    {"value": -1, "lo": 0, "hi": 4294967295},
)  # fmt: skip
#: a window (or bank) seed outside 0..2**32 - 1 (``hi``)
SEED_OUT_OF_RANGE = Refusal(
    "seed-out-of-range", "lesion", "",
    "seed {value!r} is out of range; expected an integer in {lo}..{hi:,}",
    {"value": -1, "lo": 0, "hi": 4294967295},
)  # fmt: skip
#: a stack of no block, or of a number of blocks that is not an integer
L_NOT_POSITIVE = Refusal(
    "l-not-positive", "lesion", "",
    "L must be a positive integer, got {L!r}",
    {"L": 0},
)  # fmt: skip
#: a branch other than attn or mlp
UNKNOWN_BRANCH = Refusal(
    "unknown-branch", "lesion", "",
    "unknown branch {branch!r}; expected attn or mlp",
    {"branch": "ffn"},
)  # fmt: skip
#: a deletion of no block
NO_BLOCK_TO_DELETE = Refusal(
    "no-block-to-delete", "lesion", "",
    "delete_blocks needs at least one block",
    {},
)  # fmt: skip
#: swapped pairs that share a block, or pair a block with itself
PAIRS_NOT_DISJOINT = Refusal(
    "pairs-not-disjoint", "lesion", "",
    "swapped pairs must be disjoint pairs of two blocks; got {pairs}",
    {"pairs": [(0, 1), (1, 2)]},
)  # fmt: skip
#: a swap of no pair
NO_PAIR_TO_SWAP = Refusal(
    "no-pair-to-swap", "lesion", "",
    "swap_blocks needs at least one pair",
    {},
)  # fmt: skip
#: a lesion planned for another number of blocks than the model's
LESION_FOR_OTHER_L = Refusal(
    "lesion-for-other-l", "lesion", "",
    "the lesion is for L = {lesion_L} blocks; the model has {model_L}",
    {"lesion_L": 12, "model_L": 6},
)  # fmt: skip
#: a study of no seed
NO_SEED = Refusal("no-seed", "lesion", "", "seeds must list at least one seed", {})
#: a seed listed twice
SEEDS_NOT_DISTINCT = Refusal(
    "seeds-not-distinct", "lesion", "",
    "seeds must be distinct, got {seeds}",
    {"seeds": [0, 1, 0]},
)  # fmt: skip
#: lesions that are not a plan for this stack; ``what`` is "the model" or "the stack"
LESIONS_NOT_PLANNED = Refusal(
    "lesions-not-planned", "lesion", "",
    "the lesions must be plan()'s for {what}'s L = {L}: the intact stack first",
    {"what": "the model", "L": 6},
)  # fmt: skip
#: a lesion of one branch of the lesson's stack
LESSON_ONE_BRANCH = Refusal(
    "lesson-one-branch", "lesion", "",
    "the lesson's stack has one branch a layer: delete layers, not attention or MLP",
    {},
)  # fmt: skip
#: runs averaged whose studies planned different interventions
INTERVENTIONS_DIFFER = Refusal(
    "interventions-differ", "lesion", "",
    "the runs were given different interventions; study them alike",
    {},
)  # fmt: skip
#: a figure of no row
NO_ROWS = Refusal("no-rows", "lesion", "", "lesion_figure needs rows", {})
#: a figure of a metric the rows do not have
UNKNOWN_METRIC = Refusal(
    "unknown-metric", "lesion", "",
    "unknown metric {metric!r}; expected one of {expected}",
    {"metric": "loss", "expected": "ce, dce, agree, acc, kl"},
)  # fmt: skip

# --------------------------------------------------------------------------- flow

#: --text without --from-pretrained
FLOW_TEXT_WITHOUT_MODEL = Refusal(
    "flow-text-without-model", "flow", "flow",
    "--text is the input of --from-pretrained; give that too",
    {},
)  # fmt: skip
#: --meta without --from-pretrained
FLOW_META_WITHOUT_MODEL = Refusal(
    "flow-meta-without-model", "flow", "flow",
    "--meta is the vocabulary of a --from-pretrained ckpt.pt; give that too",
    {},
)  # fmt: skip
#: --every-checkpoint without --from-pretrained
FLOW_EVERY_CHECKPOINT_WITHOUT_RUNS = Refusal(
    "flow-every-checkpoint-without-runs", "flow", "flow",
    "--every-checkpoint reads the run directories of --from-pretrained; give those too",
    {},
)  # fmt: skip
#: --from-pretrained without --text
FLOW_NEEDS_TEXT = Refusal(
    "flow-needs-text", "flow", "flow",
    "--from-pretrained needs --text FILE, the text to run the model on",
    {},
)  # fmt: skip
#: several --from-pretrained SOURCEs without --every-checkpoint
FLOW_SEVERAL_SOURCES = Refusal(
    "flow-several-sources", "flow", "flow",
    "{count} SOURCEs given to --from-pretrained; several are compared only with "
    "--every-checkpoint",
    {"count": 2},
)  # fmt: skip

#: every refusal, in the order the errors page shows them: by section (the shared parts,
#: paths, lesion, flow), a section's refusals of commands before those of the library
ALL: tuple[Refusal, ...] = (
    # long jobs and comparisons
    OVER_BUDGET,
    SEQ_TOO_LONG,
    UNLIKE_RUNS,
    RUN_GIVEN_TWICE,
    SAME_RUN_TWICE,
    NOT_ONE_RUN,
    SOURCE_GIVEN_TWICE,
    SAME_MODEL_TWICE,
    NOT_A_RUN_DIRECTORY,
    NO_KEPT_CHECKPOINT,
    NO_COMMON_ITERATION,
    EVERY_CHECKPOINT_LESSON,
    TEXT_TOO_SHORT,
    SEQ_OVER_CONTEXT,
    NO_RUN,
    # paths
    SEVERAL_SOURCES,
    SPLIT_TOO_LARGE,
    UNKNOWN_ACTIVATION,
    DEPTH_NOT_POSITIVE,
    BANK_TOO_SMALL,
    BRANCH_NOT_IN_CHAIN,
    PATH_LENGTH_OUT_OF_RANGE,
    SAMPLES_NOT_POSITIVE,
    TOO_MANY_PATHS,
    BAD_SHARES,
    MASS_OUT_OF_RANGE,
    NO_SPLIT,
    JOINT_SPLIT,
    UNLIKE_SPLITS,
    VEIT_KS_MISSING,
    # lesion
    K_OUT_OF_RANGE,
    PAIRS_K_TOO_LARGE,
    SAMPLES_OUT_OF_RANGE,
    SAMPLE_SEED_OUT_OF_RANGE,
    NO_SUCH_BLOCK,
    SWAP_PAST_TOP,
    SWAP_NEEDS_TWO,
    LESSON_INTERVENTION,
    TOO_MANY_INTERVENTIONS,
    LESSON_NOT_ALONE,
    UNKNOWN_INTERVENTION,
    PLAN_SAMPLES_OUT_OF_RANGE,
    PLAN_SEED_OUT_OF_RANGE,
    SEED_OUT_OF_RANGE,
    L_NOT_POSITIVE,
    UNKNOWN_BRANCH,
    NO_BLOCK_TO_DELETE,
    PAIRS_NOT_DISJOINT,
    NO_PAIR_TO_SWAP,
    LESION_FOR_OTHER_L,
    NO_SEED,
    SEEDS_NOT_DISTINCT,
    LESIONS_NOT_PLANNED,
    LESSON_ONE_BRANCH,
    INTERVENTIONS_DIFFER,
    NO_ROWS,
    UNKNOWN_METRIC,
    # flow
    FLOW_TEXT_WITHOUT_MODEL,
    FLOW_META_WITHOUT_MODEL,
    FLOW_EVERY_CHECKPOINT_WITHOUT_RUNS,
    FLOW_NEEDS_TEXT,
    FLOW_SEVERAL_SOURCES,
)
