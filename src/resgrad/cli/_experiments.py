"""What ``resgrad experiment NAME`` takes: each experiment's flags, with its own defaults in
its help, and the flags of the others hidden (registered by :mod:`resgrad.cli.experiment_cmds`
and :mod:`resgrad.cli.robustness_cmds`)."""

from __future__ import annotations

import argparse

from resgrad.cli import _common
from resgrad.lab import robustness
from resgrad.lab.experiments import ABOUT as EXPERIMENT_ABOUT
from resgrad.lab.experiments import BACKENDS, EXPERIMENTS, ExperimentConfig
from resgrad.nn.blocks import INITS, VARIANTS

# flag -> (ExperimentConfig field, type, help); None keeps the experiment's default
EXPERIMENT_FLAGS = [
    ("--variants", _common.name_list(VARIANTS), "residual schemes, comma-separated"),
    ("--depths", _common.int_list, "numbers of layers, comma-separated"),
    ("--lrs", _common.positive_float_list, "peak learning rates, comma-separated"),
    ("--warmups", _common.nonneg_int_list, "warm-up steps, comma-separated (0: none)"),
    ("--seeds", _common.seeds, "every cell's seeds: a count K (0..K-1) or a list, e.g. "
     "100,101,102 or 100-102"),
    ("--max-iters", _common.positive_int, "steps per cell"),
    ("--n-embd", _common.positive_int, "width C"),
    ("--n-head", _common.positive_int, "heads H"),
    ("--block-size", _common.positive_int, "context length T"),
    ("--batch-size", _common.positive_int, "sequences per step B"),
    ("--eval-interval", _common.positive_int, "steps between evaluations"),
    ("--eval-iters", _common.positive_int, "batches per split per evaluation"),
    ("--grad-clip", _common.finite_float, "clip the global gradient norm (0: off)"),
    ("--init", None, "weight initialization"),
    ("--data", str, "a UTF-8 text file (default: the built-in corpus)"),
]  # fmt: skip


# robustness's own flags, and the experiments' flags it does not take
ROBUSTNESS_FLAGS = [
    ("--doses", _common.list_of(_common.finite_float, "numbers"), "robustness: rezero's alpha "
     "at initialization, comma-separated: the dose that moves path length inside a scheme"),
    ("--powers", _common.list_of(_common.finite_float, "numbers"), "robustness: ln-scaling's "
     "exponent p (block l's LayerNorm outputs times 1/l^p), comma-separated: its dose"),
    ("--pilot-iters", _common.positive_int, "robustness: steps of each pilot model (the pilot "
     "picks each scheme and depth's learning rate among --lrs)"),
    ("--permutations", _common.nonneg_int, "robustness: shuffles of the calibration (0: none)"),
    ("--levels", _common.positive_float_list, "robustness: validation losses to compare the "
     "models at (default: 4 inside the range every model reaches)"),
    ("--keep-every", _common.positive_int, "robustness: steps between kept checkpoints"),
    ("--budget", _common.positive_float, "robustness: refuse a study estimated longer than "
     "this many seconds"),
]  # fmt: skip
ROBUSTNESS_ONLY = ("--doses", "--powers", "--pilot-iters", "--permutations", "--levels",
                   "--keep-every", "--budget", "--quick", "--plot", "--format")  # fmt: skip
NOT_ROBUSTNESS = ("--warmups", "--eval-interval", "--eval-iters", "--grad-clip",
                  "--init", *_common.LOG_FLAGS, "--log-to")  # fmt: skip


NAMES = (*EXPERIMENTS, "robustness")
ABOUT = {**EXPERIMENT_ABOUT, "robustness": f"{robustness.QUESTION} (6 schemes, rezero's alpha "
         "at initialization and ln-scaling's exponent as doses, a pilot's learning rate per "
         "scheme and depth, every kept checkpoint read with resgrad paths and resgrad "
         "lesion)"}  # fmt: skip
SUMMARY = f"the papers' training experiments over seeds ({', '.join(NAMES)})"


def register_one(names: argparse._SubParsersAction, name: str, func) -> None:
    """``resgrad experiment NAME``: its own flags, each with NAME's default. The flags of the
    other experiments are hidden, and refused by cmd_experiment in one line saying why."""
    study = name == "robustness"
    p = names.add_parser(
        name,
        help=ABOUT[name],
        description=f"{ABOUT[name][0].upper()}{ABOUT[name][1:]}. "
        + ("Every model trains and is read at each kept checkpoint, then path length is "
           "compared with lesion cost at each loss level, with a bootstrap interval over "
           "training seeds and a verdict (docs: guide/robustness.md)." if study else
           "Writes a table (summary.md), every cell (cells.csv), a figure and the runs.")
        + f" Run again after a crash or Ctrl-C: finished {'models' if study else 'cells'} "
        "are kept.",
    )  # fmt: skip
    given = defaults(name)
    p.add_argument("--out-dir", default=None, help=f"where the runs and results go (default: "
                   f"out/experiment-{name})")  # fmt: skip
    hidden = ROBUSTNESS_ONLY if not study else NOT_ROBUSTNESS
    for flag, typ, help_ in EXPERIMENT_FLAGS + ROBUSTNESS_FLAGS:
        kw = {"choices": INITS} if flag == "--init" else {}
        help_ = help_.removeprefix("robustness: ").split(" (default:")[0]
        if study:  # the study's unit is a model, the experiments' a cell
            help_ = help_.replace("every cell's", "every model's").replace("per cell", "per model")
            if flag == "--lrs":
                help_ = ("the pilot's candidate peak learning rates, comma-separated: each "
                         "scheme and depth trains at the one whose pilot ends lowest (one "
                         "rate: every model at it, no pilot)")  # fmt: skip
        if flag in given:
            help_ += f" (default: {given[flag]})"
        p.add_argument(flag, type=typ or str, default=None,
                       help=argparse.SUPPRESS if flag in hidden else help_, **kw)  # fmt: skip
    p.add_argument("--quick", action="store_true", help=argparse.SUPPRESS if not study else
                   "the small study CI runs (3 schemes, L=2, 2 doses, 60 steps: under a "
                   "minute on 2 cores); its verdicts are a smoke test")  # fmt: skip
    p.add_argument("--plot", metavar="FILE", help=argparse.SUPPRESS if not study else
                   "six panels (.png or .svg)")  # fmt: skip
    p.add_argument(
        "--format",
        choices=("table", "json", "csv"),
        default="table",
        help=argparse.SUPPRESS if not study else "output format (default: table)",
    )
    p.add_argument("--jobs", type=_common.positive_int, default=None,
                   help="local worker processes (default: every core)")  # fmt: skip
    p.add_argument("--backend", choices=BACKENDS, default="loky",
                   help="loky: local cores; dask: a cluster at --scheduler "
                        "(default: loky)")  # fmt: skip
    p.add_argument("--scheduler", default=None, help="Dask scheduler address, tcp://HOST:PORT")
    p.add_argument("--connect-timeout", type=_common.positive_float, default=5.0,
                   help="seconds to wait for the scheduler (default: 5)")  # fmt: skip
    _common.add_log_to(p, "each cell (a run named after it)")
    _common.add_threads(p)
    for action in p._actions:  # robustness's models log nowhere: its log flags are hidden
        if set(action.option_strings) & set(hidden):
            action.help = argparse.SUPPRESS
    p.set_defaults(func=func)


def defaults(name: str) -> dict[str, str]:
    """Each flag's default in experiment ``name``, as typed (a flag absent: no default)."""

    def shown(value) -> str:  # a list comma-separated, a float as short as it goes
        if isinstance(value, (tuple, list)):
            return ",".join(shown(v) for v in value)
        return f"{value:g}" if isinstance(value, float) else str(value)

    if name != "robustness":
        cfg = ExperimentConfig.defaults(name)
        return {f: shown(getattr(cfg, _common.field(f))) for f, *_ in EXPERIMENT_FLAGS} | {
            "--data": "the built-in corpus"}  # fmt: skip
    cfg, quick = robustness.RobustnessConfig(), robustness.RobustnessConfig.quick()
    out = {f: shown(getattr(cfg, _common.field(f))) for f, *_ in EXPERIMENT_FLAGS
           if hasattr(cfg, _common.field(f))}  # fmt: skip
    out |= {"--variants": shown(cfg.schemes), "--doses": shown(cfg.doses),
            "--powers": shown(cfg.powers), "--pilot-iters": shown(cfg.pilot_iters),
            "--permutations": shown(cfg.permutations), "--lrs": shown(cfg.lrs),
            "--keep-every": shown(cfg.keep_every), "--budget": shown(robustness.BUDGET_S),
            "--levels": f"{cfg.n_levels} inside the range every model reaches",
            "--data": "the built-in corpus"}  # fmt: skip
    for f, k in (*((f, _common.field(f)) for f, *_ in EXPERIMENT_FLAGS + ROBUSTNESS_FLAGS),
                 ("--variants", "schemes")):  # fmt: skip
        if f in out and hasattr(cfg, k) and getattr(quick, k) != getattr(cfg, k):
            out[f] += f"; --quick: {shown(getattr(quick, k))}"
    return out
