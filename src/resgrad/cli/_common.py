"""Shared pieces of the CLI: a parser whose errors are one line, and flag types."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import os
import re
import shlex
import sys
from typing import NoReturn

from resgrad.lab.study import TIME_BUDGET_S
from resgrad.lab.study.budget import PROGRESS_AFTER_S, format_seconds
from resgrad.train.bpe import KINDS
from resgrad.train.loop import TrainingDiverged
from resgrad.train.trackers import LOG_TO, LogConfig, check_log_dir, require


def nearest(word: str, choices) -> str | None:
    """The choice closest to a misspelt ``word`` (difflib's ratio at least 0.6), or None."""
    close = difflib.get_close_matches(word, [str(c) for c in choices], n=1)
    return close[0] if close else None


def did_you_mean(word: str, choices) -> str:
    """``"; did you mean 'X'?"`` naming the choice nearest ``word``, or ``""`` if none is."""
    near = nearest(word, choices)
    return f"; did you mean {near!r}?" if near is not None else ""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2, each
    prefixed by the command's whole name (``resgrad experiment robustness: error:``).

    A misspelt flag, subcommand or choice is named with the nearest valid one and a pointer
    to the command's help. Flags are matched whole (no abbreviations), so that :func:`typed`
    can tell which flags were typed. The command's name is left in the parsed namespace as
    ``prog``, so that errors raised later carry the same prefix (:func:`resgrad.cli.main`).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)

    def _help_pointer(self, what: str) -> str:
        return f"(`{self.prog} --help` lists the {what})"

    def _check_value(self, action, value):
        """A value outside ``choices``: named, with the nearest choice and the help."""
        if action.choices is not None and value not in action.choices:
            hint = did_you_mean(str(value), action.choices)
            listed = (self._help_pointer("choices") if hint else
                      f"(choose from {', '.join(map(repr, action.choices))})")  # fmt: skip
            raise argparse.ArgumentError(action, f"invalid choice: {value!r}{hint} {listed}")

    def parse_known_args(self, args=None, namespace=None):
        """As argparse's, but a command (a parser without subcommands) refuses what it does
        not know at once, in its own name: the first unknown flag and the nearest it has."""
        namespace, extras = super().parse_known_args(args, namespace)
        if any(isinstance(a, argparse._SubParsersAction) for a in self._actions):
            return namespace, extras  # its command refused them (or there is none)
        if extras:
            first = extras[0]
            if first.startswith("-"):
                flag = first.split("=", 1)[0]
                known = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
                self.error(f"unrecognized argument {flag}{did_you_mean(flag, known)} "
                           f"{self._help_pointer('flags')}")  # fmt: skip
            self.error(f"unrecognized argument {first!r} {self._help_pointer('arguments')}")
        namespace.prog = self.prog
        return namespace, extras


def wrote(path: str | os.PathLike, detail: str = "", *, fmt: str = "table") -> None:
    """Say what a command wrote, in the words every command uses.

    ``wrote FILE`` for a file; ``wrote DIR: a, b, c`` for a directory, listing what is in
    it now, sorted (a hidden file, such as a run's lock, left out); then `` (detail)`` if
    one is given. With ``fmt`` ``json`` or ``csv`` the line goes to stderr, so that stdout
    stays one parseable document.
    """
    line = f"wrote {os.fspath(path)}"
    if os.path.isdir(path):
        line += ": " + ", ".join(sorted(f for f in os.listdir(path) if not f.startswith(".")))
    if detail:
        line += f" ({detail})"
    print(line, file=sys.stdout if fmt == "table" else sys.stderr)


def long_work(args: argparse.Namespace, out_dir: str, writes: str, kept: str, resume: str,
              kept_path: str | None = None):  # fmt: skip
    """What a command that keeps its work says, before and after: a ``plan`` callback for
    the library (called with the estimated seconds and what the work is), which says on
    stderr, terminal or not, when the work is estimated over PROGRESS_AFTER_S: the
    estimate, what it writes where (``writes``, in ``out_dir``), and how to resume; and,
    for Ctrl-C (:func:`resgrad.cli.main`), ``args.interrupted``: what was ``kept`` and the
    command (``resume``) that goes on, or that nothing was kept where ``kept_path`` (default
    ``out_dir``) is not there.
    """

    def interrupted() -> str:
        if not os.path.exists(kept_path or out_dir):
            return f"nothing was kept in {out_dir}"
        return f"kept {kept} in {out_dir}; to resume: {resume}"

    def plan(seconds: float, work: str) -> None:
        if seconds > PROGRESS_AFTER_S:
            print(f"{args.prog}: {work}: about {format_seconds(seconds)}; writes {writes} in "
                  f"{out_dir}; Ctrl-C keeps {kept}, and `{resume}` resumes",
                  file=sys.stderr, flush=True)  # fmt: skip

    args.interrupted = interrupted
    return plan


def same_command(args: argparse.Namespace) -> str:
    """The command line that ran, as typed: ``resgrad experiment warmup --seeds 3``."""
    return shlex.join(["resgrad", *args.argv])


def typed(argv: list[str], flags: tuple[str, ...]) -> list[str]:
    """The ``flags`` that ``argv`` typed (``--flag value`` or ``--flag=value``), in order."""
    given = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    return [f for f in flags if f in given]


def refuse_with(argv: list[str], flags: tuple[str, ...], other: str, why: str) -> None:
    """A one-line ValueError if ``argv`` typed any of ``flags`` beside ``other``, which
    decides what they would set (they would be ignored, not applied)."""
    clash = typed(argv, flags)
    if clash:
        raise ValueError(f"{', '.join(clash)} cannot be combined with {other}: {why}")


def positive_int(text: str) -> int:
    """A flag value that must be an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


MAX_SEEDS = 100_000  # seeds one command averages over: more is a typo, not a measurement


def seed_count(text: str) -> int:
    """A number of seeds: an integer from 1 to MAX_SEEDS."""
    value = positive_int(text)
    if value > MAX_SEEDS:
        raise argparse.ArgumentTypeError(
            f"expected at most {MAX_SEEDS:,} seeds, got {text!r}; each is a measurement of its own"
        )
    return value


def seeds(text: str) -> tuple[int, ...]:
    """``--seeds``: a count K (``3``: seeds 0, 1, 2) or the seeds themselves, comma-separated,
    a range LOW-HIGH standing for every seed from LOW to HIGH (``100,101,102``, ``100-102``,
    ``7-7`` for seed 7 alone); distinct, each in [0, 2**32), at most MAX_SEEDS of them."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) == 1 and re.fullmatch(r"[0-9]+", parts[0]):  # a count
        if int(parts[0]) < 1:
            raise argparse.ArgumentTypeError(f"expected at least one seed, got {text!r}")
        return tuple(range(seed_count(parts[0])))
    spans = []
    for p in parts:
        m = re.fullmatch(r"([0-9]+)(?:-([0-9]+))?", p)
        if m is None:
            why = "seeds >= 0" if re.fullmatch(r"-[0-9]+", p) else "a seed or a range LOW-HIGH"
            raise argparse.ArgumentTypeError(
                f"expected {why}, got {p!r} in {text!r} (--seeds takes a number of seeds K, "
                "meaning 0..K-1, or a comma-separated list such as 100,101,102 or 100-102)"
            )
        lo, hi = int(m[1]), int(m[2] or m[1])
        if hi >= 2**32:
            raise argparse.ArgumentTypeError(f"expected seeds in [0, 2**32), got {hi} in {text!r}")
        if lo > hi:
            raise argparse.ArgumentTypeError(
                f"expected a range LOW-HIGH with LOW <= HIGH, got {p!r} in {text!r}"
            )
        spans.append((lo, hi))
    n = sum(hi - lo + 1 for lo, hi in spans)
    if n > MAX_SEEDS:  # counted before they are listed
        raise argparse.ArgumentTypeError(
            f"expected at most {MAX_SEEDS:,} seeds, got {n:,} in {text!r}; each is a "
            "measurement of its own"
        )
    out, seen = tuple(s for lo, hi in spans for s in range(lo, hi + 1)), set()
    for s in out:
        if s in seen:
            raise argparse.ArgumentTypeError(f"expected distinct seeds, got {text!r} ({s} twice)")
        seen.add(s)
    return out


def nonneg_int(text: str) -> int:
    """A flag value that must be an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return value


def seed(text: str) -> int:
    """A seed: an integer in [0, 2**32)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"expected a seed in [0, 2**32), got {text!r}")
    return value


def finite_float(text: str) -> float:
    """A flag value that must be a finite real number."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A flag value that must be a finite number > 0."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def list_of(item, what: str):
    """A flag type for a comma-separated list, each part parsed by ``item`` (e.g. ``1,5,10``)."""

    def parse(text: str) -> tuple:
        parts = [p.strip() for p in text.split(",")]
        if not text.strip() or any(p == "" for p in parts):
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated list of {what}, got {text!r}"
            )
        return _distinct(tuple(item(p) for p in parts), text)

    return parse


def _distinct(values: tuple, text: str) -> tuple:
    """``values``, refused if one comes twice: a second copy is a slip, not a request."""
    twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if twice is not None:
        raise argparse.ArgumentTypeError(f"expected distinct values, got {text!r} ({twice} twice)")
    return values


def one_of(choices: tuple[str, ...]):
    """A flag type for one name of ``choices``, refused in the words of :func:`name_list`'s
    lists rather than argparse's "invalid choice" (``--tokenizer``)."""

    def parse(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(choices)}, got {text!r}")
        return text

    return parse


int_list = list_of(positive_int, "positive integers")  # e.g. depths 1,5,10,20
nonneg_int_list = list_of(nonneg_int, "non-negative integers")  # e.g. blocks 0,5,11
positive_float_list = list_of(positive_float, "positive numbers")  # e.g. learning rates


def name_list(choices: tuple[str, ...]):
    """A comma-separated list of names, each one of ``choices``."""

    def parse(text: str) -> tuple[str, ...]:
        parts = [p.strip() for p in text.split(",")]
        if not text.strip() or any(p == "" for p in parts):
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
        for p in parts:
            if p not in choices:
                raise argparse.ArgumentTypeError(
                    f"unknown name {p!r}; expected one of {', '.join(choices)}"
                    + did_you_mean(p, choices)
                )
        return _distinct(tuple(parts), text)

    return parse


def field(flag: str) -> str:
    """The attribute a ``--flag-name`` sets: ``flag_name``."""
    return flag[2:].replace("-", "_")


def given(args: argparse.Namespace, table) -> dict:
    """The settings that the flags of ``table`` (rows whose first item is a flag, declared
    with default None) were given, by field name; a flag left out keeps the library's
    default (a resumed run's: the checkpoint's)."""
    values = {field(row[0]): getattr(args, field(row[0])) for row in table}
    return {k: v for k, v in values.items() if v is not None}


def config_from(args: argparse.Namespace, cls):
    """The dataclass ``cls`` built from the parsed flags named after its fields."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in vars(args).items() if k in names})


def flag_names(fields) -> tuple[str, ...]:
    """The ``--flag-name`` of every field (``flag_name``), in order."""
    return tuple("--" + k.replace("_", "-") for k in fields)


def unless_diverged(command: str, fn, *args, **kwargs):
    """Call fn (a training); a divergence is reported on one line and gives None (the
    caller exits 1)."""
    try:
        return fn(*args, **kwargs)
    except TrainingDiverged as e:
        print(f"resgrad {command}: {e}", file=sys.stderr)
        return None


def add_threads(p: argparse.ArgumentParser, default_note: str = "") -> None:
    """``--threads N``: BLAS threads for the command (applied by ``resgrad.cli.main``; the
    default is :func:`resgrad.perf.threads.load_aware_threads`). ``default_note`` adds what
    else the command's default does."""
    p.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="BLAS threads for the matrix products (default: one per core that other "
        f"processes leave free as the command starts, at least 1{default_note}, where this "
        "BLAS gives the same bits on every count; where it does not (OpenBLAS's Haswell and "
        "Zen kernels), one per core whatever the load, so that no number depends on the "
        "load); waiting BLAS threads spin, so more threads than free cores is slower",
    )


LOG_FLAGS = ("--log-dir", "--hist-every", "--project", "--run-name")


def add_log_to(p: argparse.ArgumentParser, what: str = "the run") -> None:
    """``--log-to tensorboard,wandb,trackio`` and its settings: dashboards for ``what``."""
    d = LogConfig()
    p.add_argument(
        "--log-to",
        type=name_list(LOG_TO),
        default=(),
        help=f"also send {what}'s losses, per-layer dynamics and histograms to these "
        f"dashboards, comma-separated: {', '.join(LOG_TO)} (each an optional extra, "
        'e.g. pip install "resgrad[tensorboard]"; wandb runs offline)',
    )
    p.add_argument(
        "--log-dir",
        default=None,
        help="TensorBoard's log directory, the run in a subdirectory named after it, so that "
        "runs logged to one --log-dir sit side by side (default: tb/ in the output directory)",
    )
    p.add_argument(
        "--hist-every",
        type=nonneg_int,
        default=d.hist_every,
        help=f"steps between parameter and gradient histograms (0: none; default: {d.hist_every})",
    )
    p.add_argument(
        "--project", default=d.project, help=f"wandb/trackio project (default: {d.project})"
    )
    p.add_argument("--run-name", default=None, help="the run's name in TensorBoard, wandb and "
                   "trackio (default: the output directory's name)")  # fmt: skip


def log_config(args: argparse.Namespace) -> LogConfig:
    """The LogConfig the flags of :func:`add_log_to` ask for; its trackers are importable."""
    clash = typed(args.argv, LOG_FLAGS)
    if clash and not args.log_to:  # it would be ignored without a word
        raise ValueError(f"{', '.join(clash)} sets how a dashboard logs; it needs --log-to")
    to = f"--log-to {','.join(args.log_to)}"
    if "tensorboard" not in args.log_to:
        refuse_with(args.argv, ("--log-dir",), to, "it is TensorBoard's log directory")
    if not {"wandb", "trackio"} & set(args.log_to):
        refuse_with(args.argv, ("--project",), to, "it is a wandb or trackio project")
    log = LogConfig(to=args.log_to, dir=args.log_dir, hist_every=args.hist_every,
                    name=args.run_name, project=args.project)  # fmt: skip
    require(log.to)  # a missing extra is said before anything runs
    if log.dir is not None:
        check_log_dir(log.dir)  # a file, or nowhere to write, is said before anything runs
    return log


def add_model_input(p: argparse.ArgumentParser) -> None:
    """The flags of a command that reads a SOURCE model on text windows, or the lesson's
    stack (``paths``, ``lesion``): ``--text --meta --best --seq --batch --seeds --depth
    --plain``, described once."""
    p.add_argument("--text", metavar="FILE", help="UTF-8 text (default: the built-in corpus)")
    p.add_argument("--meta", metavar="PATH", help="nanoGPT's meta.pkl for a ckpt.pt")
    p.add_argument("--best", action="store_true", help="a run directory's best.ckpt")
    p.add_argument("--seq", type=positive_int, default=64, help="T (default: 64)")
    p.add_argument("--batch", type=positive_int, default=4, help="B (default: 4)")
    p.add_argument(
        "--seeds",
        type=seeds,
        default=None,
        help="batches to average over: a count K (seeds 0..K-1) or a list such as 3,5 or "
        "3-5 (default for a model: 3, mean ± std over the batches of seeds 0, 1, 2; for the "
        "lesson, the seeds of its bank of matrices, default 42: the lesson's own table)",
    )
    p.add_argument("--depth", type=positive_int, default=20,
                   help="the lesson's N (default: 20)")  # fmt: skip
    p.add_argument("--plain", action="store_true", help="the lesson's stack without + x")


def add_study_output(p: argparse.ArgumentParser, what: str, formats: tuple[str, ...]) -> None:
    """The flags ``paths`` and ``lesion`` share after their own: ``--every-checkpoint``,
    ``--format`` and ``--budget`` (the default :data:`resgrad.lab.study.budget.TIME_BUDGET_S`),
    described once; ``what`` names the command's result ("the split", "the study")."""
    p.add_argument(
        "--every-checkpoint",
        action="store_true",
        help=f"through training: {what} at every ckpt-<iter>.ckpt a run directory kept "
        "(resgrad train --keep-every N), on the same windows at every step; several run "
        "directories: the mean and std over them at every step they all kept",
    )
    p.add_argument(
        "--format", choices=formats, default="table", help="output format (default: table)"
    )
    p.add_argument(
        "--budget",
        type=positive_float,
        default=TIME_BUDGET_S,
        metavar="SECONDS",
        help="refuse, before it starts, work estimated to take longer than this (default: "
        f"{TIME_BUDGET_S:.0f}); the refusal says how long it would take and the budget to "
        "give it. Work estimated over a few seconds shows a progress bar on a terminal",
    )


# flag -> (TrainConfig field, type, help); nanoGPT's names with dashes. ``resgrad train``
# offers them all; ``resgrad depth-train`` some, with the same help where it says no other
TRAIN_FLAGS = [
    ("--n-layer", positive_int, "transformer blocks L"),
    ("--n-head", positive_int, "attention heads H (must divide --n-embd)"),
    ("--n-embd", positive_int, "width C of the residual stream"),
    ("--block-size", positive_int, "context length T"),
    ("--batch-size", positive_int, "sequences per step B"),
    ("--max-iters", nonneg_int, "total optimizer steps"),
    ("--lr", positive_float, "peak learning rate"),
    ("--min-lr", finite_float, "learning rate at the end of the cosine decay"),
    ("--warmup-iters", nonneg_int, "steps of linear warmup"),
    ("--lr-decay-iters", positive_int, "step where the cosine reaches --min-lr"),
    ("--weight-decay", finite_float, "AdamW decoupled weight decay (2-D weights only)"),
    ("--beta1", finite_float, "AdamW beta1"),
    ("--beta2", finite_float, "AdamW beta2"),
    ("--grad-clip", finite_float, "clip the global gradient norm to this (0: off)"),
    ("--dropout", finite_float, "dropout probability in [0, 1)"),
    ("--eval-interval", positive_int, "steps between evaluations and checkpoints"),
    ("--eval-iters", positive_int, "batches per split in each evaluation"),
    ("--variant", None, "residual scheme; 'none' removes the + x path"),
    ("--init", None, "weight initialization"),
    ("--activation", None, "the MLP's GELU: gelu_tanh, GPT-2's tanh form; gelu, the exact "
     "erf form (nanoGPT's nn.GELU())"),
    ("--rezero-alpha", finite_float, "rezero's alpha at initialization, every block's "
     "(Bachlechner et al.: 0); with --variant rezero only"),
    ("--ln-scaling-power", finite_float, "ln-scaling's exponent p: block l's LayerNorm "
     "outputs times 1/l^p (Sun et al. 2025: 0.5, the default; 0: pre-ln's function); with "
     "--variant ln-scaling only"),
    ("--seed", seed, "seed of the init, batches and dropout"),
    ("--data", str, "a UTF-8 text file (default: the Python reference manual, built in)"),
    ("--tokenizer", one_of(KINDS), "char: one token per character; bpe: a byte-level BPE "
     "trained on the data"),
    ("--vocab-size", positive_int, "tokens of the BPE (>= 256), with --tokenizer bpe"),
    ("--init-from", str, "fine-tune a pretrained GPT-2: hub name (gpt2), directory or ckpt.pt"),
    ("--meta", str, "nanoGPT's meta.pkl, the vocabulary of an --init-from ckpt.pt "
     "(default: data/<its dataset>/meta.pkl, as nanoGPT's sample.py finds it)"),
    ("--shards", positive_int, "compute each batch as this many shards on threads, "
     "gradients summed; changes only rounding (1: the plain pass)"),
    ("--keep-every", nonneg_int, "also keep the checkpoint ckpt-<iter>.ckpt every "
     "this many steps and at the end, for resgrad paths --every-checkpoint (0: none)"),
]  # fmt: skip


def add_flow_sizes(p: argparse.ArgumentParser, d, single: bool) -> None:
    """The sizes of ``flow`` (``single``: with --depth and --width) and ``sweep``: --heads,
    --seq, --batch, --init, --loss, their defaults from FlowConfig ``d``."""
    from resgrad.lab.flow import LOSSES
    from resgrad.nn.blocks import INITS

    if single:
        p.add_argument(
            "--depth", type=positive_int, default=d.depth, help=f"L (default: {d.depth})"
        )
        p.add_argument(
            "--width", type=positive_int, default=d.width, help=f"C (default: {d.width})"
        )
    p.add_argument("--heads", type=positive_int, default=d.heads, help=f"H (default: {d.heads})")
    p.add_argument("--seq", type=positive_int, default=d.seq, help=f"T (default: {d.seq})")
    p.add_argument("--batch", type=positive_int, default=d.batch, help=f"B (default: {d.batch})")
    p.add_argument("--init", choices=INITS, default=d.init, help=f"default: {d.init}")
    p.add_argument(
        "--loss",
        choices=LOSSES,
        default=d.loss,
        help="ones: the lesson's upstream gradient of ones; randn: a fixed Gaussian one; "
        "lm: a whole GPT's cross-entropy on random tokens (default: lm)",
    )
