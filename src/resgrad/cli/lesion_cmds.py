"""``resgrad lesion``: delete, swap and reorder blocks at test time, on a model or the lesson."""

from __future__ import annotations

import argparse

from resgrad.cli import _common
from resgrad.lab import lesion
from resgrad.lab.study import (
    across_runs,
    common_steps,
    every_checkpoint,
    refuse_repeated,
    run_names,
)
from resgrad.lab.study.refusals import EVERY_CHECKPOINT_LESSON, LESSON_NOT_ALONE
from resgrad.plots import check_plot_path
from resgrad.train.data import read_text
from resgrad.train.source import LESSON

FORMATS = ("table", "json", "csv")
LESSON_FLAGS = ("--depth", "--plain")
MODEL_FLAGS = ("--text", "--meta", "--best", "--seq", "--batch")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "lesion",
        help="delete, swap and reorder blocks at test time: how much does the model lose?",
        description="A lesion study (Veit et al. 2016, section 4; Lad et al. 2024): at test "
        "time, with no retraining, delete one attention or MLP branch, one block, k random "
        "blocks, swap adjacent blocks or k random pairs, and measure each on text windows "
        "against the intact model: mean cross-entropy and its change, top-1 agreement with "
        "the intact model, top-1 accuracy, KL(intact || lesioned). SOURCE is a resgrad run "
        "directory or checkpoint file, a Hugging Face GPT-2 directory or hub name, a nanoGPT "
        "ckpt.pt, or 'lesson' (the lesson's tanh stack, whose figure is the relative change "
        "of its output). A deleted branch contributes nothing: in pre-ln, residual, rezero and "
        "ln-scaling the skip carries x past it; in post-ln and deepnorm the LayerNorm after "
        "the sum stays (and DeepNorm's alpha); in none, which has no skip, the step passes x "
        "through. A swapped ln-scaling block keeps its own 1/l^p.",
    )
    p.add_argument(
        "source",
        metavar="SOURCE",
        nargs="+",
        help="run directory, checkpoint, model, or lesson; several models of one shape (e.g. "
        "one run per training seed): the mean ± std over them",
    )
    p.add_argument(
        "--what",
        type=_common.name_list(lesion.KINDS),
        default=None,
        help="interventions, comma-separated: attn, mlp (one branch deleted), block (one "
        "block deleted), delete (k random blocks deleted), swap (blocks i and i + 1 "
        "swapped), pairs (k random disjoint pairs swapped) (default: all; the lesson: block, "
        "delete, swap, pairs)",
    )
    p.add_argument("--k", type=_common.int_list, default=None,
                   help="k for delete (1..L) and pairs (1..L/2), comma-separated (default: "
                   "every k)")  # fmt: skip
    p.add_argument(
        "--samples",
        type=_common.positive_int,
        default=10,
        metavar="N",
        help=f"random sets drawn of each k, at most {lesion.MAX_SAMPLES:,}, where the k has "
        f"more than {lesion.EXACT_SETS} sets (C(L, k) for delete) and more than N; a k with "
        "fewer is exact, every set measured, and N does not apply to it. delete draws each "
        "block into as many sets, and the table gives the draw's 95%% sampling interval "
        "(default: 10)",
    )
    p.add_argument("--sample-seed", type=int, default=0, metavar="S",
                   help="seeds the random sets, in [0, 2**32) (default: 0)")  # fmt: skip
    p.add_argument(
        "--blocks",
        type=_common.nonneg_int_list,
        default=None,
        help="the layers of the single interventions (attn, mlp, block; swap i swaps i and "
        "i + 1), comma-separated (default: every one)",
    )
    _common.add_model_input(p)
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="draw three panels: the change in loss per deleted attention, MLP and block by "
        "layer; the k-deletion and k-swap curves with their spread; the adjacent swaps by "
        "layer (.png or .svg)",
    )
    _common.add_study_output(p, "the study", FORMATS)
    _common.add_threads(p)
    p.set_defaults(func=cmd_lesion, measures=True)  # says a long estimate off a terminal


def _study(args: argparse.Namespace, lesson: bool = False) -> lesion.LesionStudy:
    seeds = args.seeds or (lesion.LESSON_SEEDS if lesson else lesion.MODEL_SEEDS)
    return lesion.LesionStudy(
        seq=args.seq, batch=args.batch, seeds=seeds, what=args.what, ks=args.k,
        samples=args.samples, sample_seed=args.sample_seed, blocks=args.blocks,
        budget=args.budget, text_name=lesion.text_name(args.text),
        seq_default=not _common.typed(args.argv, ("--seq",)),
    )  # fmt: skip


def cmd_lesion(args: argparse.Namespace) -> int:
    if args.plot:
        check_plot_path(args.plot)  # a bad extension or destination fails before any work
    lesson = LESSON in args.source
    study = _study(args, lesson)  # refuses --sample-seed and --samples out of range
    refuse_repeated(args.source)
    if args.every_checkpoint:
        return _every_checkpoint(args, study)
    if lesson:
        if len(args.source) > 1:
            raise LESSON_NOT_ALONE()
        _common.refuse_with(args.argv, MODEL_FLAGS, "lesson",
                            "the lesson's stack has its own input")  # fmt: skip
        res = lesion.lesson_lesions(study, args.depth, residual=not args.plain)
        return _output(args, lesion.rows(res), res, res.label, 1)
    _common.refuse_with(args.argv, LESSON_FLAGS, "a model", "they shape the lesson's stack")
    text = read_text(args.text) if args.text is not None else None
    models = across_runs(study, args.source, text, text_path=args.text, best=args.best,
                         meta=args.meta)  # fmt: skip
    table, first, what = lesion.across_models(models)
    return _output(args, table, first, what, len(models))


def _output(args: argparse.Namespace, table: list, res, what: str, runs: int) -> int:
    if args.plot:  # saved before anything is printed: a reader that leaves loses no plot
        lesion.save_lesion_figure(args.plot, table, what)
    print(lesion.render(table, res, what, runs, args.format), end="")
    if args.plot:
        _common.wrote(args.plot, fmt=args.format)
    return 0


def _every_checkpoint(args: argparse.Namespace, study: lesion.LesionStudy) -> int:
    """``--every-checkpoint``: a summary line per kept checkpoint (table), or every row."""
    _common.refuse_with(args.argv, ("--best", "--meta", "--plot", *LESSON_FLAGS),
                        "--every-checkpoint", "it reads every checkpoint a run kept, one "
                        "study per checkpoint")  # fmt: skip
    if "lesson" in args.source:
        raise EVERY_CHECKPOINT_LESSON()
    text = read_text(args.text) if args.text is not None else None
    steps = common_steps(every_checkpoint(study, args.source, text))
    names = run_names(args.source)
    print(lesion.render_every_checkpoint(steps, names, study, args.format), end="")
    return 0
