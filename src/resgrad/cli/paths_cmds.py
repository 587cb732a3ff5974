"""``resgrad paths``: the gradient split by path length, on a trained model or the lesson."""

from __future__ import annotations

import argparse

from resgrad.cli import _common
from resgrad.lab import paths
from resgrad.lab.study import across_runs, run_names
from resgrad.lab.study.refusals import EVERY_CHECKPOINT_LESSON, SEVERAL_SOURCES
from resgrad.plots import check_plot_path
from resgrad.train.data import read_text
from resgrad.train.source import ALL, names_lesson, resolve_source

FORMATS = ("table", "json", "csv")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "paths",
        help="split the gradient at the embeddings by path length k (branches passed)",
        description="Split dL/dx_i at every block boundary, exactly, by the number k of "
        "sublayer branches (attention or MLP) a path passes between the loss and x_i; k = 0 "
        "is the identity highway. SOURCE is a resgrad run directory or checkpoint file, a "
        "Hugging Face GPT-2 directory or hub name, a nanoGPT ckpt.pt, or 'lesson' (the "
        "lesson's tanh stack). The table is for x_0, the embeddings' output: mean and std "
        "over --seeds batches.",
    )
    p.add_argument(
        "source",
        metavar="SOURCE",
        nargs="+",
        help="run directory, checkpoint, model, or lesson; with --every-checkpoint, one or "
        "more run directories (e.g. one per seed: mean ± std over them)",
    )
    _common.add_model_input(p)
    p.add_argument(
        "--veit",
        type=_common.positive_int,
        default=None,
        metavar="N",
        help="also Veit et al.'s protocol: N sampled single paths per k, on every seed's "
        "batch (the table gives their mean)",
    )
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="draw Veit et al.'s figure 6 for this model at x_0 (path counts, magnitude per "
        "path, total by k beside the exact split) and the share by (boundary, k): .png or .svg",
    )
    _common.add_study_output(p, "the split", FORMATS)
    _common.add_threads(p)
    p.set_defaults(func=cmd_paths, measures=True)  # says a long estimate off a terminal


def _study(args: argparse.Namespace) -> paths.PathsStudy:
    return paths.PathsStudy(seq=args.seq, batch=args.batch, seeds=args.seeds or paths.MODEL_SEEDS,
                            veit=args.veit or 0, budget=args.budget,
                            seq_default=not _common.typed(args.argv, ("--seq",)))  # fmt: skip


def cmd_paths(args: argparse.Namespace) -> int:
    if args.every_checkpoint:
        return _every_checkpoint(args)  # which refuses --plot
    if args.plot:
        check_plot_path(args.plot)  # a bad extension or destination fails before any work
    if len(args.source) > 1:
        raise SEVERAL_SOURCES(count=len(args.source))
    (source,) = args.source
    if names_lesson(source):
        _common.refuse_with(args.argv, ("--text", "--seq", "--batch"),
                            "lesson", "the lesson's stack has its own input")  # fmt: skip
        resolve_source(source, best=args.best, meta=args.meta, kinds=ALL)  # --best, --meta refused
        res = paths.lesson_paths(args.depth, args.seeds or paths.LESSON_SEEDS, args.veit or 0,
                                 residual=not args.plain, budget=args.budget)  # fmt: skip
    else:
        _common.refuse_with(args.argv, ("--depth", "--plain"), "a model",
                            "they shape the lesson's stack")  # fmt: skip
        text = read_text(args.text) if args.text is not None else None
        (m,) = across_runs(_study(args), [source], text, text_path=args.text, best=args.best,
                           meta=args.meta)  # fmt: skip
        res = m.result
    if args.plot:  # saved before anything is printed: a reader that leaves loses no plot
        paths.save_path_figure(args.plot, res.splits, res.veits, res.label)
    print(paths.render(res, args.format, args.veit or 0), end="")
    if args.plot:
        _common.wrote(args.plot, fmt=args.format)
    return 0


def _every_checkpoint(args: argparse.Namespace) -> int:
    """``--every-checkpoint``: one run's split at every kept checkpoint, or several runs'."""
    _common.refuse_with(args.argv, ("--best", "--meta", "--depth", "--plain", "--veit", "--plot"),
                        "--every-checkpoint", "it reads every checkpoint a run kept, "
                        "one split per checkpoint")  # fmt: skip
    if "lesson" in args.source:
        raise EVERY_CHECKPOINT_LESSON()
    text = read_text(args.text) if args.text is not None else None
    study = _study(args)
    runs = paths.through_training(study, args.source, text)
    if len(runs) == 1:
        name = run_names(args.source)[0]
        print(paths.render_every_checkpoint(runs[0], name, study, args.format), end="")
    else:
        first = runs[0][0].splits[0]
        print(paths.render_runs(paths.across_runs(runs), args.source, first.label, first.n,
                                study, args.format), end="")  # fmt: skip
    return 0
